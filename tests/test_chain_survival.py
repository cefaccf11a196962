"""How far an option's draft chains go on being accepted (:class:`ChainSurvival`): a chain seen only up to the
tokens a step emitted (it matched them all and goes on) is censored, not rejected. A spec table of what each
observation teaches, properties of the estimate, and the engine feeding it from every drafted step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import tiny_engine
from test_auto_sources import prompts
from test_engine_batching import request, run
from trtlade.reference.adaptive import AutoPolicy, ChainSurvival, CostTable
from trtlade.reference.batching import DRAFT_OPTIONS, SOURCE_OPTIONS


@pytest.mark.parametrize("accepted, length, censored, reached, kept", [
    (2, 4, False, [1, 1, 1], [1, 1, 0]),      # rejected at its third draft: positions 1-3 seen, 3 not accepted
    (4, 4, False, [1, 1, 1, 1], [1, 1, 1, 1]),  # accepted whole: nothing seen beyond its end
    (2, 6, True, [1, 1], [1, 1]),             # matched both emitted tokens and goes on: position 3 unseen
    (0, 3, False, [1], [0]),                  # its first draft rejected
    (0, 0, False, [], []),                    # an empty chain: nothing seen
])
def test_what_one_chain_teaches_each_position(accepted, length, censored, reached, kept):
    chains = ChainSurvival(keep=1.0)
    chains.add(accepted, length, censored)
    assert chains.reached == reached and chains.accepted == kept


def test_a_position_nobody_reached_is_priced_like_the_one_before():
    chains = ChainSurvival(keep=1.0)
    for _ in range(50):
        chains.add(2, 2, censored=False)  # chains of 2, always accepted whole: positions 3+ never seen
    rates = chains.rates(5)
    assert rates[2] == rates[3] == rates[4] == rates[1] > 0.95


observation = st.tuples(st.integers(0, 12), st.integers(0, 12), st.booleans()).map(
    lambda t: (min(t[0], t[1]), t[1], t[2] and t[0] < t[1]))


@settings(max_examples=200, deadline=None)
@given(seen=st.lists(observation, max_size=30), reached=st.integers(0, 12), length=st.integers(0, 12))
def test_a_censored_chain_counts_between_what_it_matched_and_its_length(seen, reached, length):
    chains = ChainSurvival()
    for accepted, chain, censored in seen:
        chains.add(accepted, chain, censored)
    rest = chains.beyond(reached, length)
    assert 0.0 <= rest <= max(0, length - reached)
    assert all(0.0 < p < 1.0 for p in chains.rates(length))


@settings(max_examples=100, deadline=None)
@given(seen=st.lists(observation, max_size=30), length=st.integers(1, 12), reached=st.integers(0, 11))
def test_a_chain_accepted_whole_never_lowers_what_the_others_are_expected_to_reach(seen, length, reached):
    chains = ChainSurvival(keep=1.0)
    for accepted, chain, censored in seen:
        chains.add(accepted, chain, censored)
    before = chains.beyond(reached, length)
    chains.add(length, length, censored=False)
    assert chains.beyond(reached, length) >= before - 1e-12


@pytest.mark.parametrize("censored_chains, counted", [(True, pytest.approx(5.97, abs=0.01)), (False, 2)])
def test_a_censored_chain_counts_for_what_the_source_s_chains_reach(censored_chains, counted):
    policy = AutoPolicy(CostTable(), censored_chains=censored_chains)
    seq = policy.new_sequence("repeat/suffix")
    for _ in range(6):
        policy.observe_chain(seq, 6, 6, censored=False)
    assert policy.observe_chain(seq, 2, 6, censored=True) == counted
    assert policy.observe_chain(seq, 2, 6, censored=False) == 2  # rejected: exact either way


def test_every_drafted_step_teaches_each_source_s_chains_whichever_option_ran():
    """Forced to one draft row (the first token of each candidate), the sources' chains are seen through the
    tokens each step emits: their positions 1 and 2 are counted, run or not, and nothing beyond 2 is seen."""
    eng = tiny_engine("llama", (2, 4, 2), adaptive=True, prompt_lookup=4)
    at = DRAFT_OPTIONS.index("first")
    eng.policy.plan = lambda fixed, candidates, caps=None: [at if options[at][1] > 0 else -1 for options in candidates]
    eng.policy.should_plan = lambda seqs: True
    batch = eng.new_batch(max_batch_size=1)
    run(batch, {0: [request(prompts()[0], None, max_tokens=40)]})
    chains = {key.split("/", 1)[1]: c for key, c in eng.policy._chains.items()}
    assert chains and set(chains) <= set(SOURCE_OPTIONS)
    assert all(len(c.reached) <= 2 for c in chains.values())
    assert eng.policy.counters.options == {"first": eng.policy.counters.drafted}


def test_version_shows_each_source_s_chain_rates_by_context():
    policy = AutoPolicy(CostTable())
    seq = policy.new_sequence("repeat/suffix")
    policy.observe_chain(seq, 3, 3, censored=False)  # accepted whole
    policy.observe_chain(seq, 1, 3, censored=False)  # rejected at its second draft
    # position 1: (2 + 2 x 1/2) / (2 + 2); 2: (1 + 2 x 0.75) / (2 + 2); 3: (1 + 2 x 0.625) / (1 + 2)
    assert policy.snapshot()["chain_rates_by_option"] == {
        "repeat/suffix": [pytest.approx(0.75, abs=2e-3), pytest.approx(0.625, abs=2e-3), pytest.approx(0.75, abs=2e-3)]}


def test_rates_read_while_a_chain_is_being_added_do_not_fail():
    """/version reads the rates from another thread: a position whose count is half-added is not read."""
    chains = ChainSurvival(keep=1.0)
    chains.add(2, 4, censored=False)
    chains.reached.append(1.0)  # the engine thread between its two appends
    assert len(chains.rates(5)) == 5
    assert chains.rates(5)[3] == chains.rates(5)[2]  # the half-added position priced like the one before

"""The ``auto`` policy over every drafter: one source's chain (SA's longest suffix, prompt lookup, the n-gram
pool), the first tokens, the candidates, the window. Whatever the plan picks, each step is lossless: here the
plan is replaced by random picks (every option, per sequence, per step) and the tokens must equal plain
decoding, fp32 and bf16, alone and batched, greedy and seeded sampling. Then the plan itself: options that
do not nest, options without a draft this step, and options that learn from steps they did not run.
"""

from __future__ import annotations

import dataclasses
import math
import random
from functools import lru_cache

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import tiny_engine, tiny_model, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.lookahead.algorithm import LookaheadAlgorithm
from trtlade.reference.adaptive import AutoPolicy, CostTable
from trtlade.reference.batching import DRAFT_OPTIONS, SOURCE_OPTIONS

MAX_TOKENS = 28
TEXTS = ["The cat sat on the mat. The cat sat on the mat. The dog sat on the",
         "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
         "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, n):\n        if",
         "Once upon a time there was a little robot who liked to paint pictures of the sea"]


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(tiny_tokenizer().encode(t)) for t in TEXTS)


@lru_cache(maxsize=None)
def engine(dtype: torch.dtype):
    tok = tiny_tokenizer()
    return tiny_engine("llama", (2, 4, 2), adaptive=True, prompt_lookup=4,
                       model=tiny_model("llama", len(tok), dtype=dtype))


def random_plans(eng, seed: int):
    """Replace the engine's plan by random picks among the options (the golden row too), planned every step;
    return the undo."""
    rng = random.Random(seed)
    original = eng.policy.plan, eng.policy.should_plan

    def plan(fixed, candidates, caps=None):  # like the real plan, never an option without a draft row now
        return [rng.choice([-1, *(k for k, option in enumerate(options) if option[1] > 0)]) for options in candidates]

    eng.policy.plan, eng.policy.should_plan = plan, lambda seqs: True
    return lambda: (setattr(eng.policy, "plan", original[0]), setattr(eng.policy, "should_plan", original[1]))


def plain(eng, req) -> tuple[int, ...]:
    return tuple(eng.generate(list(req.prompt_ids), req.max_tokens, lookahead=(1, 1, 0), seed=req.seed,
                              ignore_eos=True, temperature=req.temperature, top_p=req.top_p).tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("slots", [1, 4])
def test_every_option_auto_may_pick_is_lossless(dtype, slots):
    eng = engine(dtype)
    reqs = [request(p, None) for p in prompts()]
    reqs += [request(p, None, temperature=0.3, top_p=0.9, seed=40 + i) for i, p in enumerate(prompts()[:2])]
    reqs.append(request(prompts()[0], None))  # 3 steps behind the first: another sequence's text (``public``)
    before, cuts_before = dict(eng.policy.counters.options), sum(eng.policy.counters.cuts.values())
    wanted = set(DRAFT_OPTIONS) - {"suffix"}  # SA's suffix rarely differs from prompt lookup's on short texts
    if slots == 1:
        wanted.discard("public")  # one at a time: no other sequence to read
    for attempt in range(3):  # more plans until every option drafted (a source has a candidate on few steps)
        undo = random_plans(eng, seed=10 * slots + attempt)
        try:
            out = run(eng.new_batch(max_batch_size=slots), {0: reqs[:3], 3: reqs[3:]})
        finally:
            undo()
        for i, req in enumerate(reqs):
            assert tokens(out[i]) == plain(eng, req), f"request {i}, plan {attempt}"
        ran = {k: v - before.get(k, 0) for k, v in eng.policy.counters.options.items()}
        if {option for option, n in ran.items() if n} >= wanted:
            break
    assert {option for option, n in ran.items() if n} >= wanted
    assert sum(eng.policy.counters.cuts.values()) > cuts_before  # chains cut short ran too


def test_a_chain_cut_before_the_cost_curves_knee_beats_the_whole_chain():
    """Rows cost a plain step's up to 4 and half as much again at 5: prompt lookup's chain of 4 drafts, expected
    to accept 1.2 of them, is worth 2.2 tokens for 1.5 steps whole; cut to 3 (4 rows) it keeps 0.93 of that (each
    draft at 1/2 without data: 0.875 of 0.9375 expected drafts), 2.12 tokens for one step's cost."""
    cost = CostTable()
    for rows, seconds in [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 1.5)]:
        cost.add(rows, seconds)
    policy = AutoPolicy(cost, prior_weight=0.0, explore=0.0)
    chain = policy.new_sequence("fresh/prompt_lookup")
    chain.total, chain.weight, chain.drafted_steps = 1.2, 1.0, 1
    whole, cut = (chain, 4), (chain, 3, (), policy.cut_part(chain, 3, 4), 3)
    assert cut[3] == pytest.approx(0.875 / 0.9375)
    assert policy.plan([], [[whole]]) == [0]
    assert policy.plan([], [[whole, cut]]) == [1]
    cost.add(5, 1.0)
    cost.add(5, 1.0)  # the fifth row as cheap as the others (the median): the whole chain again
    assert policy.plan([], [[whole, cut]]) == [0]


def test_a_cut_is_never_priced_above_its_depth():
    """A chain expected to accept 3 drafts, two drafts left in the budget: whole it is worth 2 (the cap); cut to 1
    draft it can accept 1, however much of the estimate its first draft holds, so the whole chain is chosen."""
    cost = CostTable()
    for rows in (1, 2, 3):
        cost.add(rows, 1.0)
    policy = AutoPolicy(cost, prior_weight=0.0, explore=0.0)
    chain = policy.new_sequence("repeat/suffix")
    chain.total, chain.weight, chain.drafted_steps = 3.0, 1.0, 1
    cut = (chain, 1, (), policy.cut_part(chain, 1, 2), 1)
    assert [gain for gain, _ in policy._nested_gains([(chain, 2), cut])] == [3.0, 1.0]
    assert policy.plan([], [[(chain, 2), cut]], caps=[2]) == [0]


def test_no_option_is_priced_above_the_drafts_its_rows_can_accept_nor_lends_more():
    """Prompt lookup expected to accept 3 drafts, its chain only 2 long this step: worth 2, not 3. The candidates
    holding it (3 deep, expected to accept 1 themselves) are worth what the better of the two can accept: 2."""
    policy = AutoPolicy(CostTable(), prior_weight=0.0, explore=0.0)
    lookup, both = policy.new_sequence("repeat/prompt_lookup"), policy.new_sequence("repeat/candidates")
    lookup.total, lookup.weight, lookup.drafted_steps = 3.0, 1.0, 1
    both.total, both.weight, both.drafted_steps = 1.0, 1.0, 1
    gains = policy._nested_gains([(lookup, 2, (), 1.0, 2), (both, 5, (0,), 1.0, 3)])
    assert [gain for gain, _ in gains] == [2.0, 2.0]
    assert [gain for gain, _ in policy._nested_gains([(lookup, 2, (), 1.0, 4), (both, 5, (0,), 1.0, 3)])] == [3.0, 3.0]


@pytest.mark.parametrize(("spec", "depth"), [((2, 4, 2), 3), ((4, 4, 2), 3), ((4, 3, 2), 2)])
def test_a_choice_is_counted_against_no_more_drafts_than_a_path_of_its_rows_accepts(spec, depth):
    """Beside the window a path accepts at most N-1 drafts, though the window's rows of a wider W run deeper
    (W+N-3): the count caps a choice at N-1 there, as the plan prices ``full``."""
    from trtlade.lookahead.algorithm import LookaheadAlgorithm
    from trtlade.reference.batching import SequenceState

    algo = LookaheadAlgorithm(spec, seed=0)
    algo.setup([5, 6, 7, 5, 6, 8, 5, 6], golden=7)
    state = SequenceState.__new__(SequenceState)
    state._draft = algo.prepare()
    assert max(state._draft.positions) >= depth and state.draft_depth == depth
    state._draft = algo.prepare(window=False, depth=1)
    assert state.draft_depth == 1


@pytest.mark.parametrize("max_tokens", [4, 7])
def test_near_its_budgets_end_each_source_is_offered_its_own_chains_cut(monkeypatch, max_tokens):
    """Where the budget cuts the candidates, each source is offered its own chains cut to it, as its rows are
    prepared (a source whose cut chain equals another source's keeps it), and never more drafts than they hold; the
    first tokens at most one, the window's paths N-1."""
    from trtlade.reference.batching import SOURCE_OPTIONS, SequenceState

    eng = engine(torch.float32)
    seen = []  # per plan: the options offered, each source's whole chains, the budget's cap
    offer = SequenceState.draft_options

    def spy(self):
        options = offer(self)
        seen.append((options, self.algo.candidates(), self.draft_cap, self.spec.ngram_size))
        return options

    monkeypatch.setattr(SequenceState, "draft_options", spy)
    monkeypatch.setattr(eng.policy, "should_plan", lambda seqs: True)  # every step plans, whatever came before
    reqs = [request(p, None, max_tokens=max_tokens) for p in prompts()]
    out = run(eng.new_batch(max_batch_size=4), {0: reqs})
    capped = 0
    for options, whole, cap, n in seen:
        assert (options[DRAFT_OPTIONS.index("first")][4], options[DRAFT_OPTIONS.index("full")][4]) == (1, n - 1)
        for source in SOURCE_OPTIONS:
            own = {c if cap is None else c[:cap] for c, s in whole if s == source} if cap is None or cap > 0 else set()
            _, rows, _, part, most = options[DRAFT_OPTIONS.index(source)]
            assert (rows, part, most) == (sum(map(len, own)), 1.0, max(map(len, own), default=0))
            capped += cap is not None and bool(own)
    assert capped  # the budget cut some source's chains
    for i, req in enumerate(reqs):
        assert tokens(out[i]) == plain(eng, req)


def test_a_chain_cut_short_verifies_its_first_drafts_and_teaches_the_whole_chain(monkeypatch):
    """Forced to the first chain cut short it is offered each step (else the golden row): every block is no deeper
    than its cut, every answer is plain decoding's, the steps count as cuts (not as whole options), and the cut
    sources are calibrated against what the plan expected of their cuts."""
    from trtlade.reference.batching import SequenceState

    eng = tiny_engine("llama", (2, 4, 2), adaptive=True, prompt_lookup=4)
    whole = len(DRAFT_OPTIONS)
    eng.policy.plan = lambda fixed, candidates, caps=None: [
        next((k for k in range(whole, len(options)) if options[k][1] > 0), -1) for options in candidates]
    eng.policy.should_plan = lambda seqs: True
    deepest = []
    block = SequenceState.block

    def spy(self, rows):
        out = block(self, rows)
        if self.cut is not None:
            deepest.append((max(out.depths), self.cut))
        return out

    monkeypatch.setattr(SequenceState, "block", spy)
    req = request(prompts()[0], None, max_tokens=40)
    out = run(eng.new_batch(max_batch_size=1), {0: [req]})
    assert tokens(out[0]) == plain(eng, req)
    counters = eng.policy.counters
    assert deepest and all(depth <= cut for depth, cut in deepest)
    assert counters.options == {} and sum(counters.cuts.values()) == counters.drafted > 0
    calibrated = {key.rsplit("/", 1)[1] for key in eng.policy._calibration}
    assert set(counters.cuts) <= calibrated
    taught = {key.rsplit("/", 1)[1] for key in eng.policy._chains}  # the whole chains, seen through the tokens
    assert set(counters.cuts) <= taught


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), text=st.sampled_from(range(len(TEXTS))), temperature=st.sampled_from([0.0, 0.4]))
def test_random_plans_never_change_a_token(seed, text, temperature):
    eng = engine(torch.float32)
    req = request(prompts()[text], None, temperature=temperature, seed=seed if temperature else None)
    undo = random_plans(eng, seed)
    try:
        out = run(eng.new_batch(max_batch_size=2), {0: [req, request(prompts()[(text + 1) % len(TEXTS)], None)]})
    finally:
        undo()
    assert tokens(out[0]) == plain(eng, req)


def test_a_source_option_verifies_that_source_s_candidates_only():
    """``5 6 7`` came before ``8 8 8`` first and ``9 9 9`` last; the pool keeps 7's latest two n-grams."""
    algo = LookaheadAlgorithm((2, 4, 2), seed=0, prompt_lookup=3, suffix_lookup=3)
    algo.setup([1, 5, 6, 7, 8, 8, 8, 2, 5, 6, 7, 9, 9, 9, 4, 7, 3, 3, 3, 7, 4, 4, 4, 3, 5, 6], golden=7)
    found = algo.sources()
    assert found == {"pool": 6, "prompt_lookup": 3, "suffix": 3}
    assert algo.prepare(window=False, source="suffix").tokens == [7, 8, 8, 8]  # SA's: the earliest
    assert algo.prepare(window=False, source="prompt_lookup").tokens == [7, 9, 9, 9]  # the latest
    whole = algo.prepare(window=False)
    for source, drafts in found.items():
        batch = algo.prepare(window=False, source=source)
        assert set(batch.row_sources[1:]) == {source} and batch.num_rows <= 1 + drafts
        assert batch.source == source and not batch.with_window
    assert whole.num_rows >= max(algo.prepare(window=False, source=s).num_rows for s in found)


@pytest.mark.parametrize("histories, expected", [
    ({"me": [1, 5, 6], "a": [4, 5, 6, 7, 8]}, [7, 8]),                 # "5 6" is followed by "7 8" in a
    ({"me": [5, 6, 9, 5, 6], "a": [3, 2]}, []),                        # its own text is prompt lookup's
    ({"me": [2, 6], "a": [4, 6, 7]}, []),                              # one shared token is not a match
    ({"me": [1, 4, 5, 6], "a": [4, 5, 6, 1], "b": [5, 6, 2, 3]}, [1]),  # the longest match wins
    ({"me": [9, 5, 6], "a": [5, 6, 1, 5, 6, 2]}, [2]),                  # then its latest occurrence
    ({"me": [9, 5, 6], "a": [5, 6, 3], "b": [5, 6, 4]}, [3]),           # then the lower slot
])
def test_the_public_source_is_the_longest_match_in_another_sequence(histories, expected):
    from trtlade.drafting.history import HistoryPool

    pool = HistoryPool()
    for key, text in histories.items():
        pool.add(key, text)
    assert pool.peer_draft("me", 4) == expected


def test_a_public_candidate_is_verified_alone_and_never_in_the_other_options_rows():
    """Another sequence wrote ``7 8 9 9``: the ``public`` option verifies it whole; the candidates, their first
    tokens and the full step (window and candidates) are what they are without it."""
    def algo(peers):
        a = LookaheadAlgorithm((2, 4, 2), seed=0, prompt_lookup=4, suffix_lookup=4, peers=peers)
        a.setup([1, 5, 6, 7, 3, 5, 6], golden=7)
        return a

    with_peer, without = algo(lambda k: [8, 9, 9][:k]), algo(None)
    assert with_peer.sources() == {**without.sources(), "public": 3}
    assert with_peer.prepare(window=False, source="public").tokens == [7, 8, 9, 9]
    for window, depth in [(False, None), (False, 1), (True, None)]:
        rows = with_peer.prepare(window=window, depth=depth).tokens
        assert rows == without.prepare(window=window, depth=depth).tokens
    assert "public" not in with_peer.prepare(window=True).row_sources


def test_the_plan_prices_one_drafter_s_chain_against_the_candidates():
    """Options that do not nest: a 3-row chain accepting 1.2 beats 10 candidate rows accepting 1.4 on dear
    rows, while the candidates (which hold the chain) are expected to accept at least what the chain does;
    an option without a draft now (0 rows) is never picked, whatever it expects."""
    dear = CostTable()
    for rows, ms in [(1, 20), (2, 22), (4, 26), (8, 34), (16, 50)]:
        dear.add(rows, ms / 1000)
    policy = AutoPolicy(dear, explore=0.0)

    def seq(mean):
        s = policy.new_sequence("x")
        s.total, s.weight = mean * 16, 16.0
        return s

    chain, empty, cands = seq(1.2), seq(3.0), seq(0.1)
    options = [(chain, 3, ()), (empty, 0, ()), (cands, 10, (0, 1))]
    assert policy.plan([], [options]) == [0]
    floor = policy._nested_gains(options)[2][0]
    assert floor == pytest.approx(policy.expected(chain))  # holds the chain (the empty one has no rows now)
    assert policy.plan([], [[(empty, 0, ())]]) == [-1]


@pytest.mark.parametrize("cands, held", [
    ([], {}),
    ([((5, 6, 7), "suffix")], {"suffix": ("first",)}),                            # one chain holds its first token
    ([((5, 6), "pool"), ((5, 6, 7, 8), "prompt_lookup")],                          # the pool's guess starts the chain
     {"pool": ("first",), "prompt_lookup": ("pool", "first")}),
    ([((5, 6), "pool"), ((5, 6, 7, 8), "prompt_lookup"), ((9, 4), "suffix")],    # first is 5 and 9: nobody's
     {"prompt_lookup": ("pool",)}),
    ([((5, 6), "pool"), ((9, 1), "pool"), ((5, 6, 2), "suffix")], {"pool": ("first",)}),  # one of two guesses only
    ([((5, 6), "prompt_lookup"), ((5, 6, 7), "public")],                           # public holds, first skips it
     {"prompt_lookup": ("first",), "public": ("prompt_lookup", "first")}),
])
def test_an_option_holds_what_its_candidates_start_with_this_step(cands, held):
    from trtlade.reference.batching import held_now

    assert held_now(cands) == {source: tuple(DRAFT_OPTIONS.index(o) for o in options)
                               for source, options in held.items()}


def test_a_chain_holding_another_option_this_step_is_priced_at_least_as_high():
    """The options' order says nothing of what holds what this step: prompt lookup (index 0 here) holding
    ``first`` (index 1) gets first's estimate as its floor, its own exploration bonus on top, and the plan
    drafts the chain that holds the first token instead of the first token alone."""
    cheap = CostTable()
    for rows, ms in [(1, 20), (2, 20.2), (4, 20.6), (8, 21.4)]:
        cheap.add(rows, ms / 1000)
    policy = AutoPolicy(cheap)

    def seq(mean, tries):
        s = policy.new_sequence("x")
        s.total, s.weight, s.drafted_steps = mean * 1000, 1000.0, tries
        return s

    chain, first = seq(0.3, 8), seq(0.6, 10**6)  # the chain's bonus: 2 / (2 + 8) of one deviation (1.0)
    assert policy.plan([], [[(chain, 4, ()), (first, 1, ())]]) == [1]            # on their own estimates
    assert policy.plan([], [[(chain, 4, (1,)), (first, 1, ())]]) == [0]          # the chain holds first's row
    gains = policy._nested_gains([(chain, 4, (1,)), (first, 1, ())])
    assert gains[0][0] == pytest.approx(0.6 + 0.2, abs=0.01) and gains[1][0] == pytest.approx(0.6, abs=0.01)


_KEYS = ("fresh/suffix", "repeat/suffix", "fresh/first", "repeat/full")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_plan_prices_each_option_at_its_calibrated_estimate_plus_its_share_of_the_bonus(data):
    """What the plan ranks by (read once per context/option per plan) is, to the bit, what ``calibrated`` (for the
    step's occupancy) and ``bonus`` say of each option, raised to what the options it holds are priced at; an
    option without rows now is not priced."""
    policy = AutoPolicy(CostTable(), prior_weight=data.draw(st.sampled_from([0.5, 1.0, 2.0])),
                        explore=data.draw(st.sampled_from([0.0, 1.0])))
    learner = [policy.new_sequence(key) for key in _KEYS]
    for step in range(data.draw(st.integers(0, 30))):  # server history, tries and calibration
        seq = learner[step % len(learner)]
        policy.count(seq, drafted=True, seqs=data.draw(st.integers(1, 8)))
        policy.observe(seq, drafted=True, accepted=data.draw(st.integers(0, 4)))
    options = []
    for k in range(data.draw(st.integers(1, 7))):
        seq = policy.new_sequence(data.draw(st.sampled_from(_KEYS)), server_tries=data.draw(st.booleans()))
        seq.total, seq.weight = data.draw(st.floats(0, 40)), data.draw(st.floats(0, 16))
        seq.drafted_steps = data.draw(st.integers(0, 20))
        within = tuple(j for j in range(7) if j != k and data.draw(st.booleans()))
        options.append((seq, data.draw(st.integers(0, 6)), within))
    seqs = data.draw(st.integers(1, 8))
    floors = [policy._calibrated(o[0], None, seqs) if o[1] > 0 else -math.inf for o in options]
    for _ in options:  # the options each holds, transitively (they hold at most len(options) - 1 steps deep)
        floors = [max([floors[k], *(floors[j] for j in o[2] if j < len(options))]) if o[1] > 0 else -math.inf
                  for k, o in enumerate(options)]
    share = 1.0 / seqs  # the bonus's share, as the plan computes it
    expected = [(floor + policy.bonus(o[0]) * share, o[1]) if o[1] > 0 else (0.0, 0)
                for floor, o in zip(floors, options)]
    held = [(o[0], o[1], tuple(j for j in o[2] if j < len(options))) for o in options]
    assert policy._nested_gains(held, seqs) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "drop"]), st.integers(1, 24), st.floats(0.005, 0.09)),
                max_size=40),
       st.booleans(), st.booleans())
def test_a_cost_table_s_remembered_prices_are_never_stale(events, relative, capped):
    """Every row count's price, asked between samples (and so remembered), is what a table given the same
    samples from scratch computes."""
    table = CostTable(relative=relative, capped=capped)
    for action, rows, seconds in events:
        table.add(rows, seconds) if action == "add" else table.drop_oldest(rows)
        fresh = dataclasses.replace(table, samples={k: list(v) for k, v in table.samples.items()},
                                    stamps=dict(table.stamps))
        assert [table.seconds(r) for r in (1, 3, 8, 16, 40)] == [fresh.seconds(r) for r in (1, 3, 8, 16, 40)]


def test_an_option_the_plan_overrates_when_it_chooses_it_is_priced_lower():
    """Chosen 40 times expecting 0.5 accepted drafts and getting none, a chain is priced at a fraction of its
    estimate (``calibrated``), and the plan keeps the golden row where the estimate alone would draft;
    another context's estimate of it is untouched. ``/version`` shows the ratio, ``/metrics`` the drafts
    expected at the calibrated price."""
    table = CostTable()
    for rows, ms in [(1, 20), (2, 21), (4, 23), (8, 27)]:
        table.add(rows, ms / 1000)
    policy = AutoPolicy(table, explore=0.0)
    chain, other = policy.new_sequence("fresh/suffix"), policy.new_sequence("repeat/suffix")
    for s in (chain, other):
        s.total, s.weight = 500.0, 1000.0
    assert policy.plan([], [[(chain, 4, ())]]) == [0]
    for _ in range(40):
        assert policy.count(chain, drafted=True) == "drafted"
        policy.observe(chain, drafted=True, accepted=0)
        chain.total, chain.weight = 500.0, 1000.0  # its own estimate stays 0.5
    assert policy.expected(chain) == pytest.approx(0.5, abs=0.01)
    assert policy.calibrated(chain) < 0.1 and policy.calibrated(other) == pytest.approx(0.5, abs=0.01)
    assert policy.plan([], [[(chain, 4, ())]]) == [-1]
    assert policy.plan([], [[(other, 4, ())]]) == [0]
    assert policy.snapshot()["calibration_by_option"] == {"fresh/suffix": pytest.approx(0.188, abs=0.01)}
    assert policy.counters.expected_accepted < 0.5 * (0.5 * 40)  # /metrics: what the plan priced them at


def test_only_the_window_is_tried_by_the_server():
    """Every option but the window learns from every drafted step; the window's tries are the server's."""
    batch = engine(torch.float32).new_batch(max_batch_size=1)
    batch.add(request(prompts()[0], None, max_tokens=4))
    while not batch._running:
        batch.step()
    state = batch._running[0]
    assert {option for option in DRAFT_OPTIONS if state.acceptance(option).server_tries} == {"full"}
    batch.close()


def test_the_windows_tries_are_shown_by_context_as_the_server_counts_them():
    """``/version``'s ``live.auto`` shows how many window steps the server ran in each context: every step
    forced to the window counts once, in the one context it ran in (the last too: an auto step's drafts never
    pass its budget, so what it accepted is what the model accepted), and only the window's contexts appear."""
    eng = tiny_engine("llama", (2, 4, 2), adaptive=True, prompt_lookup=4)
    eng.policy.plan = lambda fixed, candidates, caps=None: [DRAFT_OPTIONS.index("full") for _ in candidates]
    eng.policy.should_plan = lambda seqs: True
    assert eng.policy.snapshot()["server_tries_by_context"] == {}
    batch = eng.new_batch(max_batch_size=1)
    run(batch, {0: [request(prompts()[0], None, max_tokens=40)]})
    tries = eng.policy.snapshot()["server_tries_by_context"]
    assert tries and all(key.endswith("/full") for key in tries)
    assert eng.policy.counters.options == {"full": eng.policy.counters.drafted}
    assert sum(tries.values()) == eng.policy.counters.drafted  # the step that reached max_tokens counts too


def test_every_drafted_step_teaches_the_options_that_did_not_run():
    """Forced to the full rows, the chain and candidate options still learn what they would have accepted."""
    eng = tiny_engine("llama", (2, 4, 2), adaptive=True, prompt_lookup=4)
    eng.policy.plan = lambda fixed, candidates, caps=None: [DRAFT_OPTIONS.index("full") for _ in candidates]
    eng.policy.should_plan = lambda seqs: True  # every step, whatever the forced plans found
    batch = eng.new_batch(max_batch_size=1)
    run(batch, {0: [request(prompts()[0], None, max_tokens=40)]})
    learned = {key.split("/", 1)[1] for key, prior in eng.policy._priors.items() if "/" in key and prior[1] != 1.0}
    assert {"candidates", "first"} <= learned and learned & set(SOURCE_OPTIONS)
    assert eng.policy.counters.options == {"full": eng.policy.counters.drafted}


@settings(max_examples=60, deadline=None)
@given(text=st.lists(st.integers(0, 5), min_size=0, max_size=60), split=st.integers(0, 60), k=st.integers(0, 5))
def test_the_prompt_index_proposes_what_a_scan_proposes(text, split, k):
    from trtlade.lookahead.prompt_lookup import PromptIndex, propose

    index = PromptIndex(text[:split])
    for token in text[split:]:
        assert index.propose(k) == propose(index.tokens, k)
        index.extend([token])
    assert index.propose(k) == propose(text, k)


def test_a_marginal_draft_waits_while_the_step_times_are_noisy():
    """4 rows cost 1.1x a row and the chain expects 0.25 accepted drafts: +14% tokens per second on paper.
    Steady 1-row steps: it drafts; steps that swing with other jobs on the host (a 20% margin): it does not,
    while a chain that expects 1.0 accepted drafts (+82%) still drafts."""
    def policy(one_row_ms):
        table = CostTable()
        for ms in one_row_ms:
            table.add(1, ms / 1000)
        table.add(4, 1.1 * table.seconds(1))
        return AutoPolicy(table, explore=0.0)

    def chain(p, mean):
        s = p.new_sequence("x")
        s.total, s.weight = mean * 64, 64.0
        return [(s, 3, ())]

    quiet, busy = policy([20, 20.1, 19.9, 20, 20.2, 20, 19.8, 20]), policy([20, 45, 22, 60, 21, 38, 19, 52])
    assert quiet.noise() < 0.01 and busy.noise() == pytest.approx(0.2)
    assert quiet.cost.ratio(4) == pytest.approx(1.1) and busy.cost.ratio(4) == pytest.approx(1.1)
    assert quiet.plan([], [chain(quiet, 0.26)]) == [0]
    assert busy.plan([], [chain(busy, 0.26)]) == [-1]
    assert busy.plan([], [chain(busy, 1.0)]) == [0]
    assert quiet.snapshot()["noise_margin_by_sequences"] == {1: round(quiet.noise(), 3)}
    assert busy.snapshot()["noise_margin_by_sequences"] == {1: 0.2}  # what /version shows: the margin in force


@pytest.mark.parametrize("share, found, every", [
    (0.02, 0.10, 1),     # the plans find 5x what they cost: every step
    (0.02, 0.02, 1),     # as much as they cost: every step
    (0.02, 0.005, 4),    # a quarter: one step in 4
    (0.06, 0.005, 8),    # a twelfth: one in 8, the most steps between two plans
    (0.02, 0.0, 8),      # nothing: one in 8
])
def test_a_step_plans_as_often_as_its_plans_pay_for_themselves(share, found, every):
    policy = AutoPolicy(CostTable())
    policy.observe_planning(8, share=share, gain=found)
    pattern = [policy.should_plan(8) for _ in range(2 * every)]
    assert pattern == ([False] * (every - 1) + [True]) * 2
    assert policy.should_plan(4) and policy.counters.unplanned == 2 * (every - 1)
    assert policy.snapshot()["planning_by_sequences"][8]["plan_every"] == every


def test_a_plan_that_finds_drafts_brings_planning_back_to_every_step():
    """Eight sequences whose plans found nothing plan once in 8 steps; a few plans that find a 30% gain over the
    plain step (each weighing 1/8 in the average) bring it back to every step."""
    policy = AutoPolicy(CostTable())
    policy.observe_planning(8, share=0.02, gain=0.0)
    assert [policy.should_plan(8) for _ in range(8)].count(True) == 1
    for _ in range(2):
        policy.observe_planning(8, share=0.02, gain=0.3)
    assert all(policy.should_plan(8) for _ in range(8))


def test_the_plan_says_what_it_found_over_the_plain_step():
    """``last_gain``: the chosen drafts' expected tokens per second over the plain step's, minus 1; 0.0 when the
    plan keeps the golden row. One sequence, 4 rows cost 1.1x a row, its chain expects 0.5 accepted drafts:
    1.5 tokens in 1.1 steps, +36%."""
    table = CostTable()
    table.add(1, 0.020)
    table.add(4, 0.022)
    policy = AutoPolicy(table, explore=0.0)

    def chain(mean):
        s = policy.new_sequence("x")
        s.total, s.weight = mean * 64, 64.0
        return [(s, 3, ())]

    assert policy.plan([], [chain(0.5)]) == [0] and policy.last_gain == pytest.approx(1.5 / 1.1 - 1, rel=1e-3)
    assert policy.last_found == policy.last_gain
    assert policy.plan([], [chain(0.01)]) == [-1] and policy.last_gain == 0.0 and policy.last_found == 0.0


def test_a_plan_held_back_by_the_noise_margin_still_counts_what_it_found():
    """Step times that swing by half (a shared CPU, a GPU's jitter: the margin at its 20% cap): a chain worth
    +15% on paper is held to the golden row, yet the plan found it. Planning stays at every step there (so the
    steps where the margin lets drafts through are planned), where counting only what it chose made the steps
    plan once in 8 (on an H200 at 8 sequences, a plan every step: 1.04-1.06x `ar` against 0.91-0.94x)."""
    table = CostTable()
    for ms in (20, 45, 22, 60, 21, 38, 19, 52):
        table.add(1, ms / 1000)
    table.add(4, 1.1 * table.seconds(1))
    policy = AutoPolicy(table, explore=0.0)
    s = policy.new_sequence("x")
    s.total, s.weight = 0.26 * 64, 64.0
    assert policy.noise() == pytest.approx(0.2)
    assert policy.plan([], [[(s, 3, ())]]) == [-1] and policy.last_gain == 0.0
    expected = (0.5 * 2 + 0.26 * 64) / (2 + 64)  # its 64 steps' mean beside the prior (0.5, weight 2): 0.267
    assert policy.last_found == pytest.approx((1 + expected) / 1.1 - 1, rel=1e-3)
    for _ in range(4):
        policy.observe_planning(1, share=0.02, gain=policy.last_found)
    assert all(policy.should_plan(1) for _ in range(8))


def test_steps_without_a_plan_run_the_golden_rows_and_lose_no_token():
    """Plans that find nothing (the plan forced to the golden rows) back off to one step in 8: the others run
    without a plan, counted as ``unplanned``, and every answer equals plain decoding."""
    eng = engine(torch.float32)
    reqs = [request(p, None) for p in prompts()[:3]]
    original = eng.policy.plan
    planned = []

    def plan(fixed, candidates, caps=None):
        planned.append(len(candidates))
        eng.policy.last_gain = eng.policy.last_found = 0.0
        return [-1] * len(candidates)

    eng.policy.plan = plan
    before = eng.policy.counters.unplanned
    try:
        out = run(eng.new_batch(max_batch_size=3), {0: reqs})
    finally:
        eng.policy.plan = original
        eng.policy._planning.clear()  # the engine is shared: the next test plans from scratch
    for i, req in enumerate(reqs):
        assert tokens(out[i]) == plain(eng, req)
    unplanned = eng.policy.counters.unplanned - before
    assert unplanned > 0 and len(planned) < unplanned


@pytest.mark.parametrize("max_tokens", [3, 6, 9])
def test_an_auto_step_near_its_budgets_end_verifies_no_draft_it_could_not_send(monkeypatch, max_tokens):
    """Forced to its option with the most rows every step, an ``auto`` sequence drafts no deeper than the tokens
    its budget leaves beyond the step's own (``drafts_left``): a longer chain is cut, the window (N-1 deep) is
    not offered once fewer are left, the last token is a golden row alone; every answer is plain decoding's."""
    from trtlade.reference.batching import SequenceState

    eng = engine(torch.float32)
    original = eng.policy.plan, eng.policy.should_plan
    eng.policy.plan = lambda fixed, candidates, caps=None: [
        max(range(len(options)), key=lambda k: options[k][1]) if any(o[1] for o in options) else -1
        for options in candidates]
    eng.policy.should_plan = lambda seqs: True
    seen = []  # per block: its deepest row, the drafts the budget left, the longest candidate before the cut
    block = SequenceState.block

    def spy(self, rows):
        out = block(self, rows)
        longest = max([0, *(len(c) for c, _ in self.algo.candidates())]) if self.algo is not None else 0
        seen.append((max(out.depths), self.drafts_left(), longest))
        return out

    monkeypatch.setattr(SequenceState, "block", spy)
    reqs = [request(p, None, max_tokens=max_tokens) for p in prompts()]
    try:
        out = run(eng.new_batch(max_batch_size=4), {0: reqs})
    finally:
        eng.policy.plan, eng.policy.should_plan = original
    assert all(depth <= max(left, 0) for depth, left, _ in seen)
    assert any(longest > left > 0 and depth == left for depth, left, longest in seen)  # a chain was cut, and ran
    assert any(left == 0 for _, left, _ in seen)  # the last token: its golden row alone
    for i, req in enumerate(reqs):
        assert tokens(out[i]) == plain(eng, req)


def test_an_option_overrated_only_in_full_steps_is_priced_lower_there_alone():
    """Chosen in steps of 8 sequences expecting 0.5 accepted drafts and getting none, and in steps of 2 getting
    what it expected, a chain is priced lower with 8 sequences than with 2 (its ratio refined by occupancy, shrunk
    towards its overall one); a plan of 8 prices it there, one of 2 here; ``/version`` shows both."""
    policy = AutoPolicy(CostTable(), explore=0.0)
    chain = policy.new_sequence("fresh/suffix")
    for step in range(80):
        full = step % 2 == 0
        chain.total, chain.weight = 500.0, 1000.0  # its own estimate stays 0.5
        assert policy.count(chain, drafted=True, seqs=8 if full else 2) == "drafted"
        policy.observe(chain, drafted=True, accepted=0 if full else step % 4 // 3)  # in 2s: 1 every other time
    alone = policy._calibration_factor("fresh/suffix")
    in_eight, in_two = (policy._calibration_factor("fresh/suffix", n) for n in (8, 2))
    assert in_eight < alone < in_two and in_eight < 0.2 and in_two > 0.7
    assert policy._calibration_factor("fresh/suffix", 5) == in_eight  # 5-8 sequences: one occupancy
    assert policy._calibration_factor("fresh/suffix", 1) == alone  # never chosen alone: the overall ratio
    gains = {n: policy._nested_gains([(chain, 4, ())], seqs=n)[0][0] for n in (2, 8)}
    assert gains[8] == pytest.approx(policy.calibrated(chain) / alone * in_eight)
    assert gains[2] == pytest.approx(policy.calibrated(chain) / alone * in_two)
    shown = policy.snapshot()["calibration_by_option_and_sequences"]
    assert shown == {"fresh/suffix@2": pytest.approx(in_two, abs=1e-3),
                     "fresh/suffix@5-8": pytest.approx(in_eight, abs=1e-3)}


def test_what_a_choice_is_counted_to_expect_is_its_price_at_the_steps_occupancy():
    """``/metrics``' expected drafts of a choice in a step of 8 sequences are what the plan priced it at there (its
    ratio with 8), not its overall ratio."""
    policy = AutoPolicy(CostTable(), explore=0.0)
    chain = policy.new_sequence("fresh/suffix")
    chain.total, chain.weight = 500.0, 1000.0
    for _ in range(30):  # choices in steps of 8 that got nothing, in steps of 2 that got what they expected
        for seqs, got in ((8, 0), (2, 1)):
            policy.count(chain, drafted=True, seqs=seqs)
            policy.observe(chain, drafted=True, accepted=got * (_ % 2))
            chain.total, chain.weight = 500.0, 1000.0
    before = policy.counters.expected_accepted
    policy.count(chain, drafted=True, seqs=8)
    assert policy.counters.expected_accepted - before == pytest.approx(policy._calibrated(chain, None, 8))
    assert policy._calibrated(chain, None, 8) < 0.5 * policy.calibrated(chain)

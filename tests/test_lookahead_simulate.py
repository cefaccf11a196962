"""simulate(): the executable spec. Lookahead with any oracle emits exactly the oracle's greedy text."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import CountingOracle, NgramOracle, PeriodicOracle, RandomOracle, greedy, simulate

from trtlade.lookahead.algorithm import LookaheadAlgorithm, parents_from_positions
from trtlade.lookahead.simulate import row_prefixes
from trtlade.spec import LookaheadSpec, SpecError

VOCAB = 8  # small on purpose: many collisions, merges and accidental matches


@st.composite
def specs(draw, max_size=5):
    w, n, g = draw(st.integers(1, max_size)), draw(st.integers(1, max_size)), draw(st.integers(0, max_size))
    try:
        return LookaheadSpec(w, n, g)
    except SpecError:
        return LookaheadSpec(1, 1, 0)


@st.composite
def oracles(draw):
    kind = draw(st.sampled_from(["periodic", "random", "counting", "ngram"]))
    if kind == "periodic":
        return PeriodicOracle(draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=VOCAB, unique=True)))
    if kind == "random":
        return RandomOracle(seed=draw(st.integers(0, 99)), vocab=VOCAB, k=draw(st.integers(1, 3)))
    if kind == "counting":
        return CountingOracle(vocab=VOCAB, step=draw(st.integers(1, 3)))
    corpus = draw(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=40))
    return NgramOracle(corpus, order=draw(st.integers(2, 4)), fallback_vocab=VOCAB)


def random_corpus(seed: int, length: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(length)]


prompts = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)
eos_sets = st.sampled_from([(), (0,), (3, 5)])


@settings(max_examples=200, deadline=None)
@given(spec=specs(), oracle=oracles(), prompt=prompts, eos=eos_sets, max_tokens=st.integers(0, 40),
       seed=st.integers(0, 3), corrected=st.booleans(), full=st.booleans())
def test_lookahead_emits_the_greedy_continuation(spec, oracle, prompt, eos, max_tokens, seed, corrected, full):
    result = simulate(oracle, prompt, spec, max_tokens, eos, seed=seed, corrected_keying=corrected,
                      full_guess_set=full)
    assert result.tokens == greedy(oracle, prompt, max_tokens, eos)
    n, bound = spec.ngram_size, (spec.window_size + spec.verification_set_size) * (spec.ngram_size - 1)
    assert all(1 <= k <= n for k in result.tokens_per_step_list)
    assert all(1 <= r <= max(bound, 1) for r in result.rows_per_step)
    assert result.steps == len(result.rows_per_step) == sum(result.tokens_per_step_hist.values())
    assert len(result.tokens) == (1 + sum(result.tokens_per_step_list) if result.tokens else 0)
    if eos and result.tokens and result.tokens[-1] in eos:
        assert result.finish_reason == "stop"


@settings(max_examples=120, deadline=None)
@given(spec=specs(), oracle=oracles(), prompt=prompts, eos=eos_sets, seed=st.integers(0, 3))
def test_dedup_gives_identical_steps_with_fewer_rows(spec, oracle, prompt, eos, seed):
    merged = simulate(oracle, prompt, spec, 30, eos, seed=seed, dedup=True)
    plain = simulate(oracle, prompt, spec, 30, eos, seed=seed, dedup=False)
    assert merged.tokens == plain.tokens
    assert merged.tokens_per_step_list == plain.tokens_per_step_list
    assert all(a <= b for a, b in zip(merged.rows_per_step, plain.rows_per_step))


@settings(max_examples=100, deadline=None)
@given(spec=specs(), oracle=oracles(), prompt=prompts, eos=eos_sets, dedup=st.booleans())
def test_every_batch_is_well_formed_and_logit_rows_suffice(spec, oracle, prompt, eos, dedup):
    """Drive by hand: positions are depths, the mask follows from them, and the argmax of rows outside
    logit_rows never changes what verify/commit do."""
    full_algo = LookaheadAlgorithm(spec, eos_token_ids=eos, dedup=dedup)
    lean_algo = LookaheadAlgorithm(spec, eos_token_ids=eos, dedup=dedup)
    golden = oracle(prompt)
    for algo in (full_algo, lean_algo):
        algo.setup(prompt, golden)
    emitted = [golden]
    for _ in range(12):
        batch = full_algo.prepare()
        assert batch.positions[0] == 0 and batch.parents[0] == -1 and batch.tokens[0] == emitted[-1]
        assert parents_from_positions(batch.positions) == batch.parents
        assert all(0 <= t < VOCAB for t in batch.tokens)                 # no unfilled (-1) window cell
        assert all(batch.positions[i] == batch.positions[batch.parents[i]] + 1 for i in range(1, batch.num_rows))
        assert 0 in batch.logit_rows and set(batch.window_top_rows) <= set(batch.logit_rows)
        assert batch.num_rows <= batch.num_rows_before_dedup
        context = prompt + emitted[:-1]
        argmax = [oracle(prefix) for prefix in row_prefixes(context, batch, range(batch.num_rows))]
        lean = [a if i in batch.logit_rows else -1 for i, a in enumerate(argmax)]
        assert lean_algo.prepare().tokens == batch.tokens
        v_full, v_lean = full_algo.verify(argmax), lean_algo.verify(lean)
        assert v_full == v_lean and len(v_full.tokens) == len(v_full.kept_rows)
        for algo in (full_algo, lean_algo):
            algo.commit()
        assert full_algo.window == lean_algo.window and full_algo.pool.snapshot() == lean_algo.pool.snapshot()
        emitted.extend(v_full.tokens)


@pytest.mark.parametrize("spec", [(4, 3, 4), (7, 7, 7), (2, 2, 1)])
def test_repeated_runs_on_one_instance_are_identical(spec):
    oracle = NgramOracle(random_corpus(1, 200, 20), order=3, fallback_vocab=20)
    algo = LookaheadAlgorithm(spec, seed=11)
    runs = [simulate(oracle, [1, 2, 3, 4, 5, 6], spec, 80, algorithm=algo) for _ in range(3)]
    assert runs[0].tokens == runs[1].tokens == runs[2].tokens
    assert runs[0].tokens_per_step_list == runs[1].tokens_per_step_list == runs[2].tokens_per_step_list
    assert runs[0].rows_per_step == runs[2].rows_per_step


def test_periodic_text_is_accepted_in_long_runs():
    period = list(range(10, 30))
    result = simulate(PeriodicOracle(period), period + period[:5], (4, 3, 4), 200)
    assert result.tokens_per_step > 2.5          # N = 3 is the maximum
    assert result.tokens_per_step_hist.get(3, 0) > 0.9 * result.steps


def test_periodic_text_is_learned_by_the_window_without_prompt_ngrams():
    # the prompt does not contain the period: candidates come from window n-grams only
    result = simulate(PeriodicOracle(list(range(50, 70))), [1, 2, 3], (4, 3, 4), 200)
    assert result.tokens_per_step > 1.5


def test_random_text_is_almost_never_accepted():
    result = simulate(RandomOracle(seed=3, vocab=5000), [1, 2, 3, 4], (4, 3, 4), 200)
    assert result.tokens == greedy(RandomOracle(seed=3, vocab=5000), [1, 2, 3, 4], 200)
    assert result.tokens_per_step < 1.05


@pytest.mark.parametrize("spec", [(1, 1, 0), (1, 2, 0)])
def test_autoregressive_spec_is_one_token_per_step(spec):
    result = simulate(CountingOracle(vocab=50), [1], spec, 20)
    assert result.tokens == list(range(2, 22))
    assert (result.steps, result.tokens_per_step_hist, set(result.rows_per_step)) == (19, {1: 19}, {1})


def test_eos_ends_generation_even_inside_an_accepted_run():
    period = [10, 11, 12, 13, 14, 15]
    oracle = PeriodicOracle(period)
    result = simulate(oracle, period * 3, (4, 4, 4), 100, eos_token_ids=(13,))
    assert result.tokens == [10, 11, 12, 13]
    assert result.tokens_per_step_list == [3]          # 11 12 13 14 accepted, cut after the EOS 13
    assert result.finish_reason == "stop"


def test_max_tokens_cuts_an_accepted_run():
    period = list(range(10, 20))
    result = simulate(PeriodicOracle(period), period * 3, (4, 4, 4), 6)
    assert result.tokens == [10, 11, 12, 13, 14, 15]
    assert result.tokens_per_step_list == [4, 1]       # the second step's 4 accepted tokens cut to 1
    assert result.finish_reason == "length"


def test_golden_eos_or_tiny_budget_needs_no_step():
    assert simulate(CountingOracle(), [4], (2, 2, 1), 10, eos_token_ids=(5,)).tokens == [5]
    assert simulate(CountingOracle(), [4], (2, 2, 1), 1).steps == 0
    assert simulate(CountingOracle(), [4], (2, 2, 1), 0).tokens == []


def test_keyings_emit_the_same_text_with_different_pools():
    corpus = random_corpus(2, 300, 12)
    oracle = NgramOracle(corpus, order=3, fallback_vocab=12)
    pools = {}
    for corrected in (False, True):
        algo = LookaheadAlgorithm((4, 3, 4), corrected_keying=corrected)
        result = simulate(oracle, corpus[:20], None, 100, algorithm=algo)
        assert result.tokens == greedy(oracle, corpus[:20], 100)
        pools[corrected] = algo.pool.snapshot()
    assert pools[False] != pools[True]


def test_negative_budget_is_rejected():
    with pytest.raises(ValueError, match="max_tokens"):
        simulate(CountingOracle(), [1], (2, 2, 1), -1)


@pytest.mark.parametrize("spec", [(2, 2, 1), (1, 3, 4)])
def test_trtllm_keying_starves_a_single_candidate(spec):
    """With one verified candidate (G = 1, or W = 1 under TensorRT-LLM's min(W, G)), the column-0
    n-gram keyed by y[g] is the newest entry for the next golden token and it is misaligned, so no
    candidate is ever accepted on a periodic text; keyed by g (lade) the same text flows."""
    period = list(range(100, 137))
    prompt = list(range(1, 20)) + period[:30]
    trtllm = simulate(PeriodicOracle(period), prompt, spec, 120)
    corrected = simulate(PeriodicOracle(period), prompt, spec, 120, corrected_keying=True)
    assert trtllm.tokens == corrected.tokens
    assert trtllm.tokens_per_step == 1.0
    assert corrected.tokens_per_step > 1.5

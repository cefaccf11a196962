"""Sampled lookahead emits exactly what plain sampling with the same seed emits (fp32, tiny models).

The spec table: every warper combination x Llama / Qwen2 / Qwen3 x both presets, lookahead against
plain sampling (lookahead (1,1,0)) on the same engine and seed; then a mixed batch; then the
distribution itself on an oracle LM (chi-square), and the rule that drafts never read a draw.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from functools import lru_cache
from typing import Sequence

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import ARCHS, tiny_engine, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.reference import sampling
from trtlade.reference.prompt_suite import load_suite
from trtlade.reference.sampling import KeyedSampler, SamplingParams, inverse_cdf, keyed_uniform
from trtlade.lookahead.algorithm import LookaheadAlgorithm

ENGINE_SPEC = (7, 5, 7)
SPECS = [(2, 3, 2), (4, 2, 4), (7, 5, 7)]
MAX_TOKENS = 24

#: name -> warpers; low temperatures keep the tiny random models peaked enough to accept drafts
WARPERS = {
    "temperature": dict(temperature=0.15),
    "top_p": dict(temperature=0.2, top_p=0.9),
    "top_k": dict(temperature=0.3, top_k=3),
    "min_p": dict(temperature=0.2, min_p=0.3),
    "presence+frequency": dict(temperature=0.15, presence_penalty=0.4, frequency_penalty=0.3),
    "repetition": dict(temperature=0.15, repetition_penalty=1.3),
    "penalised greedy": dict(temperature=0.0, frequency_penalty=0.5, repetition_penalty=1.2),
    "everything": dict(temperature=0.2, top_p=0.95, top_k=20, min_p=0.05, presence_penalty=0.2,
                       frequency_penalty=0.2, repetition_penalty=1.1),
    "hot": dict(temperature=1.0, top_p=0.95),
}


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    tok = tiny_tokenizer()
    chosen = ("code-prime", "extract-invoice", "summary-meeting")
    return tuple(tuple(tok.encode(p.plain_text())[:64]) for p in load_suite("suite").prompts if p.id in chosen)


@lru_cache(maxsize=None)
def engine(arch: str, preset: str = "fast"):
    return tiny_engine(arch, ENGINE_SPEC, prompt_lookup=4 if preset == "fast" else 0)


def plain(arch: str, prompt, seed: int, **warpers) -> list[int]:
    return engine(arch).generate(list(prompt), MAX_TOKENS, lookahead=(1, 1, 0), seed=seed, ignore_eos=True,
                                 **warpers).tokens


# ------------------------------------------------------------------------------------ the spec table
@pytest.mark.parametrize("preset", ["fast", "trtllm"])
@pytest.mark.parametrize("arch", ARCHS)
def test_lookahead_samples_the_tokens_plain_sampling_draws(arch, preset):
    eng = engine(arch, preset)
    accepted = differs = 0
    for name, warpers in WARPERS.items():
        for k, prompt in enumerate(prompts()):
            seed = 1000 * k + len(name)
            expected = plain(arch, prompt, seed, **warpers)
            for spec in SPECS:
                got = eng.generate(list(prompt), MAX_TOKENS, lookahead=spec, seed=seed, ignore_eos=True, **warpers)
                assert got.tokens == expected, f"{name} {spec} prompt {k}"
                accepted += got.stats.tokens - got.stats.steps
            differs += expected != eng.greedy(list(prompt), MAX_TOKENS, ignore_eos=True).tokens
    assert accepted > 50  # drafts were accepted under sampling: the equality above was tested on them
    assert differs >= len(WARPERS)  # and the samples are not the greedy text


@pytest.mark.parametrize("arch", ARCHS)
def test_a_sampled_request_in_a_mixed_batch_draws_what_it_draws_alone(arch):
    eng = engine(arch)
    ps = prompts()
    mixed = [request(ps[0], (7, 5, 7)), request(ps[1], (2, 3, 2), temperature=0.2, seed=5, top_p=0.9),
             request(ps[2], None, temperature=0.15, seed=6, frequency_penalty=0.3), request(ps[0], (1, 1, 0)),
             request(ps[1], (4, 2, 4), temperature=0.2, seed=7, repetition_penalty=1.2),
             request(ps[2], (1, 1, 0), temperature=0.15, seed=6, frequency_penalty=0.3)]
    out = run(eng.new_batch(max_batch_size=8), {0: mixed[:3], 2: mixed[3:]})
    for i, req in enumerate(mixed):
        alone = eng.generate(list(req.prompt_ids), req.max_tokens, lookahead=(1, 1, 0), seed=req.seed,
                             ignore_eos=True, temperature=req.temperature, top_p=req.top_p,
                             frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty)
        assert list(tokens(out[i])) == alone.tokens, f"request {i}"
    assert tokens(out[2]) == tokens(out[5])  # same seed and warpers, with and without lookahead
    assert any(len(c.tokens) > 1 for i in (1, 2, 4) for c in out[i])  # sampled drafts accepted in the batch


def test_auto_policy_and_a_token_budget_keep_sampling_exact():
    eng = tiny_engine("llama", ENGINE_SPEC, adaptive=True, prompt_lookup=4)
    reqs = [request(p, None, max_tokens=MAX_TOKENS, temperature=0.2, seed=30 + i, top_p=0.9)
            for i, p in enumerate(prompts())]
    out = run(eng.new_batch(max_batch_size=4, max_num_tokens=12), {0: reqs})  # drafts dropped to fit 12 rows
    for i, req in enumerate(reqs):
        assert list(tokens(out[i])) == plain("llama", req.prompt_ids, req.seed, temperature=0.2, top_p=0.9)


# ------------------------------------------------------------------------------------ drafts and draws
def test_drafts_never_read_a_draw(monkeypatch):
    """No uniform is computed while drafts are built, and the output does not depend on them: two
    engines whose Jacobi windows start differently (engine seed) sample the same tokens."""
    building = [False]
    drawn: list[int] = []
    original_prepare, original_uniform = LookaheadAlgorithm.prepare, sampling.keyed_uniform

    def prepare(self, *args, **kwargs):
        building[0] = True
        try:
            return original_prepare(self, *args, **kwargs)
        finally:
            building[0] = False

    def uniform(seed, position):
        assert not building[0], "a draft read the request's draws"
        drawn.append(position)
        return original_uniform(seed, position)

    monkeypatch.setattr(LookaheadAlgorithm, "prepare", prepare)
    monkeypatch.setattr(sampling, "keyed_uniform", uniform)
    prompt = list(prompts()[0])
    runs = []
    for engine_seed in (1, 2):  # glibc's srand takes 0 as 1: two seeds that differ
        eng = tiny_engine("qwen3", ENGINE_SPEC, seed=0, prompt_lookup=4)
        window = dataclasses.replace(eng.settings, seed=engine_seed)  # the window's initial guesses
        drawn.clear()
        result = eng.generate(prompt, MAX_TOKENS, lookahead=(7, 5, 7), temperature=0.2, seed=9, ignore_eos=True,
                              settings=window)
        runs.append((result.tokens, result.stats.rows_per_step, sorted(set(drawn))))
    (a, rows_a, drawn_a), (b, rows_b, drawn_b) = runs
    assert a == b == plain("qwen3", prompt, 9, temperature=0.2)
    assert rows_a != rows_b  # different drafts ...
    first = len(prompt)
    assert drawn_a[0] == first and set(range(first, first + MAX_TOKENS)) <= set(drawn_a)  # ... the same draws


def test_keyed_uniforms_are_uniform_and_independent_across_seeds_and_positions():
    values = np.array([keyed_uniform(seed, pos) for seed in range(40) for pos in range(100)])
    counts = np.histogram(values, bins=10, range=(0, 1))[0]
    assert chi_square(counts, np.full(10, len(values) / 10)) < chi_square_critical(9)
    pairs = np.array([(keyed_uniform(s, 5), keyed_uniform(s + 1, 5)) for s in range(2000)])
    assert abs(np.corrcoef(pairs.T)[0, 1]) < 0.1  # seed and seed + 1 (n > 1's choices) are unrelated


@pytest.mark.parametrize("probs,uniforms,expected", [
    ([[0.5, 0.5, 0.0, 0.0]], [0.0], [0]),
    ([[0.5, 0.5, 0.0, 0.0]], [0.5], [1]),          # the boundary belongs to the next token
    ([[0.5, 0.5, 0.0, 0.0]], [0.999999], [1]),     # never a zero-probability token
    ([[0.0, 0.0, 0.0, 2.0]], [0.0], [3]),          # unnormalised rows are fine
    ([[0.0, 1.0, 0.0, 1.0]], [0.5], [3]),
])
def test_inverse_cdf_spec_table(probs, uniforms, expected):
    assert inverse_cdf(torch.tensor(probs), uniforms) == expected


def test_penalties_see_the_path_of_each_row():
    """Row 1 follows draft token 2: its frequency and presence penalties count that token once more
    than row 0's do; repetition applies to prompt tokens in every row and to the path's in its row."""
    params = SamplingParams(temperature=0.0, frequency_penalty=1.0, presence_penalty=0.5, repetition_penalty=2.0)
    sampler = KeyedSampler(params, prompt=[0])
    sampler.extend([2])
    logits = torch.tensor([[4.0, 1.0, 3.9, 3.0, 0.0], [4.0, 1.0, 3.9, 3.0, 3.5]])
    penalised = sampler._penalise(logits.clone(), [[], [4]])
    expected = [[2.0, 1.0, 3.9 / 2 - 1.5, 3.0, 0.0], [2.0, 1.0, 3.9 / 2 - 1.5, 3.0, 3.5 / 2 - 1.5]]
    assert torch.allclose(penalised, torch.tensor(expected))
    assert sampler.choose(logits, [[], [4]], [0, 1]) == [3, 3]


# ------------------------------------------------------------------------------------ a property, no model
def periodic_logits(period: tuple[int, ...], vocab: int, sharpness: float):
    """An oracle LM as logits: the token that continues ``period`` after the last token gets
    ``sharpness``, the others a fixed hash-spread value, so a sample usually follows the period."""
    def logits(prefix: Sequence[int]) -> list[float]:
        last = prefix[-1]
        nxt = period[(period.index(last) + 1) % len(period)] if last in period else period[0]
        return [sharpness if t == nxt else ((t * 7 + last * 13) % 5) / 4 for t in range(vocab)]
    return logits


def sampled_lookahead(logits_of, prompt, spec, params: SamplingParams, max_tokens: int) -> tuple[list[int], int]:
    """Drive the algorithm as the engine does: draws keyed by position, penalties over each row's path."""
    sampler = KeyedSampler(params, prompt)
    first = sampler.choose(torch.tensor([logits_of(prompt)]), [()], [len(prompt)])[0]
    out = [first]
    sampler.extend([first])
    algo = LookaheadAlgorithm(spec, seed=0, prompt_lookup=2)
    algo.setup(prompt, first)
    accepted = 0
    while len(out) < max_tokens:
        draft = algo.prepare()
        context = list(prompt) + out
        rows = draft.logit_rows
        paths = [[draft.tokens[a] for a in draft.ancestors[r][1:]] for r in rows]
        logits = torch.tensor([logits_of(context + path) for path in paths])
        chosen = sampler.choose(logits, paths, [len(context) + draft.positions[r] for r in rows])
        v = algo.verify(draft.expand_argmax(logits.argmax(-1).tolist()), draft.expand_argmax(chosen))
        kept = v.tokens[:max_tokens - len(out)]
        algo.commit(len(kept))
        sampler.extend(kept)
        out += kept
        accepted += len(kept) - 1
    return out, accepted


def plain_sampling(logits_of, prompt, params: SamplingParams, max_tokens: int) -> list[int]:
    sampler = KeyedSampler(params, prompt)
    out: list[int] = []
    while len(out) < max_tokens:
        context = list(prompt) + out
        token = sampler.choose(torch.tensor([logits_of(context)]), [()], [len(context)])[0]
        sampler.extend([token])
        out.append(token)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**63 - 1), spec=st.sampled_from([(2, 2, 1), (3, 3, 2), (4, 4, 4), (1, 3, 2)]),
       temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]), top_p=st.sampled_from([1.0, 0.9, 0.5]),
       top_k=st.sampled_from([0, 3]), penalty=st.sampled_from([0.0, 0.5]),
       period=st.lists(st.integers(0, 11), min_size=2, max_size=6, unique=True))
def test_property_lookahead_sampling_equals_plain_sampling(seed, spec, temperature, top_p, top_k, penalty, period):
    logits_of = periodic_logits(tuple(period), vocab=12, sharpness=6.0)
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, frequency_penalty=penalty,
                            repetition_penalty=1.0 + penalty / 2, seed=seed)
    prompt = list(period) * 3
    got, _ = sampled_lookahead(logits_of, prompt, spec, params, 30)
    assert got == plain_sampling(logits_of, prompt, params, 30)


def test_the_property_driver_accepts_drafts():
    """The property above is tested on accepted drafts, not only on golden rows."""
    logits_of = periodic_logits((1, 2, 3, 4), vocab=12, sharpness=6.0)
    _, accepted = sampled_lookahead(logits_of, [1, 2, 3, 4] * 3, (4, 4, 4), SamplingParams(temperature=0.7, seed=1), 40)
    assert accepted >= 10


# ------------------------------------------------------------------------------------ the distribution
VOCAB = 6
WARP = dict(temperature=0.8, top_p=0.9)


def oracle_logits(prefix: tuple[int, ...]) -> list[float]:
    """A fixed, peaked next-token distribution per context (the last two tokens)."""
    rng = random.Random(hash(prefix[-2:]) & 0xFFFF)
    return [rng.gauss(0.0, 1.5) for _ in range(VOCAB)]


def warped(prefix: tuple[int, ...]) -> np.ndarray:
    """The reference warp, written out independently: softmax(logits / T), then top-p."""
    x = np.array(oracle_logits(prefix)) / WARP["temperature"]
    p = np.exp(x - x.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = np.cumsum(p[order]) - p[order] <= WARP["top_p"]
    out = np.zeros_like(p)
    out[order[keep]] = p[order[keep]]
    return out / out.sum()


def chi_square(observed, expected) -> float:
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    live = expected > 0
    assert observed[~live].sum() == 0, "a token of probability 0 was drawn"
    return float(((observed[live] - expected[live]) ** 2 / expected[live]).sum())


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """The upper 0.1% point of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_lookahead_sampled_tokens_follow_the_warped_distribution():
    """One lookahead step per seed, over 3,000 seeds, on an oracle LM whose pool offers every token
    after the golden one: the first token follows the warped distribution at the golden row, the
    second (after an accepted draft) the warped distribution at that draft's row, and a draft is
    accepted as often as the probability of the drafted tokens."""
    prompt = [3, 4, 5, 3, 1, 2, 3, 0, 4, 1]  # the pool offers 4 5, 1 2 and 0 4 after 3
    golden = 3
    params = dict(WARP)
    first: Counter[int] = Counter()
    second: dict[int, Counter[int]] = {}
    drafted_tokens: set[int] = set()
    seeds = 3000
    for seed in range(seeds):
        algo = LookaheadAlgorithm((1, 3, 3), seed=0, full_guess_set=True)
        algo.setup(prompt, golden)
        draft = algo.prepare(window=False)
        sampler = KeyedSampler(SamplingParams(seed=seed, **params), prompt)
        context = tuple(prompt) + (golden,)
        rows = draft.logit_rows
        logits = torch.tensor([oracle_logits(context + tuple(draft.tokens[a] for a in draft.ancestors[r][1:]))
                               for r in rows])
        paths = [[draft.tokens[a] for a in draft.ancestors[r][1:]] for r in rows]
        chosen = sampler.choose(logits, paths, [len(context) + draft.positions[r] for r in rows])
        verification = algo.verify(draft.expand_argmax(logits.argmax(-1).tolist()), draft.expand_argmax(chosen))
        emitted = verification.tokens
        drafted_tokens = {draft.tokens[r] for r in range(1, draft.num_rows) if draft.parents[r] == 0}
        first[emitted[0]] += 1
        if len(emitted) > 1:
            second.setdefault(emitted[0], Counter())[emitted[1]] += 1
    assert len(drafted_tokens) >= 2  # the golden row had several children
    p0 = warped(tuple(prompt) + (golden,))
    observed = [first[t] for t in range(VOCAB)]
    assert chi_square(observed, p0 * seeds) < chi_square_critical(VOCAB - 1)
    accepted = sum(sum(c.values()) for c in second.values())
    expected_accept = p0[list(drafted_tokens)].sum() * seeds
    assert abs(accepted - expected_accept) < 4 * math.sqrt(expected_accept)  # acceptance = p(children)
    for token, counts in second.items():
        if sum(counts.values()) < 200:
            continue
        p1 = warped(tuple(prompt) + (golden, token))
        observed = [counts[t] for t in range(VOCAB)]
        assert chi_square(observed, p1 * sum(observed)) < chi_square_critical(VOCAB - 1), f"after {token}"


# ------------------------------------------------------------------------------------ served
def _serve(eng):
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    return create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4))


def _post_all(app, bodies):
    import asyncio

    from fake_engine import client_for

    async def go():
        async with client_for(app) as c:
            return [await c.post("/v1/completions", json=b) for b in bodies]

    return asyncio.run(go())


def test_served_sampling_runs_with_lookahead_reports_its_seed_and_reproduces():
    eng = engine("llama")
    text = tiny_tokenizer().decode(list(prompts()[0]))
    base = {"prompt": text, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0.15, "top_p": 0.9,
            "top_k": 50, "min_p": 0.01}
    penalties = {"presence_penalty": 0.3, "frequency_penalty": 0.2, "repetition_penalty": 1.2}
    unseeded, seeded, off, n2, penalised = _post_all(_serve(eng), [
        base, {**base, "seed": 21, "lookahead": [7, 5, 7]}, {**base, "seed": 21, "lookahead": [1, 1, 0]},
        {**base, "seed": 21, "n": 2, "lookahead": [7, 5, 7]}, {**base, **penalties, "seed": 4}])
    for resp in (unseeded, seeded, off, n2, penalised):
        assert resp.status_code == 200, resp.text
    ids = eng.tokenizer.encode(text)
    warpers = {k: v for k, v in {**base, **penalties}.items() if k not in ("prompt", "max_tokens", "ignore_eos")}
    direct = eng.generate(ids, MAX_TOKENS, lookahead=(1, 1, 0), seed=4, ignore_eos=True, **warpers)
    assert penalised.json()["choices"][0]["text"] == direct.text  # every warper reached the engine
    usage = seeded.json()["usage"]["lookahead"]
    assert usage["spec"] == {"w": 7, "n": 5, "g": 7} and usage["seed"] == 21 and usage["tokens_per_step"] > 1
    assert seeded.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]  # lookahead changes nothing
    given = unseeded.json()["usage"]["lookahead"]["seed"]  # a request without a seed is told the one it got
    again, = _post_all(_serve(eng), [{**base, "seed": given}])
    assert again.json()["choices"][0]["text"] == unseeded.json()["choices"][0]["text"]
    first, second = (c["text"] for c in sorted(n2.json()["choices"], key=lambda c: c["index"]))
    assert first == seeded.json()["choices"][0]["text"] and second != first  # choice j draws with seed + j


@pytest.mark.parametrize("body, param", [
    ({"top_k": -2}, "top_k"), ({"min_p": 1.5}, "min_p"), ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 2.5}, "repetition_penalty"), ({"presence_penalty": 2.5}, "presence_penalty"),
])
def test_out_of_range_warpers_are_a_400_naming_the_field(body, param):
    from fake_engine import fake_app

    app, _ = fake_app()
    resp, = _post_all(app, [{"prompt": "x", **body}])
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param


@pytest.mark.parametrize("temperature", [1e-30, 1e-38, 1e-40, 1e-45, 1e-300, 5e-324])
def test_a_tiny_temperature_draws_its_limit_the_greedy_token_not_noise(temperature):
    """logits / 1e-40 overflows float32 to inf and the softmax to NaN: the row is scaled after its max is taken
    out instead, so the draw is the temperature's limit (the argmax), for every seed."""
    from trtlade.reference.sampling import KeyedSampler, SamplingParams

    logits = torch.tensor([[0.5, 3.0, -1.0, 2.9], [1.0, -2.0, 0.25, 0.0]])
    for seed in range(5):
        sampler = KeyedSampler(SamplingParams(temperature=temperature, seed=seed))
        assert sampler.choose(logits, [[], []], [0, 1]) == [1, 0]


def test_a_row_that_overflows_leaves_the_other_rows_of_the_call_as_they_are():
    """The float64 limit is taken for the overflowing row only: a row's probabilities are the same beside any rows
    (a verification step warps its rows in one call, plain decoding one)."""
    from trtlade.reference.sampling import KeyedSampler, SamplingParams

    sampler = KeyedSampler(SamplingParams(temperature=0.7, seed=1))
    calm = torch.tensor([[0.5, 3.0, -1.0, 2.9]])
    alone, _ = sampler._warp(calm)
    beside, _ = sampler._warp(torch.cat([calm, torch.tensor([[float("inf"), 0.0, 0.0, 0.0]])]))
    assert torch.equal(beside[0], alone[0]) and beside[1].argmax() == 0


def test_a_tiny_repetition_penalty_makes_the_seen_token_certain_not_noise():
    from trtlade.reference.sampling import KeyedSampler, SamplingParams

    logits = torch.tensor([[0.5, 3.0, -1.0, 2.9]])
    sampler = KeyedSampler(SamplingParams(temperature=0.7, seed=1, repetition_penalty=1e-40), prompt=[3])
    assert [sampler.choose(logits, [[]], [q]) for q in range(5)] == [[3]] * 5  # 2.9 / 1e-40 dominates


def test_a_rows_nucleus_is_its_own_whatever_the_other_rows_of_the_call():
    """bfloat16 logits hold few distinct values: where top_p's edge falls among equal probabilities, which of them
    are kept must not depend on how many candidates another row of the same call needed (a flat row needs them
    all). A drafting step samples its rows in one call, plain decoding one: a difference here changed sampled
    tokens in bfloat16 with top_p (15 of 72 runs on the embedded model)."""
    gen = torch.Generator().manual_seed(0)
    vocab = 2048
    differ = 0
    for _ in range(40):
        row = (torch.randn(vocab, generator=gen) * 2).to(torch.bfloat16).float()
        alone = torch.softmax(row.unsqueeze(0), -1)
        beside = torch.softmax(torch.stack([row, torch.zeros(vocab)]), -1)
        for top_p in (0.5, 0.8, 0.9, 0.95):
            p1, i1 = sampling._nucleus(alone, top_p)
            p2, i2 = sampling._nucleus(beside, top_p)
            differ += set(i1[0][p1[0] > 0].tolist()) != set(i2[0][p2[0] > 0].tolist())
    assert differ == 0


def test_a_draft_rows_penalties_are_plain_decodings_to_the_bit():
    """A row after draft tokens is penalised as plain decoding penalises the same tokens emitted: one float32
    expression of the whole count (two subtractions, the counts so far then the path's, differed in the last bit in
    80 of 300 rows, and at a near-tie that flips a greedy token)."""
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        params = SamplingParams(temperature=0.0, frequency_penalty=rng.choice([0.1, 0.3, 0.7, 1.1, -0.45, 0.33]),
                                presence_penalty=rng.choice([0.0, 0.2, 0.5, 1.7, -0.9]),
                                repetition_penalty=rng.choice([1.0, 1.3, 0.8]))
        prompt = [rng.randrange(50) for _ in range(5)]
        out = [rng.randrange(50) for _ in range(rng.randrange(0, 8))]
        path = [rng.randrange(50) for _ in range(rng.randrange(1, 5))]
        logits = torch.randn(1, 50, generator=gen) * 5
        drafting = KeyedSampler(params, prompt)
        drafting.extend(out)
        plain = KeyedSampler(params, prompt)
        plain.extend(out + path)
        assert torch.equal(drafting._penalise(logits.clone(), [path]), plain._penalise(logits.clone(), [[]]))

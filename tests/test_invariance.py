"""A row's result does not depend on the rows beside it: op by op, bitwise, then whole steps and whole runs.

The spec table (issue 28): every op on a row's path -- linear layers with the LM head, norms, rotary
embedding, attention over the cache (its prefix and the step's own rows), the K/V a verification pass
writes for the tokens it accepts -- gives a row the same bits alone (M = 1, a greedy step) and beside
1..63 other rows, of its own sequence or of others. Then the consequence: in bfloat16 as in float32,
every lookahead mode and seeded sampling give exactly the engine's own greedy / plain sampling tokens,
alone and in batches of 1-8, on Llama, Qwen2 and Qwen3.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import numpy as np
import pytest
import torch

import native_variants
from models import ARCHS, tiny_engine, tiny_model, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.reference.batch_runner import RowBlock, row_keys
from trtlade.reference.fast_forward import _rope
from trtlade.reference.native import row_attention, status

KERNEL = row_attention()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"native kernel not built here: {status()}")
ROWS = (1, 2, 3, 4, 5, 8, 13, 16, 27, 64)
DTYPES = (torch.float32, torch.bfloat16)
TREE = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool)  # golden g, branch a (depth 1), branch b (depth 1)


# ------------------------------------------------------------------------------------ op by op
def test_the_kernel_is_built_on_this_host():
    """CI's hosts have a C compiler: the guarantee must not silently fall back there."""
    assert KERNEL is not None, status()


def test_loading_the_kernel_leaves_the_process_floating_point_state_alone():
    """Linked with -ffast-math, a shared library sets flush-to-zero for the whole process when it loads
    (crtfastmath.o): torch and everything else would then lose subnormal numbers."""
    assert KERNEL is not None
    assert (torch.tensor([1e-40], dtype=torch.float32) * 1.0).item() != 0.0
    assert float(np.float32(1e-45) * np.float32(1.0)) != 0.0


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("window, softcap", [(None, None), (40, None), (None, 5.0)])
def test_attention_of_a_row_alone_equals_it_beside_any_rows(window, softcap, variant):
    """A greedy row at position L0 + 1 (its slot holds L0 + 1 committed keys, the token at L0 + 1 is its
    own) against the same row as branch b of a tree at L0, then beside 1..63 rows of other sequences; on
    every CPU variant."""
    KERNEL = row_attention(variant)
    torch.manual_seed(0)
    L0 = 200
    k, v = torch.randn(6, 2, 300, 16), torch.randn(6, 2, 300, 16)
    greedy_k, greedy_v = k.clone(), v.clone()  # greedy's cache: the golden token at L0, b's token at L0 + 1
    greedy_k[0, :, L0 + 1], greedy_v[0, :, L0 + 1] = k[0, :, L0 + 2], v[0, :, L0 + 2]
    q = torch.randn(1, 4, 16)
    alone = KERNEL(q, greedy_k, greedy_v, row_keys([RowBlock(0, [5], [0], [0])], {0: L0 + 1}), 0.25,
                   window=window, softcap=softcap)
    tree = RowBlock(0, [1, 2, 3], [0, 1, 1], [0, 1, 2], mask=TREE)
    for extra in ROWS:
        others = [RowBlock(s, [4] * n, list(range(n)), [n - 1], causal=True)
                  for s, n in zip(range(1, 6), _split(extra))]
        blocks = [tree] + others
        qs = torch.randn(sum(b.rows for b in blocks), 4, 16)
        qs[2] = q[0]
        lengths = {0: L0, **{b.slot: 17 * b.slot for b in others}}
        out = KERNEL(qs, k, v, row_keys(blocks, lengths), 0.25, window=window, softcap=softcap)
        assert torch.equal(out[2], alone[0]), extra
    plain = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], greedy_k[:1, :, :L0 + 2], greedy_v[:1, :, :L0 + 2], scale=0.25, enable_gqa=True)
    if window is None and softcap is None:  # and it is attention: sdpa's result to rounding
        torch.testing.assert_close(alone[0], plain[0].transpose(0, 1)[0], atol=1e-5, rtol=1e-5)


def _split(n: int) -> list[int]:
    """n rows as up to 5 sequences' chunks."""
    parts = [n // 5 + (i < n % 5) for i in range(5)]
    return [p for p in parts if p] or [1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_norms_rotary_and_the_lm_head_give_a_row_the_same_bits_beside_any_rows(arch, dtype):
    eng = engine(arch, dtype)
    body, head = eng.runner.fast, eng.runner.lm_head
    layer = body.layers[0]
    torch.manual_seed(1)
    x = torch.randn(64, eng.model.config.hidden_size, dtype=dtype)
    pos = torch.arange(64) + 100
    heads = x.view(64, -1, 16)
    with torch.inference_mode():
        for rows in ROWS:
            assert torch.equal(layer.input_layernorm(x[:rows])[:1], layer.input_layernorm(x[:1])), rows
            assert torch.equal(head(x[:rows])[:1], head(x[:1])), rows
            cos, sin = body.rotary_emb(x[None, :rows], pos[None, :rows])
            cos1, sin1 = body.rotary_emb(x[None, :1], pos[None, :1])
            assert torch.equal(cos[0, :1], cos1[0]) and torch.equal(sin[0, :1], sin1[0]), rows
            roped = _rope(heads[:rows], cos[0, :, None], sin[0, :, None])
            assert torch.equal(roped[:1], _rope(heads[:1], cos1[0, :, None], sin1[0, :, None])), rows
            if layer.q_norm is not None:
                assert torch.equal(layer.q_norm(heads[:rows])[:1], layer.q_norm(heads[:1])), rows


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("dim", [16, 64, 128])
def test_attention_over_a_bf16_cache_gives_the_bits_of_its_float32_copy(dim, variant):
    """A bf16 model's K/V are bf16 numbers: the kernel reads them from a bf16 cache (half the bytes) and
    widens them exactly, so every row gets the bits it gets from a float32 cache holding the same numbers
    (committed keys in shared chunks, a tree's path, a window); head sizes of the scalar and vector folds."""
    KERNEL = row_attention(variant)
    torch.manual_seed(dim)
    k32 = torch.randn(3, 2, 120, dim).bfloat16().float()  # bf16 numbers, as a bf16 model writes them
    v32 = torch.randn(3, 2, 120, dim).bfloat16().float()
    blocks = [RowBlock(0, [1, 2, 3], [0, 1, 1], [0, 1, 2], mask=TREE), RowBlock(1, [4] * 5, list(range(5)),
                                                                               [0, 4], causal=True)]
    rows = row_keys(blocks, {0: 70, 1: 101})
    q = torch.randn(8, 4, dim)
    for window in (None, 40):
        want = KERNEL(q, k32, v32, rows, 0.125, window=window)
        got = KERNEL(q, k32.bfloat16(), v32.bfloat16(), rows, 0.125, window=window)
        assert torch.equal(got, want), window


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("arch", ARCHS)
def test_a_bf16_model_keeps_its_cache_in_bf16_with_the_float32_caches_bits(arch, variant):
    """Under the native body a bf16 model's cache is bf16; a step's logits and its K/V equal bitwise those
    of the same engine with a float32 cache (prefill, then a lookahead step beside another sequence); on
    every CPU variant."""
    tok = tiny_tokenizer()
    runners = []
    for kv in (torch.bfloat16, torch.float32):
        with native_variants.forced(variant):
            eng = tiny_engine(arch, (7, 5, 7), model=tiny_model(arch, len(tok), dtype=torch.bfloat16))
        assert eng.runner.lm_head.native.kernels.variant == variant
        assert eng.runner.native_body and eng.runner.kv_dtype == torch.bfloat16
        eng.runner.kv_dtype = kv  # before the first slot: the cache is made in this dtype
        runners.append(eng.runner)
    prompt = tok.encode("The quick brown fox jumps over the lazy dog. The quick brown")
    results = []
    for runner in runners:
        a, b = runner.allocate(64), runner.allocate(64)
        first = [runner.prefill(a, prompt), runner.prefill(b, prompt[:9])]
        mask = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool)
        step = runner.forward([RowBlock(a, [5, 6, 7], [0, 1, 1], [0, 1, 2], mask=mask),
                               RowBlock(b, [8, 9], [0, 1], [0, 1], causal=True)])
        keys = runner.cache.layers[-1].keys[a, :, :len(prompt) + 3].float()
        results.append((first, step, keys, runner.cache.layers[0].keys.dtype))
    (f16, s16, k16, d16), (f32, s32, k32, d32) = results
    assert (d16, d32) == (torch.bfloat16, torch.float32)
    assert all(torch.equal(x, y) for x, y in zip(f16 + s16, f32 + s32)) and torch.equal(k16, k32)


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_a_verification_step_computes_and_writes_what_greedy_steps_do(arch, dtype, variant):
    """The whole forward: the logits of every accepted row of a lookahead step, and the K/V it leaves in
    the cache, equal bitwise those of the greedy steps that produce the same tokens; on every CPU variant."""
    eng = engine(arch, dtype, variant=variant)
    assert eng.runner.lm_head.native.kernels.variant == variant and eng.runner.native_body
    runner = eng.runner
    prompt = tiny_tokenizer().encode("The quick brown fox jumps over the lazy dog. The quick brown")
    greedy = eng.greedy(prompt, 6, ignore_eos=True).tokens
    runner.free_all()
    a = runner.allocate(64)
    last = runner.prefill(a, prompt)
    logits_g, seq = [], list(greedy)
    for t in seq[:4]:  # greedy: one row per step
        logits_g.append(runner.forward([RowBlock(a, [t], [0], [0])])[0][0])
        runner.keep([(a, [0])])
    keys_g = [layer.keys[a, :, :len(prompt) + 4].clone() for layer in runner.cache.layers]
    runner.free_all()
    b = runner.allocate(64)
    assert torch.equal(runner.prefill(b, prompt), last)
    # one step: the golden token, a wrong branch, then the right path of 3 drafts (depths 1, 2, 3)
    toks = [seq[0], (seq[1] + 1) % 50, seq[1], seq[2], seq[3]]
    depths = [0, 1, 1, 2, 3]
    mask = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 1, 1, 1]], dtype=bool)
    other = runner.allocate(64)  # a neighbour sequence in the same step
    runner.prefill(other, prompt[:7])
    out = runner.forward([RowBlock(b, toks, depths, [0, 2, 3, 4], mask=mask), RowBlock(other, [9, 8], [0, 1], [1],
                                                                                        causal=True)])
    for i in range(4):
        assert torch.equal(out[0][i], logits_g[i]), f"accepted row {i}"
    runner.keep([(b, [0, 2, 3, 4]), (other, [0, 1])])
    for layer, ref in zip(runner.cache.layers, keys_g):
        assert torch.equal(layer.keys[b, :, :len(prompt) + 4], ref)


@lru_cache(maxsize=None)
def engine(arch: str, dtype: torch.dtype = torch.float32, lookup: int = 0, variant: Optional[str] = None):
    tok = tiny_tokenizer()
    with native_variants.forced(variant):
        return tiny_engine(arch, (7, 5, 7), model=tiny_model(arch, len(tok), dtype=dtype), prompt_lookup=lookup)


# ------------------------------------------------------------------------------------ whole runs, bf16
TEXTS = ["Once upon a time there was a little robot who liked to paint pictures",
         "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
         "The cat sat on the mat. The cat sat on the mat. The dog",
         "def is_prime(n):\n    if n < 2:\n        return False"]


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(tiny_tokenizer().encode(t)) for t in TEXTS)


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_every_lookahead_mode_is_greedy_token_for_token(arch, variant):
    eng, fast = engine(arch, torch.bfloat16, variant=variant), engine(arch, torch.bfloat16, lookup=4, variant=variant)
    assert eng.bit_exact and eng.exactness["row_invariant_attention"] == "native"
    assert eng.exactness["kernels"] == native_variants.bf16_kernels(variant)
    for prompt in prompts():
        want = eng.greedy(list(prompt), 40, ignore_eos=True).tokens
        for spec in [(2, 2, 1), (2, 4, 2), (4, 4, 4), (7, 5, 7), "auto"]:
            assert eng.generate(list(prompt), 40, lookahead=spec, ignore_eos=True).tokens == want, spec
            assert fast.generate(list(prompt), 40, lookahead=spec, ignore_eos=True).tokens == want, ("fast", spec)


@needs_kernel
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_seeded_lookahead_sampling_draws_what_plain_sampling_draws(arch):
    eng = engine(arch, torch.bfloat16, lookup=4)
    for prompt in prompts():
        for seed, warpers in [(3, dict(temperature=0.3)), (11, dict(temperature=0.8, top_p=0.9, top_k=20))]:
            plain = eng.generate(list(prompt), 32, lookahead=(1, 1, 0), seed=seed, ignore_eos=True, **warpers).tokens
            for spec in [(2, 4, 2), (7, 5, 7), "auto"]:
                got = eng.generate(list(prompt), 32, lookahead=spec, seed=seed, ignore_eos=True, **warpers).tokens
                assert got == plain, (spec, seed)


@needs_kernel
@pytest.mark.parametrize("batch_size", [1, 2, 5, 8])
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_batches_of_1_to_8_are_greedy_token_for_token(arch, batch_size):
    """Mixed specs, greedy and sampled neighbours, arrivals at different steps; each request's tokens equal
    running it alone (greedy: plain greedy; sampled: plain sampling with its seed)."""
    eng = engine(arch, torch.bfloat16)
    specs = [(7, 5, 7), None, (2, 4, 2), (1, 1, 0), (4, 4, 4), (2, 2, 1), None, (7, 5, 7)]
    ps = [prompts()[i % 4] for i in range(8)]
    reqs = [request(p, s, max_tokens=32) for p, s in zip(ps, specs)]
    reqs[5] = request(ps[5], (4, 4, 4), max_tokens=32, temperature=0.7, seed=5)
    out = run(eng.new_batch(max_batch_size=batch_size), {0: reqs[:4], 3: reqs[4:]})
    for i, p in enumerate(ps):
        if i == 5:
            want = eng.generate(list(p), 32, lookahead=(1, 1, 0), temperature=0.7, seed=5, ignore_eos=True).tokens
        else:
            want = eng.greedy(list(p), 32, ignore_eos=True).tokens
        assert list(tokens(out[i])) == want, f"request {i} spec {specs[i]}"


@needs_kernel
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_schedule_requests_in_a_filling_batch_are_greedy_token_for_token(arch):
    """The schedule drafts (4,2,4) while a request is alone and stops when neighbours arrive: the bf16 tokens
    stay greedy's through every change of rows."""
    from trtlade.schedule import LookaheadSchedule
    from trtlade.spec import LookaheadSpec

    eng = engine(arch, torch.bfloat16)
    schedule = LookaheadSchedule.parse([{"up_to": 1, "spec": "4,2,4"}, {"spec": "1,1,0"}])
    ps = prompts()
    first = request(ps[0], LookaheadSpec(4, 2, 4), max_tokens=40, policy="schedule", schedule=schedule, band=0)
    later = [request(p, LookaheadSpec(1, 1, 0), max_tokens=6, policy="schedule", schedule=schedule, band=1)
             for p in ps[1:4]]
    out = run(eng.new_batch(max_batch_size=8), {0: [first], 4: later})
    assert list(tokens(out[0])) == eng.greedy(list(ps[0]), 40, ignore_eos=True).tokens
    for i, p in enumerate(ps[1:4], 1):
        assert list(tokens(out[i])) == eng.greedy(list(p), 6, ignore_eos=True).tokens
    assert any(r > 1 for r in out[0][-1].stats.rows_per_step[1:4])  # it did draft


def test_bf16_engine_states_its_exactness():
    eng = engine("llama", torch.bfloat16)
    info = eng.exactness
    assert info["dtype"] == "bfloat16" and info["bit_exact"] == (KERNEL is not None)
    assert ("bit for bit" in info["statement"]) == info["bit_exact"]
    off = tiny_engine("llama", (2, 2, 1), model=tiny_model("llama", len(tiny_tokenizer()), dtype=torch.bfloat16),
                      invariant_attention=False)
    assert not off.bit_exact and "near-tie" in off.exactness["statement"]


def test_a_served_bf16_engine_states_its_exactness_in_version():
    from fastapi.testclient import TestClient

    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    app = create_app(lambda: ReferenceServingEngine(engine("qwen3", torch.bfloat16), details={"dtype": "bfloat16"}))
    with TestClient(app) as client:
        for _ in range(200):  # the engine loads in a thread
            body = client.get("/version").json()
            if body["status"] == "ready":
                break
            import time
            time.sleep(0.05)
    exact = body["engine"]["details"]["exactness"]
    assert exact["dtype"] == "bfloat16" and exact["bit_exact"] == (KERNEL is not None)
    assert exact["row_invariant_linear"] is True and "statement" in exact
    from trtlade.reference.native import kernels  # which CPU variant computes it, said where users look
    assert exact["kernels"] == native_variants.bf16_kernels(kernels().variant)
    assert f"variant {kernels().variant}" in exact["native_kernel"]

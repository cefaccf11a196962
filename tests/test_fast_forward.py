"""The engine's own Llama-family forward (trtlade.reference.fast_forward): fused projections with rows
that do not change each other, one copy of the weights when the engine owns the model, and the same
greedy tokens as transformers (the lossless suite in test_engine_lossless.py runs on it too)."""

from __future__ import annotations

import pytest
import torch

import native_variants
from models import ARCHS, tiny_engine, tiny_model, tiny_tokenizer
from trtlade.reference.batch_runner import UnsupportedModelError
from trtlade.reference.fast_forward import FusedLinear, RotaryTable, fast_body
from trtlade.reference.kernels import onednn_available
from trtlade.reference.native import PanelLinear, linear_dtypes, status
from trtlade.reference.native.cpu import ENV

ROWS = (1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 32, 64)


NATIVE = {"float32": torch.float32, "bfloat16": torch.bfloat16}
needs_native = pytest.mark.skipif(not linear_dtypes(), reason=f"native linear kernel not built here: {status()}")
#: oneDNN's bfloat16 GEMM needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT (torch's check, named in the skip)
ONEDNN_BF16 = onednn_available(torch.bfloat16)
ONEDNN_BF16_REASON = (f"oneDNN's bfloat16 GEMM needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT; this CPU's torch "
                      f"capability is {torch.backends.cpu.get_cpu_capability()}")
KERNELS = [pytest.param(f"native:{p.values[0]}", id=f"native-{p.values[0]}", marks=p.marks)
           for p in native_variants.params()] + ["onednn-packed"]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("in_features", [64, 576, 1536])
def test_a_rows_projection_does_not_depend_on_the_rows_beside_it(kernel, dtype, in_features, monkeypatch):
    """Bitwise, for 1 to 64 rows, on every kernel: each native variant computes each output as one chain
    over k whatever the tile; with more than 1024 inputs oneDNN takes another kernel for one row (float32
    and bfloat16), so FusedLinear computes a lone row as two there."""
    assert onednn_available()
    if kernel == "onednn-packed" and dtype == torch.bfloat16 and not ONEDNN_BF16:
        pytest.skip(ONEDNN_BF16_REASON)
    if kernel.startswith("native:"):
        monkeypatch.setenv(ENV, kernel.split(":")[1])
    torch.manual_seed(0)
    layers = [torch.nn.Linear(in_features, 96, bias=True), torch.nn.Linear(in_features, 32, bias=False)]
    fused = FusedLinear([layer.to(dtype) for layer in layers], release=False, native=kernel != "onednn-packed")
    assert fused.kernel == kernel.split(":")[0]
    if fused.native is not None:
        assert fused.native.kernels.variant == kernel.split(":")[1]
    x = torch.randn(64, in_features, dtype=dtype)
    with torch.inference_mode():
        alone = fused(x[:1])
        for rows in ROWS:
            assert torch.equal(fused(x[:rows])[:1], alone), rows
        for trial in range(40):  # bf16 rounds away most differences: many inputs, to catch the rest
            y = torch.randn(3, in_features, dtype=dtype)
            assert torch.equal(fused(y[:1]), fused(y)[:1]), trial
        reference = torch.cat([layers[0](x), layers[1](x)], dim=-1)
        assert torch.allclose(fused(x).float(), reference.float(), atol=1e-2 if dtype == torch.bfloat16 else 1e-4)
    assert fused.splits == [96, 32] and fused.two_rows_for_one == (kernel == "onednn-packed" and in_features > 1024)


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_features, in_features", [(1, 2), (17, 6), (50, 64), (300, 130)])
def test_the_native_kernel_computes_odd_shapes_and_reads_its_rows_back(dtype, out_features, in_features, variant):
    """Outputs not a multiple of the 16-wide panels, a bias in float32, and W's rows read back exactly
    (the tied embedding reads its rows from the LM head's packed copy), on every CPU variant."""
    torch.manual_seed(1)
    w, b = torch.randn(out_features, in_features).to(dtype), torch.randn(out_features).to(dtype)
    lin = PanelLinear.pack(w, b, variant=variant)
    x = torch.randn(70, in_features).to(dtype)
    y = lin(x)
    assert y.shape == (70, out_features) and y.dtype == dtype and lin.kernels.variant == variant
    reference = x.float() @ w.float().T + b.float()
    assert torch.allclose(y.float(), reference, atol=0.06 * in_features ** 0.5 if dtype == torch.bfloat16 else 1e-4)
    assert torch.equal(torch.stack([lin(x[i:i + 1])[0] for i in range(70)]), y)
    ids = torch.tensor([out_features - 1, 0, out_features // 2])
    assert torch.equal(lin.rows(ids), w[ids]) and torch.equal(lin.rows(ids[None]), w[ids])
    with pytest.raises(IndexError, match="outside"):  # a padded panel's row is not W's
        lin.rows(torch.tensor([out_features]))


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_native_kernels_bits_do_not_depend_on_the_threads_or_who_takes_which_panels(variant, dtype):
    """1 to 8 threads on this machine's cores: the AVX2 schedule gives each thread a range of panel groups
    and lets a thread whose range is done take groups from another's (with 8 threads and 5 groups three
    ranges are empty, so those threads take from the others at once); no output's chain may change."""
    torch.manual_seed(3)
    before = torch.get_num_threads()
    try:
        for n, k in [(300, 130), (17, 6), (960, 64)]:
            lin = PanelLinear.pack(torch.randn(n, k).to(dtype), torch.randn(n).to(dtype), variant=variant)
            x = torch.randn(13, k).to(dtype)
            torch.set_num_threads(1)
            want = {rows: lin(x[:rows]) for rows in (1, 2, 3, 4, 7, 13)}
            for threads in (2, 3, 5, 8):
                torch.set_num_threads(threads)
                for trial in range(5):
                    for rows, y in want.items():
                        assert torch.equal(lin(x[:rows]), y), (n, k, threads, rows, trial)
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif("avx512bf16" not in native_variants.RUNS, reason="this CPU lacks AVX512-BF16 (VDPBF16PS)")
def test_bf16_on_vdpbf16ps_and_on_widened_fmas_give_the_same_bits_at_every_row_count():
    """The avx512bf16 variant computes bfloat16 on VDPBF16PS or, where this CPU's float32 FMAs are faster,
    on widened pairs (the chain of VDPBF16PS's pseudo-code): the two give the same bits, one row or 16 or
    40, so the choice made at load never changes a token; each stays row-invariant. ``paths`` names the one that
    runs as it is asked."""
    torch.manual_seed(4)
    lins = [PanelLinear.pack(torch.randn(n, k).to(torch.bfloat16), torch.randn(n).to(torch.bfloat16),
                             variant="avx512bf16") for n, k in [(17, 6), (300, 130), (960, 576), (64, 1536)]]
    choose, tiles = lins[0].kernels.linear_bf16_by_fma, lins[0].kernels.linear_bf16_amx
    chosen, amx = choose(-1), tiles(-1)
    tiles(0)  # the AMX tiles, where the CPU has them, are another path with bits of their own (test_amx.py)
    try:
        outs = {}
        for mode in (0, 1):
            assert choose(mode) == mode
            assert ("widened" in lins[0].kernels.paths["bfloat16"]) == (mode == 1)  # asked now: what runs now
            for i, lin in enumerate(lins):
                x = torch.randn(40, lin.in_features, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
                for rows in (1, 2, 8, 9, 13, 16, 17, 40):
                    outs[mode, i, rows] = y = lin(x[:rows])
                    assert torch.equal(y[:1], lin(x[:1])), (mode, i, rows)
        for key, y in outs.items():
            assert torch.equal(outs[(1 - key[0], *key[1:])], y), key
    finally:
        choose(chosen)
        tiles(amx)


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_prefetch_lead_never_changes_a_bit(variant, dtype):
    """The AVX-512 tiles of up to 8 rows prefetch either each panel's stream a lead ahead (chosen on Intel)
    or the next group spread over the current one (elsewhere, and here lead 0, the reference every lead is
    compared to). With a lead, float32 steps of 3 rows or more run in tiles of up to 8 rows over spans of 32 k
    steps (one tile for 3-8 rows), reading the weights once per 32 rows, where lead 0 runs one tile (3-8
    rows), the 16-row tile (9-16 rows) or one pass per 8 rows (17 and more); a single row after full tiles joins
    the tile before it (9, 17, 25 and 41 rows: a tile of 9); K of 6, 130, 576 and 1536 end spans early or
    mid-way, 33, 40 and 41 rows read twice. A prefetch moves no value and every path computes the same chains,
    so all give the same bits at every row count; the variants without AVX-512 always spread (lead 0)."""
    torch.manual_seed(5)
    lins = [PanelLinear.pack(torch.randn(n, k).to(dtype), torch.randn(n).to(dtype), variant=variant)
            for n, k in [(17, 6), (300, 130), (960, 576), (64, 1536)]]
    lead = lins[0].kernels.linear_lead
    chosen = lead(-1)
    try:
        outs = {}
        for want in (0, 2048, 64):
            got = lead(want)
            assert got == (want if variant.startswith("avx512") else 0)
            for i, lin in enumerate(lins):
                x = torch.randn(41, lin.in_features, generator=torch.Generator().manual_seed(i)).to(dtype)
                for rows in (1, 2, 3, 5, 7, 8, 9, 12, 16, 17, 25, 33, 40, 41):
                    outs[want, i, rows] = lin(x[:rows])
        for (want, i, rows), y in outs.items():
            assert torch.equal(outs[0, i, rows], y), (want, i, rows)
    finally:
        lead(chosen)


@pytest.mark.parametrize("variant", native_variants.pairs())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_cpu_variant_gives_the_best_variants_bits(variant, dtype):
    """The same FMA chain on every instruction set (bfloat16: widened pairs, odd k first, as VDPBF16PS):
    a linear layer's output has the same bits on each variant this CPU runs, whatever the row count."""
    torch.manual_seed(2)
    best = native_variants.RUNS[0]
    same = total = 0
    for n, k in [(17, 6), (300, 130), (960, 576), (64, 1536)]:
        w, b = torch.randn(n, k).to(dtype), torch.randn(n).to(dtype)
        x = torch.randn(9, k).to(dtype)
        got, want = PanelLinear.pack(w, b, variant=variant)(x), PanelLinear.pack(w, b, variant=best)(x)
        if dtype == torch.bfloat16 and "avx512bf16" in (variant, best):
            # VDPBF16PS against its emulation: Intel's pseudo-code is two FMAs, odd k first; whether a CPU's
            # hardware rounds the same is measured here (docs/explanation/speed.md, "Across CPU classes")
            # a float32 sum that rounds once more or less can move a bf16 result by one ulp, or by more
            # where the sum cancels to near zero: one ulp from |y| >= 1 on, 0.01 absolute below
            ulps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
            large = want.float().abs() >= 1.0
            assert bool((ulps[large] <= 1).all()), (n, k)
            assert bool(((got.float() - want.float())[~large].abs() <= 1e-2).all()), (n, k)
            same, total = same + int((ulps == 0).sum()), total + ulps.numel()
        else:
            assert torch.equal(got, want), (n, k)
    if total:
        print(f"bf16 {variant} vs {best}: {same}/{total} outputs bit-identical")


def test_without_the_native_kernel_the_fused_linear_runs_onednn_where_this_cpu_has_it(monkeypatch):
    """A forced variant this CPU cannot run leaves the library unused (the status says why); float32 then
    runs oneDNN, and bfloat16 runs oneDNN only where this CPU has its bf16 path, else the plain GEMM:
    no oneDNN call whose CPU requirement was not checked (it raised a RuntimeError on AVX2-only CPUs)."""
    monkeypatch.setenv(ENV, "no-such-variant")
    assert not linear_dtypes() and "TRTLADE_NATIVE_ISA=no-such-variant" in status()
    fused = FusedLinear([torch.nn.Linear(64, 32)], release=False)
    assert fused.kernel == "onednn-packed" and fused.native is None
    half = FusedLinear([torch.nn.Linear(64, 32).to(torch.bfloat16)], release=False)
    assert half.kernel == ("onednn-packed" if ONEDNN_BF16 else "plain")
    assert half(torch.ones(2, 64, dtype=torch.bfloat16)).shape == (2, 32)
    with pytest.raises(ValueError, match="native linear kernel does not run"):
        FusedLinear([torch.nn.Linear(64, 32)], release=False, native=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_llama_family_runs_the_fast_forward(arch):
    eng = tiny_engine(arch, (4, 2, 4))
    expected = "fused-native" if "float32" in linear_dtypes() else "fused-onednn-packed"
    assert eng.runner.fast is not None and eng.runner.kernel_choice.kernel == expected
    layer = eng.runner.fast.layers[0]
    assert layer.attn_in.splits == [64, 32, 32] and len(layer.mlp_in.splits) == 2
    assert (layer.q_norm is not None) == (arch == "qwen3")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rotary_table_gives_the_modules_bits_at_every_position(arch, dtype):
    """The native body's cos/sin come from a table of every position (RotaryTable): at one position, at a
    step's few, and past the first table (it grows), the bits the model's own rotary module computes for
    those positions alone; a dtype change rebuilds it."""
    module = tiny_model(arch, dtype=dtype).model.rotary_emb
    table = RotaryTable.for_module(module)
    assert table is not None
    for positions in ([0], [5], [7, 8, 9, 9, 10], [RotaryTable.FIRST - 1, RotaryTable.FIRST], [3000], [1, 2999, 4100]):
        ids = torch.tensor([positions])
        cos, sin = table(ids, dtype)
        want_cos, want_sin = module(torch.empty(1, 1, dtype=dtype), ids)
        assert torch.equal(cos, want_cos[0].float()) and torch.equal(sin, want_sin[0].float()), positions
        assert cos.dtype == torch.float32 and cos.is_contiguous()
    assert table.cos.shape[0] >= 4101
    other = torch.float32 if dtype == torch.bfloat16 else torch.bfloat16
    cos, _ = table(torch.tensor([[7]]), other)
    assert torch.equal(cos, module(torch.empty(1, 1, dtype=other), torch.tensor([[7]]))[0][0].float())


def test_a_rope_that_changes_with_the_length_gets_a_table_by_position():
    module = tiny_model("llama").model.rotary_emb
    assert not RotaryTable.for_module(module).per_position
    module.rope_type = "dynamic"
    assert RotaryTable.for_module(module).per_position  # tests/test_rope_scaling.py checks its values


def test_released_weights_leave_one_copy_and_the_same_tokens():
    tok = tiny_tokenizer()
    prompt = tok.encode("Once upon a time there was a little robot who")
    kept = tiny_engine("llama", (4, 2, 4), model=tiny_model("llama", len(tok), seed=3))
    owned = tiny_engine("llama", (4, 2, 4), model=tiny_model("llama", len(tok), seed=3), release_weights=True)
    attn = owned.model.model.layers[0].self_attn
    assert attn.q_proj.weight.numel() == 0 and owned.model.model.layers[0].mlp.down_proj.weight.numel() == 0
    assert kept.model.model.layers[0].self_attn.q_proj.weight.numel() > 0  # a caller's model stays usable
    for spec in [(1, 1, 0), (4, 2, 4)]:
        assert owned.generate(prompt, max_tokens=24, lookahead=spec, ignore_eos=True).tokens == \
            kept.generate(prompt, max_tokens=24, lookahead=spec, ignore_eos=True).tokens


@pytest.mark.parametrize("native, cache", [(None, torch.bfloat16), (False, torch.float32)])
def test_a_bf16_model_keeps_its_kv_cache_in_bf16_under_the_native_body_else_in_float32(native, cache):
    """The native body reads a bf16 cache (a bf16 model's K/V exactly, half the bytes); torch's ops and
    attention on the CPU keep float32 (bf16 sdpa is several times slower there)."""
    tok = tiny_tokenizer()
    eng = tiny_engine("llama", (4, 2, 4), model=tiny_model("llama", len(tok), dtype=torch.bfloat16),
                      native_kernels=native)
    if native is None and not eng.runner.native_body:
        pytest.skip("no native body on this host")
    assert eng.runner.kv_dtype == cache and eng.dtype == "bfloat16"
    prompt = tok.encode("The quick brown fox jumps over the lazy dog and the")
    greedy = eng.generate(prompt, max_tokens=16, lookahead=(1, 1, 0), ignore_eos=True).tokens
    assert eng.runner.cache.layers[0].keys.dtype == cache and len(greedy) == 16


def test_other_families_keep_transformers_forward_and_a_forced_fast_forward_says_why():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64))
    assert fast_body(model) is None
    with pytest.raises(UnsupportedModelError, match="Llama family"):
        tiny_engine("llama", (2, 2, 1), fast_forward=True, model=_mistral_like_without_norm_eps())


def _mistral_like_without_norm_eps():
    """A Llama model with one projection swapped for a non-Linear module: not the shape fast_body copies."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok))
    model.model.layers[0].mlp.up_proj = torch.nn.Sequential(model.model.layers[0].mlp.up_proj)
    return model


# ------------------------------------------------------------------- row-invariant attention (experimental)
def test_a_verification_rows_attention_equals_a_greedy_rows_bitwise():
    """invariant_attention: row b of a tree (sees the golden row) at position L0 + 1 gets the bits of a
    greedy row at that position with the same keys, alone and beside another sequence."""
    import numpy as np

    from trtlade.reference.batch_runner import RowBlock, invariant_attention, invariant_index

    torch.manual_seed(0)
    K, V = torch.randn(2, 3, 300, 64), torch.randn(2, 3, 300, 64)
    L0 = 200
    greedy_k, greedy_v = K.clone(), V.clone()  # greedy's cache: the golden row at L0, row b's token at L0 + 1
    greedy_k[0, :, L0 + 1], greedy_v[0, :, L0 + 1] = K[0, :, L0 + 2], V[0, :, L0 + 2]
    q = torch.randn(1, 9, 1, 64)
    greedy = invariant_attention(q, greedy_k, greedy_v, 0.125, invariant_index([RowBlock(0, [5], [0], [0])],
                                                                               {0: L0 + 1}))
    tree = RowBlock(0, [1, 2, 3], [0, 1, 1], [0, 1, 2], mask=np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))
    for blocks, lengths in (([tree], {0: L0}), ([tree, RowBlock(1, [4], [0], [0])], {0: L0, 1: 37})):
        qs = torch.randn(1, 9, sum(b.rows for b in blocks), 64)
        qs[:, :, 2] = q[:, :, 0]
        out = invariant_attention(qs, K, V, 0.125, invariant_index(blocks, lengths))
        assert torch.equal(out[0, 2], greedy[0, 0])
        plain = torch.nn.functional.scaled_dot_product_attention(q, greedy_k[:1, :, :L0 + 2], greedy_v[:1, :, :L0 + 2],
                                                                 scale=0.125, enable_gqa=True)
        assert torch.allclose(out[0, 2], plain.transpose(1, 2)[0, 0], atol=1e-5)  # the same attention


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_lookahead_is_token_identical_with_invariant_attention(arch):
    tok = tiny_tokenizer()
    eng = tiny_engine(arch, (4, 4, 4), model=tiny_model(arch, len(tok), dtype=torch.bfloat16),
                      invariant_attention=True)
    assert eng.dtype == "bfloat16"
    prompts = [tok.encode(t) for t in ("Once upon a time there was a little robot who liked to paint pictures",
                                       "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
                                       "The cat sat on the mat. The cat sat on the mat. The dog")]
    for prompt in prompts:
        greedy = eng.generate(prompt, max_tokens=32, lookahead=(1, 1, 0), ignore_eos=True).tokens
        for spec in [(2, 2, 1), (2, 4, 2), (4, 4, 4)]:
            assert eng.generate(prompt, max_tokens=32, lookahead=spec, ignore_eos=True).tokens == greedy, spec


@needs_native
def test_a_tied_embedding_reads_the_packed_head_and_keeps_no_second_copy():
    """SmolLM2 ties its embedding to the LM head: the engine's embedding reads its rows from the head's
    native packed weight, the model's own copy is released, and greedy and lookahead still give
    transformers' generate tokens."""
    from transformers import AutoModelForCausalLM

    from models import tiny_config

    tok = tiny_tokenizer()
    config = tiny_config("qwen3", len(tok))
    config.tie_word_embeddings = True

    def model():
        torch.manual_seed(5)
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()

    reference = model()
    assert reference.get_input_embeddings().weight is reference.get_output_embeddings().weight
    prompt = tok.encode("Once upon a time there was a little robot who")
    with torch.no_grad():
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                                      eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    owned = tiny_engine("qwen3", (4, 2, 4), model=model(), release_weights=True)
    assert type(owned.runner.fast.embed_tokens).__name__ == "PackedEmbedding"
    assert owned.model.get_input_embeddings().weight.numel() == 0
    for spec in [(1, 1, 0), (4, 2, 4)]:
        assert owned.generate(prompt, max_tokens=24, lookahead=spec, ignore_eos=True).tokens == expected


@needs_native
@pytest.mark.parametrize("arch", ARCHS)
def test_the_native_body_and_the_onednn_forward_give_the_same_tokens(arch):
    """One call per step (linear.c + layer_ops.c) against oneDNN's GEMMs with torch's ops, on the same
    model: greedy and lookahead give the same tokens (float32), and the engine says which one it runs."""
    tok = tiny_tokenizer()
    prompt = tok.encode("The quick brown fox jumps over the lazy dog and the quick brown")
    native = tiny_engine(arch, (4, 2, 4), model=tiny_model(arch, len(tok), seed=2))
    onednn = tiny_engine(arch, (4, 2, 4), model=tiny_model(arch, len(tok), seed=2), native_kernels=False)
    assert native.stats["native_body"] and not onednn.stats["native_body"]
    assert onednn.runner.kernel_choice.kernel == "fused-onednn-packed"
    for spec in [(1, 1, 0), (4, 2, 4)]:
        assert native.generate(prompt, max_tokens=24, lookahead=spec, ignore_eos=True).tokens == \
            onednn.generate(prompt, max_tokens=24, lookahead=spec, ignore_eos=True).tokens


def test_native_kernels_asked_where_they_cannot_run_is_a_clear_error():
    """native_kernels=True is never dropped silently: with the model's own linear layers kept (pack_linears=False)
    the engine refuses it by name, with what to do; outside the Llama family and on transformers' forward it
    requires (and gets) the native linear kernel."""
    tok = tiny_tokenizer()
    with pytest.raises(UnsupportedModelError, match="pack_linears=False keeps as they are") as info:
        tiny_engine("llama", (2, 2, 1), model=tiny_model("llama", len(tok)), native_kernels=True, pack_linears=False)
    assert "native_kernels unset" in str(info.value)
    if PanelLinear.supports(torch.zeros(2, 2)):
        for arch, extra in (("gemma2", {}), ("llama", {"fast_forward": False})):
            engine = tiny_engine(arch, (2, 2, 1), model=tiny_model(arch, len(tok)), native_kernels=True, **extra)
            assert engine.runner.kernel_choice.kernel == "native"


@needs_native
def test_the_native_body_times_its_parts_on_request_and_the_tokens_stay():
    """``NativeBody.time_parts`` (benchmarks/step_parts.py) fills the body's timers without a torch profile;
    off (the default) they stay zero; the tokens are the same either way."""
    eng = tiny_engine("llama", (1, 1, 0))
    native = eng.runner.fast.native if eng.runner.fast is not None else None
    if native is None:
        pytest.skip("no native body for this model here")
    ids = [5, 6, 7, 8, 9, 10]
    native.timings[:] = 0.0
    plain = eng.greedy(ids, max_tokens=6, ignore_eos=True).tokens
    assert not native.timings.any()
    native.time_parts = True
    try:
        timed = eng.greedy(ids, max_tokens=6, ignore_eos=True).tokens
    finally:
        native.time_parts = False
    assert timed == plain
    assert (native.timings > 0).all()  # linear layers, attention, small ops: each timed

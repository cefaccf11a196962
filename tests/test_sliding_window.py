"""Sliding-window and mixed-attention models are exact on the reference engine (fp32, tiny models).

Four tiny random families, window :data:`~models.WINDOW` = 8 tokens, prompts longer and shorter than
the window: Mistral (every layer sliding; the engine's own forward), Qwen2 with ``use_sliding_window``
(full then sliding layers; own forward), Gemma 2 (alternating, attention and final-logit soft-capping;
transformers' forward) and Gemma 3 (five sliding layers to one full, two ropes; transformers' forward).

The reference is transformers itself: its logits for a whole prompt, and its ``generate`` on an untouched
copy of the model. Then every lookahead mode (fixed specs, the fast preset's prompt lookup, auto),
alone and in a mixed batch, and seeded sampling against plain sampling with the same seed.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch

import native_variants
from models import WINDOW, WINDOW_ARCHS, tiny_engine, tiny_model, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.reference.batch_runner import (
    BatchRunner, RowBlock, UnsupportedModelError, check_supported, layer_windows, step_layout,
)

ENGINE_SPEC = (7, 5, 7)
SPECS = [(2, 2, 1), (2, 4, 2), (4, 4, 4), (7, 5, 7)]
MAX_TOKENS = 40
TEXTS = ["def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):",
         "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
         "one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve.",
         "Honey bees"]  # the last is shorter than the window


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    tok = tiny_tokenizer()
    out = tuple(tuple(tok.encode(t)) for t in TEXTS)
    assert all(len(p) > 2 * WINDOW for p in out[:3]) and len(out[3]) < WINDOW
    return out


@lru_cache(maxsize=None)
def engine(arch: str, lookup: int = 0):
    return tiny_engine(arch, ENGINE_SPEC, prompt_lookup=lookup)


@lru_cache(maxsize=None)
def hf_model(arch: str):
    return tiny_model(arch, len(tiny_tokenizer()))


@lru_cache(maxsize=None)
def hf_greedy(arch: str, prompt: tuple[int, ...]) -> tuple[int, ...]:
    with torch.inference_mode():
        out = hf_model(arch).generate(torch.tensor([list(prompt)]), do_sample=False, max_new_tokens=MAX_TOKENS,
                                      min_new_tokens=MAX_TOKENS, eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


# ------------------------------------------------------------------------------------ what each layer sees
@pytest.mark.parametrize("arch,expected", [
    ("mistral", [WINDOW, WINDOW]),
    ("qwen2-sw", [None, WINDOW, WINDOW]),
    ("gemma2", [WINDOW, None]),
    ("gemma3", [WINDOW] * 5 + [None]),
    ("llama", [None, None]),
])
def test_layer_windows_are_what_each_attention_module_passes(arch, expected):
    assert layer_windows(hf_model(arch)) == expected


def test_a_verification_row_sees_its_window_of_its_own_path():
    """Slot holds 10 tokens; a golden row g (position 10) and two branches a (11) -> b (12), c (11).
    With window 3, row b sees positions 10..12: the golden row, a and itself, never c or position 9."""
    mask = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=bool)
    layout = step_layout([RowBlock(0, [5, 6, 7, 8], [0, 1, 2, 1], [0, 1, 2, 3], mask=mask)], {0: 10})
    seen = (layout.window_mask(3)[0, 0, 0] == 0).numpy()
    visible = {row: sorted(np.flatnonzero(seen[row]).tolist()) for row in range(4)}
    assert visible == {0: [8, 9, 10], 1: [9, 10, 11], 2: [10, 11, 12], 3: [9, 10, 13]}
    assert (layout.window_mask(None) == layout.mask).all()


@pytest.mark.parametrize("arch", WINDOW_ARCHS)
@pytest.mark.parametrize("chunk", [None, 5])
def test_prompt_logits_equal_transformers(arch, chunk):
    """Every row of a prompt longer than the window, in one prefill or in chunks (which take the masked
    path), against transformers' own forward: the window, soft-capping (Gemma 2's final one too) and both
    ropes (Gemma 3) are applied as the model applies them."""
    model = hf_model(arch)
    eng = engine(arch)
    for prompt in prompts():
        with torch.inference_mode():
            want = model(torch.tensor([list(prompt)])).logits[0].float()
        eng.runner.free_all()
        slot = eng.runner.allocate(len(prompt) + 8)
        got = eng.runner.prefill(slot, list(prompt), chunk=chunk, all_rows=True)
        eng.runner.free(slot)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------ lossless decoding
@pytest.mark.parametrize("arch", WINDOW_ARCHS)
def test_greedy_and_every_lookahead_mode_equal_transformers_generate(arch):
    eng, fast = engine(arch), engine(arch, lookup=4)
    accepted = 0
    for prompt in prompts():
        want = hf_greedy(arch, prompt)
        assert tuple(eng.greedy(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True).tokens) == want
        for spec in SPECS:
            result = eng.generate(list(prompt), max_tokens=MAX_TOKENS, lookahead=spec, ignore_eos=True)
            assert tuple(result.tokens) == want, f"{arch} {spec}"
            accepted += sum(c for k, c in result.stats.tokens_per_step_hist.items() if k > 1)
        for mode in [(4, 4, 4), "auto"]:
            result = fast.generate(list(prompt), max_tokens=MAX_TOKENS, lookahead=mode, ignore_eos=True)
            assert tuple(result.tokens) == want, f"{arch} fast preset {mode}"
    assert accepted > 0  # drafts were accepted, so verification rows past the window were kept


@pytest.mark.parametrize("arch", WINDOW_ARCHS)
def test_a_mixed_batch_is_lossless(arch):
    eng = engine(arch)
    specs = [(7, 5, 7), None, (2, 4, 2), (1, 1, 0)]
    reqs = [request(p, s, max_tokens=MAX_TOKENS) for p, s in zip(prompts(), specs)]
    sampled = request(prompts()[0], (4, 4, 4), max_tokens=MAX_TOKENS, temperature=0.7, seed=5)
    out = run(eng.new_batch(max_batch_size=8), {0: reqs[:2], 2: reqs[2:] + [sampled]})
    for i, prompt in enumerate(prompts()):
        assert tokens(out[i]) == hf_greedy(arch, prompt), f"{arch} request {i} spec {specs[i]}"
    solo = eng.generate(list(prompts()[0]), MAX_TOKENS, lookahead=(1, 1, 0), temperature=0.7, seed=5,
                        ignore_eos=True)
    assert list(tokens(out[4])) == solo.tokens


@pytest.mark.parametrize("arch", WINDOW_ARCHS)
def test_seeded_lookahead_sampling_draws_what_plain_sampling_draws(arch):
    eng = engine(arch, lookup=4)
    for prompt in prompts()[:3]:
        for seed, warpers in [(1, dict(temperature=0.3)), (7, dict(temperature=0.9, top_p=0.9))]:
            plain = eng.generate(list(prompt), MAX_TOKENS, lookahead=(1, 1, 0), seed=seed, ignore_eos=True,
                                 **warpers).tokens
            for spec in [(2, 4, 2), (7, 5, 7), "auto"]:
                got = eng.generate(list(prompt), MAX_TOKENS, lookahead=spec, seed=seed, ignore_eos=True, **warpers)
                assert got.tokens == plain, f"{arch} {spec} seed {seed}"


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_transformers_forward_in_bfloat16_is_lossless_on_the_native_linear_kernel(arch):
    """Random prompts on a tiny bf16 model: a verification row or a batched row gets a greedy row's bits, because
    every linear layer is the native row-invariant kernel. With oneDNN below and above a row count (by-rows), 2 of
    40 such prompts changed a greedy token and 2 of 40 a seeded draw (measured on a Zen 4)."""
    import random

    from models import tiny_word_tokenizer
    from trtlade.reference.native.linear import PanelLinear

    if not PanelLinear.supports(torch.zeros(2, 2, dtype=torch.bfloat16)):
        pytest.skip("the native linear kernel does not run bfloat16 here")
    tok = tiny_word_tokenizer()
    eng = tiny_engine(arch, ENGINE_SPEC, model=tiny_model(arch, len(tok), dtype=torch.bfloat16), tokenizer=tok)
    assert eng.runner.kernel_choice.kernel == "native" and eng.exactness["row_invariant_linear"]
    rng = random.Random(0)
    prompts_ = [[rng.randrange(2, len(tok)) for _ in range(rng.randrange(3, 30))] for _ in range(12)]
    for i, prompt in enumerate(prompts_):
        assert eng.generate(prompt, 32, lookahead=ENGINE_SPEC, ignore_eos=True).tokens == \
            eng.greedy(prompt, 32, ignore_eos=True).tokens, f"{arch} prompt {i}"
        sampled = dict(temperature=0.6, seed=i, ignore_eos=True)
        assert eng.generate(prompt, 32, lookahead=ENGINE_SPEC, **sampled).tokens == \
            eng.generate(prompt, 32, lookahead=(1, 1, 0), **sampled).tokens, f"{arch} prompt {i} sampled"
    out = run(eng.new_batch(max_batch_size=8), {0: [request(tuple(p), (1, 1, 0), max_tokens=32)
                                                    for p in prompts_[:6]]})
    for i, prompt in enumerate(prompts_[:6]):  # batched beside five others, as alone
        assert list(tokens(out[i])) == eng.greedy(prompt, 32, ignore_eos=True).tokens, f"{arch} batched {i}"


@pytest.mark.parametrize("variant", native_variants.params())
def test_transformers_forward_computes_its_logits_on_the_native_head_and_reads_a_tied_embedding_from_it(variant):
    """The runner's LM head is the swapped one (it kept the model's old nn.Linear, whose rows at hidden 640 depend on
    the rows beside them: 1852 of 2048 logits differed), and a tied embedding reads its rows, scale included, from the
    packed head (one copy of the vocabulary matrix): the same bits as the model's own embedding."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from trtlade.reference.fast_forward import FusedLinear, PackedEmbedding

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=2048, hidden_size=640, intermediate_size=256, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=64, sliding_window=64,
                           max_position_embeddings=512, tie_word_embeddings=True)
    model = Gemma3ForCausalLM(cfg).eval()
    ids = torch.tensor([[5, 17, 2000, 3]])
    want = model.get_input_embeddings()(ids).clone()
    with native_variants.forced(variant):  # every variant this CPU runs, lower ones forced
        eng = tiny_engine("gemma3", (2, 2, 1), model=model)
    head = eng.runner.lm_head
    assert head.native.kernels.variant == variant
    assert isinstance(head, FusedLinear) and head.native is not None and head is model.get_output_embeddings()
    embed = model.get_input_embeddings()
    assert isinstance(embed, PackedEmbedding) and torch.equal(embed(ids), want)
    h = torch.randn(8, 640)
    with torch.inference_mode():
        assert torch.equal(head(h[:1]), head(h)[:1])  # a row's logits whatever the rows beside it


def test_a_dtype_the_native_kernel_lacks_loads_on_the_kernels_measured_at_load():
    """float16 (no native linear kernel): transformers' forward keeps the oneDNN / plain choice, and decodes."""
    tok = tiny_tokenizer()
    eng = tiny_engine("gemma3", (2, 2, 1), model=tiny_model("gemma3", len(tok), dtype=torch.float16))
    assert eng.runner.kernel_choice.kernel in ("onednn-packed", "plain", "by-rows")
    assert not eng.exactness["row_invariant_linear"]
    assert len(eng.generate([5, 6, 7], 6, lookahead=(2, 2, 1), ignore_eos=True).tokens) == 6


# ------------------------------------------------------------------------------------ refused by name
def test_attention_sinks_are_refused_by_name():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_local_experts=2,
                          num_experts_per_tok=1, sliding_window=4)
    with pytest.raises(UnsupportedModelError, match=r"attention sinks \(s_aux"):
        check_supported(GptOssForCausalLM(config))


def test_other_layer_types_and_bidirectional_attention_are_refused_by_name():
    model = tiny_model("llama")
    model.config.layer_types = ["chunked_attention", "full_attention"]
    with pytest.raises(UnsupportedModelError, match=r"layer types \['chunked_attention'\] are not supported"):
        check_supported(model)
    gemma = tiny_model("gemma3")
    gemma.config.use_bidirectional_attention = True
    with pytest.raises(UnsupportedModelError, match="use_bidirectional_attention"):
        check_supported(gemma)


def test_without_the_native_kernel_invariant_attention_refuses_a_sliding_model(monkeypatch):
    assert BatchRunner(tiny_model("mistral")).invariant_attention in ("native", None)  # the default never refuses
    monkeypatch.setenv("TRTLADE_NATIVE_ISA", "no-such-variant")  # the library then runs nothing; status says why
    assert BatchRunner(tiny_model("mistral")).invariant_attention is None
    with pytest.raises(UnsupportedModelError, match="invariant_attention needs the native kernel"):
        BatchRunner(tiny_model("mistral"), invariant_attention=True)

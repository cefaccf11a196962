"""Lookahead on the torch engine emits exactly the greedy tokens (fp32), for Llama, Qwen2 and Qwen3.

Reference 1: the engine's own plain greedy loop (lookahead (1,1,0)).
Reference 2: transformers' ``generate(do_sample=False)`` on an untouched copy of the model (stock
``nn.Linear`` kernels and DynamicCache: nothing shared with the engine's forward path).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch

from models import ARCHS, tiny_engine, tiny_model, tiny_tokenizer
from trtlade.reference.prompt_suite import load_suite
from trtlade.lookahead.algorithm import LookaheadAlgorithm

SPECS = [(1, 1, 0), (2, 2, 1), (4, 2, 4), (5, 3, 5), (7, 7, 7), (15, 5, 15)]
ENGINE_SPEC = (15, 7, 15)
MAX_TOKENS = 40


@lru_cache(maxsize=None)
def suite_prompts() -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The bundled suite as plain text through the tiny tokenizer; the edge prompts stay short:
    'one-token' is a single token, 'short' has 2 tokens (< N for every N >= 3)."""
    tok = tiny_tokenizer()
    out = []
    for prompt in load_suite("suite").prompts:
        if prompt.id == "one-token":
            ids = [tok.encode("The")[0]]
        elif prompt.id == "short":
            ids = tok.encode("Once upon")[:2]
        else:
            ids = tok.encode(prompt.plain_text())[:96]
        out.append((prompt.id, tuple(ids)))
    return tuple(out)


@lru_cache(maxsize=None)
def engine(arch: str, attn: str = "sdpa", packed: bool = True):
    return tiny_engine(arch, ENGINE_SPEC, attn_implementation=attn, pack_linears=packed)


@lru_cache(maxsize=None)
def hf_greedy(arch: str, prompt: tuple[int, ...]) -> tuple[int, ...]:
    model = _hf_model(arch)
    with torch.inference_mode():
        out = model.generate(torch.tensor([list(prompt)]), do_sample=False, max_new_tokens=MAX_TOKENS,
                             min_new_tokens=MAX_TOKENS, eos_token_id=None, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


@lru_cache(maxsize=None)
def _hf_model(arch: str):
    return tiny_model(arch, len(tiny_tokenizer()))


def test_suite_covers_the_required_categories():
    ids = dict(suite_prompts())
    categories = {p.category for p in load_suite("suite").prompts}
    assert {"code", "chat", "math", "summarisation", "extraction", "lists", "repetition"} <= categories
    assert len(ids["one-token"]) == 1
    assert len(ids["short"]) == 2


@pytest.mark.parametrize("arch", ARCHS)
def test_engine_greedy_equals_transformers_generate(arch):
    eng = engine(arch)
    for pid, prompt in suite_prompts():
        ours = eng.greedy(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True)
        assert tuple(ours.tokens) == hf_greedy(arch, prompt), pid
        assert ours.stats.steps == MAX_TOKENS and ours.stats.tokens_per_step == 1.0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: ",".join(map(str, s)))
def test_lookahead_equals_greedy_on_the_suite(arch, spec):
    eng = engine(arch)
    accepted_runs = 0
    for pid, prompt in suite_prompts():
        greedy = hf_greedy(arch, prompt)
        result = eng.generate(list(prompt), max_tokens=MAX_TOKENS, lookahead=spec, ignore_eos=True)
        assert tuple(result.tokens) == greedy, f"{arch} {spec} {pid}"
        assert result.finish_reason == "length"
        hist = result.stats.tokens_per_step_hist
        assert max(hist) <= spec[1]
        accepted_runs += sum(c for k, c in hist.items() if k > 1)
    if spec[1] > 1:  # random tiny models repeat themselves: drafts must be accepted somewhere
        assert accepted_runs > 0


@pytest.mark.parametrize("attn,packed", [("eager", True), ("sdpa", False), ("eager", False)])
def test_lookahead_equals_greedy_with_eager_attention_and_stock_kernels(attn, packed):
    """Models loaded with eager or sdpa attention, with and without the packed linears: the engine
    switches them to its batched attention, and greedy equals transformers' own (eager/sdpa) run."""
    eng = engine("llama", attn, packed)
    assert eng.runner.attn_implementation == "trtlade_batched"
    assert (eng.runner.packed_linears > 0) == packed
    for pid, prompt in suite_prompts()[:6]:
        greedy = hf_greedy("llama", prompt)
        for spec in [(4, 2, 4), (7, 7, 7), (15, 5, 15)]:
            result = eng.generate(list(prompt), max_tokens=MAX_TOKENS, lookahead=spec, ignore_eos=True)
            assert tuple(result.tokens) == greedy, f"{attn} packed={packed} {spec} {pid}"


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_tree_mask_is_honoured_row_by_row(arch, attn):
    """Every row of a lookahead step (window, candidates, merged trie) gets the logits of its own
    prefix computed alone, also when the same forward pass carries other sequences' rows (another
    tree before it, a greedy row after it): the per-block masks, the slots and the depth positions
    are exact, against transformers' own sdpa and eager attention."""
    from trtlade.reference.batch_runner import RowBlock

    eng = engine(arch, attn, True)
    assert eng.runner.attn_implementation == "trtlade_batched"
    ref = _hf_model(arch) if attn == "sdpa" else tiny_model(arch, len(tiny_tokenizer()), attn_implementation="eager")
    prompt = list(dict(suite_prompts())["repeat-sentence"])
    greedy = list(hf_greedy(arch, tuple(prompt)))
    committed = prompt + greedy[:12]  # a context with repeats: the pool has candidates
    algo = LookaheadAlgorithm((5, 4, 5), eos_token_ids=(), seed=3)
    algo.setup(committed, greedy[12])
    # step the algorithm with exact argmaxes so the window is warm (levels filled)
    for _ in range(4):
        batch = algo.prepare()
        verification = algo.verify(_oracle_argmax(ref, committed, batch))
        committed = committed + [batch.tokens[0]] + verification.tokens[:-1]
        algo.commit()
    batch = algo.prepare()
    assert batch.num_rows > 8 and batch.mask_array().sum() < batch.num_rows ** 2  # a real tree
    other = list(dict(suite_prompts())["code-prime"])[:20]  # a shorter neighbour, in the slot before
    runner = eng.new_batch().engine.runner
    slots = [runner.allocate(len(committed) + 64) for _ in range(3)]
    runner.prefill(slots[0], other)
    runner.prefill(slots[1], committed)
    runner.prefill(slots[2], other[:7])
    rows = list(range(batch.num_rows))
    neighbour = RowBlock(slots[0], batch.tokens[:3], batch.positions[:3], [0, 1, 2], mask=batch.mask_array()[:3, :3])
    mine = RowBlock(slots[1], batch.tokens, batch.positions, rows, mask=batch.mask_array())
    logits = runner.forward([neighbour, mine, RowBlock(slots[2], [other[7]], [0], [0])])
    cases = [(other + [batch.tokens[r] for r in batch.ancestors[row]], logits[0][row]) for row in range(3)]
    cases += [(committed + [batch.tokens[r] for r in batch.ancestors[row]], logits[1][row]) for row in rows]
    cases += [(other[:8], logits[2][0])]
    for i, (prefix, got) in enumerate(cases):
        with torch.inference_mode():
            expect = ref(torch.tensor([prefix])).logits[0, -1].float()
        assert torch.allclose(got, expect, atol=2e-4, rtol=1e-4), f"case {i}"
        assert int(got.argmax()) == int(expect.argmax())


def _oracle_argmax(model, committed, batch):
    out = []
    for row in range(batch.num_rows):
        prefix = committed + [batch.tokens[r] for r in batch.ancestors[row]]
        with torch.inference_mode():
            out.append(int(model(torch.tensor([prefix])).logits[0, -1].argmax()))
    return out


def test_boolean_4d_mask_would_be_wrong_with_eager_attention():
    """Why the engine builds an additive float mask: eager attention adds the mask to the scores, so
    a boolean mask (True=attend) is read as +1/+0 and every row sees everything."""
    model = tiny_model("llama", len(tiny_tokenizer()), attn_implementation="eager")
    ids = torch.tensor([[5, 6, 7, 8]])
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    with torch.inference_mode():
        good = model(ids).logits
        additive = torch.zeros(1, 1, 4, 4).masked_fill_(~causal, torch.finfo(torch.float32).min)
        with_additive = model(ids, attention_mask=additive).logits
        with_bool = model(ids, attention_mask=causal.view(1, 1, 4, 4)).logits
    assert torch.allclose(good, with_additive, atol=1e-5)
    assert not torch.allclose(good[0, :3], with_bool[0, :3], atol=1e-3)


def test_bf16_lookahead_equals_bf16_greedy_token_for_token():
    """bf16: every row's logits are the same bits whatever rows share its pass (the row-invariant kernels), so
    lookahead's output equals bf16 greedy's exactly, as in fp32; no identity rate to report."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok), dtype=torch.bfloat16)
    eng = tiny_engine("llama", ENGINE_SPEC, model=model)
    assert eng.dtype == "bfloat16"
    differing, accepted = [], 0
    for name, prompt in suite_prompts()[:6]:
        greedy = eng.greedy(list(prompt), max_tokens=24, ignore_eos=True).tokens
        for spec in [(4, 2, 4), (7, 7, 7)]:
            result = eng.generate(list(prompt), max_tokens=24, lookahead=spec, ignore_eos=True)
            accepted += sum(result.stats.accepted_from.values())
            if result.tokens != greedy:
                differing.append((name, spec))
    assert differing == [] and accepted > 0


def test_packed_linear_rows_do_not_depend_on_the_row_count():
    from trtlade.reference.kernels import PackedLinear, onednn_available

    assert onednn_available()
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96)
    packed = PackedLinear(linear)
    x = torch.randn(1, 9, 64)
    with torch.inference_mode():
        full = packed(x)
        assert torch.allclose(full, linear(x), atol=1e-5)
        for rows in (1, 2, 5):
            assert torch.equal(packed(x[:, :rows]), full[:, :rows])
    assert np.isfinite(full.numpy()).all()

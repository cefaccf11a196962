"""Parts of the reference engine: the compacting KV cache, tree attention, packed linears, the text
tracker (incremental detokenization, stop strings) and the adaptive spec controller."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models import tiny_tokenizer
from trtlade.engine.adaptive import CostTable, SpecController, spec_ladder
from trtlade.engine.batch_runner import RowBlock, SlotKVCache, StepLayout, batched_attention, step_layout
from trtlade.engine.kernels import resolve_dtype
from trtlade.engine.text import IncrementalDetokenizer, OutputText, TextTracker, eos_token_ids
from trtlade.spec import LookaheadSpec


# ------------------------------------------------------------------------------------ KV cache
def _cache(slots=3, layers=2, capacity=16):
    cache = SlotKVCache(num_layers=layers, kv_heads=2, head_dim=3)
    cache.ensure(slots, capacity, torch.float32, "cpu")
    return cache


def _rows(cache, slot, layer=0):
    """The first feature of every committed key row of ``slot`` (we write the row's id there)."""
    return cache.layers[layer].keys[slot, 0, :cache.lengths[slot], 0].tolist()


def _write(cache, blocks):
    """One step: ``blocks`` = {slot: ids}; every row's K = its id (V = id + 0.5), written where the
    runner's layout puts it (slot, length + row)."""
    slots, pos, ids = [], [], []
    for slot, values in blocks.items():
        start = cache.lengths.setdefault(slot, 0)
        slots += [slot] * len(values)
        pos += range(start, start + len(values))
        ids += values
    cache.layout = StepLayout(write_slot=torch.tensor(slots), write_pos=torch.tensor(pos), lo=0, hi=1, kmax=1, lmax=1)
    k = torch.tensor(ids, dtype=torch.float32).view(1, 1, -1, 1).expand(1, 2, -1, 3).contiguous()
    for layer in range(len(cache.layers)):
        cache.update(k, k + 0.5, layer)


def test_cache_keeps_each_slots_accepted_rows_compacted():
    cache = _cache()
    _write(cache, {0: [10, 11, 12], 2: [20, 21]})   # two prefills
    cache.keep([(0, [0, 1, 2]), (2, [0, 1])])
    _write(cache, {0: [100, 101, 102, 103, 104], 2: [200]})   # a 5-row tree and a greedy row, one step
    cache.keep([(0, [0, 2, 4]), (2, [0])])                    # golden, drafts 2 and 4 accepted
    for layer in range(2):
        assert _rows(cache, 0, layer) == [10, 11, 12, 100, 102, 104]
        assert cache.layers[layer].values[0, 1, :6, 2].tolist() == [10.5, 11.5, 12.5, 100.5, 102.5, 104.5]
        assert _rows(cache, 2, layer) == [20, 21, 200]
    assert cache.lengths == {0: 6, 2: 3}


def test_cache_grows_slots_and_capacity_keeping_contents():
    cache = _cache(slots=1, layers=1, capacity=4)
    _write(cache, {0: [1, 2, 3]})
    cache.keep([(0, [0, 1, 2])])
    cache.ensure(5, 40, torch.float32, "cpu")
    assert cache.slots >= 5 and cache.capacity >= 40
    assert _rows(cache, 0) == [1, 2, 3]
    assert torch.count_nonzero(cache.layers[0].keys[1:]) == 0  # new room is zero: finite under any mask


def test_cache_refuses_unordered_keep():
    cache = _cache()
    _write(cache, {0: [1, 2, 3]})
    with pytest.raises(ValueError, match="ascending"):
        cache.keep([(0, [2, 1])])


@settings(max_examples=30, deadline=None)
@given(prefix=st.integers(1, 8), step=st.integers(1, 7), data=st.data())
def test_cache_keep_property(prefix, step, data):
    keeps = {slot: sorted(data.draw(st.sets(st.integers(0, step - 1), min_size=1)) | {0}) for slot in (0, 1)}
    cache = _cache(capacity=32)
    _write(cache, {0: list(range(prefix)), 1: list(range(50, 50 + prefix))})
    cache.keep([(0, range(prefix)), (1, range(prefix))])
    _write(cache, {0: [100 + i for i in range(step)], 1: [200 + i for i in range(step)]})
    cache.keep([(0, keeps[0]), (1, keeps[1])])
    assert _rows(cache, 0) == list(range(prefix)) + [100 + i for i in keeps[0]]
    assert _rows(cache, 1) == list(range(50, 50 + prefix)) + [200 + i for i in keeps[1]]


# ------------------------------------------------------------------------------------ attention
class _Module(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_attention_matches_sdpa_per_sequence(dtype):
    """Three sequences in one call (5 tree rows on 7 cached, 1 row on 3, 2 rows on 0), against
    transformers' sdpa run on each sequence alone with the same additive mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    visible = [torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 1, 0], [1, 1, 0, 0, 1]]),
               torch.tensor([[1]]), torch.tensor([[1, 0], [1, 1]])]
    lengths = [7, 3, 0]
    runner_cache = SlotKVCache(num_layers=1, kv_heads=3, head_dim=16)
    runner_cache.ensure(3, 16, dtype, "cpu")
    keys, values = runner_cache.layers[0].keys, runner_cache.layers[0].values
    keys.copy_(torch.randn_like(keys))
    values.copy_(torch.randn_like(values))
    blocks = [RowBlock(s, [0] * len(v), [0] * len(v), [0], mask=v.numpy().astype(bool)) for s, v in enumerate(visible)]
    layout = step_layout(blocks, dict(enumerate(lengths)))
    q = torch.randn(1, 9, 8, 16, dtype=dtype)
    ours, _ = batched_attention(_Module(), q, keys, values, None, scaling=0.25, trtlade_layout=layout)
    assert ours.shape == (1, 8, 9, 16)
    row = 0
    for slot, (vis, length) in enumerate(zip(visible, lengths)):
        k = len(vis)
        kv = slice(0, length + k)
        mask = torch.zeros(1, 1, k, length + k, dtype=dtype)
        mask[0, 0, :, length:].masked_fill_(~vis.bool(), torch.finfo(dtype).min)
        ref, _ = sdpa_attention_forward(_Module(), q[:, :, row:row + k], keys[slot:slot + 1, :, kv],
                                        values[slot:slot + 1, :, kv], mask, scaling=0.25)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        assert torch.allclose(ours[:, row:row + k].float(), ref.float(), atol=tol), f"slot {slot}"
        row += k


def test_resolve_dtype():
    assert resolve_dtype("fp32") is torch.float32 and resolve_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        resolve_dtype("int4")


# ------------------------------------------------------------------------------------ text
def test_detokenizer_holds_back_partial_utf8():
    tok = tiny_tokenizer()
    ids = tok.encode("naïve café – ok")
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(t) for t in ids] + [detok.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


@pytest.mark.parametrize("stop,expect", [
    (("fox",), "The quick brown "),
    (("zzz",), "The quick brown fox jumps."),
    (("brown", "quick"), "The "),  # the earliest stop string wins
    (("s.",), "The quick brown fox jump"),
])
def test_text_tracker_stop_strings(stop, expect):
    tok = tiny_tokenizer()
    ids = tok.encode("The quick brown fox jumps.")
    tracker = TextTracker(tok, stop)
    streamed, stopped_at = [], None
    for index, token in enumerate(ids):
        result = tracker.push(token)
        streamed.append(result.text)
        if result.stopped:
            stopped_at = index
            break
    streamed.append(tracker.finish())
    assert "".join(streamed) == expect
    assert (stopped_at is not None) == (expect != "The quick brown fox jumps.")
    for i in range(len(streamed)):  # nothing streamed is ever taken back
        assert expect.startswith("".join(streamed[:i + 1]))


def test_text_tracker_holds_back_a_possible_stop_prefix():
    tok = tiny_tokenizer()
    tracker = TextTracker(tok, ("jumps over",))
    out = [tracker.push(t).text for t in tok.encode("The fox jumps")]
    assert "".join(out) == "The fox "  # "jumps" could still become "jumps over": held back
    assert tracker.finish() == "jumps"  # the generation ended: nothing to wait for


def test_text_tracker_hidden_tokens_and_context():
    tok = tiny_tokenizer()
    tracker = TextTracker(tok, (), context=tok.encode("Hello"))
    text = [tracker.push(t).text for t in tok.encode(" world")]
    text.append(tracker.push(tok.eos_token_id, hidden=True).text)
    assert "".join(text) + tracker.finish() == " world"


_TEXT = "The quick brown fox jumps."


@pytest.mark.parametrize("case", [
    # stop_ids: indexes into the token ids of _TEXT; the result must not depend on the run sizes
    dict(stop=(), stop_ids=(), min_tokens=0, max_tokens=99, expect=(_TEXT, None)),
    dict(stop=("fox",), stop_ids=(), min_tokens=0, max_tokens=99, expect=("The quick brown ", "stop")),
    dict(stop=("fox",), stop_ids=(), min_tokens=99, max_tokens=99, expect=(_TEXT, None)),  # before min_tokens
    dict(stop=(), stop_ids=(3,), min_tokens=0, max_tokens=99, expect=("<text of ids[:3]>", "stop")),
    dict(stop=(), stop_ids=(), min_tokens=0, max_tokens=3, expect=(None, "length")),
])
@pytest.mark.parametrize("run_size", [1, 2, 5])
def test_output_text_ends_at_the_same_token_whatever_the_run_sizes(case, run_size):
    tok = tiny_tokenizer()
    ids = tok.encode(_TEXT)
    stop_ids = [ids[i] for i in case["stop_ids"]]
    out = OutputText(tok, stop=case["stop"], stop_ids=stop_ids, min_tokens=case["min_tokens"],
                     max_tokens=case["max_tokens"])
    text, tokens = "", []
    for start in range(0, len(ids), run_size):
        emitted = out.extend(ids[start:start + run_size])
        text += emitted.text
        tokens += emitted.tokens
        if emitted.finish_reason:
            break
    want_text, want_finish = case["expect"]
    if stop_ids:
        want_text = tok.decode(ids[:case["stop_ids"][0]])
    assert out.finish_reason == want_finish
    if want_finish == "length":
        assert tokens == ids[:3] and text == tok.decode(ids[:3])
    elif want_finish is None:
        text += out.end("length")
        assert tokens == ids and text == want_text
    else:
        assert text == want_text and tokens == out.tokens and len(tokens) < len(ids)
        if stop_ids:  # a stop id is kept in the tokens (it was generated) but shows no text
            assert tokens[-1] in stop_ids
    with pytest.raises(RuntimeError):
        if out.finish_reason is None:
            out.end("stop")
        out.extend(ids[:1])


def test_eos_token_ids_merge_sources_in_order_without_repeats():
    assert eos_token_ids(None, 2, [7, 2], (9,), True) == (2, 7, 9)  # a bool is not an id


# ------------------------------------------------------------------------------------ adaptive
def test_spec_ladder_ends_at_autoregressive():
    for spec in [(15, 5, 15), (7, 7, 7), (4, 2, 4), (2, 2, 1), (1, 2, 0), (1, 1, 0), (2, 4, 2), (3, 3, 1)]:
        ladder = spec_ladder(LookaheadSpec(*spec))
        assert ladder[0] == LookaheadSpec(*spec) and ladder[-1] == LookaheadSpec(1, 1, 0)
        for big, small in zip(ladder, ladder[1:]):
            assert big.admits(small) and (big.decoding_tokens > small.decoding_tokens or small.is_autoregressive)
    assert [str(s) for s in spec_ladder(LookaheadSpec(3, 3, 1))] == ["3,3,1", "2,3,1", "2,2,1", "1,1,0"]


def _cost(per_row: float = 0.05) -> CostTable:
    table = CostTable()
    for rows in (1, 2, 4, 8, 16, 32, 64):
        table.add(rows, 0.030 * (1 + per_row * (rows - 1)))
    return table


def test_controller_drops_to_greedy_when_nothing_is_accepted_and_probes_back():
    ctrl = SpecController(LookaheadSpec(4, 2, 4), _cost(), window=4, probe_after=8)
    assert ctrl.spec == LookaheadSpec(4, 2, 4)
    changed = [ctrl.observe(1, 8) for _ in range(4)]  # nothing accepted, 8 rows: 1.35x cost
    assert changed == [False, False, False, True] and ctrl.spec == LookaheadSpec(1, 1, 0)
    changes = [ctrl.observe(1, 1) for _ in range(8)]
    assert changes[-1] and not any(changes[:-1]) and ctrl.spec == LookaheadSpec(4, 2, 4)  # a probe
    for _ in range(4):
        ctrl.observe(1, 8)
    assert ctrl.spec == LookaheadSpec(1, 1, 0)  # the probe failed
    assert ctrl.probe_after[-1] == 16  # the next probe waits twice as long
    assert [s for _, s in ctrl.switches] == ["1,1,0", "4,2,4", "1,1,0"]


def test_controller_shrinks_to_a_rung_that_can_still_pay():
    ctrl = SpecController(LookaheadSpec(4, 2, 4), _cost(), window=4)
    steps = 0  # window=4: judged from the 4th step on
    while ctrl.spec == LookaheadSpec(4, 2, 4) and steps < 32:
        ctrl.observe(2 if steps % 5 == 0 else 1, 8)  # 1.2 tokens for 1.35x: 0.89, not paying
        steps += 1
    assert ctrl.spec == LookaheadSpec(2, 2, 2)  # 1.2 / 1.15 (4 rows) could pay
    assert 8 <= steps < 32  # judged with confidence: not after a handful of steps


def test_controller_does_not_shrink_on_a_short_bad_patch():
    ctrl = SpecController(LookaheadSpec(4, 2, 4), _cost(), window=6)
    pattern = [1, 1, 1, 1, 1, 4, 1, 3, 1, 1, 4, 1, 1, 2, 1, 3]  # 1.6 tokens per step on average
    assert not any(ctrl.observe(tokens, 8) for tokens in pattern)


def test_controller_keeps_a_spec_that_pays():
    ctrl = SpecController(LookaheadSpec(4, 2, 4), _cost(), window=4)
    for _ in range(40):
        assert not ctrl.observe(2, 8)  # 2 tokens for 1.35x
    assert ctrl.spec == LookaheadSpec(4, 2, 4)


def test_cost_table_interpolates():
    table = CostTable()
    assert table.ratio(8) == 1.0  # no data: assume free (never shrinks on no evidence)
    table.add(1, 0.02)
    table.add(9, 0.04)
    assert table.ratio(5) == pytest.approx(1.5)
    assert table.ratio(17) == pytest.approx(3.0)


# ------------------------------------------------------------------------------------ kernel choice
@pytest.mark.parametrize("packed_faster", [True, False])
def test_the_linear_kernel_is_chosen_by_measurement_and_stays_lossless(packed_faster):
    from models import tiny_model
    from trtlade.engine.kernels import PackedLinear, choose_linear_kernel, onednn_available

    model = tiny_model("llama", 320)
    if not onednn_available():  # a torch build without oneDNN: nothing to choose, plain it is
        assert choose_linear_kernel(model).kernel == "plain"
        return
    x = torch.randint(0, 320, (1, 9))
    with torch.no_grad():
        before = model(input_ids=x).logits

    def timer(layers):  # packed layers "measure" faster or slower, as asked
        return 1.0 if isinstance(layers[0], PackedLinear) == packed_faster else 2.0

    choice = choose_linear_kernel(model, timer=timer)
    kinds = {type(m).__name__ for m in model.modules() if type(m).__name__ in ("Linear", "PackedLinear")}
    assert choice.kernel == ("onednn-packed" if packed_faster else "plain")
    assert kinds == ({"PackedLinear"} if packed_faster else {"Linear"}) and choice.layers > 0
    assert choice.packed_ms == (1000.0 if packed_faster else 2000.0)
    with torch.no_grad():
        assert torch.allclose(model(input_ids=x).logits, before, atol=1e-5)


def test_the_engine_reports_the_kernel_it_measured():
    from models import tiny_engine

    engine = tiny_engine("llama", (2, 2, 1))  # pack_linears=None: measured at load
    choice = engine.runner.kernel_choice
    assert choice.kernel in ("onednn-packed", "plain") and choice.reason
    assert engine.runner.packed_linears == (choice.layers if choice.kernel == "onednn-packed" else 0)
    # engine.stats and the served /version details say the same thing
    from trtlade.engine.reference_serving import ReferenceServingEngine

    assert engine.stats["step_cost_ms"] == {}  # the test engines skip the calibration
    engine.calibrate()
    stats = engine.stats
    assert stats["linear_kernel"] == choice.to_dict() and stats["dtype"] == "float32"
    assert stats["prompt_lookup"] == engine.prompt_lookup and stats["step_cost_ms"]
    assert all(ms > 0 for ms in stats["step_cost_ms"].values())
    serving = ReferenceServingEngine(engine, max_batch_size=1)
    try:
        assert serving.info.to_dict()["details"]["linear_kernel"] == choice.to_dict()
    finally:
        import asyncio

        asyncio.run(serving.aclose())

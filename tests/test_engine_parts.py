"""Parts of the reference engine: the compacting KV cache, tree attention, packed linears, the text
tracker (incremental detokenization, stop strings) and the adaptive spec controller."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from models import tiny_tokenizer
from trtlade.reference.adaptive import AutoPolicy, CostTable, DraftPrice
from trtlade.reference.batch_runner import RowBlock, SlotKVCache, StepLayout, batched_attention, step_layout
from trtlade.reference.kernels import resolve_dtype
from trtlade.contract.text import IncrementalDetokenizer, OutputText, TextTracker, eos_token_ids


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


@pytest.mark.parametrize("cap, asked, capacity", [
    (None, [600, 610], 1200),       # doubling
    (1000, [600, 610], 1000),       # doubling stops at the most a slot can need
    (1000, [600, 1100], 1100),      # what is asked is always given
    (1000, [400, 450], 800),        # below the bound: doubling
])
def test_cache_capacity_doubles_up_to_what_a_slot_can_need(cap, asked, capacity):
    cache = _cache(slots=1, layers=1, capacity=4)
    cache.max_capacity = cap
    for tokens in asked:
        cache.ensure(1, tokens, torch.float32, "cpu")
    assert cache.capacity == capacity


def test_the_engine_bounds_its_slots_by_its_context():
    from models import tiny_engine

    eng = tiny_engine("llama", (2, 3, 2))
    assert eng.runner.cache.max_capacity == eng.max_seq_len + eng.decoding_tokens + 1


@pytest.mark.parametrize("grow", ["slots", "capacity"])
def test_cache_grows_only_the_dimension_asked_for(grow):
    """Slots added one by one (a batch filling up) leave the capacity alone, and a longer sequence leaves
    the slot count alone: 64 slots of 456 tokens once grew the capacity to 116,736 (23 GB for SmolLM2)."""
    cache = _cache(slots=1, layers=1, capacity=456)
    for n in range(2, 65):
        cache.ensure(n if grow == "slots" else 1, 456 if grow == "slots" else 456 * n, torch.float32, "cpu")
    if grow == "slots":
        assert 64 <= cache.slots <= 72 and cache.capacity == 456
    else:
        assert cache.slots == 1 and 456 * 64 <= cache.capacity < 2 * 456 * 64


def test_cache_keep_moves_every_layer_in_one_gather_and_one_scatter():
    """A keep that moves rows costs the same few ops for 1 layer as for 30: on a GPU each op is a launch the
    host pays (4 a layer made a drafting step of 16 sequences pay 4-5 ms of host time on an H200)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    counts = []
    for layers in (1, 30):
        cache = _cache(layers=layers)
        _write(cache, {0: [1, 2, 3, 4], 2: [5, 6, 7]})
        with Ops() as ops:
            cache.keep([(0, [0, 2, 3]), (2, [0, 2])])
        counts.append((ops.names.count("index.Tensor"), ops.names.count("index_put_.default")))
        assert all(_rows(cache, 0, layer) == [1, 3, 4] and _rows(cache, 2, layer) == [5, 7] for layer in range(layers))
    assert counts == [(1, 1), (1, 1)]


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


class _SlowDecode:
    """The same tokenizer, decoded only through transformers' ``decode`` (the detokenizer's fallback)."""

    def __init__(self, tok) -> None:
        self.tok = tok

    def decode(self, ids, skip_special_tokens=False):
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 255), min_size=1, max_size=24), context=st.lists(st.integers(0, 255), max_size=6),
       skip=st.booleans())
def test_the_detokenizers_rust_decode_streams_what_transformers_decode_streams(ids, context, skip):
    """A fast tokenizer's deltas come from its Rust decode directly: the same text, piece by piece, as through
    transformers' ``decode`` (special tokens skipped or kept, any bytes, any prompt context)."""
    tok = tiny_tokenizer()
    special = tok.all_special_ids[:1]
    ids = [*ids[:3], *special, *ids[3:]]  # a special token among them
    fast = IncrementalDetokenizer(tok, context=context, skip_special_tokens=skip)
    slow = IncrementalDetokenizer(_SlowDecode(tok), context=context, skip_special_tokens=skip)
    assert fast._backend is not None and slow._backend is None
    assert [fast.push(t) for t in ids] + [fast.flush()] == [slow.push(t) for t in ids] + [slow.flush()]


def test_the_detokenizer_keeps_transformers_decode_where_it_would_change_the_text():
    tok = copy.deepcopy(tiny_tokenizer())
    tok.clean_up_tokenization_spaces = True  # transformers would clean its text after the Rust decode
    assert IncrementalDetokenizer(tok)._backend is None
    assert IncrementalDetokenizer(_SlowDecode(tok))._backend is None  # not a transformers fast tokenizer


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


# ------------------------------------------------------------------------------------ auto policy
def _cost(rows_ms: dict[int, float]) -> CostTable:
    table = CostTable()
    for rows, ms in rows_ms.items():
        table.add(rows, ms / 1000)
    return table


#: Step cost (ms) by rows on two hosts of this project: flat rows (AMD EPYC, oneDNN packed) and
#: dear rows (Intel Xeon, plain GEMM), and a GPU-like table where rows are free until 64.
FLAT = {1: 34, 2: 34.5, 4: 35, 8: 36, 12: 37, 16: 40, 32: 55, 64: 90}
DEAR = {1: 31, 2: 40, 4: 44, 8: 56, 12: 65, 16: 75, 32: 120, 64: 210}
FREE = {1: 10, 8: 10, 16: 10, 64: 10.5, 128: 11}


@pytest.mark.parametrize("table, running, accepted, drafts", [
    # one sequence: drafts pay wherever a row is cheaper than what it accepts
    (FLAT, 1, 0.8, [True]),
    (DEAR, 1, 0.8, [False]),          # 10 rows cost 2.1x: 1.8 tokens do not pay
    (DEAR, 1, 1.6, [True]),           # a repetitive text: 2.6 tokens for 2.1x
    (FREE, 1, 0.3, [True]),
    # a full batch: the rows of one sequence's drafts delay all eight
    (FLAT, 8, 0.8, [False] * 8),
    (DEAR, 8, 2.0, [False] * 8),
    (FREE, 8, 0.3, [True] * 8),       # a GPU with idle compute: everyone drafts
])
def test_auto_plan_follows_the_cost_of_a_row(table, running, accepted, drafts):
    policy = AutoPolicy(_cost(table), explore=0.0)
    seqs = [policy.new_sequence() for _ in range(running)]
    for seq in seqs:
        seq.total, seq.weight = accepted * 16, 16.0  # 16 drafted steps that accepted this on average
    assert policy.plan([], [[(seq, 9)] for seq in seqs]) == [0 if d else -1 for d in drafts]


def test_auto_plan_gives_drafts_to_the_sequences_that_accept_most_per_row():
    policy = AutoPolicy(_cost(FLAT), explore=0.0)
    good, bad = policy.new_sequence(), policy.new_sequence()
    good.total, good.weight = 2.5 * 16, 16.0
    bad.total, bad.weight = 0.0, 16.0
    assert policy.plan([(1, 1.0)], [[(bad, 9)], [(good, 9)]]) == [-1, 0]


def test_the_window_is_tried_by_the_server_not_by_every_new_sequence():
    """The window's step (``full``) learns from its own steps only, so its exploration bonus shrinks with the
    server's tries in the context, not the sequence's: once the server tried it 30 times, a new sequence runs
    its 4-row chain, not the window's 10 rows for what the chain accepts. Counting its own tries (none yet),
    every new sequence would try the window first."""
    policy = AutoPolicy(_cost(FLAT))
    for i in range(30):  # other sequences' window steps, accepting 0, 1 or 2 drafts
        policy.observe(policy.new_sequence("repeat/full", server_tries=True), drafted=True, accepted=i % 3)
    chain = policy.new_sequence("repeat/prompt_lookup")
    chain.total, chain.weight, chain.drafted_steps = 16.0, 16.0, 16  # 1.0 accepted a step
    window = policy.new_sequence("repeat/full", server_tries=True)
    assert policy.plan([], [[(chain, 4, ()), (window, 10, (0,))]]) == [0]
    on_its_own = policy.new_sequence("repeat/full")
    assert policy.plan([], [[(chain, 4, ()), (on_its_own, 10, (0,))]]) == [1]


def test_auto_plan_picks_the_option_of_each_sequence_that_pays_most():
    """Two options per sequence: its candidates only (3 draft rows), or all its rows (9). On dear
    rows the candidates win when they accept nearly as much; on flat rows all the rows do."""
    def options(policy, cand, full):
        a, b = policy.new_sequence("c"), policy.new_sequence("f")
        a.total, a.weight, b.total, b.weight = cand * 16, 16.0, full * 16, 16.0
        return [(a, 3), (b, 9)]

    dear = AutoPolicy(_cost(DEAR), explore=0.0)
    assert dear.plan([], [options(dear, 0.9, 1.0)]) == [0]      # 4 rows for 1.9 tokens beats 10 rows for 2.0
    flat = AutoPolicy(_cost(FLAT), explore=0.0)
    assert flat.plan([], [options(flat, 0.9, 1.6)]) == [1]      # rows nearly free: all of them
    assert dear.plan([], [options(dear, 0.0, 0.2)]) == [-1]     # nothing pays


def test_auto_sequence_that_stops_accepting_falls_back_then_is_tried_again():
    """Nothing accepted: the estimate drops and the sequence stops drafting; while it runs plain
    decoding its evidence fades, the optimism grows, and it is tried again, later each time."""
    policy = AutoPolicy(_cost({1: 31, 4: 40, 10: 42}))
    seq = policy.new_sequence()
    trace = []
    for _ in range(200):
        drafts = policy.plan([], [[(seq, 9)]])[0] == 0
        trace.append(drafts)
        policy.observe(seq, drafted=drafts, accepted=0)
    assert trace[0] and not all(trace[:20])           # tried first, then dropped
    assert 3 <= sum(trace[20:]) <= 40                  # probes continue, rarely
    assert not any(trace[-5:]) or sum(trace[-50:]) < 15


def test_auto_prior_follows_the_server_history():
    policy = AutoPolicy(_cost(FLAT), history=8)
    assert policy.expected(policy.new_sequence()) == pytest.approx(0.5)
    busy = policy.new_sequence()
    for _ in range(40):
        policy.observe(busy, drafted=True, accepted=3)
    assert policy.expected(policy.new_sequence()) > 2.5  # a new request starts from what the server sees


def test_auto_counters_compare_expected_and_realised_acceptance():
    policy = AutoPolicy(_cost(FLAT), explore=0.0)
    seq = policy.new_sequence()
    assert policy.plan([], [[(seq, 9)]]) == [0]
    assert policy.counters.drafted == 0  # the plan alone counts nothing: the step may have no draft
    assert policy.count(seq, drafted=True) == "drafted"
    policy.observe(seq, drafted=True, accepted=2)
    policy.observe(seq, drafted=True, accepted=1, planned=False)  # a fixed step: not the policy's choice
    assert policy.count(seq, drafted=False) == "empty"  # chosen, but nothing to verify: nothing expected
    c = policy.counters
    assert (c.steps, c.drafted, c.empty, c.accepted) == (1, 1, 1, 2) and c.expected_accepted == pytest.approx(0.5)
    snap = policy.snapshot()
    assert snap["row_cost_ms"] == pytest.approx((90 - 34) / 63, abs=1e-3) and snap["step_ms"][1] == 34


def test_cost_table_interpolates():
    table = CostTable()
    assert table.ratio(8) == 1.0  # no data: assume free (drafts are never refused on no evidence)
    table.add(1, 0.02)
    table.add(9, 0.04)
    assert table.ratio(5) == pytest.approx(1.5)
    assert table.ratio(17) == pytest.approx(3.0)


# ------------------------------------------------------------------------------------ kernel choice
@pytest.mark.parametrize("faster, kernel, kinds", [
    ({1: "packed", 4: "packed", 16: "packed"}, "onednn-packed", {"PackedLinear"}),
    ({1: "plain", 4: "plain", 16: "plain"}, "plain", {"Linear"}),
    ({1: "plain", 4: "packed", 16: "packed"}, "by-rows", {"RowDispatchedLinear"}),
    ({1: "packed", 4: "plain", 16: "packed"}, "by-rows", {"RowDispatchedLinear"}),   # from 16 on
])
def test_the_linear_kernel_is_chosen_per_row_count_and_stays_lossless(faster, kernel, kinds):
    from models import tiny_model
    from trtlade.reference.kernels import RowDispatchedLinear, choose_linear_kernel, onednn_available

    model = tiny_model("llama", 320)
    if not onednn_available():  # a torch build without oneDNN: nothing to choose, plain it is
        assert choose_linear_kernel(model).kernel == "plain"
        return
    x = torch.randint(0, 320, (1, 9))
    one = x[:, :1]
    with torch.no_grad():
        before, before_one = model(input_ids=x).logits, model(input_ids=one).logits

    def timer(plain, packed, rows):  # each kernel "measures" faster where the table says so
        return {r: (1.0, 2.0) if faster[r] == "plain" else (2.0, 1.0) for r in faster}

    choice = choose_linear_kernel(model, timer=timer)
    top = {type(child).__name__ for parent in model.modules() if not isinstance(parent, RowDispatchedLinear)
           for child in parent.children() if type(child).__name__ in ("Linear", "PackedLinear", "RowDispatchedLinear")}
    assert choice.kernel == kernel and top == kinds and choice.layers > 0
    assert choice.per_rows_ms == {r: (1000.0, 2000.0) if faster[r] == "plain" else (2000.0, 1000.0) for r in faster}
    if kernel == "by-rows":
        expected_from = 16 if faster[4] == "plain" else 4
        assert choice.packed_from_rows == expected_from
        dispatched = [m for m in model.modules() if isinstance(m, RowDispatchedLinear)]
        assert dispatched and all(m.packed_from == expected_from for m in dispatched)
    with torch.no_grad():  # 9 rows and 1 row: whichever kernel runs, the same logits
        assert torch.allclose(model(input_ids=x).logits, before, atol=1e-5)
        assert torch.allclose(model(input_ids=one).logits, before_one, atol=1e-5)


def test_row_dispatched_linear_calls_the_kernel_its_row_count_asks_for():
    from trtlade.reference.kernels import PackedLinear, RowDispatchedLinear, onednn_available

    if not onednn_available():
        pytest.skip("torch build without oneDNN: no packed kernel to dispatch to")
    linear = torch.nn.Linear(8, 4)
    packed = PackedLinear(linear)
    calls = []
    packed.register_forward_hook(lambda *a: calls.append("packed"))
    linear.register_forward_hook(lambda *a: calls.append("plain"))
    dual = RowDispatchedLinear(linear, packed, packed_from=4)
    with torch.no_grad():
        for shape in [(1, 8), (3, 8), (1, 4, 8), (2, 3, 8), (16, 8)]:
            x = torch.randn(*shape)
            assert torch.allclose(dual(x), linear(x), atol=1e-5)
            calls.pop()  # the reference call above
    assert calls == ["plain", "plain", "packed", "packed", "packed"]


def test_the_engine_reports_the_kernel_it_measured():
    from models import tiny_engine

    fused = tiny_engine("llama", (2, 2, 1)).runner.kernel_choice  # the engine's own forward: fused, packed
    assert fused.kernel in ("fused-native", "fused-onednn-packed") and fused.layers == 4 * 2 + 1
    assert "one packed copy" in fused.reason
    engine = tiny_engine("llama", (2, 2, 1), fast_forward=False)  # transformers' forward: native where it runs
    choice = engine.runner.kernel_choice
    assert choice.kernel in ("native", "onednn-packed", "plain", "by-rows") and choice.reason
    measured = tiny_engine("llama", (2, 2, 1), fast_forward=False, native_kernels=False).runner.kernel_choice
    assert measured.kernel in ("onednn-packed", "plain", "by-rows")  # else: measured at load
    assert engine.runner.packed_linears == (choice.layers if choice.kernel != "plain" else 0)
    # engine.stats and the served /version details say the same thing
    from trtlade.reference.serving_adapter import ReferenceServingEngine

    assert engine.stats["step_cost_ms"] == {}  # the test engines skip the calibration
    engine.calibrate()
    stats = engine.stats
    assert stats["linear_kernel"] == choice.to_dict() and stats["dtype"] == "float32"
    assert stats["prompt_lookup"] == engine.settings.prompt_lookup and stats["step_cost_ms"]
    assert all(ms > 0 for ms in stats["step_cost_ms"].values())
    serving = ReferenceServingEngine(engine, max_batch_size=1)
    try:
        details = serving.info.to_dict()["details"]
        assert details["linear_kernel"] == choice.to_dict()
        moving = "huge_page_bytes"  # read from smaps at each call: the OS may collapse pages in between
        assert {k: v for k, v in details["weight_pages"].items() if k != moving} == \
            {k: v for k, v in stats["weight_pages"].items() if k != moving}
        native = choice.kernel == "native"  # transformers' forward on the native kernel: its packed copies counted
        assert (stats["weight_pages"]["bytes"] > 0) is native
    finally:
        import asyncio

        asyncio.run(serving.aclose())


CPU_ALONE = {1: 53, 4: 62, 10: 70, 16: 75, 32: 95}
GPU_ALONE = {1: 10, 4: 10, 10: 10.2, 16: 10.3, 32: 10.6}


@pytest.mark.parametrize("alone, plain_8_ms, drafts", [
    # CPU: 8 sequences' plain step costs 92 ms against 53 for one: a row costs 5.6 ms, drafts do not
    # pay, although one sequence's table alone (10 rows 1.3x) would have said they do
    (CPU_ALONE, 92.0, -1),
    (GPU_ALONE, 10.5, 0),    # GPU-like: 8 sequences cost what one does, rows are nearly free: it drafts
])
def test_in_a_batch_a_draft_row_costs_what_another_sequence_row_costs(alone, plain_8_ms, drafts):
    policy = AutoPolicy(_cost(alone), explore=0.0)
    for _ in range(5):
        policy.observe_cost(8, plain_8_ms / 1000, seqs=8)   # measured plain steps of 8 sequences
    policy.observe_cost(17, 0.5, seqs=8)                    # one step with drafts: too few to count yet
    assert policy.step_seconds(8, 8) == pytest.approx(plain_8_ms / 1000)
    good = policy.new_sequence()
    good.total, good.weight = 1.2 * 16, 16.0
    others = [(1, 1.0)] * 7
    assert policy.plan(others, [[(good, 9)]]) == [drafts]
    assert policy.snapshot()["plain_step_ms_by_sequences"] == {8: plain_8_ms}


def test_batched_steps_with_drafts_teach_the_cost_of_a_draft_row_and_it_is_forgotten_slowly():
    """GPU-like table: 8 sequences cost what one does, so the model says a draft row is nearly free
    and a good sequence drafts. Steps with drafts that measure 5 ms per draft row (a host where they are
    not free, e.g. cores shared with the load generator) stop it; while nobody drafts the samples are
    forgotten one per FORGET_EVERY plain steps, and it drafts again."""
    policy = AutoPolicy(_cost(GPU_ALONE), explore=0.0)
    for _ in range(5):
        policy.observe_cost(8, 0.0105, seqs=8)
    good = policy.new_sequence()
    good.total, good.weight = 1.2 * 16, 16.0
    others = [(1, 1.0)] * 7
    assert policy.plan(others, [[(good, 9)]]) == [0]
    for _ in range(policy.MIN_BATCHED):
        policy.observe_cost(17, 0.0105 + 9 * 0.005, seqs=8)  # 9 draft rows at 5 ms each
    assert policy.measured_row(8) == pytest.approx(0.005)
    assert policy.step_seconds(17, 8) == pytest.approx(0.0105 + 9 * 0.005)
    assert policy.snapshot()["batched_row_cost_ms"] == {8: 5.0}
    assert policy.plan(others, [[(good, 9)]]) == [-1]
    assert policy.measured_row(4) == 0.0  # other batch sizes keep the model
    for _ in range(policy.FORGET_EVERY - 1):
        policy.observe_cost(8, 0.0105, seqs=8)
    assert policy.plan(others, [[(good, 9)]]) == [-1]  # not forgotten yet
    policy.observe_cost(8, 0.0105, seqs=8)  # one sample forgotten: fewer than MIN_BATCHED count
    assert policy.measured_row(8) == 0.0
    assert policy.plan(others, [[(good, 9)]]) == [0]


#: One sequence's step by rows (ms) on a 2-core AMD EPYC Zen 4, fp32 SmolLM2-135M (calibration at load)
ZEN4_ALONE = {1: 19.0, 2: 20.5, 4: 20.8, 8: 20.0, 12: 22.1, 16: 25.6}


@pytest.mark.parametrize("drafted_steps, drafts", [
    (0, -1),   # priced as another sequence's row (22 - 19 = 3 ms a row): 4 rows for 0.6 tokens do not pay
    (3, 0),    # drafted steps of 2 measured 0.36 ms a draft row: they do
])
def test_measured_drafted_steps_price_a_draft_row_below_another_sequence_row(drafted_steps, drafts):
    """Two sequences: the second sequence's row costs 3 ms (its attention, its request's serving), a draft
    row of the first far less (served on a 2-core Zen 4: 1 ms). The per-sequence price is the prior only;
    the measured one replaces it, never below one sequence's own row cost from the table."""
    policy = AutoPolicy(_cost(ZEN4_ALONE), explore=0.0)
    for _ in range(5):
        policy.observe_cost(2, 0.022, seqs=2)
    for _ in range(drafted_steps):
        policy.observe_cost(2 + 4, 0.022 + 4 * 0.00036, seqs=2)
    seq = policy.new_sequence()
    seq.total, seq.weight = 0.6 * 16, 16.0
    assert policy.plan([(1, 1.0)], [[(seq, 4)]]) == [drafts]
    assert policy.step_seconds(6, 2) == pytest.approx(0.022 + 4 * (0.00036 if drafted_steps else 0.003))


#: One sequence's step by rows (ms) and what drafts cost a step of 16 sequences (plain 16.7 ms) on an
#: NVIDIA H200, fp32 SmolLM2-135M (docs/results/reference-engine-gpu.md, "On a GPU"): (draft rows, ms beyond the
#: plain step); three steps where everybody drafted (measured: +4.5 ms), one where one sequence did
#: (its forward +1.0 ms and its host work +1.75 ms, each measured: ~2.8 ms).
H200_ALONE = {1: 14.9, 2: 16.6, 8: 16.6, 16: 16.7, 48: 16.9}
H200_DRAFTED_16 = [(74, 4.5), (74, 4.4), (6, 2.8), (74, 4.6)]


@pytest.mark.parametrize("drafters, expected_each, drafts", [
    (1, 0.8, [-1]),          # one sequence's 0.8 tokens do not pay the 3 ms a drafting step costs
    (16, 0.8, [0] * 16),     # everybody's 12.8 together do
])
def test_a_drafting_step_pays_a_fixed_price_on_a_gpu(drafters, expected_each, drafts):
    """Priced per draft row (the median over these steps: 0.06 ms), one drafter's 6 rows would look
    like 0.7 ms and its 0.8 tokens would be worth it; the steps say drafting costs ~2.65 ms + 0.025 ms a
    row, which only many drafters together pay."""
    policy = AutoPolicy(_cost(H200_ALONE), explore=0.0)
    for _ in range(5):
        policy.observe_cost(16, 0.0167, seqs=16)
    for rows, ms in H200_DRAFTED_16:
        policy.observe_cost(16 + rows, 0.0167 + ms / 1000, seqs=16)
    assert 1000 * policy.measured_row(16) == pytest.approx(0.061, abs=0.001)
    fixed, per_row = policy.price.fit(16)
    assert 1000 * fixed == pytest.approx(2.65, abs=0.02) and 1000 * per_row == pytest.approx(0.025, abs=0.001)
    assert policy.step_seconds(16 + 6, 16) == pytest.approx(0.0167 + fixed + 6 * per_row)
    good = [policy.new_sequence() for _ in range(drafters)]
    for seq in good:
        seq.total, seq.weight = expected_each * 16, 16.0
    others = [(1, 1.0)] * (16 - drafters)
    assert policy.plan(others, [[(seq, 6 if drafters == 1 else 74 // 16)] for seq in good]) == drafts
    assert policy.snapshot()["draft_price_ms"] == {16: {"fixed": round(1000 * fixed, 3),
                                                        "per_row": round(1000 * per_row, 4)}}


@settings(max_examples=60, deadline=None)
@given(fixed_ms=st.floats(0, 5), per_row_ms=st.floats(0, 2),
       rows=st.lists(st.integers(1, 120), min_size=3, max_size=16), slowed=st.integers(0, 15))
def test_a_draft_price_recovers_its_line_and_one_slowed_step_does_not_move_it(fixed_ms, per_row_ms, rows, slowed):
    """Steps on ``fixed + per_row x rows`` give that line back; with one of five or more steps (each with
    its own draft rows) slowed by 20 ms (a neighbour took the core), the line moves by less than 1 ms over
    the rows measured."""
    price = DraftPrice()
    for d in rows:
        price.add(4, d, (fixed_ms + per_row_ms * d) / 1000)
    fit = price.fit(4)
    if len(set(rows)) < 2:
        assert fit is None
        return
    assert 1000 * fit[0] == pytest.approx(fixed_ms, abs=1e-6) and 1000 * fit[1] == pytest.approx(per_row_ms, abs=1e-6)
    if len(rows) >= 5 and len(set(rows)) == len(rows):  # five or more steps, each with its own draft rows
        slow = DraftPrice()
        for i, d in enumerate(rows):
            slow.add(4, d, (fixed_ms + per_row_ms * d + (20.0 if i == slowed % len(rows) else 0.0)) / 1000)
        slow_fixed, slow_per_row = slow.fit(4)
        for d in (min(rows), max(rows)):
            assert abs((slow_fixed + slow_per_row * d) - (fit[0] + fit[1] * d)) < 0.001


@pytest.mark.parametrize("pool, drafts", [
    (1, [0, 0]),     # 2 sequences' three steps beside 3 sequences' five: 0.6 ms a draft row, drafting pays
    (0, [-1, -1]),   # their own three alone: one step 17 ms slow sets 16 ms a row, nobody drafts
])
def test_one_slow_step_at_a_rare_occupancy_does_not_set_its_draft_price(pool, drafts):
    """Served on a 2-core Intel Xeon, 16 requests on 8 slots: steps of 2 sequences were few, and their fit
    priced a draft row at 16.4 ms (the host's other servers: 0.4-0.5 ms). Pooled with the steps of one
    sequence more or less, the line follows the many; two sequences expecting 0.8 accepted drafts from 2 draft
    rows each then draft (about 2.4 ms for 1.6 tokens on a 20 ms step)."""
    policy = AutoPolicy(_cost({1: 18.0, 2: 18.5, 4: 19.0, 8: 20.0}), explore=0.0)
    policy.price.pool = pool
    for seqs, plain_ms in ((2, 20.0), (3, 21.0)):
        for _ in range(4):
            policy.observe_cost(seqs, plain_ms / 1000, seqs=seqs)
    for seqs, steps in ((2, [(1, 0.6), (1, 0.5), (2, 17.0)]), (3, [(2, 1.3), (4, 2.5), (3, 1.9), (1, 0.7), (2, 1.2)])):
        for rows, ms in steps:
            policy.observe_cost(seqs + rows, (20.0 if seqs == 2 else 21.0) / 1000 + ms / 1000, seqs=seqs)
    per_row = policy.price.fit(2)[1]
    assert (1000 * per_row < 1.0) is (pool == 1) and (1000 * per_row > 10.0) is (pool == 0)
    pair = [policy.new_sequence() for _ in range(2)]
    for seq in pair:
        seq.total, seq.weight = 0.8 * 16, 16.0
    assert policy.plan([], [[(seq, 2)] for seq in pair]) == drafts
    before = policy.price.fit(3)
    policy.observe_cost(2 + 1, 0.0206, seqs=2)  # a step of 2 renews the fits that read it: 3's too, pooled
    assert (3 in policy.price._memo) is (pool == 0)
    assert (policy.price.fit(3) == before) is (pool == 0)


@pytest.mark.parametrize("own, fixed_ms, per_row_ms", [
    (16, 1.0, 0.5),   # a full window of its own: its own line, the neighbours' steps unread
    (4, None, None),  # four of its own: the neighbours' newest make up sixteen, and move the line
])
def test_a_draft_price_reads_its_neighbours_only_to_make_up_its_window(own, fixed_ms, per_row_ms):
    """8 sequences' steps lie on 1.0 ms + 0.5 ms a row, 7's and 9's on 3.0 + 1.0: with sixteen steps of its own
    the fit at 8 is its line exactly; with four it reads twelve of the neighbours' newest (sixteen in all), never
    more, however many they have."""
    price = DraftPrice()
    for seqs, fixed, per_row, count in ((7, 3.0, 1.0, 16), (9, 3.0, 1.0, 16), (8, 1.0, 0.5, own)):
        for i in range(count):
            rows = 1 + (i * 5) % 11
            price.add(seqs, rows, (fixed + per_row * rows) / 1000)
    fit = price.fit(8)
    assert len(price._pooled(8)) == price.keep_last
    price.add(7, 3, 0.006)  # a step of 7 renews 8's fit only where 8 reads 7's steps
    assert (8 in price._memo) is (own >= price.keep_last)
    if fixed_ms is not None:
        assert 1000 * fit[0] == pytest.approx(fixed_ms) and 1000 * fit[1] == pytest.approx(per_row_ms)
    else:
        assert 1000 * fit[1] > 0.5 + 1e-6  # the neighbours' dearer rows moved it


@pytest.mark.parametrize("relative, drafts", [(True, 0), (False, -1)])
def test_a_calibration_on_a_busy_host_does_not_stick(relative, drafts):
    """Calibrated while another process held the cores (every step ~5x slower: seen when two servers
    started at once), then serving on a quiet host: only 1-row steps are measured while nobody drafts.
    Kept as ratios to the 1-row step, the wider steps follow it down and a sequence whose drafts pay
    drafts again; kept as seconds (before), 9 rows stayed at 105 ms against 20 and it never would."""
    table = CostTable(relative=relative)
    for rows, ms in [(1, 90.0), (9, 105.0), (16, 130.0)]:
        table.add(rows, ms / 1000)
    policy = AutoPolicy(table, explore=0.0)
    for _ in range(40):
        policy.observe_cost(1, 0.020)  # plain steps of one sequence, quiet host
    good = policy.new_sequence()
    good.total, good.weight = 0.5 * 16, 16.0  # half a draft accepted per drafted step
    assert policy.plan([], [[(good, 8)]]) == [drafts]
    if relative:
        assert policy.step_seconds(9) == pytest.approx(0.020 * 105 / 90)


def test_the_engine_keeps_its_row_costs_relative():
    from models import tiny_engine

    eng = tiny_engine("llama", (2, 3, 2), adaptive=True)
    best = eng.calibrate(repeats=1, warmup=0, max_rows=16)
    assert eng.cost.relative and max(best.values()) < 0.1  # a tiny model: milliseconds a step
    for rows, kept in eng.cost.samples.items():  # 1 row in seconds, the others as ratios to it (~1)
        assert kept == ([best[1]] if rows == 1 else [pytest.approx(best[rows] / best[1])])
    assert eng.cost.median(16) == pytest.approx(best[16])


def test_a_calibration_never_keeps_fewer_rows_dearer_than_more(monkeypatch):
    """A slow period of the host during every round of one row count (here: 2 rows, 50 ms more each
    time) does not make the cost model believe that 2 rows cost more than 4: the table keeps the cheapest
    time of any row count at least as wide."""
    import time as _time

    from models import tiny_engine

    eng = tiny_engine("llama", (2, 3, 2), adaptive=True)
    forward = eng.runner.forward

    def slowed(blocks, *args, **kwargs):
        if len(blocks[0].tokens) == 2:
            _time.sleep(0.05)
        return forward(blocks, *args, **kwargs)

    monkeypatch.setattr(eng.runner, "forward", slowed)
    best = eng.calibrate(repeats=2, warmup=0, max_rows=8)
    assert sorted(best) == [1, 2, 4, 8] and best[2] < 0.05  # the slowed rounds are not what it kept
    assert all(best[a] <= best[b] for a, b in zip(sorted(best), sorted(best)[1:]))


def test_a_calibration_is_not_moved_by_a_slow_round(monkeypatch):
    """A host whose speed changes between rounds (here: every forward 3x slower in the second of three)
    leaves the table as the fast rounds measured it: each row count keeps its fastest forward. A fake
    clock: a forward of r rows takes (1 + r / 10) ms, times the round's factor."""
    import types

    import trtlade.reference.engine as engine_module
    from models import tiny_engine

    eng = tiny_engine("llama", (2, 3, 2), adaptive=True)
    forward, clock, calls = eng.runner.forward, [0.0], [0]
    rows_per_round = 4  # max_rows=8: 1, 2, 4, 8 (the spec's width, 8, among them)

    def timed(blocks, *args, **kwargs):
        if len(blocks[0].tokens) > 8:  # the prefix's prefill, before the rounds
            return forward(blocks, *args, **kwargs)
        factor = 3.0 if calls[0] // rows_per_round == 1 else 1.0
        calls[0] += 1
        clock[0] += factor * (1 + len(blocks[0].tokens) / 10) / 1000
        return forward(blocks, *args, **kwargs)

    monkeypatch.setattr(eng.runner, "forward", timed)
    monkeypatch.setattr(engine_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    best = eng.calibrate(repeats=3, warmup=0, max_rows=8)
    assert calls[0] == 3 * len(best) == 3 * rows_per_round
    assert best == {rows: pytest.approx((1 + rows / 10) / 1000) for rows in (1, 2, 4, 8)}


@pytest.mark.parametrize("seconds, kept", [
    ({1: 0.02, 2: 0.03, 4: 0.025}, {1: 0.02, 2: 0.025, 4: 0.025}),
    ({1: 0.03, 2: 0.02}, {1: 0.02, 2: 0.02}),
    ({1: 0.02, 8: 0.03, 16: 0.05}, {1: 0.02, 8: 0.03, 16: 0.05}),
    ({}, {}),
])
def test_no_row_count_is_kept_dearer_than_a_wider_one(seconds, kept):
    from trtlade.reference.adaptive import no_dearer_than_wider

    assert no_dearer_than_wider(seconds) == kept


@settings(max_examples=200, deadline=None)
@given(seconds=st.dictionaries(st.integers(1, 64), st.sampled_from([0.01, 0.02, 0.03, 0.05]), max_size=10),
       stamps=st.lists(st.integers(0, 5), min_size=10, max_size=10))
def test_a_row_count_is_capped_by_exactly_the_wider_ones_measured_at_least_as_recently(seconds, stamps):
    from trtlade.reference.adaptive import no_dearer_than_wider

    measured = {rows: stamps[i] for i, rows in enumerate(sorted(seconds))}
    expected = {rows: min(seconds[w] for w in seconds if w >= rows and measured[w] >= measured[rows])
                for rows in seconds}
    assert no_dearer_than_wider(seconds, measured) == dict(sorted(expected.items()))
    assert no_dearer_than_wider(seconds, {rows: 0 for rows in seconds}) == no_dearer_than_wider(seconds)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "drop", "ask"]), st.sampled_from([1, 2, 4, 8, 16]),
                              st.floats(0.001, 0.1)), max_size=60), relative=st.booleans(), capped=st.booleans())
@example(ops=[("add", 1, 0.06), ("add", 2, 0.06), ("add", 4, 0.06), ("drop", 1, 0.06)], relative=True,
         capped=False)  # no 1-row step
@example(ops=[("add", 1, 0.02), ("add", 4, 0.05), ("add", 8, 0.03), ("ask", 1, 0.0), ("add", 8, 0.06),
              ("add", 8, 0.06)], relative=True, capped=True)  # the cap of 4 rows moves with 8 rows' median
def test_the_cost_tables_kept_medians_are_never_stale(ops, relative, capped):
    """A table keeps its medians (and, capped, each row count's cheapest wider median measured since) until the
    next sample or drop; every answer equals a fresh table's on the same samples (the memo is invisible); a
    capped table never prices a measured row count above a wider one measured at least as recently, and
    without newer samples of narrower counts (a calibration's order) never prices fewer rows above more."""
    table = CostTable(keep_last=4, relative=relative, capped=capped)
    for op, rows, seconds in ops:
        if op == "add":
            table.add(rows, seconds)
        elif op == "drop":
            table.drop_oldest(rows)
        fresh = CostTable(keep_last=4, samples={k: list(v) for k, v in table.samples.items()}, relative=relative,
                          capped=capped, stamps=dict(table.stamps))
        for asked in (1, 3, 8, 32):
            assert table.median(asked) == fresh.median(asked)
            assert table.seconds(asked) == fresh.seconds(asked)
        if not capped or table.seconds(2) is None:
            continue
        measured = [r for r in (2, 4, 8, 16) if table.samples.get(r)]
        for i, narrow in enumerate(measured):
            for wide in measured[i + 1:]:
                if table.stamps[wide] >= table.stamps[narrow]:
                    assert table.seconds(narrow) <= table.seconds(wide) * (1 + 1e-12)
        if all(table.stamps[a] <= table.stamps[b] for a, b in zip(measured, measured[1:])):
            priced = [table.seconds(rows) for rows in range(2, 17)]
            assert all(a <= b * (1 + 1e-12) for a, b in zip(priced, priced[1:]))


def test_a_row_count_measured_dear_once_does_not_keep_the_plan_from_it():
    """Served, one slow 4-row step beside cheap wider ones: uncapped, the plan avoids a 3-token chain
    (4 rows) for good, since only choosing it would bring the sample that corrects it; capped, 4 rows
    cost at most what 5 rows cost, and the chain runs."""
    served = {1: 18.8, 4: 31.2, 5: 20.4, 8: 20.6, 16: 22.1}  # ms, as /version showed them on a Zen 5
    choices = []
    for capped in (False, True):
        table = CostTable(capped=capped)
        for rows, ms in served.items():
            table.add(rows, ms / 1000)
        policy = AutoPolicy(table, explore=0.0)
        chain = policy.new_sequence()
        chain.total, chain.weight = 0.6 * 16, 16.0  # a 3-token chain that accepts 0.6 a step
        choices.append(policy.plan([], [[(chain, 3)]]))
    assert choices == [[-1], [0]]


def test_a_wide_row_count_measured_before_contexts_grew_does_not_price_the_narrower_ones_measured_since():
    """Calibrated after a short context (8 rows 1.13x one row), then serving long ones (bfloat16, 600 cached
    tokens: 5 rows 1.25x, 7 rows 1.31x, each row's attention reading every key): a 4-token chain expected to
    accept 0.2 drafts does not pay at 1.25x, and the plan runs the golden row; priced at 8 rows' stale 1.13x,
    as a cap by any wider count would price it, it would draft at every step and never learn otherwise."""
    table = CostTable(relative=True, capped=True)
    for rows, ms in [(1, 10.8), (2, 11.0), (4, 11.6), (8, 12.2)]:  # the calibration, short context
        table.add(rows, ms / 1000)
    for rows, ms in [(1, 11.7)] * 3 + [(5, 14.6), (7, 15.3)] * 3:  # serving, long contexts
        table.add(rows, ms / 1000)
    assert round(table.ratio(5), 2) == 1.25 and round(table.ratio(7), 2) == 1.31
    policy = AutoPolicy(table, explore=0.0)
    chain = policy.new_sequence()
    chain.total, chain.weight = 0.2 * 16, 16.0
    assert policy.plan([], [[(chain, 4)]]) == [-1]
    stale = CostTable(relative=True, capped=True, samples={k: list(v) for k, v in table.samples.items()})
    assert round(stale.ratio(5), 2) == round(stale.ratio(8), 2) == 1.13  # no stamps: every wider count caps
    misled = AutoPolicy(stale, explore=0.0)
    chain = misled.new_sequence()
    chain.total, chain.weight = 0.2 * 16, 16.0
    assert misled.plan([], [[(chain, 4)]]) == [0]


def test_a_relative_capped_table_scales_its_caps_with_the_one_row_step():
    table = CostTable(relative=True, capped=True)
    for rows, ms in [(1, 20.0), (4, 40.0), (8, 24.0)]:  # 4 rows measured in a slow moment
        table.add(rows, ms / 1000)
    assert table.seconds(4) == pytest.approx(0.024)
    for _ in range(3):
        table.add(1, 0.010)  # the host twice as fast now: every ratio holds, at today's one row
    assert table.seconds(4) == pytest.approx(0.012) and table.seconds(8) == pytest.approx(0.012)

"""The greedy token of each row of logits (native ``trtlade_argmax_rows``): torch.argmax's answer on every
CPU variant, ties, infinities and NaN included; the engine's greedy paths use it."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import native_variants
from trtlade.reference.native import argmax_rows

INF, NAN = math.inf, math.nan

# a row, its argmax (torch's: the first of equal maxima, the first NaN), why
TABLE = [
    ([2.0], 0, "one value"),
    ([1.0, 3.0, -INF, 3.0], 1, "a tie: the first"),
    ([-INF, -INF, -INF], 0, "all -inf: the first"),
    ([0.0, 5.0, NAN, 7.0, NAN], 2, "a NaN wins, the first one"),
    ([NAN, 1.0], 0, "a NaN first"),
    ([-0.0, 0.0], 0, "-0 and +0 are equal: the first"),
    ([1.0] * 40, 0, "all equal across the vector lanes and the tail"),
    ([0.0] * 47 + [1.0], 47, "the largest in the tail"),
    ([0.0] * 17 + [9.0] + [0.0] * 30 + [9.0], 17, "in lane 1 of the second vector, then tied in the tail"),
    ([0.0] * 20 + [9.0] + [0.0] * 11 + [9.0] * 16, 20, "a later vector ties in every lane"),
    ([0.0] * 3 + [NAN] + [0.0] * 60, 3, "a NaN in the first vector"),
    ([0.0] * 40 + [NAN] + [0.0] * 10 + [NAN], 40, "a NaN in a later vector"),
    ([-1.0] * 32 + [INF] + [-1.0] * 31, 32, "+inf"),
    # the vector is 4 lanes wide (SSE2, NEON), 8 (AVX2) or 16 (AVX-512): the boundaries of each
    ([0.0] * 7 + [2.0], 7, "8 values, the last the largest"),
    ([0.0] * 5 + [2.0] + [0.0] * 3 + [2.0], 5, "9 values, tied in lanes 1 of two 4-lane vectors"),
    ([1.0] * 3 + [4.0] + [1.0] * 4 + [4.0] * 8, 3, "16 values, tied in every lane of a later 8-lane vector"),
    ([0.0] * 15 + [3.0] + [3.0] * 15, 15, "31 values: the last lane of the first 16 against the tail"),
    ([0.0] * 12 + [NAN] + [0.0] * 3, 12, "16 values, a NaN in the last 4-lane vector"),
]


@pytest.mark.parametrize("variant", native_variants.params())
@pytest.mark.parametrize("row, best, why", TABLE, ids=[t[2] for t in TABLE])
def test_argmax_spec_table(row, best, why, variant):
    x = torch.tensor([row], dtype=torch.float32)
    assert torch.argmax(x, dim=-1).tolist() == [best], why  # the table says what torch says
    assert argmax_rows(x, variant) == [best], why
    assert argmax_rows(x[0], variant) == [best], why  # one row given as a vector


@pytest.mark.parametrize("variant", native_variants.params())
def test_argmax_of_many_rows_equals_torch_at_a_vocabulary_size(variant):
    torch.manual_seed(0)
    x = torch.randn(9, 49152)
    x[3, 100] = x[3, 40000] = 50.0  # a tie far apart
    x[5, 49151] = 60.0  # the last column
    assert argmax_rows(x, variant) == x.argmax(dim=-1).tolist()
    assert argmax_rows(x[::2], variant) == x[::2].argmax(dim=-1).tolist()  # not contiguous
    assert argmax_rows(x[:, :100].t(), variant) == x[:, :100].t().argmax(dim=-1).tolist()


@pytest.mark.parametrize("variant", native_variants.params())
@settings(max_examples=60, deadline=None)
@given(row=st.lists(st.sampled_from([-INF, -2.0, -0.0, 0.0, 0.5, 1.0, 1.0, 3.0, INF, NAN]), min_size=1, max_size=80))
def test_argmax_equals_torch_on_rows_of_few_values(row, variant):
    """Few distinct values: ties, zeros of both signs, infinities and NaN everywhere."""
    x = torch.tensor([row, row[::-1]], dtype=torch.float32)
    assert argmax_rows(x, variant) == x.argmax(dim=-1).tolist()


def test_other_dtypes_fall_back_to_torch():
    x = torch.tensor([[1.0, 4.0, 4.0, 2.0]], dtype=torch.bfloat16)
    assert argmax_rows(x) == [1]
    assert argmax_rows(torch.tensor([[3.0, 9.0]], dtype=torch.float64)) == [1]


def test_a_step_finds_every_blocks_greedy_tokens_in_one_call(monkeypatch):
    """``BatchRunner.forward_greedy``: the logits of ``forward`` and, per block, the argmax of each of its
    logit rows, from ONE argmax over the step (a decode step of 8 sequences made 8 calls)."""
    import trtlade.reference.batch_runner as batch_runner
    from models import tiny_engine
    from trtlade.reference.step_layout import RowBlock

    runner = tiny_engine("llama").new_batch().engine.runner
    slots = [runner.allocate(32) for _ in range(3)]
    for slot, prompt in zip(slots, ([5, 6, 7, 8], [9, 10], [11, 12, 13])):
        runner.prefill(slot, prompt)
    blocks = [RowBlock(slots[0], [14, 15], [0, 1], [0, 1], causal=True), RowBlock(slots[1], [16], [0], [0]),
              RowBlock(slots[2], [17, 18, 19], [0, 1, 1], [1, 2], mask=torch.tensor(
                  [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool).numpy())]
    calls = []
    real = batch_runner.argmax_rows
    monkeypatch.setattr(batch_runner, "argmax_rows", lambda logits: calls.append(logits.shape) or real(logits))
    logits, greedy = runner.forward_greedy(blocks)
    assert calls == [(5, logits[0].shape[1])]  # 2 + 1 + 2 logit rows, one call
    assert [len(g) for g in greedy] == [2, 1, 2]
    assert greedy == [block.argmax(dim=-1).tolist() for block in logits]
    assert all(torch.equal(a, b) for a, b in zip(logits, runner.forward(blocks)))  # the same forward's logits
    assert runner.forward_greedy([]) == ([], [])
    calls.clear()  # rows that need no greedy token (a prompt chunk's) are left out of the argmax
    logits, greedy = runner.forward_greedy(blocks[:2], also=blocks[2:])
    assert calls == [(3, logits[0].shape[1])] and len(logits) == 3 and len(greedy) == 2
    assert greedy == [block.argmax(dim=-1).tolist() for block in logits[:2]]

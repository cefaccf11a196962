"""A step's rows: which sequence each belongs to, what it sees, where its K/V go (data, no model).

:class:`RowBlock` is one sequence's rows in a step; :func:`step_layout` turns the step's blocks into the
:class:`StepLayout` every layer reads (cache slots and positions, the padded attention's index and
mask); :func:`row_keys` and :func:`invariant_index` give each row its own keys for row-invariant
attention (the native kernel, or :func:`~trtlade.reference.slot_attention.invariant_attention`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from trtlade.reference.native import RowKeys

__all__ = ["RowBlock", "StepLayout", "step_layout", "InvariantIndex", "INVARIANT_BLOCK", "invariant_index",
           "row_keys", "MASKED"]

@dataclass(frozen=True, eq=False)
class RowBlock:
    """One sequence's rows in a step.

    ``tokens[i]`` is fed at position ``length(slot) + depths[i]`` and its K/V is written at
    ``length(slot) + i``; row i sees the slot's committed tokens and the rows j of this block with
    ``mask[i][j]`` (``mask=None``: one row, or -- with ``causal=True`` -- a causal chain, as in a
    prefill). ``logit_rows``: the rows whose logits come back.
    """

    slot: int
    tokens: Sequence[int]
    depths: Sequence[int]
    logit_rows: Sequence[int]
    mask: Optional[np.ndarray] = None
    causal: bool = False

    @property
    def rows(self) -> int:
        return len(self.tokens)

    def visibility(self) -> np.ndarray:
        """The block's ``rows x rows`` boolean mask.

        >>> RowBlock(0, [5, 6, 7], [0, 1, 2], [2], causal=True).visibility().astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        """
        k = self.rows
        if self.mask is not None:
            return np.asarray(self.mask, dtype=bool)
        if self.causal or k == 1:
            return np.tril(np.ones((k, k), dtype=bool))
        raise ValueError(f"a block of {k} rows needs a mask (or causal=True)")


@dataclass(eq=False)
class StepLayout:
    """Where a step's packed rows go and what each sees; built once per forward, read by every layer.

    ``write_slot`` / ``write_pos``: cache slot and position of each packed row's K/V.
    ``lo:hi``: the slot range the attention reads (blocks = hi - lo, gap slots get no queries).
    ``q_index``: packed row of each padded query ``(block, i)`` (padding points at row 0);
    ``out_index``: padded query of each packed row. ``mask``: additive ``[blocks, 1, 1, kmax, lmax]``.
    ``prefill``: ``(slot, rows)`` when the step is one causal block on an empty slot (sdpa's causal
    kernel then runs it). ``single``: ``(slot, keys)`` when the step is one row (a lone greedy
    decode), which sees its slot's first ``keys`` positions, itself included: sdpa without a mask.
    """

    write_slot: torch.Tensor
    write_pos: torch.Tensor
    lo: int
    hi: int
    kmax: int
    lmax: int
    q_index: Optional[torch.Tensor] = None
    out_index: Optional[torch.Tensor] = None
    mask: Optional[torch.Tensor] = None
    prefill: Optional[tuple[int, int]] = None
    single: Optional[tuple[int, int]] = None
    contiguous: Optional[tuple[int, int, int]] = field(default=None)  # (slot, start, count) single-block write
    invariant: Optional["InvariantIndex"] = None  # set when the runner computes row-invariant attention (torch)
    row_keys: Optional[RowKeys] = None  # set when it computes it with the native kernel (every path, every layer)
    #: the native attention kernel of the runner's CPU variant, set with :attr:`row_keys`
    row_attention: Optional[Callable] = None
    #: logical position of each padded query ``[blocks, kmax]`` and key ``[blocks, lmax]`` (general path):
    #: a verification row's key at cache index ``length + j`` holds the token at ``length + depths[j]``
    query_pos: Optional[np.ndarray] = None
    key_pos: Optional[np.ndarray] = None
    _windowed: dict = field(default_factory=dict)

    def window_mask(self, window: Optional[int]) -> Optional[torch.Tensor]:
        """The additive mask of a sliding-window layer: :attr:`mask` with every key at a position ``<= p -
        window`` of its query's position ``p`` masked too (transformers' ``kv_idx > q_idx - window``);
        ``window=None``: :attr:`mask` itself. Built once per step and window.

        >>> layout = step_layout([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
        ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 4})
        >>> (layout.window_mask(3)[0, 0, 0] == 0).int().tolist()  # positions 4, 5, 5: keys in (p - 3, p]
        [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 1]]
        """
        if window is None or self.mask is None:
            return self.mask
        if window not in self._windowed:
            outside = self.key_pos[:, None, :] <= self.query_pos[:, :, None] - int(window)
            self._windowed[window] = self.mask.masked_fill(
                torch.from_numpy(outside).to(self.mask.device)[:, None, None], MASKED)
        return self._windowed[window]


@dataclass(eq=False)
class InvariantIndex:
    """Where each packed row's visible keys are, in position order, for :func:`invariant_attention`:
    ``slot`` / ``pos`` ``[R, P]`` (cache slot and index of the row's j-th visible key), ``valid``
    ``[R, P]`` (False past the row's keys), ``P`` a multiple of :data:`INVARIANT_BLOCK`."""

    slot: torch.Tensor
    pos: torch.Tensor
    valid: torch.Tensor


#: Keys per block of :func:`invariant_attention`: every row's keys are cut into blocks of this many
#: positions, counted from position 0, whatever the step.
INVARIANT_BLOCK = 32


def invariant_index(blocks: Sequence["RowBlock"], lengths: dict[int, int], device: Any = "cpu") -> InvariantIndex:
    """Each row's visible keys in position order: its slot's committed positions, then the rows of its
    block it sees, by depth (for a verification row, its path: so its j-th key is the token at position
    j, as in a greedy step at that position).

    >>> idx = invariant_index([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
    ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 2})
    >>> idx.pos[:, :4].tolist(), idx.valid[:, :4].int().tolist()       # row 2 sees 0, 1, the golden row (2), itself (4)
    ([[0, 1, 2, 0], [0, 1, 2, 3], [0, 1, 2, 4]], [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    """
    rows: list[tuple[int, list[int]]] = []
    for b in blocks:
        start, seen = lengths[b.slot], b.visibility()
        for i in range(b.rows):
            mine = sorted((int(b.depths[j]), j) for j in range(b.rows) if seen[i, j])
            rows.append((b.slot, list(range(start)) + [start + j for _, j in mine]))
    width = max(len(keys) for _, keys in rows)
    width = -(-width // INVARIANT_BLOCK) * INVARIANT_BLOCK
    slot = np.zeros((len(rows), width), dtype=np.int64)
    pos = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=bool)
    for r, (s, keys) in enumerate(rows):
        slot[r] = s
        pos[r, :len(keys)] = keys
        valid[r, :len(keys)] = True
    return InvariantIndex(torch.from_numpy(slot).to(device), torch.from_numpy(pos).to(device),
                          torch.from_numpy(valid).to(device))


def row_keys(blocks: Sequence["RowBlock"], lengths: dict[int, int]) -> RowKeys:
    """Each packed row's keys for the native kernel: its slot's committed positions, then the rows of its
    block it sees, by depth (cache index, position). A causal block's row i sees rows 0..i, which sit at
    cache index = position: they count as committed, so a prefill of n rows lists n keys, not n^2/2.

    >>> keys = row_keys([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
    ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 2})
    >>> keys.committed.tolist(), keys.pos.tolist(), keys.idx.tolist(), keys.at.tolist()   # row 2: 0, 1, g, itself
    ([2, 2, 2], [2, 3, 3], [2, 2, 3, 2, 4], [2, 2, 3, 2, 3])
    """
    rows: list[tuple[int, int, int, list[tuple[int, int]]]] = []
    for b in blocks:
        start = lengths[b.slot]
        if b.mask is None:  # one row, or a causal chain: rows before it are at their positions
            rows.extend((b.slot, start + i, start + i, [(start + i, start + i)]) for i in range(b.rows))
            continue
        seen = b.visibility()
        for i in range(b.rows):
            path = sorted((int(b.depths[j]), start + j) for j in range(b.rows) if seen[i, j])
            rows.append((b.slot, start, start + int(b.depths[i]), [(idx, start + d) for d, idx in path]))
    return RowKeys.build(rows)


MASKED = float(torch.finfo(torch.float32).min)


def step_layout(blocks: Sequence[RowBlock], lengths: dict[int, int], device: Any = "cpu", *,
                shortcuts: bool = True) -> StepLayout:
    """The :class:`StepLayout` of one forward over ``blocks``, given each slot's committed length
    (``shortcuts=False``: never the prefill / single-row layouts, for attention that sdpa cannot run).

    >>> layout = step_layout([RowBlock(0, [7, 8], [0, 1], [1], causal=True), RowBlock(2, [9], [0], [0])],
    ...                      {0: 3, 2: 1})
    >>> layout.write_slot.tolist(), layout.write_pos.tolist(), (layout.lo, layout.hi, layout.kmax, layout.lmax)
    ([0, 0, 2], [3, 4, 1], (0, 3, 2, 5))
    >>> (layout.mask[0, 0, 0] == 0).int().tolist()        # slot 0: 3 cached + its 2 rows, causal
    [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    >>> (layout.mask[2, 0, 0] == 0).int().tolist()        # slot 2: 1 cached + 1 row; a padded query
    [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]
    >>> step_layout([RowBlock(1, [5], [0], [0])], {1: 4}).single   # one row: slot 1's 4 cached keys + itself
    (1, 5)
    """
    if shortcuts and len(blocks) == 1 and blocks[0].causal and lengths[blocks[0].slot] == 0:
        b = blocks[0]  # a prefill on an empty slot: sdpa's causal kernel, written as one slice
        empty = torch.empty(0, dtype=torch.long, device=device)
        return StepLayout(write_slot=empty, write_pos=empty, lo=b.slot, hi=b.slot + 1, kmax=b.rows, lmax=b.rows,
                          prefill=(b.slot, b.rows), contiguous=(b.slot, 0, b.rows))
    if shortcuts and len(blocks) == 1 and blocks[0].rows == 1:
        b, start = blocks[0], lengths[blocks[0].slot]  # one row: it sees the whole slot and itself
        empty = torch.empty(0, dtype=torch.long, device=device)
        return StepLayout(write_slot=empty, write_pos=empty, lo=b.slot, hi=b.slot + 1, kmax=1, lmax=start + 1,
                          single=(b.slot, start + 1), contiguous=(b.slot, start, 1))
    slots = [b.slot for b in blocks]
    if len(set(slots)) != len(slots):
        raise ValueError(f"one block per slot and step, got slots {slots}")
    lo, hi = min(slots), max(slots) + 1
    kmax = max(b.rows for b in blocks)
    lmax = max(lengths[b.slot] + b.rows for b in blocks)
    mask = np.full((hi - lo, kmax, lmax), MASKED, dtype=np.float32)
    mask[:, :, 0] = 0.0  # padded queries see one key (their output is dropped; no all-masked row)
    q_index = np.zeros((hi - lo, kmax), dtype=np.int64)
    query_pos = np.zeros((hi - lo, kmax), dtype=np.int64)
    key_pos = np.zeros((hi - lo, lmax), dtype=np.int64)
    out_index: list[int] = []
    write_slot: list[int] = []
    write_pos: list[int] = []
    row = 0
    for b in blocks:
        i, start, k = b.slot - lo, lengths[b.slot], b.rows
        mask[i, :k, :start] = 0.0
        mask[i, :k, start:start + k] = np.where(b.visibility(), 0.0, MASKED)
        mask[i, :k, start + k:] = MASKED
        q_index[i, :k] = np.arange(row, row + k)
        depths = start + np.asarray(b.depths, dtype=np.int64)
        query_pos[i, :k] = depths
        key_pos[i, :start] = np.arange(start)
        key_pos[i, start:start + k] = depths
        out_index.extend(i * kmax + j for j in range(k))
        write_slot.extend([b.slot] * k)
        write_pos.extend(range(start, start + k))
        row += k

    def as_long(values: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values, dtype=np.int64), device=device)

    first = blocks[0]
    return StepLayout(
        write_slot=as_long(write_slot), write_pos=as_long(write_pos), lo=lo, hi=hi, kmax=kmax, lmax=lmax,
        q_index=as_long(q_index.reshape(-1)), out_index=as_long(out_index),
        mask=torch.from_numpy(mask).to(device).view(hi - lo, 1, 1, kmax, lmax), query_pos=query_pos, key_pos=key_pos,
        contiguous=(first.slot, lengths[first.slot], first.rows) if len(blocks) == 1 else None)

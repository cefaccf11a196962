"""Row-invariant attention over the slot cache (``row_attention.c``): each row's keys, and the kernel.

    >>> import torch
    >>> q = torch.ones(1, 1, 4); k = torch.zeros(1, 1, 8, 4); v = torch.arange(32.).view(1, 1, 8, 4)
    >>> rows = RowKeys.build([(0, 2, 2, [(2, 2)])])   # slot 0, 2 committed keys, the row at position 2
    >>> kernel = row_attention()
    >>> kernel(q, k, v, rows, scale=1.0).tolist() if kernel else [[[4.0, 5.0, 6.0, 7.0]]]   # equal scores: the mean
    [[[4.0, 5.0, 6.0, 7.0]]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from trtlade.reference.native.bindings import PROFILE_LABEL, kernels, profiled

__all__ = ["RowKeys", "row_attention"]


@dataclass(frozen=True)
class RowKeys:
    """Each row's keys for the kernel: ``slot``, ``committed`` (the slot's committed positions, all
    seen), ``pos`` (the row's position); the row's keys in the step as CSR ``ptr`` / ``idx`` (cache
    index) / ``at`` (position), in depth order."""

    slot: np.ndarray
    committed: np.ndarray
    pos: np.ndarray
    ptr: np.ndarray
    idx: np.ndarray
    at: np.ndarray

    @classmethod
    def build(cls, rows: Sequence[tuple[int, int, int, Sequence[tuple[int, int]]]]) -> "RowKeys":
        """From ``(slot, committed, position, [(cache index, position), ...])`` per row."""
        ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        idx: list[int] = []
        at: list[int] = []
        for r, (_, _, _, path) in enumerate(rows):
            idx.extend(i for i, _ in path)
            at.extend(p for _, p in path)
            ptr[r + 1] = len(idx)

        def col(i: int) -> np.ndarray:
            return np.ascontiguousarray([row[i] for row in rows], dtype=np.int64)

        return cls(col(0), col(1), col(2), ptr, np.asarray(idx, dtype=np.int64), np.asarray(at, dtype=np.int64))


def row_attention(variant: Optional[str] = None) -> Optional[Callable]:
    """The kernel as ``f(q [R, heads, dim], k, v [slots, kv_heads, capacity, dim], rows: RowKeys, scale,
    window=None, softcap=None) -> [R, heads, dim]`` (float32, contiguous; ``k`` and ``v`` float32 or both
    bfloat16, which the kernel widens exactly: the same bits as their float32 copies), or None (see :func:`status`);
    ``variant``: a CPU variant other than the process's own (see :func:`~.bindings.kernels`)."""
    table = kernels(variant)
    if table is None:
        return None
    fn = table.row_attention

    def call(q, k, v, rows: RowKeys, scale: float, window: Optional[int] = None, softcap: Optional[float] = None):
        import torch

        if q.dtype != torch.float32 or k.dtype != v.dtype or k.dtype not in (torch.float32, torch.bfloat16) \
                or not (k.is_contiguous() and v.is_contiguous()):
            raise ValueError("row_attention takes a float32 q and contiguous float32 or bfloat16 k and v")
        q = q.contiguous()
        out = torch.empty_like(q)
        R, heads, dim = q.shape
        args = (q.data_ptr(), R, heads, dim, k.data_ptr(), v.data_ptr(), k.shape[1], k.shape[2],
                rows.slot.ctypes.data, rows.committed.ctypes.data, rows.pos.ctypes.data, rows.ptr.ctypes.data,
                rows.idx.ctypes.data, rows.at.ctypes.data, int(window or 0), float(scale), float(softcap or 0.0),
                out.data_ptr(), int(k.dtype == torch.bfloat16))
        code = profiled(PROFILE_LABEL, fn, *args)
        if code:
            raise ValueError(f"row_attention refused: head_dim {dim} > 512 or heads {heads} not a multiple of "
                             f"kv_heads {k.shape[1]}")
        return out

    return call

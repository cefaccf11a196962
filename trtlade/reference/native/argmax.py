"""The greedy token of each row of logits (``layer_ops.c``, ``trtlade_argmax_rows``): torch.argmax's
answer (the first of equal values, the first NaN where a row has one), as many columns at a time as the
variant's vectors hold.

torch's argmax compares one logit at a time: about 45 us a row of SmolLM2's 49152 tokens on a 2-core AMD
EPYC Zen 4 (AVX-512), 0.34 ms for 8 rows; this kernel 50-60 us for the 8 (in a loop, same host; from 4
rows they are split between the threads, each row one thread's scan). Its vectors are as wide as the
variant's registers (16 lanes with AVX-512, 8 with AVX2, 4 elsewhere): on a 2-core AMD EPYC Zen 3 (AVX2) 19 us
a row and 57 us for 9, against 266 us and 1.3 ms when every variant used 16 lanes
(``benchmarks/argmax_rows.py``).

    >>> import torch
    >>> argmax_rows(torch.tensor([[1.0, 3.0, float("-inf"), 3.0], [0.0, -1.0, 2.0, 2.0]]))
    [1, 2]
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from trtlade.reference.native.bindings import ARGMAX_LABEL, kernels, profiled

__all__ = ["argmax_rows"]


def argmax_rows(logits, variant: Optional[str] = None) -> list[int]:
    """``logits.argmax(dim=-1).tolist()`` of a ``[rows, vocab]`` (or ``[vocab]``: one row) tensor: the
    native kernel for float32 logits on the CPU, torch's otherwise (``variant``: a CPU variant other
    than the process's own, see :func:`~.bindings.kernels`)."""
    table = kernels(variant)
    one = logits.dim() == 1
    rows = logits[None] if one else logits
    if table is None or rows.device.type != "cpu" or rows.dtype.itemsize != 4 or not rows.dtype.is_floating_point \
            or rows.dim() != 2 or rows.shape[1] == 0:
        best = rows.argmax(dim=-1).tolist()
    else:
        rows = rows.contiguous()
        out = np.empty(rows.shape[0], dtype=np.int64)
        if profiled(ARGMAX_LABEL, table.argmax_rows, rows.data_ptr(), rows.shape[0], rows.shape[1], out.ctypes.data):
            raise ValueError(f"argmax_rows refused a vocabulary of {rows.shape[1]}")
        best = out.tolist()
    return best[:1] if one else best

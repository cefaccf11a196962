"""The reference engine's in-flight batching rules, as numbers (no torch): who runs, with how many rows.

Two limits, named and counted as TensorRT-LLM's engine counts them:

* ``max_batch_size`` -- sequences running at once (``build.max_batch_size``); later requests wait,
  first come, first served;
* ``max_num_tokens`` -- rows one forward pass may compute (``build.max_num_tokens``). A generation
  request costs ``1 + its draft rows``; when the rows do not fit, drafts are dropped (TensorRT-LLM's
  ``fitDraftTokens``) before any request is delayed: every running sequence always gets its golden
  row, and the drafts go to the oldest requests first. A prompt is prefilled in chunks of at most
  ``max_num_tokens`` rows.

Worked example: four running requests want 9, 1, 9 and 4 rows under a budget of 16: the golden
rows take 4, the first request's 8 drafts fit (12), the third's do not (20 > 16) and the fourth's 3
do (15)::

    >>> fit_rows([9, 1, 9, 4], max_num_tokens=16)
    [9, 1, 1, 4]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from trtlade.contract.protocol import StepReport

__all__ = ["BatchLimits", "StepReport", "fit_rows", "default_max_num_tokens"]


def default_max_num_tokens(max_batch_size: int, decoding_tokens: int) -> int:
    """What ``trtllm-build`` raises ``max_num_tokens`` to at least: every sequence's full step.

    >>> default_max_num_tokens(8, 12)     # (2,4,2): 11 drafts + the golden row
    96
    """
    return int(max_batch_size) * int(decoding_tokens)


@dataclass(frozen=True)
class BatchLimits:
    """``max_batch_size`` running sequences, ``max_num_tokens`` rows per step (None: every
    sequence's full step always fits), ``prefill_chunk`` prompt rows a step computes next to the
    sequences decoding (None: a new prompt is prefilled whole, in a forward of its own, before the
    step's decode pass).

    With ``prefill_chunk``, drafts yield to prompt chunks under ``max_num_tokens``: four sequences
    wanting 9 rows each, a budget of 24 and a chunk of 8 leave the decoders 16 rows, and the chunk
    gets what they leave::

        >>> limits = BatchLimits(4, max_num_tokens=24, prefill_chunk=8)
        >>> rows = limits.rows([9, 9, 9, 9], reserve=8); rows, limits.chunk_room(sum(rows))
        ([9, 1, 1, 1], 8)
    """

    max_batch_size: int = 8
    max_num_tokens: Optional[int] = None
    prefill_chunk: Optional[int] = None

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_num_tokens is not None and self.max_num_tokens < self.max_batch_size:
            raise ValueError(f"max_num_tokens ({self.max_num_tokens}) must be >= max_batch_size "
                             f"({self.max_batch_size}): every running sequence needs its golden row")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1 (or None: whole prompts), got {self.prefill_chunk}")

    def rows(self, wanted: Sequence[int], reserve: int = 0) -> list[int]:
        """Rows each decoding sequence computes, ``reserve`` rows of ``max_num_tokens`` kept for prompt
        chunks (never the golden rows: each sequence keeps one)."""
        if self.max_num_tokens is None:
            return list(wanted)
        return fit_rows(wanted, max(len(wanted), self.max_num_tokens - int(reserve)))

    def chunk_room(self, decode_rows: int) -> int:
        """Prompt rows a step may add next to ``decode_rows`` decoding rows (0 without ``prefill_chunk``)."""
        room = self.prefill_chunk or 0
        return room if self.max_num_tokens is None else max(0, min(room, self.max_num_tokens - decode_rows))


def fit_rows(wanted: Sequence[int], max_num_tokens: int) -> list[int]:
    """Rows each running sequence (oldest first) computes this step: all it ``wanted`` when its
    drafts still fit, else 1 (its golden row; drafts dropped). See the module docstring.

    >>> fit_rows([12, 12, 12], max_num_tokens=36), fit_rows([12, 12, 12], max_num_tokens=20)
    ([12, 12, 12], [12, 1, 1])
    """
    if len(wanted) > max_num_tokens:
        raise ValueError(f"{len(wanted)} sequences cannot run in a budget of {max_num_tokens} rows")
    spare = max_num_tokens - len(wanted)
    rows: list[int] = []
    for want in wanted:
        drafts = max(0, int(want) - 1)
        if drafts <= spare:
            rows.append(1 + drafts)
            spare -= drafts
        else:
            rows.append(1)
    return rows



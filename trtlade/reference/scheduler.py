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
    sequence's full step always fits)."""

    max_batch_size: int = 8
    max_num_tokens: Optional[int] = None

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_num_tokens is not None and self.max_num_tokens < self.max_batch_size:
            raise ValueError(f"max_num_tokens ({self.max_num_tokens}) must be >= max_batch_size "
                             f"({self.max_batch_size}): every running sequence needs its golden row")

    def rows(self, wanted: Sequence[int]) -> list[int]:
        return list(wanted) if self.max_num_tokens is None else fit_rows(wanted, self.max_num_tokens)


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



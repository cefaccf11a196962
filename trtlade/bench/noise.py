"""How far to trust a speedup: paired ratios over repeats, their noise, and a verdict. Pure functions.

Every comparison is paired: in each repeat, the modes run the same prompts back to back at the same
level (interleaved, the order alternating per repeat), so the ratio ``x / baseline`` of one repeat
compares like with like. The **noise** is the pooled sample standard deviation of those ratios
across repeats, over every compared cell (mode, level) of the run: how much a speedup moves between
two runs of the same thing. A mean speedup is a real difference only if it is more than
``Z * noise / sqrt(repeats)`` away from 1 (``Z = 2``, about a 95% interval for the mean of the
repeats); otherwise it is **within noise**. With one repeat there is no noise estimate, and the
verdict says so.

Worked example: a mode 20% faster in three repeats, another that is the baseline itself::

    >>> fast = speedup([100, 104, 98], [121, 123, 119])
    >>> same = speedup([100, 104, 98], [103, 99, 100])
    >>> round(pooled_sd([fast.ratios, same.ratios]), 4)
    0.0325
    >>> t = threshold(pooled_sd([fast.ratios, same.ratios]), 3)
    >>> round(t, 4), verdict(fast.mean, t), verdict(same.mean, t)
    (0.0375, 'faster', 'within noise')
    >>> verdict(1.2, None)
    'one sample'
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

__all__ = ["Z", "Speedup", "speedup", "pooled_sd", "threshold", "verdict", "spread"]

#: How many standard errors a mean speedup must clear to be called faster or slower.
Z = 2.0


@dataclass(frozen=True)
class Speedup:
    """Paired ratios ``x / baseline`` of one cell, one per repeat, and their mean, min and max."""

    ratios: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ratios) if self.ratios else float("nan")

    @property
    def lo(self) -> float:
        return min(self.ratios) if self.ratios else float("nan")

    @property
    def hi(self) -> float:
        return max(self.ratios) if self.ratios else float("nan")


def speedup(baseline: Sequence[Optional[float]], values: Sequence[Optional[float]]) -> Speedup:
    """Pair repeat i of ``values`` with repeat i of ``baseline`` (repeats missing on either side,
    or a zero baseline, are left out)."""
    return Speedup(tuple(v / b for b, v in zip(baseline, values) if b and v is not None))


def pooled_sd(groups: Iterable[Sequence[float]]) -> float:
    """Pooled sample standard deviation of several groups (0.0 when no group has two values).

    >>> pooled_sd([[1.0, 1.2], [2.0, 2.2, 2.4]]), pooled_sd([[1.0]])
    (0.18257418583505533, 0.0)
    """
    num, dof = 0.0, 0
    for values in groups:
        values = list(values)
        if len(values) >= 2:
            mean = statistics.fmean(values)
            num += sum((v - mean) ** 2 for v in values)
            dof += len(values) - 1
    return math.sqrt(num / dof) if dof else 0.0


def threshold(noise: float, repeats: int) -> Optional[float]:
    """How far from 1 a mean speedup must be to be real: ``Z * noise / sqrt(repeats)`` (None with
    one repeat: nothing measured the noise)."""
    if repeats < 2:
        return None
    return Z * noise / math.sqrt(repeats)


def verdict(mean: float, margin: Optional[float]) -> str:
    """``"faster"``, ``"slower"``, ``"within noise"`` (``|mean - 1| <= margin``) or ``"one sample"``."""
    if margin is None or math.isnan(mean):
        return "one sample"
    if mean > 1.0 + margin:
        return "faster"
    if mean < 1.0 - margin:
        return "slower"
    return "within noise"


def spread(values: Sequence[Optional[float]]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """(mean, min, max) of the values measured (None for all three when there are none).

    >>> spread([10.0, None, 14.0])
    (12.0, 10.0, 14.0)
    """
    got = [v for v in values if v is not None]
    if not got:
        return None, None, None
    return statistics.fmean(got), min(got), max(got)

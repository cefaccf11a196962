"""How far to trust a speedup: paired ratios over repeats, their noise, and a verdict. Pure functions.

Every comparison is paired: in each repeat, the modes run the same prompts back to back at the same
level (interleaved, the order rotated each repeat), so the ratio ``x / baseline`` of one repeat
compares like with like. A cell (mode, level) has k such ratios. Its **margin** is how far from 1 its
mean must be to be a real difference: the half-width of the two-sided 95% Student t interval of that
mean, ``t(0.975, dof) * sd / sqrt(k)`` (:func:`margin`), where ``sd`` is the larger of

- the level's **pooled** standard deviation of the ratios of every compared mode at that level, and
- the cell's **own** standard deviation, so that a mode whose repeats scattered more than its
  neighbours' is not judged by their steadiness,

and ``dof`` the level's pooled degrees of freedom: modes measured at one load share most of their noise, and
the pooled degrees of freedom buy the power to see a change in few repeats. The trade, simulated (four modes,
three repeats, each ratio's noise 5%): a mode equal to its baseline is called different in about 4% of runs
where the modes' noise is alike, and in about 13% where the judged mode's noise is three times the others';
a real 10% change is seen in 78% of runs (45% had each cell been judged on its own k - 1 degrees of freedom;
at two repeats, ``trtlade tune``'s default, 48% against 17%).

A cell with fewer than two ratios (one repeat, or a repeat whose baseline failed) has no margin: its
verdict is **one sample**. A chooser that takes the best of several candidates (``trtlade tune``) asks
each for ``comparisons`` times the confidence (Bonferroni), so that the best of six equal candidates
does not clear the bar by luck.

Worked example: a mode 20% faster in three repeats, another that is the baseline itself::

    >>> fast = speedup([100, 104, 98], [121, 123, 119])
    >>> same = speedup([100, 104, 98], [103, 99, 100])
    >>> level = pooled([fast.ratios, same.ratios])
    >>> round(level.sd, 4), level.dof
    (0.0325, 4)
    >>> m_fast, m_same = margin(fast.ratios, level), margin(same.ratios, level)
    >>> round(m_fast, 4), round(m_same, 4)    # t(0.975, 4) = 2.776 times the pooled sd; same's own is larger
    (0.052, 0.0683)
    >>> verdict(fast.mean, m_fast), verdict(same.mean, m_same)
    ('faster', 'within noise')
    >>> verdict(1.2, margin([1.2], level))
    'one sample'
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

__all__ = ["CONFIDENCE", "Noise", "Speedup", "speedup", "pooled", "t_quantile", "margin", "unpaired", "verdict",
           "spread"]

#: The two-sided confidence a change must have to be called higher or lower.
CONFIDENCE = 0.95


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


@dataclass(frozen=True)
class Noise:
    """A standard deviation of paired ratios and its degrees of freedom (0: nothing measured it)."""

    sd: float
    dof: int


def speedup(baseline: Sequence[Optional[float]], values: Sequence[Optional[float]]) -> Speedup:
    """Pair repeat i of ``values`` with repeat i of ``baseline`` (repeats missing on either side,
    or a zero baseline, are left out)."""
    return Speedup(tuple(v / b for b, v in zip(baseline, values) if b and v is not None))


def pooled(groups: Iterable[Sequence[float]]) -> Noise:
    """Pooled sample standard deviation of several groups, with its degrees of freedom (the sum of each
    group's size less one; groups of one value add nothing).

    >>> pooled([[1.0, 1.2], [2.0, 2.2, 2.4]]), pooled([[1.0]])
    (Noise(sd=0.18257418583505533, dof=3), Noise(sd=0.0, dof=0))
    """
    num, dof = 0.0, 0
    for values in groups:
        values = list(values)
        if len(values) >= 2:
            mean = statistics.fmean(values)
            num += sum((v - mean) ** 2 for v in values)
            dof += len(values) - 1
    return Noise(math.sqrt(num / dof) if dof else 0.0, dof)


def _two_sided_cdf(theta: float, dof: int) -> float:
    """P(|T| <= sqrt(dof) * tan(theta)) for Student's t with a whole number of degrees of freedom, in closed
    form (Abramowitz & Stegun 26.7.3 and 26.7.4)."""
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2:  # odd: (2/pi) * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), dof - 3 terms over 2
        term, total = 1.0, 1.0
        for j in range(1, (dof - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            total += term
        return 2 / math.pi * (theta + (s * math.cos(theta) * total if dof > 1 else 0.0))
    term, total = 1.0, 1.0  # even: sin * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), dof - 2 terms over 2
    for j in range(1, dof // 2):
        term *= c2 * (2 * j - 1) / (2 * j)
        total += term
    return s * total


def t_quantile(dof: int, confidence: float = CONFIDENCE) -> float:
    """The t with P(|T| <= t) = ``confidence`` for Student's t with ``dof`` degrees of freedom (bisection on the
    closed-form distribution; the normal quantile above 1,000 degrees of freedom).

    >>> [round(t_quantile(d), 3) for d in (1, 2, 3, 4, 10, 30)]
    [12.706, 4.303, 3.182, 2.776, 2.228, 2.042]
    >>> round(t_quantile(4, 1 - 0.05 / 6), 3)    # the best of six candidates, each at 1 - 0.05/6
    4.851
    """
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof > 1000:
        return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    lo, hi = 0.0, math.pi / 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _two_sided_cdf(mid, dof) < confidence else (lo, mid)
    return math.sqrt(dof) * math.tan((lo + hi) / 2)


def margin(ratios: Sequence[float], level: Noise, comparisons: int = 1) -> Optional[float]:
    """How far from 1 the mean of ``ratios`` must be to be real: ``t * sd / sqrt(k)`` with ``sd`` the larger of
    the level's pooled noise and the cell's own, ``t`` the Student t quantile at the level's degrees of freedom
    (at least the cell's own) and at ``CONFIDENCE`` shared over ``comparisons`` candidates (Bonferroni). None
    with fewer than two ratios: nothing measured the noise.

    >>> level = Noise(sd=0.02, dof=8)
    >>> round(margin([1.10, 1.12, 1.11], level), 4)   # steadier than the level: the level's sd, t(0.975, 8)
    0.0266
    >>> round(margin([1.00, 1.30, 1.15], level), 4)   # more scattered: its own sd, still t(0.975, 8)
    0.1997
    >>> round(margin([1.10, 1.12, 1.11], level, comparisons=6), 4)   # the best of six: t(1 - 0.025/6, 8)
    0.0402
    >>> margin([1.2], level) is None
    True
    """
    k = len(ratios)
    if k < 2:
        return None
    confidence = 1 - (1 - CONFIDENCE) / max(1, comparisons)
    sd = max(statistics.stdev(ratios), level.sd)
    return t_quantile(max(level.dof, k - 1), confidence) * sd / math.sqrt(k)


def unpaired(baseline: Sequence[float], values: Sequence[float]) -> tuple[float, Optional[float]]:
    """Two runs measured apart (``trtlade report compare``): nothing pairs their repeats, so the ratio of their means
    is judged by Welch's t interval of the difference of means (degrees of freedom by Welch-Satterthwaite, rounded
    down), relative to the baseline's mean. Returns (ratio, margin); the margin is None when either side has one
    repeat.

    >>> ratio, m = unpaired([100, 130, 115], [128, 104, 121])   # overlapping repeats: +2.3% is no verdict
    >>> round(ratio, 3), round(m, 3), verdict(ratio, m)
    (1.023, 0.31, 'within noise')
    >>> unpaired([100], [120])
    (1.2, None)
    """
    a, b = list(baseline), list(values)
    ratio = statistics.fmean(b) / statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return ratio, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return ratio, 0.0
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0.0) + (vb ** 2 / (len(b) - 1) if vb else 0.0))
    return ratio, t_quantile(max(1, int(dof))) * math.sqrt(va + vb) / statistics.fmean(a)


def verdict(mean: float, margin: Optional[float]) -> str:
    """``"faster"``, ``"slower"``, ``"within noise"`` (``|mean - 1| <= margin``, less a rounding error's worth of
    1e-9: two runs whose repeats are identical are no difference) or ``"one sample"``.

    >>> verdict(1.0000000000000002, 0.0), verdict(1.01, 0.0)
    ('within noise', 'faster')
    """
    if margin is None or math.isnan(mean):
        return "one sample"
    if mean > 1.0 + margin + _EPS:
        return "faster"
    if mean < 1.0 - margin - _EPS:
        return "slower"
    return "within noise"


#: a difference of ratios below this is the floating point's, not the measurement's
_EPS = 1e-9


def spread(values: Sequence[Optional[float]]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """(mean, min, max) of the values measured (None for all three when there are none).

    >>> spread([10.0, None, 14.0])
    (12.0, 10.0, 14.0)
    """
    got = [v for v in values if v is not None]
    if not got:
        return None, None, None
    return statistics.fmean(got), min(got), max(got)

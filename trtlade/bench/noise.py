"""How far to trust a speedup: paired ratios over repeats, their noise, and a verdict. Pure functions.

Every comparison is paired: in each repeat, the modes run the same prompts back to back at the same
level (interleaved, the order rotated each repeat), so the ratio ``x / baseline`` of one repeat
compares like with like. A cell (mode, level) has k such ratios, judged on the log scale, where a ratio and
its inverse are the same distance from 1 and a run's noise is a share of its throughput: its **change** is the
geometric mean of its ratios, and its **margin** how far from 1 that must be to be a real difference, the
half-width of the two-sided 95% Student t interval of the mean log ratio, ``t(0.975, dof) * sd / sqrt(k)``
(:func:`margin`), put back on the ratio scale on the change's side. ``sd`` and ``dof`` are

- the level's **pooled** noise (:func:`pooled`): the runs of every mode compared at the level, the baseline's
  among them, read as one randomized block design (modes by repeats, each repeat a block), so that the
  baseline's run, which every ratio of a repeat shares, is counted once; with its (modes - 1)(repeats - 1)
  degrees of freedom, or
- the cell's **own** standard deviation of its log ratios with its k - 1 degrees of freedom, where it is the
  larger: a mode whose repeats scattered more than its neighbours' is judged on its own scatter alone.

The rule, simulated (four modes and the baseline, three repeats, each run's throughput with 3.5% noise of its
own, so a ratio's about 5%; tests/test_bench_report.py): a mode equal to its baseline is called different in
about 3% of runs where every run's noise is alike, 6-7% where the judged mode's or the baseline's noise is three
times the others'; a real 10% change is seen in about 54% of runs. Judging the ratios' plain mean at the pooled
degrees of freedom whichever sd is larger, each mode's ratios pooled as if they shared no baseline, would see 75%
of those changes but call the noisier modes different in 11-13% of runs.

A cell with fewer than two ratios (one repeat, or a repeat whose baseline failed) has no margin: its
verdict is **one sample**. A run whose throughput is 0 (every request failed) has no ratio: the report
counts its failures. A chooser that takes the best of several candidates (``trtlade tune``) asks
each for ``comparisons`` times the confidence (Bonferroni), so that the best of six equal candidates
does not clear the bar by luck, and takes a cell's own noise only where it is larger than the other cells' beyond
chance (``others``, an F test): at two repeats its one degree of freedom would keep a third of the specs 30%
faster out (``benchmarks/choice_rates.py``).

Worked example: a mode 20% faster in three repeats, another that is the baseline itself::

    >>> fast = speedup([100, 104, 98], [121, 123, 119])
    >>> same = speedup([100, 104, 98], [103, 99, 100])
    >>> level = pooled([fast.ratios, same.ratios])
    >>> round(level.sd, 4), level.dof
    (0.0312, 4)
    >>> round(fast.mean, 4), round(margin(fast.ratios, level), 4)  # the pooled sd, t(0.975, 4) = 2.776
    (1.2022, 0.0513)
    >>> round(same.mean, 4), round(margin(same.ratios, level), 4)  # its own sd, larger, t(0.975, 2) = 4.303
    (1.0002, 0.1129)
    >>> verdict(fast.mean, margin(fast.ratios, level)), verdict(same.mean, margin(same.ratios, level))
    ('faster', 'within noise')
    >>> verdict(1.2, margin([1.2], level))
    'one sample'
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

__all__ = ["CONFIDENCE", "Noise", "Speedup", "speedup", "pooled", "combined", "geometric_mean", "t_quantile",
           "f_quantile", "margin", "difference_margin", "unpaired", "verdict", "spread"]

#: The two-sided confidence a change must have to be called higher or lower.
CONFIDENCE = 0.95


def geometric_mean(ratios: Sequence[float]) -> float:
    """The mean of ``ratios`` on the log scale (nan without any, or with one that is not positive).

    >>> geometric_mean([1.25, 0.8]), round(geometric_mean([1.1, 1.2, 1.3]), 4)
    (1.0, 1.1972)
    """
    if not ratios or min(ratios) <= 0:
        return float("nan")
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


@dataclass(frozen=True)
class Speedup:
    """Paired ratios ``x / baseline`` of one cell, one per repeat it was measured in (``repeats``: which), and their
    geometric mean, min and max."""

    ratios: tuple[float, ...]
    repeats: tuple[int, ...] = ()

    @property
    def mean(self) -> float:
        return geometric_mean(self.ratios)

    @property
    def lo(self) -> float:
        return min(self.ratios) if self.ratios else float("nan")

    @property
    def hi(self) -> float:
        return max(self.ratios) if self.ratios else float("nan")


@dataclass(frozen=True)
class Noise:
    """The standard deviation of one repeat's log ratio and its degrees of freedom (0: nothing measured it)."""

    sd: float
    dof: int


def speedup(baseline: Sequence[Optional[float]], values: Sequence[Optional[float]]) -> Speedup:
    """Pair repeat i of ``values`` with repeat i of ``baseline`` (repeats missing or 0 on either side are left
    out: a throughput of 0 is a run whose every request failed).

    >>> speedup([100, 100, None, 100], [110, 0, 120, 90])
    Speedup(ratios=(1.1, 0.9), repeats=(0, 3))
    """
    kept = [(i, v / b) for i, (b, v) in enumerate(zip(baseline, values)) if b and v]
    return Speedup(tuple(r for _, r in kept), tuple(i for i, _ in kept))


def pooled(groups: Iterable[Union[Speedup, Sequence[float]]]) -> Noise:
    """The noise of a log ratio at one level, from its cells' paired ratios (a :class:`Speedup`, whose repeats say
    which; or a sequence, one ratio per repeat in order). The cells measured in the same repeats as the fullest
    (all positive) and the baseline are read as one randomized block design on log throughput, modes by repeats:
    its residual variance ``s2`` has (modes - 1)(repeats - 1) degrees of freedom, modes counting the baseline, and
    a log ratio, the difference of two modes' runs, has variance ``2 s2``. Cells measured in other repeats are
    judged on their own (:func:`margin`).

    One mode against the baseline: its log ratios' own standard deviation. Two modes whose runs move together,
    as they do when the baseline's run was the odd one: little noise, the baseline's shared part counted once.

    >>> one = pooled([[1.1, 1.2, 1.3]])
    >>> round(one.sd, 4), one.dof, round(statistics.stdev(math.log(r) for r in (1.1, 1.2, 1.3)), 4)
    (0.0836, 2, 0.0836)
    >>> pooled([[1.1, 1.2, 1.3], [1.0, 1.09, 1.18]]).dof, pooled([[1.0]])
    (4, Noise(sd=0.0, dof=0))
    >>> pooled([Speedup((1.1, 1.2, 1.3), (0, 1, 2)), Speedup((1.0, 1.1), (0, 2)), Speedup((1.2, 1.1), (1, 2))]).dof
    2
    """
    cells = [_by_repeat(g) for g in groups]
    cells = [c for c in cells if len(c) >= 2 and min(c.values()) > 0]
    if not cells:
        return Noise(0.0, 0)
    keys = sorted(max(cells, key=len))
    rows = [[math.log(c[i]) for i in keys] for c in cells if sorted(c) == keys]
    k = len(keys)
    rows.append([0.0] * k)  # the baseline: its own log ratio, 0 in every repeat
    grand = statistics.fmean(v for r in rows for v in r)
    row_means = [statistics.fmean(r) for r in rows]
    col_means = [statistics.fmean(r[i] for r in rows) for i in range(k)]
    residual = sum((r[i] - rm - col_means[i] + grand) ** 2 for r, rm in zip(rows, row_means) for i in range(k))
    dof = (len(rows) - 1) * (k - 1)
    return Noise(math.sqrt(2 * residual / dof), dof)


def _by_repeat(group: Union[Speedup, Sequence[float]]) -> dict[int, float]:
    if isinstance(group, Speedup):
        return dict(zip(group.repeats or range(len(group.ratios)), group.ratios))
    return dict(enumerate(group))


def combined(levels: Iterable[Noise]) -> Noise:
    """Several levels' noise as one (their variances weighted by their degrees of freedom).

    >>> noise = combined([Noise(0.02, 4), Noise(0.04, 4), Noise(0.0, 0)])
    >>> round(noise.sd, 4), noise.dof
    (0.0316, 8)
    """
    levels = [n for n in levels if n.dof]
    dof = sum(n.dof for n in levels)
    return Noise(math.sqrt(sum(n.sd ** 2 * n.dof for n in levels) / dof), dof) if dof else Noise(0.0, 0)


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


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function I_x(a, b) (DLMF 8.17.22), evaluated by
    the modified Lentz method; it converges fast for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 / (1.0 - (a + b) * x / (a + 1) or tiny)
    value = d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for term in (even, odd):
            d = 1.0 / (1.0 + term * d or tiny)
            c = 1.0 + term / c or tiny
            value *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return value


def _f_cdf(x: float, d1: int, d2: int) -> float:
    """P(F <= x) for Snedecor's F with (d1, d2) degrees of freedom: I_{d1 x / (d1 x + d2)}(d1 / 2, d2 / 2)."""
    if x <= 0:
        return 0.0
    a, b, y = d1 / 2, d2 / 2, d1 * x / (d1 * x + d2)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(y) + b * math.log1p(-y))
    if y < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, y) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - y) / b


def f_quantile(d1: int, d2: int, confidence: float = CONFIDENCE) -> float:
    """The x with P(F <= x) = ``confidence`` for Snedecor's F with (d1, d2) degrees of freedom (bisection).

    >>> [round(f_quantile(*d), 3) for d in ((1, 6), (2, 12), (1, 1), (3, 10))]
    [5.987, 3.885, 161.448, 3.708]
    """
    if d1 < 1 or d2 < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got ({d1}, {d2})")
    lo, hi = 0.0, 1.0
    while _f_cdf(hi, d1, d2) < confidence:
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _f_cdf(mid, d1, d2) < confidence else (lo, mid)
    return (lo + hi) / 2


def margin(ratios: Sequence[float], level: Noise, comparisons: int = 1,
           above: Optional[bool] = None, others: Optional[Noise] = None) -> Optional[float]:
    """How far from 1 the geometric mean of ``ratios`` must be to be real: ``t * sd / sqrt(k)`` on the log scale,
    with ``sd`` and ``t``'s degrees of freedom the level's pooled noise, or the cell's own (k - 1 degrees of
    freedom) where that is larger, at ``CONFIDENCE`` shared over ``comparisons`` candidates (Bonferroni); given
    back on the ratio scale on the side of the change (``exp(h) - 1`` above 1, ``1 - exp(-h)`` below), so that
    the change is beyond it exactly when its verdict is (``above``: that side whatever the change's; a threshold
    to clear, one-sided: all the error on that side). None with fewer than two ratios: nothing measured the noise.
    ``others``: the level's noise without this cell; given, the cell's own sd replaces the level's only where it is
    larger than theirs beyond chance (its variance over theirs above the 95% quantile of F(k - 1, their dof)): a
    chooser's rule, which keeps a spec's one degree of freedom of its own from vetoing a real speedup
    (``trtlade tune``).

    >>> level = Noise(sd=0.02, dof=8)
    >>> round(margin([1.10, 1.12, 1.11], level), 4)   # steadier than the level: the level's sd, t(0.975, 8)
    0.027
    >>> round(margin([1.00, 1.30, 1.15], level), 4)   # more scattered: its own sd, t(0.975, 2)
    0.3856
    >>> round(margin([0.90, 0.89, 0.91], level), 4)   # a slowdown: the interval's lower side
    0.0263
    >>> round(margin([0.90, 0.89, 0.91], level, above=True), 4)   # to clear to be faster: one-sided, t(0.95, 8)
    0.0217
    >>> round(margin([1.10, 1.12, 1.11], level, comparisons=6), 4)   # the best of six: t(1 - 0.025/6, 8)
    0.041
    >>> round(margin([1.00, 1.30, 1.15], level, others=level), 4)   # 7x the others' sd: beyond chance, its own
    0.3856
    >>> round(margin([1.26, 1.34], level, above=True), 4)   # 2.2x the level's sd: its own, t(0.95, 1) = 6.314
    0.2145
    >>> round(margin([1.26, 1.34], level, above=True, others=level), 4)   # 2.2x on 1 dof is within chance
    0.0266
    >>> margin([1.2], level) is None
    True
    """
    k = len(ratios)
    if k < 2 or min(ratios) <= 0:
        return None
    # a verdict (higher / lower) is a two-sided question; a threshold to clear on one side (``above``: is it
    # faster?) a one-sided one, whose 5% all lies on that side (t_quantile takes a two-sided confidence)
    error = (1 - CONFIDENCE) / max(1, comparisons)
    confidence = 1 - (2 * error if above is not None else error)
    logs = [math.log(r) for r in ratios]
    own = statistics.stdev(logs)
    sd, dof = (own, k - 1) if _own_is_larger(own, k - 1, level, others) else (level.sd, level.dof)
    half = t_quantile(dof, confidence) * sd / math.sqrt(k)
    up = statistics.fmean(logs) >= 0 if above is None else above
    return math.expm1(half) if up else -math.expm1(-half)


def _own_is_larger(own: float, dof: int, level: Noise, others: Optional[Noise]) -> bool:
    if not level.dof:  # nothing measured the level: the cell's own
        return True
    if others is None or not others.dof or others.sd == 0:  # nothing to test against: the larger
        return own > level.sd
    return own > level.sd and (own / others.sd) ** 2 > f_quantile(dof, others.dof)


def difference_margin(differences: Sequence[float], comparisons: int = 1) -> Optional[float]:
    """The half-width of the 95% Student t interval of the mean of paired ``differences`` (one per repeat), on their
    own k - 1 degrees of freedom; None with fewer than two.

    >>> round(difference_margin([0.02, -0.01, 0.04]), 4)   # t(0.975, 2) = 4.303 times sd / sqrt(3)
    0.0625
    """
    k = len(differences)
    if k < 2:
        return None
    confidence = 1 - (1 - CONFIDENCE) / max(1, comparisons)
    return t_quantile(k - 1, confidence) * statistics.stdev(differences) / math.sqrt(k)


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

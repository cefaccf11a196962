"""The choice per concurrency: the spec that delivers the most output throughput, if it beats plain
decoding by more than the noise, under optional latency limits. Pure functions of measurements.

Measurements are paired: at each (concurrency, repeat) every candidate runs the same prompts, one
after another, so the ratio ``throughput(spec) / throughput(1,1,0)`` of one repeat compares like with
like. The **noise** of a level is the pooled standard deviation of those ratios across repeats (every spec
at that level): how much a speedup moves between two runs of the same thing. A spec is chosen only
if its mean speedup exceeds 1 by more than ``z * noise / sqrt(repeats)`` (``z = 2``) at its level: a
spec that does not beat plain decoding beyond the noise is not picked, and (1,1,0) is. The same
rule gives the verdicts of ``trtlade bench --repeats`` (:mod:`trtlade.bench.noise`).

Worked example (two repeats; at C=1 (2,2,1) is 20% faster, at C=8 it is 1% faster, within noise)::

    >>> from trtlade.spec import LookaheadSpec as S
    >>> ar, la = S(1, 1, 0), S(2, 2, 1)
    >>> runs = [Run(ar, 1, 0, 20.0, 90, 50), Run(la, 1, 0, 24.0, 90, 40), Run(ar, 1, 1, 21.0, 90, 50),
    ...         Run(la, 1, 1, 25.4, 90, 40), Run(ar, 8, 0, 100.0, 300, 80), Run(la, 8, 0, 102.0, 300, 79),
    ...         Run(ar, 8, 1, 104.0, 300, 80), Run(la, 8, 1, 104.0, 300, 80)]
    >>> t = tabulate(runs)
    >>> round(t.noise, 4)
    0.0111
    >>> [(c.concurrency, str(c.spec), round(c.speedup, 3)) for c in choose(t)]
    [(1, '2,2,1', 1.205), (8, '1,1,0', 1.0)]
    >>> str(schedule_of(choose(t)))
    '<=1: 2,2,1; else: 1,1,0'
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from trtlade.bench.noise import Z, pooled_sd, threshold
from trtlade.schedule import LookaheadSchedule, bands_in_order
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec

__all__ = ["Run", "Cell", "Table", "Choice", "tabulate", "choose", "schedule_of", "Z"]


@dataclass(frozen=True)
class Run:
    """One measured run: ``spec`` at ``concurrency`` in ``repeat``, with what the server delivered
    (``output_throughput`` tok/s) and the medians of TTFT and TPOT (ms; None if not measured)."""

    spec: LookaheadSpec
    concurrency: int
    repeat: int
    output_throughput: float
    median_ttft_ms: Optional[float]
    median_tpot_ms: Optional[float]


@dataclass
class Cell:
    """One (spec, concurrency): its runs and its speedups over (1,1,0) in the same repeats."""

    spec: LookaheadSpec
    concurrency: int
    throughput: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)

    @property
    def mean_throughput(self) -> float:
        return statistics.fmean(self.throughput) if self.throughput else 0.0

    @property
    def speedup(self) -> float:
        return statistics.fmean(self.ratios) if self.ratios else float("nan")

    @property
    def ttft(self) -> Optional[float]:
        return statistics.fmean(self.ttft_ms) if self.ttft_ms else None

    @property
    def tpot(self) -> Optional[float]:
        return statistics.fmean(self.tpot_ms) if self.tpot_ms else None


@dataclass
class Table:
    """Every cell, the levels and specs in order, and the noise of a speedup (relative, one run)."""

    cells: dict[tuple[LookaheadSpec, int], Cell]
    specs: list[LookaheadSpec]
    levels: list[int]
    repeats: int
    noise: float
    #: the noise of each level alone (pooled over the specs at that level): a busy level is noisier
    noise_by_level: dict[int, float] = field(default_factory=dict)

    def cell(self, spec: LookaheadSpec, concurrency: int) -> Optional[Cell]:
        return self.cells.get((spec, concurrency))

    def threshold(self, level: Optional[int] = None) -> float:
        """The speedup a spec must exceed to be chosen at ``level``: ``1 + Z * noise / sqrt(repeats)``
        with that level's noise (None: the noise of all levels pooled), the rule of the bench's
        verdicts (:mod:`trtlade.bench.noise`); one repeat: 1.0."""
        noise = self.noise if level is None else self.noise_by_level.get(level, self.noise)
        return 1.0 + (threshold(noise, self.repeats) or 0.0)


def tabulate(runs: Iterable[Run]) -> Table:
    """Group runs into cells, pair each with (1,1,0)'s run of the same (concurrency, repeat), and
    estimate the noise. Runs of (1,1,0) are required (every comparison is against them)."""
    runs = list(runs)
    base = {(r.concurrency, r.repeat): r.output_throughput for r in runs if r.spec == AUTOREGRESSIVE}
    if not base:
        raise ValueError("no (1,1,0) runs: every speedup is measured against plain decoding")
    cells: dict[tuple[LookaheadSpec, int], Cell] = {}
    specs: list[LookaheadSpec] = []
    levels: list[int] = []
    for r in runs:
        cell = cells.setdefault((r.spec, r.concurrency), Cell(r.spec, r.concurrency))
        specs += [r.spec] if r.spec not in specs else []
        levels += [r.concurrency] if r.concurrency not in levels else []
        cell.throughput.append(r.output_throughput)
        if r.median_ttft_ms is not None:
            cell.ttft_ms.append(r.median_ttft_ms)
        if r.median_tpot_ms is not None:
            cell.tpot_ms.append(r.median_tpot_ms)
        ar = base.get((r.concurrency, r.repeat))
        if ar:
            cell.ratios.append(r.output_throughput / ar)
    repeats = len({r.repeat for r in runs})
    compared = [c for c in cells.values() if c.spec != AUTOREGRESSIVE]
    by_level = {level: pooled_sd(c.ratios for c in compared if c.concurrency == level) for level in levels}
    return Table(cells, specs, sorted(levels), repeats, pooled_sd(c.ratios for c in compared), by_level)


@dataclass(frozen=True)
class Choice:
    """What ``concurrency`` gets, its speedup over (1,1,0), and why."""

    concurrency: int
    spec: LookaheadSpec
    speedup: float
    reason: str


def choose(table: Table, *, max_ttft_ms: Optional[float] = None, max_tpot_ms: Optional[float] = None) -> list[Choice]:
    """Per level: the fastest spec within the latency limits whose speedup clears the noise
    threshold, else (1,1,0)."""
    out: list[Choice] = []
    for level in table.levels:
        threshold = table.threshold(level)
        best: Optional[Cell] = None
        notes: list[str] = []
        for spec in table.specs:
            cell = table.cell(spec, level)
            if spec == AUTOREGRESSIVE or cell is None or not cell.ratios:
                continue
            if max_ttft_ms is not None and cell.ttft is not None and cell.ttft > max_ttft_ms:
                notes.append(f"{spec} over --max-ttft-ms")
                continue
            if max_tpot_ms is not None and cell.tpot is not None and cell.tpot > max_tpot_ms:
                notes.append(f"{spec} over --max-tpot-ms")
                continue
            if best is None or cell.mean_throughput > best.mean_throughput:
                best = cell
        if best is not None and best.speedup > threshold:
            out.append(Choice(level, best.spec, best.speedup,
                              f"fastest; {best.speedup:.3f}x clears the noise threshold {threshold:.3f}x"))
            continue
        why = (f"best lookahead ({best.spec}) at {best.speedup:.3f}x does not clear the noise threshold "
               f"{threshold:.3f}x" if best is not None else "no lookahead spec within the limits")
        out.append(Choice(level, AUTOREGRESSIVE, 1.0, "; ".join([why, *notes])))
    return out


def schedule_of(choices: Sequence[Choice]) -> LookaheadSchedule:
    """The schedule: each measured level's choice covers the loads above the level before it, up to
    itself (a load between two levels gets the higher level's choice, the busier one); the highest
    level's choice is open-ended."""
    ordered = sorted(choices, key=lambda c: c.concurrency)
    items = [(c.concurrency, c.spec) for c in ordered[:-1]] + [(None, ordered[-1].spec)]
    return bands_in_order(items)

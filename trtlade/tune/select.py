"""The choice per concurrency: the spec that delivers the most output throughput, if it beats plain
decoding by more than the noise, under optional latency limits. Pure functions of measurements.

Measurements are paired: at each (concurrency, repeat) every candidate runs the same prompts, one
after another, so the ratio ``throughput(spec) / throughput(1,1,0)`` of one repeat compares like with
like. A spec is chosen at a level only if its mean speedup exceeds 1 by more than its margin: the rule of
``trtlade bench --repeats`` (:func:`trtlade.bench.noise.margin`: a Student t bound from the level's pooled noise,
or the cell's own where an F test says it is larger than the other cells' beyond chance, one-sided at 95%, since
a spec is chosen only for being faster), with the confidence shared over the level's candidates (Bonferroni):
picking the best of six candidates equal to (1,1,0) must not clear the bar by luck. A cell's own noise at two
repeats has one degree of freedom: taken whenever it was larger, as ``bench``'s verdicts take it, it set a bar of
2x or more on specs 30% faster and kept a third of them out. Among the specs that clear it, the one with the
largest mean speedup wins; none, or one repeat (no noise measured): (1,1,0).

Worked example (two repeats; at C=1 (2,2,1) is 20% faster, at C=8 it is 1% faster, within noise)::

    >>> from trtlade.spec import LookaheadSpec as S
    >>> ar, la = S(1, 1, 0), S(2, 2, 1)
    >>> runs = [Run(ar, 1, 0, 20.0, 90, 50), Run(la, 1, 0, 24.0, 90, 40), Run(ar, 1, 1, 21.0, 90, 50),
    ...         Run(la, 1, 1, 25.4, 90, 40), Run(ar, 8, 0, 100.0, 300, 80), Run(la, 8, 0, 102.0, 300, 79),
    ...         Run(ar, 8, 1, 104.0, 300, 80), Run(la, 8, 1, 104.0, 300, 80)]
    >>> t = tabulate(runs)
    >>> round(t.noise.sd, 4), t.noise.dof
    (0.0107, 2)
    >>> [(c.concurrency, str(c.spec), round(c.speedup, 3)) for c in choose(t)]
    [(1, '2,2,1', 1.205), (8, '1,1,0', 1.0)]
    >>> str(schedule_of(choose(t)))
    '<=1: 2,2,1; else: 1,1,0'
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from trtlade.bench.noise import CONFIDENCE, Noise, combined, geometric_mean, margin, pooled
from trtlade.schedule import LookaheadSchedule, bands_in_order
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec
from trtlade.tune.candidates import Candidate, Drafter

__all__ = ["Run", "Cell", "Table", "Choice", "PytorchChoice", "tabulate", "choose", "schedule_of",
           "speculative_config_of", "is_lookahead", "is_drafter"]


def is_lookahead(candidate: Candidate) -> bool:
    """A lookahead (w,n,g), plain decoding's (1,1,0) included (a TensorRT-LLM engine's schedule)."""
    return isinstance(candidate, LookaheadSpec)


def is_drafter(candidate: Candidate) -> bool:
    """An NGram / SA drafter (TensorRT-LLM's PyTorch backend)."""
    return isinstance(candidate, Drafter)


@dataclass(frozen=True)
class Run:
    """One measured run: ``spec`` at ``concurrency`` in ``repeat``, with what the server delivered
    (``output_throughput`` tok/s, completed requests only), the medians of TTFT and TPOT (ms; None if not
    measured) and how many of its requests failed."""

    spec: Candidate
    concurrency: int
    repeat: int
    output_throughput: float
    median_ttft_ms: Optional[float]
    median_tpot_ms: Optional[float]
    failed: int = 0


@dataclass
class Cell:
    """One (spec, concurrency): its runs and its speedups over (1,1,0) in the same repeats."""

    spec: Candidate
    concurrency: int
    throughput: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    #: requests that failed in its runs (a cell with any is never chosen: its throughput counts the others only)
    failed: int = 0

    @property
    def mean_throughput(self) -> float:
        return statistics.fmean(self.throughput) if self.throughput else 0.0

    @property
    def speedup(self) -> float:
        """The geometric mean of the paired ratios (:func:`~trtlade.bench.noise.geometric_mean`)."""
        return geometric_mean(self.ratios)

    @property
    def ttft(self) -> Optional[float]:
        return statistics.fmean(self.ttft_ms) if self.ttft_ms else None

    @property
    def tpot(self) -> Optional[float]:
        return statistics.fmean(self.tpot_ms) if self.tpot_ms else None


@dataclass
class Table:
    """Every cell, the levels and specs in order, and the noise of a speedup (relative, one run)."""

    cells: dict[tuple[Candidate, int], Cell]
    specs: list[Candidate]
    levels: list[int]
    repeats: int
    #: the noise of every level pooled (for the report)
    noise: Noise
    #: the noise of each level alone (pooled over the specs at that level): a busy level is noisier
    noise_by_level: dict[int, Noise] = field(default_factory=dict)

    def cell(self, spec: Candidate, concurrency: int) -> Optional[Cell]:
        return self.cells.get((spec, concurrency))

    def comparisons(self, level: int, only: Optional[Callable[[Candidate], bool]] = None) -> int:
        """The candidates a choice at ``level`` takes the best of (the Bonferroni count): those measured against
        (1,1,0) there that ``only`` admits, none of whose requests failed; latency limits do not change it (a
        stable, conservative bar)."""
        return sum(1 for (spec, lv), cell in self.cells.items() if lv == level and spec != AUTOREGRESSIVE
                   and cell.ratios and not cell.failed and (only is None or only(spec)))

    def noise_without(self, cell: Cell) -> Noise:
        """The noise of ``cell``'s level from the other cells compared there (what its own is tested against)."""
        return pooled(c.ratios for c in _compared(self.cells.values()) if c.concurrency == cell.concurrency
                      and c is not cell)

    def threshold(self, cell: Cell, comparisons: int = 1) -> Optional[float]:
        """The speedup ``cell`` must exceed to be chosen: 1 + its margin at its level's noise (its own where larger
        than the others' beyond chance), the confidence shared over ``comparisons`` candidates
        (:func:`~trtlade.bench.noise.margin`, one-sided); None with fewer than two paired repeats (nothing measured
        its noise: it is not chosen)."""
        level = self.noise_by_level.get(cell.concurrency, Noise(0.0, 0))
        m = margin(cell.ratios, level, comparisons, above=True, others=self.noise_without(cell))
        return None if m is None else 1.0 + m


def tabulate(runs: Iterable[Run]) -> Table:
    """Group runs into cells, pair each with (1,1,0)'s run of the same (concurrency, repeat), and
    estimate the noise. Runs of (1,1,0) are required (every comparison is against them)."""
    runs = list(runs)
    base = {(r.concurrency, r.repeat): r.output_throughput for r in runs if r.spec == AUTOREGRESSIVE}
    if not base:
        raise ValueError("no (1,1,0) runs: every speedup is measured against plain decoding")
    cells: dict[tuple[Candidate, int], Cell] = {}
    specs: list[Candidate] = []
    levels: list[int] = []
    for r in runs:
        cell = cells.setdefault((r.spec, r.concurrency), Cell(r.spec, r.concurrency))
        specs += [r.spec] if r.spec not in specs else []
        levels += [r.concurrency] if r.concurrency not in levels else []
        cell.throughput.append(r.output_throughput)
        cell.failed += r.failed
        if r.median_ttft_ms is not None:
            cell.ttft_ms.append(r.median_ttft_ms)
        if r.median_tpot_ms is not None:
            cell.tpot_ms.append(r.median_tpot_ms)
        ar = base.get((r.concurrency, r.repeat))
        if ar and r.output_throughput > 0:  # a run whose every request failed has no ratio (its failures count)
            cell.ratios.append(r.output_throughput / ar)
    repeats = len({r.repeat for r in runs})
    compared = _compared(cells.values())
    by_level = {level: pooled(c.ratios for c in compared if c.concurrency == level) for level in levels}
    return Table(cells, specs, sorted(levels), repeats, combined(by_level.values()), by_level)


def _compared(cells: Iterable[Cell]) -> list[Cell]:
    """The cells compared with (1,1,0): a cell whose requests failed is never chosen, and its collapsed runs are not
    the level's noise."""
    return [c for c in cells if c.spec != AUTOREGRESSIVE and not c.failed]


@dataclass(frozen=True)
class Choice:
    """What ``concurrency`` gets, its speedup over (1,1,0), and why."""

    concurrency: int
    spec: Candidate
    speedup: float
    reason: str


def choose(table: Table, *, max_ttft_ms: Optional[float] = None, max_tpot_ms: Optional[float] = None,
           only: Optional[Callable[[Candidate], bool]] = None) -> list[Choice]:
    """Per level: among the candidates within the latency limits none of whose requests failed, the one with
    the largest mean speedup of those that clear their noise threshold (the confidence shared over the level's
    candidates), else (1,1,0); (1,1,0) too where one of its own requests failed (nothing is compared there).
    ``only``: the candidates that may be chosen (all by default: lookahead specs and drafters alike;
    :func:`is_lookahead` for an engine's schedule)."""
    return [_choose_level(table, level, max_ttft_ms, max_tpot_ms, only) for level in table.levels]


def _choose_level(table: Table, level: int, max_ttft_ms: Optional[float], max_tpot_ms: Optional[float],
                  only: Optional[Callable[[Candidate], bool]]) -> Choice:
    eligible: list[Cell] = []
    notes: list[str] = []
    base = table.cell(AUTOREGRESSIVE, level)
    if base is not None and base.failed:
        return Choice(level, AUTOREGRESSIVE, 1.0, f"(1,1,0) had {base.failed} failed request(s) here: no speedup "
                                                  "against it is measured, nothing is chosen")
    for spec in table.specs:
        cell = table.cell(spec, level)
        if spec == AUTOREGRESSIVE or cell is None or not cell.ratios or (only is not None and not only(spec)):
            continue
        if cell.failed:
            notes.append(f"{spec}: {cell.failed} failed request(s)")
        elif max_ttft_ms is not None and cell.ttft is not None and cell.ttft > max_ttft_ms:
            notes.append(f"{spec} over --max-ttft-ms")
        elif max_tpot_ms is not None and cell.tpot is not None and cell.tpot > max_tpot_ms:
            notes.append(f"{spec} over --max-tpot-ms")
        else:
            eligible.append(cell)
    k = table.comparisons(level, only)
    bars = [(cell, table.threshold(cell, k)) for cell in eligible]
    clear = [(cell, bar) for cell, bar in bars if bar is not None and cell.speedup > bar]
    of = f" (the best of {k}: each at {1 - (1 - CONFIDENCE) / k:.1%} confidence, one-sided)" if k > 1 else ""
    if clear:
        best, bar = max(clear, key=lambda item: item[0].speedup)
        return Choice(level, best.spec, best.speedup,
                      f"fastest that clears the noise; {best.speedup:.3f}x > {bar:.3f}x{of}")
    if not bars:
        why = "no candidate within the limits"
    else:
        best, bar = max(bars, key=lambda item: item[0].speedup)
        why = (f"best candidate ({best.spec}) at {best.speedup:.3f}x does not clear the noise threshold {bar:.3f}x{of}"
               if bar is not None else f"best candidate ({best.spec}) at {best.speedup:.3f}x is one paired sample: "
               "its noise is unmeasured (run --repeats 2 or more)")
    return Choice(level, AUTOREGRESSIVE, 1.0, "; ".join([why, *notes]))


def schedule_of(choices: Sequence[Choice]) -> LookaheadSchedule:
    """The schedule: each measured level's choice covers the loads above the level before it, up to
    itself (a load between two levels gets the higher level's choice, the busier one); the highest
    level's choice is open-ended. Lookahead choices only (:func:`choose` with ``only=is_lookahead``)."""
    ordered = sorted(choices, key=lambda c: c.concurrency)
    if not all(isinstance(c.spec, LookaheadSpec) for c in ordered):
        raise ValueError("a lookahead schedule is made of (w,n,g) choices; choose with only=is_lookahead")
    items = [(c.concurrency, c.spec) for c in ordered[:-1]] + [(None, ordered[-1].spec)]
    return bands_in_order(items)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PytorchChoice:
    """What a TensorRT-LLM 1.3+ deployment takes: one drafter (None: no speculation) and the concurrency up to
    which it drafts (``max_concurrency``; None: every measured level), with the block to write."""

    drafter: Optional[Drafter]
    max_concurrency: Optional[int]
    block: Optional[dict[str, Any]]
    reason: str


def speculative_config_of(table: Table, *, max_ttft_ms: Optional[float] = None,
                          max_tpot_ms: Optional[float] = None) -> PytorchChoice:
    """The PyTorch backend's equivalent of a schedule: it runs one drafter for every request and can only turn
    it off above a batch size (``max_concurrency``, upstream's ``draft_len_schedule`` of one key). So: per
    drafter, the levels from the lowest up where it clears the noise threshold (each level's choice among the
    drafters, :func:`choose`); the drafter that holds the most levels wins (ties: the larger summed speedup);
    it drafts up to its last such level; none at the lowest level: no speculation.

    >>> from trtlade.tune.candidates import drafters_of
    >>> ar, sa = LookaheadSpec(1, 1, 0), drafters_of(["sa"], 8)[0]
    >>> runs = [Run(ar, 1, 0, 20.0, 1, 1), Run(sa, 1, 0, 26.0, 1, 1), Run(ar, 1, 1, 21.0, 1, 1),
    ...         Run(sa, 1, 1, 27.0, 1, 1), Run(ar, 8, 0, 90.0, 1, 1), Run(sa, 8, 0, 80.0, 1, 1),
    ...         Run(ar, 8, 1, 92.0, 1, 1), Run(sa, 8, 1, 81.0, 1, 1)]
    >>> choice = speculative_config_of(tabulate(runs))
    >>> str(choice.drafter), choice.max_concurrency, choice.block["max_concurrency"]
    ('sa', 1, 1)
    """
    choices = choose(table, max_ttft_ms=max_ttft_ms, max_tpot_ms=max_tpot_ms, only=is_drafter)
    held: dict[Drafter, list[Choice]] = {}
    for choice in sorted(choices, key=lambda c: c.concurrency):
        drafter = choice.spec
        if not isinstance(drafter, Drafter):
            break  # a level where no drafter clears the noise: the run of levels ends
        if held and drafter not in held:
            break
        held.setdefault(drafter, []).append(choice)
    if not held:
        lowest = table.levels[0] if table.levels else None
        first = min(choices, key=lambda c: c.concurrency).reason if choices else ""
        if first.startswith("(1,1,0) had"):  # nothing was compared there
            return PytorchChoice(None, None, None, f"at the lowest measured concurrency ({lowest}) {first}: serve "
                                                   "without speculative_config, or measure again")
        return PytorchChoice(None, None, None, f"no drafter beats plain decoding beyond the noise at the lowest "
                                               f"measured concurrency ({lowest}): serve without speculative_config")
    drafter, wins = max(held.items(), key=lambda kv: (len(kv[1]), sum(c.speedup for c in kv[1])))
    top = wins[-1].concurrency
    gate = None if top == table.levels[-1] else top
    block = {**drafter.speculation, **({"max_concurrency": gate} if gate is not None else {})}
    reason = (f"{drafter} clears the noise threshold at concurrency {', '.join(str(c.concurrency) for c in wins)} "
              f"({', '.join(f'{c.speedup:.3f}x' for c in wins)})"
              + (f"; off above {gate} (max_concurrency)" if gate is not None else "; on at every measured level"))
    return PytorchChoice(drafter, gate, block, reason)

"""The measurement behind ``trtlade tune``: every candidate spec at every concurrency level, repeated,
interleaved, against one OpenAI-compatible server (trtlade's, on either engine).

For each repeat, for each level (ascending), every candidate runs the same prompts one after the
other, in an order rotated by one per repeat, so that slow drift of the machine and the position in
the sequence hit every spec alike. A run is the bench's closed loop (:mod:`trtlade.bench.runner`):
``concurrency`` workers sending back to back until the run's prompts are done; it is summarised by
the bench's own metrics (output throughput, median TTFT and TPOT) and its failed requests. With the
``random`` set each repeat draws its own prompts (``seed + repeat``), so the choice does not rest on one
sample of the traffic; the other sets send their prompts in order, the same in every repeat. Before the
first repeat every candidate serves one unmeasured request (warm-up); each run then starts from an emptied
prefix cache (``prefix_cache`` "clear", the default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from trtlade.bench.datasets import Dataset
from trtlade.bench.metrics import LevelSummary
from trtlade.bench.plan import BenchPlan, Endpoint, Mode, Series, Target
from trtlade.bench.runner import Progress, run_plan
from trtlade.tune.candidates import Candidate, Drafter
from trtlade.tune.select import Run

__all__ = ["TuneSettings", "Measurement", "measure", "prompts_for", "mode_of"]


@dataclass(frozen=True)
class TuneSettings:
    """How much to measure: ``num_prompts`` requests per run, but at least ``per_worker`` times the
    concurrency (so that every worker sends several); ``repeats`` rounds over everything."""

    levels: tuple[int, ...]
    repeats: int = 2
    num_prompts: int = 4
    per_worker: int = 2
    max_tokens: int = 48
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    timeout: float = 600.0
    seed: int = 0
    warmup: bool = True
    #: the bench's rule for each server's prefix cache before every series: "clear" or "keep" (``BenchPlan``)
    prefix_cache: str = "clear"

    def prompts_at(self, concurrency: int) -> int:
        return max(self.num_prompts, self.per_worker * concurrency)

    def total_runs(self, candidates: int) -> int:
        return self.repeats * len(self.levels) * candidates


@dataclass
class Measurement:
    runs: list[Run] = field(default_factory=list)
    summaries: list[LevelSummary] = field(default_factory=list)
    failed_requests: int = 0


def mode_of(candidate: Candidate) -> Mode:
    """The bench mode that sends ``candidate`` explicitly: a spec named like ``2-4-2`` (``lookahead``), or a
    drafter by its name (``speculation``)."""
    if isinstance(candidate, Drafter):
        return Mode(candidate.name, None, speculation=candidate.speculation)
    return Mode("-".join(map(str, candidate.as_tuple())), candidate)


def prompts_for(dataset: Dataset, settings: TuneSettings, concurrency: int, repeat: int) -> list:
    return dataset.sample(settings.prompts_at(concurrency), settings.seed + repeat)


def _plan(target: Target, endpoint: Endpoint, specs: Sequence[Candidate], prompts: list,
          settings: TuneSettings, level: int) -> BenchPlan:
    return BenchPlan(series=[Series(mode_of(s).name, target, mode_of(s)) for s in specs], levels=[level],
                     endpoint=endpoint, prompts=prompts, warmup_prompts=[], max_tokens=settings.max_tokens,
                     temperature=settings.temperature, ignore_eos=settings.ignore_eos, timeout=settings.timeout,
                     top_p=settings.top_p, seed=settings.seed, prefix_cache=settings.prefix_cache)


def _rotated(items: Sequence[Candidate], by: int) -> list[Candidate]:
    k = by % len(items)
    return list(items[k:]) + list(items[:k])


async def measure(target: Target, endpoint: Endpoint, dataset: Dataset, specs: Sequence[Candidate],
                  settings: TuneSettings, progress: Optional[Progress] = None,
                  on_run: Optional[Callable[[Run, LevelSummary], None]] = None) -> Measurement:
    """Measure every spec at every level, ``settings.repeats`` times (see the module docstring)."""
    out = Measurement()
    if settings.warmup:  # every candidate once, unmeasured: first-request costs stay out of the runs
        await run_plan(_plan(target, endpoint, specs, dataset.sample(1, settings.seed - 1), settings, 1))
    for repeat in range(settings.repeats):
        for level in settings.levels:
            order = _rotated(specs, repeat)
            plan = _plan(target, endpoint, order, prompts_for(dataset, settings, level, repeat), settings, level)
            outcome = await run_plan(plan, progress)
            for spec, summary in zip(order, outcome.summaries):
                run = Run(spec, level, repeat, summary.output_throughput, summary.median_ttft_ms,
                          summary.median_tpot_ms, summary.failed)
                out.runs.append(run)
                out.summaries.append(summary)
                out.failed_requests += summary.failed
                if on_run is not None:
                    on_run(run, summary)
    return out

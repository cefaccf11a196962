"""Report files of a bench run, and the comparison tables they (and ``report compare``) show.

``reports/<run-id>/`` holds:

* ``per_request.jsonl``: one line per measured request (observed times + derived numbers);
* ``summary.json``: :class:`RunSummary` (settings, metadata, one :class:`LevelSummary` per
  (series, level)); ``report compare`` reads it back;
* ``summary.csv``: the summaries as one flat table;
* ``summary.md``: the tables (output throughput -- what the server delivers --, mean and median TTFT,
  mean and p90 end-to-end latency, and the user's decode throughput summed over concurrent requests,
  labelled as such: rows per series plus a change row in %, columns per concurrency), failures, the
  full metric table per series, and metadata;
* ``ttft_vs_concurrency.png``, ``output_throughput_vs_concurrency.png``,
  ``decode_throughput_vs_concurrency.png`` and, with two or more series, ``speedup_vs_concurrency.png``
  (of output throughput).

pandas and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import re
import statistics
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from trtlade.errors import RepeatedKeyError, TrtladeError, keys_once
from trtlade.files import UserFileError, read_user_text
from trtlade.bench.meta import describe_server
from trtlade.bench.metrics import LevelSummary
from trtlade.bench.noise import (CONFIDENCE, Noise, Speedup, difference_margin, margin, pooled, speedup, spread,
                                 unpaired, verdict)
from trtlade.bench.records import RequestRecord

__all__ = [
    "ReportError", "RunSummary", "SeriesInfo", "Row", "TABLES",
    "accepted_by_source", "category_tokens_per_step", "change_pct", "compare_runs", "comparison_table",
    "default_aim_lines", "default_vs_best_fixed", "host_lines", "shown_digits",
    "load_run", "make_run_id", "output_agreement",
    "render_markdown", "series_rows",
    "write_report",
]

SUMMARY_JSON = "summary.json"


class ReportError(TrtladeError, ValueError):
    """A run folder that cannot be read (``where`` names the path)."""



class SeriesInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    label: str
    server: str
    base_url: str
    model: str
    mode: str
    lookahead: Optional[list[int]] = None   #: the (w,n,g) sent; None = no field (server default)
    speculation: Optional[dict[str, Any]] = None  #: the NGram / SA block sent (``speculation``)


class RunSummary(BaseModel):
    """The content of summary.json."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    created: str
    series: list[SeriesInfo]
    levels: list[int]
    settings: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    summaries: list[LevelSummary]
    #: per non-baseline series: requests compared with the baseline's answer to the same prompt
    #: (same level and index, both completed) and how many had the identical text
    output_agreement: dict[str, dict[str, int]] = {}
    #: output throughput against the first series over the repeats (:func:`speedup_verdicts`)
    verdicts: dict[str, Any] = {}
    #: per series, per prompt category: mean tokens per engine step over its requests (every level and repeat)
    tokens_per_step_by_category: dict[str, dict[str, float]] = {}
    #: per series: accepted drafts by where they came from (every level and repeat)
    accepted_by_source: dict[str, dict[str, int]] = {}

    def summary(self, series: str, level: int) -> Optional[LevelSummary]:
        """The first repeat's summary of (series, level) (see :meth:`values` for every repeat)."""
        for s in self.summaries:
            if s.series == series and s.concurrency == level:
                return s
        return None

    @property
    def repeats(self) -> int:
        return 1 + max((s.repeat for s in self.summaries), default=0)

    def values(self, series: str, level: int, field: str) -> list[Optional[float]]:
        """``field`` of (series, level) in every repeat, in repeat order (None where not measured)."""
        by_repeat = {s.repeat: s.metric(field) for s in self.summaries if s.series == series and s.concurrency == level}
        return [by_repeat.get(r) for r in range(self.repeats)]

    def speedups(self, field: str = "output_throughput"
                 ) -> tuple[dict[tuple[str, int], Speedup], dict[tuple[str, int], Optional[float]]]:
        """Per (series, level) beyond the first series: its paired ratios against the first series
        over the repeats, and the margin its mean must clear to be real (:func:`~trtlade.bench.noise.margin`:
        the larger of the level's noise, pooled over its series, and the cell's own; None with fewer than
        two ratios). For a lower-is-better field the ratio is still ``value / baseline``."""
        if len(self.series) < 2:
            return {}, {}
        base = self.series[0].label
        out = {(info.label, level): speedup(self.values(base, level, field), self.values(info.label, level, field))
               for info in self.series[1:] for level in self.levels}
        # the level's noise from the cells that are judged: a cell that lost requests or whole repeats scatters by
        # how many it lost, which is not the repeats' noise
        noise = self.level_noise({key: s for key, s in out.items() if not unjudged(self, field, *key)})
        return out, {key: margin(s.ratios, noise[key[1]]) for key, s in out.items()}

    def level_noise(self, cells: dict[tuple[str, int], Speedup]) -> dict[int, Noise]:
        """Per level: the pooled noise of the paired ratios of every series compared at it."""
        return {level: pooled(s for (_, lv), s in cells.items() if lv == level) for level in self.levels}


# ----------------------------------------------------------------------------- tables
#: The summary's tables: (title, LevelSummary field, decimals, higher_is_better). Output throughput
#: (what the server delivers) comes first; the user's summed decode throughput is kept, labelled for
#: what it is: it can rise with concurrency while the server delivers nothing more.
TABLES: tuple[tuple[str, str, int, bool], ...] = (
    ("Output throughput (tokens/s the server delivers: completion tokens / wall time of the level)",
     "output_throughput", 1, True),
    ("TTFT (ms, mean over requests)", "mean_ttft_ms", 1, False),
    ("TTFT (ms, median)", "median_ttft_ms", 1, False),
    ("End-to-end latency (ms, mean over requests: request sent to the stream's end)", "mean_e2el_ms", 1, False),
    ("End-to-end latency (ms, p90 over requests: the slow end of a level)", "p90_e2el_ms", 1, False),
    ("Decode throughput (tokens/s, sum over concurrent requests: per-request decode speed, summed; "
     "not what the server delivers)", "aggregate_decode_throughput", 1, True),
)

#: One table row: a label and a value per concurrency level (None: not measured / no data).
Row = tuple[str, dict[int, Optional[float]]]


def change_pct(base: Optional[float], value: Optional[float]) -> Optional[float]:
    """Relative change in percent: ``(value - base) / base * 100``; None if either is missing or base 0.

    >>> change_pct(100.0, 127.7), change_pct(None, 1.0), change_pct(0.0, 1.0)
    (27.700000000000003, None, None)
    """
    if base is None or value is None or base == 0:
        return None
    return (value - base) / base * 100.0


def _fmt(value: Optional[float], decimals: int) -> str:
    return "—" if value is None else f"{value:,.{decimals}f}"


def _fmt_pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def _fmt_spread(mean: Optional[float], lo: Optional[float], hi: Optional[float], decimals: int) -> str:
    if mean is None:
        return "—"
    if lo is None or hi is None or _fmt(lo, decimals) == _fmt(hi, decimals):  # a range that prints as one value
        return _fmt(mean, decimals)
    return f"{_fmt(mean, decimals)} ({_fmt(lo, decimals)}–{_fmt(hi, decimals)})"


#: the fields measured on completed requests only: a failed request's time is not in them
COMPLETED_ONLY = frozenset({"mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "p90_e2el_ms", "mean_tpot_ms",
                            "aggregate_decode_throughput"})


def noise_table(run: "RunSummary", field: str, *, decimals: int = 1) -> str:
    """With several repeats: each cell is the mean (min–max over repeats); each change row is the
    mean paired change against the first series, its min–max, and the verdict
    (:mod:`trtlade.bench.noise`): faster / slower (or lower / higher for a latency), or within noise.
    With one repeat: :func:`comparison_table` (one sample per cell, said in the verdict row). A cell with
    failed requests says how many; a field of completed requests only (a latency) is not judged there: the
    failed requests' time is not in it, so it could look better for failing."""
    levels = run.levels
    failed = {(info.label, c): int(sum(v or 0 for v in run.values(info.label, c, "failed")))
              for info in run.series for c in levels}
    lines = ["| concurrency | " + " | ".join(str(c) for c in levels) + " |", "|---|" + "---:|" * len(levels)]
    for info in run.series:
        cells = [_fmt_spread(*spread(run.values(info.label, c, field)), decimals) + _failed(failed[(info.label, c)])
                 for c in levels]
        lines.append(f"| {info.label} | " + " | ".join(cells) + " |")
    ratios, margins = run.speedups(field)
    base = run.series[0].label if run.series else ""
    for info in run.series[1:]:
        cells = []
        for c in levels:
            s = ratios.get((info.label, c))
            if s is None or not s.ratios:
                cells.append("—")
                continue
            cells.append(_change_cell(s, margins.get((info.label, c)), unjudged(run, field, info.label, c)))
        lines.append(f"| {info.label} vs {base} | " + " | ".join(cells) + " |")
    if len(run.series) > 1:
        lines.append("")
        lines.append(_noise_note(run.repeats, margins))
    return "\n".join(lines)


def unjudged(run: "RunSummary", field: str, series: str, level: int) -> str:
    """Why (series, level) gets no verdict for ``field`` (empty: it gets one): failed requests the field leaves out,
    or repeats in which the series delivered nothing, whose ratio (0) the pairing drops, so that a verdict would
    rest on the repeats that survived."""
    lost = _left_out(run, field, series, level)
    if lost:
        return f"{lost} failed request{'s' if lost > 1 else ''} left out"
    base = run.values(run.series[0].label, level, "output_throughput")
    dead = sum(1 for b, v in zip(base, run.values(series, level, "output_throughput")) if b and v == 0)
    return f"{dead} repeat{'s' if dead > 1 else ''} delivered nothing" if dead else ""


def _left_out(run: "RunSummary", field: str, series: str, level: int) -> int:
    """Failed requests that ``field`` of (series, level) against the baseline leaves out (0 for a field that
    counts every request: output throughput keeps a failed request's time in the level's wall time)."""
    if field not in COMPLETED_ONLY or not run.series:
        return 0
    return int(sum(v or 0 for name in (series, run.series[0].label) for v in run.values(name, level, "failed")))


def _failed(count: int) -> str:
    return f" [{count} failed]" if count else ""


def _change_cell(s: Speedup, m: Optional[float], why_not: str) -> str:
    """``+21.0% (+19.0…+23.0) higher ±2.9``; ``why_not``: why the cell is not judged (:func:`unjudged`)."""
    pct = (s.mean - 1) * 100
    span = f" ({(s.lo - 1) * 100:+.1f}…{(s.hi - 1) * 100:+.1f})" if len(s.ratios) > 1 else ""
    if why_not:
        return f"{pct:+.1f}%{span} not judged: {why_not}"
    said = verdict(s.mean, m)
    said = {"faster": "higher", "slower": "lower"}.get(said, said)
    return _judged(pct, span, said, m)


def _judged(pct: float, span: str, said: str, m: Optional[float]) -> str:
    """``+2.0% (range) higher ±1.5``, with as many decimals as the verdict needs to be read from what is shown (a
    change and its margin equal at one decimal get a second; a margin that reads 0.0, more)."""
    if m is None:
        return f"{pct:+.1f}%{span} {said}"
    digits = shown_digits(abs(pct), m * 100, 1)
    return f"{pct:+.{digits}f}%{span} {said} ±{m * 100:.{digits}f}"


def shown_digits(change: float, margin: float, digits: int) -> int:
    """The decimals from ``digits`` on at which a change and its margin read apart and the margin is not 0, so a
    verdict never rests on digits not shown (at most 4 more).

    >>> shown_digits(2.03, 1.96, 1), shown_digits(0.4, 0.08, 2), shown_digits(21.0, 2.9, 1)
    (2, 2, 1)
    """
    if margin == 0:  # no noise measured: nothing hides in the digits
        return digits
    for d in range(digits, digits + 5):
        if f"{change:.{d}f}" != f"{margin:.{d}f}" and float(f"{margin:.{d}f}") != 0.0:
            return d
    return digits + 4


def _noise_note(repeats: int, margins: dict[tuple[str, int], Optional[float]]) -> str:
    if all(m is None for m in margins.values()):
        if repeats > 1:
            return (f"{repeats} repeats, but every cell has one paired sample (the baseline failed in the others): no "
                    "measure of its noise; read no difference as real before a run whose repeats all complete.")
        return ("One repeat: every cell is a single sample, with no measure of its noise; run with --repeats 3 "
                "or more before reading a difference as real.")
    single = " A cell without a margin had one paired sample (a repeat's baseline failed): one sample." if any(
        m is None for m in margins.values()) else ""
    return (f"{repeats} repeats, interleaved. A change is real (higher / lower) only beyond its ± margin (% of the "
            f"baseline): "
            f"the 95% Student t interval of the mean paired log ratio (the change is the ratios' geometric mean), "
            f"from the repeat-to-repeat noise of the level's runs (modes by repeats, the baseline's run counted "
            f"once) or, where larger, the cell's own; otherwise it is within noise.{single}")


def comparison_table(levels: Sequence[int], rows: Sequence[Row], *, decimals: int = 1,
                     header: str = "concurrency", changes: bool = True) -> str:
    """A Markdown table: one row per series, then ``<series> vs <first series> (%)`` change rows.

    >>> print(comparison_table([1, 16], [("ar", {1: 100.0, 16: 400.0}), ("lookahead", {1: 127.7, 16: 455.2})]))
    | concurrency | 1 | 16 |
    |---|---:|---:|
    | ar | 100.0 | 400.0 |
    | lookahead | 127.7 | 455.2 |
    | lookahead vs ar (%) | +27.7% | +13.8% |
    """
    lines = [f"| {header} | " + " | ".join(str(c) for c in levels) + " |",
             "|---|" + "---:|" * len(levels)]
    for label, values in rows:
        lines.append(f"| {label} | " + " | ".join(_fmt(values.get(c), decimals) for c in levels) + " |")
    if changes and len(rows) > 1:
        base_label, base = rows[0]
        for label, values in rows[1:]:
            cells = [_fmt_pct(change_pct(base.get(c), values.get(c))) for c in levels]
            lines.append(f"| {label} vs {base_label} (%) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def series_rows(run: RunSummary, field: str, *, prefix: str = "",
                series: Optional[Iterable[str]] = None) -> list[Row]:
    """Rows of ``field`` per series of ``run`` (all series, or those named, in run order)."""
    names = list(series) if series is not None else [s.label for s in run.series]
    return [(f"{prefix}{name}", {level: spread(run.values(name, level, field))[0] for level in run.levels})
            for name in names]


def speedup_verdicts(run: "RunSummary", field: str = "output_throughput") -> dict[str, Any]:
    """The speedups of ``field`` against the first series, as data for summary.json: the margin, and
    per (series, level) the mean, min and max ratio over repeats and the verdict."""
    ratios, margins = run.speedups(field)
    aims = default_vs_best_fixed(run) if field == "output_throughput" else []
    noise = run.level_noise(ratios)
    return {"field": field, "baseline": run.series[0].label if run.series else None, "repeats": run.repeats,
            "confidence": CONFIDENCE, **({"default_vs_best_fixed": aims} if aims else {}),
            "noise_by_level": {str(level): {"sd": n.sd, "dof": n.dof} for level, n in noise.items()},
            "cells": [_verdict_cell(run, field, name, level, s, margins.get((name, level)))
                      for (name, level), s in ratios.items()]}


def _verdict_cell(run: "RunSummary", field: str, name: str, level: int, s: Speedup, m: Optional[float]
                  ) -> dict[str, Any]:
    """One (series, level) of :func:`speedup_verdicts`: no verdict where it is not judged, and why."""
    why = unjudged(run, field, name, level)
    return {"series": name, "concurrency": level, "mean": s.mean if s.ratios else None,
            "min": s.lo if s.ratios else None, "max": s.hi if s.ratios else None, "ratios": list(s.ratios),
            "margin": m, "verdict": verdict(s.mean, m) if s.ratios and not why else None,
            **({"not_judged": why} if why else {})}


def family_verdicts(run: "RunSummary") -> dict[str, Any]:
    """Every change the report's tables judge, taken together: each verdict is at 95% on its own, so among N of
    them about N / 20 read higher or lower by chance where nothing differs. ``holding``: the changes still beyond
    their margin with the 5% shared over all N (each at ``1 - 0.05 / N``, Bonferroni's bound: the family's chance
    of any false call at most 5%).

    >>> def cell(series, r, tok_s):
    ...     return LevelSummary(series=series, concurrency=1, num_prompts=8, completed=8, failed=0, repeat=r,
    ...                         duration_s=1.0, request_throughput=8.0, output_throughput=tok_s,
    ...                         total_output_tokens=400)
    >>> run = RunSummary(run_id="x", created="now", levels=[1],
    ...                  series=[SeriesInfo(label=m, server="a", base_url="u", model="m", mode=m)
    ...                          for m in ("ar", "sa")],
    ...                  summaries=[cell("ar", r, v) for r, v in enumerate((100, 104, 98))]
    ...                  + [cell("sa", r, v) for r, v in enumerate((121, 123, 119))])
    >>> family = family_verdicts(run)
    >>> family["comparisons"], family["called"], [(h["field"], h["series"]) for h in family["holding"]]
    (1, 1, [('output_throughput', 'sa')])
    """
    judged: list[tuple[str, str, int, Speedup, float, Noise]] = []
    for _, field, _, _ in TABLES:
        ratios, margins = run.speedups(field)
        noise = run.level_noise(ratios)
        for (name, level), s in ratios.items():
            m = margins.get((name, level))
            if s.ratios and m is not None and not unjudged(run, field, name, level):
                judged.append((field, name, level, s, m, noise[level]))
    n = len(judged)
    called = [x for x in judged if verdict(x[3].mean, x[4]) in ("faster", "slower")]
    holding = [{"field": field, "series": name, "concurrency": level, "change_pct": 100 * (s.mean - 1),
                "margin_pct": 100 * strict}
               for field, name, level, s, _, noise in called
               if (strict := margin(s.ratios, noise, comparisons=n)) is not None
               and verdict(s.mean, strict) in ("faster", "slower")]
    return {"comparisons": n, "confidence_each": CONFIDENCE, "called": len(called),
            "by_chance": n * (1 - CONFIDENCE), "family_confidence_each": 1 - (1 - CONFIDENCE) / max(1, n),
            "holding": holding}


def family_lines(run: "RunSummary") -> list[str]:
    """The report's section on its verdicts taken together (:func:`family_verdicts`); none with one judged change
    or none (a single verdict is its own family)."""
    family = family_verdicts(run)
    n = family["comparisons"]
    if n < 2:
        return []
    titles = {"output_throughput": "output throughput", "mean_ttft_ms": "TTFT (mean)",
              "median_ttft_ms": "TTFT (median)",
              "mean_e2el_ms": "end-to-end latency (mean)", "p90_e2el_ms": "end-to-end latency (p90)",
              "aggregate_decode_throughput": "decode throughput (summed)"}
    by_field: dict[str, list[str]] = {}
    for h in family["holding"]:
        by_field.setdefault(h["field"], []).append(f"{h['series']} at {h['concurrency']} ({h['change_pct']:+.1f}%)")
    held = [f"- {titles.get(field, field)}: {', '.join(items)}" for field, items in by_field.items()]
    return ["## The verdicts together", "",
            f"The tables above judge {n} changes, each at 95% on its own: were no mode different from "
            f"`{run.series[0].label}` in anything, about {family['by_chance']:.1f} of them would still read higher or "
            f"lower by chance. {family['called']} read higher or lower; {len(family['holding'])} of them hold with the "
            f"5% shared over all {n} (each at {100 * family['family_confidence_each']:.2f}%, Bonferroni's bound)"
            + (":" if held else "."), "", *held, *([""] if held else []),
            "A change that holds only on its own may be real; a second run, or the same change at the neighbouring "
            "levels, tells.", ""]


# ----------------------------------------------------------------------------- markdown
_FULL_METRICS: tuple[tuple[str, str], ...] = (
    ("completed", "completed requests"),
    ("failed", "failed requests"),
    ("duration_s", "duration (s)"),
    ("tail_s", "tail: the last request sent to the last answer (s)"),
    ("mean_in_flight", "requests in flight, mean"),
    ("request_throughput", "request throughput (req/s)"),
    ("output_throughput", "output throughput (tok/s)"),
    ("total_token_throughput", "total token throughput (tok/s)"),
    ("aggregate_decode_throughput", "decode throughput, sum over concurrent (tok/s)"),
    ("mean_decode_throughput", "decode throughput per request, mean (tok/s)"),
    ("median_decode_throughput", "decode throughput per request, median (tok/s)"),
    ("p90_decode_throughput", "decode throughput per request, p90 (tok/s)"),
    ("p99_decode_throughput", "decode throughput per request, p99 (tok/s)"),
    *[(f"{stat}_{m}_ms", f"{m.upper()} {stat} (ms)")
      for m in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p90", "p99")],
    ("server_cpu_cores", "server process CPU (cores busy, mean)"),
    ("bench_cpu_cores", "load generator CPU (cores busy, mean)"),
    ("mean_tokens_per_chunk", "tokens per chunk, mean"),
    ("mean_chunks_per_request", "chunks per request, mean"),
    ("mean_lookahead_tokens_per_step", "tokens per step (usage), mean"),
    ("total_input_tokens", "prompt tokens (usage)"),
    ("total_output_tokens", "completion tokens (usage; content chunks where the server sent none)"),
)


_COUNT_METRICS = frozenset({"completed", "failed", "total_input_tokens", "total_output_tokens"})


def _cell(key: str, values: Sequence[Optional[float]]) -> str:
    """One metric over the repeats: a count summed, anything else its mean (min–max); "—" when unmeasured."""
    got = [v for v in values if v is not None]
    if not got:
        return "—"
    if key in _COUNT_METRICS:
        return f"{int(sum(got)):,d}"
    return _fmt_spread(*spread(got), 2)


def _full_metric_table(run: RunSummary, series: str) -> str:
    """Rows: metrics (rows with no value at any level are left out); columns: concurrency levels; each cell over
    every repeat (:func:`_cell`)."""
    import pandas as pd

    by_level = {level: [s for s in run.summaries if s.series == series and s.concurrency == level]
                for level in run.levels}
    rows = [(key, label) for key, label in _FULL_METRICS
            if any(getattr(s, key, None) is not None for group in by_level.values() for s in group)]
    data = {str(level): [_cell(key, [getattr(s, key, None) for s in group]) for key, _ in rows]
            for level, group in by_level.items()}
    frame = pd.DataFrame(data, index=[label for _, label in rows])
    frame.index.name = "metric \\ concurrency"
    return frame.to_markdown(disable_numparse=True, colalign=["left"] + ["right"] * len(run.levels))


def _prefix_cache_lines(run: RunSummary) -> list[str]:
    """How the series stood with the servers' prefix caches: the rule, each server's answer, and the
    share of prompt tokens served from the cache per series and level (mean over the repeats)."""
    rule = run.settings.get("prefix_cache")
    told = any(s.prefix_hit_rate is not None for s in run.summaries)
    if rule is None and not told:
        return []
    out = ["## Prefix cache", ""]
    if rule == "clear":
        answers = run.metadata.get("prefix_cache") or {}
        said = "; ".join(f"{label}: {text}" for label, text in answers.items()) or "no series ran"
        out.append(f"Each series started from an empty prefix cache (`--prefix-cache clear`): {said}.")
    elif rule == "keep":
        out.append("The prefix caches were kept across series (`--prefix-cache keep`): a series may find prompts "
                   "an earlier series computed; compare the hit rates below before the timings.")
    out += _scope_lines(run)
    if told:
        rates = series_rows(run, "prefix_hit_rate")
        out += ["", "Share of prompt tokens served from the prefix cache "
                "(`usage.prompt_tokens_details.cached_tokens`), mean over the repeats:", "",
                comparison_table(run.levels, [(f"{name} (%)", {lv: None if v is None else 100 * v
                                                               for lv, v in row.items()})
                                              for name, row in rates], decimals=1, changes=False)]
        silent = [name for name, row in rates if all(v is None for v in row.values())]
        if silent:
            out += ["", f"—: {', '.join(silent)} reported no cached tokens (no `usage.prompt_tokens_details`: "
                    "a server without a prefix cache, or one that does not say)."]
    else:
        out += ["", "No server reported cached prompt tokens (`usage.prompt_tokens_details`)."]
    return out + [""]


_SCOPE_MEANING = {"identity": "reuse only among requests of the same API key",
                  "salt": "reuse only among requests of the same API key and cache_salt",
                  "global": "every request may reuse every other's"}


def _scope_lines(run: RunSummary) -> list[str]:
    """The servers' prefix-cache scope, as their /version says it (the bench sends every request with one
    key, so under ``identity`` a series reuses its own prompts only).

    >>> run = RunSummary(run_id="r", created="", series=[], levels=[], summaries=[],
    ...                  metadata={"servers": {"a": {"version": {"prefix_cache_scope": "identity"}}}})
    >>> _scope_lines(run)
    ['', 'Scope: a: `identity` (reuse only among requests of the same API key).']
    """
    servers = run.metadata.get("servers") or {}
    said = [f"{label}: `{scope}` ({_SCOPE_MEANING.get(scope, scope)})" for label, server in servers.items()
            if isinstance(server, dict) and isinstance(server.get("version"), dict)
            and (scope := server["version"].get("prefix_cache_scope"))]
    return ["", "Scope: " + "; ".join(said) + "."] if said else []


def category_tokens_per_step(records: Sequence[RequestRecord], series: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per series and prompt category, the mean tokens per step the server reported (``usage.lookahead`` or
    ``usage.speculation``) over the requests that completed, every level and repeat pooled.

    >>> recs = [RequestRecord("sa", 1, 0, 0, category="code", usage_speculation={"tokens_per_step": 3.0}),
    ...         RequestRecord("sa", 1, 1, 1, category="code", usage_speculation={"tokens_per_step": 2.0}),
    ...         RequestRecord("ar", 1, 0, 0, category="code", usage_lookahead={"tokens_per_step": 1.0})]
    >>> category_tokens_per_step(recs, ["ar", "sa"])
    {'ar': {'code': 1.0}, 'sa': {'code': 2.5}}
    """
    out: dict[str, dict[str, float]] = {}
    for name in series:
        by: dict[str, list[float]] = {}
        for r in records:
            if r.series == name and r.ok and r.category and (tps := r.tokens_per_step) is not None:
                by.setdefault(r.category, []).append(tps)
        if by:
            out[name] = {c: round(sum(v) / len(v), 4) for c, v in by.items()}
    return out


def accepted_by_source(records: Sequence[RequestRecord], series: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per series, the accepted draft tokens by source, summed over its completed requests: Lookahead's
    ``usage.lookahead.accepted_from`` (``window``, ``pool``, ``prompt_lookup``, ``suffix``, ``public``), or an
    NGram / SA request's ``usage.speculation.accepted_draft_tokens`` under its drafter's name.

    >>> recs = [RequestRecord("auto", 1, 0, 0, usage_lookahead={"accepted_from": {"pool": 5, "suffix": 2}}),
    ...         RequestRecord("auto", 1, 1, 1, usage_lookahead={"accepted_from": {"pool": 1}}),
    ...         RequestRecord("sa", 1, 0, 0, usage_speculation={"decoding_type": "SA", "accepted_draft_tokens": 7})]
    >>> accepted_by_source(recs, ["auto", "sa"])
    {'auto': {'pool': 6, 'suffix': 2}, 'sa': {'SA': 7}}
    """
    out: dict[str, dict[str, int]] = {}
    for name in series:
        sums: dict[str, int] = {}
        for r in records:
            if r.series != name or not r.ok:
                continue
            sp, la = r.usage_speculation, r.usage_lookahead
            if isinstance(sp, dict) and isinstance(sp.get("accepted_draft_tokens"), int):
                key = str(sp.get("decoding_type"))
                sums[key] = sums.get(key, 0) + sp["accepted_draft_tokens"]
            elif isinstance(la, dict) and isinstance(la.get("accepted_from"), dict):
                for key, value in la["accepted_from"].items():
                    sums[str(key)] = sums.get(str(key), 0) + int(value)
        if sums:
            out[name] = sums
    return out


def _source_lines(run: RunSummary) -> list[str]:
    by = run.accepted_by_source
    sources = list(dict.fromkeys(s for row in by.values() for s in row))
    if not sources:
        return []
    out = ["", "What the accepted drafts came from (share of each series' accepted draft tokens, every level and "
           "repeat): `window` the Jacobi branch, `pool` the n-gram pool, `prompt_lookup` / `suffix` the history "
           "candidates (NGram-like latest match, SA-like longest match), `public` another running request's "
           "text, `NGram` / `SA` a drafter's own:", "",
           "| series | " + " | ".join(sources) + " | accepted |", "|---|" + "---:|" * (len(sources) + 1)]
    for info in run.series:
        row = by.get(info.label, {})
        total = sum(row.values())
        cells = [f"{100 * row.get(s, 0) / total:.0f}%" if total else "—" for s in sources]
        out.append(f"| {info.label} | " + " | ".join(cells) + f" | {total:,d} |")
    return out


def _one_wave(run: RunSummary, level: int) -> bool:
    """Whether every request of ``level`` starts at once: no more requests a level than its concurrency."""
    n = run.settings.get("num_prompts")
    return isinstance(n, int) and 0 < n <= level


def _wave_lines(run: RunSummary) -> list[str]:
    """The note under the output table for the levels whose requests all start at once (no more requests a
    level than its concurrency): such a level is one wave, timed by its slowest answer, not a queue.

    >>> run = RunSummary(run_id="r", created="", series=[], levels=[1, 4, 8], settings={"num_prompts": 8},
    ...                  metadata={}, summaries=[])
    >>> print(_wave_lines(run)[0][:91])
    At concurrency 8 (8 requests a level) every request of a level starts at once: the level is
    """
    n = run.settings.get("num_prompts")
    waves = [c for c in run.levels if _one_wave(run, c)]
    if not waves:
        return []
    at = ", ".join(str(c) for c in waves)
    return [f"At concurrency {at} ({n} requests a level) every request of a level starts at once: the level is "
            "one wave and ends with its slowest answer, so a drafting mode can deliver less there while its "
            "requests decode faster and finish sooner on average: read it with the end-to-end latency and the "
            "decode throughput, below. To measure a queue at that concurrency, send several times as many "
            "requests a level (`--num-prompts`).", ""]


#: the series that let the server choose its drafting (its default: ``auto`` on trtlade serve)
DEFAULT_MODES = ("default", "auto")
#: the aim for the default (trtlade's ``auto`` policy): at least the best fixed mode's output against ``ar`` less this
#: many points, and never this far below ``ar``
DEFAULT_AIM_POINTS = 3.0


def default_vs_best_fixed(run: RunSummary) -> list[dict[str, Any]]:
    """Per level: the server's default (a ``default`` or ``auto`` series) against the best fixed mode (any other series
    but the ``ar`` baseline), both as output throughput against ``ar``, and whether the default meets its aim (at
    least the best fixed mode's ratio less :data:`DEFAULT_AIM_POINTS` points, and no more than that far below ``ar``).
    Empty unless the first series is ``ar`` and the run has a default and a fixed mode. ``gap_lo`` / ``gap_hi``: the
    gap's range over the repeats, each repeat's default paired with that repeat's best fixed mode.

    >>> from trtlade.bench.metrics import LevelSummary
    >>> def cell(series, c, r, tok_s):
    ...     return LevelSummary.model_construct(series=series, concurrency=c, repeat=r, output_throughput=tok_s)
    >>> info = [SeriesInfo(label=m, server="a", base_url="http://h", model="m", mode=m) for m in ("ar", "sa", "auto")]
    >>> cells = [cell("ar", 1, r, 100.0) for r in (0, 1)] + [cell("sa", 1, 0, 120.0), cell("sa", 1, 1, 116.0),
    ...          cell("auto", 1, 0, 118.0), cell("auto", 1, 1, 113.0)]
    >>> run = RunSummary(run_id="r", created="", series=info, levels=[1], summaries=cells)
    >>> [(x["best"], round(x["best_pct"], 1), round(x["default_pct"], 1), round(x["gap_points"], 1), x["met"])
    ...  for x in default_vs_best_fixed(run)]
    [('sa', 18.0, 15.5, -2.5, True)]
    """
    if not run.series or run.series[0].mode != "ar":
        return []
    defaults = [info.label for info in run.series[1:] if info.mode in DEFAULT_MODES]
    fixed = [info.label for info in run.series[1:] if info.mode not in DEFAULT_MODES]
    if len(defaults) != 1 or not fixed:
        return []
    ratios, margins = run.speedups("output_throughput")
    out = []
    for level in run.levels:
        mine = ratios.get((defaults[0], level))
        others = [(name, ratios[(name, level)]) for name in fixed  # a mode that delivered nothing in a repeat is
                  if (name, level) in ratios and ratios[(name, level)].ratios  # not judged: no best on survivors
                  and not unjudged(run, "output_throughput", name, level)]
        if mine is None or not mine.ratios or not others or unjudged(run, "output_throughput", defaults[0], level):
            continue
        best, theirs = max(others, key=lambda item: item[1].mean)
        gaps = _paired_gaps(run, level, defaults[0], best)
        gap = statistics.fmean(gaps)  # the paired gaps' mean: the number their margin is the noise of
        row = {"concurrency": level, "default": defaults[0], "default_pct": 100 * (mine.mean - 1), "best": best,
               "best_pct": 100 * (theirs.mean - 1), "gap_points": gap, "gap_lo": min(gaps), "gap_hi": max(gaps),
               "noise_pct": _pct(margins.get((defaults[0], level))),
               "gap_noise_pct": _pct(difference_margin([g / 100 for g in gaps])), "samples": len(gaps),
               "met": gap >= -DEFAULT_AIM_POINTS - 1e-9 and 100 * (mine.mean - 1) >= -DEFAULT_AIM_POINTS - 1e-9}
        out.append({**row, "beyond_noise": _aim_beyond_noise(row)})
    return out


def _paired_gaps(run: "RunSummary", level: int, mine: str, theirs: str) -> list[float]:
    """Per repeat where both ran: the points between two series' changes against the baseline's run of that repeat."""
    field = "output_throughput"
    series = (run.series[0].label, mine, theirs)
    return [100 * (a - b) / base for base, a, b in zip(*(run.values(name, level, field) for name in series))
            if base and a and b]


def _aim_beyond_noise(x: dict[str, Any]) -> Optional[bool]:
    """Whether the verdict on the aim holds beyond the noise: met with both intervals (the gap's, the default's
    change) clear of the aim, or missed with one of them wholly past it; None with one sample."""
    if x["gap_noise_pct"] is None or x["noise_pct"] is None:
        return None
    aim = -DEFAULT_AIM_POINTS
    gap_lo, gap_hi = x["gap_points"] - x["gap_noise_pct"], x["gap_points"] + x["gap_noise_pct"]
    mine_lo, mine_hi = x["default_pct"] - x["noise_pct"], x["default_pct"] + x["noise_pct"]
    if x["met"]:
        return gap_lo >= aim and mine_lo >= aim
    return gap_hi < aim or mine_hi < aim


def _pct(value: Optional[float]) -> Optional[float]:
    return None if value is None else 100 * value


def default_aim_lines(run: RunSummary) -> list[str]:
    """The table under the output throughput table: the default against the best fixed mode, level by level."""
    rows = default_vs_best_fixed(run)
    if not rows:
        return []
    name = rows[0]["default"]

    def aim(x: dict[str, Any]) -> str:
        if x["met"]:
            if x["beyond_noise"] is None:
                return "met (one sample)"
            return "met" if x["beyond_noise"] else (f"met on the means, within noise (±{x['gap_noise_pct']:.1f} "
                                                    f"points, ±{x['noise_pct']:.1f}%)")

        def said(what: str, by: float, noise: Optional[float], unit: str) -> str:  # a shortfall, and its margin
            if noise is None:
                return f"{what.format(f'{by:.1f}')} (one sample)"
            d = shown_digits(by, noise, 1)  # "3.6% below ... beyond noise ±3.6%" would rest on hidden digits
            return (f"{what.format(f'{by:.{d}f}')} ({'within' if by <= noise else 'beyond'} noise "
                    f"±{noise:.{d}f}{unit})")

        short = [said(f"{{}} points below {x['best']}", -x["gap_points"], x["gap_noise_pct"],
                      " points")] if x["gap_points"] < -DEFAULT_AIM_POINTS else []
        short += [said(f"{{}}% below {run.series[0].label}", -x["default_pct"], x["noise_pct"],
                       "%")] if x["default_pct"] < -DEFAULT_AIM_POINTS else []
        return "missed: " + ", ".join(short)

    levels = " | ".join(str(x["concurrency"]) for x in rows)
    span = [f" ({x['gap_lo']:+.1f}…{x['gap_hi']:+.1f})" if x["gap_lo"] != x["gap_hi"] else "" for x in rows]
    return [f"The server's default (`{name}`) against the best fixed mode of each level, output throughput against "
            f"`{run.series[0].label}`; the aim: at least the best fixed mode's less {DEFAULT_AIM_POINTS:g} points, and "
            f"never more than {DEFAULT_AIM_POINTS:g}% below `{run.series[0].label}`:", "",
            f"| concurrency | {levels} |", "|---|" + "---:|" * len(rows),
            f"| {name} vs {run.series[0].label} | " + " | ".join(f"{x['default_pct']:+.1f}%" for x in rows) + " |",
            "| best fixed mode | " + " | ".join(f"{x['best']} {x['best_pct']:+.1f}%" for x in rows) + " |",
            f"| {name} against it (points; range over the repeats) | "
            + " | ".join(f"{x['gap_points']:+.1f}{s}" for x, s in zip(rows, span)) + " |",
            "| aim | " + " | ".join(aim(x) for x in rows) + " |", ""]


def _tokens_per_step_lines(run: RunSummary) -> list[str]:
    """Tokens per engine step (the acceptance length: 1.0 is plain decoding) per series and level, and by
    prompt category when the dataset names them."""
    if not any(s.mean_lookahead_tokens_per_step is not None for s in run.summaries):
        return []
    out = ["## Tokens per step", "", "Tokens the server emitted per engine step, as it reported them "
           "(`usage.lookahead` or `usage.speculation`): 1.0 is plain decoding; mean over requests "
           "(min–max over the repeats):", "",
           *_series_table(run, lambda series, c: _fmt_spread(*spread(
               run.values(series, c, "mean_lookahead_tokens_per_step")), 2))]
    by = run.tokens_per_step_by_category
    categories = list(dict.fromkeys(c for row in by.values() for c in row))
    if categories:
        out += ["", "By prompt category (every level and repeat pooled):", "",
                "| series | " + " | ".join(categories) + " |", "|---|" + "---:|" * len(categories)]
        for info in run.series:
            row = by.get(info.label, {})
            out.append(f"| {info.label} | " + " | ".join(_fmt(row.get(c), 2) for c in categories) + " |")
    return out + _source_lines(run) + [""]


def _engine_steps_lines(run: RunSummary) -> list[str]:
    """The server's own steps per series and level (the reference engine's /metrics, read before and after each):
    their wall time, the rows they computed and the sequences they decoded, what a mode's tokens per step cost;
    then :func:`_drain_lines`.

    >>> from trtlade.bench.metrics import LevelSummary
    >>> def cell(series, r, ms, rows, seqs=1.0):
    ...     return LevelSummary.model_construct(series=series, concurrency=1, repeat=r, engine_step_ms=ms,
    ...                                         engine_rows_per_step=rows, engine_sequences_per_step=seqs)
    >>> info = [SeriesInfo(label=m, server="a", base_url="http://h", model="m", mode=m) for m in ("ar", "sa")]
    >>> run = RunSummary(run_id="r", created="", series=info, levels=[1],
    ...                  summaries=[cell("ar", 0, 18.2, 1.0), cell("ar", 1, 18.4, 1.0), cell("sa", 0, 18.5, 2.8),
    ...                             cell("sa", 1, 18.9, 3.0)])
    >>> print("\\n".join(_engine_steps_lines(run)[6:-1]))
    | ar | 18.3 (18.2–18.4) ms, 1.0 rows from 1.0 sequences |
    | sa | 18.7 (18.5–18.9) ms, 2.9 rows from 1.0 sequences |
    """
    if not any(s.engine_step_ms is not None for s in run.summaries):
        return []
    def cell(series: str, level: int) -> str:
        ms = spread(run.values(series, level, "engine_step_ms"))
        rows = spread(run.values(series, level, "engine_rows_per_step"))[0]
        seqs = spread(run.values(series, level, "engine_sequences_per_step"))[0]
        if ms[0] is None or rows is None:
            return "—"
        return f"{_fmt_spread(*ms, 1)} ms, {rows:.1f} rows" + ("" if seqs is None else f" from {seqs:.1f} sequences")

    return ["## Engine steps", "", "The server's own decode steps while each level ran (its `/metrics`, read before "
            "and after): mean wall time of a step (min–max over the repeats), the rows it computed (drafts included; "
            "one a sequence is plain decoding) and the sequences it decoded, means over the repeats. A step's tokens "
            "(above) over its time is what a mode delivers:", "",
            *_series_table(run, cell), "", *_drain_lines(run)]


#: a series decoding this much less of its level's concurrency a step than the first series is noted; a tail this much
#: more of its level than the first series' is called a longer drain; below this many requests a worker the drain is
#: called a large part of the level
DRAIN_GAP = 0.05
DRAIN_LONGER = 0.05
DRAIN_SHORT = 4


def _tail_share(run: RunSummary, series: str, level: int) -> Optional[float]:
    """The mean over the repeats of the level's tail (``tail_s``: from its last request's send to its last answer)
    over its duration; None where no repeat measured it."""
    shares = [t / d for t, d in zip(run.values(series, level, "tail_s"), run.values(series, level, "duration_s"))
              if t is not None and d]
    return sum(shares) / len(shares) if shares else None


def _drain_lines(run: RunSummary) -> list[str]:
    """Where a series decoded fewer sequences a step than the first series at the same concurrency (by more than
    ``DRAIN_GAP`` of the concurrency), not in a one-wave level (:func:`_wave_lines` says those), and whether its tail
    -- from the level's last request sent to its last answer, as the load generator saw it -- took a larger share of
    its level than the first series' (by more than ``DRAIN_LONGER``). Two causes lower the count: a longer drain (once
    all its requests are sent no new one comes, and a series whose requests end at more spread-out times runs more of
    its steps with fewer requests beside them), and drafting itself (a mode that emits more tokens a step decodes the
    same requests in fewer steps while the server is full, so its tail's steps weigh more in its mean). The tail tells
    them apart; the note says which, that a drain is a large part of a level of fewer than ``DRAIN_SHORT`` requests a
    worker, and how to dilute it. Without tails (results saved before they were measured) it names the drain as the
    likely cause (failed requests and admission limits also lower the count).

    >>> from trtlade.bench.metrics import LevelSummary
    >>> def cell(series, seqs, tail):
    ...     return LevelSummary.model_construct(series=series, concurrency=4, repeat=0, engine_step_ms=40.0,
    ...                                         engine_rows_per_step=seqs, engine_sequences_per_step=seqs,
    ...                                         duration_s=4.0, tail_s=tail)
    >>> info = [SeriesInfo(label=m, server="a", base_url="http://h", model="m", mode=m) for m in ("ar", "auto")]
    >>> run = RunSummary(run_id="r", created="", series=info, levels=[4], settings={"num_prompts": 8},
    ...                  summaries=[cell("ar", 3.7, 1.2), cell("auto", 3.3, 1.6)])
    >>> print(_drain_lines(run)[0])  # doctest: +NORMALIZE_WHITESPACE
    Fewer sequences a step than `ar` at the same concurrency, and a longer drain: `auto` 3.3 against 3.7 at
    concurrency 4 (its tail 40% of the level against 30%). The tail runs from a level's last request sent to its
    last answer: no new request comes, and a series whose requests end at more spread-out times runs more of its
    steps with fewer requests beside them, up to its last answer. With 8 requests a level (2 a worker at
    concurrency 4) the drain is a large part of the level. The output throughput measures the drain along with the
    mode (the decode throughput does not); several times as many requests a level as the concurrency
    (`--num-prompts`) dilute it.

    The same count with a tail of 30% of the level: not a longer drain.

    >>> run.summaries[1] = cell("auto", 3.3, 1.2)
    >>> print(_drain_lines(run)[0])  # doctest: +NORMALIZE_WHITESPACE
    Fewer sequences a step than `ar` at the same concurrency, its tail (from the level's last request sent to its
    last answer) at most 5 points of the level longer than `ar`'s: `auto` 3.3 against 3.7 at concurrency 4 (its
    tail 30% of the level against 30%). The lower count does not come from a longer drain: a mode that emits more
    tokens a step decodes the same requests in fewer steps while the server is full, so the steps of its tail weigh
    more in its mean (failed requests and the server's limits also lower the count).
    """
    if not run.series:
        return []
    base, n = run.series[0].label, run.settings.get("num_prompts")
    longer, packed, unknown, short = [], [], [], []
    for level in run.levels:
        if _one_wave(run, level):  # _wave_lines says it
            continue
        theirs = spread(run.values(base, level, "engine_sequences_per_step"))[0]
        base_tail = _tail_share(run, base, level)
        for info in run.series[1:]:
            mine = spread(run.values(info.label, level, "engine_sequences_per_step"))[0]
            if mine is None or theirs is None or theirs - mine <= DRAIN_GAP * level + 1e-9:
                continue
            said = f"`{info.label}` {mine:.1f} against {theirs:.1f} at concurrency {level}"
            tail = _tail_share(run, info.label, level)
            if tail is None or base_tail is None:
                unknown.append(said)
            elif tail - base_tail <= DRAIN_LONGER:
                packed.append(f"{said} (its tail {tail:.0%} of the level against {base_tail:.0%})")
                continue
            else:
                longer.append(f"{said} (its tail {tail:.0%} of the level against {base_tail:.0%})")
            if isinstance(n, int) and n < DRAIN_SHORT * level:
                short.append(f"{n / level:g} a worker at concurrency {level}")
    per_worker = ", ".join(dict.fromkeys(short))
    size = f" With {n} requests a level ({per_worker}) the drain is a large part of the level." if short else ""
    dilute = (f"{size} The output throughput measures the drain along with the mode (the decode throughput does not); "
              "several times as many requests a level as the concurrency (`--num-prompts`) dilute it.")
    out: list[str] = []
    if longer:
        out += [f"Fewer sequences a step than `{base}` at the same concurrency, and a longer drain: "
                f"{'; '.join(longer)}. The tail runs from a level's last request sent to its last answer: no new "
                "request comes, and a series whose requests end at more spread-out times runs more of its steps with "
                "fewer requests beside them, up to its last answer." + ("" if unknown else dilute), ""]
    if packed:
        out += [f"Fewer sequences a step than `{base}` at the same concurrency, its tail (from the level's last "
                f"request sent to its last answer) at most {100 * DRAIN_LONGER:g} points of the level longer than "
                f"`{base}`'s: {'; '.join(packed)}. The lower count does not come from a longer drain: a mode that "
                "emits more tokens a step decodes the same requests in fewer steps while the server is full, so the "
                "steps of its tail weigh more in its mean (failed requests and the server's limits also lower the "
                "count).", ""]
    if unknown:
        out += [f"Fewer sequences a step than `{base}` at the same concurrency: {'; '.join(unknown)}. The likely cause "
                "is the level's drain (failed requests and the server's limits also lower the count): once all its "
                "requests are sent no new one comes, and a series whose requests end at more spread-out times runs "
                f"more of its steps with fewer requests beside them, up to its last answer.{dilute}", ""]
    return out


#: a load generator keeping this many cores busy (on average over a level) is near the one core its event loop has
BENCH_BUSY = 0.9
#: below this share of a shared host's CPUs the load generator is said to weigh little on the server's steps
BENCH_SHARE = 0.05


def _cpu_lines(run: RunSummary) -> list[str]:
    """The cores the server process and the load generator kept busy while each level ran, then what they mean: on
    the server's host the load generator's CPU time is time the server's threads could not run (its steps include
    those waits), and a load generator near a whole core (its one event loop) sends and reads late.

    >>> from trtlade.bench.metrics import LevelSummary
    >>> def cell(series, r, server, bench):
    ...     return LevelSummary.model_construct(series=series, concurrency=4, repeat=r, server_cpu_cores=server,
    ...                                         bench_cpu_cores=bench)
    >>> info = [SeriesInfo(label=m, server="a", base_url="http://127.0.0.1:8000", model="m", mode=m)
    ...         for m in ("ar", "auto")]
    >>> run = RunSummary(run_id="r", created="", series=info, levels=[4], metadata={"cpu": "AMD EPYC", "cpu_count": 2},
    ...                  summaries=[cell("ar", 0, 1.80, 0.20), cell("ar", 1, 1.84, 0.22), cell("auto", 0, 1.86, 0.18),
    ...                             cell("auto", 1, None, 0.18)])
    >>> print("\\n".join(_cpu_lines(run)[4:]))  # doctest: +NORMALIZE_WHITESPACE
    | concurrency | 4 |
    |---|---:|
    | ar | server 1.82 (1.80–1.84), load generator 0.21 (0.20–0.22) |
    | auto | server 1.86, load generator 0.18 |
    <BLANKLINE>
    The load generator ran on the server's host (it sent to a loopback address; AMD EPYC, 2 CPUs) and kept up to
    0.22 of a core busy (`ar` at concurrency 4, 11% of the host's CPUs): time the server's threads could not run, so
    the server's steps include waits that a server on a host of its own would not have, more of them on a host with
    few cores. Modes compare on equal terms only where their load generator's CPU above is alike.
    <BLANKLINE>
    """
    busy = [(round(s.bench_cpu_cores, 2), s.series, s.concurrency) for s in run.summaries  # compared as printed
            if s.bench_cpu_cores is not None]
    if not busy:
        return []

    def cell(series: str, level: int) -> str:
        server, bench = (spread(run.values(series, level, key)) for key in ("server_cpu_cores", "bench_cpu_cores"))
        if bench[0] is None:
            return "—"
        return ("" if server[0] is None else f"server {_fmt_spread(*server, 2)}, ") + \
            f"load generator {_fmt_spread(*bench, 2)}"

    lines = ["## CPU use", "", "Cores kept busy on average while each level ran (CPU time over the level's wall time; "
             "mean (min–max) over the repeats): the server process's, from its `/metrics` "
             "(`process_cpu_seconds_total`, where it has it), and the load generator's own:", "",
             *_series_table(run, cell), ""]
    local = {info.label for info in run.series if _loopback(info.base_url)}  # served on the load generator's host
    cpus, here = run.metadata.get("cpu_count"), max((b for b in busy if b[1] in local), default=None)
    if here is not None and isinstance(cpus, int) and cpus > 0:
        mine, series, level = here
        share = round(mine / cpus, 2)  # compared as it is printed
        shared = (f"The load generator ran on the server's host (it sent to a loopback address; "
                  f"{run.metadata.get('cpu') or 'unknown CPU'}, {cpus} CPUs) and kept up to {mine:.2f} of a core busy "
                  f"(`{series}` at concurrency {level}, {share:.0%} of the host's CPUs)")
        lines += [shared + (f": under {BENCH_SHARE:.0%}, little time taken from the server's threads." if
                            share < BENCH_SHARE else
                            ": time the server's threads could not run, so the server's steps include waits that a "
                            "server on a host of its own would not have, more of them on a host with few cores. Modes "
                            "compare on equal terms only where their load generator's CPU above is alike."), ""]
    most, series, level = max(busy)
    if most >= BENCH_BUSY:
        lines += [f"The load generator kept {most:.2f} cores busy (`{series}` at concurrency {level}), near the one "
                  "core its event loop runs on: it may have sent requests and read their tokens late, so the "
                  "latencies and throughputs measure it as well as the server. Fewer concurrent requests, or a load "
                  "generator on a host of its own, leave it room.", ""]
    return lines


def _loopback(url: str) -> bool:
    """Whether ``url`` names this host (a loopback address, as ``--launch`` serves on).

    >>> [_loopback(u) for u in ("http://127.0.0.1:8000", "http://localhost:8000/v1", "http://[::1]:80", "http://h:1")]
    [True, True, True, False]
    """
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _series_table(run: RunSummary, cell: Callable[[str, int], str]) -> list[str]:
    """A Markdown table of one row per series and one column per level, ``cell(series, level)`` in each."""
    return ["| concurrency | " + " | ".join(str(c) for c in run.levels) + " |", "|---|" + "---:|" * len(run.levels),
            *(f"| {info.label} | " + " | ".join(cell(info.label, c) for c in run.levels) + " |" for info in run.series)]


def _failures_section(run: RunSummary) -> list[str]:
    failed = [s for s in run.summaries if s.failed]
    total = sum(s.failed for s in run.summaries)
    sent = sum(s.completed + s.failed for s in run.summaries)
    if not failed:
        return ["## Failures", "", f"None: all {sent} measured requests completed.", "", *_without_text_lines(run)]
    out = ["## Failures", "", f"**{total} of {sent} measured requests failed** (counted in `failed`, "
           "left out of the latency statistics).", ""]
    per_level = [(info.label, {level: sum(v or 0 for v in run.values(info.label, level, "failed"))
                               for level in run.levels}) for info in run.series]
    out.append(comparison_table(run.levels, per_level, decimals=0,  # counts over the repeats, not their mean
                                header="failed (all repeats) \\ concurrency", changes=False))
    out.append("")
    for s in failed:
        kinds = ", ".join(f"{k}: {v}" for k, v in s.failures_by_kind.items())
        examples = "; ".join(f"`{e}`" for e in s.error_examples)
        repeat = f" (repeat {s.repeat + 1})" if run.repeats > 1 else ""
        out.append(f"- {s.series} @ concurrency {s.concurrency}{repeat}: {s.failed} failed ({kinds}). {examples}")
    out.append("")
    return out + _without_text_lines(run)


def _without_text_lines(run: RunSummary) -> list[str]:
    """The completed requests whose streams carried no text, where any did: counted as completed, timed in E2EL,
    and left out of TTFT, TPOT and ITL (nothing arrived to time)."""
    cells = [s for s in run.summaries if s.completed_without_text]
    if not cells:
        return []
    total = sum(s.completed_without_text for s in cells)
    out = [f"**{total} completed request(s) carried no text** (an answer that is only an end of sequence): counted "
           "as completed and in E2EL and the throughputs, left out of TTFT, TPOT and ITL.", ""]
    for s in cells:
        repeat = f" (repeat {s.repeat + 1})" if run.repeats > 1 else ""
        out.append(f"- {s.series} @ concurrency {s.concurrency}{repeat}: {s.completed_without_text} of "
                   f"{s.completed} completed")
    return out + [""]


def output_agreement(records: Sequence[RequestRecord], series: Sequence[str]) -> dict[str, dict[str, int]]:
    """Compare each series' answers with the first series' answers to the same prompts.

    Lookahead must not change the text, greedy or sampled with the same seed (the bench sends prompt i
    with seed + i in every series): ``identical < compared`` flags a server
    whose lookahead (or batching) changes outputs. Keyed by (level, request index): every series
    sends the same prompt sequence at every level.
    """
    if len(series) < 2:
        return {}
    base = {(r.repeat, r.concurrency, r.index): r.output_text for r in records if r.series == series[0] and r.ok}
    out: dict[str, dict[str, int]] = {}
    for name in series[1:]:
        pairs = [(base[(r.repeat, r.concurrency, r.index)], r.output_text) for r in records
                 if r.series == name and r.ok and (r.repeat, r.concurrency, r.index) in base]
        out[name] = {"compared": len(pairs), "identical": sum(a == b for a, b in pairs)}
    return out


def _agreement_lines(run: RunSummary) -> list[str]:
    if not run.output_agreement:
        return []
    base = run.series[0].label
    lines = ["## Output agreement", "",
             f"Answers compared with `{base}`'s answer to the same prompt (with and without lookahead, the text "
             "must be the same: greedy, or sampled with the same seed on the reference engine; another server's "
             "sampling can differ).", ""]
    for name, counts in run.output_agreement.items():
        lines.append(f"- {name}: {counts['identical']} of {counts['compared']} identical")
    return lines + [""]


def _meta_lines(value: Any, indent: str = "") -> list[str]:
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, list) and all(not isinstance(x, (dict, list)) for x in item):
                lines.append(f"{indent}- {key}: `{item}`")
            elif isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}- {key}:")
                lines.extend(_meta_lines(item, indent + "  "))
            else:
                lines.append(f"{indent}- {key}: `{item}`")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                lines.extend(_meta_lines(item, indent))
            else:
                lines.append(f"{indent}- `{item}`")
    return lines


def _server_lines(metadata: dict[str, Any]) -> list[str]:
    """What served the run (engine, preset, spec), one line per trtlade server."""
    servers = metadata.get("servers") if isinstance(metadata.get("servers"), dict) else {}
    lines = [f"- server {label}: {text}" for label, info in servers.items()
             if isinstance(info, dict) and (text := describe_server(info.get("version")))]
    return lines + [""] if lines else []


def render_markdown(run: RunSummary) -> str:
    """summary.md: the two comparison tables, failures, full metrics per series, series, metadata."""
    out = [f"# trtlade bench {run.run_id}", ""]
    s = run.settings
    out.append(f"{s.get('endpoint', '?')} endpoint, dataset `{s.get('dataset', '?')}`, "
               f"{s.get('num_prompts', '?')} requests per level and series ({s.get('num_warmups', 0)} "
               f"warm-up, in the first repeat), {s.get('repeats', 1)} repeat(s), "
               f"max_tokens {s.get('max_tokens', '?')}, temperature {s.get('temperature', '?')}, "
               f"ignore_eos {s.get('ignore_eos', '?')}.")
    out += host_lines(run.metadata)
    out += _token_source_lines(run)
    out.append("")
    out += _server_lines(run.metadata)
    for title, field, decimals, _ in TABLES:
        out += [f"## {title}", "", noise_table(run, field, decimals=decimals), ""]
        if field == "output_throughput":
            out += _wave_lines(run)
            out += default_aim_lines(run)
    out += family_lines(run)
    out += _tokens_per_step_lines(run)
    out += _engine_steps_lines(run)
    out += _cpu_lines(run)
    out += _prefix_cache_lines(run)
    out += _failures_section(run)
    out += _agreement_lines(run)
    out += ["## Series", ""]
    for info in run.series:
        sent = ("no `lookahead` field (server default)" if info.lookahead is None else f"`lookahead` {info.lookahead}"
                ) if info.speculation is None else f"`speculation` {json.dumps(info.speculation)}"
        used: list[str] = []
        for summ in run.summaries:
            if summ.series == info.label:
                used += [x for x in summ.lookahead_specs if x not in used]
        reported = f"; the server reported {', '.join(used)}" if used else ""
        out.append(f"- **{info.label}**: {info.base_url} model `{info.model}`, mode `{info.mode}`: {sent}{reported}")
    out.append("")
    for info in run.series:
        over = (f"Every repeat: counts summed over the {run.repeats}, every other metric their mean (min–max)."
                if run.repeats > 1 else "One repeat.")
        out += [f"## Full metrics: {info.label}", "", over, "", _full_metric_table(run, info.label), ""]
    out += ["## Metadata", ""] + _meta_lines(run.metadata) + ["", "## Settings", ""] + _meta_lines(run.settings)
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- files
def make_run_id(labels: Sequence[str], *, label: Optional[str] = None, now: Optional[float] = None) -> str:
    """``YYYYmmdd-HHMMSS-<label>``; the label defaults to the series joined by ``-vs-``.

    >>> make_run_id(["ar", "4-2-4"], now=0.0)[15:]
    '-ar-vs-4-2-4'
    """
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    text = label if label else "-vs-".join(labels)
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()[:40].strip("-") or "run"
    return f"{stamp}-{slug}"


def _csv(run: RunSummary, path: Path) -> None:
    import pandas as pd

    rows = []
    for s in run.summaries:
        row = s.model_dump()
        row["failures_by_kind"] = json.dumps(row["failures_by_kind"])
        row["error_examples"] = " | ".join(row["error_examples"])
        row["lookahead_specs"] = ";".join(row["lookahead_specs"])
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)


def _plots(run: RunSummary, folder: Path) -> list[Path]:
    """The run's figures against concurrency, one line per mode: TTFT, output and decode throughput, and (with a
    baseline and another mode) the output throughput speedup."""
    import matplotlib

    matplotlib.use("Agg")

    def per_series(field: str) -> list[tuple[str, dict[int, tuple]]]:
        return [(info.label, {c: spread(run.values(info.label, c, field)) for c in run.levels}) for info in run.series]

    bars_note = f"bars: min–max of {run.repeats} repeats" if run.repeats > 1 else "one repeat: no error bars"
    written = [
        _plot(run, folder / "ttft_vs_concurrency.png", "Time to first token", "mean TTFT (ms)",
              per_series("mean_ttft_ms"), note=bars_note),
        _plot(run, folder / "output_throughput_vs_concurrency.png", "Output throughput: what the server delivers",
              "completion tokens/s", per_series("output_throughput"), note=bars_note),
        _plot(run, folder / "decode_throughput_vs_concurrency.png",
              "Decode throughput, sum over concurrent requests (not what the server delivers)", "tokens/s",
              per_series("aggregate_decode_throughput"), note=bars_note)]
    if len(run.series) > 1:
        speed, band = _speedup_bars(run)
        written.append(_plot(run, folder / "speedup_vs_concurrency.png",
                             f"Output throughput speedup vs {run.series[0].label}", "speedup (x)", speed, ref=1.0,
                             note=bars_note + band))
    return written


def _speedup_bars(run: RunSummary) -> tuple[list[tuple[str, dict[int, tuple]]], str]:
    """Each mode's output throughput against the baseline's per level, ``(mean, min, max)``, and the noise band's
    words for the axis."""
    ratios, margins = run.speedups("output_throughput")
    base_label = run.series[0].label
    speed = [(f"{info.label} / {base_label}",
              {c: (s.mean, s.lo, s.hi) if (s := ratios[(info.label, c)]).ratios else (None, None, None)
               for c in run.levels}) for info in run.series[1:]]
    known = [m for m in margins.values() if m is not None]
    return speed, f"; within noise: 1 ± {min(known):.3f} to {max(known):.3f} by cell" if known else ""


def _plot(run: RunSummary, path: Path, title: str, ylabel: str, bars: list[tuple[str, dict[int, tuple]]],
          ref: Optional[float] = None, note: str = "") -> Path:
    """One figure against the run's levels; ``bars``: per line, per level ``(mean, min, max)``, the error bars
    spanning min..max over the repeats; ``ref``: a dashed horizontal line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, values in bars:
        xs = [c for c in run.levels if values.get(c, (None,))[0] is not None]
        mean = [values[c][0] for c in xs]
        low = [values[c][0] - (values[c][1] if values[c][1] is not None else values[c][0]) for c in xs]
        high = [(values[c][2] if values[c][2] is not None else values[c][0]) - values[c][0] for c in xs]
        ax.errorbar(xs, mean, yerr=[low, high], marker="o", capsize=3, label=label)
    if ref is not None:
        ax.axhline(ref, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(run.levels)
    ax.set_xlabel("concurrency" + (f"  ({note})" if note else ""))
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(title, 64), fontsize=11)  # a long title wraps rather than leave the figure
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(folder: Path, run: RunSummary, records: Sequence[RequestRecord], *,
                 plots: bool = True) -> list[Path]:
    """Write every report file into ``folder`` (created); return the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    path = folder / "per_request.jsonl"
    firsts: dict[tuple[str, int, int], float] = {}  # each level's first send
    for rec in records:
        key = (rec.series, rec.concurrency, rec.repeat)
        firsts[key] = min(firsts.get(key, rec.start), rec.start)
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec.to_json(firsts[(rec.series, rec.concurrency, rec.repeat)]), ensure_ascii=False)
                     + "\n")
    written.append(path)
    path = folder / SUMMARY_JSON
    path.write_text(run.model_dump_json(indent=2) + "\n", encoding="utf-8")
    written.append(path)
    path = folder / "summary.csv"
    _csv(run, path)
    written.append(path)
    path = folder / "summary.md"
    path.write_text(render_markdown(run), encoding="utf-8")
    written.append(path)
    if plots:
        written += _plots(run, folder)
    return written


def _not_finite(name: str) -> Any:
    raise ReportError(f"it holds {name}, not a number a bench writes")


def load_run(path: Path, *, what: str = "run") -> RunSummary:
    """Read ``<path>/summary.json`` (or ``path`` itself if it is the JSON file)."""
    file = path / SUMMARY_JSON if path.is_dir() else path
    if not path.exists():
        raise ReportError(f"{what} {str(path)!r} does not exist", where=str(path),
                          hint="give a run folder written by `trtlade bench` (reports/<run-id>)")
    if not file.is_file():
        raise ReportError(f"{what} {str(path)!r} has no {SUMMARY_JSON}", where=str(path),
                          hint="give a run folder written by `trtlade bench` (reports/<run-id>)")
    try:
        text = read_user_text(file)
    except UserFileError as exc:
        raise ReportError(f"{what}: {exc.message}", where=exc.where, hint=exc.hint) from None
    try:
        json.loads(text, parse_constant=_not_finite, object_pairs_hook=keys_once)
    except (ReportError, RepeatedKeyError) as exc:
        raise ReportError(exc.message, where=str(file), hint="a bench summary holds finite numbers and each key once: "
                          "was it edited by hand?") from None
    except json.JSONDecodeError as exc:  # where it breaks: a truncated or hand-edited file
        raise ReportError(f"{file} is not a trtlade bench summary: not JSON ({exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno})", where=f"{file}:{exc.lineno}:{exc.colno}",
                          hint="give a run folder written by `trtlade bench` (reports/<run-id>), or its "
                               f"{SUMMARY_JSON}; was it cut short or edited by hand?") from None
    except ValueError:
        pass  # JSON Python will not read (an integer of 5,000 digits): the validation below says so
    try:
        return RunSummary.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        not_json = first.get("type") == "json_invalid"
        raise ReportError(f"{file} is not a trtlade bench summary: "
                          + ("not JSON" if not_json else f"{loc + ': ' if loc else ''}{first['msg']}"), where=str(file),
                          hint="give a run folder written by `trtlade bench` (reports/<run-id>), or its "
                               f"{SUMMARY_JSON}" if not_json or path.is_file() and path.name != SUMMARY_JSON else
                               "was it written by another tool or edited by hand?") from None


def compare_runs(run_a: RunSummary, run_b: RunSummary, *, series_a: Optional[str] = None,
                 series_b: Optional[str] = None) -> str:
    """Markdown: the two tables comparing series of run A (baseline) with series of run B.

    Pairs: the series named, else the only series of each run, else every series name both runs
    share (ar with ar, lookahead with lookahead ...). Columns: every level of either run.
    """
    if run_a == run_b:  # the same summary twice (run ids alone can repeat: two runs begun in the same second)
        raise ReportError(f"A and B are the same run ({run_a.run_id})", where="RUN_B",
                          hint="give two runs: compare runs made apart (one per server, or before and after a change)")
    pairs = _pairs(run_a, run_b, series_a, series_b)
    shared = sorted(set(run_a.levels) & set(run_b.levels))
    if not shared:
        raise ReportError(f"the runs share no concurrency level (A: {', '.join(map(str, run_a.levels))}; B: "
                          f"{', '.join(map(str, run_b.levels))}): nothing can be compared", where="RUN_B",
                          hint="compare runs measured at a common level (trtlade bench -c, --max-concurrency)")
    levels = sorted(set(run_a.levels) | set(run_b.levels))
    out = [f"# Comparison: A = {run_a.run_id}, B = {run_b.run_id}", "",
           "Each cell: the mean (min–max) over a run's repeats. The runs were measured apart, so nothing pairs their "
           "repeats: a change is judged by Welch's 95% t interval of the difference of the means (its ± margin, % of "
           "A), and is `one sample` when either run has one repeat. A host's drift between the runs is in the "
           "change too: for a verdict on two versions, run them in one `trtlade bench` (two servers, "
           "interleaved).", ""]
    out += _compared_runs_lines(run_a, run_b, pairs)
    for name, run in (("A", run_a), ("B", run_b)):
        out += [f"- {name}: {line}" for line in _token_source_lines(run)]
    left = [f"{name}'s {label}" for name, run, paired in (("A", run_a, {a for a, _ in pairs}),
                                                         ("B", run_b, {b for _, b in pairs}))
            for label in (s.label for s in run.series) if label not in paired]
    if left:
        out += [f"- Not compared (no series of the same name in the other run, or not named): {', '.join(left)}; "
                "pick a pair with --series-a and --series-b.", ""]
    for title, field, decimals, _ in TABLES:
        out += [f"## {title}", ""]
        for sa, sb in pairs:
            out += [_unpaired_table(levels, (f"A {sa}", run_a, sa), (f"B {sb}", run_b, sb), field, decimals), ""]
    for name, run in (("A", run_a), ("B", run_b)):
        failed = sum(s.failed for s in run.summaries)
        sent = sum(s.failed + s.completed for s in run.summaries)
        out.append(f"- {name}: {run.run_id}: {', '.join(f'{s.label} ({s.base_url}, {s.model})' for s in run.series)}; "
                   f"{failed} of {sent} requests failed")
    return "\n".join(out) + "\n"


#: the settings that decide a run's numbers: two runs that differ in one are not the same measurement (``seed``: the
#: prompts a ``random`` dataset draws and the sampling seeds; ``dataset_source``: the file a dataset was read from)
_COMPARED_SETTINGS = ("dataset", "dataset_source", "seed", "num_prompts", "max_tokens", "temperature", "top_p",
                      "ignore_eos", "endpoint", "prefix_cache")
#: what a paired series sent that decides its numbers
_SERIES_FIELDS = ("model", "mode", "lookahead", "speculation")


def _compared_runs_lines(run_a: RunSummary, run_b: RunSummary, pairs: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Each run's hosts (the load generator's CPU and the server's, as its /version names it) and, as warnings, what
    differs between the two runs beyond the code: the CPU that served (else the load generator's), a setting that
    decides the numbers, what served the first series, what a paired series sent (its model, mode, drafting)."""
    lines = [f"- {name}: {_run_hosts(run)}" for name, run in (("A", run_a), ("B", run_b))]
    served = [_served(run) for run in (run_a, run_b)]
    hosts = [_version_host(v) for v in served]
    if not all(hosts):  # one side's serving host unknown: the load generators' are what there is to compare
        hosts = [_host_text(run.metadata) for run in (run_a, run_b)]
    differ = [f"the CPU ({hosts[0] or '?'} against {hosts[1] or '?'})"] if hosts[0] != hosts[1] else []
    differ += [f"`{key}` ({run_a.settings.get(key)!r} against {run_b.settings.get(key)!r})"
               for key in _COMPARED_SETTINGS if run_a.settings.get(key) != run_b.settings.get(key)
               and (key != "seed" or _seed_matters(run_a.settings) or _seed_matters(run_b.settings))]
    servers = [describe_server(v) for v in served]
    if all(servers) and servers[0] != servers[1]:
        differ.append(f"the server ({servers[0]} against {servers[1]})")
    infos = ({i.label: i for i in run_a.series}, {i.label: i for i in run_b.series})
    for name_a, name_b in pairs:
        first, second = infos[0][name_a], infos[1][name_b]
        differ += [f"{name_a}'s `{key}` ({getattr(first, key)!r} against {getattr(second, key)!r})"
                   for key in _SERIES_FIELDS if getattr(first, key) != getattr(second, key)
                   and not (key == "mode" and name_a != name_b)]
    if differ:
        lines.append("- **The runs differ beyond what is compared**: " + "; ".join(differ) + ". A change below holds "
                     "for these differences together, not for one of them.")
    return lines + [""]


def _seed_matters(settings: dict[str, Any]) -> bool:
    """Whether a run's seed decided anything: it draws a ``random`` dataset's prompts and seeds sampled requests (a
    run recorded without its dataset's sampling: assumed to)."""
    return settings.get("dataset_sampling", "random") == "random" or (settings.get("temperature") or 0) > 0


def _served(run: RunSummary) -> Optional[dict[str, Any]]:
    """The /version of the server behind a run's first series (None where not recorded)."""
    servers = run.metadata.get("servers")
    if not run.series or not isinstance(servers, dict):
        return None
    entry = servers.get(run.series[0].server)
    version = entry.get("version") if isinstance(entry, dict) else None
    return version if isinstance(version, dict) else None


def _run_hosts(run: RunSummary) -> str:
    """``AMD EPYC ..., 2 CPUs`` (the load generator served too), or both hosts named."""
    here = _host_text(run.metadata) or "not recorded"
    there = _version_host(_served(run))
    if there == here:
        return f"{here} (the load generator and the server)"
    return f"load generator {here}; server " + (there or "host not recorded")


def _token_source_lines(run: RunSummary) -> list[str]:
    """A warning for each series whose server sent no ``usage`` (it ignored ``stream_options.include_usage``): its
    tokens were counted as content chunks, fewer than its tokens where a chunk carries several (a drafting mode)."""
    chunked = [info.label for info in run.series
               if any(s.tokens_source in ("chunks", "mixed") for s in run.summaries if s.series == info.label)]
    if not chunked:
        return []
    return [f"**Token counts of {', '.join(chunked)} are content chunks, not tokens**: the server sent no `usage` "
            "(it ignored `stream_options.include_usage`), so every throughput of these series counts one token per "
            "chunk, fewer than were sent where a chunk carries several (a drafting mode)."]


def host_lines(metadata: dict[str, Any]) -> list[str]:
    """Where the run ran: one host where every server's /version names the load generator's CPU; else the load
    generator's, and each server's as its /version names it (or that it does not). A speed figure holds on the host
    that served it."""
    here = _host_text(metadata)
    servers = metadata.get("servers") if isinstance(metadata.get("servers"), dict) else {}
    hosts = {label: _version_host(info.get("version") if isinstance(info, dict) else None)
             for label, info in servers.items()}
    if here and not hosts:  # a report that recorded no server
        return [f"Host: {here} (a speed figure holds on the host that measured it)."]
    if here and all(h == here for h in hosts.values()):
        return [f"Host: {here}, the load generator and the server (a speed figure holds on the host that served it)."]
    lines = [f"Load generator: {here}." if here else "Load generator: its host is not recorded."]
    for label, text in hosts.items():
        name = f"Server {label}" if label else "The server"  # a tune run has one, unlabelled
        lines.append(f"{name} ran on: {text} (a speed figure holds on the host that served it)." if text else
                     f"{name}: its host is not known (its /version names none): a speed figure holds on "
                     "that host, not on the load generator's.")
    return lines


def _version_host(version: Any) -> Optional[str]:
    """The serving host a trtlade server's /version names (``host``), as :func:`_host_text` words it; else None."""
    host = version.get("host") if isinstance(version, dict) else None
    return _host_text(host) if isinstance(host, dict) else None


def _host_text(metadata: dict[str, Any]) -> Optional[str]:
    """``AMD EPYC (AuthenticAMD family 25 model 17), CPU class x86-64, AVX2+FMA (no AVX-512), 2 CPUs``."""
    if not (metadata.get("cpu") or metadata.get("cpu_count")):
        return None
    ident = f" ({metadata['cpu_id']})" if metadata.get("cpu_id") else ""
    kind = f", CPU class {metadata['cpu_class']}" if metadata.get("cpu_class") else ""
    return f"{metadata.get('cpu') or 'unknown CPU'}{ident}{kind}, {metadata.get('cpu_count') or '?'} CPUs"


def _unpaired_table(levels: Sequence[int], a: tuple[str, RunSummary, str], b: tuple[str, RunSummary, str],
                    field: str, decimals: int) -> str:
    """Rows A and B (mean (min–max) over their repeats) and the change of B against A with its unpaired verdict."""
    values = {label: {c: [v for v in run.values(series, c, field) if v is not None] for c in levels}
              for label, run, series in (a, b)}
    lines = ["| concurrency | " + " | ".join(str(c) for c in levels) + " |", "|---|" + "---:|" * len(levels)]
    for label, run, series in (a, b):  # a cell whose requests failed says so, as the bench's own tables do
        lines.append(f"| {label} | " + " | ".join(
            _fmt_spread(*spread(values[label][c]), decimals)
            + _failed(int(sum(v or 0 for v in run.values(series, c, "failed")))) for c in levels) + " |")
    cells = []
    for c in levels:
        base, other = values[a[0]][c], values[b[0]][c]
        if not base or not other or not statistics.fmean(base):
            cells.append("—")
            continue
        lost = sum(int(sum(v or 0 for v in run.values(series, c, "failed"))) for _, run, series in (a, b))
        if field in COMPLETED_ONLY and lost:
            ratio = statistics.fmean(other) / statistics.fmean(base)
            cells.append(f"{(ratio - 1) * 100:+.1f}% not judged: {lost} failed request{'s' if lost > 1 else ''} "
                         "left out")
            continue
        ratio, m = unpaired(base, other)
        said = {"faster": "higher", "slower": "lower"}.get(verdict(ratio, m), verdict(ratio, m))
        cells.append(_judged((ratio - 1) * 100, "", said, m))
    lines.append(f"| {b[0]} vs {a[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pairs(run_a: RunSummary, run_b: RunSummary, series_a: Optional[str],
           series_b: Optional[str]) -> list[tuple[str, str]]:
    names_a = [s.label for s in run_a.series]
    names_b = [s.label for s in run_b.series]
    for name, names, opt, run in ((series_a, names_a, "--series-a", run_a), (series_b, names_b, "--series-b", run_b)):
        if name is not None and name not in names:
            raise ReportError(f"{opt} {name!r}: run {run.run_id} has no such series", where=opt,
                              hint=f"its series: {', '.join(names)}")
    pick_a = [series_a] if series_a else names_a
    pick_b = [series_b] if series_b else names_b
    if len(pick_a) == 1 and len(pick_b) == 1:
        return [(pick_a[0], pick_b[0])]
    if series_a or series_b:
        one = pick_a[0] if len(pick_a) == 1 else pick_b[0]
        other = pick_b if len(pick_a) == 1 else pick_a
        if one in other:
            return [(one, one)]
        raise ReportError(f"series {one!r} is not in the other run", where="--series-a/--series-b",
                          hint="name the series of both runs: --series-a NAME --series-b NAME")
    common = [n for n in names_a if n in names_b]
    if not common:
        raise ReportError(f"the runs share no series name (A: {', '.join(names_a)}; B: {', '.join(names_b)})",
                          where="--series-a/--series-b", hint="pick one of each: --series-a NAME --series-b NAME")
    return [(n, n) for n in common]


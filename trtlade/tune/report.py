"""The tune report folder ``reports/<run-id>/``: what was measured, what was chosen, what to do.

=====================  ==============================================================================
file                   what
=====================  ==============================================================================
``summary.md``         candidates and pruning, the speedup table per (spec, concurrency), the noise,
                       the choice per level with its reason, the schedule, the engine to build
``schedule.yml``       the schedule as a YAML snippet for ``lookahead:`` (or ``trtlade tune --apply``)
``speculative_config.yml``  with NGram / SA candidates: the TensorRT-LLM 1.3+ equivalent, a ``speculative_config``
                       block for ``trtllm-serve --config`` (one drafter, ``max_concurrency``)
``tune.json``          everything above as data, plus every run
``cells.csv``          one row per (spec, concurrency): throughput, speedup, TTFT, TPOT
``speedup_heatmap.png``  speedup over (1,1,0) per (spec, concurrency), chosen cells outlined
=====================  ==============================================================================

Measurements stay data (:class:`TuneResult`) until this module formats them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trtlade.bench.noise import CONFIDENCE
from trtlade.bench.meta import describe_server
from trtlade.bench.report import host_lines
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec
from trtlade.tune.candidates import Candidates
from trtlade.tune.select import Choice, PytorchChoice, Run, Table, is_drafter, is_lookahead

__all__ = ["TuneResult", "Recommendation", "recommend", "write_report", "summary_markdown", "schedule_yaml",
           "speculative_config_yaml"]


@dataclass(frozen=True)
class Recommendation:
    """The smallest engine (W,N,G) that admits every chosen spec, and how to build it."""

    spec: LookaheadSpec
    max_draft_len: int
    build_command: Optional[str]  #: None where no lookahead spec was chosen (nothing to build)
    note: str


def recommend(schedule: LookaheadSchedule, server: LookaheadSpec, model: str = "<model>") -> Recommendation:
    """>>> from trtlade.schedule import LookaheadSchedule as L
    >>> r = recommend(L.parse([{"up_to": 2, "spec": "2,3,1"}, {"spec": "1,1,0"}]), LookaheadSpec(2, 4, 2), "Qwen3-8B")
    >>> str(r.spec), r.max_draft_len, r.build_command
    ('2,3,1', 5, 'trtlade build --model Qwen3-8B --wng 2,3,1')
    >>> recommend(L.parse([{"spec": "1,1,0"}]), LookaheadSpec(2, 4, 2)).build_command is None   # nothing chosen
    True
    """
    spec = schedule.smallest_engine_spec()
    if spec.is_autoregressive:
        return Recommendation(spec, 0, None, "no lookahead spec beat plain decoding beyond the noise at any level: "
                                             "serve without lookahead, or tune on traffic closer to yours")
    elif spec == server:
        note = f"the server's own (W,N,G) ({server}) is the smallest that admits every chosen spec"
    else:
        note = (f"smaller than the server's ({server}): a smaller max_draft_len reserves fewer tokens per "
                "sequence in the engine; the schedule also runs as is on the current engine")
    return Recommendation(spec, spec.max_draft_len, f"trtlade build --model {model} --wng {spec}", note)


@dataclass
class TuneResult:
    run_id: str
    server_spec: LookaheadSpec
    candidates: Candidates
    table: Table
    choices: list[Choice]
    schedule: LookaheadSchedule
    recommendation: Recommendation
    runs: list[Run]
    settings: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    failed_requests: int = 0
    limits: dict[str, Optional[float]] = field(default_factory=dict)
    #: per level, the fastest of every candidate (lookahead specs and drafters alike)
    overall: list[Choice] = field(default_factory=list)
    #: with drafter candidates: what a TensorRT-LLM 1.3+ deployment takes
    pytorch: Optional[PytorchChoice] = None

    def to_dict(self) -> dict[str, Any]:
        table = self.table
        return {
            "run_id": self.run_id,
            "server_spec": str(self.server_spec),
            "candidates": [str(s) for s in self.candidates.specs],
            "drafters": {str(d): d.speculation for d in self.candidates.drafters},
            "pruning": [{"rule": s.rule, "count": s.count} for s in self.candidates.steps],
            "levels": table.levels,
            "repeats": table.repeats,
            "confidence": CONFIDENCE,
            "noise": {"sd": table.noise.sd, "dof": table.noise.dof},
            "noise_by_level": {str(level): {"sd": n.sd, "dof": n.dof} for level, n in table.noise_by_level.items()},
            "limits": self.limits,
            "cells": cell_rows(table),
            "choices": [{"concurrency": c.concurrency, "spec": str(c.spec), "speedup": c.speedup,
                         "reason": c.reason} for c in self.choices],
            "schedule": self.schedule.to_config(),
            "overall": [{"concurrency": c.concurrency, "candidate": str(c.spec), "speedup": c.speedup,
                         "reason": c.reason} for c in self.overall],
            "speculative_config": None if self.pytorch is None else {
                "block": self.pytorch.block, "drafter": str(self.pytorch.drafter) if self.pytorch.drafter else None,
                "max_concurrency": self.pytorch.max_concurrency, "reason": self.pytorch.reason},
            "recommended_engine": {"spec": str(self.recommendation.spec),
                                   "max_draft_len": self.recommendation.max_draft_len,
                                   "build_command": self.recommendation.build_command,
                                   "note": self.recommendation.note},
            "failed_requests": self.failed_requests,
            "runs": [{"spec": str(r.spec), "concurrency": r.concurrency, "repeat": r.repeat,
                      "output_throughput": r.output_throughput, "median_ttft_ms": r.median_ttft_ms,
                      "median_tpot_ms": r.median_tpot_ms, "failed_requests": r.failed} for r in self.runs],
            "settings": self.settings,
            "metadata": self.metadata,
        }


def cell_rows(table: Table) -> list[dict[str, Any]]:
    rows = []
    for spec in table.specs:
        for level in table.levels:
            cell = table.cell(spec, level)
            if cell is None:
                continue
            ratios = cell.ratios if spec != AUTOREGRESSIVE else []
            rows.append({"spec": str(spec), "concurrency": level, "output_throughput": cell.mean_throughput,
                         "speedup": cell.speedup, "speedup_min": min(ratios, default=None),
                         "speedup_max": max(ratios, default=None),
                         "threshold": table.threshold(cell, table.comparisons(level, _kind(spec))) if ratios else None,
                         "runs": len(cell.throughput), "failed_requests": cell.failed,
                         "mean_of_median_ttft_ms": cell.ttft, "mean_of_median_tpot_ms": cell.tpot})
    return rows


def _kind(spec: Any) -> Any:
    """The candidates a spec's written choice is taken among: lookahead specs (the schedule) or drafters (the
    speculative_config), as the run's choices take them."""
    return is_lookahead if is_lookahead(spec) else is_drafter


def schedule_yaml(result: TuneResult) -> str:
    """The schedule as a snippet to paste under ``lookahead:`` (quoted specs: flow-mapping safe)."""
    bands = "\n".join("  - {" + ", ".join(f"{k}: {v!r}" if k == "spec" else f"{k}: {v}" for k, v in b.items())
                      + "}" for b in result.schedule.to_config())
    return (f"# trtlade tune {result.run_id}: server (W,N,G) = ({result.server_spec}); "
            f"`trtlade tune --apply CONFIG` writes it for you\nlookahead:\n  schedule:\n{bands}\n")


def speculative_config_yaml(result: TuneResult) -> Optional[str]:
    """The TensorRT-LLM 1.3+ equivalent as a ``trtllm-serve --config`` snippet (None without drafters)."""
    choice = result.pytorch
    if choice is None:
        return None
    head = f"# trtlade tune {result.run_id}: {choice.reason}\n"
    if choice.block is None:
        return head + "# no speculative_config: plain decoding served best at the lowest measured load\n"
    body = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in choice.block.items())
    return head + "speculative_config:\n" + body


def _pytorch_section(result: TuneResult) -> str:
    text = speculative_config_yaml(result)
    if text is None:
        return ""
    overall = "\n".join(f"| {c.concurrency} | {c.spec} | {c.speedup:.3f}x | {c.reason} |" for c in result.overall)
    return f"""
## Every drafter: the fastest per concurrency

Lookahead specs and the NGram / SA drafters together (what the reference engine could serve per load):

| concurrency | fastest | speedup | why |
|---|---|---:|---|
{overall}

## TensorRT-LLM 1.3 and later

No Lookahead there: the PyTorch backend runs one NGram or SA drafter for every request and turns it off above
a batch size. The equivalent of this run, for `trtllm-serve --config` (also `speculative_config.yml`):

```yaml
{text.rstrip()}
```
"""


def _speedup_frame(result: TuneResult) -> Any:
    import pandas as pd

    table = result.table
    chosen = {(str(c.spec), c.concurrency) for c in result.choices}
    data = {}
    for level in table.levels:
        column = []
        for spec in table.specs:
            cell = table.cell(spec, level)
            if cell is None:
                column.append("")
                continue
            if spec == AUTOREGRESSIVE:
                text = f"1 ({cell.mean_throughput:.1f} tok/s)"
            else:
                span = f" ({min(cell.ratios):.3f}–{max(cell.ratios):.3f})" if len(cell.ratios) > 1 else ""
                text = f"{cell.speedup:.3f}x{span}"
            text += f" [{cell.failed} failed]" if cell.failed else ""
            column.append(f"**{text}**" if (str(spec), level) in chosen else text)
        data[str(level)] = column
    return pd.DataFrame(data, index=[str(s) for s in table.specs]).rename_axis("spec \\ concurrency")


def summary_markdown(result: TuneResult) -> str:
    table = result.table
    levels = len(table.levels)
    frame = _speedup_frame(result)
    choice_lines = "\n".join(f"| {c.concurrency} | {c.spec} | {c.speedup:.3f}x | {c.reason} |" for c in result.choices)
    rec = result.recommendation
    limits = ", ".join(f"{k} {v:g}" for k, v in result.limits.items() if v is not None) or "none"
    failed = (f"\n**{result.failed_requests} request(s) failed** during the measurement: "
              f"{_failed_cells(table)}. A cell with failed requests is never chosen, and where (1,1,0)'s own failed, "
              "nothing is chosen at that level (tune.json: `failed_requests` per run and cell).\n"
              if result.failed_requests else "")
    return f"""# trtlade tune {result.run_id}

Server (W,N,G) = ({result.server_spec}); {table.repeats} repeat(s) x {levels} concurrency level(s) x
{len(table.specs)} spec(s), interleaved; dataset `{result.settings.get('dataset')}`, max_tokens
{result.settings.get('max_tokens')}, {_decoding(result.settings)}, prefix cache {_cache_rule(result.settings)}. Latency
limits: {limits}.{_served_by(result)}
{_host(result)}
{failed}
## Candidates

{len(result.candidates.specs)} measured: {', '.join(f'({s})' for s in result.candidates.specs)}.
Pruning: {result.candidates.describe()}.

## Output throughput vs (1,1,0) per (spec, concurrency)

Mean (min–max) over repeats of throughput(spec) / throughput(1,1,0) in the same repeat; (1,1,0)'s row shows
its throughput. Chosen cells are in bold.

{frame.to_markdown(colalign=["left"] + ["right"] * levels)}

## Noise

A speedup moves by {table.noise.sd:.3f} over all levels (pooled standard deviation of the paired ratios
across repeats) between two runs of the same thing; per level: {_per_level(table)}. A spec is chosen
at a level only above 1 + its margin: the one-sided {CONFIDENCE:.0%} Student t bound of its mean speedup (a spec is
chosen only for being faster) from its level's noise, or its own where an F test says it is larger than the
other candidates' beyond chance, the confidence shared over the level's candidates (the best of several equal
ones must not win by luck); the thresholds:
{_thresholds(table)}.{_one_repeat_note(table)}

## Lookahead choice per concurrency (the engine's schedule)

| concurrency | spec | speedup | why |
|---|---|---:|---|
{choice_lines}

## Schedule

```yaml
{schedule_yaml(result).rstrip()}
```

In words: {result.schedule}. A load between two measured levels gets the higher level's choice.

## Engine

{_engine_line(rec)}
{rec.note}.
{_pytorch_section(result)}"""


def _engine_line(rec: Recommendation) -> str:
    """The engine to build, or that there is none (a build of (1,1,0) would only reserve nothing)."""
    if rec.build_command is None:
        return "No lookahead engine to build."
    return f"Recommended (W,N,G): ({rec.spec}), max_draft_len {rec.max_draft_len}: `{rec.build_command}`."


def _host(result: TuneResult) -> str:
    """Where the run ran (the load generator's CPU and the server's, from its /version), as bench's summary says it."""
    metadata = {**result.metadata, "servers": {"": {"version": result.metadata.get("server")}}}
    return "\n".join(host_lines(metadata))


def _failed_cells(table: Table) -> str:
    """``(2,2,1) at 4: 3; (1,1,0) at 8: 1``: the cells whose requests failed, with how many."""
    return "; ".join(f"({spec}) at {level}: {cell.failed}" for spec in table.specs for level in table.levels
                     if (cell := table.cell(spec, level)) is not None and cell.failed)


def _served_by(result: TuneResult) -> str:
    """`` Served by: reference engine, preset fast, ...`` from the server's /version (empty if unknown)."""
    text = describe_server(result.metadata.get("server"))
    return f"\nServed by: {text}." if text else ""


def _per_level(table: Table) -> str:
    return ", ".join(f"{noise.sd:.3f} at {level}" for level, noise in table.noise_by_level.items())


def _thresholds(table: Table) -> str:
    parts = []
    for level in table.levels:
        bars = [(spec, table.threshold(cell, table.comparisons(level, _kind(spec))))
                for (spec, lv), cell in table.cells.items() if lv == level and spec != AUTOREGRESSIVE and cell.ratios]
        known = [bar for _, bar in bars if bar is not None]
        if known:
            low, high = min(known), max(known)
            parts.append(f"{low:.3f}x at {level}" if high - low < 5e-4 else f"{low:.3f}x to {high:.3f}x at {level}")
    return ", ".join(parts) or "none (one repeat)"


def _one_repeat_note(table: Table) -> str:
    if table.repeats >= 2:
        return ""
    return ("\n\n**One repeat: the noise could not be measured**, so no spec was chosen: every level keeps (1,1,0). "
            "Run with --repeats 2 or more.")


def plot_heatmap(result: TuneResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    table = result.table
    grid = [[(table.cell(s, c).speedup if table.cell(s, c) is not None else float("nan")) for c in table.levels]
            for s in table.specs]
    spread = max([abs(v - 1) for row in grid for v in row if v == v] + [0.05])
    fig, ax = plt.subplots(figsize=(1.4 + 1.1 * len(table.levels), 1.2 + 0.45 * len(table.specs)), dpi=110)
    image = ax.imshow(grid, cmap="RdYlGn", vmin=1 - spread, vmax=1 + spread, aspect="auto")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if value == value:
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
    chosen = {(c.spec, c.concurrency) for c in result.choices}
    for i, spec in enumerate(table.specs):
        for j, level in enumerate(table.levels):
            if (spec, level) in chosen:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, linewidth=2.2, edgecolor="black"))
    ax.set_xticks(range(len(table.levels)), [str(c) for c in table.levels])
    ax.set_yticks(range(len(table.specs)), [str(s) for s in table.specs])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("(w,n,g)")
    ax.set_title("Output throughput / (1,1,0)  (chosen: outlined)")
    fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(folder: Path, result: TuneResult, *, plots: bool = True) -> list[Path]:
    """Write the report files; returns their paths."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    files = [("summary.md", summary_markdown(result)), ("schedule.yml", schedule_yaml(result)),
             ("tune.json", json.dumps(result.to_dict(), indent=2) + "\n")]
    if (snippet := speculative_config_yaml(result)) is not None:
        files.append(("speculative_config.yml", snippet))
    for name, text in files:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    cells = folder / "cells.csv"
    pd.DataFrame(cell_rows(result.table)).to_csv(cells, index=False)
    written.append(cells)
    if plots:
        written.append(plot_heatmap(result, folder / "speedup_heatmap.png"))
    return written


def _cache_rule(settings: dict) -> str:
    """What each series found in the server's prefix cache.

    >>> _cache_rule({}), _cache_rule({"prefix_cache": "keep"})
    ('cleared before every series', 'kept between series')
    """
    return "kept between series" if settings.get("prefix_cache") == "keep" else "cleared before every series"


def _decoding(settings: dict) -> str:
    """How the measured requests decoded: a schedule tuned on sampled traffic says so.

    >>> _decoding({}), _decoding({"temperature": 0.7, "top_p": 0.95})
    ('greedy', 'sampled at temperature 0.7, top_p 0.95')
    """
    temperature = settings.get("temperature") or 0.0
    if not temperature > 0:
        return "greedy"
    return f"sampled at temperature {temperature:g}, top_p {settings.get('top_p', 1.0):g}"

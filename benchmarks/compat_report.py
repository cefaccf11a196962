#!/usr/bin/env python3
"""The table of benchmarks/compat.sh: what each client reported against `trtlade serve`, next to
`trtlade bench` at the same concurrency, and lm-eval's scores with lookahead on and off.

    .venv/bin/python benchmarks/compat_report.py reports/compat-YYYYmmdd-HHMMSS
    .venv/bin/python benchmarks/compat_report.py --interleaved reports/compat-interleaved-YYYYmmdd-HHMMSS
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path
from typing import Any, Optional


def _num(value: Optional[float], fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def guidellm(out: Path) -> Optional[dict[str, Any]]:
    path = out / "guidellm.json"
    if not path.is_file():
        return None
    bench = json.loads(path.read_text())["benchmarks"][0]
    m = bench["metrics"]
    totals = m["request_totals"]
    return {"ok": totals.get("successful"), "errors": totals.get("errored"),
            "throughput": m["output_tokens_per_second"]["successful"]["mean"],
            "ttft": m["time_to_first_token_ms"]["successful"]["mean"],
            "itl": m["inter_token_latency_ms"]["successful"]["mean"]}


def aiperf(out: Path) -> Optional[dict[str, Any]]:
    path = out / "aiperf" / "profile_export_aiperf.json"
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    return {"ok": d["request_count"]["avg"], "errors": (d.get("error_request_count") or {}).get("avg", 0),
            "throughput": d["output_token_throughput"]["avg"], "ttft": d["time_to_first_token"]["avg"],
            "itl": d["inter_token_latency"]["avg"]}


def trtlade_bench(out: Path) -> Optional[dict[str, Any]]:
    found = glob.glob(str(out / "bench" / "*" / "summary.json"))
    if not found:
        return None
    s = json.loads(Path(found[0]).read_text())["summaries"][0]
    return {"ok": s["completed"], "errors": s["failed"], "throughput": s["output_throughput"],
            "ttft": s["mean_ttft_ms"], "itl": s.get("mean_itl_ms")}


def lm_eval(out: Path, mode: str) -> tuple[dict[str, float], dict[str, list[Any]]]:
    results = glob.glob(str(out / f"lm-eval-{mode}" / "*" / "results_*.json"))
    if not results:
        return {}, {}
    data = json.loads(Path(results[0]).read_text())["results"]
    scores = {task: next(v for k, v in metrics.items() if k.endswith(",none") and "stderr" not in k)
              for task, metrics in data.items()}
    samples = {}
    for path in glob.glob(str(out / f"lm-eval-{mode}" / "*" / "samples_*.jsonl")):
        rows = [json.loads(line) for line in open(path)]
        task = Path(path).stem.removeprefix("samples_").rsplit("_", 1)[0]  # samples_<task>_<time>.jsonl
        samples[task] = [r["resps"] for r in sorted(rows, key=lambda r: r["doc_id"])]
    return scores, samples


def _prompt_tokens(name: str, dir: Path) -> Optional[float]:
    """Mean prompt tokens a client's requests carried (what its TTFT's prefill had to read)."""
    try:
        if name == "guidellm":
            m = json.loads((dir / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
            return m["prompt_token_count"]["successful"]["mean"]
        if name == "aiperf":
            export = json.loads((dir / "aiperf" / "profile_export_aiperf.json").read_text())
            return export["input_sequence_length"]["avg"]
        s = json.loads(Path(glob.glob(str(dir / "bench" / "*" / "summary.json"))[0]).read_text())["summaries"][0]
        return s["total_input_tokens"] / max(1, s["completed"])
    except (OSError, KeyError, IndexError, TypeError, ValueError):
        return None


def interleaved(out: Path) -> None:
    """benchmarks/compat_interleaved.sh: per client, per round: TTFT, throughput, prompt tokens, and the
    client's own CPU seconds against its wall time (a load generator that burns a core competes with
    the server on a 2-core machine)."""
    readers = {"guidellm": guidellm, "aiperf": aiperf, "bench": trtlade_bench}
    print("| client | round | mean TTFT ms | output tok/s | mean prompt tokens | client CPU s | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dir in sorted(out.glob("round-*"), key=lambda p: int(p.name.split("-")[1])):
        for name, read in readers.items():
            row = read(dir)
            timing = (dir / f"{name}.time").read_text().split() if (dir / f"{name}.time").is_file() else []
            wall, cpu = (float(timing[0]), float(timing[1]) + float(timing[2])) if len(timing) == 3 else (None, None)
            if row is None:
                print(f"| {name} | {dir.name[6:]} | did not run | | | | |")
                continue
            print(f"| {name} | {dir.name[6:]} | {_num(row['ttft'])} | {_num(row['throughput'])} | "
                  f"{_num(_prompt_tokens(name, dir))} | {_num(cpu)} | {_num(wall)} |")


def main() -> None:
    if sys.argv[1] == "--interleaved":
        interleaved(Path(sys.argv[2]))
        return
    out = Path(sys.argv[1])
    print("| client (concurrency 4, 16 requests) | completed | failed | output tok/s | mean TTFT ms | mean ITL ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in (("guidellm 0.8.1", guidellm(out)), ("aiperf 0.13.0 --per-chunk-usage", aiperf(out)),
                      ("trtlade bench (default mode)", trtlade_bench(out))):
        if row is None:
            print(f"| {name} | did not run | | | | |")
            continue
        print(f"| {name} | {_num(row['ok'], '.0f')} | {_num(row['errors'], '.0f')} | {_num(row['throughput'])} "
              f"| {_num(row['ttft'])} | {_num(row['itl'])} |")
    on, on_samples = lm_eval(out, "on")
    off, off_samples = lm_eval(out, "off")
    print("\n| lm-eval task | lookahead on (2,4,2) | off (1,1,0) | identical per-sample outputs |")
    print("|---|---:|---:|---|")
    for task in sorted(set(on) | set(off)):
        a, b = on_samples.get(task, []), off_samples.get(task, [])
        same = sum(x == y for x, y in zip(a, b))
        print(f"| {task} | {_num(on.get(task), '.4f')} | {_num(off.get(task), '.4f')} | {same} of {len(a)} |")


if __name__ == "__main__":
    main()

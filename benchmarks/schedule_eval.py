#!/usr/bin/env python3
"""How a config's lookahead schedule (or auto policy) compares with plain decoding, interleaved and
repeated: the ratio of output throughput (mode / ar) per concurrency level, as mean, min and max over
repeats, with the verdict of trtlade.bench.noise (the rule of `trtlade bench --repeats` and tune).

One `trtlade bench` run per level is a single sample; on a shared 2-core machine a 16-request run
moves by several percent. This script launches `trtlade serve --config CONFIG` once and, for each repeat
and each level, runs `ar` (lookahead (1,1,0)) and `schedule` (no lookahead field: the schedule decides)
on the same prompts, back to back, in an order that alternates per repeat.

    .venv/bin/python benchmarks/schedule_eval.py configs/smollm2-cpu.yml               # mix, 1,2,4,8, 3 repeats
    .venv/bin/python benchmarks/schedule_eval.py configs/smollm2-cpu.yml --repeats 2 -c 1,8
    .venv/bin/python benchmarks/schedule_eval.py configs/smollm2-cpu.yml --mode auto     # the auto policy
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--dataset", default="mix")
    ap.add_argument("-c", "--concurrency", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-n", "--num-prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--mode", default="schedule", choices=["schedule", "auto"],
                    help="what is compared with ar (both asked for by name)")
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.launch import launched_server
    from trtlade.bench.noise import geometric_mean, margin as margin_of, pooled, verdict
    from trtlade.bench.plan import BenchPlan, Endpoint, Mode, Series, Target
    from trtlade.bench.runner import run_plan
    from trtlade.cli.bench import preflight_servers
    from trtlade.spec import AUTOREGRESSIVE

    levels = [int(x) for x in args.concurrency.split(",")]
    dataset = load_dataset(args.dataset)
    ratios: dict[int, list[float]] = {c: [] for c in levels}
    with tempfile.TemporaryDirectory() as tmp, launched_server(args.config, log_path=Path(tmp) / "server.log") as url:
        target = Target("a", url)
        asyncio.run(preflight_servers([target], None, 30.0))  # the served model's name
        modes = [Mode("ar", AUTOREGRESSIVE), Mode(args.mode, None, policy=args.mode)]
        warm = BenchPlan([Series(m.name, target, m) for m in modes], [1], Endpoint("chat", "/v1/chat/completions"),
                         dataset.sample(1, 99), [], args.max_tokens, 0.0, False, 600)
        asyncio.run(run_plan(warm))
        for repeat in range(args.repeats):
            order = modes if repeat % 2 == 0 else modes[::-1]
            for level in levels:
                plan = BenchPlan([Series(m.name, target, m) for m in order], [level],
                                 Endpoint("chat", "/v1/chat/completions"), dataset.sample(args.num_prompts, repeat),
                                 [], args.max_tokens, 0.0, False, 600)
                out = asyncio.run(run_plan(plan))
                got = {s.series: s.output_throughput for s in out.summaries}
                ratios[level].append(got[args.mode] / got["ar"])
                print(f"repeat {repeat + 1} concurrency {level}: ar {got['ar']:.1f} tok/s, {args.mode} "
                      f"{got[args.mode]:.1f} tok/s, ratio {ratios[level][-1]:.3f}", flush=True)
    print(f"\n| concurrency | {args.mode} / ar, geometric mean | min | max | within noise | verdict |"
          "\n|---:|---:|---:|---:|---:|---|")
    for level in levels:
        r = ratios[level]
        mean = geometric_mean(r)
        margin = margin_of(r, pooled([r]))  # one mode per level: its own repeats' spread
        band = f"1 ± {margin:.3f}" if margin is not None else "? (one repeat)"  # on the change's side
        print(f"| {level} | {mean:.3f} | {min(r):.3f} | {max(r):.3f} | {band} | {verdict(mean, margin)} |")


if __name__ == "__main__":
    main()

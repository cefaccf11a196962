#!/usr/bin/env python3
"""Why the engine's Python between two forwards costs more than a profile of it alone says: a decode step
streams the weights (538 MB fp32, 269 MB bf16 for SmolLM2-135M) through every cache level, so the next
Python the step runs finds its code and objects in memory, not in cache.

Times one small engine call (the native dispatch-table lookup, ``kernels()``, and the greedy argmax of one
49152-logit row) hot, and right after reading ``--megabytes`` of memory, interleaved, ``--repeats`` times;
prints the medians and the ratio.

    .venv/bin/python benchmarks/cold_python.py                  # 300 MB, about the weights of a fp32 step
    .venv/bin/python benchmarks/cold_python.py --megabytes 16   # what fits in a cache
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megabytes", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()

    import numpy as np
    import torch

    from trtlade.bench.meta import machine_info
    from trtlade.reference.native import argmax_rows, kernels

    big = np.ones(args.megabytes * (1 << 20) // 8)
    logits = torch.randn(1, 49152)
    calls = {"kernels()": kernels, "argmax_rows(1 x 49152)": lambda: argmax_rows(logits)}
    hot: dict[str, list[float]] = {name: [] for name in calls}
    cold: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            call()
            hot[name].append(_us(call))
            big.sum()  # every cache level now holds this array
            cold[name].append(_us(call))
    print(f"host: {machine_info()['cpu']}; after reading {args.megabytes} MB, median of {args.repeats}:")
    for name in calls:
        h, c = statistics.median(hot[name]), statistics.median(cold[name])
        print(f"  {name:<24} hot {h:7.1f} us   cold {c:7.1f} us   {c / h:5.1f}x")


def _us(call) -> float:
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1e6


if __name__ == "__main__":
    main()

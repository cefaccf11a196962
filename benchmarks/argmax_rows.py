#!/usr/bin/env python3
"""The greedy token of R rows of logits: the native ``argmax_rows`` of every CPU variant this CPU runs against
torch's ``argmax(dim=-1).tolist()`` in the same run (interleaved, repeated), at SmolLM2's vocabulary of 49152.
A decode step takes one argmax per verified row, so on a drafting step this is R rows.

    .venv/bin/python benchmarks/argmax_rows.py
    .venv/bin/python benchmarks/argmax_rows.py --rows 1,9,16 --vocab 151936 --repeats 7

Prints, per row count, the median microseconds of each (min-max over the repeats; each repeat the mean of
``--calls`` calls) and torch / variant: above 1, the variant is faster.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trtlade.reference.native import argmax_rows, executable_variants


def _mean_us(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,9,16")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    variants = executable_variants()
    print(f"variants this CPU runs: {', '.join(variants)}; torch threads {torch.get_num_threads()}")
    print(f"| rows | torch us | {' | '.join(f'{v} us | torch / {v}' for v in variants)} |")
    print("|---:|---:|" + "---:|---:|" * len(variants))
    for rows in (int(r) for r in args.rows.split(",")):
        torch.manual_seed(rows)
        x = torch.randn(rows, args.vocab)
        want = x.argmax(dim=-1).tolist()
        series = {"torch": lambda: x.argmax(dim=-1).tolist(), **{v: (lambda v=v: argmax_rows(x, v)) for v in variants}}
        for v in variants:
            assert argmax_rows(x, v) == want, f"{v} differs from torch"
        times: dict[str, list[float]] = {name: [] for name in series}
        for rep in range(args.repeats):
            for name in list(series)[:: 1 if rep % 2 == 0 else -1]:
                times[name].append(_mean_us(series[name], args.calls))
        cells = [_cell(times["torch"])]
        for v in variants:
            ratios = [t / n for t, n in zip(times["torch"], times[v])]
            cells += [_cell(times[v]), f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
        print(f"| {rows} | {' | '.join(cells)} |", flush=True)


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    main()

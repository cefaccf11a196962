#!/usr/bin/env python3
"""What a row costs the native linear kernel on this host, with the weights streamed from memory and held in
cache: is a step of many rows slow because the multiply-adds are, or because they do not overlap the reading?

The working tree's linear.c is compiled as ``benchmarks/linear_ab.py`` compiles it (this tree's strict flags and
the variant's target flags) and run at each row count in three ways, the row counts and the ways interleaved,
the order flipped every repeat:

- ``streamed``: every linear layer of the embedded model with its own weights, as a decode step calls them
  (121 calls, 538 MB in float32: read from memory each pass);
- ``cache``: the same 120 layer calls of the 30 blocks, but every block reusing the first block's 4 weight
  matrices (14 MB in float32: held in a 32 MiB L3, not in a core's L2);
- ``l2``: one small layer (576 -> 192, 0.44 MB in float32: half of it a thread, in a 512 KiB L2) called 120 times.

Prints, per way and row count, the median pass in ms, x one row's, and the multiply-add rate (GFLOP/s, 2 per
multiply-add), beside the native probe's peak with the same threads (``trtlade.reference.floor``). Where
``cache`` reaches the peak's rate and ``streamed`` costs what one row's reading costs plus the arithmetic, the
arithmetic and the reading do not overlap; where ``cache`` is far below the peak, the tiles themselves are slow.

    .venv/bin/python benchmarks/linear_rows.py                               # float32, the AVX2 variant
    .venv/bin/python benchmarks/linear_rows.py --variant avx512 --rows 1,8,16 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from linear_ab import SHAPES, compile_linear, kernel, variant_flags
from trtlade.reference.native.build import HERE

#: the layers each way calls: (in, out) and which weight tensor (an index into that way's weights)
SMALL = (576, 192)


def layouts() -> dict[str, tuple[list[tuple[int, int]], list[int]]]:
    """Per way, the calls' shapes and the weight each reads."""
    block = SHAPES[:4]
    return {"streamed": (list(SHAPES), list(range(len(SHAPES)))),
            "cache": (block * 30, [i % 4 for i in range(120)]),
            "l2": ([SMALL] * 120, [0] * 120)}


def one_pass(fn, rows: int, calls: list, weights: list, threads: int, xs: dict, ys: dict) -> float:
    start = time.perf_counter()
    for (k, n), w in zip(calls[0], calls[1]):
        if fn(xs[k].data_ptr(), rows, k, weights[w].data_ptr(), None, n, ys[n].data_ptr(), threads):
            raise SystemExit(f"the kernel refused {rows} x {k} -> {n}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", default="avx2", help="which CPU variant's flags the kernel is built with")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    if not rows_list or min(rows_list) < 1 or args.repeats < 1:
        ap.error("--rows takes row counts of 1 or more and --repeats 1 or more")
    dtype = getattr(torch, args.dtype)
    flags = variant_flags(args.variant)
    from trtlade.bench.meta import device_name
    from trtlade.reference.floor import instruction_peak

    torch.set_num_threads(args.threads)
    peak = instruction_peak(args.dtype)
    ways = layouts()
    torch.manual_seed(0)
    weights = {"streamed": [torch.randn(k * n).to(dtype) for k, n in SHAPES]}
    weights["cache"] = weights["streamed"][:4]
    weights["l2"] = [torch.randn(SMALL[0] * SMALL[1]).to(dtype)]
    with tempfile.TemporaryDirectory() as tmp:
        fn = kernel(compile_linear(HERE, flags, Path(tmp) / "rows.so"), dtype)
        times: dict = {(way, r): [] for way in ways for r in rows_list}
        for rep in range(args.repeats):
            order = [(way, r) for r in rows_list for way in ways]
            for way, r in (order if rep % 2 == 0 else order[::-1]):
                calls = ways[way]
                xs = {k: torch.randn(r, k).to(dtype) for k, _ in calls[0]}
                ys = {n: torch.empty(r, n, dtype=dtype) for _, n in calls[0]}
                times[(way, r)].append(one_pass(fn, r, calls, weights[way], args.threads, xs, ys))
    print(f"{device_name()}, {args.dtype}, variant {args.variant}, {args.threads} threads, {args.repeats} repeats; "
          + (f"the native probe's peak: {peak:.1f} GFLOP/s" if peak else "no native probe's peak (no native library)"))
    print("| way | rows | pass ms (median, range) | x one row | GFLOP/s | of the peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for way, (calls, _) in ways.items():
        macs = sum(k * n for k, n in calls)
        one = statistics.median(times[(way, rows_list[0])])
        for r in rows_list:
            ts = times[(way, r)]
            med = statistics.median(ts)
            rate = 2 * macs * r / med / 1e9
            share = f"{rate / peak:.0%}" if peak else "?"
            print(f"| {way} | {r} | {med * 1e3:.2f} ({min(ts) * 1e3:.2f}-{max(ts) * 1e3:.2f}) | "
                  f"{med / one:.2f}x | {rate:.1f} | {share} |")
    print(f"(x one row: against the {rows_list[0]}-row pass of the same way)")


if __name__ == "__main__":
    main()

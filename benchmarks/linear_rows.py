#!/usr/bin/env python3
"""What a row costs the native linear kernel on this host, with the weights streamed from memory and held in
cache: is a step of many rows slow because the multiply-adds are, or because they do not overlap the reading?

The working tree's linear.c is compiled as ``benchmarks/linear_ab.py`` compiles it (this tree's strict flags and
the variant's target flags) and run at each row count in four ways, the row counts and the ways interleaved,
the order flipped every repeat:

- ``streamed``: every linear layer of the embedded model with its own weights, as a decode step calls them
  (121 calls, 538 MB in float32: read from memory each pass);
- ``cache``: the same 120 layer calls of the 30 blocks, but every block reusing the first block's 4 weight
  matrices (14 MB in float32: held in a 32 MiB L3, not in a core's L2);
- ``l2``: one small layer (576 -> 192, 0.44 MB in float32: half of it a thread, in a 512 KiB L2) called 120 times;
- ``call``: a 16 -> 16 layer called 120 times: what a call costs beside its arithmetic (this loop's Python, ctypes,
  the kernel's entry and its threads' start), 3-5 microseconds on a 2-core Zen 3, a sixth of an ``l2`` call of 6
  rows on one thread.

Each timed pass of a cached way (all but ``streamed``) follows an untimed one, so that it finds its weights in cache
and not evicted by the way before it (``streamed``'s 538 MB); ``streamed`` runs once untimed first. Prints, per way
and row count, the median pass in ms, x the first row count's (one row by default), and the multiply-add rate
(GFLOP/s, 2 per multiply-add), beside the native probe's peak with the same threads
(``trtlade.reference.floor.instruction_peak``: the variant the engine loads here, which may be wider than
``--variant``), and the rate net of the calls (each way's pass less its calls at ``call``'s cost a call). Where
``cache`` is far below the peak, the tiles' arithmetic is slow; where ``streamed`` costs more than ``cache``'s
arithmetic, the reading is not hidden behind it. With ``--threads 2`` a small layer is split in two (``l2``'s 12
panels: 1 to 3 groups a thread, by the row count's group size): ``--threads 1`` shows what one tile computes.

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

from linear_ab import SHAPES, cached_layout, compile_linear, kernel, variant_flags
from threads_ab import int_list
from trtlade.reference.native.build import HERE
from trtlade.reference.native.pages import weights_arena

#: the one layer the ``l2`` way calls: (in, out)
SMALL = (576, 192)
#: the layer the ``call`` way calls, too small to cost anything but the call: (in, out)
TINY = (16, 16)


def layouts() -> dict[str, tuple[list[tuple[int, int]], list[int]]]:
    """Per way, the calls' shapes (in, out) and the weight each reads (an index into that way's weights)."""
    return {"streamed": (list(SHAPES), list(range(len(SHAPES)))),
            "cache": cached_layout(),
            "l2": ([SMALL] * 120, [0] * 120),
            "call": ([TINY] * 120, [0] * 120)}


def one_pass(fn, rows: int, calls: tuple[list, list], weights: list, threads: int, xs: dict, ys: dict) -> float:
    start = time.perf_counter()
    for (k, n), w in zip(calls[0], calls[1], strict=True):
        if fn(xs[k].data_ptr(), rows, k, weights[w].data_ptr(), None, n, ys[n].data_ptr(), threads):
            raise SystemExit(f"the kernel refused {rows} x {k} -> {n}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rows", type=int_list, default="1,2,4,8,16", help="row counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", default="avx2", help="which CPU variant's flags the kernel is built with")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads take 1 or more")
    dtype = getattr(torch, args.dtype)
    flags = variant_flags(args.variant)
    from trtlade.bench.meta import device_name
    from trtlade.reference.floor import instruction_peak

    torch.set_num_threads(args.threads)
    peak = instruction_peak(args.dtype)
    ways = layouts()
    torch.manual_seed(0)
    arena = weights_arena()  # the engine's packed weights lie on its pages (2 MiB where the OS has them)
    weights = {"streamed": [arena.copy(torch.randn(k * n).to(dtype)) for k, n in SHAPES]}
    weights["cache"] = weights["streamed"][:4]
    weights["l2"] = [arena.copy(torch.randn(SMALL[0] * SMALL[1]).to(dtype))]
    weights["call"] = [arena.copy(torch.randn(TINY[0] * TINY[1]).to(dtype))]
    with tempfile.TemporaryDirectory() as tmp:
        fn = kernel(compile_linear(HERE, flags, Path(tmp) / "rows.so"), dtype)
        times: dict = {(way, r): [] for way in ways for r in args.rows}
        for rep in range(args.repeats):
            order = [(way, r) for r in args.rows for way in ways]
            for way, r in (order if rep % 2 == 0 else order[::-1]):
                calls = ways[way]
                xs = {k: torch.randn(r, k).to(dtype) for k, _ in calls[0]}
                ys = {n: torch.empty(r, n, dtype=dtype) for _, n in calls[0]}
                if rep == 0 or way != "streamed":  # untimed: the way's weights in cache, not the way's before
                    one_pass(fn, r, calls, weights[way], args.threads, xs, ys)
                times[(way, r)].append(one_pass(fn, r, calls, weights[way], args.threads, xs, ys))
    print(f"{device_name() or 'this CPU'}, {args.dtype}, variant {args.variant}, {args.threads} threads, "
          f"{args.repeats} repeats; "
          + (f"the native probe's peak: {peak:.1f} GFLOP/s" if peak else "no native probe's peak (no native library)"))
    _table(times, ways, args.rows, peak)


def _table(times: dict, ways: dict, rows_list: list[int], peak: float | None) -> None:
    """Per way and row count: the pass, x the first row count's, GFLOP/s and share of the peak, gross and net of
    the calls (``call``'s median a call, at the same row count, times the way's calls)."""
    print(f"| way | rows | pass ms (median, range) | x {rows_list[0]} row(s) | GFLOP/s | of the peak "
          "| net of the calls: GFLOP/s, of the peak |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    per_call = {r: statistics.median(times[("call", r)]) / len(ways["call"][0]) for r in rows_list}
    for way, (calls, _) in ways.items():
        if way == "call":
            continue
        macs = sum(k * n for k, n in calls)
        one = statistics.median(times[(way, rows_list[0])])
        for r in rows_list:
            ts = times[(way, r)]
            med = statistics.median(ts)
            rate, left = 2 * macs * r / med / 1e9, med - len(calls) * per_call[r]
            share = f"{rate / peak:.0%}" if peak else "?"
            net = f"{2 * macs * r / left / 1e9:.1f}, " + (f"{2 * macs * r / left / 1e9 / peak:.0%}" if peak else "?") \
                if left > 0 else "- (the calls cost the whole pass)"
            print(f"| {way} | {r} | {med * 1e3:.2f} ({min(ts) * 1e3:.2f}-{max(ts) * 1e3:.2f}) | "
                  f"{med / one:.2f}x | {rate:.1f} | {share} | {net} |")
    print(f"(x {rows_list[0]} row(s): against the {rows_list[0]}-row pass of the same way; a call: "
          + ", ".join(f"{per_call[r] * 1e6:.1f} us at {r} row(s)" for r in rows_list) + ")")


if __name__ == "__main__":
    main()

"""The engine with its packed weights on 2 MiB pages against 4 KiB pages, interleaved in one process.

Two engines of the embedded model load side by side, one with ``TRTLADE_HUGE_PAGES=0`` (the weights on torch's
4 KiB pages), one without (on 2 MiB pages where the OS has transparent huge pages: trtlade/reference/native/pages.py).
Each row count's forward (one sequence of R rows after ``--context`` cached tokens) runs on each in turn, the order
flipped every repeat. Prints where each engine's weights lie, the median forward of each, the median and range of
4k/2m over the repeats, how many of the pairs the 2 MiB pages won, and whether the two engines' logits are bitwise
equal (they must be: a page never changes a value).

    .venv/bin/python benchmarks/weight_pages.py                            # float32, 1,2,4,8,16 rows, 21 repeats
    .venv/bin/python benchmarks/weight_pages.py --dtype bfloat16 --rows 1,8 --repeats 41
    .venv/bin/python benchmarks/weight_pages.py --linears                  # the linear layers alone (linear.c)

``--linears``: the native kernel alone over the 121 linear layers of SmolLM2-135M, each with its own weights
(538 MB in float32, streamed from memory as a step does: benchmarks/linear_ab.py's layout), once on each kind of page.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from threads_ab import int_list

KINDS = ("4k", "2m")


def engines(dtype: str) -> dict:
    """The embedded engine loaded twice: ``4k`` with TRTLADE_HUGE_PAGES=0, ``2m`` without."""
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.reference.native.pages import HUGE_PAGES_ENV

    out, before = {}, os.environ.get(HUGE_PAGES_ENV)
    try:
        for kind in KINDS:
            os.environ[HUGE_PAGES_ENV] = "0" if kind == "4k" else "1"
            out[kind] = ReferenceEngine.load(spec="2,4,2", dtype=dtype)
    finally:
        if before is None:
            os.environ.pop(HUGE_PAGES_ENV, None)
        else:
            os.environ[HUGE_PAGES_ENV] = before
    return out


def forward_calls(dtype: str, context: int) -> dict:
    """Per kind, a function of R that runs one sequence's forward of R rows and returns its logits."""
    from trtlade.reference.batch_runner import RowBlock
    from trtlade.reference.native.pages import pages_line, thp_mode

    if thp_mode() == "always":
        print("THP is `always` here: torch's own large buffers may lie on 2 MiB pages too (the 4k engine's included)")
    calls = {}
    for kind, engine in engines(dtype).items():
        pages = engine.stats["weight_pages"]
        print(f"{kind}: {pages_line(pages)}")
        runner = engine.new_batch().engine.runner
        slot = runner.allocate(context + 64)
        runner.prefill(slot, [(7 * i) % 1000 + 10 for i in range(context)])
        calls[kind] = (lambda r, s=slot, run=runner:
                       run.forward([RowBlock(s, [5] * r, list(range(r)), list(range(r)), causal=True)])[0])
    return calls


def linear_calls(dtype: str) -> dict:
    """Per kind, a function of R that runs the 121 linear layers once with R rows (each layer its own weights)."""
    from linear_ab import SHAPES, compile_linear, kernel, variant_flags
    from trtlade.reference.native.build import HERE
    from trtlade.reference.native.cpu import variants_for
    from trtlade.reference.native.pages import PageArena
    import tempfile
    from pathlib import Path

    torch_dtype = getattr(torch, dtype)
    variant = next(v.name for v in variants_for() if v.name in _executable())
    fn = kernel(compile_linear(HERE, variant_flags(variant), Path(tempfile.mkdtemp()) / "linear.so"), torch_dtype)
    torch.manual_seed(0)
    plain = [torch.randn(k * n).to(torch_dtype) for k, n in SHAPES]
    arena = PageArena()
    print(f"the {variant} kernel; 2 MiB pages: {arena.why}")
    weights = {"4k": plain, "2m": [arena.copy(w) for w in plain]}

    def run(kind, rows, xs={}):
        x = xs.setdefault(rows, [torch.randn(rows, k).to(torch_dtype) for k, _ in SHAPES])
        ys = [torch.empty(rows, n, dtype=torch_dtype) for _, n in SHAPES]
        for (k, n), w, xi, y in zip(SHAPES, weights[kind], x, ys, strict=True):
            fn(xi.data_ptr(), rows, k, w.data_ptr(), None, n, y.data_ptr(), torch.get_num_threads())
        return ys[-1]

    return {kind: (lambda r, kind=kind: run(kind, r)) for kind in KINDS}


def _executable() -> tuple[str, ...]:
    from trtlade.reference.native import executable_variants

    return tuple(executable_variants())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rows", type=int_list, default="1,2,4,8,16", help="row counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--context", type=int, default=100, help="cached tokens before the forward's rows")
    ap.add_argument("--linears", action="store_true", help="the native linear layers alone, not the forward")
    args = ap.parse_args()
    calls = linear_calls(args.dtype) if args.linears else forward_calls(args.dtype, args.context)
    print(f"{args.dtype}, {torch.get_num_threads()} threads, {args.repeats} repeats, order flipped every repeat; "
          + ("the linear layers alone" if args.linears else f"one sequence's forward after {args.context} tokens"))
    for rows in args.rows:
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        outs = {}
        for r in range(args.repeats):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                t0 = time.perf_counter()
                outs[kind] = calls[kind](rows)
                times[kind].append(time.perf_counter() - t0)
        ratios = sorted(a / b for a, b in zip(times["4k"], times["2m"]))
        won = sum(x > 1 for x in ratios)
        ms = {kind: statistics.median(times[kind]) * 1e3 for kind in KINDS}
        print(f"{rows:3d} rows: 4k {ms['4k']:6.1f} ms, 2m {ms['2m']:6.1f} ms, 4k/2m {statistics.median(ratios):.3f}x "
              f"({ratios[0]:.2f}-{ratios[-1]:.2f}), 2m faster in {won} of {len(ratios)}, outputs bitwise equal: "
              f"{torch.equal(outs['4k'], outs['2m'])}", flush=True)


if __name__ == "__main__":
    main()

"""The native linear kernel of a git revision against the working tree's, interleaved in one process.

Both are compiled here the same way (this tree's strict flags and the variant's target flags, linear.c
alone), then every linear layer of the embedded model (SmolLM2-135M: 30 layers x qkv, o, gate+up, down,
and the LM head; 121 calls, each with its OWN weights, so every pass streams 538 MB in float32 from
memory as a decode step does: reusing a few shapes would keep them in cache and overstate any gain) runs
at each row count with each library in turn, the order flipped every repeat. Prints, per row count, the
median pass of each and the median and range of base/new over the repeats, and whether the outputs of
the two are bitwise equal (they must be: a schedule or a prefetch never changes an output's chain).

    .venv/bin/python benchmarks/linear_ab.py --base HEAD~3                   # float32, AVX2 variant
    .venv/bin/python benchmarks/linear_ab.py --base HEAD~3 --dtype bfloat16 --rows 1,4,8 --repeats 7
    .venv/bin/python benchmarks/linear_ab.py --base HEAD~3 --cached        # the tiles' arithmetic alone

``--cached``: every block reuses the first block's four weight matrices (14 MB in float32, 7 in bfloat16: held in L3)
and the LM head is left out: what a change does to the tiles' arithmetic, without the reading from memory.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from threads_ab import int_list
from trtlade.reference.native.build import HERE, STRICT, compiler
from trtlade.reference.native import executable_variants
from trtlade.reference.native.cpu import variants_for
from trtlade.reference.native.pages import weights_arena

ROOT = Path(__file__).resolve().parents[1]
#: (in, out) of each linear layer of SmolLM2-135M, in the order a step calls them
SHAPES = [(576, 960), (576, 576), (576, 3072), (1536, 576)] * 30 + [(576, 49152)]
_P, _I = ctypes.c_void_p, ctypes.c_int64


def cached_layout() -> tuple[list[tuple[int, int]], list[int]]:
    """The 30 blocks' calls without the LM head, every block reading the first block's 4 weight matrices (14 MB in
    float32: held in a 32 MiB L3): the calls' shapes (in, out) and the weight each reads (an index into 4)."""
    shapes = SHAPES[:-1]
    return shapes, [i % 4 for i in range(len(shapes))]


def compile_linear(sources: Path, flags: tuple[str, ...], out: Path) -> ctypes.CDLL:
    cc = compiler()
    if cc is None:
        raise SystemExit("no C compiler (cc/gcc) found")
    subprocess.run([cc, *STRICT, *flags, "-shared", str(sources / "linear.c"), "-o", str(out), "-lm"], check=True)
    return ctypes.CDLL(str(out))


def variant_flags(name: str) -> tuple[str, ...]:
    """The target flags of CPU variant ``name``, if this architecture builds it and this CPU runs it."""
    built = {v.name: v.flags for v in variants_for()}
    if name not in built:
        raise SystemExit(f"--variant {name}: this architecture builds {', '.join(built)}")
    runs = executable_variants()
    if runs and name not in runs:
        raise SystemExit(f"--variant {name}: this CPU executes {', '.join(runs)}")
    return built[name]


def checkout(rev: str, into: Path) -> Path:
    """The native sources (*.c, *.h) of ``rev`` under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    rel = HERE.relative_to(ROOT).as_posix()
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{rel}"],
                            capture_output=True, text=True)
    if listed.returncode:
        raise SystemExit(f"--base {rev}: git has no {rel} there ({listed.stderr.strip()}); "
                         "hint: a commit of this repository, e.g. HEAD~2")
    names = listed.stdout.split()
    for name in names:
        if name.endswith((".c", ".h")):
            blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}/{name}"], check=True,
                                  capture_output=True).stdout
            (into / name).write_bytes(blob)
    return into


def kernel(lib: ctypes.CDLL, dtype: torch.dtype):
    fn = lib.trtlade_linear_f32 if dtype == torch.float32 else lib.trtlade_linear_bf16
    fn.argtypes = [_P, _I, _I, _P, _P, _I, _P, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def one_pass(fn, rows: int, xs, ws, threads: int, dtype: torch.dtype, shapes: list) -> tuple[float, list]:
    ys = [torch.empty(rows, n, dtype=dtype) for _, n in shapes]
    start = time.perf_counter()
    for (k, n), w, x, y in zip(shapes, ws, xs, ys, strict=True):
        if fn(x.data_ptr(), rows, k, w.data_ptr(), None, n, y.data_ptr(), threads):
            raise SystemExit(f"the kernel refused {rows} x {k} -> {n}")
    return time.perf_counter() - start, ys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose linear.c is the baseline")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rows", type=int_list, default="1,2,4,6,8,12,16", help="row counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", default="avx2", help="which CPU variant's flags both are built with")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--cached", action="store_true", help="the blocks reuse one block's weights (held in cache)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    flags = variant_flags(args.variant)
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = checkout(args.base, Path(tmp) / "base")
        libs = {"base": kernel(compile_linear(base_dir, flags, Path(tmp) / "base.so"), dtype),
                "new": kernel(compile_linear(HERE, flags, Path(tmp) / "new.so"), dtype)}
        torch.manual_seed(0)
        shapes, reads = cached_layout() if args.cached else (SHAPES, list(range(len(SHAPES))))
        arena = weights_arena()  # on the pages the engine's packed weights get (2 MiB where the OS has them)
        block = [arena.copy(torch.randn(k * n).to(dtype)) for k, n in shapes[:max(reads) + 1]]  # a weight per matrix
        ws = [block[i] for i in reads]
        print(f"{args.dtype}, variant {args.variant}, {args.threads} threads, base {args.base} vs the working tree, "
              f"{args.repeats} repeats, order flipped every repeat"
              + (", the blocks' weights reused (held in cache), no LM head" if args.cached else ""))
        for rows in args.rows:
            xs = [torch.randn(rows, k).to(dtype) for k, _ in shapes]
            times: dict[str, list[float]] = {"base": [], "new": []}
            outs = {}
            for r in range(args.repeats):
                for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
                    seconds, outs[name] = one_pass(libs[name], rows, xs, ws, args.threads, dtype, shapes)
                    times[name].append(seconds)
            ratios = sorted(b / n for b, n in zip(times["base"], times["new"]))
            same = all(torch.equal(a, b) for a, b in zip(outs["base"], outs["new"]))
            print(f"{rows:3d} rows: base {statistics.median(times['base']) * 1e3:6.1f} ms, "
                  f"new {statistics.median(times['new']) * 1e3:6.1f} ms, base/new {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}), outputs bitwise equal: {same}", flush=True)


if __name__ == "__main__":
    main()

"""The native row attention of a git revision against the working tree's, interleaved in one process.

Both are compiled here the same way (this tree's strict flags and the variant's target flags,
row_attention.c alone) and called on SmolLM2-135M's shapes (9 query heads over 3 KV heads of 64; ``--shape``
for others, e.g. 16,8,128 for Qwen3-0.6B), 30 layers' worth of calls, each with its own cache so the keys
stream from memory as in a step: a prompt chunk of ``--chunk`` rows after ``--context`` committed keys
(chunked prefill), and ``--sequences`` sequences with one row each over ``--context`` keys (in-flight
decode). Prints the median time of each, base/new with its range over the repeats (order flipped every
repeat), and whether the outputs are bitwise equal (they must be: the kernel's promise is the same bits on
every variant). ``--kv bfloat16`` stores the caches as bf16 (a bf16 model's K/V); a revision from before
bf16 caches ignores the flag, so compare float32 caches across it. Outputs with a NaN stop the run: a
harness out of step with the kernel's signature reads garbage, and garbage is fast.

    .venv/bin/python benchmarks/attention_ab.py --base HEAD~1
    .venv/bin/python benchmarks/attention_ab.py --base HEAD~1 --variant avx2 --context 1000 --repeats 7
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import torch

from linear_ab import checkout, variant_flags
from trtlade.reference.native.attention import RowKeys
from trtlade.reference.native.bindings import bind_function
from trtlade.reference.native.build import HERE, STRICT, compiler

LAYERS = 30


def compile_attention(sources: Path, flags: tuple[str, ...], out: Path):
    import subprocess

    cc = compiler()
    if cc is None:
        raise SystemExit("no C compiler (cc/gcc) found")
    subprocess.run([cc, *STRICT, *flags, "-shared", str(sources / "row_attention.c"), "-o", str(out), "-lm"],
                   check=True)
    return bind_function(ctypes.CDLL(str(out)), "trtlade_row_attention")


def case(kind: str, context: int, chunk: int, sequences: int) -> RowKeys:
    """The rows of one call: a causal chunk in slot 0, or one row per slot."""
    if kind == "chunk":
        return RowKeys.build([(0, context, context + i, [(context + j, context + j) for j in range(i + 1)])
                              for i in range(chunk)])
    return RowKeys.build([(s, context, context, [(context, context)]) for s in range(sequences)])


def one_pass(fn, rows: RowKeys, qs, caches) -> tuple[float, list]:
    """One call per layer; q is [rows, heads, dim], each cache [slots, kv_heads, capacity, dim]."""
    outs = [torch.empty_like(q) for q in qs]
    start = time.perf_counter()
    for q, (k, v), out in zip(qs, caches, outs):
        code = fn(q.data_ptr(), q.shape[0], q.shape[1], q.shape[2], k.data_ptr(), v.data_ptr(), k.shape[1], k.shape[2],
                  rows.slot.ctypes.data, rows.committed.ctypes.data, rows.pos.ctypes.data, rows.ptr.ctypes.data,
                  rows.idx.ctypes.data, rows.at.ctypes.data, 0, 0.125, 0.0, out.data_ptr(),
                  int(k.dtype == torch.bfloat16))
        if code:
            raise SystemExit("the kernel refused the call")
    seconds = time.perf_counter() - start
    if any(torch.isnan(out).any() for out in outs):
        raise SystemExit("the kernel's outputs hold NaN: the harness and the kernel disagree on its arguments")
    return seconds, outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose row_attention.c is the baseline")
    ap.add_argument("--variant", default="avx2", help="which CPU variant's flags both are built with")
    ap.add_argument("--context", type=int, default=1000, help="committed keys before the rows")
    ap.add_argument("--chunk", type=int, default=16, help="rows of the prompt chunk")
    ap.add_argument("--sequences", type=int, default=8, help="sequences of the decode case")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kv", choices=("float32", "bfloat16"), default="float32", help="the caches' dtype")
    ap.add_argument("--shape", default="9,3,64", help="query heads, KV heads, head size: 9,3,64 is SmolLM2-135M, "
                    "16,8,128 Qwen3-0.6B")
    args = ap.parse_args()
    try:
        heads, kv_heads, dim = (int(x) for x in args.shape.split(","))
    except ValueError:
        heads = kv_heads = dim = 0
    if min(heads, kv_heads, dim) < 1 or heads % kv_heads or heads // kv_heads > 16 or dim > 512:
        raise SystemExit(f"--shape {args.shape!r}: query heads, KV heads, head size as three positive integers, "
                         "the query heads a multiple of the KV heads (at most 16 each), head size <= 512; "
                         "e.g. 9,3,64")
    flags = variant_flags(args.variant)
    with tempfile.TemporaryDirectory() as tmp:
        libs = {"base": compile_attention(checkout(args.base, Path(tmp) / "base"), flags, Path(tmp) / "base.so"),
                "new": compile_attention(HERE, flags, Path(tmp) / "new.so")}
        print(f"variant {args.variant}, {torch.get_num_threads()} threads, base {args.base} vs the working tree, "
              f"{args.repeats} repeats, {LAYERS} layers' calls, context {args.context}, {args.kv} caches, "
              f"{heads} heads over {kv_heads} of {dim}")
        torch.manual_seed(0)
        for kind in ("chunk", "decode"):
            rows = case(kind, args.context, args.chunk, args.sequences)
            slots = 1 if kind == "chunk" else args.sequences
            capacity = args.context + args.chunk + 1
            kv = getattr(torch, args.kv)
            shape = (slots, kv_heads, capacity, dim)
            caches = [(torch.randn(shape).to(kv), torch.randn(shape).to(kv)) for _ in range(LAYERS)]
            qs = [torch.randn(len(rows.slot), heads, dim) for _ in range(LAYERS)]
            times: dict[str, list[float]] = {"base": [], "new": []}
            outs = {}
            for r in range(args.repeats):
                for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
                    seconds, outs[name] = one_pass(libs[name], rows, qs, caches)
                    times[name].append(seconds)
            ratios = sorted(b / n for b, n in zip(times["base"], times["new"]))
            same = all(torch.equal(a, b) for a, b in zip(outs["base"], outs["new"]))
            label = f"chunk of {args.chunk} rows" if kind == "chunk" else f"{args.sequences} sequences x 1 row"
            print(f"{label:>22}: base {statistics.median(times['base']) * 1e3:7.2f} ms, new "
                  f"{statistics.median(times['new']) * 1e3:7.2f} ms, base/new {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}), outputs bitwise equal: {same}", flush=True)


if __name__ == "__main__":
    main()

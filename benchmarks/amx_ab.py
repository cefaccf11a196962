"""bfloat16 linear layers on a CPU's AMX tiles against the chain every other CPU class computes, in one process.

Every linear layer of the embedded model's shape (SmolLM2-135M: 30 layers x q, k, v, o, gate, up, down, and the
LM head), each with its OWN random weights so that every pass streams 269 MB from memory as a decode step does,
runs at each row count with the tiles on and off in turn (``linear_bf16_amx``, the order flipped every
repeat). Prints, per row count, the median pass of each and the median and range of chain/tiles (above 1: the
tiles are faster). Needs the avx512bf16 variant on a CPU with AMX-BF16.

    .venv/bin/python benchmarks/amx_ab.py --rows 1,2,4,8,16 --repeats 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from trtlade.reference.native import PanelLinear, executable_variants, kernels

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # out, in


def layers() -> list[PanelLinear]:
    torch.manual_seed(0)
    out = [PanelLinear.pack((torch.randn(n, k) * 0.02).bfloat16(), None, variant="avx512bf16")
           for _ in range(30) for n, k in SHAPES]
    return out + [PanelLinear.pack((torch.randn(49152, 576) * 0.02).bfloat16(), None, variant="avx512bf16")]


def one_pass(lins: list[PanelLinear], x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for lin in lins:
        lin(x[:, :lin.in_features])
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if "avx512bf16" not in executable_variants() or kernels("avx512bf16").linear_bf16_amx(1) != 1:
        sys.exit("this CPU has no AMX-BF16 tiles the process may use (or TRTLADE_AMX=0): nothing to compare")
    torch.set_num_threads(args.threads)
    table, lins = kernels("avx512bf16"), layers()
    rows = [int(r) for r in args.rows.split(",")]
    xs = {r: torch.randn(r, 1536).bfloat16() for r in rows}
    times: dict = {(on, r): [] for on in (0, 1) for r in rows}
    for rep in range(args.repeats):
        for on in ((1, 0) if rep % 2 == 0 else (0, 1)):
            table.linear_bf16_amx(on)
            for r in rows:
                one_pass(lins, xs[r])  # warm: the previous path's state out of the way
                times[on, r].append(one_pass(lins, xs[r]))
    print(f"{args.threads} threads, {args.repeats} repeats, bfloat16, 211 layers (269 MB) a pass; chain/tiles > 1: "
          "the tiles are faster")
    for r in rows:
        ratio = sorted(c / t for c, t in zip(times[0, r], times[1, r]))
        tiles, chain = statistics.median(times[1, r]), statistics.median(times[0, r])
        print(f"{r:3d} rows: tiles {tiles:6.1f} ms, chain {chain:6.1f} ms, chain/tiles {statistics.median(ratio):.2f} "
              f"({ratio[0]:.2f}-{ratio[-1]:.2f})")


if __name__ == "__main__":
    main()

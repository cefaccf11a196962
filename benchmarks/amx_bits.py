"""Can AMX's bfloat16 tiles keep the engine's same-bits promise? Its float32 sums against the chain the
native kernels compute on every CPU class, on one CPU with AMX.

The native linear kernels compute each bfloat16 output as ONE float32 chain over the pairs (k, k + 1),
odd k then even k, each step rounded like an FMA: VDPBF16PS's pseudo-code, and the widened FMAs of the
other classes (trtlade/reference/native/linear.c). A tile multiply (TDPBF16PS) adds 16 pairs of every
output per instruction. This probe compiles a small C program (cc, -mamx-tile -mamx-bf16), multiplies
random bfloat16 rows by a packed panel with the tiles, and counts, over ``--rows`` x 16 outputs and K
inputs, the float32 results equal to: the chain (odd k first: the engine's bits), the chain even k first,
one rounding per pair, and one rounding per 16 pairs (an exact sum per instruction). Only where the
first count is every output can AMX serve a row with the bits the other classes give it.

    .venv/bin/python benchmarks/amx_bits.py                    # 16 rows, K = 1536, 3 seeds
    .venv/bin/python benchmarks/amx_bits.py --k 576 --seeds 5

Needs Linux on x86-64 with AMX-BF16 (``grep amx_bf16 /proc/cpuinfo``) and the kernel's permission for
the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16 on); says so and exits 2 where either is missing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from trtlade.reference.native.build import compiler

PROBE = r"""
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static float bf(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static uint32_t state;
static float draw(void) { state = state * 1664525u + 1013904223u; return ((state >> 8) / 16777216.0f - 0.5f) * 4.0f; }
typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } TileConfig;
int main(int argc, char **argv) {
    const int M = atoi(argv[1]), K = atoi(argv[2]);
    state = (uint32_t)atoi(argv[3]);
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 3;
    uint16_t *x = malloc(sizeof(uint16_t) * M * K), *wp = malloc(sizeof(uint16_t) * K * 16); /* wp[k/2][16][2] */
    float *c = calloc((size_t)M * 16, sizeof(float));
    for (int i = 0; i < M * K; i++) x[i] = to_bf(draw());
    for (int i = 0; i < K * 16; i++) wp[i] = to_bf(draw() * 0.05f);
    TileConfig cfg; memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.colsb[0] = 64; cfg.rows[0] = M;  /* C: M x 16 float32 */
    cfg.colsb[1] = 64; cfg.rows[1] = M;  /* A: M x 16 pairs */
    cfg.colsb[2] = 64; cfg.rows[2] = 16; /* B: 16 pairs x 16 outputs */
    _tile_loadconfig(&cfg);
    _tile_loadd(0, c, 64);
    for (int k0 = 0; k0 < K; k0 += 32) {
        _tile_loadd(1, x + k0, K * 2);
        _tile_loadd(2, wp + k0 * 16, 64);
        _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    int odd = 0, even = 0, pair = 0, block = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < 16; n++) {
            float a = 0, b = 0, p = 0, s16 = 0;
            double s = 0;
            for (int k = 0; k < K / 2; k++) {
                const float xe = bf(x[i * K + 2 * k]), xo = bf(x[i * K + 2 * k + 1]);
                const float we = bf(wp[(k * 16 + n) * 2]), wo = bf(wp[(k * 16 + n) * 2 + 1]);
                a = fmaf(we, xe, fmaf(wo, xo, a));
                b = fmaf(wo, xo, fmaf(we, xe, b));
                p = (float)((double)p + (double)we * xe + (double)wo * xo);
                s += (double)we * xe + (double)wo * xo;
                if (k % 16 == 15) s16 = (float)((double)s16 + s), s = 0;
            }
            const float got = c[i * 16 + n];
            odd += a == got, even += b == got, pair += p == got, block += s16 == got;
        }
    printf("%d %d %d %d %d\n", M * 16, odd, even, pair, block);
    return 0;
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16, help="rows of the tile (1-16)")
    ap.add_argument("--k", type=int, default=1536, help="inputs, a multiple of 32")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    if not 1 <= args.rows <= 16 or args.k <= 0 or args.k % 32:
        print("--rows must be 1-16 and --k a positive multiple of 32", file=sys.stderr)
        return 2
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    cc = compiler()
    if "amx_bf16" not in flags or cc is None:
        print(f"no AMX-BF16 on this CPU or no C compiler (amx_bf16 listed: {'amx_bf16' in flags}, cc: {cc})")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "amx_bits.c", Path(tmp) / "amx_bits"
        src.write_text(PROBE)
        subprocess.run([cc, "-O2", "-mamx-tile", "-mamx-bf16", str(src), "-o", str(exe), "-lm"], check=True)
        totals = [0] * 5
        for seed in range(1, args.seeds + 1):
            run = subprocess.run([str(exe), str(args.rows), str(args.k), str(seed)], capture_output=True, text=True)
            if run.returncode == 3:
                print("the kernel refused the tile data (arch_prctl ARCH_REQ_XCOMP_PERM): Linux 5.16 or later needed")
                return 2
            run.check_returncode()
            totals = [t + int(v) for t, v in zip(totals, run.stdout.split())]
    n = totals[0]
    print(f"AMX TDPBF16PS, {args.rows} rows x 16 outputs, K = {args.k}, {args.seeds} seeds: float32 results equal to")
    for name, same in zip(("the engine's chain (odd k, then even k, FMA rounding)", "the chain, even k first",
                           "one rounding per pair", "one rounding per 16 pairs (one instruction)"), totals[1:]):
        print(f"  {name:55s} {same:5d} / {n} ({100 * same / n:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

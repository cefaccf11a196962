"""bfloat16 on AMX tiles (an Intel Xeon with AMX-BF16, the ``avx512bf16`` variant): on where the CPU has the
tiles and the OS grants them, off with ``TRTLADE_AMX=0``. What the promise needs from the path: a row has the
same bits alone and among any others (so Lookahead stays lossless), the result is the chain's within its
rounding, the choice is the process's (never the row count's), and the roofline reports the tiles' rate."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import native_variants
from trtlade.reference.native import PanelLinear
from trtlade.reference.native.bindings import AMX_ENV, kernels

BF16 = "avx512bf16" in native_variants.RUNS
NO_BF16 = f"this CPU does not run the avx512bf16 variant (it runs: {', '.join(native_variants.RUNS) or 'none'})"


HAS_AMX = native_variants.HAS_AMX
needs_amx = pytest.mark.skipif(
    not HAS_AMX, reason="this CPU offers no AMX-BF16 (Intel Xeon from Sapphire Rapids on, unless a VM hides it)")
#: (outputs, inputs): K a multiple of 32 runs on the tiles; 6 and 130 keep the chain (the choice is the layer's)
SHAPES = [(17, 32), (300, 576), (960, 576), (64, 1536), (50, 6), (40, 130)]


@pytest.fixture
def amx():
    """The avx512bf16 table with AMX on for the test, the process's choice restored after."""
    table = kernels("avx512bf16")
    before = table.linear_bf16_amx(-1)
    assert table.linear_bf16_amx(1) == 1
    yield table
    table.linear_bf16_amx(before)


def layers(seed: int) -> list[tuple[PanelLinear, torch.Tensor, torch.Tensor]]:
    """(layer, W, b) for each of SHAPES, random bfloat16."""
    torch.manual_seed(seed)
    out = []
    for n, k in SHAPES:
        w, b = torch.randn(n, k).to(torch.bfloat16), torch.randn(n).to(torch.bfloat16)
        out.append((PanelLinear.pack(w, b, variant="avx512bf16"), w, b))
    return out


@pytest.mark.skipif(not BF16, reason=NO_BF16)
def test_the_tiles_are_on_exactly_where_the_cpu_has_them():
    """The library's choice at load agrees with the flags Linux reports; asking for the tiles where the CPU
    lacks them leaves them off, and the path /version names follows the choice."""
    table = kernels("avx512bf16")
    before = table.linear_bf16_amx(-1)
    try:
        assert before == int(HAS_AMX) or os.environ.get(AMX_ENV) == "0"
        assert table.linear_bf16_amx(1) == int(HAS_AMX)
        assert ("amx" in table.paths["bfloat16"]) == HAS_AMX
        assert table.linear_bf16_amx(0) == 0 and "amx" not in table.paths["bfloat16"]
    finally:
        table.linear_bf16_amx(before)


@needs_amx
def test_a_row_has_the_same_bits_alone_and_among_others_on_the_tiles(amx):
    """Each output sums its own row's blocks of 32 k in order, whatever rows share its tile: a row alone (a
    tile of one row), among 15 others, in the second of two full tiles (32 rows, read in place) or of a padded
    copy (33), at 1 to 3 threads, has the same bits."""
    before = torch.get_num_threads()
    try:
        for i, (lin, _, _) in enumerate(layers(7)):
            x = torch.randn(40, lin.in_features, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
            torch.set_num_threads(1)
            alone = torch.cat([lin(x[r:r + 1]) for r in range(40)])
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                for rows in (2, 15, 16, 17, 32, 33, 40):
                    assert torch.equal(lin(x[:rows]), alone[:rows]), (SHAPES[i], threads, rows)
    finally:
        torch.set_num_threads(before)


@needs_amx
def test_the_tiles_give_the_chain_within_its_rounding(amx):
    """TDPBF16PS rounds its 32 products its own way, so the bits are this class's; each result stays within
    the float32 sums' rounding and one bfloat16 rounding of the chain's (2^-7 of the sum of |x w| and |b|),
    and the layers whose K is not a multiple of 32 give the chain's bits exactly."""
    differ = 0
    for i, (lin, w, b) in enumerate(layers(8)):
        k = SHAPES[i][1]
        x = torch.randn(9, k, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
        on = lin(x)
        amx.linear_bf16_amx(0)
        chain = lin(x)
        amx.linear_bf16_amx(1)
        if k % 32:
            assert torch.equal(on, chain), SHAPES[i]
            continue
        bound = 2.0 ** -7 * (x.float().abs() @ w.float().abs().T + b.float().abs())
        assert bool(((on.float() - chain.float()).abs() <= bound).all()), SHAPES[i]
        differ += int((on != chain).sum())
    assert differ > 0  # the tiles ran: their own bits somewhere


@needs_amx
def test_trtlade_amx_0_keeps_the_chain_in_the_whole_process():
    """``TRTLADE_AMX=0`` turns the tiles off before any layer runs, so every call of the process computes the
    chain of the other CPU classes."""
    code = ("from trtlade.reference.native import kernels; k = kernels(); "
            "print(k.variant, k.linear_bf16_amx(-1), k.paths['bfloat16'])")
    out = {}
    for value in ("0", "1"):
        env = {**os.environ, AMX_ENV: value}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        out[value] = done.stdout.split(maxsplit=2)
    assert out["0"][:2] == ["avx512bf16", "0"] and "amx" not in out["0"][2]
    assert out["1"][:2] == ["avx512bf16", "1"] and "amx" in out["1"][2]


@pytest.mark.skipif(not native_variants.RUNS, reason="the native library does not run here")
def test_a_trtlade_amx_value_it_does_not_know_is_said_in_the_status():
    """``TRTLADE_AMX=off`` is not one of 0 / 1: the status /version shows says so, with the allowed values, and
    the choice stays as it was (not silently taken for either)."""
    code = "from trtlade.reference.native import status; print(status())"
    env = {**os.environ, AMX_ENV: "off"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TRTLADE_AMX='off' not understood (0: off, 1: on where the CPU has AMX)" in done.stdout


@needs_amx
def test_the_roofline_reports_the_tiles_rate(amx):
    """With the tiles on, the bfloat16 probe runs TDPBF16PS: several times the float32 FMAs' rate."""
    from trtlade.reference.floor import instruction_peak

    tiles, fma = instruction_peak("bfloat16", seconds=0.02), instruction_peak("float32", seconds=0.02)
    assert tiles > 3 * fma, (tiles, fma)

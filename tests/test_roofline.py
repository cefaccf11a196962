"""The host's roofline (trtlade.reference.floor): read bandwidth, the multiply-add rate (the native
kernels' instruction probe; a cache-resident GEMM in the engine's dtype), and R*, the rows a step
carries before computing costs more than reading."""

from __future__ import annotations

import pytest

from tests.native_variants import forced, params
from trtlade.reference import floor as floor_module
from trtlade.reference.floor import Floor, instruction_peak, peak_gflops, rows_star
from trtlade.reference.native import executable_variants, kernels


@pytest.mark.parametrize("gflops, gbs, width, expected", [
    (190.0, 28.9, 4, 13.1), (190.0, 28.9, 2, 6.6), (400.0, 32.0, 2, 12.5), (100.0, 50.0, 4, 4.0),
])
def test_rows_star_is_where_the_multiply_adds_take_as_long_as_the_read(gflops, gbs, width, expected):
    assert rows_star(gflops, gbs, width) == pytest.approx(expected, abs=0.05)
    weights = 1_000_000  # any layer: R* rows of 2 flops per weight take the time its bytes take to read
    assert 2 * weights * rows_star(gflops, gbs, width) / (gflops * 1e9) == pytest.approx(weights * width / (gbs * 1e9))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_floor_carries_the_roofline_of_its_dtype(dtype):
    floor = Floor(538_000_000, dtype=dtype)
    floor.sample()
    floor.sample()
    d = floor.to_dict()
    assert d["dtype"] == dtype and len(d["peak_gflops_samples"]) == 2 and d["peak_gflops"] > 0
    width = 4 if dtype == "float32" else 2
    # recomputed from the peak and the bandwidth as reported (rounded to 0.1 GFLOP/s and 0.01 GB/s): within the
    # report's own rounding of R* (0.05), and, where R* is large (bfloat16 on AMX tiles: about 300 rows), within
    # what the rounded bandwidth moves it (0.005 GB/s of about 20: 0.025%)
    assert d["rows_star"] == pytest.approx(rows_star(d["peak_gflops"], d["read_gb_s"], width), abs=0.1, rel=1e-3)


def test_without_a_dtype_the_floor_is_the_bandwidth_alone():
    floor = Floor(1_000_000)
    floor.sample()
    assert "rows_star" not in floor.to_dict() and floor.to_dict()["floor_ms"] > 0


@pytest.mark.parametrize("rate,size,reported", [
    (1e9, 256, 1.0),       # a slow path (torch's bfloat16 GEMM without AVX-512: about 1.2 GFLOP/s): small products
    (10e9, 512, 10.0),
    (200e9, 1024, 200.0),  # oneDNN's float32: the full size, whose rate is the higher one there
])
def test_the_gemm_probe_sizes_its_products_to_what_the_path_can_do_in_a_moment(monkeypatch, rate, size, reported):
    """A fake torch.mm of a fixed rate on a fake clock: the largest product is the largest that takes at most
    50 ms at that rate (at most 1024, at least 128), and the rate reported is the fake's."""
    clock, sizes = [0.0], []

    def mm(a, b):
        sizes.append(a.shape[0])
        clock[0] += 2 * a.shape[0] ** 3 / rate

    monkeypatch.setattr(floor_module.torch, "mm", mm)
    monkeypatch.setattr(floor_module.time, "perf_counter", lambda: clock[0])
    assert peak_gflops("float32") == pytest.approx(reported, rel=1e-9)
    assert max(sizes) == size


def test_a_larger_gemm_does_not_report_an_impossible_rate():
    """2 cores cannot exceed a few TFLOP/s in float32: a timing taken around nothing would."""
    assert 1 < peak_gflops("float32", size=256, repeats=2, passes=1) < 5_000


@pytest.mark.parametrize("variant", params())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_variant_probes_its_multiply_add_rate(variant, dtype):
    """The probe runs in each variant and reports a rate two cores can reach: at least one multiply-add every
    20 ns (libm's fmaf, the slowest path, does more) and below 2 x 32 flops x 6 GHz a core; bfloat16 on AMX
    tiles below 2 x 1024 flops (16 x 16 x 32 multiply-adds in 16 cycles at best) x 6 GHz a core."""
    with forced(variant):
        rate = instruction_peak(dtype, seconds=0.02, passes=1)
        tiles = dtype == "bfloat16" and "amx" in kernels(variant).paths["bfloat16"]
    assert rate is not None and 0.05 < rate < 2 * (1024 if tiles else 64) * 6 * 2


@pytest.mark.skipif(not executable_variants(), reason="native library not available here")
def test_the_floor_takes_the_instruction_peak_and_keeps_torch_mm_beside_it():
    floor = Floor(538_000_000, dtype="float32")
    floor.sample()
    d = floor.to_dict()
    assert d["peak_source"] == "instruction" and d["peak_gflops_samples"] == [d["peak_gflops"]]
    assert d["mm_gflops"] > 0

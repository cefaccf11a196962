"""The physical limit of a decode step: the time to read the weights once.

A decode step of a small batch is memory-bound: every weight is read once per step, whatever the rows.
``floor_ms = weight_bytes / read_bandwidth``, with the bandwidth measured on this host, in this
process, with the engine's threads: a plain ``torch.sum`` over a buffer far larger than the caches
(1 GiB), best of a few passes. The engine-bench measures it in the same run as the steps it compares
with it, because on a shared host the bandwidth moves from minute to minute.

    >>> round(floor_ms(538_000_000, 48.0), 2)       # SmolLM2-135M in float32 at 48 GB/s
    11.21

The other side of the roofline is the multiply-add rate. ``instruction_peak`` runs the native library's
probe (``trtlade_peak_flops`` in ``linear.c``, in the process's CPU variant): 12 independent chains of the
instruction the linear tiles use (float32: the widest FMA; bfloat16: ``VDPBF16PS`` with AVX512-BF16, else
the float32 FMA the widened pairs run) on every thread: the most the engine's kernels can reach.
``peak_gflops`` times a cache-resident GEMM through torch (oneDNN) in the engine's dtype, what a tuned
library reaches; it stands in for the probe when the native library is not there. A linear layer's row costs
``2 * K * N`` flops and its weights ``K * N * bytes_per_weight`` bytes, so the rows a step can carry
before computing takes longer than reading the weights once is

``R* = peak_gflops * bytes_per_weight / (2 * read_gb_s)``

    >>> round(rows_star(190.0, 28.9, 4), 1)           # the Intel host of issue 43, fp32
    13.1
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

__all__ = ["read_bandwidth", "peak_gflops", "instruction_peak", "bytes_per_weight", "rows_star", "weight_bytes",
           "floor_ms", "Floor"]


def read_bandwidth(gib: float = 1.0, passes: int = 3) -> float:
    """GB/s of ``torch.sum`` over ``gib`` GiB of float32 (best of ``passes``, after one warm-up), on the pages the
    packed weights get (2 MiB where the OS has them: ``native/pages.py``)."""
    from trtlade.reference.native.pages import weights_arena

    buf = weights_arena().empty((int(gib * (1 << 30)) // 4,), torch.float32)
    buf.fill_(1.0)
    buf.sum()
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best / 1e9


def peak_gflops(dtype: str = "float32", size: int = 1024, repeats: int = 4, passes: int = 3,
                budget_s: float = 0.05) -> float:
    """GFLOP/s of ``torch.mm`` on ``size`` x ``size`` matrices of ``dtype`` (2 * size**3 flops each; the
    operands, 4 MiB each in float32, stay in the L3 cache), best of ``passes`` after a warm-up: the
    multiply-add rate the cores reach with this process's threads, as oneDNN drives them (on the Zen 4
    host of 2026-11-26, 512 gave 160-174 GFLOP/s in float32, 1024 gave 180-194). Where one product of ``size``
    would take longer than ``budget_s`` at the rate a product of 256 shows (a slow path: torch's bfloat16 GEMM
    without AVX-512, about 1.2 GFLOP/s on a Zen 3, 1.7 s a product of 1024), the size halves until it would not
    (down to 128): such a path's rate does not grow with the size (1.23 GFLOP/s at 256, 1.24 at 512 there), while
    products of 1024 would make each of a Floor's samples last about 20 s (tests/test_roofline.py: a fake GEMM
    and clock).
    """
    torch_dtype = getattr(torch, dtype)
    size = _affordable(size, torch_dtype, budget_s)
    a = torch.randn(size, size).to(torch_dtype)
    b = torch.randn(size, size).to(torch_dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return 2 * size ** 3 / best / 1e9


def _affordable(size: int, torch_dtype: torch.dtype, budget_s: float) -> int:
    """The largest of ``size``, ``size / 2``, ... (at least 128) whose product would take at most ``budget_s`` at
    the rate one product of ``min(size, 256)`` shows (after one warm-up product)."""
    small = min(size, 256)
    a = torch.randn(small, small).to(torch_dtype)
    torch.mm(a, a)
    t0 = time.perf_counter()
    torch.mm(a, a)
    rate = 2 * small ** 3 / max(time.perf_counter() - t0, 1e-9)
    while size > 128 and 2 * size ** 3 / rate > budget_s:
        size //= 2
    return size


def instruction_peak(dtype: str = "float32", seconds: float = 0.1, passes: int = 3) -> float | None:
    """GFLOP/s of the native probe in ``dtype`` with the process's threads (best of ``passes`` of about
    ``seconds`` each), or None without the native library."""
    import ctypes

    from trtlade.reference.native.bindings import kernels

    table = kernels()
    if table is None:
        return None
    code, threads, sink = int(dtype == "bfloat16"), torch.get_num_threads(), ctypes.c_float()

    def rate(iters: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        flops = table.peak_flops(code, iters, threads, ctypes.byref(sink))
        elapsed = time.perf_counter() - t0
        return flops / elapsed / 1e9, elapsed

    iters = 100_000
    _, elapsed = rate(iters)
    iters = max(iters, int(iters * seconds / max(elapsed, 1e-6)))
    return max(rate(iters)[0] for _ in range(passes))


def bytes_per_weight(dtype: str) -> int:
    """Bytes of one weight of ``dtype`` (``"float32"`` -> 4, ``"bfloat16"`` -> 2)."""
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def rows_star(gflops: float, gb_per_s: float, bytes_per_weight: float) -> float:
    """Rows a linear layer carries before its multiply-adds take longer than reading its weights once."""
    return gflops * bytes_per_weight / (2 * gb_per_s)


def weight_bytes(runner: Any) -> int:
    """Bytes a decode step reads: every linear weight and bias the forward uses, the LM head included
    (the embedding row read per token is negligible and left out)."""
    modules = runner.weight_modules()
    seen: set[int] = set()
    total = 0
    for module in modules:
        for name, tensor in [*module.named_buffers(), *module.named_parameters()]:
            if tensor.dim() < 1 or id(tensor) in seen or "embed_tokens" in name:
                continue
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def floor_ms(nbytes: int, gb_per_s: float) -> float:
    return nbytes / (gb_per_s * 1e9) * 1e3


class Floor:
    """Bandwidth and multiply-add samples taken during a run (before and after the measured modes), the
    floor and, with ``dtype``, the roofline's R* for weights of that dtype."""

    def __init__(self, nbytes: int, dtype: str | None = None) -> None:
        self.nbytes = int(nbytes)
        self.dtype = dtype
        self.samples: list[float] = []
        self.peaks: list[float] = []
        self.mm_peaks: list[float] = []

    def sample(self) -> None:
        self.samples.append(read_bandwidth())
        if self.dtype is not None:
            self.mm_peaks.append(peak_gflops(self.dtype))
            probe = instruction_peak(self.dtype)
            if probe is not None:
                self.peaks.append(probe)

    def to_dict(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        gbs = statistics.median(self.samples)
        return {"weight_bytes": self.nbytes, "read_gb_s": round(gbs, 2),
                "read_gb_s_samples": [round(s, 2) for s in self.samples],
                "floor_ms": round(floor_ms(self.nbytes, gbs), 3),
                "floor_ms_range": [round(floor_ms(self.nbytes, max(self.samples)), 3),
                                   round(floor_ms(self.nbytes, min(self.samples)), 3)]} | self._roofline(gbs)

    def _roofline(self, gbs: float) -> dict[str, Any]:
        """The peak is the native probe's where the library is there (else torch.mm's), the best any
        sample reached (a busy neighbour only lowers one); torch.mm's beside it."""
        if not self.mm_peaks or self.dtype is None:
            return {}
        source, peaks = ("instruction", self.peaks) if self.peaks else ("torch.mm", self.mm_peaks)
        peak = max(peaks)
        return {"dtype": self.dtype, "peak_gflops": round(peak, 1), "peak_source": source,
                "peak_gflops_samples": [round(p, 1) for p in peaks],
                "mm_gflops": round(max(self.mm_peaks), 1),
                "rows_star": round(rows_star(peak, gbs, bytes_per_weight(self.dtype)), 1)}

"""The physical limit of a decode step: the time to read the weights once.

A decode step of a small batch is memory-bound: every weight is read once per step, whatever the rows.
``floor_ms = weight_bytes / read_bandwidth``, with the bandwidth measured on this host, in this
process, with the engine's threads: a plain ``torch.sum`` over a buffer far larger than the caches
(1 GiB), best of a few passes. The engine-bench measures it in the same run as the steps it compares
with it, because on a shared host the bandwidth moves from minute to minute.

    >>> round(floor_ms(538_000_000, 48.0), 2)       # SmolLM2-135M in float32 at 48 GB/s
    11.21

The other side of the roofline is the multiply-add rate: ``peak_gflops`` times a cache-resident GEMM
in the engine's dtype through torch (oneDNN: FMA in float32; the bf16 dot product, AVX512-BF16 or AMX,
where the CPU has it), with the engine's threads, best of a few passes. A linear layer's row costs
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

__all__ = ["read_bandwidth", "peak_gflops", "bytes_per_weight", "rows_star", "weight_bytes", "floor_ms", "Floor"]


def read_bandwidth(gib: float = 1.0, passes: int = 3) -> float:
    """GB/s of ``torch.sum`` over ``gib`` GiB of float32 (best of ``passes``, after one warm-up)."""
    buf = torch.ones(int(gib * (1 << 30)) // 4, dtype=torch.float32)
    buf.sum()
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best / 1e9


def peak_gflops(dtype: str = "float32", size: int = 1024, repeats: int = 4, passes: int = 3) -> float:
    """GFLOP/s of ``torch.mm`` on ``size`` x ``size`` matrices of ``dtype`` (2 * size**3 flops each; the
    operands, 4 MiB each in float32, stay in the L3 cache), best of ``passes`` after a warm-up: the
    multiply-add rate the cores reach with this process's threads, as oneDNN drives them (on the Zen 4
    host of 2026-11-26, 512 gave 160-174 GFLOP/s in float32, 1024 gave 180-194)."""
    torch_dtype = getattr(torch, dtype)
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


def bytes_per_weight(dtype: str) -> int:
    """Bytes of one weight of ``dtype`` (``"float32"`` -> 4, ``"bfloat16"`` -> 2)."""
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def rows_star(gflops: float, gb_per_s: float, bytes_per_weight: float) -> float:
    """Rows a linear layer carries before its multiply-adds take longer than reading its weights once."""
    return gflops * bytes_per_weight / (2 * gb_per_s)


def weight_bytes(runner: Any) -> int:
    """Bytes a decode step reads: every linear weight and bias the forward uses, the LM head included
    (the embedding row read per token is negligible and left out)."""
    modules = [runner.fast, runner.lm_head] if runner.fast is not None else [runner.model]
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

    def sample(self) -> None:
        self.samples.append(read_bandwidth())
        if self.dtype is not None:
            self.peaks.append(peak_gflops(self.dtype))

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
        if not self.peaks or self.dtype is None:
            return {}
        peak = max(self.peaks)  # a peak: the best any sample reached (a busy neighbour only lowers one)
        return {"dtype": self.dtype, "peak_gflops": round(peak, 1),
                "peak_gflops_samples": [round(p, 1) for p in self.peaks],
                "rows_star": round(rows_star(peak, gbs, bytes_per_weight(self.dtype)), 1)}

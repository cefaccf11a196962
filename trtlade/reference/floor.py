"""The physical limit of a decode step: the time to read the weights once.

A decode step of a small batch is memory-bound: every weight is read once per step, whatever the rows.
``floor_ms = weight_bytes / read_bandwidth``, with the bandwidth measured on this host, in this
process, with the engine's threads: a plain ``torch.sum`` over a buffer far larger than the caches
(1 GiB), best of a few passes. The engine-bench measures it in the same run as the steps it compares
with it, because on a shared host the bandwidth moves from minute to minute.

    >>> round(floor_ms(538_000_000, 48.0), 2)       # SmolLM2-135M in float32 at 48 GB/s
    11.21
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

__all__ = ["read_bandwidth", "weight_bytes", "floor_ms", "Floor"]


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
    """Bandwidth samples taken during a run (before and after the measured modes) and the floor."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(read_bandwidth())

    def to_dict(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        gbs = statistics.median(self.samples)
        return {"weight_bytes": self.nbytes, "read_gb_s": round(gbs, 2),
                "read_gb_s_samples": [round(s, 2) for s in self.samples],
                "floor_ms": round(floor_ms(self.nbytes, gbs), 3),
                "floor_ms_range": [round(floor_ms(self.nbytes, max(self.samples)), 3),
                                   round(floor_ms(self.nbytes, min(self.samples)), 3)]}

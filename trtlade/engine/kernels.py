"""Kernel and runtime choices of the reference engine: dtypes, CPU threads, oneDNN-packed linears.

:func:`pack_linear_layers` replaces each ``nn.Linear`` module by a :class:`PackedLinear` calling
oneDNN with a pre-packed weight (the same ``y = x W^T + b``). On these CPUs, MKL's fp32 GEMM costs
about K times the 1-row cost for K rows, oneDNN's packed GEMM is flat up to about 4 rows, which is
what makes lookahead's extra rows -- and a batch's extra sequences -- nearly free. It also makes
every output row independent of how many rows the call has.

>>> resolve_dtype("bf16"), dtype_name(resolve_dtype("fp32"))
(torch.bfloat16, 'float32')
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

# OpenMP reads its wait policy when its runtime starts (at the first parallel region). With the
# default (active spinning) two threads were 4x slower than one on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import nn  # noqa: E402

__all__ = [
    "DTYPES",
    "resolve_dtype",
    "dtype_name",
    "default_threads",
    "configure_threads",
    "PackedLinear",
    "onednn_available",
    "pack_linear_layers",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"`` or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not supported; use one of float32, bfloat16, float16")
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of float32, bfloat16, float16")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------------------- threads
def default_threads() -> int:
    """The CPUs this process may run on (``sched_getaffinity``), at most 16."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    return max(1, min(16, count))


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (``None`` = :func:`default_threads`); return it."""
    count = default_threads() if threads is None else int(threads)
    if count < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


# ----------------------------------------------------------------------------------------- kernels
def onednn_available() -> bool:
    """Whether this torch build has oneDNN's packed linear ops (CPU builds with MKLDNN)."""
    return bool(
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` pre-packed for oneDNN (CPU, float32 / bfloat16).

    Drop-in for an inference-only ``nn.Linear``: same input/output shapes and math; the weight is
    reordered once into oneDNN's blocked layout, so every call skips the repacking a plain GEMM
    does. ``in_features`` / ``out_features`` are kept for code that reads them.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight_dtype = weight.dtype
        # batch_size=None: a layout good for any row count (a hint of 1 slows multi-row calls down)
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight), persistent=False)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            x = x.contiguous()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (CPU, float32/bfloat16) by a :class:`PackedLinear`.

    The model's modeling code is untouched: only the leaf modules are swapped, the way quantisation
    integrations swap them. Returns how many were replaced (0 when oneDNN is unavailable, the model
    is not on the CPU, or its dtype is not float32/bfloat16). Inference only: the packed weights
    are not parameters any more.
    """
    if not onednn_available():
        return 0
    targets: list[tuple[nn.Module, str, nn.Linear]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear and child.weight.device.type == "cpu" \
                    and child.weight.dtype in (torch.float32, torch.bfloat16):
                targets.append((parent, name, child))
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)


# ----------------------------------------------------------------------------------------- choice
@dataclass(frozen=True)
class KernelChoice:
    """Which linear kernel a model runs and why: ``kernel`` is ``"onednn-packed"`` or ``"plain"``;
    ``packed_ms`` / ``plain_ms``: the measured time of every linear layer once, at 1 and 8 rows
    (None where not measured, e.g. oneDNN unavailable or forced by the caller)."""

    kernel: str
    layers: int
    packed_ms: Optional[float] = None
    plain_ms: Optional[float] = None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "layers": self.layers, "packed_ms": self.packed_ms, "plain_ms": self.plain_ms,
                "reason": self.reason}


def _time_layers(layers: Sequence[nn.Module], rows: Sequence[int], repeats: int) -> float:
    """Seconds for every layer once per row count, best of ``repeats`` (random inputs)."""
    with torch.inference_mode():
        xs = {(layer.in_features, r, _dtype_of(layer)): torch.randn(r, layer.in_features, dtype=_dtype_of(layer))
              for layer in layers for r in rows}
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for layer in layers:
                for r in rows:
                    layer(xs[(layer.in_features, r, _dtype_of(layer))])
            best = min(best, time.perf_counter() - t0)
    return best


def _dtype_of(layer: nn.Module) -> torch.dtype:
    return layer.weight.dtype if isinstance(layer, nn.Linear) else layer.weight_dtype


def choose_linear_kernel(model: nn.Module, *, rows: Sequence[int] = (1, 8), repeats: int = 3,
                         timer: Optional[Callable[[Sequence[nn.Module]], float]] = None) -> KernelChoice:
    """Measure the model's linear layers packed for oneDNN against the plain ones and keep the faster
    (on some CPUs the plain GEMM wins): swaps the leaf modules in place. ``timer(layers)`` replaces
    the measurement (tests). Models off the CPU, in other dtypes, or without oneDNN stay plain."""
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear and child.weight.device.type == "cpu"
               and child.weight.dtype in (torch.float32, torch.bfloat16)]
    if not targets or not onednn_available():
        return KernelChoice("plain", 0, reason="oneDNN packed linears unavailable for this model/device")
    plain = [child for _, _, child in targets]
    packed = [PackedLinear(child) for child in plain]
    measure = timer or (lambda layers: _time_layers(layers, rows, repeats))
    plain_s, packed_s = measure(plain), measure(packed)
    if packed_s <= plain_s:
        for (parent, name, _), layer in zip(targets, packed):
            setattr(parent, name, layer)
        kernel, why = "onednn-packed", "faster on this CPU"
    else:
        kernel, why = "plain", "oneDNN packing measured slower on this CPU"
    return KernelChoice(kernel, len(targets), round(packed_s * 1000, 3), round(plain_s * 1000, 3),
                        f"{why} (all linear layers at {', '.join(map(str, rows))} rows)")

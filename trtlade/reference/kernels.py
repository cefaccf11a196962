"""Kernel and runtime choices of the reference engine: dtypes, CPU threads, oneDNN-packed linears.

:func:`pack_linear_layers` replaces each ``nn.Linear`` module by a :class:`PackedLinear` calling
oneDNN with a pre-packed weight (the same ``y = x W^T + b``). On these CPUs, MKL's fp32 GEMM costs
about K times the 1-row cost for K rows, oneDNN's packed GEMM is flat up to about 4 rows, which is
what makes lookahead's extra rows -- and a batch's extra sequences -- nearly free. It also makes
every output row independent of how many rows the call has. On other CPUs (an Intel Xeon host of
this project) the plain GEMM is faster for 1-3 rows and the packed one from 4 rows on:
:func:`choose_linear_kernel` measures both per row count at load and, where they cross, keeps both
(:class:`RowDispatchedLinear`), so a greedy step and a lookahead step each get the faster one.

>>> resolve_dtype("bf16"), dtype_name(resolve_dtype("fp32"))
(torch.bfloat16, 'float32')
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from trtlade.errors import TrtladeError

__all__ = [
    "DTYPES",
    "DtypeError",
    "DeviceError",
    "resolve_dtype",
    "check_device",
    "dtype_name",
    "default_threads",
    "configure_threads",
    "PackedLinear",
    "onednn_available",
    "pack_linear_layers",
    "RowDispatchedLinear",
    "KernelChoice",
    "KERNEL_ROWS",
    "packed_from",
    "choose_linear_kernel",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


class DtypeError(TrtladeError, ValueError):
    """A dtype the reference engine does not serve (``where``: ``dtype``)."""


class DeviceError(TrtladeError, ValueError):
    """A device the reference engine cannot run on here (``where``: ``device``)."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"`` or a torch dtype.

    >>> resolve_dtype("bf16")
    torch.bfloat16
    >>> print(resolve_dtype("int8"))
    Traceback (most recent call last):
    ...
    trtlade.reference.kernels.DtypeError: dtype: unknown dtype 'int8'; use one of float32, bfloat16, float16
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise DtypeError(f"dtype {dtype} is not supported; use one of float32, bfloat16, float16", where="dtype")
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise DtypeError(f"unknown dtype {dtype!r}; use one of float32, bfloat16, float16", where="dtype")
    return DTYPES[key]


def check_device(device: str) -> None:
    """``cpu``, or ``cuda`` / ``cuda:N`` where torch sees that GPU; else :class:`DeviceError`, before any weight loads.

    >>> check_device("cpu")
    >>> check_device("tpu")
    Traceback (most recent call last):
    ...
    trtlade.reference.kernels.DeviceError: device: 'tpu': not a device the reference engine runs on
    hint: use cpu, cuda or cuda:N (an NVIDIA GPU through a CUDA build of torch)
    """
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise DeviceError(f"{device!r}: not a device the reference engine runs on", where="device",
                          hint="use cpu, cuda or cuda:N (an NVIDIA GPU through a CUDA build of torch)")
    if device == "cpu":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        choice = f"pick one of cuda:0..cuda:{count - 1}" if count else "or use cpu"
        raise DeviceError(f"{device}: torch {torch.__version__} sees {count} CUDA device(s) here", where="device",
                          hint=f"run it where torch sees an NVIDIA GPU (a CUDA build of torch), {choice}")


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


#: the most compute threads accepted (a machine's cores, with room to spare: 10**6 crashed the tokenizer's pool)
MAX_THREADS = 4096


class ThreadsError(TrtladeError, ValueError):
    """A thread count no machine runs with."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "leave threads unset (this machine's cores), or give at most the cores it has",
                         where="threads")


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (``None`` = :func:`default_threads`); return it."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise ThreadsError(f"threads must be a whole number from 1 to {MAX_THREADS}, got {threads!r}")
    count = default_threads() if threads is None else threads
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


# ----------------------------------------------------------------------------------------- kernels
def onednn_available(dtype: Optional[torch.dtype] = None) -> bool:
    """Whether this torch build has oneDNN's packed linear ops (CPU builds with MKLDNN), and, for a
    ``dtype``, whether this CPU runs them in it: oneDNN's bfloat16 and float16 paths need AVX-512
    (BW/VL/DQ) or AVX-NE-CONVERT, and raise a RuntimeError at the first reorder on a CPU without (an AMD
    Zen 2/3 or most laptops: AVX2 only). Checked here, before any call.

    >>> onednn_available(torch.float32) == onednn_available()
    True
    >>> onednn_available(torch.bfloat16) == (onednn_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    True
    """
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return dtype in (None, torch.float32)


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` pre-packed for oneDNN (CPU, float32 / bfloat16).

    Drop-in for an inference-only ``nn.Linear``: same input/output shapes and math; the weight is
    reordered once into oneDNN's blocked layout, so every call skips the repacking a plain GEMM
    does. ``in_features`` / ``out_features`` are kept for code that reads them.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        if not onednn_available(weight.dtype):
            raise ValueError(f"oneDNN's packed linear does not run {weight.dtype} on this CPU (its bfloat16/float16 "
                             f"paths need AVX-512 BW/VL/DQ or AVX-NE-CONVERT; CPU capability: "
                             f"{torch.backends.cpu.get_cpu_capability()}); use the plain nn.Linear")
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
    targets = _packable(model)
    if not targets:
        return 0
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)


def _packable(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, name, layer) of every ``nn.Linear`` oneDNN can pack here: on the CPU, float32 or bfloat16,
    in a dtype this CPU runs oneDNN in (:func:`onednn_available`)."""
    return [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
            if type(child) is nn.Linear and child.weight.device.type == "cpu"
            and child.weight.dtype in (torch.float32, torch.bfloat16) and onednn_available(child.weight.dtype)]


# ----------------------------------------------------------------------------------------- choice
class RowDispatchedLinear(nn.Module):
    """``y = x W^T + b`` by the plain GEMM below ``packed_from`` rows and by oneDNN's packed one from
    there on: on some CPUs each kernel wins on one side of a crossover (measured at load by
    :func:`choose_linear_kernel`). Holds both weights (the plain one is the model's own)."""

    def __init__(self, linear: nn.Linear, packed: PackedLinear, packed_from: int) -> None:
        super().__init__()
        self.plain = linear
        self.packed = packed
        self.packed_from = int(packed_from)
        self.in_features = linear.in_features
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        return self.packed(x) if rows >= self.packed_from else self.plain(x)

    def extra_repr(self) -> str:
        return f"packed_from={self.packed_from}"


@dataclass(frozen=True)
class KernelChoice:
    """Which linear kernel a model runs and why: ``kernel`` is ``"onednn-packed"``, ``"plain"`` or
    ``"by-rows"`` (plain below ``packed_from_rows`` rows per call, packed from there on).
    ``packed_ms`` / ``plain_ms``: the time of every linear layer once, summed over the measured row
    counts; ``per_rows_ms``: ``{rows: (plain_ms, packed_ms)}`` (None where not measured, e.g. oneDNN
    unavailable or the kernel forced by the caller)."""

    kernel: str
    layers: int
    packed_ms: Optional[float] = None
    plain_ms: Optional[float] = None
    reason: str = ""
    packed_from_rows: Optional[int] = None
    per_rows_ms: Optional[dict[int, tuple[float, float]]] = None

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "layers": self.layers, "packed_ms": self.packed_ms, "plain_ms": self.plain_ms,
                "packed_from_rows": self.packed_from_rows,
                "per_rows_ms": {r: list(v) for r, v in self.per_rows_ms.items()} if self.per_rows_ms else None,
                "reason": self.reason}


#: Row counts the kernel choice measures: a greedy step, a few drafts, a full lookahead step, a batch.
KERNEL_ROWS = (1, 2, 4, 8, 16)


def _time_layers(plain: Sequence[nn.Module], packed: Sequence[nn.Module], rows: Sequence[int],
                 repeats: int) -> dict[int, tuple[float, float]]:
    """Seconds for every layer once, plain and packed, per row count: best of ``repeats``
    rounds, the two kernels interleaved in each round so that drift hits both alike."""
    with torch.inference_mode():
        xs = {(layer.in_features, r, layer.weight.dtype): torch.randn(r, layer.in_features, dtype=layer.weight.dtype)
              for layer in plain for r in rows}
        best = {r: [float("inf"), float("inf")] for r in rows}
        for _ in range(repeats):
            for r in rows:
                for k, layers in enumerate((plain, packed)):
                    t0 = time.perf_counter()
                    for layer, source in zip(layers, plain):
                        layer(xs[(source.in_features, r, source.weight.dtype)])
                    best[r][k] = min(best[r][k], time.perf_counter() - t0)
    return {r: (p, q) for r, (p, q) in best.items()}


def packed_from(per_rows: dict[int, tuple[float, float]]) -> Optional[int]:
    """The smallest measured row count from which packed is faster at every larger measured count
    (None: plain wins at the largest; 1 or less: packed everywhere).

    >>> packed_from({1: (21, 27), 2: (21, 28), 4: (34, 29), 8: (44, 34), 16: (48, 40)})   # Intel Xeon
    4
    >>> packed_from({1: (30, 25), 8: (40, 30)}), packed_from({1: (20, 25), 8: (30, 35)})
    (1, None)
    """
    start = None
    for rows in sorted(per_rows, reverse=True):
        plain_s, packed_s = per_rows[rows]
        if packed_s > plain_s:
            break
        start = rows
    return start


def choose_linear_kernel(model: nn.Module, *, rows: Sequence[int] = KERNEL_ROWS, repeats: int = 3,
                         timer: Optional[Callable[..., dict[int, tuple[float, float]]]] = None) -> KernelChoice:
    """Measure the model's linear layers packed for oneDNN against the plain ones per row count and
    keep, for every call, the faster of the two (on some CPUs plain wins for a few rows and packed
    for many: both are then kept, :class:`RowDispatchedLinear`); swaps the leaf modules in place.
    ``timer(plain, packed, rows)`` replaces the measurement (tests). Models off the CPU, in other
    dtypes, or without oneDNN stay plain."""
    targets = _packable(model)
    if not targets:
        return KernelChoice("plain", 0, reason="oneDNN packed linears unavailable for this model/device/CPU")
    plain = [child for _, _, child in targets]
    packed = [PackedLinear(child) for child in plain]
    measure = timer or (lambda a, b, r: _time_layers(a, b, r, repeats))
    per_rows = measure(plain, packed, list(rows))
    start = packed_from(per_rows)
    where = f"measured at {', '.join(map(str, sorted(per_rows)))} rows"
    if start is not None and start <= min(per_rows):
        for (parent, name, _), layer in zip(targets, packed):
            setattr(parent, name, layer)
        kernel, why = "onednn-packed", f"packed faster at every row count on this CPU ({where})"
    elif start is None:
        kernel, why = "plain", f"oneDNN packing measured slower on this CPU ({where})"
    else:
        for (parent, name, child), layer in zip(targets, packed):
            setattr(parent, name, RowDispatchedLinear(child, layer, start))
        kernel, why = "by-rows", f"plain below {start} rows, packed from {start} rows on this CPU ({where})"
    plain_s = sum(p for p, _ in per_rows.values())
    packed_s = sum(q for _, q in per_rows.values())
    return KernelChoice(kernel, len(targets), round(packed_s * 1000, 3), round(plain_s * 1000, 3), why,
                        packed_from_rows=start,
                        per_rows_ms={r: (round(p * 1000, 3), round(q * 1000, 3))
                                     for r, (p, q) in sorted(per_rows.items())})

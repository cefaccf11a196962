"""The native library loaded with ctypes, and its dispatch table: :class:`Kernels`, one per CPU variant.

:func:`kernels` is the table this process uses (the best variant the CPU executes, or the one
``TRTLADE_NATIVE_ISA`` names); :func:`kernels` with a name gives any other variant this CPU executes
(the tests hold every one of them to the same promises). ``TRTLADE_NATIVE=0`` turns the library off;
``TRTLADE_AMX=0`` keeps bfloat16 off the AMX tiles of an Intel Xeon that has them (their bits are their own).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from typing import Callable, ContextManager, Optional

from trtlade.reference.native import build as _build
from trtlade.reference.native import cpu as _cpu
from trtlade.reference.native import pages as _pages

__all__ = ["Kernels", "kernels", "status", "env_warnings", "executable_variants", "profiled", "traced", "PROFILE_LABEL",
           "LINEAR_LABEL", "BODY_LABEL", "ARGMAX_LABEL", "Model", "Step"]

#: ``TRTLADE_AMX=0``: bfloat16 never runs on AMX tiles (it keeps the bits every CPU class computes)
AMX_ENV = "TRTLADE_AMX"
#: the attention kernel's name in a torch profile
PROFILE_LABEL = "trtlade.row_attention"
#: the native linear kernel's name in a torch profile
LINEAR_LABEL = "trtlade.linear"
#: the native argmax's name in a torch profile (the greedy token of each row of logits)
ARGMAX_LABEL = "trtlade.argmax"
#: the native decoder body's name in a torch profile (one call per step: GEMMs, attention and the rest)
BODY_LABEL = "trtlade.body_native"

_P = ctypes.c_void_p
_UNTRACED = contextlib.nullcontext()
_I64 = ctypes.c_int64


class Model(ctypes.Structure):  # TrtladeModel in layer_ops.c
    _fields_ = [(n, ctypes.c_int64) for n in ("layers", "hidden", "heads", "kv_heads", "head_dim", "inter")] + \
        [("dtype", ctypes.c_int32), ("threads", ctypes.c_int32), ("eps", ctypes.c_float)] + \
        [(n, ctypes.POINTER(_P)) for n in ("attn_in", "attn_out", "mlp_in", "mlp_out", "attn_in_bias",
                                           "attn_out_bias", "mlp_in_bias", "mlp_out_bias", "in_norm", "post_norm",
                                           "q_norm", "k_norm")] + \
        [("final_norm", _P), ("scaling", ctypes.POINTER(ctypes.c_float)), ("window", ctypes.POINTER(ctypes.c_int64))]


class Step(ctypes.Structure):  # TrtladeStep in layer_ops.c
    _fields_ = [("rows", ctypes.c_int64), ("capacity", ctypes.c_int64)] + \
        [(n, _P) for n in ("h", "out", "scratch", "cos", "sin", "slot", "index", "committed", "pos", "path_ptr",
                           "path_idx", "path_pos")] + [("keys", ctypes.POINTER(_P)), ("values", ctypes.POINTER(_P)),
                                                       ("timing", _P), ("kv_bf16", ctypes.c_int64)]


#: each exported function's ctypes signature: (argument types, result type)
_SIGNATURES = {
    "trtlade_row_attention": ([_P, _I64, _I64, _I64, _P, _P, _I64, _I64, _P, _P, _P, _P, _P, _P, _I64,
                               ctypes.c_float, ctypes.c_float, _P, ctypes.c_int], ctypes.c_int),
    "trtlade_linear_path": ([ctypes.c_int], ctypes.c_char_p),
    "trtlade_linear_f32": ([_P, _I64, _I64, _P, _P, _I64, _P, ctypes.c_int], ctypes.c_int),
    "trtlade_linear_bf16": ([_P, _I64, _I64, _P, _P, _I64, _P, ctypes.c_int], ctypes.c_int),
    "trtlade_peak_flops": ([ctypes.c_int, _I64, ctypes.c_int, ctypes.POINTER(ctypes.c_float)], _I64),
    "trtlade_linear_bf16_by_fma": ([ctypes.c_int], ctypes.c_int),
    "trtlade_linear_lead": ([ctypes.c_int], ctypes.c_int),
    "trtlade_linear_bf16_amx": ([ctypes.c_int], ctypes.c_int),
    "trtlade_forward_scratch": ([ctypes.POINTER(Model), _I64], _I64),
    "trtlade_forward": ([ctypes.POINTER(Model), ctypes.POINTER(Step)], ctypes.c_int),
    "trtlade_argmax_rows": ([_P, _I64, _I64, _P], ctypes.c_int),
    "trtlade_packed_rows": ([_P, _I64, _I64, ctypes.c_int, _P, _I64, _P], ctypes.c_int),
}


def bind_function(lib: ctypes.CDLL, name: str, symbol: Optional[str] = None) -> Callable:
    """``lib``'s ``symbol`` (default ``name``) with the ctypes signature of exported function ``name``:
    the one spelling of each signature, for the engine and for harnesses that load a library of their own
    (``benchmarks/attention_ab.py``)."""
    args, result = _SIGNATURES[name]
    fn = getattr(lib, symbol or name)
    fn.argtypes, fn.restype = args, result
    return fn


@dataclass(frozen=True)
class Kernels:
    """One variant's entry points (the dispatch table): ``row_attention``, ``linear_f32``,
    ``linear_bf16``, ``forward_scratch``, ``forward``, ``peak_flops`` (the roofline's multiply-add probe),
    ``argmax_rows`` (the greedy token of each row of logits), ``packed_rows`` (rows of a packed weight),
    ``linear_bf16_by_fma`` (-1: whether bfloat16 runs on float32 FMAs rather than VDPBF16PS, chosen at the
    first call by their measured rates; 0 or 1 sets it for the process), ``linear_lead`` (-1: how many bytes
    ahead in each panel's stream the AVX-512 tiles of up to 8 rows prefetch, 0 for the next group spread; with
    a lead float32 steps of 3 rows or more run in tiles of up to 8 rows over spans of k, one read of the weights
    per 32 rows; chosen at the first call by the CPU's maker; >= 0 sets it), ``linear_bf16_amx`` (-1: whether
    bfloat16 runs on AMX tiles, bits of their own; chosen at the first call: on where the CPU has AMX-BF16 and
    the OS grants it; 0 or 1 sets it);
    ``variant`` its name, ``paths`` what computes each dtype's linear layers (asked on demand: binding calls
    nothing, since a variant this CPU cannot execute is bound too, and asking the avx512bf16 variant for its
    bfloat16 path runs its AVX-512 rate probe)."""

    variant: str
    row_attention: Callable
    linear_f32: Callable
    linear_bf16: Callable
    forward_scratch: Callable
    forward: Callable
    linear_path: Callable
    peak_flops: Callable
    argmax_rows: Callable
    packed_rows: Callable
    linear_bf16_by_fma: Callable
    linear_lead: Callable
    linear_bf16_amx: Callable

    @classmethod
    def bind(cls, lib: ctypes.CDLL, variant: str) -> "Kernels":
        fns = {name.removeprefix("trtlade_"): bind_function(lib, name, f"{name}__{variant}") for name in _SIGNATURES}
        return cls(variant, fns["row_attention"], fns["linear_f32"], fns["linear_bf16"], fns["forward_scratch"],
                   fns["forward"], fns["linear_path"], fns["peak_flops"], fns["argmax_rows"], fns["packed_rows"],
                   fns["linear_bf16_by_fma"], fns["linear_lead"], fns["linear_bf16_amx"])

    @property
    def paths(self) -> dict:
        """What computes each dtype's linear layers in this variant (call only on a CPU that executes it)."""
        return {"float32": self.linear_path(0).decode(), "bfloat16": self.linear_path(1).decode()}


_state: dict = {}


def _load() -> dict:
    """The library, this CPU's features, the built variants' tables, and the status (once a process)."""
    if "status" in _state:
        return _state
    _state.update(lib=None, features=0, tables={}, status="")
    if os.environ.get("TRTLADE_NATIVE", "1") == "0":
        _state["status"] = "off (TRTLADE_NATIVE=0)"
        return _state
    built = _build.build(_cpu.variants_for())
    if built.path is None:
        _state["status"] = built.message
        return _state
    try:
        lib = ctypes.CDLL(str(built.path))
        lib.trtlade_cpu_features.restype = ctypes.c_int
        features = lib.trtlade_cpu_features()
        tables = {name: Kernels.bind(lib, name) for name in built.variants}
    except (OSError, AttributeError) as exc:
        _state["status"] = f"cannot load {built.path}: {exc}"
        return _state
    _state.update(lib=lib, features=features, tables=tables, status=built.message)
    amx = os.environ.get(AMX_ENV, "1")
    if amx == "0":  # bfloat16 keeps the chain every CPU class computes
        for variant in _cpu.executable(_cpu.variants_for(), features):
            if variant.name in tables:
                tables[variant.name].linear_bf16_amx(0)
    elif amx != "1":
        _state["status"] += f"; {AMX_ENV}={amx!r} not understood (0: off, 1: on where the CPU has AMX): left on"
    return _state


def _chosen(state: dict) -> tuple[Optional[str], str]:
    """(the variant this process runs, '') or (None, why not): the best this CPU executes among those
    built, or ``$TRTLADE_NATIVE_ISA``."""
    built = [v for v in _cpu.variants_for() if v.name in state["tables"]]
    try:
        return _cpu.choose(built, state["features"], os.environ.get(_cpu.ENV) or None).name, ""
    except ValueError as exc:
        return None, str(exc)


def executable_variants() -> tuple[str, ...]:
    """The built variants this CPU executes, best first (empty when the library is not available)."""
    state = _load()
    runs = _cpu.executable(_cpu.variants_for(), state["features"])
    return tuple(v.name for v in runs if v.name in state["tables"])


def kernels(variant: Optional[str] = None) -> Optional[Kernels]:
    """The dispatch table of ``variant`` (a name this CPU executes: ValueError otherwise), or by default
    the process's own: the best variant this CPU executes, or ``$TRTLADE_NATIVE_ISA``. None when the
    library is not available or the variable names a variant this CPU cannot run (:func:`status` says
    why)."""
    state = _load()
    if not state["tables"]:
        return None
    if variant is not None:
        if variant not in executable_variants():
            raise ValueError(f"native variant {variant!r} does not run on this CPU (it runs: "
                             f"{', '.join(executable_variants())})")
        return state["tables"][variant]
    chosen, _ = _chosen(state)
    return state["tables"][chosen] if chosen else None


def env_warnings() -> list[str]:
    """What the native kernels' environment variables asked for and did not get: a value not understood, a variant
    this CPU or build does not have (the kernels then go unused). Said at engine load, never silently."""
    out = []
    native = os.environ.get("TRTLADE_NATIVE")
    if native not in (None, "0", "1"):
        out.append(f"TRTLADE_NATIVE={native!r} not understood (0: off, 1: on): the native kernels stay on")
    state = _load()
    if os.environ.get(_cpu.ENV) and state["tables"]:
        chosen, why = _chosen(state)
        if chosen is None:
            out.append(f"{why}; the native kernels are not used (slower)")
    amx = os.environ.get(AMX_ENV)
    if amx not in (None, "0", "1"):
        out.append(f"{AMX_ENV}={amx!r} not understood (0: off, 1: on where the CPU has AMX): left on")
    pages = _pages.env_warning()
    return out + ([pages] if pages else [])


def status() -> str:
    """How the library was built and which variant runs, or why none does."""
    state = _load()
    if not state["tables"]:
        return state["status"]
    chosen, why = _chosen(state)
    if chosen is None:
        return f"not used: {why} ({state['status']})"
    forced = os.environ.get(_cpu.ENV) or None
    how = f"{_cpu.ENV}={forced}" if forced else "the best this CPU runs"
    return f"variant {chosen} ({how}; this CPU runs {', '.join(executable_variants())}); {state['status']}"


def traced(label: str) -> ContextManager:
    """``torch.profiler.record_function(label)`` when a torch profile runs, else a shared no-op: the
    step's labels cost nothing outside the engine-bench's breakdown (a ``record_function`` costs about
    10 us even with no profiler, 2-core AMD EPYC Zen 4, and a step of 8 sequences passed ten of them).

    >>> with traced("trtlade.example"):
    ...     pass
    """
    import torch

    if torch.autograd.profiler._is_profiler_enabled:
        return torch.profiler.record_function(label)
    return _UNTRACED


def profiled(label: str, fn: Callable, *args) -> int:
    """``fn(*args)``, named ``label`` in a torch profile when one runs (the engine-bench's breakdown)."""
    import torch

    if torch.autograd.profiler._is_profiler_enabled:
        with torch.profiler.record_function(label):
            return fn(*args)
    return fn(*args)

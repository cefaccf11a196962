"""The engine's native library, built on first use: three C files, each computing every row on its own.

* ``row_attention.c``: row-invariant attention over the slot cache (:func:`row_attention`);
* ``linear.c``: linear layers that stream a weight packed in panels of 16 outputs once per call, at
  memory speed, one FMA chain per output (:class:`PanelLinear`; AVX-512 for float32, AVX512-BF16 for
  bfloat16: :func:`linear_dtypes` says which were built here);
* ``layer_ops.c``: the small ops of a Llama-family layer and the whole decoder body as one call per
  step (:class:`NativeBody`).

Built with the system C compiler (``$CC``, else ``cc`` / ``gcc``) into ``~/.cache/trtlade/native/``,
keyed by the sources, the flags and this CPU (``-march=native``), and loaded with ctypes: no torch
headers, no build step in the package, about three seconds to compile (``scripts/setup.sh`` does it
once). When there is no compiler or the build fails, :func:`row_attention` is None, :func:`linear_dtypes`
empty, and :func:`status` says why; the engine then runs oneDNN's GEMMs, torch's ops and its torch
implementation of invariant attention (:func:`trtlade.reference.batch_runner.invariant_attention`), which
give the same guarantee more slowly. ``TRTLADE_NATIVE=0`` turns the library off.

    >>> import torch
    >>> from trtlade.reference.native import RowKeys, row_attention
    >>> kernel = row_attention()
    >>> q = torch.ones(1, 1, 4); k = torch.zeros(1, 1, 8, 4); v = torch.arange(32.).view(1, 1, 8, 4)
    >>> rows = RowKeys.build([(0, 2, 2, [(2, 2)])])   # slot 0, 2 committed keys, the row at position 2
    >>> kernel(q, k, v, rows, scale=1.0).tolist() if kernel else [[[4.0, 5.0, 6.0, 7.0]]]   # equal scores: the mean
    [[[4.0, 5.0, 6.0, 7.0]]]
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["RowKeys", "row_attention", "status", "FLAGS", "PROFILE_LABEL", "LINEAR_LABEL", "BODY_LABEL", "PanelLinear",
           "BodyLayer", "NativeBody",
           "linear_dtypes"]

SOURCE = Path(__file__).with_name("row_attention.c")
#: Every source compiled into the one library: the attention kernel and the linear layers (``linear.c``).
SOURCES = (SOURCE, Path(__file__).with_name("linear.c"), Path(__file__).with_name("layer_ops.c"))
#: Compile flags. -ffast-math only for compiling (it lets expf/tanhf vectorise; one compiled sequence
#: computes every row, so invariance does not depend on it): linking with it would add crtfastmath.o,
#: whose constructor sets flush-to-zero for the whole process when the library loads.
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
#: Flags of the other sources: strict IEEE arithmetic. With -ffast-math the compiler may vectorise a
#: loop with a peeled scalar head whose length depends on a buffer's alignment (and vector expf in the
#: body, scalar expf in the head, or reductions regrouped): a row's bits would then depend on where it
#: sits in memory, that is on the rows beside it. linear.c is intrinsics; layer_ops.c is plain C.
STRICT_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")
_state: dict = {}
#: the kernel's name in a torch profile
PROFILE_LABEL = "trtlade.row_attention"
#: the native linear kernel's name in a torch profile
LINEAR_LABEL = "trtlade.linear"
#: the native decoder body's name in a torch profile (one call per step: GEMMs, attention and the rest)
BODY_LABEL = "trtlade.body_native"


@dataclass(frozen=True)
class RowKeys:
    """Each row's keys for the kernel: ``slot``, ``committed`` (the slot's committed positions, all
    seen), ``pos`` (the row's position); the row's keys in the step as CSR ``ptr`` / ``idx`` (cache
    index) / ``at`` (position), in depth order."""

    slot: np.ndarray
    committed: np.ndarray
    pos: np.ndarray
    ptr: np.ndarray
    idx: np.ndarray
    at: np.ndarray

    @classmethod
    def build(cls, rows: Sequence[tuple[int, int, int, Sequence[tuple[int, int]]]]) -> "RowKeys":
        """From ``(slot, committed, position, [(cache index, position), ...])`` per row."""
        ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        idx: list[int] = []
        at: list[int] = []
        for r, (_, _, _, path) in enumerate(rows):
            idx.extend(i for i, _ in path)
            at.extend(p for _, p in path)
            ptr[r + 1] = len(idx)

        def col(i: int) -> np.ndarray:
            return np.ascontiguousarray([row[i] for row in rows], dtype=np.int64)

        return cls(col(0), col(1), col(2), ptr, np.asarray(idx, dtype=np.int64), np.asarray(at, dtype=np.int64))


def _profiled(label: str, fn: Callable, *args) -> int:
    """``fn(*args)``, named ``label`` in a torch profile when one runs (the engine-bench's breakdown)."""
    import torch

    if torch.autograd.profiler._is_profiler_enabled:
        with torch.profiler.record_function(label):
            return fn(*args)
    return fn(*args)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trtlade" / "native"


def _cpu_key() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = next((ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))), "")
        flags = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    except OSError:
        model = flags = ""
    return f"{platform.machine()}|{model}|{flags}"


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def _build() -> tuple[Optional[ctypes.CDLL], str]:
    if os.environ.get("TRTLADE_NATIVE", "1") == "0":
        return None, "off (TRTLADE_NATIVE=0)"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler (cc/gcc) found: the torch implementation runs instead"
    flags = " ".join(FLAGS + STRICT_FLAGS + LINK_FLAGS).encode()
    key = hashlib.sha256(b"".join(src.read_bytes() for src in SOURCES) + flags + _cpu_key().encode()).hexdigest()[:16]
    target = _cache_dir() / f"trtlade-native-{key}.so"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        objs = [f"{tmp}.{i}.o" for i in range(len(SOURCES))]
        try:
            steps = [[cc, *(FLAGS if src == SOURCE else STRICT_FLAGS), "-c", str(src), "-o", obj]
                     for src, obj in zip(SOURCES, objs)]
            for argv in [*steps, [cc, *LINK_FLAGS, *objs, "-o", tmp, "-lm"]]:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    return None, f"{cc} failed: {done.stderr.strip()[-300:]}"
            os.replace(tmp, target)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{cc} failed: {exc}"
        finally:
            for leftover in (tmp, *objs):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return None, f"cannot load {target}: {exc}"
    fn = lib.trtlade_row_attention
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, i64, ptr, ptr, i64, i64, ptr, ptr, ptr, ptr, ptr, ptr, i64, ctypes.c_float,
                   ctypes.c_float, ptr]
    fn.restype = ctypes.c_int
    lib.trtlade_linear_caps.restype = ctypes.c_int
    for name in ("trtlade_linear_f32", "trtlade_linear_bf16"):
        getattr(lib, name).argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr, ctypes.c_int]
        getattr(lib, name).restype = ctypes.c_int
    lib.trtlade_forward_scratch.argtypes = [ctypes.POINTER(_Model), i64]
    lib.trtlade_forward_scratch.restype = i64
    lib.trtlade_forward.argtypes = [ctypes.POINTER(_Model), ctypes.POINTER(_Step)]
    lib.trtlade_forward.restype = ctypes.c_int
    return lib, (f"built with {cc} ({' '.join(FLAGS)} for row_attention.c, {' '.join(STRICT_FLAGS)} for "
                 f"linear.c and layer_ops.c): {target}")


def _library() -> Optional[ctypes.CDLL]:
    if "lib" not in _state:
        _state["lib"], _state["status"] = _build()
    return _state["lib"]


def status() -> str:
    """How the kernel was built, or why it is not available."""
    _library()
    return _state["status"]


def row_attention() -> Optional[Callable]:
    """The kernel as ``f(q [R, heads, dim], k, v [slots, kv_heads, capacity, dim], rows: RowKeys, scale,
    window=None, softcap=None) -> [R, heads, dim]`` (float32, contiguous), or None (see :func:`status`)."""
    lib = _library()
    if lib is None:
        return None
    fn = lib.trtlade_row_attention

    def call(q, k, v, rows: RowKeys, scale: float, window: Optional[int] = None, softcap: Optional[float] = None):
        import torch

        if not (q.dtype == k.dtype == v.dtype == torch.float32) or not (k.is_contiguous() and v.is_contiguous()):
            raise ValueError("row_attention takes contiguous float32 tensors")
        q = q.contiguous()
        out = torch.empty_like(q)
        R, heads, dim = q.shape
        args = (q.data_ptr(), R, heads, dim, k.data_ptr(), v.data_ptr(), k.shape[1], k.shape[2],
                rows.slot.ctypes.data, rows.committed.ctypes.data, rows.pos.ctypes.data, rows.ptr.ctypes.data,
                rows.idx.ctypes.data, rows.at.ctypes.data, int(window or 0), float(scale), float(softcap or 0.0),
                out.data_ptr())
        code = _profiled(PROFILE_LABEL, fn, *args)
        if code:
            raise ValueError(f"row_attention refused: head_dim {dim} > 512 or heads {heads} not a multiple of "
                             f"kv_heads {k.shape[1]}")
        return out

    return call


# ----------------------------------------------------------------------------------------- linear layers
#: bits of ``trtlade_linear_caps``: which dtypes ``linear.c`` was compiled for on this CPU
_CAPS = {"float32": 1, "bfloat16": 2}
#: outputs per panel of the packed layout
PANEL = 16


def linear_dtypes() -> tuple[str, ...]:
    """The dtypes the native linear kernel computes here (``float32`` needs AVX-512, ``bfloat16``
    AVX512-BF16); empty when the library is not built (see :func:`status`)."""
    lib = _library()
    if lib is None:
        return ()
    caps = lib.trtlade_linear_caps()
    return tuple(name for name, bit in _CAPS.items() if caps & bit)


class PanelLinear:
    """``y = x W^T + b`` by ``linear.c``: the weight packed once in panels of 16 outputs (float32
    ``[panels, K, 16]``, bfloat16 ``[panels, K/2, 16, 2]``), the only copy kept. Each output is one
    chain of fused multiply-adds over k in order, so a row gets the same bits whatever the rows
    beside it (see ``linear.c``). :meth:`rows` reads rows of W back from the packed copy (a tied
    input embedding needs no second copy).

    >>> import torch
    >>> w = torch.arange(40.).view(20, 2)                  # N = 20 outputs (two panels, one partial), K = 2
    >>> lin = PanelLinear.pack(w) if "float32" in linear_dtypes() else None
    >>> lin(torch.tensor([[1., 2.]]))[0, :3].tolist() if lin else [2.0, 8.0, 14.0]   # row n: 2n + 2(2n+1)
    [2.0, 8.0, 14.0]
    >>> lin.rows(torch.tensor([19, 0])).tolist() if lin else [[38.0, 39.0], [0.0, 1.0]]
    [[38.0, 39.0], [0.0, 1.0]]
    """

    def __init__(self, packed, bias, in_features: int, out_features: int) -> None:
        self.packed, self.bias = packed, bias
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.dtype = packed.dtype
        lib = _library()
        self._fn = lib.trtlade_linear_f32 if packed.element_size() == 4 else lib.trtlade_linear_bf16

    @classmethod
    def supports(cls, weight) -> bool:
        """Whether ``weight`` (``[N, K]``) can run here: on the CPU, in a dtype the kernel was built for
        (bfloat16: K even)."""
        import torch

        name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(weight.dtype)
        return (weight.device.type == "cpu" and weight.dim() == 2 and name in linear_dtypes()
                and (name == "float32" or weight.shape[1] % 2 == 0))

    @classmethod
    def pack(cls, weight, bias=None) -> "PanelLinear":
        """Pack ``weight`` ``[N, K]`` (float32 or bfloat16) and ``bias`` ``[N]`` (kept in float32)."""
        import torch

        if not cls.supports(weight):
            raise ValueError(f"the native linear kernel does not take a {tuple(weight.shape)} {weight.dtype} weight "
                             f"on {weight.device} here (built for: {', '.join(linear_dtypes()) or 'nothing'})")
        n, k = weight.shape
        padded = -(-n // PANEL) * PANEL
        w = torch.zeros(padded, k, dtype=weight.dtype)
        w[:n] = weight.detach()
        if weight.dtype == torch.float32:
            packed = w.view(padded // PANEL, PANEL, k).transpose(1, 2).contiguous()
        else:
            packed = w.view(padded // PANEL, PANEL, k // 2, 2).permute(0, 2, 1, 3).contiguous()
        b = None if bias is None else bias.detach().float().contiguous()
        return cls(packed, b, k, n)

    def __call__(self, x):
        import torch

        if x.dtype != self.dtype:
            raise ValueError(f"input is {x.dtype}, the weight {self.dtype}")
        rows = x.numel() // self.in_features
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=self.dtype)
        args = (x.data_ptr(), rows, self.in_features, self.packed.data_ptr(),
                self.bias.data_ptr() if self.bias is not None else None, self.out_features, y.data_ptr(),
                torch.get_num_threads())
        code = _profiled(LINEAR_LABEL, self._fn, *args)
        if code:
            raise ValueError(f"the native linear kernel refused {rows} x {self.in_features} -> {self.out_features} "
                             f"({self.dtype}): code {code}")
        return y

    def rows(self, ids):
        """Rows ``ids`` of the weight ``W`` ``[len(ids), K]``, read from the packed copy."""
        ids = ids.reshape(-1)
        panel, lane = ids // PANEL, ids % PANEL
        if self.packed.dim() == 3:  # float32 [panels, K, 16]
            return self.packed[panel, :, lane]
        return self.packed[panel, :, lane, :].reshape(len(ids), self.in_features)  # bf16 [panels, K/2, 16, 2]


# ----------------------------------------------------------------------------------------- the whole body
_P = ctypes.c_void_p


class _Model(ctypes.Structure):  # TrtladeModel in layer_ops.c
    _fields_ = [(n, ctypes.c_int64) for n in ("layers", "hidden", "heads", "kv_heads", "head_dim", "inter")] + \
        [("dtype", ctypes.c_int32), ("threads", ctypes.c_int32), ("eps", ctypes.c_float)] + \
        [(n, ctypes.POINTER(_P)) for n in ("attn_in", "attn_out", "mlp_in", "mlp_out", "attn_in_bias",
                                           "attn_out_bias", "mlp_in_bias", "mlp_out_bias", "in_norm", "post_norm",
                                           "q_norm", "k_norm")] + \
        [("final_norm", _P), ("scaling", ctypes.POINTER(ctypes.c_float)), ("window", ctypes.POINTER(ctypes.c_int64))]


class _Step(ctypes.Structure):  # TrtladeStep in layer_ops.c
    _fields_ = [("rows", ctypes.c_int64), ("capacity", ctypes.c_int64)] + \
        [(n, _P) for n in ("h", "out", "scratch", "cos", "sin", "slot", "index", "committed", "pos", "path_ptr",
                           "path_idx", "path_pos")] + [("keys", ctypes.POINTER(_P)), ("values", ctypes.POINTER(_P)),
                                                       ("timing", _P)]


@dataclass(frozen=True)
class BodyLayer:
    """One decoder layer for :class:`NativeBody`: its four packed projections (q/k/v fused, o, gate/up
    fused, down), its norm weights (model dtype; ``q_norm``/``k_norm`` None when the model has none),
    its attention scale and sliding window (None: full attention)."""

    attn_in: PanelLinear
    attn_out: PanelLinear
    mlp_in: PanelLinear
    mlp_out: PanelLinear
    input_norm: object
    post_norm: object
    q_norm: Optional[object]
    k_norm: Optional[object]
    scaling: float
    window: Optional[int]


class NativeBody:
    """A Llama-family decoder body run by ONE call per step (``trtlade_forward`` in ``layer_ops.c``):
    per layer the fused q/k/v GEMM, q/k norms + rotary + the K/V write, row-invariant attention, o, the
    residual add + RMSNorm, gate/up, SiLU times up, down, residual add + the next norm. Python pays one
    call per step instead of about 25 per layer. ``heads``/``kv_heads``/``head_dim`` as the attention
    splits them; ``eps``: every norm's epsilon (one value)."""

    #: the parts :attr:`timings` splits a step into (what a torch profiler cannot see inside the call)
    PARTS = ("linear layers", "attention", "norms, rotary, activations, K/V writes")

    def __init__(self, layers: Sequence[BodyLayer], final_norm, *, heads: int, kv_heads: int, head_dim: int,
                 eps: float) -> None:
        import torch

        lib = _library()
        if lib is None:
            raise ValueError(f"the native body needs the native library: {status()}")
        self._lib, self._torch = lib, torch
        first = layers[0]
        self._keep: list = [final_norm]  # every tensor the structure points into

        def array(values, ctype=_P):
            arr = (ctype * len(values))(*values)
            self._keep.append(arr)
            return arr

        def ptrs(tensors):
            self._keep.extend(t for t in tensors if t is not None)
            return array([t.data_ptr() if t is not None else None for t in tensors])

        def packed(name):
            return ptrs([getattr(layer, name).packed for layer in layers])

        def bias(name):
            return ptrs([getattr(layer, name).bias for layer in layers])

        m = _Model(layers=len(layers), hidden=first.attn_in.in_features, heads=heads, kv_heads=kv_heads,
                   head_dim=head_dim, inter=first.mlp_out.in_features,
                   dtype=1 if first.attn_in.dtype == torch.bfloat16 else 0, threads=0, eps=float(eps))
        for name in ("attn_in", "attn_out", "mlp_in", "mlp_out"):
            setattr(m, name, packed(name))
            setattr(m, f"{name}_bias", bias(name))
        for field, name in (("in_norm", "input_norm"), ("post_norm", "post_norm"), ("q_norm", "q_norm"),
                            ("k_norm", "k_norm")):
            setattr(m, field, ptrs([getattr(layer, name) for layer in layers]))
        m.final_norm = final_norm.data_ptr()
        m.scaling = array([layer.scaling for layer in layers], ctypes.c_float)
        m.window = array([int(layer.window or 0) for layer in layers], ctypes.c_int64)
        self._model = m
        self._caches: tuple = (None, None, None)
        #: seconds spent in the body's parts while a torch profiler runs (see :attr:`PARTS`)
        self.timings = np.zeros(len(self.PARTS), dtype=np.float64)

    def __call__(self, h, cos, sin, keys: RowKeys, index: np.ndarray, caches: Sequence[tuple]):
        """``h`` ``[R, hidden]`` the embedded rows (overwritten: the residual stream), ``cos``/``sin``
        ``[R, head_dim]`` float32, ``keys`` each row's keys, ``index`` where each row's K/V go in its
        slot, ``caches`` each layer's float32 ``(keys, values)`` ``[slots, kv_heads, capacity, dim]``;
        returns the final norm's output ``[R, hidden]``."""
        torch = self._torch
        rows = h.shape[0]
        self._model.threads = torch.get_num_threads()
        scratch = torch.empty(self._lib.trtlade_forward_scratch(ctypes.byref(self._model), rows), dtype=torch.uint8)
        out = torch.empty_like(h)
        k_ptrs, v_ptrs = self._cache_pointers(caches)
        step = _Step(rows=rows, capacity=caches[0][0].shape[2], h=h.data_ptr(), out=out.data_ptr(),
                     scratch=scratch.data_ptr(), cos=cos.data_ptr(), sin=sin.data_ptr(), slot=keys.slot.ctypes.data,
                     index=index.ctypes.data, committed=keys.committed.ctypes.data, pos=keys.pos.ctypes.data,
                     path_ptr=keys.ptr.ctypes.data, path_idx=keys.idx.ctypes.data, path_pos=keys.at.ctypes.data,
                     keys=k_ptrs, values=v_ptrs)
        if torch.autograd.profiler._is_profiler_enabled:  # a profile: the body times its parts too
            step.timing = self.timings.ctypes.data
        code = _profiled(BODY_LABEL, self._lib.trtlade_forward, ctypes.byref(self._model), ctypes.byref(step))
        if code:
            raise ValueError(f"the native body refused the step (code {code})")
        return out

    def _cache_pointers(self, caches: Sequence[tuple]):
        """Per layer pointer arrays to the cache buffers, rebuilt only when the cache was reallocated."""
        key = tuple(k.data_ptr() for k, _ in caches)
        if self._caches[0] != key:
            k_ptrs = (_P * len(caches))(*[k.data_ptr() for k, _ in caches])
            v_ptrs = (_P * len(caches))(*[v.data_ptr() for _, v in caches])
            self._caches = (key, k_ptrs, v_ptrs)
        return self._caches[1], self._caches[2]

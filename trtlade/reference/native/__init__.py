"""The engine's one native kernel: row-invariant attention (``row_attention.c``), built on first use.

Built with the system C compiler (``$CC``, else ``cc`` / ``gcc``) into ``~/.cache/trtlade/native/``,
keyed by the source, the flags and this CPU (``-march=native``), and loaded with ctypes: no torch
headers, no build step in the package, about a second to compile. When there is no compiler or the
build fails, :func:`row_attention` is None and :func:`status` says why; the engine then uses its
torch implementation (:func:`trtlade.reference.batch_runner.invariant_attention`), which gives the same
guarantee more slowly. ``TRTLADE_NATIVE=0`` turns the kernel off.

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

__all__ = ["RowKeys", "row_attention", "status", "FLAGS", "PROFILE_LABEL"]

SOURCE = Path(__file__).with_name("row_attention.c")
#: Compile flags. -ffast-math only for compiling (it lets expf/tanhf vectorise; one compiled sequence
#: computes every row, so invariance does not depend on it): linking with it would add crtfastmath.o,
#: whose constructor sets flush-to-zero for the whole process when the library loads.
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")
_state: dict = {}
#: the kernel's name in a torch profile
PROFILE_LABEL = "trtlade.row_attention"


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
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS + LINK_FLAGS).encode()
                         + _cpu_key().encode()).hexdigest()[:16]
    target = _cache_dir() / f"row_attention-{key}.so"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            obj = tmp + ".o"
            for argv in ([cc, *FLAGS, "-c", str(SOURCE), "-o", obj], [cc, *LINK_FLAGS, obj, "-o", tmp, "-lm"]):
                done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    return None, f"{cc} failed: {done.stderr.strip()[-300:]}"
            os.replace(tmp, target)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{cc} failed: {exc}"
        finally:
            for leftover in (tmp, tmp + ".o"):
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
    return lib, f"built with {cc} {' '.join(FLAGS)}: {target}"


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
        if torch.autograd.profiler._is_profiler_enabled:  # named in a profile (engine-bench's breakdown)
            with torch.profiler.record_function(PROFILE_LABEL):
                code = fn(*args)
        else:
            code = fn(*args)
        if code:
            raise ValueError(f"row_attention refused: head_dim {dim} > 512 or heads {heads} not a multiple of "
                             f"kv_heads {k.shape[1]}")
        return out

    return call

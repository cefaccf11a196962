"""The packed weights on 2 MiB pages: fewer TLB misses while a step streams every weight once.

A decode step reads every weight of the model once (538 MB for SmolLM2-135M in float32). On 4 KiB pages that
is one page-table walk every 64 cache lines, and in a virtual machine each walk is two-dimensional (the guest's
tables, then the host's). Linux's transparent huge pages (THP) map an advised region in 2 MiB pages instead,
512 times fewer walks. :class:`PageArena` places the packed weights in anonymous mappings aligned to 2 MiB and
advised ``MADV_HUGEPAGE``, one after another in chunks of :data:`CHUNK` (a weight larger than that gets a
mapping of its own), so the pages a model touches are whole and its few small weights waste nothing.

Where THP is off (``/sys/kernel/mm/transparent_hugepage/enabled`` says ``[never]``), the OS is not Linux, or
``TRTLADE_HUGE_PAGES=0``, the weights stay where torch allocates them. The OS may still back an advised region
with 4 KiB pages (no free 2 MiB of memory at the time): :func:`huge_page_bytes` says what it gave. A page
never changes a value: the kernels read the same bytes.

Worked example (offsets in a chunk; each weight starts on a cache line, 64 bytes)::

    weight (SmolLM2, float32)   bytes     offset
    q,k,v   576 -> 960          2211840   0
    o       576 -> 576          1327104   2211840
    gate,up 576 -> 3072         7077888   3538944
    down    1536 -> 576         3538944   10616832
    q,k,v of the next layer     2211840   14155776

>>> import torch
>>> arena = PageArena()
>>> w = arena.copy(torch.arange(6.0).view(2, 3))
>>> w.tolist(), w.is_contiguous()
([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], True)
>>> arena.offsets_of(2211840, 1327104, 7077888, 3538944, 2211840)
[0, 2211840, 3538944, 10616832, 14155776]
>>> arena.offsets_of(100, 100)    # the second starts on the next cache line
[0, 128]
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import threading
import weakref
from typing import Callable, Optional

__all__ = ["CHUNK", "HUGE", "HUGE_PAGES_ENV", "PageArena", "env_warning", "huge_page_bytes", "huge_page_size",
           "pages_line", "pages_state", "placement", "return_freed_memory", "thp_mode",
           "weights_arena"]

#: a transparent huge page of x86-64 and of aarch64 with 4 KiB base pages
HUGE = 2 << 20
#: the mapping that consecutive weights share (a larger weight gets a mapping of its own)
CHUNK = 32 * HUGE
#: where each weight starts in its chunk: a cache line
ALIGN = 64
#: the C heap's free pages are given back (:func:`return_freed_memory`) each time the arena has placed this much:
#: a model being packed frees each source weight once its copy is here, and that memory, which torch's next packed
#: copy would have reused, would otherwise stay in the process until the load ends (the embedded model in float32:
#: 1.84 GB at the peak of its load instead of 1.49)
TRIM_EVERY = 16 << 20
#: ``TRTLADE_HUGE_PAGES=0``: the packed weights stay on torch's pages
HUGE_PAGES_ENV = "TRTLADE_HUGE_PAGES"
_THP_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
_PMD_FILE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"


def thp_mode(path: Optional[str] = None) -> str:
    """The kernel's THP setting (``path``: ``/sys/kernel/mm/transparent_hugepage/enabled``): ``always``, ``madvise``,
    ``never``, or ``unavailable`` (no such file: not Linux, or a kernel without THP)."""
    try:
        with open(path or _THP_FILE, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else "unavailable"


def env_warning() -> Optional[str]:
    """What ``TRTLADE_HUGE_PAGES`` asked for and did not get (a value not understood), or None."""
    value = os.environ.get(HUGE_PAGES_ENV)
    if value in (None, "0", "1"):
        return None
    return f"{HUGE_PAGES_ENV}={value!r} not understood (0: off, 1: on where the OS has THP): left on"


def pages_state() -> tuple[bool, str]:
    """Whether weights go on 2 MiB pages here, and why (or why not)."""
    if os.environ.get(HUGE_PAGES_ENV) == "0":
        return False, f"off ({HUGE_PAGES_ENV}=0)"
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False, "this OS has no transparent huge pages"
    mode = thp_mode()
    if mode not in ("always", "madvise"):
        return False, f"transparent huge pages are {mode} here"
    size = huge_page_size()
    if size != HUGE:
        return False, f"this kernel's huge pages are {size >> 10} KiB, not 2 MiB (its base pages are not 4 KiB)"
    return True, f"transparent huge pages ({mode}), advised"


def huge_page_size(path: Optional[str] = None) -> int:
    """The size of a transparent huge page here (``path``: ``.../hpage_pmd_size``; 2 MiB where it cannot be read)."""
    try:
        with open(path or _PMD_FILE, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return HUGE


class PageArena:
    """Tensors placed one after another in 2 MiB-aligned anonymous mappings advised ``MADV_HUGEPAGE``
    (:meth:`empty`, :meth:`copy`); plain torch tensors where :func:`pages_state` says no. A mapping lives as long as
    any tensor in it (the arena holds none: a dropped model gives all its pages back)."""

    def __init__(self, chunk: int = CHUNK) -> None:
        self.enabled, self.why = pages_state()
        self.chunk = chunk
        self._lock = threading.Lock()
        self._chunk: Optional[weakref.ref] = None  # the chunk being filled, while a tensor holds it
        self._skip = 0  # where its 2 MiB boundary is
        self._used = self._since_trim = 0
        self._maps: list[tuple[int, int, weakref.ref]] = []  # (start, bytes, the mmap while it lives)

    @property
    def mappings(self) -> list[tuple[int, int]]:
        """(start address, bytes) of the arena's mappings still alive (a tensor in them)."""
        with self._lock:
            self._maps = [m for m in self._maps if m[2]() is not None]
            return [(start, size) for start, size, _ in self._maps]

    def empty(self, shape, dtype):
        """An uninitialised contiguous tensor of ``shape`` and ``dtype`` on the arena's pages."""
        import torch

        size = torch.Size(shape)
        nbytes = size.numel() * torch.empty((), dtype=dtype).element_size()
        if not self.enabled or nbytes == 0:
            return torch.empty(size, dtype=dtype)
        with self._lock:
            view = self._take(nbytes)
        return torch.frombuffer(view, dtype=dtype).view(size)

    def copy(self, tensor):
        """``tensor``'s values, contiguous, on the arena's pages."""
        out = self.empty(tensor.shape, tensor.dtype)
        out.copy_(tensor)
        return out

    def seal(self) -> None:
        """Start the next weight on a chunk of its own: a model whose packing is done shares no mapping with the next
        one, so dropping it gives all its pages back."""
        with self._lock:
            self._chunk = None

    def offsets_of(self, *sizes: int) -> list[int]:
        """Where weights of these byte sizes would start in a fresh chunk (no memory taken)."""
        at, out = 0, []
        for size in sizes:
            out.append(at)
            at = -(-(at + size) // ALIGN) * ALIGN
        return out

    def _take(self, nbytes: int) -> memoryview:
        self._since_trim += nbytes
        if self._since_trim >= TRIM_EVERY:
            self._since_trim = 0
            return_freed_memory()
        if nbytes > self.chunk:
            region, skip = self._map(-(-nbytes // HUGE) * HUGE)
            return memoryview(region)[skip:skip + nbytes]
        region = self._chunk() if self._chunk is not None else None
        if region is None or self._used + nbytes > self.chunk:
            region, self._skip = self._map(self.chunk)
            self._chunk, self._used = weakref.ref(region), 0
        start = self._skip + self._used
        self._used = -(-(self._used + nbytes) // ALIGN) * ALIGN
        return memoryview(region)[start:start + nbytes]

    def _map(self, size: int) -> tuple[mmap.mmap, int]:
        """A mapping of ``size`` bytes from a 2 MiB boundary, and where in it that boundary is (one more huge page is
        mapped to find it; the pages before the boundary are never touched, so never resident), advised
        MADV_HUGEPAGE."""
        region = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        skip = (-base) % HUGE
        with contextlib.suppress(OSError):  # refused (a sandbox's kernel): the mapping keeps base pages
            region.madvise(mmap.MADV_HUGEPAGE, skip, size)
        self._maps.append((base + skip, size, weakref.ref(region)))
        return region, skip


def return_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; a no-op elsewhere): loading
    frees the checkpoint's tensors once their packed copies exist, and glibc would otherwise keep that
    memory in the process (bf16: 625 MiB resident instead of 393 after loading the embedded model)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim`` from the symbols the process has loaded (None elsewhere), looked up once."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def huge_page_bytes(mappings: list[tuple[int, int]], smaps: str = "/proc/self/smaps") -> Optional[int]:
    """How many bytes of these (start, size) ranges the OS backs with huge pages (``AnonHugePages`` of the
    mappings that hold them), or None where ``smaps`` cannot be read.

    >>> import tempfile
    >>> text = ("7f0000000000-7f0004200000 rw-p 00000000 00:00 0\\nAnonHugePages:     4096 kB\\n"
    ...         "7f1000000000-7f1000001000 r--p 00000000 00:00 0\\nAnonHugePages:        0 kB\\n")
    >>> with tempfile.NamedTemporaryFile("w", suffix=".smaps") as f:
    ...     _ = f.write(text); f.flush()
    ...     huge_page_bytes([(0x7f0000200000, 4 << 20)], f.name)
    4194304
    """
    try:
        with open(smaps, encoding="utf-8", errors="replace") as f:  # mapped files' paths may be in any encoding
            lines = f.read().splitlines()
    except OSError:
        return None
    total, inside = 0, False
    for line in lines:
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(part, 16) for part in head.split("-"))
            inside = any(lo < start + size and start < hi for start, size in mappings)
        elif inside and line.startswith("AnonHugePages:"):
            fields = line.split()
            total += int(fields[1]) * 1024 if len(fields) > 1 and fields[1].isdigit() else 0
    return total


def placement(tensors, why: str) -> dict:
    """Where ``tensors`` (a model's packed weights) lie: their ``bytes``; ``advised_bytes``, those in an arena's
    mappings; ``huge_page_bytes``, the part of those the OS backs with 2 MiB pages (from the mappings'
    ``AnonHugePages``, at most ``advised_bytes``; None where ``/proc/self/smaps`` cannot be read); ``pages``: ``why``,
    what :func:`pages_state` said when they were placed."""
    unique = {t.data_ptr(): t.numel() * t.element_size() for t in tensors if t.numel()}
    maps = [m for arena in list(_ARENAS.values()) for m in arena.mappings]
    holding = [(start, size) for start, size in maps if any(start <= ptr < start + size for ptr in unique)]
    advised = sum(n for ptr, n in unique.items() if any(start <= ptr < start + size for start, size in holding))
    huge = huge_page_bytes(holding) if holding else 0
    return {"bytes": sum(unique.values()), "advised_bytes": advised,
            "huge_page_bytes": None if huge is None else min(huge, advised), "pages": why}


def pages_line(report: dict) -> str:
    """:func:`placement`'s report in words.

    >>> pages_line({"bytes": 537919488, "advised_bytes": 537919488, "huge_page_bytes": 536870912,
    ...             "pages": "transparent huge pages (madvise), advised"})
    '538 MB packed, 537 MB of it on 2 MiB pages (transparent huge pages (madvise), advised)'
    >>> pages_line({"bytes": 537919488, "advised_bytes": 0, "huge_page_bytes": 0,
    ...             "pages": "off (TRTLADE_HUGE_PAGES=0)"})
    "538 MB packed, not advised: on the allocator's pages (off (TRTLADE_HUGE_PAGES=0))"
    """
    mb = report["bytes"] / 1e6
    if not report.get("advised_bytes"):
        return f"{mb:.0f} MB packed, not advised: on the allocator's pages ({report['pages']})"
    huge = report.get("huge_page_bytes")
    got = "of it on 2 MiB pages" if huge is not None else "advised (smaps unreadable: how much the OS gave unknown)"
    return f"{mb:.0f} MB packed, {(huge if huge is not None else report['advised_bytes']) / 1e6:.0f} MB {got} " \
           f"({report['pages']})"


_ARENAS: dict[tuple[bool, str], PageArena] = {}


def weights_arena() -> PageArena:
    """The process's arena for packed weights, one per :func:`pages_state` (``TRTLADE_HUGE_PAGES`` is read at
    every call)."""
    state = pages_state()
    arena = _ARENAS.get(state)
    return arena if arena is not None else _ARENAS.setdefault(state, PageArena())

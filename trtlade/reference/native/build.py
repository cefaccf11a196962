"""Building the native library: the system C compiler, one shared library with every CPU variant, cached.

Each kernel source is compiled once per variant (:mod:`trtlade.reference.native.cpu`) with that
variant's target flags, its exported ``trtlade_*`` functions renamed ``trtlade_*__<variant>`` on the
command line (the sources stay plain C; a variant's body calls its own linear and attention kernels),
and linked with ``cpu.c`` into one library under ``~/.cache/trtlade/native/``, keyed by the sources,
the flags and the compiler: the same file serves every CPU of the architecture. A variant the compiler
cannot build (an old compiler without ``-mavx512bf16``) is left out and said in the status.

>>> exported("int trtlade_f(int x) {\\nstatic int g(void) {\\nconst char *trtlade_name(int d) {")
['trtlade_f', 'trtlade_name']
>>> renames(["trtlade_f"], "avx2")
['-Dtrtlade_f=trtlade_f__avx2']
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from trtlade.reference.native.cpu import Variant

__all__ = ["HERE", "KERNELS", "PROBE", "STRICT", "LINK", "Built", "build", "exported", "renames",
           "compiler", "cache_dir"]

HERE = Path(__file__).parent
#: The kernel sources, compiled once per variant: attention, linear layers, the small ops and the body.
KERNELS = (HERE / "row_attention.c", HERE / "linear.c", HERE / "layer_ops.c")
#: The CPU probe, compiled once for the architecture's baseline.
PROBE = HERE / "cpu.c"
#: Every source: strict IEEE arithmetic. With -ffast-math the compiler may vectorise a loop with a peeled
#: scalar head whose length depends on a buffer's alignment (and vector expf in the body, scalar expf in
#: the head, or reductions regrouped): a row's bits would then depend on where it sits in memory, that is
#: on the rows beside it, and on the CPU variant. linear.c is intrinsics and fmaf; the others plain C with
#: exp/tanh of det_math.h. (-ffast-math at link time would also add crtfastmath.o, whose constructor sets
#: flush-to-zero for the whole process.) -fno-trapping-math changes no value (nothing here reads an FP
#: exception flag, and every operation rounds as before): it lets GCC if-convert a loop whose float
#: comparisons could raise one, so exp_det's clamps no longer keep the SiLU loop scalar ("control flow in
#: loop"). The bit harness checks it (tests/test_native_arch.py: one hash on every variant and on aarch64).
STRICT = ("-O3", "-ffp-contract=off", "-fno-trapping-math", "-fopenmp", "-fPIC")
LINK = ("-shared", "-fopenmp")


@dataclass(frozen=True)
class Built:
    """The library (None when nothing could be built), the variants in it, and what happened."""

    path: Optional[Path]
    variants: tuple[str, ...]
    message: str


def exported(source: str) -> list[str]:
    """The non-static ``trtlade_*`` functions a C source defines (the names each variant renames)."""
    return re.findall(r"^(?:int|int64_t|const char \*)\s*(trtlade_\w+)\(", source, flags=re.M)


def renames(names: Sequence[str], variant: str) -> list[str]:
    """Compiler flags that rename each of ``names`` to its variant's symbol."""
    return [f"-D{name}={name}__{variant}" for name in names]


def compiler() -> Optional[str]:
    """``$CC``, else ``cc``, else ``gcc``: the first on the PATH (None: none)."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trtlade" / "native"


def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _commands(cc: str, variants: Sequence[Variant], tmp: str) -> list[tuple[str, list[str], str]]:
    """(variant, argv, object) for every compile: the probe, then each variant's three sources."""
    names = sorted({n for src in KERNELS for n in exported(src.read_text())})
    jobs = [("", [cc, *STRICT, "-c", str(PROBE), "-o", f"{tmp}.probe.o"], f"{tmp}.probe.o")]
    for v in variants:
        for i, src in enumerate(KERNELS):
            obj = f"{tmp}.{v.name}.{i}.o"
            jobs.append((v.name, [cc, *STRICT, *v.flags, *renames(names, v.name), "-c", str(src), "-o", obj], obj))
    return jobs


def _run(argv: list[str]) -> str:
    """'' when the command succeeded, else the end of its error output."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")[-300:]


def build(variants: Sequence[Variant]) -> Built:
    """The library with every variant that compiles here, from the cache when it is there."""
    cc = compiler()
    if cc is None:
        return Built(None, (), "no C compiler (cc/gcc) found: the torch implementation runs instead")
    recipe = repr((STRICT, LINK, [(v.name, v.flags) for v in variants], _version(cc))).encode()
    sources = b"".join(src.read_bytes() for src in (PROBE, *KERNELS, *sorted(HERE.glob("*.h"))))
    key = hashlib.sha256(sources + recipe).hexdigest()[:16]
    target = cache_dir() / f"trtlade-native-{key}.so"
    index = target.with_suffix(".variants")
    if target.is_file() and index.is_file():
        names = tuple(index.read_text().split())
        return Built(target, names, f"built with {cc}, variants {', '.join(names)}: {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    jobs = _commands(cc, variants, tmp)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
            errors = list(pool.map(lambda job: _run(job[1]), jobs))
        if errors[0]:
            return Built(None, (), f"{cc} failed on {PROBE.name}: {errors[0]}")
        failed = {name: err for (name, _, _), err in zip(jobs, errors) if err and name}
        kept = [v.name for v in variants if v.name not in failed]
        if not kept:
            return Built(None, (), f"{cc} failed: {next(iter(failed.values()))}")
        objects = [obj for name, _, obj in jobs if name in ("", *kept)]
        err = _run([cc, *LINK, *objects, "-o", tmp, "-lm"])
        if err:
            return Built(None, (), f"{cc} failed to link: {err}")
        os.replace(tmp, target)
        index.write_text(" ".join(kept) + "\n")
    finally:
        for leftover in (tmp, *(obj for _, _, obj in jobs)):
            if os.path.exists(leftover):
                os.unlink(leftover)
    dropped = "".join(f"; {name} not built ({err.splitlines()[-1][:120]})" for name, err in failed.items())
    return Built(target, tuple(kept), f"built with {cc}, variants {', '.join(kept)}{dropped}: {target}")

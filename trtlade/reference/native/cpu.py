"""The native library's CPU variants and which one a process runs: one dispatch table, chosen at load.

Every C source is compiled once per variant of this machine's architecture, with that variant's explicit
target flags (never ``-march=native``: the library must not depend on the CPU that built it, and an
emulated CPU must not get the host's instructions). ``cpu.c`` answers with CPUID which variants this CPU
can execute; the best of those is loaded, unless ``TRTLADE_NATIVE_ISA`` names a lower one.

>>> [v.name for v in variants_for("x86_64")]
['avx512bf16', 'avx512', 'avx2', 'portable']
>>> [v.name for v in variants_for("aarch64")]
['portable']
>>> [v.name for v in executable(variants_for("x86_64"), features=1)]   # an AVX2-only CPU (AMD Zen 2/3)
['avx2', 'portable']
>>> choose(variants_for("x86_64"), features=3, forced=None).name        # AVX-512 without BF16 (Intel Xeon)
'avx512'
>>> choose(variants_for("x86_64"), features=1, forced="portable").name
'portable'
>>> choose(variants_for("x86_64"), features=1, forced="avx512")
Traceback (most recent call last):
...
ValueError: TRTLADE_NATIVE_ISA=avx512: this CPU lacks AVX-512 F/BW/VL/DQ; it runs: avx2, portable
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["ENV", "Variant", "variants_for", "executable", "choose", "lacks"]

#: Names a variant to load instead of the best this CPU runs (a lower one, to compare or to test).
ENV = "TRTLADE_NATIVE_ISA"

#: The bits of ``trtlade_cpu_features`` (cpu.c) and what each stands for.
FEATURES = {1: "AVX2 + FMA + F16C", 2: "AVX-512 F/BW/VL/DQ", 4: "AVX512-BF16"}


@dataclass(frozen=True)
class Variant:
    """One compiled variant: ``name`` (the suffix of its symbols), its compiler target ``flags``, the
    ``trtlade_cpu_features`` bits it needs, and what computes each dtype (said in /version)."""

    name: str
    flags: tuple[str, ...]
    needs: int
    float32: str
    bfloat16: str


_AVX2 = ("-mavx2", "-mfma", "-mf16c")
_AVX512 = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", *_AVX2)
PORTABLE = Variant("portable", (), 0, "portable C (fmaf)", "portable C (widened to float32, fmaf)")
X86_64 = (
    Variant("avx512bf16", (*_AVX512, "-mavx512bf16"), 1 | 2 | 4, "AVX-512F", "AVX512-BF16 (VDPBF16PS)"),
    Variant("avx512", _AVX512, 1 | 2, "AVX-512F", "AVX2 + FMA (widened to float32)"),
    Variant("avx2", _AVX2, 1, "AVX2 + FMA", "AVX2 + FMA (widened to float32)"),
    PORTABLE,
)


def variants_for(machine: Optional[str] = None) -> tuple[Variant, ...]:
    """The variants built on ``machine`` (``platform.machine()``), best first; the last is portable C."""
    machine = (machine or platform.machine()).lower()
    return X86_64 if machine in ("x86_64", "amd64") else (PORTABLE,)


def executable(variants: Sequence[Variant], features: int) -> list[Variant]:
    """The variants a CPU with ``features`` (``trtlade_cpu_features``) can execute, best first."""
    return [v for v in variants if v.needs & features == v.needs]


def lacks(variant: Variant, features: int) -> str:
    """The CPU features ``variant`` needs that ``features`` does not have, by name."""
    return ", ".join(name for bit, name in FEATURES.items() if variant.needs & bit and not features & bit)


def choose(variants: Sequence[Variant], features: int, forced: Optional[str]) -> Variant:
    """The best executable variant, or ``forced`` (a name); ValueError for a name that is unknown or
    that this CPU cannot execute, saying what it lacks and what it runs."""
    runs = executable(variants, features)
    if not forced:
        return runs[0]
    by_name = {v.name: v for v in variants}
    if forced not in by_name:
        raise ValueError(f"{ENV}={forced}: not a variant of this machine; use one of "
                         f"{', '.join(by_name)}")
    if by_name[forced] not in runs:
        raise ValueError(f"{ENV}={forced}: this CPU lacks {lacks(by_name[forced], features)}; it runs: "
                         f"{', '.join(v.name for v in runs)}")
    return by_name[forced]

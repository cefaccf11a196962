"""The native library's CPU variants as test parameters: every variant of this machine's architecture,
each run where this CPU executes it and skipped with the CPU feature it lacks where it does not (never
silently), so that the same tests hold every variant to the same promise on every host."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import pytest

from trtlade.reference.native import executable_variants, status
from trtlade.reference.native.bindings import _load
from trtlade.reference.native.cpu import ENV, lacks, variants_for

ALL = tuple(v.name for v in variants_for())
RUNS = executable_variants()


def cpu_flags() -> set[str]:
    """The CPU's flags as Linux reports them: a witness of the CPU's features that does not go through the library."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


#: this CPU runs the avx512bf16 variant and has AMX-BF16 tiles (as Linux reports them)
HAS_AMX = "avx512bf16" in RUNS and {"amx_bf16", "amx_tile"} <= cpu_flags()
#: bfloat16 runs on AMX tiles in this process's avx512bf16 variant (the CPU has them, TRTLADE_AMX=0 not set)
AMX = HAS_AMX and os.environ.get("TRTLADE_AMX") != "0"


def bf16_kernels(variant: str) -> str:
    """What the engine says computes a bfloat16 model's step on ``variant`` (its ``kernels`` field)."""
    return f"native {variant} (one call per step{'; bfloat16 on AMX tiles' if AMX and variant == 'avx512bf16' else ''})"


def _reason(name: str) -> str:
    if not RUNS:
        return f"native library not available here: {status()}"
    variant = next(v for v in variants_for() if v.name == name)
    missing = lacks(variant, _load()["features"])
    return f"this CPU lacks {missing}" if missing else f"variant {name} not built here: {status()}"


def params() -> list:
    """``pytest.param(name)`` for every variant, skipped with its reason where this CPU cannot run it."""
    return [pytest.param(name, id=name, marks=() if name in RUNS else pytest.mark.skip(reason=_reason(name)))
            for name in ALL]


def pairs() -> list:
    """Every variant beside the best one this CPU runs (to compare their bits), skipped as :func:`params`."""
    best = RUNS[0] if RUNS else ALL[0]
    return [p for p in params() if p.values[0] != best]


@contextmanager
def forced(name: Optional[str]) -> Iterator[None]:
    """``TRTLADE_NATIVE_ISA=name`` inside the block (None: the environment as the process was started, so a
    run under ``TRTLADE_NATIVE_ISA=portable`` keeps it), restored after: an engine loaded inside keeps the
    variant it packed its weights for."""
    before = os.environ.get(ENV)
    if name is not None:
        os.environ[ENV] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before

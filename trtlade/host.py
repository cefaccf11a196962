"""What host this process runs on: its CPU's model, vendor identity and class (what a speed figure holds for).
Read from ``/proc/cpuinfo``; nothing here imports another room."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any, Optional

__all__ = ["cpu_class", "cpu_identity", "cpu_model", "host_info"]


def _cpuinfo(text: Optional[str] = None) -> Optional[dict[str, str]]:
    """The first processor's fields of ``/proc/cpuinfo`` (``text``), keys lower-case; None where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text() if text is None else text
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() not in fields:
            fields[key.strip().lower()] = value.strip()
    return fields


def cpu_model() -> Optional[str]:
    return (_cpuinfo() or {}).get("model name") or platform.processor() or None


def cpu_class(flags: set[str], machine: str) -> str:
    """The CPU class a speed figure holds for, from the CPU's feature flags (``/proc/cpuinfo``: ``flags`` on
    x86-64, ``Features`` on aarch64) and its architecture: what decides which kernels run and how fast a row is.

    >>> cpu_class({"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "amx_tile"}, "x86_64")
    'x86-64, AVX-512 with AVX512-BF16 and AMX'
    >>> cpu_class({"avx2", "fma", "f16c"}, "x86_64"), cpu_class({"sse2"}, "x86_64")
    ('x86-64, AVX2+FMA (no AVX-512)', 'x86-64 without AVX2')
    >>> cpu_class({"fp", "asimd", "sve"}, "aarch64"), cpu_class(set(), "riscv64")
    ('aarch64 with SVE', 'riscv64')
    """
    machine = machine.lower()
    if machine in ("x86_64", "amd64"):
        if {"avx512f", "avx512bw"} <= flags:
            extras = [name for flag, name in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX")) if flag in flags]
            return "x86-64, AVX-512" + (" with " + " and ".join(extras) if extras else " (no AVX512-BF16)")
        return "x86-64, AVX2+FMA (no AVX-512)" if {"avx2", "fma"} <= flags else "x86-64 without AVX2"
    if machine in ("aarch64", "arm64"):
        return "aarch64 with SVE" if "sve" in flags else "aarch64 (NEON)" if "asimd" in flags else "aarch64"
    return machine


def cpu_identity(text: Optional[str] = None, machine: Optional[str] = None) -> dict[str, Any]:
    """The CPU's class (:func:`cpu_class`) and its vendor's identity (x86-64: vendor, family and model numbers,
    which a virtual machine's model name often hides; aarch64: implementer and part), from ``/proc/cpuinfo``
    (``text``); empty where it cannot be read, without the class where it lists no flags.

    >>> text = ["vendor_id : AuthenticAMD", "cpu family : 25", "model : 1", "model name : AMD EPYC", "flags : avx2 fma"]
    >>> cpu_identity(chr(10).join(text), "x86_64")
    {'cpu_class': 'x86-64, AVX2+FMA (no AVX-512)', 'cpu_id': 'AuthenticAMD family 25 model 1'}
    """
    fields = _cpuinfo(text)
    if fields is None:
        return {}
    listed = fields.get("flags", fields.get("features"))
    if "vendor_id" in fields:
        ident = f"{fields['vendor_id']} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    elif "cpu implementer" in fields:
        ident = f"implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    else:
        ident = None
    out: dict[str, Any] = {}
    if listed is not None:  # no flags listed: no class claimed
        out["cpu_class"] = cpu_class(set(listed.split()), machine or platform.machine())
    if ident:
        out["cpu_id"] = ident
    return out


@functools.lru_cache(maxsize=1)
def host_info() -> dict[str, Any]:
    """This host as a report names it: the CPU's model (``cpu``), :func:`cpu_identity` and the CPU count (read once:
    a copy is returned)."""
    return {"cpu": cpu_model(), **cpu_identity(), "cpu_count": os.cpu_count()}

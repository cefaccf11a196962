"""Run metadata for reports: trtlade version, git commit, machine and platform."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional

__all__ = ["git_commit", "machine_info", "describe_server", "cpu_class", "cpu_identity"]


def git_commit(path: Optional[Path] = None) -> Optional[str]:
    """The commit of the git work tree holding trtlade (``+dirty`` with local changes), else None."""
    where = path or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


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


def _cpu_model() -> Optional[str]:
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


def _memory_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_info() -> dict[str, Any]:
    from trtlade import __version__

    return {
        "trtlade_version": __version__,
        "git_commit": git_commit(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        **cpu_identity(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
    }


def device_name(device: str = "cpu") -> Optional[str]:
    """What a speed figure ran on: for ``cpu`` the CPU's model with its vendor's identity and its class
    (:func:`cpu_identity`: ``AMD EPYC (AuthenticAMD family 25 model 1; x86-64, AVX2+FMA (no AVX-512))``), the GPU's
    name for a CUDA device (torch is imported only then), else the device as given.

    >>> device_name("mps")
    'mps'
    """
    if device == "cpu":
        known = cpu_identity()
        said = "; ".join(known[k] for k in ("cpu_id", "cpu_class") if k in known)
        return f"{_cpu_model() or 'unknown CPU'} ({said})" if said else _cpu_model()
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return device


def describe_server(version: Any) -> Optional[str]:
    """One line on what served a run, from a trtlade server's /version (None for other servers).

    >>> describe_server({"engine": {"name": "reference", "model": "SmolLM2-135M-Instruct",
    ...     "spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2},
    ...     "details": {"preset": "fast", "dtype": "float32"}}})
    'reference engine, preset fast, (W,N,G) = (2,4,2), float32, model SmolLM2-135M-Instruct'
    >>> describe_server({"engine": {"name": "reference", "details": {"dtype": "bfloat16",
    ...     "exactness": {"bit_exact": True, "kernels": "native avx2 (one call per step)"}}}}).split(", ")
    ['reference engine', 'bfloat16', 'kernels native avx2 (one call per step)', \
'lookahead bit-exact by construction (row-invariant kernels)']
    >>> describe_server({"object": "list"}) is None
    True
    """
    engine = version.get("engine") if isinstance(version, dict) else None
    if not isinstance(engine, dict) or "name" not in engine:
        return None
    details = engine.get("details") if isinstance(engine.get("details"), dict) else {}
    spec = engine.get("spec") if isinstance(engine.get("spec"), dict) else {}
    parts = [f"{engine['name']} engine"]
    if details.get("preset"):
        parts.append(f"preset {details['preset']}")
    if spec:
        parts.append("(W,N,G) = ({},{},{})".format(*(spec.get(k, "?") for k in (
            "window_size", "ngram_size", "verification_set_size"))))
    if details.get("dtype"):
        parts.append(str(details["dtype"]))
    exact = details.get("exactness") if isinstance(details.get("exactness"), dict) else {}
    if exact.get("kernels"):
        parts.append(f"kernels {exact['kernels']}")
    if "bit_exact" in exact:
        parts.append("lookahead bit-exact by construction (row-invariant kernels)" if exact["bit_exact"]
                     else "lookahead not bit-exact by construction")
    if engine.get("model"):
        parts.append(f"model {engine['model']}")
    return ", ".join(parts)


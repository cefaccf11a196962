"""Run metadata for reports: trtlade version, git commit, machine and platform."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional

from trtlade.host import cpu_class, cpu_identity, cpu_model as _cpu_model

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
    ...     "exactness": {"bit_exact": True, "kernels": "native avx2 (one call per step)"},
    ...     "weight_pages": {"bytes": 269e6, "advised_bytes": 269e6, "huge_page_bytes": 269e6}}}}).split(", ")
    ['reference engine', 'bfloat16', 'kernels native avx2 (one call per step)', 'weights 100% on 2 MiB pages', \
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
    pages = details.get("weight_pages") if isinstance(details.get("weight_pages"), dict) else {}
    if pages.get("bytes") and pages.get("huge_page_bytes") is not None:
        parts.append(f"weights {100 * pages['huge_page_bytes'] / pages['bytes']:.0f}% on 2 MiB pages")
    if "bit_exact" in exact:
        parts.append("lookahead bit-exact by construction (row-invariant kernels)" if exact["bit_exact"]
                     else "lookahead not bit-exact by construction")
    if engine.get("model"):
        parts.append(f"model {engine['model']}")
    return ", ".join(parts)


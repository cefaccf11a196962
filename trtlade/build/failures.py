"""Known ways a conversion or an engine build fails, recognised in its log, with what to try.

    >>> f = diagnose("... [TRT-LLM] [E] No available XQA kernels are found for speculative decoding mode.")
    >>> f.code
    'xqa-kernels'
    >>> diagnose("Killed", exit_code=-9).code
    'out-of-memory'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trtlade.build.models import ARCHITECTURE_TO_CLASS

__all__ = ["KnownFailure", "KNOWN_FAILURES", "diagnose", "log_tail"]


@dataclass(frozen=True)
class KnownFailure:
    code: str
    pattern: str  # a regular expression searched in the log (case-insensitive)
    summary: str
    hint: str


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "xqa-kernels", r"No available XQA kernels are found for speculative decoding mode",
        "this GPU / head size has no speculative-decoding XQA kernels in this TensorRT-LLM version "
        "(known on A10 with 0.16, NVIDIA/TensorRT-LLM#2879)",
        "upgrade TensorRT-LLM (newer releases up to 1.2.x add the kernels: pip install "
        "'tensorrt-llm>=1.2,<1.3' or a newer NGC container), or build and serve on another GPU type"),
    KnownFailure(
        "unsupported-qwen3", r"Unsupported Qwen type:\s*qwen3",
        "this TensorRT-LLM has no Qwen3 engine support",
        "use TensorRT-LLM >= 1.0, < 1.3 (stock Qwen3 support), or a 0.16 build patched for Qwen3 "
        "(e.g. NetEase's fork used with grps_trtllm)"),
    KnownFailure(
        "unsupported-architecture", r"Unsupported model architecture",
        "TensorRT-LLM does not know the checkpoint's architecture",
        "trtlade builds: " + ", ".join(sorted(ARCHITECTURE_TO_CLASS)) + "; check the architecture in "
        "the checkpoint's config.json"),
    KnownFailure(
        "out-of-memory",
        r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|std::bad_alloc|MemoryError|"
        r"Requested amount of GPU memory .* could not be allocated",
        "ran out of memory",
        "conversion needs host RAM for the weights (about 2 bytes per parameter in fp16/bf16); the "
        "build needs GPU memory: lower --max-batch-size, --max-num-tokens or --max-seq-len, use more "
        "GPUs (--tp-size), or stop other processes using the GPU (nvidia-smi)"),
    KnownFailure(
        "no-gpu", r"no CUDA-capable device is detected|CUDA driver version is insufficient|"
        r"libcuda\.so[^\n]*(cannot open|not found)",
        "no usable NVIDIA GPU / CUDA driver",
        "run the build on a machine with an NVIDIA GPU (compute capability >= 8.0 for lookahead) and "
        "its driver, e.g. inside NVIDIA's NGC TensorRT-LLM container with --gpus all"),
)

#: Exit codes of a process killed by SIGKILL (the kernel's OOM killer): Python reports -9, shells 137.
_KILLED = {-9, 137}


def diagnose(text: str, exit_code: int | None = None) -> KnownFailure | None:
    """The first known failure whose pattern appears in ``text`` (or a SIGKILL exit: out of memory)."""
    for failure in KNOWN_FAILURES:
        if re.search(failure.pattern, text, flags=re.IGNORECASE):
            return failure
    if exit_code in _KILLED:
        return next(f for f in KNOWN_FAILURES if f.code == "out-of-memory")
    return None


def log_tail(path: Path, lines: int = 25, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a log file (reads at most ``max_bytes`` from its end)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])

"""Known ways a conversion or an engine build fails, recognised in its log, with what to try: the
classifier :mod:`trtlade.trtllm.failures` shares with ``serve``, plus the architectures ``build`` knows.

    >>> f = diagnose("... [TRT-LLM] [E] No available XQA kernels are found for speculative decoding mode.")
    >>> f.code
    'xqa-kernels'
    >>> diagnose("Killed", exit_code=-9).code
    'out-of-memory'
    >>> diagnose("Unsupported model architecture: GemmaForCausalLM").code
    'unsupported-architecture'
"""

from __future__ import annotations

from pathlib import Path

from trtlade.builder.models import ARCHITECTURE_TO_CLASS
from trtlade.trtllm import failures as _shared
from trtlade.trtllm.failures import KnownFailure

__all__ = ["KnownFailure", "KNOWN_FAILURES", "diagnose", "log_tail"]

KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    *_shared.KNOWN_FAILURES,
    KnownFailure(
        "unsupported-architecture", r"Unsupported model architecture",
        "TensorRT-LLM does not know the checkpoint's architecture",
        "trtlade builds: " + ", ".join(sorted(ARCHITECTURE_TO_CLASS)) + "; check the architecture in "
        "the checkpoint's config.json"),
)


def diagnose(text: str, exit_code: int | None = None) -> KnownFailure | None:
    """The first known failure whose pattern appears in ``text`` (or a SIGKILL exit: out of memory)."""
    return _shared.diagnose(text, exit_code, KNOWN_FAILURES)


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

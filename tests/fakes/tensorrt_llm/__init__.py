"""Test double of the ``tensorrt_llm`` package (see tests/fakes/README.md). ``__version__`` is set by
the ``fake_trtllm`` fixture per test."""

__version__ = "0.16.0"

# ---- the conversion part (trtlade build): Mapping, models, version and Qwen3 patch from the environment
# of a subprocess (tests set these variables; the fake_trtllm fixture sets __version__ in-process).
import os as _os

if _os.environ.get("TRTLADE_FAKE_TRTLLM_VERSION"):
    __version__ = _os.environ["TRTLADE_FAKE_TRTLLM_VERSION"]
#: True for a 0.x build patched for Qwen3 (like NetEase's fork used with grps_trtllm).
QWEN3_PATCHED = _os.environ.get("TRTLADE_FAKE_TRTLLM_QWEN3_PATCHED") == "1"

from . import models  # noqa: E402, F401 - the real package's public names
from .mapping import Mapping  # noqa: E402, F401
from .llmapi import LLM, SamplingParams  # noqa: E402, F401 - tensorrt_llm/__init__.py re-exports them

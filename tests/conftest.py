"""Shared fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
FAKES_DIR = TESTS_DIR / "fakes"
DATA_DIR = TESTS_DIR / "data"


@pytest.fixture
def fake_trtllm(monkeypatch):
    """Make ``import tensorrt_llm`` find the test double (version 0.16.0 unless the test sets
    ``fake_trtllm.__version__``); removed from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    import tensorrt_llm

    monkeypatch.setattr(tensorrt_llm, "__version__", "0.16.0")
    yield tensorrt_llm
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        sys.modules.pop(name, None)


class FakeToolchain:
    """The TensorRT-LLM test double as seen by subprocesses (see the ``fake_trtllm_build`` fixture)."""

    def __init__(self, monkeypatch, tmp_path: Path) -> None:
        self._mp = monkeypatch
        self.argv_file = tmp_path / "fake-trtllm-build-argv.jsonl"
        self.calls_file = tmp_path / "fake-trtllm-calls.jsonl"
        monkeypatch.setenv("PATH", f"{FAKES_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.setenv("PYTHONPATH", str(FAKES_DIR))
        monkeypatch.setenv("TRTLADE_FAKE_TRTLLM_BUILD_ARGV", str(self.argv_file))
        monkeypatch.setenv("TRTLADE_FAKE_TRTLLM_CALLS", str(self.calls_file))
        monkeypatch.setenv("TRTLADE_FAKE_TRTLLM_VERSION", "0.16.0")
        monkeypatch.delenv("TRTLADE_FAKE_TRTLLM_QWEN3_PATCHED", raising=False)
        monkeypatch.delenv("TRTLADE_FAKE_TRTLLM_BUILD_FAIL", raising=False)

    def set_version(self, version: str) -> None:
        self._mp.setenv("TRTLADE_FAKE_TRTLLM_VERSION", version)

    def patch_qwen3(self) -> None:
        """Make the fake a 0.x build patched for Qwen3."""
        self._mp.setenv("TRTLADE_FAKE_TRTLLM_QWEN3_PATCHED", "1")

    def fail_build(self, message: str) -> None:
        """Make the fake trtllm-build print ``message`` as an error and exit 1."""
        self._mp.setenv("TRTLADE_FAKE_TRTLLM_BUILD_FAIL", message)

    def remove(self) -> None:
        """TensorRT-LLM absent: neither the package nor trtllm-build can be found."""
        self._mp.delenv("PYTHONPATH", raising=False)
        path = os.environ.get("PATH", "").split(os.pathsep)
        self._mp.setenv("PATH", os.pathsep.join(p for p in path if Path(p) != FAKES_DIR))

    def builds(self) -> list[list[str]]:
        """The argv of every fake trtllm-build run, in order."""
        return _jsonl(self.argv_file)

    def calls(self) -> list[dict]:
        """Every recorded call into the fake tensorrt_llm.models (from_hugging_face, save_checkpoint)."""
        return _jsonl(self.calls_file)


def _jsonl(path: Path) -> list:
    import json

    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def fake_trtllm_build(monkeypatch, tmp_path):
    """Subprocesses see the TensorRT-LLM test double: the fake ``trtllm-build`` first on PATH, the fake
    ``tensorrt_llm`` on PYTHONPATH (version 0.16.0, stock: no Qwen3), recordings in tmp files."""
    return FakeToolchain(monkeypatch, tmp_path)

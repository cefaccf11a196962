"""Shared fixtures."""

from __future__ import annotations

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

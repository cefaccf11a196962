"""Test double of the ``tensorrt_llm`` package (see tests/fakes/README.md). ``__version__`` is set by
the ``fake_trtllm`` fixture per test."""

__version__ = "0.16.0"

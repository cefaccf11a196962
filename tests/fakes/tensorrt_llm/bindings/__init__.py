"""Test double of ``tensorrt_llm.bindings`` (a compiled module upstream); only ``executor`` is mirrored."""

from . import executor  # noqa: F401

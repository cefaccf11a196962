"""trtlade: Lookahead decoding from a Hugging Face checkpoint to production.

``import trtlade`` is light: torch, transformers and tensorrt_llm are imported only by the parts
that need them. ``from trtlade import ReferenceEngine`` loads the engine module on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trtlade.spec import LookaheadSpec, SpecError

__version__ = "0.2.0"

__all__ = ["LookaheadSpec", "SpecError", "ReferenceEngine", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from trtlade.reference.engine import ReferenceEngine


def __getattr__(name: str) -> Any:
    if name == "ReferenceEngine":
        from trtlade.reference.engine import ReferenceEngine

        return ReferenceEngine
    raise AttributeError(f"module 'trtlade' has no attribute {name!r}")

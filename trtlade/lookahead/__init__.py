"""Lookahead decoding without a model: the n-gram pool, the algorithm and a pure-Python driver.

``LookaheadAlgorithm`` follows TensorRT-LLM's ``LookaheadAlgorithm`` + ``LookaheadPoolManager``
step for step (see :mod:`trtlade.lookahead.algorithm`); ``simulate`` drives it with any
``next_token(prefix) -> int`` oracle and is the executable specification the torch engine matches.
No torch here.
"""

from trtlade.lookahead.algorithm import DraftBatch, LookaheadAlgorithm, Verification
from trtlade.lookahead.pool import NgramPool

__all__ = ["DraftBatch", "LookaheadAlgorithm", "NgramPool", "Verification"]

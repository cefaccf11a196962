"""Model-free drafters beside Lookahead: NGram and the suffix automaton (SA), as TensorRT-LLM drafts.

No torch and no HTTP here, split like TensorRT-LLM: the pool managers own every request's history
(:mod:`~trtlade.drafting.history` for NGram, :mod:`~trtlade.drafting.suffix` for SA,
:mod:`~trtlade.drafting.host_pool` for the host-side NGram of the 1.0-1.2 releases) and
:mod:`~trtlade.drafting.algorithm` drives one sequence through the same prepare / verify / commit steps
as :class:`~trtlade.lookahead.algorithm.LookaheadAlgorithm`, so the engine verifies their drafts by the
same exact path. :mod:`~trtlade.drafting.config` reads upstream's ``speculative_config`` block.
"""

from trtlade.drafting.config import DECODING_TYPES, DraftConfig, DraftConfigError

__all__ = ["DECODING_TYPES", "DraftConfig", "DraftConfigError"]

"""The reference engine's algorithm presets (``lookahead.preset``, ``engine-bench --preset``).

* ``fast`` -- the best lossless speed on this engine: each step's guesses are the Jacobi pool's
  n-grams plus two history candidates of N-1 tokens each: prompt lookup's (the latest earlier occurrence
  of the text's last tokens, :mod:`trtlade.lookahead.prompt_lookup`, NGram-like) and the longest earlier
  suffix's (what TensorRT-LLM's SA drafter proposes, :mod:`trtlade.lookahead.suffix_automaton`). The
  default of ``serve`` and ``bench`` on the reference engine; the ``auto`` policy draws from all of them.
* ``trtllm`` -- exactly TensorRT-LLM's algorithm, quirks included: predicts what an engine will do.
  The only one the TensorRT-LLM engine runs.

No torch here: the CLI and the config layer read it at start.
"""

from __future__ import annotations

from typing import Any

from trtlade.spec import LookaheadSpec

__all__ = ["PRESETS", "DEFAULT_PRESET", "preset_prompt_lookup"]

PRESETS = ("fast", "trtllm")
DEFAULT_PRESET = "fast"


def preset_prompt_lookup(preset: str, spec: Any) -> int:
    """Prompt-lookup draft tokens of a preset for a spec: ``trtllm`` none (TensorRT-LLM's algorithm
    exactly), ``fast`` N-1 (the most one step can accept); plain decoding (N = 1) has none.

    >>> preset_prompt_lookup("trtllm", "2,4,2"), preset_prompt_lookup("fast", "2,4,2")
    (0, 3)
    >>> preset_prompt_lookup("fast", "1,1,0")
    0
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: choose {' or '.join(PRESETS)}")
    return LookaheadSpec.parse(spec).ngram_size - 1 if preset == "fast" else 0

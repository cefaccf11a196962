"""The reference engine's algorithm presets (``lookahead.preset``, ``engine-bench --preset``).

* ``fast`` -- the best lossless speed on this engine: each step's guesses are the Jacobi pool's
  n-grams plus two history candidates (N-1 tokens beside the window, the larger of 4 and N-1 without
  it, the suffix one longer after a long match): prompt lookup's (the latest earlier occurrence of the
  text's last tokens, :mod:`trtlade.lookahead.prompt_lookup`, NGram-like) and the longest earlier
  suffix's (what TensorRT-LLM's SA drafter proposes, :mod:`trtlade.lookahead.suffix_automaton`). The default
  of ``serve`` and ``bench`` on the reference engine; the ``auto`` policy draws from all of them.
* ``trtllm`` -- exactly TensorRT-LLM's algorithm, quirks included: predicts what an engine will do.
  The only one the TensorRT-LLM engine runs.

No torch here: the CLI and the config layer read it at start.
"""

from __future__ import annotations

from typing import Any

from trtlade.spec import LookaheadSpec

__all__ = ["PRESETS", "DEFAULT_PRESET", "HISTORY_DRAFTS", "preset_prompt_lookup"]

PRESETS = ("fast", "trtllm")
DEFAULT_PRESET = "fast"
#: draft tokens of a history candidate verified without the Jacobi window: the draft length of NGram and SA
#: in trtlade's bench modes (``max_draft_len: 4``), so that ``auto`` drafting from one source matches them
HISTORY_DRAFTS = 4


def preset_prompt_lookup(preset: str, spec: Any) -> int:
    """Draft tokens of the history candidates (prompt lookup's and the longest earlier suffix's) of a preset
    for a spec: ``trtllm`` none (TensorRT-LLM's algorithm exactly); ``fast`` the larger of N-1 and
    :data:`HISTORY_DRAFTS` -- a step with the Jacobi window verifies N-1 of them (the most a path there
    accepts), one without it (the ``auto`` policy's single-drafter options) all, as NGram and SA would;
    plain decoding (N = 1) has none.

    >>> [preset_prompt_lookup(p, s) for p, s in [("trtllm", "2,4,2"), ("fast", "2,4,2"), ("fast", "2,7,2")]]
    [0, 4, 6]
    >>> preset_prompt_lookup("fast", "1,1,0")
    0
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: choose {' or '.join(PRESETS)}")
    n = LookaheadSpec.parse(spec).ngram_size
    return max(n - 1, HISTORY_DRAFTS) if preset == "fast" and n > 1 else 0

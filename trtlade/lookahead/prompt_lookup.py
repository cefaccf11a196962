"""Prompt-lookup candidates: a second source of draft guesses next to the Jacobi window's n-gram pool.

In the spirit of transformers' prompt lookup decoding and vLLM's n-gram proposer: take the longest
suffix of the text so far (``max_ngram`` tokens down to ``min_ngram``) that also occurs earlier, and
propose the tokens that followed its most recent earlier occurrence. Text that copies from the
prompt (summaries, extraction, code edits) is guessed well; the guess is verified like any other
candidate, so it never changes the output.

Worked example (history ends with the golden token ``7``; the suffix ``6 7`` occurred earlier, followed
by ``8 9``)::

    >>> propose([5, 6, 7, 8, 9, 1, 6, 7], k=3)
    [8, 9, 1]
    >>> propose([5, 6, 7, 8, 9, 1, 6, 7], k=3, max_ngram=1)   # suffix "7": its latest earlier match
    [8, 9, 1]
    >>> propose([1, 2, 3], k=2)            # nothing repeats: no candidate
    []
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["propose"]


def propose(history: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to ``k`` tokens following the most recent earlier occurrence of the longest suffix of
    ``history`` (between ``max_ngram`` and ``min_ngram`` tokens long); [] when none repeats."""
    if k <= 0 or len(history) < 2:
        return []
    tokens = list(history)
    end = len(tokens)
    for size in range(min(max_ngram, end - 1), min_ngram - 1, -1):
        suffix = tokens[end - size:]
        # most recent earlier occurrence, not the suffix itself; its continuation must exist
        for start in range(end - size - 1, -1, -1):
            if tokens[start:start + size] == suffix:
                follow = tokens[start + size:start + size + k]
                if follow:
                    return follow
    return []

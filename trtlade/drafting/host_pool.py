"""NGram as the TensorRT-LLM releases with a host-side drafter run it: an n-gram -> continuations pool.

Mirrors ``NGramPoolManager.get_draft_tokens`` of ``tensorrt_llm/_torch/speculative/ngram.py`` as the 1.0 to
1.2 releases (and early 1.3.0 release candidates) ship it (NVIDIA/TensorRT-LLM@02499765; the one-model GPU
drafter of :mod:`trtlade.drafting.history` replaced it). Per request and step, with D =
``max_draft_len`` and k = ``max_matching_ngram_size``:

1. budget ``max_sequence_length - 1 - len(prefix)`` (prompt length + max_new_tokens): nothing when <= 0;
2. **harvest** the sequence from the request's ``start_index``: for sizes ``min(k, len - 1)`` down to 1, every
   ``pattern`` of that size with ``match`` = up to D tokens after it; a new pattern (or, without
   ``is_keep_all``, a longer match) replaces the stored list; otherwise a match not yet stored is appended
   after the stored matches shorter than it are dropped;
3. **look up** the suffix patterns, longest first: the first stored pattern gives its oldest
   (``is_use_oldest``) or newest match, cut to the budget -- not padded;
4. ``start_index = max(0, len - (D + k - 1))``: the tail is harvested again next step, so a match cut by the
   end of the text grows.

The public pool is one dict for every request and is never pruned here; a private pool is dropped when its
request finishes. (trtlade's engine bounds a public pool as it does retained SA requests: it counts each
pattern as one of ``DraftPools.retained_tokens`` and drops the least recently used pool past them.) Two quirks
are kept, as no upstream test pins them: with ``is_keep_all`` false an equal or shorter new match is still
appended (step 2's second branch), and dropping the shorter matches walks the list it deletes from, so the
match right after a dropped one is skipped (``OrderedSet`` iterates its list).

Worked example (k = 2, D = 3, private pool)::

    >>> pool = HostNGramPool(max_draft_len=3, max_matching_ngram_size=2, is_public_pool=False)
    >>> pool.draft([5, 6, 7, 8, 5, 6], "r", max_sequence_length=100)   # "5 6" was followed by 7 8 5
    [7, 8, 5]
"""

from __future__ import annotations

from typing import Hashable, Sequence

__all__ = ["HostNGramPool"]

Pool = dict[tuple[int, ...], list[tuple[int, ...]]]


class HostNGramPool:
    """One ``NGramPoolManager``: its settings, the pool(s) and every request's ``start_index``."""

    def __init__(self, *, max_draft_len: int, max_matching_ngram_size: int, is_keep_all: bool = True,
                 is_use_oldest: bool = True, is_public_pool: bool = True) -> None:
        self.max_draft_len = max_draft_len  #: follows draft_len_schedule (``update_max_total_draft_tokens``)
        self.max_matching_ngram_size = max_matching_ngram_size
        self.is_keep_all = is_keep_all
        self.is_use_oldest = is_use_oldest
        self.is_public_pool = is_public_pool
        self.pool: Pool = {}
        self.private: dict[Hashable, Pool] = {}
        self.start_index: dict[Hashable, int] = {}

    def remove(self, request: Hashable) -> None:
        """A finished request (``update_resources``): a private pool goes; the public pool keeps everything it
        harvested. Its start index goes either way (upstream keeps a public pool's: no later step reads it)."""
        if not self.is_public_pool:
            self.private.pop(request, None)
        self.start_index.pop(request, None)

    def draft(self, prefix: Sequence[int], request: Hashable, max_sequence_length: int) -> list[int]:
        """The draft tokens after ``prefix`` (prompt + every accepted token) for ``request``."""
        prefix = list(prefix)
        budget = max_sequence_length - 1 - len(prefix)
        if budget <= 0:
            return []
        if request not in self.start_index:
            self.start_index[request] = 0
            if not self.is_public_pool:
                self.private[request] = {}
        pool = self.pool if self.is_public_pool else self.private[request]
        self._harvest(pool, prefix[self.start_index[request]:], len(prefix))
        draft: list[int] = []
        for size in range(min(self.max_matching_ngram_size, len(prefix) - 1), 0, -1):
            matches = pool.get(tuple(prefix[-size:]))
            if matches is None:
                continue
            draft = list(matches[0 if self.is_use_oldest else -1])[:budget]
            break
        self.start_index[request] = max(0, len(prefix) - (self.max_draft_len + self.max_matching_ngram_size - 1))
        return draft

    def _harvest(self, pool: Pool, sequence: list[int], prefix_len: int) -> None:
        for size in range(min(self.max_matching_ngram_size, prefix_len - 1), 0, -1):
            for left in range(len(sequence) - size):
                right = min(left + size + self.max_draft_len, len(sequence))
                pattern = tuple(sequence[left:left + size])
                match = tuple(sequence[left + size:right])
                stored = pool.get(pattern)
                if stored is None or (not self.is_keep_all and len(match) > len(stored[0])):
                    pool[pattern] = [match]
                elif match not in stored:
                    for old in stored:  # upstream's loop: removing from the list it walks skips the next entry
                        if len(old) < len(match):
                            stored.remove(old)
                    stored.append(match)

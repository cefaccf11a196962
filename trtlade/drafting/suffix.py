"""SA drafting: a suffix automaton per request, as TensorRT-LLM's ``SADecodingConfig`` drafts.

Mirrors ``cpp/tensorrt_llm/kernels/speculativeDecoding/suffixAutomaton/suffixAutomaton.h`` (``extend``,
``lookup``, ``lookupFixed``; adapted upstream from Baseten's sa_spec) and its kernels
(``suffixAutomatonKernels.cu``: ``suffixAutomatonExtendNgramKernel``), with the manager of
``tensorrt_llm/_torch/speculative/suffix_automaton.py`` (``SuffixAutomatonManager``). Upstream has no Python
reference; the literal cases of ``tests/unittest/_torch/speculative/test_suffix_automaton.py`` define it
and are trtlade's tests:

* ``max_matching_ngram_size`` -1: the longest suffix of the history that occurred earlier, at its earliest
  occurrence (``lookup``: the first state on the suffix-link path whose first end is not the last token);
  k > 0: sizes k, k-1, ..., 1, each at its earliest occurrence (``lookupFixed``);
* the draft: the tokens after that occurrence, up to the history's end, zero-padded to ``max_draft_len``;
  match length 0 and zeros when nothing matches;
* ``enable_global_pool``: the other requests' automata are searched too (at most the last 64 tokens are
  matched), the own slot winning ties; a finished request stays searchable while the pool
  (``global_pool_size``) has room, the oldest finished one evicted first, never a running one.

Worked example (``test_extend_ngram_longest_match``, case 2)::

    >>> pool = SuffixPool()
    >>> pool.add("r", [0, 1, 2, 3, 1, 2, 4, 1, 2])
    >>> pool.draft("r", 4, max_ngram=-1)        # "1 2" occurred at 1..2 (and 4..5): the earliest wins
    ([3, 1, 2, 4], 2)

What upstream's tests do not pin is trtlade's choice: among other requests' automata with an equal match,
the one admitted first wins; with the global pool and k > 0 the match is capped at k.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Optional, Sequence

from trtlade.drafting.config import SA_GLOBAL_MAX_NGRAM
from trtlade.lookahead.suffix_automaton import SuffixAutomaton

__all__ = ["SuffixAutomaton", "SuffixPool"]


class SuffixPool:
    """The automata of an engine's SA requests. ``max_requests``: how many run at once (the batch's
    ``max_batch_size``). The global pool has ``capacity`` slots (:meth:`reserve`; None: no global pool);
    finished requests are retained only when it has more slots than ``max_requests``."""

    def __init__(self, max_requests: int = 1, capacity: Optional[int] = None) -> None:
        self.max_requests = max_requests
        self.capacity = capacity
        self._active: dict[Hashable, SuffixAutomaton] = {}
        self._retained: OrderedDict[Hashable, SuffixAutomaton] = OrderedDict()
        self._stepped: set[Hashable] = set()

    def reserve(self, capacity: int) -> None:
        """A request with the global pool of ``capacity`` slots (``SADecodingConfig.pool_size``): the pool
        holds the largest asked for."""
        self.capacity = max(self.capacity or 0, capacity)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._active

    @property
    def retained(self) -> list[Hashable]:
        """Finished requests still searchable, oldest first."""
        return list(self._retained)

    def history(self, key: Hashable) -> list[int]:
        return list(self._active[key].tokens)

    def add(self, key: Hashable, tokens: Sequence[int]) -> None:
        """A new request's automaton, built from its prompt (``build_automaton_host``); with a full pool the
        oldest retained request is evicted (``SuffixAutomatonManager.add_request``)."""
        if key in self._active:
            raise ValueError(f"request {key!r} already holds a slot")
        if self.capacity is not None:
            while self._retained and len(self._active) + len(self._retained) >= self.capacity:
                self._retained.popitem(last=False)
        self._active[key] = SuffixAutomaton(tokens)

    def remove(self, key: Hashable, retain: bool = False) -> None:
        """A finished request: kept searchable with ``retain`` when the global pool has more slots than
        ``max_requests`` (``SuffixAutomatonManager.remove_request``; evicted when a new request needs its slot),
        unless it never stepped (upstream does not retain a state not yet copied to the device); else dropped."""
        automaton = self._active.pop(key, None)
        stepped = key in self._stepped
        self._stepped.discard(key)
        if automaton is not None and retain and stepped and (self.capacity or 0) > self.max_requests:
            self._retained[key] = automaton

    def is_retained(self, key: Hashable) -> bool:
        return key in self._retained

    def forget(self, key: Hashable) -> None:
        """A retained request evicted by the server's budget (``serve.draft_retained_tokens``)."""
        self._retained.pop(key, None)

    def extend(self, key: Hashable, tokens: Sequence[int]) -> None:
        automaton = self._active[key]
        for token in tokens:
            automaton.extend(token)
        self._stepped.add(key)

    def draft(self, key: Hashable, draft_len: int, *, max_ngram: int = -1, search_all: bool = False,
              pad: bool = True) -> tuple[list[int], int]:
        """``(draft, match length)``, zero-padded to ``draft_len`` (``pad=False``: the continuation alone);
        ``search_all``: the global pool."""
        if draft_len <= 0:
            return [], 0
        own = self._active[key]
        self._stepped.add(key)
        best = self._own_match(own, max_ngram, search_all)
        if search_all:
            best = self._global_match(own, max_ngram, best)
        follow, length = ([], 0) if best is None else (best[0].continuation(best[1], draft_len), best[2])
        return (follow + [0] * (draft_len - len(follow)) if pad else follow), length

    @staticmethod
    def _own_match(own: SuffixAutomaton, max_ngram: int, search_all: bool
                   ) -> Optional[tuple[SuffixAutomaton, int, int]]:
        if search_all:  # the global pool matches at most the last 64 tokens, k when given
            cap = SA_GLOBAL_MAX_NGRAM if max_ngram == -1 else max_ngram
            found = _own_earlier(own, cap)
        else:
            found = own.lookup_upto(max_ngram)
        return None if found is None else (own, found[0], found[1])

    def _global_match(self, own: SuffixAutomaton, max_ngram: int, best: Optional[tuple[SuffixAutomaton, int, int]]
                      ) -> Optional[tuple[SuffixAutomaton, int, int]]:
        cap = SA_GLOBAL_MAX_NGRAM if max_ngram == -1 else max_ngram
        pattern = own.tokens[-cap:]
        for other in [*self._active.values(), *self._retained.values()]:
            need = 1 + (best[2] if best is not None else 0)  # only a longer match wins (ties: own, then first)
            if other is own or need > len(pattern) or not other.contains(pattern[-need:]):
                continue
            found = other.match(pattern)
            if found is not None and (best is None or found[1] > best[2]):  # ties: the own slot, then the first
                best = (other, found[0], found[1])
        return best


def _own_earlier(own: SuffixAutomaton, cap: int) -> Optional[tuple[int, int]]:
    """The own slot's longest earlier suffix, capped at ``cap`` tokens."""
    found = own.lookup()
    if found is None or found[1] <= cap:
        return found
    return own.lookup_fixed(cap)

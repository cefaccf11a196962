"""A suffix automaton over one token sequence: the longest suffix that occurred earlier, in O(1) per token.

The structure of TensorRT-LLM's SA drafter (``cpp/tensorrt_llm/kernels/speculativeDecoding/suffixAutomaton/
suffixAutomaton.h``: ``extend``, ``lookup``, ``lookupFixed``; NVIDIA/TensorRT-LLM@b120c7c9), built online as
tokens arrive. :mod:`trtlade.drafting.suffix` drafts SA requests with it; the Lookahead algorithm's ``fast``
preset proposes its longest match as one more candidate (:class:`~trtlade.lookahead.algorithm.LookaheadAlgorithm`,
``suffix_lookup``).
"""

from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["SuffixAutomaton"]


class SuffixAutomaton:
    """The suffix automaton of one token sequence, built online (``SuffixAutomaton::extend``).

    State 0 is the root. ``length[s]``: the longest string of state s; ``link[s]``: its suffix link;
    ``first[s]``: the end of that string's first occurrence (a clone keeps its original's, as
    ``pushBackClone`` copies it); ``edges[s]``: token -> state.

    >>> sa = SuffixAutomaton([0, 1, 2, 1, 2, 1])
    >>> sa.lookup()                 # longest earlier suffix "1 2 1" (length 3), continuing at index 4
    (4, 3)
    >>> sa.lookup_fixed(2)          # "2 1" first ended at index 3
    (4, 2)
    """

    __slots__ = ("tokens", "length", "link", "first", "edges", "last")

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self.tokens: list[int] = []
        self.length = [0]
        self.link = [-1]
        self.first = [-1]
        self.edges: list[dict[int, int]] = [{}]
        self.last = 0
        for token in tokens:
            self.extend(token)

    def extend(self, token: int) -> None:
        token = int(token)
        self.tokens.append(token)
        length, link, first, edges = self.length, self.link, self.first, self.edges
        cur = len(length)
        length.append(length[self.last] + 1)
        link.append(0)
        first.append(len(self.tokens) - 1)
        edges.append({})
        p = self.last
        while p != -1 and token not in edges[p]:
            edges[p][token] = cur
            p = link[p]
        if p != -1:
            q = edges[p][token]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(length)
                length.append(length[p] + 1)
                link.append(link[q])
                first.append(first[q])
                edges.append(dict(edges[q]))
                while p != -1 and edges[p].get(token) == q:
                    edges[p][token] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        self.last = cur

    def _earlier(self, state: int) -> bool:
        """Whether ``state``'s strings occurred before the last token (a token follows that occurrence)."""
        return self.first[state] + 1 < len(self.tokens)

    def lookup(self) -> Optional[tuple[int, int]]:
        """``(where the draft starts, match length)`` of the longest earlier suffix, or None (``lookup``)."""
        state = self.last
        while state > 0:
            if self._earlier(state):
                return self.first[state] + 1, self.length[state]
            state = self.link[state]
        return None

    def lookup_fixed(self, size: int) -> Optional[tuple[int, int]]:
        """The suffix of exactly ``size`` tokens at its earliest earlier occurrence, or None (``lookupFixed``)."""
        if size <= 0 or len(self.tokens) < size + 1:
            return None
        state = self.last
        while state > 0 and self.length[state] >= size:
            shortest = self.length[self.link[state]] + 1
            if shortest <= size and self._earlier(state):
                return self.first[state] + 1, size
            state = self.link[state]
        return None

    def lookup_upto(self, max_ngram: int) -> Optional[tuple[int, int]]:
        """Sizes ``max_ngram``, ..., 1 (``suffixAutomatonExtendNgramKernel``), or the longest match for -1.

        The first size that matches is ``min(max_ngram, L)``, L the longest earlier suffix: a suffix with an earlier
        occurrence has every shorter one there too. So one walk, whatever ``max_ngram`` (a request's
        ``max_matching_ngram_size`` of 2**40 costs what 4 does).

        >>> sa = SuffixAutomaton()
        >>> for t in [5, 6, 7, 9, 5, 6, 7]:
        ...     sa.extend(t)
        >>> sa.lookup_upto(2), sa.lookup_upto(2**40), sa.lookup_upto(-1)
        ((3, 2), (3, 3), (3, 3))
        """
        longest = self.lookup()
        if max_ngram == -1 or longest is None:
            return longest
        return self.lookup_fixed(min(max_ngram, longest[1]))

    def match(self, pattern: Sequence[int]) -> Optional[tuple[int, int]]:
        """The longest suffix of ``pattern`` found in this sequence with a token after it: ``(where the draft
        starts, match length)`` at its earliest occurrence, or None. Walks ``pattern`` through the automaton
        (matching statistics), then up the suffix links while the occurrence has no continuation."""
        state, matched = 0, 0
        edges, link, length = self.edges, self.link, self.length
        for token in pattern:
            while state and token not in edges[state]:
                state = link[state]
                matched = length[state]
            nxt = edges[state].get(token)
            if nxt is not None:
                state, matched = nxt, matched + 1
        while state > 0 and not self._earlier(state):
            state = link[state]
            matched = length[state]
        if state <= 0 or matched <= 0:
            return None
        return self.first[state] + 1, matched

    def contains(self, pattern: Sequence[int]) -> bool:
        """Whether ``pattern`` occurs in the sequence (a walk from the root).

        >>> SuffixAutomaton([1, 2, 3]).contains([2, 3]), SuffixAutomaton([1, 2, 3]).contains([3, 2])
        (True, False)
        """
        state, edges = 0, self.edges
        for token in pattern:
            state = edges[state].get(token, -1)
            if state < 0:
                return False
        return True

    def continuation(self, start: int, count: int) -> list[int]:
        """``count`` tokens from ``start``, cut at the end (``getDraftTokens``)."""
        return self.tokens[start:start + count]

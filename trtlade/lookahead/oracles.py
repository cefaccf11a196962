"""Oracle language models without weights: ``oracle(prefix) -> next token`` (deterministic greedy).

They make lookahead's behaviour checkable at the step level, with no model: a periodic text is
accepted in long runs, a hashed random text almost never, an n-gram table over a real text sits in
between (it repeats phrases the way code and chat do).

    >>> PeriodicOracle([7, 8, 9])([1, 7])
    8
    >>> CountingOracle(vocab=10)([3, 9])
    0
    >>> oracle = RandomOracle(seed=1, vocab=50)
    >>> oracle([1, 2, 3]) == oracle([0, 2, 3])      # depends on the last k=2 tokens only
    True
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

__all__ = ["PeriodicOracle", "RandomOracle", "CountingOracle", "NgramOracle", "mix"]

_MASK64 = (1 << 64) - 1


def mix(*values: int) -> int:
    """A stable 64-bit hash of integers (SplitMix64 steps; no Python hash randomisation)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h


class PeriodicOracle:
    """Continues a periodic text: after token ``period[i]`` comes ``period[i+1]`` (wrapping).

    Tokens of ``period`` must be distinct; after a token outside the period comes ``period[0]``.
    """

    def __init__(self, period: Sequence[int]) -> None:
        period = [int(t) for t in period]
        if not period:
            raise ValueError("the period is empty")
        if len(set(period)) != len(period):
            raise ValueError(f"period tokens must be distinct, got {period}")
        self.period = period
        self._next = {t: period[(i + 1) % len(period)] for i, t in enumerate(period)}

    def __call__(self, prefix: Sequence[int]) -> int:
        return self._next.get(prefix[-1], self.period[0]) if prefix else self.period[0]

    def __repr__(self) -> str:
        return f"PeriodicOracle(period={self.period})"


class RandomOracle:
    """A hash of the last ``k`` tokens (and the seed) modulo ``vocab``: text that never repeats usefully."""

    def __init__(self, seed: int = 0, vocab: int = 1000, k: int = 2) -> None:
        if vocab < 1 or k < 1:
            raise ValueError(f"vocab and k must be >= 1, got vocab={vocab}, k={k}")
        self.seed, self.vocab, self.k = seed, vocab, k

    def __call__(self, prefix: Sequence[int]) -> int:
        return mix(self.seed, len(prefix[-self.k:]), *prefix[-self.k:]) % self.vocab

    def __repr__(self) -> str:
        return f"RandomOracle(seed={self.seed}, vocab={self.vocab}, k={self.k})"


class CountingOracle:
    """``last + step`` modulo ``vocab`` (0 after an empty prefix)."""

    def __init__(self, vocab: int = 100, step: int = 1) -> None:
        if vocab < 1:
            raise ValueError(f"vocab must be >= 1, got {vocab}")
        self.vocab, self.step = vocab, step

    def __call__(self, prefix: Sequence[int]) -> int:
        return (prefix[-1] + self.step) % self.vocab if prefix else 0

    def __repr__(self) -> str:
        return f"CountingOracle(vocab={self.vocab}, step={self.step})"


class NgramOracle:
    """Greedy n-gram model of a corpus: the most frequent follower of the longest seen suffix.

    Backs off from ``order - 1`` context tokens down to 1; ties go to the smallest token id; an
    unseen last token gets a hashed token of the vocabulary (``fallback_vocab``).

    >>> NgramOracle([1, 2, 3, 1, 2, 4, 1, 2, 4], order=3)([9, 1, 2])
    4
    """

    def __init__(self, corpus: Sequence[int], order: int = 3, fallback_vocab: int = 1000, seed: int = 0) -> None:
        if order < 2:
            raise ValueError(f"order must be >= 2, got {order}")
        self.order, self.fallback_vocab, self.seed = order, fallback_vocab, seed
        counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        corpus = [int(t) for t in corpus]
        for end in range(1, len(corpus)):
            for ctx_len in range(1, order):
                if end - ctx_len < 0:
                    break
                counts[tuple(corpus[end - ctx_len:end])][corpus[end]] += 1
        self._best = {ctx: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for ctx, c in counts.items()}

    def __call__(self, prefix: Sequence[int]) -> int:
        for ctx_len in range(min(self.order - 1, len(prefix)), 0, -1):
            token = self._best.get(tuple(prefix[len(prefix) - ctx_len:]))
            if token is not None:
                return token
        return mix(self.seed, *prefix[-2:]) % self.fallback_vocab

    def __repr__(self) -> str:
        return f"NgramOracle(order={self.order}, contexts={len(self._best)})"

"""The n-gram pool: key token -> the last G (N-1)-grams seen after it (TensorRT-LLM's LookaheadPoolManager).

An n-gram ``(k, t1, ..., t_{N-1})`` is stored as the value ``(t1, ..., t_{N-1})`` under the key ``k``.
Each key holds at most ``capacity_per_key`` (= G) values, oldest first. Inserting a value that is
already there moves it to the newest end (LRU with refresh); inserting into a full key drops the
oldest value first. ``guess(key, max_count)`` returns the newest ``<= max_count`` values, oldest
first: these become the verification branch (the candidates) of the next step.

Worked example, N = 3 (values are 2-grams), G = 2::

    >>> pool = NgramPool(capacity_per_key=2)
    >>> pool.seed_from([5, 6, 7, 5, 6, 8, 5, 9, 9], n=3)   # n-grams 5 6 7 | 6 7 5 | 7 5 6 | 5 6 8 ...
    >>> pool.guess(5)            # (6,7) was dropped when (9,9) arrived: key 5 holds 2 values
    [(6, 8), (9, 9)]
    >>> pool.insert(5, (6, 8))   # already there: refreshed, now the newest
    >>> pool.guess(5)
    [(9, 9), (6, 8)]
    >>> pool.guess(5, max_count=1)
    [(6, 8)]
    >>> pool.guess(42)
    []

A capacity of 0 (G = 0) stores nothing, and empty values (N = 1) are never stored, as in
TensorRT-LLM.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

__all__ = ["NgramPool", "ngrams"]


def ngrams(tokens: Sequence[int], n: int) -> Iterator[tuple[int, tuple[int, ...]]]:
    """Every n-gram of ``tokens`` as ``(key, value)``, left to right.

    >>> list(ngrams([1, 2, 3, 4], 3))
    [(1, (2, 3)), (2, (3, 4))]
    >>> list(ngrams([1, 2], 3))
    []
    """
    if n < 2:
        return
    width = n - 1
    for start in range(len(tokens) - width):
        yield tokens[start], tuple(tokens[start + 1 : start + n])


class NgramPool:
    """Per-key LRU lists of (N-1)-gram values, at most ``capacity_per_key`` per key."""

    __slots__ = ("capacity_per_key", "_map")

    def __init__(self, capacity_per_key: int) -> None:
        if isinstance(capacity_per_key, bool) or not isinstance(capacity_per_key, int) or capacity_per_key < 0:
            raise ValueError(
                f"capacity_per_key must be an integer >= 0 (the verification set size G), got {capacity_per_key!r}"
            )
        self.capacity_per_key = capacity_per_key
        self._map: dict[int, list[tuple[int, ...]]] = {}

    def insert(self, key: int, value: Sequence[int]) -> None:
        """Store ``value`` under ``key`` as the newest entry (remove an equal one, drop the oldest if full)."""
        cap = self.capacity_per_key
        if cap == 0 or not value:
            return
        value = tuple(value)
        entries = self._map.get(key)
        if entries is None:
            self._map[key] = [value]
            return
        try:
            entries.remove(value)
        except ValueError:
            pass
        if len(entries) >= cap:
            del entries[0]
        entries.append(value)

    def insert_all(self, items: Iterable[tuple[int, Sequence[int]]]) -> None:
        """``insert`` every ``(key, value)`` in order."""
        for key, value in items:
            self.insert(key, value)

    def seed_from(self, tokens: Sequence[int], n: int) -> None:
        """Insert every n-gram of ``tokens`` (left to right): how the prompt seeds the pool."""
        self.insert_all(ngrams(tokens, n))

    def guess(self, key: int, max_count: int | None = None) -> list[tuple[int, ...]]:
        """The newest ``<= max_count`` values stored under ``key``, oldest first (a new list)."""
        entries = self._map.get(key)
        if not entries:
            return []
        if max_count is None or max_count >= len(entries):
            return list(entries)
        if max_count <= 0:
            return []
        return entries[len(entries) - max_count :]

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __len__(self) -> int:
        """Number of keys."""
        return len(self._map)

    def num_values(self) -> int:
        """Number of stored values over all keys."""
        return sum(len(v) for v in self._map.values())

    def snapshot(self) -> dict[int, list[tuple[int, ...]]]:
        """A copy of the whole pool (key -> values oldest first), for tests and studies."""
        return {k: list(v) for k, v in self._map.items()}

    def clear(self) -> None:
        self._map.clear()

    def __repr__(self) -> str:
        return f"NgramPool(capacity_per_key={self.capacity_per_key}, keys={len(self._map)}, values={self.num_values()})"

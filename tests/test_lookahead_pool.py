"""NgramPool: TensorRT-LLM's LookaheadPoolManager semantics (LRU with refresh, G per key)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.lookahead.pool import NgramPool, ngrams

# (capacity, inserts [(key, value)], key, expected guess(key) oldest first)
LRU_TABLE = [
    (2, [(1, (2,)), (1, (3,))], 1, [(2,), (3,)]),
    (2, [(1, (2,)), (1, (3,)), (1, (4,))], 1, [(3,), (4,)]),                # full: oldest dropped
    (2, [(1, (2,)), (1, (3,)), (1, (2,))], 1, [(3,), (2,)]),                # refresh moves to newest
    (2, [(1, (2,)), (1, (3,)), (1, (2,)), (1, (4,))], 1, [(2,), (4,)]),     # refreshed one survives
    (3, [(1, (2, 3)), (1, (2, 4)), (1, (2, 3))], 1, [(2, 4), (2, 3)]),      # equal = whole value equal
    (1, [(1, (2,)), (1, (3,))], 1, [(3,)]),
    (2, [(1, (2,)), (5, (3,))], 5, [(3,)]),                                 # keys are independent
    (2, [(1, (2,))], 7, []),                                                # unknown key
    (0, [(1, (2,)), (1, (3,))], 1, []),                                     # G = 0 stores nothing
    (2, [(1, ()), (1, ())], 1, []),                                         # empty values never stored
]


@pytest.mark.parametrize("capacity, inserts, key, expected", LRU_TABLE)
def test_lru_with_refresh(capacity, inserts, key, expected):
    pool = NgramPool(capacity_per_key=capacity)
    for k, v in inserts:
        pool.insert(k, v)
    assert pool.guess(key) == expected


@pytest.mark.parametrize("max_count, expected", [
    (None, [(2,), (3,), (4,)]), (3, [(2,), (3,), (4,)]), (5, [(2,), (3,), (4,)]),
    (2, [(3,), (4,)]), (1, [(4,)]), (0, []),
])
def test_guess_returns_newest_entries_oldest_first(max_count, expected):
    pool = NgramPool(capacity_per_key=3)
    for v in [(2,), (3,), (4,)]:
        pool.insert(9, v)
    assert pool.guess(9, max_count) == expected


def test_guess_returns_a_copy():
    pool = NgramPool(capacity_per_key=2)
    pool.insert(1, (2,))
    pool.guess(1).append((99,))
    assert pool.guess(1) == [(2,)]


@pytest.mark.parametrize("tokens, n, expected", [
    ([1, 2, 3, 4], 3, [(1, (2, 3)), (2, (3, 4))]),
    ([1, 2, 3, 4], 2, [(1, (2,)), (2, (3,)), (3, (4,))]),
    ([1, 2], 3, []),
    ([1, 2, 3], 1, []),
    ([], 2, []),
])
def test_ngrams(tokens, n, expected):
    assert list(ngrams(tokens, n)) == expected


def test_seed_from_prompt_inserts_every_ngram_in_order():
    pool = NgramPool(capacity_per_key=2)
    pool.seed_from([5, 6, 7, 5, 6, 8, 5, 9, 9], n=3)
    assert pool.snapshot() == {
        5: [(6, 8), (9, 9)],   # (6, 7) was the oldest of three
        6: [(7, 5), (8, 5)],
        7: [(5, 6)],
        8: [(5, 9)],
    }
    assert len(pool) == 4 and pool.num_values() == 6


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_capacity_is_rejected(bad):
    with pytest.raises(ValueError, match="capacity_per_key"):
        NgramPool(capacity_per_key=bad)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(0, 4),
    inserts=st.lists(st.tuples(st.integers(0, 3), st.tuples(st.integers(0, 3), st.integers(0, 3))), max_size=40),
)
def test_pool_keeps_the_newest_distinct_values_per_key(capacity, inserts):
    """Model: per key, the last `capacity` distinct values, ordered by their last insertion."""
    pool = NgramPool(capacity_per_key=capacity)
    for key, value in inserts:
        pool.insert(key, value)
    for key in range(4):
        last_seen: dict[tuple, int] = {}
        for t, (k, v) in enumerate(inserts):
            if k == key:
                last_seen[v] = t
        by_recency = sorted(last_seen, key=last_seen.get)
        expected = by_recency[max(0, len(by_recency) - capacity):] if capacity else []
        assert pool.guess(key) == expected

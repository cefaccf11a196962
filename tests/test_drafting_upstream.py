"""NGram and SA drafting held to TensorRT-LLM's own cases, case by case (NVIDIA/TensorRT-LLM@a1a20970 for
NGram, @9f6399f2 for SA), plus an oracle of the NGram kernel's rule on random histories with upstream's
parametrisation, and the host-side pool of the 1.0-1.2 releases on cases worked from its code.

Each upstream case names the test it comes from. Upstream feeds the last token through the extend step;
here the same token is appended with ``extend`` before drafting: the same history, the same draft.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.drafting.config import DraftConfig
from trtlade.drafting.history import HistoryPool
from trtlade.drafting.host_pool import HostNGramPool
from trtlade.drafting.suffix import SuffixAutomaton, SuffixPool


# --------------------------------------------------------------------------------- NGram, one model
def ngram_oracle(histories, own, draft_len, max_ngram, use_oldest, public, max_seq_len):
    """The NGram kernel's rule written out by brute force over every candidate end, as upstream's
    ``reference_extend_and_draft`` (tests/unittest/_torch/speculative/test_ngram_kernel.py) states it:
    rank by (match length, own slot, oldest/latest end, lower slot)."""
    history = histories[own]
    longest = min(max_ngram, len(history) - 1)
    if longest <= 0:
        return [0] * draft_len, 0
    searched = [own] + ([s for s in range(len(histories)) if s != own and histories[s]] if public else [])
    best = None
    for slot in searched:
        tokens = histories[slot]
        for end in range(len(tokens) - 1):
            k = 0
            while k < longest and end - k >= 0 and tokens[end - k] == history[-1 - k]:
                k += 1
            if k:
                key = (k, slot == own, (max_seq_len - 1 - end) if use_oldest else end, len(histories) - 1 - slot)
                if best is None or key > best[0]:
                    best = (key, slot, end)
    if best is None:
        return [0] * draft_len, 0
    (k, *_), slot, end = best
    follow = histories[slot][end + 1:end + 1 + draft_len]
    return follow + [0] * (draft_len - len(follow)), k


def one_slot(history):
    pool = HistoryPool(max_seq_len=32)
    pool.add("r", history[:-1])
    pool.extend("r", history[-1:])
    return pool


@pytest.mark.parametrize("use_oldest, expected", [(True, [7, 1, 2]), (False, [8, 2, 3])])
def test_prefers_longest_then_oldest_or_latest(use_oldest, expected):
    """test_ngram_kernel.py::test_prefers_longest_then_oldest_or_latest (first part)."""
    pool = one_slot([1, 2, 3, 7, 1, 2, 3, 8, 2, 3])
    assert pool.draft("r", 3, max_ngram=3, use_oldest=use_oldest, public=False) == (expected, 2)


def test_a_longer_match_beats_every_shorter_one():
    """test_ngram_kernel.py::test_prefers_longest_then_oldest_or_latest (a 3-token match wins)."""
    pool = one_slot([2, 3, 9, 1, 2, 3, 5, 5, 5, 1, 2, 3])
    assert pool.draft("r", 3, max_ngram=3, use_oldest=True, public=False) == ([5, 5, 5], 3)


def test_continuation_is_zero_padded_at_history_end():
    """test_ngram_kernel.py::test_continuation_is_zero_padded_at_history_end."""
    pool = one_slot([4, 5, 6, 4, 5])
    assert pool.draft("r", 4, max_ngram=2, use_oldest=True, public=False) == ([6, 4, 5, 0], 2)
    assert pool.draft("r", 4, max_ngram=2, use_oldest=True, public=False, pad=False) == ([6, 4, 5], 2)


@pytest.mark.parametrize("own, public, expected", [
    ([1, 2, 3, 9, 1, 2], True, ([3, 9], 2)),   # own history first
    ([5, 5, 1, 2], True, ([8, 8], 2)),         # nothing of its own: the other slot
    ([5, 5, 1, 2], False, ([0, 0], 0)),        # private pool: nothing
])
def test_public_pool_prefers_own_history_then_other_slots(own, public, expected):
    """test_ngram_kernel.py::test_public_pool_prefers_own_history_then_other_slots."""
    pool = HistoryPool(max_seq_len=32)
    pool.add("own", own[:-1])
    pool.add("other", [1, 2, 8, 8])
    pool.extend("own", own[-1:])
    assert pool.draft("own", 2, max_ngram=2, use_oldest=True, public=public) == expected


def test_extend_only_with_zero_draft_len():
    """test_ngram_kernel.py::test_extend_only_with_zero_draft_len: row 0 extends by its 2 accepted tokens,
    the masked row 1 is left alone; no draft."""
    pool = HistoryPool(max_seq_len=16)
    pool.add(0, [1, 2])
    pool.add(1, [3])
    pool.extend(0, [7, 8, 9, 0][:2])
    assert pool.draft(0, 0, max_ngram=2) == ([], 0)
    assert [pool.history(0), pool.history(1)] == [[1, 2, 7, 8], [3]]


def test_history_never_overflows_max_seq_len():
    """test_ngram_kernel.py::test_history_never_overflows_max_seq_len."""
    pool = HistoryPool(max_seq_len=6)
    pool.add(0, [1, 2, 3, 4])
    pool.extend(0, [5, 6, 7, 8])
    assert pool.history(0) == [1, 2, 3, 4, 5, 6]


def test_seeding_truncates_to_max_seq_len_and_slots_are_reused():
    """hw_agnostic/test_ngram.py::TestNGramPoolManagerBookkeeping: the prompt is seeded once (truncated to
    max_seq_len), a freed slot is cleared and reused, and the round trip history [1,2,3,1,2,3,1] + [2]
    drafts [3, 1, 2] with match length 2 (max_draft_len 3, k 2, oldest, public)."""
    pool = HistoryPool(max_seq_len=8)
    pool.add("a", [1, 2, 3, 1, 2, 9, 9, 9, 9, 9])
    assert pool.history("a") == [1, 2, 3, 1, 2, 9, 9, 9]
    pool.remove("a")
    assert "a" not in pool
    pool.add("b", [1, 2, 3, 1, 2, 3, 1])
    pool.extend("b", [2])
    assert pool.draft("b", 3, max_ngram=2, use_oldest=True, public=True) == ([3, 1, 2], 2)
    assert pool.history("b")[-1] == 2


def _random_histories(rng, num_slots, max_len, vocab=4):
    """test_ngram_kernel.py::_random_histories: slot 0 holds one token (too short to match), slot 1 none."""
    lengths = [rng.randint(0, max_len) for _ in range(num_slots)]
    lengths[0], lengths[1] = 1, 0
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("use_oldest", [True, False])
@pytest.mark.parametrize("public", [True, False])
@pytest.mark.parametrize("max_ngram", [1, 3])
def test_kernel_rule_on_random_histories(use_oldest, public, max_ngram):
    """test_ngram_kernel.py::test_kernel_matches_reference's parametrisation and data (seed 1234, vocab 4, 6
    slots, max_seq_len 96, draft_len 4, 6 steps, rows [0, 2, 3, 4, dummy] with mask [1, 1, 1, 0, 0]): every
    step's drafts, match lengths and histories equal the brute-force rule; masked rows never change."""
    rng = random.Random(1234)
    num_slots, max_seq_len, draft_len, dummy = 6, 96, 4, 5
    histories = _random_histories(rng, num_slots, 40)
    histories[dummy] = []
    pool = HistoryPool(max_seq_len=max_seq_len)
    for slot, tokens in enumerate(histories):
        pool.add(slot, tokens)
    rows, mask = [0, 2, 3, 4, dummy], [1, 1, 1, 0, 0]
    masked_before = list(histories[4])
    for _ in range(6):
        accepted = [[rng.randrange(4) for _ in range(draft_len + 1)] for _ in rows]
        counts = [rng.randint(1, draft_len + 1) for _ in rows]
        for slot, live, tokens, count in zip(rows, mask, accepted, counts):
            if live:
                new = tokens[:min(count, max_seq_len - len(histories[slot]))]
                histories[slot].extend(new)
                pool.extend(slot, tokens[:count])
        for slot, live in zip(rows, mask):
            if not live:
                continue
            assert pool.draft(slot, draft_len, max_ngram=max_ngram, use_oldest=use_oldest, public=public) == \
                ngram_oracle(histories, slot, draft_len, max_ngram, use_oldest, public, max_seq_len)
        assert [pool.history(s) for s in range(num_slots)] == histories
    assert pool.history(4) == masked_before


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=30), min_size=1, max_size=4),
       st.integers(1, 4), st.booleans(), st.booleans(), st.lists(st.integers(0, 3), max_size=12))
def test_indexed_search_equals_the_brute_force_rule(histories, max_ngram, use_oldest, public, growth):
    """The pool's indexes give the brute-force rule's answer, also after its histories grew (the indexes
    are caught up, not rebuilt)."""
    pool = HistoryPool()
    for slot, tokens in enumerate(histories):
        pool.add(slot, tokens)
    for step, token in enumerate([None, *growth]):
        if token is not None:
            slot = step % len(histories)
            histories[slot].append(token)
            pool.extend(slot, [token])
        for slot in range(len(histories)):
            if histories[slot]:
                assert pool.draft(slot, 3, max_ngram=max_ngram, use_oldest=use_oldest, public=public) == \
                    ngram_oracle(histories, slot, 3, max_ngram, use_oldest, public, 1 << 20)


# --------------------------------------------------------------------------------- SA
def sa_draft(context, accepted, k, draft_len=4):
    pool = SuffixPool()
    pool.add("r", context)
    pool.extend("r", [accepted])
    return pool.draft("r", draft_len, max_ngram=k)


@pytest.mark.parametrize("context, accepted, k, expected", [
    # test_suffix_automaton.py::TestSuffixAutomatonManager::test_manager_extend
    ([1, 2, 3, 4, 5, 1, 2, 3], 6, -1, ([0, 0, 0, 0], 0)),
    # TestExtendNgram::test_extend_ngram_longest_match, cases 1-4 (case 1 pins the first token only)
    ([0, 1, 2, 1, 2], 1, -1, ([2, 1, 0, 0], 3)),
    ([0, 1, 2, 3, 1, 2, 4, 1], 2, -1, ([3, 1, 2, 4], 2)),
    ([1, 1, 1, 1], 1, -1, ([1, 0, 0, 0], 4)),
    ([0, 1, 2, 3], 2, -1, ([3, 2, 0, 0], 1)),
    # TestExtendNgram::test_extend_ngram_fixed_size, cases 1-4
    ([0, 1, 2, 3, 1, 2], 3, 3, ([1, 2, 3, 0], 3)),
    ([0, 1, 2, 3, 1, 2, 4, 1], 2, 3, ([3, 1, 2, 4], 2)),
    ([0, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3], 4, 3, ([5, 1, 2, 3], 3)),
    ([1, 2, 1, 2], 1, 3, ([2, 1, 0, 0], 3)),
    # TestExtendNgram::test_extend_ngram_no_match, both modes
    ([0, 1, 2, 3], 4, -1, ([0, 0, 0, 0], 0)),
    ([0, 1, 2, 3], 4, 3, ([0, 0, 0, 0], 0)),
])
def test_sa_literal_cases(context, accepted, k, expected):
    assert sa_draft(context, accepted, k) == expected


def test_sa_batch_of_three():
    """TestExtendNgram::test_extend_ngram_batch: three requests, longest match each."""
    pool = SuffixPool()
    for key, context in enumerate([[1, 2, 3, 4, 5, 1, 2, 3], [10, 20, 30, 10, 20], [100, 200, 300, 400]]):
        pool.add(key, context)
    for key, token in enumerate([4, 30, 500]):
        pool.extend(key, [token])
    assert pool.draft(0, 4) == ([5, 1, 2, 3], 4)
    assert pool.draft(1, 4) == ([10, 20, 30, 0], 3)
    assert pool.draft(2, 4)[1] == 0


def global_pool(*contexts, capacity=64, max_requests=16):
    pool = SuffixPool(max_requests=max_requests)
    pool.reserve(capacity)
    for key, context in enumerate(contexts):
        pool.add(key, context)
    return pool


def test_sa_global_pool_cross_request_match():
    """TestExtendGlobal::test_extend_global_cross_request_match: request 1 continues request 0's text."""
    pool = global_pool([1, 2, 3, 4, 5], [10, 20, 1, 2, 3])
    pool.extend(0, [6])
    pool.extend(1, [4])
    assert pool.draft(1, 4, search_all=True) == ([5, 6, 0, 0], 4)
    assert pool.draft(1, 4, search_all=False)[1] == 0  # without the global pool: nothing of its own


def test_sa_global_pool_prefers_own_slot():
    """TestExtendGlobal::test_extend_global_prefers_own_slot: equal matches, each its own continuation."""
    pool = global_pool([1, 2, 3, 100, 1, 2], [1, 2, 3, 200, 1, 2])
    pool.extend(0, [3])
    pool.extend(1, [3])
    assert pool.draft(0, 4, search_all=True)[0][0] == 100
    assert pool.draft(1, 4, search_all=True)[0][0] == 200


def test_sa_global_pool_no_match_and_single_request():
    """TestExtendGlobal::test_extend_global_no_match and ::test_extend_global_single_request."""
    pool = global_pool([1, 2, 3], [4, 5, 6])
    pool.extend(0, [99])
    pool.extend(1, [99])
    assert pool.draft(0, 4, search_all=True) == ([0, 0, 0, 0], 0)
    single = global_pool([0, 1, 2, 1, 2])
    single.extend(0, [1])
    assert single.draft(0, 4, search_all=True) == ([2, 1, 0, 0], 3)


def test_sa_global_pool_removed_request_is_not_searched():
    """TestExtendGlobal::test_extend_global_active_slot_mask: a request removed before it ever stepped is
    neither searched nor retained."""
    pool = global_pool([1, 2, 3, 4, 5], [10, 20, 1, 2])
    pool.remove(0, retain=True)
    pool.extend(1, [3])
    assert pool.draft(1, 4, search_all=True)[1] == 0
    assert pool.retained == []


def test_sa_retained_request_is_searchable():
    """TestRetainedPool::test_retained_slot_is_searchable: pool 4 > 2 requests, A finishes and stays."""
    pool = global_pool([1, 2, 3, 4, 5], [10, 20, 30], capacity=4, max_requests=2)
    pool.draft(0, 4, search_all=True)
    pool.draft(1, 4, search_all=True)
    pool.remove(0, retain=True)
    assert pool.retained == [0]
    pool.add(2, [50, 60, 1, 2, 3])
    pool.extend(1, [99])
    pool.extend(2, [4])
    draft, length = pool.draft(2, 4, search_all=True)
    assert length >= 3 and draft[0] == 5


def test_sa_eviction_is_fifo_and_never_a_running_request():
    """TestRetainedPool::test_eviction_fifo_order and ::test_active_never_evicted."""
    pool = global_pool([1, 2, 3], [4, 5, 6], capacity=4, max_requests=2)
    pool.draft(0, 4)
    pool.draft(1, 4)
    pool.remove(0, retain=True)
    pool.remove(1, retain=True)
    assert pool.retained == [0, 1]
    pool.add(2, [7, 8, 9])
    pool.add(3, [10, 11, 12])
    assert pool.retained == [0, 1]
    pool.add(4, [13, 14, 15])
    assert pool.retained == [1]
    full = global_pool([1, 2, 3], [4, 5, 6], capacity=2, max_requests=2)
    full.draft(0, 4)
    full.remove(0, retain=True)
    assert full.retained == []


def test_sa_no_retention_without_the_global_pool():
    """TestRetainedPool::test_no_retention_when_global_pool_disabled."""
    pool = SuffixPool(max_requests=4)
    pool.add(0, [1, 2, 3])
    pool.draft(0, 4)
    pool.remove(0, retain=False)
    assert pool.retained == []


def sa_oracle(tokens, k):
    """Longest (k=-1) or sizes k..1: the suffix at its earliest earlier occurrence with a token after it."""
    sizes = range(len(tokens) - 1, 0, -1) if k == -1 else range(min(k, len(tokens) - 1), 0, -1)
    for size in sizes:
        suffix = tokens[-size:]
        for end in range(size - 1, len(tokens) - 1):
            if tokens[end - size + 1:end + 1] == suffix:
                return end + 1, size
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.sampled_from([-1, 1, 2, 3, 5]))
def test_suffix_automaton_equals_brute_force(tokens, k):
    """The automaton's lookups are the brute-force rule at every prefix (built online, token by token)."""
    sa = SuffixAutomaton()
    for i, token in enumerate(tokens):
        sa.extend(token)
        assert sa.lookup_upto(k) == sa_oracle(tokens[:i + 1], k)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_suffix_automaton_match_is_the_longest_suffix_found_with_a_continuation(text, pattern):
    """``match`` (the global pool's search of another request) by brute force: the longest suffix of the
    pattern occurring in the text with a token after it, at its earliest occurrence."""
    expected = None
    for size in range(len(pattern), 0, -1):
        suffix = pattern[-size:]
        ends = [e for e in range(size - 1, len(text) - 1) if text[e - size + 1:e + 1] == suffix]
        if ends:
            expected = (ends[0] + 1, size)
            break
    assert SuffixAutomaton(text).match(pattern) == expected


# --------------------------------------------------------------------------------- NGram, host pool
def test_host_pool_longest_pattern_first_and_oldest_or_newest():
    """NGramPoolManager.get_draft_tokens: the longest stored suffix pattern, its oldest or newest match."""
    prefix = [1, 2, 3, 1, 2, 4, 1, 2]
    oldest = HostNGramPool(max_draft_len=2, max_matching_ngram_size=2, is_public_pool=False)
    newest = HostNGramPool(max_draft_len=2, max_matching_ngram_size=2, is_public_pool=False, is_use_oldest=False)
    assert oldest.draft(prefix, "r", 100) == [3, 1]
    assert newest.draft(prefix, "r", 100) == [4, 1]


def test_host_pool_budget_cuts_and_never_pads():
    """The draft is cut to max_sequence_length - 1 - len(prefix) and never padded; no budget, no draft."""
    prefix = [5, 6, 7, 8, 9, 5, 6]
    pool = HostNGramPool(max_draft_len=4, max_matching_ngram_size=2, is_public_pool=False)
    assert pool.draft(prefix, "a", 100) == [7, 8, 9, 5]
    assert HostNGramPool(max_draft_len=4, max_matching_ngram_size=2).draft(prefix, "b", 10) == [7, 8]
    assert HostNGramPool(max_draft_len=4, max_matching_ngram_size=2).draft(prefix, "c", 8) == []


def test_host_pool_tail_is_harvested_again_so_a_cut_match_grows():
    """start_index = len - (D + k - 1): a match cut by the text's end is harvested again, longer, and the
    shorter stored one is dropped."""
    pool = HostNGramPool(max_draft_len=3, max_matching_ngram_size=1, is_public_pool=False)
    pool.draft([9, 4, 5], "r", 100)                      # harvests 4 -> (5,)
    assert pool.private["r"][(4,)] == [(5,)]
    pool.draft([9, 4, 5, 6, 7, 4], "r", 100)             # 4 -> (5, 6, 7) replaces the cut (5,)
    assert pool.private["r"][(4,)] == [(5, 6, 7)]


def test_host_pool_quirks_are_kept():
    """Without is_keep_all an equal-length new match is still appended; dropping shorter matches skips the
    entry after each dropped one (upstream walks the list it deletes from)."""
    keep_one = HostNGramPool(max_draft_len=1, max_matching_ngram_size=1, is_keep_all=False, is_public_pool=False)
    keep_one.draft([1, 2, 1, 3, 1], "r", 100)
    assert keep_one.private["r"][(1,)] == [(2,), (3,)]
    pool = HostNGramPool(max_draft_len=3, max_matching_ngram_size=1, is_public_pool=False)
    pool.private["r"], pool.start_index["r"] = {(1,): [(2,), (3,), (4, 5)]}, 0
    pool.draft([1, 6, 7, 8], "r", 100)                  # match (6, 7, 8) drops (2,), skips (3,), drops (4, 5)
    assert pool.private["r"][(1,)] == [(3,), (6, 7, 8)]


def sa_global_oracle(texts, own, draft_len):
    """The global pool by brute force: the own text's longest earlier suffix (at most 64 tokens), else a longer
    suffix (of its last 64 tokens) found in another text with a token after it; the own text wins ties, then
    the first admitted; each at its earliest occurrence."""
    mine = texts[own]
    best = None
    found = sa_oracle(mine[-65:] if len(mine) > 65 else mine, -1)
    if found is not None and len(mine) > 65:
        found = (found[0] + len(mine) - 65, found[1])
    if found is not None:
        best = (found[1], own, found[0])
    pattern = mine[-64:]
    for key, text in enumerate(texts):
        if key == own:
            continue
        for size in range(len(pattern), 0, -1):
            ends = [e for e in range(size - 1, len(text) - 1) if text[e - size + 1:e + 1] == pattern[-size:]]
            if ends:
                if best is None or size > best[0]:
                    best = (size, key, ends[0] + 1)
                break
    if best is None:
        return [0] * draft_len, 0
    size, key, start = best
    follow = texts[key][start:start + draft_len]
    return follow + [0] * (draft_len - len(follow)), size


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=25), min_size=1, max_size=4))
def test_sa_global_pool_equals_brute_force(texts):
    """The global pool's search (the own automaton, then the others only where a longer match is possible)
    gives the brute-force answer."""
    pool = global_pool(*texts)
    for key in range(len(texts)):
        assert pool.draft(key, 3, search_all=True) == sa_global_oracle(texts, key, 3)


def test_ngram_slots_are_numbered_as_upstreams_slot_manager_hands_them_out():
    """``SlotManager`` (``tensorrt_llm/_torch/speculative/ngram.py``@a1a20970) takes with ``set.pop()`` and frees
    with ``set.add()``: 0, 1, 2, 3 on a fresh pool of four, then the freed 1 (not the lowest free by rule: the
    set's own order)."""
    pool = HistoryPool(slots=4)
    for key in "abc":
        pool.add(key, [1, 2])
    pool.remove("b")
    pool.add("d", [1])
    pool.add("e", [1])
    assert [pool.slot_number(k) for k in "acde"] == [0, 2, 3, 1]
    unsized = HistoryPool()
    for key in "abc":
        unsized.add(key, [1])
    unsized.remove("a")
    unsized.add("d", [1])
    assert unsized.slot_number("d") == 0  # without a size: the lowest free number


@pytest.mark.parametrize("active, one_model, host", [(1, 4, 4), (5, 2, 4), (8, 2, 2), (9, 0, 2), (100, 0, 2)])
def test_the_two_ngram_lines_read_a_draft_len_schedule_differently(active, one_model, host):
    """1.3's one-model drafter: the first key at or above the batch, 0 above every key
    (``get_draft_len_for_batch_size``, ``bisect_left``); the 1.0 to 1.2 host drafter: the largest key at or below
    the active requests (``Drafter.get_draft_len_for_batch_size``, ``bisect_right``)."""
    config = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {1: 4, 8: 2}})
    assert config.draft_len_for(active) == one_model
    assert config.host_draft_len_for(active, max_batch_size=128) == host


def test_a_draft_length_beyond_the_executors_int32_is_refused_with_the_bound_spec_holds():
    """`build --speculation ngram-2147483648` planned a bundle whose draft length no executor can hold."""
    from trtlade.drafting.config import SIZE_TYPE32_MAX, DraftConfig, DraftConfigError
    from trtlade.spec import SIZE_TYPE32_MAX as SPEC_BOUND

    assert SIZE_TYPE32_MAX == SPEC_BOUND
    widest = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": SIZE_TYPE32_MAX})
    assert widest.max_draft_len == SIZE_TYPE32_MAX
    with pytest.raises(DraftConfigError, match="SizeType32"):
        DraftConfig.parse({"decoding_type": "SA", "max_draft_len": SIZE_TYPE32_MAX + 1})

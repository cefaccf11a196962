"""NGram drafting as TensorRT-LLM's one-model NGram does it: every request's whole history in a slot.

Mirrors ``tensorrt_llm/_torch/speculative/ngram.py`` (``NGramPoolManager``: a slot per request, seeded with
the prompt when its first context chunk is scheduled, cleared when it finishes) and the kernel
``cpp/tensorrt_llm/kernels/speculativeDecoding/ngramKernels.cu`` (``ngram_extend_and_draft_op``), as pinned by
the Python model ``reference_extend_and_draft`` in ``tests/unittest/_torch/speculative/test_ngram_kernel.py``
(NVIDIA/TensorRT-LLM@a1a20970). Per step and request:

1. **extend**: append the tokens it accepted (at most ``max_seq_len`` in all);
2. **match**: with ``m = min(max_matching_ngram_size, len - 1)`` (nothing if m <= 0), every earlier position
   ``end`` with at least one token after it is a candidate whose match length is how many trailing tokens
   there equal the history's suffix, capped at m; other live slots are searched too with ``is_public_pool``;
3. **rank**: longest match, then the request's own slot, then the earliest ``end`` (``is_use_oldest``) or the
   latest, then the lower slot;
4. **draft**: the ``draft_len`` tokens after the winner, cut at that history's end and zero-padded
   (match length 0 and zeros when nothing matches).

Worked example (``test_prefers_longest_then_oldest_or_latest``)::

    >>> pool = HistoryPool()
    >>> pool.add("r", [1, 2, 3, 7, 1, 2, 3, 8, 2, 3])
    >>> pool.draft("r", 3, max_ngram=3, use_oldest=True, public=False)    # suffix "2 3", first seen at 1..2
    ([7, 1, 2], 2)
    >>> pool.draft("r", 3, max_ngram=3, use_oldest=False, public=False)   # its latest earlier occurrence
    ([8, 2, 3], 2)

The search is indexed, not scanned: each slot keeps, per match length m asked for so far, the first and
last end of every m-gram that has a token after it, grown as the history grows, so a step costs a few
dictionary look-ups per searched slot whatever the history's length.
"""

from __future__ import annotations

from typing import Hashable, Optional, Sequence

__all__ = ["HistoryPool"]


class _Slot:
    """One request's history and its m-gram indexes: ``index[m][gram] = [first end, last end]`` over the
    ends ``e <= len - 2`` (a token follows), ``done[m]`` the next end to index."""

    __slots__ = ("number", "tokens", "index", "done")

    def __init__(self, number: int, tokens: list[int]) -> None:
        self.number = number
        self.tokens = tokens
        self.index: dict[int, dict[tuple[int, ...], list[int]]] = {}
        self.done: dict[int, int] = {}

    def ends(self, m: int) -> dict[tuple[int, ...], list[int]]:
        """The m-gram index, brought up to date with the history."""
        table = self.index.get(m)
        if table is None:
            table = self.index[m] = {}
            self.done[m] = m - 1
        tokens, start, stop = self.tokens, self.done[m], len(self.tokens) - 1
        for end in range(start, stop):
            gram = tuple(tokens[end - m + 1:end + 1])
            seen = table.get(gram)
            if seen is None:
                table[gram] = [end, end]
            else:
                seen[1] = end
        if stop > start:
            self.done[m] = stop
        return table


class HistoryPool:
    """The slots of live requests (key -> history). ``max_seq_len``: a history never grows past it
    (``ngramExtendHistoryKernel``); None: no bound. ``slots``: the pool's size; its slot numbers are handed out
    as upstream's ``SlotManager`` hands them out (``ngram.py``@a1a20970: a ``set(range(slots))``, ``pop()`` to
    take, ``add()`` to free: 0, 1, 2 ... on a fresh pool, then CPython's set order, which is not the lowest free
    one); None: the lowest free number."""

    def __init__(self, max_seq_len: Optional[int] = None, slots: Optional[int] = None) -> None:
        self.max_seq_len = max_seq_len
        self._slots: dict[Hashable, _Slot] = {}
        self._free: Optional[set[int]] = set(range(slots)) if slots else None
        self._size = slots or 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    def history(self, key: Hashable) -> list[int]:
        return list(self._slots[key].tokens)

    def add(self, key: Hashable, tokens: Sequence[int]) -> None:
        """Seed a request's slot with its prompt (``_seed_history``: truncated to ``max_seq_len``), in the
        lowest free slot."""
        if key in self._slots:
            raise ValueError(f"request {key!r} already holds a slot")
        taken = {slot.number for slot in self._slots.values()}
        if self._free:
            number = self._free.pop()
        else:  # no pool size, or more requests than slots: the lowest number not in use
            number = next(n for n in range(len(taken) + 1) if n not in taken)
        seeded = [int(t) for t in tokens]
        self._slots[key] = _Slot(number, seeded[:self.max_seq_len] if self.max_seq_len is not None else seeded)

    def remove(self, key: Hashable) -> None:
        """A finished request's history is dropped (``free_resources``): no later search sees it."""
        slot = self._slots.pop(key, None)
        if slot is not None and self._free is not None and slot.number < self._size:
            self._free.add(slot.number)

    def slot_number(self, key: Hashable) -> int:
        """The slot ``key`` holds (ties between other requests' matches go to the lower number)."""
        return self._slots[key].number

    def extend(self, key: Hashable, tokens: Sequence[int]) -> None:
        """Append accepted tokens, never past ``max_seq_len``."""
        slot = self._slots[key]
        room = len(tokens) if self.max_seq_len is None else max(0, self.max_seq_len - len(slot.tokens))
        slot.tokens.extend(int(t) for t in tokens[:room])

    def draft(self, key: Hashable, draft_len: int, *, max_ngram: int, use_oldest: bool = True, public: bool = True,
              pad: bool = True) -> tuple[list[int], int]:
        """``(draft, match length)``: ``draft_len`` tokens, zero-padded (see the module docstring);
        ``pad=False``: the continuation alone."""
        if draft_len <= 0:
            return [], 0
        own = self._slots[key]
        found = self._match(own, min(max_ngram, len(own.tokens) - 1), use_oldest, public)
        follow, length = ([], 0) if found is None else (
            found[0].tokens[found[1] + 1:found[1] + 1 + draft_len], found[2])
        return (follow + [0] * (draft_len - len(follow)) if pad else follow), length

    def peer_draft(self, key: Hashable, draft_len: int, *, max_ngram: int = 3, min_ngram: int = 2) -> list[int]:
        """Up to ``draft_len`` tokens that followed the text's longest suffix (``max_ngram`` down to
        ``min_ngram`` tokens) in *another* request's history: the public search alone, its latest occurrence,
        ties to the lower slot. The request's own text is not searched (prompt lookup reads that).

            >>> pool = HistoryPool()
            >>> pool.add("a", [4, 5, 6, 7, 8, 9])
            >>> pool.add("b", [1, 5, 6])
            >>> pool.peer_draft("b", 3), pool.peer_draft("a", 3)     # "5 6" in a; "8 9" nowhere else
            ([7, 8, 9], [])
            >>> pool.add("c", [2, 6]); pool.peer_draft("c", 2)       # one shared token is not a match
            []
        """
        own = self._slots[key]
        longest = min(max_ngram, len(own.tokens) - 1)
        if draft_len <= 0 or longest < min_ngram:
            return []
        found = self._match(own, longest, use_oldest=False, public=True, own_too=False, shortest=min_ngram)
        return [] if found is None else found[0].tokens[found[1] + 1:found[1] + 1 + draft_len]

    def _match(self, own: _Slot, longest: int, use_oldest: bool, public: bool, *, own_too: bool = True,
               shortest: int = 1) -> Optional[tuple[_Slot, int, int]]:
        """The winning (slot, end, match length): the longest m (down to ``shortest``) with a candidate, then
        the ranking; ``own_too=False``: other slots only."""
        if longest <= 0:
            return None
        others = [s for s in self._slots.values() if s is not own and s.tokens] if public else []
        for m in range(longest, shortest - 1, -1):
            gram = tuple(own.tokens[-m:])
            seen = own.ends(m).get(gram) if own_too else None
            if seen is not None:  # the own slot wins every tie in length
                return own, seen[0] if use_oldest else seen[1], m
            best: Optional[tuple[int, int, _Slot]] = None
            for slot in others:
                hit = slot.ends(m).get(gram)
                if hit is None:
                    continue
                end = hit[0] if use_oldest else hit[1]
                rank = (-end if use_oldest else end, -slot.number)
                if best is None or rank > best[:2]:
                    best = (rank[0], rank[1], slot)
            if best is not None:
                slot = best[2]
                return slot, -best[0] if use_oldest else best[0], m
        return None

"""Exact prefix reuse across requests: the K/V of token prefixes, kept in blocks, bounded, LRU.

A prompt is cut into blocks of ``block_tokens``; block i is keyed by its tokens AND the key of block
i - 1, so a block is found only after the very same tokens from position 0 (no hash: the key is the
tokens, collisions cannot happen). A hit copies the matched blocks' K/V into the new request's slot and
the engine prefills the rest of the prompt from there, as a chunked prefill would after those blocks.

Exact by construction on the reference engine: the linear layers are row-invariant (a row's bits do not
depend on the rows beside it), and the row attention folds a row's keys in position order in chunks
counted from position 0, whether they were committed by an earlier forward or computed in this one.
The K/V of a prefix computed in an earlier request are therefore the bits a fresh prefill computes, and
the rows after them see the same keys in the same order (tests/test_prefix_cache.py checks the tokens and
the logits' bits against a cold engine, fp32 and bf16, greedy and seeded sampling).

At least one prompt token is always prefilled (its logits give the first token), so a hit covers at
most ``len(prompt) - 1`` tokens, in whole blocks. Eviction takes the least recently used block with no
cached child (a block's children are unreachable without it).

    >>> cache = PrefixCache(block_tokens=2, max_bytes=10 ** 6, bytes_per_token=1)
    >>> cache.match([5, 6, 7, 8, 9])                       # cold: nothing
    0
    >>> cache.store([5, 6, 7, 8, 9], lambda lo, hi: f"kv[{lo}:{hi}]")  # blocks [5,6], [7,8]; 9 is partial
    2
    >>> cache.match([5, 6, 7, 8, 1]), cache.match([5, 6, 7, 1]), cache.match([7, 8, 5, 6])
    (4, 2, 0)
    >>> cache.match([5, 6, 7, 8])                           # leaves one token to prefill: the first block
    2
    >>> cache.blocks_for([5, 6, 7, 8, 1], 4)
    ['kv[0:2]', 'kv[2:4]']
    >>> cache.stats()["cached_tokens"], cache.stats()["bytes"]
    (4, 4)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

__all__ = ["PrefixCache", "DEFAULT_BLOCK_TOKENS"]

#: tokens per block (vLLM's default block size)
DEFAULT_BLOCK_TOKENS = 16


@dataclass
class _Block:
    key: tuple
    kv: Any
    parent: Optional[tuple]
    children: int = 0


@dataclass
class PrefixCache:
    """Blocks of K/V by token prefix, at most ``max_bytes`` (``bytes_per_token`` each token of a block)."""

    block_tokens: int = DEFAULT_BLOCK_TOKENS
    max_bytes: int = 0
    bytes_per_token: int = 1
    _blocks: "OrderedDict[tuple, _Block]" = field(default_factory=OrderedDict, repr=False)
    lookups: int = 0
    hits: int = 0
    hit_tokens: int = 0
    prompt_tokens: int = 0
    evictions: int = 0

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {self.block_tokens}")

    @property
    def block_bytes(self) -> int:
        return self.block_tokens * self.bytes_per_token

    def _keys(self, tokens: Sequence[int], blocks: int) -> list[tuple]:
        keys, parent, b = [], None, self.block_tokens
        for i in range(blocks):
            parent = (parent, tuple(tokens[i * b:(i + 1) * b]))
            keys.append(parent)
        return keys

    def match(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` whose K/V are cached (whole blocks, at most ``len(prompt) - 1``)."""
        found = 0
        for key in self._keys(prompt, max(0, len(prompt) - 1) // self.block_tokens):
            if key not in self._blocks:
                break
            found += 1
        return found * self.block_tokens

    def blocks_for(self, prompt: Sequence[int], tokens: int) -> list[Any]:
        """The K/V of the first ``tokens`` (a :meth:`match` result) of ``prompt``, block by block; counts
        the lookup and marks the blocks recently used."""
        keys = self._keys(prompt, tokens // self.block_tokens)
        out = []
        for key in keys:
            self._blocks.move_to_end(key)
            out.append(self._blocks[key].kv)
        self.lookups += 1
        self.hits += bool(keys)
        self.hit_tokens += tokens
        self.prompt_tokens += len(prompt)
        return out

    def store(self, prompt: Sequence[int], read: Callable[[int, int], Any]) -> int:
        """Keep every whole block of ``prompt`` not cached yet, ``read(lo, hi)`` giving the K/V of
        positions [lo, hi); returns the blocks added. Nothing when one block exceeds the budget."""
        if self.block_bytes > self.max_bytes:
            return 0
        added, parent = 0, None
        for i, key in enumerate(self._keys(prompt, len(prompt) // self.block_tokens)):
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                self._make_room()
                self._blocks[key] = _Block(key, read(i * self.block_tokens, (i + 1) * self.block_tokens), parent)
                if parent is not None:
                    self._blocks[parent].children += 1
                added += 1
            parent = key
        return added

    def _make_room(self) -> None:
        while self._blocks and (len(self._blocks) + 1) * self.block_bytes > self.max_bytes:
            victim = next((k for k, blk in self._blocks.items() if blk.children == 0), None)
            if victim is None:  # pragma: no cover - a chain always has a leaf
                return
            blk = self._blocks.pop(victim)
            if blk.parent is not None and blk.parent in self._blocks:
                self._blocks[blk.parent].children -= 1
            self.evictions += 1

    def clear(self) -> dict[str, int]:
        """Drop every block (the counters stay: they count since the start); returns what was dropped."""
        dropped = {"blocks": len(self._blocks), "bytes": len(self._blocks) * self.block_bytes}
        self._blocks.clear()
        return dropped

    def stats(self) -> dict[str, int | float]:
        """As data: blocks, cached tokens and bytes held, lookups, hits, hit tokens, prompt tokens looked
        up, the token hit rate, evictions."""
        rate = self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return {"blocks": len(self._blocks), "cached_tokens": len(self._blocks) * self.block_tokens,
                "bytes": len(self._blocks) * self.block_bytes, "max_bytes": self.max_bytes,
                "block_tokens": self.block_tokens, "lookups": self.lookups, "hits": self.hits,
                "hit_tokens": self.hit_tokens, "prompt_tokens": self.prompt_tokens,
                "token_hit_rate": round(rate, 4), "evictions": self.evictions}

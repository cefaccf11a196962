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

A prompt's last, partial block is kept too (its key holds fewer tokens), and a lookup ends with the
cached child of its last whole block that shares the most next tokens with the prompt, of which it uses
that many: the same prompt sent again, or a conversation's next turn that resends it, reuses all of it
but the last token. At least one prompt token is always prefilled (its logits give the first token), so
a hit covers at most ``len(prompt) - 1`` tokens. Eviction takes the least recently used block with no
cached child (a block's children are unreachable without it) of the identity holding the most tokens.

    >>> cache = PrefixCache(block_tokens=2, max_bytes=10 ** 6, bytes_per_token=1)
    >>> cache.match([5, 6, 7, 8, 9])                       # cold: nothing
    0
    >>> cache.store([5, 6, 7, 8, 9], lambda lo, hi: f"kv[{lo}:{hi}]")  # blocks [5,6], [7,8] and the tail [9]
    3
    >>> cache.match([5, 6, 7, 8, 1]), cache.match([5, 6, 7, 1]), cache.match([7, 8, 5, 6])  # [7, 1]: 7 of [7, 8]
    (4, 3, 0)
    >>> cache.match([5, 6, 7, 8])                           # leaves one token to prefill: block [7, 8] in part
    3
    >>> cache.match([5, 6, 7, 8, 9, 4])                     # the tail too
    5
    >>> cache.blocks_for([5, 6, 7, 8], 3)                   # (K/V, tokens of it used)
    [('kv[0:2]', 2), ('kv[2:4]', 1)]
    >>> cache.stats()["cached_tokens"], cache.stats()["bytes"]
    (5, 5)

Namespaces (:class:`~trtlade.contract.protocol.CacheScope`): the first block of a prompt hangs from its
namespace instead of from nothing, so every block's key holds the namespace it was stored under, and a
lookup in another namespace cannot reach it, before or after an eviction (a re-stored block gets its
namespace again). A scope whose namespace is None reuses and stores nothing.

    >>> from trtlade.contract.protocol import CacheScope
    >>> alice, bob = CacheScope("identity", "alice"), CacheScope("identity", "bob")
    >>> scoped = PrefixCache(block_tokens=2, max_bytes=10 ** 6, bytes_per_token=1)
    >>> scoped.store([5, 6, 7, 8, 9], lambda lo, hi: (lo, hi), alice)
    3
    >>> scoped.match([5, 6, 7, 8, 1], alice), scoped.match([5, 6, 7, 8, 1], bob), scoped.match([5, 6, 7, 8, 1])
    (4, 0, 0)
    >>> unsalted = CacheScope("salt", "alice")       # salt scope without a salt: shares nothing
    >>> scoped.store([5, 6], lambda lo, hi: (lo, hi), unsalted), scoped.match([5, 6, 1], unsalted)
    (0, 0)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from trtlade.contract.protocol import CacheScope

__all__ = ["PrefixCache", "DEFAULT_BLOCK_TOKENS", "common_prefix"]

#: tokens per block (vLLM's default block size)
DEFAULT_BLOCK_TOKENS = 16


@dataclass
class _Block:
    key: tuple
    kv: Any
    parent: Optional[tuple]
    label: str = "global"
    #: the identity (API key name) that stored it: eviction takes from the identity holding the most
    owner: Optional[str] = None

    @property
    def tokens(self) -> int:
        return len(self.key[1])


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items ``a`` and ``b`` share.

    >>> common_prefix((4, 5, 6), [4, 5, 9, 1]), common_prefix((7,), [4])
    (2, 0)
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PrefixCache:
    """Blocks of K/V by token prefix, at most ``max_bytes`` (``bytes_per_token`` each token of a block)."""

    block_tokens: int = DEFAULT_BLOCK_TOKENS
    max_bytes: int = 0
    bytes_per_token: int = 1
    _blocks: "OrderedDict[tuple, _Block]" = field(default_factory=OrderedDict, repr=False)
    _kids: "dict[tuple, set[tuple]]" = field(default_factory=dict, repr=False)  # (parent, first token) -> keys
    _children: "dict[Optional[tuple], int]" = field(default_factory=dict, repr=False)
    _tokens: int = 0
    lookups: int = 0
    hits: int = 0
    hit_tokens: int = 0
    prompt_tokens: int = 0
    evictions: int = 0
    #: per namespace kind (``global``, ``identity``, ``salt``): lookups, hits, hit tokens, prompt tokens, tokens
    _by_label: "dict[str, dict[str, int]]" = field(default_factory=dict, repr=False)
    #: tokens held by each identity that stored blocks (None: no keys)
    _by_owner: "dict[Optional[str], int]" = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {self.block_tokens}")

    @property
    def block_bytes(self) -> int:
        return self.block_tokens * self.bytes_per_token

    def _label(self, label: str) -> dict[str, int]:
        return self._by_label.setdefault(label, {"lookups": 0, "hits": 0, "hit_tokens": 0, "prompt_tokens": 0,
                                                 "tokens": 0})

    def _walk(self, prompt: Sequence[int], root: Optional[tuple]) -> list[tuple[tuple, int]]:
        """The cached blocks a lookup of ``prompt`` uses in the namespace ``root``, each with the tokens used
        of it: its whole blocks from position 0, then the child sharing the most next tokens (at most
        ``len - 1`` in all)."""
        limit, b = len(prompt) - 1, self.block_tokens
        used: list[tuple[tuple, int]] = []
        parent: Optional[tuple] = root
        while len(used) * b + b <= limit:
            key = (parent, tuple(prompt[len(used) * b:len(used) * b + b]))
            if key not in self._blocks:
                break
            used.append((key, b))
            parent = key
        rest = prompt[len(used) * b:max(limit, 0)]
        if rest:  # the child sharing the most next tokens (ties: the greater tokens, so the same every time)
            kids = self._kids.get((parent, rest[0]), ())
            shared, tokens = max(((common_prefix(k[1], rest), k[1]) for k in kids), default=(0, ()))
            if shared:
                used.append(((parent, tokens), shared))
        return used

    @staticmethod
    def _root(scope: Optional[CacheScope]) -> tuple[Optional[tuple], str, bool]:
        """The namespace a scope's blocks hang from, its label, and whether it shares at all."""
        if scope is None:
            return ("global",), "global", True
        space = scope.namespace
        return space, scope.label, space is not None

    def match(self, prompt: Sequence[int], scope: Optional[CacheScope] = None) -> int:
        """Tokens of ``prompt`` whose K/V are cached in ``scope``'s namespace (at most ``len(prompt) - 1``)."""
        root, _, shares = self._root(scope)
        return sum(n for _, n in self._walk(prompt, root)) if shares else 0

    def blocks_for(self, prompt: Sequence[int], tokens: int, counted: Optional[int] = None,
                   scope: Optional[CacheScope] = None) -> list[tuple[Any, int]]:
        """The K/V of the first ``tokens`` (a :meth:`match` result) of ``prompt`` in ``scope``, block by
        block, each with the tokens of it to use; counts the lookup and marks the blocks recently used.
        ``counted``: this prompt was looked up before and found that many tokens (a second look before its
        prefill starts): only the tokens found since count, not another lookup."""
        root, label, shares = self._root(scope)
        per = self._label(label)
        out, total = [], 0
        for key, n in (self._walk(prompt, root) if shares else ()):
            if total >= tokens:
                break
            n = min(n, tokens - total)
            self._blocks.move_to_end(key)
            out.append((self._blocks[key].kv, n))
            total += n
        hit = bool(out) and not counted
        if counted is None:
            self.lookups += 1
            per["lookups"] += 1
            self.prompt_tokens += len(prompt)
            per["prompt_tokens"] += len(prompt)
            counted, hit = 0, bool(out)
        self.hits += hit
        per["hits"] += hit
        self.hit_tokens += total - counted
        per["hit_tokens"] += total - counted
        return out

    def store(self, prompt: Sequence[int], read: Callable[[int, int], Any], scope: Optional[CacheScope] = None) -> int:
        """Keep every block of ``prompt`` not cached yet in ``scope``'s namespace, its last partial one
        included unless a cached block already starts with it, ``read(lo, hi)`` giving the K/V of positions
        [lo, hi); returns the blocks added. Nothing when one block exceeds the budget, or for a scope that
        shares nothing."""
        root, label, shares = self._root(scope)
        if self.block_bytes > self.max_bytes or not shares:
            return 0
        added, parent, b = 0, root, self.block_tokens
        for lo in range(0, len(prompt), b):
            tokens = tuple(prompt[lo:lo + b])
            key = (parent, tokens)
            if key in self._blocks:
                self._blocks.move_to_end(key)
            elif len(tokens) < b and any(k[1][:len(tokens)] == tokens for k in self._kids.get((parent, tokens[0]), ())):
                break  # a partial block another block already holds
            else:
                owner = scope.identity if scope is not None else None
                self._make_room(len(tokens))
                self._blocks[key] = _Block(key, read(lo, lo + len(tokens)), parent, label, owner)
                self._label(label)["tokens"] += len(tokens)
                self._by_owner[owner] = self._by_owner.get(owner, 0) + len(tokens)
                self._kids.setdefault((parent, tokens[0]), set()).add(key)
                self._children[parent] = self._children.get(parent, 0) + 1
                self._tokens += len(tokens)
                added += 1
            parent = key
        return added

    def _make_room(self, tokens: int) -> None:
        """Evict until ``tokens`` more fit: the least recently used block without a cached child, of the identity
        holding the most tokens (one identity: plain LRU), so that no API key's prompts push another key's out
        of the cache while that key holds less than it does."""
        while self._blocks and (self._tokens + tokens) * self.bytes_per_token > self.max_bytes:
            largest = max(self._by_owner, key=lambda o: self._by_owner[o]) if len(self._by_owner) > 1 else None
            leaves = (k for k in self._blocks if not self._children.get(k))
            victim = next((k for k in leaves if largest is None or self._blocks[k].owner == largest), None)
            if victim is None:  # the largest holder's blocks all have children of another: plain LRU
                victim = next((k for k in self._blocks if not self._children.get(k)), None)
            if victim is None:  # pragma: no cover - a chain always has a leaf
                return
            blk = self._blocks.pop(victim)
            self._by_owner[blk.owner] -= blk.tokens
            if not self._by_owner[blk.owner]:
                del self._by_owner[blk.owner]
            group = (blk.parent, victim[1][0])
            self._kids[group].discard(victim)
            if not self._kids[group]:
                del self._kids[group]
            self._children[blk.parent] -= 1
            if not self._children[blk.parent]:
                del self._children[blk.parent]
            self._tokens -= blk.tokens
            self._label(blk.label)["tokens"] -= blk.tokens
            self.evictions += 1

    def clear(self) -> dict[str, int]:
        """Drop every block (the counters stay: they count since the start); returns what was dropped."""
        dropped = {"blocks": len(self._blocks), "bytes": self._tokens * self.bytes_per_token}
        self._blocks.clear()
        self._kids.clear()
        self._children.clear()
        self._by_owner.clear()
        self._tokens = 0
        for per in self._by_label.values():
            per["tokens"] = 0
        return dropped

    def stats(self) -> dict[str, int | float]:
        """As data: blocks, cached tokens and bytes held, lookups, hits, hit tokens, prompt tokens looked
        up, the token hit rate, evictions; ``by_scope``: the same per namespace kind (never per key or salt)."""
        rate = self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        by_scope = {label: {"bytes": per["tokens"] * self.bytes_per_token, "lookups": per["lookups"],
                            "hits": per["hits"], "hit_tokens": per["hit_tokens"], "prompt_tokens": per["prompt_tokens"],
                            "token_hit_rate": round(per["hit_tokens"] / per["prompt_tokens"], 4)
                            if per["prompt_tokens"] else 0.0}
                    for label, per in sorted(self._by_label.items())}
        return {"blocks": len(self._blocks), "cached_tokens": self._tokens,
                "bytes": self._tokens * self.bytes_per_token, "max_bytes": self.max_bytes,
                "block_tokens": self.block_tokens, "lookups": self.lookups, "hits": self.hits,
                "hit_tokens": self.hit_tokens, "prompt_tokens": self.prompt_tokens,
                "token_hit_rate": round(rate, 4), "evictions": self.evictions, "by_scope": by_scope}

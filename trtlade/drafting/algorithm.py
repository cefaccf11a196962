"""One sequence drafting with NGram or SA, stepped like :class:`~trtlade.lookahead.algorithm.LookaheadAlgorithm`.

No model in here: the engine runs the forward. A request is driven as::

    pools = DraftPools(max_batch_size=8, max_seq_len=2048)
    drafter = pools.drafter(config, key, prompt, eos_token_ids=(eos,), max_sequence_length=len(prompt) + max_tokens)
    drafter.observe([first])              # every emitted token, as it is emitted (the prefill's first too)
    while not done:
        batch = drafter.prepare(in_flight)    # rows: g, then the draft chain (depths 1..L)
        argmax = forward(batch)               # one argmax (or keyed draw) per row
        v = drafter.verify(argmax)            # v.tokens: 1..L+1 tokens, v.kept_rows: whose KV to keep
        drafter.commit(len(v.tokens))         # or fewer, when EOS / a stop / max_tokens cut the run
        drafter.observe(v.tokens)             # what the output kept
    pools.retire(key); pools.flush()          # after the next step has drafted (upstream frees it then)

The pool managers (:class:`~trtlade.drafting.history.HistoryPool`, :class:`~trtlade.drafting.suffix.SuffixPool`,
:class:`~trtlade.drafting.host_pool.HostNGramPool`) hold every request's history; :class:`DraftPools` is
one engine batch's set of them, one :class:`DraftSpace` per namespace, so a public or global pool searches
that batch's requests of the same drafter and the same namespace (the prefix cache's).

Worked example, NGram (max_draft_len 3, k 2): the history ``7 8 9 4 7 8`` has seen ``7 8`` followed by
``9 4 7``, so the step verifies those three drafts beside the golden token ``8``::

    >>> from trtlade.drafting.config import DraftConfig
    >>> pools = DraftPools(max_batch_size=1)
    >>> config = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2})
    >>> drafter = pools.drafter(config, "r", [7, 8, 9, 4, 7], max_sequence_length=50)
    >>> drafter.observe([8])                    # the prefill's first token
    >>> batch = drafter.prepare()
    >>> batch.tokens, batch.positions
    ([8, 9, 4, 7], [0, 1, 2, 3])
    >>> drafter.verify([9, 4, 5, 1]).tokens    # 9 and 4 accepted, 7 was not the model's 5
    [9, 4, 5]

Two deliberate, output-neutral differences from upstream: the zero padding after a short continuation is
not verified (upstream feeds it through the model, where a padding 0 is accepted only if the model's next
token is id 0), and a draft is cut before its first EOS token (a draft equal to EOS is never accepted here;
the EOS the model emits ends the run either way).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Optional, Sequence

from trtlade.drafting.config import DraftConfig
from trtlade.drafting.gate import SpeculationGate
from trtlade.drafting.history import HistoryPool
from trtlade.drafting.host_pool import HostNGramPool
from trtlade.drafting.suffix import SuffixPool
from trtlade.lookahead.algorithm import NO_PARENT, DraftBatch, Verification, select_logit_rows, verify_tree

__all__ = ["DraftPools", "DraftSpace", "GLOBAL_SPACE", "HistoryDrafter", "NGRAM_IMPLEMENTATIONS", "DraftTally"]

#: How NGram runs: ``one_model`` (TensorRT-LLM's current GPU drafter, the default) or ``host_pool`` (the
#: host-side pool of the releases 1.0 to 1.2 and early 1.3.0 release candidates).
NGRAM_IMPLEMENTATIONS = ("one_model", "host_pool")


@dataclass
class DraftTally:
    """What a drafter did: steps it verified drafts in, draft tokens verified, accepted drafts, and steps
    without a draft (no match, or drafting off for the batch size)."""

    drafted_steps: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    empty_steps: int = 0
    disabled: bool = False  #: the engine's acceptance-rate gate turned speculation off for good


#: The namespace of every request when the server shares the pools (``prefix_cache_scope: global``, no salt).
GLOBAL_SPACE: Hashable = ("global",)
#: Namespaces with no live request that may keep their pools (retained SA requests, a host-side public pool)
#: before the least recently used one is dropped; the global namespace is never dropped.
MAX_IDLE_SPACES = 64
#: Tokens of finished SA requests the global pools of every namespace may retain together, by default.
DEFAULT_RETAINED_TOKENS = 1 << 18
#: The most slots a request's SA global pool may ask for (``global_pool_size``), by default.
DEFAULT_MAX_GLOBAL_POOL_SIZE = 256
#: Acceptance-rate gates one namespace keeps (one per window and threshold its requests asked for): past it the least
#: recently used goes, so requests naming ever new settings cannot grow the server.
MAX_GATES_PER_SPACE = 8


class DraftSpace:
    """The pools of one namespace: what a request of that namespace may draft from, and nothing else.
    A pool added here is scoped like every other; a drafter never sees another namespace's space."""

    __slots__ = ("namespace", "history", "suffix", "host", "peers", "live", "gates", "gate_users", "private", "owner")

    def __init__(self, namespace: Hashable, max_batch_size: int, max_seq_len: Optional[int],
                 private: bool = False, owner: Hashable = None) -> None:
        self.namespace = namespace
        #: who the namespace is charged to (an API key's identity; None: no keys): the shared bounds take from the
        #: owner holding the most first, so one owner's traffic does not push out a smaller owner's
        self.owner = owner
        #: a namespace no later request can name (one request's own): nothing of it outlives its request
        self.private = private
        self.history = HistoryPool(max_seq_len, slots=max_batch_size)
        self.suffix = SuffixPool(max_requests=max_batch_size)
        self.host: dict[tuple, HostNGramPool] = {}
        #: the live ``auto`` sequences' texts, for their ``public`` source (:meth:`DraftPools.join`); apart from
        #: ``history``, so that NGram requests draft from what upstream's pool holds and nothing else
        self.peers = HistoryPool(max_seq_len)
        self.live = 0  #: requests of this namespace holding a slot
        #: the acceptance-rate gates of its requests' settings, (window, threshold) -> gate, least recently used first
        self.gates: OrderedDict[tuple, SpeculationGate] = OrderedDict()
        self.gate_users: Counter = Counter()  #: live drafters per gate's settings (their gate is never dropped)

    def holds_history(self) -> bool:
        """Whether anything outlives its requests here (retained SA requests, a host-side public pool, a gate that
        closed: the namespace's drafting stays off). A private namespace holds nothing past its request."""
        return not self.private and (bool(self.suffix.retained) or any(pool.pool for pool in self.host.values())
                                     or any(gate.disabled for gate in self.gates.values()))


class DraftPools:
    """The NGram and SA pools of one engine batch, one :class:`DraftSpace` per namespace. ``max_batch_size``:
    sequences running at once (AUTO and the SA pool read it); ``max_seq_len``: the model's (a history never
    grows past it); ``ngram_implementation``: :data:`NGRAM_IMPLEMENTATIONS`; ``retained_tokens``: the most
    tokens of finished SA requests every namespace's global pool keeps together (the oldest go first);
    ``max_global_pool_size``: the most slots a request's SA global pool gets, whatever it asked for.

    The boundary: a request names its namespace (the prefix cache's, see
    :meth:`~trtlade.contract.protocol.CacheScope.draft_space`) and its drafter reads and writes that
    namespace's space only, so a public NGram pool, an SA global pool, its retained requests and the host-side
    pool search the requests of that namespace and of no other. Every request in :data:`GLOBAL_SPACE`: one
    space, upstream's behaviour.

        >>> pools = DraftPools(max_batch_size=2)
        >>> config = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 2, "max_matching_ngram_size": 2})
        >>> _ = pools.drafter(config, "alice-1", [5, 6, 7, 8], namespace=("identity", "alice"))
        >>> bob = pools.drafter(config, "bob-1", [1, 5, 6], namespace=("identity", "bob"))
        >>> bob._draft(2)                      # "5 6" is followed by "7 8" in alice's text only
        []
        >>> same = pools.drafter(config, "alice-2", [1, 5, 6], namespace=("identity", "alice"))
        >>> same._draft(2)
        [7, 8]
    """

    def __init__(self, max_batch_size: int = 1, max_seq_len: Optional[int] = None,
                 ngram_implementation: str = "one_model", retained_tokens: int = DEFAULT_RETAINED_TOKENS,
                 max_global_pool_size: int = DEFAULT_MAX_GLOBAL_POOL_SIZE,
                 max_num_tokens: Optional[int] = None) -> None:
        if ngram_implementation not in NGRAM_IMPLEMENTATIONS:
            raise ValueError(f"unknown NGram implementation {ngram_implementation!r}: "
                             f"choose {' or '.join(NGRAM_IMPLEMENTATIONS)}")
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        self.max_num_tokens = max_num_tokens  #: the host-side drafter's token budget (max_concurrency)
        self.ngram_implementation = ngram_implementation
        self.retained_tokens = retained_tokens
        self.max_global_pool_size = max(max_global_pool_size, max_batch_size)
        self._spaces: dict[Hashable, DraftSpace] = {}
        self._idle: OrderedDict[Hashable, None] = OrderedDict()  # spaces with no live request, oldest first
        self._retained: OrderedDict[tuple[Hashable, Hashable], int] = OrderedDict()  # (space, key) -> tokens
        self._retiring: list["HistoryDrafter"] = []
        self._step: dict[tuple, list[int]] = {}

    @property
    def gates(self) -> dict[tuple, SpeculationGate]:
        """Every namespace's gates now: (namespace, window, threshold) -> gate (they live in their
        :class:`DraftSpace` and go with it)."""
        return {(space.namespace, *key): gate for space in self._spaces.values() for key, gate in space.gates.items()}

    def gate(self, config: DraftConfig, namespace: Hashable = GLOBAL_SPACE) -> Optional[SpeculationGate]:
        """The acceptance-rate gate of ``config``'s settings in ``namespace``: the engine's own under ``global``
        (upstream has one per executor), one per namespace otherwise, so that no tenant's poor acceptance turns
        another's drafting off (None: the config sets no gate). A namespace keeps the gates its running requests
        read, those that closed, and :data:`MAX_GATES_PER_SPACE` settings' in all otherwise; they go with the
        namespace's pools.

            >>> pools = DraftPools()
            >>> config = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 2, "max_matching_ngram_size": 2,
            ...                             "acceptance_rate_window_size": 4, "acceptance_rate_threshold": 0.5})
            >>> drafter = pools.drafter(config, "r", [5, 6, 7], namespace=("identity", "alice"))
            >>> pools.gate(config, ("identity", "alice")) is pools.gate(config, ("identity", "alice")), len(pools.gates)
            (True, 1)
            >>> drafter.release(); pools.spaces, pools.gates      # an open gate goes with its idle namespace
            (0, {})
        """
        if not config.acceptance_rate_window_size or config.acceptance_rate_threshold is None:
            return None
        key = _gate_key(config)
        space = self._spaces.get(namespace)
        if space is None:  # no request of it holds pools: nothing to gate, nothing kept
            return SpeculationGate(*key)
        gates = space.gates
        gate = gates.get(key)
        if gate is None:
            gate = gates[key] = SpeculationGate(*key)
            spare = [k for k, g in gates.items() if not space.gate_users[k] and not g.disabled and k != key]
            for k in spare[:max(0, len(gates) - MAX_GATES_PER_SPACE)]:  # the least recently used open gates no one
                del gates[k]  # uses; a closed gate or one a running request reads stays
        gates.move_to_end(key)
        return gate

    def count(self, config: DraftConfig, accepted: int, drafted: int, namespace: Hashable = GLOBAL_SPACE) -> None:
        """One request's verified drafts this iteration, toward its gate's sample."""
        if self.gate(config, namespace) is not None and drafted > 0:
            totals = self._step.setdefault((namespace, *_gate_key(config)), [0, 0])
            totals[0] += accepted
            totals[1] += drafted

    def end_step(self) -> None:
        """The iteration's samples into their gates (the executor's ``_update_batch_acceptance_rate``): a gate
        that closes turns drafting off for every request with its settings in its namespace from the next
        iteration on."""
        for (namespace, *key), (accepted, drafted) in self._step.items():
            space = self._spaces.get(namespace)
            gate = space.gates.get(tuple(key)) if space is not None else None
            if gate is not None:  # its namespace and gate still held (a finished request's went with its space)
                gate.record(accepted, drafted)
        self._step.clear()

    @property
    def spaces(self) -> int:
        """Namespaces holding pools now."""
        return len(self._spaces)

    @property
    def retained(self) -> int:
        """Tokens of finished SA requests kept searchable, every namespace together."""
        return sum(self._retained.values())

    def space(self, namespace: Hashable = GLOBAL_SPACE, *, private: bool = False, owner: Hashable = None) -> DraftSpace:
        """The pools of ``namespace``, taken up by a request (made on first use; ``private``: a namespace no later
        request can name, whose pools go with its request; ``owner``: who it is charged to, its maker)."""
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = DraftSpace(namespace, self.max_batch_size, self.max_seq_len, private,
                                                         owner)
        self._idle.pop(namespace, None)
        return space

    def drafter(self, config: DraftConfig, key: Hashable, prompt: Sequence[int], *,
                eos_token_ids: Iterable[int] = (), max_sequence_length: Optional[int] = None,
                namespace: Hashable = GLOBAL_SPACE, private: bool = False, owner: Hashable = None) -> "HistoryDrafter":
        """A new request's drafter in ``namespace``'s pools, its history seeded with ``prompt`` (upstream seeds
        it when the request's first context chunk is scheduled, so other requests' public search sees it from
        then on). ``private``: the namespace is the request's own (its scope shares nothing): no finished
        request's text is retained there, and its pools are dropped when it ends."""
        space = self.space(namespace, private=private, owner=owner)
        drafter = HistoryDrafter(config, self, key, eos_token_ids=eos_token_ids,
                                 max_sequence_length=max_sequence_length, space=space)
        drafter.begin(prompt)
        space.live += 1
        space.gate_users[_gate_key(config)] += 1
        return drafter

    def join(self, key: Hashable, tokens: Sequence[int], namespace: Hashable = GLOBAL_SPACE,
             private: bool = False, owner: Hashable = None) -> DraftSpace:
        """An ``auto`` sequence's text (prompt, then what it emits: ``space.peers.extend``) enters ``namespace``'s
        peer pool, where the other live ``auto`` sequences of that namespace, and of no other, find it; until
        :meth:`leave`.

            >>> pools = DraftPools()
            >>> alice = pools.join(1, [4, 5, 6, 7, 8], namespace=("identity", "alice"))
            >>> bob = pools.join(2, [9, 5, 6], namespace=("identity", "bob"))
            >>> again = pools.join(3, [9, 5, 6], namespace=("identity", "alice"))
            >>> bob.peers.peer_draft(2, 2), again.peers.peer_draft(3, 2)
            ([], [7, 8])
            >>> pools.leave(alice, 1); again.peers.peer_draft(3, 2)      # a finished sequence is not searched
            []
        """
        space = self.space(namespace, private=private, owner=owner)
        space.peers.add(key, tokens)
        space.live += 1
        return space

    def leave(self, space: DraftSpace, key: Hashable) -> None:
        """A finished ``auto`` sequence: its text leaves the peer pool (nothing of it is kept)."""
        if key in space.peers:
            space.peers.remove(key)
            space.live -= 1
            self._settle(space)

    def host_pool(self, config: DraftConfig, space: Optional[DraftSpace] = None) -> HostNGramPool:
        """The host-side pool of ``config``'s settings in ``space`` (requests with the same settings share it)."""
        host = (space or self.space()).host
        key = host_pool_key(config)
        pool = host.get(key)
        if pool is None:
            pool = host[key] = HostNGramPool(
                max_draft_len=config.max_draft_len, max_matching_ngram_size=config.max_matching_ngram_size,
                is_keep_all=config.is_keep_all, is_use_oldest=config.is_use_oldest,
                is_public_pool=config.is_public_pool)
        return pool

    def retire(self, drafter: "HistoryDrafter") -> None:
        """A finished request: its history stays searchable until :meth:`flush` (upstream drafts a step's
        requests, the finishing ones included, before it frees their slots)."""
        self._retiring.append(drafter)

    def flush(self) -> None:
        """Free the retired requests' slots (call after the next step's drafts were prepared)."""
        retiring, self._retiring = self._retiring, []
        for drafter in retiring:
            drafter.release()

    def released(self, drafter: "HistoryDrafter") -> None:
        """Book-keeping once a drafter freed its slot: the retained-token budget, then idle spaces."""
        space = drafter.space
        space.live -= 1
        space.gate_users[_gate_key(drafter.config)] -= 1
        if space.suffix.is_retained(drafter.key):
            self._retained[(space.namespace, drafter.key)] = len(drafter._tokens)
        host = drafter.host
        if host is not None and host.is_public_pool and not space.private:  # what the pool keeps, one unit a pattern
            charged = (space.namespace, host_pool_key(drafter.config))
            self._retained[charged] = len(host.pool)
            self._retained.move_to_end(charged)
        self._evict_retained()
        self._settle(space)

    def clear_finished(self) -> int:
        """Forget what finished requests left behind: retained SA requests, the host-side public pools' patterns, the
        gates no live request uses, the idle namespaces; returns how many retained requests and pools were emptied.
        ``trtlade bench`` clears it with the prefix cache before each series: it sends the same prompts again at
        every level and repeat, and a global pool would otherwise draft each answer from its own earlier copy.

            >>> pools = DraftPools(max_batch_size=2)
            >>> sa = DraftConfig.parse({"decoding_type": "SA", "max_draft_len": 2, "enable_global_pool": True,
            ...                         "global_pool_size": 64}, max_batch_size=2)
            >>> first = pools.drafter(sa, "r1", [5, 6, 7, 8])
            >>> first.observe([1]); first.release()                       # finished: its 5 tokens retained
            >>> pools.retained, pools.drafter(sa, "r2", [9, 5, 6])._draft(2)   # a later request drafts r1's text
            (5, [7, 8])
            >>> pools.clear_finished(), pools.retained, pools.drafter(sa, "r3", [9, 5, 6])._draft(2)
            (1, 0, [])
        """
        emptied = len(self._retained)
        for namespace, key in list(self._retained):
            space = self._spaces.get(namespace)
            if space is not None:
                _forget(space, key)
        self._retained.clear()
        for space in list(self._spaces.values()):
            for settings in [k for k in space.gates if not space.gate_users[k]]:
                del space.gates[settings]
            self._settle(space)
        return emptied

    def _holds(self, namespace: Hashable, key: Hashable) -> bool:
        """Whether ``namespace`` still holds what ``key`` charged: a retained SA request, or a host-side pool."""
        space = self._spaces.get(namespace)
        if space is None:
            return False
        return key in space.host if _is_host_key(key) else space.suffix.is_retained(key)

    def _evict_retained(self) -> None:
        for charged in [k for k in self._retained if not self._holds(*k)]:
            del self._retained[charged]  # evicted by its own pool's global_pool_size meanwhile
        while self._retained and sum(self._retained.values()) > self.retained_tokens:
            oversized = next((k for k, n in self._retained.items() if _is_host_key(k[1]) and n > self.retained_tokens),
                             None)
            namespace, key = oversized or self._oldest_of_largest(self._retained, lambda e: e[0],
                                                                  lambda e: self._retained[e])
            del self._retained[(namespace, key)]
            space = self._spaces.get(namespace)
            if space is not None:
                _forget(space, key)
                self._settle(space)

    def _settle(self, space: DraftSpace) -> None:
        """An idle space is dropped when nothing outlives its requests, else kept among the idle ones (the
        least recently used dropped past :data:`MAX_IDLE_SPACES`); the global space is kept."""
        if space.live or space.namespace == GLOBAL_SPACE or self._spaces.get(space.namespace) is not space:
            return
        if not space.holds_history():
            self._drop(space.namespace)
            return
        self._idle[space.namespace] = None
        self._idle.move_to_end(space.namespace)
        while len(self._idle) > MAX_IDLE_SPACES:
            self._drop(self._oldest_of_largest(self._idle, lambda ns: ns, lambda ns: 1))

    def _owner(self, namespace: Hashable) -> Hashable:
        space = self._spaces.get(namespace)
        return space.owner if space is not None else None

    def _oldest_of_largest(self, entries: Iterable[Hashable], namespace_of: Callable[[Hashable], Hashable],
                           size_of: Callable[[Hashable], int]) -> Hashable:
        """The oldest of ``entries`` (oldest first) whose namespace's owner holds the most (``size_of`` each; one
        owner: the oldest): the bounds every namespace shares take from the owner holding the most."""
        entries = list(entries)
        held: Counter = Counter()
        for entry in entries:
            held[self._owner(namespace_of(entry))] += size_of(entry)
        if len(held) <= 1:
            return entries[0]
        largest = max(held, key=lambda o: held[o])
        return next(entry for entry in entries if self._owner(namespace_of(entry)) == largest)

    def _drop(self, namespace: Hashable) -> None:
        self._idle.pop(namespace, None)
        self._spaces.pop(namespace, None)
        for held in [k for k in self._retained if k[0] == namespace]:
            del self._retained[held]


def _forget(space: DraftSpace, key: Hashable) -> None:
    """Drop what ``key`` charged in ``space``: a host-side pool's patterns (emptied where it is: its running requests
    keep sharing it), or a retained SA request."""
    if _is_host_key(key):
        if key in space.host:
            space.host[key].pool.clear()
    else:
        space.suffix.forget(key)


def host_pool_key(config: DraftConfig) -> tuple:
    """The settings a host-side pool is shared by (requests with equal ones share it), tagged as a pool's key."""
    return ("host", config.max_draft_len, config.max_matching_ngram_size, config.is_keep_all, config.is_use_oldest,
            config.is_public_pool)


def _gate_key(config: DraftConfig) -> tuple:
    """The settings a namespace's acceptance-rate gate is kept by."""
    return (config.acceptance_rate_window_size, config.acceptance_rate_threshold)


def _is_host_key(key: Hashable) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == "host"


class HistoryDrafter:
    """One request's NGram or SA drafting (see the module docstring). ``max_sequence_length``: prompt length
    + max_tokens (the host pool's draft budget)."""

    def __init__(self, config: DraftConfig, pools: DraftPools, key: Hashable, *, eos_token_ids: Iterable[int] = (),
                 max_sequence_length: Optional[int] = None, space: Optional[DraftSpace] = None) -> None:
        self.config = config
        self.pools = pools
        #: the pools of the request's namespace: the only ones it drafts from and writes to
        self.space = space if space is not None else pools.space()
        self.key = key
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.max_sequence_length = max_sequence_length
        self.host = (pools.host_pool(config, self.space) if config.decoding_type == "NGram"
                     and pools.ngram_implementation == "host_pool" else None)
        self.tally = DraftTally()
        self._tokens: list[int] = []  # the host pool's prefix: prompt + emitted tokens
        self._batch: Optional[DraftBatch] = None
        self._verification: Optional[Verification] = None
        self._released = False

    # ------------------------------------------------------------------------- history
    def begin(self, prompt: Sequence[int]) -> None:
        tokens = [int(t) for t in prompt]
        self._tokens = tokens
        config, space = self.config, self.space
        if self.host is not None:
            return
        if config.decoding_type == "SA":
            if config.enable_global_pool:  # never more than the server allows, whatever the request asked
                space.suffix.reserve(min(config.pool_size(self.pools.max_batch_size), self.pools.max_global_pool_size))
            space.suffix.add(self.key, tokens)
        else:
            space.history.add(self.key, tokens)

    def observe(self, tokens: Sequence[int]) -> None:
        """Tokens the sequence emitted (the step's accepted run, cut at a stop): the history grows."""
        if not tokens or self._released:
            return
        tokens = [int(t) for t in tokens]
        self._tokens.extend(tokens)
        if self.host is not None:
            return
        if self.config.decoding_type == "SA":
            self.space.suffix.extend(self.key, tokens)
        else:
            self.space.history.extend(self.key, tokens)

    def release(self) -> None:
        """Free the request's slot (a retained SA request stays searchable by the global pool)."""
        if self._released:
            return
        self._released = True
        if self.host is not None:
            self.host.remove(self.key)
        elif self.config.decoding_type == "SA":  # no later request can search a private namespace
            self.space.suffix.remove(self.key, retain=self.config.enable_global_pool and not self.space.private)
        else:
            self.space.history.remove(self.key)
        self.pools.released(self)

    # ------------------------------------------------------------------------- a step
    def draft_len(self, batch_size: int = 1) -> int:
        """Draft tokens this step: the config's for ``batch_size`` sequences, 0 once the engine's gate closed."""
        gate = self.pools.gate(self.config, self.space.namespace)
        if gate is not None and gate.disabled:
            self.tally.disabled = True
        if self.tally.disabled:
            return 0
        if self.host is not None:  # the 1.0 to 1.2 drafter's own schedule and max_concurrency rules
            return self.config.host_draft_len_for(batch_size, max_batch_size=self.pools.max_batch_size,
                                                  max_num_tokens=self.pools.max_num_tokens)
        return self.config.draft_len_for(batch_size)

    def prepare(self, batch_size: int = 1) -> DraftBatch:
        """The rows of the next forward: the golden token (the last emitted), then the draft chain."""
        if not self._tokens:
            raise RuntimeError("prepare() before any token: seed the drafter and observe the first token")
        chain = self._draft(self.draft_len(batch_size))
        for i, token in enumerate(chain):
            if token in self.eos_token_ids:
                chain = chain[:i]
                break
        tokens = [self._tokens[-1], *chain]
        positions = list(range(len(tokens)))
        parents = [NO_PARENT, *range(len(chain))]
        logit_rows = select_logit_rows(tokens, positions, parents, len(chain), self.eos_token_ids)
        self._batch = DraftBatch(tokens=tokens, positions=positions, parents=parents, logit_rows=logit_rows,
                                 num_candidate_rows=len(chain), num_candidates=1 if chain else 0,
                                 encode_map=tuple(positions), with_window=False)
        return self._batch

    def _draft(self, draft_len: int) -> list[int]:
        if draft_len <= 0:
            return []
        config, space = self.config, self.space
        if self.host is not None:
            self.host.max_draft_len = draft_len  # upstream's update_max_total_draft_tokens
            budget = self.max_sequence_length if self.max_sequence_length is not None else 1 << 30
            return self.host.draft(self._tokens, self.key, budget)
        if config.decoding_type == "SA":
            return space.suffix.draft(self.key, draft_len, max_ngram=config.max_matching_ngram_size,
                                      search_all=config.enable_global_pool, pad=False)[0]
        return space.history.draft(self.key, draft_len, max_ngram=config.max_matching_ngram_size,
                                   use_oldest=config.is_use_oldest, public=config.is_public_pool, pad=False)[0]

    def verify(self, argmax: Sequence[int], targets: Optional[Sequence[int]] = None) -> Verification:
        """Accept the longest matching prefix of the chain (``targets``: a sampled request's keyed draws)."""
        batch = self._batch
        if batch is None:
            raise RuntimeError("verify() before prepare()")
        chosen = [int(t) for t in (argmax if targets is None else targets)]
        if len(chosen) != batch.num_rows:
            raise ValueError(f"expected one entry per row ({batch.num_rows}), got {len(chosen)}")
        self._verification = verify_tree(batch.tokens, batch.positions, batch.parents, chosen,
                                         batch.num_rows - 1, self.eos_token_ids)
        return self._verification

    def commit(self, num_tokens: Optional[int] = None) -> None:
        """Count the step (the history grows by :meth:`observe`, with what the output kept)."""
        batch, verification = self._batch, self._verification
        if batch is None or verification is None:
            raise RuntimeError("commit() before verify()")
        count = len(verification.tokens) if num_tokens is None else int(num_tokens)
        drafted = batch.num_rows - 1
        tally = self.tally
        if drafted:
            tally.drafted_steps += 1
            tally.draft_tokens += drafted
            tally.accepted += count - 1
            self.pools.count(self.config, count - 1, drafted, self.space.namespace)
        else:
            tally.empty_steps += 1
        self._batch = self._verification = None

    def advance(self, token: int) -> None:
        """A step that ran the golden row only (drafts dropped for ``max_num_tokens``): nothing to count."""
        del token
        self._batch = self._verification = None


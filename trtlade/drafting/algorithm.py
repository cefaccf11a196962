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
one engine batch's set of them, so a public or global pool searches that batch's requests of the same
drafter.

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

from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

from trtlade.drafting.config import DraftConfig
from trtlade.drafting.gate import SpeculationGate
from trtlade.drafting.history import HistoryPool
from trtlade.drafting.host_pool import HostNGramPool
from trtlade.drafting.suffix import SuffixPool
from trtlade.lookahead.algorithm import NO_PARENT, DraftBatch, Verification, select_logit_rows, verify_tree

__all__ = ["DraftPools", "HistoryDrafter", "NGRAM_IMPLEMENTATIONS", "DraftTally"]

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


class DraftPools:
    """The NGram and SA pools of one engine batch. ``max_batch_size``: sequences running at once (AUTO and
    the SA pool read it); ``max_seq_len``: the model's (a history never grows past it);
    ``ngram_implementation``: :data:`NGRAM_IMPLEMENTATIONS`."""

    def __init__(self, max_batch_size: int = 1, max_seq_len: Optional[int] = None,
                 ngram_implementation: str = "one_model", max_num_tokens: Optional[int] = None) -> None:
        if ngram_implementation not in NGRAM_IMPLEMENTATIONS:
            raise ValueError(f"unknown NGram implementation {ngram_implementation!r}: "
                             f"choose {' or '.join(NGRAM_IMPLEMENTATIONS)}")
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens  #: the host-side drafter's token budget (max_concurrency)
        self.ngram_implementation = ngram_implementation
        self.history = HistoryPool(max_seq_len, slots=max_batch_size)
        self.suffix = SuffixPool(max_requests=max_batch_size)
        self.host: dict[tuple, HostNGramPool] = {}
        self._retiring: list["HistoryDrafter"] = []
        self.gates: dict[tuple, SpeculationGate] = {}  #: one per (window, threshold): the engine's gate
        self._step: dict[tuple, list[int]] = {}

    def gate(self, config: DraftConfig) -> Optional[SpeculationGate]:
        """The engine-wide acceptance-rate gate of ``config``'s settings (None: it sets none)."""
        if not config.acceptance_rate_window_size or config.acceptance_rate_threshold is None:
            return None
        key = (config.acceptance_rate_window_size, config.acceptance_rate_threshold)
        if key not in self.gates:
            self.gates[key] = SpeculationGate(*key)
        return self.gates[key]

    def count(self, config: DraftConfig, accepted: int, drafted: int) -> None:
        """One request's verified drafts this iteration, toward its gate's sample."""
        gate = self.gate(config)
        if gate is not None and drafted > 0:
            totals = self._step.setdefault((gate.window, gate.threshold), [0, 0])
            totals[0] += accepted
            totals[1] += drafted

    def end_step(self) -> None:
        """The iteration's samples into their gates (the executor's ``_update_batch_acceptance_rate``): a gate
        that closes turns drafting off for every request with its settings from the next iteration on."""
        for key, (accepted, drafted) in self._step.items():
            self.gates[key].record(accepted, drafted)
        self._step.clear()

    def drafter(self, config: DraftConfig, key: Hashable, prompt: Sequence[int], *,
                eos_token_ids: Iterable[int] = (), max_sequence_length: Optional[int] = None) -> "HistoryDrafter":
        """A new request's drafter, its history seeded with ``prompt`` (upstream seeds it when the request's
        first context chunk is scheduled, so other requests' public search sees it from then on)."""
        drafter = HistoryDrafter(config, self, key, eos_token_ids=eos_token_ids,
                                 max_sequence_length=max_sequence_length)
        drafter.begin(prompt)
        return drafter

    def host_pool(self, config: DraftConfig) -> HostNGramPool:
        """The host-side pool of ``config``'s settings (requests with the same settings share it)."""
        key = (config.max_draft_len, config.max_matching_ngram_size, config.is_keep_all, config.is_use_oldest,
               config.is_public_pool)
        pool = self.host.get(key)
        if pool is None:
            pool = self.host[key] = HostNGramPool(
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


class HistoryDrafter:
    """One request's NGram or SA drafting (see the module docstring). ``max_sequence_length``: prompt length
    + max_tokens (the host pool's draft budget)."""

    def __init__(self, config: DraftConfig, pools: DraftPools, key: Hashable, *, eos_token_ids: Iterable[int] = (),
                 max_sequence_length: Optional[int] = None) -> None:
        self.config = config
        self.pools = pools
        self.key = key
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.max_sequence_length = max_sequence_length
        self.host = (pools.host_pool(config) if config.decoding_type == "NGram"
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
        config, pools = self.config, self.pools
        if self.host is not None:
            return
        if config.decoding_type == "SA":
            if config.enable_global_pool:
                pools.suffix.reserve(config.pool_size(pools.max_batch_size))
            pools.suffix.add(self.key, tokens)
        else:
            pools.history.add(self.key, tokens)

    def observe(self, tokens: Sequence[int]) -> None:
        """Tokens the sequence emitted (the step's accepted run, cut at a stop): the history grows."""
        if not tokens or self._released:
            return
        tokens = [int(t) for t in tokens]
        self._tokens.extend(tokens)
        if self.host is not None:
            return
        if self.config.decoding_type == "SA":
            self.pools.suffix.extend(self.key, tokens)
        else:
            self.pools.history.extend(self.key, tokens)

    def release(self) -> None:
        """Free the request's slot (a retained SA request stays searchable by the global pool)."""
        if self._released:
            return
        self._released = True
        if self.host is not None:
            self.host.remove(self.key)
        elif self.config.decoding_type == "SA":
            self.pools.suffix.remove(self.key, retain=self.config.enable_global_pool)
        else:
            self.pools.history.remove(self.key)

    # ------------------------------------------------------------------------- a step
    def draft_len(self, batch_size: int = 1) -> int:
        """Draft tokens this step: the config's for ``batch_size`` sequences, 0 once the engine's gate closed."""
        gate = self.pools.gate(self.config)
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
        config, pools = self.config, self.pools
        if self.host is not None:
            self.host.max_draft_len = draft_len  # upstream's update_max_total_draft_tokens
            budget = self.max_sequence_length if self.max_sequence_length is not None else 1 << 30
            return self.host.draft(self._tokens, self.key, budget)
        if config.decoding_type == "SA":
            return pools.suffix.draft(self.key, draft_len, max_ngram=config.max_matching_ngram_size,
                                      search_all=config.enable_global_pool, pad=False)[0]
        return pools.history.draft(self.key, draft_len, max_ngram=config.max_matching_ngram_size,
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
            self.pools.count(self.config, count - 1, drafted)
        else:
            tally.empty_steps += 1
        self._batch = self._verification = None

    def advance(self, token: int) -> None:
        """A step that ran the golden row only (drafts dropped for ``max_num_tokens``): nothing to count."""
        del token
        self._batch = self._verification = None


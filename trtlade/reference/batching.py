"""In-flight batching for the reference engine: many sequences, each with its own (w,n,g), one forward
pass per step.

A :class:`Batch` holds waiting and running sequences. Each :meth:`Batch.step`:

1. admits waiting requests, first come first served, while fewer than ``max_batch_size`` hold a slot,
   with their cached prefix (:mod:`~trtlade.reference.prefix_cache`). With nothing decoding (or
   without ``limits.prefill_chunk``) it prefills them now (with nothing decoding and ``limits.idle_chunk``, a
   longer prompt by one chunk of that many rows a step: :meth:`Batch._prefill_idle`), shortest first, in forwards
   of at least :data:`~trtlade.reference.scheduler.PREFILL_GROUP_ROWS` rows (a causal block each: short prompts
   share one forward, which reads the weights once; at most ``max_num_tokens`` prompt tokens per step
   beyond the first prompt, a longer first prompt alone in chunks of ``max_num_tokens`` rows), each
   first token handed over
   (``on_chunk``) as soon as its forward ends, before the step's decode pass. With sequences decoding and
   ``limits.prefill_chunk``, their prompts instead advance by chunks inside step 3's forward pass, as
   many rows as the :class:`~trtlade.reference.scheduler.PrefillPacer` allows (the decoders' steps
   stretched at most ``prefill_stall`` times on average; the prompts a step can finish first, shortest
   first, :meth:`~trtlade.reference.scheduler.PrefillPacer.take`); the chunk that ends a prompt hands over
   its first token after that pass. Except, with identities (API keys), the prompt of one holding fewer
   running sequences than another, if it fits a chunk: it is prefilled on its own before the pass
   (:meth:`Batch._behind`), so its first token does not wait for another identity's decoding;
2. decides who drafts: a ``fixed`` request verifies its drafts every step; a ``schedule`` request while
   the schedule's band for the requests in flight now is not (1,1,0); the ``auto`` requests as the
   engine's :class:`~trtlade.reference.adaptive.AutoPolicy` chooses for the whole batch (the most
   expected tokens per second under the measured cost of a row); the others run their golden row;
3. runs ONE forward pass over the sequences that were running before this step (and step 1's prompt
   chunks, if any): every one contributes its
   golden row, plus its window and candidate rows for its own (w,n,g) if it drafts this step, or one
   row for (1,1,0) (:class:`~trtlade.reference.batch_runner.RowBlock`); drafts that
   do not fit ``max_num_tokens`` are dropped, oldest requests keep theirs
   (:mod:`trtlade.reference.scheduler`);
4. verifies each sequence's rows on its own, emits 1..N tokens per sequence and keeps only the K/V
   of what it accepted; finished, stopped and cancelled sequences leave at once and free their slot.

Every emitted token is the argmax of logits computed over the sequence's own exact prefix -- or, for a
sampled request, the draw keyed by (seed, position) from them (:mod:`trtlade.reference.sampling`) -- so
what a request gets does not depend on what shares its steps or on its drafts: lossless alone and in
a batch, greedy or sampled.

Worked example (``max_batch_size=2``; requests A (2,3,2), B (1,1,0), C arrive together)::

    batch.add(A); batch.add(B); batch.add(C)
    batch.step()  -> prefill A and B in one forward: [(A, first token), (B, first token)]   C waits
    batch.step()  -> one forward of A's ~6 rows + B's 1 row: [(A, 1..3 tokens), (B, 1 token)]
    ... B ends (EOS)  -> its slot is free; the next step prefills C, then runs A's rows
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Protocol, Sequence

import torch

from trtlade.reference.adaptive import Acceptance, AutoPolicy
from trtlade.reference.batch_runner import BatchRunner, RowBlock
from trtlade.reference.native.argmax import argmax_rows
from trtlade.reference.native.bindings import traced
from trtlade.reference.prefix_cache import common_prefix
from trtlade.contract.protocol import GenerationRequest, GenerationStats, StepChunk, TokenLogprob
from trtlade.reference.sampling import KeyedSampler, random_seed
from trtlade.reference.scheduler import (PREFILL_GROUP_ROWS, BatchLimits, PrefillPacer, StepReport, idle_rows,
                                         prefill_groups)
from trtlade.contract.text import OutputText
from trtlade.drafting.algorithm import (DEFAULT_MAX_GLOBAL_POOL_SIZE, DEFAULT_RETAINED_TOKENS, GLOBAL_SPACE,
                                       NGRAM_IMPLEMENTATIONS, DraftPools, DraftSpace, HistoryDrafter)
from trtlade.errors import TrtladeError
from trtlade.lookahead.algorithm import ALONE_SOURCES, DraftBatch, LookaheadAlgorithm
from trtlade.spec import LookaheadSpec

__all__ = ["Batch", "BatchEngine", "ChunkCallbackError", "DraftSettings", "SequenceState", "ALGORITHM_LABEL",
           "TEXT_LABEL", "DRAFT_OPTIONS", "SOURCE_OPTIONS"]

#: What the auto policy may give a sequence beyond its golden row: one drafter's chain alone (SA's longest
#: earlier suffix, prompt lookup's latest match, the n-gram pool's guesses, another sequence's text in its
#: namespace: NGram/SA-priced rows), the first token of each candidate, every candidate whole (but ``public``),
#: these without the Jacobi window's rows, or all its rows.
DRAFT_OPTIONS = ("suffix", "prompt_lookup", "pool", "public", "first", "candidates", "full")
#: the sources whose chains the plan may also verify cut short, at every depth below their length (a plan's options
#: beyond DRAFT_OPTIONS, :meth:`SequenceState.draft_options`): where the cost by rows has a knee, a chain of 3 drafts
#: in 4 rows can pay where one of 4 in 5 rows does not
CUT_SOURCES = ("suffix", "prompt_lookup", "pool")
#: the candidate sources among the options (one drafter's candidates each, ``LookaheadAlgorithm.sources``)
SOURCE_OPTIONS = ("suffix", "prompt_lookup", "pool", "public")
#: option -> (the window's rows, candidate depth, candidate source) for LookaheadAlgorithm.prepare
_OPTION_ROWS = {"suffix": (False, None, "suffix"), "prompt_lookup": (False, None, "prompt_lookup"),
                "pool": (False, None, "pool"), "public": (False, None, "public"), "first": (False, 1, None),
                "candidates": (False, None, None), "full": (True, None, None)}
#: option -> the options whose rows it holds (never ``public``, verified alone): it accepts at least what they do
#: (``full`` as the plan credits it, up to N-1: beside the window the history chains are cut to N-1, so a chain
#: accepted whole gives one token less there with (2,4,2); crediting only what its paths verify whole measured no gain)
_HOLDS = {"candidates": ("suffix", "prompt_lookup", "pool", "first"),
          "full": ("suffix", "prompt_lookup", "pool", "first", "candidates")}
#: an option's index in DRAFT_OPTIONS, as the plan reads them
_OPTION_INDEX = {option: k for k, option in enumerate(DRAFT_OPTIONS)}
_FIRST = _OPTION_INDEX["first"]
#: _HOLDS as indices
_WITHIN = {option: tuple(_OPTION_INDEX[held] for held in _HOLDS.get(option, ())) for option in DRAFT_OPTIONS}


def held_now(cands: list[tuple[tuple[int, ...], str]]) -> dict[str, tuple[int, ...]]:
    """Which source options hold another option's rows this step (beyond :data:`_HOLDS`): a source whose
    candidates start with every candidate of another source, or with every first token of ``first``,
    accepts at least what that option accepts this step, whatever the two accept on average.

    The pool guesses ``5 6`` and prompt lookup ``5 6 7 8``: both hold the one first token (``first``: ``5``),
    prompt lookup's chain the pool's guess too; once SA proposes ``9 4``, ``first`` is ``5`` and ``9`` and
    only the pool's guess is still held.

    >>> held_now([((5, 6), "pool"), ((5, 6, 7, 8), "prompt_lookup")])
    {'pool': (4,), 'prompt_lookup': (2, 4)}
    >>> held_now([((5, 6), "pool"), ((5, 6, 7, 8), "prompt_lookup"), ((9, 4), "suffix")])
    {'prompt_lookup': (2,)}
    """
    by_source: dict[str, list[tuple[int, ...]]] = {}
    for cand, source in cands:
        by_source.setdefault(source, []).append(cand)
    firsts = {cand[0] for cand, source in cands if source not in ALONE_SOURCES}
    out: dict[str, tuple[int, ...]] = {}
    for source, mine in by_source.items():
        held = tuple(_OPTION_INDEX[other] for other, theirs in by_source.items()
                     if other != source and all(any(m[:len(t)] == t for m in mine) for t in theirs))
        if firsts and firsts <= {m[0] for m in mine}:
            held += (_FIRST,)
        if held:
            out[source] = held
    return out


def _capped(cands: list[tuple[tuple[int, ...], str]], cap: Optional[int]) -> list[tuple[tuple[int, ...], str]]:
    """Each source's candidates cut to ``cap`` tokens within that source, as ``LookaheadAlgorithm.prepare(source=)``
    cuts them (None: as they are; 0 or less: none): a source whose cut chain equals another's keeps it.

    >>> _capped([((8, 9), "pool"), ((8, 9, 5), "prompt_lookup"), ((8, 9, 7), "prompt_lookup")], 2)
    [((8, 9), 'pool'), ((8, 9), 'prompt_lookup')]
    """
    if cap is None:
        return list(cands)
    return list(dict.fromkeys((cand[:cap], source) for cand, source in cands)) if cap > 0 else []


#: torch.profiler labels of the engine's own Python work per step (engine-bench's profile reads them)
ALGORITHM_LABEL = "trtlade.algorithm"  # prepare, verify, commit, the auto policy
TEXT_LABEL = "trtlade.text"  # detokenization and stops


@dataclass(frozen=True)
class DraftSettings:
    """How sequences build and run their drafts. An engine holds one (``engine.settings``); a batch
    may be given its own (engine-bench runs each mode so) and never changes the engine's.

    ``adaptive``: a request that names no spec runs the ``auto`` policy. ``prompt_lookup``: draft
    tokens of the history candidates: prompt lookup's (the latest earlier occurrence of the last tokens) and
    the longest earlier suffix's (what TensorRT-LLM's SA drafter proposes); 0: TensorRT-LLM's algorithm exactly.
    ``public_lookup``: with ``prompt_lookup``, an ``auto`` sequence also searches the other running ``auto``
    sequences of its namespace (the ``public`` option: NGram's public pool); False: its own text only.
    ``corrected_keying`` / ``full_guess_set``: the algorithm's departures from TensorRT-LLM
    (:class:`~trtlade.lookahead.algorithm.LookaheadAlgorithm`). ``seed``: the Jacobi window's
    initial guesses (never a sampled request's draws). ``ngram_implementation``: how NGram requests draft
    (:data:`~trtlade.drafting.algorithm.NGRAM_IMPLEMENTATIONS`: TensorRT-LLM's one-model drafter, or the
    host-side pool of its 1.0-1.2 releases).

    >>> dataclasses.replace(DraftSettings(), prompt_lookup=3).prompt_lookup
    3
    """

    adaptive: bool = True
    prompt_lookup: int = 0
    public_lookup: bool = True
    corrected_keying: bool = False
    full_guess_set: bool = False
    seed: int = 0
    ngram_implementation: str = "one_model"
    #: the server's bounds on the SA global pools (``serve.draft_retained_tokens``, ``serve.max_global_pool_size``)
    draft_retained_tokens: int = DEFAULT_RETAINED_TOKENS
    max_global_pool_size: int = DEFAULT_MAX_GLOBAL_POOL_SIZE

    def __post_init__(self) -> None:
        """Settings every request would fail on are refused where they are made (at load, or here), not request by
        request."""
        for name, least in (("prompt_lookup", 0), ("draft_retained_tokens", 0), ("max_global_pool_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise SettingsError(f"{name} must be a whole number >= {least}, got {value!r}", where=name)
        if self.ngram_implementation not in NGRAM_IMPLEMENTATIONS:
            raise SettingsError(f"ngram_implementation {self.ngram_implementation!r} is not one of "
                                f"{', '.join(NGRAM_IMPLEMENTATIONS)}", where="ngram_implementation")


class SettingsError(TrtladeError, ValueError):
    """Draft settings no request could run with (``where``: the setting)."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message, "see DraftSettings (docs/guides/reference-engine.md)", where=where)


class ChunkCallbackError(TrtladeError, RuntimeError):
    """``on_chunk`` raised during :meth:`Batch.step`: the step ended all the same; ``chunks`` are the
    ``(seq_id, chunk)`` pairs it emitted (the tokens are committed: they are not emitted again), the
    first failure is the ``__cause__``, ``failures`` counts them.

    >>> err = ChunkCallbackError([(0, "A's chunk"), (1, "B's chunk")], 1)
    >>> err.chunks[1], err.failures
    ((1, "B's chunk"), 1)
    >>> print(err)
    on_chunk raised for 1 of this step's 2 chunk(s); the step ended and its chunks are in .chunks
    hint: the callback's own exception is this one's __cause__
    """

    def __init__(self, chunks: list[tuple[int, StepChunk]], failures: int) -> None:
        super().__init__(f"on_chunk raised for {failures} of this step's {len(chunks)} chunk(s); the step ended "
                         "and its chunks are in .chunks", "the callback's own exception is this one's __cause__")
        self.chunks = chunks
        self.failures = failures


class BatchEngine(Protocol):
    """What a :class:`Batch` needs from its engine (:class:`~trtlade.reference.engine.ReferenceEngine`
    has it): the request check, the forward pass, the auto policy, the text rules' inputs."""

    spec: LookaheadSpec
    tokenizer: Any
    eos_token_ids: tuple[int, ...]
    runner: BatchRunner
    policy: AutoPolicy
    max_seq_len: int
    #: rows one sequence's step may compute (Lookahead's widest spec, or the longest NGram/SA draft + 1)
    decoding_tokens: int

    def validate(self, request: GenerationRequest) -> LookaheadSpec: ...


class SequenceState:
    """One request's decoding state: output, text, stops, sampler, lookahead algorithm, slot.

    The batch asks it for its rows (:meth:`block`), hands back their logits (:meth:`consume`) and
    learns which rows' K/V to keep. ``engine`` supplies the tokenizer, the EOS ids and the auto
    policy; ``settings`` how the drafts are built.
    """

    def __init__(self, engine: BatchEngine, request: GenerationRequest, spec: LookaheadSpec, seq_id: int,
                 settings: DraftSettings = DraftSettings()) -> None:
        self.engine = engine
        self.settings = settings
        self.request = request
        self.spec = spec
        self.seq_id = seq_id
        self.prompt = list(request.prompt_ids)
        #: whose cached prompt blocks it may reuse and share (None: the global namespace)
        self.scope = request.cache_scope
        #: the API key's name (None: no keys): admission's fair share is per identity
        self.identity = request.cache_scope.identity if request.cache_scope is not None else None
        self.stats = GenerationStats(spec=spec, prompt_tokens=len(self.prompt), speculation=request.speculation)
        self.output = OutputText(
            engine.tokenizer, stop=request.stop, min_tokens=request.min_tokens, max_tokens=request.max_tokens,
            stop_ids=(*request.stop_token_ids, *(() if request.ignore_eos else engine.eos_token_ids)),
            context=self.prompt)
        self.tokens = self.output.tokens  # the output so far (the same list)
        self.stop_ids = self.output.stop_ids
        params = request  # a request is its SamplingParams and more
        if not params.greedy and params.seed is None:  # reported back (stats.seed): any answer can be reproduced
            params = dataclasses.replace(request, seed=random_seed())
        #: the keyed draws and penalties; None for plain greedy decoding (the argmax of the raw logits)
        self.sampler = None if params.plain else KeyedSampler(params, self.prompt)
        self.stats.seed = None if params.greedy else params.seed
        self.slot: Optional[int] = None
        self.finish_reason: Optional[str] = None
        self.algo: Optional[LookaheadAlgorithm] = None
        #: NGram / SA drafting (``request.speculation``), from admission on (:meth:`start_drafting`)
        self.drafter: Optional[HistoryDrafter] = None
        #: an ``auto`` sequence's namespace, whose peer pool holds its text (:meth:`start_drafting`)
        self.peer_space: Optional[DraftSpace] = None
        self.policy = "fixed" if request.speculation is not None else _resolve_policy(request, settings.adaptive)
        self.stats.policy = self.policy if not spec.is_autoregressive or request.speculation is not None else None
        self._start_estimates(engine, spec, params.greedy)
        self.enqueued_at = time.perf_counter()
        #: prompt tokens whose K/V are in the slot (cached, then prefilled); when its prefill began; the
        #: prompt rows' logits so far (a scored request: ``prompt_logprobs``)
        self.prefilled = 0
        self.prefill_started: Optional[float] = None
        self.prompt_rows: list[torch.Tensor] = []
        self._draft: Optional[DraftBatch] = None  # the prepared rows, when this step runs them
        self._prepared: Optional[DraftBatch] = None  # an NGram / SA step's rows, prepared for this step

    def _start_estimates(self, engine: BatchEngine, spec: LookaheadSpec, greedy: bool) -> None:
        """What the auto policy knows of this sequence at its start: an acceptance estimate per context (its last
        two tokens occurred earlier in it, or not) and drafting option, from the engine's priors, and each option's
        rows."""
        self.contexts = _RepeatIndex(self.prompt)
        self._acceptance = {(ctx, option): engine.policy.new_sequence(
                                _prior_key(ctx, option, greedy, spec, engine.spec),
                                server_tries=option == "full")  # the one option that learns from its own steps only
                            for ctx in ("repeat", "fresh") for option in DRAFT_OPTIONS}
        #: per context, the options' estimates in :data:`DRAFT_OPTIONS` order (what a plan and a step read)
        self._by_context = {ctx: tuple(self._acceptance[(ctx, option)] for option in DRAFT_OPTIONS)
                            for ctx in ("repeat", "fresh")}
        #: rows of this sequence's last prepared step per option (the auto policy's estimate of the next)
        self.draft_rows = {"suffix": 4, "prompt_lookup": 4, "pool": 4, "public": 4, "first": 2,
                           "candidates": max(2, spec.decoding_tokens // 2), "full": spec.decoding_tokens}
        self._option = "full"  # this step's rows (see DRAFT_OPTIONS)
        #: this step's depth when its option's chains were cut short (None: whole) and the share of the option's
        #: estimate that cut holds; the cuts the last plan was offered beyond DRAFT_OPTIONS as (source, depth, part)
        self._cut: Optional[int] = None
        self._cut_part = 1.0
        self._cuts: list[tuple[str, int, float]] = []
        #: the (window, depth, source) this step's rows were prepared with (an auto step near the budget's end cuts
        #: its chains: :meth:`drafts_left`)
        self._prepared_as: tuple[bool, Optional[int], Optional[str]] = _OPTION_ROWS["full"]
        #: an auto step's most useful drafts when the budget cuts them, else None (:meth:`draft_options`)
        self.draft_cap: Optional[int] = None

    def start_drafting(self, pools: DraftPools) -> None:
        """An NGram / SA request, admitted: its history enters its namespace's pool in the batch (upstream seeds
        it when the request's first context chunk is scheduled; other requests' public search sees it from then
        on, those of its namespace only). An ``auto`` sequence with history candidates (``prompt_lookup``) joins
        its namespace's peer pool: its ``public`` source searches the other ``auto`` sequences there."""
        if self.request.speculation is not None and self.drafter is None:
            self.drafter = pools.drafter(
                self.request.speculation, self.seq_id, self.prompt + self.tokens,
                eos_token_ids=self.engine.eos_token_ids, max_sequence_length=len(self.prompt) + self.request.max_tokens,
                namespace=self.draft_space, private=self.shares_nothing, owner=self.draft_owner)
        elif (self.policy == "auto" and self.settings.prompt_lookup and self.settings.public_lookup
              and not self.spec.is_autoregressive and self.peer_space is None):
            self.peer_space = pools.join(self.seq_id, self.prompt + self.tokens, namespace=self.draft_space,
                                         private=self.shares_nothing, owner=self.draft_owner)

    def stop_drafting(self, pools: DraftPools) -> None:
        """The request ended: an NGram / SA history is retired (searchable until the next step has drafted, as
        upstream frees it), an ``auto`` sequence's text leaves the peer pool at once."""
        if self.drafter is not None:
            pools.retire(self.drafter)
            self.drafter = None
        if self.peer_space is not None:
            pools.leave(self.peer_space, self.seq_id)
            self.peer_space = None

    @property
    def draft_space(self) -> Hashable:
        """The drafters' pools this request drafts from: its prefix-cache namespace (none given: the global one,
        upstream's shared pools), or its own when its scope shares nothing."""
        return GLOBAL_SPACE if self.scope is None else self.scope.draft_space(self.seq_id)

    @property
    def draft_owner(self) -> Hashable:
        """Who this request's drafting namespace is charged to: its API key's identity (None: no keys)."""
        return None if self.scope is None else self.scope.identity

    @property
    def shares_nothing(self) -> bool:
        """Whether its scope shares nothing (``salt`` scope without a salt): its drafting space is its own."""
        return self.scope is not None and self.scope.namespace is None

    @property
    def scored(self) -> bool:
        """Whether every prompt row's logits are wanted (``prompt_logprobs``): computed, never reused."""
        return self.request.prompt_logprobs is not None

    # ------------------------------------------------------------------ rows
    @property
    def context(self) -> str:
        """``repeat`` if the text's last two tokens occurred earlier (drafts from the pool and prompt
        lookup then tend to match), else ``fresh``."""
        return "repeat" if self.contexts.repeating() else "fresh"

    def acceptance(self, option: str = "full") -> Acceptance:
        """The acceptance estimate of ``option`` (:data:`DRAFT_OPTIONS`) in this step's context."""
        return self._acceptance[(self.context, option)]

    def drafts_left(self) -> int:
        """The most drafts this step can still emit: the tokens ``max_tokens`` leaves, less the step's own.

        >>> state = SequenceState.__new__(SequenceState)
        >>> state.request, state.tokens = GenerationRequest(prompt_ids=(1,), max_tokens=50), [7] * 47
        >>> state.drafts_left()        # 3 tokens left: the golden one and 2 drafts
        2
        """
        return self.request.max_tokens - len(self.tokens) - 1

    def draft_options(self) -> list[tuple[Acceptance, int, tuple[int, ...], float, int]]:
        """What the auto policy may choose from: ``(acceptance, draft rows, options it holds, 1.0, most)`` per option
        of :data:`DRAFT_OPTIONS`, ``most`` the drafts its rows can accept this step (a source's longest chain, 1 for
        ``first``, N-1 beside the window). The candidates of this step are known before the plan (found once, kept
        for its rows): an option without a candidate now has 0 draft rows (the policy passes it over), the
        others the candidates' tokens; the window's rows are those of its last step. Near the end of its
        budget (:meth:`drafts_left` below a candidate's length) the candidates are cut to what can still be
        emitted (:attr:`draft_cap`), each source's within it as its rows will be, and the window, whose paths are
        longer, is not offered: a draft past the budget would be verified and never sent. After these come the
        cuts (:meth:`_cut_options`)."""
        algo = self._algorithm()
        whole = algo.candidates()
        left = self.drafts_left()
        cap = left if any(len(c) > left for c, _ in whole) or left < self.spec.ngram_size - 1 else None
        self.draft_cap = cap
        own = _capped(whole, cap)  # each source's chains, as its rows will be
        merged = whole if cap is None else algo.candidates(depth=cap) if cap > 0 else []  # as the others' rows will be
        shared = [cand for cand, source in merged if source not in ALONE_SOURCES]
        rows, most = dict.fromkeys(SOURCE_OPTIONS, 0), dict.fromkeys(SOURCE_OPTIONS, 0)
        for cand, source in own:
            rows[source] += len(cand)
            most[source] = max(most[source], len(cand))
        rows["candidates"], most["candidates"] = sum(map(len, shared)), max(map(len, shared), default=0)
        rows["first"], most["first"] = len({cand[0] for cand in shared}), 1
        rows["full"] = self.draft_rows["full"] - 1 if cap is None or cap >= self.spec.ngram_size - 1 else 0
        most["full"] = self.spec.ngram_size - 1
        now = held_now(own) if own else {}
        by_context = self._by_context[self.context]
        return [*((acceptance, rows[option], _WITHIN[option] + now.get(option, ()), 1.0, most[option])
                  for option, acceptance in zip(DRAFT_OPTIONS, by_context)),
                *self._cut_options(own, by_context)]

    def _cut_options(self, cands: list[tuple[tuple[int, ...], str]],
                     by_context: Sequence[Acceptance]) -> list[tuple[Acceptance, int, tuple[int, ...], float, int]]:
        """The chains of :data:`CUT_SOURCES` cut short, at every depth below their length, as the plan's options
        after :data:`DRAFT_OPTIONS`: ``(the source's acceptance, draft rows, holds nothing, part, depth)``, ``part``
        the share of the source's estimate the first ``depth`` drafts hold (:meth:`AutoPolicy.cut_parts`); kept in
        :attr:`_cuts` as ``(source, depth, part)`` for :meth:`option_at`.

        >>> from trtlade.reference.adaptive import CostTable
        >>> state = SequenceState.__new__(SequenceState)
        >>> state.engine = type("E", (), {"policy": AutoPolicy(CostTable())})()
        >>> seqs = [Acceptance() for _ in DRAFT_OPTIONS]
        >>> cuts = state._cut_options([((5, 6, 7), "prompt_lookup"), ((5, 9), "pool"), ((5, 8), "pool")], seqs)
        >>> [cut[:2] for cut in state._cuts], [(rows, round(part, 2)) for _, rows, _, part, _ in cuts]
        ([('prompt_lookup', 1), ('prompt_lookup', 2), ('pool', 1)], [(1, 0.57), (2, 0.86), (1, 0.67)])
        """
        policy: AutoPolicy = self.engine.policy
        out: list[tuple[Acceptance, int, tuple[int, ...], float, int]] = []
        self._cuts = []
        for source in CUT_SOURCES:
            chains = [cand for cand, own in cands if own == source]
            length = max(map(len, chains), default=0)
            acceptance = by_context[_OPTION_INDEX[source]]
            for depth, part in enumerate(policy.cut_parts(acceptance, length) if length > 1 else (), start=1):
                rows = sum(map(len, {cand[:depth] for cand in chains}))
                out.append((acceptance, rows, (), part, depth))
                self._cuts.append((source, depth, part))
        return out

    @property
    def option(self) -> str:
        """The option of :data:`DRAFT_OPTIONS` this step's rows were prepared for."""
        return self._option

    @property
    def cut(self) -> Optional[int]:
        """The depth this step's chains were cut to (:meth:`_cut_options`), None where they run whole."""
        return self._cut

    @property
    def cut_part(self) -> float:
        """The share of the option's estimate this step's cut holds (1.0: its chains whole)."""
        return self._cut_part

    @property
    def draft_depth(self) -> Optional[int]:
        """The most drafts this step's rows can accept (their deepest path, a chain's length, cut or not, within the
        budget; beside the window N-1); None without drafts (:meth:`block` gave the golden row only).

        >>> state = SequenceState.__new__(SequenceState)
        >>> state._draft = None
        >>> state.draft_depth is None
        True
        """
        draft = self._draft
        if draft is None or draft.num_rows <= 1:
            return None
        deepest = max(draft.positions)  # the window's rows run deeper than a path through it accepts (N-1)
        return deepest if draft.max_drafts is None else min(deepest, draft.max_drafts)

    @property
    def single_row(self) -> bool:
        """One row per step while ``min_tokens`` still forbids stopping."""
        return len(self.tokens) < self.request.min_tokens

    @property
    def drafts(self) -> bool:
        """Whether this sequence has drafts at all (a lookahead spec or a drafter, past min_tokens)."""
        return not self.single_row and (self.drafter is not None or not self.spec.is_autoregressive)

    def step_mode(self, in_flight: int) -> str:
        """This step: ``"drafts"`` (verify them), ``"golden"`` (one row) or ``"auto"`` (the policy
        decides). ``in_flight``: requests in the batch now (a schedule's band is keyed by it)."""
        if not self.drafts:
            return "golden"
        if self.drafter is not None:
            return "drafts"
        if self.policy == "auto":
            return "auto"
        if self.policy == "schedule" and self.request.schedule is not None:
            return "golden" if self.request.schedule.spec_for(in_flight).is_autoregressive else "drafts"
        return "drafts"

    def expected_tokens(self) -> float:
        """Tokens this sequence's drafting step is expected to emit (for the auto policy's plan of the rest)."""
        if self.drafter is not None:
            tally = self.drafter.tally
            return 1.0 + (tally.accepted / tally.drafted_steps if tally.drafted_steps else 0.0)
        return 1.0 + self.engine.policy.expected(self.acceptance())

    def option_at(self, k: int) -> tuple[str, Optional[int], float]:
        """The plan's choice ``k`` of the last :meth:`draft_options` as ``(option, depth, part)``: an option of
        :data:`DRAFT_OPTIONS` whole (depth None, part 1.0), or a source's chains cut to ``depth`` drafts."""
        return (DRAFT_OPTIONS[k], None, 1.0) if k < len(DRAFT_OPTIONS) else self._cuts[k - len(DRAFT_OPTIONS)]

    def wanted_rows(self, option: str = "full", batch_size: int = 1, cut: Optional[int] = None,
                    part: float = 1.0) -> int:
        """Prepare this step's rows for ``option`` (:data:`DRAFT_OPTIONS`) and return their count;
        ``batch_size``: sequences decoding this step (an NGram / SA draft length may depend on it); ``cut``: the
        option's chains cut to that many drafts, holding ``part`` of its estimate (:meth:`_cut_options`)."""
        if self.single_row:
            return 1
        if self.drafter is not None:
            with traced(ALGORITHM_LABEL):
                self._prepared = self.drafter.prepare(batch_size)
            return self._prepared.num_rows
        self._option = option
        self._cut, self._cut_part = cut, part if cut is not None else 1.0
        window, depth, source = _OPTION_ROWS[option]
        if cut is not None:
            depth = cut
        if self.draft_cap is not None and (depth is None or depth > self.draft_cap):
            depth = self.draft_cap  # the budget's end (draft_options)
        self._prepared_as = (window, depth, source)
        with traced(ALGORITHM_LABEL):
            rows = self._algorithm().prepare(window=window, depth=depth, source=source).num_rows
        if cut is None:
            self.draft_rows[option] = rows
        return rows

    def block(self, rows: int) -> RowBlock:
        """This step's rows: the prepared lookahead rows if ``rows`` allows them, else the golden row."""
        assert self.slot is not None
        if self.single_row or rows <= 1:
            self._draft = None
            return RowBlock(self.slot, [self.tokens[-1]], [0], [0])
        with traced(ALGORITHM_LABEL):
            if self.drafter is not None:
                assert self._prepared is not None, "an NGram / SA step's rows are prepared by wanted_rows"
                draft = self._prepared
            else:
                window, depth, source = self._prepared_as
                draft = self._algorithm().prepare(window=window, depth=depth, source=source)
            mask = draft.mask_array() if draft.num_rows > 1 else None
        self._draft = draft
        return RowBlock(self.slot, draft.tokens, draft.positions, draft.logit_rows, mask=mask)

    # ------------------------------------------------------------------ results
    def first(self, logits: torch.Tensor, prompt_logits: Optional[torch.Tensor] = None) -> StepChunk:
        """The prefill's last-row logits: choose and emit the first token. ``prompt_logits``: every
        prompt row's logits, when the request asked for prompt logprobs."""
        token = self._choose(logits)
        chunk = self._emit([token], rows=1, rows_logits=logits.unsqueeze(0))
        if prompt_logits is not None and self.request.prompt_logprobs is not None:
            scored = token_logprobs(prompt_logits[:-1], self.prompt[1:], self.request.prompt_logprobs)
            chunk = dataclasses.replace(chunk, prompt_logprobs=[None, *scored])
        return chunk

    def consume(self, logits: torch.Tensor, greedy: Optional[Sequence[int]] = None) -> tuple[StepChunk, list[int]]:
        """Logits of this step's logit rows -> the emitted chunk and the step rows to keep. ``greedy``:
        each row's argmax when the step found them already (:meth:`BatchRunner.forward_greedy`)."""
        draft, self._draft = self._draft, None
        context = self.context  # the context this step was planned in (before its tokens)
        if draft is None:  # one row: greedy/sampled, or lookahead with its drafts dropped
            token = self._choose(logits[0], greedy[0] if greedy else None)
            chunk = self._emit([token], rows=1, rows_logits=logits[:1])
            if self.algo is not None and chunk.finish_reason is None:
                self.algo.advance(token)
            if self.drafts and self.drafter is None:
                self.engine.policy.fade_all(self._by_context[context])
            return chunk, [0]
        argmax = list(greedy) if greedy is not None else argmax_rows(logits)
        targets = None if self.sampler is None else draft.expand_argmax(self._draws(draft, logits))
        algo = self._algorithm()
        candidates = self.algo.candidates() if self.drafter is None and self.algo is not None else []
        with traced(ALGORITHM_LABEL):
            verification = algo.verify(draft.expand_argmax(argmax), targets)
        rows_logits = None
        if self.request.logprobs is not None:  # token j was chosen by kept row j's logits
            where = {row: i for i, row in enumerate(draft.logit_rows)}
            rows_logits = logits[[where[row] for row in verification.kept_rows]]
        chunk = self._emit(verification.tokens, rows=draft.num_rows, rows_logits=rows_logits)
        count = len(chunk.tokens)  # cut at EOS / stop id / stop string / budget: nothing past it
        if count > 1 and draft.row_sources:  # which source the accepted drafts came from
            source = draft.row_sources[verification.kept_rows[count - 1]]
            self.stats.accepted_from[source] = self.stats.accepted_from.get(source, 0) + count - 1
        with traced(ALGORITHM_LABEL):
            algo.commit(count)
            if self.drafter is not None:  # the chunk's stats are this object: its last step counts too
                self.stats.draft_tokens = self.drafter.tally.draft_tokens
            auto = self.policy == "auto"
            # a fixed step's run cut at the budget says nothing about acceptance; an auto step's drafts never pass
            # its budget (draft_options), so its last step counts too, as the verification accepted it (a stop
            # string cuts what is sent, not what the model accepted)
            if self.drafter is None and (chunk.finish_reason is None or auto):
                option = self._option
                cut = self._cut if auto else None
                if cut is None:
                    self.engine.policy.observe(self._acceptance[(context, option)], drafted=True, planned=auto,
                                               accepted=len(verification.tokens) - 1 if auto else count - 1)
                else:  # what a cut chain accepted is not what the whole would: the estimate learns as if it did not run
                    self.engine.policy.observe_chosen(self._acceptance[(context, option)], len(verification.tokens) - 1)
                if auto and chunk.finish_reason is None:
                    self._observe_unrun(context, option if cut is None else "", candidates, chunk.tokens)
        return chunk, list(verification.kept_rows[:count])

    def _observe_unrun(self, context: str, ran: str, candidates: Sequence[tuple[tuple[int, ...], str]],
                       emitted: Sequence[int]) -> None:
        """What the options without the window that did not run would have accepted this step: the emitted
        tokens are the model's own continuation, so a candidate accepts its longest prefix matching them
        (exact below their count; where it matched them all and goes on, censored: at least that count, and
        counted for what the source's chains that were seen further go on to accept,
        :meth:`AutoPolicy.observe_chain`). Each option's estimate so learns from every step that drafts, not
        only from its own (not counted as planned); each source's chains learn from every step that saw them,
        the one that ran included."""
        policy = self.engine.policy
        seen: dict[str, tuple[int, int]] = {}  # per source, its best chain: (drafts it matched, its length)
        for cand, source in candidates:
            seen[source] = max(seen.get(source, (0, 0)), (common_prefix(cand, emitted), len(cand)))
        if not seen:
            return
        matched = {source: policy.observe_chain(self._acceptance[(context, source)], n, length,
                                                censored=n == len(emitted) and length > n)
                   for source, (n, length) in seen.items()}
        best = max([0, *(n for source, n in matched.items() if source not in ALONE_SOURCES)])
        would = {**matched, "first": min(1, best), "candidates": best}
        for option, accepted in would.items():
            if option != ran:
                policy.observe(self._acceptance[(context, option)], drafted=True, accepted=accepted, planned=False)

    # ------------------------------------------------------------------ internals
    def _algorithm(self) -> LookaheadAlgorithm | HistoryDrafter:
        """The sequence's drafter: its NGram / SA one, else its lookahead state, set up on the context so far
        the first time it drafts."""
        if self.drafter is not None:
            return self.drafter
        if self.algo is None:
            settings = self.settings
            space = self.peer_space
            self.algo = LookaheadAlgorithm(
                self.spec, eos_token_ids=self.engine.eos_token_ids, seed=settings.seed,
                corrected_keying=settings.corrected_keying, full_guess_set=settings.full_guess_set,
                prompt_lookup=settings.prompt_lookup, suffix_lookup=settings.prompt_lookup,
                peers=None if space is None else functools.partial(space.peers.peer_draft, self.seq_id))
            self.algo.setup(self.prompt + self.tokens[:-1], self.tokens[-1])
        return self.algo

    def _choose(self, logits: torch.Tensor, greedy: Optional[int] = None) -> int:
        """Next token from one row of logits: argmax (``greedy``, when already found), or the keyed draw
        at its position; stop ids suppressed before min_tokens (then ``greedy``, found without, is not used)."""
        if len(self.tokens) < self.request.min_tokens and self.stop_ids:
            logits, greedy = logits.clone(), None
            logits[list(self.stop_ids)] = float("-inf")
        if self.sampler is not None:
            return self.sampler.choose(logits.unsqueeze(0), [()], [len(self.prompt) + len(self.tokens)])[0]
        return greedy if greedy is not None else argmax_rows(logits)[0]

    def _draws(self, draft: DraftBatch, logits: torch.Tensor) -> list[int]:
        """The token each logit row of ``draft`` draws: warped with the penalties of the output and the
        row's own path, keyed by the position it fills (:mod:`trtlade.reference.sampling`)."""
        assert self.sampler is not None
        first = len(self.prompt) + len(self.tokens)  # row 0 (the golden token) draws the token here
        paths = [[draft.tokens[a] for a in draft.ancestors[row][1:]] for row in draft.logit_rows]
        positions = [first + draft.positions[row] for row in draft.logit_rows]
        with traced(ALGORITHM_LABEL):
            return self.sampler.choose(logits, paths, positions)

    def _emit(self, tokens: Sequence[int], rows: int, rows_logits: Optional[torch.Tensor] = None) -> StepChunk:
        """Append a step's tokens to the output, stopping at EOS / stop ids / stop strings / budget.
        ``rows_logits[j]``: the logits row that chose ``tokens[j]`` (for the request's logprobs)."""
        with traced(TEXT_LABEL):
            emitted = self.output.extend(tokens)
            self.contexts.extend(emitted.tokens)
            if self.sampler is not None:
                self.sampler.extend(emitted.tokens)
        if self.drafter is not None:
            with traced(ALGORITHM_LABEL):
                self.drafter.observe(emitted.tokens)
        elif self.peer_space is not None and emitted.tokens:
            self.peer_space.peers.extend(self.seq_id, emitted.tokens)
        self.finish_reason = emitted.finish_reason
        kept = emitted.tokens
        stats = self.stats
        stats.steps += 1
        stats.tokens += len(kept)
        stats.tokens_per_step_hist[len(kept)] = stats.tokens_per_step_hist.get(len(kept), 0) + 1
        stats.rows_per_step.append(rows)
        logprobs = None
        if self.request.logprobs is not None and rows_logits is not None:
            logprobs = token_logprobs(rows_logits[:len(kept)], kept, self.request.logprobs)
        return StepChunk(tokens=kept, text=emitted.text, finish_reason=emitted.finish_reason,
                         stats=stats if emitted.finish_reason is not None else None, logprobs=logprobs)


def token_logprobs(logits: torch.Tensor, tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """Each token's log probability under its logits row (``log_softmax`` in float32), with the
    ``top`` best tokens of the row.

    >>> [(t.token, round(t.logprob, 4), t.top) for t in token_logprobs(torch.tensor([[0.0, 0.0]]), [1], 0)]
    [(1, -0.6931, ())]
    """
    if not len(tokens):
        return []
    logp = torch.log_softmax(logits[:len(tokens)].float(), dim=-1)
    index = torch.tensor(list(tokens), dtype=torch.long, device=logp.device)
    chosen = logp.gather(1, index.unsqueeze(1)).squeeze(1).tolist()
    if top > 0:
        values, index = logp.topk(min(top, logp.shape[-1]), dim=-1)
        tops = [tuple(zip(i, v)) for i, v in zip(index.tolist(), values.tolist())]
    else:
        tops = [()] * len(tokens)
    return [TokenLogprob(int(t), float(lp), tp) for t, lp, tp in zip(tokens, chosen, tops)]


@dataclass
class _Waiting:
    state: SequenceState


class OutsideWork:
    """Work the server does beside the steps, on the cores the steps use: a request read, templated and
    tokenized before it is submitted (:meth:`begin` / :meth:`end`, one thread). A step that overlapped it timed
    that work too, so the cost model learns only from steps quiet from start to end (:meth:`mark` at the start,
    :meth:`quiet_since` at the end). Served on a 2-core Intel Xeon (family 6 model 207, AVX-512, 2026-12-08), 16
    requests on 8 slots: a plain step of 7 sequences while the next request was being admitted took 36.5 ms
    (median of 13), one of 7 in a level's last wave 31.5 ms (41) and one of 8 32.3 ms (216), so the policy priced 7
    sequences by the server's work.

    >>> work = OutsideWork()
    >>> start = work.mark()
    >>> work.quiet_since(start)              # nothing happened: the step's time is its own
    True
    >>> start = work.mark(); work.begin(); work.end()
    >>> work.quiet_since(start)              # a request was admitted during the step
    False
    >>> work.begin(); start = work.mark(); work.end()
    >>> work.quiet_since(start)              # one was on its way as the step started
    False
    """

    def __init__(self) -> None:
        self._busy = 0    # admissions in progress
        self._events = 0  # admissions begun or ended so far

    def begin(self) -> None:
        self._busy += 1
        self._events += 1

    def end(self) -> None:
        self._busy -= 1
        self._events += 1

    def mark(self) -> int:
        """A step's start: -1 if some work is in progress, else the count of events so far."""
        return -1 if self._busy else self._events

    def quiet_since(self, mark: int) -> bool:
        """Whether nothing began, ended or was in progress since ``mark``."""
        return mark >= 0 and not self._busy and self._events == mark


class Batch:
    """Waiting and running sequences of one engine, stepped together (see the module docstring).

    ``engine``: what the batch needs of it (:class:`BatchEngine`). ``limits``:
    :class:`~trtlade.reference.scheduler.BatchLimits`. ``settings``: how its sequences draft.
    ``is_current``: False once a newer batch drives the engine (this one then refuses to step: the
    engine's slots are no longer its own). Not thread-safe: one thread calls
    :meth:`add`, :meth:`cancel` and :meth:`step`. ``last``: the :class:`StepReport` of the last step;
    ``failed``: ``(seq_id, exception)`` of the sequences that failed in it on their own (a request's
    text or sampling, say): they have left the batch, their neighbours went on. An exception raised
    by :meth:`step` itself (the shared forward pass) concerns every sequence in it.
    """

    def __init__(self, engine: BatchEngine, limits: BatchLimits, *, settings: DraftSettings = DraftSettings(),
                 is_current: Callable[[], bool] = lambda: True) -> None:
        self.engine = engine
        self.limits = limits
        self.settings = settings
        self.is_current = is_current
        self._next_id = 0
        self._waiting: list[_Waiting] = []
        self._prefilling: list[SequenceState] = []  # admitted, their prompts on the way (chunked prefill)
        self._oldest_next = False  # nothing decoding: the next chunk is the oldest prompt's (_prefill_idle)
        self._running: list[SequenceState] = []
        self.last = StepReport()
        self.failed: list[tuple[int, BaseException]] = []
        #: the NGram / SA histories of this batch's requests (a public / global pool searches them)
        self.pools = DraftPools(limits.max_batch_size, engine.max_seq_len, settings.ngram_implementation,
                                retained_tokens=settings.draft_retained_tokens,
                                max_global_pool_size=settings.max_global_pool_size,
                                max_num_tokens=limits.max_num_tokens)
        #: the server's work beside the steps (a request admitted): a step that overlapped it teaches no cost
        self.outside = OutsideWork()
        #: the prompt rows a step beside decoding sequences may add (chunked prefill), None: whole prompts
        self.pacer = (PrefillPacer(limits.prefill_chunk, limits.prefill_stall, decode_cost=self._decode_cost)
                      if limits.prefill_chunk else None)

    @property
    def running(self) -> int:
        """Sequences holding a slot: decoding, or with their prompt on the way."""
        return len(self._running) + len(self._prefilling)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def __len__(self) -> int:
        return self.running + len(self._waiting)

    def add(self, request: GenerationRequest, enqueued_at: Optional[float] = None) -> int:
        """Validate ``request`` now (raising the engine's RequestError) and queue it; returns its id.
        ``enqueued_at``: its arrival (``time.perf_counter()``) if earlier than now, for queue times."""
        self._check_owner()
        spec = self.engine.validate(request)
        seq_id = self._next_id
        self._next_id += 1
        state = SequenceState(self.engine, request, spec, seq_id, self.settings)
        if enqueued_at is not None:
            state.enqueued_at = enqueued_at
        self._waiting.append(_Waiting(state))
        return seq_id

    def cancel(self, seq_id: int) -> bool:
        """Drop a waiting or running sequence at once (its slot is freed); False if unknown. The last one leaves
        no text behind (an idle batch runs no step that would free it)."""
        for queue in (self._waiting, self._prefilling, self._running):
            for item in queue:
                state = item.state if queue is self._waiting else item
                if state.seq_id == seq_id:
                    queue.remove(item)
                    self._release(state)
                    if not len(self):
                        self.pools.flush()
                    return True
        return False

    def close(self) -> None:
        """Cancel everything and free every slot."""
        for seq_id in [w.state.seq_id for w in self._waiting] + [s.seq_id for s in self._prefilling + self._running]:
            self.cancel(seq_id)
        self.pools.flush()

    def step(self, on_chunk: Optional[Callable[[int, StepChunk], None]] = None) -> list[tuple[int, StepChunk]]:
        """Admit and prefill, then one forward pass for the running sequences; returns the chunks
        emitted, as ``(seq_id, chunk)`` in order (a chunk with ``finish_reason`` is the last of its
        sequence). ``on_chunk(seq_id, chunk)``, if given, gets each chunk as soon as it exists: a
        new request's first token leaves right after its prefill, not after the decode pass. With
        ``limits.prefill_chunk`` and sequences decoding, prompts advance by chunks inside the decode
        pass instead (see the module docstring, step 1). If ``on_chunk`` raises, the step still ends
        (every sequence's tokens committed, finished ones freed, every later chunk handed over) and then
        raises :class:`ChunkCallbackError`, whose ``chunks`` are what this call would have returned."""
        self._check_owner()
        t0 = time.perf_counter()
        report = StepReport()
        self.failed = []
        out: list[tuple[int, StepChunk]] = []
        raised: list[BaseException] = []

        def emit(seq_id: int, chunk: StepChunk) -> None:
            out.append((seq_id, chunk))
            if on_chunk is not None:
                try:
                    on_chunk(seq_id, chunk)
                except Exception as exc:  # noqa: BLE001 - the step ends first, then the caller hears of it
                    raised.append(exc)

        decoding = list(self._running)  # newly prefilled sequences join at the next step
        chunked = bool(decoding) and self.limits.prefill_chunk is not None
        idle = self._idle_size() if not decoding else None
        if idle is None or not self._prefilling:  # the idle chunks' turns last while an idle run's prompts do
            self._oldest_next = False
        self._admit(report, chunked, idle)
        if idle is not None:
            self._prefill_idle(report, emit, idle)  # short prompts whole, then a chunk of a longer one; the step ends
        elif not chunked:
            self._prefill_whole(report, emit)  # a new request's first token waits for no decode step
        elif behind := self._behind():
            self._prefill_whole(report, emit, behind)  # nor another identity's, under fair share
        if decoding:
            self._decode(decoding, report, emit, chunked)
        if not (self._waiting or self._prefilling or self._running):
            self.pools.flush()  # nothing left to draft from the requests that ended: an idle batch holds no text
        report.seconds = time.perf_counter() - t0
        self.last = report
        if raised:
            raise ChunkCallbackError(out, len(raised)) from raised[0]
        return out

    # ------------------------------------------------------------------ internals
    def _admit(self, report: StepReport, chunked: bool, idle: Optional[int] = None) -> None:
        """Move waiting sequences (first come first served) to prefilling, with their slots and their
        cached prefix, while fewer than ``max_batch_size`` hold a slot. Prefilled whole this step
        (``chunked`` False), their prompts must fit ``max_num_tokens`` together beyond the first
        (a longer first prompt is prefilled in chunks); prefilled by chunks, any number waits its turn. With
        nothing decoding and ``idle`` (:meth:`_idle_size`), a prompt started or longer than ``idle`` rows goes by
        chunks (:meth:`_prefill_idle`) and is not counted against ``max_num_tokens``."""
        budget = None if chunked else (self.limits.max_num_tokens or (1 << 62))

        def whole(rows: int, started: bool = False) -> int:  # the rows a whole prefill computes this step
            return rows if idle is None or (not started and rows <= idle) else 0

        pending = sum(whole(len(s.prompt) - s.prefilled, s.prefill_started is not None) for s in self._prefilling)
        runner = self.engine.runner
        while self._waiting and len(self._running) + len(self._prefilling) < self.limits.max_batch_size:
            turn = self._next_turn()
            if turn is None:
                break  # every waiting identity holds its share of the slots
            state = self._waiting[turn].state
            computed = len(state.prompt) - (0 if state.scored else runner.prefix_hit(state.prompt, state.scope))
            if budget is not None and pending and pending + whole(computed) > budget:
                break  # this step's prefill budget is spent; the rest join at a later step
            if state.slot is None:
                state.slot = runner.allocate(self.engine.kv_rows(len(state.prompt) + state.request.max_tokens))
            self._waiting.pop(turn)
            state.start_drafting(self.pools)
            if runner.prefix_cache is not None:  # the cached prefix's K/V into the slot; the prefill starts after it
                state.prefilled = 0 if state.scored else runner.reuse(state.slot, state.prompt, scope=state.scope)
                state.stats.cached_tokens = state.prefilled
            report.prefills += 1
            pending += whole(computed)
            self._prefilling.append(state)

    def by_identity(self) -> tuple[Counter, Counter]:
        """Slots held and sequences waiting, by identity (None: no keys), for the server's queue bound."""
        held = Counter(state.identity for state in self._running + self._prefilling)
        return held, Counter(item.state.identity for item in self._waiting)

    def _next_turn(self) -> Optional[int]:
        """Which waiting sequence takes the next free slot: that of the identity holding the fewest slots (fair
        share: one identity's burst cannot keep another's request waiting behind it), first come first served
        among equals and without identities; None when every waiting identity holds
        ``max_running_per_identity`` slots already."""
        held: dict[Optional[str], int] = {}
        for state in self._running + self._prefilling:
            held[state.identity] = held.get(state.identity, 0) + 1
        cap = self.limits.max_running_per_identity
        best: Optional[tuple[int, int]] = None
        for index, item in enumerate(self._waiting):
            count = held.get(item.state.identity, 0)
            if cap is not None and count >= cap:
                continue
            if best is None or count < best[0]:
                best = (count, index)
                if count == 0:
                    break
        return None if best is None else best[1]

    def _behind(self) -> list[SequenceState]:
        """With identities (API keys) and sequences decoding: the prompts, not started and shorter than a
        chunk, of the identities holding fewer running sequences than another identity. They are prefilled
        on their own before the step's decode pass (:meth:`_prefill_whole`) instead of in chunks inside it,
        so that their first token waits for no other identity's decoding (fair share: an identity's flood
        of running sequences slows its own steps, not another's first token). Worked example: the flood
        identity runs 5 sequences, alice's prompt of 30 tokens arrives: it is behind (0 < 5) and prefilled
        first; bob's second prompt beside his own 2 running while nobody runs more is not."""
        if not any(s.identity is not None for s in self._prefilling):  # every decode step asks: most have none
            return []
        held: dict[Optional[str], int] = {}
        for state in self._running:
            held[state.identity] = held.get(state.identity, 0) + 1
        most = max(held.values(), default=0)
        chunk = self.limits.prefill_chunk or 0
        return [s for s in self._prefilling
                if s.identity is not None and s.prefill_started is None and not s.scored
                and len(s.prompt) - s.prefilled <= chunk and held.get(s.identity, 0) < most]

    def _prefill_whole(self, report: StepReport, emit: Callable[[int, StepChunk], None],
                       only: Optional[Sequence[SequenceState]] = None) -> None:
        """Prefill every prefilling sequence (or ``only`` these) to its end and emit each first token when its
        forward ends: a scored one alone (every row's logits), the others by :func:`prefill_groups` (one
        forward per group, alone in chunks of ``max_num_tokens`` for a group of one), each group formed when
        it starts, after taking what the prefix cache holds by then (:meth:`_reuse_late`)."""
        if only is None:
            states, self._prefilling = self._prefilling, []
        else:
            states = list(only)
            self._prefilling = [s for s in self._prefilling if s not in states]
        if not states:
            return
        runner = self.engine.runner
        for state in states:
            if state.scored:  # every prompt row's logits
                self._start_prefill([state], report)
                rows = runner.prefill(state.slot, state.prompt, chunk=self.limits.max_num_tokens, all_rows=True,
                                      start=state.prefilled)
                state.prompt_rows.append(rows)
                self._prefilled(state, rows[-1], report, emit)
        together = [s for s in states if not s.scored]
        while together:  # group by group: a group may reuse the prefix an earlier one has just computed
            self._reuse_late(together)
            group = prefill_groups([len(s.prompt) - s.prefilled for s in together], PREFILL_GROUP_ROWS)[0]
            members = [together[i] for i in group]
            together = [s for i, s in enumerate(together) if i not in group]
            self._start_prefill(members, report)
            if len(members) == 1:
                one = members[0]
                lasts = [runner.prefill(one.slot, one.prompt, chunk=self.limits.max_num_tokens, start=one.prefilled)]
            else:
                lasts = runner.prefill_many([(s.slot, s.prompt, s.prefilled) for s in members])
            for state, last in zip(members, lasts):
                self._prefilled(state, last, report, emit)

    def _idle_size(self) -> Optional[int]:
        """Rows of a prompt one step computes with nothing decoding (``limits.idle_chunk``, within
        ``max_num_tokens``); None: whole prompts."""
        return idle_rows(self.limits.idle_chunk, self.limits.max_num_tokens)

    def _prefill_idle(self, report: StepReport, emit: Callable[[int, StepChunk], None], size: int) -> None:
        """Nothing decoding: the new prompts whose rows left fit ``size`` (:meth:`_idle_size`) are prefilled whole
        (:meth:`_prefill_whole`); then one of the others (the longer ones and those started) advances by at most
        ``size`` rows, in a forward of its own, and the step ends: the server sees a cancel or a new request
        between two chunks instead of after the whole prompt. The one with the fewest rows left goes (shortest
        first, as whole prefills go, so a request arriving meanwhile need not wait for a long prompt's end), and
        where that is not the oldest, every other chunk is the oldest's, so that a stream of shorter prompts cannot
        hold a long one for ever. A prompt not started yet first takes what the prefix cache holds now, the whole
        prefills' blocks included; a started one does not take blocks cached after it started. Once a sequence
        decodes, the rest goes by chunks inside its steps (``prefill_chunk``) or whole. Worked example (``size``
        512): a prompt of 1,300 tokens takes three steps of 512, 512 and 276 rows, and its first token comes with
        the third; a 600-token prompt arriving after its first step takes the next (512), then the 1,300-token
        one (512), then its own last 88 rows, and its first token comes there, a step before the long one's."""
        self._reuse_late(self._prefilling)  # the rows left, after what the prefix cache holds now
        self._prefill_whole(report, emit, [s for s in self._prefilling
                                           if s.prefill_started is None and len(s.prompt) - s.prefilled <= size])
        if not self._prefilling:
            return
        self._reuse_late(self._prefilling)  # and what those whole prefills have just added to it
        rests = [len(s.prompt) - s.prefilled for s in self._prefilling]
        shortest = min(range(len(rests)), key=lambda i: (rests[i], i))
        first = 0 if shortest and self._oldest_next else shortest  # _prefilling: oldest first
        self._oldest_next = bool(shortest) and not self._oldest_next
        chunks = self._chunk_blocks([min(size, rest) if i == first else 0 for i, rest in enumerate(rests)])
        report.prefill_tokens += sum(b.rows for _, b in chunks)
        runner = self.engine.runner
        logits, _ = runner.forward_greedy([], also=[b for _, b in chunks])
        runner.keep([(b.slot, range(b.rows)) for _, b in chunks])
        self._advance_chunks(chunks, logits, report, emit)

    def _start_prefill(self, states: Sequence[SequenceState], report: StepReport) -> None:
        """``states``' prefills start now: their rows count towards the step's prefill tokens."""
        now = time.perf_counter()
        for state in states:
            state.prefill_started = state.prefill_started or now
        report.prefill_tokens += sum(len(s.prompt) - s.prefilled for s in states)

    def _reuse_late(self, states: Sequence[SequenceState]) -> None:
        """Prompts that have not started computing take the longest prefix the cache holds now, not only
        what it held when they were admitted: prompts arriving together with a shared prefix (a system
        prompt, a cold cache) compute it once, the first of them, and the others reuse it once it is in.
        Exact: cached K/V are the bits a prefill computes (row-invariant kernels). Never for a prompt
        whose every row's logits are wanted (``scored``).

        Worked example (blocks of 16 tokens): three prompts share a 40-token system prompt and arrive
        together to an empty cache; all three are admitted with nothing cached; the shortest group (the
        first two, 64 rows or more) computes it and their blocks enter the cache; the third then starts
        at token 40 instead of 0 (two whole blocks and 8 tokens of a third, a cached block used in part;
        ``tests/test_prefix_cache.py``).
        """
        runner = self.engine.runner
        if runner.prefix_cache is None:
            return
        for state in states:
            if (state.prefill_started is None and not state.scored
                    and runner.prefix_hit(state.prompt, state.scope) > state.prefilled):
                state.prefilled = state.stats.cached_tokens = runner.reuse(state.slot, state.prompt, state.prefilled,
                                                                           state.scope)

    def _takes(self, golden: int) -> list[int]:
        """Rows each prefilling prompt (oldest first) computes next to ``golden`` decoding sequences: as
        the pacer allows (fixed chunks without a stall), within ``prefill_chunk`` and ``max_num_tokens``
        (the golden rows never yield; drafts do). A prompt not started yet first takes what the prefix
        cache holds now (:meth:`_reuse_late`)."""
        assert self.pacer is not None  # chunked prefill has one
        self._reuse_late(self._prefilling)
        return self.pacer.take([len(s.prompt) - s.prefilled for s in self._prefilling], self.limits.chunk_room(golden))

    def _chunk_blocks(self, takes: Sequence[int]) -> list[tuple[SequenceState, RowBlock]]:
        """This step's prompt chunks, ``takes[i]`` rows of the i-th prefilling prompt: a causal block each,
        with its last row's logits when it ends its prompt (every row's for a scored request)."""
        now = time.perf_counter()
        chunks: list[tuple[SequenceState, RowBlock]] = []
        for state, take in zip(self._prefilling, takes):
            if take <= 0:
                continue
            ends = state.prefilled + take == len(state.prompt)
            rows = list(range(take)) if state.scored else ([take - 1] if ends else [])
            part = state.prompt[state.prefilled:state.prefilled + take]
            chunks.append((state, RowBlock(state.slot, part, list(range(take)), rows, causal=True)))
            state.prefill_started = state.prefill_started or now
        return chunks

    def _advance_chunks(self, chunks: list[tuple[SequenceState, RowBlock]], logits: Sequence[torch.Tensor],
                        report: StepReport, emit: Callable[[int, StepChunk], None]) -> None:
        """After the forward (and :meth:`BatchRunner.keep`): each chunked prompt moves on; the ones
        that ended emit their first token and run from the next step."""
        for (state, block), rows in zip(chunks, logits):
            state.prefilled += block.rows
            if state.scored:
                state.prompt_rows.append(rows)
            if state.prefilled == len(state.prompt):
                self._prefilling.remove(state)
                self._prefilled(state, rows[-1], report, emit)

    def _prefilled(self, state: SequenceState, last: torch.Tensor, report: StepReport,
                   emit: Callable[[int, StepChunk], None]) -> None:
        """``state``'s prompt is in its slot (``last``: its last row's logits): keep its blocks in the
        prefix cache, time it, emit its first token; it runs from the next step."""
        self.engine.runner.remember(state.slot, state.prompt, state.scope)
        now = time.perf_counter()
        started = state.prefill_started if state.prefill_started is not None else now
        state.stats.prefill_s = now - started
        state.stats.queue_s = started - state.enqueued_at
        report.queue_waits.append(state.stats.queue_s)
        scored = torch.cat(state.prompt_rows) if state.scored else None
        state.prompt_rows = []
        chunk = self._isolated(state, state.first, last, scored)
        if chunk is None:
            return
        emit(state.seq_id, chunk)
        if chunk.finish_reason is None:
            self._running.append(state)
        else:
            self._release(state)

    def _isolated(self, state: SequenceState, call: Any, *args: Any) -> Any:
        """``call(*args)`` for one sequence; on failure it leaves the batch (see ``failed``)."""
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - this request fails, its neighbours go on
            self.failed.append((state.seq_id, exc))
            if state in self._running:
                self._running.remove(state)
            self._release(state)
            return None

    def _plan(self, states: list[SequenceState]) -> tuple[list[Optional[int]], dict[int, Optional[Acceptance]]]:
        """The rows each sequence wants this step (None: it failed and left): its drafts' rows if it
        drafts (see the module docstring, step 2), else 1; and for each ``auto`` sequence (by
        ``seq_id``) the acceptance of the option the policy chose for it (None: its golden row)."""
        policy: AutoPolicy = self.engine.policy
        in_flight = len(self)
        modes = [self._isolated(s, s.step_mode, in_flight) for s in states]
        decoding = len(states)
        wanted: list[Optional[int]] = [None] * len(states)
        fixed: list[tuple[int, float]] = []
        auto: list[int] = []
        for i, (state, mode) in enumerate(zip(states, modes)):
            if mode == "auto":
                auto.append(i)
            elif mode == "drafts":
                wanted[i] = self._isolated(state, state.wanted_rows, "full", decoding)
                if wanted[i] is not None:
                    fixed.append((wanted[i], state.expected_tokens()))
            elif mode == "golden":
                wanted[i] = 1
                fixed.append((1, 1.0))
        chosen: dict[int, Optional[Acceptance]] = {}
        if auto and not policy.should_plan(decoding):  # plans have found less than they cost: golden rows
            for i in auto:
                chosen[states[i].seq_id], wanted[i] = None, 1
        elif auto:
            started = time.perf_counter()
            with traced(ALGORITHM_LABEL):
                options = [states[i].draft_options() for i in auto]
                choice = policy.plan(fixed, options, caps=[states[i].draft_cap for i in auto])
            policy.observe_planning(decoding, share=(time.perf_counter() - started)
                                    / policy.step_seconds(decoding, decoding), gain=policy.last_found)
            for i, k in zip(auto, choice):
                state = states[i]
                if k < 0:
                    chosen[state.seq_id], wanted[i] = None, 1
                    continue
                option, cut, part = state.option_at(k)
                chosen[state.seq_id] = state.acceptance(option)
                wanted[i] = self._isolated(state, state.wanted_rows, option, 1, cut, part)
        return wanted, chosen

    def _count_auto(self, chosen: dict[int, Optional[Acceptance]], states: list[SequenceState],
                    blocks: list[RowBlock], report: StepReport) -> None:
        """The auto policy's decisions as they run (a chosen option may have no draft this step)."""
        policy: AutoPolicy = self.engine.policy
        before = policy.counters.expected_accepted
        for state, block in zip(states, blocks):
            if state.seq_id in chosen:
                decision = policy.count(chosen[state.seq_id], drafted=block.rows > 1, cap=state.draft_depth,
                                        seqs=len(states), part=state.cut_part)
                if decision == "drafted":
                    counted = policy.counters.options if state.cut is None else policy.counters.cuts
                    counted[state.option] = counted.get(state.option, 0) + 1
                report.auto_drafted += decision == "drafted"
                report.auto_skipped += decision == "skipped"
                report.auto_empty += decision == "empty"
        report.expected_accepted = policy.counters.expected_accepted - before

    def _decode(self, states: list[SequenceState], report: StepReport,
                emit: Callable[[int, StepChunk], None], chunked: bool = False) -> None:
        """ONE forward of the running sequences' rows (and, ``chunked``, of the prompt chunks that fit
        ``limits.prefill_chunk``, as the pacer allows: drafts yield to them under ``max_num_tokens``);
        verify, emit, keep."""
        runner = self.engine.runner
        policy: AutoPolicy = self.engine.policy
        started = time.perf_counter()  # the step's cost: planning, preparing, forward, verifying
        outside = self.outside.mark()
        wanted, chosen = self._plan(states)
        self.pools.flush()  # the requests that ended last step were searchable while this step drafted
        states = [s for s, w in zip(states, wanted) if w is not None]
        wanted = [w for w in wanted if w is not None]
        takes = self._takes(len(wanted)) if chunked else []
        states, wanted, blocks = self._blocks(states, wanted, reserve=sum(takes))
        chunks = self._chunk_blocks(takes)
        if not blocks and not chunks:
            return
        report.prefill_tokens += sum(b.rows for _, b in chunks)
        report.running = len(states)
        report.rows = sum(b.rows for b in blocks)
        report.dropped_drafts = sum(w - b.rows for w, b in zip(wanted, blocks))
        self._count_auto(chosen, states, blocks, report)
        accepted_before = policy.counters.accepted
        t0 = time.perf_counter()
        logits, greedy = runner.forward_greedy(blocks, also=[b for _, b in chunks])
        logits, chunk_logits = logits[:len(blocks)], logits[len(blocks):]
        done, out, kept = self._verify(states, logits, greedy)
        runner.keep(kept + [(b.slot, range(b.rows)) for _, b in chunks])
        elapsed = time.perf_counter() - t0
        if not chunks and self.outside.quiet_since(outside):  # decode steps only, none timing the server's work
            policy.observe_cost(report.rows, time.perf_counter() - started, seqs=report.running)
        seconds = time.perf_counter() - started
        report.accepted = policy.counters.accepted - accepted_before
        for state, (seq_id, chunk) in zip(done, out):
            state.stats.decode_s += elapsed
            if chunk.finish_reason is not None:
                self._running.remove(state)
                self._release(state)
            emit(seq_id, chunk)
        self.pools.end_step()  # the iteration's acceptance sample: the engine's gate decides the next step
        self._advance_chunks(chunks, chunk_logits, report, emit)
        if self.pacer is not None:  # the prompts still on their way after this step: many stretch the stall,
            rests = [len(s.prompt) - s.prefilled for s in self._prefilling]  # only long ones lower it
            self.pacer.step(seconds, rows=sum(b.rows for _, b in chunks), decoding=len(states),
                            waiting=len(rests), decode_rows=report.rows, shortest=min(rests, default=None))

    def _blocks(self, states: list[SequenceState], wanted: list[int],
                reserve: int) -> tuple[list[SequenceState], list[int], list[Any]]:
        """Each sequence's block of rows for this step, within ``max_num_tokens`` less ``reserve`` (the prompt
        chunks' rows); a sequence whose block failed (its request ends with the error) is left out of all three."""
        rows = self.limits.rows(wanted, reserve=reserve)
        blocks = [self._isolated(s, s.block, r) for s, r in zip(states, rows)]
        ran = [b is not None for b in blocks]
        return ([s for s, ok in zip(states, ran) if ok], [w for w, ok in zip(wanted, ran) if ok],
                [b for b in blocks if b is not None])

    def _verify(self, states: list[SequenceState], logits: Sequence[torch.Tensor], greedy: Sequence[list[int]]
                ) -> tuple[list[SequenceState], list[tuple[int, StepChunk]], list[tuple[int, list[int]]]]:
        """Each sequence's rows verified: (the sequences that went on, their chunks by id, the cache rows each
        slot keeps); a sequence whose verification failed is left out."""
        done: list[SequenceState] = []
        out: list[tuple[int, StepChunk]] = []
        kept: list[tuple[int, list[int]]] = []
        for state, block_logits, block_greedy in zip(states, logits, greedy):
            slot = state.slot
            result = self._isolated(state, state.consume, block_logits, block_greedy)
            if result is None:
                continue
            chunk, keep_rows = result
            kept.append((slot, keep_rows))
            out.append((state.seq_id, chunk))
            done.append(state)
        return done, out, kept

    def _decode_cost(self, rows: int, seqs: int) -> float:
        """The auto policy's measured cost of a decode-only step (the pacer's model of what the decoders
        cost, so that decoders joining during a burst of prompts are not counted as prompt cost)."""
        return self.engine.policy.step_seconds(rows, seqs)

    def _release(self, state: SequenceState) -> None:
        state.stop_drafting(self.pools)
        if not self.is_current():  # superseded: a newer batch freed this batch's slots and may hold them now
            state.slot = None
            return
        if state.slot is not None:
            self._keep_conversation(state)
            self.engine.runner.free(state.slot)
            state.slot = None

    def _keep_conversation(self, state: SequenceState) -> None:
        """The prompt and the answer whose K/V are in the slot into the prefix cache, so that a next turn
        resending both reuses them (the answer's K/V are the bits a prefill of it computes: row-invariant
        kernels). Its positions hold prompt + output in order; a stop may have cut the output short, so
        only what both hold is kept."""
        runner = self.engine.runner
        held = int(runner.cache.lengths.get(state.slot, 0))
        if runner.prefix_cache is None or held <= len(state.prompt) or not state.tokens:
            return  # no cache, or nothing past the prompt (kept when it was prefilled)
        seq = state.prompt + list(state.tokens)
        runner.remember(state.slot, seq[:min(held, len(seq))], state.scope)

    def _check_owner(self) -> None:
        if not self.is_current():
            raise RuntimeError("this generation was superseded by a newer batch on the same engine "
                               "(one batch drives an engine at a time)")


def _prior_key(context: str, option: str, greedy: bool, spec: LookaheadSpec, engine_spec: LookaheadSpec) -> str:
    """The server-wide acceptance prior a sequence's steps share: by context and draft option, and
    apart for sampled requests (accepted less often) and for requests with another spec than the
    engine's (an explicit (2,2,1) accepts at most one draft: its steps must not teach ``auto``, which
    drafts within the engine's spec, what a (2,4,2) step accepts).

    >>> e = LookaheadSpec(2, 4, 2)
    >>> _prior_key("fresh", "full", True, e, e), _prior_key("fresh", "full", False, LookaheadSpec(2, 2, 1), e)
    ('fresh/full', 'sampled-fresh/full@2,2,1')
    """
    kind = "" if greedy else "sampled-"
    return f"{kind}{context}/{option}" + ("" if spec == engine_spec else f"@{spec}")


class _RepeatIndex:
    """Whether the last two tokens of a sequence occurred earlier in it (O(1) per token).

    >>> index = _RepeatIndex([5, 6, 7])
    >>> index.repeating(), index.extend([5, 6]), index.repeating(), index.extend([9]), index.repeating()
    (False, None, True, None, False)
    """

    def __init__(self, tokens: Sequence[int]) -> None:
        self._seen: set[tuple[int, int]] = set()
        self._last: list[int] = []
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        last = self._last
        for token in tokens:
            if len(last) == 2:
                self._seen.add((last[0], last[1]))  # the bigram that ended before this token
                last.pop(0)
            last.append(int(token))

    def repeating(self) -> bool:
        return len(self._last) == 2 and (self._last[0], self._last[1]) in self._seen


def _resolve_policy(request: GenerationRequest, adaptive: bool) -> str:
    """The request's draft policy: its own, else ``auto`` for an engine-default spec on an adaptive
    engine, else ``fixed``.

    >>> _resolve_policy(GenerationRequest(prompt_ids=(1,), max_tokens=1), adaptive=True)
    'auto'
    >>> _resolve_policy(GenerationRequest(prompt_ids=(1,), max_tokens=1, lookahead=LookaheadSpec(2, 2, 1)), True)
    'fixed'
    """
    if request.policy is not None:
        return request.policy
    return "auto" if adaptive and request.lookahead is None else "fixed"


"""What the server and the bench need from an engine: data types shared by every engine.

These are plain dataclasses (no torch). An engine takes a :class:`GenerationRequest` and yields one
:class:`StepChunk` per decoding step (all tokens accepted in that step), the last one carrying
``finish_reason`` and the :class:`GenerationStats`.

Worked example: a lookahead step that accepts 2 drafts emits 3 tokens at once::

    StepChunk(tokens=[791, 4522, 13], text=" the cat.", finish_reason=None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Literal, Optional

from trtlade.drafting.config import DraftConfig
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import LookaheadSpec

FinishReason = Literal["stop", "length"]

#: How a request's drafts are run, step by step (see :class:`GenerationRequest`).
DraftPolicy = Literal["fixed", "auto", "schedule"]
DRAFT_POLICIES: tuple[str, ...] = ("fixed", "auto", "schedule")

__all__ = ["FinishReason", "DraftPolicy", "CacheScope", "CACHE_SCOPES", "DRAFT_POLICIES", "GenerationRequest",
           "GenerationStats", "StepChunk",
           "GenerationResult", "TokenLogprob", "MAX_TOP_LOGPROBS", "StepReport",
           "SamplingParams", "SAMPLING_RANGES", "sampling_bounds"]

#: Most alternatives per token a request may ask for (``logprobs`` / ``top_logprobs``).
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprob:
    """A token's log probability under the model (log_softmax of its logits row, before any
    sampling transform) and the ``top`` most likely tokens of that row with theirs, best first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


#: the warpers' ranges, field -> (lowest, highest, whether the lowest itself is allowed): OpenAI's and
#: vLLM's. The HTTP layer's request model and the reference engine's request check both read them.
SAMPLING_RANGES: dict[str, tuple[float, float, bool]] = {
    "top_p": (0.0, 1.0, False), "min_p": (0.0, 1.0, True),
    "presence_penalty": (-2.0, 2.0, True), "frequency_penalty": (-2.0, 2.0, True),
    "repetition_penalty": (0.0, 2.0, False),
}


def sampling_bounds(name: str) -> dict[str, float]:
    """A warper's range as pydantic ``Field`` bounds.

    >>> sampling_bounds("top_p"), sampling_bounds("min_p")
    ({'gt': 0.0, 'le': 1.0}, {'ge': 0.0, 'le': 1.0})
    """
    low, high, closed = SAMPLING_RANGES[name]
    return {"ge" if closed else "gt": low, "le": high}


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """A request's warpers and seed: what decides which token a row's logits give. The rule that
    applies them (in vLLM's order) is :mod:`trtlade.reference.sampling`'s; a
    :class:`GenerationRequest` is one of these plus the rest of the request.

    ``temperature`` 0: the argmax (of the penalised logits), no draw and no seed. ``top_k`` and
    ``min_p`` 0: off; ``repetition_penalty`` 1.0: off. ``seed`` None on a sampled request: the engine
    picks one and reports it (``GenerationStats.seed``).

    >>> SamplingParams().greedy, SamplingParams(temperature=0.7).greedy, SamplingParams(frequency_penalty=1).plain
    (True, False, False)
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax (of the penalised logits), no draw."""
        return not self.temperature > 0

    @property
    def penalised(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)

    @property
    def plain(self) -> bool:
        """Plain greedy decoding: the argmax of the raw logits (the engine's path before sampling existed)."""
        return self.greedy and not self.penalised


#: How far an engine's prefix cache shares a prompt's cached blocks (``serve.prefix_cache_scope``).
CACHE_SCOPES = ("identity", "salt", "global")


@dataclass(frozen=True)
class CacheScope:
    """Which requests may reuse each other's cached prompt blocks and draft from each other's text, decided by
    the server (never by the client alone): ``kind`` is the server's ``prefix_cache_scope``; ``identity`` the
    API key's name (None: no keys); ``salt`` the request's ``cache_salt``. Two requests share blocks and
    drafter pools only when their :attr:`namespace` is equal; ``None`` means they share none.

    >>> CacheScope("global").namespace, CacheScope("global", None, "s1").namespace
    (('global',), ('global', 's1'))
    >>> CacheScope("global", "alice", "s1").namespace == CacheScope("global", "bob", "s1").namespace
    False
    >>> CacheScope("identity", "alice").namespace == CacheScope("identity", "bob").namespace
    False
    >>> CacheScope("salt", "alice", "s1").namespace, CacheScope("salt", "alice").namespace
    (('salt', 'alice', 's1'), None)

    ``global``: one namespace (a ``cache_salt`` splits it, as vLLM's does; with API keys the salt is combined
    with the caller's identity, so a copied salt never crosses an identity); ``identity``: one per API key
    (a salt splits it further); ``salt``: only requests of the same key sending the same ``cache_salt``
    share, a request without one reuses nothing and leaves nothing.
    """

    kind: str = "global"
    identity: Optional[str] = None
    salt: Optional[str] = None

    @property
    def namespace(self) -> Optional[tuple[str, ...]]:
        if self.kind == "global":
            if self.salt is None:
                return ("global",)
            return ("global", self.salt) if self.identity is None else ("global", self.identity, self.salt)
        if self.kind == "identity":
            return ("identity", self.identity or "") + (() if self.salt is None else (self.salt,))
        return None if self.salt is None else ("salt", self.identity or "", self.salt)

    def draft_space(self, owner: Hashable) -> Hashable:
        """The drafters' pools a request of this scope drafts from: its :attr:`namespace`, or, where that is
        None (shares nothing), a space of its own (``owner``: the request's key).

        >>> CacheScope("salt", "alice").draft_space(7), CacheScope("identity", "bob").draft_space(7)
        (('own', 7), ('identity', 'bob'))
        """
        space = self.namespace
        return ("own", owner) if space is None else space

    @property
    def label(self) -> str:
        """The namespace's kind, for metrics (never a key name or a salt): ``global``, ``identity`` or
        ``salt`` (any namespace a salt splits)."""
        return "salt" if self.salt is not None else self.kind


@dataclass(frozen=True)
class GenerationRequest(SamplingParams):
    """One sequence to generate.

    ``lookahead``: the per-request (w,n,g); None = the engine's default request spec; (1,1,0) = off.
    ``band``: which band of the server's lookahead schedule chose ``lookahead`` (set by the engine at
    admission; None: the request named its own spec, or there is no schedule). ``load``: how many
    requests the server holds, this one included, counted from their arrival (the HTTP layer's
    count: arrived requests still being read or tokenized are in flight too); None: unknown.
    ``stop``: stop strings (the text is trimmed before the stop string); ``stop_token_ids``: extra
    token ids that end generation like EOS. ``ignore_eos``: EOS does not end generation.

    ``policy``: how the drafts of ``lookahead`` run, step by step. ``"fixed"``: every step verifies
    them. ``"auto"``: each step the engine's auto policy decides, for the whole batch, whether this
    sequence verifies them or runs its golden row only (:mod:`trtlade.reference.adaptive`).
    ``"schedule"``: ``schedule`` chose ``lookahead`` at admission; at each step the drafts run only
    while the band for the requests in flight then is not (1,1,0). None: ``"auto"`` when
    ``lookahead`` is None and the engine is adaptive, else ``"fixed"``. Lossless in every case.

    Sampling (the :class:`SamplingParams` fields, keyword-only): ``temperature > 0`` samples, every
    draw keyed by (``seed``, position), so lookahead emits exactly what plain sampling does with the
    same seed (reference engine, :mod:`trtlade.reference.sampling`).

    ``speculation``: draft with NGram or SA instead of Lookahead (:class:`~trtlade.drafting.config.DraftConfig`,
    TensorRT-LLM's ``speculative_config`` block); ``lookahead`` is then None. Verified by the same exact path.
    """

    prompt_ids: tuple[int, ...]
    max_tokens: int
    lookahead: Optional[LookaheadSpec] = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    band: Optional[int] = None
    load: Optional[int] = None
    policy: Optional[DraftPolicy] = None
    schedule: Optional[LookaheadSchedule] = None
    #: log probabilities of the generated tokens, with this many alternatives each (None: none)
    logprobs: Optional[int] = None
    #: log probabilities of the prompt tokens (from the second on), with this many alternatives
    prompt_logprobs: Optional[int] = None
    #: NGram or SA drafting (TensorRT-LLM's speculative_config) instead of Lookahead
    speculation: Optional[DraftConfig] = None
    #: which requests' cached prompt blocks this one may reuse and share (None: the global namespace)
    cache_scope: Optional[CacheScope] = None


@dataclass
class GenerationStats:
    """What one generation did. ``tokens_per_step`` is the acceptance length (1.0 = no gain)."""

    spec: LookaheadSpec
    steps: int = 0
    tokens: int = 0
    tokens_per_step_hist: dict[int, int] = field(default_factory=dict)
    rows_per_step: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    #: prompt tokens whose K/V came from the prefix cache (not computed by this request's prefill);
    #: None where the engine keeps no prefix cache
    cached_tokens: Optional[int] = None
    prefill_s: float = 0.0
    decode_s: float = 0.0
    #: seconds from being queued in a batch to the start of its prefill
    queue_s: float = 0.0
    #: how the drafts ran (``fixed``, ``auto``, ``schedule``); None where the engine does not say
    policy: Optional[str] = None
    #: the seed every draw was keyed by (a sampled request's own, or the random one it was given);
    #: None for greedy decoding
    seed: Optional[int] = None
    #: the NGram or SA drafter that ran (None: Lookahead's ``spec``), and the draft tokens it verified (None where
    #: the engine does not say: a TensorRT-LLM release whose outputs carry no request_perf_metrics)
    speculation: Optional[DraftConfig] = None
    draft_tokens: Optional[int] = 0
    #: Lookahead: accepted drafts by where the accepted path's last draft came from (``window``, ``pool``,
    #: ``prompt_lookup``, ``suffix``, ``public``)
    accepted_from: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def drafter(self) -> str:
        """``Lookahead`` (``spec``; plain decoding when it is (1,1,0)), ``NGram`` or ``SA``."""
        return self.speculation.decoding_type if self.speculation is not None else "Lookahead"

    @property
    def decode_steps(self) -> int:
        """Steps after the prefill (which emits the first token)."""
        return max(0, self.steps - 1)

    @property
    def accepted_drafts(self) -> int:
        """Draft tokens accepted: every step emits one token plus the drafts it accepted."""
        return max(0, self.tokens - self.steps)

    @property
    def draft_rows(self) -> int:
        """Rows computed beyond the golden token, summed over steps."""
        return sum(r - 1 for r in self.rows_per_step)

    @property
    def decode_tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "steps": self.steps,
            "tokens": self.tokens,
            "tokens_per_step": round(self.tokens_per_step, 4),
            "tokens_per_step_hist": {str(k): v for k, v in sorted(self.tokens_per_step_hist.items())},
            "mean_rows_per_step": round(sum(self.rows_per_step) / len(self.rows_per_step), 3)
            if self.rows_per_step else 0.0,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prefill_s": self.prefill_s,
            "decode_s": self.decode_s,
            "queue_s": self.queue_s,
            **({"seed": self.seed} if self.seed is not None else {}),
        }


@dataclass(frozen=True)
class StepChunk:
    """The tokens one engine step produced (after stop/budget trimming), and their text."""

    tokens: list[int]
    text: str = ""
    finish_reason: Optional[FinishReason] = None
    stats: Optional[GenerationStats] = None
    #: one per token, when the request asked for logprobs
    logprobs: Optional[list[TokenLogprob]] = None
    #: the first chunk only, when asked: one per prompt token (None for the first: nothing precedes it)
    prompt_logprobs: Optional[list[Optional[TokenLogprob]]] = None


@dataclass
class GenerationResult:
    """A whole generation: new token ids, their text, why it ended and what it did."""

    tokens: list[int]
    text: str
    finish_reason: FinishReason
    stats: GenerationStats

    @property
    def steps(self) -> int:
        return self.stats.steps


@dataclass
class StepReport:
    """What one batched engine step did (:meth:`trtlade.reference.batching.Batch.step`), for metrics
    and benchmarks: ``running`` sequences in its forward pass, ``rows`` computed, ``dropped_drafts``
    draft rows dropped for ``max_num_tokens``, ``prefills`` / ``prefill_tokens`` admitted, the seconds
    spent, and what the auto policy did."""

    running: int = 0
    rows: int = 0
    dropped_drafts: int = 0
    prefills: int = 0
    prefill_tokens: int = 0
    seconds: float = 0.0
    #: seconds each request prefilled in this step waited from being added to its prefill
    queue_waits: list[float] = field(default_factory=list)
    #: the auto policy's choice this step: sequences it let draft / kept to their golden row / whose
    #: chosen option had no draft this step, the accepted drafts it expected from those that drafted,
    #: and the ones they got
    auto_drafted: int = 0
    auto_skipped: int = 0
    auto_empty: int = 0
    expected_accepted: float = 0.0
    accepted: int = 0

"""OpenAI response bodies and per-request metrics, as plain functions of the request and its output.

A completion's choice carries ``text``; a chat completion's carries ``message`` (whole) or ``delta``
(streamed; the first delta also says ``"role": "assistant"``). ``usage`` adds trtlade's
``lookahead`` block when the engine reports one::

    >>> from trtlade.contract.protocol import GenerationStats
    >>> from trtlade.spec import LookaheadSpec
    >>> usage(5, 6, GenerationStats(spec=LookaheadSpec(2, 2, 1), steps=4, tokens=6))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'prompt_tokens': 5, 'completion_tokens': 6, 'total_tokens': 11,
     'lookahead': {'spec': {'w': 2, 'n': 2, 'g': 1}, 'steps': 4, 'tokens_per_step': 1.5}}
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from trtlade.contract.protocol import GenerationStats, StepChunk, TokenLogprob
from trtlade.contract.text import PROMPT_CONTEXT_TOKENS
from trtlade.server.admission import PreparedRequest
from trtlade.server.metrics import ServerMetrics

__all__ = ["RequestTracker", "chat_logprobs", "chunk_event", "completion_body", "completion_logprobs",
           "cached_once", "endpoint_label", "merged_stats", "speculation_usage", "usage", "usage_event"]


def endpoint_label(kind: str) -> str:
    """The metrics label of an endpoint kind."""
    return "completions" if kind == "completion" else "chat_completions"


def usage(prompt_tokens: int, completion_tokens: int, stats: Optional[GenerationStats]) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    if stats is not None and stats.cached_tokens is not None:  # OpenAI's field; absent without a prefix cache
        body["prompt_tokens_details"] = {"cached_tokens": cached_once(prompt_tokens, stats)}
    if stats is not None and stats.speculation is None:
        body["lookahead"] = {"spec": stats.spec.to_wire(), "steps": stats.steps,
                             "tokens_per_step": round(stats.tokens_per_step, 4)}
        if stats.policy is not None:
            body["lookahead"]["policy"] = stats.policy
        if stats.seed is not None:
            body["lookahead"]["seed"] = stats.seed
        if stats.accepted_from:
            body["lookahead"]["accepted_from"] = dict(sorted(stats.accepted_from.items()))
    if stats is not None and stats.speculation is not None:
        body["speculation"] = speculation_usage(stats)
    return body


def speculation_usage(stats: GenerationStats) -> dict[str, Any]:
    """``usage.speculation`` of an NGram / SA request: its drafter, settings and figures (every generation of
    the request summed).

    >>> from trtlade.drafting.config import DraftConfig
    >>> from trtlade.spec import AUTOREGRESSIVE
    >>> sa = DraftConfig.parse({"decoding_type": "SA", "max_draft_len": 4})
    >>> speculation_usage(GenerationStats(spec=AUTOREGRESSIVE, steps=5, tokens=9, speculation=sa, draft_tokens=12))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'decoding_type': 'SA', 'config': {'decoding_type': 'SA', 'max_draft_len': 4, 'max_matching_ngram_size': -1,
     'enable_global_pool': False}, 'decode_steps': 4, 'draft_tokens': 12, 'accepted_draft_tokens': 4,
     'tokens_per_step': 1.8}
    """
    assert stats.speculation is not None
    return {"decoding_type": stats.drafter, "config": stats.speculation.to_wire(),
            "decode_steps": stats.decode_steps, "draft_tokens": stats.draft_tokens,
            "accepted_draft_tokens": stats.accepted_drafts, "tokens_per_step": round(stats.tokens_per_step, 4)}


#: A scored token: its id and its log probability (None for the first prompt token: nothing precedes it).
Scored = tuple[int, Optional[TokenLogprob]]


#: A token's text where it stands: ``piece(token, before)``, ``before`` the ids before it (none at the text's start)
Piece = Callable[[int, tuple[int, ...]], str]
#: how many ids before a token its text is read after (the output's own decoding reads as many)
CONTEXT = PROMPT_CONTEXT_TOKENS


def completion_logprobs(scored: Sequence[Scored], piece: Piece, offset: int = 0,
                        before: tuple[int, ...] = (), given: Sequence[str] = (),
                        given_piece: Optional[Piece] = None) -> dict[str, Any]:
    """The completions ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset; each token's text
    where it stands (after the ids before it: ``before`` for the first), or, for the first ``len(given)`` tokens (an
    echoed prompt's), the text ``given`` for it, its alternatives' by ``given_piece`` (special tokens keeping their
    text there, as the echoed prompt does). As OpenAI's, each ``top_logprobs`` entry
    holds the chosen token too where it is not among the k most likely (a sampled token, or greedy under a
    penalty): up to k + 1 entries.

    >>> completion_logprobs([(5, None), (7, TokenLogprob(7, -0.5, ((7, -0.5), (8, -1.0)))),
    ...                      (9, TokenLogprob(9, -2.0, ((8, -0.3),)))], lambda t, before: f"<{t}>")
    ... # doctest: +NORMALIZE_WHITESPACE
    {'tokens': ['<5>', '<7>', '<9>'], 'token_logprobs': [None, -0.5, -2.0],
     'top_logprobs': [None, {'<7>': -0.5, '<8>': -1.0}, {'<8>': -0.3, '<9>': -2.0}], 'text_offset': [0, 3, 6]}
    """
    tokens, values, tops, offsets = [], [], [], []
    for i, (token, lp) in enumerate(scored):
        echoed = i < len(given)
        text = given[i] if echoed else piece(token, before)
        tokens.append(text)
        values.append(lp.logprob if lp is not None else None)
        alternative = (given_piece or piece) if echoed else piece
        top = {text if t == token else alternative(t, before): v for t, v in lp.top} if lp is not None else None
        if top is not None:
            top.setdefault(text, lp.logprob)  # type: ignore[union-attr]
        tops.append(top)
        offsets.append(offset)
        offset += len(text)
        before = (*before, token)[-CONTEXT:]
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(scored: Sequence[Scored], piece: Piece, raw: Optional[Callable[[int], bytes]] = None,
                  before: tuple[int, ...] = ()) -> dict[str, Any]:
    """The chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``, each token's text
    where it stands; ``raw``: a token's own bytes where it is part of a character (an emoji's first token is not
    U+FFFD's bytes), else its text's UTF-8."""

    def entry(token: int, logprob: float, at: tuple[int, ...]) -> dict[str, Any]:
        text = piece(token, at)
        return {"token": text, "logprob": logprob,
                "bytes": list(raw(token) if raw is not None and "\ufffd" in text else text.encode("utf-8"))}

    content = []
    for token, lp in scored:
        if lp is not None:
            content.append({**entry(token, lp.logprob, before),
                            "top_logprobs": [entry(t, v, before) for t, v in lp.top]})
        before = (*before, token)[-CONTEXT:]
    return {"content": content}


def _object(prepared: PreparedRequest, streamed: bool) -> str:
    if prepared.kind == "completion":
        return "text_completion"
    return "chat.completion.chunk" if streamed else "chat.completion"


def merged_stats(stats: list[GenerationStats]) -> Optional[GenerationStats]:
    """One request's lookahead figures over its generations (several prompts or samples): the
    first one's spec, steps and tokens summed; None without any."""
    if not stats:
        return None
    if len(stats) == 1:
        return stats[0]
    return GenerationStats(spec=stats[0].spec, steps=sum(s.steps for s in stats), tokens=sum(s.tokens for s in stats),
                           policy=stats[0].policy, seed=stats[0].seed, speculation=stats[0].speculation,
                           draft_tokens=None if any(s.draft_tokens is None for s in stats)
                           else sum(s.draft_tokens or 0 for s in stats),
                           accepted_from={k: sum(s.accepted_from.get(k, 0) for s in stats)
                                          for k in sorted({k for s in stats for k in s.accepted_from})},
                           cached_tokens=None if all(s.cached_tokens is None for s in stats)
                           else sum(s.cached_tokens or 0 for s in stats),
                           prompt_tokens=sum(s.prompt_tokens for s in stats))


def cached_once(prompt_tokens: int, stats: GenerationStats) -> int:
    """A request's cached prompt tokens counted as its ``prompt_tokens`` count them, each prompt once: the
    generations' cached tokens (:func:`merged_stats`) scaled by the request's prompt tokens over theirs (``n``
    samples of a prompt each prefill it: their mean), at most ``prompt_tokens``. Three samples of a 40-token prompt
    that each found 39 cached: 39, not 117.

    >>> from trtlade.spec import LookaheadSpec
    >>> gens = [GenerationStats(spec=LookaheadSpec(1, 1, 0), prompt_tokens=40, cached_tokens=39) for _ in range(3)]
    >>> cached_once(40, merged_stats(gens)), cached_once(40, gens[0])
    (39, 39)
    """
    cached = stats.cached_tokens or 0
    if stats.prompt_tokens > prompt_tokens:
        cached = round(cached * prompt_tokens / stats.prompt_tokens)
    return min(cached, prompt_tokens)


def chunk_event(prepared: PreparedRequest, rid: str, created: int, text: str, finish: Optional[str],
                first: bool, running_usage: Optional[dict[str, Any]] = None, index: int = 0,
                logprobs: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """One streamed event (one engine step's text for choice ``index``). With ``include_usage`` its
    ``usage`` is null, or, with ``continuous_usage_stats`` too, the usage so far (``running_usage``),
    as vLLM sends it."""
    if prepared.kind == "completion":
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
    else:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    event: dict[str, Any] = {"id": rid, "object": _object(prepared, True), "created": created,
                             "model": prepared.model, "choices": [choice]}
    if prepared.include_usage:
        event["usage"] = running_usage if prepared.continuous_usage else None
    return event


def usage_event(prepared: PreparedRequest, rid: str, created: int, usage_: dict[str, Any]) -> dict[str, Any]:
    """The last streamed event with ``stream_options.include_usage``: no choices, the usage."""
    return {"id": rid, "object": _object(prepared, True), "created": created, "model": prepared.model,
            "choices": [], "usage": usage_}


def completion_body(prepared: PreparedRequest, rid: str, created: int,
                    choices: list[tuple[str, Optional[str], Optional[dict[str, Any]]]],
                    usage_: dict[str, Any]) -> dict[str, Any]:
    """A whole (non-streamed) response; ``choices``: (text, finish_reason, logprobs) by choice index."""
    out: list[dict[str, Any]] = []
    for index, (text, finish, logprobs) in enumerate(choices):
        if prepared.kind == "completion":
            out.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
        else:
            out.append({"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                        "finish_reason": finish})
    return {"id": rid, "object": _object(prepared, False), "created": created, "model": prepared.model,
            "choices": out, "usage": usage_}


class RequestTracker:
    """One request's timing and counts, fed to the metrics: TTFT, inter-chunk latency, tokens
    generated, and each generation's lookahead figures (a request may run several)."""

    def __init__(self, metrics: ServerMetrics, arrival: float,
                 on_done: Optional[Callable[[], None]] = None, *, prompt_tokens: int) -> None:
        self.metrics = metrics
        self.arrival = arrival
        self.on_done = on_done
        self.first_token_at: Optional[float] = None
        self.last_chunk_at: Optional[float] = None
        self.completion_tokens = 0  #: tokens generated (greedy copies of a choice counted once)
        #: each finished generation's figures, by its index (the first choice's first: its seed is the one reported)
        self.all_stats: dict[int, GenerationStats] = {}
        #: the request's prompt tokens, each prompt once (its cached ones are counted so in /metrics)
        self.prompt_tokens = prompt_tokens

    @property
    def stats(self) -> Optional[GenerationStats]:
        return merged_stats([self.all_stats[g] for g in sorted(self.all_stats)])

    def chunk(self, chunk: StepChunk, generation: int) -> None:
        now = time.monotonic()
        if chunk.tokens and self.first_token_at is None:
            self.first_token_at = now
            self.metrics.ttft.observe(now - self.arrival)
        if self.last_chunk_at is not None:
            self.metrics.inter_chunk.observe(now - self.last_chunk_at)
        self.last_chunk_at = now
        self.completion_tokens += len(chunk.tokens)
        self.metrics.completion_tokens.inc(len(chunk.tokens))
        if chunk.stats is not None:
            self.all_stats[generation] = chunk.stats

    def done(self, endpoint: str, status: int) -> None:
        if self.on_done is not None:
            self.on_done()
        self.metrics.finished(endpoint, status)
        self.metrics.duration.labels(endpoint=endpoint).observe(time.monotonic() - self.arrival)
        for stats in self.all_stats.values():
            self.metrics.lookahead(stats)
        merged = self.stats
        if merged is not None and merged.cached_tokens is not None:
            self.metrics.cached_tokens.inc(cached_once(self.prompt_tokens, merged))

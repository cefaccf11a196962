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
from trtlade.server.admission import PreparedRequest
from trtlade.server.metrics import ServerMetrics

__all__ = ["RequestTracker", "chat_logprobs", "chunk_event", "completion_body", "completion_logprobs",
           "endpoint_label", "merged_stats", "speculation_usage", "usage", "usage_event"]


def endpoint_label(kind: str) -> str:
    """The metrics label of an endpoint kind."""
    return "completions" if kind == "completion" else "chat_completions"


def usage(prompt_tokens: int, completion_tokens: int, stats: Optional[GenerationStats]) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    if stats is not None and stats.cached_tokens is not None:  # OpenAI's field; absent without a prefix cache
        body["prompt_tokens_details"] = {"cached_tokens": min(stats.cached_tokens, prompt_tokens)}
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


def completion_logprobs(scored: Sequence[Scored], piece: Callable[[int], str], offset: int = 0) -> dict[str, Any]:
    """The completions ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset.

    >>> completion_logprobs([(5, None), (7, TokenLogprob(7, -0.5, ((7, -0.5), (8, -1.0))))], lambda t: f"<{t}>")
    ... # doctest: +NORMALIZE_WHITESPACE
    {'tokens': ['<5>', '<7>'], 'token_logprobs': [None, -0.5],
     'top_logprobs': [None, {'<7>': -0.5, '<8>': -1.0}], 'text_offset': [0, 3]}
    """
    tokens, values, tops, offsets = [], [], [], []
    for token, lp in scored:
        text = piece(token)
        tokens.append(text)
        values.append(lp.logprob if lp is not None else None)
        tops.append({piece(t): v for t, v in lp.top} if lp is not None and lp.top else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(scored: Sequence[Scored], piece: Callable[[int], str],
                  raw: Optional[Callable[[int], bytes]] = None) -> dict[str, Any]:
    """The chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``; ``raw``: a token's
    own bytes (part of a character: an emoji's first token is not U+FFFD's bytes), else its text's UTF-8."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = piece(token)
        return {"token": text, "logprob": logprob,
                "bytes": list(raw(token) if raw is not None else text.encode("utf-8"))}

    return {"content": [{**entry(token, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]}
                        for token, lp in scored if lp is not None]}


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
                           else sum(s.cached_tokens or 0 for s in stats))


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
                 on_done: Optional[Callable[[], None]] = None) -> None:
        self.metrics = metrics
        self.arrival = arrival
        self.on_done = on_done
        self.first_token_at: Optional[float] = None
        self.last_chunk_at: Optional[float] = None
        self.completion_tokens = 0  #: tokens generated (greedy copies of a choice counted once)
        self.all_stats: list[GenerationStats] = []

    @property
    def stats(self) -> Optional[GenerationStats]:
        return merged_stats(self.all_stats)

    def chunk(self, chunk: StepChunk) -> None:
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
            self.all_stats.append(chunk.stats)

    def done(self, endpoint: str, status: int) -> None:
        if self.on_done is not None:
            self.on_done()
        self.metrics.finished(endpoint, status)
        self.metrics.duration.labels(endpoint=endpoint).observe(time.monotonic() - self.arrival)
        for stats in self.all_stats:
            self.metrics.lookahead(stats)

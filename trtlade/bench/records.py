"""Measurements of one streamed request, and the per-request numbers derived from them.

A :class:`RequestRecord` holds only what was observed (times relative to the request's start, usage
counts as the server reported them, status and error). The derived numbers (TTFT, TPOT, decode
throughput, inter-chunk latencies) are properties, so the definition lives in one place:

Worked example: a chat stream whose role-only chunk arrives at 5 ms, content chunks at 100, 140,
180 and 220 ms, and ``usage.completion_tokens = 10`` (so 2.5 tokens per chunk)::

    ttft      = 0.100 s                       (first chunk WITH content, not the role chunk)
    e2e       = 0.221 s                       (the last event: usage chunk and [DONE] at 221 ms)
    tpot      = (0.221 - 0.100) / (10 - 1)    = 13.4 ms    (vLLM's TPOT)
    decode    = (10 - 1) / (0.220 - 0.100)    = 75 tokens/s (first to last content chunk)
    itl       = [40, 40, 40] ms               (between content chunks)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Optional

__all__ = ["ErrorKind", "RequestRecord", "TokensSource"]

#: Why a request failed: HTTP status not 200, an error event inside the stream, the time bound,
#: no connection, or a malformed / truncated stream.
ErrorKind = Literal["http", "stream_error", "timeout", "connection", "protocol"]

#: Where the completion token count came from: the server's ``usage`` (the only source trusted), or,
#: when the server sent no usage, the number of content chunks (one token per chunk assumed).
TokensSource = Literal["usage", "chunks"]


@dataclass
class RequestRecord:
    """One request as observed by the load generator. Times are seconds since the request was sent."""

    series: str
    concurrency: int
    index: int
    prompt_index: int
    repeat: int = 0                          #: which repeat of the run (0-based)
    start: float = 0.0                       #: perf_counter() when sent (absolute; for the level's span)
    end: float = 0.0                         #: seconds from start until the stream closed or failed
    status: Optional[int] = None             #: HTTP status (None: no response)
    error: Optional[str] = None
    error_kind: Optional[ErrorKind] = None
    chunk_times: list[float] = field(default_factory=list)   #: arrival of each chunk WITH content
    first_event_time: Optional[float] = None  #: any first event (e.g. the role-only chat chunk)
    last_event_time: Optional[float] = None   #: the last event (usage chunk or [DONE])
    prompt_tokens: Optional[int] = None       #: from usage only
    completion_tokens: Optional[int] = None   #: from usage only
    usage_lookahead: Optional[dict[str, Any]] = None  #: usage.lookahead when the server sends it
    usage_speculation: Optional[dict[str, Any]] = None  #: usage.speculation (NGram / SA) when the server sends it
    category: Optional[str] = None            #: the prompt's category, when the dataset gives one
    cached_tokens: Optional[int] = None       #: usage.prompt_tokens_details.cached_tokens, when sent
    finish_reason: Optional[str] = None
    done: bool = False                        #: "data: [DONE]" was received
    output_chars: int = 0
    output_text: str = ""

    # ------------------------------------------------------------------ status
    @property
    def ok(self) -> bool:
        return self.error is None

    # ------------------------------------------------------------------ tokens
    @property
    def tokens_source(self) -> Optional[TokensSource]:
        if self.completion_tokens is not None:
            return "usage"
        return "chunks" if self.chunk_times else None

    @property
    def output_tokens(self) -> int:
        """``usage.completion_tokens``; without usage, the number of content chunks (see tokens_source)."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return len(self.chunk_times)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_times)

    @property
    def tokens_per_chunk(self) -> Optional[float]:
        """Mean tokens per content chunk; None without usage (the split is then unknown)."""
        if self.completion_tokens is None or not self.chunk_times:
            return None
        return self.completion_tokens / len(self.chunk_times)

    @property
    def tokens_per_step(self) -> Optional[float]:
        """Tokens per engine step as the server reported it (``usage.lookahead`` or ``usage.speculation``)."""
        for block in (self.usage_speculation, self.usage_lookahead):
            if isinstance(block, dict) and isinstance(block.get("tokens_per_step"), (int, float)):
                return float(block["tokens_per_step"])
        return None

    # ------------------------------------------------------------------ latencies (seconds)
    @property
    def ttft(self) -> Optional[float]:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def e2e(self) -> Optional[float]:
        """End-to-end latency: request sent -> last event of the stream (usage chunk or [DONE]), for every request
        that completed, an answer without text (its first token an end of sequence) included; None for a failed
        request without content."""
        if not self.chunk_times:
            return self.last_event_time if self.ok else None
        return max(self.chunk_times[-1], self.last_event_time or 0.0)

    @property
    def without_text(self) -> bool:
        """A completed request whose stream carried no content (no TTFT, TPOT or ITL: nothing arrived to time)."""
        return self.ok and not self.chunk_times

    @property
    def tpot(self) -> Optional[float]:
        """(E2E - TTFT) / (tokens - 1): time per output token after the first (vLLM's TPOT)."""
        n = self.output_tokens
        e2e, ttft = self.e2e, self.ttft
        if e2e is None or ttft is None or n < 2:
            return None
        return (e2e - ttft) / (n - 1)

    @property
    def decode_throughput(self) -> Optional[float]:
        """(tokens - 1) / (t_last - t_first) in tokens/s; None with one chunk or one token."""
        n = self.output_tokens
        if len(self.chunk_times) < 2 or n < 2:
            return None
        span = self.chunk_times[-1] - self.chunk_times[0]
        return (n - 1) / span if span > 0 else None

    @property
    def itls(self) -> list[float]:
        """Inter-chunk latencies: gaps between consecutive content chunks."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    # ------------------------------------------------------------------ serialisation
    def to_json(self, level_start: Optional[float] = None) -> dict[str, Any]:
        """Observed fields plus the derived numbers (ms / tokens per s), for per_request.jsonl; with ``level_start``
        (the first send of its level, as ``start``), ``sent_s``: its send in seconds from that one."""
        out = asdict(self)
        start = out.pop("start")
        if level_start is not None:
            out["sent_s"] = start - level_start
        out.update(
            ok=self.ok,
            tokens_source=self.tokens_source,
            output_tokens=self.output_tokens,  # the summary counts the same (usage, when the server sent it)
            num_chunks=self.num_chunks,
            tokens_per_chunk=self.tokens_per_chunk,
            ttft_ms=_ms(self.ttft),
            e2el_ms=_ms(self.e2e),
            tpot_ms=_ms(self.tpot),
            decode_throughput=self.decode_throughput,
            itl_ms=[x * 1e3 for x in self.itls],
        )
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RequestRecord":
        """A record from :meth:`to_json`'s dict; its ``start`` from ``sent_s`` where given (seconds from its
        level's first send: a level's timeline as it was)."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        if "start" not in kept and isinstance(data.get("sent_s"), (int, float)):
            kept["start"] = float(data["sent_s"])
        return cls(**kept)


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else seconds * 1e3

"""Aggregation of request records into one summary per (series, concurrency level).

Names follow ``vllm bench serve``: ``mean_ttft_ms``, ``median_tpot_ms``, ``p99_itl_ms``,
``request_throughput``, ``output_throughput`` ... Only completed requests enter latency statistics;
failed ones are counted (``failed``, ``failures_by_kind``, ``error_examples``), never dropped.

``aggregate_decode_throughput`` is the user's "Follow throughput" from grps_trtllm's
client/openai_benchmark.py: the mean over completed requests of the per-request decode throughput,
times the number of concurrent requests (the sum over the C requests in flight)::

    per request: (completion_tokens - 1) / (t_last_content_chunk - t_first_content_chunk)
    per level:   mean(per request) * min(concurrency, num_prompts)

Worked example: concurrency 2, per-request decode throughputs 20, 30, 25, 25 tok/s -> mean 25,
aggregate 50 tok/s.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from trtlade.bench.records import RequestRecord
from trtlade.drafting.config import DraftConfig, DraftConfigError
from trtlade.spec import LookaheadSpec, SpecError

__all__ = ["LATENCY_METRICS", "STATS", "LevelSummary", "percentile", "summarize_level"]

#: (name, unit) of every per-request distribution summarised with mean/median/std/p90/p99.
LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft", "ms"),
    ("tpot", "ms"),
    ("itl", "ms"),
    ("e2el", "ms"),
    ("decode_throughput", "tok/s"),
)
STATS: tuple[str, ...] = ("mean", "median", "std", "p90", "p99")

_MAX_ERROR_EXAMPLES = 3


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-th percentile with linear interpolation (numpy's default); None for no values.

    >>> percentile([1, 2, 3, 4], 50), percentile([1, 2, 3, 4], 90), percentile([7], 99)
    (2.5, 3.7, 7.0)
    """
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def _stats(values: Sequence[float]) -> dict[str, Optional[float]]:
    if not values:
        return {s: None for s in STATS}
    return {
        "mean": float(statistics.fmean(values)),
        "median": percentile(values, 50),
        "std": float(statistics.pstdev(values)) if len(values) > 1 else 0.0,
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


class LevelSummary(BaseModel):
    """Everything measured for one series (mode or server) at one concurrency level."""

    model_config = ConfigDict(extra="allow")

    series: str
    concurrency: int
    num_prompts: int
    repeat: int = 0
    completed: int
    failed: int
    failures_by_kind: dict[str, int] = {}
    error_examples: list[str] = []
    #: completed requests whose stream carried no text (an answer that is only an end of sequence): in E2EL and the
    #: throughputs, not in TTFT, TPOT or ITL
    completed_without_text: int = 0
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: Optional[float] = None
    total_input_tokens: Optional[int] = None
    total_output_tokens: int
    tokens_source: Optional[str] = None
    mean_tokens_per_chunk: Optional[float] = None
    mean_chunks_per_request: Optional[float] = None
    lookahead_specs: list[str] = []
    mean_lookahead_tokens_per_step: Optional[float] = None
    aggregate_decode_throughput: Optional[float] = None
    #: prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens) and
    #: their share of the prompt tokens of the requests that reported it; None: the server did not say
    cached_input_tokens: Optional[int] = None
    prefix_hit_rate: Optional[float] = None
    #: the server's own steps while this level ran (the reference engine's /metrics; None elsewhere): how many, their
    #: mean wall time, rows (drafts included) and running sequences a step
    engine_steps: Optional[int] = None
    engine_step_ms: Optional[float] = None
    engine_rows_per_step: Optional[float] = None
    engine_sequences_per_step: Optional[float] = None
    #: the cores busy on average while this level ran: the load generator's own (its process's CPU time over the
    #: level's wall time) and the server process's (its process_cpu_seconds_total; None where it exposes none)
    bench_cpu_cores: Optional[float] = None
    server_cpu_cores: Optional[float] = None
    #: as the load generator saw the level (failed requests included): the seconds from its last request's send to
    #: its last answer (its drain: no new request comes, fewer than the concurrency are in flight), and the requests
    #: in flight on average over its duration
    tail_s: Optional[float] = None
    mean_in_flight: Optional[float] = None

    mean_ttft_ms: Optional[float] = None
    median_ttft_ms: Optional[float] = None
    std_ttft_ms: Optional[float] = None
    p90_ttft_ms: Optional[float] = None
    p99_ttft_ms: Optional[float] = None
    mean_tpot_ms: Optional[float] = None
    median_tpot_ms: Optional[float] = None
    std_tpot_ms: Optional[float] = None
    p90_tpot_ms: Optional[float] = None
    p99_tpot_ms: Optional[float] = None
    mean_itl_ms: Optional[float] = None
    median_itl_ms: Optional[float] = None
    std_itl_ms: Optional[float] = None
    p90_itl_ms: Optional[float] = None
    p99_itl_ms: Optional[float] = None
    mean_e2el_ms: Optional[float] = None
    median_e2el_ms: Optional[float] = None
    std_e2el_ms: Optional[float] = None
    p90_e2el_ms: Optional[float] = None
    p99_e2el_ms: Optional[float] = None
    mean_decode_throughput: Optional[float] = None
    median_decode_throughput: Optional[float] = None
    std_decode_throughput: Optional[float] = None
    p90_decode_throughput: Optional[float] = None
    p99_decode_throughput: Optional[float] = None

    def metric(self, name: str) -> Optional[float]:
        value = getattr(self, name, None)
        return None if value is None else float(value)


def _distributions(done: list[RequestRecord]) -> dict[str, list[float]]:
    def ms(values: Iterable[Optional[float]]) -> list[float]:
        return [v * 1e3 for v in values if v is not None]

    return {
        "ttft": ms(r.ttft for r in done),
        "tpot": ms(r.tpot for r in done),
        "itl": ms(x for r in done for x in r.itls),
        "e2el": ms(r.e2e for r in done),
        "decode_throughput": [v for v in (r.decode_throughput for r in done) if v is not None],
    }


def _tokens_source(done: list[RequestRecord]) -> Optional[str]:
    sources = {r.tokens_source for r in done if r.tokens_source is not None}
    if not sources:
        return None
    return sources.pop() if len(sources) == 1 else "mixed"


def _lookahead_usage(done: list[RequestRecord]) -> tuple[list[str], Optional[float]]:
    """The drafters the server reported (a (w,n,g), or an NGram / SA block) and the mean tokens per step."""
    specs: list[str] = []
    for r in done:
        text = _drafter_text(r)
        if text is not None and text not in specs:
            specs.append(text)
    per_step = [t for t in (r.tokens_per_step for r in done) if t is not None]
    return specs, (statistics.fmean(per_step) if per_step else None)


def _drafter_text(record: RequestRecord) -> Optional[str]:
    """``4,2,4`` for usage.lookahead, ``SA(max_draft_len=4, longest match)`` for usage.speculation."""
    sp = record.usage_speculation
    if isinstance(sp, dict) and isinstance(sp.get("config"), dict):
        try:
            return str(DraftConfig.parse(sp["config"], ignored_ok=True))
        except DraftConfigError:
            return str(sp.get("decoding_type"))
    la = record.usage_lookahead
    if isinstance(la, dict) and la.get("spec") is not None:
        return _spec_text(la["spec"])
    return None


def _spec_text(spec: Any) -> str:
    """usage.lookahead.spec as ``w,n,g`` ({"w":4,"n":2,"g":4}, [4,2,4] and "4,2,4" alike)."""
    try:
        return str(LookaheadSpec.parse(spec))
    except SpecError:
        return str(spec)


def _errors(records: list[RequestRecord]) -> tuple[dict[str, int], list[str]]:
    failed = [r for r in records if not r.ok]
    kinds = Counter(str(r.error_kind) for r in failed)
    examples: list[str] = []
    for r in failed:
        if r.error and r.error not in examples:
            examples.append(r.error)
        if len(examples) >= _MAX_ERROR_EXAMPLES:
            break
    return dict(sorted(kinds.items())), examples


def _prefix_hits(done: list[RequestRecord]) -> tuple[Optional[int], Optional[float]]:
    """Cached prompt tokens and their share of the prompt tokens, over the requests that reported both."""
    told = [r for r in done if r.cached_tokens is not None and r.prompt_tokens]
    if not told:
        return None, None
    cached = sum(r.cached_tokens or 0 for r in told)
    return cached, round(cached / sum(r.prompt_tokens or 0 for r in told), 4)


def _finished(r: RequestRecord) -> float:
    """When ``r`` ended (perf_counter seconds, as its ``start``): a completed one's "data: [DONE]", else the close
    or failure of its stream."""
    return r.start + (r.last_event_time if r.ok and r.done and r.last_event_time is not None else r.end)


def _level_duration(records: list[RequestRecord]) -> float:
    """The first send to the last answer over all ``records`` (see :func:`summarize_level`); 0 for none."""
    if not records:
        return 0.0
    return max(max(_finished(r) for r in records) - min(r.start for r in records), 0.0)


def _in_flight(records: list[RequestRecord], duration: float) -> tuple[Optional[float], Optional[float]]:
    """The level's tail and its requests in flight, as the load generator saw them: ``(tail seconds, mean in
    flight)``. The tail runs from the last request's send to the last answer: no new request comes, so fewer
    requests than the concurrency are in flight (the level's drain). In flight on average: every request's time
    from its send to its end, summed, over the level's duration. (None, None) without records or duration.

    Concurrency 2, four requests: two sent at 0 (ending at 2 and 1), the third sent at 1 as the second ends (ending
    at 3), the last at 2 (ending at 3.5): the tail is 3.5 - 2 = 1.5 s of 3.5, and (2 + 1 + 2 + 1.5) / 3.5 = 1.86
    requests were in flight on average, of 2:

    >>> sent = [(0.0, 2.0), (0.0, 1.0), (1.0, 2.0), (2.0, 1.5)]
    >>> recs = [RequestRecord("ar", 2, i, i, start=s, end=e) for i, (s, e) in enumerate(sent)]
    >>> tail, flight = _in_flight(recs, _level_duration(recs))
    >>> tail, round(flight, 2)
    (1.5, 1.86)
    """
    if not records or duration <= 0:
        return None, None
    ends = [_finished(r) for r in records]
    tail = max(ends) - max(r.start for r in records)
    return max(tail, 0.0), sum(end - r.start for end, r in zip(ends, records)) / duration


def _latency_values(done: list[RequestRecord]) -> dict[str, Any]:
    """Every latency metric's statistics over the completed requests, keyed as :class:`LevelSummary` names them
    (``mean_ttft_ms``, ``p90_decode_throughput``, ...)."""
    values: dict[str, Any] = {}
    distributions = _distributions(done)
    for name, unit in LATENCY_METRICS:
        suffix = f"_{name}_ms" if unit == "ms" else f"_{name}"
        for stat, value in _stats(distributions[name]).items():
            values[stat + suffix] = value
    return values


def summarize_level(records: list[RequestRecord], *, series: str, concurrency: int,
                    num_prompts: int) -> LevelSummary:
    """Summarise the measured requests of one (series, concurrency) level.

    The level's duration is the first send to the last answer over ALL its requests (failed ones included: their
    stream's close or failure; a completed one's "data: [DONE]", not the close of a body a server held open after
    it); throughputs divide by it. Token counts come from ``usage``; a request without usage counts its content
    chunks instead (``tokens_source`` says which).
    """
    done = [r for r in records if r.ok]
    duration = _level_duration(records)
    out_tokens = sum(r.output_tokens for r in done)
    in_known = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    in_tokens = sum(in_known) if done and len(in_known) == len(done) else None
    per_chunk = [r.tokens_per_chunk for r in done if r.tokens_per_chunk is not None]
    failures, examples = _errors(records)
    specs, per_step = _lookahead_usage(done)
    cached, hit_rate = _prefix_hits(done)
    tail, in_flight = _in_flight(records, duration)

    values = _latency_values(done)
    effective = min(concurrency, num_prompts, len(done))  # a failed request decoded nothing: it is not summed
    mean_decode = values["mean_decode_throughput"]

    def rate(x: Optional[float]) -> float:
        return (x / duration) if (x is not None and duration > 0) else 0.0

    return LevelSummary(
        series=series,
        concurrency=concurrency,
        num_prompts=num_prompts,
        completed=len(done),
        completed_without_text=sum(r.without_text for r in done),
        failed=len(records) - len(done),
        failures_by_kind=failures,
        error_examples=examples,
        duration_s=duration,
        tail_s=tail,
        mean_in_flight=in_flight,
        request_throughput=rate(len(done)),
        output_throughput=rate(out_tokens),
        total_token_throughput=rate(out_tokens + in_tokens) if in_tokens is not None else None,
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        tokens_source=_tokens_source(done),
        mean_tokens_per_chunk=statistics.fmean(per_chunk) if per_chunk else None,
        mean_chunks_per_request=statistics.fmean([r.num_chunks for r in done]) if done else None,
        lookahead_specs=specs,
        mean_lookahead_tokens_per_step=per_step,
        aggregate_decode_throughput=mean_decode * effective if mean_decode is not None else None,
        cached_input_tokens=cached,
        prefix_hit_rate=hit_rate,
        **values,
    )

"""Prometheus metrics of one server (its own registry; nothing global), served at GET /metrics.

============================================  =========  =================================================
name                                          type       meaning
============================================  =========  =================================================
trtlade_requests_total{endpoint,status}       counter    finished requests by HTTP status; 499 = the
                                                         client went away before the end (cancelled)
trtlade_prompt_tokens_total                   counter    prompt tokens of admitted requests
trtlade_completion_tokens_total               counter    tokens generated (also for cancelled requests)
trtlade_time_to_first_token_seconds           histogram  arrival -> first chunk with tokens
trtlade_inter_chunk_latency_seconds           histogram  between consecutive chunks of a request
trtlade_request_duration_seconds{endpoint}    histogram  arrival -> last byte, admitted requests
trtlade_requests_running / _queued            gauge      in the engine now / waiting for it
trtlade_lookahead_steps_total{spec}           counter    decoding steps, by the request's (w,n,g)
trtlade_lookahead_draft_rows_total{spec}      counter    rows computed beyond the golden token
trtlade_lookahead_accepted_tokens_total{spec}  counter   draft tokens accepted (tokens - steps)
trtlade_lookahead_tokens_per_step{spec}       histogram  tokens emitted per decoding step (1..N)
trtlade_speculation_steps_total{drafter}      counter    decode steps (after the prefill) of NGram and SA
                                                         requests, by drafter (``NGram``, ``SA``)
trtlade_speculation_draft_tokens_total{drafter}  counter draft tokens they verified
trtlade_speculation_accepted_tokens_total{drafter}  counter  draft tokens accepted
trtlade_engine_info{engine,model,spec}        gauge      1; the engine's name, model and server (W,N,G)
trtlade_batch_steps_total                     counter    forward passes over running sequences (reference
                                                         engine; prefills not counted)
trtlade_batch_size                            histogram  running sequences in each such forward pass
trtlade_batch_step_seconds                    histogram  wall time of each such step (reference engine:
                                                         planning, the forward, verifying, handing its
                                                         tokens to the requests; prompt chunks beside
                                                         the decoding rows included)
trtlade_step_rows                             histogram  rows computed in each such forward pass, drafts
                                                         included (what max_num_tokens bounds)
trtlade_dropped_draft_rows_total              counter    draft rows dropped because max_num_tokens had no
                                                         room for them
trtlade_step_draft_rows                       histogram  draft rows in each such forward pass (its rows
                                                         beyond one per running sequence)
trtlade_auto_draft_decisions_total{decision}  counter    the auto policy's per-step choice for each
                                                         ``auto`` sequence: ``drafted``, ``skipped``
                                                         (golden row) or ``empty`` (the option chosen
                                                         had no draft this step: golden row)
trtlade_auto_expected_accepted_drafts_total   counter    accepted drafts the auto policy expected from
                                                         the sequences it let draft
trtlade_auto_accepted_drafts_total            counter    accepted drafts they actually got (compare the two)
trtlade_row_cost_seconds                      gauge      measured cost of one more row in a forward pass
                                                         (the auto policy's live cost model, reference
                                                         engine)
trtlade_queue_wait_seconds                    histogram  arrival -> start of the request's prefill
trtlade_schedule_requests_total{band,spec}    counter    requests whose (w,n,g) the lookahead schedule chose,
                                                         by band (requests in flight, e.g. ``3-8``) and spec
trtlade_schedule_band_in_force{band,spec}     gauge      1 for the band a request admitted now would get,
                                                         0 for the others (only with a schedule)
trtlade_prompt_cached_tokens_total            counter    prompt tokens whose K/V came from the prefix cache
                                                         (reference engine, serve.prefix_cache_mb)
trtlade_prefix_cache_bytes                    gauge      bytes of K/V the prefix cache holds (NaN: no cache)
trtlade_prefix_cache_token_hit_rate           gauge      cached / looked-up prompt tokens since the start
trtlade_prefix_cache_scope_bytes{scope}       gauge      the same bytes by namespace kind: ``global``,
                                                         ``identity``, ``salt`` (never per key or salt)
trtlade_prefix_cache_scope_token_hit_rate{scope}  gauge  the hit rate by namespace kind
process_cpu_seconds_total                     counter    the server process's CPU time (all its threads; the
                                                         standard process series of prometheus_client, Linux:
                                                         also ``process_resident_memory_bytes``, ``_open_fds``..)
============================================  =========  =================================================

``spec`` labels read ``w,n,g`` (``4,2,4``; ``1,1,0`` = lookahead off). The ``trtlade_lookahead_*`` series count
Lookahead (and plain) requests; NGram and SA requests count in ``trtlade_speculation_*``.
"""

from __future__ import annotations

import re
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from trtlade.contract.protocol import CACHE_SCOPES, GenerationRequest, GenerationStats, StepReport
from trtlade.schedule import LookaheadSchedule

#: prometheus_client's `<name>_created` lines (the creation time beside every counter and histogram): series the
#: metrics reference does not list and no dashboard reads, left out of trtlade's exposition (its switch,
#: disable_created_metrics, is the whole process's: another registry in it keeps them)
_CREATED = re.compile(rb"^(?:# (?:HELP|TYPE) )?\w+_created[ {]")

__all__ = ["ServerMetrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0,
                    10.0, 20.0, 40.0, 80.0)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
_TOKENS_PER_STEP_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)
_ROWS_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048)
_STEP_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


class ServerMetrics:
    """All metrics of one app. ``load`` returns (running, queued) for the gauges at scrape time."""

    def __init__(self, load: Callable[[], tuple[int, int]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._request_series(self.registry)
        self._load = load or (lambda: (0, 0))
        self.running = Gauge("trtlade_requests_running", "Requests the engine is prefilling or generating now.",
                             registry=self.registry)
        self.running.set_function(lambda: self._load()[0])
        self.queued = Gauge("trtlade_requests_queued", "Requests waiting for the engine.", registry=self.registry)
        self.queued.set_function(lambda: self._load()[1])
        self._drafting_series(self.registry)
        self._step_series(self.registry)
        self._auto_series(self.registry)
        self._cache_series(self.registry)
        ProcessCollector(registry=self.registry)  # the process's CPU seconds and memory (read from /proc: Linux)
        self._schedule: LookaheadSchedule | None = None

    def _request_series(self, r: CollectorRegistry) -> None:
        """Requests, their tokens and their latencies."""
        self.requests = Counter("trtlade_requests", "Finished requests by endpoint and HTTP status "
                                "(499: client disconnected before the end).", ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("trtlade_prompt_tokens", "Prompt tokens of admitted requests.", registry=r)
        self.completion_tokens = Counter("trtlade_completion_tokens", "Generated tokens.", registry=r)
        self.ttft = Histogram("trtlade_time_to_first_token_seconds", "Arrival to the first chunk with tokens.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.inter_chunk = Histogram("trtlade_inter_chunk_latency_seconds",
                                     "Time between consecutive chunks (engine steps) of a request.",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.duration = Histogram("trtlade_request_duration_seconds", "Arrival to the end of admitted requests.",
                                  ["endpoint"], buckets=_DURATION_BUCKETS, registry=r)
        self.queue_wait = Histogram("trtlade_queue_wait_seconds", "Arrival to the start of the prefill.",
                                    buckets=_LATENCY_BUCKETS, registry=r)

    def _drafting_series(self, r: CollectorRegistry) -> None:
        """What the drafting did: Lookahead (and plain) requests by (w,n,g), NGram and SA by drafter."""
        self.la_steps = Counter("trtlade_lookahead_steps", "Decoding steps, by the request's (w,n,g).",
                                ["spec"], registry=r)
        self.la_draft_rows = Counter("trtlade_lookahead_draft_rows",
                                     "Rows computed beyond the golden token, by (w,n,g).", ["spec"], registry=r)
        self.la_accepted = Counter("trtlade_lookahead_accepted_tokens",
                                   "Accepted draft tokens (generated tokens minus steps), by (w,n,g).",
                                   ["spec"], registry=r)
        self.la_tokens_per_step = Histogram("trtlade_lookahead_tokens_per_step",
                                            "Tokens emitted per decoding step, by (w,n,g).", ["spec"],
                                            buckets=_TOKENS_PER_STEP_BUCKETS, registry=r)
        self.sp_steps = Counter("trtlade_speculation_steps", "Decode steps of NGram / SA requests, by drafter.",
                                ["drafter"], registry=r)
        self.sp_drafts = Counter("trtlade_speculation_draft_tokens", "Draft tokens NGram / SA requests verified, "
                                 "by drafter.", ["drafter"], registry=r)
        self.sp_accepted = Counter("trtlade_speculation_accepted_tokens", "Draft tokens NGram / SA requests "
                                   "accepted, by drafter.", ["drafter"], registry=r)

    def _step_series(self, r: CollectorRegistry) -> None:
        """The engine and its forward passes over the running sequences."""
        self.engine_info = Gauge("trtlade_engine_info", "The serving engine (value 1).",
                                 ["engine", "model", "spec"], registry=r)
        self.batch_steps = Counter("trtlade_batch_steps", "Forward passes over the running sequences.", registry=r)
        self.batch_size = Histogram("trtlade_batch_size", "Running sequences per forward pass.",
                                    buckets=_BATCH_BUCKETS, registry=r)
        self.step_seconds = Histogram("trtlade_batch_step_seconds", "Wall time of each step over the running "
                                      "sequences.", buckets=_STEP_BUCKETS, registry=r)
        self.step_rows = Histogram("trtlade_step_rows", "Rows computed per forward pass, drafts included.",
                                   buckets=_ROWS_BUCKETS, registry=r)
        self.draft_rows = Histogram("trtlade_step_draft_rows", "Draft rows per forward pass.",
                                    buckets=_ROWS_BUCKETS, registry=r)

    def _auto_series(self, r: CollectorRegistry) -> None:
        """The auto policy's choices and cost model, drafts dropped for room, the schedule's bands."""
        self.auto_decisions = Counter("trtlade_auto_draft_decisions", "The auto policy's per-step choice for "
                                      "each auto sequence.", ["decision"], registry=r)
        self.auto_expected = Counter("trtlade_auto_expected_accepted_drafts", "Accepted drafts the auto policy "
                                     "expected from the sequences it let draft.", registry=r)
        self.auto_accepted = Counter("trtlade_auto_accepted_drafts", "Accepted drafts of the sequences the "
                                     "auto policy let draft.", registry=r)
        self.row_cost = Gauge("trtlade_row_cost_seconds", "Measured cost of one more row in a forward pass "
                              "(the auto policy's cost model).", registry=r)
        self.dropped_drafts = Counter("trtlade_dropped_draft_rows",
                                      "Draft rows dropped because max_num_tokens had no room for them.", registry=r)
        self.schedule_requests = Counter("trtlade_schedule_requests", "Requests whose (w,n,g) the lookahead "
                                         "schedule chose, by band and spec.", ["band", "spec"], registry=r)
        self.band_in_force = Gauge("trtlade_schedule_band_in_force", "1 for the schedule band a request "
                                   "admitted now would get.", ["band", "spec"], registry=r)

    def _cache_series(self, r: CollectorRegistry) -> None:
        """The prefix cache: tokens reused, bytes held, hit rates by namespace kind."""
        self.cached_tokens = Counter("trtlade_prompt_cached_tokens", "Prompt tokens whose K/V came from the "
                                     "prefix cache.", registry=r)
        self.prefix_bytes = Gauge("trtlade_prefix_cache_bytes", "Bytes of K/V the prefix cache holds.", registry=r)
        self.prefix_hit_rate = Gauge("trtlade_prefix_cache_token_hit_rate", "Cached / looked-up prompt tokens.",
                                     registry=r)
        self.scope_bytes = Gauge("trtlade_prefix_cache_scope_bytes", "Bytes of K/V the prefix cache holds, by "
                                 "namespace kind (global, identity, salt; never per key).", ["scope"], registry=r)
        self.scope_hit_rate = Gauge("trtlade_prefix_cache_scope_token_hit_rate", "Cached / looked-up prompt "
                                    "tokens, by namespace kind (global, identity, salt).", ["scope"], registry=r)

    def set_schedule(self, schedule: LookaheadSchedule, band_in_force: Callable[[], int | None]) -> None:
        """Show the schedule: a gauge per band (1 = in force, read at scrape time) and, from then on,
        requests counted per band by :meth:`admitted`."""
        self._schedule = schedule
        for index, band in enumerate(schedule.bands):
            self.band_in_force.labels(band=schedule.label(index), spec=str(band.spec)).set_function(
                lambda index=index: 1.0 if band_in_force() == index else 0.0)
            self.schedule_requests.labels(band=schedule.label(index), spec=str(band.spec))

    def admitted(self, request: GenerationRequest) -> None:
        """Count a request the schedule placed (its ``band`` is set by the engine at admission)."""
        if self._schedule is not None and request.band is not None:
            band = self._schedule.bands[request.band]
            self.schedule_requests.labels(band=self._schedule.label(request.band), spec=str(band.spec)).inc()

    def set_load(self, load: Callable[[], tuple[int, int]]) -> None:
        self._load = load

    def set_engine(self, engine: str, model: str, spec: str) -> None:
        self.engine_info.labels(engine=engine, model=model, spec=spec).set(1)

    def finished(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()

    def lookahead(self, stats: GenerationStats) -> None:
        """Record what lookahead (or an NGram / SA drafter) did for one finished generation (its cached prompt
        tokens are counted per request, each prompt once: :class:`~trtlade.server.responses.RequestTracker`)."""
        if stats.speculation is not None:
            drafter = stats.drafter
            self.sp_steps.labels(drafter=drafter).inc(stats.decode_steps)
            if stats.draft_tokens is not None:
                self.sp_drafts.labels(drafter=drafter).inc(stats.draft_tokens)
            self.sp_accepted.labels(drafter=drafter).inc(stats.accepted_drafts)
            return
        label = str(stats.spec)
        self.la_steps.labels(spec=label).inc(stats.steps)
        self.la_draft_rows.labels(spec=label).inc(max(0, stats.draft_rows))
        self.la_accepted.labels(spec=label).inc(max(0, stats.tokens - stats.steps))
        hist = self.la_tokens_per_step.labels(spec=label)
        for tokens, count in stats.tokens_per_step_hist.items():
            for _ in range(int(count)):
                hist.observe(int(tokens))

    def batch_step(self, report: StepReport) -> None:
        """Record one engine step (called on the engine's worker thread)."""
        if report.running:
            self.batch_steps.inc()
            self.batch_size.observe(report.running)
            self.step_seconds.observe(report.seconds)
            self.step_rows.observe(report.rows)
            self.draft_rows.observe(report.rows - report.running)
        if report.auto_drafted or report.auto_skipped or report.auto_empty:
            self.auto_decisions.labels(decision="drafted").inc(report.auto_drafted)
            self.auto_decisions.labels(decision="skipped").inc(report.auto_skipped)
            self.auto_decisions.labels(decision="empty").inc(report.auto_empty)
            self.auto_expected.inc(report.expected_accepted)
            self.auto_accepted.inc(report.accepted)
        if report.dropped_drafts:
            self.dropped_drafts.inc(report.dropped_drafts)
        for wait in report.queue_waits:
            self.queue_wait.observe(wait)

    def set_live(self, live: Callable[[], dict]) -> None:
        """Read the engine's live cost model at scrape time (``live()["auto"]["row_cost_ms"]``)."""
        def row_cost() -> float:
            ms = (live().get("auto") or {}).get("row_cost_ms")
            return ms / 1000 if ms is not None else float("nan")

        def prefix(key: str) -> Callable[[], float]:
            return lambda: float((live().get("prefix_cache") or {}).get(key, float("nan")))
        self.row_cost.set_function(row_cost)
        self.prefix_bytes.set_function(prefix("bytes"))
        self.prefix_hit_rate.set_function(prefix("token_hit_rate"))
        for scope in CACHE_SCOPES:
            self.scope_bytes.labels(scope=scope).set_function(_scoped(live, scope, "bytes"))
            self.scope_hit_rate.labels(scope=scope).set_function(_scoped(live, scope, "token_hit_rate"))

    def render(self) -> bytes:
        return b"".join(line for line in generate_latest(self.registry).splitlines(keepends=True)
                        if not _CREATED.match(line))


def _scoped(live: Callable[[], dict], scope: str, key: str) -> Callable[[], float]:
    """A per-namespace-kind figure of the prefix cache at scrape time (0 for a kind not used yet; NaN: no cache)."""
    def read() -> float:
        cache = live().get("prefix_cache")
        if not cache:
            return float("nan")
        return float((cache.get("by_scope") or {}).get(scope, {}).get(key, 0.0))
    return read

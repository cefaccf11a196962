"""The closed-loop load generator: levels x series, warm-ups, and the per-level summaries.

Concurrency C means exactly C workers, each sending its next request as soon as its previous one
finished, until the level's ``num_prompts`` requests are done (the last ones run with fewer in
flight). Levels run in the order given; at each level every series runs in turn (``ar`` then
``lookahead`` at C=1, then both at C=2, ...), so slow drift of the machine hits all series alike.
Each (level, series) first sends ``num_warmups`` unmeasured requests (in the first repeat). With
``repeats`` R, the whole sweep runs R times, the series' order rotated by one each repeat (:func:`series_order`),
so that each speedup is measured R times, paired within a repeat (:mod:`trtlade.bench.noise`).

With ``prefix_cache`` "clear" (the default), each server's prefix cache is emptied before every
(level, series), after its warm-up -- ``POST /admin/prefix-cache/clear``, which ``trtlade serve`` has -- so that a
mode never finds the prompts of the mode before it (or of its warm-up) already computed; each series then
starts from the same empty cache and reuses only what its own requests share (a chat template's system
prompt, say). What each server answered is kept in :attr:`RunOutcome.prefix_cache`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Protocol, Sequence

import httpx

from trtlade.errors import TrtladeError
from trtlade.bench.client import make_client, stream_request
from trtlade.bench.datasets import Prompt
from trtlade.bench.metrics import LevelSummary, summarize_level
from trtlade.bench.plan import BenchPlan, Series, build_payload
from trtlade.bench.records import RequestRecord

__all__ = ["BenchAborted", "Progress", "RunOutcome", "run_plan", "run_plan_sync"]


class BenchAborted(TrtladeError, RuntimeError):
    """Every warm-up request of a series failed: measuring it would only count failures."""

    def __init__(self, series: str, records: list[RequestRecord]) -> None:
        errors = sorted({r.error or "?" for r in records})
        super().__init__(f"all {len(records)} warm-up request(s) of series {series!r} failed: "
                         + "; ".join(errors[:3]))
        self.series = series
        self.records = records


class Progress(Protocol):
    def start(self, series: str, concurrency: int, total: int, warmup: bool) -> None: ...
    def advance(self, record: RequestRecord) -> None: ...
    def finish(self, summary: Optional[LevelSummary]) -> None: ...


class _NoProgress:
    def start(self, series: str, concurrency: int, total: int, warmup: bool) -> None:
        pass

    def advance(self, record: RequestRecord) -> None:
        pass

    def finish(self, summary: Optional[LevelSummary]) -> None:
        pass


@dataclass
class RunOutcome:
    records: list[RequestRecord] = field(default_factory=list)
    summaries: list[LevelSummary] = field(default_factory=list)
    #: per server label: what clearing its prefix cache before each series gave ("cleared before each
    #: series", "no prefix cache (404)", ...); empty with prefix_cache "keep"
    prefix_cache: dict[str, str] = field(default_factory=dict)


async def clear_prefix_cache(client: httpx.AsyncClient, base_url: str, headers: dict[str, str],
                             timeout: float) -> str:
    """Ask the server at ``base_url`` to empty its prefix cache; says what happened."""
    try:
        reply = await client.post(base_url + "/admin/prefix-cache/clear", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"not cleared: {type(exc).__name__}: {exc}"
    if reply.status_code == 200:
        return "cleared before each series"
    if reply.status_code == 404:
        return "not cleared: the server has no prefix cache or no clear endpoint (HTTP 404)"
    return f"not cleared: HTTP {reply.status_code}"


#: The reference engine's step counters (``/metrics``): steps, their wall time, rows and running sequences
ENGINE_COUNTERS = ("trtlade_batch_step_seconds_count", "trtlade_batch_step_seconds_sum", "trtlade_step_rows_sum",
                   "trtlade_batch_size_sum")
#: The server process's CPU time (prometheus_client's process series, on Linux), read beside them where it is there
SERVER_CPU = "process_cpu_seconds_total"


class ServerReading(NamedTuple):
    """One read of a trtlade server's ``/metrics``: its step counters (:data:`ENGINE_COUNTERS`, in that order) and
    its process's CPU seconds (:data:`SERVER_CPU`; None where the server does not expose it)."""

    steps: float
    step_seconds: float
    rows: float
    sequences: float
    cpu_seconds: Optional[float] = None


async def engine_counters(client: httpx.AsyncClient, base_url: str, headers: dict[str, str],
                          timeout: float) -> Optional[ServerReading]:
    """The server's step counters and CPU time now (:class:`ServerReading`), or None where it has no step counters
    (another server, a /metrics that needs a key this run does not send, a tenant's copy of them, which moves with
    other tenants' requests and not with this run's, an error)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        reply = await client.get(base_url + "/metrics", headers=headers, timeout=timeout)
    except httpx.HTTPError:
        return None
    if reply.status_code != 200 or reply.headers.get("x-trtlade-metrics", "live") != "live":
        return None
    try:
        found = {sample.name: sample.value for family in text_string_to_metric_families(reply.text)
                 for sample in family.samples if sample.name in (*ENGINE_COUNTERS, SERVER_CPU) and not sample.labels}
    except ValueError:  # not Prometheus text (trtllm-serve's /metrics is JSON)
        return None
    if not all(name in found for name in ENGINE_COUNTERS):
        return None
    return ServerReading(*(found[name] for name in ENGINE_COUNTERS), cpu_seconds=found.get(SERVER_CPU))


def _steps_of(target: Any) -> bool:
    """Whether to read ``target``'s step counters around each level: a trtlade server only (its /version names it);
    another server's /metrics may be something a read takes away (trtllm-serve's hands out its iteration stats once).

    >>> from trtlade.bench.plan import Target
    >>> _steps_of(Target("a", "http://h", server_info={"trtlade": "0.3.0"})), _steps_of(Target("b", "http://h"))
    (True, False)
    """
    info = getattr(target, "server_info", None)
    return isinstance(info, dict) and "trtlade" in info


def engine_steps(before: Optional[Sequence[float]], after: Optional[Sequence[float]]) -> dict[str, float]:
    """What the engine's steps were between two readings: how many, their mean wall time (ms), rows and running
    sequences a step; empty where either reading is missing or no step ran.

    >>> engine_steps((10, 0.2, 10, 10), (110, 2.2, 400, 110))
    {'engine_steps': 100, 'engine_step_ms': 20.0, 'engine_rows_per_step': 3.9, 'engine_sequences_per_step': 1.0}
    """
    if before is None or after is None or after[0] <= before[0]:
        return {}
    steps = after[0] - before[0]
    return {"engine_steps": int(steps), "engine_step_ms": 1000 * (after[1] - before[1]) / steps,
            "engine_rows_per_step": (after[2] - before[2]) / steps,
            "engine_sequences_per_step": (after[3] - before[3]) / steps}


class _Clients:
    """One httpx client per worker (worker i always uses client i), kept across levels so that each
    worker's keep-alive connection is reused; they share one TLS context."""

    def __init__(self, plan: BenchPlan) -> None:
        self._plan = plan
        self._clients: list[httpx.AsyncClient] = []
        self._verify: "ssl.SSLContext | None" = None

    def get(self, count: int) -> list[httpx.AsyncClient]:
        if self._verify is None:
            # one TLS context for all workers: building one loads the CA store (~45 ms), which
            # httpx would otherwise do for every client, https or not
            self._verify = ssl.create_default_context()
        while len(self._clients) < count:
            self._clients.append(make_client(len(self._plan.targets), self._plan.timeout, verify=self._verify))
        return self._clients[:count]

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()


async def _closed_loop(clients: _Clients, plan: BenchPlan, series: Series, concurrency: int,
                       prompts: list[Prompt], progress: Progress, repeat: int = 0) -> list[RequestRecord]:
    """Run ``prompts`` with ``concurrency`` workers sending back to back; records in send order."""
    url = series.target.base_url + plan.endpoint.path
    headers = series.target.headers()
    bodies = [build_payload(p, series, plan) for p in prompts]
    records: list[Optional[RequestRecord]] = [None] * len(prompts)
    next_index = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            rec = RequestRecord(series=series.label, concurrency=concurrency, index=i,
                                prompt_index=prompts[i].index, repeat=repeat, category=prompts[i].category)
            await stream_request(client, url, bodies[i], headers, rec, kind=plan.endpoint.kind,
                                 timeout=plan.timeout)
            records[i] = rec
            progress.advance(rec)

    await asyncio.gather(*(worker(c) for c in clients.get(min(concurrency, len(prompts)))))
    return [r for r in records if r is not None]


def series_order(series: Sequence[Any], repeat: int) -> list[Any]:
    """The order of the series in ``repeat``: rotated by one each repeat, so that over M repeats every one of the M
    series runs once in every position (with two, the order alternates; reversing it instead kept the middle one of
    three always in the middle).

    >>> [''.join(series_order("abc", r)) for r in range(4)]
    ['abc', 'bca', 'cab', 'abc']
    """
    shift = repeat % len(series) if series else 0
    return list(series[shift:]) + list(series[:shift])


def cpu_use(before: Optional[ServerReading], after: Optional[ServerReading], wall_s: float,
            bench_cpu_s: float) -> dict[str, float]:
    """The cores busy on average while a level ran: the load generator's (this process's CPU time over the level's
    wall time) and the server process's (its :data:`SERVER_CPU` between two readings, where both have it).

    >>> cpu_use(ServerReading(1, 0, 1, 1, 10.0), ServerReading(9, 0, 9, 9, 28.0), 10.0, 2.5)
    {'bench_cpu_cores': 0.25, 'server_cpu_cores': 1.8}
    >>> cpu_use(None, None, 10.0, 2.5), cpu_use(ServerReading(1, 0, 1, 1), ServerReading(9, 0, 9, 9, 28.0), 10.0, 2.5)
    ({'bench_cpu_cores': 0.25}, {'bench_cpu_cores': 0.25})
    >>> cpu_use(ServerReading(9, 0, 9, 9, 28.0), ServerReading(2, 0, 2, 2, 1.0), 10.0, 2.5)  # restarted between them
    {'bench_cpu_cores': 0.25}
    >>> cpu_use(None, None, 0.0, 0.0)
    {}
    """
    if wall_s <= 0:
        return {}
    use = {"bench_cpu_cores": bench_cpu_s / wall_s}
    spent = None if before is None or after is None or before.cpu_seconds is None or after.cpu_seconds is None \
        else after.cpu_seconds - before.cpu_seconds
    if spent is not None and after.steps >= before.steps and spent >= 0:  # not across a restart
        use["server_cpu_cores"] = spent / wall_s
    return use


async def run_plan(plan: BenchPlan, progress: Optional[Progress] = None) -> RunOutcome:
    """Run every (level, series) of ``plan``; raise :class:`BenchAborted` if a series' first
    warm-up batch fails entirely (e.g. the server rejects the ``lookahead`` field)."""
    progress = progress or _NoProgress()
    outcome = RunOutcome()
    checked: set[str] = set()
    clients = _Clients(plan)
    try:
        for repeat in range(max(1, plan.repeats)):
            order = series_order(plan.series, repeat)
            for level in plan.levels:
                for series in order:
                    if plan.warmup_prompts and repeat == 0:
                        progress.start(series.label, level, len(plan.warmup_prompts), True)
                        warm = await _closed_loop(clients, plan, series, level, plan.warmup_prompts, progress)
                        progress.finish(None)
                        if series.label not in checked and not any(r.ok for r in warm):
                            raise BenchAborted(series.label, warm)
                        checked.add(series.label)
                    if plan.prefix_cache == "clear":  # after the warm-up, whose prompts may be measured ones too
                        target = series.target
                        outcome.prefix_cache[target.label] = await clear_prefix_cache(
                            clients.get(1)[0], target.base_url, target.headers(), min(plan.timeout, 30.0))
                    progress.start(series.label, level, len(plan.prompts), False)
                    target, probe = series.target, clients.get(1)[0]
                    steps = _steps_of(target)
                    before = await engine_counters(probe, target.base_url, target.headers(), 5.0) if steps else None
                    wall, cpu = time.perf_counter(), time.process_time()
                    records = await _closed_loop(clients, plan, series, level, plan.prompts, progress, repeat)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    after = await engine_counters(probe, target.base_url, target.headers(), 5.0) if steps else None
                    summary = summarize_level(records, series=series.label, concurrency=level,
                                              num_prompts=len(plan.prompts))
                    summary.repeat = repeat
                    for key, value in {**engine_steps(before, after), **cpu_use(before, after, wall, cpu)}.items():
                        setattr(summary, key, value)
                    progress.finish(summary)
                    outcome.records.extend(records)
                    outcome.summaries.append(summary)
    finally:
        await clients.aclose()
    return outcome


def run_plan_sync(plan: BenchPlan, progress: Optional[Progress] = None) -> RunOutcome:
    return asyncio.run(run_plan(plan, progress))

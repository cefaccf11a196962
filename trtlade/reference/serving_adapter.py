"""The reference engine behind the serving contract: in-flight batching in one worker thread.

The event loop only appends to a deque (:meth:`ReferenceServingEngine.submit` never waits for the
model). One worker thread owns the engine and its :class:`~trtlade.reference.batching.Batch`: it hands
new requests to the batch, runs one batch step at a time and posts every
:class:`~trtlade.contract.protocol.StepChunk` to its request's
:class:`~trtlade.contract.serving.GenerationHandle`. Requests run concurrently, up to
``max_batch_size`` of them, each with its own (w,n,g), all in one forward pass per step; the others
wait in arrival order (at most ``max_queue``, more get 429). A cancelled request leaves at once if
it waits, or at the next step boundary if it runs, and frees its cache slot.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.serving import (
    ENGINE_CLOSE_S,
    EngineFailure,
    EngineInfo,
    EngineLimits,
    EngineOverloaded,
    GenerationHandle,
    LookaheadPolicy,
    ServerStopping,
    RequestRejected,
    fair_share,
    prompt_limit,
)
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.drafting.config import DraftConfig
from trtlade.reference.scheduler import PREFILL_GROUP_ROWS, idle_rows, long_stall
from trtlade.schedule import LookaheadSchedule

__all__ = ["ReferenceServingEngine", "reference_scheduling"]

log = logging.getLogger("trtlade.engine")


def reference_scheduling(max_batch_size: int, max_num_tokens: Optional[int], max_queue: int,
                         prefill_chunk: Optional[int] = None, prefill_stall: Optional[float] = None,
                         idle_chunk: Optional[int] = None) -> str:
    """The /version description of how the reference engine schedules requests."""
    rows = idle_rows(idle_chunk, max_num_tokens)
    held = f" (prefill_idle_chunk_tokens {idle_chunk}, held to max_num_tokens)" if rows != idle_chunk else ""
    idle = (f"; a longer prompt with none decoding by chunks of {rows} tokens{held}, one a step (a new request or a "
            "cancel is seen between them)" if idle_chunk else "")
    budget = f"at most {max_num_tokens} rows per step" if max_num_tokens else "no row limit per step"
    prefill = (f"new requests are prefilled together, shortest first in forwards of at least {PREFILL_GROUP_ROWS} "
               f"rows (short prompts share one{idle}), each first token sent as soon as its forward ends, "
               if not prefill_chunk else
               "while requests decode, new prompts advance by chunks inside their forward pass (chunked prefill: "
               + (f"paced so their steps take at most {prefill_stall:g}x as long on average "
                  f"({long_stall(prefill_stall):g}x beside prompts longer than a chunk), "
                  f"up to {prefill_chunk} tokens per step" if prefill_stall else f"{prefill_chunk} tokens per step")
               + f"; with none decoding, prefilled whole, shortest first in forwards of at least {PREFILL_GROUP_ROWS} "
                 f"rows{idle}), ")
    return (f"in-flight batching: up to {max_batch_size} requests run together, each with its own (w,n,g), "
            f"in one forward pass per step ({budget}; drafts that do not fit are dropped, oldest requests "
            f"keep theirs); {prefill}and join at the next step, first come first served; "
            f"up to {max_queue} requests wait, more get 429")


@dataclass
class _Job:
    handle: GenerationHandle
    enqueued_at: float  # time.perf_counter() at submit
    emitted: int = 0  # tokens sent so far (the worker counts them; Retry-After reads them)


def _identity(request: Any) -> Optional[str]:
    scope = getattr(request, "cache_scope", None)
    return scope.identity if scope is not None else None


def _by_identity(batch: Any) -> tuple[collections.Counter, collections.Counter]:
    """A batch's slots held and sequences waiting, by identity (a batch that does not say: every one None's)."""
    counts = getattr(batch, "by_identity", None)
    if counts is not None:
        return counts()
    return collections.Counter({None: batch.running}), collections.Counter({None: batch.waiting})


def _engine_info(engine: Any, limits: dict[str, Any], share: Any, *, max_queue: int, served_name: Optional[str],
                 max_prompt_tokens: Optional[int], max_new_tokens: Optional[int], details: Optional[dict[str, Any]],
                 schedule: Optional[LookaheadSchedule], policy: Optional[str],
                 speculation: Optional[DraftConfig]) -> EngineInfo:
    """What the server says of the reference engine (``/version``, ``/v1/models``, admission): its limits as the
    adapter runs it (``limits``: the batch's, ``share``: the fair share or None), its policies and drafters."""
    max_batch_size, max_num_tokens = limits["max_batch_size"], limits["max_num_tokens"]
    prefill_chunk, prefill_stall, idle_chunk = limits["prefill_chunk"], limits["prefill_stall"], limits["idle_chunk"]
    max_seq_len = int(engine.max_seq_len)
    engine_prompt_limit = max_seq_len - 1
    return EngineInfo(
        name="reference",
        model_id=served_name or str(engine.model_id),
        spec=engine.spec,
        default_request_spec=engine.default_request_spec,
        limits=EngineLimits(
            max_seq_len=max_seq_len,
            max_prompt_tokens=prompt_limit(max_prompt_tokens, engine_prompt_limit, log),
            max_new_tokens=max_new_tokens,
            max_sequences=max_queue + int(max_batch_size),  # submit(): the free slots take some, max_queue wait
        ),
        scheduling=reference_scheduling(max_batch_size, max_num_tokens, max_queue, prefill_chunk, prefill_stall,
                                        idle_chunk),
        sampling=str(getattr(engine, "sampling_mode", "greedy")),
        details={"max_batch_size": int(max_batch_size), "max_num_tokens": max_num_tokens,
                 "prefill_chunk_tokens": prefill_chunk, "prefill_stall": prefill_stall,
                 "prefill_idle_chunk_tokens": idle_chunk,
                 **({"fair_share": {"identities": share.identities, "queued": share.queued,
                                    "running": share.running}} if share is not None else {}),
                 **({"linear_kernel": engine_stats["linear_kernel"], "exactness": engine_stats["exactness"],
                     "weight_pages": engine_stats.get("weight_pages")}
                    if isinstance(engine_stats := getattr(engine, "stats", None), dict) else {}),
                 **(details or {})},
        schedule=schedule,
        logprobs=bool(getattr(engine, "supports_logprobs", True)),
        policy=policy or ("schedule" if schedule is not None else "auto"),
        policies=("auto", "schedule") if schedule is not None else ("auto",),
        drafters=("NGram", "SA") if hasattr(engine, "max_draft_len") else (),
        cache_salt=True,
        max_draft_len=int(getattr(engine, "max_draft_len", 0)),
        max_batch_size=int(max_batch_size),
        default_speculation=speculation,
        max_global_pool_size=getattr(engine, "max_global_pool_size", None),
    )


class ReferenceServingEngine:
    """Serves a :class:`~trtlade.reference.engine.ReferenceEngine` (or anything with ``new_batch``,
    ``spec``, ``default_request_spec``, ``tokenizer``, ``model_id`` and ``max_seq_len``, such as the
    scripted engine of the tests) from ONE worker thread, batching requests in flight."""

    def __init__(self, engine: Any, *, max_queue: int = 64, max_batch_size: int = 8,
                 max_num_tokens: Optional[int] = None, prefill_chunk: Optional[int] = None,
                 prefill_stall: Optional[float] = None, idle_chunk: Optional[int] = None,
                 served_name: Optional[str] = None,
                 max_prompt_tokens: Optional[int] = None, max_new_tokens: Optional[int] = None,
                 details: Optional[dict[str, Any]] = None, schedule: Optional[LookaheadSchedule] = None,
                 policy: Optional[str] = None, speculation: Optional[DraftConfig] = None,
                 identities: int = 1, max_queue_per_identity: Optional[int] = None,
                 max_running_per_identity: Optional[int] = None) -> None:
        self._engine = engine
        self._max_queue = max_queue
        self.share = fair_share(identities, max_queue, int(max_batch_size), max_queue_per_identity,
                                max_running_per_identity)
        self._held: collections.Counter = collections.Counter()  # identity -> sequences waiting or running
        self._limits = {"max_batch_size": int(max_batch_size), "max_num_tokens": max_num_tokens,
                        "prefill_chunk": prefill_chunk, "prefill_stall": prefill_stall, "idle_chunk": idle_chunk}
        if self.share is not None:
            self._limits["max_running_per_identity"] = self.share.running
        self._batch = engine.new_batch(**self._limits)
        self.info = _engine_info(engine, self._limits, self.share, max_queue=max_queue, served_name=served_name,
                                 max_prompt_tokens=max_prompt_tokens, max_new_tokens=max_new_tokens, details=details,
                                 schedule=schedule, policy=policy, speculation=speculation)
        self.policy = LookaheadPolicy(schedule, default=self.info.policy)
        self.tokenizer = PromptTokenizer(engine.tokenizer)
        self._cv = threading.Condition()
        self._pending: collections.deque[_Job] = collections.deque()  # submitted, not yet in the batch
        self._cancels: list[GenerationHandle] = []
        self._chores: list[tuple[Callable[[], Any], concurrent.futures.Future]] = []  # run between steps
        self._jobs: dict[int, _Job] = {}  # in the batch (waiting or running), by sequence id
        self._running = 0
        self._batch_waiting: collections.Counter = collections.Counter()  # by identity, as last counted
        self._held_slots: collections.Counter = collections.Counter()  # slots each identity holds, as last counted
        self._admitting: collections.Counter = collections.Counter()  # taken by the worker, not yet in the batch
        self._closing = False
        self._mean_step_s = 0.05  # running mean of a step's duration, for Retry-After
        self._observer: Optional[Callable[[Any], None]] = None
        self._thread = threading.Thread(target=self._worker, name="trtlade-reference-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------- contract
    def submit(self, request: GenerationRequest) -> GenerationHandle:
        loop = asyncio.get_running_loop()
        with self._cv:
            if self._closing:
                raise EngineOverloaded("the server is shutting down", retry_after_s=5)
            waiting = self._waiting_now()
            identity = _identity(request)
            if waiting >= self._max_queue:  # with several keys, timed on the key's own sequences: no other's length
                raise EngineOverloaded(
                    f"the request queue is full ({waiting} requests waiting, serve.max_queue = "
                    f"{self._max_queue}); retry later",
                    retry_after_s=self._retry_after_s(identity if self.share is not None else None))
            self._check_share(identity, request)
            request = self.policy.admit(request)  # its spec and draft policy (a schedule's band: re-checked per step)
            self._held[identity] += 1
            handle = GenerationHandle(loop, request, on_cancel=self._cancel,
                                      on_finish=lambda: self._finished(identity))
            self._pending.append(_Job(handle, time.perf_counter()))
            self._cv.notify()
        return handle

    @contextlib.contextmanager
    def admitting(self) -> Iterator[None]:
        """Around a request's admission on the server's thread (its body parsed, templated, tokenized and
        submitted): the steps it overlaps time that work too and teach the cost model nothing
        (:class:`~trtlade.reference.batching.OutsideWork`)."""
        outside = getattr(self._batch, "outside", None)  # a batch that keeps no cost model has none
        if outside is None:
            yield
            return
        outside.begin()
        try:
            yield
        finally:
            outside.end()

    def _check_share(self, identity: Optional[str], request: GenerationRequest) -> None:
        """429 when ``identity`` already holds its share of the sequences waiting or running (with the lock)."""
        refusal = self._share_refusal(identity)
        if refusal is not None:
            raise refusal

    def _share_refusal(self, identity: Optional[str]) -> Optional[EngineOverloaded]:
        share = self.share
        if share is None or identity is None or self._held[identity] < share.held:
            return None
        return EngineOverloaded(
            f"this API key has {self._held[identity]} sequences waiting or running, its share of this server "
            f"({share.describe()}); retry when some have finished", retry_after_s=self._retry_after_s(identity))

    def _retry_after_s(self, identity: Optional[str] = None) -> int:
        """When a place is likely to free (a 429's Retry-After, seconds): the sequence in the batch (``identity``'s,
        where given: with several API keys one key learns nothing of another's requests) with the fewest tokens left
        before its ``max_tokens``, at one token a step and the measured step time; it may end sooner (a stop); 1 s
        where there is none. Not the refused request's own ``max_tokens``: a request asking for 4,000 tokens was told
        to wait 11 minutes for a place that freed in seconds."""
        jobs = [*self._jobs.values(), *self._pending]  # in the batch, and submitted but not yet taken in
        left = [job.handle.request.max_tokens - job.emitted for job in jobs
                if identity is None or _identity(job.handle.request) == identity]
        return max(1, math.ceil(max(1, min(left, default=1)) * self._mean_step_s))

    def over_share(self, identity: str) -> Optional[EngineOverloaded]:
        """The 429 that any request of ``identity`` would get now, because it holds its whole share already
        (None: it may be admitted). The server asks before reading the request's body, so that an identity
        flooding beyond its share costs the others no parsing or tokenizing of what it sends."""
        with self._cv:
            return self._share_refusal(identity)

    def _finished(self, identity: Optional[str]) -> None:
        self.policy.release()
        with self._cv:
            self._held[identity] -= 1
            if self._held[identity] <= 0:
                del self._held[identity]

    def load(self) -> tuple[int, int]:
        """(running, queued) for /metrics: a request the free slots take counts as running from then on, its prefill
        included (it read as neither while a long prompt's prefill held the engine)."""
        with self._cv:
            entering, waiting = self._queue_split()
            return self._running + entering, waiting

    def live(self) -> dict[str, Any]:
        """What changes while serving: the auto policy's cost model and acceptance prior (read from
        any thread; a snapshot)."""
        policy = getattr(self._engine, "policy", None)
        out = {"auto": policy.snapshot()} if hasattr(policy, "snapshot") else {}
        runner = getattr(self._engine, "runner", None)
        cache = getattr(runner, "prefix_cache", None)
        if cache is not None:
            out["prefix_cache"] = cache.stats()
        slots = getattr(runner, "cache", None)
        if hasattr(slots, "nbytes"):
            out["kv_cache"] = {"slots": slots.slots, "capacity": slots.capacity, "bytes": slots.nbytes()}
        return out

    async def clear_prefix_cache(self) -> Optional[dict[str, int]]:
        """Drop every block of the prefix cache and what finished requests left in the drafters' pools (retained SA
        requests, public NGram pools: :meth:`~trtlade.drafting.algorithm.DraftPools.clear_finished`), between two
        steps (the worker owns both); returns what was dropped (``drafter_pools``: the retained requests and pools
        emptied; the prefix cache's blocks and bytes where there is one), or None where the batch engine keeps
        neither (a batch without drafter pools: the serving contract does not require them)."""
        cache = getattr(getattr(self._engine, "runner", None), "prefix_cache", None)
        if cache is None and getattr(self._batch, "pools", None) is None:
            return None

        def clear() -> dict[str, int]:
            dropped = cache.clear() if cache is not None else {}
            pools = getattr(self._batch, "pools", None)  # the batch of now (a failed step starts a new one)
            return {**dropped, "drafter_pools": pools.clear_finished()} if pools is not None else dropped

        done: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            self._chores.append((clear, done))
            self._cv.notify()
        return await asyncio.wrap_future(done)

    def set_step_observer(self, observer: Optional[Callable[[Any], None]]) -> None:
        """``observer(report)`` after every step, on the worker thread (keep it cheap)."""
        self._observer = observer

    async def aclose(self) -> None:
        with self._cv:
            self._closing = True
            pending = list(self._pending)
            self._pending.clear()
            self._cv.notify_all()
        for job in pending:
            job.handle.finish(ServerStopping("the server is shutting down"))
        await asyncio.to_thread(self._thread.join, ENGINE_CLOSE_S)

    # ------------------------------------------------------------------------------- worker
    def _cancel(self, handle: GenerationHandle) -> None:
        """On the loop thread: a request not yet in the batch leaves now; the worker drops the others
        at the next step boundary."""
        with self._cv:
            for job in self._pending:
                if job.handle is handle:
                    self._pending.remove(job)
                    handle.finish()
                    return
            self._cancels.append(handle)
            self._cv.notify()

    def _worker(self) -> None:
        while True:
            with self._cv:
                while not (self._pending or self._cancels or self._jobs or self._chores or self._closing):
                    self._cv.wait()
                if self._closing:
                    break
                new, self._pending = list(self._pending), collections.deque()
                self._admitting = collections.Counter(_identity(job.handle.request) for job in new)
                cancels, self._cancels = self._cancels, []
                chores, self._chores = self._chores, []
            for chore, done in chores:
                try:
                    done.set_result(chore())
                except Exception as exc:  # noqa: BLE001 - the caller gets it
                    done.set_exception(exc)
            self._admit(new)
            self._drop(cancels)
            self._count()  # what runs and waits now: cancels that emptied the batch run no step to say so
            if self._jobs:
                self._step()
        with self._cv:
            chores, self._chores = self._chores, []
        for _, done in chores:
            done.set_exception(EngineFailure("the server is shutting down"))
        for job in list(self._jobs.values()):  # closing: whatever still runs is cancelled
            job.handle.finish(ServerStopping("the server is shutting down"))
        self._batch.close()

    def _admit(self, jobs: list[_Job]) -> None:
        for job in jobs:
            if job.handle.cancelled:
                job.handle.finish()
                continue
            try:
                seq_id = self._batch.add(job.handle.request, enqueued_at=job.enqueued_at)
            except ValueError as exc:  # refused before generating: the request is invalid for this engine
                field = getattr(exc, "field", None)
                job.handle.finish(RequestRejected(str(exc), param=field if isinstance(field, str) else None))
                continue
            self._jobs[seq_id] = job

    def _count(self) -> None:
        """The batch's running and waiting sequences, for admission and /metrics (on the worker thread, which owns
        the batch): after every change, a step or not, so that no count outlives what it counted."""
        with self._cv:
            self._running = self._batch.running
            held, waiting = _by_identity(self._batch)
            self._held_slots, self._batch_waiting = held, waiting
            self._admitting = collections.Counter()

    def _waiting_now(self) -> int:
        """Requests waiting for a slot (with the lock): submitted, taken by the worker or in the batch's queue,
        less those the free slots take (each identity at most its share's room, ``max_running_per_identity``)."""
        return self._queue_split()[1]

    def _queue_split(self) -> tuple[int, int]:
        """(requests the free slots take at the next step, requests left waiting), with the lock."""
        waiting = self._batch_waiting + self._admitting + collections.Counter(
            _identity(job.handle.request) for job in self._pending)
        slots = max(0, int(self._limits["max_batch_size"]) - self._running)
        cap = self._limits.get("max_running_per_identity")
        takes = sum(n if cap is None else min(n, max(0, cap - self._held_slots[who])) for who, n in waiting.items())
        entering = min(slots, takes)
        return entering, sum(waiting.values()) - entering

    def _deliver(self, seq_id: int, chunk: Any) -> None:
        """A chunk the batch just produced goes to its request at once (mid-step)."""
        job = self._jobs.get(seq_id)
        if job is None:
            return
        job.emitted += len(chunk.tokens)
        job.handle.push(chunk)
        if chunk.finish_reason is not None:
            job.handle.finish()
            del self._jobs[seq_id]

    def _drop(self, handles: list[GenerationHandle]) -> None:
        for handle in handles:
            for seq_id, job in list(self._jobs.items()):
                if job.handle is handle:
                    self._batch.cancel(seq_id)
                    del self._jobs[seq_id]
            handle.finish()

    def _step(self) -> None:
        try:
            self._batch.step(on_chunk=self._deliver)
        except Exception as exc:  # noqa: BLE001 - a failed step fails the requests in it, not the server
            log.exception("reference engine step failed (%d requests in it)", len(self._jobs))
            # the exception's text may hold any request's tokens or the server's paths: it stays in the log, as an
            # internal error's does; each request in the step gets the same plain account
            failure = EngineFailure(f"the decode step this request ran in, with {len(self._jobs) - 1} others, failed "
                                    f"({type(exc).__name__}); the server's log has the reason")
            for job in self._jobs.values():
                job.handle.finish(failure)
            self._jobs.clear()
            failed, self._batch = self._batch, self._engine.new_batch(**self._limits)
            if hasattr(failed, "outside") and hasattr(self._batch, "outside"):
                self._batch.outside = failed.outside  # an admission under way when the step failed still ends on it
            self._count()
            return
        for seq_id, exc in getattr(self._batch, "failed", ()):
            job = self._jobs.pop(seq_id, None)
            if job is not None:
                log.error("request failed in the reference engine: %s: %s", type(exc).__name__, exc,
                          exc_info=exc)
                job.handle.finish(EngineFailure(f"{type(exc).__name__}: {exc}"))
        report = self._batch.last
        self._count()
        with self._cv:
            if report.running:
                self._mean_step_s = 0.9 * self._mean_step_s + 0.1 * report.seconds
        if self._observer is not None:
            try:
                self._observer(report)
            except Exception:  # noqa: BLE001 - metrics never break serving
                log.exception("step observer failed")

"""The engine interface the server talks to, and the adapter that serves the sync reference engine.

The HTTP layer never calls an engine's model code directly. It asks a :class:`ServingEngine` for
its :class:`EngineInfo` (model id, (W,N,G), limits, scheduling note), its
:class:`~trtlade.server.tokenization.PromptTokenizer`, and submits a
:class:`~trtlade.engine.protocol.GenerationRequest`, getting back a :class:`GenerationHandle`: an
async iterator of :class:`~trtlade.engine.protocol.StepChunk` (one per engine step) with ``cancel()``.

``submit`` answers at once (it never waits for the model): it either raises
:class:`EngineOverloaded` (-> 429), :class:`RequestRejected` (-> 400), or queues the request.
Failures after that surface as :class:`EngineFailure` raised from the iterator (-> 500, or an SSE
error event once a stream has started).

Two engines implement it: :class:`ReferenceServingEngine` below (the PyTorch reference engine in one
worker thread, requests served one at a time in arrival order) and
:class:`trtlade.engine.trtllm.TrtllmEngine` (TensorRT-LLM's executor with in-flight batching).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Optional, Protocol, runtime_checkable

from trtlade.engine.protocol import GenerationRequest, StepChunk
from trtlade.server.tokenization import PromptTokenizer
from trtlade.spec import LookaheadSpec

__all__ = [
    "EngineLimits",
    "EngineInfo",
    "ServingEngine",
    "GenerationHandle",
    "EngineOverloaded",
    "RequestRejected",
    "EngineFailure",
    "ReferenceServingEngine",
    "REFERENCE_SCHEDULING",
]

log = logging.getLogger("trtlade.server")

REFERENCE_SCHEDULING = (
    "one sequence at a time: the reference engine runs requests one after another in arrival order "
    "(FIFO) in a single worker thread; up to serve.max_queue requests wait, more get 429")


# ------------------------------------------------------------------------------------------- errors
class EngineOverloaded(Exception):
    """The engine's queue is full; retry after ``retry_after_s`` seconds (-> HTTP 429)."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class RequestRejected(ValueError):
    """The engine refused this request as invalid (-> HTTP 400). ``param`` names the field."""

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class EngineFailure(RuntimeError):
    """The engine failed while generating this request (-> HTTP 500); the server keeps serving."""


# ------------------------------------------------------------------------------------------- info
@dataclass(frozen=True)
class EngineLimits:
    """Token limits of the engine. ``max_seq_len``: prompt + completion tokens of one sequence;
    ``max_prompt_tokens``: longest prompt; ``max_new_tokens``: largest max_tokens (None: only
    bounded by ``max_seq_len - prompt``)."""

    max_seq_len: int
    max_prompt_tokens: int
    max_new_tokens: Optional[int] = None


@dataclass(frozen=True)
class EngineInfo:
    """What /v1/models and /version show and what request validation checks against.

    ``sampling``: ``"greedy"`` (temperature > 0 is refused with 400) or ``"sample-without-lookahead"``
    (temperature > 0 runs plain sampling with lookahead off for that request).
    """

    name: str
    model_id: str
    spec: LookaheadSpec
    default_request_spec: LookaheadSpec
    limits: EngineLimits
    scheduling: str
    sampling: str = "greedy"
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model_id,
            "spec": self.spec.to_dict(),
            "max_draft_len": self.spec.max_draft_len,
            "default_request_spec": self.default_request_spec.to_dict(),
            "limits": {"max_seq_len": self.limits.max_seq_len,
                       "max_prompt_tokens": self.limits.max_prompt_tokens,
                       "max_new_tokens": self.limits.max_new_tokens},
            "scheduling": self.scheduling,
            "sampling": self.sampling,
            **({"details": self.details} if self.details else {}),
        }


@runtime_checkable
class ServingEngine(Protocol):
    """What the HTTP layer needs from an engine."""

    info: EngineInfo
    tokenizer: PromptTokenizer

    def submit(self, request: GenerationRequest) -> "GenerationHandle":
        """Queue ``request``; raises EngineOverloaded or RequestRejected at once, never blocks."""

    def load(self) -> tuple[int, int]:
        """(running, queued) requests right now."""

    async def aclose(self) -> None:
        """Stop: cancel what is still queued or running and release the engine."""


# ------------------------------------------------------------------------------------------- handle
_END = object()


class GenerationHandle:
    """The async stream of one request's :class:`StepChunk`, fed from any thread.

    Producers call :meth:`push` / :meth:`finish` (thread-safe); the consumer iterates with
    ``async for`` and may call :meth:`cancel` (idempotent; the producer stops at the next step
    boundary). An :class:`EngineFailure` or :class:`RequestRejected` passed to ``finish`` is raised
    from the iterator.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, request: GenerationRequest,
                 on_cancel: Optional[Any] = None) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._on_cancel = on_cancel
        self._cancel_event = threading.Event()
        self._finished = threading.Event()
        self.request = request

    # producer side (any thread) -------------------------------------------------------------
    def _post(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass

    def push(self, chunk: StepChunk) -> None:
        if not self._finished.is_set():
            self._post(chunk)

    def finish(self, error: Optional[BaseException] = None) -> None:
        """End the stream (once); ``error`` is raised to the consumer after the chunks before it."""
        if self._finished.is_set():
            return
        self._finished.set()
        if error is not None:
            self._post(error)
        self._post(_END)

    @property
    def cancelled(self) -> bool:
        return self._cancel_event.is_set()

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    # consumer side (event loop) -------------------------------------------------------------
    def cancel(self) -> None:
        """Stop generating (client went away). Safe to call repeatedly and after the end."""
        if self._cancel_event.is_set():
            return
        self._cancel_event.set()
        if self._on_cancel is not None and not self._finished.is_set():
            self._on_cancel(self)

    def __aiter__(self) -> AsyncIterator[StepChunk]:
        return self

    async def __anext__(self) -> StepChunk:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # stay exhausted
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def next_within(self, timeout: float) -> StepChunk | None:
        """The next chunk, or None when nothing arrived within ``timeout`` s (for SSE keep-alives).
        Raises StopAsyncIteration at the end."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except asyncio.TimeoutError:
            return None


# ------------------------------------------------------------------------------------------- reference
@dataclass
class _Job:
    handle: GenerationHandle
    enqueued_at: float


class ReferenceServingEngine:
    """Serves the PyTorch reference engine (not thread-safe) from ONE worker thread.

    Scheduling (see :data:`REFERENCE_SCHEDULING`): first come, first served, one sequence at a time.
    The event loop only appends to a deque; the worker thread pops the oldest request and steps its
    generator, posting each :class:`StepChunk` back to the loop. A cancelled request that is still
    waiting leaves the queue at once; a running one is closed at the next step boundary
    (``gen.close()``), so the worker moves on within one step.

    ``engine`` is anything with ``stream_request(GenerationRequest) -> Iterator[StepChunk]``,
    ``spec``, ``default_request_spec``, ``tokenizer``, ``model_id`` and ``max_seq_len``
    (:class:`trtlade.engine.reference.ReferenceEngine`, or the scripted engine of the tests).
    """

    def __init__(self, engine: Any, *, max_queue: int = 64, served_name: Optional[str] = None,
                 max_prompt_tokens: Optional[int] = None, max_new_tokens: Optional[int] = None,
                 details: Optional[dict[str, Any]] = None) -> None:
        self._engine = engine
        self._max_queue = max_queue
        max_seq_len = int(engine.max_seq_len)
        engine_prompt_limit = max_seq_len - 1
        self.info = EngineInfo(
            name="reference",
            model_id=served_name or str(engine.model_id),
            spec=engine.spec,
            default_request_spec=engine.default_request_spec,
            limits=EngineLimits(
                max_seq_len=max_seq_len,
                max_prompt_tokens=min(max_prompt_tokens or engine_prompt_limit, engine_prompt_limit),
                max_new_tokens=max_new_tokens,
            ),
            scheduling=REFERENCE_SCHEDULING,
            sampling=str(getattr(engine, "sampling_mode", "greedy")),
            details=dict(details or {}),
        )
        self.tokenizer = PromptTokenizer(engine.tokenizer)
        self._pending: collections.deque[_Job] = collections.deque()
        self._cv = threading.Condition()
        self._current: Optional[_Job] = None
        self._closing = False
        self._mean_duration_s = 1.0  # running mean of request durations, for Retry-After
        self._thread = threading.Thread(target=self._worker, name="trtlade-reference-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------- public
    def submit(self, request: GenerationRequest) -> GenerationHandle:
        loop = asyncio.get_running_loop()
        handle = GenerationHandle(loop, request, on_cancel=self._cancel)
        with self._cv:
            if self._closing:
                raise EngineOverloaded("the server is shutting down", retry_after_s=5)
            if len(self._pending) >= self._max_queue:
                wait = self._mean_duration_s * (len(self._pending) + 1)
                raise EngineOverloaded(
                    f"the request queue is full ({len(self._pending)} requests waiting, "
                    f"serve.max_queue = {self._max_queue}); retry later",
                    retry_after_s=max(1, math.ceil(wait)))
            self._pending.append(_Job(handle, time.monotonic()))
            self._cv.notify()
        return handle

    def load(self) -> tuple[int, int]:
        with self._cv:
            return (1 if self._current is not None else 0), len(self._pending)

    async def aclose(self) -> None:
        with self._cv:
            self._closing = True
            pending = list(self._pending)
            self._pending.clear()
            current = self._current
            self._cv.notify_all()
        for job in pending:
            job.handle.finish(EngineFailure("the server is shutting down"))
        if current is not None:
            current.handle.cancel()
        await asyncio.to_thread(self._thread.join, 30.0)

    # ------------------------------------------------------------------------------- worker
    def _cancel(self, handle: GenerationHandle) -> None:
        """Called on the loop thread: a waiting request leaves the queue now; a running one stops
        at the next step boundary (the worker sees ``handle.cancelled``)."""
        with self._cv:
            for job in self._pending:
                if job.handle is handle:
                    self._pending.remove(job)
                    handle.finish()
                    return

    def _worker(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._closing:
                    self._cv.wait()
                if self._closing and not self._pending:
                    return
                job = self._pending.popleft()
                self._current = job
            started = time.monotonic()
            try:
                self._run(job.handle)
            finally:
                with self._cv:
                    self._current = None
                    self._mean_duration_s = 0.8 * self._mean_duration_s + 0.2 * (time.monotonic() - started)

    def _run(self, handle: GenerationHandle) -> None:
        if handle.cancelled:
            handle.finish()
            return
        steps = 0
        gen = None
        try:
            gen = self._engine.stream_request(handle.request)
            while not handle.cancelled:
                try:
                    chunk = next(gen)
                except StopIteration:
                    break
                steps += 1
                handle.push(chunk)
                if chunk.finish_reason is not None:
                    break
            handle.finish()
        except ValueError as exc:
            if steps == 0:  # refused before generating: the request is invalid for this engine
                field = getattr(exc, "field", None)
                handle.finish(RequestRejected(str(exc), param=field if isinstance(field, str) else None))
            else:
                log.exception("reference engine failed after %d steps", steps)
                handle.finish(EngineFailure(str(exc)))
        except Exception as exc:  # noqa: BLE001 - any engine error fails this request only
            log.exception("reference engine failed after %d steps", steps)
            handle.finish(EngineFailure(f"{type(exc).__name__}: {exc}"))
        finally:
            if gen is not None:
                try:
                    gen.close()
                except Exception:  # noqa: BLE001
                    log.exception("closing the generator failed")

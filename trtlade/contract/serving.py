"""The serving contract: what the HTTP server needs from an engine, implemented by both engines.

The HTTP layer never calls an engine's model code directly. It asks a :class:`ServingEngine` for
its :class:`EngineInfo` (model id, (W,N,G), limits, scheduling note), its
:class:`~trtlade.contract.tokenization.PromptTokenizer`, and submits a
:class:`~trtlade.contract.protocol.GenerationRequest`, getting back a :class:`GenerationHandle`: an
async iterator of :class:`~trtlade.contract.protocol.StepChunk` (one per engine step) with ``cancel()``.

``submit`` answers at once (it never waits for the model): it either raises
:class:`EngineOverloaded` (-> 429), :class:`RequestRejected` (-> 400), or queues the request.
Failures after that surface as :class:`EngineFailure` raised from the iterator (-> 500, or an SSE
error event once a stream has started).

Two engines implement it: :class:`trtlade.reference.serving_adapter.ReferenceServingEngine` (the
PyTorch reference engine with in-flight batching in one worker thread) and
:class:`trtlade.trtllm.engine.TrtllmEngine` (TensorRT-LLM's executor with in-flight batching).
Engines may also offer ``set_step_observer(callback)``: the callback gets every step's
:class:`~trtlade.reference.scheduler.StepReport` (the server's batch metrics).

Both engines decide what a request without its own (w,n,g) gets with one :class:`LookaheadPolicy`:
the band of the server's :class:`~trtlade.schedule.LookaheadSchedule` for the requests in flight
at its admission (itself included), counted under the engine's own lock so that concurrent
admissions each see the count the others left.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Optional, Protocol, runtime_checkable

from trtlade.errors import TrtladeError
from trtlade.contract.protocol import GenerationRequest, StepChunk
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.drafting.config import DraftConfig
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import LookaheadSpec

__all__ = [
    "EngineLimits",
    "FairShare",
    "fair_share",
    "EngineInfo",
    "ServingEngine",
    "GenerationHandle",
    "EngineOverloaded",
    "ServerStopping",
    "RequestRejected",
    "EngineFailure",
    "LookaheadPolicy",
    "ENGINE_CLOSE_S",
    "close_within",
]

#: The most an engine's close may take at shutdown (its worker joined, TensorRT-LLM's shutdown called): the server's
#: bound after the grace (``trtlade.config.schema.STOP_MARGIN_S``) counts on it.
ENGINE_CLOSE_S = 30.0



# ------------------------------------------------------------------------------------------- errors
class EngineOverloaded(TrtladeError):
    """The engine's queue is full; retry after ``retry_after_s`` seconds (-> HTTP 429)."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message, f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return self.message


class RequestRejected(TrtladeError, ValueError):
    """The engine refused this request as invalid (-> HTTP 400). ``param`` names the field."""

    located = False  # the HTTP layer puts the field in ``param``

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message, where=param or "")
        self.param = param


class EngineFailure(TrtladeError, RuntimeError):
    """The engine failed while generating this request (-> HTTP 500); the server keeps serving."""


class ServerStopping(EngineFailure):
    """The server stopped before this request finished (-> HTTP 503 ``server_stopping``): still waiting when the
    engine closed, or still running when the shutdown grace ended."""


# ------------------------------------------------------------------------------------------- info
@dataclass(frozen=True)
class EngineLimits:
    """Token limits of the engine. ``max_seq_len``: prompt + completion tokens of one sequence;
    ``max_prompt_tokens``: longest prompt; ``max_new_tokens``: largest max_tokens (None: only
    bounded by ``max_seq_len - prompt``). ``max_sequences``: the most sequences (prompts x ``n``) one request
    may bring, those the engine takes in at once on an idle server (None: no bound); more could never be admitted."""

    max_seq_len: int
    max_prompt_tokens: int
    max_new_tokens: Optional[int] = None
    max_sequences: Optional[int] = None


async def close_within(close: Callable[[], Any], seconds: float, what: str, log: logging.Logger) -> bool:
    """Run ``close`` (a blocking call) in a daemon thread and wait for it at most ``seconds``: True if it returned
    (or raised: logged) in time; False, with a warning, if not. The thread is left to the process's exit, so a
    shutdown that hangs (TensorRT-LLM's executor waiting on a peer) cannot hold the server past its bound.

    >>> import asyncio, time
    >>> asyncio.run(close_within(lambda: None, 1.0, "a close", logging.getLogger("doc")))
    True
    >>> asyncio.run(close_within(lambda: time.sleep(5), 0.05, "a close", logging.getLogger("doc")))
    False
    """
    done = threading.Event()

    def run() -> None:
        try:
            close()
        except Exception:  # noqa: BLE001 - a failed close is logged; the server exits all the same
            log.exception("%s failed", what)
        finally:
            done.set()

    threading.Thread(target=run, name="trtlade-engine-close", daemon=True).start()
    if await asyncio.to_thread(done.wait, max(0.0, seconds)):
        return True
    log.warning("%s did not return within %.0f s; the server exits without it", what, seconds)
    return False


def prompt_limit(asked: Optional[int], engine_limit: int, log: logging.Logger) -> int:
    """The longest prompt served: ``serve.max_prompt_tokens`` (``asked``), at most what the engine holds; a larger
    one is lowered with a warning at start (never silently).

    >>> prompt_limit(None, 511, logging.getLogger("doc")), prompt_limit(100, 511, logging.getLogger("doc"))
    (511, 100)
    """
    if asked is None:
        return engine_limit
    if asked > engine_limit:
        log.warning("serve.max_prompt_tokens %d is above the longest prompt the engine holds (%d tokens, leaving room "
                    "for output): prompts above %d get 400", asked, engine_limit, engine_limit)
        return engine_limit
    return asked


@dataclass(frozen=True)
class EngineInfo:
    """What /v1/models and /version show and what request validation checks against.

    ``sampling``: ``"greedy"`` (temperature > 0 and the penalties are refused with 400: TensorRT-LLM's
    lookahead decodes top-1 for every request), ``"lookahead"`` (sampled requests run with
    lookahead and emit exactly what plain sampling with the same seed emits; every warper offered) or
    ``"pytorch"`` (TensorRT-LLM's PyTorch backend samples; trtlade passes the warpers on).
    """

    name: str
    model_id: str
    spec: LookaheadSpec
    default_request_spec: LookaheadSpec
    limits: EngineLimits
    scheduling: str
    sampling: str = "greedy"
    details: dict[str, Any] = field(default_factory=dict)
    schedule: Optional[LookaheadSchedule] = None
    #: whether the engine returns log probabilities (generated tokens and prompt)
    logprobs: bool = False
    #: what a request that names no lookahead gets: ``"auto"``, ``"schedule"`` or ``"fixed"``
    policy: str = "fixed"
    #: the draft policies a request may ask for by name (``"lookahead": "auto"``)
    policies: tuple[str, ...] = ()
    #: the NGram / SA drafters a request may ask for with ``speculation`` (none: the field is refused), the
    #: most draft tokens such a request may verify per step, the batch size AUTO is resolved for, and what a
    #: request naming neither ``lookahead`` nor ``speculation`` drafts with (None: ``policy`` applies)
    drafters: tuple[str, ...] = ()
    #: whether requests may name a (w,n,g) (False: TensorRT-LLM's PyTorch backend, which has no Lookahead)
    lookahead: bool = True
    #: whether a request may send ``cache_salt`` (the engine scopes its prefix reuse by it); False: the
    #: TensorRT-LLM engines, whose KV block reuse is the executor's, shared by every request
    cache_salt: bool = False
    max_draft_len: int = 0
    max_batch_size: int = 1
    default_speculation: Optional[DraftConfig] = None
    #: the most slots an SA request's global pool may ask for (``serve.max_global_pool_size``; None: no limit)
    max_global_pool_size: Optional[int] = None

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
            "logprobs": self.logprobs,
            "lookahead_schedule": self.schedule.to_config() if self.schedule is not None else None,
            "lookahead_policy": self.policy,
            "lookahead_policies": list(self.policies),
            "per_request_drafting": self.lookahead,
            "speculation": {"drafters": list(self.drafters), "max_draft_len": self.max_draft_len,
                            "max_global_pool_size": self.max_global_pool_size,
                            "default": self.default_speculation.to_wire() if self.default_speculation else None},
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


# ------------------------------------------------------------------------------------------- policy
class LookaheadPolicy:
    """The (w,n,g) and draft policy of each admitted request, and the count of requests in flight.

    A request that names its own spec keeps it, drafting every step (``fixed``). One that asks for
    a policy by name (``"auto"`` / ``"schedule"``), or names nothing (``default``: the server's
    ``lookahead.policy``), gets that policy: ``auto`` keeps the engine's default request spec and
    lets the engine decide per step; ``schedule`` gets the band for the requests in flight counting
    itself -- the larger of the engine's own count and the request's ``load`` (the server's count
    from arrival, which sees a burst of arrivals that are still being tokenized) -- and the engine
    re-checks the band at every step; ``fixed`` keeps None (the engine's default request spec,
    every step). :meth:`admit` counts the request in flight until :meth:`release` (call it once
    per admitted request, when it ends). The caller holds its own lock around admission; the count
    has its own lock too, so :meth:`band_in_force` is safe from any thread.

    >>> from trtlade.contract.protocol import GenerationRequest
    >>> policy = LookaheadPolicy(LookaheadSchedule.parse([{"up_to": 1, "spec": "2,4,2"}, {"spec": "1,1,0"}]))
    >>> first = policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=4))
    >>> second = policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=4))
    >>> (str(first.lookahead), first.band), (str(second.lookahead), second.band), policy.in_flight
    (('2,4,2', 0), ('1,1,0', 1), 2)
    >>> policy.release(); policy.release(); policy.band_in_force()
    0
    >>> policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=4, load=3)).band  # 2 more arrived
    1
    >>> policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=4, policy="auto")).policy
    'auto'
    """

    def __init__(self, schedule: Optional[LookaheadSchedule] = None, default: Optional[str] = None) -> None:
        self.schedule = schedule
        self.default = default or ("schedule" if schedule is not None else "fixed")
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def admit(self, request: GenerationRequest) -> GenerationRequest:
        with self._lock:
            self._in_flight += 1
            count = max(self._in_flight, request.load or 0)
        if request.lookahead is not None or request.speculation is not None:  # its own spec or drafter
            return dataclasses.replace(request, policy="fixed")
        policy = request.policy or self.default
        if policy != "schedule" or self.schedule is None:
            return dataclasses.replace(request, policy="fixed" if policy == "schedule" else policy)
        band = self.schedule.band_for(count)
        return dataclasses.replace(request, lookahead=self.schedule.bands[band].spec, band=band,
                                   policy="schedule", schedule=self.schedule)

    def release(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    def band_in_force(self) -> Optional[int]:
        """The band a request admitted now would get (None without a schedule)."""
        if self.schedule is None:
            return None
        return self.schedule.band_for(self._in_flight + 1)


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
                 on_cancel: Optional[Any] = None, on_finish: Optional[Callable[[], None]] = None) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._on_cancel = on_cancel
        self._on_finish = on_finish
        self._finish_lock = threading.Lock()
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
        with self._finish_lock:  # producers on several threads: exactly one ends the stream
            if self._finished.is_set():
                return
            self._finished.set()
        if self._on_finish is not None:
            self._on_finish()
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
    def abort(self, error: BaseException) -> None:
        """End the stream now with ``error`` (raised to the consumer after the chunks already pushed) and stop the
        producer as :meth:`cancel` does; what the producer pushes or finishes afterwards is dropped. A stream that
        had ended already is left as it is."""
        if self._finished.is_set():
            return
        self.finish(error)
        if not self._cancel_event.is_set():
            self._cancel_event.set()
            if self._on_cancel is not None:
                self._on_cancel(self)

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


@dataclass(frozen=True)
class FairShare:
    """What one identity may hold when several share a server: ``queued`` sequences waiting (its share of
    ``serve.max_queue``) and ``running`` slots of the batch (``max_batch_size`` less one slot kept for each
    other identity, at most half the batch kept)."""

    identities: int
    queued: int
    running: int

    @property
    def held(self) -> int:
        """Sequences waiting or running one identity may hold."""
        return self.queued + self.running

    def describe(self) -> str:
        return (f"{self.queued} waiting (serve.max_queue_per_identity) + {self.running} running "
                f"(serve.max_running_per_identity), among {self.identities} identities")


def fair_share(identities: int, max_queue: int, max_batch_size: int, queued: Optional[int] = None,
               running: Optional[int] = None) -> Optional[FairShare]:
    """The per-identity share (None with one identity or none: first come first served, as before).
    Defaults: an equal share of the queue, and every batch slot but one for each other identity (at most half
    the batch kept for them), so that another identity's request finds a free slot at once.

    >>> fair_share(4, 64, 8)
    FairShare(identities=4, queued=16, running=5)
    >>> fair_share(2, 64, 8).running, fair_share(20, 64, 8).running
    (7, 4)
    >>> fair_share(1, 64, 8) is None
    True
    """
    if identities <= 1:
        return None
    return FairShare(identities, queued if queued is not None else max(1, max_queue // identities),
                     running if running is not None else max(1, max_batch_size - min(identities - 1,
                                                                                        max_batch_size // 2)))

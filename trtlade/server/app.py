"""The OpenAI-compatible HTTP app (FastAPI): routes, auth, limits, streaming, metrics.

``create_app(engine_or_factory, settings)`` returns the ASGI app. With a factory, the engine loads
in a background thread when the app starts: /health answers 503 ``loading`` until it is ready and
generation routes answer 503 with Retry-After meanwhile.

Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (these three need the API key
when one is set), GET /health, GET /metrics, GET /version.

Streaming sends ONE event per engine step (all tokens that step accepted), a first chat chunk that
already carries content (``delta: {"role": "assistant", "content": ...}``), with
``stream_options.include_usage`` a ``"usage": null`` in every chunk plus a last chunk with
``"choices": []`` and the usage, then ``data: [DONE]``. An error after the stream started is sent as
``data: {"error": {...}}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from trtlade import __version__
from trtlade.engine.protocol import GenerationStats, StepChunk
from trtlade.server.admission import PreparedRequest, assemble, check_request, parse_body, tokenize
from trtlade.engine.serving import (
    EngineFailure,
    EngineOverloaded,
    GenerationHandle,
    RequestRejected,
    ServingEngine,
)
from trtlade.server.errors import ApiError
from trtlade.server.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from trtlade.server.sse import SSE_DONE, SSE_KEEPALIVE, SSEResponse, sse_data

__all__ = ["ServerSettings", "ServerState", "create_app"]

log = logging.getLogger("trtlade.server")

EngineSource = Union[ServingEngine, Callable[[], ServingEngine]]


@dataclass(frozen=True)
class ServerSettings:
    """HTTP-level settings. ``api_key``: required Bearer token (None: no auth). ``manifest``: the
    bundle's trtlade-manifest.json, shown by /version. ``keepalive_s``: SSE comment interval while a
    streamed request waits."""

    api_key: Optional[str] = None
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_s: float = 15.0
    manifest: Optional[dict[str, Any]] = None
    source: dict[str, Any] = field(default_factory=dict)


@dataclass
class ServerState:
    """The engine slot: ``loading`` -> ``ready`` (or ``failed``) -> ``stopping``."""

    status: str = "loading"
    engine: Optional[ServingEngine] = None
    error: Optional[str] = None
    loaded: asyncio.Event = field(default_factory=asyncio.Event)


def _endpoint_label(kind: str) -> str:
    return "completions" if kind == "completion" else "chat_completions"


def _error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers or None)


def _usage(prompt_tokens: int, completion_tokens: int, stats: Optional[GenerationStats]) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if stats is not None:
        w, n, g = stats.spec.as_tuple()
        usage["lookahead"] = {"spec": {"w": w, "n": n, "g": g}, "steps": stats.steps,
                              "tokens_per_step": round(stats.tokens_per_step, 4)}
    return usage


class _Tracker:
    """Per-request timing for the metrics: TTFT and inter-chunk latency."""

    def __init__(self, metrics: ServerMetrics, arrival: float) -> None:
        self.metrics = metrics
        self.arrival = arrival
        self.first_token_at: Optional[float] = None
        self.last_chunk_at: Optional[float] = None
        self.completion_tokens = 0
        self.stats: Optional[GenerationStats] = None
        self.finish_reason: Optional[str] = None

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
            self.stats = chunk.stats
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason

    def done(self, endpoint: str, status: int) -> None:
        self.metrics.finished(endpoint, status)
        self.metrics.duration.labels(endpoint=endpoint).observe(time.monotonic() - self.arrival)
        if self.stats is not None:
            self.metrics.lookahead(self.stats)


def create_app(engine: EngineSource, settings: Optional[ServerSettings] = None, *,
               on_load_failed: Optional[Callable[[BaseException], None]] = None) -> FastAPI:
    """The ASGI app serving ``engine`` (an engine, or a zero-argument factory run in a thread)."""
    settings = settings or ServerSettings()
    metrics = ServerMetrics()
    state = ServerState()

    async def load_engine() -> None:
        try:
            ready = engine if isinstance(engine, ServingEngine) else await asyncio.to_thread(engine)
        except BaseException as exc:  # noqa: BLE001 - reported through /health and the callback
            state.status, state.error = "failed", str(exc) or type(exc).__name__
            log.error("the engine failed to load: %s", state.error)
            state.loaded.set()
            if on_load_failed is not None:
                on_load_failed(exc)
            return
        state.engine = ready  # type: ignore[assignment]
        metrics.set_load(ready.load)
        if hasattr(ready, "set_step_observer"):
            ready.set_step_observer(metrics.batch_step)
        info = ready.info
        metrics.set_engine(info.name, info.model_id, str(info.spec))
        state.status = "ready"
        state.loaded.set()
        log.info("engine %s ready: model %s, (W,N,G) = (%s)", info.name, info.model_id, info.spec)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state.status, state.engine, state.error = "loading", None, None
        state.loaded = asyncio.Event()
        task = asyncio.create_task(load_engine())
        try:
            yield
        finally:
            state.status = "stopping"
            if not task.done():
                await asyncio.wait({task}, timeout=1.0)
            if state.engine is not None:
                await state.engine.aclose()

    app = FastAPI(title="trtlade", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.trtlade = state
    app.state.metrics = metrics

    # ------------------------------------------------------------------------------ error shapes
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no route {request.method} {request.url.path}; see /v1/completions, "
                        "/v1/chat/completions, /v1/models, /health, /metrics, /version",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return _error_response(ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404
                                        else None))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error_response(ApiError(500, f"internal error: {type(exc).__name__}: {exc}",
                                        code="internal_error"))

    # ------------------------------------------------------------------------------ helpers
    def check_auth(request: Request) -> None:
        if not settings.api_key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                  settings.api_key.encode()):
            raise ApiError.unauthorized()

    def ready_engine() -> ServingEngine:
        if state.status == "ready" and state.engine is not None:
            return state.engine
        if state.status == "failed":
            raise ApiError(503, f"the engine failed to load: {state.error}", code="engine_failed")
        if state.status == "stopping":
            raise ApiError.unavailable("the server is shutting down", retry_after_s=5)
        raise ApiError.unavailable("the engine is still loading; retry shortly (GET /health says when "
                                   "it is ready)", retry_after_s=2)

    async def read_json(request: Request) -> Any:
        limit = settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError.too_large(int(declared), limit)
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise ApiError.too_large(None, limit)
        if not body.strip():
            raise ApiError.bad_request("the request body is empty; send a JSON object")
        try:
            return json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise ApiError.bad_request("the request body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ApiError.bad_request(f"the request body is not valid JSON: {exc.msg} (line {exc.lineno}, "
                                       f"column {exc.colno})", code="invalid_json") from None

    async def admit(request: Request, kind: str) -> tuple[ServingEngine, PreparedRequest, GenerationHandle]:
        check_auth(request)
        payload = await read_json(request)
        engine_ = ready_engine()
        body = parse_body(kind, payload)  # type: ignore[arg-type]
        lookahead, stop = check_request(kind, body, engine_.info)  # type: ignore[arg-type]
        ids = await asyncio.to_thread(tokenize, kind, body, engine_.tokenizer)  # type: ignore[arg-type]
        prepared = assemble(kind, body, engine_.info, ids, lookahead, stop)  # type: ignore[arg-type]
        try:
            handle = engine_.submit(prepared.generation)
        except EngineOverloaded as exc:
            raise ApiError.overloaded(exc.message, exc.retry_after_s) from None
        except RequestRejected as exc:
            raise ApiError.bad_request(exc.message, param=exc.param) from None
        return engine_, prepared, handle

    # ------------------------------------------------------------------------------ generation
    async def generate(request: Request, kind: str) -> Response:
        arrival = time.monotonic()
        endpoint = _endpoint_label(kind)
        try:
            _engine, prepared, handle = await admit(request, kind)
        except ApiError as exc:
            metrics.finished(endpoint, exc.status)
            return _error_response(exc)
        metrics.prompt_tokens.inc(prepared.prompt_tokens)
        tracker = _Tracker(metrics, arrival)
        rid = f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if prepared.stream:
            return SSEResponse(stream_events(prepared, handle, tracker, rid, created, endpoint))
        return await collect(request, prepared, handle, tracker, rid, created, endpoint)

    def chunk_event(prepared: PreparedRequest, rid: str, created: int, text: str,
                    finish: Optional[str], first: bool) -> dict[str, Any]:
        if prepared.kind == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        else:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        event: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": prepared.model,
                                 "choices": [choice]}
        if prepared.include_usage:
            event["usage"] = None
        return event

    async def stream_events(prepared: PreparedRequest, handle: GenerationHandle, tracker: _Tracker,
                            rid: str, created: int, endpoint: str) -> AsyncIterator[str]:
        status = 499  # until proven otherwise: a cancelled generator never reaches the end
        first = True
        try:
            try:
                while True:
                    try:
                        chunk = await handle.next_within(settings.keepalive_s)
                    except StopAsyncIteration:
                        break
                    if chunk is None:
                        yield SSE_KEEPALIVE
                        continue
                    tracker.chunk(chunk)
                    yield sse_data(chunk_event(prepared, rid, created, chunk.text, chunk.finish_reason, first))
                    first = False
                    if chunk.finish_reason is not None:
                        break
                if tracker.finish_reason is None:
                    raise EngineFailure("the generation ended without a finish reason")
            except (EngineFailure, RequestRejected) as exc:
                err = ApiError.bad_request(exc.message, param=exc.param) if isinstance(exc, RequestRejected) \
                    else ApiError.engine_failure(str(exc))
                status = err.status
                yield sse_data(err.body())
                yield SSE_DONE
                return
            if prepared.include_usage:
                yield sse_data({"id": rid, "object": "text_completion" if prepared.kind == "completion"
                                else "chat.completion.chunk", "created": created, "model": prepared.model,
                                "choices": [], "usage": _usage(prepared.prompt_tokens,
                                                               tracker.completion_tokens, tracker.stats)})
            yield SSE_DONE
            status = 200
        finally:
            handle.cancel()
            tracker.done(endpoint, status)

    async def collect(request: Request, prepared: PreparedRequest, handle: GenerationHandle,
                      tracker: _Tracker, rid: str, created: int, endpoint: str) -> Response:
        async def consume() -> str:
            parts: list[str] = []
            async for chunk in handle:
                tracker.chunk(chunk)
                parts.append(chunk.text)
                if chunk.finish_reason is not None:
                    break
            if tracker.finish_reason is None:
                raise EngineFailure("the generation ended without a finish reason")
            return "".join(parts)

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        work = asyncio.create_task(consume())
        watch = asyncio.create_task(disconnected())
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not work.done():  # the client went away (or we were cancelled): stop generating
                handle.cancel()
                work.cancel()
            watch.cancel()
        if not work.done() or work.cancelled():
            tracker.done(endpoint, 499)
            return Response(status_code=499)
        try:
            text = work.result()
        except (EngineFailure, RequestRejected) as exc:
            err = ApiError.bad_request(exc.message, param=exc.param) if isinstance(exc, RequestRejected) \
                else ApiError.engine_failure(str(exc))
            tracker.done(endpoint, err.status)
            return _error_response(err)
        finally:
            handle.cancel()
        usage = _usage(prepared.prompt_tokens, tracker.completion_tokens, tracker.stats)
        if prepared.kind == "completion":
            body: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created,
                                    "model": prepared.model, "choices": [
                                        {"index": 0, "text": text, "logprobs": None,
                                         "finish_reason": tracker.finish_reason}], "usage": usage}
        else:
            body = {"id": rid, "object": "chat.completion", "created": created, "model": prepared.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "logprobs": None, "finish_reason": tracker.finish_reason}],
                    "usage": usage}
        tracker.done(endpoint, 200)
        return JSONResponse(body)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, "chat")

    # ------------------------------------------------------------------------------ info routes
    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        check_auth(request)
        engine_ = ready_engine()
        info = engine_.info
        return JSONResponse({"object": "list", "data": [{
            "id": info.model_id, "object": "model", "created": int(app.state.started_at),
            "owned_by": "trtlade", "max_model_len": info.limits.max_seq_len}]})

    @app.get("/health")
    async def health() -> JSONResponse:
        body: dict[str, Any] = {"status": state.status}
        if state.error:
            body["error"] = state.error
        return JSONResponse(body, status_code=200 if state.status == "ready" else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/version")
    async def version() -> JSONResponse:
        engine_ = state.engine
        info = engine_.info if engine_ is not None else None
        return JSONResponse({
            "trtlade": __version__,
            "status": state.status,
            "engine": info.to_dict() if info is not None else None,
            "spec": str(info.spec) if info is not None else None,
            "scheduling": info.scheduling if info is not None else None,
            "manifest": settings.manifest,
            **({"source": settings.source} if settings.source else {}),
        })

    app.state.started_at = time.time()
    return app

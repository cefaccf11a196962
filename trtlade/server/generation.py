"""The generation routes: POST /v1/completions and POST /v1/chat/completions.

A request is admitted (auth, body, validation, tokenization, engine submit: :func:`admit`), then
either streamed (:func:`stream_events`: ONE event per engine step, with all the tokens that step
accepted) or collected into one JSON body (:func:`collect`, which cancels the generation when the
client disconnects). Errors before the first byte are JSON error bodies; an error after a stream
started is sent as ``data: {"error": {...}}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from trtlade.engine.serving import EngineFailure, EngineOverloaded, GenerationHandle, RequestRejected
from trtlade.server.admission import (
    Kind,
    PreparedRequest,
    assemble,
    check_request,
    ignored_fields,
    parse_body,
    tokenize,
)
from trtlade.server.context import ServerContext, note_access, server_context
from trtlade.server.errors import ApiError, error_response
from trtlade.server.responses import (
    RequestTracker,
    chunk_event,
    completion_body,
    endpoint_label,
    usage,
    usage_event,
)
from trtlade.server.sse import SSE_DONE, SSE_KEEPALIVE, SSEResponse, sse_data

__all__ = ["router", "admit", "generate"]

router = APIRouter()


@router.post("/v1/completions")
async def completions(request: Request, ctx: ServerContext = Depends(server_context)) -> Response:
    return await generate(ctx, request, "completion")


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, ctx: ServerContext = Depends(server_context)) -> Response:
    return await generate(ctx, request, "chat")


@dataclass
class _Reply:
    """One admitted request on its way out: what it asked, its generation, its id and metrics."""

    prepared: PreparedRequest
    handle: GenerationHandle
    tracker: RequestTracker
    rid: str
    created: int
    endpoint: str

    def usage(self) -> dict:
        return usage(self.prepared.prompt_tokens, self.tracker.completion_tokens, self.tracker.stats)

    def note(self, request: Request) -> None:
        """What the access log line says about this request."""
        spec = self.tracker.stats.spec if self.tracker.stats is not None else self.handle.request.lookahead
        note_access(request, prompt=self.prepared.prompt_tokens, completion=self.tracker.completion_tokens,
                    lookahead=str(spec) if spec is not None else None)


async def generate(ctx: ServerContext, request: Request, kind: Kind) -> Response:
    arrival = time.monotonic()
    endpoint = endpoint_label(kind)
    leave = ctx.arrive()
    try:
        prepared, handle = await admit(ctx, request, kind)
    except ApiError as exc:
        leave()
        ctx.metrics.finished(endpoint, exc.status)
        note_access(request, error=exc.code, param=exc.param)
        return error_response(exc)
    except BaseException:
        leave()
        raise
    ctx.metrics.prompt_tokens.inc(prepared.prompt_tokens)
    ctx.metrics.admitted(handle.request)
    reply = _Reply(prepared, handle, RequestTracker(ctx.metrics, arrival, on_done=leave),
                   rid=f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}",
                   created=int(time.time()), endpoint=endpoint)
    if prepared.stream:
        return SSEResponse(stream_events(ctx, reply, request))
    return await collect(request, reply)


async def admit(ctx: ServerContext, request: Request, kind: Kind) -> tuple[PreparedRequest, GenerationHandle]:
    """Check, parse, tokenize and submit a request; every refusal is an :class:`ApiError`."""
    ctx.check_auth(request)
    payload = await ctx.read_json(request)
    engine = ctx.ready_engine()
    body = parse_body(kind, payload)
    lookahead, stop = check_request(kind, body, engine.info)  # type: ignore[arg-type]
    ctx.note_ignored(ignored_fields(body))
    ids = await asyncio.to_thread(tokenize, kind, body, engine.tokenizer)  # type: ignore[arg-type]
    prepared = assemble(kind, body, engine.info, ids, lookahead, stop)  # type: ignore[arg-type]
    try:
        handle = engine.submit(dataclasses.replace(prepared.generation, load=ctx.active))
    except EngineOverloaded as exc:
        raise ApiError.overloaded(exc.message, exc.retry_after_s) from None
    except RequestRejected as exc:
        raise ApiError.bad_request(exc.message, param=exc.param) from None
    return prepared, handle


def _engine_error(exc: Exception) -> ApiError:
    if isinstance(exc, RequestRejected):
        return ApiError.bad_request(exc.message, param=exc.param)
    return ApiError.engine_failure(str(exc))


async def stream_events(ctx: ServerContext, reply: _Reply, request: Optional[Request] = None) -> AsyncIterator[str]:
    """The SSE events of one streamed request (keep-alive comments while it waits)."""
    status = 499  # until proven otherwise: a cancelled generator never reaches the end
    first = True
    try:
        try:
            while True:
                try:
                    chunk = await reply.handle.next_within(ctx.settings.keepalive_s)
                except StopAsyncIteration:
                    break
                if chunk is None:
                    yield SSE_KEEPALIVE
                    continue
                reply.tracker.chunk(chunk)
                running = usage(reply.prepared.prompt_tokens, reply.tracker.completion_tokens, None) \
                    if reply.prepared.continuous_usage else None
                yield sse_data(chunk_event(reply.prepared, reply.rid, reply.created, chunk.text,
                                           chunk.finish_reason, first, running))
                first = False
                if chunk.finish_reason is not None:
                    break
            if reply.tracker.finish_reason is None:
                raise EngineFailure("the generation ended without a finish reason")
        except (EngineFailure, RequestRejected) as exc:
            err = _engine_error(exc)
            status = err.status
            if request is not None:
                note_access(request, error=err.code, param=err.param)
            yield sse_data(err.body())
            yield SSE_DONE
            return
        if reply.prepared.include_usage:
            yield sse_data(usage_event(reply.prepared, reply.rid, reply.created, reply.usage()))
        yield SSE_DONE
        status = 200
    finally:
        reply.handle.cancel()
        reply.tracker.done(reply.endpoint, status)
        if request is not None:
            reply.note(request)


async def _consume(reply: _Reply) -> str:
    parts: list[str] = []
    async for chunk in reply.handle:
        reply.tracker.chunk(chunk)
        parts.append(chunk.text)
        if chunk.finish_reason is not None:
            break
    if reply.tracker.finish_reason is None:
        raise EngineFailure("the generation ended without a finish reason")
    return "".join(parts)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(request: Request, reply: _Reply) -> Response:
    """The whole response as one JSON body; a client that disconnects first cancels the generation."""
    work = asyncio.create_task(_consume(reply))
    watch = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():  # the client went away (or we were cancelled): stop generating
            reply.handle.cancel()
            work.cancel()
        watch.cancel()
    reply.note(request)
    if not work.done() or work.cancelled():
        reply.tracker.done(reply.endpoint, 499)
        return Response(status_code=499)
    try:
        text = work.result()
    except (EngineFailure, RequestRejected) as exc:
        err = _engine_error(exc)
        reply.tracker.done(reply.endpoint, err.status)
        note_access(request, error=err.code, param=err.param)
        return error_response(err)
    finally:
        reply.handle.cancel()
    reply.note(request)
    body = completion_body(reply.prepared, reply.rid, reply.created, text, reply.tracker.finish_reason,
                           reply.usage())
    reply.tracker.done(reply.endpoint, 200)
    return JSONResponse(body)

"""The generation routes: POST /v1/completions and POST /v1/chat/completions.

A request is admitted (auth, body, validation, tokenization, engine submit: :func:`admit`), then
either streamed (:func:`stream_events`: ONE event per engine step and choice, with all the tokens that
step accepted) or collected into one JSON body (:func:`collect`, which cancels the generations when
the client disconnects). A completions request with several prompts runs one generation per prompt,
concurrently through the engine's batching; ``n > 1`` runs one generation per sample when sampling,
and one generation copied into ``n`` identical choices when greedy. Choice ``prompt * n + j``.
Errors before the first byte are JSON error bodies; an error after a stream started is sent as
``data: {"error": {...}}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from trtlade.contract.protocol import StepChunk
from trtlade.contract.serving import (EngineFailure, EngineOverloaded, GenerationHandle, RequestRejected,
                                      ServerStopping)
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
from trtlade.server.routes import AnsweringRoute, unexpected_response
from trtlade.server.errors import ApiError, error_response
from trtlade.server.identity import Identity
from trtlade.server.request_id import request_id
from trtlade.server.responses import (
    CONTEXT,
    RequestTracker,
    Scored,
    chat_logprobs,
    chunk_event,
    completion_body,
    completion_logprobs,
    endpoint_label,
    usage,
    usage_event,
)
from trtlade.server.sse import SSE_DONE, SSE_KEEPALIVE, SSEResponse, sse_data

__all__ = ["router", "admit", "generate"]

log = logging.getLogger("trtlade.server")

router = APIRouter(route_class=AnsweringRoute)


@router.post("/v1/completions")
async def completions(request: Request, ctx: ServerContext = Depends(server_context)) -> Response:
    return await generate(ctx, request, "completion")


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, ctx: ServerContext = Depends(server_context)) -> Response:
    return await generate(ctx, request, "chat")


@dataclass
class _Choice:
    """One choice of the response: its text so far, its scored tokens (logprobs), how it ended."""

    parts: list[str] = field(default_factory=list)
    tokens: int = 0
    finish: Optional[str] = None
    first: bool = True
    scored: list[Scored] = field(default_factory=list)
    offset: int = 0  # characters of text before the next scored token (completions' text_offset)
    given: tuple[str, ...] = ()  # with echo: the text of each prompt token, as the echoed prompt has it


@dataclass
class _Reply:
    """One admitted request on its way out: what it asked, its generations (one per prompt, or per
    sample), its choices, its id and metrics."""

    prepared: PreparedRequest
    handles: list[GenerationHandle]
    tracker: RequestTracker
    rid: str
    created: int
    endpoint: str
    tokenizer: Any = None  #: the engine's PromptTokenizer (token pieces for logprobs, echo text)
    choices: list[_Choice] = field(default_factory=list)
    _echo_pieces: dict[int, tuple[str, ...]] = field(default_factory=dict)  # per generation: every copy reads them

    def __post_init__(self) -> None:
        self.choices = [_Choice() for _ in range(self.prepared.num_choices)]

    def piece(self, token: int, before: tuple[int, ...] = ()) -> str:
        """A token's text where it stands, after the ids ``before`` (a SentencePiece ``▁brown`` is " brown" there)."""
        return self.tokenizer.piece(token, before)

    def shown(self, chunk: StepChunk) -> StepChunk:
        """A chunk as the client gets it: with ``max_tokens: 0`` (:attr:`PreparedRequest.prompt_only`) the token the
        engine generated is not sent, and the choice ends on ``length`` having decoded nothing."""
        if not self.prepared.prompt_only:
            return chunk
        stats = chunk.stats and dataclasses.replace(chunk.stats, tokens=0, steps=0, tokens_per_step_hist={},
                                                    rows_per_step=[], accepted_from={}, decode_s=0.0,
                                                    draft_tokens=0 if chunk.stats.draft_tokens is not None else None)
        return dataclasses.replace(chunk, tokens=[], text="", logprobs=None, stats=stats,
                                   finish_reason="length" if chunk.finish_reason is not None else None)

    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self.choices)

    def usage(self) -> dict:
        return usage(self.prepared.prompt_tokens, self.completion_tokens(), self.tracker.stats)

    def record(self, generation: int, chunk: StepChunk) -> list[tuple[int, str, Optional[dict]]]:
        """Account a generation's chunk to its choices; returns, per choice, its index, the text
        and the logprobs object this chunk adds (with ``echo``, the prompt comes first)."""
        self.tracker.chunk(chunk, generation)
        request = self.prepared.generations[generation]
        out = []
        for index in self.prepared.copies[generation]:
            choice = self.choices[index]
            before = (*self._start(request), *(t for t, _ in choice.scored[-CONTEXT:]))[-CONTEXT:]
            text, scored, given = chunk.text, [], ()
            if choice.first and self.prepared.echo:
                text = self._echoed(generation) + text
                if chunk.prompt_logprobs is not None:
                    scored = list(zip(request.prompt_ids, chunk.prompt_logprobs))
                    given = choice.given = self._echoed_pieces(generation)
            scored += [(lp.token, lp) for lp in chunk.logprobs or ()]
            logprobs = self._logprobs(scored, choice.offset, before, given) if request.logprobs is not None else None
            if logprobs is not None and "tokens" in logprobs:  # completions: text_offset continues
                choice.offset += sum(len(t) for t in logprobs["tokens"])
            choice.parts.append(text)
            choice.scored += scored
            choice.tokens += len(chunk.tokens)
            if chunk.finish_reason is not None:
                choice.finish = chunk.finish_reason
            out.append((index, text, logprobs))
        return out

    def _prompt_piece(self, token: int, before: tuple[int, ...] = ()) -> str:
        """An echoed prompt position's alternative token, as its text would stand in the echoed prompt."""
        return self.tokenizer.piece(token, before, skip_special=False)

    def _written(self, generation: int) -> Optional[str]:
        """The prompt of ``generation`` as the client wrote it (None: it sent token ids)."""
        texts = self.prepared.echo_texts
        return texts[generation] if generation < len(texts) else None

    def _echoed(self, generation: int) -> str:
        """The prompt of ``generation`` as echoed: a text prompt as the client wrote it (special tokens in it
        included, none the tokenizer added), token ids as their text with every special token's."""
        given = self._written(generation)
        if given is not None:
            return given
        return self.tokenizer.decode(self.prepared.generations[generation].prompt_ids, skip_special=False)

    def _echoed_pieces(self, generation: int) -> tuple[str, ...]:
        """Each prompt token's text in the echoed prompt (for its logprobs), joining to it: a text prompt's parts as
        the tokenizer's offsets place them (a token it added has none), else by decoding, special tokens keeping their
        text and a character split over tokens going with the one that ends it."""
        if generation in self._echo_pieces:
            return self._echo_pieces[generation]
        ids = self.prepared.generations[generation].prompt_ids
        given = self._written(generation)
        pieces = self.tokenizer.text_pieces(given, ids) if given is not None else None
        if pieces is None:  # token ids, or no offsets: by decoding, none for a token the tokenizer added
            lead, trail = self.tokenizer.added(given, ids) if given is not None else (0, 0)
            pieces = ["" for _ in range(lead)] + self.tokenizer.id_pieces(ids[lead:len(ids) - trail]) + \
                ["" for _ in range(trail)]
        self._echo_pieces[generation] = tuple(pieces)
        return self._echo_pieces[generation]

    def _start(self, request: Any) -> tuple[int, ...]:
        """The ids before a choice's first scored one: none with ``echo`` (the prompt's first token starts the
        text), else the prompt's last (as many as the output's own decoding reads)."""
        return () if self.prepared.echo else tuple(request.prompt_ids[-CONTEXT:])

    def _logprobs(self, scored: list[Scored], offset: int = 0, before: tuple[int, ...] = (),
                  given: tuple[str, ...] = ()) -> dict:
        if self.prepared.kind == "completion":
            return completion_logprobs(scored, self.piece, offset, before, given, self._prompt_piece)
        raw = getattr(self.tokenizer, "token_bytes", None)
        return chat_logprobs(scored, self.piece, raw, before)

    def body_choices(self) -> list[tuple[str, Optional[str], Optional[dict]]]:
        """(text, finish_reason, logprobs) of every choice, for the whole response."""
        asked = self.prepared.generations[0].logprobs is not None  # one body: the same for every choice
        starts: list[tuple[int, ...]] = [()] * len(self.choices)
        for g, copies in enumerate(self.prepared.copies):
            for index in copies:
                starts[index] = self._start(self.prepared.generations[g])
        return [("".join(c.parts), c.finish, self._logprobs(c.scored, 0, start, c.given) if asked else None)
                for c, start in zip(self.choices, starts)]

    def cancel(self) -> None:
        for handle in self.handles:
            handle.cancel()

    def note(self, request: Request) -> None:
        """What the access log line says about this request."""
        stats = self.tracker.stats
        spec = stats.spec if stats is not None else self.handles[0].request.lookahead
        note_access(request, prompt=self.prepared.prompt_tokens, completion=self.completion_tokens(),
                    lookahead=str(spec) if spec is not None else None)


async def generate(ctx: ServerContext, request: Request, kind: Kind) -> Response:
    arrival = time.monotonic()
    endpoint = endpoint_label(kind)
    try:
        identity = ctx.check_auth(request)
    except ApiError as exc:
        return _refused(ctx, request, endpoint, exc, ctx.arrive(None))
    leave = ctx.arrive(identity)
    if ctx.stopped_after_s is not None:  # the shutdown grace is over: no engine work starts
        return _refused(ctx, request, endpoint, ApiError.stopping(ctx.stopping_message()), leave)
    if (refusal := ctx.over_share(identity)) is not None:
        return _refused(ctx, request, endpoint, refusal, leave)  # before its body is read or tokenized
    try:
        prepared, handles, release = await admit(ctx, request, kind, identity)
    except ApiError as exc:
        return _refused(ctx, request, endpoint, exc, leave)
    except Exception:
        ctx.metrics.finished(endpoint, 500)  # answered as a 500 by the route (AnsweringRoute), counted here
        leave()
        raise
    except BaseException:
        leave()
        raise
    ctx.in_flight.update(handles)
    if ctx.stopped_after_s is not None:  # admitted as the grace ended (its body was still arriving)
        ctx.stop_in_flight(ctx.stopped_after_s)
    leave = _both(leave, _both(release, lambda: ctx.in_flight.difference_update(handles)))
    ctx.metrics.prompt_tokens.inc(prepared.prompt_tokens)
    for handle in handles:
        ctx.metrics.admitted(handle.request)
    tracker = RequestTracker(ctx.metrics, arrival, on_done=leave, prompt_tokens=prepared.prompt_tokens)
    reply = _Reply(prepared, handles, tracker,
                   rid=f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}",
                   created=int(time.time()), endpoint=endpoint, tokenizer=ctx.ready_engine().tokenizer)
    if prepared.stream:
        return SSEResponse(stream_events(ctx, reply, request))
    return await collect(request, reply)


def _refused(ctx: ServerContext, request: Request, endpoint: str, exc: ApiError,
             leave: Callable[..., None]) -> Response:
    """The error response of a request refused before it ran, counted and logged."""
    ctx.metrics.finished(endpoint, exc.status)
    leave(refused=True)  # it ran nothing: a tenant cannot renew its copy of /metrics with requests it sends to fail
    note_access(request, error=exc.code, param=exc.param)
    return error_response(exc)


def _both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        first()
        second()
    return call


async def admit(ctx: ServerContext, request: Request, kind: Kind, identity: Optional[Identity]
                ) -> tuple[PreparedRequest, list[GenerationHandle], Callable[[], None]]:
    """Check, parse, tokenize and submit a request of ``identity`` (each of its generations), held against its
    share where the server keeps it (:meth:`ServerContext.hold`: the returned call releases it); every refusal
    is an :class:`ApiError`, and a refusal of a later generation cancels the earlier ones."""
    payload = await ctx.read_json(request)
    engine = ctx.ready_engine()
    admitting = getattr(engine, "admitting", None)  # the reference engine: its cost model skips the steps this overlaps
    with admitting() if admitting is not None else contextlib.nullcontext():
        return await _admit(ctx, kind, identity, engine, payload)


async def _admit(ctx: ServerContext, kind: Kind, identity: Optional[Identity], engine: Any, payload: Any
                 ) -> tuple[PreparedRequest, list[GenerationHandle], Callable[[], None]]:
    body = parse_body(kind, payload)
    drafting, stop = check_request(kind, body, engine.info)  # type: ignore[arg-type]
    ctx.note_ignored(ignored_fields(body))
    prompts = await asyncio.to_thread(tokenize, kind, body, engine.tokenizer)  # type: ignore[arg-type]
    prepared = assemble(kind, body, engine.info, prompts, drafting, stop)  # type: ignore[arg-type]
    share = (getattr(engine, "share", None) or ctx.settings.share) if identity is not None else None
    _check_fits(prepared, engine.info, share, body.n or 1)
    scope = ctx.cache_scope(identity, body.cache_salt)
    release = ctx.hold(identity, len(prepared.generations))
    handles: list[GenerationHandle] = []
    try:
        for generation in prepared.generations:
            handles.append(engine.submit(dataclasses.replace(generation, load=ctx.active, cache_scope=scope)))
    except (EngineOverloaded, RequestRejected) as exc:
        for handle in handles:
            handle.cancel()
        release()
        if isinstance(exc, EngineOverloaded):
            raise ApiError.overloaded(exc.message, exc.retry_after_s) from None
        raise ApiError.bad_request(exc.message, param=exc.param) from None
    except BaseException:
        release()
        raise
    return prepared, handles, release


def _check_fits(prepared: PreparedRequest, info: Any, share: Any, n: int) -> None:
    """A request that brings more sequences than the engine takes in at once, or than its API key's share, could
    never be admitted: a 400 naming ``n`` (or the prompts) and the bound, not a 429 that retrying never ends."""
    sequences = len(prepared.generations)
    bounds = [(info.limits.max_sequences, "the batch's max_batch_size plus serve.max_queue: what the engine takes in "
               "at once")]
    if share is not None:
        bounds.append((share.held, f"this API key's share of the server: {share.describe()}"))
    prompts = prepared.num_choices // n
    what = f"{prompts} prompt(s) x n = {n} samples" if sequences > prompts else f"{prompts} prompt(s)"
    for bound, why in bounds:
        if bound is not None and sequences > bound:
            raise ApiError.bad_request(
                f"the request runs {sequences} sequences ({what}); this server admits at most {bound} from one "
                f"request ({why}), so it could never run: retrying would not help", code="too_many_sequences",
                param="n" if sequences > prompts else "prompt")


def _engine_error(exc: Exception) -> ApiError:
    if isinstance(exc, RequestRejected):
        return ApiError.bad_request(exc.message, param=exc.param)
    if isinstance(exc, ServerStopping):
        return ApiError.stopping(exc.message)
    return ApiError.engine_failure(str(exc))


_END = object()


async def _merged(reply: _Reply, keepalive_s: float) -> AsyncIterator[Optional[tuple[int, StepChunk]]]:
    """Every generation's chunks as ``(generation, chunk)`` in arrival order, None when nothing came
    for ``keepalive_s``; ends when every generation has ended (an engine error is raised)."""
    if len(reply.handles) == 1:  # the common case: no tasks
        handle = reply.handles[0]
        while True:
            try:
                chunk = await handle.next_within(keepalive_s)
            except StopAsyncIteration:
                return
            yield None if chunk is None else (0, reply.shown(chunk))
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, handle: GenerationHandle) -> None:
        try:
            async for chunk in handle:
                await queue.put((index, chunk))
        except (EngineFailure, RequestRejected) as exc:
            await queue.put((index, exc))
        await queue.put((index, _END))

    tasks = [asyncio.create_task(pump(i, h)) for i, h in enumerate(reply.handles)]
    try:
        running = len(tasks)
        while running:
            try:
                index, item = await asyncio.wait_for(queue.get(), keepalive_s)
            except asyncio.TimeoutError:
                yield None
                continue
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, reply.shown(item)
    finally:
        for task in tasks:
            task.cancel()


def _check_finished(reply: _Reply) -> None:
    if any(c.finish is None for c in reply.choices):
        raise EngineFailure("the generation ended without a finish reason")


async def stream_events(ctx: ServerContext, reply: _Reply, request: Optional[Request] = None) -> AsyncIterator[str]:
    """The SSE events of one streamed request: one per engine step and choice (keep-alive comments
    while it waits)."""
    status = 499  # until proven otherwise: a cancelled generator never reaches the end
    prepared = reply.prepared
    try:
        try:
            async for item in _merged(reply, ctx.settings.keepalive_s):
                if item is None:
                    yield SSE_KEEPALIVE
                    continue
                generation, chunk = item
                for index, text, logprobs in reply.record(generation, chunk):
                    choice = reply.choices[index]
                    running = usage(prepared.prompt_tokens, reply.completion_tokens(), None) \
                        if prepared.continuous_usage else None
                    yield sse_data(chunk_event(prepared, reply.rid, reply.created, text, chunk.finish_reason,
                                               choice.first, running, index=index, logprobs=logprobs))
                    choice.first = False
            _check_finished(reply)
        except (EngineFailure, RequestRejected) as exc:
            err = _engine_error(exc)
            status = err.status
            if request is not None:
                note_access(request, error=err.code, param=err.param)
            yield sse_data(err.body())
            yield SSE_DONE
            return
        except Exception as exc:  # noqa: BLE001 - a bug of ours: the stream ends with the 500's body, as any error
            status = 500
            rid = request_id(request) if request is not None else "-"
            log.error("unexpected error in a streamed reply (request id %s)", rid, exc_info=exc)
            if request is not None:
                note_access(request, error="internal_error")
            yield sse_data(ApiError.internal(rid).body())
            yield SSE_DONE
            return
        if prepared.include_usage:
            yield sse_data(usage_event(prepared, reply.rid, reply.created, reply.usage()))
        yield SSE_DONE
        status = 200
    finally:
        reply.cancel()
        reply.tracker.done(reply.endpoint, status)
        if request is not None:
            reply.note(request)


async def _consume(reply: _Reply) -> None:
    async for item in _merged(reply, 3600.0):
        if item is not None:
            for index, _, _ in reply.record(*item):
                reply.choices[index].first = False
    _check_finished(reply)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(request: Request, reply: _Reply) -> Response:
    """The whole response as one JSON body; a client that disconnects first cancels the generations."""
    work = asyncio.create_task(_consume(reply))
    watch = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():  # the client went away (or we were cancelled): stop generating
            reply.cancel()
            work.cancel()
        watch.cancel()
    reply.note(request)
    if not work.done() or work.cancelled():
        reply.tracker.done(reply.endpoint, 499)
        return Response(status_code=499)
    try:
        work.result()
        reply.note(request)
        body = completion_body(reply.prepared, reply.rid, reply.created, reply.body_choices(), reply.usage())
    except (EngineFailure, RequestRejected) as exc:
        err = _engine_error(exc)
        reply.tracker.done(reply.endpoint, err.status)
        note_access(request, error=err.code, param=err.param)
        return error_response(err)
    except Exception as exc:  # noqa: BLE001 - a bug of ours: answered as any 500, counted, its hold released
        reply.tracker.done(reply.endpoint, 500)
        return unexpected_response(request, exc)
    finally:
        reply.cancel()
    reply.tracker.done(reply.endpoint, 200)
    return JSONResponse(body)

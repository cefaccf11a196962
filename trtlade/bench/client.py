"""One streamed request, timed chunk by chunk (httpx + :mod:`trtlade.bench.sse`).

:func:`stream_request` never raises for a failed request: HTTP errors, error events inside the
stream, timeouts, refused or dropped connections and malformed streams all land in the
:class:`~trtlade.bench.records.RequestRecord` as ``status`` / ``error`` / ``error_kind``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from typing import Any, Optional

import httpx

from trtlade.errors import TrtladeError
from trtlade.bench.records import RequestRecord
from trtlade.bench.sse import SSEDecoder

__all__ = ["ServerError", "fetch_json", "make_client", "stream_request"]

_MAX_ERROR_BODY = 64 * 1024
#: how long the body may stay open after "data: [DONE]" (read to its end, the connection is reused; a server that
#: holds it open longer costs the worker a new connection, not its time)
_AFTER_DONE_S = 0.1


class ServerError(TrtladeError, RuntimeError):
    """A preflight call (models, version) failed: ``kind`` is connection / http / timeout / protocol."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def make_client(max_connections: int, timeout: float,
                verify: "ssl.SSLContext | bool" = True) -> httpx.AsyncClient:
    """An httpx client; ``trust_env=False``: no proxies from the environment, only the URLs given.

    The load generator gives every worker its own client with one connection per server: httpcore's
    pool scans all its connections on every request, which costs O(C) per request with one shared
    pool of C connections (3x fewer requests/s at C=64 on a 2-core machine).
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                             trust_env=False, verify=verify)


async def fetch_json(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                     timeout: float = 10.0) -> Any:
    """GET ``url`` and decode JSON; :class:`ServerError` naming what went wrong otherwise."""
    try:
        resp = await client.get(url, headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        raise ServerError(f"GET {url}: no answer within {timeout:g} s", kind="timeout") from None
    except httpx.HTTPError as exc:
        raise ServerError(f"GET {url}: cannot connect ({_describe(exc)})", kind="connection") from None
    if resp.status_code != 200:
        raise ServerError(f"GET {url}: HTTP {resp.status_code}: {_error_message(resp.content)}", kind="http")
    try:
        return resp.json()
    except ValueError:
        raise ServerError(f"GET {url}: the answer is not JSON", kind="protocol") from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error_message(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body text (shortened)."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    msg = _event_error(obj) if isinstance(obj, dict) else None
    if msg is None and isinstance(obj, dict) and isinstance(obj.get("detail"), str):
        msg = obj["detail"]  # FastAPI's default error shape
    return msg if msg is not None else text[:300]


def _event_error(obj: dict[str, Any]) -> Optional[str]:
    """The message of an error object (``{"error": {...}}`` or vLLM's ``{"object": "error"}``)."""
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


def _content_of(choice: dict[str, Any], kind: str) -> str:
    """Text a choice carries: ``text`` (completions) or ``delta.content`` / reasoning (chat)."""
    if kind == "completions":
        text = choice.get("text")
        return text if isinstance(text, str) else ""
    delta = choice.get("delta") or {}
    for key in ("content", "reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


class _StreamState:
    __slots__ = ("record", "kind", "t0", "parts")

    def __init__(self, record: RequestRecord, kind: str, t0: float) -> None:
        self.record = record
        self.kind = kind
        self.t0 = t0
        self.parts: list[str] = []

    def event(self, data: str, now: float) -> None:
        rec = self.record
        if rec.first_event_time is None:
            rec.first_event_time = now - self.t0
        rec.last_event_time = now - self.t0
        if data.strip() == "[DONE]":
            rec.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.fail("protocol", f"an event is not JSON: {data[:120]!r}")
            return
        if not isinstance(obj, dict):
            self.fail("protocol", f"an event is not a JSON object: {data[:120]!r}")
            return
        message = _event_error(obj)
        if message is not None:
            self.fail("stream_error", f"error event in stream: {message}")
            return
        text = ""
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict):
                text += _content_of(choice, self.kind)
                if choice.get("finish_reason"):
                    rec.finish_reason = str(choice["finish_reason"])
        if text:
            rec.chunk_times.append(now - self.t0)
            self.parts.append(text)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                rec.completion_tokens = usage["completion_tokens"]
            if isinstance(usage.get("lookahead"), dict):
                rec.usage_lookahead = usage["lookahead"]
            if isinstance(usage.get("speculation"), dict):
                rec.usage_speculation = usage["speculation"]
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = details["cached_tokens"]

    def fail(self, kind: str, message: str) -> None:
        if self.record.error is None:  # keep the first error
            self.record.error = message
            self.record.error_kind = kind  # type: ignore[assignment]

    def finish(self, leftover: bool) -> None:
        rec = self.record
        rec.output_text = "".join(self.parts)
        rec.output_chars = len(rec.output_text)
        if rec.error is not None:
            return
        if not rec.done and rec.finish_reason is None:
            what = "with an unterminated event" if leftover else "before [DONE]"
            self.fail("protocol", f"the stream ended {what} and without a finish_reason")
        elif rec.first_event_time is None:
            self.fail("protocol", "the response had no events (is it a text/event-stream?)")


class _Deadline:
    """``asyncio.timeout`` for Python 3.10 (it came in 3.11): cancels the task at ``when()``, which
    ``reschedule`` moves, and turns that cancellation into ``TimeoutError`` on the way out.

    >>> async def late():
    ...     async with _Deadline(0.01):
    ...         await asyncio.sleep(1)
    >>> try:
    ...     asyncio.run(late())
    ... except TimeoutError:
    ...     print("timed out")
    timed out
    """

    def __init__(self, delay: Optional[float]) -> None:
        self._delay = delay
        self._when: Optional[float] = None
        self._handle: Optional[asyncio.TimerHandle] = None
        self._fired = False

    def when(self) -> Optional[float]:
        return self._when

    def reschedule(self, when: Optional[float]) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._when, self._handle = when, None
        if when is not None:
            self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    async def __aenter__(self) -> "_Deadline":
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.reschedule(None if self._delay is None else self._loop.time() + self._delay)
        return self

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if self._handle is not None:
            self._handle.cancel()
        if self._fired and kind is asyncio.CancelledError:
            raise TimeoutError from exc
        return False


#: the whole request's deadline, which a stream that lingers after [DONE] moves sooner
deadline: Any = getattr(asyncio, "timeout", None) if sys.version_info >= (3, 11) else _Deadline


async def stream_request(client: httpx.AsyncClient, url: str, body: dict[str, Any],
                         headers: dict[str, str], record: RequestRecord, *, kind: str,
                         timeout: float) -> RequestRecord:
    """POST ``body`` with ``stream: true`` and fill ``record`` with what arrived, when.

    The whole request (connect, every read) is bounded by ``timeout`` seconds.
    """
    record.start = t0 = time.perf_counter()
    state = _StreamState(record, kind, t0)
    decoder = SSEDecoder()
    lingering = False
    try:
        async with deadline(timeout) as bound:
            async with client.stream("POST", url, json=body, headers=headers) as resp:
                record.status = resp.status_code
                if resp.status_code != 200:
                    data = b""
                    async for piece in resp.aiter_bytes():
                        data += piece
                        if len(data) >= _MAX_ERROR_BODY:
                            break
                    state.fail("http", f"HTTP {resp.status_code}: {_error_message(data)}")
                else:
                    async for piece in resp.aiter_bytes():
                        now = time.perf_counter()
                        for ev in decoder.feed(piece, now):
                            state.event(ev.data, ev.time)
                        if record.done and not lingering:
                            # read on to the end of the body (keeps the connection reusable), but
                            # do not wait long for a server that keeps the stream open after [DONE]
                            lingering = True
                            grace = asyncio.get_running_loop().time() + _AFTER_DONE_S
                            due = bound.when()
                            bound.reschedule(grace if due is None else min(due, grace))
    except TimeoutError:
        _failure(state, "timeout", f"no complete response within {timeout:g} s (--timeout)")
    except httpx.TimeoutException as exc:
        _failure(state, "timeout", f"timed out ({type(exc).__name__}) after {time.perf_counter() - t0:.1f} s")
    except httpx.ConnectError as exc:
        _failure(state, "connection", f"cannot connect to {url} ({_describe(exc)})")
    except httpx.RemoteProtocolError as exc:
        _failure(state, "protocol", f"connection broken: {_describe(exc)}")
    except httpx.HTTPError as exc:
        _failure(state, "connection", f"connection failed: {_describe(exc)}")
    record.end = time.perf_counter() - t0
    state.finish(decoder.close())
    return record


def _failure(state: _StreamState, kind: str, message: str) -> None:
    """A transport failure; after "data: [DONE]" the answer is complete and it no longer matters."""
    if not state.record.done:
        state.fail(kind, message)

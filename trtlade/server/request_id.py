"""Request ids: every HTTP response carries ``X-Request-Id``, the client's own or one the server made.

A client that sends ``X-Request-Id`` (a proxy's trace id, its own retry key) gets it back unchanged; a request
without one gets ``req_`` and 32 hex digits, as OpenAI names its requests. The id is in the access-log line
(``id=``) and in the server's log line of an unexpected error, whose 500 body names it instead of the error's
text (a traceback's text is the server's internals, not the client's business): the operator finds the
traceback by the id the client reports.

An id must be 1-128 visible ASCII characters (no space, no control character: a log line stays one line), sent
once; anything else is a 400 that names the header, never silently replaced.

    >>> request_id_of("trace-7f3a"), request_id_of(None).startswith("req_"), len(request_id_of(None))
    ('trace-7f3a', True, 36)
    >>> try:
    ...     request_id_of("two words")
    ... except ValueError as exc:
    ...     print(exc)
    X-Request-Id must be 1-128 visible ASCII characters, no space or control character (got 9 characters: 'two words')
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Awaitable, Callable, MutableMapping, Optional

__all__ = ["DESCRIPTION", "HEADER", "RequestIdMiddleware", "request_id_of", "request_id"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]

HEADER = "X-Request-Id"
#: what the API reference says of the header (scripts/gen_reference.py)
DESCRIPTION = ("On every response: the request's own id when it sent one (1-128 visible ASCII characters, sent once, "
               "else a 400 naming the header), else `req_` and 32 hex digits. The access log's `id=` and the server's "
               "log line of a 500 carry it; a 500's body names it instead of the error's text.")
_MAX = 128
_VALID = re.compile(rf"[\x21-\x7e]{{1,{_MAX}}}")  # visible ASCII: a log line stays one line


def request_id_of(value: Optional[str]) -> str:
    """The client's id when it sent a valid one, a new ``req_<32 hex>`` when it sent none; ValueError otherwise."""
    if value is None:
        return f"req_{uuid.uuid4().hex}"
    if _VALID.fullmatch(value):
        return value
    shown = f": {value!r}" if len(value) <= _MAX else ""
    raise ValueError(f"{HEADER} must be 1-{_MAX} visible ASCII characters, no space or control character "
                     f"(got {len(value)} characters{shown})")


def request_id(request: Any) -> str:
    """The id of ``request`` (a Starlette request), ``-`` outside the middleware (an app built without it)."""
    return getattr(request.state, "request_id", None) or "-"


class RequestIdMiddleware:
    """Pure ASGI middleware: sets ``scope["state"]["request_id"]`` and adds ``X-Request-Id`` to the response."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        sent = [value for name, value in scope.get("headers", ()) if name.lower() == b"x-request-id"]
        try:
            if len(sent) > 1:
                raise ValueError(f"{HEADER} was sent {len(sent)} times; send it once")
            rid = request_id_of(sent[0].decode("latin-1") if sent else None)
        except ValueError as exc:
            await _refuse(scope, receive, send, str(exc))
            return
        scope.setdefault("state", {})["request_id"] = rid

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"x-request-id"]
                message["headers"] = [*headers, (b"x-request-id", rid.encode("ascii"))]
            await send(message)
        await self.app(scope, receive, with_id)


#: the generation routes, by their kind (/metrics labels it: ``endpoint_label``)
_ENDPOINTS = {"/v1/completions": "completion", "/v1/chat/completions": "chat"}


async def _refuse(scope: Scope, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]],
                  message: str) -> None:
    """The 400 of a malformed id, in the OpenAI error shape, with an id of the server's own: in the access log (the
    middleware outside this one) and, on a generation route, counted in /metrics like any other 400."""
    from trtlade.server.errors import ApiError, error_response
    from trtlade.server.responses import endpoint_label

    rid = request_id_of(None)
    scope.setdefault("state", {}).update(request_id=rid, access={"error": "invalid_header", "param": HEADER})
    kind = _ENDPOINTS.get(scope.get("path", ""))
    metrics = getattr(getattr(scope.get("app"), "state", None), "metrics", None)
    if kind is not None and metrics is not None:
        metrics.finished(endpoint_label(kind), 400)
    response = error_response(ApiError(400, f"{message}; send none and the server names the request",
                                       param=HEADER, code="invalid_header",
                                       headers={HEADER: rid}))
    await response(scope, receive, send)

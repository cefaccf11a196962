"""The route class every trtlade route uses: an error nobody expected is answered, not re-raised.

Starlette answers an ``Exception`` handler's response from its outermost middleware and then raises the exception
again (``ServerErrorMiddleware``), so the server logged a second traceback, the access log saw a dropped request
(499) and the client's connection was closed under its next request. Here the route itself turns the error into
the 500 body (and one logged traceback), like any other response; ApiError and HTTP errors go on to their handlers.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Coroutine

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from trtlade.server.context import note_access
from trtlade.server.errors import ApiError, error_response
from trtlade.server.request_id import HEADER, request_id

__all__ = ["AnsweringRoute", "unexpected_response"]

log = logging.getLogger("trtlade.server")


def unexpected_response(request: Request, exc: Exception) -> Response:
    """The 500 for an error no rule expected: logged once with its traceback and the request id, which the body names
    (not the error's text), noted for the access log."""
    rid = request_id(request)
    log.error("unexpected error in %s %s (request id %s)", request.method, request.url.path, rid, exc_info=exc)
    note_access(request, error="internal_error")
    err = ApiError.internal(rid)
    if rid != "-":  # Starlette answers an error raised in a middleware outside every middleware: the header here
        err.headers = {HEADER: rid}
    return error_response(err)


class AnsweringRoute(APIRoute):
    """An APIRoute whose handler answers an unexpected exception with the 500 body instead of raising it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except (ApiError, StarletteHTTPException, RequestValidationError):
                raise
            except Exception as exc:  # noqa: BLE001 - the point: answered, not re-raised
                return unexpected_response(request, exc)
        return answer

"""The OpenAI-compatible HTTP app (FastAPI): ``create_app(engine_or_factory, settings)``.

With a factory, the engine loads in a background thread when the app starts: /health answers 503
``loading`` until it is ready and generation routes answer 503 with Retry-After meanwhile.

Routes (each module can be read and tested on its own):

- :mod:`trtlade.server.generation`: POST /v1/completions, POST /v1/chat/completions;
- :mod:`trtlade.server.info_routes`: GET /v1/models, /health, /metrics, /version.

/v1/* need the API key when one is set. What they share (settings, metrics, the engine slot) is the
:class:`~trtlade.server.context.ServerContext` in ``app.state.context``. Every error, including
unknown routes and unexpected exceptions, is answered in the OpenAI error shape. Every response carries
``X-Request-Id`` (:mod:`trtlade.server.request_id`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from trtlade import __version__
from trtlade.server import generation, info_routes
from trtlade.server.access_log import AccessLogMiddleware
from trtlade.server.context import EngineSource, ServerContext, ServerSettings, ServerState, note_access
from trtlade.server.errors import ApiError, error_response
from trtlade.server.metrics import ServerMetrics
from trtlade.server.request_id import RequestIdMiddleware
from trtlade.server.routes import unexpected_response

__all__ = ["ServerSettings", "ServerState", "add_error_handlers", "create_app"]

log = logging.getLogger("trtlade.server")

_ROUTES = "/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, /version"


def create_app(engine: EngineSource, settings: Optional[ServerSettings] = None, *,
               on_load_failed: Optional[Callable[[BaseException], None]] = None) -> FastAPI:
    """The ASGI app serving ``engine`` (an engine, or a zero-argument factory run in a thread)."""
    ctx = ServerContext(settings or ServerSettings(), ServerMetrics(), ServerState(), started_at=time.time())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state = ctx.state
        state.status, state.engine, state.error = "loading", None, None
        state.loaded = asyncio.Event()
        task = asyncio.create_task(ctx.load(engine, on_load_failed))
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
    app.state.context = ctx
    app.state.trtlade = ctx.state
    app.state.metrics = ctx.metrics
    add_error_handlers(app)
    app.include_router(generation.router)
    app.include_router(info_routes.router)
    app.add_middleware(RequestIdMiddleware)
    if ctx.settings.access_log:  # added last, so outermost: it logs the ids' own refusals too, and reads the id
        app.add_middleware(AccessLogMiddleware, probes=ctx.settings.access_log_probes)  # the scope carries up
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error in the OpenAI shape: ApiError, unknown routes/methods, anything unexpected."""
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    note_access(request, error=exc.code, param=exc.param)
    return error_response(exc)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 404:
        return error_response(ApiError(404, f"no route {request.method} {request.url.path}; see {_ROUTES}",
                                       code="not_found"))
    if exc.status_code == 405:
        allowed = dict(exc.headers or {})  # Starlette names the route's methods in Allow
        return error_response(ApiError(405, f"method {request.method} is not allowed on {request.url.path}"
                                       + (f"; allowed: {allowed['Allow']}" if "Allow" in allowed else ""),
                                       code="method_not_allowed", headers=allowed))
    return error_response(ApiError(exc.status_code, str(exc.detail)))


async def _unexpected(request: Request, exc: Exception) -> Response:
    """Outside a route (a middleware): Starlette raises the error again after this answer; routes answer their own
    (:class:`~trtlade.server.routes.AnsweringRoute`)."""
    return unexpected_response(request, exc)

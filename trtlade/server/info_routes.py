"""The information routes: GET /v1/models, /metrics and /version (each needs a key when the server has keys;
``serve.metrics_without_key`` opens /metrics; with several keys, /metrics is live for an admin key and
aggregated over others' requests for the rest, :mod:`trtlade.server.metrics_view`, and /version's live
counters need an admin key), /health (open: load balancers poll it); and POST /admin/prefix-cache/clear (needs
the API key), which the bench calls between series."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from trtlade import __version__
from trtlade.host import host_info
from trtlade.server.context import ServerContext, server_context
from trtlade.server.routes import AnsweringRoute
from trtlade.server.errors import ApiError
from trtlade.server.metrics import CONTENT_TYPE_LATEST

__all__ = ["router"]

router = APIRouter(route_class=AnsweringRoute)


@router.get("/v1/models")
async def models(request: Request, ctx: ServerContext = Depends(server_context)) -> JSONResponse:
    ctx.check_auth(request)
    return JSONResponse({"object": "list", "data": [_model_card(ctx)]})


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request, ctx: ServerContext = Depends(server_context)) -> JSONResponse:
    """OpenAI's retrieve-model route: the served model's card, or a 404 naming the one served."""
    ctx.check_auth(request)
    card = _model_card(ctx)
    if model_id != card["id"] and model_id.rsplit("/", 1)[-1] != card["id"]:
        raise ApiError.model_not_found(model_id, card["id"])
    return JSONResponse(card)


def _model_card(ctx: ServerContext) -> dict:
    info = ctx.ready_engine().info
    return {"id": info.model_id, "object": "model", "created": int(ctx.started_at), "owned_by": "trtlade",
            "max_model_len": info.limits.max_seq_len}


@router.api_route("/health", methods=["GET", "HEAD"])  # HEAD: load balancers that probe without a body
async def health(ctx: ServerContext = Depends(server_context)) -> JSONResponse:
    state = ctx.state
    body: dict[str, Any] = {"status": state.status}
    if state.error:
        body["error"] = state.error
    return JSONResponse(body, status_code=200 if state.status == "ready" else 503)


#: the response header that says whether /metrics is live or a tenant's copy (what `trtlade bench` reads steps from)
METRICS_VIEW_HEADER = "X-Trtlade-Metrics"


@router.get("/metrics")
async def prometheus(request: Request, ctx: ServerContext = Depends(server_context)) -> Response:
    text, live = ctx.metrics_text(request)
    return Response(text, media_type=CONTENT_TYPE_LATEST, headers={METRICS_VIEW_HEADER: "live" if live else "copy"})


@router.get("/version")
async def version(request: Request, ctx: ServerContext = Depends(server_context)) -> JSONResponse:
    identity = ctx.check_auth(request)
    engine = ctx.state.engine
    info = engine.info if engine is not None else None
    settings = ctx.settings
    return JSONResponse({
        "trtlade": __version__,
        "status": ctx.state.status,
        "engine": info.to_dict() if info is not None else None,
        "spec": str(info.spec) if info is not None else None,
        "scheduling": info.scheduling if info is not None else None,
        "live": engine.live() if engine is not None and hasattr(engine, "live") and ctx.sees_live(identity) else None,
        "host": dict(host_info()),
        "manifest": settings.manifest,
        "prefix_cache_scope": settings.prefix_cache_scope,
        "identities": len(keys.entries) if (keys := ctx.keys) is not None else 0,
        **({"source": settings.source} if settings.source else {}),
        **({"http_stack": settings.http_stack} if settings.http_stack else {}),
    })


@router.post("/admin/prefix-cache/clear")
async def clear_prefix_cache(request: Request, ctx: ServerContext = Depends(server_context)) -> JSONResponse:
    """Drop every block of the reference engine's prefix cache and what finished requests left in its drafters' pools
    (retained SA requests, public NGram pools), between two engine steps; 404 on an engine with neither to empty
    (TensorRT-LLM's).
    ``trtlade bench`` calls it before each series so that modes compare on equal terms (it sends the same prompts at
    every level and repeat). With several keys, only an admin key may."""
    ctx.check_admin(request)
    clear = getattr(ctx.ready_engine(), "clear_prefix_cache", None)
    dropped = await clear() if clear is not None else None
    if dropped is None:
        raise ApiError(404, "this server's engine keeps no prefix cache or drafter pools trtlade can empty (the "
                       "reference engine keeps its drafters' pools, and a prefix cache when serve.prefix_cache_mb "
                       "(--prefix-cache-mb) is above 0)", code="no_prefix_cache")
    return JSONResponse({"cleared": dropped})

"""What every route shares: the settings, the metrics and the engine slot (:class:`ServerContext`).

The app keeps one context in ``app.state.context``; routes get it with ``Depends(server_context)``.
The engine slot goes ``loading`` -> ``ready`` (or ``failed``) -> ``stopping``: while it is not
ready, generation routes answer 503 (with Retry-After while loading or stopping).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from fastapi import Request
from starlette.requests import ClientDisconnect

from trtlade.contract.protocol import CacheScope
from trtlade.contract.serving import FairShare, GenerationHandle, ServerStopping, ServingEngine
from trtlade.errors import RepeatedKeyError, keys_once
from trtlade.server.errors import ApiError
from trtlade.server.identity import Identity, KeyRing
from trtlade.server.metrics import ServerMetrics
from trtlade.server.metrics_view import OPEN_READER, TenantView
from trtlade.server.share import ShareLedger

__all__ = ["EngineSource", "ServerContext", "ServerSettings", "ServerState", "server_context"]

log = logging.getLogger("trtlade.server")

EngineSource = Union[ServingEngine, Callable[[], ServingEngine]]


async def in_own_thread(fn: Callable[[], Any], name: str = "trtlade-engine-load") -> Any:
    """``fn()`` in a new thread that ends with it (not the event loop's executor, whose threads stay).

    Why: loading an engine runs OpenMP parallel regions (the reference engine calibrates its steps), and
    libgomp keeps a pool of worker threads for each thread that ran one, until that thread exits. With a
    second pool alive next to the engine thread's, libgomp counts more threads than CPUs and its idle
    workers stop spinning between parallel regions, so each of a step's ~300 regions wakes them from a
    futex: served steps of 8 sequences took 24-26 ms against 20 ms in-process (2-core AMD EPYC Zen 4).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(setter: Callable[[Any], None], value: Any) -> None:
        if not done.done():  # cancelled meanwhile (the server stops while loading)
            setter(value)

    def target() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, done.set_exception, exc)
        else:
            loop.call_soon_threadsafe(settle, done.set_result, result)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await done


@dataclass(frozen=True)
class ServerSettings:
    """HTTP-level settings. ``api_key``: required Bearer token (None: no auth); ``keys``: the server's
    identities (a keys file, with ``api_key`` as ``default``; None: only ``api_key``, if any).
    ``prefix_cache_scope``: whose cached prompt blocks a request may reuse (``identity``, ``salt``,
    ``global``: :class:`~trtlade.contract.protocol.CacheScope`; None, the default: ``identity`` with keys, as
    ``trtlade serve`` chooses, else ``global``). ``manifest``: the
    bundle's trtlade-manifest.json, shown by /version. ``keepalive_s``: SSE comment interval while a
    streamed request waits. ``access_log``: one log line per request (:mod:`trtlade.server.access_log`);
    ``access_log_probes``: health checks and metrics scrapes too. ``http_stack``: the event loop and
    HTTP parser uvicorn runs (:func:`trtlade.server.runner.http_stack`), shown by /version.
    ``metrics_without_key``: GET /metrics open although the server has keys; ``metrics_min_others``: what a
    tenant reads of /metrics is renewed only over that many other requests (:mod:`~trtlade.server.metrics_view`)."""

    api_key: Optional[str] = None
    keys: Optional[KeyRing] = None
    prefix_cache_scope: Optional[str] = None
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_s: float = 15.0
    manifest: Optional[dict[str, Any]] = None
    source: dict[str, Any] = field(default_factory=dict)
    access_log: bool = True
    access_log_probes: bool = False
    http_stack: dict[str, str] = field(default_factory=dict)
    #: GET /metrics without a key although the server has keys (``serve.metrics_without_key``)
    metrics_without_key: bool = False
    #: a tenant's copy of /metrics is renewed over at least this many others' requests (``serve.metrics_min_others``)
    metrics_min_others: int = 4
    #: each identity's share, enforced here for an engine that keeps none of its own (:mod:`trtlade.server.share`)
    share: Optional[FairShare] = None

    def __post_init__(self) -> None:
        if self.prefix_cache_scope is None:  # with keys, each tenant's own unless the caller says otherwise
            object.__setattr__(self, "prefix_cache_scope", "identity" if self.keys is not None else "global")


@dataclass
class ServerState:
    """The engine slot: ``loading`` -> ``ready`` (or ``failed``) -> ``stopping``."""

    status: str = "loading"
    engine: Optional[ServingEngine] = None
    error: Optional[str] = None
    loaded: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class ServerContext:
    """Settings, metrics and engine state of one app, with the checks every route makes."""

    settings: ServerSettings
    metrics: ServerMetrics
    state: ServerState
    started_at: float
    ignored_seen: set[str] = field(default_factory=set)
    #: generation requests from their arrival to their end (what a schedule band is keyed by)
    active: int = 0
    #: the generations admitted and not yet answered (what :meth:`stop_in_flight` ends)
    in_flight: "weakref.WeakSet[GenerationHandle]" = field(default_factory=weakref.WeakSet)
    _ledger: Optional[ShareLedger] = None

    #: the shutdown grace that ended (None: serving): from then on every request is answered a 503 server_stopping
    stopped_after_s: Optional[float] = None

    def stop_in_flight(self, grace_s: float) -> int:
        """End every generation still running when the shutdown grace of ``grace_s`` ended: each request is answered
        a 503 ``server_stopping`` (a stream: its error event and ``[DONE]``) and its engine work stops; a request
        admitted later (its body was still arriving) is refused the same way. Returns how many it ended."""
        self.stopped_after_s = grace_s
        handles = [h for h in list(self.in_flight) if not h.finished]
        for handle in handles:
            handle.abort(ServerStopping(self.stopping_message()))
        if handles:
            log.warning("shutdown grace (%g s) over: %d generation(s) still running were ended with a 503",
                        grace_s, len(handles))
        return len(handles)

    def stopping_message(self) -> str:
        return (f"the server is stopping: this request was still running when its shutdown grace "
                f"(serve.shutdown_grace_s = {self.stopped_after_s:g} s) ended; send it again (to another replica, "
                "or once this one is back)")

    def arrive(self, identity: Optional[Identity]) -> Callable[[], None]:
        """Count a generation request of ``identity`` (None: no keys, or no valid key) from its arrival, for
        the schedule's load and the tenants' view of the metrics; returns the (idempotent) call that ends it
        (``refused=True``: it never ran, and does not count toward renewing a tenant's copy of the metrics)."""
        self.active += 1
        end_view = self.tenant_view.begin(identity.name if identity is not None else None)
        ended = False

        def leave(refused: bool = False) -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.active -= 1
                end_view(counted=not refused)

        return leave

    def over_share(self, identity: Optional[Identity]) -> Optional[ApiError]:
        """The 429 for a request of ``identity`` that holds its whole fair share of the engine already, found
        before its body is read (None: go on; the engine, or :meth:`hold`, checks again at submit)."""
        if identity is None:
            return None
        check = getattr(self.state.engine, "over_share", None)
        if check is None:
            ledger = self.share_ledger
            return ledger.refusal(identity.name, 1) if ledger is not None else None
        refusal = check(identity.name)
        return ApiError.overloaded(refusal.message, refusal.retry_after_s) if refusal is not None else None

    def hold(self, identity: Optional[Identity], sequences: int) -> Callable[[], None]:
        """Count ``sequences`` of ``identity`` against its share where the server keeps it (an engine without
        a share of its own); a 429 :class:`ApiError` beyond it. Returns the call that ends them."""
        ledger = self.share_ledger
        if ledger is None or identity is None:
            return lambda: None
        refusal = ledger.refusal(identity.name, sequences)
        if refusal is not None:
            raise refusal
        return ledger.take(identity.name, sequences)

    @property
    def share_ledger(self) -> Optional[ShareLedger]:
        """The per-identity share the server keeps: for an engine that keeps none (the TensorRT-LLM ones);
        None before the engine is ready."""
        engine = self.state.engine
        if self.settings.share is None or engine is None or hasattr(engine, "over_share"):
            return None
        if self._ledger is None:
            self._ledger = ShareLedger(self.settings.share)
        return self._ledger

    @functools.cached_property
    def tenant_view(self) -> TenantView:
        """The metrics as a tenant may read them (:mod:`trtlade.server.metrics_view`)."""
        return TenantView(self.metrics.render, self.settings.metrics_min_others,
                          shared=self.settings.metrics_without_key)

    def metrics_text(self, request: Request) -> tuple[bytes, bool]:
        """GET /metrics and whether it is live: live without keys, for the one key, or for an admin key among
        several; otherwise (another key, or no key where ``metrics_without_key`` lets one in) the tenants' view, a
        copy (:class:`~trtlade.server.metrics_view.TenantView`)."""
        keys = self.keys
        if keys is None:
            return self.metrics.render(), True
        if self.settings.metrics_without_key and not request.headers.get("authorization"):
            return (self.tenant_view.read(OPEN_READER), False) if keys.several else (self.metrics.render(), True)
        identity = self.check_auth(request)
        if identity is None or not keys.several or identity.admin:
            return self.metrics.render(), True
        return self.tenant_view.read(identity.name), False

    def note_ignored(self, fields: list[str]) -> None:
        """Log, once per field and server, that a request field was accepted and ignored."""
        new = [f for f in fields if f not in self.ignored_seen]
        if new:
            self.ignored_seen.update(new)
            log.info("accepted and ignored request field(s) %s: they do not change the output "
                     "(logged once per field)", ", ".join(new))
    async def load(self, source: EngineSource,
                   on_load_failed: Optional[Callable[[BaseException], None]] = None) -> None:
        """Load the engine (a factory runs in a thread); a failure is kept for /health."""
        state = self.state
        try:
            ready = source if isinstance(source, ServingEngine) else await in_own_thread(source)
        except asyncio.CancelledError:  # the server stops while loading: not the engine's failure
            log.info("engine loading stopped: the server is shutting down")
            raise
        except BaseException as exc:  # noqa: BLE001 - reported through /health and the callback
            state.status, state.error = "failed", str(exc) or type(exc).__name__
            log.error("the engine failed to load: %s", state.error)
            state.loaded.set()
            if on_load_failed is not None:
                on_load_failed(exc)
            return
        state.engine = ready  # type: ignore[assignment]
        self.metrics.set_load(ready.load)
        if hasattr(ready, "set_step_observer"):
            ready.set_step_observer(self.metrics.batch_step)
        if hasattr(ready, "live"):
            self.metrics.set_live(ready.live)
        info = ready.info
        self.metrics.set_engine(info.name, info.model_id, str(info.spec))
        self.tenant_view.restart()
        policy = getattr(ready, "policy", None)
        if info.schedule is not None and policy is not None:
            self.metrics.set_schedule(info.schedule, policy.band_in_force)
        state.status = "ready"
        state.loaded.set()
        log.info("engine %s ready: model %s, (W,N,G) = (%s)", info.name, info.model_id, info.spec)

    @functools.cached_property
    def keys(self) -> Optional[KeyRing]:
        """The server's keys (the single ``--api-key`` as a ring of one), built once, not per request."""
        settings = self.settings
        if settings.keys is None and settings.api_key:
            return KeyRing.single(settings.api_key)
        return settings.keys

    def check_auth(self, request: Request) -> Optional[Identity]:
        """The caller's identity; 401 (saying nothing of which keys exist) unless the request carries one of
        the server's keys, when it has any (None: no keys, anyone may call)."""
        keys = self.keys
        if keys is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        identity = keys.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if identity is None:
            raise ApiError.unauthorized()
        note_access(request, identity=identity.name)  # the name, never the key
        return identity

    def sees_live(self, identity: Optional[Identity]) -> bool:
        """Whether the caller may read the live counters (/version's ``live``): anyone without keys; with
        several keys, an admin key only (they change with every request, so another tenant could read a
        request's prompt length and reuse from them)."""
        keys = self.keys
        return identity is None or keys is None or not keys.several or identity.admin

    def check_admin(self, request: Request) -> Optional[Identity]:
        """:meth:`check_auth`, and with several keys a 403 unless the key is marked admin."""
        identity = self.check_auth(request)
        keys = self.keys
        if identity is not None and keys is not None and keys.several and not identity.admin:
            raise ApiError(403, "this route needs an admin key (marked `admin` in the keys file)",
                           code="admin_key_required")
        return identity

    def cache_scope(self, identity: Optional[Identity], salt: Optional[str]) -> CacheScope:
        """The prefix-cache namespace of a request: the server's scope, the caller's identity, its salt."""
        return CacheScope(self.settings.prefix_cache_scope, identity.name if identity is not None else None, salt)

    def ready_engine(self) -> ServingEngine:
        """The engine, or a 503 saying why there is none."""
        state = self.state
        if state.status == "ready" and state.engine is not None:
            return state.engine
        if state.status == "failed":
            raise ApiError(503, f"the engine failed to load: {state.error}", code="engine_failed")
        if self.stopped_after_s is not None:
            raise ApiError.stopping(self.stopping_message())
        if state.status == "stopping":
            raise ApiError.unavailable("the server is shutting down", retry_after_s=5)
        raise ApiError.unavailable("the engine is still loading; retry shortly (GET /health says when "
                                   "it is ready)", retry_after_s=2)

    async def read_json(self, request: Request) -> Any:
        """The body as JSON, within ``max_body_bytes``; a 400/413/415 naming the problem otherwise (a compressed
        body was read as bytes and called "not UTF-8 text")."""
        encoding = request.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise ApiError(415, f"Content-Encoding {encoding!r} is not supported: send the JSON body uncompressed",
                           code="unsupported_content_encoding", param="Content-Encoding")
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise ApiError.too_large(int(declared), limit)
        body = bytearray()

        async def read() -> None:
            async for part in request.stream():
                body.extend(part)
                if len(body) > limit:
                    raise ApiError.too_large(None, limit)

        try:  # a body trickled a byte at a time would hold the request open
            await asyncio.wait_for(read(), BODY_TIMEOUT_S)
        except ClientDisconnect:  # it left mid-upload: nobody reads the answer; counted and logged as 499
            raise ApiError(499, "the client went away before its request body was sent", code="client_disconnected")
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {BODY_TIMEOUT_S:g} s ({len(body)} bytes "
                           "came); send it whole", code="body_timeout") from None

        if not body.strip():
            raise ApiError.bad_request("the request body is empty; send a JSON object", code="invalid_json")
        try:
            value = json.loads(body.decode("utf-8"), parse_constant=_not_a_number, object_pairs_hook=keys_once,
                               parse_int=_whole_number)
        except RepeatedKeyError as exc:
            raise ApiError.bad_request(f"the request body gives {exc.key!r} twice in one object; JSON readers disagree "
                                       "on which one counts, so give it once", code="invalid_json",
                                       param=exc.key) from None
        except UnicodeDecodeError:
            raise ApiError.bad_request("the request body is not UTF-8 text", code="invalid_json") from None
        except json.JSONDecodeError as exc:
            raise ApiError.bad_request(f"the request body is not valid JSON: {exc.msg} (line {exc.lineno}, "
                                       f"column {exc.colno})", code="invalid_json") from None
        except RecursionError:
            raise _too_deep() from None
        if not isinstance(value, dict):
            kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
            raise ApiError.bad_request(f"the request body is a JSON {kind}; send a JSON object", code="invalid_json")
        _check_body(value, MAX_JSON_DEPTH)
        return value


def _not_a_number(name: str) -> Any:
    """NaN and Infinity are not JSON numbers (Python's json reads them): refused where they stand."""
    raise ApiError.bad_request(f"the request body holds {name}, which is not a JSON number; send a finite number",
                               code="invalid_json")


#: Seconds a request's body may take to arrive (4 MiB, the default max_body_bytes, at 100 KB/s takes 40).
BODY_TIMEOUT_S = 60.0

#: Most digits of a whole number in a request body (a 64-bit seed has 20; Python refuses to read past 4,300).
MAX_INT_DIGITS = 64


def _whole_number(text: str) -> int:
    """A JSON integer, refused where it stands when longer than any field takes (Python's own limit was a 500)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ApiError.bad_request(f"the request body holds a whole number of {len(text.lstrip('-'))} digits; no "
                                   f"field takes more than {MAX_INT_DIGITS}", code="invalid_json")
    return int(text)


#: Deepest nesting of arrays/objects accepted in a request body (OpenAI bodies need about 6).
MAX_JSON_DEPTH = 64


def _too_deep() -> ApiError:
    return ApiError.bad_request(f"the request body nests arrays/objects more than {MAX_JSON_DEPTH} levels deep",
                                code="invalid_json")


def _check_body(value: Any, limit: int) -> None:
    """One walk over a decoded body (iterative: no recursion limit): lists/dicts nested deeper than ``limit`` are a
    400, and so is a string or key holding an unpaired UTF-16 surrogate (JSON lets ``"\\ud800"`` through; UTF-8
    and every tokenizer refuse it), ``param`` naming where.

    >>> _check_body(json.loads('{"a": [[1]]}'), 3)
    >>> _check_body(json.loads('{"a": [[1]]}'), 2)
    Traceback (most recent call last):
    ...
    trtlade.server.errors.ApiError: the request body nests arrays/objects more than 64 levels deep
    >>> try:
    ...     _check_body(json.loads('{"messages": [{"content": "ok"}, {"content": "\\\\ud800"}]}'), 64)
    ... except ApiError as exc:
    ...     print(exc.param)
    messages.1.content
    >>> _check_body(json.loads('{"prompt": "\\\\ud83d\\\\ude00"}'), 64)  # a pair: one emoji
    """
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if _lone_surrogate(item):
                raise _surrogate(path)
            continue
        if not isinstance(item, (list, dict)):
            continue
        if depth > limit:
            raise _too_deep()
        if isinstance(item, list):
            stack.extend((child, depth + 1, f"{path}.{i}" if path else str(i)) for i, child in enumerate(item))
            continue
        for key, child in item.items():
            here = f"{path}.{key}" if path else str(key)
            if _lone_surrogate(key):
                raise _surrogate(here)
            stack.append((child, depth + 1, here))


def _lone_surrogate(text: str) -> bool:
    """UTF-8 cannot encode a lone surrogate (at C speed: no loop over a 4 MiB prompt's characters here)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate(where: str) -> ApiError:
    return ApiError.bad_request(f"{where or 'the body'} holds an unpaired UTF-16 surrogate (a \\ud800-\\udfff escape "
                                "without its pair): not text a tokenizer can read", param=where or None,
                                code="invalid_json")


def note_access(request: Request, **info: Any) -> None:
    """Record what the access log line should say about this request (tokens, spec, error)."""
    current = getattr(request.state, "access", None) or {}
    current.update({k: v for k, v in info.items() if v is not None})
    request.state.access = current


async def server_context(request: Request) -> ServerContext:
    """The app's context (a FastAPI dependency; async, so a route gets it on the event loop without a hop
    through the thread pool, and a burst of requests is counted in the order it arrived)."""
    return request.app.state.context

"""The access log: one line per request, uvicorn-style, with what trtlade knows about it.

Worked example (a completion that ran with (2,3,2), then a request refused for its lookahead)::

    127.0.0.1:51834 - "POST /v1/completions HTTP/1.1" 200 1832.4ms id=req_5e1c prompt=12 completion=50 lookahead=2,3,2
    127.0.0.1:51836 - "POST /v1/completions HTTP/1.1" 400 3.1ms id=t-7f error=lookahead_not_admitted param=lookahead.w

``id=`` is the request id (:mod:`trtlade.server.request_id`). Routes leave what they know in
``request.state.access`` (a dict: ``identity`` -- the API key's name, never
the key --, ``prompt``, ``completion``, ``lookahead``, ``error``, ``param``); the query string is never
logged; the middleware adds the status and the latency when the last byte of the response is sent (a
stream: after ``[DONE]``), or ``499`` when the client went away.
Switched by ``trtlade serve --access-log/--no-access-log`` (on by default); logger ``trtlade.access``.
Probes -- ``GET /health`` and ``GET /metrics``, which a load balancer, Kubernetes or Prometheus polls
every few seconds for the server's whole life, and the launcher while the model loads -- are left
out unless asked for (``--access-log-probes``), so the log keeps the requests.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, MutableMapping, Optional

__all__ = ["AccessLogMiddleware", "access_line", "PROBE_PATHS", "is_probe"]

log = logging.getLogger("trtlade.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]

_FIELDS = ("identity", "prompt", "completion", "lookahead", "error", "param")
#: what infrastructure polls (a GET of one of these is a probe, left out of the log by default)
PROBE_PATHS = ("/health", "/metrics")


def is_probe(scope: Scope) -> bool:
    """A health check or a metrics scrape.

    >>> is_probe({"method": "GET", "path": "/health"}), is_probe({"method": "POST", "path": "/v1/completions"})
    (True, False)
    """
    return scope.get("method") in ("GET", "HEAD") and scope.get("path") in PROBE_PATHS


def access_line(scope: Scope, status: int, seconds: float, info: Optional[dict[str, Any]] = None) -> str:
    """One access-log line.

    >>> scope = {"client": ("127.0.0.1", 5), "method": "POST", "path": "/v1/completions", "http_version": "1.1"}
    >>> access_line(scope, 400, 0.0031, {"error": "invalid_value", "param": "max_tokens"})
    '127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 400 3.1ms error=invalid_value param=max_tokens'
    >>> access_line({**scope, "state": {"request_id": "trace-7f3a"}}, 200, 0.25, {"prompt": 12})
    '127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 250.0ms id=trace-7f3a prompt=12'
    """
    client = scope.get("client")
    who = f"{client[0]}:{client[1]}" if client else "-"
    path = scope.get("path", "")  # never the query string: a client may put a key or a secret in it
    extra = "".join(f" {key}={info[key]}" for key in _FIELDS if info and info.get(key) is not None)
    rid = scope.get("state", {}).get("request_id")
    extra = f" id={rid}{extra}" if rid else extra
    return (f'{who} - "{scope.get("method", "-")} {path} HTTP/{scope.get("http_version", "1.1")}" '
            f"{status} {seconds * 1000:.1f}ms{extra}")


class AccessLogMiddleware:
    """Pure ASGI middleware (streams pass through untouched) writing :func:`access_line` per request;
    ``probes``: log health checks and metrics scrapes too."""

    def __init__(self, app: Callable[..., Awaitable[None]], probes: bool = False) -> None:
        self.app = app
        self.probes = probes

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or (not self.probes and is_probe(scope)):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status: list[int] = []
        done = False

        async def wrapped(message: Message) -> None:
            nonlocal done
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not done:
                done = True
                self._write(scope, status[0] if status else 500, started)

        failed = False
        try:
            await self.app(scope, receive, wrapped)
        except Exception:
            failed = True
            raise
        finally:
            if not done:  # the client went away (mid-response too: 499, as /metrics counts it), or the app failed
                self._write(scope, 500 if failed and not status else 499, started)

    @staticmethod
    def _write(scope: Scope, status: int, started: float) -> None:
        info = scope.get("state", {}).get("access")
        log.info(access_line(scope, status, time.monotonic() - started, info))

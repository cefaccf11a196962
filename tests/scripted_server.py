"""A scripted OpenAI-compatible streaming server with known timings, for testing `trtlade bench`.

Every streamed request follows a fixed schedule measured from the moment the request arrives:

* chat only: a role-only chunk (``delta.role``, no content) at once, and a ``: keep-alive`` comment;
* content chunk 0 at ``ttft`` seconds and chunk i at ``i * chunk_delay`` after chunk 0 went out (a late
  first chunk, on a busy host, does not shorten the decode span), carrying ``k`` tokens
  (``k = 1`` for a request asking lookahead (1,1,0), else ``tokens_per_chunk``); the last chunk
  carries the remainder and ``finish_reason: "length"``; ``max_tokens`` tokens in all;
* then the usage chunk (``choices: []``; prompt_tokens = ``prompt_tokens``, completion_tokens =
  max_tokens, and ``usage.lookahead`` when the request sent a ``lookahead`` field) if
  ``stream_options.include_usage`` and ``send_usage``, then ``data: [DONE]``.

Chunks are sent at absolute times (sleep until the target), so timer overshoot does not accumulate.
Markers in the prompt text script failures: ``FAIL500`` -> HTTP 500 with an OpenAI error body;
``FAILSTREAM`` -> one content chunk then ``data: {"error": ...}`` and ``[DONE]``; ``HANG`` -> no
answer for an hour (for timeouts). Truth for a request with T tokens, k per chunk, C = ceil(T/k):
TTFT = ttft; decode throughput = (T-1) / ((C-1) * chunk_delay).

Run standalone: ``python tests/scripted_server.py --port 8011 --ttft 0.05 --chunk-delay 0.03``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

MODEL_ID = "scripted-model"


@dataclass
class Script:
    ttft: float = 0.040
    chunk_delay: float = 0.040
    tokens_per_chunk: int = 1
    prompt_tokens: int = 7
    send_usage: bool = True
    role_chunk: bool = True
    line_ending: str = "\n"
    requests: list[dict[str, Any]] = field(default_factory=list)  #: every POST body received
    auth: list[str] = field(default_factory=list)  #: the Authorization header of every POST ("" if none)
    paths: list[str] = field(default_factory=list)  #: every request's method and path, e.g. "GET /version"

    def k_for(self, body: dict[str, Any]) -> int:
        la = body.get("lookahead")
        if la in ([1, 1, 0], {"w": 1, "n": 1, "g": 0}):
            return 1
        return self.tokens_per_chunk

    def truth(self, max_tokens: int, k: Optional[int] = None) -> dict[str, float]:
        """Expected TTFT (s), decode throughput (tok/s) and TPOT (s) for one request."""
        k = k or self.tokens_per_chunk
        chunks = math.ceil(max_tokens / k)
        span = (chunks - 1) * self.chunk_delay
        return {"ttft": self.ttft, "decode_throughput": (max_tokens - 1) / span,
                "tpot": span / (max_tokens - 1), "chunks": chunks}


def _prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"])
    return str(body.get("prompt", ""))


class ScriptedApp:
    """The raw ASGI app (no framework: its own overhead would blur the timings)."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        method, path = scope["method"], scope["path"]
        self.script.paths.append(f"{method} {path}")
        if method == "GET" and path == "/health":
            return await self._json(send, 200, {"status": "ok"})
        if method == "GET" and path == "/v1/models":
            return await self._json(send, 200, {"object": "list", "data": [
                {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "tests"}]})
        if method == "GET" and path == "/version":
            return await self._json(send, 200, {"engine": "scripted", "spec": [4, 2, 4], "model": MODEL_ID})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            body = await self._body(receive)
            self.script.requests.append(body)
            headers = dict(scope.get("headers") or [])
            self.script.auth.append(headers.get(b"authorization", b"").decode())
            return await self._completion(send, body, chat=path.endswith("chat/completions"))
        return await self._json(send, 404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    @staticmethod
    async def _body(receive: Any) -> dict[str, Any]:
        data = b""
        while True:
            msg = await receive()
            data += msg.get("body", b"")
            if not msg.get("more_body"):
                return json.loads(data or b"{}")

    @staticmethod
    async def _json(send: Any, status: int, obj: Any) -> None:
        payload = json.dumps(obj).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})

    async def _completion(self, send: Any, body: dict[str, Any], *, chat: bool) -> None:
        s = self.script
        t0 = time.perf_counter()
        text = _prompt_text(body)
        if "FAIL500" in text:
            return await self._json(send, 500, {"error": {"message": "scripted engine failure",
                                                          "type": "internal_error", "code": 500}})
        if "HANG" in text:
            await asyncio.sleep(3600)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        nl = s.line_ending
        obj_name = "chat.completion.chunk" if chat else "text_completion"

        async def event(obj: Any) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            await send({"type": "http.response.body", "body": f"data: {data}{nl}{nl}".encode(),
                        "more_body": True})

        def chunk(content: Optional[str], finish: Optional[str], role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {}
                if content is not None:
                    delta["content"] = content
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": content or "", "finish_reason": finish}
            return {"id": "x", "object": obj_name, "model": MODEL_ID, "choices": [choice], "usage": None}

        if chat and s.role_chunk:
            await event(chunk(None, None, role=True))
        await send({"type": "http.response.body", "body": f": keep-alive{nl}{nl}".encode(), "more_body": True})
        total = int(body.get("max_tokens") or 16)
        k = s.k_for(body)
        chunks = math.ceil(total / k)
        sent = 0
        first = t0 + s.ttft  # later chunks are timed from when the first one actually went out
        for i in range(chunks):
            delay = first + i * s.chunk_delay - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            n = min(k, total - sent)
            sent += n
            last = i == chunks - 1
            await event(chunk(" tok" * n, "length" if last else None))
            if i == 0:
                first = max(first, time.perf_counter())
            if i == 0 and "FAILSTREAM" in text:
                await event({"error": {"message": "scripted failure mid-stream", "type": "internal_error",
                                       "code": 500}})
                await event("[DONE]")
                return await send({"type": "http.response.body", "body": b""})
        if s.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            usage: dict[str, Any] = {"prompt_tokens": s.prompt_tokens, "completion_tokens": total,
                                     "total_tokens": s.prompt_tokens + total}
            if "lookahead" in body:
                la = body["lookahead"]
                spec = [la["w"], la["n"], la["g"]] if isinstance(la, dict) else list(la)
                usage["lookahead"] = {"spec": spec, "steps": chunks, "tokens_per_step": total / chunks}
            await event({"id": "x", "object": obj_name, "model": MODEL_ID, "choices": [], "usage": usage})
        await event("[DONE]")
        await send({"type": "http.response.body", "body": b""})


class ServerThread:
    """Run :class:`ScriptedApp` under uvicorn in a daemon thread on a free loopback port."""

    def __init__(self, script: Script) -> None:
        import uvicorn

        self.script = script
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(ScriptedApp(script), log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--ttft", type=float, default=0.040)
    ap.add_argument("--chunk-delay", type=float, default=0.040)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    args = ap.parse_args()
    script = Script(ttft=args.ttft, chunk_delay=args.chunk_delay, tokens_per_chunk=args.tokens_per_chunk)
    uvicorn.run(ScriptedApp(script), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()

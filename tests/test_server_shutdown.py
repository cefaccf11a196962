"""Shutdown: what a request still running when ``serve.shutdown_grace_s`` ends is answered.

Before its grace ends a request finishes as usual; after it, a whole response is a 503 ``server_stopping`` in the
OpenAI error shape and a stream ends with that error event and ``[DONE]``, and the engine stops its work. uvicorn
runs in a thread here (``make_server``, as ``trtlade serve`` builds it); ``should_exit`` is what SIGTERM sets.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from fake_engine import fake_app, free_port, sse_events, wait_until
from trtlade.contract.protocol import GenerationRequest, StepChunk
from trtlade.contract.serving import GenerationHandle, ServerStopping
from trtlade.config.schema import ANSWER_MARGIN_S
from trtlade.server import runner


def _serving(app, grace_s: float):
    port = free_port()
    server = runner.make_server(app, "127.0.0.1", port, grace_s=grace_s, log_level="warning",
                                stack={"loop": "asyncio", "http": "h11"})
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: _ready(base), 30), "the test server did not become ready"
    return server, thread, base


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _post(base: str, body: dict, out: dict, key: str) -> None:
    with httpx.Client(timeout=60) as c:
        if body.get("stream"):
            with c.stream("POST", f"{base}/v1/completions", json=body) as r:
                out[key] = (r.status_code, sse_events(r.read().decode()), dict(r.headers))
        else:
            r = c.post(f"{base}/v1/completions", json=body)
            out[key] = (r.status_code, r.json(), dict(r.headers))


def test_requests_running_when_the_grace_ends_get_a_503_and_a_finished_one_its_answer():
    app, engine = fake_app()
    grace = 0.6
    server, thread, base = _serving(app, grace)
    out: dict = {}
    asks = {"whole": {"model": "fake-model", "prompt": "[hang] a", "max_tokens": 200},
            "stream": {"model": "fake-model", "prompt": "[hang] b", "max_tokens": 200, "stream": True},
            "short": {"model": "fake-model", "prompt": "[slow=0.05] c", "max_tokens": 6}}
    clients = [threading.Thread(target=_post, args=(base, body, out, key)) for key, body in asks.items()]
    for c in clients:
        c.start()
    assert wait_until(lambda: engine.started == 3, 10), out
    stopped_at = time.monotonic()
    server.should_exit = True  # what SIGTERM does
    for c in clients:
        c.join(30)
    thread.join(30)
    took = time.monotonic() - stopped_at

    status, body, headers = out["whole"]
    assert status == 503 and headers["retry-after"] == "5"
    assert body["error"]["code"] == "server_stopping" and body["error"]["type"] == "service_unavailable_error"
    assert "serve.shutdown_grace_s = 0.6 s" in body["error"]["message"]
    status, events, _ = out["stream"]
    assert status == 200 and events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "server_stopping"
    assert all("choices" in e for e in events[:-2])  # the tokens it had streamed, then the error
    status, body, _ = out["short"]
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    assert not thread.is_alive()
    assert grace <= took < grace + ANSWER_MARGIN_S  # it waited the grace, and answered before uvicorn cancels
    assert wait_until(lambda: engine.closed == 2, 10)  # the two hung generations stopped in the engine


def test_no_grace_answers_every_running_request_at_once():
    app, engine = fake_app()
    server, thread, base = _serving(app, 0.0)
    out: dict = {}
    client = threading.Thread(target=_post, args=(base, {"model": "fake-model", "prompt": "[hang]", "max_tokens": 99},
                                                  out, "whole"))
    client.start()
    assert wait_until(lambda: engine.started == 1, 10)
    server.should_exit = True
    client.join(30)
    thread.join(30)
    assert out["whole"][0] == 503 and out["whole"][1]["error"]["code"] == "server_stopping"


def _handle(cancelled: list) -> GenerationHandle:
    loop = asyncio.get_running_loop()
    return GenerationHandle(loop, GenerationRequest(prompt_ids=(1, 2), max_tokens=4), on_cancel=cancelled.append)


def test_abort_raises_after_the_chunks_pushed_and_drops_what_comes_later():
    async def scenario() -> tuple[list, list]:
        cancelled: list = []
        handle = _handle(cancelled)
        handle.push(StepChunk(tokens=[5], text="x"))
        handle.abort(ServerStopping("stopping"))
        handle.push(StepChunk(tokens=[6], text="y"))  # the engine's next step: nobody takes it
        handle.finish()
        got = []
        with pytest.raises(ServerStopping):
            async for chunk in handle:
                got.append(chunk.tokens)
        return got, cancelled

    got, cancelled = asyncio.run(scenario())
    assert got == [[5]]
    assert len(cancelled) == 1  # the engine is told to stop, although the stream has ended


def test_abort_after_the_end_changes_nothing():
    async def scenario() -> tuple[list, list]:
        cancelled: list = []
        handle = _handle(cancelled)
        handle.push(StepChunk(tokens=[5], text="x", finish_reason="length"))
        handle.finish()
        handle.abort(ServerStopping("stopping"))
        return [chunk.tokens async for chunk in handle], cancelled

    assert asyncio.run(scenario()) == ([[5]], [])


def test_a_request_admitted_after_the_grace_ended_is_answered_a_503_too():
    """Its body was still arriving when the grace ended: refused as the running ones were, never left to uvicorn."""
    from fake_engine import client_for, run

    app, engine = fake_app()

    async def scenario():
        async with client_for(app) as c:
            app.state.context.stop_in_flight(2.0)  # what the shutdown timer calls when the grace ends
            before = engine.started
            reply = await c.post("/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 4})
            return reply, engine.started - before

    reply, started = run(scenario())
    assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
    assert reply.json()["error"]["code"] == "server_stopping" and started == 0

"""The running and queued counts admission and /metrics read follow the batch after every change, a step or not:
clients that all leave at once must not leave a full queue behind (every later request refused with 429 while
/health says ready), and a burst gets no more than serve.max_queue waiting."""

from __future__ import annotations

import asyncio

import httpx

from fake_engine import FakeEngine, fake_app, metric_value, uvicorn_thread, wait_until


def _gauges(base: str) -> tuple[float, float]:
    text = httpx.get(f"{base}/metrics").text
    return metric_value(text, "trtlade_requests_running"), metric_value(text, "trtlade_requests_queued")


def test_clients_that_all_leave_leave_no_full_queue_behind():
    app, engine = fake_app(FakeEngine(), max_queue=3, max_batch_size=1)
    with uvicorn_thread(app) as base:

        async def fill_then_leave() -> list[int]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                streams = []
                for i in range(4):  # one running, three waiting: the queue is full
                    request = client.build_request("POST", "/v1/completions", json={
                        "prompt": f"[hang] {i}", "max_tokens": 500, "stream": True})
                    streams.append(await client.send(request, stream=True))
                assert wait_until(lambda: _gauges(base) == (1.0, 3.0))
                refused = (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})).status_code
                for stream in streams:
                    await stream.aclose()
                return [refused]

        assert asyncio.run(fill_then_leave()) == [429]
        assert wait_until(lambda: _gauges(base) == (0.0, 0.0))
        after = httpx.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
        assert after.status_code == 200
    assert engine.started == engine.completed + engine.closed


def test_a_request_whose_other_choice_failed_leaves_no_running_count():
    """One prompt of two fails: the request is a 500 and its other generation is cancelled, which no step counts."""
    app, _ = fake_app(FakeEngine(), max_queue=8)
    with uvicorn_thread(app) as base:
        failed = httpx.post(f"{base}/v1/completions", json={"prompt": ["fine one", "[fail@3]"], "max_tokens": 100},
                            timeout=30)
        assert failed.status_code == 500
        assert wait_until(lambda: _gauges(base) == (0.0, 0.0))


def test_a_bug_while_answering_is_a_500_counted_once_and_holds_nothing():
    """An exception no rule expected while a reply is put together (here the tokenizer, for `echo`): a JSON 500, or
    an error event and [DONE] on a stream, counted as a 500, and the request no longer in flight."""
    import re

    from fake_engine import client_for, run, sse_events

    async def go():
        app, _ = fake_app(FakeEngine())
        async with client_for(app) as client:
            tokenizer = app.state.trtlade.engine.tokenizer

            def decode(ids, *args, **kwargs):
                raise RuntimeError("decode bug")

            tokenizer.decode = decode
            body = {"prompt": [97, 98, 99], "max_tokens": 3, "echo": True}  # token ids: echoed by decoding them
            whole = await client.post("/v1/completions", json=body)
            streamed = await client.post("/v1/completions", json={**body, "stream": True})
            metrics = (await client.get("/metrics")).text
            return whole, streamed, metrics, app.state.context.active

    whole, streamed, metrics, active = run(go())
    assert whole.status_code == 500 and whole.json()["error"]["code"] == "internal_error"
    events = sse_events(streamed.text)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "internal_error"
    assert re.findall(r'^trtlade_requests_total\{endpoint="completions",status="(\d+)"\} (\S+)$', metrics, re.M) == \
        [("500", "2.0")]
    assert active == 0


def test_a_body_that_trickles_in_is_a_408_and_holds_nothing(monkeypatch):
    """A client that declares a body and sends it a byte at a time held its request open (and counted in flight)
    for as long as it liked: the body has BODY_TIMEOUT_S to arrive."""
    import socket

    from trtlade.server import context

    monkeypatch.setattr(context, "BODY_TIMEOUT_S", 0.5)
    app, _ = fake_app(FakeEngine())
    with uvicorn_thread(app) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"pro")
            answer = sock.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 408") and '"code":"body_timeout"' in answer
        assert wait_until(lambda: app.state.context.active == 0)


def test_the_queue_counts_what_the_free_slots_cannot_take_under_fair_share():
    """Waiting = every request without a slot, less what the free slots take; under max_running_per_identity an
    identity takes at most its room (requests of a key at its share wait beside free slots)."""
    import collections

    from trtlade.reference.serving_adapter import ReferenceServingEngine

    def waiting(cap, held, queued):
        adapter = ReferenceServingEngine(FakeEngine(), max_batch_size=4)
        try:
            with adapter._cv:
                adapter._limits["max_running_per_identity"] = cap  # as a server with several keys sets it
                adapter._running = sum(held.values())
                adapter._held_slots = collections.Counter(held)
                adapter._batch_waiting = collections.Counter(queued)
                return adapter._waiting_now()
        finally:
            adapter._closing = True
            with adapter._cv:
                adapter._cv.notify()

    assert waiting(None, {"alice": 1}, {"alice": 3}) == 0  # three free slots take all three
    assert waiting(1, {"alice": 1}, {"alice": 3}) == 3  # alice is at her share: none of hers is taken
    assert waiting(1, {"alice": 1}, {"alice": 3, "bob": 2}) == 4  # bob's room is one
    assert waiting(2, {}, {"alice": 3, "bob": 3}) == 2  # four slots, two each

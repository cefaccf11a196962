"""A bounded soak: 200 requests from 16 concurrent clients on a real uvicorn server (loopback), some
disconnecting midway, some hitting engine failures. Every request completes or fails properly, none
hangs, and the server's counters add up."""

from __future__ import annotations

import asyncio
import json

import httpx

from fake_engine import FakeEngine, fake_app, metric_sum, metric_value, uvicorn_thread, wait_until

TOTAL = 200
CLIENTS = 16


def _plan(i: int) -> dict:
    """Request i's script: kind of request and what the client does."""
    kind = "chat" if i % 3 == 0 else "completion"
    stream = i % 2 == 0
    disconnect = i % 10 == 4  # streams that the client abandons after 2 chunks
    fail = i % 25 == 7  # engine failure after 2 steps
    prompt = ("[fail@2] " if fail else "") + f"request {i}"
    max_tokens = 200 if disconnect else 5 + i % 20
    body: dict = {"max_tokens": max_tokens, "stream": stream or disconnect}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    if i % 4 == 1:
        body["lookahead"] = [1, 1, 0]
    return {"kind": kind, "body": body, "disconnect": disconnect, "fail": fail}


async def _one(client: httpx.AsyncClient, plan: dict) -> str:
    path = "/v1/chat/completions" if plan["kind"] == "chat" else "/v1/completions"
    body = plan["body"]
    if not body["stream"]:
        r = await client.post(path, json=body)
        if r.status_code == 200:
            assert r.json()["usage"]["completion_tokens"] == body["max_tokens"]
            return "ok"
        assert r.status_code == 500 and r.json()["error"]["type"] == "internal_server_error"
        return "error"
    async with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        events = []
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if plan["disconnect"] and len(events) >= 2:
                return "disconnected"  # leaving the block closes the connection mid-stream
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    if "error" in last:
        return "error"
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == body["max_tokens"]
    return "ok"


def test_soak_200_requests_16_clients_with_disconnects():
    engine = FakeEngine(step_delay=0.001)
    app, _ = fake_app(engine, max_queue=64)
    plans = [_plan(i) for i in range(TOTAL)]
    with uvicorn_thread(app) as base:

        async def go():
            queue: asyncio.Queue = asyncio.Queue()
            for i, p in enumerate(plans):
                queue.put_nowait((i, p))
            outcomes: dict[int, str] = {}

            async def worker():
                async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60.0)) as client:
                    while not queue.empty():
                        i, p = queue.get_nowait()
                        outcomes[i] = await asyncio.wait_for(_one(client, p), 60)

            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CLIENTS))), 240)
            return outcomes

        outcomes = asyncio.run(go())
        assert wait_until(lambda: engine.started == engine.completed + engine.closed and
                          "trtlade_requests_running 0.0" in httpx.get(f"{base}/metrics").text)
        metrics = httpx.get(f"{base}/metrics").text

    assert len(outcomes) == TOTAL
    expected = {i: ("disconnected" if p["disconnect"] else "error" if p["fail"] else "ok") for i, p in enumerate(plans)}
    assert outcomes == expected
    counts = {k: sum(1 for v in outcomes.values() if v == k) for k in ("ok", "error", "disconnected")}
    assert metric_sum(metrics, "trtlade_requests_total") == TOTAL
    by_status = {s: sum(metric_value(metrics, "trtlade_requests_total", {"endpoint": e, "status": s})
                        for e in ("completions", "chat_completions")) for s in ("200", "500", "499")}
    assert by_status == {"200": counts["ok"], "500": counts["error"], "499": counts["disconnected"]}
    assert metric_value(metrics, "trtlade_requests_queued") == 0
    assert engine.closed == counts["disconnected"] + counts["error"]
    assert engine.completed == counts["ok"]

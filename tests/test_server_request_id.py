"""Every response carries X-Request-Id: the client's own, or one the server made; the access log and the log line
of an unexpected error name it, and a 500's body names it instead of the error's text."""

from __future__ import annotations

import logging
import re

import pytest

from fake_engine import FakeEngine, client_for, fake_app, run, sse_events

MADE = re.compile(r"req_[0-9a-f]{32}")


def _send(requests: list[tuple[str, str, dict | None, dict]]):
    """``(method, path, json body, headers)`` each against one fake app; the responses."""
    app, _ = fake_app(FakeEngine())

    async def go():
        async with client_for(app) as c:
            return [await c.request(method, path, json=body, headers=headers)
                    for method, path, body, headers in requests]
    return run(go())


@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, 200),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": -1}, 400),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, 200),
    ("GET", "/v1/models", None, 200),
    ("GET", "/health", None, 200),
    ("GET", "/no/such/route", None, 404),
])
def test_a_request_without_an_id_gets_one_of_its_own_on_every_route_and_status(method, path, body, status):
    first, second = _send([(method, path, body, {})] * 2)
    assert (first.status_code, second.status_code) == (status, status)
    ids = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert all(MADE.fullmatch(rid) for rid in ids) and ids[0] != ids[1]


@pytest.mark.parametrize("sent", ["trace-7f3a", "0af7651916cd43dd8448eb211c80319c", "a", "x" * 128, "{uuid}:1/2"])
def test_the_clients_id_comes_back_unchanged(sent):
    ok, refused = _send([("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, {"X-Request-Id": sent}),
                         ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 0}, {"x-request-id": sent})])
    assert ok.status_code == 200 and ok.headers["x-request-id"] == sent
    assert refused.status_code == 400 and refused.headers["x-request-id"] == sent


@pytest.mark.parametrize("sent, shown", [
    ("two words", "9 characters: 'two words'"),
    ("x" * 129, "129 characters)"),
    ("tab\there", "8 characters: 'tab\\there'"),
    ("caf\u00e9", "4 characters: 'caf\u00e9'"),  # sent as latin-1 bytes: not ASCII
])
def test_a_malformed_id_is_a_400_naming_the_header_never_replaced(sent, shown):
    (resp,) = _send([("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2},
                      {"X-Request-Id": sent.encode("latin-1")})])
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["param"] == "X-Request-Id" and err["code"] == "invalid_header"
    assert "1-128 visible ASCII characters" in err["message"] and shown in err["message"]
    assert MADE.fullmatch(resp.headers["x-request-id"])


def test_the_access_log_names_the_id(caplog):
    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        ok, made = _send([("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, {"X-Request-Id": "t-1"}),
                          ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, {})])
    lines = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    assert " 200 " in lines[0] and " id=t-1 " in lines[0]
    assert f" id={made.headers['x-request-id']} " in lines[1]


def test_a_streamed_500_names_the_id_not_the_errors_text(caplog):
    """An error no rule expected after the stream started: the error event names the request id; the log line has
    the id and the traceback."""
    app, _ = fake_app(FakeEngine())

    async def go():
        async with client_for(app) as c:
            def decode(ids, *args, **kwargs):
                raise RuntimeError("decode bug at /srv/secret/path")
            app.state.trtlade.engine.tokenizer.decode = decode
            body = {"prompt": [97, 98, 99], "max_tokens": 3, "echo": True, "stream": True}
            return await c.post("/v1/completions", json=body, headers={"X-Request-Id": "t-500"})

    with caplog.at_level(logging.ERROR, logger="trtlade.server"):
        resp = run(go())
    error = sse_events(resp.text)[-2]["error"]
    assert error["code"] == "internal_error" and "t-500" in error["message"] and "secret" not in error["message"]
    logged = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert len(logged) == 1 and "t-500" in logged[0].getMessage() and "secret" in str(logged[0].exc_info[1])


def test_an_id_sent_twice_is_a_400_not_the_first_one_taken():
    app, _ = fake_app(FakeEngine())

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                                headers=[("X-Request-Id", "first"), ("x-request-id", "second")])
    resp = run(go())
    assert resp.status_code == 400 and "sent 2 times" in resp.json()["error"]["message"]
    assert MADE.fullmatch(resp.headers["x-request-id"])


def test_a_malformed_id_is_logged_and_counted_like_any_400(caplog):
    from fake_engine import metric_value

    app, _ = fake_app(FakeEngine())

    async def go():
        async with client_for(app) as c:
            refused = await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                                   headers={"X-Request-Id": "two words"})
            return refused, (await c.get("/metrics")).text

    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        refused, metrics = run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    assert len(lines) == 1 and " 400 " in lines[0] and "error=invalid_header param=X-Request-Id" in lines[0]
    assert f"id={refused.headers['x-request-id']}" in lines[0]
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "400"}) == 1


def test_an_error_raised_in_a_middleware_still_answers_with_the_id():
    """Starlette answers an exception raised in a middleware from outside every middleware: the 500 carries the
    header all the same, and its body names the id, not the error's text."""
    import httpx
    from starlette.middleware import Middleware

    class Boom:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/boom":
                raise RuntimeError("boom at /srv/secret")
            await self.app(scope, receive, send)

    app, _ = fake_app(FakeEngine())
    app.user_middleware.append(Middleware(Boom))  # the innermost: inside the request ids

    async def go():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.get("/boom", headers={"X-Request-Id": "mw-1"})
    resp = run(go())
    assert resp.status_code == 500 and resp.headers.get_list("x-request-id") == ["mw-1"]
    assert "mw-1" in resp.json()["error"]["message"] and "secret" not in resp.text

"""The HTTP surface, in process (httpx ASGI transport) on the scripted fake engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_engine import DEFAULT_REPLY, FakeEngine, client_for, fake_app, metric_sum, metric_value, run, sse_events
from trtlade.server.app import ServerSettings, create_app
from trtlade.reference.serving_adapter import ReferenceServingEngine
from trtlade.server.openai_types import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    CompletionChunk,
    CompletionResponse,
    ModelList,
)
from trtlade.spec import LookaheadSpec


def post(path: str, body, *, app=None, headers=None, content=None):
    """One request against a fresh fake app; returns the httpx response."""
    app = app or fake_app()[0]

    async def go():
        async with client_for(app) as c:
            if content is not None:
                return await c.post(path, content=content, headers=headers)
            return await c.post(path, json=body, headers=headers)

    return run(go())


def error_of(resp, status: int, param=None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    if param is not None:
        assert err["param"] == param, err
    return err


# ------------------------------------------------------------------------------------------ happy paths
def test_completion_non_streaming_shape_and_usage():
    resp = post("/v1/completions", {"model": "fake-model", "prompt": "hi", "max_tokens": 10})
    assert resp.status_code == 200
    body = CompletionResponse.model_validate(resp.json())
    assert body.choices[0].text == DEFAULT_REPLY[:10]
    assert body.choices[0].finish_reason == "length"
    assert body.usage.prompt_tokens == 2 and body.usage.completion_tokens == 10
    assert body.usage.total_tokens == 12
    la = body.usage.lookahead
    assert la.spec == {"w": 4, "n": 2, "g": 4}  # no field: the config's default request spec
    # fake engine, n = 2: steps emit 1,2,1,2,... tokens -> 10 tokens in 7 steps
    assert la.steps == 7 and la.tokens_per_step == pytest.approx(10 / 7, abs=1e-4)


def test_chat_non_streaming_uses_the_chat_template():
    app, engine = fake_app()
    resp = post("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"},
                                                      {"role": "user", "content": "hi"}],
                                         "max_completion_tokens": 5}, app=app)
    body = ChatCompletionResponse.model_validate(resp.json())
    assert body.choices[0].message.content == DEFAULT_REPLY[:5]
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_ids)
    assert prompt == "system: be brief\nuser: hi\nassistant:"
    assert body.usage.prompt_tokens == len(prompt)


def test_streaming_one_chunk_per_engine_step_with_usage():
    resp = post("/v1/completions", {"prompt": "hi", "max_tokens": 10, "stream": True,
                                    "stream_options": {"include_usage": True}, "lookahead": [4, 3, 4]},
                app=fake_app(FakeEngine(spec=LookaheadSpec(4, 3, 4)))[0])
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.text)
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    for c in chunks:
        CompletionChunk.model_validate(c)
        assert "usage" in c and c["usage"] is None
    # n = 3: steps of 1, 2, 3, 1, 2, 3 ... tokens -> 10 tokens = 1+2+3+1+2+1(length) in 6 chunks
    assert [len(c["choices"][0]["text"]) for c in chunks] == [1, 2, 3, 1, 2, 1]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10
    assert usage["usage"]["lookahead"] == {"spec": {"w": 4, "n": 3, "g": 4}, "steps": 6,
                                           "tokens_per_step": round(10 / 6, 4)}


def test_streaming_without_include_usage_has_no_usage_key():
    events = sse_events(post("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream": True}).text)
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])
    assert all(e["choices"] for e in events[:-1])


def test_chat_stream_first_chunk_carries_role_and_content():
    resp = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                                         "stream": True, "stream_options": {"include_usage": True}})
    events = sse_events(resp.text)
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-2]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content  # content in the first chunk: TTFT is honest
    assert all(c.choices[0].delta.role is None for c in chunks[1:])
    assert "".join(c.choices[0].delta.content for c in chunks) == DEFAULT_REPLY[:6]
    assert events[-2]["object"] == "chat.completion.chunk" and events[-2]["choices"] == []


@pytest.mark.parametrize("lookahead", [None, [1, 1, 0], [2, 2, 1], [4, 2, 4], {"w": 3, "n": 2, "g": 0}])
@pytest.mark.parametrize("stop", [None, ["fox"], "z"])
def test_streamed_text_equals_non_streamed_text(lookahead, stop):
    body = {"prompt": "hi", "max_tokens": 30, "stop": stop}
    if lookahead is not None:
        body["lookahead"] = lookahead

    async def go():
        async with client_for(fake_app()[0]) as c:
            whole = (await c.post("/v1/completions", json=body)).json()
            streamed = (await c.post("/v1/completions", json={**body, "stream": True})).text
            return whole, sse_events(streamed)

    whole, events = run(go())
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert text == whole["choices"][0]["text"]
    assert events[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    if stop == ["fox"]:
        assert text == "The quick brown " and whole["choices"][0]["finish_reason"] == "stop"


def test_lookahead_off_gives_the_same_text_one_token_per_step():
    async def go():
        async with client_for(fake_app()[0]) as c:
            on = (await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 12})).json()
            off = (await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 12,
                                                         "lookahead": [1, 1, 0]})).json()
            return on, off

    on, off = run(go())
    assert on["choices"][0]["text"] == off["choices"][0]["text"]
    assert off["usage"]["lookahead"] == {"spec": {"w": 1, "n": 1, "g": 0}, "steps": 12, "tokens_per_step": 1.0}
    assert on["usage"]["lookahead"]["steps"] < 12


@pytest.mark.parametrize("form", [{"w": 2, "n": 2, "g": 1}, [2, 2, 1], "2,2,1",
                                  {"window_size": 2, "ngram_size": 2, "verification_set_size": 1}])
def test_request_lookahead_forms_reach_the_engine(form):
    app, engine = fake_app()
    resp = post("/v1/completions", {"prompt": "x", "max_tokens": 2, "lookahead": form}, app=app)
    assert resp.status_code == 200
    assert engine.requests[-1].lookahead == LookaheadSpec(2, 2, 1)


def test_no_lookahead_field_uses_the_configured_request_default():
    engine = FakeEngine(spec=LookaheadSpec(4, 2, 4), request_default=LookaheadSpec(1, 1, 0))
    app, _ = fake_app(engine)
    resp = post("/v1/completions", {"prompt": "x", "max_tokens": 3}, app=app)
    assert engine.requests[-1].lookahead is None  # the engine applies its default
    assert resp.json()["usage"]["lookahead"]["spec"] == {"w": 1, "n": 1, "g": 0}


def test_extensions_ignore_eos_min_tokens_stop_token_ids():
    app, engine = fake_app()
    resp = post("/v1/completions", {"prompt": "[eos@3]", "max_tokens": 8}, app=app)
    assert resp.json()["choices"][0]["finish_reason"] == "stop"
    assert resp.json()["usage"]["completion_tokens"] == 2
    resp = post("/v1/completions", {"prompt": "[eos@3]", "max_tokens": 8, "ignore_eos": True}, app=app)
    assert resp.json()["choices"][0]["finish_reason"] == "length"
    assert resp.json()["usage"]["completion_tokens"] == 8
    resp = post("/v1/completions", {"prompt": "[eos@3]", "max_tokens": 8, "min_tokens": 5,
                                    "stop_token_ids": [ord("k")]}, app=app)
    req = engine.requests[-1]
    assert (req.min_tokens, req.stop_token_ids, req.ignore_eos) == (5, (ord("k"),), False)
    assert resp.json()["choices"][0]["text"] == "The quic"  # a stop token ends the text like EOS


def test_prompt_as_token_ids_and_single_string_list():
    app, engine = fake_app()
    assert post("/v1/completions", {"prompt": [104, 105], "max_tokens": 2}, app=app).status_code == 200
    assert engine.requests[-1].prompt_ids == (104, 105)
    assert post("/v1/completions", {"prompt": [[104]], "max_tokens": 2}, app=app).status_code == 200
    assert engine.requests[-1].prompt_ids == (104,)
    assert post("/v1/completions", {"prompt": ["ab"], "max_tokens": 2}, app=app).status_code == 200
    assert engine.requests[-1].prompt_ids == (97, 98)


def test_default_max_tokens_completions_16_chat_rest_of_context():
    app, engine = fake_app(FakeEngine(max_seq_len=64))
    post("/v1/completions", {"prompt": "abc"}, app=app)
    assert engine.requests[-1].max_tokens == 16
    post("/v1/chat/completions", {"messages": [{"role": "user", "content": "abc"}]}, app=app)
    prompt_len = len(engine.requests[-1].prompt_ids)
    assert engine.requests[-1].max_tokens == 64 - prompt_len


# ------------------------------------------------------------------------------------------ info routes
def test_models_health_version_metrics():
    async def go():
        async with client_for(fake_app()[0]) as c:
            return (await c.get("/v1/models"), await c.get("/health"), await c.get("/version"),
                    await c.get("/metrics"))

    models, health, version, metrics = run(go())
    listing = ModelList.model_validate(models.json())
    assert [m.id for m in listing.data] == ["fake-model"] and listing.data[0].object == "model"
    assert health.status_code == 200 and health.json() == {"status": "ready"}
    v = version.json()
    assert v["trtlade"] and v["spec"] == "4,2,4" and v["engine"]["name"] == "reference"
    assert "in-flight batching" in v["scheduling"] and "up to 8 requests" in v["scheduling"] and v["manifest"] is None
    from trtlade.host import host_info

    assert v["host"] == host_info() and v["host"]["cpu_count"] >= 1  # the serving host, as bench reports name it
    assert metrics.headers["content-type"].startswith("text/plain")
    assert metric_value(metrics.text, "trtlade_engine_info",
                        {"engine": "reference", "model": "fake-model", "spec": "4,2,4"}) == 1.0


def test_health_is_503_while_loading_then_200():
    import threading

    gate = threading.Event()

    def slow_factory():
        gate.wait(10)
        return ReferenceServingEngine(FakeEngine())

    app = create_app(slow_factory)

    async def go():
        import httpx

        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                loading = await c.get("/health")
                gen = await c.post("/v1/completions", json={"prompt": "x"})
                gate.set()
                await asyncio.wait_for(app.state.trtlade.loaded.wait(), 10)
                return loading, gen, await c.get("/health")

    loading, gen, ready = run(go())
    assert loading.status_code == 503 and loading.json()["status"] == "loading"
    assert gen.status_code == 503 and "Retry-After" in gen.headers
    assert ready.status_code == 200


def test_the_engine_loads_in_a_thread_that_ends_with_the_load():
    """Not in the event loop's executor, whose threads stay: a thread that ran OpenMP keeps libgomp's pool
    of workers alive, and a second pool next to the engine thread's slowed every served step (context.py,
    ``in_own_thread``)."""
    import threading

    loaders = []

    def factory():
        loaders.append(threading.current_thread())
        return ReferenceServingEngine(FakeEngine())

    app = create_app(factory)

    async def go():
        async with client_for(app) as c:
            await asyncio.wait_for(app.state.trtlade.loaded.wait(), 10)
            return await c.get("/health")

    assert run(go()).status_code == 200
    (loader,) = loaders
    assert loader is not threading.main_thread() and loader.name == "trtlade-engine-load"
    loader.join(5)
    assert not loader.is_alive()


def test_engine_load_failure_is_reported():
    failures = []

    def broken():
        raise RuntimeError("weights are corrupt")

    app = create_app(broken, on_load_failed=failures.append)

    async def go():
        async with client_for(app) as c:
            return await c.get("/health"), await c.post("/v1/completions", json={"prompt": "x"})

    health, gen = run(go())
    assert health.status_code == 503 and health.json() == {"status": "failed", "error": "weights are corrupt"}
    assert gen.status_code == 503 and "weights are corrupt" in gen.json()["error"]["message"]
    assert len(failures) == 1


def test_version_shows_the_bundle_manifest():
    manifest = {"model": "Qwen3-8B", "spec": {"window_size": 4, "ngram_size": 2, "verification_set_size": 4}}
    app, _ = fake_app(settings=ServerSettings(manifest=manifest))

    async def go():
        async with client_for(app) as c:
            return (await c.get("/version")).json()

    assert run(go())["manifest"] == manifest


@pytest.mark.parametrize("installed, stack", [
    ({"uvloop", "httptools"}, {"loop": "uvloop", "http": "httptools"}),
    ({"httptools"}, {"loop": "asyncio", "http": "httptools"}),
    (set(), {"loop": "asyncio", "http": "h11"}),
])
def test_the_http_stack_is_uvloop_and_httptools_where_installed_else_asyncio_and_h11(monkeypatch, installed, stack):
    from trtlade.server import runner

    monkeypatch.setattr(runner, "_importable", lambda module: module in installed)
    assert runner.http_stack() == stack


def test_version_shows_the_http_stack_it_runs_on():
    app, _ = fake_app(settings=ServerSettings(http_stack={"loop": "uvloop", "http": "httptools"}))

    async def go():
        async with client_for(app) as c:
            return (await c.get("/version")).json()

    assert run(go())["http_stack"] == {"loop": "uvloop", "http": "httptools"}


# ------------------------------------------------------------------------------------------ auth, limits
def test_api_key_is_required_on_v1_routes_only():
    app, _ = fake_app(settings=ServerSettings(api_key="s3cret"))

    async def go():
        async with client_for(app) as c:
            return (await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}),
                    await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1},
                                 headers={"Authorization": "Bearer wrong"}),
                    await c.get("/v1/models", headers={"Authorization": "Basic s3cret"}),
                    await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1},
                                 headers={"Authorization": "Bearer s3cret"}),
                    await c.get("/health"))

    none, wrong, basic, ok, health = run(go())
    for r in (none, wrong, basic):
        error_of(r, 401)
        assert r.headers["www-authenticate"] == "Bearer"
    assert ok.status_code == 200 and health.status_code == 200


def test_body_too_large_is_413():
    app, _ = fake_app(settings=ServerSettings(max_body_bytes=2048))
    err = error_of(post("/v1/completions", {"prompt": "x" * 5000}, app=app), 413)
    assert "2048" in err["message"]


def test_queue_full_is_429_with_retry_after():
    engine = FakeEngine()
    app, _ = fake_app(engine, max_queue=1, max_batch_size=1)

    async def go():
        async with client_for(app) as c:
            async def until(running: float, queued: float) -> None:  # as /metrics counts them, not a fixed wait
                for _ in range(3000):
                    text = (await c.get("/metrics")).text
                    if (metric_value(text, "trtlade_requests_running"),
                            metric_value(text, "trtlade_requests_queued")) == (running, queued):
                        return
                    await asyncio.sleep(0.01)
                raise AssertionError(f"never {running} running and {queued} queued")

            running = asyncio.create_task(c.post("/v1/completions", json={"prompt": "[hang]", "max_tokens": 5}))
            await until(1, 0)  # the hanging request runs, the queue is empty
            waiting = asyncio.create_task(c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}))
            await until(1, 1)
            refused = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
            running.cancel()
            waiting.cancel()
            return refused

    refused = run(go())
    err = error_of(refused, 429)
    assert err["type"] == "rate_limit_error" and int(refused.headers["retry-after"]) >= 1


def test_unknown_model_is_404():
    err = error_of(post("/v1/completions", {"model": "gpt-4", "prompt": "x"}), 404, "model")
    assert "fake-model" in err["message"]


def test_unknown_route_and_method_in_openai_shape():
    async def go():
        async with client_for(fake_app()[0]) as c:
            return await c.get("/v1/nothing"), await c.get("/v1/completions")

    missing, method = run(go())
    error_of(missing, 404)
    error_of(method, 405)


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("content, fragment", [
    (b"{bad json", "not valid JSON"),
    (b"", "empty"),
    (b"[1, 2]", "JSON object"),
    (b"\xff\xfe{}", "UTF-8"),
    (b'"just a string"', "JSON object"),
    (b'{"prompt": "x", "max_tokens": 3, "max_tokens": 40}', "gives 'max_tokens' twice"),  # not the last one silently
    (b'{"prompt": "x", "stream_options": {"include_usage": true, "include_usage": false}}', "'include_usage' twice"),
])
def test_malformed_bodies(content, fragment):
    err = error_of(post("/v1/completions", None, content=content,
                        headers={"content-type": "application/json"}), 400)
    assert fragment in err["message"]


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": None}, "prompt"),
    ({}, "prompt"),
    ({"prompt": "x", "stop": [1, 2]}, "stop.0"),            # the first element that is not a string
    ({"prompt": "x", "stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"prompt": "x", "max_tokens": 5, "max_tokns": 5}, "max_tokns"),
    ({"prompt": "x", "ignore_eos": 1}, "ignore_eos"),
    ({"prompt": "x", "min_tokens": -1}, "min_tokens"),
    ({"prompt": "x", "seed": 2**70}, "seed"),       # beyond 64 bits: a 400 naming seed, not an overflow
    ({"prompt": "x", "seed": -(2**64)}, "seed"),
])
def test_wrong_types_and_values_name_the_field(body, param):
    error_of(post("/v1/completions", body), 400, param)


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": None}]}, "messages.0.content"),   # OpenAI refuses it too
    ({"messages": [{"role": "system", "content": "be brief"}, {"role": "user"}]}, "messages.1.content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "messages.0.content"),  # said to be an image part of a text model's request, not a misspelt field
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "max_completion_tokens": 4},
     "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "logprobs"),
])
def test_chat_bad_input(body, param):
    error_of(post("/v1/chat/completions", body), 400, param)


def test_an_assistant_turn_may_come_without_text():
    """Clients resend earlier assistant turns with ``content: null`` (a tool call's turn): accepted, as no text."""
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None},
                         {"role": "user", "content": "and?"}], "max_tokens": 2}
    assert post("/v1/chat/completions", body).status_code == 200


def test_unknown_field_is_refused_naming_it():
    err = error_of(post("/v1/completions", {"prompt": "x", "frobnicate": True}), 400, "frobnicate")
    assert err["code"] == "unknown_field" and "lookahead" in err["message"]


@pytest.mark.parametrize("body, param", [
    ({"logprobs": 1}, "logprobs"), ({"best_of": 3}, "best_of"),
    ({"presence_penalty": 0.5}, "presence_penalty"), ({"frequency_penalty": 1.0}, "frequency_penalty"),
    ({"logit_bias": {"1": 2.0}}, "logit_bias"), ({"suffix": "end"}, "suffix"),
    ({"temperature": 0.7}, "temperature"),
    ({"prompt": ["a"] * 65}, "prompt"), ({"n": 65}, "n"),
])
def test_unsupported_features_are_refused(body, param):
    err = error_of(post("/v1/completions", {"prompt": "x", **body}), 400, param)
    assert err["message"]


@pytest.mark.parametrize("body", [
    {"n": 1, "best_of": 1, "logprobs": None, "echo": False, "presence_penalty": 0, "frequency_penalty": 0.0,
     "logit_bias": {}, "temperature": 0, "top_p": 0.9, "seed": 7, "user": "bench", "ignore_eos": False},
])
def test_neutral_values_of_unsupported_features_are_accepted(body):
    assert post("/v1/completions", {"prompt": "x", "max_tokens": 2, **body}).status_code == 200


def test_prompt_limits():
    app, _ = fake_app(FakeEngine(max_seq_len=64))
    err = error_of(post("/v1/completions", {"prompt": "x" * 64}, app=app), 400, "prompt")
    assert "64 tokens" in err["message"] and "63" in err["message"]
    err = error_of(post("/v1/completions", {"prompt": "x" * 60, "max_tokens": 10}, app=app), 400, "max_tokens")
    assert "ask for at most 4" in err["message"]
    # beyond the context window: OpenAI's code and words, which clients that trim a conversation on overflow match
    assert err["code"] == "context_length_exceeded" and "maximum context length is 64 tokens" in err["message"]
    assert "you requested 70 tokens (60 in the prompt, 10 for the completion" in err["message"]
    err = error_of(post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 70}]}, app=app),
                   400, "messages")
    assert err["code"] == "context_length_exceeded" and "maximum context length is 64 tokens" in err["message"]
    error_of(post("/v1/completions", {"prompt": ""}, app=app), 400, "prompt")
    error_of(post("/v1/completions", {"prompt": [99999999]}, app=app), 400, "prompt")
    capped, _ = fake_app(max_new_tokens=8)
    err = error_of(post("/v1/completions", {"prompt": "x", "max_tokens": 9}, app=capped), 400, "max_tokens")
    assert "serve.max_tokens_limit" in err["message"]
    error_of(post("/v1/completions", {"prompt": "x", "max_tokens": 3, "min_tokens": 4}), 400, "min_tokens")


def test_huge_prompt_is_refused_without_blocking():
    app, _ = fake_app(FakeEngine(max_seq_len=1000))
    err = error_of(post("/v1/completions", {"prompt": "word " * 200_000}, app=app), 400, "prompt")
    assert "1000000 tokens" in err["message"]


# ------------------------------------------------------------------------------------------ lookahead
@pytest.mark.parametrize("value, param, fragment", [
    ({"w": 5, "n": 2, "g": 4}, "lookahead.w", "w = 5 > W = 4"),
    ({"w": 4, "n": 3, "g": 4}, "lookahead.n", "n = 3 > N = 2"),
    ([4, 2, 5], "lookahead.g", "g = 5 > G = 4"),
    ("9,9,9", "lookahead.w", "w = 9 > W = 4"),
    ({"w": 0, "n": 2, "g": 1}, "lookahead.w", "windowSize requires >= 1"),
    ([2, 0, 1], "lookahead.n", "ngramSize requires >= 1"),
    ([2, 2, -1], "lookahead.g", "verificationSetSize requires >=0"),
    ([2, 1, 0], "lookahead.w", "ngramSize=1 requires windowSize=1"),
    ([1, 1, 2], "lookahead.g", "ngramSize=1 requires verificationSetSize=0"),
    ([2, 2, 2**31], "lookahead.g", "a SizeType32 (int32) holds at most 2147483647"),
    ([1, 2], "lookahead", "three numbers"),
    ([1, 2, 3, 4], "lookahead", "three numbers"),
    ({"w": 2, "n": 2}, "lookahead.g", "missing"),
    ({"w": 2, "n": 2, "g": 1, "x": 3}, "lookahead", "unknown lookahead key"),
    ({"w": "two", "n": 2, "g": 1}, "lookahead.w", "integer"),
    ([True, 2, 1], "lookahead.w", "integer"),
    ([2.5, 2, 1], "lookahead.w", "integer"),
    (["2", "2", "1"], "lookahead.w", "is not an integer"),   # strict, as every number of a request: not read as 2
    ([2, 2, 1.0], "lookahead.g", "is not an integer"),
    ({"w": 2, "n": "2", "g": 1}, "lookahead.n", "is not an integer"),
    ({"w": 2, "n": 2, "g": 1, "window": "2"}, "lookahead", "unknown lookahead key 'window'"),  # the key first
    (7, "lookahead", "cannot read"),
    ("fast", "lookahead", ""),
    ({}, "lookahead.w", "missing"),
])
def test_invalid_lookahead_in_every_form(value, param, fragment):
    app, engine = fake_app()
    err = error_of(post("/v1/completions", {"prompt": "x", "lookahead": value}, app=app), 400, param)
    assert fragment in err["message"]
    assert engine.requests == []  # refused before it reached the engine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=st.integers(-2, 7), n=st.integers(-2, 5), g=st.integers(-2, 7))
def test_lookahead_admission_property(w, n, g):
    """Accepted iff legal and w<=W, n<=N, g<=G (server (4,3,4)); accepted requests run that spec."""
    server = LookaheadSpec(4, 3, 4)
    app, engine = fake_app(FakeEngine(spec=server))
    resp = post("/v1/completions", {"prompt": "x", "max_tokens": 2, "lookahead": [w, n, g]}, app=app)
    try:
        spec = LookaheadSpec(w, n, g)
        ok = server.admits(spec)
    except ValueError:
        ok = False
    assert (resp.status_code == 200) == ok, resp.text
    if ok:
        assert resp.json()["usage"]["lookahead"]["spec"] == {"w": w, "n": n, "g": g}
    else:
        assert resp.json()["error"]["param"].startswith("lookahead")


# ------------------------------------------------------------------------------------------ failures
def test_engine_failure_is_500_and_the_server_keeps_serving():
    async def go():
        async with client_for(fake_app()[0]) as c:
            failed = await c.post("/v1/completions", json={"prompt": "[fail@2]", "max_tokens": 20})
            after = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
            metrics = (await c.get("/metrics")).text
            return failed, after, metrics

    failed, after, metrics = run(go())
    err = error_of(failed, 500)
    assert err["type"] == "internal_server_error" and "scripted failure" in err["message"]
    assert after.status_code == 200
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "500"}) == 1


def test_an_error_nobody_expected_is_answered_once_not_raised_through_the_server(caplog):
    """A bug in a route (here: the tokenizer raising) is a 500 in the OpenAI shape, counted, logged once; the
    server (and, over HTTP, the connection) goes on. Starlette would raise it again after its handler's answer."""
    app, engine = fake_app()
    real = engine.tokenizer.encode

    def encode(text: str, add_special_tokens: bool = True) -> list[int]:
        if "[boom]" in text:
            raise RuntimeError("tokenizer bug")
        return real(text, add_special_tokens)
    engine.tokenizer.encode = encode  # type: ignore[method-assign]

    async def go():
        async with client_for(app) as c:  # ASGITransport re-raises what the app raises: none may escape
            failed = await c.post("/v1/completions", json={"prompt": "[boom]", "max_tokens": 3})
            after = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
            return failed, after, (await c.get("/metrics")).text

    with caplog.at_level("ERROR", logger="trtlade.server"):
        failed, after, metrics = run(go())
    err = error_of(failed, 500)
    rid = failed.headers["x-request-id"]
    assert err["code"] == "internal_error" and rid in err["message"] and "tokenizer bug" not in err["message"]
    assert after.status_code == 200
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "500"}) == 1
    logged = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert len(logged) == 1 and rid in logged[0].getMessage() and "tokenizer bug" in str(logged[0].exc_info[1])


def test_an_unpaired_surrogate_is_a_400_naming_where_it_is():
    body = b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 1}'  # JSON's escape, as sent
    resp = post("/v1/chat/completions", None, content=body, headers={"content-type": "application/json"})
    err = error_of(resp, 400)
    assert err["param"] == "messages.0.content" and "unpaired UTF-16 surrogate" in err["message"]


def test_engine_rejection_is_400():
    error_of(post("/v1/completions", {"prompt": "[reject]"}), 400)


def test_error_after_the_stream_started_is_an_sse_error_event():
    resp = post("/v1/completions", {"prompt": "[fail@2]", "max_tokens": 20, "stream": True,
                                    "stream_options": {"include_usage": True}})
    assert resp.status_code == 200
    events = sse_events(resp.text)
    assert events[-1] == "[DONE]"
    assert "error" in events[-2] and events[-2]["error"]["type"] == "internal_server_error"
    assert all("choices" in e for e in events[:-2]) and len(events) == 4  # 2 steps, error, DONE


def test_metrics_count_tokens_and_lookahead():
    async def go():
        async with client_for(fake_app()[0]) as c:
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 10, "lookahead": [2, 2, 1]})
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4, "lookahead": [1, 1, 0]})
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": -4})
            return (await c.get("/metrics")).text

    text = run(go())
    assert metric_value(text, "trtlade_requests_total", {"endpoint": "completions", "status": "200"}) == 2
    assert metric_value(text, "trtlade_requests_total", {"endpoint": "completions", "status": "400"}) == 1
    assert metric_value(text, "trtlade_prompt_tokens_total") == 4
    assert metric_value(text, "trtlade_completion_tokens_total") == 14
    assert metric_value(text, "trtlade_lookahead_steps_total", {"spec": "2,2,1"}) == 7
    assert metric_value(text, "trtlade_lookahead_accepted_tokens_total", {"spec": "2,2,1"}) == 3
    assert metric_value(text, "trtlade_lookahead_draft_rows_total", {"spec": "2,2,1"}) == 7 * 2  # 2 draft rows
    assert metric_value(text, "trtlade_lookahead_steps_total", {"spec": "1,1,0"}) == 4
    assert metric_value(text, "trtlade_lookahead_tokens_per_step_count", {"spec": "2,2,1"}) == 7
    assert metric_value(text, "trtlade_time_to_first_token_seconds_count") == 2
    assert metric_sum(text, "trtlade_request_duration_seconds_count") == 2


# ------------------------------------------------------------------------------------------ scheduling
@pytest.mark.parametrize("max_batch_size", [1, 3])
def test_requests_are_admitted_in_arrival_order_up_to_the_batch_size(max_batch_size):
    engine = FakeEngine(step_delay=0.005)
    batches = []
    real_new_batch = engine.new_batch
    engine.new_batch = lambda **kw: batches.append(real_new_batch(**kw)) or batches[-1]
    app, _ = fake_app(engine, max_batch_size=max_batch_size)

    async def go():
        async with client_for(app) as c:
            tasks = []
            for i in range(6):
                tasks.append(asyncio.create_task(c.post("/v1/completions", json={"prompt": f"p{i}",
                                                                                 "max_tokens": 4})))
                await asyncio.sleep(0.01)
            return await asyncio.gather(*tasks)

    responses = run(go())
    assert all(r.status_code == 200 for r in responses)
    order = [engine.tokenizer.decode(r.prompt_ids) for r in engine.requests]
    assert order == [f"p{i}" for i in range(6)]
    assert batches[0].admitted == sorted(batches[0].admitted)
    assert batches[0].max_running == max_batch_size  # several requests share steps, never more than the limit


def test_event_loop_stays_responsive_while_the_engine_works():
    engine = FakeEngine(step_delay=0.02)
    app, _ = fake_app(engine)

    async def go():
        async with client_for(app) as c:
            gen = asyncio.create_task(c.post("/v1/completions", json={"prompt": "x", "max_tokens": 30}))
            await asyncio.sleep(0.05)
            health = await c.get("/health")  # answered while the worker thread generates
            done_before = gen.done()
            await gen
            return health, done_before

    health, done_before = run(go())
    assert health.status_code == 200 and not done_before


# ------------------------------------------------------------------------------------------ cancellation
async def _asgi_call(app, body: dict, disconnect_after_chunks: int, when=None):
    """Call the app directly; the client disconnects after receiving N body chunks (0: at once), or
    as soon as ``when()`` is true."""
    sent: list[dict] = []
    received = asyncio.Event()
    payload = json.dumps(body).encode()
    messages = [{"type": "http.request", "body": payload, "more_body": False}]

    if disconnect_after_chunks == 0 and when is None:
        received.set()

    async def receive():
        if messages:
            return messages.pop(0)
        while not received.is_set() and not (when is not None and when()):
            await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        chunks = [m for m in sent if m["type"] == "http.response.body" and m.get("body")]
        if len(chunks) >= disconnect_after_chunks:
            received.set()

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions",
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json"),
                                                               (b"content-length", str(len(payload)).encode())],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    await asyncio.wait_for(app(scope, receive, send), 10)
    return sent


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_cancels_the_generation(stream):
    engine = FakeEngine()
    app, _ = fake_app(engine)

    async def go():
        async with client_for(app) as c:
            sent = await _asgi_call(app, {"prompt": "[hang]", "max_tokens": 5, "stream": stream},
                                    disconnect_after_chunks=1, when=None if stream else lambda: engine.started)
            # the worker is free again: the next request completes
            after = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            return sent, after, (await c.get("/metrics")).text

    sent, after, metrics = run(go())
    assert after.status_code == 200
    assert engine.closed == 1  # the hanging generator was closed at a step boundary
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "499"}) == 1


def test_disconnect_while_queued_removes_the_request_from_the_queue():
    engine = FakeEngine()
    app, _ = fake_app(engine, max_batch_size=1)  # one runs, the next waits in the queue

    async def go():
        async with client_for(app) as c:
            blocker = asyncio.create_task(_asgi_call(app, {"prompt": "[hang]", "max_tokens": 5, "stream": True},
                                                     disconnect_after_chunks=3))
            await asyncio.sleep(0.05)
            # queued behind the hanging request; the client leaves before it starts
            await _asgi_call(app, {"prompt": "never", "max_tokens": 2, "stream": True}, disconnect_after_chunks=0)
            await blocker
            after = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            return after

    after = run(go())
    assert after.status_code == 200
    prompts = [engine.tokenizer.decode(r.prompt_ids) for r in engine.requests]
    assert "never" not in prompts


# ------------------------------------------------------------------------------------ routes one at a time
def _bare_app(router, state):
    """One route module mounted alone on a bare FastAPI app over a hand-made context."""
    import time

    from fastapi import FastAPI

    from trtlade.server.app import add_error_handlers
    from trtlade.server.context import ServerContext
    from trtlade.server.metrics import ServerMetrics

    app = FastAPI()
    app.state.context = ServerContext(ServerSettings(api_key="k"), ServerMetrics(), state, started_at=time.time())
    add_error_handlers(app)
    app.include_router(router)
    return app


def _get(app, method, path, **kw):
    import httpx

    async def go():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.request(method, path, **kw)

    return run(go())


@pytest.mark.parametrize("status,code", [("loading", 503), ("failed", 503), ("stopping", 503)])
def test_info_routes_alone_report_an_engine_that_is_not_ready(status, code):
    from trtlade.server import info_routes
    from trtlade.server.context import ServerState

    app = _bare_app(info_routes.router, ServerState(status=status, error="boom" if status == "failed" else None))
    health = _get(app, "GET", "/health")
    assert health.status_code == code and health.json()["status"] == status
    assert _get(app, "GET", "/version", headers={"authorization": "Bearer k"}).json()["engine"] is None
    assert _get(app, "GET", "/version").status_code == 401  # with a key set, /version needs it too
    assert _get(app, "GET", "/v1/models").status_code == 401  # the key is checked before the engine


def test_generation_routes_alone_admit_through_the_context():
    from trtlade.server import generation
    from trtlade.server.context import ServerState

    engine = ReferenceServingEngine(FakeEngine(), max_queue=4)
    app = _bare_app(generation.router, ServerState(status="ready", engine=engine))
    auth = {"authorization": "Bearer k"}
    ok = _get(app, "POST", "/v1/completions", json={"prompt": "Hi", "max_tokens": 3}, headers=auth)
    refused = _get(app, "POST", "/v1/completions", json={"prompt": "Hi"})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
    assert refused.status_code == 401
    run(engine.aclose())


def test_a_request_is_parsed_tokenized_and_submitted_inside_the_engines_admission_mark():
    """The server tells the reference engine while it admits a request (its body parsed, templated, tokenized
    and submitted: ``admitting``), so the steps that run meanwhile on the same cores teach its cost model
    nothing; the mark ends for a refused request too, and a request refused before its body is read sets none."""
    from trtlade.server import generation
    from trtlade.server.context import ServerState

    engine = ReferenceServingEngine(FakeEngine(), max_queue=4)
    seen: list[str] = []

    class Recorder:
        def begin(self) -> None:
            seen.append("begin")

        def end(self) -> None:
            seen.append("end")

    engine._batch.outside = Recorder()
    submit = engine.submit
    engine.submit = lambda request: seen.append("submit") or submit(request)  # the last step of an admission
    app = _bare_app(generation.router, ServerState(status="ready", engine=engine))
    auth = {"authorization": "Bearer k"}
    ok = _get(app, "POST", "/v1/completions", json={"prompt": "Hi", "max_tokens": 3}, headers=auth)
    bad = _get(app, "POST", "/v1/completions", json={"prompt": "Hi", "max_tokens": -1}, headers=auth)
    unauthorised = _get(app, "POST", "/v1/completions", json={"prompt": "Hi"})
    assert (ok.status_code, bad.status_code, unauthorised.status_code) == (200, 400, 401)
    assert seen == ["begin", "submit", "end", "begin", "end"]
    run(engine.aclose())


def test_a_prompt_limit_above_the_engines_is_lowered_with_a_warning_at_start(caplog):
    """serve.max_prompt_tokens beyond what the engine holds: /version shows the engine's, and the start says so."""
    import logging

    with caplog.at_level(logging.WARNING, logger="trtlade.engine"):
        engine = ReferenceServingEngine(FakeEngine(), max_prompt_tokens=100_000)
        kept = ReferenceServingEngine(FakeEngine(), max_prompt_tokens=200)
    assert engine.info.limits.max_prompt_tokens == FakeEngine.max_seq_len - 1
    assert kept.info.limits.max_prompt_tokens == 200
    [record] = [r for r in caplog.records if "max_prompt_tokens" in r.getMessage()]
    assert "100000 is above the longest prompt the engine holds (511 tokens" in record.getMessage()
    run(engine.aclose())
    run(kept.aclose())


def test_a_compressed_body_is_a_415_naming_the_header_not_text_that_is_not_utf8():
    import gzip
    import json as _json

    body = gzip.compress(_json.dumps({"prompt": "hi", "max_tokens": 2}).encode())
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    err = error_of(post("/v1/completions", None, content=body, headers=headers), 415, "Content-Encoding")
    assert "not supported" in err["message"] and "UTF-8" not in err["message"]
    plain = post("/v1/completions", None, content=_json.dumps({"prompt": "hi", "max_tokens": 2}).encode(),
                 headers={"Content-Type": "application/json", "Content-Encoding": "identity"})
    assert plain.status_code == 200


def test_metrics_expose_the_documented_series_alone():
    """prometheus_client added a `_created` gauge beside every counter and histogram: series the reference does
    not list. Every family exposed is one the metrics reference names."""
    import re

    from trtlade.server.metrics import ServerMetrics

    text = ServerMetrics().render().decode()
    families = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    reference = Path(__file__).resolve().parent.parent / "docs" / "reference" / "metrics.md"
    documented = set(re.findall(r"^\| `((?:trtlade|process)_\w+)`", reference.read_text(), re.M))
    assert families and not any(f.endswith("_created") for f in families)
    assert families <= documented, sorted(families - documented)
    if Path("/proc/self/stat").exists():  # prometheus_client reads the process's series from /proc
        assert "process_cpu_seconds_total" in families


def test_the_reported_seed_is_the_first_choices_whichever_generation_finished_first():
    """``usage.lookahead.seed`` is documented as the first choice's (choice j drew with seed + j): a request's
    generations finish in any order, and it reported the seed of the one that finished first."""
    from trtlade.contract.protocol import GenerationStats, StepChunk
    from trtlade.server.metrics import ServerMetrics
    from trtlade.server.responses import RequestTracker

    tracker = RequestTracker(ServerMetrics(), 0.0, prompt_tokens=3)
    for generation, seed in ((1, 8), (0, 7)):  # the second choice ends first
        stats = GenerationStats(spec=LookaheadSpec(1, 1, 0), steps=2, tokens=2, seed=seed)
        tracker.chunk(StepChunk(tokens=[5, 6], finish_reason="stop", stats=stats), generation)
    assert tracker.stats.seed == 7 and tracker.stats.tokens == 4

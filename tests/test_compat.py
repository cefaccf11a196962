"""The request bodies the clients our users run actually send, and what those clients read back.

Bodies are copied from the clients' sources or docs:
- guidellm 0.8 (``OpenAIHTTPBackend``): ``stream_options: {include_usage: true,
  continuous_usage_stats: true}`` on every streamed request; it reads ``usage`` from every chunk;
- aiperf ``--per-chunk-usage``: the same stream options;
- the openai SDK (``client.chat.completions.create(...)``): ``user``, ``store``, ``metadata``,
  ``service_tier``, ``parallel_tool_calls``, ``response_format`` as users pass them;
- a Hugging Face repo id as the model name (what lm-eval's ``pretrained=`` / ``model=`` carry).
Also: hostile bodies (deep nesting, random JSON) never give a 500, and the access log.
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_engine import client_for, fake_app, run, sse_events, uvicorn_thread

GUIDELLM_STREAM = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def post(body, path="/v1/chat/completions", app=None):
    app = app or fake_app()[0]

    async def go():
        async with client_for(app) as c:
            return await c.post(path, json=body)

    return run(go())


# ------------------------------------------------------------------------------------ streaming usage
@pytest.mark.parametrize("path,prompt", [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                                         ("/v1/completions", {"prompt": "hi"})])
def test_continuous_usage_stats_put_the_running_usage_in_every_chunk(path, prompt):
    resp = post({**prompt, "model": "fake-model", "max_tokens": 9, **GUIDELLM_STREAM}, path)
    assert resp.status_code == 200, resp.text
    events = [e for e in sse_events(resp.text) if e != "[DONE]"]
    content = [e for e in events if e["choices"]]
    counts = [e["usage"]["completion_tokens"] for e in content]
    assert counts == sorted(counts) and counts[-1] == 9  # running totals, as guidellm sums them
    assert all(e["usage"]["prompt_tokens"] == content[0]["usage"]["prompt_tokens"] > 0 for e in content)
    assert all(e["usage"]["total_tokens"] == e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"]
               for e in content)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 9


def test_without_continuous_usage_chunks_carry_null_usage():
    resp = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True,
                 "stream_options": {"include_usage": True}})
    events = [e for e in sse_events(resp.text) if e != "[DONE]" and e["choices"]]
    assert all(e["usage"] is None for e in events)


# ------------------------------------------------------------------------------------ openai SDK fields
SDK_NEUTRAL = {"user": "u-1", "store": False, "metadata": {"run": "a"}, "service_tier": "auto",
               "parallel_tool_calls": True, "response_format": {"type": "text"}}


def test_fields_that_do_not_change_the_output_are_accepted_and_logged_once(caplog):
    app, _ = fake_app()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **SDK_NEUTRAL}

    async def go():
        async with client_for(app) as c:
            return [await c.post("/v1/chat/completions", json=body) for _ in range(2)]

    with caplog.at_level(logging.INFO, logger="trtlade.server"):
        first, second = run(go())
    assert first.status_code == second.status_code == 200
    lines = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(lines) == 1 and all(name in lines[0] for name in SDK_NEUTRAL)


def test_sampling_fields_sent_without_a_temperature_are_logged_as_ignored(caplog):
    """OpenAI's default temperature is 1, trtlade's 0 (greedy): a seed or top_p sent without one does nothing here,
    and the server log says so once."""
    app, _ = fake_app()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 3}

    async def go():
        async with client_for(app) as c:
            return [await c.post("/v1/chat/completions", json=body) for _ in range(2)]

    with caplog.at_level(logging.INFO, logger="trtlade.server"):
        replies = run(go())
    assert all(r.status_code == 200 for r in replies)
    lines = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(lines) == 1 and "seed (greedy: no temperature)" in lines[0]


@pytest.mark.parametrize("extra,param,why", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "never call them"),
    ({"tool_choice": "auto"}, "tool_choice", "needs tools"),
    ({"response_format": {"type": "json_object"}}, "response_format", "does not constrain"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "JSON"),
    ({"reasoning_effort": "low"}, "reasoning_effort", "reasoning"),
])
def test_fields_that_would_change_the_output_are_refused_saying_why(extra, param, why):
    resp = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **extra})
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == param and why in err["message"]


@pytest.mark.parametrize("tier, status", [("flex", 200), ("priority", 200), ("flexible", 400), ("Auto", 400)])
def test_service_tier_is_one_of_openais_tiers_not_any_string(tier, status):
    resp = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "service_tier": tier})
    assert resp.status_code == status, resp.text
    if status == 400:
        assert resp.json()["error"]["param"] == "service_tier" and "'priority'" in resp.json()["error"]["message"]


@pytest.mark.parametrize("field, value", [("tools", []), ("tool_choice", "none"), ("response_format", {"type": "text"}),
                                          ("store", True), ("metadata", {"a": "b"}), ("service_tier", "flex"),
                                          ("parallel_tool_calls", True), ("modalities", ["text"]),
                                          ("safety_identifier", "u"), ("prompt_cache_key", "k")])
def test_a_chat_only_field_on_completions_is_an_unknown_field_as_openai_has_it(field, value):
    """OpenAI's /v1/completions has none of these: sent there, they are refused, not accepted and ignored."""
    from fake_engine import client_for, fake_app, run

    async def go():
        async with client_for(fake_app()[0]) as c:
            return await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, field: value})
    resp = run(go())
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == field and err["code"] == "unknown_field"


@pytest.mark.parametrize("field, value", [("functions", [{"name": "f"}]), ("function_call", "none"),
                                          ("prediction", {"type": "content", "content": "x"}),
                                          ("audio", {"voice": "alloy", "format": "mp3"}), ("verbosity", "low"),
                                          ("web_search_options", {}), ("prompt_cache_retention", "24h")])
def test_an_openai_chat_field_trtlade_does_not_take_is_refused_as_unsupported_not_as_a_typo(field, value):
    resp = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, field: value})
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == field and err["code"] == "unsupported"
    assert "OpenAI field trtlade does not support" in err["message"] and "typo" not in err["message"]


def test_a_hugging_face_repo_id_names_the_served_model():
    ok = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "model": "someorg/fake-model"})
    wrong = post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "model": "someorg/other"})
    assert ok.status_code == 200 and ok.json()["model"] == "fake-model"
    assert wrong.status_code == 404


# ------------------------------------------------------------------------------------ hostile bodies
def test_a_whole_number_longer_than_any_field_takes_is_a_400_not_a_500():
    """Python refuses to read an integer of more than 4,300 digits; that was a 500 naming its internals."""
    from fake_engine import client_for, run

    async def go():
        app, _ = fake_app()
        async with client_for(app) as client:
            body = '{"prompt": "x", "max_tokens": ' + "9" * 5000 + "}"
            return await client.post("/v1/completions", content=body, headers={"content-type": "application/json"})

    bad = run(go())
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    assert "a whole number of 5000 digits; no field takes more than 64" in bad.json()["error"]["message"]


def test_deep_nesting_is_a_400_and_the_connection_stays_usable():
    app, _ = fake_app()
    deep = "[" * 5000 + "]" * 5000
    with uvicorn_thread(app) as url:
        with httpx.Client(base_url=url, timeout=30) as client:  # one keep-alive connection
            bad = client.post("/v1/completions", content=deep, headers={"content-type": "application/json"})
            deep_list = json.loads("[" * 100 + "]" * 100)
            nested = client.post("/v1/completions", json={"prompt": "x", "lookahead": deep_list})
            after = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    assert "levels deep" in bad.json()["error"]["message"]
    assert nested.status_code == 400
    assert after.status_code == 200


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=8),
                     lambda children: st.lists(children, max_size=4)
                     | st.dictionaries(st.sampled_from(["prompt", "messages", "max_tokens", "stream", "lookahead",
                                                        "stop", "n", "model", "x", "stream_options", "role",
                                                        "content", "logprobs", "tools"]), children, max_size=5),
                     max_leaves=25)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_JSON | st.binary(max_size=40), path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
def test_no_request_body_gives_a_500(body, path):
    app, _ = fake_app()

    async def go():
        async with client_for(app) as c:
            if isinstance(body, bytes):
                return await c.post(path, content=body, headers={"content-type": "application/json"})
            return await c.post(path, json={**body, "max_tokens": 2} if isinstance(body, dict) else body)

    resp = run(go())
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        assert resp.json()["error"]["message"]


# ------------------------------------------------------------------------------------ access log
def test_access_log_has_one_line_per_request_with_tokens_spec_and_errors(caplog):
    app, _ = fake_app()

    async def go():
        async with client_for(app) as c:
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5, "lookahead": [2, 2, 1]})
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3, "stream": True})
            await c.post("/v1/completions", json={"prompt": "hi", "lookahead": [9, 2, 1]})
            await c.get("/health")

    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    assert len(lines) == 3  # the health probe is not logged
    assert '"POST /v1/completions HTTP/1.1" 200' in lines[0]
    assert "prompt=2 completion=5 lookahead=2,2,1" in lines[0]
    assert "completion=3 lookahead=4,2,4" in lines[1]
    assert " 400 " in lines[2] and "error=lookahead_not_admitted param=lookahead.w" in lines[2]


@pytest.mark.parametrize("probes", [False, True])
def test_health_probes_and_metrics_scrapes_stay_out_of_the_access_log_unless_asked(caplog, probes):
    from trtlade.server.app import ServerSettings

    app, _ = fake_app(settings=ServerSettings(access_log_probes=probes))

    async def go():
        async with client_for(app) as c:
            for _ in range(5):
                await c.get("/health")
                await c.get("/metrics")
            await c.get("/version")

    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    assert sum("GET /health" in line for line in lines) == (5 if probes else 0)
    assert sum("GET /metrics" in line for line in lines) == (5 if probes else 0)
    assert sum("GET /version" in line for line in lines) == 1  # not a probe: logged


def test_access_log_can_be_switched_off(caplog):
    from trtlade.server.app import ServerSettings

    app, _ = fake_app(settings=ServerSettings(access_log=False))

    async def go():
        async with client_for(app) as c:
            await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})

    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        run(go())
    assert not [r for r in caplog.records if r.name == "trtlade.access"]


# ------------------------------------------------------------------------------------ several prompts, n
def _tiny_app():
    from models import tiny_engine
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (2, 3, 2))
    return create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))


def _calls(app, bodies):
    async def go():
        async with client_for(app) as c:
            return [(await c.post("/v1/completions", json=b)) for b in bodies]

    return run(go())


PROMPTS = ["The quick brown fox", "one, two, three,", "Honey bees live in"]


@pytest.mark.parametrize("as_ids", [False, True])
def test_several_prompts_give_one_choice_each_equal_to_the_prompt_sent_alone(as_ids):
    from models import tiny_tokenizer

    tok = tiny_tokenizer()
    prompts = [tok.encode(p) for p in PROMPTS] if as_ids else PROMPTS
    base = {"max_tokens": 10, "ignore_eos": True}
    app = _tiny_app()
    together, *alone = _calls(app, [{**base, "prompt": prompts}] + [{**base, "prompt": p} for p in prompts])
    body = together.json()
    assert together.status_code == 200, together.text
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["text"] for c in body["choices"]] == [a.json()["choices"][0]["text"] for a in alone]
    assert body["usage"]["prompt_tokens"] == sum(a.json()["usage"]["prompt_tokens"] for a in alone)
    assert body["usage"]["completion_tokens"] == 30


def test_greedy_n_gives_identical_copies_and_sampled_n_independent_samples():
    app = _tiny_app()
    greedy, sampled, again = _calls(app, [
        {"prompt": PROMPTS, "n": 2, "max_tokens": 8, "ignore_eos": True},
        {"prompt": PROMPTS[0], "n": 3, "max_tokens": 12, "ignore_eos": True, "temperature": 1.0, "seed": 5},
        {"prompt": PROMPTS[0], "n": 3, "max_tokens": 12, "ignore_eos": True, "temperature": 1.0, "seed": 5}])
    texts = [c["text"] for c in greedy.json()["choices"]]
    assert len(texts) == 6 and texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
    assert greedy.json()["usage"]["completion_tokens"] == 6 * 8
    samples = [c["text"] for c in sampled.json()["choices"]]
    assert len(set(samples)) == 3  # independent draws (seed, seed + 1, seed + 2)
    assert samples == [c["text"] for c in again.json()["choices"]]  # and reproducible with the seed


def test_streamed_choices_carry_their_index_and_add_up_to_the_whole_response():
    app = _tiny_app()
    base = {"prompt": PROMPTS[:2], "n": 2, "max_tokens": 8, "ignore_eos": True}
    whole, streamed = _calls(app, [base, {**base, "stream": True, "stream_options": {"include_usage": True}}])
    events = [e for e in sse_events(streamed.text) if e != "[DONE]"]
    texts: dict[int, str] = {}
    for event in events[:-1]:
        [choice] = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert [texts[i] for i in range(4)] == [c["text"] for c in whole.json()["choices"]]
    assert events[-1]["usage"]["completion_tokens"] == 4 * 8


# ------------------------------------------------------------------------------------ logprobs (lm-eval, SDK)
def _hf_logprobs(ids):
    import torch

    from models import tiny_engine

    model = tiny_engine("llama", (2, 3, 2)).model  # the same cached random weights as _tiny_app's
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def test_lm_eval_loglikelihood_request_scores_the_continuation_like_transformers():
    """lm-eval's local-completions loglikelihood body: token-id prompts (context + continuation),
    max_tokens 1, echo, logprobs 1, temperature 0; it reads token_logprobs / top_logprobs[ctxlen:-1]."""
    from models import tiny_tokenizer

    tok = tiny_tokenizer()
    context, continuation = tok.encode("one, two, three,"), tok.encode(" four, five")
    prompt = context + continuation
    resp, = _calls(_tiny_app(), [{"model": "tiny-llama", "prompt": [prompt, context], "max_tokens": 1,
                                  "temperature": 0, "logprobs": 1, "seed": 1234, "echo": True}])
    assert resp.status_code == 200, resp.text
    first = resp.json()["choices"][0]["logprobs"]
    assert len(first["token_logprobs"]) == len(prompt) + 1 and first["token_logprobs"][0] is None
    ref = _hf_logprobs(prompt)
    got = first["token_logprobs"][len(context):-1]
    want = [float(ref[i - 1][prompt[i]]) for i in range(len(context), len(prompt))]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4
    greedy_top = [max(t, key=t.get) for t in first["top_logprobs"][len(context):-1]]
    assert greedy_top == [tok.decode([int(ref[i - 1].argmax())]) for i in range(len(context), len(prompt))]
    assert resp.json()["choices"][0]["text"].startswith(tok.decode(prompt))


def test_chat_logprobs_with_lookahead_match_completions_and_stream_the_same():
    """Chat's ``logprobs: true, top_logprobs: k`` under lookahead: the same values as a completions
    request on the rendered prompt (whose values are checked against transformers above and in
    test_engine_logprobs.py), streamed or not."""
    import copy

    from models import tiny_engine, tiny_tokenizer
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.server.app import create_app

    tok = copy.deepcopy(tiny_tokenizer())
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    engine = tiny_engine("llama", (2, 3, 2), tokenizer=tok)
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))
    messages = [{"role": "user", "content": "one, two, three, four,"}]
    body = {"messages": messages, "max_tokens": 12, "ignore_eos": True, "logprobs": True, "top_logprobs": 2,
            "lookahead": [2, 3, 2]}
    prompt = PromptTokenizer(tok).encode_chat(messages)

    async def go():
        async with client_for(app) as c:
            whole = await c.post("/v1/chat/completions", json=body)
            streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
            plain = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 12, "ignore_eos": True,
                                                          "logprobs": 2, "lookahead": [2, 3, 2]})
            return whole, streamed, plain

    whole, streamed, plain = run(go())
    assert whole.status_code == 200, whole.text
    content = whole.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 12 and all(len(e["top_logprobs"]) == 2 for e in content)
    assert all(e["bytes"] == list(e["token"].encode()) for e in content if "\ufffd" not in e["token"])
    joined = bytes(b for e in content for b in e["bytes"])  # a split character's tokens: its bytes, joined
    assert joined.decode("utf-8", "replace") == whole.json()["choices"][0]["message"]["content"]
    events = [e for e in sse_events(streamed.text) if e != "[DONE]" and e["choices"]]
    assert [x for e in events for x in e["choices"][0]["logprobs"]["content"]] == content
    reference = plain.json()["choices"][0]["logprobs"]
    assert [e["logprob"] for e in content] == reference["token_logprobs"]
    assert [e["token"] for e in content] == reference["tokens"]
    assert reference["text_offset"] == [sum(len(t) for t in reference["tokens"][:i]) for i in range(12)]


@pytest.mark.parametrize("app_does, status", [("starts_then_stops", 499), ("sends_nothing", 499), ("raises", 500)])
def test_the_access_log_says_what_the_client_got(caplog, app_does, status):
    """A stream the client left is a 499 in the log as in /metrics (its 200 had started); an app that failed
    before any byte went out is a 500."""
    import asyncio

    from trtlade.server.access_log import AccessLogMiddleware

    async def app(scope, receive, send):
        if app_does == "raises":
            raise RuntimeError("boom")
        if app_does == "starts_then_stops":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})

    async def send(message):
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "client": ("1.2.3.4", 5), "state": {}}
    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        try:
            asyncio.run(AccessLogMiddleware(app)(scope, None, send))
        except RuntimeError:
            assert app_does == "raises"
    [line] = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    assert f'"POST /v1/completions HTTP/1.1" {status} ' in line


def test_a_client_gone_mid_upload_is_a_499_not_a_traceback():
    import asyncio

    from starlette.requests import Request

    from trtlade.server.errors import ApiError

    app, _ = fake_app()
    messages = [{"type": "http.request", "body": b'{"prompt": ', "more_body": True}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    request = Request({"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}, receive)
    with pytest.raises(ApiError) as err:
        asyncio.run(app.state.context.read_json(request))
    assert (err.value.status, err.value.code) == (499, "client_disconnected")


def test_chat_logprobs_bytes_are_each_tokens_own_bytes_for_a_split_character():
    """An emoji in two byte-level tokens: each decodes alone to U+FFFD, but their bytes joined are the emoji's
    (OpenAI's `bytes`: what a client concatenates)."""
    from trtlade.contract.protocol import TokenLogprob
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.server.responses import chat_logprobs

    class Bpe:
        pieces = {1: "ðŁĺ", 2: "Ģ"}  # 'ðŁĺĢ' is 😀 (F0 9F 98 80) in byte-level BPE

        def decode(self, ids, skip_special_tokens=True):
            return "\ufffd"

        def convert_ids_to_tokens(self, token):
            return self.pieces[token]

    tok = PromptTokenizer(Bpe())
    body = chat_logprobs([(t, TokenLogprob(t, -0.1, ())) for t in (1, 2)], tok.piece,
                         tok.token_bytes)
    assert [entry["token"] for entry in body["content"]] == ["\ufffd", "\ufffd"]
    joined = bytes(b for entry in body["content"] for b in entry["bytes"])
    assert joined.decode("utf-8") == "😀"


@pytest.mark.parametrize("body, param, fragment", [
    (b'{"prompt": "x", "max_tokens": 2, "temperature": NaN}', None, "holds NaN, which is not a JSON number"),
    (b'[{"prompt": "x"}]', None, "the request body is a JSON array; send a JSON object"),
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}',
     "messages.0.content", "part 0 is of type 'image_url': this server serves a text model"),
    (b'{"messages": [{"role": "user", "content": []}]}', "messages.0.content", "a user message needs its text"),
])
def test_bodies_refused_for_what_they_are(body, param, fragment):
    app, _ = fake_app()
    path = "/v1/completions" if b"prompt" in body else "/v1/chat/completions"

    async def go():
        async with client_for(app) as c:
            return await c.post(path, content=body, headers={"content-type": "application/json"})

    resp = run(go())
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and fragment in error["message"] and "Value error" not in error["message"]


def test_openai_routes_and_roles_as_openai_clients_use_them():
    app, engine = fake_app()

    async def go():
        async with client_for(app) as c:
            card = await c.get("/v1/models/fake-model")
            other = await c.get("/v1/models/gpt-4")
            head = await c.head("/health")
            wrong = await c.delete("/v1/completions")
            chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"},
                    {"role": "tool", "content": "42", "tool_call_id": "call_1"}]
            tool = await c.post("/v1/chat/completions", json={"messages": chat, "max_tokens": 1})
            dev = await c.post("/v1/chat/completions", json={"messages": [{"role": "developer", "content": "be"}],
                                                             "max_tokens": 1})
            sys_ = await c.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "be"}],
                                                              "max_tokens": 1})
            return card, other, head, wrong, tool, dev, sys_

    card, other, head, wrong, tool, dev, sys_ = run(go())
    assert card.status_code == 200 and card.json()["id"] == "fake-model" and card.json()["object"] == "model"
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
    assert head.status_code == 200
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert tool.status_code == 200
    assert dev.json()["usage"]["prompt_tokens"] == sys_.json()["usage"]["prompt_tokens"]  # developer is system
    assert engine.requests[-1].prompt_ids == engine.requests[-2].prompt_ids


def test_the_install_hint_names_the_extra_of_each_line_without_sending_a_pytorch_user_to_the_engine_line():
    """`serve --model` on a PyTorch-backend (1.3) bundle without TensorRT-LLM was told to install the engine line
    (which has no SA) and to run the build it had just run."""
    from trtlade.trtllm.compat import INSTALL_HINT

    pytorch, engine = INSTALL_HINT.index("'.[trtllm]'"), INSTALL_HINT.index("'.[trtllm-engine]'")
    assert pytorch < engine and "PyTorch-backend bundle" in INSTALL_HINT[pytorch:engine]
    assert "build --speculation" not in INSTALL_HINT

"""End to end: `python -m trtlade serve` as a subprocess on a free loopback port, serving a tiny random
Llama with the reference engine (fp32), talked to with the official `openai` client (max_retries=0)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from fake_engine import TINY_CHAT_TEMPLATE, free_port

API_KEY = "test-key-0123456789"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    from models import tiny_model, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok), max_positions=512)
    model.save_pretrained(folder)
    tok.chat_template = TINY_CHAT_TEMPLATE
    tok.save_pretrained(folder)
    return folder


def _start(model_dir: Path, port: int, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "TRTLADE_API_KEY"}
    cmd = [sys.executable, "-m", "trtlade", "serve", "--model", str(model_dir), "--port", str(port),
           "--spec", "4,2,4", "--api-key", API_KEY, "--log-level", "warning", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parent.parent)


def _wait_ready(proc: subprocess.Popen, base: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("server did not become ready")


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    port = free_port()
    proc = _start(tiny_model_dir, port)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, base)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def client(base: str, key: str = API_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def test_models_and_version(server):
    base, _ = server
    models = client(base).models.list()
    assert [m.id for m in models.data] == [models.data[0].id] and models.data[0].id.startswith("tiny-llama")
    assert httpx.get(f"{base}/version").status_code == 401  # with a key set, /version needs it
    version = httpx.get(f"{base}/version", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert version["spec"] == "4,2,4" and version["engine"]["name"] == "reference"
    assert "in-flight batching" in version["scheduling"]
    from trtlade.server.runner import http_stack

    assert version["http_stack"] == http_stack()  # uvloop and httptools where installed (the dependencies)


def test_completion_chat_and_streaming_with_usage(server):
    base, _ = server
    c = client(base)
    model = c.models.list().data[0].id
    whole = c.completions.create(model=model, prompt="The quick brown fox", max_tokens=24, temperature=0)
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens >= 1
    la = whole.usage.model_extra["lookahead"]
    assert {"spec", "steps", "tokens_per_step", "policy"} <= set(la) <= {"spec", "steps", "tokens_per_step", "policy",
                                                                        "accepted_from"} and la["steps"] >= 1
    assert la["policy"] == "auto"  # no lookahead field, no schedule: the reference engine decides per step
    pieces, usage = [], None
    for chunk in c.completions.create(model=model, prompt="The quick brown fox", max_tokens=24, stream=True,
                                      stream_options={"include_usage": True}):
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
        else:
            usage = chunk.usage
    assert "".join(pieces) == whole.choices[0].text  # streamed == non-streamed
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.model_extra["lookahead"]["steps"] >= 1

    chat = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello! How are you?"}],
                                     max_completion_tokens=16)
    assert chat.choices[0].message.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello! How are you?"}], max_tokens=16, stream=True))
    assert streamed == chat.choices[0].message.content


def test_extra_body_lookahead_is_lossless(server):
    base, _ = server
    c = client(base)
    model = c.models.list().data[0].id
    prompt = "def is_prime(n):\n    if n < 2:\n        return False\n"
    texts, steps = {}, {}
    for spec in ([1, 1, 0], [2, 2, 1], [4, 2, 4], {"w": 3, "n": 2, "g": 2}):
        r = c.completions.create(model=model, prompt=prompt, max_tokens=40, extra_body={"lookahead": spec,
                                                                                         "ignore_eos": True})
        texts[str(spec)] = r.choices[0].text
        assert r.usage.completion_tokens == 40
        wire = spec if isinstance(spec, dict) else dict(zip("wng", spec))
        assert r.usage.model_extra["lookahead"]["spec"] == wire  # the server ran what was asked
        steps[str(spec)] = r.usage.model_extra["lookahead"]["steps"]
    assert len(set(texts.values())) == 1, texts  # with lookahead == with (1,1,0), fp32
    assert steps["[1, 1, 0]"] == 40 and min(steps.values()) < 40, steps  # some spec accepted drafts


def test_errors_through_the_openai_client(server):
    base, _ = server
    c = client(base)
    model = c.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as info:
        c.completions.create(model=model, prompt="x", max_tokens=4, extra_body={"lookahead": {"w": 5, "n": 2, "g": 4}})
    assert info.value.body["param"] == "lookahead.w"
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model=model, prompt="x", max_tokens=4, extra_body={"lookahead": [2, 0, 1]})
    with pytest.raises(openai.BadRequestError) as info:
        c.completions.create(model=model, prompt="x", max_tokens=-3)
    assert info.value.body["param"] == "max_tokens"
    with pytest.raises(openai.AuthenticationError):
        client(base, key="wrong").completions.create(model=model, prompt="x", max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as info:
        c.completions.create(model=model, prompt="x " * 2000, max_tokens=2)
    assert info.value.body["param"] == "prompt"


def test_sigterm_finishes_in_flight_requests_and_exits_0(tiny_model_dir):
    port = free_port()
    proc = _start(tiny_model_dir, port)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, base)
        body = {"prompt": "one, two, three", "max_tokens": 300, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        events = []
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {API_KEY}"}) as r:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 1:
                    proc.send_signal(signal.SIGTERM)  # shut down while this stream is in flight
        assert events[-1] == "[DONE]"
        assert '"completion_tokens":300' in events[-2]
        assert proc.wait(60) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_openai_sdk_parses_logprobs_several_prompts_n_and_the_fields_it_sends(server):
    """What the SDK sends and how it parses the answer: typed logprobs objects, several choices."""
    base, _ = server
    c = client(base)
    model = c.models.list().data[0].id
    comp = c.completions.create(model=model, prompt=["one, two,", "Hello"], max_tokens=5, n=2, logprobs=2,
                                echo=True, user="u", extra_body={"ignore_eos": True})
    assert [ch.index for ch in comp.choices] == [0, 1, 2, 3]
    assert comp.choices[0].text == comp.choices[1].text  # greedy n: copies
    lp = comp.choices[0].logprobs
    assert lp.token_logprobs[0] is None and len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset)
    chat = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                     logprobs=True, top_logprobs=2, store=False, metadata={"k": "v"},
                                     service_tier="auto", response_format={"type": "text"},
                                     extra_body={"ignore_eos": True})
    content = chat.choices[0].logprobs.content
    assert len(content) == 6 and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    stream = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                       stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True, "stream_options": {
                                           "include_usage": True, "continuous_usage_stats": True}})
    chunks = list(stream)
    assert all(ch.usage is not None for ch in chunks) and chunks[-1].usage.completion_tokens == 6
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                  tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert info.value.body["param"] == "tools"

"""The load generator against tests/scripted_server.py: timings within 5% of the truth, every kind
of failure counted, usage handling, endpoints and line endings."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from scripted_server import Script, ServerThread
from trtlade.bench.client import _StreamState
from trtlade.bench.datasets import Prompt, load_dataset
from trtlade.bench.plan import BenchPlan, Target, make_series, parse_endpoint, parse_modes
from trtlade.bench.records import RequestRecord
from trtlade.bench.runner import BenchAborted, run_plan_sync

TESTS = Path(__file__).resolve().parent


def plan_for(url: str, *, modes: str = "default", levels: tuple[int, ...] = (1,), prompts: list[Prompt] | None = None,
             n: int = 3, max_tokens: int = 8, endpoint: str = "chat", warmups: int = 0,
             timeout: float = 30.0) -> BenchPlan:
    ps = prompts if prompts is not None else load_dataset("short").sample(n, 0)
    target = Target("a", url, model="scripted-model")
    return BenchPlan(make_series([target], parse_modes([modes])), list(levels), parse_endpoint(endpoint), ps,
                     ps[:warmups], max_tokens, 0.0, False, timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def timed_server() -> Iterator[tuple[str, Script]]:
    """The scripted server in its own process (no shared GIL with the load generator).

    TTFT as the client sees it includes the HTTP round trip and the time both processes wait for a
    core: 2-8 ms on an idle 2-core machine, a mean of 13 ms over two requests at concurrency 2 with
    two busy processes beside them (one CI run failed at 250 ms). The scripted TTFT (500 ms) keeps
    that inside 5% (25 ms); a TTFT taken from the wrong origin (the role chunk, the level's start)
    is still far outside. Later chunks are timed from when the first one went out, so a late first
    chunk does not shorten the decode span (one cold run read it 5.1% short when they were timed from
    the request); 80 ms between chunks keeps the shortest span (3 chunks, 240 ms) within 5% of 12 ms
    of delivery jitter."""
    script = Script(ttft=0.500, chunk_delay=0.080, tokens_per_chunk=3)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(TESTS / "scripted_server.py"), "--port", str(port),
                             "--ttft", str(script.ttft), "--chunk-delay", str(script.chunk_delay),
                             "--tokens-per-chunk", str(script.tokens_per_chunk)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"scripted server did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
        time.sleep(0.05)
    yield url, script
    proc.terminate()
    proc.wait(10)


def within(measured: float | None, truth: float, rel: float = 0.05) -> bool:
    return measured is not None and abs(measured - truth) <= rel * truth


def test_timings_within_5_percent_of_the_truth(timed_server: tuple[str, Script]) -> None:
    url, script = timed_server
    outcome = run_plan_sync(plan_for(url, modes="ar,lookahead", levels=(1, 2), n=2, max_tokens=10, warmups=1))
    assert len(outcome.summaries) == 4
    for s in outcome.summaries:
        truth = script.truth(10, k=1 if s.series == "ar" else script.tokens_per_chunk)
        assert (s.completed, s.failed) == (2, 0)
        for stat in ("mean", "median"):
            ttft = getattr(s, f"{stat}_ttft_ms")
            assert within(ttft, truth["ttft"] * 1e3), (s.series, s.concurrency, stat, ttft)
            tpot = getattr(s, f"{stat}_tpot_ms")
            assert within(tpot, truth["tpot"] * 1e3), (s.series, s.concurrency, stat, tpot)
            dec = getattr(s, f"{stat}_decode_throughput")
            assert within(dec, truth["decode_throughput"]), (s.series, s.concurrency, stat, dec)
        assert s.aggregate_decode_throughput == pytest.approx(s.mean_decode_throughput * s.concurrency)
        assert s.mean_chunks_per_request == truth["chunks"]
        assert s.mean_tokens_per_chunk == pytest.approx(10 / truth["chunks"])
        assert s.total_output_tokens == 20 and s.total_input_tokens == 2 * script.prompt_tokens
    ar = [s for s in outcome.summaries if s.series == "ar"]
    assert all(s.lookahead_specs == ["1,1,0"] for s in ar)


def test_closed_loop_keeps_exactly_c_requests_in_flight(timed_server: tuple[str, Script]) -> None:
    url, _ = timed_server
    outcome = run_plan_sync(plan_for(url, levels=(2,), n=4, max_tokens=4))
    recs = sorted(outcome.records, key=lambda r: r.start)
    assert [r.index for r in recs] == [0, 1, 2, 3]

    def in_flight(t: float) -> int:
        return sum(r.start <= t < r.start + r.end for r in recs)

    # just after each send, at most 2 requests are in flight; the first two start together
    assert all(in_flight(r.start + 1e-6) <= 2 for r in recs)
    assert recs[1].start - recs[0].start < 0.05
    # and each later one starts as a slot frees, not in a wave: the k-th send follows the (k-1)-th completion
    ends = sorted(r.start + r.end for r in recs)
    for k in (2, 3):
        assert ends[k - 2] - 1e-3 <= recs[k].start <= ends[k - 2] + 0.1, (k, recs[k].start, ends)


@pytest.fixture(scope="module")
def thread_server() -> Iterator[tuple[str, Script]]:
    script = Script(ttft=0.005, chunk_delay=0.002, tokens_per_chunk=2)
    with ServerThread(script) as srv:
        yield srv.url, script


def test_failures_are_counted_and_shown(thread_server: tuple[str, Script]) -> None:
    url, _ = thread_server
    texts = ["fine", "FAIL500 please", "fine", "FAILSTREAM please", "fine"]
    prompts = [Prompt(i, text=t) for i, t in enumerate(texts)]
    outcome = run_plan_sync(plan_for(url, levels=(2,), prompts=prompts))
    [s] = outcome.summaries
    assert (s.completed, s.failed) == (3, 2)
    assert s.failures_by_kind == {"http": 1, "stream_error": 1}
    by_index = {r.index: r for r in outcome.records}
    assert by_index[1].status == 500 and by_index[1].error == "HTTP 500: scripted engine failure"
    assert by_index[3].status == 200 and by_index[3].error_kind == "stream_error"
    assert "scripted failure mid-stream" in (by_index[3].error or "")
    assert len(outcome.records) == 5  # never dropped


def test_lookahead_field_sent_per_mode(thread_server: tuple[str, Script]) -> None:
    url, script = thread_server
    script.requests.clear()
    run_plan_sync(plan_for(url, modes="ar,lookahead,4-2-4", n=1))
    assert [r.get("lookahead", "absent") for r in script.requests] == [
        {"w": 1, "n": 1, "g": 0}, "absent", {"w": 4, "n": 2, "g": 4}]
    body = script.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8 and body["temperature"] == 0.0 and body["model"] == "scripted-model"


def test_completions_endpoint_and_no_usage() -> None:
    script = Script(ttft=0.005, chunk_delay=0.002, tokens_per_chunk=1, send_usage=False)
    with ServerThread(script) as srv:
        outcome = run_plan_sync(plan_for(srv.url, endpoint="completions", n=2, max_tokens=5))
    [s] = outcome.summaries
    assert s.completed == 2 and s.tokens_source == "chunks" and s.total_input_tokens is None
    assert all(r.completion_tokens is None and r.output_tokens == 5 for r in outcome.records)
    assert "prompt" in script.requests[0] and "messages" not in script.requests[0]


def test_crlf_streams_and_no_role_chunk() -> None:
    script = Script(ttft=0.005, chunk_delay=0.002, tokens_per_chunk=2, line_ending="\r\n", role_chunk=False)
    with ServerThread(script) as srv:
        outcome = run_plan_sync(plan_for(srv.url, n=2, max_tokens=6))
    assert outcome.summaries[0].completed == 2
    assert all(r.num_chunks == 3 and r.completion_tokens == 6 and r.done for r in outcome.records)


def test_role_chunk_is_not_the_first_token(thread_server: tuple[str, Script]) -> None:
    url, _ = thread_server
    outcome = run_plan_sync(plan_for(url, n=1))
    [r] = outcome.records
    assert r.first_event_time is not None and r.ttft is not None and r.first_event_time < r.ttft


def test_timeout_is_a_failure(thread_server: tuple[str, Script]) -> None:
    url, _ = thread_server
    outcome = run_plan_sync(plan_for(url, prompts=[Prompt(0, text="HANG"), Prompt(1, text="fine")], timeout=0.3))
    [s] = outcome.summaries
    assert (s.completed, s.failed, s.failures_by_kind) == (1, 1, {"timeout": 1})
    assert outcome.records[0].end < 5


def test_connection_refused_is_a_failure() -> None:
    outcome = run_plan_sync(plan_for(f"http://127.0.0.1:{free_port()}", n=2))
    [s] = outcome.summaries
    assert (s.completed, s.failed, s.failures_by_kind) == (0, 2, {"connection": 2})
    assert "cannot connect" in (outcome.records[0].error or "")


def test_all_warmups_failing_aborts(thread_server: tuple[str, Script]) -> None:
    url, _ = thread_server
    prompts = [Prompt(0, text="FAIL500")]
    with pytest.raises(BenchAborted, match="HTTP 500"):
        run_plan_sync(plan_for(url, prompts=prompts, warmups=1))


def test_a_body_held_open_after_done_costs_neither_the_worker_nor_the_levels_time() -> None:
    """A server that keeps the stream open 3 s after "data: [DONE]": the answer is complete at [DONE]; the worker
    moves on and the level's window ends there."""
    import asyncio

    from trtlade.bench.client import stream_request
    from trtlade.bench.metrics import summarize_level

    async def body():
        for token in ("a", "b", "c"):
            yield f'data: {{"choices":[{{"index":0,"text":"{token}","finish_reason":null}}]}}\n\n'.encode()
        yield b'data: {"choices":[{"index":0,"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":1,' \
              b'"completion_tokens":3,"total_tokens":4}}\n\n'
        yield b"data: [DONE]\n\n"
        await asyncio.sleep(3.0)

    async def main() -> tuple[RequestRecord, float]:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body(),
                                                                        headers={"content-type": "text/event-stream"}))
        async with httpx.AsyncClient(transport=transport) as client:
            rec = RequestRecord(series="ar", concurrency=1, index=0, prompt_index=0)
            t0 = time.perf_counter()
            await stream_request(client, "http://h/v1/completions", {}, {}, rec, kind="completions", timeout=30)
            return rec, time.perf_counter() - t0

    rec, took = asyncio.run(main())
    assert rec.ok and rec.done and rec.completion_tokens == 3 and took < 1.0
    summary = summarize_level([rec], series="ar", concurrency=1, num_prompts=1)
    assert summary.duration_s == pytest.approx(rec.last_event_time) and summary.duration_s < 0.5


@pytest.mark.parametrize("sent, tail, in_flight", [
    # (send, seconds to its end) per request, concurrency 2: the tail runs from the last send to the last end
    ([(0.0, 2.0), (0.0, 1.0), (1.0, 2.0), (2.0, 1.5)], 1.5, 6.5 / 3.5),  # queued: the fourth sent as the first ends
    ([(0.0, 1.0), (0.0, 1.0), (1.0, 1.0), (1.0, 1.0)], 1.0, 2.0),        # two waves ending together: 2 always in flight
    ([(0.0, 3.0), (0.0, 1.0)], 3.0, 4.0 / 3.0),                           # one wave: all of it is tail
    ([(0.0, 1.0), (0.0, 1.0), (1.0, 0.5), (1.0, 3.0)], 3.0, 5.5 / 4.0),   # one long last request: the level's tail
])
def test_a_levels_tail_and_requests_in_flight_come_from_its_sends_and_ends(sent, tail, in_flight) -> None:
    """The load generator's view of a level's drain: from its last request sent to its last answer, and the
    requests in flight on average; a failed request counts until its failure, a completed one until [DONE]."""
    from trtlade.bench.metrics import summarize_level

    recs = [RequestRecord(series="ar", concurrency=2, index=i, prompt_index=i, start=100.0 + s, end=e, status=200,
                          done=True, last_event_time=e, completion_tokens=3, chunk_times=[e / 2, e])
            for i, (s, e) in enumerate(sent)]
    summary = summarize_level(recs, series="ar", concurrency=2, num_prompts=len(recs))
    assert summary.tail_s == pytest.approx(tail)
    assert summary.mean_in_flight == pytest.approx(in_flight)
    # the last request fails 0.5 s after its [DONE] would have come: counted to its failure, not to [DONE]
    recs[-1].error, recs[-1].end = "HTTP 500", sent[-1][1] + 0.5
    failed = summarize_level(recs, series="ar", concurrency=2, num_prompts=len(recs))
    ends = [s + e for s, e in sent[:-1]] + [sum(sent[-1]) + 0.5]
    assert failed.failed == 1 and failed.tail_s == pytest.approx(max(ends) - max(s for s, _ in sent))
    assert summarize_level([], series="ar", concurrency=2, num_prompts=0).tail_s is None


def test_stream_state_protocol_errors() -> None:
    def feed(events: list[str]) -> RequestRecord:
        r = RequestRecord(series="x", concurrency=1, index=0, prompt_index=0)
        st = _StreamState(r, "chat", 0.0)
        for i, e in enumerate(events):
            st.event(e, 0.1 * (i + 1))
        st.finish(False)
        return r

    content = '{"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}'
    truncated = feed([content])
    assert truncated.error_kind == "protocol" and "before [DONE]" in (truncated.error or "")
    assert feed(["not json"]).error_kind == "protocol"
    ok = feed([content, '{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}', "[DONE]"])
    assert ok.ok and ok.completion_tokens == 1 and ok.chunk_times == [pytest.approx(0.1)]
    vllm_err = feed(['{"object": "error", "message": "bad", "code": 400}', "[DONE]"])
    assert vllm_err.error_kind == "stream_error" and "bad" in (vllm_err.error or "")
    reasoning = feed(['{"choices": [{"delta": {"reasoning_content": "hm"}}]}',
                      '{"choices": [{"delta": {"content": "x"}, "finish_reason": "stop"}]}', "[DONE]"])
    assert reasoning.ok and len(reasoning.chunk_times) == 2 and reasoning.finish_reason == "stop"

"""The bench stays honest with a prefix cache: by default every series starts from an empty cache
(``POST /admin/prefix-cache/clear``), so two modes over the same prompts find the same hits; with
``keep`` the second finds the first's prompts; the report says the rule, each server's answer and
the hit rate per series. The clear endpoint itself: what it drops, 404 without a cache, the API key."""

from __future__ import annotations

import asyncio
from functools import lru_cache

import httpx
import pytest

from fake_engine import client_for, fake_app, uvicorn_thread
from models import tiny_engine, tiny_tokenizer
from trtlade.bench.datasets import Prompt
from trtlade.bench.metrics import summarize_level
from trtlade.bench.plan import BenchPlan, Target, make_series, parse_endpoint, parse_modes
from trtlade.bench.records import RequestRecord
from trtlade.bench.report import RunSummary, SeriesInfo, render_markdown
from trtlade.bench.runner import run_plan_sync

SHARED = "You are a helpful assistant. Answer briefly and exactly, with the figures asked for. " * 2


@lru_cache(maxsize=None)
def engine():
    return tiny_engine("llama", (2, 3, 2))


def app_with_cache(api_key=None):
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    eng = engine()
    eng.runner.enable_prefix_cache(16 << 20)
    kwargs = {"settings": _settings(api_key)} if api_key else {}
    return create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4), **kwargs)


def _settings(api_key):
    from trtlade.server.context import ServerSettings

    return ServerSettings(api_key=api_key)


def prompts() -> list[Prompt]:
    questions = ["What is two plus two?", "Name a colour of the sky.", "How many legs has a spider?"]
    return [Prompt(index=i, text=SHARED + q) for i, q in enumerate(questions)]


def bench(url: str, rule: str, warm: int = 0) -> tuple[list, dict]:
    ps = prompts()
    target = Target("a", url, model=str(engine().model_id))
    plan = BenchPlan(make_series([target], parse_modes(["ar,lookahead"])), [1], parse_endpoint("completions"), ps,
                     ps[:warm], 4, 0.0, True, 60.0, prefix_cache=rule)
    outcome = run_plan_sync(plan)
    return outcome.summaries, outcome.prefix_cache


def test_each_series_starts_from_an_empty_cache_by_default_and_keep_shows_the_difference():
    app = app_with_cache()
    try:
        with uvicorn_thread(app) as url:
            cleared, said = bench(url, "clear")
            kept, said_kept = bench(url, "keep")
    finally:
        engine().runner.prefix_cache = None
    rates = {s.series: s.prefix_hit_rate for s in cleared}
    assert rates["ar"] == rates["lookahead"] > 0  # the shared system text, found alike by both
    assert said == {"a": "cleared before each series"} and said_kept == {}
    kept_rates = {s.series: s.prefix_hit_rate for s in kept}
    assert kept_rates["lookahead"] > rates["lookahead"]  # found what ar (and the earlier run) computed
    assert all(s.cached_input_tokens is not None for s in cleared + kept)


def test_a_warm_up_with_a_measured_prompt_leaves_nothing_cached_for_the_measured_requests():
    """The warm-up's prompts are the dataset's first (a bundled set in order): the cache is emptied after it."""
    app = app_with_cache()
    try:
        with uvicorn_thread(app) as url:
            cold, _ = bench(url, "clear")
            warmed, _ = bench(url, "clear", warm=1)
    finally:
        engine().runner.prefix_cache = None
    assert {s.series: s.prefix_hit_rate for s in warmed} == {s.series: s.prefix_hit_rate for s in cold}


def test_the_clear_endpoint_drops_every_block_and_needs_the_key():
    app = app_with_cache(api_key="k")
    body = {"model": str(engine().model_id), "prompt": SHARED + "Hello?", "max_tokens": 2}

    async def go():
        async with client_for(app) as c:
            auth = {"Authorization": "Bearer k"}
            assert (await c.post("/v1/completions", json=body, headers=auth)).status_code == 200
            held = engine().runner.prefix_cache.stats()["blocks"]
            refused = await c.post("/admin/prefix-cache/clear")
            ok = await c.post("/admin/prefix-cache/clear", headers=auth)
            return held, refused, ok

    try:
        held, refused, ok = asyncio.run(go())
        left = engine().runner.prefix_cache.stats()["blocks"]
    finally:
        engine().runner.prefix_cache = None
    assert refused.status_code == 401
    assert ok.status_code == 200 and ok.json()["cleared"]["blocks"] == held > 0 and left == 0


def test_a_server_without_a_prefix_cache_answers_404_and_the_bench_says_so():
    app, _ = fake_app()

    async def go():
        async with client_for(app) as c:
            return await c.post("/admin/prefix-cache/clear")

    reply = asyncio.run(go())
    assert reply.status_code == 404 and "prefix_cache_mb" in reply.json()["error"]["message"]
    with uvicorn_thread(app) as url:
        from trtlade.bench.runner import clear_prefix_cache

        async def ask():
            async with httpx.AsyncClient() as client:
                return await clear_prefix_cache(client, url, {}, 5.0)

        assert "HTTP 404" in asyncio.run(ask())


def record(prompt_tokens, cached) -> RequestRecord:
    rec = RequestRecord(series="ar", concurrency=1, index=0, prompt_index=0)
    rec.status, rec.done, rec.chunk_times, rec.end = 200, True, [0.1, 0.2], 0.3
    rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = prompt_tokens, 2, cached
    return rec


@pytest.mark.parametrize("records, cached, rate", [
    ([record(100, 32), record(100, 0)], 32, 0.16),
    ([record(100, None)], None, None),          # the server did not say: no rate, not 0
    ([record(50, 48), record(80, None)], 48, 0.96),  # only the requests that reported it count
])
def test_the_hit_rate_counts_the_prompt_tokens_of_the_requests_that_reported_it(records, cached, rate):
    summary = summarize_level(records, series="ar", concurrency=1, num_prompts=len(records))
    assert (summary.cached_input_tokens, summary.prefix_hit_rate) == (cached, rate)


def test_the_report_says_the_rule_the_servers_answer_and_the_hit_rates():
    summary = summarize_level([record(100, 32)], series="ar", concurrency=1, num_prompts=1)
    run = RunSummary(run_id="r", created="now", series=[SeriesInfo(label="ar", server="a", base_url="u", model="m",
                                                                   mode="ar")],
                     levels=[1], settings={"prefix_cache": "clear"},
                     metadata={"prefix_cache": {"a": "cleared before each series"}}, summaries=[summary])
    text = render_markdown(run)
    assert "## Prefix cache" in text and "a: cleared before each series" in text and "| ar (%) | 32.0 |" in text


def test_the_report_names_the_series_whose_server_never_said_what_it_reused():
    said = summarize_level([record(100, 32)], series="a/ar", concurrency=1, num_prompts=1)
    silent = summarize_level([record(100, None)], series="b/ar", concurrency=1, num_prompts=1)
    infos = [SeriesInfo(label=label, server=label[0], base_url="u", model="m", mode="ar") for label in ("a/ar", "b/ar")]
    run = RunSummary(run_id="r", created="now", series=infos, levels=[1], settings={"prefix_cache": "keep"},
                     summaries=[said, silent])
    text = render_markdown(run)
    assert "| a/ar (%) | 32.0 |" in text and "| b/ar (%) | — |" in text
    assert "—: b/ar reported no cached tokens" in text and "a/ar reported" not in text


def test_a_bad_rule_is_refused_naming_the_option():
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    result = CliRunner().invoke(app, ["bench", "--prefix-cache", "sometimes", "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code != 0 and "--prefix-cache" in result.output and "Traceback" not in result.output


def test_the_tiny_tokenizer_shares_the_system_text_across_prompts():
    tok = tiny_tokenizer()
    a, b = (tok.encode(p.text) for p in prompts()[:2])
    assert a[:32] == b[:32]  # two whole blocks of 16 at least: there is something to reuse


def test_clearing_also_forgets_what_finished_requests_left_in_the_drafters_pools():
    """The bench sends the same prompts at every level and repeat: an SA global pool kept each finished answer, so
    the same prompt again drafted its own earlier copy and accepted nearly every draft (a mode measured on replay).
    The clear before each series empties the pools too; paired: without it, the second run accepts more."""
    app = app_with_cache()
    sa = {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True, "global_pool_size": 64}
    body = {"model": str(engine().model_id), "prompt": SHARED + "Count from one to ten.", "max_tokens": 24,
            "ignore_eos": True, "speculation": sa}

    async def go(clear_between: bool) -> list[int]:
        accepted = []
        async with client_for(app) as c:
            await c.post("/admin/prefix-cache/clear")
            for _ in range(2):
                reply = await c.post("/v1/completions", json=body)
                assert reply.status_code == 200, reply.text
                accepted.append(reply.json()["usage"]["speculation"]["accepted_draft_tokens"])
                if clear_between:
                    cleared = await c.post("/admin/prefix-cache/clear")
                    assert cleared.json()["cleared"]["drafter_pools"] >= 1
        return accepted

    try:
        first, again = asyncio.run(go(clear_between=True))
        _, replayed = asyncio.run(go(clear_between=False))
    finally:
        engine().runner.prefix_cache = None
    assert again == first and replayed > first

"""Exact prefix reuse (trtlade.reference.prefix_cache): the cache's rules as a spec table, then the
promise: a request served after a cached prefix gets the tokens and the logits' bits of a cold engine,
greedy and seeded sampling, fp32 and bf16, for a prefix that ends mid-block and for a whole prompt seen
before; and what the server says of it (usage, /metrics)."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from models import tiny_engine, tiny_model, tiny_tokenizer
from trtlade.contract.protocol import GenerationRequest
from trtlade.reference.prefix_cache import PrefixCache

BLOCK = 16


# ------------------------------------------------------------------------------------ the cache alone
@pytest.mark.parametrize("stored, prompt, expected", [
    ([], [1, 2, 3, 4, 5], 0),                                  # cold
    ([[1, 2, 3, 4, 5]], [1, 2, 3, 4, 9], 4),                   # two whole blocks shared
    ([[1, 2, 3, 4, 5]], [1, 2, 3, 9, 9], 3),                   # diverges inside block 2: block 1 and 3 of it
    ([[1, 2, 3, 4, 5]], [1, 2, 3, 4], 3),                      # the whole prompt cached: one token left to run
    ([[1, 2, 3, 4, 5]], [1, 2, 3, 4, 5], 4),                   # the same prompt again: all but its last token
    ([[1, 2, 3, 4, 5]], [1, 2, 3, 4, 5, 6], 5),                # its next turn: the partial tail [5] too
    ([[1, 2, 3, 4, 5]], [9, 1, 2, 3, 4], 0),                   # same tokens at other positions: nothing
    ([[1, 2, 3, 4, 5], [7, 7, 3, 4]], [7, 7, 3, 4, 1], 4),     # block [3, 4] after [7, 7] is its own
    ([[1, 2]], [1, 2, 5], 2),
    ([[1]], [1, 5], 1),                                        # a partial block is kept
    ([[1]], [2, 5], 0),
    ([[1, 2, 3], [1, 2, 3, 4, 5]], [1, 2, 3, 4, 7], 4),        # the longest of the children that match
])
def test_a_prompt_matches_blocks_of_the_same_tokens_from_position_0(stored, prompt, expected):
    cache = PrefixCache(block_tokens=2, max_bytes=1 << 20, bytes_per_token=1)
    for p in stored:
        cache.store(p, lambda lo, hi, p=p: tuple(p[lo:hi]))
    assert cache.match(prompt) == expected
    pieces = cache.blocks_for(prompt, expected)
    assert [t for kv, used in pieces for t in kv[:used]] == prompt[:expected]
    assert all(used == 2 for _, used in pieces[:-1])  # whole blocks but the last


def test_a_partial_block_already_held_by_a_longer_one_is_not_kept_twice():
    cache = PrefixCache(block_tokens=4, max_bytes=1 << 20, bytes_per_token=1)
    assert cache.store([1, 2, 3, 4, 5, 6, 7], lambda lo, hi: (lo, hi)) == 2   # [1..4] and the tail [5, 6, 7]
    assert cache.store([1, 2, 3, 4, 5, 6], lambda lo, hi: (lo, hi)) == 0      # [5, 6] starts the tail held
    assert cache.store([1, 2, 3, 4, 5, 6, 7, 8], lambda lo, hi: (lo, hi)) == 1  # a whole block [5..8]
    assert cache.stats()["cached_tokens"] == 4 + 3 + 4 and cache.stats()["blocks"] == 3


def test_the_least_recently_used_leaf_goes_first_and_the_bytes_stay_within_the_budget():
    cache = PrefixCache(block_tokens=2, max_bytes=6, bytes_per_token=1)  # room for 3 blocks
    cache.store([1, 2, 3, 4], lambda lo, hi: lo)        # a: [1,2] -> [3,4]
    cache.store([5, 6], lambda lo, hi: lo)              # b
    cache.blocks_for([1, 2, 3, 4, 0], cache.match([1, 2, 3, 4, 0]))  # a used again: b is the oldest
    cache.store([7, 8], lambda lo, hi: lo)              # evicts b, not a's parent [1,2] (it has a child)
    assert cache.match([5, 6, 0]) == 0 and cache.match([1, 2, 3, 4, 0]) == 4 and cache.match([7, 8, 0]) == 2
    assert cache.stats()["bytes"] <= 6 and cache.stats()["evictions"] == 1
    cache.store([9, 9, 9, 9, 9, 9], lambda lo, hi: lo)  # a chain longer than the budget: oldest leaves go
    assert cache.stats()["bytes"] <= 6


def test_a_budget_below_one_block_keeps_nothing():
    cache = PrefixCache(block_tokens=4, max_bytes=3, bytes_per_token=1)
    assert cache.store([1, 2, 3, 4, 5], lambda lo, hi: lo) == 0 and cache.match([1, 2, 3, 4, 5]) == 0


def test_the_hit_rate_counts_looked_up_prompt_tokens():
    cache = PrefixCache(block_tokens=2, max_bytes=100, bytes_per_token=1)
    cache.blocks_for([1, 2, 3], cache.match([1, 2, 3]))
    cache.store([1, 2, 3], lambda lo, hi: lo)
    cache.blocks_for([1, 2, 4], cache.match([1, 2, 4]))
    s = cache.stats()
    assert (s["lookups"], s["hits"], s["hit_tokens"], s["prompt_tokens"], s["token_hit_rate"]) == (2, 1, 2, 6, 0.3333)


# ------------------------------------------------------------------------------------ exact on the engine
@lru_cache(maxsize=None)
def engine(dtype: torch.dtype = torch.float32, arch: str = "llama"):
    tok = tiny_tokenizer()
    return tiny_engine(arch, (7, 5, 7), model=tiny_model(arch, len(tok), dtype=dtype))


@lru_cache(maxsize=None)
def texts() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two prompts sharing 40 tokens (the shared part ends inside the third block of 16)."""
    tok = tiny_tokenizer()
    shared = tok.encode("You are a helpful assistant. Answer briefly and exactly. " * 3)[:40]
    a = shared + tok.encode("What is two plus two?")
    b = shared + tok.encode("Name a colour of the sky at noon.")
    assert len(shared) == 40 and a[:40] == b[:40] and a[40] != b[40]
    return tuple(a), tuple(b)


def cold_logits(eng, prompt) -> torch.Tensor:
    runner = eng.runner
    runner.prefix_cache = None
    slot = runner.allocate(len(prompt) + 8)
    try:
        return runner.prefill(slot, list(prompt))
    finally:
        runner.free(slot)


def warm_logits(eng, seen, prompt) -> tuple[torch.Tensor, int]:
    runner = eng.runner
    runner.enable_prefix_cache(64 << 20, block_tokens=BLOCK)
    try:
        slot = runner.allocate(len(seen) + 8)
        runner.prefill(slot, list(seen))
        runner.remember(slot, list(seen))
        runner.free(slot)
        slot = runner.allocate(len(prompt) + 8)
        hit = runner.reuse(slot, list(prompt))
        logits = runner.prefill(slot, list(prompt), start=hit)
        runner.free(slot)
        return logits, hit
    finally:
        runner.prefix_cache = None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", ["mid-block", "whole prompt"])
def test_a_cached_prefix_gives_the_logits_bits_of_a_cold_prefill(dtype, case):
    a, b = texts()
    eng = engine(dtype)
    seen, prompt = (a, b) if case == "mid-block" else (b, b)
    warm, hit = warm_logits(eng, seen, prompt)
    assert hit == (40 if case == "mid-block" else len(b) - 1)  # 2 blocks and 8 tokens of the third; all but 1
    assert torch.equal(warm, cold_logits(eng, prompt))


def serve(eng, requests, cache_mb: int) -> list[tuple[list[int], int]]:
    """Each request in turn through a batch (the server's path): its tokens and cached prompt tokens."""
    eng.runner.prefix_cache = None
    if cache_mb:
        eng.runner.enable_prefix_cache(cache_mb << 20, block_tokens=BLOCK)
    try:
        return [run_one(eng, req) for req in requests]
    finally:
        eng.runner.prefix_cache = None


def run_one(eng, req) -> tuple[list[int], int]:
    """One request through a batch of its own: its tokens and cached prompt tokens."""
    batch = eng.new_batch(max_batch_size=4)
    sid = batch.add(req)
    tokens, cached = [], 0
    while len(batch):
        for got, chunk in batch.step():
            if got == sid:
                tokens.extend(chunk.tokens)
                cached = chunk.stats.cached_tokens if chunk.stats is not None else cached
    return tokens, cached


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_p": 0.95, "seed": 11}], ids=["greedy", "seeded"])
@pytest.mark.parametrize("lookahead", [None, (1, 1, 0)], ids=["server-spec", "ar"])
def test_a_request_after_a_cached_prefix_gets_the_tokens_of_a_cold_server(dtype, sampling, lookahead):
    a, b = texts()
    eng = engine(dtype)
    reqs = [GenerationRequest(prompt_ids=p, max_tokens=12, ignore_eos=True, lookahead=lookahead, **sampling)
            for p in (a, b, b)]
    cold = serve(eng, reqs, cache_mb=0)
    warm = serve(eng, reqs, cache_mb=64)
    assert [t for t, _ in warm] == [t for t, _ in cold]
    assert [c for _, c in cold] == [None, None, None]  # no cache: nothing said
    assert [c for _, c in warm] == [0, 40, len(b) - 1]  # 40 shared with a; b again: all but its last token


def test_requests_admitted_together_reuse_and_stay_exact():
    """Two requests prefilled in one forward (prefill_many), each after its own cached prefix."""
    a, b = texts()
    eng = engine()
    reqs = [GenerationRequest(prompt_ids=p, max_tokens=10, ignore_eos=True) for p in (a, b)]
    expected = [t for t, _ in serve(eng, reqs, cache_mb=0)]
    eng.runner.enable_prefix_cache(64 << 20, block_tokens=BLOCK)
    try:
        serve_first = eng.new_batch(max_batch_size=4)
        serve_first.add(GenerationRequest(prompt_ids=a, max_tokens=1, ignore_eos=True))
        while len(serve_first):
            serve_first.step()
        batch = eng.new_batch(max_batch_size=4)
        ids = [batch.add(r) for r in reqs]
        got = {i: [] for i in ids}
        cached = {}
        while len(batch):
            for sid, chunk in batch.step():
                got[sid].extend(chunk.tokens)
                if chunk.stats is not None:
                    cached[sid] = chunk.stats.cached_tokens
    finally:
        eng.runner.prefix_cache = None
    assert [got[i] for i in ids] == expected
    assert [cached[i] for i in ids] == [len(a) - 1, 40]


def test_a_second_look_before_the_prefill_counts_no_second_lookup():
    cache = PrefixCache(block_tokens=2, max_bytes=100, bytes_per_token=1)
    cache.blocks_for([1, 2, 3], cache.match([1, 2, 3]))           # admitted: nothing cached yet
    cache.store([1, 2, 9], lambda lo, hi: lo)                     # another prompt of the burst computed it
    cache.blocks_for([1, 2, 3], cache.match([1, 2, 3]), counted=0)  # looked at again before its prefill
    s = cache.stats()
    assert (s["lookups"], s["hits"], s["hit_tokens"], s["prompt_tokens"]) == (1, 1, 2, 3)


@lru_cache(maxsize=None)
def burst() -> tuple[tuple[int, ...], ...]:
    """Three prompts sharing texts()' 40 tokens, and a fourth sharing nothing (a request already decoding)."""
    tok = tiny_tokenizer()
    a, b = texts()
    c = a[:40] + tuple(tok.encode("Which is larger, a cat or a mouse?"))
    return a, b, c, tuple(tok.encode("Count from one to ten, slowly, in words please."))


def run_burst(eng, cache_mb: int, **limits) -> tuple[list[list[int]], list]:
    """The first three burst() prompts admitted in one step (after the fourth when ``limits`` chunk the
    prefill: it decodes beside them): their tokens and cached prompt tokens."""
    *shared, other = burst()
    eng.runner.prefix_cache = None
    if cache_mb:
        eng.runner.enable_prefix_cache(cache_mb << 20, block_tokens=BLOCK)
    try:
        batch = eng.new_batch(max_batch_size=4, **limits)
        if limits:
            batch.add(GenerationRequest(prompt_ids=other, max_tokens=40, ignore_eos=True))
            batch.step()
        ids = [batch.add(GenerationRequest(prompt_ids=p, max_tokens=8, ignore_eos=True)) for p in shared]
        got, cached = {i: [] for i in ids}, {}
        while len(batch):
            for sid, chunk in batch.step():
                if sid in got:
                    got[sid].extend(chunk.tokens)
                    if chunk.stats is not None:
                        cached[sid] = chunk.stats.cached_tokens
        return [got[i] for i in ids], [cached.get(i) for i in ids]
    finally:
        eng.runner.prefix_cache = None


def common(x, y) -> int:
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))


@pytest.mark.parametrize("limits", [{}, {"prefill_chunk": 16}], ids=["whole", "chunked"])
def test_prompts_arriving_together_compute_their_shared_prefix_once(limits):
    """Three prompts sharing 40 tokens or more arrive together to an empty cache. Whole prefills: the
    shortest group (a and b, 64 rows or more) computes it, then c reuses what it shares with them. Chunks
    of 16, oldest first: a ends in a step whose last rows start b, so b computes its own; c, started after
    a is in the cache, reuses. Every token is the cold server's."""
    a, b, c, _ = burst()
    eng = engine()
    cold, _ = run_burst(eng, 0, **limits)
    warm, cached = run_burst(eng, 64, **limits)
    assert warm == cold
    assert cached == [0, 0, max(common(c, a), common(c, b))] and cached[2] >= 40


# ------------------------------------------------------------------------------------ what the server says
def test_the_server_reports_cached_tokens_in_usage_and_metrics():
    import asyncio

    from fake_engine import client_for, metric_value
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    a, b = texts()
    eng = engine()
    eng.runner.enable_prefix_cache(64 << 20, block_tokens=BLOCK)
    app = create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4))

    async def go():
        async with client_for(app) as c:
            bodies = [{"model": "tiny-llama", "prompt": list(p), "max_tokens": 4, "ignore_eos": True} for p in (a, b)]
            replies = [await c.post("/v1/completions", json=body) for body in bodies]
            return replies, await c.get("/metrics")

    try:
        (first, second), metrics = asyncio.run(go())
        held = eng.runner.prefix_cache.stats()["bytes"]
    finally:
        eng.runner.prefix_cache = None
    assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)
    assert first.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}  # a cache, nothing in it yet
    assert second.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 40}
    assert metric_value(metrics.text, "trtlade_prompt_cached_tokens_total") == 40.0
    assert held > 0 and metric_value(metrics.text, "trtlade_prefix_cache_bytes") == held


def test_serve_takes_the_prefix_cache_size_from_the_config_and_the_flag(tmp_path):
    from trtlade.config.schema import ServeSection
    from trtlade.server.plan import ServeFlags, make_plan

    assert ServeSection().prefix_cache_mb == 256  # on: the bench clears it between series
    config = tmp_path / "c.yml"
    config.write_text("lookahead:\n  spec: [2, 4, 2]\nserve:\n  prefix_cache_mb: 128\n")
    assert make_plan(ServeFlags(config=config)).config.serve.prefix_cache_mb == 128
    assert make_plan(ServeFlags(config=config, prefix_cache_mb=0)).config.serve.prefix_cache_mb == 0


def test_a_negative_prefix_cache_size_is_refused_naming_the_flag():
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    result = CliRunner().invoke(app, ["serve", "--prefix-cache-mb", "-1"])
    assert result.exit_code != 0 and "--prefix-cache-mb -1" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_p": 0.95, "seed": 11}], ids=["greedy", "seeded"])
@pytest.mark.parametrize("lookahead", [None, (1, 1, 0)], ids=["server-spec", "ar"])
def test_a_next_turn_reuses_the_previous_answer_and_stays_exact(sampling, lookahead):
    """Turn 2 resends turn 1's prompt and answer: all of it but the answer's last token (never fed) is
    cached, and turn 2's tokens are a cold server's."""
    a, _ = texts()
    eng = engine()

    def turns(cache_mb: int) -> list[tuple[list[int], int]]:
        eng.runner.prefix_cache = None
        if cache_mb:
            eng.runner.enable_prefix_cache(cache_mb << 20, block_tokens=BLOCK)
        out, prompt = [], list(a)
        try:
            for question in (a[:3], a[5:9]):
                tokens, cached = run_one(eng, GenerationRequest(prompt_ids=tuple(prompt), max_tokens=21,
                                                                ignore_eos=True, lookahead=lookahead, **sampling))
                out.append((tokens, cached, len(prompt)))
                prompt = prompt + tokens + list(question)  # the next turn: history, answer, a new question
        finally:
            eng.runner.prefix_cache = None
        return out

    warm, cold = turns(64), turns(0)
    assert [t for t, _, _ in warm] == [t for t, _, _ in cold]
    (first, _, first_len), (_, cached, _) = warm
    assert cached == first_len + len(first) - 1  # the answer's last token was never fed

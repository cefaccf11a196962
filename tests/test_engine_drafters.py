"""NGram and SA requests on the reference engine emit exactly what plain decoding emits: greedy and seeded
sampling, fp32 and bf16, alone and in a batch that mixes NGram, SA, Lookahead and plain requests; they
draft (more than one token per step on repetitive text); limits, gating and pools behave as configured."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from models import tiny_engine, tiny_model, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.drafting.config import DraftConfig
from trtlade.reference.engine import RequestError

ENGINE_SPEC = (2, 4, 2)  # max_draft_len 11: NGram / SA requests may draft up to 11 tokens
MAX_TOKENS = 40

NGRAM = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}
NGRAM_LATEST_PRIVATE = {**NGRAM, "is_use_oldest": False, "is_public_pool": False}
SA = {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}
SA_FIXED = {"decoding_type": "SA", "max_draft_len": 6, "max_matching_ngram_size": 3}
SA_GLOBAL = {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True}
AUTO = {"decoding_type": "AUTO"}
DRAFTERS = {"ngram": NGRAM, "ngram-latest-private": NGRAM_LATEST_PRIVATE, "sa": SA, "sa-k3": SA_FIXED,
            "sa-global": SA_GLOBAL, "auto": AUTO}


@lru_cache(maxsize=None)
def engine(arch: str = "llama", dtype: torch.dtype = torch.float32, ngram: str = "one_model"):
    tok = tiny_tokenizer()
    return tiny_engine(arch, ENGINE_SPEC, model=tiny_model(arch, len(tok), dtype=dtype), ngram_implementation=ngram)


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    tok = tiny_tokenizer()
    texts = ["The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
             "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, n):",
             "one, two, three, four, five, six, seven, eight, nine, ten, one, two, three,",
             "Honey bees live in colonies."]
    return tuple(tuple(tok.encode(t)) for t in texts)


@lru_cache(maxsize=None)
def greedy(arch: str, dtype: torch.dtype, prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(engine(arch, dtype).greedy(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True).tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(DRAFTERS))
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_each_drafter_alone_equals_greedy(arch, name, dtype):
    eng = engine(arch, dtype)
    steps = tokens_ = 0
    for prompt in prompts():
        result = eng.generate(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True, speculation=DRAFTERS[name])
        assert tuple(result.tokens) == greedy(arch, dtype, prompt)
        assert result.stats.drafter == ("NGram" if name in ("auto", "ngram", "ngram-latest-private") else "SA")
        steps, tokens_ = steps + result.stats.steps, tokens_ + result.stats.tokens
    assert tokens_ / steps > 1.2  # they drafted, and drafts were accepted on the repetitive prompts


def test_the_host_pool_ngram_equals_greedy_and_drafts():
    eng = engine(ngram="host_pool")
    accepted = 0
    for prompt in prompts():
        result = eng.generate(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True, speculation=NGRAM)
        assert tuple(result.tokens) == greedy("llama", torch.float32, prompt)
        accepted += result.stats.accepted_drafts
    assert accepted > 0


@pytest.mark.parametrize("name", ["ngram", "sa", "sa-global"])
def test_seeded_sampling_with_a_drafter_equals_plain_sampling(name):
    eng = engine()
    for prompt in prompts():
        for seed in (3, 17):
            plain = eng.generate(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True, lookahead=(1, 1, 0),
                                 temperature=0.3, top_k=8, seed=seed)
            drafted = eng.generate(list(prompt), max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.3, top_k=8,
                                   seed=seed, speculation=DRAFTERS[name])
            assert drafted.tokens == plain.tokens


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_batch_mixing_ngram_sa_lookahead_and_plain_requests(dtype):
    """Every request of a mixed batch (arriving at different steps, one cancelled) gets what it gets alone."""
    eng = engine("llama", dtype)
    batch = eng.new_batch(max_batch_size=6)
    p = prompts()
    spec = DraftConfig.parse
    reqs = [request(p[0], speculation=spec(NGRAM)), request(p[1], speculation=spec(SA)),
            request(p[2], (2, 4, 2)), request(p[3], (1, 1, 0)), request(p[0], speculation=spec(SA_GLOBAL)),
            request(p[2], speculation=spec(NGRAM_LATEST_PRIVATE)),
            request(p[1], speculation=spec(NGRAM), temperature=0.4, seed=5), request(p[3], speculation=spec(SA))]
    chunks = run(batch, {0: reqs[:4], 2: reqs[4:6], 5: reqs[6:]}, cancel_at={7: 9})
    for i, req in enumerate(reqs[:7]):
        alone = eng.generate_request(req)
        assert tokens(chunks[i]) == tuple(alone.tokens), i
    assert len(tokens(chunks[7])) < MAX_TOKENS  # cancelled mid-way


def test_usage_figures_count_decode_steps_and_accepted_drafts():
    result = engine().generate(list(prompts()[0]), max_tokens=MAX_TOKENS, ignore_eos=True, speculation=SA)
    stats = result.stats
    assert stats.decode_steps == stats.steps - 1
    assert stats.accepted_drafts == stats.tokens - stats.steps > 0
    assert stats.draft_tokens >= stats.accepted_drafts
    assert stats.speculation.decoding_type == "SA" and stats.policy == "fixed"


def test_a_request_cannot_ask_for_more_draft_tokens_than_the_engine_allows():
    eng = engine()
    with pytest.raises(RequestError) as err:
        eng.generate([1, 2, 3], max_tokens=4, speculation={**NGRAM, "max_draft_len": 12})
    assert err.value.field == "speculation.max_draft_len" and err.value.limit == 11
    with pytest.raises(RequestError) as err:
        eng.generate([1, 2, 3], max_tokens=4, speculation={**SA, "max_matching_ngram_size": 0})
    assert err.value.field == "speculation.max_matching_ngram_size"
    with pytest.raises(RequestError) as err:
        eng.generate([1, 2, 3], max_tokens=4, lookahead=(2, 2, 1), speculation=NGRAM)
    assert err.value.field == "speculation"


def test_max_concurrency_turns_drafting_off_for_bigger_steps_and_keeps_the_history():
    """A step of more sequences than max_concurrency drafts nothing (upstream's draft_len_schedule gating);
    the history still grows, so drafting resumes from the right suffix once the batch shrinks."""
    eng = engine()
    gated = DraftConfig.parse({**NGRAM, "max_concurrency": 1})
    batch = eng.new_batch(max_batch_size=4)
    p = prompts()
    reqs = [request(p[0], speculation=gated, max_tokens=MAX_TOKENS), request(p[2], (1, 1, 0), max_tokens=8)]
    chunks = run(batch, {0: reqs})
    assert tokens(chunks[0]) == greedy("llama", torch.float32, p[0])
    rows = chunks[0][-1].stats.rows_per_step
    assert max(rows[1:8]) == 1  # with the plain request beside it: golden rows only
    assert max(rows[9:]) > 1    # alone again: it drafts


def test_acceptance_rate_gate_turns_drafting_off_for_good():
    config = {**NGRAM, "acceptance_rate_window_size": 2, "acceptance_rate_threshold": 1.0}
    result = engine().generate(list(prompts()[3]), max_tokens=MAX_TOKENS, ignore_eos=True, speculation=config)
    rows = result.stats.rows_per_step
    drafted = [i for i, r in enumerate(rows) if r > 1]
    assert drafted and max(rows[drafted[-1] + 1:] or [1]) == 1
    assert tuple(result.tokens) == greedy("llama", torch.float32, prompts()[3])


def test_the_acceptance_rate_gate_is_the_engines_not_the_requests():
    """Upstream's gate is one per executor: once it closes, a request that arrives later with the same settings
    drafts nothing from its first step (a per-request gate would let it draft until its own window fills);
    a request without the settings is not gated."""
    gated = {**NGRAM, "acceptance_rate_window_size": 2, "acceptance_rate_threshold": 1.0}
    eng = engine()
    batch = eng.new_batch(max_batch_size=4)
    p = prompts()
    chunks = run(batch, {0: [request(p[0], speculation=DraftConfig.parse(gated), max_tokens=MAX_TOKENS)],
                         30: [request(p[0], speculation=DraftConfig.parse(gated), max_tokens=MAX_TOKENS),
                              request(p[0], speculation=DraftConfig.parse(NGRAM), max_tokens=MAX_TOKENS)]})
    first, late, free = (chunks[i][-1].stats.rows_per_step for i in range(3))
    assert max(first) > 1 and max(first[-5:]) == 1             # it drafted, then the gate closed
    assert max(late) == 1                                      # closed for the whole engine
    assert max(free) > 1                                       # no gate settings: drafts as before
    for i in range(3):
        assert tokens(chunks[i]) == greedy("llama", torch.float32, p[0])


def test_under_an_identity_scope_one_tenants_gate_closes_for_that_tenant_only():
    """No tenant can turn another's drafting off: the gate is per namespace (the engine's own under global)."""
    from trtlade.contract.protocol import CacheScope

    gated = DraftConfig.parse({**NGRAM, "acceptance_rate_window_size": 2, "acceptance_rate_threshold": 1.0})
    alice, bob = CacheScope("identity", "alice"), CacheScope("identity", "bob")
    batch = engine().new_batch(max_batch_size=4)
    p = prompts()
    chunks = run(batch, {0: [request(p[0], speculation=gated, max_tokens=MAX_TOKENS, cache_scope=alice)],
                         30: [request(p[0], speculation=gated, max_tokens=MAX_TOKENS, cache_scope=alice),
                              request(p[0], speculation=gated, max_tokens=MAX_TOKENS, cache_scope=bob)]})
    first, late_alice, bob_rows = (chunks[i][-1].stats.rows_per_step for i in range(3))
    assert max(first) > 1 and max(late_alice) == 1   # alice's gate closed for alice
    assert max(bob_rows) > 1                          # bob drafts: his own gate is still open

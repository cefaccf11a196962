"""What the drafters' pools keep after a request, and for how long: nothing grows with the number of requests
served (gates, host-side pools, spaces no later request can name), and an idle batch holds no finished request's
text. Each bound is paired with the case that keeps what it should (a closed gate, a reachable retained request),
so a pool that simply forgets everything cannot pass."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest

from models import tiny_engine, tiny_model, tiny_tokenizer
from trtlade.contract.protocol import CacheScope, GenerationRequest
from trtlade.drafting.algorithm import MAX_GATES_PER_SPACE, DraftPools
from trtlade.drafting.config import DraftConfig

NGRAM = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}
SA_GLOBAL = {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True}


@lru_cache(maxsize=None)
def engine(ngram: str = "one_model", retained: int = 1 << 18):
    tok = tiny_tokenizer()
    return tiny_engine("llama", (2, 4, 2), model=tiny_model("llama", len(tok)), ngram_implementation=ngram,
                       draft_retained_tokens=retained)


def drive(batch, *requests: GenerationRequest) -> None:
    for r in requests:
        batch.add(r)
    for _ in range(1000):
        if not len(batch):
            return
        batch.step()
    raise AssertionError("the batch did not finish")


def req(prompt, config: dict, scope: CacheScope | None = None, max_tokens: int = 6) -> GenerationRequest:
    return GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens, ignore_eos=True,
                             speculation=DraftConfig.parse(config), cache_scope=scope)


PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7]


@pytest.mark.parametrize("scope", [CacheScope("salt", "alice"), CacheScope("identity", "alice")],
                         ids=["own space each", "one identity"])
def test_gates_go_with_their_namespace_however_many_requests_or_settings(scope: CacheScope) -> None:
    batch = engine().new_batch(max_batch_size=2)
    for i in range(30):  # a new threshold each request: the client chooses the gate's settings
        gated = {**NGRAM, "acceptance_rate_window_size": 4, "acceptance_rate_threshold": i / 1000}
        drive(batch, req(PROMPT, gated, scope, max_tokens=3))
        assert len(batch.pools.gates) <= MAX_GATES_PER_SPACE
    assert batch.pools.spaces == 0 and batch.pools.gates == {}  # nothing closed: nothing kept


def test_a_closed_gate_keeps_its_namespace_drafting_off_and_no_other() -> None:
    """A gate whose acceptance fell below its threshold stays closed after its request ends (upstream: for good),
    in that namespace only."""
    pools = DraftPools(max_batch_size=2)
    config = DraftConfig.parse({**NGRAM, "acceptance_rate_window_size": 1, "acceptance_rate_threshold": 0.5})
    alice, bob = ("identity", "alice"), ("identity", "bob")
    drafter = pools.drafter(config, "a1", PROMPT, namespace=alice, max_sequence_length=100)
    batch = drafter.prepare()
    assert batch.num_rows > 1
    drafter.verify([0] * batch.num_rows)  # nothing accepted
    drafter.commit(1)
    pools.end_step()
    drafter.release()
    assert pools.spaces == 1 and pools.gate(config, alice).disabled
    again = pools.drafter(config, "a2", PROMPT, namespace=alice, max_sequence_length=100)
    other = pools.drafter(config, "b1", PROMPT, namespace=bob, max_sequence_length=100)
    assert again.draft_len() == 0 and other.draft_len() == 4


def test_a_request_whose_scope_shares_nothing_leaves_nothing_and_evicts_nothing() -> None:
    """Salt-less requests under `salt` draft in a space of their own, which no later request can search: their SA
    text is not retained, so it neither stays nor pushes out another namespace's retained text."""
    batch = engine().new_batch(max_batch_size=2)
    alice = CacheScope("salt", "alice", "project-x")
    drive(batch, req(PROMPT, SA_GLOBAL, alice))
    drive(batch, req(PROMPT, SA_GLOBAL, alice, max_tokens=2))
    kept = batch.pools.retained
    assert kept > 0  # alice's finished request is retained, reachable by her next one
    for _ in range(70):  # more than the 64 idle spaces
        drive(batch, req(PROMPT, SA_GLOBAL, CacheScope("salt", "bob"), max_tokens=3))
    assert batch.pools.retained == kept and batch.pools.spaces == 1


def test_an_idle_batch_holds_no_finished_requests_text() -> None:
    """A finished NGram request stays searchable while the next step drafts (as upstream frees it); once the batch
    has nothing left to run, it goes: the next request, however much later, does not draft from it."""
    batch = engine().new_batch(max_batch_size=2)
    scope = CacheScope("identity", "alice")
    drive(batch, req(PROMPT, NGRAM, scope, max_tokens=1))
    assert batch.pools.spaces == 0


def test_host_side_ngram_pools_stay_within_the_retained_budget() -> None:
    """The host-side pool of the 1.0-1.2 releases keeps every pattern it saw (upstream never prunes it); the engine
    counts each pattern against `draft_retained_tokens` with the retained SA requests and drops the least recently
    used pool past it. Under the budget it is kept whole (the paired case)."""
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 200) for _ in range(40)] for _ in range(12)]
    for budget, bounded in ((1 << 18, False), (300, True)):
        batch = engine("host_pool", budget).new_batch(max_batch_size=2)
        sizes = []
        for prompt in prompts:
            drive(batch, req(prompt, {**NGRAM, "max_matching_ngram_size": 3}))
            sizes.append(sum(len(p.pool) for s in batch.pools._spaces.values() for p in s.host.values()))
            assert all(not p.start_index for s in batch.pools._spaces.values() for p in s.host.values())
        if bounded:
            assert max(sizes) <= budget and sizes != sorted(sizes)  # pools were dropped on the way
        else:
            assert sizes == sorted(sizes) and sizes[-1] > 300  # under the budget the pool only grows


def test_a_cancelled_last_request_leaves_no_text_in_an_idle_batch():
    batch = engine().new_batch(max_batch_size=2)
    seq = batch.add(req(PROMPT, NGRAM, CacheScope("identity", "alice"), max_tokens=50))
    batch.step()
    batch.step()
    assert batch.pools.spaces == 1  # running: its history is in its namespace's pool
    batch.cancel(seq)
    assert len(batch) == 0 and batch.pools.spaces == 0


def test_a_gate_a_running_request_reads_or_one_that_closed_is_never_dropped():
    """Nine settings at once in one namespace (the client chooses them): every gate still gathers its samples and
    closes; and a closed gate stays closed whatever settings others send after it."""
    pools = DraftPools(max_batch_size=16)
    space = ("identity", "alice")
    drafters = []
    for i in range(MAX_GATES_PER_SPACE + 1):
        gated = {"acceptance_rate_window_size": 1, "acceptance_rate_threshold": 0.5 + i / 100}
        config = DraftConfig.parse({**NGRAM, **gated})
        drafters.append(pools.drafter(config, f"r{i}", PROMPT, namespace=space, max_sequence_length=100))
    for drafter in drafters:
        batch = drafter.prepare()
        drafter.verify([0] * batch.num_rows)
        drafter.commit(1)
    pools.end_step()
    assert [d.draft_len() for d in drafters] == [0] * len(drafters)
    for i in range(2 * MAX_GATES_PER_SPACE):  # others' settings, used and released
        config = DraftConfig.parse({**NGRAM, "acceptance_rate_window_size": 4, "acceptance_rate_threshold": i / 100})
        pools.drafter(config, f"o{i}", PROMPT, namespace=space, max_sequence_length=100).release()
    assert [d.draft_len() for d in drafters] == [0] * len(drafters)

"""Fair share per identity: one API key's burst is refused (429) while another key's request is still admitted,
and a free batch slot goes to the waiting identity holding the fewest. Without keys (one identity), first come
first served as before."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
import time
from pathlib import Path

import pytest

from test_drafter_scopes import engine
from test_engine_batching import request
from trtlade.contract.protocol import CacheScope
from trtlade.contract.serving import EngineOverloaded
from trtlade.reference.serving_adapter import ReferenceServingEngine, fair_share


def scoped(who, max_tokens=200, **kw):
    return request([5, 6, 7, 8], max_tokens=max_tokens, cache_scope=CacheScope("identity", who), **kw)


@contextlib.contextmanager
def paused(serving):
    """Hold ``serving``'s worker between two steps (a chore that waits), so that nothing it holds moves: on a loaded
    host a tiny model's request could otherwise finish (its length is clipped to the model's 512 positions) between
    two submits, and a place the test counts on as held would be free. Enter it before the submits it covers: they
    stay submitted (``_pending``), counted as taking the free slots first and the others as waiting, and whatever
    ran before keeps its place and its tokens."""
    entered, release = threading.Event(), threading.Event()

    def hold():
        entered.set()
        release.wait(60)

    with serving._cv:
        serving._chores.append((hold, concurrent.futures.Future()))
        serving._cv.notify()
    try:
        assert entered.wait(60), "the worker never reached the pause"
        yield
    finally:
        release.set()


def test_the_flooding_identity_is_refused_before_another_is_admitted():
    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=8, max_batch_size=2, identities=2)
        assert (serving.share.queued, serving.share.running) == (4, 1)
        try:
            with paused(serving):
                handles = [serving.submit(scoped("alice")) for _ in range(5)]  # its share: 4 waiting + 1 running
                with pytest.raises(EngineOverloaded, match="its share of this server"):
                    serving.submit(scoped("alice"))
                bob = serving.submit(scoped("bob", max_tokens=3))  # paired: another identity is still admitted
            out = [c async for c in bob]
            assert sum(len(c.tokens) for c in out) == 3
            for h in handles:
                h.cancel()
        finally:
            await serving.aclose()

    asyncio.run(go())


def test_without_keys_the_queue_is_first_come_first_served_as_before():
    assert fair_share(1, 64, 8) is None

    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=8, max_batch_size=2)
        try:
            handles = [serving.submit(request([5, 6, 7], max_tokens=200)) for _ in range(7)]  # beyond any share
            for h in handles:
                h.cancel()
        finally:
            await serving.aclose()

    asyncio.run(go())


def test_a_free_slot_goes_to_the_waiting_identity_holding_the_fewest():
    batch = engine().new_batch(max_batch_size=2, max_running_per_identity=1)
    ids = [batch.add(scoped("alice", max_tokens=30)) for _ in range(4)] + [batch.add(scoped("bob", max_tokens=30))]
    batch.step()
    held = sorted(s.identity for s in batch._running + batch._prefilling)
    assert held == ["alice", "bob"], held  # bob arrived last, behind four of alice's, and runs at once
    flat = engine().new_batch(max_batch_size=2)  # paired: without a cap or identities, arrival order
    ids = [flat.add(request([5, 6, 7, 8], max_tokens=30)) for _ in range(3)]
    flat.step()
    assert sorted(s.seq_id for s in flat._running + flat._prefilling) == ids[:2]


# ------------------------------------------------------------------------------------ metadata behind the key
def test_metrics_and_version_need_a_key_and_the_live_counters_an_admin_key():
    from fake_engine import client_for
    from test_drafter_scopes import BOB_KEY, server

    app = server("identity")  # two keys, neither marked admin

    async def go():
        async with client_for(app) as c:
            bob = {"Authorization": f"Bearer {BOB_KEY}"}
            await c.post("/v1/completions", headers=bob, json={"prompt": "hello", "max_tokens": 2})
            return ((await c.get("/metrics")).status_code, (await c.get("/metrics", headers=bob)).status_code,
                    (await c.get("/version")).status_code, (await c.get("/version", headers=bob)).json())

    metrics, metrics_key, version, seen = asyncio.run(go())
    assert metrics == 401 and version == 401 and metrics_key == 200  # paired: with a key they answer
    assert seen["live"] is None and seen["engine"] is not None  # no tenant times another's request from them


def test_an_opt_in_opens_metrics_and_the_access_log_names_the_identity_never_the_key_or_the_query(caplog):
    import logging

    from fake_engine import client_for
    from test_drafter_scopes import engine as tiny
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    admin, plain = "admin-key-0123456789abcdef", "plain-key-0123456789abcdef"
    ring = KeyRing.parse(f"ops {admin} admin\nteam {plain}\n", "keys.txt")
    settings = ServerSettings(keys=ring, prefix_cache_scope="identity", metrics_without_key=True)
    app = create_app(lambda: ReferenceServingEngine(tiny(), max_batch_size=2), settings)

    async def go():
        async with client_for(app) as c:
            await c.post("/v1/completions?token=s3cret-query", headers={"Authorization": f"Bearer {plain}"},
                         json={"prompt": "hello", "max_tokens": 2})
            return ((await c.get("/metrics")).status_code,
                    (await c.get("/version", headers={"Authorization": f"Bearer {admin}"})).json()["live"],
                    (await c.get("/version", headers={"Authorization": f"Bearer {plain}"})).json()["live"])

    with caplog.at_level(logging.INFO, logger="trtlade.access"):
        metrics, live_admin, live_plain = asyncio.run(go())
    assert metrics == 200 and live_admin is not None and live_plain is None
    lines = [r.getMessage() for r in caplog.records if r.name == "trtlade.access"]
    line = next(x for x in lines if "/v1/completions" in x)
    assert "identity=team" in line and plain not in " ".join(lines) and "s3cret-query" not in " ".join(lines)


def _metrics_app(min_others: int, keys: str, **settings):
    from test_drafter_scopes import engine as tiny
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    ring = KeyRing.parse(keys, "keys.txt")
    return create_app(lambda: ReferenceServingEngine(tiny(), max_batch_size=2),
                      ServerSettings(keys=ring, prefix_cache_scope="identity", metrics_min_others=min_others,
                                     **settings))


OPS, ALICE, BOB = "ops-key-0123456789abcdef00", "alice-key-0123456789abcdef", "bob-key-0123456789abcdef00"
THREE = f"ops {OPS} admin\nalice {ALICE}\nbob {BOB}\n"


views: list[str] = []  #: each read's X-Trtlade-Metrics header (live or copy), of the last _prompt_tokens


def _prompt_tokens(app, script, metric: str = "trtlade_prompt_tokens_total") -> list[float]:
    """Run ``script`` (("send", key) / ("read", key or None)); the prompt-token counter (or ``metric``) each read
    saw."""
    from fake_engine import client_for, metric_value

    async def go():
        seen = []
        async with client_for(app) as c:
            views.clear()
            for action, key in script:
                auth = {"Authorization": f"Bearer {key}"} if key else {}
                if action in ("send", "refused"):
                    r = await c.post("/v1/completions", headers=auth, json={"prompt": "hello there", "max_tokens": 2})
                    assert r.status_code == (200 if action == "send" else 401), r.text
                else:
                    r = await c.get("/metrics", headers=auth)
                    assert r.status_code == 200, r.text
                    views.append(r.headers["x-trtlade-metrics"])
                    seen.append(metric_value(r.text, metric))
        return seen
    return asyncio.run(go())


def test_a_tenant_reads_no_single_request_of_another_from_metrics_while_an_admin_key_reads_them_live():
    """bob reads /metrics around each of alice's requests: with min_others 3, his copy moves only once three
    of hers ran, and then by their sum; his own requests never renew it. The admin key (paired) sees each one."""
    script = [("read", BOB), ("send", ALICE), ("read", BOB), ("read", OPS), ("send", BOB), ("send", BOB),
              ("read", BOB), ("send", ALICE), ("read", BOB), ("read", OPS), ("send", ALICE), ("read", BOB)]
    bob0, bob1, ops1, bob2, bob3, ops2, bob4 = _prompt_tokens(_metrics_app(3, THREE), script)
    one = ops1  # the admin key's live counter after alice's first request: its prompt tokens
    assert one > 0 and ops2 == 4 * one  # live: every request counts at once (alice 2 + bob 2 by then)
    assert bob0 == bob1 == bob2 == bob3 == 0  # one, then two of alice's (bob's own two do not count)
    assert bob4 == 5 * one  # the third of alice's renews it: the change sums three requests and bob's own
    assert views == ["copy", "copy", "live", "copy", "copy", "live", "copy"]  # the header says which it read


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="prometheus_client reads the process series from "
                    "/proc (Linux)")
def test_the_server_process_cpu_travels_in_a_tenants_copy_and_reads_live_for_an_admin_key():
    """The process series (the server's CPU time) move with every request as the counters do: bob's copy holds the
    value it was taken with while alice's request runs between his reads; the admin key (paired) reads it live."""
    script = [("read", BOB), ("send", ALICE), ("read", BOB), ("read", OPS)]
    bob0, bob1, ops1 = _prompt_tokens(_metrics_app(3, THREE), script, "process_cpu_seconds_total")
    assert bob0 == bob1 > 0 and ops1 >= bob1
    assert views == ["copy", "copy", "live"]


def test_requests_refused_before_they_ran_do_not_renew_a_tenants_copy():
    """Three requests with a wrong key between bob's reads, then one of alice's: were the refused ones counted as
    others, his copy would renew over alice's single request, and show it alone."""
    wrong = "nobody-key-0123456789abcdef"
    script = [("read", BOB), ("refused", wrong), ("refused", wrong), ("refused", wrong), ("send", ALICE),
              ("read", BOB), ("send", ALICE), ("send", ALICE), ("read", BOB)]
    before, after_one, after_three = _prompt_tokens(_metrics_app(3, THREE), script)
    assert before == after_one == 0 and after_three > 0  # renewed over alice's three, not before


def test_an_open_metrics_scraper_reads_the_tenants_view_with_several_keys_and_live_with_one():
    several = _metrics_app(2, THREE, metrics_without_key=True)
    first, second = _prompt_tokens(several, [("send", ALICE), ("read", None), ("send", BOB), ("send", ALICE),
                                             ("send", BOB), ("read", None)])
    assert first == 0 and second > 0  # alice's request alone is not shown; two beside either's two are
    one = _metrics_app(2, f"ops {OPS} admin\n", metrics_without_key=True)
    (live,) = _prompt_tokens(one, [("send", OPS), ("read", None)])
    assert live == second / 4  # one key: the operator opened it to a scraper, which reads it live


def test_with_an_open_scraper_no_key_can_pad_or_difference_its_way_to_one_request_of_another():
    """metrics_without_key with several keys: bob pads with three of his own and reads the open copy after one of
    alice's (his requests are not the scraper's own), or reads his key's copy and the open one, renewed at
    different moments. Both once read alice's request alone; now every reader gets one copy, renewed only over
    min_others requests beside any one identity's."""
    app = _metrics_app(3, THREE, metrics_without_key=True)
    padded = [("read", None), ("send", BOB), ("send", BOB), ("send", BOB), ("send", ALICE), ("read", None),
              ("read", BOB)]
    before, open_after, bob_after = _prompt_tokens(app, padded)
    assert before == open_after == bob_after == 0  # bob's padding renews nothing: one copy, the same for both
    more = [("send", ALICE), ("send", ALICE), ("read", None), ("read", BOB)]
    open_now, bob_now = _prompt_tokens(app, more)
    assert open_now == bob_now > 0  # alice's three beside bob's three: renewed, the same copy for every reader


# ------------------------------------------------------------------------------------------ the identity behind
def _first_chunks(bob):
    """Who got a chunk in the step where bob's short prompt arrives beside alice's two decoding sequences."""
    batch = engine().new_batch(max_batch_size=4, prefill_chunk=16)
    alice = [batch.add(scoped("alice", max_tokens=30)) for _ in range(2)]
    batch.step(), batch.step()
    late = batch.add(bob)
    order = [("bob" if seq == late else "alice", len(chunk.tokens)) for seq, chunk in batch.step()]
    rest = {seq: [] for seq in alice + [late]}
    while len(batch):
        for seq, chunk in batch.step():
            rest[seq].extend(chunk.tokens)
    return order, rest[late]


def test_the_prompt_of_an_identity_behind_is_prefilled_before_the_others_decode_step():
    """alice runs two sequences, bob none: bob's first token leaves before alice's decode pass, not after it
    (its prompt is not a chunk inside that pass). Paired: without keys, the prompt rides in the pass, last.
    The tokens are the same either way (scheduling only)."""
    first, tokens = _first_chunks(scoped("bob", max_tokens=30))
    assert first == [("bob", 1), ("alice", 1), ("alice", 1)]
    first_plain, tokens_plain = _first_chunks(request([5, 6, 7, 8], max_tokens=30))
    assert first_plain == [("alice", 1), ("alice", 1), ("bob", 1)]
    assert tokens == tokens_plain


def test_an_identity_beyond_its_share_is_refused_before_its_body_is_read():
    """alice holds her whole share: her next request gets 429 even with a body that is not JSON (so it was
    neither parsed nor tokenized). Paired: bob, under his share, gets the 400 that body deserves."""
    from fake_engine import client_for
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    ring = KeyRing.parse(f"alice {ALICE}\nbob {BOB}\n", "keys.txt")

    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=2, max_batch_size=1, identities=2)
        app = create_app(lambda: serving, ServerSettings(keys=ring, prefix_cache_scope="identity"))
        async with client_for(app) as c:
            with paused(serving):
                held = [serving.submit(scoped("alice")) for _ in range(serving.share.held)]
                replies = [await c.post("/v1/completions", content=b"{not json", headers={
                    "Authorization": f"Bearer {key}", "Content-Type": "application/json"}) for key in (ALICE, BOB)]
            for h in held:
                h.cancel()
        return replies

    alice, bob = asyncio.run(go())
    assert alice.status_code == 429 and "its share of this server" in alice.json()["error"]["message"]
    assert "Retry-After" in alice.headers
    assert bob.status_code == 400


def test_version_shows_the_kv_buffers_to_an_admin_key_as_they_grow():
    """The slots' K/V buffers grow by doubling and stay (what a soak's resident memory steps with)."""
    from fake_engine import client_for

    app = _metrics_app(4, THREE)

    async def go():
        seen = []
        async with client_for(app) as c:
            views.clear()
            for words in (2, 80):
                r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {ALICE}"},
                                 json={"prompt": " ".join(["hello"] * words), "max_tokens": 2})
                assert r.status_code == 200, r.text
                live = (await c.get("/version", headers={"Authorization": f"Bearer {OPS}"})).json()["live"]
                seen.append(live["kv_cache"])
        return seen

    small, large = asyncio.run(go())
    assert small["bytes"] > 0 and large["capacity"] > small["capacity"] and large["bytes"] > small["bytes"]
    per = [kv["bytes"] / (kv["slots"] * kv["capacity"]) for kv in (small, large)]
    assert per[0] == per[1]  # bytes = slots x tokens x (layers x K/V x heads x head size x element)


# ------------------------------------------------------------------ an engine without a share of its own
class _NoShare:
    """An engine that keeps no per-identity share, as the TensorRT-LLM engines (the reference one inside)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if name == "over_share":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_the_server_keeps_the_share_for_an_engine_that_keeps_none():
    """Two keys sharing max_queue 4 and a batch of 2: each may hold 3 sequences. alice's 4 (in one request) could
    never run: a 400 naming her share; bob's 2 run. Holding 2, alice's 2 more get 429 naming the share; holding her
    3, even an unreadable body of hers gets 429 (before it is read), bob's a 400. Paired: without the server's share
    alice's 4 run."""
    from fake_engine import FakeEngine, client_for
    from trtlade.contract.serving import fair_share
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    ring = KeyRing.parse(f"alice {ALICE}\nbob {BOB}\n", "keys.txt")

    def statuses(share):
        app = create_app(lambda: _NoShare(ReferenceServingEngine(FakeEngine(), max_queue=4, max_batch_size=2)),
                         ServerSettings(keys=ring, share=share))

        async def go():
            out = []
            async with client_for(app) as c:
                for key, n in ((ALICE, 4), (BOB, 2)):  # a list of n prompts: n sequences
                    r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {key}"},
                                     json={"prompt": ["hello"] * n, "max_tokens": 3})
                    out.append((r.status_code, r.json().get("error", {}).get("message", "")))
                ctx = app.state.context
                if ctx.share_ledger is not None:
                    ctx.share_ledger.take("alice", 2)
                    r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {ALICE}"},
                                     json={"prompt": ["hello"] * 2, "max_tokens": 3})
                    out.append((r.status_code, r.json().get("error", {}).get("message", "")))
                    ctx.share_ledger.take("alice", 1)
                    for key in (ALICE, BOB):
                        r = await c.post("/v1/completions", content=b"{not json", headers={
                            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
                        out.append((r.status_code, ""))
            return out
        return asyncio.run(go())

    (alice, why), (bob, _), (alice_more, more), (alice_full, _), (bob_bad, _) = statuses(fair_share(2, 4, 2))
    assert (alice, bob, alice_more, alice_full, bob_bad) == (400, 200, 429, 429, 400)
    assert "this API key's share" in why and "beyond its share of this server" in more
    assert [s for s, _ in statuses(None)] == [200, 200]


def test_serve_gives_the_server_a_share_with_several_keys_and_none_without(tmp_path):
    from test_prefix_scopes import plan_files
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import server_share

    keys, config = plan_files(tmp_path, THREE, "serve:\n  max_queue: 30\n  max_running_per_identity: 2\n")
    assert server_share(make_plan(ServeFlags(config=config), env={})) is None
    share = server_share(make_plan(ServeFlags(config=config, api_keys_file=keys), env={}))
    assert (share.identities, share.queued, share.running) == (3, 10, 2)


@pytest.mark.parametrize("body, status, param", [
    ({"n": 6, "temperature": 0.8}, 400, "n"),                 # more than alice's share of 5: could never run
    ({"prompt": ["a", "b", "c", "d", "e", "f"]}, 400, "prompt"),
    ({"n": 5, "temperature": 0.8}, 200, None),                # her whole share, on an idle server
])
def test_a_request_larger_than_a_keys_share_is_a_400_not_a_429_that_retrying_never_ends(body, status, param):
    """The 429 said "retry when some have finished" of sequences that were the request's own."""
    from fake_engine import client_for
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    ring = KeyRing.parse(f"alice {ALICE}\nbob {BOB}\n", "keys.txt")

    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=8, max_batch_size=2, identities=2)
        assert serving.share.held == 5
        app = create_app(lambda: serving, ServerSettings(keys=ring, prefix_cache_scope="identity"))
        async with client_for(app) as c:
            return await c.post("/v1/completions", headers={"Authorization": f"Bearer {ALICE}"},
                                json={"prompt": "hello", "max_tokens": 2, **body})

    reply = asyncio.run(go())
    assert reply.status_code == status, reply.text
    if param is not None:
        error = reply.json()["error"]
        assert error["param"] == param and "this API key's share" in error["message"]
        assert "Retry-After" not in reply.headers


@pytest.mark.parametrize("prompts, status", [(12, 200), (13, 400)])
def test_one_request_may_bring_the_batch_plus_the_queue(prompts, status):
    """An idle server takes max_batch_size + serve.max_queue sequences (the free slots take some at once): one
    request of 12 runs with a batch of 8 and a queue of 4; 13 could never run (a 400, not a 429)."""
    from fake_engine import client_for
    from trtlade.server.app import create_app

    async def go():
        app = create_app(lambda: ReferenceServingEngine(engine(), max_queue=4, max_batch_size=8))
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": [f"p{i}" for i in range(prompts)], "max_tokens": 2})

    reply = asyncio.run(go())
    assert reply.status_code == status, reply.text
    if status == 400:
        assert reply.json()["error"]["code"] == "too_many_sequences" and "max_batch_size plus serve.max_queue" in \
            reply.json()["error"]["message"]


def test_a_failed_shared_step_tells_each_request_nothing_of_the_others():
    """The exception of a step that ran several requests may carry any of their tokens: it stays in the log, and
    each request gets the same plain 500 (an error no rule expected tells a client only that)."""
    from fake_engine import client_for
    from models import tiny_engine
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (1, 1, 0))
    new_batch = engine.new_batch

    def failing_batch(**kwargs):
        batch = new_batch(**kwargs)
        step = batch.step

        def step_or_fail(*args, **kw):
            if len(batch) >= 2:
                raise RuntimeError("no room for tokens [77, 89, 12] of /srv/secret")
            return step(*args, **kw)
        batch.step = step_or_fail
        return batch
    engine.new_batch = failing_batch
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))

    async def go():
        async with client_for(app) as c:
            # long enough that the second is admitted while the first decodes, however loaded the host
            one = {"prompt": "alpha beta gamma", "max_tokens": 400, "ignore_eos": True}
            return await asyncio.gather(c.post("/v1/completions", json=one), c.post("/v1/completions", json=one))

    replies = asyncio.run(go())
    assert [r.status_code for r in replies] == [500, 500]
    for r in replies:
        message = r.json()["error"]["message"]
        assert "failed (RuntimeError)" in message and "77" not in message and "secret" not in message


def test_retry_after_is_when_a_place_frees_not_the_refused_requests_own_length():
    """A 429's Retry-After was (waiting + 1) x the refused request's max_tokens x a step: 11 minutes for a request
    asking 4,000 tokens where a place freed in seconds, and 1 s for one asking 1 where the next slot was far. It is
    now the time the sequence closest to its end needs (its tokens left, at one a step), whatever was refused."""
    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=1, max_batch_size=1)
        try:
            with paused(serving):
                running = serving.submit(request([5, 6, 7], max_tokens=60, ignore_eos=True))
                waiting = serving.submit(request([5, 6, 8], max_tokens=4000, ignore_eos=True))
                step = serving._mean_step_s
                said = []
                for asked in (1, 4000):
                    with pytest.raises(EngineOverloaded, match="queue is full") as refused:
                        serving.submit(request([5, 6, 9], max_tokens=asked))
                    said.append(refused.value.retry_after_s)
            assert said == [math.ceil(60 * step)] * 2  # the first one's 60 tokens, whatever the refused one asks
            running.cancel()
            waiting.cancel()
        finally:
            await serving.aclose()

    asyncio.run(go())


def test_a_request_entering_a_free_slot_counts_as_running_through_its_prefill():
    """/metrics' gauges are counted before a step: a request the step is about to prefill was neither running (no
    slot yet) nor queued (a free slot takes it), so a long prompt's prefill read as an idle engine. It counts as
    running from the count on; a request no slot takes stays queued."""
    import collections

    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=8, max_batch_size=2)
        try:
            with serving._cv:  # as counted before a step: nothing holds a slot, three requests wait in the batch
                serving._running, serving._batch_waiting = 0, collections.Counter({None: 3})
            assert serving.load() == (2, 1)
        finally:
            await serving.aclose()

    asyncio.run(go())


def test_with_several_keys_a_full_queues_retry_after_reads_only_the_keys_own_sequences():
    """Retry-After of a full queue is timed on a sequence's tokens left: across API keys it would tell one key how far
    another's request has to go. With several keys it reads the key's own sequences (none: 1 s); paired: one key."""
    async def go(identities):
        serving = ReferenceServingEngine(engine(), max_queue=1, max_batch_size=1, identities=identities)
        try:
            with paused(serving):
                held = [serving.submit(scoped("alice", max_tokens=3000, ignore_eos=True)) for _ in range(2)]
                with pytest.raises(EngineOverloaded) as refused:
                    serving.submit(scoped("bob", max_tokens=5))
                alices = math.ceil(3000 * serving._mean_step_s)
            for h in held:
                h.cancel()
            return refused.value.retry_after_s, alices
        finally:
            await serving.aclose()

    said, _ = asyncio.run(go(2))
    assert said == 1  # bob holds nothing: nothing of alice's 3,000 tokens shows
    said, alices = asyncio.run(go(1))
    assert said == alices > 1  # one key: the batch's own sequences time it


def test_retry_after_counts_the_tokens_a_running_sequence_has_left():
    """A sequence already decoding is timed on what it has left (its max_tokens less what it emitted), not on its
    max_tokens: the running one is paused mid-answer, and a refused request is told its tokens left times a step."""
    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=1, max_batch_size=1)
        try:
            running = serving.submit(request([5, 6, 7], max_tokens=400, ignore_eos=True))
            deadline = time.monotonic() + 60
            while not any(job.emitted >= 3 for job in list(serving._jobs.values())):  # a few tokens emitted
                if time.monotonic() > deadline:
                    pytest.fail("the running request emitted nothing in 60 s")
                await asyncio.sleep(0.001)
            with paused(serving):
                assert len(serving._jobs) == 1, "the running request ended before the pause"
                (job,) = serving._jobs.values()
                serving._mean_step_s = 1.0  # a step of 1 s: Retry-After reads as the tokens left
                waiting = serving.submit(request([5, 6, 8], max_tokens=4000, ignore_eos=True))
                with pytest.raises(EngineOverloaded, match="queue is full") as refused:
                    serving.submit(request([5, 6, 9], max_tokens=1))
                left = 400 - job.emitted
            running.cancel()
            waiting.cancel()
            return refused.value.retry_after_s, left
        finally:
            await serving.aclose()

    said, left = asyncio.run(go())
    assert said == left <= 400 - 3  # not 400, its max_tokens, nor 4,000, the waiting one's

"""Fair share per identity: one API key's burst is refused (429) while another key's request is still admitted,
and a free batch slot goes to the waiting identity holding the fewest. Without keys (one identity), first come
first served as before."""

from __future__ import annotations

import asyncio

import pytest

from test_drafter_scopes import engine
from test_engine_batching import request
from trtlade.contract.protocol import CacheScope
from trtlade.contract.serving import EngineOverloaded
from trtlade.reference.serving_adapter import ReferenceServingEngine, fair_share


def scoped(who, max_tokens=200, **kw):
    return request([5, 6, 7, 8], max_tokens=max_tokens, cache_scope=CacheScope("identity", who), **kw)


def test_the_flooding_identity_is_refused_before_another_is_admitted():
    async def go():
        serving = ReferenceServingEngine(engine(), max_queue=8, max_batch_size=2, identities=2)
        assert (serving.share.queued, serving.share.running) == (4, 1)
        try:
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

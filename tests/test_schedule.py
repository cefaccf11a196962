"""The lookahead schedule: parsing and its rules, band selection (alone and under concurrent
admissions), and the server applying it (reference engine behind HTTP; the TensorRT-LLM double in
test_trtllm_engine.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_engine import FakeEngine, client_for, fake_app, metric_value, run
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.serving import LookaheadPolicy
from trtlade.schedule import Band, LookaheadSchedule, ScheduleError, bands_in_order
from trtlade.spec import LookaheadSpec

S424, S222, AR = LookaheadSpec(4, 2, 4), LookaheadSpec(2, 2, 2), LookaheadSpec(1, 1, 0)
ISSUE_EXAMPLE = [{"up_to": 2, "spec": "4,2,4"}, {"up_to": 8, "spec": "2,2,2"}, {"spec": "1,1,0"}]


# ------------------------------------------------------------------------------------ the value object
@pytest.mark.parametrize("in_flight,expect", [(1, S424), (2, S424), (3, S222), (8, S222), (9, AR), (10_000, AR)])
def test_band_by_requests_in_flight(in_flight, expect):
    assert LookaheadSchedule.parse(ISSUE_EXAMPLE).spec_for(in_flight) == expect


@pytest.mark.parametrize("bands,rule,index", [
    ([], "empty", None),
    ([{"up_to": 8, "spec": "4,2,4"}, {"up_to": 2, "spec": "2,2,2"}, {"spec": "1,1,0"}], "order", 1),
    ([{"up_to": 2, "spec": "4,2,4"}, {"up_to": 2, "spec": "2,2,2"}, {"spec": "1,1,0"}], "order", 1),
    ([{"spec": "4,2,4"}, {"spec": "1,1,0"}], "open-band-not-last", 0),
    ([{"up_to": 2, "spec": "4,2,4"}], "no-open-band", 0),
    ([{"up_to": 0, "spec": "4,2,4"}, {"spec": "1,1,0"}], "parse", 0),
    ([{"up_to": 2, "spec": "4,1,4"}, {"spec": "1,1,0"}], "spec", 0),
    ([{"up_to": 2, "spec": "4,2,4", "extra": 1}, {"spec": "1,1,0"}], "parse", 0),
    ([{"up_to": 2}, {"spec": "1,1,0"}], "parse", 0),
])
def test_broken_schedules_name_the_rule_and_the_band(bands, rule, index):
    with pytest.raises(ScheduleError) as info:
        LookaheadSchedule.parse(bands)
    assert info.value.rule == rule and info.value.index == index and info.value.hint


@pytest.mark.parametrize("index,expect", [(0, "1-2"), (1, "3-8"), (2, "9+"), (3, None), (-1, None), (True, None)])
def test_a_band_label_is_its_in_flight_range_and_no_band_is_an_index_error(index, expect):
    schedule = LookaheadSchedule.parse([{"up_to": 2, "spec": "4,2,4"}, {"up_to": 8, "spec": "2,2,2"},
                                        {"spec": "1,1,0"}])
    if expect is None:
        with pytest.raises(IndexError, match=r"bands are 0\.\.2"):
            schedule.label(index)
    else:
        assert schedule.label(index) == expect


def test_smallest_engine_spec_admits_every_band_and_round_trips():
    s = LookaheadSchedule.parse([{"up_to": 1, "spec": "2,4,2"}, {"up_to": 4, "spec": "4,2,1"}, {"spec": "1,1,0"}])
    engine = s.smallest_engine_spec()
    assert engine == LookaheadSpec(4, 4, 2) and not s.excess(engine)
    assert s.excess(LookaheadSpec(2, 4, 2)) == [(1, [("window_size", 4, 2)])]
    assert LookaheadSchedule.parse(s.to_config()) == s
    assert LookaheadSchedule.parse([{"spec": "1,1,0"}]).smallest_engine_spec() == AR


@given(st.lists(st.integers(1, 64), min_size=0, max_size=6, unique=True).map(sorted),
       st.integers(1, 200))
def test_the_band_is_the_first_whose_up_to_covers_the_load(limits, in_flight):
    specs = [LookaheadSpec(2, 2, i % 3) for i in range(len(limits) + 1)]
    s = LookaheadSchedule(tuple(Band(u, sp) for u, sp in zip([*limits, None], specs)))
    index = s.band_for(in_flight)
    assert all(in_flight > u for u in limits[:index])
    assert index == len(limits) or in_flight <= limits[index]


def test_bands_in_order_merges_neighbours_with_the_same_spec():
    s = bands_in_order([(1, S424), (2, S424), (4, S222), (8, AR), (None, AR)])
    assert s.to_config() == [{"up_to": 2, "spec": "4,2,4"}, {"up_to": 4, "spec": "2,2,2"}, {"spec": "1,1,0"}]


# ------------------------------------------------------------------------------------ admission
def test_concurrent_admissions_each_count_the_others():
    """16 threads admit at once: the in-flight counts they saw are 1..16, each exactly once, so the
    bands follow the order of admission whatever the interleaving."""
    policy = LookaheadPolicy(LookaheadSchedule.parse(ISSUE_EXAMPLE))
    barrier = threading.Barrier(16)
    got: list = []
    lock = threading.Lock()

    def admit():
        barrier.wait()
        request = policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=1))
        with lock:
            got.append(request.band)

    threads = [threading.Thread(target=admit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [0] * 2 + [1] * 6 + [2] * 8 and policy.in_flight == 16
    for _ in range(15):
        policy.release()
    assert policy.band_in_force() == 0  # one left in flight: a new one would be the second


def test_explicit_lookahead_wins_and_is_counted():
    policy = LookaheadPolicy(LookaheadSchedule.parse(ISSUE_EXAMPLE))
    explicit = policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=1, lookahead=AR))
    scheduled = policy.admit(GenerationRequest(prompt_ids=(1,), max_tokens=1))
    assert (explicit.lookahead, explicit.band) == (AR, None)
    assert (scheduled.lookahead, scheduled.band) == (S424, 0) and policy.in_flight == 2


# ------------------------------------------------------------------------------------ the server
def _usage_spec(body) -> str:
    la = body["usage"]["lookahead"]["spec"]
    return f"{la['w']},{la['n']},{la['g']}"


def test_the_server_applies_the_schedule_by_load_and_never_switches_a_running_request():
    schedule = LookaheadSchedule.parse([{"up_to": 1, "spec": "4,2,4"}, {"spec": "2,2,2"}])
    app, engine = fake_app(FakeEngine(step_delay=0.01), schedule=schedule, max_batch_size=4)

    async def go():
        async with client_for(app) as c:
            alone = (await c.post("/v1/completions", json={"prompt": "a", "max_tokens": 4})).json()
            # a long request runs; two more arrive while it does; the first keeps its band
            long = asyncio.create_task(c.post("/v1/completions", json={"prompt": "b", "max_tokens": 40}))
            while len(engine.requests) < 2:  # until the long one runs (admitted alone), on a slow host too
                await asyncio.sleep(0.005)
            busy = await asyncio.gather(*[c.post("/v1/completions", json={"prompt": "c", "max_tokens": 4})
                                          for _ in range(2)])
            explicit = await c.post("/v1/completions", json={"prompt": "d", "max_tokens": 4,
                                                             "lookahead": [1, 1, 0]})
            first = (await long).json()
            metrics = (await c.get("/metrics")).text
            version = (await c.get("/version")).json()
            return alone, first, [b.json() for b in busy], explicit.json(), metrics, version

    alone, first, busy, explicit, metrics, version = run(go())
    assert _usage_spec(alone) == "4,2,4" and _usage_spec(first) == "4,2,4"
    assert [_usage_spec(b) for b in busy] == ["2,2,2", "2,2,2"]
    assert _usage_spec(explicit) == "1,1,0"
    assert metric_value(metrics, "trtlade_schedule_requests_total", {"band": "1", "spec": "4,2,4"}) == 2
    assert metric_value(metrics, "trtlade_schedule_requests_total", {"band": "2+", "spec": "2,2,2"}) == 2
    assert metric_value(metrics, "trtlade_schedule_band_in_force", {"band": "1", "spec": "4,2,4"}) == 1
    assert metric_value(metrics, "trtlade_schedule_band_in_force", {"band": "2+", "spec": "2,2,2"}) == 0
    assert version["engine"]["lookahead_schedule"] == [{"up_to": 1, "spec": "4,2,4"}, {"spec": "2,2,2"}]
    assert [r.band for r in engine.requests] == [0, 0, 1, 1, None]


def test_without_a_schedule_nothing_changes():
    app, engine = fake_app()

    async def go():
        async with client_for(app) as c:
            body = (await c.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})).json()
            return body, (await c.get("/metrics")).text

    body, metrics = run(go())
    assert _usage_spec(body) == "4,2,4" and engine.requests[0].lookahead is None
    assert "trtlade_schedule_band_in_force{" not in metrics


def test_a_burst_of_arrivals_counts_requests_still_being_tokenized():
    """Three requests arrive together: the first one admitted already counts the other two (the
    server's count from arrival), so none of them gets the band for a lone request."""
    schedule = LookaheadSchedule.parse([{"up_to": 1, "spec": "4,2,4"}, {"spec": "2,2,2"}])
    app, engine = fake_app(FakeEngine(step_delay=0.05), schedule=schedule, max_batch_size=4)

    async def go():
        async with client_for(app) as c:
            burst = await asyncio.gather(*[c.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})
                                           for _ in range(3)])
            alone = await c.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})
            return [b.json() for b in burst], alone.json()

    burst, alone = run(go())
    assert [_usage_spec(b) for b in burst] == ["2,2,2"] * 3
    assert _usage_spec(alone) == "4,2,4"  # every earlier request has left: the count is back to 1
    assert all(r.load >= 2 for r in engine.requests[:3]) and engine.requests[3].load == 1

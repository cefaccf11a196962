"""The ``auto`` draft policy as served: which policy a request gets (config default, by name, or an
explicit spec), the 400s where a policy is not offered, the config rules, and what /version and
/metrics show of the live cost model -- on the fake engine and on a tiny real one."""

from __future__ import annotations

import asyncio

import pytest

from fake_engine import FakeEngine, client_for, fake_app, metric_value, run
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.serving import LookaheadPolicy
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import LookaheadSpec

SCHEDULE = LookaheadSchedule.parse([{"up_to": 1, "spec": "4,2,4"}, {"spec": "1,1,0"}])


# ------------------------------------------------------------------------------------ admission table
@pytest.mark.parametrize("default, schedule, asked, lookahead, policy, spec", [
    # what the request sends        -> the policy and spec it runs with
    ("auto", None, None, None, "auto", None),                    # no field: the server's policy
    ("auto", SCHEDULE, "schedule", None, "schedule", "4,2,4"),   # by name: the schedule's band
    ("schedule", SCHEDULE, None, None, "schedule", "4,2,4"),
    ("schedule", SCHEDULE, "auto", None, "auto", None),
    ("fixed", None, None, None, "fixed", None),                  # the engine's default spec, every step
    ("auto", SCHEDULE, None, LookaheadSpec(2, 2, 1), "fixed", "2,2,1"),  # an explicit spec always wins
    ("schedule", SCHEDULE, "auto", LookaheadSpec(1, 1, 0), "fixed", "1,1,0"),
])
def test_which_policy_a_request_gets(default, schedule, asked, lookahead, policy, spec):
    admitted = LookaheadPolicy(schedule, default=default).admit(
        GenerationRequest(prompt_ids=(1,), max_tokens=4, lookahead=lookahead, policy=asked))
    assert admitted.policy == policy
    assert (str(admitted.lookahead) if admitted.lookahead is not None else None) == spec
    assert (admitted.schedule is SCHEDULE) == (policy == "schedule")


def _post(app, body):
    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": "a", "max_tokens": 3, **body})
    return run(go())


def test_a_request_asks_for_auto_or_schedule_by_name():
    app, engine = fake_app(FakeEngine(), schedule=SCHEDULE)
    assert _post(app, {"lookahead": "auto"}).status_code == 200
    assert _post(app, {"lookahead": "Schedule"}).status_code == 200
    assert _post(app, {}).status_code == 200
    assert [(r.policy, str(r.lookahead)) for r in engine.requests] == [
        ("auto", "None"), ("schedule", "4,2,4"), ("schedule", "4,2,4")]


@pytest.mark.parametrize("name, schedule, words", [
    ("schedule", None, "no lookahead.schedule"),
    ("fixed", SCHEDULE, "send the spec itself"),
])
def test_a_policy_the_server_does_not_offer_is_a_400_naming_lookahead(name, schedule, words):
    app, _ = fake_app(FakeEngine(), schedule=schedule)
    reply = _post(app, {"lookahead": name})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "lookahead" and words in error["message"] and '"auto"' in error["message"]


def test_the_trtllm_engine_refuses_auto_and_points_to_tune():
    from trtlade.contract.serving import EngineInfo, EngineLimits
    from trtlade.server.admission import parse_request_policy
    from trtlade.server.errors import ApiError

    info = EngineInfo("trtllm", "m", LookaheadSpec(4, 2, 4), LookaheadSpec(4, 2, 4), EngineLimits(2048, 2047), "",
                      policy="schedule", policies=("schedule",))
    assert parse_request_policy("schedule", info) == "schedule"
    with pytest.raises(ApiError) as err:
        parse_request_policy("auto", info)
    assert "trtlade tune" in err.value.message and err.value.param == "lookahead"


# ------------------------------------------------------------------------------------ config
def _config(text, tmp_path):
    from trtlade.config.loader import load_config

    path = tmp_path / "c.yml"
    path.write_text(text)
    return load_config(path).config


@pytest.mark.parametrize("body, code, line", [
    ("serve: {engine: trtllm}\nlookahead:\n  spec: 4,2,4\n  policy: auto\n", "policy-engine", 4),
    ("lookahead:\n  spec: 4,2,4\n  policy: schedule\n", "policy-without-schedule", 3),
])
def test_config_rules_of_lookahead_policy(body, code, line, tmp_path):
    from trtlade.config.loader import ConfigError

    with pytest.raises(ConfigError) as err:
        _config("model: {}\n" + body, tmp_path)
    diags = err.value.diagnostics
    assert [d.code for d in diags] == [code] and diags[0].line == line + 1 and diags[0].hint


@pytest.mark.parametrize("body, policy", [
    ("lookahead: {spec: '2,4,2'}\n", "auto"),
    ("lookahead: {spec: '2,4,2', schedule: [{spec: '1,1,0'}]}\n", "schedule"),
    ("lookahead: {spec: '2,4,2', policy: fixed}\n", "fixed"),
    ("lookahead: {spec: '2,4,2', policy: auto, schedule: [{spec: '1,1,0'}]}\n", "auto"),
    ("serve: {engine: trtllm}\nlookahead: {spec: '2,4,2'}\n", "fixed"),
])
def test_the_policy_of_requests_without_a_field(body, policy, tmp_path):
    assert _config("model: {}\n" + body, tmp_path).lookahead_policy == policy


# ------------------------------------------------------------------------------------ a real engine
def test_version_and_metrics_show_the_live_cost_model():
    from models import tiny_engine
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (2, 3, 2), adaptive=True)
    engine.calibrate(repeats=1, warmup=0, max_rows=8)
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))

    def decisions(metrics: str) -> float:
        return sum(metric_value(metrics, "trtlade_auto_draft_decisions_total", {"decision": d})
                   for d in ("drafted", "skipped"))

    async def go():
        async with client_for(app) as c:
            body = (await c.post("/v1/completions", json={"prompt": "one two three one two three",
                                                          "max_tokens": 12, "ignore_eos": True})).json()
            # the answer's last chunk is sent during its step, the step's metrics after it: read them once there
            for _ in range(100):
                version, metrics = (await c.get("/version")).json(), (await c.get("/metrics")).text
                if decisions(metrics) == version["live"]["auto"]["drafted"] + version["live"]["auto"]["skipped"]:
                    break
                await asyncio.sleep(0.02)
            return body, version, metrics

    body, version, metrics = run(go())
    assert body["usage"]["lookahead"]["policy"] == "auto"
    live = version["live"]["auto"]
    assert set(live["step_ms"]) >= {"1", "2", "4", "8"} and live["row_cost_ms"] is not None
    assert live["steps"] >= 1 and live["drafted"] + live["skipped"] >= 1
    assert version["engine"]["lookahead_policy"] == "auto" and version["engine"]["lookahead_policies"] == ["auto"]
    drafted = metric_value(metrics, "trtlade_auto_draft_decisions_total", {"decision": "drafted"})
    skipped = metric_value(metrics, "trtlade_auto_draft_decisions_total", {"decision": "skipped"})
    assert drafted + skipped == live["drafted"] + live["skipped"]
    assert metric_value(metrics, "trtlade_row_cost_seconds", {}) == pytest.approx(live["row_cost_ms"] / 1000)
    assert metric_value(metrics, "trtlade_auto_accepted_drafts_total", {}) == live["accepted"]


@pytest.mark.parametrize("body, error", [
    ("lookahead: {spec: '2,4,2', schedule: [{spec: '1,1,0'}]}\nbench: {modes: [ar, auto, schedule]}\n", None),
    ("lookahead: {spec: '2,4,2'}\nbench: {modes: [ar, schedule]}\n", "no lookahead.schedule"),
    ("serve: {engine: trtllm}\nlookahead: {spec: '2,4,2'}\nbench: {modes: [ar, auto]}\n", "only the reference"),
])
def test_validate_config_checks_the_policy_bench_modes(body, error, tmp_path):
    from trtlade.config.checks import check_trtlade
    from trtlade.config.loader import load_config

    path = tmp_path / "c.yml"
    path.write_text("model: {}\n" + body)
    found = [d for d in check_trtlade(load_config(path)) if d.code == "bench-mode"]
    assert [error in d.message for d in found] == ([] if error is None else [True])

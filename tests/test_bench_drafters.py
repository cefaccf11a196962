"""bench with NGram / SA modes: mode names, the payload, tokens per step by prompt category in the report,
the config check of drafter modes, and a short run against a tiny-model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtlade.bench.datasets import Prompt, load_dataset
from trtlade.bench.plan import BenchPlan, Endpoint, PlanError, Series, Target, build_payload, parse_modes
from trtlade.bench.records import RequestRecord
from trtlade.bench.report import category_tokens_per_step


@pytest.mark.parametrize("name, block", [
    ("ngram", {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}),
    ("ngram-3-5-latest-private", {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 5,
                                  "is_use_oldest": False, "is_public_pool": False}),
    ("sa", {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}),
    ("sa-6", {"decoding_type": "SA", "max_draft_len": 6, "max_matching_ngram_size": -1}),
    ("sa-4-3-global", {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 3,
                       "enable_global_pool": True}),
    ("ngram-auto", {"decoding_type": "AUTO"}),
])
def test_drafter_modes_send_upstreams_block(name, block):
    [mode] = parse_modes([name])
    assert mode.speculation == block and mode.spec is None and mode.payload() is None
    plan = BenchPlan([], [1], Endpoint("completions", "/v1/completions"), [], [], 8, 0.0, False, 60)
    body = build_payload(Prompt(0, text="Hi"), Series(name, Target("a", "http://h", model="m"), mode), plan)
    assert body["speculation"] == block and "lookahead" not in body


@pytest.mark.parametrize("name, fragment", [
    ("ngram-0", "max_draft_len must be > 0"),
    ("sa-4-0", "max_matching_ngram_size must be > 0"),
    ("ngram-4--1", "max_matching_ngram_size must be >= 1"),
    ("sa-4-65-global", "in [1, 64]"),
    ("ngram-4-2-global", "neither a number nor an option"),
    ("sa-1-2-3", "3 numbers"),
])
def test_bad_drafter_modes_are_refused_with_the_rule(name, fragment):
    with pytest.raises(PlanError) as err:
        parse_modes([name])
    assert fragment in err.value.message and err.value.option == "--modes" and err.value.hint


def test_the_mix_dataset_names_each_prompts_category():
    categories = [p.category for p in load_dataset("mix").prompts]
    assert set(categories) == {"code", "chat", "math", "summarisation", "extraction"} and None not in categories


def test_a_jsonl_line_may_name_its_category(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "Hi", "category": "chat"}) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    assert [p.category for p in load_dataset(str(path)).prompts] == ["chat", None]
    path.write_text(json.dumps({"prompt": "Hi", "category": 3}) + "\n")
    from trtlade.bench.datasets import DatasetError

    with pytest.raises(DatasetError, match="category"):
        load_dataset(str(path))


def test_tokens_per_step_come_from_either_usage_block_and_pool_by_category():
    recs = [RequestRecord("sa", 1, 0, 0, category="code", usage_speculation={"tokens_per_step": 2.5}),
            RequestRecord("sa", 2, 0, 0, category="chat", usage_speculation={"tokens_per_step": 1.5}),
            RequestRecord("la", 1, 0, 0, category="code", usage_lookahead={"tokens_per_step": 1.75}),
            RequestRecord("la", 1, 1, 1, category="code", error="boom")]
    assert [r.tokens_per_step for r in recs] == [2.5, 1.5, 1.75, None]
    assert category_tokens_per_step(recs, ["la", "sa"]) == {"la": {"code": 1.75}, "sa": {"code": 2.5, "chat": 1.5}}


def test_validate_config_checks_drafter_modes(tmp_path: Path):
    from trtlade.cli.main import app as cli

    path = tmp_path / "c.yml"
    path.write_text("lookahead: {spec: '2,2,1'}\nbench:\n  modes: [ar, sa-4, ngram-9, ngram-0]\n")
    result = CliRunner().invoke(cli, ["validate-config", str(path)])
    assert result.exit_code != 0
    out = result.output
    assert "bench.modes.2" in out and "more than the server allows (2)" in out  # (2,2,1): max_draft_len 2
    assert "bench.modes.3" in out and "max_draft_len must be > 0" in out
    assert "bench.modes.1" in out  # sa-4 drafts 4 > 2 too


def test_a_short_bench_of_every_drafter_against_a_tiny_model_server(tmp_path: Path):
    from fake_engine import uvicorn_thread
    from models import tiny_engine
    from trtlade.cli.main import app as cli
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (2, 4, 2))
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))
    with uvicorn_thread(app) as url:
        result = CliRunner().invoke(cli, [
            "bench", "--base-url", url, "--endpoint", "completions", "--dataset", "mix", "-c", "1,2", "-n", "5",
            "--repeats", "2", "--max-tokens", "8", "--ignore-eos", "--modes", "ar,2-4-2,ngram,sa,ngram-auto",
            "--result-dir", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    [folder] = list(tmp_path.iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary["tokens_per_step_by_category"]) == {"ar", "2-4-2", "ngram", "sa", "ngram-auto"}
    assert set(summary["tokens_per_step_by_category"]["sa"]) == {"code", "chat", "math", "summarisation",
                                                                  "extraction"}
    assert all(a["identical"] == a["compared"] > 0 for a in summary["output_agreement"].values())
    md = (folder / "summary.md").read_text()
    assert "## Tokens per step" in md and "By prompt category" in md
    assert "## Engine steps" in md  # the server's own step counters, read around each level
    levels = [s for s in summary["summaries"] if s["series"] in ("ar", "2-4-2")]
    assert levels and all(s["engine_steps"] > 0 and s["engine_step_ms"] > 0 for s in levels)
    plain = [s["engine_rows_per_step"] / s["engine_sequences_per_step"] for s in levels if s["series"] == "ar"]
    drafted = [s["engine_rows_per_step"] / s["engine_sequences_per_step"] for s in levels if s["series"] == "2-4-2"]
    assert all(r == pytest.approx(1.0) for r in plain) and all(r > 1.5 for r in drafted)
    # the cores each side kept busy: the server's from its process series (read from /proc), the load generator's own
    assert all(s["bench_cpu_cores"] > 0 for s in summary["summaries"]) and "## CPU use" in md
    if Path("/proc/self/stat").exists():
        assert all(s["server_cpu_cores"] >= 0 for s in summary["summaries"])
    assert "`speculation` {\"decoding_type\": \"SA\"" in md
    served = {}  # the server ran each mode's drafter: its usage echoes the block sent
    for line in (folder / "per_request.jsonl").read_text().splitlines():
        record = json.loads(line)
        used = record["usage_speculation"] or {}
        served.setdefault(record["series"], set()).add(used.get("decoding_type"))
    # AUTO is upstream's NGram (with its own draft length) at these loads: the usage names the drafter that ran
    assert served == {"ar": {None}, "2-4-2": {None}, "ngram": {"NGram"}, "sa": {"SA"}, "ngram-auto": {"NGram"}}


@pytest.mark.parametrize("modes, engine, fragment", [
    ("9-9-9", {"spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2}},
     "asks for (9,9,9), more than the server at http://h admits ((2,4,2): window_size 9 > 2"),
    ("2-5-2", {"spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2}}, "ngram_size 5 > 4"),
    ("sa", {"spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2}, "speculation": {}},
     "does not offer per request"),
    (None, {"spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2},
            "speculation": {"drafters": ["ngram", "sa"], "max_draft_len": 8}}, None),
])
def test_modes_a_server_would_refuse_are_refused_before_the_sweep(modes, engine, fragment):
    from trtlade.bench.plan import PlanError, Series, Target, check_modes_for_servers, parse_modes

    target = Target("a", "http://h", server_info={"engine": engine})
    names = modes or "ar,lookahead,2-4-2,2-2-1,auto,ngram,sa"
    series = [Series(m.name, target, m) for m in parse_modes([names])]
    if fragment is None:
        check_modes_for_servers(series)  # every one admitted
        return
    with pytest.raises(PlanError) as err:
        check_modes_for_servers(series)
    assert fragment in err.value.message and err.value.option == "--modes"

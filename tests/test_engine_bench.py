"""``trtlade engine-bench`` on a tiny model folder: modes, JSON, table, errors; the step profile."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from models import tiny_engine, tiny_model, tiny_tokenizer
from trtlade.cli.main import app
from trtlade.engine_bench import BenchConfig, max_spec, profile_batch_steps, profile_steps, run_engine_bench
from trtlade.reference.engine import DEFAULT_SPEC
from trtlade.reference.native import linear_dtypes
from trtlade.spec import LookaheadSpec


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-qwen3"
    tok = tiny_tokenizer()
    tiny_model("qwen3", len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.json"
    path.write_text(json.dumps({"name": "mini", "prompts": [
        {"id": "fox", "category": "repetition", "text": "The quick brown fox jumps over the lazy dog. The quick"},
        {"id": "ids", "category": "edge", "prompt_ids": [5]},
    ]}))
    return path


def test_engine_bench_cli_writes_json_and_table(tiny_folder, prompts_file, tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "engine-bench", "--model", str(tiny_folder), "--specs", "2,2,1", "4,3,4", "--max-tokens", "12",
        "--repeats", "2", "--prompts", str(prompts_file), "--threads", "1", "--json", str(out),
        "--preset", "fast", "--preset", "trtllm"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["model_id"] == "tiny-qwen3"
    assert data["config"]["specs"] == ["2,2,1", "4,3,4"] and data["config"]["repeats"] == 2
    res = data["results"][0]
    expected_engine = max_spec([LookaheadSpec(2, 2, 1), LookaheadSpec(4, 3, 4), DEFAULT_SPEC])
    assert res["dtype"] == "float32" and res["engine_spec"] == str(expected_engine)
    modes = {m["mode"]: m for m in res["modes"]}
    assert list(modes) == ["greedy", "fast default", "fast 2,2,1", "fast 4,3,4", "trtllm default", "trtllm 2,2,1",
                           "trtllm 4,3,4", "transformers generate", "transformers prompt lookup"]
    assert data["config"]["presets"] == ["fast", "trtllm"]
    for preset in ("fast", "trtllm"):
        default = modes[f"{preset} default"]
        assert default["spec"] == str(DEFAULT_SPEC) and default["adaptive"] and default["preset"] == preset
    # the preset decides the prompt-lookup candidates: max(N-1, 4) tokens with fast (N-1 beside the window),
    # none with trtllm
    assert [modes[f"fast {s}"]["prompt_lookup"] for s in ("2,2,1", "4,3,4")] == [4, 4]  # max(N-1, 4)
    assert {modes[f"trtllm {s}"]["prompt_lookup"] for s in ("2,2,1", "4,3,4")} == {0}
    assert modes["greedy"]["preset"] is None and modes["transformers generate"]["preset"] is None
    for m in modes.values():
        # fp32: every lookahead mode, and transformers' own greedy and prompt lookup, give greedy's tokens
        assert m["identity_vs_greedy"] == 1.0 and m["identical_prefix_share"] == 1.0
        assert len(m["total_s_per_repeat"]) == 2 and m["total_tokens_per_s"] > 0 and m["speedup_vs_generate"] > 0
        spread = m["speedup_vs_generate_per_repeat"]  # one paired ratio per repeat; the median sits inside
        assert len(spread) == 2 and min(spread) <= m["speedup_vs_generate"] <= max(spread)
        assert m["tokens"] == 24
    for name in ("greedy", "fast default", "fast 2,2,1", "trtllm 4,3,4"):
        assert modes[name]["kind"] == "trtlade" and modes[name]["tokens_per_step"] >= 1.0
    assert modes["greedy"]["tokens_per_step"] == 1.0 and modes["greedy"]["speedup_vs_greedy"] == 1.0
    assert modes["greedy"]["speedup_vs_greedy_verdict"] is None  # the baseline is not judged against itself
    for name in ("fast default", "fast 2,2,1", "trtllm 4,3,4"):  # rates per repeat, a margin and a verdict
        m = modes[name]
        assert len(m["speedup_vs_greedy_per_repeat"]) == 2 and m["speedup_vs_greedy_margin"] is not None
        assert m["speedup_vs_greedy_verdict"] in ("faster", "slower", "within noise")
        ratios = m["speedup_vs_greedy_per_repeat"]  # the judged number is in the JSON: their geometric mean
        assert m["speedup_vs_greedy_mean"] == pytest.approx((ratios[0] * ratios[1]) ** 0.5, abs=2e-4)
        assert m["speedup_vs_greedy_confidence"] == 0.95
    # a transformers baseline's time is prefill + decode: no decode rate, no decode speedup
    assert modes["transformers generate"]["tokens_per_s"] is None and modes["transformers generate"][
        "speedup_vs_greedy"] is None
    assert modes["transformers generate"]["speedup_vs_generate"] == 1.0
    assert modes["transformers prompt lookup"]["kind"] == "transformers"
    assert "vs transformers generate" in result.output and "median (min–max)" in result.output
    assert data["machine"]["cpu_count"] >= 1  # the report names the host it ran on
    pages = res["weight_pages"]  # where the native kernel's packed weights lie, in the JSON and in words
    assert (pages["bytes"] > 0) is bool(linear_dtypes()) and pages["pages"]
    assert (f"weights: {pages['bytes'] / 1e6:.0f} MB packed" in result.output) is bool(linear_dtypes())
    # per category (the suite's: repetition and edge), the same ratio on the category's prompts
    per_category = res["per_category_vs_generate"]
    assert list(per_category) == ["repetition", "edge"] and data["prompts"][0]["category"] == "repetition"
    assert per_category["edge"]["transformers generate"] == 1.0
    assert set(per_category["repetition"]) == set(modes) and "per category" in result.output
    assert [k["spec"] for k in res["keying"]] == ["2,2,1", "4,3,4"]
    assert "fast 2,2,1" in result.output and "keying" in result.output and "Loading weights" not in result.output


def test_engine_bench_library_default_spec_and_bf16(tiny_folder, prompts_file):
    config = BenchConfig(model=str(tiny_folder), specs=(LookaheadSpec(7, 3, 7),), dtypes=("bfloat16",),
                         max_tokens=8, prompts=str(prompts_file), repeats=1, threads=1, keying=False, baselines=False)
    result = run_engine_bench(config).to_dict()
    res = result["results"][0]
    assert res["dtype"] == "bfloat16" and res["keying"] == []
    assert {m["mode"] for m in res["modes"]} == {"greedy", "fast default", "fast 7,3,7"}
    assert all(0.0 <= m["identity_vs_greedy"] <= m["identical_prefix_share"] + 1e-9 <= 1.0 + 1e-9
               for m in res["modes"])


def test_engine_bench_sampled_against_plain_sampling_and_transformers(tiny_folder, prompts_file, tmp_path):
    out = tmp_path / "sampled.json"
    result = CliRunner().invoke(app, [
        "engine-bench", "--model", str(tiny_folder), "--specs", "4,3,4", "--max-tokens", "12", "--repeats", "2",
        "--prompts", str(prompts_file), "--threads", "1", "--json", str(out), "--no-keying", "--no-profile",
        "--temperature", "0.3", "--top-p", "0.9", "--seed", "5"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert (data["config"]["temperature"], data["config"]["top_p"], data["config"]["seed"]) == (0.3, 0.9, 5)
    modes = {m["mode"]: m for m in data["results"][0]["modes"]}
    assert list(modes) == ["plain sampling", "fast default", "fast 4,3,4", "transformers generate",
                           "transformers prompt lookup"]
    assert modes["transformers generate"]["spec"] == "sampled"
    for name in ("fast default", "fast 4,3,4"):  # lookahead samples exactly what plain sampling samples
        assert modes[name]["identity_vs_greedy"] == 1.0 and modes[name]["tokens"] == 24
    text = " ".join(result.output.split())
    assert "plain sampling" in text and "temperature 0.3" in text, result.output


@pytest.mark.parametrize("args,message", [
    (["--top-p", "0.9"], "without --temperature"),
    (["--specs", "4,1,4"], "ngramSize=1 requires verificationSetSize=0"),
    (["--specs", ""], "--specs is empty"),                       # it ran the whole default sweep
    (["--dtype", "int8"], "unknown dtype int8"),
    (["--prompts", "/nonexistent.json"], "neither a bundled suite"),
    (["7,7,7"], "unexpected argument"),
    (["--preset", "quick"], "--preset 'quick': unknown preset"),
    (["--device", "tpu"], "--device 'tpu': not a device the reference engine runs on"),
    (["--device", "cuda:0", "--native-kernels"], "the native kernels are CPU code"),
    (["--seed", "3"], "--seed 3 without --temperature"),
    # two mistakes: the flags are checked in a fixed order, the baselines' before the seed's
    (["--no-baselines", "--prompt-lookup-tokens", "5", "--seed", "3"], "which --no-baselines skips"),
])
def test_engine_bench_cli_errors(args, message, tiny_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["engine-bench", "--model", str(tiny_folder), *args])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "reports").exists()  # refused before its report folder is made


def test_engine_bench_refuses_a_json_path_it_cannot_write_before_measuring(tiny_folder, tmp_path, monkeypatch):
    import trtlade.engine_bench as eb

    monkeypatch.setattr(eb, "run_engine_bench", lambda *a, **k: pytest.fail("measured before the path was checked"))
    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    for path, fragment in ((blocker / "x.json", f"cannot create {blocker}"), (tmp_path, "is a folder")):
        result = CliRunner().invoke(app, ["engine-bench", "--model", str(tiny_folder), "--json", str(path)])
        assert result.exit_code == 2 and fragment in result.output and "--json" in result.output, result.output


def test_a_failed_run_leaves_no_empty_run_folder(tiny_folder, tmp_path, monkeypatch):
    """The default JSON's folder (reports/engine-bench-<time>) is made before the run: a failure removes it again."""
    import trtlade.engine_bench as eb
    from trtlade.reference.engine import ModelLoadError

    def broken(*args, **kwargs):
        raise ModelLoadError("the weights are not readable")
    monkeypatch.setattr(eb, "run_engine_bench", broken)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["engine-bench", "--model", str(tiny_folder)])
    assert result.exit_code == 1 and "the weights are not readable" in result.output
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_engine_bench_cli_refuses_a_cuda_device_torch_does_not_see(tiny_folder, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(app, ["engine-bench", "--model", str(tiny_folder), "--device", "cuda"])
    assert result.exit_code == 2  # a flag's value the command cannot use
    assert "--device cuda: torch" in result.output and "sees 0 CUDA device(s)" in result.output
    assert "or use --device cpu" in result.output and "Traceback" not in result.output


def test_engine_bench_off_the_cpu_loads_there_and_leaves_the_cpu_measurements_out(tiny_folder, prompts_file,
                                                                                  monkeypatch):
    """The engine is asked for the device given; the floor, roofline and per-step profile (measurements of
    the CPU) are left out there. (The load itself is redirected to the CPU: no test needs a GPU.)"""
    from trtlade.reference.engine import ReferenceEngine

    asked = []
    load = ReferenceEngine.load.__func__

    def on_cpu(cls, *args, device="cpu", **kwargs):
        asked.append(device)
        return load(cls, *args, device="cpu", **kwargs)

    monkeypatch.setattr(ReferenceEngine, "load", classmethod(on_cpu))
    config = BenchConfig(model=str(tiny_folder), specs=(LookaheadSpec(2, 2, 1),), max_tokens=6, repeats=1,
                         prompts=str(prompts_file), keying=False, baselines=False, device="cuda:3")
    res = run_engine_bench(config).to_dict()["results"][0]
    assert asked == ["cuda:3"]
    assert res["floor"] == {} and res["profile"] == []
    assert {m["mode"] for m in res["modes"]} >= {"greedy", "fast 2,2,1"}
    on_host = run_engine_bench(BenchConfig(**{**config.__dict__, "device": "cpu"})).to_dict()["results"][0]
    assert on_host["floor"]["floor_ms"] > 0 and on_host["profile"]


def test_engine_bench_cli_refuses_a_non_model_folder(tmp_path):
    result = CliRunner().invoke(app, ["engine-bench", "--model", str(tmp_path)])
    assert result.exit_code == 2 and "no config.json" in result.output


def test_max_spec():
    assert max_spec([LookaheadSpec(2, 3, 2), LookaheadSpec(5, 2, 1)]) == LookaheadSpec(5, 3, 2)
    assert max_spec([LookaheadSpec(1, 1, 0)]) == LookaheadSpec(1, 1, 0)


def test_profile_breaks_a_step_down():
    eng = tiny_engine("llama", (4, 3, 4))
    report = profile_steps(eng, [5, 6, 7, 8], LookaheadSpec(4, 3, 4), steps=6)
    assert report["steps"] >= 1 and report["step_ms"] > 0
    parts = report["breakdown_ms"]
    assert parts["linear (GEMM)"] > 0 and parts["attention"] > 0
    # the engine's own Python is measured, not lumped into the rest
    assert parts["lookahead algorithm (Python)"] > 0 and parts["detokenize + stops"] > 0
    # the rest closes the gap to the step time (each part is rounded to 0.01 ms)
    assert sum(parts.values()) >= 0.99 * report["step_ms"] - 0.005 * len(parts)


def test_profile_of_a_batch_step_counts_its_sequences_and_parts():
    """benchmarks/step_profile.py --sequences N: N sequences decode together; each step's parts are
    split as for one sequence, and the steps stop where the sequences end."""
    eng = tiny_engine("llama", (4, 3, 4))
    report = profile_batch_steps(eng, [[5, 6, 7], [9, 10], [11, 12, 13, 14]], LookaheadSpec(1, 1, 0), steps=5)
    assert report["sequences"] == 3 and report["steps"] == 5 and report["rows_per_step"] == 3
    parts = report["breakdown_ms"]
    assert parts["linear (GEMM)"] > 0 and parts["detokenize + stops"] > 0 and "attention" in parts
    assert sum(parts.values()) >= 0.99 * report["step_ms"] - 0.005 * len(parts)
    short = profile_batch_steps(eng, [[5, 6, 7]], LookaheadSpec(1, 1, 0), steps=50)
    assert short["steps"] == 50  # max_tokens follows steps: every profiled step runs


def test_engine_bench_measures_the_onednn_forward_on_request(tiny_folder, prompts_file, tmp_path):
    """--no-native-kernels: the engine's own forward on oneDNN's GEMMs and torch's ops (to compare with
    the native body); same tokens in float32, and the choice recorded in the report."""
    out = tmp_path / "onednn.json"
    result = CliRunner().invoke(app, [
        "engine-bench", "--model", str(tiny_folder), "--specs", "4,3,4", "--max-tokens", "8", "--repeats", "1",
        "--prompts", str(prompts_file), "--threads", "1", "--json", str(out), "--no-keying", "--no-baselines",
        "--no-native-kernels"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["native_kernels"] is False
    assert data["results"][0]["linear_kernel"]["kernel"] == "fused-onednn-packed"
    assert all(m["identity_vs_greedy"] == 1.0 for m in data["results"][0]["modes"])


def test_the_speedup_over_greedy_is_a_ratio_of_rates_not_of_times():
    """A mode that emitted half greedy's tokens in half its time is as fast, not twice (an answer that differs)."""
    from trtlade.engine_bench import ModeResult

    greedy = ModeResult(mode="greedy", spec="1,1,0", adaptive=False, tokens=100, decode_s=[1.0, 1.1])
    half = ModeResult(mode="fast 2,2,1", spec="2,2,1", adaptive=False, tokens=50, decode_s=[0.5, 0.55])
    assert half.speedups(greedy) == pytest.approx([1.0, 1.0]) and half.speedup(greedy) == pytest.approx(1.0)

"""`trtlade build` end to end against the TensorRT-LLM test double: the conversion calls, the exact
trtllm-build argv, the bundle and its manifest, idempotence, --force, and every failure path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hf_configs import HF_CONFIGS as HF
from trtlade.cli.main import app
from trtlade.config.schema import TrtladeConfig
from trtlade.diagnostics import has_errors
from trtlade.trtllm.engine_config import check_engine, read_engine_config



def model(tmp_path: Path, kind: str, name: str | None = None) -> Path:
    folder = tmp_path / "models" / (name or f"tiny-{kind}")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(HF[kind]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    return folder


def build(*args: str):
    return CliRunner().invoke(app, ["build", *args])


def manifest(out: Path) -> dict:
    return json.loads((out / "trtlade-manifest.json").read_text())


def engine_check(out: Path) -> list:
    cfg = TrtladeConfig.model_validate(yaml.safe_load((out / "trtlade.yml").read_text()))
    engine = read_engine_config(out / cfg.build.engine_dir)
    return check_engine(cfg.lookahead.spec, engine, build=cfg.build, source=str(out / "trtlade.yml"))


def assert_not_complete(out: Path) -> None:
    assert not (out / "trtlade-manifest.json").exists()
    assert not (out / "trtlade.yml").exists()
    assert not list(out.glob(".*.partial")) if out.exists() else True


# ------------------------------------------------------------------------------ happy paths
@pytest.mark.parametrize("kind, tp, pp, wng, draft, cls", [
    ("llama", 1, 1, "4,2,4", 7, "LLaMAForCausalLM"),
    ("qwen2", 2, 1, "7,7,7", 83, "QWenForCausalLM"),
    ("qwen3", 1, 2, "4,3,4", 15, "QWenForCausalLM"),
])
def test_build_converts_per_rank_and_runs_trtllm_build_exactly(tmp_path, fake_trtllm_build, kind, tp, pp, wng,
                                                               draft, cls):
    if kind == "qwen3":
        fake_trtllm_build.patch_qwen3()
    hf = model(tmp_path, kind)
    out = tmp_path / "bundle"
    res = build("--model", str(hf), "--wng", wng, "--tp-size", str(tp), "--pp-size", str(pp),
                "--max-batch-size", "16", "--output", str(out))
    assert res.exit_code == 0, res.output
    world = tp * pp

    # step 1: one from_hugging_face per rank, with its Mapping; config saved by rank 0 only
    calls = fake_trtllm_build.calls()
    convert_calls = [c for c in calls if c["call"] == "from_hugging_face" and c["mapping"]["rank"] is not None]
    per_rank = convert_calls[-world:]  # the probe's config check comes first
    assert [c["mapping"] for c in per_rank] == [
        {"world_size": world, "rank": r, "tp_size": tp, "pp_size": pp} for r in range(world)]
    assert {(c["class"], c["hf_dir"], c["dtype"], c["quant_config"]) for c in per_rank} == {
        (cls, str(hf), HF[kind]["torch_dtype"], "QuantConfig")}  # QuantConfig(), as upstream passes it
    saves = [(c["rank"], c["save_config"]) for c in calls if c["call"] == "save_checkpoint"]
    assert saves == [(r, r == 0) for r in range(world)]

    # step 2: the exact argv
    (argv,) = fake_trtllm_build.builds()
    assert argv == [
        "--checkpoint_dir", str(out / "checkpoint"),
        "--output_dir", str(out / ".engine.partial"),
        "--speculative_decoding_mode", "lookahead_decoding",
        "--max_draft_len", str(draft),
        "--max_batch_size", "16",
        "--max_input_len", "2048",
        "--max_seq_len", "4096",
        "--max_num_tokens", "8192",
        "--max_beam_width", "1",
        "--kv_cache_type", "paged",
        "--gemm_plugin", HF[kind]["torch_dtype"],
        "--use_paged_context_fmha", "enable",
        "--workers", str(world),
    ]

    # the bundle
    assert sorted(p.name for p in (out / "engine").iterdir()) == ["config.json"] + [
        f"rank{r}.engine" for r in range(world)]
    assert sorted(p.name for p in (out / "checkpoint").glob("rank*")) == [f"rank{r}.safetensors" for r in range(world)]
    m = manifest(out)
    assert m["model"]["architecture"] == HF[kind]["architectures"][0] and m["model"]["trtllm_class"] == cls
    assert m["lookahead"]["max_draft_len"] == draft and m["parallelism"] == {"tp_size": tp, "pp_size": pp,
                                                                               "world_size": world}
    assert m["limits"]["requested"]["max_seq_len"] == 4096
    assert m["limits"]["engine"]["max_seq_len"] == 4096 + draft  # the builder grew it
    assert m["limits"]["engine"]["max_num_tokens"] == max(8192, 16 * (draft + 1))
    assert m["tensorrt_llm"]["version"] == "0.16.0" and m["gpu"] is None
    assert [c["step"] for c in m["commands"]] == ["probe", "convert", "build"]
    assert m["commands"][2]["argv"][1:] == argv and m["commands"][1]["exit_code"] == 0
    assert m["model"]["config_sha256"] and m["timings"]["total_s"] >= 0
    assert (out / "logs" / "convert.log").is_file() and (out / "logs" / "trtllm-build.log").is_file()
    assert not has_errors(engine_check(out))


def test_engine_limits_as_the_builder_changed_them(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--max-batch-size", "64",
                "--max-num-tokens", "256", "--max-input-len", "1000", "--max-seq-len", "1500", "--output", str(out))
    assert res.exit_code == 0, res.output
    assert "raises max_num_tokens 256 to 512" in res.stderr
    limits = manifest(out)["limits"]
    assert limits["requested"] == {"max_batch_size": 64, "max_input_len": 1000, "max_seq_len": 1500,
                                   "max_num_tokens": 256}
    assert limits["engine"]["max_seq_len"] == 1507 and limits["engine"]["max_num_tokens"] == 512
    assert limits["expected_after_build"]["max_num_tokens"] == 512
    assert limits["origin"]["max_num_tokens"] == "--max-num-tokens"


def test_a_small_engine_gets_trtllm_builds_default_as_it_lowers_it(tmp_path, fake_trtllm_build):
    """One sequence of 4096 tokens: trtllm-build lowers its default max_num_tokens 8192 to 4096
    (check_max_num_tokens); the plan says so, the built engine passes the check against its config, and a
    max_num_tokens given above that cap is refused instead of lowered."""
    out, hf = tmp_path / "b", model(tmp_path, "llama")
    res = build("--model", str(hf), "--wng", "4,2,4", "--max-batch-size", "1",
                "--max-input-len", "2048", "--max-seq-len", "4096", "--output", str(out))
    assert res.exit_code == 0, res.output
    limits = manifest(out)["limits"]
    assert limits["requested"]["max_num_tokens"] == 4096 == limits["engine"]["max_num_tokens"]
    assert "lowered to max_seq_len x max_batch_size" in limits["origin"]["max_num_tokens"]
    assert not has_errors(engine_check(out))
    refused = build("--model", str(hf), "--wng", "4,2,4", "--max-batch-size", "1",
                    "--max-input-len", "2048", "--max-seq-len", "4096", "--max-num-tokens", "8192",
                    "--output", str(tmp_path / "c"))
    assert refused.exit_code == 2 and "--max-num-tokens" in refused.stderr
    assert "max_num_tokens 8192 is above max_seq_len 4096 x max_batch_size 1 = 4096" in refused.stderr
    assert not (tmp_path / "c").exists()


def test_deployment_config_and_extra_options(tmp_path, fake_trtllm_build):
    hf = model(tmp_path, "qwen2", "Qwen2-7B")
    cfg = tmp_path / "deploy.yml"
    cfg.write_text("model: {name: Qwen2-7B, models_dir: models, served_name: qwen}\n"
                   "lookahead: {spec: '7,7,7', request_default: [2, 2, 1]}\nserve: {port: 9000}\n"
                   "build: {max_batch_size: 4}\n")
    out = tmp_path / "b"
    res = build("--config", str(cfg), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 0, res.output
    data = yaml.safe_load((out / "trtlade.yml").read_text())
    cfg_obj = TrtladeConfig.model_validate(data)
    assert cfg_obj.model.path == hf.resolve() and cfg_obj.model.tokenizer == hf.resolve()
    assert cfg_obj.model.served_name == "qwen" and cfg_obj.serve.port == 9000  # kept from the input config
    assert str(cfg_obj.build.engine_dir) == "engine" and cfg_obj.serve.engine == "trtllm"
    assert cfg_obj.lookahead.spec.as_tuple() == (4, 2, 4)  # --wng over the config's 7,7,7
    assert cfg_obj.lookahead.request_default.as_tuple() == (2, 2, 1)
    assert cfg_obj.build.max_batch_size == 4
    extra = yaml.safe_load((out / "extra_llm_api_options.yml").read_text())
    assert extra == {"speculative_config": {"decoding_type": "Lookahead", "max_window_size": 4,
                                            "max_ngram_size": 2, "max_verification_set_size": 4},
                     "kv_cache_config": {"enable_block_reuse": False}}  # as trtlade serve and Triton: explicit
    text = (out / "extra_llm_api_options.yml").read_text()
    assert "0.16 to 0.18" in text and "LLM API's own default is on" in text
    # the fake toolchain is 0.16: trtllm-serve's engine path is its default there, no --backend
    assert f"#   trtllm-serve engine --tokenizer {hf.resolve()}" in text and "--backend" in text


def test_the_release_named_is_the_bundles_and_must_be_the_installed_one(tmp_path, fake_trtllm_build):
    hf = model(tmp_path, "llama")
    out = tmp_path / "b"
    res = build("--model", str(hf), "--wng", "4,2,4", "--trtllm-version", "0.16.0", "--output", str(out))
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((out / "trtlade.yml").read_text())["build"]["trtllm_version"] == "0.16.0"
    assert CliRunner().invoke(app, ["validate-config", str(out / "trtlade.yml")]).exit_code == 0
    other = tmp_path / "c"
    res = build("--model", str(hf), "--wng", "4,2,4", "--trtllm-version", "1.2.1", "--output", str(other))
    assert res.exit_code == 2 and "the bundle is for TensorRT-LLM 1.2.1 but 0.16.0 is installed" in res.stderr
    assert "--trtllm-version 0.16.0" in res.stderr
    assert len(fake_trtllm_build.builds()) == 1  # the first build's: the refused one ran no trtllm-build
    assert_not_complete(other)


def test_tampered_bundle_is_caught(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    assert build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(out)).exit_code == 0
    assert not has_errors(engine_check(out))
    ok = CliRunner().invoke(app, ["validate-config", str(out / "trtlade.yml")])
    assert ok.exit_code == 0 and "engine" in ok.stdout and "checked" in ok.stdout, ok.output
    path = out / "trtlade.yml"
    path.write_text(path.read_text().replace("window_size: 4", "window_size: 5"))
    codes = [d.code for d in engine_check(out) if d.is_error]
    assert "engine-max-draft-len" in codes
    bad = CliRunner().invoke(app, ["validate-config", str(out / "trtlade.yml")])
    assert bad.exit_code == 1 and "max_draft_len 7" in bad.stdout + bad.stderr


def test_tampered_engine_is_caught(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    assert build("--model", str(model(tmp_path, "qwen2")), "--wng", "4,2,4", "--tp-size", "2",
                 "--output", str(out)).exit_code == 0
    cfg_path = out / "engine" / "config.json"
    engine = json.loads(cfg_path.read_text())
    engine["pretrained_config"]["mapping"].update(world_size=1, tp_size=1)
    cfg_path.write_text(json.dumps(engine))
    bad = CliRunner().invoke(app, ["validate-config", str(out / "trtlade.yml")])
    assert bad.exit_code == 1 and "tp_size" in bad.stdout + bad.stderr


# ------------------------------------------------------------------------------ idempotence / --force
def test_failed_build_leaves_nothing_complete_and_rerun_skips_conversion(tmp_path, fake_trtllm_build):
    hf = model(tmp_path, "llama")
    out = tmp_path / "b"
    fake_trtllm_build.fail_build("No available XQA kernels are found for speculative decoding mode.")
    res = build("--model", str(hf), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 1
    assert "No available XQA kernels" in res.stderr  # the log tail
    assert "upgrade TensorRT-LLM" in res.stderr and "another GPU" in res.stderr  # what to try
    assert_not_complete(out)
    assert not (out / "engine").exists()
    assert (out / "checkpoint" / "trtlade-checkpoint.json").is_file()  # the finished conversion is kept
    converted = len([c for c in fake_trtllm_build.calls() if c["call"] == "save_checkpoint"])

    fake_trtllm_build._mp.delenv("TRTLADE_FAKE_TRTLLM_BUILD_FAIL")
    res = build("--model", str(hf), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 0, res.output
    assert "skip" in res.stderr and "same inputs" in res.stderr
    assert len([c for c in fake_trtllm_build.calls() if c["call"] == "save_checkpoint"]) == converted
    m = manifest(out)
    assert m["checkpoint"]["reused"] is True and m["commands"][1]["skipped"] is True


def test_existing_bundle_needs_force_and_force_rebuilds(tmp_path, fake_trtllm_build):
    hf = model(tmp_path, "llama")
    out = tmp_path / "b"
    assert build("--model", str(hf), "--wng", "4,2,4", "--output", str(out)).exit_code == 0
    before = (out / "trtlade-manifest.json").read_bytes()
    again = build("--model", str(hf), "--wng", "4,2,4", "--output", str(out))
    assert again.exit_code == 2 and "already holds a complete trtlade bundle" in again.stderr
    assert "--force" in again.stderr
    assert (out / "trtlade-manifest.json").read_bytes() == before and len(fake_trtllm_build.builds()) == 1

    forced = build("--model", str(hf), "--wng", "7,7,7", "--output", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    m = manifest(out)
    assert m["lookahead"]["max_draft_len"] == 83 and m["checkpoint"]["reused"] is True  # same conversion inputs
    assert read_engine_config(out / "engine").max_draft_len == 83

    # another dtype is another conversion
    forced = build("--model", str(hf), "--wng", "7,7,7", "--dtype", "bfloat16", "--output", str(out), "--force")
    assert forced.exit_code == 0 and manifest(out)["checkpoint"]["reused"] is False
    # a changed HF config is another conversion too
    cfg = json.loads((hf / "config.json").read_text())
    cfg["rope_theta"] = 500000.0
    (hf / "config.json").write_text(json.dumps(cfg))
    (hf / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    forced = build("--model", str(hf), "--wng", "7,7,7", "--dtype", "bfloat16", "--output", str(out), "--force")
    assert forced.exit_code == 0 and manifest(out)["checkpoint"]["reused"] is False


def test_no_keep_checkpoint_removes_it(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(out),
                "--no-keep-checkpoint")
    assert res.exit_code == 0, res.output
    assert not (out / "checkpoint").exists() and manifest(out)["checkpoint"]["dir"] is None
    assert (out / "engine" / "rank0.engine").is_file()


def test_foreign_output_folder_is_refused(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 2 and "notes.txt" in res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# ------------------------------------------------------------------------------ refusals
def test_qwen3_on_stock_016_is_refused_before_anything_is_written(tmp_path, fake_trtllm_build):
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "qwen3")), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 1
    assert "Unsupported Qwen type: qwen3" in res.stderr and "TensorRT-LLM 0.16.0" in res.stderr
    assert ">= 1.0" in res.stderr and "patched" in res.stderr  # the hint
    assert not out.exists() and fake_trtllm_build.builds() == []
    assert not [c for c in fake_trtllm_build.calls() if c["call"] == "save_checkpoint"]


def test_qwen3_builds_on_10(tmp_path, fake_trtllm_build):
    fake_trtllm_build.set_version("1.0.0")
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "qwen3")), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 0, res.output
    assert manifest(out)["tensorrt_llm"]["version"] == "1.0.0"


@pytest.mark.parametrize("version, fragment", [
    ("1.3.0", "removed the TensorRT-engine backend"),
    ("1.3.0rc2", "too new"),
    ("0.15.0", "too old"),
])
def test_versions_outside_the_range_are_refused(tmp_path, fake_trtllm_build, version, fragment):
    fake_trtllm_build.set_version(version)
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(out))
    assert res.exit_code == 1
    assert f"TensorRT-LLM {version}" in res.stderr and fragment in res.stderr
    assert "0.16 <= version < 1.3" in res.stderr
    if version.startswith("1.3"):  # the model-free equivalent on the PyTorch backend, and how to build it
        assert "trtlade build --speculation sa" in res.stderr and "decoding_type: SA" in res.stderr
        assert ".[trtllm-engine]" in res.stderr
    assert not out.exists()


def test_missing_tensorrt_llm_says_how_to_install(tmp_path, fake_trtllm_build):
    fake_trtllm_build.remove()
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(out),
                "--backend", "trtllm")
    assert res.exit_code == 1
    assert "TensorRT-LLM is not installed" in res.stderr
    assert "pip install -e '.[trtllm-engine]'" in res.stderr and "NGC" in res.stderr
    assert not out.exists()


def test_gemma3_below_its_first_release_is_refused_before_any_conversion(tmp_path, fake_trtllm_build):
    fake_trtllm_build.set_version("0.18.2")  # the double is no installed distribution: the probe checks
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "gemma3")), "--wng", "4,2,4", "--output", str(out),
                "--max-input-len", "256", "--max-seq-len", "505")  # within Gemma 3's 512-token window
    assert res.exit_code == 1
    assert "TensorRT-LLM 0.18.2 does not convert Gemma3ForCausalLM" in res.stderr and "0.19.0" in res.stderr
    assert not out.exists() and fake_trtllm_build.builds() == []
    assert not [c for c in fake_trtllm_build.calls() if c["call"] in ("from_hugging_face", "save_checkpoint")]


def test_unknown_architecture_is_refused_without_running_anything(tmp_path, fake_trtllm_build):
    res = build("--model", str(model(tmp_path, "phi")), "--wng", "4,2,4", "--output", str(tmp_path / "b"))
    assert res.exit_code == 1 and "PhiForCausalLM" in res.stderr and "Unsupported model architecture" in res.stderr
    assert fake_trtllm_build.calls() == [] and not (tmp_path / "b").exists()


def test_builder_rejecting_a_checkpoint_architecture_gets_a_hint(tmp_path, fake_trtllm_build):
    fake_trtllm_build.fail_build("Unsupported model architecture: FooForCausalLM")
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(tmp_path / "b"))
    assert res.exit_code == 1 and "trtlade builds:" in res.stderr and "LlamaForCausalLM" in res.stderr
    assert_not_complete(tmp_path / "b")


def test_out_of_memory_gets_a_hint(tmp_path, fake_trtllm_build):
    fake_trtllm_build.fail_build("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory")
    res = build("--model", str(model(tmp_path, "llama")), "--wng", "4,2,4", "--output", str(tmp_path / "b"))
    assert res.exit_code == 1 and "ran out of memory" in res.stderr and "--max-batch-size" in res.stderr
    assert "cudaMalloc" in res.stderr  # the log tail


def test_config_tokenizer_is_kept_and_made_absolute(tmp_path, fake_trtllm_build):
    hf = model(tmp_path, "llama")
    (tmp_path / "tok").mkdir()
    cfg = tmp_path / "deploy.yml"
    cfg.write_text(f"model: {{path: {hf}, tokenizer: tok}}\nlookahead: {{spec: '4,2,4'}}\n")
    out = tmp_path / "b"
    res = build("--config", str(cfg), "--output", str(out))
    assert res.exit_code == 0, res.output
    data = yaml.safe_load((out / "trtlade.yml").read_text())
    assert data["model"]["tokenizer"] == str((tmp_path / "tok").resolve())


def test_gemma3_builds_on_019_through_the_fake_builder(tmp_path, fake_trtllm_build):
    """trtlade converts Gemma 3 from 0.19 on, and trtllm-build takes it (MODEL_MAP maps it to GemmaForCausalLM)."""
    fake_trtllm_build.set_version("0.19.0")
    out = tmp_path / "b"
    res = build("--model", str(model(tmp_path, "gemma3")), "--wng", "4,2,4", "--output", str(out),
                "--max-input-len", "256", "--max-seq-len", "505")  # within Gemma 3's 512-token window
    assert res.exit_code == 0, res.output + res.stderr
    assert manifest(out)["tensorrt_llm"]["version"] == "0.19.0" and len(fake_trtllm_build.builds()) == 1
    engine = json.loads((out / "engine" / "config.json").read_text())
    assert engine["pretrained_config"]["sliding_window"] == 512 and engine["build_config"]["max_seq_len"] == 512
    assert not [d for d in engine_check(out) if d.severity == "error"]


@pytest.mark.parametrize("version, flag", [("0.19.0", ""), ("0.21.0", ""), ("1.0.0", "--backend trt"),
                                           ("1.1.0", "--backend tensorrt"), ("1.2.0", "--backend tensorrt"),
                                           (None, "--backend trt")])
def test_the_trtllm_serve_command_is_spelled_for_the_release(version, flag):
    from trtlade.builder.bundle import trtllm_serve_backend

    got, why = trtllm_serve_backend(version)
    assert got == flag and ("#5717" in why or "#7829" in why)


def test_block_reuse_in_the_llm_api_options_follows_the_config(tmp_path, fake_trtllm_build):
    cfg = tmp_path / "deploy.yml"
    cfg.write_text(f"model: {{path: {model(tmp_path, 'llama')}}}\nlookahead: {{spec: '4,2,4'}}\n"
                   "serve: {kv_cache_enable_block_reuse: true}\n")
    out = tmp_path / "b"
    assert build("--config", str(cfg), "--output", str(out)).exit_code == 0
    extra = yaml.safe_load((out / "extra_llm_api_options.yml").read_text())
    assert extra["kv_cache_config"] == {"enable_block_reuse": True}

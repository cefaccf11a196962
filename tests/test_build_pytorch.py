"""trtlade build --speculation: a bundle for TensorRT-LLM's PyTorch backend (no engine): the plan, the files,
the checks before anything is written, and what validate-config makes of the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hf_folders import write_hf_folder
from trtlade.builder.errors import BuildError
from trtlade.builder.plan import BuildOptions, make_plan
from trtlade.cli.main import app
from trtlade.config.validate import validate_file
from trtlade.spec import LookaheadSpec

runner = CliRunner()


@pytest.fixture
def qwen3(tmp_path) -> Path:
    return write_hf_folder(tmp_path / "Qwen3-8B", "qwen3")


def plan(qwen3: Path, tmp_path: Path, **options):
    opts = {"model": str(qwen3), "output": tmp_path / "out", "trtllm_version": "1.3.0", **options}
    return make_plan(BuildOptions(**opts), config={}, trtllm_present=False, env={}, cwd=tmp_path)


@pytest.mark.parametrize("name, block", [
    ("sa", {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}),
    ("ngram", {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}),
    ("auto", {"decoding_type": "AUTO"}),
    ("sa-8-3", {"decoding_type": "SA", "max_draft_len": 8, "max_matching_ngram_size": 3}),
])
def test_the_plan_names_the_drafter_the_release_and_converts_nothing(qwen3, tmp_path, name, block):
    p = plan(qwen3, tmp_path, speculation=name)
    assert (p.backend, p.release, dict(p.speculation)) == ("pytorch", "1.3.0", block)
    text = p.render()
    assert "pytorch backend: TensorRT-LLM 1.3.0, no engine" in text and "trtllm-build" not in text
    assert f"trtllm-serve {qwen3} --config {tmp_path / 'out' / 'trtllm-serve.yml'}" in text


@pytest.mark.parametrize("options, where, fragment", [
    ({"speculation": "sa", "trtllm_version": "1.2.1"}, "--speculation", "has no SA drafter"),
    ({"speculation": "ngram", "trtllm_version": "0.19.0"}, "--trtllm-version", "no model-free drafter"),
    ({"speculation": "ngram-0"}, "--speculation", "max_draft_len must be > 0"),
    ({"speculation": "sa", "backend": "trtllm"}, "--speculation", "PyTorch backend, not with --backend trtllm"),
])
def test_refused_before_anything_is_written(qwen3, tmp_path, options, where, fragment):
    with pytest.raises(BuildError) as err:
        plan(qwen3, tmp_path, **options)
    assert err.value.where == where and fragment in err.value.message and err.value.hint
    assert not (tmp_path / "out").exists()


def test_the_trtllm_serve_command_listens_where_the_config_says(qwen3, tmp_path):
    cfg = tmp_path / "src.yml"
    cfg.write_text(f"model: {{path: {qwen3}}}\nbuild: {{backend: pytorch, trtllm_version: 1.3.0}}\n"
                   "speculation: {decoding_type: SA, max_draft_len: 4}\nserve: {host: 0.0.0.0, port: 9000}\n")
    result = runner.invoke(app, ["build", "--config", str(cfg), "-o", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    command = json.loads((tmp_path / "b" / "trtlade-manifest.json").read_text())["serve_command"]
    assert command.endswith("--host 0.0.0.0 --port 9000")
    assert command in (tmp_path / "b" / "trtllm-serve.yml").read_text()


def test_an_architecture_the_pytorch_backend_does_not_load_is_refused(tmp_path):
    folder = write_hf_folder(tmp_path / "m", "llama3")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    with pytest.raises(BuildError) as err:
        plan(folder, tmp_path, speculation="sa")
    assert "does not load GPT2LMHeadModel" in err.value.message and err.value.where.endswith("architectures[0]")


def test_the_bundle_holds_the_serve_config_the_deployment_config_and_the_manifest(qwen3, tmp_path):
    result = runner.invoke(app, ["build", "--model", str(qwen3), "--speculation", "sa", "--trtllm-version", "1.3.0",
                                 "-o", str(tmp_path / "b"), "--max-batch-size", "16"])
    assert result.exit_code == 0, result.output
    bundle = tmp_path / "b"
    serve = yaml.safe_load((bundle / "trtllm-serve.yml").read_text())
    assert "backend" not in serve and serve["max_batch_size"] == 16  # TorchLlmArgs.backend is deprecated from 1.3
    assert serve["speculative_config"] == {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}
    manifest = json.loads((bundle / "trtlade-manifest.json").read_text())
    assert manifest["tensorrt_llm"] == {"version": "1.3.0", "origin": "--trtllm-version", "backend": "pytorch"}
    assert set(manifest["checksums"]["model"]) >= {"config.json", "tokenizer_config.json"}
    assert manifest["serve_command"].startswith(f"trtllm-serve {qwen3} --config ")
    assert manifest["serve_command"].endswith("--host 127.0.0.1 --port 8000")  # trtlade's defaults: not exposed
    assert "trtllm-serve" in result.output and "trtlade serve --config" in result.output
    for name in ("trtllm-serve.yml", "trtlade.yml"):
        report = validate_file(bundle / name, release="1.3.0")
        assert report.valid(strict=True), [d.format_text() for d in report.diagnostics]
    deployed = yaml.safe_load((bundle / "trtlade.yml").read_text())
    assert deployed["build"]["backend"] == "pytorch" and deployed["build"]["trtllm_version"] == "1.3.0"
    assert deployed["serve"]["engine"] == "trtllm" and "lookahead" not in deployed


def test_flags_a_pytorch_bundle_has_no_use_for_are_noted(qwen3, tmp_path):
    """Nothing is converted, and max_input_len counts only as max_seq_len's default: said, not dropped."""
    said = plan(qwen3, tmp_path, speculation="ngram", keep_checkpoint=True, max_input_len=100, max_seq_len=5000).notes
    assert any("--max-input-len, --keep-checkpoint/--no-keep-checkpoint not used by a PyTorch-backend bundle" in n
               for n in said)
    sized = plan(qwen3, tmp_path, speculation="ngram", max_input_len=100).notes
    assert not any("not used" in n for n in sized)  # it sizes max_seq_len


def test_the_release_defaults_to_the_newest_read_with_a_note(qwen3, tmp_path):
    p = make_plan(BuildOptions(model=str(qwen3), output=tmp_path / "o", speculation="ngram"), config={},
                  trtllm_present=False, env={}, cwd=tmp_path)
    assert p.release == "1.3.0rc25" and any("newest release trtlade has read" in n for n in p.notes)


def test_a_config_with_a_speculation_block_builds_for_the_pytorch_backend(qwen3, tmp_path):
    config = {"model": {"path": str(qwen3)}, "build": {"backend": "pytorch", "trtllm_version": "1.3.0"},
              "speculation": {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 5,
                              "max_concurrency": 16}}
    p = make_plan(BuildOptions(output=tmp_path / "o"), config=config, trtllm_present=False, env={}, cwd=tmp_path)
    assert p.backend == "pytorch" and dict(p.speculation)["max_concurrency"] == 16


def test_a_serve_file_tensorrt_llm_would_refuse_is_never_written(qwen3, tmp_path, monkeypatch):
    """The last check before writing: the file, read as the release's TorchLlmArgs reads it."""
    import trtlade.builder.pytorch as pytorch

    real = pytorch.serve_options
    monkeypatch.setattr(pytorch, "serve_options", lambda **kw: {**real(**kw), "kv_cache_config": {"dtype": "fp9"}})
    result = runner.invoke(app, ["build", "--model", str(qwen3), "--speculation", "sa", "--trtllm-version", "1.3.0",
                                 "-o", str(tmp_path / "b")])
    assert result.exit_code == 1
    assert "would refuse" in result.output and "kv_cache_config.dtype" in result.output
    assert not (tmp_path / "b" / "trtllm-serve.yml").exists()


def test_a_config_section_the_pytorch_bundle_cannot_keep_is_refused_before_anything_is_written(qwen3, tmp_path):
    """The input config's other sections go into the bundle as they are: a reference-engine policy under
    --speculation would make a trtlade.yml that validate-config refuses, so the plan is refused at that key."""
    config = {"lookahead": {"spec": "2,4,2", "policy": "auto"}}
    with pytest.raises(BuildError) as err:
        make_plan(BuildOptions(model=str(qwen3), output=tmp_path / "out", trtllm_version="1.3.0", speculation="sa",
                               config_path=tmp_path / "deploy.yml"), config=config, trtllm_present=False, env={},
                  cwd=tmp_path)
    assert err.value.where == f"{tmp_path / 'deploy.yml'}:lookahead.policy"
    assert "would not pass validate-config" in err.value.message and "needs the reference engine" in err.value.message
    assert not (tmp_path / "out").exists()


def test_wng_beside_speculation_is_refused_not_dropped(qwen3, tmp_path):
    with pytest.raises(BuildError) as err:
        plan(qwen3, tmp_path, speculation="ngram", spec=LookaheadSpec(4, 2, 4))
    assert err.value.where == "--wng" and "--speculation" in err.value.message and err.value.hint == "give one of them"


def test_a_pytorch_bundle_is_trtlades_own_and_a_rebuild_leaves_no_stale_serve_file(qwen3, tmp_path):
    """A second build into it said `trtllm-serve.yml` was not from trtlade build; a --force rebuild as a Lookahead
    bundle (reference backend) kept it, and validate-config then refused the two files that disagree."""
    out = tmp_path / "b"
    first = ["build", "--model", str(qwen3), "--speculation", "sa", "--trtllm-version", "1.3.0", "-o", str(out)]
    assert runner.invoke(app, first).exit_code == 0
    again = runner.invoke(app, first)
    assert again.exit_code == 2 and "already holds a complete trtlade bundle" in again.output, again.output
    rebuilt = runner.invoke(app, ["build", "--model", str(qwen3), "--wng", "2,2,2", "--backend", "reference", "-o",
                                  str(out), "--force"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert not (out / "trtllm-serve.yml").exists()


def test_a_trtlade_yml_of_the_users_in_the_output_folder_is_never_written_over(qwen3, tmp_path):
    """`build --config deploy/trtlade.yml -o deploy` replaced the user's commented config (without --force)."""
    out = tmp_path / "deploy"
    out.mkdir()
    mine = "# my deployment, commented\nlookahead:\n  spec: 2,2,2\n"
    (out / "trtlade.yml").write_text(mine)
    for force in ([], ["--force"]):
        result = runner.invoke(app, ["build", "--model", str(qwen3), "--config", str(out / "trtlade.yml"),
                                     "--backend", "reference", "-o", str(out), *force])
        assert result.exit_code == 2 and "is not a file trtlade build wrote" in " ".join(result.output.split())
        assert (out / "trtlade.yml").read_text() == mine and sorted(p.name for p in out.iterdir()) == ["trtlade.yml"]


def test_wng_beside_a_configs_pytorch_backend_is_refused_not_dropped(qwen3, tmp_path):
    """--wng with --speculation was refused; with build.backend: pytorch in the config, the bundle was SA and the
    (W,N,G) nowhere."""
    cfg = tmp_path / "pt.yml"
    cfg.write_text("build: {backend: pytorch, trtllm_version: 1.3.0}\nspeculation: {decoding_type: SA, max_draft_len: "
                   "4}\n")
    result = runner.invoke(app, ["build", "--model", str(qwen3), "--config", str(cfg), "--wng", "4,2,4", "-o",
                                 str(tmp_path / "b"), "--dry-run"])
    assert result.exit_code == 2 and "--wng would be dropped" in " ".join(result.output.split()), result.output


def test_a_speculation_block_alone_for_an_engine_build_says_the_backend_is_missing(qwen3, tmp_path):
    """It was refused at `lookahead.spec: (1,1,0) has max_draft_len 0`, a key the file does not hold."""
    cfg = tmp_path / "s.yml"
    cfg.write_text("speculation: {decoding_type: SA, max_draft_len: 4}\n")
    result = runner.invoke(app, ["build", "--model", str(qwen3), "--config", str(cfg), "--backend", "trtllm",
                                 "-o", str(tmp_path / "b"), "--dry-run"])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "gives a speculation block and no lookahead.spec" in said, result.output
    assert "build.backend: pytorch" in said


def test_a_configs_speculation_the_release_lacks_is_located_in_the_file(qwen3, tmp_path):
    cfg = tmp_path / "s.yml"
    cfg.write_text("build: {backend: pytorch, trtllm_version: 1.2.0}\nspeculation: {decoding_type: SA, max_draft_len: "
                   "4}\n")
    result = runner.invoke(app, ["build", "--model", str(qwen3), "--config", str(cfg), "-o", str(tmp_path / "b"),
                                 "--dry-run"])
    assert result.exit_code == 1 and f"{cfg}:2:14: speculation: TensorRT-LLM 1.2.0 has no SA drafter" in \
        " ".join(result.output.split()), result.output

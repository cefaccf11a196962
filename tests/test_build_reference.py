"""`trtlade build --backend reference`: the bundle for the PyTorch reference engine, and the CPU path
build -> validate-config -> serve -> bench end to end on the embedded model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hf_configs import HF_CONFIGS
from trtlade.cli.main import app
from trtlade.config.schema import TrtladeConfig


def tiny_model(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "torch_dtype": "float32"}))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    return folder


def test_reference_bundle_points_at_the_hf_folder(tmp_path):
    hf = tiny_model(tmp_path)
    out = tmp_path / "bundle"
    runner = CliRunner()
    res = runner.invoke(app, ["build", "--model", str(hf), "--wng", "4,2,4", "--backend", "reference",
                              "--max-batch-size", "4", "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["trtlade-manifest.json", "trtlade.yml"]
    data = yaml.safe_load((out / "trtlade.yml").read_text())
    cfg = TrtladeConfig.model_validate(data)
    assert cfg.model.path == hf.resolve() and cfg.serve.engine == "reference" and cfg.build.backend == "reference"
    assert cfg.build.engine_dir is None and cfg.lookahead.spec.as_tuple() == (4, 2, 4)
    assert data["build"] == {"backend": "reference", "max_batch_size": 4}  # only what was asked for
    m = json.loads((out / "trtlade-manifest.json").read_text())
    assert m["backend"] == "reference" and m["tensorrt_llm"] is None and m["engine"] is None
    assert m["model"]["architecture"] == "LlamaForCausalLM" and m["lookahead"]["max_draft_len"] == 7
    assert m["limits"]["requested"] == {"max_batch_size": 4}
    check = runner.invoke(app, ["validate-config", str(out / "trtlade.yml")])
    assert check.exit_code == 0, check.output
    again = runner.invoke(app, ["build", "--model", str(hf), "--wng", "4,2,4", "--backend", "reference",
                                "--output", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr


@pytest.mark.slow
def test_cpu_path_build_validate_serve_bench(tmp_path):
    """No model named and no TensorRT-LLM: the embedded SmolLM2 on the reference engine, end to end."""
    out = tmp_path / "bundle"
    runner = CliRunner()
    res = runner.invoke(app, ["build", "--wng", "4,2,4", "--output", str(out)])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load((out / "trtlade.yml").read_text())
    assert cfg["serve"]["engine"] == "reference" and cfg["model"]["served_name"] == "SmolLM2-135M-Instruct"
    assert runner.invoke(app, ["validate-config", str(out / "trtlade.yml")]).exit_code == 0
    proc = subprocess.run(
        [sys.executable, "-m", "trtlade", "bench", "--launch", str(out / "trtlade.yml"), "--max-concurrency", "1",
         "--num-prompts", "1", "--num-warmups", "0", "--max-tokens", "4", "--modes", "ar,lookahead",
         "--result-dir", str(tmp_path / "reports")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = list((tmp_path / "reports").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert "SmolLM2-135M-Instruct" in json.dumps(summary)
    assert "1/1 ok" in proc.stdout + proc.stderr


def test_a_row_budget_the_reference_engine_refuses_is_refused_at_its_flag(tmp_path):
    from trtlade.builder.errors import BuildError
    from trtlade.builder.plan import BuildOptions, make_plan
    from trtlade.spec import LookaheadSpec

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS["llama"]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    options = BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), backend="reference", max_batch_size=64,
                           max_num_tokens=16, output=tmp_path / "out")
    with pytest.raises(BuildError) as err:
        make_plan(options, config={}, env={}, cwd=tmp_path)
    assert err.value.where == "--max-num-tokens" and "max_num_tokens 16 is below build.max_batch_size 64" in \
        err.value.message and "max_num_tokens >= 64" in err.value.hint


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_output_that_cannot_be_a_folder_is_refused_without_a_traceback(tmp_path, dry_run):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS["llama"]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for output, fragment in ((a_file, "is a file, not a folder"), (a_file / "sub", "notes.txt is a file")):
        res = CliRunner().invoke(app, ["build", "--model", str(folder), "--wng", "4,2,4", "--backend", "reference",
                                       "--output", str(output), "--force", *(["--dry-run"] if dry_run else [])])
        assert res.exit_code == 2 and fragment in res.stderr and "--output" in res.stderr, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)
    assert a_file.read_text() == "mine"

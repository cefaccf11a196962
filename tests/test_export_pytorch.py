"""Exports of a PyTorch-backend bundle (TensorRT-LLM 1.3 and later): Triton's llmapi model loaded the way the
stock model.py loads it, Kubernetes running trtllm-serve behind the validate-config gate, grps refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hf_folders import write_hf_folder
from test_export import _config_by_name, _stock_view, _validated
from trtlade.cli.main import app
from trtlade.config.validate import validate_file


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def bundle(tmp_path) -> Path:
    model = write_hf_folder(tmp_path / "Qwen3-8B", "qwen3")
    result = cli("build", "--model", str(model), "--speculation", "sa", "--trtllm-version", "1.3.0", "-o",
                 str(tmp_path / "b"), "--max-batch-size", "16")
    assert result.exit_code == 0, result.output
    return tmp_path / "b"


def test_grps_is_refused_by_name_and_nothing_is_written(bundle, tmp_path):
    out = tmp_path / "inference.yml"
    result = cli("export", "grps", str(bundle), "--out", str(out))
    assert result.exit_code == 1 and not out.exists()
    assert "grps_trtllm cannot serve it" in result.output and "executor::Executor" in result.output
    assert "export triton" in result.output  # the hint names what works


# ------------------------------------------------------------------------------------ Triton (llmapi)
def stock_load(model_dir: Path, llmapi) -> tuple[dict, object]:
    """What the stock llmapi model.py does with a model repository's model.yaml at load (triton_backend/
    all_models/llmapi/tensorrt_llm/1/model.py@044a90d2: get_model_config, auto_complete_config, initialize):
    triton_config's decoupled and max_batch_size with no fallback, the rest through
    update_llm_args_with_extra_dict({}, ...) into LLM(**args)."""
    from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

    engine_config = yaml.safe_load((model_dir / "1" / "model.yaml").read_text())
    triton_config = {k: v for k, v in engine_config.items() if k in ["triton_config"]}["triton_config"]
    policy = {"decoupled": bool(triton_config["decoupled"]), "max_batch_size": int(triton_config["max_batch_size"])}
    args = update_llm_args_with_extra_dict({}, {k: v for k, v in engine_config.items() if k not in ["triton_config"]})
    return policy, llmapi.LLM(**args)


def test_triton_writes_the_llmapi_model_that_the_stock_loader_starts(bundle, tmp_path, fake_trtllm, monkeypatch):
    monkeypatch.setattr(fake_trtllm, "__version__", "1.3.0")
    import tensorrt_llm.llmapi as llmapi

    out = tmp_path / "repo"
    result = cli("export", "triton", str(bundle), "--out", str(out), "--model-path", "/models/Qwen3-8B")
    assert result.exit_code == 0, result.output
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == \
        [".trtlade-export", "tensorrt_llm/1/model.yaml", "tensorrt_llm/config.pbtxt"]
    assert "triton_backend/all_models/llmapi/tensorrt_llm/1/{model.py,helpers.py}" in result.output
    flags = "docker run --shm-size=2g --ulimit memlock=-1 --ulimit stack=67108864"  # as NVIDIA's guide starts it
    assert flags in " ".join(result.output.split())
    assert f"# Triton: start its container with `{flags}`" in (out / "tensorrt_llm" / "1" / "model.yaml").read_text()
    policy, llm = stock_load(out / "tensorrt_llm", llmapi)
    assert policy == {"decoupled": True, "max_batch_size": 0}
    assert llm.model == "/models/Qwen3-8B"
    spec = llm._kwargs["speculative_config"]
    assert isinstance(spec, llmapi.SADecodingConfig) and (spec.max_draft_len, spec.max_matching_ngram_size) == (4, -1)
    assert llm._kwargs["max_batch_size"] == 16 and "backend" not in llm._kwargs  # deprecated from 1.3 on
    serve = yaml.safe_load((bundle / "trtllm-serve.yml").read_text())  # the same options as trtllm-serve
    written = yaml.safe_load((out / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert {k: v for k, v in written.items() if k not in ("model", "triton_config")} == serve


def test_triton_config_pbtxt_declares_what_the_stock_model_reads_and_sends(bundle, tmp_path):
    from trtlade.export import triton_stock as stock

    out = tmp_path / "repo"
    assert cli("export", "triton", str(bundle), "--out", str(out)).exit_code == 0
    config = _stock_view((out / "tensorrt_llm" / "config.pbtxt").read_text())
    assert (config["name"], config["backend"]) == ("tensorrt_llm", "python")
    # decoupled here too: under launch_triton_server.py (--disable-auto-complete-config) model.yaml's is not applied
    assert config["max_batch_size"] == 0 and config["model_transaction_policy"]["decoupled"] is True
    assert _config_by_name(config, "output", "text_output")["data_type"] == "TYPE_STRING"  # read at initialize()
    assert [t["name"] for t in config["input"]] == [t.name for t in stock.LLMAPI_INPUTS]
    assert {t["name"] for t in config["output"]} >= {"total_draft_tokens", "total_accepted_draft_tokens",
                                                     "acceptance_rate", "finish_reason"}
    written = yaml.safe_load((out / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert written["model"] == str((bundle.parent / "Qwen3-8B").resolve())  # default: the bundle's model.path


def test_the_model_yaml_is_its_own_validate_config_gate(bundle, tmp_path):
    out = tmp_path / "repo"
    assert cli("export", "triton", str(bundle), "--out", str(out)).exit_code == 0
    path = out / "tensorrt_llm" / "1" / "model.yaml"
    report = validate_file(path, release="1.3.0")
    assert report.kind == "triton-llmapi" and report.valid(strict=True), [d.format_text() for d in report.diagnostics]
    old = validate_file(path, release="1.2.1")
    assert any(d.code == "trtllm-args-literal" and d.path == "speculative_config.decoding_type"
               for d in old.diagnostics)  # SA needs 1.3
    broken = path.read_text().replace("decoupled: true", "stream: true").replace("max_draft_len: 4",
                                                                                "max_draft_len: 0")
    path.write_text(broken)
    found = {(d.code, d.path) for d in validate_file(path, release="1.3.0").diagnostics if d.severity == "error"}
    assert ("llmapi-triton-config", "triton_config") in found
    assert ("trtllm-args-rule", "speculative_config.max_draft_len") in found
    result = cli("validate-config", str(path), "--trtllm-version", "1.3.0")
    assert result.exit_code == 1 and "model.yaml:" in result.output


def test_triton_refuses_options_that_do_not_apply(bundle, tmp_path):
    result = cli("export", "triton", str(bundle), "--out", str(tmp_path / "r"), "--bundle-path", "/x")
    assert result.exit_code == 2 and "--bundle-path" in result.output and not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ Kubernetes
def test_k8s_runs_trtllm_serve_on_the_bundles_config_behind_the_gate(bundle, tmp_path):
    out = tmp_path / "k8s"
    result = cli("export", "k8s", str(bundle), "--out", str(out), "--name", "qwen3", "--model-subpath",
                 "models/Qwen3-8B", "--replicas", "2")
    assert result.exit_code == 0, result.output
    assert "note: trtllm-serve checks no API key" in " ".join(result.output.split())
    docs = _validated(out)
    assert set(docs) == {"configmap.yml", "deployment.yml", "service.yml"}
    pod = docs["deployment.yml"]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert main["command"] == ["trtllm-serve", "/model", "--config", "/etc/trtlade/trtllm-serve.yml", "--host",
                               "0.0.0.0", "--port", "8000"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert main["readinessProbe"]["httpGet"]["path"] == "/health"
    assert {"name": "bundle", "mountPath": "/model", "readOnly": True, "subPath": "models/Qwen3-8B"} in \
        main["volumeMounts"]
    assert pod["initContainers"][0]["command"] == ["trtlade", "validate-config", "/etc/trtlade/trtllm-serve.yml",
                                                   "--upstream", "require"]  # TensorRT-LLM's own classes too
    # importing TensorRT-LLM may need the driver, which a container gets with a GPU; the server inherits the devices
    assert pod["initContainers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert "annotations" not in docs["deployment.yml"]["spec"]["template"]["metadata"]  # /metrics is JSON there
    served = docs["configmap.yml"]["data"]["trtllm-serve.yml"]
    assert served == (bundle / "trtllm-serve.yml").read_text()
    gate = tmp_path / "trtllm-serve.yml"
    gate.write_text(served)
    assert validate_file(gate, release="1.3.0").valid(strict=True)  # what the init container runs


def test_k8s_refuses_an_autoscaler_trtllm_serve_cannot_feed(bundle, tmp_path):
    result = cli("export", "k8s", str(bundle), "--out", str(tmp_path / "k"), "--hpa-max-replicas", "3")
    assert result.exit_code == 2 and "trtlade_requests_queued" in result.output
    assert not (tmp_path / "k").exists()
    keyed = cli("export", "k8s", str(bundle), "--out", str(tmp_path / "k"), "--api-key-secret", "svc-key")
    assert keyed.exit_code == 2 and "trtllm-serve checks no API key" in " ".join(keyed.output.split())
    assert not (tmp_path / "k").exists()


def test_k8s_asks_for_every_gpu_of_a_tensor_parallel_bundle(tmp_path):
    model = write_hf_folder(tmp_path / "Qwen3-8B", "qwen3")
    result = cli("build", "--model", str(model), "--speculation", "ngram", "--trtllm-version", "1.3.0", "-o",
                 str(tmp_path / "b"), "--tp-size", "2")
    assert result.exit_code == 0, result.output
    assert cli("export", "k8s", str(tmp_path / "b"), "--out", str(tmp_path / "k")).exit_code == 0
    deployment = yaml.safe_load((tmp_path / "k" / "deployment.yml").read_text())
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 2 and main["command"][0] == "trtllm-serve"
    assert deployment["spec"]["template"]["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]  # trtllm-serve's MPI workers and NCCL
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in \
        deployment["spec"]["template"]["spec"]["volumes"]
    manifest = json.loads((tmp_path / "b" / "trtlade-manifest.json").read_text())
    assert manifest["tensorrt_llm"]["version"] == "1.3.0"


def test_triton_refuses_a_bundle_whose_options_would_not_load(bundle, tmp_path):
    serve = bundle / "trtllm-serve.yml"
    serve.write_text(serve.read_text().replace("max_matching_ngram_size: -1", "max_matching_ngram_size: 0"))
    result = cli("export", "triton", str(bundle), "--out", str(tmp_path / "r"))
    assert result.exit_code == 1 and not (tmp_path / "r").exists()
    assert "max_matching_ngram_size" in result.output and "validate-config" in result.output


def test_triton_llmapi_export_warns_of_the_serve_settings_it_cannot_carry(bundle, tmp_path):
    """An API key, a port or a queue bound of the bundle's config went nowhere without a word (the engine Triton and
    grps exports said so already)."""
    cfg = bundle / "trtlade.yml"
    text = cfg.read_text()
    assert "\nserve:\n" in text  # build writes the serve section (engine: trtllm)
    cfg.write_text(text.replace("\nserve:\n", "\nserve:\n  api_key_env: MY_KEY\n  port: 9000\n", 1))
    result = cli("export", "triton", str(bundle), "--out", str(tmp_path / "repo"), "--model-path", "/models/Qwen3-8B")
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "warning: serve.api_key_env, serve.port apply to `trtlade serve` only" in said
    assert "checks no API key" in said

"""trtlade export: a grps_trtllm inference yml from a bundle, checked by validate-config's own grps
checks against the bundle's engine (round trip), and every refusal (no bundle, not a TensorRT-LLM
bundle, an existing output) with nothing half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hf_folders import write_hf_folder
from trtlade.cli.main import app
from trtlade.config.validate import validate_file

ENGINES = Path(__file__).resolve().parent / "data" / "engines"


def make_bundle(root: Path, engine: str = "qwen3-8b-424", spec: str = "4,2,4", with_engine: bool = True,
                extra: str = "", family: str | None = "qwen3") -> Path:
    """A bundle as `trtlade build` leaves it (engine config only: no weights are needed to export), its
    model folder beside it with the ``family``'s tokenizer and generation config (None: no folder here)."""
    root.mkdir(parents=True)
    if with_engine:
        shutil.copytree(ENGINES / engine, root / "engine")
    model = write_hf_folder(root.parent / f"{root.name}-hf", family) if family else Path("/models/Qwen3-8B")
    (root / "trtlade.yml").write_text(f"model:\n  path: {model}\nlookahead:\n  spec: {spec}\n{extra}")
    (root / "trtlade-manifest.json").write_text(json.dumps({"format": 1, "backend": "trtllm"}))
    return root


def export(*args: str):
    return CliRunner().invoke(app, ["export", *args])


@pytest.mark.parametrize("target", ["triton", "grps", "k8s"])
@pytest.mark.parametrize("engine, spec, says", [
    ("qwen3-8b-424", "5,3,5", "Assertion failed: maxDraftTokens"),  # the spec needs more draft tokens than built
    ("qwen3-8b-424", "2,2,2", "not caught at start"),           # or fewer: upstream's guide requires equality
    ("qwen3-8b-draft39", "4,2,4", "not caught at start"),
    ("qwen3-8b-plain", "4,2,4", "built without speculative decoding"),  # lookahead on an engine without it
    ("qwen3-8b-424", "1,1,0", "Assertion failed: 16 != 8"),     # plain on a Lookahead engine: no executor spec
])
def test_every_export_refuses_a_spec_its_engine_was_not_built_for(tmp_path, target, engine, spec, says):
    """The server hands the bundle's (W,N,G) to the engine unchecked (Triton's backend, grps, the pod's serve) and
    TensorRT-LLM fails at start: refused at export, as validate-config refuses it."""
    bundle = make_bundle(tmp_path / "qwen3", engine=engine, spec=spec)
    out = tmp_path / ("inference.yml" if target == "grps" else "out")
    args = ["--tokenizer", "/bundle/tokenizer"] if target == "k8s" else []
    result = export(target, str(bundle), "--out", str(out), *args)
    assert result.exit_code == 1 and "does not fit its engine" in result.output, result.output
    assert says in result.output and not out.exists()


def test_grps_export_round_trips_through_validate_config(tmp_path):
    bundle = make_bundle(tmp_path / "qwen3")
    out = tmp_path / "conf" / "inference.yml"
    result = export("grps", str(bundle), "--out", str(out))
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(out.read_text())
    args = data["models"][0]["inferer_args"]
    assert args["lookahead_decoding"] == {"window_size": 4, "ngram_size": 2, "verification_set_size": 4}
    hf = tmp_path / "qwen3-hf"
    assert args["gpt_model_path"] == f"{bundle.resolve()}/engine/" and args["tokenizer_path"] == f"{hf}/"
    assert args["gpt_model_type"] == "inflight_fused_batching"
    report = validate_file(out, engine_dir=bundle / "engine")
    assert report.kind == "grps" and report.valid(), [d.format_text() for d in report.diagnostics]
    assert report.details["models"][0]["spec"] == "4,2,4"
    assert "no per-request" in out.read_text()


@pytest.mark.parametrize("family, style, end, pad, stops", [
    ("qwen3", "qwen3", 151645, 151643, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
    ("qwen2.5", "qwen2.5", 151645, 151643, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
    ("llama3", "llama3", 128009, 128009, ["<|eot_id|>", "<|end_of_text|>"]),
])
def test_grps_export_writes_every_key_grps_reads_with_the_models_style_and_stops(tmp_path, family, style, end,
                                                                                 pad, stops):
    """grps_trtllm's loader (customized_inferer.cc TrtllmInferer::Load, llm_styler.cc, utils.cc): llm_style,
    tokenizer_type, an int end_token_id (else requests run to max_tokens), stop words, skip_special_tokens,
    int lookahead sizes; sampling from generation_config.json."""
    bundle = make_bundle(tmp_path / "b", family=family)
    out = tmp_path / "inference.yml"
    assert export("grps", str(bundle), "--out", str(out)).exit_code == 0
    args = yaml.safe_load(out.read_text())["models"][0]["inferer_args"]
    assert (args["llm_style"], args["tokenizer_type"]) == (style, "huggingface")
    assert type(args["end_token_id"]) is int and (args["end_token_id"], args["pad_token_id"]) == (end, pad)
    assert args["stop_words"] == stops
    assert end in args["skip_special_tokens"] and all(type(t) is int for t in args["skip_special_tokens"])
    assert all(type(v) is int for v in args["lookahead_decoding"].values())
    assert args["sampling"]["temperature"] == json.loads((tmp_path / "b-hf" / "generation_config.json")
                                                         .read_text())["temperature"]
    report = validate_file(out, engine_dir=bundle / "engine")
    assert report.valid() and not [d for d in report.diagnostics if d.code in ("grps-no-end-id", "grps-no-stop-words")]


def test_grps_export_refuses_a_model_no_style_fits_and_takes_an_explicit_one(tmp_path):
    bundle = make_bundle(tmp_path / "b", family="smollm2")  # Llama with a ChatML template
    out = tmp_path / "inference.yml"
    refused = export("grps", str(bundle), "--out", str(out))
    assert refused.exit_code == 1 and "llm_style" in refused.output and "qwen2.5" in refused.output
    assert "--llm-style" in refused.output and not out.exists()
    wrong = export("grps", str(bundle), "--out", str(out), "--llm-style", "chatml")
    assert wrong.exit_code == 2 and "--llm-style" in wrong.output and "not supported now" in wrong.output
    assert export("grps", str(bundle), "--out", str(out), "--llm-style", "qwen2.5").exit_code == 0
    args = yaml.safe_load(out.read_text())["models"][0]["inferer_args"]
    assert args["llm_style"] == "qwen2.5" and args["end_token_id"] == 2 and args["stop_words"][:2] == [
        "<|im_start|>", "<|im_end|>"]


def test_grps_export_reads_the_model_folder_given_with_model_dir(tmp_path):
    bundle = make_bundle(tmp_path / "b", family=None)  # the config's model folder is not on this machine
    out = tmp_path / "inference.yml"
    refused = export("grps", str(bundle), "--out", str(out))
    assert refused.exit_code == 1 and "--model-dir" in refused.output
    hf = write_hf_folder(tmp_path / "here", "qwen3")
    assert export("grps", str(bundle), "--out", str(out), "--model-dir", str(hf)).exit_code == 0
    args = yaml.safe_load(out.read_text())["models"][0]["inferer_args"]
    assert args["llm_style"] == "qwen3" and args["tokenizer_path"] == "/models/Qwen3-8B/"  # as grps sees it


def test_grps_export_paths_as_the_grps_machine_sees_them_and_the_schedule_note(tmp_path):
    extra = "  schedule:\n  - {up_to: 2, spec: '4,2,4'}\n  - {spec: '1,1,0'}\n"
    bundle = make_bundle(tmp_path / "b", extra=extra)
    out = tmp_path / "inference.yml"
    result = export("grps", str(bundle), "--out", str(out), "--bundle-path", "/srv/b", "--tokenizer", "/srv/tok")
    assert result.exit_code == 0, result.output
    args = yaml.safe_load(out.read_text())["models"][0]["inferer_args"]
    assert args["gpt_model_path"] == "/srv/b/engine/" and args["tokenizer_path"] == "/srv/tok/"
    said = "warning: lookahead.schedule cannot apply under grps"
    assert f"# {said}" in out.read_text() and said in " ".join(result.output.split())  # in the file and on stderr


def test_grps_and_triton_exports_carry_the_queue_bound_and_say_what_serve_settings_they_cannot(tmp_path):
    """serve.max_queue became an unbounded queue in both servers (each reads one: grps_trtllm's max_queue_size
    parameter, the TensorRT-LLM backend's dynamic_batching.default_queue_policy.max_queue_size); serve.api_key_env,
    lookahead.request_default and the rest were dropped without a word."""
    bundles = {}
    for release in ("0.16.0", "0.19.0"):  # grps_trtllm's release, and one Triton's backend runs
        bundles[release] = bundle = make_bundle(tmp_path / release, extra=(
            "  request_default: 2,2,2\nserve:\n  engine: trtllm\n  host: 0.0.0.0\n  port: 8000\n  api_key_env: K\n"
            "  max_queue: 8\n  max_tokens_limit: 512\n  kv_cache_free_gpu_memory_fraction: 0.8\n"))
        _engine_version(bundle, release)
    bundle = bundles["0.16.0"]
    grps = export("grps", str(bundle), "--out", str(tmp_path / "g.yml"))
    assert grps.exit_code == 0, grps.output
    assert yaml.safe_load((tmp_path / "g.yml").read_text())["models"][0]["inferer_args"]["max_queue_size"] == 8
    said = " ".join(grps.output.split())
    assert "lookahead.request_default cannot apply under grps" in said
    assert "serve.api_key_env, serve.host, serve.max_tokens_limit, serve.port apply to `trtlade serve` only" in said
    assert "it checks no API key" in said
    triton = export("triton", str(bundles["0.19.0"]), "--out", str(tmp_path / "t"))
    assert triton.exit_code == 0, triton.output
    pbtxt = (tmp_path / "t" / "tensorrt_llm" / "config.pbtxt").read_text()
    assert "default_queue_policy {" in pbtxt and "max_queue_size: 8" in pbtxt
    assert "serve.max_tokens_limit" in " ".join(triton.output.split()) and "it checks no API key" in triton.output


@pytest.mark.parametrize("case,fragment", [
    ("missing", "no such bundle folder"),
    ("not-a-bundle", "no trtlade-manifest.json"),
    ("reference", "holds no TensorRT-LLM engine (engine/config.json): it was built for the reference backend"),
    ("engine-moved", "its manifest says it was built for trtllm: the engine folder is missing"),
    ("bad-manifest", "cannot read"),                                  # it was exported as if whole
    ("exists", "exists"),
])
def test_grps_export_refusals_write_nothing(tmp_path, case, fragment):
    bundle = tmp_path / "b"
    if case == "not-a-bundle":
        bundle.mkdir()
    elif case in ("reference", "engine-moved"):
        make_bundle(bundle, with_engine=False)
        if case == "reference":
            (bundle / "trtlade-manifest.json").write_text(json.dumps({"format": 1, "backend": "reference"}))
    elif case == "bad-manifest":
        make_bundle(bundle)
        (bundle / "trtlade-manifest.json").write_text('{"format": 1, "backe')
    elif case == "exists":
        make_bundle(bundle)
    out = tmp_path / "inference.yml"
    if case == "exists":
        out.write_text("mine\n")
    result = export("grps", str(bundle), "--out", str(out))
    # an --out that exists, a bundle that does not: usage mistakes
    assert result.exit_code == (2 if case in ("exists", "missing") else 1), result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert "hint:" in result.output
    assert result.output.count(str(bundle)) == (case != "exists")  # the folder named once
    assert (out.read_text() == "mine\n") if case == "exists" else not out.exists()
    assert not list(tmp_path.glob(".*partial"))


# ------------------------------------------------------------------------------------ Kubernetes
@pytest.mark.parametrize("target", ["grps", "triton", "k8s"])
def test_an_out_that_cannot_be_written_is_an_error_not_a_traceback(tmp_path, target):
    bundle = tmp_path / "b"
    make_bundle(bundle)
    _engine_version(bundle, "0.16.0" if target == "grps" else "0.19.0")  # a release the stack serves
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    out = blocker / ("inference.yml" if target == "grps" else "out")  # under a file: no folder can be made
    result = export(target, str(bundle) if target != "k8s" else "configs/smollm2-cpu.yml", "--out", str(out))
    assert result.exit_code == 2 and f"cannot write {out}" in result.output and "--out" in result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, OSError)
    assert blocker.read_text() == "mine\n" and not list(tmp_path.glob(".*partial"))


def _validated(folder: Path) -> dict[str, dict]:
    """Every manifest, checked against the Kubernetes schemas (offline, strict: no unknown fields)."""
    import kubernetes_validate

    docs = {}
    for path in sorted(folder.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        kubernetes_validate.validate(doc, "1.30", strict=True)  # raises on any schema violation
        docs[path.name] = doc
    return docs


@pytest.mark.parametrize("args, refused", [
    ([], "model.path"),                                       # this machine's folder: the pod does not see it
    (["--tokenizer", "/models/Qwen3-8B"], "--tokenizer /models/Qwen3-8B"),
    (["--tokenizer", "/bundle/tokenizer"], None),             # on the claim, as the pod sees it
])
def test_k8s_export_refuses_a_tokenizer_the_pod_cannot_see(tmp_path, args, refused):
    bundle = make_bundle(tmp_path / "qwen3")
    result = export("k8s", str(bundle), "--out", str(tmp_path / "k8s"), *args)
    if refused is None:
        assert result.exit_code == 0, result.output
        return
    said = " ".join(result.output.split())
    assert result.exit_code == (2 if args else 1) and refused in said and "is not under /bundle" in said
    assert "--tokenizer /bundle/" in said  # the hint
    assert not (tmp_path / "k8s").exists()


def test_k8s_export_of_a_multi_gpu_bundle_passes_the_kubernetes_schemas(tmp_path):
    bundle = make_bundle(tmp_path / "qwen3", engine="qwen3-8b-424-tp2", extra="build:\n  tp_size: 2\n")
    out = tmp_path / "k8s"
    result = export("k8s", str(bundle), "--out", str(out), "--name", "qwen3", "--tokenizer", "/bundle/tokenizer",
                    "--hpa-max-replicas", "4", "--replicas", "2")
    assert result.exit_code == 0, result.output
    docs = _validated(out)
    assert set(docs) == {"configmap.yml", "deployment.yml", "service.yml", "hpa.yml"}
    pod = docs["deployment.yml"]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert main["command"][:3] == ["mpirun", "-n", "2"] and "serve" in main["command"]
    assert main["readinessProbe"]["httpGet"]["path"] == "/health"
    assert main["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["initContainers"][0]["command"] == ["trtlade", "validate-config", "/etc/trtlade/trtlade.yml",
                                                  "--engine-dir", "/bundle/engine"]
    assert docs["deployment.yml"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert docs["hpa.yml"]["spec"]["maxReplicas"] == 4 and docs["hpa.yml"]["spec"]["minReplicas"] == 2
    assert "replicas" not in docs["deployment.yml"]["spec"]  # the autoscaler's to set: an apply would reset it
    config = yaml.safe_load(docs["configmap.yml"]["data"]["trtlade.yml"])
    assert config["build"]["engine_dir"] == "/bundle/engine" and config["lookahead"]["spec"] == "4,2,4"
    assert config["model"]["tokenizer"] == "/bundle/tokenizer" and config["serve"]["host"] == "0.0.0.0"
    # NCCL and the MPI workers share memory through /dev/shm: memory-backed, sized, on the serving container only
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    assert all(m["name"] != "dshm" for m in pod["initContainers"][0]["volumeMounts"])
    assert "requests" not in main["resources"]  # none asked for


@pytest.mark.parametrize("flags, shm, requests", [
    (["--shm-size", "64Gi", "--cpu", "8", "--memory", "96Gi"], "64Gi", {"cpu": "8", "memory": "96Gi"}),
    (["--shm-size", "0", "--cpu", "500m"], None, {"cpu": "500m"}),
    (["--shm-size", "0Gi", "--memory", "1.5Gi"], None, {"memory": "1.5Gi"}),
])
def test_k8s_gpu_pods_size_dev_shm_and_request_what_is_given(tmp_path, flags, shm, requests):
    bundle = make_bundle(tmp_path / "qwen3", engine="qwen3-8b-424-tp2", extra="build:\n  tp_size: 2\n")
    out = tmp_path / "k8s"
    result = export("k8s", str(bundle), "--out", str(out), "--tokenizer", "/bundle/tokenizer", *flags)
    assert result.exit_code == 0, result.output
    pod = _validated(out)["deployment.yml"]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    shm_volumes = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm_volumes == ([{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}] if shm else [])
    assert any(m["mountPath"] == "/dev/shm" for m in main["volumeMounts"]) == bool(shm)
    assert main["resources"] == {"requests": requests, "limits": {"nvidia.com/gpu": 2}}


def test_k8s_export_of_a_config_needs_no_gpu(tmp_path):
    out = tmp_path / "k8s"
    assert export("k8s", "configs/smollm2-cpu.yml", "--out", str(out)).exit_code == 0
    docs = _validated(out)
    pod = docs["deployment.yml"]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert "resources" not in main and main["command"][:2] == ["trtlade", "serve"]
    assert all(v["name"] != "dshm" for v in pod["volumes"])  # one process, no GPU: the runtime's /dev/shm does
    requested = export("k8s", "configs/smollm2-cpu.yml", "--out", str(tmp_path / "r"), "--cpu", "2", "--memory", "4Gi")
    assert requested.exit_code == 0, requested.output
    main = _validated(tmp_path / "r")["deployment.yml"]["spec"]["template"]["spec"]["containers"][0]
    assert main["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}}
    config = yaml.safe_load(docs["configmap.yml"]["data"]["trtlade.yml"])
    assert config["lookahead"]["schedule"][0] == {"up_to": 1, "spec": "2,3,2"}  # the tuned schedule travels
    again = export("k8s", "configs/smollm2-cpu.yml", "--out", str(out))
    assert again.exit_code == 2 and "exists" in again.output


@pytest.mark.parametrize("model, flags, code, said", [
    ("{name: Qwen3-8B, models_dir: /srv/models}", [], 1, "model.models_dir: model.name Qwen3-8B is looked up under "
                                                         "/srv/models, not under /bundle"),
    ("{name: Qwen3-8B}", [], 1, "under $TRTLADE_MODELS_DIR, which the pod does not set"),
    ("{path: /srv/models/Qwen3-8B}", [], 1, "would not find the model there hint: put the model's folder on the claim "
                                            "and point model.path at /bundle/"),  # its weights: --tokenizer won't do
    ("{}", ["--pvc", "my-claim"], 2, "--pvc: the pod mounts no claim"),  # the embedded model: nothing on a claim
    ("{}", ["--bundle-subpath", "models/x"], 2, "--bundle-subpath: the pod mounts no claim"),
    ("{name: Qwen3-8B, models_dir: /bundle/models}", ["--pvc", "my-claim"], 0, "wrote"),
    ("{name: Qwen3-8B, models_dir: /bundle}", [], 0, "wrote"),          # the claim's mount itself
])
def test_k8s_export_of_a_config_refuses_a_model_or_claim_flag_the_pod_would_not_use(tmp_path, model, flags, code, said):
    """The init gate passed such a pod and `trtlade serve` failed at start ("model not found"), or the flags were
    dropped without a word."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"model: {model}\nlookahead: {{spec: '2,4,2'}}\n")
    result = export("k8s", str(cfg), "--out", str(tmp_path / "k8s"), *flags)
    assert result.exit_code == code and said in " ".join(result.output.split()), result.output
    assert (tmp_path / "k8s").exists() == (code == 0)


@pytest.mark.parametrize("flags, where, fragment", [
    (["--name", "My_App!"], "--name", "is not a Kubernetes Service name"),
    (["--name", ""], "--name", "is not a Kubernetes Service name"),
    (["--name", "a" * 57], "--name", "at most 56 characters"),
    (["--image", "bad image:1"], "--image", "not an image reference"),
    (["--pvc", "Bad PVC"], "--pvc", "not a PersistentVolumeClaim name"),
    (["--bundle-subpath", "../../etc"], "--bundle-subpath", "without '..'"),
    (["--bundle-subpath", "/abs"], "--bundle-subpath", "relative"),
    (["--tokenizer", ""], "--tokenizer", "is empty"),
    (["--memory", "32GB"], "--memory", "not a Kubernetes quantity"),
    (["--cpu", "-2"], "--cpu", "not a Kubernetes quantity"),
    (["--cpu", "two"], "--cpu", "not a Kubernetes quantity"),
    (["--shm-size", "16 Gi"], "--shm-size", "not a Kubernetes quantity"),
    (["--shm-size", ""], "--shm-size", "not a Kubernetes quantity"),
    (["--api-key-secret", "My_Key"], "--api-key-secret", "is not a Secret name"),
])
def test_k8s_values_the_api_server_would_refuse_are_refused_at_export(tmp_path, flags, where, fragment):
    out = tmp_path / "k8s"
    result = export("k8s", "configs/smollm2-cpu.yml", "--out", str(out), *flags)
    assert result.exit_code == 2 and fragment in result.output and where in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("target", ["triton", "k8s"])
def test_force_replaces_only_a_folder_an_earlier_export_wrote(tmp_path, monkeypatch, target):
    """-o <the bundle> --force deleted the bundle, -o .. --force everything beside the folder it ran in; --force now
    replaces an earlier export's folder (its mark) and nothing else, and what it refuses is left as it was."""
    bundle = make_bundle(tmp_path / "work" / "qwen3")
    _engine_version(bundle, "0.19.0")
    extra = ["--tokenizer", "/bundle/tokenizer"] if target == "k8s" else []
    out = tmp_path / "work" / "out"
    assert export(target, str(bundle), "--out", str(out), *extra).exit_code == 0
    assert (out / ".trtlade-export").is_file()
    again = export(target, str(bundle), "--out", str(out), "--force", *extra)
    assert again.exit_code == 0, again.output                                        # its own folder: replaced
    (tmp_path / "work" / "mine").mkdir()
    (tmp_path / "work" / "mine" / "notes.txt").write_text("keep me")
    monkeypatch.chdir(tmp_path / "work" / "out")
    for where, said in ((bundle, "is a bundle"), (tmp_path / "work" / "mine", "files no `trtlade export` wrote "
                                                                           "(notes.txt)"),
                        (Path(".."), "the folder this command runs in, or one above it"),
                        (Path("."), "the folder this command runs in"), (bundle / "trtlade.yml", "is a file")):
        result = export(target, str(bundle), "--out", str(where), "--force", *extra)
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (where, result.output)
    assert (bundle / "engine" / "config.json").is_file() and (tmp_path / "work" / "mine" / "notes.txt").is_file()
    monkeypatch.chdir(tmp_path)
    (out / "copied").mkdir()  # a file of the user's in an export's folder (Triton's model.py copied in): kept
    (out / "copied" / "model.py").write_text("import triton_python_backend_utils\n")
    result = export(target, str(bundle), "--out", str(out), "--force", *extra)
    assert "files no `trtlade export` wrote (copied/model.py)" in " ".join(result.output.split()), result.output
    assert (out / "copied" / "model.py").is_file() and result.exit_code != 0
    shutil.rmtree(out / "copied")
    (out / ".trtlade-export").unlink()  # an export written before the mark: recognised by its files' headers
    assert export(target, str(bundle), "--out", str(out), "--force", *extra).exit_code == 0
    (tmp_path / "empty").mkdir()  # an empty folder: nothing to lose
    assert export(target, str(bundle), "--out", str(tmp_path / "empty"), "--force", *extra).exit_code == 0


def test_k8s_pods_take_their_api_key_from_a_secret_or_say_they_serve_without_one(tmp_path):
    """The pod listens on 0.0.0.0 behind a Service: its key comes from a Secret into the variable the config names,
    or the export says the pod serves without one; a keys file (not in the ConfigMap) is said to be missing."""
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {}\nlookahead: {spec: '2,4,2'}\nserve: {api_key_env: MY_SERVICE_KEY}\n")
    bare = export("k8s", str(cfg), "--out", str(tmp_path / "a"))
    assert bare.exit_code == 0 and "note: the pod serves without an API key" in " ".join(bare.output.split())
    assert "env" not in _validated(tmp_path / "a")["deployment.yml"]["spec"]["template"]["spec"]["containers"][0]
    keyed = export("k8s", str(cfg), "--out", str(tmp_path / "b"), "--api-key-secret", "svc-key")
    assert keyed.exit_code == 0 and "serves without an API key" not in keyed.output
    docs = _validated(tmp_path / "b")
    main = docs["deployment.yml"]["spec"]["template"]["spec"]["containers"][0]
    assert main["env"] == [{"name": "MY_SERVICE_KEY", "valueFrom": {"secretKeyRef": {"name": "svc-key",
                                                                                      "key": "api-key"}}}]
    # the scrape annotations and the autoscaler read /metrics without the key: opened there, and said
    assert yaml.safe_load(docs["configmap.yml"]["data"]["trtlade.yml"])["serve"]["metrics_without_key"] is True
    assert "/metrics is open without the key in the pod" in " ".join(keyed.output.split())
    cfg.write_text("model: {}\nlookahead: {spec: '2,4,2'}\nserve: {api_key_env: null, api_keys_file: keys.txt}\n")
    (tmp_path / "keys.txt").write_text("alice " + "a" * 32 + "\n")
    nulled = export("k8s", str(cfg), "--out", str(tmp_path / "c"), "--api-key-secret", "svc-key")
    assert nulled.exit_code == 2 and "serve.api_key_env is null" in " ".join(nulled.output.split())
    filed = export("k8s", str(cfg), "--out", str(tmp_path / "d"))
    said = " ".join(filed.output.split())
    assert "serve.api_keys_file keys.txt is not in the pod" in said and "$None" not in said
    assert "serve.api_key_env is null: set it, then pass --api-key-secret NAME" in said


def test_k8s_export_says_which_serve_settings_the_pod_changes_and_refuses_an_engine_config(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {}\nlookahead: {spec: '2,4,2'}\nserve: {port: 9000, host: 127.0.0.1}\n")
    result = export("k8s", str(cfg), "--out", str(tmp_path / "k"))
    assert result.exit_code == 0
    assert "note: serve.port 9000 is 8000 in the pod" in result.output
    assert "note: serve.host 127.0.0.1 is 0.0.0.0 in the pod" in result.output
    engine = tmp_path / "e.yml"
    engine.write_text("model: {}\nlookahead: {spec: '4,2,4'}\nserve: {engine: trtllm}\nbuild: {engine_dir: e}\n")
    refused = export("k8s", str(engine), "--out", str(tmp_path / "k2"))
    assert refused.exit_code == 1 and "exports the reference engine" in refused.output
    assert not (tmp_path / "k2").exists()


# ------------------------------------------------------------------------------------ Triton
def _engine_version(bundle: Path, version: str) -> None:
    path = bundle / "engine" / "config.json"
    data = json.loads(path.read_text())
    data["version"] = version
    path.write_text(json.dumps(data))


def test_triton_export_configs_parse_as_tritons_model_config(tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, "0.19.0")
    out = tmp_path / "repo"
    result = export("triton", str(bundle), "--out", str(out), "--bundle-path", "/models/b")
    assert result.exit_code == 0, result.output
    configs = {p.parent.name: text_format.Parse(p.read_text(), model_config_pb2.ModelConfig())
               for p in out.glob("*/config.pbtxt")}
    assert set(configs) == {"preprocessing", "tensorrt_llm", "lookahead_guard", "postprocessing", "ensemble"}
    assert all((out / name / "1").is_dir() for name in configs)
    assert (out / "lookahead_guard" / "1" / "model.py").read_text().startswith('"""Triton python model')
    trt = configs["tensorrt_llm"]
    params = {k: v.string_value for k, v in trt.parameters.items()}
    assert trt.backend == "tensorrtllm" and trt.max_batch_size == 16 and trt.model_transaction_policy.decoupled
    assert params["gpt_model_path"] == "/models/b/engine" and params["gpt_model_type"] == "inflight_fused_batching"
    assert params["max_beam_width"] == "1" and params["decoding_mode"] == "lookahead"
    assert [params[k] for k in ("lookahead_window_size", "lookahead_ngram_size",
                                "lookahead_verification_set_size")] == ["4", "2", "4"]
    per_request = {i.name: i for i in trt.input if i.name.startswith("lookahead_")}
    assert len(per_request) == 3 and all(i.optional and i.data_type == model_config_pb2.TYPE_INT32
                                         and list(i.dims) == [1] for i in per_request.values())
    assert configs["preprocessing"].parameters["tokenizer_dir"].string_value == str(tmp_path / "b-hf")
    steps = configs["ensemble"].ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocessing", "lookahead_guard", "tensorrt_llm", "postprocessing"]
    produced = {v for s in steps for v in s.output_map.values()}
    consumed = {v for s in steps for v in s.input_map.values()}
    ensemble_inputs = {i.name for i in configs["ensemble"].input}
    assert consumed <= produced | ensemble_inputs  # every step input is wired
    # the client's triple goes to the guard; tensorrt_llm gets only what the guard let through
    assert steps[1].input_map["lookahead_window_size"] == "lookahead_window_size"
    assert steps[2].input_map["lookahead_window_size"] == "_OUT_WINDOW_SIZE"
    guard = {k: v.string_value for k, v in configs["lookahead_guard"].parameters.items()}
    assert guard == {"max_window_size": "4", "max_ngram_size": "2", "max_verification_set_size": "4",
                     "default_window_size": "4", "default_ngram_size": "2", "default_verification_set_size": "4"}


def _guard(tmp_path, monkeypatch, spec="4,2,4", extra=""):
    """The exported guard's model.py, loaded as Triton's python backend loads it, and initialized with the
    exported config.pbtxt as Triton hands it over (args['model_config'] as JSON)."""
    import importlib.util
    import sys

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "fakes" / "triton"))
    sys.modules.pop("triton_python_backend_utils", None)
    bundle = make_bundle(tmp_path / "b", spec=spec, extra=extra)
    _engine_version(bundle, "0.19.0")
    out = tmp_path / "repo"
    assert export("triton", str(bundle), "--out", str(out)).exit_code == 0
    module_spec = importlib.util.spec_from_file_location("guard_model", out / "lookahead_guard" / "1" / "model.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(_stock_view((out / "lookahead_guard" / "config.pbtxt").read_text()))})
    return model


def _request(pb, rows=1, **lookahead):
    """One Triton request of ``rows`` rows; a lookahead value may be a list (one per row)."""
    import numpy as np

    rows = max((len(v) for v in lookahead.values() if isinstance(v, list)), default=rows)
    inputs = {"REQUEST_INPUT_LEN": np.full((rows, 1), 12, dtype=np.int32)}
    inputs.update({f"lookahead_{k}": np.array(v if isinstance(v, list) else [v] * rows, dtype=np.int32).reshape(-1, 1)
                   for k, v in lookahead.items()})
    return pb.InferenceRequest(inputs)


def _rows(pb, response):
    """The guard's answer as one (w,n,g) per row, after checking every output is [B, 1] INT32."""
    import numpy as np

    outs = [pb.get_output_tensor_by_name(response, n).as_numpy()
            for n in ("OUT_WINDOW_SIZE", "OUT_NGRAM_SIZE", "OUT_VERIFICATION_SET_SIZE")]
    assert all(o.dtype == np.int32 and o.ndim == 2 and o.shape[1] == 1 and o.shape == outs[0].shape for o in outs)
    return [tuple(int(o[row][0]) for o in outs) for row in range(outs[0].shape[0])]


def test_triton_guard_refuses_one_oversize_request_and_passes_the_others(tmp_path, monkeypatch, fake_trtllm):
    """One request asks for w=5 on a (4,2,4) model, beside good ones. Without the guard TensorRT-LLM fails
    every request in flight (the double mirrors forwardAsync -> terminateActiveRequests); with it, only
    that request gets an error, and the good ones run on the executor."""
    from datetime import timedelta

    import tensorrt_llm.bindings.executor as tle

    model = _guard(tmp_path, monkeypatch)
    import triton_python_backend_utils as pb  # the stand-in, on sys.path from _guard

    requests = [_request(pb), _request(pb, window_size=5, ngram_size=2, verification_set_size=4),
                _request(pb, window_size=2, ngram_size=2, verification_set_size=1)]
    responses = model.execute(requests)
    assert [r.has_error() for r in responses] == [False, True, False]
    message = responses[1].error().message()
    assert "lookahead_window_size 5 is above this model's 4" in message and "this request alone" in message
    triples = [_rows(pb, r)[0] for r in (responses[0], responses[2])]
    assert triples == [(4, 2, 4), (2, 2, 1)]  # none sent: the model's own; sent: the client's

    engine = Path(__file__).resolve().parent / "data" / "engines" / "qwen3-8b-424"
    config = tle.ExecutorConfig(max_beam_width=1, decoding_config=tle.DecodingConfig(
        decoding_mode=tle.DecodingMode.Lookahead(), lookahead_decoding_config=tle.LookaheadDecodingConfig(4, 2, 4)))
    ex = tle.Executor(engine, tle.ModelType.DECODER_ONLY, config)
    ids = [ex.enqueue_request(tle.Request([5, 6, 7], max_tokens=3, streaming=False,
                                          lookahead_config=tle.LookaheadDecodingConfig(*t))) for t in triples]
    finals = {}
    while len(finals) < len(ids):
        for r in ex.await_responses(timeout=timedelta(milliseconds=10)):
            finals[r.request_id] = r
    assert all(not finals[i].has_error() for i in ids)
    ex.shutdown()


@pytest.mark.parametrize("lookahead, fragment", [
    ({"window_size": 4, "ngram_size": 2}, "missing: lookahead_verification_set_size"),
    ({"window_size": 4, "ngram_size": 3, "verification_set_size": 4}, "lookahead_ngram_size 3 is above"),
    ({"window_size": 4, "ngram_size": 1, "verification_set_size": 4}, "ngram_size 1 requires"),
    ({"window_size": 0, "ngram_size": 2, "verification_set_size": 4}, "window_size must be >= 1"),
])
def test_triton_guard_messages(tmp_path, monkeypatch, lookahead, fragment):
    model = _guard(tmp_path, monkeypatch)
    import triton_python_backend_utils as pb  # the stand-in, on sys.path from _guard

    [response] = model.execute([_request(pb, **lookahead)])
    assert response.has_error() and fragment in response.error().message()


@pytest.mark.parametrize("batch", [1, 2, 4])
@pytest.mark.parametrize("extra, default", [("", (4, 2, 4)), ("  request_default: 2,2,1\n", (2, 2, 1)),
                                            ("  request_default: 1,1,0\n", (1, 1, 0))])
def test_triton_guard_answers_one_triple_per_row_of_a_batched_request(tmp_path, monkeypatch, batch, extra, default):
    """A request of B rows gets [B, 1] outputs (Triton refuses tensorrt_llm inputs whose batch sizes
    differ): rows that sent nothing get lookahead.request_default (else the spec), rows that sent a
    triple get theirs."""
    model = _guard(tmp_path, monkeypatch, extra=extra)
    import triton_python_backend_utils as pb  # the stand-in, on sys.path from _guard

    sent = [(1 + r % 4, 2, r % 5) for r in range(batch)]
    plain, given = model.execute([_request(pb, rows=batch),
                                  _request(pb, window_size=[t[0] for t in sent], ngram_size=[t[1] for t in sent],
                                           verification_set_size=[t[2] for t in sent])])
    assert not plain.has_error() and _rows(pb, plain) == [default] * batch
    assert not given.has_error() and _rows(pb, given) == sent


@pytest.mark.parametrize("batch, bad_row", [(2, 1), (4, 0), (4, 3)])
def test_triton_guard_refuses_a_batched_request_naming_its_bad_row(tmp_path, monkeypatch, batch, bad_row):
    model = _guard(tmp_path, monkeypatch)
    import triton_python_backend_utils as pb  # the stand-in, on sys.path from _guard

    windows = [5 if r == bad_row else 2 for r in range(batch)]
    [refused, beside] = model.execute([_request(pb, window_size=windows, ngram_size=[2] * batch,
                                                verification_set_size=[1] * batch), _request(pb)])
    assert refused.has_error() and not beside.has_error()  # the request alone, not its neighbours
    message = refused.error().message()
    assert message.startswith(f"row {bad_row} of {batch}: lookahead_window_size 5 is above this model's 4")


def test_triton_guard_refuses_a_lookahead_input_whose_rows_disagree_with_the_batch(tmp_path, monkeypatch):
    import numpy as np

    model = _guard(tmp_path, monkeypatch)
    import triton_python_backend_utils as pb  # the stand-in, on sys.path from _guard

    request = pb.InferenceRequest({"REQUEST_INPUT_LEN": np.full((2, 1), 9, dtype=np.int32),
                                   **{f"lookahead_{k}": np.array([[2, 2]], dtype=np.int32)
                                      for k in ("window_size", "ngram_size", "verification_set_size")}})
    [response] = model.execute([request])
    assert response.has_error() and "one INT32 value per row" in response.error().message()


def test_triton_guard_and_ensemble_agree_with_the_stock_models(tmp_path):
    """Every model of the repository shares the engine's max_batch_size (the stock configs all write
    ${triton_max_batch_size}), and the lookahead tensors the guard takes and gives have the stock
    tensorrt_llm inputs' type and dims ([1], optional, allow_ragged_batch; tensorrtllm_backend v0.19.0 and
    TensorRT-LLM's triton_backend/)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from trtlade.export.triton_stock import TENSORRT_LLM_LOOKAHEAD_INPUTS

    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, "1.0.0")
    out = tmp_path / "repo"
    assert export("triton", str(bundle), "--out", str(out)).exit_code == 0
    configs = {p.parent.name: text_format.Parse(p.read_text(), model_config_pb2.ModelConfig())
               for p in out.glob("*/config.pbtxt")}
    assert {c.max_batch_size for c in configs.values()} == {16}
    stock = {t.name: t for t in TENSORRT_LLM_LOOKAHEAD_INPUTS}
    trt = {i.name: i for i in configs["tensorrt_llm"].input if i.name in stock}
    for name, t in stock.items():
        got = trt[name]
        assert (list(got.dims), got.optional, got.allow_ragged_batch, got.HasField("reshape")) == \
            ([1], True, True, False)
        assert model_config_pb2.DataType.Name(got.data_type) == t.dtype
    guard = configs["lookahead_guard"]
    ensemble = {i.name: i for i in configs["ensemble"].input}
    for name in stock:  # client -> ensemble -> guard: the same [B, 1] INT32
        assert [list(i.dims) for i in (ensemble[name], next(g for g in guard.input if g.name == name))] == [[1], [1]]
    assert all(list(o.dims) == [1] and o.data_type == model_config_pb2.TYPE_INT32 for o in guard.output)


def test_triton_export_warns_that_a_schedule_cannot_apply(tmp_path):
    bundle = make_bundle(tmp_path / "b", extra="  schedule:\n    - {up_to: 2, spec: '4,2,4'}\n    - {spec: '1,1,0'}\n")
    _engine_version(bundle, "0.19.0")
    out = tmp_path / "repo"
    result = export("triton", str(bundle), "--out", str(out))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: lookahead.schedule and lookahead.policy cannot be expressed in Triton" not in text
    assert "warning: lookahead.schedule cannot be expressed in Triton" in text and "runs (4,2,4)" in text
    assert "# warning: lookahead.schedule cannot" in (out / "lookahead_guard" / "config.pbtxt").read_text()
    plain = make_bundle(tmp_path / "c")
    _engine_version(plain, "0.19.0")
    assert "warning" not in export("triton", str(plain), "--out", str(tmp_path / "repo2")).output


def test_the_guards_worked_examples_run():
    import doctest
    import importlib.util

    from trtlade.export.triton import guard_model_source

    assert ">>> triples(" in guard_model_source()
    path = Path(__file__).resolve().parents[1] / "trtlade" / "data" / "triton" / "lookahead_guard.py"
    module_spec = importlib.util.spec_from_file_location("guard_doc", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    failures, attempted = doctest.testmod(module)
    assert failures == 0 and attempted >= 2


def test_triton_export_of_a_plain_spec_has_no_guard_and_no_per_request_inputs(tmp_path):
    bundle = make_bundle(tmp_path / "b", engine="qwen3-8b-plain", spec="1,1,0")
    _engine_version(bundle, "0.19.0")
    out = tmp_path / "repo"
    result = export("triton", str(bundle), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert not (out / "lookahead_guard").exists()
    for model in ("ensemble", "tensorrt_llm"):
        assert "lookahead_window_size" not in (out / model / "config.pbtxt").read_text()
    said = " ".join(result.output.split())
    assert "requests carry no lookahead inputs" in said and "a request sets lookahead_window_size" not in said
    assert "lookahead_guard's is written" not in said


def test_a_multi_gpu_engine_is_started_as_its_stack_starts_one(tmp_path):
    """Triton: launch_triton_server.py --world_size N (one process per rank, the backend's README); grps: over MPI
    with --mpi_np N (grps_trtllm's README). A single-GPU engine keeps the plain command."""
    bundle = make_bundle(tmp_path / "b", engine="qwen3-8b-424-tp2", extra="build:\n  tp_size: 2\n")
    _engine_version(bundle, "0.19.0")
    result = export("triton", str(bundle), "--out", str(tmp_path / "repo"))
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "/app/scripts/launch_triton_server.py --world_size 2" in said and "then: tritonserver" not in said
    assert "/app/scripts/launch_triton_server.py --world_size 2" in (
        tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt").read_text()
    _engine_version(bundle, "1.1.0")  # from 0.20 the script is in TensorRT-LLM's tree
    newer = export("triton", str(bundle), "--out", str(tmp_path / "repo-1.1"))
    assert "tensorrt_llm/triton_backend/scripts/launch_triton_server.py --world_size 2" in " ".join(
        newer.output.split()), newer.output
    _engine_version(bundle, "0.19.0")
    _engine_version(bundle, "0.16.0")  # grps_trtllm's release
    result = export("grps", str(bundle), "--out", str(tmp_path / "inference.yml"))
    assert result.exit_code == 0, result.output
    assert "--mpi_np 2" in " ".join(result.output.split()) and "--mpi_np 2" in (tmp_path / "inference.yml").read_text()
    single = make_bundle(tmp_path / "c")
    _engine_version(single, "0.19.0")
    assert "then: tritonserver --model-repository" in " ".join(
        export("triton", str(single), "--out", str(tmp_path / "repo2")).output.split())


def test_triton_and_grps_exports_say_how_their_container_is_started(tmp_path):
    """Shared memory, pinned memory and stack as NVIDIA's Triton TensorRT-LLM guides and grps_trtllm's README start
    the container: in every written file's header and in the message (a runtime's own /dev/shm is 64 MiB)."""
    flags = "docker run --shm-size=2g --ulimit memlock=-1 --ulimit stack=67108864"
    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, "0.19.0")
    result = export("triton", str(bundle), "--out", str(tmp_path / "repo"))
    assert result.exit_code == 0, result.output
    assert flags in " ".join(result.output.split())
    configs = sorted((tmp_path / "repo").glob("*/config.pbtxt"))
    assert len(configs) == 5 and all(f"# Triton: start its container with `{flags}`" in c.read_text() for c in configs)
    _engine_version(bundle, "0.16.0")  # grps_trtllm's release
    result = export("grps", str(bundle), "--out", str(tmp_path / "inference.yml"))
    assert result.exit_code == 0, result.output
    assert flags in " ".join(result.output.split())
    assert f"# grps: start its container with `{flags}`" in (tmp_path / "inference.yml").read_text()


@pytest.mark.parametrize("version, ok", [("0.16.0", True), ("0.17.0", False), ("0.19.0", False), ("1.2.0", False)])
def test_grps_takes_only_an_engine_of_the_release_grps_trtllm_runs(tmp_path, version, ok):
    """grps_trtllm@dea3898 builds on TensorRT-LLM 0.16.0 (README, docker/Dockerfile); an engine loads only under the
    release that built it."""
    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, version)
    out = tmp_path / "inference.yml"
    result = export("grps", str(bundle), "--out", str(out))
    assert (result.exit_code == 0) == ok, result.output
    if not ok:
        said = " ".join(result.output.split())
        assert f"built with TensorRT-LLM {version}; grps_trtllm runs TensorRT-LLM 0.16" in said and not out.exists()


def _stock_view(config_text: str) -> dict:
    """The config as a stock model.py receives it at initialize(): Triton's ModelConfig as JSON
    (``args['model_config']``), with ``input``/``output`` lists and ``parameters`` by key."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    message = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    try:  # Triton prints primitive fields even when empty (ModelConfigToJson, always_print_primitive_fields)
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
    except TypeError:  # protobuf < 5.26
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         including_default_value_fields=True)


def _config_by_name(config: dict, kind: str, name: str):
    """triton_python_backend_utils.get_{input,output}_config_by_name: the entry, or None."""
    return next((t for t in config.get(kind, []) if t["name"] == name), None)


@pytest.mark.parametrize("version, line", [("0.19.0", "0.19"), ("0.20.0", "0.20"), ("1.0.0", "0.20"),
                                           ("1.2.1", "0.20")])
def test_triton_export_carries_everything_the_stock_models_read_at_initialize(tmp_path, version, line):
    """Replays what each stock initialize() reads with no fallback (triton_stock.INITIALIZE_READS, cited
    there): every parameter present, every data_type readable; the stock names of the release line."""
    from trtlade.export import triton_stock as stock

    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, version)
    out = tmp_path / "repo"
    assert export("triton", str(bundle), "--out", str(out)).exit_code == 0
    for model, reads in stock.INITIALIZE_READS.items():
        config = _stock_view((out / model / "config.pbtxt").read_text())
        for key in reads["parameters"]:
            assert "string_value" in config["parameters"][key], (model, key)
        for kind, names in (("input", reads["inputs"]), ("output", reads["outputs"])):
            for name in names:
                assert _config_by_name(config, kind, name)["data_type"].startswith("TYPE_"), (model, name)
    pre = _stock_view((out / "preprocessing" / "config.pbtxt").read_text())
    assert [t["name"] for t in pre["input"]] == [t.name for t in stock.preprocessing_inputs(line)]
    assert [t["name"] for t in pre["output"]] == [t.name for t in stock.preprocessing_outputs(line)]
    assert pre["parameters"]["multimodal_model_path"]["string_value"] == ""  # "unused" to the stock model
    assert ("hf_model_path" in pre["parameters"]) is (line != "0.19")
    sizes = _config_by_name(pre, "output", "IMAGE_SIZES")["dims"]
    assert sizes == (["2"] if line == "0.19" else ["-1", "2"])
    trt = _stock_view((out / "tensorrt_llm" / "config.pbtxt").read_text())
    assert trt["parameters"]["enable_kv_cache_reuse"]["string_value"] == "false"  # set, as serve sets it


def test_triton_export_before_the_fix_would_not_load(tmp_path):
    """The check above fails on the configs the export wrote before issue 26 (kept here as text)."""
    old = 'name: "preprocessing" backend: "python" input { name: "QUERY" data_type: TYPE_STRING dims: 1 } ' \
          'parameters { key: "tokenizer_dir" value { string_value: "/t" } }'
    config = _stock_view(old)
    assert "multimodal_model_path" not in config["parameters"]  # KeyError in the stock initialize()
    assert _config_by_name(config, "input", "EMBEDDING_BIAS_WORDS") is None  # None['data_type']: TypeError


def test_triton_export_refuses_engines_older_than_0_19(tmp_path):
    bundle = make_bundle(tmp_path / "b")  # the test engines say 0.16.0
    out = tmp_path / "repo"
    result = export("triton", str(bundle), "--out", str(out))
    assert result.exit_code == 1 and "TensorRT-LLM 0.16.0" in result.output and "0.19.0" in result.output
    assert not out.exists() and not list(tmp_path.glob(".*partial"))


def test_validate_config_on_a_bundle_folder_checks_its_config_against_its_engine(tmp_path):
    bundle = make_bundle(tmp_path / "bundles" / "qwen3", extra="build:\n  engine_dir: engine\n")
    (bundle / "extra_llm_api_options.yml").write_text("speculative_config: {decoding_type: Lookahead}\n")
    for args in ([str(bundle)], [str(tmp_path / "bundles"), "--recursive"]):
        result = CliRunner().invoke(app, ["validate-config", *args])
        assert result.exit_code == 0, result.output
        assert "1 file checked" in result.output and "trtlade.yml" in result.output
        assert "engine" in result.output and "no engine checked" not in result.output


def test_k8s_pods_wait_the_servers_shutdown_grace_and_its_margin_before_a_kill(tmp_path):
    """Kubernetes kills a pod terminationGracePeriodSeconds after SIGTERM: the period covers serve.shutdown_grace_s
    and what the server takes beyond it (answering the requests its end stopped, closing the engine)."""
    config = yaml.safe_load(Path("configs/smollm2-cpu.yml").read_text())
    periods = {}
    for grace in (None, 0, 300.5):
        if grace is not None:
            config.setdefault("serve", {})["shutdown_grace_s"] = grace
        path = tmp_path / f"c{grace}.yml"
        path.write_text(yaml.safe_dump(config))
        result = export("k8s", str(path), "--out", str(tmp_path / f"k{grace}"))
        assert result.exit_code == 0, result.output
        pod = _validated(tmp_path / f"k{grace}")["deployment.yml"]["spec"]["template"]["spec"]
        periods[grace] = pod["terminationGracePeriodSeconds"]
    assert periods == {None: 70, 0: 40, 300.5: 341}


def test_an_engine_pod_reads_its_tokenizer_not_the_export_machines_model_folder(tmp_path):
    """`trtlade build` writes the model's absolute folder into the bundle's config: the pod does not have it, and
    serve refuses a model.path that is not a folder. The engine holds the weights: the pod's config leaves it out."""
    bundle = make_bundle(tmp_path / "qwen3")
    result = export("k8s", str(bundle), "--out", str(tmp_path / "k8s"), "--tokenizer", "/bundle/tokenizer")
    assert result.exit_code == 0, result.output
    pod = yaml.safe_load(_validated(tmp_path / "k8s")["configmap.yml"]["data"]["trtlade.yml"])
    assert "path" not in pod["model"] and pod["model"]["tokenizer"] == "/bundle/tokenizer"
    assert "is left out of the pod: the engine holds the weights" in " ".join(result.output.split())


def test_a_pod_of_the_embedded_model_asks_for_no_claim_and_one_that_reads_the_claim_does(tmp_path):
    embedded = export("k8s", "configs/smollm2-cpu.yml", "--out", str(tmp_path / "a"))
    assert embedded.exit_code == 0, embedded.output
    pod = _validated(tmp_path / "a")["deployment.yml"]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["config"]
    assert all(m["name"] != "bundle" for c in pod["containers"] + pod["initContainers"] for m in c["volumeMounts"])
    cfg = tmp_path / "own.yml"
    cfg.write_text("model: {path: /bundle/smollm2}\nlookahead: {spec: '2,4,2'}\n")
    own = export("k8s", str(cfg), "--out", str(tmp_path / "b"))
    assert own.exit_code == 0, own.output
    pod = _validated(tmp_path / "b")["deployment.yml"]["spec"]["template"]["spec"]
    assert {"name": "bundle", "persistentVolumeClaim": {"claimName": "trtlade-bundles", "readOnly": True}} in \
        pod["volumes"]
    named = tmp_path / "named.yml"  # a model named in a folder of models on the claim
    named.write_text("model: {name: smollm2, models_dir: /bundle/models}\nlookahead: {spec: '2,4,2'}\n")
    assert export("k8s", str(named), "--out", str(tmp_path / "c")).exit_code == 0
    pod = _validated(tmp_path / "c")["deployment.yml"]["spec"]["template"]["spec"]
    assert any(v["name"] == "bundle" for v in pod["volumes"])


def test_a_reference_pod_whose_model_folder_is_off_the_claim_is_refused_whatever_the_tokenizer(tmp_path):
    cfg = tmp_path / "ref.yml"
    cfg.write_text("model: {path: /home/me/smollm2}\nlookahead: {spec: '2,4,2'}\n")
    result = export("k8s", str(cfg), "--out", str(tmp_path / "k"), "--tokenizer", "/bundle/tokenizer")
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "model.path /home/me/smollm2 is not under /bundle" in said


def test_an_api_key_variable_kubernetes_refuses_is_refused_at_export(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {}\nlookahead: {spec: '2,4,2'}\nserve: {api_key_env: 'MY KEY=1'}\n")
    result = export("k8s", str(cfg), "--out", str(tmp_path / "k"), "--api-key-secret", "svc-key")
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "is not a name Kubernetes accepts for an environment variable" in said


@pytest.mark.parametrize("target", ["grps", "triton"])
@pytest.mark.parametrize("flag, value", [("--tokenizer", ""), ("--tokenizer", "models/tok"), ("--bundle-path", ""),
                                         ("--bundle-path", "bundles/q")])
def test_a_server_path_that_is_empty_or_relative_is_refused(tmp_path, target, flag, value):
    """`--tokenizer ""` was written as tokenizer_dir "." (and grps' "./"), a relative one as the server's cwd saw
    it."""
    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, "0.16.0" if target == "grps" else "0.19.0")
    out = tmp_path / ("g.yml" if target == "grps" else "t")
    result = export(target, str(bundle), "--out", str(out), flag, value)
    assert result.exit_code == 2 and f"error: {flag} " in result.output and "not an absolute path" in result.output
    assert not out.exists()


@pytest.mark.parametrize("target", ["grps", "triton"])
def test_an_invalid_bundle_config_is_one_located_error_with_one_hint(tmp_path, target):
    """The diagnostics' own text (each with its hint) went into the message, then a second hint followed."""
    bundle = make_bundle(tmp_path / "b")
    _engine_version(bundle, "0.16.0" if target == "grps" else "0.19.0")
    (bundle / "trtlade.yml").write_text("model: [\n")
    result = export(target, str(bundle), "--out", str(tmp_path / "o"))
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and said.count("hint:") == 1, result.output
    assert f"the bundle's config is not valid: {bundle / 'trtlade.yml'}:2:1: malformed YAML" in said


def test_grps_force_replaces_an_earlier_export_not_a_file_of_yours(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    out = tmp_path / "inference.yml"
    assert export("grps", str(bundle), "--out", str(out)).exit_code == 0
    again = export("grps", str(bundle), "--out", str(out), "--force")
    assert again.exit_code == 0, again.output                       # its own file: replaced
    mine = tmp_path / "mine.yml"
    mine.write_text("models: []  # my grps config\n")
    refused = export("grps", str(bundle), "--out", str(mine), "--force")
    assert refused.exit_code == 2 and "is a file no `trtlade export` wrote" in " ".join(refused.output.split())
    assert mine.read_text() == "models: []  # my grps config\n"

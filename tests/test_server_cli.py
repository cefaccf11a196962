"""`trtlade serve` flags and config resolution, and its refusals (no server is started here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtlade.cli.main import app
from trtlade.server.plan import DEFAULT_SERVE_SPEC, PlanError, ServeFlags, make_plan
from trtlade.spec import LookaheadSpec

ENGINES = Path(__file__).resolve().parent / "data" / "engines"
runner = CliRunner()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def hf_dir(tmp_path) -> Path:
    folder = tmp_path / "my-model"
    write(folder / "config.json", json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return folder


def test_defaults_with_no_arguments():
    plan = make_plan(ServeFlags(), env={})
    assert (plan.engine, plan.host, plan.port, plan.model_dir, plan.api_key) == \
        ("reference", "127.0.0.1", 8000, None, None)
    assert plan.spec == DEFAULT_SERVE_SPEC == LookaheadSpec(4, 2, 4)


def test_flags_override_the_config_which_overrides_defaults(tmp_path, hf_dir):
    cfg = write(tmp_path / "deploy.yml", f"""
model: {{path: {hf_dir}}}
lookahead: {{spec: [7, 7, 7], request_default: [2, 2, 1]}}
serve: {{port: 9000, host: 0.0.0.0, max_queue: 3}}
""")
    plan = make_plan(ServeFlags(config=cfg), env={})
    assert (plan.port, plan.host, plan.spec, plan.request_default) == \
        (9000, "0.0.0.0", LookaheadSpec(7, 7, 7), LookaheadSpec(2, 2, 1))
    assert plan.model_dir == hf_dir.resolve() and plan.config.serve.max_queue == 3
    plan = make_plan(ServeFlags(config=cfg, port=9100, host="127.0.0.1", spec=LookaheadSpec(4, 2, 4)), env={})
    assert (plan.port, plan.host, plan.spec) == (9100, "127.0.0.1", LookaheadSpec(4, 2, 4))


def test_relative_paths_are_relative_to_the_config_file(tmp_path, hf_dir):
    cfg = write(tmp_path / "configs" / "deploy.yml", "model: {path: ../my-model}\nlookahead: {spec: [4, 2, 4]}\n")
    assert make_plan(ServeFlags(config=cfg), env={}).model_dir == hf_dir.resolve()


def test_the_preset_flag_overrides_the_config(tmp_path):
    cfg = write(tmp_path / "d.yml", "lookahead: {spec: [2, 4, 2], preset: trtllm}\n")
    assert make_plan(ServeFlags(config=cfg), env={}).config.lookahead_preset == "trtllm"
    assert make_plan(ServeFlags(config=cfg, preset="fast"), env={}).config.lookahead_preset == "fast"
    assert make_plan(ServeFlags(), env={}).config.lookahead_preset == "fast"  # reference engine, unset
    with pytest.raises(PlanError, match="--preset 'quick': choose fast or trtllm") as info:
        make_plan(ServeFlags(preset="quick"), env={})
    assert info.value.usage and "TensorRT-LLM" in info.value.hint


def test_spec_flag_must_admit_the_request_default(tmp_path):
    cfg = write(tmp_path / "d.yml", "lookahead: {spec: [7, 7, 7], request_default: [5, 5, 5]}\n")
    with pytest.raises(PlanError, match="request_default"):
        make_plan(ServeFlags(config=cfg, spec=LookaheadSpec(4, 2, 4)), env={})


def test_api_key_from_flag_or_environment():
    k1, k2 = "k1-0123456789abcdef", "k2-0123456789abcdef"
    assert make_plan(ServeFlags(), env={"TRTLADE_API_KEY": k1}).api_key == k1
    assert make_plan(ServeFlags(api_key=k2), env={"TRTLADE_API_KEY": k1}).api_key == k2
    assert make_plan(ServeFlags(), env={}).api_key is None
    for flags, env, where in ((ServeFlags(api_key=""), {"TRTLADE_API_KEY": k1}, "--api-key"),
                              (ServeFlags(api_key="  "), {}, "--api-key"),
                              (ServeFlags(), {"TRTLADE_API_KEY": ""}, "$TRTLADE_API_KEY"),
                              (ServeFlags(), {"TRTLADE_API_KEYS_FILE": " "}, "$TRTLADE_API_KEYS_FILE")):
        with pytest.raises(PlanError, match="empty: the server would answer every request without") as err:
            make_plan(flags, env=env)  # `--api-key "$UNSET"` would have served without a key, the variable's too
        assert err.value.where == where and err.value.hint
    for flags, env in ((ServeFlags(api_key="short-key"), {}), (ServeFlags(), {"TRTLADE_API_KEY": "short-key"})):
        with pytest.raises(PlanError, match="at least 16") as err:  # the keys file's minimum, for every source
            make_plan(flags, env=env)
        assert "short-key" not in str(err.value) and err.value.where.startswith("--api-key")


@pytest.mark.parametrize("backend, flags, flag", [
    ("trtllm", dict(prefix_cache_mb=512), "--prefix-cache-mb"),   # the reference engine's prefix cache
    ("trtllm", dict(prefill_chunk_tokens=64), "--prefill-chunk-tokens"),
    ("trtllm", dict(prefill_stall=2.0), "--prefill-stall"),
    ("trtllm", dict(prefill_idle_chunk_tokens=512), "--prefill-idle-chunk-tokens"),
    ("pytorch", dict(spec=LookaheadSpec(4, 2, 4)), "--spec"),     # the PyTorch backend drafts with `speculation`
    ("pytorch", dict(preset="fast"), "--preset"),
])
def test_a_flag_the_serving_engine_would_ignore_is_refused(tmp_path, hf_dir, backend, flags, flag):
    config = tmp_path / "c.yml"
    body = ("lookahead: {spec: '4,2,4'}\nbuild: {engine_dir: e}\n" if backend == "trtllm" else
            "build: {backend: pytorch}\nspeculation: {decoding_type: NGram, max_draft_len: 4}\n")
    config.write_text(f"model: {{path: {hf_dir}}}\nserve: {{engine: trtllm}}\n{body}")
    with pytest.raises(PlanError, match="ignore|does not run") as err:
        make_plan(ServeFlags(config=config, **flags), env={})
    assert err.value.where == flag and err.value.usage and err.value.hint


def test_a_keys_file_that_does_not_read_says_where_its_path_came_from(tmp_path):
    """A stale $TRTLADE_API_KEYS_FILE: the user never passed --api-keys-file, so the error names the variable."""
    missing = str(tmp_path / "gone.txt")
    for flags, env, source in ((ServeFlags(), {"TRTLADE_API_KEYS_FILE": missing}, "$TRTLADE_API_KEYS_FILE"),
                               (ServeFlags(api_keys_file=Path(missing)), {}, "--api-keys-file")):
        with pytest.raises(PlanError, match="cannot read the keys file: No such file") as err:
            make_plan(flags, env=env)
        assert err.value.where == f"{missing} (from {source})" and "check the path" in err.value.hint


def test_model_name_under_the_models_dir(tmp_path, hf_dir):
    assert make_plan(ServeFlags(model="my-model"), env={"TRTLADE_MODELS_DIR": str(tmp_path)}).model_dir == \
        hf_dir.resolve()
    with pytest.raises(PlanError, match="no such folder") as info:
        make_plan(ServeFlags(model="Qwen3-8B"), env={"TRTLADE_MODELS_DIR": str(tmp_path)})
    assert info.value.usage


def test_bundle_brings_its_config_and_manifest(tmp_path, hf_dir):
    bundle = tmp_path / "bundle"
    write(bundle / "trtlade.yml", f"model: {{path: {hf_dir}}}\nlookahead: {{spec: [5, 3, 5]}}\n")
    write(bundle / "trtlade-manifest.json", json.dumps({"spec": [5, 3, 5], "model": "my-model"}))
    plan = make_plan(ServeFlags(model=str(bundle)), env={})
    assert plan.spec == LookaheadSpec(5, 3, 5) and plan.manifest == {"spec": [5, 3, 5], "model": "my-model"}
    assert plan.bundle == bundle.resolve() and plan.model_dir == hf_dir.resolve()
    with pytest.raises(PlanError, match="cannot be combined with --config") as info:
        make_plan(ServeFlags(model=str(bundle), config=bundle / "trtlade.yml"), env={})
    assert info.value.usage


def test_trtllm_needs_an_engine_dir_and_a_tokenizer(tmp_path, hf_dir):
    with pytest.raises(PlanError, match="engine directory"):
        make_plan(ServeFlags(engine="trtllm"), env={})
    with pytest.raises(PlanError, match="no tokenizer"):
        make_plan(ServeFlags(engine="trtllm", model=str(ENGINES / "qwen3-8b-424")), env={})
    engine_dir = ENGINES / "qwen3-8b-424"
    cfg = write(tmp_path / "d.yml", f"model: {{tokenizer: {hf_dir}}}\nbuild: {{engine_dir: {engine_dir}}}\n"
                                    "lookahead: {spec: [4, 2, 4]}\nserve: {engine: trtllm}\n")
    plan = make_plan(ServeFlags(config=cfg), env={})
    assert (plan.engine, plan.engine_dir, plan.tokenizer_dir) == ("trtllm", ENGINES / "qwen3-8b-424", hf_dir)
    with pytest.raises(PlanError, match="engine directory; the reference engine"):
        make_plan(ServeFlags(model=str(ENGINES / "qwen3-8b-424")), env={})


@pytest.mark.parametrize("args, code, fragment", [
    (["serve", "--engine", "vllm"], 2, "choose one of reference, trtllm"),
    (["serve", "--spec", "4,1,4"], 2, "ngramSize=1 requires verificationSetSize=0"),
    (["serve", "--port", "70000"], 2, "between 0 and 65535"),
    (["serve", "--config", "/no/such.yml"], 2, "does not exist"),
    (["serve", "--model", "/no/such/folder"], 2, "no such folder"),
    (["serve", "--engine", "trtllm"], 1, "engine directory"),
    (["serve", "--log-level", "loud"], 2, "--log-level"),
])
def test_cli_user_errors_exit_cleanly(args, code, fragment):
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--port", "70000"], ["--log-level", "verbose"], ["--prefix-cache-mb", "-1"],
                                  ["--prefill-chunk-tokens", "-5"], ["--prefill-stall", "0.5"],
                                  ["--prefill-idle-chunk-tokens", "-1"],
                                  ["--prefix-cache-scope", "everyone"]])
def test_every_serve_flag_error_comes_with_a_hint(args):
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2 and "hint:" in result.output and args[0] in result.output, result.output


def test_a_keys_file_that_is_a_folder_is_said_to_be_one(tmp_path):
    result = runner.invoke(app, ["serve", "--api-keys-file", str(tmp_path)])
    assert result.exit_code == 2 and "a folder, not a file" in result.output


def test_cli_invalid_config_shows_located_diagnostics(tmp_path):
    cfg = write(tmp_path / "bad.yml", "lookahead:\n  spec: 4,2,4\nserve:\n  prot: 8000\n")
    result = runner.invoke(app, ["serve", "--config", str(cfg)])
    assert result.exit_code == 1
    assert "bad.yml:4" in result.output and "prot" in result.output and "Traceback" not in result.output


def test_cli_trtllm_mismatch_refuses_with_validate_configs_message(fake_trtllm, tmp_path, hf_dir):
    engine = tmp_path / "engine"
    shutil.copytree(ENGINES / "qwen3-8b-draft39", engine)
    cfg = write(tmp_path / "deploy.yml", f"model: {{tokenizer: {hf_dir}}}\nbuild: {{engine_dir: engine}}\n"
                                         "lookahead:\n  spec: 4,3,4\nserve: {engine: trtllm}\n")
    result = runner.invoke(app, ["serve", "--config", str(cfg)])
    assert result.exit_code == 1, result.output
    assert "deploy.yml:4:9: error: lookahead.spec: the engine was built with max_draft_len 39" in result.output
    assert "not caught at start" in result.output and "Traceback" not in result.output
    validate = runner.invoke(app, ["validate-config", str(cfg)])
    assert "deploy.yml:4:9" in validate.output and "max_draft_len 39" in validate.output


def test_cli_trtllm_multi_gpu_without_mpirun_prints_the_command(fake_trtllm, tmp_path, hf_dir, monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(var, raising=False)
    cfg = write(tmp_path / "tp2.yml", f"model: {{tokenizer: {hf_dir}}}\nbuild: {{engine_dir: "
                                      f"{ENGINES / 'qwen3-8b-424-tp2'}, tp_size: 2}}\nlookahead: {{spec: [4, 2, 4]}}\n"
                                      "serve: {engine: trtllm}\n")
    key = "very-secret-key-0123456789"
    monkeypatch.setattr("sys.argv", ["trtlade", "serve", "--config", str(cfg), "--api-key", key])
    result = runner.invoke(app, ["serve", "--config", str(cfg), "--api-key", key])
    assert result.exit_code == 1, result.output
    assert f"mpirun -n 2 trtlade serve --config {cfg} --api-key '***'" in result.output
    assert key not in result.output  # the command it prints never holds the key


def test_cli_missing_tensorrt_llm_says_how_to_install(tmp_path, hf_dir, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)
    result = runner.invoke(app, ["serve", "--engine", "trtllm", "--model", str(ENGINES / "qwen3-8b-424")],
                           env={"TRTLADE_API_KEY": ""})
    assert result.exit_code == 1
    assert "no tokenizer" in result.output  # plan errors come first
    engine_dir = ENGINES / "qwen3-8b-424"
    cfg = write(tmp_path / "d.yml", f"model: {{tokenizer: {hf_dir}}}\nbuild: {{engine_dir: {engine_dir}}}\n"
                                    "lookahead: {spec: [4, 2, 4]}\nserve: {engine: trtllm}\n")
    result = runner.invoke(app, ["serve", "--config", str(cfg)])
    assert result.exit_code == 1 and "TensorRT-LLM is not installed" in result.output
    assert "pip install -e '.[trtllm-engine]'" in result.output


def test_serve_help_is_light():
    import subprocess
    import sys

    code = ("import sys; from trtlade.cli.main import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['serve', '--help']); assert r.exit_code == 0, r.output; "
            "heavy = [m for m in ('fastapi', 'uvicorn', 'torch', 'tensorrt_llm', 'httpx') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_served_engine_loads_with_the_collector_paused_and_leaves_its_heap_frozen(tmp_path, monkeypatch):
    """`trtlade serve`'s reference factory: no full collection runs while the engine's objects pile up, and
    afterwards they are frozen (a later full collection does not scan them), the collector on again."""
    import asyncio
    import gc

    from models import tiny_model, tiny_tokenizer
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.server.runner import engine_factory

    folder = tmp_path / "tiny"
    tok = tiny_tokenizer()
    tiny_model("llama", len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    config = write(tmp_path / "deploy.yml", f"model:\n  path: {folder}\nlookahead:\n  spec: 2,4,2\n")
    load, seen = ReferenceEngine.load, []

    def spying_load(*args, **kwargs):
        seen.append(gc.isenabled())
        return load(*args, **kwargs)

    monkeypatch.setattr(ReferenceEngine, "load", spying_load)
    gc.unfreeze()
    serving = engine_factory(make_plan(ServeFlags(config=config)))()
    try:
        assert seen == [False]
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        asyncio.run(serving.aclose())


# ----------------------------------------------------------------------------- where it listens
def test_a_port_another_process_holds_is_refused_before_the_engine_loads(monkeypatch):
    """`trtlade serve --port P` with P taken: one error naming host:port and a hint, exit 1, no engine
    loaded and no uvicorn start (it used to log "the engine failed to load: CancelledError")."""
    import socket

    import trtlade.server.runner as runner

    calls: list[str] = []
    monkeypatch.setattr(runner, "_load_reference", lambda plan: calls.append("engine loaded"))
    monkeypatch.setattr(runner, "serve_app", lambda *a, **k: calls.append("server started"))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "choose another --port" in result.stderr
    assert "Loading weights" not in result.output and "Uvicorn running" not in result.output
    assert calls == []  # refused before either, not merely quiet about them
    assert "trtlade serve: engine" not in result.stderr  # no banner naming an address it will not serve


@pytest.mark.parametrize("taken", [True, False])
def test_the_no_api_key_warning_waits_for_an_address_it_will_serve(monkeypatch, taken):
    """`trtlade serve --host 0.0.0.0` without a key: on a taken port the address error alone, no warning about
    listening there (it was printed before the check, and on MPI follower ranks, which serve no HTTP); on a free
    one the warning, then the banner."""
    import socket

    import trtlade.server.runner as runner

    monkeypatch.delenv("TRTLADE_API_KEY", raising=False)
    monkeypatch.setattr(runner, "_load_reference", lambda plan: None)
    monkeypatch.setattr(runner, "serve_app", lambda *a, **k: None)
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1] if taken else 0
        result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", str(port)])
    if taken:
        assert result.exit_code == 1 and f"cannot listen on 0.0.0.0:{port}" in result.stderr, result.output
        assert "without an API key" not in result.stderr
    else:
        assert result.exit_code == 0, result.output
        assert 0 <= result.stderr.index("without an API key") < result.stderr.index("trtlade serve: engine")


@pytest.mark.parametrize("host, said", [("999.1.1.1", "not an address or name here"),
                                        ("not a host name", "not an address or name here")])
def test_a_host_that_is_not_this_machines_is_refused(host, said):
    from trtlade.server.runner import ServeError, check_listen

    with pytest.raises(ServeError) as caught:
        check_listen(host, 0)
    assert said in caught.value.message and "--host" in caught.value.hint


def test_a_free_address_passes_and_is_let_go():
    import socket

    from trtlade.server.runner import check_listen

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check_listen("127.0.0.1", port)
    with socket.socket() as again:  # still free afterwards
        again.bind(("127.0.0.1", port))

"""`trtlade build` planning: model resolution, architecture map, precedence, the exact trtllm-build argv,
dry-run. Pure: no TensorRT-LLM, no subprocess except the dry-run-without-the-fake check."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hf_configs import HF_CONFIGS
from trtlade.builder.errors import BuildError
from trtlade.builder.models import (
    ARCHITECTURE_TO_CLASS, BUILDABLE, FIRST_VERSION, read_hf_config, resolve_model, trtllm_class_for,
)
from trtlade.trtllm.compat import parse_version
from trtlade.builder.plan import BuildOptions, Limits, make_plan, shell_join
from trtlade.cli.main import app
from trtlade.spec import LookaheadSpec

ROOT = Path(__file__).resolve().parent.parent



def hf_folder(root: Path, name: str, kind: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS[kind]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    return folder


def plan_for(tmp_path: Path, kind: str = "qwen3", *, config: dict | None = None, **opts):
    model = hf_folder(tmp_path / "models", f"m-{kind}", kind) if "model" not in opts else None
    options = BuildOptions(model=opts.pop("model", str(model)), spec=opts.pop("spec", LookaheadSpec(4, 2, 4)),
                           output=opts.pop("output", tmp_path / "out"), **opts)
    return make_plan(options, config=config, env={}, cwd=tmp_path, trtllm_present=True)


# ------------------------------------------------------------------------------ architectures
@pytest.mark.parametrize("arch, cls", [
    ("LlamaForCausalLM", "LLaMAForCausalLM"), ("MistralForCausalLM", "LLaMAForCausalLM"),
    ("MixtralForCausalLM", "LLaMAForCausalLM"), ("QWenLMHeadModel", "QWenForCausalLM"),
    ("QWenForCausalLM", "QWenForCausalLM"), ("Qwen2ForCausalLM", "QWenForCausalLM"),
    ("Qwen2MoeForCausalLM", "QWenForCausalLM"), ("Qwen3ForCausalLM", "QWenForCausalLM"),
    ("Qwen3MoeForCausalLM", "QWenForCausalLM"), ("Gemma2ForCausalLM", "GemmaForCausalLM"),
    ("Gemma3ForCausalLM", "GemmaForCausalLM"),
])
def test_architecture_maps_to_trtllm_class(arch, cls):
    assert trtllm_class_for(arch) == cls


def test_every_buildable_architecture_names_its_first_version_in_range():
    for arch in BUILDABLE:
        assert arch.architecture in ARCHITECTURE_TO_CLASS and arch.source
        assert (0, 16, 0) <= parse_version(arch.first_version).key < (1, 3, 0)
    assert FIRST_VERSION["Gemma3ForCausalLM"] == "0.19.0" and FIRST_VERSION["Qwen3ForCausalLM"] == "1.0.0rc3"
    assert FIRST_VERSION["LlamaForCausalLM"] == "0.16.0"


@pytest.mark.parametrize("installed, refused", [("0.18.2", True), ("0.16.0", True), ("0.19.0", False),
                                                ("1.2.0", False), (None, False)])
def test_gemma3_is_refused_before_conversion_below_its_first_version(tmp_path, monkeypatch, installed, refused):
    monkeypatch.setattr("trtlade.builder.plan.installed_version", lambda: installed)
    if refused:
        with pytest.raises(BuildError) as err:
            plan_for(tmp_path, "gemma3", max_input_len=256, max_seq_len=505)
        assert f"TensorRT-LLM {installed} does not convert Gemma3ForCausalLM" in err.value.message
        assert "0.19.0" in err.value.message and ">=0.19.0" in err.value.hint
        assert err.value.where.endswith("config.json:architectures[0]")
    else:
        plan = plan_for(tmp_path, "gemma3", max_input_len=256, max_seq_len=505)
        assert plan.trtllm_class == "GemmaForCausalLM"
        assert any("Gemma3ForCausalLM needs TensorRT-LLM >= 0.19.0" in n for n in plan.notes)


def test_unknown_architecture_is_refused_with_the_supported_list(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, "bert")
    assert "BertForMaskedLM" in err.value.message and "Unsupported model architecture" in err.value.message
    assert all(arch in err.value.hint for arch in ARCHITECTURE_TO_CLASS)
    assert err.value.where.endswith("config.json:architectures[0]")


def test_read_hf_config_hashes_bytes_and_normalises_dtype(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "torch_dtype": "bf16"}')
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    info = read_hf_config(folder)
    assert (info.architecture, info.torch_dtype, info.model_type) == ("LlamaForCausalLM", "bfloat16", None)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "torch_dtype": "bf16" }')
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    assert read_hf_config(folder).config_sha256 != info.config_sha256


def test_max_num_tokens_the_builder_would_change_is_refused_by_build_and_validate_config(tmp_path):
    """check_max_num_tokens lowers a value above max_seq_len x max_batch_size and raises one below the KV block:
    the config would then say what the engine does not hold."""
    from trtlade.config.validate import validate_file

    with pytest.raises(BuildError, match="below 64: trtllm-build raises it"):
        plan_for(tmp_path, max_batch_size=1, max_input_len=20, max_seq_len=40)  # the default lowered to 40
    path = tmp_path / "c.yml"
    path.write_text("lookahead:\n  spec: 4,2,4\nbuild:\n  max_batch_size: 1\n  max_seq_len: 4096\n"
                    "  max_num_tokens: 8192\n")
    [error] = [d for d in validate_file(path).diagnostics if d.severity == "error"]
    assert error.code == "build-max-num-tokens-cap" and error.line == 6


def test_an_unused_models_dir_and_a_misspelt_unused_release_are_said(tmp_path):
    folder = hf_folder(tmp_path / "models", "m", "llama")
    p = make_plan(BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), backend="reference",
                               models_dir=tmp_path, output=tmp_path / "o"), config={}, env={}, cwd=tmp_path,
                  trtllm_present=False)
    assert any(n.startswith(f"--models-dir {tmp_path} not used: the model is a path") for n in p.notes)
    with pytest.raises(BuildError, match="not a TensorRT-LLM version: 'abc'") as info:
        make_plan(BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), backend="reference",
                               trtllm_version="abc", output=tmp_path / "o"), config={}, env={}, cwd=tmp_path,
                  trtllm_present=False)
    assert info.value.where == "--trtllm-version"


def test_a_model_folder_without_weights_and_a_file_as_model_are_refused(tmp_path):
    """A folder with config.json alone built a bundle that failed at serve; a file was looked up as a hub name."""
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps(HF_CONFIGS["llama"]))
    with pytest.raises(BuildError, match="has config.json but no weights"):
        plan_for(tmp_path, model=str(bare))
    (bare / "training_args.bin").write_bytes(b"")  # not weights
    with pytest.raises(BuildError, match="has config.json but no weights"):
        plan_for(tmp_path, model=str(bare))
    (bare / "m.gguf").write_bytes(b"")
    with pytest.raises(BuildError, match="no weights") as info:
        plan_for(tmp_path, model=str(bare))
    assert "trtlade serve --model" in info.value.hint
    full = hf_folder(tmp_path / "second", "bare", "llama")  # a name: a folder without weights is passed over
    (full / "model.safetensors").write_bytes(b"")
    found = make_plan(BuildOptions(model="bare", spec=LookaheadSpec(4, 2, 4), models_dir=tmp_path,
                                   output=tmp_path / "o"), config={},
                      env={"TRTLADE_MODELS_DIR": str(tmp_path / "second")}, cwd=tmp_path, trtllm_present=True)
    assert found.model.path == full.resolve()
    for name, says in (("c.yml", "pass the folder that holds config.json"), ("m.gguf", "trtlade serve --model")):
        (tmp_path / name).write_text("x")
        with pytest.raises(BuildError, match="is a file, not a model folder") as info:
            plan_for(tmp_path, model=str(tmp_path / name))
        assert says in info.value.hint


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"model_type": "llama"}', "no 'architectures'"),
])
def test_bad_hf_configs_are_clear_errors(tmp_path, text, fragment):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(BuildError) as err:
        read_hf_config(tmp_path)
    assert fragment in err.value.message


# ------------------------------------------------------------------------------ model resolution
def test_name_resolves_under_models_dirs_in_priority_order(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    hf_folder(second, "Qwen3-8B", "qwen3")
    hf_folder(second / "Qwen", "Qwen2-7B", "qwen2")
    first.mkdir()
    dirs = [("--models-dir", first), ("$TRTLADE_MODELS_DIR", second)]
    assert resolve_model("Qwen3-8B", dirs).path == (second / "Qwen3-8B").resolve()
    # an organisation sub-folder is searched, and an org/name spelling works too
    assert resolve_model("Qwen2-7B", dirs).path == (second / "Qwen" / "Qwen2-7B").resolve()
    assert resolve_model("Qwen/Qwen2-7B", dirs).path == (second / "Qwen" / "Qwen2-7B").resolve()
    hf_folder(first, "Qwen3-8B", "qwen3")
    assert resolve_model("Qwen3-8B", dirs).path == (first / "Qwen3-8B").resolve()


def test_missing_name_lists_every_place_looked_and_never_a_hub(tmp_path):
    dirs = [("--models-dir", tmp_path / "a"), ("$TRTLADE_MODELS_DIR", tmp_path)]
    with pytest.raises(BuildError) as err:
        resolve_model("Qwen3-8B", dirs)
    assert str(tmp_path / "a") in err.value.message and "not a directory" in err.value.message
    assert str(tmp_path / "Qwen3-8B") in err.value.message and "$TRTLADE_MODELS_DIR" in err.value.message
    assert "never downloads" in err.value.hint
    with pytest.raises(BuildError) as err:
        resolve_model("Qwen3-8B", [])
    assert "no models directory" in err.value.message and "TRTLADE_MODELS_DIR" in err.value.hint


def test_models_dir_from_flag_config_and_env(tmp_path):
    hf_folder(tmp_path / "env-models", "M", "llama")
    hf_folder(tmp_path / "cfg-models", "M", "qwen2")
    spec = LookaheadSpec(4, 2, 4)
    env = {"TRTLADE_MODELS_DIR": str(tmp_path / "env-models")}
    opts = BuildOptions(model="M", spec=spec, output=tmp_path / "o")
    assert make_plan(opts, env=env, cwd=tmp_path).info.architecture == "LlamaForCausalLM"
    cfg_file = tmp_path / "deploy.yml"
    with_cfg = BuildOptions(model="M", spec=spec, output=tmp_path / "o", config_path=cfg_file)
    plan = make_plan(with_cfg, config={"model": {"models_dir": "cfg-models"}}, env=env, cwd=tmp_path)
    assert plan.info.architecture == "Qwen2ForCausalLM"  # config's models_dir, relative to the config file


def test_bundle_folder_given_as_model_is_explained(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "trtlade-manifest.json").write_text("{}")
    with pytest.raises(BuildError) as err:
        resolve_model(str(tmp_path / "b"), [])
    assert "is a trtlade bundle" in err.value.message


# ------------------------------------------------------------------------------ precedence
@pytest.mark.parametrize("flag, cfg, expected, origin", [
    (None, None, 8, "default"),
    (None, 32, 32, "deploy.yml:build.max_batch_size"),
    (64, 32, 64, "--max-batch-size"),
])
def test_flags_override_config_override_defaults(tmp_path, flag, cfg, expected, origin):
    config = {"lookahead": {"spec": "7,7,7"}, "build": {} if cfg is None else {"max_batch_size": cfg}}
    plan = plan_for(tmp_path, config=config, config_path=tmp_path / "deploy.yml", max_batch_size=flag)
    assert plan.limits.max_batch_size == expected
    assert plan.origin["max_batch_size"].replace(str(tmp_path) + "/", "") == origin


def test_spec_flag_overrides_config_and_config_spec_is_used_without_flag(tmp_path):
    config = {"lookahead": {"spec": "7,7,7"}}
    assert plan_for(tmp_path, config=config).spec == LookaheadSpec(4, 2, 4)
    plan = plan_for(tmp_path / "x", config=config, spec=None)
    assert plan.spec == LookaheadSpec(7, 7, 7) and plan.max_draft_len == 83


def test_no_spec_anywhere_is_an_error(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, spec=None)
    assert err.value.where == "--wng"


def test_autoregressive_spec_cannot_be_built(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, spec=LookaheadSpec(1, 1, 0))
    assert "max_draft_len 0" in err.value.message and "request_default" in err.value.hint


def test_invalid_config_values_name_the_field(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, config={"build": {"max_batch_size": 0}}, config_path=tmp_path / "d.yml")
    assert err.value.where == f"{tmp_path / 'd.yml'}:build.max_batch_size"


def test_max_seq_len_must_leave_room_for_output(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, max_input_len=4096, max_seq_len=4096)
    assert err.value.where == "--max-seq-len" and "no room for output" in err.value.message


def test_defaults_dtype_and_notes(tmp_path):
    plan = plan_for(tmp_path, "llama", max_batch_size=64, max_num_tokens=256)
    assert plan.limits == Limits(64, 2048, 4096, 256)
    assert (plan.dtype_requested, plan.dtype, plan.gemm_plugin) == ("auto", "float16", "float16")
    assert any("raises max_num_tokens 256 to 512" in n for n in plan.notes)
    assert plan.limits.as_built(7) == {"max_batch_size": 64, "max_input_len": 2048, "max_seq_len": 4103,
                                       "max_num_tokens": 512}


@pytest.mark.parametrize("flag, config, where", [
    ("1.3.0", None, "--trtllm-version"), ("1.3.0rc21", None, "--trtllm-version"),
    (None, {"build": {"trtllm_version": "1.3.0"}}, "build.trtllm_version"),
    ("1.3.0", {"build": {"trtllm_version": "1.2.1"}}, "--trtllm-version"),  # the flag wins
])
def test_a_lookahead_engine_aimed_at_1_3_is_refused_with_the_pytorch_equivalent(tmp_path, flag, config, where):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, trtllm_version=flag, config=config)
    assert err.value.where.endswith(where) and "no TensorRT-engine backend and no Lookahead" in err.value.message
    assert "--speculation sa" in err.value.hint and "decoding_type: SA" in err.value.hint


@pytest.mark.parametrize("flag, config, release, origin", [
    ("1.2.1", None, "1.2.1", "--trtllm-version"),
    (None, {"build": {"trtllm_version": "0.21.0"}}, "0.21.0", "config:build.trtllm_version"),
    (None, None, None, None),
])
def test_a_lookahead_engine_below_1_3_records_the_release_it_is_for(tmp_path, flag, config, release, origin):
    plan = plan_for(tmp_path, trtllm_version=flag, config=config)
    assert plan.release == release and plan.origin.get("release") == origin
    assert (f"# for TensorRT-LLM {release} ({origin})" in plan.render()) == (release is not None)


@pytest.mark.parametrize("version, fragment", [("banana", "not a TensorRT-LLM version"), ("0.9.0", "older than 0.16")])
def test_a_release_that_is_no_release_is_refused_where_it_was_given(tmp_path, version, fragment):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, trtllm_version=version)
    assert err.value.where == "--trtllm-version" and fragment in err.value.message


def test_a_release_named_for_the_reference_engine_is_noted_not_dropped(tmp_path):
    plan = plan_for(tmp_path, "llama", backend="reference", trtllm_version="1.3.0")
    assert plan.backend == "reference" and plan.release is None
    assert "--trtllm-version 1.3.0 is not used: the reference engine runs without TensorRT-LLM" in plan.notes


@pytest.mark.parametrize("heads, kv, layers, tp, pp, said", [
    (28, 4, 28, 8, 1, "tp_size 8 does not divide the model's 28 attention heads"),    # Qwen2-7B
    (28, 4, 28, 7, 1, "tp_size 7 cannot hold the model's 4 KV heads"),               # 28 % 7 == 0, 7 % 4 != 0
    (32, 8, 32, 16, 1, None),                                                           # 8 KV heads copied to 16
    (32, 8, 36, 1, 64, "pp_size 64 is more pipeline stages than the model's 36 decoder layers"),
    (32, 8, 36, 2, 5, None),                                                            # uneven: said in a note
])
def test_a_split_the_model_cannot_take_is_refused_before_the_gpu(tmp_path, heads, kv, layers, tp, pp, said):
    """trtllm-build and the PyTorch backend assert these at conversion or load, on the GPU machine."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**HF_CONFIGS["qwen3"], "num_attention_heads": heads,
                                                    "num_key_value_heads": kv, "num_hidden_layers": layers}))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    for backend in ("trtllm", "pytorch"):
        options = dict(backend=backend, tp_size=tp, pp_size=pp)
        if backend == "pytorch":
            options.update(speculation="sa", trtllm_version="1.3.0", spec=None)
        if said is None:
            plan = plan_for(tmp_path, model=str(folder), output=tmp_path / f"out-{backend}", **options)
            assert (plan.tp_size, plan.pp_size) == (tp, pp)
            assert any("take one layer more" in n for n in plan.notes) == (layers % pp != 0)
            continue
        with pytest.raises(BuildError, match=said) as err:
            plan_for(tmp_path, model=str(folder), output=tmp_path / f"out-{backend}", **options)
        assert err.value.where == ("--tp-size" if "tp_size" in said else "--pp-size") and err.value.hint


def test_reference_backend_refuses_parallelism(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, backend="reference", tp_size=2)
    assert err.value.where == "--tp-size" and "one CPU process" in err.value.message


def test_backend_defaults_to_reference_for_the_embedded_model_without_trtllm(tmp_path):
    embedded = hf_folder(tmp_path, "SmolLM2", "llama")
    options = BuildOptions(spec=LookaheadSpec(4, 2, 4))
    plan = make_plan(options, env={}, cwd=tmp_path, trtllm_present=False, embedded_dir=lambda: embedded)
    assert plan.backend == "reference" and plan.embedded
    assert plan.output == tmp_path / "SmolLM2-135M-Instruct-reference-4-2-4"
    assert make_plan(options, env={}, cwd=tmp_path, trtllm_present=True,
                     embedded_dir=lambda: embedded).backend == "trtllm"
    named = BuildOptions(model=str(embedded), spec=LookaheadSpec(4, 2, 4))
    assert make_plan(named, env={}, cwd=tmp_path, trtllm_present=False).backend == "trtllm"


# ------------------------------------------------------------------------------ the argv
def test_trtllm_build_argv_is_exact(tmp_path):
    plan = plan_for(tmp_path, "qwen3", tp_size=2, max_batch_size=16)
    assert plan.build_argv() == [
        "trtllm-build",
        "--checkpoint_dir", str(tmp_path / "out" / "checkpoint"),
        "--output_dir", str(tmp_path / "out" / "engine"),
        "--speculative_decoding_mode", "lookahead_decoding",
        "--max_draft_len", "7",
        "--max_batch_size", "16",
        "--max_input_len", "2048",
        "--max_seq_len", "4096",
        "--max_num_tokens", "8192",
        "--max_beam_width", "1",
        "--kv_cache_type", "paged",
        "--gemm_plugin", "bfloat16",
        "--use_paged_context_fmha", "enable",
        "--workers", "2",
    ]
    assert plan.convert_argv()[1:] == [
        "-m", "trtlade.builder.convert", "--hf-dir", str(plan.model.path),
        "--checkpoint-dir", str(tmp_path / "out" / "checkpoint"), "--model-class", "QWenForCausalLM",
        "--architecture", "Qwen3ForCausalLM",
        "--dtype", "bfloat16", "--tp-size", "2", "--pp-size", "1",
    ]


def test_workers_follow_gpus_when_known(tmp_path):
    options = BuildOptions(model=str(hf_folder(tmp_path, "m", "qwen2")), spec=LookaheadSpec(4, 2, 4),
                           tp_size=4, output=tmp_path / "o")
    assert make_plan(options, env={}, cwd=tmp_path, gpu_count=2).workers == 2
    assert make_plan(options, env={}, cwd=tmp_path, gpu_count=None).workers == 4


@settings(max_examples=40, deadline=None)
@given(w=st.integers(1, 12), n=st.integers(2, 9), g=st.integers(0, 12), tp=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2]))
def test_argv_invariants(tmp_path_factory, w, n, g, tp, pp):
    spec = LookaheadSpec(w, n, g)
    assume(spec.max_draft_len > 0)  # (1,2,0) drafts nothing: refused, tested above
    tmp = tmp_path_factory.mktemp("p")
    plan = plan_for(tmp, "qwen2", spec=spec, tp_size=tp, pp_size=pp)
    argv = plan.build_argv()
    flags = argv[1::2]
    values = dict(zip(argv[1::2], argv[2::2]))
    assert len(flags) == len(set(flags))  # every flag once, each with a value
    assert int(values["--max_draft_len"]) == (n - 2) + (w - 1 + g) * (n - 1)
    assert "--tp_size" not in flags and "--pp_size" not in flags and "--gather_context_logits" not in flags
    assert values["--speculative_decoding_mode"] == "lookahead_decoding" and values["--max_beam_width"] == "1"
    conv = plan.convert_argv()
    assert conv[conv.index("--tp-size") + 1] == str(tp) and conv[conv.index("--pp-size") + 1] == str(pp)


def test_rendered_commands_are_shell_quoted(tmp_path):
    plan = plan_for(tmp_path, "llama", output=tmp_path / "my bundle")
    text = plan.render()
    commands = [c for c in text.replace("\\\n", " ").splitlines() if c and not c.startswith("#")]
    parsed = [shlex.split(c) for c in commands]
    build = next(p for p in parsed if p[0] == "trtllm-build")
    assert build[:build.index(">")] == plan.build_argv()  # then "> logs/trtllm-build.log 2>&1"
    assert parsed[0] == ["mkdir", "-p", str(tmp_path / "my bundle" / "logs")]
    joined = shell_join(["a b", "--x", "c'd", "--flag"]).replace("\\\n", " ")  # shell line continuations
    assert shlex.split(joined) == ["a b", "--x", "c'd", "--flag"]


# ------------------------------------------------------------------------------ dry-run
def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    model = hf_folder(tmp_path / "models", "Qwen3-8B", "qwen3")
    before = sorted(p for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["build", "--model", "Qwen3-8B", "--models-dir", str(tmp_path / "models"),
                                      "--wng", "4,2,4", "--output", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert "--max_draft_len 7" in result.stdout and "--speculative_decoding_mode lookahead_decoding" in result.stdout
    assert f"--hf-dir {model}" in result.stdout
    assert "max_seq_len 4096 + 7 = 4103" in result.stdout


def test_dry_run_works_without_tensorrt_llm_anywhere(tmp_path):
    """A fresh interpreter with no test double on any path: the plan still prints."""
    hf_folder(tmp_path, "m", "llama")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("TRTLADE_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "fakes" not in p)
    code = ("import sys; from trtlade.cli.main import app\n"
            "try:\n    app(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "assert 'tensorrt_llm' not in sys.modules and 'torch' not in sys.modules, 'heavy import'\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, "build", "--model", str(tmp_path / "m"), "--wng",
                           "7,7,7", "--output", str(tmp_path / "o"), "--dry-run"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--max_draft_len 83" in proc.stdout and not (tmp_path / "o").exists()


def test_cli_bad_spec_and_missing_config_exit_cleanly(tmp_path):
    runner = CliRunner()
    bad = runner.invoke(app, ["build", "--model", str(tmp_path), "--wng", "4,1,4", "--dry-run"])
    assert bad.exit_code == 2 and "ngramSize=1 requires verificationSetSize=0" in bad.stderr
    missing = runner.invoke(app, ["build", "--config", str(tmp_path / "nope.yml"), "--dry-run"])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    (tmp_path / "bad.yml").write_text("build: [unclosed\n")
    broken = runner.invoke(app, ["build", "--config", str(tmp_path / "bad.yml"), "--dry-run"])
    assert broken.exit_code == 1 and "bad.yml:" in broken.stderr and "Traceback" not in broken.output


def test_dry_run_with_the_embedded_model_converts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["build", "--wng", "4,2,4", "--backend", "reference", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "converted into" in result.stdout and "SmolLM2-135M-Instruct" in result.stdout
    assert "trtlade serve --config" in result.stdout
    assert list(tmp_path.iterdir()) == []  # no cache folder, no bundle


def test_build_architectures_lists_every_architecture_with_its_first_release():
    result = CliRunner().invoke(app, ["build", "--architectures"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") >= 4}
    assert set(ARCHITECTURE_TO_CLASS) <= set(rows)
    assert "GemmaForCausalLM" in rows["Gemma3ForCausalLM"] and "0.19.0" in rows["Gemma3ForCausalLM"]
    assert "1.0.0" in rows["Qwen3ForCausalLM"]


def test_plan_notes_the_executors_prompt_limit_when_max_num_tokens_is_below_max_input_len(tmp_path):
    """TrtGptModel admits min(max_seq_len - 1, max_num_tokens) with context FMHA: the plan says so."""
    plan = plan_for(tmp_path, "llama", max_batch_size=8, max_input_len=16384, max_seq_len=20480,
                    max_num_tokens=8192)
    [note] = [n for n in plan.notes if "max_input_len 16384 is above max_num_tokens 8192" in n]
    assert "= 8192 tokens" in note and "--max-num-tokens 16384" in note
    fits = plan_for(tmp_path / "2", "llama", max_batch_size=8, max_input_len=4096, max_num_tokens=8192)
    assert not [n for n in fits.notes if "is above max_num_tokens" in n]


# ------------------------------------------------------------------------------ Qwen3 release floors
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
             "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "tie_word_embeddings": True}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
            "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "torch_dtype": "bfloat16",
             "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}


def _qwen3_plan(tmp_path, monkeypatch, config, installed):
    monkeypatch.setattr("trtlade.builder.plan.installed_version", lambda: installed)
    folder = tmp_path / "models" / "q"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    return make_plan(BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), output=tmp_path / "out"),
                     config=None, env={}, cwd=tmp_path, trtllm_present=True)


@pytest.mark.parametrize("config, installed, first", [
    (QWEN3_8B, "1.0.0rc0", "1.0.0rc3"), (QWEN3_8B, "1.0.0rc2", "1.0.0rc3"), (QWEN3_8B, "1.0.0rc3", None),
    (QWEN3_8B, "1.0.0", None), (QWEN3_06B, "1.0.0rc3", "1.0.0rc5"), (QWEN3_06B, "1.0.0rc4", "1.0.0rc5"),
    (QWEN3_06B, "1.0.0rc5", None), (QWEN3_06B, "1.2.0", None), (QWEN3_MOE, "1.0.0rc5", "1.0.0rc6"),
    (QWEN3_MOE, "1.0.0rc6", None), (QWEN3_8B, "0.16.0", None),  # 0.x: maybe patched, the probe decides
])
def test_qwen3_is_refused_below_the_first_release_that_converts_that_checkpoint(tmp_path, monkeypatch, config,
                                                                                 installed, first):
    if first is None:
        plan = _qwen3_plan(tmp_path, monkeypatch, config, installed)
        (note,) = [n for n in plan.notes if n.startswith("this Qwen3 checkpoint needs")]
        assert f"installed: {installed}" in note
        return
    with pytest.raises(BuildError) as err:
        _qwen3_plan(tmp_path, monkeypatch, config, installed)
    assert f"TensorRT-LLM {installed} does not convert this Qwen3 checkpoint" in err.value.message
    assert f"the first release that does is {first}" in err.value.message
    assert f"tensorrt-llm>={first},<1.3" in err.value.hint and "--backend reference" in err.value.hint
    if first == "1.0.0rc5":
        assert "(head_dim 128)" in err.value.message and "#6182" in err.value.message


def test_qwen3_with_tied_embeddings_is_warned_not_refused(tmp_path, monkeypatch):
    plan = _qwen3_plan(tmp_path, monkeypatch, QWEN3_06B, "1.2.0")
    assert any("tie_word_embeddings is true" in n and "open upstream" in n for n in plan.notes)
    assert not any("tie_word_embeddings" in n for n in _qwen3_plan(tmp_path / "b", monkeypatch, QWEN3_8B,
                                                                    "1.2.0").notes)


@pytest.mark.parametrize("method", ["awq", "gptq", "fp8", "compressed-tensors"])
def test_a_quantized_checkpoint_is_refused_by_name_with_what_builds_it(tmp_path, monkeypatch, method):
    config = dict(QWEN3_8B, quantization_config={"quant_method": method, "bits": 4})
    with pytest.raises(BuildError) as err:
        _qwen3_plan(tmp_path, monkeypatch, config, "1.2.0")
    assert f"quant_method: {method}" in err.value.message and "full-precision" in err.value.message
    assert "quantize.py" in err.value.hint and "int4_gptq" in err.value.hint
    assert err.value.where.endswith("config.json:quantization_config")


def test_a_config_problem_is_worded_as_validate_config_words_it(tmp_path):
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, config={"lookahead": {"spec": "4,2,4", "sped": 1}}, config_path=tmp_path / "d.yml")
    assert err.value.message == "unknown key 'sped' in lookahead" and "did you mean 'spec'?" in err.value.hint
    assert err.value.where == f"{tmp_path / 'd.yml'}:lookahead.sped"


@pytest.mark.parametrize("lookahead, fragment", [
    ({"spec": "4,2,4", "request_default": "4,2,4"}, "lookahead.request_default (4,2,4) is not admitted"),
    ({"spec": "4,2,4", "schedule": [{"up_to": 2, "spec": "4,2,4"}, {"spec": "1,1,0"}]}, "lookahead.schedule band 0"),
])
def test_wng_that_the_files_own_keys_exceed_is_blamed_not_the_file(tmp_path, lookahead, fragment):
    """The file alone passes validate-config: the hint must not send the user there."""
    with pytest.raises(BuildError) as err:
        plan_for(tmp_path, spec=LookaheadSpec(2, 2, 2), config={"lookahead": lookahead},
                 config_path=tmp_path / "d.yml")
    assert err.value.where == "--wng" and fragment in err.value.message
    assert "raise --wng" in err.value.hint and "validate-config" not in err.value.hint


def test_engine_only_flags_given_for_the_reference_engine_are_noted(tmp_path):
    plan = plan_for(tmp_path, "llama", backend="reference", max_input_len=100, keep_checkpoint=False)
    [note] = [n for n in plan.notes if "not used by the reference engine" in n]
    assert note.startswith("--max-input-len, --keep-checkpoint/--no-keep-checkpoint") and "max_prompt_tokens" in note
    assert not [n for n in plan_for(tmp_path / "b", "llama", backend="reference").notes if "not used by" in n]

"""Gemma 2/3's sliding windows and Lookahead on TensorRT-LLM (trtlade.trtllm.windows): a Lookahead engine
is allowed only when its max_seq_len is within the smallest window; build, validate-config, serve and
every export refuse the rest with the reason and TensorRT-LLM's message; the executor double refuses
variable windows with Lookahead as TrtGptModelInflightBatching does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hf_configs import HF_CONFIGS
from trtlade.builder.errors import BuildError
from trtlade.builder.plan import BuildOptions, make_plan
from trtlade.cli.main import app
from trtlade.spec import LookaheadSpec
from trtlade.trtllm.engine_config import check_engine, read_engine_config
from trtlade.trtllm.failures import diagnose
from trtlade.trtllm.windows import from_engine_config, from_hf_config, lookahead_refusal

ENGINES = Path(__file__).resolve().parent / "data" / "engines"


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "gemma2", "sliding_window": 4096, "num_hidden_layers": 26}, (4096, 13, 26)),
    ({"model_type": "gemma3_text", "sliding_window": 512, "sliding_window_pattern": 6, "num_hidden_layers": 18},
     (512, 15, 18)),
    ({"model_type": "gemma3_text", "sliding_window": 512, "num_hidden_layers": 4,
      "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]}, (512, 3, 4)),
    ({"model_type": "qwen2", "sliding_window": 4096, "num_hidden_layers": 2,
      "layer_types": ["full_attention", "full_attention"]}, None),  # every layer global
    ({"model_type": "mistral", "sliding_window": 4096, "num_hidden_layers": 32}, None),  # one window: not variable
    ({"model_type": "llama", "num_hidden_layers": 16}, None),
])
def test_which_configs_have_variable_windows(config, expected):
    found = from_hf_config(config)
    assert (None if found is None else (found.smallest, found.local_layers, found.layers)) == expected


@pytest.mark.parametrize("max_seq_len, refused", [(511, False), (512, False), (513, True), (4103, True)])
def test_the_rule_is_max_seq_len_within_the_smallest_window(max_seq_len, refused):
    windows = from_hf_config(HF_CONFIGS["gemma3"])
    message = lookahead_refusal(windows, max_seq_len)
    assert (message is not None) == refused
    if refused:
        assert "Rewinding KV cache blocks for variable SWA models isn't supported" in message
        assert "22 of the model's 26 layers" in message and "max_attention_window" in message


def _plan(tmp_path, kind, **opts):
    folder = tmp_path / "models" / kind
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS[kind]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    options = BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), output=tmp_path / "out", **opts)
    return make_plan(options, config=None, env={}, cwd=tmp_path, trtllm_present=True)


@pytest.mark.parametrize("kind, window", [("gemma3", 512), ("gemma2", 4096)])
def test_build_refuses_a_lookahead_engine_past_the_window_and_names_the_length_that_works(tmp_path, kind, window):
    with pytest.raises(BuildError) as err:
        _plan(tmp_path, kind)  # default max_seq_len 4096 + 7 draft tokens
    assert f"sliding window of {window} tokens" in err.value.message and "max_seq_len 4103" in err.value.message
    assert "isn't supported" in err.value.message and "reference" in err.value.hint
    assert f"--max-seq-len {window - 7} or less" in err.value.hint and err.value.where.startswith("default")


def test_build_plans_a_lookahead_engine_the_window_covers_and_says_why(tmp_path):
    plan = _plan(tmp_path, "gemma3", max_input_len=256, max_seq_len=505)
    assert plan.limits.as_built(plan.max_draft_len)["max_seq_len"] == 512
    assert any("covers the engine's whole sequence (max_seq_len 512 as built)" in n for n in plan.notes)
    assert "covers the engine's whole sequence" in plan.render()


def _engine(tmp_path, arch="Gemma3ForCausalLM", max_seq_len=4103, lookahead=True, window=512) -> Path:
    engine = tmp_path / "engine"
    shutil.copytree(ENGINES / ("qwen3-8b-424" if lookahead else "qwen3-8b-plain"), engine)
    data = json.loads((engine / "config.json").read_text())
    data["pretrained_config"].update({"architecture": arch, "num_hidden_layers": 26})
    if arch == "Gemma3ForCausalLM":
        data["pretrained_config"].update({"sliding_window": window, "_sliding_window_pattern": 6})
    data["build_config"]["max_seq_len"] = max_seq_len
    data["build_config"]["max_input_len"] = min(data["build_config"]["max_input_len"], max_seq_len // 2)
    (engine / "config.json").write_text(json.dumps(data))
    return engine


@pytest.mark.parametrize("arch, max_seq_len, lookahead, code", [
    ("Gemma3ForCausalLM", 4103, True, "lookahead-variable-swa"),
    ("Gemma3ForCausalLM", 512, True, None),
    ("Gemma2ForCausalLM", 4103, True, "lookahead-variable-swa"),  # Gemma 2's 4096 (not in the engine)
    ("Gemma2ForCausalLM", 4096, True, None),
    ("Gemma3ForCausalLM", 4096, False, "plain-engine-global-windows"),
    ("Gemma3ForCausalLM", 512, False, None),
    ("Qwen3ForCausalLM", 4103, True, None),
])
def test_engine_checks(tmp_path, arch, max_seq_len, lookahead, code):
    engine = read_engine_config(_engine(tmp_path, arch, max_seq_len, lookahead))
    spec = LookaheadSpec(4, 2, 4) if lookahead else LookaheadSpec(1, 1, 0)
    codes = ("lookahead-variable-swa", "plain-engine-global-windows")
    found = [d for d in check_engine(spec, engine) if d.code in codes]
    assert [d.code for d in found] == ([code] if code else [])
    if code == "lookahead-variable-swa":
        assert found[0].severity == "error" and found[0].path == "build_config.max_seq_len"
        assert f"--max-seq-len {(512 if arch.startswith('Gemma3') else 4096) - 7}" in found[0].hint
    if code == "plain-engine-global-windows":
        assert found[0].severity == "warning"


def test_gemma2_engine_window_is_taken_as_4096_and_says_so():
    windows = from_engine_config({"pretrained_config": {"architecture": "Gemma2ForCausalLM", "num_hidden_layers": 42}})
    assert windows.smallest == 4096 and "does not record it" in windows.source


def _bundle(tmp_path, max_seq_len) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    shutil.copytree(_engine(tmp_path, max_seq_len=max_seq_len), root / "engine")
    data = json.loads((root / "engine" / "config.json").read_text())
    data["version"] = "0.19.0"
    (root / "engine" / "config.json").write_text(json.dumps(data))
    (root / "trtlade.yml").write_text("model:\n  path: /models/gemma-3-1b-it\nlookahead:\n  spec: 4,2,4\n")
    (root / "trtlade-manifest.json").write_text(json.dumps({"format": 1, "backend": "trtllm"}))
    return root


def test_validate_config_refuses_the_engine_with_the_upstream_message(tmp_path):
    bundle = _bundle(tmp_path, 4103)
    result = CliRunner().invoke(app, ["validate-config", str(bundle / "trtlade.yml"), "--engine-dir",
                                      str(bundle / "engine")])
    assert result.exit_code == 1
    text = " ".join((result.output + result.stderr).split())
    assert "config.json" in text and "error: build_config.max_seq_len" in text and "isn't supported" in text
    assert "--max-seq-len 505" in text


@pytest.mark.parametrize("target, out", [("triton", "repo"), ("grps", "inference.yml"), ("k8s", "k8s")])
def test_every_export_refuses_the_engine(tmp_path, target, out):
    bundle = _bundle(tmp_path, 4103)
    result = CliRunner().invoke(app, ["export", target, str(bundle), "--out", str(tmp_path / out)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "sliding window of 512 tokens" in text and "--max-seq-len 505" in text
    assert not (tmp_path / out).exists()


def test_serve_preflight_refuses_the_engine(tmp_path, fake_trtllm):
    from trtlade.trtllm.engine import TrtllmLaunch, TrtllmStartError, preflight

    engine = _engine(tmp_path)
    with pytest.raises(TrtllmStartError) as err:
        preflight(TrtllmLaunch(engine_dir=engine, spec=LookaheadSpec(4, 2, 4), tokenizer_dir=tmp_path))
    assert "build_config.max_seq_len" in err.value.message and "isn't supported" in err.value.message


def test_the_executor_double_refuses_variable_windows_with_lookahead(tmp_path, fake_trtllm):
    """mirrors TrtGptModelInflightBatching's constructor: a Lookahead engine with per-layer windows does not
    start; one window (or none: max_seq_len for every layer) does; a plain engine takes the windows."""
    import tensorrt_llm.bindings.executor as tle

    def start(engine, windows, lookahead=True):
        decoding = tle.DecodingConfig(decoding_mode=tle.DecodingMode.Lookahead(),
                                      lookahead_decoding_config=tle.LookaheadDecodingConfig(4, 2, 4)) \
            if lookahead else tle.DecodingConfig()
        config = tle.ExecutorConfig(max_beam_width=1, decoding_config=decoding,
                                    kv_cache_config=tle.KvCacheConfig(max_attention_window=windows))
        return tle.Executor(engine, tle.ModelType.DECODER_ONLY, config)

    lookahead_engine = _engine(tmp_path / "a", max_seq_len=4103)
    with pytest.raises(RuntimeError) as err:
        start(lookahead_engine, [512] * 5 + [4103])
    assert diagnose(str(err.value)).code == "lookahead-variable-swa"
    start(lookahead_engine, None).shutdown()
    start(_engine(tmp_path / "b", max_seq_len=512), [512] * 5 + [4103]).shutdown()  # both clamp to 512: one window
    start(_engine(tmp_path / "c", max_seq_len=4096, lookahead=False), [512] * 5 + [4096], lookahead=False).shutdown()


def test_reference_engine_is_not_concerned(tmp_path):
    """The rule is TensorRT-LLM's: a reference-engine build of Gemma 3 plans whatever max_seq_len."""
    folder = tmp_path / "models" / "gemma3"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS["gemma3"]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    plan = make_plan(BuildOptions(model=str(folder), spec=LookaheadSpec(4, 2, 4), output=tmp_path / "o",
                                  backend="reference"), config=None, env={}, cwd=tmp_path, trtllm_present=False)
    assert plan.backend == "reference"


@pytest.mark.parametrize("max_seq_len, refused", [(None, True), (4096, True), (505, False)])
def test_validate_config_refuses_a_config_past_the_window_before_any_engine(tmp_path, max_seq_len, refused):
    folder = tmp_path / "gemma3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS["gemma3"]))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    build = "" if max_seq_len is None else f"build:\n  max_input_len: 256\n  max_seq_len: {max_seq_len}\n"
    cfg = tmp_path / "deploy.yml"
    cfg.write_text(f"model:\n  path: {folder}\nlookahead:\n  spec: 4,2,4\nserve:\n  engine: trtllm\n{build}")
    result = CliRunner().invoke(app, ["validate-config", str(cfg)])
    text = " ".join((result.output + result.stderr).split())
    assert (result.exit_code == 1) == refused, text
    if refused:
        assert "sliding window of 512 tokens" in text and "build.max_seq_len: 505 or less" in text

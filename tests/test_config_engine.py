"""Engine config.json reading and the engine checks (trtlade.trtllm.engine_config)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.config.schema import BuildSection
from trtlade.diagnostics import has_errors
from trtlade.spec import LookaheadSpec, SpecError
from trtlade.trtllm.engine_config import (
    EngineConfig,
    EngineConfigError,
    SpeculativeDecodingMode,
    check_engine,
    read_engine_config,
    specs_fitting_engine,
    version_supported,
)

ENGINES = Path(__file__).resolve().parent / "data" / "engines"
GOOD = ENGINES / "qwen3-8b-424"
S424 = LookaheadSpec(4, 2, 4)


def _raw(name: str = "qwen3-8b-424") -> dict:
    return json.loads((ENGINES / name / "config.json").read_text())


def _engine_dir(tmp_path: Path, data: dict, ranks: int = 1) -> Path:
    d = tmp_path / "engine"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data, indent=4))
    for r in range(ranks):
        (d / f"rank{r}.engine").write_bytes(b"x")
    return d


def _codes(diags, severity="error"):
    return sorted(d.code for d in diags if d.severity == severity)


# ------------------------------------------------------------------------------------------ reading
def test_reads_the_sample_engines():
    e = read_engine_config(GOOD)
    assert (e.version, e.architecture, e.dtype) == ("0.16.0", "Qwen3ForCausalLM", "bfloat16")
    assert (e.world_size, e.tp_size, e.pp_size) == (1, 1, 1)
    assert (e.max_batch_size, e.max_input_len, e.max_seq_len, e.max_num_tokens) == (16, 2048, 4103, 8192)
    assert (e.max_beam_width, e.max_draft_len, e.speculative_decoding_mode) == (1, 7, 8)
    assert e.is_lookahead and e.speculative_decoding_mode_name == "LOOKAHEAD_DECODING"
    assert e.rank_engines == ("rank0.engine",) and e.missing_rank_engines == ()
    assert e.paged_kv_cache is True and e.plugin_config["gemm_plugin"] == "bfloat16"
    tp2 = read_engine_config(ENGINES / "qwen3-8b-424-tp2")
    assert (tp2.world_size, tp2.tp_size, tp2.rank_engines) == (2, 2, ("rank0.engine", "rank1.engine"))
    assert not read_engine_config(ENGINES / "qwen3-8b-plain").is_lookahead
    assert read_engine_config(ENGINES / "qwen3-8b-draft39").max_draft_len == 39


def test_accepts_the_config_json_path_itself():
    assert read_engine_config(GOOD / "config.json").path == GOOD


def test_locate_finds_nested_keys():
    e = read_engine_config(GOOD)
    line, col = e.locate("build_config.max_draft_len")
    assert e.text.splitlines()[line - 1][col - 1:].startswith('"max_draft_len": 7')
    assert e.locate("build_config.no_such_key") is None


@pytest.mark.parametrize("mode, expected", [
    (8, 8), ("LOOKAHEAD_DECODING", 8), ("lookahead_decoding", 8),
    ("SpeculativeDecodingMode.LOOKAHEAD_DECODING", 8), (1, 1), ("NONE", 1), ("medusa", 4),
])
def test_speculative_mode_spellings(mode, expected):
    assert SpeculativeDecodingMode.parse(mode) == expected


@pytest.mark.parametrize("setup, message", [
    (lambda d: d / "nope", "does not exist"),
    (lambda d: (d / "f.txt").write_text("x") and d / "f.txt", "is not a directory"),
    (lambda d: d, "has no config.json"),
    (lambda d: (d / "config.json").write_text("{not json") and d, "not valid JSON"),
    (lambda d: (d / "config.json").write_bytes(b"\xff\xfe\x00junk") and d, "not UTF-8"),
    (lambda d: (d / "config.json").write_text("[1, 2]") and d, "not a JSON object"),
    (lambda d: (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                          "model_type": "qwen3"})) and d,
     "Hugging Face model config"),
    (lambda d: (d / "config.json").write_text(json.dumps({"architecture": "Qwen3ForCausalLM",
                                                          "mapping": {}})) and d, "checkpoint config"),
    (lambda d: (d / "config.json").write_text(json.dumps({"build_config": {}})) and d,
     "missing key 'pretrained_config'"),
])
def test_read_errors_are_clear(tmp_path, setup, message):
    with pytest.raises(EngineConfigError) as info:
        read_engine_config(setup(tmp_path))
    assert message in info.value.message and info.value.hint


def test_a_bundle_given_as_the_engine_dir_points_at_its_engine(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "config.json").write_text("{}")
    with pytest.raises(EngineConfigError, match="has no config.json") as info:
        read_engine_config(tmp_path)
    assert info.value.hint == f"this is a bundle: pass its engine folder, {tmp_path / 'engine'}"


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["build_config"].pop("max_seq_len"), "missing key build_config.max_seq_len"),
    (lambda c: c["build_config"].update(max_batch_size="16"), "build_config.max_batch_size is '16', not an integer"),
    (lambda c: c["build_config"].update(max_draft_len=True), "not an integer"),
    (lambda c: c["pretrained_config"].pop("architecture"), "missing key pretrained_config.architecture"),
    (lambda c: c["build_config"].update(speculative_decoding_mode="turbo"), "not a mode"),
])
def test_missing_or_bad_keys(tmp_path, edit, message):
    data = _raw()
    edit(data)
    with pytest.raises(EngineConfigError, match=message):
        read_engine_config(_engine_dir(tmp_path, data))


@pytest.mark.parametrize("version, ok", [
    ("0.16.0", True), ("0.17.0.post1", True), ("1.2.1", True), ("1.2.0rc3", True),
    ("0.15.0", False), ("0.13.0", False), ("1.3.0", False), ("1.3.0rc5", False), ("2.0.0", False),
    ("abc", None), (None, None),
])
def test_version_range(version, ok):
    assert version_supported(version) is ok


# ------------------------------------------------------------------------------------------ checks
def test_good_engine_passes():
    diags = check_engine(S424, read_engine_config(GOOD), BuildSection(), source="c.yml")
    assert diags == []


def test_draft_len_mismatch_prints_both_numbers_and_the_assertion():
    engine = read_engine_config(ENGINES / "qwen3-8b-draft39")
    [d] = check_engine(LookaheadSpec(4, 3, 4), engine, source="c.yml")
    assert (d.severity, d.code, d.path, d.file) == ("error", "engine-max-draft-len", "lookahead.spec", "c.yml")
    assert "max_draft_len 39" in d.message and "needs 15" in d.message
    assert "requires the two to be equal" in d.message and "not caught at start" in d.message
    assert "(4,6,4)" in d.hint and "--max_draft_len 15" in d.hint


def test_fitting_specs_all_fit_and_are_meaningful():
    engine = read_engine_config(ENGINES / "qwen3-8b-draft39")
    fits = specs_fitting_engine(engine, near=LookaheadSpec(4, 3, 4))
    assert fits and all(s.max_draft_len == 39 and not s.warnings() for s in fits)
    assert not has_errors(check_engine(fits[0], engine))


def test_autoregressive_spec_on_lookahead_engine_is_an_error_with_request_default_hint():
    [d] = check_engine(LookaheadSpec(1, 1, 0), read_engine_config(GOOD))
    assert d.code == "engine-max-draft-len" and "request_default: 1,1,0" in d.hint


def test_non_lookahead_engine():
    plain = read_engine_config(ENGINES / "qwen3-8b-plain")
    [d] = check_engine(S424, plain, spec_path="models.0.inferer_args.lookahead_decoding")
    assert d.code == "engine-not-lookahead" and d.path == "models.0.inferer_args.lookahead_decoding"
    assert "without speculative decoding" in d.message and "--max_draft_len 7" in d.hint
    assert check_engine(LookaheadSpec(1, 1, 0), plain) == []      # plain serving on a plain engine


def _with(edit, spec=S424, build=None, ranks=1, tmp_path=None):
    data = _raw()
    edit(data)
    engine = read_engine_config(_engine_dir(tmp_path, data, ranks))
    return check_engine(spec, engine, build, source="c.yml")


@pytest.mark.parametrize("edit, code, severity", [
    (lambda c: c["build_config"].update(speculative_decoding_mode=4), "engine-not-lookahead", "error"),
    (lambda c: c["build_config"].update(max_draft_len=0), "engine-max-draft-len-zero", "error"),
    (lambda c: c["build_config"].update(max_beam_width=4), "engine-beam-width", "error"),
    (lambda c: c["build_config"].update(kv_cache_type="CONTINUOUS"), "engine-kv-cache", "error"),
    (lambda c: c["build_config"]["plugin_config"].update(gpt_attention_plugin=None), "engine-attention-plugin",
     "error"),
    (lambda c: c["build_config"]["plugin_config"].update(remove_input_padding=False), "engine-input-padding", "error"),
    (lambda c: c["build_config"].update(max_num_tokens=100), "engine-max-num-tokens", "error"),
    (lambda c: c["build_config"].update(max_seq_len=2055), "engine-max-seq-len", "warning"),
    (lambda c: c["build_config"].update(max_seq_len=5), "engine-max-seq-len", "error"),
    (lambda c: c.update(version="1.3.0"), "engine-version", "error"),
    (lambda c: c.update(version="0.15.0"), "engine-version", "error"),
    (lambda c: c.pop("version"), "engine-version-unknown", "warning"),
    (lambda c: c["pretrained_config"].update(dtype="float32"), "engine-dtype", "warning"),
    (lambda c: c["pretrained_config"]["mapping"].update(world_size=2, tp_size=2), "engine-rank-files", "info"),
])
def test_engine_side_findings(tmp_path, edit, code, severity):
    diags = _with(edit, tmp_path=tmp_path)
    assert code in _codes(diags, severity), [d.format_text() for d in diags]
    engine_side = [d for d in diags if d.code == code][0]
    if engine_side.file != "c.yml":       # located in the engine's config.json
        assert engine_side.file.endswith("config.json") and engine_side.line and engine_side.column


def test_max_num_tokens_message_shows_the_product(tmp_path):
    [d] = [d for d in _with(lambda c: c["build_config"].update(max_num_tokens=100), tmp_path=tmp_path)
           if d.severity == "error"]
    assert "16 * 8 = 128" in d.message and "--max_num_tokens 128" in d.hint


@pytest.mark.parametrize("build_config, plugin, limit", [
    ({"max_input_len": 16384, "max_seq_len": 20480, "max_num_tokens": 8192}, {}, 8192),   # the engine
    ({"max_input_len": 2048, "max_seq_len": 4103, "max_num_tokens": 8192}, {}, None),      # fits: no warning
    ({"max_input_len": 16384, "max_seq_len": 20480, "max_num_tokens": 8192}, {"context_fmha": False}, None),
])
def test_prompt_limit_warning_when_max_num_tokens_is_below_max_input_len(tmp_path, build_config, plugin, limit):
    """TrtGptModel admits min(max_seq_len - 1, max_num_tokens) with context FMHA and packed input."""
    def edit(c):
        c["build_config"].update(build_config)
        c["build_config"]["plugin_config"].update(plugin)

    diags = [d for d in _with(edit, tmp_path=tmp_path) if d.code == "engine-prompt-limit"]
    if limit is None:
        assert diags == []
    else:
        [d] = diags
        assert d.severity == "warning" and f"= {limit} tokens" in d.message
        assert "--max_num_tokens 16384" in d.hint and d.path == "build_config.max_num_tokens"


@pytest.mark.parametrize("build, code, path", [
    (dict(tp_size=2), "engine-parallelism", "build.tp_size"),
    (dict(pp_size=2), "engine-parallelism", "build.pp_size"),
    (dict(max_batch_size=32), "engine-max-batch-size", "build.max_batch_size"),
    (dict(max_input_len=4096), "engine-max-input-len", "build.max_input_len"),
    (dict(max_seq_len=8192), "engine-max-seq-len", "build.max_seq_len"),
    (dict(max_num_tokens=16384), "engine-max-num-tokens", "build.max_num_tokens"),
])
def test_build_section_against_engine(build, code, path):
    diags = check_engine(S424, read_engine_config(GOOD), BuildSection(**build), source="c.yml")
    assert [(d.code, d.path, d.file) for d in diags] == [(code, path, "c.yml")]


def test_build_section_that_fits_passes():
    build = BuildSection(max_batch_size=16, max_input_len=2048, max_seq_len=4096, max_num_tokens=8192)
    assert check_engine(S424, read_engine_config(GOOD), build) == []
    # unset fields promise nothing: the default max_batch_size (8) is not compared
    assert check_engine(S424, read_engine_config(GOOD), BuildSection()) == []


def test_tp2_engine_against_default_build_is_a_mismatch():
    tp2 = read_engine_config(ENGINES / "qwen3-8b-424-tp2")
    assert _codes(check_engine(S424, tp2, BuildSection())) == ["engine-parallelism"]
    assert check_engine(S424, tp2, BuildSection(tp_size=2)) == []


def _engine_for(max_draft_len: int) -> EngineConfig:
    data = copy.deepcopy(_raw())
    data["build_config"].update(max_draft_len=max_draft_len, max_seq_len=4096 + max_draft_len,
                                max_num_tokens=16 * (max_draft_len + 1) + 8192)
    return EngineConfig.from_dict(data, path="e", rank_engines=("rank0.engine",))


@settings(max_examples=60, deadline=None)
@given(w=st.integers(1, 12), n=st.integers(2, 12), g=st.integers(0, 12), delta=st.integers(-5, 5))
def test_property_draft_len_error_iff_formula_differs(w, n, g, delta):
    try:
        spec = LookaheadSpec(w, n, g)
    except SpecError:
        return
    built = spec.max_draft_len + delta
    if built <= 0:
        return
    diags = check_engine(spec, _engine_for(built))
    assert has_errors(diags) == (delta != 0)
    if delta:
        assert f"max_draft_len {built}" in diags[0].message and f"needs {spec.max_draft_len}" in diags[0].message

"""grps_trtllm inference configs (trtlade.config.grps): detection, reading, checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trtlade.config.grps import check_grps, is_grps_config, read_grps_models
from trtlade.config.loader import parse_yaml
from trtlade.config.validate import classify, validate_file
from trtlade.spec import LookaheadSpec

ENGINES = Path(__file__).resolve().parent / "data" / "engines"


#: What grps_trtllm's loader needs to start, besides the keys a test is about.
LOADABLE = ("      llm_style: llama3\n      tokenizer_type: huggingface\n      tokenizer_path: /t/\n"
            "      end_token_id: 151645\n      stop_words: ['<|im_end|>']\n")


def _grps(args: str, *, models_extra: str = "", path: Path | None = None, base: str = LOADABLE):
    body = textwrap.indent(textwrap.dedent(args).strip("\n"), " " * 6)
    given = {line.split(":")[0].strip() for line in body.splitlines() if line.startswith("      ") and ":" in line}
    base = "".join(line + "\n" for line in base.splitlines() if line.split(":")[0].strip() not in given)
    text = (f"models:\n  - name: llm\n    inferer_args:\n{base}"
            "      gpt_model_type: inflight_fused_batching\n      gpt_model_path: /nonexistent/engine/\n"
            f"{body}\n{models_extra}")
    return parse_yaml(text, "inference.yml", path=path)


def _codes(diags, severity=None):
    return [d.code for d in diags if severity is None or d.severity == severity]


BLOCK = "lookahead_decoding: {window_size: 4, ngram_size: 2, verification_set_size: 4}"


@pytest.mark.parametrize("data, grps, kind", [
    ({"models": [{"name": "m", "inferer_args": {"gpt_model_path": "/e"}}]}, True, "grps"),
    ({"models": [{"name": "m", "inferer_args": None}], "dag": {}}, True, "grps"),
    ({"models": []}, False, "grps"),                  # grps-shaped: reported as "no TensorRT-LLM model"
    ({"models": [{"name": "m"}]}, False, "grps"),
    ({"models": "x"}, False, "trtlade"),              # close to `model`: gets the did-you-mean
    ({"lookahead": {"spec": "4,2,4"}}, False, "trtlade"),
    ({"lookahed": {}}, False, "trtlade"),             # a typo of a section still gets the trtlade diagnostics
    ({"services": {}}, False, None),
    ([1, 2], False, None),
])
def test_detection(data, grps, kind):
    assert classify(data) == kind
    assert is_grps_config(data) == grps


def test_models_list_without_inferer_args_says_so(tmp_path):
    (tmp_path / "i.yml").write_text("models:\n  - name: m\n    version: 1.0.0\n")
    [d] = validate_file(tmp_path / "i.yml").diagnostics
    assert d.code == "grps-no-model" and d.line == 2


def test_unknown_model_type():
    doc = parse_yaml("models:\n  - inferer_args:\n" + LOADABLE + "      gpt_model_path: /e/\n"
                     "      gpt_model_type: continuous\n", "i.yml")
    [d] = [d for d in check_grps(doc) if d.severity == "error"]
    assert (d.code, d.line, d.column) == ("grps-model-type", 9, 23) and "inflight_fused_batching" in d.hint


def test_reads_the_block_and_settings():
    doc = _grps(BLOCK + "\nend_token_id: 151645\nstop_words: ['<|im_end|>']")
    [model], diags = read_grps_models(doc)
    assert diags == [] and model.spec == LookaheadSpec(4, 2, 4) and model.has_lookahead_block
    assert (model.index, model.name, model.loc) == (0, "llm", ("models", 0, "inferer_args"))
    assert model.arg("end_token_id") == 151645 and model.gpt_model_type == "inflight_fused_batching"


def test_non_llm_models_are_skipped_and_every_llm_model_is_checked():
    extra = ("  - name: pre\n    inferer_args: {some_setting: 1}\n"
             "  - name: second\n    inferer_args:\n" + LOADABLE + "      gpt_model_type: V1\n"
             "      gpt_model_path: /e/\n      lookahead_decoding: {window_size: 2, ngram_size: 2, "
             "verification_set_size: 1}\n")
    doc = _grps(BLOCK, models_extra=extra)
    models, _ = read_grps_models(doc)
    assert [m.index for m in models] == [0, 2]
    errors = [d for d in check_grps(doc) if d.severity == "error"]
    assert [(d.code, d.path) for d in errors] == [("grps-model-type", "models.2.inferer_args.gpt_model_type")]


def test_no_llm_model_is_an_error():
    doc = parse_yaml("models:\n  - name: m\n    inferer_args: {x: 1}\n", "i.yml")
    assert _codes(check_grps(doc)) == ["grps-no-model"]


@pytest.mark.parametrize("mode, with_block, severity", [
    (None, True, None), (None, False, None),
    ("top_k_top_p", True, "warning"), ("top_k", True, "warning"), ("lookahead", True, "warning"),
    # beam_search / medusa beside the block: grps's setLookaheadDecoding replaces the mode (trtllm_model_instance.cc)
    ("beam_search", True, "warning"), ("medusa", True, "warning"), ("sampling", True, "warning"),
    ("top_k_top_p", False, None), ("beam_search", False, None), ("lookahead", False, "warning"),
    ("lookahead_decoding", False, "warning"), ("greedy", False, "warning"),
])
def test_decoding_mode(mode, with_block, severity):
    lines = [BLOCK] if with_block else []
    if mode is not None:
        lines.append(f"decoding_mode: {mode}")
    found = [d for d in check_grps(_grps("\n".join(lines))) if d.code == "grps-decoding-mode"]
    assert [d.severity for d in found] == ([severity] if severity else [])


@pytest.mark.parametrize("sampling, warned", [
    ("{temperature: 0.7, top_k: 20, top_p: 0.8}", ["temperature 0.7", "top_k 20", "top_p 0.8"]),
    ("{top_k: 1}", []),
    ("{repetition_penalty: 1.1, random_seed: 3}", ["repetition_penalty 1.1"]),
    ("{beam_width: 1}", []),
])
def test_sampling_settings_lookahead_ignores(sampling, warned):
    diags = check_grps(_grps(f"{BLOCK}\nsampling: {sampling}"))
    found = [d for d in diags if d.code == "grps-sampling-ignored"]
    if warned:
        [d] = found
        assert all(w in d.message for w in warned) and d.severity == "warning"
        assert "Qwen3" not in d.hint                     # no qwen3 style, no thinking-mode note
    else:
        assert found == []


def test_sampling_is_not_a_concern_without_lookahead():
    assert _codes(check_grps(_grps("sampling: {temperature: 0.7}"))) == ["engine-dir-absent"]


def test_beam_width_with_lookahead():
    diags = check_grps(_grps(f"{BLOCK}\nsampling: {{beam_width: 4}}"))
    assert ("error", "models.0.inferer_args.sampling.beam_width") in [(d.severity, d.path) for d in diags]


# (line, the field it names, what validate-config says: error = grps refuses to load or fails every
# request, warning = grps logs and falls back, None = grps reads it fine); each row cites the grps source
@pytest.mark.parametrize("line, path, severity", [
    ("kv_cache_free_gpu_mem_fraction: 0", "kv_cache_free_gpu_mem_fraction", "error"),      # kvCacheConfig.cpp
    ("kv_cache_free_gpu_mem_fraction: high", "kv_cache_free_gpu_mem_fraction", "warning"),  # read in a try
    ("kv_cache_free_gpu_mem_fraction: '0.85'", "kv_cache_free_gpu_mem_fraction", None),     # yaml-cpp as<float>
    ("end_token_id: -2", "end_token_id", "error"),                     # LlmRequest::validate, range [-1, vocab)
    ("end_token_id: -1", "end_token_id", None),
    ('end_token_id: "151645"', "end_token_id", None),                  # quoted: yaml-cpp converts the scalar
    ("pad_token_id: '<pad>'", "pad_token_id", "warning"),              # customized_inferer.cc: logs, uses null
    ("stop_words: '<|im_end|>'", "stop_words", "error"),
    ("stop_words: [1, 2]", "stop_words", "error"),
    ("lookahead_decoding: [4, 2, 4]", "lookahead_decoding", "error"),  # GetParameter<...>: "not a map"
    ("lookahead_decoding:", "lookahead_decoding", "error"),            # a null node is defined: "not a map"
    ("lookahead_decoding: {window_size: four, ngram_size: 2, verification_set_size: 4}",
     "lookahead_decoding.window_size", "error"),                       # YAML_TRY_EXTRACT int32_t
    ("lookahead_decoding: {window_size: '4', ngram_size: 2, verification_set_size: 4}",
     "lookahead_decoding.window_size", None),
])
def test_bad_values(line, path, severity):
    diags = check_grps(_grps(line))
    named = [d.severity for d in diags if d.path == f"models.0.inferer_args.{path}" and d.severity != "info"]
    assert named == ([severity] if severity else []), [d.format_text() for d in diags]


def test_null_lookahead_block_quotes_grps():
    [d] = [d for d in check_grps(_grps("lookahead_decoding:")) if d.severity == "error"]
    assert "Failed to parse `lookahead_decoding` conf, not a map, conf_name: lookahead_decoding" in d.message


def test_quoted_lookahead_numbers_give_the_spec():
    [model], diags = read_grps_models(_grps("lookahead_decoding: {window_size: '4', ngram_size: \"2\", "
                                            "verification_set_size: 4}"))
    assert diags == [] and model.spec == LookaheadSpec(4, 2, 4)


# TensorRT-LLM's SamplingConfig::check* (cpp/tensorrt_llm/executor/samplingConfig.cpp): a bad value and a good
# one per rule; "warning" where only some releases refuse it
@pytest.mark.parametrize("bad, good, severity", [
    ("top_p: 1.5", "top_p: 1.0", "error"),
    ("top_p_min: -0.1", "top_p_min: 0.5", "error"),
    ("top_p_min: 0", "top_p_min: 0.5", "warning"),                     # > 0 before 1.x, >= 0 in 1.x
    ("top_p_decay: 0", "top_p_decay: 0.9", "error"),
    ("top_p_decay: 1.5", "top_p_decay: 1.0", "error"),
    ("top_p_reset_ids: -1", "top_p_reset_ids: 3", "error"),
    ("beam_search_diversity_rate: -0.5", "beam_search_diversity_rate: 0.0", "error"),
    ("no_repeat_ngram_size: -1", "no_repeat_ngram_size: 3", "error"),
    ("no_repeat_ngram_size: 0", "no_repeat_ngram_size: 3", "warning"),  # > 0 before 1.x, >= 0 in 1.x
    ("length_penalty: -1.0", "length_penalty: 1.0", "warning"),        # checkLengthPenalty: 1.x only
    ("early_stopping: -1", "early_stopping: 1", "warning"),            # checkEarlyStopping: 1.x only
    ("temperature: -1", "temperature: '0.6'", "error"),                # quoted numbers are numbers to yaml-cpp
])
def test_sampling_ranges(bad, good, severity):
    key = bad.split(":")[0]
    where = f"models.0.inferer_args.sampling.{key}"
    found = [d for d in check_grps(_grps(f"sampling: {{{bad}}}")) if d.path == where]
    assert [d.severity for d in found] == [severity]
    assert "Assertion failed: " in found[0].message and "samplingConfig.cpp" in found[0].message
    assert [d for d in check_grps(_grps(f"sampling: {{{good}}}")) if d.path == where and d.severity != "info"] == []


def test_top_p_zero_is_unset_by_grps_not_an_error():
    diags = [d for d in check_grps(_grps("sampling: {top_p: 0}")) if d.path and d.path.endswith("sampling.top_p")]
    assert [d.severity for d in diags] == ["info"] and "unset" in diags[0].message


def test_autoregressive_block_on_a_plain_engine_is_a_noop_warning():
    block = "lookahead_decoding: {window_size: 1, ngram_size: 1, verification_set_size: 0}"
    diags = check_grps(_grps(block), engine_dir=ENGINES / "qwen3-8b-plain")
    assert _codes(diags, "error") == []
    [d] = [d for d in diags if d.code == "grps-lookahead-noop"]
    assert d.severity == "warning" and "Overwriting decoding mode" in d.message
    assert [d for d in check_grps(_grps(BLOCK), engine_dir=ENGINES / "qwen3-8b-424")
            if d.code == "grps-lookahead-noop"] == []


def test_unknown_key_in_block_is_a_warning_with_did_you_mean():
    diags = check_grps(_grps("lookahead_decoding: {window_size: 4, ngram_size: 2, verification_set_size: 4, "
                             "verifcation_size: 2}"))
    [d] = [d for d in diags if d.code == "grps-lookahead-key"]
    assert d.severity == "warning" and "did you mean 'verification_set_size'?" in d.hint


@pytest.mark.parametrize("key, meant", [
    ("lookahead_decodng", "lookahead_decoding"),
    ("lookahead_decodings", "lookahead_decoding"),
    ("enable_kv_cache_resue", "enable_kv_cache_reuse"),
    ("max_tokens_in_paged_kvcache", "max_tokens_in_paged_kv_cache"),
    ("my_own_note", None),            # far from every key grps reads: left alone (a newer grps may read it)
    ("tokenizer_path", None),         # read by grps
])
def test_a_near_spelling_of_a_key_grps_reads_is_a_warning(key, meant):
    value = "{window_size: 4, ngram_size: 2, verification_set_size: 4}" if "lookahead" in key else "1"
    diags = [d for d in check_grps(_grps(f"{key}: {value}")) if d.code == "grps-unknown-key"]
    if meant is None:
        assert diags == []
        return
    [d] = diags
    assert d.severity == "warning" and d.path.endswith(key) and d.hint == f"did you mean {meant!r}?"
    assert ("runs without lookahead" in d.message) == (meant == "lookahead_decoding")


def test_spec_warnings_apply_to_the_block():
    diags = check_grps(_grps("lookahead_decoding: {window_size: 9, ngram_size: 9, verification_set_size: 9}"))
    assert "spec-too-many-draft-tokens" in _codes(diags, "warning")


def test_relative_engine_path_is_resolved_against_the_file(tmp_path):
    engine = tmp_path / "engines" / "e"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text((ENGINES / "qwen3-8b-draft39" / "config.json").read_text())
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "inference.yml").write_text(
        "models:\n  - name: llm\n    inferer_args:\n" + LOADABLE +
        "      gpt_model_type: inflight_fused_batching\n      gpt_model_path: ../engines/e/\n"
        f"      {BLOCK}\n")
    report = validate_file(conf / "inference.yml")
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == ["engine-max-draft-len"] and "not caught at start" in errors[0].message
    assert "engine-rank-files" in [d.code for d in report.diagnostics]   # only config.json was copied


def test_lookahead_engine_without_block_suggests_a_fitting_block():
    [d] = [d for d in check_grps(_grps("x: 1"), engine_dir=ENGINES / "qwen3-8b-draft39")
           if d.severity == "error"]
    assert d.code == "grps-lookahead-missing" and "Assertion failed: 16 != 40" in d.message
    assert "lookahead_decoding: {window_size: 4, ngram_size: 6, verification_set_size: 4}" in d.hint


def test_engine_built_for_15_has_no_default_trap_clause():
    import json

    data = json.loads((ENGINES / "qwen3-8b-424" / "config.json").read_text())
    data["build_config"]["max_draft_len"] = 15
    tmp = Path(__import__("tempfile").mkdtemp())
    (tmp / "config.json").write_text(json.dumps(data))
    [d] = [d for d in check_grps(_grps("x: 1"), engine_dir=tmp) if d.severity == "error"]
    assert "Assertion failed" not in d.message and "ngram_size: 3" in d.hint


def test_plain_engine_without_block_is_fine():
    diags = check_grps(_grps("x: 1"), engine_dir=ENGINES / "qwen3-8b-plain")
    assert _codes(diags, "error") == []


# ------------------------------------------------------------------- grps_trtllm's loader, mutation by mutation
USER_QWEN3 = Path(__file__).resolve().parent / "data" / "grps" / "inference_qwen3.yml"


def _mutate(tmp_path: Path, old: str, new: str) -> Path:
    text = USER_QWEN3.read_text()
    assert old in text, old
    path = tmp_path / "inference_qwen3.yml"
    path.write_text(text.replace(old, new, 1))
    return path


# (line in the user's config, its mutation, the key the error names); each rule cites the grps source it follows
REFUSED = [
    ("      llm_style: qwen3\n", "", "llm_style"),                                  # customized_inferer.cc Load
    ("llm_style: qwen3", "llm_style: qwen4", "llm_style"),                          # llm_styler.cc CreateLLMStyler
    ("llm_style: qwen3", "llm_style: Qwen3", "llm_style"),
    ("      tokenizer_type: huggingface\n", "", "tokenizer_type"),                  # customized_inferer.cc Load
    ("tokenizer_type: huggingface", "tokenizer_type: tiktoken", "tokenizer_type"),  # tokenizer.cc Load
    ("tokenizer_parallelism: 16", "tokenizer_parallelism: 0", "tokenizer_parallelism"),
    ("      tokenizer_path: /models/Qwen3-8B/\n", "", "tokenizer_path"),
    ("      gpt_model_type: inflight_fused_batching\n", "", "gpt_model_type"),      # trtllm_model_instance.cc
    ("gpt_model_path: /models/Qwen3-8B/trt_engines/", "gpt_model_path: /models/Qwen3-8B/trt_engines",
     "gpt_model_path"),                                                             # path + "config.json"
    ("window_size: 4", "window_size: four", "window_size"),                         # trtllm_model_state.cc int32
    ("ngram_size: 2", "ngram_size: 2.5", "ngram_size"),
    ("        verification_set_size: 4\n", "", "lookahead_decoding"),
    ("top_k: 20", "top_k: twenty", "top_k"),                                        # GetParameter<SamplingConfig>
    ("top_p: 0.95", "top_p: 1.5", "top_p"),                                         # samplingConfig.cpp checkTopP
    ("kv_cache_free_gpu_mem_fraction: 0.9", "kv_cache_free_gpu_mem_fraction: 1.0",  # kvCacheConfig.cpp
     "kv_cache_free_gpu_mem_fraction"),
]


@pytest.mark.parametrize("old, new, key", REFUSED)
def test_validate_config_refuses_what_grps_refuses_naming_the_key(tmp_path, old, new, key):
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    path = _mutate(tmp_path, old, new)
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1, result.output
    errors = [d for d in validate_file(path).diagnostics if d.severity == "error"]
    assert any(key in (d.path or "") or key in d.message for d in errors), [d.format_text() for d in errors]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("old, new, code", [
    ("      end_token_id: 151645          # <|im_end|>\n", "", "grps-no-end-id"),
    ('      stop_words:\n        - "<|im_start|>"\n        - "<|im_end|>"\n        - "<|endoftext|>"\n', "",
     "grps-no-stop-words"),
    ("      skip_special_tokens:\n        - 151643\n        - 151644\n        - 151645\n",
     "      skip_special_tokens: true\n", "grps-tokenizer"),
    ("tokenizer_parallelism: 16", "tokenizer_parallelism: many", "grps-tokenizer"),
])
def test_validate_config_warns_where_grps_silently_falls_back(tmp_path, old, new, code):
    report = validate_file(_mutate(tmp_path, old, new))
    assert report.valid() and code in [d.code for d in report.diagnostics if d.severity == "warning"]


def test_the_users_qwen3_config_passes_with_no_loader_finding():
    report = validate_file(USER_QWEN3)
    assert report.valid()
    assert not [d for d in report.diagnostics if d.code.startswith(("grps-llm-style", "grps-tokenizer", "grps-no-",
                                                                   "grps-engine-path"))]

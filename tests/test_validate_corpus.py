"""The config corpus: every broken config with the diagnostic it must produce, and the good ones
(tests/data/configs/good, tests/data/grps, configs/) that must pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtlade.config.validate import validate_file

TESTS = Path(__file__).resolve().parent
BROKEN = TESTS / "data" / "configs" / "broken"
GOOD = TESTS / "data" / "configs" / "good"
GRPS = TESTS / "data" / "grps"
SHIPPED = TESTS.parent / "configs"

# file -> (severity, code, path, line, column or None, substring of message + hint)
EXPECTED: dict[str, tuple[str, str, str, int, int | None, str]] = {
    "unknown-key-typo.yml": ("error", "unknown-key", "build.max_batch_sise", 4, 3, "did you mean 'max_batch_size'?"),
    "unknown-section.yml": ("error", "unknown-key", "lookahed", 1, 1, "did you mean 'lookahead'?"),
    "spec-illegal-n0.yml": ("error", "spec-illegal", "lookahead.spec.ngram_size", 3, 9, "ngramSize requires >= 1"),
    "spec-illegal-n1-mapping.yml": ("error", "spec-illegal", "lookahead.spec.window_size", 3, 22,
                                    "ngramSize=1 requires windowSize=1"),
    "spec-g-negative.yml": ("error", "spec-illegal", "lookahead.spec.verification_set_size", 2, 16,
                            "verificationSetSize requires >=0"),                   # at the item, not the list
    "spec-block-list-n0.yml": ("error", "spec-illegal", "lookahead.spec.ngram_size", 4, 7, "ngramSize requires >= 1"),
    "spec-unparsable.yml": ("error", "spec-parse", "lookahead.spec.window_size", 2, 9, "must be an integer"),
    "spec-flow-mapping.yml": ("error", "spec-parse", "lookahead.spec", 1, 19, "the commas separate keys"),
    "spec-unknown-key.yml": ("error", "spec-parse", "lookahead.spec", 2, 9,
                             "unknown lookahead key 'verification_size'"),
    "request-not-admitted.yml": ("error", "request-not-admitted", "lookahead.request_default", 3, 20,
                                 "window_size 7 > 4"),
    "request-illegal.yml": ("error", "spec-illegal", "lookahead.request_default.verification_set_size", 6, 28,
                            "ngramSize=1 requires verificationSetSize=0"),  # the first rule in upstream's order
    "missing-lookahead.yml": ("error", "missing-key", "", 1, 1,
                              "missing required key 'lookahead' (or a `speculation` block)"),
    "missing-spec.yml": ("error", "missing-key", "lookahead.spec", 2, 3, "spec: 4,2,4"),
    "bad-range.yml": ("error", "schema-greater_than_equal", "build.max_batch_size", 4, 19, "allowed: >= 1"),
    "bad-literal.yml": ("error", "schema-literal_error", "serve.engine", 4, 11, "'reference' or 'trtllm'"),
    "bad-type.yml": ("error", "schema-int_type", "serve.port", 4, 9, "got 'http'"),
    "seq-below-input.yml": ("error", "build-max-seq-len", "build.max_seq_len", 5, 16, "trtllm-build refuses it"),
    "bench-mode-not-admitted.yml": ("error", "bench-mode-not-admitted", "bench.modes.1", 6, 7,
                                    "the server would refuse every request"),
    "bench-mode-unknown.yml": ("error", "bench-mode", "bench.modes.1", 4, 15, "'turbo'"),
    "bench-top-p-greedy.yml": ("error", "bench-top-p", "bench.top_p", 4, 10, "greedy decoding ignores top_p"),
    "not-a-mapping.yml": ("error", "not-a-mapping", "", 1, 1, "the top level is a list"),
    "malformed.yml": ("error", "yaml-syntax", "", 3, 19, "mapping values are not allowed"),
    "duplicate-key.yml": ("error", "duplicate-key", "lookahead.spec", 3, 3, "first at line 2"),
    "unknown-kind.yml": ("error", "unknown-config-kind", "", 1, 1, "not a trtlade config"),
    "multi-document.yml": ("error", "yaml-multiple-documents", "", 3, 1, "several YAML documents"),
    "empty.yml": ("error", "empty-file", "", 1, 1, "the file is empty"),
    "engine-draft39.yml": ("error", "engine-max-draft-len", "lookahead.spec", 5, 9,
                           "requires the two to be equal"),
    "engine-not-lookahead.yml": ("error", "engine-not-lookahead", "lookahead.spec", 4, 9,
                                 "without speculative decoding"),
    "engine-tp-mismatch.yml": ("error", "engine-parallelism", "build.tp_size", 3, 12, "tp_size 2"),
    "engine-dir-not-an-engine.yml": ("error", "engine-unreadable", "build.engine_dir", 2, 15, "has no config.json"),
    "engine-too-small.yml": ("error", "engine-max-batch-size", "build.max_batch_size", 3, 19,
                             "built with max_batch_size 16"),
    "warn-too-many-draft-tokens.yml": ("warning", "spec-too-many-draft-tokens", "lookahead.spec", 2, 9,
                                       "143 tokens per step, above 128"),
    "schedule-order.yml": ("error", "schedule-order", "lookahead.schedule.1.up_to", 6, 15,
                           "ascending order of up_to"),
    "schedule-no-open-band.yml": ("error", "schedule-open-band", "lookahead.schedule.1.up_to", 6, 15,
                                  "must be open-ended"),
    "schedule-not-admitted.yml": ("error", "schedule-not-admitted", "lookahead.schedule.0.spec", 5, 24,
                                  "ngram_size 3 > 2"),
    "schedule-with-request-default.yml": ("error", "schedule-with-request-default", "lookahead.request_default",
                                          4, 20, "request_default would never apply"),
    "schedule-flow-mapping.yml": ("error", "spec-parse", "lookahead.schedule.0", 4, 14, "quote the spec"),
    "warn-preset-engine.yml": ("warning", "preset-engine", "lookahead.preset", 3, 11, "reference engine only"),
    "warn-below-minimum.yml": ("warning", "spec-below-minimum", "lookahead.spec", 2, 9, "(2,2,1)"),
    # TrtGptModel: with context FMHA the executor admits min(max_seq_len - 1, max_num_tokens) prompt tokens
    "warn-prompt-limit.yml": ("warning", "engine-prompt-limit", "build.max_num_tokens", 7, 19, "so 8192 tokens"),
    "warn-reference-build-limit.yml": ("warning", "reference-build-limit", "build.max_input_len", 4, 18,
                                       "bound prompts with serve.max_prompt_tokens"),
    "max-num-tokens-below-batch.yml": ("error", "build-max-num-tokens-batch", "build.max_num_tokens", 3, 19,
                                       "needs at least its golden row"),
    "warn-max-num-tokens.yml": ("warning", "build-max-num-tokens", "build.max_num_tokens", 3, 19,
                                "16 * 8 = 128"),
    # grps_trtllm inference configs
    "grps-no-lookahead-block.yml": ("error", "grps-lookahead-missing", "models.0.inferer_args", 6, 7,
                                    "Assertion failed: 16 != 8"),
    "grps-block-plain-engine.yml": ("error", "engine-not-lookahead", "models.0.inferer_args.lookahead_decoding",
                                    10, 9, "without speculative decoding"),
    "grps-draft-mismatch.yml": ("error", "engine-max-draft-len", "models.0.inferer_args.lookahead_decoding", 10, 9,
                                "Assertion failed: maxDraftTokens <= mModelConfig"),
    "grps-v1.yml": ("error", "grps-model-type", "models.0.inferer_args.gpt_model_type", 7, 23, "in-flight batching"),
    # grps loads it: setLookaheadDecoding replaces the mode (src/trtllm_model_instance.cc); a warning, not an error
    "grps-beam-search.yml": ("warning", "grps-decoding-mode", "models.0.inferer_args.decoding_mode", 9, 22,
                             "has no effect beside the lookahead_decoding block"),
    "grps-alias-key.yml": ("error", "grps-lookahead-key",
                           "models.0.inferer_args.lookahead_decoding.windows_size", 10, 9,
                           "rename 'windows_size' to 'window_size'"),
    "grps-missing-key.yml": ("error", "grps-lookahead", "models.0.inferer_args.lookahead_decoding", 10, 9,
                             "no verification_set_size"),
    "grps-illegal-spec.yml": ("error", "spec-illegal", "models.0.inferer_args.lookahead_decoding.window_size", 10,
                              22, "ngramSize=1 requires windowSize=1"),
    "grps-bad-fraction.yml": ("error", "grps-value", "models.0.inferer_args.kv_cache_free_gpu_mem_fraction", 9, 39,
                              "0 < value < 1"),
    "grps-missing-engine-path.yml": ("error", "grps-required", "models.0.inferer_args.gpt_model_path", 6, 7,
                                     "requires it"),
    # grps logs "decoding_mode parameter is invalid" and loads (src/trtllm_model_instance.cc): a warning
    "grps-lookahead-mode-without-block.yml": ("warning", "grps-decoding-mode", "models.0.inferer_args.decoding_mode",
                                              9, 22, "no lookahead_decoding block"),
}


def test_every_corpus_file_has_an_expectation():
    on_disk = {p.name for p in BROKEN.glob("*.yml")}
    assert on_disk == set(EXPECTED), (on_disk ^ set(EXPECTED))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_config_produces_its_diagnostic(name):
    severity, code, path, line, column, text = EXPECTED[name]
    report = validate_file(BROKEN / name, display=name)
    match = [d for d in report.diagnostics if d.code == code and d.path == path]
    assert match, [d.format_text() for d in report.diagnostics]
    d = match[0]
    assert (d.severity, d.file, d.line) == (severity, name, line), d.format_text()
    if column is not None:
        assert d.column == column, d.format_text()
    assert text in d.message + "\n" + d.hint, d.format_text()
    assert report.valid() == (severity != "error")
    assert not report.valid(strict=True)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_diagnostic_is_fully_located_and_explained(name):
    for d in validate_file(BROKEN / name, display=name).diagnostics:
        if d.file and d.file.endswith("config.json"):  # findings about an engine point into its config.json
            assert d.line is not None and d.column is not None
            continue
        assert d.file == name and d.line >= 1 and d.column >= 1 and d.message and d.code
        if d.severity != "info":
            assert d.hint or d.code.startswith("schema-"), d.format_text()


GOOD_FILES = sorted(GOOD.glob("*.yml")) + sorted(GRPS.glob("*.yml")) + sorted(SHIPPED.glob("*.yml"))


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_good_configs_have_no_errors(path):
    report = validate_file(path)
    assert report.valid(), [d.format_text() for d in report.diagnostics]
    assert report.kind in ("trtlade", "grps", "grps-server")


def test_shipped_configs_are_valid_even_strictly():
    reports = [validate_file(p) for p in sorted(SHIPPED.glob("*.yml"))]
    assert {p.name for p in SHIPPED.glob("*.yml")} >= {"qwen3-8b-lookahead-424.yml", "smollm2-cpu.yml"}
    assert all(r.valid(strict=True) for r in reports), [d.format_text() for r in reports for d in r.diagnostics]


def test_qwen3_config_is_the_users_deployment_and_fits_the_sample_engine():
    engine = TESTS / "data" / "engines" / "qwen3-8b-424"
    report = validate_file(SHIPPED / "qwen3-8b-lookahead-424.yml", engine_dir=engine)
    assert report.details["spec"] == "4,2,4" and report.details["max_draft_len"] == 7
    assert report.valid(strict=True), [d.format_text() for d in report.diagnostics]
    assert report.details["engine_checked"] == str(engine)


def test_good_configs_checked_against_engines():
    for name in ("with-engine.yml", "autoregressive-plain-engine.yml", "tp2-engine.yml"):
        report = validate_file(GOOD / name)
        assert report.details["engine_checked"], name
        assert report.valid(strict=True), [d.format_text() for d in report.diagnostics]


def test_grps_sample_is_read_with_its_lookahead_block_and_sampling_warning():
    report = validate_file(GRPS / "inference_qwen3.yml")
    assert report.kind == "grps"
    assert report.details["models"] == [{"index": 0, "name": "trtllm_model", "spec": "4,2,4", "max_draft_len": 7}]
    [warning] = [d for d in report.diagnostics if d.severity == "warning"]
    assert warning.code == "grps-sampling-ignored" and "temperature 0.6" in warning.message
    assert "Qwen3" in warning.hint and warning.path == "models.0.inferer_args.sampling"


@pytest.mark.parametrize("engine, ok", [("qwen3-8b-424", True), ("qwen3-8b-draft39", False),
                                        ("qwen3-8b-plain", False), ("qwen3-8b-424-tp2", True)])
def test_grps_sample_against_engines(engine, ok):
    report = validate_file(GRPS / "inference_qwen3.yml", engine_dir=TESTS / "data" / "engines" / engine)
    assert report.valid() is ok, [d.format_text() for d in report.diagnostics]


def test_every_config_key_is_documented():
    """docs/reference/config.md (generated) has a row for every key of every section, and the validate guide
    one for every key of `speculation` (upstream's block, a mapping in the schema)."""
    from trtlade.config.schema import TrtladeConfig
    from trtlade.drafting.config import DraftConfig

    reference = (TESTS.parent / "docs" / "reference" / "config.md").read_text()
    for section, info in TrtladeConfig.model_fields.items():
        assert f"## `{section}`" in reference, section
        body = reference.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
        for key in getattr(info.annotation, "model_fields", None) or {}:
            assert f"| `{key}` |" in body, f"{section}.{key} is not documented"
    guide = (TESTS.parent / "docs" / "guides" / "validate.md").read_text()
    body = guide.split("**`speculation`**", 1)[1].split("**`", 1)[0]
    for key in (f for f in DraftConfig.__dataclass_fields__ if f != "requested"):
        assert f"| `{key}` |" in body, f"speculation.{key} is not documented"


# ------------------------------------------------------------------------------------ grps server.yml
def test_grps_server_yml_is_recognised_and_a_stock_conf_folder_passes(tmp_path):
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    report = validate_file(GRPS / "server.yml")
    assert report.kind == "grps-server" and report.valid() and report.details["max_concurrency"] == 32
    assert [d.code for d in report.diagnostics] == ["grps-server-no-engine"]  # a note, never an error
    result = CliRunner().invoke(app, ["validate-config", str(GRPS)])
    assert result.exit_code == 0, result.output
    assert "grps server config, max_concurrency 32" in result.output


@pytest.mark.parametrize("concurrency,severity", [(32, "warning"), (16, None), (8, "info")])
def test_grps_server_max_concurrency_against_the_engine_batch(tmp_path, concurrency, severity):
    path = tmp_path / "server.yml"
    path.write_text((GRPS / "server.yml").read_text().replace("max_concurrency: 32", f"max_concurrency: {concurrency}"))
    report = validate_file(path, engine_dir=TESTS / "data" / "engines" / "qwen3-8b-424")  # max_batch_size 16
    found = [d for d in report.diagnostics if d.code == "grps-server-concurrency"]
    assert report.valid()
    assert [d.severity for d in found] == ([severity] if severity else [])
    if found:
        assert found[0].line == 7 and found[0].path == "max_concurrency"

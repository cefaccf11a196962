"""Which TensorRT-LLM release runs what (the table), and the gates that read it: a trtlade config aimed at a
release, and a trtllm-serve --config file checked as it is (each finding at file:line with its field)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trtlade.cli.main import app
from trtlade.config.validate import validate_file
from trtlade.trtllm.releases import RELEASES, lookahead_refusal_1_3, release_for

runner = CliRunner()


@pytest.mark.parametrize("version, lookahead, drafters, engine", [
    ("0.16.0", True, (), True),
    ("0.19.0", True, (), True),
    ("1.0.0rc3", True, ("NGram", "AUTO"), True),
    ("1.2.1", True, ("NGram", "AUTO"), True),
    ("1.3.0rc1", False, ("NGram", "SA", "AUTO"), False),     # a 1.3 pre-release counts as 1.3 (pip's <1.3)
    ("1.3.0rc21", False, ("NGram", "SA", "AUTO"), False),
    ("1.3.0", False, ("NGram", "SA", "AUTO"), False),
    ("1.5.2", False, ("NGram", "SA", "AUTO"), False),
])
def test_each_release_runs_what_the_table_says(version, lookahead, drafters, engine):
    row = release_for(version)
    assert (row.lookahead, row.drafters, row.engine_backend) == (lookahead, drafters, engine)
    assert (lookahead_refusal_1_3(version) is None) == lookahead
    assert row.sources  # every row cites where it was read


def test_a_release_newer_than_any_read_is_accepted_with_a_note_and_an_older_one_refused():
    assert "newer than 1.3.0rc25" in release_for("1.4.0").note and release_for("1.3.1").note == ""
    with pytest.raises(ValueError, match="older than 0.16"):
        release_for("0.15.0")
    assert [r.first for r in RELEASES] == ["0.16.0", "1.0.0", "1.3.0"]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def findings(path: Path, release=None):
    report = validate_file(path, display=path.name, release=release)
    return report, [(d.severity, d.code, d.path, d.line) for d in report.diagnostics]


LOOKAHEAD_ENGINE = ("model: {name: Qwen3-8B}\nbuild:\n  backend: trtllm\n  trtllm_version: %s\n"
                    "lookahead:\n  spec: '4,2,4'\n")


def test_a_lookahead_engine_aimed_at_1_3_is_refused_with_the_equivalent(tmp_path):
    report, found = findings(write(tmp_path, "c.yml", LOOKAHEAD_ENGINE % "1.3.0"))
    [error] = [d for d in report.diagnostics if d.severity == "error"]
    assert (error.code, error.path, error.line) == ("lookahead-release", "build.trtllm_version", 4)
    assert "no TensorRT-engine backend and no Lookahead" in error.message and "1.3.0" in error.message
    assert "build.backend: pytorch and speculation: {decoding_type: SA, max_draft_len: 4" in error.hint
    ok, _ = findings(write(tmp_path, "d.yml", LOOKAHEAD_ENGINE % "1.2.1"))
    assert ok.valid()
    flag, _ = findings(write(tmp_path, "e.yml", LOOKAHEAD_ENGINE % "1.2.1"), release="1.3.0rc21")
    assert not flag.valid()  # --trtllm-version wins over the config's key


@pytest.mark.parametrize("bands, gate", [
    ("[{up_to: 4, spec: '4,2,4'}, {spec: '1,1,0'}]", "max_concurrency: 4"),
    ("[{up_to: 2, spec: '4,2,4'}, {up_to: 8, spec: '2,2,2'}, {spec: '1,1,0'}]", "draft_len_schedule: {2: 4, 8: 2}"),
    ("[{up_to: 2, spec: '4,2,4'}, {spec: '2,2,2'}]", "draft_len_schedule: {2: 4, 16: 2}"),
])
def test_a_load_aware_schedule_becomes_upstreams_gate_in_the_equivalent(tmp_path, bands, gate):
    from trtlade.drafting.config import DraftConfig

    text = (LOOKAHEAD_ENGINE % "1.3.0").replace("backend: trtllm", "backend: trtllm\n  max_batch_size: 16") + \
        f"  schedule: {bands}\n"
    report, _ = findings(write(tmp_path, "c.yml", text))
    [error] = [d for d in report.diagnostics if d.severity == "error"]
    assert gate in error.hint
    block = yaml.safe_load(error.hint.split("speculation: ", 1)[1].split(" (trtlade's")[0])
    DraftConfig.parse(block, max_batch_size=16)  # upstream's validators accept it


@pytest.mark.parametrize("block, keys", [
    ("{decoding_type: AUTO, max_draft_len: 9}", ["max_draft_len"]),              # AUTO picks its own
    ("{decoding_type: NGram, max_draft_len: 4, speculative_model: /m}", ["speculative_model"]),
    ("{decoding_type: SA, max_draft_len: 4, max_total_draft_tokens: 9}", ["max_total_draft_tokens"]),
    ("{decoding_type: SA, max_draft_len: 4, max_total_draft_tokens: 4}", []),    # what upstream sets anyway
    ("{decoding_type: NGram, max_draft_len: 4}", []),
])
def test_speculation_keys_upstream_ignores_are_warned_at_their_line(tmp_path, block, keys):
    """A request's block refuses them (the value would be dropped); a config file may carry them, said."""
    head = "model: {name: Qwen3-8B}\nbuild:\n  backend: pytorch\n  trtllm_version: 1.3.0\n"
    report, found = findings(write(tmp_path, "a.yml", head + f"speculation: {block}\n"))
    assert report.valid()
    assert [f[2] for f in found if f[1] == "speculation-ignored"] == [f"speculation.{k}" for k in keys]
    assert all(f[0] == "warning" and f[3] == 5 for f in found if f[1] == "speculation-ignored")


@pytest.mark.parametrize("text, keys", [
    ("serve: {engine: trtllm, prefix_cache_mb: 512, threads: 4}\nbuild: {engine_dir: e}\n",
     ["serve.prefix_cache_mb", "serve.threads"]),                               # the reference engine's
    ("serve: {engine: reference, kv_cache_free_gpu_memory_fraction: 0.5}\nbuild: {backend: reference}\n",
     ["serve.kv_cache_free_gpu_memory_fraction"]),                              # neither build nor serve reads it
    ("serve: {engine: reference, prefix_cache_mb: 512}\n", []),                # read by the engine that serves
    ("serve: {engine: trtllm, kv_cache_enable_block_reuse: true}\nbuild: {engine_dir: e}\n", []),
    ("serve: {kv_cache_free_gpu_memory_fraction: 0.8}\nbuild: {backend: pytorch}\n", []),  # build writes it
])
def test_a_key_the_serving_engine_ignores_is_warned_at_its_line(tmp_path, text, keys):
    report, found = findings(write(tmp_path, "a.yml", "model: {name: Qwen3-8B}\nlookahead: {spec: '4,2,4'}\n" + text))
    assert [f[2] for f in found if f[1] == "engine-key"] == keys
    assert all(f[0] == "warning" for f in found if f[1] == "engine-key")


def test_serve_max_draft_len_bounds_the_reference_engine_only(tmp_path):
    """TensorRT-LLM reads no serve.max_draft_len: a smaller one beside a PyTorch-backend speculation block is a
    warning (the key is ignored there), not the reference engine's refusal."""
    text = ("model: {name: Qwen3-8B}\nbuild: {backend: pytorch, trtllm_version: 1.3.0}\n"
            "speculation: {decoding_type: SA, max_draft_len: 4}\nserve: {engine: %s, max_draft_len: 2}\n")
    trtllm, found = findings(write(tmp_path, "a.yml", text % "trtllm"))
    assert trtllm.valid() and ("warning", "engine-key", "serve.max_draft_len", 4) in found
    reference, found = findings(write(tmp_path, "b.yml", text % "reference"))
    assert not reference.valid() and any(f[1] == "speculation-limit" for f in found)


def test_a_pytorch_deployment_needs_a_drafter_its_release_has(tmp_path):
    head = "model: {name: Qwen3-8B}\nbuild:\n  backend: pytorch\n  trtllm_version: %s\n"
    sa = "speculation:\n  decoding_type: SA\n  max_draft_len: 4\n"
    ok, _ = findings(write(tmp_path, "a.yml", head % "1.3.0" + sa))
    assert ok.valid(), ok.diagnostics
    old, found = findings(write(tmp_path, "b.yml", head % "1.2.1" + sa))
    assert ("error", "speculation-release", "speculation.decoding_type", 6) in found
    plain, found = findings(write(tmp_path, "c.yml", head % "1.3.0" + "lookahead:\n  spec: '1,1,0'\n"))
    assert plain.valid() and ("info", "pytorch-plain", "build.backend", 3) in found  # a baseline to bench against
    lookahead, found = findings(write(tmp_path, "e.yml", head % "1.3.0" + "lookahead:\n  spec: '4,2,4'\n"))
    assert ("error", "pytorch-lookahead", "lookahead.spec", 6) in found
    newer, found = findings(write(tmp_path, "d.yml", head % "2.1.0" + sa))
    assert newer.valid() and ("warning", "trtllm-release-unknown", "build.trtllm_version", 4) in found


def test_neither_lookahead_nor_speculation_is_refused_and_speculation_alone_is_a_config(tmp_path):
    report, found = findings(write(tmp_path, "a.yml", "model: {}\n"))
    assert not report.valid() and found[0][1] == "missing-key"
    alone, _ = findings(write(tmp_path, "b.yml", "speculation: {decoding_type: NGram, max_draft_len: 4}\n"))
    assert alone.kind == "trtlade" and alone.valid(), alone.diagnostics


SERVE = """max_batch_size: 16
kv_cache_config:
  free_gpu_memory_fraction: %s
speculative_config:
  decoding_type: %s
  max_draft_len: 4
  max_matching_ngram_size: %s
print_iter_log: true
"""


@pytest.mark.parametrize("kind, k, fraction, release, expect", [
    ("SA", -1, 0.9, "1.3.0", None),
    ("NGram", 3, 0.9, "1.3.0", None),
    ("SA", 0, 0.9, "1.3.0", ("trtllm-args-rule", "speculative_config.max_matching_ngram_size", 7)),
    ("SA", -2, 0.9, "1.3.0", None),                           # validate_sa_config refuses 0 only
    ("NGram", -1, 0.9, "1.3.0", ("trtllm-args-range", "speculative_config.max_matching_ngram_size", 7)),
    ("SA", 65, 0.9, "1.3.0", None),                                     # fine without the global pool
    ("SA", -1, 0.0, "1.3.0", None),                                     # 0 <= fraction <= 1
    ("SA", -1, 1.5, "1.3.0", ("trtllm-args-range", "kv_cache_config.free_gpu_memory_fraction", 3)),
    ("SA", -1, 0.9, "1.2.1", ("trtllm-args-literal", "speculative_config.decoding_type", 5)),
])
def test_a_trtllm_serve_config_is_checked_as_it_is(tmp_path, kind, k, fraction, release, expect):
    report, found = findings(write(tmp_path, "serve.yml", SERVE % (fraction, kind, k)), release=release)
    assert report.kind == "trtllm-serve"
    errors = [f for f in found if f[0] == "error"]
    assert errors == ([] if expect is None else [("error", *expect)])


def test_a_key_tensorrt_llm_does_not_know_is_refused_at_its_line(tmp_path):
    report, found = findings(write(tmp_path, "serve.yml", SERVE % (0.9, "SA", -1) + "my_own_key: 1\n"),
                             release="1.3.0")
    assert not report.valid() and ("error", "trtllm-args-unknown-key", "my_own_key", 9) in found


def test_a_lookahead_block_in_a_trtllm_serve_config(tmp_path):
    text = "speculative_config:\n  decoding_type: Lookahead\n  max_window_size: 4\n  max_ngram_size: 2\n" \
           "  max_verification_set_size: 4\n"
    old, found = findings(write(tmp_path, "a.yml", text), release="1.2.1")
    assert old.valid() and found[0][1] == "speculation-backend"  # the command line must pick the engine backend
    new, found = findings(write(tmp_path, "b.yml", text), release="1.3.0")
    assert ("error", "speculation-release", "speculative_config.decoding_type", 2) in found
    pytorch, found = findings(write(tmp_path, "c.yml", "backend: pytorch\n" + text), release="1.2.1")
    assert ("error", "speculation-backend", "speculative_config.decoding_type", 3) in found
    engine13, found = findings(write(tmp_path, "d.yml", "backend: tensorrt\nmax_batch_size: 8\n"), release="1.3.0")
    assert ("error", "trtllm-serve-backend", "backend", 1) in found


def test_validate_config_takes_the_release_flag(tmp_path):
    path = write(tmp_path, "serve.yml", SERVE % (0.9, "SA", -1))
    assert runner.invoke(app, ["validate-config", str(path), "--trtllm-version", "1.3.0"]).exit_code == 0
    refused = runner.invoke(app, ["validate-config", str(path), "--trtllm-version", "1.2.1"])
    assert refused.exit_code == 1 and "decoding_type 'SA' is not one TensorRT-LLM 1.2" in refused.output
    bad = runner.invoke(app, ["validate-config", str(path), "--trtllm-version", "latest"])
    assert bad.exit_code == 2 and "--trtllm-version" in bad.output


def test_the_compat_page_shows_the_release_table_as_the_code_has_it():
    from trtlade.trtllm.releases import releases_markdown

    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "trtllm-compat.md").read_text()
    begin, end = page.index("<!-- releases:begin"), page.index("<!-- releases:end -->")
    assert page[page.index("\n", begin) + 1:end] == releases_markdown(), "regenerate docs/reference/trtllm-compat.md"


def test_the_engine_backends_removal_is_said_once_and_the_same_everywhere():
    import re

    from trtlade.trtllm.releases import ENGINE_BACKEND_GONE

    def norm(text):
        return re.sub(r"\s+", " ", text.replace("`", "").replace("'", "")).lower()

    root = Path(__file__).resolve().parents[1]
    for page in ("docs/reference/trtllm-compat.md", "docs/guides/migrate-1.3.md", "docs/guides/build.md"):
        assert norm(ENGINE_BACKEND_GONE) in norm((root / page).read_text()), page
    out = runner.invoke(app, ["build", "--architectures"]).output
    assert "1.3.0rc21" in out and "release candidates included" in out


def test_the_trtllm_serve_file_flag_follows_the_release():
    from trtlade.builder.pytorch import serve_command

    assert "--extra_llm_api_options" in serve_command(Path("/m"), Path("/b"), release="1.2.1")
    assert " --config " in serve_command(Path("/m"), Path("/b"), release="1.3.0")

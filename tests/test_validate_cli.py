"""``trtlade validate-config`` and ``trtlade config``: output formats, exit codes, path expansion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtlade.cli.main import app
from trtlade.cli.validate import github_annotation
from trtlade.diagnostics import Diagnostic

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
BROKEN = TESTS / "data" / "configs" / "broken"
GOOD = TESTS / "data" / "configs" / "good"
ENGINES = TESTS / "data" / "engines"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["validate-config", *map(str, args)])


# ------------------------------------------------------------------------------------------ exit codes
@pytest.mark.parametrize("args, code", [
    ([GOOD / "minimal.yml"], 0),
    ([GOOD], 0),
    ([BROKEN / "engine-draft39.yml"], 1),
    ([GOOD / "minimal.yml", BROKEN / "bad-range.yml"], 1),
    ([BROKEN / "warn-below-minimum.yml"], 0),
    ([BROKEN / "warn-below-minimum.yml", "--strict"], 1),
    ([GOOD / "minimal.yml", "--strict"], 0),
    ([BROKEN / "empty.yml"], 1),
    (["no/such/file.yml"], 2),
    ([GOOD / "minimal.yml", "no/such/file.yml"], 2),
    ([ENGINES / "qwen3-8b-424"], 2),                       # a directory without *.yml
    ([str(GOOD / "*.nothing")], 2),                         # a pattern matching nothing
    ([GOOD / "minimal.yml", "--engine-dir", "no/such/engine"], 2),
    ([GOOD / "minimal.yml", "--format", "xml"], 2),
    ([GOOD / "minimal.yml", "--engine-dir", ENGINES / "qwen3-8b-424"], 0),
    ([GOOD / "minimal.yml", "--engine-dir", ENGINES / "qwen3-8b-draft39"], 1),
    ([GOOD / "minimal.yml", "--engine-dir", GOOD], 1),       # exists but is not an engine
])
def test_exit_codes(args, code):
    result = run(*args)
    assert result.exit_code == code, result.output


def test_shipped_configs_pass():
    result = run(ROOT / "configs")
    assert result.exit_code == 0, result.output
    shipped = len(list((Path(__file__).resolve().parent.parent / "configs").glob("*.yml")))
    assert f"valid: {shipped} files checked, {shipped} valid" in result.output


def test_usage_errors_name_the_path():
    result = run("no/such/file.yml", ENGINES / "qwen3-8b-424")
    assert "no/such/file.yml: no such file or directory" in result.output
    assert "no config files (*.yml, *.yaml)" in result.output and "--recursive" in result.output


def test_a_symlink_loop_is_said_to_be_one(tmp_path):
    (tmp_path / "a.yml").symlink_to(tmp_path / "b.yml")
    (tmp_path / "b.yml").symlink_to(tmp_path / "a.yml")
    result = run(str(tmp_path / "a.yml"))
    assert result.exit_code == 2 and "a symlink that leads nowhere (a loop, or a missing target)" in result.output
    from trtlade.yaml_doc import ConfigLoadError, read_yaml

    with pytest.raises(ConfigLoadError, match="a symlink that leads nowhere"):
        read_yaml(tmp_path / "a.yml")


def test_an_empty_path_is_a_usage_error_not_the_current_folder(tmp_path, monkeypatch):
    """`validate-config "$CONFIG"` with CONFIG unset checked the configs of the folder it ran in, and passed."""
    (tmp_path / "deploy.yml").write_text("lookahead: {spec: '4,2,4'}\n")
    monkeypatch.chdir(tmp_path)
    result = run("")
    assert result.exit_code == 2 and "an empty path" in result.output and "deploy.yml" not in result.output


# ------------------------------------------------------------------------------------------ text
def test_text_format_lines_and_hints():
    result = run(BROKEN / "engine-draft39.yml")
    first = result.output.splitlines()[0]
    assert first.startswith(f"{BROKEN / 'engine-draft39.yml'}:5:9: error: lookahead.spec: the engine was built "
                            "with max_draft_len 39 but lookahead.spec (4,3,4) needs 15")
    assert "  hint: specs that fit this engine (max_draft_len 39): (4,6,4)" in result.output
    assert "INVALID: 1 file checked, 0 valid; 1 error, 0 warnings, 0 notes" in result.output


def test_text_output_keeps_brackets_verbatim():
    """rich markup must not eat user text like [4, 2, -1]."""
    result = run(BROKEN / "spec-g-negative.yml")
    assert "illegal (W,N,G) [4, 2, -1]" in result.output


def test_quiet_hides_notes_and_ok_lines():
    loud = run(ROOT / "configs" / "qwen3-8b-lookahead-424.yml")
    quiet = runner.invoke(app, ["validate-config", "-q", str(ROOT / "configs" / "qwen3-8b-lookahead-424.yml")])
    assert "info: build.engine_dir" in loud.output and "ok  " in loud.output
    assert "info:" not in quiet.output and "ok  " not in quiet.output and "valid: 1 file" in quiet.output


def test_strict_says_why_it_failed():
    result = run(BROKEN / "warn-too-many-draft-tokens.yml", "--strict")
    assert "INVALID (--strict: warnings fail)" in result.output


# ------------------------------------------------------------------------------------------ json
def test_json_format():
    result = run(GOOD / "minimal.yml", BROKEN / "request-not-admitted.yml", BROKEN / "warn-below-minimum.yml",
                 "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert set(data) == {"valid", "files", "diagnostics", "summary"} and data["valid"] is False
    assert [f["valid"] for f in data["files"]] == [True, False, True]
    assert data["summary"] == {"files": 3, "valid_files": 2, "errors": 1, "warnings": 1, "infos": 0,
                               "strict": False, "valid": False}
    error = next(d for d in data["diagnostics"] if d["severity"] == "error")
    assert {"severity", "file", "line", "column", "path", "message", "hint"} <= set(error)
    assert (error["file"], error["line"], error["column"], error["path"]) == (
        str(BROKEN / "request-not-admitted.yml"), 3, 20, "lookahead.request_default")
    assert data["files"][0]["details"]["max_draft_len"] == 7


def test_json_for_unreadable_file(tmp_path):
    (tmp_path / "junk.yml").write_bytes(b"\x00" * 64)
    data = json.loads(run(tmp_path / "junk.yml", "-f", "json").output)
    assert data["files"][0]["kind"] is None and data["diagnostics"][0]["path"] == ""
    assert data["diagnostics"][0]["line"] == 1


# ------------------------------------------------------------------------------------------ github
def test_github_format():
    result = run(BROKEN / "engine-draft39.yml", BROKEN / "warn-below-minimum.yml",
                 ROOT / "configs" / "qwen3-8b-lookahead-424.yml", "--format", "github")
    lines = result.output.splitlines()
    assert lines[0].startswith(f"::error file={BROKEN / 'engine-draft39.yml'},line=5,col=9,"
                               "title=trtlade lookahead.spec [engine-max-draft-len]::the engine was built")
    assert "%0Ahint: specs that fit" in lines[0]
    assert any(line.startswith("::warning ") for line in lines)
    assert any(line.startswith("::notice ") for line in lines)
    assert lines[-1].startswith("INVALID: 3 files checked")


def test_github_escaping():
    d = Diagnostic("error", "100% bad\nsecond line", hint="a, b: c", path="x.y", file="dir,1/a:b.yml",
                   line=3, column=4, code="c")
    assert github_annotation(d) == ("::error file=dir%2C1/a%3Ab.yml,line=3,col=4,title=trtlade x.y [c]::"
                                    "100%25 bad%0Asecond line%0Ahint: a, b: c")


# ------------------------------------------------------------------------------------------ paths
def test_directories_globs_and_recursion(tmp_path):
    (tmp_path / "a.yml").write_text("lookahead:\n  spec: 4,2,4\n")
    (tmp_path / "b.yaml").write_text("lookahead:\n  spec: 4,0,4\n")
    (tmp_path / "notes.txt").write_text("not a config")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yml").write_text("lookahead:\n  spec: 7,7,7\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.yml").write_text("garbage: [")

    data = json.loads(run(tmp_path, "-f", "json").output)
    assert [Path(f["file"]).name for f in data["files"]] == ["a.yml", "b.yaml"]
    data = json.loads(run(tmp_path, "-r", "-f", "json").output)
    assert [Path(f["file"]).name for f in data["files"]] == ["a.yml", "b.yaml", "c.yml"]
    data = json.loads(run(str(tmp_path / "*.yml"), "-f", "json").output)
    assert [Path(f["file"]).name for f in data["files"]] == ["a.yml"]
    data = json.loads(run(str(tmp_path / "**" / "*.yml"), "-f", "json").output)
    assert sorted(Path(f["file"]).name for f in data["files"]) == ["a.yml", "c.yml"]
    # the same file twice is checked once; a file with another suffix is taken when named
    data = json.loads(run(tmp_path / "a.yml", tmp_path, tmp_path / "notes.txt", "-f", "json").output)
    assert [Path(f["file"]).name for f in data["files"]] == ["a.yml", "b.yaml", "notes.txt"]
    assert data["files"][2]["kind"] is None


def test_engine_dir_option_applies_to_every_config():
    result = run(GOOD / "minimal.yml", TESTS / "data" / "grps" / "inference_qwen3.yml",
                 "--engine-dir", ENGINES / "qwen3-8b-draft39", "-f", "json")
    data = json.loads(result.output)
    codes = [(Path(d["file"]).name, d["code"]) for d in data["diagnostics"] if d["severity"] == "error"]
    assert codes == [("minimal.yml", "engine-max-draft-len"), ("inference_qwen3.yml", "engine-max-draft-len")]


def test_engine_dir_that_is_not_an_engine_reports_on_the_engine_dir():
    data = json.loads(run(GOOD / "minimal.yml", "--engine-dir", GOOD, "-f", "json").output)
    [d] = data["diagnostics"]
    assert (d["path"], d["file"], d["code"]) == ("--engine-dir", str(GOOD), "engine-unreadable")


# ------------------------------------------------------------------------------------------ subprocess
def _trtlade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtlade", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_subprocess_exit_codes_and_no_traceback(tmp_path):
    ok = _trtlade("validate-config", "configs/")
    shipped = len(list((Path(__file__).resolve().parent.parent / "configs").glob("*.yml")))
    assert ok.returncode == 0 and f"valid: {shipped} files checked" in ok.stdout
    (tmp_path / "bomb.yml").write_text("a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join(['*a' if i == 1 else f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8)))
    bad = _trtlade("validate-config", str(tmp_path / "bomb.yml"), str(BROKEN / "malformed.yml"))
    assert bad.returncode == 1 and "Traceback" not in bad.stdout + bad.stderr
    assert "yaml-too-many-nodes" not in bad.stdout and "more than 100000 nodes" in bad.stdout
    usage = _trtlade("validate-config", "missing.yml")
    assert usage.returncode == 2 and "missing.yml: no such file or directory" in usage.stderr


# ------------------------------------------------------------------------------------------ config
def test_config_schema_is_json_schema_of_the_config():
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["$schema"].endswith("2020-12/schema") and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"model", "build", "lookahead", "speculation", "serve", "bench"}
    assert schema["anyOf"] == [{"required": ["lookahead"]}, {"required": ["speculation"]}]


def test_config_schema_to_file(tmp_path):
    out = tmp_path / "s.json"
    assert runner.invoke(app, ["config", "schema", "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["title"] == "trtlade deployment config"


def test_config_show_fills_defaults():
    result = runner.invoke(app, ["config", "show", str(GOOD / "minimal.yml")])
    assert result.exit_code == 0, result.output
    assert "max_draft_len 7" in result.output and "--max_draft_len 7" in result.output
    import yaml

    data = yaml.safe_load(result.output)
    assert data["lookahead"]["spec"] == {"window_size": 4, "ngram_size": 2, "verification_set_size": 4}
    assert data["build"]["max_batch_size"] == 8 and data["serve"]["port"] == 8000
    as_json = json.loads(runner.invoke(app, ["config", "show", "--json", str(GOOD / "minimal.yml")]).output)
    assert as_json == data


def test_config_show_errors():
    bad = runner.invoke(app, ["config", "show", str(BROKEN / "bad-range.yml")])
    assert bad.exit_code == 1 and "build.max_batch_size" in bad.output
    assert runner.invoke(app, ["config", "show", "no/such.yml"]).exit_code == 2


@pytest.mark.parametrize("section, level, code, fragment", [
    ("serve: {api_keys_file: /nonexistent/keys}", "info", "path-absent", "/nonexistent/keys does not exist here"),
    ("model: {path: /nonexistent/model}", "info", "path-absent", "serve opens the model at start"),
    ("bench: {dataset: mixx}", "warning", "bench-dataset", "'mixx' is neither a bundled set nor a file here"),
    ("bench: {endpoint: completions, dataset: multiturn}", "warning", "bench-dataset", "the completions endpoint does "
     "not take"),                                                              # bench refuses it: said here first
])
def test_files_serve_and_bench_open_at_start_are_checked(tmp_path, section, level, code, fragment):
    from trtlade.config.validate import validate_file

    cfg = tmp_path / "c.yml"
    cfg.write_text(f"lookahead: {{spec: '4,2,4'}}\n{section}\n")
    [found] = [d for d in validate_file(cfg).diagnostics if d.code == code]
    assert found.severity == level and fragment in found.message and found.line == 2


def test_the_schema_knows_the_bundled_datasets_the_bench_reads():
    from trtlade.bench.datasets import BUNDLED, load_dataset
    from trtlade.config.schema import BUNDLED_DATASETS, CHAT_DATASETS

    assert BUNDLED_DATASETS == BUNDLED
    assert CHAT_DATASETS == tuple(name for name in BUNDLED if load_dataset(name).has_messages)


def test_config_show_says_what_kind_of_file_it_was_given():
    from trtlade.cli.main import app

    result = CliRunner().invoke(app, ["config", "show", "tests/data/trtllm_serve/auto-plain.yaml"])
    assert result.exit_code == 1 and "is a trtllm-serve config, not a trtlade config" in result.output
    assert "validate-config" in result.output


@pytest.mark.parametrize("keys, mode, severity, says", [
    ("alice short\n", 0o600, "error", "keys.txt:1: the key of 'alice' is 5 characters; at least 16 are needed"),
    ("alice 0123456789abcdef0123\nbob 0123456789abcdef0123\n", 0o600, "error", "keys.txt:2: the key of 'bob' is "
     "also another identity's key"),
    ("# nobody yet\n", 0o600, "error", "holds no key"),
    ("alice 0123456789abcdef0123 admin\n", 0o644, "warning", "can be read by group or others"),
    ("alice 0123456789abcdef0123 admin\n", 0o600, None, None),
])
def test_the_keys_file_is_read_as_serve_reads_it(tmp_path, keys, mode, severity, says):
    """serve.api_keys_file, where it is here: what would stop serve at start is an error at its line of the config,
    naming the keys file's line and never the key on it."""
    (tmp_path / "keys.txt").write_text(keys)
    (tmp_path / "keys.txt").chmod(mode)
    config = tmp_path / "c.yml"
    config.write_text("lookahead:\n  spec: 2,2,1\nbuild:\n  backend: reference\nserve:\n  engine: reference\n"
                      "  api_keys_file: keys.txt\n")
    result = CliRunner().invoke(app, ["validate-config", str(config), "--format", "json"])
    found = [d for d in json.loads(result.stdout)["diagnostics"] if d["code"].startswith("keys-file")]
    if severity is None:
        assert result.exit_code == 0 and found == []
        return
    assert [d["severity"] for d in found] == [severity] and says in found[0]["message"]
    assert found[0]["line"] == 7 and "0123456789abcdef0123" not in result.stdout
    assert result.exit_code == (1 if severity == "error" else 0)


def test_a_drafter_name_in_the_wrong_case_is_refused_as_build_and_tensorrt_llm_refuse_it(tmp_path):
    """``decoding_type: sa`` in a trtlade config passed validate-config (matched without case) while `build`, and
    TensorRT-LLM's tagged union, refuse it: the CI gate passed a config the build then stopped on."""
    from trtlade.config.validate import validate_file

    path = tmp_path / "sa.yml"
    path.write_text("model: {path: /models/m}\nbuild: {backend: pytorch}\nspeculation: {decoding_type: sa, "
                    "max_draft_len: 4}\n")
    errors = [d for d in validate_file(path).diagnostics if d.severity == "error"]
    assert errors and "case-exact" in errors[0].message and "'SA'" in (errors[0].hint or "")

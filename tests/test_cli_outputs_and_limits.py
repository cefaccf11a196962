"""What a user names is kept: an output file that exists is replaced only with --force; a limit the engine enforces
after the model loads is refused before it, by validate-config and the flags; a flag that conflicts with the
config says so, with the config's hint; a key serving drops is said at start, as validate-config says it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtlade.cli.main import main
from trtlade.config.schema import ServeSection
from trtlade.reference.kernels import MAX_THREADS


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return int(done.value.code or 0)


@pytest.mark.parametrize("argv", [
    ["config", "schema", "-o", "{file}"],
    ["report", "compare", "run-a", "run-b", "-o", "{file}"],
    ["engine-bench", "--specs", "2,2,2", "--json", "{file}"],
], ids=["config schema", "report compare", "engine-bench"])
def test_an_output_file_that_exists_is_replaced_only_with_force(tmp_path: Path, capsys, argv: list[str]) -> None:
    file = tmp_path / "deploy.yml"
    file.write_text("model: {}\n")
    assert run([a.replace("{file}", str(file)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"error: --{'json' if 'engine-bench' in argv else 'output'}: {file} exists" in err and "--force" in err
    assert file.read_text() == "model: {}\n"  # refused before anything ran or was read


def test_config_schema_with_force_replaces_the_file(tmp_path: Path) -> None:
    file = tmp_path / "schema.json"
    file.write_text("old")
    assert run(["config", "schema", "-o", str(file), "--force"]) == 0
    assert file.read_text().startswith("{")


@pytest.mark.parametrize("serve,error", [
    ("shutdown_grace_s: .inf", "serve.shutdown_grace_s: Input should be a finite number"),
    ("threads: 5000", f"serve.threads: Input should be less than or equal to {MAX_THREADS}"),
    ("prefill_stall: .nan", "serve.prefill_stall: Input should be a finite number"),
])
def test_validate_config_refuses_what_the_engine_would_refuse_after_loading(tmp_path: Path, capsys, serve: str,
                                                                           error: str) -> None:
    file = tmp_path / "c.yml"
    file.write_text(f"lookahead: {{spec: '2,4,2'}}\nserve:\n  {serve}\n")
    assert run(["validate-config", str(file)]) == 1
    assert error in capsys.readouterr().out


def test_the_threads_bound_is_the_kernels_own() -> None:
    bound = next(m.le for m in ServeSection.model_fields["threads"].metadata if hasattr(m, "le"))
    assert bound == MAX_THREADS


@pytest.mark.parametrize("argv,error", [
    (["engine-bench", "--threads", "5000"], "error: Invalid value for '--threads': Input should be less than or "
     "equal to 4096"),
    (["serve", "--prefill-stall", "inf"], "error: --prefill-stall inf: must be above 1"),
])
def test_a_flag_beyond_the_engines_limit_is_a_usage_error_before_the_model_loads(capsys, argv, error) -> None:
    assert run(argv) == 2
    assert capsys.readouterr().err.startswith(error)


def test_validate_config_refuses_a_bench_mode_or_level_given_twice(tmp_path: Path, capsys) -> None:
    file = tmp_path / "c.yml"
    file.write_text("lookahead: {spec: '2,4,2'}\nbench:\n  concurrency: [1, 1, 2]\n  modes: [ar, '2,4,2', 2-4-2]\n")
    assert run(["validate-config", str(file)]) == 1
    out = capsys.readouterr().out
    assert "c.yml:3:20: error: bench.concurrency.1: concurrency entry 1 is given twice (as entry 0 too)" in out
    assert "c.yml:4:24: error: bench.modes.2: modes entry '2-4-2' is given twice (as entry 1 too)" in out


def test_a_flag_against_a_config_rule_names_the_flag_and_keeps_the_rules_hint(capsys) -> None:
    assert run(["serve", "--config", "configs/smollm2-cpu.yml", "--engine", "trtllm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --engine trtllm against configs/smollm2-cpu.yml (lookahead.policy): lookahead.policy "
                          "auto needs the reference engine")
    assert "hint: " in err and "policy schedule" in err


def test_serve_and_build_say_the_speculation_keys_upstream_drops(tmp_path: Path, capsys) -> None:
    from trtlade.server.plan import ServeFlags, make_plan

    file = tmp_path / "sp.yml"
    file.write_text("speculation: {decoding_type: AUTO, max_draft_len: 16}\n")
    said = "sp.yml:1:51: warning: speculation.max_draft_len: AUTO chooses its own draft settings"
    assert any(said in w for w in make_plan(ServeFlags(config=file)).config_warnings)
    assert run(["build", "--dry-run", "-c", str(file), "--backend", "pytorch"]) == 0
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_an_empty_dataset_is_refused_not_replaced_by_the_configs(capsys, command: str) -> None:
    assert run([command, "--dataset", "", "--base-url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.startswith("error: --dataset: the dataset is empty text")


def test_a_misspelt_model_section_beside_trtlade_sections_is_read_as_a_trtlade_config(tmp_path: Path, capsys) -> None:
    file = tmp_path / "c.yml"
    file.write_text("models: [a]\nlookahead: {spec: '2,4,2'}\n")
    assert run(["validate-config", str(file)]) == 1
    assert "did you mean 'model'?" in capsys.readouterr().out


def test_the_commands_build_prints_paste_into_a_shell_whatever_the_path(tmp_path: Path, capsys) -> None:
    import shlex
    from types import SimpleNamespace

    from trtlade.cli.build import _print_outcome

    out = tmp_path / "out with space"
    _print_outcome(SimpleNamespace(manifest={"backend": "reference"}, output=out, warnings=()))
    lines = [line for line in capsys.readouterr().out.splitlines() if "trtlade " in line]
    assert lines and all(shlex.split(line.split(":", 1)[1])[-1] == str(out / "trtlade.yml") for line in lines)


def test_config_schema_into_a_folder_names_the_flag_and_exits_2(tmp_path: Path, capsys) -> None:
    assert run(["config", "schema", "-o", str(tmp_path)]) == 2
    assert "error: --output: cannot write" in capsys.readouterr().err


def test_build_with_a_trtllm_serve_file_as_config_says_what_the_file_is(tmp_path: Path, capsys) -> None:
    """It was read as a trtlade config without a spec, and the error blamed a --wng the user never gave."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    code = run(["build", "--model", str(folder), "--config", "tests/data/trtllm_serve/auto-plain.yaml", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 1 and "is a trtllm-serve config, not a trtlade config" in err and "--wng" not in err.split("hint")[0]


@pytest.mark.parametrize("extra, flag", [(["--wng", "4,2,4"], "--wng"), (["--model", "nope", "--dry-run"], "--model")])
def test_build_architectures_beside_another_option_is_refused_not_the_option_ignored(capsys, extra, flag) -> None:
    assert run(["build", "--architectures", *extra]) == 2
    assert f"error: {flag} with --architectures" in capsys.readouterr().err
    assert run(["build", "--architectures"]) == 0


@pytest.mark.parametrize("content, code, said", [
    ("[1,2", 1, ":1:5: not valid JSON"),          # the file's content: located, exit 1
    (None, 2, "is neither a bundled suite"),      # no such suite or file: the flag's value, exit 2
])
def test_engine_bench_prompts_errors_say_whose_mistake(tmp_path: Path, capsys, content, code, said) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    assert run(["engine-bench", "--prompts", str(path)]) == code
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["config", "schema", "--force"], ["engine-bench", "--specs", "2,2,2", "--force"]])
def test_force_without_the_file_it_replaces_is_refused(capsys, argv) -> None:
    assert run(argv) == 2
    assert "error: --force replaces" in capsys.readouterr().err


def test_build_says_a_configs_engine_dir_is_not_what_the_bundle_names(tmp_path: Path, capsys) -> None:
    """The bundle's trtlade.yml names its own engine/ (or model): a build.engine_dir in the config went unread."""
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {}\nlookahead: {spec: '2,2,2'}\nbuild: {backend: reference, engine_dir: /elsewhere/e}\n")
    assert run(["build", "--config", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{cfg}:build.engine_dir /elsewhere/e is not read by build" in " ".join(out.split())


def test_engine_bench_seed_without_a_temperature_is_refused(capsys) -> None:
    assert run(["engine-bench", "--specs", "2,2,2", "--seed", "3"]) == 2
    assert "error: --seed 3 without --temperature" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["build", "--models-dir", "/nonexistent-models", "--wng", "2,2,2", "--dry-run"], "--models-dir: "),
    (["engine-bench", "--no-baselines", "--prompt-lookup-tokens", "5"], "--no-baselines: --prompt-lookup-tokens"),
])
def test_a_flag_that_would_not_be_used_is_refused(capsys, argv, said) -> None:
    assert run(argv) == 2
    assert said in capsys.readouterr().err

"""A usage mistake Click catches before trtlade runs (a value out of range, an unknown option or command, a
missing argument) reads as every trtlade error: ``error:`` and ``hint:`` on stderr, exit 2, no box."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtlade.cli.main import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("argv,error,hint", [
    (["build", "--tp-size", "0"], "error: Invalid value for '--tp-size': Input should be greater than or equal to 1 "
     "(got '0')", "hint: see `trtlade build -h`"),
    (["bench", "--temperature=nan"], "error: Invalid value for '--temperature': Input should be less than or equal to "
     "2 (got 'nan')", "hint: see `trtlade bench -h`"),                        # the value a range check does not show
    (["build", "--no-such-flag"], "error: No such option: --no-such-flag", "hint: see `trtlade build -h`"),
    (["spec"], "error: Missing argument 'W,N,G'.", "hint: see `trtlade spec -h`"),
    (["tune", "--repeats", "x"], "error: Invalid value for '--repeats'", "hint: see `trtlade tune -h`"),
    (["no-such-command"], "error: No such command 'no-such-command'.", "hint: see `trtlade -h`"),
    (["spec", "-1,2,4"], "error: No such option: -1", "hint: a value starting with '-' needs `--` before it: "
     "`trtlade spec -- -1,2,4`"),
    (["tune", "--timeout", "inf"], "error: Invalid value for '--timeout': Input should be less than or equal to "
     "86400 (got 'inf')", "hint: see `trtlade tune -h`"),                      # a request bounded by nothing
])
def test_a_usage_mistake_is_an_error_line_a_hint_and_exit_2(capsys, argv, error, hint):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.startswith(error) and hint in err and "╭" not in err and "Traceback" not in err


@pytest.mark.parametrize("argv,code,stream,text", [
    (["--version"], 0, "out", "trtlade "),
    (["spec", "4,2,4"], 0, "out", "window_size (W)"),
    (["spec", "4,0,4"], 1, "err", "error: "),  # trtlade's own refusal keeps its code
    ([], 2, "out", "Usage: trtlade"),  # no command: the help, as before
    # a flag's value or a missing argument: 2 on every command
    (["export", "grps", "/no/such/bundle", "-o", "/tmp/x.yml"], 2, "err", "/no/such/bundle: no such bundle folder"),
    (["export", "k8s", "/no/such/bundle", "-o", "/tmp/k"], 2, "err", "no such bundle folder or config file"),
    (["serve", "--api-key", "short", "--port", "0"], 2, "err", "at least 16 are needed"),
    (["serve", "--prefix-cache-scope", "identity", "--port", "0"], 2, "err", "error: --prefix-cache-scope: "),
    (["validate-config", str(CONFIGS / "smollm2-cpu.yml"), "--trtllm-version", "0.1.0"], 2, "err", "older than 0.16"),
    (["serve", "--config", "/tmp"], 2, "err", "is a folder, not a file"),
    (["build", "--config", "/tmp", "--dry-run"], 2, "err", "is a folder, not a file"),
    (["bench", "--config", "/tmp"], 2, "err", "is a folder, not a file"),
    (["tune", "--config", "/tmp"], 2, "err", "is a folder, not a file"),
    # a flag that would change nothing in the combination given
    (["serve", "--no-access-log", "--access-log-probes", "--port", "0"], 2, "err", "which --no-access-log turns off"),
    (["validate-config", str(CONFIGS), "-q", "--format", "json"], 2, "err", "--quiet shortens the text output"),
    (["report", "compare", "/tmp/a", "/tmp/b", "--force"], 2, "err", "no --output is given"),
    (["export", "k8s", str(CONFIGS / "smollm2-cpu.yml"), "-o", "/tmp/k", "--queue-target", "9"], 2, "err",
     "no autoscaler without --hpa-max-replicas"),
    (["export", "k8s", str(CONFIGS / "smollm2-cpu.yml"), "-o", "/tmp/k", "--shm-size", "8Gi"], 2, "err",
     "a config file's pod (the reference engine) has no GPU"),
    (["bench", "--base-url", "http://127.0.0.1:9", "--seed", "3"], 2, "err", "at temperature 0 it changes nothing"),
    # an empty path (an unset variable) would be the current folder
    (["bench", "--result-dir", ""], 2, "err", "error: --result-dir is empty: it names a path"),
    (["serve", "--config", ""], 2, "err", "error: --config/-c is empty"),
    (["report", "compare", "", "x"], 2, "err", "error: RUN_A is empty"),
    (["build", "--model", "", "--wng", "4,2,4", "--dry-run"], 2, "err", "error: --model/-m is empty"),
    (["build", "--output", "", "-h"], 0, "out", "Usage: trtlade build"),   # the help, whatever else is given
    (["bench", "-5"], 2, "err", "hint: see `trtlade bench -h`"),             # no argument: no `--` to suggest
    (["validate-config", str(CONFIGS / "smollm2-cpu.yml"), "--upstream", "require"], 0, "err",
     "note: --upstream require applies to trtllm-serve and Triton llmapi files; none was checked"),
    (["tune", "--base-url", "http://127.0.0.1:9", "--seed", "3"], 2, "err", "at temperature 0 it changes nothing"),
])
def test_everything_else_exits_as_the_command_says(capsys, argv, code, stream, text):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == code
    assert text in getattr(capsys.readouterr(), stream)


def test_an_abort_is_said_and_an_unexpected_error_is_not_hidden_behind_another(monkeypatch, capsys):
    import typer

    import trtlade.cli.main as cli

    tiny = typer.Typer()

    @tiny.command()
    def boom(kind: str) -> None:
        raise typer.Abort() if kind == "abort" else RuntimeError("a bug")

    monkeypatch.setattr(cli, "app", tiny)
    with pytest.raises(SystemExit) as done:
        cli.main(["abort"])
    assert done.value.code == 1 and capsys.readouterr().err.startswith("error: aborted")
    with pytest.raises(RuntimeError, match="a bug"):  # itself, not an AttributeError raised while handling it
        cli.main(["bug"])


def test_a_path_under_a_folder_the_user_cannot_enter_is_an_error_not_a_traceback(monkeypatch, capsys, tmp_path):
    """Python 3.11's Path.exists() raises PermissionError there (a mode-500 folder of another user): every command
    that checks a path says so, exit 2. (The suite runs as root, so the refusal is simulated where it is raised.)"""
    import pathlib

    locked = tmp_path / "locked"
    real = pathlib.Path.stat

    def stat(self, *args, **kwargs):
        if str(self).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "stat", stat)
    for argv in (["validate-config", str(locked / "x.yml")], ["config", "show", str(locked / "x.yml")],
                 ["build", "--wng", "4,2,4", "--backend", "reference", "--output", str(locked / "b"), "--dry-run"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        err = capsys.readouterr().err
        assert done.value.code == 2 and "permission denied" in err and "Traceback" not in err, (argv, err)


def test_an_output_that_is_a_link_to_nothing_is_not_written_through(capsys, tmp_path):
    """Path.exists() follows the link and says False: the file would appear wherever it points."""
    link = tmp_path / "schema.json"
    link.symlink_to(tmp_path / "elsewhere" / "x.json")
    with pytest.raises(SystemExit) as done:
        main(["config", "schema", "-o", str(link)])
    assert done.value.code == 2 and "a link to" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists()


def test_every_commands_options_have_types_the_empty_path_check_can_read():
    """The check reads each command function's annotations: one that did not resolve would be skipped silently."""
    import typing

    import typer.main

    from trtlade.cli.main import app

    def commands(group, path):
        for name, cmd in getattr(group, "commands", {}).items():
            yield from commands(cmd, [*path, name]) if hasattr(cmd, "commands") else [([*path, name], cmd)]

    found = list(commands(typer.main.get_command(app), ["trtlade"]))
    assert len(found) >= 10
    for path, cmd in found:
        hints = typing.get_type_hints(cmd.callback)
        assert all(p.name in hints for p in cmd.params if p.name), path



@pytest.mark.parametrize("argv, said, hint", [
    (["validate-config", str(CONFIGS), "--format", "gihub"], "error: --format 'gihub': choose one of text, json, "
     "github", "hint: did you mean 'github'?"),
    (["build", "--model", "x", "--dtype", "f16"], "error: --dtype 'f16': choose one of auto, float16, bfloat16, "
     "float32", "hint: did you mean 'float16'?"),
])
def test_a_value_outside_an_options_choices_is_said_as_every_choice_is(capsys, argv, said, hint):
    """The parser's own wording ("Invalid value for '--format' / '-f': Value error, 'gihub' is not one of ...") with
    a hint to read -h; every other choice of the CLI says ``--engine 'vllm': choose one of ...`` with a hint."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith(said) and hint in err, err

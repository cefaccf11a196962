"""A usage mistake Click catches before trtlade runs (a value out of range, an unknown option or command, a
missing argument) reads as every trtlade error: ``error:`` and ``hint:`` on stderr, exit 2, no box."""

from __future__ import annotations

import pytest

from trtlade.cli.main import main


@pytest.mark.parametrize("argv,error,hint", [
    (["build", "--tp-size", "0"], "error: Invalid value for '--tp-size': Input should be greater than or equal to 1",
     "hint: see `trtlade build -h`"),
    (["build", "--no-such-flag"], "error: No such option: --no-such-flag", "hint: see `trtlade build -h`"),
    (["spec"], "error: Missing argument 'W,N,G'.", "hint: see `trtlade spec -h`"),
    (["tune", "--repeats", "x"], "error: Invalid value for '--repeats'", "hint: see `trtlade tune -h`"),
    (["no-such-command"], "error: No such command 'no-such-command'.", "hint: see `trtlade -h`"),
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
])
def test_everything_else_exits_as_the_command_says(capsys, argv, code, stream, text):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == code
    assert text in getattr(capsys.readouterr(), stream)

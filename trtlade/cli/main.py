"""The Typer app behind the ``trtlade`` console script."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from trtlade import __version__
from trtlade.cli.common import EXIT_USAGE, fail
from trtlade.errors import did_you_mean
from trtlade.cli import bench, build, config, engine_bench, export, serve, spec, tune, validate

app = typer.Typer(
    name="trtlade",
    help="Speculative decoding without a draft model (Lookahead; NGram and SA on TensorRT-LLM's PyTorch backend), "
    "from a Hugging Face checkpoint to production: one config for the build, the server and every request.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"trtlade {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """trtlade: build, serve, validate and benchmark Lookahead decoding deployments."""


for _module in (build, serve, bench, tune, validate, spec, config, engine_bench, export):
    _module.register(app)

#: ``trtlade --help``'s groups, as the README's table has them; each command's one-line purpose.
PANELS: dict[str, tuple[str, ...]] = {
    "Deploy": ("spec", "validate-config", "build", "serve", "export", "config"),
    "Measure": ("bench", "tune", "report"),
    "Reference engine": ("engine-bench",),
}
PURPOSE: dict[str, str] = {
    "spec": "Every number TensorRT-LLM derives from (W,N,G), and its legality rules.",
    "validate-config": "Check configs (trtlade, trtllm-serve, Triton model.yaml, grps) before a GPU is touched.",
    "build": "A bundle: a Lookahead engine (TensorRT-LLM < 1.3) or a drafter config (--speculation, 1.0+).",
    "serve": "An OpenAI-compatible server: TensorRT-LLM, or the reference engine (no GPU).",
    "export": "The bundle for grps_trtllm, Triton or Kubernetes.",
    "config": "The config's JSON Schema, or a file with every default filled in.",
    "bench": "Stress-test a server: TTFT and throughput per concurrency, each change with its noise.",
    "tune": "Which drafter pays at which load on your traffic; writes the schedule.",
    "report": "Compare two bench reports.",
    "engine-bench": "The reference engine against transformers' generate, in one process.",
}


def _group_commands() -> None:
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    order = [name for names in PANELS.values() for name in names]
    app.registered_commands.sort(key=lambda info: order.index(info.name))
    app.registered_groups.sort(key=lambda info: order.index(info.name))
    for info in [*app.registered_commands, *app.registered_groups]:
        name = info.name
        assert name in panel_of, f"{name}: add it to PANELS and PURPOSE"
        info.rich_help_panel = panel_of[name]
        if isinstance(info, typer.models.CommandInfo):
            info.short_help = PURPOSE[name]
        else:
            info.help = PURPOSE[name] if info.typer_instance is None else info.help
            info.short_help = PURPOSE[name]


_group_commands()


def main(argv: Optional[list[str]] = None) -> None:
    """The console script: the app, with a usage mistake Click catches before trtlade runs (a value out of its
    range, an unknown option, a missing argument) said as trtlade says every error, ``error:`` and ``hint:``
    lines on stderr, exit 2, instead of Click's box."""
    click = _click_exceptions()
    _refuse_repeated_options(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=argv, prog_name="trtlade", standalone_mode=False)
    except getattr(click, "NoArgsIsHelpError", ()) as exc:  # `trtlade` alone: the help, printed already
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        usage_error(exc, sys.argv[1:] if argv is None else argv)
    except click.ClickException as exc:
        _exit(exc.format_message(), "", exc.exit_code)
    except typer.Abort:
        _exit("aborted", "", 1)
    except PermissionError as exc:  # a path under a folder the user cannot enter: Path.exists() raises it there
        _exit(f"{exc.filename or 'a file'}: permission denied", "run as a user who may read (and, for an output, "
              "write) that path and every folder above it, or choose another path", EXIT_USAGE)
    sys.exit(code if isinstance(code, int) else 0)


def _refuse_repeated_options(argv: list[str]) -> None:
    """An option that takes one value, given twice (``--max-tokens 10 --max-tokens 20``, ``--ignore-eos
    --no-ignore-eos``): Click keeps the last without a word; refused as a usage mistake, naming it. Options that
    collect values (``-c 1 -c 4``, ``--metadata``) may repeat. Whatever Click itself refuses is left to it."""
    import typer.main

    command: Any = typer.main.get_command(app)
    context = command.context_class  # Typer's own Click's, or the package's: the tree's
    args, path = list(argv), ["trtlade"]
    while hasattr(command, "commands"):  # a group: its subcommand is the first argument that is not an option
        name = next((a for a in args if not a.startswith("-")), None)
        if name is None or name not in command.commands:
            return
        args = args[args.index(name) + 1:]
        command, path = command.commands[name], [*path, name]
    try:
        values, _, order = command.make_parser(context(command, info_name=path[-1], resilient_parsing=True)
                                               ).parse_args(args=list(args))  # a copy: the parser consumes it
    except Exception:  # noqa: BLE001 - an unknown option, a missing value: Click says it, as it would anyway
        return
    if not {"-h", "--help"} & set(args):  # the help is printed whatever else the line holds
        _refuse_empty_paths(order, values, path, command)
    seen: set[str] = set()
    for param in order:
        if getattr(param, "multiple", True) or getattr(param, "count", False) or param.name is None:
            continue
        if param.name in seen and not _same_flag(param, args):
            flags = "/".join([*param.opts, *param.secondary_opts])
            _exit(f"{flags} is given twice: it takes one value, and the first would be dropped", f"give it once (see "
                  f"`{' '.join(path)} -h`)", EXIT_USAGE)
        seen.add(param.name)


def _refuse_empty_paths(order: list[Any], values: dict[str, Any], path: list[str], command: Any) -> None:
    """A path given as empty text (``--result-dir ""``, ``--config "$UNSET"``) reads as the current folder: refused,
    naming the option, before the command runs (the command function's own annotations say which are paths)."""
    import typing

    try:
        hints = typing.get_type_hints(command.callback)
    except Exception:  # noqa: BLE001 - a callback whose hints do not resolve: nothing to check
        return
    for param in order:
        if param.name is None or (hints.get(param.name) not in (Path, Optional[Path]) and param.name != "model"):
            continue  # a path, or --model (a folder, a file or a name: never empty)
        given = values.get(param.name)
        if given == "" or (isinstance(given, (list, tuple)) and "" in given):
            flags = "/".join(param.opts) if param.param_type_name == "option" else param.name.upper()
            _exit(f"{flags} is empty: it names a path, and empty text would be read as the current folder",
                  f"give the path (see `{' '.join(path)} -h`); a variable that is unset expands to nothing",
                  EXIT_USAGE)


def _same_flag(param: Any, args: list[str]) -> bool:
    """A flag given twice the same way (``--force --force``) says one thing; ``--ignore-eos --no-ignore-eos`` two."""
    if not getattr(param, "is_flag", False):
        return False
    return not (set(param.opts) & set(args) and set(param.secondary_opts) & set(args))


def _click_exceptions() -> Any:
    """Click's exceptions module: Typer 0.2x carries its own Click, older Typers use the package."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - typer < 0.20
        from click import exceptions
    return exceptions


def usage_error(exc: Any, argv: Optional[list[str]] = None) -> NoReturn:
    """``error: Invalid value for '--tp-size': ...`` and ``hint: see `trtlade build -h```, exit 2; a value the message
    does not show (a range check: "Input should be less than or equal to 2") is added from the command line."""
    command = exc.ctx.command_path if exc.ctx is not None else "trtlade"
    message = exc.format_message()
    choice = _choice_said(message, getattr(exc, "param", None))
    if choice is not None:
        _exit(*choice, EXIT_USAGE)
    given = _given_value(getattr(exc, "param", None), argv or [])
    if given is not None and given not in message:
        message += f" (got {given!r})"
    option = getattr(exc, "option_name", None) or ""
    takes_argument = any(getattr(p, "param_type_name", "") == "argument"
                         for p in getattr(getattr(exc.ctx, "command", None), "params", ()))
    if option[1:2].isdigit() and takes_argument:  # `trtlade spec -1,2,4`: a value starting with - reads as an option
        token = next((t for t in argv or [] if t.startswith(option)), option)
        _exit(message, f"a value starting with '-' needs `--` before it: `{command} -- {token}`", EXIT_USAGE)
    _exit(message, f"see `{command} -h`", EXIT_USAGE)


def _choice_said(message: str, param: Any) -> Optional[tuple[str, str]]:
    """A value outside an option's choices, said as every other choice of the CLI says it: ``--format 'gihub':
    choose one of text, json, github`` and a did-you-mean (the parser's own wording differs: "Value error, 'gihub' is
    not one of 'text', 'json', 'github'.").

    >>> from types import SimpleNamespace
    >>> _choice_said("Invalid value for '--format' / '-f': Value error, 'gihub' is not one of 'text', 'json', "
    ...              "'github'.", SimpleNamespace(opts=["--format", "-f"]))
    ("--format 'gihub': choose one of text, json, github", "did you mean 'github'?")
    """
    import re

    found = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)\.?$", message)
    opts = getattr(param, "opts", None) or ()
    if found is None or not opts:
        return None
    given, choices = found.group(1), re.findall(r"'([^']*)'", found.group(2))
    hint = did_you_mean(given, choices).strip() or f"one of {', '.join(choices)}"
    return f"{opts[0]} {given!r}: choose one of {', '.join(choices)}", hint


def _given_value(param: Any, argv: list[str]) -> Optional[str]:
    """The value the command line gave an option (``--temperature nan`` or ``--temperature=nan``), else None.

    >>> from types import SimpleNamespace
    >>> _given_value(SimpleNamespace(opts=["--temperature"]), ["bench", "--temperature", "nan"])
    'nan'
    """
    for opt in getattr(param, "opts", None) or ():
        for i, token in enumerate(argv):
            if token == opt and i + 1 < len(argv):
                return argv[i + 1]
            if token.startswith(opt + "="):
                return token[len(opt) + 1:]
    return None


def _exit(message: str, hint: str, code: int) -> NoReturn:
    try:
        fail(message, hint=hint, code=code)
    except typer.Exit as done:
        sys.exit(done.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()

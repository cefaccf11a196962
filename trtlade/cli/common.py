"""Shared helpers for CLI commands: user errors without tracebacks, spec options."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.console import Console

from trtlade.spec import LookaheadSpec, SpecError

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
console = Console(highlight=False, soft_wrap=True)

#: Exit codes: 0 ok, 1 invalid input / failed check, 2 usage error (as Typer/Click use it).
EXIT_INVALID = 1
EXIT_USAGE = 2


def fail(message: str, *, hint: str = "", where: str = "", code: Optional[int] = None) -> NoReturn:
    """Print ``error: [where: ]message`` (+ ``hint: ...``) to stderr and exit with ``code``: by default
    :data:`EXIT_USAGE` where ``where`` is a flag (``--max-concurrency``: its value is the mistake), as Click exits for
    the values it checks, else :data:`EXIT_INVALID` (a config, a spec, a model, a failed step).

    The texts are printed literally (rich markup escaped), so ``pip install -e '.[trtllm-engine]'`` survives.
    A message that already starts with ``where`` (a bundle's error names its folder) is not prefixed again.
    """
    from rich.markup import escape

    prefix = f"{escape(where)}: " if where and not message.startswith(where) else ""
    err_console.print(f"[bold red]error:[/] {prefix}{escape(message)}", markup=True, highlight=False)
    if hint:
        err_console.print(f"[yellow]hint:[/] {escape(hint)}", markup=True, highlight=False)
    raise typer.Exit(code if code is not None else EXIT_USAGE if where.startswith("-") else EXIT_INVALID)


def api_key_for(given: Optional[str], loaded: Any) -> Optional[str]:
    """The key bench and tune send: ``--api-key``; else, with a config (``--launch`` or ``--config``), the variable its
    ``serve.api_key_env`` names (the key the server it starts requires); else ``$OPENAI_API_KEY``. The variable came
    first as the option's default, so it overrode the config's key and a launched server refused every request."""
    import os

    if given is not None:
        return given
    name = loaded.config.serve.api_key_env if loaded is not None else None
    if name and os.environ.get(name):
        return os.environ[name]
    return os.environ.get("OPENAI_API_KEY") or None


def refuse_overwrite(path: Path, *, where: str, force: bool) -> None:
    """An output file the user named that already exists is replaced only with ``--force`` (exit 2 otherwise): a
    mistyped path must not turn a config or a report into something else; a link, even one to nothing, is there too
    (writing through it would create a file wherever it points)."""
    if (path.is_symlink() or path.exists() and not path.is_dir()) and not force:
        fail(f"{path} exists" + (f" (a link to {path.readlink()})" if path.is_symlink() else ""), where=where,
             code=EXIT_USAGE, hint="give a new path, or add --force to replace it")


def require_path(path: Optional[Path], *, where: str, hint: str, file: bool = False) -> None:
    """A file or folder the user named that does not exist, or a folder where a file (``file``) is wanted, is a
    usage mistake: exit 2 naming it."""
    if path is not None and not path.exists():
        fail(f"{where} {str(path)!r} does not exist", where=where, code=EXIT_USAGE, hint=hint)
    if file and path is not None and path.is_dir():
        fail(f"{where} {str(path)!r} is a folder, not a file", where=where, code=EXIT_USAGE, hint=hint)


def parse_spec_option(value: str, *, option: str = "--spec") -> LookaheadSpec:
    """Parse a CLI (W,N,G) or exit naming the option, the rule broken and a hint: 2 for a flag's value (a usage
    mistake, as every command's), 1 for ``trtlade spec``'s own argument (the verdict it was asked for)."""
    try:
        return LookaheadSpec.parse(value)
    except SpecError as exc:
        fail(f"{option} {value!r}: {exc.message} (rule: {exc.rule})", hint=exc.hint,
             code=EXIT_USAGE if option.startswith("-") else EXIT_INVALID)

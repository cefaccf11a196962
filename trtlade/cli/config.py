"""``trtlade config schema`` (the JSON Schema of the deployment config, for editors) and
``trtlade config show FILE`` (the config with every default filled in)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.text import Text

from trtlade.cli.common import EXIT_INVALID, EXIT_USAGE, console, err_console, fail, refuse_overwrite

config_app = typer.Typer(
    name="config",
    help="The deployment config: its JSON Schema, and a file with every default filled in.",
    no_args_is_help=True,
    add_completion=False,
)


@config_app.command("schema")
def schema(
    output: Path = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
) -> None:
    """Print the JSON Schema (draft 2020-12) of a trtlade config.

    Point your editor at it, e.g. with the YAML language server:
    `# yaml-language-server: $schema=trtlade.schema.json` as the first line of the config.
    """
    from trtlade.config.schema import TrtladeConfig

    if force and output is None:
        fail("--force replaces the --output file, and no --output is given (the schema goes to stdout)",
             where="--force", hint="drop --force, or give -o FILE")
    text = json.dumps(TrtladeConfig.json_schema(), indent=2) + "\n"
    if output is None:
        print(text, end="")
        return
    refuse_overwrite(output, where="--output", force=force)
    try:
        output.write_text(text)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}", where="--output",
             hint="give a file path in a folder that exists and you can write")
    err_console.print(f"wrote {output}", highlight=False)


@config_app.command("show")
def show(
    file: Path = typer.Argument(..., metavar="FILE", help="A trtlade config file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    """Print FILE with every default filled in (paths as written), plus the derived lookahead numbers
    as comments: for reading, not for deploying (saved, every default counts as set, and what trtlade derives from
    a field left out, such as build.backend, changes). A config that does not load (YAML or schema errors) prints
    them and exits 1; `validate-config` runs the checks between fields and against engines and releases."""
    import yaml

    from trtlade.config.loader import ConfigError, ConfigLoadError, load_config

    if not file.exists():
        what = "a symlink that leads nowhere (a loop, or a missing target)" if file.is_symlink() else "no such file"
        fail(f"{file}: {what}", code=EXIT_USAGE, hint="give a trtlade config file, e.g. configs/smollm2-cpu.yml")
    _refuse_other_kinds(file)
    try:
        loaded = load_config(file)
    except (ConfigError, ConfigLoadError) as exc:
        for d in exc.diagnostics:
            err_console.print(Text(d.format_text()))
        raise typer.Exit(EXIT_INVALID)
    data = loaded.config.model_dump(mode="json")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    spec = loaded.config.lookahead.spec
    print(f"# {file}: resolved trtlade config (defaults filled in)")
    print(f"# for reading, not deploying: saved, every default here counts as set (build.backend, bench.result_dir "
          f"and some checks follow what a file sets); deploy {file} itself")
    print(f"# lookahead.spec ({spec}): max_draft_len {spec.max_draft_len}, {spec.decoding_tokens} tokens per step, "
          f"at most {spec.max_path_len} accepted per step")
    print(f"# trtllm-build {' '.join(spec.trtllm_build_flags())}")
    print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")


def _refuse_other_kinds(file: Path) -> None:
    """A grps, trtllm-serve or Triton file is said to be one (its keys are not trtlade's, each would be 'unknown')."""
    from trtlade.config.loader import ConfigLoadError
    from trtlade.config.validate import classify
    from trtlade.yaml_doc import read_yaml

    try:
        kind = classify(read_yaml(file).data)
    except ConfigLoadError:
        return  # load_config reports it, located
    if kind not in (None, "trtlade"):
        fail(f"{file} is a {kind} config, not a trtlade config", code=EXIT_INVALID,
             hint=f"config show prints trtlade configs; `trtlade validate-config {file}` checks a {kind} file")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")


__all__ = ["config_app", "register", "schema", "show", "console"]

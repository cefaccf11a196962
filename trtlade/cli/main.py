"""The Typer app behind the ``trtlade`` console script."""

from __future__ import annotations

import typer

from trtlade import __version__
from trtlade.cli import bench, build, config, engine_bench, export, serve, spec, tune, validate

app = typer.Typer(
    name="trtlade",
    help="Lookahead decoding from a Hugging Face checkpoint to production: one config for the "
    "TensorRT-LLM engine build, the server and every request.",
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


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

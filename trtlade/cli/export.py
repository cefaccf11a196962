"""``trtlade export``: write a bundle's settings for the stacks users already run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from trtlade.cli.common import err_console, fail

export_app = typer.Typer(
    name="export",
    help="Write a bundle's settings for another serving stack (grps_trtllm), from the one bundle.",
    no_args_is_help=True,
    add_completion=False,
)


@export_app.command("grps")
def grps(
    bundle: Path = typer.Argument(..., help="A TensorRT-LLM bundle made by `trtlade build`."),
    out: Path = typer.Option(..., "--out", "-o", help="The inference yml to write (e.g. conf/inference.yml)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="The tokenizer folder as grps will see it "
                                             "(default: the bundle config's model.tokenizer or model.path)."),
    bundle_path: Optional[Path] = typer.Option(None, "--bundle-path", help="Where the bundle is on the grps "
                                               "machine (default: its absolute path here)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out."),
) -> None:
    """A grps_trtllm inference yml with the bundle's engine and (W,N,G). grps takes no per-request
    lookahead: every request runs with the bundle's spec. `trtlade validate-config` passes on it."""
    from trtlade.export.common import ExportError, read_source, write_file
    from trtlade.export.grps import grps_inference_yml

    try:
        src = read_source(bundle, root=bundle_path, tokenizer=tokenizer)
        write_file(out, grps_inference_yml(src), force=force)
    except ExportError as exc:
        fail(exc.message, where=exc.where, hint=exc.hint)
    err_console.print(f"wrote {out}: grps_trtllm inference config, engine {src.engine_dir}, lookahead "
                      f"({src.config.lookahead.spec}); check it with: trtlade validate-config {out} "
                      f"--engine-dir {src.bundle.engine_dir}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")

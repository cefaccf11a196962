"""Placeholder: delivered by its issue. Replace this module (keep `register(app)`)."""

from __future__ import annotations

import typer

from trtlade.cli.common import fail


def register(app: typer.Typer) -> None:
    name = "validate-config"

    @app.command(name, help=f"(not implemented yet) {name}")
    def _placeholder() -> None:
        fail(f"'trtlade {name}' is not implemented yet", hint="see the open issues")

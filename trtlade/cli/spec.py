"""``trtlade spec W,N,G``: every number TensorRT-LLM derives from a lookahead spec."""

from __future__ import annotations

import json

import typer

from trtlade.cli.common import EXIT_INVALID, console, err_console, fail, parse_spec_option
from trtlade.spec import LookaheadSpec


def spec(
    value: str = typer.Argument(..., metavar="W,N,G", help='The spec, e.g. "4,2,4", "[7,7,7]", "(4, 2, 4)".'),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (for machines)."),
    request: str = typer.Option(None, "--request", metavar="w,n,g",
                                help="Also check whether this per-request spec is admitted."),
) -> None:
    """Print max_draft_len, tokens per step, path lengths and the trtllm-build flags for (W,N,G).

    An illegal spec exits 1 naming the TensorRT-LLM rule it breaks.
    """
    s = parse_spec_option(value, option="spec")
    data = s.derived()
    if request is not None:
        r = parse_spec_option(request, option="--request")
        data["request"] = {**r.to_dict(), "admitted": s.admits(r),
                           "excess": [{"field": f, "requested": a, "limit": b} for f, a, b in s.excess(r)]}
    if as_json:
        console.print_json(json.dumps(data)) if console.is_terminal else print(json.dumps(data))
    else:
        from rich.table import Table

        table = Table(title=f"Lookahead spec (W,N,G) = ({s})", show_header=False)
        table.add_column("quantity", style="bold")
        table.add_column("value")
        rows = [
            ("window_size (W)", s.window_size),
            ("ngram_size (N)", s.ngram_size),
            ("verification_set_size (G)", s.verification_set_size),
            ("max_draft_len", f"{s.max_draft_len}  = {'0' if s.ngram_size == 1 else s.ngram_size - 2}"
                              f" + ({s.window_size}-1+{s.verification_set_size})*({s.ngram_size}-1)"),
            ("decoding tokens per step", s.decoding_tokens),
            ("max path length (tokens accepted per step)", s.max_path_len),
            ("max draft path length", s.max_draft_path_len),
            ("autoregressive", "yes" if s.is_autoregressive else "no"),
            ("accepted by the 1.x LLM API", "yes" if s.llmapi_compatible else "no (it requires every field > 0)"),
            ("trtllm-build flags", " ".join(s.trtllm_build_flags())),
        ]
        for k, v in rows:
            table.add_row(k, str(v))
        if request is not None:
            req = data["request"]
            verdict = "admitted" if req["admitted"] else "REJECTED: " + ", ".join(
                f"{e['field']} {e['requested']} > {e['limit']}" for e in req["excess"])
            table.add_row(f"request ({request})", verdict)
        console.print(table)
        for w in s.warnings():
            err_console.print(f"[yellow]warning:[/] {w.message}\n[yellow]hint:[/] {w.hint}", markup=True)
    if request is not None and not data["request"]["admitted"]:
        excess = data["request"]["excess"]
        wider = LookaheadSpec(*(max(a, b) for a, b in zip(s.as_tuple(), r.as_tuple())))
        fail(f"--request ({r}) is not admitted by ({s}): " + ", ".join(
             f"{e['field']} {e['requested']} > {e['limit']}" for e in excess),
             hint=f"lower the request to at most ({s}), or serve (W,N,G) = ({wider}) (rebuild the engine for it)",
             where="--request", code=EXIT_INVALID)  # the verdict asked for, not a usage mistake


def register(app: typer.Typer) -> None:
    app.command("spec")(spec)

"""``trtlade validate-config PATH...``: the CI gate for trtlade and grps_trtllm configs.

Exit codes: 0 valid (warnings allowed), 1 any error (or any warning with ``--strict``), 2 usage
error (no such file, a directory without configs, a pattern matching nothing, a missing
``--engine-dir``). Formatting lives here; the checks live in :mod:`trtlade.config.validate`.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.text import Text

from trtlade.cli.common import EXIT_INVALID, EXIT_USAGE, console, err_console, fail
from trtlade.diagnostics import Diagnostic, count_by_severity

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def validate_config(
    paths: List[str] = typer.Argument(..., metavar="PATH...", show_default=False,
                                      help="Config files, directories (their *.yml/*.yaml) or glob patterns."),
    engine_dir: Optional[Path] = typer.Option(
        None, "--engine-dir", metavar="DIR",
        help="Check every config against this built engine (its config.json; rank*.engine optional). "
             "Default: the engine dir each config names (build.engine_dir, grps gpt_model_path), when it exists."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f",
                                               help="text (people), json (machines), github (Actions annotations)."),
    strict: bool = typer.Option(False, "--strict", help="Fail (exit 1) on warnings too."),
    recursive: bool = typer.Option(False, "--recursive", "-r", help="Also look in subdirectories of directories."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="text: print only problems and the summary."),
    trtllm_version: Optional[str] = typer.Option(
        None, "--trtllm-version", metavar="VERSION",
        help="Check against this TensorRT-LLM release (e.g. 1.3.0): what it runs (Lookahead engines below 1.3; "
             "NGram / SA / AUTO on the PyTorch backend). Default: a trtlade config's build.trtllm_version, else the "
             "installed TensorRT-LLM."),
    upstream: str = typer.Option(
        "auto", "--upstream", metavar="auto|require|off",
        help="trtllm-serve files: also build TensorRT-LLM's own TorchLlmArgs from the file where tensorrt_llm is "
             "importable and report any disagreement as an error (auto); require: an error where it is not "
             "importable (the k8s init gate); off: trtlade's verdict only."),
) -> None:
    """Check deployment configs before anything touches a GPU: schema, (W,N,G) legality, request
    spec vs server spec, and the spec vs the engine's max_draft_len (equal, or TensorRT-LLM fails or runs
    what the engine was not built for), and what the targeted TensorRT-LLM release runs. Accepts trtlade
    configs, trtllm-serve --config files and Triton llmapi model.yaml files (every key against that
    release's TorchLlmArgs schema and validators: TensorRT-LLM's verdict at start) and grps_trtllm
    inference_*.yml files (detected automatically).

    Exit 0 when valid (warnings allowed), 1 on any error (or warning with --strict), 2 on usage errors.
    """
    from trtlade.config.validate import expand_inputs, validate_file

    files, usage = expand_inputs(paths, recursive=recursive)
    hints = ["pass config files, directories holding *.yml/*.yaml, or glob patterns"] if usage else []
    if engine_dir is not None and not engine_dir.is_dir():
        usage.append(f"--engine-dir {engine_dir}: " + ("a file, not a directory" if engine_dir.exists() else
                                                       "no such directory"))
        hints.append("--engine-dir takes a TensorRT-LLM engine directory (its config.json is enough)")
    if trtllm_version is not None:
        from trtlade.trtllm.compat import MIN_VERSION, parse_version

        try:
            target = parse_version(trtllm_version)
        except ValueError:
            usage.append(f"--trtllm-version {trtllm_version!r}: not a TensorRT-LLM release")
            hints.append("--trtllm-version takes a release as TensorRT-LLM writes it, e.g. 1.2.1 or 1.3.0rc21")
        else:
            if (target.major, target.minor) < MIN_VERSION:  # the flag's value, whatever the files hold
                usage.append(f"--trtllm-version {trtllm_version}: older than {'.'.join(map(str, MIN_VERSION))}, "
                             "the oldest release trtlade supports")
                hints.append("target 0.16 or later (Lookahead engines up to 1.2, NGram / SA on 1.3 and later)")
    if upstream not in ("auto", "require", "off"):
        usage.append(f"--upstream {upstream!r}: one of auto, require, off")
        hints.append("--upstream: auto (TensorRT-LLM's own check where it is importable), require (an error where it "
                     "is not), off (trtlade's verdict only)")
    if quiet and output_format is not OutputFormat.text:
        usage.append(f"--quiet shortens the text output; --format {output_format.value} prints every finding")
        hints.append("drop --quiet, or filter the JSON (jq) or annotations yourself")
    if usage:
        fail("; ".join(usage), hint="; ".join(hints), code=EXIT_USAGE)
    reports = [validate_file(path, display=shown, engine_dir=engine_dir, release=trtllm_version, upstream=upstream)
               for path, shown in files]
    valid = all(r.valid(strict) for r in reports)
    if upstream != "auto" and not any(r.kind in ("trtllm-serve", "triton-llmapi") for r in reports):
        err_console.print(f"note: --upstream {upstream} applies to trtllm-serve and Triton llmapi files; none was "
                          "checked", markup=False, highlight=False)
    if output_format is OutputFormat.json:
        _print_json(reports, strict, valid)
    elif output_format is OutputFormat.github:
        _print_github(reports, strict, valid)
    else:
        _print_text(reports, strict, valid, quiet)
    if not valid:
        raise typer.Exit(EXIT_INVALID)


# ---------------------------------------------------------------------------------------- output
def _all(reports) -> list[Diagnostic]:
    return [d for r in reports for d in r.diagnostics]


def _summary(reports, strict: bool, valid: bool) -> dict:
    counts = count_by_severity(_all(reports))
    return {"files": len(reports), "valid_files": sum(r.valid(strict) for r in reports),
            "errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"],
            "strict": strict, "valid": valid}


def _summary_line(reports, strict: bool, valid: bool) -> str:
    s = _summary(reports, strict, valid)
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    verdict = "valid" if valid else "INVALID"
    why = " (--strict: warnings fail)" if strict and not valid and not s["errors"] else ""
    return (f"{verdict}{why}: {plural(s['files'], 'file')} checked, {s['valid_files']} valid; "
            f"{plural(s['errors'], 'error')}, {plural(s['warnings'], 'warning')}, {plural(s['infos'], 'note')}")


def _diag_text(d: Diagnostic) -> Text:
    text = Text()
    if d.location:
        text.append(f"{d.location}: ", style="bold")
    text.append(d.severity, style=_STYLE[d.severity])
    text.append(": ")
    if d.path:
        text.append(f"{d.path}: ", style="dim")
    text.append(d.message)
    if d.hint:
        text.append("\n  hint: ", style="green")
        text.append(d.hint.replace("\n", "\n  "))
    return text


def _ok_text(report) -> Text:
    if report.kind == "trtlade":
        d = report.details
        engine = f"engine {d['engine_checked']} checked" if d.get("engine_checked") else "no engine checked"
        what = f"trtlade config, spec ({d['spec']}), max_draft_len {d['max_draft_len']}, {engine}"
        if d.get("speculation"):
            what += f"; speculation {d['speculation']}"
    elif report.kind == "grps":
        specs = [f"({m['spec']})" if m["spec"] else "no lookahead" for m in report.details.get("models", [])]
        what = f"grps_trtllm config, {', '.join(specs) or 'no model'}"
    elif report.kind == "grps-server":
        what = f"grps server config, max_concurrency {report.details.get('max_concurrency')}"
    elif report.kind in ("trtllm-serve", "triton-llmapi"):
        d = report.details
        release = f"TensorRT-LLM {d['release']}" if d.get("release") else "no release given"
        kind = "trtllm-serve config" if report.kind == "trtllm-serve" else "Triton llmapi model.yaml"
        what = f"{kind}, speculative_config {d.get('speculation') or 'none'}, {release}"
    else:
        what = "checked"
    text = Text()
    text.append("ok", style="bold green")
    text.append(f"  {report.file}: {what}")
    return text


def _print_text(reports, strict: bool, valid: bool, quiet: bool) -> None:
    for report in reports:
        shown = [d for d in report.diagnostics if not (quiet and d.severity == "info")]
        for d in shown:
            console.print(_diag_text(d))
        if report.valid(strict) and not quiet:
            console.print(_ok_text(report))
    console.print(Text(_summary_line(reports, strict, valid), style="bold green" if valid else "bold red"))


def _print_json(reports, strict: bool, valid: bool) -> None:
    data = {
        "valid": valid,
        "files": [r.to_dict(strict) for r in reports],
        "diagnostics": [d.to_dict() for d in _all(reports)],
        "summary": _summary(reports, strict, valid),
    }
    print(json.dumps(data, indent=2))


def _gh_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(value: str) -> str:
    return _gh_data(value).replace(":", "%3A").replace(",", "%2C")


def github_annotation(d: Diagnostic) -> str:
    """``::error file=F,line=L,col=C,title=T::message`` (GitHub Actions workflow command), hint on a
    second line of the message."""
    props: list[str] = []
    if d.file:
        props.append(f"file={_gh_property(d.file)}")
    if d.line is not None:
        props.append(f"line={d.line}")
    if d.column is not None:
        props.append(f"col={d.column}")
    title = "trtlade" + (f" {d.path}" if d.path else "") + (f" [{d.code}]" if d.code else "")
    props.append(f"title={_gh_property(title)}")
    message = d.message + (f"\nhint: {d.hint}" if d.hint else "")
    return f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_gh_data(message)}"


def _print_github(reports, strict: bool, valid: bool) -> None:
    for d in _all(reports):
        print(github_annotation(d))
    print(_summary_line(reports, strict, valid))


def register(app: typer.Typer) -> None:
    app.command("validate-config")(validate_config)

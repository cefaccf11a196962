"""``trtlade build``: a Hugging Face model to a TensorRT-LLM Lookahead engine bundle (or a bundle for
the PyTorch reference engine). Heavy modules are imported inside the command only."""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Any, Optional

import typer

from trtlade.cli.common import console, err_console, fail, parse_spec_option
from trtlade.spec import SIZE_TYPE32_MAX


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


HELP = """Build a TensorRT-LLM engine with Lookahead decoding from a Hugging Face model, as a bundle; or,
with --speculation, a bundle for TensorRT-LLM's PyTorch backend (1.3 and later: no engine, no Lookahead).

Lookahead (TensorRT-LLM 0.16 <= v < 1.3): step 1 converts the checkpoint with TensorRT-LLM's Python API
(one rank per tp*pp), step 2 runs trtllm-build with --speculative_decoding_mode lookahead_decoding
--max_draft_len <formula(W,N,G)>. The bundle (<output>/) holds engine/, checkpoint/, logs/, trtlade.yml
(for serve, validate-config and bench), extra_llm_api_options.yml (for trtllm-serve 1.x) and
trtlade-manifest.json (written last).

--speculation ngram|sa|auto: nothing is converted or built; the bundle holds trtllm-serve.yml (the
trtllm-serve --config file with speculative_config), trtlade.yml and the manifest, and the command to serve.

Flags override --config, which overrides defaults. --dry-run prints the commands and writes nothing.
"""


class Dtype(str, enum.Enum):
    auto = "auto"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"


class BackendChoice(str, enum.Enum):
    trtllm = "trtllm"
    reference = "reference"
    pytorch = "pytorch"


def _refuse_beside_architectures(ctx: Any) -> None:
    """``--architectures`` prints the table and exits: another option given with it (a model, a spec, a missing
    config) would be ignored without a word, so it is refused, naming the first."""
    def from_command_line(name: str) -> bool:  # Typer's own Click or the package's: the source's name
        source = ctx.get_parameter_source(name)
        return source is not None and source.name == "COMMANDLINE"

    given = [p for p in ctx.command.params if p.name != "architectures" and from_command_line(p.name)]
    if given:
        flag = given[0].opts[0]
        fail(f"{flag} with --architectures: --architectures prints the release table and builds nothing, so {flag} "
             "would be ignored", where=flag, hint="run `trtlade build --architectures` alone")


def _load_config_file(path: Path) -> Any:
    """The ``--config`` YAML document (data + positions), read with validate-config's guards; its data
    is validated later, merged with the flags."""
    from trtlade.config.loader import ConfigLoadError, read_yaml

    if not path.exists():
        fail(f"{path} does not exist", where="--config", hint="pass a trtlade YAML config", code=2)
    if path.is_dir():
        fail(f"{path} is a folder, not a file", where="--config", hint="pass a trtlade YAML config", code=2)
    try:
        doc = read_yaml(path)
    except ConfigLoadError as exc:
        d = exc.diagnostics[0]
        fail(d.message, hint=d.hint, where=d.location or str(path))
    if not isinstance(doc.data, dict):
        fail(f"the top level is a {type(doc.data).__name__}, not a mapping", where=str(path),
              hint="a trtlade config has the sections model, build, lookahead, serve, bench")
    from trtlade.config.validate import classify

    kind = classify(doc.data)
    if kind not in (None, "trtlade"):  # its keys are not trtlade's: it was read as a config without a spec
        fail(f"{path} is a {kind} config, not a trtlade config", where="--config",
             hint=f"build reads a trtlade config (model, build, lookahead, serve); `trtlade validate-config {path}` "
                  f"checks a {kind} file", code=1)
    return doc


def _config_warnings(doc: Any) -> list[str]:
    """The config file's warnings the bundle would otherwise keep quiet about (:func:`start_warnings`); none without
    a file, or where the file alone is not a whole config (the plan's own checks said what was wrong)."""
    if doc is None:
        return []
    from pydantic import ValidationError

    from trtlade.config.checks import start_warnings
    from trtlade.config.schema import TrtladeConfig

    try:
        return start_warnings(doc, TrtladeConfig.model_validate(doc.data))
    except (ValidationError, ValueError):
        return []


def _locate(where: str, doc: Any) -> str:
    """``deploy.yml:build.max_batch_size`` -> ``deploy.yml:7:19: build.max_batch_size``."""
    if doc is None or not where.startswith(f"{doc.file}:"):
        return where
    dotted = where[len(doc.file) + 1:]
    loc = tuple(int(p) if p.isdigit() else p for p in dotted.split(".")) if dotted else ()
    line, column = doc.position(loc)
    return f"{doc.file}:{line}:{column}: {dotted}"


class _RichReporter:
    """Per-step progress on stderr: a spinner with the step's last log line, then a result line."""

    def __init__(self) -> None:
        self._status: Any = None
        self._title = ""

    def info(self, text: str) -> None:
        err_console.print(f"  {text}", markup=False)

    def start(self, step: str, title: str) -> None:
        self._stop()
        self._title = title
        from rich.text import Text

        self._status = err_console.status(Text(f"{title} ..."))
        self._status.start()

    def update(self, step: str, line: str) -> None:
        if self._status is not None:
            from rich.text import Text

            self._status.update(Text(f"{self._title} ... {line}"))

    def finish(self, step: str, seconds: float, detail: str = "") -> None:
        self._stop()
        err_console.print(f"[green]done[/] {_esc(self._title)} ({seconds:.1f} s)"
                          + (f": {_esc(detail)}" if detail else ""), highlight=False)

    def skip(self, step: str, reason: str) -> None:
        self._stop()
        err_console.print(f"[cyan]skip[/] {step}: {_esc(reason)}", highlight=False)

    def fail(self, step: str, seconds: float) -> None:
        self._stop()
        err_console.print(f"[red]failed[/] {_esc(self._title)} ({seconds:.1f} s)", highlight=False)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _print_outcome(result: Any) -> None:
    import shlex

    m = result.manifest
    out = result.output

    def arg(path: Any) -> str:  # a path as a shell reads it (pasted as printed, a space would split it)
        return shlex.quote(str(path))
    console.print(f"bundle: {out}", markup=False)
    if m.get("backend") == "pytorch":
        console.print(f"  TensorRT-LLM {m['tensorrt_llm']['version']}, PyTorch backend, speculative_config "
                      f"{m['speculation']}", markup=False)
        console.print(f"  check:  trtlade validate-config {arg(out / 'trtllm-serve.yml')} --trtllm-version "
                      f"{m['tensorrt_llm']['version']}", markup=False)
        console.print(f"  serve:  {m['serve_command']}", markup=False)
        console.print(f"     or:  trtlade serve --config {arg(out / 'trtlade.yml')}", markup=False)
        return
    if m.get("backend") == "trtllm":
        eng = m["limits"]["engine"]
        console.print(f"  engine: {out / 'engine'} (TensorRT-LLM {m['tensorrt_llm']['version']}, max_draft_len "
                      f"{eng['max_draft_len']}, max_seq_len {eng['max_seq_len']}, max_num_tokens "
                      f"{eng['max_num_tokens']}, max_batch_size {eng['max_batch_size']})", markup=False)
    for warning in result.warnings:
        console.print(f"  warning: {warning}", markup=False)
    console.print(f"  check:  trtlade validate-config {arg(out / 'trtlade.yml')}", markup=False)
    console.print(f"  serve:  trtlade serve --config {arg(out / 'trtlade.yml')}", markup=False)


def _print_architectures() -> None:
    from rich.table import Table

    from trtlade.builder.models import BUILDABLE
    from trtlade.builder.pytorch import PYTORCH_ARCHITECTURES
    from trtlade.trtllm.releases import ENGINE_BACKEND_GONE, NEWEST_READ, RELEASES

    releases = Table(title=f"TensorRT-LLM releases: what each runs (newest read: {NEWEST_READ})")
    for column in ("releases", "Lookahead engine", "PyTorch-backend drafters", "trtlade", "sources"):
        releases.add_column(column)
    for row in RELEASES:
        releases.add_row(row.label, "yes" if row.lookahead else "no", ", ".join(row.drafters) or "-", row.commands,
                         row.sources)
    console.print(releases)
    console.print(ENGINE_BACKEND_GONE[0].upper() + ENGINE_BACKEND_GONE[1:] + ".", markup=False)
    table = Table(title="HF architectures trtlade build converts to a Lookahead engine (TensorRT-LLM 0.16 <= v < 1.3)")
    for column in ("architectures[0]", "tensorrt_llm.models class", "first release", "source", "open"):
        table.add_column(column)
    for arch in BUILDABLE:
        table.add_row(arch.architecture, arch.trtllm_class, arch.first_version, arch.source,
                      arch.unverified or "-")
    console.print(table)
    console.print("PyTorch backend (--speculation; tensorrt_llm/_torch/models/__init__.py, a 1.0-era list; an "
                  "installed release's own registry decides): " + ", ".join(PYTORCH_ARCHITECTURES), markup=False)


def register(app: typer.Typer) -> None:
    @app.command("build", help=HELP)
    def build(
        ctx: typer.Context,
        model: Optional[str] = typer.Option(
            None, "--model", "-m", help="A Hugging Face model folder, or a name (Qwen3-8B) looked up under "
            "--models-dir / model.models_dir / $TRTLADE_MODELS_DIR (never a hub). Default: the config's "
            "model, else the embedded SmolLM2-135M-Instruct."),
        wng: Optional[str] = typer.Option(
            None, "--wng", help="The lookahead (W,N,G) the engine is built for, e.g. 4,2,4 (sets "
            "max_draft_len). Default: the config's lookahead.spec."),
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="A trtlade YAML config."),
        dtype: Optional[Dtype] = typer.Option(None, "--dtype", help="Default: the config's model.dtype, else "
                                              "auto (the checkpoint's torch_dtype)."),
        tp_size: Optional[int] = typer.Option(None, "--tp-size", min=1, max=64, help="Tensor parallelism."),
        pp_size: Optional[int] = typer.Option(None, "--pp-size", min=1, max=64, help="Pipeline parallelism."),
        max_batch_size: Optional[int] = typer.Option(None, "--max-batch-size", min=1, max=4096,
                                                     help="Default 8."),
        max_input_len: Optional[int] = typer.Option(None, "--max-input-len", min=1, max=SIZE_TYPE32_MAX,
                                                    help="Default 2048."),
        max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len", min=2, max=SIZE_TYPE32_MAX,
                                                  help="Prompt + output; the builder adds max_draft_len. Default "
                                                       "max_input_len + 2048."),
        max_num_tokens: Optional[int] = typer.Option(None, "--max-num-tokens", min=1, max=SIZE_TYPE32_MAX,
                                                     help="Default 8192, at most max_seq_len*max_batch_size; "
                                                          "the builder raises it to max_batch_size*(max_draft_len+1)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="The bundle folder. Default: "
                                              "build.output_dir, else ./<model>-lookahead-W-N-G (the reference "
                                              "engine: <model>-reference-W-N-G; --speculation: "
                                              "<model>-pytorch-<drafter>)."),
        models_dir: Optional[Path] = typer.Option(None, "--models-dir", help="Where model names are looked up."),
        backend: Optional[BackendChoice] = typer.Option(
            None, "--backend", help="trtllm (default: a Lookahead engine, TensorRT-LLM < 1.3), pytorch "
            "(TensorRT-LLM's PyTorch backend, no engine; with the config's speculation block) or reference (the "
            "PyTorch engine on CPU; default when TensorRT-LLM is absent and no model is named)."),
        keep_checkpoint: Optional[bool] = typer.Option(
            None, "--keep-checkpoint/--no-keep-checkpoint", help="Keep checkpoint/ (default: keep; lets a "
            "rebuild skip the conversion)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan as shell commands; write nothing."),
        force: bool = typer.Option(False, "--force", help="Rebuild over an existing bundle."),
        architectures: bool = typer.Option(
            False, "--architectures", help="List what each TensorRT-LLM release runs (Lookahead engines, the "
            "PyTorch backend's drafters), the HF architectures build converts with the first release that converts "
            "each, and those the PyTorch backend loads; then exit."),
        speculation: Optional[str] = typer.Option(
            None, "--speculation", help="Build for TensorRT-LLM's PyTorch backend (1.3 and later: the only one) "
            "with this drafter: ngram, sa, auto, or a mode such as sa-8 or ngram-4-2 (default: the config's "
            "speculation block with --backend pytorch). Nothing is converted or built."),
        trtllm_version: Optional[str] = typer.Option(
            None, "--trtllm-version", help="The TensorRT-LLM release the bundle is for (default: "
            "build.trtllm_version, else the installed one, else, for --speculation, the newest trtlade has read). "
            "A Lookahead engine's must be below 1.3 and the installed one; the reference engine does not use it."),
    ) -> None:
        if architectures:
            _refuse_beside_architectures(ctx)
            _print_architectures()
            return
        from trtlade.builder.bundle import query_gpus
        from trtlade.builder.errors import BuildError
        from trtlade.builder.plan import BuildOptions, embedded_model_peek, make_plan

        spec = parse_spec_option(wng, option="--wng") if wng is not None else None
        doc = _load_config_file(config) if config is not None else None
        raw = doc.data if doc is not None else {}
        options = BuildOptions(
            model=model, spec=spec, config_path=config, dtype=dtype.value if dtype else None,
            tp_size=tp_size, pp_size=pp_size, max_batch_size=max_batch_size, max_input_len=max_input_len,
            max_seq_len=max_seq_len, max_num_tokens=max_num_tokens, output=output, models_dir=models_dir,
            backend=backend.value if backend else None, keep_checkpoint=keep_checkpoint, force=force,
            speculation=speculation, trtllm_version=trtllm_version)
        gpus = query_gpus()
        try:
            plan = make_plan(options, config=raw, gpu_count=len(gpus) if gpus else None,
                             embedded_dir=embedded_model_peek if dry_run else None)
        except BuildError as exc:
            fail(exc.message, hint=exc.hint, where=_locate(exc.where, doc))
        for warning in _config_warnings(doc):
            err_console.print(warning, markup=False, highlight=False)
        if dry_run:
            _print_dry_run(plan)
        else:
            _run_plan(plan, gpus)


def _print_dry_run(plan: Any) -> None:
    """The plan as shell commands, after what the real run would refuse before it starts."""
    from trtlade.builder.errors import BuildError
    from trtlade.builder.run import check_output

    try:
        check_output(plan)
    except BuildError as exc:
        fail(exc.message, hint=exc.hint, where=exc.where)
    print(plan.render(), end="")


def _run_plan(plan: Any, gpus: Any) -> None:
    """The plan's notes, then the build with a live progress display, its time and outcome; a failure prints the
    log's last lines (where the error has them), then the error; Ctrl-C exits 130."""
    from trtlade.builder.errors import BuildError
    from trtlade.builder.run import run_build

    for note in plan.notes:
        err_console.print(f"[yellow]note:[/] {_esc(note)}", highlight=False)
    t0 = time.monotonic()
    reporter = _RichReporter()
    try:
        result = run_build(plan, reporter, gpus=gpus)
    except BuildError as exc:
        reporter._stop()
        if exc.log_tail:
            err_console.print(f"--- last lines of {exc.log_path or 'the log'} ---", markup=False, highlight=False)
            err_console.print(exc.log_tail, markup=False, highlight=False)
            err_console.print("---", markup=False)
        fail(exc.message, hint=exc.hint, where=exc.where)
    except KeyboardInterrupt:
        reporter._stop()
        fail("interrupted; nothing was marked complete (no manifest written)",
             hint="re-run the same command: a finished conversion is reused", code=130)
    console.print(f"built in {time.monotonic() - t0:.1f} s", markup=False)
    _print_outcome(result)

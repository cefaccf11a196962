"""Running a :class:`~trtlade.builder.plan.BuildPlan`: probe TensorRT-LLM, convert (unless a checkpoint
from the same inputs is there), ``trtllm-build``, check the engine, write the bundle (manifest last).

Each step runs as a subprocess whose output goes to ``<output>/logs/<step>.log``; a :class:`Reporter`
hears about progress (the CLI shows it with rich). Every failure is a
:class:`~trtlade.builder.errors.BuildError` carrying the log's tail and what to try.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from trtlade.builder.bundle import (
    MANIFEST_FORMAT,
    WRITTEN_FILES,
    _block_reuse,
    checkpoint_complete,
    conversion_inputs,
    deployment_config,
    inputs_hash,
    output_state,
    query_gpus,
    remove_tree,
    render_deployment_config,
    render_extra_options,
    write_stamp,
)
from trtlade.builder.errors import BuildError
from trtlade.files import write_json_atomic, write_text_atomic
from trtlade.builder.failures import diagnose, log_tail
from trtlade.builder.models import weights_fingerprint
from trtlade.builder.plan import BuildPlan
from trtlade.bundle import CHECKPOINT_DIR, CONFIG_FILE, ENGINE_DIR, EXTRA_OPTIONS_FILE, LOGS_DIR, TRTLLM_SERVE_FILE
from trtlade.trtllm.compat import INSTALL_HINT, release_key
from trtlade.trtllm.releases import NEWEST_READ

__all__ = ["Reporter", "StepRecord", "BuildResult", "run_build", "check_output", "find_trtllm_build"]


class Reporter:
    """Progress callbacks (no-ops here; the CLI shows them). ``step`` is convert / build / ..."""

    def info(self, text: str) -> None: ...
    def start(self, step: str, title: str) -> None: ...
    def update(self, step: str, line: str) -> None: ...
    def finish(self, step: str, seconds: float, detail: str = "") -> None: ...
    def skip(self, step: str, reason: str) -> None: ...
    def fail(self, step: str, seconds: float) -> None: ...


@dataclass
class StepRecord:
    """One command run (or skipped), for the manifest."""

    step: str
    argv: list[str]
    shell: str
    exit_code: int | None = None
    seconds: float = 0.0
    log: str | None = None
    skipped: bool = False
    reason: str = ""


@dataclass
class BuildResult:
    output: Path
    manifest: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- helpers
def check_output(plan: BuildPlan) -> str:
    """Refuse an output that must not be touched, or that cannot be a folder; returns its state kind."""
    if plan.output.exists() and not plan.output.is_dir():
        raise BuildError(f"{plan.output} is a file, not a folder", where="--output",
                         hint="a bundle is a folder: choose a new or empty folder (--force replaces only a bundle's "
                              "own entries, never a file of yours)")
    above = next(p for p in plan.output.parents if p.exists())
    if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
        raise BuildError(f"cannot create {plan.output}: {above} is " + ("a file" if not above.is_dir() else
                                                                         "not writable"),
                         where="--output", hint="choose a folder under one you can write to")
    state = output_state(plan.output)
    if state.kind == "complete" and not plan.force:
        raise BuildError(f"{plan.output} already holds a complete trtlade bundle", where="--output",
                         hint="pass --force to rebuild it (a checkpoint converted from the same inputs is "
                              "reused), or choose another --output")
    replaced = [name for name in state.foreign if name in WRITTEN_FILES]
    if replaced:  # even with --force: the build would write over it
        raise BuildError(f"{plan.output / replaced[0]} is not a file trtlade build wrote, and the build writes one of "
                         "that name there", where="--output",
                         hint="move it away (a config given with --config may stay elsewhere), or choose another "
                              "--output")
    if state.kind == "foreign" and not plan.force:
        shown = ", ".join(state.foreign[:5]) + (" ..." if len(state.foreign) > 5 else "")
        raise BuildError(f"{plan.output} exists and holds files that are not from trtlade build ({shown})",
                         where="--output",
                         hint="choose a new or empty folder; --force builds there anyway, replacing only "
                              "trtlade's own entries (engine/, checkpoint/, logs/, trtlade.yml, ...)")
    return state.kind


def find_trtllm_build() -> str | None:
    """``trtllm-build`` on PATH, else next to this Python (a venv's bin/ that is not on PATH)."""
    found = shutil.which("trtllm-build")
    if found:
        return found
    beside = Path(sys.executable).parent / "trtllm-build"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _shell(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _last_line(path: Path) -> str:
    tail = log_tail(path, lines=3, max_bytes=4096)
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def _run_logged(argv: Sequence[str], log: Path, step: str, reporter: Reporter,
                env: dict[str, str] | None = None) -> tuple[int, float]:
    """Run ``argv`` with stdout+stderr appended to ``log``; report its last line while it runs."""
    t0 = time.monotonic()
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {_shell(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env)
        except OSError as exc:
            fh.write(f"[trtlade] cannot start {argv[0]}: {exc}\n")
            raise BuildError(f"cannot start {argv[0]}: {exc.strerror or exc}", log_path=str(log),
                             hint=INSTALL_HINT) from None
        shown = ""
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    line = _last_line(log)
                    if line and line != shown:
                        reporter.update(step, line)
                        shown = line
        except BaseException:  # KeyboardInterrupt: stop the child before leaving
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    return code, time.monotonic() - t0


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ---------------------------------------------------------------------------------------- steps
def _probe(plan: BuildPlan, reporter: Reporter, records: list[StepRecord]) -> dict[str, Any]:
    """Check TensorRT-LLM (installed, version, class, Qwen3 config) in a subprocess; nothing written."""
    reporter.start("probe", "checking TensorRT-LLM")
    with tempfile.TemporaryDirectory(prefix="trtlade-probe-") as tmp:
        result_file = Path(tmp) / "result.json"
        log = Path(tmp) / "probe.log"
        argv = plan.convert_argv(result_file=result_file, probe=True)
        code, seconds = _run_logged(argv, log, "probe", reporter, env=_child_env())
        result = _read_result(result_file)
        tail = log_tail(log)
    records.append(StepRecord("probe", argv, _shell(argv), code, round(seconds, 3)))
    if code == 0 and result.get("ok"):
        reporter.finish("probe", seconds, f"TensorRT-LLM {result.get('version')}")
        return result
    reporter.fail("probe", seconds)
    if result.get("kind") == "unavailable":
        raise BuildError(str(result.get("message")), hint=str(result.get("hint") or INSTALL_HINT))
    if result.get("kind") not in (None, "error"):  # a known refusal: the message says it all
        raise BuildError(str(result.get("message")), hint=str(result.get("hint") or ""),
                         where=str(plan.model.path / "config.json"))
    known = diagnose(tail, code)
    detail = known.summary if known else str(result.get("message") or "")
    raise BuildError(f"checking TensorRT-LLM failed (exit {code})" + (f": {detail}" if detail else ""),
                     hint=known.hint if known else "the output above shows where it failed", log_tail=tail)


def _read_result(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _step_failure(step: str, what: str, code: int, log: Path, result: dict[str, Any] | None = None) -> BuildError:
    tail = log_tail(log)
    if result and result.get("kind") and result.get("kind") != "error":
        return BuildError(str(result["message"]), hint=str(result.get("hint") or ""), log_tail=tail,
                          log_path=str(log))
    known = diagnose(log_tail(log, lines=400, max_bytes=1 << 20), code)
    killed = code < 0 or code == 137
    message = f"{what} failed ({'killed by signal ' + str(-code) if code < 0 else 'exit ' + str(code)})"
    if known:
        message += f": {known.summary}"
    elif result and result.get("message"):
        message += f": {result['message']}"
    hint = known.hint if known else (
        "the process was killed (out of memory?)" if killed else
        f"read the full log {log}; re-run the command from the manifest or the dry-run to reproduce")
    return BuildError(message, hint=hint, log_tail=tail, log_path=str(log))


def _convert(plan: BuildPlan, version: str, reporter: Reporter, records: list[StepRecord]) -> dict[str, Any]:
    """Step 1, skipped when ``checkpoint/`` holds a conversion of the same inputs."""
    inputs = conversion_inputs(plan, version, weights_fingerprint(plan.model.path))
    digest = inputs_hash(inputs)
    target = plan.checkpoint_dir
    argv_final = plan.convert_argv()
    if checkpoint_complete(target, digest, plan.world_size):
        reason = f"{target} was converted from the same inputs (stamp {digest[:12]})"
        reporter.skip("convert", reason)
        records.append(StepRecord("convert", argv_final, _shell(argv_final), skipped=True, reason=reason))
        return {"reused": True, "inputs_sha256": digest, "inputs": inputs}
    partial = plan.output / f".{CHECKPOINT_DIR}.partial"
    remove_tree(partial)
    log = plan.logs_dir / "convert.log"
    result_file = plan.logs_dir / "convert-result.json"
    result_file.unlink(missing_ok=True)
    argv = plan.convert_argv(checkpoint_dir=partial, result_file=result_file)
    reporter.start("convert", f"converting {plan.model.path.name} to a TensorRT-LLM checkpoint "
                              f"({plan.trtllm_class}, {plan.dtype}, {plan.world_size} rank"
                              f"{'s' if plan.world_size > 1 else ''})")
    code, seconds = _run_logged(argv, log, "convert", reporter, env=_child_env())
    rel_log = os.path.relpath(log, plan.output)
    records.append(StepRecord("convert", argv, _shell(argv), code, round(seconds, 3), rel_log))
    result = _read_result(result_file)
    missing = [n for n in ["config.json"] + [f"rank{r}.safetensors" for r in range(plan.world_size)]
               if not (partial / n).is_file()]
    if code != 0 or not result.get("ok") or missing:
        reporter.fail("convert", seconds)
        remove_tree(partial)
        if code == 0 and result.get("ok") and missing:
            raise BuildError(f"the conversion reported success but wrote no {', '.join(missing)}",
                             hint=f"read {log}", log_tail=log_tail(log), log_path=str(log))
        raise _step_failure("convert", "checkpoint conversion", code, log, result)
    write_stamp(partial, inputs, seconds)
    remove_tree(target)
    os.replace(partial, target)
    reporter.finish("convert", seconds, str(target))
    return {"reused": False, "inputs_sha256": digest, "inputs": inputs}


def _build_engine(plan: BuildPlan, trtllm_build: str, reporter: Reporter, records: list[StepRecord]):
    """Step 2: trtllm-build into ``.engine.partial``, check it, rename to ``engine/``."""
    from trtlade.config.schema import BuildSection
    from trtlade.diagnostics import has_errors
    from trtlade.trtllm.engine_config import EngineConfigError, check_engine, read_engine_config

    partial = plan.output / f".{ENGINE_DIR}.partial"
    remove_tree(partial)
    log = plan.logs_dir / "trtllm-build.log"
    argv = plan.build_argv(checkpoint_dir=plan.checkpoint_dir, engine_dir=partial, trtllm_build=trtllm_build)
    reporter.start("build", f"building the engine (max_draft_len {plan.max_draft_len}, "
                            f"{plan.world_size} rank{'s' if plan.world_size > 1 else ''})")
    code, seconds = _run_logged(argv, log, "build", reporter, env=_child_env())
    records.append(StepRecord("build", argv, _shell(argv), code, round(seconds, 3),
                              os.path.relpath(log, plan.output)))
    if code != 0:
        reporter.fail("build", seconds)
        remove_tree(partial)
        raise _step_failure("build", "trtllm-build", code, log)
    try:
        engine = read_engine_config(partial)
    except EngineConfigError as exc:
        reporter.fail("build", seconds)
        raise BuildError(f"trtllm-build exited 0 but its output is not a usable engine: {exc.message}",
                         hint=exc.hint, log_tail=log_tail(log), log_path=str(log)) from None
    section = BuildSection(engine_dir=Path(ENGINE_DIR), tp_size=plan.tp_size, pp_size=plan.pp_size,
                           **plan.limits.to_dict())
    diags = check_engine(plan.spec, engine, build=section)
    if has_errors(diags):
        reporter.fail("build", seconds)
        text = "; ".join(d.message for d in diags if d.is_error)
        raise BuildError(f"the engine trtllm-build wrote does not match the plan: {text}",
                         hint=f"the engine is left in {partial} for inspection; read {log}",
                         log_path=str(log))
    remove_tree(plan.engine_dir)
    os.replace(partial, plan.engine_dir)
    reporter.finish("build", seconds, str(plan.engine_dir))
    warnings = [d.message for d in diags if d.severity == "warning"]
    return read_engine_config(plan.engine_dir), warnings


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _trtlade_version() -> str:
    from trtlade import __version__

    return __version__


def _gpu_summary(gpus: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    if not gpus:
        return None
    first = gpus[0]
    return {"name": first["name"], "compute_capability": first["compute_capability"], "count": len(gpus),
            "all": gpus}


def _start_fresh(plan: BuildPlan, state: str) -> None:
    """With --force on a complete bundle: first make it incomplete (manifest first), then rebuild."""
    if state == "complete":
        for name in (plan.manifest_path.name, CONFIG_FILE, EXTRA_OPTIONS_FILE, TRTLLM_SERVE_FILE):
            (plan.output / name).unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------- entry
def run_build(plan: BuildPlan, reporter: Reporter | None = None, *,
              gpus: list[dict[str, Any]] | None | Callable[[], Any] = query_gpus) -> BuildResult:
    """Run ``plan``; returns the manifest written. Raises :class:`BuildError` on any failure, leaving no
    manifest (so no complete-looking bundle)."""
    reporter = reporter or Reporter()
    t_start = time.monotonic()
    state = check_output(plan)
    gpu_list = gpus() if callable(gpus) else gpus
    if plan.backend == "reference":
        return _run_reference(plan, reporter, state, gpu_list, t_start)
    if plan.backend == "pytorch":
        return _run_pytorch(plan, reporter, state, gpu_list, t_start)
    return _run_engine(plan, reporter, state, gpu_list, t_start)


def _run_engine(plan: BuildPlan, reporter: Reporter, state: str, gpu_list: Any, t_start: float) -> BuildResult:
    """A TensorRT-LLM engine: convert the checkpoint, run trtllm-build, write the configs and the manifest."""
    records: list[StepRecord] = []
    probe = _probe(plan, reporter, records)
    version = str(probe["version"])
    _check_target(plan, version)
    trtllm_build = find_trtllm_build()
    if trtllm_build is None:
        raise BuildError(f"tensorrt_llm {version} imports but its trtllm-build command is not on PATH",
                         hint=f"it is installed next to the Python that has tensorrt_llm: add that bin/ "
                              f"folder to PATH (e.g. {Path(sys.executable).parent}); {INSTALL_HINT}")
    _make_output(plan)
    _start_fresh(plan, state)
    plan.logs_dir.mkdir(exist_ok=True)
    conversion = _convert(plan, version, reporter, records)
    engine, warnings = _build_engine(plan, trtllm_build, reporter, records)
    if not plan.keep_checkpoint:
        remove_tree(plan.checkpoint_dir)

    deploy = deployment_config(plan, engine_dtype=engine.dtype)
    _validate_deployment(deploy)
    write_text_atomic(plan.extra_options_file, render_extra_options(plan, version=version))
    write_text_atomic(plan.config_file, render_deployment_config(plan, deploy))
    timings = {f"{r.step}_s": r.seconds for r in records}
    timings["total_s"] = round(time.monotonic() - t_start, 3)
    manifest = _engine_manifest(plan, engine, conversion, probe, gpu_list, records, timings, warnings)
    write_json_atomic(plan.manifest_path, manifest)
    return BuildResult(plan.output, manifest, warnings)


def _engine_manifest(plan: BuildPlan, engine: Any, conversion: dict[str, Any], probe: dict[str, Any],
                     gpu_list: Any, records: list[StepRecord], timings: dict[str, float],
                     warnings: list[str]) -> dict[str, Any]:
    """An engine bundle's manifest: the dtype and limits asked and built, the engine, the checkpoint,
    TensorRT-LLM, the GPUs, the commands run and their timings."""
    engine_cfg = plan.engine_dir / "config.json"
    return {
        **_manifest_head(plan),
        "dtype": {"requested": plan.dtype_requested, "resolved": plan.dtype, "engine": engine.dtype},
        "limits": {
            "requested": plan.limits.to_dict(),
            "origin": {k: plan.origin.get(k, "default") for k in plan.limits.to_dict()},
            "expected_after_build": plan.limits.as_built(plan.max_draft_len),
            "engine": {"max_batch_size": engine.max_batch_size, "max_input_len": engine.max_input_len,
                       "max_seq_len": engine.max_seq_len, "max_num_tokens": engine.max_num_tokens,
                       "max_beam_width": engine.max_beam_width, "max_draft_len": engine.max_draft_len},
        },
        "engine": {"dir": ENGINE_DIR, "config_sha256": hashlib.sha256(engine_cfg.read_bytes()).hexdigest(),
                   "version": engine.version, "architecture": engine.architecture,
                   "speculative_decoding_mode": engine.speculative_decoding_mode_name,
                   "files": sorted(p.name for p in plan.engine_dir.iterdir())},
        "checkpoint": {"dir": CHECKPOINT_DIR if plan.keep_checkpoint else None, "kept": plan.keep_checkpoint,
                       "reused": conversion["reused"], "inputs_sha256": conversion["inputs_sha256"]},
        "tensorrt_llm": {"version": str(probe["version"]), "module": probe.get("module")},
        "gpu": _gpu_summary(gpu_list),
        "commands": [asdict(r) for r in records],
        "timings": timings,
        "files": {"deployment_config": CONFIG_FILE, "extra_llm_api_options": EXTRA_OPTIONS_FILE,
                  "logs": LOGS_DIR},
        "notes": list(plan.notes),
        "warnings": warnings,
    }


def _check_target(plan: BuildPlan, installed: str) -> None:
    """A TensorRT engine runs only on the release that built it: a named target must be the installed one."""
    if plan.release is None or release_key(plan.release) == release_key(installed):
        return
    raise BuildError(f"the bundle is for TensorRT-LLM {plan.release} but {installed} is installed, and an engine "
                     "runs only on the release that built it", where=plan.origin.get("release", "--trtllm-version"),
                     hint=f"build where {plan.release} is installed, or target the installed release "
                          f"(--trtllm-version {installed})")


def _make_output(plan: BuildPlan) -> None:
    try:
        plan.output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create {plan.output}: {exc.strerror or exc}", where="--output",
                         hint="choose a folder under one you can write to") from None


def _manifest_head(plan: BuildPlan) -> dict[str, Any]:
    """What every bundle's manifest starts with: its format, when and by which trtlade it was written, and
    the plan's summary (backend, model, dtype, drafting, parallelism)."""
    return {"format": MANIFEST_FORMAT, "created": _now(), "trtlade_version": _trtlade_version(), **plan.summary()}


def _validate_deployment(data: dict[str, Any]) -> None:
    """The written trtlade.yml must load with the schema (a bug otherwise, not a user error)."""
    from trtlade.config.schema import TrtladeConfig

    TrtladeConfig.model_validate(data)


def _check_serve_options(text: str, plan: BuildPlan) -> None:
    """The trtllm-serve file about to be written, checked as TensorRT-LLM will read it at start (the release's
    schema and validators): a value the config passed through that TensorRT-LLM refuses stops the build here."""
    from trtlade.config.loader import parse_yaml
    from trtlade.trtllm.llm_args_check import check_llm_args

    assert plan.release is not None
    errors = [d for d in check_llm_args(parse_yaml(text, TRTLLM_SERVE_FILE), plan.release) if d.severity == "error"]
    if errors:
        first = errors[0]
        raise BuildError(f"TensorRT-LLM {plan.release} would refuse the {TRTLLM_SERVE_FILE} this config makes: "
                         f"{first.path}: {first.message}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1
                                                             else ""),
                         where=f"{TRTLLM_SERVE_FILE}:{first.path}", hint=first.hint or "fix the config key that sets "
                         "it (the serve or build section) and run the build again")


def _run_pytorch(plan: BuildPlan, reporter: Reporter, state: str, gpu_list: Any, t_start: float) -> BuildResult:
    """TensorRT-LLM's PyTorch backend: the trtllm-serve config, trtlade.yml, the manifest (no engine)."""
    from trtlade.builder.pytorch import model_checksums, render_serve_options, serve_command, serve_options

    reporter.start("bundle", f"writing a PyTorch-backend bundle for {plan.model.path.name}")
    _make_output(plan)
    _start_fresh(plan, state)
    serve = plan.config_data.get("serve") if isinstance(plan.config_data.get("serve"), dict) else {}
    options = serve_options(speculation=plan.speculation or {}, limits=plan.limits.to_dict(), tp_size=plan.tp_size,
                            pp_size=plan.pp_size, dtype=plan.dtype_requested, block_reuse=_block_reuse(plan),
                            free_gpu_memory_fraction=serve.get("kv_cache_free_gpu_memory_fraction"),
                            release=plan.release or NEWEST_READ)
    assert plan.release is not None
    command = serve_command(plan.model.path, plan.output, *plan.serve_address, release=plan.release)
    text = render_serve_options(options, plan.release, command)
    _check_serve_options(text, plan)
    write_text_atomic(plan.trtllm_serve_file, text)
    deploy = deployment_config(plan)
    _validate_deployment(deploy)
    write_text_atomic(plan.config_file, render_deployment_config(plan, deploy))
    total = time.monotonic() - t_start
    manifest = {
        **_manifest_head(plan),
        "limits": {"requested": plan.limits.to_dict(), "origin": {k: plan.origin.get(k, "default")
                                                                for k in plan.limits.to_dict()}},
        "engine": None,
        "checkpoint": None,
        "tensorrt_llm": {"version": plan.release, "origin": plan.origin.get("release"), "backend": "pytorch"},
        "checksums": {"model": model_checksums(plan.model.path),
                      TRTLLM_SERVE_FILE: hashlib.sha256(plan.trtllm_serve_file.read_bytes()).hexdigest(),
                      CONFIG_FILE: hashlib.sha256(plan.config_file.read_bytes()).hexdigest()},
        "serve_command": command,
        "gpu": _gpu_summary(gpu_list),
        "commands": [],
        "timings": {"total_s": round(total, 3)},
        "files": {"deployment_config": CONFIG_FILE, "trtllm_serve_config": TRTLLM_SERVE_FILE},
        "notes": list(plan.notes),
        "warnings": [],
    }
    write_json_atomic(plan.manifest_path, manifest)
    reporter.finish("bundle", total, str(plan.output))
    return BuildResult(plan.output, manifest, [])


def _run_reference(plan: BuildPlan, reporter: Reporter, state: str, gpu_list: Any, t_start: float) -> BuildResult:
    """The reference engine's bundle: the HF folder (by path), trtlade.yml, the manifest."""
    reporter.start("bundle", f"writing a reference-engine bundle for {plan.model.path.name}")
    _make_output(plan)
    _start_fresh(plan, state)
    deploy = deployment_config(plan)
    _validate_deployment(deploy)
    write_text_atomic(plan.config_file, render_deployment_config(plan, deploy))
    total = time.monotonic() - t_start
    manifest = {
        **_manifest_head(plan),
        "embedded_model": plan.embedded,
        "limits": {"requested": {k: plan.limits.to_dict()[k] for k in plan.explicit_limits},
                   "origin": {k: plan.origin.get(k, "default") for k in plan.explicit_limits}},
        "engine": None,
        "checkpoint": None,
        "tensorrt_llm": None,
        "gpu": _gpu_summary(gpu_list),
        "commands": [],
        "timings": {"total_s": round(total, 3)},
        "files": {"deployment_config": CONFIG_FILE},
        "notes": list(plan.notes),
        "warnings": [],
    }
    write_json_atomic(plan.manifest_path, manifest)
    reporter.finish("bundle", total, str(plan.output))
    return BuildResult(plan.output, manifest, [])

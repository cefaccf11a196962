"""What every export shares: the bundle read once (config, engine, tokenizer), and outputs written
whole or not at all."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from trtlade.bundle import Bundle, BundleError, open_bundle
from trtlade.config.loader import ConfigError, ConfigLoadError, load_config
from trtlade.config.schema import TrtladeConfig
from trtlade.errors import TrtladeError
from trtlade.files import write_text_atomic
from trtlade.trtllm.engine_config import (EngineConfig, EngineConfigError, check_engine, read_engine_config,
                                         sliding_window_finding)

__all__ = ["CONTAINER_FLAGS", "CONTAINER_NOTE", "ExportError", "ExportSource", "read_source", "write_file",
           "write_tree"]

#: How Triton's and grps's TensorRT-LLM containers are started: shared memory for the Python models' tensors and
#: the ranks' MPI traffic (a container runtime gives /dev/shm 64 MiB), pinned memory without a lock limit, a larger
#: stack. The flags of NVIDIA's guides to the Triton TensorRT-LLM container (triton-inference-server's "Deploying
#: an LLM with Triton and TRT-LLM", tensorrtllm_backend's README "Launch Triton TensorRT-LLM container") and of
#: grps_trtllm's README, which takes them from there ("docker run ... grps_trtllm_dev").
CONTAINER_FLAGS = "--shm-size=2g --ulimit memlock=-1 --ulimit stack=67108864"
#: the same as one sentence, for a written file's header and the export's message
CONTAINER_NOTE = (f"start its container with `docker run {CONTAINER_FLAGS}` (the flags of NVIDIA's Triton TensorRT-LLM "
                  "guides and grps_trtllm's README; a container's own /dev/shm is 64 MiB)")


class ExportError(TrtladeError):
    """An export refused: message, hint, where (the bundle, the output or the flag)."""


@dataclass(frozen=True)
class ExportSource:
    """A TensorRT-LLM bundle as an export needs it. ``root``: the bundle folder as the target sees it
    (``--bundle-path``; default: this machine's absolute path)."""

    bundle: Bundle
    config: TrtladeConfig
    engine: EngineConfig
    root: Path
    tokenizer: Path
    #: The Hugging Face folder on this machine (config.json, tokenizer files, generation_config.json), read
    #: for what an export derives from the model; None when the config's folder is not here.
    model_dir: Optional[Path] = None

    @property
    def engine_dir(self) -> Path:
        return self.root / self.bundle.engine_dir.name


def read_source(path: Path, *, root: Optional[Path] = None, tokenizer: Optional[Path] = None,
                model_dir_here: Optional[Path] = None) -> ExportSource:
    """Open ``path`` as a TensorRT-LLM bundle with its config and engine config, or refuse saying why.
    ``model_dir_here``: the model's Hugging Face folder on this machine, when the config's is elsewhere."""
    try:
        bundle = open_bundle(path, need_engine=True)
    except BundleError as exc:
        raise ExportError(exc.message, exc.hint, where=str(path)) from None
    try:
        loaded = load_config(bundle.config_file)
    except (ConfigError, ConfigLoadError, OSError) as exc:
        raise _invalid_config(bundle, exc, path) from None
    try:
        engine = read_engine_config(bundle.engine_dir)
    except EngineConfigError as exc:
        raise ExportError(f"cannot read the bundle's engine: {exc}", "rebuild the bundle", where=str(path)) from None
    _refuse_variable_windows(engine)
    _refuse_engine_mismatch(bundle, loaded.config, engine, path)
    model = loaded.config.model
    tok = tokenizer or (loaded.resolve(model.tokenizer) if model.tokenizer else None) or \
        (loaded.resolve(model.path) if model.path else None)
    if tok is None:
        raise ExportError("the bundle's config names no tokenizer folder (model.tokenizer or model.path)",
                          "pass --tokenizer PATH: the Hugging Face folder the engine was built from, as the "
                          "server will see it", where=str(path))
    local = [loaded.resolve(p) for p in (model.tokenizer, model.path) if p]
    candidates = (model_dir_here, tokenizer, *local)
    model_dir = next((Path(p) for p in candidates if p and (Path(p) / "config.json").is_file()), None)
    return ExportSource(bundle, loaded.config, engine, (root or path.resolve()), Path(tok), model_dir)


def _refuse_engine_mismatch(bundle: Bundle, config: TrtladeConfig, engine: EngineConfig, path: Path) -> None:
    """Every export carries the bundle's (W,N,G) to a server that hands it to the engine unchecked (Triton's backend,
    grps, the pod's `trtlade serve`): a spec larger than the engine's fails there at start, a smaller one is not
    caught, so it is refused here, as `validate-config` refuses it (:func:`check_engine`: the version, the
    decoding mode and max_draft_len against the spec, what in-flight batching needs; not the config's build.*,
    which only `trtlade serve` reads and the pod's init gate checks)."""
    errors = [d for d in check_engine(config.lookahead.spec, engine, None, source=str(bundle.config_file))
              if d.severity == "error"]  # the spec against the engine only: the config's build.* is trtlade serve's
    if errors:
        first = errors[0]
        raise ExportError(f"the bundle's config does not fit its engine: {first.path}: {first.message}"
                          + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                          first.hint or f"check it with `trtlade validate-config {bundle.root}`", where=str(path))


def _invalid_config(bundle: Any, exc: Exception, path: Path) -> ExportError:
    """The bundle's config refused: its first finding, located, and one hint (the finding's, else validate-config's);
    the diagnostics' own text carried their hints into the message, so the error read two ``hint:`` lines."""
    check = f"check it with `trtlade validate-config {bundle.root}`"
    found = getattr(exc, "diagnostics", None)
    if not found:
        return ExportError(f"{bundle.config_file} is not a valid trtlade config: {exc}", check, where=str(path))
    first = found[0]
    more = f" (and {len(found) - 1} more: {check})" if len(found) > 1 else ""
    key = f"{first.path}: " if first.path else ""
    return ExportError(f"the bundle's config is not valid: {first.location or bundle.config_file}: {key}{first.message}"
                       f"{more}", first.hint or check, where=str(path))


def _refuse_variable_windows(engine: EngineConfig) -> None:
    """Every export refuses what ``trtlade build``, validate-config and serve refuse: a Lookahead engine
    of a sliding-window model past its smallest window (:mod:`trtlade.trtllm.windows`)."""
    finding = sliding_window_finding(engine)
    if finding is not None and finding[0] == "error":
        raise ExportError(finding[2], finding[3], where=f"{engine.config_path}:build_config.max_seq_len")


def _refuse_existing(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise ExportError(f"{out} exists", "pass --force to replace it, or choose another --out", where="--out")


def write_file(out: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``out`` through a temporary file (never half-written); refuse to replace an
    existing file without ``force``."""
    _refuse_existing(out, force)
    if out.is_dir():
        raise ExportError(f"{out} is a directory", "give a file path to --out", where="--out")
    if out.exists() and not _WRITTEN.search(_head(out)):  # --force: an earlier export's file, never one of yours
        raise ExportError(f"{out} is a file no `trtlade export` wrote: --force replaces only an earlier export's",
                          "give --out a new path, or move that file away and run again", where="--out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, text)
    except OSError as exc:
        raise _unwritable(out, exc) from None


def _unwritable(out: Path, exc: OSError) -> ExportError:
    return ExportError(f"cannot write {out}: {exc.strerror or exc}", "choose a path you can write to (its folder is "
                       "created if missing)", where="--out")


#: the file every folder an export writes holds: ``--force`` replaces only a folder that has it
EXPORT_MARK = ".trtlade-export"


def _replaceable(out: Path) -> None:
    """What ``--force`` may replace: a folder of files an earlier ``trtlade export`` wrote and nothing else (each says
    so in its first lines; :data:`EXPORT_MARK` marks the folder), never the folder a command runs in or one above it, a
    bundle, a file, or an export's folder the user added files to (a Triton repository's copied ``model.py``): the
    mark alone let ``--force`` delete those (ExportError). ``-o <bundle> --force`` deleted the bundle, ``-o .. --force``
    everything beside it."""
    here = Path.cwd().resolve()
    if out == here or out in here.parents:
        raise ExportError(f"{out} is the folder this command runs in, or one above it: --force would delete it",
                          "give --out a new folder, e.g. --out repo", where="--out")
    if out.is_dir() and not _foreign_files(out):
        return
    if not out.is_dir():
        what = "a file"
    elif (out / "trtlade-manifest.json").exists():
        what = "a bundle"
    else:
        foreign = _foreign_files(out)
        what = (f"a folder holding files no `trtlade export` wrote ({', '.join(foreign[:3])}"
                + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "") + ")")
    raise ExportError(f"{out} is {what}: --force replaces only a folder an earlier export wrote", "give --out a new "
                      "folder, or move those files out (a Triton repository's copied model.py files included) and "
                      "run again", where="--out")


#: the header every file an export writes carries in its first lines (the guard's docstring with two backticks)
_WRITTEN = re.compile(rb"written by `+trtlade export")


def _head(path: Path) -> bytes:
    """A file's first KiB, where an export's header is (b"?" where it cannot be read)."""
    try:
        return path.read_bytes()[:1024]
    except OSError:
        return b"?"


def _foreign_files(out: Path) -> list[str]:
    """The files of ``out`` an export did not write: neither empty (a version folder's ``.keep``), nor headed
    ``written by `trtlade export``` (every file an export writes says so in its first lines, the guard's model.py
    too), nor the mark; an export written before the mark existed is recognised by its files."""
    foreign = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() or p.is_symlink()):
        head = b"" if path.is_symlink() else _head(path)
        if path.is_symlink() or (head and not _WRITTEN.search(head) and path.name != EXPORT_MARK):
            foreign.append(str(path.relative_to(out)))
    return foreign


def write_tree(out: Path, files: dict[str, str], *, force: bool) -> None:
    """Write ``files`` (relative path -> text) and :data:`EXPORT_MARK` as the folder ``out``, built aside and moved
    into place; refuse to replace an existing ``out`` without ``force``, and with it anything but an earlier export's
    folder (:func:`_replaceable`)."""
    _refuse_existing(out, force)
    out = out.resolve()
    if out.exists():
        _replaceable(out)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.partial")
    files = {**files, EXPORT_MARK: "written by `trtlade export`: `--force` may replace this folder\n"}
    try:
        for rel, text in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except OSError as exc:
        raise _unwritable(out, exc) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


#: the serve settings the Triton and grps exports carry into their servers' own (the executor's KV cache and queue)
CARRIED_SERVE = frozenset({"engine", "kv_cache_free_gpu_memory_fraction", "kv_cache_enable_block_reuse", "max_queue"})


def serve_not_carried(config: Any, server: str) -> list[str]:
    """The ``serve`` settings the bundle's config gives that ``server`` (Triton, grps) has no place for: said, not
    dropped without a word; an API key above all, since those servers check none."""
    given = sorted(set(config.serve.model_fields_set) - CARRIED_SERVE)
    if not given:
        return []
    key = ("; it checks no API key: put an authenticating gateway in front" if {"api_key_env", "api_keys_file"} &
           set(given) else "")
    return [f"{', '.join(f'serve.{k}' for k in given)} apply to `trtlade serve` only: {server} has no such setting "
            f"(its own ports and limits apply){key}"]

"""The bundle ``trtlade build`` writes: its layout, and how build, serve, validate-config and export
read it. The one place that names a bundle's files.

Layout::

    <bundle>/
      engine/                       config.json + rank{r}.engine   (TensorRT-LLM backend)
      checkpoint/                   the converted checkpoint (kept unless --no-keep-checkpoint)
      logs/                         convert.log, trtllm-build.log
      extra_llm_api_options.yml     speculative_config, kv_cache_config for `trtllm-serve` (1.x)
      trtllm-serve.yml              PyTorch-backend bundles (no engine): the trtllm-serve --config file
      trtlade.yml                   the deployment config (serve / validate-config / bench / export take it)
      trtlade-manifest.json         written LAST: its presence marks a complete bundle

Models are found by name under ``$TRTLADE_MODELS_DIR`` (or ``model.models_dir``).

    >>> b = Bundle(Path("/bundles/qwen3-8b"))
    >>> b.engine_dir, b.config_file.name
    (PosixPath('/bundles/qwen3-8b/engine'), 'trtlade.yml')
    >>> open_bundle(Path("/no/such/bundle"))
    Traceback (most recent call last):
    ...
    trtlade.bundle.BundleError: /no/such/bundle: no such folder
    hint: give the folder `trtlade build` wrote (it holds trtlade-manifest.json)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from trtlade.errors import TrtladeError

__all__ = [
    "ENGINE_DIR",
    "CHECKPOINT_DIR",
    "LOGS_DIR",
    "MANIFEST_FILE",
    "CONFIG_FILE",
    "EXTRA_OPTIONS_FILE",
    "TRTLLM_SERVE_FILE",
    "MODELS_DIR_ENV",
    "Bundle",
    "BundleError",
    "is_bundle",
    "open_bundle",
]

ENGINE_DIR = "engine"
CHECKPOINT_DIR = "checkpoint"
LOGS_DIR = "logs"
MANIFEST_FILE = "trtlade-manifest.json"
CONFIG_FILE = "trtlade.yml"
EXTRA_OPTIONS_FILE = "extra_llm_api_options.yml"
TRTLLM_SERVE_FILE = "trtllm-serve.yml"
#: Where models and bundles are looked up by name.
MODELS_DIR_ENV = "TRTLADE_MODELS_DIR"


class BundleError(TrtladeError):
    """A path that is not a (complete) bundle, or a bundle that cannot serve the purpose asked."""


@dataclass(frozen=True)
class Bundle:
    """A bundle folder (its files named by this module's constants)."""

    root: Path

    @property
    def engine_dir(self) -> Path:
        return self.root / ENGINE_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / CHECKPOINT_DIR

    @property
    def logs_dir(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def manifest_file(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def extra_options_file(self) -> Path:
        return self.root / EXTRA_OPTIONS_FILE

    @property
    def trtllm_serve_file(self) -> Path:
        return self.root / TRTLLM_SERVE_FILE

    @property
    def is_pytorch(self) -> bool:
        """A bundle for TensorRT-LLM's PyTorch backend (no engine; ``trtllm-serve.yml``)."""
        return self.trtllm_serve_file.is_file() and not self.has_engine

    @property
    def has_engine(self) -> bool:
        """Whether it holds a TensorRT-LLM engine (``engine/config.json``)."""
        return (self.engine_dir / "config.json").is_file()

    def manifest(self) -> dict[str, Any]:
        """The manifest as data, or a BundleError naming the file."""
        try:
            data = json.loads(self.manifest_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BundleError(f"cannot read the manifest: {exc}", "rebuild the bundle with `trtlade build`",
                              where=str(self.manifest_file)) from None
        if not isinstance(data, dict):
            raise BundleError("the manifest is not a JSON object", "rebuild the bundle", where=str(self.manifest_file))
        return data


    def serve_options(self) -> dict[str, Any]:
        """``trtllm-serve.yml`` as data (a PyTorch-backend bundle's ``LLM(...)`` options), or a BundleError at the
        line a hand edit broke (a tab, a byte that is not UTF-8) or naming the file when it is not a mapping."""
        from trtlade.yaml_doc import ConfigLoadError, read_yaml

        file = self.trtllm_serve_file
        try:
            data = read_yaml(file).data
        except ConfigLoadError as exc:
            d = exc.diagnostics[0]
            raise BundleError(d.message, d.hint or "fix the file (every key is an LLM(...) argument), or rebuild the "
                              "bundle with `trtlade build`", where=f"{file}:{d.line}:{d.column}") from None
        if not isinstance(data, dict):
            raise BundleError(f"{file} is not a mapping of LLM(...) arguments", "rebuild the bundle with "
                              "`trtlade build`, or restore the file", where=str(file))
        return data


def is_bundle(path: Path) -> bool:
    """A complete bundle: a folder with the manifest and the config."""
    return path.is_dir() and (path / MANIFEST_FILE).is_file() and (path / CONFIG_FILE).is_file()


def open_bundle(path: Path, *, need_engine: bool = False) -> Bundle:
    """The bundle at ``path``, or a BundleError saying exactly why it is not one. ``need_engine``:
    it must hold a TensorRT-LLM engine (exports to TensorRT-LLM stacks)."""
    hint = f"give the folder `trtlade build` wrote (it holds {MANIFEST_FILE})"
    if not path.exists():
        raise BundleError(f"{path}: no such folder", hint)
    if not path.is_dir():
        raise BundleError(f"{path} is a file, not a bundle folder", hint)
    if not (path / MANIFEST_FILE).is_file():
        partial = " (an interrupted build leaves no manifest)" if (path / ENGINE_DIR).exists() else ""
        raise BundleError(f"{path} has no {MANIFEST_FILE}: not a complete trtlade bundle{partial}", hint)
    if not (path / CONFIG_FILE).is_file():
        raise BundleError(f"{path} has no {CONFIG_FILE}", "rebuild the bundle with `trtlade build`")
    bundle = Bundle(path)
    backend = bundle.manifest().get("backend")  # a manifest that does not read is refused here, not passed
    if need_engine and not bundle.has_engine:
        if backend == "reference":
            raise BundleError(f"{path} holds no TensorRT-LLM engine ({ENGINE_DIR}/config.json): it was built for "
                              "the reference backend", "build it with `trtlade build --backend trtllm` on a GPU "
                              "machine")
        raise BundleError(f"{path} has no {ENGINE_DIR}/config.json, though its manifest says it was built for "
                          f"{backend or 'TensorRT-LLM'}: the engine folder is missing", "copy the bundle with its "
                          f"{ENGINE_DIR}/ folder (or build it again)")
    return bundle


def options_disagreements(config: Any, options: Mapping[str, Any]) -> list[tuple[str, Any, str, Any]]:
    """Where a bundle's trtlade.yml (``config``, a :class:`~trtlade.config.schema.TrtladeConfig`) says another value
    than its trtllm-serve.yml (``options``), which TensorRT-LLM runs: ``(config key, its value, file key, the file's
    value)`` each. Only the keys :func:`serve_options` writes through unchanged that the file holds (one it lacks
    takes TensorRT-LLM's default); the KV-cache keys where the serve section sets them.

    >>> from trtlade.config.schema import TrtladeConfig
    >>> cfg = TrtladeConfig.model_validate({"build": {"backend": "pytorch", "max_batch_size": 4},
    ...                                     "speculation": {"decoding_type": "NGram", "max_draft_len": 2}})
    >>> options_disagreements(cfg, {"max_batch_size": 8, "speculative_config": {"decoding_type": "NGram",
    ...                                                                         "max_draft_len": 2}})
    [('build.max_batch_size', 4, 'max_batch_size', 8)]
    """
    b, serve = config.build, config.serve
    pairs = [("build.max_batch_size", b.max_batch_size, "max_batch_size"),
             ("build.max_seq_len", b.max_seq_len, "max_seq_len"),
             ("build.max_num_tokens", b.max_num_tokens, "max_num_tokens"),
             ("build.tp_size", b.tp_size, "tensor_parallel_size"),
             ("build.pp_size", b.pp_size, "pipeline_parallel_size"),
             ("model.dtype", config.model.dtype, "dtype")]
    kv = options.get("kv_cache_config") if isinstance(options.get("kv_cache_config"), Mapping) else {}
    for key, field in (("kv_cache_free_gpu_memory_fraction", "free_gpu_memory_fraction"),
                       ("kv_cache_enable_block_reuse", "enable_block_reuse")):
        if key in serve.model_fields_set:
            pairs.append((f"serve.{key}", getattr(serve, key), f"kv_cache_config.{field}"))
    out = [(key, ours, theirs_key, _dotted(options, theirs_key, kv)) for key, ours, theirs_key in pairs
           if ours is not None and _dotted(options, theirs_key, kv) not in (None, ours)]
    spec = dict(config.speculation or {})
    theirs = options.get("speculative_config") if isinstance(options.get("speculative_config"), Mapping) else {}
    out += [(f"speculation.{k}", spec.get(k), f"speculative_config.{k}", theirs.get(k))
            for k in sorted(set(spec) | set(theirs), key=str) if spec.get(k) != theirs.get(k)]
    return out


def disagreement_text(item: tuple[str, Any, str, Any]) -> str:
    """``speculation.max_draft_len 2 (trtllm-serve.yml: speculative_config.max_draft_len 4)``"""
    key, ours, theirs_key, theirs = item
    return f"{key} {ours} ({TRTLLM_SERVE_FILE}: {theirs_key} {theirs})"


def _dotted(options: Mapping[str, Any], key: str, kv: Mapping[str, Any]) -> Any:
    return kv.get(key.split(".", 1)[1]) if key.startswith("kv_cache_config.") else options.get(key)

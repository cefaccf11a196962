"""Exports of a PyTorch-backend bundle (``trtlade build --speculation``: no engine; from TensorRT-LLM 1.3 on the only
kind of deployment there is).

* ``export triton`` writes Triton's ``llmapi`` model (TensorRT-LLM ``triton_backend/all_models/llmapi/``)::

      <out>/tensorrt_llm/config.pbtxt     python backend; the stock inputs and outputs (triton_stock.LLMAPI_*)
      <out>/tensorrt_llm/1/model.yaml     model (the checkpoint as Triton sees it) + the bundle's trtllm-serve
                                          options (the same speculative_config) + triton_config

  The stock ``model.py`` and ``helpers.py`` of the release come next to model.yaml (the user copies them, as for
  the engine repository). model.yaml is checked before anything is written the way the stock model.py loads it
  (:func:`trtlade.config.trtllm_serve.check_llmapi_model_yaml`), and ``trtlade validate-config
  <out>/tensorrt_llm/1/model.yaml`` is the same gate on the Triton machine.
* ``export k8s`` runs ``trtllm-serve <checkpoint> --config trtllm-serve.yml`` (:func:`trtlade.export.k8s.
  pytorch_manifests`).
* ``export grps`` is refused: grps_trtllm drives TensorRT-LLM's C++ executor on a TensorRT engine
  (NetEase-Media/grps_trtllm@dea3898, ``src/trtllm_model_instance.cc``:
  ``executor::Executor(decoder_model_path, ModelType::kDECODER_ONLY, executor_config)``); a PyTorch-backend
  bundle has no engine, and TensorRT-LLM 1.3 has neither engines nor that executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from trtlade.bundle import Bundle, BundleError, disagreement_text, open_bundle, options_disagreements
from trtlade.config.loader import ConfigError, ConfigLoadError, load_config, parse_yaml
from trtlade.config.schema import TrtladeConfig
from trtlade.export import triton_stock as stock
from trtlade.export.common import CONTAINER_NOTE, ExportError

__all__ = ["PytorchSource", "read_pytorch_source", "is_pytorch_bundle", "model_yaml", "llmapi_repository",
           "grps_refusal", "TRITON_CONFIG"]

#: triton_config trtlade writes: one response per step (streaming), Triton-level batching off as in the stock
#: model.yaml (the LLM batches requests in flight itself).
TRITON_CONFIG = {"max_batch_size": 0, "decoupled": True}


@dataclass(frozen=True)
class PytorchSource:
    """A PyTorch-backend bundle as an export needs it. ``model_path``: the checkpoint as the target sees it."""

    bundle: Bundle
    config: TrtladeConfig
    options: dict[str, Any]
    release: str
    model_path: str
    tokenizer: Optional[str] = None

    @property
    def world_size(self) -> int:
        return int(self.options.get("tensor_parallel_size", 1)) * int(self.options.get("pipeline_parallel_size", 1))


def is_pytorch_bundle(path: Path) -> bool:
    return path.is_dir() and Bundle(path).is_pytorch


def grps_refusal(path: Path) -> ExportError:
    return ExportError(
        f"{path} is a bundle for TensorRT-LLM's PyTorch backend: grps_trtllm cannot serve it. grps_trtllm drives "
        "TensorRT-LLM's C++ executor on a TensorRT engine (grps_trtllm src/trtllm_model_instance.cc: "
        "executor::Executor(decoder_model_path, ...)); this bundle has no engine, and TensorRT-LLM 1.3 and later "
        "have neither engines nor that executor",
        "export it with `trtlade export triton` (Triton's llmapi model) or `trtlade export k8s` (trtllm-serve), or "
        "serve it with `trtlade serve --model BUNDLE`; for grps, build a Lookahead engine for a release below 1.3",
        where=str(path))


def read_pytorch_source(path: Path, *, model_path: Optional[str] = None,
                        tokenizer: Optional[str] = None) -> PytorchSource:
    """Open ``path`` as a PyTorch-backend bundle with its trtllm-serve options and release, or refuse saying why."""
    try:
        bundle = open_bundle(path)
    except BundleError as exc:
        raise ExportError(exc.message, exc.hint, where=str(path)) from None
    try:
        options = bundle.serve_options()
    except BundleError as exc:
        raise ExportError(exc.message, exc.hint, where=exc.where) from None
    try:
        loaded = load_config(bundle.config_file)
        manifest = bundle.manifest()
    except (ConfigError, ConfigLoadError, OSError, BundleError) as exc:
        raise ExportError(f"cannot read the bundle {path}: {exc}", "rebuild it with `trtlade build --speculation ...`",
                          where=str(path)) from None
    differ = options_disagreements(loaded.config, options)
    if differ:  # the export carries trtllm-serve.yml: an edit of trtlade.yml alone would be dropped, as serve refuses
        raise ExportError("the bundle's trtlade.yml and trtllm-serve.yml disagree, and the export would carry "
                          "trtllm-serve.yml's: " + "; ".join(disagreement_text(d) for d in differ),
                          f"make {bundle.trtllm_serve_file} say the same (check the bundle with "
                          f"`trtlade validate-config {path}`), or build a new bundle from the edited config",
                          where=str(path))
    release = str((manifest.get("tensorrt_llm") or {}).get("version") or loaded.config.build.trtllm_version or "")
    if not release:
        raise ExportError(f"{bundle.manifest_file} names no TensorRT-LLM release", "rebuild the bundle with "
                          "`trtlade build --speculation ... --trtllm-version X`", where=str(path))
    if model_path is not None and not model_path.strip():
        raise ExportError("--model-path is empty", "give the Hugging Face folder as the server will see it, or leave "
                          "the flag out to use the bundle's model.path", where="--model-path")
    model = model_path or (str(loaded.resolve(loaded.config.model.path)) if loaded.config.model.path else None)
    if model is None:
        raise ExportError("the bundle's config names no checkpoint (model.path)", "pass --model-path: the Hugging "
                          "Face folder as the server will see it", where=str(path))
    return PytorchSource(bundle, loaded.config, options, release, model, tokenizer)


def model_yaml(src: PytorchSource) -> str:
    """The llmapi model's model.yaml: the checkpoint, the bundle's options as they are, ``triton_config``."""
    data: dict[str, Any] = {"model": src.model_path}
    if src.tokenizer:
        data["tokenizer"] = src.tokenizer
    data.update(src.options)
    data["triton_config"] = dict(TRITON_CONFIG)
    header = (f"# written by `trtlade export triton` from the bundle {src.bundle.root} (TensorRT-LLM {src.release}, "
              "PyTorch backend).\n# Every key but triton_config is an LLM(...) argument, as in the bundle's "
              "trtllm-serve.yml. Check it on the\n# Triton machine before starting: trtlade validate-config "
              f"tensorrt_llm/1/model.yaml\n# Triton: {CONTAINER_NOTE}\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def _config_pbtxt() -> Any:
    from trtlade.export.triton import _pb, _tensor

    pb = _pb()
    c = pb.ModelConfig(name="tensorrt_llm", backend="python")
    # also here, not only in model.yaml's triton_config: the stock model.py applies that in auto_complete_config,
    # which Triton skips under --disable-auto-complete-config, a flag NVIDIA/TensorRT-LLM's
    # triton_backend/scripts/launch_triton_server.py puts on every rank's tritonserver command (@0b06796b); and
    # triton-inference-server/python_backend's src/resources/triton_python_backend_utils.py
    # (ModelConfig.set_model_transaction_policy, @28aaeb7b) raises only on a different `decoupled`: both agree
    c.model_transaction_policy.decoupled = TRITON_CONFIG["decoupled"]
    c.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    c.input.extend(_tensor(pb, pb.ModelInput, t.name, t.dtype, list(t.dims), optional=t.optional)
                   for t in stock.LLMAPI_INPUTS)
    c.output.extend(_tensor(pb, pb.ModelOutput, t.name, t.dtype, list(t.dims)) for t in stock.LLMAPI_OUTPUTS)
    return c


def llmapi_repository(src: PytorchSource) -> dict[str, str]:
    """The repository's files (relative path -> text); config.pbtxt parsed back, model.yaml checked as the stock
    model.py loads it, before anything is written."""
    from google.protobuf import text_format

    from trtlade.config.trtllm_serve import check_llmapi_model_yaml
    from trtlade.export.triton import parse_config

    config = _config_pbtxt()
    text = (f"# written by `trtlade export triton` from the bundle {src.bundle.root}; max_batch_size and the "
            "transaction policy are also 1/model.yaml's (triton_config), which the stock model.py applies unless "
            "Triton runs with --disable-auto-complete-config\n" + text_format.MessageToString(config))
    if parse_config(text) != config:
        raise ExportError("tensorrt_llm/config.pbtxt does not read back as written", "report this")
    yml = model_yaml(src)
    errors = [d for d in check_llmapi_model_yaml(parse_yaml(yml, "tensorrt_llm/1/model.yaml"), src.release)
              if d.severity == "error"]
    if errors:
        raise ExportError("the model.yaml would not load: " + "; ".join(d.format_text() for d in errors[:3]),
                          f"check the bundle with `trtlade validate-config {src.bundle.trtllm_serve_file} "
                          f"--trtllm-version {src.release}`", where=str(src.bundle.root))
    return {"tensorrt_llm/config.pbtxt": text, "tensorrt_llm/1/model.yaml": yml}


def model_py_source(release: str) -> str:
    """Where the stock model.py and helpers.py of ``release`` live (what the user copies next to model.yaml)."""
    return f"NVIDIA/TensorRT-LLM v{release}: {stock.LLMAPI_MODEL_PY}"

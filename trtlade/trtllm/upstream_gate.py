"""Where TensorRT-LLM is installed, its own classes check the file too, and any disagreement is a defect.

On the GPU host, or in the TensorRT-LLM container the k8s export's init container runs in,
``validate-config`` builds upstream's ``TorchLlmArgs`` (``TrtLlmArgs`` where the file runs on the TensorRT-engine
backend: :func:`~trtlade.trtllm.llm_args_check.root_class`) from the file the way ``trtllm-serve`` does and its own
CI does (``tests/unittest/llmapi/test_config_database.py``: ``TorchLlmArgs(**update_llm_args_with_extra_dict(
TorchLlmArgs(model=..., skip_tokenizer_init=True).model_dump(), config))``), and compares that verdict with
trtlade's. The same verdict is an info line; a different one is an error naming both messages, so a stale
schema table fails the gate instead of passing a file the server refuses (or refusing one it takes).

``tensorrt_llm`` is imported only here, only when asked, and only if importable: without it the check says so.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

from trtlade.diagnostics import Diagnostic
from trtlade.trtllm.llm_args_check import uses_engine_backend
from trtlade.yaml_doc import YamlDocument

__all__ = ["UpstreamVerdict", "upstream_verdict", "args_class", "compare"]

_PLACEHOLDER_MODEL = "trtlade-validate-config-placeholder"


@dataclass(frozen=True)
class UpstreamVerdict:
    version: str
    error: str  #: "" when upstream accepts the file
    cls: str = "TorchLlmArgs"  #: the class that checked it


def upstream_verdict(data: dict) -> Optional[UpstreamVerdict]:
    """Upstream's verdict on the file's LLM arguments, or None when ``tensorrt_llm`` cannot be imported."""
    try:
        root = importlib.import_module("tensorrt_llm")
        llm_args = importlib.import_module("tensorrt_llm.llmapi.llm_args")
    except Exception:  # noqa: BLE001 - not installed, or no CUDA driver: no upstream verdict here
        return None
    version = str(getattr(root, "__version__", "?"))
    merge = getattr(llm_args, "update_llm_args_with_extra_dict", None)
    if merge is None:  # older releases keep it in llm_utils
        merge = getattr(importlib.import_module("tensorrt_llm.llmapi.llm_utils"), "update_llm_args_with_extra_dict")
    cls, data = args_class(llm_args, data)
    model = data.get("model", _PLACEHOLDER_MODEL)
    try:
        base = cls(model=model, skip_tokenizer_init=True).model_dump()
        cls(**merge(base, dict(data)))
    except Exception as exc:  # noqa: BLE001 - every refusal is the verdict, whatever its class
        return UpstreamVerdict(version, f"{type(exc).__name__}: {' '.join(str(exc).split())}", cls.__name__)
    return UpstreamVerdict(version, "", cls.__name__)


def args_class(llm_args: Any, data: dict) -> tuple[Any, dict]:
    """The class trtllm-serve builds from the file, and what it is given: ``TrtLlmArgs`` without the ``backend`` key
    (``launch_server`` pops it before ``tensorrt_llm._tensorrt_engine.LLM``, tensorrt_llm/commands/serve.py@00209af1)
    where the file runs on the engine backend and the release has it, as trtlade's own check reads the file
    (:func:`~trtlade.trtllm.llm_args_check.root_class`); else ``TorchLlmArgs`` and the file as it is."""
    if uses_engine_backend(data.get("backend"), data.get("speculative_config")) and hasattr(llm_args, "TrtLlmArgs"):
        return llm_args.TrtLlmArgs, {k: v for k, v in data.items() if k != "backend"}
    return llm_args.TorchLlmArgs, data


def compare(doc: YamlDocument, ours: list[Diagnostic], data: Optional[dict] = None,
            required: bool = False) -> list[Diagnostic]:
    """An info line when both verdicts agree, an error with both messages when they do not; where TensorRT-LLM
    is not importable nothing, or with ``required`` an error saying so."""
    verdict = upstream_verdict(doc.data if data is None else data)
    if verdict is None:
        if not required:
            return []
        return [doc.diagnostic("error", "TensorRT-LLM is not importable here, so its own TorchLlmArgs could not check "
                               "the file (--upstream require)", code="trtllm-upstream-missing",
                               hint="run the gate in the TensorRT-LLM image (the k8s export's init container does), "
                                    "or pass --upstream auto to accept trtlade's verdict alone")]
    refused = [d for d in ours if d.severity == "error"]
    if bool(verdict.error) == bool(refused):
        what = "refuses" if refused else "accepts"
        return [doc.diagnostic("info", f"TensorRT-LLM {verdict.version}'s own {verdict.cls} {what} the file too "
                               "(same verdict)", code="trtllm-upstream-agrees")]
    ours_text = "; ".join(f"{d.path}: {d.message}" for d in refused) or "accepted"
    return [doc.diagnostic("error", f"trtlade and TensorRT-LLM {verdict.version} disagree on this file: trtlade: "
                           f"{_clip(ours_text)}; TensorRT-LLM: {_clip(verdict.error) or 'accepted'}",
                           code="trtllm-upstream-disagrees",
                           hint="TensorRT-LLM's verdict is the one the server acts on; report this as a trtlade "
                                "defect (its schema table for this release is stale), with both messages")]


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""``trtlade build --speculation ngram|sa|auto``: a bundle for TensorRT-LLM's PyTorch backend, where nothing is
converted and nothing is built (from 1.3 on it is the only backend; NGram / AUTO from 1.0, SA from 1.3).

The bundle holds what ``trtllm-serve`` and trtlade's own server read::

    <bundle>/
      trtllm-serve.yml        the trtllm-serve --config file: dtype, speculative_config, max_batch_size,
                              max_seq_len, max_num_tokens, parallelism, kv_cache_config (no backend key)
      trtlade.yml             the deployment config (build.backend pytorch, speculation, serve.engine trtllm)
      trtlade-manifest.json   written last: the release, the model's checksums, the command to serve

The checkpoint is referred to by path (``model.path``), never copied. Its ``architectures[0]`` must be one the
release's PyTorch backend registers (``tensorrt_llm/_torch/models/__init__.py``; with TensorRT-LLM installed,
its own ``MODEL_CLASS_MAPPING`` decides). What ``trtllm-serve`` reads from the file is what ``LLM(...)`` takes
(``tensorrt_llm/commands/serve.py``: ``--extra_llm_api_options``, alias ``--config`` in later releases; which side wins
when a flag repeats a key differs by release: :data:`trtlade.trtllm.releases.FLAGS_VS_FILE`).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from trtlade.builder.errors import BuildError
from trtlade.bundle import TRTLLM_SERVE_FILE
from trtlade.drafting.config import DraftConfig, DraftConfigError, drafter_mode
from trtlade.trtllm.releases import NEWEST_READ, release_for, serve_config_flag

__all__ = ["PYTORCH_ARCHITECTURES", "speculation_block", "check_architecture", "serve_options", "serve_command",
           "render_serve_options", "model_checksums", "pick_release"]

#: Text causal LMs the PyTorch backend registers (``tensorrt_llm/_torch/models/__init__.py``@015fb89c, a 1.0-era
#: list; later releases add more: with TensorRT-LLM installed its own registry decides).
PYTORCH_ARCHITECTURES = (
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM", "DeepseekV3ForCausalLM", "Exaone4ForCausalLM",
    "NemotronForCausalLM", "NemotronHForCausalLM", "NemotronNASForCausalLM",
)


def pick_release(flag: Optional[str], configured: Optional[str], installed: Optional[str]) -> tuple[str, str]:
    """The release a PyTorch-backend bundle is made for, and where it came from (the flag, the config, the
    install, else the newest release read).

    >>> pick_release(None, None, None)
    ('1.3.0rc25', 'the newest release trtlade has read (no --trtllm-version, build.trtllm_version or install)')
    """
    for value, origin in ((flag, "--trtllm-version"), (configured, "build.trtllm_version"),
                          (installed, "the installed TensorRT-LLM")):
        if value is not None:
            return value, origin
    return NEWEST_READ, "the newest release trtlade has read (no --trtllm-version, build.trtllm_version or install)"


def speculation_block(flag: Optional[str], configured: Optional[Mapping[str, Any]], release: str,
                      max_batch_size: int, source: str = "config") -> dict[str, Any]:
    """The ``speculative_config`` to write: ``--speculation NAME`` (``ngram``, ``sa``, ``auto``, ``sa-8`` ...) or the
    config's ``speculation`` block, checked by upstream's validators and against what ``release`` offers."""
    if flag is not None:
        name = "ngram-auto" if flag.strip().lower() == "auto" else flag
        where = "--speculation"
        try:
            block = drafter_mode(name)
        except DraftConfigError as exc:
            raise BuildError(exc.message, where=where, hint=exc.hint) from None
    elif configured is not None:
        block, where = dict(configured), f"{source}:speculation"  # located by the CLI (file:line:col)
    else:
        raise BuildError("the PyTorch backend drafts with NGram, SA or AUTO: name one", where="--speculation",
                         hint="--speculation ngram|sa|auto (or a block, e.g. sa-4--1), or a speculation block in the "
                              "config")
    try:
        config = DraftConfig.parse(block, max_batch_size=max_batch_size, ignored_ok=True)
    except DraftConfigError as exc:
        raise BuildError(exc.message, where=f"{where}.{exc.field}" if exc.field else where, hint=exc.hint) from None
    row = release_for(release)
    if config.requested not in row.drafters:
        raise BuildError(f"TensorRT-LLM {release} has no {config.requested} drafter on its PyTorch backend (it offers: "
                         f"{', '.join(row.drafters) or 'none'})", where=where,
                         hint="NGram and AUTO from 1.0, SA from 1.3: choose one the release has, or --trtllm-version")
    return block


def check_architecture(architecture: str, release: str, where: str,
                       registered: Optional[frozenset[str]] = None) -> None:
    """The checkpoint's ``architectures[0]`` against the PyTorch backend's registry (``registered``: the installed
    release's ``MODEL_CLASS_MAPPING``; else trtlade's list)."""
    known = registered if registered is not None else frozenset(PYTORCH_ARCHITECTURES)
    if architecture in known:
        return
    source = ("the installed TensorRT-LLM's MODEL_CLASS_MAPPING" if registered is not None else
              "tensorrt_llm/_torch/models/__init__.py as trtlade read it")
    raise BuildError(f"TensorRT-LLM {release}'s PyTorch backend does not load {architecture} ({source})",
                     where=f"{where}:architectures[0]",
                     hint=f"it loads: {', '.join(sorted(known))}; or serve the model on trtlade's reference engine "
                          "(--backend reference)")


def installed_registry() -> Optional[frozenset[str]]:
    """The installed TensorRT-LLM's PyTorch model registry, or None (not installed, or it fails to import)."""
    try:
        from tensorrt_llm._torch.models.modeling_utils import MODEL_CLASS_MAPPING  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any failure: checked against trtlade's list instead
        return None
    return frozenset(MODEL_CLASS_MAPPING)


def serve_options(*, speculation: Mapping[str, Any], limits: Mapping[str, int], tp_size: int, pp_size: int,
                  dtype: str, block_reuse: bool, free_gpu_memory_fraction: Optional[float],
                  release: str = NEWEST_READ) -> dict[str, Any]:
    """The ``trtllm-serve --config`` mapping (every key an ``LLM(...)`` argument of the PyTorch backend). No
    ``backend`` key: the field is deprecated on every line read (``BaseLlmArgs.backend``, ``status="deprecated"``,
    llm_args.py@fe8770fb, @7b437aaa, @a1a20970); below 1.3 the command line picks the backend
    (:func:`serve_command`). ``release`` is the release the file is for (kept for the rules that differ)."""
    del release
    kv: dict[str, Any] = {"enable_block_reuse": block_reuse}
    if free_gpu_memory_fraction is not None:
        kv["free_gpu_memory_fraction"] = free_gpu_memory_fraction
    return {"dtype": dtype, "max_batch_size": limits["max_batch_size"],
            "max_seq_len": limits["max_seq_len"], "max_num_tokens": limits["max_num_tokens"],
            "tensor_parallel_size": tp_size, "pipeline_parallel_size": pp_size,
            "kv_cache_config": kv, "speculative_config": dict(speculation)}


def serve_command(model_path: Path, bundle: Path, host: str = "127.0.0.1", port: int = 8000,
                  release: str = NEWEST_READ) -> str:
    """``trtllm-serve MODEL --config BUNDLE/trtllm-serve.yml --host --port`` (below 1.3 ``--backend pytorch``, as that
    line has two, and ``--extra_llm_api_options``: :func:`trtlade.trtllm.releases.serve_config_flag`); the host and
    port the config's serve section gives (trtllm-serve checks no API key: exposing it is the user's choice)."""
    backend = () if not release_for(release).engine_backend else ("--backend", "pytorch")
    return " ".join(shlex.quote(p) for p in ("trtllm-serve", str(model_path), *backend, serve_config_flag(release),
                                               str(bundle / TRTLLM_SERVE_FILE), "--host", host, "--port", str(port)))


def render_serve_options(options: Mapping[str, Any], release: str, command: str) -> str:
    head = ["# trtllm-serve --config file written by `trtlade build` for TensorRT-LLM "
            f"{release}'s PyTorch backend (see trtlade-manifest.json).",
            f"#   {command}",
            "#   check: trtlade validate-config trtllm-serve.yml --trtllm-version " + release,
            "# Every key is an LLM(...) argument; pass no LLM argument as a trtllm-serve flag as well (which side "
            "wins differs by release)."]
    return "\n".join(head) + "\n" + yaml.safe_dump(dict(options), sort_keys=False)


def model_checksums(folder: Path) -> dict[str, str]:
    """sha256 of the checkpoint's small files that say what it is (config, generation config, tokenizer)."""
    out = {}
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        path = folder / name
        if path.is_file():
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out

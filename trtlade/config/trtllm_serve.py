"""A ``trtllm-serve --config`` file (alias ``--extra_llm_api_options``), as it is: what its
``speculative_config`` and the keys around it will meet when TensorRT-LLM reads them.

TensorRT-LLM reads the file into its LLM arguments (``tensorrt_llm/commands/serve.py``: every key becomes an
``LLM(...)`` keyword, explicit command-line flags winning; ``tensorrt_llm/llmapi/llm_args.py``,
``update_llm_args_with_extra_dict``). trtlade checks what it understands, each finding at its ``file:line``
and field, and says which keys it left to TensorRT-LLM:

* ``speculative_config``: NGram / SA / AUTO through upstream's validators (:mod:`trtlade.drafting.config`:
  ``NGramDecodingConfig``, ``SADecodingConfig``, ``AutoDecodingConfig``); SA needs 1.3; ``Lookahead`` only on
  the TensorRT-engine backend of a release below 1.3 (``LookaheadDecodingConfig.supports_backend`` refuses
  ``pytorch``; from 1.3 on the union has no Lookahead member); other drafters (Eagle3, MTP, ...) are noted;
* ``backend``: ``pytorch`` (``_autodeploy``) everywhere; ``tensorrt`` below 1.3 only (``LLM(backend="tensorrt")``
  raises ValueError from 1.3 on: ``docs/source/legacy/tensorrt-backend-removal.md``);
* ``max_batch_size``, ``max_num_tokens``, ``max_seq_len``: positive integers (``global_pool_size`` must cover
  ``max_batch_size``: ``TorchLlmArgs.validate_speculative_config``);
* ``kv_cache_config``: a mapping; ``free_gpu_memory_fraction`` in (0, 1], ``enable_block_reuse`` a boolean;
* ``cuda_graph_config`` with a ``draft_len_schedule``: upstream forces ``enable_padding`` and adds the
  schedule's keys to ``batch_sizes`` (a note).

Worked example::

    speculative_config:
      decoding_type: SA
      max_draft_len: 4
      max_matching_ngram_size: 0     # -> error at this line: must be > 0 (fixed ngram) or -1 (longest match)
"""

from __future__ import annotations

from typing import Any, Optional

from trtlade.config.loader import YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.drafting.config import DraftConfig, DraftConfigError
from trtlade.spec import LookaheadSpec, SpecError
from trtlade.trtllm.releases import lookahead_refusal_1_3, release_for

__all__ = ["LLM_API_KEYS", "is_trtllm_serve_config", "check_trtllm_serve", "is_llmapi_model_yaml",
           "check_llmapi_model_yaml"]

#: LLM-API keys a trtllm-serve config file commonly carries (trtlade checks the first group; the rest pass).
CHECKED_KEYS = ("speculative_config", "backend", "max_batch_size", "max_num_tokens", "max_seq_len", "kv_cache_config",
                "cuda_graph_config")
LLM_API_KEYS = CHECKED_KEYS + (
    "tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size", "max_beam_width", "max_input_len",
    "enable_chunked_prefill", "disable_overlap_scheduler", "print_iter_log", "enable_attention_dp", "trust_remote_code",
    "enable_iter_perf_stats", "attn_backend", "sampler_type", "scheduler_config", "guided_decoding_backend",
    "enable_autotuner", "stream_interval", "num_postprocess_workers", "return_perf_metrics", "dtype",
    "build_config", "moe_config", "lora_config", "cache_transceiver_config", "torch_compile_config", "tokenizer")
#: upstream's default max_batch_size of the PyTorch backend (TorchLlmArgs): what global_pool_size must cover
DEFAULT_MAX_BATCH_SIZE = 2048
_MODEL_FREE = ("NGram", "SA", "AUTO")


def is_trtllm_serve_config(data: Any) -> bool:
    """A mapping of LLM-API keys (``speculative_config``, ``kv_cache_config`` ...) and no trtlade section.

    >>> is_trtllm_serve_config({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4}})
    True
    >>> is_trtllm_serve_config({"lookahead": {"spec": "4,2,4"}}), is_trtllm_serve_config({"max_batch_size": 8})
    (False, True)
    """
    if not isinstance(data, dict) or not data:
        return False
    if {"lookahead", "serve", "bench", "build", "model", "speculation", "models"} & set(data):
        return False
    return any(key in LLM_API_KEYS for key in data)


def is_llmapi_model_yaml(data: Any) -> bool:
    """The ``model.yaml`` of Triton's llmapi model: LLM arguments plus ``triton_config``.

    >>> is_llmapi_model_yaml({"model": "/m", "triton_config": {"decoupled": True, "max_batch_size": 0}})
    True
    """
    return isinstance(data, dict) and "triton_config" in data


def check_llmapi_model_yaml(doc: YamlDocument, release: Optional[str] = None) -> list[Diagnostic]:
    """A ``model.yaml`` as the stock llmapi ``model.py`` loads it (``triton_backend/all_models/llmapi/
    tensorrt_llm/1/model.py``: ``triton_config["decoupled"]`` and ``["max_batch_size"]`` read with no fallback;
    every other key, ``model`` first, an ``LLM(...)`` argument), then its LLM arguments as a trtllm-serve file's."""
    data: dict[str, Any] = doc.data
    out: list[Diagnostic] = []
    model = data.get("model")
    if not isinstance(model, str) or not model:
        out.append(doc.diagnostic("error", f"model must be the checkpoint's path, got {model!r}", loc=(("model",) if
                                  "model" in data else ()), code="llmapi-model",
                                  hint="model: /models/Qwen3-8B (the Hugging Face folder as Triton sees it)"))
    triton = data.get("triton_config")
    if not isinstance(triton, dict):
        return out + [doc.diagnostic("error", f"triton_config must be a mapping, got {triton!r}",
                                     loc=("triton_config",), code="llmapi-triton-config",
                                     hint="triton_config: {max_batch_size: 0, decoupled: true}")]
    for key in ("decoupled", "max_batch_size"):
        if key not in triton:
            out.append(doc.diagnostic("error", f"triton_config.{key} is missing: the stock model.py reads it with no "
                                      "fallback (KeyError when Triton loads the model)", loc=("triton_config",),
                                      code="llmapi-triton-config", hint="triton_config: {max_batch_size: 0, "
                                      "decoupled: true}"))
    if "decoupled" in triton and not isinstance(triton["decoupled"], bool):
        out.append(doc.diagnostic("error", f"triton_config.decoupled must be true or false, got "
                                  f"{triton['decoupled']!r}", loc=("triton_config", "decoupled"),
                                  code="llmapi-triton-config", hint="true streams one response per step"))
    size = triton.get("max_batch_size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        out.append(doc.diagnostic("error", f"triton_config.max_batch_size must be an integer >= 0, got {size!r}",
                                  loc=("triton_config", "max_batch_size"), code="llmapi-triton-config",
                                  hint="0, as the stock model.yaml: the LLM batches requests in flight itself"))
    return out + check_trtllm_serve(doc, release, own_keys=("model", "triton_config"))


def check_trtllm_serve(doc: YamlDocument, release: Optional[str] = None,
                       own_keys: tuple[str, ...] = ()) -> list[Diagnostic]:
    """Every finding of the module docstring. ``release``: the TensorRT-LLM release it is for (None: unknown:
    the release-dependent rules become notes); ``own_keys``: keys of the file's kind checked elsewhere."""
    data: dict[str, Any] = doc.data
    out: list[Diagnostic] = []
    if release is None:
        out.append(doc.diagnostic("info", "no TensorRT-LLM release given and none installed: checked against "
                                  "every release (pass --trtllm-version to check against one)", loc=(),
                                  code="trtllm-serve-release"))
    else:
        row = release_for(release)
        if row.note:
            out.append(doc.diagnostic("warning", f"TensorRT-LLM {release} is {row.note}", loc=(),
                                      code="trtllm-release-unknown"))
    for key in ("max_batch_size", "max_num_tokens", "max_seq_len"):
        value = data.get(key)
        if key in data and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            out.append(doc.diagnostic("error", f"{key} must be a positive integer, got {value!r}", loc=(key,),
                                      code="trtllm-serve-limit", hint=f"e.g. {key}: 8"))
    out += _backend(doc, release)
    out += _kv_cache(doc)
    out += _speculation(doc, release)
    unknown = [k for k in data if k not in LLM_API_KEYS and k not in own_keys]
    if unknown:
        names = ", ".join(map(str, unknown))
        out.append(doc.diagnostic("info", f"not checked by trtlade (TensorRT-LLM reads them): {names}",
                                  loc=(unknown[0],), key=True, code="trtllm-serve-unchecked"))
    return out


def _backend(doc: YamlDocument, release: Optional[str]) -> list[Diagnostic]:
    backend = doc.data.get("backend")
    if backend is None:
        return []
    if backend in ("pytorch", "_autodeploy"):
        return []
    if backend in ("tensorrt", "trt"):
        if release is not None and not release_for(release).engine_backend:
            return [doc.diagnostic("error", f"backend {backend}: TensorRT-LLM {release} has no TensorRT-engine "
                                   "backend (LLM(backend=\"tensorrt\") raises ValueError from 1.3 on)",
                                   loc=("backend",), code="trtllm-serve-backend",
                                   hint="use backend: pytorch (NGram / SA / AUTO), or target a release below 1.3 for "
                                        "a Lookahead engine")]
        return []
    return [doc.diagnostic("error", f"backend {backend!r} is not a TensorRT-LLM backend", loc=("backend",),
                           code="trtllm-serve-backend",
                           hint="pytorch (the default), _autodeploy, or tensorrt below 1.3")]


def _kv_cache(doc: YamlDocument) -> list[Diagnostic]:
    kv = doc.data.get("kv_cache_config")
    if kv is None:
        return []
    if not isinstance(kv, dict):
        return [doc.diagnostic("error", f"kv_cache_config must be a mapping, got {kv!r}", loc=("kv_cache_config",),
                               code="trtllm-serve-kv", hint="e.g. kv_cache_config: {free_gpu_memory_fraction: 0.9}")]
    out = []
    fraction = kv.get("free_gpu_memory_fraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 < fraction <= 1):
        out.append(doc.diagnostic("error", f"kv_cache_config.free_gpu_memory_fraction must be in (0, 1], got "
                                  f"{fraction!r}", loc=("kv_cache_config", "free_gpu_memory_fraction"),
                                  code="trtllm-serve-kv",
                                  hint="the share of free GPU memory the KV cache takes, e.g. 0.9"))
    reuse = kv.get("enable_block_reuse")
    if reuse is not None and not isinstance(reuse, bool):
        out.append(doc.diagnostic("error", f"kv_cache_config.enable_block_reuse must be true or false, got {reuse!r}",
                                  loc=("kv_cache_config", "enable_block_reuse"), code="trtllm-serve-kv"))
    return out


def _speculation(doc: YamlDocument, release: Optional[str]) -> list[Diagnostic]:
    block = doc.data.get("speculative_config")
    if block is None:
        return []
    where = ("speculative_config",)
    if not isinstance(block, dict):
        return [doc.diagnostic("error", f"speculative_config must be a mapping with decoding_type, got {block!r}",
                               loc=where, code="speculation", hint="e.g. {decoding_type: NGram, max_draft_len: 4}")]
    kind = str(block.get("decoding_type", ""))
    if kind.lower() == "lookahead":
        return _lookahead(doc, block, release)
    if kind.upper() not in {k.upper() for k in _MODEL_FREE}:
        return [doc.diagnostic("info", f"speculative_config decoding_type {kind!r} is not a model-free drafter: "
                               "trtlade checks NGram, SA, AUTO and Lookahead; TensorRT-LLM validates the rest",
                               loc=where + ("decoding_type",), code="speculation-unchecked")]
    batch = doc.data.get("max_batch_size", DEFAULT_MAX_BATCH_SIZE)
    try:
        config = DraftConfig.parse(block, max_batch_size=batch if isinstance(batch, int) else None, ignored_ok=True)
    except DraftConfigError as exc:
        loc = where + ((exc.field,) if exc.field in block else ())
        return [doc.diagnostic("error", exc.message, loc=loc, code="speculation", hint=exc.hint)]
    if release is not None and config.requested not in release_for(release).drafters:
        return [doc.diagnostic("error", f"TensorRT-LLM {release} has no {config.requested} drafter "
                               f"(it offers: {', '.join(release_for(release).drafters) or 'none'})",
                               loc=where + ("decoding_type",), code="speculation-release",
                               hint="SA arrived in 1.3, NGram and AUTO in 1.0: use one your release has, or upgrade")]
    out = []
    graphs = doc.data.get("cuda_graph_config")
    if config.draft_len_schedule and config.max_concurrency is None and isinstance(graphs, dict):
        out.append(doc.diagnostic("info", "with a draft_len_schedule TensorRT-LLM sets "
                                  "cuda_graph_config.enable_padding and adds the schedule's batch sizes to "
                                  "cuda_graph_config.batch_sizes",
                                  loc=("cuda_graph_config",), code="speculation-cuda-graphs"))
    return out


def _lookahead(doc: YamlDocument, block: dict[str, Any], release: Optional[str]) -> list[Diagnostic]:
    where = ("speculative_config", "decoding_type")
    if release is not None and (why := lookahead_refusal_1_3(release)) is not None:
        return [doc.diagnostic("error", why, loc=where, code="speculation-release",
                               hint="write an NGram / SA block instead, e.g. {decoding_type: SA, max_draft_len: 4} "
                                    "(`trtlade tune` measures which one suits your traffic)")]
    backend = doc.data.get("backend")
    if backend is not None and backend not in ("tensorrt", "trt"):
        return [doc.diagnostic("error", f"Lookahead runs only on the TensorRT-engine backend, not "
                               f"{backend} (LookaheadDecodingConfig.supports_backend refuses pytorch)", loc=where,
                               code="speculation-backend", hint="backend: tensorrt (a release below 1.3 and a "
                               "trtllm-build engine), or use NGram / SA")]
    out = [] if backend is not None else [doc.diagnostic(
        "info", "Lookahead needs the TensorRT-engine backend: the file does not choose one, so the command line must "
        "(trtllm-serve ENGINE_DIR --backend tensorrt; trtlade build prints it)", loc=where, code="speculation-backend")]
    spec_keys = {k: v for k, v in block.items() if k != "decoding_type"}
    try:
        LookaheadSpec.parse(spec_keys)
    except SpecError as exc:
        return [doc.diagnostic("error", exc.message, loc=("speculative_config",),
                               code="speculation", hint=exc.hint)]
    return out

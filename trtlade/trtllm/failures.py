"""Known ways TensorRT-LLM fails (building an engine, or starting its executor), recognised in the
error text, each with what happened and what to do. ``trtlade build`` reads its log through
:func:`diagnose`, and ``trtlade serve`` reads the executor's start error through the same function,
so the same failure gets the same words in both places.

    >>> diagnose("[TensorRT-LLM][ERROR] Assertion failed: LookaheadDecodingConfig is set, but DecodingMode "
    ...          "is not set (decodingConfig.cpp:84)").code
    'decoding-mode'
    >>> diagnose("[TensorRT-LLM][ERROR] Assertion failed: 16 != 40 (lookaheadDecodingLayer.cpp:56)").code
    'draft-len-mismatch'
    >>> diagnose("[TensorRT-LLM][ERROR] Assertion failed: Speculative decoding module is not set to "
    ...          "decoder domain (decodingParams.h:97)").code
    'lookahead-mode-on-plain-engine'
    >>> diagnose("... [TRT-LLM] [E] No available XQA kernels are found for speculative decoding mode.").code
    'xqa-kernels'
    >>> diagnose("Killed", exit_code=-9).code
    'out-of-memory'
    >>> diagnose("something nobody has seen") is None
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KnownFailure", "KNOWN_FAILURES", "UNKNOWN_START_HINT", "diagnose"]


@dataclass(frozen=True)
class KnownFailure:
    """``pattern``: a regular expression searched in the text (case-insensitive)."""

    code: str
    pattern: str
    summary: str
    hint: str


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "decoding-mode", r"LookaheadDecodingConfig is set, but DecodingMode is not set",
        "the executor's DecodingConfig carried a LookaheadDecodingConfig without DecodingMode.Lookahead() "
        "(cpp/tensorrt_llm/executor/decodingConfig.cpp, DecodingConfig::DecodingConfig refuses it in "
        "0.16 to 1.2)",
        "pass decoding_mode=DecodingMode.Lookahead() with the lookahead config, or set it through the "
        "property (dc.lookahead_decoding_config = ...); trtlade serve does this itself, so this message "
        "from trtlade is a bug: please report it"),
    KnownFailure(
        "draft-len-mismatch", r"Assertion failed: (\d+) != (\d+)[^\n]*lookaheadDecodingLayer",
        "the decoder's lookahead config gives a different number of tokens per step than its size "
        "(LookaheadDecodingLayer's CpuAlgorithmResources); an executor given no lookahead config falls back to "
        "the default (4,3,4), 16 tokens a step, against the engine's max_draft_len + 1",
        "give the executor the (W,N,G) the engine was built for (lookahead.spec; `trtlade spec W,N,G` prints its "
        "max_draft_len, `trtlade validate-config` checks config against engine), or rebuild the engine with "
        "--max_draft_len of the spec"),
    KnownFailure(
        "lookahead-config-missing", r"Lookahead decoding config must be provided|bad optional access",
        "the engine was built for lookahead but the executor got no LookaheadDecodingConfig "
        "(old releases report it as 'bad optional access', NVIDIA/TensorRT-LLM#2020)",
        "set lookahead.spec in the config to the (W,N,G) the engine was built for"),
    KnownFailure(
        "draft-len-too-large", r"maxDraftTokens <= mModelConfig\.getMaxDecodingDraftTokens",
        "the executor's (W,N,G) needs more draft tokens than the engine was built for "
        "(TrtGptModelInflightBatching::setupSpeculativeDecodingModule, "
        "cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp)",
        "make the config's lookahead.spec give the engine's max_draft_len exactly (`trtlade validate-config` "
        "lists the specs that fit), or rebuild the engine for the spec"),
    KnownFailure(
        "lookahead-mode-on-plain-engine", r"Speculative decoding module is not set to decoder domain",
        "the decoder was set up for Lookahead on a model without a speculative-decoding module "
        "(DecoderDomain::getSpeculativeDecodingModule, cpp/tensorrt_llm/layers/decodingParams.h): a "
        "Lookahead decoding mode or config reached an engine built without lookahead "
        "(NVIDIA/TensorRT-LLM#2816; the decoder-only executor overwrites the mode with a warning, other "
        "paths fail like this)",
        "serve an engine built without lookahead with lookahead.spec 1,1,0 (trtlade then passes no "
        "decoding mode and no lookahead config); to use lookahead, rebuild with `trtlade build` "
        "(--speculative_decoding_mode lookahead_decoding); with grps, remove the lookahead_decoding block"),
    KnownFailure(
        "lookahead-variable-swa",
        r"Rewinding KV cache blocks for (variable SWA models isn't supported|models with multiple pools)",
        "a Lookahead engine was started with per-layer attention windows (KvCacheConfig.max_attention_window, "
        "Gemma 2/3's sliding windows): Lookahead rewinds the KV cache after each step and TensorRT-LLM "
        "refuses that with variable windows (TrtGptModelInflightBatching's constructor, "
        "cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp; needsKVCacheRewind() includes "
        "kLookaheadDecoding)",
        "serve the model without lookahead windows: rebuild with max_seq_len within the smallest sliding "
        "window (every layer's window then covers the sequence, so one window serves exactly), or serve "
        "it on trtlade's reference engine (serve.engine reference), which applies the windows exactly"),
    KnownFailure(
        "xqa-kernels", r"No available XQA kernels are found for speculative decoding mode",
        "this GPU / head size has no speculative-decoding XQA kernels in this TensorRT-LLM version "
        "(known on A10 with 0.16, NVIDIA/TensorRT-LLM#2879)",
        "upgrade TensorRT-LLM (newer releases up to 1.2.x add the kernels: pip install "
        "'tensorrt-llm>=1.2,<1.3' or a newer NGC container), or build and serve on another GPU type"),
    KnownFailure(
        "unsupported-qwen3", r"Unsupported Qwen type:\s*qwen3",
        "this TensorRT-LLM has no Qwen3 engine support (stock support came with NVIDIA/TensorRT-LLM "
        "PR #5650, merged 2025-07-10, first in the 1.0 release line)",
        "two ways out: a TensorRT-LLM release that carries it, 1.0.x to 1.2.x (pip install "
        "'tensorrt-llm>=1.0,<1.3'), or keep 0.16 with a build patched for Qwen3 (e.g. NetEase's fork "
        "used with grps_trtllm); upgrading transformers alone does not help"),
    KnownFailure(
        "mpi-world-size", r"MPI worldSize is expected to be equal to|mpiSize == tp",
        "the number of MPI processes differs from the engine's tp_size x pp_size",
        "start one process per rank: mpirun -n <tp*pp> trtlade serve ... (trtlade's preflight prints "
        "the exact command)"),
    KnownFailure(
        "out-of-memory",
        r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|std::bad_alloc|MemoryError|"
        r"Requested amount of GPU memory .* could not be allocated",
        "ran out of memory",
        "conversion needs host RAM for the weights (about 2 bytes per parameter in fp16/bf16); the "
        "build needs GPU memory: lower --max-batch-size, --max-num-tokens or --max-seq-len, use more GPUs "
        "(--tp-size); the executor's KV cache takes serve.kv_cache_free_gpu_memory_fraction of what is "
        "free: lower it; or stop other processes using the GPU (nvidia-smi)"),
    KnownFailure(
        "no-gpu", r"no CUDA-capable device is detected|CUDA driver version is insufficient|"
        r"libcuda\.so[^\n]*(cannot open|not found)",
        "no usable NVIDIA GPU / CUDA driver",
        "run on a machine with an NVIDIA GPU (compute capability >= 8.0 for lookahead) and its driver, "
        "e.g. inside NVIDIA's NGC TensorRT-LLM container with --gpus all"),
)

#: What serve says when the start error is none of the above.
UNKNOWN_START_HINT = (
    "not a failure trtlade knows; `trtlade validate-config` checks the config against the engine, and "
    "docs/reference/trtllm-compat.md lists the known TensorRT-LLM bugs by version")

#: Exit codes of a process killed by SIGKILL (the kernel's OOM killer): Python reports -9, shells 137.
_KILLED = {-9, 137}


def diagnose(text: str, exit_code: int | None = None,
             failures: tuple[KnownFailure, ...] = KNOWN_FAILURES) -> KnownFailure | None:
    """The first known failure whose pattern appears in ``text`` (or a SIGKILL exit: out of memory)."""
    for failure in failures:
        if re.search(failure.pattern, text, flags=re.IGNORECASE):
            return failure
    if exit_code in _KILLED:
        return next(f for f in failures if f.code == "out-of-memory")
    return None

"""What the stock models of Triton's TensorRT-LLM backend read when they load, per backend release line:
the inputs, outputs and parameters ``trtlade export triton`` must write so that the stock ``model.py``
files (and the C++ ``tensorrtllm`` backend) start on its configs.

Sources, read for this table (names only; no code of theirs is in trtlade):

- ``0.19``: triton-inference-server/tensorrtllm_backend at tag v0.19.0,
  ``all_models/inflight_batcher_llm/{preprocessing,postprocessing}/{config.pbtxt,1/model.py}`` and
  ``inflight_batcher_llm/src/model_instance_state.cc``. From 0.19 on the tensorrt_llm model reads lookahead.
- ``0.20``: the same files under NVIDIA/TensorRT-LLM ``triton_backend/`` (the backend moved there with
  0.20; tensorrtllm_backend's own tags from v0.20.0 on no longer carry ``all_models/``), read at the
  newest stored commit and taken for 0.20 to 1.2. Against 0.19 the preprocessing model gained the
  ``IMAGES`` input and the ``hf_model_path`` parameter, and ``IMAGE_SIZES`` became ``[-1, 2]``.

What ``initialize()`` needs, the reason this table exists:

- preprocessing ``model.py``: ``parameters['tokenizer_dir']`` and ``parameters['multimodal_model_path']``
  with no fallback (a KeyError otherwise), and the ``data_type`` of the inputs ``EMBEDDING_BIAS_WORDS``,
  ``EMBEDDING_BIAS_WEIGHTS`` and of the outputs ``INPUT_ID``, ``DECODER_INPUT_ID``, ``REQUEST_INPUT_LEN``,
  ``REQUEST_DECODER_INPUT_LEN``, ``BAD_WORDS_IDS``, ``STOP_WORDS_IDS``, ``OUT_END_ID``, ``OUT_PAD_ID``,
  ``OUT_PROMPT_TABLE_EXTRA_IDS``, ``PIXEL_VALUES``, ``IMAGE_SIZES`` (a TypeError on ``None[...]`` when one
  is absent);
- postprocessing ``model.py``: ``parameters['tokenizer_dir']`` and the output ``OUTPUT``;
- the C++ tensorrtllm model (``ModelInstanceState``): ``gpt_model_type`` and, in
  ``getGuidedDecodingConfigFromParams``, ``tokenizer_dir``, ``xgrammar_tokenizer_info_path`` and
  ``guided_decoding_backend`` with no fallback ("Cannot find parameter with name: ...").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Tensor", "family", "model_py_source", "preprocessing_inputs", "preprocessing_outputs",
           "preprocessing_parameters", "TENSORRT_LLM_REQUIRED_PARAMETERS", "INITIALIZE_READS",
           "TENSORRT_LLM_LOOKAHEAD_INPUTS", "STOCK_MAX_BATCH_SIZE", "LLMAPI_INPUTS", "LLMAPI_OUTPUTS",
           "LLMAPI_MODEL_PY", "LLMAPI_TRITON_CONFIG_REQUIRED"]


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton's DataType name, e.g. "TYPE_INT32"
    dims: tuple[int, ...]
    optional: bool = False
    ragged: bool = False  # allow_ragged_batch


def family(version: tuple[int, ...]) -> str:
    """The backend release line of an engine's TensorRT-LLM version: ``"0.19"`` or ``"0.20"`` (0.20 to 1.2).

    >>> family((0, 19, 0)), family((0, 20)), family((1, 2, 1))
    ('0.19', '0.20', '0.20')
    """
    return "0.19" if version[:2] <= (0, 19) else "0.20"


def model_py_source(line: str) -> str:
    """Where the stock python models of a release line live (what the user copies next to the configs)."""
    if line == "0.19":
        return "triton-inference-server/tensorrtllm_backend v0.19.0: all_models/inflight_batcher_llm/*/1/model.py"
    return ("NVIDIA/TensorRT-LLM, the engine's release tag: triton_backend/all_models/inflight_batcher_llm/*/1/"
            "model.py (the NGC Triton TRT-LLM container of that release ships them)")


_IMAGE = (-1, -1, -1, -1)


def preprocessing_inputs(line: str) -> list[Tensor]:
    """The stock preprocessing inputs, in the stock order."""
    images = [Tensor("IMAGES", "TYPE_STRING", (-1,), True)] if line != "0.19" else []
    return [
        Tensor("QUERY", "TYPE_STRING", (1,)),
        Tensor("DECODER_QUERY", "TYPE_STRING", (1,), True),
        Tensor("IMAGE_BYTES", "TYPE_UINT8", _IMAGE, True),
        Tensor("IMAGE_URL", "TYPE_STRING", (1,), True),
        *images,
        Tensor("VIDEO_BYTES", "TYPE_UINT8", _IMAGE, True),
        Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)),
        Tensor("BAD_WORDS_DICT", "TYPE_STRING", (-1,), True),
        Tensor("STOP_WORDS_DICT", "TYPE_STRING", (-1,), True),
        Tensor("EMBEDDING_BIAS_WORDS", "TYPE_STRING", (-1,), True),
        Tensor("EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", (-1,), True),
        Tensor("END_ID", "TYPE_INT32", (1,), True),
        Tensor("PAD_ID", "TYPE_INT32", (1,), True),
        Tensor("PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64", (1,), True),
    ]


def preprocessing_outputs(line: str) -> list[Tensor]:
    """The stock preprocessing outputs, in the stock order."""
    return [
        Tensor("INPUT_ID", "TYPE_INT32", (-1,)),
        Tensor("REQUEST_INPUT_LEN", "TYPE_INT32", (1,)),
        Tensor("DECODER_INPUT_ID", "TYPE_INT32", (-1,)),
        Tensor("REQUEST_DECODER_INPUT_LEN", "TYPE_INT32", (1,)),
        Tensor("BAD_WORDS_IDS", "TYPE_INT32", (2, -1)),
        Tensor("STOP_WORDS_IDS", "TYPE_INT32", (2, -1)),
        Tensor("EMBEDDING_BIAS", "TYPE_FP32", (-1,)),
        Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (-1,)),
        Tensor("OUT_END_ID", "TYPE_INT32", (1,)),
        Tensor("OUT_PAD_ID", "TYPE_INT32", (1,)),
        Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", (-1,)),
        Tensor("PIXEL_VALUES", "TYPE_FP16", _IMAGE),
        Tensor("ASPECT_RATIO_IDS", "TYPE_INT64", (-1,)),
        Tensor("ASPECT_RATIO_MASK", "TYPE_INT64", (-1, -1)),
        Tensor("CROSS_ATTENTION_MASK", "TYPE_INT64", (-1, -1, -1)),
        Tensor("IMAGE_SIZES", "TYPE_INT64", (2,) if line == "0.19" else (-1, 2)),
        Tensor("IS_VIDEO_INPUT", "TYPE_BOOL", (1,)),
        Tensor("ATTENTION_MASK", "TYPE_INT64", (-1,)),
        Tensor("IMAGE_GRID_THW", "TYPE_INT64", (3,)),
        Tensor("VISION_INPUT_ID", "TYPE_INT32", (-1,)),
    ]


def preprocessing_parameters(line: str, tokenizer: str, engine_dir: str,
                             hf_model: Optional[str] = None) -> dict[str, str]:
    """The stock preprocessing parameters; the multimodal ones empty ("" is how the stock model reads
    'unused': ``multimodal_model_path == ""`` -> None). ``max_num_images`` is left out: the stock model
    reads it with ``.get`` and would report an empty value as "not set correctly"."""
    params = {"tokenizer_dir": tokenizer, "add_special_tokens": "true", "multimodal_model_path": "",
              "gpt_model_path": engine_dir}
    if line != "0.19":
        params["hf_model_path"] = hf_model or tokenizer
    return params


#: The stock tensorrt_llm model's per-request lookahead inputs, the same in both release lines
#: (tensorrtllm_backend v0.19.0 and NVIDIA/TensorRT-LLM triton_backend/, all_models/inflight_batcher_llm/
#: tensorrt_llm/config.pbtxt): INT32, dims [1] (so [B, 1] with Triton's batch dimension), optional,
#: allow_ragged_batch, no reshape. The guard's outputs feed them, so they are [B, 1] too.
TENSORRT_LLM_LOOKAHEAD_INPUTS = tuple(Tensor(name, "TYPE_INT32", (1,), optional=True, ragged=True) for name in (
    "lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size"))
#: Every stock model of inflight_batcher_llm (ensemble, preprocessing, tensorrt_llm, postprocessing, ...)
#: writes ``max_batch_size: ${triton_max_batch_size}``: one value for all, which the guard shares.
STOCK_MAX_BATCH_SIZE = "${triton_max_batch_size}"

#: The tensorrt_llm model's parameters read with no fallback (ModelInstanceState::getBatchingTypeFromParams
#: and ::getGuidedDecodingConfigFromParams, 0.19 and the newest triton_backend): empty means "unused".
TENSORRT_LLM_REQUIRED_PARAMETERS = ("gpt_model_type", "tokenizer_dir", "xgrammar_tokenizer_info_path",
                                    "guided_decoding_backend")

#: model -> what its stock initialize() reads with no fallback: ("parameters", names), ("inputs", names)
#: and ("outputs", names) whose data_type it reads. Tests replay these reads on every exported config.
INITIALIZE_READS: dict[str, dict[str, tuple[str, ...]]] = {
    "preprocessing": {
        "parameters": ("tokenizer_dir", "multimodal_model_path"),
        "inputs": ("EMBEDDING_BIAS_WORDS", "EMBEDDING_BIAS_WEIGHTS"),
        "outputs": ("INPUT_ID", "DECODER_INPUT_ID", "REQUEST_INPUT_LEN", "REQUEST_DECODER_INPUT_LEN",
                    "BAD_WORDS_IDS", "STOP_WORDS_IDS", "OUT_END_ID", "OUT_PAD_ID", "OUT_PROMPT_TABLE_EXTRA_IDS",
                    "PIXEL_VALUES", "IMAGE_SIZES"),
    },
    "postprocessing": {"parameters": ("tokenizer_dir",), "inputs": (), "outputs": ("OUTPUT",)},
    "tensorrt_llm": {"parameters": TENSORRT_LLM_REQUIRED_PARAMETERS, "inputs": (), "outputs": ()},
}


# ---------------------------------------------------------------------------------------------- llmapi
# The PyTorch backend's Triton model (TensorRT-LLM 1.0 on; the only one from 1.3 on): NVIDIA/TensorRT-LLM
# triton_backend/all_models/llmapi/tensorrt_llm/, read at config.pbtxt@0a710573, 1/model.py@044a90d2 and
# 1/model.yaml@0ebb1536. What its model.py does with the files trtlade writes:
#
# - auto_complete_config() and initialize() read ``model.yaml`` (or $LLM_CONFIG_PATH) beside model.py and take
#   ``triton_config["decoupled"]`` and ``triton_config["max_batch_size"]`` with no fallback (a KeyError
#   otherwise); ``cancellation_check_period_ms`` is optional (100);
# - every other key of model.yaml goes through ``update_llm_args_with_extra_dict({}, ...)`` into
#   ``LLM(**args)``: ``model`` is the checkpoint, ``speculative_config`` becomes its config class by
#   ``decoding_type``; the rest are LLM arguments as in a trtllm-serve --config file;
# - initialize() reads the ``data_type`` of the output ``text_output`` (TypeError on None[...] when absent);
#   the response adds the other outputs below when asked (return_* inputs, return_perf_metrics), so the
#   config declares them all, as the stock one does;
# - max_batch_size and the transaction policy belong in model.yaml, not config.pbtxt (the stock config says so:
#   auto_complete_config cannot override values the config.pbtxt sets).

#: model.py and helpers.py of the llmapi model, which the user copies next to the files trtlade writes.
LLMAPI_MODEL_PY = "triton_backend/all_models/llmapi/tensorrt_llm/1/{model.py,helpers.py}"
#: triton_config keys the stock model.py reads with no fallback.
LLMAPI_TRITON_CONFIG_REQUIRED = ("decoupled", "max_batch_size")

LLMAPI_INPUTS = (
    Tensor("text_input", "TYPE_STRING", (-1,)),
    Tensor("image_url", "TYPE_STRING", (-1,), True),
    Tensor("streaming", "TYPE_BOOL", (1,), True),
    *(Tensor(f"sampling_param_{name}", dtype, (1,), True) for name, dtype in (
        ("best_of", "TYPE_INT32"), ("temperature", "TYPE_FP32"), ("top_k", "TYPE_INT32"), ("top_p", "TYPE_FP32"),
        ("frequency_penalty", "TYPE_FP32"), ("presence_penalty", "TYPE_FP32"), ("max_tokens", "TYPE_INT32"))),
    Tensor("sampling_param_stop", "TYPE_STRING", (-1,), True),
    Tensor("sampling_param_seed", "TYPE_UINT64", (1,), True),
    Tensor("sampling_param_exclude_input_from_output", "TYPE_BOOL", (1,), True),
    Tensor("sampling_param_return_perf_metrics", "TYPE_BOOL", (1,), True),
    Tensor("return_finish_reason", "TYPE_BOOL", (1,), True),
    Tensor("return_stop_reason", "TYPE_BOOL", (1,), True),
    Tensor("return_cumulative_logprob", "TYPE_BOOL", (1,), True),
    Tensor("stop", "TYPE_BOOL", (1,), True),
    Tensor("lora_id", "TYPE_UINT64", (1,), True),
    Tensor("lora_name", "TYPE_STRING", (1,), True),
    Tensor("lora_path", "TYPE_STRING", (1,), True),
    Tensor("lora_ckpt_source", "TYPE_STRING", (1,), True),
)
LLMAPI_OUTPUTS = (
    Tensor("text_output", "TYPE_STRING", (-1,)),
    Tensor("finish_reason", "TYPE_STRING", (-1,)),
    Tensor("stop_reason", "TYPE_STRING", (-1,)),
    Tensor("cumulative_logprob", "TYPE_FP32", (-1,)),
    *(Tensor(name, "TYPE_INT32", (-1,)) for name in ("kv_cache_reused_block", "kv_cache_missed_block",
                                                      "kv_cache_alloc_new_blocks", "kv_cache_alloc_total_blocks")),
    Tensor("kv_cache_hit_rate", "TYPE_FP32", (-1,)),
    *(Tensor(name, "TYPE_INT64", (1,)) for name in ("arrival_time_ns", "first_scheduled_time_ns",
                                                     "first_token_time_ns", "last_token_time_ns")),
    Tensor("acceptance_rate", "TYPE_FP32", (1,)),
    Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)),
)

"""grps_trtllm ``inference_*.yml`` configs (NetEase-Media/grps_trtllm, the user's current stack):
detection, reading, and the checks that catch lookahead mistakes before the server starts.

A grps inference config lists models; the TensorRT-LLM one carries its settings under
``models[i].inferer_args``::

    models:
      - name: trtllm_model
        inferer_args:
          tokenizer_path: /models/Qwen3-8B/
          gpt_model_type: inflight_fused_batching     # V1 | inflight_batching | inflight_fused_batching
          gpt_model_path: /models/Qwen3-8B/trt_engines/   # the engine dir
          decoding_mode:                                # top_k | top_p | top_k_top_p | beam_search | medusa
          sampling: {temperature: 0.6, top_k: 20, top_p: 0.95}
          lookahead_decoding: {window_size: 4, ngram_size: 2, verification_set_size: 4}

grps reads exactly ``window_size``, ``ngram_size`` and ``verification_set_size`` (no other spelling)
and sets the executor's lookahead config only when the block is present. What it does with the rest
(read from its source): an unknown ``decoding_mode`` is logged and replaced by the default; the
lookahead block switches the decoding mode to lookahead whatever ``decoding_mode`` says.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtlade.config.checks import display_path, engine_diagnostics, spec_warnings
from trtlade.config.loader import Loc, YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.errors import did_you_mean
from trtlade.spec import FIELD_ALIASES, FIELDS, LookaheadSpec, SpecError
from trtlade.trtllm.engine_config import (EngineConfigError, missing_config_consequence, read_engine_config,
                                         specs_fitting_engine)

__all__ = [
    "GRPS_LOOKAHEAD_KEYS",
    "GRPS_INFERER_ARGS_KEYS",
    "GRPS_DECODING_MODES",
    "INFLIGHT_MODEL_TYPES",
    "V1_MODEL_TYPES",
    "IGNORED_SAMPLING_KEYS",
    "GRPS_LLM_STYLES",
    "GRPS_TOKENIZER_TYPES",
    "GRPS_SAMPLING_TYPES",
    "GrpsModel",
    "is_grps_config",
    "read_grps_models",
    "check_grps",
]

#: The only keys grps_trtllm reads in ``lookahead_decoding`` (src/constants.h).
GRPS_LOOKAHEAD_KEYS: tuple[str, str, str] = FIELDS
#: The ``decoding_mode`` values grps_trtllm understands; anything else is logged and ignored.
GRPS_DECODING_MODES = ("top_k", "top_p", "top_k_top_p", "beam_search", "medusa")
INFLIGHT_MODEL_TYPES = ("inflight_batching", "inflight_fused_batching")
V1_MODEL_TYPES = ("V1", "v1")
#: Sampling settings lookahead ignores (it always takes the top-1 token).
IGNORED_SAMPLING_KEYS = (
    "temperature", "top_k", "top_p", "top_p_min", "top_p_decay", "top_p_reset_ids", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "length_penalty", "min_p",
)
_LLM_KEYS = ("gpt_model_path", "gpt_model_type", "lookahead_decoding", "tokenizer_path")

# What grps_trtllm's loader reads, from its sources at the commit that adds lookahead support
# (NetEase-Media/grps_trtllm fb941b5, "Add lookahead support"):
#: src/llm_styler.cc, LLMStylerFactory::CreateLLMStyler: every other name throws "LLM style X not supported now."
GRPS_LLM_STYLES: tuple[str, ...] = (
    "qwen", "qwenvl", "qwen2.5", "qwen2vl", "qwq", "qwq-preview", "qwen3", "chatglm3", "glm4", "llama3",
    "internlm2", "internvl2-internlm2", "internvl2-phi3", "internvl2-qwen2", "internvl2.5", "intern-video2.5",
    "internvl3", "phi3", "phi4", "deepseek-r1", "janus-pro", "gemma3", "minicpmv")
#: src/tokenizer.cc, MultiInstanceTokenizer::Load: anything else throws "Unsupported tokenizer type: X".
GRPS_TOKENIZER_TYPES = ("huggingface", "sentencepiece")
#: src/trtllm_model_state.cc, TrtLlmModelState::GetParameter<SamplingConfig>: each key present in
#: ``sampling`` is read with YAML_TRY_EXTRACT as this type (names from src/constants.h).
GRPS_SAMPLING_TYPES: dict[str, type] = {
    "beam_width": int, "top_k": int, "top_p": float, "top_p_min": float, "top_p_decay": float,
    "top_p_reset_ids": int, "temperature": float, "length_penalty": float, "early_stopping": int,
    "repetition_penalty": float, "min_length": int, "beam_search_diversity_rate": float,
    "presence_penalty": float, "frequency_penalty": float, "seed": int, "no_repeat_ngram_size": int,
}


#: The ``inferer_args`` keys grps_trtllm reads at fb941b5 (src/customized_inferer.cc, src/trtllm_model_state.cc and
#: src/trtllm_model_instance.cc: ``GetParameter<T>("key")``, ``model_config["key"]`` and the LoRA cache's
#: ``field_name``); it ignores any other key without a word.
GRPS_INFERER_ARGS_KEYS: tuple[str, ...] = (
    "bad_words", "batch_scheduler_policy", "cancellation_check_period_ms", "cross_kv_cache_fraction", "decoding_mode",
    "enable_chunked_context", "enable_context_fmha_fp32_acc", "enable_kv_cache_reuse", "enable_thinking",
    "enable_trt_overlap", "encoder_model_path", "end_token_id", "event_buffer_max_size", "exclude_input_in_output",
    "executor_worker_path", "force_tokens_dict", "gpt_model_path", "gpt_model_type", "gpu_device_ids",
    "gpu_weights_percent", "img_begin_token_id", "img_token", "iter_stats_max_iterations",
    "kv_cache_free_gpu_mem_fraction", "kv_cache_host_memory_bytes", "kv_cache_onboard_blocks", "llm_style",
    "lookahead_decoding", "lora_cache_gpu_memory_fraction", "lora_cache_host_memory_bytes",
    "lora_cache_max_adapter_size", "lora_cache_optimal_adapter_size", "max_attention_window_size", "max_beam_width",
    "max_queue_size", "max_seq_idle_microseconds", "max_tokens_in_paged_kv_cache", "medusa_choices",
    "multi_block_mode", "normalize_log_probs", "pad_token_id", "prefix_tokens_id", "recv_poll_period_ms",
    "request_stats_max_iterations", "sampling", "secondary_offload_min_priority", "sink_token_length",
    "skip_special_tokens", "speculative_decoding_fast_logits", "stats_check_period_ms", "stop_words",
    "suffix_tokens_id", "tokenizer_parallelism", "tokenizer_path", "tokenizer_type", "vit_path", "vit_processor_args",
    "vit_trt_args", "vit_type", "vit_worker_tp")

_YAML_CPP_TYPE_NAMES = {int: "int32_t", float: "float"}
_INT_TEXT = re.compile(r"[+-]?(?:0x[0-9a-fA-F]+|0o[0-7]+|\d+)")


def yaml_cpp_number(value: Any, kind: type) -> int | float | None:
    """``value`` as yaml-cpp's ``node.as<int32_t>()`` / ``as<float>()`` reads it, or None where it
    throws (grps's YAML_TRY_EXTRACT then fails to load). yaml-cpp converts the scalar's text whatever
    its quoting, so ``'4'`` is 4; ``true`` and ``4.5`` are not int32 (yaml-cpp, include/yaml-cpp/node/
    convert.h, the numeric ``convert<T>::decode``).

    >>> yaml_cpp_number("4", int), yaml_cpp_number(4, int), yaml_cpp_number("151645", int)
    (4, 4, 151645)
    >>> yaml_cpp_number(True, int), yaml_cpp_number(4.5, int), yaml_cpp_number("four", int)
    (None, None, None)
    >>> yaml_cpp_number("0.95", float), yaml_cpp_number(1, float)
    (0.95, 1.0)
    """
    if isinstance(value, bool) or value is None:
        return None
    if kind is int:
        if isinstance(value, int):
            return value if -2**31 <= value < 2**31 else None
        if isinstance(value, str) and _INT_TEXT.fullmatch(value):
            number = int(value, 0) if value.lstrip("+-").startswith(("0x", "0o")) else int(value)
            return number if -2**31 <= number < 2**31 else None
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value == value.strip():
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _extract_error(key: str, kind: type) -> str:
    """What grps's YAML_TRY_EXTRACT throws (src/trtllm_model_state.cc), up to yaml-cpp's own text."""
    return f"Failed to parse conf, conf_name: {key}, data_type: {_YAML_CPP_TYPE_NAMES[kind]}, err: ..."


@dataclass(frozen=True)
class GrpsModel:
    """The lookahead-relevant settings of one ``models[i]`` entry (values as written; ``spec`` is
    None when the block is absent or unusable)."""

    index: int
    name: str | None
    loc: Loc
    args: dict[str, Any] = field(repr=False)
    spec: LookaheadSpec | None = None
    has_lookahead_block: bool = False

    def arg(self, key: str, default: Any = None) -> Any:
        return self.args.get(key, default)

    @property
    def gpt_model_path(self) -> Any:
        return self.args.get("gpt_model_path")

    @property
    def tokenizer_path(self) -> Any:
        return self.args.get("tokenizer_path")

    @property
    def decoding_mode(self) -> Any:
        return self.args.get("decoding_mode")

    @property
    def gpt_model_type(self) -> Any:
        return self.args.get("gpt_model_type")

    @property
    def sampling(self) -> Any:
        return self.args.get("sampling")


def is_grps_config(data: Any) -> bool:
    """A top-level ``models`` list with at least one mapping item holding ``inferer_args``."""
    models = data.get("models") if isinstance(data, dict) else None
    return isinstance(models, list) and any(isinstance(m, dict) and "inferer_args" in m for m in models)


def read_grps_models(doc: YamlDocument) -> tuple[list[GrpsModel], list[Diagnostic]]:
    """The TensorRT-LLM models of a grps config (entries whose ``inferer_args`` name an engine,
    tokenizer or lookahead block) and the diagnostics of their lookahead blocks."""
    models: list[GrpsModel] = []
    out: list[Diagnostic] = []
    for index, item in enumerate(doc.data.get("models") or []):
        if not isinstance(item, dict) or "inferer_args" not in item:
            continue
        loc = ("models", index, "inferer_args")
        args = item.get("inferer_args")
        if args is None:
            continue
        if not isinstance(args, dict):
            out.append(doc.diagnostic("error", "inferer_args is not a mapping", loc=loc, code="grps-inferer-args",
                                      hint="inferer_args holds key: value settings"))
            continue
        if not any(key in args for key in _LLM_KEYS):
            continue
        spec, block_diags = _read_lookahead_block(doc, args, loc)
        out += _misspelled_args(doc, args, loc) + block_diags
        # yaml-cpp: a key with no value is a Null node, which is defined; grps's `if (config["lookahead_decoding"])`
        # (src/trtllm_model_instance.cc) is true for it and its GetParameter then refuses "not a map"
        models.append(GrpsModel(index=index, name=item.get("name"), loc=loc, args=args, spec=spec,
                                has_lookahead_block="lookahead_decoding" in args))
    if not models and not out:
        out.append(doc.diagnostic(
            "error", "no TensorRT-LLM model in this grps config: no models[*].inferer_args names gpt_model_path, "
                     "tokenizer_path or lookahead_decoding", loc=("models",), code="grps-no-model",
            hint="is this a grps_trtllm inference_*.yml?"))
    return models, out


def _misspelled_args(doc: YamlDocument, args: dict[str, Any], loc: Loc) -> list[Diagnostic]:
    """A key grps_trtllm does not read that is a near spelling of one it does (``lookahead_decodng``): grps ignores
    it without a word, so the setting the user meant never applies (a misspelled ``lookahead_decoding`` serves
    without lookahead). Keys far from every known one are left alone: they may be read by a grps newer than the
    sources read (:data:`GRPS_INFERER_ARGS_KEYS`)."""
    out = []
    for key in args:
        if str(key) in GRPS_INFERER_ARGS_KEYS:
            continue
        close = difflib.get_close_matches(str(key), GRPS_INFERER_ARGS_KEYS, n=1, cutoff=0.85)
        if close:
            what = ("the server runs without lookahead" if close[0] == "lookahead_decoding"
                    else "its value never applies")
            out.append(doc.diagnostic(
                "warning", f"grps_trtllm reads no key {key!r} (it ignores unknown keys without a word): {what}",
                loc=(*loc, key), key=True, code="grps-unknown-key", hint=f"did you mean {close[0]!r}?"))
    return out


def _block_entry(doc: YamlDocument, key: Any, value: Any, key_loc: Loc,
                 alias_of: dict[str, str]) -> tuple[int | None, Diagnostic | None]:
    """One entry of the lookahead_decoding block as grps reads it: (its int32, None) for a canonical key holding an
    int32, else (None, why grps fails to load it or does not see it)."""
    if key in GRPS_LOOKAHEAD_KEYS:
        number = yaml_cpp_number(value, int)
        if number is not None:
            return int(number), None
        return None, doc.diagnostic(
            "error", f"{key} is {value!r}, not an int32: grps_trtllm fails to load with "
                     f"\"{_extract_error(key, int)}\" (src/trtllm_model_state.cc, YAML_TRY_EXTRACT)",
            loc=key_loc, code="grps-lookahead", hint="an integer, e.g. 4")
    if str(key) in alias_of:
        canonical = alias_of[str(key)]
        return None, doc.diagnostic(
            "error", f"grps_trtllm reads {canonical!r}, not {key!r}: this value would be ignored", loc=key_loc,
            key=True, code="grps-lookahead-key", hint=f"rename {key!r} to {canonical!r}")
    return None, doc.diagnostic(
        "warning", f"unknown key {key!r} in lookahead_decoding: grps_trtllm ignores it", loc=key_loc,
        key=True, code="grps-lookahead-key",
        hint=did_you_mean(str(key), GRPS_LOOKAHEAD_KEYS) + "grps reads window_size, ngram_size, "
             "verification_set_size")


def _read_lookahead_block(doc: YamlDocument, args: dict[str, Any], loc: Loc
                          ) -> tuple[LookaheadSpec | None, list[Diagnostic]]:
    """Exactly grps's reading: the three canonical keys, integers; other spellings are errors because
    grps would not see them."""
    block_loc = (*loc, "lookahead_decoding")
    if "lookahead_decoding" not in args:
        return None, []
    block = args.get("lookahead_decoding")
    if not isinstance(block, dict):
        shown = "empty (a null node)" if block is None else f"{type(block).__name__} {block!r}"
        return None, [doc.diagnostic(
            "error", f"lookahead_decoding is {shown}, not a mapping: grps_trtllm fails to load with \"Failed to "
                     "parse `lookahead_decoding` conf, not a map, conf_name: lookahead_decoding\" "
                     "(src/trtllm_model_state.cc, GetParameter<LookaheadDecodingConfig>)", loc=block_loc,
            code="grps-lookahead",
            hint="write it as\n    lookahead_decoding:\n      window_size: 4\n      ngram_size: 2\n"
                 "      verification_set_size: 4\nor remove the key to serve without lookahead")]
    out: list[Diagnostic] = []
    alias_of = {a: f for f, aliases in FIELD_ALIASES.items() for a in aliases if a != f}
    values: dict[str, int] = {}
    for key, value in block.items():
        number, problem = _block_entry(doc, key, value, (*block_loc, key), alias_of)
        if problem is not None:
            out.append(problem)
        else:
            values[key] = number
    for key in GRPS_LOOKAHEAD_KEYS:
        if key not in block and not any(alias_of.get(str(k)) == key for k in block):
            out.append(doc.diagnostic(
                "error", f"lookahead_decoding has no {key}: grps_trtllm fails to load with "
                         f"\"{_extract_error(key, int)}\" (src/trtllm_model_state.cc, "
                         "GetParameter<LookaheadDecodingConfig>)", loc=block_loc, code="grps-lookahead",
                hint="give all three: window_size, ngram_size, verification_set_size"))
    if len(values) < 3 or any(d.severity == "error" for d in out):
        return None, out
    try:
        spec = LookaheadSpec(values["window_size"], values["ngram_size"], values["verification_set_size"])
    except SpecError as exc:
        field_loc = (*block_loc, exc.field) if exc.field in block else block_loc
        return None, out + [doc.diagnostic(
            "error", f"illegal (W,N,G): {exc.message}", loc=field_loc, hint=exc.hint, code="spec-illegal",
            path=".".join(map(str, (*block_loc, exc.field))) if exc.field else None)]
    return spec, out + spec_warnings(doc, spec, block_loc)


def check_grps(doc: YamlDocument, *, engine_dir: Path | None = None) -> list[Diagnostic]:
    """Every check of a grps config; ``engine_dir`` overrides each model's ``gpt_model_path``."""
    models, out = read_grps_models(doc)
    for model in models:
        out += _check_loader(doc, model)
        out += _check_required(doc, model)
        out += _check_model_type(doc, model)
        out += _check_decoding_mode(doc, model)
        out += _check_sampling(doc, model)
        out += _check_scalars(doc, model)
        out += _check_engine(doc, model, engine_dir)
    return out


def _check_loader(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    """What grps_trtllm's loader reads with no fallback, and where it silently falls back."""
    return [*_check_llm_style(doc, model), *_check_tokenizer(doc, model), *_check_stopping(doc, model),
            *_check_engine_path(doc, model)]


def _check_llm_style(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    # src/customized_inferer.cc, TrtllmInferer::Load: GetParameter<std::string>("llm_style") outside any try;
    # src/trtllm_model_state.cc, YAML_TRY_EXTRACT throws "Failed to parse conf, conf_name: llm_style, data_type:
    # std::string, err: <yaml-cpp's text>"
    value, loc = model.arg("llm_style"), (*model.loc, "llm_style")
    names = ", ".join(GRPS_LLM_STYLES)
    if value is None or (isinstance(value, str) and not value.strip()):
        return [doc.diagnostic(
            "error", "llm_style is not set: grps_trtllm reads it with no fallback and fails to load with "
                     "\"Failed to parse conf, conf_name: llm_style, data_type: std::string, err: ...\" "
                     "(src/customized_inferer.cc, TrtllmInferer::Load)",
            loc=model.loc if "llm_style" not in model.args else loc, code="grps-llm-style",
            hint=f"set llm_style to the model's chat style, one of: {names}")]
    if not isinstance(value, str) or value not in GRPS_LLM_STYLES:
        return [doc.diagnostic(
            "error", f"llm_style {value!r} is not one grps_trtllm knows: it fails to load with \"LLM style "
                     f"{value} not supported now.\" (src/llm_styler.cc, LLMStylerFactory::CreateLLMStyler)", loc=loc,
            code="grps-llm-style", hint=did_you_mean(str(value), GRPS_LLM_STYLES) + f"one of: {names}")]
    return []


def _check_tokenizer(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    out = []
    value, loc = model.arg("tokenizer_type"), (*model.loc, "tokenizer_type")
    if value is None or (isinstance(value, str) and not value.strip()):
        said = ("Load tokenizer failed: tokenizer_type is not specified." if "tokenizer_type" in model.args else
                "Load tokenizer failed: Failed to parse conf, conf_name: tokenizer_type, data_type: std::string, "
                "err: ...")
        out.append(doc.diagnostic(
            "error", f"tokenizer_type is not set: grps_trtllm fails to load with \"{said}\" "
                     "(src/customized_inferer.cc, TrtllmInferer::Load)",
            loc=model.loc if "tokenizer_type" not in model.args else loc, code="grps-tokenizer",
            hint="tokenizer_type: huggingface (a folder with tokenizer.json) or sentencepiece (tokenizer.model)"))
    elif value not in GRPS_TOKENIZER_TYPES:
        out.append(doc.diagnostic(
            "error", f"tokenizer_type {value!r}: grps_trtllm fails with \"Load tokenizer failed: Unsupported "
                     f"tokenizer type: {value}\" "
                     "(src/tokenizer.cc, MultiInstanceTokenizer::Load)", loc=loc, code="grps-tokenizer",
            hint="huggingface or sentencepiece"))
    parallelism, ploc = model.arg("tokenizer_parallelism"), (*model.loc, "tokenizer_parallelism")
    number = yaml_cpp_number(parallelism, int)
    if parallelism is not None and number is None:
        out.append(doc.diagnostic(
            "warning", f"tokenizer_parallelism {parallelism!r} is not an int32: grps logs a warning and uses 8 "
                       "(src/customized_inferer.cc, TrtllmInferer::Load)", loc=ploc, code="grps-tokenizer",
            hint="an integer >= 1, e.g. 16"))
    elif number is not None and number < 1:
        out.append(doc.diagnostic(
            "error", f"tokenizer_parallelism {parallelism}: grps fails with \"tokenizer_parallelism should be "
                     "greater than 0.\" (src/tokenizer.cc, MultiInstanceTokenizer::Load)", loc=ploc,
            code="grps-tokenizer", hint="an integer >= 1, e.g. 16"))
    skip, sloc = model.arg("skip_special_tokens"), (*model.loc, "skip_special_tokens")
    if skip is not None and (not isinstance(skip, list)
                             or not all(isinstance(t, int) and not isinstance(t, bool) for t in skip)):
        out.append(doc.diagnostic(
            "warning", f"skip_special_tokens is {skip!r}: grps reads a list of token ids (int32) and otherwise "
                       "uses an empty list, so no special token is skipped (src/customized_inferer.cc)", loc=sloc,
            code="grps-tokenizer", hint="list the special token ids to hide, e.g. [151643, 151644, 151645]"))
    return out


def _check_stopping(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    """Where grps falls back silently to running until max_tokens (src/utils.cc passes the tokenizer's end
    id, which is null without end_token_id)."""
    out = []
    if model.arg("end_token_id") is None:
        out.append(doc.diagnostic(
            "warning", "no end_token_id: grps logs \"end_token_id is not specified, will use default value of "
                       "null\" and sends requests with no end id, so generation runs to max_tokens unless a stop "
                       "word matches (src/customized_inferer.cc, src/utils.cc)", loc=model.loc,
            code="grps-no-end-id", hint="end_token_id: the tokenizer's EOS id, e.g. 151645 (<|im_end|>) for Qwen3"))
    stop = model.arg("stop_words")
    if stop is None or stop == []:
        out.append(doc.diagnostic(
            "warning", "no stop_words: grps stops only on end_token_id; chat models that end a turn with another "
                       "token (e.g. <|im_start|>) run on (src/trtllm_model_instance.cc reads stop_words, default "
                       "empty)", loc=model.loc if "stop_words" not in model.args else (*model.loc, "stop_words"),
            code="grps-no-stop-words", hint='e.g. stop_words: ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]'))
    return out


def _check_engine_path(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    # src/trtllm_model_instance.cc, TrtLlmModelInstance::TrtLlmModelInstance reads gpt_model_path + "config.json"
    path = model.gpt_model_path
    if isinstance(path, str) and path.strip() and not path.strip().endswith("/"):
        return [doc.diagnostic(
            "error", f"gpt_model_path {path!r} does not end with '/': grps opens gpt_model_path + \"config.json\" "
                     f"({path.strip()}config.json) and fails to load (src/trtllm_model_instance.cc)",
            loc=(*model.loc, "gpt_model_path"), code="grps-engine-path", hint=f"write {path.strip()}/")]
    return []


def _check_required(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    out = []
    for key in ("gpt_model_path", "tokenizer_path"):
        value = model.arg(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            out.append(doc.diagnostic("error", f"{key} is not set; grps_trtllm requires it", loc=(*model.loc, key),
                                      code="grps-required",
                                      hint="the engine directory" if key == "gpt_model_path" else
                                      "the Hugging Face tokenizer directory"))
        elif not isinstance(value, str):
            out.append(doc.diagnostic("error", f"{key} is {value!r}, not a path", loc=(*model.loc, key),
                                      code="grps-required", hint="write a directory path"))
    return out


def _check_model_type(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    value, loc = model.gpt_model_type, (*model.loc, "gpt_model_type")
    if value is None:
        return [doc.diagnostic("error", "gpt_model_type is not set; grps_trtllm requires it", loc=loc,
                               code="grps-model-type", hint="gpt_model_type: inflight_fused_batching")]
    if value in INFLIGHT_MODEL_TYPES:
        return []
    if value in V1_MODEL_TYPES:
        if model.has_lookahead_block:
            return [doc.diagnostic(
                "error", f"gpt_model_type {value} is not in-flight batching; lookahead needs the in-flight "
                         "batching executor", loc=loc, code="grps-model-type",
                hint="gpt_model_type: inflight_fused_batching")]
        return []
    return [doc.diagnostic("error", f"gpt_model_type {value!r} is not one grps_trtllm accepts (it fails with "
                                    "'Invalid gpt_model_type')", loc=loc, code="grps-model-type",
                           hint="use inflight_fused_batching (or inflight_batching; V1 has no lookahead)")]


def _check_decoding_mode(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    value, loc = model.decoding_mode, (*model.loc, "decoding_mode")
    if value is None:
        return []
    text = str(value).strip().lower()
    is_lookahead_word = text in ("lookahead", "lookahead_decoding")
    if not model.has_lookahead_block:
        if is_lookahead_word:
            return [doc.diagnostic(
                "warning", f"decoding_mode {value!r} asks for lookahead but there is no lookahead_decoding block: "
                           "grps logs 'decoding_mode parameter is invalid', uses the default and the executor gets "
                           "no lookahead config (src/trtllm_model_instance.cc)", loc=loc,
                code="grps-decoding-mode",
                hint="add lookahead_decoding: {window_size: W, ngram_size: N, verification_set_size: G} "
                     "matching the engine's max_draft_len")]
        if text not in GRPS_DECODING_MODES:
            return [doc.diagnostic(
                "warning", f"decoding_mode {value!r} is unknown to grps_trtllm: it logs a warning and uses the "
                           "default (top_k_top_p)", loc=loc, code="grps-decoding-mode",
                hint=f"one of {', '.join(GRPS_DECODING_MODES)}, or leave it empty")]
        return []
    if text in ("beam_search", "medusa"):
        # src/trtllm_model_instance.cc: DecodingConfig(decoding_mode), then setLookaheadDecoding(...), which sets
        # the mode to Lookahead (TensorRT-LLM decodingConfig.cpp): grps loads and runs lookahead
        return [doc.diagnostic(
            "warning", f"decoding_mode {value} has no effect beside the lookahead_decoding block: grps's "
                       "setLookaheadDecoding replaces the mode with Lookahead, which decodes greedily with one beam "
                       "(src/trtllm_model_instance.cc)", loc=loc, code="grps-decoding-mode",
            hint="leave decoding_mode empty; the lookahead_decoding block selects lookahead")]
    if is_lookahead_word:
        return [doc.diagnostic(
            "warning", f"decoding_mode {value!r} is not a value grps_trtllm reads: it logs 'decoding_mode "
                       "parameter is invalid' (the lookahead_decoding block alone selects lookahead)", loc=loc,
            code="grps-decoding-mode", hint="leave decoding_mode empty")]
    if text in GRPS_DECODING_MODES:
        return [doc.diagnostic(
            "warning", f"decoding_mode {value} has no effect: the lookahead_decoding block switches the executor "
                       "to lookahead, which takes the top-1 token", loc=loc, code="grps-decoding-mode",
            hint="leave decoding_mode empty so the config says what runs")]
    return [doc.diagnostic(
        "warning", f"decoding_mode {value!r} is unknown to grps_trtllm (it logs a warning and ignores it)",
        loc=loc, code="grps-decoding-mode", hint="leave decoding_mode empty")]


def _check_sampling(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    sampling, loc = model.sampling, (*model.loc, "sampling")
    if sampling is None:
        return []
    if not isinstance(sampling, dict):
        return [doc.diagnostic("error", f"sampling is {sampling!r}, not a mapping", loc=loc, code="grps-sampling",
                               hint="sampling: {temperature: ..., top_k: ..., top_p: ...}")]
    out = []
    numbers: dict[str, int | float] = {}
    for key, value in sampling.items():
        kind = GRPS_SAMPLING_TYPES.get(str(key))
        if kind is None:
            continue
        number = yaml_cpp_number(value, kind)
        if number is None:
            out.append(doc.diagnostic(
                "error", f"sampling.{key} is {value!r}, not {'an int32' if kind is int else 'a float'}: grps fails to "
                         f"load with \"{_extract_error(str(key), kind)}\" (src/trtllm_model_state.cc, "
                         "GetParameter<SamplingConfig>)", loc=(*loc, key), code="grps-sampling",
                hint="write a number, or remove the key"))
        else:
            numbers[str(key)] = number
    out += _sampling_ranges(doc, numbers, loc, written=sampling)
    if any(d.severity == "error" for d in out):
        return out
    beam = numbers.get("beam_width")
    if model.has_lookahead_block and isinstance(beam, int) and beam > 1:
        out.append(doc.diagnostic("error", f"sampling.beam_width {beam}: lookahead needs beam width 1",
                                  loc=(*loc, "beam_width"), code="grps-sampling", hint="remove beam_width or set 1"))
    if not model.has_lookahead_block:
        return out
    ignored = [(k, v) for k, v in sampling.items() if k in IGNORED_SAMPLING_KEYS and v is not None
               and not (k == "top_k" and v == 1)]
    if ignored:
        shown = ", ".join(f"{k} {v}" for k, v in ignored)
        hint = ("lookahead always takes the top-1 token; remove these settings so the config says what runs, "
                "or drop the lookahead block if sampling matters")
        if model.arg("enable_thinking") is True or str(model.arg("llm_style", "")).startswith("qwen3"):
            hint += ("; Qwen3's model card advises against greedy decoding in thinking mode (endless "
                     "repetitions): check outputs, or set enable_thinking: false")
        out.append(doc.diagnostic(
            "warning", f"sampling settings {shown} are ignored: lookahead decodes greedily", loc=loc,
            code="grps-sampling-ignored", hint=hint))
    return out


@dataclass(frozen=True)
class SamplingRange:
    """One check of TensorRT-LLM's ``SamplingConfig`` constructor (cpp/tensorrt_llm/executor/samplingConfig.cpp,
    ``SamplingConfig::check*``), which the config grps builds from ``sampling`` goes through at load.
    ``condition`` is the C++ text TLLM_CHECK prints ("Assertion failed: <condition>"); ``everywhere``:
    refused in every release read (the oldest stored file and the 1.x one); otherwise only in some, and
    validate-config warns instead of failing a config some releases load."""

    key: str
    allowed: str
    ok: Any
    condition: str
    everywhere: bool = True
    note: str = ""


_SAMPLING_RANGES: tuple[SamplingRange, ...] = (
    SamplingRange("beam_width", "> 0", lambda v: v > 0, "beamWidth > 0"),
    SamplingRange("top_k", ">= 0", lambda v: v >= 0, "topK.value() >= 0"),
    SamplingRange("top_p", "<= 1", lambda v: v <= 1, "topP.value() <= 1.f"),  # <= 0: grps unsets it, below
    SamplingRange("top_p_min", ">= 0 and <= 1", lambda v: 0 <= v <= 1, "topPMin.value() <= 1.f"),
    SamplingRange("top_p_min", "> 0", lambda v: v > 0, "topPMin.value() > 0.f", everywhere=False,
                  note="the oldest release read (0.12 or before) checks > 0, 2025's pre-1.0 text and 1.x check >= 0; "
                       "0.16's C++ was not published"),
    SamplingRange("top_p_decay", "> 0 and <= 1", lambda v: 0 < v <= 1, "topPDecay.value() > 0.f"),
    SamplingRange("top_p_reset_ids", ">= 0", lambda v: v >= 0, "topPResetIds.value() >= 0"),
    SamplingRange("temperature", ">= 0", lambda v: v >= 0, "temperature.value() >= 0.f"),
    SamplingRange("min_length", ">= 0", lambda v: v >= 0, "minLength.value() >= 0"),
    SamplingRange("beam_search_diversity_rate", ">= 0", lambda v: v >= 0, "beamSearchDiversityRate.value() >= 0.f"),
    SamplingRange("repetition_penalty", "> 0", lambda v: v > 0, "penalty.value() > 0.f"),
    SamplingRange("no_repeat_ngram_size", ">= 0", lambda v: v >= 0, "noRepeatNgramSize.value() >= 0"),
    SamplingRange("no_repeat_ngram_size", "> 0", lambda v: v > 0, "noRepeatNgramSize.value() > 0",
                  everywhere=False, note="releases before 1.0 check > 0, 1.x checks >= 0"),
    SamplingRange("length_penalty", ">= 0", lambda v: v >= 0, "lengthPenalty.value() >= 0.f", everywhere=False,
                  note="checked by 1.x (checkLengthPenalty), not by the older release read"),
    SamplingRange("early_stopping", ">= 0", lambda v: v >= 0, "earlyStopping.value() >= 0", everywhere=False,
                  note="checked by 1.x (checkEarlyStopping), not by the older release read"),
)


def _sampling_ranges(doc: YamlDocument, sampling: dict[str, int | float], loc: Loc,
                     written: dict[str, Any]) -> list[Diagnostic]:
    """``sampling``: the values as numbers (yaml-cpp's reading); ``written``: as the file has them (shown)."""
    out: list[Diagnostic] = []
    flagged: set[str] = set()
    for rule in _SAMPLING_RANGES:
        value = sampling.get(rule.key)
        if value is None or rule.ok(value) or rule.key in flagged:
            continue
        flagged.add(rule.key)
        value = written.get(rule.key, value)
        said = f"\"[TensorRT-LLM][ERROR] Assertion failed: {rule.condition}\""
        if rule.everywhere:
            out.append(doc.diagnostic(
                "error", f"sampling.{rule.key} is {value}; TensorRT-LLM's SamplingConfig requires {rule.allowed} and "
                         f"grps fails to load with {said} (cpp/tensorrt_llm/executor/samplingConfig.cpp)",
                loc=(*loc, rule.key), code="grps-sampling", hint=f"a value {rule.allowed}"))
        else:
            out.append(doc.diagnostic(
                "warning", f"sampling.{rule.key} is {value}: some TensorRT-LLM releases refuse it at load with {said} "
                           f"({rule.note}; cpp/tensorrt_llm/executor/samplingConfig.cpp)",
                loc=(*loc, rule.key), code="grps-sampling", hint=f"a value {rule.allowed} loads everywhere"))
    top_p = sampling.get("top_p")
    if top_p is not None and top_p <= 0:
        out.append(doc.diagnostic(
            "info", f"sampling.top_p is {written.get('top_p')}: grps treats top_p <= 0 as unset "
                    "(src/trtllm_model_state.cc, GetParameter<SamplingConfig>; src/utils.cc does the same per request)",
            loc=(*loc, "top_p"), code="grps-sampling", hint="remove it, or leave it: it means no top-p"))
    return out


def _check_scalars(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    out = []
    raw = model.arg("kv_cache_free_gpu_mem_fraction")
    fraction = yaml_cpp_number(raw, float)
    where = (*model.loc, "kv_cache_free_gpu_mem_fraction")
    if raw is not None and fraction is None:
        # src/trtllm_model_instance.cc, GetKvCacheConfigFromParams: read in a try, a failure only logs
        out.append(doc.diagnostic("warning", f"kv_cache_free_gpu_mem_fraction is {raw!r}, not a float: grps logs "
                                  "\"kv_cache_free_gpu_mem_fraction is not specified, will use default value of 0.9\" "
                                  "and goes on (src/trtllm_model_instance.cc)", loc=where, code="grps-value",
                                  hint="e.g. 0.9 (the grps default)"))
    elif fraction is not None and not 0 < fraction < 1:
        out.append(doc.diagnostic("error", f"kv_cache_free_gpu_mem_fraction is {raw!r}; allowed: 0 < value < 1 "
                                  "(TensorRT-LLM's KvCacheConfig::setFreeGpuMemoryFraction refuses 1.0 and more)",
                                  loc=where, code="grps-value", hint="e.g. 0.9 (the grps default)"))
    for key in ("end_token_id", "pad_token_id"):
        value = model.arg(key)
        number = yaml_cpp_number(value, int)
        if value is not None and number is None:
            # src/customized_inferer.cc, TrtllmInferer::Load: read in a try; a failure logs and uses null
            out.append(doc.diagnostic("warning", f"{key} is {value!r}, not an int32: grps logs \"{key} is not "
                                      "specified, will use default value of null.\" and goes on without it "
                                      "(src/customized_inferer.cc)", loc=(*model.loc, key), code="grps-value",
                                      hint="take it from the tokenizer, e.g. <|im_end|> = 151645 for Qwen3"))
        elif number is not None and number < -1:
            out.append(doc.diagnostic("error", f"{key} is {value!r}: TensorRT-LLM refuses every request with "
                                      "\"EndId (...) is not within acceptable range [-1, vocab)\" "
                                      "(cpp/tensorrt_llm/batch_manager/llmRequest.cpp, LlmRequest::validate)",
                                      loc=(*model.loc, key), code="grps-value",
                                      hint="take it from the tokenizer, e.g. <|im_end|> = 151645 for Qwen3"))
    stop = model.arg("stop_words")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(w, str) for w in stop)):
        out.append(doc.diagnostic("error", "stop_words is not a list of strings", loc=(*model.loc, "stop_words"),
                                  code="grps-value", hint='e.g. ["<|im_end|>", "<|endoftext|>"]'))
    return out


def _check_engine(doc: YamlDocument, model: GrpsModel, override: Path | None) -> list[Diagnostic]:
    path_loc = (*model.loc, "gpt_model_path")
    block_loc = (*model.loc, "lookahead_decoding")
    if override is not None:
        engine_dir = override
    elif isinstance(model.gpt_model_path, str) and model.gpt_model_path.strip():
        written = Path(model.gpt_model_path.strip()).expanduser()
        engine_dir = written if written.is_absolute() else display_path((doc.base_dir / written).resolve())
        if not engine_dir.exists():
            return [doc.diagnostic(
                "info", f"gpt_model_path {model.gpt_model_path} does not exist here: engine checks skipped",
                loc=path_loc, code="engine-dir-absent",
                hint="pass --engine-dir DIR to check against the engine (a copy of its config.json is enough)")]
    else:
        return []
    if model.spec is not None:
        found = engine_diagnostics(doc, model.spec, engine_dir, spec_loc=block_loc, where_loc=path_loc,
                                   from_cli=override is not None)
        return found + _autoregressive_block_on_plain_engine(doc, model, engine_dir, found)
    if model.has_lookahead_block:
        return []  # the block is broken; its own diagnostics say so
    try:
        engine = read_engine_config(engine_dir)
    except EngineConfigError as exc:
        if override is not None:
            return [Diagnostic("error", exc.message, hint=exc.hint, path="--engine-dir", file=str(engine_dir),
                               code="engine-unreadable")]
        return [doc.diagnostic("error", f"cannot read the engine: {exc.message}", loc=path_loc, hint=exc.hint,
                               code="engine-unreadable")]
    if not engine.is_lookahead:
        return []
    fits = specs_fitting_engine(engine)
    example = fits[0] if fits else None
    block = (f"lookahead_decoding: {{window_size: {example.window_size}, ngram_size: {example.ngram_size}, "
             f"verification_set_size: {example.verification_set_size}}}" if example else "a lookahead_decoding block")
    return [doc.diagnostic(
        "error", f"the engine {engine_dir} was built for lookahead (max_draft_len {engine.max_draft_len}) but this "
                 f"model has no lookahead_decoding block: {missing_config_consequence(engine.max_draft_len)}",
        loc=model.loc, code="grps-lookahead-missing",
        hint=f"add {block}" + (f" (other specs that fit: {', '.join(f'({s})' for s in fits[1:])})"
                               if len(fits) > 1 else ""))]


def _autoregressive_block_on_plain_engine(doc: YamlDocument, model: GrpsModel, engine_dir: Path,
                                          found: list[Diagnostic]) -> list[Diagnostic]:
    """A (1,1,0) block on an engine built without lookahead: grps's setLookaheadDecoding sets the Lookahead
    mode, and TensorRT-LLM replaces it (getDecodingMode in cpp/tensorrt_llm/batch_manager/
    trtGptModelInflightBatching.cpp logs "Model is not built with Lookahead decoding, but decoding mode is
    Lookahead. Overwriting decoding mode.") and serves plainly: the block does nothing."""
    if model.spec is None or not model.spec.is_autoregressive or any(d.severity == "error" for d in found):
        return []
    try:
        engine = read_engine_config(engine_dir)
    except EngineConfigError:
        return []
    if engine.is_lookahead:
        return []
    return [doc.diagnostic(
        "warning", "lookahead_decoding (1,1,0) on an engine built without lookahead does nothing: grps's "
                   "setLookaheadDecoding sets the Lookahead mode and TensorRT-LLM replaces it with a warning "
                   "(\"Model is not built with Lookahead decoding, but decoding mode is Lookahead. Overwriting "
                   "decoding mode.\", trtGptModelInflightBatching.cpp, getDecodingMode); the engine serves plainly",
        loc=(*model.loc, "lookahead_decoding"), code="grps-lookahead-noop",
        hint="remove the lookahead_decoding block: that is the plain baseline, without the warning")]

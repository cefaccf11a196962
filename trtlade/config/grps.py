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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtlade.config.checks import display_path, engine_diagnostics, spec_warnings
from trtlade.config.loader import Loc, YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.spec import FIELD_ALIASES, FIELDS, LookaheadSpec, SpecError
from trtlade.trtllm.engine_config import EngineConfigError, read_engine_config, specs_fitting_engine

__all__ = [
    "GRPS_LOOKAHEAD_KEYS",
    "GRPS_DECODING_MODES",
    "INFLIGHT_MODEL_TYPES",
    "V1_MODEL_TYPES",
    "IGNORED_SAMPLING_KEYS",
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
        out += block_diags
        models.append(GrpsModel(index=index, name=item.get("name"), loc=loc, args=args, spec=spec,
                                has_lookahead_block=args.get("lookahead_decoding") is not None))
    if not models and not out:
        out.append(doc.diagnostic(
            "error", "no TensorRT-LLM model in this grps config: no models[*].inferer_args names gpt_model_path, "
                     "tokenizer_path or lookahead_decoding", loc=("models",), code="grps-no-model",
            hint="is this a grps_trtllm inference_*.yml?"))
    return models, out


def _read_lookahead_block(doc: YamlDocument, args: dict[str, Any], loc: Loc
                          ) -> tuple[LookaheadSpec | None, list[Diagnostic]]:
    """Exactly grps's reading: the three canonical keys, integers; other spellings are errors because
    grps would not see them."""
    block_loc = (*loc, "lookahead_decoding")
    block = args.get("lookahead_decoding")
    if block is None:
        return None, []
    if not isinstance(block, dict):
        return None, [doc.diagnostic(
            "error", f"lookahead_decoding is {type(block).__name__} {block!r}, not a mapping; grps fails with "
                     "\"Failed to parse `lookahead_decoding` conf, not a map\"", loc=block_loc, code="grps-lookahead",
            hint="write it as\n    lookahead_decoding:\n      window_size: 4\n      ngram_size: 2\n"
                 "      verification_set_size: 4")]
    out: list[Diagnostic] = []
    alias_of = {a: f for f, aliases in FIELD_ALIASES.items() for a in aliases if a != f}
    values: dict[str, int] = {}
    for key, value in block.items():
        key_loc = (*block_loc, key)
        if key in GRPS_LOOKAHEAD_KEYS:
            if isinstance(value, bool) or not isinstance(value, int):
                out.append(doc.diagnostic("error", f"{key} is {value!r}, not an integer", loc=key_loc,
                                          code="grps-lookahead", hint="grps reads it as int32"))
            else:
                values[key] = value
        elif str(key) in alias_of:
            canonical = alias_of[str(key)]
            out.append(doc.diagnostic(
                "error", f"grps_trtllm reads {canonical!r}, not {key!r}: this value would be ignored", loc=key_loc,
                key=True, code="grps-lookahead-key", hint=f"rename {key!r} to {canonical!r}"))
        else:
            close = difflib.get_close_matches(str(key), GRPS_LOOKAHEAD_KEYS, n=1, cutoff=0.6)
            out.append(doc.diagnostic(
                "warning", f"unknown key {key!r} in lookahead_decoding: grps_trtllm ignores it", loc=key_loc,
                key=True, code="grps-lookahead-key",
                hint=(f"did you mean {close[0]!r}? " if close else "") + "grps reads window_size, ngram_size, "
                     "verification_set_size"))
    for key in GRPS_LOOKAHEAD_KEYS:
        if key not in block and not any(alias_of.get(str(k)) == key for k in block):
            out.append(doc.diagnostic(
                "error", f"lookahead_decoding has no {key}: grps fails at start with \"Failed to parse conf, "
                         f"conf_name: kLookahead...\"", loc=block_loc, code="grps-lookahead",
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
        out += _check_required(doc, model)
        out += _check_model_type(doc, model)
        out += _check_decoding_mode(doc, model)
        out += _check_sampling(doc, model)
        out += _check_scalars(doc, model)
        out += _check_engine(doc, model, engine_dir)
    return out


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
                "error", f"decoding_mode {value!r} asks for lookahead but there is no lookahead_decoding block: "
                         "grps ignores the value and the executor gets no lookahead config", loc=loc,
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
        return [doc.diagnostic(
            "error", f"decoding_mode {value} conflicts with the lookahead_decoding block: lookahead decodes "
                     "greedily with one beam", loc=loc, code="grps-decoding-mode",
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
    beam = sampling.get("beam_width")
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


def _check_scalars(doc: YamlDocument, model: GrpsModel) -> list[Diagnostic]:
    out = []
    fraction = model.arg("kv_cache_free_gpu_mem_fraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 < fraction <= 1):
        out.append(doc.diagnostic("error", f"kv_cache_free_gpu_mem_fraction is {fraction!r}; allowed: 0 < value <= 1",
                                  loc=(*model.loc, "kv_cache_free_gpu_mem_fraction"), code="grps-value",
                                  hint="e.g. 0.9 (the grps default)"))
    for key in ("end_token_id", "pad_token_id"):
        value = model.arg(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            out.append(doc.diagnostic("error", f"{key} is {value!r}, not a token id (an integer >= 0)",
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
        return engine_diagnostics(doc, model.spec, engine_dir, spec_loc=block_loc, where_loc=path_loc,
                                  from_cli=override is not None)
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
    default = LookaheadSpec(4, 3, 4)
    trap = ("" if engine.max_draft_len == default.max_draft_len else
            f"; servers that fill in the default ({default}) fail with 'Assertion failed: "
            f"{default.decoding_tokens} != {engine.max_draft_len + 1}'")
    return [doc.diagnostic(
        "error", f"the engine {engine_dir} was built for lookahead (max_draft_len {engine.max_draft_len}) but this "
                 "model has no lookahead_decoding block: TensorRT-LLM fails at start with 'Lookahead decoding config "
                 f"must be provided' ('bad optional access' in older versions){trap}",
        loc=model.loc, code="grps-lookahead-missing",
        hint=f"add {block}" + (f" (other specs that fit: {', '.join(f'({s})' for s in fits[1:])})"
                               if len(fits) > 1 else ""))]

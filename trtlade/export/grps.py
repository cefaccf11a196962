"""``trtlade export grps``: a grps_trtllm inference yml from a bundle, with every key grps_trtllm's loader
reads with no fallback, and the stopping keys a chat model needs.

Read from grps_trtllm's sources at the commit that adds lookahead (NetEase-Media/grps_trtllm fb941b5):

- ``src/customized_inferer.cc``, ``TrtllmInferer::Load``: ``tokenizer_type`` and ``tokenizer_path``
  (thrown when empty), ``llm_style`` (no fallback: "Failed to parse conf, conf_name: llm_style"),
  ``end_token_id`` / ``pad_token_id`` (int32, null when absent), ``skip_special_tokens`` (a list of ids);
- ``src/llm_styler.cc``, ``LLMStylerFactory::CreateLLMStyler``: the 23 style names
  (:data:`trtlade.config.grps.GRPS_LLM_STYLES`);
- ``src/trtllm_model_instance.cc``: ``gpt_model_type`` (no fallback), ``gpt_model_path`` + "config.json"
  (so the path ends with "/"), ``stop_words`` (strings), ``sampling`` (the default SamplingConfig),
  ``lookahead_decoding`` (three int32);
- ``src/utils.cc``: a request's end id is the tokenizer's ``end_token_id``, null without it, so a chat
  model would run to max_tokens.

grps_trtllm builds on TensorRT-LLM 0.16.0 (its README: ``trtllm0.16.0`` images, its trtllm dependency at the 0.16.0
release; ``docker/Dockerfile``: the ``trtllm0.16.0`` image, at dea3898 as at fb941b5), and a TensorRT engine loads
only under the release that built it, so an engine of another release is refused (:data:`GRPS_TRTLLM`).

grps_trtllm never passes a per-request lookahead config, so every request runs with the bundle's (W,N,G),
and a schedule in the bundle's config cannot apply there (the export says so in the file). The output is
checked with the checks ``trtlade validate-config`` runs, against the bundle's engine, before it is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from trtlade.config.grps import GRPS_LLM_STYLES, check_grps
from trtlade.config.loader import parse_yaml
from trtlade.export.common import CONTAINER_NOTE, ExportError, ExportSource, serve_not_carried
from trtlade.export.triton import engine_version

__all__ = ["GRPS_TRTLLM", "StyleRule", "STYLE_RULES", "llm_style_for", "TokenizerFacts", "tokenizer_facts",
           "grps_inference_yml", "check_engine_release"]

#: the TensorRT-LLM release line grps_trtllm runs (NetEase-Media/grps_trtllm@dea3898: README, docker/Dockerfile)
GRPS_TRTLLM = (0, 16)


def check_engine_release(version: Optional[str]) -> None:
    """Refuse an engine grps_trtllm cannot load: one built by a release other than :data:`GRPS_TRTLLM`'s line (an
    unknown version passes: the engine's config.json names none).

    >>> check_engine_release("0.16.0"), check_engine_release(None)
    (None, None)
    >>> try:
    ...     check_engine_release("0.19.0")
    ... except ExportError as exc:
    ...     print(exc.message[:72])
    the bundle's engine was built with TensorRT-LLM 0.19.0; grps_trtllm runs
    """
    release = engine_version(version)
    if release and release[:2] != GRPS_TRTLLM:
        line = ".".join(map(str, GRPS_TRTLLM))
        raise ExportError(f"the bundle's engine was built with TensorRT-LLM {version}; grps_trtllm runs TensorRT-LLM "
                          f"{line} (NetEase-Media/grps_trtllm: its README and docker image), and a TensorRT engine "
                          "loads only under the release that built it",
                          f"rebuild the engine with TensorRT-LLM {line} (trtlade build ... --trtllm-version {line}.0 "
                          "where it is installed), or serve it with `trtlade export triton` or `trtlade serve`")


@dataclass(frozen=True)
class StyleRule:
    """``model_type`` (HF config.json) and a marker in the chat template (None: any) -> an llm_style of
    src/llm_styler.cc. The first rule that matches wins; markers are what each style's own prompt builder
    writes (``LLMStylerFactory::CreateLLMStyler`` and the styler classes above it)."""

    model_type: str
    marker: Optional[str]
    style: str


STYLE_RULES: tuple[StyleRule, ...] = (
    StyleRule("qwen3", None, "qwen3"),
    StyleRule("qwen2", "\uff5cAssistant\uff5c", "deepseek-r1"),     # DeepSeek-R1-Distill-Qwen
    # QwQ (model_type qwen2): grps's own conf/inference_qwq*.yml use these; QwQPreviewStyler's system prompt is
    # the preview template's default, and QwQ-32B's template opens the answer with <think>
    StyleRule("qwen2", "You should think step-by-step", "qwq-preview"),
    StyleRule("qwen2", "<think>", "qwq"),
    StyleRule("qwen2", "You are Qwen, created by Alibaba Cloud", "qwen2.5"),
    StyleRule("qwen2", "<|im_start|>", "qwen"),                       # Qwen2: grps's own qwen2 config uses qwen
    StyleRule("qwen", None, "qwen"),
    StyleRule("llama", "\uff5cAssistant\uff5c", "deepseek-r1"),     # DeepSeek-R1-Distill-Llama
    StyleRule("llama", "<|start_header_id|>", "llama3"),
    StyleRule("phi3", "<|im_start|>", "phi4"),
    StyleRule("phi3", "<|assistant|>", "phi3"),
    StyleRule("gemma3_text", None, "gemma3"),
    StyleRule("gemma3", None, "gemma3"),
    StyleRule("internlm2", None, "internlm2"),
    StyleRule("chatglm", "[gMASK]<sop>", "glm4"),
    StyleRule("chatglm", None, "chatglm3"),
)


def llm_style_for(model_type: str, chat_template: str) -> Optional[str]:
    """The grps llm_style of a model, or None when no style of grps_trtllm fits.

    >>> llm_style_for("qwen3", "")
    'qwen3'
    >>> llm_style_for("llama", "{{ '<|start_header_id|>' + message['role'] }}")
    'llama3'
    >>> llm_style_for("llama", "{{ '<|im_start|>' + message['role'] }}") is None  # SmolLM2: ChatML on Llama
    True
    >>> llm_style_for("qwen2", "{{- '<|im_start|>assistant\\n<think>\\n' }}")  # QwQ-32B
    'qwq'
    >>> llm_style_for("qwen2", "You are a helpful and harmless assistant. You are Qwen developed by Alibaba. "
    ...               "You should think step-by-step.<|im_start|>")  # QwQ-32B-Preview
    'qwq-preview'
    >>> llm_style_for("qwen2", "You are Qwen, created by Alibaba Cloud. <|im_start|>")  # Qwen2.5
    'qwen2.5'
    """
    for rule in STYLE_RULES:
        if rule.model_type == model_type and (rule.marker is None or rule.marker in chat_template):
            return rule.style
    return None


@dataclass(frozen=True)
class TokenizerFacts:
    """What a chat model's grps config takes from its tokenizer and generation config."""

    model_type: str
    chat_template: str
    end_token_id: Optional[int]
    pad_token_id: Optional[int]
    special_ids: tuple[int, ...]
    stop_words: tuple[str, ...]
    sampling: dict[str, Any]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _content(token: Any) -> Optional[str]:
    return token.get("content") if isinstance(token, dict) else token if isinstance(token, str) else None


def _special_tokens(folder: Path, tok_config: dict[str, Any]) -> dict[str, int]:
    """content -> id of the special added tokens (tokenizer_config.json's added_tokens_decoder, else
    tokenizer.json's added_tokens), as transformers reads them."""
    decoder = tok_config.get("added_tokens_decoder")
    if isinstance(decoder, dict) and decoder:
        items = [(int(k), v) for k, v in decoder.items() if str(k).isdigit() and isinstance(v, dict)]
    else:
        items = [(t.get("id"), t) for t in _read_json(folder / "tokenizer.json").get("added_tokens") or []
                 if isinstance(t, dict)]
    return {t["content"]: int(i) for i, t in items if isinstance(i, int) and t.get("special") and t.get("content")}


def tokenizer_facts(folder: Path) -> TokenizerFacts:
    """Read ``config.json``, ``tokenizer_config.json``, ``tokenizer.json`` and ``generation_config.json``."""
    hf = _read_json(folder / "config.json")
    tok = _read_json(folder / "tokenizer_config.json")
    gen = _read_json(folder / "generation_config.json")
    special = _special_tokens(folder, tok)
    by_id = {i: c for c, i in special.items()}
    eos = gen.get("eos_token_id", hf.get("eos_token_id"))
    eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int)]
    tok_eos = special.get(_content(tok.get("eos_token")) or "")
    end = tok_eos if tok_eos is not None else (eos_ids[0] if eos_ids else None)
    pad = special.get(_content(tok.get("pad_token")) or "")
    if pad is None:
        pad = gen.get("pad_token_id") if isinstance(gen.get("pad_token_id"), int) else end
    template = tok.get("chat_template") if isinstance(tok.get("chat_template"), str) else ""
    stops = [by_id[i] for i in dict.fromkeys([*([end] if end is not None else []), *eos_ids]) if i in by_id]
    if "<|im_start|>" in template and "<|im_start|>" in special:
        stops.insert(0, "<|im_start|>")  # ChatML: a new turn starting ends the answer
    sampling = {k: gen[k] for k in ("temperature", "top_k", "top_p") if isinstance(gen.get(k), (int, float))
                and gen.get("do_sample", True) is not False}
    return TokenizerFacts(str(hf.get("model_type") or ""), template, end, pad, tuple(sorted(special.values())),
                          tuple(dict.fromkeys(stops)), sampling)


def _style(src: ExportSource, facts: Optional[TokenizerFacts], override: Optional[str]) -> str:
    names = ", ".join(GRPS_LLM_STYLES)
    if override is not None:
        if override not in GRPS_LLM_STYLES:
            raise ExportError(f"--llm-style {override!r} is not a style grps_trtllm knows (src/llm_styler.cc): it "
                              f"would fail to load with \"LLM style {override} not supported now.\"",
                              f"one of: {names}", where="--llm-style")
        return override
    style = llm_style_for(facts.model_type, facts.chat_template) if facts else None
    if style is None:
        what = (f"model_type {facts.model_type!r}" + (" with a ChatML chat template" if "<|im_start|>" in
                                                      facts.chat_template else "")) if facts else "the model"
        raise ExportError(
            f"no grps_trtllm llm_style fits {what}: grps reads llm_style with no fallback and knows only its own "
            "styles (src/llm_styler.cc), so the export would not load",
            f"pass --llm-style NAME if one renders this model's prompts, one of: {names}"
            + ("" if facts else "; or --model-dir: the model's Hugging Face folder here, to read it from"),
            where=str(src.bundle.root))
    return style


def _inferer_args(src: ExportSource, style: str, facts: Optional[TokenizerFacts]) -> dict[str, Any]:
    cfg, spec = src.config, src.config.lookahead.spec
    args: dict[str, Any] = {"llm_style": style, "tokenizer_type": "huggingface", "tokenizer_path": f"{src.tokenizer}/"}
    if facts is not None:
        if facts.end_token_id is not None:
            args["end_token_id"] = facts.end_token_id
        if facts.pad_token_id is not None:
            args["pad_token_id"] = facts.pad_token_id
        if facts.special_ids:
            args["skip_special_tokens"] = list(facts.special_ids)
        if facts.sampling:
            args["sampling"] = dict(facts.sampling)
    args.update({
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": f"{src.engine_dir}/",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": cfg.serve.kv_cache_free_gpu_memory_fraction or 0.9,
        "enable_kv_cache_reuse": cfg.serve.kv_cache_enable_block_reuse,
        "exclude_input_in_output": True,
        "decoding_mode": None,
        # serve.max_queue: the executor's queue bound (NetEase-Media/grps_trtllm src/trtllm_model_instance.cc,
        # TrtLlmModelInstance::GetExecutorConfigFromParams: the max_queue_size parameter into ExecutorConfig's
        # maxQueueSize)
        "max_queue_size": cfg.serve.max_queue,
    })
    if facts is not None and facts.stop_words:
        args["stop_words"] = list(facts.stop_words)
    if not spec.is_autoregressive:
        args["lookahead_decoding"] = {"window_size": spec.window_size, "ngram_size": spec.ngram_size,
                                      "verification_set_size": spec.verification_set_size}
    return args


def grps_warnings(src: ExportSource) -> list[str]:
    """What the bundle's config asks for that grps cannot do (printed by ``export grps``, and in the file's header):
    grps takes no per-request lookahead and counts no requests in flight, so every request runs the bundle's spec."""
    lookahead = src.config.lookahead
    keys = [k for k, v in (("lookahead.schedule", lookahead.schedule), ("lookahead.request_default",
                                                                        lookahead.request_default),
                           ("lookahead.policy", lookahead.policy not in (None, "fixed") and lookahead.policy)) if v]
    out = serve_not_carried(src.config, "grps")
    if keys and not lookahead.spec.is_autoregressive:
        out.insert(0, f"{' and '.join(keys)} cannot apply under grps (no per-request lookahead, no count of the "
                      f"requests in flight): every request runs ({lookahead.spec}); serve with `trtlade serve` to "
                      "apply them")
    return out


def grps_inference_yml(src: ExportSource, *, model_name: str = "trtllm_model",
                       llm_style: Optional[str] = None) -> str:
    """The inference yml text for ``src`` (validated against its engine and its release)."""
    check_engine_release(src.engine.version)
    facts = tokenizer_facts(src.model_dir) if src.model_dir is not None else None
    style = _style(src, facts, llm_style)
    spec = src.config.lookahead.spec
    doc = {
        "models": [{"name": model_name, "version": "1.0.0", "device": "auto", "inferer_type": "customized",
                    "inferer_name": "trtllm_inferer", "inferer_path": None,
                    "inferer_args": _inferer_args(src, style, facts),
                    "converter_type": "none", "converter_name": None, "converter_path": None,
                    "converter_args": None}],
        "dag": {"type": "sequential", "name": "trtlade_dag",
                "nodes": [{"name": "node-1", "type": "model", "model": f"{model_name}-1.0.0"}]},
    }
    header = [
        f"# grps_trtllm inference config written by `trtlade export grps` from the bundle {src.bundle.root}",
        f"# engine: {src.engine_dir} (max_batch_size {src.engine.max_batch_size}, max_draft_len "
        f"{src.engine.max_draft_len}); " + (f"lookahead ({spec}) for every request: grps passes no per-request "
                                             "lookahead config" if not spec.is_autoregressive else
                                             "no lookahead: every request decodes one token a step"),
        f"# llm_style {style}" + (" (--llm-style)" if llm_style else f" (from model_type {facts.model_type!r} and "
                                  "the chat template)") + "; end_token_id, pad_token_id, skip_special_tokens, "
        "stop_words and sampling from the tokenizer and generation_config.json"
        + ("" if facts else ": the model folder was not found here, so they are missing (pass --model-dir)"),
        f"# grps: {CONTAINER_NOTE}",
    ]
    if src.engine.world_size > 1:
        header.append(f"# the engine has {src.engine.world_size} GPU ranks: start grps over MPI (`grpst start ... "
                      f"--mpi_np {src.engine.world_size}`)")
    if "sampling" in doc["models"][0]["inferer_args"] and not spec.is_autoregressive:
        header.append("# sampling is generation_config.json's; lookahead decodes greedily, so it applies only "
                      "if the lookahead block is removed")
    header += [f"# warning: {w}" for w in grps_warnings(src)]
    text = "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    errors = [d for d in check_grps(parse_yaml(text, "<export>"), engine_dir=src.bundle.engine_dir)
              if d.severity == "error"]
    if errors:
        raise ExportError("the grps config would not pass validate-config: "
                          + "; ".join(d.message for d in errors[:3]), "rebuild the bundle", where=str(src.bundle.root))
    return text

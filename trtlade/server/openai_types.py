"""OpenAI request and response bodies (pydantic), as the `openai` client and benchmark tools send them.

Requests are validated strictly: wrong types are refused (``"max_tokens": "5"`` is a 400, not a 5),
and unknown fields are refused with 400 naming the field, as vLLM and TensorRT-LLM do, so that a
typo such as ``"max_token"`` never silently does nothing. Accepted beyond the OpenAI fields: the
extensions benchmark clients send (``ignore_eos``, ``min_tokens``, ``stop_token_ids``), vLLM's
sampling extensions (``top_k``, ``min_p``, ``repetition_penalty``) and trtlade's per-request
``lookahead`` (w,n,g) or ``speculation`` (TensorRT-LLM's ``speculative_config`` block: NGram, SA, AUTO).
Fields that do not change the output (``user``; on chat only, as OpenAI has them: ``safety_identifier``,
``prompt_cache_key``, ``store``, ``metadata``, ``service_tier``, ``parallel_tool_calls`` without tools,
``response_format: {type: text}``) are accepted and ignored (:data:`IGNORED_FIELDS`); OpenAI fields trtlade does not
take at all are a 400 ``unsupported`` (:data:`UNSUPPORTED_OPENAI_FIELDS`). OpenAI fields that trtlade cannot honour
(``logit_bias``, ``best_of > 1``, ``suffix``, ``tools``, JSON ``response_format``, ``modalities`` beyond
``["text"]``, an earlier assistant turn's tool calls, audio or refusal, ``reasoning_effort``; sampling and
penalties on an engine that decodes greedily) are accepted only
with their neutral value and otherwise refused with 400 saying why (see
:func:`trtlade.server.admission.check_unsupported` and :func:`~trtlade.server.admission.check_request`).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from trtlade.contract.protocol import MAX_TOP_LOGPROBS, sampling_bounds

__all__ = [
    "EXTENSION_FIELDS",
    "IGNORED_FIELDS",
    "UNSUPPORTED_OPENAI_FIELDS",
    "ResponseFormat",
    "StreamOptions",
    "CompletionRequest",
    "ChatMessage",
    "ChatCompletionRequest",
    "LookaheadUsage",
    "SpeculationUsage",
    "Usage",
    "CompletionChoice",
    "CompletionResponse",
    "ChatChoice",
    "ChatCompletionResponse",
    "CompletionChunk",
    "ChatCompletionChunk",
    "ModelCard",
    "ModelList",
]

#: Non-OpenAI request fields trtlade accepts (what benchmark clients send, and trtlade's own).
EXTENSION_FIELDS: tuple[str, ...] = ("lookahead", "speculation", "cache_salt", "ignore_eos", "min_tokens",
                                     "stop_token_ids", "top_k", "min_p", "repetition_penalty")
#: the longest cache_salt accepted
MAX_CACHE_SALT = 256


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: Optional[bool] = None
    #: vLLM's extension (guidellm and aiperf send it): every chunk carries the running usage (implies include_usage)
    continuous_usage_stats: bool = False
    #: OpenAI's: random padding against length side channels; trtlade adds none, so either value is accepted
    include_obfuscation: Optional[bool] = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[dict[str, Any]] = None


#: OpenAI's chat fields trtlade does not take (a 400 says "not supported", not "unknown"; from the openai package's
#: ``types/chat/completion_create_params.py``; its completions have none beyond what trtlade refuses by value)
UNSUPPORTED_OPENAI_FIELDS: tuple[str, ...] = ("functions", "function_call", "prediction", "audio", "verbosity",
                                              "web_search_options", "prompt_cache_retention")

#: Fields accepted and ignored because they do not change the output (a log line names each once).
IGNORED_FIELDS: tuple[str, ...] = ("user", "store", "metadata", "service_tier", "parallel_tool_calls",
                                   "response_format", "safety_identifier", "prompt_cache_key")


class _GenerationFields(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, **sampling_bounds("top_p"))
    n: Optional[int] = Field(None, ge=1)
    stop: Union[str, list[str], None] = None
    #: a 64-bit seed (what torch's generators take); larger ones are a 400 naming ``seed``
    seed: Optional[int] = Field(None, ge=-(2**63), le=2**63 - 1)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = None
    presence_penalty: Optional[float] = Field(None, **sampling_bounds("presence_penalty"))
    frequency_penalty: Optional[float] = Field(None, **sampling_bounds("frequency_penalty"))
    logit_bias: Optional[dict[str, float]] = None
    # extensions
    lookahead: Any = Field(None, description=(
        "The request's Lookahead (w,n,g): `[w, n, g]`, `{\"w\": .., \"n\": .., \"g\": ..}` or a spec string, at most "
        "the server's (W,N,G) (`[1, 1, 0]` turns drafting off); or a draft policy by name: `\"auto\"`, `\"schedule\"`. "
        "Absent: the server's default. Refused (400) on TensorRT-LLM's PyTorch backend."))
    speculation: Optional[dict[str, Any]] = Field(None, description=(
        "NGram / SA / AUTO drafting for this request, as TensorRT-LLM's `speculative_config` block "
        "(`decoding_type`, `max_draft_len`, `max_matching_ngram_size`, ...), checked by upstream's validators; "
        "reference engine only, `max_draft_len` at most `serve.max_draft_len`. Not with `lookahead`."))
    cache_salt: Optional[str] = Field(None, min_length=1, max_length=MAX_CACHE_SALT, description=(
        "vLLM's: a namespace for prefix-cache reuse and for the NGram / SA pools; only requests with the same salt "
        "and, whenever the server has API keys (every scope, `global` included), the same key reuse each other's "
        "cached prompt blocks or draft from each other's text: a copied salt crosses no identity. Reference "
        "engine."))
    ignore_eos: Optional[bool] = Field(False, description="Generate past the end-of-sequence token (benchmarks).")
    min_tokens: Optional[int] = Field(0, ge=0, description="No stop (EOS, stop strings, stop ids) before this many "
                                      "tokens.")
    stop_token_ids: Optional[list[int]] = Field(None, description="Token ids that end the generation, like stop "
                                                "strings: at most 64, each a token id of the model (0 <= id < vocab).")
    top_k: Optional[int] = Field(None, ge=-1, description="vLLM's: sample among the k most likely tokens (0 or -1: "
                                 "off).")
    min_p: Optional[float] = Field(None, **sampling_bounds("min_p"), description="vLLM's: drop tokens below min_p "
                                   "times the most likely one's probability.")
    repetition_penalty: Optional[float] = Field(None, **sampling_bounds("repetition_penalty"), description=(
        "vLLM's / transformers': divide (or multiply, for negative logits) the logits of tokens already seen."))


class CompletionRequest(_GenerationFields):
    """POST /v1/completions. ``prompt``: a string, a list of strings, token ids, or a list of token-id lists (one
    choice per prompt and ``n``, at most 64 in all)."""

    prompt: Union[str, list[str], list[int], list[list[int]]]
    #: 0 with ``echo`` scores the prompt without generating (OpenAI's way; older lm-evaluation-harness clients send it)
    max_tokens: Optional[int] = Field(None, ge=0)
    echo: Optional[bool] = False
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    best_of: Optional[int] = None
    suffix: Optional[str] = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = Field(None, validate_default=True)
    name: Optional[str] = None
    tool_call_id: Optional[str] = None
    #: what the openai client's ``message.model_dump()`` carries back in an assistant turn: accepted empty (null or
    #: ``[]``), as this server's own answers send them; anything else is refused as what it is (admission)
    refusal: Optional[str] = None
    tool_calls: Optional[list[Any]] = None
    function_call: Optional[Any] = None
    audio: Optional[Any] = None
    annotations: Optional[list[Any]] = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, content: Any) -> Any:
        """An image or audio part is refused as what it is (this server serves text models), not as a typo."""
        if isinstance(content, list):
            for i, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and kind != "text":
                    raise ValueError(f"part {i} is of type {kind!r}: this server serves a text model, and takes "
                                     "text parts only ({\"type\": \"text\", \"text\": ...})")
        return content

    @field_validator("content")
    @classmethod
    def _text_unless_assistant(cls, content: Any, info: ValidationInfo) -> Any:
        """Only an assistant turn may come without text (``null`` or left out: clients send earlier
        assistant turns so); a user, system, developer or tool turn without it is refused, as OpenAI
        does, rather than sent to the model as empty text."""
        if (content is None or content == []) and info.data.get("role") not in (None, "assistant"):
            raise ValueError(f"a {info.data['role']} message needs its text (a string or text parts); only an "
                             "assistant message may have none")
        return content

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_GenerationFields):
    """POST /v1/chat/completions. ``max_completion_tokens`` is the newer name of ``max_tokens``. The fields below
    ``top_logprobs`` are OpenAI's chat-only ones (/v1/completions has none of them: there they are unknown fields)."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    modalities: Optional[list[str]] = None
    store: Optional[bool] = None
    metadata: Optional[dict[str, str]] = None
    #: OpenAI's tiers (openai-python ``types/chat/completion_create_params.py``): accepted, no tier is different here
    service_tier: Optional[Literal["auto", "default", "flex", "scale", "priority", "fast"]] = None
    parallel_tool_calls: Optional[bool] = None
    response_format: Optional[ResponseFormat] = None
    tools: Optional[list[Any]] = None
    tool_choice: Any = None
    reasoning_effort: Optional[str] = None


# ------------------------------------------------------------------------------------------ responses
class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookaheadUsage(_Out):
    """What lookahead did for one request: the (w,n,g) used, decoding steps, tokens per step."""

    spec: dict[str, int] = Field(description="The (w,n,g) the request ran with: `{\"w\", \"n\", \"g\"}`.")
    steps: int = Field(description="Engine steps, the prefill's included.")
    tokens_per_step: float = Field(description="Completion tokens / steps (1.0: no gain).")
    policy: Optional[str] = Field(None, description="How its drafts ran: `fixed`, `auto` or `schedule` (reference "
                                  "engine).")
    seed: Optional[int] = Field(None, description="A sampled request's seed (the first choice's; choice j drew with "
                                "seed + j).")
    accepted_from: Optional[dict[str, int]] = Field(None, description="Accepted drafts by source: `window` "
                                                    "(Jacobi), `pool`, `prompt_lookup`, `suffix`, `public` "
                                                    "(another running request's text).")


class SpeculationUsage(_Out):
    """What drafting did for one request, for every drafter: which one and its settings, the decode steps
    (after the prefill's first token), the draft tokens verified and those accepted."""

    decoding_type: Literal["Lookahead", "NGram", "SA"] = Field(description="The drafter that ran.")
    config: dict[str, Any] = Field(description="Its settings, as a `speculative_config` block.")
    decode_steps: int = Field(description="Steps after the prefill's first token.")
    draft_tokens: Optional[int] = Field(description="Draft tokens verified (null where the engine does not report "
                                        "them: a TensorRT-LLM release without request_perf_metrics).")
    accepted_draft_tokens: int = Field(description="Draft tokens accepted.")
    tokens_per_step: float = Field(description="Completion tokens / steps.")


class PromptTokensDetails(_Out):
    cached_tokens: int


class Usage(_Out):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: Optional[PromptTokensDetails] = None
    lookahead: Optional[LookaheadUsage] = None
    speculation: Optional[SpeculationUsage] = None


class CompletionChoice(_Out):
    index: int = 0
    text: str
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[Literal["stop", "length"]] = None


class CompletionResponse(_Out):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Optional[Usage] = None


class CompletionChunk(CompletionResponse):
    pass


class AssistantMessage(_Out):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(_Out):
    index: int = 0
    message: AssistantMessage
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[Literal["stop", "length"]] = None


class ChatCompletionResponse(_Out):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Optional[Usage] = None


class Delta(_Out):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(_Out):
    index: int = 0
    delta: Delta
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[Literal["stop", "length"]] = None


class ChatCompletionChunk(_Out):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[Usage] = None


class ModelCard(_Out):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "trtlade"
    max_model_len: Optional[int] = None


class ModelList(_Out):
    object: Literal["list"] = "list"
    data: list[ModelCard]

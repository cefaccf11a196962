"""From a validated OpenAI request to a :class:`GenerationRequest`, enforcing every limit with a 400.

Order of checks (the first failure answers): unsupported OpenAI features, the model name (404),
the per-request ``lookahead`` (legal, then admitted by the server's (W,N,G)), sampling settings,
stop strings, then the prompt (tokenized here) and ``max_tokens`` against the engine's limits.

Per-request lookahead, worked examples on a server with (W,N,G) = (4,2,4)::

    {"lookahead": {"w": 2, "n": 2, "g": 1}}   -> runs with (2,2,1)
    {"lookahead": [1, 1, 0]}                  -> lookahead off for this request
    {"lookahead": "4,2,4"}                    -> the server's own spec
    {"lookahead": "auto"}                     -> the engine decides per step (reference engine)
    {"lookahead": "schedule"}                 -> the config's lookahead.schedule band
    {"lookahead": {"w": 5, "n": 2, "g": 4}}   -> 400, param "lookahead.w": 5 > W = 4
    {"lookahead": {"w": 0, "n": 2, "g": 4}}   -> 400, param "lookahead.w": windowSize requires >= 1
    (no lookahead field)                      -> the config's lookahead.request_default

Per-request NGram / SA (reference engine), TensorRT-LLM's ``speculative_config`` block as it is::

    {"speculation": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}}
    {"speculation": {"decoding_type": "SA", "max_draft_len": 4}}          -> longest match (-1)
    {"speculation": {"decoding_type": "AUTO"}}  -> NGram as upstream resolves it for the server's max_batch_size
    {"speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 0}}
                                              -> 400, param "speculation.max_matching_ngram_size"
    {"speculation": {..., "max_draft_len": 40}} -> 400, param "speculation.max_draft_len": above the server's
    (neither field)                           -> the config's ``speculation`` block, if it has one
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Union

from pydantic import ValidationError

from trtlade.contract.protocol import DRAFT_POLICIES, GenerationRequest
from trtlade.contract.serving import EngineInfo
from trtlade.server.errors import ApiError
from trtlade.server.openai_types import (EXTENSION_FIELDS, IGNORED_FIELDS, UNSUPPORTED_OPENAI_FIELDS,
                                         ChatCompletionRequest, CompletionRequest)
from trtlade.contract.tokenization import ChatTemplateError, PromptTokenizer
from trtlade.drafting.config import DraftConfig, DraftConfigError, speculation_param
from trtlade.spec import FIELD_ALIASES, WIRE_NAMES, LookaheadSpec, SpecError, wire_param

__all__ = [
    "Drafting",
    "PreparedRequest",
    "parse_body",
    "parse_request_lookahead",
    "parse_request_policy",
    "parse_request_speculation",
    "check_unsupported",
    "check_request",
    "tokenize",
    "assemble",
    "ignored_fields",
    "resolve_model_name",
    "DEFAULT_COMPLETION_MAX_TOKENS",
    "MAX_STOP_STRINGS",
    "MAX_STOP_CHARS",
    "MAX_STOP_TOKEN_IDS",
]

Kind = Literal["completion", "chat"]

#: OpenAI's default max_tokens for /v1/completions (chat defaults to the rest of the context).
DEFAULT_COMPLETION_MAX_TOKENS = 16
MAX_STOP_STRINGS = 16
#: Characters one stop string may have (each is checked against the text at every token, on the engine thread).
MAX_STOP_CHARS = 1024
#: Extra stop token ids one request may send.
MAX_STOP_TOKEN_IDS = 64
#: Choices one request may ask for (prompts x n).
MAX_CHOICES = 64


@dataclass(frozen=True)
class Drafting:
    """How a request's generations draft: its own (w,n,g), a draft policy by name, or an NGram / SA block
    (all None: the server's default)."""

    lookahead: Optional[LookaheadSpec] = None
    policy: Optional[str] = None
    speculation: Optional[DraftConfig] = None


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready for the engine, with what the response needs.

    ``generations``: what the engine runs -- one per prompt, or, with ``n > 1`` and sampling, one per
    sample; ``copies[i]``: the choice indexes generation ``i`` fills (greedy ``n > 1``: one generation
    fills ``n`` identical choices, as OpenAI returns them). Choice ``prompt * n + j`` is sample ``j`` of
    prompt ``prompt``. ``prompt_tokens``: the prompts' tokens, each prompt counted once.
    """

    kind: Kind
    model: str
    generations: tuple[GenerationRequest, ...]
    copies: tuple[tuple[int, ...], ...]
    prompt_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool = False
    #: completions with ``echo``: the prompt is repeated before each choice's text
    echo: bool = False
    #: with ``echo``, per generation: its prompt as the client wrote it (None: sent as token ids)
    echo_texts: tuple[Optional[str], ...] = ()
    #: ``echo`` with ``max_tokens: 0``: each choice is its prompt (scored with ``logprobs``) and nothing after it;
    #: the engine runs the prefill and one token (every engine generates at least one), which is not sent
    prompt_only: bool = False

    @property
    def num_choices(self) -> int:
        return sum(len(c) for c in self.copies)


# ------------------------------------------------------------------------------------------- parsing
def _loc(loc: tuple[Any, ...]) -> str:
    """Pydantic's location tuple as a dotted param; union-branch names (``str``, ``list[int]``) and
    function-validator tags are dropped: ``('messages', 0, 'content')`` -> ``messages.0.content``."""
    parts: list[str] = []
    for item in loc:
        text = str(item)
        if isinstance(item, str) and ("[" in text or text in {"str", "int", "float", "bool", "list",
                                                                "dict", "none", "function-after"}):
            continue
        parts.append(text)
    return ".".join(parts)


#: every OpenAI field trtlade does not take (a 400 ``unsupported``, not ``unknown_field``)
_UNSUPPORTED = frozenset(UNSUPPORTED_OPENAI_FIELDS)


def _validation_message(err: dict[str, Any]) -> tuple[str, str]:
    param = _loc(tuple(err.get("loc", ())))
    kind = err.get("type", "")
    if kind == "extra_forbidden" and param in _UNSUPPORTED:
        return (f"{param!r} is an OpenAI field trtlade does not support (its output could not honour it); omit "
                "it"), param
    if kind == "extra_forbidden":
        return (f"unknown field {param!r}: trtlade refuses fields it does not know so that a typo "
                f"never silently does nothing; it accepts the OpenAI fields plus the extensions "
                f"{', '.join(EXTENSION_FIELDS)}"), param
    if kind == "missing":
        return f"field {param!r} is required", param
    value = err.get("input")
    shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 80 else type(value).__name__
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{param}: {message} (got {shown})", param


def _deepest_branch(first: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """For a union field pydantic reports errors per branch: the branch that got furthest into the value (its first
    error the deepest, then the latest element) says what is wrong. ``"prompt": [1, "a"]`` failed as a string at
    ``prompt`` and as token ids at ``prompt.1``: the second names the element, and what it needs.

    >>> errs = [{"loc": ("prompt", "str"), "type": "string_type"},
    ...         {"loc": ("prompt", "list[int]", 1), "type": "int_parsing"}]
    >>> _deepest_branch(errs[0], errs)["loc"]
    ('prompt', 'list[int]', 1)
    """
    field = _loc(tuple(first.get("loc", ())))

    def depth(err: dict[str, Any]) -> tuple[int, tuple[int, ...]]:
        parts = _loc(tuple(err.get("loc", ()))).split(".")
        return len(parts), tuple(int(p) for p in parts if p.isdigit())

    branches: dict[tuple, dict[str, Any]] = {}  # each branch's first error (its path without element indexes)
    for err in errors:
        if (_loc(tuple(err.get("loc", ()))) + ".").startswith(field + "."):
            branches.setdefault(tuple(p for p in err.get("loc", ()) if not isinstance(p, int)), err)
    return max(branches.values(), key=depth) if branches else first


def parse_body(kind: Kind, payload: Any) -> Union[CompletionRequest, ChatCompletionRequest]:
    """Validate the JSON body; the first problem becomes a 400 naming the field."""
    if not isinstance(payload, dict):
        raise ApiError.bad_request(f"the request body must be a JSON object, got {type(payload).__name__}")
    model = CompletionRequest if kind == "completion" else ChatCompletionRequest
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        errors = exc.errors()
        first = min(errors, key=lambda e: (e.get("type") != "extra_forbidden", e.get("type") == "missing",
                                           len(e.get("loc", ()))))
        if first.get("type") != "extra_forbidden":
            first = _deepest_branch(first, errors)
        message, param = _validation_message(first)
        code = "invalid_value"
        if first.get("type") == "extra_forbidden":
            code = "unsupported" if param in _UNSUPPORTED else "unknown_field"
        raise ApiError.bad_request(message, param=param or None, code=code) from None


# ------------------------------------------------------------------------------------------- lookahead
def _strict_sizes(value: Any, hint: str) -> None:
    """A JSON list or object of (w,n,g) holds integers, as every number field of a request (``"max_tokens": "5"`` is
    a 400): ``["2", "2", "1"]`` and ``[2, 2, 1.0]`` were read as (2,2,1). A spec string ("2,2,1") stays one."""
    known = {alias for aliases in FIELD_ALIASES.values() for alias in aliases}  # another key: the parser says
    items = [(k, v) for k, v in value.items() if k in known] if isinstance(value, dict) else \
        list(enumerate(value)) if isinstance(value, list) else []
    for key, size in items:
        if isinstance(size, bool) or not isinstance(size, int):
            param = f"lookahead.{key if isinstance(key, str) else 'wng'[key] if key < 3 else key}"
            raise ApiError.bad_request(f"{param}: {json.dumps(size)} is not an integer; {hint}", param=param,
                                       code="invalid_lookahead")


def parse_request_lookahead(value: Any, server: LookaheadSpec) -> LookaheadSpec:
    """The request's ``lookahead`` as a spec admitted by ``server``, or a 400 naming the field.

    >>> parse_request_lookahead({"w": 2, "n": 2, "g": 1}, LookaheadSpec(4, 2, 4))
    LookaheadSpec(window_size=2, ngram_size=2, verification_set_size=1)
    """
    hint = ('send "lookahead": {"w": W, "n": N, "g": G} or [W, N, G] with w <= %d, n <= %d, g <= %d; '
            "[1, 1, 0] turns lookahead off" % server.as_tuple())
    _strict_sizes(value, hint)
    try:
        spec = LookaheadSpec.parse(value)
    except SpecError as exc:
        param = wire_param(exc.field)
        raise ApiError.bad_request(f"{param}: {exc.message}. {exc.hint or hint}".rstrip(),
                                   param=param, code="invalid_lookahead") from None
    excess = server.excess(spec)
    if excess:
        field, requested, limit = excess[0]
        details = "; ".join(f"{WIRE_NAMES[f]} = {r} > {WIRE_NAMES[f].upper()} = {s}" for f, r, s in excess)
        raise ApiError.bad_request(
            f"{wire_param(field)}: the request's lookahead ({spec}) is larger than this server's "
            f"(W,N,G) = ({server}): {details}. A request may use w <= {server.window_size}, "
            f"n <= {server.ngram_size}, g <= {server.verification_set_size}; [1, 1, 0] turns it off",
            param=wire_param(field), code="lookahead_not_admitted")
    return spec


def parse_request_speculation(value: Any, info: EngineInfo) -> DraftConfig:
    """The request's ``speculation`` block as a drafter this server runs, or a 400 naming the field.

    >>> from trtlade.contract.serving import EngineLimits
    >>> info = EngineInfo("reference", "m", LookaheadSpec(2, 4, 2), LookaheadSpec(2, 4, 2), EngineLimits(2048, 2047),
    ...                   "", drafters=("NGram", "SA"), max_draft_len=11, max_batch_size=8)
    >>> str(parse_request_speculation({"decoding_type": "SA", "max_draft_len": 4}, info))
    'SA(max_draft_len=4, longest match)'
    """
    if not info.drafters:
        raise ApiError.bad_request(
            f"speculation: the {info.name} engine has no per-request drafting (TensorRT-LLM fixes its speculative "
            "config when the server starts); omit the field and configure the drafter in the server's config",
            param="speculation", code="unsupported")
    try:
        config = DraftConfig.parse(value, max_batch_size=info.max_batch_size)
    except DraftConfigError as exc:
        param = speculation_param(exc.field)
        raise ApiError.bad_request(f"{param}: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""),
                                   param=param, code="invalid_speculation") from None
    if config.decoding_type not in info.drafters:
        raise ApiError.bad_request(f"speculation.decoding_type: {config.decoding_type} is not offered by this server "
                                   f"(it offers {', '.join(info.drafters)})", param="speculation.decoding_type",
                                   code="invalid_speculation")
    if config.max_draft_len > info.max_draft_len:
        raise ApiError.bad_request(
            f"speculation.max_draft_len: {config.max_draft_len} draft tokens per step is above this server's limit "
            f"of {info.max_draft_len} (serve.max_draft_len)", param="speculation.max_draft_len",
            code="speculation_not_admitted")
    limit = info.max_global_pool_size
    if config.enable_global_pool and limit is not None and (config.global_pool_size or 0) > limit:
        raise ApiError.bad_request(
            f"speculation.global_pool_size: {config.global_pool_size} slots is above this server's limit of {limit} "
            f"(serve.max_global_pool_size); send {info.max_batch_size} <= global_pool_size <= {limit}, or leave it "
            "out", param="speculation.global_pool_size", code="speculation_not_admitted")
    return config


# ------------------------------------------------------------------------------------------- features
def check_unsupported(body: Union[CompletionRequest, ChatCompletionRequest]) -> None:
    """Refuse OpenAI features trtlade does not implement (neutral values pass)."""

    def refuse(param: str, message: str) -> None:
        raise ApiError.bad_request(message, param=param, code="unsupported")

    if body.logit_bias:
        refuse("logit_bias", "logit_bias is not supported; omit it")
    if isinstance(body, ChatCompletionRequest):
        _check_chat_features(body, refuse)
    if isinstance(body, CompletionRequest):
        if body.best_of not in (None, 1):
            refuse("best_of", f"best_of = {body.best_of} is not supported; omit it or send 1")
        if body.suffix:
            refuse("suffix", "suffix (insertion) is not supported; omit it")
    elif body.top_logprobs and not body.logprobs:
        refuse("top_logprobs", "top_logprobs needs \"logprobs\": true")


def _check_chat_features(body: ChatCompletionRequest, refuse: Callable[[str, str], None]) -> None:
    """The chat-only OpenAI features trtlade does not implement, and earlier turns it could not render."""
    if body.tools:
        refuse("tools", "tools (function calling) are not supported: trtlade would answer in plain text and "
                        "never call them; omit tools")
    if body.tool_choice not in (None, "none"):
        refuse("tool_choice", "tool_choice needs tools, which are not supported; omit it or send \"none\"")
    if body.response_format is not None and body.response_format.type != "text":
        refuse("response_format", f"response_format {body.response_format.type} is not supported: trtlade does "
                                  "not constrain the output to JSON; omit it or send {\"type\": \"text\"}")
    if body.response_format is not None and body.response_format.json_schema is not None:
        refuse("response_format.json_schema", "a json_schema goes with {\"type\": \"json_schema\"}, which is not "
                                              "supported; with {\"type\": \"text\"} omit it")
    if body.modalities not in (None, [], ["text"]):
        refuse("modalities", f"modalities {body.modalities} are not supported: this server serves a text model; "
                             "omit it or send [\"text\"]")
    if body.reasoning_effort is not None:
        refuse("reasoning_effort", "reasoning_effort is not supported: trtlade does not control a model's "
                                   "reasoning; omit it")
    _check_earlier_turns(body.messages, refuse)


def _check_earlier_turns(messages: list, refuse: Callable[[str, str], None]) -> None:
    """An earlier assistant turn as the openai client returns it carries its response-only fields (``refusal``,
    ``tool_calls``, ``function_call``, ``audio``, ``annotations``); empty, as this server sends them, they are
    nothing. A tool call, audio or a refusal in one would be dropped from the model's prompt: refused, naming it."""
    for i, message in enumerate(messages):
        for name in ("refusal", "tool_calls", "function_call", "audio", "annotations"):
            if getattr(message, name) not in (None, []):
                refuse(f"messages.{i}.{name}", f"messages.{i}.{name}: this server serves text turns only, and the "
                                               f"chat template would drop the turn's {name}; send it null or omit it")


def _wanted_logprobs(body: Union[CompletionRequest, ChatCompletionRequest]) -> tuple[Optional[int], Optional[int]]:
    """(alternatives per generated token, alternatives per prompt token): None where not asked.
    Completions: ``logprobs: k`` (and with ``echo``, the prompt's too); chat: ``logprobs: true`` with
    ``top_logprobs: k``."""
    if isinstance(body, CompletionRequest):
        if body.logprobs is None:
            return None, None
        return body.logprobs, (body.logprobs if body.echo else None)
    return ((body.top_logprobs or 0) if body.logprobs else None), None


#: the sampling fields greedy decoding (``temperature`` 0 or absent) takes and does not use
GREEDY_IGNORED = ("seed", "top_p", "top_k", "min_p")


def ignored_fields(body: Union[CompletionRequest, ChatCompletionRequest]) -> list[str]:
    """The fields sent that trtlade accepts but ignores (they do not change the output): the sampling ones named
    ``(greedy: no temperature)`` where the request decodes greedily (OpenAI's default temperature is 1, trtlade's 0).

    >>> ignored_fields(CompletionRequest(prompt="x", seed=3, user="u"))
    ['user', 'seed (greedy: no temperature)']
    >>> ignored_fields(CompletionRequest(prompt="x", seed=3, temperature=0.7))
    []
    """
    names = [name for name in IGNORED_FIELDS if getattr(body, name, None) is not None]
    if not (body.temperature or 0.0) > 0:
        names += [f"{name} (greedy: no temperature)" for name in GREEDY_IGNORED if getattr(body, name) is not None]
    return names


def resolve_model_name(requested: Optional[str], served: str) -> None:
    """A request's ``model`` must name the served model; a Hugging Face repo id whose last part is
    the served name (``HuggingFaceTB/SmolLM2-135M-Instruct`` for ``SmolLM2-135M-Instruct``) does too.

    >>> resolve_model_name("org/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct")
    >>> try:
    ...     resolve_model_name("gpt-4o", "SmolLM2-135M-Instruct")
    ... except ApiError as exc:
    ...     print(exc.status, exc.code)
    404 model_not_found
    """
    if requested is None or requested == served or requested.rsplit("/", 1)[-1] == served:
        return
    raise ApiError.model_not_found(requested, served)


# ------------------------------------------------------------------------------------------- prompt
def _prompt_list(body: CompletionRequest, tokenizer: PromptTokenizer) -> list[list[int]]:
    """The prompts of a completions request: a string, a list of strings, token ids, or a list of
    token-id lists (several prompts: one choice each)."""
    prompt = body.prompt
    if isinstance(prompt, str):
        return [tokenizer.encode_prompt(prompt)]
    if not prompt:
        raise ApiError.bad_request("prompt is an empty list", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [tokenizer.encode_prompt(p) for p in prompt]  # type: ignore[arg-type]
    lists = [list(p) for p in prompt] if all(isinstance(p, list) for p in prompt) else [list(prompt)]  # type: ignore[arg-type]
    vocab = tokenizer.vocab_size
    for k, ids in enumerate(lists):
        for i, token in enumerate(ids):
            if vocab is not None and not 0 <= token < vocab:
                where = f"prompt[{k}][{i}]" if len(lists) > 1 or isinstance(prompt[0], list) else f"prompt[{i}]"
                raise ApiError.bad_request(f"{where} = {token} is not a token id of this model (0 <= id < {vocab})",
                                           param="prompt")
    return lists


def _prompt_texts(body: CompletionRequest, count: int) -> list[Optional[str]]:
    """Each prompt as the client wrote it, for ``echo``: the strings of a text prompt, None for token ids."""
    prompt = body.prompt
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt)  # type: ignore[arg-type]
    return [None] * count


def _chat_ids(body: ChatCompletionRequest, tokenizer: PromptTokenizer) -> list[int]:
    _check_roles(body.messages)
    # OpenAI's developer messages are its system messages under a newer name: chat templates know "system"
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text(),
                 **({"name": m.name} if m.name else {}), **({"tool_call_id": m.tool_call_id} if m.tool_call_id else {})}
                for m in body.messages]
    try:
        text = tokenizer.render_chat(messages)
        _check_names_kept(messages, text, tokenizer)
        return tokenizer.encode_text(text)
    except ChatTemplateError as exc:
        raise ApiError.bad_request(str(exc), param="messages") from None


def _check_names_kept(messages: list[dict[str, Any]], text: str, tokenizer: PromptTokenizer) -> None:
    """A message's ``name`` reaches the model only where the chat template writes it (most leave it out, some write
    one role's alone): a name whose message renders the same without it would be dropped without a word, so it is
    refused. One render per named message, each name alone left out, stopping at the first dropped."""
    for i, message in enumerate(messages):
        if "name" not in message:
            continue
        without = [m if j != i else {k: v for k, v in m.items() if k != "name"} for j, m in enumerate(messages)]
        if tokenizer.render_chat(without) == text:
            param = f"messages.{i}.name"
            raise ApiError.bad_request(f"{param}: this model's chat template does not write this message's name, so "
                                       "the model would never see it; omit name, or say who speaks in the content",
                                       param=param, code="unsupported")


def _check_roles(messages: list) -> None:
    """OpenAI's message of each role has its own fields: ``tool_call_id`` only a tool message's (the call it answers,
    required there). Another role's ``tool_call_id``, or a tool message without one, is refused, naming it, as
    OpenAI refuses it (a tool message's ``name``, which OpenAI's own examples send, is a name like any other)."""
    for i, m in enumerate(messages):
        if m.role == "tool" and not m.tool_call_id:
            raise ApiError.bad_request(f"messages.{i}.tool_call_id: a tool message answers a tool call and names it "
                                       "(tool_call_id is required, as in OpenAI's API)",
                                       param=f"messages.{i}.tool_call_id")
        if m.tool_call_id is not None and m.role != "tool":
            raise ApiError.bad_request(f"messages.{i}.tool_call_id: only a tool message answers a tool call; a "
                                       f"{m.role} message has no tool_call_id", param=f"messages.{i}.tool_call_id")


def tokenize(kind: Kind, body: Union[CompletionRequest, ChatCompletionRequest],
             tokenizer: PromptTokenizer) -> list[list[int]]:
    """Token ids of each prompt (may take a while for huge prompts: call it off the event loop)."""
    _check_stop_token_ids(body.stop_token_ids, tokenizer.vocab_size)
    if kind == "completion":
        prompts = _prompt_list(body, tokenizer)  # type: ignore[arg-type]
    else:
        prompts = [_chat_ids(body, tokenizer)]  # type: ignore[arg-type]
    choices = len(prompts) * (body.n or 1)
    if choices > MAX_CHOICES:
        raise ApiError.bad_request(f"{len(prompts)} prompt(s) x n = {body.n or 1} asks for {choices} choices; at "
                                   f"most {MAX_CHOICES} per request", param="n" if (body.n or 1) > 1 else "prompt")
    return prompts


# ------------------------------------------------------------------------------------------- assemble
def _stop_strings(stop: Union[str, list[str], None]) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else list(stop)
    if len(items) > MAX_STOP_STRINGS:
        raise ApiError.bad_request(f"stop has {len(items)} strings; at most {MAX_STOP_STRINGS} are accepted",
                                   param="stop")
    for i, s in enumerate(items):
        if s == "":
            raise ApiError.bad_request(f"stop[{i}] is an empty string", param="stop")
        if len(s) > MAX_STOP_CHARS:
            raise ApiError.bad_request(f"stop[{i}] has {len(s)} characters; a stop string may have 1 to "
                                       f"{MAX_STOP_CHARS}", param="stop")
    return tuple(items)


def _check_stop_token_ids(ids: Optional[list[int]], vocab: Optional[int] = None) -> None:
    """At most :data:`MAX_STOP_TOKEN_IDS` ids, each a token id of the model (0 <= id < vocab; None: the count
    alone)."""
    ids = ids or []
    if len(ids) > MAX_STOP_TOKEN_IDS:
        raise ApiError.bad_request(f"stop_token_ids has {len(ids)} ids; at most {MAX_STOP_TOKEN_IDS} are accepted",
                                   param="stop_token_ids")
    for i, token in enumerate(ids):
        if vocab is not None and not 0 <= token < vocab:
            raise ApiError.bad_request(f"stop_token_ids[{i}] = {token} is not a token id of this model "
                                       f"(0 <= id < {vocab})", param="stop_token_ids")


def _check_choices(body: Union[CompletionRequest, ChatCompletionRequest]) -> None:
    """Prompts x n within :data:`MAX_CHOICES`, counted before anything is tokenized."""
    prompt = getattr(body, "prompt", None)
    count = len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) else 1
    choices = count * (body.n or 1)
    if choices > MAX_CHOICES:
        raise ApiError.bad_request(f"{count} prompt(s) x n = {body.n or 1} asks for {choices} choices; at "
                                   f"most {MAX_CHOICES} per request", param="n" if (body.n or 1) > 1 else "prompt")


def parse_request_policy(value: Any, info: EngineInfo) -> Optional[str]:
    """``"auto"`` / ``"schedule"`` as the request's ``lookahead``: the draft policy it asks for (a 400
    when this server has none such), else None (a spec, read by :func:`parse_request_lookahead`).

    >>> from trtlade.contract.serving import EngineLimits
    >>> info = EngineInfo("reference", "m", LookaheadSpec(2, 4, 2), LookaheadSpec(2, 4, 2),
    ...                   EngineLimits(2048, 2047), "", policies=("auto",))
    >>> parse_request_policy(" Auto ", info), parse_request_policy([2, 4, 2], info)
    ('auto', None)
    """
    if not isinstance(value, str) or value.strip().lower() not in DRAFT_POLICIES:
        return None
    name = value.strip().lower()
    if name in info.policies:
        return name
    why = {"auto": f"the {info.name} engine fixes a request's (w,n,g) at admission, so it cannot decide per step "
                   "(TensorRT-LLM's executor); run `trtlade tune` and serve its lookahead.schedule",
           "schedule": "this server has no lookahead.schedule",
           "fixed": 'send the spec itself, e.g. "lookahead": [2, 4, 2]'}[name]
    offered = ", ".join(f'"{p}"' for p in info.policies) or "none"
    raise ApiError.bad_request(
        f'lookahead: "{name}" is not offered by this server ({why}). Policies it offers: {offered}; or send a '
        f"spec with w <= {info.spec.window_size}, n <= {info.spec.ngram_size}, g <= {info.spec.verification_set_size}",
        param="lookahead", code="invalid_lookahead")


def parse_drafting(body: Union[CompletionRequest, ChatCompletionRequest], info: EngineInfo) -> Drafting:
    """The request's ``lookahead`` or ``speculation`` (not both), else the server's default drafter."""
    if body.speculation is not None:
        if body.lookahead is not None:
            raise ApiError.bad_request("speculation: a request drafts with lookahead (w,n,g) or with speculation "
                                       "(NGram / SA), not both; send one of them", param="speculation",
                                       code="invalid_speculation")
        return Drafting(speculation=parse_request_speculation(body.speculation, info))
    if body.lookahead is None:
        return Drafting(speculation=info.default_speculation)
    if not info.lookahead:
        drafter = info.details.get("drafter") or "none"
        raise ApiError.bad_request(
            f"lookahead: the {info.name} engine runs TensorRT-LLM's PyTorch backend, which has no Lookahead; it drafts "
            f"every request with the server's speculative_config ({drafter}); omit the field",
            param="lookahead", code="unsupported")
    policy = parse_request_policy(body.lookahead, info)
    return Drafting(lookahead=None if policy is not None else parse_request_lookahead(body.lookahead, info.spec),
                    policy=policy)


def check_request(kind: Kind, body: Union[CompletionRequest, ChatCompletionRequest], info: EngineInfo
                  ) -> tuple[Drafting, tuple[str, ...]]:
    """Everything that can be checked before tokenizing: returns how it drafts and its stop strings."""
    check_unsupported(body)
    resolve_model_name(body.model, info.model_id)
    if _wanted_logprobs(body)[0] is not None and not info.logprobs:
        raise ApiError.bad_request(
            f"the {info.name} engine does not return log probabilities in trtlade (TensorRT-LLM's executor "
            "can compute them; trtlade does not map them yet); omit logprobs, or serve with the reference "
            "engine", param="logprobs", code="unsupported")
    drafting = parse_drafting(body, info)
    if body.cache_salt is not None and not info.cache_salt:
        raise ApiError.bad_request(
            f"cache_salt: the {info.name} engine cannot scope its KV reuse by a salt (TensorRT-LLM's block reuse "
            "is shared by every request the executor runs); omit it, or serve with the reference engine",
            param="cache_salt", code="unsupported")
    if info.sampling == "greedy":
        _check_greedy_only(body, info)
    if isinstance(body, ChatCompletionRequest) and body.max_tokens is not None \
            and body.max_completion_tokens is not None and body.max_tokens != body.max_completion_tokens:
        raise ApiError.bad_request(
            f"max_tokens ({body.max_tokens}) and max_completion_tokens ({body.max_completion_tokens}) "
            "disagree; send one of them", param="max_completion_tokens")
    _check_choices(body)
    _check_stop_token_ids(body.stop_token_ids)
    return drafting, _stop_strings(body.stop)


#: request field -> its neutral value (what a greedy-only engine accepts)
_WARPERS = {"temperature": 0, "presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1}


def _check_greedy_only(body: Union[CompletionRequest, ChatCompletionRequest], info: EngineInfo) -> None:
    """An engine that decodes top-1 refuses what would change the tokens (top_p, top_k and min_p
    do not change an argmax, so they pass)."""
    for name, neutral in _WARPERS.items():
        value = getattr(body, name)
        if value is not None and value != neutral:
            raise ApiError.bad_request(
                f"{name} = {value}: the {info.name} engine decodes greedily (TensorRT-LLM's lookahead layer "
                "takes the top-1 token of every request, whatever its sampling settings); omit it or send "
                f"{neutral}, or serve with the reference engine, whose lookahead samples exactly",
                param=name, code="unsupported")


#: the ``code`` of a request beyond the context window, as OpenAI's API sends it (clients that trim or summarise
#: a conversation on overflow match it, or the "maximum context length" of its message)
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


def _max_tokens(kind: Kind, body: Union[CompletionRequest, ChatCompletionRequest], info: EngineInfo,
                n_prompt: int, prompt_param: str) -> int:
    """The prompt checked against the limits, and the max_tokens it may ask for."""
    limits = info.limits
    if n_prompt == 0:
        raise ApiError.bad_request("the prompt is empty (0 tokens)", param=prompt_param)
    if n_prompt > limits.max_prompt_tokens:
        raise ApiError.bad_request(
            f"This model's maximum context length is {limits.max_seq_len} tokens, and this server accepts prompts of "
            f"at most {limits.max_prompt_tokens} (the engine's max input length or serve.max_prompt_tokens). However, "
            f"your prompt has {n_prompt} tokens", param=prompt_param, code=CONTEXT_LENGTH_EXCEEDED)
    room = limits.max_seq_len - n_prompt
    if room < 1:
        raise ApiError.bad_request(
            f"This model's maximum context length is {limits.max_seq_len} tokens (the engine's max_seq_len). "
            f"However, your prompt has {n_prompt} tokens, which leaves no room for output", param=prompt_param,
            code=CONTEXT_LENGTH_EXCEEDED)
    requested = body.max_tokens
    param = "max_tokens"
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        requested, param = body.max_completion_tokens, "max_completion_tokens"
    if requested == 0 and isinstance(body, CompletionRequest) and not body.echo:  # chat's fields take >= 1
        raise ApiError.bad_request(
            "max_tokens = 0 generates nothing, which only makes sense with \"echo\": true (the prompt returned, "
            "scored with \"logprobs\": k); send max_tokens >= 1, or add echo", param=param)
    if requested is None:
        default = DEFAULT_COMPLETION_MAX_TOKENS if kind == "completion" else room
        return int(min(default, room, limits.max_new_tokens or math.inf))  # type: ignore[type-var]
    if limits.max_new_tokens is not None and requested > limits.max_new_tokens:
        raise ApiError.bad_request(
            f"{param} = {requested} is above this server's limit of {limits.max_new_tokens} "
            "(serve.max_tokens_limit)", param=param, code="max_tokens_too_large")
    if requested > room:
        raise ApiError.bad_request(
            f"This model's maximum context length is {limits.max_seq_len} tokens (the engine's max_seq_len). However, "
            f"you requested {requested + n_prompt} tokens ({n_prompt} in the prompt, {requested} for the completion, "
            f"{param}); ask for at most {room}", param=param, code=CONTEXT_LENGTH_EXCEEDED)
    return int(requested)


def _samples(body: Union[CompletionRequest, ChatCompletionRequest], n: int) -> list[Optional[int]]:
    """The seed of each of ``n`` samples: independent draws (``seed + j``, wrapped to a signed 64-bit seed as the
    engine takes it; a random base without a seed); one ``None`` entry for greedy decoding, whose ``n`` choices are
    copies of one generation.

    >>> _samples(CompletionRequest(prompt="x", temperature=0.8, seed=2**63 - 1), 2) == [2**63 - 1, -2**63]
    True
    """
    if not (body.temperature or 0.0) > 0:
        return [body.seed]
    base = body.seed if body.seed is not None else secrets.randbits(31)
    return [(base + j + 2**63) % 2**64 - 2**63 for j in range(n)]


def _sampling_fields(body: Union[CompletionRequest, ChatCompletionRequest]) -> dict[str, Any]:
    """The warpers as the engine takes them (absent: neutral; top_k -1 means off, as in vLLM).

    >>> _sampling_fields(CompletionRequest(prompt="x", temperature=0.7, top_k=-1))["top_k"]
    0
    """
    def value(name: str, neutral: float) -> float:
        given = getattr(body, name)
        return float(neutral if given is None else given)

    return {"temperature": value("temperature", 0.0), "top_p": value("top_p", 1.0),
            "top_k": max(0, int(body.top_k or 0)), "min_p": value("min_p", 0.0),
            "presence_penalty": value("presence_penalty", 0.0), "frequency_penalty": value("frequency_penalty", 0.0),
            "repetition_penalty": value("repetition_penalty", 1.0)}


def assemble(kind: Kind, body: Union[CompletionRequest, ChatCompletionRequest], info: EngineInfo,
             prompts: list[list[int]], drafting: Drafting, stop: tuple[str, ...]) -> PreparedRequest:
    """Check each prompt and max_tokens against the limits and build the engine requests (one per
    prompt, times ``n`` with sampling; see :class:`PreparedRequest`)."""
    n = body.n or 1
    stream = bool(body.stream)
    logprobs, prompt_logprobs = _wanted_logprobs(body)
    if body.stream_options is not None and not stream:
        raise ApiError.bad_request("stream_options is only allowed with stream: true", param="stream_options")
    if body.stream_options is not None and body.stream_options.continuous_usage_stats \
            and body.stream_options.include_usage is False:
        raise ApiError.bad_request("stream_options.continuous_usage_stats puts the usage in every chunk, which "
                                   "include_usage: false turns off; send one of them",
                                   param="stream_options.continuous_usage_stats")
    generations: list[GenerationRequest] = []
    copies: list[tuple[int, ...]] = []
    echo = bool(isinstance(body, CompletionRequest) and body.echo)
    texts = _prompt_texts(body, len(prompts)) if echo else [None] * len(prompts)  # type: ignore[arg-type]
    echo_texts: list[Optional[str]] = []
    for k, prompt_ids in enumerate(prompts):
        param = ("prompt" if len(prompts) == 1 else f"prompt.{k}") if kind == "completion" else "messages"
        max_tokens = _max_tokens(kind, body, info, len(prompt_ids), param)
        min_tokens = body.min_tokens or 0
        if min_tokens > max_tokens:
            raise ApiError.bad_request(f"min_tokens ({min_tokens}) is larger than max_tokens ({max_tokens})",
                                       param="min_tokens")
        seeds = _samples(body, n)
        for j, seed in enumerate(seeds):
            generations.append(GenerationRequest(
                prompt_ids=tuple(prompt_ids), max_tokens=max(1, max_tokens), lookahead=drafting.lookahead, stop=stop,
                policy=drafting.policy, speculation=drafting.speculation,  # type: ignore[arg-type]
                stop_token_ids=tuple(body.stop_token_ids or ()), ignore_eos=bool(body.ignore_eos),
                min_tokens=min_tokens, seed=seed, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
                **_sampling_fields(body)))
            copies.append(tuple(range(k * n, (k + 1) * n)) if len(seeds) == 1 else (k * n + j,))
            echo_texts.append(texts[k])
    return PreparedRequest(
        kind=kind, model=info.model_id, generations=tuple(generations), copies=tuple(copies),
        prompt_tokens=sum(len(p) for p in prompts), stream=stream,
        echo=echo, echo_texts=tuple(echo_texts) if echo else (), prompt_only=echo and body.max_tokens == 0,
        include_usage=bool(stream and body.stream_options and (body.stream_options.include_usage
                                                                or body.stream_options.continuous_usage_stats)),
        continuous_usage=bool(stream and body.stream_options and body.stream_options.continuous_usage_stats))

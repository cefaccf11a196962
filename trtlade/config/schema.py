"""The trtlade deployment config: one YAML file, the single source of truth for build, serve and bench.

Every key is documented by its ``description`` (``trtlade config schema`` prints the JSON Schema).
Unknown keys are rejected everywhere (``extra="forbid"``). The lookahead spec is written in any
spelling :meth:`trtlade.spec.LookaheadSpec.parse` accepts ("4,2,4", [4,2,4], a mapping).

Minimal example (the embedded model on CPU)::

    model: {}                   # no path: the embedded SmolLM2-135M-Instruct
    lookahead:
      spec: 4,2,4               # the server's (W,N,G)
"""

from __future__ import annotations

from pathlib import Path
import typing
from typing import Annotated, Any, Literal, Optional, Union

from pydantic_core import PydanticCustomError
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema,
                      field_validator, model_validator)

from trtlade.drafting.algorithm import NGRAM_IMPLEMENTATIONS
from trtlade.drafting.config import DraftConfig, DraftConfigError
from trtlade.errors import TrtladeError
from trtlade.presets import DEFAULT_PRESET
from trtlade.schedule import Band, LookaheadSchedule, ScheduleError
from trtlade.spec import AUTOREGRESSIVE, SIZE_TYPE32_MAX, LookaheadSpec

__all__ = [
    "SpecField",
    "ModelSection",
    "BuildSection",
    "LookaheadSection",
    "ServeSection",
    "BenchSection",
    "TrtladeConfig",
    "ScheduleBandField",
    "ConfigRuleError",
    "DEFAULT_CONCURRENCY",
]


class ConfigRuleError(TrtladeError, ValueError):
    """A rule across fields broken, located: ``loc`` is the path in the config (``("lookahead",
    "schedule", 1, "up_to")``), ``code`` the diagnostic code, ``hint`` what to do. Raised by model
    validators; the loader turns it into a diagnostic at ``loc``'s line (``loc=()``: where pydantic
    reports the error, for a validator that does not know its place)."""

    located = False  # pydantic shows the message of a validator's error as it is

    def __init__(self, message: str, *, loc: tuple, code: str, hint: str = "") -> None:
        super().__init__(message, hint, where=".".join(str(part) for part in loc))
        self.loc = loc
        self.code = code

_SPEC_JSON_SCHEMA = {
    "description": 'A (W,N,G) lookahead spec: "4,2,4", [4, 2, 4], or a mapping with window_size, '
                   "ngram_size, verification_set_size (upstream spellings accepted).",
    "anyOf": [
        {"type": "string", "pattern": r"^\s*[\[(]?\s*\d+\s*,\s*\d+\s*,\s*\d+\s*[\])]?\s*$"},
        {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 3, "maxItems": 3},
        {"type": "object", "properties": {
            "window_size": {"type": "integer", "minimum": 1},
            "ngram_size": {"type": "integer", "minimum": 1},
            "verification_set_size": {"type": "integer", "minimum": 0},
        }},
    ],
}

#: A (W,N,G) field in a config: parsed by LookaheadSpec.parse, written back as a mapping.
SpecField = Annotated[
    LookaheadSpec,
    BeforeValidator(LookaheadSpec.parse),
    PlainSerializer(lambda s: s.to_dict(), return_type=dict),
    WithJsonSchema(_SPEC_JSON_SCHEMA),
]

DEFAULT_CONCURRENCY = (1, 2, 4, 6, 8, 10, 16)
#: serve.prefill_chunk_tokens: prompt rows per step next to decoding requests (benchmarks/prefill_stall.py)
DEFAULT_PREFILL_CHUNK = 256
#: serve.prefill_stall: how much longer decoding requests' steps may take while prompts are prefilled
DEFAULT_PREFILL_STALL = 1.5
#: serve.prefill_idle_chunk_tokens: prompt rows per step with nothing decoding (benchmarks/idle_prefill.py)
DEFAULT_IDLE_CHUNK = 256

Dtype = Literal["auto", "float16", "bfloat16", "float32"]
#: The bench's bundled prompt sets (trtlade/bench/datasets.py reads them; a test keeps the two lists equal)
BUNDLED_DATASETS = ("mix", "short", "long", "random", "multiturn")
#: the bundled sets of chat message lists (the others are text: both endpoints take them)
CHAT_DATASETS = ("multiturn",)


def _scalar_kinds(annotation: Any) -> frozenset:
    """The plain scalar types a field takes (None left out): ``Optional[int]`` -> {int}; anything else that a
    field may hold (a str, a path, a spec, a list) -> empty, so nothing is checked.

    >>> sorted(k.__name__ for k in _scalar_kinds(Optional[float])), _scalar_kinds(Optional[Path])
    (['float'], frozenset())
    """
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in (typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,))
            if a is not type(None)]
    return frozenset(args) if args and all(a in (int, float, bool) for a in args) else frozenset()


def _takes_path(annotation: Any) -> bool:
    """``Path`` or ``Optional[Path]``."""
    return annotation is Path or (typing.get_origin(annotation) is Union and Path in typing.get_args(annotation))


def _plain_value(value: Any, kinds: frozenset) -> Optional[str]:
    """Why ``value`` is not one of ``kinds`` as written (None: it is). YAML's true/false are not numbers, a
    quoted "8080" is not a number, 8080.0 is not an integer, 1 is not a boolean: each would be converted without
    a word otherwise (pydantic's lax mode)."""
    if value is None or not kinds:
        return None
    if isinstance(value, bool):
        return None if bool in kinds else "a boolean where a number is expected"
    if isinstance(value, int):
        return None if kinds & {int, float} else "a number where a boolean (true or false) is expected"
    if isinstance(value, float):
        return None if float in kinds else ("not an integer" if int in kinds else
                                            "a number where a boolean (true or false) is expected")
    if isinstance(value, str):
        if kinds & {int, float} and _yaml11_number(value) is not None:  # YAML 1.1 reads 1e3 (no dot) as text
            return f"text where a number is expected: YAML reads {value} as text; write it as {_yaml11_number(value)}"
        return f"text where {'a boolean' if kinds == {bool} else 'a number'} is expected (write it unquoted)"
    return None


def _yaml11_number(text: str) -> Optional[str]:
    """How to write ``text`` so that YAML reads a number, where Python reads one and YAML 1.1 does not (``1e3``,
    ``1E-2``: an exponent without a dot); None for anything else.

    >>> _yaml11_number("1e3"), _yaml11_number("2.5E-1"), _yaml11_number("many")
    ('1000', '0.25', None)
    """
    try:
        number = float(text)
    except ValueError:
        return None
    if "e" not in text.lower() or number != number or number in (float("inf"), float("-inf")):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @field_validator("*", mode="before")
    @classmethod
    def _as_written(cls, value: Any, info: Any) -> Any:
        """Numbers and booleans as the file writes them: never converted from another type (a list of numbers
        is strict item by item, so each bad item is located)."""
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, str) and not value.strip() and _takes_path(annotation):
            raise PydanticCustomError("path_empty", "an empty path (it would mean the config's own folder)")
        kinds = _scalar_kinds(annotation)
        why = _plain_value(value, kinds)
        if why is not None:
            raise PydanticCustomError("bool_type" if kinds == {bool} else "int_type" if int in kinds else "float_type",
                                      why)
        return value


class ModelSection(_Section):
    path: Optional[Path] = Field(
        None, description="A Hugging Face model folder (config.json, weights, tokenizer), a trtlade "
        "bundle folder, or (reference engine) a GGUF file, dequantised once into ~/.cache/trtlade/models. "
        "Absent with no `name`: the embedded SmolLM2-135M-Instruct. Relative paths are relative to the "
        "config file.")
    name: Optional[str] = Field(
        None, description="A model name such as Qwen3-8B, resolved as a folder under `models_dir` "
        "(never downloaded from a hub).")
    models_dir: Optional[Path] = Field(
        None, description="Where `name` is looked up; default: $TRTLADE_MODELS_DIR.")
    tokenizer: Optional[Path] = Field(
        None, description="Tokenizer folder when it is not the model folder (e.g. serving an engine dir).")
    dtype: Dtype = Field("auto", description="Weights and compute dtype; auto = the checkpoint's dtype "
                         "(float32 for the reference engine on CPU).")
    served_name: Optional[str] = Field(
        None, description="The model id clients send and /v1/models lists; default: the folder name.")


#: Default room for output when build.max_seq_len / --max-seq-len is not given: max_input_len + this.
DEFAULT_OUTPUT_SEQ = 2048


class BuildSection(_Section):
    backend: Literal["trtllm", "reference", "pytorch"] = Field(
        "trtllm", description="trtllm: convert and run trtllm-build (a Lookahead engine, TensorRT-LLM 0.16 <= v < "
        "1.3); pytorch: TensorRT-LLM's PyTorch backend, no engine (NGram / SA / AUTO from `speculation`; 1.0 and "
        "later, the only backend from 1.3 on): the bundle holds the trtllm-serve config; reference: a bundle for "
        "the PyTorch reference engine (no GPU).")
    trtllm_version: Optional[str] = Field(
        None, description="The TensorRT-LLM release this deployment targets (e.g. 1.2.1, 1.3.0); default: the "
        "installed one. Decides what may run: Lookahead engines up to 1.2, NGram / SA / AUTO on the PyTorch backend "
        "(SA from 1.3); a release newer than the newest trtlade has read is accepted with a warning.")

    _release_text = field_validator("trtllm_version")(classmethod(lambda cls, v: _check_release_text(v)))
    engine_dir: Optional[Path] = Field(
        None, description="The TensorRT-LLM engine directory (config.json + rank*.engine) that serve and "
        "validate-config check against. Relative to the config file.")
    output_dir: Optional[Path] = Field(None, description="Where `trtlade build` writes the bundle.")
    max_batch_size: int = Field(8, ge=1, le=4096, description="trtllm-build --max_batch_size.")
    max_input_len: int = Field(2048, ge=1, le=SIZE_TYPE32_MAX,
                               description="trtllm-build --max_input_len (prompt tokens).")
    max_seq_len: Optional[int] = Field(
        None, ge=1, le=SIZE_TYPE32_MAX, description="trtllm-build --max_seq_len (prompt + output); the builder adds "
        "max_draft_len to it. Default: max_input_len + 2048.")
    max_num_tokens: Optional[int] = Field(
        None, ge=1, le=SIZE_TYPE32_MAX, description="trtllm-build --max_num_tokens (default 8192, "
        "lowered to max_seq_len * max_batch_size where that is less; a larger value is refused); the builder "
        "raises it to at least "
        "max_batch_size * (max_draft_len + 1).")
    tp_size: int = Field(1, ge=1, le=64, description="Tensor parallelism (set at checkpoint conversion).")
    pp_size: int = Field(1, ge=1, le=64, description="Pipeline parallelism (set at checkpoint conversion).")

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def requested_max_seq_len(self) -> int:
        """``max_seq_len``, or the default ``trtlade build`` uses (max_input_len + DEFAULT_OUTPUT_SEQ);
        the engine then holds this plus max_draft_len."""
        return self.max_seq_len if self.max_seq_len is not None else self.max_input_len + DEFAULT_OUTPUT_SEQ


def _band_from_config(value: Any) -> Band:
    """A schedule band as the config writes it, validated by the schedule's own rules (:meth:`Band.parse`)."""
    if isinstance(value, dict) and any(isinstance(k, int) and v is None for k, v in value.items()):
        raise ConfigRuleError("the band's spec was read as several keys: in a flow mapping like "
                              "{up_to: 2, spec: 4,2,4} the commas separate keys", loc=(), code="spec-parse",
                              hint="quote the spec: {up_to: 2, spec: '4,2,4'}, or write it as [4, 2, 4]")
    try:
        return Band.parse(value)
    except ScheduleError as exc:
        raise ConfigRuleError(exc.message, loc=(), code="schedule-band", hint=exc.hint) from None


_BAND_JSON_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["spec"],
    "properties": {
        "up_to": {"type": "integer", "minimum": 1, "description": "This band serves requests admitted with at "
                  "most this many requests in flight, the new one included. Omitted on the last band "
                  "(open-ended) only."},
        "spec": {**_SPEC_JSON_SCHEMA, "description": "The (w,n,g) such a request gets; admitted by "
                 "lookahead.spec. Quote it in a flow mapping: {up_to: 2, spec: '4,2,4'}."},
    },
}

#: A band of ``lookahead.schedule``: validated into the schedule's own :class:`~trtlade.schedule.Band`.
ScheduleBandField = Annotated[
    Band,
    PlainValidator(_band_from_config),
    PlainSerializer(lambda band: band.to_config(), return_type=dict),
    WithJsonSchema(_BAND_JSON_SCHEMA),
]


#: The schedule's rule codes (ScheduleError.rule) -> validate-config diagnostic codes.
_SCHEDULE_CODES = {"order": "schedule-order", "open-band-not-last": "schedule-order",
                   "no-open-band": "schedule-open-band", "empty": "schedule-open-band"}


def _check_release_text(value: Optional[str]) -> Optional[str]:
    """``build.trtllm_version``: a version TensorRT-LLM writes (1.2.1, 1.3.0rc21, 0.16.0)."""
    if value is None:
        return None
    from trtlade.trtllm.compat import parse_version

    try:
        parse_version(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a TensorRT-LLM release: write it as TensorRT-LLM does, e.g. 1.2.1 "
                         "or 1.3.0rc21") from None
    return str(value).strip()


class LookaheadSection(_Section):
    spec: SpecField = Field(
        description="The server's (W,N,G): the executor's LookaheadDecodingConfig and the engine's "
        "max_draft_len formula. Requests may ask for anything up to it.")
    request_default: Optional[SpecField] = Field(
        None, description="The (w,n,g) used for a request that names none; must be admitted by `spec` "
        "(w<=W, n<=N, g<=G). Default: `spec`. (1,1,0) turns lookahead off by default.")
    corrected_keying: bool = Field(
        False, description="Reference engine only: key column 0's n-gram by the golden token (lade) "
        "instead of TensorRT-LLM's new token.")
    seed: int = Field(0, description="Seed of the window's random initialisation (reference engine).")
    preset: Optional[Literal["trtllm", "fast"]] = Field(
        None, description="The reference engine's algorithm. `fast` (the default with serve.engine reference): "
        "adds prompt-lookup candidates (N-1 tokens beside the window, 4 or N-1 if more without it) to each "
        "step's guesses, lossless like every mode, the "
        "fastest on this engine. `trtllm` (the only one the trtllm engine runs): exactly TensorRT-LLM's "
        "algorithm, to predict what an engine will do. /version says which one runs.")
    policy: Optional[Literal["auto", "schedule", "fixed"]] = Field(
        None, description="What a request that names no lookahead gets. `auto` (reference engine only; the "
        "default there without a schedule): the engine decides each step, for the whole batch, which "
        "sequences verify their drafts, from the measured cost of a row on this host and each sequence's "
        "acceptance -- no tune run. `schedule` (the default with a schedule): the band of "
        "`lookahead.schedule` for the requests in flight, re-checked every step on the reference engine. "
        "`fixed`: `request_default` (or `spec`) every step. A request may also send "
        '`"lookahead": "auto"` or `"schedule"`; an explicit (w,n,g) always wins.')
    schedule: Optional[list[ScheduleBandField]] = Field(
        None, min_length=1, description="Load-aware (w,n,g) for requests that name none: bands "
        "{up_to, spec} in ascending up_to (requests in flight at admission, the new one included), the "
        "last without up_to. Every spec must be admitted by `spec`; not together with request_default. "
        "`trtlade tune` measures and writes it. Example: [{up_to: 2, spec: '4,2,4'}, {spec: '1,1,0'}].")

    @property
    def default_request(self) -> LookaheadSpec:
        return self.request_default if self.request_default is not None else self.spec

    @property
    def lookahead_schedule(self) -> Optional[LookaheadSchedule]:
        """The schedule as a value object (None without one)."""
        if not self.schedule:
            return None
        return LookaheadSchedule(tuple(self.schedule))

    @model_validator(mode="after")
    def _schedule_rules(self) -> "LookaheadSection":
        if self.policy == "schedule" and not self.schedule:
            raise ConfigRuleError(
                "lookahead.policy is schedule but lookahead.schedule is not set: there are no bands to apply",
                loc=("lookahead", "policy"), code="policy-without-schedule",
                hint="add lookahead.schedule (trtlade tune --apply writes it), or use policy auto or fixed")
        if not self.schedule:
            return self
        where = ("lookahead", "schedule")
        if self.request_default is not None:
            raise ConfigRuleError(
                "lookahead.schedule and lookahead.request_default are both set: the schedule decides what a "
                "request without a lookahead field gets, so request_default would never apply",
                loc=("lookahead", "request_default"), code="schedule-with-request-default",
                hint="remove request_default, or put its spec in the schedule (e.g. as the only band)")
        try:
            schedule = self.lookahead_schedule
        except ScheduleError as exc:
            loc = where + ((exc.index,) if exc.index is not None else ()) + ((exc.field,) if exc.field else ())
            raise ConfigRuleError(f"lookahead.schedule: {exc.message}", loc=loc,
                                  code=_SCHEDULE_CODES.get(exc.rule, "schedule"), hint=exc.hint) from None
        assert schedule is not None
        for index, excess in schedule.excess(self.spec):
            parts = ", ".join(f"{f} {r} > {s}" for f, r, s in excess)
            raise ConfigRuleError(
                f"lookahead.schedule band {index} asks for ({schedule.bands[index].spec}), which lookahead.spec "
                f"({self.spec}) does not admit ({parts}): the engine would refuse those requests",
                loc=where + (index, "spec"), code="schedule-not-admitted",
                hint=f"use specs with w<={self.spec.window_size}, n<={self.spec.ngram_size}, "
                     f"g<={self.spec.verification_set_size}, or raise lookahead.spec to at least "
                     f"{schedule.smallest_engine_spec()} (and rebuild the engine)")
        return self


#: After ``serve.shutdown_grace_s``: seconds for the 503s of the requests its end stopped to be written (uvicorn cancels
#: what is left then) ...
ANSWER_MARGIN_S = 5.0
#: ... and in all, with the engine's close (``trtlade.contract.serving.ENGINE_CLOSE_S``: 30 s, on every engine), the
#: most ``trtlade serve`` takes beyond its grace to exit: a supervisor should wait the grace plus this before it
#: kills the process (the k8s export does).
STOP_MARGIN_S = 40.0


class ServeSection(_Section):
    engine: Literal["reference", "trtllm"] = Field("reference", description="Which engine serves.")
    host: str = Field("127.0.0.1", description="Bind address; 127.0.0.1 unless you mean to expose it.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 = any free port).")
    api_key_env: Optional[str] = Field(
        "TRTLADE_API_KEY", description="Environment variable holding the API key clients must send as "
        "a Bearer token; unset = no key required (set but empty is refused at start).")
    api_keys_file: Optional[Path] = Field(
        None, description="A keys file, one identity per key: lines `NAME KEY [admin]`, or YAML `keys: [{name, key, "
        "admin}]` (.yml/.yaml); relative to the config file. Default: $TRTLADE_API_KEYS_FILE. With several keys "
        "only an `admin` key may use /admin routes. The API key (api_key_env) joins as the identity `default`.")
    prefix_cache_scope: Optional[Literal["identity", "salt", "global"]] = Field(
        None, description="Whose cached prompt blocks a request may reuse. `identity`: only its own key's (the "
        "default with keys); `salt`: only its own key's with the same `cache_salt` (none: no reuse); `global`: "
        "everyone's (the default without keys: one tenant). A `cache_salt` splits any scope further. The scope "
        "changes which blocks are reused, never a token.")
    max_queue: int = Field(64, ge=1, description="Requests waiting beyond this get 429 with Retry-After.")
    max_prompt_tokens: Optional[int] = Field(
        None, ge=1, description="Longest prompt accepted (400 beyond); default: the engine's limit.")
    max_tokens_limit: Optional[int] = Field(
        None, ge=1, description="Largest max_tokens accepted (400 beyond); default: the engine's limit.")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger request bodies get 413.")
    shutdown_grace_s: float = Field(30.0, ge=0, le=86400, allow_inf_nan=False,
                                    description="SIGTERM: seconds in-flight requests get to finish (0: none); "
                                    "those still running then get a 503 `server_stopping`.")
    kv_cache_free_gpu_memory_fraction: Optional[float] = Field(
        None, gt=0, lt=1, description="trtllm engine: KvCacheConfig.free_gpu_memory_fraction, 0 < value < 1 "
        "(TensorRT-LLM's setFreeGpuMemoryFraction refuses 1.0).")
    kv_cache_enable_block_reuse: bool = Field(
        False, description="trtllm engine: KvCacheConfig.enable_block_reuse, set explicitly (the binding's "
        "default is False in 0.16 and True in later releases).")
    threads: Optional[int] = Field(None, ge=1, le=4096,  # the kernels' MAX_THREADS
                                   description="Reference engine CPU threads; default: cores.")
    prefix_cache_mb: int = Field(
        256, ge=0, description="Reference engine: MiB of prompt K/V kept across requests for exact prefix reuse "
        "(blocks of 16 tokens, least recently used evicted first); 0 = off. A request whose prompt starts with "
        "a cached prefix prefills only the rest (answers are kept too, for a conversation's next turn); "
        "usage.prompt_tokens_details.cached_tokens says how much.")
    prefill_chunk_tokens: int = Field(
        DEFAULT_PREFILL_CHUNK, ge=0, description="Reference engine: at most this many prompt tokens a step "
        "computes next to the requests decoding (chunked prefill: a long prompt advances by chunks inside their "
        "steps instead of stalling them for its whole prefill); 0 = off (a new prompt is prefilled whole before "
        "the step's decode). With nothing decoding see prefill_idle_chunk_tokens.")
    prefill_idle_chunk_tokens: int = Field(
        DEFAULT_IDLE_CHUNK, ge=0, description="Reference engine: with no request decoding, a prompt longer than this "
        "is prefilled by chunks of this many tokens (at most build.max_num_tokens), one chunk a step, so that the "
        "server sees a new request or a cancel between two chunks instead of after the whole prompt; shorter prompts "
        "are prefilled whole; of longer ones the one with the fewest tokens left goes, every other chunk the oldest's; "
        "0 = whole prompts (a long prompt holds every other request's first token and its own cancel until it ends). "
        "On a GPU, where 256 rows take milliseconds and each step adds its host work, a larger value (or 0) may give a "
        "long prompt its first token sooner.")
    prefill_stall: float = Field(
        DEFAULT_PREFILL_STALL, ge=0, allow_inf_nan=False,
        description="Reference engine, chunked prefill: the chunks are paced so that "
        "the decoding requests' steps take at most this many times as long as without them, on average (a "
        "token bucket: a short prompt goes in one step, a long one at the rate this allows); prompts longer than "
        "a chunk at 1 + 0.8 x (this - 1) on average (1.4 at 1.5), so that the running requests' TPOT p99 stays "
        "within this; with many prompts waiting beside few decoding requests the steps stretch to waiting / "
        "decoding instead (7 prompts beside 1 decoding: 7x); must be > 1, or 0 = fixed chunks of "
        "prefill_chunk_tokens.")

    max_draft_len: Optional[int] = Field(
        None, ge=0, description="Reference engine: the most draft tokens an NGram / SA request (its `speculation` "
        "block) may verify per step; a request asking for more gets 400 naming speculation.max_draft_len. Default: "
        "the larger of lookahead.spec's max_draft_len and the `speculation` block's.")
    ngram_implementation: Literal[NGRAM_IMPLEMENTATIONS] = Field(  # type: ignore[valid-type]
        "one_model", description="Reference engine: how NGram requests draft. one_model: TensorRT-LLM's current "
        "drafter (every request's history in a slot, searched on the GPU); host_pool: the host-side pattern pool of "
        "the 1.0-1.2 releases and early 1.3.0 release candidates (drafts not padded, a budget of max_tokens).")
    metrics_without_key: bool = Field(
        False, description="With API keys, GET /metrics needs a key like every other route but /health; true opens "
        "it to a scraper that cannot send one. With several keys such a scraper reads the tenants' view "
        "(metrics_min_others); with one key it reads the counters live, which tell anyone who can reach the port "
        "when that key's requests ran.")
    metrics_min_others: int = Field(
        4, ge=1, le=1000, description="With several API keys, GET /metrics is live for an admin key only; any other "
        "reader (another key, or a scraper let in by metrics_without_key) gets a copy of the counters renewed only "
        "once at least this many requests not its own arrived and ended since its last copy, so that no change it "
        "sees is a single request of another tenant. With metrics_without_key every such reader gets one copy, "
        "renewed over this many requests beside the busiest identity's: under one tenant's load alone it stays put "
        "(give Prometheus an admin key to read it live).")
    max_queue_per_identity: Optional[int] = Field(
        None, ge=1, description="With two or more API keys: the most sequences one identity may have waiting beyond "
        "its running ones (an `n: 8` request is 8); more get 429 naming its share, while the other identities' "
        "requests are still admitted. Default: an equal share of max_queue (max_queue / identities, at least 1). "
        "The trtllm engine schedules its own batch: there the server bounds each identity's sequences in flight "
        "to this plus max_running_per_identity.")
    max_running_per_identity: Optional[int] = Field(
        None, ge=1, description="With two or more API keys: the most batch slots one identity's sequences may hold "
        "at once (reference engine; a free slot goes to the waiting identity holding the fewest). Default: "
        "build.max_batch_size less one slot for each other identity (at most half the batch kept for them; at "
        "least 1), so that another identity's request finds a slot at once.")
    max_global_pool_size: int = Field(
        256, ge=1, description="Reference engine: the most slots an SA request's global pool may ask for "
        "(`speculation.global_pool_size`; more is a 400 naming it). The pool never grows past it, so a request "
        "cannot make finished requests stay in memory for the server's life.")
    draft_retained_tokens: int = Field(
        262144, ge=0, description="Reference engine: the most tokens of finished SA requests the global pools "
        "retain (searchable by later requests of the same namespace), and patterns the host-side NGram pools keep "
        "(ngram_implementation: host_pool), every namespace together; the oldest retained request or least "
        "recently used pool goes first. About 400 bytes per token: the default holds about 100 MiB. 0 = none "
        "retained.")

    @field_validator("prefill_stall")
    @classmethod
    def _stall_above_one(cls, value: float) -> float:
        if 0 < value <= 1:
            raise ValueError(f"{value} would leave prompts no time next to decoding requests: give a value > 1 "
                             "(1.5: their steps up to 1.5x as long), or 0 for fixed chunks of prefill_chunk_tokens")
        return value


class BenchSection(_Section):
    concurrency: list[Annotated[int, Field(ge=1, strict=True)]] = Field(list(DEFAULT_CONCURRENCY), min_length=1,
                                                           description="Concurrency levels, run in this order.")
    num_prompts: int = Field(16, ge=1, description="Requests per concurrency level and mode.")
    num_warmups: int = Field(1, ge=0, description="Warm-up requests per level (not measured).")
    repeats: int = Field(1, ge=1, le=100, description="Times the whole sweep runs, modes interleaved; speedups "
                         "get a verdict (higher, lower, within noise) from the repeat-to-repeat noise.")
    max_tokens: int = Field(50, ge=1, description="max_tokens per request.")
    ignore_eos: bool = Field(False, description="Send ignore_eos so every request makes max_tokens.")
    endpoint: Literal["chat", "completions"] = Field("chat", description="Which OpenAI route to load.")
    dataset: str = Field("mix", description=f"Bundled set ({', '.join(BUNDLED_DATASETS)}) or a JSONL/ShareGPT "
                         "path (relative to the config file).")
    modes: list[str] = Field(["ar", "lookahead"], min_length=1,
                             description="ar, lookahead (the server's spec), default (no field), auto or schedule "
                             "(trtlade's draft policies), explicit specs like 4-2-4, or NGram / SA drafters: "
                             "ngram[-D[-K]] (-latest, -private), sa[-D[-K]] (-global), ngram-auto.")
    seed: int = Field(0, description="Seed for prompt sampling and ordering.")
    result_dir: Path = Field(Path("reports"), description="Where run folders are written.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature sent with every request (> 0: "
                               "each prompt also gets its own seed, seed + its index, the same in every mode).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling sent with temperature > 0.")
    timeout_s: float = Field(600.0, gt=0, le=86400, allow_inf_nan=False,
                             description="Bound on one request (connect to last byte), seconds (at most a day).")
    prefix_cache: Literal["clear", "keep"] = Field(
        "clear", description="clear: empty each server's prefix cache (and a trtlade server's drafter pools) before "
        "every series (POST /admin/prefix-cache/clear), so that modes compare on equal terms; keep: leave them. The "
        "report gives the prefix-cache hit rate per series either way.")


class TrtladeConfig(_Section):
    """A trtlade deployment config."""

    model: ModelSection = Field(default_factory=ModelSection, description="The model.")
    build: BuildSection = Field(default_factory=BuildSection, description="Engine build settings.")
    lookahead: LookaheadSection = Field(
        default_factory=lambda: LookaheadSection(spec=AUTOREGRESSIVE),
        description="Lookahead (W,N,G) for the server and requests; required unless `speculation` is given "
        "(without it: (1,1,0), no Lookahead).")
    speculation: Optional[dict[str, Any]] = Field(
        None, description="NGram, SA or AUTO drafting, written as TensorRT-LLM's `speculative_config` block "
        "(decoding_type, max_draft_len, max_matching_ngram_size, is_use_oldest, is_public_pool, enable_global_pool, "
        "global_pool_size, max_concurrency, draft_len_schedule, acceptance_rate_window_size, "
        "acceptance_rate_threshold), checked by upstream's validators. On the reference engine: what a request "
        "that names neither `lookahead` nor `speculation` drafts with (AUTO resolved for build.max_batch_size).")
    serve: ServeSection = Field(default_factory=ServeSection, description="Server settings.")
    bench: BenchSection = Field(default_factory=BenchSection, description="Stress-test defaults.")

    @property
    def speculation_config(self) -> Optional[DraftConfig]:
        """The ``speculation`` block as a drafter (AUTO resolved for ``build.max_batch_size``), or None."""
        if self.speculation is None:
            return None
        return DraftConfig.parse(self.speculation, max_batch_size=self.build.max_batch_size, ignored_ok=True)

    @property
    def max_draft_len(self) -> int:
        """The most draft tokens an NGram / SA request may verify per step (``serve.max_draft_len`` or its
        default)."""
        if self.serve.max_draft_len is not None:
            return self.serve.max_draft_len
        config = self.speculation_config
        return max(self.lookahead.spec.max_draft_len, config.max_draft_len if config is not None else 0)

    @model_validator(mode="after")
    def _lookahead_or_speculation(self) -> "TrtladeConfig":
        if "lookahead" not in self.model_fields_set and self.speculation is None:
            raise ConfigRuleError("missing required key 'lookahead' (or a `speculation` block)", loc=(),
                                  code="missing-key", hint="add `lookahead: {spec: W,N,G}` (a Lookahead deployment), "
                                  "or `speculation: {decoding_type: NGram, max_draft_len: 4}` (TensorRT-LLM's "
                                  "PyTorch backend, 1.3 and later)")
        return self

    @model_validator(mode="after")
    def _speculation_rules(self) -> "TrtladeConfig":
        if self.speculation is None:
            return self
        try:
            config = self.speculation_config
        except DraftConfigError as exc:
            raise ConfigRuleError(exc.message, loc=("speculation",) + ((exc.field,) if exc.field in self.speculation
                                                                     else ()),
                                  code="speculation", hint=exc.hint) from None
        assert config is not None
        limit = self.serve.max_draft_len  # the reference engine's bound; TensorRT-LLM reads no such key
        if limit is not None and self.serve.engine == "reference" and config.max_draft_len > limit:
            raise ConfigRuleError(
                f"speculation.max_draft_len ({config.max_draft_len}) is above serve.max_draft_len ({limit}): the "
                "server would refuse its own default", loc=("speculation", "max_draft_len"),
                code="speculation-limit", hint=f"use max_draft_len <= {limit}, or raise serve.max_draft_len")
        return self

    @property
    def lookahead_preset(self) -> str:
        """The preset that runs: ``lookahead.preset`` if given, else ``fast`` on the reference engine
        and ``trtllm`` on the TensorRT-LLM engine (which runs nothing else)."""
        if self.lookahead.preset is not None:
            return self.lookahead.preset
        return DEFAULT_PRESET if self.serve.engine == "reference" else "trtllm"

    @property
    def lookahead_policy(self) -> str:
        """The policy of requests that name no lookahead: ``lookahead.policy`` if given, else
        ``schedule`` with a schedule, else ``auto`` on the reference engine and ``fixed`` on
        TensorRT-LLM's."""
        if self.lookahead.policy is not None:
            return self.lookahead.policy
        if self.lookahead.schedule:
            return "schedule"
        return "auto" if self.serve.engine == "reference" else "fixed"

    @model_validator(mode="after")
    def _auto_needs_the_reference_engine(self) -> "TrtladeConfig":
        if self.lookahead.policy == "auto" and self.serve.engine == "trtllm":
            raise ConfigRuleError(
                "lookahead.policy auto needs the reference engine: TensorRT-LLM's executor fixes a request's "
                "(w,n,g) at admission and cannot drop a running request's drafts per step",
                loc=("lookahead", "policy"), code="policy-engine",
                hint="measure the bands for your traffic with `trtlade tune --launch CONFIG --apply CONFIG` and "
                     "use policy schedule (the executor applies a band at admission), or serve.engine reference")
        return self

    @model_validator(mode="after")
    def _request_default_admitted(self) -> "TrtladeConfig":
        req = self.lookahead.request_default
        if req is not None and not self.lookahead.spec.admits(req):
            parts = ", ".join(f"{f} {r} > {s}" for f, r, s in self.lookahead.spec.excess(req))
            raise ValueError(
                f"lookahead.request_default ({req}) is not admitted by lookahead.spec "
                f"({self.lookahead.spec}): {parts}")
        return self

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        schema = cls.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = "trtlade deployment config"
        schema["anyOf"] = [{"required": ["lookahead"]}, {"required": ["speculation"]}]  # one drafter at least
        return schema

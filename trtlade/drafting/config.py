"""NGram, SA and AUTO drafting configs as TensorRT-LLM's PyTorch backend reads them: one frozen value object.

TensorRT-LLM 1.x serves model-free speculation from a ``speculative_config`` block whose
``decoding_type`` picks the drafter (``tensorrt_llm/llmapi/llm_args.py``, NVIDIA/TensorRT-LLM@a1a20970:
``NGramDecodingConfig``, ``SADecodingConfig``, ``AutoDecodingConfig``, all on ``DecodingBaseConfig``).
:class:`DraftConfig` reads that block, spelled as upstream spells it, applies every upstream validator
(each rule below names the validator it mirrors) and carries the derived numbers the engine needs.
Its wire form (:meth:`DraftConfig.to_wire`) is that block again, so a request's ``speculation``, a
trtlade config and a ``trtllm-serve --config`` file say the same thing the same way.

=================================================  ===========================================================
rule (upstream validator)                          example that breaks it
=================================================  ===========================================================
max_draft_len must be > 0 for NGram / SA           ``{"decoding_type": "NGram"}`` (no max_draft_len)
  (``validate_ngram_config``, ``validate_sa_config``)
NGram: max_matching_ngram_size is a PositiveInt    ``{"decoding_type": "NGram", ..., "max_matching_ngram_size": 0}``
SA: max_matching_ngram_size > 0 or -1, never 0     ``{"decoding_type": "SA", ..., "max_matching_ngram_size": 0}``
SA + enable_global_pool: -1 or in [1, 64]          ``max_matching_ngram_size: 65`` with the global pool
global_pool_size requires enable_global_pool=True  ``{"decoding_type": "SA", ..., "global_pool_size": 8}``
global_pool_size >= max_batch_size                 (``TorchLlmArgs.validate_speculative_config``)
max_concurrency / draft_len_schedule exclusive     both given
  (``validate_max_concurrency_and_draft_len_schedule_mutually_exclusive``)
draft_len_schedule keys >= 1, values >= 0,          ``{1: 3}`` with max_draft_len 4
  the smallest key maps to max_draft_len,
  none above it (``validate_draft_len_schedule_and_sort``)
acceptance_rate_threshold in [0, 1]                 ``1.5``
use_rejection_sampling refused for NGram and SA    ``true`` (``TorchLlmArgs.validate_speculative_config``)
=================================================  ===========================================================

``AUTO`` is resolved as upstream resolves it, from the server's ``max_batch_size``
(``tensorrt_llm/_torch/speculative/auto_heuristic.py``, ``suggest_spec_config``): NGram with
max_draft_len 5 and max_matching_ngram_size 3 up to 4 sequences, else 3 and 5, speculation off above
32 sequences (``max_concurrency=32``).

Worked example::

    >>> c = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2})
    >>> c.decoding_type, c.max_draft_len, c.max_matching_ngram_size, c.is_use_oldest, c.is_public_pool
    ('NGram', 4, 2, True, True)
    >>> str(c)
    'NGram(max_draft_len=4, max_matching_ngram_size=2, oldest, public pool)'
    >>> auto = DraftConfig.parse({"decoding_type": "AUTO"}, max_batch_size=8)
    >>> auto.decoding_type, auto.max_draft_len, auto.max_matching_ngram_size, auto.requested, auto.max_concurrency
    ('NGram', 3, 5, 'AUTO', 32)
    >>> [auto.draft_len_for(n) for n in (1, 32, 33)]         # speculation off above max_concurrency
    [3, 3, 0]
    >>> try:
    ...     DraftConfig.parse({"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 0})
    ... except DraftConfigError as exc:
    ...     print(exc.field, "|", exc.message)
    max_matching_ngram_size | max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match), got 0
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from trtlade.errors import TrtladeError

__all__ = [
    "DECODING_TYPES",
    "DRAFTER_MODE_HINT",
    "drafter_mode",
    "is_drafter_mode",
    "DraftConfig",
    "DraftConfigError",
    "SA_GLOBAL_MAX_NGRAM",
    "auto_config",
    "speculation_param",
]

#: the largest value of TensorRT-LLM's SizeType32 (int32), the executor's type of a draft length (the bound
#: trtlade.spec holds for (W,N,G): this layer may not import it, tests/test_drafting_upstream.py keeps them one)
SIZE_TYPE32_MAX = 2**31 - 1

#: The drafters trtlade runs from a ``speculative_config`` / ``speculation`` block (``AUTO`` resolves to NGram).
DECODING_TYPES: tuple[str, ...] = ("NGram", "SA", "AUTO")
#: SA with ``enable_global_pool``: matching is capped at 64 tokens (``SADecodingConfig.validate_sa_config``).
SA_GLOBAL_MAX_NGRAM = 64

#: Fields every drafter reads (``DecodingBaseConfig``) that change what it drafts, and each drafter's own.
_BASE_FIELDS = ("decoding_type", "max_draft_len", "max_total_draft_tokens", "max_concurrency", "draft_len_schedule",
                "acceptance_rate_window_size", "acceptance_rate_threshold", "use_rejection_sampling")
_OWN_FIELDS = {
    "NGram": ("max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"),
    "SA": ("max_matching_ngram_size", "enable_global_pool", "global_pool_size"),
    "AUTO": (),
}
#: ``DecodingBaseConfig`` fields a model-free drafter accepts and does not use (upstream ignores them);
#: a config file may carry them (validate-config warns: :func:`ignored_keys`), a request may not (they are a server's
#: setting).
IGNORED_BASE_FIELDS = ("speculative_model", "speculative_model_dir", "moe_backend", "load_format",
                       "allow_advanced_sampling", "advanced_sampling_mode", "enable_penalty")


class DraftConfigError(TrtladeError, ValueError):
    """A ``speculation`` / ``speculative_config`` block upstream would refuse: ``field`` is the key
    concerned (``max_matching_ngram_size``), ``rule`` the upstream validator it mirrors, ``hint`` what to do."""

    located = False  # the callers put the field in front (a request's param, a config's file:line)

    def __init__(self, message: str, *, field: str, rule: str, hint: str = "") -> None:
        super().__init__(message, hint, where=field)
        self.field = field
        self.rule = rule


def speculation_param(field: Optional[str], prefix: str = "speculation") -> str:
    """The request parameter of a field of the ``speculation`` block.

    >>> speculation_param("max_draft_len"), speculation_param("")
    ('speculation.max_draft_len', 'speculation')
    """
    return f"{prefix}.{field}" if field else prefix


@dataclass(frozen=True)
class DraftConfig:
    """A validated NGram or SA drafter (``AUTO`` resolved to its NGram), with upstream's field names.

    ``requested``: what the block asked for (``NGram``, ``SA`` or ``AUTO``). ``draft_len_schedule``: sorted
    ``(batch size, draft length)`` pairs, ``max_concurrency`` translated into one as upstream does.
    """

    decoding_type: str
    max_draft_len: int
    max_matching_ngram_size: int
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
    enable_global_pool: bool = False
    global_pool_size: Optional[int] = None
    max_concurrency: Optional[int] = None
    draft_len_schedule: Optional[tuple[tuple[int, int], ...]] = None
    acceptance_rate_window_size: Optional[int] = None
    acceptance_rate_threshold: Optional[float] = None
    requested: str = ""

    # ------------------------------------------------------------------------------- parsing
    @classmethod
    def parse(cls, value: Any, *, max_batch_size: Optional[int] = None, ignored_ok: bool = False) -> "DraftConfig":
        """Read a block (a mapping, or a ``DraftConfig`` returned as is). ``max_batch_size``: the server's,
        for AUTO and ``global_pool_size``. ``ignored_ok``: accept the base fields a model-free drafter ignores
        (a config file: upstream accepts them); a request's block refuses them."""
        if isinstance(value, DraftConfig):
            return value
        if not isinstance(value, Mapping):
            raise DraftConfigError(f"a speculation block is a mapping with decoding_type, got {value!r}",
                                   field="", rule="type", hint='e.g. {"decoding_type": "NGram", "max_draft_len": 4}')
        block = {str(k): v for k, v in value.items()}
        kind = _decoding_type(block.get("decoding_type"))
        _check_keys(block, kind, ignored_ok)
        if kind == "AUTO":  # "Attributes that are inherited from the base class are ignored" (AutoDecodingConfig)
            _check_auto(block, ignored_ok)
            return auto_config(max_batch_size)
        draft_len = _int(block, "max_draft_len", None, minimum=0, maximum=SIZE_TYPE32_MAX)
        if draft_len is None or draft_len <= 0:
            raise DraftConfigError(f"max_draft_len must be > 0 for {kind}, got {draft_len}", field="max_draft_len",
                                   rule=f"validate_{kind.lower()}_config",
                                   hint="give the draft tokens per step, e.g. 4 (the server's limit applies)")
        common = dict(decoding_type=kind, max_draft_len=draft_len, requested=kind, **_gating(block, draft_len))
        if kind == "NGram":
            config = cls(max_matching_ngram_size=_ngram_size(block), is_keep_all=_bool(block, "is_keep_all", True),
                         is_use_oldest=_bool(block, "is_use_oldest", True),
                         is_public_pool=_bool(block, "is_public_pool", True), **common)
        else:
            config = cls(is_public_pool=False, **common, **_sa_fields(block))
        if not ignored_ok:  # upstream sets max_total_draft_tokens to max_draft_len whatever a file says
            _check_total(block, config)
        if max_batch_size is not None:
            config.check_batch(max_batch_size)
        return config

    def check_batch(self, max_batch_size: int) -> None:
        """``global_pool_size >= max_batch_size`` (``TorchLlmArgs.validate_speculative_config``)."""
        if self.global_pool_size is not None and self.global_pool_size < max_batch_size:
            raise DraftConfigError(
                f"global_pool_size ({self.global_pool_size}) must be >= max_batch_size ({max_batch_size}): every "
                "running request holds a slot of the pool", field="global_pool_size",
                rule="TorchLlmArgs.validate_speculative_config",
                hint=f"use global_pool_size >= {max_batch_size}, or leave it out (default max(64, max_batch_size))")

    # ------------------------------------------------------------------------------- derived numbers
    @property
    def longest_match(self) -> bool:
        """SA with ``max_matching_ngram_size`` -1: the longest earlier suffix, however long."""
        return self.max_matching_ngram_size == -1

    def pool_size(self, max_batch_size: int) -> int:
        """SA's global pool slots: ``global_pool_size``, else ``max(64, max_batch_size)`` (its field doc)."""
        return self.global_pool_size if self.global_pool_size is not None else max(64, max_batch_size)

    def draft_len_for(self, batch_size: int) -> int:
        """Draft tokens for a step of ``batch_size`` sequences: the first schedule key >= it, 0 above every
        key (upstream's ``get_draft_len_for_batch_size``, ``tensorrt_llm/_torch/speculative/utils.py``);
        ``max_draft_len`` without a schedule."""
        if not self.draft_len_schedule:
            return self.max_draft_len
        keys = [k for k, _ in self.draft_len_schedule]
        index = bisect.bisect_left(keys, batch_size)
        return self.draft_len_schedule[index][1] if index < len(keys) else 0

    def host_draft_len_for(self, active: int, *, max_batch_size: int, max_num_tokens: Optional[int] = None) -> int:
        """Draft tokens for a step on the 1.0 to 1.2 host-side drafter, whose rules differ from
        :meth:`draft_len_for`: a ``draft_len_schedule`` gives the value of the largest key at or below the
        number of active requests (``Drafter.get_draft_len_for_batch_size``, ``bisect_right``; that line requires
        key 1), and ``max_concurrency`` turns drafting off when ``min(active, max_batch_size, max_num_tokens //
        (1 + draft length))`` exceeds it (``Drafter.should_use_spec_decode``,
        ``tensorrt_llm/_torch/speculative/drafter.py``).

        >>> c = DraftConfig.parse({"decoding_type": "NGram", "max_draft_len": 4, "max_concurrency": 8})
        >>> [c.host_draft_len_for(n, max_batch_size=16) for n in (1, 8, 9)]
        [4, 4, 0]
        >>> c.host_draft_len_for(6, max_batch_size=16, max_num_tokens=20)     # 20 // 5 = 4 <= 8: drafts
        4
        """
        draft = self.max_draft_len
        if self.draft_len_schedule and self.max_concurrency is None:
            keys = [k for k, _ in self.draft_len_schedule]
            index = bisect.bisect_right(keys, active) - 1
            draft = self.draft_len_schedule[index][1] if index >= 0 else self.max_draft_len
        if draft <= 0:
            return 0
        if self.max_concurrency is not None:
            load = min(active, max_batch_size, max_num_tokens // (1 + draft) if max_num_tokens else active)
            if load > self.max_concurrency:
                return 0
        return draft

    def with_limit(self, max_draft_len: int) -> "DraftConfig":
        """The same config with its draft length cut to ``max_draft_len`` (the schedule too)."""
        if self.max_draft_len <= max_draft_len:
            return self
        schedule = None if self.draft_len_schedule is None else tuple(
            (k, min(v, max_draft_len)) for k, v in self.draft_len_schedule)
        return replace(self, max_draft_len=max_draft_len, draft_len_schedule=schedule)

    # ------------------------------------------------------------------------------- output
    def to_wire(self) -> dict[str, Any]:
        """The block again, upstream's spelling, defaults left out except the drafter's own fields.

        >>> DraftConfig.parse({"decoding_type": "SA", "max_draft_len": 4}).to_wire()
        {'decoding_type': 'SA', 'max_draft_len': 4, 'max_matching_ngram_size': -1, 'enable_global_pool': False}
        """
        out: dict[str, Any] = {"decoding_type": self.decoding_type, "max_draft_len": self.max_draft_len}
        for name in _OWN_FIELDS[self.decoding_type]:
            value = getattr(self, name)
            if value is not None and (name != "is_keep_all" or not value):
                out[name] = value
        if self.draft_len_schedule is not None and self.max_concurrency is None:
            out["draft_len_schedule"] = {k: v for k, v in self.draft_len_schedule}
        for name in ("max_concurrency", "acceptance_rate_window_size", "acceptance_rate_threshold"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def __str__(self) -> str:
        if self.decoding_type == "NGram":
            parts = [f"max_matching_ngram_size={self.max_matching_ngram_size}",
                     "oldest" if self.is_use_oldest else "latest",
                     "public pool" if self.is_public_pool else "private pool"]
        else:
            match = "longest match" if self.longest_match else f"max_matching_ngram_size={self.max_matching_ngram_size}"
            parts = [match, *(["global pool"] if self.enable_global_pool else [])]
        if self.max_concurrency is not None:
            parts.append(f"max_concurrency={self.max_concurrency}")
        elif self.draft_len_schedule:
            parts.append("draft_len_schedule=" + ",".join(f"{k}:{v}" for k, v in self.draft_len_schedule))
        name = self.decoding_type if self.requested != "AUTO" else "AUTO->NGram"
        return f"{name}(max_draft_len={self.max_draft_len}, {', '.join(parts)})"


#: ``ngram`` / ``sa`` short names (bench, tune and engine-bench modes): max_draft_len 4, upstream's other defaults
_MODE_DEFAULTS = {"ngram": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2},
                  "sa": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}}
_MODE_OPTIONS = {"ngram": {"latest": ("is_use_oldest", False), "private": ("is_public_pool", False)},
                 "sa": {"global": ("enable_global_pool", True)}}
DRAFTER_MODE_HINT = ("ngram[-D[-K]] with -latest / -private, sa[-D[-K]] with -global (K -1: SA's longest match), "
                     "or ngram-auto (upstream's AUTO); e.g. ngram-4-2, sa-4--1-global")


def is_drafter_mode(name: str) -> bool:
    """Whether a mode name asks for an NGram / SA drafter (``ngram...``, ``sa...``)."""
    return name.strip().lower().split("-", 1)[0] in _MODE_DEFAULTS


def drafter_mode(name: str) -> dict[str, Any]:
    """A drafter's short name as its ``speculation`` block (checked), or :class:`DraftConfigError`. D is
    ``max_draft_len`` (default 4), K ``max_matching_ngram_size`` (NGram 2, SA -1, written ``--1``).

    >>> drafter_mode("ngram-3-5-latest")
    {'decoding_type': 'NGram', 'max_draft_len': 3, 'max_matching_ngram_size': 5, 'is_use_oldest': False}
    >>> drafter_mode("sa-6--1-global")
    {'decoding_type': 'SA', 'max_draft_len': 6, 'max_matching_ngram_size': -1, 'enable_global_pool': True}
    >>> drafter_mode("ngram-auto")
    {'decoding_type': 'AUTO'}
    """
    if not isinstance(name, str):
        raise DraftConfigError(f"a drafter mode is a name like sa-4, got {name!r}", field="", rule="mode",
                               hint=DRAFTER_MODE_HINT)
    kind, _, rest = name.strip().lower().partition("-")
    if kind not in _MODE_DEFAULTS:
        raise DraftConfigError(f"{name!r} names no drafter", field="", rule="mode", hint=DRAFTER_MODE_HINT)
    if kind == "ngram" and rest == "auto":
        return {"decoding_type": "AUTO"}
    block: dict[str, Any] = dict(_MODE_DEFAULTS[kind])
    numbers: list[int] = []
    for part in [p for p in rest.replace("--", "-~").split("-") if p]:
        if part.lstrip("~").isascii() and part.lstrip("~").isdigit():
            numbers.append(-int(part[1:]) if part.startswith("~") else int(part))
        elif part in _MODE_OPTIONS[kind]:
            key, value = _MODE_OPTIONS[kind][part]
            block[key] = value
        else:
            shown = "-" + part[1:] if part.startswith("~") else part  # "~" marks a minus sign while splitting
            raise DraftConfigError(f"{name!r}: {shown!r} is neither a number nor an option of {kind}", field="",
                                   rule="mode", hint=DRAFTER_MODE_HINT)
    if len(numbers) > 2:
        raise DraftConfigError(f"{name!r} has {len(numbers)} numbers: D (max_draft_len) and K at most", field="",
                               rule="mode", hint=DRAFTER_MODE_HINT)
    for key, value in zip(("max_draft_len", "max_matching_ngram_size"), numbers):
        block[key] = value
    DraftConfig.parse(block)
    return block


def auto_config(max_batch_size: Optional[int]) -> DraftConfig:
    """``AUTO`` as upstream resolves it (``suggest_spec_config(max_batch_size)``): NGram, draft 5 / match 3
    up to 4 sequences, else 3 / 5; off above 32 sequences.

    >>> auto_config(4).max_draft_len, auto_config(5).max_draft_len, auto_config(None).max_matching_ngram_size
    (5, 3, 5)
    """
    small = max_batch_size is not None and max_batch_size <= 4
    draft_len = 5 if small else 3
    return DraftConfig(decoding_type="NGram", max_draft_len=draft_len, max_matching_ngram_size=3 if small else 5,
                       max_concurrency=32, draft_len_schedule=((32, draft_len),), requested="AUTO")


# ----------------------------------------------------------------------------------- field readers
def _decoding_type(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DraftConfigError("decoding_type is missing: it names the drafter", field="decoding_type",
                               rule="discriminator", hint=f"use one of {', '.join(DECODING_TYPES)}")
    if not isinstance(value, str):
        raise DraftConfigError(f"decoding_type must be a drafter's name, got {value!r}", field="decoding_type",
                               rule="type", hint=f"use one of {', '.join(DECODING_TYPES)} (a string)")
    for kind in DECODING_TYPES:
        if value.strip() == kind:
            return kind
        if value.strip().lower() == kind.lower():  # TensorRT-LLM's tagged union is case-exact: 'sa' fails at start
            raise DraftConfigError(f"decoding_type {value!r} is not one TensorRT-LLM knows: the name is case-exact",
                                   field="decoding_type", rule="discriminator", hint=f"write {kind!r}")
    hint = f"use one of {', '.join(DECODING_TYPES)}"
    if value.strip().lower() == "lookahead":
        hint = ('Lookahead is not a PyTorch-backend drafter: send it as "lookahead": [w, n, g] on a server that '
                "runs it, or use NGram / SA")
    raise DraftConfigError(f"decoding_type {value!r} is not a model-free drafter trtlade runs", field="decoding_type",
                           rule="discriminator", hint=hint)


def _check_keys(block: Mapping[str, Any], kind: str, ignored_ok: bool) -> None:
    known = set(_BASE_FIELDS) | set(_OWN_FIELDS[kind]) | (set(IGNORED_BASE_FIELDS) if ignored_ok else set())
    if kind == "AUTO":  # AutoDecodingConfig has every base field and ignores them
        known |= set(IGNORED_BASE_FIELDS) | {"max_draft_len", "max_total_draft_tokens"}
    for key in block:
        if key in known:
            continue
        if key in IGNORED_BASE_FIELDS:
            raise DraftConfigError(f"{key} is a server setting, not a request's: {kind} drafts from the token "
                                   "history and uses no draft model", field=key, rule="extra_forbidden",
                                   hint=f"omit {key}")
        other = [k for k, own in _OWN_FIELDS.items() if key in own]
        hint = (f"{key} belongs to {' and '.join(other)}, not {kind}" if other else
                f"{kind} takes {', '.join(sorted((set(_BASE_FIELDS) | set(_OWN_FIELDS[kind])) - {'decoding_type'}))}")
        raise DraftConfigError(f"{key} is not a field of {kind}DecodingConfig", field=key, rule="extra_forbidden",
                               hint=hint)


def _check_auto(block: Mapping[str, Any], ignored_ok: bool) -> None:
    """AUTO's block: upstream types every base field (``DecodingBaseConfig``: ``max_draft_len`` NonNegativeInt,
    ``max_concurrency`` PositiveInt, ...) and then ignores them, choosing NGram's settings itself. A config file
    (``ignored_ok``) may carry them, type-checked as upstream checks them; a request's block may not: the value
    would be dropped without a word.

    >>> _check_auto({"decoding_type": "AUTO", "max_draft_len": 50}, ignored_ok=False)
    Traceback (most recent call last):
    ...
    trtlade.drafting.config.DraftConfigError: AUTO chooses its own draft settings (upstream ignores max_draft_len ...
    """
    given = [key for key in block if key != "decoding_type"]
    if given and not ignored_ok:
        raise DraftConfigError(f"AUTO chooses its own draft settings (upstream ignores {', '.join(given)} in an AUTO "
                               "block): the value would be dropped", field=given[0], rule="ignored",
                               hint=f"send {{\"decoding_type\": \"AUTO\"}} alone, or NGram with {given[0]} "
                                    "(e.g. {\"decoding_type\": \"NGram\", \"max_draft_len\": 4})")
    _int(block, "max_draft_len", None, minimum=0)
    _int(block, "max_total_draft_tokens", None)
    _int(block, "max_concurrency", None, minimum=1)
    _int(block, "acceptance_rate_window_size", None, minimum=0)


def _int(block: Mapping[str, Any], name: str, default: Optional[int], *, minimum: Optional[int] = None,
         maximum: Optional[int] = None) -> Optional[int]:
    value = block.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DraftConfigError(f"{name} must be an integer, got {value!r}", field=name, rule="type")
    if minimum is not None and value < minimum:
        raise DraftConfigError(f"{name} must be >= {minimum}, got {value}", field=name, rule="range")
    if maximum is not None and value > maximum:  # the executor's draft length is a SizeType32 (int32)
        raise DraftConfigError(f"{name} must be <= {maximum} (a SizeType32, int32, in TensorRT-LLM's executor), "
                               f"got {value}", field=name, rule="SizeType32",
                               hint="a draft length is a few tokens a step, e.g. 4")
    return value


def _bool(block: Mapping[str, Any], name: str, default: bool) -> bool:
    value = block.get(name, default)
    if not isinstance(value, bool):
        raise DraftConfigError(f"{name} must be true or false, got {value!r}", field=name, rule="type")
    return value


def _ngram_size(block: Mapping[str, Any]) -> int:
    value = _int(block, "max_matching_ngram_size", 2)
    assert value is not None
    if value < 1:  # NGramDecodingConfig: PositiveInt
        raise DraftConfigError(f"max_matching_ngram_size must be >= 1 for NGram, got {value}",
                               field="max_matching_ngram_size", rule="PositiveInt",
                               hint="NGram matches up to this many tokens (default 2); the longest match (-1) is SA's")
    return value


def _sa_fields(block: Mapping[str, Any]) -> dict[str, Any]:
    """``SADecodingConfig.validate_sa_config``'s rules, in its order."""
    size = _int(block, "max_matching_ngram_size", -1)
    assert size is not None
    pool = _bool(block, "enable_global_pool", False)
    rule = "validate_sa_config"
    if size == 0 or size < -1:
        raise DraftConfigError(f"max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match), got {size}",
                               field="max_matching_ngram_size", rule=rule, hint="-1 (the default) matches the longest "
                               "earlier suffix; k > 0 tries k, k-1, ..., 1 tokens")
    if pool and size != -1 and not 1 <= size <= SA_GLOBAL_MAX_NGRAM:
        raise DraftConfigError(f"max_matching_ngram_size must be -1 (longest match) or in [1, {SA_GLOBAL_MAX_NGRAM}] "
                               f"when enable_global_pool is True, got {size}", field="max_matching_ngram_size",
                               rule=rule, hint=f"the global pool matches at most {SA_GLOBAL_MAX_NGRAM} tokens")
    pool_size = _int(block, "global_pool_size", None)
    if pool_size is not None:
        if pool_size < 1:
            raise DraftConfigError(f"global_pool_size must be >= 1, got {pool_size}", field="global_pool_size",
                                   rule=rule)
        if not pool:
            raise DraftConfigError("global_pool_size requires enable_global_pool=True", field="global_pool_size",
                                   rule=rule, hint="add enable_global_pool: true, or leave global_pool_size out")
    return {"max_matching_ngram_size": size, "enable_global_pool": pool, "global_pool_size": pool_size}


def _gating(block: Mapping[str, Any], draft_len: int) -> dict[str, Any]:
    """``max_concurrency`` / ``draft_len_schedule`` / the acceptance-rate gate / rejection sampling."""
    concurrency = _int(block, "max_concurrency", None)
    if concurrency is not None and concurrency < 1:  # PositiveInt
        raise DraftConfigError(f"max_concurrency must be >= 1, got {concurrency}", field="max_concurrency",
                               rule="PositiveInt", hint="speculation is off for steps of more sequences than this")
    schedule = _schedule(block.get("draft_len_schedule"), draft_len)
    if concurrency is not None and schedule is not None:
        raise DraftConfigError("max_concurrency and draft_len_schedule are mutually exclusive",
                               field="draft_len_schedule",
                               rule="validate_max_concurrency_and_draft_len_schedule_mutually_exclusive",
                               hint="use max_concurrency for a simple speculation cutoff, or draft_len_schedule for "
                                    "dynamic draft-length control")
    if concurrency is not None:  # translated as upstream translates it (one key: max_concurrency -> max_draft_len)
        schedule = ((concurrency, draft_len),)
    window = _int(block, "acceptance_rate_window_size", None, minimum=0)
    threshold = block.get("acceptance_rate_threshold")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise DraftConfigError(f"acceptance_rate_threshold must be a number in [0, 1], got {threshold!r}",
                                   field="acceptance_rate_threshold", rule="range",
                                   hint="the share of drafted tokens accepted below which speculation stops")
        threshold = float(threshold)
    if _bool(block, "use_rejection_sampling", False):
        raise DraftConfigError(f"use_rejection_sampling is not supported by {block.get('decoding_type')}: it has no "
                               "draft distribution; a sampled request is verified by exact match, which is lossless",
                               field="use_rejection_sampling", rule="TorchLlmArgs.validate_speculative_config",
                               hint="omit use_rejection_sampling or send false")
    return {"max_concurrency": concurrency, "draft_len_schedule": schedule,
            "acceptance_rate_window_size": window, "acceptance_rate_threshold": threshold}


def _schedule(value: Any, draft_len: int) -> Optional[tuple[tuple[int, int], ...]]:
    """``DecodingBaseConfig.validate_draft_len_schedule_and_sort``: keys >= 1, values >= 0, the smallest key
    maps to max_draft_len, none above it; sorted by key."""
    if value is None:
        return None
    field = "draft_len_schedule"
    if not isinstance(value, Mapping) or not value:
        raise DraftConfigError(f"draft_len_schedule must be a mapping batch size -> draft length, got {value!r}",
                               field=field, rule="type", hint="e.g. {4: 4, 8: 2, 32: 1}")
    pairs: list[tuple[int, int]] = []
    for key, length in value.items():
        try:
            digits = str(key).strip().lstrip("-")
            batch = int(key) if not isinstance(key, bool) and digits.isascii() and digits.isdigit() else None
        except ValueError:
            batch = None
        if batch is None or isinstance(length, bool) or not isinstance(length, int):
            raise DraftConfigError(f"draft_len_schedule entry {key!r}: {length!r} is not batch size -> draft length "
                                   "(integers)", field=field, rule="type", hint="e.g. {4: 4, 8: 2, 32: 1}")
        if batch < 1:
            raise DraftConfigError(f"draft_len_schedule: batch size threshold must be >= 1, got {batch}",
                                   field=field, rule="validate_draft_len_schedule_and_sort")
        if length < 0:
            raise DraftConfigError(f"draft_len_schedule: draft length must be >= 0, got {length}",
                                   field=field, rule="validate_draft_len_schedule_and_sort")
        pairs.append((batch, length))
    pairs.sort()
    smallest, first = pairs[0]
    if first != draft_len:
        raise DraftConfigError(
            f"draft_len_schedule[{smallest}] must equal max_draft_len because it is the smallest batch-size key: "
            f"got {first}, but max_draft_len={draft_len}", field=field, rule="validate_draft_len_schedule_and_sort",
            hint=f"map batch size {smallest} to {draft_len}")
    for batch, length in pairs:
        if length > draft_len:
            raise DraftConfigError(
                f"draft_len_schedule: all draft lengths must be <= max_draft_len: got {length} for batch size "
                f"{batch}, but max_draft_len={draft_len}", field=field, rule="validate_draft_len_schedule_and_sort")
    return tuple(pairs)


def ignored_keys(block: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The keys of a config file's block (``ignored_ok``) that TensorRT-LLM accepts and does not use, with why:
    every key of an AUTO block but ``decoding_type`` (``AutoDecodingConfig`` ignores what it inherits), the draft-model
    fields of NGram and SA, and a ``max_total_draft_tokens`` other than ``max_draft_len``, which upstream replaces.

    >>> ignored_keys({"decoding_type": "AUTO", "max_draft_len": 9})
    [('max_draft_len', 'AUTO chooses its own draft settings: upstream ignores max_draft_len in an AUTO block')]
    >>> ignored_keys({"decoding_type": "NGram", "max_draft_len": 4, "max_total_draft_tokens": 4})
    []
    """
    try:
        kind = _decoding_type(block.get("decoding_type"))
    except DraftConfigError:
        return []
    if kind == "AUTO":
        return [(key, f"AUTO chooses its own draft settings: upstream ignores {key} in an AUTO block")
                for key in block if key != "decoding_type"]
    out = [(key, f"{kind} drafts from the token history and uses no draft model: upstream ignores {key}")
           for key in block if key in IGNORED_BASE_FIELDS]
    total, draft_len = block.get("max_total_draft_tokens"), block.get("max_draft_len")
    if total is not None and total != draft_len:
        out.append(("max_total_draft_tokens", f"{kind} drafts one chain: upstream sets max_total_draft_tokens to "
                                              f"max_draft_len ({draft_len})"))
    return out


def _check_total(block: Mapping[str, Any], config: DraftConfig) -> None:
    """``max_total_draft_tokens``: NGram and SA draft a linear chain, so upstream sets it to max_draft_len
    whatever was given; a different value here would be dropped, so it is refused rather than ignored."""
    total = _int(block, "max_total_draft_tokens", None)
    if total is not None and total != config.max_draft_len:
        raise DraftConfigError(
            f"max_total_draft_tokens ({total}) differs from max_draft_len ({config.max_draft_len}): "
            f"{config.decoding_type} drafts one chain, so TensorRT-LLM sets it to max_draft_len",
            field="max_total_draft_tokens", rule=f"validate_{config.decoding_type.lower()}_config",
            hint="leave max_total_draft_tokens out")

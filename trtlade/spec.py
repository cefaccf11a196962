"""The (W, N, G) Lookahead spec: one frozen value object for build, serve, validate and the engine.

``LookaheadSpec(window_size=W, ngram_size=N, verification_set_size=G)`` carries every number
TensorRT-LLM derives from the three sizes and every legality rule of its C++
``LookaheadDecodingConfig``. The canonical spelling is ``window_size / ngram_size /
verification_set_size``; every upstream spelling is accepted by :meth:`LookaheadSpec.parse`,
and :data:`FIELD_ALIASES` is the only place those aliases are defined.

Worked example, (W, N, G) = (4, 2, 4), the user's deployment::

    >>> s = LookaheadSpec.parse("4,2,4")
    >>> s.max_draft_len            # (N-2 if N > 1 else 0) + (W-1+G)*(N-1) = 0 + 7*1
    7
    >>> s.decoding_tokens          # max_draft_len + 1 (the golden token)
    8
    >>> s.max_path_len, s.max_draft_path_len
    (2, 1)
    >>> s.admits(LookaheadSpec.parse([2, 2, 1]))
    True
    >>> LookaheadSpec.parse({"max_window_size": 7, "max_ngram_size": 7,
    ...                      "max_verification_set_size": 7}).max_draft_len
    83
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from trtlade.errors import TrtladeError, did_you_mean

__all__ = [
    "FIELDS",
    "FIELD_ALIASES",
    "LookaheadSpec",
    "SpecError",
    "SpecWarning",
    "AUTOREGRESSIVE",
    "MEANINGFUL_MINIMUM",
    "DRAFT_TOKENS_WARNING_THRESHOLD",
    "fitting_specs",
    "WIRE_NAMES",
    "wire_param",
]

FIELDS: tuple[str, str, str] = ("window_size", "ngram_size", "verification_set_size")

#: Every accepted spelling of each field, canonical name first. The only alias table in trtlade.
#: Sources: TensorRT-LLM executor/LLM API (max_*), its Python wrapper typo (windows_size), the
#: Triton backend (lookahead_*), the authors' lade (WINDOW_SIZE, LEVEL, GUESS_SET_SIZE), grps_trtllm
#: (canonical names) and trtlade's own per-request short form (w, n, g).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "window_size": (
        "window_size", "w", "W", "windows_size", "max_window_size", "lookahead_window_size",
        "WINDOW_SIZE",
    ),
    "ngram_size": (
        "ngram_size", "n", "N", "max_ngram_size", "lookahead_ngram_size", "LEVEL",
    ),
    "verification_set_size": (
        "verification_set_size", "g", "G", "max_verification_set_size",
        "lookahead_verification_set_size", "GUESS_SET_SIZE",
    ),
}

#: The per-request wire form's short name of each field: a request sends ``{"w": 2, "n": 2, "g": 1}``
#: and an error about it names ``lookahead.w``. Used by :meth:`LookaheadSpec.to_wire` and
#: :func:`wire_param`, the only places that spell the wire form.
WIRE_NAMES: dict[str, str] = {"window_size": "w", "ngram_size": "n", "verification_set_size": "g"}

_ALIAS_TO_FIELD: dict[str, str] = {
    alias: field for field, aliases in FIELD_ALIASES.items() for alias in aliases
}

#: Baseten's guidance: above this many draft tokens per step lookahead rarely pays.
DRAFT_TOKENS_WARNING_THRESHOLD = 128

#: The largest size TensorRT-LLM takes: ``LookaheadDecodingConfig(SizeType32 windowSize, SizeType32 ngramSize,
#: SizeType32 verificationSetSize)`` (NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/executor/executor.h,
#: 879039f; ``SizeType32`` is ``std::int32_t``), so a larger Python int does not convert to the constructor's
#: argument and the executor config is refused before any rule is checked.
SIZE_TYPE32_MAX = 2**31 - 1


class SpecError(TrtladeError, ValueError):
    """An illegal or unparsable (W, N, G).

    ``rule`` names the TensorRT-LLM rule broken (``ngramSize requires >= 1`` ...) or ``parse``;
    ``field`` is the canonical field concerned (or None); ``hint`` says what to do.
    """

    def __init__(self, message: str, *, rule: str, field: str | None = None, hint: str = "") -> None:
        super().__init__(message, hint, where=field or "")
        self.rule = rule
        self.field = field

    def __str__(self) -> str:  # message plus hint, one line each (the field is in the message)
        return self.message + (f"\nhint: {self.hint}" if self.hint else "")


@dataclass(frozen=True)
class SpecWarning:
    """A legal but questionable spec (below the meaningful minimum, too many draft tokens ...)."""

    code: str
    message: str
    hint: str = ""


@dataclass(frozen=True, slots=True)
class LookaheadSpec:
    """(W, N, G): window size, n-gram size, verification set size. Immutable and always legal.

    Construction enforces TensorRT-LLM's ``LookaheadDecodingConfig`` rules in its constructor's order
    (cpp/tensorrt_llm/executor/decodingConfig.cpp), so a spec that breaks several is refused with the rule
    TensorRT-LLM names first, e.g. (4, 1, 2) with the third:

    ================================  ==========================================
    rule (TensorRT-LLM's message)     example that breaks it
    ================================  ==========================================
    ngramSize requires >= 1           (4, 0, 4)
    windowSize requires >= 1          (0, 2, 4)
    ngramSize=1 requires              (1, 1, 2), (4, 1, 2), (1, 1, -1)
    verificationSetSize=0
    ngramSize=1 requires windowSize=1 (4, 1, 0)
    verificationSetSize requires >=0  (4, 2, -1)
    SizeType32 (each size an int32)   (2147483648, 2, 2)
    SizeType32 (decoding tokens, the  (2147483647, 2, 2): max_draft_len
    engine's max_draft_len + 1)       2147483648
    ================================  ==========================================
    """

    window_size: int
    ngram_size: int
    verification_set_size: int

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpecError(
                    f"{name} must be an integer, got {value!r}",
                    rule="type", field=name, hint="write the spec as three integers, e.g. 4,2,4",
                )
            if value > SIZE_TYPE32_MAX:
                raise SpecError(f"{name} is {value}: a SizeType32 (int32) holds at most {SIZE_TYPE32_MAX}",
                                rule="SizeType32", field=name,
                                hint="TensorRT-LLM takes each size as an int32; lookahead pays with single digits, "
                                     "e.g. 4,2,4")
        w, n, g = self.window_size, self.ngram_size, self.verification_set_size
        if n < 1:
            raise SpecError(f"ngram_size is {n}: ngramSize requires >= 1", rule="ngramSize requires >= 1",
                            field="ngram_size", hint="use N >= 2 for lookahead, or (1,1,0) to turn it off")
        if w < 1:
            raise SpecError(f"window_size is {w}: windowSize requires >= 1", rule="windowSize requires >= 1",
                            field="window_size", hint="use W >= 1")
        if n == 1 and g != 0:
            raise SpecError(
                f"ngram_size is 1 but verification_set_size is {g}: ngramSize=1 requires verificationSetSize=0",
                rule="ngramSize=1 requires verificationSetSize=0", field="verification_set_size",
                hint="(1,1,0) is plain autoregressive decoding; for lookahead use N >= 2")
        if n == 1 and w != 1:
            raise SpecError(f"ngram_size is 1 but window_size is {w}: ngramSize=1 requires windowSize=1",
                            rule="ngramSize=1 requires windowSize=1", field="window_size",
                            hint="(1,1,0) is plain autoregressive decoding; for lookahead use N >= 2")
        if g < 0:
            raise SpecError(f"verification_set_size is {g}: verificationSetSize requires >=0",
                            rule="verificationSetSize requires >=0", field="verification_set_size",
                            hint="use G >= 0")
        if self.decoding_tokens > SIZE_TYPE32_MAX:
            raise SpecError(f"({w},{n},{g}) makes {self.decoding_tokens} tokens a step (max_draft_len "
                            f"{self.max_draft_len} + 1): a SizeType32 (int32) holds at most {SIZE_TYPE32_MAX}",
                            rule="SizeType32", field="window_size",
                            hint="TensorRT-LLM sizes an engine's decoding tokens as an int32 (trtllm-build's "
                                 "--max_draft_len, the runtime's max_decoding_tokens); lookahead pays with single "
                                 "digits, e.g. 4,2,4")

    # ----------------------------------------------------------------------------- parsing
    @classmethod
    def parse(cls, value: Any) -> "LookaheadSpec":
        """Parse ``"4,2,4"``, ``"[7,7,7]"``, ``"(4, 2, 4)"``, ``"4-2-4"``, a 3-sequence, a mapping in
        any spelling of :data:`FIELD_ALIASES`, or a ``LookaheadSpec`` (returned as is).

        >>> LookaheadSpec.parse("(4, 2, 4)") == LookaheadSpec.parse({"WINDOW_SIZE": 4, "LEVEL": 2,
        ...                                                          "GUESS_SET_SIZE": 4})
        True
        """
        if isinstance(value, LookaheadSpec):
            return value
        if isinstance(value, str):
            return cls._parse_text(value)
        if isinstance(value, Mapping):
            return cls._parse_mapping(value)
        if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
            return cls._parse_sequence(list(value), shown=repr(value))
        if hasattr(value, "max_window_size") and hasattr(value, "max_ngram_size"):
            # a TensorRT-LLM LookaheadDecodingConfig (executor or LLM API)
            return cls(int(value.max_window_size), int(value.max_ngram_size),
                       int(value.max_verification_set_size))
        raise SpecError(f"cannot read a (W,N,G) spec from {value!r}", rule="parse",
                        hint='write it as "W,N,G" (e.g. "4,2,4"), [W, N, G] or a mapping with '
                             "window_size, ngram_size, verification_set_size")

    @classmethod
    def _parse_text(cls, text: str) -> "LookaheadSpec":
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                return cls._parse_mapping(json.loads(stripped))
            except json.JSONDecodeError as exc:
                raise SpecError(f"cannot read {text!r} as a JSON mapping: {exc.msg}", rule="parse",
                                hint='e.g. {"window_size": 4, "ngram_size": 2, "verification_set_size": 4}'
                                ) from None
        inner = stripped
        if len(inner) >= 2 and (inner[0], inner[-1]) in {("[", "]"), ("(", ")")}:
            inner = inner[1:-1]
        # "4,2,4" (commas; negative numbers survive) or "4-2-4" / "4 2 4" / "4x2x4"
        if "," not in inner and re.search(r"(^|[\s\-x/])-\s*[0-9]", inner.strip()):
            # "4 -2 4", "-4-2-4", "4--2-4": a minus that is a sign, which the "-" separator would drop
            raise SpecError(f"a negative number in {text!r}", rule="parse",
                            hint='sizes are whole numbers >= 0 (N >= 1, W >= 1); write it as "W,N,G", e.g. "4,2,4"')
        separator = r"," if "," in inner else r"[\s\-x/]+"
        parts = [p.strip() for p in re.split(separator, inner.strip())] if inner.strip() else []
        if not any(parts):  # "" or separators alone ("x", "-"): no number at all, not "2 of 3"
            parts = []
        if "" in parts:  # "4,2,4," or ",4,2,4": a field left empty, not a fourth number
            raise SpecError(f"an empty field in {text!r}", rule="parse",
                            hint='write it as "W,N,G" with a number in each field, e.g. "4,2,4"')
        return cls._parse_sequence(parts, shown=repr(text))

    @classmethod
    def _parse_sequence(cls, items: list[Any], *, shown: str) -> "LookaheadSpec":
        if len(items) != 3:
            raise SpecError(f"a spec has three numbers (W,N,G), got {len(items)} in {shown}", rule="parse",
                            hint='write it as "W,N,G", e.g. "4,2,4"')
        values = [cls._to_int(item, field) for item, field in zip(items, FIELDS)]
        return cls(*values)

    @classmethod
    def _parse_mapping(cls, mapping: Mapping[Any, Any]) -> "LookaheadSpec":
        found: dict[str, tuple[str, Any]] = {}
        for key, value in mapping.items():
            field = _ALIAS_TO_FIELD.get(str(key))
            if field is None:
                known = ", ".join(sorted(_ALIAS_TO_FIELD))
                raise SpecError(f"unknown lookahead key {key!r}", rule="parse", field=None,
                                hint=f"{did_you_mean(str(key), _ALIAS_TO_FIELD)}accepted keys: {known}")
            if field in found:
                raise SpecError(f"{field} is given twice, as {found[field][0]!r} and {key!r}", rule="parse",
                                field=field, hint="keep one spelling")
            found[field] = (str(key), value)
        missing = [f for f in FIELDS if f not in found]
        if missing:
            raise SpecError(f"lookahead spec is missing {', '.join(missing)}", rule="parse", field=missing[0],
                            hint="give all three: window_size, ngram_size, verification_set_size")
        return cls(*(cls._to_int(found[f][1], f) for f in FIELDS))

    @staticmethod
    def _to_int(item: Any, field: str) -> int:
        if isinstance(item, bool):
            raise SpecError(f"{field} must be an integer, got {item!r}", rule="type", field=field,
                            hint="write the spec as three integers, e.g. 4,2,4")
        if isinstance(item, int):
            return item
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, str) and re.fullmatch(r"[+-]?[0-9]+", item.strip()):
            return int(item.strip())
        ascii_only = isinstance(item, str) and any(ch.isdigit() and not ch.isascii() for ch in item)
        raise SpecError(f"{field} must be an integer, got {item!r}", rule="type", field=field,
                        hint="write the spec as three integers in ASCII digits (0-9), e.g. 4,2,4" if ascii_only
                        else "write the spec as three integers, e.g. 4,2,4")

    # ----------------------------------------------------------------------------- derived numbers
    @property
    def max_draft_len(self) -> int:
        """Draft tokens per step: ``(N-2 if N > 1 else 0) + (W-1+G)*(N-1)``; trtllm-build's --max_draft_len."""
        n = self.ngram_size
        return (0 if n == 1 else n - 2) + (self.window_size - 1 + self.verification_set_size) * (n - 1)

    @property
    def decoding_tokens(self) -> int:
        """Tokens per decoding step, golden token included: ``max_draft_len + 1``."""
        return self.max_draft_len + 1

    @property
    def max_path_len(self) -> int:
        """At most N tokens are accepted per step."""
        return self.ngram_size

    @property
    def max_draft_path_len(self) -> int:
        return self.ngram_size - 1

    @property
    def is_autoregressive(self) -> bool:
        """(1,1,0) and anything with N == 1 or no draft tokens: plain one-token-per-step decoding."""
        return self.max_draft_len == 0

    @property
    def llmapi_compatible(self) -> bool:
        """The 1.x LLM-API wrapper requires every field > 0 (so it rejects G=0, hence (1,1,0))."""
        return min(self.as_tuple()) > 0

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.window_size, self.ngram_size, self.verification_set_size)

    def to_dict(self) -> dict[str, int]:
        return dict(zip(FIELDS, self.as_tuple()))

    def to_wire(self) -> dict[str, int]:
        """The per-request wire form, as requests send it and ``usage.lookahead.spec`` reports it.

        >>> LookaheadSpec(4, 2, 4).to_wire()
        {'w': 4, 'n': 2, 'g': 4}
        >>> LookaheadSpec.parse(LookaheadSpec(2, 2, 1).to_wire())
        LookaheadSpec(window_size=2, ngram_size=2, verification_set_size=1)
        """
        return {WIRE_NAMES[f]: v for f, v in zip(FIELDS, self.as_tuple())}

    def derived(self) -> dict[str, Any]:
        """Every derived number, as data (what ``trtlade spec --json`` prints)."""
        return {
            **self.to_dict(),
            "max_draft_len": self.max_draft_len,
            "decoding_tokens": self.decoding_tokens,
            "max_path_len": self.max_path_len,
            "max_draft_path_len": self.max_draft_path_len,
            "autoregressive": self.is_autoregressive,
            "llmapi_compatible": self.llmapi_compatible,
            "trtllm_build_flags": self.trtllm_build_flags(),
            "warnings": [w.message for w in self.warnings()],
        }

    def trtllm_build_flags(self) -> list[str]:
        return ["--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", str(self.max_draft_len)]

    # ----------------------------------------------------------------------------- rules
    def admits(self, request: "LookaheadSpec") -> bool:
        """TensorRT-LLM's ``isLE``: a request (w,n,g) runs on this server spec iff w<=W, n<=N, g<=G."""
        return not self.excess(request)

    def excess(self, request: "LookaheadSpec") -> list[tuple[str, int, int]]:
        """The fields where ``request`` exceeds this spec: ``[(field, requested, limit), ...]``."""
        return [
            (field, r, s)
            for field, r, s in zip(FIELDS, request.as_tuple(), self.as_tuple())
            if r > s
        ]

    def warnings(self) -> list[SpecWarning]:
        out: list[SpecWarning] = []
        if not self.is_autoregressive and (
            self.window_size < 2 or self.ngram_size < 2 or self.verification_set_size < 1
        ):
            out.append(SpecWarning(
                "below-minimum",
                f"({self}) is below the smallest meaningful lookahead setting (2,2,1)",
                "use (1,1,0) to turn lookahead off, or at least (2,2,1)",
            ))
        if self.max_draft_len > DRAFT_TOKENS_WARNING_THRESHOLD:
            out.append(SpecWarning(
                "too-many-draft-tokens",
                f"({self}) drafts {self.max_draft_len} tokens per step, above {DRAFT_TOKENS_WARNING_THRESHOLD}",
                "large specs rarely pay: the forward turns compute-bound; try e.g. (7,7,7) or (4,3,4)",
            ))
        return out

    def __str__(self) -> str:
        return f"{self.window_size},{self.ngram_size},{self.verification_set_size}"


AUTOREGRESSIVE = LookaheadSpec(1, 1, 0)
MEANINGFUL_MINIMUM = LookaheadSpec(2, 2, 1)


def fitting_specs(max_draft_len: int, near: LookaheadSpec | None = None, limit: int = 5,
                  max_size: int = 16) -> list[LookaheadSpec]:
    """Legal specs (sizes up to ``max_size``) whose max_draft_len equals ``max_draft_len``, closest to
    ``near`` first (by the sum of absolute field differences).

    >>> [str(s) for s in fitting_specs(7, near=LookaheadSpec(4, 3, 4), limit=3)]
    ['4,2,4', '3,2,5', '5,2,3']
    """
    found: list[LookaheadSpec] = []
    for n in range(1, max_size + 1):
        for w in range(1, max_size + 1):
            for g in range(0, max_size + 1):
                try:
                    s = LookaheadSpec(w, n, g)
                except SpecError:
                    continue
                if s.max_draft_len == max_draft_len:
                    found.append(s)
    if near is not None:
        found.sort(key=lambda s: (sum(abs(a - b) for a, b in zip(s.as_tuple(), near.as_tuple())),
                                  -s.ngram_size, s.as_tuple()))
    return found[:limit]


def wire_param(field: str | None) -> str:
    """The request parameter that names ``field`` of the per-request ``lookahead`` object.

    >>> wire_param("window_size"), wire_param(None)
    ('lookahead.w', 'lookahead')
    """
    return f"lookahead.{WIRE_NAMES[field]}" if field in WIRE_NAMES else "lookahead"



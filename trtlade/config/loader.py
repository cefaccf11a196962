"""Validate trtlade configs against the schema with every error located (file, line, column, field path) and
explained. Reading the YAML (defensively, with every node's position) is :mod:`trtlade.yaml_doc`'s.

Example::

    >>> cfg, problems = validate_trtlade(parse_yaml("lookahead:\\n  spec: 0,2,2\\n", "deploy.yml"))
    >>> cfg is None, problems[0].line, problems[0].column, problems[0].code
    (True, 2, 9, 'spec-illegal')
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Mapping

from pydantic import BaseModel, ValidationError

from trtlade.config.schema import ConfigRuleError, TrtladeConfig
from trtlade.diagnostics import Diagnostic
from trtlade.errors import did_you_mean
from trtlade.yaml_doc import (MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, ConfigLoadError, Loc, YamlDocument, dotted,
                              parse_yaml, read_yaml)
from trtlade.spec import FIELD_ALIASES, SpecError

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "MAX_DEPTH",
    "Loc",
    "ConfigLoadError",
    "ConfigError",
    "YamlDocument",
    "LoadedConfig",
    "read_yaml",
    "parse_yaml",
    "validate_trtlade",
    "load_config",
    "dotted",
]

class ConfigError(ConfigLoadError):
    """A trtlade config that cannot be used: unreadable, or schema errors (all of them, located)."""


# ====================================================================== trtlade schema
@dataclass(frozen=True)
class LoadedConfig:
    """A valid trtlade config and the document it came from (for positions and relative paths).

    Paths in the config are kept as written; :meth:`resolve` makes them absolute against the
    config file's directory (``build.engine_dir: ../engines/qwen3`` next to ``configs/x.yml``).
    """

    config: TrtladeConfig
    document: YamlDocument
    warnings: tuple[Diagnostic, ...] = ()

    @property
    def file(self) -> str:
        return self.document.file

    @property
    def base_dir(self) -> Path:
        return self.document.base_dir

    def resolve(self, value: str | Path | None) -> Path | None:
        """``value`` made absolute against the config file's directory (``~`` expanded); None stays None."""
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()


def load_config(path: str | Path, *, display: str | None = None) -> LoadedConfig:
    """Read and validate a trtlade config file; raise :class:`ConfigError` holding every located
    error (``str(exc)`` is the formatted list). Semantic checks (engine, spec warnings) are in
    :mod:`trtlade.config.checks`; this is what build/serve/bench call."""
    doc = read_yaml(path, display=display)
    config, diags = validate_trtlade(doc)
    errors = [d for d in diags if d.severity == "error"]
    if config is None or errors:
        raise ConfigError(errors or diags)
    return LoadedConfig(config=config, document=doc, warnings=tuple(diags))


_TOP_KEYS = tuple(TrtladeConfig.model_fields)
#: what a spec written ``{spec: 4,2,4}`` is told (YAML reads ``spec: 4`` and the keys ``2`` and ``4``)
COMMA_TRAP = "in a flow mapping like {spec: 4,2,4} the commas separate keys"


def validate_trtlade(doc: YamlDocument) -> tuple[TrtladeConfig | None, list[Diagnostic]]:
    """Validate ``doc.data`` against :class:`TrtladeConfig`; every pydantic error becomes a located
    Diagnostic (unknown keys with a did-you-mean, spec errors naming the TensorRT-LLM rule)."""
    data = doc.data
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({type(data).__name__})"
        return None, [doc.diagnostic(
            "error", f"the top level is {kind}, not a mapping of sections", loc=(), code="not-a-mapping",
            hint="a trtlade config is a mapping: model, build, lookahead, serve, bench")]
    try:
        return TrtladeConfig.model_validate(data), []
    except ValidationError as exc:
        errors = exc.errors()
        diags = [_pydantic_diagnostic(doc, err) for err in errors]
        # {spec: 4,2,4}: the comma trap's diagnostic says it all; the numbers it made keys are not more mistakes
        trapped = {tuple(err["loc"][:-1]) for err, d in zip(errors, diags) if COMMA_TRAP in d.message}
        return None, [d for err, d in zip(errors, diags) if not _made_by_trap(tuple(err["loc"]), trapped)]


def _made_by_trap(loc: Loc, trapped: set) -> bool:
    """Whether ``loc`` is a number the comma trap made a key of a mapping whose spec it caught (``{spec: 4,2,4}``
    in ``lookahead``: ``lookahead.2`` and ``lookahead.4``)."""
    return bool(loc) and isinstance(loc[-1], int) and loc[:-1] in trapped


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class owning the fields at ``loc`` (``("build",) -> BuildSection``)."""
    model: type[BaseModel] = TrtladeConfig
    for part in loc:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        annotation = getattr(info, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return None
    return model


def field_bounds(metadata: Iterable[Any], length: bool = True) -> list[str]:
    """A field's bounds from its pydantic metadata (``[">= 1", "<= 4096"]``); ``length``: ``min_length`` too."""
    bounds = []
    for meta in metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >=")):
            value = getattr(meta, attr, None)
            if value is not None and (length or attr != "min_length"):
                bounds.append(f"{sign} {value}")
    return bounds


def item_bounds(annotation: Any) -> list[str]:
    """The bounds of each item of a list field (``list[Annotated[int, Field(ge=1)]]``: ``["each >= 1"]``);
    [] for any other field. The config reference prints them too (scripts/gen_reference.py)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is not list or not args or typing.get_origin(args[0]) is not Annotated:
        return []
    metadata = [m for meta in typing.get_args(args[0])[1:] for m in getattr(meta, "metadata", [meta])]
    return [f"each {b}" for b in field_bounds(metadata)]


#: The end of a sentence: a full stop and a space, not the one in "e.g. " or "i.e. "
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s")


def first_sentence(text: str, limit: int = 200) -> str:
    """A description's first sentence, at most ``limit`` characters (cut at a word, with "...").

    >>> first_sentence("The release (e.g. 1.2.1, 1.3.0). Decides what may run.")
    'The release (e.g. 1.2.1, 1.3.0)'
    """
    first = _SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".")
    return first if len(first) <= limit else first[:first.rfind(" ", 0, limit)] + " ..."


def _allowed_hint(model: type[BaseModel] | None, name: Any, item: bool = False, bounds: bool = True) -> str:
    """The field's bounds and the first sentence of its description; ``item``: the error is in one of a list
    field's items (``bench.concurrency.1``), whose own bounds come first (``each >= 1``); ``bounds`` False: a
    rule of the field's own refused the value, and its message says what is allowed."""
    if model is None or not isinstance(name, str):
        return ""
    info = model.model_fields.get(name)
    if info is None:
        return ""
    bounds = (item_bounds(info.annotation) if item else field_bounds(info.metadata)) if bounds else []
    description = first_sentence(info.description or "")
    parts = []
    if bounds:
        parts.append("allowed: " + ", ".join(bounds))
    if description:
        parts.append(f"{name}: {description}")
    return "; ".join(parts)


_PATH_PREFIX = re.compile(r"^([a-z_]+(?:\.[a-z_]+)+) ")


#: pydantic's type errors in a config's words (its own name the model's class: "instance of LookaheadSection")
_EXPECTED = {
    "model_type": "expected a section of keys (key: value lines below it)",
    "dict_type": "expected a mapping (key: value lines below it)",
    "model_attributes_type": "expected a section of keys (key: value lines below it)",
    "path_type": "expected a path, as text",
    "int_type": "expected a whole number",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected text",
    "list_type": "expected a list ([a, b] or - lines below it)",
}


def _what(given: Any) -> str:
    """What a value the config gave is, for an error that expected another kind."""
    if given is None:
        return "nothing (the key is there with no value)"
    if isinstance(given, dict):
        return "a mapping"
    if isinstance(given, list):
        return "a list"
    return repr(given)


def _pydantic_diagnostic(doc: YamlDocument, err: Mapping[str, Any]) -> Diagnostic:
    loc: Loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    message = str(err.get("msg", "invalid value"))
    ctx = err.get("ctx") or {}
    cause = ctx.get("error") if isinstance(ctx, dict) else None
    parent_model = _model_at(loc[:-1]) if loc else None
    if kind == "extra_forbidden":
        allowed = list(parent_model.model_fields) if parent_model is not None else []
        key = loc[-1]
        where = dotted(loc[:-1]) or "the top level"
        hint = did_you_mean(str(key), allowed) + (f"keys allowed in {where}: {', '.join(allowed)}" if allowed else "")
        return doc.diagnostic("error", f"unknown key {key!r} in {where}", loc=loc, key=True, hint=hint,
                              code="unknown-key")
    if kind == "missing":
        where = dotted(loc[:-1]) or "the top level"
        hint = _allowed_hint(parent_model, loc[-1]) if loc else ""
        if loc == ("lookahead",):
            hint = "add e.g.\n    lookahead:\n      spec: 4,2,4"
        elif loc == ("lookahead", "spec"):
            hint = "add e.g. `spec: 4,2,4` (window_size, ngram_size, verification_set_size)"
        return doc.diagnostic("error", f"missing required key {loc[-1]!r} in {where}" if loc else message,
                              loc=loc, hint=hint, code="missing-key")
    if isinstance(cause, SpecError):
        return _spec_error_diagnostic(doc, loc, cause)
    if isinstance(cause, ConfigRuleError):
        return doc.diagnostic("error", cause.message, loc=cause.loc or loc, hint=cause.hint, code=cause.code)
    if not loc:  # a model-level rule; its message starts with the field path it concerns
        text = message.removeprefix("Value error, ")
        match = _PATH_PREFIX.match(text)
        target = tuple(match.group(1).split(".")) if match else ()
        code = "request-not-admitted" if target == ("lookahead", "request_default") else "invalid"
        hint = ("requests may ask for at most the server's spec (w<=W, n<=N, g<=G); lower "
                "lookahead.request_default or raise lookahead.spec (and rebuild the engine)"
                if code == "request-not-admitted" else "")
        return doc.diagnostic("error", text, loc=target, hint=hint, code=code)
    plain = kind in _EXPECTED and message.startswith("Input ")  # pydantic's own wording, not a rule's
    text = _EXPECTED[kind] if plain else message.removeprefix("Value error, ")
    given = err.get("input")
    shown = f", got {_what(given)}" if plain else (
        "" if isinstance(given, (dict, list)) else f", got {given!r}")
    if isinstance(loc[-1], int) and len(loc) > 1:  # one item of a list field
        hint = _allowed_hint(_model_at(loc[:-2]), loc[-2], item=True)
    else:
        hint = _allowed_hint(parent_model, loc[-1], bounds=kind != "value_error")
    return doc.diagnostic("error", f"{text}{shown}", loc=loc, hint=hint, code=f"schema-{kind}" if kind else "schema")


_FIELD_KEYS = {name: set(aliases) for name, aliases in FIELD_ALIASES.items()}
#: a spec written as a list ``[W, N, G]``: the index of each field
_LIST_INDEX = {name: i for i, name in enumerate(FIELD_ALIASES)}


def _spec_error_diagnostic(doc: YamlDocument, loc: Loc, exc: SpecError) -> Diagnostic:
    """A SpecError from a spec field: located at the offending key when the spec is a mapping;
    the message names the TensorRT-LLM rule broken."""
    target = loc
    path = dotted(loc)
    value = doc.get(loc)
    if exc.field is not None:
        path = f"{path}.{exc.field}"
        if isinstance(value, dict):
            for key in value:
                if str(key) in _FIELD_KEYS.get(exc.field, ()):
                    target = (*loc, key)
                    break
        elif isinstance(value, list) and len(value) == 3 and exc.field in _LIST_INDEX:
            target = (*loc, _LIST_INDEX[exc.field])  # [W, N, G]: the item at fault, on its own line in block style
    legality = exc.rule not in ("parse", "type")
    if legality:
        message = f"illegal (W,N,G) {value!r}: {exc.message}" if not isinstance(value, dict) else \
            f"illegal (W,N,G): {exc.message}"
        if exc.rule not in exc.message:
            message += f" (TensorRT-LLM rule: {exc.rule})"
        code = "spec-illegal"
    else:
        message = f"cannot read the (W,N,G) spec: {exc.message}"
        code = "spec-parse"
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(doc.get(loc[:-1]), dict) \
                and len(doc.get(loc[:-1])) > 1 and any(isinstance(k, int) for k in doc.get(loc[:-1])):
            return doc.diagnostic(
                "error", f"{message}: {COMMA_TRAP}", loc=target,
                code=code, path=path, hint="quote the spec ('4,2,4'), write it as [4, 2, 4], or use block style")
    return doc.diagnostic("error", message, loc=target, hint=exc.hint, code=code, path=path)

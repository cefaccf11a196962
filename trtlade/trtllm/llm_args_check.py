"""A ``trtllm-serve --config`` file checked as TensorRT-LLM's ``TorchLlmArgs`` would check it, release by release.

TensorRT-LLM reads the file into its LLM arguments (``tensorrt_llm/llmapi/llm_args.py``,
``update_llm_args_with_extra_dict``: ``speculative_config`` through ``DecodingBaseConfig.from_dict``, every
other key into the model as it is) and refuses it at start when pydantic does. Upstream gives that verdict
without a GPU in its own tests (``tests/unittest/llmapi/test_config_database.py``: every file of
``examples/configs/database/`` into ``TorchLlmArgs(**update_llm_args_with_extra_dict(...))``). trtlade gives the
same verdict without TensorRT-LLM: the models are rebuilt from the release's schema table
(:mod:`trtlade.trtllm.llm_args_models`), and the validators pydantic types cannot express are the rules of
:mod:`trtlade.trtllm.llm_args_rules`, each citing the validator it mirrors.

Worked example (the newest table)::

    >>> from trtlade.yaml_doc import parse_yaml
    >>> doc = parse_yaml("max_batch_sise: 64\\nkv_cache_config:\\n  free_gpu_memory_fraction: 0.0\\n", "a.yml")
    >>> for d in check_llm_args(doc, "1.3.0"):
    ...     print(d.severity, d.line, d.path, "|", d.message[:47], "|", d.hint[:31])
    error 1 max_batch_sise | unknown key 'max_batch_sise': TorchLlmArgs of T | did you mean 'max_batch_size' o

The fraction 0.0 passes (upstream bounds it by ``0 <= v <= 1``), as does ``max_seq_len: null`` (``Optional``).
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Optional

from trtlade.yaml_doc import YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.trtllm.compat import release_key

__all__ = ["SchemaTable", "tables", "table_for", "check_llm_args", "root_class", "model_at", "ENGINE_ONLY_DRAFTERS",
           "uses_engine_backend"]

_DATA = "trtllm_schema"


@dataclass(frozen=True)
class SchemaTable:
    """One release line's table: the version its ``llm_args.py`` was read at, and the table itself."""

    version: str
    table: dict

    @property
    def label(self) -> str:
        """How messages name the release: its version, or the line and commit when no tag was read."""
        return self.table.get("label") or self.version

    @property
    def commit(self) -> str:
        """The upstream commit read, or the stored copy's content id where the store names none."""
        return self.table.get("commit") or f"(commit not identified; {self.table.get('total_chars')} characters)"

    @property
    def line(self) -> str:
        return _line(self.version)

    @functools.cached_property
    def models(self):  # noqa: ANN201 - ModelSet, imported lazily (pydantic models built on first use)
        from trtlade.trtllm.llm_args_models import ModelSet

        return ModelSet(self.table)


@functools.lru_cache(maxsize=1)
def tables() -> tuple[SchemaTable, ...]:
    """Every table shipped, oldest release first."""
    found = []
    folder = resources.files("trtlade").joinpath("data", _DATA)
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            table = json.loads(entry.read_text(encoding="utf-8"))
            found.append(SchemaTable(table["version"], table))
    return tuple(sorted(found, key=lambda t: release_key(t.version)))


def table_for(release: Optional[str]) -> tuple[SchemaTable, str]:
    """The newest table of the line to check ``release`` against (:func:`line_for`), and the note."""
    group, note = line_for(release)
    return group[-1], note


def line_for(release: Optional[str]) -> tuple[tuple[SchemaTable, ...], str]:
    """The tables of the release line to check ``release`` against, and a note when it is not that release's own
    line: the newest line read at or below it; a release older than every line takes the oldest, one newer than
    every line the newest, each with a note naming the line used. A line read at several commits gives several
    tables (their verdicts are merged: :func:`check_llm_args`).

    >>> newest = tables()[-1].version
    >>> table_for(None)[1].startswith("no TensorRT-LLM release given")
    True
    >>> table_for("99.0.0")[0].version == newest, "newer than" in table_for("99.0.0")[1]
    (True, True)
    >>> [t.version for t in line_for("1.2.1")[0]]
    ['1.2.0rc0', '1.2.0']
    """
    shipped = tables()
    lines = sorted({t.line for t in shipped}, key=lambda line: release_key(line + ".0"))

    def group(line: str) -> tuple[SchemaTable, ...]:
        return tuple(t for t in shipped if t.line == line)

    if release is None:
        return group(lines[-1]), (f"no TensorRT-LLM release given and none installed: checked against "
                                  f"{shipped[-1].label}, the newest schema read (pass --trtllm-version to check "
                                  "another)")
    wanted = _line(release)
    older = [line for line in lines if release_key(line + ".0") <= release_key(wanted + ".0")]
    if not older:
        return group(lines[0]), (f"no schema was read for TensorRT-LLM {release}: checked against "
                                 f"{group(lines[0])[-1].label}, the oldest read")
    chosen = older[-1]
    if chosen == wanted:
        return group(chosen), ""
    label = group(chosen)[-1].label
    if chosen == lines[-1]:
        return group(chosen), (f"TensorRT-LLM {release} is newer than {label}, the newest schema read: checked "
                               f"against it (fields added since then are refused as unknown)")
    return group(chosen), (f"no schema was read for the {wanted} line: TensorRT-LLM {release} checked against "
                           f"{label}, the nearest older line read")


def _line(version: str) -> str:
    key = release_key(version)
    return f"{key[0]}.{key[1]}"


#: Drafters whose ``supports_backend`` refuses ``pytorch`` (``backend not in ("pytorch", "_autodeploy")`` on
#: ``LookaheadDecodingConfig`` and ``MedusaDecodingConfig``, llm_args.py@fe8770fb, @7b437aaa and the late-2025 1.2
#: copy): trtllm-serve runs them only with ``--backend tensorrt``, whose ``launch_server`` builds
#: ``tensorrt_llm._tensorrt_engine.LLM`` (``TrtLlmArgs``; tensorrt_llm/commands/serve.py@00209af1).
ENGINE_ONLY_DRAFTERS = ("Lookahead", "Medusa")


def root_class(table: SchemaTable, backend: Any, speculation: Any = None) -> str:
    """``TorchLlmArgs``, or ``TrtLlmArgs`` on a release that still has it: for ``backend: tensorrt``, and for a file
    that names no backend but a drafter only the engine backend runs (:data:`ENGINE_ONLY_DRAFTERS`: such a file
    starts only under ``trtllm-serve --backend tensorrt``, so it is checked as that backend reads it).

    >>> newest, old = tables()[-1], tables()[0]
    >>> root_class(old, None, {"decoding_type": "Lookahead"}), root_class(old, "pytorch", {"decoding_type": "Medusa"})
    ('TrtLlmArgs', 'TorchLlmArgs')
    >>> root_class(newest, "tensorrt")                     # 1.3 has no TrtLlmArgs
    'TorchLlmArgs'
    """
    engine = uses_engine_backend(backend, speculation) and "TrtLlmArgs" in table.models
    return "TrtLlmArgs" if engine else "TorchLlmArgs"


def uses_engine_backend(backend: Any, speculation: Any = None) -> bool:
    """Whether a trtllm-serve file runs on the TensorRT-engine backend: it says ``backend: tensorrt``, or names no
    backend and a drafter only that backend runs (:data:`ENGINE_ONLY_DRAFTERS`)."""
    kind = speculation.get("decoding_type") if isinstance(speculation, dict) else None
    return backend in ("tensorrt", "trt") or (backend is None and kind in ENGINE_ONLY_DRAFTERS)


def check_llm_args(doc: YamlDocument, release: Optional[str], own_keys: Iterable[str] = ()) -> list[Diagnostic]:
    """Every finding pydantic and the cited validators make on the file's LLM arguments (``own_keys``: keys
    of the file's own kind, e.g. Triton's ``triton_config``, left out). Where the release's line was read at
    several commits, a refusal all of them make is an error and one only some make a warning that says which
    (the line's releases differ there; TensorRT-LLM's own check settles it: ``--upstream``)."""
    group, note = line_for(release)
    out: list[Diagnostic] = []
    if note:
        out.append(doc.diagnostic("warning" if release is not None else "info", note, code="trtllm-schema-release"))
    found = [_check_one(doc, table, own_keys) for table in group]
    return out + (found[0] if len(found) == 1 else _merge(group, found))


def _merge(group: tuple[SchemaTable, ...], found: list[list[Diagnostic]]) -> list[Diagnostic]:
    from dataclasses import replace

    out: list[Diagnostic] = []
    keys = [{(d.code, d.path) for d in f if d.severity == "error"} for f in found]
    refused_by_all = all(keys)  # every read refuses the file, if for different reasons: the release refuses it
    seen: set[tuple] = set()
    for diags in found:
        for d in diags:
            key = (d.code, d.path)
            if d.severity == "error" and not all(key in k for k in keys):
                other = ", ".join(t.label for t, k in zip(group, keys) if key not in k)
                if refused_by_all:
                    d = replace(d, message=d.message + f"; {other} refuses the file too, for another reason")
                else:
                    d = replace(d, severity="warning", message=d.message + f"; {other} accepts it: the line's "
                                "releases differ here, and TensorRT-LLM's own check decides (--upstream)")
            if (d.severity,) + key not in seen:
                seen.add((d.severity,) + key)
                out.append(d)
    return out


def _check_one(doc: YamlDocument, table: SchemaTable, own_keys: Iterable[str]) -> list[Diagnostic]:
    from trtlade.trtllm import llm_args_rules

    data = {k: v for k, v in doc.data.items() if k not in set(own_keys)}
    out: list[Diagnostic] = []
    root = root_class(table, data.get("backend"), data.get("speculative_config"))
    data, notes = llm_args_rules.prepare(table, root, data)
    out += [doc.diagnostic(severity, message, loc=loc, hint=hint, code="trtllm-args-removed")
            for loc, message, hint, severity in notes]
    args = {k: v for k, v in data.items() if k != "speculative_config"}
    out += _validate(doc, table, root, {"model": "/checkpoint", **args} if "model" not in args else args, ())
    if data.get("speculative_config") is not None:
        out += check_speculative_config(doc, table, data["speculative_config"])
    out += _ignored_keys(doc, table, root, data) + _deprecated(doc, table, root, data)
    if not any(d.severity == "error" for d in out):
        out += llm_args_rules.run(doc, table, root, data)
    return out


def _ignored_keys(doc: YamlDocument, table: SchemaTable, root: str, data: dict) -> list[Diagnostic]:
    """Keys a model without ``extra='forbid'`` drops silently (pydantic's default): accepted, and said."""
    from trtlade.trtllm.llm_args_rules import _models_in

    out = []
    for cls, loc, block in _models_in(table, root, data):
        if table.models.config(cls).get("extra") in ("forbid", "allow"):
            continue
        names = set()
        for name, entry in table.models.fields(cls).items():
            names |= {name, *(entry.get("validation_alias") or entry.get("alias") or [])}
        for key in block:
            if key not in names and not (loc == ("speculative_config",) and key == "decoding_type"):
                out.append(doc.diagnostic("warning", f"{cls} of TensorRT-LLM {table.label} ignores {key!r}: it has "
                                          "no such field and drops unknown keys without a word (pydantic's default)",
                                          loc=loc + (key,), key=True, code="trtllm-args-ignored-key",
                                          hint=_close(key, sorted(names))))
    return out


def _deprecated(doc: YamlDocument, table: SchemaTable, root: str, data: dict) -> list[Diagnostic]:
    """Fields upstream marks ``status="deprecated"``: accepted, and said."""
    from trtlade.trtllm.llm_args_rules import _models_in

    out = []
    for cls, loc, block in _models_in(table, root, data):
        fields = table.models.fields(cls)
        for key in block:
            status = (fields.get(key) or {}).get("status")
            if status == "deprecated":
                out.append(doc.diagnostic("warning", f"{key} is deprecated in TensorRT-LLM {table.label} ({cls})",
                                          loc=loc + (key,), key=True, code="trtllm-args-deprecated",
                                          hint="it still loads; check the release notes for what replaces it"))
    return out


def _close(key: Any, names: list[str]) -> str:
    close = difflib.get_close_matches(str(key), names, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else "remove it: it has no effect"


def check_speculative_config(doc: YamlDocument, table: SchemaTable, block: Any) -> list[Diagnostic]:
    """``speculative_config`` as ``update_llm_args_with_extra_dict`` reads it: ``DecodingBaseConfig.from_dict``
    picks the class by ``decoding_type`` (case-exact), then the class validates the block."""
    from trtlade.trtllm.llm_args_rules import decoding_classes

    where = ("speculative_config",)
    if not isinstance(block, dict):
        return [doc.diagnostic("error", f"speculative_config must be a mapping with decoding_type, got {block!r}",
                               loc=where, code="trtllm-args-type",
                               hint="e.g. {decoding_type: NGram, max_draft_len: 4}")]
    registry = decoding_classes(table)
    kind = block.get("decoding_type")
    if kind not in registry:
        close = [k for k in registry if str(k).lower() == str(kind).lower()]
        hint = (f"decoding_type is case-exact: write {close[0]!r}" if close else
                f"one of {', '.join(sorted(registry))}")
        tagged = any(_has_field(table, cls, "decoding_type") for cls in registry.values())
        who = "SpeculativeConfig (a union tagged by decoding_type)" if tagged else "DecodingBaseConfig.from_dict"
        return [doc.diagnostic("error", f"decoding_type {kind!r} is not one TensorRT-LLM {table.label} knows "
                               f"({who} refuses it)", loc=where + ("decoding_type",)
                               if "decoding_type" in block else where, code="trtllm-args-literal", hint=hint)]
    body = {k: v for k, v in block.items() if k != "decoding_type" or _has_field(table, registry[kind], k)}
    return _validate(doc, table, registry[kind], body, where)


def _has_field(table: SchemaTable, cls: str, field: str) -> bool:
    return field in table.models.fields(cls)


def _validate(doc: YamlDocument, table: SchemaTable, cls: str, data: dict, prefix: tuple) -> list[Diagnostic]:
    import pydantic

    try:
        table.models[cls].model_validate(data)
    except pydantic.ValidationError as exc:
        return _diagnostics(doc, table, cls, data, prefix, exc.errors(include_url=False))
    return []


def _diagnostics(doc: YamlDocument, table: SchemaTable, cls: str, data: dict, prefix: tuple,
                 errors: list[dict]) -> list[Diagnostic]:
    grouped: dict[tuple, list[dict]] = {}
    for err in errors:
        grouped.setdefault(_data_path(data, err["loc"], err["type"]), []).append(err)
    out = []
    for path, errs in grouped.items():
        out.append(_diagnostic(doc, table, cls, prefix + path, path, errs, data))
    return out


def _data_path(data: Any, loc: tuple, kind: str) -> tuple:
    """pydantic's ``loc`` without the union tags it inserts: the path of the value in the file."""
    path: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and last and kind == "missing":
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and str(part) in {str(k) for k in node}:
            key = next(k for k in node if str(k) == str(part))
            path.append(key)
            node = node[key]
    return tuple(path)


def _diagnostic(doc: YamlDocument, table: SchemaTable, root: str, loc: tuple, path: tuple,
                errs: list[dict], data: Any = None) -> Diagnostic:
    err = errs[0]
    kind, value = err["type"], err.get("input")
    owner = model_at(table, root, path[:-1], data) if path else root
    release = f"TensorRT-LLM {table.label}"
    name = ".".join(str(p) for p in loc)
    if kind == "extra_forbidden":
        return _unknown_key(doc, table, owner, release, loc, path)
    if kind in ("union_tag_invalid", "union_tag_not_found"):  # a discriminated union's tag: name the tag's key
        return _union_tag(doc, err, release, loc)
    if kind == "missing":
        hint = _type_hint(table, owner, path[-1] if path else None)
        return doc.diagnostic("error", f"required by {owner} of {release}, and missing", loc=loc[:-1],
                              path=name, code="trtllm-args-missing", hint=f"add it: {hint}" if hint else "")
    if kind in ("literal_error", "enum"):
        expected = err.get("ctx", {}).get("expected", "")
        external = _external_enum(table, owner, path[-1] if path else None)
        if external:  # an enum of another upstream file, its names in any case (the before-validator upper-cases)
            shown = "null" if value is None else repr(value)
            return doc.diagnostic("error", f"{shown} is not a {external} ({release}: one of {expected}, any case)",
                                  loc=loc, code="trtllm-args-literal", hint=_type_hint(table, owner, path[-1]))
        return doc.diagnostic("error", f"{value!r} is not one of {expected} ({release}; case-exact)",
                              loc=loc, code="trtllm-args-literal", hint=f"one of {expected}")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long"):
        return doc.diagnostic("error", f"{err['msg'].lower()}, got {value!r} ({owner} of {release})",
                              loc=loc, code="trtllm-args-range",
                              hint=_range_hint(table, owner, path[-1] if path else None))
    messages = "; ".join(dict.fromkeys(e["msg"] for e in errs))
    return doc.diagnostic("error", f"{messages}, got {_short(value)} ({owner} of {release})", loc=loc,
                          code="trtllm-args-type", hint=_type_hint(table, owner, path[-1] if path else None))


def _unknown_key(doc: YamlDocument, table: SchemaTable, owner: str | None, release: str, loc: tuple,
                 path: tuple) -> Diagnostic:
    """A key the class does not have (pydantic's ``extra_forbidden``): the hint names the closest fields, and the
    class's fields (all of them up to 40, else their count and where the schema lists them)."""
    fields = sorted(table.models.fields(owner)) if owner else []
    close = difflib.get_close_matches(str(path[-1]), fields, n=3, cutoff=0.6)
    hint = (f"did you mean {' or '.join(map(repr, close))}? " if close else "") + \
        (f"{owner} takes: {', '.join(fields)}" if len(fields) <= 40 else f"{owner} has {len(fields)} fields; "
         "see docs/reference/trtllm-serve-schema.md")
    return doc.diagnostic("error", f"unknown key {path[-1]!r}: {owner} of {release} has no such field and "
                          "refuses unknown keys (extra='forbid')",
                          loc=loc, key=True, code="trtllm-args-unknown-key", hint=hint)


def _union_tag(doc: YamlDocument, err: dict, release: str, loc: tuple) -> Diagnostic:
    """A discriminated union's tag missing (or misspelt: the key to fix is the misspelt one) or not one of the
    classes' tags."""
    ctx = err.get("ctx", {})
    tag = str(ctx.get("discriminator", "")).strip("'\"")
    expected = ctx.get("expected_tags", "")
    where = loc + (tag,)
    if err["type"] == "union_tag_not_found":
        block = err.get("input") if isinstance(err.get("input"), dict) else {}
        typo = difflib.get_close_matches(tag, [str(k) for k in block], n=1, cutoff=0.6)
        if typo:  # a misspelt tag: pydantic stops at the missing tag; the key to fix is the misspelt one
            return doc.diagnostic("error", f"unknown key {typo[0]!r}: {tag!r}, which picks the class, is missing "
                                  f"({release})", loc=loc + (typo[0],), key=True, code="trtllm-args-unknown-key",
                                  hint=f"did you mean {tag!r}?")
        return doc.diagnostic("error", f"{tag} is missing: it picks the class ({expected or 'see the schema'})",
                              loc=loc, path=".".join(str(p) for p in where), code="trtllm-args-missing")
    return doc.diagnostic("error", f"{ctx.get('tag')!r} is not one of {expected} ({release}; case-exact)",
                          loc=where, code="trtllm-args-literal", hint=f"one of {expected}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: pydantic's constrained types as a range
_CONSTRAINED = {"PositiveInt": "> 0", "NonNegativeInt": ">= 0", "PositiveFloat": "> 0", "NonNegativeFloat": ">= 0",
                "NegativeInt": "< 0", "NonPositiveInt": "<= 0"}


def _range_hint(table: SchemaTable, owner: Optional[str], field: Any) -> str:
    """The field's whole allowed range, from its bounds and constrained type: ``allowed: 0 <= free_gpu_memory_fraction
    <= 1``; "" when the table does not say it."""
    entry = table.models.fields(owner).get(field) if owner and field is not None else None
    if not entry:
        return ""
    bounds = entry.get("constraints", {})
    low = next((f"{bounds[k]} {op} " for k, op in (("ge", "<="), ("gt", "<")) if k in bounds), "")
    high = next((f" {op} {bounds[k]}" for k, op in (("le", "<="), ("lt", "<")) if k in bounds), "")
    typ = entry["type"]
    typ = typ["of"] if typ.get("kind") == "optional" else typ
    if not low and not high and typ.get("kind") == "constrained" and typ.get("name") in _CONSTRAINED:
        high = f" {_CONSTRAINED[typ['name']]}"
    return f"allowed: {low}{field}{high}" if low or high else ""


def _external_enum(table: SchemaTable, owner: Optional[str], field: Any) -> Optional[str]:
    """The name of the :data:`~trtlade.trtllm.llm_args_models.EXTERNAL_ENUMS` enum ``owner.field`` is typed with,
    else None."""
    from trtlade.trtllm.llm_args_models import EXTERNAL_ENUMS

    typ = (table.models.fields(owner).get(field) or {}).get("type", {}) if owner and field is not None else {}
    while typ.get("kind") == "optional":
        typ = typ["of"]
    return typ["name"] if typ.get("kind") == "ref" and typ.get("name") in EXTERNAL_ENUMS else None


def _type_hint(table: SchemaTable, owner: Optional[str], field: Any) -> str:
    if owner is None or field is None:
        return ""
    entry = table.models.fields(owner).get(field)
    return f"{field} is {describe(entry['type'])}" if entry else ""


def describe(typ: dict) -> str:
    """A type tree in words, for hints and the reference page.

    >>> describe({"kind": "optional", "of": {"kind": "literal", "values": ["a", "b"]}})
    "one of 'a', 'b', or null"
    """
    kind = typ["kind"]
    if kind == "optional":
        return f"{describe(typ['of'])}, or null"
    if kind == "literal":
        return "one of " + ", ".join(repr(v) for v in typ["values"])
    if kind == "union":
        return " or ".join(describe(m) for m in typ["of"])
    if kind == "list":
        return f"a list of {describe(typ['of'])}"
    if kind == "dict":
        return f"a mapping of {describe(typ['key'])} to {describe(typ['value'])}"
    if kind == "ref":
        from trtlade.trtllm.llm_args_models import EXTERNAL_ENUMS

        members = EXTERNAL_ENUMS.get(typ["name"])
        return typ["name"] if members is None else f"{typ['name']}: one of {', '.join(members)} (any case)"
    if kind == "constrained":
        return typ["name"]
    if kind == "opaque":
        return f"{typ['text']} (not checked)"
    text = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "any": "anything",
            "none": "null", "tuple": "a list"}.get(kind, kind)
    cons = typ.get("constraints") or {}
    return text + ("" if not cons else " (" + ", ".join(f"{k} {v}" for k, v in cons.items()) + ")")


def model_at(table: SchemaTable, root: str, path: tuple, data: Any = None) -> Optional[str]:
    """The model class owning the keys at ``path`` below ``root`` (None: not a model there); ``data``, the
    file's mapping, picks the member of a discriminated union by its tag."""
    cls: Optional[str] = root
    node = data
    keyed = False  # the part before named a field holding its models by name ({name: block})
    for part in path:
        node = node.get(part) if isinstance(node, dict) else (node[part] if isinstance(node, list) and isinstance(
            part, int) and 0 <= part < len(node) else None)
        if cls is None:
            return None
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        entry = table.models.fields(cls).get(part)
        cls = _model_of(table, entry["type"], node) if entry else None
        keyed = entry is not None and container_of(entry["type"]) == "dict"
    return cls


def container_of(typ: dict) -> Optional[str]:
    """``"dict"`` or ``"list"`` where a field holds its values in one (under ``Optional``), else None."""
    while typ["kind"] == "optional":
        typ = typ["of"]
    return typ["kind"] if typ["kind"] in ("dict", "list") else None


def _model_of(table: SchemaTable, typ: dict, value: Any = None) -> Optional[str]:
    kind = typ["kind"]
    if kind == "ref":
        name = typ["name"]
        if name in table.models:
            return name
        alias = table.table.get("aliases", {}).get(name)
        return _model_of(table, alias, value) if alias else None
    if kind in ("optional", "list"):
        return _model_of(table, typ["of"], value)
    if kind == "dict":
        return _model_of(table, typ["value"])
    if kind == "union":
        found = [m for m in (_model_of(table, t) for t in typ["of"]) if m]
        if len(found) > 1 and typ.get("discriminator") and isinstance(value, dict):
            tag = value.get(typ["discriminator"])
            found = [m for m in found if _tag(table, m, typ["discriminator"]) == tag]
        return found[0] if len(found) == 1 else None
    return None


def _tag(table: SchemaTable, cls: str, field: str) -> Any:
    entry = table.models.fields(cls).get(field)
    return entry["type"]["values"][0] if entry and entry["type"]["kind"] == "literal" else None

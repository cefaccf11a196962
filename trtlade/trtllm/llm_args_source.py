"""TensorRT-LLM's LLM arguments, read from the source of ``tensorrt_llm/llmapi/llm_args.py`` as data.

``trtllm-serve --config FILE`` (and Triton's llmapi ``model.yaml``) hands every key of the file to
``TorchLlmArgs`` (``update_llm_args_with_extra_dict``), a pydantic model: whatever that model refuses, the
server refuses at start. This module turns the *source* of ``llm_args.py`` (a checkout of a release, never
imported: it needs torch, CUDA and the bindings) into a table of every pydantic model and enum it declares:
each field's type, ``Literal`` values, bounds, default, alias and status, each class's ``extra`` policy and
bases, and the names of the validators it declares. ``scripts/gen_trtllm_schema.py`` writes one table per
release line into ``trtlade/data/trtllm_schema/``; :mod:`trtlade.trtllm.llm_args_check` rebuilds the models
from it and validates files as TensorRT-LLM would.

Worked example (a source shaped like upstream's)::

    >>> src = '''
    ... # commit: 0123456789abcdef0123456789abcdef01234567
    ... # version: 9.9.0
    ... class StrictBaseModel(BaseModel):
    ...     model_config = ConfigDict(extra="forbid")
    ... class Policy(StrEnum):
    ...     FIRST = "first"
    ... class KvCacheConfig(StrictBaseModel):
    ...     free_gpu_memory_fraction: Optional[float] = Field(default=0.9, ge=0, le=1, description="share")
    ...     dtype: Literal["auto", "fp8"] = "auto"
    ...     policy: Policy = Policy.FIRST
    ...     @field_validator("dtype")
    ...     def check(cls, v): return v
    ... '''
    >>> table = parse_source(src)
    >>> table["commit"], table["version"]
    ('0123456789abcdef0123456789abcdef01234567', '9.9.0')
    >>> kv = table["models"]["KvCacheConfig"]
    >>> kv["bases"], kv["validators"]
    (['StrictBaseModel'], ['check'])
    >>> kv["fields"]["free_gpu_memory_fraction"]["type"], kv["fields"]["free_gpu_memory_fraction"]["constraints"]
    ({'kind': 'optional', 'of': {'kind': 'float'}}, {'ge': 0, 'le': 1})
    >>> kv["fields"]["dtype"]["type"], kv["fields"]["policy"]["type"]
    ({'kind': 'literal', 'values': ['auto', 'fp8']}, {'kind': 'ref', 'name': 'Policy'})
    >>> table["enums"]["Policy"]
    {'str': True, 'members': {'FIRST': 'first'}}
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

__all__ = ["parse_source", "type_of", "SCALARS", "CONSTRAINED"]

#: Annotation names that are plain scalars (pydantic's lax coercion applies to them).
SCALARS = {"int": "int", "float": "float", "bool": "bool", "str": "str", "bytes": "bytes", "Any": "any",
           "object": "any", "None": "none", "NoneType": "none", "Path": "path"}
#: pydantic's constrained aliases, as the table spells them.
CONSTRAINED = ("StrictInt", "StrictBool", "StrictStr", "StrictFloat", "PositiveInt", "NonNegativeInt",
               "NegativeInt", "NonPositiveInt", "PositiveFloat", "NonNegativeFloat", "NegativeFloat",
               "NonPositiveFloat")
_FIELD_KEYS = ("ge", "gt", "le", "lt", "min_length", "max_length", "multiple_of", "strict", "discriminator")
_DROPPED = ("description", "json_schema_extra", "telemetry", "examples", "title", "repr", "exclude")
_ENUM_BASES = {"Enum", "StrEnum", "IntEnum", "str", "int"}
_HEADER = re.compile(r"^#\s*(upstream|path|commit|version|dated-by|total_chars):\s*(.*?)\s*$")


def parse_source(source: str) -> dict[str, Any]:
    """The table of one ``llm_args.py`` source: header facts, models, enums, type aliases and the functions
    named in the module (``update_llm_args_with_extra_dict`` ...)."""
    tree = ast.parse(source)
    table: dict[str, Any] = {"upstream": "NVIDIA/TensorRT-LLM", "path": "tensorrt_llm/llmapi/llm_args.py",
                             "commit": None, "version": None, "models": {}, "enums": {}, "aliases": {},
                             "functions": []}
    for line in source.splitlines()[:40]:
        if m := _HEADER.match(line):
            table[m.group(1).replace("-", "_")] = m.group(2)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            _class(node, table)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            _alias(node, table)
        elif isinstance(node, ast.FunctionDef):
            table["functions"].append(node.name)
    _drop_plain_bases(table)
    return table


def _class(node: ast.ClassDef, table: dict[str, Any]) -> None:
    bases = [_name(b) for b in node.bases]
    if any(b in _ENUM_BASES or b in table["enums"] for b in bases) and not any(b in table["models"] for b in bases):
        members = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value = _constant(stmt.value)
                if value is not _NOT_CONSTANT and not stmt.targets[0].id.startswith("_"):
                    members[stmt.targets[0].id] = value
        table["enums"][node.name] = {"str": "StrEnum" in bases or "str" in bases, "members": members}
        return
    model: dict[str, Any] = {"bases": bases, "config": {}, "fields": {}, "classvars": {}, "validators": [],
                             "line": node.lineno}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model_config"
                                                for t in stmt.targets):
            model["config"] = _config(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            _field(stmt, model)
        elif isinstance(stmt, ast.FunctionDef) and _is_validator(stmt):
            model["validators"].append(stmt.name)
        elif isinstance(stmt, ast.ClassDef) and stmt.name == "Config":  # pydantic's class-style config
            model["config"] = {**_class_config(stmt), **model["config"]}
        elif isinstance(stmt, ast.ClassDef):  # a nested enum (GuidedDecodingConfig.GuidedDecodingBackend)
            _class(stmt, table)
    table["models"][node.name] = model


def _field(stmt: ast.AnnAssign, model: dict[str, Any]) -> None:
    name = stmt.target.id  # type: ignore[union-attr]
    ann = stmt.annotation
    if isinstance(ann, ast.Subscript) and _name(ann.value) == "ClassVar":
        model["classvars"][name] = _json(_constant(stmt.value)) if stmt.value is not None else None
        return
    if name.startswith("_"):
        return  # a private attribute, not a field
    entry: dict[str, Any] = {"type": type_of(ann), "required": stmt.value is None, "constraints": {},
                             "line": stmt.lineno}
    value = stmt.value
    if isinstance(value, ast.Call) and _name(value.func) in ("Field", "PydanticField"):
        args = {kw.arg: kw.value for kw in value.keywords if kw.arg}
        default = value.args[0] if value.args else args.get("default")
        entry["required"] = ("default_factory" not in args
                             and (default is None or (isinstance(default, ast.Constant) and default.value is ...)))
        if default is not None and not entry["required"]:
            entry["default"] = _json(_constant(default))
        if "default_factory" in args:
            entry["default"] = {"factory": ast.unparse(args["default_factory"])}
        for key in _FIELD_KEYS:
            if key in args:
                entry["constraints"][key] = _json(_constant(args[key]))
        for key in ("alias", "validation_alias"):
            if key in args:
                entry[key] = _aliases(args[key])
        if "status" in args:
            entry["status"] = _json(_constant(args["status"]))
    elif value is not None:
        entry["default"] = _json(_constant(value))
    model["fields"][name] = entry


def _aliases(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call) and _name(node.func) == "AliasChoices":
        return [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return []


def type_of(node: Optional[ast.expr]) -> dict[str, Any]:
    """An annotation as a JSON type tree.

    >>> type_of(ast.parse("Optional[List[PositiveInt]]", mode="eval").body)
    {'kind': 'optional', 'of': {'kind': 'list', 'of': {'kind': 'constrained', 'name': 'PositiveInt'}}}
    >>> type_of(ast.parse("int | None", mode="eval").body), type_of(ast.parse("torch.dtype", mode="eval").body)
    ({'kind': 'optional', 'of': {'kind': 'int'}}, {'kind': 'opaque', 'text': 'torch.dtype'})
    """
    if node is None:
        return {"kind": "any"}
    if isinstance(node, ast.Constant):
        if node.value is None:
            return {"kind": "none"}
        if isinstance(node.value, str):
            try:
                return type_of(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                return {"kind": "opaque", "text": node.value}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([type_of(node.left), type_of(node.right)])
    if isinstance(node, ast.Name):
        if node.id in SCALARS:
            return {"kind": SCALARS[node.id]}
        if node.id in CONSTRAINED:
            return {"kind": "constrained", "name": node.id}
        if node.id in ("dict", "Dict", "Mapping"):
            return {"kind": "dict", "key": {"kind": "any"}, "value": {"kind": "any"}}
        if node.id in ("list", "List", "Sequence", "set", "Set", "tuple", "Tuple"):
            return {"kind": "list", "of": {"kind": "any"}}
        return {"kind": "ref", "name": node.id}
    if isinstance(node, ast.Subscript):
        return _subscript(_name(node.value), node.slice)
    return {"kind": "opaque", "text": ast.unparse(node)}


def _subscript(head: str, sl: ast.expr) -> dict[str, Any]:
    items = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    if head == "Optional":
        return _union([type_of(items[0]), {"kind": "none"}])
    if head == "Union":
        return _union([type_of(i) for i in items])
    if head == "Literal":
        return {"kind": "literal", "values": [_json(_constant(i)) for i in items]}
    if head in ("List", "list", "Sequence", "Set", "set", "FrozenSet", "frozenset"):
        return {"kind": "list", "of": type_of(items[0]), **({"set": True} if "et" in head.lower() else {})}
    if head in ("Tuple", "tuple"):
        if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is ...:
            return {"kind": "list", "of": type_of(items[0])}
        return {"kind": "tuple", "of": [type_of(i) for i in items]}
    if head in ("Dict", "dict", "Mapping"):
        return {"kind": "dict", "key": type_of(items[0]), "value": type_of(items[1]) if len(items) > 1 else
                {"kind": "any"}}
    if head == "Annotated":
        inner = type_of(items[0])
        for extra in items[1:]:
            if isinstance(extra, ast.Call) and _name(extra.func) in ("Field", "PydanticField"):
                for kw in extra.keywords:
                    if kw.arg in _FIELD_KEYS:
                        inner = {**inner, "constraints": {**inner.get("constraints", {}),
                                                          kw.arg: _json(_constant(kw.value))}}
        return inner
    return {"kind": "opaque", "text": f"{head}[{ast.unparse(sl)}]"}


def _union(members: list[dict[str, Any]]) -> dict[str, Any]:
    flat: list[dict[str, Any]] = []
    for m in members:
        flat += m["of"] if m["kind"] == "union" else ([m["of"], {"kind": "none"}] if m["kind"] == "optional" else [m])
    nullable = any(m["kind"] == "none" for m in flat)
    rest = [m for m in flat if m["kind"] != "none"]
    core = rest[0] if len(rest) == 1 else {"kind": "union", "of": rest}
    if not rest:
        return {"kind": "none"}
    return {"kind": "optional", "of": core} if nullable else core


def _alias(node: ast.Assign | ast.AnnAssign, table: dict[str, Any]) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name) or node.value is None:
        return
    name, value = targets[0].id, node.value
    if isinstance(value, ast.Subscript) and _name(value.value) in ("Annotated", "Union", "Optional", "Literal"):
        typ = type_of(value)
        if _name(value.value) == "Annotated":
            for extra in (value.slice.elts[1:] if isinstance(value.slice, ast.Tuple) else []):
                for kw in getattr(extra, "keywords", []):
                    if kw.arg == "discriminator":
                        typ = {**typ, "discriminator": _constant(kw.value)}
        table["aliases"][name] = typ


def _config(node: ast.expr) -> dict[str, Any]:
    if isinstance(node, ast.Call):
        return {kw.arg: _json(_constant(kw.value)) for kw in node.keywords if kw.arg}
    if isinstance(node, ast.Dict):
        return {_constant(k): _json(_constant(v)) for k, v in zip(node.keys, node.values) if k is not None}
    return {}


def _class_config(node: ast.ClassDef) -> dict[str, Any]:
    """``class Config: extra = "forbid"`` inside a model (pydantic v1's style, which v2 still honours) ->
    ``{"extra": "forbid"}``: what ``model_config = ConfigDict(extra="forbid")`` says.

    >>> _class_config(ast.parse('class Config:\\n    extra = "forbid"  # no arbitrary fields').body[0])
    {'extra': 'forbid'}
    """
    return {t.id: _json(_constant(stmt.value)) for stmt in node.body if isinstance(stmt, ast.Assign)
            for t in stmt.targets if isinstance(t, ast.Name)}


def _is_validator(fn: ast.FunctionDef) -> bool:
    names = {_name(d.func) if isinstance(d, ast.Call) else _name(d) for d in fn.decorator_list}
    return bool(names & {"field_validator", "model_validator", "validator", "root_validator"})


def _drop_plain_bases(table: dict[str, Any]) -> None:
    """Bases that are not models and carry no fields (``ABC``, ``Generic``) leave the model's base list."""
    for model in table["models"].values():
        model["bases"] = [b for b in model["bases"] if b not in ("ABC", "Generic", "object")]


_NOT_CONSTANT = object()


def _constant(node: Optional[ast.expr]) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return {"member": f"{node.value.id}.{node.attr}"}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand)
        if isinstance(inner, (int, float)):
            return -inner
    return _NOT_CONSTANT


def _json(value: Any) -> Any:
    """A default as JSON: constants as they are, anything computed as its source text."""
    if value is _NOT_CONSTANT:
        return {"expr": True}
    if isinstance(value, (set, frozenset, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is ...:
        return None
    return value


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ast.unparse(node)

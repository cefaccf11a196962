"""Rebuild TensorRT-LLM's LLM-argument models from a schema table, as pydantic models of our own.

A table (:mod:`trtlade.trtllm.llm_args_source`, one per release line in ``trtlade/data/trtllm_schema/``) holds
every field's type, ``Literal`` values, bounds and alias and every class's ``extra`` policy. Built back into
pydantic models with the same annotations and the same ``extra``, they refuse and coerce exactly as upstream's
do (the same pydantic, lax mode), without torch, CUDA or TensorRT-LLM. Types the table cannot resolve
(``torch.dtype``, a tokenizer object, a class from another upstream file) become ``Any``: accepted as they
are, and listed by :func:`opaque_fields` so that the docs can say what is not checked.

    >>> table = {"models": {"Base": {"bases": ["BaseModel"], "config": {"extra": "forbid"}, "fields": {
    ...     "n": {"type": {"kind": "constrained", "name": "PositiveInt"}, "required": False, "constraints": {}},
    ...     "mode": {"type": {"kind": "literal", "values": ["a", "b"]}, "required": False, "constraints": {}}}}},
    ...     "enums": {}, "aliases": {}}
    >>> Base = ModelSet(table)["Base"]
    >>> Base(n="3").n, Base.model_validate({"mode": "b"}).mode
    (3, 'b')
    >>> from pydantic import ValidationError
    >>> try:
    ...     Base(n=0, mode="c", nn=1)
    ... except ValidationError as exc:
    ...     print(sorted(e["type"] for e in exc.errors()))
    ['extra_forbidden', 'greater_than', 'literal_error']
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Literal, Optional, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EXTERNAL_ENUMS", "ModelSet", "opaque_fields"]

_SCALARS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str, "bytes": bytes, "any": Any,
                            "none": type(None), "path": Path}
_ROOT_BASES = {"BaseModel"}
#: Enums a field of llm_args.py names from another upstream file, which the tables (read from llm_args.py alone) do
#: not hold: ``CpConfig.cp_type`` is ``tensorrt_llm/mapping.py``'s ``CpType``, a string enum whose values are its
#: names (``class CpType(StrEnum): ULYSSES = "ULYSSES"; STAR; RING; HELIX``, in the copies of mapping.py that sit
#: beside this ``CpConfig``; mapping.py is not stored at the tables' 1.3 commit, and the older copies' IntEnum could
#: not take the names upstream's own Helix tests and guide write). ``CpConfig.validate_cp_type`` upper-cases a
#: string first, so a name in any case is one; a number is not.
EXTERNAL_ENUMS: dict[str, tuple[str, ...]] = {"CpType": ("ULYSSES", "STAR", "RING", "HELIX")}
_KEEP_CONFIG = ("extra", "populate_by_name", "validate_by_name", "validate_by_alias", "use_enum_values",
                "str_strip_whitespace", "validate_assignment", "strict")


class ModelSet:
    """The models of one table, built on first use; ``ModelSet(table)["TorchLlmArgs"]``."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        self._models: dict[str, type[BaseModel]] = {}
        self._enums: dict[str, type[enum.Enum]] = {}
        self._building: set[str] = set()

    def __getitem__(self, name: str) -> type[BaseModel]:
        if name not in self._models:
            self._models[name] = self._build(name)
        return self._models[name]

    def __contains__(self, name: str) -> bool:
        return name in self.table["models"]

    def fields(self, name: str) -> dict[str, Any]:
        """Every field of ``name`` with its inherited ones (table entries), bases first."""
        out: dict[str, Any] = {}
        model = self.table["models"][name]
        for base in model["bases"]:
            if base in self.table["models"]:
                out.update(self.fields(base))
        out.update(model["fields"])
        return out

    def config(self, name: str) -> dict[str, Any]:
        """The class's ``model_config``, inherited as pydantic inherits it."""
        out: dict[str, Any] = {}
        model = self.table["models"][name]
        for base in reversed(model["bases"]):
            if base in self.table["models"]:
                out.update(self.config(base))
        out.update(model["config"])
        return out

    def _build(self, name: str) -> type[BaseModel]:
        self._building.add(name)
        try:
            config = {k: v for k, v in self.config(name).items() if k in _KEEP_CONFIG and isinstance(v, (str, bool))}
            namespace: dict[str, Any] = {"__annotations__": {}, "__module__": __name__,
                                         "model_config": ConfigDict(arbitrary_types_allowed=True, **config)}
            for field, entry in self.fields(name).items():
                namespace["__annotations__"][field] = self.annotation(entry["type"])
                namespace[field] = self._field_info(entry)
            return type(name, (BaseModel,), namespace)
        finally:
            self._building.discard(name)

    @staticmethod
    def _field_info(entry: dict[str, Any]) -> Any:
        kwargs: dict[str, Any] = {k: v for k, v in entry.get("constraints", {}).items()
                                  if k in ("ge", "gt", "le", "lt", "min_length", "max_length", "multiple_of",
                                           "strict") and isinstance(v, (int, float, bool))}
        aliases = entry.get("validation_alias") or entry.get("alias")
        if aliases:
            kwargs["validation_alias"] = pydantic.AliasChoices(*aliases)
        if entry.get("required"):
            return Field(**kwargs)
        return Field(default=None, **kwargs)  # defaults are not validated by pydantic: the value does not matter

    def annotation(self, typ: dict[str, Any]) -> Any:
        """A type tree as a Python annotation."""
        kind = typ["kind"]
        constraints = {k: v for k, v in typ.get("constraints", {}).items()
                       if k in ("ge", "gt", "le", "lt", "min_length", "max_length") and isinstance(v, (int, float))}
        if kind in _SCALARS:
            base: Any = _SCALARS[kind]
        elif kind == "constrained":
            base = getattr(pydantic, typ["name"])
        elif kind == "literal":
            base = Literal[tuple(typ["values"])] if typ["values"] else Any
        elif kind == "optional":
            base = Optional[self.annotation(typ["of"])]
        elif kind == "union":
            members = tuple(self.annotation(m) for m in typ["of"])
            base = Union[members] if len(members) > 1 else members[0]
            if typ.get("discriminator") and all(self._has_literal(m, typ["discriminator"]) for m in typ["of"]):
                from typing import Annotated
                base = Annotated[base, Field(discriminator=typ["discriminator"])]
        elif kind == "list":
            base = list[self.annotation(typ["of"])]  # type: ignore[misc]
        elif kind == "tuple":
            base = tuple[tuple(self.annotation(m) for m in typ["of"])] if typ["of"] else tuple
        elif kind == "dict":
            base = dict[self.annotation(typ["key"]), self.annotation(typ["value"])]  # type: ignore[misc]
        elif kind == "ref":
            base = self._ref(typ["name"])
        else:
            base = Any
        if constraints:
            from typing import Annotated
            base = Annotated[base, Field(**constraints)]
        return base

    def _ref(self, name: str) -> Any:
        if name in self.table["models"]:
            if name in self._building:
                return Any  # a cycle: accept what the outer model would
            return self[name]
        if name in self.table["enums"]:
            return self._enum(name)
        if name in self.table.get("aliases", {}):
            return self.annotation(self.table["aliases"][name])
        if name in EXTERNAL_ENUMS:
            return self._external(name)
        return Any

    def _external(self, name: str) -> type[enum.Enum]:
        """An :data:`EXTERNAL_ENUMS` string enum, its values its names.

        >>> CpType = ModelSet({"models": {}, "enums": {}, "aliases": {}})._external("CpType")
        >>> CpType("HELIX").name
        'HELIX'
        """
        if name not in self._enums:
            self._enums[name] = enum.Enum(name, {m: m for m in EXTERNAL_ENUMS[name]}, type=str)  # type: ignore[misc]
        return self._enums[name]

    def _enum(self, name: str) -> type[enum.Enum]:
        if name not in self._enums:
            spec = self.table["enums"][name]
            members = {k: v for k, v in spec["members"].items() if isinstance(v, (str, int, float))}
            base = (str, enum.Enum) if spec.get("str") else (enum.Enum,)
            self._enums[name] = enum.Enum(name, members, type=base[0] if len(base) == 2 else None)  # type: ignore
        return self._enums[name]

    def _has_literal(self, typ: dict[str, Any], field: str) -> bool:
        if typ["kind"] != "ref" or typ["name"] not in self.table["models"]:
            return False
        entry = self.fields(typ["name"]).get(field)
        return entry is not None and entry["type"]["kind"] == "literal"


def opaque_fields(table: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(class, field, type text)`` of every field whose type the table cannot check (accepted as given).

    >>> opaque_fields({"models": {"A": {"fields": {"d": {"type": {"kind": "opaque", "text": "torch.dtype"}}}}},
    ...                "enums": {}, "aliases": {}})
    [('A', 'd', 'torch.dtype')]
    """
    out = []
    for cls, model in table["models"].items():
        for name, entry in model["fields"].items():
            text = _opaque(entry["type"], table)
            if text:
                out.append((cls, name, text))
    return out


def _opaque(typ: dict[str, Any], table: dict[str, Any]) -> str:
    kind = typ["kind"]
    if kind == "opaque":
        return typ["text"]
    if kind == "ref" and typ["name"] not in table["models"] and typ["name"] not in table["enums"] \
            and typ["name"] not in table.get("aliases", {}) and typ["name"] not in EXTERNAL_ENUMS:
        return typ["name"]
    for key in ("of", "key", "value"):
        sub = typ.get(key)
        for s in (sub if isinstance(sub, list) else [sub] if sub else []):
            if text := _opaque(s, table):
                return text
    return ""

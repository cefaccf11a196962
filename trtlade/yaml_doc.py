"""Read YAML files keeping the line and column of every node, so that every error about a file (trtlade's
config, a ``trtllm-serve`` file, a grps config) names its file, line and column.

Reading is defensive, because ``validate-config`` is a CI gate that sees whatever is in a repository:

=============================  ===========================================================
input                          result (one error Diagnostic, never a traceback)
=============================  ===========================================================
larger than 1 MiB              ``file-too-large`` (configs are a few KiB)
NUL bytes                      ``binary-file``
not UTF-8                      ``not-utf8`` at the line/column of the first bad byte
empty / only comments          ``empty-file``
malformed YAML                 ``yaml-syntax`` at the parser's position
several documents (``---``)    ``yaml-multiple-documents``
more than 100000 nodes once    ``yaml-too-many-nodes`` (a "billion laughs" alias bomb is
aliases are expanded           caught before anything is constructed)
recursive alias                ``yaml-recursive-alias``
nested deeper than 64 levels   ``yaml-too-deep``
duplicate mapping key          ``duplicate-key`` (YAML would silently keep the last one)
top level not a mapping        ``not-a-mapping``
=============================  ===========================================================

Example::

    >>> doc = parse_yaml("lookahead:\\n  spec: 4,2,4\\n", "deploy.yml")
    >>> doc.data, doc.position(("lookahead", "spec"))
    ({'lookahead': {'spec': '4,2,4'}}, (2, 9))
    >>> doc.position(("lookahead", "spec"), key=True), doc.position(("lookahead", "spec", "window_size"))
    ((2, 3), (2, 9))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from trtlade.diagnostics import Diagnostic
from trtlade.errors import TrtladeError

__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "MAX_DEPTH", "Loc", "ConfigLoadError", "YamlDocument", "read_yaml",
           "parse_yaml", "dotted"]

#: Largest config file read (configs are a few KiB; anything larger is refused, not parsed).
MAX_FILE_BYTES = 1024 * 1024
#: Most YAML nodes a file may hold once aliases are expanded (a "billion laughs" guard).
MAX_NODES = 100_000
#: Deepest nesting of mappings/sequences accepted.
MAX_DEPTH = 64

#: A location inside a document: mapping keys and sequence indices, outermost first.
Loc = tuple[Any, ...]


def dotted(loc: Iterable[Any]) -> str:
    """``("bench", "concurrency", 1) -> "bench.concurrency.1"``."""
    return ".".join(str(part) for part in loc)


class ConfigLoadError(TrtladeError, ValueError):
    """A file that cannot be read as YAML at all; ``diagnostics`` holds the (located) reasons, and the
    message is all of them, each with its ``file:line`` and hint."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.format_text() for d in self.diagnostics))


# ====================================================================== documents
@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: its data and the 1-based (line, column) of every value and key."""

    file: str
    data: Any
    value_marks: Mapping[Loc, tuple[int, int]] = field(repr=False)
    key_marks: Mapping[Loc, tuple[int, int]] = field(repr=False)
    path: Path | None = None

    @property
    def base_dir(self) -> Path:
        """The directory relative paths in the file are resolved against."""
        return self.path.parent if self.path is not None else Path.cwd()

    def position(self, loc: Iterable[Any], *, key: bool = False) -> tuple[int, int]:
        """(line, column) of ``loc`` (of its key when ``key``), else of the nearest ancestor present;
        (1, 1) when nothing is."""
        parts = tuple(loc)
        if key and parts in self.key_marks:
            return self.key_marks[parts]
        while parts:
            if parts in self.value_marks:
                return self.value_marks[parts]
            parts = parts[:-1]
        return self.value_marks.get((), (1, 1))

    def has(self, loc: Iterable[Any]) -> bool:
        return tuple(loc) in self.value_marks

    def get(self, loc: Iterable[Any], default: Any = None) -> Any:
        """The value at ``loc`` or ``default``."""
        node = self.data
        for part in loc:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                return default
        return node

    def diagnostic(self, severity: str, message: str, *, loc: Iterable[Any] = (), hint: str = "",
                   code: str = "", key: bool = False, path: str | None = None) -> Diagnostic:
        """A Diagnostic located at ``loc`` in this file (``path`` defaults to ``dotted(loc)``)."""
        parts = tuple(loc)
        line, column = self.position(parts, key=key)
        return Diagnostic(severity, message, hint=hint, path=dotted(parts) if path is None else path,  # type: ignore[arg-type]
                          file=self.file, line=line, column=column, code=code)

    def locate(self, diag: Diagnostic) -> Diagnostic:
        """Fill in file/line/column of a Diagnostic that names a dotted ``path`` in this file."""
        if diag.file not in (None, self.file):  # about another file (e.g. the engine's config.json)
            return diag
        loc = tuple(int(p) if p.isdigit() else p for p in diag.path.split(".")) if diag.path else ()
        line, column = self.position(loc)
        return diag.located(self.file, line, column)


def read_yaml(path: str | Path, *, display: str | None = None) -> YamlDocument:
    """Read and parse one YAML file with every guard of the module docstring.

    ``display`` is the file name used in diagnostics (default: ``str(path)``).
    Raises :class:`ConfigLoadError`.
    """
    p = Path(path)
    name = display if display is not None else str(path)

    def fail(message: str, hint: str, code: str, line: int | None = None, column: int | None = None):
        raise ConfigLoadError([Diagnostic("error", message, hint=hint, file=name, line=line or 1,
                                          column=column or 1, code=code)])

    if not p.exists():
        if p.is_symlink():
            fail(f"{path} is a symlink that leads nowhere (a loop, or a missing target)", "point it at the config "
                 "file, or give the file's own path", "no-such-file")
        fail(f"no such file: {path}", "check the path", "no-such-file")
    if p.is_dir():
        fail(f"{path} is a directory", "pass a .yml file, or the directory to validate-config", "is-directory")
    if not p.is_file():  # a pipe would hang the read, or be drained by the first of two reads
        fail(f"{path} is not a regular file (a pipe or a device)", "save the config to a file and give its path",
             "not-a-file")
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            fail(f"the file is {size} bytes, larger than the {MAX_FILE_BYTES // 1024} KiB limit for a config",
                 "a config is a few KiB; is this the right file?", "file-too-large")
        with p.open("rb") as fh:
            blob = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read the file: {exc.strerror or exc}", "check its permissions", "unreadable")
    if len(blob) > MAX_FILE_BYTES:  # grew while we looked
        fail(f"the file is larger than the {MAX_FILE_BYTES // 1024} KiB limit for a config",
             "a config is a few KiB; is this the right file?", "file-too-large")
    return parse_yaml(blob, name, path=p.resolve())


def parse_yaml(source: str | bytes, file: str = "<string>", *, path: Path | None = None) -> YamlDocument:
    """Parse YAML text (or bytes, which must be UTF-8) into a :class:`YamlDocument`.

    Raises :class:`ConfigLoadError` with one located Diagnostic on any problem.
    """
    text = _decode(source, file) if isinstance(source, (bytes, bytearray)) else source
    if not _has_content(text):
        raise ConfigLoadError([Diagnostic(
            "error", "the file is empty (no YAML content, only blanks or comments)",
            hint="a trtlade config needs at least `lookahead: {spec: W,N,G}`", file=file, line=1, column=1,
            code="empty-file")])
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        node = _compose_single(loader, file)
        if node is None:
            raise ConfigLoadError([Diagnostic("error", "the file holds no YAML document", file=file, line=1,
                                              column=1, code="empty-file",
                                              hint="a trtlade config needs at least `lookahead: {spec: W,N,G}`")])
        _check_size(node, file)
        value_marks: dict[Loc, tuple[int, int]] = {}
        key_marks: dict[Loc, tuple[int, int]] = {}
        _record_positions(loader, node, file, value_marks, key_marks)
        _resolve_merges(loader, node, file)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ConfigLoadError([_syntax_diagnostic(exc, file)]) from None
    except yaml.YAMLError as exc:  # ReaderError and friends
        raise ConfigLoadError([_reader_diagnostic(exc, text, file)]) from None
    except RecursionError:
        raise ConfigLoadError([Diagnostic("error", f"the YAML is nested too deeply (more than {MAX_DEPTH} levels)",
                                          hint="a config is a few levels deep; is this the right file?",
                                          file=file, line=1, column=1, code="yaml-too-deep")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(file=file, data=data, value_marks=value_marks, key_marks=key_marks, path=path)


def _decode(blob: bytes, file: str) -> str:
    if b"\x00" in blob[:8192] or b"\x00" in blob:
        offset = blob.index(b"\x00")
        line, column = _byte_position(blob, offset)
        raise ConfigLoadError([Diagnostic(
            "error", f"binary data: a NUL byte at byte {offset}; this is not a YAML text file",
            hint="validate-config reads YAML configs (*.yml, *.yaml)", file=file, line=line, column=column,
            code="binary-file")])
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, column = _byte_position(blob, exc.start)
        raise ConfigLoadError([Diagnostic(
            "error", f"the file is not UTF-8 text: byte 0x{blob[exc.start]:02x} at byte {exc.start} "
                     f"cannot be decoded",
            hint="save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)", file=file, line=line,
            column=column, code="not-utf8")]) from None


def _byte_position(blob: bytes, offset: int) -> tuple[int, int]:
    line = blob.count(b"\n", 0, offset) + 1
    column = offset - (blob.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def _has_content(text: str) -> bool:
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped and not stripped.startswith("#") and stripped not in ("---", "..."):
            return True
    return False


def _compose_single(loader: yaml.SafeLoader, file: str) -> yaml.Node | None:
    """``loader.get_single_node()`` with a clear error for several documents."""
    loader.get_event()  # StreamStart
    node = None
    if not loader.check_event(yaml.StreamEndEvent):
        node = loader.compose_document()
    if not loader.check_event(yaml.StreamEndEvent):
        event = loader.get_event()
        line, column = event.start_mark.line + 1, event.start_mark.column + 1
        raise ConfigLoadError([Diagnostic(
            "error", "the file holds several YAML documents (a second one starts here); trtlade reads one",
            hint="keep one document per file: split the file, or remove the extra '---'",
            file=file, line=line, column=column, code="yaml-multiple-documents")])
    loader.get_event()  # StreamEnd
    return node


def _check_size(root: yaml.Node, file: str) -> None:
    """Count nodes with aliases expanded, without expanding them (memoised per node), and refuse
    recursive aliases and excessive depth before anything is constructed."""
    sizes: dict[int, int] = {}
    depth_of: dict[int, int] = {}
    in_progress: set[int] = set()
    # iterative post-order walk: (node, children_done)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            in_progress.discard(key)
            kids = _children(node)
            total = 1 + sum(sizes[id(k)] for k in kids)
            depth = 1 + max((depth_of[id(k)] for k in kids), default=0)
            if total > MAX_NODES:
                _too_many(node, file)
            if depth > MAX_DEPTH:
                raise ConfigLoadError([Diagnostic(
                    "error", f"the YAML is nested too deeply (more than {MAX_DEPTH} levels)",
                    hint="a config is a few levels deep; is this the right file?", file=file,
                    line=node.start_mark.line + 1, column=node.start_mark.column + 1, code="yaml-too-deep")])
            sizes[key], depth_of[key] = total, depth
            continue
        if key in sizes:
            continue
        if key in in_progress:
            raise ConfigLoadError([Diagnostic(
                "error", "a recursive YAML alias: this node contains an alias of itself",
                hint="remove the alias (*name) that refers to its own anchor (&name)", file=file,
                line=node.start_mark.line + 1, column=node.start_mark.column + 1, code="yaml-recursive-alias")])
        in_progress.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) not in sizes:
                stack.append((child, False))
    if sizes[id(root)] > MAX_NODES:  # pragma: no cover - caught in the loop
        _too_many(root, file)


def _too_many(node: yaml.Node, file: str) -> None:
    raise ConfigLoadError([Diagnostic(
        "error", f"the YAML expands to more than {MAX_NODES} nodes once its aliases are expanded "
                 "(an alias bomb, or not a config)",
        hint="a config is a few hundred nodes; remove the nested anchors/aliases (&name / *name)",
        file=file, line=node.start_mark.line + 1, column=node.start_mark.column + 1, code="yaml-too-many-nodes")])


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _record_positions(loader: yaml.SafeLoader, root: yaml.Node, file: str,
                      value_marks: dict[Loc, tuple[int, int]], key_marks: dict[Loc, tuple[int, int]]) -> None:
    """Walk the (alias-expanded, size-checked) tree recording positions; refuse duplicate and
    non-scalar keys."""
    stack: list[tuple[Loc, yaml.Node]] = [((), root)]
    while stack:
        loc, node = stack.pop()
        value_marks.setdefault(loc, _mark(node))
        if isinstance(node, yaml.SequenceNode):
            for index, child in enumerate(node.value):
                stack.append(((*loc, index), child))
        elif isinstance(node, yaml.MappingNode):
            seen: dict[Any, tuple[yaml.Node, bool]] = {}
            for key_node, value_node, merged in _mapping_pairs(node):
                key = _scalar_key(loader, key_node, file)
                if key in seen:
                    first, first_merged = seen[key]
                    if merged or first_merged:
                        continue  # an explicit key overriding a merged (<<) one is fine
                    message, hint = _duplicate_said(node, key, first)
                    raise ConfigLoadError([Diagnostic(
                        "error", message, hint=hint, path=dotted((*loc, key)), file=file,
                        line=_mark(key_node)[0], column=_mark(key_node)[1], code="duplicate-key")])
                seen[key] = (key_node, merged)
                key_marks.setdefault((*loc, key), _mark(key_node))
                stack.append(((*loc, key), value_node))


def _duplicate_said(node: yaml.MappingNode, key: Any, first: yaml.Node) -> tuple[str, str]:
    """The message and hint for a key given twice. In a flow mapping, a number repeated with no value of its own is
    a list of numbers written without quotes (``{spec: 2,2,2}``: the commas separate keys, so ``2`` comes twice).

        >>> node = yaml.compose("{spec: 2,2,2}")
        >>> _duplicate_said(node, 2, node.value[1][0])[1]
        "quote the value ('2,2,2'), write it as a list [2, 2, 2], or use block style"
    """
    said = f"duplicate key {key!r} (first at line {_mark(first)[0]}); YAML would keep only the last value"
    if not (node.flow_style and isinstance(key, int) and not isinstance(key, bool)):
        return said, "remove one of them"
    pairs = node.value
    run = next((r for r in _number_runs(pairs) if any(pairs[m][0].value == str(key) for m in range(r[0] + 1, r[1]))),
               None)
    if run is None:
        return said, "remove one of them"
    start = run[0]
    numbers = [pairs[start][1].value] + [pairs[m][0].value for m in range(start + 1, run[1])]
    text = ",".join(numbers)
    return (f"duplicate key {key!r} (first at line {_mark(first)[0]}): in a flow mapping like "
            f"{{{pairs[start][0].value}: {text}}} the commas separate keys, so {key!r} is a key twice",
            f"quote the value ('{text}'), write it as a list [{', '.join(numbers)}], or use block style")


def _number_runs(pairs: list) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of a flow mapping's pairs read from ``key: n,n,...``: a pair whose value is a
    number, then the pairs right after it whose key is a number and whose value is empty.

        >>> node = yaml.compose("{a: 1,2, spec: 3,3,3}")
        >>> _number_runs(node.value)
        [(0, 2), (2, 5)]
    """
    def tagged(node: yaml.Node, kind: str) -> bool:
        return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":" + kind)

    runs, i = [], 0
    while i < len(pairs):
        end = i + 1
        if tagged(pairs[i][1], "int"):
            while end < len(pairs) and tagged(pairs[end][0], "int") and tagged(pairs[end][1], "null"):
                end += 1
        if end > i + 1:
            runs.append((i, end))
        i = end
    return runs


def _resolve_merges(loader: yaml.SafeLoader, root: yaml.Node, file: str) -> None:
    """Replace every mapping's ``<<`` merge keys by the pairs they give, the first of each key kept (its explicit keys,
    then the merged mappings in their order, as YAML's merge rule has it and the positions say), so PyYAML constructs
    what the positions point at: PyYAML 6.0 let a later mapping of a ``<<: [a, b]`` list win."""
    stack, done = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in done:
            continue
        done.add(id(node))
        if isinstance(node, yaml.MappingNode):
            if any(k.tag == _MERGE_TAG for k, _ in node.value) and _merges_are_mappings(node):
                kept: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
                for key_node, value_node, _ in _mapping_pairs(node):
                    kept.setdefault(_scalar_key(loader, key_node, file), (key_node, value_node))
                node.value = list(kept.values())
            stack.extend(v for _, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _merges_are_mappings(node: yaml.MappingNode) -> bool:
    """Whether every ``<<`` of ``node`` merges a mapping or a list of mappings; another value is left to PyYAML, which
    refuses it ("expected a mapping ... for merging")."""
    for key, value in node.value:
        if key.tag != _MERGE_TAG:
            continue
        sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
        if not sources or not all(isinstance(s, yaml.MappingNode) for s in sources):
            return False
    return True


def _mapping_pairs(node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node, bool]]:
    """The pairs of a mapping as (key, value, came_from_a_merge), with ``<<`` merge keys expanded
    after the explicit keys (explicit keys win, as in YAML's merge semantics)."""
    explicit: list[tuple[yaml.Node, yaml.Node, bool]] = []
    merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if isinstance(source, yaml.MappingNode):
                    merged.extend((k, v, True) for k, v, _ in _mapping_pairs(source))
        else:
            explicit.append((key_node, value_node, False))
    return explicit + merged


def _scalar_key(loader: yaml.SafeLoader, key_node: yaml.Node, file: str) -> Any:
    if not isinstance(key_node, yaml.ScalarNode):
        raise ConfigLoadError([Diagnostic(
            "error", "a mapping key is itself a mapping or a list; config keys are plain names",
            hint="write `name: value`", file=file, line=_mark(key_node)[0], column=_mark(key_node)[1],
            code="complex-key")])
    return loader.construct_object(key_node)


_SYNTAX_HINTS: tuple[tuple[str, str], ...] = (
    ("found character '\\t'", "YAML indentation uses spaces, never tabs"),
    ("mapping values are not allowed", "a value contains ': ' (quote it) or the indentation is off"),
    ("could not find expected ':'", "check the indentation, and that every key ends with ':'"),
    ("found undefined alias", "define the anchor (&name) before using the alias (*name)"),
    ("expected <block end>", "check the indentation of this line against the one above"),
    ("while parsing a flow", "a [ or { is not closed"),
    ("found unknown escape character", "use single quotes, or escape the backslash (\\\\)"),
    ("could not determine a constructor", "YAML tags (!!python/..., !custom) are not allowed in configs"),
)


def _syntax_diagnostic(exc: yaml.MarkedYAMLError, file: str) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = (exc.problem or "").strip()
    context = (exc.context or "").strip()
    what = "unsupported YAML" if isinstance(exc, yaml.constructor.ConstructorError) else "malformed YAML"
    message = f"{what}: {problem}" + (f" ({context}" + (
        f" at line {exc.context_mark.line + 1})" if exc.context_mark is not None else ")") if context else "")
    full = f"{context} {problem}"
    hint = next((h for needle, h in _SYNTAX_HINTS if needle in full),
                "fix the YAML syntax at this position")
    return Diagnostic("error", message, hint=hint, file=file, line=line, column=column, code="yaml-syntax")


def _reader_diagnostic(exc: yaml.YAMLError, text: str, file: str) -> Diagnostic:
    position = getattr(exc, "position", None)
    line, column = 1, 1
    if isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
    reason = getattr(exc, "reason", None) or str(exc)
    character = getattr(exc, "character", None)
    if isinstance(character, str):
        character = ord(character)
    shown = f" (#x{character:04x})" if isinstance(character, int) and f"{character:04x}" not in str(reason) else ""
    return Diagnostic("error", f"the file cannot be read as YAML: {reason}{shown}",
                      hint="remove control characters; configs are plain UTF-8 text", file=file,
                      line=line, column=column, code="yaml-unreadable")

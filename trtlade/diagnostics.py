"""Diagnostics: one finding of a check (config gate, engine check, server start), as data.

Every check in trtlade returns a list of :class:`Diagnostic`; the CLI formats them at the edge
(text, JSON, GitHub Actions annotations) and decides the exit code with :func:`has_errors`.

Example::

    >>> d = Diagnostic("error", "window_size is 0: windowSize requires >= 1", hint="use W >= 1",
    ...                path="lookahead.spec.window_size", file="deploy.yml", line=3, column=9,
    ...                code="spec-illegal")
    >>> d.format_text()
    'deploy.yml:3:9: error: lookahead.spec.window_size: window_size is 0: windowSize requires >= 1\\n  hint: use W >= 1'
    >>> has_errors([d]), has_errors([d.with_severity("warning")])
    (True, False)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Literal

__all__ = [
    "Severity",
    "SEVERITIES",
    "Diagnostic",
    "has_errors",
    "has_warnings",
    "count_by_severity",
    "sort_diagnostics",
]

Severity = Literal["error", "warning", "info"]

#: Severities, most severe first.
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Diagnostic:
    """One finding.

    ``path`` is the dotted field path inside the file (``lookahead.spec.window_size``,
    ``models.0.inferer_args.lookahead_decoding``); ``file``/``line``/``column`` locate it (1-based
    line and column, as editors and GitHub show them); ``code`` is a short stable identifier of the
    check (``engine-max-draft-len``, ``unknown-key`` ...) that tests and tools can match on.
    """

    severity: Severity
    message: str
    hint: str = ""
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None
    code: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    @property
    def location(self) -> str:
        """``file:line:column`` with whatever is known (``""`` when nothing is)."""
        if self.file is None:
            return ""
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def with_severity(self, severity: Severity) -> "Diagnostic":
        return replace(self, severity=severity)

    def located(self, file: str | None = None, line: int | None = None, column: int | None = None,
                path: str | None = None) -> "Diagnostic":
        """A copy with the location filled in where it is still unknown."""
        return replace(
            self,
            file=self.file if self.file is not None else file,
            line=self.line if self.line is not None else line,
            column=self.column if self.column is not None else column,
            path=self.path or (path or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data: severity, file, line, column, path, message, hint, code."""
        data = asdict(self)
        return {key: data[key] for key in ("severity", "file", "line", "column", "path", "message",
                                           "hint", "code")}

    def format_text(self) -> str:
        """``file:line:col: severity: path: message`` and an indented ``hint:`` line (plain text)."""
        head = f"{self.location}: " if self.location else ""
        field = f"{self.path}: " if self.path else ""
        text = f"{head}{self.severity}: {field}{self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.format_text()


def has_errors(diags: Iterable[Diagnostic]) -> bool:
    """True when any diagnostic is an error."""
    return any(d.severity == "error" for d in diags)


def has_warnings(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "warning" for d in diags)


def count_by_severity(diags: Iterable[Diagnostic]) -> dict[str, int]:
    """``{"error": e, "warning": w, "info": i}`` (every key present)."""
    counts = {s: 0 for s in SEVERITIES}
    for d in diags:
        counts[d.severity] += 1
    return counts


def sort_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    """By file, then line, column (unknown positions last within a file), stable otherwise."""
    big = 1 << 62
    return sorted(diags, key=lambda d: (d.file or "", d.line if d.line is not None else big,
                                        d.column if d.column is not None else big))

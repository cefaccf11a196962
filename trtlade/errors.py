"""The one base class of trtlade's user-facing errors.

Every error a user can cause (a bad flag, config, dataset, engine directory, missing TensorRT-LLM ...)
carries ``message`` (what is wrong), ``hint`` (what to do) and ``where`` (the flag, ``file:line`` or
field it is about). The CLI prints them without a traceback; the server maps them to HTTP errors.
Subclasses also derive from the builtin that fits (ValueError for bad input, RuntimeError for a
failed step), so callers can catch either.
"""

from __future__ import annotations

__all__ = ["TrtladeError"]


class TrtladeError(Exception):
    """``TrtladeError("engine dir missing", "run trtlade build first", where="--engine-dir")``."""

    def __init__(self, message: str, hint: str = "", *, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.where = where

    def __str__(self) -> str:
        prefix = f"{self.where}: " if self.where else ""
        return prefix + self.message + (f"\nhint: {self.hint}" if self.hint else "")

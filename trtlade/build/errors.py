"""The one exception type of ``trtlade build``: what went wrong, where, and what to try."""

from __future__ import annotations

__all__ = ["BuildError"]


class BuildError(RuntimeError):
    """A build cannot go on. ``message`` says what is wrong, ``hint`` what to try, ``where`` which
    input (a flag, ``file:field``, a path) it is about; ``log_tail`` holds the last lines of a failed
    step's log (printed by the CLI). The CLI prints all of it without a traceback."""

    def __init__(self, message: str, *, hint: str = "", where: str = "", log_tail: str = "",
                 log_path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.where = where
        self.log_tail = log_tail
        self.log_path = log_path

    def __str__(self) -> str:
        text = (f"{self.where}: " if self.where else "") + self.message
        return text + (f"\nhint: {self.hint}" if self.hint else "")

"""The one exception type of ``trtlade build``: what went wrong, where, and what to try."""

from __future__ import annotations

from trtlade.errors import TrtladeError

__all__ = ["BuildError"]


class BuildError(TrtladeError, RuntimeError):
    """A build cannot go on. ``message`` says what is wrong, ``hint`` what to try, ``where`` which
    input (a flag, ``file:field``, a path) it is about; ``log_tail`` holds the last lines of a failed
    step's log (printed by the CLI). The CLI prints all of it without a traceback."""

    def __init__(self, message: str, *, hint: str = "", where: str = "", log_tail: str = "",
                 log_path: str = "") -> None:
        super().__init__(message, hint, where=where)
        self.log_tail = log_tail
        self.log_path = log_path

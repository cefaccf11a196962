"""The one family of trtlade's user-facing errors.

Every error a user can cause (a bad flag, config, dataset, request, engine directory, missing
TensorRT-LLM ...) derives from :class:`TrtladeError` and carries ``message`` (what is wrong),
``hint`` (what to do, or "") and ``where`` (the flag, ``file:line``, config path or request field
it is about, or ""). The CLI prints them without a traceback; the server maps them to HTTP errors.
Subclasses also derive from the builtin that fits (ValueError for bad input, RuntimeError for a
failed step), so callers can catch either.

``str()`` is the located form (``where: message`` and a hint line) unless a subclass keeps its
message alone (``located = False``): those are read by code that shows the message itself (pydantic
wraps validator errors, the HTTP layer puts the field in ``param``).

>>> str(PlanError("no engine directory", "run trtlade build first", where="--engine-dir"))
'--engine-dir: no engine directory\\nhint: run trtlade build first'
>>> issubclass(PlanError, ValueError)
True
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["TrtladeError", "PlanError", "RepeatedKeyError", "keys_once", "redacted_argv", "did_you_mean"]


def redacted_argv(argv: "list[str] | tuple[str, ...]") -> list[str]:
    """A command line with every ``--api-key`` value replaced, for anything printed, logged or saved (reports
    are shared; keys are not).

    >>> redacted_argv(["bench", "--api-key", "sk-1", "--api-key=sk-2", "-n", "4"])
    ['bench', '--api-key', '***', '--api-key=***', '-n', '4']
    """
    out: list[str] = []
    hide = False
    for arg in argv:
        if hide:
            out.append("***")
            hide = False
        elif arg == "--api-key":
            out.append(arg)
            hide = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(arg)
    return out


class TrtladeError(Exception):
    """``TrtladeError("engine dir missing", "run trtlade build first", where="--engine-dir")``."""

    #: whether ``str()`` carries ``where`` and ``hint`` (False: the message alone)
    located = True

    def __init__(self, message: str, hint: str = "", *, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.where = where

    def __str__(self) -> str:
        if not self.located:
            return self.message
        prefix = f"{self.where}: " if self.where else ""
        return prefix + self.message + (f"\nhint: {self.hint}" if self.hint else "")


class PlanError(TrtladeError, ValueError):
    """A bad flag or config value while planning a command (build, serve, bench, tune): ``where`` and
    ``option`` name the flag (or ""), ``usage``: a command-line usage mistake (exit 2 instead of 1)."""

    def __init__(self, message: str, hint: str = "", *, option: str = "", where: str = "", usage: bool = False
                 ) -> None:
        super().__init__(message, hint, where=where or option)
        self.option = option or where
        self.usage = usage


class RepeatedKeyError(TrtladeError, ValueError):
    """A JSON object that gives a key twice (:func:`keys_once`); ``key`` names it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice in one object (JSON readers keep only one of them)",
                         "give each key once")
        self.key = key


def keys_once(pairs: "list[tuple[str, object]]") -> dict:
    """``json.loads``'s ``object_pairs_hook`` for what a user wrote: Python's json keeps the last of a repeated key
    (RFC 8259 leaves it undefined), so ``{"prompt": "a", "prompt": "b"}`` would send "b" without a word.

    >>> keys_once([("a", 1), ("b", 2)])
    {'a': 1, 'b': 2}
    >>> keys_once([("a", 1), ("a", 2)])
    Traceback (most recent call last):
    trtlade.errors.RepeatedKeyError: the key 'a' is given twice in one object (JSON readers keep only one of them)
    hint: give each key once
    """
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKeyError(key)
        out[key] = value
    return out


def did_you_mean(word: str, candidates: "Iterable[str]") -> str:
    """A hint's opening for a misspelt name: the closest candidate, or nothing.

    >>> did_you_mean("gihub", ["text", "json", "github"]), did_you_mean("zzz", ["text"])
    ("did you mean 'github'? ", '')
    """
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""

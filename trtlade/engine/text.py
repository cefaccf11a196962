"""Text of a generation as it streams: incremental detokenization and stop strings.

Tokens arrive one at a time (a lookahead step hands over up to N of them, pushed in order), so a
stop string inside an accepted run ends the generation at the exact token that completes it.

Worked example (a byte-level tokenizer, stop string ``"\\n\\n"``)::

    out = TextTracker(tokenizer, stop=("\\n\\n",))
    out.push(id(" cat")), out.push(id(".")), out.push(id("\\n"))
        -> texts " cat", ".", ""  (a lone "\\n" could start the stop string: held back)
    out.push(id("\\n"))                    -> stopped; out.text == " cat."  (trimmed before the stop)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["IncrementalDetokenizer", "TextTracker", "PushResult"]

#: Prompt tokens decoded before the first generated token, so that tokenizers which drop a leading
#: space at the start of a text (SentencePiece) still give the first token its space.
PROMPT_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Decode a growing token list into text deltas, never splitting a multi-byte character.

    Keeps two offsets into the ids: the text of ``ids[prefix:read]`` was already emitted, so the
    delta is ``decode(ids[prefix:]) - decode(ids[prefix:read])``, held back while it ends in an
    incomplete UTF-8 sequence (U+FFFD). ``context`` are prompt ids decoded as prefix only.
    """

    def __init__(self, tokenizer: Any, context: Sequence[int] = (), skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = [int(t) for t in context[-PROMPT_CONTEXT_TOKENS:]] if context else []
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens)

    def push(self, token: int) -> str:
        """Add a token; return the new text it completes (possibly "")."""
        self.ids.append(int(token))
        return self._delta(final=False)

    def flush(self) -> str:
        """Text still held back (an incomplete character at the very end), emitted as is."""
        return self._delta(final=True)

    def _delta(self, final: bool) -> str:
        if self.read_offset >= len(self.ids):
            return ""
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = self._decode(self.ids[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and (final or not new_text.endswith("\ufffd")):
            delta = new_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        if final:
            self.prefix_offset = self.read_offset = len(self.ids)
        return ""


@dataclass(frozen=True)
class PushResult:
    """``text``: what may be streamed now; ``stopped``: a stop string or stop token ended the text."""

    text: str
    stopped: bool


class TextTracker:
    """The streamed text of one generation, with stop strings.

    ``push(token)`` returns the text safe to stream: text that could still turn into a stop string
    is held back until it cannot. When a stop string appears, the text is cut before it and
    ``stopped`` is True; the caller ends the generation there. ``check_stops=False`` (before
    ``min_tokens``) ignores stop strings. ``finish()`` returns whatever was held back.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str] = (), context: Sequence[int] = ()) -> None:
        self.stops = tuple(s for s in stop if s)
        self._max_stop = max((len(s) for s in self.stops), default=0)
        self.detok = IncrementalDetokenizer(tokenizer, context=context)
        self.text = ""  # decoded text (cut at a stop string once one is found)
        self.emitted = 0  # chars of self.text already streamed
        self._scanned = 0  # stop strings cannot start before this index
        self.stopped = False

    def push(self, token: int, *, check_stops: bool = True, hidden: bool = False) -> PushResult:
        """Add a generated token. ``hidden``: the token ends the generation and contributes no
        text (EOS or a stop token id)."""
        if self.stopped:
            raise RuntimeError("push() after a stop string ended the text")
        if hidden:
            self.detok.ids.append(int(token))
            self.detok.prefix_offset = self.detok.read_offset = len(self.detok.ids)
            return PushResult(self._release(final=True), False)
        self.text += self.detok.push(token)
        if check_stops and self.stops:
            cut = self._find_stop()
            if cut is not None:
                self.text = self.text[:cut]
                self.stopped = True
                return PushResult(self._release(final=True), True)
        else:
            self._scanned = len(self.text)
        return PushResult(self._release(final=False), False)

    def finish(self) -> str:
        """The rest of the text (held-back characters, an incomplete final character)."""
        if not self.stopped:
            self.text += self.detok.flush()
        return self._release(final=True)

    def _find_stop(self) -> int | None:
        start = max(0, self._scanned - self._max_stop + 1)
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        self._scanned = len(self.text)
        return min(hits) if hits else None

    def _release(self, final: bool) -> str:
        end = len(self.text) if final or not self.stops else len(self.text) - self._held_back()
        end = max(end, self.emitted)
        out = self.text[self.emitted:end]
        self.emitted = end
        return out

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        for length in range(min(self._max_stop - 1, len(self.text)), 0, -1):
            tail = self.text[-length:]
            if any(s.startswith(tail) for s in self.stops):
                return length
        return 0

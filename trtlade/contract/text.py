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

import sys
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

__all__ = ["IncrementalDetokenizer", "TextTracker", "PushResult", "OutputText", "Emitted", "eos_token_ids"]

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
        self._backend = _backend_decode(tokenizer)

    def _decode(self, ids: Sequence[int]) -> str:
        if self._backend is not None:
            return self._backend(ids, skip_special_tokens=self.skip_special_tokens)
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


def _backend_decode(tokenizer: Any) -> Any:
    """The Rust ``tokenizers.Tokenizer.decode`` behind a transformers fast tokenizer, where transformers' own
    ``decode`` would return exactly its text (its ``_decode`` not overridden, no clean-up of spaces after it), so
    that a generation's two decodes a token skip transformers' Python around the call (a few microseconds
    each, warm; several times that right after a decode step streamed the weights through the caches). None
    otherwise: ``tokenizer.decode`` as given."""
    # imported already wherever such a tokenizer exists (this module never imports transformers itself)
    fast = getattr(sys.modules.get("transformers.tokenization_utils_tokenizers"), "TokenizersBackend", None)
    backend = getattr(tokenizer, "_tokenizer", None)
    if (fast is not None and getattr(type(tokenizer), "_decode", None) is fast._decode
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True)
            and callable(getattr(backend, "decode", None))):
        return backend.decode
    return None


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


@dataclass(frozen=True)
class Emitted:
    """What one run of tokens added: the ``tokens`` kept (up to the one that ended the generation),
    the ``text`` that may be streamed now, and ``finish_reason`` (``"stop"``, ``"length"`` or None)."""

    tokens: list[int]
    text: str
    finish_reason: Optional[str]


class OutputText:
    """A generation's output: its tokens and text, and the rules that end it. Both engines use it.

    - a token in ``stop_ids`` (EOS unless ``ignore_eos``, and ``stop_token_ids``) ends it with
      ``"stop"``; the token is kept in ``tokens`` but shows no text;
    - a stop string ends it with ``"stop"`` at the token that completes it, the text cut before it
      (not before ``min_tokens`` tokens exist);
    - ``max_tokens`` tokens end it with ``"length"``.

    Nothing after the ending token is kept, so a lookahead step that accepted a run across an EOS
    gives exactly what one-token-at-a-time decoding gives. A toy tokenizer whose ids are characters:

    >>> class Chars:
    ...     def decode(self, ids, skip_special_tokens=True):
    ...         return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))
    >>> out = OutputText(Chars(), stop=("\\n\\n",), stop_ids={0}, max_tokens=20)
    >>> out.extend([ord(c) for c in "hi\\n"])   # a lone newline may start the stop string
    Emitted(tokens=[104, 105, 10], text='hi', finish_reason=None)
    >>> out.extend([ord(c) for c in "\\nmore"])  # the stop string completes at the first token
    Emitted(tokens=[10], text='', finish_reason='stop')
    >>> OutputText(Chars(), stop_ids={0}, max_tokens=20).extend([ord("a"), 0, ord("b")])
    Emitted(tokens=[97, 0], text='a', finish_reason='stop')
    >>> OutputText(Chars(), max_tokens=2).extend([ord("a"), ord("b"), ord("c")])
    Emitted(tokens=[97, 98], text='ab', finish_reason='length')
    """

    def __init__(self, tokenizer: Any, *, stop: Sequence[str] = (), stop_ids: Iterable[int] = (),
                 min_tokens: int = 0, max_tokens: int, context: Sequence[int] = ()) -> None:
        self.tracker = TextTracker(tokenizer, stop, context=context)
        self.stop_ids = frozenset(int(t) for t in stop_ids)
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.finish_reason: Optional[str] = None

    def extend(self, run: Sequence[int]) -> Emitted:
        """Append a step's tokens in order, stopping at the first one that ends the generation."""
        if self.finish_reason is not None:
            raise RuntimeError("extend() after the generation ended")
        kept: list[int] = []
        texts: list[str] = []
        for tok in run:
            tok = int(tok)
            kept.append(tok)
            self.tokens.append(tok)
            if tok in self.stop_ids:
                texts.append(self.tracker.push(tok, hidden=True).text)
                self.finish_reason = "stop"
                break
            pushed = self.tracker.push(tok, check_stops=len(self.tokens) >= self.min_tokens)
            texts.append(pushed.text)
            if pushed.stopped:
                self.finish_reason = "stop"
                break
            if len(self.tokens) >= self.max_tokens:
                self.finish_reason = "length"
                break
        if self.finish_reason is not None:
            texts.append(self.tracker.finish())
        return Emitted(kept, "".join(texts), self.finish_reason)

    def end(self, finish_reason: str) -> str:
        """The generation was ended from outside (the engine's own stop or length): set the reason
        and return the text still held back."""
        if self.finish_reason is None:
            self.finish_reason = finish_reason
            return self.tracker.finish()
        return ""


def eos_token_ids(*sources: Any) -> tuple[int, ...]:
    """EOS ids from several sources in order of trust (each an id, a list of ids, or None), without
    repeats: the one EOS rule of both engines.

    >>> eos_token_ids([151645, 151643], 151643, None)
    (151645, 151643)
    """
    found: list[int] = []
    for value in sources:
        for tok in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(tok, int) and not isinstance(tok, bool) and tok not in found:
                found.append(tok)
    return tuple(found)

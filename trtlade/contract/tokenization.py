"""Prompt tokenization for the server: plain prompts, token-id prompts and chat messages.

Wraps a Hugging Face tokenizer (or anything with the same ``encode`` / ``decode`` /
``apply_chat_template`` methods, such as the test double in tests/fake_engine.py) and follows vLLM's
conventions so that the same prompt gives the same token ids on every OpenAI-compatible server:

- ``/v1/completions``: ``encode(prompt, add_special_tokens=True)`` (a Llama tokenizer adds BOS);
- ``/v1/chat/completions``: the model's chat template rendered to text with
  ``add_generation_prompt=True``, then encoded with ``add_special_tokens=False`` (the template
  already carries BOS where the model wants one).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from trtlade.errors import TrtladeError

__all__ = ["PromptTokenizer", "ChatTemplateError", "load_hf_tokenizer"]


class ChatTemplateError(TrtladeError, ValueError):
    """The tokenizer has no chat template, or the template rejected the messages."""


@dataclass
class PromptTokenizer:
    """Turns OpenAI prompts into token ids. ``vocab_size`` bounds token-id prompts."""

    tokenizer: Any
    #: the text of recent contexts of :meth:`piece` (a token's alternatives share their position's)
    _heads: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def vocab_size(self) -> int:
        return int(len(self.tokenizer))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=True))

    def render_chat(self, messages: Sequence[dict[str, Any]]) -> str:
        """The chat template applied to ``messages`` (as text), ending with the assistant prompt."""
        if not self.has_chat_template:
            raise ChatTemplateError("this model's tokenizer has no chat template; use /v1/completions "
                                    "with a plain prompt instead")
        try:
            return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                      add_generation_prompt=True)
        except Exception as exc:  # jinja2 TemplateError and friends: the template refused the input
            raise ChatTemplateError(f"the chat template rejected the messages: {exc}") from exc

    def encode_chat(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        return self.encode_text(self.render_chat(messages))

    def encode_text(self, rendered: str) -> list[int]:
        """The ids of a rendered chat (:meth:`render_chat`): its special tokens are in the text, none added."""
        return list(self.tokenizer.encode(rendered, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """The text of ``ids``; ``skip_special=False`` keeps special tokens' text (a prompt echoed as given)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)

    def text_pieces(self, text: str, ids: Sequence[int]) -> list[str] | None:
        """Each of ``ids`` (``text`` encoded by :meth:`encode_prompt`) as the part of ``text`` it stands for, from
        the tokenizer's character offsets; the parts join to ``text`` (a gap goes with the token after it, the
        rest with the last; a character split over tokens, which all share its span, goes with the last of them, the
        token that ends it, as :meth:`id_pieces` gives it). A token the tokenizer added (a Llama tokenizer's BOS)
        stands for nothing. None where the tokenizer gives no offsets (a slow tokenizer) or they are not for these
        ids.

        A SentencePiece tokenizer reads ``<s>Hi`` as ``<s>`` then ``▁Hi``, which decodes as " Hi": the offsets
        keep the client's text. Here, a tokenizer that adds id 1 before one token per character:

        >>> class Fast:
        ...     def encode(self, text, add_special_tokens=True):
        ...         return [1] + [ord(c) for c in text]
        ...     def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        ...         spans = [(0, 0)] + [(i, i + 1) for i in range(len(text))]
        ...         return {"input_ids": self.encode(text), "offset_mapping": spans}
        >>> PromptTokenizer(Fast()).text_pieces("Hi", [1, 72, 105])
        ['', 'H', 'i']
        """
        try:
            encoded = self.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
            spans, same = encoded["offset_mapping"], list(encoded["input_ids"]) == list(ids)
        except (TypeError, KeyError, NotImplementedError, ValueError):  # no offsets from this tokenizer
            return None
        if not same or len(spans) != len(ids):
            return None
        pieces, cursor = [], 0
        for i, (start, end) in enumerate(spans):
            shared = i + 1 < len(spans) and tuple(spans[i + 1]) == (start, end)  # a byte of a character, not its last
            end = max(cursor, min(int(end), len(text))) if end > start and not shared else cursor  # added: nothing
            pieces.append(text[cursor:end])
            cursor = end
        if pieces:
            pieces[-1] += text[cursor:]
        return pieces

    def id_pieces(self, ids: Sequence[int], window: int = 8) -> list[str]:
        """Each of ``ids`` as the text it completes in ``decode(ids, skip_special=False)``, the parts joining to
        it: decoded after the ``window`` ids before it, a token that ends inside a character (an emoji's first bytes)
        gets nothing and the one that completes it the whole character; what a text ending inside one leaves goes
        with its last token. (:meth:`piece` gives each such token U+FFFD instead, the way a stream shows it.)

        >>> class Bytes:  # one token per UTF-8 byte
        ...     def decode(self, ids, skip_special_tokens=True):
        ...         return bytes(ids).decode("utf-8", errors="replace")
        >>> PromptTokenizer(Bytes()).id_pieces(list("a😀".encode()))
        ['a', '', '', '', '😀']
        """
        ids = [int(t) for t in ids]
        pieces: list[str] = []
        pending = 0  # the first id whose text is not given out yet
        for i in range(len(ids)):
            start = max(0, pending - window)
            head, both = self.decode(ids[start:pending], False), self.decode(ids[start:i + 1], False)
            if both.endswith("\ufffd") and i + 1 < len(ids) or not both.startswith(head):
                pieces.append("")  # inside a character: its text goes with the token that ends it
                continue
            pieces.append(both[len(head):])
            pending = i + 1
        whole, joined = self.decode(ids, False), "".join(pieces)
        if joined != whole:  # a tokenizer whose text is not the sum of its parts: each token where it stands
            return [self.piece(t, ids[max(0, i - window):i], skip_special=False) for i, t in enumerate(ids)]
        return pieces

    def added(self, text: str, ids: Sequence[int]) -> tuple[int, int]:
        """How many of ``ids`` (``text`` encoded by :meth:`encode_prompt`) the tokenizer added before and after the
        text's own (a Llama tokenizer's BOS): ``(0, 0)`` where none, or where the text's own are not a run of them.

        >>> class Bos:  # adds id 1 before the text's own ids
        ...     def encode(self, text, add_special_tokens=True):
        ...         return ([1] if add_special_tokens else []) + [ord(c) for c in text]
        >>> PromptTokenizer(Bos()).added("hi", [1, 104, 105])
        (1, 0)
        """
        own, ids = list(self.tokenizer.encode(text, add_special_tokens=False)), list(ids)
        extra = len(ids) - len(own)
        for lead in range(extra + 1 if extra > 0 else 0):
            if ids[lead:lead + len(own)] == own:
                return lead, extra - lead
        return 0, 0

    def piece(self, token: int, before: Sequence[int] = (), skip_special: bool = True) -> str:
        """A token's text where it stands: what decoding it after ``before`` (the ids before it, as many as the
        output's own decoding reads: :data:`~trtlade.contract.text.PROMPT_CONTEXT_TOKENS`; none at the text's start)
        adds to decoding ``before`` alone. A SentencePiece token (Llama 2, Mistral, Gemma) decoded alone loses its
        word's space (``▁brown`` is "brown"), which it has after other text, a special token skipped; a byte-level
        BPE token's text is its own; where ``before`` ends inside a character, the token's own text (U+FFFD).
        ``skip_special=False``: special tokens keep their text, the token's and those before it (an echoed prompt).

        >>> class Sp:  # a Metaspace tokenizer: a word's first token starts with ▁ and decodes alone without it
        ...     pieces = {1: "▁The", 2: "▁brown", 3: ""}   # 3: a special token, skipped
        ...     def decode(self, ids, skip_special_tokens=True):
        ...         return "".join(self.pieces[i] for i in ids).replace("▁", " ").lstrip(" ")
        >>> tok = PromptTokenizer(Sp())
        >>> tok.piece(2), tok.piece(2, before=(1,)), tok.piece(2, before=(1, 3)), tok.piece(2, before=(3,))
        ('brown', ' brown', ' brown', 'brown')
        """
        alone = self.decode([token], skip_special)
        if not before:
            return alone
        key = (tuple(before), skip_special)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= 256:
                self._heads.clear()
            head = self._heads[key] = self.decode(key[0], skip_special)
        both = self.decode([*key[0], token], skip_special)
        return both[len(head):] if both.startswith(head) and not head.endswith("\ufffd") else alone

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (OpenAI's logprobs ``bytes``). Its text's UTF-8, except where the token
        is part of a character (an emoji's first bytes decode to U+FFFD alone): then its own bytes, from a
        byte-level BPE piece (GPT-2's printable stand-ins for bytes) or a ``<0xNN>`` byte-fallback piece.

        >>> class Bpe:  # 'ðŁ' and 'ĺ' are byte-level stand-ins for 0xF0 0x9F and 0x98 (part of an emoji)
        ...     pieces = {1: "ðŁ", 2: "ĺ", 3: "<0xE2>", 4: "Ġhi"}
        ...     def decode(self, ids, skip_special_tokens=True):
        ...         return " hi" if ids == [4] else "\ufffd"
        ...     def convert_ids_to_tokens(self, token):
        ...         return self.pieces[token]
        >>> [PromptTokenizer(Bpe()).token_bytes(t) for t in (1, 2, 3, 4)]
        [b'\xf0\x9f', b'\x98', b'\xe2', b' hi']
        """
        text = self.decode([token])
        if "\ufffd" not in text:
            return text.encode("utf-8")
        convert = getattr(self.tokenizer, "convert_ids_to_tokens", None)
        piece = convert(token) if convert is not None else None
        if isinstance(piece, str):
            if (byte := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)) is not None:
                return bytes([int(byte.group(1), 16)])
            table = _byte_level_table()
            if piece and all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        return text.encode("utf-8")


@functools.lru_cache(maxsize=1)
def _byte_level_table() -> dict[str, int]:
    """Byte-level BPE's alphabet read back: printable Latin-1 bytes stand for themselves, the other 68 bytes for
    the characters from U+0100 on, in byte order (the GPT-2 scheme Llama 3, Qwen and SmolLM2 tokenizers use)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table.values():
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def load_hf_tokenizer(folder: Path) -> Any:
    """``AutoTokenizer.from_pretrained(folder, local_files_only=True)`` (never a hub download)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)

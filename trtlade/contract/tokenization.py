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

from dataclasses import dataclass
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
        return list(self.tokenizer.encode(self.render_chat(messages), add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def load_hf_tokenizer(folder: Path) -> Any:
    """``AutoTokenizer.from_pretrained(folder, local_files_only=True)`` (never a hub download)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)

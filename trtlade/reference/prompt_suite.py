"""The bundled prompt suite (trtlade/data/prompts.json) and user prompt files in the same format.

A suite file is JSON: ``{"name": ..., "prompts": [{"id", "category", "messages" | "text"}, ...]}``.
``messages`` prompts are rendered with the model's chat template (``add_generation_prompt=True``)
and encoded without extra special tokens, as trtlade's server does; ``text`` prompts are encoded as
plain text (``add_special_tokens=True``). ``prompt_ids`` (a list of ints) may be given instead.

    >>> suite = load_suite("suite")
    >>> [p.id for p in suite.prompts][:3]
    ['code-prime', 'code-stack', 'chat-weekend']
    >>> sorted({p.category for p in suite.prompts})
    ['chat', 'code', 'edge', 'extraction', 'lists', 'math', 'repetition', 'summarisation']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trtlade.errors import TrtladeError
from trtlade.files import UserFileError, read_user_text

__all__ = ["Prompt", "PromptSuite", "PromptSuiteError", "load_suite", "BUNDLED_SUITES"]

#: Bundled suites: name -> file in trtlade/data.
BUNDLED_SUITES = {"suite": "prompts.json", "long-context": "prompts_long.json"}
DATA_DIR = Path(__file__).resolve().parents[1] / "data"


class PromptSuiteError(TrtladeError, ValueError):
    """A prompt suite file that cannot be read (the message names the file and the entry)."""


@dataclass(frozen=True)
class Prompt:
    """One prompt: chat ``messages``, plain ``text`` or ready ``prompt_ids``."""

    id: str
    category: str
    messages: Optional[tuple[dict[str, str], ...]] = None
    text: Optional[str] = None
    prompt_ids: Optional[tuple[int, ...]] = None

    def encode(self, tokenizer: Any) -> list[int]:
        """Token ids for ``tokenizer`` (chat template for messages, plain encoding for text)."""
        if self.prompt_ids is not None:
            return list(self.prompt_ids)
        if self.messages is not None:
            if not getattr(tokenizer, "chat_template", None):
                rendered = "\n".join(m["content"] for m in self.messages)
                return list(tokenizer.encode(rendered, add_special_tokens=True))
            rendered = tokenizer.apply_chat_template(list(self.messages), tokenize=False, add_generation_prompt=True)
            return list(tokenizer.encode(rendered, add_special_tokens=False))
        return list(tokenizer.encode(self.text, add_special_tokens=True))

    def plain_text(self) -> str:
        """The prompt as plain text (message contents joined), for models without a chat template."""
        if self.messages is not None:
            return "\n".join(m["content"] for m in self.messages)
        return self.text or ""


@dataclass(frozen=True)
class PromptSuite:
    name: str
    source: str
    prompts: tuple[Prompt, ...] = field(default_factory=tuple)


def load_suite(name_or_path: str | Path = "suite") -> PromptSuite:
    """A bundled suite by name (``"suite"``) or a JSON file in the same format."""
    key = str(name_or_path)
    if key in BUNDLED_SUITES:
        source = f"trtlade/data/{BUNDLED_SUITES[key]}"
        text = (DATA_DIR / BUNDLED_SUITES[key]).read_text(encoding="utf-8")
    else:
        path = Path(key).expanduser()
        if not path.is_file():
            raise PromptSuiteError(f"prompt suite {key!r} is neither a bundled suite "
                                   f"({', '.join(BUNDLED_SUITES)}) nor an existing file")
        try:
            source, text = str(path), read_user_text(path)
        except UserFileError as exc:
            raise PromptSuiteError(f"{exc.where}: {exc.message}", exc.hint) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptSuiteError(f"{source}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    return _parse(data, source)


def _parse(data: Any, source: str) -> PromptSuite:
    if isinstance(data, list):
        data = {"prompts": data}
    if not isinstance(data, dict) or not isinstance(data.get("prompts"), list) or not data["prompts"]:
        raise PromptSuiteError(f"{source}: expected an object with a non-empty list 'prompts'")
    prompts = []
    seen: set[str] = set()
    for index, entry in enumerate(data["prompts"]):
        where = f"{source}: prompts[{index}]"
        if not isinstance(entry, dict):
            raise PromptSuiteError(f"{where}: expected an object with id and messages, text or prompt_ids")
        pid = str(entry.get("id", f"prompt-{index}"))
        if pid in seen:
            raise PromptSuiteError(f"{where}: duplicate id {pid!r}")
        seen.add(pid)
        given = [k for k in ("messages", "text", "prompt_ids") if entry.get(k) is not None]
        if len(given) != 1:
            raise PromptSuiteError(f"{where} ({pid}): give exactly one of messages, text, prompt_ids "
                                   f"(got {', '.join(given) or 'none'})")
        messages = entry.get("messages")
        if messages is not None:
            if not isinstance(messages, list) or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in messages) or not messages:
                raise PromptSuiteError(f"{where} ({pid}): messages must be a list of {{role, content}} strings")
            messages = tuple({"role": m["role"], "content": m["content"]} for m in messages)
        ids = entry.get("prompt_ids")
        if ids is not None:
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
                raise PromptSuiteError(f"{where} ({pid}): prompt_ids must be a non-empty list of token ids")
            ids = tuple(ids)
        text = entry.get("text")
        if text is not None and (not isinstance(text, str) or not text):
            raise PromptSuiteError(f"{where} ({pid}): text must be a non-empty string")
        prompts.append(Prompt(id=pid, category=str(entry.get("category", "other")), messages=messages,
                              text=text, prompt_ids=ids))
    return PromptSuite(name=str(data.get("name", Path(source).stem)), source=source, prompts=tuple(prompts))

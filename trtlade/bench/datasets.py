"""Prompt sets for the bench: the bundled ones (short, long, random) and user files.

* ``short``: one short fixed question for every request; ``long``: one long fixed summarisation
  prompt; ``random``: each request draws one of 16 short questions with ``random.Random(seed)``.
  These mirror the user's three prompt types (short fixed, long fixed, random) and live in
  ``trtlade/data/datasets/<name>.json``. ``mix``: 20 prompts of five kinds. ``multiturn``: four
  conversations of three turns under one shared system prompt, each turn a chat message list that
  resends the system prompt and the history (what exact prefix reuse serves).
* a ``.jsonl`` file: one object per line, ``{"prompt": "..."}`` or ``{"messages": [...]}``; blank
  lines are skipped. Prompts are used in file order and repeated from the start when more are needed.
* a ``.json`` file in ShareGPT form: a list of ``{"conversations": [{"from": "human", "value": ...},
  ...]}``; the first human turn of each conversation is the prompt (file order, repeated as above).

Every mode and every level gets the same prompt sequence, so A/B runs send identical prompts.
"""

from __future__ import annotations

from trtlade.errors import RepeatedKeyError, TrtladeError, did_you_mean, keys_once
from trtlade.files import UserFileError, read_user_text

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

__all__ = ["BUNDLED", "DatasetError", "Dataset", "Prompt", "load_dataset"]

_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "datasets"
BUNDLED: tuple[str, ...] = ("mix", "short", "long", "random", "multiturn")

Sampling = Literal["fixed", "random", "in_order"]


class DatasetError(TrtladeError, ValueError):
    """A dataset that cannot be used; ``where`` is ``file:line`` (or the file) when known."""



@dataclass(frozen=True)
class Prompt:
    """One prompt: plain text (sent as a user message to chat) or a chat message list."""

    index: int
    text: Optional[str] = None
    messages: Optional[tuple[dict[str, Any], ...]] = None
    where: str = ""
    #: the kind of request (``code``, ``chat`` ...: the bundled ``mix``'s, or a JSONL line's ``category``)
    category: Optional[str] = None

    def chat_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text}]


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str
    sampling: Sampling
    prompts: tuple[Prompt, ...]
    skipped: int = 0  #: ShareGPT conversations without a human turn (they have no prompt)

    def sample(self, count: int, seed: int) -> list[Prompt]:
        """``count`` prompts: fixed/in-order sets cycle in order; ``random`` draws with ``seed``.

        >>> ds = load_dataset("random")
        >>> [p.index for p in ds.sample(5, seed=0)] == [p.index for p in ds.sample(5, seed=0)]
        True
        """
        if count <= 0:
            return []
        if self.sampling == "random":
            rng = random.Random(seed)
            return [rng.choice(self.prompts) for _ in range(count)]
        return [self.prompts[i % len(self.prompts)] for i in range(count)]

    @property
    def has_messages(self) -> bool:
        return any(p.messages is not None for p in self.prompts)


def load_dataset(spec: str) -> Dataset:
    """A bundled set by name (mix, short, long, random, multiturn) or a JSONL / ShareGPT JSON file by path."""
    if spec in BUNDLED:
        return _load_bundled(spec)
    if not spec.strip():
        raise DatasetError("the dataset is empty text: neither a bundled set nor a file",
                           hint=f"use one of {', '.join(BUNDLED)}, or a path to a .jsonl or ShareGPT .json file")
    path = Path(spec).expanduser()
    if not path.exists():
        raise DatasetError(f"no dataset {spec!r}: not a bundled set and no such file",
                           hint=f"use one of {', '.join(BUNDLED)}, or a path to a .jsonl or ShareGPT .json file")
    if path.is_dir():
        raise DatasetError(f"dataset {spec!r} is a directory", where=str(path),
                           hint="give a .jsonl or ShareGPT .json file")
    try:
        text = read_user_text(path, pipe=True)  # read once: `--dataset <(zcat d.jsonl.gz)` works
    except UserFileError as exc:
        raise DatasetError(f"dataset {spec!r}: {exc.message}", hint=exc.hint, where=exc.where) from None
    skipped = 0
    if path.suffix.lower() == ".json":
        prompts, skipped = _parse_sharegpt(text, str(path))
    else:
        prompts = _parse_jsonl(text, str(path))
    if not prompts and skipped:
        raise DatasetError(f"none of its {skipped} conversation(s) has a human turn to send", where=str(path),
                           hint='ShareGPT: each conversation\'s first {"from": "human", "value": "..."} is the prompt')
    if not prompts:
        raise DatasetError("the dataset has no prompts", where=str(path),
                           hint='JSONL: one {"prompt": "..."} or {"messages": [...]} per line')
    return Dataset(name=path.name, source=str(path.resolve()), sampling="in_order", prompts=tuple(prompts),
                   skipped=skipped)


def _load_bundled(name: str) -> Dataset:
    path = _DATA_DIR / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if "conversations" in data:
        return Dataset(name=name, source=f"bundled:{name}", sampling=data["sampling"],
                       prompts=tuple(_turns(name, data["system"], data["conversations"])))
    categories = data.get("categories") or [None] * len(data["prompts"])
    prompts = tuple(Prompt(i, text=t, where=f"{name}[{i}]", category=c)
                    for i, (t, c) in enumerate(zip(data["prompts"], categories)))
    return Dataset(name=name, source=f"bundled:{name}", sampling=data["sampling"], prompts=prompts)


def _turns(name: str, system: str, conversations: list[list[dict[str, Any]]]) -> list[Prompt]:
    """Every turn of every conversation as a prompt: the system prompt, the turns before it (user and
    assistant), then its user message; conversations one after another, their turns in order.

    >>> [len(p.messages) for p in _turns("x", "S", [[{"user": "a", "assistant": "b"}, {"user": "c"}]])]
    [2, 4]
    """
    prompts: list[Prompt] = []
    for c, turns in enumerate(conversations):
        history: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for t, turn in enumerate(turns):
            history.append({"role": "user", "content": turn["user"]})
            prompts.append(Prompt(len(prompts), messages=tuple(dict(m) for m in history), where=f"{name}[{c}][{t}]"))
            if turn.get("assistant"):
                history.append({"role": "assistant", "content": turn["assistant"]})
    return prompts


def _parse_jsonl(text: str, source: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(line, object_pairs_hook=keys_once)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"not valid JSON ({exc.msg} at column {exc.colno})", where=where,
                               hint='each line is one JSON object, e.g. {"prompt": "Hello"}') from None
        except RepeatedKeyError as exc:
            raise DatasetError(f"the key {exc.key!r} is given twice (JSON keeps only the last)", where=where,
                               hint="give each key once") from None
        prompts.append(_prompt_from_object(obj, len(prompts), where))
    return prompts


def _prompt_from_object(obj: Any, index: int, where: str) -> Prompt:
    hint = ('use {"prompt": "text"} or {"messages": [{"role": "user", "content": "text"}]}, with an optional '
            '"category": "code"')
    if not isinstance(obj, dict):
        raise DatasetError(f"expected a JSON object, got {type(obj).__name__}", where=where, hint=hint)
    _check_keys(obj, where, hint)
    category = obj.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise DatasetError("'category' must be a non-empty string", where=where, hint=hint)
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise DatasetError("'prompt' must be a non-empty string", where=where, hint=hint)
        return Prompt(index, text=obj["prompt"], where=where, category=category)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise DatasetError("'messages' must be a non-empty list of {role, content} objects",
                               where=where, hint=hint)
        _check_messages(msgs, where, hint)
        return Prompt(index, messages=tuple(msgs), where=where, category=category)
    keys = ", ".join(sorted(map(str, obj))) or "none"
    raise DatasetError(f"no 'prompt' or 'messages' key (keys: {keys})", where=where, hint=hint)


#: The keys a JSONL line may hold, and a chat message's (OpenAI's roles and fields a prompt can carry)
LINE_KEYS = ("prompt", "messages", "category")
MESSAGE_KEYS = ("role", "content", "name")
REQUIRED_MESSAGE_KEYS = ("role", "content")
ROLES = ("system", "developer", "user", "assistant", "tool")


def _check_keys(obj: dict, where: str, hint: str) -> None:
    """A key the bench would not read is a mistake to say, not a field to drop: ``categroy`` is not ``category``."""
    for key in obj:
        if key not in LINE_KEYS:
            raise DatasetError(f"unknown key {key!r}", where=where, hint=did_you_mean(str(key), LINE_KEYS) + hint)
    if "prompt" in obj and "messages" in obj:
        raise DatasetError("both 'prompt' and 'messages': a line is one or the other", where=where, hint=hint)


def _check_messages(msgs: list, where: str, hint: str) -> None:
    for i, message in enumerate(msgs):
        if not isinstance(message, dict):
            raise DatasetError(f"message {i}: {_shown(message)} is not a {{role, content}} object", where=where,
                               hint=hint)
        extra = sorted(set(map(str, message)) - set(MESSAGE_KEYS))
        if extra:
            raise DatasetError(f"message {i}: unknown key {extra[0]!r} (a message holds {', '.join(MESSAGE_KEYS)})",
                               where=where, hint=did_you_mean(extra[0], MESSAGE_KEYS) + hint)
        missing = next((key for key in REQUIRED_MESSAGE_KEYS if key not in message), None)
        if missing:
            raise DatasetError(f"message {i}: no {missing!r} (each message holds a role and a content)",
                               where=where, hint=hint)
        if message["role"] not in ROLES:
            raise DatasetError(f"message {i}: role {message['role']!r} is not one of {', '.join(ROLES)}",
                               where=where, hint=hint)
        if not _is_text(message["content"]):
            raise DatasetError(f"message {i}: content {_shown(message['content'])} is not text (a string, or a list "
                               "of {\"type\": \"text\", \"text\": ...} parts as OpenAI's API takes)",
                               where=where, hint=hint)
        if "name" in message and not isinstance(message["name"], str):
            raise DatasetError(f"message {i}: name must be a string", where=where, hint=hint)



def _is_text(content: Any) -> bool:
    """A message's content as OpenAI's API takes text: a string, or a non-empty list of text parts."""
    if isinstance(content, str):
        return True
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and set(p) == {"type", "text"} and p["type"] == "text" and isinstance(p["text"], str)
        for p in content)


def _shown(value: Any) -> str:
    """A JSON value as it stands in the line, shortened whole (not cut inside a string)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else f"({type(value).__name__}, {len(text)} characters of JSON)"


def _parse_sharegpt(text: str, source: str) -> tuple[list[Prompt], int]:
    hint = 'ShareGPT form: [{"conversations": [{"from": "human", "value": "..."}, ...]}, ...]'
    try:
        data = json.loads(text, object_pairs_hook=keys_once)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON ({exc.msg} at line {exc.lineno})", where=source, hint=hint) from None
    except RepeatedKeyError as exc:
        raise DatasetError(f"the key {exc.key!r} is given twice in one object (JSON keeps only the last)",
                           where=source, hint="give each key once") from None
    if not isinstance(data, list):
        raise DatasetError("a ShareGPT file is a JSON list of conversations", where=source, hint=hint)
    prompts: list[Prompt] = []
    skipped = 0
    for i, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"entry {i} has no 'conversations' list", where=f"{source}[{i}]", hint=hint)
        first = next((t.get("value") for t in turns
                      if isinstance(t, dict) and t.get("from") in ("human", "user") and t.get("value")), None)
        if first is None:
            skipped += 1  # a conversation without a human turn has no prompt to send (counted, shown)
            continue
        if not isinstance(first, str):
            raise DatasetError(f"entry {i}: the first human turn's value is {type(first).__name__}, not text "
                               f"(it would be sent as {str(first)[:30]!r})", where=f"{source}[{i}]", hint=hint)
        prompts.append(Prompt(len(prompts), text=first, where=f"{source}[{i}]"))
    return prompts, skipped

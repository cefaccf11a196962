"""The API keys file that ``trtlade serve`` reads (``serve.api_keys_file``, ``--api-keys-file`` or
``$TRTLADE_API_KEYS_FILE``), read and checked: by ``serve`` at start, and by ``validate-config`` where the file is
on the machine that checks the config. Two formats:

* text, one key per line: ``NAME KEY`` and optionally ``admin``; blank lines and ``#`` comments skipped (a
  comment starts a line or follows a space; a ``#`` inside a key is part of the key);
* YAML (``.yml`` / ``.yaml``): ``keys: [{name: alice, key: ..., admin: true}, ...]``.

An error names the file and line, never the text on it (a name as long as a key is not shown either, in case the
columns were swapped).

    >>> [(row.name, row.admin) for row in parse_keys("alice 0123456789abcdef0123 admin\\nbob fedcba9876543210fedc\\n",
    ...                                             "keys.txt")]
    [('alice', True), ('bob', False)]
"""

from __future__ import annotations

import hmac
import re
import stat
from pathlib import Path
from typing import Any, NamedTuple

from trtlade.errors import TrtladeError

__all__ = ["KeysFileError", "KeyRow", "KEYS_FILE_ENV", "MIN_KEY_LENGTH", "DEFAULT_IDENTITY", "check_key_length",
           "parse_keys", "read_keys"]

KEYS_FILE_ENV = "TRTLADE_API_KEYS_FILE"
#: shorter keys are refused: a key is a password that every request sends
MIN_KEY_LENGTH = 16
#: the identity of the single ``--api-key``
DEFAULT_IDENTITY = "default"
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_HINT = "one key per line: NAME KEY [admin] (e.g. `alice $(openssl rand -hex 24) admin`), or YAML keys: [{name, key}]"


class KeysFileError(TrtladeError):
    """A keys file that cannot be used: message, hint, where (file:line)."""


class KeyRow(NamedTuple):
    """One key of the file: where it is (``file:line``), its identity's name, the key, whether it is admin."""

    where: str
    name: str
    key: str
    admin: bool


def read_keys(path: Path) -> tuple[list[KeyRow], list[str]]:
    """The keys of ``path`` and the warnings about the file (its permissions); :class:`KeysFileError` if unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeysFileError(f"cannot read the keys file: {exc.strerror or exc}", "check the path and that this user "
                            "may read it", where=str(path)) from None
    except UnicodeDecodeError as exc:
        raise KeysFileError(f"the keys file is not UTF-8 text (byte {exc.start})", _HINT, where=str(path)) from None
    warnings = []
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.append(f"the keys file {path} can be read by group or others (mode {stat.filemode(mode)}): "
                        f"chmod 600 {path}")
    return parse_keys(text, str(path), yaml_format=path.suffix.lower() in (".yml", ".yaml")), warnings


def parse_keys(text: str, source: str, *, yaml_format: bool = False) -> list[KeyRow]:
    """Every key of a keys file's ``text``, each checked: a plain name, :data:`MIN_KEY_LENGTH` characters, no name
    or key twice."""
    rows = _yaml_rows(text, source) if yaml_format else _text_rows(text, source)
    if not rows:
        raise KeysFileError(f"{source} holds no key", _HINT, where=source)
    out: list[KeyRow] = []
    for where, name, key, admin in rows:
        shown = _shown(name)
        if not _NAME.match(name):
            raise KeysFileError(f"identity name {shown} is not a plain name", "letters, digits and _.@- only, "
                                "up to 64 characters (names appear in logs; keys never do)", where=where)
        if len(key) < MIN_KEY_LENGTH:
            raise KeysFileError(f"the key of {shown} is {len(key)} characters; at least {MIN_KEY_LENGTH} are "
                                "needed", "make one with: openssl rand -hex 24 (NAME first, then KEY)",
                                where=where)
        if name in (row.name for row in out):
            raise KeysFileError(f"identity {shown} is named twice", "give each key its own name", where=where)
        if any(hmac.compare_digest(key.encode(), row.key.encode()) for row in out):
            raise KeysFileError(f"the key of {shown} is also another identity's key", "give each identity its "
                                "own key (a shared key would make them one identity)", where=where)
        out.append(KeyRow(where, name, key, admin))
    return out


def check_key_length(key: str, source: str) -> None:
    """Every source of a key needs :data:`MIN_KEY_LENGTH` characters (the error never shows the key).

    >>> check_key_length("0123456789abcdef", "--api-key")
    >>> try:
    ...     check_key_length("short", "--api-key")
    ... except KeysFileError as exc:
    ...     print(exc.message)
    the key is 5 characters; at least 16 are needed
    """
    if len(key) < MIN_KEY_LENGTH:
        raise KeysFileError(f"the key is {len(key)} characters; at least {MIN_KEY_LENGTH} are needed",
                            "make one with: openssl rand -hex 24", where=source)


def _shown(name: str) -> str:
    """A name as an error shows it: not at all when it is as long as a key (the columns may be swapped)."""
    return repr(name) if len(name) < MIN_KEY_LENGTH else "on this line (not shown: as long as a key)"


#: a comment: ``#`` at the start of a line or after whitespace, to its end (a ``#`` inside a key is the key's)
_COMMENT = re.compile(r"(^|\s)#.*$")


def _text_rows(text: str, source: str) -> list[tuple[str, str, str, bool]]:
    """``(where, name, key, admin)`` of each line.

    >>> _text_rows("# team keys\\nalice abc#def0123456789   admin  # on-call\\n", "k.txt")
    [('k.txt:2', 'alice', 'abc#def0123456789', True)]
    """
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        body = _COMMENT.sub("", line).strip()
        if not body:
            continue
        parts = body.split()
        where = f"{source}:{number}"
        if len(parts) not in (2, 3):
            raise KeysFileError(f"line {number} is not `NAME KEY [admin]` ({len(parts)} fields)", _HINT,
                                where=where)
        if len(parts) == 3 and parts[2].lower() != "admin":
            raise KeysFileError(f"line {number} is not `NAME KEY [admin]`: its third field is not `admin` (the only "
                                "word allowed there; a name holds no spaces)", _HINT, where=where)  # never echo it
        rows.append((where, parts[0], parts[1], len(parts) == 3))
    return rows


def _yaml_rows(text: str, source: str) -> list[tuple[str, str, str, bool]]:
    import yaml

    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # its text quotes the line, which may hold a key: only where and what
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise KeysFileError(f"{source} is not valid YAML ({problem}, line {mark.line + 1 if mark else '?'})",
                            _HINT, where=where) from None
    items = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise KeysFileError(f"{source} has no `keys:` list", _HINT, where=source)
    rows = []
    for index, item in enumerate(items):
        where = f"{source}: keys[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("key"), str):
            raise KeysFileError(f"keys[{index}] needs a string `name` and a string `key`", _HINT, where=where)
        extra = set(item) - {"name", "key", "admin"}
        if extra:
            raise KeysFileError(f"keys[{index}]: unknown field {_shown(str(sorted(map(str, extra))[0]))}",
                                "fields: name, key, admin", where=where)
        admin = item.get("admin", False)
        if not isinstance(admin, bool):
            raise KeysFileError(f"keys[{index}].admin must be true or false, got {admin!r}", _HINT, where=where)
        rows.append((where, item["name"], item["key"], admin))
    return rows



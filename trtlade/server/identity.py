"""Who is asking: API keys as identities, for authentication and for scoping the prefix cache.

A server has no keys (anyone may call it), one key (``--api-key`` / ``serve.api_key_env``: the identity
``default``), or a keys file (``serve.api_keys_file``, ``--api-keys-file`` or ``$TRTLADE_API_KEYS_FILE``),
one identity per key. Two formats:

* text, one key per line: ``NAME KEY`` and optionally ``admin``; blank lines and ``#`` comments skipped (a
  comment starts a line or follows a space; a ``#`` inside a key is part of the key)::

      alice  3c1f0d9e8b7a6f5e4d3c2b1a09f8e7d6   admin
      bob    9a8b7c6d5e4f30211f2e3d4c5b6a7988

* YAML (``.yml`` / ``.yaml``): ``keys: [{name: alice, key: ..., admin: true}, ...]``.

Keys are compared in constant time, each request against every key (so the time does not say which key
came closest), never logged and never echoed (an error names the file and line, never the text on it; a
name as long as a key is not shown either, in case the columns were swapped); a 401 says nothing about
which keys exist. Every source of a key (a keys file, ``--api-key``, ``$TRTLADE_API_KEY``) needs
:data:`MIN_KEY_LENGTH` characters. A keys file that group or others may read is a warning at start.

    >>> ring = KeyRing.parse("alice 0123456789abcdef0123 admin\\nbob fedcba9876543210fedc\\n", "keys.txt")
    >>> ring.authenticate("fedcba9876543210fedc"), ring.authenticate("nope")
    (Identity(name='bob', admin=False), None)
    >>> ring.names, ring.several
    (('alice', 'bob'), True)
"""

from __future__ import annotations

import hmac
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from trtlade.errors import TrtladeError

__all__ = ["Identity", "KeyRing", "KeysFileError", "KEYS_FILE_ENV", "MIN_KEY_LENGTH", "DEFAULT_IDENTITY",
           "check_key_length"]

KEYS_FILE_ENV = "TRTLADE_API_KEYS_FILE"
#: shorter keys are refused: a key is a password that every request sends
MIN_KEY_LENGTH = 16
#: the identity of the single ``--api-key``
DEFAULT_IDENTITY = "default"
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_HINT = "one key per line: NAME KEY [admin] (e.g. `alice $(openssl rand -hex 24) admin`), or YAML keys: [{name, key}]"


class KeysFileError(TrtladeError):
    """A keys file that cannot be used: message, hint, where (file:line)."""


@dataclass(frozen=True)
class Identity:
    """A caller: the name of its key, and whether it may use the ``/admin`` routes."""

    name: str
    admin: bool = False


@dataclass(frozen=True)
class KeyRing:
    """The server's keys, each an :class:`Identity`."""

    entries: tuple[tuple[Identity, bytes], ...]
    source: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(identity.name for identity, _ in self.entries)

    @property
    def several(self) -> bool:
        return len(self.entries) > 1

    def authenticate(self, token: str) -> Optional[Identity]:
        """The identity whose key ``token`` is, comparing against every key in constant time; None if none."""
        given = token.encode()
        found: Optional[Identity] = None
        for identity, key in self.entries:
            if hmac.compare_digest(given, key):
                found = identity
        return found

    # ------------------------------------------------------------------------------ building
    @classmethod
    def single(cls, key: str) -> "KeyRing":
        """The one ``--api-key``: the identity ``default``, admin."""
        return cls(((Identity(DEFAULT_IDENTITY, admin=True), key.encode()),), "--api-key")

    def with_key(self, key: Optional[str]) -> "KeyRing":
        """This ring plus the single ``--api-key`` (as ``default``), when one is given too."""
        if not key:
            return self
        if DEFAULT_IDENTITY in self.names:
            raise KeysFileError(f"{self.source} names an identity `{DEFAULT_IDENTITY}`, which --api-key also is",
                                "rename it in the keys file, or drop --api-key (TRTLADE_API_KEY)", where=self.source)
        if self.authenticate(key) is not None:
            raise KeysFileError(f"--api-key is also a key of {self.source}", "give each identity its own key",
                                where=self.source)
        return KeyRing(self.entries + KeyRing.single(key).entries, self.source)

    @classmethod
    def load(cls, path: Path) -> tuple["KeyRing", list[str]]:
        """The keys of ``path`` and the warnings about the file (its permissions)."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KeysFileError(f"cannot read the keys file {path}: {exc}", _HINT, where=str(path)) from None
        warnings = []
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(f"the keys file {path} can be read by group or others (mode {stat.filemode(mode)}): "
                            f"chmod 600 {path}")
        return cls.parse(text, str(path), yaml_format=path.suffix.lower() in (".yml", ".yaml")), warnings

    @classmethod
    def parse(cls, text: str, source: str, *, yaml_format: bool = False) -> "KeyRing":
        rows = _yaml_rows(text, source) if yaml_format else _text_rows(text, source)
        if not rows:
            raise KeysFileError(f"{source} holds no key", _HINT, where=source)
        entries: list[tuple[Identity, bytes]] = []
        for where, name, key, admin in rows:
            shown = _shown(name)
            if not _NAME.match(name):
                raise KeysFileError(f"identity name {shown} is not a plain name", "letters, digits and _.@- only, "
                                    "up to 64 characters (names appear in logs; keys never do)", where=where)
            if len(key) < MIN_KEY_LENGTH:
                raise KeysFileError(f"the key of {shown} is {len(key)} characters; at least {MIN_KEY_LENGTH} are "
                                    "needed", "make one with: openssl rand -hex 24 (NAME first, then KEY)",
                                    where=where)
            if name in (i.name for i, _ in entries):
                raise KeysFileError(f"identity {shown} is named twice", "give each key its own name", where=where)
            if any(hmac.compare_digest(key.encode(), k) for _, k in entries):
                raise KeysFileError(f"the key of {shown} is also another identity's key", "give each identity its "
                                    "own key (a shared key would make them one identity)", where=where)
            entries.append((Identity(name, admin), key.encode()))
        return cls(tuple(entries), source)


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


def keys_file_path(configured: Optional[Path], flag: Optional[Path], env: "os._Environ[str] | dict[str, str]"
                   ) -> Optional[Path]:
    """The keys file: ``--api-keys-file`` > ``serve.api_keys_file`` > ``$TRTLADE_API_KEYS_FILE`` (None: none)."""
    if flag is not None:
        return flag
    if configured is not None:
        return configured
    value = env.get(KEYS_FILE_ENV)
    return Path(value) if value else None

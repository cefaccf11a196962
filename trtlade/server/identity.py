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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from trtlade.config.keys_file import (DEFAULT_IDENTITY, KEYS_FILE_ENV, MIN_KEY_LENGTH, KeyRow, KeysFileError,
                                     check_key_length, parse_keys, read_keys)

__all__ = ["Identity", "KeyRing", "KeysFileError", "KEYS_FILE_ENV", "MIN_KEY_LENGTH", "DEFAULT_IDENTITY",
           "check_key_length"]


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
        rows, warnings = read_keys(path)
        return cls._of(rows, str(path)), warnings

    @classmethod
    def parse(cls, text: str, source: str, *, yaml_format: bool = False) -> "KeyRing":
        return cls._of(parse_keys(text, source, yaml_format=yaml_format), source)

    @classmethod
    def _of(cls, rows: list[KeyRow], source: str) -> "KeyRing":
        return cls(tuple((Identity(row.name, row.admin), row.key.encode()) for row in rows), source)


def keys_file_path(configured: Optional[Path], flag: Optional[Path], env: "os._Environ[str] | dict[str, str]"
                   ) -> tuple[Optional[Path], str]:
    """The keys file (None: none) and where its path came from: ``--api-keys-file`` > ``serve.api_keys_file`` >
    ``$TRTLADE_API_KEYS_FILE``. The variable set but empty (``"$UNSET"``) is a KeysFileError: it would serve without
    keys.

    >>> keys_file_path(None, None, {})
    (None, '$TRTLADE_API_KEYS_FILE')
    """
    if flag is not None:
        return flag, "--api-keys-file"
    if configured is not None:
        return configured, "serve.api_keys_file"
    value = env.get(KEYS_FILE_ENV)
    if value is not None and not value.strip():
        raise KeysFileError("set but empty: the server would answer every request without keys",
                            f"set {KEYS_FILE_ENV} to the keys file, or unset it to serve without one",
                            where=f"${KEYS_FILE_ENV}")
    return (Path(value) if value else None), f"${KEYS_FILE_ENV}"

"""Writing files whole or not at all: the one atomic write every command uses.

``write_text_atomic(path, text)`` writes to a temporary file beside ``path`` (same folder, so the
rename cannot cross file systems), flushes and fsyncs it, and renames it over ``path``: a reader,
or a crash, sees the old file or the new one, never half of one. On any failure the temporary file
is removed and the error raised.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> write_json_atomic(folder / "a.json", {"x": 1}); (folder / "a.json").read_text()
'{\\n  "x": 1\\n}\\n'
>>> sorted(p.name for p in folder.iterdir())      # no temporary file left behind
['a.json']
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any, Optional

from trtlade.errors import TrtladeError

__all__ = ["write_text_atomic", "write_bytes_atomic", "write_json_atomic", "read_user_text", "UserFileError"]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring); the mode is the
    umask's, as for any new file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    """Write ``data`` to ``path`` atomically; ``mode``: the permission bits the file gets (default: the umask's)."""
    path = Path(path)
    tmp = path.parent / f".{path.name[:120]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as indented JSON with a final newline, written atomically."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


#: the most a pipe is read for (a file has its own size): a stream without end would fill the memory
MAX_PIPE_BYTES = 1 << 30


class UserFileError(TrtladeError, ValueError):
    """A file a user named that cannot be read as text: ``message``, ``hint`` and ``where`` (``file:line:column`` of
    the first byte that is not UTF-8, else the file), for the caller's own error type."""

    def __init__(self, message: str, hint: str, where: str) -> None:
        super().__init__(message, hint, where=where)


def read_user_text(path: Path, *, pipe: bool = False) -> str:
    r"""The UTF-8 text of a file a user named (a dataset, a prompt suite, a report): UserFileError, never an OSError or
    a UnicodeDecodeError, for one that is not a regular file (a folder; a pipe, unless ``pipe``: a file read once,
    such as ``--dataset <(zcat d.jsonl.gz)``), cannot be read, or is not UTF-8 (its line and column).

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "d.jsonl"
    >>> _ = bad.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    >>> try:
    ...     read_user_text(bad)
    ... except UserFileError as exc:
    ...     print(exc.where.rsplit("/", 1)[1], "|", exc.message)
    d.jsonl:2:16 | not UTF-8 text: byte 0xe9 at line 2, column 16
    """
    path = Path(path)
    fifo = pipe and path.exists() and stat.S_ISFIFO(path.stat().st_mode)
    if not path.is_file() and not fifo:  # a device (/dev/zero, a terminal) would be read without end
        raise UserFileError("not a regular file" if path.exists() else "no such file",
                            "give the path of a file" + (" (or a pipe: <(zcat d.jsonl.gz))" if pipe else ""),
                            str(path))
    try:
        with path.open("rb") as fh:
            blob = fh.read(MAX_PIPE_BYTES + 1) if fifo else fh.read()
        if len(blob) > MAX_PIPE_BYTES and fifo:
            raise UserFileError(f"the pipe gave more than {MAX_PIPE_BYTES >> 30} GiB", "write it to a file first",
                                str(path))
    except OSError as exc:
        raise UserFileError(f"cannot read it: {exc.strerror or exc}", "check the path and its permissions",
                            str(path)) from None
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = blob.count(b"\n", 0, exc.start) + 1
        column = exc.start - (blob.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserFileError(f"not UTF-8 text: byte 0x{blob[exc.start]:02x} at line {line}, column {column}",
                            "save it as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE > NEW); a compressed file must be "
                            "unpacked first", f"{path}:{line}:{column}") from None

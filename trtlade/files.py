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
import uuid
from pathlib import Path
from typing import Any, Optional

__all__ = ["write_text_atomic", "write_bytes_atomic", "write_json_atomic"]


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

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
from typing import Any

__all__ = ["write_text_atomic", "write_json_atomic"]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring); the mode is the
    umask's, as for any new file."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as indented JSON with a final newline, written atomically."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")

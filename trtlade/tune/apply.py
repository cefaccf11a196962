"""``trtlade tune --apply CONFIG``: write a schedule into a trtlade config, keeping the rest of the
file -- its other keys, their order, its comments -- as it was.

The file is edited with ruamel.yaml's round-trip mode (the YAML library that preserves comments),
``lookahead.schedule`` set (replacing an old one) as a block list of flow mappings with quoted specs::

    lookahead:
      spec: 2,4,2                   # kept, comment included
      schedule:
      - {up_to: 2, spec: '2,4,2'}
      - {spec: '1,1,0'}

The new text is validated as a trtlade config before the file is replaced; nothing is written if the
schedule does not fit the config (a spec ``lookahead.spec`` does not admit, or a ``request_default``
beside it), and the error says what to change.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from trtlade.config.loader import ConfigLoadError, parse_yaml, validate_trtlade
from trtlade.errors import TrtladeError
from trtlade.files import write_text_atomic
from trtlade.schedule import LookaheadSchedule

__all__ = ["ApplyError", "apply_schedule", "with_schedule"]


class ApplyError(TrtladeError):
    """The schedule cannot be written into this config (message, hint, where = the file)."""


def _applicable(text: str, file: str) -> Any:
    """The config a schedule can be written into: valid, and without a request_default (ApplyError)."""
    try:
        config, errors = validate_trtlade(parse_yaml(text, file))
    except ConfigLoadError as exc:
        config, errors = None, list(getattr(exc, "diagnostics", [])) or [exc]
    if config is None:
        raise ApplyError(f"{file} is not a valid trtlade config ({len(errors)} error(s)), so the schedule would "
                         "not be written", f"run `trtlade validate-config {file}` and fix it first", where=file)
    if config.lookahead.request_default is not None:
        raise ApplyError(f"{file} sets lookahead.request_default; a schedule replaces it (both would disagree "
                         "about requests without a lookahead field)",
                         "remove lookahead.request_default, then run --apply again", where=file)
    return config


def check_apply_target(path: Path) -> None:
    """What ``--apply`` would refuse whatever the tune run finds, checked before it measures anything: a file
    that cannot be read or written, an invalid config, a request_default (ApplyError)."""
    import os

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ApplyError(f"cannot read {path}: {exc.strerror or exc}", "give the path of a trtlade config",
                         where=str(path)) from None
    _applicable(text, str(path))
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ApplyError(f"cannot write {path}: its folder is not writable (the schedule is written through a "
                         "temporary file beside it)", "give a config in a folder you can write to", where=str(path))


def with_schedule(text: str, schedule: LookaheadSchedule, *, file: str = "<config>") -> str:
    """``text`` (a trtlade config) with ``lookahead.schedule`` set to ``schedule``; validated."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import SingleQuotedScalarString

    config = _applicable(text, file)
    server = config.lookahead.spec
    excess = schedule.excess(server)
    if excess:
        index, parts = excess[0]
        raise ApplyError(
            f"the schedule's band {index} ({schedule.bands[index].spec}) is not admitted by {file}'s "
            f"lookahead.spec ({server}): {', '.join(f'{f} {r} > {s}' for f, r, s in parts)}",
            f"tune against a server running this config, or raise lookahead.spec to at least "
            f"{schedule.smallest_engine_spec()} (and rebuild the engine)", where=file)
    yaml = YAML()  # round-trip: comments, key order and flow styles survive
    yaml.preserve_quotes = True
    yaml.width = 4096
    doc = yaml.load(text)
    bands = CommentedSeq()
    for band in schedule.to_config():
        item = CommentedMap()
        for key, value in band.items():
            item[key] = SingleQuotedScalarString(value) if key == "spec" else value
        item.fa.set_flow_style()
        bands.append(item)
    lookahead = doc["lookahead"]
    lookahead["schedule"] = bands
    if hasattr(lookahead, "fa") and lookahead.fa.flow_style():
        lookahead.fa.set_block_style()  # a flow mapping cannot hold the block list
    out = io.StringIO()
    yaml.dump(doc, out)
    new_text = _restore_spacing(text, out.getvalue())
    after = parse_yaml(new_text, file)
    config, errors = validate_trtlade(after)
    if config is None or config.lookahead.lookahead_schedule != schedule:
        detail = "; ".join(d.message for d in errors[:2])
        raise ApplyError(f"writing the schedule into {file} would not give a valid config: {detail}",
                         "paste summary.md's schedule by hand (schedule.yml in the report folder)", where=file)
    return new_text


def _blanks_before_next_section(lines: list[str]) -> tuple[int, int]:
    """(index of the first top-level line after ``lookahead:``, blank lines right before it)."""
    start = next((i for i, line in enumerate(lines) if line.startswith("lookahead:")), None)
    if start is None:
        return len(lines), 0
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ", "#", "\t")), len(lines))
    blanks = 0
    while end - blanks - 1 > start and not lines[end - blanks - 1].strip():
        blanks += 1
    return end, blanks


def _restore_spacing(original: str, text: str) -> str:
    """ruamel keeps the blank lines that close the lookahead section attached to its last key, so a
    schedule appended after that key lands below them (or takes them away when it replaces an old
    schedule). Put the schedule right after the section's last key and as many blank lines after
    the section as the original had."""
    lines = text.split("\n")
    at = next((i for i, line in enumerate(lines) if line.strip() == "schedule:" and line.startswith(" ")), None)
    if at is not None:
        while at > 0 and not lines[at - 1].strip():
            del lines[at - 1]
            at -= 1
    end, blanks = _blanks_before_next_section(lines)
    want = _blanks_before_next_section(original.split("\n"))[1]
    lines[end - blanks:end] = [""] * want
    return "\n".join(lines)


def apply_schedule(path: Path, schedule: LookaheadSchedule) -> str:
    """Write ``schedule`` into the config at ``path`` (atomically); returns the new text."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ApplyError(f"cannot read {path}: {exc.strerror or exc}", "give the path of a trtlade config",
                         where=str(path)) from None
    new_text = with_schedule(text, schedule, file=str(path))
    write_text_atomic(path, new_text)
    return new_text

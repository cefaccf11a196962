"""``trtlade tune --apply CONFIG``: write a schedule into a trtlade config, keeping every other byte of the
file as it was: its keys, their order, its comments, indentation, quoting, line endings, mode.

The schedule is spliced into the text: the old ``lookahead.schedule`` (its items and the comments inside it) is
replaced where it was, or the new one is added after the last line of the ``lookahead`` section, indented as that
section's keys, as a block list of flow mappings with quoted specs::

    lookahead:
      spec: 2,4,2                   # kept, comment included
      schedule:
      - {up_to: 2, spec: '2,4,2'}
      - {spec: '1,1,0'}

A ``lookahead`` written as a flow mapping (``lookahead: {spec: 2,4,2}``) is rewritten through ruamel.yaml's
round-trip mode instead (which keeps comments and key order, not spacing). Either way the new text is read back
and must hold exactly the old file's data with ``lookahead.schedule`` replaced, and be a valid trtlade config;
nothing is written otherwise. The file is replaced atomically with its mode kept (through a symlink, the file it
points to), and not if it changed while tune ran, is read-only, or is hard-linked (the other name would keep the
old text). ``trtlade tune`` first copies the file as it was into the run's report folder, so the old schedule and
the comments among its items, which the new schedule replaces, are kept.
"""

from __future__ import annotations

import copy
import difflib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from trtlade.config.loader import ConfigLoadError, parse_yaml, validate_trtlade
from trtlade.config.validate import classify
from trtlade.errors import TrtladeError
from trtlade.files import write_bytes_atomic
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import LookaheadSpec

__all__ = ["ApplyError", "apply_schedule", "check_apply_target", "with_schedule"]

_BOM = "\ufeff"


class ApplyError(TrtladeError):
    """The schedule cannot be written into this config (message, hint, where = the file)."""


def _applicable(text: str, file: str) -> Any:
    """The config a schedule can be written into: a valid trtlade config with a ``lookahead`` section and no
    request_default (ApplyError)."""
    try:
        doc = parse_yaml(text, file)
    except ConfigLoadError as exc:
        detail = "; ".join(d.format_text().splitlines()[0] for d in exc.diagnostics[:2])
        raise ApplyError(f"{file} is not a valid trtlade config (not readable YAML): {detail}",
                         f"run `trtlade validate-config {file}` and fix it first",
                         where=file) from None
    kind = classify(doc.data) if isinstance(doc.data, dict) else None
    if kind in ("trtllm-serve", "triton-llmapi"):
        raise ApplyError(f"{file} is a {kind} file: --apply writes lookahead.schedule into a trtlade config",
                         "paste the run's speculative_config.yml (TensorRT-LLM 1.3+) into this file yourself, or "
                         "give the trtlade config that serves", where=file)
    config, errors = validate_trtlade(doc)
    if config is None:
        shown = "; ".join(d.format_text().splitlines()[0] for d in errors[:2])
        raise ApplyError(f"{file} is not a valid trtlade config, so the schedule would not be written: {shown}",
                         f"run `trtlade validate-config {file}` and fix it first", where=file)
    if "lookahead" not in doc.data:
        raise ApplyError(f"{file} has no lookahead section (it drafts with `speculation`): a schedule of (w,n,g) "
                         "bands has nothing to apply to", "paste the run's speculative_config.yml "
                         "(TensorRT-LLM 1.3+) into the speculation block yourself", where=file)
    if config.lookahead.request_default is not None:
        raise ApplyError(f"{file} sets lookahead.request_default; a schedule replaces it (both would disagree "
                         "about requests without a lookahead field)",
                         "remove lookahead.request_default, then run --apply again", where=file)
    return config


def _with_endings(before: str, new_text: str, newline: str) -> str:
    """``new_text`` (newlines as ``\\n``) with the line endings of ``before`` (the file as it was): a line kept from
    it keeps its own (a file mixing LF and CRLF stays mixed), a new line takes the file's usual ``newline``.

    >>> _with_endings("a: 1\\r\\nb: 2\\nc: 3\\n", "a: 1\\nb: 2\\nx: 9\\nc: 3\\n", "\\r\\n")
    'a: 1\\r\\nb: 2\\nx: 9\\r\\nc: 3\\n'
    """
    pieces = before.split("\n")
    old = [piece.removesuffix("\r") for piece in pieces]
    ends = ["\r\n" if piece.endswith("\r") else "\n" for piece in pieces[:-1]]
    new = new_text.split("\n")
    new_ends = [newline] * (len(new) - 1)
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                if j1 + k < len(new_ends) and i1 + k < len(ends):
                    new_ends[j1 + k] = ends[i1 + k]
    return "".join(line + end for line, end in zip(new, new_ends)) + new[-1]


def _decode(raw: bytes, file: str) -> tuple[str, str, bool]:
    """The text (newlines as ``\\n``), the file's newline, and whether it starts with a byte-order mark."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApplyError(f"{file} is not UTF-8 (byte {exc.start})", "save it as UTF-8; trtlade reads configs as "
                         "UTF-8", where=file) from None
    bom = text.startswith(_BOM)
    text = text[1:] if bom else text
    crlf = text.count("\r\n")
    newline = "\r\n" if crlf > text.count("\n") - crlf else "\n"  # the most lines' (a new line takes it)
    return text.replace("\r\n", "\n"), newline, bom


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ApplyError(f"cannot read {path}: {exc.strerror or exc}", "give the path of a trtlade config",
                         where=str(path)) from None


@dataclass(frozen=True)
class ApplyTarget:
    """The config ``--apply`` writes into, as it was before the run: its bytes (the write refuses a file changed
    since) and the (W,N,G) its server admits (every band must fit it)."""

    raw: bytes
    spec: LookaheadSpec


def check_apply_target(path: Path) -> ApplyTarget:
    """What ``--apply`` would refuse whatever the tune run finds, checked before it measures anything: a file that
    cannot be read or replaced, a file that is not a valid trtlade config with a lookahead section, a
    request_default (ApplyError). Returns the file as it is now."""
    target = path.resolve()
    raw = _read(target)
    text, _, _ = _decode(raw, str(path))
    config = _applicable(text, str(path))
    _writable(target, str(path))
    return ApplyTarget(raw, config.lookahead.spec)


def _writable(target: Path, file: str) -> None:
    if not os.access(target, os.W_OK) or not target.stat().st_mode & 0o222:  # root may write where no bit says so
        raise ApplyError(f"cannot write {file}: it is read-only", "make it writable (chmod u+w), or give a copy",
                         where=file)
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ApplyError(f"cannot write {file}: its folder is not writable (the schedule is written through a "
                         "temporary file beside it)", "give a config in a folder you can write to", where=file)
    if target.stat().st_nlink > 1:
        raise ApplyError(f"{file} has {target.stat().st_nlink} hard links: replacing it would leave the other names "
                         "with the old text", "give a copy without hard links", where=file)


def with_schedule(text: str, schedule: LookaheadSchedule, *, file: str = "<config>") -> str:
    """``text`` (a trtlade config, newlines as ``\\n``) with ``lookahead.schedule`` set to ``schedule``: spliced
    where the section is a block mapping, else through ruamel.yaml; checked to change nothing else."""
    config = _applicable(text, file)
    server = config.lookahead.spec
    excess = schedule.excess(server)
    if excess:
        index, parts = excess[0]
        pytorch = config.build.backend == "pytorch"
        raise ApplyError(
            f"the schedule's band {index} ({schedule.bands[index].spec}) is not admitted by {file}'s "
            f"lookahead.spec ({server}): {', '.join(f'{f} {r} > {s}' for f, r, s in parts)}",
            "tune against a server running this config" + (
                "; a PyTorch-backend config drafts with its speculation block (paste the run's "
                "speculative_config.yml there)" if pytorch else
                f", or raise lookahead.spec to at least {schedule.smallest_engine_spec()} (and rebuild the engine)"),
            where=file)
    for attempt in (_splice, _roundtrip):
        new_text = attempt(text, schedule)
        if new_text is not None and _only_the_schedule_changed(text, new_text, schedule, file):
            return new_text
    raise ApplyError(f"writing the schedule into {file} would change more than lookahead.schedule (an anchor or "
                     "merge key in the lookahead section?), so nothing was written",
                     "paste the run's schedule.yml (in the report folder) under lookahead: by hand", where=file)


def _only_the_schedule_changed(old: str, new: str, schedule: LookaheadSchedule, file: str) -> bool:
    """The new text holds the old data with ``lookahead.schedule`` replaced, and is a valid config with it."""
    try:
        before, after = parse_yaml(old, file), parse_yaml(new, file)
    except ConfigLoadError:
        return False
    expected = copy.deepcopy(before.data)
    expected["lookahead"]["schedule"] = schedule.to_config()
    if after.data != expected:
        return False
    config, _ = validate_trtlade(after)
    return config is not None and config.lookahead.lookahead_schedule == schedule


_LOOKAHEAD = re.compile(r"^lookahead:[ \t]*(&[^\s#]+[ \t]*)?(#.*)?$")  # an anchor on the section is fine


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _splice(text: str, schedule: LookaheadSchedule) -> Optional[str]:
    """The schedule spliced into a block-mapping ``lookahead`` section; None where the section is not one."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _LOOKAHEAD.match(line)]
    if len(starts) != 1:
        return None
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and lines[i][0] not in " \t#"),
               len(lines))
    last = end - 1  # the section's last line: blank lines and column-0 comments after it belong to what follows
    while last > start and (not lines[last].strip() or lines[last].startswith("#")):
        last -= 1
    body = [i for i in range(start + 1, last + 1) if lines[i].strip() and not lines[i].lstrip().startswith("#")]
    if not body or any("\t" in lines[i][:_indent(lines[i]) + 1] for i in body):
        return None
    key = _indent(lines[body[0]])
    pad = " " * key
    items = [pad + "- {" + ", ".join(f"{k}: '{v}'" if k == "spec" else f"{k}: {v}" for k, v in band.items()) + "}"
             for band in schedule.to_config()]
    at = next((i for i in body if _indent(lines[i]) == key and re.match(r"schedule[ \t]*:", lines[i].lstrip())),
              None)
    if at is None:
        return "\n".join(lines[:last + 1] + [pad + "schedule:"] + items + lines[last + 1:])
    bare = re.fullmatch(r"[ ]*schedule[ \t]*:([ \t]+#.*)?", lines[at])  # the key alone, a comment after it
    head = lines[at] if bare else pad + "schedule:"  # a flow list on the line goes, with what follows it
    stop = at + 1
    while stop <= last and (not lines[stop].strip() or _indent(lines[stop]) > key or (
            _indent(lines[stop]) == key and lines[stop].lstrip().startswith("-"))):
        stop += 1
    last_item = max((i for i in range(at + 1, stop) if lines[i].strip() and not lines[i].lstrip().startswith("#")),
                    default=at)
    stop = last_item + 1  # comments right under the last item are its own and go with it; what follows them (a
    while stop < len(lines) and lines[stop].lstrip().startswith("#") and _indent(lines[stop]) > key:
        stop += 1  # blank line, a comment at the keys' level, the next key) stays
    return "\n".join(lines[:at] + [head] + items + lines[stop:])


def _roundtrip(text: str, schedule: LookaheadSchedule) -> Optional[str]:
    """Through ruamel.yaml's round-trip mode (a flow-style ``lookahead``): comments and key order kept."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import SingleQuotedScalarString

    yaml = YAML()
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
    return out.getvalue()


def apply_schedule(path: Path, schedule: LookaheadSchedule, keep: Optional[Path] = None,
                   expected: Optional[bytes] = None) -> str:
    """Write ``schedule`` into the config at ``path`` (through a symlink: into the file it points to), atomically,
    its mode, byte-order mark and each kept line's ending kept; returns the new text (newlines as ``\\n``).
    ``keep``: where the file's bytes as they were are copied first (the old schedule's items and the comments among
    them are replaced, so the copy holds them); nothing is replaced if the copy cannot be written. ``expected``: the
    file's bytes when the run began (:func:`check_apply_target`): a file edited since is not replaced."""
    target = path.resolve()
    raw = _read(target)
    if expected is not None and raw != expected:
        raise ApplyError(f"{path} changed while tune ran, so the schedule was not written into it",
                         "run --apply again, or paste the run's schedule.yml (in the report folder) by hand",
                         where=str(path))
    text, newline, bom = _decode(raw, str(path))
    new_text = with_schedule(text, schedule, file=str(path))
    _writable(target, str(path))
    body = _with_endings(raw.decode("utf-8")[1 if bom else 0:], new_text, newline)
    data = ((_BOM if bom else "") + body).encode("utf-8")
    if keep is not None:
        try:
            write_bytes_atomic(keep, raw, mode=target.stat().st_mode & 0o666)
        except OSError as exc:
            raise ApplyError(f"cannot keep a copy of {path} as it was in {keep}: {exc.strerror or exc}, so {path} "
                             "was not replaced", "free the disk or the report folder, or paste the run's "
                             "schedule.yml (in the report folder) by hand", where=str(path)) from None
    if _read(target) != raw:
        raise ApplyError(f"{path} changed while the schedule was being written, so it was not replaced",
                         "run --apply again, or paste the run's schedule.yml (in the report folder) by hand",
                         where=str(path))
    try:
        write_bytes_atomic(target, data, mode=target.stat().st_mode & 0o7777)
    except OSError as exc:
        raise ApplyError(f"cannot write {path}: {exc.strerror or exc}", "free the disk or the folder, then paste "
                         "the run's schedule.yml (in the report folder) by hand", where=str(path)) from None
    return new_text

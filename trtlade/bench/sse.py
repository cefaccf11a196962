"""A small incremental server-sent-events decoder with per-read timestamps.

The bench reads the response body in whatever pieces the network delivers and feeds each piece to
:class:`SSEDecoder` together with the ``time.perf_counter()`` taken right after the read. Every event
completed by that piece carries that timestamp, so an event's time is when its last byte arrived.

Follows the WHATWG event-stream rules that matter for OpenAI-compatible servers:

* lines end with ``\\r\\n``, ``\\n`` or ``\\r`` (a piece may end between ``\\r`` and ``\\n``);
* a line starting with ``:`` is a comment (keep-alive) and is skipped;
* ``field: value`` strips one space after the colon; ``data`` lines accumulate, joined with ``\\n``;
* an empty line dispatches the event; an event with no ``data`` line is not dispatched;
* ``event`` sets the event type; ``id`` and ``retry`` are read and ignored;
* bytes split across reads (even inside a UTF-8 character) are reassembled;
* at the end of the stream an unterminated event is discarded (as browsers do); :meth:`close`
  reports whether bytes were left over so the caller can say so.

Example::

    >>> d = SSEDecoder()
    >>> d.feed(b': keep-alive\\r\\ndata: {"a"', 1.0)
    []
    >>> [(e.data, e.time) for e in d.feed(b': 1}\\r\\n\\r\\ndata: [DONE]\\n\\n', 2.0)]
    [('{"a": 1}', 2.0), ('[DONE]', 2.0)]
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEDecoder"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its data (``data`` lines joined by ``\\n``), type and arrival time."""

    data: str
    time: float
    event: str = "message"


class SSEDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get the events they complete."""

    __slots__ = ("_buffer", "_data", "_event", "_started", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._started = False
        self._pending_cr = False  # the previous piece ended with a bare "\r"

    def feed(self, chunk: bytes, now: float) -> list[SSEEvent]:
        """Decode ``chunk`` (received at ``now``); return the events it completes, in order."""
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":  # the second half of a "\r\n" split across reads
                chunk = chunk[1:]
        if not self._started:
            chunk = self._strip_bom(chunk)
        buffer = self._buffer + chunk if self._buffer else chunk
        lines = buffer.splitlines(keepends=True)
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._buffer = lines.pop()
        else:
            self._buffer = b""
        if lines and lines[-1].endswith(b"\r"):
            self._pending_cr = True
        events: list[SSEEvent] = []
        for raw in lines:
            event = self._line(raw.rstrip(b"\r\n").decode("utf-8", errors="replace"), now)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> bool:
        """End of stream: discard any unterminated event; True if bytes or data were left over."""
        leftover = bool(self._buffer.strip()) or bool(self._data)
        self._buffer = b""
        self._data = []
        self._event = ""
        return leftover

    def _strip_bom(self, chunk: bytes) -> bytes:
        joined = self._buffer + chunk
        if len(joined) < 3 and b"\xef\xbb\xbf".startswith(joined):
            return chunk  # could still be the start of a BOM; decide on the next piece
        self._started = True
        if joined.startswith(b"\xef\xbb\xbf"):
            self._buffer = b""
            return joined[3:]
        return chunk

    def _line(self, line: str, now: float) -> SSEEvent | None:
        if not line:
            return self._dispatch(now)
        if line[0] == ":":
            return None
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None  # "id", "retry" and unknown fields are ignored

    def _dispatch(self, now: float) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent("\n".join(self._data), now, self._event or "message")
        self._data = []
        self._event = ""
        return event

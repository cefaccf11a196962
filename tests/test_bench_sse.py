"""The bench's SSE decoder: comments, multi-line data, CRLF / CR, [DONE], pieces split anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.bench.sse import SSEDecoder


def decode(pieces: list[bytes]) -> list[str]:
    d = SSEDecoder()
    out: list[str] = []
    for i, piece in enumerate(pieces):
        out += [e.data for e in d.feed(piece, float(i))]
    return out


CASES = [
    # (stream, expected data of dispatched events)
    (b'data: {"a":1}\n\ndata: [DONE]\n\n', ['{"a":1}', "[DONE]"]),
    (b": keep-alive\n\n: ping\ndata: x\n\n", ["x"]),                       # comments skipped
    (b"data: line1\ndata: line2\n\n", ["line1\nline2"]),                     # multi-line data
    (b"data: a\r\n\r\ndata: b\r\n\r\n", ["a", "b"]),                         # CRLF
    (b"data: a\r\rdata: b\r\r", ["a", "b"]),                                 # bare CR
    (b"data:nospace\n\n", ["nospace"]),                                      # no space after colon
    (b"data:  two spaces\n\n", [" two spaces"]),                             # only one space stripped
    (b"event: ping\n\n", []),                                                # no data: not dispatched
    (b"id: 7\nretry: 100\nevent: message\ndata: y\n\n", ["y"]),              # other fields ignored
    (b"data\n\n", [""]),                                                     # field without colon
    (b"\xef\xbb\xbfdata: bom\n\n", ["bom"]),                                  # UTF-8 BOM at the start
    (b"data: unterminated", []),                                             # discarded at the end
    ('data: "héllo ✓"\n\n'.encode(), ['"héllo ✓"']),                        # UTF-8 text
]


def test_spec_table() -> None:
    for stream, expected in CASES:
        assert decode([stream]) == expected, stream


def test_every_split_point_gives_the_same_events() -> None:
    for stream, expected in CASES:
        for i in range(len(stream) + 1):
            assert decode([stream[:i], stream[i:]]) == expected, (stream, i)


def test_byte_by_byte_including_inside_utf8_and_crlf() -> None:
    stream = 'data: {"t": "✓"}\r\n\r\n: c\r\ndata: [DONE]\r\n\r\n'.encode()
    assert decode([stream[i:i + 1] for i in range(len(stream))]) == ['{"t": "✓"}', "[DONE]"]


def test_event_time_is_the_read_that_completed_it() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a", 1.0) == []
    events = d.feed(b"\n\ndata: b\n\n", 2.0)
    assert [(e.data, e.time) for e in events] == [("a", 2.0), ("b", 2.0)]
    assert [e.event for e in events] == ["message", "message"]


def test_event_type_is_kept() -> None:
    d = SSEDecoder()
    [ev] = d.feed(b"event: error\ndata: {}\n\n", 0.0)
    assert ev.event == "error" and ev.data == "{}"


def test_close_reports_leftover() -> None:
    d = SSEDecoder()
    d.feed(b"data: half", 0.0)
    assert d.close() is True
    d2 = SSEDecoder()
    d2.feed(b"data: whole\n\n", 0.0)
    assert d2.close() is False


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(st.tuples(st.lists(_text, min_size=1, max_size=3), st.booleans()), min_size=1, max_size=6),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_stream_any_split(events: list[tuple[list[str], bool]], newline: str, cuts: list[int]) -> None:
    """Encoding events (with comments) in any line ending, split at any points, decodes back."""
    text = ""
    for lines, comment in events:
        if comment:
            text += ":keep-alive" + newline
        text += "".join(f"data: {line}{newline}" for line in lines) + newline
    blob = text.encode()
    points = sorted({min(c, len(blob)) for c in cuts})
    pieces = [blob[a:b] for a, b in zip([0, *points], [*points, len(blob)])]
    assert decode(pieces) == ["\n".join(lines) for lines, _ in events]

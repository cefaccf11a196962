"""A load-aware lookahead schedule: which (w,n,g) a request gets by how busy the server is.

``lookahead.schedule`` is a list of bands ``{up_to: <int>, spec: <spec>}`` in ascending order, the
last without ``up_to``. A band is keyed by the number of requests in flight when a request is
admitted, counting that request itself; an explicit per-request ``lookahead`` always wins, and a
band switch never changes a request already running (its spec is fixed at admission).

Worked example, the bands ``[{up_to: 2, spec: 4,2,4}, {up_to: 8, spec: 2,2,2}, {spec: 1,1,0}]``::

    >>> s = LookaheadSchedule.parse([{"up_to": 2, "spec": "4,2,4"}, {"up_to": 8, "spec": "2,2,2"},
    ...                              {"spec": "1,1,0"}])
    >>> [str(s.spec_for(k)) for k in (1, 2, 3, 8, 9, 100)]
    ['4,2,4', '4,2,4', '2,2,2', '2,2,2', '1,1,0', '1,1,0']
    >>> [s.label(i) for i in range(3)]
    ['1-2', '3-8', '9+']
    >>> str(s.smallest_engine_spec())    # the smallest (W,N,G) that admits every band
    '4,2,4'
    >>> str(s)
    '<=2: 4,2,4; <=8: 2,2,2; else: 1,1,0'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from trtlade.errors import TrtladeError
from trtlade.spec import FIELDS, LookaheadSpec, SpecError

__all__ = ["Band", "LookaheadSchedule", "ScheduleError", "bands_in_order"]


class ScheduleError(TrtladeError, ValueError):
    """A schedule that breaks a rule: ``index`` is the band concerned (None: the whole list),
    ``field`` the key in it (``up_to`` or ``spec``), ``rule`` a short code, ``hint`` what to do."""

    located = False  # raised inside config validators: pydantic shows the message as it is

    def __init__(self, message: str, *, rule: str, index: Optional[int] = None, field: Optional[str] = None,
                 hint: str = "") -> None:
        where = ".".join(str(part) for part in (index, field) if part is not None)
        super().__init__(message, hint, where=where)
        self.rule = rule
        self.index = index
        self.field = field


@dataclass(frozen=True)
class Band:
    """Requests admitted with at most ``up_to`` in flight (None: any number) get ``spec``."""

    up_to: Optional[int]
    spec: LookaheadSpec

    def to_config(self) -> dict[str, Any]:
        """As written in a config: ``{"up_to": 2, "spec": "4,2,4"}`` (no up_to on the last band)."""
        return ({"up_to": self.up_to} if self.up_to is not None else {}) | {"spec": str(self.spec)}

    @classmethod
    def parse(cls, item: Any, index: Optional[int] = None) -> "Band":
        """One band from ``{up_to, spec}`` (a spec in any spelling ``LookaheadSpec.parse`` reads): the
        rules of a single band, in one place (the config schema validates into this too). ``index``:
        the band's place in its schedule, for the messages.

        >>> Band.parse({"up_to": 2, "spec": [4, 2, 4]})
        Band(up_to=2, spec=LookaheadSpec(window_size=4, ngram_size=2, verification_set_size=4))
        >>> Band.parse({"up_to": 0, "spec": "4,2,4"}, index=1)
        Traceback (most recent call last):
        ...
        trtlade.schedule.ScheduleError: band 1: up_to must be a whole number >= 1, got 0
        """
        if isinstance(item, Band):
            return item
        name = "band" if index is None else f"band {index}"
        if not isinstance(item, Mapping):
            raise ScheduleError(f"{name} is {type(item).__name__}, not a mapping", rule="parse", index=index,
                                hint="write each band as {up_to: <requests in flight>, spec: 'W,N,G'}")
        unknown = [k for k in item if k not in ("up_to", "spec")]
        if unknown:
            raise ScheduleError(f"{name} has unknown key {unknown[0]!r}", rule="parse", index=index,
                                hint="a band has up_to (omitted on the last band) and spec")
        if "spec" not in item:
            raise ScheduleError(f"{name} has no spec", rule="parse", index=index, field="spec",
                                hint="add spec: 'W,N,G' (e.g. '2,2,2', or '1,1,0' for no lookahead)")
        up_to = item.get("up_to")
        if up_to is not None and (isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 1):
            raise ScheduleError(f"{name}: up_to must be a whole number >= 1, got {up_to!r}", rule="parse",
                                index=index, field="up_to",
                                hint="up_to counts requests in flight, the new one included")
        try:
            spec = LookaheadSpec.parse(item["spec"])
        except SpecError as exc:
            raise ScheduleError(f"{name}: {exc.message}", rule="spec", index=index, field="spec",
                                hint=exc.hint) from None
        return cls(up_to, spec)


@dataclass(frozen=True)
class LookaheadSchedule:
    """Bands in ascending ``up_to``, the last open-ended. Always valid (checked on construction)."""

    bands: tuple[Band, ...]

    def __post_init__(self) -> None:
        if not self.bands:
            raise ScheduleError("a schedule needs at least one band", rule="empty",
                                hint="end it with an open-ended band, e.g. [{spec: '1,1,0'}]")
        previous = 0
        for index, band in enumerate(self.bands[:-1]):
            if band.up_to is None:
                raise ScheduleError(f"band {index} has no up_to but is not the last band: only the last band "
                                    "is open-ended", rule="open-band-not-last", index=index, field="up_to",
                                    hint="give every band but the last an up_to (requests in flight)")
            if band.up_to <= previous:
                raise ScheduleError(f"band {index} has up_to {band.up_to}, not above the previous band's "
                                    f"{previous}: bands go in ascending order of up_to", rule="order",
                                    index=index, field="up_to",
                                    hint="sort the bands by up_to, each larger than the one before")
            previous = band.up_to
        if self.bands[-1].up_to is not None:
            last = len(self.bands) - 1
            raise ScheduleError(f"the last band has up_to {self.bands[-1].up_to}: the last band must be "
                                "open-ended so that every load has a spec", rule="no-open-band",
                                index=last, field="up_to",
                                hint="drop up_to from the last band, or add a last band such as {spec: '1,1,0'}")

    @classmethod
    def parse(cls, value: Any) -> "LookaheadSchedule":
        """A list of ``{up_to, spec}`` mappings (a spec in any spelling ``LookaheadSpec.parse`` reads)."""
        if isinstance(value, LookaheadSchedule):
            return value
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise ScheduleError(f"a schedule is a list of bands, got {type(value).__name__}", rule="parse",
                                hint="e.g. [{up_to: 2, spec: '4,2,4'}, {spec: '1,1,0'}]")
        return cls(tuple(Band.parse(item, index) for index, item in enumerate(value)))

    # ------------------------------------------------------------------ lookup
    def band_for(self, in_flight: int) -> int:
        """The index of the band for ``in_flight`` requests (the new one included)."""
        for index, band in enumerate(self.bands):
            if band.up_to is None or in_flight <= band.up_to:
                return index
        return len(self.bands) - 1  # unreachable: the last band is open-ended

    def spec_for(self, in_flight: int) -> LookaheadSpec:
        return self.bands[self.band_for(in_flight)].spec

    def label(self, index: int) -> str:
        """The in-flight range of band ``index`` (0 the first): ``1-2``, ``3-8``, ``9+`` (``1+`` for a single
        band); an index that names no band is an ``IndexError`` saying the range (no counting from the end).

        >>> LookaheadSchedule.parse([{"spec": "2,2,2"}]).label(1)
        Traceback (most recent call last):
        ...
        IndexError: band 1 does not exist: this schedule's bands are 0..0
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.bands):
            raise IndexError(f"band {index!r} does not exist: this schedule's bands are 0..{len(self.bands) - 1}")
        low = 1 if index == 0 else (self.bands[index - 1].up_to or 0) + 1
        high = self.bands[index].up_to
        if high is None:
            return f"{low}+"
        return str(low) if high == low else f"{low}-{high}"

    # ------------------------------------------------------------------ rules
    def excess(self, server: LookaheadSpec) -> list[tuple[int, list[tuple[str, int, int]]]]:
        """Bands whose spec the server's (W,N,G) does not admit: ``[(index, excess), ...]``."""
        return [(i, server.excess(b.spec)) for i, b in enumerate(self.bands) if not server.admits(b.spec)]

    def smallest_engine_spec(self) -> LookaheadSpec:
        """The smallest (W,N,G) admitting every band's spec: the field-wise maximum."""
        values = [max(getattr(b.spec, f) for b in self.bands) for f in FIELDS]
        try:
            return LookaheadSpec(*values)
        except SpecError:  # e.g. every band (1,1,0) but one (2,2,0): N >= 2 needs nothing more
            return LookaheadSpec(max(values[0], 1), max(values[1], 2), values[2])

    def to_config(self) -> list[dict[str, Any]]:
        return [b.to_config() for b in self.bands]

    def specs(self) -> list[LookaheadSpec]:
        return [b.spec for b in self.bands]

    def __str__(self) -> str:
        return "; ".join(f"{'else' if b.up_to is None else f'<={b.up_to}'}: {b.spec}" for b in self.bands)


def bands_in_order(items: Iterable[tuple[Optional[int], LookaheadSpec]]) -> LookaheadSchedule:
    """A schedule from ``(up_to, spec)`` pairs, merging neighbours with the same spec.

    >>> str(bands_in_order([(1, LookaheadSpec(2, 4, 2)), (2, LookaheadSpec(2, 4, 2)),
    ...                     (4, LookaheadSpec(1, 1, 0)), (None, LookaheadSpec(1, 1, 0))]))
    '<=2: 2,4,2; else: 1,1,0'
    """
    merged: list[Band] = []
    for up_to, spec in items:
        if merged and merged[-1].spec == spec:
            merged[-1] = Band(up_to, spec)
        else:
            merged.append(Band(up_to, spec))
    return LookaheadSchedule(tuple(merged))

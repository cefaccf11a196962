"""What a tenant may read of the server's metrics: a copy renewed only over enough of the others' requests.

With several API keys, every counter of ``/metrics`` moves with every request, so a tenant that reads it
before and after another tenant's request learns that request's prompt length, tokens, drafts and timing.
An admin key reads the counters live; every other reader (a non-admin key, or a scraper let in by
``serve.metrics_without_key``) gets a copy of them (the whole exposition text, taken at once) that is
renewed only when, leaving out the reader's own requests, at least ``min_others`` requests were in flight
since the reader's copy was taken. So any change a reader can see between two reads sums the work of
``min_others`` or more requests that are not its own: no single request of another tenant can be read
from it. A reader without a key counts every request without a valid key as its own.

"In flight since the copy" counts every request that arrived after it, and every one still in flight when it
was taken (its later tokens move the counters too).

Worked example (``min_others=2``; identities ``a`` and ``b``; ``a`` reads)::

    >>> calls = []
    >>> view = TenantView(render=lambda: b"v%d" % len(calls), min_others=2)
    >>> view.read("a")                    # the copy taken when the server started
    b'v0'
    >>> end = view.begin("b"); calls.append(1); end()
    >>> view.read("a")                    # one request of b since: not renewed
    b'v0'
    >>> end = view.begin("a"); calls.append(1); end()
    >>> view.read("a")                    # a's own request does not count
    b'v0'
    >>> end = view.begin("b"); end(); calls.append(1)
    >>> view.read("a")                    # two of b's: renewed, the change sums both
    b'v3'
    >>> view.read("b")                    # b's own requests never count for b: its first copy stays
    b'v0'
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

from trtlade.server.share import counted

__all__ = ["TenantView", "OPEN_READER"]

#: the reader of ``/metrics`` without a key (``serve.metrics_without_key``): it owns the requests without one
OPEN_READER: Optional[str] = None


@dataclass
class _Copy:
    text: bytes
    #: requests in flight since ``text`` was taken, by identity (None: no valid key)
    since: collections.Counter = field(default_factory=collections.Counter)


class TenantView:
    """Per reader, the last copy of the metrics it was given and the requests since (see the module doc)."""

    def __init__(self, render: Callable[[], bytes], min_others: int) -> None:
        if min_others < 1:
            raise ValueError(f"min_others must be >= 1, got {min_others}")
        self._render = render
        self.min_others = int(min_others)
        self._lock = threading.Lock()
        self._in_flight: collections.Counter = collections.Counter()
        self._start = _Copy(render())
        self._copies: dict[Hashable, _Copy] = {}

    def restart(self) -> None:
        """Take the starting copy again (the engine is ready: its info gauges are set), unless a request
        has been in flight since it was taken."""
        with self._lock:
            if not self._start.since:
                self._start = _Copy(self._render())

    def begin(self, who: Optional[str]) -> Callable[[], None]:
        """A request of ``who`` (its identity's name; None: no valid key) arrives; returns the call that
        ends it (idempotent)."""
        with self._lock:
            for copy in (self._start, *self._copies.values()):
                copy.since[who] += 1
        # a copy renewed between these two lines does not count this request: a change then sums at least as
        # many others as counted (safe), never fewer
        return counted(self._in_flight, who, 1, self._lock)

    def read(self, reader: Optional[str]) -> bytes:
        """The metrics as ``reader`` may see them now: its copy, renewed if enough others' requests ran."""
        with self._lock:
            copy = self._copies.get(reader)
            if copy is None:
                copy = self._copies[reader] = _Copy(self._start.text, collections.Counter(self._start.since))
            others = sum(copy.since.values()) - copy.since.get(reader, 0)
            if others >= self.min_others:
                copy.text = self._render()
                copy.since = collections.Counter(self._in_flight)
            return copy.text

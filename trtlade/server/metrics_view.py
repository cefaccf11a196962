"""What a tenant may read of the server's metrics: a copy renewed only over enough of the others' requests.

With several API keys, every counter of ``/metrics`` moves with every request, so a tenant that reads it
before and after another tenant's request learns that request's prompt length, tokens, drafts and timing.
An admin key reads the counters live; every other reader (a non-admin key, or a scraper let in by
``serve.metrics_without_key``) gets a copy of them (the whole exposition text, taken at once) that is
renewed only when, leaving out the reader's own requests, at least ``min_others`` requests both arrived and
ended since the reader's copy was taken. A counter moves when a request arrives (its prompt), while it runs
(its tokens) or when it ends (its steps, its latency): each of those ``min_others`` requests moved every kind
of counter in between, so any change a reader can see between two reads sums the work of ``min_others`` or
more requests that are not its own, and no single request of another tenant can be read from it (a request
in flight when the copy was taken, or still in flight at the next, only adds to that sum). Two identities that
work together defeat it: one sends the padding, the other reads.

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

Requests in flight when a copy is taken do not count toward the next one, however many (four long streams of
``b`` would otherwise renew ``a``'s copy at every read, and one short request of ``c`` between two reads be
read alone)::

    >>> streams = [view.begin("b") for _ in range(4)]
    >>> end = view.begin("c"); calls.append(1); end()
    >>> view.read("a")                    # one request of c arrived and ended since a's copy: not renewed
    b'v3'

Where a reader without a key is let in (``shared``), every key can read that copy beside its own, and two copies
renewed at different moments differ by what ran in between: one request of a third tenant, or a tenant's own
padding and one other request. So then every reader but an admin reads one copy, renewed when the requests since
it, less those of any one identity (the requests without a valid key are one), number ``min_others``::

    >>> renders = []
    >>> shared = TenantView(render=lambda: b"s%d" % len(renders), min_others=2, shared=True)
    >>> for who in ("b", "b", "b", "c"):
    ...     shared.begin(who)(); renders.append(1)
    >>> shared.read(OPEN_READER) == shared.read("b") == b"s0"    # b's three and c's one: c's alone, not renewed
    True
    >>> shared.begin(None)(); shared.read("b")                  # b's three and two others: renewed, for everyone
    b's4'
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

__all__ = ["TenantView", "OPEN_READER"]

#: the reader of ``/metrics`` without a key (``serve.metrics_without_key``): it owns the requests without one
OPEN_READER: Optional[str] = None
#: the holder of the one copy every reader gets in shared mode
_SHARED = object()


@dataclass
class _Copy:
    text: bytes
    #: the first arrival not in ``text``'s past: requests numbered from it on arrived after the copy was taken
    taken: int = 0
    #: requests that arrived after ``text`` was taken and have ended since, by identity (None: no valid key)
    since: collections.Counter = field(default_factory=collections.Counter)


class TenantView:
    """Per reader, the last copy of the metrics it was given and the requests since (see the module doc)."""

    def __init__(self, render: Callable[[], bytes], min_others: int, shared: bool = False) -> None:
        if min_others < 1:
            raise ValueError(f"min_others must be >= 1, got {min_others}")
        self._render = render
        self.min_others = int(min_others)
        self.shared = shared
        self._lock = threading.Lock()
        self._arrivals = 0  # requests begun so far: each one's number is its place in that order
        self._start = _Copy(render())
        self._copies: dict[Hashable, _Copy] = {}

    def restart(self) -> None:
        """Take the starting copy again (the engine is ready: its info gauges are set), unless a request
        has arrived since it was taken."""
        with self._lock:
            if self._arrivals == self._start.taken:
                self._start = _Copy(self._render(), self._arrivals)

    def begin(self, who: Optional[str]) -> Callable[[], None]:
        """A request of ``who`` (its identity's name; None: no valid key) arrives; returns the call that
        ends it (idempotent): it then counts for every copy taken before it arrived, unless ended with
        ``counted=False`` (refused before it ran: it moved nothing but the request count, so it must not help renew
        a copy, or a tenant could send requests bound to fail between two reads and read one other request alone)."""
        with self._lock:
            number = self._arrivals
            self._arrivals += 1
        ended = False

        def end(counted: bool = True) -> None:
            nonlocal ended
            with self._lock:
                if ended:
                    return
                ended = True
                for copy in (self._start, *self._copies.values()) if counted else ():
                    if number >= copy.taken:
                        copy.since[who] += 1
        return end

    def read(self, reader: Optional[str]) -> bytes:
        """The metrics as ``reader`` may see them now: its copy, renewed if enough others' requests ran."""
        with self._lock:
            holder = _SHARED if self.shared else reader
            copy = self._copies.get(holder)
            if copy is None:
                start = self._start
                copy = self._copies[holder] = _Copy(start.text, start.taken, collections.Counter(start.since))
            own = max(copy.since.values(), default=0) if self.shared else copy.since.get(reader, 0)
            others = sum(copy.since.values()) - own
            if others >= self.min_others:
                copy.text = self._render()
                copy.taken = self._arrivals
                copy.since = collections.Counter()
            return copy.text

"""Fair share per identity for an engine that keeps none of its own (the TensorRT-LLM engines).

The reference engine counts each identity's sequences itself, and gives a free batch slot to the identity
holding the fewest (:mod:`trtlade.reference.serving_adapter`). TensorRT-LLM's executor schedules its own batch,
so for its engines the server bounds what each identity may have in flight, waiting or running: the same
:class:`~trtlade.contract.serving.FairShare` (``serve.max_queue_per_identity`` +
``serve.max_running_per_identity``), counted in sequences (a request with ``n: 8`` holds 8) from admission to
the request's end. Beyond it, a 429 naming the share; the other identities keep finding room, since one
identity can never hold more than its share of ``max_batch_size + max_queue``.

Worked example (two identities, ``max_queue`` 4, ``max_batch_size`` 2: each may hold 2 waiting + 1 running)::

    >>> from trtlade.contract.serving import fair_share
    >>> ledger = ShareLedger(fair_share(2, 4, 2))
    >>> ends = [ledger.take("alice", 1) for _ in range(3)]
    >>> ledger.refusal("alice", 1) is not None, ledger.refusal("bob", 1) is None
    (True, True)
    >>> ends[0](); ledger.refusal("alice", 1) is None      # one ended: room for one more
    True
    >>> ledger.refusal("bob", 4) is not None               # n: 4 is more than a share
    True
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Hashable, Optional

from trtlade.contract.serving import FairShare
from trtlade.server.errors import ApiError

__all__ = ["ShareLedger", "counted"]


class ShareLedger:
    """Sequences each identity holds, against ``share``."""

    def __init__(self, share: FairShare) -> None:
        self.share = share
        self._held: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def refusal(self, identity: str, sequences: int) -> Optional[ApiError]:
        """The 429 for ``sequences`` more of ``identity`` (None: they fit its share)."""
        with self._lock:
            held = self._held[identity]
        if held + sequences <= self.share.held:
            return None
        return ApiError.overloaded(
            f"this API key has {held} sequences waiting or running and asks for {sequences} more, beyond its share "
            f"of this server ({self.share.describe()}); retry when some have finished", retry_after_s=1)

    def take(self, identity: str, sequences: int) -> Callable[[], None]:
        """Count ``sequences`` of ``identity`` until the returned call (idempotent) ends them."""
        return counted(self._held, identity, sequences, self._lock)


def counted(counter: collections.Counter, key: Hashable, amount: int, lock: threading.Lock) -> Callable[[], None]:
    """Add ``amount`` to ``counter[key]`` (under ``lock``) until the returned call takes it back; a second call
    does nothing, and a key back at 0 leaves the counter.

    >>> held, lock = collections.Counter(), threading.Lock()
    >>> end = counted(held, "alice", 3, lock); held
    Counter({'alice': 3})
    >>> end(); end(); held
    Counter()
    """
    with lock:
        counter[key] += amount
    ended = False

    def end() -> None:
        nonlocal ended
        with lock:
            if not ended:
                ended = True
                counter[key] -= amount
                if counter[key] <= 0:
                    del counter[key]
    return end

"""The ``auto`` draft policy: each step, which running sequences verify their drafts.

Lookahead is lossless whatever rows a step verifies (every emitted token is the greedy argmax), so
the engine may decide per step, per sequence, how many rows a sequence runs: all the rows of its
admitted (w,n,g), only its candidates (the n-gram pool's and prompt lookup's guesses, without the
Jacobi window's rows), only the first token of each candidate, or only its golden row (plain
decoding for that step; its n-gram pool keeps learning from the tokens it emits).
:class:`AutoPolicy` chooses the set of sequences that maximises the batch's expected tokens per
second, from two measurements:

* :class:`CostTable` -- the wall time of a step of one sequence by the rows it computes, calibrated
  at load and refined by every step the engine runs (so it is the cost of a row on *this* host; wider
  steps kept as ratios to the 1-row step of their time, so a calibration on a busy host does not
  stick); and
  for several sequences, the time of their plain steps by the number of sequences, measured while
  serving. In a batch of S sequences a draft row is first priced as one more sequence's row,
  ``(T(S) - T(1)) / (S - 1)``: on a CPU another sequence's row and a draft row go through the same
  GEMMs, and on a GPU with idle compute both are nearly free. Steps of S sequences that did draft
  then set the price: what their drafts cost them beyond ``T(S)`` (once there are three), as a price per
  draft row, or -- once steps with different numbers of draft rows were measured -- as a fixed price
  for drafting at all plus a price per row (:class:`DraftPrice`: on a GPU a drafting step pays for the
  padded attention and the host's verifying whatever its rows), never below one sequence's row cost
  from the table, and forgotten slowly while none drafts, so the prior gets its chance again;
* :class:`Acceptance` -- per sequence, the accepted drafts per drafted step so far, shrunk towards a
  prior: the server's recent history of accepted drafts. A sequence that has not drafted for a while
  forgets part of what it saw, so its estimate moves back to the prior and it is tried again when
  trying is cheap (an optimism bonus of ``explore`` standard deviations, smaller with more evidence).
  Both are kept per *context* of the step (``key``): the engine keys a step ``repeat`` when the text's
  last two tokens occurred earlier in prompt + output (n-gram and prompt-lookup drafts then often
  match) and ``fresh`` otherwise (only Jacobi guesses, rarely accepted), so a sequence drafts while its
  text repeats and runs plain decoding while it does not, without paying to find out each time. The plan
  prices an option at its estimate times what its own choices of that option in that context got over
  what they expected (:meth:`AutoPolicy.calibrated`): it chooses where an estimate came out high, so there
  the estimates run high. An option that did not run learns from the tokens the step emitted; a chain of
  it that matched them all and goes on counts for what the source's chains that were seen further go on
  to accept (:class:`ChainSurvival`), not for the lower bound it was seen to match.

Worked example: one sequence alone, 10 rows with its drafts, on a host where 10 rows cost 1.3x one
row: drafting pays if it expects more than 0.3 accepted drafts per step. Eight sequences on the same
host: 8 rows cost 44 ms and 17 rows 60 ms (1.36x), so one sequence's drafts would have to add 2.9
tokens to the batch's 8 -- more than any (2,4,2) step accepts: the batch runs plain decoding::

    >>> cost = CostTable()
    >>> for rows, ms in [(1, 31), (8, 44), (10, 40.3), (17, 60)]:
    ...     cost.add(rows, ms / 1000)
    >>> policy = AutoPolicy(cost)
    >>> alone = policy.new_sequence()
    >>> for accepted in (1, 0, 2, 1):          # what its drafted steps accepted
    ...     policy.observe(alone, drafted=True, accepted=accepted)
    >>> round(policy.expected(alone), 2), policy.plan([], [[(alone, 9)]])     # option 0: its 9 draft rows
    (0.84, [0])
    >>> busy = [policy.new_sequence() for _ in range(8)]
    >>> policy.plan([], [[(seq, 9)] for seq in busy])                         # -1: golden row only
    [-1, -1, -1, -1, -1, -1, -1, -1]
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

__all__ = ["CostTable", "DraftPrice", "Acceptance", "ChainSurvival", "AutoPolicy", "PolicyCounters",
           "no_dearer_than_wider"]


def _median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence (the mean of the middle two for an even count)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def no_dearer_than_wider(seconds: dict[int, float], stamps: Optional[dict[int, int]] = None) -> dict[int, float]:
    """Step times by rows, each at most the time of any wider step: a forward of fewer rows computes a
    part of a wider one, so a row count measured dearer was slowed by something else (on a shared host, a
    slow period can outlast every round of a calibration: 5 rows measured 62.9 ms beside 8 rows at 27.4).

    >>> no_dearer_than_wider({1: 0.021, 2: 0.031, 4: 0.027, 5: 0.062, 8: 0.027, 16: 0.036})
    {1: 0.021, 2: 0.027, 4: 0.027, 5: 0.027, 8: 0.027, 16: 0.036}

    With ``stamps`` (when each row count was last measured: larger is later), only a wider step measured at
    least as recently caps a row count: fresher evidence wins. A wide step measured once, after a short
    context, must not keep the narrower steps measured since, after long ones, at its price (bfloat16, 600
    cached tokens: 5 rows 14.4 ms, 7 rows 15.3, beside 8 rows at 12.2 from the calibration after 128):

    >>> no_dearer_than_wider({1: 11.7, 5: 14.4, 7: 15.3, 8: 12.2}, stamps={1: 9, 5: 8, 7: 7, 8: 1})
    {1: 11.7, 5: 14.4, 7: 15.3, 8: 12.2}
    >>> no_dearer_than_wider({1: 11.7, 5: 14.4, 7: 15.3, 8: 12.2}, stamps={1: 9, 5: 2, 7: 3, 8: 4})
    {1: 11.7, 5: 12.2, 7: 12.2, 8: 12.2}
    """
    stamps = stamps or {}  # none: every count measured alike, so every wider one caps
    capped: dict[int, float] = {}
    wider: list[tuple[int, float]] = []  # (stamp, seconds) of the counts above, as measured
    for rows in sorted(seconds, reverse=True):
        stamp = stamps.get(rows, 0)
        cap = value = seconds[rows]
        for measured_at, other in wider:
            if measured_at >= stamp and other < cap:
                cap = other
        capped[rows] = cap
        wider.append((stamp, value))
    return dict(sorted(capped.items()))


def _drafts_price(per_row: float, fit: Optional[tuple[float, float]], drafts: int) -> float:
    """``drafts`` draft rows at the measured median ``per_row``, or at the fitted ``(fixed, per row)`` price
    where that is more (:meth:`AutoPolicy.drafts_seconds`)."""
    measured = per_row * drafts
    return max(measured, fit[0] + fit[1] * drafts) if fit else measured


@dataclass
class CostTable:
    """Median wall time of steps by row count, and the ratio to a 1-row step.

    >>> t = CostTable()
    >>> for rows, s in [(1, 0.030), (1, 0.032), (4, 0.036), (8, 0.042)]:
    ...     t.add(rows, s)
    >>> round(t.ratio(8), 3), round(t.ratio(6), 3), round(t.ratio(16), 3)   # measured, interpolated, extrapolated
    (1.355, 1.258, 1.742)

    ``relative=True`` keeps a step of several rows as its ratio to the 1-row steps measured by then,
    and gives its time at today's 1-row median: a table calibrated while the host was busy (every step
    3x slower) still costs rows right once the 1-row steps, measured all the time, speed up -- the
    wider steps, measured only when some sequence drafts, would otherwise keep the busy times and the
    policy would never draft again to find out. A wider step before any 1-row step is not kept.

    >>> busy = CostTable(relative=True)
    >>> for rows, s in [(1, 0.090), (8, 0.105)]:      # calibrated on a busy host
    ...     busy.add(rows, s)
    >>> for _ in range(3):
    ...     busy.add(1, 0.020)                        # serving, the host quiet again
    >>> round(1000 * busy.seconds(8), 2), round(busy.ratio(8), 3)
    (23.33, 1.167)

    ``capped=True`` prices no row count above a wider one measured since, as the calibration keeps them
    (:func:`no_dearer_than_wider`): a forward of fewer rows computes a part of a wider one. While serving, a
    row count the plan rarely chooses keeps the few samples it has; one taken in a slow moment would make it
    look dearer than wider steps, the plan would avoid it, and no sample would come to correct it (seen
    served on a 2-core Zen 5: 4 rows at 31.2 ms beside 5 to 10 rows at 19.0-20.9). A price too low is
    corrected the other way: the plan chooses that row count and measures it.

    >>> served = CostTable(capped=True)
    >>> for rows, ms in [(1, 18.8), (4, 31.2), (5, 20.4), (8, 20.6), (16, 22.1)]:
    ...     served.add(rows, ms / 1000)
    >>> [round(1000 * served.seconds(r), 1) for r in (1, 3, 4, 5, 12, 16, 32)]
    [18.8, 19.9, 20.4, 20.4, 21.4, 22.1, 25.1]

    Only a wider count measured at least as recently caps (``stamps``: the order of each count's newest
    sample). Otherwise a wide count the plan no longer chooses, measured cheap before the requests' contexts
    grew (each row's attention reads every cached key), would keep the narrower counts measured since at its
    stale price, and choosing them would never correct it:

    >>> long_context = CostTable(capped=True)
    >>> for rows, ms in [(1, 10.8), (8, 12.2), (1, 11.7), (5, 14.4), (7, 15.3)]:
    ...     long_context.add(rows, ms / 1000)
    >>> [round(1000 * long_context.seconds(r), 1) for r in (5, 6, 7, 8)]   # 6: between 5 and 7
    [14.4, 14.8, 15.3, 12.2]
    """

    keep_last: int = 32
    samples: dict[int, list[float]] = field(default_factory=dict)
    relative: bool = False
    capped: bool = False
    #: the order of each row count's newest sample (larger: later), which wider counts may cap it (``capped``)
    stamps: dict[int, int] = field(default_factory=dict)
    #: medians and the measured row counts, each kept until a sample changes it (the auto policy's plan for
    #: 8 sequences asks for them about 13 times a step: 105 -> 43 us hot with them kept, 2-core Zen 4; and a
    #: sample of one row count leaves the others' medians as they were)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    #: :meth:`seconds` by rows until any sample changes (a plan of 8 sequences prices about 18 row counts, and
    #: while several sequences decode this table, one sequence's, does not change)
    _seconds: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def add(self, rows: int, seconds: float) -> None:
        rows, value = int(rows), float(seconds)
        if self.relative and rows != 1:
            one = self._median(1)
            if not one:
                return
            value /= one
        bucket = self.samples.setdefault(rows, [])
        bucket.append(value)
        if len(bucket) > self.keep_last:
            del bucket[0]
        self.stamps[rows] = max(self.stamps.values(), default=0) + 1
        self._changed(rows, known=len(bucket) == 1)

    def drop_oldest(self, rows: int) -> None:
        """Forget the oldest sample of ``rows`` (none: nothing)."""
        bucket = self.samples.get(int(rows))
        if bucket:
            del bucket[0]
            if not bucket:
                self.stamps.pop(int(rows), None)
            self._changed(int(rows), known=not bucket)

    def _changed(self, rows: int, known: bool) -> None:
        """A sample of ``rows`` came or went: its median is stale, and the measured row counts too when its
        bucket was or became empty (a relative table's other medians scale with the 1-row one as they are
        read, so they stay)."""
        self._seconds.clear()  # interpolated and capped counts read the other counts' medians
        self._memo.pop(rows, None)
        self._memo.pop(("spread", rows), None)
        if known:
            self._memo.pop("known", None)
        if known or rows != 1 or not self.relative:  # a relative table's wider medians are ratios: the 1-row
            self._memo.pop("caps", None)            # median scales them all alike

    def median(self, rows: int) -> float | None:
        value = self._median(rows)
        if value is None or not self.relative or rows == 1:
            return value
        one = self._median(1)
        return None if one is None else value * one

    def _median(self, rows: int) -> float | None:
        if rows in self._memo:
            return self._memo[rows]
        bucket = self.samples.get(rows)
        value = _median(bucket) if bucket else None
        self._memo[rows] = value
        return value

    def spread(self, rows: int) -> float:
        """Half the interquartile range of the ``rows``-row samples over their median (0.0 without any).

        >>> t = CostTable()
        >>> for ms in (20, 21, 19, 20, 22, 18, 20, 20):
        ...     t.add(1, ms / 1000)
        >>> round(t.spread(1), 3)              # (21 - 20) / 2 / 20
        0.025
        """
        key = ("spread", rows)
        if key not in self._memo:
            ordered = sorted(self.samples.get(rows) or ())
            n = len(ordered)
            mid = _median(ordered) if n else 0.0
            self._memo[key] = 0.5 * (ordered[(3 * n) // 4] - ordered[n // 4]) / mid if mid > 0 else 0.0
        return self._memo[key]

    def _known(self) -> list[int]:
        """The row counts with a median, in order (a relative table's wider steps have none while it
        holds no 1-row step)."""
        if "known" not in self._memo:
            self._memo["known"] = sorted(k for k, v in self.samples.items() if v and self.median(k) is not None)
        return self._memo["known"]

    def copy(self) -> "CostTable":
        """A copy (another thread may be adding to this one)."""
        return dataclasses.replace(self, samples={k: list(v) for k, v in dict(self.samples).items()},
                                   stamps=dict(self.stamps))

    def seconds(self, rows: int) -> float | None:
        """Median time of a ``rows``-row step: measured, else interpolated between the nearest
        measured row counts, else extrapolated from the two largest (None without data). With
        ``capped``, each measured row count above one row is at most the median of any wider one, and
        so is every row count between (a row count beyond the widest measured costs at least that one)."""
        memo = self._seconds
        if rows in memo:
            return memo[rows]
        found = memo[rows] = self._seconds_now(rows)
        return found

    def _seconds_now(self, rows: int) -> float | None:
        known = self._known()
        if not known:
            return None
        exact = self._point(rows)
        if exact is not None:
            return exact
        if len(known) == 1:
            return self._point(known[0])
        i = bisect.bisect_left(known, rows)
        lo, hi = (known[-2], known[-1]) if i >= len(known) else (known[max(0, i - 1)], known[max(1, i)])
        t_lo, t_hi = self._point(lo), self._point(hi)
        value = t_lo + (t_hi - t_lo) * (rows - lo) / (hi - lo)
        if not self.capped:
            return value
        if i >= len(known):  # beyond the widest measured: never cheaper than it
            return max(value, t_hi)
        return min(value, self._point(known[bisect.bisect_right(known, rows)]))  # nor dearer than the next wider

    def _point(self, rows: int) -> float | None:
        """The median of ``rows`` (None: not measured), capped by the wider ones' (``capped``; not one row,
        the step every other is measured against)."""
        if not self.capped or rows == 1:
            return self.median(rows)
        caps = self._memo.get("caps")
        if caps is None:  # a relative table's medians above one row are ratios: capped as such
            caps = self._memo["caps"] = no_dearer_than_wider(
                {k: self._median(k) for k in self._known() if k != 1}, self.stamps)
        value = caps.get(rows)
        if value is None or not self.relative:
            return value
        one = self._median(1)
        return None if one is None else value * one

    def ratio(self, rows: int) -> float:
        """Cost of a ``rows``-row step in 1-row steps (1.0 without data or for rows <= 1)."""
        if rows <= 1:
            return 1.0
        one, many = self.seconds(1), self.seconds(rows)
        if not one or many is None:
            return 1.0
        return max(1.0, many / one)


@dataclass
class DraftPrice:
    """What drafts cost a step of S sequences beyond their plain step, as ``fixed + per_row * draft rows``,
    fitted to the last ``keep_last`` drafted steps of S sequences (made up to that many from S - 1 and S + 1:
    below): the slope is the median of the slopes between every two steps with different draft rows, the fixed
    price the median of what each step cost beyond its rows at that slope (Theil and Sen's line: a step slowed
    by something else moves neither much), neither below 0. No fit (None) with fewer than ``min_samples`` steps or
    a single number of draft rows among them.

    On an NVIDIA H200 (fp32 SmolLM2-135M, 16 sequences, plain step 16.7 ms) a step where all 16 drafted
    74 rows cost 4.5 ms more (measured), one where one sequence drafted its 6 about 2.8 ms more (its forward
    +1.0 ms and one drafting sequence's host work +1.75 ms, each measured) -- a price per row alone would
    charge the second 0.4 ms (at the first's rate) or the first 35 ms (at the second's):

    >>> price = DraftPrice()
    >>> for rows, ms in [(6, 2.8), (74, 4.5), (6, 2.9), (40, 3.7), (74, 4.4)]:
    ...     price.add(16, rows, ms / 1000)
    >>> fixed, per_row = price.fit(16)
    >>> round(1000 * fixed, 2), round(1000 * per_row, 4)
    (2.76, 0.0235)
    >>> price.fit(8) is None                 # nothing measured with 8 sequences
    True

    Where S has fewer than ``keep_last`` steps of its own, a fit at S also reads the latest steps of S - 1 and
    S + 1 sequences (``pool``), up to ``keep_last`` in all: what drafts cost beyond the plain step moves little
    from one sequence more or less, and at an occupancy a server rarely runs, three steps with two draft-row
    counts can let one slow step set the slope (a well-measured occupancy keeps its own line, and a fit never
    reads more than ``keep_last`` steps: 0.02-0.03 ms on a 2-core Xeon, against 0.24 ms for three occupancies'
    48). Served on that Xeon (family 6 model 207), 16 requests on 8 slots: 2 sequences' own steps fitted 16.4 ms
    a draft row, against 0.4-0.5 ms on the host's five other servers that hour. Three steps like these give such
    a slope alone, and 0.6 ms beside the steps of 3 sequences:

    >>> rare = DraftPrice()
    >>> for rows, ms in [(1, 0.6), (1, 0.5), (2, 17.0)]:                    # 2 sequences
    ...     rare.add(2, rows, ms / 1000)
    >>> round(1000 * DraftPrice(samples=rare.samples, pool=0).fit(2)[1], 2)  # alone
    16.45
    >>> for rows, ms in [(2, 1.3), (4, 2.5), (3, 1.9), (1, 0.7)]:           # 3 sequences
    ...     rare.add(3, rows, ms / 1000)
    >>> round(1000 * rare.fit(2)[1], 2)
    0.63
    """

    keep_last: int = 16
    min_samples: int = 3
    samples: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    #: occupancies either side whose steps join a fit
    pool: int = 1
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def add(self, seqs: int, draft_rows: int, seconds: float) -> None:
        bucket = self.samples.setdefault(int(seqs), [])
        bucket.append((int(draft_rows), float(seconds)))
        if len(bucket) > self.keep_last:
            del bucket[0]
        self._changed(int(seqs))

    def drop_oldest(self, seqs: int) -> None:
        bucket = self.samples.get(int(seqs))
        if bucket:
            del bucket[0]
            self._changed(int(seqs))

    def _changed(self, seqs: int) -> None:
        """Forget the fits that read the steps of ``seqs`` sequences: its own, and its neighbours' that have fewer
        than ``keep_last`` of their own (a full window reads no other occupancy's, so its fit stands)."""
        self._memo.pop(seqs, None)
        for near in range(seqs - self.pool, seqs + self.pool + 1):
            if near != seqs and len(self.samples.get(near, ())) < self.keep_last:
                self._memo.pop(near, None)

    def fit(self, seqs: int) -> Optional[tuple[float, float]]:
        """``(fixed seconds, seconds per draft row)`` for steps of ``seqs`` sequences (and their neighbours',
        ``pool``), or None."""
        seqs = int(seqs)
        if seqs not in self._memo:
            self._memo[seqs] = self._fit(self._pooled(seqs))
        return self._memo[seqs]

    def _pooled(self, seqs: int) -> list[tuple[int, float]]:
        """The steps a fit at ``seqs`` reads: its own, then its neighbours' newest (each neighbour's in turn) up to
        ``keep_last`` in all."""
        own = list(self.samples.get(seqs, ()))
        newest = [self.samples.get(seqs + d, [])[::-1] for p in range(1, self.pool + 1) for d in (-p, p)]
        near = [sample for turn in itertools.zip_longest(*newest) for sample in turn if sample is not None]
        return own + near[:max(0, self.keep_last - len(own))]

    def _fit(self, samples: list[tuple[int, float]]) -> Optional[tuple[float, float]]:
        if len(samples) < self.min_samples or len({d for d, _ in samples}) < 2:
            return None
        slopes = [(e2 - e1) / (d2 - d1) for i, (d1, e1) in enumerate(samples) for d2, e2 in samples[i + 1:]
                  if d2 != d1]
        per_row = max(0.0, _median(slopes))
        return max(0.0, _median([e - per_row * d for d, e in samples])), per_row


#: the occupancies the calibration tells apart: 1, 2, 3-4, 5-8, 9-16 ... sequences in a step
OCCUPANCY_LABELS = ("1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129+")


def occupancy(seqs: int) -> int:
    """The occupancy bucket of a step of ``seqs`` sequences (an index into :data:`OCCUPANCY_LABELS`).

    >>> [OCCUPANCY_LABELS[occupancy(n)] for n in (1, 2, 3, 4, 5, 8, 9, 300)]
    ['1', '2', '3-4', '3-4', '5-8', '5-8', '9-16', '129+']
    """
    return min(max(0, int(seqs) - 1).bit_length(), len(OCCUPANCY_LABELS) - 1)


class ChainSurvival:
    """How far one option's draft chains go on being accepted (one context/option key, the whole server): per
    position j of a chain, the share of the chains that reached j (every draft before it accepted) whose draft j
    was accepted too -- a Kaplan-Meier estimate, from every step that saw the option's chain, run or not.

    A chain that did not run is seen through the tokens the step emitted (the model's own continuation): it
    accepts its longest prefix matching them. Where it matched every one of them and goes on, what it would
    have accepted beyond them is *censored*: at least that many, the rest unknown. Counting it as exactly that
    many (a lower bound) priced the chains low: after a step of one draft row, a chain of 8 that matched both
    emitted tokens counted 2. The estimate counts a censored chain up to where it was seen, and
    :meth:`beyond` gives what it is expected to add from there, from the chains that were seen further.
    A position nobody saw yet is priced like the one before it (``BACKOFF`` pseudo-observations of its rate;
    the first of 1/2), and older observations fade (each keeps ``keep`` of its weight per newer one: about the
    last 256 count), so the estimate follows the server's text.

    Worked example: two chains of 4 ran, one accepted whole and one rejected at its third draft; a third
    chain of 4 matched the 2 tokens a step emitted (censored at 2). Position 3 was reached twice and accepted
    once, position 4 reached once and accepted: counted alone, the censored chain would accept 2 + 1/2 + 1/2 x 1
    = 3 drafts; each position's rate shrunk towards the one before it, 2 + 0.71 + 0.71 x 0.81 = 3.28, rather than
    the 2 it was seen to match::

        >>> chains = ChainSurvival(keep=1.0)
        >>> chains.add(accepted=4, length=4, censored=False)
        >>> chains.add(accepted=2, length=4, censored=False)
        >>> chains.add(accepted=2, length=4, censored=True)
        >>> [round(p, 2) for p in chains.rates(4)]
        [0.8, 0.92, 0.71, 0.81]
        >>> round(2 + chains.beyond(reached=2, length=4), 2)
        3.28
    """

    #: pseudo-observations of the position before's rate in each position's estimate (the first's: of 1/2)
    BACKOFF = 2.0
    #: positions kept (a longer chain is priced beyond it at the last one's rate)
    MAX_POSITIONS = 32

    def __init__(self, keep: float = 1.0 - 1.0 / 256) -> None:
        #: per position: chains that reached it, chains that accepted its draft (in units of ``_unit``)
        self.reached: list[float] = []
        self.accepted: list[float] = []
        self.keep = float(keep)
        # grows by 1 / keep per observation, so the older ones weigh less without rescaling every count: an add
        # runs on each drafted step of each sequence (0.6 us; fading every count instead, 2.2 us)
        self._unit = 1.0

    def add(self, accepted: int, length: int, censored: bool) -> None:
        """One chain of ``length`` drafts accepted ``accepted`` of them; ``censored``: it may have gone on
        (it matched every token the step emitted), else it stopped there (rejected, or accepted whole)."""
        self._unit /= self.keep
        if self._unit > 1e12:  # rescale before the floats lose the fresh observations
            self.reached = [x / self._unit for x in self.reached]
            self.accepted = [x / self._unit for x in self.accepted]
            self._unit = 1.0
        passed = min(int(accepted), self.MAX_POSITIONS)
        seen = passed + (not censored and accepted < length and passed < self.MAX_POSITIONS)
        while len(self.reached) < seen:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        unit = self._unit
        for j in range(seen):
            self.reached[j] += unit
        for j in range(passed):
            self.accepted[j] += unit

    def rates(self, length: int) -> list[float]:
        """The chance of each position's draft being accepted, once every draft before it was, up to ``length``."""
        out: list[float] = []
        reached, accepted = self.reached, self.accepted  # /version reads them while the engine adds
        rate, unit, backoff, known = 0.5, self._unit, self.BACKOFF, min(len(reached), len(accepted))
        for j in range(min(length, self.MAX_POSITIONS)):
            if j < known:
                rate = (accepted[j] / unit + backoff * rate) / (reached[j] / unit + backoff)
            out.append(rate)
        return out + [rate] * (length - len(out))

    def beyond(self, reached: int, length: int) -> float:
        """Accepted drafts expected after the first ``reached`` of a chain of ``length`` (all of them accepted)."""
        if reached >= length:
            return 0.0
        total, alive = 0.0, 1.0
        for rate in self.rates(length)[reached:]:
            alive *= rate
            total += alive
        return total


@dataclass
class Acceptance:
    """One sequence's accepted drafts per drafted step: a sum and a count that fade while it does
    not draft (``weight`` is the evidence behind the mean, in drafted steps)."""

    total: float = 0.0
    weight: float = 0.0
    drafted_steps: int = 0
    #: the context these steps share (the server keeps one prior per context)
    key: str = ""
    #: the exploration bonus shrinks with the server's tries in this context, not this sequence's
    #: (an option that learns from its own steps only: every sequence paying for tries would be dear)
    server_tries: bool = False
    #: what the plan expected when it last chose this option (uncalibrated), until the step's outcome
    chosen_expecting: Optional[float] = None
    #: ... in a step of how many sequences
    chosen_seqs: Optional[int] = None

    @property
    def mean(self) -> Optional[float]:
        return self.total / self.weight if self.weight > 0 else None


@dataclass
class PolicyCounters:
    """Running totals for /metrics: steps planned; per ``auto`` sequence and step, whether it drafted,
    was kept to its golden row (skipped) or had no draft for the option chosen (empty); the accepted
    drafts the policy expected from those that drafted and the ones they got."""

    steps: int = 0
    drafted: int = 0
    skipped: int = 0
    empty: int = 0
    expected_accepted: float = 0.0
    accepted: int = 0
    #: steps of ``auto`` sequences run without a plan, their golden rows only (:meth:`AutoPolicy.should_plan`)
    unplanned: int = 0
    #: per option the plan chose (``suffix``, ``prompt_lookup``, ``pool``, ``public``, ``first``, ``candidates``,
    #: ``full``), the sequence-steps it ran with drafts
    options: dict = field(default_factory=dict)
    #: per source option, the sequence-steps that ran its chains cut short (:meth:`AutoPolicy.cut_part`; not in
    #: ``options``)
    cuts: dict = field(default_factory=dict)


class AutoPolicy:
    """The ``auto`` policy of one engine (see the module docstring).

    ``prior_drafts``: accepted drafts per step assumed before the server has seen any;
    ``prior_weight``: how many drafted steps the prior counts for in a sequence's estimate;
    ``explore``: the optimism bonus in standard deviations of the server's accepted drafts (a new
    sequence gets the benefit of the doubt; it shrinks as the sequence drafts);
    ``fade``: per step without drafts, a sequence keeps this share of its evidence;
    ``memory``: at most this many drafted steps of evidence per sequence (old steps fade out);
    ``history``: the prior follows the last ~``history`` drafted steps of the whole server;
    ``max_margin``: the largest gain over the plain step a plan must promise before it drafts (the margin
    follows the measured spread of the step times, :meth:`noise`).
    """

    #: batched samples needed before they count; plain steps per forgotten sample
    MIN_BATCHED = 3
    FORGET_EVERY = 32
    #: step times needed before their spread sets the margin a plan must beat (:meth:`noise`)
    MIN_NOISE_SAMPLES = 8
    #: the most steps between two plans (:meth:`should_plan`), and the weight of a plan's news in its averages
    MAX_PLAN_EVERY = 8
    PLAN_NEWS = 1.0 / 8

    def __init__(self, cost: CostTable, *, prior_drafts: float = 0.5, prior_weight: float = 2.0,
                 explore: float = 1.0, fade: float = 0.98, memory: float = 16.0, history: int = 64,
                 max_margin: float = 0.2, censored_chains: bool = True) -> None:
        self.cost = cost
        #: the most a plan must gain over the plain step before it drafts (:meth:`noise`)
        self.max_margin = float(max_margin)
        #: plain steps of several sequences (one row each): seconds by the number of sequences
        self.plain = CostTable()
        #: steps of several sequences with drafts: seconds per draft row beyond the plain step, by sequences
        self.batched = CostTable()
        #: the same steps as a fixed price plus a price per draft row, by sequences
        self.price = DraftPrice()
        self._plain_since: dict[int, int] = {}  # sequences -> plain steps since a batched sample was forgotten
        self.prior_start = float(prior_drafts)
        self._priors: dict[str, list[float]] = {}  # context -> [mean, variance]
        self._tries: dict[str, int] = {}  # context -> drafted steps of the server's server_tries sequences
        self.prior_weight = float(prior_weight)
        self.explore = float(explore)
        self.fade = float(fade)
        self.memory = float(memory)
        self._alpha = 1.0 / max(1, history)
        self.counters = PolicyCounters()
        #: by sequences: [planning's share of the plain step, the gain its plans found, steps since the last]
        self._planning: dict[int, list[float]] = {}
        #: what the last plan expected over the plain step (0.0: it chose the plain step)
        self.last_gain = 0.0
        #: the most the last plan saw over the plain step, chosen or held back by the noise margin (0.0: nothing
        #: gains); what :meth:`should_plan` weighs a plan's host time against
        self.last_found = 0.0
        #: by context/option: [expected, accepted] over the steps the plan chose it, fading; and the same by
        #: context/option and occupancy (:func:`occupancy`)
        self._calibration: dict[str, list[float]] = {}
        self._calibration_by_occupancy: dict[tuple[str, int], list[float]] = {}
        #: by context/option: how far its chains go on being accepted (:meth:`observe_chain`)
        self._chains: dict[str, ChainSurvival] = {}
        #: a chain seen only up to the tokens a step emitted counts for what it is expected to reach (False:
        #: for what it was seen to match, a lower bound)
        self.censored_chains = bool(censored_chains)

    def new_sequence(self, key: str = "", server_tries: bool = False) -> Acceptance:
        return Acceptance(key=key, server_tries=server_tries)

    def _prior(self, key: str) -> list[float]:
        prior = self._priors.get(key)
        if prior is None:
            prior = self._priors[key] = [self.prior_start, 1.0]
        return prior

    @property
    def prior_mean(self) -> float:
        """The server's accepted drafts per drafted step, over every context (for reports)."""
        return self._prior("")[0]

    # ------------------------------------------------------------------ estimates
    def expected(self, seq: Acceptance, terms: Optional[dict] = None) -> float:
        """Accepted drafts expected from the sequence's next drafted step in its context (its mean,
        shrunk towards the server's in that context). ``terms``: :meth:`_terms` kept for one plan."""
        return (self._terms(seq.key, terms)[0] + seq.total) / (self.prior_weight + seq.weight)

    def _terms(self, key: str, terms: Optional[dict] = None, seqs: Optional[int] = None) -> tuple[float, float, float]:
        """What :meth:`expected`, :meth:`calibrated` and :meth:`bonus` read of a context/option, the same for every
        sequence in it: its prior mean times ``prior_weight``, its calibration factor, and ``explore`` times its
        standard deviation times ``prior_weight``. A plan keeps them in ``terms``: 8 sequences' 56 options share
        about a dozen keys. ``seqs``: the step's sequences (the calibration's occupancy; one plan, one ``seqs``)."""
        found = terms.get((key, seqs)) if terms is not None else None
        if found is None:
            mean, variance = self._prior(key)
            found = (mean * self.prior_weight, self._calibration_factor(key, seqs),
                     self.explore * math.sqrt(variance) * self.prior_weight)
            if terms is not None:
                terms[(key, seqs)] = found
        return found

    #: the calibration's prior, in accepted drafts (as if the plan had got what it expected that often), and the
    #: share of its sums each new choice keeps (it follows the last ~128 choices of the option in the context)
    CALIBRATION_PRIOR = 4.0
    CALIBRATION_KEEP = 1.0 - 1.0 / 128

    def calibrated(self, seq: Acceptance) -> float:
        """What the plan prices an option at: :meth:`expected`, times what the plan's own choices of this option
        in this context got over what they expected. The plan chooses an option where its estimate came out
        high, so on the steps it chose it the estimate runs high (the optimizer's curse): measured on the
        embedded model, SA's chain after a 1-token match was expected to accept 0.31 drafts where chosen and got
        0.08. Each option and context keeps its own ratio, shrunk towards 1 by ``CALIBRATION_PRIOR``.

        Worked example: an option expected to accept 1.0 draft, chosen 12 times, accepting 0 and 1 in turn:
        (6 + 4) / (12 + 4), about 0.63 of its estimate.

        >>> policy = AutoPolicy(CostTable(), prior_weight=0.0)
        >>> seq = policy.new_sequence("fresh/suffix")
        >>> seq.total, seq.weight = 16.0, 16.0            # its estimate: 1.0
        >>> for step in range(12):
        ...     _ = policy.count(seq, drafted=True)      # the plan chose it, expecting its estimate
        ...     policy.observe(seq, drafted=True, accepted=step % 2)
        ...     seq.total, seq.weight = 16.0, 16.0
        ...
        >>> round(policy.expected(seq), 2), round(policy.calibrated(seq), 2)
        (1.0, 0.63)
        """
        return self._calibrated(seq)

    def _calibrated(self, seq: Acceptance, terms: Optional[dict] = None, seqs: Optional[int] = None) -> float:
        return self.expected(seq, terms) * self._terms(seq.key, terms, seqs)[1]

    def _calibration_factor(self, key: str, seqs: Optional[int] = None) -> float:
        """The option's ratio in its context (:meth:`calibrated`); with ``seqs``, refined by the plan's choices of
        it in steps of as many sequences (:func:`occupancy`), shrunk towards that ratio by ``CALIBRATION_PRIOR``.

        The more sequences share a step, the dearer a row is to all of them and the pickier the plan: it drafts
        only the sequences whose estimates came out highest, so there they run higher above what they get (the
        optimizer's curse grows with the field it picks from). Measured on the embedded model, float32, a 2-core
        Intel Xeon with AMX, one engine alternating 2 and 8 slots (benchmarks/auto_batch.py --slots 2,8,2,8,2,8,
        two runs): with one ratio per
        option, the plan's choices got 0.92 of what they were priced at with 2 sequences and 0.81 with 8; by
        occupancy, 0.97 and 0.89. Worked example: an option got what it expected in steps of 2 (40 times, 1.0
        each) and half of it in steps of 8 (40 times): its ratio about 0.75 overall, 1.0 with 2, 0.5 with 8.

        >>> policy = AutoPolicy(CostTable())
        >>> policy.CALIBRATION_KEEP = 1.0
        >>> for _ in range(40):
        ...     policy._calibrate("repeat/suffix", 1.0, 1, seqs=2)
        ...     policy._calibrate("repeat/suffix", 1.0, 0.5, seqs=8)
        >>> [round(policy._calibration_factor("repeat/suffix", n), 2) for n in (None, 2, 8, 1)]
        [0.76, 0.98, 0.52, 0.76]
        """
        sums = self._calibration.get(key)
        if sums is None:
            return 1.0
        prior = self.CALIBRATION_PRIOR
        factor = (sums[1] + prior) / (sums[0] + prior)
        near = self._calibration_by_occupancy.get((key, occupancy(seqs))) if seqs is not None else None
        return factor if near is None else (near[1] + prior * factor) / (near[0] + prior)

    def _calibrate(self, key: str, expected: float, accepted: float, seqs: Optional[int] = None) -> None:
        """One choice of ``key``'s option that expected ``expected`` accepted drafts (uncalibrated) and got
        ``accepted``, in a step of ``seqs`` sequences (None: not known, the overall ratio only)."""
        kept = [self._calibration.setdefault(key, [0.0, 0.0])]
        if seqs is not None:
            kept.append(self._calibration_by_occupancy.setdefault((key, occupancy(seqs)), [0.0, 0.0]))
        for sums in kept:
            sums[0] = sums[0] * self.CALIBRATION_KEEP + expected
            sums[1] = sums[1] * self.CALIBRATION_KEEP + accepted

    def bonus(self, seq: Acceptance) -> float:
        """The exploration bonus of :meth:`optimistic`: ``explore`` standard deviations of the
        server's accepted drafts in this context, shrinking as ``1 / n`` with the sequence's drafted
        steps (a new sequence gets a few tries; after a dozen the bonus no longer pays for rows). For an
        option that learns from its own steps only (``server_tries``: the window's, whose rows cannot be
        judged without running them), ``n`` counts the server's tries in the context: each new sequence
        would otherwise pay for a dozen tries of its own, where the server's learn what they teach.

        >>> policy = AutoPolicy(CostTable())
        >>> for _ in range(6):                          # six tries of the window, by other sequences
        ...     policy.observe(policy.new_sequence("x/full", server_tries=True), drafted=True, accepted=1)
        >>> new = policy.new_sequence("x/full", server_tries=True)
        >>> were_its_own = policy.new_sequence("x/full")
        >>> round(policy.bonus(new) / policy.bonus(were_its_own), 2)      # 2/(2+6) against 2/(2+0)
        0.25
        """
        return self._bonus(seq)

    def _bonus(self, seq: Acceptance, terms: Optional[dict] = None) -> float:
        tries = self._tries.get(seq.key, 0) if seq.server_tries else seq.drafted_steps
        return self._terms(seq.key, terms)[2] / (self.prior_weight + tries)

    def optimistic(self, seq: Acceptance) -> float:
        """:meth:`expected` plus :meth:`bonus` (what the plan ranks by); the bonus shrinks with every
        step the sequence drafts and, unlike the mean, does not fade back."""
        return self.expected(seq) + self.bonus(seq)

    def step_seconds(self, rows: int, seqs: int = 1) -> float:
        """The cost model: seconds of a step of ``seqs`` sequences computing ``rows`` rows (1.0
        without data: then every draft row is free and every sequence drafts).

        One sequence: the calibrated table by rows. Several: their measured plain step ``T(S)`` plus the
        draft rows, priced by what drafted steps of S sequences cost (:meth:`drafts_seconds`) once enough
        were measured, else at another sequence's row, ``(T(S) - T(1)) / (S - 1)`` each (a prior: that row
        also pays for its own attention and its request's serving, which a draft row shares -- served on a
        2-core Zen 4, 2 sequences: 3 ms a sequence, 1 ms a draft row); never below one sequence's marginal
        row cost from the table. Without a measured plain step for S yet, the one-sequence table.
        """
        return self.step_costs(seqs)(rows)

    def step_costs(self, seqs: int = 1) -> Callable[[int], float]:
        """:meth:`step_seconds` of ``seqs`` sequences as a function of the rows, with what does not depend on
        the rows (the plain step, one row's cost, the measured draft price) looked up once: a plan prices
        several row counts of the same step (4 bfloat16 sequences on a 2-core Intel Xeon, family 6 model 167, timed in
        one run each way: 0.14 -> 0.08 ms a step, within the step's noise).

        >>> policy = AutoPolicy(CostTable())
        >>> for rows, ms in [(1, 10.0), (4, 12.0), (8, 14.0)]:
        ...     policy.observe_cost(rows, ms / 1000)
        >>> for _ in range(3):
        ...     policy.observe_cost(4, 0.016, seqs=4)           # plain steps of 4 sequences
        >>> cost = policy.step_costs(4)
        >>> [round(1000 * cost(rows), 2) for rows in (4, 8)]    # 16 ms; + 4 draft rows at (16 - 10) / 3 ms each
        [16.0, 24.0]
        >>> cost(8) == policy.step_seconds(8, 4)
        True
        """
        seqs = max(1, int(seqs))
        table = self.cost
        base = self.plain.seconds(seqs) if seqs > 1 else None
        one = table.seconds(1)
        if base is None or not one:
            def alone(rows: int) -> float:
                seconds = table.seconds(max(1, int(rows)))
                return seconds if seconds else 1.0
            return alone
        per_sequence = max(0.0, (base - one) / (seqs - 1))
        alone_low = table.seconds(seqs)
        per_row = self.measured_row(seqs)
        fit = self.price.fit(seqs) if per_row else None

        def several(rows: int) -> float:
            rows = max(1, int(rows))
            if rows <= seqs:
                return base
            alone = table.seconds(rows)
            per_draft = (alone - alone_low) / (rows - seqs) if alone and alone_low else 0.0
            drafts = rows - seqs
            measured = _drafts_price(per_row, fit, drafts)  # drafts_seconds, its lookups made once
            return base + max(per_draft * drafts, measured if measured else per_sequence * drafts)
        return several

    def drafts_seconds(self, drafts: int, seqs: int) -> float:
        """What ``drafts`` draft rows cost a step of ``seqs`` sequences, from the drafted steps measured:
        the median price per row (:meth:`measured_row`) times ``drafts``, or the fitted fixed price plus
        price per row (:class:`DraftPrice`) where that is more; 0.0 without enough of them."""
        per_row = self.measured_row(seqs)
        return _drafts_price(per_row, self.price.fit(seqs) if per_row * drafts else None, drafts)

    def measured_row(self, seqs: int) -> float:
        """What a draft row cost steps of ``seqs`` sequences beyond their plain step: the median of the
        last ones, 0.0 with fewer than ``MIN_BATCHED`` samples.

        >>> policy = AutoPolicy(CostTable())
        >>> for _ in range(4):
        ...     policy.observe_cost(8, 0.020, seqs=8)          # plain steps of 8 sequences: 20 ms
        >>> for ms in (26, 28, 27):                            # 8 sequences + 4 draft rows
        ...     policy.observe_cost(12, ms / 1000, seqs=8)
        >>> round(1000 * policy.measured_row(8), 2), policy.measured_row(4)
        (1.75, 0.0)
        """
        return self._measured_row(self.batched, seqs)

    @classmethod
    def _measured_row(cls, batched: CostTable, seqs: int) -> float:
        samples = batched.samples.get(int(seqs))
        if not samples or len(samples) < cls.MIN_BATCHED:
            return 0.0
        return batched.median(int(seqs)) or 0.0

    # ------------------------------------------------------------------ the choice
    def plan(self, fixed: Sequence[tuple[int, float]], candidates: Sequence[Sequence[tuple]],
             caps: Optional[Sequence[Optional[int]]] = None) -> list[int]:
        """Which draft option each candidate sequence runs this step: an index into its options,
        or -1 for its golden row only.

        ``candidates[i]``: sequence i's options as ``(acceptance, draft rows)``, each containing the
        one before (e.g. its prompt-lookup and pool candidates only, then all its rows), so an option
        is expected to accept at least what the one before it does; or as ``(acceptance, draft rows,
        within)``, ``within`` naming the options (indices) it holds, so that options need not nest
        (one drafter's chain beside another's), or ``(..., within, part, most)`` (:meth:`_nested_gains`: a share of
        the estimate, and the most drafts its rows can accept). An option with no draft rows is passed over.
        ``fixed``: the step's other sequences as ``(rows, expected tokens)`` (explicit specs, plain decoding).
        Every option is ranked by optimistic accepted drafts per draft row; walking down that ranking, each option
        that gains more than what its sequence has so far replaces it, and the step keeps the
        assignment seen with the most expected tokens per second. ``caps[i]``: the most drafts sequence i can
        still emit (its budget's end; None: no bound): no option of it is expected to gain more.

        A chain expected to accept 3 drafts, of a sequence with 1 token left beyond the step's own: worth 1
        draft, not the 3 its 4 rows would cost the step 2.2 times a plain step for.

        >>> cost = CostTable()
        >>> for rows, seconds in [(1, 1.0), (5, 2.2)]:
        ...     cost.add(rows, seconds)
        >>> policy = AutoPolicy(cost, prior_weight=0.0)
        >>> chain = policy.new_sequence("repeat/suffix")
        >>> chain.total, chain.weight, chain.drafted_steps = 3.0, 1.0, 1
        >>> policy.plan([], [[(chain, 4)]]), policy.plan([], [[(chain, 4)]], caps=[1])
        ([0], [-1])
        """
        self.counters.steps += 1
        rows = sum(r for r, _ in fixed) + len(candidates)
        tokens = sum(t for _, t in fixed) + len(candidates)
        seqs = len(fixed) + len(candidates)
        terms: dict = {}  # each context/option's prior and calibration, read once per plan
        caps = caps or [None] * len(candidates)
        items = sorted(((gain if cap is None else min(gain, cap), draft_rows, i, k)
                        for i, (options, cap) in enumerate(zip(candidates, caps))
                        for k, (gain, draft_rows) in enumerate(self._nested_gains(options, seqs, terms))
                        if draft_rows > 0),
                       key=lambda item: -item[0] / item[1])
        choice, gain, extra = [-1] * len(candidates), [0.0] * len(candidates), [0] * len(candidates)
        seconds: dict[int, float] = {}  # the step's cost by rows, each asked once per plan
        cost = self.step_costs(seqs)

        def step(rows: int) -> float:
            if rows not in seconds:
                seconds[rows] = cost(rows)
            return seconds[rows]

        # a draft must beat the plain step by more than the noise of the measured step times
        plain = tokens / step(rows)
        best, best_choice, top = plain * (1.0 + self.noise(seqs)), list(choice), plain
        for item_gain, item_rows, i, k in items:
            if item_gain <= gain[i]:
                continue  # sequence i already has an option that gains as much
            tokens += item_gain - gain[i]
            rows += item_rows - extra[i]
            choice[i], gain[i], extra[i] = k, item_gain, item_rows
            rate = tokens / step(rows)
            top = max(top, rate)
            if rate > best:
                best, best_choice = rate, list(choice)
        self.last_gain = best / plain - 1.0 if any(k >= 0 for k in best_choice) else 0.0
        self.last_found = top / plain - 1.0
        return best_choice

    def should_plan(self, seqs: int) -> bool:
        """Whether a step of ``seqs`` sequences plans at all. A plan costs host time (finding every sequence's
        drafts and ranking them: about 0.8 ms for 8 sequences on a 2-core Xeon, 2-3% of their step) and is worth
        what it finds: the most its cost model sees drafts gain over the plain step (:attr:`last_found`), 0 when
        no draft gains, counted also where the noise margin then holds the step to its golden rows (on a GPU,
        whose step times jitter by half, plans held back by the margin and then made once in a few steps starved
        the policy of the steps where the margin let drafts through: a plan every step delivered 1.04-1.06x `ar`
        at 8 sequences on an H200 where `auto` delivered 0.91-0.94x). Where
        its plans have found less than they cost (both averaged over the recent plans of ``seqs`` sequences,
        :meth:`observe_planning`), the step plans once every ``cost / found`` steps (at most
        ``MAX_PLAN_EVERY``) and the others run their golden rows without a plan. Plans that find drafts
        worth more than they cost bring planning back to every step once the average found passes the cost.

        Eight sequences where planning costs 2% of the step and the plans found a 10% gain once in 20 steps
        (0.5% a step): one plan in 4 steps. Two sequences whose plans find 15% at most steps: every step.

        >>> policy = AutoPolicy(CostTable())
        >>> policy.observe_planning(8, share=0.02, gain=0.005)
        >>> policy.observe_planning(2, share=0.007, gain=0.15)
        >>> [policy.should_plan(8) for _ in range(8)], all(policy.should_plan(2) for _ in range(8))
        ([False, False, False, True, False, False, False, True], True)
        """
        state = self._planning.get(int(seqs))
        if state is None:
            return True
        share, found, since = state
        if since + 1 >= self._plan_every(share, found):
            state[2] = 0
            return True
        state[2] = since + 1
        self.counters.unplanned += 1
        return False

    @classmethod
    def _plan_every(cls, share: float, found: float) -> int:
        """Steps between two plans that cost ``share`` of the step and find ``found`` over it, on average."""
        return 1 if found >= share else min(cls.MAX_PLAN_EVERY, math.ceil(share / max(found, 1e-9)))

    def observe_planning(self, seqs: int, share: float, gain: float) -> None:
        """A plan of ``seqs`` sequences took ``share`` of their plain step and found ``gain`` over it
        (:attr:`last_found`): the averages :meth:`should_plan` reads, each new plan weighing ``PLAN_NEWS``."""
        state = self._planning.get(int(seqs))
        if state is None:
            self._planning[int(seqs)] = [float(share), float(gain), 0]
            return
        state[0] += self.PLAN_NEWS * (share - state[0])
        state[1] += self.PLAN_NEWS * (gain - state[1])

    def noise(self, seqs: int = 1) -> float:
        """Half the interquartile range of the plain steps of ``seqs`` sequences (one sequence: its 1-row
        steps) over their median, at most ``max_margin``: the gain a plan must promise over the plain step
        before it drafts. On a quiet host the steps agree within a few percent and this is ~0.01; on a host
        shared with other jobs a step's time moves with theirs, each wider step's cost is a guess, and a
        draft that the cost model says gains 5% is a coin toss. 0.0 with fewer than ``MIN_NOISE_SAMPLES``.

        >>> policy = AutoPolicy(CostTable())
        >>> for ms in (20.0, 20.2, 19.9, 20.1, 20.0, 20.3, 19.8, 20.1):
        ...     policy.observe_cost(1, ms / 1000)
        >>> round(policy.noise(), 4)
        0.005
        >>> for ms in (20, 45, 22, 60, 21, 38, 19, 52):      # other jobs on the same cores
        ...     policy.observe_cost(1, ms / 1000)
        >>> policy.noise()
        0.2
        """
        return self._noise(self.cost, self.plain, seqs)

    def _noise(self, cost: CostTable, plain: CostTable, seqs: int = 1) -> float:
        """:meth:`noise` from these tables (the live ones, or a snapshot's copies)."""
        table, rows = (plain, int(seqs)) if seqs > 1 else (cost, 1)
        samples = table.samples.get(rows)
        if not samples or len(samples) < self.MIN_NOISE_SAMPLES:
            return 0.0
        return min(self.max_margin, table.spread(rows))

    def count(self, chosen: Optional[Acceptance], drafted: bool, cap: Optional[int] = None,
              seqs: Optional[int] = None, part: float = 1.0) -> str:
        """Count one ``auto`` sequence's step for /metrics once its rows are known, and return the
        decision: ``skipped`` (the plan gave it its golden row: ``chosen`` is None), ``drafted`` (its
        option had drafts to verify; what it expects from them, :meth:`calibrated`, is added to
        ``expected_accepted``, to compare with what it gets; at most ``cap``, the drafts its budget leaves;
        calibrated for a step of ``seqs`` sequences; ``part`` of it where its chains were cut short,
        :meth:`cut_part`) or ``empty`` (the option, planned on the rows it had at its last step, has no draft now,
        e.g. no candidate: the golden row ran and nothing was expected).

        >>> policy = AutoPolicy(CostTable())
        >>> seq = policy.new_sequence()
        >>> [policy.count(None, False), policy.count(seq, True), policy.count(seq, False)]
        ['skipped', 'drafted', 'empty']
        >>> c = policy.counters
        >>> (c.drafted, c.skipped, c.empty, c.expected_accepted)
        (1, 1, 1, 0.5)
        """
        counters = self.counters
        if chosen is None:
            counters.skipped += 1
            return "skipped"
        if not drafted:
            counters.empty += 1
            return "empty"
        counters.drafted += 1
        terms: dict = {}  # its prior and calibration (for ``seqs``: read first), read once
        limit = math.inf if cap is None else cap
        counters.expected_accepted += min(self._calibrated(chosen, terms, seqs) * part, limit)  # what the plan priced
        chosen.chosen_expecting = min(self.expected(chosen, terms) * part, limit)  # the calibration compares it
        chosen.chosen_seqs = seqs
        return "drafted"

    def _nested_gains(self, options: Sequence[tuple[Acceptance, int]], seqs: int = 1,
                      terms: Optional[dict] = None) -> list[tuple[float, int]]:
        """Optimistic gain and draft rows per option, from its :meth:`calibrated` estimate; an option holds the
        one before it (or those its ``within`` names, before or after it, when they have a draft now), so it is
        expected to accept at least as much (plus its own exploration bonus). In a step of ``seqs``
        sequences the bonus is divided by ``seqs``: what a try teaches helps one sequence, while its
        rows delay all of them (measured, 8 sequences on the embedded model: the full bonus cost 10%
        of ``ar``'s throughput, a bonus of 0 about nothing; alone the bonus is what finds the
        sequences whose drafts pay). An option given as ``(acceptance, rows, within, part, most)`` holds ``part`` of its
        estimate and bonus (below 1.0: its chains cut short, :meth:`cut_part`) and is never worth more than ``most``,
        the drafts its rows can accept this step (the estimate prices chains of every length seen; a chain of 2 accepts
        at most 2), nor lends more to the options holding it."""
        terms = {} if terms is None else terms
        weight, tries_by_key = self.prior_weight, self._tries
        floors: list[float] = []  # an option without rows now holds nothing: never a floor (-inf), not priced
        bonuses: list[float] = []
        depths: list[float] = []  # the most each option can accept this step
        for option in options:  # _calibrated and _bonus, inlined: a plan of 8 sequences prices 56 options
            seq = option[0]
            if option[1] <= 0:
                floors.append(-math.inf)
                bonuses.append(0.0)
                depths.append(math.inf)
                continue
            prior, factor, spread = terms.get((seq.key, seqs)) or self._terms(seq.key, terms, seqs)
            part = option[3] if len(option) > 3 else 1.0
            most = option[4] if len(option) > 4 else math.inf
            floors.append(min((prior + seq.total) / (weight + seq.weight) * factor * part, most))
            tries = tries_by_key.get(seq.key, 0) if seq.server_tries else seq.drafted_steps
            bonuses.append(spread / (weight + tries) * part)
            depths.append(most)
        held = [option[2] if len(option) > 2 else range(k) for k, option in enumerate(options)]
        changed = True
        while changed:  # an option holds what the options it holds hold (they need not come before it)
            changed = False
            for k, within in enumerate(held):
                if floors[k] == -math.inf:
                    continue
                for j in within:
                    if floors[j] > floors[k]:
                        floors[k], changed = floors[j], True
        share = 1.0 / max(1, seqs)
        return [(min(floor + bonus * share, depth), option[1]) if option[1] > 0 else (0.0, 0)
                for floor, bonus, depth, option in zip(floors, bonuses, depths, options)]

    # ------------------------------------------------------------------ learning
    def observe(self, seq: Acceptance, *, drafted: bool, accepted: int = 0, planned: bool = True) -> None:
        """After a step: a drafted step adds its ``accepted`` drafts to the sequence and to the
        server's history; a step without drafts fades the sequence's evidence. ``planned``: the
        policy chose this step's drafts (counted against what it expected, for /metrics)."""
        if not drafted:
            self.fade_all((seq,))
            return
        seq.total += accepted
        seq.weight += 1.0
        seq.drafted_steps += 1
        if seq.server_tries:
            self._tries[seq.key] = self._tries.get(seq.key, 0) + 1
        if planned:
            self.counters.accepted += accepted
            if seq.chosen_expecting is not None:
                self._calibrate(seq.key, seq.chosen_expecting, accepted, seq.chosen_seqs)
                seq.chosen_expecting = None
        if seq.weight > self.memory:
            scale = self.memory / seq.weight
            seq.total *= scale
            seq.weight = self.memory
        for key in {seq.key, ""}:  # its context's prior, and the server-wide one
            prior = self._prior(key)
            delta = accepted - prior[0]
            prior[0] += self._alpha * delta
            prior[1] = (1 - self._alpha) * (prior[1] + self._alpha * delta * delta)

    def fade_all(self, seqs: Sequence[Acceptance]) -> None:
        """A step without drafts for each of ``seqs`` (``observe(seq, drafted=False)`` for each, in one call: a
        golden step fades every option's evidence of its sequence).

        >>> policy = AutoPolicy(CostTable(), fade=0.5)
        >>> seqs = [Acceptance(total=4.0, weight=2.0), Acceptance(total=1.0, weight=1.0)]
        >>> policy.fade_all(seqs); [(s.total, s.weight) for s in seqs]
        [(2.0, 1.0), (0.5, 0.5)]
        """
        fade = self.fade
        for seq in seqs:
            seq.total *= fade
            seq.weight *= fade

    def observe_chosen(self, seq: Acceptance, accepted: int) -> None:
        """A step the plan chose the option ``seq`` estimates for, its chains cut short (:meth:`cut_part`), accepted
        ``accepted`` drafts: counted for /metrics and in the calibration against what the plan expected of the cut
        (:meth:`count`), not in the estimate, which prices the whole chains (the step teaches it as a step that did
        not run them: what they matched of the emitted tokens, :meth:`observe_chain`).

        >>> policy = AutoPolicy(CostTable(), prior_weight=0.0)
        >>> seq = policy.new_sequence("fresh/prompt_lookup")
        >>> seq.total, seq.weight = 2.0, 2.0
        >>> policy.count(seq, drafted=True, part=0.5)       # the cut holds half of the estimate of 1.0
        'drafted'
        >>> policy.observe_chosen(seq, accepted=1)
        >>> policy.counters.accepted, (seq.total, seq.weight), policy._calibration["fresh/prompt_lookup"]
        (1, (2.0, 2.0), [0.5, 1.0])
        """
        self.counters.accepted += accepted
        if seq.chosen_expecting is not None:
            self._calibrate(seq.key, seq.chosen_expecting, accepted, seq.chosen_seqs)
            seq.chosen_expecting = None

    def cut_part(self, seq: Acceptance, depth: int, length: int) -> float:
        """The share of the accepted drafts expected of a chain of ``length`` that its first ``depth`` hold: from the
        option's :class:`ChainSurvival` (a position nobody saw yet priced like the one before it, the first with no
        data at all at 1/2), the expected accepted drafts up to
        ``depth`` over those up to ``length``. Where a row more costs a jump (on a 2-core AMD EPYC Zen 3, float32: 4
        rows 1.09x one row, 5 rows 1.22x), a chain of 4 cut to 3 keeps most of what it accepts for a cheaper step.

        Without data, each draft at 1/2: up to 1 of 4, 0.5 of 0.9375 expected drafts; up to 3, 0.875 of them.

        >>> policy = AutoPolicy(CostTable())
        >>> seq = policy.new_sequence("fresh/suffix")
        >>> [round(policy.cut_part(seq, depth, 4), 3) for depth in (1, 3, 4)]
        [0.533, 0.933, 1.0]
        """
        if depth < 1:
            return 0.0
        return self.cut_parts(seq, length)[depth - 1] if depth < length else 1.0

    def cut_parts(self, seq: Acceptance, length: int) -> list[float]:
        """:meth:`cut_part` at every depth from 1 to ``length`` - 1, from one reading of the rates.

        >>> [round(part, 3) for part in AutoPolicy(CostTable()).cut_parts(Acceptance(key="fresh/suffix"), 4)]
        [0.533, 0.8, 0.933]
        """
        chains = self._chains.get(seq.key)
        rates = chains.rates(length) if chains is not None else [0.5] * length
        alive, reached = 1.0, []
        for rate in rates:
            alive *= rate
            reached.append(alive + (reached[-1] if reached else 0.0))
        total = reached[-1] if reached else 0.0
        return [within / total if total > 0 else 1.0 for within in reached[:-1]]

    def observe_chain(self, seq: Acceptance, accepted: int, length: int, censored: bool) -> float:
        """A chain of ``length`` drafts of the option ``seq`` estimates, seen this step (run or not), accepted
        ``accepted`` drafts, and ``censored``: it matched every token the step emitted and goes on. Teaches the
        option's :class:`ChainSurvival` and returns what the chain counts for in ``seq``'s estimate: ``accepted``,
        plus for a censored chain the drafts it is expected to accept beyond them.

        >>> policy = AutoPolicy(CostTable())
        >>> seq = policy.new_sequence("repeat/suffix")
        >>> for _ in range(6):                                    # chains of 6 that ran, accepted whole
        ...     _ = policy.observe_chain(seq, 6, 6, censored=False)
        >>> round(policy.observe_chain(seq, 2, 6, censored=True), 2)   # seen up to 2 tokens: about 6
        5.97
        >>> policy.observe_chain(seq, 2, 6, censored=False)            # rejected at its third draft
        2
        """
        chains = self._chains.get(seq.key)
        if chains is None:
            chains = self._chains[seq.key] = ChainSurvival()
        chains.add(accepted, length, censored)
        if not censored or not self.censored_chains:
            return accepted
        return accepted + chains.beyond(accepted, length)

    def observe_cost(self, rows: int, seconds: float, seqs: int = 1) -> None:
        """A decoding step of ``seqs`` sequences and ``rows`` rows took ``seconds``: keeps the cost
        model current (one sequence: by rows; several with one row each: by sequences; several with
        drafts: the cost of a draft row beyond their plain step, once that step is measured)."""
        if rows < 1 or seconds <= 0:
            return
        if seqs <= 1:
            self.cost.add(rows, seconds)
        elif rows == seqs:
            self.plain.add(seqs, seconds)
            self._forget(seqs)
        elif rows > seqs and (base := self.plain.median(seqs)) is not None:
            extra = max(0.0, seconds - base)
            self.batched.add(seqs, extra / (rows - seqs))
            self.price.add(seqs, rows - seqs, extra)
            self._plain_since[seqs] = 0

    def _forget(self, seqs: int) -> None:
        """Every ``FORGET_EVERY`` plain steps of ``seqs`` sequences without a drafted one, the oldest
        batched sample goes: a cost measured once does not keep the batch from drafting for good."""
        since = self._plain_since.get(seqs, 0) + 1
        if since >= self.FORGET_EVERY and self.batched.samples.get(seqs):
            self.batched.drop_oldest(seqs)
            self.price.drop_oldest(seqs)
            since = 0
        self._plain_since[seqs] = since

    def snapshot(self) -> dict:
        """The live cost model and acceptance prior, as data (for /version and engine stats)."""
        cost = self.cost.copy()  # the engine thread may be adding to it
        measured = sorted(k for k, v in cost.samples.items() if v)
        one = cost.seconds(1)
        per_row = None
        if one and measured and measured[-1] > 1:
            top = measured[-1]
            per_row = (cost.seconds(top) - one) / (top - 1)
        plain, batched = self.plain.copy(), self.batched.copy()  # copies: their memos are this thread's
        price = DraftPrice(samples={k: list(v) for k, v in dict(self.price.samples).items()}, pool=self.price.pool)
        c = self.counters
        return {
            "step_ms": {rows: round(1000 * cost.seconds(rows), 2) for rows in measured},
            "plain_step_ms_by_sequences": {seqs: round(1000 * plain.seconds(seqs), 2)
                                           for seqs in sorted(k for k, v in plain.samples.items() if v)},
            "row_cost_ms": None if per_row is None else round(1000 * per_row, 3),
            "noise_margin_by_sequences": {seqs: round(self._noise(cost, plain, seqs), 3)
                                          for seqs in sorted({1, *(k for k, v in plain.samples.items() if v)})},
            "batched_row_cost_ms": {seqs: round(1000 * self._measured_row(batched, seqs), 3)
                                    for seqs in sorted(k for k, v in batched.samples.items()
                                                       if len(v) >= self.MIN_BATCHED)},
            "draft_price_ms": {seqs: {"fixed": round(1000 * fit[0], 3), "per_row": round(1000 * fit[1], 4)}
                               for seqs in sorted(price.samples) if (fit := price.fit(seqs))},
            "prior_accepted_drafts": round(self.prior_mean, 3),
            "prior_by_context": {key or "all": round(prior[0], 3) for key, prior in sorted(dict(self._priors).items())},
            "server_tries_by_context": {key or "all": n for key, n in sorted(dict(self._tries).items())},
            "calibration_by_option": {key or "all": round(self._calibration_factor(key), 3)
                                      for key in sorted(dict(self._calibration))},
            "calibration_by_option_and_sequences": {
                f"{key}@{OCCUPANCY_LABELS[bucket]}": round(self._calibration_factor(key, 1 << bucket), 3)
                for key, bucket in sorted(dict(self._calibration_by_occupancy))},
            "chain_rates_by_option": {key: [round(p, 3) for p in chains.rates(min(len(chains.reached), 8))]
                                      for key, chains in sorted(dict(self._chains).items())},
            "steps": c.steps, "drafted": c.drafted, "skipped": c.skipped, "empty": c.empty,
            "expected_accepted": round(c.expected_accepted, 1), "accepted": c.accepted,
            "unplanned_steps": c.unplanned,
            "planning_by_sequences": {seqs: {"share_of_step": round(v[0], 4), "gain_found": round(v[1], 4),
                                             "plan_every": self._plan_every(v[0], v[1])}
                                      for seqs, v in sorted(dict(self._planning).items())},
            "options": dict(sorted(dict(c.options).items())),
            "cut_options": dict(sorted(dict(c.cuts).items())),
        }

"""The reference engine's in-flight batching rules, as numbers (no torch): who runs, with how many rows.

Two limits, named and counted as TensorRT-LLM's engine counts them:

* ``max_batch_size`` -- sequences running at once (``build.max_batch_size``); later requests wait,
  first come, first served;
* ``max_num_tokens`` -- rows one forward pass may compute (``build.max_num_tokens``). A generation
  request costs ``1 + its draft rows``; when the rows do not fit, drafts are dropped (TensorRT-LLM's
  ``fitDraftTokens``) before any request is delayed: every running sequence always gets its golden
  row, and the drafts go to the oldest requests first. A prompt is prefilled in chunks of at most
  ``max_num_tokens`` rows.

Worked example: four running requests want 9, 1, 9 and 4 rows under a budget of 16: the golden
rows take 4, the first request's 8 drafts fit (12), the third's do not (20 > 16) and the fourth's 3
do (15)::

    >>> fit_rows([9, 1, 9, 4], max_num_tokens=16)
    [9, 1, 1, 4]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from trtlade.contract.protocol import StepReport
from trtlade.errors import TrtladeError

__all__ = ["BatchLimits", "PrefillPacer", "StepReport", "fit_rows", "default_max_num_tokens", "idle_rows", "long_stall"]


def default_max_num_tokens(max_batch_size: int, decoding_tokens: int) -> int:
    """What ``trtllm-build`` raises ``max_num_tokens`` to at least: every sequence's full step.

    >>> default_max_num_tokens(8, 12)     # (2,4,2): 11 drafts + the golden row
    96
    """
    return int(max_batch_size) * int(decoding_tokens)


class BatchLimitsError(TrtladeError, ValueError):
    """A batch's limits that no batch can run with (``where``: the argument)."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message, "see ReferenceEngine.new_batch's arguments (docs/guides/reference-engine.md)",
                         where=where)


@dataclass(frozen=True)
class BatchLimits:
    """``max_batch_size`` running sequences, ``max_num_tokens`` rows per step (None: every
    sequence's full step always fits), ``prefill_chunk`` prompt rows a step computes next to the
    sequences decoding (None: a new prompt is prefilled whole, in a forward of its own, before the
    step's decode pass), at most: with ``prefill_stall`` the rows a step adds are paced so the decoding
    sequences' steps take at most that many times as long on average (:class:`PrefillPacer`).
    ``idle_chunk``: with nothing decoding, the most rows of a longer prompt one step computes (None: it is
    prefilled whole in that step), so that a cancel or a new request is seen between its chunks.

    With ``prefill_chunk``, drafts yield to prompt chunks under ``max_num_tokens``: four sequences
    wanting 9 rows each, a budget of 24 and a chunk of 8 leave the decoders 16 rows, and the chunk
    gets what they leave::

        >>> limits = BatchLimits(4, max_num_tokens=24, prefill_chunk=8)
        >>> rows = limits.rows([9, 9, 9, 9], reserve=8); rows, limits.chunk_room(sum(rows))
        ([9, 1, 1, 1], 8)
    """

    max_batch_size: int = 8
    max_num_tokens: Optional[int] = None
    prefill_chunk: Optional[int] = None
    prefill_stall: Optional[float] = None
    #: the most slots the sequences of one identity may hold at once (None: up to ``max_batch_size``)
    max_running_per_identity: Optional[int] = None
    idle_chunk: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens", "prefill_chunk", "max_running_per_identity", "idle_chunk"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BatchLimitsError(f"{name} must be a whole number, got {value!r}", where=name)
        if self.max_batch_size < 1:
            raise BatchLimitsError(f"max_batch_size must be >= 1, got {self.max_batch_size}", where="max_batch_size")
        if self.max_num_tokens is not None and self.max_num_tokens < self.max_batch_size:
            raise BatchLimitsError(f"max_num_tokens ({self.max_num_tokens}) must be >= max_batch_size "
                                   f"({self.max_batch_size}): every running sequence needs its golden row",
                                   where="max_num_tokens")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise BatchLimitsError(f"prefill_chunk must be >= 1 (or None: whole prompts), got {self.prefill_chunk}",
                                   where="prefill_chunk")
        if self.idle_chunk is not None and self.idle_chunk < 1:
            raise BatchLimitsError(f"idle_chunk must be >= 1 (or None: whole prompts), got {self.idle_chunk}",
                                   where="idle_chunk")
        stall = self.prefill_stall
        if stall is not None and (isinstance(stall, bool) or not isinstance(stall, (int, float)) or not stall > 1.0
                                  or stall == float("inf")):
            raise BatchLimitsError(f"prefill_stall must be a finite number > 1 (or None: fixed chunks), got {stall!r}",
                                   where="prefill_stall")
        if self.max_running_per_identity is not None and self.max_running_per_identity < 1:
            raise BatchLimitsError(f"max_running_per_identity must be >= 1 (or None: up to max_batch_size), got "
                                   f"{self.max_running_per_identity}: no request could ever run",
                                   where="max_running_per_identity")

    def rows(self, wanted: Sequence[int], reserve: int = 0) -> list[int]:
        """Rows each decoding sequence computes, ``reserve`` rows of ``max_num_tokens`` kept for prompt
        chunks (never the golden rows: each sequence keeps one)."""
        if self.max_num_tokens is None:
            return list(wanted)
        return fit_rows(wanted, max(len(wanted), self.max_num_tokens - int(reserve)))

    def chunk_room(self, decode_rows: int, cap: Optional[int] = None) -> int:
        """Prompt rows a step may add next to ``decode_rows`` decoding rows: ``cap`` (default
        ``prefill_chunk``; 0 without it), within ``max_num_tokens``."""
        room = (self.prefill_chunk or 0) if cap is None else cap
        return room if self.max_num_tokens is None else max(0, min(room, self.max_num_tokens - decode_rows))


def fit_rows(wanted: Sequence[int], max_num_tokens: int) -> list[int]:
    """Rows each running sequence (oldest first) computes this step: all it ``wanted`` when its
    drafts still fit, else 1 (its golden row; drafts dropped). See the module docstring.

    >>> fit_rows([12, 12, 12], max_num_tokens=36), fit_rows([12, 12, 12], max_num_tokens=20)
    ([12, 12, 12], [12, 1, 1])
    """
    if len(wanted) > max_num_tokens:
        raise ValueError(f"{len(wanted)} sequences cannot run in a budget of {max_num_tokens} rows")
    spare = max_num_tokens - len(wanted)
    rows: list[int] = []
    for want in wanted:
        drafts = max(0, int(want) - 1)
        if drafts <= spare:
            rows.append(1 + drafts)
            spare -= drafts
        else:
            rows.append(1)
    return rows




#: Prompts prefilled together (nothing decoding) go shortest first in forwards of at least this many
#: rows: below it a forward is bound by reading the weights, so short prompts share one; above it a
#: forward is bound by its arithmetic (a 64-row forward runs at ~80% of the cores' peak on the AMD EPYC
#: Zen 4 host), so a bigger group would only make its first tokens wait for the others' prompts.
PREFILL_GROUP_ROWS = 64

def prefill_groups(lengths: Sequence[int], min_rows: int) -> list[list[int]]:
    """Prompts to prefill now (their rows still to compute), as forwards: shortest first, each forward
    at least ``min_rows`` rows (the last takes what is left), its prompts in arrival order. The mean
    time to first token then falls: a prompt waits only for the groups before its own.

    >>> prefill_groups([80, 10, 30, 40, 5], min_rows=64)   # 5+10+30+40 = 85 rows, then the 80-row prompt
    [[1, 2, 3, 4], [0]]
    >>> prefill_groups([70, 90, 20], min_rows=64), prefill_groups([12, 9], min_rows=64)
    ([[0, 2], [1]], [[0, 1]])
    """
    groups: list[list[int]] = []
    group: list[int] = []
    rows = 0
    for i in sorted(range(len(lengths)), key=lambda k: (lengths[k], k)):
        group.append(i)
        rows += lengths[i]
        if rows >= min_rows:
            groups.append(sorted(group))
            group, rows = [], 0
    if group:
        groups.append(sorted(group))
    return groups


def finish_shortest(rests: Sequence[int], reach: int, group: int) -> list[int]:
    """Whole prompts (their rows left), shortest first, within ``reach`` rows, until ``group`` rows are
    taken (the last prompt may pass it, as :func:`prefill_groups` does).

    >>> finish_shortest([40, 30, 20, 90], reach=200, group=64), finish_shortest([40, 30, 20], 45, 64)
    ([40, 30, 20, 0], [0, 0, 20])
    """
    takes, used = [0] * len(rests), 0
    for i in sorted(range(len(rests)), key=lambda k: (rests[k], k)):
        if used >= group or rests[i] > reach - used:
            break
        takes[i], used = rests[i], used + rests[i]
    return takes


def oldest_first(rests: Sequence[int], takes: list[int], spare: int) -> list[int]:
    """``takes`` topped up by ``spare`` more rows, oldest prompt first.

    >>> oldest_first([50, 80, 12], [0, 0, 12], spare=60)
    [50, 10, 12]
    """
    for i, rest in enumerate(rests):
        more = max(0, min(spare, rest - takes[i]))
        takes[i], spare = takes[i] + more, spare - more
    return takes


def idle_rows(idle_chunk: Optional[int], max_num_tokens: Optional[int]) -> Optional[int]:
    """Rows of a prompt one step computes with nothing decoding: ``idle_chunk`` within ``max_num_tokens``
    (None: whole prompts).

        >>> idle_rows(256, 128), idle_rows(256, None), idle_rows(None, 128)
        (128, 256, None)
    """
    return idle_chunk if idle_chunk is None or max_num_tokens is None else min(idle_chunk, max_num_tokens)


def long_stall(stall: float) -> float:
    """The mean stall a prompt longer than a chunk is paced at under ``stall``: ``1 + LONG_SHARE x (stall - 1)``
    (see :class:`PrefillPacer`).

    >>> long_stall(1.5), long_stall(3.0)
    (1.4, 2.6)
    """
    return round(1.0 + PrefillPacer.LONG_SHARE * (stall - 1.0), 9)


class PrefillPacer:
    """How many prompt rows a step with decoding sequences may add (chunked prefill), so that their steps
    take at most ``stall`` times as long as without the prompts, on average: a token bucket in seconds.

    Every step with sequences decoding earns ``(stall - 1) x`` a decode-only step's duration (``ref``, a
    moving average of the steps that carried no prompt rows), kept up to ``burst`` steps' worth; a step
    with prompt rows spends what they added (its duration minus ``ref``). The rows a step may add are the
    credit over the measured cost of a prompt row (a moving average, which follows the cost up as the
    prompt's context grows), at least 1 (a prompt always advances), at most ``max_rows``. A short prompt
    arriving with the bucket full goes in one step; a long one advances at the rate the stall allows.
    :meth:`take` finishes prompts first, shortest first, one group of ``FINISH_ROWS`` a step, borrowing
    up to the bucket's depth: their first tokens come now instead of trickling in once the decoders
    outnumber them, and the debt is repaid by the steps after (a burst of 7 prompts beside 1 decoder on
    the model clock: mean first token 359 -> 259 ms, the last 555 -> 493 ms,
    ``tests/test_chunked_prefill.py``).
    An overrun (a step slower than its rows explain, the host busy for a moment) must not leave the prompts crawling
    at one row a step: the debt is kept to one step's earnings, and a step of fewer than ``SAMPLE_ROWS`` rows moves
    the row cost's average in proportion (one row's sample carries the whole step's noise); so does the first
    sample, which moves the first guess (``ref / 4``) instead of replacing it (6 rows measured as nearly free made
    the next step 256 rows). Before, on a model clock (``tests/test_chunked_prefill.py``), one 100 ms overrun in a
    burst of 7 prompts left them 24 steps at one row a step (the last first token 1.9x later; now 1.3x, two such
    steps). Decoders that join while prompts keep every step busy make each step slower than the decode-only steps
    measured before they joined; that is decode cost, not prompt cost. With a ``decode_cost(rows, sequences)`` model
    (the auto policy's measured step cost), the decode-only steps are kept as the host's speed against the model
    (``level``, a moving average) and each step expects ``ref = level x decode_cost`` of its own decoders' rows and
    sequences; without one, every decode-only step costs the same. On the model clock, decoders adding 3 ms a
    step each left the last first token 3.4x later with 43 one-row steps without the model, 1.1x with it
    (``tests/test_chunked_prefill.py``). A step with few prompt rows whose decoders are not those of the last
    decode-only step teaches the level too (:meth:`_teaches_level`): the same burst without the model then
    has 3 one-row steps and ends 1.2x later; with the model it has 1.
    When many prompts wait beside few decoding sequences, the stall grows with their ratio: a step with
    ``decoding`` sequences and ``waiting`` prompts earns at ``max(stall, waiting / decoding)`` (one
    request decoding when 7 prompts arrive together: 7, so the 7 first tokens do not wait for 7 prompts'
    worth of paced steps; one prompt beside 1 or 4 decoding: the stall). The pacer holds the decoders' mean
    step at the stall, and the running requests' TPOT p99 lands on either side of a mean (the host's noise,
    requests that overlap the prompt's costlier steps): so while every prompt on its way is longer than a
    chunk (more than ``max_rows`` rows left: no step can end one, and only its own request waits on it) the
    steps earn at :attr:`long_stall`, ``1 + LONG_SHARE x (stall - 1)``, 1.4 at 1.5, and the running
    requests' TPOT p99 stays within the stall (a 2,000-token prompt beside 4 decoding, ``scripts/
    prefill_stall.py``: medians 1.39-1.44x against 1.46-1.51x before; docs/guides/reference-engine.md). Prompts
    that fit a chunk (a burst's) keep the stall and its borrowing, which a lower stall slows. ``stall=None``: a fixed
    ``max_rows`` per step. Scheduling only: a row's bits do not depend on the chunk it is in, so the
    tokens do not depend on the timings.

    Worked example (decode steps of 20 ms, prompt rows costing 1 ms each, stall 1.5, burst 8)::

        >>> p = PrefillPacer(max_rows=256, stall=1.5, burst=8)
        >>> p.rows()                                     # nothing measured yet: up to max_rows
        256
        >>> p.step(0.020, rows=0); p.credit             # a decode step earns 10 ms, up to 8 x 10 ms
        0.01
        >>> p.step(0.020, rows=0, steps=10); round(p.credit, 3)
        0.08
        >>> p.rows()                                     # before any prompt row was measured: ref / 4 a row
        16
        >>> p.step(0.036, rows=16); p.rows()             # 16 ms added: 1 ms a row; 74 ms of credit left
        74
        >>> p.step(0.094, rows=74); p.rows()             # the bucket is spent: 10 ms a step from now on
        10
        >>> p.step(0.030, rows=10, decoding=1, waiting=3); p.rows()  # 3 prompts beside 1 decoding: stall 3
        40
        >>> p.step(0.300, rows=40, decoding=4, waiting=1); p.credit  # 240 ms over: debt kept to a step, earned back
        0.0
        >>> p.step(0.023, rows=1, decoding=4, waiting=1); p.rows()   # so the next step pays again (was: 24 steps of 1)
        4
    """

    ALPHA = 0.3  # weight of the newest sample in the moving averages
    FINISH_ROWS = PREFILL_GROUP_ROWS  # rows a step may borrow to finish prompts: one prefill group
    SAMPLE_ROWS = 16  # a step with fewer prompt rows moves the row cost's average less, in proportion
    LONG_SHARE = 0.8  # prompts longer than a chunk earn this share of the stall's extra time (see the class doc)
    DECODE_SHARE = 0.2  # a step whose prompt rows explain less than this share of it also teaches the level

    def __init__(self, max_rows: int, stall: Optional[float] = None, burst: int = 8,
                 decode_cost: Optional[Callable[[int, int], float]] = None) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if stall is not None and stall <= 1.0:
            raise ValueError(f"stall must be > 1 (or None: fixed chunks), got {stall}")
        self.max_rows, self.stall, self.burst = int(max_rows), stall, int(burst)
        self.decode_cost = decode_cost
        self.level: Optional[float] = None  # decode-only steps' seconds over the model's (1.0 model: seconds)
        self._level_decoding: Optional[int] = None  # the decoders of the last decode-only step
        self.ref: Optional[float] = None  # seconds a decode-only step of the latest step's decoders takes
        self.row_cost: Optional[float] = None  # seconds a prompt row adds to a step
        self.credit = 0.0
        self.borrowed = 0.0  # seconds the last plan took below zero to finish prompts (kept as debt)

    def rows(self) -> int:
        """Prompt rows the next step with decoding sequences may add."""
        if self.stall is None:
            return self.max_rows
        if self.ref is None:  # no decode step measured yet (a warm engine has one): as a whole prefill would
            return self.max_rows
        return max(1, min(self.max_rows, int(round(max(0.0, self.credit) / self.row_seconds(), 6))))

    def take(self, rests: Sequence[int], room: Optional[int] = None) -> list[int]:
        """Rows each waiting prompt computes in the next step (``rests``: the rows each has left, oldest
        first), ``room`` rows in all at most (default ``max_rows``). First the prompts the step can finish,
        shortest first, until they fill a group of ``FINISH_ROWS`` (one efficient forward: more would only
        make their first tokens wait for each other), within the credit's rows (:meth:`rows`) and, borrowed
        against the next steps' earnings, ``FINISH_ROWS`` more while the debt stays within the bucket's depth
        at ``stall`` (``(stall - 1) x ref x burst``); then the credit left, oldest first (all of it when
        nothing ends, else up to the group). A finished prompt's first token comes now and its sequence
        joins the decoders, instead of trickling in at a step's earnings once the decoders outnumber the
        prompts; the debt is repaid by the following steps, so the decoders' steps still take ``stall``
        times as long on average. A prompt that cannot be finished (a long one) advances by the credit (a
        row a step while the debt is repaid).
        ``stall=None``: fixed chunks, oldest first.

        Decode steps of 20 ms, prompt rows of 1 ms, stall 1.5: one decode step earned 10 ms, so 10 rows;
        the 12-row prompt and the 50-row one end now (62 rows, 52 ms borrowed), the 80-row one cannot::

            >>> p = PrefillPacer(256, stall=1.5, burst=8)
            >>> p.step(0.020, rows=0); p.row_cost = 0.001
            >>> p.take([50, 80, 12])
            [50, 0, 12]
            >>> round(p.borrowed, 3)                   # 52 ms below zero, within the depth (8 x 10 ms)
            0.052
            >>> p.step(0.020 + 0.062, rows=62, decoding=4); round(p.credit, 3)   # owed, then 10 ms earned
            -0.042
            >>> p.take([80]), p.take([30])   # in debt: a long prompt advances a row, a short one ends
            ([1], [30])
            >>> p.credit = 0.200; p.take([40, 30, 20, 90])   # 200 rows of credit: one group, shortest first
            [40, 30, 20, 0]
        """
        room = self.max_rows if room is None else max(0, min(int(room), self.max_rows))
        credit = min(room, self.rows()) if rests else 0
        self.borrowed = 0.0
        if self.stall is None or not rests:
            return oldest_first(rests, [0] * len(rests), credit)
        reach = credit
        if self.ref is not None:
            cost = self.row_seconds()
            depth = int(round(max(0.0, self.credit + (self.stall - 1.0) * self.ref * self.burst) / cost, 6))
            reach = min(room, credit + min(self.FINISH_ROWS, max(0, depth - credit)))
        takes = finish_shortest(rests, reach, self.FINISH_ROWS)
        used = sum(takes)
        spare = credit if not used else min(credit, self.FINISH_ROWS) - used  # nothing ends: all the credit
        takes = oldest_first(rests, takes, spare)
        if self.ref is not None:
            self.borrowed = max(0.0, sum(takes) * self.row_seconds() - self.credit)
        return takes

    def _teaches_level(self, seconds: float, rows: int, decoding: int) -> bool:
        """Whether a step with prompt rows also measures its decoders: when they are not the decoders the
        level was learned on (another count: the model's error may differ, and no decode-only step comes
        while prompts wait) and its rows, at the row cost measured so far, explain less than
        ``DECODE_SHARE`` of it. Otherwise a level learned under the last wave's decoders stays wrong for a
        whole burst, its error is charged to the prompt rows, and they crawl at one row a step (on the
        model clock, decode steps 0.6x what the model says before a burst: the last first token 8x later,
        104 one-row steps). With the same decoders a dearer step is the rows' (their context grew)."""
        return (self.level is not None and self.row_cost is not None and decoding != self._level_decoding
                and rows * self.row_cost < self.DECODE_SHARE * seconds)

    def row_seconds(self) -> float:
        """What a prompt row is taken to cost: the measured average, ``ref / 4`` before any sample."""
        return max(self._row_cost(), self.ref / 1000)  # a step measured faster than ref (noise) leaves a cost of 0

    def _row_cost(self) -> float:
        """The measured average cost of a prompt row, or the first guess, ``ref / 4``."""
        assert self.ref is not None
        return self.row_cost if self.row_cost is not None else self.ref / 4

    def stall_for(self, decoding: int, waiting: int, shortest: Optional[int] = None) -> float:
        """The stall a step earns at: ``stall``, or ``waiting / decoding`` when that is more. While every
        prompt on its way has more than ``max_rows`` rows left (``shortest``: the fewest; None: not known,
        taken as short), a chunk cannot end any of them: they earn at :attr:`long_stall` instead.

        >>> PrefillPacer(64, stall=1.5).stall_for(decoding=1, waiting=7), PrefillPacer(64, 1.5).stall_for(1, 1)
        (7.0, 1.5)
        >>> PrefillPacer(256, 1.5).stall_for(4, 1, shortest=1800), PrefillPacer(256, 1.5).stall_for(4, 1, shortest=200)
        (1.4, 1.5)
        """
        assert self.stall is not None
        base = self.long_stall if shortest is not None and shortest > self.max_rows else self.stall
        return max(base, waiting / decoding) if decoding > 0 else base

    @property
    def long_stall(self) -> float:
        """The mean stall of prompts longer than a chunk (:func:`long_stall`)."""
        assert self.stall is not None
        return long_stall(self.stall)

    def model(self, decode_rows: int, decoding: int) -> float:
        """What ``decode_cost`` says a decode-only step of these decoders takes (1.0 without a model, or
        before it has data).

        >>> PrefillPacer(64, 1.5, decode_cost=lambda rows, seqs: 0.020 + 0.003 * seqs).model(4, 4)
        0.032
        """
        cost = self.decode_cost(max(1, decode_rows), max(1, decoding)) if self.decode_cost else 1.0
        return cost if cost and cost > 0 else 1.0

    def step(self, seconds: float, rows: int, steps: int = 1, decoding: int = 1, waiting: int = 0,
             decode_rows: Optional[int] = None, shortest: Optional[int] = None) -> None:
        """A step with ``decoding`` sequences (``decode_rows`` rows, drafts included; default one each)
        took ``seconds`` and carried ``rows`` prompt rows, with ``waiting`` prompts still on their way, the
        shortest with ``shortest`` rows left (:meth:`stall_for`; ``steps`` such steps, for the examples)."""
        if self.stall is None or seconds <= 0:
            return
        shape = self.model(decoding if decode_rows is None else decode_rows, decoding)
        for _ in range(steps):
            if rows == 0:
                sample = seconds / shape
                self.level = sample if self.level is None else self.level + self.ALPHA * (sample - self.level)
                self._level_decoding = decoding
            elif self._teaches_level(seconds, rows, decoding):  # within 2x of the level: one hiccup moves it little
                sample = min(max((seconds - rows * self._row_cost()) / shape, self.level / 2), 2 * self.level)
                self.level += self.ALPHA * (sample - self.level)
            self.ref = None if self.level is None else self.level * shape
            if rows and self.ref is not None:
                added = max(0.0, seconds - self.ref)
                sample = added / rows
                # a step of few rows says little of a row's cost (its noise is all theirs): it moves the average,
                # or the first guess (ref / 4), in proportion; a first sample of SAMPLE_ROWS rows replaces the guess
                old = self._row_cost()
                weight = min(1.0, rows / self.SAMPLE_ROWS) * (self.ALPHA if self.row_cost is not None else 1.0)
                self.row_cost = old + weight * (sample - old)
                self.credit -= added
            if self.ref is not None:
                earned = (self.stall_for(decoding, waiting, shortest) - 1.0) * self.ref
                owed = max(earned, self.borrowed)  # the most debt kept: what was borrowed, else a step's earnings
                self.credit = min(max(self.credit, -owed) + earned, earned * self.burst)
        self.borrowed = 0.0

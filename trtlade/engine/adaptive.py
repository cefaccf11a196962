"""Adaptive lookahead: shrink (w, n, g) while drafts do not pay, probe back up later.

Lookahead is lossless whatever spec runs a step (every emitted token is the greedy argmax), so the
engine may change the spec between steps using only what it has already measured. What a step
costs depends on how many rows it computes; what it gains is the tokens it emits. Per request:

* :class:`CostTable` -- wall time of a step with K rows relative to a 1-row step, measured on this
  engine (calibrated at load, refined by every step it runs);
* :class:`SpecController` -- walks a ladder of specs from the request's (w, n, g) down to (1,1,0).
  After ``window`` steps at a rung, the predicted speedup of those steps is
  ``sum(tokens) / sum(cost_ratio(rows))``; below ``1 - margin`` the controller steps down one rung.
  Below the top, it probes the rung above after ``probe_after`` steps; a failed probe doubles the
  wait (up to ``probe_max``).

Worked example: request (4,2,4) on text that never repeats. The ladder is (4,2,4) -> (2,2,2) ->
(1,1,0). Steps at (4,2,4) compute ~8 rows (cost 1.35x) and emit 1.05 tokens: gain 0.78 < 0.98, so
the controller moves to (2,2,2) (~4 rows, 1.12x, 1.03 tokens: 0.92) and then to (1,1,0) (gain 1.0).
After 16 greedy steps it tries (2,2,2) again for a window, then after 32, 64, ... steps.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec

__all__ = ["CostTable", "SpecController", "spec_ladder"]


@dataclass
class CostTable:
    """Median wall time of steps by row count, and the ratio to a 1-row step.

    >>> t = CostTable()
    >>> for rows, s in [(1, 0.030), (1, 0.032), (4, 0.036), (8, 0.042)]:
    ...     t.add(rows, s)
    >>> round(t.ratio(8), 3), round(t.ratio(6), 3), round(t.ratio(16), 3)   # measured, interpolated, extrapolated
    (1.355, 1.258, 2.129)
    """

    keep_last: int = 32
    samples: dict[int, list[float]] = field(default_factory=dict)

    def add(self, rows: int, seconds: float) -> None:
        bucket = self.samples.setdefault(int(rows), [])
        bucket.append(float(seconds))
        if len(bucket) > self.keep_last:
            del bucket[0]

    def median(self, rows: int) -> float | None:
        bucket = self.samples.get(rows)
        if not bucket:
            return None
        ordered = sorted(bucket)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

    def seconds(self, rows: int) -> float | None:
        """Median time of a ``rows``-row step: measured, else interpolated between the nearest
        measured row counts, else extrapolated from the two largest (None without data)."""
        known = sorted(k for k, v in self.samples.items() if v)
        if not known:
            return None
        exact = self.median(rows)
        if exact is not None:
            return exact
        if len(known) == 1:
            return self.median(known[0])
        i = bisect.bisect_left(known, rows)
        lo, hi = (known[-2], known[-1]) if i >= len(known) else (known[max(0, i - 1)], known[max(1, i)])
        t_lo, t_hi = self.median(lo), self.median(hi)
        return t_lo + (t_hi - t_lo) * (rows - lo) / (hi - lo)

    def ratio(self, rows: int) -> float:
        """Cost of a ``rows``-row step in 1-row steps (1.0 without data or for rows <= 1)."""
        if rows <= 1:
            return 1.0
        one, many = self.seconds(1), self.seconds(rows)
        if not one or many is None:
            return 1.0
        return max(1.0, many / one)


def spec_ladder(spec: LookaheadSpec) -> list[LookaheadSpec]:
    """From ``spec`` down to (1,1,0): halve W and G and step N down towards 2 at each rung.

    >>> [str(s) for s in spec_ladder(LookaheadSpec(7, 7, 7))]
    ['7,7,7', '4,4,4', '2,2,2', '1,1,0']
    >>> [str(s) for s in spec_ladder(LookaheadSpec(4, 2, 4))]
    ['4,2,4', '2,2,2', '1,1,0']
    >>> [str(s) for s in spec_ladder(LookaheadSpec(1, 1, 0))]
    ['1,1,0']
    """
    ladder = [spec]
    w, n, g = spec.as_tuple()
    while not ladder[-1].is_autoregressive:
        if (w, n, g) == (1, 2, 0) or (w <= 2 and n <= 2 and g <= 2):
            break
        w, g = max(1, (w + 1) // 2), (g + 1) // 2
        n = max(2, (n + 2) // 2) if n > 2 else n
        nxt = LookaheadSpec(w, n, g)
        if nxt.is_autoregressive or nxt == ladder[-1]:
            break
        ladder.append(nxt)
    if ladder[-1] != AUTOREGRESSIVE:
        ladder.append(AUTOREGRESSIVE)
    return ladder


class SpecController:
    """Chooses the spec of each step of one request (see the module docstring).

    ``observe(tokens, rows)`` after every decoding step; ``spec`` is the spec for the next one;
    ``changed`` tells the engine to restart the algorithm with the new spec.
    """

    def __init__(self, requested: LookaheadSpec, cost: CostTable, *, window: int = 6, margin: float = 0.02,
                 probe_after: int = 16, probe_max: int = 1024) -> None:
        self.ladder = spec_ladder(requested)
        self.cost = cost
        self.window = window
        self.margin = margin
        self.level = 0
        self.probe_after = [probe_after] * len(self.ladder)
        self.probe_max = probe_max
        self._history: list[tuple[int, int]] = []  # (tokens, rows) at the current level
        self._probing = False
        self.switches: list[tuple[int, str]] = []  # (step, spec) whenever the spec changed
        self._steps = 0

    @property
    def spec(self) -> LookaheadSpec:
        return self.ladder[self.level]

    def _warmup(self) -> int:
        """Steps at a new rung before judging it: the window fills in N-2 steps."""
        return max(0, self.spec.ngram_size - 2)

    def predicted_gain(self, steps: list[tuple[int, int]]) -> float:
        cost = sum(self.cost.ratio(rows) for _, rows in steps)
        return sum(tokens for tokens, _ in steps) / cost if cost else 1.0

    def observe(self, tokens: int, rows: int) -> bool:
        """Record a decoding step; return True if the spec changes for the next step."""
        self._steps += 1
        self._history.append((tokens, rows))
        if self.spec.is_autoregressive or self.level == len(self.ladder) - 1:
            if len(self._history) >= self.probe_after[self.level] and self.level > 0:
                return self._move(self.level - 1, probing=True)
            return False
        judged = self._history[self._warmup():]
        if len(judged) < self.window:
            return False
        gain = self.predicted_gain(judged[-self.window:])
        if gain < 1.0 - self.margin:
            if self._probing:  # the probe failed: wait twice as long before the next one
                below = self.level + 1
                self.probe_after[below] = min(self.probe_max, 2 * self.probe_after[below])
            return self._move(self.level + 1, probing=False)
        self._probing = False  # judged and paying: a probe that got here succeeded
        if self.level > 0 and len(self._history) >= self.probe_after[self.level]:
            return self._move(self.level - 1, probing=True)
        return False

    def _move(self, level: int, probing: bool) -> bool:
        self.level = level
        self._probing = probing
        self._history = []
        self.switches.append((self._steps, str(self.spec)))
        return True

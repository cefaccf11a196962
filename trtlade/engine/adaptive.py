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
(1,1,0). Six steps at (4,2,4) compute ~7 rows (cost 1.2x) and emit 1.0 tokens each: gain 0.83 <
0.98, and no lower rung could pay with nothing accepted, so the next step runs (1,1,0). After 16
greedy steps it tries (4,2,4) again for a window, then after 32, 64, ... steps.
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
    (1.355, 1.258, 1.742)
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


#: Efficient rungs below a request's spec, measured on a 2-core CPU (SmolLM2-135M, fp32): tokens
#: per step / rows per step on the bundled suite were (2,4,2) 1.76/9.7, (2,3,2) 1.59/6.6,
#: (2,2,2) 1.36/3.4 (TensorRT-LLM verifies min(W, G) candidates, so G > W adds nothing). Nothing
#: with W = 1 or G = 1: with TensorRT-LLM's keying a single candidate is almost never accepted.
RUNGS = (LookaheadSpec(2, 4, 2), LookaheadSpec(2, 3, 2), LookaheadSpec(2, 2, 2))


def spec_ladder(spec: LookaheadSpec) -> list[LookaheadSpec]:
    """``spec``, then the :data:`RUNGS` it admits (clipped to it field by field, each smaller than
    the one before), then (1,1,0).

    >>> [str(s) for s in spec_ladder(LookaheadSpec(7, 7, 7))]
    ['7,7,7', '2,4,2', '2,3,2', '2,2,2', '1,1,0']
    >>> [str(s) for s in spec_ladder(LookaheadSpec(4, 2, 4))]
    ['4,2,4', '2,2,2', '1,1,0']
    >>> [str(s) for s in spec_ladder(LookaheadSpec(1, 1, 0))]
    ['1,1,0']
    """
    ladder = [spec]
    if spec.is_autoregressive:
        return ladder if spec == AUTOREGRESSIVE else ladder + [AUTOREGRESSIVE]
    for rung in RUNGS:
        w, n, g = (min(a, b) for a, b in zip(rung.as_tuple(), spec.as_tuple()))
        candidate = LookaheadSpec(w, n, g) if n > 1 else AUTOREGRESSIVE
        last = ladder[-1]
        if not candidate.is_autoregressive and last.admits(candidate) \
                and candidate.decoding_tokens < last.decoding_tokens:
            ladder.append(candidate)
    ladder.append(AUTOREGRESSIVE)
    return ladder


class SpecController:
    """Chooses the spec of each step of one request (see the module docstring).

    ``observe(tokens, rows)`` after every decoding step returns True when the spec changes; the
    engine then restarts the algorithm with :attr:`spec` on the same context (lossless either way).

    * Judging: after the warm-up of a rung (N-2 steps) and at least ``window`` more steps, each
      of the last ``horizon`` steps has a gain ``tokens / cost_ratio(rows)``; the judgement is
      their mean plus ``confidence`` standard errors (a run of 1-token steps is normal luck at
      1.7 tokens per step, so a short bad patch does not shrink anything).
    * Shrinking: below ``1 - margin``, the controller moves to the first lower rung that could
      still pay if it kept every accepted token, ``(1 + drafts accepted per step) /
      cost_ratio(its rows)``; with nothing accepted that is (1,1,0) at once.
    * Probing: after ``probe_after[level]`` steps on a lower rung, it tries again the rung it
      shrank from (text often turns repetitive later); a probe that fails doubles that wait (at
      most ``probe_max``).
    """

    def __init__(self, requested: LookaheadSpec, cost: CostTable, *, window: int = 10, horizon: int = 32,
                 confidence: float = 1.0, margin: float = 0.02, probe_after: int = 16,
                 probe_max: int = 1024) -> None:
        self.ladder = spec_ladder(requested)
        self.cost = cost
        self.window = window
        self.horizon = horizon
        self.confidence = confidence
        self.margin = margin
        self.level = 0
        self.probe_after = [probe_after] * len(self.ladder)
        self.probe_max = probe_max
        self._history: list[tuple[int, int]] = []  # (tokens, rows) at the current level
        self._probe_from: int | None = None  # the level a running probe came from
        self._came_from: dict[int, int] = {}  # level -> the level it was shrunk from (probes go back there)
        self.switches: list[tuple[int, str]] = []  # (step, spec) whenever the spec changed
        self._steps = 0

    @property
    def spec(self) -> LookaheadSpec:
        return self.ladder[self.level]

    def predicted_gain(self, steps: list[tuple[int, int]]) -> float:
        """Tokens emitted over the steps' cost in 1-row steps: the predicted speedup."""
        cost = sum(self.cost.ratio(rows) for _, rows in steps)
        return sum(tokens for tokens, _ in steps) / cost if cost else 1.0

    def gain_upper_bound(self, steps: list[tuple[int, int]]) -> float:
        """Mean per-step gain plus ``confidence`` standard errors: accepted lengths vary a lot
        from step to step, so the spec only shrinks when drafts clearly do not pay."""
        gains = [tokens / self.cost.ratio(rows) for tokens, rows in steps]
        mean = sum(gains) / len(gains)
        if len(gains) < 2:
            return mean
        var = sum((g - mean) ** 2 for g in gains) / (len(gains) - 1)
        return mean + self.confidence * (var / len(gains)) ** 0.5

    def observe(self, tokens: int, rows: int) -> bool:
        """Record a decoding step; return True if the spec changes for the next step."""
        self._steps += 1
        self._history.append((tokens, rows))
        last = len(self.ladder) - 1
        if self.level < last:
            judged = self._history[max(0, self.spec.ngram_size - 2):][-self.horizon:]
            if len(judged) < self.window:
                return False
            if self.gain_upper_bound(judged) < 1.0 - self.margin:
                if self._probe_from is not None:  # the probe failed: wait longer before the next
                    self.probe_after[self._probe_from] = min(self.probe_max, 2 * self.probe_after[self._probe_from])
                target = self._shrink_target(judged)
                self._came_from[target] = self.level
                return self._move(target, probe_from=None)
            self._probe_from = None  # paying (a probe that got here succeeded)
        if self.level > 0 and len(self._history) >= self.probe_after[self.level]:
            return self._move(self._came_from.get(self.level, self.level - 1), probe_from=self.level)
        return False

    def _shrink_target(self, recent: list[tuple[int, int]]) -> int:
        accepted = sum(t for t, _ in recent) / len(recent) - 1.0
        rows = sum(r for _, r in recent) / len(recent)
        width = self.spec.decoding_tokens
        for level in range(self.level + 1, len(self.ladder) - 1):
            est_rows = max(1.0, rows * self.ladder[level].decoding_tokens / width)
            if (1.0 + accepted) / self.cost.ratio(round(est_rows)) >= 1.0 - self.margin:
                return level
        return len(self.ladder) - 1

    def _move(self, level: int, probe_from: int | None) -> bool:
        self.level = level
        self._probe_from = probe_from
        self._history = []
        self.switches.append((self._steps, str(self.spec)))
        return True

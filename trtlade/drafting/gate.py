"""The acceptance-rate gate: speculation off for the whole engine, for good, once drafts stop paying.

TensorRT-LLM's PyTorch executor holds one ``SpeculationGate`` (``tensorrt_llm/_torch/speculative/
speculation_gate.py``, ``record_acceptance_rate``; wired in ``py_executor.py``, ``_update_batch_acceptance_rate``)
built from ``acceptance_rate_window_size`` (N) and ``acceptance_rate_threshold``: each decoding iteration that
drafted anything gives one sample, the batch's accepted draft tokens over its drafted tokens; once N samples
are in, a rolling mean of the last N below the threshold (strictly) turns speculation off for every request
of the executor from the next iteration on, and nothing turns it back on. A window of 0 or None, or no
threshold, is no gate. trtlade keeps one per prefix-cache namespace
(:class:`~trtlade.drafting.algorithm.DraftPools`), which is the engine's own under ``global``. (The 1.2 line's
``acceptance_window`` / ``acceptance_length_threshold`` sampled per completed request instead, the request's
accepted draft tokens per step: renamed and changed by NVIDIA/TensorRT-LLM#12905.)

Worked example (window 3, threshold 0.5; the iterations' accepted / drafted)::

    >>> gate = SpeculationGate(3, 0.5)
    >>> [gate.record(a, d) for a, d in [(4, 8), (3, 8), (0, 0), (2, 8)]]    # (0, 0): no draft, no sample
    [False, False, False, True]
    >>> gate.disabled, round(gate.mean, 3)                                   # (0.5 + 0.375 + 0.25) / 3
    (True, 0.375)
    >>> gate.record(8, 8), gate.disabled                                     # for good
    (False, True)
"""

from __future__ import annotations

from collections import deque
from typing import Optional

__all__ = ["SpeculationGate"]


class SpeculationGate:
    """One engine's gate (``window``: N iterations; ``threshold``: the acceptance rate below which it closes)."""

    def __init__(self, window: Optional[int], threshold: Optional[float]) -> None:
        self.window = window or 0
        self.threshold = threshold
        self.samples: deque[float] = deque(maxlen=max(1, self.window))
        self.recorded = 0
        self.disabled = False
        self.mean: Optional[float] = None

    @property
    def active(self) -> bool:
        return self.window > 0 and self.threshold is not None

    def record(self, accepted: int, drafted: int) -> bool:
        """One iteration's totals; True only on the call that closes the gate."""
        if self.disabled or not self.active or drafted <= 0:
            return False
        self.samples.append(accepted / drafted)
        self.recorded += 1
        if self.recorded < self.window:
            return False
        self.mean = sum(self.samples) / len(self.samples)
        if self.mean < self.threshold:  # type: ignore[operator]
            self.disabled = True
            return True
        return False

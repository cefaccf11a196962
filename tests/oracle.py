"""Oracle LMs without weights, shared by the algorithm and engine tests: ``oracle(prefix) -> int``.

Import in tests as ``from oracle import PeriodicOracle, RandomOracle, ...`` (pytest puts tests/ on
sys.path). The implementations live in :mod:`trtlade.lookahead.oracles` so that scripts (e.g.
``benchmarks/keying_study.py``) can use them too; ``greedy`` is the reference decoder.
"""

from __future__ import annotations

from trtlade.lookahead.oracles import CountingOracle, NgramOracle, PeriodicOracle, RandomOracle, mix
from trtlade.lookahead.simulate import greedy, simulate

__all__ = ["CountingOracle", "NgramOracle", "PeriodicOracle", "RandomOracle", "mix", "greedy", "simulate"]

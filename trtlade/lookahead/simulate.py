"""Drive :class:`LookaheadAlgorithm` with an oracle LM: the executable specification, no torch.

``next_token(prefix) -> int`` answers the greedy argmax after any token prefix. For each row of a
step, the prefix is what the row may attend to: prompt + committed tokens (the last of which is g),
then the row's ancestors and itself in depth order. A model-backed engine that computes the same
rows must emit the same tokens in the same number of steps.

Counting: the prefill emits the first token (the golden one) and is not a step. ``steps`` counts
the decoding forward passes after it; ``tokens_per_step_hist[k]`` = how many of them emitted k
tokens; so ``sum(hist.values()) == steps`` and ``1 + sum(k * c) == len(tokens)``.

    >>> from trtlade.lookahead.oracles import PeriodicOracle
    >>> r = simulate(PeriodicOracle([1, 2, 3, 4, 5]), [1, 2, 3, 4, 5, 1, 2], (4, 3, 4), max_tokens=10)
    >>> r.tokens
    [3, 4, 5, 1, 2, 3, 4, 5, 1, 2]
    >>> r.steps, r.tokens_per_step_hist
    (3, {3: 3})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from trtlade.lookahead.algorithm import DraftBatch, LookaheadAlgorithm
from trtlade.spec import LookaheadSpec

__all__ = ["SimulationResult", "simulate", "greedy", "row_prefixes"]

NextToken = Callable[[Sequence[int]], int]


@dataclass
class SimulationResult:
    """Generated tokens (the prefill's golden token first) and per-step counts."""

    tokens: list[int]
    steps: int = 0
    tokens_per_step_hist: dict[int, int] = field(default_factory=dict)
    rows_per_step: list[int] = field(default_factory=list)
    tokens_per_step_list: list[int] = field(default_factory=list)
    finish_reason: str = "length"

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens per decoding step (the prefill's token excluded); 0.0 without steps."""
        return sum(self.tokens_per_step_list) / self.steps if self.steps else 0.0


def row_prefixes(context: Sequence[int], batch: DraftBatch, rows: Iterable[int]) -> list[list[int]]:
    """For each of ``rows``: ``context`` (prompt + committed tokens before g) + the tokens it sees."""
    ctx = list(context)
    out = []
    for row in rows:
        out.append(ctx + [batch.tokens[r] for r in batch.ancestors[row]])
    return out


def greedy(next_token: NextToken, prompt: Sequence[int], max_tokens: int,
           eos_token_ids: Iterable[int] = ()) -> list[int]:
    """Plain greedy decoding with the oracle: the reference every lookahead run must reproduce."""
    eos = frozenset(eos_token_ids)
    seq = list(prompt)
    out: list[int] = []
    while len(out) < max_tokens:
        token = int(next_token(seq))
        out.append(token)
        seq.append(token)
        if token in eos:
            break
    return out


def simulate(
    next_token: NextToken, prompt: Sequence[int], spec: LookaheadSpec | Sequence[int] | str, max_tokens: int,
    eos_token_ids: Iterable[int] = (), *, seed: int = 0, corrected_keying: bool = False,
    full_guess_set: bool = False, dedup: bool = True, algorithm: LookaheadAlgorithm | None = None,
) -> SimulationResult:
    """Generate up to ``max_tokens`` tokens with lookahead, asking ``next_token`` only for logit rows.

    Stops after an EOS token (emitted, then nothing past it) or at ``max_tokens``; a step whose
    accepted run crosses either is cut there and committed with the shorter count. Rows outside
    ``batch.logit_rows`` get argmax -1, so reading them would break the greedy identity.
    ``algorithm``: reuse an instance (its spec, seed and options win; generation stops at its EOS ids
    and at ``eos_token_ids``).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    prompt = [int(t) for t in prompt]
    eos = frozenset(int(t) for t in eos_token_ids)
    algo = algorithm or LookaheadAlgorithm(spec, eos_token_ids=eos, seed=seed, corrected_keying=corrected_keying,
                                           full_guess_set=full_guess_set, dedup=dedup)
    eos = algo.eos_token_ids | eos
    result = SimulationResult(tokens=[])
    if max_tokens == 0:
        return result
    golden = int(next_token(prompt))
    result.tokens.append(golden)
    if golden in eos:
        result.finish_reason = "stop"
        return result
    if max_tokens == 1:
        return result
    algo.setup(prompt, golden)
    while True:
        batch = algo.prepare()
        argmax = [-1] * batch.num_rows
        base = prompt + result.tokens[:-1]  # tokens before g; g is row 0 of every batch
        for row, prefix in zip(batch.logit_rows, row_prefixes(base, batch, batch.logit_rows)):
            argmax[row] = int(next_token(prefix))
        verification = algo.verify(argmax)
        kept, stop = _cut(verification.tokens, eos, max_tokens - len(result.tokens))
        algo.commit(len(kept))
        result.tokens.extend(kept)
        result.steps += 1
        result.rows_per_step.append(batch.num_rows)
        result.tokens_per_step_list.append(len(kept))
        result.tokens_per_step_hist[len(kept)] = result.tokens_per_step_hist.get(len(kept), 0) + 1
        if stop:
            result.finish_reason = "stop"
            break
        if len(result.tokens) >= max_tokens:
            break
    return result


def _cut(tokens: list[int], eos: frozenset[int], budget: int) -> tuple[list[int], bool]:
    """Tokens up to and including the first EOS, at most ``budget``; and whether an EOS ended them."""
    for index, token in enumerate(tokens[:budget]):
        if token in eos:
            return tokens[: index + 1], True
    return tokens[:budget], False

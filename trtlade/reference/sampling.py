"""Sampling that lookahead cannot change: every draw is keyed by (seed, absolute position).

Plain sampling draws the token at absolute position ``q`` (prompt tokens are 0..P-1, the first
generated token is at P) from the request's warped distribution with the uniform
``u = keyed_uniform(seed, q)``, by inverse CDF in token-id order. Lookahead verifies its tree with
the very same rule: at each node (a row at depth ``d`` after the golden token at position ``p``)
the row's logits are warped with the penalties of the text up to that node -- the output so far and
the node's own path -- and the token at ``p + d + 1`` is drawn with ``keyed_uniform(seed, p + d + 1)``.
If the draw is one of the node's children the walk descends, otherwise it stops; the draw at the
last node is the bonus token. The accepted path is therefore exactly the tokens plain sampling
draws with the same seed: identical output, not merely the same distribution. A node accepts with
probability ``sum(p(child))`` over its distinct children, the most any lossless verifier can.

Drafts never read a draw: the Jacobi window moves with each row's argmax, and the n-gram pool and
prompt lookup only see emitted tokens (:class:`~trtlade.lookahead.algorithm.LookaheadAlgorithm` knows
nothing of sampling; :meth:`~trtlade.lookahead.algorithm.LookaheadAlgorithm.verify` takes the draws as
``targets``).

Warpers, in order (vLLM's, the same for plain and lookahead rows):

1. ``repetition_penalty`` r over every token of prompt + output + path: a logit x becomes x / r
   if x > 0, else x * r;
2. ``frequency_penalty`` f and ``presence_penalty`` e over output + path: x - f * count - e * (count > 0);
3. ``temperature`` T: x / T (T == 0: the draw is the argmax of the penalised logits, no seed);
4. ``top_k`` k (0: off): only the k highest; ``top_p``: the smallest set of highest probabilities
   reaching top_p; ``min_p`` m: only tokens with p >= m * max p.

Worked example: two rows whose warped distributions are [0.5, 0.5, 0, 0] and [0.1, 0.2, 0.3, 0.4];
the CDFs are [.5, 1, 1, 1] and [.1, .3, .6, 1]; uniforms 0.7 and 0.05 pick tokens 1 and 0::

    >>> probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    >>> inverse_cdf(probs, [0.7, 0.05])
    [1, 0]
"""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Optional, Sequence

import torch

from trtlade.contract.protocol import SamplingParams
from trtlade.reference.native.argmax import argmax_rows

__all__ = ["SamplingParams", "KeyedSampler", "keyed_uniform", "inverse_cdf", "random_seed"]

_MASK64 = (1 << 64) - 1
#: top_p looks among this many highest probabilities, then more, then the whole row, until they reach top_p
_NUCLEUS_PROBES = (512, 8192)


def _mix64(z: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit integers that spreads every input bit."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return z ^ (z >> 31)


def keyed_uniform(seed: int, position: int) -> float:
    """The uniform in [0, 1) of the draw at absolute ``position`` of a request seeded ``seed``: a pure
    function (counter-based, like Philox), so a draw is the same whoever asks and in whatever order.

    >>> keyed_uniform(7, 12) == keyed_uniform(7, 12), keyed_uniform(7, 12) != keyed_uniform(7, 13)
    (True, True)
    >>> 0.0 <= keyed_uniform(-1, 0) < 1.0
    True
    """
    z = _mix64((_mix64((int(seed) & _MASK64) ^ 0x9E3779B97F4A7C15) + int(position) * 0xD1B54A32D192ED03) & _MASK64)
    return (z >> 11) * (1.0 / (1 << 53))


def random_seed() -> int:
    """A fresh 63-bit seed, for a sampled request that names none (reported back, so reproducible)."""
    return secrets.randbits(63)


def inverse_cdf(probs: torch.Tensor, uniforms: Sequence[float]) -> list[int]:
    """Per row, the first token whose cumulative probability (float64, token-id order) exceeds
    ``u * total``: tokens of probability 0 are never drawn; rows need not be normalised."""
    cdf = probs.double().cumsum(dim=-1)
    targets = torch.tensor(list(uniforms), dtype=torch.float64).unsqueeze(1) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    return picked.clamp_(max=probs.shape[-1] - 1).tolist()


class KeyedSampler:
    """One sequence's draws: penalties from its text, warpers, and the keyed uniforms.

    ``prompt``: the prompt's tokens (the repetition penalty sees them); :meth:`extend` adds each
    emitted token. :meth:`choose` gives, for rows of logits, the token each row draws: row i is
    followed by ``paths[i]`` (its draft tokens after the emitted text, its own token last) and draws
    the token at ``positions[i]``.

    >>> sampler = KeyedSampler(SamplingParams(temperature=1.0, seed=3), prompt=[0])
    >>> rows = torch.tensor([[0.0, 50.0, 0.0], [50.0, 0.0, 0.0]])     # near-certain rows
    >>> sampler.choose(rows, paths=[[], [1]], positions=[1, 2])
    [1, 0]
    >>> sampler.draws                                                  # positions drawn so far
    2
    """

    def __init__(self, params: SamplingParams, prompt: Sequence[int] = ()) -> None:
        if params.seed is None and not params.greedy:
            raise ValueError("a sampled request needs its seed here (the engine gives one a random seed)")
        self.params = params
        self._counts: Counter[int] = Counter()  # output tokens
        self._seen: set[int] = set(int(t) for t in prompt) if params.repetition_penalty != 1.0 else set()
        self._seen_index: Optional[torch.Tensor] = None
        self._count_index: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        #: how many uniforms this sampler has computed (tests check drafts never ask for one)
        self.draws = 0

    def extend(self, tokens: Sequence[int]) -> None:
        """Emitted tokens join the text the penalties see."""
        if not self.params.penalised:
            return
        for token in tokens:
            token = int(token)
            self._counts[token] += 1
            if self.params.repetition_penalty != 1.0 and token not in self._seen:
                self._seen.add(token)
                self._seen_index = None
        self._count_index = None

    def choose(self, logits: torch.Tensor, paths: Sequence[Sequence[int]], positions: Sequence[int]) -> list[int]:
        """The token each row of ``logits`` (rows x vocab) draws (see the class docstring)."""
        params = self.params
        logits = logits.float()
        if params.penalised or not params.greedy:
            logits = logits.cpu()  # penalties and draws index with host tensors (a no-op on the CPU)
        if params.penalised:
            logits = self._penalise(logits.clone(), paths)
        if params.greedy:
            return argmax_rows(logits)
        self.draws += len(positions)
        probs, ids = self._warp(logits)
        picked = inverse_cdf(probs, [keyed_uniform(params.seed, q) for q in positions])  # type: ignore[arg-type]
        if ids is None:
            return picked
        return ids.gather(1, torch.tensor(picked).unsqueeze(1)).squeeze(1).tolist()

    # ------------------------------------------------------------------ internals
    def _warp(self, logits: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The warped probabilities, and the token ids they are over, ascending (None: the whole
        vocabulary). With top_p, only the nucleus is kept: drawing in token-id order over it is the
        same draw as over the whole row with the rest at 0, without a pass over the vocabulary."""
        params = self.params
        scores = logits / params.temperature
        overflowed = (torch.isposinf(scores) | torch.isnan(scores)).any(dim=-1)
        if bool(overflowed.any()):
            # a tiny temperature (or penalty) overflowed float32, or rounded to 0 in it: the row's limit, taken
            # in float64 after its maximum is out (every score <= 0: the maximum's 0, the rest -inf at worst); for
            # those rows alone, so that a row's probabilities never depend on the rows drawn beside it
            capped = logits[overflowed].double().clamp(max=torch.finfo(torch.float64).max)
            scores = scores.clone()
            scores[overflowed] = ((capped - capped.max(dim=-1, keepdim=True).values) / params.temperature).float()
        vocab = scores.shape[-1]
        if 0 < params.top_k < vocab:
            kth = scores.topk(params.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ids = None
        if params.top_p < 1.0:
            probs, ids = _nucleus(probs, params.top_p)
        if params.min_p > 0.0:  # the highest probability is always in the nucleus
            probs = probs.masked_fill(probs < params.min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
        return probs, ids

    def _penalise(self, logits: torch.Tensor, paths: Sequence[Sequence[int]]) -> torch.Tensor:
        """The penalties of each row: over the tokens so far and the row's own path (the draft tokens before it).
        Each row's frequency and presence penalty is one float32 expression of its whole count, as plain decoding's
        (two subtractions, the counts so far and then the path's, differ from it in the last bit, which at a
        near-tie flips a token)."""
        params = self.params
        rep = params.repetition_penalty
        if rep != 1.0:
            if self._seen_index is None:
                self._seen_index = torch.tensor(sorted(self._seen), dtype=torch.long)
            if len(self._seen_index):
                logits[:, self._seen_index] = _repeat(logits[:, self._seen_index], rep)
            for row, path in enumerate(paths):
                for token in dict.fromkeys(int(t) for t in path):
                    if token not in self._seen:
                        logits[row, token] = _repeat(logits[row, token], rep)
        freq, presence = params.frequency_penalty, params.presence_penalty
        if not (freq or presence):
            return logits
        extras = [Counter(int(t) for t in path) for path in paths]
        index, counts = self._counted()
        if any(extras):  # a count per row over every token counted so far or on a path
            new = sorted(set().union(*extras).difference(self._counts))
            if new:
                index, order = torch.cat([index, torch.tensor(new, dtype=torch.long)]).sort()
                counts = torch.cat([counts, torch.zeros(len(new))])[order]
            rows = counts.repeat(len(paths), 1)
            at = [(row, token, n) for row, extra in enumerate(extras) for token, n in extra.items()]
            where = (torch.tensor([a[0] for a in at]), torch.searchsorted(index, torch.tensor([a[1] for a in at])))
            rows.index_put_(where, torch.tensor([float(a[2]) for a in at]), accumulate=True)
            logits[:, index] -= freq * rows + presence * (rows > 0)
        elif self._counts:
            logits[:, index] -= freq * counts + presence
        return logits

    def _counted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens counted so far (ascending) and their counts, as tensors (kept until the next token)."""
        if self._count_index is None:
            ids = sorted(self._counts)
            self._count_index = (torch.tensor(ids, dtype=torch.long),
                                 torch.tensor([float(self._counts[t]) for t in ids], dtype=torch.float32))
        return self._count_index


def _repeat(values: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty: positive logits divided by it, the others multiplied."""
    return torch.where(values > 0, values / penalty, values * penalty)


def _nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest set of highest probabilities that reaches ``top_p``, per row: ``(p, ids)`` over
    the same k candidates per row in ascending token id, those outside the set at 0.

    >>> p, ids = _nucleus(torch.tensor([[0.1, 0.6, 0.3]]), 0.8)
    >>> ids.tolist(), p.tolist()
    ([[0, 1, 2]], [[0.0, 0.6000000238418579, 0.30000001192092896]])

    Equal probabilities are ranked by token id, so the set is the row's own whatever else is in the call: a
    bfloat16 row holds few distinct values, and where the set's edge falls among equal ones, which of them are in
    it must not depend on how many candidates another row of the same call needed (a drafting step samples its
    rows in one call, plain decoding one row). Of 0.25, 0.25, 0.25, 0.25 the set reaching 0.4 is ids 0 and 1:

    >>> _nucleus(torch.full((1, 4), 0.25), 0.4)[0].tolist()
    [[0.25, 0.25, 0.0, 0.0]]
    """
    vocab = probs.shape[-1]
    for k in (*(k for k in _NUCLEUS_PROBES if k < vocab), vocab):
        ordered, index = _ranked(probs, k)
        drop = ordered.cumsum(dim=-1) - ordered > top_p  # keep the smallest prefix reaching top_p
        if k == vocab:
            break
        edge = ordered.gather(-1, ((~drop).sum(dim=-1, keepdim=True) - 1).clamp(min=0))  # the last one kept
        if bool((edge > ordered[:, -1:]).all()):
            break  # every row's set, and every value equal to its edge, lies among its k highest
    kept = ordered.masked_fill(drop, 0.0)
    ids, order = index.sort(dim=-1)
    return kept.gather(-1, order), ids


def _ranked(probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` highest probabilities of each row and their ids, by probability descending, then id ascending (a
    canonical order: torch's topk and sort leave equal values in an order of their own)."""
    if k >= probs.shape[-1]:  # the whole row, already in id order: one stable sort
        ordered, rank = probs.sort(dim=-1, descending=True, stable=True)
        return ordered, rank
    values, index = probs.topk(k, dim=-1)
    ids, by_id = index.sort(dim=-1)
    ordered, rank = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True)
    return ordered, ids.gather(-1, rank)

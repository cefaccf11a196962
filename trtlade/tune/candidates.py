"""Which (w,n,g) specs ``trtlade tune`` measures, and why the others were left out.

Every legal spec the server's (W,N,G) admits could run, but each costs a full sweep over the
concurrency levels, so they are pruned in steps that are shown to the user:

1. every legal (w,n,g) with w<=W, n<=N, g<=G;
2. without the ones below the smallest meaningful lookahead (2,2,1) -- w=1 or g=0 drafts almost
   nothing -- except (1,1,0), plain decoding, the baseline every spec is compared with;
3. at most ``max_candidates`` lookahead specs: the server's own spec, then specs spread evenly over
   the draft lengths (``max_draft_len``) of the rest, so small and large drafts are both tried.

Beside them, the NGram / SA drafters a trtlade reference server offers (:class:`Drafter`, measured the same
way, sent as ``speculation``): the lookahead specs make the schedule for TensorRT-LLM engines (< 1.3), the
drafters the ``speculative_config`` of its PyTorch backend (1.3 and later).

Worked example, the embedded default's (2,4,2)::

    >>> c = prune(LookaheadSpec(2, 4, 2), max_candidates=4)
    >>> [str(s) for s in c.specs]
    ['1,1,0', '2,4,2', '2,2,1', '2,3,1', '2,4,1']
    >>> [(step.rule, step.count) for step in c.steps]  # doctest: +NORMALIZE_WHITESPACE
    [('admitted by (2,4,2)', 19), ('at least (2,2,1), plus (1,1,0)', 7),
     ('at most 4 lookahead specs, spread over draft lengths', 5)]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence, Union

from trtlade.drafting.config import DraftConfig, drafter_mode
from trtlade.spec import AUTOREGRESSIVE, MEANINGFUL_MINIMUM, LookaheadSpec, SpecError

__all__ = ["Candidate", "Candidates", "Drafter", "PruneStep", "prune", "explicit", "drafters_of"]


@dataclass(frozen=True)
class Drafter:
    """An NGram / SA candidate: its mode name (``ngram-4-2``, ``sa``) and its ``speculation`` block.

    >>> d = drafters_of(["sa-4--1"], max_draft_len=11)[0]
    >>> str(d), d.config.max_matching_ngram_size, d.is_autoregressive
    ('sa-4--1', -1, False)
    """

    name: str
    block: tuple[tuple[str, Any], ...]

    @property
    def speculation(self) -> dict[str, Any]:
        return dict(self.block)

    @property
    def config(self) -> DraftConfig:
        return DraftConfig.parse(self.speculation)

    @property
    def is_autoregressive(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.name


#: What tune measures: a lookahead (w,n,g) or an NGram / SA drafter.
Candidate = Union[LookaheadSpec, Drafter]


def drafters_of(names: Sequence[str], max_draft_len: int) -> list[Drafter]:
    """The drafter candidates by mode name (:func:`~trtlade.drafting.config.drafter_mode`); ValueError for one
    the server would refuse (more draft tokens than its ``max_draft_len``)."""
    out: list[Drafter] = []
    for name in names:
        block = drafter_mode(name)
        config = DraftConfig.parse(block)
        if config.max_draft_len > max_draft_len:
            raise ValueError(f"{name} drafts {config.max_draft_len} tokens per step; the server allows "
                             f"{max_draft_len} (serve.max_draft_len)")
        drafter = Drafter(name.strip().lower(), tuple(block.items()))
        if drafter not in out:
            out.append(drafter)
    return out


@dataclass(frozen=True)
class PruneStep:
    rule: str
    count: int  #: specs left after this step (the baseline (1,1,0) included)


@dataclass(frozen=True)
class Candidates:
    """The specs to measure, (1,1,0) first, the pruning steps that led to them, and the drafters."""

    specs: tuple[LookaheadSpec, ...]
    steps: tuple[PruneStep, ...]
    drafters: tuple[Drafter, ...] = ()

    @property
    def all(self) -> tuple[Candidate, ...]:
        """Everything measured: the lookahead specs ((1,1,0) first), then the drafters."""
        return (*self.specs, *self.drafters)

    def with_drafters(self, drafters: Sequence[Drafter]) -> "Candidates":
        return replace(self, drafters=tuple(drafters))

    def describe(self) -> str:
        return "; ".join(f"{s.rule}: {s.count}" for s in self.steps)


def admitted_specs(server: LookaheadSpec) -> list[LookaheadSpec]:
    """Every legal spec the server admits, smallest first."""
    out: list[LookaheadSpec] = []
    for n in range(1, server.ngram_size + 1):
        for w in range(1, server.window_size + 1):
            for g in range(0, server.verification_set_size + 1):
                try:
                    out.append(LookaheadSpec(w, n, g))
                except SpecError:
                    continue
    return out


def _meaningful(spec: LookaheadSpec) -> bool:
    return all(a >= b for a, b in zip(spec.as_tuple(), MEANINGFUL_MINIMUM.as_tuple()))


def _spread(specs: Sequence[LookaheadSpec], count: int) -> list[LookaheadSpec]:
    """``count`` specs spread evenly over the list ordered by draft length (ends included)."""
    if count >= len(specs):
        return list(specs)
    if count == 1:
        return [specs[len(specs) // 2]]
    picks = sorted({round(i * (len(specs) - 1) / (count - 1)) for i in range(count)})
    return [specs[i] for i in picks]


def prune(server: LookaheadSpec, max_candidates: int = 6) -> Candidates:
    """The candidates for a server with ``server`` (W,N,G); ``max_candidates`` bounds the lookahead
    specs (the baseline (1,1,0) comes on top)."""
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1")
    every = admitted_specs(server)
    steps = [PruneStep(f"admitted by ({server})", len(every))]
    meaningful = [s for s in every if _meaningful(s)]
    steps.append(PruneStep(f"at least ({MEANINGFUL_MINIMUM}), plus ({AUTOREGRESSIVE})", len(meaningful) + 1))
    chosen: list[LookaheadSpec] = []
    if meaningful:
        rest = sorted((s for s in meaningful if s != server), key=lambda s: (s.max_draft_len, s.as_tuple()))
        head = [server] if server in meaningful else []
        chosen = head + _spread(rest, max_candidates - len(head))
        if len(meaningful) > max_candidates:
            steps.append(PruneStep(f"at most {max_candidates} lookahead specs, spread over draft lengths",
                                   len(chosen) + 1))
    return Candidates(specs=(AUTOREGRESSIVE, *chosen), steps=tuple(steps))


def explicit(specs: Sequence[LookaheadSpec], server: LookaheadSpec) -> Candidates:
    """The user's own list (``--candidates``), with (1,1,0) added; every spec must be admitted."""
    refused = [s for s in specs if not server.admits(s)]
    if refused:
        raise ValueError(f"({refused[0]}) is not admitted by the server's ({server})")
    unique = [AUTOREGRESSIVE] + [s for i, s in enumerate(specs) if s != AUTOREGRESSIVE and s not in specs[:i]]
    return Candidates(specs=tuple(unique), steps=(PruneStep("given with --candidates, plus (1,1,0)", len(unique)),))

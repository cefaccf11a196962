#!/usr/bin/env python3
"""What `auto`'s plan expected of each draft option at one request, against what that option would have accepted,
on every step it could run and on the steps it ran; and what each option alone, or SA's chain, would have accepted
on the same steps. A greedy answer is the model's own continuation, so once a request ended, every candidate of
every planned step is scored against its final text: no second run, no model call.

Per (context, option): the steps it had rows, the plan's mean gain for it (its calibrated estimate plus its
exploration bonus: what the plan ranked by), what it would have accepted (mean), and its rows; then the same over
the steps the plan chose it. Then the total accepted drafts over the planned steps of: what the plan chose, each
option chosen at every step it had rows, SA's chain (the longest earlier suffix's next ``--sa-drafts`` tokens,
``max_draft_len`` of a fixed SA), and the best candidate in hindsight. The window (``full``) is not scored: its
rows depend on the Jacobi iteration, not on the text.

In-process, the reference engine, the embedded model, the ``mix`` prompts one at a time through one batch:

    .venv/bin/python benchmarks/auto_choices.py --dtype bfloat16 --prompts 20 --passes 2
"""

from __future__ import annotations

import argparse
import collections
from typing import Any, Sequence

from trtlade.reference.prefix_cache import common_prefix


def would_accept(cands: Sequence[tuple[tuple[int, ...], str]], truth: Sequence[int]) -> dict[str, int]:
    """What each scored option (:data:`~trtlade.reference.batching.DRAFT_OPTIONS` but ``full``) accepts against the
    text that followed: a source its best candidate's matching prefix, ``first`` at most one token, ``candidates``
    the best but ``public``'s (verified alone).

    >>> would_accept([((5, 6), "pool"), ((5, 6, 7, 8), "prompt_lookup"), ((9,), "public")], [5, 6, 7, 2])
    {'pool': 2, 'prompt_lookup': 3, 'public': 0, 'first': 1, 'candidates': 3}
    """
    out: dict[str, int] = {}
    for cand, source in cands:
        out[source] = max(out.get(source, 0), common_prefix(cand, truth))
    tree = [n for source, n in out.items() if source != "public"]
    if tree:
        out["first"], out["candidates"] = min(1, max(tree)), max(tree)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=20, help="the first N mix prompts")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--passes", type=int, default=2, help="passes over the prompts; the last one is scored")
    ap.add_argument("--sa-drafts", type=int, default=4, help="SA's max_draft_len for its counterfactual chain")
    ap.add_argument("--engine-spec", default="2,4,2")
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import device_name
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference import adaptive, batching
    from trtlade.reference.batching import DRAFT_OPTIONS
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(None, spec=args.engine_spec, dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts][:args.prompts]
    steps: list[dict[str, Any]] = []
    now: dict[str, Any] = {}
    plan, options, step = adaptive.AutoPolicy.plan, batching.SequenceState.draft_options, batching.Batch.step

    def planned(self: Any, fixed: Any, candidates: Any, caps: Any = None) -> list[int]:
        gains = [self._nested_gains(opts, len(fixed) + len(candidates), {}) for opts in candidates]
        chosen = plan(self, fixed, candidates, caps)
        now.update(gains=gains[0], chosen=chosen[0])
        return chosen

    def offered(self: Any) -> Any:
        out = options(self)
        algo = self.algo
        found = algo._suffixes.lookup() if algo._suffixes is not None else None
        now.update(state=self, at=len(self.tokens), context=self.context,
                   names=[*DRAFT_OPTIONS, *(f"{source}@{depth}" for source, depth in self._cuts)],
                   cands=list(algo.candidates(depth=self.draft_cap) if self.draft_cap else algo.candidates()),
                   sa=tuple(algo._suffixes.continuation(found[0], args.sa_drafts)) if found else ())
        return out

    def stepped(self: Any, *a: Any, **k: Any) -> Any:
        now.clear()
        out = step(self, *a, **k)
        if "gains" in now and "cands" in now:
            steps.append(dict(now))
        return out

    adaptive.AutoPolicy.plan, batching.SequenceState.draft_options, batching.Batch.step = planned, offered, stepped
    for _ in range(args.passes):
        steps.clear()
        batch = engine.new_batch(max_batch_size=1)
        for p in prompts:
            batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=args.max_tokens))
        while len(batch):
            batch.step()
    report(steps)
    print(f"\nin-process on {device_name('cpu')}, {args.dtype}, the first {len(prompts)} mix prompts one at a time, "
          f"{args.max_tokens} tokens, pass {args.passes} of {args.passes} scored, engine spec {args.engine_spec}")


def cut_accepts(would: dict[str, int], name: str) -> int:
    """What option ``name`` accepts given what each whole option would (:func:`would_accept`): a chain cut short
    (``source@depth``) its source's match up to its depth.

    >>> cut_accepts({"prompt_lookup": 3}, "prompt_lookup@2"), cut_accepts({"prompt_lookup": 3}, "pool@1")
    (2, 0)
    """
    source, _, depth = name.partition("@")
    return min(would.get(source, 0), int(depth)) if depth else would.get(name, 0)


def report(steps: list[dict[str, Any]]) -> None:
    offered = collections.defaultdict(lambda: [0, 0.0, 0, 0])  # steps, gain, accepted, rows
    chosen = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    totals = collections.Counter()
    against_sa = collections.defaultdict(lambda: [0, 0, 0, 0])  # steps, the choice's accepted, SA's, SA had a chain
    for s in steps:
        truth = s["state"].tokens[s["at"]:]
        would = would_accept(s["cands"], truth)
        totals["SA's chain"] += common_prefix(s["sa"], truth)
        totals["best candidate in hindsight"] += max(would.values(), default=0)
        names = s["names"]
        for k, (gain, rows) in enumerate(s["gains"]):
            name = names[k]
            if rows <= 0 or name.partition("@")[0] not in would:
                continue
            accepted = cut_accepts(would, name)
            totals[f"{name} wherever it has rows"] += accepted
            for table, counted in ((offered, True), (chosen, s["chosen"] == k)):
                if counted:
                    cell = table[(s["context"], name)]
                    cell[0] += 1
                    cell[1] += gain
                    cell[2] += accepted
                    cell[3] += rows
        where = names[s["chosen"]] if s["chosen"] >= 0 else "golden row only"
        totals["the plan's choices"] += cut_accepts(would, where)
        cell = against_sa[(s["context"], where)]
        cell[0] += 1
        cell[1] += cut_accepts(would, where)
        cell[2] += common_prefix(s["sa"], truth)
        cell[3] += bool(s["sa"])
    print(f"{len(steps)} planned steps; per context and option: steps, the plan's mean gain, mean accepted, mean rows")
    print("| context | option | offered: steps | gain | accepted | rows | chosen: steps | gain | accepted | rows |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(offered):
        cells = []
        for table in (offered, chosen):
            n, gain, accepted, rows = table.get(key, (0, 0.0, 0, 0))
            cells += [str(n), *(f"{v / n:.2f}" if n else "-" for v in (gain, accepted, rows))]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    print("\nby the plan's choice (the golden row only included): steps, accepted drafts of the choice, of SA's chain "
          "on the same steps, and the steps SA had a chain")
    print("| context | choice | steps | accepted | SA's chain | SA drafted |")
    print("|---|---|---:|---:|---:|---:|")
    for (context, where), (n, got, sa, had) in sorted(against_sa.items()):
        print(f"| {context} | {where} | {n} | {got} | {sa} | {had} |")
    print("\naccepted drafts over the planned steps:")
    for name, value in totals.most_common():
        print(f"  {name}: {value}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the default's choices are worth against a fixed drafter's, with the host's noise taken out: every mode
decodes the same prompts one at a time, and each step is priced by a fixed cost curve (a step of R rows costs
``curve(R)`` plain steps) instead of the clock. ``auto``'s cost model is filled from the same curve (32 samples a
row count, each within ``--jitter`` of it) and stops learning, so its plan prices rows as the curve does (as the
engine's table prices them: no row count above a wider one, so where a curve dips, as ``zen3-forward`` does at 6
rows, the plan prices 5 rows at 6 rows' cost); the answers are greedy, hence the same in every mode and every run,
and so are the figures.

Prints per curve and mode: tokens and rows a step, the modeled cost of a step, and tokens per modeled cost -- the
speedup over plain decoding the choices give on that curve, before the host work around a step (which the
curve leaves out: ``benchmarks/mode_step_cost.py --functions`` measures it) -- and that figure against the best
fixed drafter's. A served gap that this does not show is in what a step costs, not in what it chooses.

Curves (``--curve``, repeatable): a name below, or ``ROWS:COST,...`` with 1:1 first (between two row counts the
cost is interpolated, beyond the last extrapolated from the last two):

- ``zen3-forward``: one sequence's forward of R rows, the embedded model in float32 on a 2-core AMD EPYC Zen 3
  (``benchmarks/batch_scaling.py --parts --rows 1,2,3,4,5,6,8 --repeats 15``, 2026-12-07, median of 15; 16 rows
  from the same host's forward by rows that morning, ``--forward-only``: 1.61x);
- ``zen3-steps``: the engine's own decode steps by rows on the same host, timed at load
  (``benchmarks/auto_alone.py``, 2026-12-07: 18.47 ms at 1 row to 31.78 ms at 16; its 1-5, 8 and 16 rows, the
  6-row step, 1.217x, left out and interpolated, 1.30x);
- ``flat`` (memory-bound to 8 rows, as on a GPU) and ``steep`` (every row 8% more): made up, to show how the
  choices follow the curve.

The first ``--passes`` less one pass over the prompts teaches the server-wide estimates; the last one is scored.

    .venv/bin/python benchmarks/choice_value.py                                   # the bench's 8 mix prompts
    .venv/bin/python benchmarks/choice_value.py --prompts 20 --curve zen3-steps --curve 1:1,4:1.05,16:1.3
    .venv/bin/python benchmarks/choice_value.py --modes auto --explore 0.5 --passes 1     # a cold server, less bonus
"""

from __future__ import annotations

import argparse
import random
from typing import Optional

CURVES = {
    "zen3-forward": {1: 1.0, 2: 1.0, 3: 1.06, 4: 1.09, 5: 1.22, 6: 1.20, 8: 1.31, 16: 1.61},
    "zen3-steps": {1: 1.0, 2: 1.030, 3: 1.048, 4: 1.202, 5: 1.240, 8: 1.417, 16: 1.721},
    "flat": {1: 1.0, 2: 1.01, 3: 1.02, 4: 1.03, 5: 1.04, 8: 1.07, 16: 1.30},
    "steep": {1: 1.0, 2: 1.08, 3: 1.16, 4: 1.24, 5: 1.32, 8: 1.56, 16: 2.20},
}
#: the bench's modes at one request (``trtlade bench --modes``): ``auto`` is a request without a draft field
SPECULATION = {"ngram": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2},
               "sa": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}}


def parse_curve(text: str) -> dict[int, float]:
    """A curve by name, or ``ROWS:COST,...`` (1:1 first, rows rising, costs positive).

    >>> parse_curve("1:1,4:1.1,8:1.3")
    {1: 1.0, 4: 1.1, 8: 1.3}
    """
    if text in CURVES:
        return CURVES[text]
    try:
        curve = {int(r): float(c) for r, c in (part.split(":") for part in text.split(","))}
    except ValueError:
        curve = {}
    rows = list(curve)
    if len(rows) < 2 or rows[0] != 1 or curve[1] != 1.0 or rows != sorted(rows) or min(curve.values()) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a curve is one of {', '.join(CURVES)}, or ROWS:COST pairs "
                                         "from 1:1 on, rows rising, e.g. 1:1,4:1.1,8:1.3")
    return curve


def cost(curve: dict[int, float], rows: int) -> float:
    """A step of ``rows`` rows in plain steps: interpolated between the curve's row counts, extrapolated beyond.

    >>> curve = {1: 1.0, 4: 1.3, 8: 1.5}
    >>> [round(cost(curve, r), 3) for r in (1, 2, 8, 12)]
    [1.0, 1.1, 1.5, 1.7]
    """
    if rows in curve:
        return curve[rows]
    known = sorted(curve)
    below = max(r for r in known if r < rows)
    above: Optional[int] = min((r for r in known if r > rows), default=None)
    if above is None:
        below, above = known[-2], known[-1]
    slope = (curve[above] - curve[below]) / (above - below)
    return curve[below] + slope * (rows - below)


def run(engine, prompts, mode: str, curve: dict[int, float], passes: int, jitter: float, max_tokens: int,
        explore: Optional[float] = None):
    """One mode on one curve: (tokens, steps, rows, modeled cost) of the last pass's decode steps. ``explore``: the
    plan's exploration bonus (None: the engine's)."""
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.drafting.config import DraftConfig, drafter_mode
    from trtlade.reference.adaptive import AutoPolicy, CostTable
    from trtlade.spec import LookaheadSpec

    tuned = {} if explore is None else {"explore": explore}
    policy = AutoPolicy(CostTable(relative=True, capped=True), **tuned)  # as the engine makes it, filled and frozen
    draw = random.Random(0)
    for rows in range(1, 17):
        for _ in range(CostTable.keep_last):
            policy.cost.add(rows, 0.020 * cost(curve, rows) * (1.0 + draw.uniform(-jitter, jitter)))
    policy.observe_cost = lambda *args, **kwargs: None
    engine.policy = policy
    speculation = DraftConfig.parse(drafter_mode(mode)) if mode in SPECULATION else None
    spec = LookaheadSpec(1, 1, 0) if mode == "ar" else None
    for _ in range(passes):
        tokens = steps = rows = 0
        spent = 0.0
        batch = engine.new_batch(max_batch_size=1)
        for prompt in prompts:
            batch.add(GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens, lookahead=spec,
                                        speculation=speculation))
        while len(batch):
            out = batch.step()
            if batch.last.running and not batch.last.prefills:
                tokens += sum(len(chunk.tokens) for _, chunk in out)
                steps += 1
                rows += batch.last.rows
                spent += cost(curve, batch.last.rows)
    return tokens, steps, rows, spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--curve", action="append", type=parse_curve, help="a named curve or ROWS:COST,... (repeatable; "
                    "default: zen3-forward and zen3-steps)")
    ap.add_argument("--modes", default="ar,auto,sa,ngram", help="comma-separated: ar, auto, sa, ngram")
    ap.add_argument("--prompts", type=int, default=8, help="the first N mix prompts (the bench sends the first 8)")
    ap.add_argument("--passes", type=int, default=2, help="passes over the prompts; the last one is scored")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--jitter", type=float, default=0.02,
                    help="each cost sample within this share of the curve (the plan's noise margin follows it)")
    ap.add_argument("--explore", type=float, default=None,
                    help="the plan's exploration bonus, in standard deviations (default: the engine's)")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - {"ar", "auto", *SPECULATION})
    if (unknown or min(args.passes, args.prompts, args.max_tokens) < 1 or not 0 <= args.jitter < 1
            or (args.explore or 0) < 0):
        ap.error(f"--modes from ar, auto, sa, ngram (got {', '.join(unknown) or 'those'}); --passes, --prompts and "
                 "--max-tokens at least 1; --jitter in [0, 1); --explore at least 0")
    curves = args.curve or [CURVES["zen3-forward"], CURVES["zen3-steps"]]

    from trtlade.bench.datasets import load_dataset
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(None, spec="2,4,2", dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup("fast", "2,4,2"))
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts][:args.prompts]
    print(f"{args.dtype}, the first {len(prompts)} mix prompts one at a time, {args.max_tokens} tokens, pass "
          f"{args.passes} of {args.passes} scored, engine spec 2,4,2, cost samples within {args.jitter:.0%}"
          + (f", explore {args.explore:g}" if args.explore is not None else ""))
    for curve in curves:
        results = {mode: run(engine, prompts, mode, curve, args.passes, args.jitter, args.max_tokens, args.explore)
                   for mode in modes}
        if any(steps == 0 for _, steps, _, _ in results.values()):
            raise SystemExit("no decode step was run (each answer ended at its first token): raise --max-tokens")
        rate = {mode: tokens / spent for mode, (tokens, _, _, spent) in results.items()}
        fixed = [m for m in modes if m in SPECULATION]
        best = max(fixed, key=rate.get) if fixed else None
        print(f"\ncurve {', '.join(f'{r}: {c:g}' for r, c in curve.items())}")
        print("| mode | tokens a step | rows a step | modeled step | tokens per modeled step |"
              + (f" vs {best} |" if best else ""))
        print("|---|---:|---:|---:|---:|" + ("---:|" if best else ""))
        for mode, (tokens, steps, rows, spent) in results.items():
            print(f"| {mode} | {tokens / steps:.3f} | {rows / steps:.2f} | {spent / steps:.3f} | {rate[mode]:.4f} |"
                  + (f" {rate[mode] / rate[best] - 1:+.1%} |" if best else ""))


if __name__ == "__main__":
    main()

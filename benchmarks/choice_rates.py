#!/usr/bin/env python3
"""How often does `trtlade tune`'s choice pick a spec no faster than plain decoding, and how often does it find
one that is? Simulated measurements, no model: the choice is the real one (trtlade.tune.select.choose).

Each trial makes one level's runs: plain decoding (1,1,0) and K candidates, R repeats, each run's log throughput
the candidate's true effect, plus the repeat's shift (shared by every run of the repeat: the prompts differ), plus
noise of its own (``--noise``, 3.5% by default: a 16-request run on a shared 2-core machine). Then it asks
`choose` which candidate the level gets, and counts:

- ``any``: how often a candidate was chosen (where every candidate equals (1,1,0): the chance of a false choice,
  which the rule keeps near or below 5%);
- ``right``: how often the candidate that is faster was chosen.

Beside tune's rule (a candidate's own noise replaces the level's where an F test says it is larger beyond
chance) it replays the rule of `trtlade bench`'s verdicts (a cell's own noise wherever it is larger), which tune
used before, so the two can be compared on the same draws.

    .venv/bin/python benchmarks/choice_rates.py                       # 4000 trials, 2 and 3 repeats, K = 6
    .venv/bin/python benchmarks/choice_rates.py --trials 500 --repeats 2 --candidates 2
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trtlade.bench import noise  # noqa: E402
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec  # noqa: E402
from trtlade.tune import select  # noqa: E402

#: (name, the faster candidate's true speedup, its noise factor, plain decoding's noise factor,
#:  the noise factor of one of the equal candidates)
SCENARIOS = [
    ("all equal, equal noise", 1.0, 1.0, 1.0, 1.0),
    ("all equal, one candidate 3x noisier", 1.0, 1.0, 1.0, 3.0),
    ("all equal, plain decoding 3x noisier", 1.0, 1.0, 3.0, 1.0),
    ("one +10%", 1.10, 1.0, 1.0, 1.0),
    ("one +10%, 2x noisier", 1.10, 2.0, 1.0, 1.0),
    ("one +30%", 1.30, 1.0, 1.0, 1.0),
    ("one +30%, 2x noisier", 1.30, 2.0, 1.0, 1.0),
]


def bench_rule(ratios, level, comparisons=1, above=None, others=None):
    """The verdicts' rule: the cell's own noise wherever it is larger than the level's."""
    return noise.margin(ratios, level, comparisons, above)


def trial(rng: random.Random, specs: list, effects: list[float], scales: list[float], repeats: int,
          sd: float) -> object:
    runs = []
    for r in range(repeats):
        shift = rng.gauss(0.0, 0.1)
        for spec, effect, scale in zip(specs, effects, scales):
            tok_s = 100.0 * effect * math.exp(shift + rng.gauss(0.0, sd * scale))
            runs.append(select.Run(spec, 1, r, tok_s, None, None))
    return select.choose(select.tabulate(runs))[0].spec


def rates(rule, scenario, k: int, repeats: int, trials: int, sd: float, seed: int) -> tuple[float, float]:
    _, speedup, fast_noise, base_noise, other_noise = scenario
    specs = [AUTOREGRESSIVE] + [LookaheadSpec(2, n, g) for n, g in [(2, 1), (2, 2), (3, 1), (3, 2), (4, 1), (4, 2),
                                                                     (5, 1), (5, 2)][:k]]
    effects = [1.0] * k + [speedup]
    scales = [base_noise] + [other_noise] + [1.0] * (k - 2) + [fast_noise]
    select.margin = rule
    rng = random.Random(seed)
    picks = [trial(rng, specs, effects, scales, repeats, sd) for _ in range(trials)]
    chosen = sum(p != AUTOREGRESSIVE for p in picks) / trials
    return chosen, sum(p == specs[-1] for p in picks) / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--repeats", default="2,3", help="repeats per run, comma-separated")
    ap.add_argument("--candidates", type=int, default=6, help="K, the candidates besides (1,1,0) (2 to 8)")
    ap.add_argument("--noise", type=float, default=0.035, help="a run's own noise (sd of its log throughput)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if not 2 <= args.candidates <= 8:
        ap.error("--candidates must be 2 to 8")
    tune_rule = select.margin
    print(f"K = {args.candidates} candidates, {args.trials} trials each, run noise {args.noise:.1%}")
    print("| scenario | repeats | tune: any | tune: right | verdicts' rule: any | verdicts' rule: right |")
    print("|---|---:|---:|---:|---:|---:|")
    for repeats in (int(r) for r in args.repeats.split(",")):
        for scenario in SCENARIOS:
            row = [rates(rule, scenario, args.candidates, repeats, args.trials, args.noise, args.seed)
                   for rule in (tune_rule, bench_rule)]
            right = ["" if scenario[1] == 1.0 else f"{r:.1%}" for _, r in row]
            print(f"| {scenario[0]} | {repeats} | {row[0][0]:.1%} | {right[0]} | {row[1][0]:.1%} | {right[1]} |",
                  flush=True)


if __name__ == "__main__":
    main()

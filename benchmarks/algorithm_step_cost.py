#!/usr/bin/env python3
"""CPU cost of the lookahead bookkeeping per step (prepare + verify + commit), no model.

Drives :class:`trtlade.lookahead.LookaheadAlgorithm` with an order-3 n-gram oracle over a random
corpus (argmax computed outside the timed region) and prints microseconds per step next to the
rows per step and tokens per step, for a few specs.

    .venv/bin/python benchmarks/algorithm_step_cost.py
    .venv/bin/python benchmarks/algorithm_step_cost.py --specs 7,7,7 15,5,15 --steps 500
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trtlade.lookahead.algorithm import LookaheadAlgorithm  # noqa: E402
from trtlade.lookahead.oracles import NgramOracle  # noqa: E402
from trtlade.lookahead.simulate import row_prefixes  # noqa: E402
from trtlade.spec import LookaheadSpec, SpecError  # noqa: E402


def measure(spec: LookaheadSpec, steps: int, seed: int) -> dict:
    rng = random.Random(seed)
    corpus = [rng.randrange(300) for _ in range(400)] * 3
    oracle = NgramOracle(corpus, order=3, fallback_vocab=300)
    prompt = corpus[:256]
    algo = LookaheadAlgorithm(spec, seed=seed)
    algo.setup(prompt, oracle(prompt))
    text = prompt + [algo.golden]
    timed = {"prepare": 0.0, "mask": 0.0, "verify": 0.0, "commit": 0.0}
    rows = tokens = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = algo.prepare()
        t1 = time.perf_counter()
        batch.mask_array()
        t2 = time.perf_counter()
        argmax = [-1] * batch.num_rows
        for row, prefix in zip(batch.logit_rows, row_prefixes(text[:-1], batch, batch.logit_rows)):
            argmax[row] = oracle(prefix)
        t3 = time.perf_counter()
        result = algo.verify(argmax)
        t4 = time.perf_counter()
        algo.commit()
        t5 = time.perf_counter()
        timed["prepare"] += t1 - t0
        timed["mask"] += t2 - t1
        timed["verify"] += t4 - t3
        timed["commit"] += t5 - t4
        text.extend(result.tokens)
        rows += batch.num_rows
        tokens += len(result.tokens)
    out = {k: 1e6 * v / steps for k, v in timed.items()}
    out["total"] = sum(out.values())
    out["rows/step"] = rows / steps
    out["tokens/step"] = tokens / steps
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="+", default=["2,2,1", "4,3,4", "7,7,7", "15,5,15"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        specs = [LookaheadSpec.parse(s) for s in args.specs]
    except SpecError as exc:
        parser.error(f"--specs: {exc}")
    print(f"{'spec':>9} {'prepare':>8} {'mask':>6} {'verify':>7} {'commit':>7} {'total us':>9} "
          f"{'rows/step':>9} {'tokens/step':>11}")
    for spec in specs:
        m = measure(spec, args.steps, args.seed)
        print(f"{str(spec):>9} {m['prepare']:8.1f} {m['mask']:6.1f} {m['verify']:7.1f} {m['commit']:7.1f} "
              f"{m['total']:9.1f} {m['rows/step']:9.1f} {m['tokens/step']:11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

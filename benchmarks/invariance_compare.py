"""What row-invariant attention costs, and what it buys: the embedded model with it (the default) and
without (``invariant_attention=False``: sdpa for one sequence, the batched kernel for several), interleaved.

For each dtype: ms per decoding step (prompt included, divided by steps) for greedy and each lookahead
spec, median and min-max over ``--repeats`` interleaved repeats, the ratio invariant / not, and the
identity of every lookahead mode with the same engine's greedy (and seeded sampling with plain sampling).

    .venv/bin/python benchmarks/invariance_compare.py --dtype bfloat16,float32 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.prompt_suite import load_suite


def ms_per_step(engine, prompts, mode, max_tokens: int) -> float:
    steps, seconds = 0, 0.0
    for ids in prompts:
        t0 = time.perf_counter()
        result = engine.generate(ids, max_tokens, lookahead=mode, ignore_eos=True)
        seconds += time.perf_counter() - t0
        steps += result.stats.steps
    return 1000.0 * seconds / steps


def identity(engine, prompts, modes, max_tokens: int) -> tuple[int, int, int, int]:
    same = total = sampled_same = sampled_total = 0
    for i, ids in enumerate(prompts):
        greedy = engine.greedy(ids, max_tokens, ignore_eos=True).tokens
        plain = engine.generate(ids, max_tokens, lookahead=(1, 1, 0), temperature=0.8, seed=i, ignore_eos=True).tokens
        for mode in modes:
            total += 1
            same += engine.generate(ids, max_tokens, lookahead=mode, ignore_eos=True).tokens == greedy
            sampled_total += 1
            sampled_same += engine.generate(ids, max_tokens, lookahead=mode, temperature=0.8, seed=i,
                                            ignore_eos=True).tokens == plain
    return same, total, sampled_same, sampled_total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16,float32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8, help="suite prompts used (the first N)")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    modes = [(1, 1, 0), (2, 4, 2), (4, 4, 4), "auto"]
    for dtype in args.dtype.split(","):
        engines = {inv: ReferenceEngine.load(dtype=dtype, spec=(4, 4, 4), invariant_attention=inv)
                   for inv in (True, False)}
        assert engines[True].runner.invariant_attention == "native", engines[True].exactness
        tok = engines[True].tokenizer
        prompts = [p.encode(tok) for p in load_suite("suite").prompts[:args.prompts]]
        times: dict = {}
        for _ in range(args.repeats):
            for mode in modes:
                for inv in (True, False):
                    times.setdefault((str(mode), inv), []).append(ms_per_step(engines[inv], prompts, mode,
                                                                               args.max_tokens))
        print(f"{dtype}: ms per step, median (min-max) of {args.repeats} interleaved repeats, "
              f"{len(prompts)} prompts x {args.max_tokens} tokens")
        for mode in modes:
            on, off = times[(str(mode), True)], times[(str(mode), False)]
            ratios = [a / b for a, b in zip(on, off)]
            print(f"  {str(mode):10s} invariant {statistics.median(on):6.2f} ({min(on):.2f}-{max(on):.2f})  "
                  f"not {statistics.median(off):6.2f} ({min(off):.2f}-{max(off):.2f})  "
                  f"ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        for inv in (True, False):
            same, total, s_same, s_total = identity(engines[inv], prompts, modes[1:], args.max_tokens)
            print(f"  identity, invariant={inv}: greedy {same}/{total}, seeded sampling {s_same}/{s_total}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Time to first token with and without exact prefix reuse, in-process, on the embedded model.

A prompt of ``--prefix`` shared tokens (a long system prompt) and a short question of its own. Cold: the
prefix cache off, the whole prompt prefilled. Warm: the cache holds the prefix from an earlier request
with another question, so only the blocks past it are prefilled. Cold and warm are interleaved,
``--repeats`` times, each time with a fresh question; the first token must be the same (exactness) and
the logits bitwise equal. Prints the median and range of warm/cold.

    .venv/bin/python benchmarks/prefix_reuse.py                       # 1,000 shared tokens, fp32
    .venv/bin/python benchmarks/prefix_reuse.py --dtype bfloat16 --prefix 2000 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prefix", type=int, default=1000, help="shared tokens")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import torch

    from trtlade.bench.meta import machine_info
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype)
    tok, runner = engine.tokenizer, engine.runner
    words = ("You are a careful assistant for a logistics company. Answer with the exact figures from the "
             "tables you are given, name the table, and say when a figure is missing. ")
    shared = (tok.encode(words) * (args.prefix // 10 + 1))[:args.prefix]
    questions = [tok.encode(f" Question {i}: how many parcels left depot {7 * i + 3} on day {i + 1}?")
                 for i in range(args.repeats + 1)]

    def first_token(prompt: list[int], cached: bool) -> tuple[float, torch.Tensor, int]:
        slot = runner.allocate(len(prompt) + 4)
        t0 = time.perf_counter()
        hit = runner.reuse(slot, prompt) if cached else 0
        logits = runner.prefill(slot, prompt, start=hit)
        int(logits.argmax())  # the first token, greedy
        elapsed = time.perf_counter() - t0
        if cached:
            runner.remember(slot, prompt)
        runner.free(slot)
        return elapsed, logits, hit

    cache = runner.enable_prefix_cache(512 << 20)
    first_token(shared + questions[0], cached=True)  # an earlier request: the prefix is now cached
    ratios, colds, warms, same = [], [], [], 0
    for rep in range(args.repeats):
        prompt = shared + questions[rep + 1]
        order = (False, True) if rep % 2 == 0 else (True, False)
        got = {}
        for cached in order:
            if not cached:
                runner.prefix_cache = None
            got[cached] = first_token(prompt, cached)
            runner.prefix_cache = cache
        (t_cold, l_cold, _), (t_warm, l_warm, hit) = got[False], got[True]
        same += bool(torch.equal(l_cold, l_warm))
        colds.append(t_cold)
        warms.append(t_warm)
        ratios.append(t_warm / t_cold)
    info = machine_info()
    print(f"host: {info.get('cpu')}, {info.get('cpu_count')} CPUs; {engine.model_id} {engine.dtype}; "
          f"prompt {len(shared) + len(questions[1])} tokens, {len(shared)} shared, {hit} reused "
          f"(blocks of {cache.block_tokens})")
    print(f"cold TTFT (prefill + first token) {1000 * statistics.median(colds):.1f} ms "
          f"({1000 * min(colds):.1f}-{1000 * max(colds):.1f}), warm {1000 * statistics.median(warms):.1f} ms "
          f"({1000 * min(warms):.1f}-{1000 * max(warms):.1f}); warm/cold {statistics.median(ratios):.3f}x "
          f"({min(ratios):.3f}-{max(ratios):.3f}) over {args.repeats} interleaved repeats")
    print(f"logits bitwise equal cold vs warm: {same}/{args.repeats}; cache {cache.stats()}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Is the prefix cache's timing side channel closed? Time to first token of a probe that resends a victim's
prompt prefix, for the five cases of a multi-tenant server, next to a cold request, in-process on the
embedded model (the engine's batching path, as the server runs it).

Each trial: a fresh secret prefix of ``--prefix`` tokens (a document nobody sent before); the victim sends
it with a question; then one probe resends the prefix with another question:

* ``same identity``: the victim's own key (scope identity): reuse expected;
* ``other identity``: another key (scope identity): must look cold;
* ``same salt, other identity``: another key copying the victim's ``cache_salt`` (scope salt): must look cold;
* ``same identity, same salt``: the victim's key and salt (scope salt): reuse expected;
* ``cache off``: no prefix cache;
* ``cold``: a prefix nobody sent (the baseline the probes are compared with), after a victim's request of
  another document (the same work before the probe).

The cases are interleaved within each trial (the order rotates), ``--trials`` times. Printed: each case's
TTFT median and range, its ratio to ``cold``, the cached tokens the engine reported, and for the cases that
must look cold the two-sample Kolmogorov-Smirnov distance to ``cold`` with its 5% critical value (a distance
below it: the probe's TTFT distribution cannot be told from a cold request's at that level).

    .venv/bin/python benchmarks/prefix_scope_ttft.py                  # 1,000-token prefixes, 8 trials
    .venv/bin/python benchmarks/prefix_scope_ttft.py --prefix 500 --trials 12
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

CASES = ("same identity", "other identity", "same salt, other identity", "same identity, same salt",
         "cache off", "cold")
MUST_LOOK_COLD = ("other identity", "same salt, other identity", "cache off")


def ks_distance(a: list[float], b: list[float]) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs."""
    points = sorted(set(a) | set(b))
    return max(abs(sum(x <= p for x in a) / len(a) - sum(x <= p for x in b) / len(b)) for p in points)


def ks_critical(n: int, m: int, alpha: float = 0.05) -> float:
    """The asymptotic critical value of the two-sample KS statistic at level ``alpha``."""
    return math.sqrt(-0.5 * math.log(alpha / 2)) * math.sqrt((n + m) / (n * m))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=1000, help="tokens of the secret prefix")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()

    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import CacheScope
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype)
    tok, runner = engine.tokenizer, engine.runner
    words = tok.encode("tables depots parcels invoices routes drivers ledgers quarters figures suppliers ")
    rng = random.Random(0)

    def secret() -> list[int]:
        return [rng.choice(words) for _ in range(args.prefix)]

    def question(i: int) -> list[int]:
        return tok.encode(f" Question {i}: how many parcels left depot {7 * i + 3}?")

    def ttft(prompt: list[int], scope: CacheScope) -> tuple[float, int]:
        t0 = time.perf_counter()
        stream = engine.stream(prompt, max_tokens=2, ignore_eos=True, cache_scope=scope)
        first = next(stream)
        elapsed = time.perf_counter() - t0
        last = first
        for last in stream:
            pass
        return elapsed, int(last.stats.cached_tokens or 0)

    alice, bob = "alice", "bob"
    setups = {  # case -> (victim scope, probe scope, cache on)
        "same identity": (CacheScope("identity", alice), CacheScope("identity", alice), True),
        "other identity": (CacheScope("identity", alice), CacheScope("identity", bob), True),
        "same salt, other identity": (CacheScope("salt", alice, "s"), CacheScope("salt", bob, "s"), True),
        "same identity, same salt": (CacheScope("salt", alice, "s"), CacheScope("salt", alice, "s"), True),
        "cache off": (CacheScope("identity", alice), CacheScope("identity", alice), False),
    }
    ttft(question(0) * 4, CacheScope("global"))  # warm-up
    times: dict[str, list[float]] = {c: [] for c in CASES}
    cached: dict[str, list[int]] = {c: [] for c in CASES}
    for trial in range(args.trials):
        order = CASES[trial % len(CASES):] + CASES[:trial % len(CASES)]
        for case in order:
            runner.prefix_cache = None
            runner.enable_prefix_cache(512 << 20)
            doc = secret()
            if case == "cold":  # the victim's request too, of another document: the same work before the probe
                ttft(secret() + question(trial), CacheScope("identity", alice))
                t, c = ttft(doc + question(trial + 1), CacheScope("identity", alice))
            else:
                victim, probe, cache_on = setups[case]
                if not cache_on:
                    runner.prefix_cache = None
                ttft(doc + question(trial), victim)
                t, c = ttft(doc + question(trial + 1), probe)
            times[case].append(t * 1000)
            cached[case].append(c)
    cold = times["cold"]
    print(f"# prefix scopes: TTFT of a probe resending a {args.prefix}-token prefix, {args.trials} trials, "
          f"{args.dtype}; {machine_info().get('cpu')} ({machine_info().get('cpu_count')} CPUs)")
    print("| case | TTFT median ms (min-max) | vs cold | cached tokens | KS distance to cold (5% critical) |")
    print("|---|---:|---:|---:|---:|")
    crit = ks_critical(args.trials, args.trials)
    for case in CASES:
        ms = times[case]
        ratio = statistics.median(ms) / statistics.median(cold)
        ks = f"{ks_distance(ms, cold):.2f} ({crit:.2f})" if case in MUST_LOOK_COLD else "-"
        print(f"| {case} | {statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f}) | {ratio:.2f}x | "
              f"{statistics.median(cached[case]):.0f} | {ks} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A served-like wave of 8 prompts, in-process: time to first token and the wave's length, as the main
job's concurrency-8 level sees them, without HTTP and the load generator on the same cores.

The server keeps one batch for its life; so does this script. A wave is 8 ``mix`` prompts through the
chat template with the prefix cache emptied first (the bench's default): the first arrives alone and is
prefilled whole, the other 7 arrive during that prefill (as the bench's requests reach the engine a few
milliseconds apart) and go through the paced chunks beside its decoding (``serve.prefill_chunk_tokens``,
``serve.prefill_stall`` and ``serve.prefill_idle_chunk_tokens``: the config's defaults). Each request's first token
is timed from its own arrival. Two prompt sets (the first 8 ``mix`` prompts, then the next 8) per repeat; medians
at the end.

``--load queue``: ``--requests`` prompts (default 32) sent together to the 8 slots, each finished
request's slot taking the next at once (a server under steady load, its queue full): mean and p90 time to
first token from sending (queueing included) and the tokens/s delivered.

    .venv/bin/python benchmarks/wave_ttft.py --mode ar --repeats 2
    .venv/bin/python benchmarks/wave_ttft.py --mode auto --repeats 2 --trace     # the steps of each wave
    .venv/bin/python benchmarks/wave_ttft.py --mode ar --load queue --requests 32 --repeats 2

To compare two versions, run it alternately from two source trees (``git worktree add``), with the
tree on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("ar", "auto"), default="ar")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--trace", action="store_true", help="print each wave's first steps")
    ap.add_argument("--load", choices=("wave", "queue"), default="wave")
    ap.add_argument("--requests", type=int, default=32, help="--load queue: prompts sent together")
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import machine_info
    from trtlade.config.schema import DEFAULT_IDLE_CHUNK, DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_STALL
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.spec import LookaheadSpec

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype, prompt_lookup=preset_prompt_lookup("fast", "2,4,2"))
    cache = engine.runner.enable_prefix_cache(256 << 20)
    chat = PromptTokenizer(engine.tokenizer)
    mix = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    engine.generate(mix[0], max_tokens=8)  # warm-up
    batch = engine.new_batch(max_batch_size=8, prefill_chunk=DEFAULT_PREFILL_CHUNK,
                              prefill_stall=DEFAULT_PREFILL_STALL, idle_chunk=DEFAULT_IDLE_CHUNK)
    look = LookaheadSpec(1, 1, 0) if args.mode == "ar" else None

    def request(prompt: list[int]) -> GenerationRequest:
        return GenerationRequest(prompt_ids=tuple(prompt), max_tokens=args.max_tokens, lookahead=look)

    def wave(prompts: list[list[int]]) -> tuple[float, float, float]:
        """Mean and last time to first token, and the wave's length (s)."""
        cache.clear()
        start = time.perf_counter()
        arrived = {batch.add(request(prompts[0])): start}
        firsts: dict[int, float] = {}
        steps = []
        while len(batch):
            out = batch.step()
            now = time.perf_counter()
            steps.append((round(1000 * (now - start)), batch.last.running, batch.last.prefill_tokens))
            for seq_id, _ in out:
                firsts.setdefault(seq_id, now)
            if len(arrived) == 1:  # the others arrive during the first one's prefill
                arrived.update({batch.add(request(p)): now for p in prompts[1:]})
        if args.trace:
            print("  steps (ms since the wave began, decoding, prompt rows):", steps[:12])
        ttfts = [firsts[i] - arrived[i] for i in arrived]
        return statistics.mean(ttfts), max(ttfts), time.perf_counter() - start

    def queue(prompts: list[list[int]]) -> tuple[float, float, float]:
        """Mean and p90 time to first token from sending (s), and the tokens/s delivered."""
        cache.clear()
        start = time.perf_counter()
        ids = [batch.add(request(p)) for p in prompts]
        firsts: dict[int, float] = {}
        tokens = 0
        while len(batch):
            for seq_id, chunk in batch.step():
                firsts.setdefault(seq_id, time.perf_counter() - start)
                tokens += len(chunk.tokens)
        ttfts = sorted(firsts[i] for i in ids)
        return statistics.mean(ttfts), ttfts[int(0.9 * (len(ttfts) - 1))], tokens / (time.perf_counter() - start)

    if args.load == "queue":
        runs = [queue([mix[(args.requests * rep + i) % len(mix)] for i in range(args.requests)])
                for rep in range(args.repeats)]
        for rep, (mean, p90, rate) in enumerate(runs):
            print(f"repeat {rep + 1}: mean TTFT {1000 * mean:.0f} ms, p90 {1000 * p90:.0f} ms, {rate:.1f} tokens/s")
        rates = [r[2] for r in runs]
        print(f"{machine_info()['cpu']}, {engine.threads} threads, {args.dtype}, {args.mode}, {args.requests} "
              f"requests on 8 slots, median (min-max): mean TTFT {spread_ms([r[0] for r in runs])}, p90 "
              f"{spread_ms([r[1] for r in runs])}, {statistics.median(rates):.1f} tokens/s "
              f"({min(rates):.1f}-{max(rates):.1f})")
        return
    results = []
    for rep in range(args.repeats):
        for first in (0, 8):
            prompts = (mix + mix)[first:first + 8]
            mean, last, length = wave(prompts)
            results.append((mean, last, length))
            print(f"repeat {rep + 1}, prompts {first}-{first + 7}: mean TTFT {1000 * mean:.0f} ms, last "
                  f"{1000 * last:.0f} ms, wave {1000 * length:.0f} ms", flush=True)
    cells = [spread_ms([r[i] for r in results]) for i in range(3)]
    print(f"{machine_info()['cpu']}, {engine.threads} threads, {args.dtype}, {args.mode}, {len(results)} waves, "
          f"median (min-max): mean TTFT {cells[0]}, last TTFT {cells[1]}, wave {cells[2]}")


def spread_ms(values: list[float]) -> str:
    """Seconds as ``median (min-max)`` in ms.

    >>> spread_ms([0.2, 0.25, 0.3])
    '250 ms (200-300)'
    """
    ms = [1000 * v for v in values]
    return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f})"


if __name__ == "__main__":
    main()

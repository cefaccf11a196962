#!/usr/bin/env python3
"""What a long prompt arriving during decoding does to the requests already running, in-process, on the
embedded model, by chunked-prefill setting (serve.prefill_chunk_tokens, serve.prefill_stall).

``--running`` requests decode (``--max-tokens`` each, ``--lookahead``: ``auto`` = the server's default
requests, ``ar`` = (1,1,0)); at step ``--arrive-at`` a prompt of ``--long`` tokens arrives. Per setting
(``off`` = whole prefills, ``N`` = fixed chunks of N tokens, ``pacedX`` = chunks paced for a stall of X),
interleaved ``--repeats`` times with a baseline run
without the long prompt: the running requests' TPOT ((last token - first token) / (tokens - 1), as
``vllm bench serve`` counts it), its p99 (over requests and repeats) against the baseline's p99 in the
same repeat, and the long prompt's time to first token. Every request's tokens must equal the
baseline's (and the long one's equal across settings): the script says so.

    .venv/bin/python benchmarks/prefill_stall.py                         # 4 running, 2,000-token prompt
    .venv/bin/python benchmarks/prefill_stall.py --settings off,16,paced1.5 --lookahead ar --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--running", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--long", type=int, default=2000, help="tokens of the prompt that arrives")
    ap.add_argument("--arrive-at", type=int, default=4, help="the step it arrives at")
    ap.add_argument("--settings", default="off,8,16,paced1.5,paced2",
                    help="off (whole prefills), N (fixed chunks of N tokens), pacedX (chunks of up to "
                         "--max-chunk paced for a stall of X: serve.prefill_stall)")
    ap.add_argument("--max-chunk", type=int, default=256, help="serve.prefill_chunk_tokens of the paced settings")
    ap.add_argument("--lookahead", choices=("auto", "ar"), default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype)
    tok = engine.tokenizer
    texts = [p.text or p.chat_messages()[-1]["content"] for p in load_dataset("mix").prompts]
    look = (1, 1, 0) if args.lookahead == "ar" else None
    running = [GenerationRequest(prompt_ids=tuple(tok.encode(texts[i % len(texts)])), max_tokens=args.max_tokens,
                                 ignore_eos=True, lookahead=look) for i in range(args.running)]
    filler = tok.encode(" ".join(texts))
    long_ids = tuple((filler * (args.long // len(filler) + 1))[:args.long])
    long_req = GenerationRequest(prompt_ids=long_ids, max_tokens=4, ignore_eos=True, lookahead=look)

    def limits(setting: str) -> dict:
        if setting == "off":
            return {}
        if setting.startswith("paced"):
            return {"prefill_chunk": args.max_chunk, "prefill_stall": float(setting[5:])}
        return {"prefill_chunk": int(setting)}

    def serve(setting: str, with_long: bool) -> tuple[list[float], float | None, list[list[int]]]:
        batch = engine.new_batch(max_batch_size=args.running + 1, **limits(setting))
        ids = [batch.add(r) for r in running]
        times: dict[int, list[float]] = {i: [] for i in ids}
        toks: dict[int, list[int]] = {i: [] for i in ids}
        long_id, arrived, ttft = None, 0.0, None
        step = 0
        while len(batch):
            if with_long and step == args.arrive_at:
                long_id, arrived = batch.add(long_req), time.perf_counter()
                toks[long_id] = []
            for sid, chunk_out in batch.step():
                now = time.perf_counter()
                if sid == long_id:
                    ttft = now - arrived if ttft is None else ttft
                else:
                    times[sid].extend([now] * len(chunk_out.tokens))
                toks[sid].extend(chunk_out.tokens)
            step += 1
        tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in times.values()]
        return tpots, ttft, [toks[i] for i in sorted(toks)]

    settings = args.settings.split(",")
    for setting in settings:
        limits(setting)  # a typo fails now, not after minutes
    serve("off", False)  # warm-up: the engine's first steps and the auto policy's cost model
    ratios: dict = {c: [] for c in settings}
    ttfts: dict = {c: [] for c in settings}
    tpot99: dict = {c: [] for c in settings}
    base99, identical, long_tokens = [], 0, set()
    for rep in range(args.repeats):
        base, _, base_tokens = serve("off", False)
        base99.append(percentile(base, 99))
        order = settings if rep % 2 == 0 else settings[::-1]
        for chunk in order:
            tpots, ttft, got = serve(chunk, True)
            identical += got[:args.running] == base_tokens
            long_tokens.add(tuple(got[-1]))
            tpot99[chunk].append(percentile(tpots, 99))
            ratios[chunk].append(percentile(tpots, 99) / base99[-1])
            ttfts[chunk].append(ttft)
    info = machine_info()
    print(f"host: {info.get('cpu')}, {info.get('cpu_count')} CPUs; {engine.model_id} {engine.dtype}; "
          f"{args.running} running ({args.lookahead}, {args.max_tokens} tokens each), a {len(long_ids)}-token "
          f"prompt arriving at step {args.arrive_at}; {args.repeats} interleaved repeats")
    print(f"baseline (no long prompt) TPOT p99 {1000 * statistics.median(base99):.1f} ms "
          f"({1000 * min(base99):.1f}-{1000 * max(base99):.1f})")
    print("| setting | running TPOT p99 (ms) | vs baseline (median, range) | long prompt TTFT (ms) |")
    print("|---|---:|---:|---:|")
    for chunk in settings:
        r, t, p = ratios[chunk], ttfts[chunk], tpot99[chunk]
        print(f"| {chunk} | {1000 * statistics.median(p):.1f} | {statistics.median(r):.2f}x "
              f"({min(r):.2f}-{max(r):.2f}) | {1000 * statistics.median(t):.0f} ({1000 * min(t):.0f}-"
              f"{1000 * max(t):.0f}) |")
    runs = args.repeats * len(settings)
    print(f"running requests' tokens equal the baseline's: {identical}/{runs}; the long prompt's tokens the same "
          f"in every run: {len(long_tokens) == 1}")


if __name__ == "__main__":
    main()

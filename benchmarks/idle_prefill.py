#!/usr/bin/env python3
"""A long prompt on an idle engine, in-process on the embedded model, by serve.prefill_idle_chunk_tokens: what it
costs the long prompt (its time to first token against whole prefills) and what it spares the others (the first
token of a short request arriving while it is prefilled, and the longest step: how long the server sees no new
request and no cancel).

A prompt of ``--long`` tokens arrives at an idle engine; ``--arrive-after`` seconds later a short request arrives
(added at the first step boundary after that moment, timed from that moment, as a server's worker adds it). Per
setting (``whole`` = 0, or N = chunks of N tokens), interleaved ``--repeats`` times (the order reversed every other
repeat): the long prompt's TTFT and its ratio to the whole prefill's in the same repeat (median, range), the short
request's TTFT, and the longest step. Every request's tokens must equal the whole prefill's: the script says so.

    .venv/bin/python benchmarks/idle_prefill.py                          # 4,000 tokens; whole, 256, 512, 1024, 2048
    .venv/bin/python benchmarks/idle_prefill.py --long 8000 --settings whole,512 --repeats 2
    .venv/bin/python benchmarks/idle_prefill.py --short 600 --settings whole,256   # a request longer than a chunk
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--long", type=int, default=4000, help="tokens of the long prompt")
    ap.add_argument("--arrive-after", type=float, default=1.0, help="seconds after it that the short request arrives")
    ap.add_argument("--short", type=int, default=0,
                    help="tokens of the request that arrives (default: the first mix prompt, 19 tokens)")
    ap.add_argument("--settings", default="whole,256,512,1024,2048",
                    help="whole (prefill_idle_chunk_tokens 0) or N (chunks of N tokens), comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    settings = [s.strip() for s in args.settings.split(",")]
    bad = [s for s in settings if s != "whole" and not (s.isdigit() and int(s) > 0)]
    if bad:  # a typo fails now, not after minutes
        ap.error(f"--settings {bad[0]!r}: each setting is whole or a chunk of 1 or more tokens")
    chunks = {s: None if s == "whole" else int(s) for s in settings}
    if "whole" not in chunks:
        ap.error("--settings must include whole: the ratios are against it")

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype)
    tok = engine.tokenizer
    texts = [p.text or p.chat_messages()[-1]["content"] for p in load_dataset("mix").prompts]
    filler = tok.encode(" ".join(texts))
    long_req = GenerationRequest(prompt_ids=tuple((filler * (args.long // len(filler) + 1))[:args.long]),
                                 max_tokens=4, ignore_eos=True, lookahead=(1, 1, 0))
    backwards = filler[::-1] * (args.short // len(filler) + 1)  # no prefix in common with the long prompt
    short_ids = tok.encode(texts[0]) if not args.short else backwards[:args.short]
    short_req = GenerationRequest(prompt_ids=tuple(short_ids), max_tokens=4, ignore_eos=True, lookahead=(1, 1, 0))

    def serve(chunk: int | None) -> tuple[float, float, float, list[list[int]]]:
        batch = engine.new_batch(max_batch_size=2, prefill_chunk=256, prefill_stall=1.5, idle_chunk=chunk)
        start = time.perf_counter()
        long_id, short_id = batch.add(long_req), None
        toks: dict[int, list[int]] = {long_id: []}
        firsts: dict[int, float] = {}
        longest = 0.0
        while len(batch) or short_id is None:
            now = time.perf_counter()
            if short_id is None and now - start >= args.arrive_after:
                short_id = batch.add(short_req, enqueued_at=start + args.arrive_after)
                toks[short_id] = []
            before = time.perf_counter()
            for sid, out in batch.step(on_chunk=lambda sid, _: firsts.setdefault(sid, time.perf_counter())):
                toks[sid].extend(out.tokens)  # a first token is timed when handed over (mid-step), as served
            longest = max(longest, time.perf_counter() - before)
            if short_id is None and not len(batch):
                time.sleep(max(0.0, start + args.arrive_after - time.perf_counter()))
        return (firsts[long_id] - start, firsts[short_id] - start - args.arrive_after, longest,
                [toks[long_id], toks[short_id]])

    serve(None)  # warm-up: the slots' caches grown to the long prompt once
    long_ttft: dict = {s: [] for s in settings}
    ratio: dict = {s: [] for s in settings}
    short_ttft: dict = {s: [] for s in settings}
    blind: dict = {s: [] for s in settings}
    answers: dict = {s: [] for s in settings}
    for rep in range(args.repeats):
        got = {}
        for s in (settings if rep % 2 == 0 else settings[::-1]):
            got[s] = serve(chunks[s])
        for s in settings:
            t_long, t_short, longest, toks = got[s]
            long_ttft[s].append(t_long)
            ratio[s].append(t_long / got["whole"][0])
            short_ttft[s].append(t_short)
            blind[s].append(longest)
            answers[s].append(toks)
    info = machine_info()
    print(f"host: {info.get('cpu')}, {info.get('cpu_count')} CPUs; {engine.model_id} {engine.dtype}; a "
          f"{args.long}-token prompt on an idle engine, a short request ({len(short_req.prompt_ids)} tokens) "
          f"{args.arrive_after:g} s later; {args.repeats} interleaved repeats; median (range)")
    print("| setting | long prompt TTFT (s) | vs whole | short request's TTFT (s) | longest step (s) |")
    print("|---|---:|---:|---:|---:|")

    def cell(values: list[float], fmt: str = ".2f", unit: str = "") -> str:
        return f"{statistics.median(values):{fmt}}{unit} ({min(values):{fmt}}-{max(values):{fmt}})"

    for s in settings:
        print(f"| {s} | {cell(long_ttft[s])} | {cell(ratio[s], '.3f', 'x')} | {cell(short_ttft[s])} | "
              f"{cell(blind[s])} |")
    reference = answers["whole"][0]
    same = sum(a == reference for s in settings for a in answers[s])
    print(f"answers equal to the first whole prefill's: {same}/{len(settings) * args.repeats}")


if __name__ == "__main__":
    main()

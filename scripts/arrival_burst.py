#!/usr/bin/env python3
"""Prompts arriving together beside a decoding request, in-process: their first tokens with the group cap on
the paced chunks (``trtlade.reference.scheduler.chunk_cap``: about 64 prompt rows a step while several
prompts wait) against the same arrivals with the cap lifted (the pacer's rows alone), alternating,
repeated; the ratio of the mean first-token time and of the last one, per repeat.

One request decodes long enough to fill the pacer's bucket (as in the main job at concurrency 8, where
the first request of a level is prefilled alone and decodes while the others' prompts arrive); then
``--arrivals`` cold prompts of the bench's ``mix`` dataset (through the chat template) arrive in one step.

    .venv/bin/python scripts/arrival_burst.py                      # fp32, 7 arrivals, 3 repeats
    .venv/bin/python scripts/arrival_burst.py --dtype bfloat16 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--arrivals", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import trtlade.reference.batching as batching
    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.config.schema import DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_STALL
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.reference.scheduler import chunk_cap
    from trtlade.spec import LookaheadSpec

    engine = ReferenceEngine.load(dtype=args.dtype, spec=(2, 4, 2))
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts][:args.arrivals + 1]
    greedy = LookaheadSpec(1, 1, 0)

    def run(capped: bool) -> tuple[float, float]:
        batching.chunk_cap = chunk_cap if capped else (lambda allowed, rests: allowed)
        batch = engine.new_batch(max_batch_size=args.arrivals + 1, prefill_chunk=DEFAULT_PREFILL_CHUNK,
                                 prefill_stall=DEFAULT_PREFILL_STALL)
        batch.add(GenerationRequest(prompt_ids=tuple(prompts[0]), max_tokens=60, lookahead=greedy, ignore_eos=True))
        for _ in range(12):  # decoding: the pacer's bucket fills
            batch.step()
        t0, first = time.perf_counter(), {}
        ids = {batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=3, lookahead=greedy, ignore_eos=True))
               for p in prompts[1:]}
        while len(first) < len(ids):
            for seq_id, chunk in batch.step():
                if seq_id in ids and chunk.tokens and seq_id not in first:
                    first[seq_id] = time.perf_counter() - t0
        while len(batch):
            batch.step()
        return 1000 * statistics.mean(first.values()), 1000 * max(first.values())

    try:
        pairs = []
        for rep in range(args.repeats):
            got = {}
            for capped in ((True, False) if rep % 2 == 0 else (False, True)):
                got[capped] = run(capped)
            pairs.append(got)
            print(f"repeat {rep + 1}: capped mean {got[True][0]:.0f} ms, last {got[True][1]:.0f} ms; uncapped "
                  f"mean {got[False][0]:.0f} ms, last {got[False][1]:.0f} ms", flush=True)
    finally:
        batching.chunk_cap = chunk_cap
    mean = [p[True][0] / p[False][0] for p in pairs]
    last = [p[True][1] / p[False][1] for p in pairs]
    print(f"{machine_info()['cpu']}, {engine.threads} threads, {args.dtype}, 1 decoding + {args.arrivals} arriving, "
          f"{args.repeats} repeats: capped / uncapped, mean first token {statistics.median(mean):.2f}x "
          f"({min(mean):.2f}-{max(mean):.2f}), last first token {statistics.median(last):.2f}x "
          f"({min(last):.2f}-{max(last):.2f})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The ``auto`` policy against ``ar`` with 8 sequences decoding together, in-process: what the served
main job's concurrency-8 column measures, without HTTP and the load generator on the same cores.

Two loads, each interleaved (``ar`` and ``auto`` alternate which runs first) and repeated:

* ``wave``: 8 ``mix`` prompts arrive together and run to the end, as one level of the bench (8 requests
  per level at concurrency 8): delivered tokens / wall time of the wave, which ends with its slowest
  request;
* ``sustained``: ``--requests`` prompts queued on the slots (``--slots``, default 8), a finished
  request's slot taking the next at once (a server under steady load): delivered tokens / wall time.

Every answer is checked token for token against ``ar``; the policy's decisions and the accepted drafts
it expected against those it got are printed at the end.

    .venv/bin/python scripts/auto_batch.py --load wave --repeats 6
    .venv/bin/python scripts/auto_batch.py --load sustained --requests 32 --repeats 4
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import machine_info
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.presets import preset_prompt_lookup
from trtlade.reference.engine import ReferenceEngine
from trtlade.spec import LookaheadSpec

SLOTS = 8


def run(engine: ReferenceEngine, prompts: list[list[int]], spec: Optional[LookaheadSpec],
        slots: int = SLOTS) -> tuple[list, float]:
    """Every prompt through one batch of ``slots`` slots: the answers and the delivered tokens/s."""
    batch = engine.new_batch(max_batch_size=slots)
    ids = [batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=50, lookahead=spec)) for p in prompts]
    out: dict[int, list[int]] = {i: [] for i in ids}
    t0 = time.perf_counter()
    while len(batch):
        for seq_id, chunk in batch.step():
            out[seq_id].extend(chunk.tokens)
    wall = time.perf_counter() - t0
    return [out[i] for i in ids], sum(len(t) for t in out.values()) / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", choices=("wave", "sustained"), default="wave")
    ap.add_argument("--requests", type=int, default=32, help="sustained: prompts queued on the slots")
    ap.add_argument("--slots", type=int, default=SLOTS, help="sequences decoding together (the concurrency)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--engine-spec", default="2,4,2")
    args = ap.parse_args()
    # as `trtlade serve` loads it with configs/smollm2-cpu.yml (preset fast)
    engine = ReferenceEngine.load(spec=args.engine_spec, dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
    chat = PromptTokenizer(engine.tokenizer)
    mix = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    count = args.slots if args.load == "wave" else args.requests
    engine.generate(mix[0], max_tokens=8)  # warm-up
    ratios, same, total = [], 0, 0
    for rep in range(args.repeats):
        prompts = [mix[(count * rep + i) % len(mix)] for i in range(count)]
        order = [("ar", LookaheadSpec(1, 1, 0)), ("auto", None)]
        got = {name: run(engine, prompts, spec, args.slots) for name, spec in (order if rep % 2 == 0 else order[::-1])}
        same += sum(a == b for a, b in zip(got["ar"][0], got["auto"][0]))
        total += count
        ratios.append(got["auto"][1] / got["ar"][1])
        print(f"repeat {rep + 1}/{args.repeats}: ar {got['ar'][1]:.1f} tok/s, auto {got['auto'][1]:.1f} tok/s",
              flush=True)
    c = engine.policy.counters
    print(f"{machine_info()['cpu']}, {engine.threads} threads, {args.dtype}, {args.load} "
          f"({count} requests on {args.slots} slots): auto / ar delivered {statistics.median(ratios):.3f} "
          f"(median of {args.repeats}; {min(ratios):.3f}-{max(ratios):.3f}); identical to ar {same}/{total}")
    print(f"auto's decisions: drafted {c.drafted}, skipped {c.skipped}, empty {c.empty}; accepted drafts "
          f"expected {c.expected_accepted:.1f}, got {c.accepted}")


if __name__ == "__main__":
    main()

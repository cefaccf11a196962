#!/usr/bin/env python3
"""What does ``auto``'s ``public`` source give when requests in flight share text, and what does it cost when
they do not? In-process, on the embedded model, as ``trtlade serve`` loads it with configs/smollm2-cpu.yml.

Each unit is a pair of requests in one batch: the first starts, the second joins ``--lag`` steps later, both
run to their end (50 tokens). Two loads:

* ``same``: both ask the same ``mix`` prompt (a popular question, a retried request, two clients of one
  template); the second one's ``public`` source reads the first one's answer ahead of it;
* ``distinct``: two different ``mix`` prompts (the control: ``public`` finds little and must not cost).

Three modes, their order rotated every repeat: ``ar``; ``auto`` without the public source (its own text
only: ``DraftSettings.public_lookup=False``); ``auto`` as served. Each mode's rate is the pairs' tokens over
their summed wall time; the ratios to ``ar`` are per repeat (median and range). Every answer is checked token
for token against ``ar``'s, and the drafts accepted from another sequence's text are counted.

    .venv/bin/python benchmarks/shared_text.py --load same distinct --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any, Optional

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import device_name
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.presets import preset_prompt_lookup
from trtlade.reference.engine import ReferenceEngine
from trtlade.spec import LookaheadSpec

MODES = ("ar", "auto-own", "auto")


def pair(engine: ReferenceEngine, first: list[int], second: list[int], mode: str, lag: int,
         max_tokens: int) -> tuple[list[list[int]], float, int]:
    """One pair through a batch of 2 slots: both answers, the wall time, drafts accepted from ``public``."""
    settings = dataclasses.replace(engine.settings, public_lookup=mode != "auto-own")
    batch = engine.new_batch(max_batch_size=2, settings=settings)
    spec: Optional[LookaheadSpec] = LookaheadSpec(1, 1, 0) if mode == "ar" else None
    ids: list[int] = []
    out: dict[int, list[int]] = {}
    public = steps = 0
    t0 = time.perf_counter()
    for prompt, at in ((first, 0), (second, lag)):
        while steps < at and len(batch):
            public += _step(batch, out)
            steps += 1
        ids.append(batch.add(GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens, lookahead=spec,
                                               ignore_eos=True)))
        out[ids[-1]] = []
    while len(batch):
        public += _step(batch, out)
    return [out[i] for i in ids], time.perf_counter() - t0, public


def _step(batch: Any, out: dict[int, list[int]]) -> int:
    public = 0
    for seq_id, chunk in batch.step():
        out[seq_id].extend(chunk.tokens)
        if chunk.stats is not None:
            public += chunk.stats.accepted_from.get("public", 0)
    return public


def load_pairs(mix: list[list[int]], load: str, count: int) -> list[tuple[list[int], list[int]]]:
    if load == "same":
        return [(mix[i], mix[i]) for i in range(count)]
    return [(mix[i], mix[(i + 1) % len(mix)]) for i in range(count)]


def measure(engine: ReferenceEngine, pairs: list, repeats: int, lag: int, max_tokens: int) -> dict[str, Any]:
    """Every mode over every pair, the modes' order rotated each repeat."""
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    identical, answers, public = 0, 0, {m: 0 for m in MODES}
    for rep in range(repeats):
        order = MODES[rep % len(MODES):] + MODES[:rep % len(MODES)]
        tokens = {m: 0 for m in MODES}
        wall = {m: 0.0 for m in MODES}
        answers_by_mode: dict[str, list] = {m: [] for m in MODES}
        for first, second in pairs:
            for mode in order:
                got, seconds, from_public = pair(engine, first, second, mode, lag, max_tokens)
                answers_by_mode[mode].extend(got)
                tokens[mode] += sum(len(t) for t in got)
                wall[mode] += seconds
                public[mode] += from_public
        for m in MODES:
            rates[m].append(tokens[m] / wall[m])
        identical += sum(a == b == c for a, b, c in zip(*(answers_by_mode[m] for m in MODES)))
        answers += len(answers_by_mode["ar"])
        print(f"repeat {rep + 1}/{repeats}: " + ", ".join(f"{m} {rates[m][-1]:.1f} tok/s" for m in MODES), flush=True)
    return {"rates": rates, "identical": identical, "answers": answers, "public_accepted": public}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", nargs="+", choices=("same", "distinct"), default=["same", "distinct"])
    ap.add_argument("--pairs", type=int, default=8, help="pairs per repeat (the first mix prompts)")
    ap.add_argument("--lag", type=int, default=6, help="steps between the first request and the second")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--engine-spec", default="2,4,2")
    args = ap.parse_args()
    engine = ReferenceEngine.load(None, spec=args.engine_spec, dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
    chat = PromptTokenizer(engine.tokenizer)
    mix = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    engine.generate(mix[0], max_tokens=8)  # warm-up
    results = {load: measure(engine, load_pairs(mix, load, args.pairs), args.repeats, args.lag, args.max_tokens)
               for load in args.load}
    print(f"\n{device_name('cpu')}, {engine.threads} threads, {args.dtype}, {engine.model_id}, engine spec "
          f"{args.engine_spec}, {args.pairs} pairs a repeat, the second {args.lag} steps behind, {args.repeats} "
          "repeats (modes rotated)")
    print("| load | ar tok/s | auto, own text only / ar | auto / ar | auto / auto own text | identical | "
          "drafts accepted from public |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for load, r in results.items():
        ar, own, auto = (r["rates"][m] for m in MODES)
        cells = [[b / a for a, b in zip(x, y)] for x, y in ((ar, own), (ar, auto), (own, auto))]
        print(f"| {load} | {statistics.median(ar):.1f} | "
              + " | ".join(f"{statistics.median(c):.3f} ({min(c):.3f}-{max(c):.3f})" for c in cells)
              + f" | {r['identical']}/{r['answers']} | {r['public_accepted']['auto']} |")


if __name__ == "__main__":
    main()

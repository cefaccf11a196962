"""Tokens per step of every drafter on the same prompts, by prompt category: Lookahead (TensorRT-LLM's
algorithm, and the same spec without its Jacobi window, which leaves history lookup only), NGram, SA and
AUTO exactly as TensorRT-LLM's PyTorch backend drafts, one sequence, greedy.

Acceptance is a property of the drafter, the model and the text, not of the hardware: these figures are the
same on any host (the script checks every answer against plain decoding and says so). The draft tokens
verified per step are printed beside them: what a step costs in rows.

    .venv/bin/python benchmarks/drafter_acceptance.py --max-tokens 128
    .venv/bin/python benchmarks/drafter_acceptance.py --dataset path/to/your.jsonl   # your own prompts
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Optional

from trtlade.bench.datasets import load_dataset
from trtlade.lookahead.algorithm import LookaheadAlgorithm
from trtlade.reference.engine import ReferenceEngine
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec

#: mode -> (lookahead spec, speculation block, Jacobi window kept)
MODES: dict[str, tuple[Optional[LookaheadSpec], Optional[dict[str, Any]], bool]] = {
    "Lookahead 2,4,2": (LookaheadSpec(2, 4, 2), None, True),
    "Lookahead 2,4,2 without its window": (LookaheadSpec(2, 4, 2), None, False),
    "Lookahead 4,2,4": (LookaheadSpec(4, 2, 4), None, True),
    "NGram 4, k 2": (None, {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}, True),
    "AUTO (NGram 3, k 5)": (None, {"decoding_type": "AUTO"}, True),
    "SA 4, longest": (None, {"decoding_type": "SA", "max_draft_len": 4}, True),
    "SA 8, longest": (None, {"decoding_type": "SA", "max_draft_len": 8}, True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mix")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--model", default=None, help="a local Hugging Face model folder or GGUF file (default: the "
                    "embedded model)")
    args = ap.parse_args()
    engine = ReferenceEngine.load(args.model, spec=(4, 4, 4), max_draft_len=8, adaptive=False, calibrate=False)
    settings = dataclasses.replace(engine.settings, prompt_lookup=0)  # Lookahead as TensorRT-LLM runs it
    dataset = load_dataset(args.dataset)
    prompts = [(p.category or "all", list(engine.make_request(
        engine.tokenizer.apply_chat_template(p.chat_messages(), add_generation_prompt=True), 1).prompt_ids))
        for p in dataset.prompts]
    categories = list(dict.fromkeys(c for c, _ in prompts))
    greedy = [engine.generate(ids, max_tokens=args.max_tokens, lookahead=AUTOREGRESSIVE).tokens for _, ids in prompts]
    print(f"{len(prompts)} prompts of {args.dataset}, {args.max_tokens} tokens each, greedy, {engine.dtype}")
    print(f"{'mode':<36} " + " ".join(f"{c:>13}" for c in categories) + f" {'all':>7} {'drafts/step':>11}")
    for name, (spec, block, window) in MODES.items():
        steps = {c: 0 for c in categories}
        tokens = {c: 0 for c in categories}
        drafts = same = 0
        original = LookaheadAlgorithm.prepare
        if not window:  # the spec's candidates (n-gram pool of prompt and accepted text) without the Jacobi rows
            LookaheadAlgorithm.prepare = lambda self, window=True, depth=None: original(self, False, depth)  # type: ignore
        try:
            for (category, ids), plain in zip(prompts, greedy):
                result = engine.generate(ids, max_tokens=args.max_tokens, lookahead=spec, speculation=block,
                                         settings=settings)
                same += result.tokens == plain
                steps[category] += result.stats.decode_steps
                tokens[category] += result.stats.tokens - 1
                drafts += result.stats.draft_rows
        finally:
            LookaheadAlgorithm.prepare = original  # type: ignore[method-assign]
        cells = " ".join(f"{tokens[c] / max(1, steps[c]):>13.3f}" for c in categories)
        total_steps = sum(steps.values())
        print(f"{name:<36} {cells} {sum(tokens.values()) / max(1, total_steps):>7.3f} "
              f"{drafts / max(1, total_steps):>11.2f}   ({same}/{len(prompts)} equal plain decoding)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A conversation's next turn with and without its previous answer in the prefix cache, in-process.

Turn 1 (the chat template, a system prompt and a question) is answered greedily through a batch, as the
server runs it; turn 2 resends the system prompt, the question, that answer's text and a new question.
"kept": the cache as turn 1 left it (its prompt and its answer, which the batch keeps when a request
ends). "prompt only": a fresh cache holding turn 1's prompt alone (what the cache held before answers
were kept). Both in the same run, interleaved, ``--repeats`` times with fresh questions; prints turn 2's
time to first token (median, range), the prompt tokens each reused, and whether turn 2's tokens agree.

    .venv/bin/python benchmarks/next_turn.py                          # answers up to 120 tokens, fp32
    .venv/bin/python benchmarks/next_turn.py --answer-tokens 300 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time

SYSTEM = ("You are the support assistant of a regional delivery company. Answer in a few sentences and "
          "quote figures exactly.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--answer-tokens", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(spec="2,4,2", dtype=args.dtype)
    chat, runner = PromptTokenizer(engine.tokenizer), engine.runner

    def serve(prompt: list[int], max_tokens: int, ignore_eos: bool = False) -> tuple[list[int], float, int]:
        """Tokens, seconds to the first one, prompt tokens reused."""
        batch = engine.new_batch(max_batch_size=4)
        t0, first, tokens, cached = time.perf_counter(), None, [], 0
        sid = batch.add(GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens,
                                          ignore_eos=ignore_eos))
        while len(batch):
            for got, chunk in batch.step():
                if got == sid and chunk.tokens:
                    first = first if first is not None else time.perf_counter() - t0
                    tokens.extend(chunk.tokens)
                    cached = chunk.stats.cached_tokens if chunk.stats is not None else cached
        return tokens, first, cached

    times: dict[str, list[float]] = {"kept": [], "prompt only": []}
    reused: dict[str, list[int]] = {"kept": [], "prompt only": []}
    agree = 0
    for rep in range(args.repeats):
        first_q = {"role": "user", "content": f"Parcel {rep * 7 + 3} weighs {rep + 2} kg. What does it cost?"}
        turn1 = [{"role": "system", "content": SYSTEM}, first_q]
        p1 = chat.encode_chat(turn1)
        outs = {}
        for mode in (("kept", "prompt only") if rep % 2 == 0 else ("prompt only", "kept")):
            runner.enable_prefix_cache(256 << 20)
            answer, _, _ = serve(p1, args.answer_tokens)  # turn 1 through the batch: keeps prompt and answer
            if mode == "prompt only":  # the cache holds turn 1's prompt alone
                runner.enable_prefix_cache(256 << 20)
                slot = runner.allocate(len(p1) + 4)
                runner.prefill(slot, p1)
                runner.remember(slot, p1)
                runner.free(slot)
            text = engine.tokenizer.decode(answer, skip_special_tokens=True)
            p2 = chat.encode_chat(turn1 + [{"role": "assistant", "content": text},
                                           {"role": "user", "content": "And with next-day delivery?"}])
            tokens, seconds, cached = serve(p2, 8, ignore_eos=True)
            times[mode].append(seconds)
            reused[mode].append(cached)
            outs[mode] = (tokens, len(p2))
        agree += outs["kept"][0] == outs["prompt only"][0]
    runner.prefix_cache = None
    info = machine_info()
    print(f"host: {info.get('cpu')}, {info.get('cpu_count')} CPUs; {engine.model_id} {engine.dtype}; "
          f"answers of at most {args.answer_tokens} tokens; turn 2 of {outs['kept'][1]} prompt tokens; "
          f"{args.repeats} interleaved repeats")
    for mode in times:
        ms = [1000 * t for t in times[mode]]
        print(f"{mode:>12}: turn 2 TTFT {statistics.median(ms):.1f} ms ({min(ms):.1f}-{max(ms):.1f}), "
              f"prompt tokens reused {statistics.median(reused[mode]):.0f}")
    ratios = sorted(k / p for k, p in zip(times["kept"], times["prompt only"]))
    print(f"kept / prompt only: {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}); "
          f"turn 2's tokens agree: {agree}/{args.repeats}")


if __name__ == "__main__":
    main()

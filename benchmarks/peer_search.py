#!/usr/bin/env python3
"""The ``public`` source's search, as ``auto`` runs it each step: one index over every running request's text
(``PeerPool``) against the search of each request in turn (``HistoryPool.peer_draft``), in one process.

``--sequences`` texts of the ``mix`` prompts (the embedded model's chat template) share a namespace; each step
every text grows by one token (the next of another prompt, so that texts share phrases as answers to similar
prompts do) and every sequence searches the others, as a step of that many ``auto`` sequences does. Both pools
see the same steps; they alternate which runs first, ``--repeats`` times; the answers are checked equal. Prints
the median (range) of microseconds a step and the ratio of each repeat.

    .venv/bin/python benchmarks/peer_search.py --sequences 8 --steps 50 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time

from trtlade.bench.datasets import load_dataset
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.drafting.history import HistoryPool, PeerPool
from trtlade.reference.engine import ReferenceEngine


def run(pool: HistoryPool, texts: list[list[int]], steps: int) -> tuple[float, list[list[int]]]:
    """Seconds a step, and every search's answer."""
    for key, text in enumerate(texts):
        pool.add(key, text)
    answers: list[list[int]] = []
    t0 = time.perf_counter()
    for step in range(steps):
        for key in range(len(texts)):
            source = texts[(key + 1) % len(texts)]
            pool.extend(key, [source[step % len(source)]])
            answers.append(pool.peer_draft(key, 4))
    seconds = (time.perf_counter() - t0) / steps
    for key in range(len(texts)):
        pool.remove(key)
    return seconds, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.sequences < 2 or args.steps < 1 or args.repeats < 1:
        ap.error("--sequences takes 2 or more, --steps and --repeats 1 or more")
    engine = ReferenceEngine.load(None, spec="1,1,0")
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    texts = [list(prompts[i % len(prompts)]) for i in range(args.sequences)]
    times: dict[str, list[float]] = {"scan": [], "index": []}
    for rep in range(args.repeats):
        order = ["scan", "index"] if rep % 2 == 0 else ["index", "scan"]
        got = {name: run(HistoryPool() if name == "scan" else PeerPool(), texts, args.steps) for name in order}
        if got["scan"][1] != got["index"][1]:
            raise SystemExit("the index and the scan answered differently")
        for name in order:
            times[name].append(got[name][0] * 1e6)
    ratios = [s / i for s, i in zip(times["scan"], times["index"])]
    for name, values in times.items():
        print(f"{name:5s}: {statistics.median(values):7.1f} us a step ({min(values):.1f}-{max(values):.1f})")
    print(f"scan / index: {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}), "
          f"{args.sequences} sequences, {args.repeats} interleaved repeats, every answer equal")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One forward of the reference engine at two thread counts, interleaved, on a quiet host and beside busy
processes: what the engine's threads buy when its cores are shared.

One sequence after ``--context`` cached tokens (the first ``mix`` prompt, repeated) runs a forward of R rows
(``--rows``, each row count in turn) at each of ``--threads`` (default 2 and 1: the order flipped every
repeat, the thread count set with ``torch.set_num_threads`` as the engine's ``threads`` sets it). With
``--busy N``, N processes of a plain Python loop run beside it the whole time (another job on the same
cores: a load generator, another server, a build). Prints each thread count's median forward, and the
paired ratio first / second (median and range over the repeats). The threads never change a row's bits
(docs/explanation/lossless.md): only the time.

    .venv/bin/python benchmarks/threads_ab.py --dtype float32 --repeats 15
    .venv/bin/python benchmarks/threads_ab.py --dtype bfloat16 --repeats 15 --busy 1
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import machine_info
from trtlade.contract.tokenization import PromptTokenizer


def spin(seconds: float) -> None:
    """A busy process: a Python loop for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def int_list(text: str) -> list[int]:
    """``--rows`` / ``--threads``: whole numbers >= 1, comma-separated."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"takes whole numbers >= 1, comma-separated (1,8), got {text!r}")
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rows", type=int_list, default=[1, 8])
    ap.add_argument("--threads", type=int_list, default=[2, 1], help="two thread counts, compared first / second")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--context", type=int, default=100)
    ap.add_argument("--busy", type=int, default=0, help="busy processes beside the engine (0: a quiet host)")
    args = ap.parse_args()
    if len(args.threads) != 2:
        ap.error(f"--threads takes two thread counts to compare, got {len(args.threads)}")
    import torch

    from trtlade.reference.batch_runner import RowBlock
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(dtype=args.dtype)
    chat = PromptTokenizer(engine.tokenizer)
    prompt = chat.encode_chat(load_dataset("mix").prompts[0].chat_messages())
    runner = engine.new_batch().engine.runner
    slot = runner.allocate(args.context + max(args.rows))
    runner.prefill(slot, (prompt * (args.context // len(prompt) + 1))[:args.context])
    busy = [multiprocessing.Process(target=spin, args=(3600.0,), daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    times: dict[tuple[int, int], list[float]] = {}
    try:
        for rep in range(args.repeats):
            for rows in args.rows:
                block = [RowBlock(slot, [5] * rows, list(range(rows)), list(range(rows)), causal=True)]
                for threads in args.threads if rep % 2 == 0 else args.threads[::-1]:
                    torch.set_num_threads(threads)
                    t0 = time.perf_counter()
                    runner.forward(block)
                    times.setdefault((rows, threads), []).append(time.perf_counter() - t0)
    finally:
        for p in busy:
            p.terminate()
    first, second = args.threads
    print(f"{machine_info()['cpu']}, {args.dtype}, {args.busy} busy process(es), one sequence after {args.context} "
          f"cached tokens, {args.repeats} interleaved repeats; forward in ms (median)")
    for rows in args.rows:
        a, b = times[(rows, first)], times[(rows, second)]
        ratio = [x / y for x, y in zip(a, b)]
        print(f"  {rows:3d} rows: {first} threads {1000 * statistics.median(a):6.1f}, {second} threads "
              f"{1000 * statistics.median(b):6.1f}; {first}/{second} paired {statistics.median(ratio):.2f} "
              f"({min(ratio):.2f}-{max(ratio):.2f})")


if __name__ == "__main__":
    main()

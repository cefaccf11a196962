#!/usr/bin/env python3
"""How much another process on the same cores slows the reference engine's decode step: the median
step of 1 and 8 sequences (plain greedy, mix prompts) alone and while a second process keeps one core
busy for ``busy`` of every ``busy + idle`` microseconds (what the load generator, the HTTP event loop
or a neighbour does to a served engine on a small host). Interleaved and repeated; each loaded step is
printed as a ratio to the unloaded step of the same repeat.

    .venv/bin/python benchmarks/contention.py
    .venv/bin/python benchmarks/contention.py --loads 200:2000,1000:2000 --repeats 3 --json reports/contention.json

An OpenMP region ends when its slowest thread ends, so a thread the OS lends to another process for a
while holds up the step; the engine's linear kernel hands its panel groups to whichever thread is free
(dynamic schedule) so the other thread takes over the work in the meantime.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from pathlib import Path


def _load(busy_us: int, idle_us: int) -> None:  # pragma: no cover - runs in the child process
    while True:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < busy_us / 1e6:
            pass
        time.sleep(idle_us / 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="200:2000,1000:2000,3000:3000", help="busy:idle microseconds, comma-separated")
    ap.add_argument("--sequences", default="1,8")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import machine_info
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.spec import LookaheadSpec

    loads = [None] + [tuple(int(x) for x in item.split(":")) for item in args.loads.split(",") if item]
    sizes = [int(x) for x in args.sequences.split(",")]
    engine = ReferenceEngine.load(dtype=args.dtype)
    chat = PromptTokenizer(engine.tokenizer)  # what /v1/chat/completions sends the engine
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]

    def median_step(size: int, offset: int) -> float:
        batch = engine.new_batch(max_batch_size=size)
        for i in range(size):
            batch.add(GenerationRequest(prompt_ids=tuple(prompts[(offset + i) % len(prompts)]), max_tokens=40,
                                        lookahead=LookaheadSpec(1, 1, 0), ignore_eos=True))
        batch.step()  # the prefill
        steps = []
        while len(batch):
            t0 = time.perf_counter()
            batch.step()
            steps.append(time.perf_counter() - t0)
        return statistics.median(steps)

    median_step(1, 0)  # warm-up
    ms: dict[tuple[int, str], list[float]] = {}
    ratio: dict[tuple[int, str], list[float]] = {}
    for rep in range(args.repeats):
        for size in sizes:
            base = None
            for load in loads if rep % 2 == 0 else [loads[0]] + loads[:0:-1]:
                name = "none" if load is None else f"{load[0]}:{load[1]}"
                child = None
                if load is not None:
                    child = mp.Process(target=_load, args=load, daemon=True)
                    child.start()
                    time.sleep(0.05)
                try:
                    step = median_step(size, rep * 3 + size)
                finally:
                    if child is not None:
                        child.terminate()
                        child.join()
                ms.setdefault((size, name), []).append(1000 * step)
                base = step if load is None else base
                ratio.setdefault((size, name), []).append(step / base)
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)

    host = machine_info()["cpu"]
    print(f"\n{host}, {engine.threads} threads, {args.dtype}: median decode step (ms) and its ratio to the "
          f"step without load, median (min-max) over {args.repeats} repeats")
    print("| load (busy:idle us, one core) | " + " | ".join(f"{s} sequence(s)" for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for load in loads:
        name = "none" if load is None else f"{load[0]}:{load[1]}"
        cells = []
        for size in sizes:
            r = ratio[(size, name)]
            cells.append(f"{statistics.median(ms[(size, name)]):.1f} ms, {statistics.median(r):.2f}x "
                         f"({min(r):.2f}-{max(r):.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"host": host, "threads": engine.threads, "dtype": args.dtype,
                                         "repeats": args.repeats,
                                         "step_ms": {f"{s}/{n}": v for (s, n), v in ms.items()},
                                         "ratio": {f"{s}/{n}": v for (s, n), v in ratio.items()}}, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

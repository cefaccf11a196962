"""What an NGram / SA drafter's host work costs a decode step: its draft lookups and history updates, timed
around the drafter's own calls, against the greedy step of the same batch, at 1 and 8 sequences.

Each drafter decodes the bench's ``mix`` prompts (chat template) on the embedded SmolLM2-135M-Instruct: with
1 sequence, prompt by prompt; with 8, the prompts together in one batch. The drafter's host work per step is
the time spent in its ``prepare`` (the draft lookup), ``observe`` (the history grows) and ``commit`` calls, and
in its batch's pool bookkeeping, summed per step; the greedy step is the median step of plain decoding of the
same prompts at the same batch size, measured in the same process, interleaved. Printed: per drafter and
batch size, the median host work per step and its share of the greedy step (the target: at most 3%).

    .venv/bin/python benchmarks/drafter_overhead.py --sequences 1,8 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from typing import Any, Iterator

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import machine_info
from trtlade.contract.protocol import GenerationRequest
from trtlade.drafting.algorithm import DraftPools, HistoryDrafter
from trtlade.drafting.config import DraftConfig
from trtlade.reference.engine import ReferenceEngine
from trtlade.spec import AUTOREGRESSIVE

DRAFTERS = {
    "ngram (4, k 2, public)": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2},
    "ngram-auto (3, k 5)": {"decoding_type": "AUTO"},
    "sa (4, longest)": {"decoding_type": "SA", "max_draft_len": 4},
    "sa global (4, longest)": {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True},
}
TIMED = ((HistoryDrafter, "prepare"), (HistoryDrafter, "observe"), (HistoryDrafter, "commit"),
         (DraftPools, "flush"))


class Clock:
    """Seconds spent inside the drafter's calls since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent = 0.0

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


@contextmanager
def timed_drafters(clock: Clock) -> Iterator[None]:
    originals = [(cls, name, getattr(cls, name)) for cls, name in TIMED]

    def wrap(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.spent += time.perf_counter() - t0
        return inner

    for cls, name, fn in originals:
        setattr(cls, name, wrap(fn))
    try:
        yield
    finally:
        for cls, name, fn in originals:
            setattr(cls, name, fn)


def run(engine: ReferenceEngine, prompts: list[list[int]], sequences: int, speculation: Any, clock: Clock,
        max_tokens: int) -> tuple[list[float], list[float]]:
    """Decode steps' wall times and the drafter's host work in each (seconds), batch of ``sequences``."""
    steps: list[float] = []
    host: list[float] = []
    config = DraftConfig.parse(speculation, max_batch_size=sequences) if speculation else None
    for start in range(0, len(prompts), sequences):
        batch = engine.new_batch(max_batch_size=sequences)
        for ids in prompts[start:start + sequences]:
            batch.add(GenerationRequest(prompt_ids=tuple(ids), max_tokens=max_tokens, ignore_eos=True,
                                        lookahead=None if config else AUTOREGRESSIVE, speculation=config))
        while len(batch):
            clock.take()
            batch.step()
            report = batch.last
            if report.running == sequences and not report.prefills:  # full decode steps only
                steps.append(report.seconds)
                host.append(clock.take())
    return steps, host


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    engine = ReferenceEngine.load(spec=(2, 4, 2), max_draft_len=8)
    tok = engine.tokenizer
    prompts = [list(engine.make_request(tok.apply_chat_template(p.chat_messages(), add_generation_prompt=True),
                                        1).prompt_ids) for p in load_dataset("mix").prompts[:args.prompts]]
    info = machine_info()
    print(f"host: {info.get('cpu')}, {info.get('cpu_count')} CPUs; kernels {engine.runner.kernels}")
    clock = Clock()
    with timed_drafters(clock):
        for sequences in (int(s) for s in args.sequences.split(",")):
            greedy: list[float] = []
            work: dict[str, list[float]] = {name: [] for name in DRAFTERS}
            for _ in range(args.repeats):  # interleaved: greedy, then every drafter, each repeat
                greedy += run(engine, prompts, sequences, None, clock, args.max_tokens)[0]
                for name, block in DRAFTERS.items():
                    work[name] += run(engine, prompts, sequences, block, clock, args.max_tokens)[1]
            step = statistics.median(greedy)
            print(f"\n{sequences} sequence(s): greedy step {1000 * step:.2f} ms (median of {len(greedy)})")
            for name, values in work.items():
                med = statistics.median(values)
                p90 = statistics.quantiles(values, n=10)[-1] if len(values) >= 10 else max(values)
                print(f"  {name:<24} host work {1000 * med:.3f} ms median, {1000 * p90:.3f} ms p90 per step: "
                      f"{100 * med / step:.2f}% of the greedy step (p90 {100 * p90 / step:.2f}%)")


if __name__ == "__main__":
    main()

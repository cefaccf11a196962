"""Where a decode step's wall time goes, without a profiler: each part of the engine's step timed with
``time.perf_counter`` around it (the native body, the LM head, the embedding rows, the rows' keys, the
greedy tokens, consuming, emitting, keeping, planning), ``--sequences`` sequences decoding together with
plain greedy (the first prompts of the bench's ``mix`` dataset), ``--steps`` steps after the prefill,
``--repeats`` times; median ms per step and share of the step.

Unlike ``benchmarks/step_profile.py`` (torch.profiler, which adds its own cost to every op and label), the
timers here cost two clock reads per call, so the Python between the kernels is measured as it runs:
cold, right after the weights streamed through the caches (docs/results/step-profile.md, "Python between
the kernels runs cold"). "other" is the step minus the parts (the forward's torch ops: rotary tables,
index tensors, the logits' conversion to float32; the batch's own bookkeeping). The native body's own
timers (``NativeBody.time_parts``) split the body into its linear layers, attention and small ops in the
same runs, and the last line is what issue 43 bounds: the step outside the linear layers (LM head
included in them), as a share of the step.

    .venv/bin/python benchmarks/step_parts.py --dtype bfloat16 --sequences 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import machine_info
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.reference import batch_runner, batching
from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.native.body import NativeBody
from trtlade.reference.native.linear import PanelLinear
from trtlade.spec import LookaheadSpec

#: (owner, attribute, part): each call of ``owner.attribute`` counts towards ``part``
PARTS = [
    (NativeBody, "__call__", "native body (linear layers, attention, norms, rotary)"),
    (PanelLinear, "__call__", "LM head"),
    (PanelLinear, "rows", "embedding rows (from the packed LM head)"),
    (batch_runner, "_NativeStep", "the rows' keys and cache room"),
    (batch_runner, "argmax_rows", "greedy tokens (one argmax a step)"),
    (batching.SequenceState, "consume", "consume (verify, choose, emit)"),
    (batching.SequenceState, "_emit", "  of which emit (detokenize, stops)"),
    (batch_runner.BatchRunner, "keep", "keep (commit the rows' K/V)"),
    (batching.Batch, "_plan", "plan (who drafts)"),
]
NESTED = {"  of which emit (detokenize, stops)"}  # inside another part: not subtracted again


def timed(acc: dict[str, float], fn: Callable, part: str) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[part] = acc.get(part, 0.0) + time.perf_counter() - t0
    return call


def one_run(engine: ReferenceEngine, prompts: list[list[int]], steps: int, acc: dict[str, float]) -> float:
    """ms per step of ``steps`` steps after the prefill; ``acc`` gets each part's seconds."""
    batch = engine.new_batch(max_batch_size=len(prompts))
    for ids in prompts:
        batch.add(GenerationRequest(prompt_ids=tuple(ids), max_tokens=steps + 2, lookahead=LookaheadSpec(1, 1, 0),
                                    ignore_eos=True))
    batch.step()
    batch.step()
    acc.clear()
    engine.runner.fast.native.timings[:] = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        batch.step()
    return 1000.0 * (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    engine = ReferenceEngine.load(dtype=args.dtype)
    if engine.runner.fast is None or engine.runner.fast.native is None:
        raise SystemExit(f"no native body here: {engine.stats['linear_kernel']}")
    chat = PromptTokenizer(engine.tokenizer)  # as /v1/chat/completions sends them to the engine
    mix = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    prompts = [mix[i % len(mix)] for i in range(args.sequences)]
    acc: dict[str, float] = {}
    for owner, name, part in PARTS:
        setattr(owner, name, timed(acc, getattr(owner, name), part))
    native = engine.runner.fast.native
    native.time_parts = True
    steps_ms, parts_ms = [], {part: [] for _, _, part in PARTS}
    inside: dict[str, list[float]] = {name: [] for name in native.PARTS}  # the body's own parts, ms a step
    for _ in range(args.repeats):
        steps_ms.append(one_run(engine, prompts, args.steps, acc))
        for part in parts_ms:
            parts_ms[part].append(1000.0 * acc.get(part, 0.0) / args.steps)
        for name, seconds in zip(inside, native.timings):
            inside[name].append(1000.0 * float(seconds) / args.steps)
    step = statistics.median(steps_ms)
    print(f"host: {machine_info()['cpu']}, {engine.threads} threads; {args.dtype}, {args.sequences} sequences, "
          f"step {step:.2f} ms (median of {args.repeats}: {min(steps_ms):.2f}-{max(steps_ms):.2f})")
    rest = step
    for part, values in parts_ms.items():
        ms = statistics.median(values)
        rest -= 0.0 if part in NESTED else ms
        print(f"  {part:55s} {ms:7.3f} ms  {100 * ms / step:5.1f}%")
        if part == PARTS[0][2]:
            for name, inner in inside.items():
                ms = statistics.median(inner)
                print(f"  {'    of which ' + name:55s} {ms:7.3f} ms  {100 * ms / step:5.1f}%")
    print(f"  {'other':55s} {rest:7.3f} ms  {100 * rest / step:5.1f}%")
    linear = statistics.median(inside[native.PARTS[0]]) + statistics.median(parts_ms[PARTS[1][2]])
    print(f"outside the linear layers (the LM head counted as linear): {step - linear:.3f} ms, "
          f"{100 * (step - linear) / step:.1f}% of the step")


if __name__ == "__main__":
    main()

"""Where a decode step's wall time goes, without a profiler: each part of the engine's step timed with
``time.perf_counter`` around it (the native body, the LM head, the embedding rows, the rows' keys, the
greedy tokens, consuming, emitting, keeping, planning), ``--sequences`` sequences decoding together
(the first prompts of the bench's ``--dataset``, default ``mix``, ``ignore_eos``), ``--steps`` steps after the prefill,
``--repeats`` times; median ms per step and share of the step. ``--policy greedy`` decodes plainly,
``--policy auto`` with the served default (the engine loaded as ``configs/smollm2-cpu.yml`` loads it), and
``--policy both`` runs the two in turn each repeat (the order flipped every repeat) and ends with the host
work ``auto`` adds to a step: the step outside the native body, the LM head and the embedding rows, one
policy's against the other's.

Unlike ``benchmarks/step_profile.py`` (torch.profiler, which adds its own cost to every op and label), the
timers here cost two clock reads per call, so the Python between the kernels is measured as it runs:
cold, right after the weights streamed through the caches (docs/results/step-profile.md, "Python between
the kernels runs cold"). "other" is the step minus the parts (the forward's torch ops: rotary tables,
index tensors, the logits' conversion to float32; the batch's own bookkeeping). The native body's own
timers (``NativeBody.time_parts``) split the body into its linear layers, attention and small ops in the
same runs, and the line after is the step outside the linear layers (LM head included in them), as a
share of the step.

    .venv/bin/python benchmarks/step_parts.py --dtype bfloat16 --sequences 8
    .venv/bin/python benchmarks/step_parts.py --dtype bfloat16 --sequences 4 --steps 40 --repeats 6 --policy both

``--decodes`` times only the consume part, the generation's text decoded by the fast tokenizer's Rust decode (as
served) and by transformers' ``decode`` in turn, and prints what the first saves a step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import machine_info
from trtlade.contract import text
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.reference import batch_runner, batching
from trtlade.presets import preset_prompt_lookup
from trtlade.reference.engine import DEFAULT_SPEC, ReferenceEngine
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


def one_run(engine: ReferenceEngine, prompts: list[list[int]], steps: int, acc: dict[str, float],
            policy: str = "greedy") -> float:
    """ms per step of ``steps`` steps after the prefill; ``acc`` gets each part's seconds. ``policy``:
    ``greedy`` (plain decoding, one row a sequence) or ``auto`` (the engine's default, as served)."""
    batch = engine.new_batch(max_batch_size=len(prompts))
    spec = LookaheadSpec(1, 1, 0) if policy == "greedy" else None
    for ids in prompts:
        batch.add(GenerationRequest(prompt_ids=tuple(ids), max_tokens=steps + 2, lookahead=spec, ignore_eos=True))
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
    ap.add_argument("--dataset", default="mix", help="the bench's prompts: mix (default), random, multiturn, ...")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", choices=("greedy", "auto", "both"), default="greedy",
                    help="greedy: plain decoding; auto: the served default; both: the two alternating per repeat")
    ap.add_argument("--decodes", action="store_true",
                    help="instead: the consume part with the text decoded by the fast tokenizer's Rust decode (as "
                         "served) and by transformers' decode, alternating per repeat, greedy")
    args = ap.parse_args()
    # as `trtlade serve` loads it with configs/smollm2-cpu.yml (preset fast); greedy requests never draft
    engine = ReferenceEngine.load(dtype=args.dtype, prompt_lookup=preset_prompt_lookup("fast", DEFAULT_SPEC))
    if engine.runner.fast is None or engine.runner.fast.native is None:
        raise SystemExit(f"no native body here: {engine.stats['linear_kernel']}")
    chat = PromptTokenizer(engine.tokenizer)  # as /v1/chat/completions sends them to the engine
    encoded = [chat.encode_chat(p.chat_messages()) for p in load_dataset(args.dataset).prompts]
    prompts = [encoded[i % len(encoded)] for i in range(args.sequences)]
    acc: dict[str, float] = {}
    for owner, name, part in PARTS:
        setattr(owner, name, timed(acc, getattr(owner, name), part))
    if args.decodes:
        return compare_decodes(engine, prompts, args.steps, args.repeats, acc)
    native = engine.runner.fast.native
    native.time_parts = True
    policies = ["greedy", "auto"] if args.policy == "both" else [args.policy]
    runs = {policy: Parts(native.PARTS) for policy in policies}
    for rep in range(args.repeats):
        for policy in policies if rep % 2 == 0 else policies[::-1]:
            runs[policy].add(one_run(engine, prompts, args.steps, acc, policy), acc, native.timings, args.steps)
    for policy in policies:
        print(f"host: {machine_info()['cpu']}, {engine.threads} threads; {args.dtype}, {args.sequences} sequences, "
              f"{policy}")
        runs[policy].report(native.PARTS)
    if len(policies) == 2:
        added = [a - g for a, g in zip(runs["auto"].hosts(), runs["greedy"].hosts())]  # paired by repeat
        print(f"host work a step, auto against greedy: {statistics.median(added):+.3f} ms (median of "
              f"{len(added)} repeats, {min(added):+.3f} to {max(added):+.3f})")


def compare_decodes(engine: ReferenceEngine, prompts: list[list[int]], steps: int, repeats: int,
                    acc: dict[str, float]) -> None:
    """ms a step of the consume part (verify, choose, emit) with each decode, paired by repeat."""
    rust = text._backend_decode
    consume = PARTS[5][2]
    runs: dict[str, list[float]] = {"rust": [], "transformers": []}
    for rep in range(repeats):
        for name in runs if rep % 2 == 0 else list(runs)[::-1]:
            text._backend_decode = rust if name == "rust" else (lambda tokenizer: None)
            one_run(engine, prompts, steps, acc)
            runs[name].append(1000.0 * acc.get(consume, 0.0) / steps)
    text._backend_decode = rust
    for name, values in runs.items():
        print(f"consume with the {name} decode: {statistics.median(values):.3f} ms a step "
              f"({min(values):.3f}-{max(values):.3f}), {len(prompts)} sequences, {repeats} repeats")
    saved = [t - r for r, t in zip(runs["rust"], runs["transformers"])]
    print(f"the Rust decode saves {statistics.median(saved):.3f} ms a step (paired by repeat: {min(saved):.3f} to "
          f"{max(saved):.3f})")


class Parts:
    """One policy's steps: ms a step per repeat, per part and per part of the native body."""

    def __init__(self, body_parts: list[str]) -> None:
        self.steps: list[float] = []
        self.parts: dict[str, list[float]] = {part: [] for _, _, part in PARTS}
        self.inside: dict[str, list[float]] = {name: [] for name in body_parts}  # the body's own parts

    def add(self, step_ms: float, acc: dict[str, float], timings, steps: int) -> None:
        self.steps.append(step_ms)
        for part in self.parts:
            self.parts[part].append(1000.0 * acc.get(part, 0.0) / steps)
        for name, seconds in zip(self.inside, timings):
            self.inside[name].append(1000.0 * float(seconds) / steps)

    def hosts(self) -> list[float]:
        """Per repeat, the step minus the native body, the LM head and the embedding rows (ms): the host's work."""
        return [step - sum(self.parts[PARTS[i][2]][r] for i in (0, 1, 2)) for r, step in enumerate(self.steps)]

    def report(self, body_parts: list[str]) -> None:
        step = statistics.median(self.steps)
        print(f"step {step:.2f} ms (median of {len(self.steps)}: {min(self.steps):.2f}-{max(self.steps):.2f})")
        rest = step
        for part, values in self.parts.items():
            ms = statistics.median(values)
            rest -= 0.0 if part in NESTED else ms
            print(f"  {part:55s} {ms:7.3f} ms  {100 * ms / step:5.1f}%")
            if part == PARTS[0][2]:
                for name, inner in self.inside.items():
                    ms = statistics.median(inner)
                    print(f"  {'    of which ' + name:55s} {ms:7.3f} ms  {100 * ms / step:5.1f}%")
        print(f"  {'other':55s} {rest:7.3f} ms  {100 * rest / step:5.1f}%")
        linear = statistics.median(self.inside[body_parts[0]]) + statistics.median(self.parts[PARTS[1][2]])
        print(f"outside the linear layers (the LM head counted as linear): {step - linear:.3f} ms, "
              f"{100 * (step - linear) / step:.1f}% of the step")
        hosts = self.hosts()
        print(f"host work (the step outside the native body, the LM head and the embedding rows): "
              f"{statistics.median(hosts):.3f} ms ({min(hosts):.3f}-{max(hosts):.3f})")


if __name__ == "__main__":
    main()

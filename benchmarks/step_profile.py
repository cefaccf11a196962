"""Where a decode step's time goes, repeated: torch.profiler op times by category plus the native body's
own timers (its one call per step hides its parts from the profiler), for greedy and (2,4,2), per forward,
the forwards interleaved, ``--repeats`` times; median per part. Every part and the step are taken from the
same profiled run ("rest" = the profiled step minus the parts: Python, dispatch, and the profiler's own
cost, which is large only for the forwards of many small ops), next to the step without the profiler.

    .venv/bin/python benchmarks/step_profile.py --dtype float32 --json reports/profile-fp32.json
    .venv/bin/python benchmarks/step_profile.py --sequences 8 --forwards native     # 8 sequences, plain greedy

``--sequences N`` (N > 1): N sequences decoding together with plain greedy (one row each, in-flight
batching), the first N prompts of the bench's ``mix`` dataset through the chat template, instead of one
sequence with greedy and (2,4,2).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from trtlade.bench.meta import machine_info
from trtlade.engine_bench import profile_batch_steps, profile_steps
from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.prompt_suite import load_suite
from trtlade.spec import LookaheadSpec

FORWARDS = {"native": {}, "onednn": {"native_kernels": False}, "transformers": {"fast_forward": False}}
REST = "Python and dispatch (rest)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--forwards", default="native,onednn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--sequences", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names = [n for n in args.forwards.split(",") if n]
    engines = {n: ReferenceEngine.load(dtype=args.dtype, spec=(2, 4, 2), **FORWARDS[n]) for n in names}
    tokenizer = engines[names[0]].tokenizer
    prompt = next(p for p in load_suite("suite").prompts if p.id == "code-prime").encode(tokenizer)
    specs = [LookaheadSpec(1, 1, 0), LookaheadSpec(2, 4, 2)] if args.sequences <= 1 else [LookaheadSpec(1, 1, 0)]
    batch = _mix_prompts(tokenizer, args.sequences)
    runs: dict[tuple[str, str], list[dict]] = {}
    for rep in range(args.repeats):
        for name in names[::1 if rep % 2 == 0 else -1]:
            for spec in specs:
                run = (profile_steps(engines[name], prompt, spec, args.steps) if args.sequences <= 1
                       else profile_batch_steps(engines[name], batch, spec, args.steps))
                runs.setdefault((name, str(spec)), []).append(run)
    host = machine_info()["cpu"]
    print(f"host: {host}, {engines[names[0]].threads} threads", flush=True)
    out = []
    for (name, spec), reps in runs.items():
        parts = {k: statistics.median(r["breakdown_ms"][k] for r in reps) for k in reps[0]["breakdown_ms"] if k != REST}
        profiled = statistics.median(r["profiled_step_ms"] for r in reps)
        row = {"forward": name, "spec": spec, "rows_per_step": reps[0]["rows_per_step"],
               "step_ms": statistics.median(r["step_ms"] for r in reps),
               "step_ms_range": [min(r["step_ms"] for r in reps), max(r["step_ms"] for r in reps)],
               "profiled_step_ms": profiled, "parts_ms": {k: round(v, 2) for k, v in parts.items()},
               "rest_ms": round(max(0.0, profiled - sum(parts.values())), 2)}
        out.append(row)
        print(f"{args.dtype} {name:>12} ({spec}), {row['rows_per_step']} rows: step {row['step_ms']:.2f} ms "
              f"({row['step_ms_range'][0]:.2f}-{row['step_ms_range'][1]:.2f}), profiled {profiled:.2f}: "
              + ", ".join(f"{k} {v:.2f}" for k, v in row["parts_ms"].items()) + f", rest {row['rest_ms']:.2f}",
              flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"host": host, "dtype": args.dtype, "repeats": args.repeats,
                                         "sequences": max(1, args.sequences), "rows": out}, indent=2) + "\n")


def _mix_prompts(tokenizer, n: int) -> list[list[int]]:
    """The first ``n`` mix prompts as /v1/chat/completions sends them to the engine."""
    from trtlade.bench.datasets import load_dataset
    from trtlade.contract.tokenization import PromptTokenizer

    chat = PromptTokenizer(tokenizer)
    return [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts[:max(0, n)]]


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The ``auto`` policy alone (concurrency 1) against plain greedy and fixed specs, in-process: decode
and output tokens/s on a bench dataset, as ratios against greedy measured in the same run
(interleaved per prompt, repeated; median and range over the repeats), with every answer checked
token for token against greedy. What the served main job's concurrency-1 column measures, without
HTTP and the load generator on the same cores.

    .venv/bin/python benchmarks/auto_alone.py                                   # mix, 50 tokens, fp32
    .venv/bin/python benchmarks/auto_alone.py --specs 2,3,2 2,4,2 --repeats 3 --json reports/auto-alone.json
    .venv/bin/python benchmarks/auto_alone.py --preset trtllm                   # TensorRT-LLM's algorithm
    .venv/bin/python benchmarks/auto_alone.py --specs --drafters ngram sa       # against NGram and SA instead
    python3 benchmarks/auto_alone.py --device cuda --model SmolLM2-135M-Instruct.Q4_1.gguf   # on a GPU

The engine loads as `trtlade serve` loads it: ``--preset fast`` (the default, as in
configs/smollm2-cpu.yml) adds prompt-lookup candidates to every lookahead request; it ends with the
``auto`` policy's decisions (drafted / skipped / empty, accepted drafts expected and got), and, on the
``mix`` dataset, where drafts pay by kind of prompt (its 20 prompts cycle code, chat, math,
summarisation, extraction): ``auto``'s decode speed against greedy's on the same prompts, its tokens
per step and the share of its steps that carried a draft.

Decode: tokens after the first / time after the first token (lookahead does not change the prefill);
output: all tokens / time from the request to its last token (what the bench's output throughput
counts at concurrency 1).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mix")
    ap.add_argument("--engine-spec", default="2,4,2", help="the engine's (W,N,G): auto drafts within it")
    ap.add_argument("--specs", nargs="*", default=["2,3,2", "2,4,2"], help="fixed specs to compare")
    ap.add_argument("--drafters", nargs="*", default=[],
                    help="NGram / SA drafters to compare, as the bench's modes name them: ngram, sa, ngram-latest, ...")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--preset", default="fast", help="fast (served default: prompt lookup too) or trtllm")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--prompts", type=int, default=None, help="the dataset's first N prompts only (default: all)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default=None, help="a model folder or GGUF file (default: the embedded model)")
    ap.add_argument("--device", default="cpu", help="a torch device: cpu, cuda, cuda:1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import device_name
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.drafting.config import DraftConfig, drafter_mode
    from trtlade.spec import LookaheadSpec

    # as `trtlade serve` loads it (trtlade/server/runner.py): the preset sets the prompt-lookup candidates
    engine = ReferenceEngine.load(args.model, spec=args.engine_spec, dtype=args.dtype, device=args.device,
                                  prompt_lookup=preset_prompt_lookup(args.preset, args.engine_spec))
    chat = PromptTokenizer(engine.tokenizer)  # what /v1/chat/completions sends the engine
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset(args.dataset).prompts][:args.prompts]
    modes: dict[str, Any] = {"greedy": LookaheadSpec(1, 1, 0), "auto": None}
    modes.update({f"fixed {s}": LookaheadSpec.parse(s) for s in args.specs})
    modes.update({name: DraftConfig.parse(drafter_mode(name)) for name in args.drafters})

    def run(prompt: list[int], spec: Any) -> tuple[list[int], float, float, list[int]]:
        batch = engine.new_batch(max_batch_size=1)
        speculation = spec if isinstance(spec, DraftConfig) else None
        lookahead = None if speculation is not None else spec
        batch.add(GenerationRequest(prompt_ids=tuple(prompt), max_tokens=args.max_tokens, lookahead=lookahead,
                                    speculation=speculation))
        tokens: list[int] = []
        rows: list[int] = []
        first: Any = None
        t0 = time.perf_counter()
        while len(batch):
            for _, chunk in batch.step():
                if chunk.tokens and first is None:
                    first = time.perf_counter()
                tokens.extend(chunk.tokens)
            if batch.last.running:
                rows.append(batch.last.rows)
        end = time.perf_counter()
        return tokens, end - (first or t0), end - t0, rows

    engine.generate(prompts[0], max_tokens=8)  # warm-up
    per_repeat: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    rows_hist: collections.Counter = collections.Counter()
    # every mode's counts (_count), summed over the repeats: in all (shape) and per kind of prompt (kinds, mix only)
    kinds: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    shape: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    answers: dict[tuple[str, int], list[list[int]]] = collections.defaultdict(list)
    for rep in range(args.repeats):
        sums = {name: [0, 0.0, 0.0] for name in modes}  # decode tokens, decode s, output s
        for i, prompt in enumerate(prompts):
            order = list(modes.items())[:: (1 if (rep + i) % 2 == 0 else -1)]
            for name, spec in order:
                tokens, decode_s, total_s, rows = run(prompt, spec)
                answers[(name, i)].append(tokens)
                s = sums[name]
                s[0] += len(tokens)
                s[1] += decode_s
                s[2] += total_s
                if name == "auto":
                    rows_hist.update(rows)
                _count(shape[name], tokens, rows, decode_s)
                if args.dataset == "mix":
                    _count(kinds[MIX_KINDS[i % len(MIX_KINDS)]][name], tokens, rows, decode_s)
        for name, (n, dec, out) in sums.items():
            per_repeat[name].append(((n - len(prompts)) / dec, n / out))
        print(f"repeat {rep + 1}/{args.repeats}: " + ", ".join(
            f"{name} {per_repeat[name][-1][0]:.1f} tok/s" for name in modes), flush=True)

    host = device_name(args.device)
    result = {"host": host, "model": engine.model_id, "step_cost_ms": engine.stats["step_cost_ms"],
              "threads": engine.threads, "dtype": args.dtype, "preset": args.preset,
              "dataset": args.dataset, "prompts": len(prompts), "max_tokens": args.max_tokens,
              "repeats": args.repeats, "engine_spec": args.engine_spec, "modes": [],
              "auto_rows_per_step": dict(sorted(rows_hist.items())),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(f"\n{result['host']}, {engine.threads} threads, {args.dtype}, {engine.model_id}, "
          f"{args.dataset} ({len(prompts)} prompts), "
          f"{args.max_tokens} tokens, {args.repeats} repeats, engine spec {args.engine_spec}, preset {args.preset}")
    print("| mode | decode tok/s | decode vs greedy | output tok/s | output vs greedy | identical to greedy |")
    print("|---|---:|---:|---:|---:|---:|")
    greedy = {i: answers[("greedy", i)][0] for i in range(len(prompts))}
    for name in modes:
        ratios = [[m[k] / g[k] for m, g in zip(per_repeat[name], per_repeat["greedy"])] for k in (0, 1)]
        values = [[m[k] for m in per_repeat[name]] for k in (0, 1)]
        same = sum(t == greedy[i] for i in range(len(prompts)) for t in answers[(name, i)])
        result["modes"].append({"mode": name, "decode_tok_s": values[0], "output_tok_s": values[1],
                                "decode_vs_greedy": ratios[0], "output_vs_greedy": ratios[1],
                                "identical": same, "runs": args.repeats * len(prompts)})
        cells = [f"{statistics.median(values[0]):.1f}", _ratio(ratios[0]), f"{statistics.median(values[1]):.1f}",
                 _ratio(ratios[1]), f"{same}/{args.repeats * len(prompts)}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    result["steps"] = {name: _steps(shape[name]) for name in modes}
    print("| mode | tokens a step | rows a step | steps with a draft | draft rows per token they gained |")
    print("|---|---:|---:|---:|---:|")
    for name, st in result["steps"].items():
        print(f"| {name} | {st['tokens_per_step']:.3f} | {st['rows_per_step']:.3f} | "
              f"{100 * st['drafted_share']:.0f}% | {st['draft_rows_per_gained_token']:.2f} |")
    print(f"auto's rows per step (count of steps): {result['auto_rows_per_step']}")
    print(f"step cost by rows at load (ms): {result['step_cost_ms']}")
    c = engine.policy.counters  # only auto's steps count (fixed specs are not the policy's choice)
    result["auto_decisions"] = {"drafted": c.drafted, "skipped": c.skipped, "empty": c.empty,
                                "expected_accepted": round(c.expected_accepted, 1), "accepted": c.accepted}
    print(f"auto's decisions: drafted {c.drafted}, skipped {c.skipped}, empty {c.empty} (no draft for the option "
          f"chosen); accepted drafts expected {c.expected_accepted:.1f}, got {c.accepted}")
    result["auto_options"] = dict(sorted(c.options.items()))
    print(f"auto's drafted steps by option: {result['auto_options']}")
    result["auto_calibration"] = engine.policy.snapshot()["calibration_by_option"]
    print(f"what auto's choices got over what they expected, by context/option (the plan prices each option at its "
          f"estimate times this): {result['auto_calibration']}")
    if kinds:
        result["by_kind"] = _by_kind(kinds, [name for name in modes if name != "greedy"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


MIX_KINDS = ("code", "chat", "math", "summarisation", "extraction")  # mix.json's prompts cycle these, in order


def _count(c: collections.Counter, tokens: list[int], rows: list[int], decode_s: float) -> None:
    """Add one generation to a mode's counts: its decode tokens and seconds, and its decode steps (not the prefill,
    which made the first token), their rows and those with a draft."""
    c["tokens"] += len(tokens) - 1
    c["s"] += decode_s
    c["steps"] += len(rows)
    c["rows"] += sum(rows)
    c["drafted"] += sum(r > 1 for r in rows)


def _steps(c: collections.Counter) -> dict[str, float]:
    """A mode's decode steps summed over prompts and repeats: tokens and rows a step, the share of steps with a
    draft, and the draft rows it verified per token the drafts added over one a step (inf: drafts added none).

    >>> _steps(collections.Counter(steps=4, tokens=6, rows=10, drafted=2))
    {'tokens_per_step': 1.5, 'rows_per_step': 2.5, 'drafted_share': 0.5, 'draft_rows_per_gained_token': 3.0}
    """
    steps = max(c["steps"], 1)
    gained = c["tokens"] - c["steps"]
    return {"tokens_per_step": c["tokens"] / steps, "rows_per_step": c["rows"] / steps,
            "drafted_share": c["drafted"] / steps,
            "draft_rows_per_gained_token": (c["rows"] - c["steps"]) / gained if gained > 0 else float("inf")}


def _by_kind(kinds: dict, names: list[str]) -> dict:
    """Print and return, per kind of mix prompt and mode, its decode speed against greedy's, its tokens and rows
    per decode step and its share of steps with a draft (every repeat pooled).

    >>> import collections
    >>> counts = {"greedy": collections.Counter(tokens=40, s=2.0, steps=40, rows=40),
    ...           "auto": collections.Counter(tokens=40, s=1.6, steps=32, drafted=8, rows=64)}
    >>> _by_kind({"code": counts}, ["auto"])["code"]["auto"]
    | kind | auto: decode vs greedy, tokens / rows a step, steps with a draft |
    |---|---|
    | code | 1.25x, 1.25 / 2.00, 25% |
    {'decode_vs_greedy': 1.25, 'tokens_per_step': 1.25, 'rows_per_step': 2.0, 'drafted_share': 0.25}
    """
    print("| kind | " + " | ".join(f"{name}: decode vs greedy, tokens / rows a step, steps with a draft"
                                  for name in names) + " |")
    print("|---|" + "---|" * len(names))
    out: dict = {}
    for kind in MIX_KINDS:
        counts = kinds.get(kind)
        if not counts or not counts["greedy"]["s"]:  # no prompt of this kind ran (--prompts fewer than the kinds)
            continue
        greedy = counts["greedy"]["tokens"] / counts["greedy"]["s"]
        out[kind] = {}
        for name in names:
            c = counts[name]
            if c["s"]:
                st = _steps(c)
                out[kind][name] = {"decode_vs_greedy": round(c["tokens"] / c["s"] / greedy, 3),
                                   **{key: round(st[key], 3) for key in ("tokens_per_step", "rows_per_step",
                                                                         "drafted_share")}}
        print(f"| {kind} | " + " | ".join(f"{v['decode_vs_greedy']:.2f}x, {v['tokens_per_step']:.2f} / "
                                          f"{v['rows_per_step']:.2f}, {100 * v['drafted_share']:.0f}%"
                                          for v in out[kind].values()) + " |")
    return out


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()

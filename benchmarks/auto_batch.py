#!/usr/bin/env python3
"""The ``auto`` policy against ``ar`` with 8 sequences decoding together, in-process: what the served
main job's concurrency-8 column measures, without HTTP and the load generator on the same cores.

Two loads, each interleaved (``ar`` and ``auto`` alternate which runs first) and repeated:

* ``wave``: 8 prompts (``--dataset``, default ``mix``) arrive together and run to the end, as one level of
  the bench (8 requests per level at concurrency 8): delivered tokens / wall time of the wave, which ends
  with its slowest request;
* ``sustained``: ``--requests`` prompts queued on the slots (``--slots``, default 8), a finished
  request's slot taking the next at once (a server under steady load): delivered tokens / wall time.

New prompts are prefilled as the server prefills them by default (in chunks of up to 256 prompt rows inside the
decoding requests' steps, paced by a stall of 1.5: ``--prefill-chunk``, ``--prefill-stall``; ``--prefill-chunk 0``
prefills each new prompt whole before the step, in a forward of its own). Every answer is checked token for token
against ``ar``; the policy's decisions and the accepted drafts
it expected against those it got are printed at the end. ``--split`` also runs two ``auto`` variants in the
same rotation, to split what ``auto`` costs into its host work and its drafting: ``auto, plan only`` (every
step plans, then every sequence keeps its golden row: the plans and the drafters' state each sequence keeps
from its first plan on) and ``auto, no plan`` (no step plans, so no sequence sets up its drafters' state: what is
left of an ``auto`` sequence beside them). A sustained load also reports its two phases apart: the steps begun
while a request waited for a slot (the batch kept full) and the drain after the last one took its slot (a wave is
all drain). ``--gates`` also runs ``auto`` with each of its two gates on drafting open, in the same rotation:
``no margin`` (a plan drafts for any gain over the plain step, where ``auto`` asks for more than the spread of the
plain steps, at most 20%) and ``always plans`` (every step plans, where ``auto`` plans less often while its plans
find less than they cost): which of them holds ``auto`` back where a fixed drafter delivers more; and ``found =
chosen``, the planning gate counting only the drafts a plan chose, not those the margin held back (the rule
before).
``--lower-bound`` also runs ``auto`` on a second engine whose chains seen only up to the tokens a step
emitted count for what they matched (the lower bound) instead of what they are expected to reach
(``AutoPolicy.censored_chains``), in the same rotation. ``--drafters sa ngram`` adds fixed NGram / SA drafters (as
the bench's modes name them) to the rotation, each against ``ar``, so the default is seen beside the best fixed
drafter at each load; each level also prints the tokens a sequence-step of every series, and the accepted drafts
``auto``'s plans expected at that level against those they got (the policy calibrates by occupancy: ``--slots
2,8,2,8`` alternates two on one engine). ``--slots 1,2,4,8`` runs each
concurrency in turn on the same engine and ends with one table. ``--model`` (a folder or a GGUF file; default the
embedded SmolLM2-135M-Instruct) and ``--device`` (a torch device: ``cuda`` runs it on a GPU, where a row
is nearly free and ``auto`` should draft at every concurrency) load it as ``ReferenceEngine.load`` does.

    .venv/bin/python benchmarks/auto_batch.py --load wave --repeats 6
    .venv/bin/python benchmarks/auto_batch.py --load wave --repeats 6 --split
    .venv/bin/python benchmarks/auto_batch.py --load wave --repeats 6 --dataset random
    .venv/bin/python benchmarks/auto_batch.py --load sustained --requests 32 --repeats 4
    .venv/bin/python benchmarks/auto_batch.py --load sustained --requests 12 --slots 1,2,4 --drafters sa ngram
    .venv/bin/python benchmarks/auto_batch.py --load sustained --requests 16 --slots 2,4 --lower-bound --drafters ngram
    python3 benchmarks/auto_batch.py --load sustained --slots 1,2,4,8,16 --device cuda --json auto-batch.json
    python3 benchmarks/auto_batch.py --load sustained --slots 8 --requests 16 --device cuda --gates --drafters ngram
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Optional

from trtlade.bench.datasets import load_dataset
from trtlade.bench.meta import device_name
from trtlade.config.schema import DEFAULT_IDLE_CHUNK, DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_STALL
from trtlade.contract.protocol import GenerationRequest
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.drafting.config import DraftConfig, DraftConfigError, drafter_mode
from trtlade.presets import preset_prompt_lookup
from trtlade.reference.engine import ReferenceEngine
from trtlade.spec import LookaheadSpec

SLOTS = 8
#: ``--split``: the ``auto`` variants that split its cost into the plan's host work and its drafting
SPLIT = ("plan only", "no plan")
#: ``--gates``: ``auto`` with one of its two gates on drafting open (``AutoPolicy.noise``: the gain a plan must promise
#: over the plain step; ``AutoPolicy.should_plan``: steps that plan less often where plans found less than they cost),
#: and with the planning gate counting only what a plan chose (the rule before ``AutoPolicy.last_found``)
GATES = ("no margin", "always plans", "found = chosen")
#: ``--lower-bound``: ``auto`` on a second engine counting censored chains at what they matched
LOWER_BOUND = "lower bound"


def run(engine: ReferenceEngine, prompts: list[list[int]], spec: Optional[LookaheadSpec | DraftConfig],
        slots: int = SLOTS, variant: str = "auto", prefill: tuple[Optional[int], Optional[float]] = (None, None),
        ) -> tuple[list, float, dict[str, list[float]], float]:
    """Every prompt through one batch of ``slots`` slots: the answers, the delivered tokens/s, the tokens and
    seconds of each phase (``queued``: steps begun while a request waited for a slot; ``drain``: the rest), and
    the tokens a sequence-step (every step of every request counted).
    ``spec``: a fixed (w,n,g) (``ar``: (1,1,0)), an NGram / SA drafter (``--drafters``), or None (``auto``).
    ``variant`` (``--split``): ``plan only`` keeps every sequence's golden row after each plan, ``no plan``
    plans no step; (``--gates``) ``no margin``: a plan drafts for any gain over the plain step, ``always plans``:
    every step plans, ``found = chosen``: the planning gate counts only the drafts a plan chose. ``prefill``: the
    batch's ``(prefill_chunk, prefill_stall)``, as the server's (with its default idle chunk)."""
    policy = engine.policy
    plan, should_plan, margin = policy.plan, policy.should_plan, policy.max_margin
    if variant == "no margin":
        policy.max_margin = 0.0
    elif variant == "always plans":
        policy.should_plan = lambda seqs: True
    elif variant == "found = chosen":
        def chosen_only(fixed, candidates, caps=None):
            out = plan(fixed, candidates, caps)
            policy.last_found = policy.last_gain
            return out
        policy.plan = chosen_only
    elif variant == "plan only":
        policy.plan = lambda fixed, candidates, caps=None: [-1 for _ in plan(fixed, candidates, caps)]
        policy.should_plan = lambda seqs: True
    elif variant == "no plan":
        policy.should_plan = lambda seqs: False
    phases = {"queued": [0.0, 0.0], "drain": [0.0, 0.0]}  # tokens, seconds
    seq_steps = 0
    try:
        batch = engine.new_batch(max_batch_size=slots, prefill_chunk=prefill[0], prefill_stall=prefill[1],
                                 idle_chunk=DEFAULT_IDLE_CHUNK)
        speculation = spec if isinstance(spec, DraftConfig) else None
        lookahead = None if speculation is not None else spec
        ids = [batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=50, lookahead=lookahead,
                                           speculation=speculation)) for p in prompts]
        out: dict[int, list[int]] = {i: [] for i in ids}
        t0 = time.perf_counter()
        while len(batch):
            phase = phases["queued" if batch.waiting else "drain"]
            s0 = time.perf_counter()
            for seq_id, chunk in batch.step():
                out[seq_id].extend(chunk.tokens)
                phase[0] += len(chunk.tokens)
                seq_steps += 1
            phase[1] += time.perf_counter() - s0
        wall = time.perf_counter() - t0
    finally:
        policy.plan, policy.should_plan, policy.max_margin = plan, should_plan, margin
    tokens = sum(len(t) for t in out.values())
    return [out[i] for i in ids], tokens / wall, phases, tokens / max(1, seq_steps)


def slot_list(text: str) -> list[int]:
    """``--slots``: one concurrency or several, comma-separated (``1,2,4,8``)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--slots takes whole numbers >= 1, comma-separated (1,2,4,8), got {text!r}")
    return values


def drafter_name(text: str) -> str:
    """``--drafters``: a drafter as the bench names it (``sa``, ``ngram-3-2``), checked before the model loads."""
    try:
        DraftConfig.parse(drafter_mode(text))
    except DraftConfigError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (hint: {exc.hint})") from None
    return text


def level(engine: ReferenceEngine, encoded: list[list[int]], count: int, slots: int, repeats: int,
          split: bool = False, prefill: tuple[Optional[int], Optional[float]] = (None, None),
          drafters: tuple[str, ...] = (), lower: Optional[ReferenceEngine] = None, gates: bool = False
          ) -> dict[str, Any]:
    """``ar`` and ``auto`` (and the fixed ``drafters``, with ``split`` auto's two variants, with ``gates`` its two
    gates open, and ``auto`` on the ``lower`` engine) rotated over ``repeats`` on ``count`` prompts through
    ``slots`` slots."""
    specs: dict[str, Any] = {"ar": LookaheadSpec(1, 1, 0), "auto": None}
    specs.update({name: DraftConfig.parse(drafter_mode(name)) for name in drafters})
    variants = (*(SPLIT if split else ()), *(GATES if gates else ()))
    specs.update({name: None for name in variants})
    extra = [*drafters, *variants]
    if lower is not None:
        specs[LOWER_BOUND] = None
        extra.append(LOWER_BOUND)
    names = list(specs)
    per_step: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    phase_rates = {phase: {name: [] for name in names} for phase in ("queued", "drain")}
    same = 0
    counters = engine.policy.counters
    before = (counters.expected_accepted, counters.accepted)
    for rep in range(repeats):
        prompts = [encoded[(count * rep + i) % len(encoded)] for i in range(count)]
        order = names[rep % len(names):] + names[:rep % len(names)]
        got = {name: run(lower if name == LOWER_BOUND else engine, prompts, specs[name], slots, name, prefill)
               for name in order}
        same += sum(all(got[name][0][i] == got["ar"][0][i] for name in names) for i in range(count))
        for name in names:
            rates[name].append(got[name][1])
            per_step[name].append(got[name][3])
            for phase, (tokens, seconds) in got[name][2].items():
                if seconds > 0:
                    phase_rates[phase][name].append(tokens / seconds)
        print(f"slots {slots}, repeat {rep + 1}/{repeats}: "
              + ", ".join(f"{name} {got[name][1]:.1f} tok/s" for name in names), flush=True)
    result = {"slots": slots, "requests": count, "ar_tok_s": rates["ar"], "auto_tok_s": rates["auto"],
              "auto_vs_ar": [b / a for a, b in zip(rates["ar"], rates["auto"])], "identical": same,
              "answers": count * repeats, "drafters": list(drafters),
              "tokens_per_sequence_step": {name: statistics.mean(v) for name, v in per_step.items()},
              "auto_accepted": {"expected": round(counters.expected_accepted - before[0], 1),
                                "got": counters.accepted - before[1]}}
    for name in extra:
        result[f"{name}_vs_ar"] = [b / a for a, b in zip(rates["ar"], rates[name])]
    for phase, by_name in phase_rates.items():  # a phase in every repeat of every mode: paired by repeat
        if all(len(by_name[name]) == repeats for name in names):
            result[f"{phase}_tok_s"] = {name: by_name[name] for name in names}
            for name in names[1:]:
                result[f"{phase}_tok_s"][f"{name}_vs_ar"] = [b / a for a, b in zip(by_name["ar"], by_name[name])]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", choices=("wave", "sustained"), default="wave")
    ap.add_argument("--requests", type=int, default=32, help="sustained: prompts queued on the slots")
    ap.add_argument("--slots", type=slot_list, default=[SLOTS],
                    help="sequences decoding together (the concurrency); several: 1,2,4,8")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--dataset", default="mix", help="the bench's prompts: mix (default), random, multiturn, ...")
    ap.add_argument("--engine-spec", default="2,4,2")
    ap.add_argument("--model", default=None, help="a model folder or GGUF file (default: the embedded model)")
    ap.add_argument("--device", default="cpu", help="a torch device: cpu, cuda, cuda:1")
    ap.add_argument("--prefill-chunk", type=int, default=DEFAULT_PREFILL_CHUNK,
                    help="prompt rows a step computes next to decoding requests, as serve.prefill_chunk_tokens "
                         f"(default {DEFAULT_PREFILL_CHUNK}, the server's); 0: a new prompt prefilled whole first")
    ap.add_argument("--prefill-stall", type=float, default=DEFAULT_PREFILL_STALL,
                    help=f"as serve.prefill_stall (default {DEFAULT_PREFILL_STALL:g}); 0: fixed chunks")
    ap.add_argument("--drafters", nargs="*", default=[], type=drafter_name,
                    help="fixed NGram / SA drafters in the same rotation, as the bench names them: sa, ngram, ...")
    ap.add_argument("--split", action="store_true",
                    help="also run auto with its plan's choices dropped (plan only) and without plans (no plan)")
    ap.add_argument("--gates", action="store_true",
                    help="also run auto with no noise margin (no margin), with a plan every step (always plans) and "
                         "with the planning gate counting only what a plan chose (found = chosen)")
    ap.add_argument("--lower-bound", action="store_true",
                    help="also run auto on a second engine counting censored chains at what they matched")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.prefill_chunk < 0 or args.prefill_stall < 0 or 0 < args.prefill_stall <= 1:
        ap.error("--prefill-chunk takes 0 or more; --prefill-stall 0 or more than 1 (as serve.prefill_stall)")
    prefill = (args.prefill_chunk or None, args.prefill_stall or None)
    # as `trtlade serve` loads it with configs/smollm2-cpu.yml (preset fast)
    engine = ReferenceEngine.load(args.model, spec=args.engine_spec, dtype=args.dtype, device=args.device,
                                  prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
    chat = PromptTokenizer(engine.tokenizer)
    encoded = [chat.encode_chat(p.chat_messages()) for p in load_dataset(args.dataset).prompts]
    engine.generate(encoded[0], max_tokens=8)  # warm-up
    lower = None
    if args.lower_bound:
        lower = ReferenceEngine.load(args.model, spec=args.engine_spec, dtype=args.dtype, device=args.device,
                                     prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
        lower.policy.censored_chains = False
        lower.generate(encoded[0], max_tokens=8)
    where = device_name(args.device)
    result: dict[str, Any] = {"device": where, "threads": engine.threads, "dtype": args.dtype, "load": args.load,
                              "dataset": args.dataset, "prefill_chunk": prefill[0], "prefill_stall": prefill[1],
                              "engine_spec": args.engine_spec, "model": engine.model_id, "levels": [],
                              "step_cost_ms": engine.stats["step_cost_ms"]}
    for slots in args.slots:
        count = slots if args.load == "wave" else args.requests
        result["levels"].append(level(engine, encoded, count, slots, args.repeats, args.split, prefill,
                                      tuple(args.drafters), lower, args.gates))
    c = engine.policy.counters
    snap = engine.policy.snapshot()
    result["cost_model"] = {k: snap.get(k) for k in ("plain_step_ms_by_sequences", "batched_row_cost_ms",
                                                      "draft_price_ms", "noise_margin_by_sequences",
                                                      "planning_by_sequences", "unplanned_steps")}
    result["auto_decisions"] = {"drafted": c.drafted, "skipped": c.skipped, "empty": c.empty,
                                "expected_accepted": round(c.expected_accepted, 1), "accepted": c.accepted}
    report(result, args.repeats)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


def _range(r: list[float]) -> str:
    return f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"


def report(result: dict[str, Any], repeats: int) -> None:
    """The table: delivered tokens/s of ``ar`` and ``auto`` and their ratio per concurrency (median, range), each
    fixed drafter's and auto variant's ratio under it, then the phases of a queue."""
    print(f"\n{result['device']}, {result['threads']} threads, {result['dtype']}, {result['model']}, "
          f"{result['load']}, {result['dataset']}, engine spec {result['engine_spec']}, {repeats} interleaved repeats")
    print(f"step cost by rows at load (ms): {result['step_cost_ms']}")
    print("| slots | requests | ar tok/s | auto tok/s | auto / ar | identical to ar |")
    print("|---:|---:|---:|---:|---:|---:|")
    for lv in result["levels"]:
        print(f"| {lv['slots']} | {lv['requests']} | {statistics.median(lv['ar_tok_s']):.1f} | "
              f"{statistics.median(lv['auto_tok_s']):.1f} | {_range(lv['auto_vs_ar'])} | "
              f"{lv['identical']}/{lv['answers']} |")
        for name in [*lv.get("drafters", ()), *SPLIT, *GATES, LOWER_BOUND]:
            if f"{name}_vs_ar" in lv:
                label = name if name in lv.get("drafters", ()) else f"auto, {name}"
                print(f"|   | {label} | | | {_range(lv[f'{name}_vs_ar'])} | |")
        steps = lv.get("tokens_per_sequence_step", {})
        per_step = ", ".join(f"{name} {v:.3f}" for name, v in steps.items())
        print(f"|   | tokens a sequence-step | | | {per_step} | |")
        got = lv["auto_accepted"]
        print(f"|   | auto's accepted drafts, expected / got | | | {got['expected']:.1f} / {got['got']} "
              f"({got['got'] / max(got['expected'], 1e-9):.2f}) | |")
    for lv in result["levels"]:
        for phase, what in (("queued", "while requests waited for a slot"), ("drain", "the drain (none waiting)")):
            if f"{phase}_tok_s" in lv and lv["requests"] > lv["slots"]:
                p = lv[f"{phase}_tok_s"]
                others = "; ".join(f"{key.removesuffix('_vs_ar')} / ar {_range(r)}"
                                   for key, r in p.items() if key.endswith("_vs_ar"))
                print(f"{lv['slots']} slots, {what}: ar {statistics.median(p['ar']):.1f} tok/s, auto "
                      f"{statistics.median(p['auto']):.1f}; {others}")
    print(f"auto's cost model at the end: {result['cost_model']}")
    d = result["auto_decisions"]
    print(f"auto's decisions: drafted {d['drafted']}, skipped {d['skipped']}, empty {d['empty']}; accepted drafts "
          f"expected {d['expected_accepted']:.1f}, got {d['accepted']}")


if __name__ == "__main__":
    main()

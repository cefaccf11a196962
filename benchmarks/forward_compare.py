"""The reference engine's forwards against each other, on one host, in one run: decode time per step
(greedy and a lookahead spec), next to the floor (the time to read the weights once, from a bandwidth
measured in the same run), interleaved and repeated, and where each step's time goes (torch.profiler and
the native body's own timers). The numbers behind docs/results/step-profile.md, "Where a step's time goes".

Forwards: ``native`` (the default: linear.c and the one-call body, on the best CPU variant this host
runs), ``native@<variant>`` (the same on a lower variant: ``native@portable``, ``native@avx2`` on an
AVX-512 host), ``onednn`` (the engine's own forward on oneDNN's GEMMs -- where this CPU has them for the
dtype, else torch's plain GEMMs -- and torch's ops: the fallback), ``transformers`` (transformers'
forward). Ratios are against the last one named.

    .venv/bin/python benchmarks/forward_compare.py --dtype float32 --repeats 3 --json reports/forward-fp32.json
    .venv/bin/python benchmarks/forward_compare.py --forwards native,onednn,transformers
    .venv/bin/python benchmarks/forward_compare.py --forwards native,native@avx2,onednn   # an AVX-512 host
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

from trtlade.bench.meta import machine_info
from trtlade.reference.native.cpu import ENV
from trtlade.engine_bench import profile_steps
from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.floor import Floor, weight_bytes
from trtlade.reference.prompt_suite import load_suite
from trtlade.spec import LookaheadSpec

PROMPTS = ("code-prime", "chat-weekend", "summary-bees", "list-planets")
FORWARDS = {"native": {}, "onednn": {"native_kernels": False}, "transformers": {"fast_forward": False}}


def load(name: str, args: argparse.Namespace) -> ReferenceEngine:
    """The engine of a forward name; ``native@<variant>`` loads under ``TRTLADE_NATIVE_ISA=<variant>``."""
    base, _, variant = name.partition("@")
    before = os.environ.get(ENV)
    if variant:
        os.environ[ENV] = variant
    try:
        return ReferenceEngine.load(dtype=args.dtype, threads=args.threads, spec=(2, 4, 2), **FORWARDS[base])
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--forwards", default="native,onednn", help=f"comma-separated, of {', '.join(FORWARDS)}")
    args = ap.parse_args()
    names = [n.strip() for n in args.forwards.split(",") if n.strip()]
    if not names or any(n.partition("@")[0] not in FORWARDS for n in names):
        ap.error(f"--forwards {args.forwards!r}: use names of {', '.join(FORWARDS)} (native@<variant> too)")
    base_name = names[-1]
    suite = {p.id: p for p in load_suite("suite").prompts}
    engines = {name: load(name, args) for name in names}
    ids = [suite[pid].encode(engines[names[0]].tokenizer) for pid in PROMPTS]
    specs = [LookaheadSpec(1, 1, 0), LookaheadSpec(2, 4, 2)]
    floors = {name: Floor(weight_bytes(e.runner), dtype=args.dtype) for name, e in engines.items()}
    ms: dict[tuple[str, str], list[float]] = {}
    tokens: dict[tuple[str, str], list[list[int]]] = {}
    for e in engines.values():  # warm-up
        e.generate(ids[0], max_tokens=8, lookahead=(1, 1, 0))
    for rep in range(args.repeats):
        for floor in floors.values():
            floor.sample()
        order = list(engines.items())[::(1 if rep % 2 == 0 else -1)]
        for spec in specs:
            for name, e in order:
                decode, steps, outs = 0.0, 0, []
                for prompt in ids:
                    r = e.generate(prompt, max_tokens=args.max_tokens, lookahead=spec, ignore_eos=True,
                                   settings=dataclasses.replace(e.settings, adaptive=False))
                    decode += r.stats.decode_s
                    steps += r.stats.steps - 1
                    outs.append(r.tokens)
                ms.setdefault((name, str(spec)), []).append(decode / steps * 1e3)
                tokens[(name, str(spec))] = outs
        print(f"repeat {rep + 1}/{args.repeats}: "
              + ", ".join(f"{n} ({s}) {v[-1]:.2f} ms/step" for (n, s), v in ms.items()), flush=True)
    for floor in floors.values():
        floor.sample()
    result = {"host": machine_info()["cpu"], "threads": engines[names[0]].threads, "baseline": base_name,
              "dtype": args.dtype,
              "max_tokens": args.max_tokens, "prompts": len(ids), "repeats": args.repeats,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "floor": {n: f.to_dict() for n, f in floors.items()},
              "linear_kernel": {n: e.stats["linear_kernel"]["kernel"] for n, e in engines.items()},
              "kernels": {n: e.stats["kernels"] for n, e in engines.items()}, "modes": []}
    for (name, spec), values in ms.items():
        floor_ms = result["floor"][name]["floor_ms"]
        base = ms[(base_name, spec)]
        result["modes"].append({
            "forward": name, "spec": spec, "step_ms": round(statistics.median(values), 3),
            "step_ms_range": [round(min(values), 3), round(max(values), 3)],
            "step_over_floor": round(statistics.median(values) / floor_ms, 3),
            "speedup_vs_baseline": [round(b / v, 3) for b, v in zip(base, values)],
            "identical_to_baseline": tokens[(name, spec)] == tokens[(base_name, spec)],
            "identical_to_greedy": tokens[(name, spec)] == tokens[(name, "1,1,0")]})
    result["profile"] = {name: [profile_steps(e, ids[0], spec) for spec in specs] for name, e in engines.items()}
    for m in result["modes"]:
        print(f"{m['forward']:>12} ({m['spec']}): {m['step_ms']:.2f} ms/step ({m['step_ms_range'][0]:.2f}-"
              f"{m['step_ms_range'][1]:.2f}), {m['step_over_floor']:.2f}x the floor, vs {base_name} "
              f"{statistics.median(m['speedup_vs_baseline']):.2f}x {m['speedup_vs_baseline']}, "
              f"same tokens as {base_name}: {m['identical_to_baseline']}, as greedy: {m['identical_to_greedy']}")
    for name, kernels in result["kernels"].items():
        print(f"kernels ({name}): {kernels}")
    for name, f in result["floor"].items():
        print(f"floor ({name}): {f['weight_bytes'] / 1e6:.0f} MB at {f['read_gb_s']} GB/s {f['read_gb_s_samples']} "
              f"= {f['floor_ms']} ms; roofline: peak {f['peak_gflops']} GFLOP/s {f['peak_gflops_samples']} "
              f"({f['dtype']}, {f['peak_source']}; torch.mm {f['mm_gflops']}), R* = {f['rows_star']} rows")
    for name, profs in result["profile"].items():
        for p in profs:
            print(f"profile {name} ({p['spec']}): {p['step_ms']} ms/step: " +
                  ", ".join(f"{k} {v}" for k, v in p["breakdown_ms"].items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""In-flight batching on the reference engine, measured without HTTP: output tokens/s at batch sizes
1, 2, 4, 8 for plain greedy (1,1,0) and lookahead, interleaved and repeated, as ratios against batch 1
and against greedy measured in the same run; plus the lossless check (every batched request equal to
the prompt run alone with plain greedy) and the cost of a forward pass by rows.

    .venv/bin/python benchmarks/batch_scaling.py                        # embedded SmolLM2, fp32, (2,4,2)
    .venv/bin/python benchmarks/batch_scaling.py --dtype bfloat16 --repeats 1
    .venv/bin/python benchmarks/batch_scaling.py --preset trtllm          # no prompt-lookup candidates
    .venv/bin/python benchmarks/batch_scaling.py --forward-only --repeats 3 # the cost by rows alone, 3 times
    .venv/bin/python benchmarks/batch_scaling.py --forward-only --context 1500   # ... after 1,500 cached tokens
    .venv/bin/python benchmarks/batch_scaling.py --parts --repeats 15       # where the extra rows' time goes

``--parts``: one sequence's forward of 1, 2, 5, 8, 9 and 16 rows (``--rows``), the row counts interleaved, split by
the native body's own timers into its linear layers, attention and small ops (norms, rotary, activations, K/V
writes) and the rest of the forward (the LM head, the embedding rows, Python); median of ``--repeats`` forwards each.

Prompts: the bench's `mix` dataset through the chat template; max_tokens 48, ignore_eos.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--spec", default="2,4,2")
    ap.add_argument("--preset", default="fast", help="fast (served default: prompt lookup too) or trtllm")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--forward-only", action="store_true",
                    help="only the cost of a forward by rows (and the roofline), --repeats times")
    ap.add_argument("--parts", action="store_true",
                    help="the forward by rows split into its parts (median of --repeats; implies --forward-only)")
    ap.add_argument("--context", type=int, default=100,
                    help="cached tokens before the rows of the forward by rows (the first prompt's, repeated)")
    ap.add_argument("--rows", default="1,2,5,8,9,16",
                    help="--parts: the row counts of the forwards, comma-separated (the first is the 1x reference)")
    args = ap.parse_args()
    if args.context < 1:  # before the model loads, not after a whole run
        ap.error(f"--context {args.context}: the cached tokens before the rows must be at least 1")
    try:
        counts = tuple(int(x) for x in args.rows.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1 or max(counts) > 64:
        ap.error(f"--rows {args.rows!r}: row counts 1-64, comma-separated (e.g. 1,2,3,4,5,8)")

    from trtlade.bench.datasets import load_dataset
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.spec import LookaheadSpec

    engine = ReferenceEngine.load(spec=args.spec, dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup(args.preset, args.spec))
    chat = PromptTokenizer(engine.tokenizer)  # what /v1/chat/completions sends the engine
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts]
    sizes = [int(x) for x in args.batches.split(",")]
    modes = {"greedy": LookaheadSpec(1, 1, 0), f"lookahead {args.spec}": LookaheadSpec.parse(args.spec)}

    if args.parts:
        forward_parts(engine, prompts, args.dtype, args.context, args.repeats, counts)
        return
    if args.forward_only:
        for _ in range(args.repeats):
            forward_by_rows(engine, prompts, args.dtype, args.context)
        return
    alone = {i: engine.greedy(p, max_tokens=args.max_tokens, ignore_eos=True).tokens for i, p in enumerate(prompts)}

    def run(size: int, spec: LookaheadSpec, offset: int) -> tuple[float, int, int]:
        batch = engine.new_batch(max_batch_size=size)
        chosen = [(offset + k) % len(prompts) for k in range(size)]
        ids = {batch.add(GenerationRequest(prompt_ids=tuple(prompts[i]), max_tokens=args.max_tokens,
                                           lookahead=spec, ignore_eos=True)): i for i in chosen}
        out: dict[int, list[int]] = {sid: [] for sid in ids}
        t0 = time.perf_counter()
        while len(batch):
            for sid, chunk in batch.step():
                out[sid].extend(chunk.tokens)
        elapsed = time.perf_counter() - t0
        same = sum(out[sid] == alone[i] for sid, i in ids.items())
        return sum(len(v) for v in out.values()) / elapsed, same, len(ids)

    results: dict[tuple[str, int], list[float]] = {}
    identical = {name: [0, 0] for name in modes}
    for rep in range(args.repeats):
        for size in sizes:
            for name, spec in modes.items():  # interleaved: both modes see the same machine state
                tps, same, total = run(size, spec, offset=rep * 3 + size)
                results.setdefault((name, size), []).append(tps)
                identical[name][0] += same
                identical[name][1] += total
    print(f"\nOutput tokens/s (median of {args.repeats}), {engine.model_id} {engine.dtype}, "
          f"{args.max_tokens} tokens per request, mix prompts")
    print("| mode | " + " | ".join(f"batch {s}" for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    for name in modes:
        print(f"| {name} | " + " | ".join(f"{med[(name, s)]:.1f} ({med[(name, s)] / med[(name, sizes[0])]:.2f}x)"
                                         for s in sizes) + " |")
    la = list(modes)[1]
    print(f"| {la} vs greedy | " + " | ".join(f"{med[(la, s)] / med[('greedy', s)]:.2f}x" for s in sizes) + " |")
    for name, (same, total) in identical.items():
        print(f"identical to the prompt run alone with plain greedy: {name}: {same}/{total}")

    forward_by_rows(engine, prompts, args.dtype, args.context)


def forward_by_rows(engine, prompts, dtype: str, context: int = 100) -> None:
    """The cost of a forward pass by rows, over several sequences of ``context`` cached tokens (the first
    prompt's, repeated), beside the host's roofline measured before and after."""
    from trtlade.reference.batch_runner import RowBlock

    runner = engine.new_batch().engine.runner
    slots = [runner.allocate(context + 64) for _ in range(16)]  # room for the widest forward's 64 rows
    cached = (prompts[0] * (context // len(prompts[0]) + 1))[:context]
    for s in slots:
        runner.prefill(s, cached)
    from trtlade.reference.floor import Floor, bytes_per_weight, weight_bytes

    roof = Floor(weight_bytes(runner), dtype=dtype)
    roof.sample()
    timed = []
    for rows in (1, 2, 4, 8, 9, 16, 32, 64):
        one = [RowBlock(slots[0], [5] * rows, list(range(rows)), list(range(rows)), causal=True)]
        many = [RowBlock(s, [5], [0], [0]) for s in slots[:rows]] if rows <= len(slots) else None
        timed.append((rows, _best(lambda: runner.forward(one)), _best(lambda: runner.forward(many)) if many else None))
    roof.sample()
    r = roof.to_dict()
    print(f"\nForward pass cost by rows after {context} cached tokens (ms, best of 5): one sequence with R rows"
          " | R sequences with one row each | GFLOP/s of the one-sequence forward (2 x weights x rows / time)"
          " | % of the measured peak")
    base = timed[0][1]
    for rows, t_one, t_many in timed:
        gflops = 2 * roof.nbytes / bytes_per_weight(dtype) * rows / t_one / 1e9
        print(f"  {rows:3d} rows: {1000 * t_one:7.1f} ({t_one / base:.2f}x) | "
              + (f"{1000 * t_many:7.1f} ({t_many / base:.2f}x)" if t_many else "      -")
              + f" | {gflops:6.1f} | {100 * gflops / r['peak_gflops']:4.0f}%")
    print(f"roofline ({dtype}): peak {r['peak_gflops']} GFLOP/s {r['peak_gflops_samples']} ({r['peak_source']}, "
          f"before and after; torch.mm {r['mm_gflops']}), read {r['read_gb_s']} GB/s {r['read_gb_s_samples']}, floor "
          f"{r['floor_ms']} ms: R* = {r['rows_star']} rows")


def forward_parts(engine, prompts, dtype: str, context: int, repeats: int,
                  counts: tuple[int, ...] = (1, 2, 5, 8, 9, 16)) -> None:
    """One sequence's forward of R rows (``counts``) after ``context`` cached tokens, split into the native body's
    parts and the rest of the forward; the row counts interleaved, median of ``repeats`` forwards each (the whole
    forward's range beside it); ratios against the first count."""
    from trtlade.reference.batch_runner import RowBlock

    runner = engine.new_batch().engine.runner
    body = runner.fast.native if runner.fast is not None else None
    if body is None:
        from trtlade.reference.native import status

        raise SystemExit(f"--parts times the parts of the native decoder body, which does not run here: {status()} "
                         f"(this engine: {engine.stats['kernels']})")
    slot = runner.allocate(context + max(counts))
    runner.prefill(slot, (prompts[0] * (context // len(prompts[0]) + 1))[:context])
    parts = (*body.PARTS, "rest of the forward")
    times: dict[int, list[list[float]]] = {rows: [] for rows in counts}
    body.time_parts = True
    try:
        for _ in range(repeats):
            for rows in counts:
                block = [RowBlock(slot, [5] * rows, list(range(rows)), list(range(rows)), causal=True)]
                body.timings[:] = 0.0
                t0 = time.perf_counter()
                runner.forward(block)
                total = time.perf_counter() - t0
                inside = [float(x) for x in body.timings]
                times[rows].append([total, *inside, total - sum(inside)])
    finally:
        body.time_parts = False
    med = {rows: [1000 * statistics.median(t[i] for t in times[rows]) for i in range(5)] for rows in counts}
    print(f"\n{dtype}: one sequence's forward of R rows after {context} cached tokens, ms (x the {counts[0]}-row "
          f"figure), median of {repeats}")
    print("| rows | forward | " + " | ".join(parts) + " |")
    print("|---:|---:|" + "---:|" * len(parts))
    for rows in counts:
        cells = [f"{med[rows][i]:.2f} ({med[rows][i] / med[counts[0]][i]:.2f}x)" for i in range(5)]
        whole = [1000 * t[0] for t in times[rows]]
        cells[0] += f" {min(whole):.2f}-{max(whole):.2f}"
        print(f"| {rows} | " + " | ".join(cells) + " |")


def _best(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a decode step costs in each mode at one request, split into the native calls and the host work
around them: is the default slower than a fixed drafter because of its rows or because of its Python?
``--slots N`` decodes N of the prompts together (8 with ``--prompts 8``: the bench's wave of 8) and splits the
steps by sequences and rows. ``--functions`` also times the host-side functions of a step (the plan, the drafters'
bookkeeping, the verification), per mode: where a mode's host work goes.

In-process (default): the ``mix`` prompts (``--prompts``: the first N; the bench sends the first 8) one at a
time through one batch per mode, the modes rotated every repeat. Every native call (the decoder body, the
linear layers, the attention, the argmax) is timed; the rest of ``Batch.step`` is the host work. Steps that
prefill are left out. Per mode: tokens and rows a step, the step, its native and host parts (median), decode
tokens/s, and the host work and native time by rows.

Served (``--url``): the same prompts streamed to a running ``trtlade serve``, one at a time (``--slots N``: N at a
time, the next sent as one ends), the modes rotated every repeat; the engine's own step times and rows come from
``/metrics`` (``trtlade_batch_step_seconds``, ``trtlade_step_rows``), read before and after each mode's pass, and
a pass's wall time. To hold the two against each other, in-process also gives the mean of every step with sequences
decoding, new prompts' chunks included, as ``/metrics`` counts them, and a pass's wall time; ``--prefill-chunk 256
--prefill-stall 1.5 --prefix-cache-mb 256`` run the batch as ``trtlade serve`` does by default (chunked prefill
beside the decoding rows, paced; the prefix cache).

    .venv/bin/python benchmarks/mode_step_cost.py --dtype bfloat16 --prompts 8 --repeats 4
    .venv/bin/python benchmarks/mode_step_cost.py --slots 8 --functions --modes ar,auto --repeats 3
    .venv/bin/python benchmarks/mode_step_cost.py --url http://127.0.0.1:8000 --prompts 8 --repeats 6
    .venv/bin/python benchmarks/mode_step_cost.py --slots 4 --modes ar,auto --prefill-chunk 256 --prefill-stall 1.5 \
        --prefix-cache-mb 256 --one-batch --warm --repeats 2   # then --url URL --slots 4 --warm: against served
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: the bench's modes at one request (``trtlade bench --modes``): ``auto`` is a request without a draft field
SPECULATION = {"ngram": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2},
               "sa": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}}
NATIVE_MODULES = ("body", "linear", "attention", "argmax")


def in_process(args: argparse.Namespace) -> None:
    import importlib

    import trtlade.reference.native.bindings as bindings
    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import device_name
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.drafting.config import DraftConfig, drafter_mode
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.spec import LookaheadSpec

    native = [0.0]

    def timed(label: str, fn: Any, *call: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*call)
        finally:
            native[0] += time.perf_counter() - t0

    for name in NATIVE_MODULES:  # each module imported `profiled` by name
        importlib.import_module(f"trtlade.reference.native.{name}").profiled = timed
    bindings.profiled = timed
    current = [""]  # the mode whose pass runs (--functions)
    spent = _time_host_functions(current) if args.functions else None
    engine = ReferenceEngine.load(None, spec=args.engine_spec, dtype=args.dtype,
                                  prompt_lookup=preset_prompt_lookup("fast", args.engine_spec))
    if args.prefix_cache_mb:
        engine.runner.enable_prefix_cache(args.prefix_cache_mb << 20)
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset("mix").prompts][:args.prompts]
    specs: dict[str, Any] = {"ar": LookaheadSpec(1, 1, 0), "auto": None, "lookahead": engine.spec}
    specs.update({m: DraftConfig.parse(drafter_mode(m)) for m in SPECULATION})
    modes = {m: specs[m] for m in args.modes}
    engine.generate(prompts[0], max_tokens=8)  # warm-up
    steps: dict[str, list[tuple[int, float, float, int, int]]] = {m: [] for m in modes}  # rows, step ms, native ms,
    # tokens, sequences
    rates: dict[str, list[float]] = {m: [] for m in modes}  # decode tokens/s of each repeat
    # mean step as /metrics counts it, pass s, decoded tokens a sequence-step
    counted: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    kept = [None]  # --one-batch: the batch every pass uses, as a server keeps one (its drafters' pools with it)

    def filled(mode: str) -> Any:
        """A batch holding a pass of ``mode``: every prompt, queued for ``--slots`` at a time."""
        spec = modes[mode]
        speculation = spec if isinstance(spec, DraftConfig) else None
        batch = kept[0] or engine.new_batch(max_batch_size=args.slots, prefill_chunk=args.prefill_chunk,
                                            prefill_stall=args.prefill_stall, idle_chunk=args.prefill_chunk)
        kept[0] = batch if args.one_batch else None
        for p in prompts:
            batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=args.max_tokens,
                                        lookahead=None if speculation is not None else spec, speculation=speculation))
        return batch

    for mode in modes if args.warm else ():  # an unmeasured pass: the prompts in the prefix cache, as a running server
        batch = filled(mode)
        while len(batch):
            batch.step()
    for rep in range(args.repeats):
        for mode in list(modes)[:: 1 if rep % 2 == 0 else -1]:
            current[0] = mode
            before = len(steps[mode])
            batch = filled(mode)
            every, started, emitted, seq_steps = [], time.perf_counter(), 0, 0
            while len(batch):
                native[0] = 0.0
                t0 = time.perf_counter()
                out = batch.step()
                wall = time.perf_counter() - t0
                emitted += sum(len(c.tokens) for _, c in out)
                if batch.last.running:  # what the server's trtlade_batch_step_seconds counts
                    every.append(batch.last.seconds)
                    seq_steps += batch.last.running
                if batch.last.running and not batch.last.prefills:
                    steps[mode].append((batch.last.rows, wall * 1e3, native[0] * 1e3,
                                        sum(len(c.tokens) for _, c in out), batch.last.running))
            counted[mode].append((statistics.fmean(every) * 1e3, time.perf_counter() - started,
                                  (emitted - len(prompts)) / seq_steps))  # each prompt's first token is its prefill's
            done = steps[mode][before:]
            rates[mode].append(sum(x[3] for x in done) / sum(x[1] for x in done) * 1e3)
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    print(f"\nin-process on {device_name('cpu')}, {engine.threads} threads, {args.dtype}, the first {len(prompts)} "
          f"mix prompts on {args.slots} slot(s), {args.max_tokens} tokens, {args.repeats} repeats, engine spec "
          f"{args.engine_spec}")
    _table(("mode", "tokens a step", "rows a step", "step ms", "native ms", "host ms", "decode tokens/s (range)"),
           [(mode, f"{sum(x[3] for x in v) / len(v):.3f}", f"{sum(x[0] for x in v) / len(v):.2f}",
             f"{statistics.median(x[1] for x in v):.2f}", f"{statistics.median(x[2] for x in v):.2f}",
             f"{statistics.median(x[1] - x[2] for x in v):.3f}", _spread(rates[mode], ".1f"))
            for mode, v in steps.items()])
    print(f"\nevery step with sequences decoding, prompts included, as the server's /metrics counts them: mean step, "
          f"a pass of the {len(prompts)} prompts, and the tokens decoded a sequence-step (a prompt's first token left "
          "out: its prefill's), median (range) over the repeats")
    _table(("mode", "mean step ms", "pass s", "tokens a sequence-step"),
           [(mode, *(_spread([x[i] for x in v], fmt) for i, fmt in enumerate((".2f", ".2f", ".3f"))))
            for mode, v in counted.items()])
    if spent is not None:
        _function_table(spent, list(modes))
    for mode, v in steps.items():
        by = collections.defaultdict(list)
        for rows, step, nat, _, seqs in v:
            by[rows if args.slots == 1 else (seqs, rows)].append((step - nat, nat))
        label = "rows" if args.slots == 1 else "(sequences, rows)"
        print(f"{mode}: by {label} (steps, host ms, native ms): " + ", ".join(
            f"{r}: ({len(w)}, {statistics.median(a for a, _ in w):.3f}, {statistics.median(b for _, b in w):.2f})"
            for r, w in sorted(by.items())))


#: the host-side calls of a step --functions times: (module, class, methods)
HOST_FUNCTIONS = (
    ("trtlade.reference.batching", "Batch", ("step", "_plan", "_count_auto")),
    ("trtlade.reference.batching", "SequenceState",
     ("consume", "draft_options", "wanted_rows", "block", "_emit", "_observe_unrun")),
    ("trtlade.reference.adaptive", "AutoPolicy", ("plan", "observe_cost", "observe", "count", "fade_all")),
    ("trtlade.lookahead.algorithm", "LookaheadAlgorithm", ("candidates", "prepare", "verify", "commit", "advance")),
    ("trtlade.drafting.algorithm", "HistoryDrafter", ("prepare", "verify", "commit")),
    ("trtlade.drafting.algorithm", "DraftPools", ("flush", "end_step")),
    ("trtlade.reference.batch_runner", "BatchRunner", ("forward_greedy", "keep")),
)


def _time_host_functions(current: list[str]) -> collections.Counter:
    """Wrap :data:`HOST_FUNCTIONS` with timers: seconds spent in each, inclusive (a call inside another counts in
    both), by the mode whose pass runs (``current[0]``); ``Batch.step`` also counts the steps."""
    import functools
    import importlib

    spent: collections.Counter = collections.Counter()
    for module, cls_name, methods in HOST_FUNCTIONS:
        cls = getattr(importlib.import_module(module), cls_name)
        for name in methods:
            def timed(*a: Any, _fn: Any = getattr(cls, name), _key: str = f"{cls_name}.{name}", **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    spent[(current[0], _key)] += time.perf_counter() - t0
                    spent[(current[0], _key, "calls")] += 1
            setattr(cls, name, functools.wraps(getattr(cls, name))(timed))
    return spent


def _function_table(spent: collections.Counter, modes: list[str]) -> None:
    """Milliseconds a step in each timed function, per mode (every step, prefill ones included), largest first by
    the second mode (``auto`` in the default order)."""
    steps = {m: spent[(m, "Batch.step", "calls")] or 1 for m in modes}
    names = sorted({k[1] for k in spent if len(k) == 2}, key=lambda n: -spent[(modes[min(1, len(modes) - 1)], n)])
    print("\nhost functions, ms a step (inclusive: a call inside another counts in both; every step, prefill "
          "included)")
    _table(("function", *modes), [(n, *(f"{spent[(m, n)] / steps[m] * 1e3:.3f}" for m in modes)) for n in names])


def _metric(text: str, name: str) -> float:
    m = re.search(r"^" + name + r"(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def served(args: argparse.Namespace) -> None:
    import httpx

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import device_name

    url = args.url.rstrip("/").removesuffix("/v1")
    prompts = load_dataset("mix").prompts[:args.prompts]
    fields: dict[str, dict[str, Any]] = {"ar": {"lookahead": {"w": 1, "n": 1, "g": 0}}, "auto": {},
                                         "lookahead": {"lookahead": {"w": 2, "n": 4, "g": 2}}}  # the config's
    fields.update({m: {"speculation": s} for m, s in SPECULATION.items()})
    results: dict[str, list[tuple[float, ...]]] = {m: [] for m in args.modes}
    with httpx.Client(timeout=120) as client:
        model = client.get(url + "/v1/models").json()["data"][0]["id"]

        def counters() -> tuple[float, float, float, float]:
            text = client.get(url + "/metrics").text
            return (_metric(text, "trtlade_batch_step_seconds_sum"), _metric(text, "trtlade_batch_step_seconds_count"),
                    _metric(text, "trtlade_step_rows_sum"), _metric(text, "trtlade_batch_size_sum"))

        def stream(mode: str, prompt: Any) -> int:
            body = {"model": model, "messages": prompt.chat_messages(), "max_tokens": args.max_tokens,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, **fields[mode]}
            tokens = 0
            with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        usage = json.loads(line[6:]).get("usage")
                        tokens += usage["completion_tokens"] if usage else 0
            return tokens

        with ThreadPoolExecutor(max_workers=args.slots) as pool:  # --slots streams at a time, each sent when one ends
            for mode in args.modes if args.warm else ():  # an unmeasured pass of each mode
                sum(pool.map(lambda p, mode=mode: stream(mode, p), prompts))
            for rep in range(args.repeats):
                for mode in args.modes[:: 1 if rep % 2 == 0 else -1]:
                    (s0, n0, r0, b0), t0 = counters(), time.perf_counter()
                    tokens = sum(pool.map(lambda p, mode=mode: stream(mode, p), prompts))
                    wall = time.perf_counter() - t0
                    s1, n1, r1, b1 = counters()
                    if n1 <= n0 or b1 <= b0:
                        raise SystemExit(f"{url}/metrics: its step counters did not move over a pass (a server "
                                         "without them, a key needed, or a tenant's copy): not a live trtlade serve")
                    results[mode].append(((s1 - s0) / (n1 - n0) * 1e3, (r1 - r0) / (n1 - n0), n1 - n0,
                                          tokens / wall, wall, (tokens - len(prompts)) / (b1 - b0)))
                print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    print(f"\nserved by {url} (this machine: {device_name('cpu')}), the first {len(prompts)} mix prompts streamed "
          f"{args.slots} at a time, {args.max_tokens} tokens, {args.repeats} repeats: median (range) over the repeats; "
          "the engine's steps are its mean step (prompt chunks beside the decoding rows included)")
    _table(("mode", "engine step ms", "rows a step", "steps a pass", "delivered tokens/s", "pass s",
            "tokens a sequence-step"),
           [(mode, *(_spread([x[i] for x in v], fmt)
                     for i, fmt in enumerate((".2f", ".2f", ".0f", ".1f", ".2f", ".3f"))))
            for mode, v in results.items()])


def _spread(values: list[float], fmt: str) -> str:
    """Median and range: ``12.3 (11.9-12.8)``."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A Markdown table: the first column left-aligned, the figures right-aligned."""
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="ar,auto,ngram,sa",
                    help="comma-separated: ar, auto, ngram, sa, lookahead (the engine's spec, every step)")
    ap.add_argument("--prompts", type=int, default=8, help="the first N mix prompts (the bench sends 8)")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--functions", action="store_true",
                    help="in-process: also time the host-side functions of a step (HOST_FUNCTIONS), per mode")
    ap.add_argument("--slots", type=int, default=1,
                    help="sequences decoded together (8 with --prompts 8: the bench's wave of 8); with --url, requests "
                         "streamed at a time, the next sent as one ends")
    ap.add_argument("--dtype", default="float32", help="in-process: float32 or bfloat16")
    ap.add_argument("--engine-spec", default="2,4,2", help="in-process: the engine's (W,N,G)")
    ap.add_argument("--prefill-chunk", type=int, default=None,
                    help="in-process: prompt rows a step beside decoding ones, as serve.prefill_chunk_tokens, and "
                         "with none decoding, as serve.prefill_idle_chunk_tokens (both 256 served; default: whole "
                         "prompts)")
    ap.add_argument("--one-batch", action="store_true",
                    help="in-process: one batch for every pass, as a server keeps one (the drafters' pools, and the "
                         "finished requests they retain, carry over; default: a new batch a pass)")
    ap.add_argument("--warm", action="store_true",
                    help="first an unmeasured pass of every mode (the prompts then in the prefix cache, in-process as "
                         "on a server that has served them)")
    ap.add_argument("--prefill-stall", type=float, default=None, help="in-process: as serve.prefill_stall (1.5 served)")
    ap.add_argument("--prefix-cache-mb", type=int, default=0, help="in-process: as serve.prefix_cache_mb (0: none)")
    ap.add_argument("--url", help="a running trtlade serve: measure it served instead")
    args = ap.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in ("ar", "auto", "lookahead", *SPECULATION)]
    if unknown:
        ap.error(f"--modes: unknown {', '.join(unknown)} (allowed: ar, auto, ngram, sa, lookahead)")
    if args.url and args.functions:  # the server's functions are untimed: its own /metrics are read
        ap.error("--functions measures in-process; with --url the server's own /metrics are read")
    served(args) if args.url else in_process(args)


if __name__ == "__main__":
    main()

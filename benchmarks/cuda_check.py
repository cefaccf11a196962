#!/usr/bin/env python3
"""The reference engine on a GPU: is lookahead still lossless, what does a forward cost by rows, and what
does in-flight batching deliver. Runs on any torch device (``--device cpu`` is a dry run of every path);
nothing in the project or its tests needs a GPU.

    python benchmarks/cuda_check.py --device cuda --json reports/cuda-check.json

1. **Lossless** (tiny seeded random Llama / Qwen2 / Qwen3 of tests/models.py, and a random model of
   SmolLM2-135M's shape): every drafter (fixed (4,2,4) and (7,7,7), ``auto``, NGram, SA) against the same
   engine's greedy, seeded sampling against plain sampling, a batch of all prompts (each with the next drafter
   in turn) against each alone; float32, bfloat16, float16; attention the
   batched kernel (default off the CPU) and the row-invariant torch one. Off the CPU the linear layers are
   the vendor's GEMMs, which pick their kernel (and so the order of a row's sums) by the number of rows:
   the engine says ``bit_exact: False`` there, and this counts how often that shows in the tokens.
2. **Step cost by rows**: one sequence with R rows (lookahead's shape) and R sequences with one row each
   (in-flight batching), median of ``--repeats`` synchronised forwards, for random models of SmolLM2-135M's
   and Qwen3-8B's shapes, beside the device's measured matrix-product peak and read bandwidth (R*: the rows
   a step carries before its arithmetic costs more than reading the weights once).
3. **Drafts in a batch** (``--parts drafts``): a step of S sequences (1, 4, 8, 16) of which D carry 9 draft
   rows each (0, 1, half, all), the forward and its greedy tokens synchronised: what one drafting sequence
   adds to a batch's step, against what ``auto``'s cost model charges a draft row there. ``--parts host``:
   per decode step, the forward and the step's time outside it, ``ar`` against a fixed (2,4,2), ``auto`` and NGram.
4. **Batching**: output tokens/s of 1..N sequences with ``ar``, the user's (4,2,4) and ``auto`` on the
   Qwen3-8B-shaped random model (random weights: acceptance is not a real model's; the step costs are).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/models.py: the tiny models

import torch  # noqa: E402

from tests.models import CORPUS, tiny_model, tiny_tokenizer, tiny_word_tokenizer  # noqa: E402
from trtlade.contract.protocol import GenerationRequest  # noqa: E402
from trtlade.reference.batch_runner import RowBlock  # noqa: E402
from trtlade.reference.engine import ReferenceEngine  # noqa: E402
from trtlade.spec import LookaheadSpec  # noqa: E402

#: Hugging Face configs of the shapes timed (random weights: no hub, nothing downloaded)
SHAPES = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, rope_theta=100000.0,
                         tie_word_embeddings=True, max_position_embeddings=8192, rms_norm_eps=1e-5),
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     rope_theta=1000000.0, tie_word_embeddings=False, max_position_embeddings=40960,
                     rms_norm_eps=1e-6),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODES = [(4, 2, 4), (7, 7, 7)]
#: every drafter the lossless check runs: ``make_request`` keyword arguments per mode (``auto``: the policy)
DRAFTERS: dict[str, dict[str, Any]] = {
    **{",".join(map(str, m)): {"lookahead": m} for m in MODES},
    "auto": {"lookahead": "auto"},
    "ngram": {"speculation": {"decoding_type": "NGram", "max_draft_len": 4}},
    "sa": {"speculation": {"decoding_type": "SA", "max_draft_len": 4}},
}


def native(device: str) -> bool | None:
    """The engine's native kernels where they run (the CPU), off elsewhere."""
    return None if device == "cpu" else False


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_ms(fn: Callable[[], Any], device: str, repeats: int) -> float:
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


def shaped_model(shape: str, dtype: torch.dtype, device: str, layers: int | None = None) -> Any:
    """A seeded random model of a named shape, built on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(SHAPES[shape])
    if layers:
        cfg["num_hidden_layers"] = layers
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


# ------------------------------------------------------------------------------------------ 1. lossless
def prompts_for(tokenizer: Any, count: int) -> list[list[int]]:
    lines = [line for line in CORPUS.strip().splitlines() if line.strip()]
    return [tokenizer.encode(lines[i % len(lines)])[:24] for i in range(count)]


def identity(engine: ReferenceEngine, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    """Same / total per check, and where the first differing tokens were: every drafter of ``DRAFTERS``
    greedy against greedy and seeded against plain sampling, then one batch of all prompts, each prompt with
    the next drafter in turn, against each alone (greedy)."""
    out: dict[str, Any] = {"greedy": [0, 0], "sampled": [0, 0], "batch": [0, 0], "first_diff": [], "by_drafter": {}}
    alone = []
    for i, ids in enumerate(prompts):
        greedy = engine.greedy(ids, max_tokens, ignore_eos=True).tokens
        plain = engine.generate(ids, max_tokens, lookahead=(1, 1, 0), temperature=0.8, seed=i, ignore_eos=True).tokens
        alone.append(greedy)
        for name, kw in DRAFTERS.items():
            mine = out["by_drafter"].setdefault(name, [0, 0])
            got = engine.generate(ids, max_tokens, ignore_eos=True, **kw).tokens
            _count(out, "greedy", got, greedy)
            mine[0], mine[1] = mine[0] + (got == greedy), mine[1] + 1
            got = engine.generate(ids, max_tokens, temperature=0.8, seed=i, ignore_eos=True, **kw).tokens
            _count(out, "sampled", got, plain)
            mine[0], mine[1] = mine[0] + (got == plain), mine[1] + 1
    batch = engine.new_batch(max_batch_size=len(prompts))
    kinds = list(DRAFTERS.values())
    ids = {batch.add(engine.make_request(p, max_tokens, ignore_eos=True, **kinds[k % len(kinds)])): k
           for k, p in enumerate(prompts)}
    got = {sid: [] for sid in ids}
    while len(batch):
        for sid, chunk in batch.step():
            got[sid].extend(chunk.tokens)
    for sid, k in ids.items():
        _count(out, "batch", got[sid], alone[k])
    return out


def _count(out: dict[str, Any], key: str, got: list[int], want: list[int]) -> None:
    out[key][1] += 1
    if got == want:
        out[key][0] += 1
    else:
        where = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        out["first_diff"].append(where)


def lossless(device: str, max_tokens: int, dtypes: list[str]) -> list[dict[str, Any]]:
    rows = []
    for dtype in dtypes:
        for arch in ("llama", "qwen2", "qwen3", "smollm2-135m"):
            for invariant in (None, True) if dtype != "float16" else (None,):
                row = {"model": arch, "dtype": dtype, "attention": "row-invariant" if invariant else "default"}
                try:
                    engine = _identity_engine(arch, dtype, device, invariant)
                    tok = engine.tokenizer
                    prompts = (prompts_for(tok, 6) if arch != "smollm2-135m"
                               else [list(range(100 + 37 * k, 120 + 37 * k)) for k in range(4)])
                    row.update(identity(engine, prompts, max_tokens), bit_exact=engine.bit_exact,
                               kernels=engine.runner.kernels)
                except Exception as exc:  # a path that fails off the CPU is a finding: report it, go on
                    row["error"] = "".join(traceback.format_exception_only(exc)).strip()
                    traceback.print_exc()
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def _identity_engine(arch: str, dtype: str, device: str, invariant: bool | None) -> ReferenceEngine:
    if arch == "smollm2-135m":
        tok = tiny_word_tokenizer(SHAPES[arch]["vocab_size"])
        model = shaped_model(arch, DTYPES[dtype], device)
    else:
        tok = tiny_tokenizer()
        model = tiny_model(arch, len(tok), dtype=DTYPES[dtype]).to(device)
    return ReferenceEngine(model, tok, (7, 7, 7), calibrate=False, model_id=arch, invariant_attention=invariant,
                           native_kernels=native(device))


# ------------------------------------------------------------------------------------------ 2. rows
def roofline(device: str) -> dict[str, float]:
    """Matrix-product peak (bf16 and fp32) and read bandwidth of this device, measured."""
    n = 8192 if device.startswith("cuda") else 1024
    out = {}
    for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        a = torch.randn(n, n, dtype=dt, device=device)
        ms = median_ms(lambda: a @ a, device, 5)
        out[f"mm_tflops_{name}"] = round(2 * n**3 / ms / 1e9, 1)
    big = torch.empty(2 * 1024**3 if device.startswith("cuda") else 64 * 1024**2, dtype=torch.uint8, device=device)
    ms = median_ms(lambda: big.view(torch.int64).sum(), device, 5)
    out["read_gb_s"] = round(big.numel() / ms / 1e6, 1)
    return out


def forward_by_rows(shape: str, dtype: str, device: str, repeats: int, max_rows: int, layers: int | None
                    ) -> dict[str, Any]:
    model = shaped_model(shape, DTYPES[dtype], device, layers)
    params = sum(p.numel() for p in model.parameters())
    engine = ReferenceEngine(model, tiny_word_tokenizer(512), (7, 7, 7), calibrate=False, model_id=shape,
                             native_kernels=native(device))
    runner = engine.runner
    seqs = min(64, max_rows)
    slots = [runner.allocate(max_rows + 200) for _ in range(seqs)]
    for s in slots:
        runner.prefill(s, list(range(10, 110)))
    rows, one, many = [], [], []
    r = 1
    while r <= max_rows:
        block = [RowBlock(slots[0], [5] * r, list(range(r)), list(range(r)), causal=True)]
        rows.append(r)
        one.append(round(median_ms(partial(runner.forward, block), device, repeats), 3))
        blocks = [RowBlock(s, [5], [0], [0]) for s in slots[:r]] if r <= seqs else None
        many.append(round(median_ms(partial(runner.forward, blocks), device, repeats), 3) if blocks else None)
        r *= 2
    del engine, runner, model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"shape": shape, "dtype": dtype, "params": params, "layers": layers, "rows": rows,
            "one_sequence_ms": one, "sequences_ms": many}


# ------------------------------------------------------------------------------------------ 3. drafts in a batch
def drafts_in_batch(shape: str, dtype: str, device: str, repeats: int, layers: int | None) -> dict[str, Any]:
    """Median ms of a step of S sequences, D of which verify 9 draft rows (a causal block of 10)."""
    model = shaped_model(shape, DTYPES[dtype], device, layers)
    engine = ReferenceEngine(model, tiny_word_tokenizer(512), (7, 7, 7), calibrate=False, model_id=shape,
                             native_kernels=native(device))
    runner = engine.runner
    slots = [runner.allocate(400) for _ in range(16)]
    for s in slots:
        runner.prefill(s, list(range(10, 310)))
    out: dict[str, Any] = {"shape": shape, "dtype": dtype, "context": 300, "draft_rows": 9, "ms": {}}
    for seqs in (1, 4, 8, 16):
        for drafting in sorted({0, 1, seqs // 2, seqs}):
            blocks = [RowBlock(s, [5] * 10, list(range(10)), [9], causal=True) if i < drafting
                      else RowBlock(s, [5], [0], [0]) for i, s in enumerate(slots[:seqs])]
            ms = median_ms(partial(runner.forward_greedy, blocks), device, repeats)
            out["ms"][f"{seqs}x{drafting}"] = round(ms, 3)
    del engine, runner, model
    return out


#: the host part's modes: ``make_request`` keyword arguments (a K/V move after a step happens only where the accepted
#: rows are not the step's first ones: Lookahead's window rows come before its verification rows; a chain drafter's
#: accepted rows are always a prefix)
HOST_MODES: dict[str, dict[str, Any]] = {
    "ar": {"lookahead": (1, 1, 0)},
    "2,4,2": {"lookahead": (2, 4, 2)},
    "auto": {"lookahead": "auto"},
    "ngram": DRAFTERS["ngram"],
}


def host_split(dtype: str, device: str, layers: int | None, sizes: list[int], max_tokens: int = 40
               ) -> dict[str, Any]:
    """Per decode step of S sequences (``sizes``), the synchronised forward and the step's time outside it
    (planning, verifying, the n-gram pools, the K/V moves), each of :data:`HOST_MODES`, twice each, interleaved;
    a random SmolLM2-135M-shaped model (its looping text accepts drafts; the costs are real), calibrated at load
    (``auto``'s cost model)."""
    model = shaped_model("smollm2-135m", DTYPES[dtype], device, layers)
    engine = ReferenceEngine(model, tiny_word_tokenizer(SHAPES["smollm2-135m"]["vocab_size"]), (2, 4, 2),
                             calibrate=True, model_id="smollm2-135m", native_kernels=native(device))
    runner = engine.runner
    forward, spent = runner.forward_greedy, []

    def timed(*args: Any, **kwargs: Any) -> Any:
        sync(device)
        t0 = time.perf_counter()
        out = forward(*args, **kwargs)
        sync(device)
        spent.append(time.perf_counter() - t0)
        return out

    runner.forward_greedy = timed  # this engine's runner only: the script's own instrument
    prompts = [list(range(1000 + 97 * k, 1200 + 97 * k)) for k in range(max(sizes))]
    out: dict[str, Any] = {"dtype": dtype, "ms": {}}
    for seqs in sizes:
        for rep in range(2):
            for name, kw in HOST_MODES.items():
                batch = engine.new_batch(max_batch_size=seqs)
                for p in prompts[:seqs]:
                    batch.add(engine.make_request(p, max_tokens, ignore_eos=True, **kw))
                steps = []
                while len(batch):
                    spent.clear()
                    t0 = time.perf_counter()
                    batch.step()
                    wall = time.perf_counter() - t0
                    if not batch.last.prefill_tokens and spent and batch.last.running == seqs:
                        steps.append((1000 * (wall - sum(spent)), 1000 * sum(spent), batch.last.rows))
                out["ms"][f"{name} S={seqs} #{rep + 1}"] = {
                    "host": round(statistics.median(s[0] for s in steps), 3),
                    "forward": round(statistics.median(s[1] for s in steps), 3),
                    "rows": statistics.median(s[2] for s in steps), "steps": len(steps)}
    del engine, runner, model
    return out


# ------------------------------------------------------------------------------------------ 4. batching
def batching(device: str, sizes: list[int], max_tokens: int, repeats: int, layers: int | None,
             invariant: bool | None = None) -> dict[str, Any]:
    model = shaped_model("qwen3-8b", torch.bfloat16, device, layers)
    tok = tiny_word_tokenizer(SHAPES["qwen3-8b"]["vocab_size"])
    engine = ReferenceEngine(model, tok, (4, 2, 4), calibrate=True, model_id="qwen3-8b-shaped-random",
                             native_kernels=native(device), invariant_attention=invariant)
    prompts = [list(range(1000 + 97 * k, 1064 + 97 * k)) for k in range(max(sizes))]
    alone = {k: engine.greedy(p, max_tokens, ignore_eos=True).tokens for k, p in enumerate(prompts)}
    modes = {"ar": LookaheadSpec(1, 1, 0), "(4,2,4)": LookaheadSpec(4, 2, 4), "auto": "auto"}
    tps: dict[str, list[float]] = {}
    same = {m: [0, 0] for m in modes}
    steps: dict[str, list[float]] = {}
    for _ in range(repeats):
        for size in sizes:
            for name, mode in modes.items():
                rate, ok, per_step = _run_batch(engine, prompts[:size], alone, mode, max_tokens, device)
                tps.setdefault(f"{name}@{size}", []).append(rate)
                steps.setdefault(f"{name}@{size}", []).append(per_step)
                same[name][0] += ok
                same[name][1] += size
    return {"tokens_per_s": {k: [round(x, 1) for x in v] for k, v in tps.items()},
            "tokens_per_step_per_sequence": {k: round(statistics.median(v), 2) for k, v in steps.items()},
            "identical_to_alone": same, "step_cost_ms": engine.stats["step_cost_ms"]}


def _run_batch(engine: ReferenceEngine, prompts: list[list[int]], alone: dict[int, list[int]], mode: Any,
               max_tokens: int, device: str) -> tuple[float, int, float]:
    batch = engine.new_batch(max_batch_size=len(prompts))
    policy = "auto" if mode == "auto" else None
    ids = {batch.add(GenerationRequest(prompt_ids=tuple(p), max_tokens=max_tokens, ignore_eos=True, policy=policy,
                                       lookahead=None if policy else mode)): k for k, p in enumerate(prompts)}
    got: dict[int, list[int]] = {sid: [] for sid in ids}
    sync(device)
    t0, n_steps = time.perf_counter(), 0
    while len(batch):
        n_steps += 1
        for sid, chunk in batch.step():
            got[sid].extend(chunk.tokens)
    sync(device)
    elapsed = time.perf_counter() - t0
    ok = sum(got[sid] == alone[k] for sid, k in ids.items())
    return sum(map(len, got.values())) / elapsed, ok, max_tokens / max(1, n_steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--parts", default="lossless,rows,batching")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10, help="forwards per timing (median)")
    ap.add_argument("--max-rows", type=int, default=256)
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers for the shaped models (a dry run)")
    ap.add_argument("--batch-repeats", type=int, default=2)
    ap.add_argument("--invariant", action="store_true", help="batching with the row-invariant torch attention")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="the lossless and host parts' dtypes (host: no float16)")
    ap.add_argument("--host-sequences", default="1,4,8,16", help="the host part's batch sizes")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    if unknown := [d for d in dtypes if d not in DTYPES]:
        ap.error(f"--dtypes: {', '.join(unknown)} not one of {', '.join(DTYPES)}")
    dev = args.device
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu",
                              "torch": torch.__version__, "tf32": torch.backends.cuda.matmul.allow_tf32}
    parts = args.parts.split(",")
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("roofline", lambda: roofline(dev)),
        ("rows", lambda: [forward_by_rows(s, d, dev, args.repeats, args.max_rows, args.layers)
                          for s, d in (("smollm2-135m", "float32"), ("smollm2-135m", "bfloat16"),
                                       ("qwen3-8b", "bfloat16"))]),
        ("lossless", lambda: lossless(dev, args.max_tokens, dtypes)),
        ("drafts", lambda: [drafts_in_batch("smollm2-135m", d, dev, args.repeats, args.layers)
                            for d in ("float32", "bfloat16")]),
        ("host", lambda: [host_split(d, dev, args.layers, [int(x) for x in args.host_sequences.split(",")])
                          for d in dtypes if d != "float16"]),
        ("batching", lambda: batching(dev, [int(x) for x in args.batches.split(",")], args.max_tokens,
                                      args.batch_repeats, args.layers, True if args.invariant else None)),
    ]
    for name, fn in steps:
        if name != "roofline" and name not in parts:
            continue
        t0 = time.perf_counter()
        try:
            report[name] = fn()
        except Exception as exc:
            traceback.print_exc()
            report[name] = {"error": "".join(traceback.format_exception_only(exc)).strip()}
        print(f"== {name} ({time.perf_counter() - t0:.0f} s): {json.dumps(report[name])}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How much does TensorRT-LLM's column-0 keying quirk change tokens per step? (oracle study, no model)

TensorRT-LLM harvests column 0's window n-gram under y[g] (the new token) where the authors' lade
uses g. Both emit the same text; only the pool differs, hence how many drafts get accepted. This
script runs :func:`trtlade.lookahead.simulate.simulate` with weightless oracles over prompt suites
and prints mean tokens per step for both keyings (and, with ``--guess-sets``, for TensorRT-LLM's
min(W, G) candidates vs the full G).

Oracles: ``code`` / ``prose`` are greedy order-4 word n-gram models of Python's own standard library
source and of its bundled documentation (``pydoc_data.topics``), prompted with slices of the same
text; ``periodic`` repeats a 37-token cycle; ``random`` hashes the last two tokens.

    .venv/bin/python benchmarks/keying_study.py                       # default specs, 24 prompts each
    .venv/bin/python benchmarks/keying_study.py --specs 4,3,4 7,7,7 --prompts 8 --json reports/keying.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trtlade.lookahead.oracles import NgramOracle, PeriodicOracle, RandomOracle  # noqa: E402
from trtlade.lookahead.simulate import simulate  # noqa: E402
from trtlade.spec import LookaheadSpec, SpecError  # noqa: E402

DEFAULT_SPECS = ["2,2,1", "4,2,4", "4,3,4", "5,3,5", "7,4,7", "7,7,7", "15,5,15"]
TOKEN_RE = re.compile(r"\w+|[^\w\s]|\n")


@dataclass
class Suite:
    name: str
    oracle: Callable[[Sequence[int]], int]
    prompts: list[list[int]]


def tokenize(text: str, vocab: dict[str, int]) -> list[int]:
    """Word-level ids (words, punctuation and newlines), growing ``vocab``."""
    return [vocab.setdefault(tok, len(vocab)) for tok in TOKEN_RE.findall(text)]


def corpus_suite(name: str, text: str, num_prompts: int, prompt_len: int, seed: int) -> Suite:
    ids = tokenize(text, {})
    rng = random.Random(seed)
    starts = sorted(rng.randrange(0, len(ids) - prompt_len) for _ in range(num_prompts))
    return Suite(name, NgramOracle(ids, order=4, fallback_vocab=max(ids) + 1),
                 [ids[s:s + prompt_len] for s in starts])


def code_text() -> str:
    import argparse as m1
    import dataclasses as m2
    import json.decoder as m3
    import pathlib as m4
    import textwrap as m5
    return "\n".join(inspect.getsource(m) for m in (m1, m2, m3, m4, m5))


def prose_text() -> str:
    import pydoc_data.topics as topics
    return "\n".join(topics.topics[k] for k in sorted(topics.topics))


def build_suites(num_prompts: int, prompt_len: int, seed: int) -> list[Suite]:
    rng = random.Random(seed)
    cycle = rng.sample(range(1000, 2000), 37)
    return [
        corpus_suite("code", code_text(), num_prompts, prompt_len, seed),
        corpus_suite("prose", prose_text(), num_prompts, prompt_len, seed + 1),
        Suite("periodic", PeriodicOracle(cycle),
              [[rng.randrange(3000) for _ in range(prompt_len // 2)] + cycle[: prompt_len // 2]
               for _ in range(num_prompts)]),
        Suite("random", RandomOracle(seed=seed, vocab=32000),
              [[rng.randrange(32000) for _ in range(prompt_len)] for _ in range(num_prompts)]),
    ]


def tokens_per_step(suite: Suite, spec: LookaheadSpec, max_tokens: int, **options) -> tuple[float, int, int]:
    """Mean tokens per decoding step over the suite (total tokens / total steps), tokens, steps."""
    tokens = steps = 0
    for prompt in suite.prompts:
        result = simulate(suite.oracle, prompt, spec, max_tokens, **options)
        tokens += sum(result.tokens_per_step_list)
        steps += result.steps
    return (tokens / steps if steps else 0.0), tokens, steps


def run(specs: list[LookaheadSpec], suites: list[Suite], max_tokens: int, guess_sets: bool) -> list[dict]:
    rows = []
    for suite in suites:
        for spec in specs:
            trt, _, steps_trt = tokens_per_step(suite, spec, max_tokens)
            lade, _, steps_lade = tokens_per_step(suite, spec, max_tokens, corrected_keying=True)
            row = {"suite": suite.name, "spec": str(spec), "trtllm_keying": round(trt, 4),
                   "corrected_keying": round(lade, 4),
                   "change_pct": round(100 * (lade - trt) / trt, 2) if trt else 0.0,
                   "steps_trtllm": steps_trt, "steps_corrected": steps_lade}
            if guess_sets:
                full, _, _ = tokens_per_step(suite, spec, max_tokens, full_guess_set=True)
                row["full_guess_set"] = round(full, 4)
            rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.rjust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).rjust(widths[k]) for k in keys))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="+", default=DEFAULT_SPECS, help="(W,N,G) specs, e.g. 4,3,4 7,7,7")
    parser.add_argument("--prompts", type=int, default=24, help="prompts per suite (default 24)")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt length in tokens (default 64)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens generated per prompt (default 128)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guess-sets", action="store_true", help="also run with G candidates instead of min(W,G)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON to this file")
    args = parser.parse_args(argv)
    try:
        specs = [LookaheadSpec.parse(s) for s in args.specs]
    except SpecError as exc:
        parser.error(f"--specs: {exc}")
    if args.prompts < 1 or args.prompt_len < 2 or args.max_tokens < 1:
        parser.error("--prompts >= 1, --prompt-len >= 2 and --max-tokens >= 1 are required")
    started = time.perf_counter()
    rows = run(specs, build_suites(args.prompts, args.prompt_len, args.seed), args.max_tokens, args.guess_sets)
    print_table(rows)
    print(f"\n{args.prompts} prompts x {args.max_tokens} tokens per suite; tokens per step excludes the prefill "
          f"token; {time.perf_counter() - started:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

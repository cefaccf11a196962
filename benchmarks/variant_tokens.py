#!/usr/bin/env python3
"""Do the native library's CPU variants give the same tokens? The engine loaded once per variant this CPU
runs (``TRTLADE_NATIVE_ISA``), greedy and a lookahead spec on suite prompts, per dtype; every variant's
tokens compared with the best variant's, token for token. On an AVX-512 host this measures the AVX2 and
portable variants against AVX-512 (and, in bf16, VDPBF16PS against its emulation). The portable variant on
x86-64 calls libm's fmaf per multiply-add (about 0.4 s a token for SmolLM2): keep it short. A variant named
with ``:chain`` runs with the AMX tiles off (``TRTLADE_AMX=0``): on a CPU with AMX-BF16, ``--variants
avx512bf16,avx512bf16:chain --dtypes bfloat16`` measures how often the tiles give other tokens than the chain.

    .venv/bin/python benchmarks/variant_tokens.py --prompts 2 --max-tokens 16   # float32 and bfloat16
    .venv/bin/python benchmarks/variant_tokens.py --variants avx512bf16,avx2 --max-tokens 64 --json reports/v.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from trtlade.bench.meta import machine_info
from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.native import executable_variants, kernels
from trtlade.reference.native.cpu import ENV
from trtlade.reference.prompt_suite import load_suite

PROMPTS = ("code-prime", "chat-weekend", "summary-bees", "list-planets")
_DEFAULT_AMX: dict[str, int] = {}  # each variant's AMX choice at load, restored between runs


def tokens(variant: str, dtype: str, max_tokens: int, prompts: int) -> dict[str, list[list[int]]]:
    """Greedy and (2,4,2) tokens of every prompt, the engine loaded on ``variant`` (``name:chain``: AMX off)."""
    name, _, how = variant.partition(":")
    table = kernels(name)
    default = _DEFAULT_AMX.setdefault(name, table.linear_bf16_amx(-1))
    table.linear_bf16_amx(0 if how == "chain" else default)
    os.environ[ENV] = name
    try:
        engine = ReferenceEngine.load(dtype=dtype, spec=(2, 4, 2))
    finally:
        os.environ.pop(ENV, None)
    assert engine.stats["kernels"].startswith(f"native {name}"), engine.stats["kernels"]
    suite = {p.id: p for p in load_suite("suite").prompts}
    ids = [suite[pid].encode(engine.tokenizer) for pid in PROMPTS[:prompts]]
    return {str(spec): [engine.generate(p, max_tokens=max_tokens, lookahead=spec, ignore_eos=True).tokens
                        for p in ids] for spec in [(1, 1, 0), (2, 4, 2)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(executable_variants()), help="the first is the reference")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many of {', '.join(PROMPTS)}")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    result = {"host": machine_info()["cpu"], "runs": list(executable_variants()), "max_tokens": args.max_tokens,
              "prompts": list(PROMPTS[:args.prompts]), "compared": []}
    for dtype in args.dtypes.split(","):
        got = {v: tokens(v, dtype, args.max_tokens, args.prompts) for v in variants}
        ref = got[variants[0]]
        for v in variants[1:]:
            for spec, outs in got[v].items():
                same = sum(a == b for a, b in zip(outs, ref[spec]))
                result["compared"].append({"dtype": dtype, "variant": v, "reference": variants[0], "spec": spec,
                                           "identical_prompts": same, "prompts": len(outs)})
                print(f"{dtype} {spec}: {v} vs {variants[0]}: {same}/{len(outs)} prompts token-identical")
        for v in variants:
            print(f"{dtype}: (2,4,2) equals greedy on {v}: {got[v]['(1, 1, 0)'] == got[v]['(2, 4, 2)']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

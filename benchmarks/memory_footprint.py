"""How much the process grows when the engine loads the embedded model, against the weight bytes the
steps read and the KV cache the engine preallocates: one fresh process per (dtype, kernels), RSS from
/proc/self/status before and after ``ReferenceEngine.load`` (and the process's peak, VmHWM, over both
loads). The code the load imports (transformers'
tokenizer and model modules, some 100 MiB of Python) is not the engine's memory: a first engine is
loaded and dropped before the measurement, so that the modules are imported, and the C heap is
trimmed (``malloc_trim``) before each reading, so that freed memory does not count.

    .venv/bin/python benchmarks/memory_footprint.py --json reports/memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import gc, json, sys
import torch, transformers  # imported before the measurement: not the engine's memory
from trtlade.reference.engine import ReferenceEngine
from trtlade.reference.floor import weight_bytes

from trtlade.reference.native.pages import return_freed_memory

def rss(key="VmRSS:"):
    gc.collect()
    return_freed_memory()
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0

dtype, native = sys.argv[1], sys.argv[2] == "native"
start = rss()
first = ReferenceEngine.load(dtype=dtype, native_kernels=None if native else False)
cold = rss() - start  # what a user's process grows by: the engine and the code its load imports
del first
before = rss()
engine = ReferenceEngine.load(dtype=dtype, native_kernels=None if native else False)
after = rss()
kv = sum(t.numel() * t.element_size() for layer in engine.runner.cache.layers
         for t in (layer.keys, layer.values) if t is not None)
print(json.dumps({"dtype": dtype, "kernels": sys.argv[2], "growth_bytes": after - before, "cold_growth_bytes": cold,
                  "weight_bytes": weight_bytes(engine.runner), "kv_bytes": kv,
                  "linear_kernel": engine.stats["linear_kernel"]["kernel"], "peak_bytes": rss("VmHWM:"),
                  "weight_pages": engine.stats["weight_pages"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--kernels", default="native,onednn")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from trtlade.bench.meta import machine_info
    from trtlade.reference.native.pages import pages_line

    host = machine_info()["cpu"]
    print(f"host: {host}", flush=True)
    rows = []
    for dtype in args.dtypes.split(","):
        for kernels in args.kernels.split(","):
            out = subprocess.run([sys.executable, "-c", CHILD, dtype, kernels], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            row = {**json.loads(out), "host": host}
            mib = 1 << 20
            row["growth_over_weights_plus_kv"] = round(row["growth_bytes"] / (row["weight_bytes"] + row["kv_bytes"]), 3)
            rows.append(row)
            print(f"{dtype:>9} {kernels:>7} ({row['linear_kernel']}): grows {row['growth_bytes'] / mib:.0f} MiB for "
                  f"{row['weight_bytes'] / mib:.0f} MiB of weights + {row['kv_bytes'] / mib:.1f} MiB of KV cache = "
                  f"{row['growth_over_weights_plus_kv']:.2f}x (a cold process: {row['cold_growth_bytes'] / mib:.0f} "
                  f"MiB, with the code the load imports; its peak {row['peak_bytes'] / mib:.0f} MiB); weights: "
                  f"{pages_line(row['weight_pages'])}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

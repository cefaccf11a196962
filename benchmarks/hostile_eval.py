#!/usr/bin/env python3
"""The main job on a hostile machine: the same interleaved, repeated bench while something else takes
CPU, to see whether `auto` (and the other modes) still hold against plain decoding.

Two kinds of hostility, both bounded (they stop with the bench, and after --max-seconds at most):

* ``busy`` (default): one competing CPU-bound process (a Python busy loop) runs for the whole bench, so
  the server's two threads share the two cores with it, as on a shared host with CPU steal;
* ``one-core``: the server is pinned to one core (``taskset -c 0``, via --launch's environment), as on a
  smaller VM.

It runs ``trtlade bench --launch CONFIG`` with the config's bench section (modes, repeats, levels) unless
flags override them, and labels the run ``hostile-<kind>``. The report's tables carry the verdicts
(higher, lower, within noise) as any bench with repeats does.

    .venv/bin/python benchmarks/hostile_eval.py configs/smollm2-cpu.yml                    # busy neighbour
    .venv/bin/python benchmarks/hostile_eval.py configs/smollm2-cpu.yml --kind one-core -c 1,4
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BUSY_LOOP = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--kind", choices=["busy", "one-core"], default="busy")
    ap.add_argument("-c", "--concurrency", help="levels, e.g. 1,2,4,8 (default: the config's)")
    ap.add_argument("--repeats", type=int, help="repeats (default: the config's)")
    ap.add_argument("--modes", help="modes (default: the config's)")
    ap.add_argument("--max-seconds", type=int, default=3600, help="the competing process stops by then anyway")
    args = ap.parse_args()

    trtlade = Path(sys.executable).with_name("trtlade")
    cmd = [str(trtlade), "bench", "--launch", str(args.config), "--label", f"hostile-{args.kind}",
           "--metadata", f"hostile={args.kind}"]
    if args.concurrency:
        cmd += ["-c", args.concurrency]
    if args.repeats:
        cmd += ["--repeats", str(args.repeats)]
    if args.modes:
        cmd += ["--modes", args.modes]

    env = dict(os.environ)
    neighbour = None
    if args.kind == "busy":
        neighbour = subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(seconds=args.max_seconds)])
        print(f"competing CPU-bound process: pid {neighbour.pid}", flush=True)
    else:
        taskset = shutil.which("taskset")
        if taskset is None:
            print("error: --kind one-core needs taskset (util-linux)", file=sys.stderr)
            return 2
        cmd = [taskset, "-c", "0", *cmd]  # the bench and the server it launches share core 0
        print("bench and server pinned to core 0", flush=True)
    started = time.time()
    try:
        return subprocess.call(cmd, env=env)
    finally:
        if neighbour is not None:
            neighbour.terminate()
            neighbour.wait(10)
        print(f"hostile run ({args.kind}) took {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())

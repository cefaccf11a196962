#!/usr/bin/env python3
"""A mixed soak of `trtlade serve` (the embedded model unless --config says otherwise): does the server's
resident memory stay flat after warm-up, within its KV and prefix-cache budgets?

Launches ``trtlade serve --config CONFIG`` (``launched_server``, as ``trtlade bench --launch`` does), then
runs ``--concurrency`` clients for ``--minutes``, each cycling through: greedy chat, seeded sampling, a
stream aborted after 2 chunks, ``n=2``, ``logprobs`` with ``top_logprobs``, an explicit ``lookahead``
spec, a completions prompt list, the ``multiturn`` dataset's turns (a shared system prompt: the prefix
cache fills and evicts). Every ``--every`` seconds it samples the server process's RSS (VmRSS of
/proc/PID/status, children included) and /metrics' ``trtlade_prefix_cache_bytes``. Prints the samples,
the RSS at the end of warm-up (``--warmup`` minutes) and the largest rise after it, the cache's bytes
against its budget, and the requests by outcome.

    .venv/bin/python benchmarks/memory_soak.py --minutes 15             # configs/smollm2-cpu.yml
    .venv/bin/python benchmarks/memory_soak.py --minutes 2 --warmup 0.5 # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MiB."""
    total, seen, todo = 0, set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
        todo += [int(c) for c in children]
    return total / 1024


def rss_after_warmup(samples: list[tuple], warmup_min: float) -> str:
    """How resident memory moved after the warm-up, from ``(seconds, RSS MiB, ...)`` samples ("" if no sample
    is that late).

    >>> rss_after_warmup([(60, 900.0), (200, 1000.0), (260, 1002.5), (320, 1001.0)], 3)
    'RSS after warm-up (3 min): 1000.0 MiB at 200 s, largest 1002.5 (+2.5), last 1001.0 (+1.0)'
    """
    warm = [s for s in samples if s[0] >= 60 * warmup_min]
    if not warm:
        return ""
    base, peak = warm[0][1], max(s[1] for s in warm)
    return (f"RSS after warm-up ({warmup_min:g} min): {base:.1f} MiB at {warm[0][0]:.0f} s, largest {peak:.1f} "
            f"(+{peak - base:.1f}), last {warm[-1][1]:.1f} (+{warm[-1][1] - base:.1f})")


def bodies(model: str) -> list[tuple[str, dict, bool]]:
    """(path, body, abort after 2 chunks) of one client's cycle."""
    from trtlade.bench.datasets import load_dataset

    turns = [p.chat_messages() for p in load_dataset("multiturn").prompts]
    chat = "/v1/chat/completions"
    out: list[tuple[str, dict, bool]] = [
        (chat, {"messages": [{"role": "user", "content": "List three uses of a paperclip."}], "max_tokens": 40}, False),
        (chat, {"messages": [{"role": "user", "content": "Write a haiku about rain."}], "max_tokens": 40,
                "temperature": 0.8, "top_p": 0.95, "seed": 7}, False),
        (chat, {"messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
                "max_tokens": 200, "stream": True}, True),
        (chat, {"messages": [{"role": "user", "content": "Name a prime number."}], "max_tokens": 12, "n": 2,
                "temperature": 0.7, "seed": 3}, False),
        (chat, {"messages": [{"role": "user", "content": "Is water wet?"}], "max_tokens": 12, "logprobs": True,
                "top_logprobs": 3}, False),
        (chat, {"messages": [{"role": "user", "content": "Count from one to ten."}], "max_tokens": 30,
                "lookahead": [2, 2, 1]}, False),
        ("/v1/completions", {"prompt": ["The capital of France is", "def add(a, b):"], "max_tokens": 16}, False),
    ]
    out += [(chat, {"messages": m, "max_tokens": 24}, False) for m in turns]
    return [(path, {"model": model, **body}, abort) for path, body, abort in out]


async def client(http: httpx.AsyncClient, url: str, cycle: list, offset: int, deadline: float,
                 outcomes: collections.Counter) -> None:
    for path, body, abort in itertools.islice(itertools.cycle(cycle), offset, None):
        if time.monotonic() >= deadline:
            return
        try:
            if body.get("stream"):
                async with http.stream("POST", url + path, json=body) as reply:
                    chunks = 0
                    async for line in reply.aiter_lines():
                        chunks += line.startswith("data:")
                        if abort and chunks >= 2:
                            break
                    outcomes["aborted stream" if abort else f"HTTP {reply.status_code}"] += 1
            else:
                reply = await http.post(url + path, json=body)
                outcomes[f"HTTP {reply.status_code}"] += 1
        except httpx.HTTPError as exc:
            outcomes[type(exc).__name__] += 1


def cache_bytes(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("trtlade_prefix_cache_bytes "):
            return float(line.split()[1])
    return float("nan")


async def soak(url: str, pid: int, args: argparse.Namespace) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        model = (await http.get(url + "/v1/models")).json()["data"][0]["id"]
        cycle = bodies(model)
        outcomes: collections.Counter = collections.Counter()
        start = time.monotonic()
        deadline = start + 60 * args.minutes
        tasks = [asyncio.create_task(client(http, url, cycle, i * 3, deadline, outcomes))
                 for i in range(args.concurrency)]
        samples: list[tuple[float, float, float]] = []
        while not all(t.done() for t in tasks):
            await asyncio.sleep(args.every)
            metrics = (await http.get(url + "/metrics")).text
            samples.append((time.monotonic() - start, rss_mb(pid), cache_bytes(metrics)))
            t, rss, cached = samples[-1]
            print(f"{t:7.0f} s  RSS {rss:7.1f} MiB  prefix cache {cached / 2**20:6.1f} MiB  "
                  f"requests {sum(outcomes.values())}", flush=True)
        await asyncio.gather(*tasks)
    summary = rss_after_warmup(samples, args.warmup)
    if not summary:
        print("no samples after warm-up: run longer")
        return
    print(f"{summary}; prefix cache at most {max(s[2] for s in samples) / 2**20:.1f} MiB")
    print(f"requests by outcome over {args.minutes:g} min at concurrency {args.concurrency}: {dict(outcomes)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-cpu.yml")
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=3.0, help="minutes before RSS must stay flat")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    args = ap.parse_args()

    from trtlade.bench.launch import launched_server

    log = Path("/tmp") / f"memory-soak-{int(time.time())}.log"
    print(f"serving {args.config} (log {log}); {args.concurrency} clients for {args.minutes:g} min")
    with launched_server(args.config, log_path=log) as url:
        pid = server_pid(url)
        asyncio.run(soak(url, pid, args))


def server_pid(url: str) -> int:
    """The pid of the launched ``trtlade serve ... --port PORT`` (from /proc: Linux)."""
    port = url.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"--port" in argv and port.encode() in argv:
            return int(proc.name)
    raise SystemExit(f"no trtlade serve process with --port {port} found in /proc")


if __name__ == "__main__":
    main()

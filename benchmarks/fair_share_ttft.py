#!/usr/bin/env python3
"""Fair share under a flood: another identity's time to first token while one API key floods the server,
against the same requests on the idle server, interleaved round by round.

Launches ``trtlade serve`` on ``--config`` (default the embedded model's) with a keys file of four identities
(``alice``, ``bob``, ``carol`` and ``flood``). Each round runs two phases:

* ``idle``: alice, bob and carol each send ``--requests`` short streamed chat requests (greedy, 8 tokens),
  one after the other, with nothing else on the server;
* ``flood``: the same requests while ``--flooders`` clients of the identity ``flood`` send, without pause,
  sampled completions of a long prompt with 16 stop strings of 1,024 characters, ``n: 8`` and ``n: 64``
  by turns (what one client could send to starve the others); once the victims are done the flooders finish
  the request they are on and stop, so the next idle phase starts on an idle server.

Printed: the victims' TTFT (median, p99, range) per phase, the flood/idle ratio of the p99 and of the median,
and every phase's outcomes by identity and status (the victims must all get 200; only ``flood`` may get 429).
``--share off`` lifts the per-identity caps to the server's limits (what the queue was before fair share), for
a comparison run.

    .venv/bin/python benchmarks/fair_share_ttft.py --rounds 4            # the documented run
    .venv/bin/python benchmarks/fair_share_ttft.py --rounds 2 --share off
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
VICTIMS = ("alice", "bob", "carol")
QUESTIONS = ("Name a colour.", "What is two plus two?", "Say hello in French.", "Name a fruit.",
             "What day comes after Monday?", "Name a planet.")
LONG = ("The quarterly report lists every shipment, its weight, its origin and its destination, and each "
        "line is checked against the warehouse ledger before it is signed. ") * 12


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile by the nearest-rank method.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.99), percentile([1.0, 2.0, 3.0, 4.0], 0.5)
    (4.0, 2.0)
    """
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))]


async def ttft(http: httpx.AsyncClient, url: str, key: str, model: str, question: str) -> tuple[int, float]:
    """(status, seconds to the first content chunk) of one streamed greedy chat request."""
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 8,
            "stream": True, "temperature": 0}
    start = time.perf_counter()
    async with http.stream("POST", url + "/v1/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {key}"}) as reply:
        if reply.status_code != 200:
            await reply.aread()
            return reply.status_code, float("nan")
        first = float("nan")
        async for line in reply.aiter_lines():
            if first != first and line.startswith("data:") and '"content"' in line:
                chunk = json.loads(line[5:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    first = time.perf_counter() - start
        return 200, first


async def flooder(http: httpx.AsyncClient, url: str, key: str, model: str, stop: asyncio.Event,
                  outcomes: collections.Counter, index: int) -> None:
    stops = [f"{chr(65 + i)}{'~' * 1023}" for i in range(16)]
    turn = index
    while not stop.is_set():
        n = 64 if turn % 2 else 8
        turn += 1
        body = {"model": model, "prompt": LONG + f" Summary {turn}:", "max_tokens": 48, "n": n,
                "temperature": 0.9, "seed": turn, "stop": stops}
        try:
            reply = await http.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            outcomes[f"flood HTTP {reply.status_code}"] += 1
            if reply.status_code == 429:
                await asyncio.sleep(0.05)
        except httpx.HTTPError as exc:
            outcomes[f"flood {type(exc).__name__}"] += 1


async def victims(http: httpx.AsyncClient, url: str, keys: dict[str, str], model: str, requests: int,
                  outcomes: collections.Counter) -> list[float]:
    async def one(who: str) -> list[float]:
        times = []
        for i in range(requests):
            status, seconds = await ttft(http, url, keys[who], model, QUESTIONS[i % len(QUESTIONS)])
            outcomes[f"{who} HTTP {status}"] += 1
            if status == 200:
                times.append(seconds)
        return times

    return [t for part in await asyncio.gather(*(one(who) for who in VICTIMS)) for t in part]


async def run(url: str, keys: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"idle": [], "flood": []}
    outcomes: dict[str, collections.Counter] = {"idle": collections.Counter(), "flood": collections.Counter()}
    async with httpx.AsyncClient(timeout=600) as http:
        model = (await http.get(url + "/v1/models", headers={"Authorization": f"Bearer {keys['alice']}"})
                 ).json()["data"][0]["id"]
        await victims(http, url, keys, model, 1, collections.Counter())  # warm-up
        for rnd in range(args.rounds):
            for phase in (("idle", "flood") if rnd % 2 == 0 else ("flood", "idle")):
                stop = asyncio.Event()
                flood = ([asyncio.create_task(flooder(http, url, keys["flood"], model, stop, outcomes[phase], i))
                          for i in range(args.flooders)] if phase == "flood" else [])
                if flood:
                    await asyncio.sleep(args.settle)  # the flood fills its share of the queue and the batch
                got = await victims(http, url, keys, model, args.requests, outcomes[phase])
                stop.set()
                await asyncio.gather(*flood)
                times[phase] += got
                print(f"round {rnd + 1} {phase:5s}: " + (f"TTFT median {statistics.median(got) * 1000:7.1f} ms, "
                      f"max {max(got) * 1000:7.1f} ms over {len(got)}" if got else "no victim request answered")
                      + f" of {len(VICTIMS) * args.requests}", flush=True)
    for phase in ("idle", "flood"):
        print(f"{phase} outcomes: {dict(sorted(outcomes[phase].items()))}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-cpu.yml")
    ap.add_argument("--rounds", type=int, default=4, help="idle/flood pairs, the order alternating")
    ap.add_argument("--requests", type=int, default=4, help="requests per victim identity and phase")
    ap.add_argument("--flooders", type=int, default=4, help="concurrent clients of the flooding identity")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds of flood before the victims start")
    ap.add_argument("--share", choices=("on", "off"), default="on",
                    help="off: per-identity caps lifted to the server's limits (the comparison)")
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trtlade.bench.launch import launched_server
    from trtlade.bench.meta import machine_info

    folder = Path(tempfile.mkdtemp(prefix="fair-share-"))
    keys = {who: os.urandom(16).hex() for who in (*VICTIMS, "flood")}
    keys_file = folder / "keys.txt"
    keys_file.write_text("".join(f"{who} {key}{' admin' if who == 'alice' else ''}\n" for who, key in keys.items()))
    keys_file.chmod(0o600)
    config = yaml.safe_load(args.config.read_text())
    serve = config.setdefault("serve", {})
    serve.update({"api_keys_file": str(keys_file)})
    if args.share == "off":
        batch = (config.get("build") or {}).get("max_batch_size", 8)
        serve.update({"max_queue_per_identity": serve.get("max_queue", 64), "max_running_per_identity": batch})
    config_file = folder / "trtlade.yml"
    config_file.write_text(yaml.safe_dump(config))
    log = folder / "server.log"
    print(f"{args.config}: 3 victim identities + 1 flooding ({args.flooders} clients), fair share {args.share}, "
          f"{args.rounds} rounds x {args.requests} requests per victim and phase; log {log}")
    print(f"host: {machine_info()}")
    os.environ["TRTLADE_API_KEY"] = ""
    with launched_server(config_file, log_path=log, headers={"Authorization": f"Bearer {keys['alice']}"}) as url:
        times = asyncio.run(run(url, keys, args))
    idle, flood = times["idle"], times["flood"]
    if not idle or not flood:
        print("no TTFT to compare: a phase had no victim request answered (see the outcomes)")
        return
    for name, got in (("idle", idle), ("flood", flood)):
        print(f"{name:5s}: TTFT median {statistics.median(got) * 1000:.1f} ms, "
              f"p99 {percentile(got, 0.99) * 1000:.1f} ms, range {min(got) * 1000:.1f}-{max(got) * 1000:.1f} ms "
              f"over {len(got)} requests")
    print(f"flood / idle: p99 {percentile(flood, 0.99) / percentile(idle, 0.99):.2f}x, "
          f"median {statistics.median(flood) / statistics.median(idle):.2f}x")


if __name__ == "__main__":
    main()

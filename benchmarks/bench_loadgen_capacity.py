"""How many streamed requests per second can `trtlade bench`'s load generator drive?

Starts a zero-latency OpenAI-compatible streaming server in a SEPARATE PROCESS on loopback (a raw
asyncio HTTP/1.1 server: every answer is precomputed bytes, so the server costs as little as
possible), then runs the bench's own closed-loop load generator (trtlade.bench.runner) against it
and prints completed requests per second per concurrency level. The machine is shared: run it a
few times and read the spread (the script repeats each level --repeats times and prints min /
median / max). It also prints requests per CPU-second of the load generator's process, which other
load on the machine disturbs much less than wall-clock rates: it is the rate one free core sustains.

    .venv/bin/python benchmarks/bench_loadgen_capacity.py                     # 16 tokens per answer
    .venv/bin/python benchmarks/bench_loadgen_capacity.py --tokens 50 --chunks 50

Target (issue 5): >= 500 streamed requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_RPS = 500.0


def _sse_body(tokens: int, chunks: int) -> bytes:
    """A chat stream: role chunk, ``chunks`` content chunks carrying ``tokens`` in all, usage, [DONE];
    HTTP/1.1 chunked encoding, one HTTP chunk per event (as streaming servers send it)."""
    events = [{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}],
               "usage": None}]
    per = [tokens // chunks + (1 if i < tokens % chunks else 0) for i in range(chunks)]
    for i, n in enumerate(per):
        events.append({"object": "chat.completion.chunk", "usage": None, "choices": [
            {"index": 0, "delta": {"content": " tok" * n}, "finish_reason": "length" if i == chunks - 1 else None}]})
    events.append({"object": "chat.completion.chunk", "choices": [],
                   "usage": {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": tokens + 7}})
    out = b""
    for data in [json.dumps(e) for e in events] + ["[DONE]"]:
        payload = f"data: {data}\n\n".encode()
        out += f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
    return out + b"0\r\n\r\n"


class _Proto(asyncio.Protocol):
    def __init__(self, stream_response: bytes, models_response: bytes) -> None:
        self.buf = b""
        self.stream_response = stream_response
        self.models_response = models_response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            self.buf = self.buf[head_end + 4 + length:]
            if head.startswith("GET"):
                self.transport.write(self.models_response)  # type: ignore[attr-defined]
            else:
                self.transport.write(self.stream_response)  # type: ignore[attr-defined]


def _serve(sock: socket.socket, tokens: int, chunks: int) -> None:
    stream = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
              + _sse_body(tokens, chunks))
    models = json.dumps({"object": "list", "data": [{"id": "zero", "object": "model"}]}).encode()
    models_resp = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                   + str(len(models)).encode() + b"\r\n\r\n" + models)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Proto(stream, models_resp), sock=sock)
        await server.serve_forever()

    asyncio.run(main())


def _measure(url: str, concurrency: int, num_prompts: int, tokens: int) -> tuple[float, float, int]:
    """(completed requests per wall-clock second, per CPU-second of this process, failed)."""
    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.plan import BenchPlan, Target, make_series, parse_endpoint, parse_modes
    from trtlade.bench.runner import run_plan_sync

    target = Target("zero", url, model="zero")
    prompts = load_dataset("short").sample(num_prompts, 0)
    plan = BenchPlan(make_series([target], parse_modes(["default"])), [concurrency], parse_endpoint("chat"),
                     prompts, prompts[:concurrency], tokens, 0.0, False, 60.0)
    cpu0 = time.process_time()
    outcome = run_plan_sync(plan)
    cpu = time.process_time() - cpu0
    s = outcome.summaries[0]
    return s.request_throughput, (s.completed / cpu if cpu > 0 else float("inf")), s.failed


def main() -> int:
    ap = argparse.ArgumentParser(description="Load-generator capacity against a zero-latency server.")
    ap.add_argument("--tokens", type=int, default=16, help="completion tokens per answer")
    ap.add_argument("--chunks", type=int, default=16, help="content chunks per answer")
    ap.add_argument("--concurrency", default="16,32,64")
    ap.add_argument("--num-prompts", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    proc = mp.get_context("spawn").Process(target=_serve, args=(sock, args.tokens, args.chunks), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    print(f"zero-latency server pid {proc.pid} at {url}; {args.tokens} tokens in {args.chunks} chunks per "
          f"answer; {args.num_prompts} requests per run; {os.cpu_count()} CPUs (shared machine: noisy)")
    best = 0.0
    try:
        for level in [int(x) for x in args.concurrency.split(",")]:
            rates, per_cpu = [], []
            for _ in range(args.repeats):
                rps, rpc, failed = _measure(url, level, args.num_prompts, args.tokens)
                if failed:
                    print(f"  concurrency {level}: {failed} failed requests")
                rates.append(rps)
                per_cpu.append(rpc)
            med = statistics.median(rates)
            best = max(best, med)
            print(f"concurrency {level:>3}: {min(rates):7.0f} / {med:7.0f} / {max(rates):7.0f} "
                  f"streamed req/s (min / median / max of {args.repeats}); "
                  f"{statistics.median(per_cpu):.0f} req per CPU-second of the load generator")
    finally:
        proc.terminate()
        proc.join(5)
    verdict = "meets" if best >= TARGET_RPS else "BELOW"
    print(f"best median: {best:.0f} req/s -> {verdict} the {TARGET_RPS:.0f} req/s target "
          f"(ratio {best / TARGET_RPS:.2f})")
    return 0 if best >= TARGET_RPS else 1


if __name__ == "__main__":
    raise SystemExit(main())

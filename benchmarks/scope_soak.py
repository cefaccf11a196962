#!/usr/bin/env python3
"""A soak of a multi-tenant `trtlade serve`: three API keys, the prefix cache scoped by identity and small
enough to evict all the time. Is every request answered, does no identity ever reuse another's prompt, are
greedy repeats identical whether served from the cache or not, and does memory stay flat?

Launches ``trtlade serve`` on ``--config`` (default the embedded model's) with a keys file of three
identities and ``serve.prefix_cache_mb --cache-mb`` (the default scope with keys: ``identity``), then runs
``--concurrency`` clients for ``--minutes``, client i as identity i mod 3, each cycling through: multi-turn
conversations with a shared system prompt, greedy chat, seeded sampling, ``n=2``, ``logprobs``, a prompt
list, ``cache_salt``, streams aborted before their first token (mid-prefill) and after two chunks
(mid-decode), bad requests (each must be a 4xx naming its field), a per-identity canary (the same greedy
prompt: its answer must never change) and a cross-identity probe (a prompt another identity sent moments
before: ``cached_tokens`` must be 0, while the sender's own repeat may reuse it), and requests with every
drafter mode (NGram with its public pool and without, AUTO, SA, SA with its global pool). Every ``--every``
seconds it samples the server's RSS (VmRSS, children included), /metrics' per-scope bytes and the slots' K/V
buffers (/version's ``live.kv_cache``: they grow by doubling and stay). Prints the
samples and a verdict per check.

The drafters' pools: each identity keeps a long text live in the pools (NGram, and SA with the global pool,
which retains it after it ends) that holds the continuation of a fixed probe prompt; every identity sends
that probe with NGram's public pool and with SA's global pool, under a fresh ``cache_salt`` (its own empty
namespace). Scoped pools give every probe of a drafter the same ``usage.speculation`` (draft tokens and
accepted draft tokens) all soak long; a draft from another identity's text would raise them.

``--flood``: one more identity floods the server (two clients sending, without pause, sampled completions
of a long prompt with 16 stop strings of 1,024 characters, ``n: 64`` and ``n: 8`` by turns): it may get 429,
the other identities never.

    .venv/bin/python benchmarks/scope_soak.py --minutes 30          # the documented run
    .venv/bin/python benchmarks/scope_soak.py --minutes 4 --warmup 1   # a quick look (in under 2 minutes the
                                                                     # cache may evict every own repeat first)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_soak import rss_after_warmup, rss_mb, server_pid  # noqa: E402

IDENTITIES = ("alice", "bob", "carol")
FLOOD = "flood"
PROBE = "Count upward from one: one, two, three, four,"
DRAFTERS = {
    "ngram-public": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3},
    "ngram-private": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3,
                      "is_public_pool": False},
    "auto": {"decoding_type": "AUTO"},
    "sa": {"decoding_type": "SA", "max_draft_len": 4},
    "sa-global": {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True, "global_pool_size": 64},
}
LONG = ("The quarterly report lists every shipment, its weight, its origin and its destination, and each "
        "line is checked against the warehouse ledger before it is signed. ") * 12
SYSTEM = ("You are the support assistant of a parcel company. Answer in one or two sentences, quote order "
          "numbers exactly, and never guess a delivery date. ")


class Checks:
    def __init__(self) -> None:
        self.outcomes: collections.Counter = collections.Counter()
        self.unnamed_4xx: list[str] = []
        self.canary: dict[str, set[str]] = collections.defaultdict(set)
        self.cross_reuse = 0
        #: (prober, owner, cached tokens, prompt tokens) of each cross probe that reused more than its own
        #: earlier prompts explain
        self.cross_hits: list[tuple[str, str, int, int]] = []
        #: cross probes that reused only the start they share with the prober's own earlier prompts (a
        #: probe of "carol private note 1.21: ..." may reuse "carol private note 1." from the prober's own
        #: probe of "carol private note 1.14: ..."), and the most tokens one reused so
        self.cross_own_start = 0
        self.cross_own_most = 0
        #: the completion prompts each identity sent, to bound what its own history explains
        self.texts: dict[str, list[str]] = collections.defaultdict(list)
        self.cross_probes = 0
        self.own_reuse = 0
        self.own_probes = 0
        self.failures: list[str] = []
        #: (identity, prompt) pairs sent: a probe counts only the first time its identity sends it (a repeat
        #: may reuse the identity's own earlier probe, which is its right)
        self.sent: set[tuple[str, str]] = set()
        #: drafter -> the (draft tokens, accepted draft tokens) its salted probes reported (must stay one value)
        self.draft_probes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.flood: collections.Counter = collections.Counter()
        self.throttled: list[str] = []  # a 429 for an identity that does not flood
        #: the text holding the probe's continuation (set once the model has answered the probe alone)
        self.secret = ""
        self.salts = itertools.count()


def cycle_of(model: str, who: str) -> list[tuple[str, dict, str]]:
    """(path, body, kind) of one client's cycle; kind says how to send it and what to check."""
    chat = "/v1/chat/completions"
    turns = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is order 4471?"}],
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is order 4471?"},
         {"role": "assistant", "content": "Order 4471 left the depot this morning."},
         {"role": "user", "content": "And when will it arrive?"}],
    ]
    items: list[tuple[str, dict, str]] = [(chat, {"messages": m, "max_tokens": 24}, "plain") for m in turns]
    items += [
        (chat, {"messages": [{"role": "user", "content": "List three uses of a paperclip."}], "max_tokens": 32},
         "plain"),
        (chat, {"messages": [{"role": "user", "content": "Write a haiku about rain."}], "max_tokens": 32,
                "temperature": 0.8, "top_p": 0.95, "seed": 7}, "plain"),
        (chat, {"messages": [{"role": "user", "content": "Name a prime number."}], "max_tokens": 12, "n": 2,
                "temperature": 0.7, "seed": 3}, "plain"),
        (chat, {"messages": [{"role": "user", "content": "Is water wet?"}], "max_tokens": 12, "logprobs": True,
                "top_logprobs": 3}, "plain"),
        ("/v1/completions", {"prompt": ["The capital of France is", "def add(a, b):"], "max_tokens": 16}, "plain"),
        (chat, {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello"}],
                "max_tokens": 16, "cache_salt": f"{who}-salt"}, "plain"),
        (chat, {"messages": [{"role": "user", "content": SYSTEM * 6 + " Summarise this."}], "max_tokens": 64,
                "stream": True}, "abort-prefill"),
        (chat, {"messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
                "max_tokens": 200, "stream": True}, "abort-decode"),
        (chat, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "bad"),
        (chat, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "cache_salt": ""}, "bad"),
        (chat, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "max_token": 4}, "bad"),
        (chat, {"messages": [{"role": "user", "content": f"Spell the word {who} backwards, letter by letter."}],
                "max_tokens": 24}, "canary"),
        ("/v1/completions", {"prompt": "", "max_tokens": 8}, "probe"),  # filled in at send time
    ]
    drafting = [(chat, {"messages": [{"role": "user", "content": f"List the numbers one to ten, {name}."}],
                        "max_tokens": 24, "speculation": spec}, "plain") for name, spec in DRAFTERS.items()]
    drafting[1:1] = [("/v1/completions", {"prompt": "", "max_tokens": 48, "speculation": DRAFTERS[name]}, "secret")
                     for name in ("ngram-private", "sa-global")]
    drafting[4:4] = [("/v1/completions", {"prompt": PROBE, "max_tokens": 24, "speculation": DRAFTERS[name]},
                      f"draft-probe {name}") for name in ("ngram-public", "sa-global")]
    items[2:2] = drafting  # early in the cycle: a short run sees them too
    return [(path, {"model": model, **body}, kind) for path, body, kind in items]


async def send(http: httpx.AsyncClient, url: str, key: str, path: str, body: dict, kind: str,
               checks: Checks, who: str, secrets: dict[str, str], owner: str = "") -> None:
    headers = {"Authorization": f"Bearer {key}"}
    if kind == "secret":  # another identity's probe must draft nothing from this text
        if not checks.secret:
            return
        body = {**body, "prompt": checks.secret}
    if kind.startswith("draft-probe"):  # its own empty namespace: only another's text could change its drafts
        body = {**body, "cache_salt": f"probe-{next(checks.salts)}"}
    if kind in ("abort-prefill", "abort-decode"):
        async with http.stream("POST", url + path, json=body, headers=headers) as reply:
            chunks = 0
            async for line in reply.aiter_lines():
                chunks += line.startswith("data:") and '"content"' in line
                if kind == "abort-prefill" or chunks >= 2:
                    break
            checks.outcomes[f"{kind} (HTTP {reply.status_code})"] += 1
        return
    if kind == "probe":  # another identity's secret (must not be reused), or my own (may be)
        text = secrets.get(owner)
        if text is None or (owner != who and (who, text) in checks.sent):
            return
        checks.sent.add((who, text))
        body = {**body, "prompt": text + " Continue:"}
        checks.texts[who].append(body["prompt"])
    reply = await http.post(url + path, json=body, headers=headers)
    checks.outcomes[f"HTTP {reply.status_code}"] += 1
    data: Any = reply.json()
    if reply.status_code == 429:
        checks.throttled.append(f"{who} {kind}: {reply.text[:200]}")
    elif kind.startswith("draft-probe") and reply.status_code == 200:
        spec = data["usage"]["speculation"]
        checks.draft_probes[kind.split()[1]][(spec["draft_tokens"], spec["accepted_draft_tokens"])] += 1
    if reply.status_code >= 500:
        checks.failures.append(f"{kind}: {reply.status_code} {reply.text[:200]}")
    elif 400 <= reply.status_code < 500 and reply.status_code != 429:  # a 429 is counted above
        if kind != "bad" or not data.get("error", {}).get("param"):
            checks.unnamed_4xx.append(f"{kind}: {reply.text[:200]}")
    elif kind == "canary":
        checks.canary[who].add(data["choices"][0]["message"]["content"])
    elif kind == "probe":
        cached = (data["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if owner == who:
            checks.own_probes += 1
            checks.own_reuse += cached > 0
        else:
            checks.cross_probes += 1
            own = own_start(body["prompt"], checks.texts[who])
            if cached > own:  # a token covers one character at least: more than that came from someone else
                checks.cross_reuse += 1
                checks.cross_hits.append((who, owner, cached, data["usage"]["prompt_tokens"]))
            elif cached:
                checks.cross_own_start += 1
                checks.cross_own_most = max(checks.cross_own_most, cached)


async def client(http: httpx.AsyncClient, url: str, index: int, keys: dict[str, str], model: str, deadline: float,
                 checks: Checks, secrets: dict[str, str]) -> None:
    who = IDENTITIES[index % 3]
    cycle = cycle_of(model, who)
    for n, (path, body, kind) in enumerate(itertools.islice(itertools.cycle(cycle), index * 2, None)):
        if time.monotonic() >= deadline:
            return
        if n % 7 == 0:  # this identity's secret of the moment: a long prompt only it sends
            secrets[who] = f"{who} private note {index}.{n}: " + SYSTEM * 3
            checks.sent.add((who, secrets[who]))
            checks.texts[who].append(secrets[who])
            await send(http, url, keys[who], "/v1/completions", {"model": model, "prompt": secrets[who],
                                                                 "max_tokens": 4}, "plain", checks, who, secrets)
        owner = who if (n // len(cycle)) % 2 == 0 else IDENTITIES[(IDENTITIES.index(who) + 1) % 3]
        try:
            await send(http, url, keys[who], path, body, kind, checks, who, secrets, owner)
        except httpx.HTTPError as exc:
            checks.failures.append(f"{kind}: {type(exc).__name__}: {exc}")


def own_start(prompt: str, earlier: list[str]) -> int:
    """Characters of ``prompt``'s start that one of ``earlier`` (other than itself) shares: the most a prefix
    cache scoped to their sender may reuse of it, counted in tokens (each covers one character at least).

    >>> own_start("carol note 1.21: hi", ["carol note 1.14: hi", "bob", "carol note 1.21: hi"])
    13
    """
    return max((len(os.path.commonprefix([prompt, text])) for text in earlier if text != prompt), default=0)


def scope_bytes(metrics: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        if line.startswith("trtlade_prefix_cache_scope_bytes{"):
            out[line.split('scope="')[1].split('"')[0]] = float(line.split()[1])
    return out


async def flooder(http: httpx.AsyncClient, url: str, key: str, model: str, deadline: float, checks: Checks,
                  index: int) -> None:
    stops = [f"{chr(65 + i)}{'~' * 1023}" for i in range(16)]
    for turn in itertools.count(index):
        if time.monotonic() >= deadline:
            return
        body = {"model": model, "prompt": LONG + f" Summary {turn}:", "max_tokens": 32, "n": 64 if turn % 2 else 8,
                "temperature": 0.9, "seed": turn, "stop": stops}
        try:
            reply = await http.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            checks.flood[f"HTTP {reply.status_code}"] += 1
            if reply.status_code >= 500:
                checks.failures.append(f"flood: {reply.status_code} {reply.text[:200]}")
            if reply.status_code == 429:
                await asyncio.sleep(0.2)
        except httpx.HTTPError as exc:
            checks.failures.append(f"flood: {type(exc).__name__}: {exc}")


async def soak(url: str, pid: int, keys: dict[str, str], args: argparse.Namespace) -> Checks:
    checks, secrets = Checks(), {}
    async with httpx.AsyncClient(timeout=300) as http:
        auth = {"Authorization": f"Bearer {keys['alice']}"}
        model = (await http.get(url + "/v1/models", headers=auth)).json()["data"][0]["id"]
        alone = (await http.post(url + "/v1/completions", headers=auth, json={  # the probe's continuation
            "model": model, "prompt": PROBE, "max_tokens": 64, "cache_salt": "continuation"})).json()
        checks.secret = "Private ledger, do not share. " + PROBE + alone["choices"][0]["text"]
        start = time.monotonic()
        deadline = start + 60 * args.minutes
        tasks = [asyncio.create_task(client(http, url, i, keys, model, deadline, checks, secrets))
                 for i in range(args.concurrency)]
        if args.flood:
            tasks += [asyncio.create_task(flooder(http, url, keys[FLOOD], model, deadline, checks, i))
                      for i in range(2)]
        samples = []
        while not all(t.done() for t in tasks):
            await asyncio.sleep(args.every)
            metrics = (await http.get(url + "/metrics", headers=auth)).text
            samples.append((time.monotonic() - start, rss_mb(pid), scope_bytes(metrics)))
            t, rss, by = samples[-1]
            kv = ((await http.get(url + "/version", headers=auth)).json().get("live") or {}).get("kv_cache") or {}
            print(f"{t:7.0f} s  RSS {rss:7.1f} MiB  cache by scope (MiB) "
                  f"{ {k: round(v / 2**20, 2) for k, v in by.items()} }  K/V slots {kv.get('slots')} x "
                  f"{kv.get('capacity')} tokens = {kv.get('bytes', 0) / 2**20:.1f} MiB  "
                  f"requests {sum(checks.outcomes.values())}", flush=True)
        await asyncio.gather(*tasks)
    summary = rss_after_warmup(samples, args.warmup)
    if summary:
        print(f"{summary}; prefix cache at most {max(sum(s[2].values()) for s in samples) / 2**20:.2f} MiB of "
              f"{args.cache_mb} MiB")
    return checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-cpu.yml")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=3.0, help="minutes before RSS must stay flat")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--cache-mb", type=int, default=4, help="serve.prefix_cache_mb: small, to evict all the time")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--flood", action="store_true", help="a fourth identity floods the server (it alone may get 429)")
    args = ap.parse_args()

    from trtlade.bench.launch import launched_server

    folder = Path(tempfile.mkdtemp(prefix="scope-soak-"))
    keys = {who: os.urandom(16).hex() for who in (*IDENTITIES, *((FLOOD,) if args.flood else ()))}
    keys_file = folder / "keys.txt"
    keys_file.write_text("".join(f"{who} {key}{' admin' if who == 'alice' else ''}\n" for who, key in keys.items()))
    keys_file.chmod(0o600)
    config = yaml.safe_load(args.config.read_text())
    base = args.config.resolve().parent
    for section, key in (("model", "path"), ("model", "tokenizer")):
        if (config.get(section) or {}).get(key):
            config[section][key] = str((base / config[section][key]).resolve())
    serve = config.setdefault("serve", {})
    serve.update({"api_keys_file": str(keys_file), "prefix_cache_mb": args.cache_mb})
    serve.pop("prefix_cache_scope", None)
    config_file = folder / "trtlade.yml"
    config_file.write_text(yaml.safe_dump(config))
    log = folder / "server.log"
    print(f"serving {args.config} with 3 identities{' and a flooding one' if args.flood else ''}, "
          f"prefix cache {args.cache_mb} MiB (scope identity; log {log}); "
          f"{args.concurrency} clients for {args.minutes:g} min")
    os.environ["TRTLADE_API_KEY"] = ""
    with launched_server(config_file, log_path=log, headers={"Authorization": f"Bearer {keys['alice']}"}) as url:
        checks = asyncio.run(soak(url, server_pid(url), keys, args))
    print(f"requests by outcome: {dict(checks.outcomes)}")
    if args.flood:
        print(f"flooding identity's requests by outcome: {dict(checks.flood)}")
    probes = {name: dict(seen) for name, seen in checks.draft_probes.items()}
    print(f"salted draft probes, (draft tokens, accepted) -> count: {probes}")
    verdicts = {
        "no identity but the flooding one got a 429": not checks.throttled,
        f"every salted draft probe drafted the same, so from no other identity's text ({probes})":
            bool(probes) and all(len(seen) == 1 for seen in checks.draft_probes.values()),
        "every request answered (no 5xx, no transport error)": not checks.failures,
        "every 4xx names its field (and only bad requests get one)": not checks.unnamed_4xx,
        "each identity's canary answer never changed": all(len(v) == 1 for v in checks.canary.values()),
        f"no identity reused another's prompt ({checks.cross_probes} cross probes; "
        f"{checks.cross_own_start} reused only the start their own earlier prompts share, at most "
        f"{checks.cross_own_most} tokens)": checks.cross_reuse == 0,
        f"an identity's own repeat reused its prompt ({checks.own_reuse} of {checks.own_probes})": checks.own_reuse > 0,
    }
    for text, ok in verdicts.items():
        print(f"{'ok  ' if ok else 'FAIL'} {text}")
    hits = [f"{who} probed {owner}'s prompt: {cached} of {total} tokens cached" for who, owner, cached, total
            in checks.cross_hits]
    for line in (checks.failures + checks.unnamed_4xx + checks.throttled + hits)[:10]:
        print(f"  {line}")
    sys.exit(0 if all(verdicts.values()) else 1)


if __name__ == "__main__":
    main()

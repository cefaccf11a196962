#!/usr/bin/env python3
"""What does scoping the prefix cache by identity cost in hit rate? A mixed workload replayed through the
prefix cache's own rules (trtlade.reference.prefix_cache, no model: which blocks a request may reuse does
not depend on the weights), once per scope, the same requests in the same order.

The workload: ``--tenants`` identities, each a support team of a company (its own system prompt, the
``multiturn`` conversations' questions, a conversation's next turn resending the previous one with its
answer) plus one-off ``mix`` prompts; a few system prompts are the same for every tenant (a vendor's stock
prompt). Requests are spread round-robin over the tenants and interleaved. Prints, per scope and cache
budget, the share of prompt tokens served from the cache.

    .venv/bin/python benchmarks/scope_hit_rate.py
    .venv/bin/python benchmarks/scope_hit_rate.py --tenants 8 --rounds 20
"""

from __future__ import annotations

import argparse
import random


def workload(tok, tenants: int, rounds: int, seed: int) -> list[tuple[str, list[int]]]:
    """(identity, prompt tokens) per request, in arrival order."""
    from trtlade.bench.datasets import load_dataset

    rng = random.Random(seed)
    stock = "You are a helpful assistant. Answer briefly and say when you do not know. "
    convos = [p.chat_messages() for p in load_dataset("multiturn").prompts]
    oneoffs = [p.chat_messages() for p in load_dataset("mix").prompts]
    out: list[tuple[str, list[int]]] = []
    for r in range(rounds):
        for t in range(tenants):
            who = f"tenant{t}"
            own = f"You are the support assistant of company {t}. Quote order numbers exactly. " * 4
            convo = [dict(m) for m in convos[(r + t) % len(convos)]]
            for m in convo:
                if m["role"] == "system":
                    m["content"] = own if t % 3 else stock  # a third of the tenants use the vendor's stock prompt
            kind = rng.random()
            messages = convo if kind < 0.7 else oneoffs[(r * tenants + t) % len(oneoffs)]
            out.append((who, _ids(tok, messages)))
            if kind < 0.7:  # the next turn: the same conversation, the answer and a follow-up
                follow = messages + [{"role": "assistant", "content": "Let me check that for you."},
                                     {"role": "user", "content": f"Thanks. One more question, number {r}?"}]
                out.append((who, _ids(tok, follow)))
    rng.shuffle(out)  # arrivals interleave the tenants
    return out


def _ids(tok, messages: list[dict]) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def replay(requests: list[tuple[str, list[int]]], kind: str, budget_mb: float, bytes_per_token: int) -> float:
    from trtlade.contract.protocol import CacheScope
    from trtlade.reference.prefix_cache import PrefixCache

    cache = PrefixCache(16, int(budget_mb * 2 ** 20), bytes_per_token)
    for who, prompt in requests:
        scope = CacheScope(kind, who)
        cache.blocks_for(prompt, cache.match(prompt, scope), scope=scope)
        cache.store(prompt, lambda lo, hi: None, scope)
    return cache.stats()["token_hit_rate"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--budgets", default="256,16,4", help="prefix cache MiB, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from trtlade.reference.embedded import embedded_model_dir

    tok = AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    per_token = 2 * 30 * 3 * 64 * 4  # SmolLM2-135M, fp32: 2 (K, V) x 30 layers x 3 KV heads x 64 x 4 bytes
    requests = workload(tok, args.tenants, args.rounds, args.seed)
    tokens = sum(len(p) for _, p in requests)
    print(f"# {len(requests)} requests, {tokens} prompt tokens, {args.tenants} tenants; SmolLM2-135M fp32 K/V "
          f"({per_token} bytes a token)")
    print("| prefix cache MiB | global | identity | salt (no salt sent) | identity / global |")
    print("|---:|---:|---:|---:|---:|")
    for budget in (float(b) for b in args.budgets.split(",")):
        rates = {kind: replay(requests, kind, budget, per_token) for kind in ("global", "identity", "salt")}
        share = rates["identity"] / rates["global"] if rates["global"] else float("nan")
        print(f"| {budget:g} | {100 * rates['global']:.1f}% | {100 * rates['identity']:.1f}% | "
              f"{100 * rates['salt']:.1f}% | {share:.2f} |")


if __name__ == "__main__":
    main()

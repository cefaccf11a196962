#!/usr/bin/env python3
"""Replay greedy answers against the history drafting rules: how many steps and rows each rule and
chain length would take.

A history draft (prompt lookup, SA's longest suffix, NGram's match) depends only on the text so far, and
a step accepts the draft's longest prefix that the model's own continuation matches. So once the greedy
answers are known, every rule can be replayed without the model: at each step, draft from prompt +
answer so far, accept the common prefix with the rest of the answer, move on by that plus one token.
No model runs in the replay, so the counts are exact for these answers; what the rows cost depends on
the host (``benchmarks/batch_scaling.py --forward-only``), and which length pays is settled by timed runs
(``benchmarks/auto_alone.py``).

    .venv/bin/python benchmarks/history_replay.py                            # mix, 50 tokens, bf16
    .venv/bin/python benchmarks/history_replay.py --dtype float32 --lengths 3 4 5

Rules: ``prompt_lookup`` (the latest earlier occurrence of the last 1-3 tokens, :class:`PromptIndex`: the
``fast`` preset's), ``suffix`` (the earliest occurrence of the longest earlier suffix: SA's),
``suffix_growing`` (the same, its chain longer after a long match, as the ``fast`` preset drafts it:
:func:`~trtlade.lookahead.algorithm.suffix_chain_length` of the draft tokens), ``ngram`` (the earliest
occurrence of the last 2 tokens, else of the last one: NGram with ``max_matching_ngram_size: 2``, its oldest
match). ``--by-match`` adds what SA's chain would accept at every position of the answers, by the length of the
suffix it matched there.

    .venv/bin/python benchmarks/history_replay.py --lengths 4 8 --by-match
"""

from __future__ import annotations

import argparse
import collections
import statistics
from typing import Sequence

from trtlade.lookahead.algorithm import suffix_chain_length
from trtlade.lookahead.prompt_lookup import PromptIndex
from trtlade.lookahead.suffix_automaton import SuffixAutomaton
from trtlade.reference.prefix_cache import common_prefix

RULES = ("prompt_lookup", "suffix", "suffix_growing", "ngram")


def replay(prompt: Sequence[int], answer: Sequence[int], rule: str, length: int) -> list[tuple[int, int]]:
    """``(rows, tokens)`` of each step after the first token of ``answer`` when ``rule`` drafts ``length``
    tokens a step (rows: 1 + the draft's tokens; tokens: the accepted drafts + 1, within the answer)."""
    context = [*prompt, answer[0]]
    index = PromptIndex(context) if rule == "prompt_lookup" else None
    automaton = SuffixAutomaton(context) if rule != "prompt_lookup" else None
    steps, t = [], 1
    while t < len(answer):
        draft, _ = _draft(rule, index, automaton, length)
        accepted = common_prefix(draft, answer[t:len(answer) - 1])  # the last token follows the drafts
        emitted = answer[t:t + accepted + 1]
        steps.append((1 + len(draft), len(emitted)))
        for token in emitted:
            if index is not None:
                index.extend([token])
            if automaton is not None:
                automaton.extend(token)
        t += len(emitted)
    return steps


def _draft(rule: str, index: PromptIndex | None, automaton: SuffixAutomaton | None,
           length: int) -> tuple[list[int], int]:
    """The rule's draft and the length of the match it follows (0: prompt lookup's, not counted)."""
    if index is not None:
        return index.propose(length), 0
    assert automaton is not None
    found = automaton.lookup_upto(2 if rule == "ngram" else -1)
    if found is None:
        return [], 0
    if rule == "suffix_growing":
        length = suffix_chain_length(length, found[1])
    return automaton.continuation(found[0], length), found[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mix")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--lengths", type=int, nargs="*", default=[3, 4, 5, 6, 8])
    ap.add_argument("--by-match", action="store_true",
                    help="SA's accepted drafts at every position by the length of the suffix matched (each length)")
    args = ap.parse_args()

    from trtlade.bench.datasets import load_dataset
    from trtlade.bench.meta import device_name
    from trtlade.contract.tokenization import PromptTokenizer
    from trtlade.reference.engine import ReferenceEngine

    engine = ReferenceEngine.load(None, spec="2,4,2", dtype=args.dtype)
    chat = PromptTokenizer(engine.tokenizer)
    prompts = [chat.encode_chat(p.chat_messages()) for p in load_dataset(args.dataset).prompts]
    answers = [engine.generate(p, max_tokens=args.max_tokens, lookahead=(1, 1, 0)).tokens for p in prompts]
    greedy_steps = sum(len(a) - 1 for a in answers)
    print(f"{device_name('cpu')}, {args.dtype}, {engine.model_id}, {args.dataset} ({len(prompts)} prompts), "
          f"{args.max_tokens} tokens")
    print(f"greedy: {greedy_steps} steps\n")
    print("| rule | draft tokens | steps | tokens per step | mean rows | steps with a draft |")
    print("|---|---:|---:|---:|---:|---:|")
    for rule in RULES:
        for length in args.lengths:
            steps = [s for p, a in zip(prompts, answers) for s in replay(p, a, rule, length)]
            tokens = sum(t for _, t in steps)
            print(f"| {rule} | {length} | {len(steps)} | {tokens / len(steps):.3f} | "
                  f"{statistics.mean(r for r, _ in steps):.2f} | {sum(r > 1 for r, _ in steps)} |")
    if args.by_match:
        for length in args.lengths:
            _print_by_match(prompts, answers, length)


def _print_by_match(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], length: int) -> None:
    """SA's chain of ``length`` drafted at every position of the answers (not only where a step would start):
    positions and mean accepted drafts by the length of the suffix it followed (9+ pooled)."""
    counts: collections.Counter = collections.Counter()
    for prompt, answer in zip(prompts, answers):
        automaton = SuffixAutomaton([*prompt, answer[0]])
        for t in range(1, len(answer)):
            draft, match = _draft("suffix", None, automaton, length)
            if draft:
                counts[(min(match, 9), "positions")] += 1
                counts[(min(match, 9), "accepted")] += common_prefix(draft, answer[t:len(answer) - 1])
            automaton.extend(answer[t])
    print(f"\nSA's chain of {length} at every position, by the suffix matched:\n")
    print("| match (tokens) | positions | accepted drafts (mean) |\n|---:|---:|---:|")
    for match in sorted({m for m, _ in counts}):
        positions = counts[(match, "positions")]
        label = f"{match}+" if match == 9 else str(match)
        print(f"| {label} | {positions} | {counts[(match, 'accepted')] / positions:.2f} |")


if __name__ == "__main__":
    main()

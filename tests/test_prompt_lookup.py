"""Prompt-lookup candidates: the proposer as a spec table on tiny token arrays, its merge into the
verification tree next to the n-gram pool's candidates, and losslessness with it on (oracle LM and
tiny random models)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.lookahead.algorithm import LookaheadAlgorithm
from trtlade.lookahead.prompt_lookup import propose


@pytest.mark.parametrize("history,k,max_ngram,expect", [
    ([5, 6, 7, 8, 9, 1, 6, 7], 3, 3, [8, 9, 1]),      # "6 7" seen before: what followed it
    ([5, 6, 7, 8, 9, 1, 6, 7], 1, 3, [8]),            # k bounds the proposal
    ([1, 2, 1, 3, 1], 2, 3, [3, 1]),                  # the most recent earlier match wins
    ([4, 5, 6, 9, 5, 6, 7, 4, 5, 6], 2, 3, [9, 5]),   # longest suffix (4 5 6) beats the later 5 6
    ([1, 2, 3], 2, 3, []),                            # nothing repeats
    ([7, 7], 3, 3, [7]),                              # a run proposes itself
    ([3], 2, 3, []),                                  # too short
    ([1, 2, 1, 2], 0, 3, []),                         # k = 0: off
])
def test_propose_table(history, k, max_ngram, expect):
    assert propose(history, k, max_ngram=max_ngram) == expect


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=30), st.integers(0, 5))
def test_a_proposal_is_what_followed_an_earlier_occurrence_of_a_suffix(history, k):
    out = propose(history, k)
    assert len(out) <= k
    if out:
        n = len(history)
        assert any(history[n - size:] == history[s:s + size] and history[s + size:s + size + len(out)] == out
                   for size in range(1, min(3, n - 1) + 1) for s in range(0, n - size))


def test_the_candidate_joins_the_tree_and_is_counted_as_rows():
    # 13 is followed by 14 15 16 after "12", then by three other runs: the pool (G = 2 per key) keeps
    # only the latest two continuations of 13; the lookup matches the longer suffix "12 13"
    prompt = [12, 13, 14, 15, 16, 20, 13, 30, 31, 32, 21, 13, 40, 41, 42, 22, 13, 50, 51, 52, 12, 13]
    off = LookaheadAlgorithm((2, 4, 2), seed=0)
    on = LookaheadAlgorithm((2, 4, 2), seed=0, prompt_lookup=3)
    for algo in (off, on):
        algo.setup(prompt[:-1], golden=prompt[-1])
    a, b = off.prepare(), on.prepare()
    assert b.num_candidates == a.num_candidates + 1 and b.num_rows == a.num_rows + 3
    start = b.num_rows - 3
    assert b.tokens[start:] == [14, 15, 16] and b.positions[start:] == [1, 2, 3]
    assert b.parents[start] == 0 and b.parents[start + 1:] == [start, start + 1]
    # an accepted lookup path: the model's argmax continues 14 15 16, so 3 drafts are accepted
    argmax = [-1] * b.num_rows
    argmax[0], argmax[start], argmax[start + 1], argmax[start + 2] = 14, 15, 16, 99
    v = on.verify(b.expand_argmax([argmax[r] for r in b.logit_rows]))
    assert v.tokens == [14, 15, 16, 99]


@pytest.mark.parametrize("window, drafts, emitted", [
    (True, [5, 6], [5, 6, 7]),                # beside the window: N-1 = 2 drafts, the most a path there accepts
    (False, [5, 6, 7, 8], [5, 6, 7, 8, 99]),  # without it: the whole chain, as NGram and SA verify theirs
])
def test_prompt_lookup_is_cut_to_the_path_length_beside_the_window(window, drafts, emitted):
    """``4 5 6 7 8 9 ... 4``: the lookup after the golden 4 is ``5 6 7 8``, and the model continues it."""
    algo = LookaheadAlgorithm((2, 3, 2), seed=0, prompt_lookup=4)
    algo.setup([4, 5, 6, 7, 8, 9, 1, 2], golden=4)
    batch = algo.prepare(window=window)
    chain = [row for row, src in enumerate(batch.row_sources) if src in ("pool", "prompt_lookup")]
    assert max(batch.positions[row] for row in chain) == len(drafts)  # the deepest candidate row
    model = {4: 5, 5: 6, 6: 7, 7: 8, 8: 99}  # the argmax after each token of the chain
    argmax = [model.get(batch.tokens[row], -1) for row in batch.logit_rows]
    assert algo.verify(batch.expand_argmax(argmax)).tokens == emitted


def test_prompt_lookup_must_be_a_count():
    with pytest.raises(ValueError, match="prompt_lookup"):
        LookaheadAlgorithm((2, 3, 2), prompt_lookup=-1)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_lossless_with_prompt_lookup_on_tiny_models(arch):
    from models import tiny_engine, tiny_tokenizer

    engine = tiny_engine(arch, (2, 4, 2))
    tok = tiny_tokenizer()
    prompts = ["one, two, three, four, one, two, three,", "The quick brown fox. The quick brown",
               "def f(x):\n    return x\ndef f(x):"]
    from_lookup = 0
    for text in prompts:
        ids = tok.encode(text)
        plain = engine.greedy(ids, max_tokens=24, ignore_eos=True).tokens
        ours = engine.generate(ids, max_tokens=24, ignore_eos=True, lookahead=(2, 4, 2),
                               settings=dataclasses.replace(engine.settings, prompt_lookup=3))
        assert ours.tokens == plain
        from_lookup += ours.stats.accepted_from.get("prompt_lookup", 0)
    assert from_lookup > 0, "no prompt-lookup draft was accepted: the test would prove nothing"


@pytest.mark.parametrize("preset_line, lookup, shown", [
    ("", 4, "fast"),                      # the reference engine's default: max(N-1, 4) draft tokens
    ("  preset: fast\n", 4, "fast"),
    ("  preset: trtllm\n", 0, "trtllm"),  # TensorRT-LLM's algorithm exactly
])
def test_the_preset_reaches_the_served_engine(tmp_path, preset_line, lookup, shown):
    """`lookahead.preset` in a config (fast when absent): `trtlade serve` builds the reference engine
    with prompt-lookup candidates of max(N-1, 4) tokens (fast) or none (trtllm) and says so in /version."""
    from models import tiny_model, tiny_tokenizer
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import engine_factory

    folder = tmp_path / "tiny"
    tok = tiny_tokenizer()
    tiny_model("llama", len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    config = tmp_path / "deploy.yml"
    config.write_text(f"model:\n  path: {folder}\nlookahead:\n  spec: 2,4,2\n{preset_line}")
    serving = engine_factory(make_plan(ServeFlags(config=config)))()
    try:
        assert serving._engine.settings.prompt_lookup == lookup
        assert serving.info.details["preset"] == shown
    finally:
        import asyncio
        import gc

        gc.unfreeze()  # the server's factory froze this process's heap (trtlade.server.runner.long_lived_heap)
        asyncio.run(serving.aclose())


@pytest.mark.parametrize("engine, preset, runs", [
    ("reference", None, "fast"), ("reference", "trtllm", "trtllm"), ("reference", "fast", "fast"),
    ("trtllm", None, "trtllm"), ("trtllm", "trtllm", "trtllm"),
    ("trtllm", "fast", "fast"),  # kept as given; validate-config warns (preset-engine) and the engine runs trtllm
])
def test_the_preset_that_runs_per_engine(engine, preset, runs):
    from trtlade.config.schema import TrtladeConfig

    lookahead = {"spec": "2,4,2"} | ({"preset": preset} if preset else {})
    cfg = TrtladeConfig.model_validate({"lookahead": lookahead, "serve": {"engine": engine}})
    assert cfg.lookahead_preset == runs
    assert cfg.lookahead.preset == preset  # nothing the user gave is changed


def test_the_schema_and_the_engine_know_the_same_presets():
    import typing

    from trtlade.config.schema import LookaheadSection
    from trtlade.presets import DEFAULT_PRESET, PRESETS

    annotation = LookaheadSection.model_fields["preset"].annotation
    literal = next(a for a in typing.get_args(annotation) if typing.get_origin(a) is typing.Literal)
    assert set(typing.get_args(literal)) == set(PRESETS) and DEFAULT_PRESET in PRESETS


@pytest.mark.parametrize("preset, spec, lookup", [
    ("fast", "2,4,2", 4), ("fast", "4,2,4", 4), ("fast", "2,7,2", 6), ("fast", "1,1,0", 0), ("trtllm", "7,7,7", 0)])
def test_preset_prompt_lookup_table(preset, spec, lookup):
    from trtlade.presets import preset_prompt_lookup

    assert preset_prompt_lookup(preset, spec) == lookup


def test_an_unknown_preset_is_refused():
    from trtlade.presets import preset_prompt_lookup

    with pytest.raises(ValueError, match="unknown preset 'quick': choose fast or trtllm"):
        preset_prompt_lookup("quick", "2,4,2")

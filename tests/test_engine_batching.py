"""In-flight batching is lossless: every request's tokens equal running it alone with plain greedy
decoding (fp32), whatever shares its steps -- mixed (w,n,g), greedy and sampled neighbours, arrivals
at different steps, cancellations, EOS and stop strings inside accepted runs, a token budget that
drops drafts -- on tiny random Llama, Qwen2 and Qwen3 models."""

from __future__ import annotations

import dataclasses

from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import ARCHS, tiny_engine, tiny_tokenizer, tiny_word_tokenizer
from trtlade.contract.protocol import GenerationRequest
from trtlade.reference.scheduler import fit_rows

ENGINE_SPEC = (7, 5, 7)
MAX_TOKENS = 32


@lru_cache(maxsize=None)
def engine(arch: str = "llama"):
    return tiny_engine(arch, ENGINE_SPEC)


@lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    tok = tiny_tokenizer()
    texts = ["def is_prime(n):\n    if n < 2:", "The quick brown fox jumps over", "one, two, three, four,",
             "Honey bees live in colonies.", "A train travels 60 km in", "Hello! How are you today?"]
    return tuple(tuple(tok.encode(t)) for t in texts)


@lru_cache(maxsize=None)
def alone(arch: str, prompt: tuple[int, ...], max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    """Plain greedy decoding of ``prompt`` run alone: the reference every batched request must match."""
    return tuple(engine(arch).greedy(list(prompt), max_tokens=max_tokens, ignore_eos=True).tokens)


def request(prompt, lookahead=None, max_tokens=MAX_TOKENS, **kwargs) -> GenerationRequest:
    return GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens, lookahead=lookahead,
                             ignore_eos=kwargs.pop("ignore_eos", True), **kwargs)


def run(batch, arrivals: dict[int, list[GenerationRequest]], cancel_at: dict[int, int] | None = None,
        max_steps: int = 500) -> dict[int, list]:
    """Drive ``batch``: at step s add ``arrivals[s]`` (ids in order of addition) and cancel the
    request added as number i at ``cancel_at[i]``; returns every request's chunks by addition order."""
    cancel_at = cancel_at or {}
    ids: list[int] = []
    chunks: dict[int, list] = {}
    for step in range(max_steps):
        for req in arrivals.get(step, []):
            ids.append(batch.add(req))
            chunks[len(ids) - 1] = []
        for number, at in cancel_at.items():
            if at == step and number < len(ids):
                assert batch.cancel(ids[number])
        for seq_id, chunk in batch.step():
            chunks[ids.index(seq_id)].append(chunk)
        if not len(batch) and step >= max(arrivals, default=0):
            return chunks
    raise AssertionError("the batch did not finish")


def tokens(chunks) -> tuple[int, ...]:
    return tuple(t for c in chunks for t in c.tokens)


# ------------------------------------------------------------------------------------ the spec table
def test_fit_rows_drops_drafts_of_the_newest_first():
    assert fit_rows([9, 1, 9, 4], 16) == [9, 1, 1, 4]
    assert fit_rows([9, 9], 18) == [9, 9]
    assert fit_rows([9, 9], 2) == [1, 1]
    with pytest.raises(ValueError):
        fit_rows([1, 1, 1], 2)


@pytest.mark.parametrize("arch", ARCHS)
def test_mixed_specs_with_greedy_and_sampled_neighbours(arch):
    eng = engine(arch)
    specs = [(7, 5, 7), (1, 1, 0), (2, 3, 2), (4, 2, 4), None, (5, 3, 5)]
    reqs = [request(p, s) for p, s in zip(prompts(), specs)]
    sampled = request(prompts()[0], None, temperature=0.8, seed=11)
    batch = eng.new_batch(max_batch_size=8)
    out = run(batch, {0: reqs + [sampled]})
    for i, p in enumerate(prompts()):
        assert tokens(out[i]) == alone(arch, p), f"request {i} spec {specs[i]}"
    solo = eng.generate(list(prompts()[0]), max_tokens=MAX_TOKENS, temperature=0.8, seed=11, ignore_eos=True)
    assert list(tokens(out[6])) == solo.tokens  # a seeded sample does not depend on its neighbours
    steps = [c for i in range(6) for c in out[i]]
    assert any(len(c.tokens) > 1 for c in steps)  # drafts were accepted inside the batch


def test_arrivals_at_different_steps_and_a_small_batch_limit():
    eng = engine()
    ps = prompts()
    arrivals = {0: [request(ps[0], (7, 5, 7))], 3: [request(ps[1], (2, 3, 2)), request(ps[2])],
                7: [request(ps[3], (1, 1, 0))], 8: [request(ps[4], (4, 2, 4)), request(ps[5], (7, 5, 7))]}
    batch = eng.new_batch(max_batch_size=3)
    seen_running = []
    original_step = batch.step

    def step():
        out = original_step()
        seen_running.append(batch.running)
        return out

    batch.step = step
    out = run(batch, arrivals)
    for i, p in enumerate(ps):
        assert tokens(out[i]) == alone("llama", p), f"request {i}"
    assert max(seen_running) == 3  # never more than max_batch_size in a step


def test_cancellation_mid_run_frees_the_slot_and_leaves_the_others_exact():
    eng = engine()
    ps = prompts()
    batch = eng.new_batch(max_batch_size=4)
    out = run(batch, {0: [request(p, (7, 5, 7)) for p in ps[:4]], 4: [request(ps[4])]}, cancel_at={1: 3, 4: 6})
    for i in (0, 2, 3):
        assert tokens(out[i]) == alone("llama", ps[i])
    cancelled = tokens(out[1])
    assert 0 < len(cancelled) < MAX_TOKENS and cancelled == alone("llama", ps[1])[:len(cancelled)]
    assert out[1][-1].finish_reason is None
    assert eng.runner.slots_in_use == 0


def test_a_token_budget_drops_drafts_but_never_a_request():
    eng = engine()
    ps = prompts()
    batch = eng.new_batch(max_batch_size=6, max_num_tokens=12)
    dropped = []
    original_step = batch.step

    def step():
        out = original_step()
        assert batch.last.rows <= 12
        dropped.append(batch.last.dropped_drafts)
        return out

    batch.step = step
    out = run(batch, {0: [request(p, (7, 5, 7)) for p in ps]})
    for i, p in enumerate(ps):
        assert tokens(out[i]) == alone("llama", p)
    assert sum(dropped) > 0


def test_eos_and_stop_strings_inside_accepted_runs_in_a_batch():
    """The word tokenizer decodes cleanly, so stop strings can be checked on text."""
    tok = tiny_word_tokenizer()
    eng = tiny_engine("llama", ENGINE_SPEC, tokenizer=tok)
    p = tuple(tok.encode("one , two , three , four , five , six , seven"))
    free = eng.greedy(list(p), max_tokens=40, ignore_eos=True)
    text = free.text
    cut_token = free.tokens[20]
    stop_word = tok.decode([free.tokens[25]]).strip()
    batch = eng.new_batch()
    out = run(batch, {0: [request(p, (7, 5, 7), max_tokens=40, stop_token_ids=(cut_token,)),
                          request(p, (7, 5, 7), max_tokens=40, stop=(stop_word,)),
                          request(p, (1, 1, 0), max_tokens=40)]})
    first = tokens(out[0])
    assert first[-1] == cut_token and first == tuple(free.tokens[:len(first)])
    assert out[0][-1].finish_reason == "stop"
    assert out[1][-1].finish_reason == "stop"
    assert "".join(c.text for c in out[1]) == text[:text.index(stop_word)]  # cut before its first occurrence
    assert tokens(out[2]) == tuple(free.tokens)
    assert any(len(c.tokens) > 1 for c in out[0])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5),
                                   st.sampled_from([(7, 5, 7), (2, 3, 2), (1, 1, 0), (4, 2, 4), (5, 5, 1)])),
                         min_size=1, max_size=6),
       max_batch=st.integers(1, 4), budget=st.sampled_from([None, 8, 24]), lookup=st.sampled_from([0, 4]))
def test_property_any_arrival_schedule_is_greedy(schedule, max_batch, budget, lookup):
    """... with or without prompt-lookup candidates (preset fast: N-1 tokens) next to the pool's."""
    eng = engine()
    _schedule_is_greedy(eng, schedule, max_batch, budget, dataclasses.replace(eng.settings, prompt_lookup=lookup))


def _schedule_is_greedy(eng, schedule, max_batch, budget, settings=None):
    ps = prompts()
    arrivals: dict[int, list] = {}
    order = []
    for step, prompt_index, spec in sorted(schedule, key=lambda item: item[0]):
        arrivals.setdefault(step, []).append(request(ps[prompt_index], spec, max_tokens=16))
        order.append(prompt_index)
    if budget is not None and budget < max_batch:
        budget = max_batch
    out = run(eng.new_batch(max_batch_size=max_batch, max_num_tokens=budget, settings=settings), arrivals)
    for i, prompt_index in enumerate(order):
        assert tokens(out[i]) == alone("llama", ps[prompt_index], 32)[:16]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_fast_preset_in_a_batch_with_a_token_budget(arch):
    """Prompt-lookup candidates in a batch: lossless per request, their rows within the step budget."""
    eng = engine(arch)
    tok = tiny_tokenizer()
    texts = ["one two three one two three one two", "a b c d a b c d a b", "def f(x): return x\ndef f(x):"]
    reqs = [request(tok.encode(t), s) for t, s in zip(texts, [(7, 5, 7), (2, 3, 2), None])]
    reqs.append(request(prompts()[0], (1, 1, 0)))
    batch = eng.new_batch(max_batch_size=4, max_num_tokens=20,
                          settings=dataclasses.replace(eng.settings, prompt_lookup=4))
    rows = []
    original = batch.step

    def step():
        out = original()
        rows.append(batch.last.rows)
        return out

    batch.step = step
    out = run(batch, {0: reqs})
    for i, req in enumerate(reqs):
        assert tokens(out[i]) == alone(arch, req.prompt_ids), f"request {i}"
    assert max(rows) <= 20  # the lookup rows are counted against the budget like any draft
    assert any(len(c.tokens) > 1 for i in range(3) for c in out[i])


def test_a_new_batch_supersedes_the_old_one():
    eng = engine()
    old = eng.new_batch()
    old.add(request(prompts()[0]))
    old.step()
    eng.new_batch()
    with pytest.raises(RuntimeError, match="superseded"):
        old.step()


def test_cancelling_in_a_superseded_batch_leaves_the_new_batchs_slots_alone():
    eng = engine()
    old = eng.new_batch()
    stale = old.add(request(prompts()[0]))
    old.step()
    new = eng.new_batch()
    mine = new.add(request(prompts()[1]))
    out = [c for sid, c in new.step() if sid == mine]  # it holds the slot the old batch held
    assert old.cancel(stale) and old.cancel(stale) is False
    old.close()
    while len(new):
        out += [c for sid, c in new.step() if sid == mine]
    assert tokens(out) == alone("llama", request(prompts()[1]).prompt_ids)


@pytest.mark.parametrize("limits, where", [({"max_running_per_identity": 0}, "max_running_per_identity"),
                                           ({"max_batch_size": 1.5}, "max_batch_size"),
                                           ({"prefill_stall": float("inf")}, "prefill_stall")])
def test_batch_limits_no_batch_could_run_with_are_refused(limits, where):
    from trtlade.errors import TrtladeError

    with pytest.raises(TrtladeError) as err:
        engine().new_batch(**limits)
    assert err.value.where == where and err.value.hint


def test_a_request_that_fails_inside_a_step_raises_from_generate_instead_of_spinning():
    import threading

    eng = engine()
    outcome: list[BaseException] = []

    def go():
        try:
            eng.generate(tiny_tokenizer().encode("def f(x):"), max_tokens=3, stop=[b"ab"])  # bytes: fails in a step
        except BaseException as exc:  # noqa: BLE001 - what it raised is the point
            outcome.append(exc)

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "generate() kept stepping an empty batch"
    assert outcome and not isinstance(outcome[0], AssertionError)


# ------------------------------------------------------------------------------------ through the server
def test_concurrent_http_requests_share_steps_and_stay_exact():
    """Six concurrent completions with different lookahead through the app on a real tiny engine:
    each answer equals the prompt run alone with plain greedy decoding, and the metrics show
    forward passes that carried several sequences."""
    import asyncio

    from fake_engine import client_for, metric_value, run as run_coro
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    eng = tiny_engine("qwen3", ENGINE_SPEC)
    tok = eng.tokenizer
    app = create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4, max_num_tokens=40))
    specs = [[7, 5, 7], [1, 1, 0], [2, 3, 2], [4, 2, 4], None, [5, 5, 1]]
    texts = ["def is_prime(n):", "The quick brown fox", "one, two, three,", "Honey bees live",
             "A train travels", "Hello! How are"]

    async def go():
        async with client_for(app) as c:
            for _ in range(200):
                if (await c.get("/health")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            bodies = [{"prompt": t, "max_tokens": 24, "ignore_eos": True, **({"lookahead": s} if s else {})}
                      for t, s in zip(texts, specs)]
            answers = await asyncio.gather(*(c.post("/v1/completions", json=b) for b in bodies))
            # the step that carried the last tokens is recorded on the engine's thread after they are sent: scrape
            # once the engine is at rest (a scrape reads the counter, then the histogram)
            for _ in range(100):
                metrics = (await c.get("/metrics")).text
                counted = metric_value(metrics, "trtlade_batch_steps_total")
                if metric_value(metrics, "trtlade_batch_step_seconds_count") == counted:
                    break
                await asyncio.sleep(0.02)
            return answers, metrics

    answers, metrics = run_coro(go())
    for text, answer in zip(texts, answers):
        assert answer.status_code == 200, answer.text
        alone_text = eng.greedy(tok.encode(text), max_tokens=24, ignore_eos=True).text
        assert answer.json()["choices"][0]["text"] == alone_text, text
    assert metric_value(metrics, "trtlade_batch_steps_total") > 0
    assert metric_value(metrics, "trtlade_batch_size_sum") > metric_value(metrics, "trtlade_batch_steps_total")
    steps = metric_value(metrics, "trtlade_batch_steps_total")
    assert metric_value(metrics, "trtlade_batch_step_seconds_count") == steps   # one duration per step
    assert 0 < metric_value(metrics, "trtlade_batch_step_seconds_sum") / steps < 5.0
    assert metric_value(metrics, "trtlade_queue_wait_seconds_count") == 6


# ------------------------------------------------------------------------------- a callback that raises
@pytest.mark.parametrize("fail_on", ["first", "every"])
def test_a_raising_on_chunk_loses_no_token_and_the_batch_goes_on(fail_on):
    """``on_chunk`` raising mid-step: the step still commits, hands over and frees every sequence, then raises
    ``ChunkCallbackError`` carrying the step's chunks; stepping on, every request gets exactly its tokens."""
    from trtlade.reference.batching import ChunkCallbackError

    eng = engine("llama")
    batch = eng.new_batch(max_batch_size=4, max_num_tokens=256)
    ps = prompts()[:3]
    short = request(ps[2], max_tokens=3)  # finishes in the step that raises, or soon after
    ids = [batch.add(r) for r in (request(ps[0], lookahead=(2, 3, 2)), request(ps[1]), short)]
    chunks: dict[int, list] = {i: [] for i in ids}
    seen: list[int] = []
    raised = 0

    def callback(seq_id, chunk):
        seen.append(seq_id)
        if fail_on == "every" or len(seen) == 1:
            raise OSError("the client is gone")

    emitting_steps = 0
    while len(batch):
        try:
            out = batch.step(on_chunk=callback)
        except ChunkCallbackError as exc:
            raised += 1
            assert isinstance(exc.__cause__, OSError)
            assert exc.failures == (1 if fail_on == "first" else len(exc.chunks))
            out = exc.chunks
        emitting_steps += bool(out)
        for seq_id, chunk in out:
            chunks[seq_id].append(chunk)
    assert raised == (1 if fail_on == "first" else emitting_steps)
    assert sorted(seen) == sorted(seq_id for seq_id in ids for _ in chunks[seq_id])  # every chunk handed over once
    for seq_id, prompt, max_tokens in zip(ids, ps, (MAX_TOKENS, MAX_TOKENS, 3)):
        assert tokens(chunks[seq_id]) == alone("llama", prompt)[:max_tokens]
        assert chunks[seq_id][-1].finish_reason == "length"
    assert len(batch) == 0


# ------------------------------------------------------------------------------------ prefill together
def run_arrivals(eng, batch, requests) -> tuple[list, list, list, list, dict, int]:
    """``requests`` added together, run to the end, counting forwards: the ids, each forward's block
    rows, ``(seq_id, forwards run when its first token was handed over)``, the first step's returned
    chunks, every request's chunks, and the first step's prefills."""
    forwards: list = []
    real = eng.runner.logits  # every forward runs it
    eng.runner.logits = lambda blocks: forwards.append([b.rows for b in blocks]) or real(blocks)
    try:
        ids = [batch.add(r) for r in requests]
        first: list = []
        delivered = batch.step(on_chunk=lambda seq_id, chunk: first.append((seq_id, len(forwards))))
        prefills = batch.last.prefills
        chunks = {i: [c] for i, c in delivered}
        while len(batch):
            for seq_id, chunk in batch.step():
                chunks[seq_id].append(chunk)
    finally:
        eng.runner.logits = real
    return ids, forwards, first, delivered, chunks, prefills


@pytest.mark.parametrize("arch", ARCHS)
def test_arrivals_in_one_step_share_one_prefill_forward_and_stay_lossless(arch):
    eng = engine(arch)
    batch = eng.new_batch(max_batch_size=4, max_num_tokens=256)
    ps = prompts()[:3]
    ids, forwards, first_step, delivered, chunks, prefills = run_arrivals(
        eng, batch, (request(ps[0]), request(ps[1], lookahead=(2, 3, 2)), request(ps[2], lookahead=(1, 1, 0))))
    assert forwards[0] == [len(p) for p in ps]  # one forward, one causal block per prompt
    assert [seq_id for seq_id, _ in first_step] == ids and [n for _, n in first_step] == [1, 1, 1]
    assert prefills == 3 and [i for i, _ in delivered] == ids  # on_chunk saw what step returned
    for seq_id, prompt in zip(ids, ps):
        assert tokens(chunks[seq_id]) == alone(arch, prompt)


@pytest.mark.parametrize("arch", ARCHS)
def test_arrivals_prefill_shortest_first_in_groups_each_first_token_after_its_own_forward(arch, monkeypatch):
    """Prompts too long to share a forward usefully (here: groups of at least 20 rows) go shortest first,
    a forward per group; each first token leaves when its group's forward ends (not after every prompt's),
    and the tokens are still each prompt's alone."""
    import trtlade.reference.batching as batching

    monkeypatch.setattr(batching, "PREFILL_GROUP_ROWS", 20)
    eng = engine(arch)
    tok = tiny_tokenizer()
    ps = [tuple(tok.encode(t)) for t in ("The quick brown fox jumps over the lazy dog. The quick brown fox jumps",
                                          "Hello! How are", "one, two, three, four, five, six, seven, eight")]
    lengths = [len(p) for p in ps]
    assert lengths[1] < 20 <= lengths[1] + lengths[2] and lengths[2] < lengths[0]
    ids, forwards, first, _, chunks, _ = run_arrivals(eng, eng.new_batch(max_batch_size=4), [request(p) for p in ps])
    assert forwards[:2] == [[lengths[1], lengths[2]], [lengths[0]]]  # the two short ones, then the long one
    assert first == [(ids[1], 1), (ids[2], 1), (ids[0], 2)]
    for seq_id, prompt in zip(ids, ps):
        assert tokens(chunks[seq_id]) == alone(arch, prompt)


def test_the_prefill_budget_splits_arrivals_over_steps():
    eng = engine("llama")
    ps = prompts()[:3]
    budget = len(ps[0]) + len(ps[1])  # the third prompt waits for the next step
    batch = eng.new_batch(max_batch_size=4, max_num_tokens=budget)
    ids = [batch.add(request(p)) for p in ps]
    batch.step()
    assert (batch.last.prefills, batch.last.prefill_tokens) == (2, budget) and batch.waiting == 1
    batch.step()
    assert batch.last.prefills == 1 and batch.waiting == 0
    batch.close()
    assert ids == sorted(ids)


# ------------------------------------------------------------------------------------ draft policies
@pytest.mark.parametrize("arch", ARCHS)
def test_a_schedule_request_stops_drafting_when_the_batch_fills_and_stays_exact(arch):
    """The schedule gave request 0 (4,2,4) when it was alone; when three more arrive, the band for 4
    in flight is (1,1,0): from then on request 0 runs its golden row only (its drafts would delay
    every neighbour), and drafts again once it is alone. Tokens: the greedy ones throughout."""
    from trtlade.schedule import LookaheadSchedule
    from trtlade.spec import LookaheadSpec

    schedule = LookaheadSchedule.parse([{"up_to": 1, "spec": "4,2,4"}, {"spec": "1,1,0"}])
    eng = engine(arch)
    ps = prompts()
    first = request(ps[0], LookaheadSpec(4, 2, 4), max_tokens=40, policy="schedule", schedule=schedule, band=0)
    later = [request(p, LookaheadSpec(1, 1, 0), max_tokens=6, policy="schedule", schedule=schedule, band=1)
             for p in ps[1:4]]
    batch = eng.new_batch(max_batch_size=8)
    out = run(batch, {0: [first], 4: later})
    assert tokens(out[0]) == alone(arch, ps[0], 40)
    for i, p in enumerate(ps[1:4], 1):
        assert tokens(out[i]) == alone(arch, p, 6)
    rows = out[0][-1].stats.rows_per_step  # prefill, then one entry per decoding step
    # steps 1-3 alone: drafts; from step 4 the three others are in flight (prefilled at step 4,
    # decoding from step 5 for 6 tokens): golden row only; alone again after they end: drafts
    assert all(r > 1 for r in rows[1:4])
    assert rows[4:9] == [1] * 5
    assert rows[-1] > 1 or out[0][-1].finish_reason == "length"
    assert any(r > 1 for r in rows[10:])


def test_fixed_and_auto_requests_share_a_batch_and_stay_exact():
    """Explicit specs draft every step whatever the policy decides for the ``auto`` neighbours; with
    rows made dear, the auto requests run their golden row; tokens are the greedy ones for all."""
    from models import frozen_cost
    from trtlade.spec import LookaheadSpec

    eng = tiny_engine("llama", ENGINE_SPEC, adaptive=True)
    saved = eng.policy.cost, eng.policy.plain
    eng.policy.cost = frozen_cost({r: 0.01 * 2 ** r for r in (1, 2, 4, 8, 16, 32, 64)})  # every row doubles the step
    eng.policy.plain = frozen_cost({})  # and the tiny model's real batched steps do not teach it otherwise
    try:
        ps = prompts()
        reqs = [request(ps[0], LookaheadSpec(4, 2, 4)), request(ps[1]), request(ps[2], policy="auto"),
                request(ps[3], LookaheadSpec(2, 3, 2), policy="auto")]
        out = run(eng.new_batch(max_batch_size=8), {0: reqs})
    finally:
        eng.policy.cost, eng.policy.plain = saved
    for i, p in enumerate(ps[:4]):
        assert tokens(out[i]) == alone("llama", p)
    rows = [out[i][-1].stats.rows_per_step[1:] for i in range(4)]
    assert all(r > 1 for r in rows[0][:-1])  # fixed: drafts every step (the last may be cut)
    auto_rows = [r for i in (1, 2, 3) for r in rows[i]]
    assert sum(r > 1 for r in auto_rows) <= 0.1 * len(auto_rows)  # auto on dear rows: plain, a rare probe


def test_a_step_run_while_the_server_admits_a_request_teaches_the_cost_model_nothing(monkeypatch):
    """The server's work beside the steps (a request parsed, templated and tokenized on the same cores:
    ``batch.outside``) slows a step it overlaps: the policy learns no cost from a step that ran while that work
    was in progress, and learns from the next quiet step as before."""
    eng = tiny_engine("llama", ENGINE_SPEC, adaptive=True)
    learned: list[tuple] = []
    monkeypatch.setattr(eng.policy, "observe_cost", lambda *args, **kwargs: learned.append((args, kwargs)))
    batch = eng.new_batch(max_batch_size=8)
    for p in prompts()[:2]:
        batch.add(request(p, max_tokens=MAX_TOKENS))
    for _ in range(4):  # admitted and prefilled, until a decode step of both
        if learned:
            break
        batch.step()
    assert len(learned) == 1 and learned[0][1]["seqs"] == 2
    batch.outside.begin()
    batch.step()
    batch.step()
    assert len(learned) == 1  # both steps ran while a request was being admitted
    batch.outside.end()
    batch.step()
    assert len(learned) == 2 and learned[-1][1]["seqs"] == 2

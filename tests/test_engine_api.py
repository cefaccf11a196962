"""The reference engine's API: stats, streaming, stops inside accepted runs, sampling, errors, reuse,
and step-for-step agreement with the pure-Python simulator."""

from __future__ import annotations

import dataclasses

from functools import lru_cache

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import tiny_engine, tiny_model, tiny_tokenizer, tiny_word_tokenizer
from trtlade.contract.protocol import GenerationRequest
from trtlade.reference.engine import LookaheadNotAdmitted, ModelLoadError, ReferenceEngine, RequestError
from trtlade.reference.kernels import DeviceError, DtypeError
from trtlade.errors import TrtladeError
from trtlade.lookahead.simulate import simulate
from trtlade.spec import LookaheadSpec, SpecError

ENGINE_SPEC = (7, 5, 7)
PROMPT = tuple(tiny_tokenizer().encode("The quick brown fox jumps over the lazy dog. The quick brown"))


@lru_cache(maxsize=None)
def engine():
    return tiny_engine("qwen2", ENGINE_SPEC)


@lru_cache(maxsize=None)
def greedy(prompt: tuple[int, ...] = PROMPT, max_tokens: int = 60) -> tuple[int, ...]:
    return tuple(engine().greedy(list(prompt), max_tokens=max_tokens, ignore_eos=True).tokens)


def multi_token_step(spec=(7, 5, 7), prompt=PROMPT, max_tokens=60):
    """(index of the first token of a step that emitted >= 3 tokens, that step's tokens)."""
    emitted = 0
    for chunk in engine().stream(list(prompt), max_tokens=max_tokens, lookahead=spec, ignore_eos=True):
        if len(chunk.tokens) >= 3:
            return emitted, chunk.tokens
        emitted += len(chunk.tokens)
    raise AssertionError("no step accepted 2 drafts; the tiny model should repeat itself")


# ------------------------------------------------------------------------------------ attributes
def test_engine_attributes():
    eng = engine()
    assert eng.spec == LookaheadSpec(*ENGINE_SPEC)
    assert eng.default_request_spec == eng.spec
    assert eng.eos_token_ids == (0,)
    assert eng.max_seq_len == 512
    assert eng.dtype == "float32"
    assert eng.model_id == "tiny-qwen2"
    assert hasattr(eng.tokenizer, "decode")
    assert eng.sampling_mode == "lookahead"


def test_request_default_must_be_admitted():
    with pytest.raises(LookaheadNotAdmitted) as info:
        tiny_engine("llama", (4, 2, 4), request_default=(4, 3, 4))
    assert info.value.field == "lookahead.n" and info.value.limit == 2


# ------------------------------------------------------------------------------------ stats & stream
def test_stream_chunks_are_steps_and_add_up_to_the_result():
    eng = engine()
    chunks = list(eng.stream(list(PROMPT), max_tokens=50, lookahead=(5, 4, 5), ignore_eos=True))
    result = eng.generate(list(PROMPT), max_tokens=50, lookahead=(5, 4, 5), ignore_eos=True)
    stats = chunks[-1].stats
    assert all(c.finish_reason is None and c.stats is None for c in chunks[:-1])
    assert chunks[-1].finish_reason == "length" == result.finish_reason
    assert [t for c in chunks for t in c.tokens] == result.tokens == list(greedy(PROMPT, 60)[:50])
    assert "".join(c.text for c in chunks) == result.text
    assert stats.steps == len(chunks) == result.steps
    assert stats.tokens == 50 == sum(k * v for k, v in stats.tokens_per_step_hist.items())
    assert sum(stats.tokens_per_step_hist.values()) == stats.steps
    assert len(stats.rows_per_step) == stats.steps and stats.rows_per_step[0] == 1
    assert stats.prompt_tokens == len(PROMPT)
    assert stats.prefill_s > 0 and stats.decode_s > 0
    assert stats.spec == LookaheadSpec(5, 4, 5)
    assert stats.tokens_per_step > 1.0  # the repetitive tiny model accepts drafts


def test_text_is_the_incremental_decoding_of_the_tokens():
    eng = engine()
    result = eng.generate(list(PROMPT), max_tokens=40, ignore_eos=True)
    assert result.text == eng.tokenizer.decode(result.tokens, skip_special_tokens=True)


def test_greedy_has_exactly_one_token_per_step():
    result = engine().greedy(list(PROMPT), max_tokens=30, ignore_eos=True)
    assert result.stats.steps == 30 and result.stats.tokens_per_step == 1.0
    assert result.stats.tokens_per_step_hist == {1: 30} and set(result.stats.rows_per_step) == {1}


def test_repeated_generate_calls_are_identical():
    eng = engine()
    first = eng.generate(list(PROMPT), max_tokens=40, lookahead=(7, 5, 7), ignore_eos=True)
    eng.generate([3, 4, 5], max_tokens=17, lookahead=(2, 2, 1))  # something else in between
    second = eng.generate(list(PROMPT), max_tokens=40, lookahead=(7, 5, 7), ignore_eos=True)
    assert first.tokens == second.tokens and first.text == second.text
    assert first.stats.steps == second.stats.steps
    assert first.stats.rows_per_step == second.stats.rows_per_step


# ------------------------------------------------------------------------------------ stops
def test_stop_token_inside_an_accepted_run():
    start, run = multi_token_step()
    ref = greedy()
    target = run[1]  # the second token of a multi-token step
    index = ref.index(target)
    assert index <= start + 1
    result = engine().generate(list(PROMPT), max_tokens=60, lookahead=(7, 5, 7), stop_token_ids=[target],
                               ignore_eos=True)
    assert tuple(result.tokens) == ref[:index + 1]
    assert result.finish_reason == "stop"
    assert result.stats.tokens == index + 1


def test_eos_inside_an_accepted_run_ends_generation():
    start, run = multi_token_step()
    ref = greedy()
    eos = run[2]
    index = ref.index(eos)
    tok = tiny_tokenizer()
    model = tiny_model("qwen2", len(tok), eos_token_id=eos)
    eng = tiny_engine("qwen2", ENGINE_SPEC, model=model)
    assert eng.eos_token_ids == (eos, tok.eos_token_id)  # generation config first, then the tokenizer's
    index = min(ref.index(e) for e in eng.eos_token_ids if e in ref)
    result = eng.generate(list(PROMPT), max_tokens=60, lookahead=(7, 5, 7))
    assert tuple(result.tokens) == ref[:index + 1] and result.finish_reason == "stop"
    assert result.text == tok.decode(list(ref[:index]), skip_special_tokens=True)  # EOS text hidden
    ignored = eng.generate(list(PROMPT), max_tokens=60, lookahead=(7, 5, 7), ignore_eos=True)
    assert tuple(ignored.tokens) == ref and ignored.finish_reason == "length"


def test_max_tokens_inside_an_accepted_run():
    start, run = multi_token_step()
    budget = start + 2  # ends after the second token of a multi-token step
    result = engine().generate(list(PROMPT), max_tokens=budget, lookahead=(7, 5, 7), ignore_eos=True)
    assert tuple(result.tokens) == greedy()[:budget]
    assert result.finish_reason == "length" and result.stats.tokens == budget


def test_stop_string_inside_an_accepted_run_is_trimmed():
    tok = tiny_word_tokenizer()
    eng = tiny_engine("qwen2", ENGINE_SPEC, tokenizer=tok)
    prompt = tok.encode("The quick brown fox jumps over the lazy dog . The quick brown fox")
    ref = eng.greedy(prompt, max_tokens=60, ignore_eos=True)
    full_text = ref.text
    assert full_text.lstrip() == tok.decode(ref.tokens)  # the text continues the prompt: " is_prime ..."
    # a stop string made of the text of two words inside a multi-token step, seen there first
    stop, emitted = None, 0
    for chunk in eng.stream(prompt, max_tokens=60, lookahead=(7, 5, 7), ignore_eos=True):
        for i in range(len(chunk.tokens) - 1 if len(chunk.tokens) >= 3 else 0):
            candidate = tok.decode(chunk.tokens[i:i + 2])
            if candidate not in tok.decode(ref.tokens[:emitted + i + 1]):
                stop = candidate
                break
        if stop:
            break
        emitted += len(chunk.tokens)
    assert stop is not None, "no new two-word text inside an accepted run"
    cut = full_text.index(stop)
    chunks = list(eng.stream(prompt, max_tokens=60, lookahead=(7, 5, 7), stop=[stop], ignore_eos=True))
    text = "".join(c.text for c in chunks)
    assert text == full_text[:cut]
    assert stop not in text
    assert chunks[-1].finish_reason == "stop"
    tokens = [t for c in chunks for t in c.tokens]
    assert tokens == ref.tokens[:len(tokens)]
    assert stop in tok.decode(tokens)  # the last token completes the stop string
    assert stop not in tok.decode(tokens[:-1])
    assert len(tokens) < 60


def test_min_tokens_suppresses_stops_like_transformers():
    ref = greedy()
    eos = ref[3]
    tok = tiny_tokenizer()
    model = tiny_model("qwen2", len(tok), eos_token_id=eos)
    eng = tiny_engine("qwen2", ENGINE_SPEC, model=model)
    result = eng.generate(list(PROMPT), max_tokens=30, lookahead=(7, 5, 7), min_tokens=12)
    hf = tiny_model("qwen2", len(tok), eos_token_id=eos)
    with torch.inference_mode():
        out = hf.generate(torch.tensor([list(PROMPT)]), do_sample=False, max_new_tokens=30, min_new_tokens=12,
                          eos_token_id=eos, pad_token_id=eos)
    expect = out[0, len(PROMPT):].tolist()
    if eos in expect:
        expect = expect[:expect.index(eos) + 1]
    assert result.tokens == expect
    assert len(result.tokens) >= 12
    assert eos not in result.tokens[:11]


# ------------------------------------------------------------------------------------ sampling
def test_temperature_runs_seeded_sampling_with_lookahead():
    eng = engine()
    a = eng.generate(list(PROMPT), max_tokens=20, temperature=1.0, seed=7, ignore_eos=True)
    b = eng.generate(list(PROMPT), max_tokens=20, temperature=1.0, seed=7, ignore_eos=True)
    c = eng.generate(list(PROMPT), max_tokens=20, temperature=1.0, seed=8, ignore_eos=True)
    plain = eng.generate(list(PROMPT), max_tokens=20, temperature=1.0, seed=7, ignore_eos=True, lookahead=(1, 1, 0))
    assert a.tokens == b.tokens == plain.tokens
    assert a.tokens != c.tokens
    assert a.stats.spec == eng.default_request_spec and max(a.stats.rows_per_step) > 1  # it drafted
    assert (a.stats.seed, plain.stats.seed) == (7, 7)
    assert set(plain.stats.rows_per_step) == {1} and plain.stats.steps == 20


def test_a_sampled_request_without_a_seed_is_given_one_that_reproduces_it():
    eng = engine()
    a = eng.generate(list(PROMPT), max_tokens=12, temperature=1.0, ignore_eos=True)
    assert isinstance(a.stats.seed, int) and 0 <= a.stats.seed < 2**63
    again = eng.generate(list(PROMPT), max_tokens=12, temperature=1.0, seed=a.stats.seed, ignore_eos=True)
    assert again.tokens == a.tokens
    assert eng.generate(list(PROMPT), max_tokens=4).stats.seed is None  # greedy draws nothing
    cold = eng.generate(list(PROMPT), max_tokens=20, temperature=1e-4, seed=1, ignore_eos=True)
    assert tuple(cold.tokens) == greedy()[:20]  # near-zero temperature samples the argmax


# ------------------------------------------------------------------------------------ errors
def test_lookahead_not_admitted_names_field_and_limit():
    with pytest.raises(LookaheadNotAdmitted) as info:
        engine().generate(list(PROMPT), max_tokens=5, lookahead=(8, 5, 7))
    err = info.value
    assert isinstance(err, ValueError)
    assert err.field == "lookahead.w" and err.limit == 7 and err.value == 8
    assert "window_size=8 > 7" in str(err)


@pytest.mark.parametrize("kwargs,field", [
    (dict(prompt_ids=[], max_tokens=5), "prompt_ids"),
    (dict(prompt_ids=[1, 10**6], max_tokens=5), "prompt_ids"),
    (dict(prompt_ids=[1, 2], max_tokens=0), "max_tokens"),
    (dict(prompt_ids=[1, 2], max_tokens=511), "max_tokens"),
    (dict(prompt_ids=[1, 2], max_tokens=5, temperature=-1.0), "temperature"),
    (dict(prompt_ids=[1, 2], max_tokens=5, top_p=0.0), "top_p"),
    (dict(prompt_ids=[1, 2], max_tokens=5, top_k=-1), "top_k"),
    (dict(prompt_ids=[1, 2], max_tokens=5, min_p=1.5), "min_p"),
    (dict(prompt_ids=[1, 2], max_tokens=5, presence_penalty=2.5), "presence_penalty"),
    (dict(prompt_ids=[1, 2], max_tokens=5, frequency_penalty=-3.0), "frequency_penalty"),
    (dict(prompt_ids=[1, 2], max_tokens=5, repetition_penalty=0.0), "repetition_penalty"),
    (dict(prompt_ids=[1, 2], max_tokens=5, min_tokens=6), "min_tokens"),
])
def test_invalid_requests_are_refused_before_any_work(kwargs, field):
    eng = engine()
    with pytest.raises(RequestError) as info:
        eng.stream(**kwargs)  # raised at the call, not at the first next()
    assert info.value.field == field


def test_illegal_lookahead_spec_is_a_value_error():
    with pytest.raises(SpecError):
        engine().generate([1, 2], max_tokens=3, lookahead=(4, 1, 4))


def test_prompt_ids_in_every_usual_form():
    eng = engine()
    ref = eng.generate(list(PROMPT), max_tokens=5).tokens
    encoded = eng.tokenizer("The quick brown fox jumps over the lazy dog. The quick brown")
    assert tuple(encoded["input_ids"]) == PROMPT
    assert eng.generate(encoded, max_tokens=5).tokens == ref
    assert eng.generate(torch.tensor([list(PROMPT)]), max_tokens=5).tokens == ref
    assert eng.generate(torch.tensor(list(PROMPT)), max_tokens=5).tokens == ref
    with pytest.raises(RequestError, match="token ids"):
        eng.generate(["a", "b"], max_tokens=5)


def test_request_dataclass_api():
    eng = engine()
    req = GenerationRequest(prompt_ids=PROMPT, max_tokens=25, lookahead=LookaheadSpec(4, 3, 4), ignore_eos=True)
    result = eng.generate_request(req)
    assert tuple(result.tokens) == greedy()[:25]
    assert [t for c in eng.stream_request(req) for t in c.tokens] == result.tokens


# ------------------------------------------------------------------------------------ reuse
def test_closing_a_stream_early_leaves_the_engine_reusable():
    eng = engine()
    gen = eng.stream(list(PROMPT), max_tokens=60, lookahead=(7, 5, 7), ignore_eos=True)
    next(gen), next(gen)
    gen.close()
    again = eng.generate(list(PROMPT), max_tokens=60, lookahead=(7, 5, 7), ignore_eos=True)
    assert tuple(again.tokens) == greedy()


def test_a_superseded_stream_refuses_to_continue():
    eng = engine()
    old = eng.stream(list(PROMPT), max_tokens=30, ignore_eos=True)
    next(old)
    assert tuple(eng.generate(list(PROMPT), max_tokens=30, ignore_eos=True).tokens) == greedy()[:30]
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)


def test_load_from_a_folder(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok))
    model.save_pretrained(tmp_path / "tiny-llama")
    tok.save_pretrained(tmp_path / "tiny-llama")
    eng = ReferenceEngine.load(tmp_path / "tiny-llama", spec="4,2,4", dtype="float32", threads=1, calibrate=False)
    assert eng.model_id == "tiny-llama" and eng.max_seq_len == 512 and eng.eos_token_ids == (0,)
    assert eng.spec == LookaheadSpec(4, 2, 4) and eng.dtype == "float32"
    ref = tiny_engine("llama", (4, 2, 4), model=model)
    assert eng.generate([5, 6, 7], max_tokens=10, ignore_eos=True).tokens == \
        ref.generate([5, 6, 7], max_tokens=10, ignore_eos=True).tokens
    bf16 = ReferenceEngine.load(tmp_path / "tiny-llama", spec="4,2,4", dtype="bf16", threads=1, calibrate=False)
    assert bf16.dtype == "bfloat16"


def test_load_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        ReferenceEngine.load(tmp_path / "missing", calibrate=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        ReferenceEngine.load(tmp_path / "empty", calibrate=False)
    with pytest.raises(DtypeError, match="unknown dtype") as dtype_error:
        ReferenceEngine.load(tmp_path / "empty", dtype="int8", calibrate=False)
    assert isinstance(dtype_error.value, TrtladeError) and dtype_error.value.where == "dtype"


@pytest.mark.parametrize("device,message", [("tpu", "not a device the reference engine runs on"),
                                            ("cuda:x", "not a device"), ("cuda:99", "sees")])
def test_a_device_it_cannot_run_on_is_refused_before_the_weights_load(tmp_path, monkeypatch, device, message):
    loaded = []
    monkeypatch.setattr("trtlade.reference.engine.load_hf_model", lambda *args: loaded.append(args))
    with pytest.raises(DeviceError, match=message) as error:
        ReferenceEngine.load(tmp_path / "tiny-llama", device=device, calibrate=False)
    assert error.value.where == "device" and "cuda" in error.value.hint.lower() and loaded == []


# ------------------------------------------------------------------------------------ vs simulate
def test_engine_matches_the_simulator_step_for_step():
    """The executable specification: simulate() with a model-backed oracle (a full forward of each
    row's prefix, no cache, no tree mask) gives the same tokens in the same steps."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok))
    eng = tiny_engine("llama", (7, 5, 7), model=tiny_model("llama", len(tok)))

    def oracle(prefix):
        with torch.inference_mode():
            return int(model(torch.tensor([list(prefix)])).logits[0, -1].argmax())

    for spec in [(4, 2, 4), (5, 3, 5), (7, 5, 7)]:
        sim = simulate(oracle, list(PROMPT), spec, max_tokens=40, eos_token_ids=eng.eos_token_ids,
                       seed=eng.settings.seed)
        ours = eng.generate(list(PROMPT), max_tokens=40, lookahead=spec)
        assert ours.tokens == sim.tokens
        assert ours.stats.steps == sim.steps + 1  # + the prefill step
        assert ours.stats.rows_per_step[1:] == sim.rows_per_step
        hist = dict(ours.stats.tokens_per_step_hist)
        hist[1] -= 1
        assert {k: v for k, v in hist.items() if v} == sim.tokens_per_step_hist


# ------------------------------------------------------------------------------------ properties
LEGAL_SPECS = st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(0, 6)).filter(
    lambda s: s[1] > 1 or (s[0] == 1 and s[2] == 0))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.lists(st.integers(1, 319), min_size=1, max_size=24), spec=LEGAL_SPECS,
       max_tokens=st.integers(1, 30), adaptive=st.booleans())
def test_property_lookahead_is_greedy(prompt, spec, max_tokens, adaptive):
    eng = engine()
    ref = eng.greedy(prompt, max_tokens=max_tokens)
    result = eng.generate(prompt, max_tokens=max_tokens, lookahead=spec,
                          settings=dataclasses.replace(eng.settings, adaptive=adaptive))
    s = LookaheadSpec(*spec)
    assert result.tokens == ref.tokens and result.finish_reason == ref.finish_reason
    assert max(result.stats.tokens_per_step_hist) <= s.ngram_size
    assert max(result.stats.rows_per_step) <= max(1, (s.window_size + s.verification_set_size) * (s.ngram_size - 1))
    assert max(result.stats.rows_per_step) <= s.decoding_tokens


def test_auto_policy_stays_lossless_and_spends_fewer_rows_when_rows_are_dear():
    """The auto policy decides per step how many rows a sequence verifies (all, its candidates only,
    or its golden row). With free rows it skips no step but where no draft can gain (a request's last step, its
    budget spent); with dear rows (53 rows cost 2.6x one row) it runs far fewer rows per step. The tokens are the
    greedy ones either way (falling back and probing are covered by the policy's own tests)."""
    from models import frozen_cost

    rows_per_step = {}
    for steep in (False, True):
        eng = tiny_engine("qwen2", ENGINE_SPEC, adaptive=True)
        eng.policy.cost = frozen_cost({rows: 0.01 * (1 + 0.03 * (rows - 1)) if steep else 0.01
                                       for rows in (1, 2, 4, 8, 16, 32, 64)})
        eng.policy.plain = frozen_cost({})
        rows = []
        for prompt in ([5, 17, 99, 3], list(PROMPT), [250, 251, 252, 253, 254]):
            ref = eng.greedy(prompt, max_tokens=80, ignore_eos=True)
            result = eng.generate(prompt, max_tokens=80, lookahead="auto", ignore_eos=True)
            assert result.tokens == ref.tokens
            rows += result.stats.rows_per_step[1:]  # the decoding steps, after the prefill
            assert max(result.stats.rows_per_step) <= LookaheadSpec(*ENGINE_SPEC).decoding_tokens
            if not steep:  # a golden row alone only at the last step
                assert 1 not in result.stats.rows_per_step[1:-1], result.stats.rows_per_step
        rows_per_step[steep] = sum(rows) / len(rows)
        if not steep:
            assert eng.policy.counters.skipped <= 3 and eng.policy.counters.drafted > 0
    assert rows_per_step[True] < 0.5 * rows_per_step[False]


def test_auto_counters_count_the_steps_as_they_ran():
    """Every auto step counts once, as drafted (it verified drafts), skipped or empty (its option had no
    draft when it ran), with nothing expected unless it drafted, so the expected and the accepted drafts of
    /metrics compare the steps that did draft. The plan knows each step's candidates before it chooses (an
    option without one has no rows and is passed over), so on this prompt no step is empty."""
    from models import frozen_cost

    eng = tiny_engine("qwen2", (2, 3, 2), adaptive=True)
    eng.policy.cost = frozen_cost({rows: 0.01 if rows <= 5 else 0.03 for rows in (1, 2, 3, 4, 5, 6, 8, 9, 16)})
    eng.policy.plain = frozen_cost({})
    batch = eng.new_batch(max_batch_size=1)
    batch.add(GenerationRequest(prompt_ids=PROMPT, max_tokens=60, ignore_eos=True))  # the engine default: auto
    decisions = {"drafted": 0, "skipped": 0, "empty": 0}
    while len(batch):
        batch.step()
        report = batch.last
        if report.running and (report.auto_drafted or report.auto_skipped or report.auto_empty):
            assert report.auto_drafted + report.auto_skipped + report.auto_empty == 1
            assert report.auto_drafted == (report.rows > 1)  # drafted: the step verified drafts
            assert report.expected_accepted == 0.0 or report.auto_drafted
            decisions["drafted"] += report.auto_drafted
            decisions["skipped"] += report.auto_skipped
            decisions["empty"] += report.auto_empty
    c = eng.policy.counters
    assert (c.drafted, c.skipped, c.empty) == (decisions["drafted"], decisions["skipped"], decisions["empty"])
    assert c.drafted > 0 and c.empty == 0


def test_requests_with_another_spec_keep_their_own_acceptance_prior():
    """What an explicit (2,2,1) accepts (one draft at most) must not teach ``auto``, which drafts within
    the engine's (7,5,7), what its own steps will accept: their priors are kept apart by spec."""
    eng = tiny_engine("qwen2", ENGINE_SPEC, adaptive=True)
    prompt = list(PROMPT)
    eng.generate(prompt, max_tokens=40, lookahead=(2, 2, 1), ignore_eos=True)
    priors = eng.policy.snapshot()["prior_by_context"]
    assert any(key.endswith("@2,2,1") for key in priors)
    assert not any("/" in key and "@" not in key for key in priors)  # auto's priors untouched
    eng.generate(prompt, max_tokens=40, lookahead=ENGINE_SPEC, ignore_eos=True)  # the engine's spec: shared
    assert any("/" in key and "@" not in key for key in eng.policy.snapshot()["prior_by_context"])


def test_engine_runs_in_a_plain_worker_thread_after_calibration():
    """The server drives the engine from a worker thread with no torch mode set: every runner call
    (calibration's truncate included) must enter inference mode itself."""
    import threading

    eng = tiny_engine("llama", (4, 2, 4))
    eng.calibrate(repeats=1, warmup=0)
    results, errors = [], []

    def run():
        try:
            for la in [(4, 2, 4), (1, 1, 0), (2, 2, 1)]:
                results.append(eng.generate([5, 6, 7, 8], max_tokens=20, lookahead=la, ignore_eos=True).tokens)
                stream = eng.stream([5, 6, 7, 8], max_tokens=20, lookahead=la)
                next(stream)
                stream.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    assert errors == []
    assert len(results) == 3 and results[0] == results[1] == results[2]


@pytest.mark.parametrize("variant", [None, "portable", "off"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_dtype_loads_and_generates_on_every_path(dtype, variant, tmp_path, monkeypatch):
    """On this CPU's best native variant, the portable one forced, and with no native library: each dtype
    loads (no oneDNN call whose CPU requirement was not checked: bf16 raised on AVX2-only CPUs), generates,
    says which kernels run, and lookahead gives greedy's tokens where the engine says it is bit-exact."""
    if variant == "off":
        monkeypatch.setenv("TRTLADE_NATIVE_ISA", "no-such-variant")  # the library then runs nothing
    elif variant:
        monkeypatch.setenv("TRTLADE_NATIVE_ISA", variant)
    tok = tiny_tokenizer()
    model = tiny_model("llama", len(tok))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    eng = ReferenceEngine.load(tmp_path / "m", spec="4,2,4", dtype=dtype, threads=1, calibrate=False)
    greedy = eng.generate([5, 6, 7, 5, 6], max_tokens=12, lookahead=(1, 1, 0), ignore_eos=True).tokens
    ahead = eng.generate([5, 6, 7, 5, 6], max_tokens=12, lookahead=(4, 2, 4), ignore_eos=True).tokens
    assert len(greedy) == len(ahead) == 12
    kernels = eng.exactness["kernels"]
    native = dtype != "float16" and variant != "off"
    assert kernels.startswith("native") == native, kernels
    if variant == "portable" and native:
        assert kernels == "native portable (one call per step)"
    assert eng.bit_exact == native and (not native or ahead == greedy)


@pytest.mark.parametrize("kwargs, field", [
    ({"stop": [b"ab"]}, "stop"), ({"stop": [""]}, "stop"), ({"logprobs": 1.5}, "logprobs"),
    ({"logprobs": True}, "logprobs"), ({"ignore_eos": "false"}, "ignore_eos"),
    ({"stop_token_ids": [184.7]}, "stop_token_ids"),
])
def test_fields_a_step_would_fail_on_are_refused_before_it(kwargs, field):
    from trtlade.reference.engine import RequestError

    eng = tiny_engine("llama", (2, 4, 2))
    with pytest.raises(RequestError) as err:
        eng.generate(tiny_tokenizer().encode("def f(x):"), max_tokens=3, **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("prompt", [[1.5, 2.0], ["5", "6"], b"ab"])
def test_prompt_ids_are_integers_never_truncated_or_read_as_characters(prompt):
    from trtlade.reference.engine import RequestError

    with pytest.raises(RequestError) as err:
        tiny_engine("llama", (2, 4, 2)).generate(prompt, max_tokens=2)
    assert err.value.field == "prompt_ids"


def test_a_prompt_that_fills_the_context_is_blamed_on_the_prompt():
    from trtlade.reference.engine import RequestError

    eng = tiny_engine("llama", (2, 4, 2))
    with pytest.raises(RequestError) as err:
        eng.generate([5] * eng.max_seq_len, max_tokens=1)
    assert err.value.field == "prompt_ids" and f"at most {eng.max_seq_len - 1} tokens" in err.value.hint


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 1.5, "1", True])
def test_a_seed_is_a_64_bit_integer_never_wrapped_or_truncated_onto_another(seed):
    from trtlade.reference.engine import RequestError

    with pytest.raises(RequestError) as err:
        tiny_engine("llama", (2, 4, 2)).generate([5, 6, 7], max_tokens=2, temperature=0.7, seed=seed)
    assert err.value.field == "seed"


@pytest.mark.parametrize("threads", [0, 10**6, 1.5])
def test_a_thread_count_no_machine_runs_with_is_refused_at_load(threads):
    """10**6 was accepted and the tokenizer's thread pool then crashed the process."""
    from trtlade.errors import TrtladeError

    from trtlade.reference.engine import ReferenceEngine

    with pytest.raises(TrtladeError) as err:
        ReferenceEngine(tiny_model("llama", len(tiny_tokenizer())), tiny_tokenizer(), (2, 4, 2), calibrate=False,
                        threads=threads)
    assert err.value.where == "threads"


@pytest.mark.parametrize("settings, where", [({"prompt_lookup": -1}, "prompt_lookup"),
                                             ({"ngram_implementation": "bogus"}, "ngram_implementation"),
                                             ({"max_global_pool_size": -1}, "max_global_pool_size")])
def test_draft_settings_every_request_would_fail_on_are_refused_where_they_are_made(settings, where):
    from trtlade.errors import TrtladeError
    from trtlade.reference.batching import DraftSettings

    with pytest.raises(TrtladeError) as err:
        DraftSettings(**settings)
    assert err.value.where == where


@pytest.mark.parametrize("name, fragment", [(None, "a drafter mode is a name"), ("sa-4--x", "'-x' is neither")])
def test_a_drafter_mode_that_is_no_name_is_said_as_such(name, fragment):
    from trtlade.drafting.config import DraftConfigError, drafter_mode

    with pytest.raises(DraftConfigError, match=fragment):
        drafter_mode(name)

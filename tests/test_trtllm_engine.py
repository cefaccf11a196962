"""The TensorRT-LLM executor engine against the test double of tensorrt_llm.bindings.executor."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from fake_engine import client_for, make_tiny_tokenizer, metric_value, run, sse_events, wait_until
from trtlade.spec import LookaheadSpec, SpecError

ENGINES = Path(__file__).resolve().parent / "data" / "engines"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    make_tiny_tokenizer(folder)
    return folder


@pytest.fixture
def tle(fake_trtllm):
    import tensorrt_llm.bindings.executor as tle

    tle._fail_after_iterations = None
    tle._iteration_delay = 0.0
    tle._instances.clear()
    tle._fail_start = None
    yield tle
    tle._fail_after_iterations = None
    tle._iteration_delay = 0.0


def launch(tokenizer_dir, engine="qwen3-8b-424", spec=(4, 2, 4), **kw):
    from trtlade.trtllm.engine import TrtllmLaunch

    return TrtllmLaunch(engine_dir=ENGINES / engine, spec=LookaheadSpec(*spec), tokenizer_dir=tokenizer_dir, **kw)


def trtllm_app(tokenizer_dir, **kw):
    from trtlade.trtllm.engine import TrtllmEngine
    from trtlade.server.app import create_app

    lau = launch(tokenizer_dir, **kw)
    return create_app(lambda: TrtllmEngine.start(lau))


PROMPT = "Hello world! The quick brown fox"


# ------------------------------------------------------------------------------------------ the double
def test_double_request_is_keyword_only_and_needs_max_tokens(tle):
    with pytest.raises(TypeError):
        tle.Request([1, 2], 8)  # 0.16: max_tokens is keyword-only
    with pytest.raises(RuntimeError, match="missing required argument max_tokens"):
        tle.Request([1, 2])  # and required: the binding's assertion, not Python's
    req = tle.Request([1, 2], max_tokens=8, streaming=True, end_id=2)
    assert (req.max_tokens, req.streaming, req.end_id, req.lookahead_config) == (8, True, 2, None)


@pytest.mark.parametrize("wng, rule", [
    ((4, 0, 4), "ngramSize requires >= 1"), ((0, 2, 4), "windowSize requires >= 1"),
    ((4, 2, -1), "verificationSetSize requires >=0"), ((4, 1, 0), "ngramSize=1 requires windowSize=1"),
    ((1, 1, 2), "ngramSize=1 requires verificationSetSize=0"),
    ((4, 1, 2), "ngramSize=1 requires verificationSetSize=0"),
    ((4, 1, -1), "ngramSize=1 requires verificationSetSize=0"),
])
def test_double_lookahead_config_legality(tle, wng, rule):
    with pytest.raises(RuntimeError, match=rule):
        tle.LookaheadDecodingConfig(*wng)


def test_the_spec_names_the_rule_the_double_names_first(tle):
    """Over every small (W,N,G), legal and not: LookaheadSpec refuses exactly what the double's constructor refuses,
    naming the same rule (the first broken, in the constructor's order)."""
    for wng in itertools.product(range(-1, 3), repeat=3):
        try:
            tle.LookaheadDecodingConfig(*wng)
            upstream = None
        except RuntimeError as exc:
            upstream = str(exc)
        try:
            LookaheadSpec(*wng)
            ours = None
        except SpecError as exc:
            ours = exc.rule
        assert (ours is None) == (upstream is None) and (ours is None or ours in upstream), (wng, ours, upstream)


@pytest.mark.parametrize("wng", [(2**31, 2, 2), (4, 2**31, 4), (4, 2, 2**31)])
def test_double_refuses_a_size_beyond_int32_as_pybind_does(tle, wng):
    """Each size is a SizeType32: the binding cannot convert a larger int, and the spec refuses it first."""
    with pytest.raises(TypeError, match="incompatible function arguments"):
        tle.LookaheadDecodingConfig(*wng)
    with pytest.raises(SpecError, match="SizeType32"):
        LookaheadSpec(*wng)


@pytest.mark.parametrize("wng, draft", [((4, 2, 4), 7), ((7, 7, 7), 83), ((4, 3, 4), 15), ((1, 1, 0), 0)])
def test_double_speculative_resource_matches_the_spec(tle, wng, draft):
    assert tle.LookaheadDecodingConfig(*wng).calculate_speculative_resource() == \
        (draft + 1, wng[1], draft, wng[1] - 1)
    assert LookaheadSpec(*wng).max_draft_len == draft


def lookahead_decoding(tle, w, n, g):
    """The decoding config as TensorRT-LLM's own code builds it: the mode passed with the config."""
    return tle.DecodingConfig(decoding_mode=tle.DecodingMode.Lookahead(),
                              lookahead_decoding_config=tle.LookaheadDecodingConfig(w, n, g))


# What the real bindings refuse, the double refuses, with the real message (each check in the double
# cites the C++ file and function it mirrors). One row per refusal: (what is built, the message).
REFUSALS = [
    # decodingConfig.cpp, DecodingConfig::DecodingConfig: the defect of trtlade serve before issue 26
    (lambda t: t.DecodingConfig(lookahead_decoding_config=t.LookaheadDecodingConfig(4, 2, 4)),
     "LookaheadDecodingConfig is set, but DecodingMode is not set"),
    (lambda t: t.DecodingConfig(decoding_mode=t.DecodingMode.TopKTopP(),
                                lookahead_decoding_config=t.LookaheadDecodingConfig(4, 2, 4)),
     "LookaheadDecodingConfig is set, but DecodingMode is not set to Lookahead"),
    # decodingConfig.cpp, DecodingConfig::setDecodingMode
    (lambda t: setattr(t.DecodingConfig(), "decoding_mode", t.DecodingMode.Lookahead()),
     "Decoding mode must not be set with `setDecodingMode` for Medusa, Lookahead"),
    # decodingConfig.cpp, LookaheadDecodingConfig::LookaheadDecodingConfig: the C++ order of the checks
    (lambda t: t.LookaheadDecodingConfig(4, 1, 2), "ngramSize=1 requires verificationSetSize=0"),
    # kvCacheConfig.cpp, setFreeGpuMemoryFraction: strictly below 1
    (lambda t: t.KvCacheConfig(free_gpu_memory_fraction=1.0), r"freeGpuMemoryFraction < 1\.F"),
    (lambda t: t.KvCacheConfig(free_gpu_memory_fraction=0.0), r"freeGpuMemoryFraction > 0\.F"),
    (lambda t: t.KvCacheConfig(max_tokens=0), "maxTokens > 0"),
    (lambda t: t.KvCacheConfig(max_attention_window=[4096, 0]), "maxAttentionWindow > 0"),
    # executorConfig.cpp, ExecutorConfig::ExecutorConfig
    (lambda t: t.ExecutorConfig(max_beam_width=0), "mMaxBeamWidth > 0"),
    # samplingConfig.cpp, SamplingConfig::check*
    (lambda t: t.SamplingConfig(0), "beamWidth > 0"),
    (lambda t: t.SamplingConfig(1, top_p=0.0), "topP.value\\(\\) > 0.f"),
    (lambda t: t.SamplingConfig(1, temperature=-0.5), "temperature.value\\(\\) >= 0.f"),
    (lambda t: t.SamplingConfig(1, min_tokens=-1), "minTokens.value\\(\\) >= 0"),
    (lambda t: t.SamplingConfig(1, repetition_penalty=0.0), "repetitionpenalty.value\\(\\) > 0.f"),
    # requestImpl.h, Request::Impl::validate
    (lambda t: t.Request([], max_tokens=4), "!mInputTokenIds.empty\\(\\)"),
    (lambda t: t.Request([1, 2], max_tokens=0), "mMaxNewTokens > 0"),
]


@pytest.mark.parametrize("build, message", REFUSALS)
def test_double_refuses_what_the_real_bindings_refuse(tle, build, message):
    with pytest.raises(RuntimeError, match=message):
        build(tle)


def test_the_old_serve_decoding_config_fails_on_the_double(tle):
    """Issue 26's defect: DecodingConfig(lookahead_decoding_config=la) without a mode never starts."""
    with pytest.raises(RuntimeError, match="DecodingMode is not set"):
        tle.ExecutorConfig(max_beam_width=1, decoding_config=tle.DecodingConfig(
            lookahead_decoding_config=tle.LookaheadDecodingConfig(4, 2, 4)))


def test_double_lookahead_setter_sets_the_mode_and_the_constructor_with_mode_works(tle):
    by_setter = tle.DecodingConfig()
    by_setter.lookahead_decoding_config = tle.LookaheadDecodingConfig(4, 2, 4)
    by_ctor = lookahead_decoding(tle, 4, 2, 4)
    for cfg in (by_setter, by_ctor):
        assert cfg.decoding_mode.isLookahead() and cfg.lookahead_decoding_config.max_window_size == 4
    assert not tle.LookaheadDecodingConfig.is_legal(4, 1, 0) and tle.LookaheadDecodingConfig.is_legal(1, 1, 0)


@pytest.mark.parametrize("version, default", [("0.16.0", False), ("1.2.0", True)])
def test_double_block_reuse_default_follows_the_version(tle, fake_trtllm, monkeypatch, version, default):
    monkeypatch.setattr(fake_trtllm, "__version__", version)
    cfg = tle.KvCacheConfig()
    assert cfg.enable_block_reuse is default and not cfg._block_reuse_explicit
    assert tle.KvCacheConfig(enable_block_reuse=False)._block_reuse_explicit


def test_double_executor_start_checks_are_the_real_ones(tle):
    """setupSpeculativeDecodingModule: a larger spec fails TLLM_CHECK(maxDraftTokens <= ...); a smaller one sets the
    decoder to its own size and starts; no config leaves the default (4,3,4) against the engine's size."""
    too_big = tle.ExecutorConfig(max_beam_width=1, decoding_config=lookahead_decoding(tle, 7, 7, 7))
    with pytest.raises(RuntimeError, match=r"Assertion failed: maxDraftTokens <= mModelConfig\."):
        tle.Executor(ENGINES / "qwen3-8b-424", tle.ModelType.DECODER_ONLY, too_big)
    smaller = tle.ExecutorConfig(max_beam_width=1, decoding_config=lookahead_decoding(tle, 4, 3, 4))
    assert tle.Executor(ENGINES / "qwen3-8b-draft39", tle.ModelType.DECODER_ONLY, smaller)._spec == (4, 3, 4)
    with pytest.raises(RuntimeError, match="Assertion failed: 16 != 40"):  # no executor lookahead config
        tle.Executor(ENGINES / "qwen3-8b-draft39", tle.ModelType.DECODER_ONLY, tle.ExecutorConfig(max_beam_width=1))


def test_double_plain_engine_overwrites_a_lookahead_mode_with_a_warning(tle):
    """getDecodingMode (trtGptModelInflightBatching.cpp): Lookahead on a plain engine is replaced, not refused."""
    ex = tle.Executor(ENGINES / "qwen3-8b-plain", tle.ModelType.DECODER_ONLY,
                      tle.ExecutorConfig(max_beam_width=1, decoding_config=lookahead_decoding(tle, 1, 1, 0)))
    assert ex._spec == (1, 1, 0) and "Overwriting decoding mode" in ex._warnings[0]
    plain = tle.Executor(ENGINES / "qwen3-8b-plain", tle.ModelType.DECODER_ONLY, tle.ExecutorConfig(max_beam_width=1))
    assert plain._warnings == []
    ex.shutdown()
    plain.shutdown()


def test_double_without_a_config_on_the_defaults_size_starts_and_fails_every_request(tle, tmp_path):
    """An engine of 15 draft tokens is the default (4,3,4)'s size: CpuAlgorithmResources agrees, and then
    CreateNewDecoderRequests checks the executor's config for every request, its own (w,n,g) or not."""
    engine = tmp_path / "e15"
    shutil.copytree(ENGINES / "qwen3-8b-424", engine)
    config = json.loads((engine / "config.json").read_text())
    config["build_config"]["max_draft_len"] = 15
    (engine / "config.json").write_text(json.dumps(config))
    ex = tle.Executor(engine, tle.ModelType.DECODER_ONLY, tle.ExecutorConfig(max_beam_width=1))
    ids = [ex.enqueue_request(tle.Request([5, 6], max_tokens=4, streaming=True)),
           ex.enqueue_request(tle.Request([5, 6], max_tokens=4, streaming=True,
                                          lookahead_config=tle.LookaheadDecodingConfig(2, 2, 2)))]
    responses = ex.await_responses(timeout=timedelta(milliseconds=10))
    assert sorted(r.request_id for r in responses) == sorted(ids)
    assert all(r.has_error() and "Assertion failed: Lookahead decoding config must be provided" in r.error_msg
               for r in responses)
    ex.shutdown()


def test_double_oversize_request_lookahead_fails_every_active_request(tle):
    """LookaheadAlgorithm::setup throws inside the step; Executor::Impl::forwardAsync catches it and
    terminateActiveRequests gives every active request the same error."""
    cfg = tle.ExecutorConfig(max_beam_width=1, decoding_config=lookahead_decoding(tle, 4, 2, 4))
    ex = tle.Executor(ENGINES / "qwen3-8b-424", tle.ModelType.DECODER_ONLY, cfg)
    good = [ex.enqueue_request(tle.Request([5, 6], max_tokens=4, streaming=True)) for _ in range(2)]
    bad = ex.enqueue_request(tle.Request([5, 6], max_tokens=4, streaming=True,
                                         lookahead_config=tle.LookaheadDecodingConfig(5, 2, 4)))
    responses = ex.await_responses(timeout=timedelta(milliseconds=10))
    assert sorted(r.request_id for r in responses) == sorted([*good, bad])
    assert all(r.has_error() and r.error_msg.startswith("Encountered an error in forwardAsync function: ")
               and "lookahead requires setup w (5) <= max_w (4)" in r.error_msg for r in responses)
    assert ex._active == {}
    ex.shutdown()


def test_double_prompt_limit_is_the_executors(tle, tmp_path):
    """TrtGptModel: min(max_seq_len - 1, max_num_tokens) with context FMHA and packed input; the prompt
    above it fails alone (fetchNewRequests), the others go on."""
    engine = engine_copy(tmp_path, "qwen3-8b-424", max_input_len=300, max_num_tokens=200)
    cfg = tle.ExecutorConfig(max_beam_width=1, decoding_config=lookahead_decoding(tle, 4, 2, 4))
    ex = tle.Executor(engine, tle.ModelType.DECODER_ONLY, cfg)
    long_id = ex.enqueue_request(tle.Request([7] * 201, max_tokens=4, streaming=True))
    ok_id = ex.enqueue_request(tle.Request([7] * 200, max_tokens=4, streaming=True))
    by_id = {r.request_id: r for r in ex.await_responses(timeout=timedelta(milliseconds=10))}
    assert "Prompt length (201) exceeds maximum input length (200)." in by_id[long_id].error_msg
    assert not by_id[ok_id].has_error()
    ex.shutdown()


def engine_copy(tmp_path, name, **build_config):
    """A copy of a test engine's config.json with some build_config keys changed."""
    import json

    folder = tmp_path / f"{name}-edited"
    folder.mkdir()
    raw = json.loads((ENGINES / name / "config.json").read_text())
    raw["build_config"].update(build_config)
    (folder / "config.json").write_text(json.dumps(raw))
    for rank in (ENGINES / name).glob("rank*.engine"):
        (folder / rank.name).write_bytes(rank.read_bytes())
    return folder


# ------------------------------------------------------------------------------------------ start-up
def test_config_mismatch_refuses_to_start_with_validate_configs_message(tle, tokenizer_dir):
    from trtlade.trtllm.engine import TrtllmStartError, preflight
    from trtlade.trtllm.engine_config import check_engine, read_engine_config

    spec = LookaheadSpec(4, 3, 4)
    with pytest.raises(TrtllmStartError) as info:
        preflight(launch(tokenizer_dir, engine="qwen3-8b-draft39", spec=(4, 3, 4)))
    expected = [d.format_text() for d in check_engine(spec, read_engine_config(ENGINES / "qwen3-8b-draft39"))
                if d.severity == "error"]
    assert expected and all(text in info.value.message for text in expected)
    assert "not caught at start" in info.value.message
    assert tle._instances == []  # refused before any executor was built


def test_plain_engine_with_a_lookahead_spec_is_refused(tle, tokenizer_dir):
    from trtlade.trtllm.engine import TrtllmStartError, preflight

    with pytest.raises(TrtllmStartError, match="lookahead"):
        preflight(launch(tokenizer_dir, engine="qwen3-8b-plain"))


@pytest.mark.parametrize("version, fragment", [("1.3.0", "too new"), ("0.15.0", "too old")])
def test_unsupported_tensorrt_llm_version_is_refused(fake_trtllm, tokenizer_dir, version, fragment):
    from trtlade.trtllm.engine import TrtllmStartError, preflight

    fake_trtllm.__version__ = version
    with pytest.raises(TrtllmStartError, match=fragment) as info:
        preflight(launch(tokenizer_dir))
    assert "0.16 <= version < 1.3" in info.value.message


def test_missing_tensorrt_llm_is_refused(tokenizer_dir, monkeypatch):
    import sys

    from trtlade.trtllm.engine import TrtllmStartError, preflight

    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # import fails as when not installed
    with pytest.raises(TrtllmStartError, match="not installed"):
        preflight(launch(tokenizer_dir))


def test_multi_gpu_engine_needs_mpirun_with_the_exact_command(tle, tokenizer_dir):
    from trtlade.trtllm.engine import TrtllmStartError, preflight

    lau = launch(tokenizer_dir, engine="qwen3-8b-424-tp2", argv=("serve", "--config", "deploy tp2.yml"))
    with pytest.raises(TrtllmStartError) as info:
        preflight(lau, env={})
    assert "2 ranks" in info.value.message
    assert "mpirun -n 2 trtlade serve --config 'deploy tp2.yml'" in info.value.hint
    with pytest.raises(TrtllmStartError, match="started with 4 MPI processes"):
        preflight(lau, env={"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"})
    pre = preflight(lau, env={"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"})
    assert pre.world.size == 2 and not pre.world.is_leader
    pre = preflight(lau, env={"PMI_SIZE": "2", "PMI_RANK": "0"})
    assert pre.world.is_leader


def test_follower_exits_when_the_leader_shuts_down(tle, tokenizer_dir, monkeypatch):
    """Executor::Impl::shutdown on a follower joins until the leader's terminate request: the follower
    calls it at once and returns when the leader's executor shuts down (mpirun waits for every rank)."""
    from trtlade.trtllm.engine import preflight, run_follower

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    tle._leader_terminated.clear()
    lau = launch(tokenizer_dir, engine="qwen3-8b-424-tp2")
    thread = threading.Thread(target=run_follower, args=(lau, preflight(lau), threading.Event()))
    thread.start()
    assert wait_until(lambda: len(tle._instances) == 1)
    assert not tle._instances[0].can_enqueue_requests()
    thread.join(0.5)
    assert thread.is_alive()  # the leader still runs
    tle._leader_terminated.set()  # what the leader's Executor.shutdown() broadcasts
    thread.join(5)
    assert not thread.is_alive() and tle._instances[0]._shutdown


def test_follower_stopped_by_a_signal_gives_up_after_the_grace(tle, tokenizer_dir, monkeypatch):
    from trtlade.trtllm.engine import preflight, run_follower

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    tle._leader_terminated.clear()
    lau = launch(tokenizer_dir, engine="qwen3-8b-424-tp2")
    stop = threading.Event()
    stop.set()  # SIGTERM arrived, the leader never shut down
    thread = threading.Thread(target=run_follower, args=(lau, preflight(lau), stop), kwargs={"grace_s": 0.2})
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    tle._leader_terminated.set()  # release the double's blocked shutdown thread


def test_executor_config_carries_the_server_spec(tle, tokenizer_dir):
    from trtlade.trtllm.engine import TrtllmEngine

    engine = TrtllmEngine.start(launch(tokenizer_dir, kv_cache_free_gpu_memory_fraction=0.85))
    try:
        ex = tle._instances[-1]
        assert ex._spec == (4, 2, 4)
        assert engine.info.limits.max_seq_len == 4096 + 0  # qwen3-8b-424: max_seq_len minus max_draft_len
        # the executor's limit (context FMHA, packed input): min(max_seq_len - 1, max_num_tokens) = 4102,
        # kept one below the usable 4096 for output; max_input_len 2048 does not bind (TrtGptModel)
        assert engine.info.limits.max_prompt_tokens == 4095
        assert engine.info.details["preset"] == "trtllm"  # the only algorithm TensorRT-LLM runs
    finally:
        run(engine.aclose())


def assert_built_like_tensorrt_llm(config, spec, fraction=None, reuse=False):
    """The executor config as TensorRT-LLM's sources require: DecodingMode.Lookahead() with the lookahead
    config, KV block reuse passed explicitly (its default differs across versions)."""
    decoding = config.decoding_config
    assert decoding.decoding_mode.isLookahead()
    la = decoding.lookahead_decoding_config
    assert (la.max_window_size, la.max_ngram_size, la.max_verification_set_size) == spec
    assert config.kv_cache_config._block_reuse_explicit and config.kv_cache_config.enable_block_reuse is reuse
    assert config.kv_cache_config.free_gpu_memory_fraction == fraction
    assert config.max_beam_width == 1


@pytest.mark.parametrize("version", ["0.16.0", "1.2.0"])
def test_leader_builds_the_executor_config_like_tensorrt_llm(tle, fake_trtllm, monkeypatch, tokenizer_dir,
                                                             version):
    from trtlade.trtllm.engine import TrtllmEngine

    monkeypatch.setattr(fake_trtllm, "__version__", version)
    engine = TrtllmEngine.start(launch(tokenizer_dir, kv_cache_free_gpu_memory_fraction=0.85))
    try:
        assert_built_like_tensorrt_llm(tle._instances[-1]._config, (4, 2, 4), fraction=0.85)
    finally:
        run(engine.aclose())


def test_follower_builds_the_same_executor_config(tle, tokenizer_dir, monkeypatch):
    from trtlade.trtllm.engine import preflight, run_follower

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    lau = launch(tokenizer_dir, engine="qwen3-8b-424-tp2", kv_cache_enable_block_reuse=True)
    tle._leader_terminated.set()  # the leader is already done: build the executor, then return at once
    thread = threading.Thread(target=run_follower, args=(lau, preflight(lau), threading.Event()))
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert_built_like_tensorrt_llm(tle._instances[-1]._config, (4, 2, 4), reuse=True)


@pytest.mark.parametrize("error, code, hint", [
    ("[TensorRT-LLM][ERROR] Assertion failed: LookaheadDecodingConfig is set, but DecodingMode is not set "
     "(/src/cpp/tensorrt_llm/executor/decodingConfig.cpp:84)", "decoding-mode", "DecodingMode.Lookahead()"),
    ("[TensorRT-LLM][ERROR] Assertion failed: 16 != 40 (/src/cpp/tensorrt_llm/layers/lookaheadDecodingLayer.cpp"
     ":56)", "draft-len-mismatch", "trtlade validate-config"),
    ("[TensorRT-LLM][ERROR] Assertion failed: Speculative decoding module is not set to decoder domain "
     "(/src/cpp/tensorrt_llm/layers/decodingParams.h:97)", "lookahead-mode-on-plain-engine", "lookahead.spec 1,1,0"),
    ("[TensorRT-LLM][ERROR] Assertion failed: maxDraftTokens <= mModelConfig.getMaxDecodingDraftTokens() "
     "(/src/cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp:312)", "draft-len-too-large",
     "validate-config"),
    ("[TensorRT-LLM][ERROR] Assertion failed: Rewinding KV cache blocks for variable SWA models isn't supported "
     "(/src/cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp:300)", "lookahead-variable-swa",
     "reference engine"),
    ("[TensorRT-LLM][ERROR] Assertion failed: Rewinding KV cache blocks for models with multiple pools is not "
     "supported", "lookahead-variable-swa", "max_seq_len within the smallest"),
    ("[TensorRT-LLM][ERROR] No available XQA kernels are found for speculative decoding mode.", "xqa-kernels",
     "upgrade TensorRT-LLM"),
    ("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory", "out-of-memory",
     "kv_cache_free_gpu_memory_fraction"),
    ("[TensorRT-LLM][ERROR] something new", None, "not a failure trtlade knows"),
])
def test_start_failures_are_classified_like_the_build_log(tle, tokenizer_dir, error, code, hint):
    from trtlade.trtllm.engine import TrtllmEngine, TrtllmStartError

    tle._fail_start = error
    with pytest.raises(TrtllmStartError) as info:
        TrtllmEngine.start(launch(tokenizer_dir))
    assert error in info.value.message and hint in info.value.hint
    assert (f"[{code}:" in info.value.message) if code else ("[" not in info.value.message.split(error)[-1])
    if code != "draft-len-mismatch":
        assert "16 != 40" not in info.value.hint  # the old catch-all hint is gone


def test_runtime_with_a_known_lookahead_bug_warns_and_still_starts(tle, fake_trtllm, monkeypatch, tokenizer_dir):
    from trtlade.trtllm.engine import preflight

    monkeypatch.setattr(fake_trtllm, "__version__", "0.20.0")  # the engine itself says 0.16.0
    pre = preflight(launch(tokenizer_dir))
    (warning,) = [w for w in pre.warnings if w.code == "runtime-version-known-bug"]
    assert "NVIDIA/TensorRT-LLM#5451" in warning.message and "0.19.0" in warning.hint


def test_engine_built_by_a_release_with_a_known_bug_warns_in_validate_config(tmp_path):
    import json
    import shutil

    from trtlade.trtllm.engine_config import check_engine, read_engine_config

    shutil.copytree(ENGINES / "qwen3-8b-424", tmp_path / "e")
    raw = json.loads((tmp_path / "e" / "config.json").read_text())
    raw["version"] = "0.20.0"
    (tmp_path / "e" / "config.json").write_text(json.dumps(raw, indent=4))
    diags = check_engine(LookaheadSpec(4, 2, 4), read_engine_config(tmp_path / "e"))
    (bug,) = [d for d in diags if d.code == "engine-version-known-bug"]
    assert bug.severity == "warning" and "#5451" in bug.message and "0.19.0" in bug.hint
    assert bug.file.endswith("config.json") and bug.line == 2 and bug.path == "version"
    assert not [d for d in diags if d.severity == "error"]  # warned, not refused
    raw["build_config"]["max_prompt_embedding_table_size"] = 256  # a multimodal engine: #6009 too
    (tmp_path / "e" / "config.json").write_text(json.dumps(raw, indent=4))
    codes = [d.message for d in check_engine(LookaheadSpec(4, 2, 4), read_engine_config(tmp_path / "e"))
             if d.code == "engine-version-known-bug"]
    assert len(codes) == 2 and any("#6009" in m for m in codes)


# ------------------------------------------------------------------------------------------ serving
def test_completion_streaming_usage_and_acceptance(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            whole = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12})
            streamed = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "stream": True,
                                                             "stream_options": {"include_usage": True}})
            return whole.json(), sse_events(streamed.text)

    whole, events = run(go())
    assert whole["choices"][0]["text"].startswith("Hello world! The quick")  # the double echoes the prompt
    assert whole["choices"][0]["finish_reason"] == "length"
    usage = whole["usage"]
    assert usage["completion_tokens"] == 12
    # the double: 1 token (context), then 2,1,2,1,... with n = 2: 12 tokens in 8 iterations
    assert usage["lookahead"] == {"spec": {"w": 4, "n": 2, "g": 4}, "steps": 8, "tokens_per_step": 1.5}
    chunks = events[:-2]
    assert len(chunks) == 8  # one SSE chunk per executor response (= iteration)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert events[-2]["usage"]["lookahead"]["steps"] == 8
    requests = tle._instances[-1]._requests
    assert all(r.streaming and r.lookahead_config is None for r in requests)  # None = executor's (4,2,4)
    assert requests[0].max_tokens == 12 and requests[0].end_id == 1 and requests[0].pad_id == 0


def test_plain_engine_serves_the_autoregressive_baseline_end_to_end(tle, tokenizer_dir):
    """Spec (1,1,0) on an engine built without lookahead: no decoding mode, no lookahead config, no
    per-request config; completions work and a per-request lookahead above (1,1,0) is a 400."""
    app = trtllm_app(tokenizer_dir, engine="qwen3-8b-plain", spec=(1, 1, 0))

    async def go():
        async with client_for(app) as c:
            ok = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6})
            off = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "lookahead": [1, 1, 0]})
            on = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "lookahead": [2, 2, 1]})
            return ok, off, on, (await c.get("/version")).json()

    ok, off, on, version = run(go())
    ex = tle._instances[-1]
    decoding = ex._config.decoding_config
    assert decoding.decoding_mode is None and decoding.lookahead_decoding_config is None
    assert ex._warnings == []  # nothing for TensorRT-LLM to overwrite
    assert ok.status_code == 200 and off.status_code == 200
    assert ok.json()["usage"]["lookahead"]["tokens_per_step"] == 1.0
    assert all(r.lookahead_config is None for r in ex._requests) and len(ex._requests) == 2
    assert on.status_code == 400 and on.json()["error"]["param"].startswith("lookahead.")
    # a plain engine reserves no draft tokens: the whole max_seq_len is usable
    assert version["engine"]["limits"]["max_seq_len"] == 4096


def test_prompt_limit_is_the_executors_and_a_longer_prompt_is_400(tle, tokenizer_dir, tmp_path):
    """max_input_len 300 but max_num_tokens 200: the executor admits 200 (TrtGptModel); so does trtlade."""
    engine = engine_copy(tmp_path, "qwen3-8b-424", max_input_len=300, max_num_tokens=200)
    from trtlade.server.app import create_app
    from trtlade.trtllm.engine import TrtllmEngine, TrtllmLaunch

    lau = TrtllmLaunch(engine_dir=engine, spec=LookaheadSpec(4, 2, 4), tokenizer_dir=tokenizer_dir)
    app = create_app(lambda: TrtllmEngine.start(lau))

    async def go():
        async with client_for(app) as c:
            version = (await c.get("/version")).json()
            tokens = [5] * 201
            long = await c.post("/v1/completions", json={"prompt": tokens, "max_tokens": 4})
            fits = await c.post("/v1/completions", json={"prompt": tokens[:200], "max_tokens": 4})
            return version, long, fits

    version, long, fits = run(go())
    assert version["engine"]["limits"]["max_prompt_tokens"] == 200
    assert long.status_code == 400 and "at most 200" in long.json()["error"]["message"]
    assert fits.status_code == 200, fits.text
    assert [len(r.input_token_ids) for r in tle._instances[-1]._requests] == [200]


def test_request_lookahead_is_passed_per_request(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            r1 = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "lookahead": [2, 2, 1]})
            r2 = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "lookahead": [1, 1, 0]})
            return r1.json(), r2.json()

    on, off = run(go())
    r1, r2 = tle._instances[-1]._requests
    assert (r1.lookahead_config.max_window_size, r1.lookahead_config.max_ngram_size,
            r1.lookahead_config.max_verification_set_size) == (2, 2, 1)
    assert r2.lookahead_config.max_ngram_size == 1
    assert off["usage"]["lookahead"]["tokens_per_step"] == 1.0
    assert on["choices"][0]["text"] == off["choices"][0]["text"]


def test_the_schedule_gives_the_executor_a_per_request_config(tle, tokenizer_dir, monkeypatch):
    import itertools
    import threading

    from trtlade.schedule import LookaheadSchedule
    from trtlade.server import generation

    schedule = LookaheadSchedule.parse([{"up_to": 1, "spec": "2,2,1"}, {"spec": "1,1,0"}])
    app = trtllm_app(tokenizer_dir, schedule=schedule)
    # the two concurrent requests meet in tokenization (a worker thread each), so both have arrived,
    # and count each other, before either is admitted -- whatever the machine's timing
    together = threading.Barrier(2, timeout=10)
    tokenize = generation.tokenize

    calls = itertools.count()

    def meeting(*args, **kwargs):
        if next(calls) < 2:  # the two concurrent requests; the third comes alone
            together.wait()
        return tokenize(*args, **kwargs)

    monkeypatch.setattr(generation, "tokenize", meeting)

    async def go():
        async with client_for(app) as c:
            tle._iteration_delay = 0.01  # slow steps: the two concurrent requests overlap
            both = await asyncio.gather(*[c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 20})
                                          for _ in range(2)])
            tle._iteration_delay = 0.0
            alone = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6})
            return [b.json() for b in both], alone.json()

    both, alone = run(go())
    first, second, third = tle._instances[-1]._requests
    # the two arrived together: each counts the other (band 2+), the executor gets (1,1,0) for both
    assert first.lookahead_config.max_ngram_size == second.lookahead_config.max_ngram_size == 1
    assert (third.lookahead_config.max_window_size, third.lookahead_config.max_ngram_size) == (2, 2)  # alone
    assert [b["usage"]["lookahead"]["spec"]["w"] for b in both] == [1, 1]
    assert alone["usage"]["lookahead"]["spec"] == {"w": 2, "n": 2, "g": 1}


def test_logprobs_are_refused_clearly_on_the_trtllm_engine(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "logprobs": 1})

    resp = run(go())
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == "logprobs" and "trtllm engine" in err["message"]
    assert not tle._instances[-1]._requests  # never enqueued


def test_request_lookahead_larger_than_the_server_is_400_before_enqueue(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "lookahead": {"w": 5, "n": 2, "g": 4}})

    resp = run(go())
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "lookahead.w"
    assert "W = 4" in resp.json()["error"]["message"]
    assert tle._instances[-1]._requests == []  # never reached the executor


def test_error_response_is_500_and_the_server_keeps_serving(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            tle._fail_after_iterations = (2, "CUDA error: an illegal memory access was encountered")
            failed = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 20})
            streamed = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 20, "stream": True})
            tle._fail_after_iterations = None
            ok = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3})
            return failed, sse_events(streamed.text), ok, (await c.get("/metrics")).text

    failed, events, ok, metrics = run(go())
    assert failed.status_code == 500 and "illegal memory access" in failed.json()["error"]["message"]
    assert events[-1] == "[DONE]" and "illegal memory access" in events[-2]["error"]["message"]
    assert ok.status_code == 200
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "500"}) == 2


def test_stop_strings_end_the_request_and_cancel_it_in_the_executor(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            whole = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 30, "stop": ["quick"]})
            streamed = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 30, "stop": "quick",
                                                             "stream": True})
            return whole.json(), sse_events(streamed.text)

    whole, events = run(go())
    assert whole["choices"][0]["text"] == "Hello world! The "
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "Hello world! The "
    assert wait_until(lambda: not tle._instances[-1]._active)  # cancelled in the executor


def test_ignore_eos_min_tokens_and_eos_handling(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            # token id 1 is the tiny tokenizer's EOS: a token-id prompt makes the double echo it
            stop = await c.post("/v1/completions", json={"prompt": [300, 301, 1], "max_tokens": 10})
            ignore = await c.post("/v1/completions", json={"prompt": [300, 301, 1], "max_tokens": 10,
                                                           "ignore_eos": True, "min_tokens": 2})
            return stop.json(), ignore.json()

    stop, ignore = run(go())
    assert stop["choices"][0]["finish_reason"] == "stop" and stop["usage"]["completion_tokens"] == 2
    assert ignore["choices"][0]["finish_reason"] == "length" and ignore["usage"]["completion_tokens"] == 10
    req = tle._instances[-1]._requests[-1]
    assert req.end_id == -1 and req.sampling_config.min_tokens == 2


@pytest.mark.parametrize("body, param", [
    ({"temperature": 0.8}, "temperature"), ({"temperature": 0.8, "lookahead": [1, 1, 0]}, "temperature"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"), ({"repetition_penalty": 1.1}, "repetition_penalty"),
])
def test_sampling_is_refused_greedy_only(tle, tokenizer_dir, body, param):
    """TensorRT-LLM's lookahead layer takes the top-1 token of every request, (1,1,0) ones included:
    a sampled request would silently come back greedy, so it is a 400 that says where to sample."""
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, **body})

    resp = run(go())
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["param"] == param
    assert "top-1" in error["message"] and "reference engine" in error["message"]
    assert tle._instances[-1]._requests == []  # nothing reached the executor


def test_top_p_top_k_and_min_p_do_not_change_a_greedy_request(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "top_p": 0.9,
                                                         "top_k": 5, "min_p": 0.1, "seed": 3})

    assert run(go()).status_code == 200


def test_client_disconnect_cancels_the_executor_request(tle, tokenizer_dir):
    from test_server import _asgi_call

    app = trtllm_app(tokenizer_dir)
    tle._iteration_delay = 0.01

    async def go():
        async with client_for(app) as c:
            await _asgi_call(app, {"prompt": PROMPT, "max_tokens": 4000, "stream": True}, disconnect_after_chunks=2)
            return (await c.get("/metrics")).text

    metrics = run(go())
    ex = tle._instances[-1]
    assert wait_until(lambda: not ex._active)
    assert len(ex._requests) == 1
    assert metric_value(metrics, "trtlade_requests_total", {"endpoint": "completions", "status": "499"}) == 1


def test_chat_uses_the_tokenizers_template(tle, tokenizer_dir):
    app = trtllm_app(tokenizer_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hello"}],
                                                              "max_tokens": 4})

    resp = run(go())
    assert resp.status_code == 200
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    sent = tle._instances[-1]._requests[-1].input_token_ids
    assert tok.decode(sent) == "<|user|>Hello</s><|assistant|>"


def test_queue_bound_gives_429(tle, tokenizer_dir):
    from trtlade.trtllm.engine import TrtllmEngine
    from trtlade.contract.serving import EngineOverloaded
    from trtlade.contract.protocol import GenerationRequest

    engine = TrtllmEngine.start(launch(tokenizer_dir, max_queue=1))

    async def go():
        # the double generates on await_responses; stop the response thread's progress by flooding
        handles = [engine.submit(GenerationRequest(prompt_ids=(5, 6), max_tokens=100000)) for _ in range(17)]
        with pytest.raises(EngineOverloaded):
            engine.submit(GenerationRequest(prompt_ids=(5, 6), max_tokens=10))
        for h in handles:
            h.cancel()
        await engine.aclose()

    tle._iteration_delay = 0.05
    run(go())  # qwen3-8b-424 has max_batch_size 16: 16 running + 1 queued admitted, the 18th refused
    assert engine.info.limits.max_sequences == 17  # what one request may bring: the server's 400 beyond it


def test_a_shutdown_that_hangs_does_not_hold_the_server_past_its_bound(tle, tokenizer_dir, monkeypatch, caplog):
    """TensorRT-LLM's executor shutdown waits on peers that may never answer: the close returns after
    ENGINE_CLOSE_S (here 0.3 s) with a warning, and the process is left to exit."""
    import trtlade.trtllm.engine as module
    from fake_engine import close_while_shutdown_hangs
    from trtlade.trtllm.engine import TrtllmEngine

    monkeypatch.setattr(module, "ENGINE_CLOSE_S", 0.3)
    engine = TrtllmEngine.start(launch(tokenizer_dir))
    took, warned = close_while_shutdown_hangs(engine, tle._instances[-1], monkeypatch, caplog)
    assert took < 5 and warned

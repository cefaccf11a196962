"""Serving on TensorRT-LLM's PyTorch backend (1.3 and later): ``tensorrt_llm.LLM`` with an NGram / SA / AUTO
drafter, against the test double of ``tensorrt_llm.llmapi`` (tests/fakes/tensorrt_llm/llmapi)."""

from __future__ import annotations

import asyncio

import pytest

from fake_engine import client_for, make_tiny_tokenizer, metric_value, run, sse_events

PROMPT = "Hello world! The quick brown fox"
NGRAM = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}
SA = {"decoding_type": "SA", "max_draft_len": 4}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    make_tiny_tokenizer(folder)
    return folder


@pytest.fixture
def llmapi(fake_trtllm, monkeypatch):
    monkeypatch.setattr(fake_trtllm, "__version__", "1.3.0")
    import tensorrt_llm.llmapi as llmapi

    llmapi._instances.clear()
    return llmapi


def launch(model_dir, speculation=NGRAM, **options):
    from trtlade.trtllm.llm_engine import LlmLaunch

    opts = {"backend": "pytorch", "max_batch_size": 4, "max_seq_len": 256, "max_num_tokens": 512, **options}
    if speculation is not None:
        opts["speculative_config"] = dict(speculation)
    return LlmLaunch(model_dir=model_dir, tokenizer_dir=model_dir, options=opts)


def app_for(model_dir, **kw):
    from trtlade.server.app import create_app
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    lau = launch(model_dir, **kw)
    return create_app(lambda: TrtllmLlmEngine.start(lau))


def test_completion_runs_the_llm_with_the_bundles_drafter_and_reports_it(llmapi, model_dir):
    app = app_for(model_dir)

    async def go():
        async with client_for(app) as c:
            r = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12})
            return r.json(), (await c.get("/version")).json(), (await c.get("/metrics")).text

    body, version, metrics = run(go())
    assert body["choices"][0]["text"].startswith("Hello world! The quick")  # the double echoes the prompt
    assert body["choices"][0]["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 12
    # the double: 1 token, then 2, 1, 2, ... per iteration: 12 tokens in 8 streamed outputs
    sp = usage["speculation"]
    assert (sp["decoding_type"], sp["decode_steps"], sp["tokens_per_step"]) == ("NGram", 7, 1.5)
    # the double drafts max_draft_len (4) tokens in every iteration after the first: 7 x 4
    assert sp["draft_tokens"] == 28 and sp["accepted_draft_tokens"] == 4
    assert sp["config"]["max_draft_len"] == 4
    llm = llmapi._instances[-1]
    spec = llm._kwargs["speculative_config"]
    assert isinstance(spec, llmapi.NGramDecodingConfig) and spec.max_matching_ngram_size == 2
    assert llm._kwargs["backend"] == "pytorch" and llm._kwargs["max_batch_size"] == 4
    prompt, params = llm._requests[0]
    assert params.max_tokens == 12 and len(prompt) > 3 and params.return_perf_metrics
    assert version["engine"]["details"]["backend"] == "pytorch"
    assert version["engine"]["details"]["tensorrt_llm"] == "1.3.0"
    assert metric_value(metrics, "trtlade_speculation_steps_total", {"drafter": "NGram"}) == 7
    assert metric_value(metrics, "trtlade_speculation_accepted_tokens_total", {"drafter": "NGram"}) == 4
    assert metric_value(metrics, "trtlade_speculation_draft_tokens_total", {"drafter": "NGram"}) == 28


def _no_metrics(out):
    out.outputs[0].request_perf_metrics = None


def _zeroed(out):
    out.outputs[0].request_perf_metrics.speculative_decoding.total_draft_tokens = 0


@pytest.mark.parametrize("alter", [_no_metrics, _zeroed], ids=["no-metrics", "zeroed"])
def test_draft_tokens_are_unknown_where_a_release_does_not_fill_them(llmapi, model_dir, monkeypatch, alter):
    """A release without request_perf_metrics, and one that returns them zeroed in the PyTorch flow though drafting
    ran (before NVIDIA/TensorRT-LLM#17082): 0 draft tokens beside accepted ones read as more accepted than drafted."""
    original = llmapi._Result.__anext__

    async def altered(self):
        out = await original(self)
        alter(out)
        return out

    monkeypatch.setattr(llmapi._Result, "__anext__", altered)
    app = app_for(model_dir)

    async def go():
        async with client_for(app) as c:
            return (await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6})).json()

    sp = run(go())["usage"]["speculation"]
    assert sp["draft_tokens"] is None and sp["decode_steps"] == 3 and sp["accepted_draft_tokens"] > 0


def test_an_output_every_few_iterations_still_counts_every_step(llmapi, model_dir):
    """With stream_interval: 4 (a bundle option) TensorRT-LLM answers every 4th iteration: counting outputs as steps
    read 2 steps and 4.0 tokens a step where 7 steps ran; the result's decoding_iter counts them."""
    async def usage(app):
        async with client_for(app) as c:
            return (await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 10})).json()["usage"]

    each = run(usage(app_for(model_dir)))["speculation"]
    fourth = run(usage(app_for(model_dir, stream_interval=4)))["speculation"]
    assert llmapi._instances[-1]._kwargs["stream_interval"] == 4
    assert fourth["decode_steps"] == each["decode_steps"] and fourth["tokens_per_step"] == each["tokens_per_step"]
    assert fourth["accepted_draft_tokens"] == each["accepted_draft_tokens"]


def test_streaming_sends_one_chunk_per_iteration_and_the_same_text(llmapi, model_dir):
    app = app_for(model_dir, speculation=SA)

    async def go():
        async with client_for(app) as c:
            whole = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 9})
            streamed = await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 9, "stream": True,
                                                             "stream_options": {"include_usage": True}})
            return whole.json(), sse_events(streamed.text)

    whole, events = run(go())
    chunks = [e for e in events[:-1] if e.get("choices")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert len(chunks) == 6  # 9 tokens as 1, 2, 1, 2, 1, 2
    assert events[-2]["usage"]["speculation"]["decoding_type"] == "SA"
    assert isinstance(llmapi._instances[-1]._kwargs["speculative_config"], llmapi.SADecodingConfig)


def test_without_a_drafter_every_step_is_one_token_and_usage_has_no_speculation(llmapi, model_dir):
    app = app_for(model_dir, speculation=None)

    async def go():
        async with client_for(app) as c:
            return (await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 5})).json()

    usage = run(go())["usage"]
    assert usage["completion_tokens"] == 5 and "speculation" not in usage
    assert "speculative_config" not in llmapi._instances[-1]._kwargs


@pytest.mark.parametrize("field, value, param, drafter", [
    ("lookahead", [2, 2, 2], "lookahead", None),
    ("speculation", {"decoding_type": "NGram", "max_draft_len": 2}, "speculation", None),
    ("repetition_penalty", 1.2, "repetition_penalty", SA),
    ("presence_penalty", 0.5, "presence_penalty", SA),
    ("min_p", 0.05, "min_p", {**SA, "enable_penalty": True}),
    ("min_tokens", 2, "min_tokens", {**SA, "enable_penalty": True}),
    ("repetition_penalty", 1.2, "repetition_penalty", NGRAM),  # 1.3: NGram drafts on the GPU, one-model as SA
    ("min_p", 0.05, "min_p", {"decoding_type": "AUTO"}),
])
def test_what_the_backend_cannot_do_per_request_is_a_400_naming_the_field(llmapi, model_dir, field, value, param,
                                                                           drafter):
    app = app_for(model_dir, **({"speculation": drafter} if drafter else {}))

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, field: value})

    r = run(go())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].split(".")[0] == param
    assert llmapi._instances[-1]._requests == []  # refused before TensorRT-LLM saw it


@pytest.mark.parametrize("block, version", [({**SA, "enable_penalty": True}, "1.3.0"),
                                            ({**NGRAM, "enable_penalty": True}, "1.3.0"), (NGRAM, "1.2.1")],
                         ids=["sa-enable_penalty", "ngram-enable_penalty", "ngram-on-the-host"])
def test_penalties_pass_where_the_drafter_applies_them(llmapi, fake_trtllm, monkeypatch, model_dir, block, version):
    """A one-model drafter (SA; NGram from 1.3, drafted on the GPU) with enable_penalty, NGram on the host (1.0-1.2,
    TorchSampler) as it is: SpecSampler.validate_request refuses only a one-model drafter without the flag."""
    monkeypatch.setattr(fake_trtllm, "__version__", version)
    app = app_for(model_dir, speculation=block)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4,
                                                         "repetition_penalty": 1.2})

    r = run(go())
    assert r.status_code == 200, r.text
    assert llmapi._instances[-1]._requests[0][1].repetition_penalty == 1.2


def test_sampling_settings_reach_sampling_params(llmapi, model_dir):
    app = app_for(model_dir, speculation=None)  # min_p: a one-model drafter's sampler refuses it (below)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0.7,
                                                         "top_p": 0.9, "top_k": 5, "seed": 11, "min_p": 0.05})

    assert run(go()).status_code == 200
    params = llmapi._instances[-1]._requests[0][1]
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.7, 0.9, 5, 11)
    assert params.min_p == 0.05  # it was dropped: the request sampled without it


def test_a_negative_seed_reaches_tensorrt_llm_as_its_unsigned_64_bit_seed(llmapi, model_dir):
    """TensorRT-LLM's random seed is a uint64; a request's seed is a signed 64-bit one (OpenAI's, and what a wrapped
    ``seed + j`` gives): -5 is sent as 2**64 - 5, the same 64 bits."""
    app = app_for(model_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0.7,
                                                         "seed": -5})

    assert run(go()).status_code == 200
    assert llmapi._instances[-1]._requests[0][1].seed == 2**64 - 5


def test_a_stop_string_ends_the_request_and_aborts_tensorrt_llms(llmapi, model_dir):
    app = app_for(model_dir, speculation=None)

    async def go():
        async with client_for(app) as c:
            return (await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 40,
                                                          "stop": ["quick"]})).json()

    body = run(go())
    assert body["choices"][0]["finish_reason"] == "stop"
    assert "quick" not in body["choices"][0]["text"] and body["choices"][0]["text"].startswith("Hello")


@pytest.mark.parametrize("version, speculation, fragment", [
    ("1.2.1", SA, "has no SA drafter"),
    ("0.16.0", NGRAM, "has no NGram drafter"),
    ("1.3.0", {"decoding_type": "SA", "max_draft_len": 0}, "speculative_config.max_draft_len"),
])
def test_start_is_refused_with_a_hint_for_a_release_without_the_drafter(fake_trtllm, monkeypatch, model_dir,
                                                                         version, speculation, fragment):
    from trtlade.trtllm.engine import TrtllmStartError
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    monkeypatch.setattr(fake_trtllm, "__version__", version)
    with pytest.raises(TrtllmStartError, match=fragment) as info:
        TrtllmLlmEngine.start(launch(model_dir, speculation=speculation))
    assert info.value.hint


def test_trtlade_checks_the_drafter_with_upstreams_rules_before_tensorrt_llm_starts(llmapi, model_dir):
    from trtlade.trtllm.engine import TrtllmStartError
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    with pytest.raises(TrtllmStartError, match="global_pool_size .2. must be >= max_batch_size .4.") as info:
        TrtllmLlmEngine.start(launch(model_dir, speculation={**SA, "enable_global_pool": True,
                                                            "global_pool_size": 2}))
    assert "global_pool_size >= 4" in info.value.hint
    assert llmapi._instances == []


def test_options_without_max_batch_size_get_upstreams_default_of_2048(llmapi, model_dir):
    """TorchLlmArgs' max_batch_size defaults to 2048: a hand-written file without it is checked (SA's global pool) and
    bounded (the sequences a request may ask for) as TensorRT-LLM runs it, not as a batch of 8."""
    from trtlade.trtllm.engine import TrtllmStartError
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    with pytest.raises(TrtllmStartError, match="global_pool_size .100. must be >= max_batch_size .2048."):
        TrtllmLlmEngine.start(launch(model_dir, speculation={**SA, "enable_global_pool": True,
                                                            "global_pool_size": 100}, max_batch_size=None))
    engine = TrtllmLlmEngine.start(launch(model_dir, max_batch_size=None))
    try:
        assert engine.info.limits.max_sequences >= 2048
    finally:
        asyncio.run(engine.aclose())


def test_upstreams_refusal_of_the_arguments_names_validate_config(llmapi, model_dir):
    from trtlade.trtllm.engine import TrtllmStartError
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    with pytest.raises(TrtllmStartError, match="refused the LLM arguments: max_beam_widht") as info:
        TrtllmLlmEngine.start(launch(model_dir, max_beam_widht=2))
    assert "validate-config" in info.value.hint


# ------------------------------------------------------------------------------------------ trtlade serve
@pytest.fixture
def bundle(tmp_path):
    from typer.testing import CliRunner

    from hf_folders import write_hf_folder
    from trtlade.cli.main import app

    model = write_hf_folder(tmp_path / "Qwen3-8B", "qwen3")
    make_tiny_tokenizer(model)
    result = CliRunner().invoke(app, ["build", "--model", str(model), "--speculation", "sa-6", "--trtllm-version",
                                      "1.3.0", "-o", str(tmp_path / "b"), "--max-batch-size", "16"])
    assert result.exit_code == 0, result.output
    return tmp_path / "b"


@pytest.mark.parametrize("how", ["model", "config"])
def test_serve_on_a_bundle_starts_the_llm_with_its_trtllm_serve_yml(llmapi, bundle, how):
    import yaml

    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import engine_factory, llm_launch

    flags = ServeFlags(model=str(bundle)) if how == "model" else ServeFlags(config=bundle / "trtlade.yml")
    plan = make_plan(flags, env={})
    assert plan.engine == "trtllm" and plan.engine_dir is None and plan.model_dir.name == "Qwen3-8B"
    launch = llm_launch(plan)
    assert dict(launch.options) == yaml.safe_load((bundle / "trtllm-serve.yml").read_text())
    engine = engine_factory(plan)()
    assert engine.info.details["drafter"].startswith("SA") and engine.info.lookahead is False
    spec = llmapi._instances[-1]._kwargs["speculative_config"]
    assert isinstance(spec, llmapi.SADecodingConfig) and spec.max_draft_len == 6
    assert llmapi._instances[-1]._kwargs["max_batch_size"] == 16


@pytest.mark.parametrize("file, old, new, said", [
    ("trtlade.yml", "max_draft_len: 6", "max_draft_len: 2",
     "speculation.max_draft_len 2 (trtllm-serve.yml: speculative_config.max_draft_len 6)"),
    ("trtlade.yml", "max_batch_size: 16", "max_batch_size: 4", "build.max_batch_size 4 (trtllm-serve.yml: "
                                                               "max_batch_size 16)"),
    ("trtllm-serve.yml", "max_draft_len: 6", "max_draft_len: 3",
     "speculation.max_draft_len 6 (trtllm-serve.yml: speculative_config.max_draft_len 3)"),
])
def test_a_bundle_whose_two_files_disagree_is_refused_naming_both_values(bundle, file, old, new, said):
    """TensorRT-LLM runs trtllm-serve.yml: an edit of trtlade.yml alone would be ignored while serve's start line
    and fair share read it, so the two must agree on what both state."""
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import ServeError, llm_launch

    path = bundle / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(ServeError, match="disagree, and TensorRT-LLM would run trtllm-serve.yml's") as info:
        llm_launch(make_plan(ServeFlags(config=bundle / "trtlade.yml"), env={}))
    assert said in info.value.message and "trtlade build --config" in info.value.hint
    from trtlade.config.validate import validate_file

    report = validate_file(bundle / "trtlade.yml")  # validate-config says it first, at the key
    assert [(d.code, d.path) for d in report.diagnostics if d.severity == "error"] == [
        ("bundle-disagreement", said.split()[0])]
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    for target in ("triton", "k8s"):  # an export would carry trtllm-serve.yml's values: refused the same way
        result = CliRunner().invoke(app, ["export", target, str(bundle), "--out", str(bundle.parent / target)])
        assert result.exit_code == 1 and said in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("edit, said", [
    (lambda t: t.replace("max_batch_size: 16", "max_batch_size:\t16"), "trtllm-serve.yml:6:16: malformed YAML"),
    (lambda t: t.encode().replace(b"SA", b"S\xc0"), "trtllm-serve.yml:14:19: the file is not UTF-8 text"),
])
def test_a_hand_edit_that_breaks_trtllm_serve_yml_is_an_error_at_its_line(bundle, edit, said):
    """serve and the exports gave a traceback; validate-config on the bundle folder said it was valid."""
    from typer.testing import CliRunner

    from trtlade.cli.main import app
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import ServeError, llm_launch

    path = bundle / "trtllm-serve.yml"
    changed = edit(path.read_text())
    path.write_bytes(changed if isinstance(changed, bytes) else changed.encode())
    with pytest.raises(ServeError) as info:
        llm_launch(make_plan(ServeFlags(model=str(bundle)), env={}))
    assert said in info.value.message and info.value.hint
    out = str(bundle.parent / "r")
    for args in (["validate-config", str(bundle)], ["export", "triton", str(bundle), "--out", out]):
        result = CliRunner().invoke(app, args)
        where, what = said.split(": ", 1)
        assert result.exit_code == 1 and where in result.output and what in " ".join(result.output.split())
        assert "Traceback" not in result.output


def test_serve_on_a_release_without_the_drafter_stops_before_binding_a_port(fake_trtllm, monkeypatch, bundle):
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import ServeError, engine_factory

    monkeypatch.setattr(fake_trtllm, "__version__", "1.2.1")
    with pytest.raises(ServeError, match="has no SA drafter") as info:
        engine_factory(make_plan(ServeFlags(model=str(bundle)), env={}))
    assert "from 1.3" in info.value.hint


def test_serve_without_tensorrt_llm_says_what_to_install(bundle, monkeypatch):
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import ServeError, engine_factory

    monkeypatch.setitem(__import__("sys").modules, "tensorrt_llm", None)
    with pytest.raises(ServeError) as info:
        engine_factory(make_plan(ServeFlags(model=str(bundle)), env={}))
    assert "tensorrt" in (info.value.message + info.value.hint).lower()


def test_bench_refuses_modes_that_send_a_drafting_field_to_this_server(llmapi, model_dir):
    from trtlade.bench.plan import Mode, PlanError, Series, Target, check_modes_for_servers, parse_modes

    app = app_for(model_dir)

    async def go():
        async with client_for(app) as c:
            return (await c.get("/version")).json()

    target = Target("a", "http://h", server_info=run(go()))
    assert target.server_info["engine"]["per_request_drafting"] is False
    check_modes_for_servers([Series("default", target, Mode("default", None))])
    for mode in parse_modes(["ar,sa,4-2-4"]):
        with pytest.raises(PlanError, match="--modes default"):
            check_modes_for_servers([Series(mode.name, target, mode)])


def test_a_plain_pytorch_config_serves_without_speculative_config(llmapi, model_dir, tmp_path):
    from trtlade.server.plan import ServeFlags, make_plan
    from trtlade.server.runner import engine_factory

    config = tmp_path / "plain.yml"
    config.write_text(f"model: {{path: {model_dir}}}\nbuild: {{backend: pytorch, trtllm_version: 1.3.0, "
                      "max_batch_size: 4}\nlookahead: {spec: '1,1,0'}\nserve: {engine: trtllm}\n")
    engine = engine_factory(make_plan(ServeFlags(config=config), env={}))()
    kwargs = llmapi._instances[-1]._kwargs
    assert "speculative_config" not in kwargs and kwargs["max_batch_size"] == 4
    assert engine.info.details["drafter"] is None


def test_the_double_refuses_penalties_like_upstream(llmapi):
    """SpecSampler.validate_request (spec_sampler_base.py, the one-model sampler, SA included): penalties without
    enable_penalty fail the request inside the executor, so generate_async returns and the result raises
    RequestError; NGram samples with TorchSampler, which applies them."""
    from tensorrt_llm.executor.utils import RequestError

    async def first(spec, **params):
        llm = llmapi.LLM("m", speculative_config=spec, max_batch_size=4)
        result = llm.generate_async([1, 2, 3], llmapi.SamplingParams(max_tokens=3, **params), streaming=True)
        return [list(out.outputs[0].token_ids) async for out in result]

    with pytest.raises(RequestError, match="enable_penalty: true"):
        run(first(llmapi.SADecodingConfig(max_draft_len=4), repetition_penalty=1.2))
    assert run(first(llmapi.SADecodingConfig(max_draft_len=4, enable_penalty=True), repetition_penalty=1.2))
    with pytest.raises(RequestError, match="enable_penalty: true"):  # 1.3: NGram is a one-model mode too
        run(first(llmapi.NGramDecodingConfig(max_draft_len=4, max_matching_ngram_size=2), presence_penalty=0.5))
    assert run(first(llmapi.SADecodingConfig(max_draft_len=4), repetition_penalty=1.0))  # neutral values pass


def test_the_double_checks_sa_global_pool_size_as_a_positive_int(llmapi):
    """SADecodingConfig.global_pool_size: Optional[PositiveInt]: pydantic refuses 0 before validate_sa_config."""
    with pytest.raises(ValueError, match="global_pool_size: Input should be greater than 0"):
        llmapi.SADecodingConfig(max_draft_len=4, enable_global_pool=True, global_pool_size=0)
    with pytest.raises(ValueError, match="global_pool_size requires enable_global_pool=True"):
        llmapi.SADecodingConfig(max_draft_len=4, global_pool_size=8)


def test_an_llm_shutdown_that_hangs_does_not_hold_the_server_past_its_bound(llmapi, model_dir, monkeypatch, caplog):
    import trtlade.trtllm.llm_engine as module
    from fake_engine import close_while_shutdown_hangs
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    monkeypatch.setattr(module, "ENGINE_CLOSE_S", 0.3)
    engine = TrtllmLlmEngine.start(launch(model_dir))
    took, warned = close_while_shutdown_hangs(engine, llmapi._instances[-1], monkeypatch, caplog)
    assert took < 5 and warned


def test_a_request_tensorrt_llm_refuses_at_admission_is_a_400_and_one_it_cancels_is_not_an_answer(llmapi, model_dir,
                                                                                                    monkeypatch):
    """An executor error response before any token (RequestError: a request upstream's checks refuse) was a 500, as
    if the server had failed; trtllm-serve answers 400. A generation TensorRT-LLM itself ends as 'cancelled' or
    'timeout' read as a normal 'stop'."""
    original = llmapi.LLM.generate_async

    def refused(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        result._error = "min_p is not supported by this sampler"
        return result

    app = app_for(model_dir)

    async def ask():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6})

    with monkeypatch.context() as m:
        m.setattr(llmapi.LLM, "generate_async", refused)
        r = run(ask())
    assert r.status_code == 400 and "refused the request" in r.json()["error"]["message"], r.text
    original_next = llmapi._Result.__anext__

    async def cancelled(self):
        out = await original_next(self)
        out.outputs[0].finish_reason, out.finished = "cancelled", True
        return out

    monkeypatch.setattr(llmapi._Result, "__anext__", cancelled)
    r = run(ask())
    assert r.status_code == 500 and "cancelled" in r.json()["error"]["message"], r.text


def test_tensorrt_llm_does_not_detokenize_what_trtlade_decodes_itself(llmapi, model_dir):
    app = app_for(model_dir)

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4})

    assert run(go()).status_code == 200
    assert llmapi._instances[-1]._requests[0][1].detokenize is False  # a second pass on the event loop otherwise

"""``trtlade export triton``: the ``inflight_batcher_llm`` model repository of Triton's TensorRT-LLM
backend, its ``config.pbtxt`` files filled from a bundle.

Layout written::

    <out>/
      preprocessing/config.pbtxt    python backend: tokenize (tokenizer_dir = the bundle's tokenizer)
      preprocessing/1/
      tensorrt_llm/config.pbtxt     tensorrtllm backend: the engine, batch size, beam width 1, in-flight
      tensorrt_llm/1/               fused batching, KV cache, decoding_mode lookahead with (W,N,G)
      lookahead_guard/config.pbtxt  python backend: checks each request's (w,n,g) (not for spec (1,1,0))
      lookahead_guard/1/model.py    written by trtlade (trtlade/data/triton/lookahead_guard.py)
      postprocessing/config.pbtxt   python backend: detokenize
      postprocessing/1/
      ensemble/config.pbtxt         text_input -> preprocessing -> lookahead_guard -> tensorrt_llm
      ensemble/1/                   -> postprocessing -> text_output

The lookahead keys are those of tensorrtllm_backend from v0.19.0 on (also TensorRT-LLM's
``triton_backend/`` since v0.20): ``decoding_mode: lookahead`` and the parameters
``lookahead_window_size``, ``lookahead_ngram_size``, ``lookahead_verification_set_size``, plus optional
per-request INT32 [1] inputs of the same names (a request's (w,n,g), at most the engine's). The backend
needs all three of those per-request inputs whenever ``lookahead_window_size`` is sent: a client sends
the whole triple or none. The backend never compares them with the model's (W,N,G); TensorRT-LLM does
so only inside the decoder step, where the failure ends every request in flight on the instance
(``Executor::Impl::forwardAsync`` -> ``terminateActiveRequests``). So the ensemble routes them through
``lookahead_guard``, which refuses an oversize or illegal triple for that request alone and passes the
model's own (W,N,G) when the client sent none. An engine served with spec (1,1,0) exposes no
per-request lookahead inputs (the backend refuses them on a model without lookahead parameters).
Engines built with TensorRT-LLM below 0.19 are refused: their backend has no lookahead keys. The stock
python models' ``model.py`` files come from the backend release that matches the engine
(tensorrtllm_backend v0.19.0, or TensorRT-LLM's ``triton_backend/`` from 0.20 on); trtlade writes their
configs only (and the guard's own model.py), and they carry every input, output and parameter those
stock models read when they load (:mod:`trtlade.export.triton_stock`, per release line), with empty
values where a feature is unused.

Every config is built as Triton's own ``ModelConfig`` protobuf (shipped by ``tritonclient``),
written in protobuf text format and parsed back before anything is written.
"""

from __future__ import annotations

from typing import Any, Optional

from trtlade.export import triton_stock as stock
from trtlade.export.common import CONTAINER_NOTE, ExportError, ExportSource, serve_not_carried

__all__ = ["MIN_TRTLLM", "LOOKAHEAD_KEYS", "GUARD", "GUARD_OUTPUTS", "engine_version", "launch_script",
           "model_repository", "parse_config", "guard_model_source", "warnings"]

#: The first TensorRT-LLM (and tensorrtllm_backend) release whose Triton backend reads lookahead.
MIN_TRTLLM = (0, 19)
LOOKAHEAD_KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
#: The python model that checks each request's (w,n,g) before tensorrt_llm sees it, and its outputs.
GUARD = "lookahead_guard"
GUARD_OUTPUTS = ("OUT_WINDOW_SIZE", "OUT_NGRAM_SIZE", "OUT_VERIFICATION_SET_SIZE")


def _pb() -> Any:
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        raise ExportError("the Triton export needs the `tritonclient` package (its ModelConfig protobuf checks "
                          "every config.pbtxt)", "in trtlade's source folder: pip install -e '.[triton]'") from None
    return model_config_pb2


def launch_script(version: tuple[int, ...]) -> str:
    """Where a release's ``launch_triton_server.py`` is: ``/app/scripts/`` in the Triton TensorRT-LLM container up to
    0.19 (triton-inference-server/tensorrtllm_backend README at v0.19.0); from 0.20 the script is in
    NVIDIA/TensorRT-LLM's tree, ``triton_backend/scripts/launch_triton_server.py``, where its Triton guides run it.

    >>> launch_script((0, 19, 0)), launch_script((1, 1, 0))
    ('/app/scripts/launch_triton_server.py', 'tensorrt_llm/triton_backend/scripts/launch_triton_server.py')
    """
    return ("/app/scripts/launch_triton_server.py" if version and version < (0, 20) else
            "tensorrt_llm/triton_backend/scripts/launch_triton_server.py")


def engine_version(text: Optional[str]) -> tuple[int, ...]:
    parts = []
    for item in (text or "").split("."):
        digits = "".join(ch for ch in item if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _tensor(pb: Any, cls: Any, name: str, dtype: str, dims: list[int], **extra: Any) -> Any:
    item = cls(name=name, data_type=pb.DataType.Value(dtype), dims=dims)
    for key, value in extra.items():
        if key == "reshape":
            item.reshape.shape.extend(value)
        else:
            setattr(item, key, value)
    return item


def _params(config: Any, values: dict[str, str]) -> None:
    for key, value in values.items():
        config.parameters[key].string_value = value


def _tensorrt_llm(pb: Any, src: ExportSource) -> Any:
    spec, engine = src.config.lookahead.spec, src.engine
    c = pb.ModelConfig(name="tensorrt_llm", backend="tensorrtllm", max_batch_size=engine.max_batch_size)
    c.model_transaction_policy.decoupled = True  # streaming: one response per step
    # serve.max_queue: the executor's queue bound (NVIDIA/TensorRT-LLM triton_backend/inflight_batcher_llm/src/
    # model_instance_state.cc, tensorrtllm_backend's inflight_batcher_llm/src/ before 0.20:
    # ModelInstanceState::getExecutorConfigFromParams reads dynamic_batching.default_queue_policy.max_queue_size
    # into ExecutorConfig's maxQueueSize)
    c.dynamic_batching.default_queue_policy.max_queue_size = src.config.serve.max_queue
    In = pb.ModelInput
    c.input.extend([
        _tensor(pb, In, "input_ids", "TYPE_INT32", [-1], allow_ragged_batch=True),
        _tensor(pb, In, "input_lengths", "TYPE_INT32", [1], reshape=[]),
        _tensor(pb, In, "request_output_len", "TYPE_INT32", [1], reshape=[]),
        _tensor(pb, In, "end_id", "TYPE_INT32", [1], reshape=[], optional=True),
        _tensor(pb, In, "pad_id", "TYPE_INT32", [1], reshape=[], optional=True),
        _tensor(pb, In, "stop_words_list", "TYPE_INT32", [2, -1], optional=True, allow_ragged_batch=True),
        _tensor(pb, In, "bad_words_list", "TYPE_INT32", [2, -1], optional=True, allow_ragged_batch=True),
        _tensor(pb, In, "streaming", "TYPE_BOOL", [1], optional=True),
    ])
    if not spec.is_autoregressive:  # a plain model refuses per-request lookahead (utils.cc): none exposed
        c.input.extend(_tensor(pb, In, t.name, t.dtype, list(t.dims), optional=t.optional,
                               allow_ragged_batch=t.ragged) for t in stock.TENSORRT_LLM_LOOKAHEAD_INPUTS)
    Out = pb.ModelOutput
    c.output.extend([_tensor(pb, Out, "output_ids", "TYPE_INT32", [-1, -1]),
                     _tensor(pb, Out, "sequence_length", "TYPE_INT32", [-1])])
    c.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    params = {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": str(src.engine_dir),
        "max_beam_width": "1",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": str(src.config.serve.kv_cache_free_gpu_memory_fraction or 0.9),
        "exclude_input_in_output": "true",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        # read with no fallback by ModelInstanceState::getGuidedDecodingConfigFromParams: empty = unused
        "tokenizer_dir": "", "xgrammar_tokenizer_info_path": "", "guided_decoding_backend": "",
        # the backend's own default is true; trtlade sets it as serve does (serve.kv_cache_enable_block_reuse)
        "enable_kv_cache_reuse": "true" if src.config.serve.kv_cache_enable_block_reuse else "false",
    }
    if not spec.is_autoregressive:
        params["decoding_mode"] = "lookahead"
        params.update(zip(LOOKAHEAD_KEYS, map(str, spec.as_tuple())))
    _params(c, params)
    return c


def _preprocessing(pb: Any, src: ExportSource) -> Any:
    """Every input, output and parameter of the stock preprocessing config of the engine's release line."""
    line = stock.family(engine_version(src.engine.version))
    c = pb.ModelConfig(name="preprocessing", backend="python", max_batch_size=src.engine.max_batch_size)
    for t in stock.preprocessing_inputs(line):
        c.input.append(_tensor(pb, pb.ModelInput, t.name, t.dtype, list(t.dims), **({"optional": True}
                                                                                     if t.optional else {})))
    for t in stock.preprocessing_outputs(line):
        c.output.append(_tensor(pb, pb.ModelOutput, t.name, t.dtype, list(t.dims)))
    c.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    _params(c, stock.preprocessing_parameters(line, str(src.tokenizer), str(src.engine_dir)))
    return c


def _postprocessing(pb: Any, src: ExportSource) -> Any:
    c = pb.ModelConfig(name="postprocessing", backend="python", max_batch_size=src.engine.max_batch_size)
    In, Out = pb.ModelInput, pb.ModelOutput
    c.input.extend([_tensor(pb, In, "TOKENS_BATCH", "TYPE_INT32", [-1, -1]),
                    _tensor(pb, In, "SEQUENCE_LENGTH", "TYPE_INT32", [-1])])
    c.output.extend([_tensor(pb, Out, "OUTPUT", "TYPE_STRING", [-1])])
    c.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    _params(c, {"tokenizer_dir": str(src.tokenizer), "skip_special_tokens": "true"})
    return c


def _lookahead_guard(pb: Any, src: ExportSource) -> Any:
    """The guard between the client and tensorrt_llm (trtlade/data/triton/lookahead_guard.py): refuses a
    request whose (w,n,g) the model does not admit, for that request alone."""
    c = pb.ModelConfig(name=GUARD, backend="python", max_batch_size=src.engine.max_batch_size)
    In, Out = pb.ModelInput, pb.ModelOutput
    # the client's triple arrives as the ensemble's inputs, [B, 1] like tensorrt_llm's stock lookahead inputs
    c.input.extend([_tensor(pb, In, "REQUEST_INPUT_LEN", "TYPE_INT32", [1]),
                    *(_tensor(pb, In, t.name, t.dtype, list(t.dims), optional=True)
                      for t in stock.TENSORRT_LLM_LOOKAHEAD_INPUTS)])
    c.output.extend(_tensor(pb, Out, name, "TYPE_INT32", [1]) for name in GUARD_OUTPUTS)
    c.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    lookahead = src.config.lookahead
    _params(c, {**dict(zip(("max_window_size", "max_ngram_size", "max_verification_set_size"),
                           map(str, lookahead.spec.as_tuple()))),
                **dict(zip(("default_window_size", "default_ngram_size", "default_verification_set_size"),
                           map(str, lookahead.default_request.as_tuple())))})
    return c


def warnings(src: ExportSource) -> list[str]:
    """What the bundle's config asks for that Triton cannot do (printed by ``export triton`` and written into
    the guard's config.pbtxt): a load-aware ``lookahead.schedule`` or ``lookahead.policy`` other than
    ``fixed`` needs trtlade's server, which counts the requests in flight; Triton's ensemble sees one
    request at a time, so the guard gives every request that names no (w,n,g) one triple."""
    lookahead = src.config.lookahead
    keys = [k for k, v in (("lookahead.schedule", lookahead.schedule),
                           ("lookahead.policy", lookahead.policy not in (None, "fixed") and lookahead.policy)) if v]
    out = serve_not_carried(src.config, "Triton")
    if not keys or lookahead.spec.is_autoregressive:
        return out
    return [f"{' and '.join(keys)} cannot be expressed in Triton (the ensemble has no count of the requests in "
            f"flight): every request that names no (w,n,g) runs ({lookahead.default_request}) there; serve with "
            "`trtlade serve` to apply them", *out]


def _ensemble(pb: Any, src: ExportSource) -> Any:
    c = pb.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=src.engine.max_batch_size)
    In, Out = pb.ModelInput, pb.ModelOutput
    c.input.extend([
        _tensor(pb, In, "text_input", "TYPE_STRING", [1]),
        _tensor(pb, In, "max_tokens", "TYPE_INT32", [1]),
        _tensor(pb, In, "bad_words", "TYPE_STRING", [-1], optional=True),
        _tensor(pb, In, "stop_words", "TYPE_STRING", [-1], optional=True),
        _tensor(pb, In, "end_id", "TYPE_INT32", [1], optional=True),
        _tensor(pb, In, "pad_id", "TYPE_INT32", [1], optional=True),
        _tensor(pb, In, "stream", "TYPE_BOOL", [1], optional=True),
    ])
    lookahead = not src.config.lookahead.spec.is_autoregressive
    if lookahead:
        c.input.extend(_tensor(pb, In, key, "TYPE_INT32", [1], optional=True) for key in LOOKAHEAD_KEYS)
    c.output.extend([_tensor(pb, Out, "text_output", "TYPE_STRING", [-1])])
    steps = [
        ("preprocessing", {"QUERY": "text_input", "REQUEST_OUTPUT_LEN": "max_tokens", "BAD_WORDS_DICT": "bad_words",
                           "STOP_WORDS_DICT": "stop_words", "END_ID": "end_id", "PAD_ID": "pad_id"},
         {"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
          "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
          "BAD_WORDS_IDS": "_BAD_WORDS_IDS", "STOP_WORDS_IDS": "_STOP_WORDS_IDS", "OUT_END_ID": "_END_ID",
          "OUT_PAD_ID": "_PAD_ID"}),
        ("tensorrt_llm", {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                          "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_END_ID", "pad_id": "_PAD_ID",
                          "stop_words_list": "_STOP_WORDS_IDS", "bad_words_list": "_BAD_WORDS_IDS",
                          "streaming": "stream", **({key: f"_{out}" for key, out in zip(LOOKAHEAD_KEYS, GUARD_OUTPUTS)}
                                                    if lookahead else {})},
         {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}),
        ("postprocessing", {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
         {"OUTPUT": "text_output"}),
    ]
    if lookahead:  # every request's (w,n,g) passes the guard: the model's own when the client sent none
        steps.insert(1, (GUARD, {"REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN", **{key: key for key in LOOKAHEAD_KEYS}},
                         {out: f"_{out}" for out in GUARD_OUTPUTS}))
    for model, inputs, outputs in steps:
        step = c.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        step.input_map.update(inputs)
        step.output_map.update(outputs)
    return c


def parse_config(text: str) -> Any:
    """A config.pbtxt parsed into Triton's ModelConfig (raises ExportError with the parser's message)."""
    from google.protobuf import text_format

    pb = _pb()
    try:
        return text_format.Parse(text, pb.ModelConfig())
    except text_format.ParseError as exc:
        raise ExportError(f"a config.pbtxt does not parse as Triton's ModelConfig: {exc}", "report this") from None


def model_repository(src: ExportSource) -> dict[str, str]:
    """The repository's files (relative path -> text), every config parsed back and checked."""
    from google.protobuf import text_format

    version = engine_version(src.engine.version)
    if version[:2] < MIN_TRTLLM:
        raise ExportError(
            f"the bundle's engine was built with TensorRT-LLM {src.engine.version or 'unknown'}: Triton's "
            f"TensorRT-LLM backend reads lookahead (decoding_mode lookahead, {', '.join(LOOKAHEAD_KEYS)}) only "
            "from 0.19.0 on", "rebuild with TensorRT-LLM 0.19 to 1.2 and serve it with the matching Triton "
            "release, or serve this engine with `trtlade serve` / grps (`trtlade export grps`)",
            where=str(src.bundle.root))
    pb = _pb()
    header = (f"# written by `trtlade export triton` from the bundle {src.bundle.root}: engine {src.engine_dir}, "
              f"lookahead ({src.config.lookahead.spec}); model.py files: "
              f"{stock.model_py_source(stock.family(version))}\n"
              + (f"# the engine has {src.engine.world_size} GPU ranks: start Triton with "
                 f"{launch_script(version)} --world_size {src.engine.world_size} (one process per rank, over MPI)\n"
                 if src.engine.world_size > 1 else "")
              + f"# Triton: {CONTAINER_NOTE}\n"
              + "".join(f"# warning: {w}\n" for w in warnings(src)))
    files: dict[str, str] = {}
    builds = [_preprocessing, _tensorrt_llm, _postprocessing, _ensemble]
    if not src.config.lookahead.spec.is_autoregressive:
        builds.insert(2, _lookahead_guard)
    for build in builds:
        config = build(pb, src)
        text = header + text_format.MessageToString(config)
        if parse_config(text) != config:
            raise ExportError(f"{config.name}/config.pbtxt does not read back as written", "report this")
        files[f"{config.name}/config.pbtxt"] = text
        files[f"{config.name}/1/.keep"] = ""
    if GUARD + "/config.pbtxt" in files:
        del files[f"{GUARD}/1/.keep"]
        files[f"{GUARD}/1/model.py"] = guard_model_source()
    return files


def guard_model_source() -> str:
    """The guard's model.py (shipped in trtlade/data/triton/lookahead_guard.py)."""
    from importlib.resources import files

    return (files("trtlade") / "data" / "triton" / "lookahead_guard.py").read_text()

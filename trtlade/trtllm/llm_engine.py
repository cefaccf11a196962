"""TensorRT-LLM's PyTorch backend behind trtlade's server: ``tensorrt_llm.LLM`` with NGram / SA / AUTO drafting.

From 1.3 on TensorRT-LLM has no engine backend and no executor of its own to drive; its LLM API serves the
model (``tensorrt_llm/llmapi/llm.py``: ``LLM(model, tokenizer=..., **kwargs)``, every key of a ``trtllm-serve
--config`` file one of those keyword arguments). trtlade starts it with a bundle's ``trtllm-serve.yml``
(:mod:`trtlade.builder.pytorch`), so trtlade's server and ``trtllm-serve`` run the same options, and serves it
through the same OpenAI routes, metrics and error mapping as every engine
(:class:`trtlade.contract.serving.ServingEngine`).

Start-up (each refusal a :class:`~trtlade.trtllm.engine.TrtllmStartError` with a hint, before a port is bound):

1. ``import tensorrt_llm``: a release whose PyTorch backend has the configured drafter
   (:mod:`trtlade.trtllm.releases`: NGram / AUTO from 1.0, SA from 1.3);
2. ``speculative_config`` through upstream's validators (:class:`~trtlade.drafting.config.DraftConfig`) and into
   the release's own class (``tensorrt_llm.llmapi.NGramDecodingConfig`` / ``SADecodingConfig`` /
   ``AutoDecodingConfig``), ``kv_cache_config`` into ``KvCacheConfig``;
3. ``LLM(model_dir, tokenizer=..., **options)`` (the PyTorch LLM; the options name no backend).

Serving: a request becomes ``llm.generate_async(prompt_ids, SamplingParams(...), streaming=True)``
(``generate_async``; ``SamplingParams`` of ``tensorrt_llm/sampling_params.py``); the steps are the result's
``decoding_iter`` (an output every ``stream_interval`` iterations: ``py_executor.py``, ``_handle_responses``), each
output's new tokens ``outputs[0].token_ids_diff`` (``tensorrt_llm/executor/result.py``), through
:class:`~trtlade.contract.text.OutputText` like every engine's; with a drafter the request asks for
``return_perf_metrics`` and its draft tokens are ``request_perf_metrics.speculative_decoding.total_draft_tokens``
(what Triton's stock llmapi model reports, ``triton_backend/all_models/llmapi/tensorrt_llm/1/model.py``,
``_create_response``; None where a release does not fill them, or leaves them zeroed beside accepted drafts); a
client that goes away aborts the request
(``GenerationResult.abort``). The drafter is the server's: a request's ``lookahead`` or ``speculation`` field is
a 400 saying so (:meth:`EngineInfo.lookahead` is False, ``drafters`` empty). With SA, a one-model drafter, penalties
need the block's ``enable_penalty`` (``tensorrt_llm/_torch/speculative/spec_sampler_base.py``,
``SpecSampler.validate_request``: without it upstream fails such a request at admission, from 1.3), and ``min_p`` and
``min_tokens`` are refused there in any case; trtlade refuses them first, naming the field. The same holds for
NGram and AUTO where the release drafts NGram on the GPU (1.3: ``use_one_engine`` covers every retrieval drafter,
``tensorrt_llm/_torch/speculative/interface.py@a1a20970``); on the host (1.0 to 1.2) they sample with
``TorchSampler``, which applies penalties: no flag needed.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from trtlade.contract.protocol import GenerationRequest, GenerationStats, StepChunk
from trtlade.contract.serving import (ENGINE_CLOSE_S, EngineFailure, EngineInfo, EngineLimits, EngineOverloaded,
                                      GenerationHandle, LookaheadPolicy, RequestRejected, ServerStopping,
                                      close_within, prompt_limit)
from trtlade.contract.text import OutputText, eos_token_ids
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.drafting.config import DraftConfig, DraftConfigError
from trtlade.spec import AUTOREGRESSIVE
from trtlade.trtllm.compat import import_tensorrt_llm
from trtlade.trtllm.engine import TrtllmStartError, step_output
from trtlade.trtllm.llm_args_rules import DEFAULT_MAX_BATCH_SIZE
from trtlade.trtllm.releases import release_for

__all__ = ["LlmLaunch", "TrtllmLlmEngine", "llm_kwargs", "PYTORCH_SCHEDULING"]

log = logging.getLogger("trtlade.trtllm")

PYTORCH_SCHEDULING = ("in-flight batching by TensorRT-LLM's PyTorch backend (LLM API): up to max_batch_size sequences "
                      "generate together, drafting with the server's speculative_config; up to serve.max_queue more "
                      "wait, more get 429")
_CONFIG_CLASSES = {"NGram": "NGramDecodingConfig", "SA": "SADecodingConfig", "AUTO": "AutoDecodingConfig"}
_PENALTIES = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}
#: What a one-model drafter's sampler cannot apply, by request field: tensorrt_llm/_torch/speculative/
#: spec_sampler_base.py, ``SpecSampler.validate_request`` ("min_p is not supported with one-model speculative decoding";
#: min_length too in later copies, whose docstring says such a value was silently dropped before)
_ONE_MODEL_REFUSED = {"min_p": "min_p", "min_tokens": "min_tokens (its min_length)"}


@dataclass(frozen=True)
class LlmLaunch:
    """What starts the PyTorch backend: the checkpoint, its tokenizer, the ``trtllm-serve --config`` mapping."""

    model_dir: Path
    tokenizer_dir: Path
    options: Mapping[str, Any]
    served_name: Optional[str] = None
    max_queue: int = 64
    max_prompt_tokens: Optional[int] = None
    max_new_tokens: Optional[int] = None
    source: Optional[str] = None

    @property
    def speculation(self) -> Optional[dict[str, Any]]:
        block = self.options.get("speculative_config")
        return dict(block) if isinstance(block, Mapping) else None


def llm_kwargs(options: Mapping[str, Any], llmapi: Any) -> dict[str, Any]:
    """The ``LLM(...)`` keyword arguments of a trtllm-serve config: the drafter and the KV-cache settings as the
    release's own config objects, the rest as they are."""
    kwargs = {k: v for k, v in options.items() if k not in ("speculative_config", "kv_cache_config")}
    block = options.get("speculative_config")
    if isinstance(block, Mapping):
        kind = str(block.get("decoding_type"))
        cls = getattr(llmapi, _CONFIG_CLASSES.get(kind, ""), None)
        if cls is None:
            raise TrtllmStartError(f"this TensorRT-LLM has no {_CONFIG_CLASSES.get(kind, kind)}",
                                   "NGram and AUTO arrived in 1.0, SA in 1.3; use a drafter the release has")
        kwargs["speculative_config"] = cls(**{k: v for k, v in block.items() if k != "decoding_type"})
    kv = options.get("kv_cache_config")
    if isinstance(kv, Mapping):
        kwargs["kv_cache_config"] = llmapi.KvCacheConfig(**kv)
    return kwargs


@dataclass(eq=False)
class _Job:
    handle: GenerationHandle
    request: GenerationRequest
    output: OutputText
    result: Any = None
    steps: int = 0
    chunks: int = 0  #: streamed outputs (one a step unless the options set stream_interval above 1)
    drafts: Optional[int] = None
    hist: dict[int, int] = field(default_factory=dict)
    task: Optional[asyncio.Task] = None


class TrtllmLlmEngine:
    """A started ``tensorrt_llm.LLM`` behind the serving contract (see the module docstring)."""

    def __init__(self, llm: Any, llmapi: Any, launch: LlmLaunch, version: str, tokenizer: Any) -> None:
        self._llm = llm
        self._llmapi = llmapi
        self._launch = launch
        self._version = version
        options = launch.options
        self._max_batch = int(options.get("max_batch_size") or DEFAULT_MAX_BATCH_SIZE)
        max_seq_len = int(options.get("max_seq_len", 4096))
        longest = prompt_limit(launch.max_prompt_tokens, max_seq_len - 1, log)
        block = launch.speculation
        self._config = DraftConfig.parse(block, max_batch_size=self._max_batch, ignored_ok=True) if block else None
        # a one-model drafter (SA; NGram and AUTO where the release drafts them on the GPU) samples with SpecSampler,
        # which admits penalties only with enable_penalty
        self._drafter = _one_model_drafter(block, version)  # None: no one-model drafter
        self._penalties = self._drafter is None or bool(block.get("enable_penalty"))
        self.info = EngineInfo(
            name="trtllm", model_id=launch.served_name or launch.model_dir.resolve().name, spec=AUTOREGRESSIVE,
            default_request_spec=AUTOREGRESSIVE,
            limits=EngineLimits(max_seq_len=max_seq_len, max_prompt_tokens=longest,
                                max_new_tokens=launch.max_new_tokens,
                                max_sequences=self._max_batch + launch.max_queue),  # submit()'s bound
            scheduling=PYTORCH_SCHEDULING, sampling="pytorch", policy="fixed", lookahead=False,
            details={"tensorrt_llm": version, "backend": "pytorch", "model_dir": str(launch.model_dir),
                     "speculative_config": block, "drafter": str(self._config) if self._config else None})
        self.tokenizer = PromptTokenizer(tokenizer)
        self.policy = LookaheadPolicy(None)
        self._raw_tokenizer = tokenizer
        self._eos = eos_token_ids(getattr(tokenizer, "eos_token_id", None))
        self._jobs: set[_Job] = set()
        self._closing = False

    # ------------------------------------------------------------------------------ start
    @classmethod
    def start(cls, launch: LlmLaunch) -> "TrtllmLlmEngine":
        """Import, check, build the LLM (see the module docstring)."""
        from trtlade.contract.tokenization import load_hf_tokenizer

        root = import_tensorrt_llm(check=False)
        version = str(getattr(root, "__version__", "?"))
        cls.check_release(version, launch)
        llmapi = import_tensorrt_llm("llmapi", check=False)
        try:
            tokenizer = load_hf_tokenizer(launch.tokenizer_dir)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
            raise TrtllmStartError(f"cannot load the tokenizer from {launch.tokenizer_dir}: {exc}",
                                   "set model.tokenizer (or model.path) to the Hugging Face folder") from None
        kwargs = llm_kwargs(launch.options, llmapi)
        try:
            llm = root.LLM(str(launch.model_dir), tokenizer=str(launch.tokenizer_dir), **kwargs)
        except (ValueError, TypeError) as exc:  # upstream's own validators (pydantic raises ValueError)
            raise TrtllmStartError(f"TensorRT-LLM {version} refused the LLM arguments: {exc}",
                                   f"check them with: trtlade validate-config {launch.source or 'trtllm-serve.yml'} "
                                   f"--trtllm-version {version}") from None
        return cls(llm, llmapi, launch, version, tokenizer)

    @staticmethod
    def check_release(version: str, launch: LlmLaunch) -> None:
        """The installed release runs the PyTorch backend with this drafter (TrtllmStartError otherwise)."""
        try:
            row = release_for(version)
        except ValueError as exc:
            raise TrtllmStartError(str(exc), "install TensorRT-LLM 1.3 or later (1.0 for NGram)") from None
        block = launch.speculation
        if block is None:
            return
        try:
            config = DraftConfig.parse(block, max_batch_size=int(launch.options.get("max_batch_size")
                                                                 or DEFAULT_MAX_BATCH_SIZE),
                                       ignored_ok=True)
        except DraftConfigError as exc:
            raise TrtllmStartError(f"speculative_config.{exc.field}: {exc.message}", exc.hint) from None
        if config.requested not in row.drafters:
            raise TrtllmStartError(
                f"TensorRT-LLM {version} has no {config.requested} drafter on its PyTorch backend (it offers: "
                f"{', '.join(row.drafters) or 'none'})", "NGram and AUTO from 1.0, SA from 1.3: install a release "
                "that has it, or choose another drafter (build.trtllm_version, speculation)")

    # ------------------------------------------------------------------------------ interface
    def load(self) -> tuple[int, int]:
        running = min(len(self._jobs), self._max_batch)
        return running, len(self._jobs) - running

    def submit(self, request: GenerationRequest) -> GenerationHandle:
        if request.lookahead is not None or request.speculation is not None:
            raise RequestRejected("TensorRT-LLM's PyTorch backend drafts with the server's speculative_config: a "
                                  "request cannot choose its own", param="speculation" if request.speculation
                                  else "lookahead")
        if self._drafter is not None:
            for name in _ONE_MODEL_REFUSED:
                if getattr(request, name):
                    raise RequestRejected(f"{name}: the server drafts with {self._drafter}, and TensorRT-LLM's "
                                          "one-model sampler "
                                          f"cannot apply {_ONE_MODEL_REFUSED[name]} (it rejects such a request, or in "
                                          "older releases drops it)", param=name)
        if not self._penalties:
            for name, neutral in _PENALTIES.items():
                if getattr(request, name) != neutral:
                    raise RequestRejected(f"{name}: the server drafts with {self._drafter} and its speculative_config "
                                          "does not set "
                                          "enable_penalty, without which TensorRT-LLM rejects penalties with one-model "
                                          "speculative decoding", param=name)
        if self._closing:
            raise EngineOverloaded("the server is shutting down", retry_after_s=5)
        if len(self._jobs) >= self._max_batch + self._launch.max_queue:
            raise EngineOverloaded(f"{len(self._jobs)} requests in flight: max_batch_size {self._max_batch} plus "
                                   f"serve.max_queue {self._launch.max_queue}; retry later", retry_after_s=1)
        request = self.policy.admit(request)
        loop = asyncio.get_running_loop()
        handle = GenerationHandle(loop, request, on_cancel=self._cancel, on_finish=self.policy.release)
        job = _Job(handle=handle, request=request, output=OutputText(
            self._raw_tokenizer, stop=request.stop, min_tokens=request.min_tokens, max_tokens=request.max_tokens,
            stop_ids=(*request.stop_token_ids, *(() if request.ignore_eos else self._eos)), context=request.prompt_ids))
        try:
            job.result = self._llm.generate_async(list(request.prompt_ids), sampling_params=self._sampling(request),
                                                  streaming=True)
        except (ValueError, TypeError) as exc:
            handle.finish()
            raise RequestRejected(f"TensorRT-LLM refused the request: {exc}") from None
        handle.job = job  # type: ignore[attr-defined]
        self._jobs.add(job)
        job.task = loop.create_task(self._stream(job))
        return handle

    def _sampling(self, request: GenerationRequest) -> Any:
        """``SamplingParams`` (tensorrt_llm/sampling_params.py): the request's budget, stops and warpers."""
        kwargs: dict[str, Any] = {"max_tokens": request.max_tokens, "temperature": request.temperature,
                                  "top_p": request.top_p, "ignore_eos": request.ignore_eos,
                                  "detokenize": False}  # OutputText makes the text: upstream's would be a 2nd pass
        if request.top_k:
            kwargs["top_k"] = request.top_k
        if request.min_p:
            kwargs["min_p"] = request.min_p
        if request.seed is not None:  # a uint64: NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/executor/types.h
            # (RandomSeedType = std::uint64_t, the executor SamplingConfig's random_seed)
            kwargs["seed"] = request.seed % 2**64
        if request.min_tokens:
            kwargs["min_tokens"] = request.min_tokens
        if request.stop_token_ids:
            kwargs["stop_token_ids"] = list(request.stop_token_ids)
        if self._config is not None:
            kwargs["return_perf_metrics"] = True
        for name, neutral in _PENALTIES.items():
            if getattr(request, name) != neutral:
                kwargs[name] = getattr(request, name)
        return self._llmapi.SamplingParams(**kwargs)

    async def _stream(self, job: _Job) -> None:
        try:
            async for out in job.result:
                if job.handle.finished:
                    return
                completion = out.outputs[0]
                job.chunks += 1
                iters = getattr(out, "decoding_iter", None)  # the executor's iterations so far (stream_interval > 1:
                job.steps = iters if isinstance(iters, int) and iters > 0 else job.steps + 1  # several an output)
                job.drafts = _draft_tokens(completion, job.drafts)
                finish = _finish(completion.finish_reason) if out.finished else None
                if finish in ("cancelled", "timeout"):  # ended by TensorRT-LLM, not by its text: not an answer
                    job.handle.finish(EngineFailure(f"TensorRT-LLM ended the request ({finish})"))
                    return
                chunk = self._chunk(job, [int(t) for t in completion.token_ids_diff], finish)
                job.handle.push(chunk)
                if chunk.finish_reason is not None:
                    if not out.finished:  # ended here by a stop string: TensorRT-LLM would go on
                        job.result.abort()
                    break
        except Exception as exc:  # noqa: BLE001 - this request fails, the server goes on
            if type(exc).__name__ == "RequestError" and not job.chunks:  # refused at admission: the request's fault
                job.handle.finish(RequestRejected(f"TensorRT-LLM refused the request: {exc}"))
                return
            log.exception("TensorRT-LLM request failed")
            job.handle.finish(EngineFailure(f"TensorRT-LLM: {type(exc).__name__}: {exc}"))
        finally:
            self._jobs.discard(job)
            job.handle.finish()

    def _chunk(self, job: _Job, new: list[int], finish: Optional[str]) -> StepChunk:
        tokens, text, reason = step_output(job.output, job.hist, new, finish)
        stats = None
        if reason is not None:
            steps = max(1, job.steps)
            stats = GenerationStats(spec=AUTOREGRESSIVE, steps=steps, tokens=len(job.output.tokens),
                                    # per step only where each output was one step (else its split is unknown)
                                    tokens_per_step_hist=dict(job.hist) if steps == job.chunks else {},
                                    prompt_tokens=len(job.request.prompt_ids), speculation=self._config,
                                    draft_tokens=_drafted(job, steps) if self._config else 0, policy="fixed")
        return StepChunk(tokens=tokens, text=text, finish_reason=reason, stats=stats)  # type: ignore[arg-type]

    def _cancel(self, handle: Any) -> None:
        job = getattr(handle, "job", None)
        if job is None:
            return
        try:
            job.result.abort()
        except Exception:  # noqa: BLE001 - already finished
            log.debug("abort failed", exc_info=True)
        if job.task is not None:
            job.task.cancel()
        self._jobs.discard(job)
        handle.finish()

    async def aclose(self) -> None:
        self._closing = True
        for job in list(self._jobs):
            job.handle.finish(ServerStopping("the server is shutting down"))
            if job.task is not None:
                job.task.cancel()
        self._jobs.clear()
        await close_within(self._llm.shutdown, ENGINE_CLOSE_S, "TensorRT-LLM's LLM shutdown", log)


def _one_model_drafter(block: Optional[Mapping[str, Any]], version: str) -> Optional[str]:
    """The drafter's name where it drafts inside the model's step and samples with ``SpecSampler``: SA, and NGram (AUTO
    resolving to it) on a release that drafts NGram on the GPU (:mod:`trtlade.trtllm.releases`, ``ngram``:
    ``one_model`` from 1.3: ``SpeculativeDecodingMode.use_one_engine`` holds for every retrieval drafter, NGram and
    SA, ``tensorrt_llm/_torch/speculative/interface.py@a1a20970``); else None (NGram on the host, ``TorchSampler``).

    >>> _one_model_drafter({"decoding_type": "NGram"}, "1.3.0"), _one_model_drafter({"decoding_type": "NGram"}, "1.2.1")
    ('NGram', None)
    """
    kind = block.get("decoding_type") if block is not None else None
    if kind == "SA":
        return kind
    try:
        gpu_ngram = release_for(version).ngram == "one_model"
    except ValueError:  # a version string the table cannot place: as the newest line read
        gpu_ngram = True
    return kind if kind in ("NGram", "AUTO") and gpu_ngram else None


def _drafted(job: Any, steps: int) -> Optional[int]:
    """The request's draft tokens, None where unknown: a release without the metrics, or one that leaves them zeroed
    while drafts were accepted (TorchSampler did not fill them before NVIDIA/TensorRT-LLM#17082: ``total_draft_tokens``
    0 beside accepted tokens)."""
    accepted = len(job.output.tokens) - steps
    return None if job.drafts == 0 and accepted > 0 else job.drafts


def _draft_tokens(completion: Any, last: Optional[int]) -> Optional[int]:
    """``request_perf_metrics.speculative_decoding.total_draft_tokens`` of an output (a running total), else the
    last one seen."""
    metrics = getattr(completion, "request_perf_metrics", None)
    total = getattr(getattr(metrics, "speculative_decoding", None), "total_draft_tokens", None)
    return int(total) if isinstance(total, int) else last


def _finish(reason: Any) -> str:
    """``CompletionOutput.finish_reason`` (``Literal['stop', 'length', 'timeout', 'cancelled']``,
    tensorrt_llm/executor/result.py) as trtlade's: the last two end a request without an answer.

    >>> [_finish(r) for r in ("length", "stop", "cancelled", "timeout", None)]
    ['length', 'stop', 'cancelled', 'timeout', 'stop']
    """
    text = str(reason)
    return text if text in ("length", "cancelled", "timeout") else "stop"

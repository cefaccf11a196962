"""Test double of ``tensorrt_llm.llmapi`` for the PyTorch backend (TensorRT-LLM 1.3), as trtlade uses it.

Mirrored, each with the source it was read from (NVIDIA/TensorRT-LLM):

* ``LLM(model, tokenizer=None, **kwargs)`` (``tensorrt_llm/llmapi/llm.py``, ``LLM.__init__``): the keyword
  arguments are LLM arguments (``TorchLlmArgs`` in ``tensorrt_llm/llmapi/llm_args.py``, a StrictBaseModel: an
  unknown key is refused, pydantic's ValidationError being a ValueError); ``backend="tensorrt"`` raises ValueError
  from 1.3 on (``docs/source/legacy/tensorrt-backend-removal.md``); ``speculative_config`` must be one of the
  config classes below; ``global_pool_size >= max_batch_size`` (``TorchLlmArgs.validate_speculative_config``).
* ``LLM.generate_async(inputs, sampling_params=None, streaming=False)`` returns a result that is async-iterable
  when streaming (``tensorrt_llm/llmapi/llm.py``, ``generate_async``; ``tensorrt_llm/executor/result.py``,
  ``GenerationResult.__aiter__``), each item carrying ``outputs[0].token_ids`` (cumulative), ``token_ids_diff``
  (new since the last item), ``finish_reason`` (``'length'``, ``'stop'`` or None) and ``finished``;
  ``abort()`` ends it (``GenerationResult.abort``). With ``SamplingParams(return_perf_metrics=True)`` an output
  carries ``request_perf_metrics.speculative_decoding`` with ``total_draft_tokens``,
  ``total_accepted_draft_tokens`` and ``acceptance_rate`` (read by Triton's stock llmapi model,
  ``triton_backend/all_models/llmapi/tensorrt_llm/1/model.py@044a90d2``, ``_create_response``).
* Penalties with a drafter (read at ``a1a20970``, the 1.3 line): ``DecodingBaseConfig.enable_penalty`` (llm_args.py,
  default False, added by NVIDIA/TensorRT-LLM#17701) concerns the one-model modes only, which all sample through
  ``SpecSampler`` (``tensorrt_llm/_torch/speculative/utils.py``, ``get_spec_decoder``: every mode whose
  ``SpeculativeDecodingMode.use_one_engine()`` holds, SA among them). ``SpecSampler.validate_request``
  (``tensorrt_llm/_torch/speculative/spec_sampler_base.py``) refuses a request with a repetition / presence /
  frequency penalty while ``enable_penalty`` is off; it runs at request admission inside the executor, so
  ``generate_async`` returns normally and the request's result raises ``RequestError`` (double:
  ``tensorrt_llm/executor/utils.py``) with that text when iterated. At ``a1a20970`` NGram is a one-model mode too
  (``tensorrt_llm/_torch/speculative/interface.py``: ``use_one_engine`` holds for ``is_retrieval_drafter``, NGram or
  SA; upstream's ``test_ngram_is_a_one_engine_mode`` asserts it), so the double refuses its penalties the same way
  from 1.3 on; on 1.0 to 1.2 NGram drafts on the host (``NGramDrafter``) and samples with ``TorchSampler``, which
  applies the penalties (NVIDIA/TensorRT-LLM#16485): no refusal. AUTO is taken as NGram (its drafter in 1.x,
  release notes 1.0 "Auto-enable ngram").
* ``SamplingParams`` (``tensorrt_llm/sampling_params.py``): the fields trtlade sends; ``temperature`` >= 0, ``top_p``
  in (0, 1] (paraphrased messages).
* ``NGramDecodingConfig``, ``SADecodingConfig``, ``AutoDecodingConfig``, ``KvCacheConfig`` (``llm_args.py``): the
  fields trtlade writes, with ``validate_ngram_config`` / ``validate_sa_config``'s rules and messages, and
  pydantic's for the constrained field types (``PositiveInt``: "Input should be greater than 0", raised before
  any model validator runs).

Generation is a deterministic stand-in: the output echoes the prompt's tokens cyclically; with a speculative
config every other iteration carries two tokens (drafts accepted), without one each carries one; every
iteration after the first drafts ``max_draft_len`` tokens.

``DecodingBaseConfig.from_dict`` picks the config class by ``decoding_type`` (``llm_args.py``) and
``llm_utils.update_llm_args_with_extra_dict`` turns a config file's ``speculative_config`` mapping into it
(``llm_args.py``, re-exported by ``tensorrt_llm/llmapi/llm_utils.py``).

Test-only hooks start with an underscore: ``_instances`` (every LLM made), ``LLM._kwargs``, ``LLM._requests``.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Optional

_instances: list["LLM"] = []


class _Config:
    """Keyword fields with defaults; unknown fields refused like a StrictBaseModel (extra="forbid")."""

    _fields: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self._fields)
        if unknown:  # mirrors: StrictBaseModel (tensorrt_llm/llmapi/llm_args.py): extra fields forbidden
            raise ValueError(f"{sorted(unknown)[0]}: Extra inputs are not permitted")
        for name, default in self._fields.items():
            setattr(self, name, kwargs.get(name, default))
        self._validate()

    def _validate(self) -> None:
        pass


_BASE = {"max_draft_len": None, "max_total_draft_tokens": None, "max_concurrency": None,
         "draft_len_schedule": None, "acceptance_rate_window_size": None, "acceptance_rate_threshold": None,
         "use_rejection_sampling": False, "enable_penalty": False}


class NGramDecodingConfig(_Config):
    decoding_type = "NGram"
    _fields = {**_BASE, "max_matching_ngram_size": 2, "is_keep_all": True, "is_use_oldest": True,
               "is_public_pool": True}

    def _validate(self) -> None:
        if self.max_matching_ngram_size < 1:  # mirrors: NGramDecodingConfig.max_matching_ngram_size: PositiveInt
            raise ValueError("max_matching_ngram_size: Input should be greater than 0")
        if self.max_draft_len is None or self.max_draft_len <= 0:  # mirrors: validate_ngram_config
            raise ValueError("max_draft_len must be > 0 for NGram")
        self.max_total_draft_tokens = self.max_draft_len


class SADecodingConfig(_Config):
    decoding_type = "SA"
    _fields = {**_BASE, "max_matching_ngram_size": -1, "enable_global_pool": False, "global_pool_size": None}

    def _validate(self) -> None:
        if self.global_pool_size is not None and self.global_pool_size < 1:
            # mirrors: SADecodingConfig.global_pool_size: Optional[PositiveInt] (llm_args.py@a1a20970): pydantic
            # refuses it as a field, before validate_sa_config runs
            raise ValueError("global_pool_size: Input should be greater than 0")
        # mirrors: SADecodingConfig.validate_sa_config (llm_args.py@a1a20970), in its order
        k = self.max_matching_ngram_size
        if k == 0:
            raise ValueError("max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match). Got 0.")
        if self.enable_global_pool and k != -1 and not 1 <= k <= 64:
            raise ValueError("max_matching_ngram_size must be -1 (longest match) or in [1, 64] when "
                             f"enable_global_pool is True. Got {k}.")
        if self.max_draft_len is None or self.max_draft_len <= 0:
            raise ValueError("max_draft_len must be > 0 for SA")
        if self.global_pool_size is not None:
            # same validator: ">= 1" first (unreachable behind the PositiveInt field type), then the pool flag
            if self.global_pool_size < 1:
                raise ValueError("global_pool_size must be >= 1")
            if not self.enable_global_pool:
                raise ValueError("global_pool_size requires enable_global_pool=True")
        self.max_total_draft_tokens = self.max_draft_len


class AutoDecodingConfig(_Config):
    decoding_type = "AUTO"
    _fields = dict(_BASE)


class DecodingBaseConfig:
    @staticmethod
    def from_dict(data: dict) -> Any:  # mirrors: DecodingBaseConfig.from_dict (llm_args.py): by decoding_type
        classes = {c.decoding_type: c for c in (NGramDecodingConfig, SADecodingConfig, AutoDecodingConfig)}
        kind = data.get("decoding_type")
        if kind not in classes:
            raise ValueError(f"Invalid decoding type: {kind}")
        return classes[kind](**{k: v for k, v in data.items() if k != "decoding_type"})


class KvCacheConfig(_Config):
    _fields = {"free_gpu_memory_fraction": None, "enable_block_reuse": True, "max_tokens": None}


class SamplingParams(_Config):
    # mirrors: tensorrt_llm/sampling_params.py, SamplingParams's fields (min_p: "scale the most likely token to
    # determine the minimum token probability", a field of tllme.SamplingConfig)
    _fields = {"max_tokens": 32, "temperature": None, "top_p": None, "top_k": None, "seed": None, "min_tokens": None,
               "stop_token_ids": None, "ignore_eos": False, "end_id": None, "presence_penalty": None,
               "frequency_penalty": None, "repetition_penalty": None, "min_p": None, "return_perf_metrics": False,
               "detokenize": True, "include_stop_str_in_output": False}

    def _validate(self) -> None:
        if self.temperature is not None and self.temperature < 0:  # paraphrased: SamplingParams checks
            raise ValueError(f"require temperature >= 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"require 0 < top_p <= 1, got {self.top_p}")
        # mirrors: the seed becomes the executor SamplingConfig's random_seed, a RandomSeedType = std::uint64_t
        # (NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/executor/types.h): pybind refuses an int outside [0, 2**64)
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise TypeError(f"incompatible function arguments: random_seed {self.seed} is not a uint64")


#: LLM arguments trtlade may pass (TorchLlmArgs fields it writes; the real model has many more)
_LLM_ARGS = {"backend", "dtype", "max_batch_size", "max_seq_len", "max_num_tokens", "tensor_parallel_size",
             "pipeline_parallel_size", "kv_cache_config", "speculative_config", "trust_remote_code", "stream_interval"}


class _Completion:
    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self._last_token_ids_len = 0
        self.finish_reason: Optional[str] = None
        self.request_perf_metrics: Any = None

    @property
    def token_ids_diff(self) -> list[int]:  # mirrors: CompletionOutput.token_ids_diff (executor/result.py)
        return self.token_ids[self._last_token_ids_len:]


class _Result:
    """A streaming GenerationResult: one item per iteration until finished or aborted; ``_error`` (the
    executor's error response for the request) is raised as ``RequestError`` by the first iteration."""

    def __init__(self, llm: "LLM", prompt: list[int], params: SamplingParams, error: Optional[str] = None) -> None:
        self._llm, self._prompt, self._params, self._error = llm, prompt, params, error
        self.outputs = [_Completion()]
        self.finished = False
        self.aborted = False
        self._step = 0
        self.decoding_iter = 0
        self._drafted = self._accepted = 0

    def abort(self) -> None:  # mirrors: GenerationResult.abort
        self.aborted = True

    def __aiter__(self) -> "_Result":
        return self

    async def __anext__(self) -> "_Result":
        await asyncio.sleep(0)
        if self.finished or self.aborted:
            raise StopAsyncIteration
        if self._error is not None:
            # mirrors: tensorrt_llm/executor/result.py, GenerationResult.__anext__ -> _handle_response: an error
            # response becomes RequestError (tensorrt_llm/executor/utils.py) raised to the caller
            from ..executor.utils import RequestError

            self.finished = True
            raise RequestError(self._error)
        out = self.outputs[0]
        out._last_token_ids_len = len(out.token_ids)
        interval = int(self._llm._kwargs.get("stream_interval") or 1)
        # mirrors: tensorrt_llm/_torch/pyexecutor/py_executor.py, _handle_responses: a response when
        # py_decoding_iter == 1, the request finished, or py_decoding_iter % stream_interval == 0
        while True:
            self._iterate(out)
            if self._step == 1 or out.finish_reason is not None or self._step % interval == 0:
                break
        self.decoding_iter = self._step  # mirrors: executor/result.py, self.decoding_iter = response.decoding_iter
        if self._params.return_perf_metrics:
            rate = self._accepted / self._drafted if self._drafted else 0.0
            out.request_perf_metrics = SimpleNamespace(speculative_decoding=SimpleNamespace(
                total_draft_tokens=self._drafted, total_accepted_draft_tokens=self._accepted, acceptance_rate=rate))
        self.finished = out.finish_reason is not None
        return self

    def _iterate(self, out: _Completion) -> None:
        """One executor iteration: one token, or two with a drafter on every other iteration."""
        count = 1 + (self._step % 2 if self._llm._kwargs.get("speculative_config") is not None else 0)
        stops = set(self._params.stop_token_ids or [])
        for _ in range(count):
            token = self._prompt[len(out.token_ids) % len(self._prompt)]
            out.token_ids.append(token)
            if token in stops:
                out.finish_reason = "stop"
                # mirrors: tensorrt_llm/executor/result.py, _handle_sequence: a STOP_WORDS finish drops the stop
                # tokens from token_ids unless include_stop_str_in_output
                if not self._params.include_stop_str_in_output:
                    out.token_ids.pop()
                break
            if len(out.token_ids) >= self._params.max_tokens:
                out.finish_reason = "length"
                break
        spec = self._llm._kwargs.get("speculative_config")
        if spec is not None and self._step > 0:
            self._drafted += spec.max_draft_len
            self._accepted += count - 1
        self._step += 1


def _one_model(spec: Any) -> bool:
    """mirrors: tensorrt_llm/_torch/speculative/interface.py@a1a20970, ``SpeculativeDecodingMode.use_one_engine``: SA,
    and NGram (AUTO as NGram) on the 1.3 line, where NGram drafts on the GPU; on 1.0-1.2 NGram drafts on the host."""
    import tensorrt_llm

    if isinstance(spec, SADecodingConfig):
        return True
    major, minor = (int(x) for x in str(tensorrt_llm.__version__).split(".")[:2])
    return isinstance(spec, (NGramDecodingConfig, AutoDecodingConfig)) and (major, minor) >= (1, 3)


def _has_occurrence_penalty(params: SamplingParams) -> bool:
    """mirrors: tensorrt_llm/_torch/pyexecutor/sampler/penalties.py, ``has_occurrence_penalty``: a penalty other
    than its neutral value (repetition 1.0, presence and frequency 0.0)."""
    return ((params.repetition_penalty is not None and params.repetition_penalty != 1.0)
            or bool(params.presence_penalty) or bool(params.frequency_penalty))


class LLM:
    def __init__(self, model: str, tokenizer: Any = None, **kwargs: Any) -> None:
        unknown = set(kwargs) - _LLM_ARGS
        if unknown:  # mirrors: TorchLlmArgs (StrictBaseModel) refuses unknown fields
            raise ValueError(f"{sorted(unknown)[0]}: Extra inputs are not permitted")
        if kwargs.get("backend", "pytorch") not in ("pytorch", "_autodeploy"):
            # mirrors: docs/source/legacy/tensorrt-backend-removal.md: LLM(backend="tensorrt") raises ValueError
            raise ValueError(f"backend {kwargs['backend']!r} is no longer supported: the TensorRT-engine backend was "
                             "removed; use backend='pytorch'")
        spec = kwargs.get("speculative_config")
        if spec is not None and not isinstance(spec, (NGramDecodingConfig, SADecodingConfig, AutoDecodingConfig)):
            raise ValueError("speculative_config: Input should be a valid speculative config")
        if isinstance(kwargs.get("kv_cache_config"), dict):  # mirrors: pydantic validates a mapping into the model
            kwargs["kv_cache_config"] = KvCacheConfig(**kwargs["kv_cache_config"])
        pool = getattr(spec, "global_pool_size", None)
        batch = kwargs.get("max_batch_size") or 2048  # an explicit null is the field's default again
        if pool is not None and pool < batch:
            # mirrors: tensorrt_llm/llmapi/llm_args.py, TorchLlmArgs.validate_speculative_config
            raise ValueError(f"global_pool_size ({pool}) must be >= max_batch_size ({batch})")
        self.model, self.tokenizer, self._kwargs = model, tokenizer, kwargs
        self._requests: list[tuple[list[int], SamplingParams]] = []
        self._shut = False
        _instances.append(self)

    def generate_async(self, inputs: Any, sampling_params: Optional[SamplingParams] = None,
                       streaming: bool = False, **_: Any) -> _Result:
        params = sampling_params or SamplingParams()
        spec = self._kwargs.get("speculative_config")
        error = None
        if _one_model(spec) and not spec.enable_penalty and _has_occurrence_penalty(params):
            # mirrors: tensorrt_llm/_torch/speculative/spec_sampler_base.py, SpecSampler.validate_request (the
            # sampler of every one-model mode: SA, and NGram / AUTO from 1.3): called at request admission in the
            # executor, its ValueError becomes this request's error response (paraphrased message)
            error = ("repetition_penalty / presence_penalty / frequency_penalty need 'enable_penalty: true' in the "
                     "speculative decoding config for one-model speculative decoding; enable it, drop the "
                     "penalties, or turn speculative decoding off")
        prompt = list(inputs)
        self._requests.append((prompt, params))
        return _Result(self, prompt, params, error)

    def shutdown(self) -> None:
        self._shut = True

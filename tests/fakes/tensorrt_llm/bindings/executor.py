"""Test double of ``tensorrt_llm.bindings.executor`` (TensorRT-LLM 0.16 to 1.2), as trtlade uses it.

Mirrors, from ../shared/reference/trtllm-facts.md and the pybind sources: class and argument names,
keyword-only arguments (``Request``: everything after ``input_token_ids`` is keyword-only and
``max_tokens`` is required, as in 0.16), ``LookaheadDecodingConfig`` legality messages and
``calculate_speculative_resource()``, ``DecodingConfig`` refusing a lookahead config with another
decoding mode, and an ``Executor`` that checks the engine directory's ``config.json`` against the
executor config at construction the way the real one fails ("Assertion failed: 16 != 40").
C++ exceptions surface as ``RuntimeError`` (pybind's translation of ``TllmException``) and wrong
argument types as ``TypeError``, as in the real bindings.

Generation is a deterministic stand-in: the output echoes the prompt's tokens cyclically; the first
response (context phase) carries one token, later ones ``min(n, 1 + i % n)`` tokens where ``n`` is the
request's ngram size (or the executor's), so streaming yields several tokens per response like
lookahead does; ``decoding_iter`` counts the iterations.

Test-only hooks (not in the real API) start with an underscore: ``_fail_after_iterations``,
``_iteration_delay``,
``_instances``, ``Executor._requests``.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

# ------------------------------------------------------------------------------------- test hooks
#: When set to (iterations, message): every request gets an error response after that many iterations.
_fail_after_iterations: Optional[tuple[int, str]] = None
#: Seconds each executor iteration takes (await_responses sleeps this long before answering).
_iteration_delay: float = 0.0
#: Every Executor constructed (most recent last).
_instances: list["Executor"] = []

_PREFIX = "[TensorRT-LLM][ERROR] "


def _assert(cond: bool, message: str) -> None:
    if not cond:
        raise RuntimeError(f"{_PREFIX}Assertion failed: {message}")


def _int_arg(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"incompatible function arguments: {name} must be int, got {type(value).__name__}")
    return value


# ------------------------------------------------------------------------------------- enums
class ModelType(enum.Enum):
    DECODER_ONLY = 0
    ENCODER_ONLY = 1
    ENCODER_DECODER = 2


class BatchingType(enum.Enum):
    STATIC = 0
    INFLIGHT = 1


class FinishReason(enum.Enum):
    NOT_FINISHED = 0
    END_ID = 1
    STOP_WORDS = 2
    LENGTH = 3
    TIMED_OUT = 4
    CANCELLED = 5


class DecodingMode:
    """``DecodingMode.Lookahead()`` etc.; ``isLookahead()`` as in the bindings."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def Auto() -> "DecodingMode":
        return DecodingMode("Auto")

    @staticmethod
    def TopK() -> "DecodingMode":
        return DecodingMode("TopK")

    @staticmethod
    def TopP() -> "DecodingMode":
        return DecodingMode("TopP")

    @staticmethod
    def TopKTopP() -> "DecodingMode":
        return DecodingMode("TopKTopP")

    @staticmethod
    def BeamSearch() -> "DecodingMode":
        return DecodingMode("BeamSearch")

    @staticmethod
    def Medusa() -> "DecodingMode":
        return DecodingMode("Medusa")

    @staticmethod
    def Lookahead() -> "DecodingMode":
        return DecodingMode("Lookahead")

    @staticmethod
    def ExplicitDraftTokens() -> "DecodingMode":
        return DecodingMode("ExplicitDraftTokens")

    @staticmethod
    def Eagle() -> "DecodingMode":
        return DecodingMode("Eagle")

    def isLookahead(self) -> bool:
        return self.name == "Lookahead"

    def isAuto(self) -> bool:
        return self.name == "Auto"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DecodingMode) and other.name == self.name

    def __repr__(self) -> str:
        return f"DecodingMode.{self.name}()"


# ------------------------------------------------------------------------------------- lookahead
class LookaheadDecodingConfig:
    """``LookaheadDecodingConfig(max_window_size, max_ngram_size, max_verification_set_size)``."""

    def __init__(self, max_window_size: int, max_ngram_size: int, max_verification_set_size: int) -> None:
        w = _int_arg("max_window_size", max_window_size)
        n = _int_arg("max_ngram_size", max_ngram_size)
        g = _int_arg("max_verification_set_size", max_verification_set_size)
        problem = self._illegal(w, n, g)
        _assert(problem is None, f"Illegal lookahead decoding config: {problem}")
        self._w, self._n, self._g = w, n, g

    @staticmethod
    def _illegal(w: int, n: int, g: int) -> Optional[str]:
        """C++ ``isLegal``: the first rule broken, in the order the C++ checks them."""
        if n < 1:
            return "ngramSize requires >= 1"
        if w < 1:
            return "windowSize requires >= 1"
        if g < 0:
            return "verificationSetSize requires >=0"
        if n == 1 and w != 1:
            return "ngramSize=1 requires windowSize=1"
        if n == 1 and g != 0:
            return "ngramSize=1 requires verificationSetSize=0"
        return None

    @staticmethod
    def is_legal(w: int, n: int, g: int) -> bool:
        return LookaheadDecodingConfig._illegal(w, n, g) is None

    @property
    def max_window_size(self) -> int:
        return self._w

    @property
    def max_ngram_size(self) -> int:
        return self._n

    @property
    def max_verification_set_size(self) -> int:
        return self._g

    @staticmethod
    def calculate_speculative_resource_tuple(w: int, n: int, g: int) -> tuple[int, int, int, int]:
        draft = (w - 1 + g) * (n - 1) if n == 1 else (n - 2) + (w - 1 + g) * (n - 1)
        return (draft + 1, n, draft, n - 1)

    def calculate_speculative_resource(self) -> tuple[int, int, int, int]:
        """(max decoding tokens, max path len, max draft tokens, max draft path len)."""
        return self.calculate_speculative_resource_tuple(self._w, self._n, self._g)

    def isLE(self, that: "LookaheadDecodingConfig") -> bool:
        return self._w <= that._w and self._n <= that._n and self._g <= that._g

    @staticmethod
    def get_default_lookahead_decoding_window() -> int:
        return 4

    @staticmethod
    def get_default_lookahead_decoding_ngram() -> int:
        return 3

    @staticmethod
    def get_default_lookahead_decoding_verification_set() -> int:
        return 4

    def __repr__(self) -> str:
        return f"LookaheadDecodingConfig({self._w}, {self._n}, {self._g})"


class DecodingConfig:
    """``DecodingConfig(decoding_mode=None, lookahead_decoding_config=None, medusa_choices=None,
    eagle_config=None)``; setting ``lookahead_decoding_config`` also sets the mode to Lookahead."""

    def __init__(self, decoding_mode: Optional[DecodingMode] = None,
                 lookahead_decoding_config: Optional[LookaheadDecodingConfig] = None,
                 medusa_choices: Optional[list] = None, eagle_config: object = None) -> None:
        self._decoding_mode = decoding_mode
        self._lookahead: Optional[LookaheadDecodingConfig] = None
        self.medusa_choices = medusa_choices
        self.eagle_config = eagle_config
        if lookahead_decoding_config is not None:
            self.lookahead_decoding_config = lookahead_decoding_config

    @property
    def decoding_mode(self) -> Optional[DecodingMode]:
        return self._decoding_mode

    @decoding_mode.setter
    def decoding_mode(self, mode: DecodingMode) -> None:
        self._decoding_mode = mode

    @property
    def lookahead_decoding_config(self) -> Optional[LookaheadDecodingConfig]:
        return self._lookahead

    @lookahead_decoding_config.setter
    def lookahead_decoding_config(self, config: LookaheadDecodingConfig) -> None:
        if not isinstance(config, LookaheadDecodingConfig):
            raise TypeError("incompatible function arguments: lookahead_decoding_config must be a "
                            "LookaheadDecodingConfig")
        _assert(self._decoding_mode is None or self._decoding_mode.isLookahead(),
                "Decoding mode must be Lookahead when lookahead decoding config is set")
        self._lookahead = config
        self._decoding_mode = DecodingMode.Lookahead()


# ------------------------------------------------------------------------------------- configs
class KvCacheConfig:
    def __init__(self, enable_block_reuse: bool = False, max_tokens: Optional[int] = None,
                 max_attention_window: Optional[list[int]] = None, sink_token_length: Optional[int] = None,
                 free_gpu_memory_fraction: Optional[float] = None, host_cache_size: Optional[int] = None,
                 onboard_blocks: bool = True, cross_kv_cache_fraction: Optional[float] = None,
                 secondary_offload_min_priority: Optional[int] = None, event_buffer_max_size: int = 0,
                 enable_partial_reuse: bool = True, copy_on_partial_reuse: bool = True) -> None:
        if free_gpu_memory_fraction is not None and not 0 < free_gpu_memory_fraction <= 1:
            raise RuntimeError(f"{_PREFIX}Assertion failed: freeGpuMemoryFraction must be in (0, 1]")
        self.enable_block_reuse = enable_block_reuse
        self.max_tokens = max_tokens
        self.max_attention_window = max_attention_window
        self.sink_token_length = sink_token_length
        self.free_gpu_memory_fraction = free_gpu_memory_fraction
        self.host_cache_size = host_cache_size
        self.onboard_blocks = onboard_blocks


class OrchestratorConfig:
    def __init__(self, is_orchestrator: bool = True, worker_executable_path: str = "",
                 orch_leader_comm: object = None, spawn_processes: bool = True) -> None:
        self.is_orchestrator = is_orchestrator
        self.worker_executable_path = worker_executable_path


class ParallelConfig:
    def __init__(self, communication_type: object = None, communication_mode: object = None,
                 device_ids: Optional[list[int]] = None, participant_ids: Optional[list[int]] = None,
                 orchestrator_config: Optional[OrchestratorConfig] = None) -> None:
        self.device_ids = device_ids
        self.participant_ids = participant_ids
        self.orchestrator_config = orchestrator_config


class SchedulerConfig:
    def __init__(self, capacity_scheduler_policy: object = None, context_chunking_policy: object = None) -> None:
        self.capacity_scheduler_policy = capacity_scheduler_policy
        self.context_chunking_policy = context_chunking_policy


class ExecutorConfig:
    """``ExecutorConfig(max_beam_width=1, *, ...)`` (everything else keyword-only)."""

    def __init__(self, max_beam_width: int = 1, *, scheduler_config: Optional[SchedulerConfig] = None,
                 kv_cache_config: Optional[KvCacheConfig] = None, enable_chunked_context: bool = False,
                 normalize_log_probs: bool = True, iter_stats_max_iterations: int = 1000,
                 request_stats_max_iterations: int = 0, batching_type: BatchingType = BatchingType.INFLIGHT,
                 max_batch_size: Optional[int] = None, max_num_tokens: Optional[int] = None,
                 parallel_config: Optional[ParallelConfig] = None, peft_cache_config: object = None,
                 logits_post_processor_config: object = None,
                 decoding_config: Optional[DecodingConfig] = None, gpu_weights_percent: float = 1.0,
                 max_queue_size: Optional[int] = None, extended_runtime_perf_knob_config: object = None,
                 debug_config: object = None, recv_poll_period_ms: int = 0,
                 max_seq_idle_microseconds: int = 180000000, spec_dec_config: object = None) -> None:
        self.max_beam_width = _int_arg("max_beam_width", max_beam_width)
        self.scheduler_config = scheduler_config or SchedulerConfig()
        self.kv_cache_config = kv_cache_config or KvCacheConfig()
        self.enable_chunked_context = enable_chunked_context
        self.batching_type = batching_type
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.parallel_config = parallel_config
        self.decoding_config = decoding_config or DecodingConfig()
        self.gpu_weights_percent = gpu_weights_percent
        self.max_queue_size = max_queue_size


class SamplingConfig:
    def __init__(self, beam_width: int = 1, *, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 top_p_min: Optional[float] = None, top_p_reset_ids: Optional[int] = None,
                 top_p_decay: Optional[float] = None, seed: Optional[int] = None,
                 temperature: Optional[float] = None, min_tokens: Optional[int] = None,
                 beam_search_diversity_rate: Optional[float] = None,
                 repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                 frequency_penalty: Optional[float] = None, length_penalty: Optional[float] = None,
                 early_stopping: Optional[int] = None, no_repeat_ngram_size: Optional[int] = None,
                 num_return_sequences: Optional[int] = None) -> None:
        self.beam_width = _int_arg("beam_width", beam_width)
        self.top_k = top_k
        self.top_p = top_p
        self.seed = seed
        self.temperature = temperature
        self.min_tokens = min_tokens


class OutputConfig:
    def __init__(self, return_log_probs: bool = False, return_context_logits: bool = False,
                 return_generation_logits: bool = False, exclude_input_from_output: bool = False,
                 return_encoder_output: bool = False, return_perf_metrics: bool = False) -> None:
        self.return_log_probs = return_log_probs
        self.return_context_logits = return_context_logits
        self.return_generation_logits = return_generation_logits
        self.exclude_input_from_output = exclude_input_from_output


# ------------------------------------------------------------------------------------- requests
class Request:
    """``Request(input_token_ids, *, max_tokens, streaming=False, ...)`` as in 0.16: ``max_tokens`` is
    keyword-only and required (later versions also take it as the second positional argument)."""

    def __init__(self, input_token_ids: list[int], *, max_tokens: int, streaming: bool = False,
                 sampling_config: Optional[SamplingConfig] = None, output_config: Optional[OutputConfig] = None,
                 end_id: Optional[int] = None, pad_id: Optional[int] = None,
                 position_ids: Optional[list[int]] = None, bad_words: Optional[list[list[int]]] = None,
                 stop_words: Optional[list[list[int]]] = None, embedding_bias: object = None,
                 external_draft_tokens_config: object = None, prompt_tuning_config: object = None,
                 lora_config: object = None, lookahead_config: Optional[LookaheadDecodingConfig] = None,
                 logits_post_processor_name: Optional[str] = None,
                 encoder_input_token_ids: Optional[list[int]] = None, client_id: Optional[int] = None,
                 return_all_generated_tokens: bool = False, priority: float = 0.5) -> None:
        if not isinstance(input_token_ids, (list, tuple)):
            raise TypeError("incompatible constructor arguments: input_token_ids must be a list of int")
        self.input_token_ids = [_int_arg("input_token_ids[i]", t) for t in input_token_ids]
        self.max_tokens = _int_arg("max_tokens", max_tokens)
        self.streaming = bool(streaming)
        self.sampling_config = sampling_config or SamplingConfig()
        self.output_config = output_config or OutputConfig()
        self.end_id = end_id
        self.pad_id = pad_id
        self.bad_words = bad_words
        if stop_words is not None:
            for word in stop_words:
                if not isinstance(word, list) or not all(isinstance(t, int) for t in word):
                    raise TypeError("incompatible constructor arguments: stop_words must be a list of "
                                    "lists of int")
        self.stop_words = stop_words
        if lookahead_config is not None and not isinstance(lookahead_config, LookaheadDecodingConfig):
            raise TypeError("incompatible constructor arguments: lookahead_config must be a "
                            "LookaheadDecodingConfig")
        self.lookahead_config = lookahead_config
        self.client_id = client_id
        self.return_all_generated_tokens = return_all_generated_tokens
        self.priority = priority


class Result:
    def __init__(self) -> None:
        self.is_final = False
        self.output_token_ids: list[list[int]] = [[]]
        self.finish_reasons: list[FinishReason] = [FinishReason.NOT_FINISHED]
        self.decoding_iter = 0
        self.sequence_index = 0
        self.is_sequence_final = False
        self.context_logits = None
        self.generation_logits = None
        self.log_probs = None
        self.cum_log_probs = None


class Response:
    def __init__(self, request_id: int, error_msg: Optional[str] = None, result: Optional[Result] = None,
                 client_id: Optional[int] = None) -> None:
        self._request_id = request_id
        self._error = error_msg
        self._result = result
        self._client_id = client_id

    @property
    def request_id(self) -> int:
        return self._request_id

    @property
    def client_id(self) -> Optional[int]:
        return self._client_id

    def has_error(self) -> bool:
        return self._error is not None

    @property
    def error_msg(self) -> str:
        _assert(self._error is not None, "Cannot get the error message of a response without error")
        return self._error  # type: ignore[return-value]

    @property
    def result(self) -> Result:
        _assert(self._result is not None, f"Cannot get the result of a response with an error: {self._error}")
        return self._result  # type: ignore[return-value]


# ------------------------------------------------------------------------------------- executor
class _Active:
    def __init__(self, rid: int, request: Request, spec: tuple[int, int, int]) -> None:
        self.rid = rid
        self.request = request
        self.spec = spec
        self.output: list[int] = []
        self.iterations = 0
        self.cancelled = False
        self.error: Optional[str] = None


class Executor:
    """``Executor(model_path, model_type, executor_config)`` on an engine directory."""

    def __init__(self, model_path: "str | os.PathLike[str]", model_type: ModelType,
                 executor_config: ExecutorConfig) -> None:
        if not isinstance(model_type, ModelType):
            raise TypeError("incompatible constructor arguments: model_type must be a ModelType")
        if not isinstance(executor_config, ExecutorConfig):
            raise TypeError("incompatible constructor arguments: executor_config must be an ExecutorConfig")
        path = Path(model_path)
        config_file = path / "config.json"
        _assert(config_file.is_file(), f"Engine config file {config_file} does not exist")
        raw = json.loads(config_file.read_text())
        build = raw.get("build_config", {})
        mapping = raw.get("pretrained_config", {}).get("mapping", {})
        self._engine_dir = path
        self._max_input_len = int(build.get("max_input_len", 1024))
        self._max_seq_len = int(build.get("max_seq_len", 2048))
        self._max_batch_size = int(build.get("max_batch_size", 8))
        self._vocab_size = int(raw.get("pretrained_config", {}).get("vocab_size", 32000))
        world = int(mapping.get("world_size", 1))
        mpi_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or 1)
        _assert(mpi_size == world or executor_config.parallel_config is not None,
                f"mpiSize == tp * pp ({mpi_size} != {world})")
        self._rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or 0)
        _assert(executor_config.max_beam_width <= int(build.get("max_beam_width", 1)),
                "max_beam_width exceeds the engine's max_beam_width")
        engine_mode = int(build.get("speculative_decoding_mode", 1))
        engine_draft = int(build.get("max_draft_len", 0))
        la = executor_config.decoding_config.lookahead_decoding_config
        if engine_mode & 8:
            _assert(engine_draft > 0, "Lookahead decoding requires max_draft_len > 0")
            _assert(la is not None, "Lookahead decoding config must be provided")
            tokens, _, draft, _ = la.calculate_speculative_resource()  # type: ignore[union-attr]
            # The runtime checks <= (message unconfirmed); the decoding layer asserts equality of tokens
            # per step ("Assertion failed: 16 != 40", tensorrtllm_backend #710).
            _assert(draft <= engine_draft, f"Lookahead decoding config needs max_draft_len {draft}, more than "
                                           f"the engine's {engine_draft}")
            _assert(tokens == engine_draft + 1, f"{tokens} != {engine_draft + 1}")
        else:
            _assert(la is None, "Lookahead decoding config given for an engine built without "
                                "speculative_decoding_mode lookahead_decoding")
        self._spec = (la.max_window_size, la.max_ngram_size, la.max_verification_set_size) if la else (1, 1, 0)
        self._lock = threading.Condition()
        self._active: dict[int, _Active] = {}
        self._pending: list[Response] = []
        self._next_id = 1
        self._shutdown = False
        self._requests: list[Request] = []
        _instances.append(self)

    # ---------------------------------------------------------------------------- API
    def can_enqueue_requests(self) -> bool:
        return self._rank == 0 and not self._shutdown

    def enqueue_request(self, request: Request) -> int:
        if not isinstance(request, Request):
            raise TypeError("incompatible function arguments: request must be a Request")
        _assert(not self._shutdown, "Shutdown called, cannot enqueue request")
        _assert(self._rank == 0, "Cannot enqueue requests on a non-leader rank")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            self._requests.append(request)
            la = request.lookahead_config
            spec = (la.max_window_size, la.max_ngram_size, la.max_verification_set_size) if la else self._spec
            active = _Active(rid, request, spec)
            if len(request.input_token_ids) > self._max_input_len:
                active.error = (f"{_PREFIX}Assertion failed: Prompt length ({len(request.input_token_ids)}) "
                                f"exceeds maximum input length ({self._max_input_len}).")
            elif la is not None:
                W, N, G = self._spec
                w, n, g = spec
                if w > W:
                    active.error = f"{_PREFIX}Assertion failed: lookahead requires setup w ({w}) <= max_w ({W})"
                elif n > N:
                    active.error = f"{_PREFIX}Assertion failed: lookahead requires setup n ({n}) <= max_n ({N})"
                elif g > G:
                    active.error = f"{_PREFIX}Assertion failed: lookahead requires setup g ({g}) <= max_g ({G})"
            self._active[rid] = active
            self._lock.notify_all()
        return rid

    def enqueue_requests(self, requests: list[Request]) -> list[int]:
        return [self.enqueue_request(r) for r in requests]

    def cancel_request(self, id: int) -> None:  # noqa: A002 - the binding's argument name
        with self._lock:
            active = self._active.get(id)
            if active is not None:
                active.cancelled = True
                self._lock.notify_all()

    def await_responses(self, id: "int | list[int] | None" = None,  # noqa: A002
                        timeout: Optional[timedelta] = None) -> list[Response]:
        if timeout is not None and not isinstance(timeout, timedelta):
            raise TypeError("incompatible function arguments: timeout must be a datetime.timedelta")
        wanted = None if id is None else ({id} if isinstance(id, int) else set(id))
        seconds = None if timeout is None else timeout.total_seconds()
        if _iteration_delay:
            time.sleep(_iteration_delay)
        with self._lock:
            if not self._has_work(wanted):
                self._lock.wait(seconds)
            if self._shutdown:
                return []
            return self._iterate(wanted)

    def get_latest_iteration_stats(self) -> list:
        return []

    def get_latest_request_stats(self) -> list:
        return []

    def shutdown(self) -> None:
        with self._lock:
            self._shutdown = True
            self._active.clear()
            self._lock.notify_all()

    # ---------------------------------------------------------------------------- simulation
    def _has_work(self, wanted: Optional[set[int]]) -> bool:
        return any(wanted is None or rid in wanted for rid in self._active) or self._shutdown

    def _iterate(self, wanted: Optional[set[int]]) -> list[Response]:
        """One executor iteration for every active request (of ``wanted``)."""
        out: list[Response] = []
        for rid in list(self._active):
            if wanted is not None and rid not in wanted:
                continue
            active = self._active[rid]
            response = self._step(active)
            if response is not None:
                out.append(response)
        return out

    def _step(self, a: _Active) -> Optional[Response]:
        req = a.request
        if a.error is not None:
            del self._active[a.rid]
            return Response(a.rid, error_msg=a.error, client_id=req.client_id)
        if _fail_after_iterations is not None and a.iterations >= _fail_after_iterations[0]:
            del self._active[a.rid]
            return Response(a.rid, error_msg=f"{_PREFIX}{_fail_after_iterations[1]}", client_id=req.client_id)
        result = Result()
        a.iterations += 1
        result.decoding_iter = a.iterations
        if a.cancelled:
            del self._active[a.rid]
            result.is_final = result.is_sequence_final = True
            result.output_token_ids = [[]]
            result.finish_reasons = [FinishReason.CANCELLED]
            return Response(a.rid, result=result, client_id=req.client_id)
        n = a.spec[1]
        count = 1 if a.iterations == 1 or n == 1 else min(n, 1 + (a.iterations - 1) % n)
        new: list[int] = []
        reason = FinishReason.NOT_FINISHED
        prompt = req.input_token_ids
        min_tokens = req.sampling_config.min_tokens or 0
        for _ in range(count):
            token = prompt[len(a.output) % len(prompt)] if prompt else 0
            if req.end_id is not None and token == req.end_id and len(a.output) >= min_tokens:
                reason = FinishReason.END_ID
                break
            a.output.append(token)
            new.append(token)
            if req.stop_words and any(a.output[-len(w):] == w for w in req.stop_words if w):
                reason = FinishReason.STOP_WORDS
                break
            if len(a.output) >= req.max_tokens:
                reason = FinishReason.LENGTH
                break
        final = reason is not FinishReason.NOT_FINISHED
        if final:
            del self._active[a.rid]
        elif not req.streaming:
            return None  # non-streaming: only the final response, with every token
        result.is_final = result.is_sequence_final = final
        result.output_token_ids = [new if req.streaming else list(a.output)]
        result.finish_reasons = [reason]
        return Response(a.rid, result=result, client_id=req.client_id)

"""Test double of ``tensorrt_llm.bindings.executor`` (TensorRT-LLM 0.16 to 1.2), as trtlade uses it.

Every check a constructor or setter makes here mirrors one in TensorRT-LLM's C++ or pybind sources,
and each carries a ``# mirrors:`` comment naming the file and function (paths inside
https://github.com/NVIDIA/TensorRT-LLM, read across its 0.16.0 to 1.2 releases and the newest 1.x
sources; where a check changed across the range, or the release was not pinned down, the comment says
so). A message the double cannot quote from the sources is marked "paraphrased". The executor's C++ sources
(cpp/tensorrt_llm/executor/*.cpp) were shipped prebuilt until 0.19 ("The C++ runtime is now open sourced",
docs/source/release-notes.md); the 0.16-era pybind sources are public, so a binding's signature is read at 0.16,
while a C++ check's 0.16 text is taken from the nearest public text (the comment says which).
The rule of the double: it refuses what the real bindings refuse, with the real message, so a trtlade
call that would fail on a GPU fails in the tests too. What it cannot know (kernels, memory) it does
not pretend to check.

Also mirrored: class and argument names, keyword-only arguments where the binding has ``py::kw_only()``
(``Request`` after ``input_token_ids``, ``SamplingConfig`` after ``beam_width``; none in ``ExecutorConfig``),
``calculate_speculative_resource()``, and an ``Executor`` that checks the engine directory's
``config.json`` against the executor config at construction the way the real one fails
("Assertion failed: 16 != 40"). C++ exceptions surface as ``RuntimeError`` (pybind's translation of
``TllmException``, text ``[TensorRT-LLM][ERROR] Assertion failed: <condition or message>``) and wrong
argument types as ``TypeError``, as in the real bindings.

Generation is a deterministic stand-in: the output echoes the prompt's tokens cyclically; the first
response (context phase) carries one token, later ones ``min(n, 1 + i % n)`` tokens where ``n`` is the
request's ngram size (or the executor's), so streaming yields several tokens per response like
lookahead does; ``decoding_iter`` counts the iterations.

Test-only hooks (not in the real API) start with an underscore: ``_fail_after_iterations``,
``_iteration_delay``, ``_fail_start``, ``_leader_terminated``, ``Executor._config``, ``Executor._warnings``,
``_instances``, ``Executor._requests``, ``Request._warnings``.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

# ------------------------------------------------------------------------------------- test hooks
#: When set to (iterations, message): every request gets an error response after that many iterations.
_fail_after_iterations: Optional[tuple[int, str]] = None
#: Seconds each executor iteration takes (await_responses sleeps this long before answering).
_iteration_delay: float = 0.0
#: Every Executor constructed (most recent last).
_instances: list["Executor"] = []
#: When set: the next Executor construction raises RuntimeError with this text (a start failure the
#: double cannot produce itself: missing kernels, GPU memory), as the real one does.
_fail_start: Optional[str] = None
#: Set when a leader (rank 0) executor shuts down: the terminate request it broadcasts to its followers.
_leader_terminated = threading.Event()

_PREFIX = "[TensorRT-LLM][ERROR] "


def _assert(cond: bool, message: str) -> None:
    """``TLLM_CHECK(cond)`` / ``TLLM_CHECK_WITH_INFO(cond, message)`` (cpp/include/tensorrt_llm/common/
    assert.h): a ``TllmException`` whose text is "Assertion failed: " and the condition's source text
    or the message; pybind turns it into ``RuntimeError``."""
    if not cond:
        raise RuntimeError(f"{_PREFIX}Assertion failed: {message}")


def _throw(message: str) -> None:
    """``TLLM_THROW(message)`` (assert.h): the message without "Assertion failed"."""
    raise RuntimeError(f"{_PREFIX}{message}")


def _version() -> tuple[int, int]:
    """The double's TensorRT-LLM version (the ``fake_trtllm`` fixture sets ``tensorrt_llm.__version__``)."""
    import tensorrt_llm

    major, minor = str(tensorrt_llm.__version__).split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _int_arg(name: str, value: object) -> int:
    """A ``SizeType32`` / ``TokenIdType`` argument (``std::int32_t``, cpp/include/tensorrt_llm/executor/types.h;
    every caller here takes one). pybind11's integer caster (pybind11/cast.h, ``type_caster`` for arithmetic types,
    ``load``) refuses a non-int and an int that does not fit the C type, so the call's overload resolution fails
    with "incompatible function arguments"."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"incompatible function arguments: {name} must be int, got {type(value).__name__}")
    if not -2**31 <= value <= 2**31 - 1:
        raise TypeError(f"incompatible function arguments: {name} = {value} does not fit an int32")
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
    """cpp/include/tensorrt_llm/executor/types.h, enum class FinishReason (kNOT_FINISHED .. kCANCELLED).
    The 0.16-era binding (cpp/tensorrt_llm/pybind/executor/bindings.cpp, InitBindings, ``py::enum_<FinishReason>``)
    exposes only NOT_FINISHED, END_ID, STOP_WORDS and LENGTH; TIMED_OUT and CANCELLED reach Python in later
    bindings. The double keeps all six (a cancelled request's reason on 0.16 is not one of the named values)."""

    NOT_FINISHED = 0
    END_ID = 1
    STOP_WORDS = 2
    LENGTH = 3
    TIMED_OUT = 4
    CANCELLED = 5


class DecodingMode:
    """``DecodingMode.Lookahead()`` etc.; the ``is*()`` predicates as in the bindings
    (cpp/include/tensorrt_llm/executor/types.h, class DecodingMode)."""

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

    def isMedusa(self) -> bool:
        return self.name == "Medusa"

    def isExplicitDraftTokens(self) -> bool:
        return self.name == "ExplicitDraftTokens"

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
        # pybind: SizeType32 arguments; anything but an int is "incompatible function arguments"
        w = _int_arg("max_window_size", max_window_size)
        n = _int_arg("max_ngram_size", max_ngram_size)
        g = _int_arg("max_verification_set_size", max_verification_set_size)
        # mirrors: cpp/tensorrt_llm/executor/decodingConfig.cpp, LookaheadDecodingConfig::LookaheadDecodingConfig
        # (0.16.0 to 1.2: five TLLM_CHECK_WITH_INFO, in this order; the first that fails is raised)
        _assert(n >= 1, "ngramSize requires >= 1")
        _assert(w >= 1, "windowSize requires >= 1")
        _assert(g == 0 if n == 1 else True, "ngramSize=1 requires verificationSetSize=0")
        _assert(w == 1 if n == 1 else True, "ngramSize=1 requires windowSize=1")
        _assert(g >= 0, "verificationSetSize requires >=0")
        self._w, self._n, self._g = w, n, g

    @staticmethod
    def is_legal(w: int, n: int, g: int) -> bool:
        # mirrors: decodingConfig.cpp, LookaheadDecodingConfig::isLegal (noexcept: a bool, never raises)
        return n >= 1 and w >= 1 and (w == 1 if n == 1 else True) and (g == 0 if n == 1 else True) and g >= 0

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
        # mirrors: decodingConfig.cpp, LookaheadDecodingConfig::calculateSpeculativeResourceTuple
        draft = (0 if n == 1 else n - 2) + (w - 1 + g) * (n - 1)
        return (draft + 1, n, draft, n - 1)

    def calculate_speculative_resource(self) -> tuple[int, int, int, int]:
        """(max decoding tokens, max path len, max draft tokens, max draft path len)."""
        return self.calculate_speculative_resource_tuple(self._w, self._n, self._g)

    def isLE(self, that: "LookaheadDecodingConfig") -> bool:
        # mirrors: decodingConfig.cpp, LookaheadDecodingConfig::isLE: each of (w, n, g) at most that one's
        return self._w <= that._w and self._n <= that._n and self._g <= that._g

    # mirrors: the pybind ``def_static("get_default_lookahead_decoding_window" / "_ngram" / "_verification_set")``
    # (cpp/tensorrt_llm/pybind/executor/request.cpp, initRequestBindings) returning the constants
    # kDefaultLookaheadDecodingWindow / Ngram / VerificationSet of class LookaheadDecodingConfig
    # (cpp/include/tensorrt_llm/executor/executor.h): 4, 3 and 4
    @staticmethod
    def get_default_lookahead_decoding_window() -> int:
        return 4

    @staticmethod
    def get_default_lookahead_decoding_ngram() -> int:
        return 3

    @staticmethod
    def get_default_lookahead_decoding_verification_set() -> int:
        return 4

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LookaheadDecodingConfig) and (self._w, self._n, self._g) == (other._w, other._n,
                                                                                              other._g)

    def __repr__(self) -> str:
        return f"LookaheadDecodingConfig({self._w}, {self._n}, {self._g})"


class DecodingConfig:
    """``DecodingConfig(decoding_mode=None, lookahead_decoding_config=None, medusa_choices=None,
    eagle_config=None)``: the pybind ``py::init`` passes the keywords to the C++ constructor as they are
    (cpp/tensorrt_llm/pybind/executor/executorConfig.cpp, initConfigBindings, class DecodingConfig)."""

    def __init__(self, decoding_mode: Optional[DecodingMode] = None,
                 lookahead_decoding_config: Optional[LookaheadDecodingConfig] = None,
                 medusa_choices: Optional[list] = None, eagle_config: object = None) -> None:
        if decoding_mode is not None and not isinstance(decoding_mode, DecodingMode):
            raise TypeError("incompatible constructor arguments: decoding_mode must be a DecodingMode")
        if lookahead_decoding_config is not None and not isinstance(lookahead_decoding_config,
                                                                    LookaheadDecodingConfig):
            raise TypeError("incompatible constructor arguments: lookahead_decoding_config must be a "
                            "LookaheadDecodingConfig")
        # mirrors: cpp/tensorrt_llm/executor/decodingConfig.cpp, DecodingConfig::DecodingConfig
        # (0.16.0 to 1.2): a lookahead config needs the mode passed with it, and that mode must be Lookahead
        if lookahead_decoding_config is not None:
            _assert(decoding_mode is not None, "LookaheadDecodingConfig is set, but DecodingMode is not set")
            _assert(decoding_mode.isLookahead(),  # type: ignore[union-attr]
                    "LookaheadDecodingConfig is set, but DecodingMode is not set to Lookahead")
        self._decoding_mode = decoding_mode
        self._lookahead = lookahead_decoding_config
        self.medusa_choices = medusa_choices
        self.eagle_config = eagle_config

    @property
    def decoding_mode(self) -> Optional[DecodingMode]:
        return self._decoding_mode

    @decoding_mode.setter
    def decoding_mode(self, mode: DecodingMode) -> None:
        # mirrors: decodingConfig.cpp, DecodingConfig::setDecodingMode (0.16.0 to 1.2)
        if mode.isMedusa() or mode.isLookahead() or mode.isExplicitDraftTokens():
            _throw("Decoding mode must not be set with `setDecodingMode` for Medusa, Lookahead or explicit "
                   "draft tokens. Please, use setters for the respective configs or set decoding mode at the "
                   "DecodingConfig constructor")
        self._decoding_mode = mode

    @property
    def lookahead_decoding_config(self) -> Optional[LookaheadDecodingConfig]:
        return self._lookahead

    @lookahead_decoding_config.setter
    def lookahead_decoding_config(self, config: LookaheadDecodingConfig) -> None:
        if not isinstance(config, LookaheadDecodingConfig):
            raise TypeError("incompatible function arguments: lookahead_decoding_config must be a "
                            "LookaheadDecodingConfig")
        # mirrors: decodingConfig.cpp, DecodingConfig::setLookaheadDecodingConfig: sets the config and the
        # mode, with no check of the mode that was there
        self._lookahead = config
        self._decoding_mode = DecodingMode.Lookahead()


# ------------------------------------------------------------------------------------- configs
_UNSET = object()


class KvCacheConfig:
    """``KvCacheConfig(enable_block_reuse=<version default>, max_tokens=None, ...)``.

    The default of ``enable_block_reuse`` differs across the range: False in 0.16's binding, True in the
    newest 1.x binding (cpp/tensorrt_llm/pybind/executor/executorConfig.cpp, initConfigBindings,
    ``py::arg("enable_block_reuse") = true``). The release that flipped it was not pinned down, so the
    double flips at 0.17 and records whether the caller passed it (``_block_reuse_explicit``): trtlade
    must not depend on the default.
    """

    def __init__(self, enable_block_reuse: object = _UNSET, max_tokens: Optional[int] = None,
                 max_attention_window: Optional[list[int]] = None, sink_token_length: Optional[int] = None,
                 free_gpu_memory_fraction: Optional[float] = None, host_cache_size: Optional[int] = None,
                 onboard_blocks: bool = True, cross_kv_cache_fraction: Optional[float] = None,
                 secondary_offload_min_priority: Optional[int] = None, event_buffer_max_size: int = 0,
                 enable_partial_reuse: bool = True, copy_on_partial_reuse: bool = True) -> None:
        self._block_reuse_explicit = enable_block_reuse is not _UNSET
        self.enable_block_reuse = bool(_version() >= (0, 17) if enable_block_reuse is _UNSET else enable_block_reuse)
        self.host_cache_size = host_cache_size
        self.onboard_blocks = onboard_blocks
        self._max_tokens: Optional[int] = None
        self._max_attention_window: Optional[list[int]] = None
        self._sink_token_length: Optional[int] = None
        self._free_gpu_memory_fraction: Optional[float] = None
        self._cross_kv_cache_fraction: Optional[float] = None
        # mirrors: cpp/tensorrt_llm/executor/kvCacheConfig.cpp, KvCacheConfig::KvCacheConfig: every optional
        # value that is given goes through its setter, and the setters check
        if max_tokens is not None:
            self.max_tokens = max_tokens
        if max_attention_window is not None:
            self.max_attention_window = max_attention_window
        if sink_token_length is not None:
            self.sink_token_length = sink_token_length
        if free_gpu_memory_fraction is not None:
            self.free_gpu_memory_fraction = free_gpu_memory_fraction
        if cross_kv_cache_fraction is not None:
            self.cross_kv_cache_fraction = cross_kv_cache_fraction

    @property
    def max_tokens(self) -> Optional[int]:
        return self._max_tokens

    @max_tokens.setter
    def max_tokens(self, value: int) -> None:
        _assert(_int_arg("max_tokens", value) > 0, "maxTokens > 0")  # mirrors: kvCacheConfig.cpp, setMaxTokens
        self._max_tokens = value

    @property
    def max_attention_window(self) -> Optional[list[int]]:
        return self._max_attention_window

    @max_attention_window.setter
    def max_attention_window(self, value: list[int]) -> None:
        for window in value:  # mirrors: kvCacheConfig.cpp, setMaxAttentionWindowVec
            _assert(_int_arg("max_attention_window[i]", window) > 0, "maxAttentionWindow > 0")
        self._max_attention_window = list(value)

    @property
    def sink_token_length(self) -> Optional[int]:
        return self._sink_token_length

    @sink_token_length.setter
    def sink_token_length(self, value: int) -> None:
        _assert(_int_arg("sink_token_length", value) > 0, "sinkTokenLength > 0")  # setSinkTokenLength
        self._sink_token_length = value

    @property
    def free_gpu_memory_fraction(self) -> Optional[float]:
        return self._free_gpu_memory_fraction

    @free_gpu_memory_fraction.setter
    def free_gpu_memory_fraction(self, value: float) -> None:
        # mirrors: kvCacheConfig.cpp, setFreeGpuMemoryFraction: strictly between 0 and 1 (1.0 is refused)
        _assert(value > 0.0, "freeGpuMemoryFraction > 0.F")
        _assert(value < 1.0, "freeGpuMemoryFraction < 1.F")
        self._free_gpu_memory_fraction = float(value)

    @property
    def cross_kv_cache_fraction(self) -> Optional[float]:
        return self._cross_kv_cache_fraction

    @cross_kv_cache_fraction.setter
    def cross_kv_cache_fraction(self, value: float) -> None:
        _assert(value > 0.0, "crossKvCacheFraction > 0.F")  # mirrors: kvCacheConfig.cpp, setCrossKvCacheFraction
        _assert(value < 1.0, "crossKvCacheFraction < 1.F")
        self._cross_kv_cache_fraction = float(value)


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


def _checked_size(name: str, member: str, least: int = 1) -> property:
    """A size an ExecutorConfig setter stores as ``_<name>``, then checks (``TLLM_CHECK(member > 0)``, or
    ``member >= 0`` for ``least`` 0)."""
    def get(self: Any) -> Optional[int]:
        return getattr(self, "_" + name)

    def put(self: Any, value: int) -> None:
        setattr(self, "_" + name, _int_arg(name, value))
        _assert(getattr(self, "_" + name) >= least, f"{member} > 0" if least == 1 else f"{member} >= 0")
    return property(get, put)


class ExecutorConfig:
    """``ExecutorConfig(max_beam_width=1, scheduler_config=..., ...)``: every argument positional or keyword, in
    the 0.16 binding's order (cpp/tensorrt_llm/pybind/executor/bindings.cpp, InitBindings,
    ``py::class_<ExecutorConfig>``: no ``py::kw_only()``; 1.x, cpp/tensorrt_llm/pybind/executor/executorConfig.cpp,
    initConfigBindings, inserts ``use_gpu_direct_storage`` before ``gpu_weights_percent``, so positions from there
    on differ by release: pass those by keyword). ``max_beam_width``, ``max_batch_size``, ``max_num_tokens``,
    ``iter_stats_max_iterations``, ``request_stats_max_iterations`` and ``max_seq_idle_microseconds`` are
    properties whose setters are the C++ setters (``def_property``), so they check on assignment too."""

    def __init__(self, max_beam_width: int = 1, scheduler_config: Optional[SchedulerConfig] = None,
                 kv_cache_config: Optional[KvCacheConfig] = None, enable_chunked_context: bool = False,
                 normalize_log_probs: bool = True, iter_stats_max_iterations: int = 1000,
                 request_stats_max_iterations: int = 0, batching_type: BatchingType = BatchingType.INFLIGHT,
                 max_batch_size: Optional[int] = None, max_num_tokens: Optional[int] = None,
                 parallel_config: Optional[ParallelConfig] = None, peft_cache_config: object = None,
                 logits_post_processor_config: object = None,
                 decoding_config: Optional[DecodingConfig] = None, gpu_weights_percent: float = 1.0,
                 max_queue_size: Optional[int] = None, extended_runtime_perf_knob_config: object = None,
                 debug_config: object = None, recv_poll_period_ms: int = 0,
                 max_seq_idle_microseconds: int = 180000000, spec_dec_config: object = None,
                 guided_decoding_config: object = None) -> None:
        for name, value in (("kv_cache_config", kv_cache_config), ("decoding_config", decoding_config)):
            expected = KvCacheConfig if name == "kv_cache_config" else DecodingConfig
            if value is not None and not isinstance(value, expected):
                raise TypeError(f"incompatible constructor arguments: {name} must be a {expected.__name__}")
        self._max_beam_width = _int_arg("max_beam_width", max_beam_width)
        self._iter_stats_max_iterations = _int_arg("iter_stats_max_iterations", iter_stats_max_iterations)
        self._request_stats_max_iterations = _int_arg("request_stats_max_iterations", request_stats_max_iterations)
        self._max_seq_idle = int(max_seq_idle_microseconds)
        # mirrors: cpp/tensorrt_llm/executor/executorConfig.cpp, ExecutorConfig::ExecutorConfig: four TLLM_CHECKs,
        # in this order; maxBatchSize and maxNumTokens are stored as given (the constructor does not check them)
        _assert(self._iter_stats_max_iterations >= 0, "iterStatsMaxIterations >= 0")
        _assert(self._request_stats_max_iterations >= 0, "requestStatsMaxIterations >= 0")
        _assert(self._max_beam_width > 0, "mMaxBeamWidth > 0")
        _assert(self._max_seq_idle > 0, "maxSeqIdleMicroseconds > 0")
        self._max_batch_size = None if max_batch_size is None else _int_arg("max_batch_size", max_batch_size)
        self._max_num_tokens = None if max_num_tokens is None else _int_arg("max_num_tokens", max_num_tokens)
        self.scheduler_config = scheduler_config or SchedulerConfig()
        self.kv_cache_config = kv_cache_config or KvCacheConfig()
        self.enable_chunked_context = enable_chunked_context
        self.normalize_log_probs = normalize_log_probs
        self.batching_type = batching_type
        self.parallel_config = parallel_config
        self.decoding_config = decoding_config or DecodingConfig()
        self.gpu_weights_percent = gpu_weights_percent
        self.max_queue_size = max_queue_size
        self.recv_poll_period_ms = recv_poll_period_ms
        self.spec_dec_config = spec_dec_config
        self.guided_decoding_config = guided_decoding_config

    # mirrors: executorConfig.cpp, the setters: each stores the value, then TLLM_CHECKs it (the message is the
    # condition on the member)
    max_beam_width = _checked_size("max_beam_width", "mMaxBeamWidth")  # ExecutorConfig::setMaxBeamWidth
    max_batch_size = _checked_size("max_batch_size", "mMaxBatchSize")  # ExecutorConfig::setMaxBatchSize
    max_num_tokens = _checked_size("max_num_tokens", "mMaxNumTokens")  # ExecutorConfig::setMaxNumTokens

    iter_stats_max_iterations = _checked_size(  # ExecutorConfig::setIterStatsMaxIterations
        "iter_stats_max_iterations", "mIterStatsMaxIterations", least=0)
    request_stats_max_iterations = _checked_size(  # ExecutorConfig::setRequestStatsMaxIterations
        "request_stats_max_iterations", "mRequestStatsMaxIterations", least=0)

    @property
    def max_seq_idle_microseconds(self) -> int:
        return self._max_seq_idle

    @max_seq_idle_microseconds.setter
    def max_seq_idle_microseconds(self, value: int) -> None:  # ExecutorConfig::setMaxSeqIdleMicroseconds
        self._max_seq_idle = int(value)
        _assert(self._max_seq_idle > 0, "mMaxSeqIdleMicroseconds > 0")


class SamplingConfig:
    """``SamplingConfig(beam_width=1, *, top_k=None, ...)``: ``beam_width`` positional, the rest keyword-only
    (cpp/tensorrt_llm/pybind/executor/bindings.cpp, InitBindings, ``py::class_<SamplingConfig>``:
    ``py::arg("beam_width") = 1, py::kw_only()``, 0.16 binding).

    The checks are those of cpp/tensorrt_llm/executor/samplingConfig.cpp (the constructor calls one
    ``check*`` per field; each ``TLLM_CHECK`` is a separate assertion whose message is its own condition, so
    ``top_p=1.5`` fails with ``topP.value() <= 1.f``, not with the ``> 0`` half). Three texts were read:

    * the 1.x text (commit 3585984b; the stored text just before it, with ``beamWidthArray`` but no
      ``promptIgnoreLength``, makes the same checks): ``topPMin >= 0``, ``noRepeatNgramSize >= 0``, and the
      constructor also runs ``checkLengthPenalty`` (``>= 0``) and ``checkEarlyStopping`` (``>= 0``) (their
      setters skip them, "TODO: re-enable"); ``beamWidth`` is bounded by ``kernels::kMaxBeamWidth``;
      repetition penalty ``repetitionpenalty.value() > 0.f``. The double uses it from 1.0 on.
    * a 2025 pre-1.x text (``minP`` present, no ``beamWidthArray``, so after 0.16, whose binding passes no
      ``min_p``, and before Variable-Beam-Width-Search, 0.19): ``topPMin >= 0``, ``noRepeatNgramSize > 0``, no
      length-penalty or early-stopping check, ``beamWidth > 0`` only, and the repetition penalty as
      ``TLLM_CHECK_WITH_INFO`` ("Repetition penalty should be strictly greater than zero. Provided value was
      %f"). The double uses it for 0.17 to 0.x.
    * the oldest stored text (the ``minLength`` era, 0.12 or earlier): ``topPMin > 0``, ``noRepeatNgramSize >
      0``, no length-penalty or early-stopping check. 0.16's own text is not public (the executor sources were
      shipped prebuilt until 0.19, "The C++ runtime is now open sourced", docs/source/release-notes.md); for
      0.16 the double uses the oldest text's ``topPMin > 0`` (as trtlade/config/grps.py documents) and keeps
      the 1.x repetition-penalty text. Both are unverified for 0.16.
    """

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
        v = _version()
        # mirrors: samplingConfig.cpp, SamplingConfig::checkBeamWidth
        if v >= (1, 0):  # kMaxBeamWidth (cpp/tensorrt_llm/kernels/beamSearchKernels.h): 1024
            _assert(0 < beam_width <= 1024, "beamWidth > 0 && beamWidth <= "
                    "static_cast<SizeType32 const>(tensorrt_llm::kernels::kMaxBeamWidth)")
        else:
            _assert(beam_width > 0, "beamWidth > 0")
        if v >= (0, 17) and v < (1, 0):
            rep = (lambda x: x > 0.0, lambda x: "Repetition penalty should be strictly greater than zero. "
                                                f"Provided value was {x:f}")
        else:
            rep = (lambda x: x > 0.0, lambda x: "repetitionpenalty.value() > 0.f")
        top_p_min_ok = (lambda x: x >= 0.0, "topPMin.value() >= 0.f") if v >= (0, 17) else \
            (lambda x: x > 0.0, "topPMin.value() > 0.f")
        no_repeat_ok = (lambda x: x >= 0, "noRepeatNgramSize.value() >= 0") if v >= (1, 0) else \
            (lambda x: x > 0, "noRepeatNgramSize.value() > 0")
        # (value, [(ok, message), ...]) in the constructor's order; within a field, the C++ order of its checks
        checks: list[tuple[object, list]] = [
            (top_k, [(lambda x: x >= 0, "topK.value() >= 0")]),  # checkTopK
            (top_p, [(lambda x: x > 0.0, "topP.value() > 0.f"), (lambda x: x <= 1.0, "topP.value() <= 1.f")]),
            (top_p_min, [top_p_min_ok, (lambda x: x <= 1.0, "topPMin.value() <= 1.f")]),  # checkTopPMin
            (top_p_reset_ids, [(lambda x: x >= 0, "topPResetIds.value() >= 0")]),  # checkTopPResetIds
            (top_p_decay, [(lambda x: x > 0.0, "topPDecay.value() > 0.f"),  # checkTopPDecay
                           (lambda x: x <= 1.0, "topPDecay.value() <= 1.f")]),
            (temperature, [(lambda x: x >= 0.0, "temperature.value() >= 0.f")]),  # checkTemperature
            (min_tokens, [(lambda x: x >= 0, "minTokens.value() >= 0")]),  # checkMinTokens
            (beam_search_diversity_rate, [(lambda x: x >= 0.0, "beamSearchDiversityRate.value() >= 0.f")]),
            (repetition_penalty, [rep]),  # checkRepetitionPenalty
        ]
        if v >= (1, 0):  # checkLengthPenalty, checkEarlyStopping: constructor only, 1.x text
            checks += [(length_penalty, [(lambda x: x >= 0.0, "lengthPenalty.value() >= 0.f")]),
                       (early_stopping, [(lambda x: x >= 0, "earlyStopping.value() >= 0")])]
        checks += [
            (no_repeat_ngram_size, [no_repeat_ok]),  # checkNoRepeatNgramSize
            (num_return_sequences, [(lambda x: x > 0, "numReturnSequences.value() > 0"),  # checkNumReturnSequences
                                    (lambda x: beam_width == 1 or x <= beam_width,
                                     "beamWidth == 1 || numReturnSequences.value() <= beamWidth")]),
        ]
        for value, field_checks in checks:
            if value is None:
                continue
            for ok, message in field_checks:
                _assert(ok(value), message(value) if callable(message) else message)
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
    """``Request(input_token_ids, *, max_tokens=None, max_new_tokens=None, streaming=False, ...)`` as bound in
    0.16 (cpp/tensorrt_llm/pybind/executor/bindings.cpp, InitBindings, ``py::class_<Request>``: a ``py::init``
    lambda with ``py::arg("input_token_ids"), py::kw_only(), py::arg("max_tokens") = py::none(),
    py::arg("max_new_tokens") = py::none(), ...``): everything after ``input_token_ids`` is keyword-only;
    ``max_new_tokens`` is the deprecated name (a warning, used when ``max_tokens`` is missing), and with neither
    the lambda's ``TLLM_CHECK_WITH_INFO`` fails ("missing required argument max_tokens")."""

    def __init__(self, input_token_ids: list[int], *, max_tokens: Optional[int] = None,
                 max_new_tokens: Optional[int] = None, streaming: bool = False,
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
        #: TLLM_LOG_WARNING lines the real binding prints (test hook)
        self._warnings: list[str] = []
        # mirrors: the 0.16 binding's Request py::init lambda (above): the deprecated alias, then the check
        if max_new_tokens is not None:
            self._warnings.append("max_new_tokens is being deprecated; please use max_tokens instead.")
            if max_tokens is None:
                max_tokens = max_new_tokens
        _assert(max_tokens is not None, "missing required argument max_tokens")
        self.max_tokens = _int_arg("max_tokens", max_tokens)
        # mirrors: cpp/tensorrt_llm/executor/requestImpl.h, Request::Impl::validate (run by the constructor)
        _assert(bool(self.input_token_ids), "!mInputTokenIds.empty()")
        _assert(self.max_tokens > 0, "mMaxNewTokens > 0")
        if sampling_config is not None and not isinstance(sampling_config, SamplingConfig):
            raise TypeError("incompatible constructor arguments: sampling_config must be a SamplingConfig")
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
        # paraphrased: the real getter refuses too (executor Response::getErrorMsg); its text was not read
        _assert(self._error is not None, "Cannot get the error message of a response without error")
        return self._error  # type: ignore[return-value]

    @property
    def result(self) -> Result:
        # paraphrased, as above (Response::getResult)
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
        #: the decoder-step exception this request raises when it is set up (its first iteration)
        self.poison: Optional[str] = None


class Executor:
    """``Executor(model_path, model_type, executor_config)`` on an engine directory."""

    def __init__(self, model_path: "str | os.PathLike[str]", model_type: ModelType,
                 executor_config: ExecutorConfig) -> None:
        if not isinstance(model_type, ModelType):
            raise TypeError("incompatible constructor arguments: model_type must be a ModelType")
        if not isinstance(executor_config, ExecutorConfig):
            raise TypeError("incompatible constructor arguments: executor_config must be an ExecutorConfig")
        global _fail_start
        if _fail_start is not None:
            message, _fail_start = _fail_start, None
            raise RuntimeError(message)
        self._config = executor_config
        path = Path(model_path)
        config_file = path / "config.json"
        # paraphrased: the real executor fails reading the missing file (GptJsonConfig::parse); text not read
        _assert(config_file.is_file(), f"Engine config file {config_file} does not exist")
        raw = json.loads(config_file.read_text())
        build = raw.get("build_config", {})
        mapping = raw.get("pretrained_config", {}).get("mapping", {})
        self._engine_dir = path
        self._max_seq_len = int(build.get("max_seq_len", 2048))
        self._max_batch_size = int(build.get("max_batch_size", 8))
        self._vocab_size = int(raw.get("pretrained_config", {}).get("vocab_size", 32000))
        world = int(mapping.get("world_size", 1))
        mpi_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or 1)
        # mirrors: cpp/tensorrt_llm/executor/executorImpl.cpp, Executor::Impl::initializeCommAndWorkers (open
        # from 0.19; earlier releases shipped it closed, users quote the "tp*pp" form, issues #2021, #2058)
        parallel = "tp*pp*cp" if _version() >= (0, 19) else "tp*pp"
        _assert(mpi_size == world or executor_config.parallel_config is not None,
                f"With communicationMode kLEADER, MPI worldSize is expected to be equal to {parallel} when "
                f"participantIds are not specified")
        self._rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or 0)
        if self._rank == 0:
            _leader_terminated.clear()
        # mirrors: cpp/tensorrt_llm/batch_manager/trtGptModel.h, TrtGptModel::TrtGptModel: two
        # TLLM_CHECK_WITH_INFO, the executor's beam width then its batch size (the engine's when not given)
        engine_beam, engine_batch = int(build.get("max_beam_width", 1)), self._max_batch_size
        _assert(executor_config.max_beam_width <= engine_beam,
                f"Runtime configured max beam width ({executor_config.max_beam_width}) must not exceed engine max "
                f"beam width ({engine_beam})")
        batch = executor_config.max_batch_size if executor_config.max_batch_size is not None else engine_batch
        _assert(batch <= engine_batch,
                f"Runtime configured max batch size ({batch}) must not exceed engine max batch size ({engine_batch})")
        engine_mode = int(build.get("speculative_decoding_mode", 1))
        engine_draft = int(build.get("max_draft_len", 0))
        self._max_input_len = self._prompt_limit(build)
        decoding = executor_config.decoding_config
        la = decoding.lookahead_decoding_config
        #: TLLM_LOG_WARNING lines the real executor would print at construction (test hook).
        self._warnings: list[str] = []
        self._lookahead = bool(engine_mode & 8)
        self._config_missing = False
        if self._lookahead:
            # mirrors: cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp,
            # TrtGptModelInflightBatching::setupSpeculativeDecodingModule (0.17 to 1.2; tensorrtllm_backend#710 shows
            # 0.17): with an executor lookahead config, TLLM_CHECK(maxDraftTokens <= getMaxDecodingDraftTokens()),
            # then the module (and so the decoder) is set to the config's size. Without one, nothing is set: the
            # decoder keeps the engine's size and the module's default-constructed execution config (4,3,4).
            # Releases before a guard on the optional (NVIDIA/TensorRT-LLM#2020) raised "bad optional access" here.
            self._config_missing = la is None
            if la is None:
                la = LookaheadDecodingConfig(4, 3, 4)
            else:
                _, _, draft, _ = la.calculate_speculative_resource()
                _assert(draft <= engine_draft, "maxDraftTokens <= mModelConfig.getMaxDecodingDraftTokens()")
                engine_draft = draft
            # mirrors: cpp/tensorrt_llm/layers/lookaheadDecodingLayer.cpp,
            # LookaheadDecodingLayer::CpuAlgorithmResources::CpuAlgorithmResources (line 55 at 0.16.0, 56 at 0.17):
            # TLLM_CHECK_WITH_INFO(maxTokensPerStep == decodingTokens, "%d != %d"), the execution config's tokens a
            # step against the decoder's; with a config given they are the same number, so only a missing one fails
            # ("Assertion failed: 16 != 40", triton-inference-server/tensorrtllm_backend#710)
            tokens = la.calculate_speculative_resource()[0]
            _assert(tokens == engine_draft + 1, f"{tokens} != {engine_draft + 1}")
        elif decoding.decoding_mode is not None and decoding.decoding_mode.isLookahead():
            # mirrors: trtGptModelInflightBatching.cpp, getDecodingMode (anonymous namespace), every release
            # read: an explicit Lookahead mode on an engine built without it is replaced by the default
            # (TopKTopP at beam width 1) with a warning, and setupSpeculativeDecodingModule ignores the
            # lookahead config; the engine runs plain.
            self._warnings.append("Model is not built with Lookahead decoding, but decoding mode is Lookahead. "
                                  "Overwriting decoding mode.")
        self._windows = self._attention_windows(executor_config.kv_cache_config)
        if self._lookahead:
            # mirrors: trtGptModelInflightBatching.cpp, TrtGptModelInflightBatching::TrtGptModelInflightBatching
            # (1.x; needsKVCacheRewind() includes kLookaheadDecoding, cpp/include/tensorrt_llm/runtime/
            # speculativeDecodingMode.h): a rewinding mode checks getNumPools() == 1 ("Rewinding KV cache
            # blocks for models with multiple pools is not supported"), then !isVariableWindow() ("Rewinding
            # KV cache blocks for variable SWA models isn't supported"). The block manager keeps one pool per
            # window size, so variable windows fail the first check; the double raises that one.
            _assert(len(set(self._windows)) == 1,
                    "Rewinding KV cache blocks for models with multiple pools is not supported")
        self._spec = ((la.max_window_size, la.max_ngram_size, la.max_verification_set_size)
                      if la is not None and self._lookahead else (1, 1, 0))
        self._lock = threading.Condition()
        self._active: dict[int, _Active] = {}
        self._pending: list[Response] = []
        self._next_id = 1
        self._shutdown = False
        self._requests: list[Request] = []
        _instances.append(self)

    def _attention_windows(self, kv: "KvCacheConfig | None") -> list[int]:
        """mirrors: cpp/tensorrt_llm/batch_manager/trtGptModel.h, TrtGptModel::TrtGptModel: without
        KvCacheConfig.max_attention_window every layer gets one window of max_sequence_len (a Gemma
        engine's local layers then attend globally); with it, each window clamped to max_sequence_len."""
        given = None if kv is None else kv.max_attention_window
        if not given:
            return [self._max_seq_len]
        return [min(int(w), self._max_seq_len) for w in given]

    @staticmethod
    def _prompt_limit(build: dict) -> int:
        """mirrors: cpp/tensorrt_llm/batch_manager/trtGptModel.h, TrtGptModel::TrtGptModel (0.16 to 1.2,
        chunked context off): min(maxSequenceLen - 1, maxNumTokens) with context FMHA and packed input,
        else the engine's max_input_len."""
        plugin = build.get("plugin_config") or {}
        max_num_tokens = build.get("max_num_tokens")
        if plugin.get("context_fmha", True) is not False and plugin.get("remove_input_padding", True) is not False:
            _assert(max_num_tokens is not None,
                    "Max number of tokens has to be set for context FMHA and usePackedInput case.")
            return min(int(build.get("max_seq_len", 2048)) - 1, int(max_num_tokens))  # type: ignore[arg-type]
        return int(build.get("max_input_len", 1024))

    # ---------------------------------------------------------------------------- API
    def can_enqueue_requests(self) -> bool:
        return self._rank == 0 and not self._shutdown

    def enqueue_request(self, request: Request) -> int:
        if not isinstance(request, Request):
            raise TypeError("incompatible function arguments: request must be a Request")
        # paraphrased: executorImpl.cpp refuses both (mShutdownCalled; canEnqueueRequests() false on a
        # follower in leader mode); the exact texts of enqueueRequests were not read
        _assert(not self._shutdown, "Shutdown called, cannot enqueue request")
        _assert(self._rank == 0, "Cannot enqueue requests on a non-leader rank")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            self._requests.append(request)
            la = request.lookahead_config if self._lookahead else None  # a plain engine ignores it
            spec = (la.max_window_size, la.max_ngram_size, la.max_verification_set_size) if la else self._spec
            active = _Active(rid, request, spec)
            if len(request.input_token_ids) > self._max_input_len:
                # mirrors: cpp/tensorrt_llm/batch_manager/llmRequest.cpp (llmRequest.h in older releases),
                # LlmRequest::validate, TLLM_THROW (older releases stop after the first sentence), caught per
                # request in executorImpl.cpp, Executor::Impl::fetchNewRequests: an error for this request only
                active.error = (f"Encountered an error when fetching new request: {_PREFIX}Prompt length "
                                f"({len(request.input_token_ids)}) exceeds maximum input length "
                                f"({self._max_input_len}). Set log level to info and check TRTGptModel logs for "
                                "how maximum input length is set")
            elif self._lookahead and self._config_missing:
                # mirrors: cpp/tensorrt_llm/batch_manager/createNewDecoderRequests.cpp, CreateNewDecoderRequests:
                # on a lookahead model each decoder setup checks the executor's config, whatever the request holds
                active.poison = f"{_PREFIX}Assertion failed: Lookahead decoding config must be provided"
            elif la is not None:
                active.poison = self._setup_error(spec)
            self._active[rid] = active
            self._lock.notify_all()
        return rid

    def _setup_error(self, spec: tuple[int, int, int]) -> Optional[str]:
        """mirrors: cpp/tensorrt_llm/layers/lookaheadAlgorithm.cpp, LookaheadAlgorithm::setup (a request's
        (w,n,g) is compared with the executor's only here, inside the decoder step; no caller checks it
        when the request is enqueued)."""
        (w, n, g), (W, N, G) = spec, self._spec
        for name, value, limit in (("w", w, W), ("n", n, N), ("g", g, G)):
            if value > limit:
                return f"{_PREFIX}Assertion failed: lookahead requires setup {name} ({value}) <= max_{name} ({limit})"
        return None

    def enqueue_requests(self, requests: list[Request]) -> list[int]:
        return [self.enqueue_request(r) for r in requests]

    def cancel_request(self, id: int) -> None:  # noqa: A002 - the binding's argument name
        # mirrors: executorImpl.cpp, Executor::Impl::cancelRequest: the id is queued and the request ends at the
        # next iteration with a final response; an unknown or finished id is ignored (no error)
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

    # Not mirrored: the real executor keeps up to iter_stats_max_iterations / request_stats_max_iterations
    # entries (executorImpl.cpp, Executor::Impl::getLatestIterationStats / getLatestRequestStats) and hands them
    # over; the double records no statistics, so both calls return an empty list (as the real one does when no
    # iteration ran since the last call). trtlade does not call them.
    def get_latest_iteration_stats(self) -> list:
        return []

    def get_latest_request_stats(self) -> list:
        return []

    def shutdown(self) -> None:
        # mirrors: cpp/tensorrt_llm/executor/executorImpl.cpp, Executor::Impl::shutdown (leader mode): the
        # leader enqueues a terminate request that reaches every rank; a follower sends nothing and joins
        # its execution thread, which returns only when that terminate request arrives
        if self._rank != 0:
            _leader_terminated.wait()
        else:
            _leader_terminated.set()
        with self._lock:
            self._shutdown = True
            self._active.clear()
            self._lock.notify_all()

    # ---------------------------------------------------------------------------- simulation
    def _has_work(self, wanted: Optional[set[int]]) -> bool:
        return any(wanted is None or rid in wanted for rid in self._active) or self._shutdown

    def _iterate(self, wanted: Optional[set[int]]) -> list[Response]:
        """One executor iteration for every active request (of ``wanted``)."""
        poisoned = next((a.poison for a in self._active.values() if a.poison is not None and a.iterations == 0
                         and a.error is None), None)
        if poisoned is not None:
            return self._terminate_active(poisoned)
        out: list[Response] = []
        for rid in list(self._active):
            if wanted is not None and rid not in wanted:
                continue
            active = self._active[rid]
            response = self._step(active)
            if response is not None:
                out.append(response)
        return out

    def _terminate_active(self, error: str) -> list[Response]:
        """mirrors: cpp/tensorrt_llm/executor/executorImpl.cpp, Executor::Impl::forwardAsync: an exception in
        the model's step is caught and ``terminateActiveRequests`` gives EVERY active request an error
        response with the same text, then removes them all."""
        message = f"Encountered an error in forwardAsync function: {error}"
        out = [Response(rid, error_msg=message, client_id=a.request.client_id) for rid, a in self._active.items()]
        self._active.clear()
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
            # mirrors: a cancelled request's final response carries no tokens (docs/source/release-notes.md,
            # 0.16.0: "[BREAKING CHANGE] Cancelled requests now return empty results") and reason kCANCELLED
            # (cpp/include/tensorrt_llm/executor/types.h, FinishReason)
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
        # The stop rules, each ending the request with its FinishReason (cpp/include/tensorrt_llm/executor/
        # types.h): drawing the end id marks the sequence finished (kEND_ID; FinishedState::setFinishedEOS,
        # cpp/tensorrt_llm/kernels/decodingCommon.h, set by the sampling kernels) and the id is not returned
        # (not traced to a line: the double's reading of the outputs); a stop word
        # ends after its last token, which stays in the output (kSTOP_WORDS; stopCriteriaKernels.cu,
        # invokeStopWordsCriterion); max_tokens generated tokens end it (kLENGTH; invokeLengthCriterion).
        # min_tokens: the real sampler masks the end id until min_tokens tokens exist (cpp/tensorrt_llm/kernels/
        # penaltyKernels.cu, the minLength penalty), so the model emits another token; the echo stand-in emits
        # the prompt's token unchanged there.
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
            # mirrors: cpp/include/tensorrt_llm/batch_manager/llmRequest.h, LlmRequest::createResponse (0.16;
            # llmRequest.cpp, LlmRequest::createResult in 1.x): no response unless the request is finished or
            # streaming
            return None
        result.is_final = result.is_sequence_final = final
        # same function: a streaming response carries the new tokens; the non-streaming (final) one the whole
        # sequence, prompt included unless OutputConfig(exclude_input_from_output=True)
        whole = list(a.output) if req.output_config.exclude_input_from_output else [*prompt, *a.output]
        result.output_token_ids = [new if req.streaming else whole]
        result.finish_reasons = [reason]
        return Response(a.rid, result=result, client_id=req.client_id)

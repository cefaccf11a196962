"""The TensorRT-LLM engine: ``tensorrt_llm.bindings.executor`` on a built Lookahead engine, served
through the same interface as the reference engine (:class:`trtlade.contract.serving.ServingEngine`).

Start-up, in this order (every refusal is a :class:`TrtllmStartError` with a message and a hint; the
CLI prints it and exits 1 before binding a port):

1. ``import tensorrt_llm`` (0.16 <= version < 1.3, see :mod:`trtlade.trtllm.compat`);
2. the engine's ``config.json`` checked against the (W,N,G) exactly as ``trtlade validate-config``
   checks it (:func:`trtlade.trtllm.engine_config.check_engine`); errors are printed the same way;
3. multi-GPU: an engine with tp*pp > 1 ranks must run under ``mpirun -n <tp*pp>`` (leader mode: every
   rank builds the executor, rank 0 serves HTTP); the error shows the exact command;
4. ``Executor(engine_dir, ModelType.DECODER_ONLY, ExecutorConfig(max_beam_width=1,
   kv_cache_config=KvCacheConfig(enable_block_reuse=..., free_gpu_memory_fraction=...),
   decoding_config=DecodingConfig(decoding_mode=DecodingMode.Lookahead(),
   lookahead_decoding_config=LookaheadDecodingConfig(W, N, G))))``, the same on the leader and on every
   follower rank. An engine built without lookahead is served with spec (1,1,0) and an empty
   ``DecodingConfig()`` (no mode, no lookahead config, no per-request config): the autoregressive
   baseline, as TensorRT-LLM runs any plain engine. (Passing the Lookahead mode there would not stop
   it in the decoder-only sources read: ``getDecodingMode`` in
   cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp overwrites it with a warning; but it
   is not what a plain engine expects, and the encoder-decoder path fails on it,
   NVIDIA/TensorRT-LLM#2816.) The mode goes with the config because the C++ constructor
   (cpp/tensorrt_llm/executor/decodingConfig.cpp, ``DecodingConfig::DecodingConfig``) refuses a lookahead
   config without it in every release 0.16 to 1.2. KV-cache block reuse is set explicitly (the
   binding's default changed from False in 0.16 to True later): ``serve.kv_cache_enable_block_reuse``,
   default False. A start failure goes through :func:`trtlade.trtllm.failures.diagnose`, the build
   log's classifier, so each known cause gets its own hint.

Serving: each request becomes ``Request(prompt_ids, max_tokens=..., streaming=True, end_id=...,
pad_id=..., stop_words=..., lookahead_config=LookaheadDecodingConfig(w, n, g) or None)`` (None = the
executor's (W,N,G)); a request whose (w,n,g) the server does not admit never reaches the executor
(TensorRT-LLM checks it only inside the decoder step, where the exception fails every active request:
``Executor::Impl::forwardAsync`` calls ``terminateActiveRequests``). The prompt limit advertised in
``/version`` and enforced at admission (400) is the executor's own
(:attr:`~trtlade.trtllm.engine_config.EngineConfig.executor_max_input_len`), so the executor never
refuses a prompt trtlade admitted. One background thread calls
``await_responses(timeout=...)`` and hands every response to its request's async stream; a response
is one executor iteration, so one response = one step = one SSE chunk. Acceptance (tokens per step)
is ``tokens / decoding_iter``. An error response fails that request only (HTTP 500); a client that
goes away gets ``cancel_request``. Stop strings are matched on the detokenized text here (TensorRT-LLM
matches token sequences only) and end the request with ``cancel_request``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Optional, Sequence

from trtlade.errors import TrtladeError
from trtlade.diagnostics import Diagnostic
from trtlade.contract.protocol import GenerationRequest, GenerationStats, StepChunk
from trtlade.contract.serving import (
    ENGINE_CLOSE_S,
    EngineFailure,
    EngineInfo,
    EngineLimits,
    EngineOverloaded,
    GenerationHandle,
    LookaheadPolicy,
    RequestRejected,
    ServerStopping,
    close_within,
    prompt_limit,
)
from trtlade.contract.text import OutputText, eos_token_ids
from trtlade.contract.tokenization import PromptTokenizer
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import LookaheadSpec, wire_param

__all__ = [
    "TrtllmStartError",
    "TrtllmLaunch",
    "MpiWorld",
    "Preflight",
    "preflight",
    "mpirun_command",
    "TrtllmEngine",
    "run_follower",
    "TRTLLM_SCHEDULING",
]

log = logging.getLogger("trtlade.trtllm")

TRTLLM_SCHEDULING = (
    "in-flight batching by TensorRT-LLM's executor: up to the engine's max_batch_size sequences "
    "generate together, each step advancing every sequence; up to serve.max_queue more wait, more get 429")

#: How long the response thread blocks in await_responses before checking for shutdown.
POLL = timedelta(milliseconds=50)


class TrtllmStartError(TrtladeError, RuntimeError):
    """The trtllm engine cannot start: ``message`` says why, ``hint`` what to do."""


@dataclass(frozen=True)
class TrtllmLaunch:
    """Everything needed to start the engine (built by the CLI from flags and the config).

    ``build``: the config's build section (compared with the engine like validate-config does);
    ``source``: the config file name, for diagnostics; ``argv``: the ``trtlade`` arguments, to print
    the exact ``mpirun`` command when the launch is wrong.
    """

    engine_dir: Path
    spec: LookaheadSpec
    tokenizer_dir: Path
    request_default: Optional[LookaheadSpec] = None
    schedule: Optional[LookaheadSchedule] = None
    served_name: Optional[str] = None
    max_queue: int = 64
    kv_cache_free_gpu_memory_fraction: Optional[float] = None
    kv_cache_enable_block_reuse: bool = False
    max_prompt_tokens: Optional[int] = None
    max_new_tokens: Optional[int] = None
    build: Any = None
    source: Optional[str] = None
    argv: tuple[str, ...] = ()

    @property
    def default_request_spec(self) -> LookaheadSpec:
        return self.request_default if self.request_default is not None else self.spec


@dataclass(frozen=True)
class MpiWorld:
    """The MPI launch seen from the environment (Open MPI or PMI); ``size`` None = not under mpirun."""

    size: Optional[int]
    rank: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MpiWorld":
        size = env.get("OMPI_COMM_WORLD_SIZE") or env.get("PMI_SIZE")
        rank = env.get("OMPI_COMM_WORLD_RANK") or env.get("PMI_RANK") or "0"
        return cls(int(size) if size and size.isdigit() else None, int(rank) if rank.isdigit() else 0)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0


def mpirun_command(ranks: int, argv: Sequence[str]) -> str:
    """``mpirun -n 2 trtlade serve --config deploy.yml`` (the arguments as given, shell-quoted)."""
    return f"mpirun -n {ranks} trtlade {shlex.join(list(argv))}".rstrip()


@dataclass(frozen=True)
class Preflight:
    """What the checks found: the bindings module, the engine config and the MPI world."""

    bindings: ModuleType
    version: str
    engine: Any  # trtlade.trtllm.engine_config.EngineConfig
    world: MpiWorld
    warnings: tuple[Diagnostic, ...] = ()


def preflight(launch: TrtllmLaunch, env: Optional[Mapping[str, str]] = None,
              locate: Any = None) -> Preflight:
    """Steps 1-3 of the start-up (cheap, no GPU work): raise :class:`TrtllmStartError` or return.

    ``locate``: optional ``Diagnostic -> Diagnostic`` that fills in YAML line/column for findings
    about the config file (``LoadedConfig.document.locate``), as validate-config prints them.
    """
    from trtlade.trtllm.compat import TrtllmUnavailable, import_tensorrt_llm
    from trtlade.trtllm.engine_config import EngineConfigError, check_engine, read_engine_config

    try:
        root = import_tensorrt_llm()
        bindings = import_tensorrt_llm("bindings.executor")
    except TrtllmUnavailable as exc:
        raise TrtllmStartError(exc.message, exc.hint) from None
    try:
        engine = read_engine_config(launch.engine_dir)
    except EngineConfigError as exc:
        raise TrtllmStartError(exc.message, exc.hint) from None
    diags = check_engine(launch.spec, engine, launch.build, source=launch.source)
    if locate is not None:
        diags = [locate(d) if d.file == launch.source else d for d in diags]
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        listing = "\n".join(d.format_text() for d in errors)
        raise TrtllmStartError(
            f"the engine in {engine.path} does not match this configuration "
            f"({len(errors)} error{'s' if len(errors) != 1 else ''}, as `trtlade validate-config` "
            f"reports them):\n{listing}",
            "fix the config or rebuild the engine; `trtlade validate-config` runs the same checks")
    world = MpiWorld.from_env(os.environ if env is None else env)
    ranks = engine.world_size
    if ranks > 1 and world.size is None:
        raise TrtllmStartError(
            f"the engine in {engine.path} has {ranks} ranks (tp_size {engine.tp_size} x pp_size "
            f"{engine.pp_size}), so it must run under MPI with one process per GPU",
            f"start it with: {mpirun_command(ranks, launch.argv or ('serve',))}   "
            "(rank 0 serves HTTP, the other ranks run the executor)")
    if world.size is not None and world.size != ranks:
        raise TrtllmStartError(
            f"started with {world.size} MPI processes, but the engine in {engine.path} has {ranks} "
            f"rank{'s' if ranks != 1 else ''} (tp_size {engine.tp_size} x pp_size {engine.pp_size})",
            f"start it with: {mpirun_command(ranks, launch.argv or ('serve',))}"
            if ranks > 1 else "start it without mpirun: " + "trtlade " + shlex.join(list(launch.argv or ("serve",))))
    version = str(getattr(root, "__version__", "?"))
    warnings = [d for d in diags if d.severity == "warning"]
    warnings += _runtime_bug_warnings(version, engine)
    return Preflight(bindings=bindings, version=version, engine=engine, world=world, warnings=tuple(warnings))


def _runtime_bug_warnings(version: str, engine: Any) -> list[Diagnostic]:
    """The installed runtime's known Lookahead bugs (the engine's own version is checked with the engine,
    by check_engine; the two differ when an engine is served by another release)."""
    from trtlade.trtllm.compat import known_bugs

    if not engine.is_lookahead or version == str(engine.version):
        return []
    return [Diagnostic("warning", bug.message(version), path="tensorrt_llm.__version__",
                       code="runtime-version-known-bug",
                       hint=f"serve with TensorRT-LLM {bug.instead}; trtlade does not refuse it")
            for bug in known_bugs(version, engine.raw.get("build_config"))]


def _executor_config(tle: ModuleType, launch: TrtllmLaunch, lookahead_engine: bool = True) -> Any:
    """The executor config as TensorRT-LLM's own code builds it (module docstring, step 4). On an engine
    built without lookahead (served with spec (1,1,0), checked by preflight) the decoding config is left
    empty: no mode, no lookahead config, as for any plain engine."""
    if lookahead_engine:
        la = tle.LookaheadDecodingConfig(*launch.spec.as_tuple())
        decoding = tle.DecodingConfig(decoding_mode=tle.DecodingMode.Lookahead(), lookahead_decoding_config=la)
    else:
        decoding = tle.DecodingConfig()
    kv = tle.KvCacheConfig(enable_block_reuse=launch.kv_cache_enable_block_reuse,
                           free_gpu_memory_fraction=launch.kv_cache_free_gpu_memory_fraction)
    return tle.ExecutorConfig(max_beam_width=1, kv_cache_config=kv, decoding_config=decoding)


def _create_executor(pre: Preflight, launch: TrtllmLaunch) -> Any:
    tle = pre.bindings
    try:
        config = _executor_config(tle, launch, lookahead_engine=pre.engine.is_lookahead)
        return tle.Executor(str(launch.engine_dir), tle.ModelType.DECODER_ONLY, config)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise start_failure(pre.version, launch.engine_dir, exc) from None


def start_failure(version: str, engine_dir: Path, exc: BaseException) -> TrtllmStartError:
    """The executor's start error, classified like a build log (:mod:`trtlade.trtllm.failures`)."""
    from trtlade.trtllm.failures import UNKNOWN_START_HINT, diagnose

    known = diagnose(str(exc))
    cause = f" [{known.code}: {known.summary}]" if known else ""
    return TrtllmStartError(
        f"TensorRT-LLM {version} refused to start the executor on {engine_dir}: {exc}{cause}",
        known.hint if known else UNKNOWN_START_HINT)


def _eos_ids(tokenizer: Any, folder: Path) -> tuple[int, ...]:
    """EOS ids: generation_config.json's eos_token_id (int or list) first, then the tokenizer's."""
    value = None
    gen = folder / "generation_config.json"
    if gen.is_file():
        try:
            value = json.loads(gen.read_text()).get("eos_token_id")
        except (OSError, json.JSONDecodeError, AttributeError):
            value = None
    return eos_token_ids(value, getattr(tokenizer, "eos_token_id", None))


# ------------------------------------------------------------------------------------------ requests
@dataclass
class _Job:
    """One request in flight: its stream, its output (tokens, text, stop rules), its step count."""

    handle: Any
    request: GenerationRequest
    spec: LookaheadSpec
    output: OutputText
    request_id: int = -1
    steps: int = 0
    hist: dict[int, int] = field(default_factory=dict)
    done: bool = False


class TrtllmEngine:
    """A started TensorRT-LLM executor behind the :class:`~trtlade.contract.serving.ServingEngine`
    interface. Build it with :meth:`start` (runs :func:`preflight` unless given its result)."""

    def __init__(self, executor: Any, tle: ModuleType, launch: TrtllmLaunch, pre: Preflight,
                 tokenizer: Any) -> None:
        self._executor = executor
        self._tle = tle
        self._launch = launch
        engine = pre.engine
        self._max_batch = int(engine.max_batch_size)
        # the builder added max_draft_len to max_seq_len; a plain engine reserves nothing
        usable = int(engine.max_seq_len) - (int(engine.max_draft_len) if engine.is_lookahead else 0)
        # the executor's own limit (EngineConfig.executor_max_input_len), kept one token below the usable
        # length so that every admitted prompt has room for output and a lookahead step's draft
        longest = prompt_limit(launch.max_prompt_tokens, min(int(engine.executor_max_input_len), usable - 1), log)
        self.info = EngineInfo(
            name="trtllm",
            model_id=launch.served_name or launch.engine_dir.resolve().name,
            spec=launch.spec,
            default_request_spec=launch.default_request_spec,
            limits=EngineLimits(max_seq_len=usable, max_prompt_tokens=longest, max_new_tokens=launch.max_new_tokens,
                                max_sequences=self._max_batch + launch.max_queue),  # submit()'s bound
            scheduling=TRTLLM_SCHEDULING,
            sampling="greedy",
            schedule=launch.schedule,
            policy="schedule" if launch.schedule is not None else "fixed",
            policies=("schedule",) if launch.schedule is not None else (),
            details={"tensorrt_llm": pre.version, "engine_dir": str(launch.engine_dir),
                     "engine": engine.summary(), "tensor_parallel": engine.tp_size,
                     "pipeline_parallel": engine.pp_size, "preset": "trtllm"},
        )
        self.tokenizer = PromptTokenizer(tokenizer)
        self.policy = LookaheadPolicy(launch.schedule)
        self._raw_tokenizer = tokenizer
        eos = _eos_ids(tokenizer, launch.tokenizer_dir)
        self._eos = eos
        self._end_id = eos[0] if eos else None
        self._extra_eos = eos[1:]
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_id = pad if pad is not None else self._end_id
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._responses, name="trtlade-trtllm-responses", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------ start
    @classmethod
    def start(cls, launch: TrtllmLaunch, pre: Optional[Preflight] = None) -> "TrtllmEngine":
        """Preflight (unless given), tokenizer, executor, response thread."""
        from trtlade.contract.tokenization import load_hf_tokenizer

        pre = pre or preflight(launch)
        if not pre.world.is_leader:
            raise TrtllmStartError(f"rank {pre.world.rank} does not serve HTTP; use run_follower()")
        try:
            tokenizer = load_hf_tokenizer(launch.tokenizer_dir)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
            raise TrtllmStartError(f"cannot load the tokenizer from {launch.tokenizer_dir}: {exc}",
                                   "set model.tokenizer (or --model) to the Hugging Face folder the engine "
                                   "was built from; it is read locally, never downloaded") from None
        executor = _create_executor(pre, launch)
        return cls(executor, pre.bindings, launch, pre, tokenizer)

    # ------------------------------------------------------------------------------ interface
    def load(self) -> tuple[int, int]:
        with self._lock:
            inflight = len(self._jobs)
        running = min(inflight, self._max_batch)
        return running, inflight - running

    def submit(self, request: GenerationRequest) -> Any:
        if request.lookahead is not None and self.info.spec.excess(request.lookahead):
            # the HTTP layer already refused this; never let it reach the decoder
            excess = self.info.spec.excess(request.lookahead)
            raise RequestRejected(f"lookahead ({request.lookahead}) is not admitted by the server's "
                                  f"({self.info.spec})", param=wire_param(excess[0][0]))
        if request.temperature > 0:
            raise RequestRejected("the trtllm engine decodes greedily; temperature must be 0",
                                  param="temperature")
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closing.is_set():
                raise EngineOverloaded("the server is shutting down", retry_after_s=5)
            limit = self._max_batch + self._launch.max_queue
            if len(self._jobs) >= limit:
                raise EngineOverloaded(
                    f"{len(self._jobs)} requests in flight: the engine's max_batch_size {self._max_batch} "
                    f"plus serve.max_queue {self._launch.max_queue}; retry later", retry_after_s=1)
            request = self.policy.admit(request)  # the schedule's band, fixed for the request's life
            spec = request.lookahead if request.lookahead is not None else self.info.default_request_spec
            handle = GenerationHandle(loop, request, on_cancel=self._cancel, on_finish=self.policy.release)
            job = _Job(handle=handle, request=request, spec=spec, output=self._output(request))
            try:
                job.request_id = self._executor.enqueue_request(self._to_request(request, spec))
            except BaseException:
                handle.finish()  # not in flight after all
                raise
            handle.job = job  # type: ignore[attr-defined]
            self._jobs[job.request_id] = job
        return handle

    def _output(self, request: GenerationRequest) -> OutputText:
        return OutputText(
            self._raw_tokenizer, stop=request.stop, min_tokens=request.min_tokens, max_tokens=request.max_tokens,
            stop_ids=(*request.stop_token_ids, *(() if request.ignore_eos else self._eos)),
            context=request.prompt_ids)

    def _to_request(self, req: GenerationRequest, spec: LookaheadSpec) -> Any:
        tle = self._tle
        stop_words = [[t] for t in (*req.stop_token_ids, *([] if req.ignore_eos else self._extra_eos))]
        # None = the executor's (W,N,G); on a plain engine (spec (1,1,0)) every request is None
        lookahead = None if spec == self.info.spec else tle.LookaheadDecodingConfig(*spec.as_tuple())
        return tle.Request(
            list(req.prompt_ids),
            max_tokens=req.max_tokens,
            streaming=True,
            sampling_config=tle.SamplingConfig(1, min_tokens=req.min_tokens or None),
            end_id=-1 if req.ignore_eos or self._end_id is None else self._end_id,
            pad_id=self._pad_id if self._pad_id is not None else -1,
            stop_words=stop_words or None,
            lookahead_config=lookahead,
        )

    def _cancel(self, handle: Any) -> None:
        job = getattr(handle, "job", None)
        if job is None:
            return
        with self._lock:
            self._jobs.pop(job.request_id, None)
            job.done = True
        try:
            self._executor.cancel_request(job.request_id)
        except Exception:  # noqa: BLE001 - already finished or executor gone
            log.debug("cancel_request(%s) failed", job.request_id, exc_info=True)
        handle.finish()

    async def aclose(self) -> None:
        self._closing.set()
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for job in jobs:
            job.handle.finish(ServerStopping("the server is shutting down"))
        started = time.monotonic()
        await asyncio.to_thread(self._thread.join, 10.0)
        await close_within(self._executor.shutdown, ENGINE_CLOSE_S - (time.monotonic() - started),
                           "TensorRT-LLM's executor shutdown", log)

    # ------------------------------------------------------------------------------ responses
    def _responses(self) -> None:
        while not self._closing.is_set():
            try:
                responses = self._executor.await_responses(timeout=POLL)
            except Exception as exc:  # noqa: BLE001 - the executor failed: fail what is in flight
                log.exception("await_responses failed")
                with self._lock:
                    jobs = list(self._jobs.values())
                    self._jobs.clear()
                for job in jobs:
                    job.handle.finish(EngineFailure(f"TensorRT-LLM executor error: {exc}"))
                self._closing.wait(0.5)
                continue
            for response in responses:
                try:
                    self._dispatch(response)
                except Exception as exc:  # noqa: BLE001 - never let one response kill the thread
                    log.exception("handling a response failed")
                    job = self._pop(getattr(response, "request_id", -1))
                    if job is not None:
                        job.handle.finish(EngineFailure(f"{type(exc).__name__}: {exc}"))

    def _pop(self, request_id: int) -> Optional[_Job]:
        with self._lock:
            return self._jobs.pop(request_id, None)

    def _dispatch(self, response: Any) -> None:
        with self._lock:
            job = self._jobs.get(response.request_id)
        if job is None or job.done:
            return  # cancelled or already ended (e.g. by a stop string)
        if response.has_error():
            self._pop(job.request_id)
            job.done = True
            job.handle.finish(EngineFailure(f"TensorRT-LLM: {response.error_msg}"))
            return
        result = response.result
        new = [int(t) for t in result.output_token_ids[0]]
        iters = int(getattr(result, "decoding_iter", 0) or 0)
        job.steps = iters if iters > 0 else job.steps + 1  # decoding_iter: steps so far
        finish = self._finish_reason(result) if result.is_final else None
        if finish == "cancelled":
            self._pop(job.request_id)
            job.done = True
            job.handle.finish()
            return
        chunk = self._chunk(job, new, finish)
        if chunk.finish_reason is not None:
            self._pop(job.request_id)
            job.done = True
            if finish is None:  # ended here by a stop string: the executor would go on
                try:
                    self._executor.cancel_request(job.request_id)
                except Exception:  # noqa: BLE001
                    log.debug("cancel after stop string failed", exc_info=True)
        job.handle.push(chunk)
        if job.done:
            job.handle.finish()

    def _finish_reason(self, result: Any) -> Optional[str]:
        reasons = list(getattr(result, "finish_reasons", []) or [])
        name = getattr(reasons[0], "name", str(reasons[0])) if reasons else "END_ID"
        name = name.rsplit(".", 1)[-1]
        if name == "LENGTH":
            return "length"
        if name == "CANCELLED":
            return "cancelled"
        return "stop"  # END_ID, STOP_WORDS (and TIMED_OUT, which trtlade never sets)

    def _chunk(self, job: _Job, new: list[int], finish: Optional[str]) -> StepChunk:
        """The step's tokens through the same output rules as the reference engine
        (:class:`~trtlade.contract.text.OutputText`): EOS and stop ids end the text and show none,
        a stop string ends it at the token that completes it. ``finish`` is the executor's."""
        tokens, text, finish = step_output(job.output, job.hist, new, finish)
        stats = None
        if finish is not None:
            steps = max(job.steps, 1)
            stats = GenerationStats(spec=job.spec, steps=steps, tokens=len(job.output.tokens),
                                    tokens_per_step_hist=dict(job.hist),
                                    rows_per_step=[job.spec.decoding_tokens] * steps,
                                    prompt_tokens=len(job.request.prompt_ids))
        return StepChunk(tokens=tokens, text=text, finish_reason=finish, stats=stats)


def step_output(output: Any, hist: dict[int, int], new: list[int], finish: Optional[str]
                ) -> tuple[list[int], str, Optional[str]]:
    """One step's tokens through :class:`~trtlade.contract.text.OutputText` (EOS and stop ids end the text and
    show none, a stop string ends it at the token that completes it; ``finish``: TensorRT-LLM's own end):
    the tokens emitted, their text, and the request's finish reason once it has one; ``hist`` counts the
    step's tokens (tokens per step)."""
    emitted = output.extend(new)
    text = emitted.text
    if emitted.finish_reason is None and finish is not None:
        text += output.end(finish)
    if emitted.tokens:
        hist[len(emitted.tokens)] = hist.get(len(emitted.tokens), 0) + 1
    return emitted.tokens, text, output.finish_reason


def run_follower(launch: TrtllmLaunch, pre: Optional[Preflight] = None,
                 stop: Optional[threading.Event] = None, grace_s: float = 30.0) -> None:
    """A non-leader MPI rank: build the executor (it joins the leader's) and run until the leader
    shuts its executor down. No HTTP server.

    How it ends (cpp/tensorrt_llm/executor/executorImpl.cpp, ``Executor::Impl::shutdown``, 0.16 to 1.2):
    on a follower in leader mode ``shutdown()`` sends nothing and joins the execution thread, which
    returns when the leader's own ``shutdown()`` broadcasts its terminate request. So the follower
    calls ``shutdown()`` at once, in a thread, and returns when it does: when the leader exits (its
    server stops, or its start fails after the executor was built). This matters because ``mpirun``
    waits for every rank: a follower waiting on a signal that never comes would keep the job, and the
    GPUs, held after the leader is gone. On SIGTERM/SIGINT (``mpirun`` forwards them to every rank, so
    the leader shuts down too) or ``stop``, it waits ``grace_s`` seconds for that and then returns anyway.
    """
    pre = pre or preflight(launch)
    executor = _create_executor(pre, launch)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())  # type: ignore[union-attr]
    joined = threading.Thread(target=executor.shutdown, name="trtlade-follower-shutdown", daemon=True)
    joined.start()
    log.info("rank %d: executor running; it ends when the leader shuts down", pre.world.rank)
    while joined.is_alive() and not stop.is_set():
        joined.join(0.5)
    if joined.is_alive():
        joined.join(grace_s)
        if joined.is_alive():
            log.warning("rank %d: stopped, but the leader did not shut down within %.0f s; exiting anyway",
                        pre.world.rank, grace_s)
            return
    log.info("rank %d: the leader shut down; exiting", pre.world.rank)

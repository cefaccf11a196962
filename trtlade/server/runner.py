"""Run a :class:`~trtlade.server.plan.ServePlan`: build the engine factory, start uvicorn, stop cleanly.

SIGTERM (and Ctrl-C): uvicorn stops accepting connections, waits up to ``serve.shutdown_grace_s`` for
in-flight requests (streams included) to finish; what still runs then is answered a 503 ``server_stopping``
(a stream: its error event and ``[DONE]``) within ``ANSWER_MARGIN_S``, the engine closes and the process
exits 0. If the engine fails to load, the server stops and the process exits 1.
"""

from __future__ import annotations

import errno
import gc
import logging
import signal
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from trtlade.config.schema import ANSWER_MARGIN_S
from trtlade.contract.serving import FairShare, fair_share
from trtlade.errors import TrtladeError, redacted_argv
from trtlade.server.plan import ServePlan

__all__ = ["engine_factory", "serve_app", "make_server", "run_plan", "check_listen", "ServeError"]

log = logging.getLogger("trtlade.server")


class ServeError(TrtladeError, RuntimeError):
    """The server cannot start (message + hint for the CLI)."""


@contextmanager
def long_lived_heap() -> Iterator[None]:
    """Load the engine with the cyclic garbage collector paused, then freeze what it loaded.

    Loading the reference engine leaves about 390,000 long-lived Python objects (torch, transformers, the
    model's modules and parameters). While they pile up Python ran seven full collections over them (0.9 s
    in all, read with ``gc.callbacks``; the start as a whole stayed within noise, 7.7-8.7 s to ready either
    way over 3 interleaved starts), and every later full collection would scan them all again: 180-190 ms
    with the embedded SmolLM2 (AMD EPYC, 2 cores), a stall of every running request's step; frozen, under
    1 ms. ``gc.freeze()`` after one last collection moves the survivors out of the collector's reach
    (CPython's advice for long-lived processes; they are still freed by reference counting). The
    collector's previous on/off state is restored.

    >>> import gc
    >>> with long_lived_heap():
    ...     paused = not gc.isenabled()
    >>> paused, gc.isenabled(), gc.get_freeze_count() > 0
    (True, True, True)
    >>> gc.unfreeze()
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if was_enabled:
            gc.enable()


def _reference_factory(plan: ServePlan) -> Callable[[], Any]:
    def build() -> Any:
        with long_lived_heap():
            return _load_reference(plan)

    return build


def _load_reference(plan: ServePlan) -> Any:
    """The reference engine of ``plan``, behind the serving contract."""
    from trtlade.presets import preset_prompt_lookup
    from trtlade.reference.engine import ReferenceEngine
    from trtlade.reference.serving_adapter import ReferenceServingEngine

    cfg = plan.config
    dtype = "float32" if cfg.model.dtype == "auto" else cfg.model.dtype
    engine = ReferenceEngine.load(
        model=str(plan.model_dir) if plan.model_dir is not None else None,
        spec=cfg.lookahead.spec, dtype=dtype, request_default=cfg.lookahead.request_default,
        threads=cfg.serve.threads, seed=cfg.lookahead.seed, corrected_keying=cfg.lookahead.corrected_keying,
        prompt_lookup=preset_prompt_lookup(cfg.lookahead_preset, cfg.lookahead.spec),
        max_draft_len=cfg.max_draft_len, ngram_implementation=cfg.serve.ngram_implementation,
        max_global_pool_size=cfg.serve.max_global_pool_size, draft_retained_tokens=cfg.serve.draft_retained_tokens)
    if cfg.serve.prefix_cache_mb:
        engine.runner.enable_prefix_cache(cfg.serve.prefix_cache_mb << 20)
    return ReferenceServingEngine(
        engine, max_queue=cfg.serve.max_queue, identities=len(plan.keys.names) if plan.keys is not None else 1,
        max_queue_per_identity=cfg.serve.max_queue_per_identity,
        max_running_per_identity=cfg.serve.max_running_per_identity, max_batch_size=cfg.build.max_batch_size,
        max_num_tokens=cfg.build.max_num_tokens, prefill_chunk=cfg.serve.prefill_chunk_tokens or None,
        prefill_stall=cfg.serve.prefill_stall or None, idle_chunk=cfg.serve.prefill_idle_chunk_tokens or None,
        served_name=cfg.model.served_name,
        max_prompt_tokens=cfg.serve.max_prompt_tokens, max_new_tokens=cfg.serve.max_tokens_limit,
        details={"dtype": dtype, "model_dir": str(plan.model_dir) if plan.model_dir else "embedded",
                 "preset": cfg.lookahead_preset},
        schedule=cfg.lookahead.lookahead_schedule, policy=cfg.lookahead_policy,
        speculation=cfg.speculation_config)


def server_share(plan: ServePlan) -> Optional[FairShare]:
    """Each identity's share (several keys), which the server enforces for an engine that keeps none of its own."""
    cfg = plan.config
    identities = len(plan.keys.names) if plan.keys is not None else 1
    return fair_share(identities, cfg.serve.max_queue, cfg.build.max_batch_size, cfg.serve.max_queue_per_identity,
                      cfg.serve.max_running_per_identity)


def trtllm_launch(plan: ServePlan, argv: Sequence[str]) -> Any:
    from trtlade.trtllm.engine import TrtllmLaunch

    cfg = plan.config
    assert plan.engine_dir is not None and plan.tokenizer_dir is not None
    if cfg.lookahead.preset == "fast":
        log.warning("lookahead.preset fast applies to the reference engine only: the trtllm engine runs "
                    "TensorRT-LLM's algorithm (preset trtllm)")
    return TrtllmLaunch(
        engine_dir=plan.engine_dir, spec=cfg.lookahead.spec, tokenizer_dir=plan.tokenizer_dir,
        request_default=cfg.lookahead.request_default, schedule=cfg.lookahead.lookahead_schedule,
        served_name=cfg.model.served_name,
        max_queue=cfg.serve.max_queue, kv_cache_free_gpu_memory_fraction=cfg.serve.kv_cache_free_gpu_memory_fraction,
        kv_cache_enable_block_reuse=cfg.serve.kv_cache_enable_block_reuse,
        max_prompt_tokens=cfg.serve.max_prompt_tokens, max_new_tokens=cfg.serve.max_tokens_limit,
        build=cfg.build if plan.config_file else None, source=plan.config_file,
        argv=tuple(redacted_argv(argv)))  # a start error's hint prints it: never the key


def engine_factory(plan: ServePlan, argv: Sequence[str] = ("serve",)) -> Optional[Callable[[], Any]]:
    """The zero-argument engine factory for the app (run in a thread once the server is up).

    For trtllm, the cheap checks (TensorRT-LLM version, engine vs config, MPI launch) run here, now,
    and raise ServeError; a non-leader MPI rank runs the executor follower and returns None.
    """
    if plan.engine == "reference":
        return _reference_factory(plan)
    if plan.config.build.backend == "pytorch":
        return _llm_factory(plan)
    from trtlade.trtllm.engine import TrtllmEngine, TrtllmStartError, preflight, run_follower

    launch = trtllm_launch(plan, argv)
    try:
        pre = preflight(launch, locate=plan.locate)
    except TrtllmStartError as exc:
        raise ServeError(exc.message, exc.hint) from None
    for warning in pre.warnings:
        log.warning("%s", warning.format_text())
    if not pre.world.is_leader:
        run_follower(launch, pre)
        return None
    return lambda: TrtllmEngine.start(launch, pre)


def llm_launch(plan: ServePlan) -> Any:
    """TensorRT-LLM's PyTorch backend: the bundle's trtllm-serve.yml when there is one (trtlade and trtllm-serve
    then run the same options), else the options written from the config as `trtlade build` would."""
    from trtlade.builder.pytorch import serve_options
    from trtlade.trtllm.releases import NEWEST_READ
    from trtlade.bundle import Bundle, BundleError, disagreement_text, is_bundle, options_disagreements
    from trtlade.trtllm.llm_engine import LlmLaunch

    cfg = plan.config
    assert plan.model_dir is not None and plan.tokenizer_dir is not None
    folder = plan.bundle
    if folder is None and plan.config_file is not None and is_bundle(Path(plan.config_file).parent):
        folder = Path(plan.config_file).parent  # --config <bundle>/trtlade.yml
    source = Bundle(folder).trtllm_serve_file if folder is not None else None
    if source is not None and source.is_file():
        try:
            options = Bundle(folder).serve_options()
        except BundleError as exc:
            raise ServeError(f"{exc.where}: {exc.message}", exc.hint) from None
        differ = options_disagreements(cfg, options)
        if differ:  # TensorRT-LLM runs trtllm-serve.yml: an edit of trtlade.yml alone would be ignored
            raise ServeError(f"the bundle's {Path(plan.config_file or 'trtlade.yml').name} and {source.name} disagree, "
                             f"and TensorRT-LLM would run {source.name}'s: "
                             + "; ".join(disagreement_text(d) for d in differ),
                             f"make {source} say the same (every key is an LLM(...) argument), or build a new bundle "
                             f"from the edited config (`trtlade build --config {plan.config_file} -o NEW`)")
    else:
        b = cfg.build
        options = serve_options(
            speculation=cfg.speculation or {}, limits={"max_batch_size": b.max_batch_size,
                                                        "max_seq_len": b.max_seq_len or b.max_input_len + 2048,
                                                        "max_num_tokens": b.max_num_tokens or 8192},
            tp_size=b.tp_size, pp_size=b.pp_size, dtype=cfg.model.dtype,
            block_reuse=cfg.serve.kv_cache_enable_block_reuse,
            free_gpu_memory_fraction=cfg.serve.kv_cache_free_gpu_memory_fraction,
            release=cfg.build.trtllm_version or NEWEST_READ)
        if not cfg.speculation:
            options.pop("speculative_config")
    return LlmLaunch(model_dir=plan.model_dir, tokenizer_dir=plan.tokenizer_dir, options=options,
                     served_name=cfg.model.served_name, max_queue=cfg.serve.max_queue,
                     max_prompt_tokens=cfg.serve.max_prompt_tokens, max_new_tokens=cfg.serve.max_tokens_limit,
                     source=str(source) if source is not None else plan.config_file)


def _llm_factory(plan: ServePlan) -> Callable[[], Any]:
    from trtlade.trtllm.compat import TrtllmUnavailable, import_tensorrt_llm
    from trtlade.trtllm.llm_engine import TrtllmLlmEngine

    from trtlade.trtllm.engine import TrtllmStartError

    launch = llm_launch(plan)
    try:  # the cheap checks now, before a port is bound: an install, a release with the drafter
        root = import_tensorrt_llm(check=False)
        TrtllmLlmEngine.check_release(str(getattr(root, "__version__", "?")), launch)
    except (TrtllmUnavailable, TrtllmStartError) as exc:
        raise ServeError(exc.message, exc.hint) from None
    return lambda: TrtllmLlmEngine.start(launch)


def http_stack() -> dict[str, str]:
    """The event loop and HTTP parser uvicorn runs: uvloop and httptools where they are installed (a
    dependency on CPython outside Windows; uvicorn's ``[standard]`` choice), else asyncio and h11.

    On a 2-core host the loop shares the cores with the engine: a streamed token cost the event loop
    30% less CPU with uvloop and httptools (2-core AMD EPYC Zen 4, concurrency 8, three alternating pairs:
    0.20 -> 0.14 ms a token; TPOT within noise; docs/guides/serve.md, "The HTTP stack").
    """
    return {"loop": "uvloop" if _importable("uvloop") else "asyncio",
            "http": "httptools" if _importable("httptools") else "h11"}


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def serve_app(app: Any, host: str, port: int, *, grace_s: float, log_level: str = "info",
              ready: Optional[threading.Event] = None, stack: Optional[dict[str, str]] = None) -> int:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT (exit code 0) or an engine load failure (1), on
    ``stack`` (default :func:`http_stack`)."""
    server = make_server(app, host, port, grace_s=grace_s, log_level=log_level, stack=stack)
    failed = threading.Event()

    def on_load_failed(_exc: BaseException) -> None:
        failed.set()
        server.should_exit = True

    app.state.on_load_failed = on_load_failed
    # uvicorn re-raises a captured SIGTERM/SIGINT after its graceful shutdown on the handlers that were
    # installed before it started: make those no-ops so a requested shutdown exits with status 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 1 if failed.is_set() else 0


def make_server(app: Any, host: str, port: int, *, grace_s: float, log_level: str = "info",
                stack: Optional[dict[str, str]] = None) -> Any:
    """The uvicorn server of ``app``: at shutdown, requests get ``grace_s`` to finish; then the app's
    ``stop_in_flight`` answers those still running (a 503 each), and uvicorn cancels only what is left
    ``ANSWER_MARGIN_S`` (config/schema.py) later."""
    import uvicorn

    stack = stack or http_stack()
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on", loop=stack["loop"],
                            http=stack["http"], timeout_graceful_shutdown=grace_s + ANSWER_MARGIN_S,
                            access_log=False)
    context = getattr(app.state, "context", None)

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            import asyncio

            timer = asyncio.get_running_loop().call_later(grace_s, context.stop_in_flight, grace_s) \
                if context is not None else None
            try:
                await super().shutdown(sockets)
            finally:
                if timer is not None:
                    timer.cancel()

    return Server(config)


def check_listen(host: str, port: int) -> None:
    """Refuse, before the engine loads, an address this process cannot listen on: a host that is not
    one of this machine's addresses or names, a port another process holds. Binds as uvicorn will
    (``SO_REUSEADDR``) and lets go at once (a process that takes the port in between still fails in
    uvicorn, as before)."""
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(f"cannot listen on {where}: the host is not an address or name here ({exc})",
                         "--host (serve.host): an address of this machine, e.g. 127.0.0.1 (this machine only) "
                         "or 0.0.0.0 (every interface)", where="--host") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            busy = exc.errno == errno.EADDRINUSE
            raise ServeError(f"cannot listen on {where}: {exc.strerror or exc}",
                             "another process holds the port: stop it or choose another --port (serve.port)"
                             if busy else "--host (serve.host) must be an address of this machine, e.g. 127.0.0.1 "
                             "or 0.0.0.0; ports below 1024 need privileges",
                             where="--port" if busy else "--host") from None


def run_plan(plan: ServePlan, argv: Sequence[str] = ("serve",), log_level: str = "info",
             access_log: bool = True, access_log_probes: bool = False,
             announce: Optional[Callable[[], None]] = None) -> int:
    """Everything ``trtlade serve`` does after parsing: returns the process exit code. ``announce``: called once
    the address is known to be free (the start banner), on the rank that serves HTTP only."""
    from trtlade.server.app import ServerSettings, create_app

    factory = engine_factory(plan, argv)
    if factory is None:  # an MPI follower rank: done
        return 0
    check_listen(plan.host, plan.port)
    if announce is not None:
        announce()
    stack = http_stack()
    for warning in (*plan.config_warnings, *plan.key_warnings):
        log.warning("%s", warning)
    settings = ServerSettings(api_key=plan.api_key, keys=plan.keys, prefix_cache_scope=plan.prefix_cache_scope,
                              max_body_bytes=plan.config.serve.max_body_bytes,
                              metrics_without_key=plan.config.serve.metrics_without_key,
                              metrics_min_others=plan.config.serve.metrics_min_others, share=server_share(plan),
                              access_log=access_log, access_log_probes=access_log_probes,
                              manifest=plan.manifest, source=plan.describe(), http_stack=stack)
    failure: list[BaseException] = []

    def on_failed(exc: BaseException) -> None:
        failure.append(exc)
        app.state.on_load_failed(exc)

    app = create_app(factory, settings, on_load_failed=on_failed)
    code = serve_app(app, plan.host, plan.port, grace_s=plan.config.serve.shutdown_grace_s, log_level=log_level,
                     stack=stack)
    if failure:
        exc = failure[0]
        raise ServeError(f"the {plan.engine} engine failed to load: {getattr(exc, 'message', None) or exc}",
                         getattr(exc, "hint", "") or "")
    return code

"""``trtlade serve``: the OpenAI-compatible server that enforces per-request lookahead.

Only light modules are imported at the top (``trtlade --help`` must not import fastapi, uvicorn,
torch or tensorrt_llm); the server is imported inside the command.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Optional

import typer

from trtlade.cli.common import EXIT_USAGE, err_console, fail, parse_spec_option

HELP = """Serve a model with an OpenAI-compatible API (/v1/completions, /v1/chat/completions) that
accepts a per-request `lookahead` (w,n,g) up to the server's (W,N,G).

With no arguments: the embedded SmolLM2-135M-Instruct on the reference engine (CPU), (W,N,G) =
(4,2,4), on http://127.0.0.1:8000/v1. Flags override the config file, which overrides defaults.
The API key comes from --api-key or the environment variable TRTLADE_API_KEY.

Examples:

  trtlade serve

  trtlade serve --model ./bundles/qwen3-8b-424          # a bundle made by `trtlade build`

  trtlade serve --config deploy.yml --engine trtllm --port 8080

  mpirun -n 2 trtlade serve --config deploy-tp2.yml       # an engine built with tp*pp = 2
"""


def register(app: typer.Typer) -> None:
    @app.command("serve", help=HELP)
    def serve(
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="A trtlade YAML config file."),
        model: Optional[str] = typer.Option(
            None, "--model", "-m", help="Hugging Face folder, trtlade bundle, TensorRT-LLM engine dir, or a "
            "name under $TRTLADE_MODELS_DIR. Default: the embedded SmolLM2-135M-Instruct."),
        engine: Optional[str] = typer.Option(None, "--engine", "-e", help="reference (PyTorch, CPU) or trtllm."),
        spec: Optional[str] = typer.Option(None, "--spec", help="The server's (W,N,G), e.g. 4,2,4."),
        preset: Optional[str] = typer.Option(None, "--preset", help="The reference engine's algorithm: fast "
                                             "(default: prompt-lookup candidates too) or trtllm (TensorRT-LLM's "
                                             "exactly); overrides lookahead.preset."),
        host: Optional[str] = typer.Option(None, "--host", help="Bind address (default 127.0.0.1)."),
        port: Optional[int] = typer.Option(None, "--port", "-p", help="TCP port (default 8000; 0 = any free)."),
        api_key: Optional[str] = typer.Option(
            None, "--api-key", help="Require 'Authorization: Bearer KEY' (default: $TRTLADE_API_KEY, if set)."),
        api_keys_file: Optional[Path] = typer.Option(
            None, "--api-keys-file", help="Several clients, one identity per key: lines `NAME KEY [admin]` or YAML "
            "(default: serve.api_keys_file, $TRTLADE_API_KEYS_FILE). Each identity's cached prompts stay its own."),
        prefix_cache_scope: Optional[str] = typer.Option(
            None, "--prefix-cache-scope", help="Whose cached prompt blocks a request may reuse: identity (its own "
            "key's; the default with keys), salt (its key's with the same cache_salt) or global (everyone's; the "
            "default without keys); overrides serve.prefix_cache_scope."),
        log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
        access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="One log line per request "
                                        "(status, latency, tokens, lookahead spec; error code and param for "
                                        "4xx/5xx), logger trtlade.access."),
        prefix_cache_mb: Optional[int] = typer.Option(
            None, "--prefix-cache-mb", help="Reference engine: MiB of prompt K/V kept across requests for exact "
            "prefix reuse (default 256; 0 = off); overrides serve.prefix_cache_mb."),
        prefill_chunk_tokens: Optional[int] = typer.Option(
            None, "--prefill-chunk-tokens", help="Reference engine: prompt tokens a step computes next to the "
            "requests decoding (chunked prefill; 0 = off: whole prompts before the step's decode); overrides "
            "serve.prefill_chunk_tokens."),
        prefill_stall: Optional[float] = typer.Option(
            None, "--prefill-stall", help="Reference engine: pace the prompt chunks so the decoding requests' steps "
            "take at most this many times as long on average (beside prompts longer than a chunk 1 + 0.8 x (this "
            "- 1): 1.4 at 1.5), or waiting prompts / decoding requests when that is more (> 1, default 1.5; 0 = "
            "fixed chunks); overrides serve.prefill_stall."),
        prefill_idle_chunk_tokens: Optional[int] = typer.Option(
            None, "--prefill-idle-chunk-tokens", help="Reference engine: with no request decoding, prefill a longer "
            "prompt by chunks of this many tokens, one a step, so a new request or a cancel is seen between them "
            "(default 256; 0 = whole prompts); overrides serve.prefill_idle_chunk_tokens."),
        access_log_probes: bool = typer.Option(False, "--access-log-probes", help="Log GET /health and GET "
                                               "/metrics too (left out by default: load balancers, Kubernetes "
                                               "and Prometheus poll them every few seconds)."),
    ) -> None:
        from trtlade.server.plan import PlanError, ServeFlags, make_plan

        _check_log_level(log_level)
        _check_numbers(port, prefix_cache_mb, prefill_chunk_tokens, prefill_idle_chunk_tokens, prefill_stall)
        _check_choices(prefix_cache_scope, api_keys_file, access_log, access_log_probes)
        parsed_spec = parse_spec_option(spec) if spec is not None else None
        flags = ServeFlags(config=config, model=model, engine=engine, spec=parsed_spec, host=host, port=port,
                           api_key=api_key, api_keys_file=api_keys_file, prefix_cache_scope=prefix_cache_scope,
                           preset=preset, prefix_cache_mb=prefix_cache_mb,
                           prefill_chunk_tokens=prefill_chunk_tokens, prefill_stall=prefill_stall,
                           prefill_idle_chunk_tokens=prefill_idle_chunk_tokens)
        try:
            plan = make_plan(flags)
        except PlanError as exc:
            where = exc.where if exc.where and exc.where not in exc.message else ""
            fail(exc.message, hint=exc.hint, where=where, code=EXIT_USAGE if exc.usage else 1)
        _run(plan, log_level, access_log, access_log_probes)


def _check_numbers(port: Optional[int], prefix_cache_mb: Optional[int], prefill_chunk_tokens: Optional[int],
                   prefill_idle_chunk_tokens: Optional[int], prefill_stall: Optional[float]) -> None:
    """The numeric flags' ranges, refused with a usage error naming the flag (Typer checks only their types)."""
    if port is not None and not 0 <= port <= 65535:
        fail(f"--port {port}: must be between 0 and 65535", code=EXIT_USAGE,
             hint="e.g. --port 8000; 0 takes any free port (printed at start)")
    if prefix_cache_mb is not None and prefix_cache_mb < 0:
        fail(f"--prefix-cache-mb {prefix_cache_mb}: must be 0 (off) or more MiB", code=EXIT_USAGE,
             hint="e.g. --prefix-cache-mb 512, or 0 to turn the prefix cache off")
    if prefill_chunk_tokens is not None and prefill_chunk_tokens < 0:
        fail(f"--prefill-chunk-tokens {prefill_chunk_tokens}: must be 0 (off) or more tokens", code=EXIT_USAGE,
             hint="e.g. 256 (the default): prompt rows a step adds next to decoding requests; 0: whole prompts")
    if prefill_idle_chunk_tokens is not None and prefill_idle_chunk_tokens < 0:
        fail(f"--prefill-idle-chunk-tokens {prefill_idle_chunk_tokens}: must be 0 (whole prompts) or more tokens",
             code=EXIT_USAGE, hint="e.g. 256 (the default): prompt rows a step computes with nothing decoding")
    if prefill_stall is not None and not (prefill_stall == 0 or 1 < prefill_stall < math.inf):
        fail(f"--prefill-stall {prefill_stall:g}: must be above 1 (1.5: decoding steps up to 1.5x as long) or 0 "
             "(fixed chunks)", code=EXIT_USAGE, hint="e.g. --prefill-stall 1.5 (the default)")


def _check_log_level(log_level: str) -> None:
    if log_level not in ("debug", "info", "warning", "error"):
        fail(f"--log-level {log_level!r}: choose debug, info, warning or error", code=EXIT_USAGE,
             hint="info (the default) logs each request; debug adds the engine's steps")


def _check_choices(prefix_cache_scope: Optional[str], api_keys_file: Optional[Path], access_log: bool,
                   access_log_probes: bool) -> None:
    """The cache scope (one of a few), the keys file (a file), and two access-log flags that exclude each other."""
    from trtlade.contract.protocol import CACHE_SCOPES

    if prefix_cache_scope is not None and prefix_cache_scope not in CACHE_SCOPES:
        fail(f"--prefix-cache-scope {prefix_cache_scope!r}: choose {', '.join(CACHE_SCOPES)}", code=EXIT_USAGE,
             hint="identity: only the same API key's cached prompts are reused (the default with keys); salt: "
                  "only with the same cache_salt too; global: everyone's (the default without keys)")
    if api_keys_file is not None and not api_keys_file.is_file():
        fail(f"--api-keys-file {api_keys_file}: " + ("a folder, not a file" if api_keys_file.is_dir()
                                                     else "no such file"), code=EXIT_USAGE,
             hint="one key per line: NAME KEY [admin]")
    if access_log_probes and not access_log:
        fail("--access-log-probes logs health checks and scrapes in the access log, which --no-access-log turns "
             "off", where="--access-log-probes", code=EXIT_USAGE, hint="drop one of the two")


def _run(plan, log_level: str, access_log: bool = True,  # noqa: ANN001 - ServePlan, imported lazily
         access_log_probes: bool = False) -> None:
    from trtlade.server.runner import ServeError, http_stack, run_plan

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    drafting = f"(W,N,G) = ({plan.spec})"
    if plan.engine == "trtllm" and plan.config.build.backend == "pytorch":
        drafting = f"PyTorch backend, drafter {plan.config.speculation_config or 'none'}"
    banner = (f"trtlade serve: engine {plan.engine}, model "
              f"{plan.engine_dir or plan.model_dir or 'embedded SmolLM2-135M-Instruct'}, {drafting}; "
              + (f"http://{plan.host}:{plan.port}/v1" if plan.port else f"http://{plan.host}:<a free port: uvicorn's "
                 "line below names it>/v1") + f" ({' + '.join(http_stack().values())})")

    def announce() -> None:  # once the address is checked, on the rank that serves: it names the address as served
        if plan.host not in ("127.0.0.1", "localhost", "::1") and not plan.api_key:
            err_console.print(f"[yellow]warning:[/] listening on {plan.host} without an API key; anyone who can "
                              "reach this address can use the server (set --api-key or TRTLADE_API_KEY)")
        err_console.print(banner, highlight=False)

    try:
        code = run_plan(plan, argv=sys.argv[1:], log_level=log_level, access_log=access_log,
                        access_log_probes=access_log_probes, announce=announce)
    except ServeError as exc:
        fail(exc.message, hint=exc.hint)
    raise typer.Exit(code)

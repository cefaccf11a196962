"""``trtlade bench`` (the stress test) and ``trtlade report compare`` (two earlier runs side by side).

Only typer, rich, pydantic and light trtlade modules are imported here; httpx, pandas and matplotlib
are imported inside the commands.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import typer

from trtlade.cli.common import (EXIT_INVALID, EXIT_USAGE, api_key_for, console, err_console, fail, refuse_overwrite,
                                require_path)
from trtlade.errors import redacted_argv

if TYPE_CHECKING:  # pragma: no cover
    from trtlade.bench.metrics import LevelSummary
    from trtlade.bench.plan import BenchPlan, Target
    from trtlade.bench.records import RequestRecord
    from trtlade.config.schema import BenchSection

_HELP = """Stress-test an OpenAI-compatible server: output throughput, TTFT, end-to-end latency and decode
throughput per concurrency level, autoregressive vs lookahead (or two servers), with a report folder (tables,
CSV, JSON, plots).

Examples:

  trtlade bench --base-url http://127.0.0.1:8000 --modes ar,lookahead

  trtlade bench --launch configs/smollm2-cpu.yml --max-concurrency 1,2 --num-prompts 4

  trtlade bench --base-url http://gpu1:8000 --base-url-b http://gpu2:8000 --modes default
"""


def register(app: typer.Typer) -> None:
    app.command("bench", help=_HELP, no_args_is_help=False)(bench)
    report_app = typer.Typer(help="Work with bench report folders.", no_args_is_help=True)
    report_app.command("compare", help="Render the comparison tables (throughput, TTFT, latency) of two "
                       "earlier runs (e.g. one run per server): A is the baseline.")(report_compare)
    app.add_typer(report_app, name="report")


# ----------------------------------------------------------------------------- config defaults
def load_bench_defaults(config: Optional[Path]) -> tuple["BenchSection", Optional[Any]]:
    """The bench section of ``config`` (and the loaded config), or the schema defaults."""
    from trtlade.config.schema import BenchSection

    if config is None:
        return BenchSection(), None
    from trtlade.config.loader import ConfigError, ConfigLoadError, load_config

    try:
        loaded = load_config(config)
    except ConfigError as exc:
        fail(f"{config}: the config is not valid:\n{exc}", hint="check it with: trtlade validate-config "
             f"{config}")
    except ConfigLoadError as exc:  # missing, unreadable, or not YAML
        fail(f"{config}: the config cannot be read:\n{exc}", hint="check it with: trtlade validate-config "
             f"{config}")
    except OSError as exc:
        fail(f"cannot read config {config}: {exc.strerror or exc}", hint="check the path")
    return loaded.config.bench, loaded


def result_root(given: Optional[Path], loaded: Any, section: "BenchSection") -> Path:
    """Where run folders go (``--result-dir``, else the config's ``bench.result_dir``), created now: a
    folder that cannot be written is refused before any server starts or request is sent, not after the
    run (bench and tune)."""
    import os

    root = Path(given if given is not None else config_relative(loaded, section, "result_dir", section.result_dir))
    where = "--result-dir" if given is not None else "bench.result_dir"
    hint = "give a folder you can write; run folders go under it (default: reports)"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{root}: cannot create it ({exc.strerror or exc})", where=where, hint=hint)
    if not os.access(root, os.W_OK | os.X_OK):
        fail(f"{root}: not writable", where=where, hint=hint)
    return root


def config_relative(loaded: Any, section: "BenchSection", name: str, value: Any) -> Any:
    """A path the user wrote in the config is relative to the config file; defaults stay as they are."""
    if loaded is not None and name in section.model_fields_set:
        return loaded.resolve(value)
    return value


# ----------------------------------------------------------------------------- progress
class _Progress:
    """A rich progress bar per (series, level) on a terminal; one line per level otherwise."""

    def __init__(self) -> None:
        self.tty = err_console.is_terminal
        self._bar: Any = None
        self._task: Any = None
        self._label = ""

    def start(self, series: str, concurrency: int, total: int, warmup: bool) -> None:
        self._label = f"{series} @ concurrency {concurrency}" + (" (warm-up)" if warmup else "")
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err_console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=total)

    def advance(self, record: "RequestRecord") -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def finish(self, summary: Optional["LevelSummary"]) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if summary is not None:
            err_console.print(_level_line(summary), markup=False, highlight=False)


def _num(value: Optional[float], fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _level_line(s: "LevelSummary") -> str:
    failed = f", {s.failed} FAILED" if s.failed else ""
    return (f"{s.series:>12} @ {s.concurrency:>3}: {s.completed}/{s.num_prompts} ok{failed}; "
            f"output {_num(s.output_throughput, '.1f')} tok/s; TTFT {_num(s.mean_ttft_ms, '.1f')} ms, "
            f"TPOT {_num(s.mean_tpot_ms, '.1f')} ms, decode {_num(s.mean_decode_throughput, '.1f')} tok/s "
            f"per request")


# ----------------------------------------------------------------------------- preflight
def _listed_models(listing: Any) -> list[str]:
    """The model ids of a GET /v1/models answer (none where it could not be read)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")] if isinstance(data, list) else []


async def preflight_servers(targets: list["Target"], model: Optional[str], timeout: float, first: int = 0) -> None:
    """Reach every server: the model (first of /v1/models unless --model) and /version info. ``first``: the index of
    ``targets[0]`` among the run's servers (1: the --base-url-b one alone)."""
    from trtlade.bench.client import ServerError, fetch_json, make_client

    async with make_client(2, timeout) as client:
        for i, target in enumerate(targets, start=first):
            headers = target.headers()
            where = "--base-url" if i == 0 else "--base-url-b"
            try:
                listing = await fetch_json(client, target.base_url + "/v1/models", headers)
            except ServerError as exc:
                if exc.kind in ("connection", "timeout"):
                    fail(f"cannot reach the server at {target.base_url}: {exc}", where=where,
                         hint="start the server (or use --launch CONFIG), and check the host and port",
                         code=EXIT_INVALID)
                if model is None:
                    fail(f"cannot list the server's models: {exc}", where=where,
                         hint="pass --model NAME (the model name the server expects)", code=EXIT_INVALID)
                listing = None
            listed = _listed_models(listing)
            if model is not None and listed and model not in listed and model.rsplit("/", 1)[-1] not in listed:
                # (a server may take a model name with its organisation: org/NAME for NAME, as trtlade's does)
                fail(f"the server at {target.base_url} serves no model {model!r} (GET /v1/models lists "
                     f"{', '.join(map(repr, listed))}): every request would be a 404", where="--model",
                     hint=f"--model {listed[0]}, or leave --model out to use the first listed")
            if model is not None:
                target.model = model
            else:
                data = listing.get("data") if isinstance(listing, dict) else None
                first = data[0] if isinstance(data, list) and data else None
                if not isinstance(first, dict) or not first.get("id"):
                    fail(f"GET {target.base_url}/v1/models lists no model", where=where,
                         hint="pass --model NAME", code=EXIT_INVALID)
                target.model = str(first["id"])
            try:
                info = await fetch_json(client, target.base_url + "/version", headers, timeout=5.0)
                target.server_info = info if isinstance(info, dict) else {"version": info}
            except ServerError:
                target.server_info = {}


# ----------------------------------------------------------------------------- the command
def bench(
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Server root, e.g. http://127.0.0.1:8000 "
                                           "(a trailing /v1 is accepted). Default: the config's serve host:port, "
                                           "else http://127.0.0.1:8000."),
    base_url_b: Optional[str] = typer.Option(None, "--base-url-b", help="A second server: the same prompts and "
                                             "modes run on both, interleaved per level (series a and b)."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Names of the two servers (default a,b)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="chat, completions, or a path such as "
                                           "/v1/chat/completions. Default: chat (config: bench.endpoint)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name sent; default: the first of GET "
                                        "/v1/models (per server)."),
    max_concurrency: Optional[list[str]] = typer.Option(
        None, "--max-concurrency", "-c", help="Concurrency levels, comma-separated or repeated "
        "(default 1,2,4,6,8,10,16; config: bench.concurrency)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", "-n", min=1,
                                              help="Measured requests per level and series (default 16)."),
    repeats: Optional[int] = typer.Option(None, "--repeats", "-r", min=1, max=100,
                                          help="Run the whole sweep this many times, the modes interleaved "
                                               "and their order rotated by one each repeat; each cell is "
                                               "reported as mean (min-max) and each speedup as higher, lower "
                                               "or within noise (default 1: one sample per cell)."),
    num_warmups: Optional[int] = typer.Option(None, "--num-warmups", min=0,
                                              help="Unmeasured warm-up requests per level and series, in the "
                                              "first repeat (default 1)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="max_tokens per request (default 50)."),
    ignore_eos: Optional[bool] = typer.Option(None, "--ignore-eos/--no-ignore-eos",
                                              help="Send ignore_eos so every answer has max_tokens tokens."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0, max=2.0, help="Default 0 (greedy). "
                                                "> 0: prompt i is sent with seed --seed + i in every mode, so a "
                                                "lossless server answers every mode alike."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling sent with "
                                          "--temperature > 0 (default 1)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the random dataset's draws and, with "
                                       "--temperature > 0, the base of the "
                                    "per-prompt sampling seeds (default 0)."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="mix (default), short, long, random, multiturn "
                                           "(a shared system prompt, multi-turn), or a "
                                          ".jsonl / ShareGPT "
                                          ".json file."),
    modes: Optional[list[str]] = typer.Option(
        None, "--modes", "-m", help="Comma-separated: ar (sends lookahead (1,1,0)); lookahead (the server's own "
        "(W,N,G), sent explicitly when the server's /version gives it, else no field); default (no field: the "
        "server's default); auto or schedule (sent as \"lookahead\": \"auto\" / \"schedule\": trtlade's draft "
        "policies; a server without a schedule answers 400 to schedule); specs like 4-2-4; or NGram / SA "
        "drafters sent as `speculation` (TensorRT-LLM's block): ngram[-D[-K]] (-latest, -private), sa[-D[-K]] "
        "(K -1: longest match; -global), ngram-auto (upstream's AUTO) (default ar,lookahead)."),
    result_dir: Optional[Path] = typer.Option(None, "--result-dir", help="Where the run folder goes "
                                              "(default reports)."),
    label: Optional[str] = typer.Option(None, "--label", help="Short label in the run id (default: the series)."),
    metadata: Optional[list[str]] = typer.Option(None, "--metadata", help="key=value recorded in the report "
                                                 "(repeatable)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Sent as Authorization: Bearer (default: the "
                                          "variable the config's serve.api_key_env names, when set; else "
                                          "$OPENAI_API_KEY)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.001, max=86400, help="Bound on one request in "
                                            "seconds (default 600)."),
    launch: Optional[Path] = typer.Option(None, "--launch", help="Start `trtlade serve --config CONFIG` on a "
                                          "free loopback port, bench it, stop it. Defaults come from its bench "
                                          "section."),
    launch_timeout: Optional[float] = typer.Option(None, "--launch-timeout", min=1.0, help="Seconds to wait for "
                                                   "the launched server's /health (default 600; with --launch)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Take defaults from this config's bench "
                                          "section (and its serve host:port as --base-url)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the PNG plots."),
    prefix_cache: Optional[str] = typer.Option(
        None, "--prefix-cache", help="clear (default): empty each server's prefix cache (and a trtlade server's "
        "drafter pools) before every series (POST /admin/prefix-cache/clear), so no mode finds another's prompts "
        "computed or answered; keep: leave them. The report gives the hit rate per series either way (config: "
        "bench.prefix_cache)."),
) -> None:
    from trtlade.bench.plan import BenchPlan, Target, make_series

    check_launch_options(launch, config, base_url, launch_timeout)
    cfg_path = launch if launch is not None else config
    require_path(cfg_path, where="--launch" if launch is not None else "--config", hint="give the trtlade config file",
                 file=True)
    section, loaded = load_bench_defaults(cfg_path)
    temp = temperature if temperature is not None else section.temperature
    opts = _parse_options(section, loaded, launch, base_url, base_url_b, labels, max_concurrency, modes, endpoint,
                          metadata, top_p, temp, prefix_cache)
    n_prompts = num_prompts if num_prompts is not None else section.num_prompts
    n_warm = num_warmups if num_warmups is not None else section.num_warmups
    seed_v = seed if seed is not None else section.seed
    _, ds = load_bench_dataset(dataset, section, loaded, opts.endpoint, endpoint, seed, temp)
    prompts = ds.sample(n_prompts, seed_v)
    warm = ds.sample(n_warm, seed_v + 1) if n_warm else []

    key = api_key_for(api_key, loaded)
    targets = [Target(opts.names[0], opts.url_a, api_key=key)]
    if opts.url_b is not None:
        targets.append(Target(opts.names[1], opts.url_b, api_key=key))
    plan = BenchPlan(
        series=make_series(targets, opts.modes), levels=opts.levels, endpoint=opts.endpoint, prompts=prompts,
        warmup_prompts=warm, max_tokens=max_tokens if max_tokens is not None else section.max_tokens,
        temperature=temp, ignore_eos=ignore_eos if ignore_eos is not None else section.ignore_eos,
        timeout=timeout if timeout is not None else section.timeout_s,
        repeats=repeats if repeats is not None else section.repeats,
        top_p=opts.top_p, seed=seed_v, prefix_cache=opts.prefix_cache,
    )
    if n_prompts < max(opts.levels):
        err_console.print(f"note: --num-prompts {n_prompts} is below the highest concurrency {max(opts.levels)}: "
                          f"levels above {n_prompts} run only {n_prompts} requests at once", markup=False)
    out_root = result_root(result_dir, loaded, section)
    settings = _settings(plan, ds, n_warm, seed_v, opts.modes, launch, cfg_path)
    _run_and_report(plan, settings, opts.meta, out_root, label, launch, launch_timeout or 600.0, model, plots)


def check_launch_options(launch: Optional[Path], config: Optional[Path], base_url: Optional[str],
                          launch_timeout: Optional[float]) -> None:
    """--launch against the options that name the server or its config another way."""
    if launch is not None and config is not None and launch.resolve() != config.resolve():
        fail("--launch and --config name different files", code=EXIT_USAGE, hint="--launch CONFIG already reads "
             "CONFIG's bench defaults; drop --config")
    if launch is not None and base_url is not None:
        fail("--launch and --base-url both name the server", code=EXIT_USAGE,
             hint="--launch starts its own server; drop one")
    if launch is None and launch_timeout is not None:
        fail("--launch-timeout bounds the start of the server --launch starts; without --launch there is none",
             where="--launch-timeout", hint="drop --launch-timeout, or start the server with --launch CONFIG")


class _Options(NamedTuple):
    """The bench options parsed, with the config's bench section filling what the command line left out."""

    levels: list[int]
    modes: list[Any]
    endpoint: Any
    meta: dict[str, str]
    url_a: str
    url_b: Optional[str]
    names: list[str]
    top_p: float
    prefix_cache: str


def _parse_options(section: "BenchSection", loaded: Any, launch: Optional[Path], base_url: Optional[str],
                   base_url_b: Optional[str], labels: Optional[str], max_concurrency: Optional[list[str]],
                   modes: Optional[list[str]], endpoint: Optional[str], metadata: Optional[list[str]],
                   top_p: Optional[float], temperature: float, prefix_cache: Optional[str]) -> _Options:
    """Parse the options a plan needs; a bad one (or the config's value under it) exits 2 naming where it came from."""
    from trtlade.bench.plan import (PlanError, parse_base_url, parse_concurrency, parse_endpoint, parse_metadata,
                                    parse_modes)

    try:
        levels = parse_concurrency(max_concurrency if max_concurrency is not None
                                   else [",".join(map(str, section.concurrency))])
        mode_list = parse_modes(modes or [",".join(section.modes)])
        ep = parse_endpoint(endpoint if endpoint is not None else section.endpoint)
        meta = parse_metadata(metadata or [])
        if base_url is None and launch is None:
            base_url = (f"http://{loaded.config.serve.host}:{loaded.config.serve.port}" if loaded is not None
                        else "http://127.0.0.1:8000")
        url_a = parse_base_url(base_url) if base_url is not None else ""
        url_b = parse_base_url(base_url_b, option="--base-url-b") if base_url_b else None
        names = _server_labels(labels, two=url_b is not None)
        top_p_v = _top_p(top_p, section.top_p, temperature)
        cache_rule = prefix_cache if prefix_cache is not None else section.prefix_cache
        if cache_rule not in ("clear", "keep"):
            raise PlanError(f"{cache_rule!r} is not a prefix-cache rule", option="--prefix-cache",
                            hint="clear (each series starts from an empty cache) or keep")
    except PlanError as exc:
        given = {"--modes": modes, "--max-concurrency": max_concurrency, "--endpoint": endpoint,
                 "--prefix-cache": prefix_cache, "--top-p": top_p}
        fail(exc.message, where=_blamed(exc.option, given, loaded), hint=exc.hint)
    return _Options(levels, mode_list, ep, meta, url_a, url_b, names, top_p_v, cache_rule)


def load_bench_dataset(dataset: Optional[str], section: "BenchSection", loaded: Any, ep: Any,
                        endpoint: Optional[str], seed: Optional[int], temperature: float) -> tuple[str, Any]:
    """The dataset's name or path and the dataset (the option, else the config's: a bundled name or a file relative
    to the config), checked against the endpoint and the seed; a bad one exits naming where it came from."""
    from trtlade.bench.datasets import BUNDLED, DatasetError, load_dataset

    if dataset is not None:
        dataset_spec = dataset
    elif section.dataset in BUNDLED:
        dataset_spec = section.dataset
    else:
        dataset_spec = str(config_relative(loaded, section, "dataset", section.dataset))
    try:
        ds = load_dataset(dataset_spec)
    except DatasetError as exc:
        fail(exc.message, where=exc.where or _blamed("--dataset", {"--dataset": dataset}, loaded), hint=exc.hint)
    check_endpoint_takes(ep, ds, endpoint, loaded)
    refuse_idle_seed(seed, ds, temperature)
    if ds.skipped:
        err_console.print(f"note: {ds.skipped} conversation(s) in {ds.source} have no human turn and were "
                          "skipped", markup=False)
    return dataset_spec, ds


#: the bench section's key behind each flag a config can stand in for
_CONFIG_KEYS = {"--modes": "modes", "--max-concurrency": "concurrency", "--endpoint": "endpoint",
                "--prefix-cache": "prefix_cache", "--top-p": "top_p", "--dataset": "dataset"}


def _blamed(option: str, given: dict[str, Any], loaded: Any) -> str:
    """The flag, or, where the flag was not given and the config's bench section set the value, its line."""
    key = _CONFIG_KEYS.get(option)
    if key is None or given.get(option) is not None or loaded is None:
        return option
    loc = ("bench", key)
    if not loaded.document.has(loc):
        return option
    line, column = loaded.document.position(loc)
    return f"{loaded.document.file}:{line}:{column}: bench.{key}"


def refuse_idle_seed(seed: Optional[int], ds: Any, temperature: float) -> None:
    """``--seed`` draws the random set's prompts and seeds sampled requests: with neither (a dataset in order, at
    temperature 0) it would change nothing, refused (exit 2)."""
    if seed is not None and ds.sampling != "random" and temperature == 0:
        fail(f"--seed draws the random set's prompts and seeds sampled requests: with {ds.name!r} (its prompts in "
             "order) at temperature 0 it changes nothing", where="--seed", code=EXIT_USAGE,
             hint="add --temperature T (or bench.temperature) to sample, use --dataset random, or drop --seed")


def check_endpoint_takes(ep: Any, ds: Any, endpoint: Optional[str], loaded: Any) -> None:
    """A dataset of chat message lists on the completions endpoint: refused, blaming the endpoint where it was set
    (the flag, or the config's ``bench.endpoint`` line), not a ``--dataset`` flag the user may not have given."""
    if ep.kind == "completions" and ds.has_messages:
        first = next(p for p in ds.prompts if p.messages is not None)
        fail(f"{first.where}: the prompt is a chat message list; the completions endpoint takes text",
             where=_blamed("--endpoint", {"--endpoint": endpoint}, loaded),
             hint="use --endpoint chat (or bench.endpoint: chat) with this dataset")


def _top_p(given: Optional[float], configured: float, temperature: float) -> float:
    """``--top-p``, else the config's ``bench.top_p``: in (0, 1], and below 1 only with a temperature (greedy
    requests carry no top_p, so it would be neither sent nor recorded)."""
    from trtlade.bench.plan import PlanError

    value = configured if given is None else given
    if not 0.0 < value <= 1.0:
        raise PlanError(f"top_p {value:g} is outside (0, 1]", option="--top-p", hint="e.g. --top-p 0.95")
    if value < 1.0 and not temperature > 0:
        raise PlanError(f"top_p {value:g} without a temperature: greedy decoding ignores top_p, so it would not be "
                        "sent", option="--top-p", hint="add --temperature (or bench.temperature), e.g. --temperature "
                        "0.7 --top-p 0.95")
    return value


def _server_labels(labels: Optional[str], *, two: bool) -> list[str]:
    from trtlade.bench.plan import PlanError

    if labels is None:
        return ["a", "b"]
    items = [x.strip() for x in labels.split(",") if x.strip()]
    if not two:
        raise PlanError("--labels names the two servers of an A/B run", option="--labels",
                        hint="use it with --base-url-b (one server: the series are the modes)")
    if len(items) != 2 or items[0] == items[1]:
        raise PlanError(f"{labels!r}: give two different labels", option="--labels", hint="e.g. --labels trt,vllm")
    return items


def _settings(plan: "BenchPlan", ds: Any, n_warm: int, seed: int, mode_list: list[Any],
              launch: Optional[Path], cfg_path: Optional[Path]) -> dict[str, Any]:
    return {
        "endpoint": plan.endpoint.path,
        "endpoint_kind": plan.endpoint.kind,
        "dataset": ds.name,
        "dataset_source": ds.source,
        "dataset_sampling": ds.sampling,
        "num_prompts": plan.num_prompts,
        "num_warmups": n_warm,
        "repeats": plan.repeats,
        "max_tokens": plan.max_tokens,
        "temperature": plan.temperature,
        **({"top_p": plan.top_p} if plan.temperature > 0 else {}),
        "ignore_eos": plan.ignore_eos,
        "seed": seed,
        "timeout_s": plan.timeout,
        "levels": plan.levels,
        "prefix_cache": plan.prefix_cache,
        "modes": {m.name: m.describe() for m in mode_list},
        "launch": str(launch) if launch is not None else None,
        "config": str(cfg_path) if cfg_path is not None else None,
        "command": shlex.join(["trtlade", *_redacted(sys.argv[1:])]),
    }


def _redacted(argv: list[str]) -> list[str]:
    """The command line with the --api-key value replaced (reports are shared; keys are not)."""
    return redacted_argv(argv)


def _run_and_report(plan: "BenchPlan", settings: dict[str, Any], meta: dict[str, str], out_root: Path,
                    label: Optional[str], launch: Optional[Path], launch_timeout: float,
                    model: Optional[str], plots: bool) -> None:
    import time

    from trtlade.bench.report import make_run_id

    folder = _new_folder(out_root, make_run_id([s.label for s in plan.series], label=label))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    outcome = _measure(plan, settings, folder, launch, launch_timeout, model)
    run = _summary(plan, settings, meta, folder, started, outcome)
    _write_and_print(run, outcome.records, folder, plots)


def _new_folder(out_root: Path, run_id: str) -> Path:
    """``out_root/run_id``, or with ``-2``, ``-3`` ... where that exists (so a run never writes over an earlier
    report)."""
    folder, suffix = out_root / run_id, 2
    while folder.exists():
        folder = out_root / f"{run_id}-{suffix}"
        suffix += 1
    return folder


def _measure(plan: "BenchPlan", settings: dict[str, Any], folder: Path, launch: Optional[Path],
             launch_timeout: float, model: Optional[str]) -> Any:
    """Launch the server (``--launch``), check every server and mode, run the plan: its outcome; a failure is a
    clear error (the server's log tail, a hint for a server that does not know the ``lookahead`` field)."""
    import asyncio
    import contextlib

    from trtlade.bench.launch import LaunchError, launched_server
    from trtlade.bench.plan import PlanError, check_modes_for_servers, resolve_server_modes
    from trtlade.bench.runner import BenchAborted, run_plan

    try:
        with contextlib.ExitStack() as stack:
            if launch is not None and len(plan.targets) > 1:  # the second server first: launching takes a while
                asyncio.run(preflight_servers(plan.targets[1:], model, min(plan.timeout, 30.0), first=1))
            if launch is not None:
                err_console.print(f"launching trtlade serve --config {launch} (log: {folder / 'server.log'})",
                                  markup=False)
                url = stack.enter_context(launched_server(
                    launch, log_path=folder / "server.log", ready_timeout=launch_timeout,
                    headers=plan.targets[0].headers()))
                plan.targets[0].base_url = url
                settings["launched_url"] = url
            asyncio.run(preflight_servers(plan.targets, model, min(plan.timeout, 30.0)))
            plan.series = resolve_server_modes(plan.series)
            try:
                check_modes_for_servers(plan.series)
            except PlanError as exc:
                fail(exc.message, where=exc.option, hint=exc.hint)
            for s in plan.series:
                err_console.print(f"series {s.label}: {s.target.base_url}{plan.endpoint.path} model "
                                  f"{s.target.model!r}, {s.mode.describe()}", markup=False)
            return asyncio.run(run_plan(plan, _Progress()))
    except LaunchError as exc:
        tail = f"\n--- last lines of {exc.log_path} ---\n{exc.log_tail}" if exc.log_tail else ""
        fail(f"--launch {launch}: {exc.message}{tail}", hint="run `trtlade serve --config "
             f"{launch}` by hand to see why; raise --launch-timeout if the model is still loading")
    except BenchAborted as exc:
        lookahead_hint = ("the server may not know trtlade's `lookahead` field: use --modes default "
                          "(sends no lookahead field) for vLLM, SGLang, trtllm-serve or grps")
        hint = lookahead_hint if any("lookahead" in (r.error or "") for r in exc.records) else (
            "check the server's log, --model, --endpoint and --api-key")
        fail(str(exc), hint=hint)
    except KeyboardInterrupt:
        err_console.print("interrupted: no report written", markup=False)
        raise typer.Exit(130)


def _summary(plan: "BenchPlan", settings: dict[str, Any], meta: dict[str, str], folder: Path, started: str,
             outcome: Any) -> Any:
    """The run's summary: its series, levels, settings, machine and servers, the measured levels, the answers'
    agreement, tokens a step by category, the accepted drafts' sources and the verdicts."""
    import time

    from trtlade.bench.meta import machine_info
    from trtlade.bench.report import (RunSummary, SeriesInfo, accepted_by_source, category_tokens_per_step,
                                      family_verdicts, output_agreement, speedup_verdicts)

    labels = [s.label for s in plan.series]
    run = RunSummary(
        run_id=folder.name, created=started,
        series=[SeriesInfo(label=s.label, server=s.target.label, base_url=s.target.base_url, model=s.target.model,
                           mode=s.mode.name, lookahead=list(s.mode.spec.as_tuple()) if s.mode.spec else None,
                           speculation=s.mode.speculation)
                for s in plan.series],
        levels=plan.levels, settings=settings,
        metadata={**machine_info(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "servers": {t.label: {"base_url": t.base_url, "model": t.model, "version": t.server_info}
                              for t in plan.targets},
                  "prefix_cache": outcome.prefix_cache,
                  "user": meta},
        summaries=outcome.summaries,
        output_agreement=output_agreement(outcome.records, labels),
        tokens_per_step_by_category=category_tokens_per_step(outcome.records, labels),
        accepted_by_source=accepted_by_source(outcome.records, labels),
    )
    run.verdicts = {**speedup_verdicts(run), "together": family_verdicts(run)}
    return run


def _write_and_print(run: Any, records: list[Any], folder: Path, plots: bool) -> None:
    from trtlade.bench.report import TABLES, default_aim_lines, noise_table, write_report

    try:
        write_report(folder, run, records, plots=plots)
    except OSError as exc:
        fail(f"cannot write the report to {folder}: {exc.strerror or exc}", hint="check --result-dir")
    for title, field, decimals, _ in TABLES:
        console.print(f"\n{title}", markup=False)
        console.print(noise_table(run, field, decimals=decimals), markup=False)
        if field == "output_throughput" and (aims := default_aim_lines(run)):
            console.print("\n" + "\n".join(aims).rstrip(), markup=False)
    failed = sum(s.failed for s in run.summaries)
    sent = failed + sum(s.completed for s in run.summaries)
    console.print(f"\nreport: {folder}/summary.md", markup=False)
    if failed:
        err_console.print(f"[yellow]warning:[/] {failed} of {sent} measured requests failed (see the Failures "
                          f"section of {folder}/summary.md)", markup=True)
    if sent and failed == sent:
        fail(f"every measured request failed ({sent})", hint=f"see {folder}/per_request.jsonl for the errors")


# ----------------------------------------------------------------------------- report compare
def report_compare(
    run_a: Path = typer.Argument(..., help="The baseline run folder (reports/<run-id>)."),
    run_b: Path = typer.Argument(..., help="The run compared with it."),
    series_a: Optional[str] = typer.Option(None, "--series-a", help="Series of run A (default: its only "
                                           "series, or every series name both runs share)."),
    series_b: Optional[str] = typer.Option(None, "--series-b", help="Series of run B."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the Markdown here."),
    force: bool = typer.Option(False, "--force", help="Replace the --output file if it exists."),
) -> None:
    from trtlade.bench.report import ReportError, compare_runs, load_run

    if force and output is None:
        fail("--force replaces the --output file, and no --output is given", where="--force", code=EXIT_USAGE,
             hint="add --output FILE, or drop --force")
    if output is not None:  # before reading the runs: a mistyped path must not replace a run's own files
        refuse_overwrite(output, where="--output", force=force)
        if output.is_dir() or not output.parent.is_dir():
            fail(f"cannot write {output}: " + ("it is a folder" if output.is_dir() else
                                               f"its folder {output.parent} does not exist"),
                 where="--output", code=EXIT_USAGE, hint="give a file path you can write (its folder must exist)")
    for where, path in (("RUN_A", run_a), ("RUN_B", run_b)):
        require_path(path, where=where, hint="give a run folder written by `trtlade bench` (reports/<run-id>)")
    try:
        a = load_run(run_a, what="RUN_A")
        b = load_run(run_b, what="RUN_B")
        text = compare_runs(a, b, series_a=series_a, series_b=series_b)
    except ReportError as exc:
        fail(exc.message, hint=exc.hint, where=exc.where)
    console.print(text, markup=False, highlight=False)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror or exc}", where="--output",
                 hint="give a file path you can write (its folder must exist)")

"""``trtlade tune``: pick (w,n,g) per concurrency from measurement and write the schedule."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Optional

import typer

from trtlade.cli.bench import (_blamed, check_launch_options, load_bench_dataset, load_bench_defaults,
                               preflight_servers, result_root)
from trtlade.cli.common import EXIT_INVALID, api_key_for, err_console, fail, parse_spec_option, require_path

_HELP = """Measure candidate (w,n,g) specs and NGram / SA drafters against a trtlade server at each concurrency
level, pick the fastest per level that beats plain decoding beyond the measured noise, and write the
lookahead schedule (TensorRT-LLM engines, < 1.3) and its speculative_config equivalent (TensorRT-LLM 1.3+),
with a report under reports/<run-id>/.

Examples:

  trtlade tune --launch configs/smollm2-cpu.yml --dataset random

  trtlade tune --base-url http://gpu1:8000 -c 1,4,16 --max-ttft-ms 500 --apply deploy.yml
"""

#: the pruned set's size without --max-candidates
DEFAULT_MAX_CANDIDATES = 6


def register(app: typer.Typer) -> None:
    app.command("tune", help=_HELP, no_args_is_help=False)(tune)


class _TuneProgress:
    """One rich bar over every run (a run: one spec at one level in one repeat); a line per run."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self._bar: Any = None
        self._task: Any = None
        if err_console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err_console, transient=True)

    def __enter__(self) -> "_TuneProgress":
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("tune runs", total=self.total)
        return self

    def __exit__(self, *_: Any) -> None:
        if self._bar is not None:
            self._bar.stop()

    # the bench runner's Progress protocol (per request; nothing to show at that grain)
    def start(self, series: str, concurrency: int, total: int, warmup: bool) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"({series.replace('-', ',')}) @ {concurrency}")

    def advance(self, record: Any) -> None:
        pass

    def finish(self, summary: Any) -> None:
        pass

    def run_done(self, run: Any, summary: Any) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.advance(self._task)
        failed = f", {summary.failed} FAILED" if summary.failed else ""
        ttft = "—" if run.median_ttft_ms is None else f"{run.median_ttft_ms:.0f}"
        err_console.print(f"[{self.done}/{self.total}] repeat {run.repeat + 1} concurrency {run.concurrency:>3} "
                          f"({run.spec}): {run.output_throughput:.1f} tok/s, median TTFT {ttft} ms{failed}",
                          markup=False, highlight=False)


def _parse_candidates(values: Optional[list[str]]) -> Optional[list[Any]]:
    """``--candidates``: specs separated by spaces, or by commas between W-N-G specs (as ``--modes`` takes them); a
    lone W,N,G is one spec.

    >>> [str(s) for s in _parse_candidates(["2-2-1 2-3-2", "2-4-2,1-1-0", "4,2,4"])]
    ['2,2,1', '2,3,2', '2,4,2', '1,1,0', '4,2,4']
    """
    if not values:
        return None
    if not "".join(values).strip():
        fail("--candidates is empty", where="--candidates", hint="give W-N-G specs, e.g. '2-2-1 2-4-2', or leave "
             "the flag out for the pruned set")
    items = [item.strip() for value in values for item in value.split(" ") if item.strip()]
    specs = [part.strip() for item in items for part in (item.split(",") if "-" in item else [item])]
    parsed = [parse_spec_option(spec.replace("-", ","), option="--candidates") for spec in specs if spec]
    for i, spec in enumerate(parsed):
        if spec in parsed[:i]:
            fail(f"({spec}) is given twice", where="--candidates", hint="give each spec once")
    return parsed


def tune(
    base_url: Optional[str] = typer.Option(None, "--base-url", help="A running trtlade server (either engine), "
                                           "e.g. http://127.0.0.1:8000."),
    launch: Optional[Path] = typer.Option(None, "--launch", help="Start `trtlade serve --config CONFIG` on a free "
                                          "loopback port, tune against it, stop it. Defaults come from its bench "
                                          "section."),
    launch_timeout: Optional[float] = typer.Option(None, "--launch-timeout", min=1.0,
                                                   help="Seconds to wait for the launched server's /health (default "
                                                   "600; with --launch)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Take defaults from this config's bench section."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="chat (default) or completions."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name sent; default: the first of /v1/models."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="mix, short, long, random, multiturn, or a .jsonl / "
                                          "ShareGPT file. Tune on one dataset, evaluate with `trtlade bench` on "
                                          "another (default: the config's bench.dataset)."),
    max_concurrency: Optional[list[str]] = typer.Option(None, "--max-concurrency", "-c", help="Concurrency levels "
                                                        "(default: the config's bench.concurrency)."),
    candidates: Optional[list[str]] = typer.Option(None, "--candidates", help="Specs to measure instead of the "
                                                   "pruned set, W-N-G separated by spaces or commas (e.g. "
                                                   "'2-2-1 2-4-2' or 2-2-1,2-4-2); (1,1,0) is always added."),
    max_candidates: Optional[int] = typer.Option(None, "--max-candidates", min=1, help="At most this many lookahead "
                                                 "specs (besides (1,1,0)) after pruning (default 6; not with "
                                                 "--candidates, which are measured as given)."),
    drafters: Optional[list[str]] = typer.Option(None, "--drafters", help="NGram / SA drafters measured beside "
                                                 "the specs, comma-separated (ngram[-D[-K]], sa[-D[-K]], ngram-auto; "
                                                 "'none': no drafter). Default: ngram,sa where the server offers "
                                                 "them (the reference engine)."),
    repeats: int = typer.Option(2, "--repeats", min=1, max=100, help="Rounds over every (spec, level); 2 or more to "
                                "estimate the noise."),
    num_prompts: int = typer.Option(4, "--num-prompts", "-n", min=1, help="Requests per run (at least 2 per "
                                    "worker: 2 x concurrency)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="max_tokens per request "
                                             "(default: the config's bench.max_tokens)."),
    ignore_eos: Optional[bool] = typer.Option(None, "--ignore-eos/--no-ignore-eos", help="Send ignore_eos."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0, max=2.0, help="Tune for sampled "
                                                "traffic: every request samples at this temperature, prompt i "
                                                "with seed --seed + i (default: the config's bench.temperature, 0)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling with "
                                          "--temperature (default: the config's bench.top_p, 1)."),
    max_ttft_ms: Optional[float] = typer.Option(None, "--max-ttft-ms", min=0.0, help="Only pick specs whose "
                                                "median TTFT stays under this."),
    max_tpot_ms: Optional[float] = typer.Option(None, "--max-tpot-ms", min=0.0, help="Only pick specs whose "
                                                "median TPOT stays under this."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the random set's prompt samples (repeat r uses "
                                       "seed + r; the other sets send their first --num-prompts prompts every "
                                       "repeat) and of sampled requests (default: the config's bench.seed, 0)."),
    result_dir: Optional[Path] = typer.Option(None, "--result-dir", help="Where the run folder goes "
                                              "(default: the config's bench.result_dir, else reports)."),
    apply: Optional[Path] = typer.Option(None, "--apply", help="Write the schedule into this trtlade config "
                                         "(lookahead.schedule), keeping the rest of the file and its comments."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Sent as Authorization: Bearer (default: the "
                                          "variable the config's serve.api_key_env names, when set; else "
                                          "$OPENAI_API_KEY)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.001, max=86400,
                                            help="Bound on one request, seconds (default: the config's "
                                                 "bench.timeout_s, 600)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the heatmap PNG."),
    prefix_cache: Optional[str] = typer.Option(
        None, "--prefix-cache", help="clear (default): empty the server's prefix cache before every series, so no "
        "candidate finds another's prompts computed; keep: leave it, as a long-running server (config: "
        "bench.prefix_cache)."),
) -> None:
    from trtlade.bench.plan import Target
    from trtlade.tune.measure import TuneSettings

    check_launch_options(launch, config, base_url, launch_timeout)
    cfg_path = launch if launch is not None else config
    require_path(cfg_path, where="--launch" if launch is not None else "--config", hint="give the trtlade config file",
                 file=True)
    section, loaded = load_bench_defaults(cfg_path)
    levels, ep, url, cache_rule = _where_and_how(section, loaded, max_concurrency, endpoint, base_url, launch,
                                                 prefix_cache)
    chosen_candidates = _parse_candidates(candidates)
    if chosen_candidates is not None and max_candidates is not None:
        fail("--max-candidates bounds the pruned set, and --candidates replaces it: every spec given is measured",
             where="--max-candidates", hint="drop --max-candidates, or list fewer --candidates")
    dataset_spec, ds = load_bench_dataset(dataset, section, loaded, ep, endpoint, seed,
                             temperature if temperature is not None else section.temperature)
    apply_target = _apply_target(apply, repeats) if apply is not None else None
    drafter_names = _drafter_names(drafters)
    settings = TuneSettings(
        levels=tuple(sorted(levels)), repeats=repeats, num_prompts=num_prompts,
        max_tokens=max_tokens if max_tokens is not None else section.max_tokens,
        ignore_eos=ignore_eos if ignore_eos is not None else section.ignore_eos,
        timeout=timeout if timeout is not None else section.timeout_s, seed=seed if seed is not None else section.seed,
        temperature=temperature if temperature is not None else section.temperature,
        top_p=top_p if top_p is not None else section.top_p, prefix_cache=cache_rule)
    _check_top_p(settings, top_p, loaded)
    out_root = result_root(result_dir, loaded, section)
    key = api_key_for(api_key, loaded)
    target = Target("a", url, api_key=key)
    job = _Job(target, ep, ds, dataset_spec, settings, chosen_candidates, max_candidates or DEFAULT_MAX_CANDIDATES,
               {"max_ttft_ms": max_ttft_ms, "max_tpot_ms": max_tpot_ms}, model, launch, launch_timeout or 600.0,
               drafter_names, apply=(apply, apply_target.spec) if apply is not None and apply_target else None)
    folder, result = job.run(out_root, plots)
    _print_result(folder, result)
    if apply is not None and apply_target is not None:
        _apply(apply, result, folder, apply_target.raw)


def _where_and_how(section: Any, loaded: Any, max_concurrency: Optional[list[str]], endpoint: Optional[str],
                   base_url: Optional[str], launch: Optional[Path],
                   prefix_cache: Optional[str]) -> tuple[list[int], Any, str, str]:
    """The concurrency levels, the endpoint, the server's URL ("" where --launch starts one) and the prefix-cache
    rule, each from its flag, else the config's bench section (the URL: the config's serve address)."""
    from trtlade.bench.plan import PlanError, parse_base_url, parse_concurrency, parse_endpoint

    try:
        levels = parse_concurrency(max_concurrency if max_concurrency is not None
                                   else [",".join(map(str, section.concurrency))])
        ep = parse_endpoint(endpoint if endpoint is not None else section.endpoint)
        if base_url is None and launch is None:
            base_url = (f"http://{loaded.config.serve.host}:{loaded.config.serve.port}" if loaded is not None
                        else "http://127.0.0.1:8000")
        url = parse_base_url(base_url) if base_url is not None else ""
        cache_rule = prefix_cache if prefix_cache is not None else section.prefix_cache
        if cache_rule not in ("clear", "keep"):
            raise PlanError(f"{cache_rule!r} is not a prefix-cache rule", option="--prefix-cache",
                            hint="clear (each series starts from an empty cache) or keep")
    except PlanError as exc:
        given = {"--max-concurrency": max_concurrency, "--endpoint": endpoint, "--prefix-cache": prefix_cache}
        fail(exc.message, where=_blamed(exc.option, given, loaded), hint=exc.hint)
    return levels, ep, url, cache_rule


def _apply_target(apply: Path, repeats: int) -> Any:
    """The config --apply will write the schedule into, checked before any measurement (a tune run takes minutes to
    hours): a file trtlade can rewrite, with --repeats 2 or more."""
    from trtlade.tune.apply import ApplyError, check_apply_target

    if not apply.is_file():
        fail(f"{apply} is not a file", where="--apply", hint="give the trtlade config to write the schedule into")
    if repeats < 2:
        fail("--apply with --repeats 1: one repeat measures no noise, so tune chooses nothing (every level keeps "
             "(1,1,0)) and there is no schedule worth writing", where="--apply",
             hint="run --repeats 2 or more with --apply, or drop --apply to look at one repeat's numbers")
    try:
        return check_apply_target(apply)
    except ApplyError as exc:
        fail(exc.message, where=exc.where or "--apply", hint=exc.hint)


def _check_top_p(settings: Any, top_p: Optional[float], loaded: Any) -> None:
    """top_p in (0, 1], and below 1 only with a temperature (named where it came from: the option or the config)."""
    if not 0.0 < settings.top_p <= 1.0:
        fail(f"--top-p {settings.top_p}: must be in (0, 1]", where="--top-p", hint="e.g. --top-p 0.95")
    if settings.top_p < 1.0 and not settings.temperature > 0:
        where = "--top-p"
        if top_p is None and loaded is not None and loaded.document.has(("bench", "top_p")):
            line, column = loaded.document.position(("bench", "top_p"))
            where = f"{loaded.document.file}:{line}:{column}: bench.top_p"
        fail(f"top_p {settings.top_p:g} without a temperature: greedy decoding ignores top_p, so it would not be sent",
             where=where, hint="add --temperature (or bench.temperature), e.g. --temperature 0.7 --top-p 0.95")


def _free_name(path: Path) -> Path:
    """``path``, or ``name-2.ext``, ``name-3.ext`` ... where a file is there already (two runs in one second
    share a report folder: one's copy of its config must not replace the other's)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


class _Job:
    """One tune run: reach (or launch) the server, read its spec, measure, choose, report."""

    def __init__(self, target: Any, endpoint: Any, dataset: Any, dataset_name: str, settings: Any,
                 candidates: Optional[list[Any]], max_candidates: int, limits: dict[str, Optional[float]],
                 model: Optional[str], launch: Optional[Path], launch_timeout: float,
                 drafters: Optional[list[str]] = None, apply: Optional[tuple[Path, Any]] = None) -> None:
        self.target, self.endpoint, self.dataset, self.dataset_name = target, endpoint, dataset, dataset_name
        self.settings, self.candidates, self.max_candidates = settings, candidates, max_candidates
        self.limits, self.model, self.launch, self.launch_timeout = limits, model, launch, launch_timeout
        self.drafters = drafters
        self.apply = apply  #: (the --apply config, the (W,N,G) its server admits): every band must fit it

    def run(self, out_root: Path, plots: bool) -> tuple[Path, Any]:
        from trtlade.bench.launch import LaunchError, launched_server

        run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime()) + "-tune"
        folder = _free_name(out_root / run_id)  # a run started in the same second keeps its own
        started = time.monotonic()
        try:
            with contextlib.ExitStack() as stack:
                if self.launch is not None:
                    err_console.print(f"launching trtlade serve --config {self.launch} (log: {folder / 'server.log'})",
                                      markup=False)
                    self.target.base_url = stack.enter_context(launched_server(
                        self.launch, log_path=folder / "server.log", ready_timeout=self.launch_timeout,
                        headers=self.target.headers()))
                asyncio.run(preflight_servers([self.target], self.model, min(self.settings.timeout, 30.0)))
                server = self._server_spec()
                picked = self._candidates(server).with_drafters(self._drafters())
                self._check_admitted(picked.specs)
                err_console.print(f"server ({server}); {len(picked.all)} candidates: "
                                  f"{', '.join(f'({s})' for s in picked.specs)}"
                                  + "".join(f", {d}" for d in picked.drafters)
                                  + f"\npruning: {picked.describe()}", markup=False, highlight=False)
                measurement = self._measure(picked)
        except LaunchError as exc:
            tail = f"\n--- last lines of {exc.log_path} ---\n{exc.log_tail}" if exc.log_tail else ""
            fail(f"--launch {self.launch}: {exc.message}{tail}", hint=f"run `trtlade serve --config {self.launch}` "
                 "by hand to see why")
        except KeyboardInterrupt:
            err_console.print("interrupted: no report written", markup=False)
            raise typer.Exit(130)
        return folder, self._report(folder, server, picked, measurement, time.monotonic() - started, plots)

    def _check_admitted(self, specs: list[Any]) -> None:
        """With --apply: every (w,n,g) candidate fits the config's lookahead.spec, before anything is measured (a
        chosen one that does not could not be written as a band)."""
        if self.apply is None:
            return
        path, admits = self.apply
        over = [spec for spec in specs if admits.excess(spec)]
        if over:
            fail(f"candidates {', '.join(f'({s})' for s in over)} are more than {path}'s lookahead.spec ({admits}) "
                 "admits: a band of one could not be written there", where="--apply",
                 hint=f"give --candidates within ({admits}), or raise lookahead.spec in {path} (and serve it)")

    def _server_spec(self) -> Any:
        from trtlade.spec import LookaheadSpec, SpecError

        engine = self.target.server_info.get("engine") if isinstance(self.target.server_info, dict) else None
        try:
            return LookaheadSpec.parse(engine["spec"])  # type: ignore[index]
        except (TypeError, KeyError, SpecError):
            fail(f"{self.target.base_url}/version does not give the server's (W,N,G)", where="--base-url",
                 hint="tune needs a trtlade server (`trtlade serve`, reference or trtllm engine): it reads the "
                      "spec to know which (w,n,g) requests may use", code=EXIT_INVALID)  # the server's answer

    def _candidates(self, server: Any) -> Any:
        from trtlade.tune.candidates import explicit, prune

        if self.candidates is None:
            return prune(server, self.max_candidates)
        try:
            return explicit(self.candidates, server)
        except ValueError as exc:
            fail(str(exc), where="--candidates", hint=f"use specs with w<={server.window_size}, "
                 f"n<={server.ngram_size}, g<={server.verification_set_size}")

    def _drafters(self) -> list[Any]:
        """The drafter candidates: as given (``--drafters``), else ngram and sa where the server offers them."""
        from trtlade.drafting.config import DraftConfigError
        from trtlade.tune.candidates import drafters_of

        engine = self.target.server_info.get("engine") if isinstance(self.target.server_info, dict) else None
        offered = (engine or {}).get("speculation") or {}
        if not offered.get("drafters"):
            if self.drafters:
                fail(f"{self.target.base_url} offers no per-request drafters (its /version lists none)",
                     where="--drafters", hint="drafters run on the reference engine (`trtlade serve`); drop "
                     "--drafters for a TensorRT-LLM server")
            return []
        names = self.drafters if self.drafters is not None else ["ngram", "sa"]
        try:
            return drafters_of(names, int(offered.get("max_draft_len") or 0))
        except (DraftConfigError, ValueError) as exc:
            fail(str(getattr(exc, "message", exc)), where="--drafters", hint="e.g. --drafters ngram-4-2,sa-4--1")

    def _measure(self, picked: Any) -> Any:
        from trtlade.tune.measure import measure

        total = self.settings.total_runs(len(picked.all))
        with _TuneProgress(total) as progress:
            return asyncio.run(measure(self.target, self.endpoint, self.dataset, picked.all, self.settings,
                                       progress, on_run=progress.run_done))

    def _report(self, folder: Path, server: Any, picked: Any, measurement: Any, seconds: float, plots: bool) -> Any:
        from trtlade.bench.meta import machine_info
        from trtlade.tune.report import TuneResult, recommend, write_report
        from trtlade.tune.select import choose, is_lookahead, schedule_of, speculative_config_of, tabulate

        table = tabulate(measurement.runs)
        choices = choose(table, **self.limits, only=is_lookahead)
        schedule = schedule_of(choices)
        s = self.settings
        result = TuneResult(
            run_id=folder.name, server_spec=server, candidates=picked, table=table, choices=choices,
            schedule=schedule, recommendation=recommend(schedule, server, self.target.model or "<model>"),
            runs=measurement.runs, failed_requests=measurement.failed_requests, limits=self.limits,
            settings={"dataset": self.dataset_name, "endpoint": self.endpoint.path, "levels": list(s.levels),
                      "repeats": s.repeats, "num_prompts": s.num_prompts, "per_worker": s.per_worker,
                      "max_tokens": s.max_tokens, "ignore_eos": s.ignore_eos, "seed": s.seed,
                      "temperature": s.temperature, "top_p": s.top_p, "prefix_cache": s.prefix_cache,
                      "base_url": self.target.base_url, "model": self.target.model,
                      "launch": str(self.launch) if self.launch else None, "seconds": round(seconds, 1)},
            metadata={**machine_info(), "server": self.target.server_info},
            overall=choose(table, **self.limits) if picked.drafters else choices,
            pytorch=speculative_config_of(table, **self.limits) if picked.drafters else None)
        write_report(folder, result, plots=plots)
        return result


def _drafter_names(values: Optional[list[str]]) -> Optional[list[str]]:
    """``--drafters`` as names (None: not given; [] for ``none``), each checked now, before any server starts."""
    from trtlade.drafting.config import DraftConfigError, drafter_mode

    if values is None or values == []:
        return None
    names = [item.strip() for value in values for item in value.split(",") if item.strip()]
    if not names:  # `--drafters ""` ran the default drafters
        fail("--drafters is empty", where="--drafters", hint="name drafters (ngram, sa, ngram-4-2 ...), or none")
    if [n.lower() for n in names] == ["none"]:
        return []
    blocks: dict[str, str] = {}
    for name in names:
        try:
            block = repr(sorted(drafter_mode(name).items()))
        except DraftConfigError as exc:
            fail(exc.message, where="--drafters", hint=exc.hint)
        if block in blocks:  # `ngram,ngram-4-2`: one drafter measured twice under two names
            fail(f"{name!r} is the same drafter as {blocks[block]!r}", where="--drafters", hint="give each once")
        blocks[block] = name
    return names


def _print_result(folder: Path, result: Any) -> None:
    from trtlade.tune.report import summary_markdown

    text = summary_markdown(result)
    start = text.index("## Output throughput")
    print(text[start:].rstrip())
    pytorch = f"; TensorRT-LLM 1.3+: {folder / 'speculative_config.yml'}" if result.pytorch is not None else ""
    print(f"\nreport: {folder / 'summary.md'} (schedule: {folder / 'schedule.yml'}{pytorch}; "
          f"took {result.settings['seconds']:.0f} s)")


def _apply(path: Path, result: Any, folder: Path, expected: bytes) -> None:
    """The schedule into the config, and what it changes for requests that name no lookahead (said, never
    silent: a schedule makes the default policy ``schedule``; an explicit ``fixed`` or ``auto`` keeps the
    schedule for requests that ask for it). Not from a run whose requests failed (where (1,1,0)'s failed, a level
    compared nothing and would be written as (1,1,0)), nor into a file edited since the run began (``expected``)."""
    from trtlade.config.loader import load_config
    from trtlade.tune.apply import ApplyError, apply_schedule

    if result.failed_requests:
        fail(f"{result.failed_requests} request(s) failed during the measurement, so the schedule was not written "
             f"into {path}: a level where they failed chose by fewer runs, or chose nothing", where="--apply",
             hint=f"see why in the report ({folder / 'tune.md'}), then run tune again; the measured schedule is "
                  f"{folder / 'schedule.yml'}", code=EXIT_INVALID)  # the run's outcome, not a usage mistake
    before = load_config(path).config.lookahead_policy
    kept = _free_name(folder / f"before-apply-{path.name}")
    try:
        apply_schedule(path, result.schedule, keep=kept, expected=expected)
    except ApplyError as exc:
        fail(exc.message, where=exc.where or "--apply", hint=f"{exc.hint} (the schedule: {folder / 'schedule.yml'})")
    after = load_config(path).config.lookahead_policy
    err_console.print(f"wrote lookahead.schedule into {path}: {result.schedule} (the file as it was: {kept})",
                      markup=False)
    if after != "schedule":
        err_console.print(f"note: lookahead.policy is {after}: the schedule serves the requests that send "
                          '"lookahead": "schedule"; the others stay on ' + after + " (set lookahead.policy: schedule "
                          "to serve every request without a lookahead by it)", markup=False, highlight=False)
    elif before != "schedule":
        err_console.print(f"note: requests that name no lookahead now follow the schedule (they were served by "
                          f"{before})", markup=False, highlight=False)

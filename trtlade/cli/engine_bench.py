"""``trtlade engine-bench``: plain greedy vs lookahead on the PyTorch reference engine (CPU/CUDA).

Heavy imports (torch, transformers) happen inside the command body.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer

from trtlade.cli.common import EXIT_INVALID, EXIT_USAGE, console, err_console, fail, parse_spec_option, refuse_overwrite
from trtlade.spec import LookaheadSpec

DTYPE_CHOICES = ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16")


def _split(values: Optional[List[str]]) -> list[str]:
    """``--specs 4,2,4 7,7,7`` and ``--specs "4,2,4 7,7,7"`` and repeated options alike."""
    out: list[str] = []
    for value in values or []:
        out.extend(part for part in value.replace(";", " ").split() if part)
    return out


def _presets(values: Optional[List[str]]) -> tuple[str, ...]:
    """``--preset fast --preset trtllm`` (or ``fast,trtllm``), in the order given, without repeats."""
    from trtlade.presets import DEFAULT_PRESET, PRESETS

    names = [p.strip() for v in values or [] for p in v.split(",") if p.strip()] or [DEFAULT_PRESET]
    bad = [p for p in names if p not in PRESETS]
    if bad:
        fail(f"--preset {bad[0]!r}: unknown preset", where="--preset",
             hint=f"choose {' or '.join(PRESETS)}; repeat --preset to compare both")
    return tuple(dict.fromkeys(names))


def engine_bench(
    ctx: typer.Context,
    model: Optional[Path] = typer.Option(None, "--model", help="Hugging Face model folder or GGUF file (default: "
                                                              "the embedded SmolLM2-135M-Instruct)."),
    specs: Optional[List[str]] = typer.Option(None, "--specs", metavar="W,N,G ...",
                                              help="Lookahead specs to measure, fixed (adaptive off) "
                                                   "(default: 2,2,2 4,2,4 5,3,5 7,7,7)."),
    dtype: str = typer.Option("float32", "--dtype", help="Comma-separated dtypes: float32, bfloat16, float16."),
    max_tokens: int = typer.Option(128, "--max-tokens", min=1, help="New tokens per prompt."),
    prompts: str = typer.Option("suite", "--prompts", help="Bundled suite name ('suite', or 'long-context': "
                                                           "prompts longer than a 512-token sliding window) "
                                                           "or a JSON file."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Interleaved repeats (medians are reported)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, max=4096, help="torch threads (default: the CPUs "
                                                                         "this process may use)."),
    no_keying: bool = typer.Option(False, "--no-keying", help="Skip the TensorRT-LLM vs corrected keying count."),
    no_default: bool = typer.Option(False, "--no-default", help="Skip the engine-default (adaptive) mode."),
    no_profile: bool = typer.Option(False, "--no-profile", help="Skip the per-step time breakdown."),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="Skip transformers generate (greedy) and "
                                      "prompt lookup, the baselines every speedup is reported against."),
    prompt_lookup_tokens: Optional[int] = typer.Option(None, "--prompt-lookup-tokens", min=1, help="transformers' "
                                                       "prompt_lookup_num_tokens for the prompt-lookup baseline "
                                                       "(default 10; not with --no-baselines)."),
    preset: Optional[List[str]] = typer.Option(None, "--preset", metavar="fast|trtllm", help="The lookahead "
                                               "modes' preset, repeatable to compare: fast (the serving default: "
                                               "prompt-lookup candidates) or trtllm (TensorRT-LLM's algorithm "
                                               "exactly) (default: fast)."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, max=2.0, help="> 0: every mode samples "
                                      "(top_p below; prompt i with seed --seed + i), against plain sampling on "
                                      "the same engine and transformers' sampled generate (default 0: greedy)."),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling with --temperature."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Base seed of the sampled modes (default 0; with "
                                       "--temperature)."),
    transformers_forward: bool = typer.Option(False, "--transformers-forward", help="Run the reference engine on "
                                              "transformers' own forward instead of its fused Llama-family one "
                                              "(to compare; the per-step profile shows the difference)."),
    invariant_attention: Optional[bool] = typer.Option(
        None, "--invariant-attention/--no-invariant-attention", help="Row-invariant attention (each row from its "
        "own keys, so lookahead gives greedy's bits in bf16 too). Default: the engine's (on where the native "
        "kernel builds); --no-invariant-attention measures the sdpa/batched kernels instead."),
    native_kernels: Optional[bool] = typer.Option(
        None, "--native-kernels/--no-native-kernels", help="The engine's native linear layers and one-call body "
        "(linear.c, layer_ops.c). Default: the engine's (on where they build: every x86-64 class and aarch64); "
        "--no-native-kernels measures oneDNN's GEMMs and torch's ops instead."),
    device: str = typer.Option("cpu", "--device", help="Where the engine and the transformers baselines run: "
                               "cpu, cuda or cuda:N (an NVIDIA GPU through torch; there the linear layers are the "
                               "vendor's GEMMs, and the floor, roofline and per-step profile, CPU measurements, "
                               "are left out)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the JSON here (default: "
                                                                 "reports/engine-bench-<timestamp>/engine-bench.json)."),
    force: bool = typer.Option(False, "--force", help="Replace the --json file if it exists."),
) -> None:
    """Greedy (or sampling, with --temperature) vs lookahead on the reference engine: tokens/s,
    tokens/step, rows/step, speedup vs the plain baseline measured in the same run, identity with it;
    plus TensorRT-LLM vs corrected n-gram keying."""
    parsed = _specs(list(ctx.args), specs)
    presets = _presets(preset)
    dtypes = _dtypes(dtype)
    _check_decoding_flags(temperature, top_p, seed, lookup_without_baseline=no_baselines and
                          prompt_lookup_tokens is not None)
    _check_device(device, native_kernels)
    _check_model(model)
    _check_prompts(prompts)

    from trtlade.engine_bench import BenchConfig

    out = json_out or Path("reports") / f"engine-bench-{time.strftime('%Y%m%d-%H%M%S')}" / "engine-bench.json"
    if force and json_out is None:  # the default path is a new run folder: --force would do nothing
        fail("--force replaces the --json file, and no --json is given (the default is a new run folder)",
             where="--force", hint="drop --force, or give --json FILE")
    # before the measurement (a bad --prompts first)
    made = _check_json_out(out, given=json_out is not None, force=force)
    config = BenchConfig(model=str(model) if model else None, specs=tuple(parsed), dtypes=tuple(dtypes),
                         max_tokens=max_tokens, prompts=prompts, repeats=repeats, threads=threads,
                         keying=not no_keying, default_mode=not no_default, profile=not no_profile,
                         baselines=not no_baselines, prompt_lookup_tokens=prompt_lookup_tokens or 10,
                         presets=presets, temperature=temperature, top_p=top_p, seed=seed or 0,
                         fast_forward=not transformers_forward, invariant_attention=invariant_attention,
                         native_kernels=native_kernels, device=device)
    with _removed_if_left_empty(made):
        _run_and_write(config, out, device)


def _specs(extra: list[str], specs: Optional[List[str]]) -> list[LookaheadSpec]:
    """The (W,N,G) specs of ``--specs`` (the values after the first arrive as extra arguments: ``--specs 4,2,4
    7,7,7``), or the default sweep where it is not given."""
    if extra and not specs:
        fail(f"unexpected argument(s) {' '.join(extra)}", code=EXIT_USAGE,
             hint="specs go after --specs, e.g. --specs 4,2,4 7,7,7")
    given = _split(specs) + extra
    if specs is not None and not given:  # `--specs ""` ran the whole default sweep
        fail("--specs is empty", where="--specs",
             hint="give (W,N,G) specs, e.g. --specs 4,2,4 7,7,7, or leave --specs out for the default sweep")
    return [parse_spec_option(v, option="--specs") for v in given or ["2,2,2", "4,2,4", "5,3,5", "7,7,7"]]


def _dtypes(dtype: str) -> list[str]:
    """The dtypes of ``--dtype``, comma-separated, each one the engine serves."""
    dtypes = [d.strip() for d in dtype.split(",") if d.strip()]
    bad = [d for d in dtypes if d.lower() not in DTYPE_CHOICES]
    if not dtypes or bad:
        fail(f"--dtype {dtype!r}: unknown dtype {', '.join(bad) or '(empty)'}", where="--dtype",
             hint="use float32, bfloat16 or float16, comma-separated (e.g. --dtype float32,bfloat16)")
    return dtypes


def _check_decoding_flags(temperature: float, top_p: float, seed: Optional[int], *,
                          lookup_without_baseline: bool) -> None:
    """--top-p in (0, 1]; --top-p below 1 and --seed only with sampling (--temperature above 0);
    --prompt-lookup-tokens only with the baselines (``lookup_without_baseline``: given with --no-baselines)."""
    if top_p <= 0.0:
        fail(f"--top-p {top_p}: must be in (0, 1]", where="--top-p", hint="e.g. --temperature 0.7 --top-p 0.95")
    if top_p < 1.0 and not temperature > 0:
        fail(f"--top-p {top_p} without --temperature: greedy decoding ignores top_p", where="--top-p",
             hint="add --temperature, e.g. --temperature 0.7 --top-p 0.95")
    if lookup_without_baseline:
        fail("--prompt-lookup-tokens sets the prompt-lookup baseline, which --no-baselines skips",
             where="--no-baselines", hint="drop one of the two")
    if seed is not None and not temperature > 0:
        fail(f"--seed {seed} without --temperature: greedy decoding draws nothing, so the seed would do nothing",
             where="--seed", hint="add --temperature, e.g. --temperature 0.7 --seed 3")


def _check_model(model: Optional[Path]) -> None:
    """--model is a Hugging Face folder or a GGUF file (None: the embedded model)."""
    gguf = model is not None and model.suffix == ".gguf" and model.is_file()
    if model is not None and not (model / "config.json").is_file() and not gguf:
        fail(f"--model {model}: neither a Hugging Face model folder (no config.json) nor a .gguf file", where="--model",
             hint="give a folder with config.json, weights and tokenizer, a GGUF file, or omit --model for the "
                  "embedded model")


def _check_prompts(prompts: str) -> None:
    """--prompts names a bundled suite or a readable suite file, checked before anything is measured."""
    from trtlade.reference.prompt_suite import PromptSuiteError, load_suite

    try:
        load_suite(prompts)
    except PromptSuiteError as exc:  # no suite of that name: the flag's value; else the file's content (exit 1)
        unknown = "is neither a bundled suite" in exc.message
        fail(exc.message, where="--prompts", code=EXIT_USAGE if unknown else EXIT_INVALID,
             hint=exc.hint or "use 'suite', 'long-context' or a JSON file like trtlade/data/prompts.json")


@contextlib.contextmanager
def _removed_if_left_empty(folder: Optional[Path]) -> Iterator[None]:
    """A run folder made for the JSON is removed again if the run fails or is interrupted before writing it."""
    try:
        yield
    finally:
        if folder is not None and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _run_and_write(config: Any, out: Path, device: str) -> None:
    from transformers.utils import logging as hf_logging

    from trtlade.engine_bench import run_engine_bench
    from trtlade.reference.batch_runner import UnsupportedModelError
    from trtlade.reference.embedded import EmbeddedModelError
    from trtlade.reference.engine import ModelLoadError

    hf_logging.disable_progress_bar()  # per-load progress bars would drown the per-repeat lines
    try:
        result = run_engine_bench(config, progress=lambda line: err_console.print(line, highlight=False))
    except (EmbeddedModelError, ModelLoadError, UnsupportedModelError) as exc:
        fail(str(exc))
    from trtlade.bench.meta import device_name, machine_info

    data = result.to_dict()
    data["machine"] = machine_info()  # the CPU model: a speed figure holds on the host that measured it
    data["machine"]["device"] = device_name(device)
    try:
        out.write_text(json.dumps(data, indent=2) + "\n")
    except OSError as exc:  # it was writable when the run began
        print(json.dumps(data, indent=2))
        fail(f"cannot write {out}: {exc.strerror or exc}; the JSON went to stdout above", where="--json",
             code=EXIT_INVALID)  # a failed step after the run, not a usage mistake
    _print_tables(data)
    console.print(f"JSON written to {out}")


def _check_json_out(out: Path, *, given: bool, force: bool = False) -> Optional[Path]:
    """The JSON's folder exists (made now) and is writable, ``out`` is not a folder, and not a file already there
    (unless ``force``). Returns the folder where it was made now (None: it was there)."""
    import os

    where = "--json" if given else "reports/"
    hint = "give a file path under a folder you can write (default: reports/engine-bench-<time>/engine-bench.json)"
    if out.is_dir():
        fail(f"{out} is a folder", where=where, hint=hint)
    refuse_overwrite(out, where=where, force=force)
    existed = out.parent.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {out.parent}: {exc.strerror or exc}", where=where, hint=hint)
    if not os.access(out.parent, os.W_OK | os.X_OK):
        fail(f"{out.parent} is not writable", where=where, hint=hint)
    return None if existed else out.parent


def _check_device(device: str, native_kernels: Optional[bool]) -> None:
    """``--device``: the CPU, or a CUDA device torch can see (the native kernels are CPU code)."""
    if device != "cpu" and native_kernels and re.fullmatch(r"cuda(:\d+)?", device):
        fail(f"--native-kernels with --device {device}: the native kernels are CPU code", where="--native-kernels",
             hint="drop --native-kernels: off the CPU the engine runs the vendor's GEMMs and torch's attention")
    from trtlade.reference.kernels import DeviceError, check_device

    try:
        check_device(device)
    except DeviceError as exc:
        fail(f"--device {exc.message}", where="--device", hint=exc.hint.replace("or use cpu", "or use --device cpu"))


def _print_tables(data: dict) -> None:
    """Per dtype: the modes' table, the floor and roofline lines, identity, categories, keying and profile."""
    sampled = data["config"].get("temperature", 0) > 0
    for res in data["results"]:
        console.print(_modes_table(data, res, sampled))
        _print_roofline(res)
        _print_identity(res, sampled)
        _print_categories(res)
        _print_keying(res)
        _print_profiles(res)


def _modes_table(data: dict, res: dict, sampled: bool) -> Any:
    """One dtype's modes: rates, speedups with their spread, tokens and rows a step, the step against its floor."""
    from rich.table import Table

    config = data["config"]
    base = "plain sampling" if sampled else "greedy"
    decoding = f"sampled at temperature {config['temperature']:g}, top_p {config['top_p']:g}; " if sampled else ""
    cpu = data.get('machine', {}).get('device') or data.get('machine', {}).get('cpu') or 'an unknown CPU'
    table = Table(title=f"{data['model_id']} {res['dtype']} on {cpu} "
                        f"({decoding}"
                        f"engine spec {res['engine_spec']}; speedup vs generate: median (min–max) of the "
                        "repeats of the token rate over generate's, each repeat running every mode; "
                        f"{res['threads']} threads, {len(data['prompts'])} prompts x "
                        f"{config['max_tokens']} tokens, {config['repeats']} repeats; tokens/s "
                        "and the speedup vs transformers generate count prefill + decode)")
    for col in ("mode", "preset", "tokens/s", "vs transformers generate", f"vs trtlade {base} (decode)",
                "tokens/step", "rows/step", "ms/step", "step / floor", f"identical to {base}", "same tokens"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for m in res["modes"]:
        label = m["mode"] + (f" ({m['spec']}, auto policy)" if m["adaptive"] else "")
        ours = m["kind"] == "trtlade"
        vs_generate = f"{m['speedup_vs_generate']:.2f}x" if m.get("speedup_vs_generate") is not None else "-"
        per_repeat = m.get("speedup_vs_generate_per_repeat") or []
        if len(per_repeat) > 1:  # the spread over repeats next to the median
            vs_generate += f" ({min(per_repeat):.2f}–{max(per_repeat):.2f})"
        table.add_row(label, m.get("preset") or "-", f"{m['total_tokens_per_s']:.1f}", vs_generate,
                      _vs_greedy(m) if ours else "-",
                      f"{m['tokens_per_step']:.2f}" if ours else "-", f"{m['rows_per_step']:.1f}" if ours else "-",
                      *_step_cells(m, res.get("floor") or {}),
                      *((f"{m['identity_vs_greedy']:.0%}", f"{m['identical_prefix_share']:.0%}")
                        if ours or not sampled else ("- (own RNG)", "-")))
    return table


def _print_roofline(res: dict) -> None:
    """The floor (the weights read once), the multiply-add peak and R*, the kernels and the weights' pages."""
    floor = res.get("floor") or {}
    if floor:
        lo, hi = floor["floor_ms_range"]
        console.print(f"floor: {floor['weight_bytes'] / 1e6:.0f} MB of weights read once per step at "
                      f"{floor['read_gb_s']:.1f} GB/s (torch.sum over 1 GiB, {res['threads']} threads, measured "
                      f"before and after the modes: {', '.join(f'{g:.1f}' for g in floor['read_gb_s_samples'])}"
                      f" GB/s) = {floor['floor_ms']:.2f} ms ({lo:.2f}-{hi:.2f})", highlight=False)
    if floor.get("peak_gflops"):
        peaks = ", ".join(f"{p:.0f}" for p in floor["peak_gflops_samples"])
        how = ("the native kernels' instruction, 12 chains a thread" if floor.get("peak_source") == "instruction"
               else "torch.mm in cache")
        console.print(f"roofline: multiply-adds at {floor['peak_gflops']:.0f} GFLOP/s ({floor['dtype']}, {how}, "
                      f"{res['threads']} threads: {peaks}; torch.mm {floor.get('mm_gflops', 0):.0f}); "
                      f"a step carries R* = "
                      f"{floor['rows_star']:.1f} rows before its multiply-adds take longer than reading the "
                      "weights once", highlight=False)
    exact = res.get("exactness") or {}
    if exact.get("kernels"):
        console.print(f"kernels: {exact['kernels']} ({exact.get('native_kernel', '')})", highlight=False)
    if (pages := res.get("weight_pages") or {}).get("bytes"):
        from trtlade.reference.native.pages import pages_line

        console.print(f"weights: {pages_line(pages)}", highlight=False)


def _print_identity(res: dict, sampled: bool) -> None:
    """How many of the engine's modes gave its own greedy (or plain sampling) tokens, and whether they are
    bit-exact by construction (only where the engine records its exactness)."""
    exact = res.get("exactness") or {}
    if not exact:
        return
    ours_modes = [m for m in res["modes"] if m.get("kind") == "trtlade"]
    same = sum(m["identity_vs_greedy"] == 1.0 for m in ours_modes)
    console.print(f"identity, {res['dtype']}: {same} of {len(ours_modes)} modes identical to the engine's own "
                  f"{'plain sampling' if sampled else 'greedy'} on every prompt; "
                  + ("bit-exact by construction (row-invariant attention: "
                     f"{exact['row_invariant_attention']}, row-invariant linear layers)" if exact["bit_exact"]
                     else "not bit-exact by construction here: " + exact["statement"]), highlight=False)


def _print_keying(res: dict) -> None:
    """TensorRT-LLM's n-gram keying against the corrected one, tokens a step per spec (none with --no-keying)."""
    if not res["keying"]:
        return
    from rich.table import Table

    keying = Table(title=f"n-gram keying, {res['dtype']}, preset trtllm: tokens per step")
    for col in ("spec", "TensorRT-LLM (key y[g])", "corrected (key g)", "change"):
        keying.add_column(col, justify="right")
    for k in res["keying"]:
        keying.add_row(k["spec"], f"{k['tokens_per_step_trtllm_keying']:.3f}",
                       f"{k['tokens_per_step_corrected_keying']:.3f}", f"{k['change']:+.1%}")
    console.print(keying)


def _print_profiles(res: dict) -> None:
    """Where a decoding step goes, by part, for each profiled spec."""
    from rich.table import Table

    for prof in res.get("profile", []):
        breakdown = Table(title=f"where a decoding step goes, {res['dtype']}, spec ({prof['spec']}), "
                                f"preset {prof.get('preset', '-')}: "
                                f"{prof['step_ms']:.1f} ms/step, {prof['rows_per_step']:.1f} rows/step")
        breakdown.add_column("part")
        breakdown.add_column("ms/step", justify="right")
        breakdown.add_column("share", justify="right")
        total = max(prof["step_ms"], sum(prof["breakdown_ms"].values())) or 1.0
        for part, value in prof["breakdown_ms"].items():
            breakdown.add_row(part, f"{value:.2f}", f"{value / total:.0%}")
        console.print(breakdown)


def _vs_greedy(mode: dict) -> str:
    """``1.23x (1.20–1.26); mean 1.22x faster ±0.04 (95%)``: the median decode-rate ratio, its range over the
    repeats, and the bench's verdict on their geometric mean with its 95% margin (``one sample`` with one repeat); the
    baseline itself: ``1.00x``.

    >>> _vs_greedy({"speedup_vs_greedy": 1.5, "speedup_vs_greedy_per_repeat": [1.5, 1.5, 1.5, 1.5, 0.5],
    ...             "speedup_vs_greedy_verdict": "within noise", "speedup_vs_greedy_margin": 0.4612})
    '1.50x (0.50–1.50); mean 1.20x within noise ±0.46 (95%)'
    """
    text = f"{mode['speedup_vs_greedy']:.2f}x"
    ratios = mode.get("speedup_vs_greedy_per_repeat") or []
    said = mode.get("speedup_vs_greedy_verdict")
    if len(ratios) > 1:
        text += f" ({min(ratios):.2f}–{max(ratios):.2f})"
        m = mode.get("speedup_vs_greedy_margin")
        if said and m is not None:
            from trtlade.bench.report import shown_digits

            from trtlade.bench.noise import geometric_mean

            mean = geometric_mean(ratios)  # what the verdict and its margin judge
            digits = shown_digits(abs(mean - 1), m, 2)
            return f"{text}; mean {mean:.{digits}f}x {said} ±{m:.{digits}f} (95%)"
    return f"{text} {said}" if said else text


def _step_cells(mode: dict, floor: dict) -> tuple[str, str]:
    """A mode's decode time per step and its ratio to the floor (the time to read the weights once)."""
    step = mode.get("step_ms")
    if step is None:
        return "-", "-"
    return f"{step:.1f}", f"{step / floor['floor_ms']:.2f}x" if floor.get("floor_ms") else "-"


def _print_categories(res: dict) -> None:
    from rich.table import Table

    per_category = res.get("per_category_vs_generate") or {}
    if not per_category:
        return
    modes = [m["mode"] for m in res["modes"] if m["mode"] != "transformers generate"]
    table = Table(title=f"per category, {res['dtype']}: speedup vs transformers generate (whole time)")
    table.add_column("category")
    for mode in modes:
        table.add_column(mode, justify="right")
    for category, speedups in per_category.items():
        table.add_row(category, *(f"{speedups[m]:.2f}x" for m in modes))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("engine-bench", context_settings={"allow_extra_args": True,
                                                  "ignore_unknown_options": False})(engine_bench)

"""Checks of a schema-valid trtlade config beyond types and ranges: spec warnings, bench modes the
server would refuse, build sizes trtllm-build would change silently, section consistency, and the
config against a built engine (:func:`trtlade.trtllm.engine_config.check_engine`).

Every finding is a located :class:`~trtlade.diagnostics.Diagnostic`. Worked example: a config with
``lookahead.spec: 4,3,4`` next to an engine built with ``--max_draft_len 39`` gets::

    deploy.yml:3:9: error: lookahead.spec: the engine was built with max_draft_len 39 but
    lookahead.spec (4,3,4) needs 15: TensorRT-LLM's lookahead guide requires the two to be equal ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtlade.config.loader import LoadedConfig, YamlDocument
from trtlade.config.schema import BUNDLED_DATASETS, CHAT_DATASETS, TrtladeConfig
from trtlade.diagnostics import Diagnostic
from trtlade.drafting.config import DRAFTER_MODE_HINT, DraftConfig, DraftConfigError, drafter_mode, is_drafter_mode
from trtlade.spec import LookaheadSpec, SpecError
from trtlade.trtllm.compat import installed_version
from trtlade.trtllm.releases import (EQUIVALENT_SPECULATION, Release, equivalent_speculation, flow_mapping,
                                     lookahead_refusal_1_3, release_for)
from trtlade.trtllm.engine_config import EngineConfigError, check_engine, read_engine_config

__all__ = ["check_trtlade", "spec_warnings", "ignored_speculation_warnings", "start_warnings",
            "engine_diagnostics", "display_path", "BENCH_NAMED_MODES"]

#: bench.modes entries that are not specs.
BENCH_NAMED_MODES = ("ar", "lookahead", "default", "schedule", "auto")


def check_trtlade(loaded: LoadedConfig, *, engine_dir: Path | None = None,
                  release: str | None = None) -> list[Diagnostic]:
    """All semantic checks of a schema-valid config; ``engine_dir`` overrides ``build.engine_dir``;
    ``release`` (a flag) overrides ``build.trtllm_version``, which overrides the installed TensorRT-LLM."""
    doc, cfg = loaded.document, loaded.config
    out: list[Diagnostic] = []
    out += check_release(doc, cfg, release)
    out += spec_warnings(doc, cfg.lookahead.spec, ("lookahead", "spec"))
    if cfg.lookahead.request_default is not None:
        out += spec_warnings(doc, cfg.lookahead.request_default, ("lookahead", "request_default"))
    out += _check_build_sizes(doc, cfg)
    out += _check_bench_modes(doc, cfg)
    out += _check_bench_repeats(doc, cfg)
    out += _check_bench_sampling(doc, cfg)
    out += _check_sections(doc, cfg)
    out += ignored_speculation_warnings(doc, cfg)
    out += _check_files(loaded)
    engine_found = _check_engine(loaded, engine_dir)
    out += engine_found
    if not any(d.code == "lookahead-variable-swa" for d in engine_found):
        out += _check_sliding_windows(loaded)
    return out


def start_warnings(doc: YamlDocument, cfg: TrtladeConfig) -> list[str]:
    """What ``validate-config`` warns of a config that serving or building it drops or keeps below its aim (a
    ``speculation`` key TensorRT-LLM ignores, a (W,N,G) outside the useful range), as its lines: said at start by
    ``serve`` and ``build``, which would otherwise go on without a word."""
    found = [*spec_warnings(doc, cfg.lookahead.spec, ("lookahead", "spec")), *ignored_speculation_warnings(doc, cfg)]
    return [d.format_text() for d in found if d.severity == "warning"]


def ignored_speculation_warnings(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """The ``speculation`` keys TensorRT-LLM accepts and does not use, a warning each: the value would be dropped
    without a word (a request's block refuses them)."""
    from trtlade.drafting.config import ignored_keys

    return [doc.diagnostic("warning", f"{why}: the value is dropped", loc=("speculation", key),
                           code="speculation-ignored", hint=f"remove {key}")
            for key, why in ignored_keys(cfg.speculation or {})]


def target_release(cfg: TrtladeConfig, release: str | None = None) -> tuple[str | None, tuple, str]:
    """The TensorRT-LLM release a config is checked against, where it was set (the config key to blame) and
    how it was found: a flag, ``build.trtllm_version``, else the installed one (None: none known)."""
    if release is not None:
        return release, ("build", "trtllm_version"), "--trtllm-version"
    if cfg.build.trtllm_version is not None:
        return cfg.build.trtllm_version, ("build", "trtllm_version"), "build.trtllm_version"
    found = installed_version()
    return found, ("build", "backend"), "the installed TensorRT-LLM"


def check_release(doc: YamlDocument, cfg: TrtladeConfig, release: str | None = None) -> list[Diagnostic]:
    """What the targeted TensorRT-LLM release runs (:mod:`trtlade.trtllm.releases`): a Lookahead engine below
    1.3 only; the PyTorch backend's NGram / AUTO from 1.0, SA from 1.3; an unknown newer release: a warning."""
    version, loc, how = target_release(cfg, release)
    if how == "--trtllm-version":  # the flag, not a line of the file
        def diagnostic(severity: str, message: str, **kw: Any) -> Diagnostic:
            kw.pop("loc", None)
            return Diagnostic(severity, message, path="--trtllm-version", file=doc.file, **kw)  # type: ignore[arg-type]
    else:
        diagnostic = doc.diagnostic
    engine_flow = cfg.build.backend == "trtllm" and (cfg.serve.engine == "trtllm"
                                                     or "lookahead" in cfg.model_fields_set)
    if version is None:
        return []
    try:
        row = release_for(version)
    except ValueError as exc:
        return [diagnostic("error", str(exc) if how == "--trtllm-version" else f"{how}: {exc}", loc=loc,
                           code="trtllm-release",
                           hint="target 0.16 or later (Lookahead engines up to 1.2, NGram / SA on 1.3 and later)")]
    out = []
    if row.note:
        out.append(diagnostic("warning", f"TensorRT-LLM {version} ({how}) is {row.note}", loc=loc,
                                  code="trtllm-release-unknown"))
    if engine_flow and (why := lookahead_refusal_1_3(version)) is not None:
        equivalent = flow_mapping(cfg.speculation or equivalent_speculation(cfg.lookahead.lookahead_schedule,
                                                                            cfg.build.max_batch_size))
        out.append(diagnostic(
            "error", f"{why}; this config builds and serves a Lookahead engine (build.backend trtllm, "
                     f"lookahead.spec {cfg.lookahead.spec}) for {version} ({how})", loc=loc, code="lookahead-release",
            hint=f"deploy on the PyTorch backend: build.backend: pytorch and speculation: {equivalent} (trtlade's "
                 "measured default; `trtlade tune` writes the one your traffic needs, docs/guides/migrate-1.3.md), or "
                 "target a release below 1.3 (build.trtllm_version)"))
    if cfg.build.backend == "pytorch":
        out += _check_pytorch_drafter(doc, cfg, version, row, how)
    return out


def _check_pytorch_drafter(doc: YamlDocument, cfg: TrtladeConfig, version: str, row: Release, how: str
                           ) -> list[Diagnostic]:
    if not cfg.lookahead.spec.is_autoregressive:
        return [doc.diagnostic("error", f"lookahead.spec {cfg.lookahead.spec} with build.backend pytorch: "
                               "TensorRT-LLM's PyTorch backend has no Lookahead (LookaheadDecodingConfig."
                               "supports_backend refuses it; from 1.3 on it does not exist)",
                               loc=("lookahead", "spec"), code="pytorch-lookahead",
                               hint=f"replace the lookahead section with speculation: "
                                    f"{flow_mapping(EQUIVALENT_SPECULATION)}, or build a Lookahead engine for a "
                                    "release below 1.3 (build.backend trtllm)")]
    if cfg.speculation is None:
        return [doc.diagnostic("info", "build.backend pytorch without a speculation block: plain decoding, no "
                               "speculative_config (a baseline to bench a drafter against)", loc=("build", "backend"),
                               code="pytorch-plain")]
    config = cfg.speculation_config
    assert config is not None
    if config.requested not in row.drafters:
        offers = ", ".join(row.drafters) or "none"
        return [doc.diagnostic("error", f"{config.requested}: TensorRT-LLM {version} ({how}) has no such drafter on "
                               f"its PyTorch backend (it offers: {offers})",
                               loc=("speculation", "decoding_type"), code="speculation-release",
                               hint="NGram and AUTO from 1.0, SA from 1.3; target a release that has it "
                                    "(build.trtllm_version)")]
    return []


def _check_sliding_windows(loaded: LoadedConfig) -> list[Diagnostic]:
    """Before any engine exists: a TensorRT-LLM Lookahead config of a sliding-window model (Gemma 2/3,
    read from model.path's config.json when it is on this machine) whose build.max_seq_len plus the
    draft tokens goes past the smallest window (:mod:`trtlade.trtllm.windows`)."""
    import json

    from trtlade.trtllm.windows import from_hf_config, lookahead_refusal

    doc, cfg = loaded.document, loaded.config
    folder = loaded.resolve(cfg.model.path) if cfg.model.path else None
    spec = cfg.lookahead.spec
    if cfg.serve.engine != "trtllm" or spec.is_autoregressive or folder is None:
        return []
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return []
    windows = from_hf_config(data, where=str(Path(folder) / "config.json")) if isinstance(data, dict) else None
    seq = cfg.build.requested_max_seq_len + spec.max_draft_len
    refusal = None if windows is None else lookahead_refusal(windows, seq)
    if refusal is None:
        return []
    return [doc.diagnostic(
        "error", f"a Lookahead engine of this model would not be the model: {refusal}",
        loc=("build", "max_seq_len") if cfg.build.max_seq_len is not None else ("lookahead", "spec"),
        code="lookahead-variable-swa",
        hint=f"set build.max_seq_len: {windows.smallest - spec.max_draft_len} or less (the windows then cover "
             "the whole sequence, draft tokens included), or serve.engine: reference (exact windows)")]


def spec_warnings(doc: YamlDocument, spec: LookaheadSpec, loc: tuple) -> list[Diagnostic]:
    """LookaheadSpec.warnings() (below (2,2,1), above 128 draft tokens) as located warnings."""
    return [doc.diagnostic("warning", w.message, loc=loc, hint=w.hint, code=f"spec-{w.code}")
            for w in spec.warnings()]


def _check_build_sizes(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    build, spec = cfg.build, cfg.lookahead.spec
    out: list[Diagnostic] = []
    if build.max_seq_len is not None and build.max_seq_len < build.max_input_len:
        out.append(doc.diagnostic(
            "error", f"build.max_seq_len {build.max_seq_len} is below build.max_input_len {build.max_input_len}: "
                     "trtllm-build refuses it", loc=("build", "max_seq_len"), code="build-max-seq-len",
            hint="max_seq_len is prompt + output tokens; make it larger than max_input_len"))
    need = build.max_batch_size * spec.decoding_tokens
    # NVIDIA/TensorRT-LLM tensorrt_llm/_common.py, check_max_num_tokens (from builder.py _init_max_seq_len): a larger
    # value is lowered to the cap, with a warning only
    if build.backend == "trtllm" and build.max_num_tokens is not None and build.max_seq_len is not None \
            and build.max_num_tokens > build.max_seq_len * build.max_batch_size:
        cap = build.max_seq_len * build.max_batch_size
        out.append(doc.diagnostic(
            "error", f"build.max_num_tokens {build.max_num_tokens} is above max_seq_len {build.max_seq_len} x "
                     f"max_batch_size {build.max_batch_size} = {cap}: trtllm-build lowers it to {cap} "
                     "(check_max_num_tokens), so the engine would not hold what the config says",
            loc=("build", "max_num_tokens"), code="build-max-num-tokens-cap",
            hint=f"write build.max_num_tokens: {cap} or less, or raise max_seq_len or max_batch_size"))
    if build.max_num_tokens is not None and build.max_num_tokens < build.max_batch_size:
        out.append(doc.diagnostic(
            "error", f"build.max_num_tokens {build.max_num_tokens} is below build.max_batch_size "
                     f"{build.max_batch_size}: every running request needs at least its golden row per step, "
                     "so the reference engine refuses to start", loc=("build", "max_num_tokens"),
            code="build-max-num-tokens-batch",
            hint=f"allowed: max_num_tokens >= {build.max_batch_size}; {need} lets every request run its full "
                 f"lookahead step"))
    elif build.max_num_tokens is not None and build.max_num_tokens < need:
        out.append(doc.diagnostic(
            "warning", f"build.max_num_tokens {build.max_num_tokens} is below max_batch_size * (max_draft_len + 1) = "
                       f"{build.max_batch_size} * {spec.decoding_tokens} = {need}: trtllm-build raises it to {need} "
                       "without saying so", loc=("build", "max_num_tokens"), code="build-max-num-tokens",
            hint=f"write build.max_num_tokens: {need} (or more) so the config says what the engine holds"))
    return out


def _check_bench_sampling(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """``bench.top_p`` below 1 with no ``bench.temperature``: greedy requests carry no top_p, so bench and tune refuse
    it (it would be neither sent nor recorded)."""
    if cfg.bench.top_p < 1.0 and not cfg.bench.temperature > 0:
        return [doc.diagnostic("error", f"top_p {cfg.bench.top_p:g} without a temperature: greedy decoding ignores "
                               "top_p, so bench and tune refuse it", loc=("bench", "top_p"), code="bench-top-p",
                               hint="set bench.temperature (e.g. 0.7), or remove top_p")]
    return []


def _mode_key(mode: str) -> object:
    """What makes two bench modes the same series (``2,4,2`` and ``2-4-2`` are one spec)."""
    name = mode.strip().lower()
    if name in BENCH_NAMED_MODES or name in ("auto", "schedule") or is_drafter_mode(name):
        return name
    try:
        return LookaheadSpec.parse(mode).as_tuple()
    except SpecError:
        return name


def _check_bench_repeats(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """A ``bench.modes`` entry or ``bench.concurrency`` level given twice: bench and tune refuse it."""
    out: list[Diagnostic] = []
    for field, values, key in (("modes", cfg.bench.modes, _mode_key), ("concurrency", cfg.bench.concurrency, int)):
        seen: dict[object, int] = {}
        for index, value in enumerate(values):
            first = seen.setdefault(key(value), index)
            if first != index:
                out.append(doc.diagnostic("error", f"{field} entry {value!r} is given twice (as entry {first} too): "
                                          "bench refuses it", loc=("bench", field, index), code="bench-repeated",
                                          hint=f"list each {'mode' if field == 'modes' else 'level'} once"))
    return out


def _check_bench_modes(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """``bench.modes`` entries: ar, lookahead, or a spec the server admits (else serve refuses it)."""
    out: list[Diagnostic] = []
    server = cfg.lookahead.spec
    for index, mode in enumerate(cfg.bench.modes):
        loc = ("bench", "modes", index)
        name = mode.strip().lower()
        if name == "auto" and cfg.serve.engine != "reference":
            out.append(doc.diagnostic("error", "bench mode 'auto' asks for the auto policy, which only the reference "
                                      "engine runs: the trtllm server would refuse every request", loc=loc,
                                      code="bench-mode", hint="drop it, or use schedule (with lookahead.schedule)"))
            continue
        if name == "schedule" and not cfg.lookahead.schedule:
            out.append(doc.diagnostic("error", "bench mode 'schedule' asks for the schedule policy but the config "
                                      "has no lookahead.schedule: the server would refuse every request", loc=loc,
                                      code="bench-mode", hint="add lookahead.schedule (trtlade tune --apply) or "
                                                              "drop the mode"))
            continue
        if name in BENCH_NAMED_MODES:
            continue
        if is_drafter_mode(name):
            out += _check_drafter_mode(doc, cfg, mode, loc)
            continue
        try:
            request = LookaheadSpec.parse(mode)
        except SpecError as exc:
            what = "an illegal spec" if exc.rule not in ("parse", "type") else "neither a named mode nor a spec"
            out.append(doc.diagnostic("error", f"bench mode {mode!r} is {what}: {exc.message}", loc=loc,
                                      code="bench-mode", hint="use ar, lookahead, default, auto, schedule, a "
                                                              "spec such as 2-2-1, or a drafter: " + DRAFTER_MODE_HINT))
            continue
        excess = server.excess(request)
        if excess:
            parts = ", ".join(f"{f} {r} > {s}" for f, r, s in excess)
            out.append(doc.diagnostic(
                "error", f"bench mode {mode!r} asks for ({request}), more than lookahead.spec ({server}) "
                         f"admits ({parts}): the server would refuse every request", loc=loc,
                code="bench-mode-not-admitted", hint=f"use a spec with w<={server.window_size}, "
                f"n<={server.ngram_size}, g<={server.verification_set_size}"))
    return out


def _check_drafter_mode(doc: YamlDocument, cfg: TrtladeConfig, mode: str, loc: tuple) -> list[Diagnostic]:
    """An NGram / SA bench mode: a legal block, a reference server, within serve's max_draft_len."""
    try:
        block = drafter_mode(mode)
        config = DraftConfig.parse(block, max_batch_size=cfg.build.max_batch_size)
    except DraftConfigError as exc:
        return [doc.diagnostic("error", f"bench mode {mode!r}: {exc.message}", loc=loc, code="bench-mode",
                               hint=exc.hint or DRAFTER_MODE_HINT)]
    if cfg.serve.engine != "reference":
        return [doc.diagnostic("error", f"bench mode {mode!r} sends a per-request speculation block, which only the "
                               "reference engine takes: the trtllm server would refuse every request", loc=loc,
                               code="bench-mode", hint="drop it, or serve.engine reference")]
    if config.max_draft_len > cfg.max_draft_len:
        return [doc.diagnostic("error", f"bench mode {mode!r} drafts {config.max_draft_len} tokens per step, more than "
                               f"the server allows ({cfg.max_draft_len}): it would refuse every request", loc=loc,
                               code="bench-mode-not-admitted",
                               hint=f"use at most {cfg.max_draft_len} tokens, or raise serve.max_draft_len")]
    return []


def _check_sections(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if cfg.lookahead.preset == "fast" and cfg.serve.engine == "trtllm":
        out.append(doc.diagnostic(
            "warning", "lookahead.preset fast applies to the reference engine only: the trtllm engine runs "
                       "TensorRT-LLM's algorithm", loc=("lookahead", "preset"), code="preset-engine",
            hint="remove preset (or set it to trtllm) when serving with TensorRT-LLM"))
    out += _other_engines_keys(doc, cfg)
    if cfg.serve.engine == "trtllm" and cfg.build.backend == "reference":
        out.append(doc.diagnostic(
            "warning", "serve.engine is trtllm but build.backend is reference: `trtlade build` will not make a "
                       "TensorRT-LLM engine for this config", loc=("serve", "engine"), code="engine-backend-mismatch",
            hint="set build.backend: trtllm, or serve.engine: reference"))
    uses_trtllm = cfg.build.backend == "trtllm" or cfg.serve.engine == "trtllm"
    if uses_trtllm and cfg.model.dtype == "float32" and not cfg.lookahead.spec.is_autoregressive:
        out.append(doc.diagnostic(
            "warning", "model.dtype float32 with a TensorRT-LLM engine: the lookahead support matrix lists FP16, "
                       "BF16 and FP8 only", loc=("model", "dtype"), code="dtype-lookahead",
            hint="use bfloat16 or float16 (or auto for the checkpoint's dtype)"))
    tokens = cfg.build.max_num_tokens
    if uses_trtllm and tokens is not None and tokens < cfg.build.max_input_len:
        out.append(doc.diagnostic(
            "warning", f"build.max_num_tokens {tokens} is below build.max_input_len {cfg.build.max_input_len}: "
                       "with context FMHA (trtllm-build's default) TensorRT-LLM's executor admits prompts of at "
                       f"most min(max_seq_len - 1, max_num_tokens), so {tokens} tokens (TrtGptModel constructor); "
                       "trtlade serve advertises that limit and answers longer prompts with 400",
            loc=("build", "max_num_tokens"), code="engine-prompt-limit",
            hint=f"set build.max_num_tokens: {cfg.build.max_input_len} or more to serve prompts of max_input_len"))
    limit = cfg.serve.max_prompt_tokens
    if cfg.build.backend == "reference" and cfg.serve.engine == "reference":  # no engine: max_input_len bounds nothing
        out.extend(_reference_build_limits(doc, cfg))
    elif limit is not None and limit > cfg.build.max_input_len:
        out.append(doc.diagnostic(
            "warning", f"serve.max_prompt_tokens {limit} is above build.max_input_len {cfg.build.max_input_len}: "
                       "longer prompts fail in the engine instead of getting a clear 400",
            loc=("serve", "max_prompt_tokens"), code="serve-prompt-limit",
            hint=f"set serve.max_prompt_tokens: {cfg.build.max_input_len} or less"))
    return out


#: keys only one engine reads: (section, key) -> the engine that reads it
_ENGINE_KEYS = {**{("serve", k): "reference" for k in (
    "threads", "prefix_cache_mb", "prefill_chunk_tokens", "prefill_stall", "prefill_idle_chunk_tokens", "max_draft_len",
    "ngram_implementation", "max_global_pool_size", "draft_retained_tokens")},
    ("lookahead", "corrected_keying"): "reference", ("lookahead", "seed"): "reference",
    ("serve", "kv_cache_free_gpu_memory_fraction"): "trtllm",
    ("serve", "kv_cache_enable_block_reuse"): "trtllm"}


def _other_engines_keys(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """A key set for the engine that does not serve (``serve.prefix_cache_mb`` with TensorRT-LLM, a KV-cache fraction
    with the reference engine): a warning at it, as the value would be dropped."""
    out = []
    # a TensorRT-LLM key is read by `trtlade build` (written into the bundle) as well as by the trtllm engine
    tensorrt_llm = cfg.serve.engine == "trtllm" or cfg.build.backend != "reference"
    for (section, key), reader in _ENGINE_KEYS.items():
        ignored = cfg.serve.engine == "trtllm" if reader == "reference" else not tensorrt_llm
        if ignored and key in getattr(cfg, section).model_fields_set:
            name = "the reference engine" if reader == "reference" else "TensorRT-LLM (serve.engine trtllm)"
            out.append(doc.diagnostic("warning", f"applies to {name}; this config serves with the "
                                      f"{cfg.serve.engine} engine, which ignores it", loc=(section, key),
                                      code="engine-key", hint=f"remove {key}, or serve with serve.engine: {reader}"))
    return out


def _check_files(loaded: LoadedConfig) -> list[Diagnostic]:
    """The files serve and bench open at start: said here where they are not (a deployment config may be checked
    on another machine than the one that serves it, so an absent path is a note, as build.engine_dir's; a dataset
    that is neither a bundled set nor a file here is a warning: bench runs where it is checked)."""
    doc, cfg = loaded.document, loaded.config
    out: list[Diagnostic] = []
    for loc, value, what in ((("model", "path"), cfg.model.path, "the model"),
                             (("serve", "api_keys_file"), cfg.serve.api_keys_file, "the API keys file")):
        resolved = loaded.resolve(value) if value is not None else None
        if resolved is not None and not resolved.exists():
            out.append(doc.diagnostic("info", f"{value} does not exist here ({display_path(resolved)})"
                                      f": serve opens {what} at start, where it runs", loc=loc, code="path-absent",
                                      hint="check the path on the machine that serves this config"))
        elif resolved is not None and loc == ("serve", "api_keys_file"):
            out += _check_keys_file(doc, resolved)
    dataset = cfg.bench.dataset
    if dataset not in BUNDLED_DATASETS:
        resolved = loaded.resolve(Path(dataset))
        if resolved is not None and not resolved.is_file():
            out.append(doc.diagnostic("warning", f"{dataset!r} is neither a bundled set nor a file here "
                                      f"({display_path(resolved)}): bench would refuse it", loc=("bench", "dataset"),
                                      code="bench-dataset", hint=f"use one of {', '.join(BUNDLED_DATASETS)}, or a "
                                      ".jsonl / ShareGPT .json path (relative to this config)"))
    if dataset in CHAT_DATASETS and cfg.bench.endpoint == "completions":
        out.append(doc.diagnostic("warning", f"the {dataset} set holds chat message lists, which the completions "
                                  "endpoint does not take: bench and tune would refuse it", loc=("bench", "endpoint"),
                                  code="bench-dataset", hint=f"bench.endpoint: chat with {dataset}, or a text set"))
    return out


def _check_keys_file(doc: YamlDocument, path: Path) -> list[Diagnostic]:
    """The keys file here, read as serve reads it at start: what would stop serve is an error at
    ``serve.api_keys_file`` naming the file's line (never the key on it); a file others may read, a warning."""
    from trtlade.config.keys_file import KeysFileError, read_keys

    loc = ("serve", "api_keys_file")
    try:
        _, warnings = read_keys(path)
    except KeysFileError as exc:
        return [doc.diagnostic("error", f"{exc.where}: {exc.message}: serve would refuse to start", loc=loc,
                               code="keys-file", hint=exc.hint)]
    return [doc.diagnostic("warning", text, loc=loc, code="keys-file-mode", hint="only the server's user should "
                           "read it") for text in warnings]


def _reference_build_limits(doc: YamlDocument, cfg: TrtladeConfig) -> list[Diagnostic]:
    """build.max_input_len / max_seq_len written in a config that builds no engine: nothing reads them (the
    reference engine's limits are the model's and serve's), so a user who wrote one is told where the limit is."""
    given = cfg.build.model_fields_set  # each loc written out: the config reference reads them from the source
    text = ("sizes a TensorRT-LLM engine (trtllm-build --{0}); with build.backend reference nothing reads it: the "
            "reference engine's limits are the model's (max_position_embeddings) and serve.max_prompt_tokens / "
            "serve.max_tokens_limit")
    hint = "bound prompts with serve.max_prompt_tokens (answers with serve.max_tokens_limit), or remove build.{0}"
    out = []
    if "max_input_len" in given:
        out.append(doc.diagnostic("warning", text.format("max_input_len"), loc=("build", "max_input_len"),
                                  code="reference-build-limit", hint=hint.format("max_input_len")))
    if "max_seq_len" in given:
        out.append(doc.diagnostic("warning", text.format("max_seq_len"), loc=("build", "max_seq_len"),
                                  code="reference-build-limit", hint=hint.format("max_seq_len")))
    return out


def _check_engine(loaded: LoadedConfig, override: Path | None) -> list[Diagnostic]:
    doc, cfg = loaded.document, loaded.config
    if override is not None:
        return engine_diagnostics(doc, cfg.lookahead.spec, override, build=cfg.build,
                                  spec_loc=("lookahead", "spec"), where_loc=(), from_cli=True)
    if cfg.build.engine_dir is None:
        return []
    resolved = loaded.resolve(cfg.build.engine_dir)
    assert resolved is not None
    engine_dir = display_path(resolved)
    if not engine_dir.exists():
        return [doc.diagnostic(
            "info", f"build.engine_dir {cfg.build.engine_dir} does not exist here ({engine_dir}): engine checks "
                    "skipped", loc=("build", "engine_dir"), code="engine-dir-absent",
            hint="pass --engine-dir DIR to check against a built engine (a copy of its config.json is enough)")]
    return engine_diagnostics(doc, cfg.lookahead.spec, engine_dir, build=cfg.build,
                              spec_loc=("lookahead", "spec"), where_loc=("build", "engine_dir"))


def display_path(path: Path) -> Path:
    """``path`` relative to the working directory when it lies below it (so GitHub annotations and
    messages name repository paths), else as is."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError):
        return path


def engine_diagnostics(doc: YamlDocument, spec: LookaheadSpec, engine_dir: Path, *, build=None,
                       spec_loc: tuple, where_loc: tuple, from_cli: bool = False) -> list[Diagnostic]:
    """Read ``engine_dir`` and run :func:`check_engine`; config-side findings are located in ``doc``.
    An unreadable engine is one error at ``where_loc`` (or, for ``--engine-dir``, on the engine dir)."""
    try:
        engine = read_engine_config(engine_dir)
    except EngineConfigError as exc:
        if from_cli:
            return [Diagnostic("error", exc.message, hint=exc.hint, path="--engine-dir", file=str(engine_dir),
                               code="engine-unreadable")]
        return [doc.diagnostic("error", f"cannot read the engine: {exc.message}", loc=where_loc, hint=exc.hint,
                               code="engine-unreadable")]
    found = check_engine(spec, engine, build, source=doc.file, spec_path=".".join(map(str, spec_loc)))
    return [doc.locate(d) for d in found]

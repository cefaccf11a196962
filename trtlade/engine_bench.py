"""``trtlade engine-bench``: plain greedy vs lookahead on the reference engine, measured in one run.

For each dtype, one engine is loaded (spec = the field-wise maximum of the specs asked for, so
that all are admitted) and these modes run over the prompt suite:

* ``greedy``  -- lookahead (1,1,0): the baseline every ratio is measured against (``plain sampling``
  with ``temperature > 0``: the same engine sampling without lookahead, with the same seeds);
* per preset (``fast``, the serving default: prompt-lookup candidates next to the pool's, N-1 tokens
  beside the window and max(N-1, 4) without it; ``trtllm``: TensorRT-LLM's algorithm exactly):
  ``<preset> default`` -- the engine's default request spec under the auto draft policy (what a user
  gets without choosing anything), and ``<preset> <W,N,G>`` -- one mode per ``--specs`` entry, fixed
  (drafts every step): what that (W,N,G) does by itself;
* with ``baselines`` (the default), what a user would otherwise run, on a separately loaded copy of
  the model: ``transformers generate`` (greedy) and ``transformers prompt lookup``
  (``prompt_lookup_num_tokens``), interleaved with the modes above (sampled with the same temperature
  and top_p when ``temperature > 0``: transformers verifies prompt-lookup candidates exactly against
  its own draws, seeded per prompt with ``torch.manual_seed``). ``speedup_vs_generate`` compares
  every mode's whole time (prefill included: ``generate`` does not split it) with ``generate``'s
  on the same prompts in the same repeat; that is the speedup a user gets.

Runs are interleaved (repeat r: every prompt, every mode in a rotated order), so a noisy machine
slows all modes alike; per mode the suite's decode tokens/s of each repeat is computed and the
median over repeats reported; ``speedup`` is the median over repeats of greedy's suite decode time
divided by the mode's, both from the same repeat. ``identity`` is the share of prompts whose tokens
equal the baseline's in the same dtype (1.0 in fp32, sampled too: prompt i is sampled with seed
``seed + i`` in every trtlade mode; bf16 logits depend on the rows of a pass). transformers' sampled
tokens come from its own generator, so their identity is not a lossless check.

Separately, tokens per step with TensorRT-LLM's keying vs the corrected keying (column 0's n-gram
keyed by g) is counted per spec (no timing: it only changes the pool).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

from trtlade.bench.noise import CONFIDENCE, Noise, geometric_mean, margin, pooled, verdict
from trtlade.presets import DEFAULT_PRESET, preset_prompt_lookup
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec

__all__ = ["BenchConfig", "ModeResult", "DtypeResult", "BenchResult", "run_engine_bench", "max_spec",
           "lookahead_modes"]

DEFAULT_BENCH_SPECS = ("2,2,2", "4,2,4", "5,3,5", "7,7,7")
GENERATE = "transformers generate"
PROMPT_LOOKUP = "transformers prompt lookup"


@dataclass(frozen=True)
class BenchConfig:
    model: Optional[str] = None  # None: the embedded model
    specs: tuple[LookaheadSpec, ...] = tuple(LookaheadSpec.parse(s) for s in DEFAULT_BENCH_SPECS)
    dtypes: tuple[str, ...] = ("float32",)
    max_tokens: int = 128
    prompts: str = "suite"
    repeats: int = 3
    threads: Optional[int] = None
    keying: bool = True
    default_mode: bool = True
    engine_spec: Optional[LookaheadSpec] = None  # None: max of specs (and the default request spec)
    profile: bool = True  # per-step time breakdown (greedy and the default spec) on the first prompt
    baselines: bool = True  # transformers generate greedy and prompt lookup, interleaved
    presets: tuple[str, ...] = (DEFAULT_PRESET,)  # the reference engine's presets to run the lookahead modes with
    prompt_lookup_tokens: int = 10
    temperature: float = 0.0  # > 0: every mode samples (the baseline is plain sampling on the same engine)
    top_p: float = 1.0
    seed: int = 0  # prompt i is sampled with seed + i, in every mode and repeat
    fast_forward: bool = True  # False: transformers' forward (the engine before its own Llama-family forward)
    invariant_attention: Optional[bool] = None  # row-invariant attention: None = the engine's default (on, CPU)
    native_kernels: Optional[bool] = None  # the native linear layers and body: None = the engine's default
    device: str = "cpu"  # a torch device; off the CPU: no floor, roofline or per-step profile (CPU measurements)

    @property
    def baseline(self) -> str:
        """The name of the mode every ratio is measured against."""
        return "greedy" if not self.temperature > 0 else "plain sampling"

    def sampling(self, prompt_index: int) -> dict[str, Any]:
        """The sampling arguments of prompt ``prompt_index`` (none when greedy)."""
        if not self.temperature > 0:
            return {}
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed + prompt_index}


@dataclass
class ModeResult:
    """One mode (greedy, default or a spec) over the suite, all repeats."""

    mode: str
    spec: str
    adaptive: bool
    kind: str = "trtlade"  # or "transformers" (a baseline)
    preset: Optional[str] = None  # the lookahead modes' preset (None: greedy and the baselines)
    prompt_lookup: int = 0  # trtlade's prompt-lookup candidate tokens in this mode (from the preset)
    tokens: int = 0  # per repeat (the same each repeat: greedy is deterministic)
    steps: int = 0
    rows: int = 0
    decode_s: list[float] = field(default_factory=list)  # suite decode time per repeat
    prefill_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)  # suite prefill + decode time per repeat
    identical_prompts: int = 0
    prompts: int = 0
    identical_prefix_tokens: int = 0  # tokens before the first difference from greedy, summed
    greedy_tokens: int = 0
    per_prompt: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(self.tokens / t for t in self.decode_s) if self.decode_s else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    def step_ms(self, prompts: int) -> Optional[float]:
        """Median over repeats of the decode time per decoding step (the prefill steps left out)."""
        decode_steps = self.steps - prompts
        if self.kind != "trtlade" or decode_steps <= 0 or not self.decode_s:
            return None
        return statistics.median(t / decode_steps * 1e3 for t in self.decode_s)

    @property
    def rows_per_step(self) -> float:
        return self.rows / self.steps if self.steps else 0.0

    @property
    def identity(self) -> float:
        return self.identical_prompts / self.prompts if self.prompts else 0.0

    def speedups(self, greedy: "ModeResult") -> list[float]:
        """This mode's decode token rate over ``greedy``'s, one ratio per repeat (each repeat runs both): rates,
        not times, so a mode that emits fewer tokens (a different answer) is not counted faster for it."""
        if not self.tokens or not greedy.tokens:
            return []
        return [(self.tokens / m) / (greedy.tokens / g) for g, m in zip(greedy.decode_s, self.decode_s)
                if m > 0 and g > 0]

    def speedup(self, greedy: "ModeResult") -> float:
        """Median over repeats of :meth:`speedups` (0.0 when nothing was measured)."""
        pairs = self.speedups(greedy)
        return statistics.median(pairs) if pairs else 0.0

    @property
    def total_tokens_per_s(self) -> float:
        return statistics.median(self.tokens / t for t in self.total_s) if self.total_s else 0.0

    def speedup_total(self, base: Optional["ModeResult"]) -> Optional[float]:
        """Median over repeats of this mode's whole-time token rate over ``base``'s (prefill included)."""
        pairs = self.speedups_total(base)
        return statistics.median(pairs) if pairs else None

    def speedups_total(self, base: Optional["ModeResult"]) -> list[float]:
        """This mode's tokens per second (prefill included) over ``base``'s, one ratio per repeat
        (each repeat runs both). With the same tokens -- greedy, or trtlade's sampled modes with
        the same seeds -- it is ``base``'s time over this mode's; transformers' samples differ in
        length (its own generator, its own EOS), so rates, not times, are compared."""
        if base is None or not base.tokens or not self.tokens:
            return []
        return [(self.tokens / m) / (base.tokens / b) for b, m in zip(base.total_s, self.total_s) if m > 0 and b > 0]

    def to_dict(self, greedy: "ModeResult", generate: Optional["ModeResult"] = None,
                noise: Optional[Noise] = None) -> dict[str, Any]:
        """As JSON. ``noise``: the pooled noise of the speedups over greedy of the run's trtlade modes, for the
        verdict (:func:`trtlade.bench.noise.margin`); decode figures are None for a transformers baseline (its time
        is prefill + decode)."""
        vs_generate = self.speedup_total(generate)
        ours = self.kind == "trtlade"
        ratios = self.speedups(greedy) if ours else []
        m = margin(ratios, noise or pooled([ratios])) if ours and self is not greedy else None
        return {
            "mode": self.mode, "spec": self.spec, "adaptive": self.adaptive, "kind": self.kind,
            "preset": self.preset, "prompt_lookup": self.prompt_lookup,
            "total_tokens_per_s": round(self.total_tokens_per_s, 3),
            "speedup_vs_generate": round(vs_generate, 4) if vs_generate is not None else None,
            "speedup_vs_generate_per_repeat": [round(r, 4) for r in self.speedups_total(generate)],
            "tokens": self.tokens, "steps": self.steps, "tokens_per_step": round(self.tokens_per_step, 4),
            "rows_per_step": round(self.rows_per_step, 3),
            "tokens_per_s": round(self.tokens_per_s, 3) if ours else None,
            "speedup_vs_greedy": round(self.speedup(greedy), 4) if ours else None,
            "speedup_vs_greedy_per_repeat": [round(r, 4) for r in ratios],
            "speedup_vs_greedy_mean": round(geometric_mean(ratios), 4) if ours and ratios else None,
            "speedup_vs_greedy_margin": round(m, 4) if m is not None else None,
            "speedup_vs_greedy_confidence": CONFIDENCE if m is not None else None,
            "speedup_vs_greedy_verdict": (verdict(geometric_mean(ratios), m) if ratios and self is not greedy
                                          else None),
            "identity_vs_greedy": round(self.identity, 4),
            "identical_prefix_share": round(self.identical_prefix_tokens / self.greedy_tokens, 4)
            if self.greedy_tokens else 0.0,
            "decode_s_per_repeat": [round(t, 4) for t in self.decode_s],
            "prefill_s_per_repeat": [round(t, 4) for t in self.prefill_s],
            "total_s_per_repeat": [round(t, 4) for t in self.total_s],
            "step_ms": round(self.step_ms(self.prompts), 3) if self.step_ms(self.prompts) is not None else None,
            "per_prompt": self.per_prompt,
        }


@dataclass
class DtypeResult:
    dtype: str
    engine_spec: str
    default_request_spec: str
    threads: int
    packed_linears: int
    load_s: float
    linear_kernel: dict[str, Any] = field(default_factory=dict)
    modes: list[ModeResult] = field(default_factory=list)
    keying: list[dict[str, Any]] = field(default_factory=list)
    step_cost: dict[str, float] = field(default_factory=dict)  # rows -> ms per step (calibration)
    profile: list[dict[str, Any]] = field(default_factory=list)
    categories: dict[str, str] = field(default_factory=dict)  # prompt id -> category
    floor: dict[str, Any] = field(default_factory=dict)  # weight bytes / read bandwidth (trtlade.reference.floor)
    exactness: dict[str, Any] = field(default_factory=dict)  # what lossless rests on (ReferenceEngine.exactness)
    weight_pages: dict[str, Any] = field(default_factory=dict)  # where the packed weights lie (native/pages.py)

    @property
    def greedy(self) -> ModeResult:
        """The baseline: plain greedy decoding (or plain sampling), always the first mode."""
        return self.modes[0]

    @property
    def generate(self) -> Optional[ModeResult]:
        return next((m for m in self.modes if m.mode == GENERATE), None)

    def noise(self) -> Noise:
        """The pooled repeat-to-repeat noise of the trtlade modes' speedups over greedy (the bench's rule)."""
        return pooled(m.speedups(self.greedy) for m in self.modes[1:] if m.kind == "trtlade")

    def to_dict(self) -> dict[str, Any]:
        greedy, generate = self.greedy, self.generate
        return {
            "dtype": self.dtype, "engine_spec": self.engine_spec,
            "default_request_spec": self.default_request_spec, "threads": self.threads,
            "packed_linears": self.packed_linears, "linear_kernel": self.linear_kernel,
            "load_s": round(self.load_s, 3),
            "step_cost_ms": self.step_cost,
            "profile": self.profile,
            "floor": self.floor,
            "exactness": self.exactness,
            "weight_pages": self.weight_pages,
            "modes": [m.to_dict(greedy, generate, self.noise()) for m in self.modes],
            "per_category_vs_generate": category_speedups(self.modes, generate, self.categories),
            "keying": self.keying,
        }


@dataclass
class BenchResult:
    config: dict[str, Any]
    model_id: str
    prompts: list[dict[str, Any]]
    dtypes: list[DtypeResult]
    started: str
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "model_id": self.model_id, "prompts": self.prompts,
                "started": self.started, "wall_s": round(self.wall_s, 2),
                "results": [d.to_dict() for d in self.dtypes]}


def category_speedups(modes: Sequence[ModeResult], base: Optional[ModeResult],
                      categories: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per category, per mode: the median over repeats of the mode's token rate on the category's
    prompts over ``base``'s (prefill included), like ``speedup_vs_generate`` for the whole suite.

    >>> gen, ours = ModeResult("g", "greedy", False), ModeResult("o", "2,4,2", False)
    >>> gen.per_prompt = {"a": {"tokens": 8, "total_s": [2.0, 2.0]}, "b": {"tokens": 4, "total_s": [1.0, 1.0]}}
    >>> ours.per_prompt = {"a": {"tokens": 8, "total_s": [1.0, 1.0]}, "b": {"tokens": 2, "total_s": [1.0, 0.5]}}
    >>> category_speedups([gen, ours], gen, {"a": "code", "b": "math"})   # b: half the tokens
    {'code': {'g': 1.0, 'o': 2.0}, 'math': {'g': 1.0, 'o': 0.75}}
    """
    if base is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for category in dict.fromkeys(categories.values()):
        ids = [pid for pid, c in categories.items() if c == category]
        base_s = [sum(t) for t in zip(*(base.per_prompt[pid]["total_s"] for pid in ids))]
        base_tokens = sum(base.per_prompt[pid]["tokens"] for pid in ids)
        out[category] = {}
        for mode in modes:
            mode_s = [sum(t) for t in zip(*(mode.per_prompt[pid]["total_s"] for pid in ids))]
            tokens = sum(mode.per_prompt[pid]["tokens"] for pid in ids)
            pairs = [(tokens / m) / (base_tokens / b) for b, m in zip(base_s, mode_s)
                     if m > 0 and b > 0 and base_tokens]
            out[category][mode.mode] = round(statistics.median(pairs), 4) if pairs else 0.0
    return out


def max_spec(specs: Sequence[LookaheadSpec]) -> LookaheadSpec:
    """The field-wise maximum: the smallest engine spec admitting all of ``specs``.

    >>> str(max_spec([LookaheadSpec(4, 2, 4), LookaheadSpec(7, 7, 1)]))
    '7,7,4'
    """
    w = max(s.window_size for s in specs)
    n = max(s.ngram_size for s in specs)
    g = max(s.verification_set_size for s in specs)
    if n == 1:
        return LookaheadSpec(1, 1, 0)
    return LookaheadSpec(w, n, g)


def run_engine_bench(config: BenchConfig, progress: Callable[[str], None] = lambda _: None) -> BenchResult:
    """Run the benchmark (see the module docstring); ``progress`` gets one line per finished run."""
    import trtlade.reference.engine  # noqa: F401 - torch and the engine imported before any load is timed
    from trtlade.reference.prompt_suite import load_suite

    suite = load_suite(config.prompts)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    t_start = time.perf_counter()
    results: list[DtypeResult] = []
    model_id = ""
    prompt_info: list[dict[str, Any]] = []
    for dtype in config.dtypes:
        outcome, model_id, prompt_info = _bench_dtype(config, dtype, suite, progress)
        results.append(outcome)
    return BenchResult(config=_config_dict(config), model_id=model_id, prompts=prompt_info, dtypes=results,
                       started=started, wall_s=time.perf_counter() - t_start)


def _bench_dtype(config: BenchConfig, dtype: str, suite: Any,
                 progress: Callable[[str], None]) -> tuple[DtypeResult, str, list[dict[str, Any]]]:
    """One dtype's engine loaded and measured in every mode: its result, the model's id, the prompts' facts."""
    from trtlade.reference.floor import Floor, weight_bytes

    t0 = time.perf_counter()
    engine = _load_engine(config, dtype)
    load_s = time.perf_counter() - t0
    prompts = [(p.id, p.encode(engine.tokenizer)) for p in suite.prompts]
    categories = {p.id: p.category for p in suite.prompts}
    prompt_info = [{"id": pid, "category": categories[pid], "tokens": len(ids)} for pid, ids in prompts]
    modes, baseline = _modes(config, engine)
    outcome = DtypeResult(dtype=engine.dtype, engine_spec=str(engine.spec),
                          default_request_spec=str(engine.default_request_spec), threads=engine.threads,
                          packed_linears=engine.runner.packed_linears, load_s=load_s, modes=modes,
                          linear_kernel=engine.stats["linear_kernel"], categories=categories,
                          exactness=engine.exactness, weight_pages=engine.stats["weight_pages"])
    on_cpu = config.device == "cpu"  # the floor, the roofline and the profile measure the CPU
    floor = Floor(weight_bytes(engine.runner), dtype=engine.dtype)
    if on_cpu:
        floor.sample()  # the bandwidth before and after the modes: the host's, in this run
    _measure(engine, prompts, modes, config, progress, dtype, baseline)
    if on_cpu:
        floor.sample()
    outcome.floor = floor.to_dict()
    outcome.step_cost = {str(k): v for k, v in engine.stats["step_cost_ms"].items()}
    if config.keying:
        outcome.keying = _keying(engine, prompts, config, progress)
    if config.profile and on_cpu:
        first = config.presets[0]
        for spec in (AUTOREGRESSIVE, engine.default_request_spec):
            settings = dataclasses.replace(engine.settings, prompt_lookup=preset_prompt_lookup(first, spec))
            outcome.profile.append(profile_steps(engine, prompts[0][1], spec, settings=settings)
                                   | {"preset": first})
    return outcome, engine.model_id, prompt_info


def _load_engine(config: BenchConfig, dtype: str) -> Any:
    """The reference engine for ``dtype``, its spec the largest the modes ask (or the config's)."""
    from trtlade.reference.engine import DEFAULT_SPEC, ReferenceEngine

    wanted = list(config.specs) + ([DEFAULT_SPEC] if config.default_mode else [])
    engine_spec = config.engine_spec or max_spec(wanted)
    return ReferenceEngine.load(config.model, spec=engine_spec, dtype=dtype, threads=config.threads,
                                request_default=DEFAULT_SPEC if engine_spec.admits(DEFAULT_SPEC) else None,
                                fast_forward=None if config.fast_forward else False,
                                invariant_attention=config.invariant_attention,
                                native_kernels=config.native_kernels, device=config.device)


def _modes(config: BenchConfig, engine: Any) -> tuple[list[ModeResult], Optional["TransformersBaseline"]]:
    """The modes to run, in order (plain decoding first), and transformers' baseline where it runs too."""
    modes = [ModeResult(config.baseline, str(AUTOREGRESSIVE), adaptive=False)]
    modes += lookahead_modes(config, engine.default_request_spec)
    if not config.baselines:
        return modes, None
    baseline = TransformersBaseline(config.model, engine.dtype, config.prompt_lookup_tokens, config.device)
    modes += [ModeResult(GENERATE, "greedy" if not config.temperature > 0 else "sampled", adaptive=False,
                         kind="transformers"),
              ModeResult(PROMPT_LOOKUP, f"prompt_lookup_num_tokens={config.prompt_lookup_tokens}",
                         adaptive=False, kind="transformers")]
    return modes, baseline


def lookahead_modes(config: BenchConfig, default_spec: LookaheadSpec) -> list[ModeResult]:
    """Per preset: the adaptive default mode (if asked) and one fixed mode per spec, named
    ``<preset> default`` and ``<preset> <W,N,G>``, with the preset's prompt-lookup tokens.

    >>> config = BenchConfig(specs=(LookaheadSpec(2, 4, 2),), presets=("fast", "trtllm"))
    >>> modes = lookahead_modes(config, LookaheadSpec(2, 3, 2))
    >>> [(m.mode, m.adaptive, m.prompt_lookup) for m in modes]
    [('fast default', True, 4), ('fast 2,4,2', False, 4), ('trtllm default', True, 0), ('trtllm 2,4,2', False, 0)]
    """
    modes = []
    for preset in config.presets:
        if config.default_mode:
            modes.append(ModeResult(f"{preset} default", str(default_spec), adaptive=True, preset=preset,
                                    prompt_lookup=preset_prompt_lookup(preset, default_spec)))
        modes += [ModeResult(f"{preset} {s}", str(s), adaptive=False, preset=preset,
                             prompt_lookup=preset_prompt_lookup(preset, s))
                  for s in config.specs if not s.is_autoregressive]
    return modes


class TransformersBaseline:
    """transformers' own ``generate`` on a separately loaded copy of the model (same folder, dtype
    and threads): greedy, and prompt lookup decoding. What a user would run without trtlade."""

    def __init__(self, model: Optional[str], dtype: str, lookup_tokens: int, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from trtlade.reference.embedded import embedded_model_dir, model_folder

        folder = str(model_folder(model)) if model else str(embedded_model_dir())
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), local_files_only=True)
        self.model.to(device)
        self.model.eval()
        self.device = device
        self.lookup_tokens = lookup_tokens

    def run(self, ids: Sequence[int], max_tokens: int, lookup: bool, temperature: float = 0.0, top_p: float = 1.0,
            seed: int = 0) -> tuple[list[int], float]:
        """New tokens and the whole time (prefill included) of one generate: greedy, or sampled
        (``temperature > 0``) from ``torch.manual_seed(seed)``."""
        import torch

        inputs = torch.tensor([list(ids)], device=self.device)
        extra: dict[str, Any] = {"prompt_lookup_num_tokens": self.lookup_tokens} if lookup else {}
        if temperature > 0:
            torch.manual_seed(seed)
            extra.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            extra["do_sample"] = False
        eos = self.model.generation_config.eos_token_id
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model.generate(inputs, attention_mask=torch.ones_like(inputs),
                                      max_new_tokens=max_tokens, pad_token_id=eos[0] if isinstance(eos, list) else eos,
                                      **extra)
            seconds = time.perf_counter() - t0
        return out[0, len(ids):].tolist(), seconds


def _run_mode(engine: Any, baseline: Optional[TransformersBaseline], mode: ModeResult, ids: list[int],
              max_tokens: int, sampling: Optional[dict[str, Any]] = None) -> tuple[list[int], float, float, Any]:
    """(tokens, decode seconds, prefill seconds, stats or None) of one prompt in one mode;
    ``sampling``: temperature, top_p and seed (none: greedy)."""
    sampling = sampling or {}
    if mode.kind == "transformers":
        assert baseline is not None
        tokens, seconds = baseline.run(ids, max_tokens, lookup=mode.mode == PROMPT_LOOKUP, **sampling)
        return tokens, seconds, 0.0, None
    spec = None if mode.adaptive else LookaheadSpec.parse(mode.spec)
    settings = dataclasses.replace(engine.settings, adaptive=mode.adaptive, prompt_lookup=mode.prompt_lookup)
    result = engine.generate(ids, max_tokens=max_tokens, lookahead=spec, settings=settings, **sampling)
    return result.tokens, result.stats.decode_s, result.stats.prefill_s, result


def _measure(engine: Any, prompts: list[tuple[str, list[int]]], modes: list[ModeResult], config: BenchConfig,
             progress: Callable[[str], None], dtype: str, baseline: Optional[TransformersBaseline] = None) -> None:
    outputs: dict[tuple[str, str], list[int]] = {}
    # warm-up: one short greedy run per prompt (first calls of the kernels are slow)
    for _, ids in prompts[:2]:
        engine.generate(ids, max_tokens=8, lookahead=AUTOREGRESSIVE)
        if baseline is not None:
            baseline.run(ids, 8, lookup=False)
            baseline.run(ids, 8, lookup=True)
    for rep in range(config.repeats):
        totals = {m.mode: [0.0, 0.0] for m in modes}
        for p_index, (pid, ids) in enumerate(prompts):
            shift = (rep + p_index) % len(modes)
            order = modes[shift:] + modes[:shift]
            for mode in order:
                tokens, decode_s, prefill_s, result = _run_mode(engine, baseline, mode, ids, config.max_tokens,
                                                                config.sampling(p_index))
                totals[mode.mode][0] += decode_s
                totals[mode.mode][1] += prefill_s
                if rep == 0:
                    st = result.stats if result is not None else None
                    mode.tokens += len(tokens)
                    mode.steps += st.steps if st is not None else 0
                    mode.rows += sum(st.rows_per_step) if st is not None else 0
                    outputs[(mode.mode, pid)] = list(tokens)
                    mode.per_prompt[pid] = {"tokens": len(tokens)}
                    if st is not None:
                        mode.per_prompt[pid].update(steps=st.steps, tokens_per_step=round(st.tokens_per_step, 3),
                                                    finish_reason=result.finish_reason)
                mode.per_prompt[pid].setdefault("total_s", []).append(round(decode_s + prefill_s, 4))
        for mode in modes:
            mode.decode_s.append(totals[mode.mode][0])
            mode.prefill_s.append(totals[mode.mode][1])
            mode.total_s.append(totals[mode.mode][0] + totals[mode.mode][1])
        base = next((m for m in modes if m.mode == GENERATE), modes[0])
        progress(f"{dtype} repeat {rep + 1}/{config.repeats}: " + ", ".join(
            f"{m.mode} {m.tokens / m.total_s[-1]:.1f} tok/s "
            f"({(m.tokens / m.total_s[-1]) / (base.tokens / base.total_s[-1]):.2f}x)"
            for m in modes))
    # identity vs greedy: repeat 0's tokens (every repeat gives the same tokens)
    for mode in modes:
        mode.prompts = len(prompts)
        for pid, _ in prompts:
            ours, ref = outputs[(mode.mode, pid)], outputs[(modes[0].mode, pid)]
            same = ours == ref
            mode.identical_prompts += int(same)
            mode.per_prompt[pid]["identical"] = same
            prefix = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
            mode.identical_prefix_tokens += prefix if not same else len(ref)
            mode.greedy_tokens += len(ref)
            mode.per_prompt[pid]["first_difference"] = None if same else prefix


def _keying(engine: Any, prompts: list[tuple[str, list[int]]], config: BenchConfig,
            progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Tokens per step with TensorRT-LLM's keying vs the corrected keying, per spec (adaptive off)."""
    rows = []
    for spec in config.specs:
        if spec.is_autoregressive:
            continue
        counts = {}
        for corrected in (False, True):
            settings = dataclasses.replace(engine.settings, adaptive=False, corrected_keying=corrected,
                                           prompt_lookup=0)  # the keying of TensorRT-LLM's algorithm itself
            tokens = steps = 0
            for _, ids in prompts:
                st = engine.generate(ids, max_tokens=config.max_tokens, lookahead=spec, settings=settings).stats
                tokens += st.tokens
                steps += st.steps
            counts[corrected] = tokens / steps if steps else 0.0
        rows.append({"spec": str(spec), "tokens_per_step_trtllm_keying": round(counts[False], 4),
                     "tokens_per_step_corrected_keying": round(counts[True], 4),
                     "change": round(counts[True] / counts[False] - 1.0, 4) if counts[False] else 0.0})
        progress(f"keying {spec}: TensorRT-LLM {counts[False]:.3f} vs corrected {counts[True]:.3f} tokens/step")
    return rows


def _config_dict(config: BenchConfig) -> dict[str, Any]:
    data = asdict(config)
    data["specs"] = [str(s) for s in config.specs]
    data["engine_spec"] = str(config.engine_spec) if config.engine_spec else None
    return data


# ----------------------------------------------------------------------------------------- profile
#: aten / mkldnn op name -> category of the per-step profile
_CATEGORIES = (
    ("linear (GEMM)", ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::bmm_linear", "trtlade.linear")),
    ("attention", ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
                   "aten::bmm", "aten::_softmax", "aten::softmax", "aten::baddbmm", "trtlade.row_attention")),
    ("KV cache writes and compaction", ("aten::copy_", "aten::index", "aten::index_put_", "aten::masked_fill_")),
    ("norms, rotary, activations", ("aten::_fused_rms_norm", "aten::mul", "aten::add", "aten::add_", "aten::mul_",
                                    "aten::pow", "aten::mean",
                                    "aten::rsqrt", "aten::silu", "aten::neg", "aten::cat", "aten::div_", "aten::sum",
                                    "aten::cos", "aten::sin", "aten::to", "aten::_to_copy", "aten::embedding",
                                    "aten::index_select", "trtlade.layer_ops")),
    ("argmax", ("aten::argmax", "trtlade.argmax")),
)


def profile_steps(engine: Any, prompt_ids: Sequence[int], spec: LookaheadSpec, steps: int = 24,
                  settings: Any = None) -> dict[str, Any]:
    """Where the time of a decoding step goes: op self-time by category (torch.profiler), the
    engine's own Python (algorithm, text) and the rest (Python and dispatch in transformers and
    torch): ``step_ms``, measured without the profiler, minus the other parts. Milliseconds per
    step, over ``steps`` decoding steps after the prefill. The op times come from a profiled run,
    so they include a little profiler overhead and the rest is, if anything, underestimated."""
    fixed = dataclasses.replace(settings or engine.settings, adaptive=False)
    plain = engine.generate(prompt_ids, max_tokens=steps, lookahead=spec, ignore_eos=True, settings=fixed)
    stream = engine.stream(prompt_ids, max_tokens=steps, lookahead=spec, ignore_eos=True, settings=fixed)
    next(stream)  # the prefill
    ms, profiled_ms, decode_steps = _profiled_parts(engine, lambda: sum(1 for _ in stream))
    plain_steps = max(1, plain.stats.steps - 1)
    step_ms = 1000.0 * plain.stats.decode_s / plain_steps
    # the profiler slows every op call down; the rest is taken against the unprofiled step time
    ms["Python and dispatch (rest)"] = max(0.0, step_ms - sum(ms.values()))
    return {
        "spec": str(spec),
        "steps": decode_steps,
        "rows_per_step": round(sum(plain.stats.rows_per_step[1:]) / plain_steps, 2),
        "step_ms": round(step_ms, 2),
        "profiled_step_ms": round(profiled_ms, 2),
        "breakdown_ms": {k: round(v, 2) for k, v in ms.items()},
    }


def profile_batch_steps(engine: Any, prompts: Sequence[Sequence[int]], spec: LookaheadSpec,
                        steps: int = 24) -> dict[str, Any]:
    """:func:`profile_steps` for ``len(prompts)`` sequences decoding together (in-flight batching, one
    forward pass per step): each step's parts in ms, over ``steps`` steps after the prefill and one
    step, every sequence running to the end (``ignore_eos``)."""
    from trtlade.contract.protocol import GenerationRequest

    def batch():
        b = engine.new_batch(max_batch_size=len(prompts))
        for ids in prompts:
            b.add(GenerationRequest(prompt_ids=tuple(ids), max_tokens=steps + 2, lookahead=spec, ignore_eos=True))
        b.step()  # the prefill
        b.step()
        return b

    rows: list[int] = []

    def run(b) -> int:
        n = 0
        while len(b) and n < steps:
            b.step()
            rows.append(b.last.rows)
            n += 1
        return n

    plain = batch()
    t0 = time.perf_counter()
    n = run(plain)
    step_ms = 1000.0 * (time.perf_counter() - t0) / max(1, n)
    rows_per_step = round(sum(rows) / max(1, len(rows)), 2)
    profiled = batch()
    ms, profiled_ms, _ = _profiled_parts(engine, lambda: run(profiled))
    ms["Python and dispatch (rest)"] = max(0.0, step_ms - sum(ms.values()))
    return {"spec": str(spec), "sequences": len(prompts), "steps": n, "rows_per_step": rows_per_step,
            "step_ms": round(step_ms, 2), "profiled_step_ms": round(profiled_ms, 2),
            "breakdown_ms": {k: round(v, 2) for k, v in ms.items()}}


def _profiled_parts(engine: Any, decode: Any) -> tuple[dict[str, float], float, int]:
    """Run ``decode()`` (returns the steps it ran) under torch.profiler: ms per step by category of
    op, the native body's own parts, the engine's algorithm and text work; the profiled step's ms;
    the steps."""
    from torch.profiler import ProfilerActivity, profile

    from trtlade.reference.batching import ALGORITHM_LABEL, TEXT_LABEL

    fast = getattr(getattr(engine, "runner", None), "fast", None)
    native = getattr(fast, "native", None)
    if native is not None:
        native.timings[:] = 0.0
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        decode_steps = decode()
    wall = time.perf_counter() - t0
    n = max(1, decode_steps)
    by_name = {e.key: e for e in prof.key_averages()}
    ms = {}
    for category, names in _CATEGORIES:
        ms[category] = sum(by_name[k].self_cpu_time_total for k in names if k in by_name) / 1000.0 / n
    known = {k for _, names in _CATEGORIES for k in names}
    other_ops = sum(e.self_cpu_time_total for k, e in by_name.items()
                    if (k.startswith("aten::") or k.startswith("mkldnn::")) and k not in known)
    ms["other torch ops"] = other_ops / 1000.0 / n
    if native is not None:  # the native body is one call: its own timers split it
        for category, seconds in zip(("linear (GEMM)", "attention", "norms, rotary, activations"), native.timings):
            ms[category] += float(seconds) * 1000.0 / n
    for label, key in (("lookahead algorithm (Python)", ALGORITHM_LABEL), ("detokenize + stops", TEXT_LABEL)):
        ms[label] = by_name[key].cpu_time_total / 1000.0 / n if key in by_name else 0.0
    return ms, 1000.0 * wall / n, decode_steps

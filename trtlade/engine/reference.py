"""The PyTorch reference Lookahead engine: any Hugging Face causal LM, token-identical to greedy.

::

    from trtlade import ReferenceEngine

    engine = ReferenceEngine.load()                     # embedded SmolLM2-135M-Instruct, fp32, CPU
    ids = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "List the planets."}], add_generation_prompt=True)
    result = engine.generate(ids, max_tokens=64, lookahead=(2, 3, 2))   # None: the engine default (2,4,2)
    result.text, result.stats.steps, result.stats.tokens_per_step
    for chunk in engine.stream(ids, max_tokens=64):     # one chunk per engine step
        print(chunk.text, end="")

One sequence at a time (not thread-safe; a server serialises calls). Per request, the spec
``lookahead`` (w, n, g) must be admitted by the engine's (W, N, G) (``w <= W, n <= N, g <= G``);
``None`` runs the engine's default request spec, ``(1,1,0)`` plain greedy decoding.

Steps and stats: the prefill is the first step (it emits one token), every later step is one
forward pass over the golden token and the drafts, emitting 1..N tokens. ``stats.steps`` counts all
of them, ``stats.tokens == len(result.tokens)``, so plain greedy decoding has exactly 1.0 tokens per
step. ``rows_per_step`` records the rows each step computed (1 for the prefill step).

Sampling: ``temperature > 0`` runs plain (seeded) sampling with lookahead off for that request
(``stats.spec`` is (1,1,0)); ``temperature == 0`` is greedy and ignores ``seed`` and ``top_p``.

Stops: EOS (unless ``ignore_eos``) and ``stop_token_ids`` end the generation with that token kept
in ``tokens`` (its text is not shown); a stop string ends it at the token that completes the
string, with the text cut before the stop string. ``max_tokens`` ends it with ``"length"``. All
three can fall inside an accepted lookahead run: the run is cut there, nothing past it is emitted,
and nothing past it enters the n-gram pool or the KV cache.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP (see model_runner)

import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Iterable, Iterator, Optional, Sequence  # noqa: E402

import torch  # noqa: E402
from torch.profiler import record_function  # noqa: E402

from trtlade.engine.adaptive import CostTable, SpecController  # noqa: E402
from trtlade.engine.model_runner import (  # noqa: E402
    ModelRunner,
    configure_threads,
    dtype_name,
    resolve_dtype,
)
from trtlade.engine.protocol import GenerationRequest, GenerationResult, GenerationStats, StepChunk  # noqa: E402
from trtlade.engine.text import TextTracker  # noqa: E402
from trtlade.lookahead.algorithm import LookaheadAlgorithm  # noqa: E402
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec  # noqa: E402

__all__ = [
    "DEFAULT_SPEC",
    "ReferenceEngine",
    "LookaheadNotAdmitted",
    "RequestError",
    "ModelLoadError",
]

#: The engine spec when none is given, chosen for CPUs: at most 12 rows per step (about 10 after
#: the trie merge), 1.76 tokens per step on the bundled suite with SmolLM2-135M, ~1.4x greedy in
#: fp32 on 2 cores (see docs/reference-engine.md, "How to choose (W,N,G)").
DEFAULT_SPEC = LookaheadSpec(2, 4, 2)


class RequestError(ValueError):
    """A request the engine refuses: ``field`` names the offending field, ``limit`` the bound."""

    def __init__(self, message: str, *, field: str, limit: Any = None, hint: str = "") -> None:
        super().__init__(message + (f" (hint: {hint})" if hint else ""))
        self.field = field
        self.limit = limit
        self.hint = hint


class LookaheadNotAdmitted(RequestError):
    """The request's (w, n, g) exceeds the engine's (W, N, G) in ``field`` (``requested > limit``)."""

    def __init__(self, requested: LookaheadSpec, engine_spec: LookaheadSpec) -> None:
        excess = engine_spec.excess(requested)
        field, value, limit = excess[0]
        parts = ", ".join(f"{f}={v} > {lim}" for f, v, lim in excess)
        super().__init__(
            f"lookahead ({requested}) is not admitted by the engine's ({engine_spec}): {parts}",
            field=f"lookahead.{field}", limit=limit,
            hint=f"use w <= {engine_spec.window_size}, n <= {engine_spec.ngram_size}, "
                 f"g <= {engine_spec.verification_set_size}, or (1,1,0) to turn lookahead off")
        self.requested = requested
        self.engine_spec = engine_spec
        self.excess = excess
        self.value = value


class ModelLoadError(ValueError):
    """The model folder cannot be loaded (missing, not a HF folder, unsupported architecture)."""


@dataclass
class _Output:
    """Mutable state of one generation's output."""

    tokens: list[int]
    tracker: TextTracker
    stats: GenerationStats
    finish_reason: Optional[str] = None


class ReferenceEngine:
    """Greedy Lookahead decoding of one sequence at a time on a Hugging Face causal LM.

    ``spec``: the engine's (W, N, G), the largest per-request spec it admits.
    ``request_default``: spec of requests that give none (default: ``spec``).
    ``corrected_keying`` / ``full_guess_set``: the algorithm's departures from TensorRT-LLM (key
    column 0's n-gram by g; verify G candidates instead of min(W, G)); off by default, so that
    tokens per step predict the TensorRT-LLM engine.
    ``adaptive``: per request, shrink (w, n, g) towards (1,1,0) while the measured acceptance
    says drafts do not pay, and probe back up later (:mod:`trtlade.engine.adaptive`); always
    lossless. ``pack_linears``: oneDNN-packed linear layers on the CPU (``None`` = when
    available). ``tree_attention``: multi-row steps of sdpa models use
    :func:`~trtlade.engine.model_runner.tree_attention` (``None`` = on the CPU). ``calibrate``:
    time forwards of 1..K rows at start-up for the adaptive cost model (:meth:`calibrate`); without
    it every draft row is assumed free and the adaptive shrink never triggers.
    """

    sampling_mode = "sample-without-lookahead"

    def __init__(
        self, model: Any, tokenizer: Any, spec: Any = DEFAULT_SPEC, *, request_default: Any = None,
        seed: int = 0, corrected_keying: bool = False, full_guess_set: bool = False,
        threads: Optional[int] = None, model_id: Optional[str] = None, adaptive: bool = True, pack_linears: Optional[bool] = None,
        tree_attention: Optional[bool] = None, calibrate: bool = True,
    ) -> None:
        self.threads = configure_threads(threads)
        self.spec = LookaheadSpec.parse(spec)
        default = self.spec if request_default is None else LookaheadSpec.parse(request_default)
        if not self.spec.admits(default):
            raise LookaheadNotAdmitted(default, self.spec)
        self.default_request_spec = default
        self.tokenizer = tokenizer
        self.seed = int(seed)
        self.corrected_keying = bool(corrected_keying)
        self.full_guess_set = bool(full_guess_set)
        self.adaptive = bool(adaptive)
        self.runner = ModelRunner(model, pack_linears=pack_linears, tree_attention=tree_attention)
        self.model = model
        self.dtype = dtype_name(self.runner.dtype)
        self.model_id = model_id or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        self.max_seq_len = _max_seq_len(model.config, tokenizer)
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        self.vocab_size = int(model.get_output_embeddings().out_features
                              if hasattr(model.get_output_embeddings(), "out_features")
                              else model.config.vocab_size)
        self.cost = CostTable()
        #: (step, spec) each time the adaptive controller changed the spec in the last request
        self.last_spec_changes: list[tuple[int, str]] = []
        self._active: Optional[object] = None
        if calibrate:
            self.calibrate()

    # ------------------------------------------------------------------------------- loading
    @classmethod
    def load(
        cls, model: Optional[str | os.PathLike] = None, spec: Any = DEFAULT_SPEC, dtype: str = "float32", *,
        request_default: Any = None, threads: Optional[int] = None, seed: int = 0,
        corrected_keying: bool = False, full_guess_set: bool = False, device: str = "cpu", adaptive: bool = True,
        pack_linears: Optional[bool] = None, tree_attention: Optional[bool] = None, calibrate: bool = True,
    ) -> "ReferenceEngine":
        """Load a Hugging Face model folder (``None``: the embedded SmolLM2-135M-Instruct, converted
        once into the user cache) in ``dtype`` on ``device``. Never downloads anything."""
        torch_dtype = resolve_dtype(dtype)
        spec = LookaheadSpec.parse(spec)
        configure_threads(threads)
        if model is None:
            from trtlade.engine.embedded import EMBEDDED_MODEL_NAME, embedded_model_dir

            folder, model_id = embedded_model_dir(), EMBEDDED_MODEL_NAME
        else:
            folder = Path(model).expanduser()
            model_id = folder.name
        hf_model, tokenizer = load_hf_model(folder, torch_dtype, device)
        return cls(hf_model, tokenizer, spec, request_default=request_default, seed=seed,
                   corrected_keying=corrected_keying, full_guess_set=full_guess_set, threads=threads,
                   model_id=model_id, adaptive=adaptive, pack_linears=pack_linears, tree_attention=tree_attention,
                   calibrate=calibrate)

    # ------------------------------------------------------------------------------- public API
    def generate(self, prompt_ids: Sequence[int], max_tokens: int = 128, lookahead: Any = None,
                 stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
                 temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
                 top_p: float = 1.0) -> GenerationResult:
        """Generate up to ``max_tokens`` tokens after ``prompt_ids``; see the module docstring."""
        return self.generate_request(self.make_request(
            prompt_ids, max_tokens, lookahead, stop, stop_token_ids, ignore_eos, temperature, seed,
            min_tokens=min_tokens, top_p=top_p))

    def stream(self, prompt_ids: Sequence[int], max_tokens: int = 128, lookahead: Any = None,
               stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
               temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
               top_p: float = 1.0) -> Iterator[StepChunk]:
        """Like :meth:`generate`, one :class:`StepChunk` per engine step; the last has
        ``finish_reason`` and ``stats``. ``close()`` the iterator to stop early."""
        return self.stream_request(self.make_request(
            prompt_ids, max_tokens, lookahead, stop, stop_token_ids, ignore_eos, temperature, seed,
            min_tokens=min_tokens, top_p=top_p))

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int = 128, **kwargs: Any) -> GenerationResult:
        """The engine's own plain greedy loop: :meth:`generate` with lookahead (1,1,0)."""
        return self.generate(prompt_ids, max_tokens, lookahead=AUTOREGRESSIVE, **kwargs)

    def make_request(self, prompt_ids: Sequence[int], max_tokens: int, lookahead: Any = None,
                     stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
                     temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
                     top_p: float = 1.0) -> GenerationRequest:
        if isinstance(stop, str):
            stop = (stop,)
        return GenerationRequest(
            prompt_ids=_token_ids(prompt_ids), max_tokens=max_tokens,
            lookahead=None if lookahead is None else LookaheadSpec.parse(lookahead),
            stop=tuple(stop), stop_token_ids=tuple(int(t) for t in stop_token_ids), ignore_eos=bool(ignore_eos),
            min_tokens=min_tokens, temperature=temperature, top_p=top_p, seed=seed)

    def generate_request(self, request: GenerationRequest) -> GenerationResult:
        tokens: list[int] = []
        texts: list[str] = []
        last: Optional[StepChunk] = None
        for chunk in self.stream_request(request):
            tokens.extend(chunk.tokens)
            texts.append(chunk.text)
            last = chunk
        assert last is not None and last.finish_reason is not None and last.stats is not None
        return GenerationResult(tokens=tokens, text="".join(texts), finish_reason=last.finish_reason,
                                stats=last.stats)

    def stream_request(self, request: GenerationRequest) -> Iterator[StepChunk]:
        """Validate ``request`` now (raising :class:`RequestError` / :class:`LookaheadNotAdmitted`),
        then return the step iterator."""
        spec = self.validate(request)
        return self._steps(request, spec)

    def validate(self, request: GenerationRequest) -> LookaheadSpec:
        """Check a request against this engine; return the spec it runs with."""
        prompt = request.prompt_ids
        if len(prompt) == 0:
            raise RequestError("prompt_ids is empty: give at least one token", field="prompt_ids")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise RequestError(f"prompt_ids holds token ids outside the vocabulary [0, {self.vocab_size}): "
                               f"{bad[:5]}", field="prompt_ids", limit=self.vocab_size - 1)
        if isinstance(request.max_tokens, bool) or not isinstance(request.max_tokens, int) or request.max_tokens < 1:
            raise RequestError(f"max_tokens must be an integer >= 1, got {request.max_tokens!r}", field="max_tokens",
                               limit=1)
        room = self.max_seq_len - len(prompt)
        if request.max_tokens > room:
            raise RequestError(
                f"the prompt ({len(prompt)} tokens) + max_tokens ({request.max_tokens}) exceeds the model's "
                f"max_seq_len {self.max_seq_len}", field="max_tokens", limit=max(room, 0),
                hint=f"use max_tokens <= {max(room, 0)} or a shorter prompt")
        if not 0 <= request.min_tokens <= request.max_tokens:
            raise RequestError(f"min_tokens must be between 0 and max_tokens ({request.max_tokens}), "
                               f"got {request.min_tokens}", field="min_tokens", limit=request.max_tokens)
        if not request.temperature >= 0:
            raise RequestError(f"temperature must be >= 0, got {request.temperature}", field="temperature", limit=0)
        if not 0 < request.top_p <= 1:
            raise RequestError(f"top_p must be in (0, 1], got {request.top_p}", field="top_p", limit=1)
        spec = self.default_request_spec if request.lookahead is None else LookaheadSpec.parse(request.lookahead)
        if not self.spec.admits(spec):
            raise LookaheadNotAdmitted(spec, self.spec)
        return AUTOREGRESSIVE if request.temperature > 0 else spec

    # ------------------------------------------------------------------------------- calibration
    def calibrate(self, repeats: int = 3, context: int = 128, max_rows: int = 64, warmup: int = 2) -> dict[int, float]:
        """Time forwards of 1, 2, 4, ... rows (up to the engine spec's width, at most ``max_rows``;
        wider steps are extrapolated) after a ``context``-token prefix, in interleaved rounds; the
        fastest of ``repeats`` rounds per row count becomes the adaptive cost model (timing noise on a
        shared machine only ever adds time), after ``warmup`` discarded rounds. Returns seconds per
        row count."""
        top = min(self.spec.decoding_tokens, max_rows)
        rows_list = [1]
        while rows_list[-1] < top:
            rows_list.append(min(2 * rows_list[-1], top))
        context = max(1, min(context, self.max_seq_len - top - 1))
        prompt = [(7 * i + 3) % self.vocab_size for i in range(context)]
        runner = self.runner
        runner.prefill(prompt)
        base = runner.length
        best: dict[int, float] = {}
        for rep in range(warmup + repeats):
            for rows in rows_list:
                tokens = [prompt[i % len(prompt)] for i in range(rows)]
                t0 = time.perf_counter()
                runner.step(tokens, list(range(rows)), _chain_mask(rows) if rows > 1 else None, list(range(rows)))
                elapsed = time.perf_counter() - t0
                runner.truncate(base)
                if rep >= warmup:  # the first rounds warm the kernels and the buffers up
                    best[rows] = min(elapsed, best.get(rows, elapsed))
        runner.reset()
        self.cost = CostTable()
        for rows, seconds in best.items():
            self.cost.add(rows, seconds)
        return best

    # ------------------------------------------------------------------------------- decoding
    def _steps(self, request: GenerationRequest, spec: LookaheadSpec) -> Iterator[StepChunk]:
        token = object()
        self._active = token
        prompt = list(request.prompt_ids)
        stats = GenerationStats(spec=spec, prompt_tokens=len(prompt))
        out = _Output(tokens=[], tracker=TextTracker(self.tokenizer, request.stop, context=prompt), stats=stats)
        stop_ids = frozenset(request.stop_token_ids) | (frozenset() if request.ignore_eos
                                                        else frozenset(self.eos_token_ids))
        sampler = _Sampler(request, self.seed) if request.temperature > 0 else None
        runner = self.runner
        runner.reset(reserve=len(prompt) + request.max_tokens + spec.decoding_tokens + 1)

        t0 = time.perf_counter()
        logits = runner.prefill(prompt)
        first = self._choose(logits, out, request, stop_ids, sampler)
        stats.prefill_s = time.perf_counter() - t0
        chunk = self._emit([first], 1, out, request, stop_ids)
        yield chunk
        if chunk.finish_reason is not None:
            return

        # Phase 1: one row per step while min_tokens forbids stopping, or when sampling.
        while sampler is not None or len(out.tokens) < request.min_tokens:
            self._check_active(token)
            t0 = time.perf_counter()
            logits = runner.step_logits([out.tokens[-1]], [0], None, [0])[0]
            runner.keep([0])
            chosen = self._choose(logits, out, request, stop_ids, sampler)
            stats.decode_s += time.perf_counter() - t0
            chunk = self._emit([chosen], 1, out, request, stop_ids)
            yield chunk
            if chunk.finish_reason is not None:
                return

        # Phase 2: greedy lookahead (the spec may shrink and grow back; every spec is lossless).
        controller = SpecController(spec, self.cost) if self.adaptive and not spec.is_autoregressive else None
        self.last_spec_changes = controller.switches if controller is not None else []
        algo = self._algorithm(spec, prompt + out.tokens[:-1], out.tokens[-1])
        while True:
            self._check_active(token)
            t0 = time.perf_counter()
            with record_function("trtlade.algorithm"):
                batch = algo.prepare()
                rows = batch.num_rows
                mask = batch.mask_array() if rows > 1 else None
            argmax = runner.step(batch.tokens, batch.positions, mask, batch.logit_rows)
            with record_function("trtlade.algorithm"):
                verification = algo.verify(batch.expand_argmax(argmax))
            with record_function("trtlade.text"):
                chunk = self._emit(verification.tokens, rows, out, request, stop_ids)
            count = len(chunk.tokens)  # cut at EOS / stop id / stop string / budget: nothing past it
            with record_function("trtlade.kv_keep"):
                runner.keep(verification.kept_rows[:count])
            with record_function("trtlade.algorithm"):
                algo.commit(count)
            stats.decode_s += time.perf_counter() - t0
            yield chunk
            if chunk.finish_reason is not None:
                return
            if controller is not None and controller.observe(count, rows):
                algo = self._algorithm(controller.spec, prompt + out.tokens[:-1], out.tokens[-1])

    def _check_active(self, token: object) -> None:
        if self._active is not token:
            raise RuntimeError("this generation was superseded by a newer one on the same engine "
                               "(the engine runs one sequence at a time)")

    def _algorithm(self, spec: LookaheadSpec, context: list[int], golden: int) -> LookaheadAlgorithm:
        algo = LookaheadAlgorithm(spec, eos_token_ids=self.eos_token_ids, seed=self.seed,
                                  corrected_keying=self.corrected_keying, full_guess_set=self.full_guess_set)
        algo.setup(context, golden)
        return algo

    def _choose(self, logits: torch.Tensor, out: _Output, request: GenerationRequest,
                stop_ids: frozenset[int], sampler: Optional["_Sampler"]) -> int:
        """Next token from one row of logits: argmax, or a sample; stop ids suppressed before min_tokens."""
        if len(out.tokens) < request.min_tokens and stop_ids:
            logits = logits.clone()
            logits[list(stop_ids)] = float("-inf")
        if sampler is not None:
            return sampler.sample(logits)
        return int(logits.argmax())

    def _emit(self, tokens: Sequence[int], rows: int, out: _Output, request: GenerationRequest,
              stop_ids: frozenset[int]) -> StepChunk:
        """Append a step's tokens to the output, stopping at EOS / stop ids / stop strings / budget."""
        texts: list[str] = []
        kept: list[int] = []
        finish: Optional[str] = None
        for tok in tokens:
            kept.append(tok)
            out.tokens.append(tok)
            if tok in stop_ids:
                texts.append(out.tracker.push(tok, hidden=True).text)
                finish = "stop"
                break
            pushed = out.tracker.push(tok, check_stops=len(out.tokens) >= request.min_tokens)
            texts.append(pushed.text)
            if pushed.stopped:
                finish = "stop"
                break
            if len(out.tokens) >= request.max_tokens:
                finish = "length"
                break
        if finish is not None:
            texts.append(out.tracker.finish())
        stats = out.stats
        stats.steps += 1
        stats.tokens += len(kept)
        stats.tokens_per_step_hist[len(kept)] = stats.tokens_per_step_hist.get(len(kept), 0) + 1
        stats.rows_per_step.append(rows)
        return StepChunk(tokens=kept, text="".join(texts), finish_reason=finish,
                         stats=stats if finish is not None else None)


# ----------------------------------------------------------------------------------------- helpers
class _Sampler:
    """Temperature / top-p sampling with its own seeded generator (``seed`` or the engine's)."""

    def __init__(self, request: GenerationRequest, engine_seed: int) -> None:
        self.temperature = float(request.temperature)
        self.top_p = float(request.top_p)
        self.generator = torch.Generator().manual_seed(engine_seed if request.seed is None else int(request.seed))

    def sample(self, logits: torch.Tensor) -> int:
        probs = torch.softmax(logits.float().cpu() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ordered, index = torch.sort(probs, descending=True)
            cumulative = torch.cumsum(ordered, dim=-1)
            drop = cumulative - ordered > self.top_p  # keep the smallest prefix reaching top_p
            ordered[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, index, ordered)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def _token_ids(prompt_ids: Any) -> tuple[int, ...]:
    """A prompt as a tuple of ints: a list/tuple of ids, a 1-row tensor or array, or what
    ``tokenizer(...)`` / ``apply_chat_template(...)`` return (a mapping with ``input_ids``)."""
    if hasattr(prompt_ids, "keys") and "input_ids" in prompt_ids.keys():
        prompt_ids = prompt_ids["input_ids"]
    if hasattr(prompt_ids, "tolist"):
        prompt_ids = prompt_ids.tolist()
    if len(prompt_ids) == 1 and isinstance(prompt_ids[0], (list, tuple)):
        prompt_ids = prompt_ids[0]  # a batch of one
    try:
        return tuple(int(t) for t in prompt_ids)
    except (TypeError, ValueError):
        raise RequestError(f"prompt_ids must be token ids (ints), got {type(prompt_ids).__name__}",
                           field="prompt_ids") from None


def _chain_mask(rows: int):
    import numpy as np

    return np.tril(np.ones((rows, rows), dtype=bool))


def _eos_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """EOS ids from the generation config, the model config and the tokenizer, in that order."""
    found: list[int] = []
    sources = [getattr(getattr(model, "generation_config", None), "eos_token_id", None),
               getattr(model.config, "eos_token_id", None),
               getattr(tokenizer, "eos_token_id", None)]
    for value in sources:
        for tok in (value if isinstance(value, (list, tuple)) else [value]):
            if tok is not None and int(tok) not in found:
                found.append(int(tok))
    return tuple(found)


def _max_seq_len(config: Any, tokenizer: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return int(value) if isinstance(value, int) and 0 < value < 10**7 else 2048


def load_hf_model(folder: Path, dtype: torch.dtype, device: str = "cpu") -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` + ``AutoTokenizer`` from a local folder (``local_files_only``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not folder.is_dir():
        raise ModelLoadError(f"model folder {folder} does not exist; give a Hugging Face model folder "
                             f"(config.json, weights, tokenizer) or omit it for the embedded default model")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load the model in {folder}: {exc}") from exc
    model.to(device)
    model.eval()
    return model, tokenizer

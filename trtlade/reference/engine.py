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

``generate`` / ``stream`` run one sequence; :meth:`ReferenceEngine.new_batch` runs many at once,
each with its own (w,n,g), in one forward pass per step (in-flight batching,
:mod:`trtlade.reference.batching`); the single-sequence calls are a batch of one, the same code.
Not thread-safe: one thread drives an engine. Per request, the spec
``lookahead`` (w, n, g) must be admitted by the engine's (W, N, G) (``w <= W, n <= N, g <= G``);
``None`` runs the engine's default request spec (under the auto policy on an adaptive engine),
``"auto"`` that spec under the auto policy always, ``(1,1,0)`` plain greedy decoding.

Steps and stats: the prefill is the first step (it emits one token), every later step is one
forward pass over the golden token and the drafts, emitting 1..N tokens. ``stats.steps`` counts all
of them, ``stats.tokens == len(result.tokens)``, so plain greedy decoding has exactly 1.0 tokens per
step. ``rows_per_step`` records the rows each step computed (1 for the prefill step).

Sampling: ``temperature > 0`` samples, with lookahead, and emits exactly the tokens plain sampling
(lookahead (1,1,0)) draws with the same ``seed``: every draw is keyed by (seed, absolute position)
and the drafts are verified by those draws (:mod:`trtlade.reference.sampling`). A sampled request
without a seed is given a random one (``stats.seed``). ``top_p``, ``top_k``, ``min_p`` and the
presence, frequency and repetition penalties warp each row; the penalties also apply at
``temperature == 0`` (the argmax of the penalised logits). Plain greedy ignores ``seed``.

Drafts: a request with ``lookahead=None`` on an adaptive engine (the default) runs the ``auto``
policy -- each step the engine decides, for the whole batch, which sequences verify their drafts
(:mod:`trtlade.reference.adaptive`); an explicit spec verifies them every step.

Stops: EOS (unless ``ignore_eos``) and ``stop_token_ids`` end the generation with that token kept
in ``tokens`` (its text is not shown); a stop string ends it at the token that completes the
string, with the text cut before the stop string. ``max_tokens`` ends it with ``"length"``. All
three can fall inside an accepted lookahead run: the run is cut there, nothing past it is emitted,
and nothing past it enters the n-gram pool or the KV cache.
"""

from __future__ import annotations

import logging
import operator
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import torch

from trtlade.errors import TrtladeError
from trtlade.reference.adaptive import AutoPolicy, CostTable, no_dearer_than_wider
from trtlade.reference.batch_runner import BatchRunner, RowBlock
from trtlade.reference.batching import Batch, DraftSettings
from trtlade.reference.kernels import check_device, configure_threads, dtype_name, resolve_dtype
from trtlade.reference.native.argmax import argmax_rows
from trtlade.contract.protocol import (MAX_TOP_LOGPROBS, SAMPLING_RANGES, CacheScope, GenerationRequest,
                                      GenerationResult, StepChunk)
from trtlade.reference.scheduler import BatchLimits
from trtlade.contract.text import eos_token_ids
from trtlade.drafting.algorithm import DEFAULT_MAX_GLOBAL_POOL_SIZE, DEFAULT_RETAINED_TOKENS
from trtlade.drafting.config import DraftConfig, DraftConfigError, speculation_param
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec, wire_param

log = logging.getLogger("trtlade.engine")

__all__ = [
    "DEFAULT_SPEC",
    "ReferenceEngine",
    "LookaheadNotAdmitted",
    "RequestError",
    "ModelLoadError",
]

#: The engine spec when none is given, chosen for CPUs: at most 12 rows per step (about 10 after
#: the trie merge), 1.76 tokens per step on the bundled suite with SmolLM2-135M, ~1.4x greedy in
#: fp32 on 2 cores (see docs/guides/reference-engine.md, "How to choose (W,N,G)").
DEFAULT_SPEC = LookaheadSpec(2, 4, 2)


class RequestError(TrtladeError, ValueError):
    """A request the engine refuses: ``field`` names the offending field, ``limit`` the bound."""

    def __init__(self, message: str, *, field: str, limit: Any = None, hint: str = "") -> None:
        super().__init__(message, hint, where=field)
        self.field = field
        self.limit = limit

    def __str__(self) -> str:  # one line: the HTTP layer sends it as the 400's message, the field as param
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


def _check_types(request: GenerationRequest) -> None:
    """The fields a step reads, of the types it reads them as: a bytes stop string or a float id would fail inside
    the step (a string given as ``stop`` would be read as one stop string per character)."""
    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if isinstance(request.stop, str) or not all(isinstance(s, str) and s for s in request.stop):
        raise RequestError(f"stop must be a list of non-empty strings, got {request.stop!r}", field="stop",
                           hint='e.g. stop=("\\n\\n",); a single string goes in a one-item list')
    if isinstance(request.stop_token_ids, (str, bytes)) or not all(whole(t) for t in request.stop_token_ids):
        raise RequestError(f"stop_token_ids must be token ids (ints), got {request.stop_token_ids!r}",
                           field="stop_token_ids")
    if not all(whole(t) for t in request.prompt_ids):
        raise RequestError("prompt_ids must be token ids (ints)", field="prompt_ids")
    for name in ("min_tokens", "logprobs", "prompt_logprobs"):
        value = getattr(request, name)
        if value is not None and not whole(value):
            raise RequestError(f"{name} must be a whole number, got {value!r}", field=name)
    if isinstance(request.ignore_eos, str) or not isinstance(request.ignore_eos, bool):
        raise RequestError(f"ignore_eos must be True or False, got {request.ignore_eos!r}", field="ignore_eos")


class LookaheadNotAdmitted(RequestError):
    """The request's (w, n, g) exceeds the engine's (W, N, G) in ``field`` (``requested > limit``)."""

    def __init__(self, requested: LookaheadSpec, engine_spec: LookaheadSpec) -> None:
        excess = engine_spec.excess(requested)
        field, value, limit = excess[0]
        parts = ", ".join(f"{f}={v} > {lim}" for f, v, lim in excess)
        super().__init__(
            f"lookahead ({requested}) is not admitted by the engine's ({engine_spec}): {parts}",
            field=wire_param(field), limit=limit,
            hint=f"use w <= {engine_spec.window_size}, n <= {engine_spec.ngram_size}, "
                 f"g <= {engine_spec.verification_set_size}, or (1,1,0) to turn lookahead off")
        self.requested = requested
        self.engine_spec = engine_spec
        self.excess = excess
        self.value = value


class ModelLoadError(TrtladeError, ValueError):
    """The model folder cannot be loaded (missing, not a HF folder, unsupported architecture)."""


#: Where bit-exact lookahead was verified (tests/test_invariance.py and the embedded model's engine-bench):
#: dtype -> the hosts. The tests check it again on every host that runs them.
TESTED_EXACT = {"float32": "CPU: AMD EPYC (AVX2; AVX-512), Intel Xeon (AVX-512, with and without AMX), 2 threads",
                "bfloat16": "CPU: AMD EPYC (AVX2; AVX-512 BF16), Intel Xeon (AVX-512 BF16, with and without AMX), "
                            "2 threads"}


class ReferenceEngine:
    """Greedy Lookahead decoding on a Hugging Face causal LM, one sequence or a batch.

    ``spec``: the engine's (W, N, G), the largest per-request spec it admits.
    ``request_default``: spec of requests that give none (default: ``spec``).
    ``corrected_keying`` / ``full_guess_set``: the algorithm's departures from TensorRT-LLM (key
    column 0's n-gram by g; verify G candidates instead of min(W, G)); off by default, so that
    tokens per step predict the TensorRT-LLM engine.
    ``prompt_lookup``: draft tokens of a prompt-lookup candidate added to each step's guesses
    (:mod:`trtlade.lookahead.prompt_lookup`; 0 = off, TensorRT-LLM's algorithm exactly).
    ``adaptive``: requests that name no spec run the ``auto`` draft policy: each step, the engine
    decides for the whole batch which sequences verify their drafts, from the measured cost of a
    row and each sequence's acceptance (:mod:`trtlade.reference.adaptive`; always lossless). A request
    with an explicit spec verifies its drafts every step unless its ``policy`` says otherwise.
    ``fast_forward``: the engine's own Llama-family forward (:mod:`trtlade.reference.fast_forward`: fused
    projections, one packed copy of the weights); ``None`` = for the families it covers, ``False`` =
    transformers' forward always. ``release_weights``: free the model's own linear weights once the
    fused copies exist, so the process holds one copy (:meth:`load` does: the engine loaded the model and
    owns it; a model passed in stays usable by its caller, at the cost of a second copy).
    ``invariant_attention``: attention computed for each row from its own keys in position order, by one
    compiled routine (:mod:`trtlade.reference.native`), so that a verification row gets the bits of a
    greedy row; with the engine's own forward (whose linear layers are row-invariant too) lookahead is
    then token-identical to greedy in bf16 as in fp32 (:attr:`bit_exact`). ``None`` (default): on
    wherever the kernel runs (the CPU, with a C compiler); ``False``: sdpa and the batched kernel.
    ``native_kernels``: the engine's own forward runs its linear layers and its whole body per step in
    compiled code (:mod:`trtlade.reference.native`: ``linear.c``, ``layer_ops.c``), near the time to read
    the weights once; ``None`` (default): where they build (AVX-512 for float32, AVX512-BF16 for
    bfloat16); ``False``: oneDNN's GEMMs and torch's ops (to compare).
    ``pack_linears``: oneDNN-packed linear layers on the CPU for transformers' forward (``None`` =
    measured per row count at load). Attention always runs through
    :func:`~trtlade.reference.batch_runner.batched_attention`. ``calibrate``:
    time forwards of 1..K rows at start-up for the auto policy's cost model (:meth:`calibrate`),
    which every decoding step then refines; without it, until steps are measured, every draft row
    is assumed free.
    ``max_draft_len``: the most draft tokens an NGram / SA request may verify per step (its
    ``speculation.max_draft_len``; default: the spec's ``max_draft_len``, the rows a Lookahead step is sized
    for). ``ngram_implementation``: how NGram requests draft (TensorRT-LLM's ``one_model`` drafter, or the
    ``host_pool`` of its 1.0-1.2 releases).
    """

    sampling_mode = "lookahead"

    def __init__(
        self, model: Any, tokenizer: Any, spec: Any = DEFAULT_SPEC, *, request_default: Any = None,
        seed: int = 0, corrected_keying: bool = False, full_guess_set: bool = False,
        threads: Optional[int] = None, model_id: Optional[str] = None, adaptive: bool = True,
        pack_linears: Optional[bool] = None,
        calibrate: bool = True, prompt_lookup: int = 0, fast_forward: Optional[bool] = None,
        release_weights: bool = False, invariant_attention: Optional[bool] = None,
        native_kernels: Optional[bool] = None, max_draft_len: Optional[int] = None,
        ngram_implementation: str = "one_model", max_global_pool_size: int = DEFAULT_MAX_GLOBAL_POOL_SIZE,
        draft_retained_tokens: int = DEFAULT_RETAINED_TOKENS,
    ) -> None:
        self.threads = configure_threads(threads)
        self.spec = LookaheadSpec.parse(spec)
        self.max_draft_len = self.spec.max_draft_len if max_draft_len is None else int(max_draft_len)
        if self.max_draft_len < 0:
            raise ValueError(f"max_draft_len must be >= 0, got {max_draft_len}")
        default = self.spec if request_default is None else LookaheadSpec.parse(request_default)
        if not self.spec.admits(default):
            raise LookaheadNotAdmitted(default, self.spec)
        self.default_request_spec = default
        self.tokenizer = tokenizer
        #: how requests draft; a batch may run with its own (:meth:`new_batch`)
        self.settings = DraftSettings(adaptive=bool(adaptive), prompt_lookup=int(prompt_lookup),
                                      corrected_keying=bool(corrected_keying), full_guess_set=bool(full_guess_set),
                                      seed=int(seed), ngram_implementation=ngram_implementation,
                                      max_global_pool_size=int(max_global_pool_size),
                                      draft_retained_tokens=int(draft_retained_tokens))
        #: the most slots a request's SA global pool may ask for (``serve.max_global_pool_size``)
        self.max_global_pool_size = int(max_global_pool_size)
        self.runner = BatchRunner(model, pack_linears=pack_linears, fast_forward=fast_forward,
                                  release_weights=release_weights, invariant_attention=invariant_attention,
                                  native_kernels=native_kernels)
        self.model = model
        self.dtype = dtype_name(self.runner.dtype)
        self.model_id = model_id or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        self.max_seq_len = _max_seq_len(model.config, tokenizer)
        self.runner.cache.max_capacity = self.kv_rows(self.max_seq_len)  # a request's most (Batch._admit)
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        self.vocab_size = int(model.get_output_embeddings().out_features
                              if hasattr(model.get_output_embeddings(), "out_features")
                              else model.config.vocab_size)
        self.policy = AutoPolicy(CostTable(relative=True, capped=True))
        self._batch_owner: Optional[object] = None
        if calibrate:
            self.calibrate()

    # ------------------------------------------------------------------------------- loading
    @classmethod
    def load(
        cls, model: Optional[str | os.PathLike] = None, spec: Any = DEFAULT_SPEC, dtype: str = "float32", *,
        request_default: Any = None, threads: Optional[int] = None, seed: int = 0,
        corrected_keying: bool = False, full_guess_set: bool = False, device: str = "cpu", adaptive: bool = True,
        pack_linears: Optional[bool] = None, calibrate: bool = True, prompt_lookup: int = 0,
        fast_forward: Optional[bool] = None, invariant_attention: Optional[bool] = None,
        native_kernels: Optional[bool] = None, max_draft_len: Optional[int] = None,
        ngram_implementation: str = "one_model", max_global_pool_size: int = DEFAULT_MAX_GLOBAL_POOL_SIZE,
        draft_retained_tokens: int = DEFAULT_RETAINED_TOKENS,
    ) -> "ReferenceEngine":
        """Load a Hugging Face model folder or a GGUF file (dequantised once into the user cache; ``None``:
        the embedded SmolLM2-135M-Instruct) in ``dtype`` on ``device``. Never downloads anything."""
        torch_dtype = resolve_dtype(dtype)
        check_device(device)
        spec = LookaheadSpec.parse(spec)
        if model is None:
            from trtlade.reference.embedded import EMBEDDED_MODEL_NAME, embedded_model_dir

            folder, model_id = embedded_model_dir(), EMBEDDED_MODEL_NAME
        else:
            from trtlade.reference.embedded import is_gguf, model_folder

            folder = model_folder(model)  # a GGUF file: its converted folder (converted once, cached)
            model_id = Path(model).stem if is_gguf(model) else folder.name
        hf_model, tokenizer = load_hf_model(folder, torch_dtype, device)
        engine = cls(hf_model, tokenizer, spec, request_default=request_default, seed=seed,
                   corrected_keying=corrected_keying, full_guess_set=full_guess_set, threads=threads,
                   model_id=model_id, adaptive=adaptive, pack_linears=pack_linears, calibrate=calibrate,
                   prompt_lookup=prompt_lookup, fast_forward=fast_forward, release_weights=True,
                   invariant_attention=invariant_attention, native_kernels=native_kernels,
                   max_draft_len=max_draft_len, ngram_implementation=ngram_implementation,
                   max_global_pool_size=max_global_pool_size, draft_retained_tokens=draft_retained_tokens)
        from trtlade.reference.native.bindings import env_warnings
        from trtlade.reference.native.pages import return_freed_memory

        return_freed_memory()

        for warning in env_warnings():
            log.warning("%s", warning)
        return engine

    @property
    def decoding_tokens(self) -> int:
        """Rows one sequence's step may compute: a Lookahead step of the spec, or an NGram / SA draft of
        ``max_draft_len`` plus its golden token."""
        return max(self.spec.decoding_tokens, self.max_draft_len + 1)

    def kv_rows(self, tokens: int) -> int:
        """K/V rows a sequence of at most ``tokens`` (prompt and answer) reserves in its slot: those, the rows of
        its widest step beyond the last token (:attr:`decoding_tokens`) and one more."""
        return int(tokens) + self.decoding_tokens + 1

    @property
    def cost(self) -> CostTable:
        """The step cost by rows: the auto policy's own table (calibrated at load, refined by every step)."""
        return self.policy.cost

    @cost.setter
    def cost(self, table: CostTable) -> None:
        self.policy.cost = table

    @property
    def stats(self) -> dict[str, Any]:
        """What this engine runs with, as data: the linear kernel chosen at load (and why), dtype,
        threads, prompt-lookup tokens, adaptive, the step cost per rows (ms; calibrated at load and
        refined by every step), the auto policy's live state (``auto``) and where the packed weights lie
        (``weight_pages``: on 2 MiB pages where the OS has them)."""
        return {
            "linear_kernel": self.runner.kernel_choice.to_dict(),
            "native_body": self.runner.fast is not None and self.runner.fast.native is not None,
            "kernels": self.runner.kernels,
            "weight_pages": self.runner.weight_pages(),
            "dtype": self.dtype,
            "threads": self.threads,
            "prompt_lookup": self.settings.prompt_lookup,
            "adaptive": self.settings.adaptive,
            "max_draft_len": self.max_draft_len,
            "ngram_implementation": self.settings.ngram_implementation,
            "step_cost_ms": {rows: round(1000 * ms, 2) for rows in sorted(self.cost.samples)
                             if (ms := self.cost.median(rows)) is not None},
            "auto": self.policy.snapshot(),
            "exactness": self.exactness,
        }

    @property
    def bit_exact(self) -> bool:
        """Lookahead and sampled lookahead give the bits of greedy / plain sampling in this engine's dtype by
        construction: every op computes a row the same whatever the rows beside it."""
        return self.runner.bit_exact

    @property
    def exactness(self) -> dict[str, Any]:
        """What "lossless" rests on here, as data (``/version`` shows it)."""
        from trtlade.reference.native import status

        invariant = self.runner.invariant_attention
        return {
            "dtype": self.dtype,
            "bit_exact": self.bit_exact,
            "row_invariant_attention": invariant,
            "row_invariant_linear": (self.runner.fast is not None and self.runner.lm_head.kernel != "plain"
                                     or self.runner.kernel_choice.kernel == "native"),
            "native_kernel": status(),
            "kernels": self.runner.kernels,
            "tested": dict(TESTED_EXACT),
            "statement": (f"lookahead equals the engine's own {self.dtype} greedy / plain sampling bit for bit: every "
                          f"op computes a row the same whatever the rows beside it"
                          + ("" if self.dtype in TESTED_EXACT else f" ({self.dtype} runs the same kernels but was "
                                                                    f"not tested)") if self.bit_exact else
                          "row-invariance is not complete for this model or device (transformers' forward, plain "
                          "GEMMs or no native kernel): tokens exact in float32 as tested, log probabilities to the "
                          "last bit or so (a row's sums depend on the rows beside it); in bf16/fp16 a near-tie can "
                          "differ, most often for a request batched with others (docs/guides/reference-engine.md, "
                          "\"On a GPU\")"),
        }

    # ------------------------------------------------------------------------------- public API
    def generate(self, prompt_ids: Sequence[int], max_tokens: int = 128, lookahead: Any = None,
                 stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
                 temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
                 top_p: float = 1.0, settings: Optional[DraftSettings] = None, speculation: Any = None,
                 **sampling: Any) -> GenerationResult:
        """Generate up to ``max_tokens`` tokens after ``prompt_ids``; see the module docstring.
        ``sampling``: ``top_k``, ``min_p``, ``presence_penalty``, ``frequency_penalty``,
        ``repetition_penalty`` (:class:`~trtlade.contract.protocol.GenerationRequest`).
        ``settings``: draft settings for this call instead of the engine's (:attr:`settings`).
        ``speculation``: draft with NGram or SA instead (TensorRT-LLM's ``speculative_config`` block, e.g.
        ``{"decoding_type": "SA", "max_draft_len": 4}``; :class:`~trtlade.drafting.config.DraftConfig`)."""
        return self.generate_request(self.make_request(
            prompt_ids, max_tokens, lookahead, stop, stop_token_ids, ignore_eos, temperature, seed,
            min_tokens=min_tokens, top_p=top_p, speculation=speculation, **sampling), settings=settings)

    def stream(self, prompt_ids: Sequence[int], max_tokens: int = 128, lookahead: Any = None,
               stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
               temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
               top_p: float = 1.0, settings: Optional[DraftSettings] = None, speculation: Any = None,
               **sampling: Any) -> Iterator[StepChunk]:
        """Like :meth:`generate`, one :class:`StepChunk` per engine step; the last has
        ``finish_reason`` and ``stats``. ``close()`` the iterator to stop early."""
        return self.stream_request(self.make_request(
            prompt_ids, max_tokens, lookahead, stop, stop_token_ids, ignore_eos, temperature, seed,
            min_tokens=min_tokens, top_p=top_p, speculation=speculation, **sampling), settings=settings)

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int = 128, **kwargs: Any) -> GenerationResult:
        """The engine's own plain greedy loop: :meth:`generate` with lookahead (1,1,0)."""
        return self.generate(prompt_ids, max_tokens, lookahead=AUTOREGRESSIVE, **kwargs)

    def make_request(self, prompt_ids: Sequence[int], max_tokens: int, lookahead: Any = None,
                     stop: Iterable[str] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
                     temperature: float = 0.0, seed: Optional[int] = None, *, min_tokens: int = 0,
                     top_p: float = 1.0, speculation: Any = None, cache_scope: Optional[CacheScope] = None,
                     **sampling: Any) -> GenerationRequest:
        """A :class:`GenerationRequest` from :meth:`generate`'s arguments; ``cache_scope``: whose cached prompt
        blocks it may reuse (:class:`~trtlade.contract.protocol.CacheScope`; None: the global namespace)."""
        if isinstance(stop, str):
            stop = (stop,)
        auto = isinstance(lookahead, str) and lookahead.strip().lower() == "auto"
        if speculation is not None:
            speculation = self._speculation(speculation)
        return GenerationRequest(
            speculation=speculation, cache_scope=cache_scope,
            prompt_ids=_token_ids(prompt_ids), max_tokens=max_tokens, policy="auto" if auto else None,
            lookahead=None if lookahead is None or auto else LookaheadSpec.parse(lookahead),
            stop=tuple(stop), stop_token_ids=tuple(_as_index(t, "stop_token_ids") for t in stop_token_ids),
            ignore_eos=ignore_eos,
            min_tokens=min_tokens, temperature=temperature, top_p=top_p, seed=seed, **sampling)

    def generate_request(self, request: GenerationRequest, settings: Optional[DraftSettings] = None
                         ) -> GenerationResult:
        tokens: list[int] = []
        texts: list[str] = []
        last: Optional[StepChunk] = None
        for chunk in self.stream_request(request, settings=settings):
            tokens.extend(chunk.tokens)
            texts.append(chunk.text)
            last = chunk
        assert last is not None and last.finish_reason is not None and last.stats is not None
        return GenerationResult(tokens=tokens, text="".join(texts), finish_reason=last.finish_reason,
                                stats=last.stats)

    def stream_request(self, request: GenerationRequest, settings: Optional[DraftSettings] = None
                       ) -> Iterator[StepChunk]:
        """Validate ``request`` now (raising :class:`RequestError` / :class:`LookaheadNotAdmitted`),
        then return the step iterator (a batch of one; a later call supersedes it)."""
        batch = self.new_batch(max_batch_size=1, settings=settings)
        seq_id = batch.add(request)
        return self._single(batch, seq_id)

    def new_batch(self, max_batch_size: int = 8, max_num_tokens: Optional[int] = None,
                  settings: Optional[DraftSettings] = None, prefill_chunk: Optional[int] = None,
                  prefill_stall: Optional[float] = None, max_running_per_identity: Optional[int] = None,
                  idle_chunk: Optional[int] = None) -> Batch:
        """A :class:`~trtlade.reference.batching.Batch`: in-flight batching of many requests, each with
        its own (w,n,g). It supersedes any earlier batch or stream of this engine (their slots are
        freed; their next step raises). ``max_num_tokens``: rows per forward pass, drafts included
        (None: no limit). ``settings``: how its requests draft (default: the engine's). ``prefill_chunk``:
        prompt rows per step next to decoding requests (None: whole prompts), paced by ``prefill_stall``
        (see BatchLimits); ``max_running_per_identity``: the slots one identity's sequences may hold at once;
        ``idle_chunk``: with nothing decoding, the most rows of a longer prompt a step computes (None: whole)."""
        self.runner.free_all()
        owner = object()
        self._batch_owner = owner
        limits = BatchLimits(max_batch_size, max_num_tokens, prefill_chunk, prefill_stall, max_running_per_identity,
                             idle_chunk)
        return Batch(self, limits, settings=settings or self.settings, is_current=lambda: self._batch_owner is owner)

    def _single(self, batch: Batch, seq_id: int) -> Iterator[StepChunk]:
        """The chunks of one request run alone; its failure inside a step (its text, its sampler) is raised here,
        not left in ``batch.failed`` while the loop steps an empty batch for ever."""
        try:
            while True:
                for sid, chunk in batch.step():
                    if sid == seq_id:
                        yield chunk
                        if chunk.finish_reason is not None:
                            return
                for sid, exc in batch.failed:
                    if sid == seq_id:
                        raise exc
                if not len(batch):
                    raise RuntimeError(f"request {seq_id} left its batch without a last chunk or an error")
        finally:
            if batch.is_current():
                batch.close()

    #: the batch size AUTO is resolved for when a request is built here (a server resolves it for its own)
    max_batch_size_hint = 8

    def _speculation(self, value: Any) -> DraftConfig:
        """A ``speculation`` block as this engine runs it (AUTO resolved), or a RequestError naming the field."""
        try:
            return DraftConfig.parse(value, max_batch_size=self.max_batch_size_hint)
        except DraftConfigError as exc:
            raise RequestError(exc.message, field=speculation_param(exc.field), hint=exc.hint) from None

    def _check_speculation(self, request: GenerationRequest) -> None:
        config = request.speculation
        assert config is not None
        if request.lookahead is not None or request.policy not in (None, "fixed"):
            raise RequestError("a request drafts with lookahead or with speculation (NGram / SA), not both",
                               field="speculation", hint="send one of lookahead and speculation")
        if config.max_draft_len > self.max_draft_len:
            raise RequestError(
                f"speculation.max_draft_len = {config.max_draft_len} is above this engine's limit of "
                f"{self.max_draft_len} draft tokens per step", field="speculation.max_draft_len",
                limit=self.max_draft_len, hint=f"use max_draft_len <= {self.max_draft_len}")
        if config.enable_global_pool and (config.global_pool_size or 0) > self.max_global_pool_size:
            raise RequestError(
                f"speculation.global_pool_size = {config.global_pool_size} is above this server's limit of "
                f"{self.max_global_pool_size} slots", field="speculation.global_pool_size",
                limit=self.max_global_pool_size, hint=f"use global_pool_size <= {self.max_global_pool_size}")

    def validate(self, request: GenerationRequest) -> LookaheadSpec:
        """Check a request against this engine; return the spec it runs with ((1,1,0) for an NGram / SA
        request: it drafts with its ``speculation``)."""
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
        if room < 1:
            raise RequestError(f"the prompt ({len(prompt)} tokens) leaves no room for output in the model's "
                               f"max_seq_len {self.max_seq_len}", field="prompt_ids", limit=self.max_seq_len - 1,
                               hint=f"shorten the prompt to at most {self.max_seq_len - 1} tokens")
        if request.max_tokens > room:
            raise RequestError(
                f"the prompt ({len(prompt)} tokens) + max_tokens ({request.max_tokens}) exceeds the model's "
                f"max_seq_len {self.max_seq_len}", field="max_tokens", limit=max(room, 0),
                hint=f"use max_tokens <= {max(room, 0)} or a shorter prompt")
        _check_types(request)
        vocab = self.vocab_size  # an id past it would fail in the engine thread
        bad = [t for t in request.stop_token_ids if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"stop_token_ids holds ids outside the vocabulary [0, {vocab}): {bad[:5]}",
                               field="stop_token_ids", limit=vocab - 1)
        if not 0 <= request.min_tokens <= request.max_tokens:
            raise RequestError(f"min_tokens must be between 0 and max_tokens ({request.max_tokens}), "
                               f"got {request.min_tokens}", field="min_tokens", limit=request.max_tokens)
        if not request.temperature >= 0:
            raise RequestError(f"temperature must be >= 0, got {request.temperature}", field="temperature", limit=0)
        _check_sampling(request)
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(request, name)
            if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
                raise RequestError(f"{name} must be between 0 and {MAX_TOP_LOGPROBS} alternatives, got {value}",
                                   field=name, limit=MAX_TOP_LOGPROBS)
        if request.speculation is not None:
            self._check_speculation(request)
            return AUTOREGRESSIVE
        spec = self.default_request_spec if request.lookahead is None else LookaheadSpec.parse(request.lookahead)
        if not self.spec.admits(spec):
            raise LookaheadNotAdmitted(spec, self.spec)
        return spec

    # ------------------------------------------------------------------------------- calibration
    def calibrate(self, repeats: int = 3, context: int = 128, max_rows: int = 64, warmup: int = 2) -> dict[int, float]:
        """Time forwards of 1, 2, 4, ... rows (the engine spec's width, and up to a few sequences'
        full steps, at most ``max_rows``; wider steps are extrapolated) after a ``context``-token
        prefix, in interleaved rounds; the fastest of ``repeats`` rounds per row count starts the
        auto policy's cost model (timing noise on a shared machine only ever adds time; every
        decoding step then adds what it measured), after ``warmup`` discarded rounds. A row count is
        never kept dearer than a wider one measured (:func:`no_dearer_than_wider`). Returns seconds per row
        count."""
        width = self.spec.decoding_tokens
        top = min(max(4 * width, 16), max_rows)
        rows_list = [1]
        while rows_list[-1] < top:
            rows_list.append(min(2 * rows_list[-1], top))
        if width <= top and width not in rows_list:
            rows_list = sorted({*rows_list, width})
        context = max(1, min(context, self.max_seq_len - top - 1))
        prompt = [(7 * i + 3) % self.vocab_size for i in range(context)]
        self._batch_owner = None  # supersedes any batch: the calibration uses the runner's slots
        runner = self.runner
        runner.free_all()
        slot = runner.allocate(context + top + 1)
        runner.prefill(slot, prompt)
        best: dict[int, float] = {}
        for rep in range(warmup + repeats):
            for rows in rows_list:
                tokens = [prompt[i % len(prompt)] for i in range(rows)]
                block = RowBlock(slot, tokens, list(range(rows)), list(range(rows)), causal=True)
                t0 = time.perf_counter()
                argmax_rows(runner.forward([block])[0])
                elapsed = time.perf_counter() - t0
                if rep >= warmup:  # the first rounds warm the kernels and the buffers up
                    best[rows] = min(elapsed, best.get(rows, elapsed))
        runner.free(slot)
        best = no_dearer_than_wider(best)
        self.cost = CostTable(relative=True, capped=True)
        for rows, seconds in best.items():
            self.cost.add(rows, seconds)
        return best


# ----------------------------------------------------------------------------------------- helpers
def _token_ids(prompt_ids: Any) -> tuple[int, ...]:
    """A prompt as a tuple of ints: a list/tuple of ids, a 1-row tensor or array, or what
    ``tokenizer(...)`` / ``apply_chat_template(...)`` return (a mapping with ``input_ids``)."""
    if hasattr(prompt_ids, "keys") and "input_ids" in prompt_ids.keys():
        prompt_ids = prompt_ids["input_ids"]
    if hasattr(prompt_ids, "tolist"):
        prompt_ids = prompt_ids.tolist()
    if isinstance(prompt_ids, (str, bytes)):
        raise RequestError(f"prompt_ids must be token ids (ints), got {type(prompt_ids).__name__}: encode text "
                           "with the engine's tokenizer first", field="prompt_ids")
    try:
        if len(prompt_ids) == 1 and isinstance(prompt_ids[0], (list, tuple)):
            prompt_ids = prompt_ids[0]  # a batch of one
        return tuple(_as_index(t, "prompt_ids") for t in prompt_ids)
    except TypeError:
        raise RequestError(f"prompt_ids must be token ids (ints), got {type(prompt_ids).__name__}",
                           field="prompt_ids") from None


def _as_index(value: Any, field: str) -> int:
    """A token id as an int: Python and NumPy integers, never a float, a bool or a string (int() would truncate
    1.5 and read "5")."""
    if isinstance(value, bool):
        raise RequestError(f"{field} must be token ids (ints), got {value!r}", field=field)
    try:
        return operator.index(value)
    except TypeError:
        raise RequestError(f"{field} must be token ids (ints), got {value!r}", field=field) from None


def _eos_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """EOS ids from the generation config, the model config and the tokenizer, in that order."""
    return eos_token_ids(getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                         getattr(model.config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None))


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


def _check_sampling(request: GenerationRequest) -> None:
    """The warpers' ranges (the HTTP layer checks the same, naming the request field)."""
    for name, (low, high, closed) in SAMPLING_RANGES.items():
        value = getattr(request, name)
        if not (low <= value <= high if closed else low < value <= high):
            bracket = "[" if closed else "("
            raise RequestError(f"{name} must be in {bracket}{low:g}, {high:g}], got {value}", field=name, limit=high)
    if isinstance(request.top_k, bool) or not isinstance(request.top_k, int) or request.top_k < 0:
        raise RequestError(f"top_k must be a whole number >= 0 (0: off), got {request.top_k!r}", field="top_k", limit=0)
    seed = request.seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63):
        raise RequestError(f"seed must be a 64-bit integer, got {seed!r}", field="seed", limit=2**63 - 1,
                           hint="use a whole number with -2**63 <= seed < 2**63 (a larger one would wrap onto another "
                                "seed's draws)")

"""The build plan: every input resolved (flags over the config file over defaults) into one frozen
value, and the exact commands it runs. Pure: reads the model's config.json, writes nothing, never
imports tensorrt_llm, so ``--dry-run`` works anywhere.

Worked example, Qwen3-8B with (4,2,4) on one GPU::

    trtlade build --model Qwen3-8B --wng 4,2,4 --models-dir /models --output /bundles/qwen3

resolves /models/Qwen3-8B (Qwen3ForCausalLM -> QWenForCausalLM, bfloat16 from its config.json),
max_draft_len (0) + (4-1+4)*(2-1) = 7, and plans::

    python -m trtlade.builder.convert --hf-dir /models/Qwen3-8B --checkpoint-dir /bundles/qwen3/checkpoint \\
        --model-class QWenForCausalLM --dtype bfloat16 --tp-size 1 --pp-size 1
    trtllm-build --checkpoint_dir /bundles/qwen3/checkpoint --output_dir /bundles/qwen3/engine \\
        --speculative_decoding_mode lookahead_decoding --max_draft_len 7 --max_batch_size 8 ...

The engine then holds max_seq_len 4096 + 7 = 4103 (the builder adds max_draft_len) and
max_num_tokens max(8192, 8 * (7 + 1)) = 8192.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from trtlade.builder.errors import BuildError
from trtlade.bundle import (CHECKPOINT_DIR, CONFIG_FILE, ENGINE_DIR, EXTRA_OPTIONS_FILE, LOGS_DIR, MANIFEST_FILE,
                            TRTLLM_SERVE_FILE)
from trtlade.builder.models import (
    FIRST_VERSION,
    MODELS_DIR_ENV,
    HfModelInfo,
    ModelSource,
    read_hf_config,
    check_architecture_version,
    resolve_model,
    trtllm_class_for,
)
from trtlade.config.schema import DEFAULT_OUTPUT_SEQ
from trtlade.spec import LookaheadSpec
from trtlade.trtllm.compat import (
    QWEN3_TIED_EMBEDDINGS_NOTE, installed_version, parse_version, qwen3_floor, supports_qwen3,
)
from trtlade.trtllm.releases import (NEWEST_READ, equivalent_speculation, flow_mapping, lookahead_refusal_1_3,
                                     release_for)
from trtlade.trtllm.windows import lookahead_refusal, within_note

__all__ = [
    "Backend",
    "DEFAULT_MAX_NUM_TOKENS",
    "DEFAULT_OUTPUT_SEQ",
    "BuildOptions",
    "Limits",
    "BuildPlan",
    "make_plan",
    "default_output_name",
    "shell_join",
    "trtllm_available",
]

Backend = Literal["trtllm", "reference", "pytorch"]

#: The embedded SmolLM2-135M-Instruct is a Llama model (converted to float32).
EMBEDDED_ARCHITECTURE = "LlamaForCausalLM"

#: trtllm-build's own default --max_num_tokens (0.16 to 1.2).
DEFAULT_MAX_NUM_TOKENS = 8192
#: the largest default KV block trtllm-build raises a smaller max_num_tokens to: NVIDIA/TensorRT-LLM
#: tensorrt_llm/plugin/plugin.py, PluginConfig's tokens_per_block (64 in 0.16, 32 later), applied by
#: tensorrt_llm/_common.py check_max_num_tokens
KV_BLOCK_TOKENS = 64

# What is written where in a bundle: trtlade.bundle names it.


@dataclass(frozen=True)
class BuildOptions:
    """What the command line gave; None means "not given" (the config file or a default decides)."""

    model: str | None = None
    spec: LookaheadSpec | None = None
    config_path: Path | None = None
    dtype: str | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    max_batch_size: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_num_tokens: int | None = None
    output: Path | None = None
    models_dir: Path | None = None
    backend: Backend | None = None
    keep_checkpoint: bool | None = None
    force: bool = False
    #: PyTorch backend: the drafter (ngram, sa, auto, or a mode name such as sa-8) and the release targeted
    speculation: str | None = None
    trtllm_version: str | None = None


@dataclass(frozen=True)
class Limits:
    """The engine limits, as passed to trtllm-build."""

    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int

    def to_dict(self) -> dict[str, int]:
        return {"max_batch_size": self.max_batch_size, "max_input_len": self.max_input_len,
                "max_seq_len": self.max_seq_len, "max_num_tokens": self.max_num_tokens}

    @property
    def token_cap(self) -> int:
        """max_seq_len * max_batch_size: trtllm-build lowers a larger max_num_tokens to it (tensorrt_llm/_common.py,
        ``check_max_num_tokens``, run before the speculative growth)."""
        return self.max_seq_len * self.max_batch_size

    def as_built(self, max_draft_len: int) -> dict[str, int]:
        """What trtllm-build makes of them: max_num_tokens lowered to :attr:`token_cap`, then max_seq_len grows by
        max_draft_len and max_num_tokens is raised to at least max_batch_size * (max_draft_len + 1)
        (tensorrt_llm/builder.py, ``build()``).

        >>> Limits(64, 2048, 4096, 256).as_built(7)
        {'max_batch_size': 64, 'max_input_len': 2048, 'max_seq_len': 4103, 'max_num_tokens': 512}
        >>> Limits(1, 2048, 4096, 8192).as_built(7)["max_num_tokens"]
        4096
        """
        tokens = min(self.max_num_tokens, self.token_cap)
        return {"max_batch_size": self.max_batch_size, "max_input_len": self.max_input_len,
                "max_seq_len": self.max_seq_len + max_draft_len,
                "max_num_tokens": max(tokens, self.max_batch_size * (max_draft_len + 1))}


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build does, resolved. ``origin`` says where each setting came from
    (``--flag``, ``config.yml:build.max_batch_size``, ``default``) for the printed plan."""

    backend: Backend
    model: ModelSource
    info: HfModelInfo
    spec: LookaheadSpec
    dtype_requested: str
    dtype: str
    tp_size: int
    pp_size: int
    limits: Limits
    output: Path
    keep_checkpoint: bool
    force: bool
    workers: int
    python: str
    config_path: Path | None = None
    config_data: Mapping[str, Any] = field(default_factory=dict)
    explicit_limits: tuple[str, ...] = ()
    origin: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    embedded: bool = False
    #: PyTorch backend: the speculative_config block and the TensorRT-LLM release it is for
    speculation: Mapping[str, Any] | None = None
    release: str | None = None

    # ------------------------------------------------------------------ derived
    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def max_draft_len(self) -> int:
        return self.spec.max_draft_len

    @property
    def trtllm_class(self) -> str:
        return trtllm_class_for(self.info.architecture)

    @property
    def gemm_plugin(self) -> str:
        """``--gemm_plugin``: the dtype when it is a concrete one trtllm-build accepts, else auto."""
        return self.dtype if self.dtype in ("float16", "bfloat16", "float32") else "auto"

    @property
    def engine_dir(self) -> Path:
        return self.output / ENGINE_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.output / CHECKPOINT_DIR

    @property
    def logs_dir(self) -> Path:
        return self.output / LOGS_DIR

    @property
    def manifest_path(self) -> Path:
        return self.output / MANIFEST_FILE

    @property
    def config_file(self) -> Path:
        return self.output / CONFIG_FILE

    @property
    def extra_options_file(self) -> Path:
        return self.output / EXTRA_OPTIONS_FILE

    # ------------------------------------------------------------------ commands
    def convert_argv(self, checkpoint_dir: Path | None = None, result_file: Path | None = None,
                     *, probe: bool = False) -> list[str]:
        """Step 1: ``python -m trtlade.builder.convert``, which runs, per rank r of tp*pp::

            mapping = tensorrt_llm.Mapping(world_size=tp*pp, rank=r, tp_size=tp, pp_size=pp)
            model = tensorrt_llm.models.<Class>.from_hugging_face(hf_dir, dtype, mapping=mapping,
                                                                  quant_config=QuantConfig())
            model.save_checkpoint(checkpoint_dir, save_config=(r == 0))
        """
        argv = [self.python, "-m", "trtlade.builder.convert"]
        if probe:
            argv.append("--probe")
        argv += ["--hf-dir", str(self.model.path)]
        if not probe:
            argv += ["--checkpoint-dir", str(checkpoint_dir or self.checkpoint_dir)]
        argv += ["--model-class", self.trtllm_class, "--architecture", self.info.architecture, "--dtype", self.dtype,
                 "--tp-size", str(self.tp_size), "--pp-size", str(self.pp_size)]
        if result_file is not None:
            argv += ["--result", str(result_file)]
        return argv

    def build_argv(self, checkpoint_dir: Path | None = None, engine_dir: Path | None = None,
                   trtllm_build: str = "trtllm-build") -> list[str]:
        """Step 2: ``trtllm-build`` with the flag names 0.16 to 1.2 accept (no --tp_size: parallelism
        comes from the checkpoint; no --gather_context_logits: nothing reads a prompt's logits)."""
        lim = self.limits
        return [
            trtllm_build,
            "--checkpoint_dir", str(checkpoint_dir or self.checkpoint_dir),
            "--output_dir", str(engine_dir or self.engine_dir),
            "--speculative_decoding_mode", "lookahead_decoding",
            "--max_draft_len", str(self.max_draft_len),
            "--max_batch_size", str(lim.max_batch_size),
            "--max_input_len", str(lim.max_input_len),
            "--max_seq_len", str(lim.max_seq_len),
            "--max_num_tokens", str(lim.max_num_tokens),
            "--max_beam_width", "1",
            "--kv_cache_type", "paged",
            "--gemm_plugin", self.gemm_plugin,
            "--use_paged_context_fmha", "enable",
            "--workers", str(self.workers),
        ]

    @property
    def trtllm_serve_file(self) -> Path:
        return self.output / TRTLLM_SERVE_FILE

    def summary(self) -> dict[str, Any]:
        """The plan as data (the manifest's inputs)."""
        if self.backend == "pytorch":
            return {"backend": self.backend, "model": self._model_summary(),
                    "dtype": {"requested": self.dtype_requested, "resolved": self.dtype},
                    "speculation": dict(self.speculation or {}), "release": self.release,
                    "parallelism": {"tp_size": self.tp_size, "pp_size": self.pp_size, "world_size": self.world_size}}
        return {
            "backend": self.backend,
            "model": {"given": self.model.given, "path": str(self.model.path), "found_by": self.model.how,
                      "architecture": self.info.architecture, "model_type": self.info.model_type,
                      "torch_dtype": self.info.torch_dtype, "config_sha256": self.info.config_sha256,
                      "trtllm_class": self.trtllm_class if self.backend == "trtllm" else None},
            "dtype": {"requested": self.dtype_requested, "resolved": self.dtype},
            "lookahead": {**self.spec.to_dict(), "max_draft_len": self.max_draft_len},
            "parallelism": {"tp_size": self.tp_size, "pp_size": self.pp_size, "world_size": self.world_size},
        }

    def _model_summary(self) -> dict[str, Any]:
        return {"given": self.model.given, "path": str(self.model.path), "found_by": self.model.how,
                "architecture": self.info.architecture, "model_type": self.info.model_type,
                "torch_dtype": self.info.torch_dtype, "config_sha256": self.info.config_sha256}

    def render(self) -> str:
        """The plan as copy-pasteable shell (comments explain; commands are shell-quoted)."""
        if self.backend == "pytorch":
            return self._render_pytorch()
        spec = self.spec
        lines = [
            f"# trtlade build plan ({self.backend} backend)",
            f"# model: {self.model.path}  ({self.info.architecture}"
            + (f" -> tensorrt_llm.models.{self.trtllm_class}, TensorRT-LLM >= "
               f"{FIRST_VERSION[self.info.architecture]}" if self.backend == "trtllm" else "") + ")",
            f"# lookahead (W,N,G) = ({spec}): max_draft_len = {_formula(spec)} = {spec.max_draft_len}",
            f"# dtype {self.dtype}" + (f" (from {self.dtype_requested})" if self.dtype != self.dtype_requested else "")
            + f", tp_size {self.tp_size}, pp_size {self.pp_size}",
        ]
        if self.backend == "trtllm" and self.release is not None:
            lines.append(f"# for TensorRT-LLM {self.release} ({self.origin['release']})")
        lines += [f"# note: {n}" for n in self.notes]
        if self.backend == "reference":
            lines += [
                "# the reference engine (PyTorch, CPU) serves the HF folder directly: nothing to convert",
                f"mkdir -p {shlex.quote(str(self.output))}",
                f"# trtlade writes {self.manifest_path.name} and {self.config_file.name} into "
                f"{shlex.quote(str(self.output))}, then:",
                f"trtlade validate-config {shlex.quote(str(self.config_file))}",
                f"trtlade serve --config {shlex.quote(str(self.config_file))}",
            ]
            return "\n".join(lines) + "\n"
        built = self.limits.as_built(self.max_draft_len)
        lines += [
            "",
            f"mkdir -p {shlex.quote(str(self.logs_dir))}",
            "# step 1: convert the HF checkpoint with TensorRT-LLM's Python API, per rank r < tp*pp:",
            f"#   Mapping(world_size={self.world_size}, rank=r, tp_size={self.tp_size}, pp_size={self.pp_size});"
            f" {self.trtllm_class}.from_hugging_face(hf_dir, {self.dtype!r}, mapping=...,"
            " quant_config=QuantConfig())"
            f".save_checkpoint(ckpt_dir, save_config=(r == 0))",
            shell_join(self.convert_argv()) + " \\\n    > " + shlex.quote(str(self.logs_dir / "convert.log"))
            + " 2>&1",
            "# step 2: build the engine (the builder makes max_seq_len "
            f"{self.limits.max_seq_len} + {self.max_draft_len} = {built['max_seq_len']}"
            + (f", raises max_num_tokens to {built['max_num_tokens']}"
               if built["max_num_tokens"] != self.limits.max_num_tokens else "") + ")",
            shell_join(self.build_argv()) + " \\\n    > " + shlex.quote(str(self.logs_dir / "trtllm-build.log"))
            + " 2>&1",
            f"# then trtlade checks {self.engine_dir / 'config.json'} against ({spec}) and writes "
            f"{self.manifest_path.name}, {self.config_file.name}, {self.extra_options_file.name}",
            f"trtlade validate-config {shlex.quote(str(self.config_file))}",
        ]
        return "\n".join(lines) + "\n"


    @property
    def serve_address(self) -> tuple[str, int]:
        """The host and port the config's serve section gives (trtlade's defaults: 127.0.0.1, 8000), for the
        ``trtllm-serve`` command a PyTorch-backend bundle prints and records."""
        serve = self.config_data.get("serve") if isinstance(self.config_data.get("serve"), Mapping) else {}
        return str(serve.get("host", "127.0.0.1")), int(serve.get("port", 8000))

    def _render_pytorch(self) -> str:
        from trtlade.builder.pytorch import serve_command

        block = ", ".join(f"{k}: {v}" for k, v in (self.speculation or {}).items())
        lines = [f"# trtlade build plan (pytorch backend: TensorRT-LLM {self.release}, no engine)",
                 f"# model: {self.model.path}  ({self.info.architecture}, loaded by the PyTorch backend as it is)",
                 f"# speculative_config: {{{block}}}",
                 f"# dtype {self.dtype}, tp_size {self.tp_size}, pp_size {self.pp_size}; max_batch_size "
                 f"{self.limits.max_batch_size}, max_seq_len {self.limits.max_seq_len}, max_num_tokens "
                 f"{self.limits.max_num_tokens}"]
        lines += [f"# note: {n}" for n in self.notes]
        lines += [f"mkdir -p {shlex.quote(str(self.output))}",
                  f"# trtlade writes {TRTLLM_SERVE_FILE}, {self.config_file.name} and {self.manifest_path.name} into "
                  f"{shlex.quote(str(self.output))}; nothing is converted or built. Then:",
                  f"trtlade validate-config {shlex.quote(str(self.trtllm_serve_file))} --trtllm-version {self.release}",
                  serve_command(self.model.path, self.output, *self.serve_address, release=self.release or NEWEST_READ),
                  f"# or trtlade's OpenAI server on the same backend: trtlade serve --config "
                  f"{shlex.quote(str(self.config_file))}"]
        return "\n".join(lines) + "\n"


def _formula(spec: LookaheadSpec) -> str:
    w, n, g = spec.as_tuple()
    return f"({0 if n == 1 else n - 2}) + ({w}-1+{g})*({n}-1)"


def shell_join(argv: Sequence[str]) -> str:
    """Shell-quoted, one flag and its value per continuation line after the first few words."""
    parts = [shlex.quote(a) for a in argv]
    head_len = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    head, rest = parts[:head_len], parts[head_len:]
    lines = [" ".join(head)]
    i = 0
    while i < len(rest):
        if i + 1 < len(rest) and not argv[head_len + i + 1].startswith("--"):
            lines.append(f"{rest[i]} {rest[i + 1]}")
            i += 2
        else:
            lines.append(rest[i])
            i += 1
    return " \\\n    ".join(lines)


def default_output_name(model_name: str, spec: LookaheadSpec, backend: Backend,
                        speculation: Mapping[str, Any] | None = None) -> str:
    """``Qwen3-8B-lookahead-4-2-4`` (``...-reference-4-2-4`` for the reference engine, ``...-pytorch-sa`` for
    TensorRT-LLM's PyTorch backend).

    >>> default_output_name("Qwen3-8B", LookaheadSpec(1, 1, 0), "pytorch", {"decoding_type": "AUTO"})
    'Qwen3-8B-pytorch-auto'
    """
    if backend == "pytorch":
        return f"{model_name}-pytorch-{str((speculation or {}).get('decoding_type', 'ngram')).lower()}"
    w, n, g = spec.as_tuple()
    kind = "lookahead" if backend == "trtllm" else "reference"
    return f"{model_name}-{kind}-{w}-{n}-{g}"


def embedded_model_peek() -> Path:
    """Where the embedded model's HF folder is (or will be), without converting it: for dry runs."""
    from trtlade.reference.embedded import EMBEDDED_MODEL_NAME, embedded_source, models_cache_dir

    return models_cache_dir() / f"{EMBEDDED_MODEL_NAME}-{embedded_source().key}"


def trtllm_available() -> bool:
    """Whether ``import tensorrt_llm`` would find a package (without importing it)."""
    try:
        return importlib.util.find_spec("tensorrt_llm") is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------------------- planning
def make_plan(options: BuildOptions, *, config: Mapping[str, Any] | None = None,
              env: Mapping[str, str] | None = None, cwd: Path | None = None,
              gpu_count: int | None = None, embedded_dir: Any = None,
              trtllm_present: bool | None = None) -> BuildPlan:
    """Resolve ``options`` over ``config`` (the raw YAML mapping of ``--config``, validated here) and
    defaults into a :class:`BuildPlan`. Raises :class:`BuildError` for bad input.

    ``embedded_dir`` is a callable returning the embedded model's HF folder (called only when no model
    is named); ``trtllm_present`` overrides the check for an installed TensorRT-LLM (for the backend
    default); ``gpu_count`` sets ``--workers`` (None: unknown, one worker per rank).
    """
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    cfg = _validated_config(options, config or {})
    src = str(options.config_path) if options.config_path else "config"
    base = options.config_path.parent if options.config_path else cwd
    pick = _Picker(src)
    origin, notes = pick.origin, []

    # the spec (a Lookahead engine's; a PyTorch-backend bundle has none)
    spec = options.spec if options.spec is not None else cfg.lookahead.spec
    origin["spec"] = "--wng" if options.spec is not None else f"{src}:lookahead.spec"
    notes += [f"{w.message} ({w.hint})" for w in spec.warnings()]

    model, embedded = _pick_model(options, cfg.model, cfg.model.model_fields_set, base, src, env, embedded_dir)
    if options.models_dir is not None and model.how != "models_dir":
        notes.append(f"--models-dir {options.models_dir} not used: "
                     + ("the embedded model is built (no --model or model.name to look up)" if embedded
                        else f"the model is a path ({model.path}), not a name to look up"))
    info = _model_info(model, embedded, notes)
    backend = _pick_backend(options, cfg.build, embedded, trtllm_present, pick)
    _refuse_speculation_on_engine(options, cfg, backend, src, origin)
    _check_backend(options, backend, spec, origin)

    dtype_req = pick("dtype", "--dtype", options.dtype, cfg.model, "model", "auto")
    dtype = info.torch_dtype if dtype_req == "auto" and info.torch_dtype is not None else dtype_req
    tp = pick("tp_size", "--tp-size", options.tp_size, cfg.build, "build", 1)
    pp = pick("pp_size", "--pp-size", options.pp_size, cfg.build, "build", 1)
    limits = _pick_limits(options, cfg.build, pick, backend)
    explicit_limits = tuple(k for k in limits.to_dict() if not origin[k].startswith("default"))
    _check_limits(limits, spec, origin, info, notes, backend)

    release, speculation = _backend_checks(options, cfg, backend, _Resolved(spec, info, model, dtype, tp, pp, limits),
                                           pick, notes)

    output = _pick_output(options, cfg.build, base, cwd, default_output_name(
        model.path.name if not embedded else "SmolLM2-135M-Instruct", spec, backend, speculation), pick)
    keep = True if options.keep_checkpoint is None else options.keep_checkpoint
    world = tp * pp
    workers = world if gpu_count is None or gpu_count <= 0 else max(1, min(world, gpu_count))
    plan = BuildPlan(
        backend=backend, model=model, info=info, spec=spec, dtype_requested=dtype_req, dtype=dtype,
        tp_size=tp, pp_size=pp, limits=limits, output=output, keep_checkpoint=keep, force=options.force,
        workers=workers, python=sys.executable, config_path=options.config_path, config_data=dict(config or {}),
        explicit_limits=explicit_limits, origin=origin, notes=tuple(notes), embedded=embedded,
        speculation=speculation, release=release,
    )
    _check_bundle(plan, src)
    return plan


def _refuse_speculation_on_engine(options: BuildOptions, cfg: Any, backend: str, src: str,
                                  origin: Mapping[str, str]) -> None:
    """A config's speculation block alone: TensorRT-LLM drafts so on its PyTorch backend only, never in an
    engine."""
    if backend == "trtllm" and options.spec is None and options.speculation is None \
            and "lookahead" not in (cfg.model_fields_set or ()) and cfg.speculation is not None:
        raise BuildError(f"{src} gives a speculation block and no lookahead.spec, but this build is a TensorRT-LLM "
                         f"engine ({origin.get('backend', 'the default backend')}), which drafts with Lookahead only",
                         where=f"{src}:speculation", hint="set build.backend: pytorch in the config (or pass --backend "
                         "pytorch), or give lookahead.spec for a Lookahead engine")


@dataclass(frozen=True)
class _Resolved:
    """What :func:`make_plan` has resolved when the backend's own checks run."""

    spec: LookaheadSpec
    info: HfModelInfo
    model: ModelSource
    dtype: str
    tp: int
    pp: int
    limits: Limits


def _backend_checks(options: BuildOptions, cfg: Any, backend: str, got: _Resolved, pick: _Picker,
                    notes: list[str]) -> tuple[str | None, dict[str, Any] | None]:
    """The checks of one backend (and a note on build.engine_dir, which no build reads), and what it resolves
    besides: (the TensorRT-LLM release aimed at, the PyTorch backend's speculation block); None where the backend
    has none."""
    origin = pick.origin
    if backend != "reference":
        _check_parallel(got.info, got.tp, got.pp, origin, notes)
    if "engine_dir" in cfg.build.model_fields_set:  # the bundle's trtlade.yml points at the bundle's own engine
        notes.append(f"{pick.src}:build.engine_dir {cfg.build.engine_dir} is not read by build: the bundle's "
                     "trtlade.yml names the bundle's own " + ("engine/ folder" if backend == "trtllm"
                                                              else "model (no engine)"))
    if backend == "pytorch":
        release, speculation = _pytorch_checks(options, cfg, got.info, got.model, got.limits.max_batch_size, origin,
                                               notes)
        _ignored_by_pytorch(options, origin, notes)
        return release, speculation
    if backend == "reference":
        _check_single_process(got.tp, got.pp, origin)
        _ignored_release(options, cfg, notes)
        _ignored_by_reference(options, notes)
        return None, None
    release = _engine_release(options, cfg, got.spec, pick, notes)
    _engine_checks(got.info, got.model, got.dtype, notes)
    return release, None


def _check_bundle(plan: BuildPlan, src: str) -> None:
    """The bundle's trtlade.yml must pass validate-config: refused before anything runs, at the input's key."""
    from trtlade.builder.bundle import deployment_errors

    errors = deployment_errors(plan)
    if not errors:
        return
    first = errors[0]
    key = first.path
    loc = tuple(int(p) if p.isdigit() else p for p in key.split(".")) if key else ()
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise BuildError(f"the bundle's trtlade.yml would not pass validate-config: {first.message}{more}",
                     where=_where(plan, src, key, loc),
                     hint=(first.hint + "; " if first.hint else "") + "the bundle takes the config's other sections "
                          "as they are: change them, or the flags that contradict them")


def _where(plan: BuildPlan, src: str, key: str, loc: tuple) -> str:
    """The flag that set ``key``, else the input config's key, else the key as the bundle has it."""
    flag = plan.origin.get(str(loc[-1])) if loc else None
    if flag is not None and flag.startswith("--"):
        return flag
    if _has(plan.config_data, loc) and src != "config":
        return f"{src}:{key}"
    return key or "trtlade.yml"


def _has(data: Any, loc: tuple) -> bool:
    for part in loc:
        if isinstance(data, Mapping) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return False
    return True


@dataclass
class _Picker:
    """One value from a flag, else the config file's key, else a default, and where it came from.

    >>> from trtlade.config.schema import BuildSection
    >>> pick = _Picker("trtlade.yml")
    >>> pick("tp_size", "--tp-size", 2, BuildSection(tp_size=4), "build", 1), pick.origin["tp_size"]
    (2, '--tp-size')
    >>> pick("tp_size", "--tp-size", None, BuildSection(tp_size=4), "build", 1), pick.origin["tp_size"]
    (4, 'trtlade.yml:build.tp_size')
    >>> pick("pp_size", "--pp-size", None, BuildSection(tp_size=4), "build", 1), pick.origin["pp_size"]
    (1, 'default')
    """

    src: str
    origin: dict[str, str] = field(default_factory=dict)

    def __call__(self, name: str, flag: str, flag_value: Any, section: Any, sec_name: str, default: Any) -> Any:
        if flag_value is not None:
            self.origin[name] = flag
            return flag_value
        if name in section.model_fields_set:
            self.origin[name] = f"{self.src}:{sec_name}.{name}"
            return getattr(section, name)
        self.origin[name] = "default"
        return default


def _model_info(model: ModelSource, embedded: bool, notes: list[str]) -> HfModelInfo:
    """The model's config.json, or, for a dry run before the embedded model's first conversion, what it holds."""
    if embedded and not (model.path / "config.json").is_file():
        notes.append(f"the embedded model is converted into {model.path} on the first real run (~20 s)")
        return HfModelInfo(path=model.path, architecture=EMBEDDED_ARCHITECTURE, model_type="llama",
                           torch_dtype="float32", config_sha256="")
    return read_hf_config(model.path)


def _pick_backend(options: BuildOptions, build_sec: Any, embedded: bool, trtllm_present: bool | None,
                  pick: _Picker) -> Backend:
    """--backend, else the PyTorch backend for --speculation, else build.backend, else the reference engine for
    the embedded model where TensorRT-LLM is not installed, else a TensorRT-LLM engine."""
    origin = pick.origin
    if options.backend is not None:
        origin["backend"] = "--backend"
        return options.backend
    if options.speculation is not None:
        origin["backend"] = "--speculation"
        return "pytorch"
    if "backend" in build_sec.model_fields_set:
        origin["backend"] = f"{pick.src}:build.backend"
        return build_sec.backend
    present = trtllm_available() if trtllm_present is None else trtllm_present
    if embedded and not present:
        origin["backend"] = "default: TensorRT-LLM is not installed and the model is the embedded one"
        return "reference"
    origin["backend"] = "default"
    return "trtllm"


def _check_backend(options: BuildOptions, backend: Backend, spec: LookaheadSpec, origin: Mapping[str, str]) -> None:
    if options.speculation is not None and options.spec is not None:
        raise BuildError("--wng and --speculation both name how the bundle drafts: --wng builds a Lookahead engine "
                         "(TensorRT-LLM below 1.3, or the reference engine), --speculation a PyTorch-backend bundle "
                         "(NGram / SA / AUTO, TensorRT-LLM 1.0 and later)", where="--wng",
                         hint="give one of them")
    if options.spec is not None and backend == "pytorch":  # the config's build.backend, or its speculation block
        raise BuildError(f"--wng {options.spec} builds a Lookahead engine, but this build is for TensorRT-LLM's "
                         f"PyTorch backend ({origin.get('backend', 'build.backend')}), which has no Lookahead: --wng "
                         "would be dropped", where="--wng",
                         hint="drop --wng (the bundle drafts as its speculation block says), or build a Lookahead "
                              "bundle with --backend trtllm or reference")
    if options.speculation is not None and backend != "pytorch":
        raise BuildError(f"--speculation drafts on TensorRT-LLM's PyTorch backend, not with --backend {backend}",
                         where="--speculation", hint="drop --backend (or use --backend pytorch), or drop --speculation "
                                                     "and build a Lookahead engine with --wng")
    if backend == "trtllm" and spec.is_autoregressive:
        raise BuildError(
            f"({spec}) has max_draft_len 0: an engine built for it is not a lookahead engine, and "
            "TensorRT-LLM refuses a lookahead engine with max_draft_len <= 0", where=origin["spec"],
            hint="build for the largest (W,N,G) you will serve, e.g. --wng 4,2,4; requests can still ask "
                 "for (1,1,0) to decode autoregressively (lookahead.request_default: 1,1,0); on TensorRT-LLM 1.3 "
                 "and later: --speculation ngram|sa|auto")


def _pick_limits(options: BuildOptions, build_sec: Any, pick: _Picker, backend: Backend) -> Limits:
    """The engine's limits; max_seq_len defaults to max_input_len + the default output length, max_num_tokens to
    trtllm-build's default, lowered as trtllm-build lowers it (:attr:`Limits.token_cap`) for an engine; a given
    max_num_tokens above that cap is refused rather than lowered."""
    mbs = pick("max_batch_size", "--max-batch-size", options.max_batch_size, build_sec, "build",
               build_sec.max_batch_size)
    mil = pick("max_input_len", "--max-input-len", options.max_input_len, build_sec, "build", build_sec.max_input_len)
    msl = pick("max_seq_len", "--max-seq-len", options.max_seq_len, build_sec, "build", None)
    if msl is None:
        msl = mil + DEFAULT_OUTPUT_SEQ
        pick.origin["max_seq_len"] = f"default (max_input_len + {DEFAULT_OUTPUT_SEQ})"
    mnt = pick("max_num_tokens", "--max-num-tokens", options.max_num_tokens, build_sec, "build", None)
    if mnt is None:
        mnt = DEFAULT_MAX_NUM_TOKENS
        pick.origin["max_num_tokens"] = "default (trtllm-build's)"
        if backend == "trtllm" and mnt > msl * mbs:
            mnt = msl * mbs
            pick.origin["max_num_tokens"] = (f"default (trtllm-build's {DEFAULT_MAX_NUM_TOKENS}, lowered to "
                                             "max_seq_len x max_batch_size)")
    elif backend == "trtllm" and mnt > msl * mbs:
        raise BuildError(f"max_num_tokens {mnt} is above max_seq_len {msl} x max_batch_size {mbs} = {msl * mbs}: "
                         f"trtllm-build would lower it to {msl * mbs} (check_max_num_tokens)",
                         where=pick.origin["max_num_tokens"],
                         hint=f"set max_num_tokens to at most {msl * mbs}, or raise max_seq_len or max_batch_size")
    if backend == "trtllm" and mnt < KV_BLOCK_TOKENS:
        raise BuildError(f"max_num_tokens {mnt} is below {KV_BLOCK_TOKENS}: trtllm-build raises it to its KV block "
                         f"size (tokens_per_block: {KV_BLOCK_TOKENS} in 0.16, 32 in later releases; "
                         "check_max_num_tokens), so the engine would not hold what the config says",
                         where=pick.origin["max_num_tokens"],
                         hint=f"give max_num_tokens of at least {KV_BLOCK_TOKENS} (and max_seq_len x max_batch_size "
                              "at least that)")
    return Limits(mbs, mil, msl, mnt)


def _check_parallel(info: HfModelInfo, tp: int, pp: int, origin: Mapping[str, str], notes: list[str]) -> None:
    """A split the model's config cannot take, refused here rather than on the GPU (BuildError): the attention heads
    by tp (``assert num_attention_heads % tp_size == 0``: tensorrt_llm/layers/attention.py ``Attention.__init__``,
    tensorrt_llm/_torch/modules/attention.py ``Attention.__init__``); the KV heads by tp, or tp by them where fewer
    are copied to every rank (``dup_kv_weight`` in tensorrt_llm/models/convert_utils.py, ``duplicate_kv_weight`` in
    tensorrt_llm/_torch/models/modeling_utils.py); more pipeline stages than decoder layers
    (``DecoderModel.__pp_init__``). An uneven layer split is said: releases before the split by ``tensor_split``
    (``Mapping.pp_layers``, 0.20 on) left the last layers out.

    >>> info = HfModelInfo(Path("m"), "Qwen2ForCausalLM", "qwen2", None, "", num_attention_heads=28,
    ...                    num_key_value_heads=4, num_hidden_layers=28)
    >>> _check_parallel(info, 4, 1, {"tp_size": "--tp-size", "pp_size": "default"}, [])    # 28 / 4, 4 / 4
    >>> _check_parallel(info, 8, 1, {"tp_size": "--tp-size", "pp_size": "default"}, [])
    Traceback (most recent call last):
    ...
    trtlade.builder.errors.BuildError: --tp-size: tp_size 8 does not divide the model's 28 attention heads ...
    """
    heads, kv, layers = info.num_attention_heads, info.num_key_value_heads, info.num_hidden_layers
    fits = [t for t in range(1, 65) if heads and heads % t == 0 and (not kv or kv % t == 0 or t % kv == 0)]
    hint = f"a tp_size that divides them: {', '.join(map(str, fits[:8]))}" if fits else "use tp_size 1"
    if heads and heads % tp:
        raise BuildError(f"tp_size {tp} does not divide the model's {heads} attention heads (num_attention_heads in "
                         f"config.json): TensorRT-LLM asserts num_attention_heads % tp_size == 0",
                         where=origin["tp_size"], hint=hint)
    if kv and (kv % tp if kv >= tp else tp % kv):
        rule = f"{kv} KV heads split over {tp} ranks" if kv >= tp else f"{kv} KV heads copied to {tp} ranks"
        raise BuildError(f"tp_size {tp} cannot hold the model's {kv} KV heads (num_key_value_heads): {rule} needs "
                         f"{'kv % tp' if kv >= tp else 'tp % kv'} == 0 (TensorRT-LLM's weight loading asserts it)",
                         where=origin["tp_size"], hint=hint)
    if layers and pp > layers:
        raise BuildError(f"pp_size {pp} is more pipeline stages than the model's {layers} decoder layers "
                         "(num_hidden_layers)", where=origin["pp_size"], hint=f"use at most pp_size {layers}")
    if layers and pp > 1 and layers % pp:
        notes.append(f"{layers} layers over {pp} pipeline stages: the first {layers % pp} take one layer more "
                     "(TensorRT-LLM 0.20 on; earlier releases left the last layers out, so build those with a pp_size "
                     "that divides the layers)")


def _check_single_process(tp: int, pp: int, origin: Mapping[str, str]) -> None:
    if tp * pp != 1:
        where = origin["tp_size"] if tp != 1 else origin["pp_size"]
        raise BuildError(f"the reference engine runs in one CPU process; tp_size {tp} x pp_size {pp} "
                         "needs TensorRT-LLM", where=where,
                         hint="drop --tp-size/--pp-size, or use --backend trtllm on a multi-GPU machine")


def _engine_release(options: BuildOptions, cfg: Any, spec: LookaheadSpec, pick: _Picker,
                    notes: list[str]) -> str | None:
    """The release a Lookahead engine is built for, where one is named (--trtllm-version, else
    build.trtllm_version): from 1.3 on TensorRT-LLM has no engine backend and no Lookahead, so the build is
    refused with the PyTorch backend's equivalent. None: no release named (the installed one is checked when the
    real build starts).

    >>> opts = BuildOptions(spec=LookaheadSpec(4, 2, 4), trtllm_version="1.3.0")
    >>> _engine_release(opts, _validated_config(opts, {}), opts.spec, _Picker("config"), [])
    Traceback (most recent call last):
    ...
    trtlade.builder.errors.BuildError: --trtllm-version: TensorRT-LLM 1.3.0 has no TensorRT-engine backend ...
    """
    version = pick("trtllm_version", "--trtllm-version", options.trtllm_version, cfg.build, "build", None)
    if version is None:
        pick.origin.pop("trtllm_version")
        return None
    where = pick.origin.pop("trtllm_version")
    pick.origin["release"] = where
    try:
        row = release_for(version)
    except ValueError as exc:
        raise BuildError(str(exc), where=where, hint="Lookahead engines build for 0.16 <= version < 1.3, e.g. "
                                                     "--trtllm-version 1.2.1") from None
    if (why := lookahead_refusal_1_3(version)) is not None:
        same = flow_mapping(equivalent_speculation(cfg.lookahead.lookahead_schedule, cfg.build.max_batch_size))
        raise BuildError(f"{why}; --wng {spec} builds a Lookahead engine", where=where,
                         hint=f"build for the PyTorch backend instead: --speculation sa (speculation: {same}, "
                              "trtlade's measured default; docs/guides/migrate-1.3.md), or target a release below "
                              "1.3, e.g. --trtllm-version 1.2.1")
    if row.note:
        notes.append(f"TensorRT-LLM {version} is {row.note}")
    return version


def _ignored_by_reference(options: BuildOptions, notes: list[str]) -> None:
    """Flags that size or keep a TensorRT-LLM engine's parts, given for the reference engine: noted, not dropped
    without a word (its prompt limit is serve.max_prompt_tokens, its rows per step max_num_tokens)."""
    flags = (("--max-input-len", options.max_input_len), ("--max-seq-len", options.max_seq_len),
             ("--keep-checkpoint/--no-keep-checkpoint", options.keep_checkpoint))
    given = [flag for flag, value in flags if value is not None]
    if given:
        notes.append(f"{', '.join(given)} not used by the reference engine (no engine, no checkpoint): bound prompts "
                     "with serve.max_prompt_tokens and answers with serve.max_tokens_limit")


def _ignored_by_pytorch(options: BuildOptions, origin: Mapping[str, str], notes: list[str]) -> None:
    """Flags a PyTorch-backend bundle has no use for (nothing is converted; its trtllm-serve.yml carries
    max_batch_size, max_seq_len and max_num_tokens, so max_input_len counts only as max_seq_len's default):
    noted, not dropped without a word."""
    sized = not origin["max_seq_len"].startswith("default")
    flags = (("--max-input-len", options.max_input_len if sized else None),
             ("--keep-checkpoint/--no-keep-checkpoint", options.keep_checkpoint))
    given = [flag for flag, value in flags if value is not None]
    if given:
        notes.append(f"{', '.join(given)} not used by a PyTorch-backend bundle (no checkpoint is converted; its "
                     "trtllm-serve.yml bounds sequences with max_seq_len and max_num_tokens)")


def _ignored_release(options: BuildOptions, cfg: Any, notes: list[str]) -> None:
    """The reference engine runs without TensorRT-LLM: a release named for it is noted, not silently dropped."""
    from trtlade.trtllm.compat import parse_version

    version = options.trtllm_version or cfg.build.trtllm_version
    if version is not None:
        named = "--trtllm-version" if options.trtllm_version else "build.trtllm_version"
        try:
            parse_version(version)  # unused, but a typo is said as on every backend
        except ValueError as exc:
            raise BuildError(str(exc), where=named, hint="e.g. --trtllm-version 1.3.0, or drop it") from None
        notes.append(f"{named} {version} is not used: the reference engine runs without TensorRT-LLM")


def _engine_checks(info: HfModelInfo, model: ModelSource, dtype: str, notes: list[str]) -> None:
    """A TensorRT-LLM engine: the architecture converts on the installed release, is not quantized, and (Qwen3)
    meets its release floor; a dtype outside the lookahead support matrix is noted."""
    where = str(model.path / "config.json")
    trtllm_class_for(info.architecture, where=where)
    installed = installed_version()
    if installed is not None:
        check_architecture_version(info.architecture, installed, where=where)
    first = FIRST_VERSION[info.architecture]
    if first != "0.16.0" and not info.is_qwen3:
        notes.append(f"{info.architecture} needs TensorRT-LLM >= {first} (the first release that converts it); "
                     + (f"installed: {installed}" if installed else "the installed version is checked before "
                        "any weights are converted"))
    _refuse_quantized(info, where)
    if info.is_qwen3:
        _check_qwen3(info, installed, where, notes)
    if dtype not in ("float16", "bfloat16"):
        notes.append(f"dtype {dtype}: TensorRT-LLM's lookahead support matrix lists FP16/BF16/FP8; "
                     "prefer --dtype bfloat16 or float16")


def _pick_output(options: BuildOptions, build_sec: Any, base: Path, cwd: Path, default_name: str,
                 pick: _Picker) -> Path:
    """--output, else build.output_dir (relative to the config file), else ``default_name`` in the working folder."""
    origin = pick.origin
    if options.output is not None:
        output, origin["output"] = options.output, "--output"
    elif build_sec.output_dir is not None:
        output, origin["output"] = _relative_to(build_sec.output_dir, base), f"{pick.src}:build.output_dir"
    else:
        output, origin["output"] = cwd / default_name, "default"
    return (cwd / output if not output.is_absolute() else output).resolve()


def _pytorch_checks(options: BuildOptions, cfg: Any, info: HfModelInfo, model: ModelSource, max_batch_size: int,
                    origin: dict[str, str], notes: list[str]) -> tuple[str, dict[str, Any]]:
    """A PyTorch-backend bundle: the release it is for, its drafter (checked by upstream's validators and
    against the release), and the checkpoint's architecture against the backend's registry."""
    from trtlade.builder.pytorch import check_architecture, installed_registry, pick_release, speculation_block
    from trtlade.trtllm.compat import parse_version

    installed = installed_version()
    release, origin["release"] = pick_release(options.trtllm_version, cfg.build.trtllm_version, installed)
    try:
        parse_version(release)
        row = release_for(release)
    except ValueError as exc:
        raise BuildError(str(exc), where=origin["release"], hint="e.g. --trtllm-version 1.3.0") from None
    if not row.drafters:
        raise BuildError(f"TensorRT-LLM {release} has no model-free drafter on its PyTorch backend (NGram arrived in "
                         "1.0)", where=origin["release"], hint="target 1.0 or later (1.3: NGram, SA, AUTO), or build a "
                         "Lookahead engine with --wng")
    if row.note:
        notes.append(f"TensorRT-LLM {release} is {row.note}")
    if origin["release"].startswith("the newest"):
        notes.append(f"planned for TensorRT-LLM {release}, {origin['release']}")
    speculation = speculation_block(options.speculation, cfg.speculation, release, max_batch_size,
                                    str(options.config_path) if options.config_path else "config")
    registry = installed_registry() if installed is not None and installed == release else None
    check_architecture(info.architecture, release, str(model.path / "config.json"), registry)
    return release, speculation


def _validated_config(options: BuildOptions, raw: Mapping[str, Any]):
    """The config file validated with the schema (a --wng stands in for a missing lookahead.spec)."""
    from pydantic import ValidationError

    from trtlade.config.schema import TrtladeConfig

    data = dict(raw)
    if options.spec is not None:
        look = dict(data.get("lookahead") or {})
        look["spec"] = options.spec.to_dict()
        data["lookahead"] = look
    elif options.speculation is not None or (data.get("speculation") is not None and "lookahead" not in data):
        if options.speculation is not None:  # a PyTorch-backend bundle (NGram / SA / AUTO): no Lookahead spec
            from trtlade.drafting.config import DraftConfigError, drafter_mode

            name = "ngram-auto" if options.speculation.strip().lower() == "auto" else options.speculation
            try:
                data["speculation"] = drafter_mode(name)
            except DraftConfigError as exc:
                raise BuildError(exc.message, where="--speculation", hint=exc.hint) from None
    elif not (isinstance(data.get("lookahead"), dict) and "spec" in data["lookahead"]):
        raise BuildError("no lookahead spec: give --wng W,N,G (e.g. --wng 4,2,4), or --speculation ngram|sa|auto "
                         "for TensorRT-LLM's PyTorch backend"
                         + (f" or lookahead.spec in {options.config_path}" if options.config_path else ""),
                         where="--wng",
                         hint="the spec sets the engine's max_draft_len; see `trtlade spec 4,2,4`")
    try:
        return TrtladeConfig.model_validate(data)
    except ValidationError:
        pass
    raise _config_error(options, raw, data)


def _config_error(options: BuildOptions, raw: Mapping[str, Any], data: Mapping[str, Any]) -> BuildError:
    """The first problem of the config as the flags change it, worded as validate-config words it (an unknown
    key with its did-you-mean, a range, a rule), at the flag that causes it when the file alone is fine."""
    import yaml

    from trtlade.config.loader import validate_trtlade
    from trtlade.yaml_doc import parse_yaml

    src = str(options.config_path) if options.config_path else "config"
    _, found = validate_trtlade(parse_yaml(yaml.safe_dump(dict(data), sort_keys=False), src))
    errors = [d for d in found if d.severity == "error"] or found
    first = errors[0]
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    _, alone = validate_trtlade(parse_yaml(yaml.safe_dump(dict(raw), sort_keys=False), src)) if raw else (None, [])
    if options.spec is not None and not [d for d in alone if d.severity == "error" and d.path != "lookahead.spec"]:
        return BuildError(first.message + more, where="--wng",
                          hint=f"--wng {options.spec} must admit the config's lookahead.request_default and every "
                               "lookahead.schedule band (w<=W, n<=N, g<=G): raise --wng, or change those keys in "
                               f"{src}")
    check = f"check it with: trtlade validate-config {src if options.config_path else 'FILE'}"
    return BuildError(first.message + more, where=f"{src}:{first.path}" if first.path else src,
                      hint=f"{first.hint}; {check}" if first.hint else check)


def _relative_to(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base / path


def _pick_model(options: BuildOptions, model_sec: Any, explicit: set[str], base: Path, src: str,
                env: Mapping[str, str], embedded_dir: Any) -> tuple[ModelSource, bool]:
    dirs: list[tuple[str, Path]] = []
    if options.models_dir is not None and not options.models_dir.is_dir():
        raise BuildError(f"{options.models_dir} is not a folder", where="--models-dir",
                         hint="the folder that holds model folders by name (e.g. /models for --model Qwen3-8B)")
    if options.models_dir is not None:
        dirs.append(("--models-dir", options.models_dir))
    if model_sec.models_dir is not None:
        dirs.append((f"{src}:model.models_dir", _relative_to(model_sec.models_dir, base)))
    if env.get(MODELS_DIR_ENV):
        dirs.append((f"${MODELS_DIR_ENV}", Path(env[MODELS_DIR_ENV])))
    if options.model is not None:
        return resolve_model(options.model, dirs), False
    if model_sec.path is not None:
        path = _relative_to(model_sec.path, base)
        try:
            return resolve_model(str(path), dirs, as_path=True), False
        except BuildError as exc:
            raise BuildError(exc.message, where=f"{src}:model.path", hint=exc.hint) from None
    if model_sec.name is not None:
        try:
            return resolve_model(model_sec.name, dirs), False
        except BuildError as exc:
            raise BuildError(exc.message, where=f"{src}:model.name", hint=exc.hint) from None
    if embedded_dir is None:
        from trtlade.reference.embedded import embedded_model_dir as embedded_dir
    from trtlade.reference.embedded import EmbeddedModelError

    try:
        folder = Path(embedded_dir())
    except EmbeddedModelError as exc:
        raise BuildError(str(exc), where="--model",
                         hint="or name a Hugging Face model folder with --model") from None
    return ModelSource(folder, None, "embedded"), True


def _check_limits(limits: Limits, spec: LookaheadSpec, origin: Mapping[str, str], info: HfModelInfo,
                  notes: list[str], backend: Backend) -> None:
    if limits.max_seq_len <= limits.max_input_len:
        raise BuildError(
            f"max_seq_len {limits.max_seq_len} is not above max_input_len {limits.max_input_len}: a prompt "
            "of max_input_len tokens would leave no room for output", where=origin["max_seq_len"],
            hint=f"set max_seq_len to the longest prompt plus the longest answer, e.g. "
                 f"{limits.max_input_len + DEFAULT_OUTPUT_SEQ}")
    if backend != "trtllm":
        return
    built = limits.as_built(spec.max_draft_len)
    if built["max_num_tokens"] != limits.max_num_tokens:
        notes.append(f"trtllm-build raises max_num_tokens {limits.max_num_tokens} to {built['max_num_tokens']} "
                     f"= max_batch_size {limits.max_batch_size} x (max_draft_len {spec.max_draft_len} + 1)")
    if built["max_num_tokens"] < limits.max_input_len:
        notes.append(f"max_input_len {limits.max_input_len} is above max_num_tokens {built['max_num_tokens']}: "
                     "trtllm-build keeps it (context FMHA is on), but TensorRT-LLM's executor then admits "
                     f"prompts of at most min(max_seq_len - 1, max_num_tokens) = "
                     f"{min(built['max_seq_len'] - 1, built['max_num_tokens'])} tokens; set --max-num-tokens "
                     f"{limits.max_input_len} (build.max_num_tokens) to serve prompts of max_input_len tokens")
    _check_sliding_windows(info, built["max_seq_len"], spec.max_draft_len, origin, notes)
    if info.max_position_embeddings is not None and limits.max_seq_len > info.max_position_embeddings:
        notes.append(f"max_seq_len {limits.max_seq_len} is above the model's max_position_embeddings "
                     f"{info.max_position_embeddings}; quality beyond it depends on its rope scaling")


def _check_sliding_windows(info: HfModelInfo, built_seq_len: int, draft: int, origin: Mapping[str, str],
                           notes: list[str]) -> None:
    """A Lookahead engine of a model with sliding-window layers serves it exactly only when its
    max_seq_len (as built) is within the smallest window (:mod:`trtlade.trtllm.windows`)."""
    windows = info.sliding_windows
    if windows is None:
        return
    refusal = lookahead_refusal(windows, built_seq_len)
    if refusal is None:
        notes.append(within_note(windows, built_seq_len))
        return
    raise BuildError(
        f"a Lookahead engine of {info.architecture} would not be the model: {refusal}",
        where=origin["max_seq_len"],
        hint=f"build with --max-seq-len {windows.smallest - draft} or less (trtllm-build adds the {draft} draft "
             f"tokens: {windows.smallest} in all, which the windows cover), or serve the model on trtlade's "
             "reference engine (--backend reference; it applies the windows exactly)")


#: What builds a quantized engine upstream (trtlade converts full-precision checkpoints only).
_QUANTIZED_HINT = (
    "build from the model's full-precision checkpoint (bf16/fp16), or quantize with TensorRT-LLM's own tools, "
    "which trtlade does not drive: examples/quantization/quantize.py --qformat fp8|int4_awq|w4a8_awq (ModelOpt, "
    "from the full-precision weights), or the model's examples/models/core/<model>/convert_checkpoint.py "
    "--use_weight_only --weight_only_precision int4_gptq --quant_ckpt_path for a GPTQ checkpoint; then "
    "trtllm-build --speculative_decoding_mode lookahead_decoding --max_draft_len as `trtlade spec` prints it, "
    "and `trtlade validate-config` against that engine")


def _refuse_quantized(info: HfModelInfo, where: str) -> None:
    """A checkpoint with a ``quantization_config`` (AWQ, GPTQ, FP8, ...) is refused by name: trtlade's
    conversion (``from_hugging_face`` with ``QuantConfig()``) reads full-precision weights only."""
    if info.quant_method is None:
        return
    raise BuildError(f"the checkpoint is quantized (config.json quantization_config.quant_method: "
                     f"{info.quant_method}); trtlade build converts full-precision checkpoints only",
                     where=f"{where}:quantization_config", hint=_QUANTIZED_HINT)


def _check_qwen3(info: HfModelInfo, installed: str | None, where: str, notes: list[str]) -> None:
    """The first stock release that converts this Qwen3 checkpoint (its head_dim, MoE), refused before any
    weights are read when the installed 1.x release is older; a 0.x install may be a build patched for
    Qwen3, which the conversion probe settles."""
    moe = info.architecture == "Qwen3MoeForCausalLM" or info.model_type == "qwen3_moe"
    head_dim = info.explicit_head_dim is not None
    first, floors = qwen3_floor(moe=moe, head_dim=head_dim)
    why = "; ".join(f"{f.feature}: {f.first} ({f.source})" for f in floors)
    if info.tied_embeddings:
        notes.append(QWEN3_TIED_EMBEDDINGS_NOTE)
    if installed is not None and parse_version(installed).major >= 1 and not supports_qwen3(
            installed, moe=moe, head_dim=head_dim):
        detail = f" (head_dim {info.explicit_head_dim})" if head_dim else ""
        raise BuildError(f"TensorRT-LLM {installed} does not convert this Qwen3 checkpoint{detail}: the first "
                         f"release that does is {first} ({why})", where=f"{where}:architectures[0]",
                         hint=f"pip install 'tensorrt-llm>={first},<1.3' (trtlade supports up to 1.2), or serve "
                              "this model with --backend reference")
    notes.append(f"this Qwen3 checkpoint needs TensorRT-LLM >= {first}, < 1.3 ({why}), or a 0.x build patched "
                 "for Qwen3; " + (f"installed: {installed}" if installed else "the installed version is checked "
                                  "before any weights are converted"))

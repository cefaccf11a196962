"""A TensorRT-LLM engine directory's ``config.json``, read without importing tensorrt_llm, and the
checks that a lookahead spec and a build section agree with it.

``trtllm-build`` writes ``config.json`` (rank 0) next to ``rank{r}.engine`` per rank. The keys trtlade
reads (present from 0.13 to 1.2)::

    version                                      "0.16.0"
    pretrained_config.architecture / .dtype      "Qwen3ForCausalLM" / "bfloat16"
    pretrained_config.mapping.{world_size,tp_size,pp_size}
    build_config.{max_batch_size,max_input_len,max_seq_len,max_num_tokens,max_beam_width}
    build_config.max_draft_len                   7 for (4,2,4)
    build_config.speculative_decoding_mode       8 = LOOKAHEAD_DECODING (an int flag)
    build_config.kv_cache_type, build_config.plugin_config.*

The one check that matters most: the server's (W,N,G) must give *exactly* the engine's
``max_draft_len`` (TensorRT-LLM's examples/lookahead/README.md). (4,3,4) needs 15, the size of TensorRT-LLM's
default; an executor given no (W,N,G) on an engine built with 39 dies at start with ``Assertion failed: 16 != 40``
(tensorrtllm_backend #710), one given a larger spec than the engine's with ``Assertion failed: maxDraftTokens <=
mModelConfig.getMaxDecodingDraftTokens()``, and a smaller one is not caught at start::

    >>> from trtlade.spec import LookaheadSpec
    >>> eng = EngineConfig.from_dict({"version": "0.16.0",
    ...     "pretrained_config": {"architecture": "Qwen3ForCausalLM", "dtype": "bfloat16"},
    ...     "build_config": {"max_batch_size": 8, "max_input_len": 2048, "max_seq_len": 4135,
    ...                      "max_num_tokens": 8192, "max_draft_len": 39, "speculative_decoding_mode": 8}},
    ...     path="/engines/qwen3")
    >>> [d.code for d in check_engine(LookaheadSpec(4, 3, 4), eng) if d.severity == "error"]
    ['engine-max-draft-len']
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from trtlade.errors import TrtladeError
from trtlade.diagnostics import Diagnostic
from trtlade.spec import LookaheadSpec, fitting_specs
from trtlade.trtllm.compat import MAX_VERSION_EXCLUSIVE, is_supported, known_bugs, parse_version
from trtlade.trtllm.windows import from_engine_config, lookahead_refusal

if TYPE_CHECKING:  # pragma: no cover
    from trtlade.config.schema import BuildSection

__all__ = [
    "EngineConfig",
    "EngineConfigError",
    "SpeculativeDecodingMode",
    "SUPPORTED_VERSIONS",
    "CONFIG_FILE",
    "MAX_CONFIG_BYTES",
    "version_supported",
    "read_engine_config",
    "check_engine",
    "specs_fitting_engine",
]

CONFIG_FILE = "config.json"

#: Engine config.json files are a few KiB; anything this large is not one.
MAX_CONFIG_BYTES = 16 * 1024 * 1024

#: The supported TensorRT-LLM range, as pip spells it (the range itself lives in trtlade.trtllm.compat).
SUPPORTED_VERSIONS = ">=0.16,<1.3"


class SpeculativeDecodingMode:
    """``build_config.speculative_decoding_mode``: TensorRT-LLM's ``SpeculativeDecodingMode`` IntFlag."""

    NONE = 1
    DRAFT_TOKENS_EXTERNAL = 2
    MEDUSA = 4
    LOOKAHEAD_DECODING = 8
    EXPLICIT_DRAFT_TOKENS = 16
    EAGLE = 32

    NAMES: dict[int, str] = {
        1: "NONE", 2: "DRAFT_TOKENS_EXTERNAL", 4: "MEDUSA", 8: "LOOKAHEAD_DECODING",
        16: "EXPLICIT_DRAFT_TOKENS", 32: "EAGLE",
    }

    @classmethod
    def name(cls, value: int) -> str:
        """``8 -> "LOOKAHEAD_DECODING"``; combined or unknown flags are spelled out (``"UNKNOWN(64)"``)."""
        if value in cls.NAMES:
            return cls.NAMES[value]
        parts = [n for v, n in cls.NAMES.items() if value & v]
        return "|".join(parts) if parts and sum(v for v in cls.NAMES if value & v) == value else f"UNKNOWN({value})"

    @classmethod
    def parse(cls, value: Any) -> int:
        """An int flag, or a name in any case (``"lookahead_decoding"``,
        ``"SpeculativeDecodingMode.LOOKAHEAD_DECODING"``). Raises ValueError otherwise."""
        if isinstance(value, bool):
            raise ValueError(f"not a speculative decoding mode: {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            text = value.strip().rsplit(".", 1)[-1].upper()
            if text.isdigit():
                return int(text)
            for flag, name in cls.NAMES.items():
                if text == name:
                    return flag
        raise ValueError(f"not a speculative decoding mode: {value!r}")


class EngineConfigError(TrtladeError, ValueError):
    """The engine directory or its config.json cannot be read: ``message`` says what, ``hint`` what to do."""


def version_supported(version: str | None) -> bool | None:
    """True inside ``0.16 <= version < 1.3``, False outside, None when the version is unreadable.

    >>> version_supported("0.16.0"), version_supported("1.3.0rc1"), version_supported("junk")
    (True, False, None)
    """
    if not isinstance(version, str):
        return None
    try:
        parse_version(version)
    except ValueError:
        return None
    return is_supported(version)


@dataclass(frozen=True)
class EngineConfig:
    """What trtlade needs from an engine directory (see the module docstring for the key names)."""

    path: Path
    version: str | None
    architecture: str
    dtype: str
    world_size: int
    tp_size: int
    pp_size: int
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int | None
    max_beam_width: int
    max_draft_len: int
    speculative_decoding_mode: int
    kv_cache_type: str | None = None
    plugin_config: Mapping[str, Any] = field(default_factory=dict, repr=False)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: ``rank{r}.engine`` files found in the directory, sorted by rank.
    rank_engines: tuple[str, ...] = ()
    #: The text of config.json (to locate keys for diagnostics); empty when built from a dict.
    text: str = field(default="", repr=False, compare=False)

    # ------------------------------------------------------------------ derived
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def is_lookahead(self) -> bool:
        return bool(self.speculative_decoding_mode & SpeculativeDecodingMode.LOOKAHEAD_DECODING)

    @property
    def speculative_decoding_mode_name(self) -> str:
        return SpeculativeDecodingMode.name(self.speculative_decoding_mode)

    @property
    def missing_rank_engines(self) -> tuple[str, ...]:
        """``rank{r}.engine`` names expected for ``world_size`` ranks but absent."""
        present = set(self.rank_engines)
        return tuple(f"rank{r}.engine" for r in range(self.world_size) if f"rank{r}.engine" not in present)

    @property
    def paged_kv_cache(self) -> bool | None:
        """True/False when the config says, None when it does not."""
        if isinstance(self.kv_cache_type, str):
            return self.kv_cache_type.strip().rsplit(".", 1)[-1].upper() == "PAGED"
        value = self.plugin_config.get("paged_kv_cache")
        return value if isinstance(value, bool) else None

    @property
    def packed_context_fmha(self) -> bool:
        """Context FMHA with packed (unpadded) input: ``plugin_config.context_fmha`` and
        ``remove_input_padding``, both on by default in trtllm-build (absent keys count as on)."""
        return (self.plugin_config.get("context_fmha", True) is not False
                and self.plugin_config.get("remove_input_padding", True) is not False)

    @property
    def executor_max_input_len(self) -> int:
        """The longest prompt the executor admits, as TensorRT-LLM's ``TrtGptModel`` constructor sets
        it (cpp/tensorrt_llm/batch_manager/trtGptModel.h, 0.16 to 1.2; trtlade never enables chunked
        context, which would make it ``max_seq_len - 1``): ``min(max_seq_len - 1, max_num_tokens)``
        with context FMHA and packed input (the default build), else ``max_input_len``. A longer prompt
        fails in ``LlmRequest::validate`` ("Prompt length (%d) exceeds maximum input length (%d).").

        >>> eng = EngineConfig.from_dict({"pretrained_config": {"architecture": "Qwen3ForCausalLM",
        ...     "dtype": "bfloat16"}, "build_config": {"max_batch_size": 8, "max_input_len": 16384,
        ...     "max_seq_len": 20480, "max_num_tokens": 8192}}, path="e")
        >>> eng.executor_max_input_len
        8192
        """
        if self.packed_context_fmha and self.max_num_tokens is not None:
            return min(self.max_seq_len - 1, self.max_num_tokens)
        return self.max_input_len

    def locate(self, dotted: str) -> tuple[int, int] | None:
        """1-based (line, column) of the key ``dotted`` (``build_config.max_draft_len``) in config.json,
        found by scanning for each quoted key in turn; None when unknown."""
        if not self.text:
            return None
        pos = 0
        for key in dotted.split("."):
            match = re.compile(r'"' + re.escape(key) + r'"\s*:').search(self.text, pos)
            if match is None:
                return None
            pos = match.start()
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, column

    def locate_nearest(self, dotted: str) -> tuple[int, int] | None:
        """:meth:`locate` of ``dotted`` or of its nearest present parent; (1, 1) for a key that is
        absent altogether (the diagnostic is about the whole file); None without the file's text."""
        if not self.text:
            return None
        parts = dotted.split(".")
        while parts:
            pos = self.locate(".".join(parts))
            if pos is not None:
                return pos
            parts.pop()
        return (1, 1)

    def summary(self) -> dict[str, Any]:
        """The fields as plain data (for ``--json`` outputs and reports)."""
        return {
            "path": str(self.path), "version": self.version, "architecture": self.architecture,
            "dtype": self.dtype, "world_size": self.world_size, "tp_size": self.tp_size,
            "pp_size": self.pp_size, "max_batch_size": self.max_batch_size,
            "max_input_len": self.max_input_len, "max_seq_len": self.max_seq_len,
            "max_num_tokens": self.max_num_tokens, "max_beam_width": self.max_beam_width,
            "max_draft_len": self.max_draft_len,
            "speculative_decoding_mode": self.speculative_decoding_mode_name,
            "kv_cache_type": self.kv_cache_type, "rank_engines": list(self.rank_engines),
        }

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Any, *, path: str | Path, text: str = "",
                  rank_engines: tuple[str, ...] = ()) -> "EngineConfig":
        """Read the parsed config.json ``data``; raise :class:`EngineConfigError` naming the bad key."""
        where = Path(path) / CONFIG_FILE
        if not isinstance(data, dict):
            raise EngineConfigError(f"{where}: the top level is a {type(data).__name__}, not a JSON object",
                                    hint="this is not a TensorRT-LLM engine config.json")
        _refuse_other_formats(data, where)
        pretrained = _section(data, "pretrained_config", where)
        build = _section(data, "build_config", where)
        mapping = pretrained.get("mapping") or {}
        if not isinstance(mapping, dict):
            raise EngineConfigError(f"{where}: pretrained_config.mapping is not an object",
                                    hint="rebuild the engine with trtllm-build")
        tp = _int(mapping, "tp_size", where, "pretrained_config.mapping", default=1)
        pp = _int(mapping, "pp_size", where, "pretrained_config.mapping", default=1)
        cp = _int(mapping, "cp_size", where, "pretrained_config.mapping", default=1)
        world = _int(mapping, "world_size", where, "pretrained_config.mapping", default=tp * pp * cp)
        raw_mode = build.get("speculative_decoding_mode", SpeculativeDecodingMode.NONE)
        try:
            mode = SpeculativeDecodingMode.parse(raw_mode)
        except ValueError:
            raise EngineConfigError(
                f"{where}: build_config.speculative_decoding_mode is {raw_mode!r}, not a mode",
                hint="expected an int flag (8 = LOOKAHEAD_DECODING) or a name such as LOOKAHEAD_DECODING",
            ) from None
        kv = build.get("kv_cache_type")
        plugin = build.get("plugin_config") or {}
        version = data.get("version")
        return cls(
            path=Path(path),
            version=str(version) if version is not None else None,
            architecture=_str(pretrained, "architecture", where, "pretrained_config"),
            dtype=_str(pretrained, "dtype", where, "pretrained_config"),
            world_size=world, tp_size=tp, pp_size=pp,
            max_batch_size=_int(build, "max_batch_size", where, "build_config"),
            max_input_len=_int(build, "max_input_len", where, "build_config"),
            max_seq_len=_int(build, "max_seq_len", where, "build_config"),
            max_num_tokens=_int(build, "max_num_tokens", where, "build_config", default=None),
            max_beam_width=_int(build, "max_beam_width", where, "build_config", default=1),
            max_draft_len=_int(build, "max_draft_len", where, "build_config", default=0),
            speculative_decoding_mode=mode,
            kv_cache_type=str(kv) if kv is not None else None,
            plugin_config=dict(plugin) if isinstance(plugin, dict) else {},
            raw=data,
            rank_engines=tuple(rank_engines),
            text=text,
        )


def _refuse_other_formats(data: dict[str, Any], where: Path) -> None:
    """Clear errors for the config.json files people point at by mistake."""
    if "build_config" in data or "pretrained_config" in data:
        return
    if "architectures" in data and "model_type" in data:
        raise EngineConfigError(
            f"{where} is a Hugging Face model config, not a TensorRT-LLM engine config",
            hint="point at the engine directory trtllm-build wrote (its --output_dir), "
                 "e.g. the bundle's engine/ folder made by `trtlade build`")
    if "architecture" in data and "mapping" in data:
        raise EngineConfigError(
            f"{where} is a TensorRT-LLM checkpoint config, not an engine config",
            hint="build the engine from this checkpoint first: `trtlade build` or "
                 "trtllm-build --checkpoint_dir ... --speculative_decoding_mode lookahead_decoding")
    if "builder_config" in data and "plugin_config" in data:
        raise EngineConfigError(
            f"{where} is an engine config in the pre-0.8 format",
            hint=f"rebuild the engine with TensorRT-LLM {SUPPORTED_VERSIONS.replace(',', ', ')}")


def _section(data: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        raise EngineConfigError(f"{where}: missing key {key!r}",
                                hint="this is not a config.json written by trtllm-build; rebuild the engine")
    if not isinstance(value, dict):
        raise EngineConfigError(f"{where}: {key} is a {type(value).__name__}, not an object",
                                hint="rebuild the engine with trtllm-build")
    return value


_MISSING: Any = object()


def _int(section: dict[str, Any], key: str, where: Path, prefix: str, default: Any = _MISSING) -> Any:
    value = section.get(key, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise EngineConfigError(f"{where}: missing key {prefix}.{key}",
                                    hint="this config.json is incomplete; rebuild the engine with trtllm-build")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineConfigError(f"{where}: {prefix}.{key} is {value!r}, not an integer",
                                hint="rebuild the engine with trtllm-build")
    return value


def _str(section: dict[str, Any], key: str, where: Path, prefix: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise EngineConfigError(
            f"{where}: {'missing key' if value is None else 'bad value for'} {prefix}.{key}"
            + ("" if value is None else f" ({value!r})"),
            hint="this config.json is incomplete; rebuild the engine with trtllm-build")
    return value


def read_engine_config(engine_dir: str | Path) -> EngineConfig:
    """Read ``engine_dir/config.json`` and list the ``rank*.engine`` files.

    Raises :class:`EngineConfigError` for a missing directory or file, a file that is too large,
    not UTF-8 or not JSON, and for missing keys. Accepts the path of the config.json itself too.
    """
    path = Path(engine_dir)
    if path.is_file() and path.name == CONFIG_FILE:
        path = path.parent
    if not path.exists():
        raise EngineConfigError(f"engine directory {path} does not exist",
                                hint="build it with `trtlade build`, or pass the directory trtllm-build wrote")
    if not path.is_dir():
        raise EngineConfigError(f"{path} is not a directory",
                                hint="pass the engine directory (the one holding config.json and rank0.engine)")
    config = path / CONFIG_FILE
    if not config.is_file():
        inner = path / "engine"
        raise EngineConfigError(f"{path} has no {CONFIG_FILE}",
                                hint=f"this is a bundle: pass its engine folder, {inner}" if (inner / CONFIG_FILE)
                                .is_file() else "is this the engine directory? trtllm-build writes config.json and "
                                "rank<r>.engine into its --output_dir")
    size = config.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise EngineConfigError(f"{config} is {size} bytes, larger than any engine config "
                                f"({MAX_CONFIG_BYTES} bytes at most)", hint="point at the engine's config.json")
    blob = config.read_bytes()
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineConfigError(f"{config} is not UTF-8 text (byte {exc.start})",
                                hint="the file is damaged or not a config.json; rebuild the engine") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineConfigError(f"{config}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}",
                                hint="the file is damaged; rebuild the engine") from None
    ranks = sorted((p.name for p in path.glob("rank*.engine") if re.fullmatch(r"rank\d+\.engine", p.name)),
                   key=lambda n: int(n[4:-7]))
    return EngineConfig.from_dict(data, path=path, text=text, rank_engines=tuple(ranks))


# ====================================================================== checks
def check_engine(spec: LookaheadSpec, engine: EngineConfig, build: "BuildSection | None" = None, *,
                 source: str | None = None, spec_path: str = "lookahead.spec") -> list[Diagnostic]:
    """Every check of ``spec`` (the server's (W,N,G)) and ``build`` against a built engine.

    Findings about the config (the spec, build.*) carry ``file=source`` and a config field path
    (``spec_path``, ``build.tp_size`` ...; the caller fills in line/column from its YAML positions);
    findings about the engine itself point at the engine's config.json key. ``build`` fields are
    compared only when the config sets them (``model_fields_set``): defaults promise nothing.

    Checks: version in range; speculative_decoding_mode is lookahead (unless the spec is (1,1,0)
    and the engine plain); max_draft_len > 0 for a lookahead engine and equal to the spec's exactly;
    max_beam_width 1; paged KV cache, GPT attention plugin and removed input padding (in-flight
    batching); dtype in the lookahead support matrix; rank engine files present; max_num_tokens >=
    max_batch_size * (max_draft_len + 1); room for output in max_seq_len; max_input_len not above the
    executor's own prompt limit (:attr:`EngineConfig.executor_max_input_len`); tp/pp and sizes of
    ``build`` not larger than the engine's.
    """
    ctx = _Ctx(spec, engine, source, spec_path)
    checks = (_check_version, _check_mode_and_draft_len, _check_beam_width, _check_batching_support,
              _check_dtype, _check_rank_files, _check_num_tokens, _check_seq_len, _check_prompt_limit,
              _check_sliding_windows)
    for check in checks:
        check(ctx)
    if build is not None:
        _check_build_section(ctx, build)
    return ctx.out


@dataclass
class _Ctx:
    spec: LookaheadSpec
    engine: EngineConfig
    source: str | None
    spec_path: str
    out: list[Diagnostic] = field(default_factory=list)

    @property
    def engine_file(self) -> str:
        return str(self.engine.config_path)

    def on_config(self, severity: str, code: str, path: str, message: str, hint: str = "") -> None:
        self.out.append(Diagnostic(severity, message, hint=hint, path=path, file=self.source,  # type: ignore[arg-type]
                                   code=code))

    def on_engine(self, severity: str, code: str, key: str, message: str, hint: str = "") -> None:
        pos = self.engine.locate_nearest(key)
        self.out.append(Diagnostic(severity, message, hint=hint, path=key, file=self.engine_file,  # type: ignore[arg-type]
                                   line=pos[0] if pos else None, column=pos[1] if pos else None, code=code))

    @property
    def spec_label(self) -> str:
        return f"{self.spec_path} ({self.spec})"


def _check_version(ctx: _Ctx) -> None:
    version = ctx.engine.version
    ok = version_supported(version)
    if ok is None:
        ctx.on_engine("warning", "engine-version-unknown", "version",
                      f"the engine's TensorRT-LLM version is {'missing' if version is None else repr(version)}",
                      hint=f"trtlade supports engines built by TensorRT-LLM {SUPPORTED_VERSIONS}")
    elif not ok:
        parsed = parse_version(version)  # type: ignore[arg-type]
        newer = (parsed.major, parsed.minor) >= MAX_VERSION_EXCLUSIVE
        why = ("TensorRT-LLM removed the TensorRT-engine backend, and Lookahead with it, from 1.3 on (release "
               "candidates included)" if newer else "Lookahead on the executor API is supported from 0.16")
        ctx.on_engine("error", "engine-version", "version",
                      f"the engine was built by TensorRT-LLM {version}, outside the supported range "
                      f"{SUPPORTED_VERSIONS}: {why}",
                      hint="rebuild the engine with tensorrt-llm>=0.16,<1.3 (pip install -e '.[trtllm-engine]')")
    elif ctx.engine.is_lookahead:
        for bug in known_bugs(version, ctx.engine.raw.get("build_config")):
            ctx.on_engine("warning", "engine-version-known-bug", "version", bug.message(version),
                          hint=f"rebuild and serve with TensorRT-LLM {bug.instead}; trtlade does not refuse it")


#: The executor's lookahead config when it is given none: executor.h's kDefaultLookaheadDecoding* sizes, which a
#: default-constructed LookaheadDecodingConfig (the LookaheadModule's execution config) holds.
EXECUTOR_DEFAULT_SPEC = LookaheadSpec(4, 3, 4)


def draft_len_consequence(spec_draft: int, engine_draft: int) -> str:
    """What TensorRT-LLM does with an executor (W,N,G) whose draft length is not the engine's. A larger one fails at
    start (cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp, ``setupSpeculativeDecodingModule``:
    ``TLLM_CHECK(maxDraftTokens <= mModelConfig.getMaxDecodingDraftTokens())``); a smaller one passes that check and
    sets the decoder to its own size, so nothing refuses it at start, but it is outside the contract
    examples/lookahead/README.md states (``--max_draft_len == max_draft_len(W, N, G)``).

    >>> print(draft_len_consequence(83, 39))
    TensorRT-LLM fails at start with 'Assertion failed: maxDraftTokens <= mModelConfig.getMaxDecodingDraftTokens()'
    >>> 'not caught at start' in draft_len_consequence(7, 39)
    True
    """
    if spec_draft > engine_draft:
        return ("TensorRT-LLM fails at start with 'Assertion failed: maxDraftTokens <= "
                "mModelConfig.getMaxDecodingDraftTokens()'")
    return ("TensorRT-LLM's lookahead guide requires the two to be equal (examples/lookahead/README.md); its executor "
            f"checks only that the draft fits, so the mismatch is not caught at start: the engine, built for "
            f"{engine_draft + 1} tokens a step, would run with {spec_draft + 1}")


def missing_config_consequence(engine_draft: int) -> str:
    """What TensorRT-LLM does on a lookahead engine when the executor gets no lookahead config: the decoder keeps the
    engine's size and the default execution config (:data:`EXECUTOR_DEFAULT_SPEC`, 16 tokens a step), and
    cpp/tensorrt_llm/layers/lookaheadDecodingLayer.cpp (``CpuAlgorithmResources``) asserts they agree
    (``"%d != %d"``, the "16 != 40" of tensorrtllm_backend#710). On an engine whose size is the default's it starts,
    and the decoder step of every request checks the executor's config (createNewDecoderRequests.cpp,
    ``CreateNewDecoderRequests``). Old releases called ``.value()`` on the empty config (NVIDIA/TensorRT-LLM#2020).

    >>> print(missing_config_consequence(39).split(" (")[0])
    TensorRT-LLM fails at start with 'Assertion failed: 16 != 40'
    >>> missing_config_consequence(15)[:43]
    'TensorRT-LLM starts, and every request fail'
    """
    tokens = EXECUTOR_DEFAULT_SPEC.decoding_tokens
    if engine_draft + 1 != tokens:
        return (f"TensorRT-LLM fails at start with 'Assertion failed: {tokens} != {engine_draft + 1}' (the default "
                f"({EXECUTOR_DEFAULT_SPEC}) against the engine's {engine_draft + 1} tokens a step; 'bad optional "
                "access' in old releases)")
    return ("TensorRT-LLM starts, and every request fails with 'Lookahead decoding config must be provided' ('bad "
            "optional access' at start in old releases)")


def _build_hint(spec: LookaheadSpec) -> str:
    return (f"rebuild with `trtlade build`, or trtllm-build --speculative_decoding_mode lookahead_decoding "
            f"--max_draft_len {spec.max_draft_len}")


def _check_mode_and_draft_len(ctx: _Ctx) -> None:
    spec, engine = ctx.spec, ctx.engine
    if not engine.is_lookahead:
        if spec.is_autoregressive:
            return  # (1,1,0) on a plain engine: autoregressive serving, nothing to agree on
        built = ("without speculative decoding" if engine.speculative_decoding_mode == SpeculativeDecodingMode.NONE
                 else f"for {engine.speculative_decoding_mode_name}, not lookahead")
        ctx.on_config("error", "engine-not-lookahead", ctx.spec_path,
                      f"the engine {engine.path} was built {built} (speculative_decoding_mode "
                      f"{engine.speculative_decoding_mode}) but {ctx.spec_label} asks for lookahead "
                      f"with max_draft_len {spec.max_draft_len}",
                      hint=_build_hint(spec) + "; or set the spec to 1,1,0 to serve this engine without lookahead")
        return
    if engine.max_draft_len <= 0:
        ctx.on_engine("error", "engine-max-draft-len-zero", "build_config.max_draft_len",
                      f"the engine is a lookahead engine with max_draft_len {engine.max_draft_len}: "
                      "TensorRT-LLM refuses to run it",
                      hint=_build_hint(spec) if not spec.is_autoregressive else
                      "rebuild with trtllm-build --speculative_decoding_mode lookahead_decoding "
                      "--max_draft_len <formula(W,N,G)>")
        return
    if engine.max_draft_len != spec.max_draft_len:
        fits = specs_fitting_engine(engine, near=spec)
        fit_text = (f"specs that fit this engine (max_draft_len {engine.max_draft_len}): "
                    + ", ".join(f"({s})" for s in fits) if fits else
                    f"no spec with sizes up to 16 gives max_draft_len {engine.max_draft_len}")
        if spec.is_autoregressive:
            ctx.on_config("error", "engine-max-draft-len", ctx.spec_path,
                          f"the engine was built for lookahead with max_draft_len {engine.max_draft_len} but "
                          f"{ctx.spec_label} needs 0 (it turns lookahead off): the executor must be given a "
                          f"(W,N,G) with max_draft_len exactly {engine.max_draft_len} (examples/lookahead/README.md); "
                          f"given none, {missing_config_consequence(engine.max_draft_len)}",
                          hint=f"{fit_text}; to decode autoregressively by default keep such a spec and set "
                               "lookahead.request_default: 1,1,0, or serve an engine built without lookahead")
            return
        ctx.on_config("error", "engine-max-draft-len", ctx.spec_path,
                      f"the engine was built with max_draft_len {engine.max_draft_len} but {ctx.spec_label} "
                      f"needs {spec.max_draft_len}: "
                      f"{draft_len_consequence(spec.max_draft_len, engine.max_draft_len)}",
                      hint=f"{fit_text}; or {_build_hint(spec)}")


def specs_fitting_engine(engine: EngineConfig, near: LookaheadSpec | None = None,
                         limit: int = 4) -> list[LookaheadSpec]:
    """Meaningful specs (no warnings, not autoregressive) whose max_draft_len is the engine's, the
    closest to ``near`` first (default (4,3,4), TensorRT-LLM's later default).

    >>> [str(s) for s in specs_fitting_engine(EngineConfig.from_dict({"pretrained_config": {
    ...     "architecture": "Qwen3ForCausalLM", "dtype": "bfloat16"}, "build_config": {"max_batch_size": 8,
    ...     "max_input_len": 2048, "max_seq_len": 4135, "max_draft_len": 39}}, path="e"))]
    ['4,6,4', '4,5,6', '5,5,5', '6,5,4']
    """
    if near is None or near.is_autoregressive:
        near = LookaheadSpec(4, 3, 4)
    candidates = fitting_specs(engine.max_draft_len, near=near, limit=10_000)
    return [s for s in candidates if not s.is_autoregressive and not s.warnings()][:limit]


def _check_beam_width(ctx: _Ctx) -> None:
    if ctx.engine.max_beam_width != 1:
        ctx.on_engine("error", "engine-beam-width", "build_config.max_beam_width",
                      f"the engine was built with max_beam_width {ctx.engine.max_beam_width}; lookahead "
                      "decodes greedily and needs beam width 1",
                      hint="rebuild with --max_beam_width 1 (the default)")


def _check_batching_support(ctx: _Ctx) -> None:
    """The executor runs in-flight batching, which needs paged KV cache, the GPT attention plugin and
    packed (unpadded) inputs; lookahead's support matrix requires paged KV cache too."""
    engine = ctx.engine
    if engine.paged_kv_cache is False:
        key = ("build_config.kv_cache_type" if engine.kv_cache_type is not None
               else "build_config.plugin_config.paged_kv_cache")
        ctx.on_engine("error", "engine-kv-cache", key,
                      f"the engine's KV cache is not paged ({key.rsplit('.', 1)[-1]} = "
                      f"{engine.kv_cache_type if engine.kv_cache_type is not None else False}); lookahead and "
                      "in-flight batching need a paged KV cache",
                      hint="rebuild with --kv_cache_type paged (the default)")
    attention = engine.plugin_config.get("gpt_attention_plugin", "auto")
    if attention is None or (isinstance(attention, str) and attention.lower() == "disable"):
        ctx.on_engine("error", "engine-attention-plugin", "build_config.plugin_config.gpt_attention_plugin",
                      "the engine was built without the GPT attention plugin; in-flight batching needs it",
                      hint="rebuild with --gpt_attention_plugin auto (the default)")
    if engine.plugin_config.get("remove_input_padding", True) is False:
        ctx.on_engine("error", "engine-input-padding", "build_config.plugin_config.remove_input_padding",
                      "the engine was built with padded inputs (remove_input_padding false); in-flight "
                      "batching needs packed inputs",
                      hint="rebuild with --remove_input_padding enable (the default)")


def _check_dtype(ctx: _Ctx) -> None:
    dtype = ctx.engine.dtype.lower()
    if ctx.engine.is_lookahead and dtype not in {"float16", "bfloat16", "fp8", "float8"}:
        ctx.on_engine("warning", "engine-dtype", "pretrained_config.dtype",
                      f"the engine's dtype is {ctx.engine.dtype}; TensorRT-LLM's lookahead support matrix "
                      "lists FP16, BF16 and FP8 only",
                      hint="convert the checkpoint with dtype float16 or bfloat16 (model.dtype)")


def _check_rank_files(ctx: _Ctx) -> None:
    missing = ctx.engine.missing_rank_engines
    if missing:
        # a note: CI keeps the few-KiB config.json alone (and `--strict` fails on warnings); serving fails loudly
        ctx.on_engine("info", "engine-rank-files", "pretrained_config.mapping.world_size",
                      f"the engine has world_size {ctx.engine.world_size} but {', '.join(missing)} "
                      f"{'is' if len(missing) == 1 else 'are'} missing from {ctx.engine.path}; only its "
                      "config.json was checked",
                      hint="fine for a CI check against a copied config.json; serving needs every rank file")


def _draft_len_in_use(ctx: _Ctx) -> int:
    """The draft length the running engine will use per sequence (0 for a plain engine)."""
    return ctx.engine.max_draft_len if ctx.engine.is_lookahead else 0


def _check_num_tokens(ctx: _Ctx) -> None:
    engine = ctx.engine
    if engine.max_num_tokens is None or not engine.is_lookahead:
        return
    draft = max(_draft_len_in_use(ctx), ctx.spec.max_draft_len)
    need = engine.max_batch_size * (draft + 1)
    if engine.max_num_tokens < need:
        ctx.on_engine("error", "engine-max-num-tokens", "build_config.max_num_tokens",
                      f"the engine's max_num_tokens {engine.max_num_tokens} is below max_batch_size * "
                      f"(max_draft_len + 1) = {engine.max_batch_size} * {draft + 1} = {need}: a full batch of "
                      "lookahead steps does not fit in one forward",
                      hint=f"rebuild with --max_num_tokens {need} or more (trtllm-build raises it itself; "
                           "this config.json was edited or built otherwise)")


def _check_seq_len(ctx: _Ctx) -> None:
    engine = ctx.engine
    usable = engine.max_seq_len - _draft_len_in_use(ctx)
    if usable < 1:
        ctx.on_engine("error", "engine-max-seq-len", "build_config.max_seq_len",
                      f"the engine's max_seq_len {engine.max_seq_len} leaves no room once its "
                      f"max_draft_len {engine.max_draft_len} is reserved",
                      hint="rebuild with a larger --max_seq_len (trtllm-build adds max_draft_len to it)")
    elif usable <= engine.max_input_len:
        ctx.on_engine("warning", "engine-max-seq-len", "build_config.max_seq_len",
                      f"the engine's max_seq_len {engine.max_seq_len} minus max_draft_len "
                      f"{_draft_len_in_use(ctx)} is {usable}, not above max_input_len {engine.max_input_len}: "
                      "a prompt of max_input_len tokens leaves no room for output",
                      hint="rebuild with --max_seq_len = longest prompt + longest answer")


def _check_prompt_limit(ctx: _Ctx) -> None:
    """trtllm-build keeps ``max_num_tokens < max_input_len`` with a warning only when context FMHA is on
    (tensorrt_llm/_common.py, check_max_num_tokens, 0.16 to 1.2); the executor then admits prompts up
    to max_num_tokens only (:attr:`EngineConfig.executor_max_input_len`)."""
    engine = ctx.engine
    limit = engine.executor_max_input_len
    if limit < engine.max_input_len:
        ctx.on_engine("warning", "engine-prompt-limit", "build_config.max_num_tokens",
                      f"the engine's max_input_len is {engine.max_input_len} but its max_num_tokens is "
                      f"{engine.max_num_tokens}: with context FMHA and packed input TensorRT-LLM's executor "
                      f"admits prompts of at most min(max_seq_len - 1, max_num_tokens) = {limit} tokens "
                      "(TrtGptModel constructor); trtlade serve advertises and admits that limit, longer "
                      "prompts get 400",
                      hint=f"rebuild with --max_num_tokens {engine.max_input_len} or more to serve prompts of "
                           f"max_input_len tokens (build.max_num_tokens)")


def sliding_window_finding(engine: EngineConfig) -> tuple[str, str, str, str] | None:
    """Gemma 2/3 on TensorRT-LLM (:mod:`trtlade.trtllm.windows`) as ``(severity, code, message, hint)``:
    a Lookahead engine past the smallest sliding window is an error (build, validate-config, serve and
    every export refuse it); a plain one is served with one window for every layer (trtlade sets no
    per-layer windows), so past that window it is not the model either: a warning. None otherwise."""
    windows = from_engine_config(engine.raw)
    refusal = None if windows is None else lookahead_refusal(windows, engine.max_seq_len)
    if windows is None or refusal is None:
        return None
    if engine.is_lookahead:
        return ("error", "lookahead-variable-swa",
                f"this Lookahead engine of {engine.architecture} cannot serve the model: {refusal}",
                f"rebuild with `trtlade build --max-seq-len {windows.smallest - engine.max_draft_len}` or less (the "
                "windows then cover the whole sequence), or serve the model on trtlade's reference engine "
                "(serve.engine reference), which applies the windows exactly")
    return ("warning", "plain-engine-global-windows",
            f"{engine.architecture} has {windows.local_layers} sliding-window layers ({windows.source}) and this "
            f"engine holds {engine.max_seq_len} tokens: trtlade passes no KvCacheConfig.max_attention_window, so "
            "TensorRT-LLM gives every layer one window of max_seq_len and past "
            f"{windows.smallest} tokens the output is not the model's",
            f"keep prompts plus answers within {windows.smallest} tokens, or serve the model on the reference "
            "engine (serve.engine reference)")


def _check_sliding_windows(ctx: _Ctx) -> None:
    finding = sliding_window_finding(ctx.engine)
    if finding is not None:
        ctx.on_engine(finding[0], finding[1], "build_config.max_seq_len", finding[2], hint=finding[3])


def _check_build_section(ctx: _Ctx, build: "BuildSection") -> None:
    engine = ctx.engine
    explicit = build.model_fields_set
    for name in ("tp_size", "pp_size"):
        want, have = getattr(build, name), getattr(engine, name)
        if want != have:  # the default (1) is a statement too
            ctx.on_config("error", "engine-parallelism", f"build.{name}",
                          f"the engine was built with {name} {have} (world_size {engine.world_size}) but "
                          f"build.{name} is {want}",
                          hint=f"set build.{name}: {have}, or convert the checkpoint again with {name} {want} "
                               "and rebuild (parallelism is fixed at checkpoint conversion)")
    for name in ("max_batch_size", "max_input_len"):
        want, have = getattr(build, name), getattr(engine, name)
        if name in explicit and have < want:
            ctx.on_config("error", f"engine-{name.replace('_', '-')}", f"build.{name}",
                          f"build.{name} is {want} but the engine was built with {name} {have}",
                          hint=f"rebuild the engine with `trtlade build`, or set build.{name}: {have}")
    draft = _draft_len_in_use(ctx)
    if build.max_seq_len is not None and "max_seq_len" in explicit and engine.max_seq_len < build.max_seq_len + draft:
        ctx.on_config("error", "engine-max-seq-len", "build.max_seq_len",
                      f"build.max_seq_len is {build.max_seq_len} but the engine holds {engine.max_seq_len} "
                      f"tokens per sequence including {draft} draft tokens, i.e. {engine.max_seq_len - draft}",
                      hint="rebuild the engine with `trtlade build` (trtllm-build adds max_draft_len to "
                           f"--max_seq_len), or set build.max_seq_len: {max(engine.max_seq_len - draft, 1)}")
    if (build.max_num_tokens is not None and "max_num_tokens" in explicit and engine.max_num_tokens is not None
            and engine.max_num_tokens < build.max_num_tokens):
        ctx.on_config("error", "engine-max-num-tokens", "build.max_num_tokens",
                      f"build.max_num_tokens is {build.max_num_tokens} but the engine was built with "
                      f"max_num_tokens {engine.max_num_tokens}",
                      hint=f"rebuild the engine, or set build.max_num_tokens: {engine.max_num_tokens}")

"""What ``trtlade serve`` will run: flags over the config file over defaults, resolved and checked.

Light module (no torch, no fastapi): the CLI builds a :class:`ServePlan` first, so every user mistake
is reported before anything heavy is imported or a port is bound.

Precedence: command-line flags > the config file (``--config``, or the ``trtlade.yml`` of a bundle
given as ``--model``) > defaults. Defaults with no config: the embedded SmolLM2-135M-Instruct, the
reference engine, (W,N,G) = (4,2,4), 127.0.0.1:8000.

``--model`` accepts a Hugging Face folder, a trtlade bundle (a folder with ``trtlade-manifest.json``
and ``trtlade.yml``, made by ``trtlade build``), a TensorRT-LLM engine directory (``config.json`` with
``build_config`` + ``rank0.engine``; trtllm engine only, needs ``model.tokenizer``), or a name
resolved under ``model.models_dir`` / ``$TRTLADE_MODELS_DIR``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from trtlade.bundle import CONFIG_FILE, MODELS_DIR_ENV, Bundle, BundleError, is_bundle
from trtlade.errors import PlanError
from trtlade.config.schema import ConfigRuleError, TrtladeConfig
from trtlade.server.identity import KeyRing, KeysFileError, check_key_length, keys_file_path
from trtlade.presets import PRESETS
from trtlade.spec import LookaheadSpec

__all__ = [
    "DEFAULT_SERVE_SPEC",
    "PlanError",
    "ServeFlags",
    "ServePlan",
    "make_plan",
    "is_engine_dir",
]

#: The server's (W,N,G) when no config names one: the user's deployment.
DEFAULT_SERVE_SPEC = LookaheadSpec(4, 2, 4)
ENGINES = ("reference", "trtllm")


@dataclass(frozen=True)
class ServeFlags:
    """The command-line flags as given (None = not given)."""

    config: Optional[Path] = None
    model: Optional[str] = None
    engine: Optional[str] = None
    spec: Optional[LookaheadSpec] = None
    host: Optional[str] = None
    port: Optional[int] = None
    api_key: Optional[str] = None
    preset: Optional[str] = None
    prefix_cache_mb: Optional[int] = None
    prefill_chunk_tokens: Optional[int] = None
    prefill_stall: Optional[float] = None
    prefill_idle_chunk_tokens: Optional[int] = None
    api_keys_file: Optional[Path] = None
    prefix_cache_scope: Optional[str] = None


@dataclass(frozen=True)
class ServePlan:
    """Everything resolved: which engine on which files, with which (W,N,G), where to listen."""

    config: TrtladeConfig
    engine: str
    host: str
    port: int
    api_key: Optional[str]
    model_dir: Optional[Path]  # HF folder (None: the embedded model)
    engine_dir: Optional[Path]  # trtllm only
    tokenizer_dir: Optional[Path]
    served_name: Optional[str]
    config_file: Optional[str] = None
    bundle: Optional[Path] = None
    manifest: Optional[dict[str, Any]] = None
    locate: Any = field(default=None, compare=False, repr=False)
    #: the identities (keys file and API key; None: anyone may call) and the prefix cache's scope
    keys: Optional[KeyRing] = field(default=None, compare=False, repr=False)
    key_warnings: tuple[str, ...] = ()
    prefix_cache_scope: str = "global"
    #: what validate-config warns of the config that serving drops or keeps below its aim (file:line: message)
    config_warnings: tuple[str, ...] = ()

    @property
    def spec(self) -> LookaheadSpec:
        return self.config.lookahead.spec

    @property
    def request_default(self) -> Optional[LookaheadSpec]:
        return self.config.lookahead.request_default

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "model": str(self.model_dir) if self.model_dir else "embedded",
                "engine_dir": str(self.engine_dir) if self.engine_dir else None,
                "spec": str(self.spec), "config": self.config_file,
                "bundle": str(self.bundle) if self.bundle else None}


def _is_gguf_file(path: Path) -> bool:
    """A GGUF file: the reference engine dequantises it once into the models cache."""
    return path.suffix.lower() == ".gguf" and path.is_file()


def is_engine_dir(path: Path) -> bool:
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "build_config" in data


def _load_file(path: Path) -> Any:
    """``trtlade.config.loader.load_config`` (diagnostics with file:line:column)."""
    from trtlade.config.loader import ConfigLoadError, load_config

    if not path.exists():
        raise PlanError(f"config file {path} does not exist", "check the path given to --config", usage=True)
    if path.is_dir():
        raise PlanError(f"--config {path} is a folder, not a file", "give the trtlade config file", usage=True)
    try:
        return load_config(path)
    except ConfigLoadError as exc:
        listing = "\n".join(d.format_text() for d in exc.diagnostics)
        raise PlanError(f"the config {path} is not valid:\n{listing}",
                        "`trtlade validate-config` explains every key; `trtlade config schema` lists them")


def _resolve_model_arg(value: str, models_dir: Optional[Path], env: Mapping[str, str]) -> Path:
    path = Path(value).expanduser()
    if path.exists():
        if not path.is_dir() and not _is_gguf_file(path):
            raise PlanError(f"--model {value}: not a folder nor a .gguf file", "pass a Hugging Face model folder, "
                            "a GGUF file (reference engine), a trtlade bundle folder or a TensorRT-LLM engine "
                            "directory", usage=True)
        return path.resolve()
    base = models_dir or (Path(env[MODELS_DIR_ENV]) if env.get(MODELS_DIR_ENV) else None)
    if base is not None and "/" not in value and (base / value).is_dir():
        return (base / value).resolve()
    where = f" nor under the models directory {base}" if base is not None else \
        f" (and no models directory is set: {MODELS_DIR_ENV} or model.models_dir)"
    raise PlanError(f"--model {value}: no such folder{where}",
                    "models are never downloaded; pass a local Hugging Face folder or a bundle made by "
                    "`trtlade build`", usage=True)


#: ServeFlags fields that are serve.<same name> keys
_SERVE_FLAGS = ("host", "port", "prefix_cache_mb", "prefill_chunk_tokens", "prefill_stall", "prefill_idle_chunk_tokens",
                "prefix_cache_scope")


def _with_flags(config: TrtladeConfig, flags: ServeFlags, model_path: Optional[Path]) -> TrtladeConfig:
    data = config.model_dump(mode="python")
    if flags.spec is not None:
        data["lookahead"]["spec"] = flags.spec
    if flags.engine is not None:
        data["serve"]["engine"] = flags.engine
    if flags.preset is not None:
        data["lookahead"]["preset"] = flags.preset
    for name in _SERVE_FLAGS:  # a flag given overrides the config's serve.<name>
        if (value := getattr(flags, name)) is not None:
            data["serve"][name] = value
    if model_path is not None:
        data["model"]["path"] = model_path
        data["model"]["name"] = None
    try:
        return TrtladeConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = str(err.get("msg")).removeprefix("Value error, ")
        cause = cause_hint = ""
        if flags.spec is not None and ("request_default" in msg or "schedule" in msg):
            cause = f"--spec {LookaheadSpec.parse(flags.spec)}"
            cause_hint = ("a --spec must admit the config's lookahead.request_default and every lookahead.schedule "
                          "band (w<=W, n<=N, g<=G): raise --spec, or change those keys in "
                          f"{flags.config or 'the config'}")
        rule = (err.get("ctx") or {}).get("error")
        if not cause and isinstance(rule, ConfigRuleError) and (given := _flags_given(flags)):
            key = ".".join(str(part) for part in rule.loc)
            cause = f"{' '.join(given)} against {flags.config or 'the config'}" + (f" ({key})" if key else "")
            cause_hint = rule.hint or f"drop the flag, or change {key or 'the config'}"
        where = cause or ".".join(str(p) for p in err.get("loc", ()) if p != "lookahead" or len(err["loc"]) > 1)
        raise PlanError(msg, cause_hint, where=where) from None


def _config_warnings(loaded: Any) -> tuple[str, ...]:
    """The config's warnings that serving it would otherwise keep quiet about (:func:`start_warnings`)."""
    if loaded is None:
        return ()
    from trtlade.config.checks import start_warnings

    return tuple(start_warnings(loaded.document, loaded.config))


def _flags_given(flags: ServeFlags) -> list[str]:
    """The flags that override the config, as given (``--engine trtllm``), for an error the two make together."""
    given = [f"--{name.replace('_', '-')} {value}" for name in ("spec", "engine", "preset", *_SERVE_FLAGS)
             if (value := getattr(flags, name)) is not None]
    return given + (["--model"] if flags.model is not None and flags.config is not None else [])


def make_plan(flags: ServeFlags, env: Optional[Mapping[str, str]] = None) -> ServePlan:
    """Resolve ``flags`` (and the config they name) into a :class:`ServePlan`, or raise PlanError."""
    env = os.environ if env is None else env
    _check_choices(flags)
    loaded, bundle, model_arg = _inputs(flags, env)
    base = loaded.config if loaded is not None else \
        TrtladeConfig.model_validate({"lookahead": {"spec": DEFAULT_SERVE_SPEC}})
    config = _with_flags(base, flags, model_arg)
    resolve = loaded.resolve if loaded is not None else _resolve_path
    _refuse_other_engines_flags(flags, config)
    model_dir, engine_dir, tokenizer_dir = _folders(config, resolve, model_arg, bundle, env)
    api_key = _api_key(flags.api_key, config.serve.api_key_env, env)
    keys, key_warnings = _key_ring(config, flags, resolve, api_key, env)
    scope = _scope(config, keys, flag=flags.prefix_cache_scope is not None)
    return ServePlan(
        config=config, engine=config.serve.engine, host=config.serve.host, port=config.serve.port, api_key=api_key,
        model_dir=model_dir, engine_dir=engine_dir, tokenizer_dir=tokenizer_dir,
        served_name=config.model.served_name, config_file=loaded.file if loaded is not None else None,
        bundle=bundle, manifest=_manifest(bundle), locate=loaded.document.locate if loaded is not None else None,
        keys=keys, key_warnings=tuple(key_warnings), prefix_cache_scope=scope,
        config_warnings=_config_warnings(loaded))


def _check_choices(flags: ServeFlags) -> None:
    """--engine and --preset name one of their choices."""
    if flags.engine is not None and flags.engine not in ENGINES:
        raise PlanError(f"--engine {flags.engine!r}: choose one of {', '.join(ENGINES)}", usage=True,
                        hint="reference: trtlade's own engine (CPU or GPU, any Hugging Face folder); trtllm: a "
                             "TensorRT-LLM engine or a PyTorch-backend bundle")
    if flags.preset is not None and flags.preset not in PRESETS:
        raise PlanError(f"--preset {flags.preset!r}: choose {' or '.join(PRESETS)}", usage=True,
                        hint="fast: the reference engine's fastest; trtllm: TensorRT-LLM's algorithm exactly")


def _inputs(flags: ServeFlags, env: Mapping[str, str]) -> tuple[Any, Optional[Path], Optional[Path]]:
    """The loaded config file (None: none), the bundle --model names (None: not a bundle) and the model folder
    --model names (None: none, or a bundle's, whose config names the model)."""
    loaded = None
    bundle: Optional[Path] = None
    model_arg: Optional[Path] = None
    if flags.model is not None:
        model_arg = _resolve_model_arg(flags.model, None, env)
        if is_bundle(model_arg):
            bundle = model_arg
            if flags.config is not None:
                raise PlanError(f"--model {flags.model} is a bundle, which brings its own config "
                                f"({CONFIG_FILE}); it cannot be combined with --config",
                                f"use --config {bundle / CONFIG_FILE} (or edit it), or --model with a "
                                "plain Hugging Face folder", usage=True)
            loaded = _load_file(bundle / CONFIG_FILE)
            model_arg = None
    if flags.config is not None:
        loaded = _load_file(flags.config)
    return loaded, bundle, model_arg


def _resolve_path(p: Any) -> Optional[Path]:
    """A path given outside any config file, made absolute (None stays None)."""
    return None if p is None else Path(p).expanduser().resolve()


def _folders(config: TrtladeConfig, resolve: Any, model_arg: Optional[Path], bundle: Optional[Path],
             env: Mapping[str, str]) -> tuple[Optional[Path], Optional[Path], Optional[Path]]:
    """The model, engine and tokenizer folders the engine will load, each checked for what that engine needs."""
    engine = config.serve.engine
    model_dir = None
    if config.model.path is not None:
        model_dir = model_arg or resolve(config.model.path)
    elif config.model.name is not None:
        model_dir = _resolve_model_arg(config.model.name, resolve(config.model.models_dir), env)
    tokenizer_dir = resolve(config.model.tokenizer) if config.model.tokenizer is not None else None
    if model_dir is not None and not model_dir.is_dir() and not (engine == "reference" and _is_gguf_file(model_dir)):
        gguf = _is_gguf_file(model_dir)
        raise PlanError(f"model.path {model_dir} is " + ("a GGUF file, which only the reference engine loads"
                                                         if gguf else "not a folder"),
                        "build TensorRT-LLM engines from the Hugging Face folder" if gguf else
                        "point model.path at a Hugging Face model folder (or, for the reference engine, a GGUF file)")
    if engine == "reference":
        _check_reference_folder(model_dir)
        return model_dir, None, tokenizer_dir
    if config.build.backend == "pytorch":  # TensorRT-LLM's PyTorch backend: the checkpoint as it is, no engine
        if model_dir is None or not model_dir.is_dir():
            raise PlanError("the trtllm engine on TensorRT-LLM's PyTorch backend (build.backend pytorch) loads the "
                            "Hugging Face folder itself", "set model.path (or --model) to the checkpoint folder; "
                            "`trtlade build --speculation ...` writes a bundle that names it")
        return model_dir, None, tokenizer_dir or model_dir
    return _engine_folders(config, resolve, model_dir, bundle, tokenizer_dir)


def _check_reference_folder(model_dir: Optional[Path]) -> None:
    """The reference engine loads a Hugging Face folder (or a GGUF file), not an engine or a folder without config."""
    if model_dir is not None and is_engine_dir(model_dir):
        raise PlanError(f"{model_dir} is a TensorRT-LLM engine directory; the reference engine needs the "
                        "Hugging Face folder", "add --engine trtllm to serve the engine", usage=True)
    if model_dir is not None and model_dir.is_dir() and not (model_dir / "config.json").is_file():
        raise PlanError(f"{model_dir} has no config.json: not a Hugging Face model folder (checked before the "
                        "server opens its port)", "point --model (or model.path) at the folder holding the "
                        "model's config.json and weights, a .gguf file, or a bundle made by `trtlade build`")


def _engine_folders(config: TrtladeConfig, resolve: Any, model_dir: Optional[Path], bundle: Optional[Path],
                    tokenizer_dir: Optional[Path]) -> tuple[Optional[Path], Path, Path]:
    """A TensorRT-LLM engine's folders: (model, engine, tokenizer); the engine folder given as the model, in the
    config or in the bundle, the tokenizer the config's or the model's."""
    engine_dir = None
    if model_dir is not None and is_engine_dir(model_dir):
        engine_dir, model_dir = model_dir, None
    elif config.build.engine_dir is not None:
        engine_dir = resolve(config.build.engine_dir)
    elif bundle is not None and Bundle(bundle).engine_dir.is_dir():
        engine_dir = Bundle(bundle).engine_dir
    if engine_dir is None:
        raise PlanError("the trtllm engine needs a TensorRT-LLM engine directory",
                        "set build.engine_dir in the config, pass --model with a bundle made by "
                        "`trtlade build` or with the engine directory")
    tokenizer_dir = tokenizer_dir or model_dir
    if tokenizer_dir is None:
        raise PlanError(f"no tokenizer for the engine in {engine_dir}",
                        "set model.tokenizer (or model.path) to the Hugging Face folder the engine was "
                        "built from")
    return model_dir, engine_dir, tokenizer_dir


def _key_ring(config: TrtladeConfig, flags: ServeFlags, resolve: Any, api_key: Optional[str],
              env: Mapping[str, str]) -> tuple[Optional[KeyRing], list[str]]:
    """The identities: the keys file's and the single API key's (None: neither), and the warnings about them."""
    configured = resolve(config.serve.api_keys_file) if config.serve.api_keys_file is not None else None
    try:
        keys_path, keys_source = keys_file_path(configured, flags.api_keys_file, env)
    except KeysFileError as exc:
        raise PlanError(exc.message, exc.hint, where=exc.where) from None
    return _keys(keys_path, api_key, keys_source, flag_key=flags.api_key is not None)


def _manifest(bundle: Optional[Path]) -> Any:
    """The bundle's manifest (None: no bundle)."""
    if bundle is None:
        return None
    try:
        return Bundle(bundle).manifest()
    except BundleError as exc:
        raise PlanError(exc.message, exc.hint) from None


#: flags only the reference engine reads (ServeFlags field -> the flag)
_REFERENCE_FLAGS = {"prefix_cache_mb": "--prefix-cache-mb", "prefill_chunk_tokens": "--prefill-chunk-tokens",
                    "prefill_stall": "--prefill-stall", "prefill_idle_chunk_tokens": "--prefill-idle-chunk-tokens"}


def _refuse_other_engines_flags(flags: ServeFlags, config: TrtladeConfig) -> None:
    """A flag the engine that serves does not read is refused (PlanError, usage), not dropped: the reference engine's
    prefix cache and prefill pacing on TensorRT-LLM; a Lookahead ``--spec`` or ``--preset`` on the PyTorch backend,
    which drafts with the config's ``speculation`` block."""
    if config.serve.engine != "trtllm":
        return
    for name, flag in _REFERENCE_FLAGS.items():
        if getattr(flags, name) is not None:
            raise PlanError(f"{flag} applies to the reference engine; this server runs TensorRT-LLM (serve.engine "
                            "trtllm), which would ignore it", f"drop {flag} (TensorRT-LLM's KV cache settings are the "
                            "config's serve.kv_cache_* keys)", where=flag, usage=True)
    if config.build.backend == "pytorch":
        for given, flag in ((flags.spec, "--spec"), (flags.preset, "--preset")):
            if given is not None:
                raise PlanError(f"{flag} sets Lookahead, which TensorRT-LLM's PyTorch backend does not run: it drafts "
                                "with the config's speculation block", f"drop {flag}; change the drafter in the "
                                "bundle's speculation block (and its trtllm-serve.yml)", where=flag, usage=True)


def _api_key(flag: Optional[str], env_name: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """The single API key: ``--api-key``, else the ``serve.api_key_env`` variable; None without either. An empty
    one is refused (PlanError): ``--api-key "$UNSET"`` or ``TRTLADE_API_KEY=`` would serve without a key.

    >>> _api_key(None, "TRTLADE_API_KEY", {}) is None
    True
    >>> try:
    ...     _api_key("", "TRTLADE_API_KEY", {"TRTLADE_API_KEY": "k" * 32})
    ... except PlanError as exc:
    ...     print(exc.where, "|", exc.message)
    --api-key | the key is empty: the server would answer every request without one
    """
    if flag is not None:
        if not flag.strip():
            raise PlanError("the key is empty: the server would answer every request without one",
                            "give the key (an unset variable in `--api-key \"$VAR\"` reads as empty), or drop "
                            "--api-key to serve without one", where="--api-key")
        return flag
    value = env.get(env_name) if env_name else None
    if value is not None and not value.strip():
        raise PlanError("set but empty: the server would answer every request without a key",
                        f"set {env_name} to the key, or unset it to serve without one", where=f"${env_name}")
    return value


def _keys(path: Optional[Path], api_key: Optional[str], source: str = "--api-keys-file", flag_key: bool = False
          ) -> tuple[Optional[KeyRing], list[str]]:
    """The identities: the keys file's, plus the single API key as ``default`` (PlanError naming the line, and where
    the file's path came from: ``source``, e.g. ``$TRTLADE_API_KEYS_FILE``, which a user may not know is set)."""
    try:
        if api_key:
            check_key_length(api_key, "--api-key ($TRTLADE_API_KEY, serve.api_key_env)")  # the keys file's minimum
        if path is None:
            return (KeyRing.single(api_key) if api_key else None), []
        ring, warnings = KeyRing.load(path)
        return ring.with_key(api_key), warnings
    except KeysFileError as exc:
        named = f"{exc.where} (from {source})" if path is not None and exc.where == str(path) else exc.where
        # a short --api-key is that flag's value: a usage mistake, as any flag's
        raise PlanError(exc.message, exc.hint, where=named,
                        usage=flag_key and str(exc.where).startswith("--api-key ")) from None


def _check_shared_drafter(config: TrtladeConfig, keys: Optional[KeyRing]) -> None:
    """TensorRT-LLM's NGram public pool and SA global pool search every request the executor runs: with API keys
    they would draft one identity's request from another's text, so they are refused unless the operator
    chose ``prefix_cache_scope: global`` (one tenant). The reference engine scopes its pools instead."""
    drafter = config.speculation_config if config.build.backend == "pytorch" else None
    if keys is None or drafter is None or config.serve.prefix_cache_scope == "global":
        return
    shared = ("is_public_pool" if drafter.decoding_type == "NGram" and drafter.is_public_pool else
              "enable_global_pool" if drafter.decoding_type == "SA" and drafter.enable_global_pool else None)
    if shared is not None:
        raise PlanError(f"speculation.{shared}: TensorRT-LLM's {drafter.decoding_type} drafts every request from "
                        "every other request's text, across API keys: one identity's accepted drafts would tell it "
                        "what another's text holds",
                        f"set speculation.{shared}: false (each request drafts from its own text), or set "
                        "serve.prefix_cache_scope: global to accept sharing (one tenant)",
                        where=f"speculation.{shared}")


def _scope(config: TrtladeConfig, keys: Optional[KeyRing], flag: bool = False) -> str:
    """``serve.prefix_cache_scope``, or its default: ``identity`` with keys, ``global`` without (on the trtllm
    engine, ``global`` unless one is asked for). Refused where it cannot hold: ``identity`` without keys (every caller
    would be one identity), and a scope narrower than global on the trtllm engine with KV block reuse (TensorRT-LLM
    shares reused blocks between every request); without block reuse nothing is shared, so the scope asked for holds
    and is kept."""
    serve = config.serve
    explicit = serve.prefix_cache_scope
    if serve.engine == "trtllm":
        if serve.kv_cache_enable_block_reuse and explicit != "global" and (keys is not None or explicit is not None):
            whose = "one API key's prompts from another's" if keys is not None else f"prompts apart by {explicit}"
            raise PlanError("the trtllm engine with serve.kv_cache_enable_block_reuse reuses KV blocks between "
                            f"every request the executor runs: it cannot keep {whose}",
                            "set serve.prefix_cache_scope: global to accept that (one tenant), or turn "
                            "serve.kv_cache_enable_block_reuse off", where="serve.prefix_cache_scope")
        _check_shared_drafter(config, keys)
    scope = explicit or ("identity" if keys is not None and serve.engine != "trtllm" else "global")
    if scope == "identity" and keys is None:
        raise PlanError("serve.prefix_cache_scope identity needs API keys: without them every caller is the same "
                        "identity", "give a keys file (--api-keys-file, serve.api_keys_file, $TRTLADE_API_KEYS_FILE) "
                        "or an API key, or use prefix_cache_scope global (one tenant) or salt",
                        where="--prefix-cache-scope" if flag else "serve.prefix_cache_scope", usage=flag)
    return scope

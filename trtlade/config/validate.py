"""The config gate behind ``trtlade validate-config``: expand the paths given, detect each file's kind
(trtlade config or grps_trtllm inference config), run every check, and report per file.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "x.yml").write_text("lookahead:\\n  spec: 4,0,4\\n")
    >>> report = validate_file(d / "x.yml", display="x.yml")
    >>> report.kind, report.valid()
    ('trtlade', False)
    >>> print(report.diagnostics[0].format_text())
    x.yml:2:9: error: lookahead.spec.ngram_size: illegal (W,N,G) '4,0,4': ngram_size is 0: ngramSize requires >= 1
      hint: use N >= 2 for lookahead, or (1,1,0) to turn it off
"""

from __future__ import annotations

import difflib
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml

from trtlade.config.checks import check_trtlade
from trtlade.bundle import Bundle, BundleError, is_bundle
from trtlade.config.grps import check_grps, is_grps_config, read_grps_models
from trtlade.config.grps_server import check_grps_server, is_grps_server_config
from trtlade.config.loader import ConfigLoadError, LoadedConfig, YamlDocument, read_yaml, validate_trtlade
from trtlade.config.schema import TrtladeConfig
from trtlade.config.trtllm_serve import (check_llmapi_model_yaml, check_trtllm_serve, is_llmapi_model_yaml,
                                        is_trtllm_serve_config)
from trtlade.diagnostics import Diagnostic, count_by_severity, sort_diagnostics

__all__ = ["ConfigKind", "FileReport", "CONFIG_SUFFIXES", "classify", "validate_file", "expand_inputs"]

ConfigKind = Literal["trtlade", "grps", "grps-server", "trtllm-serve", "triton-llmapi"]
CONFIG_SUFFIXES = (".yml", ".yaml")
_TOP_KEYS = tuple(TrtladeConfig.model_fields)
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class FileReport:
    """The outcome for one file: its kind (None when it could not be read or recognised), the
    diagnostics sorted by position, and a few facts for the summary line (spec, max_draft_len ...)."""

    file: str
    kind: ConfigKind | None
    diagnostics: tuple[Diagnostic, ...]
    details: dict[str, Any] = field(default_factory=dict)

    def valid(self, strict: bool = False) -> bool:
        """No errors (and, with ``strict``, no warnings either)."""
        bad = {"error", "warning"} if strict else {"error"}
        return not any(d.severity in bad for d in self.diagnostics)

    def counts(self) -> dict[str, int]:
        return count_by_severity(self.diagnostics)

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        counts = self.counts()
        return {"file": self.file, "kind": self.kind, "valid": self.valid(strict), "errors": counts["error"],
                "warnings": counts["warning"], "infos": counts["info"], "details": self.details}


def classify(data: Any) -> ConfigKind | None:
    """``grps`` for a grps_trtllm inference config, ``trtlade`` for a mapping with a trtlade section
    (or a key close to one, so a misspelt section still gets its did-you-mean), else None."""
    if is_grps_config(data) or (isinstance(data, dict) and isinstance(data.get("models"), list)
                                and not any(key in _TOP_KEYS for key in data)):
        return "grps"  # a models list: grps-shaped, even when no item has inferer_args yet (beside trtlade's
        # sections it is a misspelt `model:`, said as one)
    if is_grps_server_config(data):
        return "grps-server"  # grps's server.yml, beside the inference ymls in its conf/
    if is_llmapi_model_yaml(data):
        return "triton-llmapi"  # the model.yaml of Triton's llmapi model (LLM arguments + triton_config)
    if is_trtllm_serve_config(data):
        return "trtllm-serve"  # a trtllm-serve --config file (LLM-API keys)
    if not isinstance(data, dict):
        return None
    for key in data:
        if key in _TOP_KEYS or difflib.get_close_matches(str(key), _TOP_KEYS, n=1, cutoff=0.8):
            return "trtlade"
    return None


def validate_file(path: str | Path, *, display: str | None = None, engine_dir: Path | None = None,
                  release: str | None = None, upstream: str = "auto") -> FileReport:
    """Every check of one file; never raises for bad input (it becomes a Diagnostic). ``release``: the
    TensorRT-LLM release the file is for (a trtlade config's ``build.trtllm_version`` wins for it; default:
    the installed one); ``upstream``: auto | require | off, TensorRT-LLM's own check of a trtllm-serve file
    (:mod:`trtlade.trtllm.upstream_gate`)."""
    name = display if display is not None else str(path)
    try:
        doc = read_yaml(path, display=name)
    except ConfigLoadError as exc:
        return FileReport(name, None, tuple(exc.diagnostics))
    if not isinstance(doc.data, dict):
        kind = "a list" if isinstance(doc.data, list) else f"a single value ({type(doc.data).__name__})"
        return FileReport(name, None, (doc.diagnostic(
            "error", f"the top level is {kind}, not a mapping", loc=(), code="not-a-mapping",
            hint="a trtlade config is a mapping of sections (model, build, lookahead, serve, bench); a grps "
                 "config has a models list"),))
    kind = classify(doc.data)
    if kind == "grps":
        return _validate_grps(doc, engine_dir)
    if kind == "grps-server":
        found = check_grps_server(doc, engine_dir=engine_dir)
        return FileReport(doc.file, "grps-server", tuple(sort_diagnostics(found)),
                          {"max_concurrency": doc.data.get("max_concurrency")})
    if kind == "trtlade":
        return _validate_trtlade(doc, engine_dir, release)
    if kind in ("trtllm-serve", "triton-llmapi"):
        target = release if release is not None else (_bundle_release(Path(path)) or installed_release())
        found = (check_trtllm_serve(doc, target, upstream=upstream) if kind == "trtllm-serve"
                 else check_llmapi_model_yaml(doc, target, upstream=upstream))
        if engine_dir is not None:  # said, not dropped: these files are checked against the release alone
            found.append(doc.diagnostic("info", f"--engine-dir {engine_dir} not used: a {kind} file is checked "
                                                "against the release's LLM arguments, not against an engine", loc=(),
                                        code="engine-dir-unused"))
        block = doc.data.get("speculative_config")
        return FileReport(doc.file, kind, tuple(sort_diagnostics(found)),
                          {"release": target, "speculation": block.get("decoding_type") if isinstance(block, dict)
                           else None})
    keys = ", ".join(repr(k) for k in list(doc.data)[:5])
    return FileReport(name, None, (doc.diagnostic(
        "error", f"not a trtlade config (no {', '.join(_TOP_KEYS)} section) nor a grps_trtllm inference config "
                 f"(no models[*].inferer_args); top-level keys: {keys}", loc=(), code="unknown-config-kind",
        hint="a trtlade config needs at least `lookahead: {spec: W,N,G}`; move other YAML files out of the "
             "directory or name the config files explicitly"),))


def installed_release() -> str | None:
    """The installed TensorRT-LLM's version (package metadata, no import), or None."""
    from trtlade.trtllm.compat import installed_version

    return installed_version()


def _validate_trtlade(doc: YamlDocument, engine_dir: Path | None, release: str | None = None) -> FileReport:
    config, diags = validate_trtlade(doc)
    if config is None:
        return FileReport(doc.file, "trtlade", tuple(sort_diagnostics(diags)))
    loaded = LoadedConfig(config=config, document=doc)
    found = check_trtlade(loaded, engine_dir=engine_dir, release=release) + _bundle_agreement(doc, config)
    spec = config.lookahead.spec
    drafter = config.speculation_config
    details = {"spec": str(spec), "max_draft_len": spec.max_draft_len,
               **({"speculation": str(drafter)} if drafter is not None else {}),
               "request_default": str(config.lookahead.default_request),
               **({"schedule": str(config.lookahead.lookahead_schedule)} if config.lookahead.schedule else {}),
               "engine_checked": _engine_checked(found, engine_dir, loaded.resolve(config.build.engine_dir))}
    return FileReport(doc.file, "trtlade", tuple(sort_diagnostics(found)), details)


def _bundle_agreement(doc: YamlDocument, config: Any) -> list[Diagnostic]:
    """A PyTorch-backend bundle's trtlade.yml against the trtllm-serve.yml beside it, which TensorRT-LLM runs (and
    serve refuses to start where they disagree): an error at each key that says another value."""
    from trtlade.bundle import options_disagreements

    folder = Path(doc.file).parent if doc.file else None
    if folder is None or not is_bundle(folder) or not Bundle(folder).trtllm_serve_file.is_file():
        return []
    try:
        options = yaml.safe_load(Bundle(folder).trtllm_serve_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []  # the file's own check says what is wrong with it
    if not isinstance(options, dict):
        return []
    return [doc.diagnostic("error", f"{ours!r} here, {theirs_key} {theirs!r} in the bundle's trtllm-serve.yml, which "
                           "TensorRT-LLM runs: serve refuses to start while they disagree", loc=tuple(key.split(".")),
                           code="bundle-disagreement", hint="make both say the same, or build a new bundle from this "
                           "config (`trtlade build --config ... -o NEW`)")
            for key, ours, theirs_key, theirs in options_disagreements(config, options)]


def _validate_grps(doc: YamlDocument, engine_dir: Path | None) -> FileReport:
    models, _ = read_grps_models(doc)
    found = check_grps(doc, engine_dir=engine_dir)
    details = {"models": [{"index": m.index, "name": m.name, "spec": str(m.spec) if m.spec else None,
                           "max_draft_len": m.spec.max_draft_len if m.spec else None} for m in models]}
    return FileReport(doc.file, "grps", tuple(sort_diagnostics(found)), details)


def _engine_checked(found: Iterable[Diagnostic], override: Path | None, configured: Path | None) -> str | None:
    if any(d.code in ("engine-dir-absent", "engine-unreadable") for d in found):
        return None
    target = override if override is not None else configured
    return str(target) if target is not None and target.exists() else None


def expand_inputs(inputs: Iterable[str], *, recursive: bool = False) -> tuple[list[tuple[Path, str]], list[str]]:
    """Turn the CLI's PATH arguments into ``(path, display name)`` pairs and usage errors.

    A file is taken as is (any extension); a directory gives its ``*.yml``/``*.yaml`` files (and
    those of its subdirectories with ``recursive``), sorted; anything else is a glob pattern
    (``configs/*.yml``, ``**/inference_*.yml``). A missing path, an empty directory or a pattern
    matching nothing is a usage error.
    """
    found: list[tuple[Path, str]] = []
    errors: list[str] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            found.append((p, str(p)))

    for raw in inputs:
        if not raw.strip():  # Path("") is ".": `validate-config "$UNSET"` would check whatever lies here, and pass
            errors.append("an empty path (an unset variable in `validate-config \"$CONFIG\"`?): give a file, folder "
                          "or pattern")
            continue
        p = Path(raw)
        if p.is_file():
            add(p)
        elif p.is_dir():
            files = _configs_in(p, recursive)
            if not files:
                where = "in it or its subdirectories" if recursive else "in it (use --recursive for subdirectories)"
                errors.append(f"{raw}: no config files (*.yml, *.yaml) {where}")
            for f in files:
                add(f)
        elif _GLOB_CHARS & set(raw):
            matches = sorted(glob.glob(raw, recursive=True))
            files = [Path(m) for m in matches if Path(m).is_file()]
            for m in matches:
                if Path(m).is_dir():
                    files += _configs_in(Path(m), recursive)
            if not files:
                errors.append(f"{raw}: no files match this pattern")
            for f in files:
                add(f)
        elif p.exists():
            errors.append(f"{raw}: not a regular file or directory")
        else:
            errors.append(f"{raw}: a symlink that leads nowhere (a loop, or a missing target)" if p.is_symlink()
                          else f"{raw}: no such file or directory")
    return found, errors


def _bundle_release(path: Path) -> str | None:
    """The TensorRT-LLM release a bundle's trtllm-serve.yml was written for (its manifest), where ``path`` is one."""
    folder = path.parent
    if path.name != Bundle(folder).trtllm_serve_file.name or not is_bundle(folder):
        return None
    try:
        return (Bundle(folder).manifest().get("tensorrt_llm") or {}).get("version")
    except BundleError:
        return None


def _bundle_files(bundle: Bundle) -> list[Path]:
    """A bundle's files to check: its trtlade.yml, and a PyTorch-backend bundle's trtllm-serve.yml, which TensorRT-LLM
    runs (an engine bundle's extra_llm_api_options.yml is written from the config, not a file of its own to check)."""
    return [bundle.config_file, *([bundle.trtllm_serve_file] if bundle.is_pytorch else [])]


def _configs_in(directory: Path, recursive: bool) -> list[Path]:
    """The config files of a folder; a bundle folder gives its own (:func:`_bundle_files`), inside a tree too."""
    if is_bundle(directory):
        return _bundle_files(Bundle(directory))
    if recursive:
        files = []
        for root, dirs, names in os.walk(directory):
            here = Path(root)
            if any(part.startswith(".") for part in here.relative_to(directory).parts):
                continue
            if here != directory and is_bundle(here):
                files += _bundle_files(Bundle(here))
                dirs.clear()
                continue
            files += [here / name for name in names if name.lower().endswith(CONFIG_SUFFIXES)]
    else:
        files = [p for p in directory.iterdir() if p.is_file() and p.name.lower().endswith(CONFIG_SUFFIXES)]
    return sorted(files)

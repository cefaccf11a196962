"""How ``trtlade build`` writes its bundle (the layout: :mod:`trtlade.bundle`) so that nothing
half-written looks complete. The checkpoint folder carries ``trtlade-checkpoint.json``, a stamp that
lets a re-run skip conversion.

Directories are produced under a ``.<name>.partial`` name and renamed into place; files are written to
a temporary name and ``os.replace``-d.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from trtlade.builder.plan import BuildPlan
from trtlade.files import write_json_atomic
from trtlade.bundle import (CHECKPOINT_DIR, CONFIG_FILE, ENGINE_DIR, EXTRA_OPTIONS_FILE, LOGS_DIR, MANIFEST_FILE,
                            TRTLLM_SERVE_FILE)

__all__ = [
    "MANIFEST_FORMAT",
    "STAMP_FILE",
    "OutputState",
    "output_state",
    "conversion_inputs",
    "inputs_hash",
    "checkpoint_complete",
    "write_stamp",
    "remove_tree",
    "query_gpus",
    "parse_gpu_query",
    "deployment_config",
    "extra_llm_api_options",
    "render_deployment_config",
    "render_extra_options",
]

MANIFEST_FORMAT = "trtlade-bundle/1"
STAMP_FILE = "trtlade-checkpoint.json"
#: Bump when the conversion changes in a way that makes old checkpoints unusable.
CONVERSION_FORMAT = 1

_OURS = {ENGINE_DIR, CHECKPOINT_DIR, LOGS_DIR, MANIFEST_FILE}
#: the text files a build writes: its own only where their first lines say so (a user's trtlade.yml of that name,
#: the --config given, was replaced without --force)
WRITTEN_FILES = (CONFIG_FILE, EXTRA_OPTIONS_FILE, TRTLLM_SERVE_FILE)
_WRITTEN_MARKS = (b"written by `trtlade build`", b"# For TensorRT-LLM's own OpenAI server (the engine backend)")


@dataclass(frozen=True)
class OutputState:
    """What is at the output path: ``absent``, ``empty``, ``complete`` (a manifest: a finished bundle),
    ``incomplete`` (only trtlade's own entries, e.g. a failed build's logs and checkpoint) or
    ``foreign`` (other files: ``foreign`` lists them)."""

    kind: str
    foreign: tuple[str, ...] = ()


def _is_ours(path: Path) -> bool:
    name = path.name
    if name in WRITTEN_FILES:
        try:
            head = path.read_bytes()[:1024]
        except OSError:
            return False
        return any(mark in head for mark in _WRITTEN_MARKS)
    return name in _OURS or (name.startswith(".") and (name.endswith(".partial") or ".tmp" in name))


def output_state(path: Path) -> OutputState:
    if not path.exists():
        return OutputState("absent")
    if not path.is_dir():
        return OutputState("foreign", (path.name,))
    names = sorted(p.name for p in path.iterdir())
    if not names:
        return OutputState("empty")
    foreign = tuple(n for n in names if not _is_ours(path / n))
    if foreign:
        return OutputState("foreign", foreign)
    return OutputState("complete" if MANIFEST_FILE in names else "incomplete")


# ------------------------------------------------------------------------------ conversion stamp
def conversion_inputs(plan: BuildPlan, trtllm_version: str, weights: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything the checkpoint depends on; equal inputs -> a re-run may reuse the checkpoint."""
    return {
        "format": CONVERSION_FORMAT,
        "hf_dir": str(plan.model.path),
        "hf_config_sha256": plan.info.config_sha256,
        "weights": weights,
        "model_class": plan.trtllm_class,
        "dtype": plan.dtype,
        "tp_size": plan.tp_size,
        "pp_size": plan.pp_size,
        "trtllm_version": trtllm_version,
    }


def inputs_hash(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def checkpoint_complete(folder: Path, digest: str, world_size: int) -> bool:
    """A checkpoint converted from the same inputs: the stamp's hash matches and every file is there."""
    try:
        stamp = json.loads((folder / STAMP_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if not isinstance(stamp, dict) or stamp.get("inputs_sha256") != digest:
        return False
    needed = ["config.json"] + [f"rank{r}.safetensors" for r in range(world_size)]
    return all((folder / name).is_file() for name in needed)


def write_stamp(folder: Path, inputs: Mapping[str, Any], seconds: float) -> None:
    write_json_atomic(folder / STAMP_FILE, {"inputs_sha256": inputs_hash(inputs), "inputs": dict(inputs),
                                            "seconds": round(seconds, 3)})


def remove_tree(path: Path) -> None:
    """Remove a file or folder if present."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# ------------------------------------------------------------------------------ GPU
def parse_gpu_query(text: str) -> list[dict[str, Any]]:
    """Lines of ``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader``.

    >>> parse_gpu_query("NVIDIA A10, 8.6\\nNVIDIA A10, 8.6\\n")
    [{'name': 'NVIDIA A10', 'compute_capability': '8.6'}, {'name': 'NVIDIA A10', 'compute_capability': '8.6'}]
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, cap = line.rpartition(",")
        if not name:
            name, cap = cap, ""
        gpus.append({"name": name.strip(), "compute_capability": cap.strip() or None})
    return gpus


def query_gpus(timeout: float = 15.0) -> list[dict[str, Any]] | None:
    """The machine's GPUs from nvidia-smi, or None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return parse_gpu_query(proc.stdout) or None


# ------------------------------------------------------------------------------ deployment config
def deployment_config(plan: BuildPlan, *, engine_dtype: str | None = None) -> dict[str, Any]:
    """The bundle's ``trtlade.yml`` as data: the input config (if any) with the model, build, lookahead
    and serve settings of this build. Paths are absolute for the model, relative for the engine."""
    data: dict[str, Any] = {k: _plain(v) for k, v in plan.config_data.items()}
    model = _bundle_model(plan, dict(data.get("model") or {}), engine_dtype)
    build = dict(data.get("build") or {})
    build.pop("output_dir", None)
    build["backend"] = plan.backend
    if plan.backend == "pytorch":
        build.pop("engine_dir", None)
        build.update(plan.limits.to_dict())
        build["tp_size"], build["pp_size"] = plan.tp_size, plan.pp_size
        build["trtllm_version"] = plan.release
        data["speculation"] = dict(plan.speculation or {})
        serve = dict(data.get("serve") or {})
        serve["engine"] = "trtllm"
        out = {"model": model, "build": build, **({"lookahead": data["lookahead"]} if "lookahead" in data else {}),
               "speculation": data["speculation"], "serve": serve}
        return {**out, **{k: v for k, v in data.items() if k not in out}}
    if plan.backend == "trtllm":
        build["engine_dir"] = ENGINE_DIR
        build.update(plan.limits.to_dict())
        build["tp_size"], build["pp_size"] = plan.tp_size, plan.pp_size
        if plan.release is not None:
            build["trtllm_version"] = plan.release
    else:
        build.pop("engine_dir", None)
        for key in plan.explicit_limits:
            build[key] = plan.limits.to_dict()[key]
    lookahead = dict(data.get("lookahead") or {})
    lookahead["spec"] = plan.spec.to_dict()
    serve = dict(data.get("serve") or {})
    serve["engine"] = plan.backend
    out = {"model": model, "build": build, "lookahead": lookahead, "serve": serve}
    for key, value in data.items():
        if key not in out:
            out[key] = value
    return out


def _bundle_model(plan: BuildPlan, model: dict[str, Any], engine_dtype: str | None) -> dict[str, Any]:
    """The bundle's model section from the input's: the model by its resolved path, a relative tokenizer resolved
    against the input config's folder, the embedded model's served name, and the dtype (an engine's as built)."""
    for key in ("name", "models_dir"):
        model.pop(key, None)  # resolved into model.path
    model["path"] = str(plan.model.path)
    if model.get("tokenizer") and plan.config_path is not None:  # relative to the input config, not the bundle
        tokenizer = Path(str(model["tokenizer"])).expanduser()
        if not tokenizer.is_absolute():
            tokenizer = (plan.config_path.parent / tokenizer).resolve()
        model["tokenizer"] = str(tokenizer)
    if plan.embedded and not model.get("served_name"):
        from trtlade.reference.embedded import EMBEDDED_MODEL_NAME

        model["served_name"] = EMBEDDED_MODEL_NAME  # not the cache folder's hashed name
    if plan.backend == "trtllm":
        if not model.get("tokenizer"):
            model["tokenizer"] = str(plan.model.path)
        model["dtype"] = engine_dtype if engine_dtype in ("auto", "float16", "bfloat16", "float32") else plan.dtype
    else:
        model["dtype"] = plan.dtype_requested
    return model


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def deployment_errors(plan: BuildPlan) -> list[Any]:
    """What ``validate-config`` would refuse in the bundle's ``trtlade.yml``, checked before anything is
    written (the engine aside: it is not built yet). The input config's other sections go into the bundle as
    they are, so a section that contradicts the build (a reference-engine policy under ``--speculation``, a
    row budget the reference engine refuses) is found here, not after the build."""
    from trtlade.config.checks import check_trtlade
    from trtlade.config.loader import LoadedConfig, validate_trtlade
    from trtlade.yaml_doc import parse_yaml

    data = deployment_config(plan)
    build = {k: v for k, v in (data.get("build") or {}).items() if k != "engine_dir"}
    text = yaml.safe_dump({**data, "build": build}, sort_keys=False)
    doc = parse_yaml(text, str(plan.config_file), path=plan.config_file)
    config, found = validate_trtlade(doc)
    if config is not None:
        found = check_trtlade(LoadedConfig(config=config, document=doc))
    return [d for d in found if d.severity == "error"]


def render_deployment_config(plan: BuildPlan, data: Mapping[str, Any]) -> str:
    what = (f"# Lookahead (W,N,G) = ({plan.spec}) -> max_draft_len {plan.max_draft_len} draft tokens per step."
            if plan.backend != "pytorch" else
            f"# TensorRT-LLM {plan.release}'s PyTorch backend, speculation {dict(plan.speculation or {})} (no engine).")
    head = [
        "# trtlade deployment config written by `trtlade build` (see trtlade-manifest.json).",
        what,
        "#   check:  trtlade validate-config trtlade.yml",
        "#   serve:  trtlade serve --config trtlade.yml",
        "# Relative paths are relative to this file.",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def extra_llm_api_options(plan: BuildPlan) -> dict[str, Any]:
    """``--extra_llm_api_options`` for TensorRT-LLM 1.x's ``trtllm-serve`` on the engine backend.

    As read in tensorrt_llm/commands/serve.py: the YAML file updates the LLM arguments
    (``update_llm_args_with_extra_dict``), and tensorrt_llm/llmapi/llm_args.py maps ``decoding_type:
    Lookahead`` to ``LookaheadDecodingConfig`` (every field > 0). ``kv_cache_config.enable_block_reuse``
    is written explicitly: the LLM API's KvCacheConfig turns block reuse on by default, while ``trtlade
    serve`` and the Triton export set it from ``serve.kv_cache_enable_block_reuse`` (off by default), so
    the three deployments of one bundle behave alike. The path was not run end to end.
    """
    w, n, g = plan.spec.as_tuple()
    return {"speculative_config": {"decoding_type": "Lookahead", "max_window_size": w, "max_ngram_size": n,
                                   "max_verification_set_size": g},
            "kv_cache_config": {"enable_block_reuse": _block_reuse(plan)}}


def _block_reuse(plan: BuildPlan) -> bool:
    serve = plan.config_data.get("serve") if isinstance(plan.config_data, Mapping) else None
    value = serve.get("kv_cache_enable_block_reuse") if isinstance(serve, Mapping) else None
    return bool(value) if isinstance(value, bool) else False


def trtllm_serve_backend(version: str | None) -> tuple[str, str]:
    """The ``--backend`` words that select the engine backend of ``trtllm-serve`` in a release, and why.

    tensorrt_llm/commands/serve.py, by release: up to 0.21 (and the 1.0 candidates before
    NVIDIA/TensorRT-LLM#5717) ``--backend`` offers only ``pytorch`` and the engine is the default, so no
    flag; #5717 made PyTorch the default and named the engine backend ``trt``; #7829 (merged 2025-09-18,
    after the 1.0 branch) renamed it ``tensorrt`` and kept ``trt`` as an alias (ChoiceWithAlias). So
    ``--backend trt`` selects it on every 1.x release that has the flag.

    >>> trtllm_serve_backend("0.21.0")[0], trtllm_serve_backend("1.0.0")[0], trtllm_serve_backend("1.2.0")[0]
    ('', '--backend trt', '--backend tensorrt')
    """
    from trtlade.trtllm.compat import parse_version

    if version is None:
        return "--backend trt", ("the release is not known here: every 1.x release takes --backend trt (1.1 and "
                                 "later also tensorrt, NVIDIA/TensorRT-LLM#7829); 0.19-0.21 take no --backend "
                                 "(the engine is the default)")
    v = parse_version(version)
    if v.major < 1:
        return "", (f"TensorRT-LLM {version}: the engine is trtllm-serve's default backend (--backend offers only "
                    "pytorch before NVIDIA/TensorRT-LLM#5717)")
    if (v.major, v.minor) == (1, 0):
        return "--backend trt", (f"TensorRT-LLM {version}: the engine backend is spelled trt (#5717); on a 1.0.0 "
                                 "release candidate older than #5717 drop --backend (the engine is the default)")
    return "--backend tensorrt", f"TensorRT-LLM {version}: tensorrt (#7829; trt is an alias)"


def render_extra_options(plan: BuildPlan, engine_dir: str = ENGINE_DIR, version: str | None = None) -> str:
    flag, why = trtllm_serve_backend(version)
    command = " ".join(p for p in ("trtllm-serve", engine_dir, flag, "--tokenizer", str(plan.model.path)) if p)
    head = [
        "# For TensorRT-LLM's own OpenAI server (the engine backend), written by `trtlade build`; from this folder:",
        f"#   {command} \\",
        "#       --extra_llm_api_options extra_llm_api_options.yml",
        f"# --backend: {why}.",
        "# trtllm-serve of 0.16 to 0.18 has no way to set a lookahead config (use `trtlade serve`).",
        "# trtllm-serve rejects unknown request fields: no per-request (w,n,g) there.",
        "# kv_cache_config.enable_block_reuse is written as trtlade serve and the Triton export set it "
        "(serve.kv_cache_enable_block_reuse): the LLM API's own default is on.",
    ]
    if not plan.spec.llmapi_compatible:
        head.append(f"# WARNING: ({plan.spec}) has a 0 field; the 1.x LLM API requires every field > 0.")
    return "\n".join(head) + "\n" + yaml.safe_dump(extra_llm_api_options(plan), sort_keys=False)

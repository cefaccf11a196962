"""Which model to build: a folder or a name under a models directory, its Hugging Face config, and the
TensorRT-LLM model class that converts it.

Names never go to a model hub. ``--model Qwen3-8B`` is looked up, in this order, under ``--models-dir``,
the config's ``model.models_dir`` and ``$TRTLADE_MODELS_DIR``, as ``<dir>/Qwen3-8B`` and
``<dir>/*/Qwen3-8B`` (an organisation folder such as ``Qwen/``); ``Qwen/Qwen3-8B`` as
``<dir>/Qwen/Qwen3-8B`` and ``<dir>/Qwen3-8B``.

    >>> trtllm_class_for("Qwen3ForCausalLM")
    'QWenForCausalLM'
    >>> trtllm_class_for("MistralForCausalLM")
    'LLaMAForCausalLM'
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from trtlade.bundle import CONFIG_FILE, MANIFEST_FILE, MODELS_DIR_ENV
from trtlade.builder.errors import BuildError
from trtlade.trtllm.compat import QWEN3_FLOORS
from trtlade.trtllm.windows import SlidingWindows, from_hf_config

__all__ = [
    "MODELS_DIR_ENV",
    "ARCHITECTURE_TO_CLASS",
    "BUILDABLE",
    "BuildableArchitecture",
    "FIRST_VERSION",
    "check_architecture_version",
    "QWEN3_ARCHITECTURES",
    "HfModelInfo",
    "ModelSource",
    "looks_like_path",
    "resolve_model",
    "read_hf_config",
    "trtllm_class_for",
    "is_qwen3",
    "weights_fingerprint",
]

#: The documented environment variable naming the models directory.

@dataclass(frozen=True)
class BuildableArchitecture:
    """An HF architecture TensorRT-LLM's engine flow converts: its ``tensorrt_llm.models`` class (the
    ``MODEL_MAP`` entry, tensorrt_llm/models/__init__.py) and the first release in trtlade's range
    (0.16 <= v < 1.3) that converts it, with where that is said, and ``unverified``: what the sources
    read do not settle (empty when nothing is open)."""

    architecture: str
    trtllm_class: str
    first_version: str
    source: str
    unverified: str = ""


_BEFORE_RANGE = "converted before 0.16 already"

#: What ``trtlade build`` converts, by HF ``architectures[0]``.
BUILDABLE: tuple[BuildableArchitecture, ...] = (
    BuildableArchitecture("LlamaForCausalLM", "LLaMAForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("MistralForCausalLM", "LLaMAForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("MixtralForCausalLM", "LLaMAForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("QWenLMHeadModel", "QWenForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("QWenForCausalLM", "QWenForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("Qwen2ForCausalLM", "QWenForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("Qwen2MoeForCausalLM", "QWenForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("Qwen3ForCausalLM", "QWenForCausalLM", QWEN3_FLOORS["dense"].first or "",
                          f"{QWEN3_FLOORS['dense'].source}; a head_dim other than hidden_size / heads (0.6B, 4B, "
                          f"32B) from {QWEN3_FLOORS['head_dim'].first} ({QWEN3_FLOORS['head_dim'].source}); "
                          "0.16-0.21 need a build patched for Qwen3",
                          "unverified: tied embeddings (0.6B, 1.7B, 4B) are open upstream; settled by converting "
                          "each size with stock TensorRT-LLM on a GPU"),
    BuildableArchitecture("Qwen3MoeForCausalLM", "QWenForCausalLM", QWEN3_FLOORS["moe"].first or "",
                          QWEN3_FLOORS["moe"].source,
                          "unverified: that stock 1.0-1.2 builds Qwen3-MoE engines with lookahead (30B-A3B, "
                          "235B-A22B); settled by a build on a GPU"),
    BuildableArchitecture("GemmaForCausalLM", "GemmaForCausalLM", "0.16.0", _BEFORE_RANGE + " (Gemma: 0.9)"),
    BuildableArchitecture("Gemma2ForCausalLM", "GemmaForCausalLM", "0.16.0", _BEFORE_RANGE),
    BuildableArchitecture("Gemma3ForCausalLM", "GemmaForCausalLM", "0.19.0",
                          "release notes 0.19.0: 'Added Gemma3 text-only model support' (examples/gemma)"),
)

#: HF ``architectures[0]`` -> the ``tensorrt_llm.models`` class that converts it (its MODEL_MAP).
ARCHITECTURE_TO_CLASS: dict[str, str] = {a.architecture: a.trtllm_class for a in BUILDABLE}
#: HF ``architectures[0]`` -> the first TensorRT-LLM release in trtlade's range that converts it.
FIRST_VERSION: dict[str, str] = {a.architecture: a.first_version for a in BUILDABLE}

QWEN3_ARCHITECTURES = frozenset({"Qwen3ForCausalLM", "Qwen3MoeForCausalLM"})
_QWEN3_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})

#: HF ``torch_dtype`` values that name a dtype trtllm-build accepts as is.
_DTYPES = {"float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16",
           "bf16": "bfloat16", "float32": "float32", "fp32": "float32", "float": "float32"}

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class ModelSource:
    """A resolved model folder and how it was found (``given`` is what the user wrote)."""

    path: Path
    given: str | None
    how: str  # "path", "models_dir", "embedded"


@dataclass(frozen=True)
class HfModelInfo:
    """What the build needs from a Hugging Face ``config.json``.

    ``torch_dtype`` is the checkpoint's dtype normalised to float16/bfloat16/float32 (None when the
    config does not say); ``config_sha256`` identifies the config file's exact bytes.
    """

    path: Path
    architecture: str
    model_type: str | None
    torch_dtype: str | None
    config_sha256: str
    max_position_embeddings: int | None = None
    #: the model's sliding-window layers when some layers are local and some global (Gemma 2/3), else None
    sliding_windows: SlidingWindows | None = None
    #: config.json's head_dim when it differs from hidden_size / num_attention_heads (Qwen3-0.6B, 4B, 32B)
    explicit_head_dim: int | None = None
    tied_embeddings: bool = False
    #: config.json's quantization_config.quant_method (awq, gptq, fp8, ...) when the checkpoint is quantized
    quant_method: str | None = None
    #: the attention heads, KV heads and decoder layers a tensor / pipeline split divides (None: not in config.json)
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_hidden_layers: int | None = None

    @property
    def trtllm_class(self) -> str:
        return trtllm_class_for(self.architecture, where=str(self.path / "config.json"))

    @property
    def is_qwen3(self) -> bool:
        return is_qwen3(self.architecture, self.model_type)


#: suffixes of files a user may give as --model by mistake (a config, a GGUF, one weights file): read as paths
_FILE_SUFFIXES = (".gguf", ".yml", ".yaml", ".json", ".safetensors", ".bin")


def looks_like_path(text: str) -> bool:
    """``./m``, ``/m``, ``~/m``, ``m/``, an existing folder or a file such as ``c.yml`` are paths; ``Qwen3-8B`` is a
    name (``Qwen/Qwen3-8B`` too, looked up under the models directories)."""
    path = Path(text).expanduser()
    return (text.startswith((".", "/", "~")) or text.endswith(("/", os.sep)) or path.is_dir()
            or (path.suffix.lower() in _FILE_SUFFIXES and path.exists()))


#: What holds a Hugging Face folder's weights (one file, or shards and their index)
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model*.bin.index.json")


def has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) for pattern in WEIGHT_PATTERNS)


def _require_weights(folder: Path, where: str) -> None:
    """A folder with config.json and no weights would build a bundle that fails at serve: refused here."""
    if not has_weights(folder):
        gguf = next(folder.glob("*.gguf"), None)
        raise BuildError(f"{folder} has config.json but no weights ({', '.join(WEIGHT_PATTERNS[:2])})", where=where,
                         hint=f"a GGUF file is served as it is (`trtlade serve --model {gguf}`); build takes a Hugging "
                              "Face folder" if gguf is not None else
                              "download the whole model folder (config.json, the weights, the tokenizer files)")


def _candidates(name: str, directory: Path) -> list[Path]:
    """Where ``name`` may live under ``directory``: ``<dir>/<name>``, then one organisation level."""
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    found = [directory.joinpath(*parts)]
    if len(parts) > 1:
        found.append(directory / parts[-1])
    else:
        try:
            found.extend(sorted(p / name for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")))
        except OSError:
            pass
    return found


def resolve_model(given: str, models_dirs: Sequence[tuple[str, Path]], *, as_path: bool = False) -> ModelSource:
    """The folder for ``given`` (a path, or a name under one of ``models_dirs``).

    ``models_dirs`` is ``[(label, dir), ...]`` in priority order, e.g.
    ``[("--models-dir", Path("/m")), ("$TRTLADE_MODELS_DIR", Path("/data/models"))]``.
    ``as_path`` forces ``given`` to be read as a path (a config's ``model.path``).
    Raises :class:`BuildError` listing every place looked at.
    """
    if as_path or looks_like_path(given):
        folder = Path(given).expanduser()
        _require_hf_folder(folder, where="--model")
        return ModelSource(folder.resolve(), given, "path")
    looked: list[str] = []
    for label, directory in models_dirs:
        directory = directory.expanduser()
        if not directory.is_dir():
            looked.append(f"{directory} ({label}; not a directory)")
            continue
        bare = []
        for candidate in _candidates(given, directory):
            if (candidate / "config.json").is_file():
                if has_weights(candidate):
                    return ModelSource(candidate.resolve(), given, "models_dir")
                bare.append(candidate)
        looked.append(f"{directory / given} ({label})" + "".join(f"; {b} (config.json, no weights)" for b in bare))
    if not models_dirs:
        raise BuildError(
            f"model {given!r} is not a folder and no models directory is set to look it up in",
            where="--model",
            hint=f"pass a Hugging Face model folder (--model /path/to/{given}), or name the folder that "
                 f"holds it: --models-dir DIR, model.models_dir in the config, or ${MODELS_DIR_ENV}; "
                 f"trtlade never downloads from a model hub (fetch it yourself, e.g. "
                 f"`huggingface-cli download Qwen/{given} --local-dir DIR/{given}`)")
    raise BuildError(
        f"model {given!r} not found; looked for a folder with config.json at: " + "; ".join(looked),
        where="--model",
        hint=f"put the Hugging Face folder at one of those places, or pass its path with --model; "
             f"trtlade never downloads from a model hub (e.g. `huggingface-cli download Qwen/{given} "
             f"--local-dir DIR/{given}`)")


def _require_hf_folder(folder: Path, *, where: str) -> None:
    if not folder.exists():
        raise BuildError(f"{folder} does not exist", where=where,
                         hint="pass a Hugging Face model folder (with config.json and the weights)")
    if not folder.is_dir():
        raise BuildError(f"{folder} is a file, not a model folder", where=where,
                         hint="a GGUF file is served as it is (`trtlade serve --model FILE.gguf`); build takes a "
                              "Hugging Face folder" if folder.suffix.lower() == ".gguf" else
                              "pass the folder that holds config.json, not a file in it")
    if not (folder / "config.json").is_file():
        if (folder / MANIFEST_FILE).is_file():
            raise BuildError(f"{folder} is a trtlade bundle, not a Hugging Face model folder", where=where,
                             hint="build from the model folder; serve the bundle with "
                                  f"`trtlade serve --config {folder / CONFIG_FILE}`")
        raise BuildError(f"{folder} has no config.json; it is not a Hugging Face model folder", where=where,
                         hint="pass the folder that holds config.json, the *.safetensors weights and the "
                              "tokenizer files")
    _require_weights(folder, where)


def read_hf_config(folder: Path) -> HfModelInfo:
    """Read ``folder/config.json``: ``architectures[0]``, ``model_type``, ``torch_dtype``.

    Raises :class:`BuildError` for unreadable JSON or a config without ``architectures``.
    """
    path = folder / "config.json"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read {path}: {exc.strerror or exc}", where=str(path),
                         hint="pass a Hugging Face model folder you can read") from None
    try:
        data: Any = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"{path} is not valid JSON: {exc}", where=str(path),
                         hint="restore the model's config.json from its source") from None
    if not isinstance(data, dict):
        raise BuildError(f"{path} holds a {type(data).__name__}, not a JSON object", where=str(path),
                         hint="restore the model's config.json from its source")
    archs = data.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise BuildError(f"{path} has no 'architectures' list; cannot tell which TensorRT-LLM model "
                         "class converts it", where=f"{path}:architectures",
                         hint="add the architecture the model was trained as, e.g. "
                              '"architectures": ["Qwen3ForCausalLM"]')
    model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    raw_dtype = data.get("torch_dtype", data.get("dtype"))
    torch_dtype = _DTYPES.get(str(raw_dtype).lower().removeprefix("torch.")) if raw_dtype else None
    max_pos = data.get("max_position_embeddings")
    return HfModelInfo(
        path=folder,
        architecture=archs[0],
        model_type=model_type,
        torch_dtype=torch_dtype,
        config_sha256=hashlib.sha256(raw).hexdigest(),
        max_position_embeddings=max_pos if isinstance(max_pos, int) and not isinstance(max_pos, bool) else None,
        sliding_windows=from_hf_config(data, where=str(path)),
        explicit_head_dim=_explicit_head_dim(data),
        tied_embeddings=data.get("tie_word_embeddings") is True,
        quant_method=_quant_method(data),
        num_attention_heads=_count(data, "num_attention_heads"),
        num_key_value_heads=_count(data, "num_key_value_heads") or _count(data, "num_attention_heads"),
        num_hidden_layers=_count(data, "num_hidden_layers"),
    )


def _count(data: dict, key: str) -> int | None:
    """A positive integer of config.json (a head or layer count), else None."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _explicit_head_dim(data: dict) -> int | None:
    """``head_dim`` when config.json gives one other than ``hidden_size // num_attention_heads``.

    >>> _explicit_head_dim({"hidden_size": 1024, "num_attention_heads": 16, "head_dim": 128})
    128
    >>> _explicit_head_dim({"hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128}) is None
    True
    """
    head, hidden, heads = data.get("head_dim"), data.get("hidden_size"), data.get("num_attention_heads")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (head, hidden, heads)):
        return None
    return head if head != hidden // heads else None


def _quant_method(data: dict) -> str | None:
    """The checkpoint's quantization (``quantization_config.quant_method``), or None for full weights."""
    section = data.get("quantization_config")
    if not isinstance(section, dict):
        return None
    return str(section.get("quant_method") or section.get("quant_algo") or "unknown")


def trtllm_class_for(architecture: str, *, where: str = "") -> str:
    """The ``tensorrt_llm.models`` class name for an HF architecture; :class:`BuildError` if unknown."""
    try:
        return ARCHITECTURE_TO_CLASS[architecture]
    except KeyError:
        supported = ", ".join(sorted(ARCHITECTURE_TO_CLASS))
        raise BuildError(
            f"architecture {architecture!r} is not one trtlade builds (trtllm-build would fail with "
            f"\"Unsupported model architecture\")", where=f"{where}:architectures[0]" if where else "",
            hint=f"supported: {supported}; other models need their own TensorRT-LLM conversion") from None


def check_architecture_version(architecture: str, version: str, *, where: str = "") -> None:
    """:class:`BuildError` when TensorRT-LLM ``version`` predates the first release that converts
    ``architecture`` (Qwen3 is left to the conversion probe: a patched 0.16 build converts it).

    >>> check_architecture_version("Gemma3ForCausalLM", "0.19.0")
    >>> check_architecture_version("Gemma3ForCausalLM", "0.18.2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trtlade.builder.errors.BuildError: TensorRT-LLM 0.18.2 does not convert Gemma3ForCausalLM: its first release ...
    """
    from trtlade.trtllm.compat import parse_version

    first = FIRST_VERSION.get(architecture)
    if first is None or is_qwen3(architecture):
        return
    have, need = parse_version(version), parse_version(first)
    if have.key < need.key:
        source = next(a.source for a in BUILDABLE if a.architecture == architecture)
        raise BuildError(f"TensorRT-LLM {version} does not convert {architecture}: its first release that does "
                         f"is {first} ({source})", where=f"{where}:architectures[0]" if where else "",
                         hint=f"pip install 'tensorrt-llm>={first},<1.3' (trtlade supports up to 1.2), or serve "
                              f"this model with --backend reference")


def is_qwen3(architecture: str, model_type: str | None = None) -> bool:
    return architecture in QWEN3_ARCHITECTURES or (model_type or "") in _QWEN3_MODEL_TYPES


def weights_fingerprint(folder: Path, files: Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """Name, size and mtime of every weight file in ``folder`` (a cheap stand-in for hashing GBs):
    a changed or replaced weight file changes the conversion stamp."""
    paths = files if files is not None else sorted(
        p for p in folder.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    out = []
    for p in paths:
        st = p.stat()
        out.append({"name": p.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out

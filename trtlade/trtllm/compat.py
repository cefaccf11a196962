"""TensorRT-LLM compatibility: a lazy import, the supported version range, feature predicates.

trtlade never imports ``tensorrt_llm`` at module import time (it needs a GPU driver and pulls in
torch); every caller goes through :func:`import_tensorrt_llm`, which turns every way the import can
fail into a :class:`TrtllmUnavailable` carrying a message and a hint the CLI prints as is.

Supported range: ``0.16 <= version < 1.3``. Lookahead decoding runs only on the TensorRT-engine
backend (``trtllm-build`` engines); upstream removed that backend, ``trtllm-build`` and Lookahead
after the 1.3.0 release candidates, and 0.16 is the oldest release trtlade was checked against.

    >>> parse_version("0.16.0")
    TrtllmVersion(major=0, minor=16, patch=0, raw='0.16.0')
    >>> is_supported("1.2.1"), is_supported("1.3.0rc1"), is_supported("0.15.0")
    (True, False, False)
    >>> supports_qwen3("0.16.0"), supports_qwen3("1.0.0rc2"), supports_qwen3("1.0.0rc3"), supports_qwen3("1.0.0")
    (False, False, True, True)
    >>> [b.issue for b in known_bugs("0.20.0")], known_bugs("0.19.0")
    (['NVIDIA/TensorRT-LLM#5451'], [])
"""

from __future__ import annotations

from trtlade.errors import TrtladeError

import importlib
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = [
    "MIN_VERSION",
    "MAX_VERSION_EXCLUSIVE",
    "SUPPORTED_RANGE",
    "INSTALL_HINT",
    "QWEN3_STOCK_VERSION",
    "TrtllmUnavailable",
    "TrtllmVersion",
    "parse_version",
    "is_supported",
    "check_version",
    "version_problem",
    "import_tensorrt_llm",
    "installed_version",
    "supports_qwen3",
    "qwen3_note",
    "qwen3_floor",
    "release_key",
    "QWEN3_FLOORS",
    "Qwen3Floor",
    "QWEN3_TIED_EMBEDDINGS_NOTE",
    "has_lookahead",
    "KnownBug",
    "KNOWN_LOOKAHEAD_BUGS",
    "known_bugs",
]

MIN_VERSION: tuple[int, int] = (0, 16)
MAX_VERSION_EXCLUSIVE: tuple[int, int] = (1, 3)
SUPPORTED_RANGE = "0.16 <= version < 1.3"
#: First release with stock Qwen3 (dense) support on the engine backend: NVIDIA/TensorRT-LLM PR #5650, merged
#: 2025-07-10, between the commits tensorrtllm_backend pinned for 1.0.0rc2 (07-08) and 1.0.0rc3 (07-16); a
#: maintainer in NVIDIA/TensorRT-LLM#6295: "supported for conversion starting from version 1.0.0rc3".
QWEN3_STOCK_VERSION = "1.0.0rc3"


@dataclass(frozen=True)
class Qwen3Floor:
    """A Qwen3 checkpoint feature and the first stock release whose engine flow converts it (None: no
    release in trtlade's range is known to), with where that boundary comes from."""

    feature: str
    first: str | None
    source: str


#: The Qwen3 features whose first stock release differs, read per release (docs/guides/build.md carries the table).
QWEN3_FLOORS: dict[str, Qwen3Floor] = {
    "dense": Qwen3Floor("Qwen3 (dense)", QWEN3_STOCK_VERSION,
                        "PR #5650 (tensorrt_llm/models/qwen/: qwen3 in QWenConfig's valid_types); #6295"),
    "head_dim": Qwen3Floor(
        "a head_dim other than hidden_size / num_attention_heads (Qwen3-0.6B, 4B, 32B)", "1.0.0rc5",
        "1.0.0rc3 and rc4 compute head_dim = hidden_size // num_attention_heads (NVIDIA/TensorRT-LLM#6182 on the "
        "1.0.0rc3 container, #5912); QWenConfig.from_hugging_face reads getattr(hf_config, 'head_dim', ...) "
        "from rc5 on (#6344, as the third reading places it; 1.0.0 and later inherit it)"),
    "moe": Qwen3Floor("Qwen3-MoE (Qwen3MoeForCausalLM)", "1.0.0rc6",
                      "release notes 1.0: 'Add Qwen3 MoE support to TensorRT backend'; the third reading places its "
                      "merge in 1.0.0rc6 (not confirmed against a tag here)"),
}
#: Open upstream: a Qwen3 checkpoint with tied embeddings (no lm_head.weight). Warned, not refused.
QWEN3_TIED_EMBEDDINGS_NOTE = (
    "tie_word_embeddings is true (Qwen3-0.6B, 1.7B, 4B): whether the engine flow's Qwen converter fills "
    "lm_head from the embedding table in 1.0-1.2 is open upstream (not settled by the sources read; "
    "NVIDIA/TensorRT-LLM#1733 is the same question for the Llama converter); check the engine's output "
    "against the model")
INSTALL_HINT = (
    "install TensorRT-LLM on a Linux machine with an NVIDIA GPU and CUDA driver, in trtlade's source folder: "
    "pip install -e '.[trtllm]' --extra-index-url https://pypi.nvidia.com for a PyTorch-backend bundle (NGram / SA, "
    "TensorRT-LLM 1.3 on), or pip install -e '.[trtllm-engine]' --extra-index-url https://pypi.nvidia.com for a "
    "Lookahead engine (tensorrt-llm>=0.16,<1.3); or run trtlade inside NVIDIA's NGC TensorRT-LLM container of that "
    "line (nvcr.io/nvidia/tensorrt-llm/release); "
    "without a GPU use the reference engine (build --backend reference, serve --engine reference)"
)


class TrtllmUnavailable(TrtladeError, RuntimeError):
    """TensorRT-LLM cannot be used here: not installed, failed to import, or an unsupported version.

    ``message`` says what is wrong (with the version found, if any); ``hint`` says what to do.
    ``version`` is the version string found (None when the import failed).
    """

    def __init__(self, message: str, hint: str = "", *, version: str | None = None) -> None:
        super().__init__(message, hint)
        self.version = version


@dataclass(frozen=True, order=True)
class TrtllmVersion:
    """A TensorRT-LLM version, compared by (major, minor, patch); pre-/post-release tags are kept in
    ``raw`` only (``1.3.0rc1`` counts as 1.3, as pip's ``<1.3`` excludes 1.3 pre-releases too)."""

    major: int
    minor: int
    patch: int
    raw: str = ""

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return self.raw or f"{self.major}.{self.minor}.{self.patch}"


_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str | TrtllmVersion) -> TrtllmVersion:
    """``"0.16.0"``, ``"1.2.0rc3"``, ``"0.17.0.post1"``, ``"1.0"`` -> :class:`TrtllmVersion`.

    Raises ``ValueError`` for text without a leading ``major.minor``.
    """
    if isinstance(text, TrtllmVersion):
        return text
    match = _VERSION_RE.match(str(text))
    if not match:
        raise ValueError(f"not a TensorRT-LLM version: {text!r} (expected e.g. 0.16.0)")
    major, minor, patch = match.group(1), match.group(2), match.group(3) or "0"
    return TrtllmVersion(int(major), int(minor), int(patch), str(text).strip())


def is_supported(version: str | TrtllmVersion) -> bool:
    """``0.16 <= version < 1.3``."""
    return version_problem(version) is None


def version_problem(version: str | TrtllmVersion) -> TrtllmUnavailable | None:
    """None for a supported version, else the error to raise (message names the version and why)."""
    try:
        v = parse_version(version)
    except ValueError:
        return TrtllmUnavailable(
            f"cannot read the installed TensorRT-LLM version {version!r}; trtlade supports "
            f"{SUPPORTED_RANGE}", hint=INSTALL_HINT, version=str(version))
    if (v.major, v.minor) < MIN_VERSION:
        return TrtllmUnavailable(
            f"TensorRT-LLM {v} is too old: trtlade supports {SUPPORTED_RANGE} "
            f"(Lookahead arrived in 0.13; 0.16 is the oldest release trtlade was checked against)",
            hint="upgrade: pip install -e '.[trtllm-engine]' in trtlade's source folder (or an NGC "
                 "TensorRT-LLM container, "
                 "tag 0.16 to 1.2)",
            version=str(v))
    if (v.major, v.minor) >= MAX_VERSION_EXCLUSIVE:
        return TrtllmUnavailable(
            f"TensorRT-LLM {v} is too new: trtlade supports {SUPPORTED_RANGE}, because upstream "
            f"removed the TensorRT-engine backend (trtllm-build) and with it Lookahead decoding after "
            f"the 1.2 series",
            hint=_too_new_hint(),
            version=str(v))
    return None


def _too_new_hint() -> str:
    """What a Lookahead engine build on 1.3+ should do instead: the NGram / SA equivalent on the PyTorch backend,
    or the engine line's extra."""
    from trtlade.trtllm.releases import EQUIVALENT_SPECULATION, flow_mapping

    return (f"on this release deploy the model-free equivalent on the PyTorch backend: `trtlade build --speculation "
            f"sa` (speculative_config {flow_mapping(EQUIVALENT_SPECULATION)}; `trtlade tune --drafters` measures which "
            "drafter suits your traffic); to keep a Lookahead engine install the engine line: pip install -e "
            "'.[trtllm-engine]' in trtlade's source folder (tensorrt-llm>=1.2,<1.3, or the NGC container tag 1.2.x); "
            "or use the "
            "reference engine: --backend reference")


def check_version(version: str | TrtllmVersion) -> TrtllmVersion:
    """The parsed version, or raise :class:`TrtllmUnavailable` when outside ``0.16 <= v < 1.3``."""
    problem = version_problem(version)
    if problem is not None:
        raise problem
    return parse_version(version)


def import_tensorrt_llm(submodule: str | None = None, *, check: bool = True) -> ModuleType:
    """Import ``tensorrt_llm`` (or ``tensorrt_llm.<submodule>``), checking the version range.

    Every failure becomes a :class:`TrtllmUnavailable`: not installed (how to install it), an
    import-time crash (no CUDA driver, a mismatched torch: the error text and what to check), or a
    version outside the range (``check=False`` skips that check, for diagnostics only).
    """
    try:
        root = importlib.import_module("tensorrt_llm")
    except ModuleNotFoundError as exc:
        if exc.name not in (None, "tensorrt_llm"):
            raise _import_crash(exc) from exc
        raise TrtllmUnavailable(
            "TensorRT-LLM is not installed (the Python package tensorrt_llm cannot be imported)",
            hint=INSTALL_HINT) from exc
    except Exception as exc:  # noqa: BLE001 - the import runs CUDA/TensorRT initialisation
        raise _import_crash(exc) from exc
    version = getattr(root, "__version__", None)
    if check:
        if version is None:
            raise TrtllmUnavailable(
                "the tensorrt_llm package found has no __version__; is it a TensorRT-LLM install?",
                hint=INSTALL_HINT)
        check_version(str(version))
    if submodule is None:
        return root
    try:
        return importlib.import_module(f"tensorrt_llm.{submodule}")
    except Exception as exc:  # noqa: BLE001
        raise TrtllmUnavailable(
            f"TensorRT-LLM {version} has no usable module tensorrt_llm.{submodule}: "
            f"{type(exc).__name__}: {exc}",
            hint=f"trtlade supports {SUPPORTED_RANGE}; reinstall TensorRT-LLM", version=version) from exc


def _import_crash(exc: BaseException) -> TrtllmUnavailable:
    return TrtllmUnavailable(
        f"importing tensorrt_llm failed: {type(exc).__name__}: {exc}",
        hint="TensorRT-LLM needs an NVIDIA GPU with its CUDA driver (nvidia-smi must work) and the "
             "torch version it was built with; the NGC TensorRT-LLM container has both")


def installed_version() -> str | None:
    """The installed TensorRT-LLM version without importing it (package metadata), or None."""
    from importlib import metadata

    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def release_key(version: str | TrtllmVersion) -> tuple[int, int, int, int]:
    """Orders releases and their candidates: ``1.0.0rc3 < 1.0.0rc5 < 1.0.0 < 1.0.0.post1``.

    >>> release_key("1.0.0rc3") < release_key("1.0.0rc5") < release_key("1.0.0") == release_key("1.0.0.post1")
    True
    """
    v = parse_version(version)
    match = re.search(r"rc(\d+)", v.raw)
    return (v.major, v.minor, v.patch, int(match.group(1)) if match else 1_000)


def qwen3_floor(*, moe: bool = False, head_dim: bool = False) -> tuple[str, list[Qwen3Floor]]:
    """The first stock release that converts a Qwen3 checkpoint with these features, and why.

    >>> qwen3_floor()[0], qwen3_floor(head_dim=True)[0], qwen3_floor(moe=True, head_dim=True)[0]
    ('1.0.0rc3', '1.0.0rc5', '1.0.0rc6')
    """
    floors = [QWEN3_FLOORS["dense"]] + ([QWEN3_FLOORS["head_dim"]] if head_dim else []) \
        + ([QWEN3_FLOORS["moe"]] if moe else [])
    first = max((f.first for f in floors if f.first), key=release_key)
    return first, floors


def supports_qwen3(version: str | TrtllmVersion, *, moe: bool = False, head_dim: bool = False) -> bool:
    """Whether a *stock* TensorRT-LLM of this version builds this Qwen3 checkpoint's engine.

    Older versions (0.16 in the user's deployment) need a build patched for Qwen3; whether the
    installed one is patched is only known by trying its config conversion (trtlade does that before
    converting any weights).
    """
    return release_key(version) >= release_key(qwen3_floor(moe=moe, head_dim=head_dim)[0])


def qwen3_note(version: str | TrtllmVersion, *, moe: bool = False, head_dim: bool = False) -> str:
    """One sentence on Qwen3 support for a version (for plans and error hints)."""
    first, floors = qwen3_floor(moe=moe, head_dim=head_dim)
    if supports_qwen3(version, moe=moe, head_dim=head_dim):
        return f"TensorRT-LLM {version} builds this Qwen3 checkpoint (stock support from {first})"
    why = "; ".join(f"{f.feature}: from {f.first} ({f.source})" for f in floors)
    return (f"stock TensorRT-LLM {version} does not convert this Qwen3 checkpoint (\"Unsupported Qwen type: "
            f"qwen3\" below {QWEN3_STOCK_VERSION}); the first stock release that does is {first} ({why}): "
            f"pip install 'tensorrt-llm>={first},<1.3', or a {version} build patched for Qwen3 (e.g. NetEase's "
            "fork used with grps_trtllm)")


def has_lookahead(version: str | TrtllmVersion) -> bool:
    """Lookahead on the engine backend: 0.13 to 1.2 (trtlade supports 0.16 onwards)."""
    v = parse_version(version)
    return (0, 13) <= (v.major, v.minor) < MAX_VERSION_EXCLUSIVE


def describe(module: Any) -> str:
    """``"tensorrt_llm 0.16.0 (/path/to/tensorrt_llm)"`` for logs."""
    return f"tensorrt_llm {getattr(module, '__version__', '?')} ({getattr(module, '__file__', '?')})"


@dataclass(frozen=True)
class KnownBug:
    """A Lookahead bug of some TensorRT-LLM releases: ``first`` <= (major, minor) < ``end``.

    ``needs``: the engine's ``build_config`` key that must be set and non-zero for the bug to apply
    (None: every lookahead engine). trtlade warns about these and does not refuse them.
    """

    issue: str
    first: tuple[int, int]
    end: tuple[int, int]
    summary: str
    instead: str
    needs: str | None = None

    def applies(self, version: str | TrtllmVersion, build_config: Any = None) -> bool:
        try:
            v = parse_version(version)
        except ValueError:
            return False
        if not self.first <= (v.major, v.minor) < self.end:
            return False
        return self.needs is None or bool((build_config or {}).get(self.needs))

    def message(self, version: str | TrtllmVersion) -> str:
        return f"TensorRT-LLM {version} has a known Lookahead bug, {self.issue}: {self.summary}"


#: Each entry read from the issue itself; the range is the versions reported, not a proof that others are
#: free of it (docs/reference/trtllm-compat.md lists them with what trtlade does).
KNOWN_LOOKAHEAD_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        "NVIDIA/TensorRT-LLM#5451", (0, 20), (0, 21),
        "a KV-cache rewind kernel (updateKVCacheDraftTokenLocationBatched, from "
        "TrtGptModelInflightBatching::rewindKVCacheBlocks) fails mid-generation with \"cudaGetLastError(): "
        "invalid configuration argument\" and takes the executor loop down (open, reported on 0.20.0 as a "
        "regression of the engine flow)",
        "0.19.0, the release before the regression (the first whose Triton backend also takes W/N/G)"),
    KnownBug(
        "NVIDIA/TensorRT-LLM#6009", (0, 20), (0, 21),
        "Lookahead with a prompt-embedding table (multimodal, max_prompt_embedding_table_size > 0) fails "
        "every forward with \"Invalid input shape\" (vocab_embedding slice out of bounds)",
        "0.19.0, or an engine built without a prompt-embedding table", needs="max_prompt_embedding_table_size"),
)


def known_bugs(version: str | TrtllmVersion | None, build_config: Any = None) -> list[KnownBug]:
    """The known Lookahead bugs of ``version`` (for an engine with this ``build_config``, if given)."""
    if version is None:
        return []
    return [bug for bug in KNOWN_LOOKAHEAD_BUGS if bug.applies(version, build_config)]

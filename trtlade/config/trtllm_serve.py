"""A ``trtllm-serve --config`` file (``--extra_llm_api_options`` on releases without the alias), as it is: the
verdict TensorRT-LLM gives it at start, for the release named.

TensorRT-LLM reads every key of the file into its LLM arguments (``tensorrt_llm/llmapi/llm_args.py``,
``update_llm_args_with_extra_dict``, then ``TorchLlmArgs(**...)``, or ``TrtLlmArgs`` below 1.3 where the file
says ``backend: tensorrt`` or names a drafter only that backend runs): a key it does not know, a value of the
wrong type, out of its bounds or outside its ``Literal``, or one its validators refuse stops the server. trtlade
gives the same verdict without TensorRT-LLM (:mod:`trtlade.trtllm.llm_args_check`: the whole schema of the
release, read from upstream's source into a table, and its validators as cited rules), each finding at its
``file:line`` and field. Around it, what only trtlade says:

* ``backend: tensorrt``: the TensorRT-engine backend exists below 1.3 only (``LLM(backend="tensorrt")`` raises
  ValueError from 1.3 on: ``docs/source/legacy/tensorrt-backend-removal.md``);
* ``speculative_config`` with ``decoding_type: Lookahead``: only on that engine backend, below 1.3, with the
  NGram / SA equivalent named on 1.3+; Lookahead or Medusa in a file that names no backend: the command line must
  say ``--backend tensorrt`` (the file is checked as ``TrtLlmArgs``);
* where TensorRT-LLM is importable, its own ``TorchLlmArgs`` checks the file too and a disagreement is an
  error (:mod:`trtlade.trtllm.upstream_gate`).

Worked example::

    speculative_config:
      decoding_type: SA
      max_draft_len: 4
      max_matching_ngram_size: 0     # -> error at this line: must be > 0 (fixed ngram) or -1 (longest match)
"""

from __future__ import annotations

from typing import Any, Optional

import difflib

from trtlade.config.loader import YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.spec import LookaheadSpec, SpecError
from trtlade.trtllm.releases import EQUIVALENT_SPECULATION, flow_mapping, lookahead_refusal_1_3, release_for

__all__ = ["is_trtllm_serve_config", "check_trtllm_serve", "is_llmapi_model_yaml", "check_llmapi_model_yaml"]

#: The LLM-API keys of the newest schema read (TorchLlmArgs' fields), for recognising a file's kind.
def _llm_api_keys() -> frozenset[str]:
    from trtlade.trtllm.llm_args_check import tables

    newest = tables()[-1]
    keys: set[str] = set()
    for table in tables():
        for root in ("TorchLlmArgs", "TrtLlmArgs"):
            if root in table.models:
                keys |= set(table.models.fields(root))
    return frozenset(keys - {"model"}) or frozenset(newest.models.fields("TorchLlmArgs"))




def is_trtllm_serve_config(data: Any) -> bool:
    """A mapping of LLM-API keys (``speculative_config``, ``kv_cache_config`` ...; one misspelt still counts) and no
    trtlade section.

    >>> is_trtllm_serve_config({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4}})
    True
    >>> is_trtllm_serve_config({"lookahead": {"spec": "4,2,4"}}), is_trtllm_serve_config({"max_batch_sise": 8})
    (False, True)
    """
    if not isinstance(data, dict) or not data:
        return False
    if {"lookahead", "serve", "bench", "build", "speculation", "models"} & set(data):
        return False
    keys = _llm_api_keys()
    return any(key in keys or difflib.get_close_matches(str(key), keys, n=1, cutoff=0.85) for key in data)


def is_llmapi_model_yaml(data: Any) -> bool:
    """The ``model.yaml`` of Triton's llmapi model: LLM arguments plus ``triton_config``.

    >>> is_llmapi_model_yaml({"model": "/m", "triton_config": {"decoupled": True, "max_batch_size": 0}})
    True
    """
    return isinstance(data, dict) and "triton_config" in data


def check_llmapi_model_yaml(doc: YamlDocument, release: Optional[str] = None,
                            upstream: str = "auto") -> list[Diagnostic]:
    """A ``model.yaml`` as the stock llmapi ``model.py`` loads it (``triton_backend/all_models/llmapi/
    tensorrt_llm/1/model.py``: ``triton_config["decoupled"]`` and ``["max_batch_size"]`` read with no fallback;
    every other key, ``model`` first, an ``LLM(...)`` argument), then its LLM arguments as a trtllm-serve file's."""
    data: dict[str, Any] = doc.data
    out: list[Diagnostic] = []
    model = data.get("model")
    if not isinstance(model, str) or not model:
        out.append(doc.diagnostic("error", f"model must be the checkpoint's path, got {model!r}", loc=(("model",) if
                                  "model" in data else ()), code="llmapi-model",
                                  hint="model: /models/Qwen3-8B (the Hugging Face folder as Triton sees it)"))
    triton = data.get("triton_config")
    if not isinstance(triton, dict):
        return out + [doc.diagnostic("error", f"triton_config must be a mapping, got {triton!r}",
                                     loc=("triton_config",), code="llmapi-triton-config",
                                     hint="triton_config: {max_batch_size: 0, decoupled: true}")]
    for key in ("decoupled", "max_batch_size"):
        if key not in triton:
            out.append(doc.diagnostic("error", f"triton_config.{key} is missing: the stock model.py reads it with no "
                                      "fallback (KeyError when Triton loads the model)", loc=("triton_config",),
                                      code="llmapi-triton-config", hint="triton_config: {max_batch_size: 0, "
                                      "decoupled: true}"))
    if "decoupled" in triton and not isinstance(triton["decoupled"], bool):
        out.append(doc.diagnostic("error", f"triton_config.decoupled must be true or false, got "
                                  f"{triton['decoupled']!r}", loc=("triton_config", "decoupled"),
                                  code="llmapi-triton-config", hint="true streams one response per step"))
    size = triton.get("max_batch_size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        out.append(doc.diagnostic("error", f"triton_config.max_batch_size must be an integer >= 0, got {size!r}",
                                  loc=("triton_config", "max_batch_size"), code="llmapi-triton-config",
                                  hint="0, as the stock model.yaml: the LLM batches requests in flight itself"))
    return out + check_trtllm_serve(doc, release, own_keys=("triton_config",), upstream=upstream)


def check_trtllm_serve(doc: YamlDocument, release: Optional[str] = None, own_keys: tuple[str, ...] = (),
                       upstream: str = "auto") -> list[Diagnostic]:
    """Upstream's verdict on the file for ``release`` (None: unknown, checked against the newest schema read),
    trtlade's own findings around it, and upstream's own check compared (``upstream``: auto where
    TensorRT-LLM is importable, require: an error where it is not, off). ``own_keys``: keys of the file's kind
    checked elsewhere (Triton's ``triton_config``)."""
    from trtlade.trtllm.llm_args_check import check_llm_args
    from trtlade.trtllm.upstream_gate import compare

    out: list[Diagnostic] = []
    if release is not None and release_for(release).note:
        out.append(doc.diagnostic("warning", f"TensorRT-LLM {release} is {release_for(release).note}", loc=(),
                                  code="trtllm-release-unknown"))
    ours = _backend(doc, release) + _speculation(doc, release) + _serve_keys(doc)
    taken = {d.path for d in ours if d.severity == "error"}
    own_keys = (*own_keys, *SERVE_KEYS)
    schema = check_llm_args(doc, release, own_keys)
    out += ours + [d for d in schema if not (d.severity == "error" and _under(d.path, taken))]
    if upstream != "off":
        data = {k: v for k, v in doc.data.items() if k not in own_keys}
        out += compare(doc, out, data, required=upstream == "require")
    return out


#: Keys trtllm-serve takes out of the file before it builds the LLM arguments (``disagg_cluster``: ``serve()`` pops
#: it and hands it to ``extract_disagg_cluster_config``, tensorrt_llm/commands/serve.py@00209af1), so no
#: ``TorchLlmArgs`` field refuses them at start.
SERVE_KEYS = ("disagg_cluster",)


def _serve_keys(doc: YamlDocument) -> list[Diagnostic]:
    """``disagg_cluster``: trtllm-serve's own; it asserts ``--server_role`` on the command line with it."""
    if "disagg_cluster" not in doc.data:
        return []
    if not isinstance(doc.data["disagg_cluster"], dict):
        return [doc.diagnostic("error", "disagg_cluster must be a mapping (trtllm-serve reads it into a "
                               "DisaggClusterConfig: cluster_uri, ...)", loc=("disagg_cluster",),
                               code="trtllm-serve-disagg", hint="disagg_cluster: {cluster_uri: ...}")]
    return [doc.diagnostic("info", "disagg_cluster is trtllm-serve's own key (it takes it out before the LLM "
                           "arguments, so no TorchLlmArgs field refuses it): the command line must give --server_role "
                           "(serve.py asserts it); its fields are not checked here", loc=("disagg_cluster",),
                           code="trtllm-serve-disagg")]


def _under(path: str, taken: set[str]) -> bool:
    return any(path == t or path.startswith(t + ".") for t in taken)


def _backend(doc: YamlDocument, release: Optional[str]) -> list[Diagnostic]:
    backend = doc.data.get("backend")
    if backend not in ("tensorrt", "trt") or release is None or release_for(release).engine_backend:
        return []
    return [doc.diagnostic("error", f"backend {backend}: TensorRT-LLM {release} has no TensorRT-engine backend "
                           "(LLM(backend=\"tensorrt\") raises ValueError from 1.3 on)", loc=("backend",),
                           code="trtllm-serve-backend",
                           hint="use backend: pytorch (NGram / SA / AUTO), or target a release below 1.3 for a "
                                "Lookahead engine")]


def _speculation(doc: YamlDocument, release: Optional[str]) -> list[Diagnostic]:
    block = doc.data.get("speculative_config")
    if isinstance(block, dict) and block.get("decoding_type") == "Lookahead":  # case-exact, as upstream's union
        return _lookahead(doc, block, release)
    engine = release is None or release_for(release).engine_backend
    if isinstance(block, dict) and block.get("decoding_type") == "Medusa" and engine:
        return _engine_backend_note(doc, "Medusa")
    return []


def _engine_backend_note(doc: YamlDocument, kind: str) -> list[Diagnostic]:
    """A drafter only the TensorRT-engine backend runs, in a file that names no backend: checked as ``TrtLlmArgs``
    (:func:`trtlade.trtllm.llm_args_check.root_class`), and the command line must choose that backend."""
    if doc.data.get("backend") is not None:
        return []
    return [doc.diagnostic(
        "info", f"{kind} needs the TensorRT-engine backend ({kind}DecodingConfig.supports_backend refuses pytorch): "
        "the file does not choose one, so it is checked as TrtLlmArgs and the command line must choose it "
        "(trtllm-serve ENGINE_DIR --backend tensorrt; trtlade build prints it)", loc=("speculative_config",
                                                                                      "decoding_type"),
        code="speculation-backend")]


def _lookahead(doc: YamlDocument, block: dict[str, Any], release: Optional[str]) -> list[Diagnostic]:
    where = ("speculative_config", "decoding_type")
    if release is not None and (why := lookahead_refusal_1_3(release)) is not None:
        return [doc.diagnostic("error", why, loc=where, code="speculation-release",
                               hint=f"write the equivalent instead: speculative_config: "
                                    f"{flow_mapping(EQUIVALENT_SPECULATION)} (`trtlade tune --drafters` measures "
                                    "which drafter suits your traffic; `trtlade build --speculation sa` writes it)")]
    backend = doc.data.get("backend")
    if backend is not None and backend not in ("tensorrt", "trt"):
        return [doc.diagnostic("error", f"Lookahead runs only on the TensorRT-engine backend, not "
                               f"{backend} (LookaheadDecodingConfig.supports_backend refuses pytorch)", loc=where,
                               code="speculation-backend", hint="backend: tensorrt (a release below 1.3 and a "
                               "trtllm-build engine), or use NGram / SA")]
    out = _engine_backend_note(doc, "Lookahead")
    spec_keys = {k: v for k, v in block.items() if k != "decoding_type"}
    try:
        LookaheadSpec.parse(spec_keys)
    except SpecError as exc:
        return [doc.diagnostic("error", exc.message, loc=("speculative_config",),
                               code="speculation", hint=exc.hint)]
    return out

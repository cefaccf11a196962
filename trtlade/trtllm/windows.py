"""Sliding-window layers and Lookahead on TensorRT-LLM's engine flow: what the sources allow.

Gemma 2 and Gemma 3 mix sliding-window ("local") layers with global ones. In TensorRT-LLM's engine flow
a layer's window is a *runtime* setting, not part of the engine:

- ``TrtGptModel``'s constructor (cpp/tensorrt_llm/batch_manager/trtGptModel.h) gives every layer one
  window of ``max_sequence_len`` unless ``KvCacheConfig.max_attention_window`` is set (each entry then
  clamped to ``max_sequence_len``, the vector repeated over the layers). TensorRT-LLM's Gemma example
  runs Gemma 3 with ``--max_attention_window_size 512 512 512 512 512 3100`` for that reason
  (examples/models/core/gemma/README.md, its Gemma 3 section; NVIDIA/TensorRT-LLM#13123). Without it
  the local layers attend to the whole sequence, and past the smallest window the output is not the
  model's.
- With it, a Lookahead engine does not start: Lookahead rewinds the KV cache of rejected drafts
  (``SpeculativeDecodingMode::needsKVCacheRewind()`` includes ``kLookaheadDecoding``,
  cpp/include/tensorrt_llm/runtime/speculativeDecodingMode.h), and ``TrtGptModelInflightBatching``'s
  constructor (cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp) refuses rewinding with more
  than one KV pool ("Rewinding KV cache blocks for models with multiple pools is not supported"; the block
  manager keeps a pool per window size) and with variable windows ("Rewinding KV cache blocks for
  variable SWA models isn't supported").

What is left is the case where every window covers the whole sequence: an engine whose ``max_seq_len``
(as built, draft tokens included) is at most the smallest window. Then one window of ``max_seq_len``
is exactly the model's attention, and the executor sees no variable windows. trtlade allows a Lookahead
engine of such a model only there.

Where the window comes from: the Hugging Face ``config.json`` (``sliding_window`` with ``layer_types``,
or Gemma 2's every-other-layer and Gemma 3's ``sliding_window_pattern``); an engine's ``config.json``
records it for Gemma 3 only (``Gemma3ConfigGroup``: ``sliding_window``, ``_sliding_window_pattern``,
tensorrt_llm/models/modeling_utils.py). Gemma 2's converter keeps no window (``Gemma2ConfigGroup`` has
``query_pre_attn_scalar`` and the two soft-cappings only), so for a Gemma 2 engine without its model
folder trtlade takes 4096, the window of every published Gemma 2 checkpoint (2B, 9B, 27B), and says so.

    >>> w = from_hf_config({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    ...                     "sliding_window": 512, "sliding_window_pattern": 6, "num_hidden_layers": 26})
    >>> w.smallest, w.local_layers, w.layers
    (512, 22, 26)
    >>> lookahead_refusal(w, 4103) is None, lookahead_refusal(w, 512) is None
    (False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["SlidingWindows", "from_hf_config", "from_engine_config", "lookahead_refusal", "within_note",
           "GEMMA2_WINDOW", "UPSTREAM_MESSAGE"]

#: The window of every published Gemma 2 checkpoint (config.json ``sliding_window``).
GEMMA2_WINDOW = 4096
#: What TensorRT-LLM says when a Lookahead engine is started with variable windows.
UPSTREAM_MESSAGE = "Rewinding KV cache blocks for variable SWA models isn't supported"


@dataclass(frozen=True)
class SlidingWindows:
    """A model's sliding-window layers: the smallest window, how many of ``layers`` are local, and where
    the numbers were read (for messages)."""

    smallest: int
    local_layers: int
    layers: int
    source: str


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def from_hf_config(data: Mapping[str, Any], where: str = "config.json") -> Optional[SlidingWindows]:
    """The sliding-window layers of a Hugging Face config, or None when every layer is global or the
    windows are all one size (nothing variable).

    >>> w = from_hf_config({"model_type": "gemma2", "sliding_window": 4096, "num_hidden_layers": 42})
    >>> w.smallest, w.local_layers, w.source
    (4096, 21, 'config.json: sliding_window 4096, every other layer (Gemma 2)')
    >>> from_hf_config({"model_type": "llama", "num_hidden_layers": 30}) is None
    True
    """
    window, layers = _int(data.get("sliding_window")), _int(data.get("num_hidden_layers")) or 0
    if window is None:
        return None
    types = data.get("layer_types")
    model_type = str(data.get("model_type") or "")
    if isinstance(types, list) and types:
        local = sum(1 for t in types if t == "sliding_attention")
        how = "layer_types"
        layers = len(types)
    elif model_type == "gemma2":
        local, how = (layers + 1) // 2, "every other layer (Gemma 2)"
    elif model_type.startswith("gemma3"):
        pattern = _int(data.get("sliding_window_pattern")) or 6
        local = layers - layers // pattern
        how = f"{pattern - 1} of every {pattern} layers (Gemma 3)"
    else:
        return None  # one window on every layer (Mistral): not variable
    if local == 0 or local == layers:
        return None
    return SlidingWindows(window, local, layers, f"{where}: sliding_window {window}, {how}")


def from_engine_config(raw: Mapping[str, Any]) -> Optional[SlidingWindows]:
    """The sliding-window layers of a Gemma 2/3 engine, from its config.json (``pretrained_config``).

    >>> from_engine_config({"pretrained_config": {"architecture": "Gemma3ForCausalLM", "sliding_window": 512,
    ...     "_sliding_window_pattern": 6, "num_hidden_layers": 26}}).smallest
    512
    >>> from_engine_config({"pretrained_config": {"architecture": "Gemma2ForCausalLM",
    ...     "num_hidden_layers": 26}}).source  # doctest: +ELLIPSIS
    "Gemma 2's 4096 (every published checkpoint; the engine's config.json does not record it)..."
    """
    pretrained = raw.get("pretrained_config")
    if not isinstance(pretrained, Mapping):
        return None
    arch, layers = pretrained.get("architecture"), _int(pretrained.get("num_hidden_layers")) or 0
    if arch == "Gemma3ForCausalLM":
        window = _int(pretrained.get("sliding_window"))
        pattern = _int(pretrained.get("_sliding_window_pattern")) or 6
        if window is None:
            return None
        return SlidingWindows(window, layers - layers // pattern, layers,
                              f"the engine's pretrained_config.sliding_window {window}, {pattern - 1} of every "
                              f"{pattern} layers (Gemma 3)")
    if arch == "Gemma2ForCausalLM":
        return SlidingWindows(GEMMA2_WINDOW, (layers + 1) // 2, layers,
                              f"Gemma 2's {GEMMA2_WINDOW} (every published checkpoint; the engine's config.json "
                              "does not record it), every other layer")
    return None


def lookahead_refusal(windows: SlidingWindows, max_seq_len: int) -> Optional[str]:
    """Why a Lookahead engine of this model cannot serve it exactly on TensorRT-LLM, or None when
    ``max_seq_len`` (the engine's, draft tokens included) is within the smallest window."""
    if max_seq_len <= windows.smallest:
        return None
    return (f"{windows.local_layers} of the model's {windows.layers} layers attend through a sliding window of "
            f"{windows.smallest} tokens ({windows.source}), and max_seq_len {max_seq_len} goes past it. On "
            "TensorRT-LLM's engine flow the windows are a runtime setting (KvCacheConfig.max_attention_window): "
            f"without it every layer attends to all {max_seq_len} positions, so past {windows.smallest} tokens "
            "the output is not the model's; with it, a Lookahead engine does not start (TrtGptModelInflightBatching: "
            f"\"{UPSTREAM_MESSAGE}\")")


def within_note(windows: SlidingWindows, max_seq_len: int) -> str:
    """What the plan says when the rule passes."""
    return (f"the model's sliding window ({windows.smallest} tokens, {windows.local_layers} of {windows.layers} "
            f"layers) covers the engine's whole sequence (max_seq_len {max_seq_len} as built): one window of "
            "max_seq_len is the model's attention, and Lookahead starts (no variable windows)")

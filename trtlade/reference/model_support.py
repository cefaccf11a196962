"""Which models the reference engine drives, and the clear refusal of those it does not."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from trtlade.errors import TrtladeError
from trtlade.reference.native import linear_dtypes as native_linear_dtypes
from trtlade.reference.native import status as native_status

__all__ = ["UnsupportedModelError", "SUPPORTED_LAYER_TYPES", "check_supported", "check_native_kernels",
           "layer_windows", "tied"]

#: Attention kwargs this engine does not implement (check_supported refuses such models up front).
UNSUPPORTED_ATTENTION_KWARGS = ("s_aux", "sinks", "position_bias")
#: Layer types the engine drives: full causal attention, and a sliding window over the last ``window`` positions.
SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


class UnsupportedModelError(TrtladeError, ValueError):
    """The model cannot be driven by the reference engine (the message says why and what to use)."""


def check_native_kernels(model: nn.Module, dtype: torch.dtype, device: torch.device, *,
                          stock_linears: bool) -> None:
    """``native_kernels=True``: refuse, before any packing, what the native kernels do not run (the linear kernel
    runs under the engine's own forward and transformers' alike; ``stock_linears``: ``pack_linears=False`` keeps
    the model's own)."""
    hint = "leave native_kernels unset (the engine then uses them where they run) or set it to False"
    if stock_linears:
        raise UnsupportedModelError("native_kernels=True swaps the linear layers, which pack_linears=False keeps as "
                                    "they are", hint)
    name = str(dtype).removeprefix("torch.")
    if device.type != "cpu" or name not in native_linear_dtypes():
        raise UnsupportedModelError(f"native_kernels=True: the native linear kernel does not run {name} on "
                                    f"{device.type} here (it runs: {', '.join(native_linear_dtypes()) or 'nothing'} "
                                    f"on the CPU; {native_status()})", hint)


def tied(model: nn.Module) -> bool:
    """Whether the LM head shares its weight with the input embedding."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embed is not None and head.weight is embed.weight


def layer_windows(model: nn.Module) -> list[Optional[int]]:
    """Each decoder layer's sliding window, as its attention module hands it to the attention function:
    the module's own ``sliding_window`` (Gemma 2/3, Qwen2/3, Cohere 2: None on full layers), else the
    config's (Mistral, Mixtral: every layer); None for full attention.

    >>> from types import SimpleNamespace as NS
    >>> layers = [NS(self_attn=NS(sliding_window=4)), NS(self_attn=NS(sliding_window=None))]
    >>> layer_windows(NS(config=NS(num_hidden_layers=2), base_model_prefix="model", model=NS(layers=layers)))
    [4, None]
    """
    config = model.config
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = list(getattr(base, "layers", None) or [])
    windows: list[Optional[int]] = []
    for i in range(int(config.num_hidden_layers)):
        attn = getattr(layers[i], "self_attn", None) if i < len(layers) else None
        window = getattr(attn, "sliding_window") if attn is not None and hasattr(attn, "sliding_window") \
            else getattr(config, "sliding_window", None)
        windows.append(int(window) if window else None)
    return windows


def check_supported(model: nn.Module) -> None:
    """Refuse, by name, what the engine cannot drive exactly: encoder-decoders, layer types other than full
    and sliding-window attention, attention sinks, bidirectional attention."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "get_output_embeddings"):
        raise UnsupportedModelError(f"{type(model).__name__} is not a transformers causal LM")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{type(model).__name__} is an encoder-decoder; the engine runs decoder-only LMs")
    other = sorted({t for t in (getattr(config, "layer_types", None) or []) if t not in SUPPORTED_LAYER_TYPES})
    if other:
        raise UnsupportedModelError(
            f"{config.model_type}: layer types {other} are not supported; the reference engine drives layers of "
            f"types {list(SUPPORTED_LAYER_TYPES)} (full causal and sliding-window attention)")
    if getattr(config, "use_bidirectional_attention", False):
        raise UnsupportedModelError(f"{config.model_type}: bidirectional attention (use_bidirectional_attention) "
                                    f"is not a causal LM; the engine decodes causal models only")
    sinks = [name for name, _ in model.named_parameters() if name.rsplit(".", 1)[-1] in ("sinks", "s_aux")]
    if sinks:
        raise UnsupportedModelError(
            f"{config.model_type}: attention sinks (s_aux, e.g. {sinks[0]}) are not supported by the reference "
            f"engine; supported: full and sliding-window attention, attention and final-logit soft-capping")

"""Run a Hugging Face causal LM one decoding step at a time: tree-masked multi-row forwards on a
compacting KV cache, LM head only on the rows whose argmax is read.

Everything goes through the model's public forward (``model.model(input_ids, position_ids,
attention_mask, past_key_values)`` then ``lm_head`` on selected rows); the modeling code is used as
transformers ships it. Three pieces:

* :class:`CompactingKVCache` -- a ``transformers.Cache`` whose per-layer key/value buffers are
  preallocated (grown by doubling) instead of concatenated every step; after a lookahead step,
  :meth:`~CompactingKVCache.keep` moves the KV of the golden row and the accepted drafts to the
  consecutive slots p, p+1, ... and drops every other row of the step.
* :func:`pack_linear_layers` -- optional: replaces each ``nn.Linear`` module by a
  :class:`PackedLinear` calling oneDNN with a pre-packed weight (the same ``y = x W^T + b``).
  On this CPU, MKL's fp32 GEMM costs about K times the 1-row cost for K rows, oneDNN's packed
  GEMM is flat up to 4 rows, which is what makes lookahead's extra rows nearly free. It also
  makes every output row independent of how many rows the call has.
* :class:`ModelRunner` -- prefill, one step with an arbitrary tree of rows, KV compaction.

Worked example (rows of one step; p = 7 committed tokens in the cache)::

    runner.prefill([5, 9, 2, 7, 7, 1, 3])          -> argmax of the last row (the golden token g)
    runner.step(tokens=[g, a, b], depths=[0, 1, 1], mask=[[1,0,0],[1,1,0],[1,0,1]], logit_rows=[0, 1, 2])
        rows at positions 7, 8, 8; a and b each see g (and the cache), not each other
    runner.keep([0, 2])                              -> cache holds 9 tokens: the prompt, g, b
"""

from __future__ import annotations

import os

# OpenMP reads its wait policy when its runtime starts (at the first parallel region). With the
# default (active spinning) two threads were 4x slower than one on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from typing import Sequence  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import record_function  # noqa: E402
from transformers.cache_utils import Cache, CacheLayerMixin  # noqa: E402

__all__ = [
    "DTYPES",
    "resolve_dtype",
    "default_threads",
    "configure_threads",
    "PackedLinear",
    "onednn_available",
    "pack_linear_layers",
    "CompactingKVCache",
    "ModelRunner",
    "UnsupportedModelError",
    "TREE_ATTENTION",
    "tree_attention",
    "install_tree_attention",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


class UnsupportedModelError(ValueError):
    """The model cannot be driven by the reference engine (the message says why and what to use)."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"`` or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not supported; use one of float32, bfloat16, float16")
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of float32, bfloat16, float16")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------------------- threads
def default_threads() -> int:
    """The CPUs this process may run on (``sched_getaffinity``), at most 16."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    return max(1, min(16, count))


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (``None`` = :func:`default_threads`); return it."""
    count = default_threads() if threads is None else int(threads)
    if count < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


# ----------------------------------------------------------------------------------------- kernels
def onednn_available() -> bool:
    """Whether this torch build has oneDNN's packed linear ops (CPU builds with MKLDNN)."""
    return bool(
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` pre-packed for oneDNN (CPU, float32 / bfloat16).

    Drop-in for an inference-only ``nn.Linear``: same input/output shapes and math; the weight is
    reordered once into oneDNN's blocked layout, so every call skips the repacking a plain GEMM
    does. ``in_features`` / ``out_features`` are kept for code that reads them.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        # batch_size=None: a layout good for any row count (a hint of 1 slows multi-row calls down)
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight), persistent=False)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            x = x.contiguous()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (CPU, float32/bfloat16) by a :class:`PackedLinear`.

    The model's modeling code is untouched: only the leaf modules are swapped, the way quantisation
    integrations swap them. Returns how many were replaced (0 when oneDNN is unavailable, the model
    is not on the CPU, or its dtype is not float32/bfloat16). Inference only: the packed weights
    are not parameters any more.
    """
    if not onednn_available():
        return 0
    targets: list[tuple[nn.Module, str, nn.Linear]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear and child.weight.device.type == "cpu" \
                    and child.weight.dtype in (torch.float32, torch.bfloat16):
                targets.append((parent, name, child))
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)


# ----------------------------------------------------------------------------------------- attention
#: Name under which :func:`tree_attention` is registered with transformers' AttentionInterface.
TREE_ATTENTION = "trtlade_tree"
#: Attention kwargs the grouped path does not implement: a call using any of them goes to sdpa.
_UNSUPPORTED_ATTENTION_KWARGS = ("softcap", "sliding_window", "s_aux", "sinks", "position_bias")


def tree_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs):
    """Attention for the few-row, tree-masked steps of lookahead; everything else goes to sdpa.

    transformers' sdpa integration copies the whole K/V cache per layer (``repeat_kv``) whenever
    more than one query row comes with a mask, i.e. on every lookahead step. Here the query heads
    of a K/V group are stacked instead (``[B, Hkv, rep*q, D]``), so the cache is read in place:
    ``softmax(q k^T * scale + mask) v``, mask added per query row, computed in float32 (a bf16
    model's inputs are upcast, the output cast back).
    Single rows (greedy steps), mask-less calls (the prefill), long row blocks and features this
    path lacks (softcapping, sinks, sliding windows, dropout) use transformers' sdpa function.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows = query.shape[2]
    if rows == 1 or rows > 64 or attention_mask is None or dropout or attention_mask.dtype == torch.bool \
            or any(kwargs.get(name) is not None for name in _UNSUPPORTED_ATTENTION_KWARGS):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    rep = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    dtype = query.dtype
    if dtype != torch.float32:  # scores and softmax in fp32, as sdpa's kernels accumulate them
        query, key, value = query.float(), key.float(), value.float()
        attention_mask = attention_mask.float()
    grouped = query.reshape(batch, kv_heads, rep * rows, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2))
    scores.mul_(scale)
    scores = scores.view(batch, kv_heads, rep, rows, kv_len)
    scores.add_(attention_mask[:, :, None, :, :kv_len])
    probs = torch.softmax(scores.view(batch, kv_heads, rep * rows, kv_len), dim=-1)
    out = torch.matmul(probs, value).view(batch, heads, rows, dim).transpose(1, 2)
    return out.to(dtype), None


def install_tree_attention(model: nn.Module) -> bool:
    """Switch a CPU model using sdpa to :func:`tree_attention`, through transformers' public
    ``AttentionInterface`` / ``AttentionMaskInterface`` registries and ``set_attn_implementation``
    (the mask for mask-less calls is built exactly as for sdpa). Returns whether it was installed."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(TREE_ATTENTION, tree_attention)
    AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)
    model.set_attn_implementation(TREE_ATTENTION)
    return model.config._attn_implementation == TREE_ATTENTION


# ----------------------------------------------------------------------------------------- cache
class _BufferLayer(CacheLayerMixin):
    """One layer's K/V in preallocated ``[1, heads, capacity, head_dim]`` buffers.

    ``update`` writes the step's rows after the ``length`` committed ones and returns views over
    everything written so far; the cache-level :meth:`CompactingKVCache.keep` then decides what
    stays. Capacity doubles when a write would overflow.
    """

    is_sliding = False
    is_croppable = True

    def __init__(self, reserve: int = 0) -> None:
        super().__init__()
        self.reserve = reserve
        self.length = 0  # rows written (committed + the current step's)
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else self._k.shape[-2]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        capacity = max(self.reserve, key_states.shape[-2], 16)
        self._k = key_states.new_empty((*key_states.shape[:-2], capacity, key_states.shape[-1]))
        self._v = value_states.new_empty((*value_states.shape[:-2], capacity, value_states.shape[-1]))
        self.is_initialized = True

    def grow(self, needed: int) -> None:
        if self._k is None or needed <= self.capacity:
            self.reserve = max(self.reserve, needed)
            return
        capacity = max(needed, 2 * self.capacity)
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:-2], capacity, old.shape[-1]))
            new[..., : self.length, :] = old[..., : self.length, :]
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, count = self.length, key_states.shape[-2]
        if start + count > self.capacity:
            self.grow(start + count)
        self._k[..., start:start + count, :] = key_states
        self._v[..., start:start + count, :] = value_states
        self.length = start + count
        self._refresh()
        return self.keys, self.values

    def _refresh(self) -> None:
        """``keys`` / ``values``: views of the rows in use (what transformers reads)."""
        if self._k is not None:
            self.keys = self._k[..., : self.length, :]
            self.values = self._v[..., : self.length, :]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.length = 0
        self.keys = self.values = None

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' convention: a negative count removes that many rows from the end."""
        if tokens_to_remove > 0:
            raise ValueError("crop() takes a negative count (rows to remove); use truncate(length)")
        self.truncate(self.length + tokens_to_remove)

    def truncate(self, length: int) -> None:
        self.length = max(0, min(self.length, length))
        self._refresh()

    def keep(self, start: int, rows: torch.Tensor | None, count: int) -> None:
        """Keep rows ``start + rows`` of the last step at ``start, start+1, ...``; drop the rest."""
        if rows is not None:
            self._k[..., start:start + count, :] = self._k[..., start + rows, :]
            self._v[..., start:start + count, :] = self._v[..., start + rows, :]
        self.length = start + count
        self._refresh()


class CompactingKVCache(Cache):
    """A KV cache for one sequence that the engine compacts after every step.

    ``length`` is the number of committed tokens (all layers agree between steps). A forward with
    K rows appends K rows to every layer; :meth:`keep` then retains some of them, moved to the
    consecutive slots after the committed prefix, and :meth:`truncate` drops rows from the end.

    >>> cache = CompactingKVCache(num_layers=2)            # doctest: +SKIP
    >>> # forward of 4 rows at committed length 10 -> every layer holds 14 rows
    >>> cache.keep(10, [0, 2])                              # doctest: +SKIP
    >>> cache.length                                         # rows 10 and 12 now sit at 10, 11
    12
    """

    def __init__(self, num_layers: int, reserve: int = 0) -> None:
        super().__init__(layers=[_BufferLayer(reserve) for _ in range(num_layers)])

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def reserve(self, total: int) -> None:
        """Make room for ``total`` rows in every layer (allocated lazily, grown now if already allocated)."""
        for layer in self.layers:
            layer.grow(total)

    def truncate(self, length: int) -> None:
        for layer in self.layers:
            layer.truncate(length)

    def keep(self, start: int, rows: Sequence[int]) -> None:
        """After a step appended its rows at ``start..``: keep ``rows`` (ascending step-row indices),
        moved to ``start, start + 1, ...``. A prefix ``[0, 1, .., k-1]`` needs no copy."""
        rows = list(rows)
        if rows != sorted(set(rows)):
            raise ValueError(f"rows to keep must be ascending and distinct, got {rows}")
        count = len(rows)
        index = None if rows == list(range(count)) else torch.tensor(rows, dtype=torch.long)
        for layer in self.layers:
            layer.keep(start, index, count)

    def reset(self) -> None:
        for layer in self.layers:
            layer.reset()


# ----------------------------------------------------------------------------------------- runner
class ModelRunner:
    """Forward passes of one sequence on a causal LM with a :class:`CompactingKVCache`.

    ``model``: a loaded ``*ForCausalLM`` (eval mode, any device). ``pack_linears``: swap
    ``nn.Linear`` for :class:`PackedLinear` (CPU only; ``None`` = when oneDNN is available and the
    model is on the CPU). ``tree_attention``: run multi-row steps of an sdpa model through
    :func:`tree_attention` (``None`` = on the CPU). The runner owns the cache; it is single-sequence and not thread-safe.
    """

    def __init__(self, model: nn.Module, *, pack_linears: bool | None = None,
                 tree_attention: bool | None = None) -> None:
        check_supported(model)
        model.eval()
        self.model = model
        self.config = model.config
        self.base = getattr(model, model.base_model_prefix)
        self.lm_head = model.get_output_embeddings()
        if self.lm_head is None:
            raise UnsupportedModelError(f"{type(model).__name__} has no output embeddings (LM head)")
        param = next(model.parameters(), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.dtype = param.dtype if param is not None else torch.float32
        if pack_linears is None:
            pack_linears = self.device.type == "cpu" and onednn_available()
        self.packed_linears = pack_linear_layers(model) if pack_linears else 0
        if self.packed_linears:
            self.lm_head = model.get_output_embeddings()
        if tree_attention is None:
            tree_attention = self.device.type == "cpu"
        self.tree_attention = install_tree_attention(model) if tree_attention else False
        self.attn_implementation = getattr(self.config, "_attn_implementation", None) or "eager"
        self.num_layers = int(self.config.num_hidden_layers)
        self.cache = CompactingKVCache(self.num_layers)
        self._min = torch.finfo(self.dtype).min
        self._zero_mask = torch.zeros((1, 1, 1, 16), dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ cache
    @property
    def length(self) -> int:
        """Committed tokens in the cache (the golden token is not among them)."""
        return self.cache.length

    @torch.inference_mode()
    def reset(self, reserve: int = 0) -> None:
        """Empty the cache (keeping its buffers) and make room for ``reserve`` rows."""
        self.cache.reset()
        if reserve:
            self.cache.reserve(reserve)

    @torch.inference_mode()
    def keep(self, rows: Sequence[int], start: int | None = None) -> None:
        """Keep the KV of ``rows`` of the last step (row 0 = golden first), compacted after the prefix."""
        self.cache.keep(self._step_start if start is None else start, rows)

    @torch.inference_mode()
    def truncate(self, length: int) -> None:
        self.cache.truncate(length)

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor:
        """Run the prompt on an empty cache; return the last row's logits (float32, shape [vocab])."""
        if len(prompt_ids) == 0:
            raise ValueError("the prompt is empty: give at least one token")
        self.cache.reset()
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        positions = torch.arange(len(prompt_ids), device=self.device).unsqueeze(0)
        hidden = self.base(input_ids=ids, position_ids=positions, past_key_values=self.cache,
                           use_cache=True).last_hidden_state
        self._step_start = 0
        return self.lm_head(hidden[0, -1:]).float()[0]

    @torch.inference_mode()
    def step_logits(self, tokens: Sequence[int], depths: Sequence[int], mask: np.ndarray | None,
                    logit_rows: Sequence[int]) -> torch.Tensor:
        """One forward of ``tokens`` at positions ``length + depths``; row i sees the committed
        prefix and the rows j with ``mask[i, j]`` (``mask=None``: a single row). Returns the logits
        of ``logit_rows`` only (float32, ``[len(logit_rows), vocab]``). The rows' KV stays in the
        cache until :meth:`keep`."""
        start = self.cache.length
        self._step_start = start
        count = len(tokens)
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        if count == 1:
            positions = torch.tensor([[start + int(depths[0])]], dtype=torch.long, device=self.device)
            attn = self._prefix_mask(start + 1)
        else:
            positions = torch.tensor([list(depths)], dtype=torch.long, device=self.device) + start
            attn = self._tree_mask(start, mask)
        with record_function("trtlade.body"):
            hidden = self.base(input_ids=ids, position_ids=positions, attention_mask=attn,
                               past_key_values=self.cache, use_cache=True).last_hidden_state[0]
        with record_function("trtlade.lm_head"):
            if len(logit_rows) != count or list(logit_rows) != list(range(count)):
                hidden = hidden[torch.tensor(list(logit_rows), dtype=torch.long, device=self.device)]
            return self.lm_head(hidden).float()

    def step(self, tokens: Sequence[int], depths: Sequence[int], mask: np.ndarray | None,
             logit_rows: Sequence[int]) -> list[int]:
        """:meth:`step_logits`, then the argmax of each logit row (ties: lowest id, like torch.argmax)."""
        logits = self.step_logits(tokens, depths, mask, logit_rows)
        with record_function("trtlade.argmax"):
            return logits.argmax(dim=-1).tolist()

    def _prefix_mask(self, kv_length: int) -> torch.Tensor:
        """All-zero additive mask [1, 1, 1, kv_length] (one row sees everything), from a reused buffer."""
        if self._zero_mask.shape[-1] < kv_length:
            self._zero_mask = torch.zeros((1, 1, 1, max(kv_length, 2 * self._zero_mask.shape[-1])),
                                          dtype=self.dtype, device=self.device)
        return self._zero_mask[..., :kv_length]

    def _tree_mask(self, start: int, mask: np.ndarray) -> torch.Tensor:
        """Additive float mask [1, 1, K, start + K]: 0 = attend, dtype min = masked. A boolean 4-D
        mask would be wrong with eager attention (it is added to the scores as 0/1)."""
        count = mask.shape[0]
        visible = torch.from_numpy(np.array(mask, dtype=bool, copy=True)).to(self.device)
        full = torch.zeros((1, 1, count, start + count), dtype=self.dtype, device=self.device)
        full[0, 0, :, start:].masked_fill_(~visible, self._min)
        return full


def check_supported(model: nn.Module) -> None:
    """Refuse models the engine cannot drive exactly (sliding-window or non-attention layers)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "get_output_embeddings"):
        raise UnsupportedModelError(f"{type(model).__name__} is not a transformers causal LM")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{type(model).__name__} is an encoder-decoder; the engine runs decoder-only LMs")
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        other = sorted({t for t in layer_types if t != "full_attention"})
        if other:
            raise UnsupportedModelError(
                f"{config.model_type}: layer types {other} are not supported; the reference engine drives "
                f"models whose layers all use full attention (e.g. Llama, Qwen2, Qwen3 without sliding window)")
    elif getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) \
            and config.model_type not in ("qwen2", "qwen3"):
        raise UnsupportedModelError(
            f"{config.model_type}: sliding-window attention is not supported by the reference engine")

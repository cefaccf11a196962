"""One forward pass for many sequences: their rows packed into one batch row, each sequence's KV in
its own cache slot, attention per sequence.

In-flight batching for the reference engine. A step is a list of :class:`RowBlock` -- one per
running sequence: its golden token plus (for lookahead) its window and candidate rows, with the
tree mask among them, or a prompt chunk for a prefill. The runner:

* packs every block's rows into one ``[1, R]`` input (``R`` = the step's rows, nothing padded), so
  every linear layer runs one GEMM of R rows -- on a CPU with oneDNN's packed weights that is flat
  up to ~4 rows and grows slowly after (see docs/reference-engine.md, "Batching");
* writes each row's K/V into its sequence's slot of a :class:`SlotKVCache` (``[slots, kv_heads,
  capacity, head_dim]`` per layer), at ``length(slot) + row index``;
* computes attention with :func:`batched_attention`, registered with transformers'
  ``AttentionInterface``: queries gathered per block into ``[blocks, kv_heads, rep * rows, dim]``
  against the slots' K/V in place (no copy of the cache), with one additive mask per block (the
  committed prefix, then the block's tree). Only the attention is padded (to the largest block's
  rows and the longest slot), never the GEMMs;
* returns the logits of each block's ``logit_rows`` only.

After the step the caller keeps what each sequence accepted (:meth:`BatchRunner.keep`): the K/V of
the golden row and the accepted drafts move to consecutive slots, the rest is dropped.

Worked example (two sequences; slot 0 holds 7 committed tokens, slot 1 holds 3)::

    blocks = [RowBlock(slot=0, tokens=[g, a, b], depths=[0, 1, 1],
                       mask=[[1,0,0],[1,1,0],[1,0,1]], logit_rows=[0, 1, 2]),   # lookahead: 3 rows
              RowBlock(slot=1, tokens=[h], depths=[0], logit_rows=[0])]          # greedy: 1 row
    logits = runner.forward(blocks)      # ONE forward of 4 packed rows; input_ids [[g, a, b, h]]
        # positions [[7, 8, 8, 3]]; slot 0 gets K/V at 7, 8, 9; slot 1 at 3
        # a sees slot 0's 7 tokens and g, not b nor anything of slot 1
    runner.keep([(0, [0, 2]), (1, [0])]) # slot 0: g and b stay (at 7, 8); slot 1: h stays (at 3)

Everything goes through the model's public forward (``model.model(input_ids, position_ids,
attention_mask, past_key_values, **kwargs)``, then ``lm_head`` on the selected rows): the modeling
code runs as transformers ships it; the per-step layout reaches the attention as a keyword
argument, the way transformers passes ``cu_seq_lens`` to its flash kernels.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function
from transformers.cache_utils import Cache, CacheLayerMixin

from trtlade.errors import TrtladeError
from trtlade.reference.fast_forward import FAMILIES, FusedLinear, PackedEmbedding, fast_body, release_parameters
from trtlade.reference.kernels import KernelChoice, choose_linear_kernel, pack_linear_layers
from trtlade.reference.native import RowKeys, row_attention
from trtlade.reference.native import linear_dtypes as native_linear_dtypes
from trtlade.reference.native import status as native_status

__all__ = [
    "RowBlock",
    "StepLayout",
    "step_layout",
    "SlotKVCache",
    "BatchRunner",
    "BATCHED_ATTENTION",
    "batched_attention",
    "install_batched_attention",
    "UnsupportedModelError",
    "check_supported",
    "layer_windows",
    "SUPPORTED_LAYER_TYPES",
]

#: The native row-invariant attention kernel (None: not built here; see trtlade.reference.native.status()).
_ROW_ATTENTION = row_attention()

#: Name under which :func:`batched_attention` is registered with transformers' AttentionInterface.
BATCHED_ATTENTION = "trtlade_batched"
#: Attention kwargs this engine does not implement (check_supported refuses such models up front).
_UNSUPPORTED_ATTENTION_KWARGS = ("s_aux", "sinks", "position_bias")
#: Layer types the engine drives: full causal attention, and a sliding window over the last ``window`` positions.
SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


class UnsupportedModelError(TrtladeError, ValueError):
    """The model cannot be driven by the reference engine (the message says why and what to use)."""


# ----------------------------------------------------------------------------------------- data
@dataclass(frozen=True, eq=False)
class RowBlock:
    """One sequence's rows in a step.

    ``tokens[i]`` is fed at position ``length(slot) + depths[i]`` and its K/V is written at
    ``length(slot) + i``; row i sees the slot's committed tokens and the rows j of this block with
    ``mask[i][j]`` (``mask=None``: one row, or -- with ``causal=True`` -- a causal chain, as in a
    prefill). ``logit_rows``: the rows whose logits come back.
    """

    slot: int
    tokens: Sequence[int]
    depths: Sequence[int]
    logit_rows: Sequence[int]
    mask: Optional[np.ndarray] = None
    causal: bool = False

    @property
    def rows(self) -> int:
        return len(self.tokens)

    def visibility(self) -> np.ndarray:
        """The block's ``rows x rows`` boolean mask.

        >>> RowBlock(0, [5, 6, 7], [0, 1, 2], [2], causal=True).visibility().astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        """
        k = self.rows
        if self.mask is not None:
            return np.asarray(self.mask, dtype=bool)
        if self.causal or k == 1:
            return np.tril(np.ones((k, k), dtype=bool))
        raise ValueError(f"a block of {k} rows needs a mask (or causal=True)")


@dataclass(eq=False)
class StepLayout:
    """Where a step's packed rows go and what each sees; built once per forward, read by every layer.

    ``write_slot`` / ``write_pos``: cache slot and position of each packed row's K/V.
    ``lo:hi``: the slot range the attention reads (blocks = hi - lo, gap slots get no queries).
    ``q_index``: packed row of each padded query ``(block, i)`` (padding points at row 0);
    ``out_index``: padded query of each packed row. ``mask``: additive ``[blocks, 1, 1, kmax, lmax]``.
    ``prefill``: ``(slot, rows)`` when the step is one causal block on an empty slot (sdpa's causal
    kernel then runs it). ``single``: ``(slot, keys)`` when the step is one row (a lone greedy
    decode), which sees its slot's first ``keys`` positions, itself included: sdpa without a mask.
    """

    write_slot: torch.Tensor
    write_pos: torch.Tensor
    lo: int
    hi: int
    kmax: int
    lmax: int
    q_index: Optional[torch.Tensor] = None
    out_index: Optional[torch.Tensor] = None
    mask: Optional[torch.Tensor] = None
    prefill: Optional[tuple[int, int]] = None
    single: Optional[tuple[int, int]] = None
    contiguous: Optional[tuple[int, int, int]] = field(default=None)  # (slot, start, count) single-block write
    invariant: Optional["InvariantIndex"] = None  # set when the runner computes row-invariant attention (torch)
    row_keys: Optional[RowKeys] = None  # set when it computes it with the native kernel (every path, every layer)
    #: logical position of each padded query ``[blocks, kmax]`` and key ``[blocks, lmax]`` (general path):
    #: a verification row's key at cache index ``length + j`` holds the token at ``length + depths[j]``
    query_pos: Optional[np.ndarray] = None
    key_pos: Optional[np.ndarray] = None
    _windowed: dict = field(default_factory=dict)

    def window_mask(self, window: Optional[int]) -> Optional[torch.Tensor]:
        """The additive mask of a sliding-window layer: :attr:`mask` with every key at a position ``<= p -
        window`` of its query's position ``p`` masked too (transformers' ``kv_idx > q_idx - window``);
        ``window=None``: :attr:`mask` itself. Built once per step and window.

        >>> layout = step_layout([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
        ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 4})
        >>> (layout.window_mask(3)[0, 0, 0] == 0).int().tolist()  # positions 4, 5, 5: keys in (p - 3, p]
        [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 1]]
        """
        if window is None or self.mask is None:
            return self.mask
        if window not in self._windowed:
            outside = self.key_pos[:, None, :] <= self.query_pos[:, :, None] - int(window)
            self._windowed[window] = self.mask.masked_fill(
                torch.from_numpy(outside).to(self.mask.device)[:, None, None], _MASKED)
        return self._windowed[window]


@dataclass(eq=False)
class InvariantIndex:
    """Where each packed row's visible keys are, in position order, for :func:`invariant_attention`:
    ``slot`` / ``pos`` ``[R, P]`` (cache slot and index of the row's j-th visible key), ``valid``
    ``[R, P]`` (False past the row's keys), ``P`` a multiple of :data:`INVARIANT_BLOCK`."""

    slot: torch.Tensor
    pos: torch.Tensor
    valid: torch.Tensor


#: Keys per block of :func:`invariant_attention`: every row's keys are cut into blocks of this many
#: positions, counted from position 0, whatever the step.
INVARIANT_BLOCK = 32


def invariant_index(blocks: Sequence["RowBlock"], lengths: dict[int, int], device: Any = "cpu") -> InvariantIndex:
    """Each row's visible keys in position order: its slot's committed positions, then the rows of its
    block it sees, by depth (for a verification row, its path: so its j-th key is the token at position
    j, as in a greedy step at that position).

    >>> idx = invariant_index([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
    ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 2})
    >>> idx.pos[:, :4].tolist(), idx.valid[:, :4].int().tolist()       # row 2 sees 0, 1, the golden row (2), itself (4)
    ([[0, 1, 2, 0], [0, 1, 2, 3], [0, 1, 2, 4]], [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    """
    rows: list[tuple[int, list[int]]] = []
    for b in blocks:
        start, seen = lengths[b.slot], b.visibility()
        for i in range(b.rows):
            mine = sorted((int(b.depths[j]), j) for j in range(b.rows) if seen[i, j])
            rows.append((b.slot, list(range(start)) + [start + j for _, j in mine]))
    width = max(len(keys) for _, keys in rows)
    width = -(-width // INVARIANT_BLOCK) * INVARIANT_BLOCK
    slot = np.zeros((len(rows), width), dtype=np.int64)
    pos = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=bool)
    for r, (s, keys) in enumerate(rows):
        slot[r] = s
        pos[r, :len(keys)] = keys
        valid[r, :len(keys)] = True
    return InvariantIndex(torch.from_numpy(slot).to(device), torch.from_numpy(pos).to(device),
                          torch.from_numpy(valid).to(device))


def row_keys(blocks: Sequence["RowBlock"], lengths: dict[int, int]) -> RowKeys:
    """Each packed row's keys for the native kernel: its slot's committed positions, then the rows of its
    block it sees, by depth (cache index, position). A causal block's row i sees rows 0..i, which sit at
    cache index = position: they count as committed, so a prefill of n rows lists n keys, not n^2/2.

    >>> keys = row_keys([RowBlock(0, [7, 8, 9], [0, 1, 1], [0, 1, 2], mask=np.array(
    ...     [[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool))], {0: 2})
    >>> keys.committed.tolist(), keys.pos.tolist(), keys.idx.tolist(), keys.at.tolist()   # row 2: 0, 1, g, itself
    ([2, 2, 2], [2, 3, 3], [2, 2, 3, 2, 4], [2, 2, 3, 2, 3])
    """
    rows: list[tuple[int, int, int, list[tuple[int, int]]]] = []
    for b in blocks:
        start = lengths[b.slot]
        if b.mask is None:  # one row, or a causal chain: rows before it are at their positions
            rows.extend((b.slot, start + i, start + i, [(start + i, start + i)]) for i in range(b.rows))
            continue
        seen = b.visibility()
        for i in range(b.rows):
            path = sorted((int(b.depths[j]), start + j) for j in range(b.rows) if seen[i, j])
            rows.append((b.slot, start, start + int(b.depths[i]), [(idx, start + d) for d, idx in path]))
    return RowKeys.build(rows)


def invariant_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
                        index: InvariantIndex) -> torch.Tensor:
    """Attention whose result for a row depends only on that row's query and visible keys, never on
    the other rows of the step, their number, or padding: ``[1, heads, R, dim]`` -> ``[1, R, heads, dim]``.

    Each row's keys are gathered in position order and cut into blocks of :data:`INVARIANT_BLOCK`
    positions from position 0; each block's scores, max, exponentials, sum and weighted values are
    computed by batched kernels whose per-element results do not depend on the batch, and the blocks
    are combined by a sequential running sum (``cumsum``), where padded blocks add exact zeros. So a
    verification row and a greedy decode row at the same position, with the same tokens before it,
    get the same bits. In float32 (a bf16 query is upcast; a half-precision cache too).
    """
    _, heads, rows, dim = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    width = index.pos.shape[1]
    nb = width // INVARIANT_BLOCK
    # every operand contiguous in one layout: a kernel may take another path for other strides
    q = query[0].transpose(0, 1).float().reshape(rows, kv_heads, rep, dim).contiguous()
    k = key[index.slot, :, index.pos].float().permute(0, 2, 1, 3).contiguous()  # [R, kv_heads, P, dim]
    v = value[index.slot, :, index.pos].float().permute(0, 2, 1, 3).contiguous()
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [R, kv_heads, rep, P]
    scores = scores.masked_fill(~index.valid[:, None, None, :], float("-inf"))
    scores = scores.view(rows, kv_heads, rep, nb, INVARIANT_BLOCK)
    block_max = scores.amax(-1)  # [R, kv, rep, nb]; -inf for a block with no key
    finite = torch.where(torch.isinf(block_max), torch.zeros_like(block_max), block_max)
    weights = torch.exp(scores - finite[..., None])  # 0 for masked keys
    block_sum = weights.sum(-1)  # [R, kv, rep, nb]
    vb = v.reshape(rows, kv_heads, nb, INVARIANT_BLOCK, dim)
    block_out = torch.matmul(weights.permute(0, 1, 3, 2, 4), vb)  # [R, kv, nb, rep, dim]
    top = block_max.amax(-1, keepdim=True)  # [R, kv, rep, 1]
    scale_b = torch.exp(block_max - top)  # 0 for empty blocks
    total = torch.cumsum(scale_b * block_sum, dim=-1)[..., -1]  # [R, kv, rep]
    out = torch.cumsum(block_out * scale_b.permute(0, 1, 3, 2)[..., None], dim=2)[:, :, -1]  # [R, kv, rep, dim]
    out = out / total[..., None]
    return out.reshape(rows, heads, dim)[None]


# ----------------------------------------------------------------------------------------- attention
def batched_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None,
                      dropout: float = 0.0, trtlade_layout: Optional[StepLayout] = None, **kwargs):
    """Attention of a packed step against the slots of a :class:`SlotKVCache`.

    ``query``: ``[1, heads, R, dim]`` (the packed rows); ``key`` / ``value``: the cache's whole
    ``[slots, kv_heads, capacity, dim]`` buffers. Per block b: ``softmax(q_b k_s^T * scale +
    mask_b) v_s`` over its slot s, the query heads of a K/V group stacked (``rep * rows`` rows), in
    float32 (a bf16 model's inputs are upcast, the output cast back). Returns ``[1, R, heads, dim]``.
    One block (a sequence decoding alone) runs torch's sdpa kernel on its slot instead: with the
    tree mask, or none for a single row; measured 17% (1 row) and 10% (9 rows) faster per step on
    SmolLM2 on a CPU. Without a layout (someone else calling the model) it is transformers' sdpa.
    """
    if trtlade_layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    unsupported = [name for name in _UNSUPPORTED_ATTENTION_KWARGS if kwargs.get(name) is not None]
    if unsupported or dropout:
        raise UnsupportedModelError(f"attention features {unsupported or ['dropout']} are not supported "
                                    f"by the reference engine")
    layout = trtlade_layout
    out_dtype = query.dtype
    if key.dtype != query.dtype:  # a float32 cache under a half-precision model: attention in float32
        query = query.to(key.dtype)
    out, _ = _slot_attention(query, key, value, scaling, layout, window=kwargs.get("sliding_window"),
                             softcap=kwargs.get("softcap"))
    return out.to(out_dtype), None


def _slot_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: Optional[float],
                    layout: StepLayout, window: Optional[int] = None,
                    softcap: Optional[float] = None) -> tuple[torch.Tensor, None]:
    """:func:`batched_attention` once the dtypes agree (see there). ``window``: a sliding-window layer's
    window (a row at position p sees its keys in ``(p - window, p]``); ``softcap``: scores capped as
    ``softcap * tanh(scores / softcap)`` before the mask (Gemma 2), which only the general path computes."""
    _, heads, rows, dim = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if layout.row_keys is not None:  # row-invariant: every row on its own (native kernel)
        q = query[0].transpose(0, 1).float()  # [R, heads, dim]
        out = _ROW_ATTENTION(q, key, value, layout.row_keys, scale, window=window, softcap=softcap)
        return out.unsqueeze(0), None
    if softcap is not None and layout.mask is None:
        raise ValueError("attention with softcap needs a general step layout (step_layout(shortcuts=False))")
    if layout.prefill is not None:
        slot, count = layout.prefill
        k, v = key[slot:slot + 1, :, :count], value[slot:slot + 1, :, :count]
        if window is not None and count > window:
            where = torch.arange(count, device=query.device)
            seen = (where[None, :] <= where[:, None]) & (where[None, :] > where[:, None] - int(window))
            out = sdpa(query, k, v, attn_mask=seen, scale=scale, enable_gqa=rep > 1)
        else:
            out = sdpa(query, k, v, is_causal=True, scale=scale, enable_gqa=rep > 1)
        return out.transpose(1, 2), None
    if layout.single is not None:
        slot, keys = layout.single
        first = max(0, keys - int(window)) if window is not None else 0
        out = sdpa(query, key[slot:slot + 1, :, first:keys], value[slot:slot + 1, :, first:keys], scale=scale,
                   enable_gqa=rep > 1)
        return out.transpose(1, 2), None
    blocks, kmax, lmax = layout.hi - layout.lo, layout.kmax, layout.lmax
    mask = layout.window_mask(window)
    if blocks == 1 and softcap is None:  # one sequence's rows (packed = padded): sdpa's kernel with the tree mask
        out = sdpa(query, key[layout.lo:layout.hi, :, :lmax], value[layout.lo:layout.hi, :, :lmax],
                   attn_mask=mask[0].to(query.dtype), scale=scale, enable_gqa=rep > 1)
        return out.transpose(1, 2), None
    dtype = query.dtype
    q = query[0].index_select(1, layout.q_index)  # [heads, blocks * kmax, dim]
    q = q.view(kv_heads, rep, blocks, kmax, dim).permute(2, 0, 1, 3, 4).reshape(blocks, kv_heads, rep * kmax, dim)
    k = key[layout.lo:layout.hi, :, :lmax]
    v = value[layout.lo:layout.hi, :, :lmax]
    if dtype != torch.float32:  # scores and softmax in fp32, as sdpa's kernels accumulate them
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.matmul(q, k.transpose(-1, -2))
    scores.mul_(scale)
    if softcap is not None:  # transformers' eager attention: scores / cap, tanh, * cap, then the mask
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(blocks, kv_heads, rep, kmax, lmax)
    scores.add_(mask.to(scores.dtype))
    probs = torch.softmax(scores.view(blocks, kv_heads, rep * kmax, lmax), dim=-1)
    out = torch.matmul(probs, v)  # [blocks, kv_heads, rep * kmax, dim]
    out = out.view(blocks, kv_heads, rep, kmax, dim).permute(0, 3, 1, 2, 4).reshape(blocks * kmax, heads, dim)
    out = out.index_select(0, layout.out_index)  # [R, heads, dim]
    return out.unsqueeze(0).to(dtype), None


def install_batched_attention(model: nn.Module) -> None:
    """Switch ``model`` to :func:`batched_attention` through transformers' public
    ``AttentionInterface`` / ``AttentionMaskInterface`` registries and ``set_attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(BATCHED_ATTENTION, batched_attention)
    AttentionMaskInterface.register(BATCHED_ATTENTION, sdpa_mask)
    model.set_attn_implementation(BATCHED_ATTENTION)
    if getattr(model.config, "_attn_implementation", None) != BATCHED_ATTENTION:
        raise UnsupportedModelError(f"{type(model).__name__} does not take a registered attention implementation")


# ----------------------------------------------------------------------------------------- cache
class _SlotLayer(CacheLayerMixin):
    """One layer's K/V: ``[slots, kv_heads, capacity, head_dim]`` buffers, zero-initialised (masked
    positions must hold finite numbers: probability 0 times NaN would still be NaN)."""

    is_sliding = False
    is_compileable = False

    def __init__(self) -> None:
        super().__init__()
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:  # pragma: no cover
        raise RuntimeError("SlotKVCache layers are allocated by SlotKVCache.ensure")

    def ensure(self, slots: int, capacity: int, kv_heads: int, head_dim: int, dtype, device) -> None:
        if self.keys is not None and self.keys.shape[0] >= slots and self.keys.shape[2] >= capacity:
            return
        old_k, old_v = self.keys, self.values
        if old_k is not None:
            slots, capacity = max(slots, old_k.shape[0]), max(capacity, old_k.shape[2])
        shape = (slots, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        if old_k is not None:
            s, c = old_k.shape[0], old_k.shape[2]
            self.keys[:s, :, :c] = old_k
            self.values[:s, :, :c] = old_v
        self.dtype, self.device, self.is_initialized = dtype, device, True

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor, layout: StepLayout) -> None:
        if layout.contiguous is not None:
            slot, start, count = layout.contiguous
            self.keys[slot, :, start:start + count] = key_states[0]
            self.values[slot, :, start:start + count] = value_states[0]
        else:
            # index_put does not cast: a half-precision model's rows into a float32 cache are upcast here
            self.keys[layout.write_slot, :, layout.write_pos] = key_states[0].transpose(0, 1).to(self.keys.dtype)
            self.values[layout.write_slot, :, layout.write_pos] = value_states[0].transpose(0, 1).to(self.values.dtype)

    def move(self, src: tuple[torch.Tensor, torch.Tensor], dst: tuple[torch.Tensor, torch.Tensor]) -> None:
        for buf in (self.keys, self.values):
            buf[dst[0], :, dst[1]] = buf[src[0], :, src[1]]

    def update(self, key_states, value_states, *args, **kwargs):  # pragma: no cover - SlotKVCache.update
        raise RuntimeError("SlotKVCache.update writes the layers")

    def get_seq_length(self) -> int:
        return 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return query_length, 0

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        pass


class SlotKVCache(Cache):
    """The K/V of up to ``slots`` sequences, one slot each, for :class:`BatchRunner`.

    ``lengths[s]`` is slot s's committed tokens. A forward with a :class:`StepLayout` writes every
    packed row at its (slot, position) and returns the whole buffers for :func:`batched_attention`;
    :meth:`keep` then compacts what each sequence accepted. Buffers grow (doubling, zero-filled) when
    a slot needs more room or more slots are used.

    >>> cache = SlotKVCache(num_layers=2, kv_heads=1, head_dim=4)
    >>> cache.ensure(slots=2, capacity=16, dtype=torch.float32, device="cpu")
    >>> cache.layers[0].keys.shape
    torch.Size([2, 1, 16, 4])
    >>> cache.lengths[1] = 5            # slot 1 holds 5 tokens; a 3-row step wrote 5, 6, 7
    >>> cache.keep([(1, [0, 2])])       # rows 0 and 2 stay, at 5 and 6
    >>> cache.lengths[1]
    7
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int) -> None:
        super().__init__(layers=[_SlotLayer() for _ in range(num_layers)])
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.lengths: dict[int, int] = {}
        self.layout: Optional[StepLayout] = None

    @property
    def slots(self) -> int:
        first = self.layers[0].keys if self.layers else None
        return 0 if first is None else first.shape[0]

    @property
    def capacity(self) -> int:
        first = self.layers[0].keys if self.layers else None
        return 0 if first is None else first.shape[2]

    def ensure(self, slots: int, capacity: int, dtype, device) -> None:
        """Room for ``slots`` slots of ``capacity`` tokens (grows by doubling, keeps the contents)."""
        if slots <= self.slots and capacity <= self.capacity:
            return
        slots = max(slots, min(2 * self.slots, slots + 8)) if self.slots else slots
        capacity = max(capacity, 2 * self.capacity)
        for layer in self.layers:
            layer.ensure(slots, capacity, self.kv_heads, self.head_dim, dtype, device)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        layer = self.layers[layer_idx]
        layer.write(key_states, value_states, self.layout)
        return layer.keys, layer.values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def keep(self, kept: Sequence[tuple[int, Sequence[int]]]) -> None:
        """After a step: for each ``(slot, rows)``, keep the K/V of those step rows (ascending) at the
        slot's positions ``length, length + 1, ...``; every other row of the step is dropped."""
        src_s: list[int] = []
        src_p: list[int] = []
        dst_p: list[int] = []
        for slot, rows in kept:
            rows = list(rows)
            if rows != sorted(set(rows)):
                raise ValueError(f"rows to keep must be ascending and distinct, got {rows}")
            start = self.lengths[slot]
            if rows != list(range(len(rows))):
                moved = [(start + r, start + i) for i, r in enumerate(rows) if r != i]
                src_s.extend([slot] * len(moved))
                src_p.extend(src for src, _ in moved)
                dst_p.extend(dst for _, dst in moved)
            self.lengths[slot] = start + len(rows)
        if src_s and self.slots:
            device = self.layers[0].keys.device
            s = torch.tensor(src_s, dtype=torch.long, device=device)
            src = (s, torch.tensor(src_p, dtype=torch.long, device=device))
            dst = (s, torch.tensor(dst_p, dtype=torch.long, device=device))
            for layer in self.layers:
                layer.move(src, dst)


# ----------------------------------------------------------------------------------------- runner
class BatchRunner:
    """Forward passes of many sequences at once on a causal LM (see the module docstring).

    ``model``: a loaded ``*ForCausalLM`` (any device). ``fast_forward``: the engine's own Llama-family
    forward (None: when the family is covered); ``release_weights``: drop the model's own linear weights
    once the fused copies are made (the engine owns the model: one copy in memory; the model can no
    longer run by itself); ``invariant_attention``: attention per row from its own keys only, the same
    bits in a greedy and a verification step (None: on wherever the native kernel runs, the CPU;
    True: required, with the slower torch implementation when the kernel is missing; False: off).
    ``native_kernels``: the fast forward's native linear layers and one-call body (``native/linear.c``,
    ``native/layer_ops.c``; None: where they run; False: oneDNN GEMMs and torch's ops, to compare).
    ``pack_linears``: for transformers' forward, swap ``nn.Linear`` for
    oneDNN-packed ones (CPU only; ``False`` also keeps the stock kernels, so it turns the fused forward
    off); ``None``: measure both on this CPU at load and keep the faster per
    row count (:func:`~trtlade.reference.kernels.choose_linear_kernel`; ``kernel_choice`` says what was
    chosen). Slots are handed out by :meth:`allocate` (lowest free first, so the attention reads a
    short slot range) and returned by :meth:`free`. Not thread-safe: one thread drives it.
    """

    def __init__(self, model: nn.Module, *, pack_linears: Optional[bool] = None,
                 fast_forward: Optional[bool] = None, release_weights: bool = False,
                 invariant_attention: Optional[bool] = None, native_kernels: Optional[bool] = None) -> None:
        check_supported(model)
        model.eval()
        self.model = model
        self.config = model.config
        self.base = getattr(model, model.base_model_prefix)
        param = next(model.parameters(), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.dtype = param.dtype if param is not None else torch.float32
        self.lm_head = model.get_output_embeddings()
        if self.lm_head is None:
            raise UnsupportedModelError(f"{type(model).__name__} has no output embeddings (LM head)")
        #: each layer's sliding window (None: full attention), as its attention module passes it to transformers
        self.windows = layer_windows(model)
        if native_kernels:
            _check_native_kernels(model, self.dtype, self.device, transformers_forward=fast_forward is False
                                  or pack_linears is False)
        #: the engine's own Llama-family forward (fused, one weight copy), or None: transformers' forward
        self.fast = None if fast_forward is False or pack_linears is False else \
            fast_body(model, release=release_weights, windows=self.windows, native=native_kernels)
        if fast_forward and self.fast is None:
            raise UnsupportedModelError(f"{self.config.model_type}: the fast forward runs the Llama family "
                                        f"({', '.join(FAMILIES)}) only")
        if self.fast is not None:
            tied = _tied(model)
            self.lm_head = FusedLinear([self.lm_head], release=release_weights and not tied, native=native_kernels)
            if tied and self.lm_head.native is not None:  # the embedding reads its rows from the packed head
                self.fast.embed_tokens = PackedEmbedding(self.lm_head)
                if release_weights:
                    release_parameters(model.get_input_embeddings())
            kernel = self.lm_head.kernel
            self.packed_linears = 4 * len(self.fast.layers) + 1 if kernel != "plain" else 0
            self.kernel_choice = KernelChoice(f"fused-{kernel}", self.packed_linears,
                                              reason="the engine's own Llama-family forward: q/k/v and gate/up "
                                                     "fused, one packed copy of every weight"
                                                     + (" (native linear kernel, linear.c)" if kernel == "native"
                                                        else ""))
        elif pack_linears is None:
            self.kernel_choice = choose_linear_kernel(model)
            self.packed_linears = self.kernel_choice.layers if self.kernel_choice.kernel != "plain" else 0
        else:
            self.packed_linears = pack_linear_layers(model) if pack_linears else 0
            self.kernel_choice = KernelChoice("onednn-packed" if self.packed_linears else "plain",
                                              self.packed_linears, reason="set by the caller")
        install_batched_attention(model)
        self.attn_implementation = BATCHED_ATTENTION
        cfg = self.config
        #: Gemma 2's attention and final-logit soft-capping (None: off)
        self.attn_softcap = getattr(cfg, "attn_logit_softcapping", None)
        self.final_softcap = getattr(cfg, "final_logit_softcapping", None)
        heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        self.cache = SlotKVCache(int(cfg.num_hidden_layers), kv_heads, head_dim)
        self._free: list[int] = []
        self._next_slot = 0
        self._dummy_mask = torch.zeros((1, 1, 1, 1), dtype=self.dtype, device=self.device)
        #: the base model's name for the cache argument (``cache`` from transformers 5.x, ``past_key_values`` before)
        self._cache_kwarg = "cache" if "cache" in inspect.signature(self.base.forward).parameters else "past_key_values"
        #: attention computed per row from its own keys only: "native" (the C kernel, every model and
        #: feature), "torch" (:func:`invariant_attention`: fast forward, full attention) or None (off)
        self.invariant_attention = None
        if invariant_attention is None:  # the default: on wherever the native kernel runs
            self.invariant_attention = "native" if self.device.type == "cpu" and _ROW_ATTENTION is not None else None
        elif invariant_attention:
            if self.device.type == "cpu" and _ROW_ATTENTION is not None:
                self.invariant_attention = "native"
            elif self.fast is not None and not any(self.windows) and self.attn_softcap is None:
                self.invariant_attention = "torch"
            else:
                raise UnsupportedModelError(
                    f"{cfg.model_type}: invariant_attention needs the native kernel here (sliding windows, soft-caps "
                    f"or transformers' forward), which is not available: {native_status()}")
        #: the KV cache's dtype: float32 for a half-precision model on the CPU under the fast forward (K/V
        #: are stored exactly, upcast; attention then runs in float32, 3-6x faster than bf16 sdpa on CPUs)
        self.kv_dtype = torch.float32 if ((self.fast is not None or self.invariant_attention == "native")
                                          and self.device.type == "cpu"
                                          and self.dtype in (torch.bfloat16, torch.float16)) else self.dtype
        #: each step as ONE native call (:meth:`FastBody.forward_native`): the native body, whose attention
        #: is the native row-invariant kernel over a float32 cache
        self.native_body = (self.fast is not None and self.fast.native is not None
                            and self.invariant_attention == "native" and self.kv_dtype == torch.float32)

    @property
    def bit_exact(self) -> bool:
        """Whether every op gives a row the same bits whatever the rows beside it: the engine's own forward
        (row-invariant linear layers) with row-invariant attention. Then lookahead's verification rows compute
        exactly what a greedy step computes, in every dtype."""
        return self.fast is not None and self.lm_head.kernel != "plain" and self.invariant_attention is not None

    @property
    def kernels(self) -> str:
        """What computes a step, in words: ``"native avx2 (one call per step)"``, ``"oneDNN packed GEMMs and
        torch ops"``, ``"plain torch GEMMs and torch ops"`` or ``"transformers' forward (...)"``."""
        if self.fast is None:
            return f"transformers' forward ({self.kernel_choice.kernel} linear layers)"
        kernel = self.lm_head.kernel
        if kernel == "native":
            how = "one call per step" if self.native_body else "linear layers; torch ops between"
            return f"native {self.lm_head.native.kernels.variant} ({how})"
        return ("oneDNN packed GEMMs" if kernel == "onednn-packed" else "plain torch GEMMs") + " and torch ops"

    # ------------------------------------------------------------------ slots
    def allocate(self, reserve: int) -> int:
        """A free slot with room for ``reserve`` tokens (prompt + output + one step's rows)."""
        if self._free:
            self._free.sort()
            slot = self._free.pop(0)
        else:
            slot = self._next_slot
            self._next_slot += 1
        self.cache.lengths[slot] = 0
        self.cache.ensure(slot + 1, reserve, self.kv_dtype, self.device)
        return slot

    def free(self, slot: int) -> None:
        """Return ``slot`` (its contents are left in place and overwritten by its next owner)."""
        if self.cache.lengths.pop(slot, None) is not None:
            self._free.append(slot)

    def free_all(self) -> None:
        for slot in list(self.cache.lengths):
            self.free(slot)

    @property
    def slots_in_use(self) -> int:
        return len(self.cache.lengths)

    def length(self, slot: int) -> int:
        """Committed tokens in ``slot``."""
        return self.cache.lengths[slot]

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def forward(self, blocks: Sequence[RowBlock]) -> list[torch.Tensor]:
        """One forward of every block's rows; returns, per block, the float32 logits of its
        ``logit_rows`` (``[len(logit_rows), vocab]``). The rows' K/V stays in the slots, past each
        slot's committed length, until :meth:`keep`."""
        if not blocks:
            return []
        layout = self._layout(blocks)
        tokens = [t for b in blocks for t in b.tokens]
        positions = [self.cache.lengths[b.slot] + int(d) for b in blocks for d in b.depths]
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([positions], dtype=torch.long, device=self.device)
        self.cache.layout = layout
        try:
            with record_function("trtlade.body"):
                if self.native_body:
                    hidden = self.fast.forward_native(ids, pos, _NativeStep(self, layout))
                elif self.fast is not None:
                    hidden = self.fast(ids, pos, self._attend)
                else:
                    hidden = self.base(input_ids=ids, position_ids=pos, attention_mask=self._dummy_mask,
                                       use_cache=True, trtlade_layout=layout,
                                       **{self._cache_kwarg: self.cache}).last_hidden_state[0]
        finally:
            self.cache.layout = None
        with record_function("trtlade.lm_head"):
            select: list[int] = []
            offset = 0
            for b in blocks:
                select.extend(offset + int(r) for r in b.logit_rows)
                offset += b.rows
            if select != list(range(len(tokens))):
                hidden = hidden[torch.tensor(select, dtype=torch.long, device=self.device)]
            logits = self.lm_head(hidden)
            if self.final_softcap is not None:  # as the model's own forward: / cap, tanh, * cap, in its dtype
                logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
            logits = logits.float()
        out, offset = [], 0
        for b in blocks:
            out.append(logits[offset:offset + len(b.logit_rows)])
            offset += len(b.logit_rows)
        return out

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_idx: int,
                scaling: float) -> torch.Tensor:
        """The fast forward's attention: write the rows' K/V into the slots, attend (``[1, R, heads, dim]``)."""
        layer, layout = self.cache.layers[layer_idx], self.cache.layout
        layer.write(k, v, layout)
        if layout.invariant is not None:
            return invariant_attention(q, layer.keys, layer.values, scaling, layout.invariant).to(q.dtype)
        return batched_attention(None, q, layer.keys, layer.values, None, scaling, trtlade_layout=layout,
                                 sliding_window=self.windows[layer_idx])[0]

    def keep(self, kept: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Keep, per ``(slot, rows)``, the K/V of those rows of the last step (see SlotKVCache.keep)."""
        with torch.inference_mode():
            self.cache.keep(kept)

    def prefill(self, slot: int, prompt: Sequence[int], chunk: Optional[int] = None,
                all_rows: bool = False) -> torch.Tensor:
        """Run ``prompt`` into ``slot`` (empty), in chunks of at most ``chunk`` rows; return the
        last row's logits (float32, ``[vocab]``), or every row's (``[len(prompt), vocab]``) with
        ``all_rows`` (for prompt log probabilities)."""
        if len(prompt) == 0:
            raise ValueError("the prompt is empty: give at least one token")
        self.cache.lengths[slot] = 0
        step = len(prompt) if not chunk else max(1, int(chunk))
        parts: list[torch.Tensor] = []
        for start in range(0, len(prompt), step):
            part = list(prompt[start:start + step])
            rows = list(range(len(part))) if all_rows else [len(part) - 1]
            block = RowBlock(slot, part, list(range(len(part))), rows, causal=True)
            parts.append(self.forward([block])[0])
            self.keep([(slot, range(len(part)))])
        return torch.cat(parts) if all_rows else parts[-1][0]

    def prefill_many(self, prompts: Sequence[tuple[int, Sequence[int]]]) -> list[torch.Tensor]:
        """Run several prompts, each into its own empty slot, in ONE forward pass (a causal block
        each); return each prompt's last-row logits (float32, ``[vocab]``). Several arrivals then
        share one forward's fixed cost instead of queueing behind each other's prefill."""
        if len(prompts) == 1:
            return [self.prefill(*prompts[0])]
        blocks = []
        for slot, prompt in prompts:
            if len(prompt) == 0:
                raise ValueError("the prompt is empty: give at least one token")
            self.cache.lengths[slot] = 0
            blocks.append(RowBlock(slot, list(prompt), list(range(len(prompt))), [len(prompt) - 1], causal=True))
        logits = self.forward(blocks)
        self.keep([(b.slot, range(b.rows)) for b in blocks])
        return [row[0] for row in logits]

    # ------------------------------------------------------------------ layout
    def _layout(self, blocks: Sequence[RowBlock]) -> StepLayout:
        lengths = self.cache.lengths
        needed = max(lengths[b.slot] + b.rows for b in blocks)
        self.cache.ensure(max(b.slot for b in blocks) + 1, needed, self.kv_dtype, self.device)
        layout = step_layout(blocks, lengths, self.device, shortcuts=self.attn_softcap is None)
        if self.invariant_attention == "native":
            layout.row_keys = row_keys(blocks, lengths)
        elif self.invariant_attention == "torch":
            layout.invariant = invariant_index(blocks, lengths, self.device)
        if layout.mask is not None and layout.hi - layout.lo == 1:
            layout.mask = layout.mask.to(self.kv_dtype)  # one block runs sdpa: its mask in the cache's dtype, once
        return layout


def _check_native_kernels(model: nn.Module, dtype: torch.dtype, device: torch.device, *,
                          transformers_forward: bool) -> None:
    """``native_kernels=True``: refuse, before any packing, what the native kernels do not run."""
    hint = "leave native_kernels unset (the engine then uses them where they run) or set it to False"
    model_type = getattr(model.config, "model_type", "?")
    if transformers_forward:
        raise UnsupportedModelError("native_kernels=True runs in the engine's own forward, which "
                                    "fast_forward=False / pack_linears=False turn off", hint)
    if model_type not in FAMILIES:
        raise UnsupportedModelError(f"native_kernels=True: {model_type} is not of the Llama family the native body "
                                    f"runs ({', '.join(FAMILIES)})", hint)
    name = str(dtype).removeprefix("torch.")
    if device.type != "cpu" or name not in native_linear_dtypes():
        raise UnsupportedModelError(f"native_kernels=True: the native linear kernel does not run {name} on "
                                    f"{device.type} here (it runs: {', '.join(native_linear_dtypes()) or 'nothing'} "
                                    f"on the CPU; {native_status()})", hint)


class _NativeStep:
    """One step of the native body (:meth:`FastBody.forward_native`): each row's keys, where its K/V go
    (its own cache index: the last key of its path), and the cache buffers."""

    def __init__(self, runner: "BatchRunner", layout: StepLayout) -> None:
        self.keys = layout.row_keys
        self.index = np.ascontiguousarray(self.keys.idx[self.keys.ptr[1:] - 1])
        self._cache = runner.cache

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self._cache.layers]


_MASKED = float(torch.finfo(torch.float32).min)


def _tied(model: nn.Module) -> bool:
    """Whether the LM head shares its weight with the input embedding."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embed is not None and head.weight is embed.weight


def step_layout(blocks: Sequence[RowBlock], lengths: dict[int, int], device: Any = "cpu", *,
                shortcuts: bool = True) -> StepLayout:
    """The :class:`StepLayout` of one forward over ``blocks``, given each slot's committed length
    (``shortcuts=False``: never the prefill / single-row layouts, for attention that sdpa cannot run).

    >>> layout = step_layout([RowBlock(0, [7, 8], [0, 1], [1], causal=True), RowBlock(2, [9], [0], [0])],
    ...                      {0: 3, 2: 1})
    >>> layout.write_slot.tolist(), layout.write_pos.tolist(), (layout.lo, layout.hi, layout.kmax, layout.lmax)
    ([0, 0, 2], [3, 4, 1], (0, 3, 2, 5))
    >>> (layout.mask[0, 0, 0] == 0).int().tolist()        # slot 0: 3 cached + its 2 rows, causal
    [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    >>> (layout.mask[2, 0, 0] == 0).int().tolist()        # slot 2: 1 cached + 1 row; a padded query
    [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]
    >>> step_layout([RowBlock(1, [5], [0], [0])], {1: 4}).single   # one row: slot 1's 4 cached keys + itself
    (1, 5)
    """
    if shortcuts and len(blocks) == 1 and blocks[0].causal and lengths[blocks[0].slot] == 0:
        b = blocks[0]  # a prefill on an empty slot: sdpa's causal kernel, written as one slice
        empty = torch.empty(0, dtype=torch.long, device=device)
        return StepLayout(write_slot=empty, write_pos=empty, lo=b.slot, hi=b.slot + 1, kmax=b.rows, lmax=b.rows,
                          prefill=(b.slot, b.rows), contiguous=(b.slot, 0, b.rows))
    if shortcuts and len(blocks) == 1 and blocks[0].rows == 1:
        b, start = blocks[0], lengths[blocks[0].slot]  # one row: it sees the whole slot and itself
        empty = torch.empty(0, dtype=torch.long, device=device)
        return StepLayout(write_slot=empty, write_pos=empty, lo=b.slot, hi=b.slot + 1, kmax=1, lmax=start + 1,
                          single=(b.slot, start + 1), contiguous=(b.slot, start, 1))
    slots = [b.slot for b in blocks]
    if len(set(slots)) != len(slots):
        raise ValueError(f"one block per slot and step, got slots {slots}")
    lo, hi = min(slots), max(slots) + 1
    kmax = max(b.rows for b in blocks)
    lmax = max(lengths[b.slot] + b.rows for b in blocks)
    mask = np.full((hi - lo, kmax, lmax), _MASKED, dtype=np.float32)
    mask[:, :, 0] = 0.0  # padded queries see one key (their output is dropped; no all-masked row)
    q_index = np.zeros((hi - lo, kmax), dtype=np.int64)
    query_pos = np.zeros((hi - lo, kmax), dtype=np.int64)
    key_pos = np.zeros((hi - lo, lmax), dtype=np.int64)
    out_index: list[int] = []
    write_slot: list[int] = []
    write_pos: list[int] = []
    row = 0
    for b in blocks:
        i, start, k = b.slot - lo, lengths[b.slot], b.rows
        mask[i, :k, :start] = 0.0
        mask[i, :k, start:start + k] = np.where(b.visibility(), 0.0, _MASKED)
        mask[i, :k, start + k:] = _MASKED
        q_index[i, :k] = np.arange(row, row + k)
        depths = start + np.asarray(b.depths, dtype=np.int64)
        query_pos[i, :k] = depths
        key_pos[i, :start] = np.arange(start)
        key_pos[i, start:start + k] = depths
        out_index.extend(i * kmax + j for j in range(k))
        write_slot.extend([b.slot] * k)
        write_pos.extend(range(start, start + k))
        row += k

    def as_long(values: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values, dtype=np.int64), device=device)

    first = blocks[0]
    return StepLayout(
        write_slot=as_long(write_slot), write_pos=as_long(write_pos), lo=lo, hi=hi, kmax=kmax, lmax=lmax,
        q_index=as_long(q_index.reshape(-1)), out_index=as_long(out_index),
        mask=torch.from_numpy(mask).to(device).view(hi - lo, 1, 1, kmax, lmax), query_pos=query_pos, key_pos=key_pos,
        contiguous=(first.slot, lengths[first.slot], first.rows) if len(blocks) == 1 else None)


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

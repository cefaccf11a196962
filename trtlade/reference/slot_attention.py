"""Attention over the slot cache for a packed step: transformers' attention interface, one mask per
sequence, and the torch implementation of row-invariant attention."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from trtlade.reference.model_support import UNSUPPORTED_ATTENTION_KWARGS, UnsupportedModelError
from trtlade.reference.step_layout import INVARIANT_BLOCK, InvariantIndex, StepLayout

__all__ = ["BATCHED_ATTENTION", "batched_attention", "install_batched_attention", "invariant_attention"]

#: Name under which :func:`batched_attention` is registered with transformers' AttentionInterface.
BATCHED_ATTENTION = "trtlade_batched"


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
    unsupported = [name for name in UNSUPPORTED_ATTENTION_KWARGS if kwargs.get(name) is not None]
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
        out = layout.row_attention(q, key, value, layout.row_keys, scale, window=window, softcap=softcap)
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

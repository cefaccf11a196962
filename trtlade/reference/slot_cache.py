"""The KV cache of a batch: one slot per sequence, ``[slots, kv_heads, capacity, head_dim]`` per layer."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from trtlade.reference.step_layout import StepLayout

__all__ = ["SlotKVCache"]

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
        """Room for ``slots`` slots of ``capacity`` tokens (keeps the contents). Each dimension grows
        only when it is short, and then by doubling (slots by at most 8 more than asked): 64 slots added
        one by one leave the capacity what the longest asked for."""
        if slots <= self.slots and capacity <= self.capacity:
            return
        if slots > self.slots:
            slots = max(slots, min(2 * self.slots, slots + 8))
        if capacity > self.capacity:
            capacity = max(capacity, 2 * self.capacity)
        for layer in self.layers:
            layer.ensure(slots, capacity, self.kv_heads, self.head_dim, dtype, device)

    def nbytes(self) -> int:
        """Bytes the slots' K/V buffers hold (they grow by doubling and are never given back while the
        engine lives: the server's resident memory steps up with them)."""
        return sum(t.numel() * t.element_size() for layer in self.layers
                   for t in (layer.keys, layer.values) if t is not None)

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

"""The KV cache of a batch: one slot per sequence, ``[slots, kv_heads, capacity, head_dim]`` per layer."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from trtlade.reference.step_layout import StepLayout

__all__ = ["SlotKVCache"]

class _SlotLayer(CacheLayerMixin):
    """One layer's K/V: ``[slots, kv_heads, capacity, head_dim]`` views of :class:`SlotKVCache`'s buffer."""

    is_sliding = False
    is_compileable = False

    def __init__(self) -> None:
        super().__init__()
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:  # pragma: no cover
        raise RuntimeError("SlotKVCache layers are allocated by SlotKVCache.ensure")

    def attach(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Take ``keys`` / ``values`` (views of the cache's one buffer) as this layer's K/V."""
        self.keys, self.values = keys, values
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor, layout: StepLayout) -> None:
        if layout.contiguous is not None:
            slot, start, count = layout.contiguous
            self.keys[slot, :, start:start + count] = key_states[0]
            self.values[slot, :, start:start + count] = value_states[0]
        else:
            # index_put does not cast: a half-precision model's rows into a float32 cache are upcast here
            self.keys[layout.write_slot, :, layout.write_pos] = key_states[0].transpose(0, 1).to(self.keys.dtype)
            self.values[layout.write_slot, :, layout.write_pos] = value_states[0].transpose(0, 1).to(self.values.dtype)

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
    :meth:`keep` then compacts what each sequence accepted. Every layer's K and V are views of ONE
    zero-initialised buffer ``kv`` (``[layers, 2, slots, kv_heads, capacity, head_dim]``; masked positions
    must hold finite numbers: probability 0 times NaN would still be NaN), so a keep moves every layer's
    rows in one gather and one scatter (on a GPU, 2 launches instead of 4 a layer: 120 for SmolLM2's 30
    layers). The buffer grows (doubling, zero-filled) when a slot needs more room or more slots are used.

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
        #: every layer's K and V, ``[layers, 2 (K, V), slots, kv_heads, capacity, head_dim]`` (None: not allocated)
        self.kv: Optional[torch.Tensor] = None
        #: the most tokens a slot can need (its context and one step's rows): doubling stops there (None: no bound)
        self.max_capacity: Optional[int] = None

    @property
    def slots(self) -> int:
        return 0 if self.kv is None else self.kv.shape[2]

    @property
    def capacity(self) -> int:
        return 0 if self.kv is None else self.kv.shape[4]

    def ensure(self, slots: int, capacity: int, dtype, device) -> None:
        """Room for ``slots`` slots of ``capacity`` tokens (keeps the contents). Each dimension grows
        only when it is short, and then by doubling (slots by at most 8 more than asked; the capacity to at
        most :attr:`max_capacity` beyond what is asked): 64 slots added one by one leave the capacity what the
        longest asked for, and a slot of 6,000 tokens grown to 6,100 in a model of 8,192 gets its most (8,192 and a
        step's rows), not 12,000."""
        if slots <= self.slots and capacity <= self.capacity:
            return
        if slots > self.slots:
            slots = max(slots, min(2 * self.slots, slots + 8))
        if capacity > self.capacity:
            grown = 2 * self.capacity if self.max_capacity is None else min(2 * self.capacity, self.max_capacity)
            capacity = max(capacity, grown)
        slots, capacity = max(slots, self.slots), max(capacity, self.capacity)
        old = self.kv
        self.kv = torch.zeros((len(self.layers), 2, slots, self.kv_heads, capacity, self.head_dim),
                              dtype=dtype, device=device)
        if old is not None:
            self.kv[:, :, :old.shape[2], :, :old.shape[4]] = old
        for layer, (keys, values) in zip(self.layers, self.kv):
            layer.attach(keys, values)

    def nbytes(self) -> int:
        """Bytes the slots' K/V buffer holds (it grows by doubling and is never given back while the
        engine lives: the server's resident memory steps up with it)."""
        return 0 if self.kv is None else self.kv.numel() * self.kv.element_size()

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
        if src_s and self.kv is not None:
            index = torch.tensor([src_s, src_p, dst_p], dtype=torch.long).to(self.kv.device)
            slots, src, dst = index  # one host-to-device copy; every layer's K and V in one gather and one scatter
            self.kv[:, :, slots, :, dst] = self.kv[:, :, slots, :, src]

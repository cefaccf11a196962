"""One forward pass for many sequences: their rows packed into one batch row, each sequence's KV in
its own cache slot, attention per sequence.

In-flight batching for the reference engine. A step is a list of :class:`RowBlock` -- one per
running sequence: its golden token plus (for lookahead) its window and candidate rows, with the
tree mask among them, or a prompt chunk for a prefill. The runner:

* packs every block's rows into one ``[1, R]`` input (``R`` = the step's rows, nothing padded), so
  every linear layer runs one GEMM of R rows -- on a CPU with oneDNN's packed weights that is flat
  up to ~4 rows and grows slowly after (see docs/results/roofline.md);
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
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from trtlade.reference.fast_forward import (FAMILIES, FusedLinear, PackedEmbedding, fast_body, native_linears,
                                           release_parameters, rotary_by_position)
from trtlade.reference.kernels import KernelChoice, choose_linear_kernel, pack_linear_layers
from trtlade.reference.model_support import (SUPPORTED_LAYER_TYPES, UnsupportedModelError, check_native_kernels,
                                             check_supported, layer_windows, tied)
from trtlade.reference.native import row_attention
from trtlade.reference.native import status as native_status
from trtlade.reference.native.argmax import argmax_rows
from trtlade.reference.native.bindings import traced
from trtlade.reference.native.pages import pages_state, placement, weights_arena
from trtlade.reference.slot_attention import (BATCHED_ATTENTION, batched_attention, install_batched_attention,
                                              invariant_attention)
from trtlade.reference.slot_cache import SlotKVCache
from trtlade.contract.protocol import CacheScope
from trtlade.reference.prefix_cache import DEFAULT_BLOCK_TOKENS, PrefixCache
from trtlade.reference.step_layout import (RowBlock, StepLayout, invariant_index, row_keys,  # noqa: F401 (re-exported)
                                           step_layout)

# The runner's collaborators live in their own modules (step_layout, slot_attention, slot_cache,
# model_support); their public names are re-exported here, where callers have always found them.
__all__ = [
    "invariant_attention",
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
        self._pages_why = pages_state()[1]  # where the packing below puts the weights, and why
        self._choose_linears(pack_linears, fast_forward, release_weights, native_kernels)
        weights_arena().seal()  # the next model's weights share no mapping with these
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
        #: K/V of prompts' blocks kept across requests (None: off; see enable_prefix_cache)
        self.prefix_cache: Optional[PrefixCache] = None
        self._free: list[int] = []
        self._next_slot = 0
        self._dummy_mask = torch.zeros((1, 1, 1, 1), dtype=self.dtype, device=self.device)
        #: the base model's name for the cache argument (``cache`` from transformers 5.x, ``past_key_values`` before)
        self._cache_kwarg = "cache" if "cache" in inspect.signature(self.base.forward).parameters else "past_key_values"
        #: the native row-invariant attention kernel of this process's CPU variant (None: not on the CPU, or
        #: the library is not available: trtlade.reference.native.status() says why)
        self._row_attention = row_attention() if self.device.type == "cpu" else None
        #: attention computed per row from its own keys only: "native" (the C kernel, every model and
        #: feature), "torch" (:func:`invariant_attention`: fast forward, full attention) or None (off)
        self.invariant_attention = self._invariant_attention_mode(invariant_attention)
        #: each step as ONE native call (:meth:`FastBody.forward_native`): the native body, whose attention
        #: is the native row-invariant kernel over the slot cache
        self.native_body = (self.fast is not None and self.fast.native is not None
                            and self.invariant_attention == "native")
        #: the KV cache's dtype (set it before the first slot is allocated to store otherwise): under the
        #: native body a bf16 model's own, since its K/V are bf16 numbers (stored exactly, half the bytes
        #: the attention reads; the kernel widens them to the same float32 values); float32 for another
        #: half-precision model on the CPU under the fast forward or the native attention (upcast exactly;
        #: attention then runs in float32, 3-6x faster than bf16 sdpa on CPUs); else the model's dtype
        self.kv_dtype = self.dtype if self.native_body and self.dtype == torch.bfloat16 else (
            torch.float32 if ((self.fast is not None or self.invariant_attention == "native")
                              and self.device.type == "cpu" and self.dtype in (torch.bfloat16, torch.float16))
            else self.dtype)

    def _choose_linears(self, pack_linears: Optional[bool], fast_forward: Optional[bool], release_weights: bool,
                        native_kernels: Optional[bool]) -> None:
        """Set the forward (:attr:`fast`: the engine's own, or None: transformers'), the LM head and the kernel
        of the linear layers (:attr:`kernel_choice`, :attr:`packed_linears`), as ``__init__``'s arguments ask."""
        model = self.model
        if native_kernels:
            check_native_kernels(model, self.dtype, self.device, stock_linears=pack_linears is False)
        #: the engine's own Llama-family forward (fused, one weight copy), or None: transformers' forward
        self.fast = None if fast_forward is False or pack_linears is False else \
            fast_body(model, release=release_weights, windows=self.windows, native=native_kernels)
        if self.fast is None:
            rotary_by_position(self.base)  # a length-dependent rope: a row's rotary by its position alone
        if fast_forward and self.fast is None:
            raise UnsupportedModelError(f"{self.config.model_type}: the fast forward runs the Llama family "
                                        f"({', '.join(FAMILIES)}) only")
        if self.fast is not None:
            shared = tied(model)
            self.lm_head = FusedLinear([self.lm_head], release=release_weights and not shared, native=native_kernels)
            if shared and self.lm_head.native is not None:  # the embedding reads its rows from the packed head
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
        elif pack_linears is None and native_kernels is not False and (swapped := native_linears(model)):
            self.packed_linears = swapped
            self.kernel_choice = KernelChoice("native", swapped, reason="transformers' forward with every linear layer "
                                              "on the native kernel (linear.c): a row's bits do not depend on the "
                                              "rows beside it")
        elif native_kernels:
            raise UnsupportedModelError("native_kernels=True: a linear layer of this model is one the native kernel "
                                        f"does not run ({native_status()})", "leave native_kernels unset")
        elif pack_linears is None:
            self.kernel_choice = choose_linear_kernel(model)
            self.packed_linears = self.kernel_choice.layers if self.kernel_choice.kernel != "plain" else 0
        else:
            self.packed_linears = pack_linear_layers(model) if pack_linears else 0
            self.kernel_choice = KernelChoice("onednn-packed" if self.packed_linears else "plain",
                                              self.packed_linears, reason="set by the caller")
        if self.fast is None:  # the swaps above replace the model's LM head too: the logits run on its new one
            self.lm_head = model.get_output_embeddings()

    def _invariant_attention_mode(self, invariant_attention: Optional[bool]) -> Optional[str]:
        """The row-invariant attention ``invariant_attention`` asks for (None: the default, on wherever the native
        kernel runs): "native", "torch" or None; UnsupportedModelError where it is asked for and cannot run."""
        cfg = self.config
        if invariant_attention is None:
            return "native" if self._row_attention is not None else None
        if not invariant_attention:
            return None
        if self._row_attention is not None:
            return "native"
        if self.fast is not None and not any(self.windows) and self.attn_softcap is None:
            return "torch"
        raise UnsupportedModelError(
            f"{cfg.model_type}: invariant_attention needs the native kernel here (sliding windows, soft-caps "
            f"or transformers' forward), which is not available: {native_status()}")

    @property
    def bit_exact(self) -> bool:
        """Whether every op gives a row the same bits whatever the rows beside it: the engine's own forward
        (row-invariant linear layers) with row-invariant attention. Then lookahead's verification rows compute
        exactly what a greedy step computes, in every dtype."""
        return self.fast is not None and self.lm_head.kernel != "plain" and self.invariant_attention is not None

    @property
    def kernels(self) -> str:
        """What computes a step, in words: ``"native avx2 (one call per step)"`` (a bfloat16 model on a CPU's AMX
        tiles: ``"native avx512bf16 (one call per step; bfloat16 on AMX tiles)"``), ``"oneDNN packed GEMMs and
        torch ops"``, ``"plain torch GEMMs and torch ops"`` or ``"transformers' forward (...)"``."""
        if self.fast is None:
            return f"transformers' forward ({self.kernel_choice.kernel} linear layers)"
        kernel = self.lm_head.kernel
        if kernel == "native":
            table = self.lm_head.native.kernels
            how = "one call per step" if self.native_body else "linear layers; torch ops between"
            if self.dtype == torch.bfloat16 and table.linear_bf16_amx(-1) == 1:
                how += "; bfloat16 on AMX tiles"
            return f"native {table.variant} ({how})"
        return ("oneDNN packed GEMMs" if kernel == "onednn-packed" else "plain torch GEMMs") + " and torch ops"

    def weight_pages(self) -> dict:
        """Where the native kernel's packed weights lie (:func:`~trtlade.reference.native.pages.placement`): on 2 MiB
        pages where the OS has them; ``bytes`` 0 where no layer runs natively."""
        return placement([m.native.packed for module in self.weight_modules() for m in module.modules()
                          if isinstance(m, FusedLinear) and m.native is not None], self._pages_why)

    def weight_modules(self) -> list[nn.Module]:
        """The modules whose weights a forward reads: the engine's own body and LM head, else the model."""
        return [self.fast, self.lm_head] if self.fast is not None else [self.model]

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
    def forward(self, blocks: Sequence[RowBlock]) -> list[torch.Tensor]:
        """One forward of every block's rows; returns, per block, the float32 logits of its
        ``logit_rows`` (``[len(logit_rows), vocab]``). The rows' K/V stays in the slots, past each
        slot's committed length, until :meth:`keep`."""
        return _by_block(blocks, self.logits(blocks)) if blocks else []

    def forward_greedy(self, blocks: Sequence[RowBlock],
                       also: Sequence[RowBlock] = ()) -> tuple[list[torch.Tensor], list[list[int]]]:
        """:meth:`forward` of ``blocks`` then ``also`` (e.g. prompt chunks, whose rows need no greedy
        token), and each of ``blocks``' greedy token of every logit row, found for the whole step in ONE
        call (a decode step of 8 sequences made 8: 0.3 ms of a 13 ms bf16 step, 2-core AMD EPYC Zen 4)."""
        every = [*blocks, *also]
        if not every:
            return [], []
        logits = self.logits(every)
        greedy_rows = sum(len(b.logit_rows) for b in blocks)
        return _by_block(every, logits), _by_block(blocks, argmax_rows(logits[:greedy_rows]) if greedy_rows else [])

    @torch.inference_mode()
    def logits(self, blocks: Sequence[RowBlock]) -> torch.Tensor:
        """The forward: every block's logit rows, in block order, as one float32 ``[rows, vocab]``."""
        tokens = [t for b in blocks for t in b.tokens]
        positions = [self.cache.lengths[b.slot] + int(d) for b in blocks for d in b.depths]
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([positions], dtype=torch.long, device=self.device)
        # the native body reads each row's keys only; the torch paths a full layout (masks, indices)
        layout = None if self.native_body else self._layout(blocks)
        self.cache.layout = layout
        try:
            with traced("trtlade.body"):
                if layout is None:
                    hidden = self.fast.forward_native(ids, pos, _NativeStep(self, blocks))
                elif self.fast is not None:
                    hidden = self.fast(ids, pos, self._attend)
                else:
                    hidden = self.base(input_ids=ids, position_ids=pos, attention_mask=self._dummy_mask,
                                       use_cache=True, trtlade_layout=layout,
                                       **{self._cache_kwarg: self.cache}).last_hidden_state[0]
        finally:
            self.cache.layout = None
        with traced("trtlade.lm_head"):
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
            return logits.float()

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

    # ------------------------------------------------------------------ prefix reuse
    def enable_prefix_cache(self, max_bytes: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> PrefixCache:
        """Keep the K/V of prompts' blocks across requests, at most ``max_bytes`` (see
        :mod:`trtlade.reference.prefix_cache`)."""
        per_token = 2 * len(self.cache.layers) * self.cache.kv_heads * self.cache.head_dim
        self.prefix_cache = PrefixCache(block_tokens, int(max_bytes),
                                        per_token * torch.empty((), dtype=self.kv_dtype).element_size())
        return self.prefix_cache

    def prefix_hit(self, prompt: Sequence[int], scope: Optional[CacheScope] = None) -> int:
        """Tokens of ``prompt`` the prefix cache holds in ``scope``'s namespace (0 without one)."""
        return self.prefix_cache.match(prompt, scope) if self.prefix_cache is not None else 0

    def reuse(self, slot: int, prompt: Sequence[int], counted: Optional[int] = None,
              scope: Optional[CacheScope] = None) -> int:
        """Copy the cached K/V of ``prompt``'s longest cached prefix in ``scope``'s namespace into ``slot``
        (empty, or holding an earlier reuse of ``counted`` tokens of it: the cache's statistics count one
        lookup); returns its tokens, where :meth:`prefill` starts (0: nothing cached)."""
        if self.prefix_cache is None:
            return 0
        hit = self.prefix_cache.match(prompt, scope)
        blocks = self.prefix_cache.blocks_for(prompt, hit, counted, scope)
        self.cache.ensure(slot + 1, hit + 1, self.kv_dtype, self.device)
        # a block is one tensor [layers, 2 (K, V), kv_heads, tokens, head_dim] (remember), the cache's own layout
        # without the slot: the blocks are joined along the tokens, then copied in ONE copy (a copy per block and
        # layer cost about 14 ms for a 370-token prefix of 30 layers: 5 prompts reusing it took 106 ms a step,
        # then 54 with their prefill; 2-core AMD EPYC Zen 4, fp32 SmolLM2-135M)
        if blocks:
            with torch.inference_mode():
                parts = [kv if used == kv.shape[3] else kv[:, :, :, :used] for kv, used in blocks]
                self.cache.kv[:, :, slot, :, :hit] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=3)
        self.cache.lengths[slot] = hit
        return hit

    def remember(self, slot: int, prompt: Sequence[int], scope: Optional[CacheScope] = None) -> int:
        """Keep ``prompt``'s blocks (their K/V now in ``slot``) in the prefix cache, in ``scope``'s
        namespace; blocks added."""
        if self.prefix_cache is None:
            return 0

        def read(lo: int, hi: int) -> torch.Tensor:  # [layers, 2 (K, V), kv_heads, hi - lo, head_dim], a copy
            return self.cache.kv[:, :, slot, :, lo:hi].clone(memory_format=torch.contiguous_format)

        return self.prefix_cache.store(prompt, read, scope)

    def prefill(self, slot: int, prompt: Sequence[int], chunk: Optional[int] = None,
                all_rows: bool = False, start: int = 0) -> torch.Tensor:
        """Run ``prompt`` into ``slot`` (empty, or holding its first ``start`` tokens' K/V: see
        :meth:`reuse`), in chunks of at most ``chunk`` rows; return the last row's logits (float32,
        ``[vocab]``), or every row's from ``start`` on (``[len(prompt) - start, vocab]``) with
        ``all_rows`` (for prompt log probabilities)."""
        if len(prompt) == 0:
            raise ValueError("the prompt is empty: give at least one token")
        if not 0 <= start < len(prompt):
            raise ValueError(f"start {start} is outside the prompt of {len(prompt)} tokens")
        self.cache.lengths[slot] = start
        step = len(prompt) if not chunk else max(1, int(chunk))
        parts: list[torch.Tensor] = []
        for at in range(start, len(prompt), step):
            part = list(prompt[at:at + step])
            rows = list(range(len(part))) if all_rows else [len(part) - 1]
            block = RowBlock(slot, part, list(range(len(part))), rows, causal=True)
            parts.append(self.forward([block])[0])
            self.keep([(slot, range(len(part)))])
        return torch.cat(parts) if all_rows else parts[-1][0]

    def prefill_many(self, prompts: Sequence[tuple[int, Sequence[int], int]]) -> list[torch.Tensor]:
        """Run several prompts ``(slot, prompt, start)``, each into its own slot (empty, or holding its
        first ``start`` tokens: see :meth:`reuse`), in ONE forward pass (a causal block each); return
        each prompt's last-row logits (float32, ``[vocab]``). Several arrivals then share one forward's
        fixed cost instead of queueing behind each other's prefill."""
        if len(prompts) == 1:
            slot, prompt, start = prompts[0]
            return [self.prefill(slot, prompt, start=start)]
        blocks = []
        for slot, prompt, start in prompts:
            if len(prompt) == 0:
                raise ValueError("the prompt is empty: give at least one token")
            self.cache.lengths[slot] = start
            tail = list(prompt[start:])
            blocks.append(RowBlock(slot, tail, list(range(len(tail))), [len(tail) - 1], causal=True))
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
            layout.row_keys, layout.row_attention = row_keys(blocks, lengths), self._row_attention
        elif self.invariant_attention == "torch":
            layout.invariant = invariant_index(blocks, lengths, self.device)
        if layout.mask is not None and layout.hi - layout.lo == 1:
            layout.mask = layout.mask.to(self.kv_dtype)  # one block runs sdpa: its mask in the cache's dtype, once
        return layout


def _by_block(blocks: Sequence[RowBlock], rows: Sequence) -> list:
    """``rows`` (one per logit row of the step, in block order) split by block.

    >>> _by_block([RowBlock(0, [5, 6], [0, 1], [0, 1], causal=True), RowBlock(1, [7], [0], [0])], [11, 12, 13])
    [[11, 12], [13]]
    """
    out, offset = [], 0
    for b in blocks:
        out.append(rows[offset:offset + len(b.logit_rows)])
        offset += len(b.logit_rows)
    return out


class _NativeStep:
    """One step of the native body (:meth:`FastBody.forward_native`): each row's keys, where its K/V go
    (its own cache index: the last key of its path), and the cache buffers (grown to hold the step)."""

    def __init__(self, runner: "BatchRunner", blocks: Sequence[RowBlock]) -> None:
        lengths = runner.cache.lengths
        runner.cache.ensure(max(b.slot for b in blocks) + 1, max(lengths[b.slot] + b.rows for b in blocks),
                            runner.kv_dtype, runner.device)
        self.keys = row_keys(blocks, lengths)
        self.index = np.ascontiguousarray(self.keys.idx[self.keys.ptr[1:] - 1])
        self._cache = runner.cache

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self._cache.layers]

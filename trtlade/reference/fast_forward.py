"""The reference engine's own decoder forward for the Llama family (Llama, Mistral, Qwen2, Qwen3): one
copy of the weights, fused projections, and few ops per layer, so that a decode step of a small batch
costs little more than reading the weights once.

Why its own loop: a greedy step of SmolLM2-135M through transformers' modeling code spent about a third
of its time outside the matrix products (the per-op cost of ~30 small ops per layer, twice over with
the dispatch of 211 separate linear layers; profile in docs/results/step-profile.md, "Where a step's time
goes"). This forward runs the same arithmetic with:

* **fused projections**: q, k and v are one matrix (one GEMM per layer instead of three), gate and up
  another (one instead of two), each packed once (:class:`FusedLinear`: for the native kernel,
  ``native/linear.c``, where it builds, else for oneDNN); the model's own ``nn.Linear`` weights are
  released after packing, so the process holds one copy;
* **one native call per step** where the native library builds (:meth:`FastBody.forward_native`,
  ``native/layer_ops.c``): the whole body below in C, no Python between the ops;
* **the model's own modules for everything else**: its RMSNorms, rotary embedding
  (``model.model.rotary_emb``), activation, embedding and Qwen3's q/k norms are called as they are,
  so their arithmetic is transformers' own; attention is
  :func:`~trtlade.reference.batch_runner.batched_attention` on the slot cache, as before;
* **rows that do not change each other** (CPU, oneDNN): a packed GEMM gives each output row the same
  bits whatever the number of rows, except with more than 1024 input features, where a single row
  takes another kernel (float32: always different bits; bfloat16: about one call in ten, when the
  float32 sums round differently); :class:`FusedLinear` then computes it as two rows. So a row's
  projections are the same in a greedy step and in a verification step.

Worked example (one layer, R = 3 packed rows, SmolLM2: hidden 576, 9 heads of 64, 3 KV heads)::

    x = input_layernorm(h)                    # [3, 576]
    qkv = attn_in(x)                          # ONE GEMM: [3, 576 + 192 + 192]
    q, k, v = split(qkv, [576, 192, 192])     # -> [1, 9, 3, 64], [1, 3, 3, 64], [1, 3, 3, 64]
    q, k = rope(q, k, cos, sin)               # the model's rotary embedding at the rows' positions
    a = batched_attention(q, cache.write(k, v))
    h = h + o_proj(a)                         # [3, 576]
    g, u = split(mlp_in(post_attention_layernorm(h)), [1536, 1536])   # ONE GEMM for gate and up
    h = h + down_proj(act(g) * u)

Models of other shapes (another attention module, extra per-layer features) keep transformers'
forward: :func:`fast_body` returns None for them and :class:`~trtlade.reference.batch_runner.BatchRunner`
runs the model's own body.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import torch
from torch import nn

from trtlade.reference.kernels import onednn_available
from trtlade.reference.model_support import tied
from trtlade.reference.native import BodyLayer, NativeBody, PanelLinear
from trtlade.reference.native import status as native_status

__all__ = ["FAMILIES", "FusedLinear", "PackedEmbedding", "RotaryTable", "FastBody", "fast_body", "native_linears",
           "release_parameters", "rotary_by_position"]

#: ``config.model_type`` values whose decoder layer this forward reproduces.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
#: The native body's limits (layer_ops.c MAX_HIDDEN, row_attention.c MAX_REP): larger models run the torch body.
_NATIVE_MAX_HIDDEN = 16384
_NATIVE_MAX_GROUP = 16
#: oneDNN GEMMs (float32 and bfloat16) with more input features than this take another kernel for a single row.
_ONE_ROW_KERNEL_FROM = 1024


class FusedLinear(nn.Module):
    """``y = x [W_1; W_2; ...]^T + [b_1; b_2; ...]``: several linear layers of the same input as one
    GEMM, the weight packed once for oneDNN on the CPU (plain elsewhere).

    The source layers' weights are concatenated, then released (``release=True``): this module holds
    the only copy. ``splits``: the output width of each source layer, to split the result.
    """

    def __init__(self, layers: Sequence[nn.Linear], *, release: bool = True, native: Optional[bool] = None) -> None:
        super().__init__()
        weight = torch.cat([layer.weight.detach() for layer in layers]) if len(layers) > 1 \
            else layers[0].weight.detach()
        biases = [layer.bias for layer in layers]
        bias = None
        if any(b is not None for b in biases):
            bias = torch.cat([b.detach() if b is not None else torch.zeros(layer.out_features, dtype=weight.dtype,
                                                                          device=weight.device)
                              for b, layer in zip(biases, layers)])
        self.in_features = int(weight.shape[1])
        self.out_features = int(weight.shape[0])
        self.splits = [int(layer.out_features) for layer in layers]
        #: the native kernel (``trtlade/reference/native/linear.c``): None where it does not run
        self.native: Optional[PanelLinear] = None
        if native is not False and PanelLinear.supports(weight):
            self.native = PanelLinear.pack(weight, bias)
        elif native:
            raise ValueError(f"the native linear kernel does not run a {weight.dtype} weight here: "
                             f"{native_status()}")
        self.packed = self.native is None and (weight.device.type == "cpu"
                                               and weight.dtype in (torch.float32, torch.bfloat16)
                                               and onednn_available(weight.dtype))
        self.two_rows_for_one = self.packed and self.in_features > _ONE_ROW_KERNEL_FROM
        if self.native is not None:
            stored, bias = self.native.packed, None
        else:
            stored = torch.ops.mkldnn._reorder_linear_weight(weight) if self.packed else weight.contiguous()
        self.register_buffer("weight", stored, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        if release:
            for layer in layers:
                release_parameters(layer)

    @property
    def kernel(self) -> str:
        """``"native"`` (linear.c), ``"onednn-packed"`` or ``"plain"``."""
        return "native" if self.native is not None else "onednn-packed" if self.packed else "plain"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native is not None:
            return self.native(x)
        if not self.packed:
            return nn.functional.linear(x, self.weight, self.bias)
        if not x.is_contiguous():
            x = x.contiguous()
        if self.two_rows_for_one and x.shape[0] == 1:
            return self._packed(x.expand(2, -1).contiguous())[:1]
        return self._packed(x)

    def _packed(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, splits={self.splits}, kernel={self.kernel}"


def native_linears(model: nn.Module) -> int:
    """Swap every ``nn.Linear`` of ``model`` (transformers' forward) for the native kernel (:class:`FusedLinear` of
    one layer), which computes a row the same bits whatever the rows beside it, as the engine's own forward does;
    returns how many (0, nothing swapped, where the kernel does not run one of them: the model keeps its choice).
    The source weights are not released; a tied input embedding then reads its rows from the packed head
    (:class:`PackedEmbedding`, its scale too), so the vocabulary matrix is held once."""
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear]
    if not targets or not all(PanelLinear.supports(child.weight.detach()) for _, _, child in targets):
        return 0
    embed = model.get_input_embeddings()
    shared = isinstance(embed, nn.Embedding) and tied(model)
    for parent, name, child in targets:
        setattr(parent, name, FusedLinear([child], release=False, native=True))
    head = model.get_output_embeddings()
    if shared and isinstance(head, FusedLinear) and head.native is not None:
        model.set_input_embeddings(PackedEmbedding(head, scale=getattr(embed, "embed_scale", None)))
    return len(targets)


class PackedEmbedding(nn.Module):
    """A tied input embedding read from the LM head's native packed weight (:meth:`PanelLinear.rows`):
    the same values as ``embed_tokens(ids)``, without a second copy of the vocabulary matrix."""

    def __init__(self, head: FusedLinear, scale: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        if head.native is None:
            raise ValueError("a packed embedding needs the LM head on the native kernel")
        self.head = head.native
        #: a scaled embedding's factor (Gemma 3's ``embed_scale``), applied as its module applies it
        self.scale = scale

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.head.rows(ids).view(*ids.shape, self.head.in_features)
        return rows if self.scale is None else rows * self.scale.to(rows.dtype)


class RotaryTable:
    """The model's rotary ``cos``/``sin`` (float32, ``[positions, head_dim]``) for every position up to the
    largest seen; a step gathers its rows from it instead of running the module's dozen small ops (about
    0.1 ms a step, cold, on a 2-core AMD EPYC Zen 4).

    Static rope types (``default``, ``linear``, ``llama3``): the module's ops are elementwise per position, so the
    table is computed over all positions at once and grown by doubling, each position the bits the module computes
    for it alone (``tests/test_fast_forward.py`` checks them).

    Rope types whose frequencies change with the length (``dynamic``, ``longrope``: transformers rescales them from
    the largest position of the call) are computed **per position**: position p as the module computes it when p is
    the newest position (``seq_len`` p + 1), which is what plain decoding gives the token it decodes there. Called
    once over a whole step, the module would rescale every row of every sequence by the step's largest position: a
    draft row past a request's budget, or another request's long context, would change this request's tokens
    (plain decoding's too, in a batch), and the K/V the prefix cache keeps. So a row's rotary depends on its position
    alone, as for a static rope; a prompt longer than the model's original context is encoded as if decoded token
    by token (transformers' ``generate`` encodes a prompt whole, at its length). Positions below the original
    context share the unscaled frequencies and are computed in one call, those past it one call each, in
    increasing order (the module keeps its scale as state), each once."""

    STATIC = ("default", "linear", "llama3")  # rope types whose frequencies do not depend on the length
    FIRST = 256  # positions in the first table

    def __init__(self, module: nn.Module, per_position: bool = False, compute: Optional[Any] = None) -> None:
        self.module = module
        self.compute = compute if compute is not None else module  # ``(x, position_ids) -> (cos, sin)``
        self.per_position = per_position
        self.dtype: Optional[torch.dtype] = None
        self.cos = self.sin = torch.empty(0, 0)

    @classmethod
    def for_module(cls, module: nn.Module) -> "RotaryTable":
        return cls(module, per_position=getattr(module, "rope_type", "default") not in cls.STATIC)

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``, ``sin`` ``[R, head_dim]`` (float32) at ``positions`` (any shape, R values), as the
        module computes them for a model of ``dtype``."""
        flat = positions.reshape(-1)
        top = int(flat.max()) + 1 if flat.numel() else 0
        if self.per_position:
            self._grow_per_position(top, dtype)
        elif dtype != self.dtype or top > self.cos.shape[0]:
            n = max(top, 2 * self.cos.shape[0] if dtype == self.dtype else 0, self.FIRST)
            cos, sin = self.compute(torch.empty(1, 1, dtype=dtype), torch.arange(n)[None])
            self.cos, self.sin, self.dtype = cos[0].float().contiguous(), sin[0].float().contiguous(), dtype
        return self.cos.index_select(0, flat), self.sin.index_select(0, flat)

    def _grow_per_position(self, top: int, dtype: torch.dtype) -> None:
        start = self.cos.shape[0] if dtype == self.dtype else 0
        if top <= start:
            return
        x = torch.empty(1, 1, dtype=dtype)
        parts = [(self.cos, self.sin)] if start else []
        unscaled = self._unscaled_positions()
        if start < unscaled:  # one call whose largest position keeps (or puts back) the original scale
            end = min(top, unscaled)
            parts.append(self.compute(x, torch.arange(start, end)[None]))
            start = end
        for position in range(start, top):  # the newest position of its own call: seq_len position + 1
            parts.append(self.compute(x, torch.tensor([[position]])))
        self.cos = torch.cat([c[0] if c.dim() == 3 else c for c, _ in parts]).float().contiguous()
        self.sin = torch.cat([s[0] if s.dim() == 3 else s for _, s in parts]).float().contiguous()
        self.dtype = dtype

    def _unscaled_positions(self) -> int:
        """How many positions from 0 the module computes with its original frequencies whatever its state: below
        ``original - 1`` a dynamic rope puts its original scale back, and a long rope uses its short factors."""
        config = getattr(self.module, "config", None)
        params = getattr(config, "rope_parameters", None) or {}
        original = getattr(self.module, "original_max_seq_len", None) or params.get("original_max_position_embeddings")
        return max(0, int(original) - 1) if original else 0


def rotary_by_position(base: nn.Module) -> Optional[RotaryTable]:
    """transformers' own forward computes the rotary once a step, over every row of every sequence: for a rope
    whose frequencies change with the length, the model's ``rotary_emb`` is routed through a per-position
    :class:`RotaryTable` (see there), so that a row's rotary depends on its position alone on that path too. A
    static rope, a model without a model-level ``rotary_emb``, or a call with more arguments (a rope per layer
    type) is left to the module. Returns the table (None: nothing routed)."""
    rotary = getattr(base, "rotary_emb", None)
    if rotary is None or getattr(rotary, "rope_type", "default") in RotaryTable.STATIC:
        return None
    original = rotary.forward
    table = RotaryTable(rotary, per_position=True, compute=original)

    def forward(x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return original(x, position_ids, *args, **kwargs)
        cos, sin = table(position_ids, x.dtype)
        shape = (*position_ids.shape, cos.shape[-1])
        return cos.to(x.dtype).view(shape), sin.to(x.dtype).view(shape)

    rotary.forward = forward
    return table


def release_parameters(layer: nn.Module) -> None:
    """Drop a layer's weight (and bias) storage: the packed copy is the one in use (a linear layer, or a
    tied embedding whose rows are read from the packed LM head)."""
    for name in ("weight", "bias"):
        param = getattr(layer, name, None)
        if param is not None:
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)


class _Norm(nn.Module):
    """The model's RMSNorm as one fused op: ``weight * rms_norm(x.float()).to(dtype)``, the same bits
    as transformers' ``LlamaRMSNorm`` / ``Qwen3RMSNorm`` (float32 statistics, weight applied in the
    input dtype). Used only where :func:`_fusable_norm` found the module to be that norm; else the
    module runs as it is."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)
        self.shape = (int(norm.weight.shape[0]),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * nn.functional.rms_norm(x.float(), self.shape, None, self.eps).to(x.dtype)


def _fusable_norm(norm: nn.Module) -> bool:
    """Whether ``norm`` is transformers' plain RMSNorm (checked on its behaviour, not only its name)."""
    weight = getattr(norm, "weight", None)
    known = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")
    if weight is None or not hasattr(norm, "variance_epsilon") or weight.dim() != 1 or type(norm).__name__ not in known:
        return False
    with torch.no_grad():
        x = torch.randn(3, weight.shape[0], generator=torch.Generator().manual_seed(0)).to(weight)
        return torch.equal(norm(x), _Norm(norm)(x))


def _norm(norm: Optional[nn.Module]) -> Optional[nn.Module]:
    return None if norm is None else _Norm(norm) if _fusable_norm(norm) else norm


class _Layer(nn.Module):
    def __init__(self, layer: nn.Module, release: bool, native: Optional[bool]) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.input_layernorm = _norm(layer.input_layernorm)
        self.post_attention_layernorm = _norm(layer.post_attention_layernorm)
        self.q_norm = _norm(getattr(attn, "q_norm", None))
        self.k_norm = _norm(getattr(attn, "k_norm", None))
        self.attn_in = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj], release=release, native=native)
        self.attn_out = FusedLinear([attn.o_proj], release=release, native=native)
        self.mlp_in = FusedLinear([mlp.gate_proj, mlp.up_proj], release=release, native=native)
        self.mlp_out = FusedLinear([mlp.down_proj], release=release, native=native)
        self.act = mlp.act_fn
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        self.layer_idx = int(attn.layer_idx)


class FastBody(nn.Module):
    """The decoder body of a Llama-family model (see the module docstring): ``forward(ids, positions,
    cache, attend)`` -> the last hidden states ``[R, hidden]``; ``attend(q, k, v, layer_idx, scaling)``
    writes ``k``/``v`` into the cache and returns the attention output ``[1, R, heads, dim]``."""

    def __init__(self, model: nn.Module, *, release: bool = True,
                 windows: Optional[Sequence[Optional[int]]] = None, native: Optional[bool] = None) -> None:
        super().__init__()
        base = getattr(model, model.base_model_prefix)
        #: each layer's sliding window (None: full attention), as the engine reads them from the model
        self.windows = list(windows) if windows is not None else [None] * len(base.layers)
        self.embed_tokens = base.embed_tokens
        self.rotary_emb = base.rotary_emb
        self.rotary_table = RotaryTable.for_module(base.rotary_emb)  # the native body's cos/sin, by position
        self.norm = _norm(base.norm)
        self.layers = nn.ModuleList(_Layer(layer, release, native) for layer in base.layers)
        if release:  # before the native body takes the remaining tensors' addresses
            _own_the_rest(model)
        #: the whole body in one native call (:meth:`forward_native`), or None: the model's own modules run
        self.native = self._native_body() if native is not False else None

    def _native_body(self) -> Optional[NativeBody]:
        """A :class:`NativeBody` where it computes this model: every linear on the native kernel, plain
        RMSNorms with one epsilon, SiLU (checked on its values), heads of an even size; else None."""
        parts = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm")
        norms = [self.norm] + [getattr(layer, p) for layer in self.layers for p in parts
                               if getattr(layer, p) is not None]
        if not all(isinstance(n, _Norm) for n in norms) or len({n.eps for n in norms}) != 1:
            return None
        layers = list(self.layers)
        for layer in layers:
            if any(lin.native is None for lin in (layer.attn_in, layer.attn_out, layer.mlp_in, layer.mlp_out)):
                return None
            if layer.head_dim % 2 or layer.head_dim > 512 or (layer.q_norm is None) != (layer.k_norm is None):
                return None
        x = torch.linspace(-8, 8, 33)
        if not torch.equal(layers[0].act(x), nn.functional.silu(x)):
            return None
        d, (nq, nk, _) = layers[0].head_dim, layers[0].attn_in.splits
        if layers[0].attn_in.in_features > _NATIVE_MAX_HIDDEN or (nq // d) % (nk // d) \
                or (nq // d) // (nk // d) > _NATIVE_MAX_GROUP:
            return None
        body = [BodyLayer(layer.attn_in.native, layer.attn_out.native, layer.mlp_in.native, layer.mlp_out.native,
                          layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                          layer.q_norm.weight if layer.q_norm is not None else None,
                          layer.k_norm.weight if layer.k_norm is not None else None, layer.scaling, window)
                for layer, window in zip(layers, self.windows)]
        return NativeBody(body, self.norm.weight, heads=nq // d, kv_heads=nk // d, head_dim=d, eps=norms[0].eps)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attend: Any) -> torch.Tensor:
        h = self.embed_tokens(ids)[0]  # [R, hidden]
        rows = h.shape[0]
        cos, sin = self.rotary_table(positions, h.dtype)  # the module's bits, position by position
        cos, sin = cos.to(h.dtype)[:, None], sin.to(h.dtype)[:, None]  # [R, 1, d]: broadcast over the heads
        for layer in self.layers:  # .forward: the modules' own code without nn.Module's call machinery
            h = h + layer.attn_out.forward(self._attention(layer, layer.input_layernorm.forward(h), rows, cos, sin,
                                                           attend))
            g, u = layer.mlp_in.forward(layer.post_attention_layernorm.forward(h)).split(layer.mlp_in.splits, dim=-1)
            h = h + layer.mlp_out.forward(layer.act(g) * u)
        return self.norm(h)

    def forward_native(self, ids: torch.Tensor, positions: torch.Tensor, step: "NativeStep") -> torch.Tensor:
        """:meth:`forward` as ONE native call (:class:`~trtlade.reference.native.NativeBody`): the
        embedding and the rotary tables here, every layer in C. ``step``: the rows' keys and cache."""
        h = self.embed_tokens(ids)[0].contiguous()  # [R, hidden]: the residual stream, updated in place
        cos, sin = self.rotary_table(positions, h.dtype)  # [R, d]
        return self.native(h, cos, sin, step.keys, step.index, step.caches())

    def _attention(self, layer: _Layer, x: torch.Tensor, rows: int, cos: torch.Tensor, sin: torch.Tensor,
                   attend: Any) -> torch.Tensor:
        d, (nq, nk, _) = layer.head_dim, layer.attn_in.splits
        qkv = layer.attn_in.forward(x).view(rows, -1, d)  # [R, q heads + k heads + v heads, d]
        heads = nq // d
        if layer.q_norm is not None:
            qk = torch.cat([layer.q_norm(qkv[:, :heads]), layer.k_norm(qkv[:, heads:(nq + nk) // d])], dim=1)
        else:
            qk = qkv[:, :(nq + nk) // d]
        qk = _rope(qk, cos, sin)  # q and k rotated in one pass: elementwise, the same bits as apart
        q, k = qk[:, :heads].transpose(0, 1)[None], qk[:, heads:].transpose(0, 1)[None]
        v = qkv[:, (nq + nk) // d:].transpose(0, 1)[None]
        out = attend(q, k, v, layer.layer_idx, layer.scaling)
        return out.reshape(rows, -1)


class NativeStep(Protocol):
    """What :meth:`FastBody.forward_native` needs of the engine for one step: each row's keys
    (:class:`~trtlade.reference.native.RowKeys`), where its K/V go in its slot (``index``, int64 numpy),
    and every layer's cache buffers (float32, or bf16 for a bf16 model)."""

    keys: Any
    index: Any

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]: ...


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' ``apply_rotary_pos_emb`` on ``x`` ``[R, heads, d]`` with ``cos``/``sin`` ``[R, 1, d]``:
    ``x * cos + rotate_half(x) * sin``, the same elementwise ops in the same order."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


def _has_llama_layers(model: nn.Module) -> bool:
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    layers = getattr(base, "layers", None)
    if base is None or layers is None or not all(hasattr(base, n) for n in ("embed_tokens", "rotary_emb", "norm")):
        return False
    wanted_attn = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "layer_idx")
    wanted_mlp = ("gate_proj", "up_proj", "down_proj", "act_fn")
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not all(hasattr(attn, n) for n in wanted_attn) \
                or not all(hasattr(mlp, n) for n in wanted_mlp):
            return False
        if not all(type(getattr(attn, n)) is nn.Linear for n in ("q_proj", "k_proj", "v_proj", "o_proj")) or \
                not all(type(getattr(mlp, n)) is nn.Linear for n in ("gate_proj", "up_proj", "down_proj")):
            return False
    return True


def fast_body(model: nn.Module, *, release: bool = True, windows: Optional[Sequence[Optional[int]]] = None,
              native: Optional[bool] = None) -> Optional[FastBody]:
    """A :class:`FastBody` for ``model``, or None when its family or layer shape is not one this forward
    reproduces (the engine then runs transformers' forward). ``native``: the native kernels (linear.c and the
    one-call body; None: where they run, False: oneDNN and torch's ops, True: required)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in FAMILIES or not _has_llama_layers(model):
        return None
    return FastBody(model, release=release, windows=windows, native=native)


def _own_the_rest(model: nn.Module) -> None:
    """Copy the parameters and buffers still in use (embedding, norms) into the process's own memory:
    loaded from safetensors they are views of the file's memory map, which would otherwise stay mapped
    (and resident) as long as one of them lives, after the linear weights are released."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.numel() and tensor.device.type == "cpu":
                tensor.data = tensor.data.clone()

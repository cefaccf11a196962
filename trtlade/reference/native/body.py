"""The whole Llama-family decoder body as one native call per step (``layer_ops.c``)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from trtlade.reference.native.attention import RowKeys
from trtlade.reference.native.bindings import BODY_LABEL, Model, Step, kernels, profiled, status
from trtlade.reference.native.linear import PanelLinear

__all__ = ["BodyLayer", "NativeBody"]

_P = ctypes.c_void_p


@dataclass(frozen=True)
class BodyLayer:
    """One decoder layer for :class:`NativeBody`: its four packed projections (q/k/v fused, o, gate/up
    fused, down), its norm weights (model dtype; ``q_norm``/``k_norm`` None when the model has none),
    its attention scale and sliding window (None: full attention)."""

    attn_in: PanelLinear
    attn_out: PanelLinear
    mlp_in: PanelLinear
    mlp_out: PanelLinear
    input_norm: object
    post_norm: object
    q_norm: Optional[object]
    k_norm: Optional[object]
    scaling: float
    window: Optional[int]


class NativeBody:
    """A Llama-family decoder body run by ONE call per step (``trtlade_forward`` in ``layer_ops.c``):
    per layer the fused q/k/v GEMM, q/k norms + rotary + the K/V write, row-invariant attention, o, the
    residual add + RMSNorm, gate/up, SiLU times up, down, residual add + the next norm. Python pays one
    call per step instead of about 25 per layer. ``heads``/``kv_heads``/``head_dim`` as the attention
    splits them; ``eps``: every norm's epsilon (one value). The body runs on the CPU variant its layers
    were packed for."""

    #: the parts :attr:`timings` splits a step into (what a torch profiler cannot see inside the call)
    PARTS = ("linear layers", "attention", "norms, rotary, activations, K/V writes")

    def __init__(self, layers: Sequence[BodyLayer], final_norm, *, heads: int, kv_heads: int, head_dim: int,
                 eps: float) -> None:
        import torch

        first = layers[0]
        table = first.attn_in.kernels if layers else kernels()
        if table is None:
            raise ValueError(f"the native body needs the native library: {status()}")
        self.kernels, self._torch = table, torch
        self._keep: list = [final_norm]  # every tensor the structure points into

        def array(values, ctype=_P):
            arr = (ctype * len(values))(*values)
            self._keep.append(arr)
            return arr

        def ptrs(tensors):
            self._keep.extend(t for t in tensors if t is not None)
            return array([t.data_ptr() if t is not None else None for t in tensors])

        def packed(name):
            return ptrs([getattr(layer, name).packed for layer in layers])

        def bias(name):
            return ptrs([getattr(layer, name).bias for layer in layers])

        m = Model(layers=len(layers), hidden=first.attn_in.in_features, heads=heads, kv_heads=kv_heads,
                   head_dim=head_dim, inter=first.mlp_out.in_features,
                   dtype=1 if first.attn_in.dtype == torch.bfloat16 else 0, threads=0, eps=float(eps))
        for name in ("attn_in", "attn_out", "mlp_in", "mlp_out"):
            setattr(m, name, packed(name))
            setattr(m, f"{name}_bias", bias(name))
        for field, name in (("in_norm", "input_norm"), ("post_norm", "post_norm"), ("q_norm", "q_norm"),
                            ("k_norm", "k_norm")):
            setattr(m, field, ptrs([getattr(layer, name) for layer in layers]))
        m.final_norm = final_norm.data_ptr()
        m.scaling = array([layer.scaling for layer in layers], ctypes.c_float)
        m.window = array([int(layer.window or 0) for layer in layers], ctypes.c_int64)
        self._model = m
        self._caches: tuple = (None, None, None)
        #: seconds spent in the body's parts while a torch profiler runs (see :attr:`PARTS`)
        self.timings = np.zeros(len(self.PARTS), dtype=np.float64)
        #: add each step's parts to :attr:`timings` without a torch profile (two clock reads per part and
        #: layer, ~10 us a step: ``benchmarks/step_parts.py``)
        self.time_parts = False

    def __call__(self, h, cos, sin, keys: RowKeys, index: np.ndarray, caches: Sequence[tuple]):
        """``h`` ``[R, hidden]`` the embedded rows (overwritten: the residual stream), ``cos``/``sin``
        ``[R, head_dim]`` float32, ``keys`` each row's keys, ``index`` where each row's K/V go in its
        slot, ``caches`` each layer's ``(keys, values)`` ``[slots, kv_heads, capacity, dim]``, float32, or
        bfloat16 for a bf16 model (its K/V are bf16 numbers: stored exactly, half the bytes to read);
        returns the final norm's output ``[R, hidden]``."""
        torch = self._torch
        rows = h.shape[0]
        self._model.threads = torch.get_num_threads()
        scratch = torch.empty(self.kernels.forward_scratch(ctypes.byref(self._model), rows), dtype=torch.uint8)
        out = torch.empty_like(h)
        k_ptrs, v_ptrs = self._cache_pointers(caches)
        step = Step(rows=rows, capacity=caches[0][0].shape[2], h=h.data_ptr(), out=out.data_ptr(),
                     scratch=scratch.data_ptr(), cos=cos.data_ptr(), sin=sin.data_ptr(), slot=keys.slot.ctypes.data,
                     index=index.ctypes.data, committed=keys.committed.ctypes.data, pos=keys.pos.ctypes.data,
                     path_ptr=keys.ptr.ctypes.data, path_idx=keys.idx.ctypes.data, path_pos=keys.at.ctypes.data,
                     keys=k_ptrs, values=v_ptrs, kv_bf16=int(caches[0][0].dtype == torch.bfloat16))
        if self.time_parts or torch.autograd.profiler._is_profiler_enabled:  # the body times its parts too
            step.timing = self.timings.ctypes.data
        code = profiled(BODY_LABEL, self.kernels.forward, ctypes.byref(self._model), ctypes.byref(step))
        if code:
            raise ValueError(f"the native body refused the step (code {code})")
        return out

    def _cache_pointers(self, caches: Sequence[tuple]):
        """Per layer pointer arrays to the cache buffers, rebuilt only when the cache was reallocated."""
        key = tuple(k.data_ptr() for k, _ in caches)
        if self._caches[0] != key:
            k_ptrs = (_P * len(caches))(*[k.data_ptr() for k, _ in caches])
            v_ptrs = (_P * len(caches))(*[v.data_ptr() for _, v in caches])
            self._caches = (key, k_ptrs, v_ptrs)
        return self._caches[1], self._caches[2]

"""Linear layers by ``linear.c``: a weight packed once in panels of 16 outputs, streamed once per call."""

from __future__ import annotations

from typing import Optional

from trtlade.reference.native.bindings import LINEAR_LABEL, kernels, profiled, status
from trtlade.reference.native.pages import weights_arena

__all__ = ["PANEL", "PanelLinear", "linear_dtypes"]

#: outputs per panel of the packed layout
PANEL = 16
_DTYPES = ("float32", "bfloat16")


def linear_dtypes(variant: Optional[str] = None) -> tuple[str, ...]:
    """The dtypes the native linear kernel computes (every CPU variant runs float32 and bfloat16); empty
    when the library is not available (see :func:`~.bindings.status`)."""
    return _DTYPES if kernels(variant) is not None else ()


class PanelLinear:
    """``y = x W^T + b`` by ``linear.c``: the weight packed once in panels of 16 outputs (float32
    ``[panels, K, 16]``, bfloat16 ``[panels, K/2, 16, 2]``), the only copy kept. Each output is one
    chain of fused multiply-adds over k in order, so a row gets the same bits whatever the rows
    beside it (see ``linear.c``). :meth:`rows` reads rows of W back from the packed copy (a tied
    input embedding needs no second copy).

    >>> import torch
    >>> w = torch.arange(40.).view(20, 2)                  # N = 20 outputs (two panels, one partial), K = 2
    >>> lin = PanelLinear.pack(w) if "float32" in linear_dtypes() else None
    >>> lin(torch.tensor([[1., 2.]]))[0, :3].tolist() if lin else [2.0, 8.0, 14.0]   # row n: 2n + 2(2n+1)
    [2.0, 8.0, 14.0]
    >>> lin.rows(torch.tensor([19, 0])).tolist() if lin else [[38.0, 39.0], [0.0, 1.0]]
    [[38.0, 39.0], [0.0, 1.0]]
    """

    def __init__(self, packed, bias, in_features: int, out_features: int,
                 variant: Optional[str] = None) -> None:
        self.packed, self.bias = packed, bias
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.dtype = packed.dtype
        #: the CPU variant that computes it (:func:`~.bindings.kernels`)
        self.kernels = kernels(variant)
        if self.kernels is None:
            raise ValueError(f"the native linear kernel is not available: {status()}")
        self._fn = self.kernels.linear_f32 if packed.element_size() == 4 else self.kernels.linear_bf16

    @classmethod
    def supports(cls, weight, variant: Optional[str] = None) -> bool:
        """Whether ``weight`` (``[N, K]``) can run here: on the CPU, in a dtype the kernel was built for
        (bfloat16: K even)."""
        import torch

        name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(weight.dtype)
        return (weight.device.type == "cpu" and weight.dim() == 2 and name in linear_dtypes(variant)
                and (name == "float32" or weight.shape[1] % 2 == 0))

    @classmethod
    def pack(cls, weight, bias=None, variant: Optional[str] = None) -> "PanelLinear":
        """Pack ``weight`` ``[N, K]`` (float32 or bfloat16) and ``bias`` ``[N]`` (kept in float32), for
        the process's CPU variant or ``variant``."""
        import torch

        if not cls.supports(weight, variant):
            raise ValueError(f"the native linear kernel does not take a {tuple(weight.shape)} {weight.dtype} weight "
                             f"on {weight.device} here ({status()})")
        n, k = weight.shape
        padded = -(-n // PANEL) * PANEL
        w = torch.zeros(padded, k, dtype=weight.dtype)
        w[:n] = weight.detach()
        if weight.dtype == torch.float32:
            panels = w.view(padded // PANEL, PANEL, k).transpose(1, 2)
        else:
            panels = w.view(padded // PANEL, PANEL, k // 2, 2).permute(0, 2, 1, 3)
        packed = weights_arena().copy(panels)  # on 2 MiB pages where the OS has them (pages.py)
        b = None if bias is None else bias.detach().float().contiguous()
        return cls(packed, b, k, n, variant)

    def __call__(self, x):
        import torch

        if x.dtype != self.dtype:
            raise ValueError(f"input is {x.dtype}, the weight {self.dtype}")
        rows = x.numel() // self.in_features
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=self.dtype)
        args = (x.data_ptr(), rows, self.in_features, self.packed.data_ptr(),
                self.bias.data_ptr() if self.bias is not None else None, self.out_features, y.data_ptr(),
                torch.get_num_threads())
        code = profiled(LINEAR_LABEL, self._fn, *args)
        if code:
            raise ValueError(f"the native linear kernel refused {rows} x {self.in_features} -> {self.out_features} "
                             f"({self.dtype}): code {code}")
        return y

    def rows(self, ids):
        """Rows ``ids`` of the weight ``W`` ``[len(ids), K]``, read from the packed copy (natively: the
        torch gather's handful of ops took about 0.1 ms a step, cold, on a 2-core AMD EPYC Zen 4).
        IndexError for an id outside ``[0, N)``.

        >>> import torch
        >>> w = torch.arange(40 * 4, dtype=torch.float32).view(40, 4)
        >>> PanelLinear.pack(w).rows(torch.tensor([[33, 0]])).tolist()
        [[132.0, 133.0, 134.0, 135.0], [0.0, 1.0, 2.0, 3.0]]
        """
        import numpy as np
        import torch

        flat = np.ascontiguousarray(ids.reshape(-1).cpu().numpy(), dtype=np.int64)
        out = torch.empty(len(flat), self.in_features, dtype=self.dtype)
        if self.kernels.packed_rows(self.packed.data_ptr(), self.in_features, self.out_features,
                                    0 if self.packed.dim() == 3 else 1, flat.ctypes.data, len(flat), out.data_ptr()):
            bad = sorted({int(i) for i in flat if not 0 <= i < self.out_features})
            raise IndexError(f"token ids {bad[:8]} are outside the weight's rows [0, {self.out_features}): "
                             f"check the tokenizer matches the model")
        return out

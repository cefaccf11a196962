"""The engine's native library: C kernels that compute every row on its own, one variant per CPU class.

* ``row_attention.c``: row-invariant attention over the slot cache (:func:`row_attention`);
* ``linear.c``: linear layers that stream a weight packed in panels of 16 outputs once per call, at
  memory speed, one FMA chain per output (:class:`PanelLinear`, float32 and bfloat16);
* ``layer_ops.c``: the small ops of a Llama-family layer and the whole decoder body as one call per
  step (:class:`NativeBody`), and the greedy token of each row of logits (:func:`argmax_rows`);
* ``cpu.c``: which variants this CPU executes (CPUID).

The rooms: :mod:`.build` (the compiler driver and its cache), :mod:`.cpu` (the variants of each
architecture and the choice among them), :mod:`.bindings` (ctypes, the per-variant dispatch table
:class:`~.bindings.Kernels`), then one module per kernel family (:mod:`.attention`, :mod:`.linear`,
:mod:`.body`, :mod:`.argmax`). Adding a CPU variant is one row of :data:`.cpu.X86_64` (its flags and the CPUID bits it
needs) and its branch in the C sources.

Built once with the system C compiler (``$CC``, else ``cc`` / ``gcc``) into ``~/.cache/trtlade/native/``
(``scripts/setup.sh`` does it: about 15 s for the four x86-64 variants on 2 cores), and loaded with
ctypes: no torch headers, no build step in the package. Each variant is compiled with explicit target flags (x86-64:
``avx512bf16``, ``avx512``, ``avx2``, ``portable``; every other architecture, aarch64 included:
``portable``), and the process runs the best one its CPU executes; ``TRTLADE_NATIVE_ISA=<variant>``
forces a lower one. When there is no compiler or the build fails, :func:`row_attention` is None,
:func:`linear_dtypes` empty, and :func:`status` says why; the engine then runs oneDNN's GEMMs (where
this CPU has them for the dtype), torch's ops and its torch implementation of invariant attention,
which give the same guarantee more slowly. ``TRTLADE_NATIVE=0`` turns the library off.

    >>> import torch
    >>> kernel = row_attention()
    >>> q = torch.ones(1, 1, 4); k = torch.zeros(1, 1, 8, 4); v = torch.arange(32.).view(1, 1, 8, 4)
    >>> rows = RowKeys.build([(0, 2, 2, [(2, 2)])])   # slot 0, 2 committed keys, the row at position 2
    >>> kernel(q, k, v, rows, scale=1.0).tolist() if kernel else [[[4.0, 5.0, 6.0, 7.0]]]   # equal scores: the mean
    [[[4.0, 5.0, 6.0, 7.0]]]
"""

from __future__ import annotations

from trtlade.reference.native.argmax import argmax_rows
from trtlade.reference.native.attention import RowKeys, row_attention
from trtlade.reference.native.bindings import (BODY_LABEL, LINEAR_LABEL, PROFILE_LABEL, Kernels,
                                               executable_variants, kernels, status)
from trtlade.reference.native.body import BodyLayer, NativeBody
from trtlade.reference.native.linear import PANEL, PanelLinear, linear_dtypes

__all__ = ["RowKeys", "row_attention", "status", "kernels", "Kernels", "executable_variants",
           "PROFILE_LABEL", "LINEAR_LABEL", "BODY_LABEL", "PANEL", "PanelLinear", "BodyLayer", "NativeBody",
           "linear_dtypes", "argmax_rows"]


"""The PyTorch reference engine: any Hugging Face causal LM, lossless, with in-flight batching.

The rooms, top down: :mod:`~trtlade.reference.serving_adapter` (the engine behind the serving
contract of :mod:`trtlade.contract`), :mod:`~trtlade.reference.engine` (``ReferenceEngine``: load,
validate, generate), :mod:`~trtlade.reference.batching` (one forward pass per step for many
sequences), :mod:`~trtlade.reference.batch_runner` and :mod:`~trtlade.reference.kernels` (the
forward pass, the KV slots, the linear kernels), :mod:`~trtlade.reference.adaptive` (the auto
policy), :mod:`~trtlade.reference.sampling` (keyed draws), :mod:`~trtlade.reference.scheduler`
(the step's row budget), :mod:`~trtlade.reference.embedded` and
:mod:`~trtlade.reference.prompt_suite` (the default model and the prompts it is measured on).

OpenMP reads its wait policy once, when torch's OpenMP runtime starts, so it is set here, before any
module of this package imports torch, and nowhere else: with the default (active spinning) two
threads were 4x slower than one on a shared 2-core machine. A value the user exported wins. The
thread count is set where an engine loads (:func:`~trtlade.reference.kernels.configure_threads`).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

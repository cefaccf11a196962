"""The PyTorch reference engine: any Hugging Face causal LM, lossless, with in-flight batching.

The rooms, top down: :mod:`~trtlade.reference.serving_adapter` (the engine behind the serving
contract of :mod:`trtlade.contract`), :mod:`~trtlade.reference.engine` (``ReferenceEngine``: load,
validate, generate), :mod:`~trtlade.reference.batching` (one forward pass per step for many
sequences), :mod:`~trtlade.reference.batch_runner` and :mod:`~trtlade.reference.kernels` (the
forward pass, the KV slots, the linear kernels), :mod:`~trtlade.reference.adaptive` (the auto
policy), :mod:`~trtlade.reference.sampling` (keyed draws), :mod:`~trtlade.reference.scheduler`
(the step's row budget), :mod:`~trtlade.reference.embedded` and
:mod:`~trtlade.reference.prompt_suite` (the default model and the prompts it is measured on).

OpenMP reads how its idle threads wait once, when torch's OpenMP runtime starts, so it is set here,
before any module of this package imports torch, and nowhere else. A step makes about 120 short
parallel calls (one per GEMM) with a little Python between them, so the worker thread should wait a
little for the next one rather than sleep: ``GOMP_SPINCOUNT=10000``, a bounded spin (tens of
microseconds), then sleep. Measured on the 2-core AMD EPYC host, greedy SmolLM2 fp32: 19.5 ms per
step against 25.9 ms with ``OMP_WAIT_POLICY=PASSIVE`` (the previous setting) and 19.1 ms with
unbounded active spinning, which made two threads 4x slower than one on a shared 2-core machine
(docs/explanation/speed.md, "Threads"). A value the user exported (``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT``) wins. The thread count is set where an engine loads
(:func:`~trtlade.reference.kernels.configure_threads`).
"""

import os

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "10000"

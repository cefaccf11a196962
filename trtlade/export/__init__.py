"""``trtlade export``: a bundle's settings written for the stacks users already run, from one source
(the bundle's trtlade.yml and engine), so no copy of the lookahead settings can drift.

- :mod:`trtlade.export.grps`: a grps_trtllm inference yml;
- :mod:`trtlade.export.triton`: a Triton model repository for tensorrtllm_backend (>= 0.19);
- :mod:`trtlade.export.k8s`: plain Kubernetes manifests (a Deployment that validates before it serves,
  a Service, a ConfigMap, an HPA on the queue depth);
- :mod:`trtlade.export.common`: reading the bundle, and writing outputs whole or not at all.
"""

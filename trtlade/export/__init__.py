"""``trtlade export``: a bundle's settings written for the stacks users already run, from one source
(the bundle's trtlade.yml and engine), so no copy of the lookahead settings can drift.

- :mod:`trtlade.export.grps`: a grps_trtllm inference yml;
- :mod:`trtlade.export.common`: reading the bundle, and writing outputs whole or not at all.
"""

"""``trtlade build``: a Hugging Face folder to a TensorRT-LLM Lookahead engine bundle.

- :mod:`trtlade.builder.models`   model folder / name resolution, HF config, architecture -> class map
- :mod:`trtlade.builder.plan`     flags over config over defaults -> a frozen plan and its exact commands
- :mod:`trtlade.builder.convert`  step 1 (a subprocess): TensorRT-LLM's Python API, one rank at a time
- :mod:`trtlade.builder.run`      probe, convert, trtllm-build, engine check, bundle (manifest last)
- :mod:`trtlade.builder.bundle`   bundle layout, conversion stamp, trtlade.yml, extra_llm_api_options.yml
- :mod:`trtlade.builder.failures` known failures recognised in logs, with what to try

Nothing here imports tensorrt_llm in the calling process.
"""

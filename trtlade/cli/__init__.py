"""The ``trtlade`` command line (Typer). Each command lives in its own module with a ``register(app)``.

Modules here import only typer, rich, pydantic, yaml and the standard library at import time:
``trtlade --help`` must not import torch, transformers, tensorrt_llm, pandas, matplotlib or fastapi.
"""

"""Test double of ``tensorrt_llm.executor`` (1.3): only what the LLM API double raises (see ``utils``)."""

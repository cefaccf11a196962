"""TensorRT-LLM integration: engine directory reading, version compatibility. Never imports tensorrt_llm
at module import time."""

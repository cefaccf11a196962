"""Engines: the PyTorch reference engine and the TensorRT-LLM executor engine, behind one protocol."""

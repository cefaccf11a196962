"""Hugging Face config.json contents for the build tests (no weights: the TensorRT-LLM double needs none)."""

HF_CONFIGS = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float16",
              "max_position_embeddings": 8192},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16",
              "max_position_embeddings": 32768},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
              "max_position_embeddings": 40960},
    "gemma3": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "torch_dtype": "bfloat16",
               "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
               "num_hidden_layers": 26},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "torch_dtype": "bfloat16",
               "max_position_embeddings": 8192, "sliding_window": 4096, "num_hidden_layers": 26},
    "phi": {"architectures": ["PhiForCausalLM"], "model_type": "phi", "torch_dtype": "float16"},
    "bert": {"architectures": ["BertForMaskedLM"], "model_type": "bert", "torch_dtype": "float32"},
}

"""Test double of ``tensorrt_llm.models``: MODEL_MAP and the decoder classes trtlade converts."""

from .gemma import GemmaConfig, GemmaForCausalLM
from .llama import LLaMAConfig, LLaMAForCausalLM
from .modeling_utils import CALLS, PretrainedConfig, PretrainedModel, QuantConfig
from .qwen import QWenConfig, QWenForCausalLM

#: HF architecture -> class, as in tensorrt_llm/models/__init__.py (the parts trtlade uses).
MODEL_MAP = {
    "LlamaForCausalLM": LLaMAForCausalLM,
    "MistralForCausalLM": LLaMAForCausalLM,
    "MixtralForCausalLM": LLaMAForCausalLM,
    "QWenLMHeadModel": QWenForCausalLM,
    "QWenForCausalLM": QWenForCausalLM,
    "Qwen2ForCausalLM": QWenForCausalLM,
    "Qwen2MoeForCausalLM": QWenForCausalLM,
    "Qwen3ForCausalLM": QWenForCausalLM,
    "Qwen3MoeForCausalLM": QWenForCausalLM,
    "GemmaForCausalLM": GemmaForCausalLM,
    "Gemma2ForCausalLM": GemmaForCausalLM,
    "Gemma3ForCausalLM": GemmaForCausalLM,  # from 0.19 (release notes); trtlade checks the version first
}

__all__ = ["MODEL_MAP", "CALLS", "PretrainedConfig", "PretrainedModel", "QuantConfig", "LLaMAConfig",
           "LLaMAForCausalLM",
           "QWenConfig", "QWenForCausalLM", "GemmaConfig", "GemmaForCausalLM"]

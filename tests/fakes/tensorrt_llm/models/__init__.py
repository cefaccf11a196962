"""Test double of ``tensorrt_llm.models``: MODEL_MAP and the two decoder classes trtlade converts."""

from .llama import LLaMAConfig, LLaMAForCausalLM
from .modeling_utils import CALLS, PretrainedConfig, PretrainedModel
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
}

__all__ = ["MODEL_MAP", "CALLS", "PretrainedConfig", "PretrainedModel", "LLaMAConfig", "LLaMAForCausalLM",
           "QWenConfig", "QWenForCausalLM"]

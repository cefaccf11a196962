"""Test double of tensorrt_llm.models.llama (LLaMAConfig / LLaMAForCausalLM: Llama, Mistral, Mixtral)."""

from __future__ import annotations

from typing import Any

from .modeling_utils import PretrainedConfig, PretrainedModel, read_hf_config


class LLaMAConfig(PretrainedConfig):
    @classmethod
    def from_hugging_face(cls, hf_config_or_dir: Any, dtype: str = "auto", mapping: Any = None,
                          quant_config: Any = None, **kwargs: Any) -> "LLaMAConfig":
        hf = read_hf_config(hf_config_or_dir)
        fields = cls.common_fields(hf, dtype)
        fields["moe"] = {"num_experts": hf.get("num_local_experts", 0), "top_k": hf.get("num_experts_per_tok", 0)}
        return cls(mapping=mapping, quantization=quant_config, **fields)


class LLaMAForCausalLM(PretrainedModel):
    config_class = LLaMAConfig

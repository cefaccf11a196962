"""Test double of tensorrt_llm.models.gemma (GemmaConfig / GemmaForCausalLM: Gemma, Gemma 2, Gemma 3 text)."""

from __future__ import annotations

from typing import Any

from .modeling_utils import PretrainedConfig, PretrainedModel, read_hf_config


class GemmaConfig(PretrainedConfig):
    @classmethod
    def from_hugging_face(cls, hf_config_or_dir: Any, dtype: str = "auto", mapping: Any = None,
                          quant_config: Any = None, **kwargs: Any) -> "GemmaConfig":
        hf = read_hf_config(hf_config_or_dir)
        return cls(mapping=mapping, quantization=quant_config, **cls.common_fields(hf, dtype))


class GemmaForCausalLM(PretrainedModel):
    config_class = GemmaConfig

"""Test double of tensorrt_llm.models.gemma (GemmaConfig / GemmaForCausalLM: Gemma, Gemma 2, Gemma 3 text)."""

from __future__ import annotations

from typing import Any

from .modeling_utils import PretrainedConfig, PretrainedModel, read_hf_config


class GemmaConfig(PretrainedConfig):
    @classmethod
    def from_hugging_face(cls, hf_config_or_dir: Any, dtype: str = "auto", mapping: Any = None,
                          quant_config: Any = None, **kwargs: Any) -> "GemmaConfig":
        hf = read_hf_config(hf_config_or_dir)
        fields = cls.common_fields(hf, dtype)
        # mirrors: tensorrt_llm/models/modeling_utils.py, Gemma3ConfigGroup (sliding_window,
        # _sliding_window_pattern, rope_local_base_freq, ... kept in the checkpoint's config); Gemma2ConfigGroup
        # keeps no window (query_pre_attn_scalar and the two soft-cappings only)
        if fields["architecture"] == "Gemma3ForCausalLM":
            fields["sliding_window"] = hf.get("sliding_window")
            fields["_sliding_window_pattern"] = hf.get("sliding_window_pattern", 6)
        return cls(mapping=mapping, quantization=quant_config, **fields)


class GemmaForCausalLM(PretrainedModel):
    config_class = GemmaConfig

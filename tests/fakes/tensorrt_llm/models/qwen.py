"""Test double of tensorrt_llm.models.qwen (QWenConfig / QWenForCausalLM).

Stock 0.16 has no Qwen3: its config conversion asserts ``Unsupported Qwen type: qwen3, only (...) are
acceptable.``. Qwen3 is accepted from 1.0.0rc3 (NVIDIA/TensorRT-LLM PR #5650; a maintainer in #6295:
"starting from version 1.0.0rc3"), or on 0.x when the package is a build patched for Qwen3
(``tensorrt_llm.QWEN3_PATCHED``, set by tests through ``TRTLADE_FAKE_TRTLLM_QWEN3_PATCHED=1``). On
1.0.0rc3 and rc4 QWenConfig takes head_dim = hidden_size // num_attention_heads, so a checkpoint whose
config.json says otherwise fails loading its qkv weights (#6182 on the rc3 container: the loader's
``assert weights[tllm_key].shape == param.shape``, tensorrt_llm/models/model_weights_loader.py, fill).
"""

from __future__ import annotations

import re
from typing import Any

from .modeling_utils import PretrainedConfig, PretrainedModel, read_hf_config

_STOCK_016 = ("qwen", "qwen2", "qwen2_moe", "qwen2_llava_onevision", "qwen2_vl", "qwen2_audio")
_WITH_QWEN3 = _STOCK_016 + ("qwen3", "qwen3_moe")


def _release() -> tuple[int, int, int, int]:
    """(major, minor, patch, rc) of the fake's version; a final release counts as rc 1000."""
    import tensorrt_llm

    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?(?:rc(\d+))?", str(tensorrt_llm.__version__))
    if not match:
        return (0, 0, 0, 0)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0), int(match.group(4) or 1000))


def _valid_types() -> tuple[str, ...]:
    import tensorrt_llm

    if _release() >= (1, 0, 0, 3) or getattr(tensorrt_llm, "QWEN3_PATCHED", False):
        return _WITH_QWEN3
    return _STOCK_016


def _head_dim_from_division() -> bool:
    """1.0.0rc3 and rc4: head_dim = hidden_size // num_attention_heads, whatever config.json says."""
    return (1, 0, 0, 3) <= _release() < (1, 0, 0, 5)


class QWenConfig(PretrainedConfig):
    @classmethod
    def from_hugging_face(cls, hf_config_or_dir: Any, dtype: str = "auto", mapping: Any = None,
                          quant_config: Any = None, **kwargs: Any) -> "QWenConfig":
        hf = read_hf_config(hf_config_or_dir)
        qwen_type = hf.get("model_type")
        valid_types = _valid_types()
        assert qwen_type in valid_types, f"Unsupported Qwen type: {qwen_type}, only {valid_types} are acceptable."
        fields = cls.common_fields(hf, dtype)
        fields["qwen_type"] = qwen_type
        return cls(mapping=mapping, quantization=quant_config, **fields)


class QWenForCausalLM(PretrainedModel):
    config_class = QWenConfig

    @classmethod
    def from_hugging_face(cls, hf_model_or_dir: Any, dtype: str = "auto", mapping: Any = None,
                          quant_config: Any = None, **kwargs: Any) -> "QWenForCausalLM":
        """mirrors: tensorrt_llm/models/qwen/model.py, QWenForCausalLM.from_hugging_face: on the paths of Qwen 1
        with tp > 1 and of TRTLLM_DISABLE_UNIFIED_CONVERTER the weight conversion reads
        ``quant_config.quant_algo`` without a None check (an AttributeError on None)."""
        import os

        hf = read_hf_config(hf_model_or_dir)
        tp = getattr(mapping, "tp_size", 1) if mapping is not None else 1
        if (hf.get("model_type") == "qwen" and tp > 1) or os.environ.get("TRTLLM_DISABLE_UNIFIED_CONVERTER"):
            _ = quant_config.quant_algo
        head, hidden, heads = hf.get("head_dim"), hf.get("hidden_size"), hf.get("num_attention_heads")
        if _head_dim_from_division() and head and hidden and heads and head != hidden // heads:
            rows = heads + 2 * hf.get("num_key_value_heads", heads)
            raise AssertionError(f"qkv weight shape ({rows * head}, {hidden}) != ({rows * (hidden // heads)}, "
                                 f"{hidden}) (paraphrased: model_weights_loader.fill asserts the shapes equal)")
        return super().from_hugging_face(hf_model_or_dir, dtype, mapping=mapping, quant_config=quant_config,
                                         **kwargs)

"""Test double of tensorrt_llm.models.qwen (QWenConfig / QWenForCausalLM).

Stock 0.16 has no Qwen3: its config conversion asserts ``Unsupported Qwen type: qwen3, only (...) are
acceptable.``. Qwen3 is accepted from 1.0, or on 0.x when the package is a build patched for Qwen3
(``tensorrt_llm.QWEN3_PATCHED``, set by tests through ``TRTLADE_FAKE_TRTLLM_QWEN3_PATCHED=1``).
"""

from __future__ import annotations

import re
from typing import Any

from .modeling_utils import PretrainedConfig, PretrainedModel, read_hf_config

_STOCK_016 = ("qwen", "qwen2", "qwen2_moe", "qwen2_llava_onevision", "qwen2_vl", "qwen2_audio")
_WITH_QWEN3 = _STOCK_016 + ("qwen3", "qwen3_moe")


def _valid_types() -> tuple[str, ...]:
    import tensorrt_llm

    match = re.match(r"(\d+)\.(\d+)", str(tensorrt_llm.__version__))
    major_minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if major_minor >= (1, 0) or getattr(tensorrt_llm, "QWEN3_PATCHED", False):
        return _WITH_QWEN3
    return _STOCK_016


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

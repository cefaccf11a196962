"""Test double of ``tensorrt_llm.models.modeling_utils``: PretrainedConfig and the from_hugging_face /
save_checkpoint round trip, with tiny fake weights.

Every call is recorded in :data:`CALLS` and, when the environment variable
``TRTLADE_FAKE_TRTLLM_CALLS`` names a file (set only by tests), appended to it as one JSON line, so a
conversion run in a subprocess can be checked too.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from ..mapping import Mapping

CALLS: list[dict[str, Any]] = []

_DTYPES = ("auto", "float16", "bfloat16", "float32")


def record(event: dict[str, Any]) -> None:
    CALLS.append(event)
    path = os.environ.get("TRTLADE_FAKE_TRTLLM_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")


def read_hf_config(hf_config_or_dir: Any) -> dict[str, Any]:
    """The HF config.json of a folder (the real code uses transformers.AutoConfig)."""
    path = Path(str(hf_config_or_dir)) / "config.json"
    if not path.is_file():
        raise OSError(f"{hf_config_or_dir} does not appear to have a file named config.json")
    return json.loads(path.read_text())


def infer_dtype(dtype: str, torch_dtype: str | None) -> str:
    if dtype not in _DTYPES:
        raise ValueError(f"Unsupported dtype: {dtype}")
    if dtype != "auto":
        return dtype
    if torch_dtype in ("float16", "bfloat16"):
        return torch_dtype
    return "float16"


def mapping_dict(mapping: Mapping | None) -> dict[str, Any]:
    return (mapping or Mapping()).to_dict()


class QuantConfig:
    """``QuantConfig()``: no quantization (tensorrt_llm/models/modeling_utils.py, re-exported from
    tensorrt_llm.quantization in newer releases); only the two algorithm fields the converters read."""

    def __init__(self, quant_algo: Any = None, kv_cache_quant_algo: Any = None) -> None:
        self.quant_algo = quant_algo
        self.kv_cache_quant_algo = kv_cache_quant_algo

    def to_dict(self) -> dict[str, Any]:
        return {"quant_algo": self.quant_algo, "kv_cache_quant_algo": self.kv_cache_quant_algo}


class PretrainedConfig:
    def __init__(self, *, architecture: str, dtype: str, mapping: Mapping | None = None,
                 quantization: Any = None, **kwargs: Any) -> None:
        self.architecture = architecture
        self.dtype = dtype
        self.mapping = mapping or Mapping()
        self.quantization = quantization
        self.extra = kwargs

    def to_dict(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "dtype": self.dtype, **self.extra,
                "mapping": self.mapping.to_dict(),
                "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}

    @classmethod
    def common_fields(cls, hf: dict[str, Any], dtype: str) -> dict[str, Any]:
        return {
            "architecture": hf["architectures"][0],
            "dtype": infer_dtype(dtype, hf.get("torch_dtype")),
            "vocab_size": hf.get("vocab_size", 32000),
            "hidden_size": hf.get("hidden_size", 64),
            "num_hidden_layers": hf.get("num_hidden_layers", 2),
            "num_attention_heads": hf.get("num_attention_heads", 4),
            "num_key_value_heads": hf.get("num_key_value_heads", hf.get("num_attention_heads", 4)),
            "max_position_embeddings": hf.get("max_position_embeddings", 2048),
        }


def _tiny_safetensors(path: Path, rank: int) -> None:
    """A valid safetensors file holding one float32 tensor ``[rank]`` (the real ones hold the weights)."""
    data = struct.pack("<f", float(rank))
    header = json.dumps({"fake.rank": {"dtype": "F32", "shape": [1], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


class PretrainedModel:
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        self.config = config

    @classmethod
    def from_hugging_face(cls, hf_model_or_dir: Any, dtype: str = "auto", mapping: Mapping | None = None,
                          quant_config: Any = None, **kwargs: Any) -> "PretrainedModel":
        record({"call": "from_hugging_face", "class": cls.__name__, "hf_dir": str(hf_model_or_dir),
                "dtype": dtype, "mapping": None if mapping is None else {
                    "world_size": mapping.world_size, "rank": mapping.rank, "tp_size": mapping.tp_size,
                    "pp_size": mapping.pp_size},
                "quant_config": quant_config if quant_config is None else type(quant_config).__name__,
                "kwargs": sorted(kwargs)})
        config = cls.config_class.from_hugging_face(hf_model_or_dir, dtype=dtype, mapping=mapping,
                                                    quant_config=quant_config, **kwargs)
        return cls(config)

    def save_checkpoint(self, output_dir: str, save_config: bool = True) -> None:
        rank = self.config.mapping.rank
        record({"call": "save_checkpoint", "class": type(self).__name__, "output_dir": str(output_dir),
                "rank": rank, "save_config": save_config})
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        _tiny_safetensors(out / f"rank{rank}.safetensors", rank)
        if save_config:
            (out / "config.json").write_text(json.dumps(self.config.to_dict(), indent=4))

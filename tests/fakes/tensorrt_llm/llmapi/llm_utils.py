"""Test double of ``tensorrt_llm.llmapi.llm_utils`` (see the package docstring)."""

from __future__ import annotations

from typing import Any

from . import DecodingBaseConfig


def update_llm_args_with_extra_dict(llm_args: dict, llm_args_dict: dict, extra_llm_api_options: Any = None) -> dict:
    """mirrors: update_llm_args_with_extra_dict (tensorrt_llm/llmapi/llm_args.py): the
    ``speculative_config`` mapping becomes its config class by ``decoding_type``; the file's keys win."""
    llm_args_dict = dict(llm_args_dict)
    if "speculative_config" in llm_args_dict:
        llm_args_dict["speculative_config"] = DecodingBaseConfig.from_dict(llm_args_dict["speculative_config"])
    return llm_args | llm_args_dict

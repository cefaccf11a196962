"""Hugging Face model folders as an export reads them (config.json, tokenizer_config.json with its special
tokens and chat template, generation_config.json), written in code for the real families' ids and
templates, with an empty weights file (build checks that one exists): what `trtlade export grps` derives
llm_style, end/pad ids, special tokens, stop words and sampling from."""

from __future__ import annotations

import json
from pathlib import Path

QWEN_SPECIAL = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}
CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
LLAMA3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"

#: kind -> (config.json, special tokens, eos token, pad token, chat template, generation_config.json)
FAMILIES = {
    "qwen3": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "eos_token_id": 151645},
              QWEN_SPECIAL, "<|im_end|>", "<|endoftext|>", CHATML,
              {"eos_token_id": [151645, 151643], "pad_token_id": 151643, "do_sample": True, "temperature": 0.6,
               "top_k": 20, "top_p": 0.95}),
    "qwen2.5": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "eos_token_id": 151645},
                QWEN_SPECIAL, "<|im_end|>", "<|endoftext|>",
                "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}"
                + CHATML, {"eos_token_id": [151645, 151643], "do_sample": True, "temperature": 0.7, "top_p": 0.8,
                           "top_k": 20}),
    "llama3": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "eos_token_id": 128009},
               {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128006: "<|start_header_id|>",
                128007: "<|end_header_id|>", 128009: "<|eot_id|>"}, "<|eot_id|>", None, LLAMA3,
               {"eos_token_id": [128001, 128009], "do_sample": True, "temperature": 0.6, "top_p": 0.9}),
    # SmolLM2: a Llama architecture with a ChatML template; no grps llm_style renders it
    "smollm2": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "eos_token_id": 2},
                {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}, "<|im_end|>", "<|im_end|>", CHATML,
                {"eos_token_id": 2}),
}


def write_hf_folder(folder: Path, kind: str) -> Path:
    config, special, eos, pad, template, generation = FAMILIES[kind]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")  # weights: build checks they exist
    decoder = {str(i): {"content": c, "special": True, "lstrip": False, "rstrip": False} for i, c in special.items()}
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": decoder, "eos_token": eos, "pad_token": pad, "chat_template": template}))
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder

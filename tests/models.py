"""Tiny random causal LMs (Llama, Qwen2, Qwen3) and a tiny byte-level BPE tokenizer, built offline.

Random weights give degenerate, repetitive greedy text: exactly what exercises lookahead's
acceptance (``initializer_range=0.05``: 1.5-3 tokens per step at (7,7,7), and no fp32 near-ties
between kernels on the test prompts).

    >>> tok = tiny_tokenizer()
    >>> model = tiny_model("llama", vocab_size=len(tok))
    >>> model.config.num_hidden_layers, model.config.vocab_size == len(tok)
    (2, True)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

ARCHS = ("llama", "qwen2", "qwen3")
#: Tiny models with sliding-window layers (window :data:`WINDOW` tokens): Mistral (every layer),
#: Qwen2 with ``use_sliding_window`` (the layers from ``max_window_layers`` on), Gemma 2 (alternating, with
#: attention and final-logit soft-capping), Gemma 3 (five sliding layers to one full, q/k norms, two ropes).
WINDOW_ARCHS = ("mistral", "qwen2-sw", "gemma2", "gemma3")
WINDOW = 8

#: Text the tiny tokenizer is trained on (a few hundred merges over it).
CORPUS = """
def is_prime(n):
    if n < 2:
        return False
    for i in range(2, int(n ** 0.5) + 1):
        if n % i == 0:
            return False
    return True
The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.
Honey bees live in colonies. The workers clean cells, feed the larvae and build wax comb.
A train travels 60 km in 45 minutes. What is its average speed in km per hour?
one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve.
Hello! How are you today? I am fine, thank you. Can you help me with my homework?
Summarise the following paragraph in two sentences. The team met on Monday to plan the release.
"""

EOS_TOKEN = "<|eos|>"


@lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE tokenizer (256 bytes + merges + ``<|eos|>``) as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([CORPUS] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN)


@lru_cache(maxsize=4)
def tiny_word_tokenizer(vocab_size: int = 320) -> Any:
    """A whitespace word-level tokenizer (every token is a whole word): text always decodes cleanly,
    which stop-string tests need (a random model's byte-level output is mostly partial UTF-8)."""
    import re

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: list[str] = [EOS_TOKEN, "[UNK]"]
    for word in re.findall(r"\w+|[^\w\s]", CORPUS):
        if word not in words:
            words.append(word)
    filler = 0
    while len(words) < vocab_size:
        words.append(f"w{filler}")
        filler += 1
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words[:vocab_size])}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, unk_token="[UNK]")


def tiny_config(arch: str, vocab_size: int, *, eos_token_id: int = 0, attn_implementation: str = "sdpa",
                hidden_size: int = 64, layers: int = 2, max_positions: int = 512, window: int = WINDOW) -> Any:
    common = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max_positions, initializer_range=0.05, eos_token_id=eos_token_id,
        bos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
    )
    if arch == "llama":
        from transformers import LlamaConfig

        config = LlamaConfig(**common)
    elif arch == "qwen2":
        from transformers import Qwen2Config

        config = Qwen2Config(**common, use_sliding_window=False)
    elif arch == "qwen3":
        from transformers import Qwen3Config

        config = Qwen3Config(**common, head_dim=16, use_sliding_window=False)
    elif arch == "mistral":
        from transformers import MistralConfig

        config = MistralConfig(**common, sliding_window=window)
    elif arch == "qwen2-sw":
        from transformers import Qwen2Config

        common["num_hidden_layers"] = max(layers, 3)
        config = Qwen2Config(**common, use_sliding_window=True, sliding_window=window, max_window_layers=1)
    elif arch == "gemma2":
        from transformers import Gemma2Config

        config = Gemma2Config(**common, head_dim=16, sliding_window=window, query_pre_attn_scalar=16,
                              attn_logit_softcapping=1.0, final_logit_softcapping=2.0)
    elif arch == "gemma3":
        from transformers import Gemma3TextConfig

        common["num_hidden_layers"] = max(layers, 6)
        config = Gemma3TextConfig(**common, head_dim=16, sliding_window=window, query_pre_attn_scalar=16,
                                  layer_types=["sliding_attention"] * 5 + ["full_attention"]
                                  + ["sliding_attention"] * (common["num_hidden_layers"] - 6))
    else:
        raise ValueError(f"unknown arch {arch!r}; use one of {ARCHS + WINDOW_ARCHS}")
    config._attn_implementation = attn_implementation
    return config


def tiny_model(arch: str = "llama", vocab_size: int = 320, *, seed: int = 0, dtype: torch.dtype = torch.float32,
               attn_implementation: str = "sdpa", **kwargs: Any) -> Any:
    """A seeded random ``*ForCausalLM`` in eval mode (2 layers, hidden 64)."""
    from transformers import AutoModelForCausalLM

    if arch == "gemma2":  # transformers runs Gemma 2's soft-capped attention eagerly only
        attn_implementation = "eager"
    config = tiny_config(arch, vocab_size, attn_implementation=attn_implementation, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.eos_token_id
    return model.eval()


def tiny_engine(arch: str = "llama", spec: Any = (15, 5, 15), *, seed: int = 0, adaptive: bool = False,
                pack_linears: Any = None, attn_implementation: str = "sdpa", model: Any = None,
                tokenizer: Any = None, **kwargs: Any) -> Any:
    """A ReferenceEngine on a tiny model (no calibration; fixed spec unless ``adaptive``)."""
    from trtlade.reference.engine import ReferenceEngine

    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    model = model if model is not None else tiny_model(arch, len(tok), seed=seed,
                                                       attn_implementation=attn_implementation)
    return ReferenceEngine(model, tok, spec, adaptive=adaptive, pack_linears=pack_linears, calibrate=False,
                           model_id=f"tiny-{arch}", threads=1, **kwargs)


def frozen_cost(seconds_by_rows: dict[int, float]) -> Any:
    """A step-cost table that keeps the given host's costs: the steps a test runs on its tiny model
    (a fraction of a millisecond) do not replace them."""
    from trtlade.reference.adaptive import CostTable

    class Frozen(CostTable):
        def add(self, rows: int, seconds: float) -> None:
            pass

    table = Frozen()
    for rows, seconds in seconds_by_rows.items():
        CostTable.add(table, rows, seconds)
    return table

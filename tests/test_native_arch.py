"""The native kernels' bits on every CPU variant and on aarch64: tests/native/bits.c, built with each
variant's flags of build.py (and with Debian's aarch64 cross compiler, run under qemu-user), checks that
a row alone equals the same row among others and prints a hash of each kernel's output; every build must
print the same hashes. A variant this CPU cannot execute, or a missing cross tool, is a skip that says
what is missing (CI installs the tools: .ci/run)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import native_variants
from trtlade.reference.native.build import HERE, KERNELS, PROBE, STRICT, build, compiler
from trtlade.reference.native.cpu import variants_for

HARNESS = Path(__file__).parent / "native" / "bits.c"
CROSS = "aarch64-linux-gnu-gcc"
EMULATOR = "qemu-aarch64"


class LinkError(Exception):
    """The kernels compiled but the static harness could not be linked (a toolchain without static libraries)."""


def _build(cc: str, flags: tuple[str, ...], out: Path) -> Path:
    """The harness with the kernels built with ``flags``: a kernel that does not compile fails the test (it is
    a defect of the source, never a missing tool); only a failed static link raises :class:`LinkError`."""
    objects = []
    for src in KERNELS:
        obj = out.with_name(f"{out.name}.{src.stem}.o")
        done = subprocess.run([cc, *STRICT, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        assert done.returncode == 0, f"{cc} {' '.join(flags)} failed on {src.name}:\n{done.stderr[-2000:]}"
        objects.append(str(obj))
    done = subprocess.run([cc, "-O2", "-fopenmp", *flags, f"-I{HERE}", str(HARNESS), *objects, "-o", str(out), "-lm",
                           "-static"], capture_output=True, text=True)
    if done.returncode:
        raise LinkError(done.stderr[-200:])
    return out


def _hashes(argv: list[str]) -> dict[str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{argv[-1]}: {done.stdout}{done.stderr}"
    return dict(line.split() for line in done.stdout.splitlines())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    """The hashes of the best variant this CPU runs (built with that variant's flags)."""
    if compiler() is None or not native_variants.RUNS:
        pytest.skip("no C compiler or no native variant runs here")
    best = next(v for v in variants_for() if v.name == native_variants.RUNS[0])
    return _hashes([str(_build(compiler(), best.flags, tmp_path_factory.mktemp("bits") / best.name))])


@pytest.mark.parametrize("variant", native_variants.params())
def test_every_variant_gives_a_row_the_same_bits_alone_and_the_same_bits_as_the_others(variant, reference, tmp_path):
    flags = next(v for v in variants_for() if v.name == variant).flags
    got, want = _hashes([str(_build(compiler(), flags, tmp_path / variant))]), dict(reference)
    assert set(got) == {"linear_f32", "linear_bf16", "packed_rows", "argmax", "rms_norm", "rms_norm_bf16",
                        "row_attention", "row_attention_64", "row_attention_128"}
    if "avx512bf16" in (variant, native_variants.RUNS[0]):
        # VDPBF16PS against two FMAs (odd k first): float32 and attention must agree; bf16 is compared to
        # within one ulp in test_fast_forward.py (test_every_cpu_variant_gives_the_best_variants_bits)
        got.pop("linear_bf16"), want.pop("linear_bf16")
    assert got == want


def test_the_portable_kernels_on_aarch64_give_the_x86_bits(reference, tmp_path):
    """The portable C path cross-compiled for aarch64 and run under qemu-user: row-invariant, and the same
    bits as this host's variant (fmaf is one FMLA there; exp/tanh from float arithmetic only)."""
    missing = [tool for tool in (CROSS, EMULATOR) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install gcc-aarch64-linux-gnu qemu-user)")
    try:
        binary = _build(CROSS, (), tmp_path / "aarch64")
    except LinkError as exc:
        pytest.skip(f"{CROSS} cannot link a static binary here: {exc}")
    got, want = _hashes([EMULATOR, str(binary)]), dict(reference)
    if native_variants.RUNS[0] == "avx512bf16":
        got.pop("linear_bf16"), want.pop("linear_bf16")
    assert got == want


@pytest.mark.parametrize("variant", [v.name for v in variants_for()])
def test_every_variant_this_compiler_can_target_is_built(variant, tmp_path):
    """The library leaves a variant out only where the compiler cannot target it (an old compiler without
    ``-mavx512bf16``): a kernel source that fails to compile for a variant would otherwise pass every test of
    that variant as a skip ("not built here")."""
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler")
    flags = next(v for v in variants_for() if v.name == variant).flags
    probe = subprocess.run([cc, *STRICT, *flags, "-c", str(PROBE), "-o", str(tmp_path / "probe.o")],
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"{cc} cannot target {variant}: {probe.stderr[-200:]}")
    built = build(variants_for())
    assert variant in built.variants, built.message


_EMULATED_LOAD = """
import ctypes
from trtlade.reference.native import kernels, status
k, sink = kernels(), ctypes.c_float()
print(k.variant, k.linear_bf16_by_fma(-1), k.peak_flops(1, 1000, 2, ctypes.byref(sink)) > 0, k.paths["bfloat16"])
print(status())
"""


def test_an_avx2_only_cpu_loads_the_library_and_runs_its_avx2_variant():
    """The library holds every x86-64 variant, and the process binds them all: on a CPU without AVX-512 (AMD
    Zen 2/3, many laptops; here qemu-user's Haswell, whose CPUID has no AVX-512) loading it, asking what
    runs (setup.sh's line) and running the chosen variant's kernels must touch no AVX-512 instruction."""
    if native_variants.ALL[0] != "avx512bf16" or shutil.which("qemu-x86_64") is None:
        pytest.skip("needs an x86-64 host and qemu-x86_64 (apt-get install qemu-user)")
    if "avx512bf16" not in build(variants_for()).variants:
        pytest.skip("this compiler cannot build the AVX-512 variants: nothing to keep away from")
    done = subprocess.run(["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c", _EMULATED_LOAD],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()[:2]
    assert first == "avx2 1 True avx2-fma (widened to float32)"
    assert second.startswith("variant avx2 (the best this CPU runs; this CPU runs avx2, portable)")

"""The native kernels' bits on every CPU variant and on aarch64: tests/native/bits.c, built with each
variant's flags of build.py (and with Debian's aarch64 cross compiler, run under qemu-user), checks that
a row alone equals the same row among others and prints a hash of each kernel's output; every build must
print the same hashes. A variant this CPU cannot execute, or a missing cross tool, is a skip that says
what is missing (CI installs the tools: .ci/run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import native_variants
from trtlade.reference.native.build import HERE, KERNELS, STRICT, compiler
from trtlade.reference.native.cpu import variants_for

HARNESS = Path(__file__).parent / "native" / "bits.c"
CROSS = "aarch64-linux-gnu-gcc"
EMULATOR = "qemu-aarch64"


def _build(cc: str, flags: tuple[str, ...], out: Path) -> Path:
    objects = []
    for src in KERNELS:
        obj = out.with_name(f"{out.name}.{src.stem}.o")
        subprocess.run([cc, *STRICT, *flags, "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        objects.append(str(obj))
    subprocess.run([cc, "-O2", "-fopenmp", *flags, f"-I{HERE}", str(HARNESS), *objects, "-o", str(out), "-lm",
                    "-static"], check=True, capture_output=True)
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
    assert set(got) == {"linear_f32", "linear_bf16", "packed_rows", "argmax", "row_attention", "row_attention_64",
                        "row_attention_128"}
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
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"{CROSS} cannot link a static binary here: {exc.stderr.decode()[-200:]}")
    got, want = _hashes([EMULATOR, str(binary)]), dict(reference)
    if native_variants.RUNS[0] == "avx512bf16":
        got.pop("linear_bf16"), want.pop("linear_bf16")
    assert got == want

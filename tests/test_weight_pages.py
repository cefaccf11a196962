"""The packed weights on 2 MiB pages (trtlade/reference/native/pages.py): where each weight goes, how long its
mapping lives, when the arena steps aside, what the engine says of it, and that a page never changes a bit."""

from __future__ import annotations

import gc

import pytest
import torch

from trtlade.reference.batch_runner import RowBlock
from trtlade.reference.native import linear_dtypes, status
from trtlade.reference.native import pages
from trtlade.reference.native.bindings import env_warnings
from trtlade.reference.native.pages import (ALIGN, HUGE, HUGE_PAGES_ENV, PageArena, env_warning, huge_page_bytes,
                                            pages_state, placement, thp_mode)

from models import tiny_engine

ON, WHY = pages_state()
needs_pages = pytest.mark.skipif(not ON, reason=f"no 2 MiB pages for the weights here: {WHY}")
needs_native = pytest.mark.skipif(not linear_dtypes(), reason=f"native linear kernel not built here: {status()}")


@pytest.fixture
def fake_sys(tmp_path, monkeypatch):
    """Point the THP files at a folder of the test's own; returns a writer of (enabled, hpage_pmd_size)."""
    enabled, pmd = tmp_path / "enabled", tmp_path / "hpage_pmd_size"
    monkeypatch.setattr(pages, "_THP_FILE", str(enabled))
    monkeypatch.setattr(pages, "_PMD_FILE", str(pmd))
    monkeypatch.setattr(pages.mmap, "MADV_HUGEPAGE", getattr(pages.mmap, "MADV_HUGEPAGE", 14), raising=False)
    monkeypatch.delenv(HUGE_PAGES_ENV, raising=False)

    def write(mode_line: str, size: int = HUGE) -> None:
        enabled.write_text(mode_line + "\n")
        pmd.write_text(f"{size}\n")
    return write


def _mapping_of(arena: PageArena, tensor: torch.Tensor) -> tuple[int, int]:
    ptr = tensor.data_ptr()
    return next((start, size) for start, size in arena.mappings if start <= ptr < start + size)


# ---------------------------------------------------------------------------------------- when the arena places
@pytest.mark.parametrize("mode_line, size, on, why", [
    ("always [madvise] never", HUGE, True, "transparent huge pages (madvise), advised"),
    ("[always] madvise never", HUGE, True, "transparent huge pages (always), advised"),
    ("always madvise [never]", HUGE, False, "transparent huge pages are never here"),
    ("always [madvise] never", 512 << 20, False, "this kernel's huge pages are 524288 KiB, not 2 MiB"),
    ("garbled", HUGE, False, "transparent huge pages are unavailable here"),
])
def test_the_os_setting_decides(fake_sys, mode_line, size, on, why):
    fake_sys(mode_line, size)
    state = pages_state()
    assert state[0] is on and state[1].startswith(why)
    assert PageArena().enabled is on


def test_no_thp_file_means_unavailable_and_no_madvise_means_off(tmp_path, monkeypatch):
    assert thp_mode(str(tmp_path / "missing")) == "unavailable"
    monkeypatch.delenv(HUGE_PAGES_ENV, raising=False)
    monkeypatch.delattr(pages.mmap, "MADV_HUGEPAGE", raising=False)  # macOS, Windows
    assert pages_state() == (False, "this OS has no transparent huge pages")


def test_the_variable_turns_it_off_and_a_bad_value_is_said(fake_sys, monkeypatch):
    fake_sys("always [madvise] never")
    monkeypatch.setenv(HUGE_PAGES_ENV, "0")
    assert pages_state() == (False, f"off ({HUGE_PAGES_ENV}=0)") and env_warning() is None
    monkeypatch.setenv(HUGE_PAGES_ENV, "yes")
    assert pages_state()[0] and "TRTLADE_HUGE_PAGES='yes' not understood" in env_warning()
    assert env_warning() in env_warnings()  # said at engine load with the native kernels' variables
    monkeypatch.setenv(HUGE_PAGES_ENV, "1")
    assert env_warning() is None


def test_off_gives_plain_torch_tensors(monkeypatch):
    monkeypatch.setenv(HUGE_PAGES_ENV, "0")
    arena = PageArena()
    w = arena.copy(torch.arange(12.0).view(3, 4))
    assert w.tolist() == torch.arange(12.0).view(3, 4).tolist() and arena.mappings == []


# ---------------------------------------------------------------------------------------- where a weight goes
@needs_pages
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weights_follow_each_other_on_cache_lines_in_one_aligned_mapping(dtype):
    arena = PageArena()
    sources = [torch.randn(shape).to(dtype) for shape in [(3, 5), (7,), (2, 3, 4), (4, 2, 16, 2)]]
    placed = [arena.copy(s) for s in sources]
    for s, p in zip(sources, placed):
        assert p.dtype == s.dtype and p.shape == s.shape and p.is_contiguous() and torch.equal(p, s)
    starts = [p.data_ptr() for p in placed]
    (start, size), = arena.mappings
    assert start % HUGE == 0 and size == pages.CHUNK
    assert starts[0] == start and all(b - start == off for b, off in zip(
        starts, arena.offsets_of(*[p.numel() * p.element_size() for p in placed])))
    assert all(b % ALIGN == 0 for b in starts)
    placed[1].fill_(9)  # neighbours do not overlap
    assert torch.equal(placed[0], sources[0]) and torch.equal(placed[2], sources[2])


@needs_pages
def test_a_weight_larger_than_a_chunk_gets_its_own_mapping_and_a_full_chunk_a_new_one():
    arena = PageArena(chunk=HUGE)
    small = arena.copy(torch.ones(1000))
    big = arena.copy(torch.ones(HUGE // 4 + 1))          # 2 MiB and 4 bytes: its own mapping of two huge pages
    rest = arena.copy(torch.ones(HUGE // 4 - 100))        # no longer fits after `small`: a new chunk
    maps = dict(arena.mappings)
    assert maps[big.data_ptr()] == 2 * HUGE and big.data_ptr() % HUGE == 0
    assert _mapping_of(arena, small) != _mapping_of(arena, rest) and rest.data_ptr() % HUGE == 0
    assert small.sum() == 1000 and big.sum() == HUGE // 4 + 1


@needs_pages
def test_a_mapping_lives_as_long_as_a_tensor_in_it_and_no_longer():
    arena = PageArena(chunk=HUGE)
    keep = arena.copy(torch.arange(100.0)).view(10, 10)
    first = _mapping_of(arena, keep)
    gone = [arena.copy(torch.ones(HUGE // 4 - 100)), arena.copy(torch.ones(10))]  # a chunk of their own, dropped
    second = _mapping_of(arena, gone[1])
    assert second != first and arena.mappings == [first, second]
    del gone
    gc.collect()
    assert arena.mappings == [first]                        # the chunk being filled went with its last tensor
    again = arena.copy(torch.ones(10))                      # ... and the next weight starts a new one
    assert len(arena.mappings) == 2 and first in arena.mappings and _mapping_of(arena, again) != first
    del arena
    gc.collect()
    assert keep.sum().item() == sum(range(100))            # a tensor still holds its mapping


@needs_pages
def test_the_os_was_asked_for_huge_pages():
    arena = PageArena()
    w = arena.copy(torch.ones(HUGE // 2))                   # 4 MiB: two whole huge pages' worth
    start, size = _mapping_of(arena, w)
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        text = f.read()
    head = f"{start:x}-"
    block = text[text.index(head):]
    flags = block[block.index("VmFlags:"):].splitlines()[0]
    assert " hg" in flags                                   # VM_HUGEPAGE: the madvise took
    assert huge_page_bytes([(start, size)]) is not None


# ---------------------------------------------------------------------------------------- what is reported
def test_huge_page_bytes_counts_only_the_mappings_that_hold_the_ranges(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text("\n".join([
        "7f0000000000-7f0000400000 rw-p 00000000 00:00 0", "Size:               4096 kB", "AnonHugePages:      4096 kB",
        "7f0000400000-7f0000600000 rw-p 00000000 00:00 0", "AnonHugePages:      2048 kB",
        "7f0001000000-7f0001200000 rw-p 00000000 00:00 0 /home/j\u00f6rg/x-1.so", "AnonHugePages:         0 kB",
        "VmFlags: rd wr mr mw me ac hg", ""]), encoding="latin-1")            # a path not in UTF-8 is read, not fatal
    assert huge_page_bytes([(0x7F0000100000, 64)], str(smaps)) == 4 << 20
    assert huge_page_bytes([(0x7F0000100000, 64), (0x7F0000400000, 1)], str(smaps)) == 6 << 20
    assert huge_page_bytes([(0x7E0000000000, 64)], str(smaps)) == 0
    assert huge_page_bytes([(0, 1)], str(tmp_path / "missing")) is None


@needs_pages
@pytest.mark.parametrize("os_says, reported", [(1 << 30, 4 * ((1 << 18) + (1 << 10))), (4096, 4096), (None, None)])
def test_placement_tells_the_arena_weights_from_the_others(monkeypatch, os_says, reported):
    arena = pages.weights_arena()
    arena.seal()                                            # both weights in one fresh chunk
    on = [arena.copy(torch.ones(1 << 18)), arena.copy(torch.ones(1 << 10))]
    off = torch.ones(1 << 12)
    asked = []
    monkeypatch.setattr(pages, "huge_page_bytes", lambda maps: asked.append(maps) or os_says)
    report = placement([*on, off, on[0]], "why")              # a weight listed twice counts once
    assert report["bytes"] == 4 * ((1 << 18) + (1 << 10) + (1 << 12))
    assert report["advised_bytes"] == 4 * ((1 << 18) + (1 << 10))
    # what smaps says of the mappings that hold them (their whole pages), at most the weights' own bytes
    assert asked == [[_mapping_of(arena, on[0])]] and report["huge_page_bytes"] == reported
    assert report["pages"] == "why"


@needs_pages
def test_a_sealed_arena_starts_the_next_weight_on_a_mapping_of_its_own():
    arena = PageArena()
    first = arena.copy(torch.ones(10))
    arena.seal()                                            # a model's packing done
    second = arena.copy(torch.ones(10))
    assert _mapping_of(arena, first) != _mapping_of(arena, second) and second.data_ptr() % HUGE == 0


def test_a_refused_madvise_leaves_base_pages_not_an_error(monkeypatch):
    import mmap as real

    class Refusing(real.mmap):
        def madvise(self, *args):
            raise OSError(22, "refused by this kernel")

    fake = type("Mmap", (), {"mmap": Refusing, "MAP_PRIVATE": real.MAP_PRIVATE, "MAP_ANONYMOUS": real.MAP_ANONYMOUS,
                             "MADV_HUGEPAGE": 14})
    monkeypatch.setattr(pages, "mmap", fake)
    arena = PageArena()
    arena.enabled = True
    assert arena.copy(torch.arange(5.0)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


@needs_native
def test_the_engine_says_where_its_weights_are_and_pages_change_no_bit(monkeypatch):
    prompt = [5, 17, 33, 2, 9, 41]
    monkeypatch.setenv(HUGE_PAGES_ENV, "0")
    plain = tiny_engine(spec=(3, 3, 3))
    monkeypatch.delenv(HUGE_PAGES_ENV)
    paged = tiny_engine(spec=(3, 3, 3))
    placed, why = pages_state()                             # this machine's answer with the variable unset
    off, on = plain.stats["weight_pages"], paged.stats["weight_pages"]
    assert off["bytes"] == on["bytes"] > 0 and off["advised_bytes"] == 0 and off["pages"].startswith("off")
    assert on["advised_bytes"] == (on["bytes"] if placed else 0) and on["pages"] == why
    assert paged.greedy(prompt, max_tokens=12).tokens == plain.greedy(prompt, max_tokens=12).tokens
    assert paged.generate(prompt, max_tokens=12).tokens == plain.generate(prompt, max_tokens=12).tokens
    logits = []
    for engine in (plain, paged):
        runner = engine.runner
        slot = runner.allocate(32)
        runner.prefill(slot, prompt)
        logits.append(runner.forward([RowBlock(slot, [7, 8, 9], [0, 1, 2], [0, 1, 2], causal=True)])[0])
    assert torch.equal(*logits)

"""The house rules of docs/explanation/architecture.md, checked: which room imports which, one error family,
collaborators passed in rather than mutated, one atomic write."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import os
import pkgutil
from pathlib import Path

import pytest

import trtlade
from trtlade.errors import PlanError, TrtladeError

ROOT = Path(trtlade.__file__).parent


def module_imports(room: str) -> set[str]:
    """Every trtlade module a room imports at module level (lazy imports inside functions and
    ``TYPE_CHECKING`` blocks excluded: they do not run when the room is imported)."""
    paths = [ROOT / f"{room}.py"] if (ROOT / f"{room}.py").exists() else list((ROOT / room).rglob("*.py"))
    found: set[str] = set()
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trtlade"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("trtlade"))
    return found


def rooms(modules: set[str]) -> set[str]:
    return {m.split(".")[1] if "." in m else "trtlade" for m in modules}


# room -> the rooms it may import at module level (itself aside), as docs/explanation/architecture.md draws them
ALLOWED = {
    "errors": set(),
    "host": set(),
    "files": {"errors"},
    "diagnostics": set(),
    "yaml_doc": {"diagnostics", "errors"},
    "spec": {"errors"},
    "bundle": {"errors"},
    "presets": {"spec"},
    "schedule": {"errors", "spec"},
    "lookahead": {"spec"},
    "drafting": {"errors", "lookahead"},
    "contract": {"drafting", "errors", "schedule", "spec"},
    "trtllm": {"contract", "diagnostics", "drafting", "errors", "schedule", "spec", "yaml_doc"},
    "config": {"bundle", "diagnostics", "drafting", "errors", "presets", "schedule", "spec", "trtllm", "yaml_doc"},
    "reference": {"contract", "drafting", "errors", "files", "lookahead", "schedule", "spec"},
    "bench": {"drafting", "errors", "files", "host", "spec", "trtlade"},
    "tune": {"bench", "config", "drafting", "errors", "files", "schedule", "spec"},
    "export": {"bundle", "config", "errors", "files", "trtlade", "trtllm"},
    "builder": {"bundle", "config", "drafting", "errors", "files", "spec", "trtllm"},
    "server": {"bundle", "config", "contract", "drafting", "errors", "host", "presets", "schedule", "spec",
               "trtlade"},
    "engine_bench": {"bench", "presets", "spec", "reference"},
}


def test_every_room_has_its_rule():
    """A new room gets a line above (and in the guide) before it lands; only the CLI may import everything."""
    found = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem not in ("__init__", "__main__")}
    assert found - {"cli"} == set(ALLOWED)


def test_the_rooms_form_no_cycle():
    below = {room: rooms(module_imports(room)) - {room, "trtlade"} for room in ALLOWED}

    def reaches(start: str, seen: frozenset = frozenset()) -> set[str]:
        out = set()
        for nxt in below[start]:
            if nxt not in seen:
                out |= {nxt} | reaches(nxt, seen | {nxt})
        return out
    assert [room for room in ALLOWED if room in reaches(room)] == []


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_each_room_imports_only_the_rooms_below_it(room):
    assert rooms(module_imports(room)) - {room} <= ALLOWED[room]


def test_the_server_reaches_engines_only_through_the_contract():
    """At import time the server knows the contract, not an engine: the runner picks one lazily."""
    assert not {"reference", "trtllm"} & rooms(module_imports("server"))
    assert "contract" in rooms(module_imports("server"))


def test_the_contract_and_the_algorithm_import_no_torch_and_no_http():
    """At import time (the contract's tokenizer loader imports transformers when it is called)."""
    heavy = {"torch", "transformers", "tensorrt_llm", "fastapi", "httpx", "starlette"}
    for room in ("contract", "lookahead", "drafting"):
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not {n.split(".")[0] for n in names} & heavy, path


def _all_modules():
    for info in pkgutil.walk_packages([str(ROOT)], prefix="trtlade."):
        if info.name.startswith("trtlade.cli") or info.name == "trtlade.__main__":
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError as exc:  # tensorrt_llm and friends are optional
            if "tensorrt_llm" not in str(exc):
                raise


def test_every_exception_class_is_a_trtlade_error():
    """One error family: message, hint and where on every error a user can cause."""
    strays = []
    for module in _all_modules():
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__
                    and not issubclass(value, TrtladeError)):
                strays.append(f"{module.__name__}.{name}")
    assert strays == []


def test_one_plan_error_for_every_plan():
    from trtlade.bench import plan as bench_plan
    from trtlade.server import plan as serve_plan

    assert bench_plan.PlanError is serve_plan.PlanError is PlanError
    error = PlanError("--top-p 0 is outside (0, 1]", "e.g. --top-p 0.95", option="--top-p")
    assert (error.where, error.option, error.hint) == ("--top-p", "--top-p", "e.g. --top-p 0.95")


def test_the_engines_draft_settings_cannot_be_flipped_on_a_live_engine():
    """engine-bench and the tests pass settings per call; nothing mutates a shared engine."""
    from models import tiny_engine

    eng = tiny_engine("llama", (2, 3, 2), prompt_lookup=2)
    assert not hasattr(eng, "adaptive") and not hasattr(eng, "prompt_lookup")  # only in eng.settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        eng.settings.prompt_lookup = 0
    own = dataclasses.replace(eng.settings, prompt_lookup=0, adaptive=False)
    batch = eng.new_batch(settings=own)
    assert batch.settings is own and eng.settings.prompt_lookup == 2


def test_the_atomic_write_leaves_nothing_behind_when_it_fails(tmp_path, monkeypatch):
    from trtlade.files import write_text_atomic

    target = tmp_path / "trtlade.yml"
    target.write_text("old\n")

    def broken(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["trtlade.yml"]

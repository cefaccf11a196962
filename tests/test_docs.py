"""The documents are tested: sizes, links and anchors, dated figures, no development history, the generated
reference current, the shell blocks marked runnable run, the paths the code cites exist, every harness indexed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "benchmarks" / "README.md"])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
RUN = re.compile(r"<!-- test: run(?:, exits (\d+))? -->\n```(?:bash|console|sh)\n(.*?)```", re.S)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def without_code(text: str) -> str:
    """The page without fenced blocks and inline code (links and headings there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def test_the_readme_is_short_and_no_page_is_long():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    long = {rel(p): n for p in PAGES if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"split these pages (600 lines at most): {long}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_and_anchor_resolves(page):
    text = without_code(page.read_text(encoding="utf-8"))
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        dest = page if not path else (page.parent / path).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{frag}")
    assert not broken, f"{rel(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_development_history(page):
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"\b[Ii]ssues? #?\d+|\bthis session\b|\bruns? so far\b", text)
    assert not found, f"{rel(page)} speaks of the project's development: {sorted(set(found))}"


FIGURE = re.compile(r"\d[\d.,]* ?(?:ms|tok/s|tokens/s|GB/s)\b")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_page_with_measured_figures_names_a_date_and_a_host(page):
    text = page.read_text(encoding="utf-8")
    if not FIGURE.search(text):
        return
    assert re.search(r"20\d\d-\d\d-\d\d", text), f"{rel(page)} has measured figures but no date"
    assert re.search(r"(?i)\bhost\b|\bH200\b|\bA10\b", text), f"{rel(page)} has measured figures but names no host"


def test_the_generated_reference_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def runnable_blocks():
    for page in PAGES:
        for n, (code, body) in enumerate(RUN.findall(page.read_text(encoding="utf-8"))):
            commands = [line[2:] if line.startswith("$ ") else line for line in body.splitlines()
                        if line.strip() and not line.startswith("#") and (line.startswith("$ ") or
                                                                           not body.lstrip().startswith("$"))]
            yield pytest.param(commands, int(code or 0), id=f"{rel(page)}[{n}]")


@pytest.mark.parametrize("commands, code", list(runnable_blocks()))
def test_the_shell_blocks_marked_runnable_run(commands, code, tmp_path):
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "120", "TMP": str(tmp_path)}
    for command in commands:
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
                                timeout=120)
        assert result.returncode == code, f"{command}\n{result.stdout}\n{result.stderr}"


def test_there_are_runnable_blocks():
    assert len(list(runnable_blocks())) >= 5


def test_the_docs_the_code_cites_exist():
    cited = set()
    for folder in ("trtlade", "tests", "scripts", "benchmarks", "configs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".c", ".h", ".yml", ".md", ".sh") and path.is_file():
                cited |= {m for m in re.findall(r"\bdocs/[\w./-]+\.md", path.read_text(errors="ignore"))
                          if not m.startswith("docs/source/")}  # docs/source/...: TensorRT-LLM's own tree
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"the code cites docs that do not exist: {missing}"


def test_every_harness_is_indexed_and_cited():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    docs = "\n".join(p.read_text() for p in PAGES if p.name != "README.md" or p.parent == ROOT)
    harnesses = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    assert harnesses
    for name in harnesses:
        assert f"`{name}`" in index, f"benchmarks/README.md does not list {name}"
        assert f"benchmarks/{name}" in docs, f"no document cites benchmarks/{name}: remove it or cite it"


def test_the_help_groups_the_commands_as_the_readme_does_and_fits_a_screen():
    from typer.testing import CliRunner

    from trtlade.cli.main import PANELS, PURPOSE, app

    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"}, terminal_width=100)
    lines = result.output.splitlines()
    assert result.exit_code == 0 and len(lines) <= 40, result.output
    for panel, names in PANELS.items():
        assert f" {panel} " in result.output
        for name in names:
            assert name in result.output and name in PURPOSE
    readme = (ROOT / "README.md").read_text()
    for names in PANELS.values():
        for name in names:
            if name not in ("config", "report"):  # helpers, listed in the reference
                assert f"`trtlade {name}" in readme, f"the README's table lacks {name}"

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
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md"),
                ROOT / "benchmarks" / "README.md"])
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
def test_every_table_row_is_one_line(page):
    """A table row wrapped over lines renders as several rows with its cells shifted."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code blocks may hold anything
    broken = [line[:60] for line in text.splitlines() if line.startswith("|") and not line.rstrip().endswith("|")]
    assert not broken, f"{rel(page)}: table rows that do not end on their line: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_development_history(page):
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"\b[Ii]ssues? #?\d+|\bthis session\b|\bruns? so far\b", text)
    assert not found, f"{rel(page)} speaks of the project's development: {sorted(set(found))}"


FIGURE = re.compile(r"\d[\d.,]* ?(?:ms|tok/s|tokens/s|req/s|GB/s|GiB/s|TFLOP/s)(?![\w/])|\d\.\d+ tokens per step")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_page_with_measured_figures_names_a_date_and_a_host(page):
    text = page.read_text(encoding="utf-8")
    if not FIGURE.search(text):
        return
    assert re.search(r"20\d\d-\d\d-\d\d", text), f"{rel(page)} has measured figures but no date"
    assert re.search(r"(?i)\bhost\b|\bH200\b|\bA10\b", text), f"{rel(page)} has measured figures but names no host"


@pytest.mark.parametrize("page", [p for p in PAGES if "results" not in p.parts], ids=rel)
def test_every_section_of_a_guide_with_figures_names_a_date_and_a_host(page):
    """Outside the dated results pages a figure's date and host are in its own section (``##``)."""
    bad = []
    for section in re.split(r"^(?=## )", page.read_text(encoding="utf-8"), flags=re.M):
        if FIGURE.search(section) and not (re.search(r"20\d\d-\d\d-\d\d", section)
                                           and re.search(r"(?i)\bhost\b|\bH200\b|\bA10\b", section)):
            bad.append(section.splitlines()[0][:70])
    assert not bad, f"{rel(page)}: sections with figures but no date or no host: {bad}"


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


SCRIPT = re.compile(r"<!-- test: run as one script -->\n```bash\n(.*?)```(?:\n\n```text\n(.*?)```)?", re.S)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_blocks():
    for page in PAGES:
        for n, (body, shown) in enumerate(SCRIPT.findall(page.read_text(encoding="utf-8"))):
            yield pytest.param(body, shown, id=f"{rel(page)}[{n}]")


@pytest.mark.parametrize("body, shown", list(script_blocks()))
def test_the_blocks_marked_as_one_script_run(body, shown, tmp_path):
    """A block that starts a server runs whole, on a free port instead of 8000; the server is stopped after. The
    token counts of the output shown after it are the ones it prints (greedy: the same on every run)."""
    import signal

    script = "trap 'kill $(jobs -p) 2>/dev/null' EXIT\nset -e\n" + body.replace(":8000", f":{free_port()}")
    port = re.search(r"127\.0\.0\.1:(\d+)", script).group(1)
    script = script.replace("--port 8000", f"--port {port}")
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    process = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the block ran past 240 s:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]
    if '"lookahead": [' in body:  # the streamed usage says what the drafting did
        assert '"usage":{' in output and '"lookahead":{"spec"' in output, output[-3000:]
    if '"speculation": {' in body:
        assert "speculation=" in output and "'decoding_type': 'NGram'" in output, output[-3000:]
    for count in re.findall(r"\b(?:prompt|completion)_tokens\W{1,3}\d+", shown):
        assert count in output, f"the page shows {count}, the block printed:\n{output[-3000:]}"


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


# --- claims checked against the code -------------------------------------------------------------------------

PATH_NAMED = re.compile(r"(?<![\w/.$~-])((?:docs|benchmarks|configs)/[\w./-]*[\w/])")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SHELL = ("bash", "console", "sh", "shell")


def named_paths(text: str) -> set[str]:
    """Every ``docs/...``, ``benchmarks/...`` and ``configs/...`` path a text names (globs and placeholders aside).

    >>> sorted(named_paths("see docs/guides/serve.md, `configs/*.yml`, benchmarks/NAME.py, https://x.org/docs/"))
    ['docs/guides/serve.md']
    """
    found = set()
    for match in PATH_NAMED.finditer(text):
        path = match.group(1).rstrip(".")
        tail = text[match.end():match.end() + 1]
        stem = Path(path).stem
        if path.startswith("docs/source/") or tail in "*<{$" or stem.isupper() or len(stem) == 1:
            continue  # docs/source/...: TensorRT-LLM's own tree; NAME, x: placeholders
        found.add(path)
    return found


def test_every_path_the_docs_the_code_and_pyproject_name_exists():
    sources = [*PAGES, ROOT / "pyproject.toml", ROOT / "CHANGELOG.md"]
    for folder in ("trtlade", "scripts", "benchmarks", "configs"):
        sources += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".c", ".h", ".yml", ".sh")]
    missing = []
    for source in sources:
        if source.is_file():
            for path in sorted(named_paths(source.read_text(errors="ignore"))):
                if not (ROOT / path).exists():
                    missing.append(f"{rel(source)}: {path}")
    assert not missing, "these name paths that do not exist:\n" + "\n".join(missing)


def shell_commands(body: str, lang: str) -> list[str]:
    """A shell block's commands: continuation lines joined; in a console block only the ``$`` lines."""
    body = re.sub(r"\\\n\s*", " ", body)
    lines = body.splitlines()
    if lang == "console" or any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def trtlade_invocations(command: str) -> list[list[str]]:
    """The argument lists given to ``trtlade`` in one shell line (after ``&&``, ``|``, ``;``, env assignments).

    >>> trtlade_invocations("A=1 .venv/bin/trtlade serve --port 8000 & sleep 1 && trtlade spec 4,2,4 | head")
    [['serve', '--port', '8000'], ['spec', '4,2,4']]
    """
    import shlex

    if not re.search(r"\btrtlade\b", command):
        return []
    command = re.sub(r"<[^<>\s]+>", "X", command.split(" #")[0])
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise AssertionError(f"not a shell command ({exc}): {command}") from None
    segments, current = [], []
    for token in tokens:
        if token and set(token) <= set("|&;()<>"):
            segments.append(current)
            current = []
        else:
            current.append(token)
    segments.append(current)
    out = []
    for tokens in segments:
        while tokens and (re.match(r"^\w+=", tokens[0]) or tokens[0] in ("exec", "nohup", "time", "sudo")):
            tokens = tokens[1:]
        if tokens[:2] and tokens[0].endswith("python") and tokens[1:3] == ["-m", "trtlade"]:
            tokens = tokens[2:]
        if tokens and (tokens[0] == "trtlade" or tokens[0].endswith("/trtlade")):
            out.append([t for t in tokens[1:] if t])
    return out


def shell_blocks():
    for page in PAGES:
        for n, (lang, body) in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            if lang in SHELL:
                yield page, n, lang, body


def check_invocation(args: list[str]) -> str | None:
    """None if ``trtlade ARGS`` names a command and only options that command has, else the reason.

    >>> check_invocation(["serve", "--port", "8000"]), check_invocation(["export", "grps", "B", "--out", "x"])
    (None, None)
    >>> check_invocation(["build", "--nope"]), check_invocation(["nosuch"])
    ("trtlade build has no option '--nope'", "trtlade has no command 'nosuch'")
    """
    import typer

    from trtlade.cli.main import app

    command = typer.main.get_command(app)
    rest, path = list(args), ["trtlade"]
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        sub = command.get_command(command.context_class(command), rest[0])
        if sub is None:
            return f"{' '.join(path)} has no command {rest[0]!r}"
        path.append(rest.pop(0))
        command = sub
    options = {name: param for param in command.params for name in (*param.opts, *param.secondary_opts)
               if name.startswith("-")}
    options["--help"] = options["-h"] = None
    while rest:
        token = rest.pop(0)
        if token == "--":
            break
        if not token.startswith("-") or re.match(r"^-\d", token) or token == "-":
            continue
        name = token.split("=", 1)[0]
        if name not in options:
            if re.match(r"^-[a-zA-Z]{2,}$", token) and all(f"-{c}" in options for c in token[1:]):
                continue
            return f"{' '.join(path)} has no option {name!r}"
        param = options[name]
        if param is not None and not getattr(param, "is_flag", False) and not getattr(param, "count", False) \
                and "=" not in token and rest:
            rest.pop(0)
    return None


def test_every_trtlade_command_and_flag_in_a_shell_block_parses():
    bad = []
    for page, n, lang, body in shell_blocks():
        for command in shell_commands(body, lang):
            for args in trtlade_invocations(command):
                reason = check_invocation(args)
                if reason:
                    bad.append(f"{rel(page)} block {n}: `{command.strip()}`: {reason}")
    for page in PAGES:  # synopses: ``trtlade CMD [--flag VALUE] [--other]`` in plain blocks
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            for line in re.sub(r"\n\s+\[", " [", body).splitlines() if lang in ("", "text") else []:
                if line.startswith("trtlade ") and "[" in line:
                    words = re.match(r"trtlade((?: [a-z][a-z-]+)*)", line).group(1).split()
                    flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line.split(" #")[0])
                    reason = check_invocation([*words, *[f"{f}=" if f.startswith("--") else f for f in flags]])
                    if reason:
                        bad.append(f"{rel(page)}: synopsis `{line.strip()[:60]}...`: {reason}")
    assert not bad, "\n".join(bad)


SECTIONS = ("model", "build", "lookahead", "serve", "bench")
#: A request's ``lookahead`` field's parts, named by the server's 400s (not config keys).
REQUEST_FIELDS = {"lookahead.w", "lookahead.n", "lookahead.g"}


def schema_keys() -> set[str]:
    """Every ``section.key`` of the trtlade config (and ``speculation``)."""
    from trtlade.config.schema import TrtladeConfig

    keys = {"speculation"}
    for section in SECTIONS:
        model = TrtladeConfig.model_fields[section].annotation
        keys |= {f"{section}.{name}" for name in model.model_fields}
    return keys


def test_every_config_key_a_guide_names_exists():
    keys = schema_keys()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md")),
             *sorted((ROOT / "docs" / "explanation").glob("*.md"))]
    bad = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for key in re.findall(r"`((?:%s)\.[a-z_]+)(?:\.[a-z_]+)*[`:= ]" % "|".join(SECTIONS), text):
            if key not in keys and key not in REQUEST_FIELDS and not re.search(r"\.(py|yaml|yml|json)$", key):
                bad.append(f"{rel(page)}: `{key}`")
        for lang, body in FENCE.findall(text):
            if lang in ("yaml", "yml"):
                bad += [f"{rel(page)}: {k} (in a YAML block)" for k in yaml_keys(body) if k not in keys]
    assert not bad, "keys the config does not have:\n" + "\n".join(sorted(set(bad)))


def yaml_keys(body: str) -> list[str]:
    """``section.key`` of a YAML block that is a trtlade config (its top level only trtlade's sections)."""
    import yaml

    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError:
        return []
    if not isinstance(data, dict) or not data or not set(data) <= {*SECTIONS, "speculation"}:
        return []
    return [f"{section}.{key}" for section in SECTIONS if isinstance(data.get(section), dict)
            for key in data[section]]


def test_every_bench_mode_the_code_accepts_is_in_the_bench_guide():
    from trtlade.bench.plan import POLICY_MODES, SERVER_DEFAULT_MODES, parse_modes
    from trtlade.drafting.config import _MODE_DEFAULTS

    guide = (ROOT / "docs" / "guides" / "bench.md").read_text()
    table = re.search(r"\| mode \| request body \|.*?\n\n", guide, re.S)
    assert table, "the bench guide has no modes table"
    modes = ["ar", *SERVER_DEFAULT_MODES, *POLICY_MODES, *_MODE_DEFAULTS, "ngram-auto"]
    parse_modes([",".join(modes)])  # the code accepts each
    missing = [m for m in modes if not re.search(rf"^\| `{re.escape(m)}[`\[-]", table.group(0), re.M)]
    assert not missing, f"the bench guide's modes table lacks {missing}"


def test_a_links_label_names_the_page_it_opens():
    stems = {p.stem for p in PAGES} - {"README"}
    bad = []
    for page in PAGES:
        text = without_code(page.read_text(encoding="utf-8"))
        for label, target in re.findall(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target) or not target.split("#")[0]:
                continue
            path = target.split("#")[0].rstrip("/")
            name = label.strip("` ").lower()
            opened = Path(path).stem.lower()
            if re.search(r"[\w-]+\.(md|py|yml|png|sh)\b|/", name):  # a file named: it is the one opened
                named = re.search(r"([\w.-]+?)(?:\.(?:md|py|yml|png|sh))?/?$", name.split("#")[0]).group(1)
                if named != opened and not (opened == "readme" and named == Path(path).parent.name):
                    bad.append(f"{rel(page)}: [{label}]({target})")
            elif name in stems and name != opened:
                bad.append(f"{rel(page)}: [{label}]({target})")
    assert not bad, "labels naming another page than the one they open:\n" + "\n".join(bad)


GUIDE_COMMAND = {"build.md": "build", "serve.md": "serve", "bench.md": "bench", "tune.md": "tune",
                 "validate.md": "validate-config"}


def command_options(name: str) -> dict:
    import typer

    from trtlade.cli.main import app

    group = typer.main.get_command(app)
    command = group.get_command(group.context_class(group), name)
    return {opt: param for param in command.params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("guide", sorted(GUIDE_COMMAND))
def test_a_guides_flag_table_names_real_flags_and_their_real_choices(guide):
    options = command_options(GUIDE_COMMAND[guide])
    text = (ROOT / "docs" / "guides" / guide).read_text(encoding="utf-8")
    bad = []
    for cell in re.findall(r"^\| `(--?[a-z][^`]*)`", text, re.M):
        flag, _, value = cell.partition(" ")
        flag = flag.split("/")[0].split("=")[0].rstrip(",")
        if flag not in options:
            bad.append(f"{flag}: no such flag")
            continue
        import enum

        annotation = options[flag].type_descriptor.annotation
        choices = [m.value for m in annotation] if isinstance(annotation, type) and issubclass(annotation, enum.Enum) \
            else None
        if choices and re.fullmatch(r"[\w-]+(\\?\|[\w-]+)+", value):
            shown = set(re.split(r"\\?\|", value))
            if shown != set(choices):
                bad.append(f"{flag}: the table offers {sorted(shown)}, the code {sorted(choices)}")
    assert not bad, f"docs/guides/{guide}: " + "; ".join(bad)


def test_the_build_guides_flag_table_lists_every_flag():
    options = {p.opts[0] for p in command_options("build").values() if p.opts[0].startswith("--")} - {"--help"}
    text = (ROOT / "docs" / "guides" / "build.md").read_text(encoding="utf-8")
    listed = {f for row in re.findall(r"^\| (`--.*?) \|", text, re.M) for f in re.findall(r"`(--[\w-]+)", row)}
    assert not options - listed, f"the build guide's flag table lacks {sorted(options - listed)}"


def test_the_serve_guides_metrics_table_lists_every_series_the_reference_lists():
    reference = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    series = set(re.findall(r"^\| `(trtlade_\w+)`", reference, re.M))
    guide = (ROOT / "docs" / "guides" / "serve.md").read_text()
    listed = set(re.findall(r"`(trtlade_\w+)(?:\{[^}]*\})?`", guide))
    assert series and not series - listed, f"the serve guide's metrics table lacks {sorted(series - listed)}"


def test_the_version_is_one_in_pyproject_the_package_and_the_changelog():
    import trtlade

    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    top = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert declared == trtlade.__version__ == top, (declared, trtlade.__version__, top)
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "trtlade"), "--version"], capture_output=True, text=True)
    assert result.stdout.strip() == f"trtlade {declared}", result


def test_the_bench_guides_modes_table_shows_the_body_each_mode_sends():
    import json

    from trtlade.bench.plan import parse_modes

    guide = (ROOT / "docs" / "guides" / "bench.md").read_text()
    table = re.search(r"\| mode \| request body \|.*?\n\n", guide, re.S).group(0)
    bad = []
    for first, body in re.findall(r"^\| `([^`]+)`[^|]*\| (.*?) \|", table, re.M):
        if first == "lookahead":  # the server's own spec, read from its /version: no fixed body
            continue
        mode = parse_modes([first])[0]
        if mode.speculation is not None:
            sent = f'"speculation": {json.dumps(mode.speculation)}'
        elif mode.payload() is None:
            sent = "no `lookahead` field"
        else:
            sent = f'"lookahead": {json.dumps(mode.payload())}'
        if sent not in body:
            bad.append(f"{first}: the table says {body!r}, the code sends {sent}")
    assert not bad, "\n".join(bad)


def shown_validate_runs():
    """``$ trtlade validate-config ...`` lines shown with their output, where every path they name exists."""
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            for command, output in re.findall(r"^\$ (trtlade validate-config [^\n]*)\n(.*?)(?=^\$ |\Z)", body,
                                              re.S | re.M):
                paths = [a for a in command.split()[2:] if not a.startswith("-")]
                if all((ROOT / a).exists() for a in paths):
                    yield pytest.param(command, output, id=f"{rel(page)}: {command[:60]}")


@pytest.mark.parametrize("command, output", list(shown_validate_runs()))
def test_the_validate_output_a_page_shows_is_what_it_prints(command, output):
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "200"}
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    printed = {line.strip() for line in (result.stdout + result.stderr).splitlines()}
    shown = [line.strip() for line in output.splitlines()
             if line.strip() and "..." not in line and not line.startswith(("$", "1", "0"))]
    missing = [line for line in shown if line not in printed]
    assert shown and not missing, f"{command}: shown but not printed:\n" + "\n".join(missing)


def test_every_install_extra_the_docs_and_hints_name_exists():
    """``.[x]`` / ``trtlade[x]`` in the docs and the code's hints name extras pyproject.toml declares."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    block = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+) = \[", block, re.M))
    assert {"reference", "test", "trtllm", "trtllm-engine"} <= extras, extras
    sources = [*PAGES, *(ROOT / "trtlade").rglob("*.py"), ROOT / "scripts" / "setup.sh"]
    bad = []
    for source in sources:
        text = source.read_text(errors="ignore")
        for name in re.findall(r"(?:\.|trtlade)\[([a-z][a-z0-9-]*(?:,[a-z][a-z0-9-]*)*)\]", text):
            bad += [f"{rel(source)}: [{x}]" for x in name.split(",") if x not in extras]
    assert not bad, "extras that pyproject.toml does not declare:\n" + "\n".join(sorted(set(bad)))

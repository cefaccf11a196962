"""`trtlade --help`, `spec` and `validate-config` stay light: they never import heavy libraries.

Each case runs the Typer app in-process inside a fresh interpreter, then inspects sys.modules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "tensorrt_llm", "pandas", "matplotlib", "fastapi", "uvicorn", "httpx")

_PROBE = """
import json, sys
from trtlade.cli.main import app
args = json.loads(sys.argv[1])
try:
    app(args, prog_name="trtlade")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print("PROBE" + json.dumps({"code": code, "heavy": heavy}))
"""


def _probe(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(HEAVY)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][len("PROBE"):])


@pytest.mark.parametrize("args, code", [
    (["--help"], 0),
    (["spec", "4,2,4"], 0),
    (["spec", "4,0,4"], 1),
    (["validate-config", "configs/"], 0),
    (["validate-config", "--format", "json", "--engine-dir", "tests/data/engines/qwen3-8b-draft39",
      "configs/qwen3-8b-lookahead-424.yml", "tests/data/grps/inference_qwen3.yml"], 1),
    (["config", "schema"], 0),
])
def test_light_commands_import_no_heavy_library(args, code):
    result = _probe(args)
    assert result["code"] == code
    assert result["heavy"] == [], f"{args} imported {result['heavy']}"


def test_the_probe_can_fail():
    """The probe sees a heavy import when one happens (so the test above can fail)."""
    proc = subprocess.run([sys.executable, "-c", "import sys, json; import pandas; "
                           "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas'}))"],
                          capture_output=True, text=True, timeout=120)
    assert "pandas" in proc.stdout


@pytest.mark.parametrize("args, refused", [
    (["bench", "--max-tokens", "10", "--max-tokens", "20"], "--max-tokens is given twice"),
    (["bench", "--ignore-eos", "--no-ignore-eos"], "--ignore-eos/--no-ignore-eos is given twice"),
    (["report", "compare", "a", "b", "-o", "x.md", "--output", "y.md"], "is given twice"),
    (["spec", "4,2,4", "--json", "--json"], None),                    # a flag given twice the same way says one thing
    (["bench", "-c", "1", "-c", "4", "--base-url", "http://127.0.0.1:9"], None),   # options that collect may repeat
])
def test_an_option_that_takes_one_value_given_twice_is_refused_not_the_last_taken(args, refused):
    """Click keeps the last of a repeated option without a word: `--max-tokens 10 --max-tokens 20` ran 20."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "trtlade", *args], capture_output=True, text=True, timeout=60)
    if refused is None:
        assert "given twice" not in result.stderr, result.stderr
    else:
        assert result.returncode == 2 and "error: " in result.stderr and refused in result.stderr, result.stderr

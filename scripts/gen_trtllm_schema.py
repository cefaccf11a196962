"""Write trtlade's TensorRT-LLM schema tables from upstream's ``tensorrt_llm/llmapi/llm_args.py``.

    .venv/bin/python scripts/gen_trtllm_schema.py PATH/TO/llm_args.py [--version 1.2.0rc2] [--label TEXT]

Reads the source with ``ast`` (never imports it: it needs torch, CUDA and TensorRT-LLM's bindings), and
writes ``trtlade/data/trtllm_schema/<version>.json``: every pydantic model and enum, each field's type,
``Literal`` values, bounds, default, alias and status, each class's ``extra`` policy, the validators each
declares, the ``decoding_type`` registry of ``DecodingBaseConfig.from_dict``, and the commit it was read at.
The source's header comments (``# commit: ...``, ``# version: ...``, ``# dated-by: ...``) name its commit and
release; ``--version`` / ``--label`` / ``--dated-by`` give them when the source does not. Checkout a release
tag of NVIDIA/TensorRT-LLM and pass its file to add a release line; the reference page
docs/reference/trtllm-serve-schema.md is then rewritten by ``scripts/gen_reference.py``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trtlade.trtllm.llm_args_source import parse_source  # noqa: E402

OUT = ROOT / "trtlade" / "data" / "trtllm_schema"
#: ``StrictBaseModel`` lives in tensorrt_llm/llmapi/utils.py: ``model_config = ConfigDict(extra="forbid")``.
STRICT_BASE = {"bases": ["BaseModel"], "config": {"extra": "forbid"}, "fields": {}, "classvars": {},
               "validators": [], "line": None, "source": "tensorrt_llm/llmapi/utils.py"}


def registry(source: str, table: dict) -> dict[str, str]:
    """``decoding_type`` string -> class: the dict literal in ``DecodingBaseConfig.from_dict`` when the source
    has one, else each ``DecodingBaseConfig`` subclass's ``decoding_type`` Literal or ClassVar."""
    classes = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "DecodingBaseConfig"]
    for node in (n for c in classes for n in c.body):
        if isinstance(node, ast.FunctionDef) and node.name == "from_dict":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict) and sub.keys and all(
                        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in sub.keys) and all(
                        isinstance(v, ast.Name) for v in sub.values):
                    return {k.value: v.id for k, v in zip(sub.keys, sub.values)}  # type: ignore[union-attr]
    out = {}
    for name in table["models"]:
        if _derives(table, name, "DecodingBaseConfig") and name != "DecodingBaseConfig":
            model = table["models"][name]
            field = model["fields"].get("decoding_type")
            if field and field["type"]["kind"] == "literal":
                out[field["type"]["values"][0]] = name
            elif isinstance(model["classvars"].get("decoding_type"), str):
                out[model["classvars"]["decoding_type"]] = name
    return out


def _derives(table: dict, name: str, base: str) -> bool:
    model = table["models"].get(name)
    if model is None:
        return False
    return base in model["bases"] or any(_derives(table, b, base) for b in model["bases"])


def build(source: str, version: str | None, label: str | None, dated_by: str | None,
          content_id: str | None = None) -> dict:
    table = parse_source(source)
    table["models"].setdefault("StrictBaseModel", STRICT_BASE)
    table["version"] = version or table.get("version")
    if not table["version"] or table["version"] == "unknown":
        raise SystemExit("the source names no version: pass --version (the release line it belongs to)")
    table["label"] = label or table["version"]
    if dated_by:
        table["dated_by"] = dated_by
    if table.get("commit") in (None, "unknown"):
        table["commit"] = None  # the stored copy names no commit: cite it by its content id
        if not content_id:
            raise SystemExit("the source names no commit: pass --content-id (the stored copy it was read from)")
        table["content_id"] = content_id
    table["from_dict"] = registry(source, table)
    table["generated_by"] = "scripts/gen_trtllm_schema.py"
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="upstream tensorrt_llm/llmapi/llm_args.py (a release's)")
    ap.add_argument("--version", help="the release it belongs to, when its header does not say (e.g. 1.3.0rc0)")
    ap.add_argument("--label", help="how messages name it (default: the version)")
    ap.add_argument("--dated-by", help="how the release was established, when the header does not say")
    ap.add_argument("--content-id", help="where the stored copy names no commit: the copy it was read from")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    table = build(args.source.read_text(encoding="utf-8"), args.version, args.label, args.dated_by, args.content_id)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{table['version']}.json"
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{path}: {len(table['models'])} models, {len(table['enums'])} enums, "
          f"{sum(len(m['fields']) for m in table['models'].values())} fields, commit {table.get('commit')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

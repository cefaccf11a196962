"""grps's ``server.yml`` (the server config beside the ``inference*.yml`` files in grps_trtllm's
``conf/``): recognised, and checked for what matters to lookahead, never failing a folder over it.

    interface: {framework: http, host: 0.0.0.0, port: 9997}
    max_connections: 1000     # concurrent connections
    max_concurrency: 32       # requests grps runs in parallel; more are queued by grps
    gpu: {devices: [0]}
    log: {log_dir: ./logs}

``max_concurrency`` is what reaches the engine at once. Against the engine's ``max_batch_size`` (from
``--engine-dir``, else the ``gpt_model_path`` of an ``inference*.yml`` beside it, when that engine is
here): above it, the executor queues the extra requests itself (a warning: grps's own limit is not the
one in force); below it, the engine's batch is never full (a note). With lookahead, every request in
the batch costs ``max_draft_len + 1`` tokens per step, so the batch bound is the lookahead bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

from trtlade.config.loader import YamlDocument
from trtlade.diagnostics import Diagnostic
from trtlade.trtllm.engine_config import EngineConfigError, read_engine_config

__all__ = ["is_grps_server_config", "check_grps_server"]

_SERVER_KEYS = ("interface", "max_connections", "max_concurrency", "gpu", "log")


def is_grps_server_config(data: Any) -> bool:
    """A mapping with grps's ``interface`` section (framework / host / port) and no ``models`` list.

    >>> is_grps_server_config({"interface": {"framework": "http", "port": 9997}, "max_concurrency": 32})
    True
    >>> is_grps_server_config({"lookahead": {"spec": "4,2,4"}})
    False
    """
    if not isinstance(data, dict) or "models" in data or "lookahead" in data:
        return False
    interface = data.get("interface")
    return isinstance(interface, dict) and bool({"framework", "port", "host"} & set(interface))


def _sibling_engine(doc: YamlDocument) -> Optional[Path]:
    """The engine of an ``inference*.yml`` next to this file, when it is here."""
    folder = Path(doc.file).parent
    for path in sorted(folder.glob("inference*.y*ml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):  # a stray file (grps's own conf/inference.yml is a symlink's text in a copy)
            continue
        for model in data.get("models") or []:
            args = (model or {}).get("inferer_args") if isinstance(model, dict) else None
            engine = (args or {}).get("gpt_model_path") if isinstance(model, dict) else None
            if isinstance(engine, str) and (Path(engine) / "config.json").is_file():
                return Path(engine)
    return None


def check_grps_server(doc: YamlDocument, *, engine_dir: Optional[Path] = None) -> list[Diagnostic]:
    """The lookahead-relevant checks of a grps server.yml: warnings and notes only."""
    data = doc.data
    out: list[Diagnostic] = []
    concurrency = data.get("max_concurrency")
    loc = ("max_concurrency",)
    if concurrency is None:
        return [doc.diagnostic("info", "no max_concurrency: grps runs every accepted request at once", loc=(),
                               code="grps-server-concurrency",
                               hint="set max_concurrency to the engine's max_batch_size")]
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        return [doc.diagnostic("warning", f"max_concurrency is {concurrency!r}, not a whole number >= 1", loc=loc,
                               code="grps-server-concurrency", hint="e.g. max_concurrency: 32")]
    engine = engine_dir or _sibling_engine(doc)
    if engine is None:
        return [doc.diagnostic("info", f"max_concurrency {concurrency} not checked: no engine here (pass "
                               "--engine-dir, or keep the inference*.yml whose gpt_model_path exists beside it)",
                               loc=loc, code="grps-server-no-engine")]
    try:
        config = read_engine_config(engine)
    except EngineConfigError as exc:
        return [doc.diagnostic("info", f"max_concurrency {concurrency} not checked: {exc}", loc=loc,
                               code="grps-server-no-engine")]
    batch = int(config.max_batch_size)
    if concurrency > batch:
        out.append(doc.diagnostic(
            "warning", f"max_concurrency {concurrency} is above the engine's max_batch_size {batch}: the "
                       f"executor queues the other {concurrency - batch} itself, so grps's limit is not the one "
                       "in force", loc=loc, code="grps-server-concurrency",
            hint=f"max_concurrency: {batch} (or rebuild the engine with --max_batch_size {concurrency})"))
    elif concurrency < batch:
        out.append(doc.diagnostic(
            "info", f"max_concurrency {concurrency} is below the engine's max_batch_size {batch}: the engine's "
                    "batch is never full", loc=loc, code="grps-server-concurrency"))
    return out

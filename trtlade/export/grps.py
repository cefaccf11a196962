"""``trtlade export grps``: a grps_trtllm inference yml from a bundle.

grps_trtllm reads ``lookahead_decoding: {window_size, ngram_size, verification_set_size}`` from the
model's ``inferer_args`` and sets the executor's lookahead config from it; it never passes a
per-request lookahead config, so every request runs with the bundle's (W,N,G), and a schedule in the
bundle's config cannot apply there (the export says so in the file). The output is checked with
trtlade's own grps checks (the ones ``trtlade validate-config`` runs) against the bundle's engine
before it is written.
"""

from __future__ import annotations

import yaml

from trtlade.config.grps import check_grps
from trtlade.config.loader import parse_yaml
from trtlade.export.common import ExportError, ExportSource

__all__ = ["grps_inference_yml"]


def grps_inference_yml(src: ExportSource, *, model_name: str = "trtllm_model") -> str:
    """The inference yml text for ``src`` (validated against its engine)."""
    cfg = src.config
    spec = cfg.lookahead.spec
    args = {
        "tokenizer_type": "huggingface",
        "tokenizer_path": f"{src.tokenizer}/",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": f"{src.engine_dir}/",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": cfg.serve.kv_cache_free_gpu_memory_fraction or 0.9,
        "exclude_input_in_output": True,
        "decoding_mode": None,
    }
    if not spec.is_autoregressive:
        args["lookahead_decoding"] = {"window_size": spec.window_size, "ngram_size": spec.ngram_size,
                                      "verification_set_size": spec.verification_set_size}
    doc = {
        "models": [{"name": model_name, "version": "1.0.0", "device": "auto", "inferer_type": "customized",
                    "inferer_name": "trtllm_inferer", "inferer_path": None, "inferer_args": args,
                    "converter_type": "none", "converter_name": None, "converter_path": None,
                    "converter_args": None}],
        "dag": {"type": "sequential", "name": "trtlade_dag",
                "nodes": [{"name": "node-1", "type": "model", "model": f"{model_name}-1.0.0"}]},
    }
    schedule = cfg.lookahead.lookahead_schedule
    header = [
        f"# grps_trtllm inference config written by `trtlade export grps` from the bundle {src.bundle.root}",
        f"# engine: {src.engine_dir} (max_batch_size {src.engine.max_batch_size}, max_draft_len "
        f"{src.engine.max_draft_len}); lookahead ({spec}) for every request: grps passes no per-request "
        "lookahead config",
    ]
    if schedule is not None:
        header.append(f"# the bundle's lookahead.schedule ({schedule}) does not apply under grps: it runs ({spec})")
    text = "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    errors = [d for d in check_grps(parse_yaml(text, "<export>"), engine_dir=src.bundle.engine_dir)
              if d.severity == "error"]
    if errors:
        raise ExportError("the grps config would not pass validate-config: "
                          + "; ".join(d.message for d in errors[:3]), "rebuild the bundle", where=str(src.bundle.root))
    return text

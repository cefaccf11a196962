"""More of TensorRT-LLM's validators as rules: the tokenizer, LoRA, KV connectors, Ray placement, sleep, the MoE load
balancer, calibration and encoder CUDA graphs, and what upstream changes or only logs at start.

Each rule mirrors ``tensorrt_llm/llmapi/llm_args.py`` at NVIDIA/TensorRT-LLM@a1a20970 (the 1.3 line), the validator
it names. Where a validator also reads what a file cannot say (a file on the server, its environment, its GPU, a
registry in another upstream file), the rule checks what the file decides and :data:`IN_PART` says what it leaves;
the reference lists both.

Worked example (a YAML file cannot carry a Ray ``PlacementGroup``, so upstream refuses any it is given)::

    >>> from trtlade.yaml_doc import parse_yaml
    >>> from trtlade.trtllm.llm_args_check import check_llm_args
    >>> def said(text):
    ...     return [(d.severity, d.path) for d in check_llm_args(parse_yaml(text, "f.yml"), "1.3.0")]
    >>> said("orchestrator_type: ray\\nray_placement_config: {placement_groups: [g], placement_bundle_indices: [[0]]}")
    [('error', 'ray_placement_config.placement_groups')]
    >>> said("layer_wise_benchmarks_config: {calibration_mode: COLLECT}")
    [('error', 'layer_wise_benchmarks_config.calibration_file_path')]
    >>> said("max_batch_size: null")
    [('warning', 'max_batch_size')]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

from trtlade.trtllm.llm_args_rules import LINE_1_3, Context, Finding, _bool, _int, rule

__all__ = ["IN_PART", "RESTORE_MODES"]

#: Validators mirrored here in part (llm_args.py@a1a20970) -> what the rule does not reproduce.
IN_PART = {
    ("BaseLlmArgs", "validate_and_init_tokenizer"): (
        LINE_1_3, "loading the tokenizer: its files or the hub, custom_tokenizer's import"),
    ("BaseLlmArgs", "validate_lora_config_consistency"): (
        LINE_1_3, "LoraConfig's own defaults, in another upstream file: only the values a file gives are read"),
    ("KvCacheConnectorConfig", "_resolve_preset"): (
        LINE_1_3, "whether `connector` names a preset: the connectors' registry is another upstream file (a name "
        "outside the three known is a warning)"),
    ("RayPlacementConfig", "validate_ray_placement"): (
        LINE_1_3, "empty placement lists, refused only where Ray is not installed: a warning"),
    ("TorchLlmArgs", "validate_load_balancer"): (
        LINE_1_3, "a load balancer file as the server finds it: it is read from the current folder here, from the "
        "server's there"),
    ("TorchLlmArgs", "validate_cute_dsl_bf16"): (
        LINE_1_3, "the GPU's SM, read at start (a note), and the flags it turns on with pipeline_parallel_size > 1 "
        "on SM100/SM103"),
    ("TorchLlmArgs", "validate_mx_config"): (LINE_1_3, "MODEL_EXPRESS_URL in the server's environment"),
}

#: ``RestoreMode``'s names as ``SleepConfig.restore_modes`` declares them (llm_args.py@a1a20970)
RESTORE_MODES = ("NONE", "MEMSET", "CPU", "PINNED")


def _float(value: Any) -> Optional[float]:
    """A float as pydantic's lax mode reads one (``"2"``, ``false``, ``"nan"``), else None.

    >>> [_float(v) for v in ("2", " 0.5 ", False, "nan", 1, "two", None)]
    [2.0, 0.5, 0.0, nan, 1.0, None, None]
    """
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


# ------------------------------------------------------------------------------------------ the root
@rule("BaseLlmArgs", "validate_and_init_tokenizer", releases=LINE_1_3)
def _tokenizer_hook(block: dict, ctx: Context) -> Iterator[Finding]:
    if _bool(block.get("skip_tokenizer_init", False)) and block.get("post_processor_hook") is not None:
        yield ("post_processor_hook",), (
            "post_processor_hook is not supported together with skip_tokenizer_init: the post-processing hook "
            "operates on detokenized text, which is unavailable when the tokenizer is skipped."), \
            "drop post_processor_hook, or skip_tokenizer_init: false"


@rule("BaseLlmArgs", "validate_lora_config_consistency", releases=LINE_1_3)
def _lora_graphs(block: dict, ctx: Context) -> Iterator[Finding]:
    lora = block.get("lora_config")
    if isinstance(lora, dict) and _bool(lora.get("cuda_graph_specialize_lora", False)) and _bool(
            block.get("enable_attention_dp", False)):
        yield ("lora_config", "cuda_graph_specialize_lora"), \
            "LoRA CUDA graph specialization cannot be used when attention DP is enabled.", \
            "cuda_graph_specialize_lora: false, or enable_attention_dp: false"


@rule("BaseLlmArgs", "validate_lora_config_consistency", severity="warning", releases=LINE_1_3)
def _lora_notes(block: dict, ctx: Context) -> Iterator[Finding]:
    lora = block.get("lora_config")
    if not isinstance(lora, dict):
        return
    no_dirs, no_modules = not lora.get("lora_dir"), not lora.get("lora_target_modules")
    if no_dirs:
        yield ("lora_config", "lora_dir"), "lora_dir is empty, so custom embedding or lm head will not be applied.", \
            "list the adapters' folders in lora_dir, if they carry an embedding or lm head"
    if _bool(block.get("enable_lora", False)):
        yield ("enable_lora",), "enable_lora is ignored when lora_config is provided for pytorch backend.", \
            "drop enable_lora: lora_config turns LoRA on"
    if no_dirs and no_modules:
        yield ("lora_config",), ("Both lora_dir and lora_target_modules are empty, so all LoRA modules will be "
                                 "expected. This will lead to serious memory consumption."), \
            "give lora_dir or lora_target_modules, if every module is not what you mean"


@rule("BaseLlmArgs", "normalize_optional_fields_to_defaults", severity="warning", releases=LINE_1_3)
def _null_sizes(block: dict, ctx: Context) -> Iterator[Finding]:
    defaults = {"max_batch_size": 2048, "max_input_len": 1024, "max_beam_width": 1, "max_num_tokens": 8192}
    for name, default in defaults.items():
        if name in block and block[name] is None:
            yield (name,), f"{name}: null is read as its default, {default}", \
                f"write {name}: {default}, or leave the key out"


@rule("TorchLlmArgs", "sync_quant_config_with_kv_cache_config_dtype", severity="warning", releases=LINE_1_3)
def _kv_quant_sync(block: dict, ctx: Context) -> Iterator[Finding]:
    kv = block.get("kv_cache_config")
    dtype = kv.get("dtype", "auto") if isinstance(kv, dict) else "auto"
    if isinstance(dtype, str) and dtype.lower() not in ("auto", "fp8", "fp8_ds_mla", "nvfp4"):
        yield ("kv_cache_config", "dtype"), (
            f"Cannot sync quant_config.kv_cache_quant_algo with kv_cache_config.dtype of {dtype}: the KV cache's "
            "quantization is left as the checkpoint says"), "auto, fp8, fp8_ds_mla or nvfp4 set it"


@rule("TorchLlmArgs", "validate_cute_dsl_bf16", severity="info", releases=LINE_1_3)
def _cute_dsl(block: dict, ctx: Context) -> Iterator[Finding]:
    flags = ("use_cute_dsl_bf16_bmm", "use_cute_dsl_bf16_gemm")
    for name in flags:
        if _bool(block.get(name, False)):
            yield (name,), (f"{name} is only supported on SM >= 100 (Blackwell or newer): the server refuses to "
                            "start on an older GPU"), f"serve on a Blackwell GPU, or drop {name}"



@rule("TorchLlmArgs", "validate_mx_config", severity="warning", releases=LINE_1_3)
def _mx_ignored(block: dict, ctx: Context) -> Iterator[Finding]:
    mx = block.get("mx_config")
    fmt = block.get("checkpoint_format")
    if fmt is None and block.get("checkpoint_loader") is None:
        fmt = "HF"  # validate_checkpoint_format, before
    if isinstance(mx, dict) and mx.get("server_url") is not None and fmt != "MX":
        yield ("mx_config", "server_url"), (f"mx_config.server_url is set but checkpoint_format is '{fmt}', not "
                                            "'MX'. The MX config will be ignored."), \
            "checkpoint_format: MX enables MX P2P weight transfer"


# ---------------------------------------------------------------------------------------- the MoE load balancer
_BALANCER = {"num_slots", "initial_global_assignments", "layer_updates_per_iter"}


@rule("TorchLlmArgs", "validate_load_balancer", releases=LINE_1_3)
def _load_balancer(block: dict, ctx: Context) -> Iterator[Finding]:
    moe = block.get("moe_config")
    value = moe.get("load_balancer") if isinstance(moe, dict) else None
    where = ("moe_config", "load_balancer")
    if isinstance(value, dict):
        why = _balancer_problem(value)
        if why:
            yield where, f"Failed to load MoE load balancer config: {value} ({why})", _BALANCER_HINT
    elif value == "":
        yield where, "MoE load balancer config file not found: '' (an empty path)", _BALANCER_HINT
    elif isinstance(value, str) and Path(value).is_file():
        yield from _balancer_file(Path(value), where)


@rule("TorchLlmArgs", "validate_load_balancer", severity="warning", releases=LINE_1_3)
def _load_balancer_elsewhere(block: dict, ctx: Context) -> Iterator[Finding]:
    moe = block.get("moe_config")
    value = moe.get("load_balancer") if isinstance(moe, dict) else None
    if isinstance(value, str) and value and not Path(value).is_file():
        what = "is a folder here" if Path(value).is_dir() else "is not found from here"
        yield ("moe_config", "load_balancer"), (
            f"MoE load balancer config file {value!r} {what}: the server reads it at start and refuses to start "
            "where it is not a file"), "check the path where the server runs (relative to its folder)"


_BALANCER_HINT = "a mapping of num_slots (int), initial_global_assignments ({layer: [slots]}), layer_updates_per_iter"


def _balancer_file(path: Path, where: tuple) -> Iterator[Finding]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        data, why = None, f"cannot read it: {type(exc).__name__}"
    else:
        why = _balancer_problem(data) if isinstance(data, dict) else "it does not hold a mapping"
    if why:
        yield where, f"Failed to load MoE load balancer config file: {path} ({why})", _BALANCER_HINT


def _balancer_problem(data: dict) -> str:
    """Why ``MoeLoadBalancerConfig(**data)`` fails ('' where it does not)."""
    extra = sorted(str(k) for k in data if k not in _BALANCER)
    if extra:
        return f"unknown key {extra[0]!r}"
    if data.get("num_slots") is not None and _int(data["num_slots"]) is None:
        return "num_slots is not an integer"
    if "layer_updates_per_iter" in data and _int(data["layer_updates_per_iter"]) is None:
        return "layer_updates_per_iter is not an integer"
    table = data.get("initial_global_assignments")
    if table is not None and not (isinstance(table, dict) and all(
            _int(k) is not None and isinstance(v, list) and all(_int(x) is not None for x in v)
            for k, v in table.items())):
        return "initial_global_assignments is not a mapping of layer to a list of slots"
    return ""


# ------------------------------------------------------------------------------------------ sub-configs
@rule("LayerwiseBenchmarksConfig", "validate_calibration_file_path", releases=LINE_1_3)
def _calibration_file(block: dict, ctx: Context) -> Iterator[Finding]:
    mode = block.get("calibration_mode", "NONE")
    if mode == "COLLECT" and not block.get("calibration_file_path"):
        yield ("calibration_file_path",), f"Expect calibration_file_path not to be empty when work on {mode} mode", \
            "calibration_file_path: the file the calibrator writes"


@rule("MultimodalEncoderCudaGraphConfig", "_normalize", releases=LINE_1_3)
def _encoder_buckets(block: dict, ctx: Context) -> Iterator[Finding]:
    buckets = block.get("buckets")
    for i, pair in enumerate(buckets if isinstance(buckets, list) else ()):
        tokens, contexts = (_int(x) for x in pair) if isinstance(pair, list) and len(pair) == 2 else (None, None)
        if tokens is not None and contexts is not None and tokens < contexts:  # as pydantic reads them ("8", true)
            yield ("buckets", i), "`buckets` entries must have total_tokens >= num_contexts.", \
                f"[total_tokens, num_contexts]: {pair} has fewer tokens than contexts"
            return


@rule("KvCacheConnectorConfig", "_resolve_preset", releases=LINE_1_3)
def _connector(block: dict, ctx: Context) -> Iterator[Finding]:
    if block.get("connector") is not None:
        return  # a preset fills what is not given
    needed = (("connector_module", "connector_module is required (set 'connector' to use a named preset, or provide "
                                   "connector_module explicitly)"),
              ("connector_scheduler_class", "connector_scheduler_class is required"),
              ("connector_worker_class", "connector_worker_class is required"))
    for name, message in needed:
        if block.get(name) is None:
            yield (name,), message, "name a preset in connector (e.g. lmcache), or give the module and both classes"
            return


#: the presets upstream's connectors registry is known to hold (``connectors/registry.py``, another file; llm_args.py
#: @a1a20970 names these three in its telemetry)
KNOWN_CONNECTORS = ("lmcache", "lmcache-mp", "kvbm")


@rule("KvCacheConnectorConfig", "_resolve_preset", severity="warning", releases=LINE_1_3)
def _connector_preset(block: dict, ctx: Context) -> Iterator[Finding]:
    name = block.get("connector")
    if name is not None and name not in KNOWN_CONNECTORS:
        yield ("connector",), (f"connector {name!r} is not a preset this release is known to have "
                               f"({', '.join(KNOWN_CONNECTORS)}): the server refuses an unknown one"), \
            "a preset's name, or connector_module with both classes"


@rule("RayPlacementConfig", "validate_ray_placement", releases=LINE_1_3)
def _ray_groups(block: dict, ctx: Context) -> Iterator[Finding]:
    groups, indices = block.get("placement_groups"), block.get("placement_bundle_indices")
    if (groups is None) != (indices is None):
        yield ("placement_groups" if groups is None else "placement_bundle_indices",), \
            "placement_groups and placement_bundle_indices must be provided together", "give both, or neither"
    elif isinstance(groups, list) and isinstance(indices, list) and len(groups) != len(indices):
        yield ("placement_bundle_indices",), (f"placement_groups length ({len(groups)}) must equal "
                                              f"placement_bundle_indices length ({len(indices)})"), \
            "one list of bundle indices per placement group"
    elif isinstance(groups, list) and groups:
        yield ("placement_groups",), (f"placement_groups[0] must be a Ray PlacementGroup, got "
                                      f"{_python_type(groups[0])}: a file cannot hold one (where Ray is not installed, "
                                      "'Ray must be installed to use `placement_groups`')"), \
            "place the workers from Python (LLM(ray_placement_config=...)), or drop placement_groups"
    share = _float(block.get("per_worker_gpu_share"))
    if share is not None and not 0 < share <= 1.0:  # nan too
        yield ("per_worker_gpu_share",), f"per_worker_gpu_share must be between 0 and 1.0, got {share}", \
            "allowed: 0 < per_worker_gpu_share <= 1"


@rule("RayPlacementConfig", "validate_ray_placement", severity="warning", releases=LINE_1_3)
def _ray_empty(block: dict, ctx: Context) -> Iterator[Finding]:
    if block.get("placement_groups") == [] and block.get("placement_bundle_indices") == []:
        yield ("placement_groups",), "Ray must be installed to use `placement_groups`, even empty ones", \
            "drop both empty lists"


def _python_type(value: Any) -> str:
    """The name Python gives a YAML value's type (``type(v).__name__``)."""
    return type(value).__name__


@rule("SleepConfig", "_validate_restore_modes", releases=LINE_1_3)
def _restore_modes(block: dict, ctx: Context) -> Iterator[Finding]:
    """Each mode is a ``RestoreMode`` name (the table's types refuse a list, null, or a key that is no
    ``ExecutorMemoryType`` value: a mode's type is a runtime enum there, accepted as given)."""
    modes = block.get("restore_modes")
    for key, mode in (modes.items() if isinstance(modes, dict) else ()):
        if not isinstance(mode, str):
            yield ("restore_modes", key), f"invalid restore_mode type: {_python_type(mode)}", \
                f"one of: {', '.join(RESTORE_MODES)}"
        elif mode not in RESTORE_MODES:
            allowed = ", ".join(RESTORE_MODES)
            yield ("restore_modes", key), f"invalid restore_mode: {mode}. Expected one of: {allowed}", \
                "a mode's name, in capitals"


@rule("SleepConfig", "_validate_restore_modes", severity="warning", releases=LINE_1_3)
def _restore_defaults(block: dict, ctx: Context) -> Iterator[Finding]:
    modes = block.get("restore_modes")
    if isinstance(modes, dict) and "kv_cache" not in modes:
        yield ("restore_modes",), ("restore_modes replaces the defaults: kv_cache is restored with the host's default "
                                   "mode (PINNED or CPU), not NONE"), "add kv_cache: NONE to keep its default"


# ------------------------------------------------------------------------------------------ the linear drafters
def _linear(block: dict, ctx: Context) -> Iterator[Finding]:
    total, drafts = block.get("max_total_draft_tokens"), block.get("max_draft_len")
    if total is not None and _int(total) != _int(drafts):
        yield ("max_total_draft_tokens",), (f"max_total_draft_tokens ({total}) is replaced by max_draft_len ({drafts})"
                                            ": this drafter drafts one chain"), "leave max_total_draft_tokens out"


for _cls in ("AutoDecodingConfig", "DFlashDecodingConfig", "DSparkDecodingConfig", "PARDDecodingConfig",
             "UserProvidedDecodingConfig"):
    rule(_cls, "set_max_total_draft_tokens", severity="warning", releases=LINE_1_3)(_linear)

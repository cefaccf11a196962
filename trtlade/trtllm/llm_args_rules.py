"""The validators of TensorRT-LLM's LLM arguments that types cannot say, each as a rule of ours citing its source.

pydantic types and bounds come from the schema table (:mod:`trtlade.trtllm.llm_args_models`); what upstream
checks in ``@field_validator`` / ``@model_validator`` bodies is here. A rule names the upstream class and
validator it mirrors, and runs on a file only where the release's table declares that validator on that
class (or a base of it): a validator a release does not have is not applied to it, one it renamed is found
under its new name. Every validator a table declares and no rule mirrors is listed as not reproduced in
docs/reference/trtllm-serve-schema.md (:func:`coverage`).

Worked example (SA of the newest table: ``validate_sa_config`` refuses only 0 without the global pool)::

    >>> from trtlade.yaml_doc import parse_yaml
    >>> from trtlade.trtllm.llm_args_check import check_llm_args
    >>> def errors(text):
    ...     return [d.message for d in check_llm_args(parse_yaml(text, "f.yml"), "1.3.0") if d.severity == "error"]
    >>> errors("speculative_config: {decoding_type: SA, max_draft_len: 4, max_matching_ngram_size: -2}")
    []
    >>> errors("speculative_config: {decoding_type: SA, max_draft_len: 4, max_matching_ngram_size: 0}")[0][:60]
    'max_matching_ngram_size must be > 0 (fixed ngram) or -1 (lon'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from trtlade.yaml_doc import YamlDocument
from trtlade.diagnostics import Diagnostic

__all__ = ["RULES", "Rule", "run", "decoding_classes", "coverage", "declared_validators"]

#: One finding of a rule: the path below the model's own location, the message, a hint.
Finding = tuple[tuple, str, str]
_SOURCE = "tensorrt_llm/llmapi/llm_args.py"


@dataclass(frozen=True)
class Rule:
    cls: str                 #: the upstream class that declares the validator
    validator: str           #: its name in that class
    check: Callable[[dict, "Context"], Iterator[Finding]]
    severity: str = "error"  #: "warning" for what upstream only logs
    releases: Optional[tuple[str, ...]] = None  #: the release lines whose body it was read from (None: every one)

    def applies_to(self, version: str) -> bool:
        return self.releases is None or version.startswith(self.releases)


#: TorchLlmArgs' default max_batch_size (tensorrt_llm/llmapi/llm_args.py, BaseLlmArgs.max_batch_size), what a file
#: that leaves the key out (or sets it null) runs with
DEFAULT_MAX_BATCH_SIZE = 2048


@dataclass(frozen=True)
class Context:
    """What a rule may read besides its own block: the whole file and the table's release."""

    data: dict
    version: str
    label: str
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    enums: Optional[dict] = None  #: the table's enums (name -> {"members": ...})
    root: str = "TorchLlmArgs"    #: the class the file is checked as (``TrtLlmArgs`` for the engine backend)


RULES: list[Rule] = []
#: The 1.3 line (the table of main@a1a20970): rules read from that body only
LINE_1_3 = ("1.3",)


def rule(cls: str, validator: str, severity: str = "error", releases: Optional[tuple[str, ...]] = None) -> Callable:
    """Register a rule; ``releases``: the release lines (version prefixes) whose validator body it mirrors, where a
    validator of the same name on an older line reads otherwise (or was not read)."""
    def register(fn: Callable[[dict, Context], Iterator[Finding]]) -> Callable:
        RULES.append(Rule(cls, validator, fn, severity, releases))
        return fn
    return register


def decoding_classes(table: Any) -> dict[str, str]:
    """``decoding_type`` -> class name, as the release's ``DecodingBaseConfig.from_dict`` registers them."""
    return dict(table.table.get("from_dict") or {})


def declared_validators(table: dict, cls: str) -> set[tuple[str, str]]:
    """``(declaring class, validator)`` of ``cls`` and its bases in the table."""
    model = table["models"].get(cls)
    if model is None:
        return set()
    out = {(cls, v) for v in model["validators"]}
    for base in model["bases"]:
        out |= declared_validators(table, base)
    return out


def coverage(table: dict) -> dict[tuple[str, str], bool]:
    """Every validator the table declares -> whether a rule here mirrors it (on the table's release)."""
    version = str(table.get("version", ""))
    mirrored = {(r.cls, r.validator) for r in RULES if r.applies_to(version)} | set(BEFORE) | {
        key for key, (releases, _) in WITHOUT_A_RULE.items() if version.startswith(releases)}
    return {(cls, v): (cls, v) in mirrored for cls, model in table["models"].items() for v in model["validators"]}


def run(doc: YamlDocument, table: Any, root: str, data: Optional[dict] = None) -> list[Diagnostic]:
    """Every rule that applies to a model present in the file (``data``: as :func:`prepare` left it), at that
    model's location."""
    data = doc.data if data is None else data
    ctx = Context(data, table.version, table.table.get("label", table.version), enums=table.table.get("enums"),
                  root=root)
    out: list[Diagnostic] = []
    raw = doc.data if isinstance(doc.data, dict) else {}  # as written: the blocks are built before any validator
    for key, message, hint in _empty_blocks(raw, table.version) if root in ("TorchLlmArgs", "LlmArgs") else ():
        out.append(doc.diagnostic("error", f"{message} (update_llm_args_with_extra_dict, TensorRT-LLM {ctx.label})",
                                  loc=(key,), hint=hint, code="trtllm-args-rule"))
    for cls, loc, block in _models_in(table, root, data):
        declared = declared_validators(table.table, cls)
        for r in RULES:
            if (r.cls, r.validator) in declared and r.applies_to(ctx.version):
                for sub, message, hint in r.check(block, ctx):
                    where = loc + sub
                    out.append(doc.diagnostic(r.severity, f"{message} ({r.cls}.{r.validator}, "
                                              f"TensorRT-LLM {ctx.label})", loc=where, hint=hint,
                                              code="trtllm-args-rule"))
    return out


#: The blocks ``update_llm_args_with_extra_dict`` builds from a trtllm-serve file before any validator runs, as
#: ``Class(**value)`` (``speculative_config`` and ``build_config`` on 1.1 and 1.2rc0 through ``from_dict``): its
#: ``field_mapping`` at llm_args.py@fe8770fb and @7b437aaa, in the late-2025 1.2 copy, and @a1a20970 (telemetry_config
#: left out: a1a20970 drops a non-mapping one when the command line set it; multimodal_config too: it reads a null one
#: as {}). Keyed by the table's version.
_MAPPED_BLOCKS = {
    "1.1.0": ("quant_config", "calib_config", "build_config", "decoding_config", "enable_build_cache",
              "speculative_config", "lora_config", "moe_config", "attention_dp_config"),
    "1.2.0": ("quant_config", "calib_config", "build_config", "decoding_config", "enable_build_cache", "lora_config",
              "moe_config", "nvfp4_gemm_config", "attention_dp_config", "kv_cache_config"),
    "1.3.0rc0": ("quant_config", "calib_config", "decoding_config", "lora_config", "moe_config", "nvfp4_gemm_config",
                 "attention_dp_config", "reorder_policy_config", "kv_cache_config", "dwdp_config"),
}
_MAPPED_BLOCKS["1.2.0rc0"] = _MAPPED_BLOCKS["1.1.0"]


def _empty_blocks(data: dict, version: str) -> Iterator[tuple[str, str, str]]:
    """A mapped block left empty (``attention_dp_config:`` with every line under it commented out is null): upstream
    calls ``AttentionDpConfig(**None)`` and the start fails with a TypeError before any validator speaks.

    >>> list(_empty_blocks({"attention_dp_config": None, "kv_cache_config": None}, "1.1.0"))[0][0]
    'attention_dp_config'
    """
    for key in _MAPPED_BLOCKS.get(version, ()):
        if key in data and data[key] is None:
            yield key, (f"{key} is empty (null): TensorRT-LLM builds it with keyword arguments from the file and its "
                        "start fails with a TypeError"), f"give {key} its keys, or remove the {key} line"


def _models_in(table: Any, cls: str, data: Any, loc: tuple = ()) -> Iterator[tuple[str, tuple, dict]]:
    """``(class, loc, block)`` of every model-typed mapping in the file, the root first."""
    from trtlade.trtllm.llm_args_check import _model_of, container_of

    if not isinstance(data, dict):
        return
    yield cls, loc, data
    fields = table.models.fields(cls)
    for key, value in data.items():
        if key == "speculative_config" and isinstance(value, dict) and not loc:
            kind = decoding_classes(table).get(value.get("decoding_type"))
            if kind:
                yield from _models_in(table, kind, value, (key,))
            continue
        entry = fields.get(key)
        sub = _model_of(table, entry["type"], value) if entry else None
        if sub is None:
            continue
        container = container_of(entry["type"])
        if container == "dict" and isinstance(value, dict):  # {name: block}: each block at its name
            for name, item in value.items():
                yield from _models_in(table, sub, item, loc + (key, name))
        elif container == "list" and isinstance(value, list):
            for index, item in enumerate(value):
                yield from _models_in(table, sub, item, loc + (key, index))
        elif container is None:
            yield from _models_in(table, sub, value, loc + (key,))


def _int(value: Any) -> Optional[int]:
    """An integer as pydantic's lax mode reads one (``"4"``, ``"4.0"`` and ``4.0`` are 4), else None.

    >>> [_int(v) for v in ("4", " 4 ", "4.0", "4.", "1_000", 4.0, "4.5", "4e1", None)]
    [4, 4, 4, 4, 1000, 4, None, None, None]
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):  # pydantic-core also drops a fractional part of zeros ("16.0", "16.")
        digits = re.sub(r"^\s*([+-]?[0-9_]+)[.]0*\s*$", r"\1", value)
        try:
            return int(digits.strip())
        except ValueError:
            return None
    return None


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "t", "y")
    return bool(value)


# ------------------------------------------------------------------------------------------ speculation
@rule("DecodingBaseConfig", "validate_draft_len_schedule_and_sort", releases=LINE_1_3)
def _draft_len_schedule(block: dict, ctx: Context) -> Iterator[Finding]:
    """``field_validator('draft_len_schedule')`` (llm_args.py@a1a20970, ``DecodingBaseConfig``): keys >= 1, values
    >= 0, the smallest key maps to max_draft_len, no value above it."""
    items, draft = _schedule(block)
    if items is None or (yield from _schedule_bounds(items)) or draft is None:
        return
    smallest = min(k for k, _ in items)
    first = dict(items)[smallest]
    if first != draft:
        yield ("draft_len_schedule",), (f"draft_len_schedule[{smallest}] must equal max_draft_len because it is the "
                                        f"smallest batch-size key, got {first} with max_draft_len {draft}"), \
            f"draft_len_schedule: {{{smallest}: {draft}, ...}}"
        return
    yield from _schedule_ceiling(items, draft)


@rule("DecodingBaseConfig", "validate_draft_len_schedule_and_sort", releases=("1.2",))
def _draft_len_schedule_1_2(block: dict, ctx: Context) -> Iterator[Finding]:
    """The late-2025 1.2 copy's body: keys >= 1, values >= 0, then batch size 1 must be a key ("All systems can have
    batch_size=1") and map to max_draft_len, no value above it."""
    items, draft = _schedule(block)
    if items is None or (yield from _schedule_bounds(items)):
        return
    where = ("draft_len_schedule",)
    if 1 not in dict(items):
        yield where, ("draft_len_schedule must include batch_size=1. All systems can have batch_size=1. Add "
                      "{1: <max_draft_len>} to your schedule."), \
            f"draft_len_schedule: {{1: {draft if draft is not None else 'max_draft_len'}, ...}}"
    elif draft is not None and dict(items)[1] != draft:
        yield where, (f"draft_len_schedule[1] must equal max_draft_len for consistency. Got schedule[1]="
                      f"{dict(items)[1]}, but max_draft_len={draft}."), f"draft_len_schedule: {{1: {draft}, ...}}"
    elif draft is not None:
        yield from _schedule_ceiling(items, draft)


def _schedule(block: dict) -> tuple[Optional[list[tuple[int, int]]], Optional[int]]:
    """The schedule's ``(batch size, draft length)`` pairs (None: absent, empty, or a type error the schema reports)
    and ``max_draft_len``."""
    schedule = block.get("draft_len_schedule")
    if not isinstance(schedule, dict) or not schedule:
        return None, None
    items = [(_int(k), _int(v)) for k, v in schedule.items()]
    if any(k is None or v is None for k, v in items):
        return None, None
    return items, _int(block.get("max_draft_len"))  # type: ignore[return-value]


def _schedule_bounds(items: list[tuple[int, int]]) -> Iterator[Finding]:
    """Keys >= 1 and values >= 0, the first failure; returns True (``yield from``'s value) when one failed."""
    for batch, length in items:
        if batch < 1 or length < 0:
            said = f"batch size threshold must be >= 1, got {batch}" if batch < 1 else \
                f"draft length must be >= 0, got {length}"
            yield ("draft_len_schedule",), f"draft_len_schedule: {said}", ""
            return True
    return False


def _schedule_ceiling(items: list[tuple[int, int]], draft: int) -> Iterator[Finding]:
    for batch, length in items:
        if length > draft:
            yield ("draft_len_schedule",), (f"draft_len_schedule: all draft lengths must be <= max_draft_len, got "
                                            f"{length} for batch size {batch} with max_draft_len {draft}"), ""
            return


@rule("DecodingBaseConfig", "validate_max_concurrency_and_draft_len_schedule_mutually_exclusive")
def _exclusive(block: dict, ctx: Context) -> Iterator[Finding]:
    if block.get("max_concurrency") is not None and block.get("draft_len_schedule") is not None:
        yield ("max_concurrency",), "max_concurrency and draft_len_schedule are mutually exclusive", \
            "max_concurrency for a simple cutoff, or draft_len_schedule for draft lengths by batch size"


def _draft_len_positive(kind: str) -> Callable[[dict, Context], Iterator[Finding]]:
    def check(block: dict, ctx: Context) -> Iterator[Finding]:
        draft = _int(block.get("max_draft_len"))
        if draft is None or draft <= 0:
            yield (("max_draft_len",) if "max_draft_len" in block else ()), \
                f"max_draft_len must be > 0 for {kind}, got {block.get('max_draft_len')!r}", \
                "e.g. max_draft_len: 4"
    return check


rule("NGramDecodingConfig", "validate_ngram_config")(_draft_len_positive("NGram"))
rule("DraftTargetDecodingConfig", "validate_draft_target_config")(_draft_len_positive("DraftTarget"))


@rule("SADecodingConfig", "validate_sa_config")
def _sa(block: dict, ctx: Context) -> Iterator[Finding]:
    """``SADecodingConfig.validate_sa_config``: 0 refused; with the global pool -1 or [1, 64]; max_draft_len > 0;
    global_pool_size >= 1 and only with the global pool."""
    size = _int(block.get("max_matching_ngram_size", -1))
    if size == 0:
        yield ("max_matching_ngram_size",), \
            "max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match), got 0", \
            "-1 matches the longest earlier suffix"
        return
    if _bool(block.get("enable_global_pool", False)) and size != -1 and not 1 <= (size or 0) <= 64:
        yield ("max_matching_ngram_size",), (f"max_matching_ngram_size must be -1 (longest match) or in [1, 64] "
                                             f"when enable_global_pool is true, got {size}"), ""
        return
    yield from _draft_len_positive("SA")(block, ctx)
    pool = block.get("global_pool_size")
    if pool is not None and not _bool(block.get("enable_global_pool", False)):
        yield ("global_pool_size",), "global_pool_size requires enable_global_pool: true", \
            "add enable_global_pool: true, or drop global_pool_size"


@rule("EagleDecodingConfig", "validate_eagle_config", releases=LINE_1_3)
def _eagle(block: dict, ctx: Context) -> Iterator[Finding]:
    """``EagleDecodingConfig.validate_eagle_config`` (llm_args.py@a1a20970): max_draft_len > 0; a dynamic tree needs
    its top-K > 0 and a ``max_total_draft_tokens``, where given, in [max_draft_len, top-K * max_draft_len]."""
    draft = yield from _eagle_draft(block)
    if draft and _bool(block.get("use_dynamic_tree", False)):
        yield from _dynamic_tree(block, draft, "dynamic_tree_max_topK should be provided, which indicates the number "
                                 "of nodes to expand each time")


@rule("EagleDecodingConfig", "validate_eagle_config", releases=("1.2",))
def _eagle_1_2(block: dict, ctx: Context) -> Iterator[Finding]:
    """The late-2025 1.2 copy's body, in its order: max_draft_len > 0; ``eagle_choices`` excludes
    ``use_dynamic_tree`` and must be a connected tree (``check_eagle_choices``: every path's parent is a path too; an
    empty list fails its ``max()``); a dynamic tree needs its top-K > 0 (max_total_draft_tokens is set from
    max_draft_len there, whatever the file says)."""
    draft = yield from _eagle_draft(block)
    dynamic, choices = _bool(block.get("use_dynamic_tree", False)), block.get("eagle_choices")
    if not draft:
        return
    if choices is not None and dynamic:
        yield ("eagle_choices",), "If eagle_choices is provided, use_dynamic_tree should be False", \
            "a static tree (eagle_choices) or a dynamic one (use_dynamic_tree), not both"
    elif choices is not None and (broken := _unconnected_choice(choices)):
        yield ("eagle_choices",), broken, "list every path's parent too, e.g. [[0], [1], [0, 0]]"
    elif dynamic:
        yield from _dynamic_tree(block, draft, "dynamic_tree_max_topK should be provided, which indicates the number "
                                 "of nodes to expand each time", total=False)


def _eagle_draft(block: dict) -> Iterator[Finding]:
    """``if self.max_draft_len is None or self.max_draft_len == 0: raise``; returns max_draft_len (0 when refused)."""
    draft = _int(block.get("max_draft_len"))
    if draft is None or draft == 0:
        yield ("max_draft_len",), "max_draft_len must be > 0 for Eagle", "the number of drafter layers, e.g. 3"
        return 0
    return draft


def _unconnected_choice(choices: Any) -> str:
    """``check_eagle_choices`` (the late-2025 1.2 copy): the paths deduplicated and sorted by (length, path), each
    longer than one needs its parent among them (an assert); "" when it holds or the type is the schema's to refuse.

    >>> _unconnected_choice([[0, 0], [1]]), _unconnected_choice([[0], [1], [0, 0]])
    ('Error: choice [0, 0] is not connected', '')
    """
    if not isinstance(choices, list) or not all(isinstance(c, list) for c in choices):
        return ""
    paths = {tuple(_int(x) for x in c) for c in choices}
    if any(None in p for p in paths):
        return ""
    if not paths:
        return "eagle_choices is empty: check_eagle_choices takes the max() of no paths (ValueError)"
    for path in sorted(paths, key=lambda p: (len(p), p)):
        if len(path) > 1 and path[:-1] not in paths:
            return f"Error: choice {list(path)} is not connected"
    return ""


def _dynamic_tree(block: dict, draft: int, missing: str, total: bool = True) -> Iterator[Finding]:
    """A dynamic tree's top-K > 0, then (``total``, 1.3) ``max_total_draft_tokens`` where given in [max_draft_len,
    top-K * max_draft_len] (absent: that product)."""
    top = _int(block.get("dynamic_tree_max_topK"))
    if top is None or top <= 0:
        yield ("dynamic_tree_max_topK",), missing, "e.g. dynamic_tree_max_topK: 4"
        return
    given = _int(block.get("max_total_draft_tokens"))
    if total and block.get("max_total_draft_tokens") is not None and given is not None and \
            not draft <= given <= top * draft:
        yield ("max_total_draft_tokens",), (f"max_total_draft_tokens ({given}) must be in [max_draft_len ({draft}), "
                                            f"dynamic_tree_max_topK * max_draft_len ({top * draft})]"), \
            f"leave it out for {top * draft} (dynamic_tree_max_topK * max_draft_len)"


@rule("EagleDecodingConfig", "validate_speculative_model")
def _eagle_model(block: dict, ctx: Context) -> Iterator[Finding]:
    if block.get("speculative_model") is None and block.get("speculative_model_dir") is None:
        yield (), "Draft model must be provided for EAGLE (speculative_model)", \
            "speculative_model: the Eagle3 draft checkpoint's folder or Hugging Face id"


@rule("DraftTargetDecodingConfig", "validate_draft_target_config")
def _draft_target_model(block: dict, ctx: Context) -> Iterator[Finding]:
    if _int(block.get("max_draft_len")) and block.get("speculative_model") is None \
            and block.get("speculative_model_dir") is None:
        yield (), "speculative_model must be specified for DraftTarget", ""


@rule("MTPDecodingConfig", "set_max_total_draft_tokens", releases=LINE_1_3)
def _mtp(block: dict, ctx: Context) -> Iterator[Finding]:
    """``MTPDecodingConfig.set_max_total_draft_tokens`` (llm_args.py@a1a20970; the 1.2 copy's only copies
    ``num_nextn_predict_layers`` over): max_draft_len, where given, > 0; a dynamic tree needs max_draft_len, a top-K
    > 0 and a ``max_total_draft_tokens``, where given, in [max_draft_len, top-K * max_draft_len]."""
    draft = _int(block.get("max_draft_len"))
    if draft is not None and draft <= 0:
        yield ("max_draft_len",), "max_draft_len must be > 0 for MTP", ""
    elif _bool(block.get("use_dynamic_tree", False)) and block.get("max_draft_len") is None:
        yield ("use_dynamic_tree",), "max_draft_len must be set when use_dynamic_tree is True", \
            "max_draft_len: the MTP draft depth, e.g. 3"
    elif _bool(block.get("use_dynamic_tree", False)) and draft is not None:
        yield from _dynamic_tree(block, draft, "dynamic_tree_max_topK must be > 0 when use_dynamic_tree is True")


@rule("TorchLlmArgs", "validate_speculative_config")
def _speculation_root(block: dict, ctx: Context) -> Iterator[Finding]:
    """``TorchLlmArgs.validate_speculative_config``, the parts that read no checkpoint: rejection sampling set
    explicitly on a drafter without a rejection path, or beside an SA enhancer (``sa_config``); SA's
    ``global_pool_size`` below ``max_batch_size``; PARD / DFlash / DSpark ``max_draft_len`` > 0."""
    spec = block.get("speculative_config")
    if not isinstance(spec, dict):
        return
    kind = spec.get("decoding_type")
    where = ("speculative_config",)
    reasons = _rejection_refusals(spec, block) if "use_rejection_sampling" in spec and _bool(
        spec["use_rejection_sampling"]) else []
    if reasons:
        yield where + ("use_rejection_sampling",), ("use_rejection_sampling=True is not supported for this "
                                                    f"configuration: {'; '.join(reasons)}."), \
            "drop use_rejection_sampling (where it is not supported it is off unless set)"
    if kind == "SA" and spec.get("global_pool_size") is not None:
        pool = _int(spec.get("global_pool_size"))
        given = block.get("max_batch_size")  # null is the default again (normalize_optional_fields_to_defaults)
        batch = _int(given if given is not None else ctx.max_batch_size)
        if pool is not None and batch is not None and pool < batch:
            yield where + ("global_pool_size",), f"global_pool_size ({pool}) must be >= max_batch_size ({batch})", \
                f"global_pool_size: {batch} or more (or lower max_batch_size)"
    if kind in ("PARD", "DFlash", "DSpark") and not _int(spec.get("max_draft_len")):
        yield where + ("max_draft_len",), f"{kind} max_draft_len must be > 0", ""


def _rejection_refusals(spec: dict, block: dict) -> list[str]:
    """Why an explicit ``use_rejection_sampling: true`` is refused (``validate_speculative_config``'s reasons, in its
    order, the ones the file decides; that a one-model MTP checkpoint has several MTP layers, which makes it vanilla
    MTP, is not read here)."""
    kind, reasons = spec.get("decoding_type"), []
    if kind in _NO_REJECTION_PATH:
        reasons.append(f"spec mode {kind} is not a supported rejection-sampling path (supported: the Eagle3 one-model "
                       "path, vanilla MTP, PARD, DFlash, and DraftTarget one-model)")
    if spec.get("sa_config") is not None:
        reasons.append("SA (sa_config) is active")
    top = _int(spec.get("dynamic_tree_max_topK")) or 0
    if _bool(spec.get("use_dynamic_tree", False)) and top > 32:
        reasons.append(f"dynamic_tree_max_topK={top} exceeds the dynamic-tree rejection kernel limit of 32 tried "
                       "siblings per level")
    if kind in ("PARD", "DFlash", "DSpark") or (kind == "MTP" and _bool(spec.get("use_mtp_vanilla", False))):
        if _bool(spec.get("use_relaxed_acceptance_for_thinking", False)):
            reasons.append("relaxed-thinking acceptance is enabled")
        if (_int(block.get("context_parallel_size", 1)) or 1) > 1:
            reasons.append("context parallelism is active (the draft path resolves only the global argmax, not full "
                           "distributions)")
        if block.get("guided_decoding_backend") is not None:
            reasons.append("guided decoding is enabled")
    return reasons


#: drafters with no rejection-sampling path (``validate_speculative_config``'s ``is_supported``; ``Eagle`` is turned
#: into Eagle3 before that test, llm_args.py@a1a20970, so it has one).
_NO_REJECTION_PATH = ("NGram", "SA", "AUTO", "User_Provided", "SaveState", "UserProvided", "Lookahead", "Medusa")


@rule("BaseLlmArgs", "validate_speculative_config")
def _speculation_base(block: dict, ctx: Context) -> Iterator[Finding]:
    """1.1 / 1.2rc0 (``BaseLlmArgs.validate_speculative_config``, llm_args.py@fe8770fb and @7b437aaa): first the
    drafter's ``supports_backend`` (:data:`SUPPORTS_BACKEND_1_1`), then asserts on the drafter's block. NGram:
    ``max_draft_len > 0 and max_matching_ngram_size > 0``, the latter's default being 0 there (a block without it
    fails); Eagle and DraftTarget: ``max_draft_len > 0`` and a ``speculative_model_dir``;
    MTP: ``num_nextn_predict_layers > 0``; Medusa: ``max_draft_len > 0``."""
    spec = block.get("speculative_config")
    refused = list(_unsupported_backend(block, ctx, SUPPORTS_BACKEND_1_1))
    if not isinstance(spec, dict) or refused:
        yield from refused  # upstream checks the backend first, and raises
        return
    kind, where = spec.get("decoding_type"), ("speculative_config",)
    draft = _int(spec.get("max_draft_len"))
    if kind in ("NGram", "Eagle", "Draft_Target", "DraftTarget", "Medusa") and (draft is None or draft <= 0):
        yield where + ("max_draft_len",), f"{kind} needs max_draft_len > 0, got {spec.get('max_draft_len')!r}", \
            "max_draft_len: 4 (the most draft tokens a step)"
    if kind == "NGram":
        size = _int(spec.get("max_matching_ngram_size", 0))
        if size is None or size <= 0:
            said = "absent (its default here is 0)" if "max_matching_ngram_size" not in spec else repr(
                spec["max_matching_ngram_size"])
            yield where + ("max_matching_ngram_size",), f"NGram needs max_matching_ngram_size > 0, got {said}", \
                "max_matching_ngram_size: 2 (the longest n-gram it matches)"
    if kind in ("Eagle", "Draft_Target", "DraftTarget") and spec.get("speculative_model_dir") is None:
        yield where + ("speculative_model_dir",), f"{kind} needs speculative_model_dir (the draft model's weights)", \
            "speculative_model_dir: /path/to/draft/model"
    if kind == "MTP":
        layers = _int(spec.get("num_nextn_predict_layers", 1))
        if layers is None or layers <= 0:
            yield where + ("num_nextn_predict_layers",), "MTP needs num_nextn_predict_layers > 0", ""


def _refuses_torch(backend: Optional[str]) -> bool:
    return backend not in ("pytorch", "_autodeploy")


def _pytorch_only(backend: Optional[str]) -> bool:
    return backend == "pytorch"


def _torch_only(backend: Optional[str]) -> bool:
    return backend in ("pytorch", "_autodeploy")


#: ``supports_backend`` of each drafter class that overrides ``DecodingBaseConfig``'s (which returns True), by the
#: file's ``decoding_type``, at llm_args.py@fe8770fb (1.1) and @7b437aaa (1.2rc0): Medusa and Lookahead refuse
#: pytorch and _autodeploy; NGram, DraftTarget, MTP and AUTO take pytorch only (Eagle, UserProvided, SaveState: any).
SUPPORTS_BACKEND_1_1: dict[str, Callable[[Optional[str]], bool]] = {
    "Medusa": _refuses_torch, "Lookahead": _refuses_torch, "NGram": _pytorch_only, "DraftTarget": _pytorch_only,
    "MTP": _pytorch_only, "AUTO": _pytorch_only}
#: The same in the late-2025 1.2 copy: Draft_Target also takes _autodeploy, PARD takes pytorch only. On 1.3
#: (llm_args.py@a1a20970) every drafter takes pytorch, the only backend TorchLlmArgs has: nothing to refuse.
SUPPORTS_BACKEND_1_2 = {**{k: v for k, v in SUPPORTS_BACKEND_1_1.items() if k != "DraftTarget"},
                        "Draft_Target": _torch_only, "PARD": _pytorch_only}


def _unsupported_backend(block: dict, ctx: Context, supports: dict) -> Iterator[Finding]:
    """``if not self.speculative_config.supports_backend(self.backend): raise ValueError(...)``, the first check of
    ``validate_speculative_config``. ``self.backend``: under ``TorchLlmArgs`` the file's, else ``pytorch``
    (``init_backend``, or the ``Literal``'s default); under ``TrtLlmArgs`` none (trtllm-serve's ``launch_server`` pops
    it before ``LLM(**llm_args)``, tensorrt_llm/commands/serve.py@00209af1; a ``tensorrt`` there reads the same)."""
    spec = block.get("speculative_config")
    kind = spec.get("decoding_type") if isinstance(spec, dict) else None
    engine = ctx.root == "TrtLlmArgs"
    backend = None if engine else (block.get("backend") if block.get("backend") is not None else "pytorch")
    if kind not in supports or supports[kind](backend):
        return
    if engine:
        yield ("speculative_config", "decoding_type"), (f"Speculation type {kind} does not support the "
                                                        "TensorRT-engine backend (TrtLlmArgs)"), \
            f"{kind} runs on the PyTorch backend: drop backend: tensorrt (and --backend tensorrt)"
    else:
        yield ("speculative_config", "decoding_type"), f"Speculation type {kind} does not support backend {backend}", \
            f"{kind} runs only on the TensorRT-engine backend: backend: tensorrt, with a trtllm-build engine"


@rule("TorchLlmArgs", "validate_speculative_config", releases=("1.2",))
def _speculation_backend_1_2(block: dict, ctx: Context) -> Iterator[Finding]:
    """The late-2025 1.2 copy's ``TorchLlmArgs.validate_speculative_config``: the drafter's backend first (its other
    checks, PARD's ``max_draft_len > 0`` and the Eagle -> Eagle3 conversion, are the 1.3 rule's or the drafter's)."""
    yield from _unsupported_backend(block, ctx, SUPPORTS_BACKEND_1_2)


@rule("TrtLlmArgs", "validate_speculative_config", releases=("1.2",))
def _speculation_engine_1_2(block: dict, ctx: Context) -> Iterator[Finding]:
    """The late-2025 1.2 copy's ``TrtLlmArgs.validate_speculative_config``, in its order: the drafter's backend;
    Eagle3 and PARD refused (PyTorch backend only); Medusa's ``assert max_draft_len > 0``; a drafter it has no branch
    for (SaveState, User_Provided) is an "Unrecognized speculative config type"."""
    refused = list(_unsupported_backend(block, ctx, SUPPORTS_BACKEND_1_2))
    spec = block.get("speculative_config")
    if refused or not isinstance(spec, dict):
        yield from refused
        return
    kind, where = spec.get("decoding_type"), ("speculative_config", "decoding_type")
    if kind in ("Eagle3", "PARD"):
        yield where, f"speculative_config.decoding_type {kind!r} is only supported on the PyTorch backend", \
            "decoding_type: Eagle for the TensorRT backend" if kind == "Eagle3" else "drop backend: tensorrt"
    elif kind in ("SaveState", "User_Provided"):
        yield where, f"Unrecognized speculative config type {kind} (TrtLlmArgs)", "drop backend: tensorrt"
    elif kind == "Medusa" and not (_int(spec.get("max_draft_len")) or 0) > 0:
        yield ("speculative_config", "max_draft_len"), "Medusa needs max_draft_len > 0", \
            "max_draft_len: the engine's, e.g. 63"


@rule("TorchLlmArgs", "convert_load_format")
def _load_format(block: dict, ctx: Context) -> Iterator[Finding]:
    """``load_format`` (a before-validator): a name of the ``LoadFormat`` enum, any case; 1.3 also takes the enum's
    number and refuses a boolean; 1.1 / 1.2 call ``.upper()`` on whatever is given (a number fails there)."""
    if "load_format" not in block:
        return
    value = block["load_format"]
    members = ((ctx.enums or {}).get("LoadFormat") or {}).get("members") or {}
    names = ", ".join(name.lower() for name in members)
    numbers = ctx.version.startswith("1.3")
    if isinstance(value, str) and value.upper() in members:
        return
    if numbers and isinstance(value, int) and not isinstance(value, bool) and value in members.values():
        return
    yield ("load_format",), f"invalid load_format {value!r}: one of {names}" + (
        " (or the enum's number)" if numbers else ""), f"load_format: auto (the checkpoint's weights; {names})"


# ------------------------------------------------------------------------------------------ KV cache
@rule("KvCacheConfig", "validate_free_gpu_memory_fraction")
def _fraction(block: dict, ctx: Context) -> Iterator[Finding]:
    """``0 <= v <= 1``; an explicit null reaches the comparison too (the field is Optional but the validator does
    not test for None, llm_args.py@7b437aaa and @a1a20970): TypeError at start."""
    if "free_gpu_memory_fraction" in block and block["free_gpu_memory_fraction"] is None:
        yield ("free_gpu_memory_fraction",), ("kv_cache_config.free_gpu_memory_fraction: null is compared with 0 and "
                                              "1 and TensorRT-LLM's start fails with a TypeError"), \
            "give a fraction in [0, 1], or leave the key out for the default"
    yield from _unit_interval(block, "free_gpu_memory_fraction")


@rule("KvCacheConfig", "validate_cross_kv_cache_fraction")
def _cross_fraction(block: dict, ctx: Context) -> Iterator[Finding]:
    yield from _unit_interval(block, "cross_kv_cache_fraction")


def _unit_interval(block: dict, name: str) -> Iterator[Finding]:
    value = block.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value <= 1:
        yield (name,), f"kv_cache_config.{name} must be a float between 0 and 1, got {value}", \
            "0 <= value <= 1 (0.0 is accepted)"


#: ``_str_to_torch_dtype_dict``'s keys (tensorrt_llm/_utils.py) and the quantised names validate_dtype adds.
_KV_DTYPES = ("auto", "fp8", "fp8_ds_mla", "nvfp4", "bfloat16", "float16", "float32", "int64", "int32", "int8",
              "bool")


@rule("KvCacheConfig", "validate_disk_cache_config")
def _disk_cache(block: dict, ctx: Context) -> Iterator[Finding]:
    """A positive ``disk_cache_size`` needs a ``disk_cache_path`` (llm_args.py@a1a20970; that the folder exists is
    checked on the serving host, not here)."""
    size = _int(block.get("disk_cache_size"))
    if size is not None and size > 0 and not block.get("disk_cache_path"):
        yield ("disk_cache_path",), "kv_cache_config.disk_cache_path must be set when disk_cache_size is positive", \
            "disk_cache_path: a folder on the serving host for the offloaded blocks"


@rule("KvCacheConfig", "validate_dtype")
def _kv_dtype(block: dict, ctx: Context) -> Iterator[Finding]:
    value = block.get("dtype")
    if isinstance(value, str) and value.lower() not in _KV_DTYPES:
        yield ("dtype",), f"kv_cache_config.dtype must be one of \"auto\", \"fp8\", \"fp8_ds_mla\", \"nvfp4\", or a " \
                          f"torch.dtype string, got {value!r}", f"one of {', '.join(_KV_DTYPES)} (any case)"


@rule("KvCacheConfig", "validate_max_gpu_total_bytes")
def _kv_bytes(block: dict, ctx: Context) -> Iterator[Finding]:
    value = _int(block.get("max_gpu_total_bytes"))
    if value is not None and value < 0:
        yield ("max_gpu_total_bytes",), "kv_cache_config.max_gpu_total_bytes must be non-negative", ""


@rule("KvCacheConfig", "validate_max_attention_window", releases=("1.1", "1.2"))
def _kv_window_positive(block: dict, ctx: Context) -> Iterator[Finding]:
    """llm_args.py@fe8770fb and @7b437aaa (the late-2025 1.2 copy types the list ``List[PositiveInt]`` instead): a
    non-empty list, every value ``> 0`` (``if i <= 0: raise``)."""
    yield from _kv_window_values(block, lambda i: i <= 0)


@rule("KvCacheConfig", "validate_max_attention_window", releases=LINE_1_3)
def _kv_window(block: dict, ctx: Context) -> Iterator[Finding]:
    """llm_args.py@a1a20970: 0 is refused. Upstream also allows one negative sentinel,
    ``LinearCacheType.RECURRENT_STATES.value`` (a C++ binding whose value was not read): negative values pass here,
    so one that is not the sentinel is a false pass, never a false refusal."""
    yield from _kv_window_values(block, lambda i: i == 0)


def _kv_window_values(block: dict, refused: Callable[[int], bool]) -> Iterator[Finding]:
    value = block.get("max_attention_window")
    if value is None:
        return
    if not isinstance(value, list) or not value:
        yield ("max_attention_window",), "kv_cache_config.max_attention_window must be a non-empty list of " \
                                         "positive integers", ""
    elif any(isinstance(i, int) and not isinstance(i, bool) and refused(i) for i in value):
        yield ("max_attention_window",), "kv_cache_config.max_attention_window values must be positive", \
            "a window per layer, in tokens"


@rule("KvCacheConfig", "validate_pool_ratio")
def _pool_ratio(block: dict, ctx: Context) -> Iterator[Finding]:
    value = block.get("pool_ratio")
    if not isinstance(value, list) or not all(isinstance(r, (int, float)) for r in value):
        return
    if any(r <= 0 for r in value):
        yield ("pool_ratio",), "kv_cache_config.pool_ratio values must be positive", ""
    elif abs(sum(value) - 1.0) > 1e-6:
        yield ("pool_ratio",), "kv_cache_config.pool_ratio values must sum to 1.0", ""


@rule("KvCacheConfig", "reject_fp8_ds_mla_pool_rebalance")
def _fp8_ds_mla(block: dict, ctx: Context) -> Iterator[Finding]:
    if str(block.get("dtype", "")).lower() == "fp8_ds_mla" and _bool(block.get("enable_kv_pool_rebalance", False)):
        yield ("enable_kv_pool_rebalance",), "kv_cache_config.dtype fp8_ds_mla is incompatible with " \
                                             "enable_kv_pool_rebalance: true", ""


# ------------------------------------------------------------------------------------------ the rest
@rule("CudaGraphConfig", "validate_cuda_graph_config")  # the late-2025 1.2 copy: the same body
@rule("BaseCudaGraphConfig", "validate_base_cuda_graph_config")
def _cuda_graphs(block: dict, ctx: Context) -> Iterator[Finding]:
    """Both ``batch_sizes`` and ``max_batch_size`` given: the latter must be the former's maximum."""
    sizes, top = block.get("batch_sizes"), _int(block.get("max_batch_size", 0))
    if isinstance(sizes, list) and sizes and all(_int(s) is not None for s in sizes) and top:
        if top != max(_int(s) for s in sizes):  # type: ignore[type-var]
            yield ("max_batch_size",), (f"cuda_graph_config.max_batch_size ({top}) must equal max(batch_sizes) "
                                        f"({max(_int(s) for s in sizes)}) when both are given"), \
                "drop max_batch_size (it is derived from batch_sizes), or make them agree"  # type: ignore


@rule("AttentionDpConfig", "validate_attention_dp_config")
def _attention_dp(block: dict, ctx: Context) -> Iterator[Finding]:
    if _bool(block.get("enable_balance", False)):
        for name in ("batching_wait_iters", "timeout_iters"):
            value = _int(block.get(name, 0))
            if value is not None and value < 0:
                yield (name,), f"attention_dp_config.{name} must be >= 0 when enable_balance is true", ""


@rule("TorchLlmArgs", "validate_encoder_runtime_sizes")
def _encoder_sizes(block: dict, ctx: Context) -> Iterator[Finding]:
    for name in ("encoder_max_batch_size", "encoder_max_num_tokens"):
        value = _int(block.get(name))
        if block.get(name) is not None and value is not None and value <= 0:
            yield (name,), f"{name} must be a positive integer when set", ""


_ABSENT = object()


# ------------------------------------------------------------------------------------------ the 1.1 / 1.2 lines
@rule("LookaheadDecodingConfig", "validate_positive_values")
def _lookahead_positive(block: dict, ctx: Context) -> Iterator[Finding]:
    """``field_validator('max_window_size', 'max_ngram_size', 'max_verification_set_size')``: each > 0."""
    for name in ("max_window_size", "max_ngram_size", "max_verification_set_size"):
        value = _int(block.get(name))
        if name in block and value is not None and value <= 0:
            yield (name,), f"Value must be positive, got {value}", "Lookahead's W, N and G are each >= 1"


@rule("DecodingBaseConfig", "_validate_acceptance_window")
def _acceptance_window(block: dict, ctx: Context) -> Iterator[Finding]:
    value = _int(block.get("acceptance_window"))
    if value is not None and value < 0:
        yield ("acceptance_window",), f"acceptance_window must be >= 0 (0 disables), got {value}", ""


@rule("DecodingBaseConfig", "_validate_acceptance_length_threshold")
def _acceptance_threshold(block: dict, ctx: Context) -> Iterator[Finding]:
    value = block.get("acceptance_length_threshold")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        yield ("acceptance_length_threshold",), f"acceptance_length_threshold must be >= 0, got {value}", ""


def _non_negative(name: str, message: str, positive: bool = False) -> Callable[[dict, Context], Iterator[Finding]]:
    def check(block: dict, ctx: Context) -> Iterator[Finding]:
        value = block.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (value <= 0 if positive else value < 0):
            yield (name,), message.format(value), ""
    return check


rule("TorchLlmArgs", "validate_stream_interval")(_non_negative("stream_interval", "stream_interval must be positive, "
                                                               "got {}", positive=True))
rule("TorchLlmArgs", "validate_batch_wait_timeout_ms")(_non_negative("batch_wait_timeout_ms",
                                                                     "batch_wait_timeout_ms must be >= 0, got {}"))
rule("TorchLlmArgs", "validate_batch_wait_timeout_iters")(_non_negative("batch_wait_timeout_iters",
                                                                        "batch_wait_timeout_iters must be >= 0, "
                                                                        "got {}"))
rule("CudaGraphConfig", "validate_cuda_graph_max_batch_size")(_non_negative(
    "max_batch_size", "cuda_graph_config.max_batch_size must be non-negative, got {}"))
rule("TorchCompileConfig", "validate_torch_compile_max_num_streams")(_non_negative(
    "max_num_streams", "torch_compile_config.max_num_streams must be >= 1, got {}", positive=True))


@rule("TorchLlmArgs", "validate_encoder_modes")
def _encoder_modes(block: dict, ctx: Context) -> Iterator[Finding]:
    """``mm_encoder_only`` excludes ``encode_only`` and ``disable_mm_encoder`` (llm_args.py@a1a20970)."""
    if _bool(block.get("mm_encoder_only", False)):
        for other in ("encode_only", "disable_mm_encoder"):
            if _bool(block.get(other, False)):
                yield (other,), f"{other} and mm_encoder_only are mutually exclusive", f"keep one of {other}, " \
                    "mm_encoder_only"


@rule("TorchLlmArgs", "validate_ray_worker_extension_cls")
def _ray_extension(block: dict, ctx: Context) -> Iterator[Finding]:
    yield from _ray_only(block, "ray_worker_extension_cls")


@rule("TorchLlmArgs", "validate_ray_placement_config")
def _ray_placement(block: dict, ctx: Context) -> Iterator[Finding]:
    yield from _ray_only(block, "ray_placement_config")


def _ray_only(block: dict, name: str) -> Iterator[Finding]:
    """``name`` is only supported with ``orchestrator_type: ray`` (llm_args.py@a1a20970 and the late-2025 1.2 copy)."""
    if block.get(name) is not None and block.get("orchestrator_type") != "ray":
        yield (name,), f"{name} is only supported with orchestrator_type='ray'", \
            f"orchestrator_type: ray, or drop {name}"


@rule("TorchLlmArgs", "validate_mla_skip_correction_config")
def _mla_skip(block: dict, ctx: Context) -> Iterator[Finding]:
    """``enable_mla_skip_correction`` needs ``attn_backend`` TRTLLM, any case (llm_args.py@a1a20970)."""
    backend = block.get("attn_backend", "TRTLLM")
    if _bool(block.get("enable_mla_skip_correction", False)) and str(backend).upper() != "TRTLLM":
        yield ("enable_mla_skip_correction",), "enable_mla_skip_correction requires attn_backend='TRTLLM'", \
            "attn_backend: TRTLLM, or drop enable_mla_skip_correction"


@rule("TorchLlmArgs", "validate_speculative_beam_history_d2h")
def _beam_history(block: dict, ctx: Context) -> Iterator[Finding]:
    """``enable_speculative_beam_history_d2h`` excludes ``sampler_force_async_worker`` (llm_args.py@a1a20970)."""
    if _bool(block.get("enable_speculative_beam_history_d2h", False)) and \
            _bool(block.get("sampler_force_async_worker", False)):
        yield ("enable_speculative_beam_history_d2h",), ("enable_speculative_beam_history_d2h is incompatible with "
                                                          "sampler_force_async_worker: true"), "keep one of the two"


@rule("TorchLlmArgs", "validate_encode_only_torch_compile_config")
def _encode_only_compile(block: dict, ctx: Context) -> Iterator[Finding]:
    compile_config = block.get("torch_compile_config")
    if _bool(block.get("encode_only", False)) and isinstance(compile_config, dict) and \
            _bool(compile_config.get("enable_piecewise_cuda_graph", False)):
        yield ("torch_compile_config", "enable_piecewise_cuda_graph"), ("encode_only does not support piecewise "
                                                                         "CUDA graphs in torch_compile_config"), \
            "use cuda_graph_config for encoder CUDA graphs, or drop enable_piecewise_cuda_graph"


@rule("TorchLlmArgs", "normalize_prefill_cuda_graph_config")
def _prefill_graphs(block: dict, ctx: Context) -> Iterator[Finding]:
    """The raising branches of ``normalize_prefill_cuda_graph_config`` (llm_args.py@a1a20970): the legacy
    ``torch_compile_config.enable_piecewise_cuda_graph`` against an explicit other ``prefill_cuda_graph_backend``;
    legacy ``capture_num_tokens`` against different explicit ``prefill_capture_num_tokens``; a prefill CUDA graph
    with ``encode_only``; the breakable one with ``torch_compile_config`` or LoRA."""
    compile_config = block.get("torch_compile_config")
    compile_config = compile_config if isinstance(compile_config, dict) else None
    backend = str(block.get("prefill_cuda_graph_backend", "disabled"))
    if compile_config is not None and _bool(compile_config.get("enable_piecewise_cuda_graph", False)):
        if "prefill_cuda_graph_backend" in block and backend != "piecewise":
            yield ("prefill_cuda_graph_backend",), ("torch_compile_config.enable_piecewise_cuda_graph conflicts with "
                                                    f"prefill_cuda_graph_backend {backend}"), \
                "drop enable_piecewise_cuda_graph (deprecated) and keep prefill_cuda_graph_backend"
        backend = "piecewise"
    legacy, given = (compile_config or {}).get("capture_num_tokens"), block.get("prefill_capture_num_tokens")
    if isinstance(legacy, list) and isinstance(given, list) and sorted(set(map(str, legacy))) != sorted(
            set(map(str, given))):
        yield ("prefill_capture_num_tokens",), ("torch_compile_config.capture_num_tokens conflicts with "
                                                "prefill_capture_num_tokens"), \
            "drop torch_compile_config.capture_num_tokens (deprecated)"
    if backend != "disabled" and _bool(block.get("encode_only", False)):
        yield ("encode_only",), "encode_only does not support prefill CUDA graphs", \
            "prefill_cuda_graph_backend: disabled, or drop encode_only"
    if backend == "breakable" and compile_config is not None:
        yield ("torch_compile_config",), "the breakable prefill CUDA graph does not support torch_compile_config", ""
    if backend == "breakable" and (_bool(block.get("enable_lora", False)) or block.get("lora_config") is not None):
        yield ("prefill_cuda_graph_backend",), "the breakable prefill CUDA graph does not support LoRA", ""


@rule("MultimodalConfig", "validate_encoder_optimization_compatibility")
def _mm_encoder(block: dict, ctx: Context) -> Iterator[Finding]:
    ahead = _int(block.get("encoder_side_stream_max_ahead", 0))
    if block.get("encoder_cuda_graph") is not None and ahead is not None and ahead > 0:
        yield ("encoder_side_stream_max_ahead",), ("multimodal_config.encoder_cuda_graph and "
                                                   "encoder_side_stream_max_ahead > 0 are mutually exclusive"), \
            "encoder_side_stream_max_ahead: 0, or drop encoder_cuda_graph"


@rule("SkipSoftmaxAttentionConfig", "validate_target_sparsity")
def _target_sparsity(block: dict, ctx: Context) -> Iterator[Finding]:
    value = block.get("target_sparsity")
    values = value.values() if isinstance(value, dict) else [value]
    if any(isinstance(v, (int, float)) and not isinstance(v, bool) and not 0.0 <= v <= 1.0 for v in values):
        yield ("target_sparsity",), "target_sparsity must be in [0, 1] for Skip Softmax Attention", \
            "allowed: 0 <= target_sparsity <= 1 (each value of a mapping)"


@rule("PrometheusMetricsConfig", "validate_histogram_buckets")
def _buckets(block: dict, ctx: Context) -> Iterator[Finding]:
    """Each histogram's bucket list: not empty, strictly increasing (llm_args.py@a1a20970)."""
    for name, value in block.items():
        if not name.endswith("_buckets") or not isinstance(value, list):
            continue
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not value:
            yield (name,), f"{name} must not be empty when given", "list its bucket bounds, or leave the key out"
        elif len(numbers) == len(value) and any(a >= b for a, b in zip(numbers, numbers[1:])):
            yield (name,), f"{name} must be strictly increasing, got {value}", "sort the bounds, each once"


@rule("CacheTransceiverConfig", "validate_bounce_config")
def _bounce(block: dict, ctx: Context) -> Iterator[Finding]:
    """The parts that read no other module (llm_args.py@a1a20970): the agent bounce buffer needs a positive
    ``kv_cache_bounce_size_mb``; ``agent_bounce_params`` need the agent bounce buffer."""
    enabled = _bool(block.get("agent_bounce_buffer_enable", False))
    if enabled and _int(block.get("kv_cache_bounce_size_mb", 0)) == 0:
        yield ("kv_cache_bounce_size_mb",), ("agent_bounce_buffer_enable needs a positive kv_cache_bounce_size_mb "
                                             "(0 disables bounce)"), "set kv_cache_bounce_size_mb to a capacity in MB"
    if block.get("agent_bounce_params") and not enabled:
        yield ("agent_bounce_params",), "agent_bounce_params only applies with agent_bounce_buffer_enable: true", \
            "set agent_bounce_buffer_enable: true, or drop agent_bounce_params"


@rule("ModelExpressConfig", "validate_preshard_strategy")
def _preshard(block: dict, ctx: Context) -> Iterator[Finding]:
    strategy = block.get("preshard_strategy", "per_module")
    if strategy != "per_module":
        why = ("'global' needs LoadFormat.PRESHARDED, not available in this release" if strategy == "global"
               else f"got {strategy!r}")
        yield ("preshard_strategy",), f"mx_config.preshard_strategy must be 'per_module': {why}", \
            "preshard_strategy: per_module"


@rule("TorchLlmArgs", "validate_batch_wait_max_tokens_ratio")
def _ratio(block: dict, ctx: Context) -> Iterator[Finding]:
    value = block.get("batch_wait_max_tokens_ratio")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value <= 1:
        yield ("batch_wait_max_tokens_ratio",), f"batch_wait_max_tokens_ratio must be in [0, 1], got {value}", ""


@rule("TorchLlmArgs", "validate_attention_dp_config")
def _attention_dp_root(block: dict, ctx: Context) -> Iterator[Finding]:
    """The 1.1 / 1.2 lines check ``attention_dp_config`` from ``TorchLlmArgs`` (later: on the class itself)."""
    config = block.get("attention_dp_config")
    if isinstance(config, dict):
        for sub, message, hint in _attention_dp(config, ctx):
            yield ("attention_dp_config",) + sub, message, hint


@rule("TorchLlmArgs", "validate_cuda_graph_config")
def _cuda_graphs_old(block: dict, ctx: Context) -> Iterator[Finding]:
    """1.1 / 1.2: ``batch_sizes`` together with a non-zero ``max_batch_size`` is refused unless the sorted sizes
    are exactly the ones ``max_batch_size`` generates (``CudaGraphConfig._generate_cuda_graph_batch_sizes``)."""
    config = block.get("cuda_graph_config")
    if not isinstance(config, dict):
        return
    sizes, top = config.get("batch_sizes"), _int(config.get("max_batch_size", 0))
    if not isinstance(sizes, list) or not sizes or not top or any(_int(x) is None for x in sizes):
        return
    if sorted(_int(x) for x in sizes) != cuda_graph_batch_sizes(top, _bool(config.get("enable_padding", False))):
        yield ("cuda_graph_config", "max_batch_size"), \
            "don't set both cuda_graph_config.batch_sizes and cuda_graph_config.max_batch_size", \
            "keep batch_sizes (max_batch_size is derived from it) or max_batch_size (batch_sizes are generated)"


@rule("EncodeCudaGraphConfig", "validate_encoder_cuda_graph_config", releases=LINE_1_3)
def _encoder_graphs(block: dict, ctx: Context) -> Iterator[Finding]:
    """Encoder CUDA graphs (llm_args.py@a1a20970): ``num_tokens`` with a non-zero ``max_num_token``, or ``seq_lens``
    with a non-zero ``max_seq_len``: the maximum must be the list's (either alone is completed from the other)."""
    for sizes_key, top_key in (("num_tokens", "max_num_token"), ("seq_lens", "max_seq_len")):
        sizes, top = block.get(sizes_key), _int(block.get(top_key, 0))
        if not isinstance(sizes, list) or not sizes or not top or any(_int(x) is None for x in sizes):
            continue
        derived = max(_int(x) for x in sizes)  # type: ignore[type-var]
        if top != derived:
            yield (top_key,), (f"CudaGraphConfig.{top_key} is incompatible with CudaGraphConfig.{sizes_key}. When "
                               f"both are provided, {top_key} must equal max({sizes_key}) ({derived}, got {top})"), \
                f"drop {top_key} (it is derived from {sizes_key}), or make them agree"


@rule("TorchLlmArgs", "validate_encoder_cuda_graph_config", releases=LINE_1_3)
def _encoder_graphs_root(block: dict, ctx: Context) -> Iterator[Finding]:
    """``encoder_cuda_graph_config`` is for encoder-decoder models: not with ``encode_only``, and only with an
    ``encoder_max_batch_size`` (llm_args.py@a1a20970)."""
    if block.get("encoder_cuda_graph_config") is None:
        return
    if _bool(block.get("encode_only", False)):
        yield ("encoder_cuda_graph_config",), ("Use cuda_graph_config=EncodeCudaGraphConfig(...) when encode_only="
                                               "True; encoder_cuda_graph_config is for encoder-decoder models."), \
            "move the block to cuda_graph_config with mode: encode"
    elif block.get("encoder_max_batch_size") is None:
        yield ("encoder_cuda_graph_config",), "encoder_cuda_graph_config requires encoder_max_batch_size.", \
            "encoder_max_batch_size: the most encoder inputs an iteration processes"


@rule("BaseLlmArgs", "validate_runtime_args", severity="warning", releases=LINE_1_3)
def _runtime_args(block: dict, ctx: Context) -> Iterator[Finding]:
    """Logged, not refused: ``max_batch_size`` above ``max_num_tokens`` (an explicit null is the default again,
    ``normalize_optional_fields_to_defaults``: 2048 and 8192)."""
    batch = _int(block.get("max_batch_size") if block.get("max_batch_size") is not None else ctx.max_batch_size)
    tokens = _int(block.get("max_num_tokens") if block.get("max_num_tokens") is not None else 8192)
    if batch is not None and tokens is not None and batch > tokens:
        yield ("max_batch_size",), (f"max_batch_size [{batch}] should be less than or equal to max_num_tokens "
                                    f"[{tokens}]"), "a step holds at least one token of every sequence it runs"


def _is_gms(value: Any) -> bool:
    """``load_format`` reads as ``LoadFormat.GMS`` (its name in any case, or its number 3)."""
    return (isinstance(value, str) and value.upper() == "GMS") or (type(value) is int and value == 3)


@rule("TorchLlmArgs", "validate_gms_moe_compat", releases=LINE_1_3)
def _gms_moe(block: dict, ctx: Context) -> Iterator[Finding]:
    """GPU Memory Service loading with a MoE load balancer: refused (llm_args.py@a1a20970; the balancer's
    allocations would land outside the layout read-only peers receive)."""
    moe = block.get("moe_config")
    if _is_gms(block.get("load_format")) and isinstance(moe, dict) and moe.get("load_balancer") is not None:
        yield ("moe_config", "load_balancer"), "LoadFormat.GMS is incompatible with moe_config.load_balancer: its " \
                                               "allocations land outside the committed layout RO peers receive", \
            "either disable moe_config.load_balancer or use load_format: auto"


@rule("GmsConfig", "validate_gms_config", releases=LINE_1_3)
def _gms_tag(block: dict, ctx: Context) -> Iterator[Finding]:
    tag = block.get("tag", "weights")
    if isinstance(tag, str) and not tag.strip():
        yield ("tag",), f"gms_config.tag must be a non-empty string, got {tag!r}.", \
            "tag: weights (the GMS library's default), or a name unique to this model and layout"


@rule("TorchLlmArgs", "validate_gms_config", severity="warning", releases=LINE_1_3)
def _gms_unused(block: dict, ctx: Context) -> Iterator[Finding]:
    """Logged: a ``gms_config`` that differs from its defaults without ``load_format: GMS`` is ignored."""
    gms = block.get("gms_config")
    if not isinstance(gms, dict) or _is_gms(block.get("load_format")):
        return
    if gms.get("socket_path") is not None or gms.get("mode", "auto") != "auto" or gms.get("tag", "weights") != \
            "weights":
        yield ("gms_config",), f"gms_config is set but load_format is {block.get('load_format', 'auto')!r}, not " \
                               "'GMS': the GMS config will be ignored", "load_format: gms to share the weights"


@rule("TorchLlmArgs", "validate_helix_tokens_per_block", releases=LINE_1_3)
def _helix_blocks(block: dict, ctx: Context) -> Iterator[Finding]:
    """HELIX context parallelism (``context_parallel_size`` > 1): ``cp_config.tokens_per_block``, where given, must
    be ``kv_cache_config.tokens_per_block`` (default 32; an ``assert`` upstream, llm_args.py@a1a20970). HELIX by
    name, in any case (``tensorrt_llm/mapping.py``'s ``CpType`` is a string enum; a number is refused before)."""
    cp, kv = block.get("cp_config"), block.get("kv_cache_config")
    if _int(block.get("context_parallel_size", 1)) in (1, None) or not isinstance(cp, dict):
        return
    if str(cp.get("cp_type", "ULYSSES")).upper() != "HELIX" or cp.get("tokens_per_block") is None:
        return
    ours = _int(cp.get("tokens_per_block"))
    theirs = _int(kv.get("tokens_per_block", 32) if isinstance(kv, dict) else 32)
    if ours is not None and theirs is not None and ours != theirs:
        yield ("cp_config", "tokens_per_block"), (
            f"When HELIX parallelism is active, cp_config.tokens_per_block ({ours}) must match "
            f"kv_cache_config.tokens_per_block ({theirs})."), f"cp_config.tokens_per_block: {theirs}, or drop it"


@rule("TorchLlmArgs", "validate_early_first_token_response", severity="warning", releases=LINE_1_3)
def _early_first_token(block: dict, ctx: Context) -> Iterator[Finding]:
    """Logged and turned off: the early first token needs the overlap scheduler and an aggregated server."""
    if not _bool(block.get("enable_early_first_token_response", False)):
        return
    transceiver, spec = block.get("cache_transceiver_config"), block.get("speculative_config")
    save_state = isinstance(spec, dict) and spec.get("decoding_type") == "SaveState"  # turns the scheduler off first
    if _bool(block.get("disable_overlap_scheduler", False)) or save_state:
        yield ("enable_early_first_token_response",), "enable_early_first_token_response is relevant only when the " \
            "overlap scheduler is enabled; it is turned off because disable_overlap_scheduler is true", ""
    elif isinstance(transceiver, dict) and transceiver.get("backend") is not None:
        yield ("enable_early_first_token_response",), "enable_early_first_token_response is supported only for " \
            "aggregated workloads; it is turned off because cache_transceiver_config is configured", ""


@rule("TorchLlmArgs", "validate_checkpoint_format", severity="warning", releases=LINE_1_3)
def _checkpoint_format(block: dict, ctx: Context) -> Iterator[Finding]:
    if block.get("checkpoint_format") is not None and block.get("checkpoint_loader") is not None:
        yield ("checkpoint_loader",), "checkpoint_format and checkpoint_loader are both provided, checkpoint_loader " \
                                      "will be ignored", "drop one of them"


@rule("BaseLlmArgs", "validate_peft_cache_config", releases=LINE_1_3)
def _lora_prefetch(block: dict, ctx: Context) -> Iterator[Finding]:
    peft = block.get("peft_cache_config")
    if isinstance(peft, dict) and peft.get("lora_prefetch_dir") is not None:
        yield ("peft_cache_config", "lora_prefetch_dir"), (f"lora_prefetch_dir was set to "
                                                          f"'{peft['lora_prefetch_dir']}' while LoRA prefetch is not "
                                                          "supported"), "drop lora_prefetch_dir"


def _v2_off(kv: dict) -> bool:
    """``use_kv_cache_manager_v2`` read as False (``bool | "auto"``: absent or ``auto`` is not False)."""
    value = kv.get("use_kv_cache_manager_v2", "auto")
    return value != "auto" and not _bool(value)


@rule("KvCacheConfig", "validate_mamba_snapshot_offsets", releases=LINE_1_3)
def _mamba_offsets(block: dict, ctx: Context) -> Iterator[Finding]:
    state = block.get("mamba_state_config")
    if not isinstance(state, dict) or not _v2_off(block):
        return
    hint = "use_kv_cache_manager_v2: true (or auto)"
    if state.get("additional_snapshot_offsets_from_start") or state.get("additional_snapshot_offsets_from_end"):
        yield ("mamba_state_config",), ("kv_cache_config.mamba_state_config additional snapshot offsets require "
                                        "kv_cache_config.use_kv_cache_manager_v2=True."), hint
    if _bool(state.get("enable_branch_snapshot", False)):
        yield ("mamba_state_config", "enable_branch_snapshot"), (
            "kv_cache_config.mamba_state_config.enable_branch_snapshot requires "
            "kv_cache_config.use_kv_cache_manager_v2=True."), hint


@rule("KvCacheConfig", "migrate_legacy_mamba_interval", releases=LINE_1_3)
def _mamba_interval(block: dict, ctx: Context) -> Iterator[Finding]:
    """The deprecated interval beside its replacement (alone it is copied over; the field's deprecated status
    warns)."""
    state = block.get("mamba_state_config")
    if block.get("mamba_state_cache_interval") is not None and isinstance(state, dict) and \
            "periodic_snapshot_interval" in state:
        yield ("mamba_state_cache_interval",), ("Cannot set both 'kv_cache_config.mamba_state_cache_interval' and "
                                                "'kv_cache_config.mamba_state_config.periodic_snapshot_interval'."), \
            "drop mamba_state_cache_interval (deprecated)"


@rule("KvCacheConfig", "disable_periodic_mamba_snapshots_for_conversations", severity="warning", releases=LINE_1_3)
def _mamba_conversations(block: dict, ctx: Context) -> Iterator[Finding]:
    """After ``migrate_legacy_mamba_interval``: the deprecated interval, where the new one is not given, counts."""
    reuse, state = block.get("block_reuse_config"), block.get("mamba_state_config")
    given = state.get("periodic_snapshot_interval") if isinstance(state, dict) else None
    interval = _int(given if given is not None else block.get("mamba_state_cache_interval") or 0)
    if isinstance(reuse, dict) and reuse.get("policy") == "per_conversation" and interval:
        yield ("mamba_state_config", "periodic_snapshot_interval"), (
            f"kv_cache_config.mamba_state_config.periodic_snapshot_interval={interval} is ignored because "
            "kv_cache_config.block_reuse_config.policy=per_conversation disables periodic Mamba snapshots; it is "
            "set to 0"), "drop periodic_snapshot_interval"


@rule("DeepSeekSparseAttentionConfig", "_warn_heuristic_topk_unsupported", severity="warning", releases=LINE_1_3)
def _heuristic_topk(block: dict, ctx: Context) -> Iterator[Finding]:
    """Logged: GVR Top-K asked for an ``index_topk`` it cannot run (the DeepSeek-V4 default is 512)."""
    top = _int(block.get("index_topk", 512 if block.get("algorithm") == "deepseek_v4" else None))
    if _bool(block.get("enable_heuristic_topk", False)) and top is not None and top not in (512, 1024, 2048):
        yield ("index_topk",), (f"enable_heuristic_topk=True but index_topk={top} is not in the GVR-supported set "
                                "(512, 1024, 2048); the indexer will silently fall back to the radix Top-K path"), \
            "index_topk: 512, 1024 or 2048 to use GVR"


@rule("DeepSeekSparseAttentionConfig", "_validate_indexer_k_dtype", releases=LINE_1_3)
def _indexer_fp4(block: dict, ctx: Context) -> Iterator[Finding]:
    """fp4 indexer keys need ``index_head_dim`` 128 (DeepSeek-V4's defaults: fp4 and 128; DSA's: fp8 and none). The
    validator's other half, fp4 refused below SM 100, reads the GPU: the serving host's."""
    v4 = block.get("algorithm") == "deepseek_v4"
    dtype = block.get("indexer_k_dtype", "fp4" if v4 else "fp8")
    dim = _int(block.get("index_head_dim", 128 if v4 else None))
    if dtype == "fp4" and dim is not None and dim != 128:
        yield ("index_head_dim",), (f"indexer_k_dtype='fp4' requires index_head_dim=128, got {dim}. Set "
                                    "indexer_k_dtype='fp8' for non-128 indexer head dims."), \
            "indexer_k_dtype: fp8, or index_head_dim: 128"


@rule("MiniMaxM3SparseAttentionConfig", "_validate_msa_configuration", releases=LINE_1_3)
def _minimax_msa(block: dict, ctx: Context) -> Iterator[Finding]:
    """MiniMax-M3 sparse attention: upstream's five checks in its order, the first that fails (it raises one)."""
    impl, dtype = block.get("implementation", "triton"), block.get("indexer_kv_dtype", "bf16")
    size, fuse = _int(block.get("sparse_block_size", 128)), _bool(block.get("fuse_qkv_index_projection", False))
    checks = (
        (impl == "msa" and size is not None and size != 128, ("sparse_block_size",),
         f"MiniMax-M3 'msa' implementation requires sparse_block_size == 128, got {size}.", "sparse_block_size: 128"),
        (dtype == "fp8" and impl != "msa", ("indexer_kv_dtype",),
         "MiniMax-M3 indexer_kv_dtype='fp8' currently requires the 'msa' implementation.", "implementation: msa"),
        (dtype == "fp8" and not _bool(block.get("sparse_disable_index_value", True)), ("sparse_disable_index_value",),
         "MiniMax-M3 indexer_kv_dtype='fp8' requires sparse_disable_index_value=True.",
         "sparse_disable_index_value: true"),
        (fuse and impl != "msa", ("fuse_qkv_index_projection",),
         "MiniMax-M3 fuse_qkv_index_projection=True currently requires the 'msa' implementation.",
         "implementation: msa"),
        (fuse and dtype != "fp8", ("fuse_qkv_index_projection",),
         "MiniMax-M3 fuse_qkv_index_projection=True currently requires indexer_kv_dtype='fp8'.",
         "indexer_kv_dtype: fp8"),
    )
    for failed, where, message, hint in checks:
        if failed:
            yield where, message, hint
            return


@rule("DeepSeekV4SparseAttentionConfig", "validate_index_head_dim", releases=LINE_1_3)
def _v4_head_dim(block: dict, ctx: Context) -> Iterator[Finding]:
    if "index_head_dim" in block and block["index_head_dim"] is None:
        yield ("index_head_dim",), "index_head_dim is required for DeepSeek-V4 sparse attention.", \
            "index_head_dim: 128 (its default), or leave the key out"


@rule("DeepSeekV4SparseAttentionConfig", "normalize_compress_ratios", releases=LINE_1_3)
def _v4_ratios(block: dict, ctx: Context) -> Iterator[Finding]:
    ratios = block.get("compress_ratios")
    if "compress_ratios" not in block or not isinstance(ratios, (list, type(None))):
        return
    if not ratios:
        yield ("compress_ratios",), "compress_ratios must not be empty.", "one ratio a layer (0 or 1: uncompressed)"
    elif any(_int(r) is not None and _int(r) < 0 for r in ratios):  # type: ignore[operator]
        yield ("compress_ratios",), "compress_ratios must be non-negative.", "one ratio a layer (0 or 1: uncompressed)"


#: Validators whose verdict needs no rule here (llm_args.py@a1a20970 unless said): they only normalise what they read
#: (sort, fill in a default, build a private object), or what they say the table says already.
WITHOUT_A_RULE = {
    ("DecodingBaseConfig", "_warn_deprecated_allow_advanced_sampling"): (LINE_1_3,
                                                                         "the field's deprecated status warns"),
    ("TorchCompileConfig", "validate_capture_num_tokens"): (LINE_1_3, "drops duplicates, sorts descending (the list's "
                                                                      "type refuses a count below 1)"),
    ("DecodingBaseConfig", "validate_rejection_sampling_config"): (
        LINE_1_3, "turns a default use_rejection_sampling off beside sa_config (an explicit one is refused by "
        "TorchLlmArgs.validate_speculative_config)"),
    ("BaseLlmArgs", "validate_parallel_config"): (LINE_1_3, "MoE sizes None -> -1; builds the private "
                                                            "_ParallelConfig"),
    ("TorchLlmArgs", "normalize_max_stats_len"): (LINE_1_3, "0 -> 1 (below -1 the field's bound refuses)"),
    ("BaseLlmArgs", "validate_gpus_per_node"): (LINE_1_3, "fills in the host's GPU count where none is given (under "
                                                          "Ray, tensor_parallel_size, given or not); refuses nothing"),
    ("TorchLlmArgs", "normalize_disabled_mm_encoder_cache"): (LINE_1_3, "no encoder cache where the encoder is off"),
    ("TorchLlmArgs", "warn_non_pytorch_checkpoint_io_policy_fallback"): (
        LINE_1_3, "warns for a backend other than pytorch, which TorchLlmArgs' backend cannot be"),
    ("MTPDecodingConfig", "set_max_total_draft_tokens"): (  # 1.3's body refuses, and is a rule (_mtp)
        ("1.2",), "the late-2025 1.2 copy's copies num_nextn_predict_layers into max_draft_len and "
        "max_total_draft_tokens; it refuses nothing"),
}


def cuda_graph_batch_sizes(max_batch_size: int, enable_padding: bool) -> list[int]:
    """The CUDA-graph batch sizes ``max_batch_size`` stands for (``BaseCudaGraphConfig.
    _generate_cuda_graph_batch_sizes``, llm_args.py@a1a20970; the 1.1 / 1.2 copies read call the same function):
    with padding 1, 2, 4 and the multiples of 8 to 128, then steps of 64; without, 1 to 32, 64, 128, then powers
    of two; those up to ``max_batch_size``, which is always the last.

    >>> cuda_graph_batch_sizes(8, True), cuda_graph_batch_sizes(40, False)[-4:]
    ([1, 2, 4, 8], [30, 31, 32, 40])
    """
    if enable_padding:
        sizes = [1, 2, 4] + [8 * i for i in range(1, 17)]
        while sizes[-1] + 64 <= max_batch_size:
            sizes.append(sizes[-1] + 64)
    else:
        sizes = list(range(1, 33)) + [64, 128]
        sizes += [2 ** i for i in range(8, math.ceil(math.log(max_batch_size, 2)))] if max_batch_size > 1 else []
    sizes = sorted(x for x in sizes if x <= max_batch_size)
    if not sizes or sizes[-1] != max_batch_size:
        sizes.append(max_batch_size)
    return sizes


# ------------------------------------------------------------------------------------------ before validators
#: ``(class, validator) -> transform`` of the input, as upstream's ``mode="before"`` validators change it before
#: pydantic reads it (applied at every location of that class, :func:`prepare`).
BEFORE: dict[tuple[str, str], Callable[[dict], tuple[dict, list[tuple[tuple, str, str, str]]]]] = {}


def before(cls: str, validator: str) -> Callable:
    def register(fn: Callable[[dict], tuple[dict, list]]) -> Callable:
        BEFORE[(cls, validator)] = fn
        return fn
    return register


@before("TorchLlmArgs", "infer_cuda_graph_config_mode")
def _infer_mode(data: dict) -> tuple[dict, list[Finding]]:
    graphs = data.get("cuda_graph_config")
    if isinstance(graphs, dict) and "mode" not in graphs:
        encoder = any(graphs.get(k) not in (None, 0) for k in ("num_tokens", "max_num_token", "seq_lens",
                                                                "max_seq_len") if k in graphs)
        data = {**data, "cuda_graph_config": {**graphs, "mode": "encode" if encoder else "decode"}}
    return data, []


@before("TorchLlmArgs", "init_multimodal_config")
def _multimodal_none(data: dict) -> tuple[dict, list[Finding]]:
    if "multimodal_config" in data and data["multimodal_config"] is None:
        data = {k: v for k, v in data.items() if k != "multimodal_config"}
    return data, []


@before("TorchLlmArgs", "_drop_removed_args")
def _drop_removed(data: dict) -> tuple[dict, list[Finding]]:
    """``sampler_type`` was removed: ``auto`` / ``TorchSampler`` are dropped with a warning, anything else refused
    (``_check_removed_sampler_type``)."""
    value = data.get("sampler_type", _ABSENT)
    if value is _ABSENT:
        return data, []
    rest = {k: v for k, v in data.items() if k != "sampler_type"}
    if value in ("auto", "TorchSampler"):
        return rest, [(("sampler_type",), f"sampler_type was removed: {value!r} is ignored (TorchSampler is the "
                                          "only sampler)", "drop sampler_type to silence this warning", "warning")]
    return rest, [(("sampler_type",), f"sampler_type was removed and {value!r} is no longer available: "
                                      "TorchSampler is the only sampler", "drop sampler_type (and target "
                                      "TorchSampler's conventions: logprobs=0, a real end_id)", "error")]


@before("BlockReuseConfig", "_reject_renamed_block_reuse_policy")
def _renamed_reuse_policy(data: dict) -> tuple[dict, list[Finding]]:
    """The old key is refused with upstream's message (and not reported again as unknown)."""
    if "block_reuse_policy" not in data:
        return data, []
    value = data["block_reuse_policy"]
    rest = {k: v for k, v in data.items() if k != "block_reuse_policy"}
    return rest, [(("block_reuse_policy",), "'kv_cache_config.block_reuse_config.block_reuse_policy' was renamed to "
                                            "'kv_cache_config.block_reuse_config.policy'.",
                   f"policy: {value}", "error")]


@before("CacheTransceiverConfig", "coerce_agent_bounce_params_to_str")
def _bounce_params(data: dict) -> tuple[dict, list[Finding]]:
    """YAML's numbers and booleans become strings (``500`` is ``"500"``, ``true`` ``"True"``); a value that is not a
    mapping is left to the type check, which refuses it as upstream does ("must be a dict of str to str")."""
    params = data.get("agent_bounce_params")
    if not isinstance(params, dict):
        return data, []
    return {**data, "agent_bounce_params": {str(k): str(v) for k, v in params.items()}}, []


@before("BaseLlmArgs", "coerce_env_overrides_to_str")
def _env_str(data: dict) -> tuple[dict, list[Finding]]:
    env = data.get("env_overrides")
    if isinstance(env, dict):
        data = {**data, "env_overrides": {str(k): str(v) for k, v in env.items()}}
    return data, []


@before("CpConfig", "validate_cp_type")
def _cp_upper(data: dict) -> tuple[dict, list[Finding]]:
    if isinstance(data.get("cp_type"), str):
        data = {**data, "cp_type": data["cp_type"].upper()}
    return data, []


#: ``_parse_binary_byte_string`` (llm_args.py@a1a20970): digits, then an optional B / KB / MB / GB / TB or
#: KiB ... TiB, any case, binary units either way.
_BYTE_STRING = re.compile(r"^\s*(\d+)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {None: 1, "b": 1, "kb": 1024, "kib": 1024, "mb": 1024 ** 2, "mib": 1024 ** 2, "gb": 1024 ** 3,
               "gib": 1024 ** 3, "tb": 1024 ** 4, "tib": 1024 ** 4}


@before("MultimodalConfig", "parse_encoder_cache_max_bytes")
def _encoder_cache_bytes(data: dict) -> tuple[dict, list[Finding]]:
    """``encoder_cache_max_bytes: 512MB`` is 512 MiB: the string becomes its byte count before the type is checked
    (a string it cannot read is left for the type check to refuse, as upstream's ValueError is a refusal too).

    >>> _encoder_cache_bytes({"encoder_cache_max_bytes": "1GiB"})[0]
    {'encoder_cache_max_bytes': 1073741824}
    """
    value = data.get("encoder_cache_max_bytes")
    match = _BYTE_STRING.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return data, []
    unit = match.group(2)
    return {**data, "encoder_cache_max_bytes": int(match.group(1)) * _BYTE_UNITS[unit.lower() if unit else None]}, []


@before("MTPDecodingConfig", "_remap_deprecated_num_nextn_predict_layers")
def _mtp_rename(data: dict) -> tuple[dict, list[Finding]]:
    if "num_nextn_predict_layers" not in data:
        return data, []
    value = data["num_nextn_predict_layers"]
    data = {k: v for k, v in data.items() if k != "num_nextn_predict_layers"}
    data.setdefault("max_draft_len", value)
    return data, [(("num_nextn_predict_layers",), "num_nextn_predict_layers is deprecated: use max_draft_len",
                   "rename it to max_draft_len", "warning")]


def prepare(table: Any, root: str, data: dict) -> tuple[dict, list[tuple[tuple, str, str, str]]]:
    """The file's data as upstream's before-validators hand it to pydantic, and what they say
    (``(loc, message, hint, severity)``)."""
    notes: list[tuple[tuple, str, str, str]] = []
    declared = declared_validators(table.table, root)
    for (cls, name), fn in BEFORE.items():
        if (cls, name) in declared:
            data, found = fn(data)
            notes += found
    for key, value in list(data.items()):
        data[key], found = _prepare_nested(table, root, key, value)
        notes += found
    return data, notes


def _prepare_nested(table: Any, root: str, key: str, value: Any) -> tuple[Any, list[tuple[tuple, str, str, str]]]:
    from trtlade.trtllm.llm_args_check import _model_of

    if not isinstance(value, dict):
        return value, []
    if key == "speculative_config":
        cls = decoding_classes(table).get(value.get("decoding_type"))
    else:
        entry = table.models.fields(root).get(key)
        cls = _model_of(table, entry["type"], value) if entry else None
    if cls is None:
        return value, []
    notes = []
    declared = declared_validators(table.table, cls)
    for (owner, name), fn in BEFORE.items():
        if (owner, name) in declared:
            value, found = fn(value)
            notes += [((key,) + loc, msg, hint, severity) for loc, msg, hint, severity in found]
    value = dict(value)
    for inner, item in list(value.items()):  # the blocks inside it (kv_cache_config.block_reuse_config ...)
        value[inner], found = _prepare_nested(table, cls, inner, item)
        notes += [((key,) + loc, msg, hint, severity) for loc, msg, hint, severity in found]
    return value, notes


from trtlade.trtllm import llm_args_rules_runtime  # noqa: E402,F401 - registers its rules (it imports this module)

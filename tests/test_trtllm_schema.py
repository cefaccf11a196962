"""validate-config on trtllm-serve --config files gives TensorRT-LLM's verdict, release by release.

The corpus (tests/data/trtllm_serve/, our own files shaped like upstream's examples/configs/database) is accepted;
every mutation TensorRT-LLM refuses is refused naming its key: a typo at every depth, a wrong type, a value
outside a Literal or an enum, a value below a bound; values upstream accepts that a stricter check would refuse
pass; fields that one release has and another removed or renamed are judged per release.
"""

from __future__ import annotations

import copy
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from trtlade.config.loader import parse_yaml
from trtlade.config.trtllm_serve import check_trtllm_serve
from trtlade.trtllm.llm_args_check import check_llm_args, model_at, table_for, tables
from trtlade.trtllm.llm_args_rules import coverage

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "tests" / "data" / "trtllm_serve").glob("*.yaml"))
NEWEST = "1.3.0"


def errors(data_or_text, release=NEWEST):
    text = data_or_text if isinstance(data_or_text, str) else yaml.safe_dump(data_or_text, sort_keys=False)
    found = check_trtllm_serve(parse_yaml(text, "f.yml"), release, upstream="off")
    return [(d.code, d.path) for d in found if d.severity == "error"]


# ----------------------------------------------------------------------------------------------- the tables
def test_every_table_names_its_source_and_builds_every_model():
    from trtlade.trtllm.compat import release_key

    assert [t.version for t in tables()] == sorted((t.version for t in tables()), key=release_key)
    for t in tables():
        assert t.table["path"] == "tensorrt_llm/llmapi/llm_args.py" and t.table["dated_by"]
        assert len(t.table["commit"] or "") == 40 or t.table["content_id"]  # a commit, or the stored copy read
        for name in t.table["models"]:
            t.models[name]  # every class rebuilds as a pydantic model
        assert "TorchLlmArgs" in t.models and t.table["from_dict"]


@pytest.mark.parametrize("release, version, note", [
    ("1.3.0", "1.3.0rc0", ""), ("1.3.0rc5", "1.3.0rc0", ""), ("1.2.1", "1.2.0", ""), ("1.1.0", "1.1.0", ""),
    ("1.0.0", "1.1.0", "no schema was read"), ("9.0.0", "1.3.0rc0", "newer than"), (None, "1.3.0rc0", "no TensorRT"),
])
def test_a_release_is_checked_against_its_line_or_says_which_table_it_got(release, version, note):
    table, said = table_for(release)
    assert table.version == version and (note in said if note else said == "")


def test_the_generator_reads_a_source_shaped_like_upstreams(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_trtllm_schema as gen
    finally:
        sys.path.pop(0)
    source = textwrap.dedent('''
        # commit: 00000000000000000000000000000000000000aa
        # version: 9.9.0
        class DecodingBaseConfig(StrictBaseModel):
            max_draft_len: Optional[NonNegativeInt] = Field(default=None, description="drop me")
            @classmethod
            def from_dict(cls, data):
                config_classes = {"Lookahead": LookaheadDecodingConfig, "NGram": NGramDecodingConfig}
                return config_classes[data["decoding_type"]](**data)
        class NGramDecodingConfig(DecodingBaseConfig):
            decoding_type: ClassVar[str] = "NGram"
            is_public_pool: bool = True
            @model_validator(mode="after")
            def validate_ngram_config(self):
                return self
        class TorchLlmArgs(StrictBaseModel):
            model: str = Field()
            speculative_config: Optional[NGramDecodingConfig] = None
    ''')
    table = gen.build(source, None, None, None)
    assert table["version"] == "9.9.0" and table["commit"].endswith("aa")
    assert table["from_dict"] == {"Lookahead": "LookaheadDecodingConfig", "NGram": "NGramDecodingConfig"}
    ngram = table["models"]["NGramDecodingConfig"]
    assert ngram["classvars"] == {"decoding_type": "NGram"} and ngram["validators"] == ["validate_ngram_config"]
    assert table["models"]["TorchLlmArgs"]["fields"]["model"]["required"]
    assert table["models"]["StrictBaseModel"]["config"] == {"extra": "forbid"}  # from tensorrt_llm/llmapi/utils.py
    # 1.1 and 1.2 define StrictBaseModel in llm_args.py with pydantic's class-style config: read as the same
    classes = ('class StrictBaseModel(BaseModel):\n    class Config:\n        extra = "forbid"\n'
               'class Lenient(BaseModel):\n    class Config:\n        extra = "ignore"\nclass DecodingBaseConfig')
    inline = gen.build(source.replace("class DecodingBaseConfig", classes), None, None, None)
    assert inline["models"]["StrictBaseModel"]["config"] == {"extra": "forbid"} and "Config" not in inline["models"]
    assert inline["models"]["Lenient"]["config"] == {"extra": "ignore"}


def test_every_shipped_table_reads_strict_models_as_strict():
    """A misspelt key under kv_cache_config or speculative_config is refused on every line read (StrictBaseModel
    forbids extra keys at every commit), not passed with a warning; no table holds a model named ``Config``."""
    for release in ("1.1.0", "1.2.1", "1.2.0rc0", NEWEST):
        assert ("trtllm-args-unknown-key", "kv_cache_config.free_gpu_memory_fractoin") in errors(
            "kv_cache_config: {free_gpu_memory_fractoin: 0.9}\n", release), release
        assert ("trtllm-args-unknown-key", "speculative_config.max_matchng_ngram_size") in errors(
            "speculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2, "
            "max_matchng_ngram_size: 3}\n", release), release
    for table in tables():
        assert "Config" not in table.table["models"], table.label


def test_the_rules_cover_the_model_free_drafters_validators():
    covered = coverage(tables()[-1].table)
    for key in [("SADecodingConfig", "validate_sa_config"), ("NGramDecodingConfig", "validate_ngram_config"),
                ("DecodingBaseConfig", "validate_draft_len_schedule_and_sort"),
                ("DecodingBaseConfig", "validate_max_concurrency_and_draft_len_schedule_mutually_exclusive"),
                ("TorchLlmArgs", "validate_speculative_config"), ("KvCacheConfig", "validate_free_gpu_memory_fraction"),
                ("BaseCudaGraphConfig", "validate_base_cuda_graph_config"), ("TorchLlmArgs", "_drop_removed_args")]:
        assert covered[key], key


# ----------------------------------------------------------------------------------------------- the corpus
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_the_corpus_is_accepted(path):
    found = check_trtllm_serve(parse_yaml(path.read_text(), path.name), NEWEST, upstream="off")
    assert [d.format_text() for d in found if d.severity != "info"] == []


def _leaves(data, path=()):
    """(path, value) of every key at every depth (mapping keys only)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield path + (key,), value
            yield from _leaves(value, path + (key,))


def _set(data, path, value=None, rename=None):
    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node[part]
    if rename is not None:
        node = {rename if k == path[-1] else k: v for k, v in node.items()}
        parent = out
        for part in path[:-2]:
            parent = parent[part]
        if len(path) == 1:
            return node
        parent[path[-2]] = node
        return out
    node[path[-1]] = value
    return out


def _field(path, data):
    """The schema entry of the field at ``path`` (None where no model owns it)."""
    table = tables()[-1]
    owner = model_at(table, "TorchLlmArgs", path[:-1], data)
    if path[:1] == ("speculative_config",) and len(path) == 2:
        owner = table.table["from_dict"].get(data["speculative_config"].get("decoding_type"))
    return None if owner is None else table.models.fields(owner).get(path[-1])


def _resolved(typ):
    """The type without its Optional and with a type alias (``_MoeBackend``) replaced by what it names."""
    aliases = tables()[-1].table["aliases"]
    while typ["kind"] == "optional" or (typ["kind"] == "ref" and typ["name"] in aliases):
        typ = typ["of"] if typ["kind"] == "optional" else aliases[typ["name"]]
    return typ


def _mutations():
    for file in CORPUS:
        data = yaml.safe_load(file.read_text())
        for path, value in _leaves(data):
            if not isinstance(path[-1], str) or path[-1] == "decoding_type":
                continue
            entry = _field(path, data)
            if entry is None:
                continue
            yield pytest.param(_set(data, path, rename=path[-1] + path[-1][-1]),
                               path[:-1] + (path[-1] + path[-1][-1],), id=f"{file.stem}:{'.'.join(path)}:typo")
            inner = _resolved(entry["type"])
            if inner["kind"] in ("int", "float", "bool", "constrained", "list", "dict") or \
                    (inner["kind"] == "ref" and inner["name"] in tables()[-1].table["models"]):
                yield pytest.param(_set(data, path, "not-a-value"), path, id=f"{file.stem}:{'.'.join(path)}:type")
            if inner["kind"] == "literal" or (inner["kind"] == "ref" and inner["name"] in tables()[-1].table["enums"]):
                yield pytest.param(_set(data, path, "NOT_A_MEMBER"), path, id=f"{file.stem}:{'.'.join(path)}:literal")
            bound = {**inner.get("constraints", {}), **entry.get("constraints", {})}
            if "ge" in bound or "gt" in bound or inner.get("name") in ("PositiveInt", "NonNegativeInt"):
                low = bound.get("ge", bound.get("gt", 0)) - 5
                yield pytest.param(_set(data, path, low), path, id=f"{file.stem}:{'.'.join(path)}:range")


@pytest.mark.parametrize("data, path", list(_mutations()))
def test_every_mutation_upstream_refuses_is_refused_naming_its_key(data, path):
    found = errors(data)
    dotted = ".".join(map(str, path))
    assert any(p == dotted or p.startswith(dotted + ".") for _, p in found), found


def test_there_are_mutations_at_every_depth_and_of_every_kind():
    ids = [p.id for p in _mutations()]
    assert len(ids) > 100
    assert {i.rsplit(":", 1)[1] for i in ids} == {"typo", "type", "literal", "range"}
    assert any(i.split(":")[1].count(".") >= 1 for i in ids)  # nested keys too


# ----------------------------------------------------------------------------------------------- the verdicts
@pytest.mark.parametrize("text, release", [
    ("max_seq_len: null\n", NEWEST),                                              # Optional[int]
    ("kv_cache_config: {free_gpu_memory_fraction: 0.0}\n", NEWEST),               # 0 <= f <= 1
    ("speculative_config: {decoding_type: SA, max_draft_len: 4, max_matching_ngram_size: -2}\n", NEWEST),
    ("max_batch_size: '16'\n", NEWEST),                                           # pydantic's lax int
    ("sampler_type: TorchSampler\n", NEWEST),                                     # removed, ignored with a warning
    ("cuda_graph_config: {enable_padding: true}\n", NEWEST),                      # the mode is inferred
    ("speculative_config: {decoding_type: Draft_Target, max_draft_len: 4, speculative_model: /d}\n", NEWEST),
    ("speculative_config: {decoding_type: DraftTarget, max_draft_len: 4, speculative_model_dir: /d}\n", "1.2.1"),
    ("build_config: {max_batch_size: 8}\n", "1.2.1"),
    ("sampler_type: TRTLLMSampler\n", "1.2.1"),
    ("cuda_graph_config: {batch_sizes: [1, 2, 4, 8], max_batch_size: 8, enable_padding: true}\n", "1.1.0"),
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4, acceptance_window: 8}\n", "1.2.1"),
    ("load_format: dummy\n", NEWEST), ("load_format: AUTO\n", "1.1.0"), ("load_format: 3\n", NEWEST),  # GMS's number
    ("multimodal_config: {encoder_cache_max_bytes: 512MB}\n", NEWEST),           # a byte string, binary units
    ("speculative_config: {decoding_type: Eagle, max_draft_len: 3, speculative_model: /m, use_rejection_sampling: "
     "true}\n", NEWEST),                                                          # Eagle is read as Eagle3 first
    ("kv_cache_config: {free_gpu_memory_fraction: null}\n", "1.1.0"),            # no validator compares it there
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}\n", "1.1.0"),
    ("attention_dp_config: {enable_balance: true}\n", NEWEST),
    ("orchestrator_type: ray\nray_worker_extension_cls: my.Ext\n", NEWEST),
    ("kv_cache_config: {disk_cache_size: 1073741824, disk_cache_path: /cache}\n", NEWEST),
    ("enable_mla_skip_correction: true\nattn_backend: trtllm\n", NEWEST),       # any case
    ("torch_compile_config: {enable_piecewise_cuda_graph: true}\nprefill_cuda_graph_backend: piecewise\n", NEWEST),
    ("prometheus_metrics_config: {time_to_first_token_buckets: [0.1, 0.5, 1.0]}\n", NEWEST),
    ("cache_transceiver_config: {agent_bounce_buffer_enable: true, kv_cache_bounce_size_mb: 64}\n", NEWEST),
    ("sparse_attention_config: {algorithm: skip_softmax, target_sparsity: 1.0}\n", NEWEST),
    ("kv_cache_config: {block_reuse_config: {policy: per_request}}\n", NEWEST),
    ("cuda_graph_config: {num_tokens: [16, 64], max_num_token: 64, seq_lens: [8, 16]}\n", NEWEST),
    ("encoder_cuda_graph_config: {num_tokens: [16]}\nencoder_max_batch_size: 4\n", NEWEST),
    ("load_format: gms\ngms_config: {tag: llama-tp2}\n", NEWEST),
    ("context_parallel_size: 2\ncp_config: {cp_type: helix, tokens_per_block: 32}\n", NEWEST),  # the KV default
    ("context_parallel_size: 1\ncp_config: {cp_type: helix, tokens_per_block: 64}\n", NEWEST),  # HELIX not active
    ("torch_compile_config: {capture_num_tokens: [64, 8, 8]}\n", NEWEST),       # deduplicated, not refused
    ("speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1, sa_config: {threshold: 4}}\n",
     NEWEST),                                                                     # a default flag is turned off
    ("context_parallel_size: '1.0'\ncp_config: {cp_type: helix, tokens_per_block: 64}\n", NEWEST),
    ("cp_config: {cp_type: ring}\n", NEWEST),                                  # CpType by name, any case
    ("cp_config: {cp_type: star}\n", "1.2.0"),
    ("cache_transceiver_config: {agent_bounce_buffer_enable: true, kv_cache_bounce_size_mb: 64, agent_bounce_params: "
     "{request_timeout_ms: 500}}\n", NEWEST),                                    # YAML's 500 becomes "500"
    ("kv_cache_config: {mamba_state_config: {enable_branch_snapshot: true}}\n", NEWEST),   # the manager's "auto"
    ("sparse_attention_config: {algorithm: deepseek_v4, compress_ratios: [0, 4, 128]}\n", NEWEST),  # 0 reads as 1
    ("sparse_attention_config: {algorithm: deepseek_v4, index_head_dim: 64, indexer_k_dtype: fp8}\n", NEWEST),
    ("sparse_attention_config: {algorithm: dsa, index_head_dim: 64}\n", NEWEST),  # DSA's keys are fp8
    ("sparse_attention_config: {algorithm: minimax_m3, implementation: msa, indexer_kv_dtype: fp8, "
     "fuse_qkv_index_projection: true}\n", NEWEST),
    ("guided_decoding_backend: xgrammar\nspeculative_config: {decoding_type: Eagle3, max_draft_len: 3, "
     "speculative_model: /m, use_rejection_sampling: true}\n", NEWEST),          # gated for the newer methods only
    ("multimodal_config:\n", NEWEST),                                            # null is read as {}
])
def test_what_upstream_accepts_passes(text, release):
    assert errors(text, release) == []


@pytest.mark.parametrize("text, release, code, path", [
    ("max_batch_sise: 64\n", NEWEST, "trtllm-args-unknown-key", "max_batch_sise"),
    ("kv_cache_config: {free_gpu_memory_fractoin: 0.9}\n", NEWEST, "trtllm-args-unknown-key",
     "kv_cache_config.free_gpu_memory_fractoin"),
    ("cuda_graph_config: {enable_paddding: true}\n", NEWEST, "trtllm-args-unknown-key",
     "cuda_graph_config.enable_paddding"),
    ("moe_config: {backend: CUTLAS}\n", NEWEST, "trtllm-args-literal", "moe_config.backend"),
    ("speculative_config: {decoding_type: ngram, max_draft_len: 4}\n", NEWEST, "trtllm-args-literal",
     "speculative_config.decoding_type"),
    ("sampler_type: TRTLLMSampler\n", NEWEST, "trtllm-args-removed", "sampler_type"),
    ("build_config: {max_batch_size: 8}\n", NEWEST, "trtllm-args-unknown-key", "build_config"),
    ("speculative_config: {decoding_type: AUTO, max_concurrency: 0}\n", NEWEST, "trtllm-args-range",
     "speculative_config.max_concurrency"),
    ("speculative_config: {decoding_type: AUTO, use_rejection_sampling: true}\n", NEWEST, "trtllm-args-rule",
     "speculative_config.use_rejection_sampling"),
    ("speculative_config: {decoding_type: SA, max_draft_len: 4, max_matching_ngram_size: 0}\n", NEWEST,
     "trtllm-args-rule", "speculative_config.max_matching_ngram_size"),
    ("max_batch_size: 64\nspeculative_config: {decoding_type: SA, max_draft_len: 4, enable_global_pool: true, "
     "global_pool_size: 8}\n", NEWEST, "trtllm-args-rule", "speculative_config.global_pool_size"),
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4, acceptance_window: 8}\n", NEWEST,
     "trtllm-args-unknown-key", "speculative_config.acceptance_window"),
    ("speculative_config: {decoding_type: SA, max_draft_len: 4}\n", "1.2.1", "trtllm-args-literal",
     "speculative_config.decoding_type"),
    ("cuda_graph_config: {batch_sizes: [1, 2, 8], max_batch_size: 4}\n", NEWEST, "trtllm-args-rule",
     "cuda_graph_config.max_batch_size"),
    ("kv_cache_config: {max_attention_window: [4096, 0]}\n", NEWEST, "trtllm-args-rule",
     "kv_cache_config.max_attention_window"),
    ("cuda_graph_config: {batch_sizes: [1, 2, 8], max_batch_size: 8}\n", "1.1.0", "trtllm-args-rule",
     "cuda_graph_config.max_batch_size"),                       # not the sizes 8 generates: refused on 1.1
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4, max_concurrency: 4, "
     "draft_len_schedule: {1: 4}}\n", NEWEST, "trtllm-args-rule", "speculative_config.max_concurrency"),
    # blocks update_llm_args_with_extra_dict builds with Class(**value): an empty one is a TypeError at start
    ("attention_dp_config:\n", NEWEST, "trtllm-args-rule", "attention_dp_config"),
    ("attention_dp_config:\n", "1.1.0", "trtllm-args-rule", "attention_dp_config"),
    ("speculative_config:\n", "1.1.0", "trtllm-args-rule", "speculative_config"),
    ("load_format: safetensors\n", NEWEST, "trtllm-args-rule", "load_format"),     # convert_load_format
    ("load_format: true\n", NEWEST, "trtllm-args-rule", "load_format"),
    ("load_format: 1\n", "1.1.0", "trtllm-args-rule", "load_format"),               # .upper() on a number
    ("kv_cache_config: {free_gpu_memory_fraction: null}\n", NEWEST, "trtllm-args-rule",
     "kv_cache_config.free_gpu_memory_fraction"),
    ("cuda_graph_config: {batch_sizes: [1, 2, 4], max_batch_size: 8}\n", "1.2.1", "trtllm-args-rule",
     "cuda_graph_config.max_batch_size"),                       # both 1.2 reads refuse it, each by its own rule
    # BaseLlmArgs.validate_speculative_config on 1.1 / 1.2rc0: NGram's max_matching_ngram_size defaults to 0 there
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4}\n", "1.1.0", "trtllm-args-rule",
     "speculative_config.max_matching_ngram_size"),
    ("speculative_config: {decoding_type: NGram, max_draft_len: 0, max_matching_ngram_size: 2}\n", "1.1.0",
     "trtllm-args-rule", "speculative_config.max_draft_len"),
    ("speculative_config: {decoding_type: Eagle, max_draft_len: 3}\n", "1.1.0", "trtllm-args-rule",
     "speculative_config.speculative_model_dir"),
    ("mm_encoder_only: true\ndisable_mm_encoder: true\n", NEWEST, "trtllm-args-rule", "disable_mm_encoder"),
    ("ray_worker_extension_cls: my.Ext\n", NEWEST, "trtllm-args-rule", "ray_worker_extension_cls"),
    ("kv_cache_config: {disk_cache_size: 1073741824}\n", NEWEST, "trtllm-args-rule", "kv_cache_config.disk_cache_path"),
    # validators that read no checkpoint, GPU or file (llm_args.py@a1a20970)
    ("enable_mla_skip_correction: true\nattn_backend: FLASHINFER\n", NEWEST, "trtllm-args-rule",
     "enable_mla_skip_correction"),
    ("enable_speculative_beam_history_d2h: true\nsampler_force_async_worker: true\n", NEWEST, "trtllm-args-rule",
     "enable_speculative_beam_history_d2h"),
    ("encode_only: true\ntorch_compile_config: {enable_piecewise_cuda_graph: true}\n", NEWEST, "trtllm-args-rule",
     "torch_compile_config.enable_piecewise_cuda_graph"),
    ("torch_compile_config: {enable_piecewise_cuda_graph: true}\nprefill_cuda_graph_backend: breakable\n", NEWEST,
     "trtllm-args-rule", "prefill_cuda_graph_backend"),
    ("prefill_cuda_graph_backend: breakable\nenable_lora: true\n", NEWEST, "trtllm-args-rule",
     "prefill_cuda_graph_backend"),
    ("multimodal_config: {encoder_cuda_graph: {}, encoder_side_stream_max_ahead: 2}\n", NEWEST, "trtllm-args-rule",
     "multimodal_config.encoder_side_stream_max_ahead"),
    ("prometheus_metrics_config: {time_to_first_token_buckets: [0.1, 0.1, 0.5]}\n", NEWEST, "trtllm-args-rule",
     "prometheus_metrics_config.time_to_first_token_buckets"),
    ("cache_transceiver_config: {agent_bounce_buffer_enable: true}\n", NEWEST, "trtllm-args-rule",
     "cache_transceiver_config.kv_cache_bounce_size_mb"),
    ("mx_config: {preshard_strategy: global}\n", NEWEST, "trtllm-args-rule", "mx_config.preshard_strategy"),
    ("sparse_attention_config: {algorithm: skip_softmax, target_sparsity: {a: 0.5, b: 2.0}}\n", NEWEST,
     "trtllm-args-rule", "sparse_attention_config.target_sparsity"),
    ("kv_cache_config: {block_reuse_config: {block_reuse_policy: per_request}}\n", NEWEST, "trtllm-args-removed",
     "kv_cache_config.block_reuse_config.block_reuse_policy"),                 # renamed: its own message, once
    ("cuda_graph_config: {mode: encode, num_tokens: [16, 64], max_num_token: 128}\n", NEWEST, "trtllm-args-rule",
     "cuda_graph_config.max_num_token"),
    ("encoder_cuda_graph_config: {seq_lens: [8, 16], max_seq_len: 32}\nencoder_max_batch_size: 4\n", NEWEST,
     "trtllm-args-rule", "encoder_cuda_graph_config.max_seq_len"),
    ("encoder_cuda_graph_config: {num_tokens: [16]}\n", NEWEST, "trtllm-args-rule", "encoder_cuda_graph_config"),
    ("encoder_cuda_graph_config: {num_tokens: [16]}\nencoder_max_batch_size: 4\nencode_only: true\n", NEWEST,
     "trtllm-args-rule", "encoder_cuda_graph_config"),
    ("load_format: GMS\nmoe_config: {load_balancer: {num_slots: 8}}\n", NEWEST, "trtllm-args-rule",
     "moe_config.load_balancer"),
    ("load_format: gms\ngms_config: {tag: '  '}\n", NEWEST, "trtllm-args-rule", "gms_config.tag"),
    ("context_parallel_size: 2\ncp_config: {cp_type: helix, tokens_per_block: 64}\n", NEWEST, "trtllm-args-rule",
     "cp_config.tokens_per_block"),
    ("speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1, use_rejection_sampling: true, "
     "sa_config: {threshold: 4}}\n", NEWEST, "trtllm-args-rule", "speculative_config.use_rejection_sampling"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /m, use_dynamic_tree: true, "
     "dynamic_tree_max_topK: 40, use_rejection_sampling: true}\n", NEWEST, "trtllm-args-rule",
     "speculative_config.use_rejection_sampling"),                               # the kernel tries 32 a level
    ("guided_decoding_backend: xgrammar\nspeculative_config: {decoding_type: PARD, max_draft_len: 3, "
     "speculative_model: /m, use_rejection_sampling: true}\n", NEWEST, "trtllm-args-rule",
     "speculative_config.use_rejection_sampling"),
    # numbers as pydantic's lax mode reads them: "16.0" is 16
    ("encoder_max_batch_size: 4\nencoder_cuda_graph_config: {num_tokens: [8], max_num_token: '16.0'}\n", NEWEST,
     "trtllm-args-rule", "encoder_cuda_graph_config.max_num_token"),
    ("context_parallel_size: 2\ncp_config: {cp_type: Helix, tokens_per_block: '64.0'}\n", NEWEST, "trtllm-args-rule",
     "cp_config.tokens_per_block"),
    ("cp_config: {cp_type: hellix}\n", NEWEST, "trtllm-args-literal", "cp_config.cp_type"),  # mapping.py's CpType
    ("cp_config: {cp_type: 3}\n", NEWEST, "trtllm-args-literal", "cp_config.cp_type"),      # a str enum: no numbers
    ("cp_config: {cp_type: null}\n", NEWEST, "trtllm-args-literal", "cp_config.cp_type"),   # not Optional
    ("cache_transceiver_config: {agent_bounce_params: [1, 2]}\n", NEWEST, "trtllm-args-type",
     "cache_transceiver_config.agent_bounce_params"),
    ("peft_cache_config: {lora_prefetch_dir: /x}\n", NEWEST, "trtllm-args-rule", "peft_cache_config.lora_prefetch_dir"),
    ("kv_cache_config: {use_kv_cache_manager_v2: false, mamba_state_config: {enable_branch_snapshot: true}}\n", NEWEST,
     "trtllm-args-rule", "kv_cache_config.mamba_state_config.enable_branch_snapshot"),
    ("kv_cache_config: {use_kv_cache_manager_v2: false, mamba_state_config: {additional_snapshot_offsets_from_end: "
     "[0]}}\n", NEWEST, "trtllm-args-rule", "kv_cache_config.mamba_state_config"),
    ("kv_cache_config: {mamba_state_cache_interval: 64, mamba_state_config: {periodic_snapshot_interval: 32}}\n",
     NEWEST, "trtllm-args-rule", "kv_cache_config.mamba_state_cache_interval"),
    ("sparse_attention_config: {algorithm: deepseek_v4, index_head_dim: null}\n", NEWEST, "trtllm-args-rule",
     "sparse_attention_config.index_head_dim"),
    ("sparse_attention_config: {algorithm: deepseek_v4, compress_ratios: []}\n", NEWEST, "trtllm-args-rule",
     "sparse_attention_config.compress_ratios"),
    ("sparse_attention_config: {algorithm: deepseek_v4, compress_ratios: [4, -1]}\n", NEWEST, "trtllm-args-rule",
     "sparse_attention_config.compress_ratios"),
    ("sparse_attention_config: {algorithm: deepseek_v4, index_head_dim: 64}\n", NEWEST, "trtllm-args-rule",
     "sparse_attention_config.index_head_dim"),                                  # V4's default indexer keys are fp4
    ("sparse_attention_config: {algorithm: minimax_m3, implementation: msa, sparse_block_size: 64}\n", NEWEST,
     "trtllm-args-rule", "sparse_attention_config.sparse_block_size"),
    ("sparse_attention_config: {algorithm: minimax_m3, indexer_kv_dtype: fp8}\n", NEWEST, "trtllm-args-rule",
     "sparse_attention_config.indexer_kv_dtype"),                                # fp8 needs msa
    ("sparse_attention_config: {algorithm: minimax_m3, implementation: msa, fuse_qkv_index_projection: true}\n",
     NEWEST, "trtllm-args-rule", "sparse_attention_config.fuse_qkv_index_projection"),
])
def test_what_upstream_refuses_is_refused_at_its_key(text, release, code, path):
    assert (code, path) in errors(text, release)


def test_where_every_read_of_a_line_refuses_for_its_own_reason_the_release_refuses():
    """``DraftTarget`` with ``speculative_model``: the 1.2.0rc0 read knows the name but not the key
    (``speculative_model_dir`` then), the late-2025 read the key but not the name (``Draft_Target``): whichever the
    release is, it refuses the file; an empty Eagle block likewise (each read asks for the draft model its way)."""
    for text in ("speculative_config: {decoding_type: DraftTarget, max_draft_len: 4, speculative_model: /d}\n",
                 "speculative_config: {decoding_type: Eagle, max_draft_len: 3}\n"):
        refused = [d for d in check_llm_args(parse_yaml(text, "f.yml"), "1.2.1") if d.severity == "error"]
        assert refused and all("refuses the file too" in d.message for d in refused), text


@pytest.mark.parametrize("text", [
    "speculative_config: {decoding_type: Draft_Target, max_draft_len: 4, speculative_model: /d}\n",
    "speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /d}\n",
])
def test_where_the_reads_of_a_line_disagree_the_refusal_is_a_warning_naming_both(text):
    """The 1.2 line was read at two states (about 1.2.0rc0, and late 2025): its from_dict registry took
    ``DraftTarget`` and had no Eagle3, the later discriminated union takes ``Draft_Target`` and ``Eagle3``."""
    found = check_llm_args(parse_yaml(text, "f.yml"), "1.2.1")
    assert not [d for d in found if d.severity == "error"]
    warned = [d for d in found if d.path == "speculative_config.decoding_type"]
    assert warned and warned[0].severity == "warning" and "accepts it" in warned[0].message


def test_a_key_a_strict_class_of_an_older_line_lacks_is_refused():
    doc = parse_yaml("speculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2, "
                     "acceptance_window: 8}\n", "f.yml")
    found = check_llm_args(doc, "1.1.0")
    assert [(d.severity, d.code) for d in found] == [("error", "trtllm-args-unknown-key")]


def test_an_unknown_key_says_where_and_what_it_might_be():
    doc = parse_yaml("max_batch_size: 8\nkv_cache_config:\n  free_gpu_memory_fractoin: 0.9\n", "f.yml")
    d = [d for d in check_llm_args(doc, NEWEST) if d.severity == "error"][0]
    assert (d.file, d.line, d.column) == ("f.yml", 3, 3)
    assert "KvCacheConfig" in d.message and "1.3" in d.message and "'free_gpu_memory_fraction'" in d.hint


# ----------------------------------------------------------------------------------------------- upstream's own
FAKE_LLM_ARGS = '''
"""A stand-in for tensorrt_llm.llmapi.llm_args with a deliberately narrow TorchLlmArgs: it knows fewer fields
than the table, so that the comparison has a disagreement to report."""
from pydantic import BaseModel, ConfigDict


class TorchLlmArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    skip_tokenizer_init: bool = False
    max_batch_size: int = 2048


def update_llm_args_with_extra_dict(llm_args, llm_args_dict, extra_llm_api_options=None):
    return llm_args | llm_args_dict
'''


@pytest.fixture
def fake_upstream(tmp_path, monkeypatch):
    pkg = tmp_path / "tensorrt_llm"
    (pkg / "llmapi").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1.3.0'\n")
    (pkg / "llmapi" / "__init__.py").write_text("")
    (pkg / "llmapi" / "llm_args.py").write_text(FAKE_LLM_ARGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in _trtllm_modules():
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in _trtllm_modules():  # the stand-in's modules go; monkeypatch puts back what was there before
        del sys.modules[name]


def _trtllm_modules() -> list[str]:
    return [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]


def test_where_tensorrt_llm_is_importable_its_own_verdict_is_compared(fake_upstream):
    same = check_trtllm_serve(parse_yaml("max_batch_size: 8\n", "f.yml"), NEWEST)
    assert [d.code for d in same] == ["trtllm-upstream-agrees"]
    both_refuse = check_trtllm_serve(parse_yaml("max_batch_sise: 8\n", "f.yml"), NEWEST)
    assert "trtllm-upstream-agrees" in [d.code for d in both_refuse]
    differ = check_trtllm_serve(parse_yaml("enable_chunked_prefill: true\n", "f.yml"), NEWEST)
    bad = [d for d in differ if d.code == "trtllm-upstream-disagrees"]
    assert bad and bad[0].severity == "error" and "trtlade: accepted" in bad[0].message
    assert "enable_chunked_prefill" in bad[0].message  # upstream's own message, quoted


def test_require_upstream_fails_where_tensorrt_llm_is_not_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # an import of it raises
    found = check_trtllm_serve(parse_yaml("max_batch_size: 8\n", "f.yml"), NEWEST, upstream="require")
    assert [d.code for d in found if d.severity == "error"] == ["trtllm-upstream-missing"]
    assert check_trtllm_serve(parse_yaml("max_batch_size: 8\n", "f.yml"), NEWEST) == []


def test_a_deprecated_field_is_a_warning_and_bundles_leave_it_out():
    found = check_llm_args(parse_yaml("backend: pytorch\n", "f.yml"), NEWEST)
    assert [(d.severity, d.code, d.path) for d in found] == [("warning", "trtllm-args-deprecated", "backend")]
    assert [d.code for d in check_llm_args(parse_yaml("backend: pytorch\n", "f.yml"), "1.2.1")] == [
        "trtllm-args-deprecated"]  # BaseLlmArgs.backend is deprecated on every line read


@pytest.mark.parametrize("text, path", [
    ("max_batch_size: 512\nmax_num_tokens: 256\n", "max_batch_size"),                # validate_runtime_args
    ("gms_config: {mode: rw}\n", "gms_config"),                                       # ignored without GMS loading
    ("enable_early_first_token_response: true\ndisable_overlap_scheduler: true\n", "enable_early_first_token_response"),
    ("enable_early_first_token_response: true\ncache_transceiver_config: {backend: UCX}\n",
     "enable_early_first_token_response"),
    ("checkpoint_format: HF\ncheckpoint_loader: my.Loader\n", "checkpoint_loader"),
    ("max_batch_size: '9000.0'\n", "max_batch_size"),                               # above the default 8192
    ("kv_cache_config: {block_reuse_config: {policy: per_conversation}, mamba_state_config: "
     "{periodic_snapshot_interval: 32}}\n", "kv_cache_config.mamba_state_config.periodic_snapshot_interval"),
    ("sparse_attention_config: {algorithm: deepseek_v4, enable_heuristic_topk: true, index_topk: 256}\n",
     "sparse_attention_config.index_topk"),
    ("kv_cache_config: {mamba_state_cache_interval: 256, block_reuse_config: {policy: per_conversation}}\n",
     "kv_cache_config.mamba_state_config.periodic_snapshot_interval"),             # the old interval, migrated first
    ("enable_early_first_token_response: true\nspeculative_config: {decoding_type: SaveState, output_directory: /o}\n",
     "enable_early_first_token_response"),                                          # SaveState turns overlap off
])
def test_what_upstream_only_logs_is_a_warning_at_its_key(text, path):
    found = check_llm_args(parse_yaml(text, "f.yml"), NEWEST)
    assert not [d for d in found if d.severity == "error"], found
    assert [d for d in found if d.severity == "warning" and d.path == path], found


def test_a_renamed_key_is_reported_once_with_the_new_name():
    found = check_llm_args(parse_yaml("kv_cache_config: {block_reuse_config: {block_reuse_policy: per_request}}\n",
                                      "f.yml"), NEWEST)
    assert len([d for d in found if d.severity == "error"]) == 1
    assert "renamed to 'kv_cache_config.block_reuse_config.policy'" in found[0].message and "policy: per_request" in \
        found[0].hint


def test_an_engine_dir_given_for_a_trtllm_serve_file_is_said_unused(tmp_path):
    """validate-config --engine-dir checks trtlade configs and grps files against an engine; a trtllm-serve file is
    checked against its release alone: the flag is noted, not dropped without a word."""
    from trtlade.config.validate import validate_file

    path = tmp_path / "trtllm-serve.yml"
    path.write_text("max_batch_size: 8\n")
    report = validate_file(path, engine_dir=tmp_path, release="1.3.0")
    assert [d.code for d in report.diagnostics if d.severity == "info"].count("engine-dir-unused") == 1
    assert report.valid(False)


# ------------------------------------------------------------------------ the backend a drafter runs on, per release
LOOKAHEAD = "speculative_config: {decoding_type: Lookahead, max_window_size: 4, max_ngram_size: 2, " \
            "max_verification_set_size: 4}\n"
MEDUSA = "speculative_config: {decoding_type: Medusa, max_draft_len: 63, num_medusa_heads: 4}\n"


def found_at(text, release):
    """Every finding as ``(severity, code, path)``, the schema's and trtlade's own around it."""
    return [(d.severity, d.code, d.path) for d in check_trtllm_serve(parse_yaml(text, "f.yml"), release,
                                                                     upstream="off")]


@pytest.mark.parametrize("text, release, refused", [
    # Lookahead / Medusa run only under trtllm-serve --backend tensorrt: a file naming no backend is TrtLlmArgs'
    (LOOKAHEAD + "cuda_graph_config: {max_batch_size: 8}\n", "1.1.0", "cuda_graph_config"),
    (LOOKAHEAD + "disable_overlap_scheduler: true\n", "1.2.1", "disable_overlap_scheduler"),
    (MEDUSA + "cuda_graph_config: {max_batch_size: 8}\n", "1.1.0", "cuda_graph_config"),
    (LOOKAHEAD + "extended_runtime_perf_knob_config: {cuda_graph_mode: true}\n", "1.1.0", None),
    (LOOKAHEAD + "extended_runtime_perf_knob_config: {multi_block_mode: true}\n", "1.2.1", None),
    (MEDUSA + "extended_runtime_perf_knob_config: {cuda_graph_mode: true}\n", "1.2.1", None),
    (MEDUSA + "backend: pytorch\ncuda_graph_config: {max_batch_size: 8}\n", "1.1.0",
     "speculative_config.decoding_type"),                                  # named: PyTorch's, which refuses Medusa
])
def test_a_drafter_only_the_engine_backend_runs_is_checked_as_trtllmargs(text, release, refused):
    errors_found = [(c, p) for s, c, p in found_at(text, release) if s == "error"]
    code = "trtllm-args-rule" if refused == "speculative_config.decoding_type" else "trtllm-args-unknown-key"
    assert errors_found == ([] if refused is None else [(code, refused)]), errors_found


def test_the_note_says_the_command_line_must_choose_the_engine_backend():
    for text in (LOOKAHEAD, MEDUSA):
        found = check_trtllm_serve(parse_yaml(text, "f.yml"), "1.2.1", upstream="off")
        notes = [d for d in found if d.code == "speculation-backend"]
        assert [d.severity for d in notes] == ["info"] and "--backend tensorrt" in notes[0].message
        assert "checked as TrtLlmArgs" in notes[0].message
    assert not [d for d in found_at("backend: tensorrt\n" + MEDUSA, "1.2.1") if d[1] == "speculation-backend"]


@pytest.mark.parametrize("text, release", [
    # validate_speculative_config's first check: the drafter's supports_backend (BaseLlmArgs on 1.1 / 1.2rc0,
    # TorchLlmArgs / TrtLlmArgs in the late-2025 1.2 copy)
    ("backend: pytorch\n" + MEDUSA, "1.1.0"),
    ("backend: pytorch\n" + MEDUSA, "1.2.1"),
    ("backend: tensorrt\nspeculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}\n",
     "1.1.0"),
    ("backend: tensorrt\nspeculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}\n",
     "1.2.1"),
    ("backend: tensorrt\nspeculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1}\n", "1.1.0"),
    ("backend: tensorrt\nspeculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1}\n", "1.2.1"),
    ("backend: trt\nspeculative_config: {decoding_type: AUTO}\n", "1.2.1"),
])
def test_a_drafter_on_a_backend_it_does_not_support_is_refused(text, release):
    assert ("trtllm-args-rule", "speculative_config.decoding_type") in errors(text, release)


@pytest.mark.parametrize("text, release", [
    ("backend: tensorrt\n" + LOOKAHEAD, "1.1.0"), ("backend: tensorrt\n" + MEDUSA, "1.2.1"),
    ("backend: tensorrt\nspeculative_config: {decoding_type: Eagle, max_draft_len: 3, speculative_model_dir: /m}\n",
     "1.1.0"),
    ("backend: pytorch\nspeculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1}\n", "1.2.1"),
    ("speculative_config: {decoding_type: Draft_Target, max_draft_len: 4, speculative_model: /d}\n", NEWEST),
])
def test_a_drafter_on_a_backend_it_supports_passes(text, release):
    assert errors(text, release) == []


def test_the_engine_backend_of_the_late_12_copy_refuses_eagle3():
    """TrtLlmArgs.validate_speculative_config (the late-2025 1.2 copy): Eagle3 is the PyTorch backend's; the
    1.2rc0 read does not know Eagle3 at all, so the 1.2 line refuses the file either way."""
    text = "backend: tensorrt\nspeculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /m}\n"
    found = check_llm_args(parse_yaml(text, "f.yml"), "1.2.1")
    assert any(d.severity == "error" and d.code == "trtllm-args-rule" and "only supported on the PyTorch backend" in
               d.message for d in found), found


# ------------------------------------------------------------------------ validator bodies that differ by release
@pytest.mark.parametrize("text, release, code, path", [
    # KvCacheConfig.validate_max_attention_window: i <= 0 raises at fe8770fb and 7b437aaa (1.3 refuses only 0)
    ("kv_cache_config: {max_attention_window: [-4096, 4096]}\n", "1.1.0", "trtllm-args-rule",
     "kv_cache_config.max_attention_window"),
    # 1.3: MTPDecodingConfig.set_max_total_draft_tokens and EagleDecodingConfig.validate_eagle_config, dynamic trees
    ("speculative_config: {decoding_type: MTP, max_draft_len: 3, use_dynamic_tree: true}\n", NEWEST,
     "trtllm-args-rule", "speculative_config.dynamic_tree_max_topK"),
    ("speculative_config: {decoding_type: MTP, use_dynamic_tree: true, dynamic_tree_max_topK: 4}\n", NEWEST,
     "trtllm-args-rule", "speculative_config.use_dynamic_tree"),
    ("speculative_config: {decoding_type: MTP, max_draft_len: 3, use_dynamic_tree: true, dynamic_tree_max_topK: 2, "
     "max_total_draft_tokens: 50}\n", NEWEST, "trtllm-args-rule", "speculative_config.max_total_draft_tokens"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /m, use_dynamic_tree: true, "
     "dynamic_tree_max_topK: 2, max_total_draft_tokens: 10}\n", NEWEST, "trtllm-args-rule",
     "speculative_config.max_total_draft_tokens"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /m, use_dynamic_tree: true, "
     "dynamic_tree_max_topK: 2, max_total_draft_tokens: 2}\n", NEWEST, "trtllm-args-rule",
     "speculative_config.max_total_draft_tokens"),                               # below max_draft_len
])
def test_a_validator_body_is_the_releases_own(text, release, code, path):
    assert (code, path) in errors(text, release)


@pytest.mark.parametrize("text, release", [
    ("kv_cache_config: {max_attention_window: [-4096, 4096]}\n", NEWEST),      # 1.3 allows a negative sentinel
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model: /m, use_dynamic_tree: true, "
     "dynamic_tree_max_topK: 2}\n", NEWEST),                                    # the total defaults to 2 * 3
    ("speculative_config: {decoding_type: MTP, max_draft_len: 3, use_dynamic_tree: true, dynamic_tree_max_topK: 2, "
     "max_total_draft_tokens: 6}\n", NEWEST),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 4, speculative_model: /m, draft_len_schedule: "
     "{2: 4, 8: 2}}\n", NEWEST),                                                # 1.3: the smallest key, not 1
])
def test_what_a_releases_own_body_accepts_passes(text, release):
    assert errors(text, release) == []


SCHEDULE = "speculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2, " \
           "draft_len_schedule: %s}\n"
EAGLE = "speculative_config: {decoding_type: Eagle, max_draft_len: 3, speculative_model_dir: /m, %s}\n"


@pytest.mark.parametrize("text, path, said", [
    # the late-2025 1.2 copy (the 1.2rc0 read has no schedule field, nor these Eagle validators)
    (SCHEDULE % "{2: 4, 8: 2}", "speculative_config.draft_len_schedule", "must include batch_size=1"),
    (SCHEDULE % "{1: 3, 8: 2}", "speculative_config.draft_len_schedule", "draft_len_schedule[1] must equal"),
    (EAGLE % "eagle_choices: [[0], [1], [0, 0]], use_dynamic_tree: true, dynamic_tree_max_topK: 4",
     "speculative_config.eagle_choices", "use_dynamic_tree should be False"),
    (EAGLE % "eagle_choices: [[0, 0], [1]]", "speculative_config.eagle_choices", "choice [0, 0] is not connected"),
])
def test_the_late_12_copy_reads_its_own_schedule_and_eagle_tree(text, path, said):
    found = [d for d in check_llm_args(parse_yaml(text, "f.yml"), "1.2.1") if d.path == path]
    assert [d for d in found if d.code == "trtllm-args-rule" and said in d.message], found
    assert not [d for d in check_llm_args(parse_yaml(text, "f.yml"), "1.2.1")
                if d.code == "trtllm-args-rule" and d.path != path]


def test_the_late_12_copys_mtp_takes_any_max_draft_len():
    """There ``set_max_total_draft_tokens`` copies ``num_nextn_predict_layers`` over ``max_draft_len``: a 0 passes."""
    found = check_llm_args(parse_yaml("speculative_config: {decoding_type: MTP, max_draft_len: 0}\n", "f.yml"),
                           "1.2.1")
    assert not [d for d in found if d.path == "speculative_config.max_draft_len"], found


@pytest.mark.parametrize("data, cls, kept_backend", [
    ({"speculative_config": {"decoding_type": "Lookahead"}}, "TrtLlmArgs", False),
    ({"backend": "tensorrt", "max_batch_size": 8}, "TrtLlmArgs", False),
    ({"backend": "pytorch", "speculative_config": {"decoding_type": "Medusa"}}, "TorchLlmArgs", True),
    ({"speculative_config": {"decoding_type": "NGram"}}, "TorchLlmArgs", False),
])
def test_upstreams_own_check_builds_the_class_trtllm_serve_builds(data, cls, kept_backend):
    """The --upstream gate built TorchLlmArgs for every file: a Lookahead file (checked by trtlade as TrtLlmArgs, the
    class trtllm-serve --backend tensorrt builds, without the backend key it pops) would read as a disagreement."""
    from types import SimpleNamespace

    from trtlade.trtllm.upstream_gate import args_class

    llm_args = SimpleNamespace(TorchLlmArgs=type("TorchLlmArgs", (), {}), TrtLlmArgs=type("TrtLlmArgs", (), {}))
    chosen, given = args_class(llm_args, data)
    assert chosen.__name__ == cls and ("backend" in given) is kept_backend
    assert args_class(SimpleNamespace(TorchLlmArgs=llm_args.TorchLlmArgs), data)[0].__name__ == "TorchLlmArgs"


@pytest.mark.parametrize("value, verdict", [("{cluster_uri: 'etcd://h:2379'}", "ok"), ("etcd://h:2379", "error")])
def test_disagg_cluster_is_trtllm_serves_own_key_not_an_unknown_llm_argument(tmp_path, value, verdict):
    """trtllm-serve pops ``disagg_cluster`` before building the LLM arguments: the file starts (with --server_role);
    it was refused as an unknown TorchLlmArgs key. A value that is not a mapping is still an error."""
    from trtlade.config.validate import validate_file

    path = tmp_path / "extra.yml"
    path.write_text(f"max_batch_size: 8\ndisagg_cluster: {value}\n")
    for release in ("1.1.0", "1.2.1", "1.3.0"):
        result = validate_file(path, release=release)
        errors = [d for d in result.diagnostics if d.severity == "error"]
        assert (not errors) if verdict == "ok" else (errors and "mapping" in errors[0].message), (release, errors)
        assert any("--server_role" in d.message for d in result.diagnostics) is (verdict == "ok")

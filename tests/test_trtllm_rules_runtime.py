"""The 1.3 validators that read the tokenizer, LoRA, connector, placement, sleep and load balancer settings, and what
upstream changes or only logs at start (``tensorrt_llm/llmapi/llm_args.py``@a1a20970): a spec table each."""

from __future__ import annotations

import pytest

from trtlade.config.loader import parse_yaml
from trtlade.trtllm.llm_args_check import check_llm_args, tables
from trtlade.trtllm.llm_args_rules import coverage
from trtlade.trtllm.llm_args_rules_runtime import IN_PART

NEWEST = "1.3.0"


def said(text: str, release: str = NEWEST) -> list[tuple[str, str]]:
    return [(d.severity, d.path) for d in check_llm_args(parse_yaml(text, "f.yml"), release)]


def errors(text: str, release: str = NEWEST) -> list[str]:
    return [path for severity, path in said(text, release) if severity == "error"]


RAY = "orchestrator_type: ray\n"


@pytest.mark.parametrize("text, path", [
    ("skip_tokenizer_init: true\npost_processor_hook: my.hook\n", "post_processor_hook"),
    ("enable_attention_dp: true\nlora_config: {lora_dir: [/a], cuda_graph_specialize_lora: true}\n",
     "lora_config.cuda_graph_specialize_lora"),
    ("layer_wise_benchmarks_config: {calibration_mode: COLLECT}\n",
     "layer_wise_benchmarks_config.calibration_file_path"),
    ("layer_wise_benchmarks_config: {calibration_mode: COLLECT, calibration_file_path: ''}\n",
     "layer_wise_benchmarks_config.calibration_file_path"),
    ("multimodal_config: {encoder_cuda_graph: {vision: {buckets: [[64, 2], [4, 8]]}}}\n",
     "multimodal_config.encoder_cuda_graph.vision.buckets.1"),
    ("kv_connector_config: {connector_scheduler_class: S, connector_worker_class: W}\n",
     "kv_connector_config.connector_module"),
    ("kv_connector_config: {connector_module: m, connector_worker_class: W}\n",
     "kv_connector_config.connector_scheduler_class"),
    ("kv_connector_config: {connector_module: m, connector_scheduler_class: S}\n",
     "kv_connector_config.connector_worker_class"),
    (RAY + "ray_placement_config: {placement_groups: [g]}\n", "ray_placement_config.placement_bundle_indices"),
    (RAY + "ray_placement_config: {placement_bundle_indices: [[0]]}\n", "ray_placement_config.placement_groups"),
    (RAY + "ray_placement_config: {placement_groups: [g, h], placement_bundle_indices: [[0]]}\n",
     "ray_placement_config.placement_bundle_indices"),
    (RAY + "ray_placement_config: {placement_groups: [{}], placement_bundle_indices: [[0]]}\n",
     "ray_placement_config.placement_groups"),
    (RAY + "ray_placement_config: {per_worker_gpu_share: 1.5}\n", "ray_placement_config.per_worker_gpu_share"),
    (RAY + "ray_placement_config: {per_worker_gpu_share: 0}\n", "ray_placement_config.per_worker_gpu_share"),
    ("sleep_config: {restore_modes: null}\n", "sleep_config.restore_modes"),
    ("sleep_config: {restore_modes: [kv_cache]}\n", "sleep_config.restore_modes"),
    ("sleep_config: {restore_modes: {kv_cache: none}}\n", "sleep_config.restore_modes.kv_cache"),   # names, capitals
    ("sleep_config: {restore_modes: {KV_CACHE: NONE}}\n", "sleep_config.restore_modes.KV_CACHE"),   # values, lower
    ("sleep_config: {restore_modes: {kv_cache: 3}}\n", "sleep_config.restore_modes.kv_cache"),
    ("sleep_config: {restore_modes: {1: NONE}}\n", "sleep_config.restore_modes.1"),
    ("moe_config: {load_balancer: {num_slots: 8, slots: 4}}\n", "moe_config.load_balancer"),
    ("moe_config: {load_balancer: {num_slots: eight}}\n", "moe_config.load_balancer"),
    ("moe_config: {load_balancer: {initial_global_assignments: {0: 1}}}\n", "moe_config.load_balancer"),
    ("moe_config: {load_balancer: ''}\n", "moe_config.load_balancer"),        # no path exists on any host
    ("multimodal_config: {encoder_cuda_graph: {vision: {buckets: [['2', '4']]}}}\n",     # read as numbers
     "multimodal_config.encoder_cuda_graph.vision.buckets.0"),
    ("multimodal_config: {encoder_cuda_graph: {vision: {buckets: [[true, 2]]}}}\n",
     "multimodal_config.encoder_cuda_graph.vision.buckets.0"),
    (RAY + "ray_placement_config: {per_worker_gpu_share: '2'}\n", "ray_placement_config.per_worker_gpu_share"),
    (RAY + "ray_placement_config: {per_worker_gpu_share: false}\n", "ray_placement_config.per_worker_gpu_share"),
    (RAY + "ray_placement_config: {per_worker_gpu_share: .nan}\n", "ray_placement_config.per_worker_gpu_share"),
    ("max_batch_size: null\nspeculative_config: {decoding_type: SA, max_draft_len: 4, enable_global_pool: true, "
     "global_pool_size: 100}\n", "speculative_config.global_pool_size"),        # null is 2048 again
])
def test_what_upstream_refuses_is_refused_at_its_key(text, path):
    assert path in errors(text), said(text)


@pytest.mark.parametrize("text", [
    "skip_tokenizer_init: true\n",
    "post_processor_hook: my.hook\n",
    "enable_attention_dp: true\nlora_config: {lora_dir: [/a], lora_target_modules: [attn_q]}\n",
    "lora_config: {lora_dir: [/a], cuda_graph_specialize_lora: true}\n",
    "layer_wise_benchmarks_config: {calibration_mode: MARK}\n",
    "layer_wise_benchmarks_config: {calibration_mode: COLLECT, calibration_file_path: /c.json}\n",
    "multimodal_config: {encoder_cuda_graph: {vision: {buckets: [[64, 2], [8, 8], [8, 8]]}}}\n",
    "kv_connector_config: {connector: lmcache}\n",
    "kv_connector_config: {connector_module: m, connector_scheduler_class: S, connector_worker_class: W}\n",
    RAY + "ray_placement_config: {per_worker_gpu_share: 0.5, defer_workers_init: true}\n",
    "sleep_config: {restore_modes: {kv_cache: NONE, model_weights: CPU, draft_model: PINNED, sampler: MEMSET}}\n",
    "sleep_config: {}\n",
    "moe_config: {load_balancer: {num_slots: 8, layer_updates_per_iter: '1', initial_global_assignments: "
    "{0: [0, 1]}}}\n",
])
def test_what_upstream_accepts_passes(text):
    assert errors(text) == [], said(text)


@pytest.mark.parametrize("text, path", [
    ("max_batch_size: null\n", "max_batch_size"),                        # read as 2048
    ("max_num_tokens: null\n", "max_num_tokens"),
    ("lora_config: {lora_target_modules: [attn_q]}\n", "lora_config.lora_dir"),
    ("lora_config: {}\n", "lora_config"),                                # every module expected
    ("enable_lora: true\nlora_config: {lora_dir: [/a]}\n", "enable_lora"),
    ("kv_cache_config: {dtype: float16}\n", "kv_cache_config.dtype"),
    ("mx_config: {server_url: 'http://mx:8001'}\n", "mx_config.server_url"),   # ignored without checkpoint_format MX
    ("sleep_config: {restore_modes: {model_weights: CPU}}\n", "sleep_config.restore_modes"),   # kv_cache not NONE
    ("moe_config: {load_balancer: /no/such/balancer.yaml}\n", "moe_config.load_balancer"),
    ("moe_config: {load_balancer: /}\n", "moe_config.load_balancer"),                 # a folder
    ("kv_connector_config: {connector: lmcach}\n", "kv_connector_config.connector"),   # no such preset known
    (RAY + "ray_placement_config: {placement_groups: [], placement_bundle_indices: []}\n",
     "ray_placement_config.placement_groups"),
    ("speculative_config: {decoding_type: PARD, max_draft_len: 4, max_total_draft_tokens: 8, speculative_model: /d}\n",
     "speculative_config.max_total_draft_tokens"),
    ("speculative_config: {decoding_type: AUTO, max_draft_len: 4, max_total_draft_tokens: 6}\n",
     "speculative_config.max_total_draft_tokens"),
])
def test_what_upstream_changes_or_only_logs_is_a_warning_at_its_key(text, path):
    found = said(text)
    assert ("warning", path) in found and not [p for s, p in found if s == "error"], found


@pytest.mark.parametrize("text", [
    "max_batch_size: 64\n",
    "mx_config: {server_url: 'http://mx:8001'}\ncheckpoint_format: MX\n",
    "kv_cache_config: {dtype: FP8}\n",
    "speculative_config: {decoding_type: PARD, max_draft_len: 4, max_total_draft_tokens: 4, speculative_model: /d}\n",
])
def test_nothing_to_say_where_nothing_changes(text):
    assert said(text) == []


def test_what_only_the_servers_gpu_decides_is_a_note():
    assert said("use_cute_dsl_bf16_gemm: true\n") == [("info", "use_cute_dsl_bf16_gemm")]   # refused below SM 100


def test_a_load_balancer_file_found_here_is_read_as_the_server_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text("num_slots: 8\nlayer_updates_per_iter: 1\n")
    (tmp_path / "typo.yaml").write_text("num_slot: 8\n")
    (tmp_path / "list.yaml").write_text("- 8\n")
    assert said("moe_config: {load_balancer: good.yaml}\n") == []
    for name in ("typo.yaml", "list.yaml"):
        assert said(f"moe_config: {{load_balancer: {name}}}\n") == [("error", "moe_config.load_balancer")], name


def test_the_rules_run_only_on_the_line_whose_body_they_read():
    """The late-2025 1.2 copy declares some of the same validators; their bodies there were not read."""
    assert errors("layer_wise_benchmarks_config: {calibration_mode: COLLECT}\n", "1.2.1") == []


def test_every_validator_of_the_newest_line_is_reproduced_and_what_is_left_is_said():
    newest = tables()[-1].table
    covered = coverage(newest)
    assert all(covered.values()), sorted(k for k, done in covered.items() if not done)
    for key, (releases, why) in IN_PART.items():
        assert key in covered and why, key


def test_a_key_in_a_block_held_by_name_is_refused_naming_its_class():
    text = "multimodal_config: {encoder_cuda_graph: {vision: {buckets: [[8, 2]], foo: 1}}}\n"
    found = check_llm_args(parse_yaml(text, "f.yml"), NEWEST)
    assert [(d.path, d.message.split(" of ")[0]) for d in found] == [
        ("multimodal_config.encoder_cuda_graph.vision.foo", "unknown key 'foo': MultimodalEncoderCudaGraphConfig")]

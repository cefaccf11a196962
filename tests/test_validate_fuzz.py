"""Fuzzing the gate: whatever a file holds, validate_file returns diagnostics and never raises."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtlade.config.validate import validate_file

_DIR = Path(tempfile.mkdtemp(prefix="trtlade-fuzz-"))

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["4,2,4", "1,1,0", "7-7-7", "[4,2,4]", "x", "0,0,0"]))
keys = st.one_of(st.sampled_from([
    "model", "build", "lookahead", "serve", "bench", "spec", "request_default", "engine_dir", "tp_size",
    "max_batch_size", "models", "inferer_args", "lookahead_decoding", "window_size", "ngram_size",
    "verification_set_size", "gpt_model_path", "gpt_model_type", "decoding_mode", "sampling", "modes",
    "concurrency", "dtype", "port", "max_seq_len", "max_num_tokens"]), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


def _check(path: Path) -> None:
    report = validate_file(path, display="f.yml")
    for d in report.diagnostics:
        assert d.severity in ("error", "warning", "info") and d.message
        if d.file == "f.yml":
            assert d.line is not None and d.line >= 1 and d.column is not None and d.column >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=6))
def test_random_structures_never_raise(data):
    path = _DIR / "f.yml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    _check(path)


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({"models": st.lists(st.fixed_dictionaries(
    {"name": scalars, "inferer_args": st.one_of(st.none(), st.dictionaries(keys, values, max_size=6))}),
    min_size=1, max_size=2)}))
def test_random_grps_configs_never_raise(data):
    path = _DIR / "f.yml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    _check(path)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_random_bytes_never_raise(blob):
    path = _DIR / "f.yml"
    path.write_bytes(blob)
    _check(path)

"""YAML loading with positions and guards (trtlade.config.loader), and the load_config API."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.config.loader import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    ConfigError,
    ConfigLoadError,
    load_config,
    parse_yaml,
    read_yaml,
    validate_trtlade,
)
from trtlade.config.validate import validate_file
from trtlade.spec import LookaheadSpec, SpecError


def _load_error(tmp_path: Path, content: bytes | str, name: str = "c.yml"):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigLoadError) as info:
        read_yaml(p, display=name)
    [d] = info.value.diagnostics
    assert d.severity == "error" and d.file == name and d.line >= 1 and d.column >= 1 and d.hint
    # the same file through the gate: one error, no exception
    report = validate_file(p, display=name)
    assert report.kind is None and [x.code for x in report.diagnostics] == [d.code]
    return d


# ------------------------------------------------------------------------------------------ guards
def test_alias_bomb_is_refused_before_construction(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")      # 10**10 nodes once expanded
    d = _load_error(tmp_path, "\n".join(lines) + "\n")
    assert d.code == "yaml-too-many-nodes" and str(MAX_NODES) in d.message


def test_many_aliases_below_the_limit_are_fine(tmp_path):
    text = "lookahead:\n  spec: &s 4,2,4\n  request_default: *s\nbench:\n  modes: [ar, *s, lookahead]\n"
    (tmp_path / "c.yml").write_text(text)
    assert validate_file(tmp_path / "c.yml").valid()


def test_recursive_alias(tmp_path):
    assert _load_error(tmp_path, "a: &x\n  b: *x\n").code == "yaml-recursive-alias"


def test_binary_junk(tmp_path):
    d = _load_error(tmp_path, bytes(range(256)) * 4)
    assert d.code == "binary-file" and "NUL byte" in d.message


def test_huge_file_is_not_parsed(tmp_path):
    d = _load_error(tmp_path, "# " + "x" * MAX_FILE_BYTES + "\n")
    assert d.code == "file-too-large" and "1024 KiB" in d.message


@pytest.mark.parametrize("content, code, line, column", [
    (b"lookahead:\n  spec: caf\xe9\n", "not-utf8", 2, 12),
    (b"\xff\xfe l\x00", "binary-file", 1, 5),  # UTF-16 BOM and a NUL: binary wins, at the NUL
])
def test_not_utf8(tmp_path, content, code, line, column):
    d = _load_error(tmp_path, content)
    assert (d.code, d.line, d.column) == (code, line, column)


def test_utf8_bom_is_accepted(tmp_path):
    (tmp_path / "c.yml").write_bytes("\ufefflookahead:\n  spec: 4,2,4\n".encode())
    assert validate_file(tmp_path / "c.yml").valid()


@pytest.mark.parametrize("content", ["", "\n\n   \n", "# just a comment\n", "---\n", "---\n...\n"])
def test_empty_files(tmp_path, content):
    assert _load_error(tmp_path, content).code == "empty-file"


@pytest.mark.parametrize("content, code, line", [
    ("a: [1, 2\n", "yaml-syntax", 2),
    ("a:\n\tb: 1\n", "yaml-syntax", 2),
    ("a: 1\nb: *nothing\n", "yaml-syntax", 2),
    ("a: !!python/object/apply:os.system ['true']\n", "yaml-syntax", 1),
    ("a: \x07\n", "yaml-unreadable", 1),
    ("a: 1\n---\nb: 2\n", "yaml-multiple-documents", 2),
    ("a: 1\nb: 2\na: 3\n", "duplicate-key", 3),
    ("? [a, b]\n: 1\n", "complex-key", 1),
])
def test_malformed_yaml(tmp_path, content, code, line):
    d = _load_error(tmp_path, content)
    assert (d.code, d.line) == (code, line), d.format_text()


@pytest.mark.parametrize("content, said, hint", [
    ("lookahead:\n  schedule:\n  - {up_to: 8, spec: 2,2,2}\n", "{spec: 2,2,2} the commas separate keys",
     "quote the value ('2,2,2')"),
    ("lookahead: {spec: 4,4,4}\n", "{spec: 4,4,4} the commas separate keys", "write it as a list [4, 4, 4]"),
    ("a: {b: 1, b: 2}\n", "YAML would keep only the last value", "remove one of them"),  # a plain duplicate
    ("x: {a: 1,2, spec: 3,3,3}\n", "{spec: 3,3,3}", "quote the value ('3,3,3')"),  # only the run it is in
    ("x: {spec: 4,4,4, b: 1,2}\n", "{spec: 4,4,4}", "write it as a list [4, 4, 4]"),
])
def test_an_unquoted_list_of_numbers_in_a_flow_mapping_is_named_for_what_it_is(tmp_path, content, said, hint):
    """``{spec: 2,2,2}``: the commas separate keys, so 2 comes back as a key; it was told "duplicate key 2 ... remove
    one of them", advice that breaks the spec further (``{spec: 4,2,4}`` got the comma hint: no repeated digit)."""
    d = _load_error(tmp_path, content)
    assert d.code == "duplicate-key" and said in d.message and hint in d.hint, d.format_text()


def test_a_spec_in_a_flow_mapping_is_one_mistake_not_three(tmp_path):
    """``lookahead: {spec: 4,2,4}`` reads as ``spec: 4`` and the keys 2 and 4: one error, the comma trap's, not two
    more for the numbers it made keys; a number key elsewhere is still its own error."""
    p = tmp_path / "c.yml"
    p.write_text("lookahead: {spec: 4,2,4}\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    said = [d.format_text() for d in err.value.diagnostics]
    assert [d.path for d in err.value.diagnostics] == ["lookahead.spec"], said
    p.write_text("lookahead: {spec: 4,2,4}\nbuild: {2: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert sorted(d.path for d in err.value.diagnostics) == ["build.2", "lookahead.spec"]


def test_python_tags_never_run(tmp_path):
    marker = tmp_path / "ran"
    d = _load_error(tmp_path, f"a: !!python/object/apply:os.system ['touch {marker}']\n")
    assert not marker.exists() and "tags" in d.hint


def test_deep_nesting(tmp_path):
    deep = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    assert _load_error(tmp_path, deep).code == "yaml-too-deep"
    very_deep = "[" * 5000 + "]" * 5000 + "\n"
    assert _load_error(tmp_path, very_deep).code == "yaml-too-deep"


@pytest.mark.parametrize("content, what", [("42\n", "a single value (int)"), ("- a\n- b\n", "a list"),
                                           ("just text\n", "a single value (str)")])
def test_non_mapping_top_level(tmp_path, content, what):
    p = tmp_path / "c.yml"
    p.write_text(content)
    [d] = validate_file(p).diagnostics
    assert d.code == "not-a-mapping" and what in d.message
    _, diags = validate_trtlade(read_yaml(p))
    assert diags[0].code == "not-a-mapping"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigLoadError, match="no such file"):
        read_yaml(tmp_path / "nope.yml")
    with pytest.raises(ConfigLoadError, match="is a directory"):
        read_yaml(tmp_path)


# ------------------------------------------------------------------------------------------ positions
def test_positions_of_values_keys_and_list_items():
    doc = parse_yaml("a:\n  b: 1\n  c:\n    - x\n    - {d: 2}\n", "f.yml")
    assert doc.position(("a", "b")) == (2, 6) and doc.position(("a", "b"), key=True) == (2, 3)
    assert doc.position(("a", "c", 0)) == (4, 7) and doc.position(("a", "c", 1, "d")) == (5, 11)
    assert doc.position(("a", "zzz", "deeper")) == (2, 3)   # nearest ancestor present: the mapping a
    assert doc.position(()) == (1, 1)


def test_merge_keys_have_positions_and_explicit_keys_win():
    doc = parse_yaml("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n", "f.yml")
    assert doc.data["m"] == {"x": 3, "y": 2}
    assert doc.position(("m", "x")) == (4, 6) and doc.position(("m", "y")) == (1, 20)


@pytest.mark.parametrize("text, value, line", [
    ("m:\n  <<:\n  - {max_tokens: 10}\n  - {max_tokens: 30}\n", 10, 3),  # a list: the earlier mapping wins
    ("a: &a {max_tokens: 10}\nb: &b {max_tokens: 30, top_p: 1}\nm:\n  <<: [*a, *b]\n", 10, 1),
    ("a: &a {max_tokens: 10}\nm:\n  <<: [*a]\n  max_tokens: 4\n", 4, 4),    # an explicit key wins over all
])
def test_a_merge_list_gives_each_key_from_its_earliest_mapping_where_its_position_points(text, value, line):
    """YAML's merge rule: keys of mappings earlier in a ``<<`` list override later ones; PyYAML 6.0 let the later win
    (where the key is not an interned string: `x` was right, `max_tokens` not), so the config read 30 where its
    position (and the error for a bad value) pointed at 10's line."""
    doc = parse_yaml(text, "f.yml")
    assert doc.data["m"]["max_tokens"] == value and doc.position(("m", "max_tokens"))[0] == line


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True),
                       st.one_of(st.integers(-99, 99), st.from_regex(r"[a-z]{1,6}", fullmatch=True)),
                       min_size=1, max_size=8))
def test_property_every_key_is_located_on_its_line(mapping):
    text = yaml.safe_dump({"section": mapping}, sort_keys=False, default_flow_style=False)
    doc = parse_yaml(text, "f.yml")
    lines = text.splitlines()
    for key in mapping:
        line, column = doc.position(("section", key), key=True)
        # safe_dump quotes keys YAML 1.1 reads as booleans ('on', 'y', ...): the key starts at the quote
        assert lines[line - 1][column - 1:].startswith((f"{key}:", f"'{key}':"))


@settings(max_examples=60, deadline=None)
@given(w=st.integers(-2, 9), n=st.integers(-2, 9), g=st.integers(-2, 9))
def test_property_spec_error_iff_illegal_and_names_the_rule(w, n, g):
    doc = parse_yaml(f"lookahead:\n  spec: {w},{n},{g}\n", "f.yml")
    config, diags = validate_trtlade(doc)
    try:
        spec = LookaheadSpec(w, n, g)
    except SpecError as exc:
        assert config is None
        [d] = diags
        assert d.code == "spec-illegal" and exc.rule in d.message and (d.line, d.column) == (2, 9)
        assert d.path == f"lookahead.spec.{exc.field}"
    else:
        assert diags == [] and config.lookahead.spec == spec


# ------------------------------------------------------------------------------------------ load_config
def test_load_config_resolves_relative_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    p = tmp_path / "sub" / "c.yml"
    p.write_text("build:\n  engine_dir: ../engines/x\nlookahead:\n  spec: 4,2,4\n")
    loaded = load_config(p)
    assert loaded.config.build.engine_dir == Path("../engines/x")          # kept as written
    assert loaded.resolve(loaded.config.build.engine_dir) == (tmp_path / "engines" / "x").resolve()
    assert loaded.resolve("/abs/path") == Path("/abs/path") and loaded.resolve(None) is None
    assert loaded.config.lookahead.spec == LookaheadSpec(4, 2, 4)


def test_load_config_raises_with_every_error_located(tmp_path):
    p = tmp_path / "c.yml"
    p.write_text("build:\n  tp_size: 0\n  max_batch_sise: 3\nlookahead:\n  spec: 4,0,4\n")
    with pytest.raises(ConfigError) as info:
        load_config(p, display="c.yml")
    codes = sorted((d.line, d.code) for d in info.value.diagnostics)
    assert codes == [(2, "schema-greater_than_equal"), (3, "unknown-key"), (5, "spec-illegal")]
    assert "c.yml:5:9: error: lookahead.spec.ngram_size" in str(info.value)


@pytest.mark.parametrize("levels, line_col, fragment", [
    ("[1, 0, 4]", (3, 20), "got 0"),
    ("[-2]", (3, 17), "got -2"),
    ("[1, 2.5]", (3, 20), "got 2.5"),
])
def test_a_list_item_out_of_range_is_located_with_the_item_s_bounds(tmp_path, levels, line_col, fragment):
    p = tmp_path / "c.yml"
    p.write_text(f"lookahead: {{spec: '2,4,2'}}\nbench:\n  concurrency: {levels}\n")
    with pytest.raises(ConfigError) as info:
        load_config(p, display="c.yml")
    [d] = info.value.diagnostics
    assert (d.line, d.column) == line_col and fragment in d.message and d.path.startswith("bench.concurrency.")
    assert d.hint.startswith("allowed: each >= 1; concurrency:")


def test_load_config_raises_for_unreadable_files(tmp_path):
    p = tmp_path / "c.yml"
    p.write_bytes(b"\x00\x01")
    with pytest.raises(ConfigLoadError):
        load_config(p)


@pytest.mark.parametrize("section, fragment", [
    ("serve: {port: true}", "serve.port: a boolean where a number is expected"),
    ("serve: {port: '8080'}", "serve.port: text where a number is expected (write it unquoted)"),
    ("serve: {port: 8080.0}", "serve.port: not an integer"),
    ("build: {max_batch_size: true}", "build.max_batch_size: a boolean where a number is expected"),
    ("bench: {concurrency: [true, 2]}", "bench.concurrency.0: expected a whole number, got True"),
    ("bench: {concurrency: [1, '2']}", "bench.concurrency.1: expected a whole number, got '2'"),
    ("serve: {kv_cache_enable_block_reuse: 'off'}", "text where a boolean is expected"),
    ("serve: {max_queue: '64'}", "serve.max_queue: text where a number is expected"),
    ("build: {max_batch_size: 1e3}", "YAML reads 1e3 as text; write it as 1000"),   # unquoted, but YAML 1.1's
    ("bench: {timeout_s: 1.5e2}", "YAML reads 1.5e2 as text; write it as 150"),
    ("build: {max_input_len: 99999999999999999999}", "less than or equal to 2147483647"),
])
def test_values_are_taken_as_written_never_converted(tmp_path, section, fragment):
    """YAML's true is not 1 and a quoted "8080" is not a number: pydantic's lax mode would convert both."""
    p = tmp_path / "c.yml"
    p.write_text(f"lookahead: {{spec: '2,4,2'}}\n{section}\n")
    with pytest.raises(ConfigError) as info:
        load_config(p, display="c.yml")
    assert fragment in str(info.value) and "c.yml:2:" in str(info.value)


def test_an_integer_is_a_float_and_a_boolean_a_boolean(tmp_path):
    p = tmp_path / "c.yml"
    p.write_text("lookahead: {spec: '2,4,2', corrected_keying: true}\nserve: {prefill_stall: 2}\n")
    cfg = load_config(p).config
    assert cfg.serve.prefill_stall == 2.0 and cfg.lookahead.corrected_keying is True


@pytest.mark.parametrize("text, said", [
    ("lookahead:\n", "lookahead: expected a section of keys (key: value lines below it), got nothing (the key is "
     "there with no value)"),
    ("lookahead: {spec: '2,4,2'}\nmodel: {path: 123}\n", "model.path: expected a path, as text, got 123"),
    ("lookahead: {spec: '2,4,2'}\nbuild: {max_batch_size: [1]}\n", "build.max_batch_size: expected a whole number, "
     "got a list"),
    ("lookahead: {spec: '2,4,2'}\nserve: {host: [1]}\n", "serve.host: expected text, got a list"),
])
def test_a_value_of_the_wrong_kind_is_said_in_the_configs_words(tmp_path, text, said):
    """Not pydantic's ("Input should be a valid dictionary or instance of LookaheadSection")."""
    p = tmp_path / "c.yml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p, display="c.yml")
    assert said in str(info.value) and "instance of" not in str(info.value)

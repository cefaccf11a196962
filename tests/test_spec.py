"""The (W,N,G) value object: derived numbers, legality rules, parsing, admission."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trtlade.spec import (
    AUTOREGRESSIVE,
    FIELD_ALIASES,
    LookaheadSpec,
    SpecError,
    fitting_specs,
)

# (W, N, G) -> max_draft_len, from trtllm-facts.md
DRAFT_LEN_TABLE = [
    ((4, 2, 4), 7),
    ((7, 7, 7), 83),
    ((4, 3, 4), 15),
    ((8, 8, 8), 111),
    ((15, 5, 15), 119),
    ((1, 1, 0), 0),
    ((2, 2, 1), 2),
]


@pytest.mark.parametrize("wng,draft", DRAFT_LEN_TABLE)
def test_max_draft_len_formula(wng, draft):
    s = LookaheadSpec(*wng)
    assert s.max_draft_len == draft
    assert s.decoding_tokens == draft + 1
    assert s.max_path_len == wng[1]
    assert s.max_draft_path_len == wng[1] - 1


@given(st.integers(1, 40), st.integers(2, 12), st.integers(0, 40))
def test_decoding_tokens_is_window_plus_guesses_times_levels(w, n, g):
    # (W+G)(N-1) rows including the golden token, for every N >= 2
    assert LookaheadSpec(w, n, g).decoding_tokens == (w + g) * (n - 1)


ILLEGAL = [
    ((4, 0, 4), "ngramSize requires >= 1", "ngram_size"),
    ((0, 2, 4), "windowSize requires >= 1", "window_size"),
    ((4, 2, -1), "verificationSetSize requires >=0", "verification_set_size"),
    ((4, 1, 0), "ngramSize=1 requires windowSize=1", "window_size"),
    ((1, 1, 2), "ngramSize=1 requires verificationSetSize=0", "verification_set_size"),
    # several rules broken: the first in LookaheadDecodingConfig's constructor order names the refusal
    ((4, 1, 2), "ngramSize=1 requires verificationSetSize=0", "verification_set_size"),
    ((1, 1, -1), "ngramSize=1 requires verificationSetSize=0", "verification_set_size"),
    ((4, 1, -1), "ngramSize=1 requires verificationSetSize=0", "verification_set_size"),
    ((2**31, 2, 2), "SizeType32", "window_size"),
    ((4, 2**31, 4), "SizeType32", "ngram_size"),
    ((4, 2, 2**31), "SizeType32", "verification_set_size"),
    ((2**31 - 1, 2, 1), "SizeType32", "window_size"),  # each size an int32, but 2**31 tokens a step
    ((4, 2, 2**31 - 1), "SizeType32", "window_size"),
]


def test_the_largest_int32_step_is_legal():
    """2**31 - 1 is the largest SizeType32: a spec whose step has that many tokens is legal (with the draft-tokens
    warning); one token more is refused (the last rows of ILLEGAL)."""
    spec = LookaheadSpec(2**31 - 2, 2, 1)
    assert spec.decoding_tokens == 2**31 - 1 and spec.warnings()


@pytest.mark.parametrize("wng,rule,field", ILLEGAL)
def test_illegal_specs_name_the_rule(wng, rule, field):
    with pytest.raises(SpecError) as info:
        LookaheadSpec(*wng)
    assert info.value.rule == rule
    assert info.value.field == field
    assert rule in str(info.value)
    assert info.value.hint


@pytest.mark.parametrize(
    "text",
    ["4,2,4", "[4,2,4]", "(4, 2, 4)", " 4 , 2 , 4 ", "4-2-4", "4 2 4", [4, 2, 4], (4, 2, 4), ["4", "2", "4"],
     '{"window_size": 4, "ngram_size": 2, "verification_set_size": 4}'],
)
def test_parse_forms(text):
    assert LookaheadSpec.parse(text) == LookaheadSpec(4, 2, 4)


@pytest.mark.parametrize("w_key", FIELD_ALIASES["window_size"])
@pytest.mark.parametrize("n_key", FIELD_ALIASES["ngram_size"])
def test_every_alias_spelling(w_key, n_key):
    g_key = FIELD_ALIASES["verification_set_size"][-1]
    assert LookaheadSpec.parse({w_key: 7, n_key: 5, g_key: 3}) == LookaheadSpec(7, 5, 3)


@pytest.mark.parametrize(
    "bad,rule",
    [("4,2", "parse"), ("4,2,4,4", "parse"), ("a,b,c", "type"), ("", "parse"), ([4, 2.5, 4], "type"),
     ({"window_size": 4, "ngram_size": 2}, "parse"), ({"window": 4}, "parse"), ([True, 2, 4], "type"),
     ({"w": 4, "window_size": 4, "n": 2, "g": 1}, "parse"), (None, "parse"), ("{not json", "parse")],
)
def test_parse_errors(bad, rule):
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse(bad)
    assert info.value.rule == rule
    assert info.value.hint


@pytest.mark.parametrize("bad", ["4 -2 4", "4--2-4", "-4-2-4", "[4 -2 4]", "2 x -2 x 1"])
def test_a_minus_sign_is_never_read_as_a_separator(bad):
    """Without commas "-" separates ("4-2-4"), but a minus before a number is its sign: "4 -2 4" was (4,2,4)."""
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse(bad)
    assert info.value.message == f"a negative number in {bad!r}" and info.value.rule == "parse"
    assert LookaheadSpec.parse("4-2-4") == LookaheadSpec(4, 2, 4)


def test_a_non_ascii_digit_says_ascii_is_needed():
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse("\u0664,\u0662,\u0664")  # Arabic-Indic 4,2,4
    assert "ASCII digits" in info.value.hint


@pytest.mark.parametrize("bad", ["4,2,4,", ",4,2,4", "4,,2", "4-2-"])
def test_an_empty_field_is_said_as_such_not_counted_as_a_number(bad):
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse(bad)
    assert info.value.message == f"an empty field in {bad!r}" and info.value.rule == "parse"


@pytest.mark.parametrize("bad,count", [("x", 0), ("-", 0), ("9,9", 2), ("abc", 1)])
def test_a_spec_error_counts_the_numbers_given(bad, count):
    with pytest.raises(SpecError, match=f"three numbers \\(W,N,G\\), got {count} in"):
        LookaheadSpec.parse(bad)


def test_unknown_key_suggests_the_near_spelling():
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse({"window_sise": 4, "ngram_size": 2, "verification_set_size": 4})
    assert "did you mean 'window_size'" in info.value.hint


@pytest.mark.parametrize(
    "server,request_,admitted,excess",
    [
        ((4, 2, 4), (4, 2, 4), True, []),
        ((4, 2, 4), (2, 2, 1), True, []),
        ((4, 2, 4), (1, 1, 0), True, []),
        ((4, 2, 4), (5, 2, 4), False, [("window_size", 5, 4)]),
        ((4, 2, 4), (4, 3, 5), False, [("ngram_size", 3, 2), ("verification_set_size", 5, 4)]),
    ],
)
def test_admits_is_isLE(server, request_, admitted, excess):
    s, r = LookaheadSpec(*server), LookaheadSpec(*request_)
    assert s.admits(r) is admitted
    assert s.excess(r) == excess


def test_autoregressive_and_warnings():
    assert AUTOREGRESSIVE.is_autoregressive and AUTOREGRESSIVE.warnings() == []
    assert not AUTOREGRESSIVE.llmapi_compatible  # the 1.x LLM API wants every field > 0
    assert not LookaheadSpec(2, 2, 1).warnings()
    assert [w.code for w in LookaheadSpec(1, 2, 1).warnings()] == ["below-minimum"]
    assert [w.code for w in LookaheadSpec(2, 2, 0).warnings()] == ["below-minimum"]
    assert [w.code for w in LookaheadSpec(20, 8, 20).warnings()] == ["too-many-draft-tokens"]


def test_frozen_and_hashable():
    s = LookaheadSpec(4, 2, 4)
    with pytest.raises(AttributeError):
        s.window_size = 5  # type: ignore[misc]
    assert {s: 1}[LookaheadSpec.parse("4,2,4")] == 1


def test_fitting_specs_all_match_and_nearest_first():
    found = fitting_specs(39, near=LookaheadSpec(4, 3, 4), limit=10)
    assert found and all(s.max_draft_len == 39 for s in found)
    dist = [sum(abs(a - b) for a, b in zip(s.as_tuple(), (4, 3, 4))) for s in found]
    assert dist == sorted(dist)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtlade", *args], capture_output=True, text=True)


def test_cli_spec_json():
    out = _cli("spec", "7,7,7", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["max_draft_len"] == 83 and data["decoding_tokens"] == 84 and data["max_path_len"] == 7
    assert data["trtllm_build_flags"] == ["--speculative_decoding_mode", "lookahead_decoding",
                                          "--max_draft_len", "83"]


def test_cli_spec_illegal_exits_1_with_rule_and_no_traceback():
    out = _cli("spec", "4,1,4")
    assert out.returncode == 1
    assert "ngramSize=1 requires verificationSetSize=0" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_cli_spec_request_not_admitted_exits_1():
    out = _cli("spec", "4,2,4", "--request", "5,2,4", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["request"]["excess"] == [
        {"field": "window_size", "requested": 5, "limit": 4}]
    assert out.stderr.startswith("error: --request (5,2,4) is not admitted by (4,2,4): window_size 5 > 4")
    assert "hint: lower the request to at most (4,2,4), or serve (W,N,G) = (5,2,4)" in out.stderr


@pytest.mark.parametrize("bad", ["٢,٢,١", ["٢", "2", "1"], {"w": "²", "n": 2, "g": 1}])
def test_only_ascii_digits_are_numbers(bad):
    """Python's int() reads Arabic-Indic digits (and isdigit() admits superscripts, which int() refuses): a spec is
    written in ASCII digits, as TensorRT-LLM reads it."""
    with pytest.raises(SpecError) as info:
        LookaheadSpec.parse(bad)
    assert info.value.rule == "type"

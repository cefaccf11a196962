"""trtlade tune: candidate pruning, the noise-aware choice on synthetic measurements, the schedule it
writes into a config (comments kept), and a short end-to-end tune against a tiny-model server."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trtlade.bench.noise import margin, t_quantile
from trtlade.schedule import LookaheadSchedule
from trtlade.spec import AUTOREGRESSIVE as AR
from trtlade.spec import LookaheadSpec as S
from trtlade.tune.apply import ApplyError, apply_schedule, with_schedule
from trtlade.tune.candidates import admitted_specs, drafters_of, explicit, prune
from trtlade.tune.select import Run, choose, is_lookahead, schedule_of, speculative_config_of, tabulate


# ------------------------------------------------------------------------------------ candidates
@pytest.mark.parametrize("server,max_c,expect", [
    (S(2, 4, 2), 6, ["1,1,0", "2,4,2", "2,2,1", "2,2,2", "2,3,1", "2,3,2", "2,4,1"]),
    (S(2, 4, 2), 2, ["1,1,0", "2,4,2", "2,3,1"]),  # one more: the middle draft length
    (S(4, 2, 4), 1, ["1,1,0", "4,2,4"]),
    (S(1, 1, 0), 6, ["1,1,0"]),  # nothing to tune: plain decoding only
    (S(2, 2, 0), 6, ["1,1,0"]),  # only specs below (2,2,1): pruned
])
def test_pruning_keeps_the_server_spec_and_spreads_the_rest(server, max_c, expect):
    picked = prune(server, max_c)
    assert [str(s) for s in picked.specs] == expect
    assert picked.steps[0].count == len(admitted_specs(server))
    assert all(server.admits(s) for s in picked.specs)


def test_explicit_candidates_add_the_baseline_and_refuse_what_the_server_does_not_admit():
    assert [str(s) for s in explicit([S(2, 2, 1), S(2, 2, 1)], S(4, 2, 4)).specs] == ["1,1,0", "2,2,1"]
    with pytest.raises(ValueError, match="not admitted"):
        explicit([S(4, 3, 4)], S(4, 2, 4))


# ------------------------------------------------------------------------------------ choice
def margin_own_sd(ratios) -> float:
    """The sd of a cell's log ratios (its own noise)."""
    return statistics.stdev(math.log(r) for r in ratios)


def runs(table: dict, repeats=2, ttft=100.0, tpot=40.0):
    """{(spec, level): [throughput per repeat]} -> runs."""
    return [Run(spec, level, r, values[r], ttft, tpot) for (spec, level), values in table.items()
            for r in range(repeats)]


LA, BIG = S(2, 2, 1), S(2, 4, 2)


def test_the_fastest_spec_beyond_noise_wins_and_ties_go_to_plain_decoding():
    t = tabulate(runs({(AR, 1): [20, 20.4], (LA, 1): [24, 24.6], (BIG, 1): [26, 26.4],
                       (AR, 4): [70, 71], (LA, 4): [70.2, 70.9], (BIG, 4): [60, 61]}))
    picks = {c.concurrency: c for c in choose(t)}
    assert picks[1].spec == BIG and picks[1].speedup == pytest.approx((26 / 20 * 26.4 / 20.4) ** 0.5)  # geometric
    assert picks[4].spec == AR and "does not clear the noise threshold" in picks[4].reason
    assert str(schedule_of(list(picks.values()))) == "<=1: 2,4,2; else: 1,1,0"


def test_noisy_repeats_raise_the_bar():
    quiet = tabulate(runs({(AR, 1): [20, 20], (LA, 1): [21.2, 21.2]}))
    noisy = tabulate(runs({(AR, 1): [20, 20], (LA, 1): [24, 18.4]}))  # same mean speedup, 1.06x
    assert choose(quiet)[0].spec == LA
    assert noisy.noise.sd > 0.1 and choose(noisy)[0].spec == AR


def test_a_spec_that_scattered_within_chance_of_the_level_is_judged_at_the_levels_noise():
    """+30% in two repeats of +26% and +34% beside specs equal to (1,1,0) whose repeats moved by 2-3%: its own sd
    (one degree of freedom) is about twice theirs, within chance of it (F test), so the level's noise judges it and
    it is chosen. Taken whenever larger than the level's, its own set a bar above 2x and (1,1,0) kept the level."""
    t = tabulate(runs({(AR, 1): [100, 100], (BIG, 1): [126, 134], (S(2, 2, 2), 1): [101, 103],
                       (S(2, 3, 1), 1): [99, 97.5], (S(2, 3, 2), 1): [102, 100.5], (S(2, 4, 1), 1): [100, 102.5]}))
    cell = t.cell(BIG, 1)
    assert 1.5 < margin_own_sd(cell.ratios) / t.noise_without(cell).sd < 3
    [choice] = choose(t)
    assert choice.spec == BIG and choice.speedup == pytest.approx((1.26 * 1.34) ** 0.5)
    assert t.threshold(cell, 5) < 1.2 < 2 < 1 + margin(cell.ratios, t.noise_by_level[1], 5, above=True)


def test_a_spec_that_scattered_beyond_chance_of_the_level_is_judged_on_its_own_noise():
    """Three repeats of +0%, +60% and +30% beside specs whose repeats moved by 1%: its own scatter is far beyond
    theirs (F test), so its own noise on its 2 degrees of freedom judges it, and a mean of +28% does not clear it
    (the level's noise, which its scatter inflates, would have let it through)."""
    t = tabulate(runs({(AR, 1): [100, 100, 100], (BIG, 1): [100, 160, 130], (LA, 1): [101, 100, 100.8],
                       (S(2, 2, 2), 1): [99, 99.5, 100.2], (S(2, 3, 1), 1): [100.4, 99.4, 100.3]}, repeats=3))
    cell, level, k = t.cell(BIG, 1), t.noise_by_level[1], t.comparisons(1)
    assert choose(t)[0].spec == AR
    at_the_levels = math.exp(t_quantile(level.dof, 1 - 2 * 0.05 / k) * level.sd / math.sqrt(3))
    assert t.threshold(cell, k) > 2.0 and at_the_levels < cell.speedup < 1.3


def test_latency_limits_exclude_specs_before_throughput_counts():
    rs = runs({(AR, 1): [20, 20], (LA, 1): [23, 23]}) + [Run(BIG, 1, r, 30, 900.0, 20.0) for r in range(2)]
    assert choose(tabulate(rs))[0].spec == BIG
    limited = choose(tabulate(rs), max_ttft_ms=500)[0]
    assert limited.spec == LA and "2,4,2 over --max-ttft-ms" not in limited.reason
    assert choose(tabulate(rs), max_ttft_ms=500, max_tpot_ms=30)[0].spec == AR


def test_a_spec_whose_requests_failed_is_never_chosen_however_fast_the_rest_ran():
    """Throughput counts completed requests only: a spec that fails one request in four is not a choice."""
    rs = runs({(AR, 1): [20, 20.2], (LA, 1): [23, 23.1]}) + [Run(BIG, 1, r, 40.0, 90.0, 20.0, failed=r)
                                                              for r in range(2)]
    t = tabulate(rs)
    assert t.cell(BIG, 1).failed == 1 and t.cell(LA, 1).failed == 0
    pick = choose(t)[0]
    assert pick.spec == LA
    broken = tabulate(runs({(AR, 1): [20, 20.2], (LA, 1): [23, 23.1]}) + [Run(BIG, 1, 0, 40.0, 90.0, 20.0, failed=2),
                                                                          Run(BIG, 1, 1, 41.0, 90.0, 20.0)])
    assert choose(broken)[0].spec == LA
    only = tabulate([Run(AR, 1, r, 20.0, 90.0, 40.0) for r in range(2)]
                    + [Run(BIG, 1, r, 40.0, 90.0, 20.0, failed=1) for r in range(2)])
    assert choose(only)[0].spec == AR and "2,4,2: 2 failed request(s)" in choose(only)[0].reason


def test_the_report_names_each_cell_whose_requests_failed():
    from trtlade.tune.report import _failed_cells, cell_rows

    t = tabulate(runs({(AR, 1): [20, 20.2], (LA, 4): [23, 23.1], (AR, 4): [20, 20]})
                 + [Run(LA, 1, r, 40.0, 90.0, 20.0, failed=2) for r in range(2)])
    assert _failed_cells(t) == "(2,2,1) at 1: 4"
    assert {(r["spec"], r["concurrency"]): r["failed_requests"] for r in cell_rows(t)}[("2,2,1", 1)] == 4


def test_a_failed_cell_neither_widens_the_levels_noise_nor_counts_among_its_candidates():
    steady = runs({(AR, 1): [20, 20, 20], (LA, 1): [21.1, 21.2, 21.15]}, repeats=3)
    assert choose(tabulate(steady))[0].spec == LA
    collapsed = steady + [Run(BIG, 1, r, v, 90.0, 20.0, failed=3 if r == 1 else 0) for r, v in enumerate((24, 8, 23.8))]
    t = tabulate(collapsed)
    assert t.noise_by_level[1].sd == tabulate(steady).noise_by_level[1].sd and t.comparisons(1) == 1
    assert choose(t)[0].spec == LA


def test_where_plain_decodings_own_requests_failed_nothing_is_chosen():
    rs = runs({(LA, 1): [30, 30.2]}) + [Run(AR, 1, r, 20.0, 90.0, 40.0, failed=1 - r) for r in range(2)]
    pick = choose(tabulate(rs))[0]
    assert pick.spec == AR and "(1,1,0) had 1 failed request(s)" in pick.reason
    sa = drafters_of(["sa"], 8)[0]
    drafted = [Run(sa, 1, r, 30.0 + r, 90.0, 20.0) for r in range(2)] + [Run(AR, 1, r, 20.0, 90.0, 40.0, failed=1)
                                                                        for r in range(2)]
    assert "(1,1,0) had 2 failed request(s)" in speculative_config_of(tabulate(drafted)).reason


def test_runs_without_the_baseline_are_refused():
    with pytest.raises(ValueError, match="plain decoding"):
        tabulate([Run(LA, 1, 0, 10.0, None, None)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 2.0), st.floats(0.5, 2.0)), min_size=1, max_size=4),
       st.floats(10, 100))
def test_a_chosen_spec_always_clears_the_threshold(ratios, base):
    specs = [S(2, 2, 1), S(2, 2, 2), S(2, 3, 1), S(2, 4, 2)][:len(ratios)]
    table = {(AR, 1): [base, base * 1.01]}
    for spec, (a, b) in zip(specs, ratios):
        table[(spec, 1)] = [base * a, base * 1.01 * b]
    t = tabulate(runs(table))
    [choice] = choose(t)
    bars = {s: t.threshold(t.cell(s, 1), len(specs)) for s in specs}
    clear = [s for s in specs if t.cell(s, 1).speedup > bars[s]]
    if choice.spec != AR:
        assert choice.speedup > bars[choice.spec]
        assert choice.speedup == max(t.cell(s, 1).speedup for s in clear)
    else:
        assert clear == []


def test_one_repeat_chooses_nothing_its_noise_is_unmeasured():
    t = tabulate(runs({(AR, 1): [20], (LA, 1): [30]}, repeats=1))
    [choice] = choose(t)
    assert choice.spec == AR and "one paired sample" in choice.reason and t.threshold(t.cell(LA, 1)) is None


def test_the_spec_with_the_larger_paired_speedup_wins_whatever_its_mean_throughput():
    """Repeats draw different prompts: a spec measured in fast repeats has the larger mean tok/s, but the paired
    speedup is what compares like with like (it was ranked by mean tok/s and then fell back to (1,1,0))."""
    big = S(4, 2, 4)
    t = tabulate(runs({(AR, 1): [100, 1000, 100, 100, 100], (LA, 1): [120, 1450, 120, 120, 120],
                       (big, 1): [150, 1300, 150, 150, 150]}, repeats=5))
    assert t.cell(LA, 1).mean_throughput > t.cell(big, 1).mean_throughput  # LA: 1.2x but 1.45x; big 1.5x but 1.3x
    [choice] = choose(t)
    assert choice.spec == big and choice.speedup == pytest.approx((1.5 ** 4 * 1.3) ** (1 / 5))
    assert t.cell(LA, 1).speedup > t.threshold(t.cell(LA, 1), 2)  # both clear: the larger speedup is chosen


def test_the_best_of_six_candidates_equal_to_plain_decoding_is_picked_at_most_5_percent_of_runs():
    """Taking the best of K and testing it as if alone picked one by luck in 16-19% of runs; the confidence
    shared over the K candidates (Bonferroni) keeps that under 5% (simulated, every run ~ N(100, 5) tok/s)."""
    import random

    rng = random.Random(11)
    specs = [S(2, 2, 1), S(2, 2, 2), S(2, 3, 1), S(2, 3, 2), S(2, 4, 1), S(2, 4, 2)]
    for repeats in (2, 3):
        picked = 0
        for _ in range(600):
            table = {(spec, 1): [rng.gauss(100, 5) for _ in range(repeats)] for spec in [AR, *specs]}
            picked += choose(tabulate(runs(table, repeats=repeats)))[0].spec != AR
        assert picked / 600 <= 0.05


def test_a_spec_30_percent_faster_among_five_equal_ones_is_found_at_two_repeats():
    """The choice's power, simulated (each run's throughput with 3.5% log-normal noise of its own, a shift shared by
    the runs of a repeat): the +30% spec is chosen in nearly every run. When a cell's own noise (one degree of
    freedom) replaced the level's wherever larger, it was found in about 64% of runs
    (benchmarks/choice_rates.py)."""
    import random

    rng = random.Random(5)
    specs = [S(2, 2, 1), S(2, 2, 2), S(2, 3, 1), S(2, 3, 2), S(2, 4, 1), S(2, 4, 2)]
    found = 0
    for _ in range(300):
        shifts = [rng.gauss(0, 0.1) for _ in range(2)]
        table = {(spec, 1): [100 * (1.3 if spec == specs[-1] else 1.0) * math.exp(shift + rng.gauss(0, 0.035))
                             for shift in shifts] for spec in [AR, *specs]}
        found += choose(tabulate(runs(table)))[0].spec == specs[-1]
    assert found / 300 >= 0.95


# ------------------------------------------------------------------------------------ apply
CONFIG = """# deployment
model: {}   # the embedded model
lookahead:
  spec: 2,4,2                   # the server's (W,N,G)

serve:
  engine: reference
"""


def test_apply_keeps_every_line_and_comment_and_replaces_an_old_schedule():
    schedule = LookaheadSchedule.parse([{"up_to": 2, "spec": "2,4,2"}, {"spec": "1,1,0"}])
    text = with_schedule(CONFIG, schedule)
    assert text == CONFIG.replace("W,N,G)\n", "W,N,G)\n  schedule:\n  - {up_to: 2, spec: '2,4,2'}\n"
                                  "  - {spec: '1,1,0'}\n")
    again = with_schedule(text, LookaheadSchedule.parse([{"spec": "2,2,1"}]))
    assert again == CONFIG.replace("W,N,G)\n", "W,N,G)\n  schedule:\n  - {spec: '2,2,1'}\n")


SCHEDULE = LookaheadSchedule.parse([{"up_to": 2, "spec": "2,3,2"}, {"spec": "1,1,0"}])


def test_apply_changes_no_byte_but_the_schedule(tmp_path):
    """Four-space indentation, CRLF line ends, a byte-order mark, the comments and blank lines after an old schedule
    (they describe the next key or section), `null`, odd spacing: all as they were; the file's mode too."""
    text = ("# deployment\r\nmodel: {}\r\nlookahead:\r\n    spec: 2,4,2      # the server's\r\n    preset: null\r\n"
            "    schedule:   # measured in November\r\n    - {up_to: 1, spec: '2,4,2'}\r\n        # an old note\r\n"
            "    - {spec: '1,1,0'}\r\n\r\n    # keep corrected keying off\r\n    corrected_keying: false\r\n\r\n"
            "# ---- serving ----\r\nserve:\r\n    engine:   reference\r\n")
    path = tmp_path / "deploy.yml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    path.chmod(0o600)
    apply_schedule(path, SCHEDULE)
    want = text.replace("    - {up_to: 1, spec: '2,4,2'}\r\n        # an old note\r\n    - {spec: '1,1,0'}\r\n",
                        "    - {up_to: 2, spec: '2,3,2'}\r\n    - {spec: '1,1,0'}\r\n")
    assert path.read_bytes() == b"\xef\xbb\xbf" + want.encode()
    assert path.stat().st_mode & 0o777 == 0o600


def test_apply_keeps_the_file_as_it_was_with_the_comments_among_the_old_schedule(tmp_path):
    """The old schedule's items and the comments among them are replaced: a byte-for-byte copy keeps them, with
    the file's mode; a copy that cannot be written leaves the config as it was."""
    text = CONFIG.replace("W,N,G)\n", "W,N,G)\n  schedule:\n  - {up_to: 1, spec: '2,4,2'}\n    # measured on the A10\n"
                                    "  - {spec: '1,1,0'}\n")
    path, kept = tmp_path / "deploy.yml", tmp_path / "before.yml"
    path.write_text(text)
    path.chmod(0o640)
    apply_schedule(path, SCHEDULE, keep=kept)
    assert kept.read_text() == text and kept.stat().st_mode & 0o777 == 0o640
    assert "# measured on the A10" not in path.read_text()
    path.write_text(text)
    with pytest.raises(ApplyError, match="cannot keep a copy of .* so .* was not replaced"):
        apply_schedule(path, SCHEDULE, keep=tmp_path / "missing" / "before.yml")
    assert path.read_text() == text


def test_apply_through_a_symlink_writes_the_file_it_points_to(tmp_path):
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "deploy.yml"
    real.write_text(CONFIG)
    link = tmp_path / "deploy.yml"
    link.symlink_to(real)
    apply_schedule(link, SCHEDULE)
    assert link.is_symlink() and "schedule:" in real.read_text()


@pytest.mark.parametrize("setup, fragment", [
    ("hardlink", "hard links"),
    ("latin1", "is not UTF-8"),
    ("speculation", "has no lookahead section"),
    ("trtllm-serve", "is a trtllm-serve file"),
    ("changed", "changed while the schedule was being written"),
])
def test_apply_refuses_what_it_cannot_write_safely_and_says_why(tmp_path, monkeypatch, setup, fragment):
    import trtlade.tune.apply as apply

    path = tmp_path / "deploy.yml"
    path.write_text(CONFIG)
    if setup == "hardlink":
        (tmp_path / "other.yml").hardlink_to(path)
    elif setup == "latin1":
        path.write_bytes(CONFIG.replace("# deployment", "# r\xe9glage").encode("latin-1"))
    elif setup == "speculation":
        path.write_text("model: {}\nspeculation: {decoding_type: SA, max_draft_len: 4}\nserve: {engine: reference}\n")
    elif setup == "trtllm-serve":
        path.write_text("speculative_config: {decoding_type: NGram, max_draft_len: 4, max_matching_ngram_size: 2}\n")
    elif setup == "changed":  # an edit saved while tune ran, between reading the file and replacing it
        real = apply.with_schedule
        monkeypatch.setattr(apply, "with_schedule", lambda *a, **k: (path.write_text(CONFIG + "# mine\n"),
                                                                     real(*a, **k))[1])
    before = path.read_bytes()
    with pytest.raises(ApplyError, match=fragment) as info:
        apply_schedule(path, SCHEDULE)
    assert info.value.hint and (path.read_bytes() == before or setup == "changed")
    if setup == "changed":
        assert path.read_text().endswith("# mine\n")  # the user's edit stands


@pytest.mark.parametrize("policy, note", [
    ("", "requests that name no lookahead now follow the schedule (they were served by auto)"),
    ("  policy: fixed\n", "lookahead.policy is fixed: the schedule serves the requests that send"),
    ("  policy: schedule\n", None),
])
def test_apply_says_what_the_schedule_changes_for_requests_without_a_lookahead(tmp_path, capsys, policy, note):
    from types import SimpleNamespace

    from trtlade.cli.tune import _apply

    path = tmp_path / "deploy.yml"
    text = CONFIG.replace("                   # the server's (W,N,G)\n", "\n" + policy)
    if policy.strip() == "policy: schedule":
        text = text.replace(policy, policy + "  schedule:\n  - {spec: '1,1,0'}\n")
    path.write_text(text)
    (tmp_path / "report").mkdir()
    _apply(path, SimpleNamespace(schedule=SCHEDULE, failed_requests=0), tmp_path / "report", path.read_bytes())
    err = " ".join(capsys.readouterr().err.split())
    assert "wrote lookahead.schedule into" in err
    assert f"(the file as it was: {tmp_path / 'report' / 'before-apply-deploy.yml'})" in err
    assert (note in err) if note else ("note:" not in err)


@pytest.mark.parametrize("config,fragment", [
    (CONFIG.replace("spec: 2,4,2", "spec: 2,2,2"), "is not admitted"),
    (CONFIG.replace("spec: 2,4,2 ", "spec: 2,4,2\n  request_default: 1,1,0 "), "request_default"),
    ("lookahead: {spec: 0,0,0}\n", "not a valid trtlade config"),
])
def test_apply_refuses_a_schedule_the_config_cannot_hold(config, fragment):
    with pytest.raises(ApplyError, match=fragment) as info:
        with_schedule(config, LookaheadSchedule.parse([{"up_to": 1, "spec": "2,4,2"}, {"spec": "1,1,0"}]))
    assert info.value.hint


@pytest.mark.parametrize("args, text, fragment", [
    (["--apply", "{config}"], "lookahead: [\n", "not a valid trtlade config"),
    (["--apply", "{config}"], CONFIG.replace("spec: 2,4,2 ", "spec: 2,4,2\n  request_default: 1,1,0 "),
     "request_default"),
    (["--drafters", "ngram,bogus"], CONFIG, "'bogus' names no drafter"),
    (["--apply", "{config}", "--repeats", "1"], CONFIG, "one repeat measures no noise"),
    (["--candidates", ""], CONFIG, "--candidates is empty"),
    (["--prefix-cache", "flush"], CONFIG, "'flush' is not a prefix-cache rule"),
    (["--top-p", "0.5"], CONFIG, "top_p 0.5 without a temperature"),                # greedy: not sent
    (["--config", "{config}"], CONFIG + "bench:\n  top_p: 0.5\n", "deploy.yml:9:10: bench.top_p: top_p 0.5 without"),
    (["--drafters", ""], CONFIG, "--drafters is empty"),                              # not the defaults
])
def test_tune_refuses_what_it_would_refuse_after_the_run_before_it(tmp_path, args, text, fragment):
    """No server is reached (the URL is closed): the refusal comes first, not after minutes of measuring."""
    from trtlade.cli.main import app as cli

    config = tmp_path / "deploy.yml"
    config.write_text(text)
    result = CliRunner().invoke(cli, ["tune", "--base-url", "http://127.0.0.1:9", "--result-dir", str(tmp_path / "r"),
                                      *[a.format(config=config) for a in args]])
    usage = any(w in fragment for w in ("--", "names no", "not a prefix", "without a temp", "one repeat"))
    assert result.exit_code == (1 if fragment.startswith("deploy.yml") else 2 if usage else 1), result.output
    assert fragment in result.output and "hint:" in result.output
    assert "cannot reach" not in result.output and not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ end to end
def test_a_short_tune_against_a_tiny_model_server_writes_report_and_schedule(tmp_path: Path):
    from fake_engine import uvicorn_thread
    from models import tiny_engine
    from trtlade.cli.main import app as cli
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (2, 3, 2))
    config = tmp_path / "deploy.yml"
    config.write_text("# mine\nmodel: {}\nlookahead:\n  spec: 2,3,2   # W,N,G\n")
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4, details={"preset": "trtllm"}))
    with uvicorn_thread(app) as url:
        result = CliRunner().invoke(cli, [
            "tune", "--base-url", url, "--endpoint", "completions", "--dataset", "random", "-c", "1,2",
            "--repeats", "2", "-n", "2", "--max-tokens", "6", "--candidates", "2-2-1 2-3-2", "--drafters", "none",
            "--result-dir", str(tmp_path / "reports"), "--apply", str(config), "--no-plots"])
    assert result.exit_code == 0, result.output
    [folder] = list((tmp_path / "reports").iterdir())
    data = json.loads((folder / "tune.json").read_text())
    assert data["server_spec"] == "2,3,2" and data["candidates"] == ["1,1,0", "2,2,1", "2,3,2"]
    assert len(data["runs"]) == 2 * 2 * 3 and data["failed_requests"] == 0
    assert {(c["spec"], c["concurrency"]) for c in data["cells"]} == {
        (s, c) for s in data["candidates"] for c in (1, 2)}
    schedule = LookaheadSchedule.parse(data["schedule"])
    assert [c["spec"] for c in data["choices"]] == [str(schedule.spec_for(1)), str(schedule.spec_for(2))]
    built = data["recommended_engine"]["build_command"]
    if schedule.smallest_engine_spec().is_autoregressive:  # nothing beat plain decoding: nothing to build
        assert built is None and "No lookahead engine to build." in (folder / "summary.md").read_text()
    else:
        assert built.startswith("trtlade build --model tiny-llama --wng ")
    for name in ("summary.md", "schedule.yml", "cells.csv"):
        assert (folder / name).is_file()
    summary = (folder / "summary.md").read_text()
    assert "## Noise" in summary and "Served by: reference engine, preset trtllm, (W,N,G) = (2,3,2)" in summary
    from trtlade.host import host_info

    assert f"Host: {host_info()['cpu']}" in summary and "the load generator and the server" in summary
    written = config.read_text()
    assert written.startswith("# mine\nmodel: {}\nlookahead:\n  spec: 2,3,2   # W,N,G\n  schedule:\n")
    before = "# mine\nmodel: {}\nlookahead:\n  spec: 2,3,2   # W,N,G\n"
    assert (folder / "before-apply-deploy.yml").read_text() == before
    from trtlade.config.loader import load_config

    assert load_config(config).config.lookahead.lookahead_schedule == schedule


@pytest.mark.parametrize("flag, config_rule, cleared", [(None, None, True), (None, "keep", False),
                                                       ("clear", "keep", True), ("keep", None, False)])
def test_tune_clears_the_prefix_cache_by_the_flag_else_the_configs_bench_section(
        tmp_path, monkeypatch, flag, config_rule, cleared):
    """As bench: --prefix-cache, else bench.prefix_cache, else clear; the report and tune.json say which."""
    import trtlade.bench.runner as runner
    from fake_engine import uvicorn_thread
    from models import tiny_engine
    from trtlade.cli.main import app as cli
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    clears = []
    real = runner.clear_prefix_cache

    async def counted(*args, **kwargs):
        clears.append(args[1])
        return await real(*args, **kwargs)

    monkeypatch.setattr(runner, "clear_prefix_cache", counted)
    config = tmp_path / "c.yml"
    config.write_text("model: {}\nlookahead: {spec: '2,2,1'}\n" + (f"bench: {{prefix_cache: {config_rule}}}\n"
                                                                  if config_rule else ""))
    app = create_app(lambda: ReferenceServingEngine(tiny_engine("llama", (2, 2, 1)), max_batch_size=2))
    with uvicorn_thread(app) as url:
        result = CliRunner().invoke(cli, [
            "tune", "--base-url", url, "--config", str(config), "--endpoint", "completions", "--dataset", "random",
            "-c", "1", "--repeats", "2", "-n", "1", "--max-tokens", "2", "--candidates", "2-2-1", "--drafters", "none",
            "--result-dir", str(tmp_path / "r"), "--no-plots", *(["--prefix-cache", flag] if flag else [])])
    assert result.exit_code == 0, result.output
    assert bool(clears) == cleared
    [folder] = list((tmp_path / "r").iterdir())
    assert json.loads((folder / "tune.json").read_text())["settings"]["prefix_cache"] == ("clear" if cleared
                                                                                         else "keep")
    assert ("cleared before every series" if cleared else "kept between series") in " ".join(
        (folder / "summary.md").read_text().split())


def test_each_level_is_judged_by_its_own_noise():
    """The same +6% at a quiet level is chosen and at a noisy level is not."""
    t = tabulate(runs({(AR, 1): [20, 20], (LA, 1): [21.2, 21.2], (BIG, 1): [20.0, 20.1],
                       (AR, 8): [100, 100], (LA, 8): [118, 94], (BIG, 8): [95, 105]}))
    assert t.threshold(t.cell(LA, 1), 2) < 1.06 < 1.1 < t.threshold(t.cell(LA, 8), 2)
    picks = {c.concurrency: c.spec for c in choose(t)}
    assert picks == {1: LA, 8: AR}


# ------------------------------------------------------------------------------------ drafters
NG, SA = drafters_of(["ngram", "sa"], max_draft_len=8)


@pytest.mark.parametrize("measured, block, gate", [
    # SA clears the noise at 1 and 2, not at 8: it drafts up to 2 (max_concurrency 2)
    ({(SA, 1): [26, 26.5], (SA, 2): [44, 44.4], (SA, 8): [80, 81]}, "SA", 2),
    # clears at every level: no max_concurrency
    ({(SA, 1): [26, 26.5], (SA, 2): [44, 44.4], (SA, 8): [110, 111]}, "SA", None),
    # NGram wins at 1 and 2, SA only at 8: the run of levels from the lowest decides (NGram up to 2)
    ({(NG, 1): [27, 27.5], (SA, 1): [25, 25.2], (NG, 2): [45, 45.1], (SA, 2): [41, 41.1], (SA, 8): [110, 111],
      (NG, 8): [100, 100.5]}, "NGram", 2),
    # nothing beats plain decoding at the lowest level: no speculative_config at all
    ({(SA, 1): [20, 20.1], (SA, 2): [44, 44.4], (SA, 8): [110, 111]}, None, None),
])
def test_the_pytorch_equivalent_is_one_drafter_and_a_concurrency_cutoff(measured, block, gate):
    base = {(AR, 1): [20, 20.2], (AR, 2): [36, 36.3], (AR, 8): [100, 100.5]}
    choice = speculative_config_of(tabulate(runs({**base, **measured})))
    if block is None:
        assert choice.block is None and "serve without speculative_config" in choice.reason
        return
    assert choice.block["decoding_type"] == block and choice.max_concurrency == gate
    assert choice.block.get("max_concurrency") == gate
    from trtlade.drafting.config import DraftConfig

    DraftConfig.parse(choice.block)  # upstream's validators accept what tune writes


def test_the_lookahead_schedule_ignores_drafters_and_the_overall_choice_does_not():
    t = tabulate(runs({(AR, 1): [20, 20.2], (LA, 1): [22, 22.3], (SA, 1): [28, 28.1]}))
    assert choose(t, only=is_lookahead)[0].spec == LA
    assert choose(t)[0].spec == SA


def test_a_tune_with_drafters_writes_the_speculative_config(tmp_path: Path):
    from fake_engine import uvicorn_thread
    from models import tiny_engine
    from trtlade.cli.main import app as cli
    from trtlade.reference.serving_adapter import ReferenceServingEngine
    from trtlade.server.app import create_app

    engine = tiny_engine("llama", (2, 3, 2))
    app = create_app(lambda: ReferenceServingEngine(engine, max_batch_size=4))
    with uvicorn_thread(app) as url:
        result = CliRunner().invoke(cli, [
            "tune", "--base-url", url, "--endpoint", "completions", "--dataset", "random", "-c", "1,2",
            "--repeats", "2", "-n", "2", "--max-tokens", "6", "--candidates", "2-2-1", "--drafters", "sa-3,ngram",
            "--result-dir", str(tmp_path / "reports"), "--no-plots"])
        refused = CliRunner().invoke(cli, ["tune", "--base-url", url, "--drafters", "sa-12", "-c", "1",
                                           "--result-dir", str(tmp_path / "reports2")])
    assert result.exit_code == 0, result.output
    [folder] = list((tmp_path / "reports").iterdir())
    data = json.loads((folder / "tune.json").read_text())
    assert set(data["drafters"]) == {"sa-3", "ngram"} and len(data["runs"]) == 2 * 2 * 4
    assert {c["candidate"] for c in data["overall"]} <= {"1,1,0", "2,2,1", "sa-3", "ngram"}
    assert all(c["spec"] in ("1,1,0", "2,2,1") for c in data["choices"])  # the schedule: lookahead only
    snippet = (folder / "speculative_config.yml").read_text()
    assert snippet.startswith("# trtlade tune") and ("speculative_config:" in snippet or "no speculative_config"
                                                    in snippet)
    assert "## TensorRT-LLM 1.3 and later" in (folder / "summary.md").read_text()
    assert refused.exit_code != 0 and "--drafters" in refused.output and "allows 7" in refused.output


def test_apply_writes_nothing_from_a_run_whose_requests_failed(tmp_path, capsys):
    """Where (1,1,0)'s own requests failed a level compared nothing and would go in as (1,1,0): drafting off for
    every request, from a run that measured nothing there. The config is left as it was, and the exit says so."""
    from types import SimpleNamespace

    import typer

    from trtlade.cli.tune import _apply

    path = tmp_path / "deploy.yml"
    path.write_text(CONFIG)
    (tmp_path / "report").mkdir()
    with pytest.raises(typer.Exit) as done:
        _apply(path, SimpleNamespace(schedule=SCHEDULE, failed_requests=4), tmp_path / "report", path.read_bytes())
    assert done.value.exit_code == 1 and path.read_text() == CONFIG
    assert "4 request(s) failed during the measurement, so the schedule was not written" in capsys.readouterr().err


def test_apply_refuses_a_file_edited_while_tune_ran_and_keeps_every_earlier_copy(tmp_path, capsys):
    from types import SimpleNamespace

    import typer

    from trtlade.cli.tune import _apply
    from trtlade.tune.apply import check_apply_target

    path = tmp_path / "deploy.yml"
    path.write_text(CONFIG)
    target = check_apply_target(path)
    path.write_text(CONFIG + "# edited meanwhile\n")
    (tmp_path / "report").mkdir()
    with pytest.raises(typer.Exit):
        _apply(path, SimpleNamespace(schedule=SCHEDULE, failed_requests=0), tmp_path / "report", target.raw)
    assert path.read_text().endswith("# edited meanwhile\n") and "changed while tune ran" in capsys.readouterr().err
    (tmp_path / "report" / "before-apply-deploy.yml").write_text("another run's copy")
    _apply(path, SimpleNamespace(schedule=SCHEDULE, failed_requests=0), tmp_path / "report", path.read_bytes())
    assert (tmp_path / "report" / "before-apply-deploy.yml").read_text() == "another run's copy"
    assert (tmp_path / "report" / "before-apply-deploy-2.yml").read_text().endswith("# edited meanwhile\n")


def test_a_read_only_config_is_refused_even_where_the_user_may_write_anything(tmp_path):
    from trtlade.tune.apply import ApplyError, check_apply_target

    path = tmp_path / "deploy.yml"
    path.write_text(CONFIG)
    path.chmod(0o444)
    with pytest.raises(ApplyError, match="read-only"):
        check_apply_target(path)


def test_apply_keeps_each_lines_ending_and_a_comment_after_the_old_schedule(tmp_path):
    """A file mixing LF and CRLF keeps each line's own; a comment after a blank line below the old schedule, indented
    like its items, stays (a comment right under the last item goes with it)."""
    path = tmp_path / "deploy.yml"
    lines = ["# deployment\r\n", "model: {}\n", "lookahead:\n", "  spec: 2,4,2\n", "  schedule:\n",
             "  - {spec: '1,1,0'}\n", "    # the old band's own note\n", "\n", "    # ops: keep the policy pinned\n",
             "serve:\n", "  engine: reference\n"]
    path.write_bytes("".join(lines).encode())
    apply_schedule(path, SCHEDULE)
    raw = path.read_bytes().decode()
    assert raw.startswith("# deployment\r\nmodel: {}\n") and raw.count("\r\n") == 1
    assert "\n\n    # ops: keep the policy pinned\nserve:\n" in raw and "the old band's own note" not in raw
    assert "2,3,2" in raw


def test_candidates_the_apply_target_would_not_admit_are_refused_before_anything_is_measured(capsys):
    from pathlib import Path

    import typer

    from trtlade.cli.tune import _Job
    from trtlade.spec import LookaheadSpec

    job = _Job(None, None, None, "mix", None, None, 6, {}, None, None, 60.0,
               apply=(Path("deploy.yml"), LookaheadSpec.parse("2,2,1")))
    job._check_admitted([LookaheadSpec.parse("2,2,1")])  # within it: nothing said
    with pytest.raises(typer.Exit):
        job._check_admitted([LookaheadSpec.parse("2,2,1"), LookaheadSpec.parse("2,3,2")])
    assert "candidates (2,3,2) are more than deploy.yml's lookahead.spec (2,2,1) admits" in capsys.readouterr().err


def test_a_run_whose_every_request_failed_has_no_ratio_and_the_tables_stay_json():
    """Throughput 0 (every request failed): no ratio, as in bench; the spec's failures keep it from being chosen, and
    tune.json's numbers stay numbers (a geometric mean over a 0 is not one)."""
    from trtlade.tune.report import cell_rows

    rs = runs({(AR, 1): [20, 20.4, 20.2], (LA, 1): [24, 24.6, 24.4]}, repeats=3) + [
        Run(BIG, 1, 0, 26.0, 90.0, 20.0), Run(BIG, 1, 1, 0.0, 90.0, 20.0, failed=8), Run(BIG, 1, 2, 26.4, 90.0, 20.0)]
    t = tabulate(rs)
    assert t.cell(BIG, 1).ratios == [26.0 / 20, 26.4 / 20.2] and choose(t)[0].spec == LA
    json.dumps(cell_rows(t), allow_nan=False)  # raises on a NaN


def test_tune_takes_the_seed_and_timeout_of_the_configs_bench_section_as_bench_does(tmp_path, monkeypatch):
    """tune sampled with seed 0 and a 600 s bound where the config said bench.seed 7 and timeout_s 30: its runs then
    drew other tokens than `trtlade bench` would with the same file."""
    from trtlade.cli import tune as tune_cli
    from trtlade.cli.main import app as cli

    seen = {}

    def run(job, *args, **kwargs):
        seen.update(seed=job.settings.seed, timeout=job.settings.timeout, limit=job.max_candidates)
        raise SystemExit(0)

    monkeypatch.setattr(tune_cli._Job, "run", run)
    config = tmp_path / "deploy.yml"
    config.write_text(CONFIG + "bench:\n  seed: 7\n  timeout_s: 30\n  temperature: 0.7\n")
    base = ["tune", "--base-url", "http://127.0.0.1:9", "--config", str(config), "--result-dir", str(tmp_path / "r")]
    assert CliRunner().invoke(cli, base).exit_code == 0 and seen == {"seed": 7, "timeout": 30.0, "limit": 6}
    assert CliRunner().invoke(cli, [*base, "--seed", "3", "--timeout", "5", "--max-candidates", "2"]).exit_code == 0
    assert seen == {"seed": 3, "timeout": 5.0, "limit": 2}


@pytest.mark.parametrize("command", ["tune", "bench"])
@pytest.mark.parametrize("extra, said", [
    (["--config", "{other}"], "--launch and --config name different files"),
    (["--base-url", "http://127.0.0.1:9"], "--launch and --base-url both name the server"),
])
def test_launch_beside_another_way_to_name_the_server_is_refused_alike(tmp_path, command, extra, said):
    from trtlade.cli.main import app as cli

    launch, other = tmp_path / "a.yml", tmp_path / "b.yml"
    for path in (launch, other):
        path.write_text(CONFIG)
    args = [a.replace("{other}", str(other)) for a in extra]
    result = CliRunner().invoke(cli, [command, "--launch", str(launch), *args, "--result-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and said in result.output, result.output


@pytest.mark.parametrize("command, args, where", [
    ("tune", ["--candidates", "2-2-1,2-4-2", "--max-candidates", "1"], "--max-candidates"),  # both measured: said
    ("tune", ["--launch-timeout", "5"], "--launch-timeout"),                                   # no server to start
    ("bench", ["--launch-timeout", "5"], "--launch-timeout"),
])
def test_an_option_that_would_do_nothing_beside_the_others_is_refused(tmp_path, command, args, where):
    from trtlade.cli.main import app as cli

    result = CliRunner().invoke(cli, [command, "--base-url", "http://127.0.0.1:9", "--result-dir",
                                      str(tmp_path / "r"), *args])
    assert result.exit_code == 2 and f"error: {where}" in result.output, result.output


@pytest.mark.parametrize("args, said", [
    (["--candidates", "2-4-2,2-2-1 2-4-2"], "--candidates: (2,4,2) is given twice"),
    (["--drafters", "ngram,ngram-4-2"], "'ngram-4-2' is the same drafter as 'ngram'"),   # measured twice before
    (["--repeats", "101"], "--repeats"),                                                  # bench's bound
])
def test_tune_refuses_a_candidate_given_twice_as_bench_refuses_a_mode_twice(tmp_path, args, said):
    from trtlade.cli.main import app as cli

    result = CliRunner().invoke(cli, ["tune", "--base-url", "http://127.0.0.1:9", "--result-dir", str(tmp_path / "r"),
                                      *args])
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("command", ["bench", "tune"])
@pytest.mark.parametrize("section, said", [
    ("  endpoint: completions\n  dataset: multiturn\n", "c.yml:4:13: bench.endpoint: multiturn[0][0]: the prompt is a "
                                                         "chat message list"),
    ("  dataset: typo.jsonl\n", "c.yml:4:12: bench.dataset: no dataset"),
    ("  concurrency: [1, 1, 2]\n", "c.yml:4:16: bench.concurrency: concurrency 1 is given twice"),
])
def test_a_value_from_the_configs_bench_section_is_blamed_on_its_line_not_on_a_flag(tmp_path, command, section, said):
    """bench and tune said `--dataset: ...` and `--max-concurrency: ...` for values the user wrote in the config."""
    from trtlade.cli.main import app as cli

    config = tmp_path / "c.yml"
    config.write_text('model: {}\nlookahead: {spec: "2,4,2"}\nbench:\n' + section)
    result = CliRunner().invoke(cli, [command, "--config", str(config), "--base-url", "http://127.0.0.1:9",
                                      "--result-dir", str(tmp_path / "r")])
    assert result.exit_code == 1 and f"error: {config.parent}/{said}" in " ".join(result.output.split()), result.output

"""Aggregation, report files and `report compare` on synthetic records (no network); plan and
dataset parsing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtlade.bench.datasets import DatasetError, load_dataset
from trtlade.bench.metrics import percentile, summarize_level
from trtlade.bench.plan import (PlanError, parse_base_url, parse_concurrency, parse_endpoint, parse_metadata,
                                parse_modes)
from trtlade.bench.records import RequestRecord
from trtlade.bench.report import (RunSummary, SeriesInfo, compare_runs, comparison_table, default_vs_best_fixed,
                                  family_verdicts, load_run, noise_table, speedup_verdicts,
                                  render_markdown, write_report, ReportError)


def rec(series: str, c: int, i: int, times: list[float], tokens: int | None, *, start: float = 0.0,
        end: float | None = None, error: str | None = None, kind: str | None = None,
        prompt_tokens: int | None = 5, la: dict | None = None) -> RequestRecord:
    r = RequestRecord(series=series, concurrency=c, index=i, prompt_index=0, start=start,
                      end=end if end is not None else (times[-1] if times else 0.0),
                      chunk_times=list(times), completion_tokens=tokens,
                      prompt_tokens=prompt_tokens if tokens is not None else None, usage_lookahead=la,
                      last_event_time=times[-1] if times else None, done=error is None)
    if error:
        r.error, r.error_kind = error, kind  # type: ignore[assignment]
    return r


# ----------------------------------------------------------------------------- per request
def test_a_request_that_streamed_no_text_keeps_its_usage_tokens_in_per_request_jsonl() -> None:
    """Three tokens that decode to nothing (special tokens): no content chunk, so no TTFT, but usage says 3 and the
    summary counts 3: its line says 3 too (it said 0)."""
    r = rec("x", 1, 0, [], 3)
    line = r.to_json()
    assert line["output_tokens"] == 3 and line["ttft_ms"] is None and line["ok"]
    assert summarize_level([r], series="x", concurrency=1, num_prompts=1).total_output_tokens == 3


def test_a_completed_request_without_text_is_timed_in_e2el_and_counted_in_the_report() -> None:
    """An answer that is only an end of sequence: completed, no content chunk. It was left out of E2EL as well as
    TTFT without a word (the level's mean E2EL read 400 ms where its two requests took 400 and 30 ms)."""
    slow = rec("x", 1, 0, [0.2, 0.3, 0.4], 5)
    quick = rec("x", 1, 1, [], 1, start=1.0)
    quick.last_event_time = 0.030
    assert quick.e2e == pytest.approx(0.030) and quick.ttft is None and quick.tpot is None
    summary = summarize_level([slow, quick], series="x", concurrency=1, num_prompts=2)
    assert summary.mean_e2el_ms == pytest.approx(215.0) and summary.mean_ttft_ms == pytest.approx(200.0)
    assert summary.completed == 2 and summary.completed_without_text == 1 and summary.failed == 0
    run = RunSummary(run_id="r", created="c", levels=[1], settings={}, metadata={},
                     series=[SeriesInfo(label="x", server="a", base_url="http://h", model="m", mode="ar")],
                     summaries=[summary])
    assert "**1 completed request(s) carried no text**" in render_markdown(run)
    assert "carried no text" not in render_markdown(known_run()[0])
    failed = rec("x", 1, 2, [], None, error="boom", kind="http")
    assert failed.e2e is None  # a failed request is not timed


def test_record_derived_numbers_worked_example() -> None:
    r = rec("x", 1, 0, [0.100, 0.140, 0.180, 0.220], 10)
    r.first_event_time = 0.005  # the role-only chunk does not count as the first token
    assert r.ttft == pytest.approx(0.100)
    assert r.e2e == pytest.approx(0.220)
    assert r.tpot == pytest.approx(0.120 / 9)
    assert r.decode_throughput == pytest.approx(9 / 0.120)
    assert r.itls == pytest.approx([0.04, 0.04, 0.04])
    assert r.tokens_per_chunk == pytest.approx(2.5)
    assert r.tokens_source == "usage"


def test_record_without_usage_counts_chunks_and_says_so() -> None:
    r = rec("x", 1, 0, [0.1, 0.2, 0.3], None)
    assert r.tokens_source == "chunks" and r.output_tokens == 3 and r.tokens_per_chunk is None
    assert r.decode_throughput == pytest.approx(2 / 0.2)


def test_a_series_counted_in_chunks_is_said_in_the_summary() -> None:
    records = [rec("ar", 1, i, [0.1, 0.2, 0.3], None, start=float(i)) for i in range(2)]
    run = RunSummary(run_id="r", created="c", levels=[1], settings={}, metadata={},
                     series=[SeriesInfo(label="ar", server="a", base_url="http://h", model="m", mode="ar")],
                     summaries=[summarize_level(records, series="ar", concurrency=1, num_prompts=2)])
    assert "**Token counts of ar are content chunks, not tokens**" in render_markdown(run)
    assert "content chunks, not tokens" not in render_markdown(known_run()[0])


def test_record_single_token_has_no_decode_numbers() -> None:
    r = rec("x", 1, 0, [0.1], 1)
    assert r.ttft == pytest.approx(0.1) and r.tpot is None and r.decode_throughput is None


def test_record_json_roundtrip() -> None:
    r = rec("x", 2, 3, [0.1, 0.2], 4, la={"spec": {"w": 4, "n": 2, "g": 4}, "steps": 2, "tokens_per_step": 2})
    data = json.loads(json.dumps(r.to_json()))
    assert data["ttft_ms"] == pytest.approx(100.0) and data["decode_throughput"] == pytest.approx(30.0)
    assert RequestRecord.from_json(data) == r


# ----------------------------------------------------------------------------- per level
def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([], 50) is None
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=50),
       st.floats(min_value=0, max_value=100))
def test_percentile_within_bounds_and_monotone(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert min(values) <= p <= max(values)
    assert percentile(values, min(100.0, q + 1)) >= p - 1e-9


def level_records() -> list[RequestRecord]:
    # concurrency 2: two requests at once, then one more; one HTTP failure and one stream error
    return [
        rec("la", 2, 0, [0.10, 0.20, 0.30], 9, start=0.0, end=0.31),        # decode 8/0.2 = 40
        rec("la", 2, 1, [0.20, 0.30, 0.40, 0.50], 7, start=0.0, end=0.5),   # decode 6/0.3 = 20
        rec("la", 2, 2, [0.10, 0.40], 4, start=0.31, end=0.45),             # decode 3/0.3 = 10
        rec("la", 2, 3, [], None, start=0.5, end=0.01, error="HTTP 500: boom", kind="http"),
        rec("la", 2, 4, [0.1], None, start=0.76, end=0.2, error="error event in stream: x", kind="stream_error"),
    ]


def test_summarize_level_counts_failures_and_aggregates() -> None:
    s = summarize_level(level_records(), series="la", concurrency=2, num_prompts=5)
    assert (s.completed, s.failed) == (3, 2)
    assert s.failures_by_kind == {"http": 1, "stream_error": 1}
    assert s.error_examples == ["HTTP 500: boom", "error event in stream: x"]
    assert s.duration_s == pytest.approx(0.96)                       # 0 -> 0.76 + 0.2
    assert s.request_throughput == pytest.approx(3 / 0.96)
    assert s.total_output_tokens == 20
    assert s.output_throughput == pytest.approx(20 / 0.96)
    assert s.total_input_tokens == 15
    assert s.mean_ttft_ms == pytest.approx((100 + 200 + 100) / 3)
    assert s.median_ttft_ms == pytest.approx(100)
    assert s.mean_decode_throughput == pytest.approx((40 + 20 + 10) / 3)
    assert s.aggregate_decode_throughput == pytest.approx((40 + 20 + 10) / 3 * 2)
    assert s.mean_itl_ms == pytest.approx((5 * 100 + 300) / 6)      # gaps: 100,100 | 100,100,100 | 300
    assert s.median_itl_ms == pytest.approx(100)
    assert s.mean_tokens_per_chunk == pytest.approx((3 + 7 / 4 + 2) / 3)
    assert s.tokens_source == "usage"


def test_summarize_level_effective_concurrency_and_empty_level() -> None:
    one = [rec("x", 8, 0, [0.1, 0.2], 3)]
    s = summarize_level(one, series="x", concurrency=8, num_prompts=1)
    assert s.aggregate_decode_throughput == pytest.approx(20.0)      # min(8, 1) requests in flight
    failed = [rec("x", 1, 0, [], None, error="HTTP 503: busy", kind="http")]
    f = summarize_level(failed, series="x", concurrency=1, num_prompts=1)
    assert (f.completed, f.failed, f.mean_ttft_ms, f.aggregate_decode_throughput) == (0, 1, None, None)
    half = [rec("x", 8, i, [0.1, 0.2], 3) for i in range(4)] + [
        rec("x", 8, 4 + i, [], None, error="HTTP 503: busy", kind="http") for i in range(4)]
    h = summarize_level(half, series="x", concurrency=8, num_prompts=8)
    assert h.aggregate_decode_throughput == pytest.approx(20.0 * 4)  # the four that decoded, not eight


def test_lookahead_usage_is_recorded() -> None:
    la = {"spec": {"w": 4, "n": 2, "g": 4}, "steps": 3, "tokens_per_step": 2.5}
    s = summarize_level([rec("x", 1, 0, [0.1, 0.2], 5, la=la)], series="x", concurrency=1, num_prompts=1)
    assert s.lookahead_specs == ["4,2,4"] and s.mean_lookahead_tokens_per_step == pytest.approx(2.5)


# ----------------------------------------------------------------------------- report
def known_run() -> tuple[RunSummary, list[RequestRecord]]:
    """ar: TTFT 100 ms, decode 10 tok/s per request; lookahead: TTFT 110 ms, decode 12.5 tok/s."""
    records: list[RequestRecord] = []
    summaries = []
    for c in (1, 2):
        for series, ttft, step in (("ar", 0.100, 0.1), ("lookahead", 0.110, 0.08)):
            rs = [rec(series, c, i, [ttft + k * step for k in range(5)], 5, start=i * 1.0) for i in range(2)]
            if series == "lookahead" and c == 2:
                rs.append(rec(series, c, 2, [], None, start=3.0, end=0.1, error="HTTP 500: engine", kind="http"))
            records += rs
            summaries.append(summarize_level(rs, series=series, concurrency=c, num_prompts=len(rs)))
    run = RunSummary(
        run_id="20250101-000000-ar-vs-lookahead", created="2025-01-01T00:00:00Z",
        series=[SeriesInfo(label="ar", server="a", base_url="http://h", model="m", mode="ar", lookahead=[1, 1, 0]),
                SeriesInfo(label="lookahead", server="a", base_url="http://h", model="m", mode="lookahead")],
        levels=[1, 2], settings={"endpoint": "/v1/chat/completions", "dataset": "short", "num_prompts": 2},
        metadata={"trtlade_version": "0.1.0", "user": {"gpu": "A10"}}, summaries=summaries)
    return run, records


def test_summary_md_tables_for_known_input() -> None:
    run, _ = known_run()
    md = render_markdown(run)
    assert ("| concurrency | 1 | 2 |\n|---|---:|---:|\n| ar | 100.0 | 100.0 |\n| lookahead | 110.0 | 110.0 [1 failed] |"
            "\n| lookahead vs ar | +10.0% one sample | +10.0% not judged: 1 failed request left out |") in md
    # decode: ar 10 tok/s per request (x1, x2), lookahead 12.5 (x1, x2); at 2 one lookahead request failed: a rate
    # of completed requests only is not judged there
    assert ("| ar | 10.0 | 20.0 |\n| lookahead | 12.5 | 25.0 [1 failed] |\n| lookahead vs ar | +25.0% one sample | "
            "+25.0% not judged: 1 failed request left out |") in md
    # end-to-end latency: the last chunk of 5 (ar 0.1 s + 4 x 0.1 s, lookahead 0.11 s + 4 x 0.08 s), mean and p90
    e2el = ("| ar | 500.0 | 500.0 |\n| lookahead | 430.0 | 430.0 [1 failed] |\n| lookahead vs ar | -14.0% one sample | "
            "-14.0% not judged: 1 failed request left out |")
    for title in ("## End-to-end latency (ms, mean over requests", "## End-to-end latency (ms, p90 over requests"):
        assert e2el in md[md.index(title):md.index("## ", md.index(title) + 3)], title
    assert md.index("## TTFT (ms, median)") < md.index("## End-to-end latency") < md.index("## Decode throughput")
    assert "One repeat: every cell is a single sample" in md
    assert "**1 of 9 measured requests failed**" in md
    assert "lookahead @ concurrency 2: 1 failed (http: 1). `HTTP 500: engine`" in md
    assert "## Full metrics: ar" in md and "TTFT p99 (ms)" in md
    assert "- gpu: `A10`" in md


def test_a_level_of_no_more_requests_than_its_concurrency_is_called_a_wave() -> None:
    """known_run: 2 requests a level at concurrency 1 (a queue) and 2 (one wave): the note names level 2 only, under
    the output table; with more requests than every level, no note."""
    run, _ = known_run()
    md = render_markdown(run)
    note = "At concurrency 2 (2 requests a level) every request of a level starts at once"
    assert note in md
    assert md.index("## Output throughput") < md.index(note) < md.index("## TTFT")
    run.settings["num_prompts"] = 3
    assert "starts at once" not in render_markdown(run)


@pytest.mark.parametrize("auto_seqs, level, num_prompts, noted", [
    (3.3, 4, 8, "short"),    # 0.4 of 4 sequences below ar's 3.7: beyond 5% of the concurrency, 2 requests a worker
    (3.3, 4, 32, "noted"),   # the same gap with 8 requests a worker: noted, not called a large part of the level
    (3.3, 4, 16, "noted"),   # 4 requests a worker: no longer short
    (3.5, 4, 8, None),       # 0.2 below: exactly 5% of the concurrency, not beyond it
    (3.3, 4, None, "noted"),  # the number of requests unknown: noted, nothing said of it
    (3.6, 4, 8, None),       # 0.1 below: within 5% of the concurrency
    (3.3, 4, 4, None),       # one wave: the wave note says it, not this one
    (3.9, 4, 8, None),       # more than ar: no drain of its own
    (7.0, 8, 16, "short"),   # 0.5 of 8 below 7.5 at 8: beyond it
])
def test_a_series_decoding_fewer_sequences_a_step_than_the_baseline_is_said_to_drain(auto_seqs, level, num_prompts,
                                                                                    noted) -> None:
    """The Engine steps table gives the sequences a step of every series; a series more than 5% of the concurrency
    below the first one's, outside a one-wave level, is named under it, and the drain called a large part of the
    level only where it had fewer than 4 requests a worker."""
    from trtlade.bench.metrics import LevelSummary
    from trtlade.bench.report import _engine_steps_lines

    base = 3.7 if level == 4 else 7.5

    def cell(series: str, seqs: float) -> LevelSummary:
        return LevelSummary.model_construct(series=series, concurrency=level, repeat=0, engine_step_ms=40.0,
                                            engine_rows_per_step=seqs, engine_sequences_per_step=seqs)

    info = [SeriesInfo(label=m, server="a", base_url="http://h", model="m", mode=m) for m in ("ar", "auto")]
    settings = {} if num_prompts is None else {"num_prompts": num_prompts}
    run = RunSummary(run_id="r", created="", series=info, levels=[level], settings=settings, metadata={},
                     summaries=[cell("ar", base), cell("auto", auto_seqs)])
    text = "\n".join(_engine_steps_lines(run))
    assert f"| auto | 40.0 ms, {auto_seqs:.1f} rows from {auto_seqs:.1f} sequences |" in text
    assert (f"`auto` {auto_seqs:.1f} against {base:.1f} at concurrency {level}" in text) is (noted is not None)
    assert ("the drain is a large part of the level" in text) is (noted == "short")
    alone = RunSummary(run_id="r", created="", series=info[:1], levels=[level], settings=settings, metadata={},
                       summaries=[cell("ar", base)])
    assert "drain" not in "\n".join(_engine_steps_lines(alone))  # one series: nothing to compare


@pytest.mark.parametrize("auto_tail, ar_tail, said", [
    (1.6, 1.2, "longer"),    # its tail 40% of a 4 s level against 30%: a longer drain
    (1.4, 1.2, "packed"),    # 35% against 30%: within 5 points, drafting packs its steps
    (1.0, 1.2, "packed"),    # a shorter tail
    (None, 1.2, "unknown"),  # a summary saved before tails were measured: the drain named as likely
])
def test_the_drain_note_tells_a_longer_tail_from_steps_packed_by_drafting(auto_tail, ar_tail, said) -> None:
    """Fewer sequences a step than `ar` is called a longer drain only where the series' tail (its last request
    sent to its last answer) took more than 5 points more of its level; otherwise the note says the count comes
    from fewer full steps, and gives both tails."""
    from trtlade.bench.metrics import LevelSummary
    from trtlade.bench.report import _engine_steps_lines

    def cell(series: str, seqs: float, tail) -> LevelSummary:
        return LevelSummary.model_construct(series=series, concurrency=4, repeat=0, engine_step_ms=40.0,
                                            engine_rows_per_step=seqs, engine_sequences_per_step=seqs,
                                            duration_s=4.0, tail_s=tail)

    info = [SeriesInfo(label=m, server="a", base_url="http://h", model="m", mode=m) for m in ("ar", "auto")]
    run = RunSummary(run_id="r", created="", series=info, levels=[4], settings={"num_prompts": 8}, metadata={},
                     summaries=[cell("ar", 3.7, ar_tail), cell("auto", 3.3, auto_tail)])
    text = "\n".join(_engine_steps_lines(run))
    assert "`auto` 3.3 against 3.7 at concurrency 4" in text
    assert ("and a longer drain" in text) is (said == "longer")
    assert ("does not come from a longer drain" in text) is (said == "packed")
    assert ("The likely cause is the level's drain" in text) is (said == "unknown")
    assert ("the drain is a large part of the level" in text) is (said != "packed")
    if auto_tail is not None:
        assert f"(its tail {auto_tail / 4:.0%} of the level against 30%)" in text


HOST = {"cpu": "AMD EPYC", "cpu_count": 2}
HERE, THERE = "http://127.0.0.1:8000", "http://gpu-node:8000"


@pytest.mark.parametrize("urls, bench, server, shared, busy", [
    ((HERE,), 0.21, 1.82, True, False),             # one host (a loopback address): the load generator's share said
    ((HERE,), 0.09, 1.88, "little", False),         # 4.5% of the host: said to weigh little
    ((HERE,), 0.10, 1.88, True, False),             # 5%: no longer little
    (("http://localhost:8000/v1",), 0.21, 1.82, True, False),
    ((THERE,), 0.21, 1.82, False, False),           # the server elsewhere: no shared cores claimed
    ((HERE,), 0.90, 1.10, True, True),              # near the one core of its event loop
    ((HERE,), 0.89, 1.10, True, False),             # just below it
    ((HERE,), 0.895, 1.10, True, True),             # printed as 0.90: judged as printed
    ((THERE,), 0.95, None, False, True),            # a server without process series: its side unknown
    ((THERE, HERE), 0.21, 1.82, True, False),       # two servers: the share is the local series' own
])
def test_the_cpu_each_side_kept_busy_is_shown_and_said_when_it_weighs(urls, bench, server, shared, busy) -> None:
    """The CPU use section gives the cores the server process and the load generator kept busy; where a series was
    served on a loopback address it says the load generator's share of that host took time from the server's steps,
    and a load generator near a whole core that it may have sent and read late."""
    from trtlade.bench.metrics import LevelSummary
    from trtlade.bench.report import _cpu_lines

    info = [SeriesInfo(label=f"s{i}", server=f"{i}", base_url=url, model="m", mode="ar") for i, url in enumerate(urls)]
    local = [i for i, url in enumerate(urls) if url != THERE]
    cells = [LevelSummary.model_construct(series=f"s{i}", concurrency=4, repeat=0, server_cpu_cores=server,
                                          bench_cpu_cores=bench if i in local or not local else bench * 3)
             for i in range(len(urls))]
    run = RunSummary(run_id="r", created="", series=info, levels=[4], metadata=HOST, summaries=cells)
    text = "\n".join(_cpu_lines(run))
    assert text.startswith("## CPU use")
    side = "" if server is None else f"server {server:.2f}, "
    assert f"| s{len(urls) - 1} | {side}load generator {bench:.2f} |" in text  # the last series is a local one
    assert ("ran on the server's host (it sent to a loopback address; AMD EPYC, 2 CPUs)" in text) is bool(shared)
    assert (f"{round(round(bench, 2) / 2, 2):.0%} of the host's CPUs" in text) is bool(shared)
    assert ("little time taken from the server's threads" in text) is (shared == "little")
    assert ("the server's steps include waits" in text) is (shared is True)
    assert ("near the one core its event loop runs on" in text) is (busy or len(urls) > 1 and bench * 3 >= 0.9)
    unmeasured = RunSummary(run_id="r", created="", series=info, levels=[4], metadata=HOST,
                            summaries=[LevelSummary.model_construct(series="s0", concurrency=4, repeat=0)])
    assert _cpu_lines(unmeasured) == []  # a report of a version that measured no CPU: no section
    if len(urls) > 1:  # the local series unmeasured, the remote one measured: its table, no share of this host
        remote_only = RunSummary(run_id="r", created="", series=info, levels=[4], metadata=HOST, summaries=cells[:1])
        assert "ran on the server's host" not in "\n".join(_cpu_lines(remote_only))


def test_the_failures_table_counts_every_repeats_failures() -> None:
    """One request failed in one of two repeats: its cell says 1 (the mean over the repeats, 0.5, printed
    as 0 before, so the table showed no failure while the list below it named one)."""
    summaries = []
    for repeat in range(2):
        for name in ("ar", "lookahead"):
            rs = [rec(name, 4, 0, [0.1, 0.2], 5)]
            if name == "lookahead" and repeat == 1:
                rs.append(rec(name, 4, 1, [], None, end=0.1, error="protocol: disconnected", kind="protocol"))
            s = summarize_level(rs, series=name, concurrency=4, num_prompts=len(rs))
            s.repeat = repeat
            summaries.append(s)
    run = RunSummary(run_id="r", created="c", levels=[4], settings={}, metadata={}, summaries=summaries,
                     series=[SeriesInfo(label=n, server="a", base_url="http://h", model="m", mode=n)
                             for n in ("ar", "lookahead")])
    md = render_markdown(run)
    assert "| failed (all repeats) \\ concurrency | 4 |\n|---|---:|\n| ar | 0 |\n| lookahead | 1 |" in md, md
    assert "**1 of 5 measured requests failed**" in md


def repeated_run(ratios: dict[str, list[float]]) -> RunSummary:
    """Three repeats at concurrency 1 and 2: ar at 100 tok/s give or take, each other series at
    ar's throughput of the same repeat times its ratio."""
    ar = [100.0, 104.0, 98.0]
    summaries = []
    for repeat in range(3):
        for c in (1, 2):
            for name, values in [("ar", [1.0] * 3), *ratios.items()]:
                s = summarize_level([rec(name, c, 0, [0.1, 0.2], 5)], series=name, concurrency=c, num_prompts=1)
                s.output_throughput = ar[repeat] * values[repeat] * c
                s.repeat = repeat
                summaries.append(s)
    series = [SeriesInfo(label=n, server="a", base_url="http://h", model="m", mode=n) for n in ["ar", *ratios]]
    return RunSummary(run_id="r", created="c", series=series, levels=[1, 2], summaries=summaries)


def test_repeated_runs_report_mean_spread_and_a_verdict_per_speedup() -> None:
    from trtlade.bench.report import noise_table, speedup_verdicts

    run = repeated_run({"fast": [1.21, 1.23, 1.19], "same": [1.03, 0.99, 1.00], "slow": [0.80, 0.82, 0.79]})
    assert run.repeats == 3 and run.values("ar", 2, "output_throughput") == [200.0, 208.0, 196.0]
    table = noise_table(run, "output_throughput")
    assert "| ar | 100.7 (98.0–104.0) | 201.3 (196.0–208.0) |" in table
    assert re.search(r"\| fast vs ar \| \+21\.0% \(\+19\.0…\+23\.0\) higher ±\d\.\d \|", table)
    assert re.search(r"\| same vs ar \| \+0\.7% \(-1\.0…\+3\.0\) within noise ±\d\.\d \|", table)
    assert re.search(r"\| slow vs ar \| -19\.7% \(-21\.0…-18\.0\) lower ±\d\.\d \|", table)
    assert "3 repeats, interleaved. A change is real (higher / lower) only beyond its ± margin" in table
    data = speedup_verdicts(run)
    cells = {(c["series"], c["concurrency"]): c for c in data["cells"]}
    assert data["repeats"] == 3 and all(0 < c["margin"] < 0.1 for c in data["cells"])
    assert data["noise_by_level"]["1"]["dof"] == 6  # three series, three repeats each
    assert [cells[(n, 1)]["verdict"] for n in ("fast", "same", "slow")] == ["faster", "within noise", "slower"]
    assert cells[("fast", 2)]["ratios"] == pytest.approx([1.21, 1.23, 1.19])


def test_a_change_as_large_as_its_margin_at_the_digits_shown_is_printed_with_one_more_digit() -> None:
    from trtlade.bench.noise import Speedup
    from trtlade.bench.report import _change_cell

    higher = _change_cell(Speedup((1.0150, 1.0250, 1.0210)), 0.0196, 0)
    within = _change_cell(Speedup((1.0150, 1.0250, 1.0190)), 0.0204, 0)
    assert higher.endswith("higher ±1.96") and higher.startswith("+2.03%")
    assert within.endswith("within noise ±2.04") and within.startswith("+1.97%")
    assert _change_cell(Speedup((1.21, 1.23, 1.19)), 0.05, 0).endswith("higher ±5.0")


def test_compare_and_engine_bench_show_the_digits_their_verdicts_need() -> None:
    from trtlade.bench.report import _judged
    from trtlade.cli.engine_bench import _vs_greedy

    assert _judged(2.6, "", "within noise", 0.02604) == "+2.600% within noise ±2.604"
    shown = _vs_greedy({"speedup_vs_greedy": 1.004, "speedup_vs_greedy_per_repeat": [1.0035, 1.0045],
                        "speedup_vs_greedy_verdict": "faster", "speedup_vs_greedy_margin": 0.0008})
    assert shown.endswith("mean 1.004x faster ±0.001 (95%)")


def test_two_runs_with_identical_repeats_are_no_difference_whatever_the_last_bit() -> None:
    from trtlade.bench.noise import unpaired, verdict

    ratio, m = unpaired([49.99999999999999] * 3, [50.0] * 3)
    assert m == 0.0 and verdict(ratio, m) == "within noise"


def test_a_noisy_level_gets_its_own_wider_band() -> None:
    """At concurrency 2 the baseline itself jumps between repeats: a +5% there is within that level's
    noise, while the same +5% at the quiet level 1 is real."""
    from trtlade.bench.report import noise_table

    run = repeated_run({"x": [1.05, 1.05, 1.05], "same": [1.0, 1.0, 1.0]})
    for s in run.summaries:  # level 2: the modes move against the baseline by +-8% between repeats
        if s.concurrency == 2 and s.series != "ar":
            s.output_throughput *= (1.08, 0.92, 1.0)[s.repeat]
    table = noise_table(run, "output_throughput")
    row = next(line for line in table.splitlines() if line.startswith("| x vs ar"))
    assert " higher ±" in row.split("|")[2] and " within noise ±" in row.split("|")[3]


def test_full_metrics_cover_every_repeat_and_failures_name_theirs() -> None:
    run = repeated_run({"la": [1.1, 1.2, 1.3]})
    for s in run.summaries:
        if s.series == "la" and s.concurrency == 1 and s.repeat > 0:
            s.failed, s.failures_by_kind, s.error_examples = 3, {"timeout": 3}, ["timed out"]
    md = render_markdown(run)
    full = md[md.index("## Full metrics: la"):]
    assert "counts summed over the 3, every other metric their mean (min–max)" in full
    assert re.search(r"\| failed requests +\| +6 \|", full)  # 0 + 3 + 3, not the first repeat's 0
    assert re.search(r"\| output throughput \(tok/s\) +\| +\d+\.\d\d \([\d.]+–[\d.]+\) \|", full)
    assert "- la @ concurrency 1 (repeat 2): 3 failed" in md and "- la @ concurrency 1 (repeat 3): 3 failed" in md


def test_a_latency_cell_with_failed_requests_is_marked_and_not_judged() -> None:
    """Latencies cover completed requests only: a mode whose slow requests time out looks faster there. Its cells
    say how many failed, and its latency change rows give no verdict; throughput (the level's wall time) keeps it."""
    from trtlade.bench.report import noise_table

    run = repeated_run({"la": [1.2, 1.21, 1.19]})
    for s in run.summaries:
        if s.series == "la" and s.concurrency == 1:
            s.failed = 2
    ttft = noise_table(run, "mean_ttft_ms").splitlines()
    assert next(line for line in ttft if line.startswith("| la |")).split("|")[2].endswith("[6 failed] ")
    change = next(line for line in ttft if line.startswith("| la vs ar"))
    assert change.split("|")[2].strip().endswith("not judged: 6 failed requests left out")
    assert "not judged" not in change.split("|")[3]  # level 2: nothing failed, judged as usual
    throughput = next(line for line in noise_table(run, "output_throughput").splitlines() if line.startswith("| la vs"))
    assert " higher ±" in throughput.split("|")[2]


def verdicts_of_equal_modes(repeats: int, modes: int, trials: int = 3000) -> float:
    """How often a mode that IS the baseline (every run ~ N(100, 5) tok/s) is called higher or lower."""
    import random

    from trtlade.bench.noise import margin, pooled, speedup, verdict

    rng = random.Random(7)
    said = 0
    for _ in range(trials):
        base = [rng.gauss(100, 5) for _ in range(repeats)]
        cells = [speedup(base, [rng.gauss(100, 5) for _ in range(repeats)]) for _ in range(modes)]
        level = pooled(c.ratios for c in cells)
        said += verdict(cells[0].mean, margin(cells[0].ratios, level)) != "within noise"
    return said / trials


@pytest.mark.parametrize("repeats,modes", [(2, 1), (3, 1), (3, 4), (5, 2)])
def test_a_mode_equal_to_its_baseline_is_called_different_at_most_about_5_percent_of_runs(repeats, modes):
    """The verdict's promise, checked by simulation: at most the 5% a 95% interval allows (2 standard errors
    with a normal quantile said it 11-29% of the time at 2-3 repeats)."""
    assert verdicts_of_equal_modes(repeats, modes) <= 0.06


def simulated_calls(effect: float = 0.0, noisier_mode: float = 1.0, noisier_base: float = 1.0,
                    trials: int = 3000) -> float:
    """How often the first of four modes is called different from the baseline, three repeats, every run's
    throughput with 3.5% log-normal noise of its own (``noisier_*``: that many times more for the judged mode or
    the baseline)."""
    import math
    import random

    from trtlade.bench.noise import margin, pooled, speedup, verdict

    rng = random.Random(2)
    said = 0
    for _ in range(trials):
        base = [100 * math.exp(rng.gauss(0, 0.035 * noisier_base)) for _ in range(3)]
        cells = [speedup(base, [100 * (1 + effect if m == 0 else 1) * math.exp(
            rng.gauss(0, 0.035 * (noisier_mode if m == 0 else 1))) for _ in range(3)]) for m in range(4)]
        said += verdict(cells[0].mean, margin(cells[0].ratios, pooled(c.ratios for c in cells))) != "within noise"
    return said / trials


def test_the_trade_the_noise_rule_documents_power_against_calls_by_chance() -> None:
    """trtlade/bench/noise.py's figures, simulated: a real 10% change is seen in about half the runs; a mode equal
    to its baseline is called different in at most about 5% of runs where every run's noise is alike, and not
    much more where the judged mode's or the baseline's noise is three times the others'."""
    assert simulated_calls(effect=0.10) >= 0.48
    assert simulated_calls() <= 0.05
    assert simulated_calls(noisier_mode=3.0) <= 0.08 and simulated_calls(noisier_base=3.0) <= 0.08


def test_a_noisier_mode_is_judged_on_its_own_degrees_of_freedom() -> None:
    """+15% in repeats of +4, +26 and +16% among steady modes: its own scatter on its own 2 degrees of freedom,
    t(0.975, 2) = 4.30 (at the level's 8 it read 'faster')."""
    from trtlade.bench.noise import margin, pooled, speedup, verdict

    base = [100, 100, 100]
    cells = [speedup(base, v) for v in ([104, 126, 116], [100, 101, 99], [102, 101, 103], [99, 100, 98])]
    assert verdict(cells[0].mean, margin(cells[0].ratios, pooled(c.ratios for c in cells))) == "within noise"


def test_the_baselines_run_that_every_ratio_shares_is_counted_once() -> None:
    """Four modes that all ran at 110 tok/s against a baseline of 100, 107.8 and 103.8: one measurement of the
    noise, not four (as four independent cells it read 'faster' on 8 degrees of freedom)."""
    from trtlade.bench.noise import margin, pooled, speedup, verdict

    cells = [speedup([100, 107.84, 103.77], [110, 110, 110]) for _ in range(4)]
    level = pooled(c.ratios for c in cells)
    assert level.dof == 8 and verdict(cells[0].mean, margin(cells[0].ratios, level)) == "within noise"


def test_a_mode_that_failed_a_repeat_does_not_blur_the_others_verdicts() -> None:
    from trtlade.bench.noise import margin, pooled, speedup, verdict

    base = [100, 101, 99]
    sa, broken = speedup(base, [120, 121, 119]), speedup(base, [100, 0, 100])  # every request of one run failed
    assert broken.ratios == (1.0, 100 / 99)
    level = pooled([sa.ratios, broken.ratios])
    assert verdict(sa.mean, margin(sa.ratios, level)) == "faster"


def test_a_change_and_its_inverse_get_the_same_verdict() -> None:
    """On the log scale: mode against baseline and baseline against mode are the same distance from 1."""
    from trtlade.bench.noise import margin, pooled, speedup, verdict

    a, b = [86.2, 85.6, 107.6], [96.6, 93.2, 128.8]
    there, back = speedup(a, b), speedup(b, a)
    verdicts = [verdict(s.mean, margin(s.ratios, pooled([s.ratios]))) for s in (there, back)]
    assert verdicts == ["faster", "slower"] and there.mean * back.mean == pytest.approx(1.0)


def test_an_erratic_mode_is_judged_by_its_own_scatter_not_its_steady_neighbours() -> None:
    from trtlade.bench.report import noise_table

    steady = {f"m{i}": [1.0, 1.0 + 0.002 * i, 1.001] for i in range(4)}
    run = repeated_run({**steady, "erratic": [1.0, 1.3, 1.15]})
    table = noise_table(run, "output_throughput")
    row = next(line for line in table.splitlines() if line.startswith("| erratic vs"))
    assert " within noise ±" in row.split("|")[2]  # +15% whose repeats ran +0% to +30%: not a real difference


def test_a_cell_left_with_one_paired_ratio_is_one_sample_not_a_verdict() -> None:
    from trtlade.bench.report import noise_table, speedup_verdicts

    run = repeated_run({"x": [1.004, 1.004, 1.004]})
    for s in run.summaries:  # every ar request of repeats 0 and 1 at level 1 failed: no baseline to pair with
        if s.series == "ar" and s.concurrency == 1 and s.repeat < 2:
            s.output_throughput = 0.0
    row = next(line for line in noise_table(run, "output_throughput").splitlines() if line.startswith("| x vs ar"))
    assert row.split("|")[2].strip() == "+0.4% one sample"
    cell = next(c for c in speedup_verdicts(run)["cells"] if c["concurrency"] == 1)
    assert cell["verdict"] == "one sample" and cell["margin"] is None


def test_repeated_run_plots_carry_error_bars(tmp_path) -> None:
    from trtlade.bench.report import write_report

    run = repeated_run({"fast": [1.21, 1.23, 1.19]})
    written = write_report(tmp_path, run, [])
    names = sorted(p.name for p in written if p.suffix == ".png")
    assert "speedup_vs_concurrency.png" in names and "output_throughput_vs_concurrency.png" in names


def test_summary_md_says_which_engine_and_preset_served() -> None:
    run, _ = known_run()
    version = {"engine": {"name": "reference", "model": "m", "details": {"preset": "fast"},
                          "spec": {"window_size": 2, "ngram_size": 4, "verification_set_size": 2}}}
    run.metadata["servers"] = {"a": {"base_url": "http://h", "version": version},
                               "b": {"base_url": "http://other", "version": {"object": "not trtlade"}}}
    md = render_markdown(run)
    assert "- server a: reference engine, preset fast, (W,N,G) = (2,4,2), model m\n" in md
    assert "- server b" not in md  # not a trtlade server: nothing to say


@pytest.mark.parametrize("metadata, line", [
    ({"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1", "cpu_class": "x86-64, AVX2+FMA (no AVX-512)",
      "cpu_count": 2},
     "Host: AMD EPYC (AuthenticAMD family 25 model 1), CPU class x86-64, AVX2+FMA (no AVX-512), 2 CPUs"),
    ({"cpu": "Intel(R) Xeon(R) Platinum", "cpu_count": 4}, "Host: Intel(R) Xeon(R) Platinum, 4 CPUs"),  # older report
])
def test_summary_md_names_the_hosts_cpu_class(metadata: dict, line: str) -> None:
    run, _ = known_run()
    run.metadata.update(metadata)
    assert line + " (a speed figure holds on the host that measured it)." in render_markdown(run)


def test_the_host_line_names_the_server_host_where_it_is_not_the_load_generator() -> None:
    here = {"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17", "cpu_class": "x86-64, AVX-512",
            "cpu_count": 2}
    gpu_box = {"cpu": "Intel Xeon", "cpu_id": "GenuineIntel family 6 model 143", "cpu_class": "x86-64, AVX-512 with "
               "AVX512-BF16 and AMX", "cpu_count": 64}
    run, _ = known_run()
    run.metadata.update(here)
    run.metadata["servers"] = {"a": {"base_url": "http://127.0.0.1:8000", "version": {"host": here}}}
    assert "Host: AMD EPYC (AuthenticAMD family 25 model 17), CPU class x86-64, AVX-512, 2 CPUs, the load generator " \
           "and the server" in render_markdown(run)
    run.metadata["servers"] = {"a": {"base_url": "http://gpu1:8000", "version": {"host": gpu_box}},
                               "b": {"base_url": "http://vllm:8000", "version": None}}
    md = render_markdown(run)
    assert "Load generator: AMD EPYC (AuthenticAMD family 25 model 17)" in md and "\nHost:" not in md
    assert "Server a ran on: Intel Xeon (GenuineIntel family 6 model 143), CPU class x86-64, AVX-512 with " \
           "AVX512-BF16 and AMX, 64 CPUs" in md
    assert "Server b: its host is not known (its /version names none)" in md


def test_the_cpu_class_comes_from_the_first_processors_flags() -> None:
    from trtlade.bench.meta import cpu_identity

    text = "\n".join(["processor : 0", "vendor_id : GenuineIntel", "cpu family : 6", "model : 143",
                      "flags : avx2 fma avx512f avx512bw avx512_bf16 amx_bf16", "", "processor : 1",
                      "vendor_id : GenuineIntel", "flags : avx2 fma"])
    assert cpu_identity(text, "x86_64") == {"cpu_class": "x86-64, AVX-512 with AVX512-BF16 and AMX",
                                            "cpu_id": "GenuineIntel family 6 model 143"}
    arm = "\n".join(["processor : 0", "Features : fp asimd evtstrm", "CPU implementer : 0x41", "CPU part : 0xd0c"])
    assert cpu_identity(arm, "aarch64") == {"cpu_class": "aarch64 (NEON)", "cpu_id": "implementer 0x41 part 0xd0c"}
    assert cpu_identity("", "x86_64") == {}  # no flags listed: no class claimed


def aims_run(tok_s: dict[str, list[float]], first: str = "ar") -> RunSummary:
    """A run of one level (8) whose series deliver ``tok_s[series][repeat]`` tokens/s (modes named as the series)."""
    from trtlade.bench.metrics import LevelSummary

    names = [first, *[n for n in tok_s if n != first]]
    info = [SeriesInfo(label=n, server="a", base_url="http://h", model="m", mode=n) for n in names]
    cells = [LevelSummary(series=n, concurrency=8, num_prompts=8, repeat=r, completed=8, failed=0, duration_s=400 / v,
                          request_throughput=8 * v / 400, output_throughput=v, total_output_tokens=400)
             for n in names for r, v in enumerate(tok_s[n])]
    return RunSummary(run_id="r", created="", series=info, levels=[8], summaries=cells)


@pytest.mark.parametrize("tok_s, verdict", [
    # ar, the best fixed mode, the default: met within 3 points of the best and above ar
    ({"ar": [100, 100], "sa": [110, 110], "ngram": [104, 104], "auto": [108, 108]}, "met"),
    ({"ar": [100, 100], "sa": [120, 120], "auto": [115, 115]},
     "missed: 5.0 points below sa (beyond noise ±0.0 points)"),
    ({"ar": [100, 100], "sa": [80, 80], "auto": [96, 96]}, "missed: 4.0% below ar (beyond noise ±0.0%)"),
    ({"ar": [100, 100], "lookahead": [130, 130], "default": [100, 100]},
     "missed: 30.0 points below lookahead (beyond noise ±0.0 points)"),
    # repeats that disagree: each shortfall's 95% interval covers it: the gap's on its own degree of freedom,
    # t(0.975, 1) = 12.7 (repeats -50 and -2 points); the default's change on the level's block design (sa 1.5, 0.9;
    # auto 1.0, 0.88 against ar's two runs), t(0.975, 2) = 4.30
    ({"ar": [100, 100], "sa": [150, 90], "auto": [100, 88]}, "missed: 26.0 points below sa (within noise ±304.9 "
                                                             "points), 6.2% below ar (within noise ±55.5%)"),
    ({"ar": [100], "sa": [110], "auto": [109]}, "met (one sample)"),  # one repeat: said, and that it is one sample
    # met on the means while the repeats could hide a miss: said, with the margins
    ({"ar": [100, 100], "sa": [150, 90], "auto": [140, 99]}, "met on the means, within noise (±"),
    ({"ar": [100], "sa": [120], "auto": [109]}, "missed: 11.0 points below sa (one sample)"),
    # a shortfall as large as its margin at one decimal: shown with the digits the verdict rests on
    ({"ar": [100, 100, 100], "sa": [70, 71, 72], "auto": [93.03, 95.0, 96.97]},
     "missed: 5.01% below ar (within noise ±5.02%)"),
])
def test_the_report_says_whether_the_default_meets_its_aim(tok_s: dict, verdict: str) -> None:
    md = render_markdown(aims_run(tok_s))
    assert "against the best fixed mode of each level" in md
    assert f"| aim | {verdict}" + ("" if verdict.endswith("(±") else " |") in md


@pytest.mark.parametrize("tok_s, first", [
    ({"ar": [100, 100], "sa": [110, 110]}, "ar"),              # no default series
    ({"ar": [100, 100], "auto": [110, 110]}, "ar"),            # no fixed mode to compare with
    ({"sa": [100, 100], "auto": [110, 110], "ngram": [1, 1]}, "sa"),   # the baseline is not plain decoding
])
def test_no_default_aim_without_ar_a_default_and_a_fixed_mode(tok_s: dict, first: str) -> None:
    run = aims_run(tok_s, first)
    assert default_vs_best_fixed(run) == []
    assert "best fixed mode" not in render_markdown(run)


def test_the_default_gap_pairs_each_repeat_with_the_best_fixed_mode() -> None:
    run = aims_run({"ar": [100, 100, 100], "sa": [110, 120, 130], "auto": [115, 115, 115]})
    (row,) = default_vs_best_fixed(run)
    assert (row["best"], round(row["gap_lo"], 6), round(row["gap_hi"], 6)) == ("sa", -15.0, 5.0)
    assert row["gap_points"] == pytest.approx((5 - 5 - 15) / 3)  # the paired gaps' mean, which its margin is of
    assert row["gap_noise_pct"] == pytest.approx(4.303 * 10 / 3 ** 0.5, abs=0.01)  # t(0.975, 2) * sd / sqrt(3)
    assert row["met"] is False and row["noise_pct"] is not None
    assert speedup_verdicts(run)["default_vs_best_fixed"] == [row]  # summary.json carries the same


def test_output_agreement() -> None:
    from trtlade.bench.report import output_agreement

    recs = [rec("ar", 1, i, [0.1, 0.2], 2) for i in range(3)] + [rec("la", 1, i, [0.1, 0.2], 2) for i in range(3)]
    for r, text in zip(recs, ["a", "b", "c", "a", "B", "c"]):
        r.output_text = text
    recs.append(rec("la", 2, 0, [0.1], 1))  # no baseline answer at level 2: not compared
    assert output_agreement(recs, ["ar", "la"]) == {"la": {"compared": 3, "identical": 2}}
    assert output_agreement(recs, ["ar"]) == {}
    run, _ = known_run()
    run.output_agreement = {"lookahead": {"compared": 4, "identical": 4}}
    assert "- lookahead: 4 of 4 identical" in render_markdown(run)


def test_comparison_table_missing_values_and_zero_base() -> None:
    table = comparison_table([1, 2], [("a", {1: 0.0, 2: 5.0}), ("b", {1: 1.0})])
    assert table.splitlines()[-1] == "| b vs a (%) | — | — |"
    assert table.splitlines()[3] == "| b | 1.0 | — |"


def test_write_report_files_and_roundtrip(tmp_path: Path) -> None:
    run, records = known_run()
    records = [dataclasses.replace(r, start=r.start + 100.0) for r in records]  # perf_counter is never 0
    written = write_report(tmp_path / run.run_id, run, records)
    names = sorted(p.name for p in written)
    assert names == sorted(["per_request.jsonl", "summary.json", "summary.csv", "summary.md",
                            "ttft_vs_concurrency.png", "decode_throughput_vs_concurrency.png",
                            "output_throughput_vs_concurrency.png", "speedup_vs_concurrency.png"])
    for p in written:
        assert p.stat().st_size > 0
    lines = (tmp_path / run.run_id / "per_request.jsonl").read_text().splitlines()
    assert len(lines) == len(records) and sum(not json.loads(x)["ok"] for x in lines) == 1
    for line, r in zip(lines, records):  # each request's send, from its level's first
        level = (r.series, r.concurrency, r.repeat)
        first = min(o.start for o in records if (o.series, o.concurrency, o.repeat) == level)
        assert json.loads(line)["sent_s"] == pytest.approx(r.start - first)
        assert RequestRecord.from_json(json.loads(line)).start == pytest.approx(r.start - first)
    assert load_run(tmp_path / run.run_id) == run
    csv = (tmp_path / run.run_id / "summary.csv").read_text().splitlines()
    assert csv[0].startswith("series,concurrency,") and len(csv) == 5
    png = (tmp_path / run.run_id / "ttft_vs_concurrency.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_runs_pairs_series(tmp_path: Path) -> None:
    run, _ = known_run()
    other = run.model_copy(update={"run_id": "B-run"})
    text = compare_runs(run, other)
    assert ("| A ar | 100.0 | 100.0 |\n| B ar | 100.0 | 100.0 |\n| B ar vs A ar | +0.0% one sample | +0.0% one sample |"
            in text)
    assert "| A lookahead | 110.0 | 110.0 [1 failed] |" in text
    single = compare_runs(run, other, series_a="ar", series_b="lookahead")
    # a latency with a failed request left out is not judged, as bench's own table does not judge it
    assert "| B lookahead vs A ar | +10.0% one sample | +10.0% not judged: 1 failed request left out |" in single
    with pytest.raises(ReportError, match="no such series"):
        compare_runs(run, other, series_a="nope")


def test_compare_names_each_runs_host_and_warns_where_the_runs_differ_beyond_the_code() -> None:
    run, _ = known_run()
    run.metadata.update({"cpu": "AMD EPYC", "cpu_class": "x86-64, AVX-512", "cpu_count": 2})
    same = compare_runs(run, run.model_copy(update={"run_id": "B-run"}))
    assert "- A: load generator AMD EPYC, CPU class x86-64, AVX-512, 2 CPUs; server host not recorded" in same
    assert "differ beyond" not in same
    other = run.model_copy(update={"run_id": "B-run", "settings": {**run.settings, "max_tokens": 256},
                                   "metadata": {**run.metadata, "cpu_class": "x86-64, AVX2+FMA (no AVX-512)"}})
    text = compare_runs(run, other)
    assert "**The runs differ beyond what is compared**: the CPU (AMD EPYC, CPU class x86-64, AVX-512, 2 CPUs " \
           "against AMD EPYC, CPU class x86-64, AVX2+FMA (no AVX-512), 2 CPUs); `max_tokens`" in text


def test_compare_reads_the_server_behind_a_one_server_run_and_its_host() -> None:
    """One server, two modes: the series are named by mode, the server by its target label."""
    run, _ = known_run()
    here = {"cpu": "AMD EPYC", "cpu_class": "x86-64, AVX-512", "cpu_count": 2}
    xeon_a, xeon_b = ({"cpu": f"Xeon {x}", "cpu_class": "x86-64, AVX-512 with AVX512-BF16 and AMX", "cpu_count": 64}
                      for x in "AB")
    ref = {"engine": {"name": "reference", "details": {"dtype": "bfloat16"}}}
    trt = {"engine": {"name": "trtllm", "details": {"dtype": "bfloat16"}}}
    a = run.model_copy(update={"metadata": {**here, "servers": {"a": {"version": {**ref, "host": xeon_a}}}}})
    b = run.model_copy(update={"run_id": "B-run", "metadata": {**here, "servers": {"a": {"version": {**trt,
                                                                                               "host": xeon_b}}}}})
    text = compare_runs(a, b)
    assert "- A: load generator AMD EPYC, CPU class x86-64, AVX-512, 2 CPUs; server Xeon A" in text
    assert "the CPU (Xeon A, CPU class x86-64, AVX-512 with AVX512-BF16 and AMX, 64 CPUs against Xeon B" in text
    assert "the server (reference engine, bfloat16 against trtllm engine, bfloat16)" in text


def test_compare_says_what_it_cannot_compare_and_what_differs_between_the_series() -> None:
    """A comparison that would compare nothing is refused; what it leaves out, what a paired series sent
    differently, a seed or a dataset file, and token counts that are chunks are each said; levels in order."""
    run, _ = known_run()
    with pytest.raises(ReportError, match="the same run"):
        compare_runs(run, run.model_copy())
    apart = run.model_copy(update={"run_id": "B", "levels": [4], "summaries": [
        s.model_copy(update={"concurrency": 4}) for s in run.summaries]})
    with pytest.raises(ReportError, match=r"share no concurrency level \(A: 1, 2; B: 4\)"):
        compare_runs(run, apart)
    wider = apart.model_copy(update={"levels": [4, 1], "summaries": [*apart.summaries, *(
        s.model_copy(update={"tokens_source": "chunks"}) for s in run.summaries if s.concurrency == 1)]})
    text = compare_runs(wider, run.model_copy(update={"run_id": "C"}))
    assert "| concurrency | 1 | 2 | 4 |" in text and "- A: **Token counts of ar, lookahead are content chunks" in text
    sent = [info.model_copy(update={"model": "other-model"} if info.label == "ar" else {"lookahead": [7, 7, 7]})
            for info in run.series]
    other = run.model_copy(update={"run_id": "D", "series": sent[:1] + sent[1:],
                                   "settings": {**run.settings, "seed": 7, "dataset_source": "/data/v2.jsonl"}})
    text = compare_runs(run, other)
    assert "`seed`" in text and "`dataset_source`" in text and "ar's `model` ('m' against 'other-model')" in text
    assert "lookahead's `lookahead`" in text and "[7, 7, 7]" in text
    alone = run.model_copy(update={"run_id": "E", "series": run.series[:1]})
    assert "Not compared (no series of the same name in the other run, or not named): A's lookahead" in \
        compare_runs(run, alone)


@pytest.mark.parametrize("sampling,temperature,warned", [
    ("random", 0.0, True),      # the seed drew the prompts
    ("in_order", 0.7, True),  # the seed sampled the answers
    ("in_order", 0.0, False),  # prompts in order, greedy: the seed decided nothing
])
def test_compare_warns_of_a_different_seed_only_where_the_seed_decided_something(sampling, temperature, warned):
    run, _ = known_run()
    a = run.model_copy(update={"settings": {**run.settings, "dataset_sampling": sampling, "temperature": temperature,
                                            "seed": 0}})
    b = a.model_copy(update={"run_id": "B", "settings": {**a.settings, "seed": 7}})
    assert ("`seed` (0 against 7)" in compare_runs(a, b)) is warned


def test_compare_reads_a_hand_edited_servers_entry_without_a_traceback() -> None:
    run, _ = known_run()
    odd = run.model_copy(update={"metadata": {"servers": {"a": "not a mapping"}}})
    assert "server host not recorded" in compare_runs(odd, run.model_copy(update={"run_id": "B"}))


def test_compare_marks_a_cell_whose_requests_failed() -> None:
    run, _ = known_run()
    text = compare_runs(run, run.model_copy(update={"run_id": "B"}))
    section = text.split("## Output throughput")[1].split("\n## ")[0]
    assert "| A lookahead | 7.0 | 3.2 [1 failed] |" in section and "| A ar | 6.7 | 6.7 |" in section


def test_compare_runs_judges_the_unpaired_change_with_its_spread() -> None:
    """Two runs measured apart whose repeats overlap (A 100/135/113, B 128/108/119): +1.5% is within noise; two
    runs apart by much more than their scatter get a verdict."""
    a = repeated_run({"la": [1.0, 1.3, 1.15]})
    overlap = repeated_run({"la": [1.28, 1.04, 1.21]}).model_copy(update={"run_id": "B"})
    clear = repeated_run({"la": [1.5, 1.52, 1.49]}).model_copy(update={"run_id": "C"})
    def section(text: str) -> str:  # the output throughput table
        return text.split("## Output throughput")[1].split("\n## ")[0]

    rows = {line.split("|")[1].strip(): line for line in section(compare_runs(a, overlap, series_a="la", series_b="la"))
            .splitlines() if line.startswith("| ")}
    assert rows["A la"].startswith("| A la | 116.0 (100.0–135.2) |")  # mean (min–max) of its three repeats
    assert " within noise ±" in rows["B la vs A la"].split("|")[2]
    steady = repeated_run({"la": [1.2, 1.21, 1.19]})
    far = section(compare_runs(steady, clear, series_a="la", series_b="la"))
    assert " higher ±" in next(line for line in far.splitlines() if line.startswith("| B la vs A la")).split("|")[2]


def test_load_run_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        load_run(tmp_path / "missing")
    with pytest.raises(ReportError, match="has no summary.json"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text('{"run_id": 3}')
    with pytest.raises(ReportError, match="not a trtlade bench summary"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text('{"run_id": "x", "throughput": NaN}')   # a traceback in the comparison
    with pytest.raises(ReportError, match="holds NaN, not a number a bench writes") as info:
        load_run(tmp_path)
    assert info.value.where.endswith("summary.json")
    (tmp_path / "summary.json").write_bytes(b'\xff\xfe{}')                        # a UnicodeDecodeError traceback
    with pytest.raises(ReportError, match="run: not UTF-8 text: byte 0xff at line 1, column 1"):
        load_run(tmp_path)


# ----------------------------------------------------------------------------- plan parsing
def test_parse_modes() -> None:
    modes = parse_modes(["ar,lookahead", "7x7x7", "default"])
    assert [m.name for m in modes] == ["ar", "lookahead", "7-7-7", "default"]
    assert [m.payload() for m in modes] == [{"w": 1, "n": 1, "g": 0}, None, {"w": 7, "n": 7, "g": 7}, None]
    for bad, match in (("4-2", "three numbers"), ("4-1-4", "ngramSize=1 requires verificationSetSize=0"),
                       ("fast", "not a mode"), ("ar,ar", "given twice"), ("", "no mode")):
        with pytest.raises(PlanError, match=match) as info:
            parse_modes([bad])
        assert info.value.option == "--modes"


def test_parse_concurrency_metadata_endpoint_url() -> None:
    assert parse_concurrency(["1,2", "16"]) == [1, 2, 16]
    for bad in ("0", "x", "2,2"):
        with pytest.raises(PlanError):
            parse_concurrency([bad])
    assert parse_metadata(["gpu=A10", "note=a=b"]) == {"gpu": "A10", "note": "a=b"}
    with pytest.raises(PlanError, match="key=value"):
        parse_metadata(["novalue"])
    assert parse_endpoint("chat").path == "/v1/chat/completions"
    assert parse_endpoint("/v1/completions").kind == "completions"
    with pytest.raises(PlanError):
        parse_endpoint("embeddings")
    assert parse_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert parse_base_url("https://h/proxy") == "https://h/proxy"
    for bad in ("127.0.0.1:8000", "ftp://h", "http://h:99999", "http://", "http://h/?q=1"):
        with pytest.raises(PlanError):
            parse_base_url(bad)


# ----------------------------------------------------------------------------- datasets
def test_bundled_datasets() -> None:
    short, long, rnd = load_dataset("short"), load_dataset("long"), load_dataset("random")
    assert len(short.prompts) == 1 and len(long.prompts[0].text or "") > 2000
    assert {p.index for p in short.sample(5, 0)} == {0}
    a, b = rnd.sample(20, 1), rnd.sample(20, 2)
    assert a == rnd.sample(20, 1) and a != b and len({p.index for p in a}) > 3


def test_file_datasets(tmp_path: Path) -> None:
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"prompt": "one"}\n\n{"messages": [{"role": "user", "content": "two"}]}\n')
    ds = load_dataset(str(jl))
    assert [p.index for p in ds.sample(5, 0)] == [0, 1, 0, 1, 0] and ds.has_messages
    assert ds.prompts[1].chat_messages() == [{"role": "user", "content": "two"}]
    sg = tmp_path / "s.json"
    sg.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
                              {"conversations": [{"from": "gpt", "value": "only"}]}]))
    ds2 = load_dataset(str(sg))
    assert [p.text for p in ds2.prompts] == ["hi"] and ds2.skipped == 1


@pytest.mark.parametrize("content, match, where", [
    ('{"prompt": "ok"}\nnot json\n', "not valid JSON", ":2"),
    ('{"text": "x"}\n', "unknown key 'text'", ":1"),
    ('{"category": "code"}\n', "no 'prompt' or 'messages'", ":1"),
    ('{"messages": []}\n', "non-empty list", ":1"),
    ("\n\n", "no prompts", ""),
])
def test_dataset_errors_name_the_line(tmp_path: Path, content: str, match: str, where: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=match) as info:
        load_dataset(str(path))
    assert info.value.where.endswith(where) and info.value.hint


@pytest.mark.parametrize("blob, where, fragment", [
    (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', ":2:16", "not UTF-8 text: byte 0xe9 at line 2, column 16"),
    (b"\x1f\x8b\x08\x00compressed", ":1:2", "not UTF-8 text: byte 0x8b"),          # a .jsonl.gz given as it is
])
def test_a_dataset_that_is_not_utf8_is_an_error_at_its_byte(tmp_path: Path, blob: bytes, where: str,
                                                             fragment: str) -> None:
    """It was a UnicodeDecodeError traceback from bench and tune."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(blob)
    with pytest.raises(DatasetError, match=fragment) as info:
        load_dataset(str(path))
    assert info.value.where.endswith(where) and "UTF-8" in info.value.hint


def test_a_pipe_is_read_as_a_dataset_and_refused_as_a_config(tmp_path: Path) -> None:
    import os

    from trtlade.yaml_doc import ConfigLoadError, read_yaml

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConfigLoadError, match="not a regular file"):
        read_yaml(fifo)  # a config is read twice: a pipe would be empty the second time
    read, write = os.pipe()  # a dataset is read once: `--dataset <(zcat d.jsonl.gz)` works
    os.write(write, b'{"prompt": "from a pipe"}\n')
    os.close(write)
    try:
        assert [p.text for p in load_dataset(f"/dev/fd/{read}").prompts] == ["from a pipe"]
    finally:
        os.close(read)


def test_a_device_is_refused_as_a_dataset_not_read_without_end() -> None:
    """/dev/zero was read as a pipe until the memory ran out: only a pipe (a FIFO) or a regular file is read."""
    with pytest.raises(DatasetError, match="not a regular file"):
        load_dataset("/dev/zero")


def test_a_prompt_suite_that_is_not_utf8_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    from trtlade.reference.prompt_suite import PromptSuiteError, load_suite

    path = tmp_path / "p.json"
    path.write_bytes(b'{"prompts": ["caf\xe9"]}')
    with pytest.raises(PromptSuiteError, match=r"p.json:1:\d+: not UTF-8 text"):
        load_suite(path)


def test_unknown_dataset() -> None:
    with pytest.raises(DatasetError, match="not a bundled set"):
        load_dataset("nope-does-not-exist")


def test_docstring_examples() -> None:
    """The worked examples in the bench modules' docstrings hold."""
    import doctest
    import importlib

    for name in ("sse", "metrics", "plan", "datasets", "report"):
        module = importlib.import_module(f"trtlade.bench.{name}")
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, name
    import trtlade.cli.bench as cli_bench

    assert doctest.testmod(cli_bench).failed == 0


def test_the_report_takes_its_verdicts_together_and_names_those_that_hold_for_all_of_them() -> None:
    """Each verdict is at 95% on its own: a report of many says how many would read higher or lower by chance,
    and which changes still hold with the 5% shared over all of them (Bonferroni). A +21% in three steady repeats
    holds; a +4% just past its own margin does not; a latency cell with failed requests is not judged, so not
    counted."""
    from trtlade.bench.report import family_verdicts

    run = repeated_run({"fast": [1.21, 1.22, 1.20], "edge": [1.03, 1.05, 1.04]})
    alone = {c["series"]: c["verdict"] for c in speedup_verdicts(run)["cells"] if c["concurrency"] == 1}
    assert alone == {"fast": "faster", "edge": "faster"}
    family = family_verdicts(run)
    assert family["comparisons"] == 6 * 2 * 2  # six tables, two modes, two levels
    assert {(h["series"], h["concurrency"]) for h in family["holding"]} == {("fast", 1), ("fast", 2)}
    assert family["called"] == 4 and family["by_chance"] == pytest.approx(24 * 0.05)
    md = render_markdown(run)
    section = md[md.index("## The verdicts together"):]
    assert ("judge 24 changes, each at 95% on its own: were no mode different from `ar` in anything, about 1.2 of "
            "them would still read higher or lower by chance. 4 read higher or lower; 2 of them hold with the 5% "
            "shared over all 24 (each at 99.79%, Bonferroni's bound):") in section
    assert "- output throughput: fast at 1 (+21.0%), fast at 2 (+21.0%)\n" in section
    for s in run.summaries:
        if s.series == "edge" and s.concurrency == 1:
            s.failed = 1
    assert family_verdicts(run)["comparisons"] == 24 - 5  # edge at 1: latencies and summed decode rate not judged


def test_the_deadline_of_python_3_10_times_out_and_moves_as_asyncio_timeout_does():
    """`asyncio.timeout` came in Python 3.11; the project runs on 3.10 too (Ubuntu 22.04): the bench's stand-in is
    held to the same behaviour here, whatever Python runs the tests."""
    import asyncio
    import time

    from trtlade.bench.client import _Deadline

    async def run(delay: float, moved_to: float | None) -> str:
        try:
            async with _Deadline(delay) as bound:
                if moved_to is not None:
                    bound.reschedule(asyncio.get_running_loop().time() + moved_to)
                await asyncio.sleep(0.3)
            return "done"
        except TimeoutError:
            return "timed out"

    t0 = time.perf_counter()
    assert asyncio.run(run(0.05, None)) == "timed out" and time.perf_counter() - t0 < 0.25
    assert asyncio.run(run(0.05, 1.0)) == "done"  # moved later: the sleep ends first
    assert asyncio.run(run(5.0, 0.05)) == "timed out"  # moved sooner, as a stream lingering after [DONE]


ENGINE_TEXT = ("# HELP x\ntrtlade_batch_step_seconds_count 10.0\ntrtlade_batch_step_seconds_sum 0.2\n"
               "trtlade_step_rows_sum 30.0\ntrtlade_batch_size_sum 10.0\n")


@pytest.mark.parametrize("status, body, view, read", [
    (200, ENGINE_TEXT, None, (10.0, 0.2, 30.0, 10.0, None)),
    (200, ENGINE_TEXT, "live", (10.0, 0.2, 30.0, 10.0, None)),
    (200, ENGINE_TEXT + "process_cpu_seconds_total 12.5\n", None, (10.0, 0.2, 30.0, 10.0, 12.5)),  # its CPU time
    (200, "process_cpu_seconds_total 12.5\n", None, None),       # a process's CPU time alone: not the engine's
    (200, ENGINE_TEXT, "copy", None),          # a tenant's copy: moves with the others' requests, not this run's
    (200, "trtlade_batch_step_seconds_count 10.0\n", None, None),    # another server's counters: not the engine's
    (200, '{"iterations": []}', None, None),                       # trtllm-serve's /metrics is JSON
    (401, "", None, None),                                         # /metrics needs a key this run does not hold
    (404, "", None, None),
])
def test_the_engine_counters_are_read_where_the_server_has_them(status, body, view, read):
    import asyncio

    import httpx

    from trtlade.bench.runner import engine_counters

    async def ask():
        headers = {"X-Trtlade-Metrics": view} if view else {}
        transport = httpx.MockTransport(lambda request: httpx.Response(status, text=body, headers=headers))
        async with httpx.AsyncClient(transport=transport) as client:
            return await engine_counters(client, "http://h", {}, 5.0)
    assert asyncio.run(ask()) == read


def _cells_run(modes: dict[str, tuple[list[float], list[int]]], field: str = "output_throughput") -> RunSummary:
    """One level (4), 16 prompts a repeat: ``modes[name] = (values of field by repeat, failed by repeat)``."""
    from trtlade.bench.metrics import LevelSummary

    def cell(name, r, value, failed):
        tok_s = value if field == "output_throughput" else 100.0
        extra = {} if field == "output_throughput" else {field: value}
        return LevelSummary(series=name, concurrency=4, num_prompts=16, repeat=r, completed=16 - failed,
                            failed=failed, duration_s=10.0, request_throughput=1.6, output_throughput=tok_s,
                            total_output_tokens=800, **extra)
    return RunSummary(run_id="x", created="now", levels=[4],
                      series=[SeriesInfo(label=m, server="a", base_url="u", model="m", mode=m) for m in modes],
                      summaries=[cell(n, r, v, f[r]) for n, (vs, f) in modes.items() for r, v in enumerate(vs)])


def test_a_mode_that_delivered_nothing_in_a_repeat_is_not_judged_on_the_repeats_that_survived() -> None:
    """Its ratio there is 0, which the pairing drops: judged on the two others it read +20% higher next to a mean 20%
    below the baseline (and 15 failed of 16 read as a loss)."""
    run = _cells_run({"ar": ([100.0, 101.0, 99.0], [0, 0, 0]), "sa": ([120.0, 0.0, 119.0], [0, 16, 0])})
    assert "not judged: 1 repeat delivered nothing" in noise_table(run, "output_throughput")
    [cell] = speedup_verdicts(run)["cells"]
    assert cell["verdict"] is None and cell["not_judged"] == "1 repeat delivered nothing"
    assert family_verdicts(run)["holding"] == []


def test_a_cell_not_judged_stays_out_of_the_levels_noise() -> None:
    """x lost requests in two repeats (its TTFT swings with how many): pooled, it widened y's margin tenfold."""
    steady = {"ar": ([100.0, 104.0, 98.0], [0, 0, 0]), "y": ([110.0, 117.52, 105.84], [0, 0, 0]),
              "z": ([100.0, 106.08, 96.04], [0, 0, 0])}
    wild = {**steady, "x": ([55.0, 145.6, 88.2], [5, 0, 3])}
    line = [row for row in noise_table(_cells_run(wild, "mean_ttft_ms"), "mean_ttft_ms").splitlines()
            if row.startswith("| y vs ar")]
    alone = [row for row in noise_table(_cells_run(steady, "mean_ttft_ms"), "mean_ttft_ms").splitlines()
             if row.startswith("| y vs ar")]
    assert line == alone and "higher" in line[0]

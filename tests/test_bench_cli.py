"""`trtlade bench` and `trtlade report compare` from the command line, against the scripted server;
clear errors (exit 1, no traceback) for user mistakes; the --launch machinery."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from scripted_server import Script, ServerThread
from trtlade.bench.launch import LaunchError, launched_server
from trtlade.bench.report import load_run
from trtlade.cli.main import app

TESTS = Path(__file__).resolve().parent
runner = CliRunner()


def invoke(*args: str) -> "object":
    return runner.invoke(app, list(args), catch_exceptions=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def only_run(result_dir: Path) -> Path:
    [run] = [p for p in result_dir.iterdir() if p.is_dir()]
    return run


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    script = Script(ttft=0.004, chunk_delay=0.002, tokens_per_chunk=2)
    with ServerThread(script) as srv:
        yield srv.url, script


def test_bench_end_to_end_with_failures(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello"}\n{"prompt": "FAIL500 now"}\n{"prompt": "there"}\n')
    result = invoke("bench", "--base-url", url + "/v1", "-c", "1,2", "-n", "3", "--max-tokens", "6",
                    "--dataset", str(data), "--result-dir", str(tmp_path / "r"), "--metadata", "gpu=none",
                    "--label", "smoke")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "TTFT (ms, mean over requests)" in out and "| lookahead vs ar |" in out
    # each level's progress line leads with what the server delivered, never a sum of per-request rates alone
    level_lines = [line for line in result.stderr.splitlines() if " @   1: " in line or " @   2: " in line]
    assert len(level_lines) == 4 and all(" ok, 1 FAILED; output " in line and "tok/s; TTFT" in line
                                         and "summed" not in line for line in level_lines)
    assert "warning: 4 of 12 measured requests failed" in result.stderr
    run_dir = only_run(tmp_path / "r")
    assert run_dir.name.endswith("-smoke")
    run = load_run(run_dir)
    assert [s.label for s in run.series] == ["ar", "lookahead"] and run.levels == [1, 2]
    assert all((s.completed, s.failed) == (2, 1) for s in run.summaries)
    assert run.metadata["user"] == {"gpu": "none"} and run.metadata["servers"]["a"]["model"] == "scripted-model"
    assert run.metadata["servers"]["a"]["version"]["engine"] == "scripted"
    assert run.settings["num_prompts"] == 3 and run.settings["dataset"] == "prompts.jsonl"
    for name in ("per_request.jsonl", "summary.csv", "summary.md", "ttft_vs_concurrency.png",
                 "decode_throughput_vs_concurrency.png", "speedup_vs_concurrency.png"):
        assert (run_dir / name).is_file(), name
    assert len((run_dir / "per_request.jsonl").read_text().splitlines()) == 12
    assert "HTTP 500: scripted engine failure" in (run_dir / "summary.md").read_text()
    # another server's /metrics is not read (a trtllm-serve hands its iteration stats out once): no engine steps
    assert not any(p.endswith("/metrics") for p in script.paths) and "## Engine steps" not in \
        (run_dir / "summary.md").read_text()


def test_a_model_the_server_does_not_list_is_refused_before_any_request(server: tuple[str, Script],
                                                                        tmp_path: Path) -> None:
    """Every request would be a 404, and the run end with 'every measured request failed' naming neither."""
    url, _ = server
    result = invoke("bench", "--base-url", url + "/v1", "-c", "1", "-n", "1", "--max-tokens", "2", "--model",
                    "bogus", "--result-dir", str(tmp_path / "r"))
    assert result.exit_code == 2
    assert "--model: the server at" in result.stderr and "serves no model 'bogus'" in result.stderr
    assert "--model scripted-model" in result.stderr
    assert not [p for p in (tmp_path / "r").glob("*/per_request.jsonl")]  # nothing was sent
    named = invoke("bench", "--base-url", url + "/v1", "-c", "1", "-n", "1", "--max-tokens", "2", "--model",
                   "some-org/scripted-model", "--result-dir", str(tmp_path / "r2"))
    assert named.exit_code == 0, named.output  # with its organisation, as trtlade's own server takes it


def test_the_default_against_the_best_fixed_mode_is_printed(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    result = invoke("bench", "--base-url", url, "-c", "1", "-n", "2", "--max-tokens", "4", "--num-warmups", "0",
                    "--repeats", "2", "--modes", "ar,sa,auto", "--result-dir", str(tmp_path / "r"), "--no-plots")
    assert result.exit_code == 0, result.output
    assert "The server's default (`auto`) against the best fixed mode of each level" in result.stdout
    assert "| best fixed mode | sa " in result.stdout
    aims = load_run(only_run(tmp_path / "r")).verdicts["default_vs_best_fixed"]
    assert [(a["concurrency"], a["default"], a["best"]) for a in aims] == [(1, "auto", "sa")]


def test_two_servers_with_labels(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    with ServerThread(Script(ttft=0.004, chunk_delay=0.002, tokens_per_chunk=1)) as other:
        result = invoke("bench", "--base-url", url, "--base-url-b", other.url, "--labels", "fast,slow",
                        "--modes", "default", "-c", "1", "-n", "2", "--max-tokens", "4", "--num-warmups", "0",
                        "--result-dir", str(tmp_path), "--no-plots")
    assert result.exit_code == 0, result.output
    assert "| slow vs fast |" in result.stdout
    run = load_run(only_run(tmp_path))
    assert [(s.label, s.base_url) for s in run.series] == [("fast", url), ("slow", other.url)]
    assert not (only_run(tmp_path) / "ttft_vs_concurrency.png").exists()


def test_sampled_bench_sends_each_prompt_one_seed_in_every_mode(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.requests.clear()
    result = invoke("bench", "--base-url", url, "-c", "1", "-n", "3", "--max-tokens", "4", "--num-warmups", "0",
                    "--temperature", "0.7", "--top-p", "0.95", "--seed", "40", "--dataset", "short",
                    "--result-dir", str(tmp_path), "--no-plots")
    assert result.exit_code == 0, result.output
    sent = [(r["messages"][0]["content"], str(r.get("lookahead")), r["seed"], r["top_p"], r["temperature"])
            for r in script.requests]
    assert len(sent) == 6 and {s[3:] for s in sent} == {(0.95, 0.7)}
    by_prompt: dict[str, set] = {}
    for text, _, seed, _, _ in sent:
        by_prompt.setdefault(text, set()).add(seed)
    assert all(len(seeds) == 1 for seeds in by_prompt.values())  # ar and lookahead sample with one seed
    assert len({next(iter(s)) for s in by_prompt.values()}) == len(by_prompt)  # prompts differ in seed
    run = load_run(only_run(tmp_path))
    assert (run.settings["temperature"], run.settings["top_p"]) == (0.7, 0.95)


def test_defaults_from_config(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    port = url.rsplit(":", 1)[1]
    cfg = tmp_path / "deploy.yml"
    cfg.write_text(f"lookahead: {{spec: [4, 2, 4]}}\nserve: {{port: {port}}}\n"
                   "bench: {concurrency: [2], num_prompts: 2, num_warmups: 0, max_tokens: 4, modes: [ar, 4-2-4], "
                   "result_dir: out}\n")
    result = invoke("bench", "--config", str(cfg))
    assert result.exit_code == 0, result.output
    run = load_run(only_run(tmp_path / "out"))  # result_dir relative to the config file
    assert run.levels == [2] and [s.label for s in run.series] == ["ar", "4-2-4"]
    assert run.series[1].lookahead == [4, 2, 4] and run.settings["max_tokens"] == 4


def test_an_unreachable_second_server_is_said_before_the_first_is_launched(tmp_path, monkeypatch) -> None:
    """--launch takes a model load; --base-url-b failing after it left a report folder and a wasted start."""
    import trtlade.bench.launch as launch

    def never(*args, **kwargs):
        raise AssertionError("the server was launched before --base-url-b was checked")

    monkeypatch.setattr(launch, "launched_server", never)
    monkeypatch.chdir(tmp_path)
    result = invoke("bench", "--launch", str(Path(__file__).resolve().parent.parent / "configs" / "smollm2-cpu.yml"),
                    "--base-url-b", "http://127.0.0.1:9", "-c", "1", "-n", "1")
    assert result.exit_code == 1 and "--base-url-b: cannot reach" in result.stderr, result.output
    assert not list((tmp_path / "reports").iterdir())  # no run folder holding a server log


@pytest.mark.parametrize("args, message", [
    (["--base-url", "localhost:8000"], "--base-url: 'localhost:8000' is not an http(s) URL"),
    (["--modes", "ar,4-2"], "--modes: '4-2' is not a mode"),
    (["--modes", "ngramm"], "did you mean 'ngram'?"),  # a misspelt name, not "a spec has three numbers"
    (["--base-url", "http://127.0.0.1:9", "--top-p", "0"], "top_p 0 is outside (0, 1]"),
    (["--base-url", "http://127.0.0.1:9", "--top-p", "0.5"], "--top-p: top_p 0.5 without a temperature"),  # not sent
    (["--base-url", "http://127.0.0.1:9", "--endpoint", ""], "--endpoint: '' is not an endpoint"),  # not the default
    (["--base-url", "http://127.0.0.1:9", "-c", ""], "--max-concurrency: no concurrency level given"),  # nor here
    (["--modes", "4-1-4"], "ngramSize=1 requires verificationSetSize=0"),
    (["--max-concurrency", "0"], "--max-concurrency: concurrency 0 is below 1"),
    (["--max-concurrency", "1,,2"], "--max-concurrency: an empty level in '1,,2'"),
    (["--metadata", "novalue"], "--metadata: 'novalue' is not key=value"),
    (["--endpoint", "embeddings"], "--endpoint: 'embeddings' is not an endpoint"),
    (["--labels", "x,y"], "--labels names the two servers"),
    (["--dataset", "no-such-set"], "no dataset 'no-such-set'"),
    (["--launch", "a.yml", "--base-url", "http://h"], "--launch and --base-url both name the server"),
    (["--launch", "a.yml", "--config", "b.yml"], "--launch and --config name different files"),
])
def test_user_errors_exit_2_without_traceback(args: list[str], message: str) -> None:
    """A flag's value the command cannot use is a usage mistake: exit 2, as Click's own checks exit."""
    result = invoke("bench", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("line, fragment", [
    ('{"promt": "b"}', ("unknown key 'promt'", "hint: did you mean 'prompt'?")),
    ('{"prompt": "b", "categroy": "code"}', ("unknown key 'categroy'", "hint: did you mean 'category'?")),
    ('{"category": "code"}', "no 'prompt' or 'messages'"),
    ('{"prompt": "b", "messages": [{"role": "user", "content": "c"}]}', "both 'prompt' and 'messages'"),
    ('{"messages": [{"role": "usr", "content": "c"}]}', "role 'usr' is not one of"),
    ('{"messages": [{"role": "user", "content": "c", "lang": "en"}]}', "message 0: unknown key 'lang'"),
    ('{"messages": [{"role": "user", "contnet": "c"}]}', ("message 0: unknown key 'contnet'",
                                                       "hint: did you mean 'content'?")),
    ('{"messages": [{"role": "user"}]}', "message 0: no 'content'"),
    ('{"messages": [{"role": "user", "content": "c"}, "hi"]}', "message 1: \"hi\" is not a {role, content} object"),
    ('{"messages": []}', "'messages' must be a non-empty list of"),
    ('{"messages": [{"content": "c"}]}', "message 0: no 'role'"),
    ('{"messages": [{"role": "user", "content": null}]}', "message 0: content null is not text"),  # not sent on
    ('{"messages": [{"role": "user", "content": 5}]}', "message 0: content 5 is not text"),
    ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "is not text"),
    ('{"messages": [{"role": "user", "content": "c", "name": 3}]}', "message 0: name must be a string"),
    ('{"prompt": "a", "prompt": "b"}', "the key 'prompt' is given twice"),  # not the last one silently
])
def test_bad_dataset_line_is_located_and_nothing_in_it_is_dropped(tmp_path: Path, line: str,
                                                                  fragment: str | tuple[str, ...]) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a"}\n' + line + "\n")
    result = invoke("bench", "--dataset", str(data))
    assert result.exit_code == 1 and f"{data}:2" in result.stderr, result.stderr
    parts = (fragment,) if isinstance(fragment, str) else fragment
    assert all(part in result.stderr for part in parts), result.stderr


def test_unreachable_server() -> None:
    result = invoke("bench", "--base-url", f"http://127.0.0.1:{free_port()}", "-c", "1", "-n", "1")
    assert result.exit_code == 1
    assert "cannot reach the server at http://127.0.0.1:" in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.output


def test_invalid_config_is_reported(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yml"
    cfg.write_text("lookahead: {spec: [4, 2, 4]}\nbench: {concurency: [1]}\n")
    result = invoke("bench", "--config", str(cfg))
    assert result.exit_code == 1 and "the config is not valid" in result.stderr and "concurency" in result.stderr


@pytest.mark.parametrize("command, option, text, located", [
    ("bench", "--config", "build: [\n", "malformed YAML"),              # not YAML: a [ never closed
    ("tune", "--launch", "build: [\n", "a [ or { is not closed"),
])
def test_an_unreadable_config_is_reported_where_it_fails(tmp_path: Path, command, option, text, located) -> None:
    cfg = tmp_path / "cfg.yml"
    if text is not None:
        cfg.write_text(text)
    result = invoke(command, option, str(cfg))
    assert result.exit_code == 1 and "the config cannot be read" in result.stderr
    assert f"{cfg}:" in result.stderr and located in result.stderr and f"trtlade validate-config {cfg}" in result.stderr


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_result_dir_that_cannot_be_made_is_refused_before_any_request(tmp_path: Path, command) -> None:
    """Checked before the server is reached (here none listens: its error would come first otherwise), so a
    run is never measured and then lost for want of a folder."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = invoke(command, "--base-url", f"http://127.0.0.1:{free_port()}", "--result-dir", str(blocker / "runs"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--result-dir: {blocker / 'runs'}: cannot create it" in result.stderr
    assert "cannot reach" not in result.stderr


def test_every_request_failing_exits_1_with_report(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    data = tmp_path / "fail.jsonl"
    data.write_text('{"prompt": "FAIL500"}\n')
    result = invoke("bench", "--base-url", url, "--dataset", str(data), "-c", "1", "-n", "2", "--num-warmups", "0",
                    "--modes", "default", "--result-dir", str(tmp_path / "r"), "--no-plots")
    assert result.exit_code == 1 and "every measured request failed (2)" in result.stderr
    assert load_run(only_run(tmp_path / "r")).summaries[0].failed == 2


def test_failing_warmups_abort_with_a_hint(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    data = tmp_path / "fail.jsonl"
    data.write_text('{"prompt": "FAIL500"}\n')
    result = invoke("bench", "--base-url", url, "--dataset", str(data), "-c", "1", "-n", "2",
                    "--result-dir", str(tmp_path / "r"))
    assert result.exit_code == 1 and "warm-up request(s) of series 'ar' failed" in result.stderr
    assert "HTTP 500" in result.stderr and "hint:" in result.stderr


def test_report_compare_cli(server: tuple[str, Script], tmp_path: Path) -> None:
    url, _ = server
    for name in ("a", "b"):
        result = invoke("bench", "--base-url", url, "--modes", "default", "-c", "1,2", "-n", "2", "--max-tokens",
                        "4", "--result-dir", str(tmp_path / name), "--no-plots")
        assert result.exit_code == 0, result.output
    out_md = tmp_path / "cmp.md"
    result = invoke("report", "compare", str(only_run(tmp_path / "a")), str(only_run(tmp_path / "b")),
                    "-o", str(out_md))
    assert result.exit_code == 0, result.output
    assert "| B default vs A default |" in result.stdout and "| concurrency | 1 | 2 |" in result.stdout
    assert out_md.read_text() in result.stdout + "\n"
    missing = invoke("report", "compare", str(tmp_path / "nope"), str(only_run(tmp_path / "b")))
    assert missing.exit_code == 2 and "RUN_A" in missing.stderr and "does not exist" in missing.stderr
    for command in ("bench", "tune"):  # a config that is not there is a usage mistake, as for serve (exit 2)
        absent = invoke(command, "--launch", str(tmp_path / "nope.yml"))
        assert absent.exit_code == 2 and "--launch" in absent.stderr and "does not exist" in absent.stderr
    for target, said in ((tmp_path, "it is a folder"), (tmp_path / "no" / "cmp.md", "does not exist")):
        refused = invoke("report", "compare", str(only_run(tmp_path / "a")), str(only_run(tmp_path / "b")),
                         "-o", str(target))  # refused before anything is printed
        assert refused.exit_code == 2 and said in refused.stderr and "# Comparison" not in refused.stdout


def test_api_key_is_sent_and_not_recorded(server: tuple[str, Script], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = server
    script.auth.clear()
    monkeypatch.setattr(sys, "argv", ["trtlade", "bench", "--api-key", "sk-secret"])
    result = invoke("bench", "--base-url", url, "--api-key", "sk-secret", "--modes", "default", "-c", "1", "-n", "1",
                    "--max-tokens", "2", "--result-dir", str(tmp_path), "--no-plots")
    assert result.exit_code == 0, result.output
    assert script.auth and set(script.auth) == {"Bearer sk-secret"}
    run_dir = only_run(tmp_path)
    assert load_run(run_dir).settings["command"] == "trtlade bench --api-key '***'"
    assert all("sk-secret" not in p.read_text() for p in run_dir.iterdir())


def test_cli_module_is_light() -> None:
    code = ("import sys, trtlade.cli.bench; "
            "print([m for m in ('httpx', 'pandas', 'matplotlib', 'numpy', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- --launch machinery
@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11's")
def test_the_launched_server_imports_the_benchs_trtlade_not_the_working_directorys(tmp_path: Path) -> None:
    """Run from a folder holding another ``trtlade/`` (a checkout of another version), ``python -m trtlade``
    would import that one; the launched server's environment keeps the bench's own."""
    import trtlade
    from trtlade.bench.launch import serve_command, server_env

    (tmp_path / "trtlade").mkdir()
    (tmp_path / "trtlade" / "__init__.py").write_text("raise SystemExit('the working directory trtlade')\n")
    argv = serve_command(tmp_path / "x.yml", "127.0.0.1", 0)[:3] + ["--version"]
    plain = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert "the working directory trtlade" in plain.stderr  # the trap, without the environment
    ours = subprocess.run(argv, cwd=tmp_path, env=server_env(), capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and ours.stdout.strip() == f"trtlade {trtlade.__version__}", ours


def test_launched_server_runs_and_stops(tmp_path: Path) -> None:
    cmd = [sys.executable, str(TESTS / "scripted_server.py"), "--port", "{port}"]
    with launched_server(tmp_path / "unused.yml", log_path=tmp_path / "server.log", command=cmd,
                         ready_timeout=30) as url:
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "scripted-model"
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)


def test_launched_server_that_dies_shows_its_log(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('model not found: /nope'); sys.exit(3)"]
    with pytest.raises(LaunchError) as info:
        with launched_server(tmp_path / "x.yml", log_path=tmp_path / "server.log", command=cmd, ready_timeout=30):
            pass
    assert "exited with code 3" in info.value.message and "model not found: /nope" in info.value.log_tail


def test_launched_server_not_ready_in_time(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(60)"]
    with pytest.raises(LaunchError) as info:
        with launched_server(tmp_path / "x.yml", log_path=tmp_path / "server.log", command=cmd,
                             ready_timeout=1.0, stop_grace=5):
            pass
    assert "not ready after 1 s" in info.value.message and "loading" in info.value.log_tail


def test_cli_launch_failure_is_clear(tmp_path: Path) -> None:
    cfg = tmp_path / "deploy.yml"
    cfg.write_text(f"model: {{path: {tmp_path / 'no-such-model'}}}\nlookahead: {{spec: [4, 2, 4]}}\n")
    result = invoke("bench", "--launch", str(cfg), "--launch-timeout", "20", "--result-dir", str(tmp_path / "r"))
    assert result.exit_code == 1
    assert f"--launch {cfg}" in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr


def test_a_bad_mode_from_the_config_is_located_in_the_config_not_blamed_on_the_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: {}\nlookahead:\n  spec: 4,2,4\nbench:\n  modes: [ar, bogus]\n")
    result = invoke("bench", "--config", str(cfg))
    assert result.exit_code == 1 and f"{cfg}:5:10: bench.modes: 'bogus' is not a mode" in result.stderr
    flagged = invoke("bench", "--config", str(cfg), "--modes", "nope")
    assert flagged.exit_code == 2 and "--modes: 'nope' is not a mode" in flagged.stderr


def test_report_compare_on_a_file_that_is_no_summary_says_so(tmp_path: Path) -> None:
    other = tmp_path / "deploy.yml"
    other.write_text("model: {}\n")
    result = invoke("report", "compare", str(other), str(other))
    assert result.exit_code == 1 and "is not a trtlade bench summary: not JSON" in result.stderr
    assert ": :" not in result.stderr and "run folder" in result.stderr


def test_a_sharegpt_file_without_a_human_turn_says_why_it_has_no_prompt(tmp_path: Path) -> None:
    data = tmp_path / "chats.json"
    data.write_text('[{"conversations": [{"from": "gpt", "value": "hi"}]}]')
    result = invoke("bench", "--dataset", str(data))
    assert result.exit_code == 1 and "none of its 1 conversation(s) has a human turn" in result.stderr


@pytest.mark.parametrize("text, fragment", [
    ('[{"conversations": [{"from": "human", "value": ["a", "b"]}]}]', "is list, not text"),  # was sent as "['a', 'b']"
    ('[{"conversations": [{"from": "human", "value": 12345}]}]', "is int, not text"),
    ('[{"conversations": [{"from": "human", "value": "a", "value": "b"}]}]', "the key 'value' is given twice"),
])
def test_a_sharegpt_value_that_is_not_text_is_refused_not_turned_into_text(tmp_path: Path, text, fragment) -> None:
    data = tmp_path / "chats.json"
    data.write_text(text)
    result = invoke("bench", "--dataset", str(data))
    assert result.exit_code == 1 and fragment in result.stderr and "Traceback" not in result.output, result.stderr


@pytest.mark.parametrize("given, env, config_var, sent", [
    ("flag", {"OPENAI_API_KEY": "openai", "SERVER_KEY": "server"}, "SERVER_KEY", "flag"),    # the flag first
    (None, {"OPENAI_API_KEY": "openai", "SERVER_KEY": "server"}, "SERVER_KEY", "server"),    # the config's server key
    (None, {"OPENAI_API_KEY": "openai"}, "SERVER_KEY", "openai"),                            # its variable unset
    (None, {"OPENAI_API_KEY": "openai", "SERVER_KEY": "server"}, None, "openai"),            # no config
    (None, {}, None, None),
])
def test_the_key_sent_is_the_flag_then_the_configs_server_key_then_openai_api_key(monkeypatch, given, env, config_var,
                                                                                     sent):
    """$OPENAI_API_KEY was the flag's default, so it overrode the key the launched server requires."""
    from types import SimpleNamespace

    from trtlade.cli.common import api_key_for

    for name in ("OPENAI_API_KEY", "SERVER_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = SimpleNamespace(config=SimpleNamespace(serve=SimpleNamespace(api_key_env=config_var))) \
        if config_var else None
    assert api_key_for(given, loaded) == sent


@pytest.mark.parametrize("text, said", [
    ('{"levels": [1], "levels": [2]', "not JSON (Expecting"),                      # cut short: where it breaks
    ('{\n  "levels": [1],\n  "levels": [2]\n}', "the key 'levels' is given twice"),  # not the last one silently
    ('{"run_id": ' + "9" * 5000 + "}", "is not a trtlade bench summary"),  # JSON Python refuses to read: no traceback
])
def test_report_compare_on_a_broken_summary_says_where_and_takes_no_key_given_twice(tmp_path: Path, text, said):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(text)
    result = invoke("report", "compare", str(run), str(run))
    assert result.exit_code == 1 and said in result.stderr, result.stderr
    if "Expecting" in said:
        assert f"{run / 'summary.json'}:1:" in result.stderr


def test_a_dataset_message_of_text_parts_is_taken_as_openais_api_takes_it(tmp_path: Path) -> None:
    from trtlade.bench.datasets import load_dataset

    data = tmp_path / "parts.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]}\n')
    [prompt] = load_dataset(str(data)).prompts
    assert prompt.chat_messages() == [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]

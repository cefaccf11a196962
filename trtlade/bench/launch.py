"""``trtlade bench --launch CONFIG``: run ``trtlade serve`` as a child process for the bench.

The server gets a free loopback port, its output goes to a log file in the run folder, and the
bench waits for ``GET /health`` to answer 200 (the server answers 503 while the model loads). On
exit the server gets SIGTERM, then SIGKILL if it has not stopped after ``stop_grace`` seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Optional, Sequence

from trtlade.errors import TrtladeError

__all__ = ["LaunchError", "free_port", "launched_server", "log_tail", "serve_command", "server_env"]


class LaunchError(TrtladeError, RuntimeError):
    """The launched server did not become ready; ``log_tail`` holds the end of its output."""

    located = False  # the CLI prints the log's path and tail itself

    def __init__(self, message: str, *, log_tail: str = "", log_path: Optional[Path] = None) -> None:
        super().__init__(message, where=str(log_path) if log_path is not None else "")
        self.log_tail = log_tail
        self.log_path = log_path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def serve_command(config: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "trtlade", "serve", "--config", str(config), "--host", host,
            "--port", str(port)]


def server_env() -> dict[str, str]:
    """The launched server's environment: the bench's, with ``PYTHONSAFEPATH=1`` (Python 3.11+), so that
    ``python -m trtlade`` does not put the working directory first on its module path: run from a folder
    holding another ``trtlade/`` (a source checkout of another version), the server would import that one
    while the bench runs this one. ``PYTHONPATH`` still applies, as it does to the bench."""
    return {**os.environ, "PYTHONSAFEPATH": "1"}


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float, log_path: Path,
                headers: dict[str, str]) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise LaunchError(f"the server exited with code {code} before it was ready",
                                  log_tail=log_tail(log_path), log_path=log_path)
            try:
                resp = client.get(url + "/health", headers=headers)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise LaunchError(f"the server was not ready after {timeout:g} s (GET /health: {last})",
                                  log_tail=log_tail(log_path), log_path=log_path)
            time.sleep(0.25)


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def launched_server(config: Path, *, log_path: Path, ready_timeout: float = 600.0, stop_grace: float = 30.0,
                    host: str = "127.0.0.1", command: Optional[Sequence[str]] = None,
                    headers: Optional[dict[str, str]] = None) -> Iterator[str]:
    """Start the server, yield its base URL once /health answers 200, stop it on exit.

    ``command`` replaces ``trtlade serve ...`` (tests); ``{port}`` and ``{host}`` in it are filled in.
    """
    port = free_port(host)
    argv = ([part.format(port=port, host=host) for part in command] if command is not None
            else serve_command(config, host, port))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log: IO[bytes] = log_path.open("wb")
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=server_env())
    except OSError as exc:
        log.close()
        raise LaunchError(f"cannot start {argv[0]}: {exc}") from None
    url = f"http://{host}:{port}"
    try:
        _wait_ready(proc, url, ready_timeout, log_path, headers or {})
        yield url
    finally:
        _stop(proc, stop_grace)
        log.close()

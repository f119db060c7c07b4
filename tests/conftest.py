"""Real servers for the tests: ``start_server`` launches ``python -m tritonlite`` on free ports.

The child binds port 0 for each service and logs ``Started HTTPService at HOST:PORT`` (and the
gRPC / Metrics twins); we read the ports from those lines and then poll the live endpoint.
No sleeps as synchronization: a bounded poll with a deadline, and a loud failure with the
child's output if it exits.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")
_STARTUP_TIMEOUT_S = 90.0


class Server:
    """A tritonlite child process and where its services listen."""

    def __init__(self, proc: subprocess.Popen[str], args: list[str]) -> None:
        self.proc = proc
        self.args = args
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.ports: dict[str, int] = {}
        self._pump = threading.Thread(target=self._drain, daemon=True)
        self._pump.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                m = _STARTED.search(line)
                if m:
                    self.ports[m.group(1)] = int(m.group(3))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def output(self) -> str:
        with self._lock:
            return "\n".join(self._lines)

    def wait_for(self, services: set[str], deadline: float) -> None:
        with self._changed:
            while not services <= set(self.ports):
                if self.proc.poll() is not None and not self._pump.is_alive():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
        if not services <= set(self.ports):
            self.stop()
            raise RuntimeError(
                f"tritonlite did not start {sorted(services - set(self.ports))} "
                f"(exit code {self.proc.poll()}); command: {' '.join(self.args)}\n{self.output()}"
            )

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['HTTPService']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['GRPCInferenceService']}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.ports['Metrics Service']}"

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._pump.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return self.proc.returncode


def _flag_value(args: tuple[str, ...], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def start_server(repo: Path | str, *args: str, env: dict[str, str] | None = None) -> Server:
    """Start tritonlite on ``repo`` with free ports; ``args`` are more tritonserver flags."""
    cmd = [sys.executable, "-m", "tritonlite", "--model-repository", str(repo),
           "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
           "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", *args]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    server = Server(proc, cmd)
    wanted = set()
    for flag, service in (("--allow-http", "HTTPService"), ("--allow-grpc", "GRPCInferenceService"),
                          ("--allow-metrics", "Metrics Service")):
        if (_flag_value(args, flag) or "true").lower() in ("true", "1", "yes", "on"):
            wanted.add(service)
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    server.wait_for(wanted, deadline)
    if "HTTPService" in wanted:
        while True:
            try:
                with urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"tritonlite is not live:\n{server.output()}")
            time.sleep(0.05)
    return server


@pytest.fixture(scope="session")
def perf_analyzer() -> str:
    """Path of Triton's perf_analyzer (installed by `make test`), or skip."""
    path = os.environ.get("PERF_ANALYZER", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("perf_analyzer not installed (make test installs it into .tools/perf_analyzer)")
    return path


@pytest.fixture()
def server_factory() -> Iterator[object]:
    """Start servers inside a test; all are stopped at its end."""
    started: list[Server] = []

    def factory(repo: Path | str, *args: str) -> Server:
        s = start_server(repo, *args)
        started.append(s)
        return s

    yield factory
    for s in started:
        s.stop()

"""Real servers for the tests: ``start_server`` launches ``python -m tritonlite`` on free ports.

The child binds port 0 for each service and logs ``Started HTTPService at HOST:PORT`` (and the
gRPC / Metrics twins); we read the ports from those lines and then poll the live endpoint.
No sleeps as synchronization: a bounded poll with a deadline, and a loud failure with the
child's output if it exits.

Fixtures:

* ``onnx_repo`` (session): a repository of real ONNX models, ``tests/onnx_models.py``'s
  ``ONNX_REPO_MODELS`` (add_sub, add_sub_nobatch, identity_<dtype> for every type, identity_string,
  variable-dim identities, a 2 x 64 mlp, failing...).
* ``server`` (session): tritonlite serving ``onnx_repo`` with HTTP, gRPC and metrics.
  A module that needs another server defines its own ``server`` fixture or calls
  ``start_server``/``server_factory``.
* ``server_factory`` (function): ``server_factory(repo, *args)`` starts servers that are stopped
  when the test ends.
* Environment: ``TRITONLITE_TEST_FRONTEND=native|aio`` adds ``--frontend`` to every server a
  test starts without one (the server's default is native); ``TRITONLITE_TEST_SHARED_PORT=1``
  (native only) also puts HTTP and gRPC on one port, so the same suites run over each transport.
* Markers set here by rule, not by hand (``make test`` selects with them): ``transport`` on
  every test under ``tests/compat/`` (the suites that talk to a server through a front end:
  ``make test`` runs them again on aio and on the shared port); ``twins`` on every test that
  reaches a compiled twin's pure-Python source (``TWIN_PATHS``: make test runs them again with
  ``TRITONLITE_NO_EXTENSIONS=1``); ``core_subject`` on the compatibility suites of
  ``CORE_SUITES``, whose subject is behind the front end (``make test`` leaves them out of the
  aio run).
* ``perf_analyzer`` (session): the path of Triton's perf_analyzer from ``$PERF_ANALYZER``
  (``make test`` installs it), or the test is skipped.
* Every ``transport`` test runs with the automatic GC off, and its reference cycles are
  collected on the main thread when it ends (``_collect_on_the_main_thread``).

A server a test forgets to stop is stopped when the test process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from onnx_models import build_onnx_repo

_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")
_STARTUP_TIMEOUT_S = 90.0
_SERVICE_FLAGS = (
    ("--allow-http", "HTTPService"),
    ("--allow-grpc", "GRPCInferenceService"),
    ("--allow-metrics", "Metrics Service"),
)
_RUNNING: set[Server] = set()  # strong refs: a dropped Server must still be stopped


class Server:
    """A tritonlite child process and where its services listen.

    ``http_url``, ``grpc_url`` and ``metrics_url`` are ``HOST:PORT`` (what tritonclient takes);
    ``ports`` maps the logged service names to their ports; ``output()`` is everything the child
    logged so far (its stderr is drained by a thread, so the pipe never fills).
    """

    def __init__(self, proc: subprocess.Popen[str], args: list[str]) -> None:
        self.proc = proc
        self.args = args
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.ports: dict[str, int] = {}
        self.hosts: dict[str, str] = {}
        self._pump = threading.Thread(target=self._drain, daemon=True)
        self._pump.start()
        _RUNNING.add(self)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                m = _STARTED.search(line)
                if m:
                    self.ports[m.group(1)] = int(m.group(3))
                    self.hosts[m.group(1)] = m.group(2)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def output(self) -> str:
        """Everything the server logged so far."""
        with self._lock:
            return "\n".join(self._lines)

    def wait_for_lines(self, predicate: Callable[[list[str]], bool], timeout: float = 10.0) -> str:
        """Everything logged once ``predicate(lines)`` holds (a reply can reach the client before
        the line the server logged with it reaches the drain thread); the output as it is when
        ``timeout`` runs out otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self._lines) and self._pump.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            return "\n".join(self._lines)

    def wait_for(self, services: set[str], deadline: float) -> None:
        """Block until each of ``services`` logged its ``Started ...`` line, or fail loudly."""
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

    def _url(self, service: str) -> str:
        host = self.hosts.get(service, "127.0.0.1")
        if host in ("0.0.0.0", "[::]", "::"):  # listening everywhere: talk to loopback
            host = "127.0.0.1"
        return f"{host}:{self.ports[service]}"

    @property
    def http_url(self) -> str:
        return self._url("HTTPService")

    @property
    def grpc_url(self) -> str:
        return self._url("GRPCInferenceService")

    @property
    def metrics_url(self) -> str:
        return self._url("Metrics Service")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL the process group; the exit code."""
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
        _RUNNING.discard(self)
        return self.proc.returncode


@atexit.register
def _stop_leftovers() -> None:
    for s in list(_RUNNING):
        s.stop(timeout=10)


def _flag_value(args: tuple[str, ...], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def _is_live(http_url: str, tls: bool = False) -> bool:
    # under TLS only liveness is asked here: the tests check the certificates themselves
    ctx = ssl._create_unverified_context() if tls else None
    scheme = "https" if tls else "http"
    try:
        with urllib.request.urlopen(
            f"{scheme}://{http_url}/v2/health/live", timeout=5, context=ctx
        ) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):  # refused, reset, timed out, non-200
        return False


def wait_until(pred: Callable[[], object], timeout: float) -> None:
    """Poll ``pred`` every 50 ms until it is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


async def until(pred: Callable[[], object], timeout_s: float = 30.0) -> None:
    """``wait_until`` on the running event loop: poll ``pred`` every 5 ms, letting the loop
    run; AssertionError after ``timeout_s`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def run_core(
    repo: Path,
    body: Callable[[Any], Awaitable[None]],
    runner: Callable[[Any], Any] = asyncio.run,
    **options: Any,
) -> None:
    """Run ``body(core)`` in a fresh event loop (``runner``: ``asyncio.run``, or ``uvloop.run``
    as the server runs) on an in-process ``InferenceCore`` serving ``repo`` (more
    ``ServerOptions`` in ``options``), started first and stopped after."""
    from tritonlite.core.core import InferenceCore
    from tritonlite.options import ServerOptions

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(repo,), **options))
        assert await core.start() == []
        try:
            await body(core)
        finally:
            await core.stop()

    runner(main())


class JsonPost:
    """What the HTTP handlers (``app.make_dispatch``) read of a request, in process: a complete
    JSON POST of ``body`` to ``path``, no headers of note, a client still there."""

    method, query, version, peer = "POST", "", (1, 1), None

    def __init__(self, path: str, body: bytes) -> None:
        from tritonlite.frontends.wire._http1_py import Headers

        self.path = path
        self.body = body
        self.headers = Headers({"content-type": "application/json"})

    async def read(self) -> bytes:
        return self.body

    def disconnected(self) -> bool:
        return False


def counts_only(stats: Any) -> Any:
    """A statistics document (or part of one) without its durations and times: what two
    servers, or two paths of one, must agree on exactly."""
    if isinstance(stats, dict):
        return {k: counts_only(v) for k, v in stats.items() if k not in ("ns", "last_inference")}
    if isinstance(stats, list):
        return [counts_only(v) for v in stats]
    return stats


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _transport_args(args: tuple[str, ...]) -> list[str]:
    """Ports and ``--frontend`` from the environment (see the module docstring)."""
    out = []
    frontend = _flag_value(args, "--frontend") or os.environ.get("TRITONLITE_TEST_FRONTEND")
    if frontend and _flag_value(args, "--frontend") is None:
        out += ["--frontend", frontend]
    shared = (
        os.environ.get("TRITONLITE_TEST_SHARED_PORT") == "1"
        and frontend in (None, "native")  # native is the default
        and _flag_value(args, "--http-port") is None
        and _flag_value(args, "--grpc-port") is None
        and (_flag_value(args, "--allow-http") or "true") == "true"
        and (_flag_value(args, "--allow-grpc") or "true") == "true"
    )
    if shared:
        if frontend is None:
            out += ["--frontend", "native"]
        port = str(_free_port())
        return [*out, "--http-port", port, "--grpc-port", port]
    return [*out, "--http-port", "0", "--grpc-port", "0"]


def start_server(
    repo: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    transport: bool = True,
) -> Server:
    """Start tritonlite on ``repo`` with free ports; ``args`` are more tritonserver flags.

    ``--allow-http=false`` (and the gRPC / metrics twins) in ``args`` say which ``Started``
    lines to wait for; later flags win over the defaults here (``--http-address`` and so on).
    ``env`` adds to this process's environment; ``preexec_fn`` runs in the child before it
    starts. ``transport=False`` ignores the environment's front end and shared port (separate
    free ports, the default front end unless ``args`` name one). Raises RuntimeError, with the
    server's output, if it exits or is not live within 90 s.
    """
    cmd = [
        sys.executable,
        "-m",
        "tritonlite",
        "--model-repository",
        str(repo),
        *(_transport_args(args) if transport else ("--http-port", "0", "--grpc-port", "0")),
        "--metrics-port",
        "0",
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="backslashreplace",  # a log line quoting a client's non-UTF-8 bytes stays
        start_new_session=True,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )
    server = Server(proc, cmd)
    wanted = {
        service
        for flag, service in _SERVICE_FLAGS
        if (_flag_value(args, flag) or "true").lower() in ("true", "1", "yes", "on")
    }
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    server.wait_for(wanted, deadline)
    mutual = (_flag_value(args, "--http-use-ssl-mutual") or "false").lower() in ("true", "1")
    if "HTTPService" in wanted and not mutual:  # (mutual TLS: no client certificate here)
        # The port is bound once its line is logged; this bounded poll only waits for the app.
        tls = (_flag_value(args, "--http-use-ssl") or "false").lower() in ("true", "1")
        while not _is_live(server.http_url, tls):
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"tritonlite is not live (exit code {proc.poll()}); "
                    f"command: {' '.join(cmd)}\n{server.output()}"
                )
            time.sleep(0.05)
    return server


@pytest.fixture(autouse=True)
def _collect_on_the_main_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``transport`` test's reference cycles are collected on this thread when it ends.

    tritonclient.http's client closes itself again in ``__del__``, which needs the gevent hub
    of the thread it runs on. A client kept in a cycle (an error's traceback holds the frame
    that holds the client) is otherwise freed by whichever thread the cyclic GC next runs on
    (a server's output-draining thread, say), and pytest reports that as an unraisable
    exception in whatever test is running then. So the automatic GC is off while such a test
    runs, and what it left in cycles is collected right after it, here: with no collection
    since the test began, everything it allocated is still in the youngest generation, which
    is all ``gc.collect(0)`` has to walk (a full collection per test made the compatibility
    suites a quarter slower).
    """
    if request.node.get_closest_marker("transport") is None or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(0)
        gc.enable()


@pytest.fixture(scope="session")
def onnx_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared repository of real ONNX models (``onnx_models.ONNX_REPO_MODELS``)."""
    return build_onnx_repo(tmp_path_factory.mktemp("onnx_repo"))


@pytest.fixture(scope="session")
def server(onnx_repo: Path) -> Iterator[Server]:
    """tritonlite serving ``onnx_repo`` over HTTP, gRPC and metrics, for the whole session."""
    s = start_server(onnx_repo)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def perf_analyzer() -> str:
    """Path of Triton's perf_analyzer (installed by `make test`), or skip."""
    path = os.environ.get("PERF_ANALYZER", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip(
            "perf_analyzer not installed; run make test "
            "(it installs .tools/perf_analyzer and sets PERF_ANALYZER)"
        )
    return path


@pytest.fixture()
def server_factory() -> Iterator[Callable[..., Server]]:
    """Start servers inside a test: ``server_factory(repo, *args)``; all stop at its end."""
    started: list[Server] = []

    def factory(repo: Path | str, *args: str, env: dict[str, str] | None = None) -> Server:
        s = start_server(repo, *args, env=env)
        started.append(s)
        return s

    yield factory
    for s in started:
        s.stop()


# What reaches a compiled twin (batcher, kernels, staging buffers, codecs, the HTTP/1.1, HTTP/2
# and HPACK wire layer): the unit suites of those packages, and the server suites whose requests
# go through them (batching, sequences, both protocols over the wire layer, the backends' batch
# staging, the cache's BYTES handling). The rest goes through the same twin code as these;
# running it twice would double CI time and find nothing new. Paths relative to tests/.
TWIN_PATHS = (
    "scheduling/",
    "kernels/",
    "memory/",
    "frontends/",
    "backends/",
    "test_onnx_models.py",
    "test_architecture_doc.py",
    "compat/test_http.py",
    "compat/test_grpc.py",
    "compat/test_grpc_stream.py",
    "compat/test_http_batching.py",
    "compat/test_sequence_clients.py",
    "compat/test_http_grpc_parity.py",
    "compat/test_python_models.py",
    "compat/test_http_cache.py",
    "compat/test_http_expect.py",
    "compat/test_compressed_requests.py",
    "compat/test_http_lane.py",
    "core/test_direct_lane.py",
    "compat/test_lane_lookup.py",
)
# Compatibility suites whose subject is behind the front end: the schedulers, Python model
# environments, the response cache on ensembles, A/B splits, memory pressure, the PyTorch
# backend. Their requests reach the core through the same handlers whichever transports carry
# them, and the transports' own suites run on aio; so ``make test`` runs these once, on native
# (marker ``core_subject``): 166 of the aio run's 579 s of worker time. Paths relative to tests/.
CORE_SUITES = (
    "compat/test_scheduler_hooks.py",
    "compat/test_python_env.py",
    "compat/test_ensemble_cache.py",
    "compat/test_split.py",
    "compat/test_memory_pressure.py",
    "compat/test_pytorch_models.py",
)
TRANSPORT_PATHS = ("compat/",)  # the suites that talk to a server through a front end
_TESTS = Path(__file__).parent


def _rel(path: Path) -> str | None:
    """``path`` relative to tests/, as the rules above spell it (None: outside tests/)."""
    try:
        return path.relative_to(_TESTS).as_posix()
    except ValueError:
        return None


def _mark_by_rule(items: list[pytest.Item]) -> None:
    """``transport``, ``twins`` and ``core_subject`` markers (see the module docstring)."""
    for item in items:
        rel = _rel(item.path)
        if rel is None:
            continue
        if rel.startswith(TRANSPORT_PATHS):
            item.add_marker(pytest.mark.transport)
        if rel.startswith(CORE_SUITES):
            item.add_marker(pytest.mark.core_subject)
        if rel.startswith(TWIN_PATHS):
            item.add_marker(pytest.mark.twins)


def _rule_paths(config: pytest.Config) -> tuple[str, ...] | None:
    """The paths (relative to tests/) a marker selection by rule can reach: ``-m twins`` only
    ``TWIN_PATHS``, ``-m transport`` (alone or narrowed with ``and``) only tests/compat."""
    expr = (config.option.markexpr or "").strip()
    if expr == "twins":
        return TWIN_PATHS
    if (expr == "transport" or expr.startswith("transport and ")) and " or " not in expr:
        return TRANSPORT_PATHS
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m twins`` or ``-m transport`` (``make test``'s later runs) the test files the
    selection cannot reach are not imported: each xdist worker collects the suite itself, and
    importing all of it costs about 8 s of CPU a worker, tests/compat alone 5."""
    paths = _rule_paths(config)
    rel = _rel(collection_path) if paths is not None else None
    if paths is None or rel is None:
        return None
    if collection_path.is_dir():
        # kept when a rule path lies below it or it lies below a rule directory
        reach = any(p.startswith(rel + "/") or rel.startswith(p.rstrip("/")) for p in paths)
        return None if reach or rel == "." else True
    if collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        return None if rel.startswith(paths) else True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers by rule; tests marked ``gpu`` skip with the reason "no CUDA device" where there
    is none."""
    _mark_by_rule(items)
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    from tritonlite.gpu.devices import visible_gpus

    if visible_gpus() == 0:
        skip = pytest.mark.skip(reason="no CUDA device")
        for item in marked:
            item.add_marker(skip)

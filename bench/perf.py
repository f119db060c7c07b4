"""perf_analyzer driver helpers: find the binary, run one point, parse its output; servers.

One *point* is one perf_analyzer invocation at one concurrency. perf_analyzer's
``--concurrency-range`` only steps linearly, so the 1/4/16/64 sweep is four invocations whose
``-f`` CSVs are merged (same header, one row each) into ``perf_<server>_<model>_<protocol>.csv``.
The CSV has the client-side percentiles and the server-side queue/compute split; the server-side
*overhead* (request time not spent queued or computing) and the inference/execution counts are
only in perf_analyzer's stdout, so both are read and every run's stdout is kept under logs/.
"""

from __future__ import annotations

import csv
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


# -- the perf_analyzer binary ----------------------------------------------------------------------
def perf_analyzer_bin() -> Path:
    """``$PERF_ANALYZER``, else the project's ``.tools/perf_analyzer/perf_analyzer``.

    The latter is installed on demand by tools/install-perf-analyzer.sh when that script exists.
    """
    env = os.environ.get("PERF_ANALYZER")
    if env:
        path = Path(env)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"PERF_ANALYZER={env} is not an executable")
        return path
    path = ROOT / ".tools" / "perf_analyzer" / "perf_analyzer"
    if not os.access(path, os.X_OK):
        installer = ROOT / "tools" / "install-perf-analyzer.sh"
        if not installer.exists():
            raise SystemExit(
                f"no perf_analyzer: set PERF_ANALYZER or install it into {path.parent}"
            )
        subprocess.run(["bash", str(installer), str(path.parent)], check=True)
    return path


# -- one point -------------------------------------------------------------------------------------
@dataclass
class Settings:
    """perf_analyzer flags shared by every point (the same for every server)."""

    measurement_interval_ms: int = 2000
    stability_percentage: int = 50
    max_trials: int = 6
    timeout_s: float = 120.0
    extra: tuple[str, ...] = ()  # more perf_analyzer flags (--streaming, --shared-memory=...)

    def flags(self) -> list[str]:
        return [
            "--measurement-interval",
            str(self.measurement_interval_ms),
            "--stability-percentage",
            str(self.stability_percentage),
            "--max-trials",
            str(self.max_trials),
            *self.extra,
        ]


@dataclass
class Point:
    """One measured point. Times in microseconds, as perf_analyzer reports them."""

    server: str
    backend: str
    model: str
    protocol: str
    concurrency: int
    status: str = "ok"
    throughput: float = 0.0
    p50_us: float = 0.0
    p90_us: float = 0.0
    p95_us: float = 0.0
    p99_us: float = 0.0
    avg_latency_us: float = 0.0
    client_send_us: float = 0.0
    network_server_us: float = 0.0
    client_recv_us: float = 0.0
    server_request_us: float = 0.0
    server_overhead_us: float = 0.0
    server_queue_us: float = 0.0
    server_compute_input_us: float = 0.0
    server_compute_infer_us: float = 0.0
    server_compute_output_us: float = 0.0
    inference_count: int = 0
    execution_count: int = 0
    # p99 of the server's request duration (its nv_inference_request_summary_us, read after
    # the point; 0 when the server keeps no summary)
    server_p99_us: float = 0.0
    loadavg_1m: float = 0.0
    wall_s: float = 0.0
    command: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.status.startswith("ok")

    @property
    def avg_batch(self) -> float:
        return self.inference_count / self.execution_count if self.execution_count else 0.0

    @property
    def server_non_compute_us(self) -> float:
        """Server time per request outside the model run: overhead + queue + compute in/out."""
        return (
            self.server_overhead_us
            + self.server_queue_us
            + self.server_compute_input_us
            + self.server_compute_output_us
        )

    def row(self) -> dict[str, object]:
        d = asdict(self)
        d["avg_batch"] = round(self.avg_batch, 2)
        return d

    @staticmethod
    def columns() -> list[str]:
        return [f.name for f in fields(Point)] + ["avg_batch"]


_CSV_MAP = {
    "Inferences/Second": "throughput",
    "Client Send": "client_send_us",
    "Network+Server Send/Recv": "network_server_us",
    "Server Queue": "server_queue_us",
    "Server Compute Input": "server_compute_input_us",
    "Server Compute Infer": "server_compute_infer_us",
    "Server Compute Output": "server_compute_output_us",
    "Client Recv": "client_recv_us",
    "p50 latency": "p50_us",
    "p90 latency": "p90_us",
    "p95 latency": "p95_us",
    "p99 latency": "p99_us",
}
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_STDOUT_MAP = {
    "throughput": rf"Throughput: {_NUM} infer/sec",
    "avg_latency_us": rf"Avg latency: {_NUM} usec",
    "p50_us": rf"p50 latency: {_NUM} usec",
    "p90_us": rf"p90 latency: {_NUM} usec",
    "p95_us": rf"p95 latency: {_NUM} usec",
    "p99_us": rf"p99 latency: {_NUM} usec",
    "inference_count": rf"Inference count: {_NUM}",
    "execution_count": rf"Execution count: {_NUM}",
    "server_request_us": rf"Avg request latency: {_NUM} usec",
    "server_overhead_us": rf"\(overhead {_NUM} usec",
    "server_queue_us": rf"queue {_NUM} usec",
    "server_compute_input_us": rf"compute input {_NUM} usec",
    "server_compute_infer_us": rf"compute infer {_NUM} usec",
    "server_compute_output_us": rf"compute output {_NUM} usec",
}


def _set(point: Point, name: str, text: str) -> None:
    kind = type(getattr(point, name))
    setattr(point, name, kind(float(text)))


def parse_stdout(point: Point, out: str) -> None:
    """Fill ``point`` from perf_analyzer's report (the last measurement's block)."""
    block = out.rsplit("Request concurrency:", 1)[-1]
    for name, pattern in _STDOUT_MAP.items():
        m = re.search(pattern, block)
        if m:
            _set(point, name, m.group(1))


def parse_csv(point: Point, path: Path) -> list[str] | None:
    """Fill ``point`` from a one-row ``-f`` CSV; returns [header, row] lines, None when absent."""
    if not path.exists():
        return None
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    row = next(csv.DictReader(lines))
    for col, name in _CSV_MAP.items():
        if row.get(col):
            _set(point, name, row[col])
    return lines[:2]


def run_point(
    binary: Path, point: Point, url: str, settings: Settings, csv_path: Path, log_path: Path
) -> tuple[Point, list[str] | None]:
    """Run perf_analyzer for ``point`` (filled in place); returns it and its CSV lines.

    perf_analyzer reports nothing for a point it could not stabilise; such a point is measured
    once more with twice the window, a 100% stability band and at least 10 trials, and its
    status says so.
    """
    retry = Settings(
        settings.measurement_interval_ms * 2,
        100,
        max(settings.max_trials, 10),
        settings.timeout_s,
        settings.extra,
    )
    logs: list[str] = []
    start = time.monotonic()
    point.loadavg_1m = os.getloadavg()[0]
    rc, out, lines = _invoke(binary, point, url, settings, csv_path)
    logs.append(f"$ {point.command}\n\n{out}")
    retried = rc != 0 and "Failed to obtain stable measurement" in out
    if retried:
        rc, out, lines = _invoke(binary, point, url, retry, csv_path)
        logs.append(f"$ {point.command}\n\n{out}")
    point.wall_s = round(time.monotonic() - start, 1)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("\n\n".join(logs))
    if rc != 0:
        last = [ln for ln in out.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        point.status = f"failed (rc {rc}): {last[0][:120]}"
    elif retried:
        point.status = (
            f"ok (retried: {retry.measurement_interval_ms} ms windows; "
            f"stability {retry.stability_percentage}%)"
        )
    return point, lines


def _invoke(
    binary: Path, point: Point, url: str, settings: Settings, csv_path: Path
) -> tuple[int, str, list[str] | None]:
    csv_path.unlink(missing_ok=True)
    c = point.concurrency
    # An explicit range end makes synchronous perf_analyzer use one thread per request in flight.
    cmd = [
        str(binary),
        "-m",
        point.model,
        "-u",
        url,
        "-i",
        point.protocol,
        "--concurrency-range",
        f"{c}:{c}",
        *settings.flags(),
        "-f",
        str(csv_path),
    ]
    point.command = " ".join(cmd)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=settings.timeout_s)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out += f"\n(timed out after {settings.timeout_s:.0f} s)"
        rc = -1
    lines = None
    if rc == 0:
        parse_stdout(point, out)
        lines = parse_csv(point, csv_path)
    csv_path.unlink(missing_ok=True)
    return rc, out, lines


def write_merged_csv(path: Path, parts: list[list[str]]) -> None:
    """One perf_analyzer CSV from one-row CSVs of the same run kind (header taken once)."""
    if not parts:
        return
    path.write_text("\n".join([parts[0][0], *(p[1] for p in parts)]) + "\n")


# -- servers ---------------------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((HOST, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_status(port: int, path: str) -> int:
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=5)
        c.request("GET", path)
        status = c.getresponse().status
        c.close()
        return status
    except OSError:
        return 0


def wait_ready(
    port: int, alive: Callable[[], bool], timeout_s: float, path: str = "/v2/health/ready"
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            return False
        if http_status(port, path) == 200:
            return True
        time.sleep(0.2)  # readiness poll interval, not a synchronisation point
    return False


class TritonliteServer:
    """``python -m tritonlite`` on port 0; the bound ports are read back from its stderr."""

    MARKS = {
        "http": "Started HTTPService at ",
        "grpc": "Started GRPCInferenceService at ",
        "metrics": "Started Metrics Service at ",
    }

    def __init__(
        self,
        repo: Path,
        log_path: Path,
        extra: tuple[str, ...] = (),
        ready_path: str = "/v2/health/ready",
        root: Path = ROOT,
    ) -> None:
        """``root``: the checkout whose ``tritonlite`` runs (another commit's worktree, for
        side-by-side comparisons; it needs its extensions built in place)."""
        self.repo, self.log_path, self.extra, self.root = repo, log_path, extra, root
        self.ready_path = ready_path
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self._started = threading.Event()

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def start(self, timeout_s: float = 90.0) -> dict[str, int]:
        ports = ["--http-port", "0", "--grpc-port", "0"]
        if "--http-port" in self.extra:  # the caller picked them (one shared port)
            ports = []
        cmd = [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(self.repo),
            *ports,
            "--metrics-port",
            "0",
            "--http-address",
            HOST,
            "--grpc-address",
            HOST,
            *self.extra,
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        self.proc = subprocess.Popen(
            cmd, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        threading.Thread(target=self._drain, daemon=True).start()
        self._started.wait(timeout_s)
        if "http" not in self.ports or not wait_ready(
            self.ports["http"],
            lambda: self.proc is not None and self.proc.poll() is None,
            timeout_s,
            self.ready_path,
        ):
            self.stop()
            raise RuntimeError(f"tritonlite did not start; see {self.log_path}")
        return self.ports

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with open(self.log_path, "wb") as log:
            for raw in self.proc.stderr:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", "replace")
                for proto, mark in self.MARKS.items():
                    if mark in line:
                        self.ports[proto] = int(line.split(mark, 1)[1].split()[0].rsplit(":", 1)[1])
                # Ports are announced gRPC first, then HTTP; HTTP's line means both are known.
                if "http" in self.ports:
                    self._started.set()
        self._started.set()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class TritonServer:
    """The real tritonserver through tools/triton-reference.sh (install, start, stop)."""

    def __init__(self, tool_dir: Path, repo: Path) -> None:
        self.tool_dir, self.repo = tool_dir, repo
        self.script = ROOT / "tools" / "triton-reference.sh"
        self.ports: dict[str, int] = {}
        self.pid = 0
        self.log_path = ""

    def start(self) -> dict[str, int]:
        http_port, grpc_port, metrics_port = free_ports(3)
        run = subprocess.run(
            [
                "bash",
                str(self.script),
                "start",
                str(self.tool_dir),
                str(self.repo),
                str(http_port),
                str(grpc_port),
                str(metrics_port),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if run.returncode != 0:
            raise RuntimeError(f"tritonserver failed to start:\n{run.stdout}{run.stderr}")
        pid, self.log_path = run.stdout.split()[-2:]
        self.pid = int(pid)
        self.ports = {"http": http_port, "grpc": grpc_port}
        return self.ports

    def stop(self) -> None:
        pid_file = self.tool_dir / "triton.pid"
        ours = pid_file.exists() and pid_file.read_text().strip() == str(self.pid)
        if ours:
            subprocess.run(
                ["bash", str(self.script), "stop", str(self.tool_dir)], timeout=60, check=False
            )
            return
        # Someone else started a server from the same tool dir since: stop only our own.
        try:
            os.kill(self.pid, signal.SIGTERM)
            for _ in range(60):
                os.kill(self.pid, 0)
                time.sleep(0.5)  # waiting for our own child to exit
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def server_p99_us(port: int, model: str) -> float:
    """The 0.99 quantile of ``model``'s request summary on the metrics ``port`` (0.0 if none).

    tritonlite's summaries cover at most the newest 8,192 requests of the last 60 s, so read
    right after a point of a few thousand infer/s they are that point's own."""
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=5)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode("utf-8", "replace")
        c.close()
    except OSError:
        return 0.0
    head = f'nv_inference_request_summary_us{{model="{model}",quantile="0.99"'
    for line in text.splitlines():
        if line.startswith(head):
            try:
                value = float(line.rsplit(" ", 1)[1])
            except ValueError:
                return 0.0
            return value if value == value else 0.0  # NaN: no observation yet
    return 0.0


def model_ready(port: int, model: str) -> bool:
    return http_status(port, f"/v2/models/{model}/ready") == 200


def check_answer(port: int, model: str) -> str:
    """One HTTP request checked against numpy; '' when right, else what is wrong.

    perf_analyzer never looks at outputs, so each model is checked once before it is measured.
    """
    import models
    import numpy as np
    import tritonclient.http as httpclient

    rng = np.random.default_rng(7)
    try:
        client = httpclient.InferenceServerClient(f"{HOST}:{port}", network_timeout=60)
        if model == "add_sub":
            a, b = (rng.random((2, 16), dtype=np.float32) for _ in range(2))
            inputs = [httpclient.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            res = client.infer(model, inputs)
            got = [res.as_numpy("OUTPUT0"), res.as_numpy("OUTPUT1")]
            want = [a + b, a - b]
        else:
            x = rng.random((2, models.MLP_WIDTH), dtype=np.float32)
            inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            got = [client.infer(model, [inp]).as_numpy("OUTPUT0")]
            want = [models.mlp_reference(x)]
        client.close()
    except Exception as exc:  # tritonclient raises its own exception types
        return f"request failed: {exc}"[:140]
    for g, w in zip(got, want, strict=True):
        if g is None or g.shape != w.shape or not np.allclose(g, w, rtol=1e-3, atol=1e-4):
            return "wrong answer"
    return ""

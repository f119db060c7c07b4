"""Decompression bombs against a real server: what the loop, the memory and other clients see.

Starts ``python -m tritonlite`` on ``model_repository/`` (``--pythonpath`` picks the tree whose
tritonlite runs, so two trees can be compared on the same machine), then sends one bomb and,
meanwhile, keeps two well-behaved clients going:

* a health prober: ``GET /v2/health/ready`` over one kept-alive HTTP connection, back to back:
  the longest time one probe took (what an orchestrator's probe would see);
* a gRPC client: ``ServerLive`` on its own channel with a 1 s deadline, back to back: how many
  calls succeeded and failed while the bomb was in the server.

The server's RSS is read from /proc every 5 ms (peak, and 1 s after the bomb was answered).
The loop stall is measured inside the server: a callback re-armed every millisecond on its event
loop notes the loop thread's CPU time (``time.thread_time``) between two runs; the longest such
stretch after the bomb was sent is the longest the loop was held (CPU time, so a machine shared
with other work does not inflate it; the wall-clock gap is reported beside it).

Bombs (``--kind``):

* ``grpc``: one ModelInfer message, gzip, that inflates to ``--size`` bytes (default 2 GiB less
  1 MiB, under gRPC's 2 GiB message limit), sent over raw HTTP/2 (the ``h2`` package);
* ``http``: one ``POST /v2/models/add_sub/infer`` with ``Content-Encoding: gzip`` that inflates
  to ``--size`` bytes: a small JSON header and a binary tail of zeros that does not match the
  model (so the handler refuses it without reading it: what is measured is the inflation). Give
  at most ``--http-max-input-size`` (64 MiB by default) to measure a body that is accepted and
  inflated whole, more to measure one refused at the limit.

    python bench/bomb.py --kind grpc [--frontend native|aio] [--pythonpath TREE] [--json out]

Prints one JSON line. Too slow and too large for the test suite: the suites test the same
behaviour at small sizes (tests/frontends/wire/test_inflate.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
from tritonclient.grpc import service_pb2

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService) at \S+:(\d+)")


def gzip_bomb(prefix: bytes, zeros: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [c.compress(prefix)]
    chunk = bytes(8 * MiB)
    left = zeros
    while left > 0:
        parts.append(c.compress(chunk[: min(left, len(chunk))]))
        left -= len(chunk)
    parts.append(c.flush())
    return b"".join(parts)


def infer_message(size: int) -> tuple[bytes, int]:
    """The start of a serialized ModelInferRequest whose last field (raw_input_contents, 7)
    holds ``zeros`` zero bytes, so that the whole message is ``size`` bytes."""
    head = service_pb2.ModelInferRequest(model_name="add_sub").SerializeToString()
    zeros = size - len(head) - 1 - 5
    field = bytes([7 << 3 | 2]) + _varint(zeros)
    return head + field, zeros


def binary_body(size: int) -> tuple[bytes, int]:
    """The JSON header of a binary-tensor infer request whose tail is zeros, and the tail's size
    (``size`` bytes in all); the header length travels in ``Inference-Header-Content-Length``."""
    tail = size - 200
    head = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                     "parameters": {"binary_data_size": tail}}]}
    ).encode()  # fmt: skip
    return head.ljust(200), tail


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


# Runs tritonlite with a ticker on its loop; a stretch over 2 ms is appended to $BOMB_STALLS as
# "monotonic cpu_s wall_s".
_WRAPPER = """
import asyncio, os, sys, time, uvloop
path = os.environ["BOMB_STALLS"]
_run = uvloop.run
def run(coro, **kw):
    async def ticked():
        loop = asyncio.get_running_loop()
        last = [time.thread_time(), time.monotonic()]
        def tick():
            cpu, wall = time.thread_time(), time.monotonic()
            if cpu - last[0] > 0.002:
                with open(path, "a") as f:
                    f.write(f"{wall} {cpu - last[0]} {wall - last[1]}\\n")
            last[0], last[1] = cpu, wall
            loop.call_later(0.001, tick)
        loop.call_soon(tick)
        return await coro
    return _run(ticked(), **kw)
uvloop.run = run
from tritonlite.cli import main
sys.argv[0] = "tritonlite"
sys.exit(main())
"""


class Server:
    def __init__(self, pythonpath: str, frontend: str, repo: Path, extra: list[str]) -> None:
        self.stalls = tempfile.NamedTemporaryFile(suffix=".stalls")
        env = dict(os.environ, PYTHONPATH=pythonpath, BOMB_STALLS=self.stalls.name)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, "--model-repository", str(repo),
             "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
             "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
             "--frontend", frontend, "--log-info", "true", *extra],
            cwd=pythonpath, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        ports: dict[str, int] = {}
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 120
        while len(ports) < 2 and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("the server exited before it started")
            m = _STARTED.search(line)
            if m:
                ports[m.group(1)] = int(m.group(2))
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.http = ports["HTTPService"]
        self.grpc = ports["GRPCInferenceService"]

    def worst_stall(self, since: float) -> tuple[float, float]:
        """The longest loop stretch after ``since`` (monotonic): (CPU s, wall s)."""
        worst = (0.0, 0.0)
        with open(self.stalls.name) as f:
            for line in f:
                at, cpu, wall = map(float, line.split())
                if at >= since and cpu > worst[0]:
                    worst = (cpu, wall)
        return worst

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Watch:
    """The health prober, the gRPC client and the RSS sampler, until ``stop``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.done = threading.Event()
        self.worst_probe = 0.0
        self.probes = 0
        self.probe_errors = 0
        self.grpc_ok = 0
        self.grpc_failed = 0
        self.peak = server.rss()
        self.threads = [
            threading.Thread(target=f, daemon=True) for f in (self._probe, self._grpc, self._rss)
        ]
        for t in self.threads:
            t.start()

    def _probe(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http, timeout=60)
        while not self.done.is_set():
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/v2/health/ready")
                conn.getresponse().read()
            except OSError:
                self.probe_errors += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.server.http, timeout=60)
            self.worst_probe = max(self.worst_probe, time.perf_counter() - t0)
            self.probes += 1
        conn.close()

    def _grpc(self) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.server.grpc}") as ch:
            live = ch.unary_unary(
                "/inference.GRPCInferenceService/ServerLive",
                request_serializer=service_pb2.ServerLiveRequest.SerializeToString,
                response_deserializer=service_pb2.ServerLiveResponse.FromString,
            )
            while not self.done.is_set():
                try:
                    live(service_pb2.ServerLiveRequest(), timeout=1.0)
                    self.grpc_ok += 1
                except grpc.RpcError:
                    self.grpc_failed += 1

    def _rss(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, self.server.rss())
            time.sleep(0.005)

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(30)


def send_grpc(port: int, message: bytes) -> tuple[str, str]:
    """One unary ModelInfer over raw HTTP/2 with a compressed message; (grpc-status, message)."""
    sock = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
         (":path", "/inference.GRPCInferenceService/ModelInfer"),
         ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-encoding", "gzip")],
    )  # fmt: skip
    framed = b"\x01" + len(message).to_bytes(4, "big") + message
    sent = 0
    status: dict[str, str] = {}
    sock.sendall(conn.data_to_send())
    while True:
        while sent < len(framed):
            n = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size,
                    len(framed) - sent)  # fmt: skip
            if n <= 0:
                break
            conn.send_data(sid, framed[sent : sent + n], end_stream=sent + n == len(framed))
            sent += n
        sock.sendall(conn.data_to_send())
        data = sock.recv(1 << 16)
        if not data:
            return status.get("grpc-status", "closed"), status.get("grpc-message", "")
        for ev in conn.receive_data(data):
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                for k, v in ev.headers:
                    status[k.decode() if isinstance(k, bytes) else k] = (
                        v.decode() if isinstance(v, bytes) else v
                    )
                if "grpc-status" in status:
                    sock.close()
                    return status["grpc-status"], status.get("grpc-message", "")
            elif isinstance(ev, h2.events.StreamReset):
                sock.close()
                return "reset", str(ev.error_code)


def send_http(port: int, body: bytes) -> tuple[str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request(
        "POST", "/v2/models/add_sub/infer", body,
        {"Content-Encoding": "gzip", "Inference-Header-Content-Length": "200"},
    )  # fmt: skip
    resp = conn.getresponse()
    text = resp.read()[:200].decode("latin-1")
    conn.close()
    return str(resp.status), text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=("grpc", "http"), default="grpc")
    ap.add_argument("--size", type=int, default=0, help="bytes the bomb inflates to")
    ap.add_argument("--frontend", choices=("native", "aio"), default="native")
    ap.add_argument("--pythonpath", default=str(ROOT), help="the tree whose tritonlite runs")
    ap.add_argument("--repo", default=str(ROOT / "model_repository"))
    ap.add_argument("--server-flag", action="append", default=[], help="more server flags")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    size = args.size or ((2 << 30) - MiB if args.kind == "grpc" else 64 * MiB)
    if args.kind == "grpc":
        head, zeros = infer_message(size)
        bomb = gzip_bomb(head, zeros)
    else:
        bomb = gzip_bomb(*binary_body(size))
    server = Server(args.pythonpath, args.frontend, Path(args.repo), args.server_flag)
    try:
        time.sleep(1.0)  # let start-up settle before the baseline RSS
        base_rss = server.rss()
        watch = Watch(server)
        time.sleep(0.5)
        sent_at = time.monotonic()
        t0 = time.perf_counter()
        send = send_grpc if args.kind == "grpc" else send_http
        status, message = send(server.grpc if args.kind == "grpc" else server.http, bomb)
        answered = time.perf_counter() - t0
        time.sleep(1.0)
        watch.stop()
        stall_cpu, stall_wall = server.worst_stall(sent_at)
        out: dict[str, Any] = {
            "kind": args.kind,
            "frontend": args.frontend,
            "tree": args.pythonpath,
            "compressed_bytes": len(bomb),
            "inflates_to": size,
            "answer": [status, message[:160]],
            "answered_s": round(answered, 3),
            "loop_stall_cpu_ms": round(stall_cpu * 1e3, 1),
            "loop_stall_wall_ms": round(stall_wall * 1e3, 1),
            "worst_health_probe_ms": round(watch.worst_probe * 1e3, 1),
            "health_probes": watch.probes,
            "health_errors": watch.probe_errors,
            "grpc_calls_ok": watch.grpc_ok,
            "grpc_calls_failed": watch.grpc_failed,
            "rss_base_mib": round(base_rss / MiB, 1),
            "rss_peak_growth_mib": round((watch.peak - base_rss) / MiB, 1),
            "rss_after_growth_mib": round((server.rss() - base_rss) / MiB, 1),
            "server_alive": server.proc.poll() is None,
        }
    finally:
        server.stop()
    line = json.dumps(out)
    print(line)
    if args.json:
        with open(args.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()

"""Wire attacks at full size against a real server: what the regression tests do small.

Each attack starts its own tritonlite child (``--frontend``, native by default) and prints one
JSON line; the exit status is 1 if any of them got through.

* ``preface``: 700 connections to one shared port (``--http-max-connections 512
  --grpc-max-connections 512``) send part of the HTTP/2 preface and then nothing; after 3 s at
  most 512 may still be open, and a health probe on a new connection is answered. (native only)
* ``extension``: a chunked request whose first chunk has a 64 MiB extension; the server must
  answer 400 and close after reading well under 64 MiB.
* ``resets``: one gRPC connection opens and resets 350 streams a second for ``--seconds``
  (reads 300 ms apart, the pattern that cut a steady client off), which must never get GOAWAY;
  then 5,000 at once, which must get GOAWAY ENHANCE_YOUR_CALM. (native only)
* ``stalled`` / ``stalled_http``: ten gRPC calls / HTTP requests whose 8 MiB responses the
  clients never read; the server's RSS before, while they are stalled, and 3 s after their
  connections closed, which must be back within 32 MiB of before.

    python bench/wire_attacks.py [--frontend native|aio] [--only NAME ...] [--seconds 10]

``make wire-attacks`` runs them all (about a minute on two cores); not part of make test.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ENHANCE_YOUR_CALM = 0xB


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _hostport(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _health(url: str) -> int:
    with socket.create_connection(_hostport(url), timeout=10) as s:
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        head = s.recv(65536)
    return int(head.split(b" ", 2)[1]) if head else 0


def _server(frontend: str, *args: str, dims: int = 16) -> Any:
    from conftest import start_server

    from tools.onnx_graphs import write_add_sub

    repo = Path(tempfile.mkdtemp(prefix="wire_attacks_"))
    write_add_sub(repo, "add_sub", 0, dims=dims)
    return start_server(repo, "--frontend", frontend, "--allow-metrics=false", *args)


def attack_preface(frontend: str, seconds: float) -> dict[str, Any]:
    if frontend != "native":
        return {"attack": "preface", "skipped": "one port is native only"}
    port = _free_port()
    s = _server(
        frontend,
        "--http-port",
        str(port),
        "--grpc-port",
        str(port),
        "--http-max-connections",
        "512",
        "--grpc-max-connections",
        "512",
    )
    held = []
    try:
        for _ in range(700):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(PREFACE[:10])
            held.append(sock)
        time.sleep(3.0)
        still = sum(not _closed(x) for x in held)
        status = _health(s.http_url)
    finally:
        for x in held:
            x.close()
        s.stop()
    return {"attack": "preface", "open_after_3s": still, "health": status, "ok": still <= 512}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attack_extension(frontend: str, seconds: float) -> dict[str, Any]:
    s = _server(frontend)
    sent = 0
    answer = b""
    t0 = time.monotonic()
    try:
        with socket.create_connection(_hostport(s.http_url), timeout=30) as sock:
            sock.sendall(
                b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n3;ext="
            )
            block = b"e" * (1 << 20)
            try:
                while sent < 64 << 20:
                    sock.sendall(block)
                    sent += len(block)
            except OSError:
                pass
            try:
                answer = sock.recv(65536)
            except OSError:
                pass
    finally:
        s.stop()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return {
        "attack": "extension",
        "sent_mib": sent / (1 << 20),
        "status": status,
        "seconds": round(time.monotonic() - t0, 2),
        "ok": sent < 64 << 20 and status in (0, 400),
    }


def _h2_client() -> Any:
    import h2.config
    import h2.connection

    return h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )


_REQUEST_HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ServerLive"),
    (b":authority", b"t"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


def _goaway_code(sock: socket.socket, cl: Any) -> int | None:
    import h2.events
    import h2.exceptions

    sock.settimeout(0.001)
    while True:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            return None
        except OSError:
            return -1
        if not data:
            return -1
        try:
            events = cl.receive_data(data)
        except h2.exceptions.ProtocolError:
            return -1
        for e in events:
            if isinstance(e, h2.events.ConnectionTerminated):
                return int(e.error_code)


def attack_resets(frontend: str, seconds: float) -> dict[str, Any]:
    if frontend != "native":
        return {"attack": "resets", "skipped": "grpc-core's own limits on aio"}
    s = _server(frontend)
    try:
        sock = socket.create_connection(_hostport(s.grpc_url), timeout=10)
        cl = _h2_client()
        cl.initiate_connection()
        sock.sendall(cl.data_to_send())
        steady_goaway = None
        sid = 1
        t0 = time.monotonic()
        tick = t0
        while time.monotonic() - t0 < seconds and steady_goaway is None:
            for _ in range(105):  # 350/s in reads 300 ms apart
                cl.send_headers(sid, _REQUEST_HEADERS)
                cl.reset_stream(sid)
                sid += 2
            sock.sendall(cl.data_to_send())
            steady_goaway = _goaway_code(sock, cl)
            tick += 0.3
            time.sleep(max(0.0, tick - time.monotonic()))
        burst_goaway = None
        if steady_goaway is None:
            for _ in range(5000):
                cl.send_headers(sid, _REQUEST_HEADERS)
                cl.reset_stream(sid)
                sid += 2
            try:
                sock.sendall(cl.data_to_send())
            except OSError:
                pass
            deadline = time.monotonic() + 10
            while burst_goaway is None and time.monotonic() < deadline:
                burst_goaway = _goaway_code(sock, cl)
        sock.close()
    finally:
        s.stop()
    return {
        "attack": "resets",
        "steady_seconds": seconds,
        "steady_goaway": steady_goaway,
        "burst_goaway": burst_goaway,
        "ok": steady_goaway is None and burst_goaway == ENHANCE_YOUR_CALM,
    }


def _infer_message(n: int) -> bytes:
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add()
        t.name, t.datatype = name, "FP32"
        t.shape.append(n)
        req.raw_input_contents.append(b"\0" * (4 * n))
    body = req.SerializeToString()
    return struct.pack(">BL", 0, len(body)) + body


def _stalled_call(url: str, message: bytes) -> tuple[socket.socket, Any]:
    """Send one ModelInfer and then never read its response (after the request is out)."""
    import h2.events

    sock = socket.create_connection(_hostport(url), timeout=30)
    cl = _h2_client()
    cl.initiate_connection()
    sock.sendall(cl.data_to_send())
    headers = list(_REQUEST_HEADERS)
    headers[2] = (b":path", b"/inference.GRPCInferenceService/ModelInfer")
    cl.send_headers(1, headers)
    pos = 0
    while pos < len(message):
        room = min(cl.local_flow_control_window(1), cl.max_outbound_frame_size, len(message) - pos)
        if room > 0:
            cl.send_data(1, message[pos : pos + room], end_stream=pos + room == len(message))
            pos += room
            sock.sendall(cl.data_to_send())
            continue
        for e in cl.receive_data(sock.recv(1 << 16)):
            if isinstance(e, h2.events.StreamEnded):
                raise AssertionError("answered before the request was sent")
        sock.sendall(cl.data_to_send())
    return sock, cl


def _read_to_end(sock: socket.socket, cl: Any) -> int:
    import h2.events

    got = 0
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return got
        for e in cl.receive_data(data):
            if isinstance(e, h2.events.DataReceived):
                got += len(e.data)
                cl.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                return got
        sock.sendall(cl.data_to_send())


def attack_stalled(frontend: str, seconds: float) -> dict[str, Any]:
    n = 1 << 20  # FP32[1 Mi]: two 4 MiB outputs, an 8 MiB response
    s = _server(frontend, dims=n)
    message = _infer_message(n)
    try:
        for _ in range(2):  # warm: calls read to their end
            sock, cl = _stalled_call(s.grpc_url, message)
            got = _read_to_end(sock, cl)
            assert got >= 8 << 20, got
            sock.close()
        return _stall_and_close("stalled", s, lambda: _stalled_call(s.grpc_url, message)[0])
    finally:
        s.stop()


def _stall_and_close(name: str, s: Any, stall: Callable[[], socket.socket]) -> dict[str, Any]:
    """RSS before, while ten ``stall()`` connections hold unread responses, and 3 s after
    they closed; the result must be back within 32 MiB and health answered."""
    pid = s.proc.pid
    time.sleep(1.0)
    before = _rss_mib(pid)
    socks = [stall() for _ in range(10)]
    time.sleep(3.0)
    during = _rss_mib(pid)
    for sock in socks:
        sock.close()
    time.sleep(3.0)
    after = _rss_mib(pid)
    health = _health(s.http_url)
    return {
        "attack": name,
        "rss_mib_before": round(before, 1),
        "rss_mib_stalled": round(during, 1),
        "rss_mib_after_close": round(after, 1),
        "health": health,
        "ok": after - before < 32 and health == 200,
    }


def _http_infer(n: int) -> bytes:
    """One binary-tensor HTTP infer of add_sub over FP32[n] (an 8 MiB answer for n = 1 Mi)."""
    head = json.dumps(
        {
            "inputs": [
                {"name": x, "shape": [n], "datatype": "FP32"}
                | {"parameters": {"binary_data_size": 4 * n}}
                for x in ("INPUT0", "INPUT1")
            ],
            "outputs": [
                {"name": x, "parameters": {"binary_data": True}} for x in ("OUTPUT0", "OUTPUT1")
            ],
        }
    ).encode()
    body = head + b"\0" * (8 * n)
    return (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
        % (len(head), len(body))
        + body
    )


def _read_http_response(sock: socket.socket) -> None:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            return
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    left = length - len(rest)
    while left > 0:
        chunk = sock.recv(1 << 20)
        if not chunk:
            return
        left -= len(chunk)


def attack_stalled_http(frontend: str, seconds: float) -> dict[str, Any]:
    n = 1 << 20
    s = _server(frontend, dims=n)
    request = _http_infer(n)
    try:
        for _ in range(2):  # warm: answers read to their end
            with socket.create_connection(_hostport(s.http_url), timeout=30) as sock:
                sock.sendall(request)
                _read_http_response(sock)

        def stall() -> socket.socket:
            sock = socket.create_connection(_hostport(s.http_url), timeout=30)
            sock.sendall(request)
            return sock

        return _stall_and_close("stalled_http", s, stall)
    finally:
        s.stop()


ATTACKS: dict[str, Callable[[str, float], dict[str, Any]]] = {
    "preface": attack_preface,
    "extension": attack_extension,
    "resets": attack_resets,
    "stalled": attack_stalled,
    "stalled_http": attack_stalled_http,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frontend", default="native", choices=("aio", "native"))
    ap.add_argument("--only", nargs="*", choices=sorted(ATTACKS), default=None)
    ap.add_argument("--seconds", type=float, default=10.0, help="the steady reset phase")
    args = ap.parse_args()
    ok = True
    for name in args.only or ATTACKS:
        result = ATTACKS[name](args.frontend, args.seconds)
        print(json.dumps(result), flush=True)
        ok = ok and result.get("ok", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

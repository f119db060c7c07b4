"""SIGTERM landing on HTTP connections in every state: each is answered, the exit is bounded.

A rolling update sends SIGTERM while clients are at every step of a request. The listener
stops at once, but a connection the server has accepted (or that the kernel has completed and
the loop not yet accepted) is served: its request is answered whether the signal found it
connected and silent, with its headers half sent, its body half sent, executing, or with its
response being written. A further request on a connection that had one before the signal gets
503 with ``Connection: close``; readiness is false from the signal on. Raw sockets put each connection in its state before the signal
(conditions, no sleeps); each round runs all five at once, and rounds repeat. A burst of 40
uploads of 64 x 1024 JSON floats, signalled while they connect and upload, is answered in
full. A stream whose client left ends, whether or not its model notices, and
``--exit-timeout-secs`` bounds the stop whatever holds it: a model whose ``finalize`` hangs is
cut off (exit 1).
Where nothing should hold the exit, the exit timeout is far longer than the wait for the
exit: a connection kept open until the timeout (as one whose response was being written at the
signal once was) fails the test instead of passing late. Both front ends run this through
``TRITONLITE_TEST_FRONTEND``.
"""

from __future__ import annotations

import asyncio
import io
import json
import select
import signal
import socket
import struct
import subprocess
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from conftest import Server, start_server, wait_until
from repos import write_mlp, write_python_model

pytestmark = pytest.mark.timeout(180)

SLOW = """
import sys, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        print("slow: execute started", file=sys.stderr, flush=True)
        time.sleep(0.3)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
"""
SLOW_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
parameters { key: "TRITONLITE_INLINE_EXECUTE" value { string_value: "false" } }
"""
# OUT: BIG copies of IN[0], far more than the socket buffers hold, so the response is still
# being written while the client does not read
BIG_N = 8 * 1024 * 1024
BIG = f"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT",
                np.full({BIG_N}, pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0],
                        np.float32))])
            for r in requests
        ]
"""
BIG_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]
"""
# decoupled: sends until its request is cancelled (or, IGNORE, for 60 s whatever happens)
STREAM = """
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            ignore = json.loads(r.parameters()).get("IGNORE", False)
            threading.Thread(target=self.run, args=(r.get_response_sender(), ignore),
                             daemon=True).start()
        return None

    @staticmethod
    def run(sender, ignore):
        end = time.monotonic() + 60
        i = 0
        while time.monotonic() < end and (ignore or not sender.is_cancelled()):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("TEXT", np.array([f"t{i}".encode()], dtype=object))]))
            i += 1
            time.sleep(0.05)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""
STREAM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "TEXT" data_type: TYPE_STRING dims: [1] }]
output [{ name: "TEXT" data_type: TYPE_STRING dims: [1] }]
"""
HANGING_FINALIZE = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
            for r in requests
        ]

    def finalize(self):
        time.sleep(120)
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("drain_repo")
    write_python_model(repo, "slow", SLOW, SLOW_CONFIG)
    write_python_model(repo, "big", BIG, BIG_CONFIG)
    write_python_model(repo, "stream", STREAM, STREAM_CONFIG)
    return repo


def _infer_request(model: str, body: bytes, extra: bytes = b"") -> tuple[bytes, bytes]:
    head = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"%sContent-Length: %d\r\n\r\n" % (model.encode(), extra, len(body))
    )
    return head, body


def _slow_body(value: float) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [4], "data": [value] * 4}]}
    ).encode()


def _big_body(value: float) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [value]}],
            "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
        }
    ).encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One Content-Length framed HTTP/1.1 response."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed before a response: {buf[:200]!r}")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    length = int(headers["content-length"])
    parts = [rest]
    got = len(rest)
    while got < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {got} of {length} body bytes")
        parts.append(chunk)
        got += len(chunk)
    return int(lines[0].split(" ", 2)[1]), headers, b"".join(parts)[:length]


def _connect(server: Server) -> socket.socket:
    host, port = server.http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    return sock


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _signal(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "signal received" in server.output(), 30)


@pytest.mark.parametrize("round_", range(3))
def test_a_request_in_any_state_at_sigterm_is_answered(repo: Path, round_: int) -> None:
    server = start_server(repo, "--exit-timeout-secs=300", "--allow-metrics=false")
    socks: dict[str, socket.socket] = {}
    try:
        socks = {s: _connect(server) for s in ("kept", "executing", "responding", "body")}
        # kept: a connection that has had its request before the signal
        socks["kept"].sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        assert _response(socks["kept"])[0] == 200
        head, body = _infer_request("slow", _slow_body(1.0))
        socks["executing"].sendall(head + body)
        wait_until(lambda: "slow: execute started" in server.output(), 30)
        head, body = _infer_request("big", _big_body(2.0))
        socks["responding"].sendall(head + body)
        wait_until(lambda: _readable(socks["responding"]), 30)  # the response has begun
        body_head, body_body = _infer_request("slow", _slow_body(3.0))
        socks["body"].sendall(body_head + body_body[:20])
        headers_head, headers_body = _infer_request("slow", _slow_body(4.0))
        socks["headers"] = _connect(server)
        socks["headers"].sendall(headers_head[:30])
        socks["connected"] = _connect(server)
        socks["probe"] = _connect(server)
        _signal(server)
        socks["probe"].sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
        assert _response(socks["probe"])[0] == 400  # not ready from the signal on
        socks["headers"].sendall(headers_head[30:] + headers_body)
        socks["body"].sendall(body_body[20:])
        connected_head, connected_body = _infer_request("slow", _slow_body(5.0))
        socks["connected"].sendall(connected_head + connected_body)
        socks["kept"].sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")

        for state, value in (("executing", 1.0), ("body", 3.0), ("headers", 4.0)):
            status, _, data = _response(socks[state])
            assert status == 200, (state, data)
            assert json.loads(data)["outputs"][0]["data"] == [2 * value] * 4, state
        status, _, data = _response(socks["connected"])
        assert status == 200, ("connected", data)
        assert json.loads(data)["outputs"][0]["data"] == [10.0] * 4
        status, headers, data = _response(socks["responding"])
        assert status == 200, ("responding", data[:200])
        json_len = int(headers["inference-header-content-length"])
        out = np.frombuffer(data[json_len:], np.float32)
        assert out.size == BIG_N and out[0] == out[-1] == 2.0
        # a further request on a connection that had one: 503 and close (or, had the server
        # already closed the idle connection, nothing)
        try:
            status, headers, data = _response(socks["kept"])
        except ConnectionError:
            pass
        else:
            assert status == 503 and headers.get("connection") == "close", data
            assert socks["kept"].recv(1) == b""
        rc = server.proc.wait(60)
    finally:
        for s in socks.values():
            s.close()
        server.stop()
    assert rc == 0, server.output()


@pytest.mark.parametrize("delay_s", [0.02, 0.05, 0.1, 0.2])
def test_uploads_arriving_during_sigterm_are_all_answered(tmp_path: Path, delay_s: float) -> None:
    """40 clients each POST a 64 x 1024 JSON body to an MLP (the 0.02-0.2 s spread lands the
    signal while they connect, send headers and upload); every one gets its 200."""
    write_mlp(tmp_path, "mlp")
    server = start_server(tmp_path, "--exit-timeout-secs=300", "--allow-metrics=false")
    rng = np.random.default_rng(0)
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [64, 1024],
                    "data": rng.random(64 * 1024, dtype=np.float32).round(4).tolist(),
                }
            ]
        }
    ).encode()
    url = f"http://{server.http_url}/v2/models/mlp/infer"

    async def one(session: aiohttp.ClientSession) -> object:
        try:
            async with session.post(url, data=io.BytesIO(body)) as r:
                await r.read()
                return r.status
        except aiohttp.ClientError as exc:
            return repr(exc)

    async def burst() -> list[object]:
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            tasks = [asyncio.create_task(one(session)) for _ in range(40)]
            await asyncio.sleep(delay_s)  # the scenario: how far the clients have got
            server.proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks)

    try:
        results = asyncio.run(burst())
        rc = server.proc.wait(60)
    finally:
        server.stop()
    assert results == [200] * 40, (results, server.output()[-3000:])
    assert rc == 0, server.output()


def _stream_and_leave(server: Server, parameters: dict[str, object]) -> None:
    """Open a generate_stream, read its first event, and close the connection."""
    sock = _connect(server)
    body = json.dumps({"TEXT": "x", "parameters": parameters}).encode()
    sock.sendall(
        b"POST /v2/models/stream/generate_stream HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # reset: the client is gone


@pytest.mark.parametrize("ignore", [False, True])
def test_a_stream_whose_client_left_ends_and_the_server_exits_0(repo: Path, ignore: bool) -> None:
    """The stream ends when its client leaves (the request is cancelled), even when the model
    goes on sending regardless: nothing holds the exit."""
    server = start_server(repo, "--exit-timeout-secs=300", "--allow-metrics=false")
    try:
        _stream_and_leave(server, {"IGNORE": ignore})
        _signal(server)
        rc = server.proc.wait(60)  # (it once hung here)
    finally:
        server.stop()
    assert rc == 0, server.output()


def test_exit_timeout_bounds_a_finalize_that_hangs(tmp_path: Path) -> None:
    write_python_model(tmp_path, "stubborn", HANGING_FINALIZE, SLOW_CONFIG)
    server = start_server(tmp_path, "--exit-timeout-secs=2", "--allow-metrics=false")
    try:
        _signal(server)
        try:
            rc: int | None = server.proc.wait(30)  # finalize would take 120 s
        except subprocess.TimeoutExpired:
            rc = None
    finally:
        server.stop()
    assert rc == 1, server.output()
    assert "Exit timeout expired. Exiting immediately." in server.output()

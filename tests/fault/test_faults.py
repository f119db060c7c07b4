"""Faults a server must survive, on both front ends (issue 18, "a fault suite").

* SIGTERM while requests are in progress (uploads still arriving, a gRPC stream, sequences,
  queued batches): every request the server had accepted before the signal is answered, with
  its own data, and the server then exits 0. "Accepted" is observed, not guessed: an upload's
  head got its ``100 Continue``; a batch's requests are all executing or counted pending
  (``nv_inference_pending_request_count``). A gated python model holds execution until the
  test opens the gate, after the server logged that it got the signal.
* a shared-memory file truncated after registration: that request fails cleanly (no SIGBUS);
* a model.py that raises, and one that hangs (``--backend-execution-timeout``): errors for
  those requests, everything else keeps serving;
* a model unloaded while a batch is executing: the batch is answered, later requests refused;
* the file-descriptor limit reached (the child's RLIMIT_NOFILE set low): health still answers.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import mmap
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Server, wait_until
from faultkit import (
    Http,
    check_add_sub,
    infer_body,
    scrape,
    start_raw,
    write_gated,
    write_repo,
)
from tritonclient.grpc import service_pb2

pytestmark = pytest.mark.timeout(180)

FRONTENDS = ["aio", "native"]
A, B = [1.0, 2.0, 3.0, 4.0], [0.25, 0.5, 0.75, 1.0]


def _py_body(values: list[float]) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 4], "data": values}]}
    ).encode()


def _check_py(status: int, body: bytes, values: list[float]) -> None:
    assert status == 200, (status, body[:300])
    out = json.loads(body)["outputs"][0]["data"]
    np.testing.assert_allclose(out, np.multiply(values, 2))


def _wait_log(server: Server, pattern: str, count: int = 1, timeout: float = 30.0) -> list[str]:
    rx = re.compile(pattern)

    def found() -> list[str]:
        return [line for line in server.output().splitlines() if rx.search(line)]

    wait_until(lambda: len(found()) >= count, timeout)
    return found()


def _pending(server: Server, model: str) -> int:
    key = ("nv_inference_pending_request_count", (("model", model), ("version", "1")))
    return int(scrape(server.metrics_url).get(key, -1))


def _sigterm(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    _wait_log(server, "signal received")


def _exit_code(server: Server) -> int:
    """The exit code of a server that already got its SIGTERM (stop() would send another one,
    which can land after the loop removed its handler and kill the process: -15)."""
    try:
        server.proc.wait(60)
    finally:
        server.stop()
    return server.proc.returncode


@pytest.fixture()
def gated(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with add_sub, ``gated`` (dynamic batching to 8) and ``gated_seq``
    (sequence batching); the gate file, not yet there."""
    gate = tmp_path / "gate"
    repo = write_repo(tmp_path / "repo", python=False)
    write_gated(repo, "gated", gate)
    write_gated(
        repo, "gated_seq", gate, "sequence_batching { max_sequence_idle_microseconds: 60000000 }"
    )
    return repo, gate


# -- SIGTERM ----------------------------------------------------------------------------------
UPLOADS = 20
UPLOAD_BYTES = 256 * 1024


def _upload_head(server: Server, body_len: int) -> socket.socket:
    """A connection that sent an infer head with ``Expect: 100-continue`` and got its 100."""
    host, port = server.http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
        b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % body_len
    )
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 100"), got
    return sock


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body[:length]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_sigterm_during_uploads_answers_every_accepted_upload(
    server_factory: Callable[..., Server], gated: tuple[Path, Path], frontend: str
) -> None:
    repo, _ = gated
    server = server_factory(repo, "--frontend", frontend, "--exit-timeout-secs", "60")
    body = infer_body(A, B)
    body += b" " * (UPLOAD_BYTES - len(body))  # JSON allows trailing whitespace
    socks = [_upload_head(server, len(body)) for _ in range(UPLOADS)]
    for s in socks:
        s.sendall(body[: len(body) // 2])
    _sigterm(server)
    answered = 0
    try:
        for s in socks:
            s.sendall(body[len(body) // 2 :])
        for s in socks:
            check_add_sub(*_read_response(s), A, B)
            answered += 1
    finally:
        for s in socks:
            s.close()
    assert answered == UPLOADS
    assert _exit_code(server) == 0


def _burst(
    server: Server, model: str, n: int, params: Callable[[int], dict[str, Any]]
) -> list[cf.Future[tuple[int, bytes]]]:
    pool = cf.ThreadPoolExecutor(n)

    def one(i: int) -> tuple[int, bytes]:
        doc = json.loads(_py_body([float(i)] * 4))
        doc["parameters"] = params(i)
        with Http(server.http_url, timeout=60) as c:
            return c.request("POST", f"/v2/models/{model}/infer", json.dumps(doc).encode())

    futures = [pool.submit(one, i) for i in range(n)]
    pool.shutdown(wait=False)
    return futures


def _all_accepted(server: Server, model: str, n: int) -> None:
    """Wait until the first batch executes and the other ``n - size`` requests are pending."""
    first = _wait_log(server, r"gated: execute started (\d+)")[0]
    size = int(re.search(r"execute started (\d+)", first).group(1))  # type: ignore[union-attr]
    wait_until(lambda: _pending(server, model) == n - size, 30)


# queued batch requests, and sequences of one step each (each its own sequence slot)
QUEUED = {
    "batches": ("gated", 12, lambda i: {}),
    "sequences": (
        "gated_seq",
        6,
        lambda i: {"sequence_id": 100 + i, "sequence_start": True, "sequence_end": True},
    ),
}


@pytest.mark.parametrize("case", QUEUED)
@pytest.mark.parametrize("frontend", FRONTENDS)
def test_sigterm_answers_every_accepted_request(
    server_factory: Callable[..., Server], gated: tuple[Path, Path], frontend: str, case: str
) -> None:
    repo, gate = gated
    model, n, params = QUEUED[case]
    server = server_factory(repo, "--frontend", frontend, "--exit-timeout-secs", "60")
    futures = _burst(server, model, n, params)
    _all_accepted(server, model, n)
    _sigterm(server)
    gate.touch()
    for i, f in enumerate(futures):
        _check_py(*f.result(60), [float(i)] * 4)
    assert _exit_code(server) == 0


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_sigterm_during_a_grpc_stream_answers_every_sent_request(
    server_factory: Callable[..., Server], gated: tuple[Path, Path], frontend: str
) -> None:
    repo, gate = gated
    server = server_factory(repo, "--frontend", frontend, "--exit-timeout-secs", "60")
    n = 8
    sent = []
    for i in range(n):
        req = service_pb2.ModelInferRequest(model_name="gated", id=str(i))
        req.inputs.add(name="IN", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(np.full(4, float(i), np.float32).tobytes())
        sent.append(req.SerializeToString())
    release = cf.Future[None]()

    def requests() -> Iterator[bytes]:
        yield from sent
        release.result(60)  # half-close only after the signal

    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        replies = call(requests(), timeout=90)
        _all_accepted(server, "gated", n)
        _sigterm(server)
        gate.touch()
        got = {}
        for raw in replies:
            r = service_pb2.ModelStreamInferResponse.FromString(raw)
            assert not r.error_message, r.error_message
            out = r.infer_response
            got[out.id] = np.frombuffer(out.raw_output_contents[0], np.float32)
            if len(got) == n:
                release.set_result(None)
    assert sorted(got, key=int) == [str(i) for i in range(n)]
    for i in range(n):
        np.testing.assert_allclose(got[str(i)], np.full(4, 2.0 * i))
    assert _exit_code(server) == 0


# -- shared memory, backends, unload --------------------------------------------------------
@pytest.mark.parametrize("frontend", FRONTENDS)
def test_truncated_shm_file_fails_the_request_not_the_server(
    server_factory: Callable[..., Server], tmp_path: Path, frontend: str
) -> None:
    repo = write_repo(tmp_path / "repo", python=False)
    server = server_factory(repo, "--frontend", frontend)
    key = f"/tritonlite_fault_{os.getpid()}_{frontend}"
    path = Path("/dev/shm") / key.lstrip("/")
    data = np.asarray(A + B, np.float32).tobytes()
    path.write_bytes(data)
    try:
        with Http(server.http_url) as c:
            status, text = c.request(
                "POST",
                "/v2/systemsharedmemory/region/r/register",
                json.dumps({"key": key, "offset": 0, "byte_size": len(data)}).encode(),
            )
            assert status == 200, text
            doc = {
                "inputs": [
                    {
                        "name": f"INPUT{i}",
                        "datatype": "FP32",
                        "shape": [1, 4],
                        "parameters": {
                            "shared_memory_region": "r",
                            "shared_memory_byte_size": 16,
                            "shared_memory_offset": 16 * i,
                        },
                    }
                    for i in (0, 1)
                ]
            }
            status, text = c.request("POST", "/v2/models/add_sub/infer", json.dumps(doc).encode())
            check_add_sub(status, text, A, B)
            os.truncate(path, 0)
            status, text = c.request("POST", "/v2/models/add_sub/infer", json.dumps(doc).encode())
            assert 400 <= status < 500, (status, text)
            assert "error" in json.loads(text)
            check_add_sub(*c.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)
    finally:
        path.unlink(missing_ok=True)
    assert server.proc.poll() is None


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_raising_and_a_hanging_model_fail_alone(
    server_factory: Callable[..., Server], tmp_path: Path, frontend: str
) -> None:
    repo = write_repo(tmp_path / "repo")
    server = server_factory(repo, "--frontend", frontend, "--backend-execution-timeout", "2")
    with Http(server.http_url, timeout=60) as c:
        status, text = c.request("POST", "/v2/models/raising/infer", _py_body(A))
        assert status in (400, 500), (status, text)
        assert "model.py failed on purpose" in json.loads(text)["error"]
        with cf.ThreadPoolExecutor(1) as pool:

            def hang() -> tuple[int, bytes]:
                with Http(server.http_url, timeout=60) as h:
                    return h.request("POST", "/v2/models/hanging/infer", _py_body(A))

            hung = pool.submit(hang)
            t0 = time.monotonic()
            # meanwhile everything else serves
            check_add_sub(*c.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)
            _check_py(*c.request("POST", "/v2/models/slow/infer", _py_body(B)), B)
            assert c.request("GET", "/v2/health/live")[0] == 200
            status, text = hung.result(60)
            assert time.monotonic() - t0 < 30
            assert status >= 400 and "error" in json.loads(text), (status, text)
        status, text = c.request("POST", "/v2/models/raising/infer", _py_body(A))
        assert status in (400, 500)
        check_add_sub(*c.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)
    assert server.proc.poll() is None
    assert server.output().count("Traceback") <= 2 * 2, server.output()[-4000:]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_model_unloaded_mid_batch_answers_the_batch(
    server_factory: Callable[..., Server], gated: tuple[Path, Path], frontend: str
) -> None:
    repo, gate = gated
    server = server_factory(
        repo,
        "--frontend",
        frontend,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "gated",
        "--load-model",
        "add_sub",
    )
    n = 10
    futures = _burst(server, "gated", n, lambda i: {})
    _all_accepted(server, "gated", n)
    with cf.ThreadPoolExecutor(1) as pool:

        def unload() -> tuple[int, bytes]:
            with Http(server.http_url, timeout=60) as c:
                return c.request("POST", "/v2/repository/models/gated/unload", b"{}")

        unloading = pool.submit(unload)
        with Http(server.http_url) as c:

            def unloading_started() -> bool:
                index = json.loads(c.request("POST", "/v2/repository/index", b"{}")[1])
                return any(m["name"] == "gated" and m.get("state") != "READY" for m in index)

            wait_until(unloading_started, 30)
        gate.touch()
        for i, f in enumerate(futures):
            _check_py(*f.result(60), [float(i)] * 4)
        assert unloading.result(60)[0] == 200
    with Http(server.http_url) as c:
        status, text = c.request("POST", "/v2/models/gated/infer", _py_body(A))
        assert 400 <= status < 500, (status, text)
        check_add_sub(*c.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)


# -- file descriptors ---------------------------------------------------------------------------
NOFILE = 256


def _start_with_nofile(repo: Path, nofile: int, *args: str) -> Server:
    """A server whose RLIMIT_NOFILE (soft and hard) is ``nofile``."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return start_raw(repo, *args, preexec_fn=limit)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_health_answers_at_the_fd_limit(tmp_path: Path, frontend: str) -> None:
    repo = write_repo(tmp_path / "repo", python=False)
    server = _start_with_nofile(repo, NOFILE, "--frontend", frontend)
    held: list[socket.socket] = []
    try:
        host, port = server.http_url.rsplit(":", 1)
        for _ in range(NOFILE + 64):
            held.append(socket.create_connection((host, int(port)), timeout=5))
        ok = 0
        for _ in range(5):
            with Http(server.http_url, timeout=5) as c:
                try:
                    ok += c.request("GET", "/v2/health/live")[0] == 200
                except OSError:
                    pass
        assert ok == 5, server.output()[-2000:]
    finally:
        for s in held:
            s.close()
        server.stop()
    assert "Traceback" not in server.output()


def test_mmap_truncation_is_what_we_think_it_is(tmp_path: Path) -> None:
    # the premise of the shm test: reading a mapping past a truncated file's end is SIGBUS
    p = tmp_path / "f"
    p.write_bytes(b"x" * mmap.PAGESIZE * 2)
    code = (
        f"import mmap,os;f=open({str(p)!r},'r+b');m=mmap.mmap(f.fileno(),0);"
        f"os.truncate({str(p)!r},0);m[mmap.PAGESIZE]"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert r.returncode == -signal.SIGBUS

"""Graceful shutdown on SIGTERM: in-flight work drains, new work is refused, the wait is bounded.

A python model that sleeps in ``execute`` keeps requests running (one instance, no batching,
so a burst queues behind it). The server gets SIGTERM in the middle of a burst sent with
tritonclient.http.aio; every request accepted before the signal must still get its 200 and
its own data, requests after the signal get 503 (UNAVAILABLE) or a refused connection, and
``--exit-timeout-secs`` bounds how long a request that outlives it holds the exit. A drained
server exits 0; one that gives up on a request at the timeout exits 1 with Triton's "Exit timeout
expired. Exiting immediately." (tritonserver's main exits 1 when ``TRITONSERVER_ServerStop``
fails that way).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http.aio as aioclient
from conftest import Server, start_server
from decoupled_repo import is_final
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

SLOW_MODEL = """
import sys
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.delay = {delay}

    def execute(self, requests):
        print("slow model: execute started", file=sys.stderr, flush=True)
        time.sleep(self.delay)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return out
"""

SLOW_CONFIG = """
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

BURST = 6
DELAY_S = 0.3


def _write_slow(repo: Path, name: str, delay: float) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(SLOW_CONFIG)
    (repo / name / "1" / "model.py").write_text(SLOW_MODEL.format(delay=delay))


def _pending(server: Server, model: str) -> int:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    for fam in text_string_to_metric_families(text):
        if fam.name == "nv_inference_pending_request_count":
            for s in fam.samples:
                if s.labels.get("model") == model:
                    return int(s.value)
    return 0


def _wait(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def _infer(client: aioclient.InferenceServerClient, model: str, value: float) -> np.ndarray:
    inp = aioclient.InferInput("IN", [4], "FP32")
    inp.set_data_from_numpy(np.full(4, value, dtype=np.float32))
    result = await client.infer(model, [inp])
    return result.as_numpy("OUT")


async def _late_request(url: str, model: str) -> str:
    """What a request sent after SIGTERM gets: '503' or 'refused' (anything else is a failure)."""
    client = aioclient.InferenceServerClient(url)
    try:
        await _infer(client, model, 99.0)
    except InferenceServerException as exc:
        return str(exc.status())
    except OSError:  # aiohttp.ClientConnectorError is one: the port is already closed
        return "refused"
    finally:
        await client.close()
    return "200"


@pytest.fixture()
def slow_repo(tmp_path: Path) -> Path:
    _write_slow(tmp_path, "slow", DELAY_S)
    _write_slow(tmp_path, "stuck", 10.0)
    return tmp_path


def test_sigterm_drains_accepted_requests_and_refuses_new_ones(slow_repo: Path) -> None:
    server = start_server(slow_repo, "--allow-grpc=false", "--exit-timeout-secs=30")
    try:

        async def scenario() -> tuple[list[np.ndarray | BaseException], list[str], float]:
            client = aioclient.InferenceServerClient(server.http_url)
            try:
                burst = [
                    asyncio.create_task(_infer(client, "slow", float(i))) for i in range(BURST)
                ]
                # All accepted: one executing, the rest queued behind it.
                await asyncio.to_thread(
                    _wait, lambda: _pending(server, "slow") == BURST - 1, 30, "the burst to queue"
                )
                server.proc.send_signal(signal.SIGTERM)
                t_signal = time.monotonic()
                # Signals arrive asynchronously: wait until the server has acted on it (it logs
                # this line in the same loop step that starts refusing new work).
                await asyncio.to_thread(
                    _wait,
                    lambda: "signal received" in server.output(),
                    30,
                    "the server to take the signal",
                )
                late = []
                for _ in range(3):
                    late.append(await _late_request(server.http_url, "slow"))
                results = await asyncio.gather(*burst, return_exceptions=True)
                return results, late, t_signal
            finally:
                await client.close()

        results, late, t_signal = asyncio.run(scenario())
        rc = server.proc.wait(30)
        drained_in = time.monotonic() - t_signal
    finally:
        server.stop()
    for i, r in enumerate(results):
        assert not isinstance(r, BaseException), f"request {i} failed: {r!r}\n{server.output()}"
        np.testing.assert_array_equal(r, np.full(4, 2.0 * i, dtype=np.float32))
    assert all(v in ("503", "refused") for v in late), late
    assert rc == 0, server.output()
    # The queue behind the signal needed (BURST - 1) * DELAY_S to drain; nothing waited longer.
    assert drained_in < (BURST - 1) * DELAY_S + 10, drained_in


def test_exit_timeout_bounds_the_wait_for_a_stuck_request(slow_repo: Path) -> None:
    timeout_s = 1.0
    server = start_server(slow_repo, "--allow-grpc=false", f"--exit-timeout-secs={timeout_s}")
    try:

        async def scenario() -> tuple[BaseException | np.ndarray, float]:
            client = aioclient.InferenceServerClient(server.http_url)
            try:
                task = asyncio.create_task(_infer(client, "stuck", 1.0))
                await asyncio.to_thread(
                    _wait,
                    lambda: "slow model: execute started" in server.output(),
                    30,
                    "the stuck request to start executing",
                )
                server.proc.send_signal(signal.SIGTERM)
                t_signal = time.monotonic()
                result = (await asyncio.gather(task, return_exceptions=True))[0]
                return result, t_signal
            finally:
                await client.close()

        result, t_signal = asyncio.run(scenario())
        try:
            rc = server.proc.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
        exited_in = time.monotonic() - t_signal
    finally:
        server.stop()
    assert rc == 1, server.output()
    assert "Exit timeout expired. Exiting immediately." in server.output()
    assert "1 request(s) and call(s) cut off" in server.output()  # the count is logged
    # Cut off: the server exits within the timeout plus a margin, well before the 10 s execute.
    assert exited_in < timeout_s + 4.0, f"exited {exited_in:.1f} s after SIGTERM\n{server.output()}"
    assert isinstance(result, BaseException), result  # no response: the request was cut off


STREAM_MODEL = """
import sys
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self._stream, args=(sender, n), daemon=True).start()
        return None

    @staticmethod
    def _stream(sender, n):
        print("stream model: streaming", file=sys.stderr, flush=True)
        for i in range(n):
            time.sleep({delay})
            out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

STREAM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input { name: "N" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
"""


def _stream_until_signal(
    tmp_path: Path, n: int, delay_s: float, exit_timeout_s: float
) -> tuple[int | None, float, list[object], Server]:
    """Open a gRPC stream of ``n`` responses ``delay_s`` apart, SIGTERM the server once it
    streams; returns (exit code, seconds from the signal to the exit, what the stream got)."""
    import queue

    import tritonclient.grpc as grpcclient

    (tmp_path / "streamer" / "1").mkdir(parents=True)
    (tmp_path / "streamer" / "config.pbtxt").write_text(STREAM_CONFIG)
    (tmp_path / "streamer" / "1" / "model.py").write_text(STREAM_MODEL.format(delay=delay_s))
    server = start_server(tmp_path, f"--exit-timeout-secs={exit_timeout_s}")
    got: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        inp = grpcclient.InferInput("N", [1], "INT32")
        inp.set_data_from_numpy(np.array([n], dtype=np.int32))
        client.async_stream_infer("streamer", [inp], enable_empty_final_response=True)
        _wait(lambda: "stream model: streaming" in server.output(), 30, "the stream to start")
        server.proc.send_signal(signal.SIGTERM)
        t_signal = time.monotonic()
        try:
            rc: int | None = server.proc.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
        exited_in = time.monotonic() - t_signal
        # The stream's end reaches the client after the exit: its final response, or the
        # error of a stream the server closed (both, in that order, when it finished).
        items: list[object] = []
        deadline = time.monotonic() + 30
        while not items or not (
            isinstance(items[-1], InferenceServerException) or is_final(items[-1])
        ):
            try:
                items.append(got.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"the stream did not end: {items}") from None
        while not got.empty():
            items.append(got.get())
        return rc, exited_in, items, server
    finally:
        client.close()
        server.stop()


def test_sigterm_waits_for_an_open_stream_to_finish(tmp_path: Path) -> None:
    rc, exited_in, items, server = _stream_until_signal(tmp_path, 4, 0.25, 10.0)
    assert rc == 0, server.output()
    # Every response, then the empty final one; the server closing the stream as it exits
    # may reach the client after that as an error.
    responses = [it for it in items if not isinstance(it, InferenceServerException)]
    outs = [it.as_numpy("OUT")[0] for it in responses[:-1]]  # type: ignore[attr-defined]
    assert outs == [0, 1, 2, 3], items
    assert is_final(responses[-1]), items
    assert exited_in < 10.0


def test_exit_timeout_bounds_the_wait_for_an_open_stream(tmp_path: Path) -> None:
    timeout_s = 1.0
    rc, exited_in, items, server = _stream_until_signal(tmp_path, 40, 0.25, timeout_s)
    assert rc == 1, server.output()
    assert "Exit timeout expired. Exiting immediately." in server.output()
    assert exited_in < timeout_s + 4.0, f"exited {exited_in:.1f} s after SIGTERM\n{server.output()}"
    responses = [it for it in items if not isinstance(it, InferenceServerException)]
    assert not any(is_final(it) for it in responses)  # cut off before its end


# -- what begins after the signal, on connections and channels that were already open ---------
def _http_response(sock: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (Content-Length framed) from ``sock``; ``buf`` keeps the rest."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {bytes(buf[:200])!r}")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    del buf[:]
    buf += rest[length:]
    return status, headers, rest[:length]


def _slow_body(value: float) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [4], "data": [value] * 4}]}
    ).encode()


def test_a_request_after_the_signal_on_a_kept_alive_connection_gets_503_and_close(
    slow_repo: Path,
) -> None:
    """The connection's first request began before SIGTERM and is answered with its data; the
    one it sends after the signal gets 503 with ``Connection: close``, then the connection
    closes and the server exits 0."""
    server = start_server(slow_repo, "--allow-grpc=false", "--exit-timeout-secs=30")
    host, port = server.http_url.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            body = _slow_body(3.0)
            sock.sendall(
                b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: t\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            _wait(
                lambda: "slow model: execute started" in server.output(),
                30,
                "the first request to execute",
            )
            server.proc.send_signal(signal.SIGTERM)
            _wait(lambda: "signal received" in server.output(), 30, "the signal")
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
            buf = bytearray()
            status, _, first = _http_response(sock, buf)
            assert status == 200, first
            assert json.loads(first)["outputs"][0]["data"] == [6.0] * 4
            status, headers, late = _http_response(sock, buf)
            assert status == 503, late
            assert headers.get("connection", "").lower() == "close", headers
            assert "exiting" in json.loads(late)["error"]
            assert sock.recv(1) == b""  # closed after it
        rc = server.proc.wait(30)
    finally:
        server.stop()
    assert rc == 0, server.output()


def test_grpc_calls_begun_before_the_signal_are_answered_later_ones_unavailable(
    slow_repo: Path,
) -> None:
    """A unary gRPC call executing at SIGTERM gets its response; a call started after the
    signal, on the same channel, gets UNAVAILABLE; the server exits 0."""
    import tritonclient.grpc as grpcclient

    server = start_server(slow_repo, "--allow-http=false", "--exit-timeout-secs=30")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        done: list[object] = []
        inp = grpcclient.InferInput("IN", [4], "FP32")
        inp.set_data_from_numpy(np.full(4, 5.0, dtype=np.float32))
        client.async_infer(
            "slow",
            [inp],
            callback=lambda result, error: done.append(error if error is not None else result),
        )
        _wait(lambda: "slow model: execute started" in server.output(), 30, "the call to run")
        server.proc.send_signal(signal.SIGTERM)
        _wait(lambda: "signal received" in server.output(), 30, "the signal")
        with pytest.raises(InferenceServerException) as late:
            client.infer("slow", [inp], client_timeout=20)
        assert late.value.status() == "StatusCode.UNAVAILABLE", late.value
        _wait(lambda: bool(done), 30, "the first call's answer")
        first = done[0]
        assert not isinstance(first, BaseException), first
        np.testing.assert_array_equal(
            first.as_numpy("OUT"),  # type: ignore[attr-defined]
            np.full(4, 10.0, dtype=np.float32),
        )
        rc = server.proc.wait(30)
    finally:
        client.close()
        server.stop()
    assert rc == 0, server.output()


def test_unload_fails_what_is_still_queued_after_the_timeout_and_serves_on(
    tmp_path: Path,
) -> None:
    """An unload drains for ``--exit-timeout-secs``; what is still queued then is failed (on
    the event loop) with UNAVAILABLE, and the server serves the next load and requests."""
    _write_slow(tmp_path, "slow", 1.5)
    server = start_server(
        tmp_path,
        "--allow-grpc=false",
        "--exit-timeout-secs=0.3",
        "--model-control-mode=explicit",
        "--load-model=slow",
    )
    try:

        async def scenario() -> list[str]:
            client = aioclient.InferenceServerClient(server.http_url)
            try:
                tasks = [asyncio.create_task(_infer(client, "slow", float(i))) for i in range(3)]
                await asyncio.to_thread(
                    _wait,
                    lambda: "slow model: execute started" in server.output(),
                    30,
                    "the first request to start executing",
                )
                await asyncio.to_thread(
                    _wait, lambda: _pending(server, "slow") == 2, 30, "two requests to queue"
                )
                await client.unload_model("slow")
                out = []
                for r in await asyncio.gather(*tasks, return_exceptions=True):
                    if isinstance(r, InferenceServerException):
                        out.append(f"{r.status()} {r.message()}")
                    else:
                        out.append("ok" if isinstance(r, np.ndarray) else repr(r))
                await client.load_model("slow")
                again = await _infer(client, "slow", 2.0)
                out.append("again " + str(again.tolist()))
                return out
            finally:
                await client.close()

        results = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        server.stop()
    assert results[-1] == "again [4.0, 4.0, 4.0, 4.0]"
    # the executing one finishes (whichever arrived first); the two that waited are failed
    expected = sorted(["ok"] + ["503 model 'slow' is unloading"] * 2)
    assert sorted(results[:-1]) == expected, (results, server.output())

"""Failover with real python models behind a real server: fatal errors, execution timeouts,
client disconnects, and what readiness and metrics say meanwhile.

The models decide from their input what to do, so one server covers every case:
``-1`` in INPUT0 ends the instance's "interpreter" (``SystemExit``, a fatal error in the python
backend), a positive value sleeps that many seconds, anything else echoes INPUT0.
"""

from __future__ import annotations

import re
import socket
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server, wait_until
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

MODEL = """
import os
import sys
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        if os.path.exists(os.path.join(args["model_repository"], "broken")):
            raise RuntimeError("cannot initialize: the 'broken' marker is present")

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0] == -1:
                sys.exit("instance state destroyed")
            if x[0] > 0:
                time.sleep(float(x[0]))
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x),
                pb_utils.Tensor("WHO", np.array([self.name.encode()], dtype=object))]))
        return out
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "WHO" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
"""

# Instance 0 of this one fails fatally on every request it gets.
FLAKY = """
import sys
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        if self.name.endswith("_0"):
            raise SystemExit("instance 0 always dies")
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()),
            pb_utils.Tensor("WHO", np.array([self.name.encode()], dtype=object))])
            for r in requests]
"""


def _write(repo: Path, name: str, model: str, count: int) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(model))
    (repo / name / "config.pbtxt").write_text(CONFIG.format(count=count))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("failover")
    _write(repo, "flaky", FLAKY, 2)
    _write(repo, "solo", MODEL, 1)
    _write(repo, "pair", MODEL, 2)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--backend-execution-timeout=1.5")
    yield s
    s.stop()


@pytest.fixture()
def client(server: Server) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    yield c
    c.close()


def _inputs(value: float) -> list[httpclient.InferInput]:
    i = httpclient.InferInput("INPUT0", [1], "FP32")
    i.set_data_from_numpy(np.array([value], dtype=np.float32))
    return [i]


def _infer(c: httpclient.InferenceServerClient, model: str, value: float) -> Any:
    return c.infer(model, _inputs(value))


def _metrics(server: Server) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as r:
        return str(r.read().decode())


def _metric(text: str, family: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(family + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {family} {labels} in metrics")


def _wait(pred: Callable[[], object], timeout: float = 20.0) -> None:
    wait_until(pred, timeout)


def test_instance_0_always_fails_instance_1_keeps_serving(
    server: Server, client: httpclient.InferenceServerClient
) -> None:
    failures, served = [], []
    for _ in range(12):
        try:
            served.append(_infer(client, "flaky", 3.0).as_numpy("WHO")[0])
        except InferenceServerException as exc:
            failures.append(exc)
        assert client.is_model_ready("flaky")  # instance 1 is healthy throughout
    assert served and set(served) == {b"flaky_0_1"}
    assert failures, "instance 0 was never given a request"
    exc = failures[0]
    assert exc.status() == "500"
    assert "model instance 'flaky_0_0' failed and was taken out of rotation" in exc.message()
    assert "instance 0 always dies" in exc.message()
    assert client.is_server_ready()
    # The failed instance is rebuilt in the background (and fails again when next used).
    _wait(
        lambda: _metric(_metrics(server), "tritonlite_instance_rebuilds", instance="flaky_0_0") >= 1
    )
    text = _metrics(server)
    assert _metric(text, "tritonlite_instance_failovers", instance="flaky_0_0") >= len(failures)
    assert _metric(text, "tritonlite_instance_failovers", instance="flaky_0_1") == 0
    assert _metric(text, "tritonlite_instance_healthy", instance="flaky_0_1") == 1
    assert _metric(text, "nv_inference_request_failure", model="flaky", reason="BACKEND") == len(
        failures
    )
    assert _metric(text, "nv_inference_request_success", model="flaky") == len(served)
    # The counter goes up just before the line is logged, and the line reaches the drain thread
    # after that: wait for it rather than read the output once.
    line = "instance flaky_0_0 rebuilt and back in rotation"
    assert line in server.wait_for_lines(lambda lines: any(line in x for x in lines))


def test_single_instance_fatal_error_makes_model_unready_until_rebuilt(
    server: Server, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    marker = repo / "solo" / "broken"
    marker.write_text("")  # rebuild attempts fail while it exists
    try:
        with pytest.raises(
            InferenceServerException,
            match="model instance 'solo_0_0' failed and was taken out of rotation",
        ):
            _infer(client, "solo", -1.0)
        assert not client.is_model_ready("solo")
        assert not client.is_server_ready()  # strict readiness follows
        assert client.is_server_live()
        text = _metrics(server)
        assert _metric(text, "tritonlite_instance_healthy", instance="solo_0_0") == 0
        with pytest.raises(InferenceServerException) as err:
            _infer(client, "solo", 0.0)
        assert "'solo' has no available versions" in err.value.message()  # none is ready
        assert _infer(client, "pair", 0.0).as_numpy("OUTPUT0")[0] == 0.0  # others serve
        _wait(lambda: "rebuilding instance solo_0_0 failed" in server.output())
    finally:
        marker.unlink()
    _wait(lambda: client.is_model_ready("solo"))
    assert _infer(client, "solo", 0.0).as_numpy("OUTPUT0")[0] == 0.0
    assert client.is_server_ready()
    text = _metrics(server)
    assert _metric(text, "tritonlite_instance_healthy", instance="solo_0_0") == 1
    assert _metric(text, "tritonlite_instance_rebuilds", instance="solo_0_0") == 1


def test_hung_instance_is_cut_off_by_the_execution_timeout(
    server: Server, client: httpclient.InferenceServerClient
) -> None:
    start = time.monotonic()
    with pytest.raises(InferenceServerException) as err:
        _infer(client, "pair", 60.0)  # hangs far past --backend-execution-timeout=1.5
    took = time.monotonic() - start
    assert err.value.status() == "503"
    assert "execution timed out after 1.5 s on model instance 'pair_0_" in err.value.message()
    assert 1.4 < took < 10
    assert client.is_model_ready("pair")
    # The other instance (and soon the rebuilt one) keeps serving.
    for _ in range(4):
        assert _infer(client, "pair", 0.0).as_numpy("OUTPUT0")[0] == 0.0
    text = _metrics(server)
    assert (
        sum(_metric(text, "tritonlite_instance_failovers", instance=f"pair_0_{k}") for k in (0, 1))
        == 1
    )
    _wait(
        lambda: (
            sum(
                _metric(_metrics(server), "tritonlite_instance_healthy", instance=f"pair_0_{k}")
                for k in (0, 1)
            )
            == 2
        )
    )
    assert _metric(_metrics(server), "nv_inference_pending_request_count", model="pair") == 0


def _raw_http_request(server: Server, model: str, body: bytes) -> socket.socket:
    host, port = server.http_url.split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def test_client_disconnect_mid_request_leaks_nothing(
    server: Server, client: httpclient.InferenceServerClient
) -> None:
    body = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[0.5]}]}'
    socks = [_raw_http_request(server, "pair", body) for _ in range(3)]  # one waits in queue
    _wait(
        lambda: _metric(_metrics(server), "nv_inference_pending_request_count", model="pair") >= 1
    )
    for s in socks:
        s.close()  # gone while the model sleeps / the request is queued
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        i = grpcclient.InferInput("INPUT0", [1], "FP32")
        i.set_data_from_numpy(np.array([0.5], dtype=np.float32))
        with pytest.raises(InferenceServerException) as err:
            g.infer("pair", [i], client_timeout=0.1)  # the client gives up and cancels
        assert "Deadline" in err.value.message() or err.value.status() == str(
            grpc.StatusCode.DEADLINE_EXCEEDED
        )
        # Everything it was doing finishes or is dropped; nothing stays pending.
        _wait(
            lambda: (
                _metric(_metrics(server), "nv_inference_pending_request_count", model="pair") == 0
            )
        )
        _wait(lambda: _infer(client, "pair", 0.0).as_numpy("OUTPUT0")[0] == 0.0)
        i.set_data_from_numpy(np.array([0.0], dtype=np.float32))
        assert g.infer("pair", [i]).as_numpy("OUTPUT0")[0] == 0.0
    finally:
        g.close()
    text = _metrics(server)
    assert (
        sum(_metric(text, "tritonlite_instance_healthy", instance=f"pair_0_{k}") for k in (0, 1))
        == 2
    )
    assert server.proc.poll() is None
    assert "Traceback" not in server.output()

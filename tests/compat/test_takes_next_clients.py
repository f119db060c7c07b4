"""An unbatched ONNX MLP whose runs leave the loop, under concurrent real clients.

Its instance thread runs each request with ONNX Runtime's ``run`` and holds the next one while
a run goes (``thread+next``): the real tritonclient over HTTP (``concurrency=16``) and over
gRPC (``async_infer``) send many requests at once, each with its own input, and each answer is
checked against ONNX Runtime run on the same file in this process; the server's statistics
count one execution per request. Rounds repeat on one server; both front ends run this through
``TRITONLITE_TEST_FRONTEND``.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server
from repos import write_mlp

pytestmark = pytest.mark.timeout(180)

WIDTH = 1024  # 4 x 1024^2 weights: a run of several hundred µs, never on the loop
COUNT = 48
ROUNDS = 3


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("next") / "repo"
    write_mlp(repo, "mlp_nb", 8, layers=4, width=WIDTH, seed=7)
    return repo


def _inputs(count: int, seed: int) -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, WIDTH)).astype(np.float32) for _ in range(count)]


def _expected(repo: Path, xs: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
    sess = ort.InferenceSession(
        str(repo / "mlp_nb" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    name = sess.get_inputs()[0].name
    return [sess.run(None, {name: x})[0] for x in xs]


def _stats(server: Server) -> tuple[int, int]:
    url = f"http://{server.http_url}/v2/models/mlp_nb/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        m = json.load(r)["model_stats"][0]
    return int(m["inference_stats"]["success"]["count"]), int(m["execution_count"])


def _http_round(server: Server, xs: list[np.ndarray[Any, Any]]) -> list[Any]:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    try:
        pending = []
        for x in xs:
            inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            pending.append(client.async_infer("mlp_nb", [inp]))
        return [p.get_result(timeout=60).as_numpy("OUTPUT0") for p in pending]
    finally:
        client.close()


def _grpc_round(server: Server, xs: list[np.ndarray[Any, Any]]) -> list[Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    done = threading.Condition()
    results: dict[int, Any] = {}

    def callback(i: int) -> Callable[[Any, Any], None]:
        def on_done(result: Any, error: Any) -> None:
            with done:
                results[i] = error if error is not None else result.as_numpy("OUTPUT0")
                done.notify_all()

        return on_done

    try:
        for i, x in enumerate(xs):
            inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            client.async_infer("mlp_nb", [inp], callback(i))
        with done:
            assert done.wait_for(lambda: len(results) == len(xs), timeout=60)
        return [results[i] for i in range(len(xs))]
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_each_get_their_own_answer(
    repo: Path, server_factory: Callable[..., Server], protocol: str
) -> None:
    server = server_factory(repo)
    send = _http_round if protocol == "http" else _grpc_round
    for rnd in range(ROUNDS):
        xs = _inputs(COUNT, seed=rnd)
        want = _expected(repo, xs)
        before = _stats(server)
        got = send(server, xs)
        for i, (g, w) in enumerate(zip(got, want)):
            assert isinstance(g, np.ndarray), f"request {i}: {g}"
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        success, executions = _stats(server)
        assert (success - before[0], executions - before[1]) == (COUNT, COUNT)

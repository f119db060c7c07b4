"""The single-request lane through a real server: HTTP requests to a model without batching
(the lane's, once the instances keep their runs on the loop) answer, count and fail exactly as
gRPC requests, which always take the general path, and as HTTP requests the lane leaves to it
(classification, a JSON body's outputs, a failed run). In-process checks of each fallback
condition: tests/core/test_direct_lane.py.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from onnx_models import add_sub, config_for, failing, write_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)
_WARM = 200  # requests: each instance's first runs are measured off the loop


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("lane_repo")
    write_model(repo, "direct", add_sub(), config_for(add_sub(), max_batch_size=8, name="direct"))
    write_model(repo, "fails", failing(), config_for(failing(), max_batch_size=8, name="fails"))
    srv = start_server(repo)
    try:
        yield srv
    finally:
        srv.stop()


def _stats(server: Server, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as r:
        doc = json.loads(r.read())
    return doc["model_stats"][0]  # type: ignore[no-any-return]


def _add_sub(mod: Any, client: Any, binary: bool, **kw: Any) -> Any:
    ins = []
    for name, arr in (("INPUT0", A), ("INPUT1", B)):
        i = mod.InferInput(name, [1, 16], "FP32")
        if mod is httpclient:
            i.set_data_from_numpy(arr, binary_data=binary)
        else:
            i.set_data_from_numpy(arr)
        ins.append(i)
    outs = kw.pop("outputs", None)
    return client.infer("direct", ins, outputs=outs, **kw)


@pytest.fixture(scope="module")
def clients(server: Server) -> Iterator[tuple[Any, Any]]:
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield h, g
    finally:
        h.close()
        g.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_answers_and_statistics_match_the_general_path(
    server: Server, clients: tuple[Any, Any], binary: bool
) -> None:
    h, g = clients
    before = _stats(server, "direct")["inference_stats"]["success"]["count"]
    for _ in range(_WARM):
        r = _add_sub(httpclient, h, binary)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    via_grpc = _add_sub(grpcclient, g, binary)
    for name in ("OUTPUT0", "OUTPUT1"):
        assert r.as_numpy(name).dtype == via_grpc.as_numpy(name).dtype
        np.testing.assert_array_equal(r.as_numpy(name), via_grpc.as_numpy(name))
    picked = _add_sub(
        httpclient,
        h,
        binary,
        outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)],
        request_id="req-7",
    )
    assert picked.get_response()["id"] == "req-7"
    assert [o["name"] for o in picked.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(picked.as_numpy("OUTPUT1"), A - B)
    st = _stats(server, "direct")
    inf = st["inference_stats"]
    assert inf["success"]["count"] == before + _WARM + 2
    assert inf["fail"]["count"] == 0
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[key]["count"] == inf["success"]["count"], key
        assert inf[key]["ns"] > 0, key
    assert st["execution_count"] == inf["success"]["count"]
    assert st["inference_count"] == inf["success"]["count"]
    (one,) = st["batch_stats"]
    assert one["batch_size"] == 1
    assert one["compute_infer"]["count"] == inf["success"]["count"]
    assert st["last_inference"] > 0


def test_classification_takes_the_general_path(server: Server, clients: tuple[Any, Any]) -> None:
    h, g = clients
    for _ in range(_WARM // 4):
        _add_sub(httpclient, h, True)
    via_http = _add_sub(
        httpclient, h, True, outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    )
    via_grpc = _add_sub(
        grpcclient, g, True, outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    )
    assert list(via_http.as_numpy("OUTPUT0").ravel()) == list(via_grpc.as_numpy("OUTPUT0").ravel())


def _error(call: Callable[[], Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.message())


def test_errors_match_the_general_path(server: Server, clients: tuple[Any, Any]) -> None:
    h, g = clients
    for _ in range(_WARM // 4):
        _add_sub(httpclient, h, True)

    def wrong_shape(mod: Any, client: Any) -> Callable[[], Any]:
        def call() -> Any:
            ins = []
            for name in ("INPUT0", "INPUT1"):
                i = mod.InferInput(name, [1, 8], "FP32")
                i.set_data_from_numpy(np.zeros((1, 8), np.float32))
                ins.append(i)
            return client.infer("direct", ins)

        return call

    assert _error(wrong_shape(httpclient, h)) == _error(wrong_shape(grpcclient, g))

    def run_fails(mod: Any, client: Any, value: int) -> Any:
        i = mod.InferInput("INPUT0", [1, 1], "INT64")
        i.set_data_from_numpy(np.array([[value]], np.int64))
        return client.infer("fails", [i])

    for _ in range(_WARM // 4):
        run_fails(httpclient, h, 1)
    before = _stats(server, "fails")["inference_stats"]
    http_msg = _error(lambda: run_fails(httpclient, h, 99))
    grpc_msg = _error(lambda: run_fails(grpcclient, g, 99))
    assert http_msg == grpc_msg and "out of" in http_msg
    after = _stats(server, "fails")["inference_stats"]
    assert after["fail"]["count"] == before["fail"]["count"] + 2
    assert after["success"]["count"] == before["success"]["count"]
    np.testing.assert_array_equal(run_fails(httpclient, h, 1).as_numpy("OUTPUT0"), [[10.0]])

"""The single-request lane through real servers and real clients: a model without batching
answers, counts and fails the same on a server where the lane serves it (HTTP and gRPC ask
``InferenceCore.infer_now`` first; a JSON body of inputs alone, ``InferenceCore.infer_plain``) as on one where every request takes the general path
(tracing on turns the lane off). In-process checks of each fallback condition:
tests/core/test_direct_lane.py.
"""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, counts_only, start_server
from onnx_models import add_sub, config_for, failing, write_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)
_WARM = 200  # requests: each instance's first runs are measured off the loop
_MODS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """(the lane's server, the general path's server: tracing on, nothing sampled)."""
    repo = tmp_path_factory.mktemp("lane_repo")
    write_model(repo, "direct", add_sub(), config_for(add_sub(), max_batch_size=8, name="direct"))
    write_model(repo, "fails", failing(), config_for(failing(), max_batch_size=8, name="fails"))
    trace = tmp_path_factory.mktemp("trace") / "trace.json"
    lane = start_server(repo)
    try:
        general = start_server(
            repo,
            f"--trace-config=triton,file={trace}",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=2000000000",
        )
        try:
            yield lane, general
        finally:
            general.stop()
    finally:
        lane.stop()


def _stats(server: Server, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as r:
        doc = json.loads(r.read())
    return doc["model_stats"][0]  # type: ignore[no-any-return]


def _counts(server: Server, model: str) -> Any:
    """The model's statistics without durations and times."""
    return counts_only(_stats(server, model))


class _Clients:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.by = {
            "http": httpclient.InferenceServerClient(server.http_url),
            "grpc": grpcclient.InferenceServerClient(server.grpc_url),
        }

    def add_sub(self, proto: str, binary: bool = True, **kw: Any) -> Any:
        mod = _MODS[proto]
        ins = []
        for name, arr in (("INPUT0", A), ("INPUT1", B)):
            i = mod.InferInput(name, [1, 16], "FP32")
            if mod is httpclient:
                i.set_data_from_numpy(arr, binary_data=binary)
            else:
                i.set_data_from_numpy(arr)
            ins.append(i)
        return self.by[proto].infer("direct", ins, **kw)

    def fails(self, proto: str, value: int) -> Any:
        i = _MODS[proto].InferInput("INPUT0", [1, 1], "INT64")
        i.set_data_from_numpy(np.array([[value]], np.int64))
        return self.by[proto].infer("fails", [i])

    def close(self) -> None:
        for c in self.by.values():
            c.close()


@pytest.fixture(scope="module")
def clients(servers: tuple[Server, Server]) -> Iterator[tuple[_Clients, _Clients]]:
    lane, general = _Clients(servers[0]), _Clients(servers[1])
    try:
        yield lane, general
    finally:
        lane.close()
        general.close()


def _doc(proto: str, result: Any) -> dict[str, Any]:
    return result.get_response(as_json=True) if proto == "grpc" else result.get_response()  # type: ignore[no-any-return]


def _outputs(result: Any, names: tuple[str, ...]) -> list[np.ndarray]:
    return [result.as_numpy(n) for n in names]


def test_answers_and_statistics_match_the_general_path(
    clients: tuple[_Clients, _Clients],
) -> None:
    before = _stats(clients[0].server, "direct")["inference_stats"]["success"]["count"]
    for side in clients:
        for _ in range(_WARM):
            side.add_sub("http")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("http", {}),
        ("http", {"binary": False}),
        ("grpc", {}),
        (
            "http",
            {
                "outputs": [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)],
                "request_id": "req-7",
            },
        ),
        ("grpc", {"outputs": [grpcclient.InferRequestedOutput("OUTPUT1")], "request_id": "g-7"}),
        ("http", {"outputs": [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]}),
        ("grpc", {"outputs": [grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]}),
    ]
    for proto, kw in cases:
        a, b = (side.add_sub(proto, **dict(kw)) for side in clients)
        assert _doc(proto, a) == _doc(proto, b)
        names = tuple(o["name"] for o in _doc(proto, a)["outputs"])
        for x, y in zip(_outputs(a, names), _outputs(b, names)):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
        if "outputs" not in kw:
            np.testing.assert_array_equal(a.as_numpy("OUTPUT0"), A + B)
            np.testing.assert_array_equal(a.as_numpy("OUTPUT1"), A - B)
    lane, general = (_counts(side.server, "direct") for side in clients)
    assert lane == general
    inf = _stats(clients[0].server, "direct")["inference_stats"]
    assert inf["success"]["count"] == before + _WARM + len(cases)
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[key]["count"] == inf["success"]["count"], key
        assert inf[key]["ns"] > 0, key
    assert _stats(clients[0].server, "direct")["last_inference"] > 0


def _error(call: Callable[[], Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    return f"{info.value.status()}: {info.value.message()}"


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_errors_match_the_general_path(clients: tuple[_Clients, _Clients], proto: str) -> None:
    mod = _MODS[proto]

    def wrong_shape(side: _Clients) -> Callable[[], Any]:
        def call() -> Any:
            ins = []
            for name in ("INPUT0", "INPUT1"):
                i = mod.InferInput(name, [1, 8], "FP32")
                i.set_data_from_numpy(np.zeros((1, 8), np.float32))
                ins.append(i)
            return side.by[proto].infer("direct", ins)

        return call

    for side in clients:
        for _ in range(_WARM // 4):
            side.add_sub(proto)
            side.fails(proto, 1)
    shape_errors = {_error(wrong_shape(side)) for side in clients}
    assert len(shape_errors) == 1
    run_errors = {_error(lambda side=side: side.fails(proto, 99)) for side in clients}
    assert len(run_errors) == 1 and "out of" in run_errors.pop()
    for side in clients:  # the instance is back and serves the next request
        np.testing.assert_array_equal(side.fails(proto, 1).as_numpy("OUTPUT0"), [[10.0]])
    for model in ("direct", "fails"):
        lane, general = (_counts(side.server, model) for side in clients)
        assert lane == general, model
    assert _stats(clients[0].server, "fails")["inference_stats"]["fail"]["count"] >= 1


def _raw_json(server: Server, path: str, body: bytes, **headers: str) -> tuple[int, Any, bytes]:
    """POST ``body`` as JSON: (status, the response's headers that say what it is, body)."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **headers}
        )
        resp = conn.getresponse()
        data = resp.read()
        kept = {
            k: resp.getheader(k) for k in ("Content-Type", "Content-Length", "Content-Encoding")
        }
        return resp.status, kept, data
    finally:
        conn.close()


def _json_input(name: str, datatype: str, shape: list[int], data: Any) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def test_plain_json_bodies_match_the_general_path(clients: tuple[_Clients, _Clients]) -> None:
    """A JSON body of inputs alone (wrk's, curl's): the JSON lane's answer is the general
    path's, byte for byte, and so are the errors and the statistics."""
    a, b = A.ravel().tolist(), B.ravel().tolist()
    plain = {
        "inputs": [
            _json_input("INPUT0", "FP32", [1, 16], a),
            _json_input("INPUT1", "FP32", [1, 16], b),
        ]
    }
    nested = {
        "inputs": [_json_input(n, "FP32", [1, 16], [d]) for n, d in (("INPUT0", a), ("INPUT1", b))]
    }
    ints = [_json_input("INPUT0", "FP32", [1, 16], list(range(16))), plain["inputs"][1]]
    short = [_json_input("INPUT0", "FP32", [1, 16], a[:15]), plain["inputs"][1]]
    narrow = [_json_input(n, "FP32", [1, 8], a[:8]) for n in ("INPUT0", "INPUT1")]
    direct = "/v2/models/direct/infer"
    cases: list[tuple[str, bytes]] = [
        (direct, json.dumps(plain).encode()),
        (direct, json.dumps(plain).encode()),
        (direct, json.dumps(nested).encode()),
        (direct, json.dumps({"inputs": ints}).encode()),
        (direct, json.dumps({"inputs": plain["inputs"][::-1]}).encode()),
        (direct, json.dumps({"inputs": short}).encode()),
        (direct, json.dumps({"inputs": narrow}).encode()),
        (direct, json.dumps({"inputs": plain["inputs"][:1]}).encode()),
        (direct, json.dumps({"inputs": [plain["inputs"][0]] * 2}).encode()),
        (direct, json.dumps({"inputs": []}).encode()),
        (direct, json.dumps({**plain, "id": "j-1"}).encode()),
        (direct, b'{"inputs": [}'),
        ("/v2/models/nope/infer", json.dumps(plain).encode()),
        ("/v2/models/direct/versions/7/infer", json.dumps(plain).encode()),
        (
            "/v2/models/fails/infer",
            json.dumps({"inputs": [_json_input("INPUT0", "INT64", [1, 1], [[99]])]}).encode(),
        ),
        (
            "/v2/models/fails/infer",
            json.dumps({"inputs": [_json_input("INPUT0", "INT64", [1, 1], [[1]])]}).encode(),
        ),
    ]
    for side in clients:
        for _ in range(_WARM):
            side.add_sub("http")
            side.fails("http", 1)
    for path, body in cases:
        for _ in range(3):  # a structure's first request proves it; the next take the lane
            lane, general = (_raw_json(side.server, path, body) for side in clients)
            assert lane == general, (path, body)
        if path == direct and body == cases[0][1]:
            assert lane[0] == 200
            doc = json.loads(lane[2])
            assert doc["outputs"][0]["data"] == (A + B).ravel().tolist()
    # compressed: the same document (gzip's own header holds a time, so compare inflated)
    lane, general = (
        _raw_json(side.server, direct, cases[0][1], **{"Accept-Encoding": "gzip"})
        for side in clients
    )
    assert lane[0] == general[0] == 200 and lane[1]["Content-Encoding"] == "gzip"
    assert (lane[1]["Content-Type"], lane[1]["Content-Encoding"]) == (
        general[1]["Content-Type"],
        general[1]["Content-Encoding"],
    )
    assert gzip.decompress(lane[2]) == gzip.decompress(general[2])
    for model in ("direct", "fails"):
        lane_counts, general_counts = (_counts(side.server, model) for side in clients)
        assert lane_counts == general_counts, model

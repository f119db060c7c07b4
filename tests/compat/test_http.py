"""The real tritonclient.http (sync and aio) and raw HTTP against a real tritonlite server.

Covers the HTTP surface of the KServe v2 protocol with Triton's extensions; every bad input
gets Triton's status and an ``{"error": ...}`` body, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
import tritonclient.utils.shared_memory as shm
from conftest import start_server
from repos import DTYPES, add_sub_inputs, build_http_repo, random_tensor
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_http_repo(tmp_path_factory.mktemp("http_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Any:
    s = start_server(repo, "--allow-grpc=false")
    yield s
    s.stop()


@pytest.fixture()
def client(server: Any) -> httpclient.InferenceServerClient:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def raw(
    server: Any,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def error_of(status_body: tuple[int, dict[str, str], bytes]) -> str:
    status, headers, body = status_body
    assert headers.get("content-type", "").startswith("application/json"), headers
    doc = json.loads(body)
    assert set(doc) == {"error"}
    return str(doc["error"])


A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)


# -- health and metadata ---------------------------------------------------------------------------
def test_health(client: httpclient.InferenceServerClient, server: Any) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("no_such_model")
    assert raw(server, "GET", "/v2/health/live")[::2] == (200, b"")
    assert raw(server, "GET", "/v2/health/ready")[::2] == (200, b"")
    # Triton answers 400 "Model version not ready" for unknown models and versions alike.
    for path in ("/v2/models/no_such_model/ready", "/v2/models/add_sub/versions/7/ready"):
        r = raw(server, "GET", path)
        assert r[0] == 400 and error_of(r) == "Model version not ready"


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    md = client.get_server_metadata()
    assert md["name"] == "triton"
    assert isinstance(md["version"], str)
    for ext in (
        "binary_tensor_data",
        "statistics",
        "model_repository",
        "system_shared_memory",
        "classification",
        "model_configuration",
    ):
        assert ext in md["extensions"]


def test_model_metadata(client: httpclient.InferenceServerClient) -> None:
    md = client.get_model_metadata("add_sub")
    assert md == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
    }
    nb = client.get_model_metadata("add_sub_nobatch", "1")
    assert nb["inputs"][0]["shape"] == [16]
    assert client.get_model_metadata("identity_string")["inputs"][0]["datatype"] == "BYTES"


def test_model_config_json(client: httpclient.InferenceServerClient, server: Any) -> None:
    status, headers, body = raw(server, "GET", "/v2/models/add_sub/config")
    assert status == 200 and headers["content-type"].startswith("application/json")
    cfg = json.loads(body)
    assert cfg["name"] == "add_sub" and cfg["max_batch_size"] == 8
    assert cfg["input"][0]["dims"] == [16] and cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["input"][0]["optional"] is False and cfg["input"][0]["is_shape_tensor"] is False
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    assert "sequence_batching" not in cfg and "ensemble_scheduling" not in cfg
    nb = client.get_model_config("add_sub_nobatch")
    assert nb["max_batch_size"] == 0 and "dynamic_batching" not in nb
    assert client.get_model_config("identity_string")["input"][0]["data_type"] == "TYPE_STRING"


# -- inference -------------------------------------------------------------------------------------
@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_infer_add_sub(
    client: httpclient.InferenceServerClient, binary_in: bool, binary_out: bool
) -> None:
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary_out),
    ]
    r = client.infer(
        "add_sub", add_sub_inputs(httpclient, A, B, binary_in), outputs=outputs, request_id="42"
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    resp = r.get_response()
    assert resp["id"] == "42" and resp["model_name"] == "add_sub" and resp["model_version"] == "1"
    json_out = [o for o in resp["outputs"] if "data" in o]
    assert all("parameters" not in o for o in json_out)


def test_infer_no_outputs_listed_is_all_binary(client: httpclient.InferenceServerClient) -> None:
    r = client.infer("add_sub", add_sub_inputs(httpclient, A, B))
    resp = r.get_response()
    assert [o["name"] for o in resp["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert all(o["parameters"]["binary_data_size"] == 64 for o in resp["outputs"])
    assert "id" not in resp
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)


def test_infer_only_requested_output(client: httpclient.InferenceServerClient) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(httpclient, A, B),
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
    )
    assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT1"]
    assert r.as_numpy("OUTPUT0") is None


def test_infer_batch(client: httpclient.InferenceServerClient) -> None:
    a = np.random.default_rng(0).random((8, 16), dtype=np.float32)
    b = np.random.default_rng(1).random((8, 16), dtype=np.float32)
    r = client.infer("add_sub", add_sub_inputs(httpclient, a, b))
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b)


def test_infer_nobatch(client: httpclient.InferenceServerClient) -> None:
    a, b = A.reshape(16), B.reshape(16)
    r = client.infer("add_sub_nobatch", add_sub_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("binary", [True, False])
def test_identity_every_dtype(
    client: httpclient.InferenceServerClient, dtype: str, binary: bool
) -> None:
    from tritonclient.utils import triton_to_np_dtype

    np_dtype = triton_to_np_dtype(dtype)
    data = random_tensor(dtype, (2, 4))
    if dtype in ("FP16", "BF16") and not binary:
        pytest.skip(f"{dtype} is binary-only in Triton's JSON tensor format")
    inp = httpclient.InferInput("INPUT0", [2, 4], dtype)
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    r = client.infer(f"identity_{dtype.lower()}", [inp], outputs=[out])
    got = r.as_numpy("OUTPUT0")
    assert got.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("binary", [True, False])
def test_bytes(client: httpclient.InferenceServerClient, binary: bool) -> None:
    data = np.array([[b"hello", "é∑".encode(), b"", b"x" * 300]], dtype=object)
    inp = httpclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    got = client.infer("identity_string", [inp], outputs=[out]).as_numpy("OUTPUT0")
    got_bytes = [x if isinstance(x, bytes) else x.encode() for x in got.reshape(-1)]
    assert got_bytes == list(data.reshape(-1))


def test_zero_element_tensor(client: httpclient.InferenceServerClient) -> None:
    z = np.zeros((0, 16), dtype=np.float32)
    # A batch of 0 leaves Triton 2.51 no batch dimension: it sizes the inner shape, and refuses
    with pytest.raises(
        InferenceServerException,
        match=re.escape(
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model "
            "'add_sub'. Expected 64, got 0"
        ),
    ):
        client.infer("add_sub", add_sub_inputs(httpclient, z, z))
    var = np.zeros((1, 0), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 0], "FP32")
    inp.set_data_from_numpy(var)
    assert client.infer("identity_variable", [inp]).as_numpy("OUTPUT0").shape == (1, 0)


def test_variable_dims(client: httpclient.InferenceServerClient) -> None:
    for n in (1, 5, 33):
        data = np.arange(n, dtype=np.float32).reshape(1, n)
        inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
        inp.set_data_from_numpy(data)
        got = client.infer("identity_variable", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(got, data)


def test_raw_binary_request(server: Any) -> None:
    data = np.arange(5, dtype=np.float32)
    status, headers, body = raw(
        server,
        "POST",
        "/v2/models/identity_variable/infer",
        data.tobytes(),
        {"Inference-Header-Content-Length": "0"},
    )
    assert status == 200, body
    n = int(headers["inference-header-content-length"])
    doc = json.loads(body[:n])
    assert doc["outputs"][0]["shape"] == [1, 5]
    np.testing.assert_array_equal(np.frombuffer(body[n:], np.float32), data)
    r = raw(
        server,
        "POST",
        "/v2/models/add_sub/infer",
        data.tobytes(),
        {"Inference-Header-Content-Length": "0"},
    )
    assert r[0] == 400 and "1 input" in error_of(r)


@pytest.mark.parametrize("req_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("resp_alg", [None, "gzip", "deflate"])
def test_compression(
    client: httpclient.InferenceServerClient, req_alg: str | None, resp_alg: str | None
) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(httpclient, A, B),
        request_compression_algorithm=req_alg,
        response_compression_algorithm=resp_alg,
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)


def test_compression_headers(server: Any) -> None:
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "data": A.reshape(-1).tolist(),
                },
                {
                    "name": "INPUT1",
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "data": B.reshape(-1).tolist(),
                },
            ]
        }
    ).encode()
    status, headers, out = raw(
        server,
        "POST",
        "/v2/models/add_sub/infer",
        gzip.compress(body),
        {"Content-Encoding": "gzip", "Accept-Encoding": "deflate;q=0.5, gzip;q=0.9"},
    )
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(out))["outputs"][0]["data"][:2] == [2.0, 3.0]
    status, headers, out = raw(
        server,
        "POST",
        "/v2/models/add_sub/infer",
        zlib.compress(body),
        {"Content-Encoding": "deflate", "Accept-Encoding": "deflate"},
    )
    assert status == 200 and headers["content-encoding"] == "deflate"
    assert json.loads(zlib.decompress(out))["model_name"] == "add_sub"


def test_classification(client: httpclient.InferenceServerClient) -> None:
    a = np.array([[0.5, 3.25, -1.0, 2.0] + [0.0] * 12, [9.0] + [0.0] * 15], dtype=np.float32)
    zeros = np.zeros_like(a)
    r = client.infer(
        "add_sub",
        add_sub_inputs(httpclient, a, zeros),
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    got = r.as_numpy("OUTPUT0")
    assert got.shape == (2, 2)
    assert list(got[0]) == [b"3.250000:1", b"2.000000:3"]
    assert got[1][0] == b"9.000000:0"
    r = client.infer(
        "add_sub",
        add_sub_inputs(httpclient, a, zeros),
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=1)],
    )
    assert r.get_response()["outputs"][0]["datatype"] == "BYTES"
    labels = client.infer(
        "classifier",
        add_sub_inputs(httpclient, a[:1, :4].copy(), zeros[:1, :4].copy()),
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    assert list(labels.as_numpy("OUTPUT0")[0]) == [b"3.250000:1:cat", b"2.000000:3:fish"]


def test_nobatch_classification(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32)
    r = client.infer(
        "add_sub_nobatch",
        add_sub_inputs(httpclient, a, np.zeros_like(a)),
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    assert list(r.as_numpy("OUTPUT0")) == [b"15.000000:15", b"14.000000:14", b"13.000000:13"]


def test_custom_parameters(client: httpclient.InferenceServerClient) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(httpclient, A, B),
        parameters={"k": 1, "s": "x", "b": True, "f": 0.5},
        priority=1,
        timeout=1000,
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    with pytest.raises(InferenceServerException, match="reserved"):
        client.infer("add_sub", add_sub_inputs(httpclient, A, B), parameters={"triton_x": 1})


# -- aio client -----------------------------------------------------------------------------------
def test_aio_client(server: Any) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(server.http_url)
        try:
            assert await c.is_server_ready()
            assert (await c.get_model_metadata("add_sub"))["name"] == "add_sub"
            inputs = []
            for name, arr in (("INPUT0", A), ("INPUT1", B)):
                i = aioclient.InferInput(name, [1, 16], "FP32")
                i.set_data_from_numpy(arr)
                inputs.append(i)
            results = await asyncio.gather(
                *(c.infer("add_sub", inputs, request_id=str(k)) for k in range(20))
            )
            for k, r in enumerate(results):
                assert r.get_response()["id"] == str(k)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
            stats = await c.get_inference_statistics("add_sub")
            assert stats["model_stats"][0]["name"] == "add_sub"
            with pytest.raises(InferenceServerException):
                await c.get_model_metadata("no_such_model")
        finally:
            await c.close()

    asyncio.run(main())


# -- statistics ------------------------------------------------------------------------------------
def test_statistics(client: httpclient.InferenceServerClient) -> None:
    for _ in range(3):
        client.infer("add_sub_nobatch", add_sub_inputs(httpclient, A.reshape(16), B.reshape(16)))
    st = client.get_inference_statistics("add_sub_nobatch")["model_stats"]
    assert len(st) == 1
    s = st[0]
    assert s["version"] == "1" and s["inference_count"] >= 3 and s["execution_count"] >= 3
    for key in (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    ):
        assert isinstance(s["inference_stats"][key]["count"], int)
        assert isinstance(s["inference_stats"][key]["ns"], int)
    assert s["inference_stats"]["success"]["count"] >= 3
    assert s["last_inference"] > 0
    assert any(b["batch_size"] == 1 for b in s["batch_stats"])
    every = client.get_inference_statistics()["model_stats"]
    assert {"add_sub", "add_sub_nobatch", "identity_string"} <= {m["name"] for m in every}
    with pytest.raises(InferenceServerException, match="not available"):
        client.get_inference_statistics("no_such_model")


# -- repository extension (none mode) -------------------------------------------------------------
def test_repository_index_and_gating(client: httpclient.InferenceServerClient, server: Any) -> None:
    index = client.get_model_repository_index()
    names = {m["name"] for m in index}
    assert {"add_sub", "identity_string"} <= names
    row = next(m for m in index if m["name"] == "add_sub")
    assert row == {"name": "add_sub", "version": "1", "state": "READY"}
    r = raw(server, "POST", "/v2/repository/index", "")
    assert r[0] == 200 and isinstance(json.loads(r[2]), list)
    with pytest.raises(InferenceServerException, match="not allowed"):
        client.load_model("add_sub")
    with pytest.raises(InferenceServerException, match="not allowed"):
        client.unload_model("add_sub")
    r = raw(server, "POST", "/v2/repository/index", '{"ready": "yes"}')
    assert r[0] == 400 and "ready" in error_of(r)


# -- shared memory ---------------------------------------------------------------------------------
def test_system_shared_memory(client: httpclient.InferenceServerClient) -> None:
    client.unregister_system_shared_memory()
    hin = shm.create_shared_memory_region("tl_in", "/tl_http_in", 128)
    hout = shm.create_shared_memory_region("tl_out", "/tl_http_out", 128)
    try:
        shm.set_shared_memory_region(hin, [A, B])
        client.register_system_shared_memory("tl_in", "/tl_http_in", 128)
        client.register_system_shared_memory("tl_out", "/tl_http_out", 128)
        status = client.get_system_shared_memory_status()
        assert {s["name"] for s in status} == {"tl_in", "tl_out"}
        assert client.get_system_shared_memory_status("tl_in")[0]["byte_size"] == 128
        i0 = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_shared_memory("tl_in", 64)
        i1 = httpclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_shared_memory("tl_in", 64, offset=64)
        o0 = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        o0.set_shared_memory("tl_out", 64)
        o1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)
        o1.set_shared_memory("tl_out", 64, offset=64)
        r = client.infer("add_sub", [i0, i1], outputs=[o0, o1])
        out = r.get_response()["outputs"]
        assert all(set(o) == {"name", "datatype", "shape"} for o in out)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [1, 16]), A + B)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(hout, np.float32, [1, 16], offset=64), A - B
        )
        # out of range input and output ranges, unknown regions
        bad = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        bad.set_shared_memory("tl_in", 64, offset=100)
        with pytest.raises(InferenceServerException, match="Invalid offset"):
            client.infer("add_sub", [bad, i1])
        small = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        small.set_shared_memory("tl_out", 32)
        with pytest.raises(InferenceServerException, match="should be at least 64 bytes"):
            client.infer("add_sub", [i0, i1], outputs=[small])
        ghost = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        ghost.set_shared_memory("no_region", 64)
        with pytest.raises(InferenceServerException, match="no_region"):
            client.infer("add_sub", [ghost, i1])
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory("tl_in", "/tl_http_in", 128)
        with pytest.raises(InferenceServerException, match="Unable to open"):
            client.register_system_shared_memory("x", "/tl_no_such_key", 16)
        with pytest.raises(InferenceServerException, match="invalid args"):
            client.register_system_shared_memory("big", "/tl_http_in", 4096)
        with pytest.raises(InferenceServerException, match="Unable to find"):
            client.get_system_shared_memory_status("nope")
        client.unregister_system_shared_memory("tl_in")
        assert [s["name"] for s in client.get_system_shared_memory_status()] == ["tl_out"]
        client.unregister_system_shared_memory("never_registered")
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(hin)
        shm.destroy_shared_memory_region(hout)
    assert client.get_system_shared_memory_status() == []


def test_cuda_shared_memory_without_gpu(
    client: httpclient.InferenceServerClient, server: Any
) -> None:
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status() == []
    body = json.dumps(
        {
            "raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()},
            "device_id": 0,
            "byte_size": 64,
        }
    )
    r = raw(server, "POST", "/v2/cudasharedmemory/region/r/register", body)
    # Triton's answer to a handle it cannot open (the reason, no CUDA device, is logged)
    assert (r[0], error_of(r)) == (400, "failed to register shared memory region: invalid args")


# -- logging and trace settings -------------------------------------------------------------------
def test_logging_and_trace_settings(client: httpclient.InferenceServerClient, server: Any) -> None:
    s = client.get_log_settings()
    assert s["log_info"] is True and s["log_verbose_level"] == 0
    s = client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    assert s["log_verbose_level"] == 1 and s["log_format"] == "ISO8601"
    client.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
    r = raw(server, "POST", "/v2/logging", '{"log_file": "/tmp/x"}')
    assert r[0] == 501
    t = client.get_trace_settings()
    assert t["trace_level"] == ["OFF"] and t["trace_rate"] == "1000"
    t = client.update_trace_settings(model_name="add_sub", settings={"trace_rate": "5"})
    assert t["trace_rate"] == "5"
    assert client.get_trace_settings()["trace_rate"] == "1000"
    t = client.update_trace_settings(model_name="add_sub", settings={"trace_rate": None})
    assert t["trace_rate"] == "1000"
    r = raw(server, "POST", "/v2/trace/setting", '{"trace_level": ["OFF", "TIMESTAMPS"]}')
    assert r[0] == 400
    r = raw(server, "GET", "/v2/models/no_such_model/trace/setting")
    assert r[0] == 400 and "unknown model" in error_of(r)


# -- bad input: each a precise status and message, server still serving ----------------------------
def _json_infer(inputs: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"inputs": inputs, **extra})


GOOD0 = {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
GOOD1 = {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}

INFER = "/v2/models/add_sub/infer"
GOOD = _json_infer([GOOD0, GOOD1])
LENGTH = "Inference-Header-Content-Length"


def _binary_input0(declared: int, sent: int) -> tuple[bytes, dict[str, str]]:
    """A body whose INPUT0 says ``declared`` binary bytes follow the JSON; ``sent`` do."""
    head = _json_infer([dict(GOOD0, data=None), GOOD1]).replace(
        '"data": null', f'"parameters": {{"binary_data_size": {declared}}}'
    )
    return head.encode() + b"\0" * sent, {LENGTH: str(len(head))}


BAD_REQUESTS: list[tuple[str, str, str | bytes, dict[str, str], int, str]] = [
    ("broken json", INFER, "{not json", {}, 400, "failed to parse"),
    ("json array", INFER, "[1, 2]", {}, 400, "JSON object"),
    ("no inputs", INFER, "{}", {}, 400, "inputs"),
    ("id not string", INFER, _json_infer([GOOD0, GOOD1], id=5), {}, 400, "'id'"),
    ("unknown model", "/v2/models/nope/infer", GOOD, {}, 404, "unknown model: 'nope'"),
    ("unknown version", "/v2/models/add_sub/versions/9/infer", GOOD, {}, 404, "version 9"),
    (
        "unknown input",
        INFER,
        _json_infer([GOOD0, dict(GOOD1, name="INPUTX")]),
        {},
        400,
        "unexpected inference input 'INPUTX'",
    ),
    ("missing input", INFER, _json_infer([GOOD0]), {}, 400, "expected 2 inputs but got 1"),
    ("duplicate input", INFER, _json_infer([GOOD0, GOOD0]), {}, 400, "INPUT0"),
    (
        "unknown output",
        INFER,
        _json_infer([GOOD0, GOOD1], outputs=[{"name": "NOPE"}]),
        {},
        400,
        "unexpected inference output 'NOPE'",
    ),
    (
        "wrong datatype",
        INFER,
        _json_infer([dict(GOOD0, datatype="FP64"), GOOD1]),
        {},
        400,
        "data-type is 'FP64', but model 'add_sub' expects 'FP32'",
    ),
    (
        "invalid datatype",
        INFER,
        _json_infer([dict(GOOD0, datatype="FLOAT"), GOOD1]),
        {},
        400,
        "invalid datatype",
    ),
    (
        "wrong shape",
        INFER,
        _json_infer([dict(GOOD0, shape=[1, 8], data=[1.0] * 8), GOOD1]),
        {},
        400,
        "unexpected shape for input 'INPUT0'",
    ),
    (
        "negative shape",
        INFER,
        _json_infer([dict(GOOD0, shape=[-1, 16]), GOOD1]),
        {},
        400,
        "non-negative",
    ),
    (
        "element count",
        INFER,
        _json_infer([dict(GOOD0, data=[1.0] * 15), GOOD1]),
        {},
        400,
        "shape does not match",
    ),
    (
        "wrong json type",
        INFER,
        _json_infer([dict(GOOD0, data=["a"] * 16), GOOD1]),
        {},
        400,
        "expected numbers",
    ),
    (
        "batch too big",
        INFER,
        _json_infer(
            [
                dict(GOOD0, shape=[9, 16], data=[1.0] * 144),
                dict(GOOD1, shape=[9, 16], data=[1.0] * 144),
            ]
        ),
        {},
        400,
        "batch-size must be <= 8",
    ),
    (
        "batch mismatch",
        INFER,
        _json_infer([dict(GOOD0, shape=[2, 16], data=[1.0] * 32), GOOD1]),
        {},
        400,
        "batch size does not match",
    ),
    (
        "two data sources",
        INFER,
        _json_infer([dict(GOOD0, parameters={"binary_data_size": 64}), GOOD1]),
        {},
        400,
        "only one of",
    ),
    (
        "header larger than body",
        INFER,
        GOOD,
        {LENGTH: "100000"},
        400,
        "inference header size should be in range (0, ",
    ),
    ("header not a number", INFER, GOOD, {LENGTH: "abc"}, 400, LENGTH),
    (
        "leftover binary bytes",
        INFER,
        GOOD.encode() + b"\0" * 8,
        {LENGTH: str(len(GOOD))},
        400,
        "unexpected additional input data",
    ),
    (
        "binary size disagrees with shape",
        INFER,
        *_binary_input0(60, 60),
        400,
        "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 60",
    ),
    (
        "binary shorter than declared",
        INFER,
        *_binary_input0(64, 10),
        400,
        "unexpected size for input 'INPUT0'",
    ),
    (
        "undecodable gzip",
        INFER,
        b"not gzip at all",
        {"Content-Encoding": "gzip"},
        400,
        "decompress",
    ),
    (
        "unsupported encoding",
        INFER,
        GOOD,
        {"Content-Encoding": "br"},
        501,
        "Unsupported compression type",
    ),
    (
        "bad sequence_id",
        INFER,
        _json_infer([GOOD0, GOOD1], parameters={"sequence_id": [1]}),
        {},
        400,
        "sequence_id",
    ),
    (
        "bad parameter type",
        INFER,
        _json_infer([GOOD0, GOOD1], parameters={"p": {"a": 1}}),
        {},
        400,
        "parameter 'p'",
    ),
    (
        "bad binary_data flag",
        INFER,
        _json_infer(
            [GOOD0, GOOD1], outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]
        ),
        {},
        400,
        "binary_data",
    ),
    (
        "shm offset without region",
        INFER,
        _json_infer([dict(GOOD0, parameters={"shared_memory_offset": 0}), GOOD1]),
        {},
        400,
        "without a region",
    ),
    ("bad version string", "/v2/models/add_sub/versions/x1/infer", GOOD, {}, 404, "Not Found"),
    ("unknown route", "/v2/nothing/here", "", {}, 404, "Not Found"),
    (
        "unknown model route",
        "/v2/models/add_sub/versions/1/trace/setting",
        "",
        {},
        404,
        "Not Found",
    ),
    (
        "load non-string param",
        "/v2/repository/models/add_sub/load",
        '{"parameters": {"config": 5}}',
        {},
        400,
        "must be a string",
    ),
    (
        "load with repository name",
        "/v2/repository/r1/models/add_sub/load",
        "",
        {},
        501,
        "'repository_name' specification is not supported",
    ),
    (
        "shm register without key",
        "/v2/systemsharedmemory/region/x/register",
        '{"byte_size": 8}',
        {},
        400,
        "'key'",
    ),
    (
        "cuda register bad base64",
        "/v2/cudasharedmemory/region/x/register",
        '{"raw_handle": {"b64": "***"}, "device_id": 0, "byte_size": 8}',
        {},
        400,
        "base64",
    ),
    ("logging bad type", "/v2/logging", '{"log_info": "yes"}', {}, 400, "log_info"),
]


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests(
    server: Any, client: httpclient.InferenceServerClient, case: tuple[Any, ...]
) -> None:
    _, path, body, headers, status, message = case
    r = raw(server, "POST", path, body, headers)
    assert r[0] == status, r
    assert message in error_of(r)
    assert client.is_server_ready()
    r = client.infer("add_sub", add_sub_inputs(httpclient, A, B))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)


def test_wrong_method(server: Any) -> None:
    r = raw(server, "POST", "/v2/health/live", "")
    assert r[0] == 405 and error_of(r) == "Method Not Allowed"
    r = raw(server, "GET", "/v2/models/add_sub/infer")
    assert r[0] == 405


def test_non_utf8_bytes_are_refused(client: httpclient.InferenceServerClient) -> None:
    # ONNX string tensors hold UTF-8 text: bytes that are not UTF-8 are refused, never
    # changed (they used to reach the model as U+FFFD)
    data = np.array([[b"\xff\xfe", b"a", b"b", b"c"]], dtype=object)
    inp = httpclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    with pytest.raises(InferenceServerException, match="not valid UTF-8") as e:
        client.infer("identity_string", [inp], outputs=[out])
    assert e.value.status() == "400"


def test_bytes_binary_malformed(server: Any) -> None:
    blob = serialize_byte_tensor(np.array([b"ab", b"c", b"d", b"e"], dtype=object)).item()[:-2]
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 4],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(blob)},
                }
            ]
        }
    )
    r = raw(
        server,
        "POST",
        "/v2/models/identity_string/infer",
        head.encode() + blob,
        {"Inference-Header-Content-Length": str(len(head))},
    )
    assert r[0] == 400 and error_of(r) == (
        "[request id: <id_unknown>] incomplete string length indicator for inference input "
        "'INPUT0' for model 'identity_string', expecting 4 bytes but only 3 bytes available. "
        "Please make sure the string length indicator is in one buffer."
    )


# -- request size limits ---------------------------------------------------------------------------
def test_body_limit_default_and_raised(repo: Path) -> None:
    big = np.zeros((1, 9 * 1024 * 1024), dtype=np.float32)  # 36 MiB
    s = start_server(
        repo, "--allow-grpc=false", "--allow-metrics=false", "--http-max-input-size=16777216"
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url, network_timeout=120)
        inp = httpclient.InferInput("INPUT0", list(big.shape), "FP32")
        inp.set_data_from_numpy(big)
        with pytest.raises(InferenceServerException, match="http-max-input-size"):
            c.infer("identity_variable", [inp])
        assert c.is_server_ready()
    finally:
        s.stop()
    s = start_server(
        repo, "--allow-grpc=false", "--allow-metrics=false", "--http-max-input-size=2200000000"
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url, network_timeout=120)
        np.testing.assert_array_equal(c.infer("identity_variable", [inp]).as_numpy("OUTPUT0"), big)
    finally:
        s.stop()

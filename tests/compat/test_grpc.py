"""The real tritonclient.grpc (sync and aio) and tritonclient's generated stubs against a real
tritonlite server, over every unary RPC of inference.GRPCInferenceService.

Every bad input gets a precise status code and message, and the server keeps serving after.
Hand-built requests go through tritonclient's own ``service_pb2`` messages and stubs (the
default descriptor pool), so they also prove the wire identity of tritonlite's private protos.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Queue
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.utils.shared_memory as shm
from conftest import start_server
from grpc_health.v1 import health_pb2, health_pb2_grpc
from repos import DTYPES, add_sub_inputs, build_http_repo, random_tensor, write_add_sub
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

pytestmark = pytest.mark.timeout(60)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)
MAX = 2**31 - 1
S = grpc.StatusCode


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_http_repo(tmp_path_factory.mktemp("grpc_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Any]:
    s = start_server(repo, "--allow-http=false", "--allow-metrics=false")
    yield s
    s.stop()


@pytest.fixture()
def client(server: Any) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def channel(server: Any) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(
        server.grpc_url,
        options=[("grpc.max_send_message_length", MAX), ("grpc.max_receive_message_length", MAX)],
    )
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


def infer_request(
    model: str = "add_sub", a: np.ndarray = A, b: np.ndarray = B, **fields: Any
) -> service_pb2.ModelInferRequest:
    """A well-formed add_sub request built with tritonclient's own message class."""
    req = service_pb2.ModelInferRequest(model_name=model, **fields)
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        req.inputs.add(name=name, datatype="FP32", shape=list(arr.shape))
        req.raw_input_contents.append(arr.tobytes())
    return req


def assert_serving(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_ready()
    r = client.infer("add_sub", add_sub_inputs(grpcclient, A, B))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)


# -- health and metadata ---------------------------------------------------------------------------
def test_health(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    with pytest.raises(InferenceServerException, match="unknown model: 'no_such_model'") as e:
        client.is_model_ready("no_such_model")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="version 7") as e:
        client.is_model_ready("add_sub", "7")
    assert e.value.status() == "StatusCode.NOT_FOUND"


def test_health_service(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "inference.GRPCInferenceService"):
        r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()


def test_health_not_serving_while_not_ready(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    s = start_server(
        tmp_path, "--exit-on-error=false", "--allow-http=false", "--allow-metrics=false"
    )
    try:
        with grpc.insecure_channel(s.grpc_url) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.NOT_SERVING
        c = grpcclient.InferenceServerClient(s.grpc_url)
        assert c.is_server_live() and not c.is_server_ready()
        assert c.is_model_ready("add_sub") and not c.is_model_ready("broken")
        c.close()
    finally:
        s.stop()


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    md = client.get_server_metadata()
    assert md.name == "triton" and md.version
    for ext in (
        "binary_tensor_data",
        "statistics",
        "model_repository",
        "system_shared_memory",
        "cuda_shared_memory",
        "classification",
        "model_configuration",
        "logging",
        "trace",
    ):
        assert ext in md.extensions
    assert client.get_server_metadata(as_json=True)["name"] == "triton"


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    md = client.get_model_metadata("add_sub", as_json=True)
    assert md == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]},
            {"name": "INPUT1", "datatype": "FP32", "shape": ["-1", "16"]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": ["-1", "16"]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": ["-1", "16"]},
        ],
    }
    nb = client.get_model_metadata("add_sub_nobatch", "1")
    assert list(nb.inputs[0].shape) == [16] and nb.versions == ["1"]
    assert client.get_model_metadata("identity_string").inputs[0].datatype == "BYTES"


def test_model_config(client: grpcclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("add_sub").config  # tritonclient's ModelConfig class
    assert cfg.name == "add_sub" and cfg.max_batch_size == 8
    assert list(cfg.input[0].dims) == [16] and cfg.input[0].data_type == 11  # TYPE_FP32
    assert cfg.HasField("dynamic_batching") and not cfg.HasField("sequence_batching")
    as_json = client.get_model_config("add_sub", as_json=True)["config"]
    assert as_json["input"][0]["data_type"] == "TYPE_FP32"
    assert as_json["instance_group"][0]["kind"] == "KIND_CPU"
    nb = client.get_model_config("add_sub_nobatch", "1").config
    assert nb.max_batch_size == 0 and not nb.HasField("dynamic_batching")
    assert client.get_model_config("identity_string").config.input[0].data_type == 13  # STRING


# -- inference -------------------------------------------------------------------------------------
def test_infer_add_sub(client: grpcclient.InferenceServerClient) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(grpcclient, A, B),
        request_id="42",
        outputs=[
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ],
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    resp = r.get_response()
    assert resp.id == "42" and resp.model_name == "add_sub" and resp.model_version == "1"
    assert [o.name for o in resp.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert [len(x) for x in resp.raw_output_contents] == [64, 64]
    assert all(not o.HasField("contents") for o in resp.outputs)


def test_infer_no_outputs_listed_is_all(client: grpcclient.InferenceServerClient) -> None:
    resp = client.infer("add_sub", add_sub_inputs(grpcclient, A, B)).get_response()
    assert [o.name for o in resp.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert len(resp.raw_output_contents) == 2 and resp.id == ""
    assert [list(o.shape) for o in resp.outputs] == [[1, 16], [1, 16]]


def test_infer_only_requested_output(client: grpcclient.InferenceServerClient) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(grpcclient, A, B),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
    )
    assert [o.name for o in r.get_response().outputs] == ["OUTPUT1"]
    assert r.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)


def test_infer_batch_and_nobatch(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((8, 16), dtype=np.float32), rng.random((8, 16), dtype=np.float32)
    r = client.infer("add_sub", add_sub_inputs(grpcclient, a, b))
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b)
    a1, b1 = A.reshape(16), B.reshape(16)
    r = client.infer("add_sub_nobatch", add_sub_inputs(grpcclient, a1, b1), model_version="1")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a1 - b1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_every_dtype_raw(client: grpcclient.InferenceServerClient, dtype: str) -> None:
    data = random_tensor(dtype, (2, 4))
    inp = grpcclient.InferInput("INPUT0", [2, 4], dtype)
    inp.set_data_from_numpy(data)
    got = client.infer(f"identity_{dtype.lower()}", [inp]).as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(got, data)


_TYPED = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


@pytest.mark.parametrize("dtype", sorted(_TYPED))
def test_identity_typed_contents(stub: Any, dtype: str) -> None:
    data = random_tensor(dtype, (2, 4))
    req = service_pb2.ModelInferRequest(model_name=f"identity_{dtype.lower()}", id="t")
    t = req.inputs.add(name="INPUT0", datatype=dtype, shape=[2, 4])
    getattr(t.contents, _TYPED[dtype]).extend(data.reshape(-1).tolist())
    resp = stub.ModelInfer(req, timeout=30)
    assert resp.id == "t" and len(resp.raw_output_contents) == 1
    got = np.frombuffer(resp.raw_output_contents[0], dtype=data.dtype).reshape(2, 4)
    np.testing.assert_array_equal(got, data)


def test_bytes_typed_contents(stub: Any) -> None:
    req = service_pb2.ModelInferRequest(model_name="identity_string")
    t = req.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 4])
    t.contents.bytes_contents.extend([b"a", "é".encode(), b"", b"zz"])
    resp = stub.ModelInfer(req, timeout=30)
    assert (
        resp.raw_output_contents[0]
        == serialize_byte_tensor(np.array([b"a", "é".encode(), b"", b"zz"], dtype=object)).item()
    )


def test_bytes(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([[b"hello", "é∑".encode(), b"", b"x" * 300]], dtype=object)
    inp = grpcclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data)
    got = client.infer("identity_string", [inp]).as_numpy("OUTPUT0")
    assert list(got.reshape(-1)) == list(data.reshape(-1))


def test_zero_element_and_variable_dims(client: grpcclient.InferenceServerClient) -> None:
    z = np.zeros((0, 16), dtype=np.float32)
    # A batch of 0 leaves Triton 2.51 no batch dimension: it sizes the inner shape, and refuses
    with pytest.raises(
        InferenceServerException,
        match=re.escape(
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model "
            "'add_sub'. Expected 64, got 0"
        ),
    ):
        client.infer("add_sub", add_sub_inputs(grpcclient, z, z))
    for n in (0, 1, 5, 33):
        data = np.arange(n, dtype=np.float32).reshape(1, n)
        inp = grpcclient.InferInput("INPUT0", [1, n], "FP32")
        inp.set_data_from_numpy(data)
        np.testing.assert_array_equal(
            client.infer("identity_variable", [inp]).as_numpy("OUTPUT0"), data
        )


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([[0.5, 3.25, -1.0, 2.0] + [0.0] * 12, [9.0] + [0.0] * 15], dtype=np.float32)
    zeros = np.zeros_like(a)
    r = client.infer(
        "add_sub",
        add_sub_inputs(grpcclient, a, zeros),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    got = r.as_numpy("OUTPUT0")
    assert r.get_response().outputs[0].datatype == "BYTES" and got.shape == (2, 2)
    assert list(got[0]) == [b"3.250000:1", b"2.000000:3"] and got[1][0] == b"9.000000:0"
    labels = client.infer(
        "classifier",
        add_sub_inputs(grpcclient, a[:1, :4].copy(), zeros[:1, :4].copy()),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    assert list(labels.as_numpy("OUTPUT0")[0]) == [b"3.250000:1:cat", b"2.000000:3:fish"]


def test_parameters(client: grpcclient.InferenceServerClient, stub: Any) -> None:
    r = client.infer(
        "add_sub",
        add_sub_inputs(grpcclient, A, B),
        priority=1,
        timeout=100_000,
        parameters={"k": 1, "s": "x", "b": True, "f": 0.5},
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    # what the C++ client and perf_analyzer put on every request: accepted, not forwarded
    req = infer_request(id="cpp")
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    req.parameters["priority"].int64_param = 2
    assert stub.ModelInfer(req, timeout=30).id == "cpp"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_request_compression(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    r = client.infer("add_sub", add_sub_inputs(grpcclient, A, B), compression_algorithm=algorithm)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)


class CountingProxy:
    """A TCP forwarder that counts the bytes the server sends back (to see compression)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.downstream = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(conn, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if count:
                    with self._lock:
                        self.downstream += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("level", ["none", "low", "medium", "high"])
def test_response_compression_level(repo: Path, level: str) -> None:
    s = start_server(
        repo,
        "--allow-http=false",
        "--allow-metrics=false",
        f"--grpc-infer-response-compression-level={level}",
    )
    proxy = CountingProxy(s.grpc_url)
    try:
        c = grpcclient.InferenceServerClient(proxy.url)
        zeros = np.zeros((1, 1 << 20), dtype=np.float32)  # 4 MiB each way, very compressible
        inp = grpcclient.InferInput("INPUT0", list(zeros.shape), "FP32")
        inp.set_data_from_numpy(zeros)
        np.testing.assert_array_equal(
            c.infer("identity_variable", [inp]).as_numpy("OUTPUT0"), zeros
        )
        got = Queue()
        c.start_stream(lambda result, error: got.put((result, error)))
        c.async_stream_infer("identity_variable", [inp])
        result, error = got.get(timeout=30)
        c.stop_stream()
        assert error is None and result.as_numpy("OUTPUT0").shape == zeros.shape
        c.close()
        if level == "none":
            assert proxy.downstream > 2 * zeros.nbytes
        else:  # only inference responses are compressed (Triton's rule)
            assert proxy.downstream < zeros.nbytes // 10
    finally:
        proxy.close()
        s.stop()


# -- aio client ------------------------------------------------------------------------------------
def test_aio_client(server: Any) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(server.grpc_url)
        try:
            assert await c.is_server_live() and await c.is_server_ready()
            assert await c.is_model_ready("add_sub")
            assert (await c.get_server_metadata()).name == "triton"
            assert (await c.get_model_metadata("add_sub")).name == "add_sub"
            assert (await c.get_model_config("add_sub")).config.max_batch_size == 8
            inputs = []
            for name, arr in (("INPUT0", A), ("INPUT1", B)):
                i = aioclient.InferInput(name, [1, 16], "FP32")
                i.set_data_from_numpy(arr)
                inputs.append(i)
            results = await asyncio.gather(
                *(c.infer("add_sub", inputs, request_id=str(k)) for k in range(40))
            )
            for k, r in enumerate(results):
                assert r.get_response().id == str(k)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
            stats = await c.get_inference_statistics("add_sub", as_json=True)
            assert stats["model_stats"][0]["name"] == "add_sub"
            assert (await c.get_model_repository_index()).models
            with pytest.raises(InferenceServerException, match="not allowed"):
                await c.load_model("add_sub")
            with pytest.raises(InferenceServerException, match="not allowed"):
                await c.unload_model("add_sub")
            # system shared memory: register, status, infer from it, unregister
            await c.unregister_system_shared_memory()
            region = shm.create_shared_memory_region("tl_aio", "/tl_grpc_aio", 128)
            try:
                shm.set_shared_memory_region(region, [A, B])
                await c.register_system_shared_memory("tl_aio", "/tl_grpc_aio", 128)
                status = await c.get_system_shared_memory_status()
                assert set(status.regions) == {"tl_aio"}
                i0 = aioclient.InferInput("INPUT0", [1, 16], "FP32")
                i0.set_shared_memory("tl_aio", 64)
                i1 = aioclient.InferInput("INPUT1", [1, 16], "FP32")
                i1.set_shared_memory("tl_aio", 64, offset=64)
                r = await c.infer("add_sub", [i0, i1])
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
                await c.unregister_system_shared_memory("tl_aio")
                assert (await c.get_system_shared_memory_status()).regions == {}
            finally:
                shm.destroy_shared_memory_region(region)
            await c.unregister_cuda_shared_memory()
            assert (await c.get_cuda_shared_memory_status()).regions == {}
            with pytest.raises(InferenceServerException, match="invalid args"):
                await c.register_cuda_shared_memory("r", base64.b64encode(b"\0" * 64), 0, 64)
            assert (await c.get_log_settings(as_json=True))["settings"]
            log = await c.update_log_settings({"log_verbose_level": 0}, as_json=True)
            assert log["settings"]["log_verbose_level"] == {"uint32_param": 0}
            assert (await c.get_trace_settings(as_json=True))["settings"]["trace_rate"]
            trace = await c.update_trace_settings("add_sub", {"trace_count": "3"}, as_json=True)
            assert trace["settings"]["trace_count"]["value"] == ["3"]
            await c.update_trace_settings("add_sub", {"trace_count": None})
            with pytest.raises(InferenceServerException, match="unknown model"):
                await c.get_model_metadata("no_such_model")
        finally:
            await c.close()

    asyncio.run(main())


# -- statistics ------------------------------------------------------------------------------------
def test_statistics(client: grpcclient.InferenceServerClient) -> None:
    for _ in range(3):
        client.infer("add_sub_nobatch", add_sub_inputs(grpcclient, A.reshape(16), B.reshape(16)))
    st = client.get_inference_statistics("add_sub_nobatch").model_stats
    assert len(st) == 1
    s = st[0]
    assert s.name == "add_sub_nobatch" and s.version == "1"
    assert s.inference_count >= 3 and s.execution_count >= 3 and s.last_inference > 0
    assert s.inference_stats.success.count >= 3 and s.inference_stats.success.ns > 0
    assert any(b.batch_size == 1 for b in s.batch_stats)
    as_json = client.get_inference_statistics("add_sub_nobatch", "1", as_json=True)
    assert set(as_json["model_stats"][0]["inference_stats"]) >= {
        "success",
        "queue",
        "compute_infer",
    }
    every = client.get_inference_statistics().model_stats
    assert {"add_sub", "add_sub_nobatch", "identity_string"} <= {m.name for m in every}
    with pytest.raises(InferenceServerException, match="not available") as e:
        client.get_inference_statistics("no_such_model")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"


# -- repository extension --------------------------------------------------------------------------
def test_repository_index_and_gating(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index().models
    row = next(m for m in index if m.name == "add_sub")
    assert (row.version, row.state, row.reason) == ("1", "READY", "")
    assert {m.name for m in index} >= {"add_sub", "identity_string"}
    with pytest.raises(InferenceServerException, match="not allowed") as e:
        client.load_model("add_sub")
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    with pytest.raises(InferenceServerException, match="not allowed"):
        client.unload_model("add_sub")


def test_repository_explicit_mode(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    write_add_sub(tmp_path, "other", 0)
    s = start_server(
        tmp_path,
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--allow-http=false",
        "--allow-metrics=false",
    )
    c = grpcclient.InferenceServerClient(s.grpc_url)
    try:
        assert c.is_model_ready("add_sub")
        idx = {m.name: m for m in c.get_model_repository_index().models}
        assert idx["other"].state == "" and idx["add_sub"].state == "READY"
        with grpc.insecure_channel(s.grpc_url) as ch:
            ready = service_pb2_grpc.GRPCInferenceServiceStub(ch).RepositoryIndex(
                service_pb2.RepositoryIndexRequest(ready=True), timeout=30
            )
        assert [m.name for m in ready.models] == ["add_sub"]
        c.load_model("other")
        assert c.is_model_ready("other")
        c.unload_model("other", unload_dependents=True)
        assert not c.is_model_ready("other")
        with pytest.raises(InferenceServerException, match="has not been served"):
            c.unload_model("never_loaded")
        # a config override and a file override (bytes, not base64, over gRPC)
        onnx_bytes = (tmp_path / "add_sub" / "1" / "model.onnx").read_bytes()
        config = json.dumps(
            {
                "name": "moved",
                "backend": "onnxruntime",
                "max_batch_size": 2,
                "input": [
                    {"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                    for n in ("INPUT0", "INPUT1")
                ],
                "output": [
                    {"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                    for n in ("OUTPUT0", "OUTPUT1")
                ],
            }
        )
        c.load_model("moved", config=config, files={"file:1/model.onnx": onnx_bytes})
        assert c.get_model_config("moved").config.max_batch_size == 2
        r = c.infer("moved", add_sub_inputs(grpcclient, A, B))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    finally:
        c.close()
        s.stop()


# -- shared memory ---------------------------------------------------------------------------------
def test_system_shared_memory(client: grpcclient.InferenceServerClient) -> None:
    client.unregister_system_shared_memory()
    hin = shm.create_shared_memory_region("tl_gin", "/tl_grpc_in", 128)
    hout = shm.create_shared_memory_region("tl_gout", "/tl_grpc_out", 128)
    try:
        shm.set_shared_memory_region(hin, [A, B])
        client.register_system_shared_memory("tl_gin", "/tl_grpc_in", 128)
        client.register_system_shared_memory("tl_gout", "/tl_grpc_out", 128)
        status = client.get_system_shared_memory_status().regions
        assert set(status) == {"tl_gin", "tl_gout"}
        one = client.get_system_shared_memory_status("tl_gin").regions["tl_gin"]
        assert (one.name, one.key, one.offset, one.byte_size) == ("tl_gin", "/tl_grpc_in", 0, 128)
        i0 = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_shared_memory("tl_gin", 64)
        i1 = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_shared_memory("tl_gin", 64, offset=64)
        o0 = grpcclient.InferRequestedOutput("OUTPUT0")
        o0.set_shared_memory("tl_gout", 64)
        o1 = grpcclient.InferRequestedOutput("OUTPUT1")
        o1.set_shared_memory("tl_gout", 64, offset=64)
        r = client.infer("add_sub", [i0, i1], outputs=[o0, o1])
        resp = r.get_response()
        assert [o.name for o in resp.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert list(resp.raw_output_contents) == [b"", b""]  # index-aligned, empty for shm
        np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [1, 16]), A + B)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(hout, np.float32, [1, 16], offset=64), A - B
        )
        # shm input mixed with raw input: raw contents skip the shm input
        raw1 = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
        raw1.set_data_from_numpy(B)
        mixed = client.infer(
            "add_sub", [i0, raw1], outputs=[grpcclient.InferRequestedOutput("OUTPUT1"), o0]
        )
        np.testing.assert_array_equal(mixed.as_numpy("OUTPUT1"), A - B)
        assert list(mixed.get_response().raw_output_contents)[1] == b""
        # out-of-range ranges, unknown regions, duplicate and bad registrations
        bad = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        bad.set_shared_memory("tl_gin", 64, offset=100)
        with pytest.raises(InferenceServerException, match="Invalid offset"):
            client.infer("add_sub", [bad, i1])
        small = grpcclient.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory("tl_gout", 32)
        with pytest.raises(InferenceServerException, match="should be at least 64 bytes"):
            client.infer("add_sub", [i0, i1], outputs=[small])
        ghost = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        ghost.set_shared_memory("no_region", 64)
        with pytest.raises(InferenceServerException, match="no_region"):
            client.infer("add_sub", [ghost, i1])
        with pytest.raises(InferenceServerException, match="already in manager") as e:
            client.register_system_shared_memory("tl_gin", "/tl_grpc_in", 128)
        assert e.value.status() == "StatusCode.ALREADY_EXISTS"
        with pytest.raises(InferenceServerException, match="Unable to open"):
            client.register_system_shared_memory("x", "/tl_no_such_key", 16)
        with pytest.raises(InferenceServerException, match="invalid args"):
            client.register_system_shared_memory("big", "/tl_grpc_in", 4096)
        with pytest.raises(InferenceServerException, match="Unable to find") as e:
            client.get_system_shared_memory_status("nope")
        assert e.value.status() == "StatusCode.NOT_FOUND"
        client.unregister_system_shared_memory("tl_gin")
        assert set(client.get_system_shared_memory_status().regions) == {"tl_gout"}
        client.unregister_system_shared_memory("never_registered")
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(hin)
        shm.destroy_shared_memory_region(hout)
    assert client.get_system_shared_memory_status().regions == {}
    assert_serving(client)


def test_cuda_shared_memory_without_gpu(client: grpcclient.InferenceServerClient) -> None:
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")
    assert client.get_cuda_shared_memory_status().regions == {}
    handle = base64.b64encode(b"\0" * 64)
    with pytest.raises(InferenceServerException) as e:  # Triton's words (the reason is logged)
        client.register_cuda_shared_memory("r", handle, 0, 64)
    assert e.value.message() == "failed to register shared memory region: invalid args"
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="Unable to find"):
        client.get_cuda_shared_memory_status("r")


# -- logging and trace settings --------------------------------------------------------------------
def test_log_settings(client: grpcclient.InferenceServerClient) -> None:
    s = client.get_log_settings(as_json=True)["settings"]
    assert s["log_info"] == {"bool_param": True}
    assert s["log_verbose_level"].get("uint32_param", 0) == 0
    assert s["log_format"] == {"string_param": "default"}
    s = client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"}).settings
    assert s["log_verbose_level"].uint32_param == 1 and s["log_format"].string_param == "ISO8601"
    client.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
    with pytest.raises(InferenceServerException, match="log file") as e:
        client.update_log_settings({"log_file": "/tmp/x"})
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    with pytest.raises(InferenceServerException, match="log_format"):
        client.update_log_settings({"log_format": "xml"})


def test_trace_settings(client: grpcclient.InferenceServerClient) -> None:
    t = client.get_trace_settings(as_json=True)["settings"]
    assert t["trace_level"]["value"] == ["OFF"] and t["trace_rate"]["value"] == ["1000"]
    t = client.update_trace_settings(
        model_name="add_sub", settings={"trace_rate": "5"}, as_json=True
    )["settings"]
    assert t["trace_rate"]["value"] == ["5"]
    assert client.get_trace_settings(as_json=True)["settings"]["trace_rate"]["value"] == ["1000"]
    t = client.update_trace_settings(
        model_name="add_sub", settings={"trace_rate": None}, as_json=True
    )["settings"]
    assert t["trace_rate"]["value"] == ["1000"]
    # tritonserver refuses to turn tracing on without a trace file (--trace-config triton,file)
    with pytest.raises(InferenceServerException, match="trace file name is not given"):
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    client.update_trace_settings(settings={"trace_level": ["OFF"]})
    with pytest.raises(InferenceServerException, match="Expect only one trace level 'OFF'"):
        client.update_trace_settings(settings={"trace_level": ["OFF", "TIMESTAMPS"]})
    with pytest.raises(InferenceServerException, match="unknown model") as e:
        client.get_trace_settings(model_name="no_such_model")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"


# -- bad input: each a precise status and message, server still serving ----------------------------
def _infer(mutate: Callable[[Any], None] | None = None, **fields: Any) -> Any:
    req = infer_request(**fields)
    if mutate is not None:
        mutate(req)
    return req


def _param(target: Any, key: str, kind: str, value: Any) -> None:
    setattr(target[key], kind, value)


def _contents(req: Any) -> None:
    req.ClearField("raw_input_contents")
    for t in req.inputs:
        t.contents.fp32_contents.extend([1.0] * 16)


def _bad_raw_bytes(req: Any) -> None:
    del req.inputs[:]
    req.model_name = "identity_string"
    req.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 4])
    blob = serialize_byte_tensor(np.array([b"ab", b"c", b"d", b"e"], dtype=object)).item()
    req.ClearField("raw_input_contents")
    req.raw_input_contents.append(blob[:-2])


def _shm_input(**params: tuple[str, Any]) -> Callable[[Any], None]:
    def mutate(req: Any) -> None:
        del req.raw_input_contents[0]
        for key, (kind, value) in params.items():
            _param(req.inputs[0].parameters, key, kind, value)

    return mutate


def _output(name: str, **params: tuple[str, Any]) -> Callable[[Any], None]:
    def mutate(req: Any) -> None:
        o = req.outputs.add(name=name)
        for key, (kind, value) in params.items():
            _param(o.parameters, key, kind, value)

    return mutate


BAD_INFER: list[tuple[str, Callable[[], Any], grpc.StatusCode, str]] = [
    ("unknown model", lambda: _infer(model="nope"), S.NOT_FOUND, "unknown model: 'nope'"),
    ("empty model name", lambda: _infer(model=""), S.NOT_FOUND, "unknown model: ''"),
    ("unknown version", lambda: _infer(model_version="9"), S.NOT_FOUND, "version 9"),
    (
        "bad version string",
        lambda: _infer(model_version="x1"),
        S.INVALID_ARGUMENT,
        "version should be an integral value",
    ),
    (
        "unknown input",
        lambda: _infer(lambda r: setattr(r.inputs[1], "name", "INPUTX")),
        S.INVALID_ARGUMENT,
        "unexpected inference input 'INPUTX'",
    ),
    (
        "missing input",
        lambda: _infer(lambda r: (r.inputs.pop(), r.raw_input_contents.pop())),
        S.INVALID_ARGUMENT,
        "expected 2 inputs but got 1",
    ),
    (
        "duplicate input",
        lambda: _infer(lambda r: setattr(r.inputs[1], "name", "INPUT0")),
        S.INVALID_ARGUMENT,
        "input 'INPUT0' already exists",
    ),
    (
        "unknown output",
        lambda: _infer(_output("NOPE")),
        S.INVALID_ARGUMENT,
        "unexpected inference output 'NOPE'",
    ),
    (
        "wrong datatype",
        lambda: _infer(lambda r: setattr(r.inputs[0], "datatype", "FP64")),
        S.INVALID_ARGUMENT,
        "inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'",
    ),
    (
        "wrong datatype, right size",
        lambda: _infer(
            lambda r: (
                setattr(r.inputs[0], "datatype", "FP64"),
                r.inputs[0].ClearField("shape"),
                r.inputs[0].shape.extend([1, 8]),
            )
        ),
        S.INVALID_ARGUMENT,
        "data-type is 'FP64', but model 'add_sub' expects 'FP32'",
    ),
    (
        "invalid datatype",
        lambda: _infer(lambda r: setattr(r.inputs[0], "datatype", "FLOAT")),
        S.INVALID_ARGUMENT,
        "invalid datatype 'FLOAT'",
    ),
    (
        "wrong shape",
        lambda: _infer(a=np.zeros((1, 8), np.float32)),
        S.INVALID_ARGUMENT,
        "unexpected shape for input 'INPUT0'",
    ),
    (
        "negative shape",
        lambda: _infer(lambda r: r.inputs[0].shape.__setitem__(0, -1)),
        S.INVALID_ARGUMENT,
        "non-negative",
    ),
    (
        "raw size disagrees with shape",
        lambda: _infer(lambda r: r.raw_input_contents.__setitem__(0, b"\0" * 60)),
        S.INVALID_ARGUMENT,
        "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 60",
    ),
    (
        "missing raw contents",
        lambda: _infer(lambda r: r.raw_input_contents.pop()),
        S.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT1' for model 'add_sub'",
    ),
    (
        "extra raw contents",
        lambda: _infer(lambda r: r.raw_input_contents.append(b"\0" * 64)),
        S.INVALID_ARGUMENT,
        "unexpected additional input data for model 'add_sub'",
    ),
    (
        "contents and raw contents",
        lambda: _infer(lambda r: r.inputs[0].contents.fp32_contents.extend([1.0] * 16)),
        S.INVALID_ARGUMENT,
        "contents field must not be specified when using raw_input_contents",
    ),
    (
        "contents of another type",
        lambda: _infer(
            lambda r: (
                _contents(r),
                r.inputs[1].contents.ClearField("fp32_contents"),
                r.inputs[1].contents.int_contents.extend([1] * 16),
            )
        ),
        S.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT1' for model "
        "'add_sub' of type 'INT32', expected datatype 'FP32'",
    ),
    (
        "contents count",
        lambda: _infer(lambda r: (_contents(r), r.inputs[1].contents.fp32_contents.append(1.0))),
        S.INVALID_ARGUMENT,
        "unexpected total byte size 68 for input 'INPUT1', expecting 64",
    ),
    (
        "batch too big",
        lambda: _infer(a=np.zeros((9, 16), np.float32), b=np.zeros((9, 16), np.float32)),
        S.INVALID_ARGUMENT,
        "batch-size must be <= 8",
    ),
    (
        "batch mismatch",
        lambda: _infer(a=np.zeros((2, 16), np.float32)),
        S.INVALID_ARGUMENT,
        "batch size does not match",
    ),
    (
        "malformed BYTES",
        lambda: _infer(_bad_raw_bytes),
        S.INVALID_ARGUMENT,
        "incomplete string length indicator for inference input 'INPUT0' for model "
        "'identity_string', expecting 4 bytes but only 3 bytes available",
    ),
    (
        "sequence_id bool",
        lambda: _infer(lambda r: _param(r.parameters, "sequence_id", "bool_param", True)),
        S.INVALID_ARGUMENT,
        "'sequence_id' parameter, expected int64_param or string_param",
    ),
    (
        "sequence_start int",
        lambda: _infer(lambda r: _param(r.parameters, "sequence_start", "int64_param", 1)),
        S.INVALID_ARGUMENT,
        "'sequence_start' parameter, expected bool_param",
    ),
    (
        "negative priority",
        lambda: _infer(lambda r: _param(r.parameters, "priority", "int64_param", -1)),
        S.INVALID_ARGUMENT,
        "invalid value for 'priority'",
    ),
    (
        "timeout uint64",
        lambda: _infer(lambda r: _param(r.parameters, "timeout", "uint64_param", 5)),
        S.INVALID_ARGUMENT,
        "'timeout' parameter, expected int64_param",
    ),
    (
        "empty final response int",
        lambda: _infer(
            lambda r: _param(r.parameters, "triton_enable_empty_final_response", "int64_param", 1)
        ),
        S.INVALID_ARGUMENT,
        "'triton_enable_empty_final_response' parameter, expected bool_param",
    ),
    (
        "reserved parameter",
        lambda: _infer(lambda r: _param(r.parameters, "triton_x", "bool_param", True)),
        S.INVALID_ARGUMENT,
        "reserved for Triton usage",
    ),
    (
        "custom uint64 parameter",
        lambda: _infer(lambda r: _param(r.parameters, "p", "uint64_param", 1)),
        S.INVALID_ARGUMENT,
        "invalid value type for 'p' parameter",
    ),
    (
        "unset parameter",
        lambda: _infer(lambda r: r.parameters["p"]),
        S.INVALID_ARGUMENT,
        "invalid value type for 'p' parameter",
    ),
    (
        "shm offset without region",
        lambda: _infer(_shm_input(shared_memory_offset=("int64_param", 0))),
        S.INVALID_ARGUMENT,
        "without a region",
    ),
    (
        "shm region not a string",
        lambda: _infer(
            _shm_input(
                shared_memory_region=("int64_param", 1), shared_memory_byte_size=("int64_param", 64)
            )
        ),
        S.INVALID_ARGUMENT,
        "'shared_memory_region' parameter for tensor 'INPUT0', expected string_param",
    ),
    (
        "shm size not int64",
        lambda: _infer(
            _shm_input(
                shared_memory_region=("string_param", "r"),
                shared_memory_byte_size=("string_param", "64"),
            )
        ),
        S.INVALID_ARGUMENT,
        "'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param",
    ),
    (
        "shm unknown region",
        lambda: _infer(
            _shm_input(
                shared_memory_region=("string_param", "no_region"),
                shared_memory_byte_size=("int64_param", 64),
            )
        ),
        S.NOT_FOUND,
        "Unable to find shared memory region: 'no_region'",
    ),
    (
        "shm and contents",
        lambda: _infer(
            lambda r: (
                _shm_input(
                    shared_memory_region=("string_param", "r"),
                    shared_memory_byte_size=("int64_param", 64),
                )(r),
                r.inputs[0].contents.fp32_contents.append(1.0),
            )
        ),
        S.INVALID_ARGUMENT,
        "unexpected 'content' provided when using shared memory",
    ),
    (
        "classification not int64",
        lambda: _infer(_output("OUTPUT0", classification=("string_param", "2"))),
        S.INVALID_ARGUMENT,
        "'classification' parameter for output 'OUTPUT0', expected int64_param",
    ),
    (
        "negative classification",
        lambda: _infer(_output("OUTPUT0", classification=("int64_param", -2))),
        S.INVALID_ARGUMENT,
        "'classification' must be >= 0",
    ),
    (
        "FP16 typed contents",
        lambda: _infer(
            lambda r: (
                r.ClearField("raw_input_contents"),
                setattr(r, "model_name", "identity_fp16"),
                r.inputs.pop(),
                setattr(r.inputs[0], "datatype", "FP16"),
                r.inputs[0].contents.fp32_contents.append(1.0),
            )
        ),
        S.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT0'",
    ),
]


@pytest.mark.parametrize("case", BAD_INFER, ids=[c[0] for c in BAD_INFER])
def test_bad_infer(
    stub: Any,
    client: grpcclient.InferenceServerClient,
    case: tuple[str, Callable[[], Any], grpc.StatusCode, str],
) -> None:
    _, build, code, message = case
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(build(), timeout=30)
    assert e.value.code() == code, e.value.details()
    assert message in e.value.details()
    assert_serving(client)


def _repo_param(req: Any, key: str, kind: str, value: Any) -> Any:
    setattr(req.parameters[key], kind, value)
    return req


BAD_RPCS: list[tuple[str, str, Callable[[], Any], grpc.StatusCode, str]] = [
    (
        "metadata unknown model",
        "ModelMetadata",
        lambda: service_pb2.ModelMetadataRequest(name="nope"),
        S.NOT_FOUND,
        "unknown model: 'nope'",
    ),
    (
        "metadata bad version",
        "ModelMetadata",
        lambda: service_pb2.ModelMetadataRequest(name="add_sub", version="-1"),
        S.INVALID_ARGUMENT,
        "version should be an integral value",
    ),
    (
        "config unknown model",
        "ModelConfig",
        lambda: service_pb2.ModelConfigRequest(name="nope"),
        S.NOT_FOUND,
        "unknown model: 'nope'",
    ),
    (
        "config unknown version",
        "ModelConfig",
        lambda: service_pb2.ModelConfigRequest(name="add_sub", version="3"),
        S.NOT_FOUND,
        "version 3",
    ),
    (
        "ready unknown model",
        "ModelReady",
        lambda: service_pb2.ModelReadyRequest(name="nope"),
        S.NOT_FOUND,
        "unknown model: 'nope'",
    ),
    (
        "stats unknown model",
        "ModelStatistics",
        lambda: service_pb2.ModelStatisticsRequest(name="nope"),
        S.INVALID_ARGUMENT,
        "not available",
    ),
    (
        "load with repository name",
        "RepositoryModelLoad",
        lambda: service_pb2.RepositoryModelLoadRequest(repository_name="r1", model_name="add_sub"),
        S.UNIMPLEMENTED,
        "'repository_name' specification is not supported",
    ),
    (
        "unload with repository name",
        "RepositoryModelUnload",
        lambda: service_pb2.RepositoryModelUnloadRequest(
            repository_name="r1", model_name="add_sub"
        ),
        S.UNIMPLEMENTED,
        "'repository_name' specification is not supported",
    ),
    (
        "load config as bytes",
        "RepositoryModelLoad",
        lambda: _repo_param(
            service_pb2.RepositoryModelLoadRequest(model_name="add_sub"),
            "config",
            "bytes_param",
            b"{}",
        ),
        S.INVALID_ARGUMENT,
        "'config' must be a string_param",
    ),
    (
        "load file as string",
        "RepositoryModelLoad",
        lambda: _repo_param(
            service_pb2.RepositoryModelLoadRequest(model_name="add_sub"),
            "file:1/model.onnx",
            "string_param",
            "x",
        ),
        S.INVALID_ARGUMENT,
        "'file:1/model.onnx' must be a bytes_param",
    ),
    (
        "load unknown parameter",
        "RepositoryModelLoad",
        lambda: _repo_param(
            service_pb2.RepositoryModelLoadRequest(model_name="add_sub"),
            "colour",
            "string_param",
            "x",
        ),
        S.INVALID_ARGUMENT,
        "unrecognized load parameter 'colour'",
    ),
    (
        "unload_dependents not bool",
        "RepositoryModelUnload",
        lambda: _repo_param(
            service_pb2.RepositoryModelUnloadRequest(model_name="add_sub"),
            "unload_dependents",
            "string_param",
            "yes",
        ),
        S.INVALID_ARGUMENT,
        "'unload_dependents' must be a bool_param",
    ),
    (
        "load in none mode",
        "RepositoryModelLoad",
        lambda: service_pb2.RepositoryModelLoadRequest(model_name="add_sub"),
        S.UNAVAILABLE,
        "not allowed",
    ),
    (
        "shm status unknown",
        "SystemSharedMemoryStatus",
        lambda: service_pb2.SystemSharedMemoryStatusRequest(name="nope"),
        S.NOT_FOUND,
        "Unable to find system shared memory region: 'nope'",
    ),
    (
        "shm register bad key",
        "SystemSharedMemoryRegister",
        lambda: service_pb2.SystemSharedMemoryRegisterRequest(
            name="x", key="/tl_no_key", byte_size=8
        ),
        S.INTERNAL,
        "Unable to open shared memory region: '/tl_no_key'",
    ),
    (
        "shm register empty name",
        "SystemSharedMemoryRegister",
        lambda: service_pb2.SystemSharedMemoryRegisterRequest(key="/x", byte_size=8),
        S.INVALID_ARGUMENT,
        "must not be empty",
    ),
    (
        "cuda register",
        "CudaSharedMemoryRegister",
        lambda: service_pb2.CudaSharedMemoryRegisterRequest(
            name="c", raw_handle=b"\0" * 64, byte_size=8
        ),
        S.INVALID_ARGUMENT,
        "failed to register shared memory region: invalid args",
    ),
    (
        "cuda register short handle",
        "CudaSharedMemoryRegister",
        lambda: service_pb2.CudaSharedMemoryRegisterRequest(
            name="c", raw_handle=b"\0" * 8, byte_size=8
        ),
        S.INVALID_ARGUMENT,
        "failed to register shared memory region: invalid args",
    ),
    (
        "cuda status unknown",
        "CudaSharedMemoryStatus",
        lambda: service_pb2.CudaSharedMemoryStatusRequest(name="c"),
        S.NOT_FOUND,
        "Unable to find cuda shared memory region: 'c'",
    ),
    (
        "log setting bad type",
        "LogSettings",
        lambda: _log_request("log_info", "string_param", "yes"),
        S.INVALID_ARGUMENT,
        "expect boolean for 'log_info'",
    ),
    (
        "log setting unknown",
        "LogSettings",
        lambda: _log_request("log_colour", "bool_param", True),
        S.INVALID_ARGUMENT,
        "unknown logging setting 'log_colour'",
    ),
    (
        "trace unknown model",
        "TraceSetting",
        lambda: service_pb2.TraceSettingRequest(model_name="nope"),
        S.INVALID_ARGUMENT,
        "Request for unknown model : nope",
    ),
    (
        "trace bad rate",
        "TraceSetting",
        lambda: _trace_request("trace_rate", ["fast"]),
        S.INVALID_ARGUMENT,
        "Unable to parse 'trace_rate'",
    ),
    (
        "trace two rates",
        "TraceSetting",
        lambda: _trace_request("trace_rate", ["1", "2"]),
        S.INVALID_ARGUMENT,
        "expect only 1 value for 'trace_rate'",
    ),
    (
        "trace file",
        "TraceSetting",
        lambda: _trace_request("trace_file", ["/tmp/t"]),
        S.UNIMPLEMENTED,
        "trace file location can not be updated",
    ),
]


def _log_request(key: str, kind: str, value: Any) -> Any:
    req = service_pb2.LogSettingsRequest()
    setattr(req.settings[key], kind, value)
    return req


def _trace_request(key: str, values: list[str]) -> Any:
    req = service_pb2.TraceSettingRequest()
    req.settings[key].value.extend(values)
    return req


@pytest.mark.parametrize("case", BAD_RPCS, ids=[c[0] for c in BAD_RPCS])
def test_bad_rpcs(
    stub: Any,
    client: grpcclient.InferenceServerClient,
    case: tuple[str, str, Callable[[], Any], grpc.StatusCode, str],
) -> None:
    _, rpc, build, code, message = case
    with pytest.raises(grpc.RpcError) as e:
        getattr(stub, rpc)(build(), timeout=30)
    assert e.value.code() == code, e.value.details()
    assert message in e.value.details()
    assert_serving(client)


def test_malformed_message_bytes(
    channel: grpc.Channel, client: grpcclient.InferenceServerClient
) -> None:
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as e:
        call(b"\x0a\xff\xff\xff\xff\x0f", timeout=30)
    assert e.value.code() == S.INVALID_ARGUMENT and "failed to parse" in e.value.details()
    unknown = channel.unary_unary(
        "/inference.GRPCInferenceService/NoSuchRpc",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as e:
        unknown(b"", timeout=30)
    assert e.value.code() == S.UNIMPLEMENTED
    assert_serving(client)


# -- message size limits ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_64mib_tensor_round_trip(server: Any) -> None:
    big = np.random.default_rng(5).random((1, 16 << 20), dtype=np.float32)  # 64 MiB
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("INPUT0", list(big.shape), "FP32")
        inp.set_data_from_numpy(big)
        r = c.infer("identity_variable", [inp], client_timeout=120)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), big)
        assert_serving(c)
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_request_over_the_limit_is_rejected(server: Any) -> None:
    # One ModelInferRequest of INT32_MAX + 10 bytes (a raw_input_contents entry of 2 GiB):
    # the server answers RESOURCE_EXHAUSTED without buffering it, and keeps serving.
    prefix = b"\x0a\x07add_sub" + b"\x3a\x80\x80\x80\x80\x08"
    payload = prefix.ljust(len(prefix) + 2**31, b"\0")
    with grpc.insecure_channel(
        server.grpc_url, options=[("grpc.max_send_message_length", -1)]
    ) as ch:
        call = ch.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as e:
            call(payload, timeout=150)
    del payload
    assert e.value.code() == S.RESOURCE_EXHAUSTED
    assert "larger than max" in e.value.details() and "2147483647" in e.value.details()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    assert_serving(c)
    c.close()


# -- options ---------------------------------------------------------------------------------------
def test_port_in_use_fails_unless_reuse(repo: Path, server: Any) -> None:
    port = server.grpc_url.rsplit(":", 1)[1]
    with pytest.raises(RuntimeError, match="did not start"):
        start_server(repo, "--allow-http=false", "--allow-metrics=false", f"--grpc-port={port}")


def test_reuse_grpc_port(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    flags = ("--allow-http=false", "--allow-metrics=false", "--reuse-grpc-port=true")
    first = start_server(tmp_path, *flags)
    try:
        port = first.grpc_url.rsplit(":", 1)[1]
        second = start_server(tmp_path, *flags, f"--grpc-port={port}")
        try:
            c = grpcclient.InferenceServerClient(second.grpc_url)
            assert c.is_server_ready()
            c.close()
        finally:
            second.stop()
    finally:
        first.stop()


def test_keepalive_flags(repo: Path) -> None:
    s = start_server(
        repo,
        "--allow-http=false",
        "--allow-metrics=false",
        "--grpc-keepalive-time=10000",
        "--grpc-keepalive-timeout=5000",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=5000",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
    )
    try:
        c = grpcclient.InferenceServerClient(
            s.grpc_url,
            keepalive_options=grpcclient.KeepAliveOptions(
                keepalive_time_ms=10000, keepalive_permit_without_calls=True
            ),
        )
        assert_serving(c)
        c.close()
    finally:
        s.stop()


def test_allow_grpc_false(repo: Path) -> None:
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    try:
        assert "GRPCInferenceService" not in s.ports
    finally:
        s.stop()

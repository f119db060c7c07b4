"""ModelStreamInfer with the real tritonclient.grpc (start_stream / async_stream_infer),
tritonclient.grpc.aio (stream_infer) and raw generated stubs: arrival order, ids,
``triton_final_response``, errors as messages (or as the status with ``triton_grpc_error``),
half-close and cancellation.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from conftest import start_server
from repos import add_sub_inputs, build_http_repo
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(60)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo: Path = build_http_repo(tmp_path_factory.mktemp("grpc_stream_repo"))
    s = start_server(repo, "--allow-http=false", "--allow-metrics=false")
    yield s
    s.stop()


@pytest.fixture()
def client(server: Any) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture()
def stub(server: Any) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    ch = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(ch)
    ch.close()


def variable_input(n: int) -> list[grpcclient.InferInput]:
    inp = grpcclient.InferInput("INPUT0", [1, n], "FP32")
    inp.set_data_from_numpy(np.full((1, n), float(n), dtype=np.float32))
    return [inp]


def raw_request(model: str = "add_sub", rid: str = "", **params: bool) -> Any:
    req = service_pb2.ModelInferRequest(model_name=model, id=rid)
    for name, arr in (("INPUT0", A), ("INPUT1", B)):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(arr.tobytes())
    for key, value in params.items():
        req.parameters[key].bool_param = value
    return req


class Collector:
    """The callback of start_stream: results and errors, in the order they arrive."""

    def __init__(self) -> None:
        self.q: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.q.put((result, error))

    def take(self, n: int) -> list[tuple[Any, Any]]:
        return [self.q.get(timeout=30) for _ in range(n)]


def test_stream_order_ids_and_final_flag(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    # big and small requests interleaved, to different models: answers keep arrival order
    sizes = [1 << 20, 1, 300_000, 16, 5, 1 << 18, 2] * 4
    for k, n in enumerate(sizes):
        if n == 16:
            client.async_stream_infer(
                "add_sub", add_sub_inputs(grpcclient, A, B), request_id=str(k)
            )
        else:
            client.async_stream_infer("identity_variable", variable_input(n), request_id=str(k))
    results = got.take(len(sizes))
    client.stop_stream()
    for k, (n, (result, error)) in enumerate(zip(sizes, results)):
        assert error is None, error
        resp = result.get_response()
        assert resp.id == str(k)
        assert resp.parameters["triton_final_response"].bool_param is True
        assert len(resp.raw_output_contents) == len(resp.outputs)
        if n == 16:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        else:
            out = result.as_numpy("OUTPUT0")
            assert out.shape == (1, n) and (out == n).all()


def test_stream_errors_keep_the_stream_open(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, A, B), request_id="ok1")
    client.async_stream_infer("nope", add_sub_inputs(grpcclient, A, B), request_id="bad1")
    client.async_stream_infer(
        "add_sub", add_sub_inputs(grpcclient, A, B[:, :8].copy()), request_id="bad2"
    )
    client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, A, B), request_id="ok2")
    (r1, e1), (r2, e2), (r3, e3), (r4, e4) = got.take(4)
    client.stop_stream()
    assert e1 is None and r1.get_response().id == "ok1"
    assert r2 is None and "unknown model: 'nope'" in e2.message()
    assert r3 is None and "unexpected shape for input 'INPUT1'" in e3.message()
    assert e4 is None and r4.get_response().id == "ok2"


def test_stream_error_message_carries_the_request_id(stub: Any) -> None:
    responses = list(stub.ModelStreamInfer(iter([raw_request("nope", "r7")]), timeout=30))
    assert len(responses) == 1
    assert "unknown model: 'nope'" in responses[0].error_message
    assert responses[0].infer_response.id == "r7"
    assert responses[0].infer_response.model_name == "nope"
    assert not responses[0].infer_response.outputs


def test_stream_triton_grpc_error_ends_the_stream(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got, headers={"triton_grpc_error": "true"})
    client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, A, B), request_id="ok")
    client.async_stream_infer("nope", add_sub_inputs(grpcclient, A, B), request_id="bad")
    (r1, e1), (r2, e2) = got.take(2)
    assert e1 is None and r1.get_response().id == "ok"
    assert r2 is None and e2.status() == "StatusCode.NOT_FOUND"
    assert "unknown model: 'nope'" in e2.message()
    with pytest.raises(InferenceServerException, match="no longer in valid state"):
        client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, A, B))
    client.stop_stream()
    assert client.is_server_ready()


def test_cpp_style_requests(stub: Any) -> None:
    # perf_analyzer / the C++ client send triton_enable_empty_final_response on every
    # request; a non-decoupled model still answers exactly once, with the final flag.
    reqs = [
        raw_request(rid=str(k), triton_enable_empty_final_response=bool(k % 2)) for k in range(6)
    ]
    responses = list(stub.ModelStreamInfer(iter(reqs), timeout=30))
    assert [r.infer_response.id for r in responses] == [str(k) for k in range(6)]
    for r in responses:
        assert r.error_message == ""
        assert r.infer_response.parameters["triton_final_response"].bool_param is True
        assert list(r.infer_response.parameters) == ["triton_final_response"]
        out = np.frombuffer(r.infer_response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(out, (A + B).reshape(-1))


def test_half_close_finishes_outstanding_work(stub: Any) -> None:
    call = stub.ModelStreamInfer(iter([raw_request(rid=str(k)) for k in range(20)]), timeout=30)
    ids = [r.infer_response.id for r in call]
    assert ids == [str(k) for k in range(20)]
    assert call.code() == grpc.StatusCode.OK
    assert list(stub.ModelStreamInfer(iter([]), timeout=30)) == []


def test_cancellation(stub: Any, client: grpcclient.InferenceServerClient) -> None:
    gate: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        yield raw_request(rid="first")
        while (item := gate.get()) is not None:
            yield item

    call = stub.ModelStreamInfer(requests(), timeout=30)
    assert next(call).infer_response.id == "first"
    gate.put(raw_request(rid="second"))
    call.cancel()
    gate.put(None)
    with pytest.raises(grpc.RpcError) as e:
        for _ in call:
            pass
    assert e.value.code() == grpc.StatusCode.CANCELLED
    # the client's own cancel path, with requests in flight
    got = Collector()
    client.start_stream(got)
    for k in range(10):
        client.async_stream_infer("identity_variable", variable_input(1 << 18), request_id=str(k))
    client.stop_stream(cancel_requests=True)
    assert client.is_server_ready()
    r = client.infer("add_sub", add_sub_inputs(grpcclient, A, B))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)


def test_stream_compression_and_many_streams(
    client: grpcclient.InferenceServerClient, server: Any
) -> None:
    got = Collector()
    client.start_stream(got, compression_algorithm="gzip")
    for k in range(5):
        client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, A, B), request_id=str(k))
    assert [r.get_response().id for r, _ in got.take(5)] == [str(k) for k in range(5)]
    client.stop_stream()
    # several concurrent streams, each keeping its own order
    clients = [grpcclient.InferenceServerClient(server.grpc_url) for _ in range(4)]
    collectors = [Collector() for _ in clients]
    for c, col in zip(clients, collectors):
        c.start_stream(col)
    for k in range(25):
        for j, c in enumerate(clients):
            c.async_stream_infer(
                "add_sub", add_sub_inputs(grpcclient, A + j, B), request_id=f"{j}-{k}"
            )
    for j, (c, col) in enumerate(zip(clients, collectors)):
        results = col.take(25)
        assert [r.get_response().id for r, _ in results] == [f"{j}-{k}" for k in range(25)]
        np.testing.assert_array_equal(results[-1][0].as_numpy("OUTPUT0"), A + j + B)
        c.stop_stream()
        c.close()


def test_aio_stream_infer(server: Any) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(server.grpc_url)
        try:

            async def requests() -> Any:
                for k in range(30):
                    inputs = []
                    for name, arr in (("INPUT0", A * k), ("INPUT1", B)):
                        i = aioclient.InferInput(name, [1, 16], "FP32")
                        i.set_data_from_numpy(arr)
                        inputs.append(i)
                    model = "nope" if k == 7 else "add_sub"
                    yield {"model_name": model, "inputs": inputs, "request_id": str(k)}

            seen = []
            async for result, error in c.stream_infer(requests()):
                if error is not None:
                    assert "unknown model" in error.message()
                    seen.append("error")
                    continue
                k = int(result.get_response().id)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * k + B)
                seen.append(str(k))
            assert seen == [str(k) if k != 7 else "error" for k in range(30)]
        finally:
            await c.close()

    asyncio.run(main())


def test_stream_large_tensors(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    n = 4 << 20  # 16 MiB each way, twice
    for k in range(2):
        client.async_stream_infer("identity_variable", variable_input(n), request_id=str(k))
    for k, (result, error) in enumerate(got.take(2)):
        assert error is None and result.get_response().id == str(k)
        assert result.as_numpy("OUTPUT0").shape == (1, n)
    client.stop_stream()

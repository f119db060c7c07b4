"""Client mistakes through a real server: 400 / INVALID_ARGUMENT with a message, never a 500 or
a traceback, and the server keeps serving (the decoders' fuzzing is
tests/frontends/test_fuzz_codecs.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import grpc
import pytest
import tritonclient.grpc as grpcclient
from conftest import Server, start_server
from repos import write_add_sub, write_identity
from tritonclient.grpc import service_pb2

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo: Path = tmp_path_factory.mktemp("client_errors")
    write_add_sub(repo, "add_sub", 8, dims=4)
    write_identity(repo, "identity_string", "BYTES", [-1, -1, -1], 0)
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


def _post(server: Server, path: str, body: bytes) -> tuple[int, str]:
    req = urllib.request.Request(f"http://{server.http_url}/{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _bad(status: int, text: str) -> str:
    assert status == 400, (status, text)
    message = json.loads(text)["error"]
    assert "Traceback" not in message and "internal error" not in message
    return str(message)


def _still_serves(server: Server) -> None:
    ins = [
        {"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
        for n in ("INPUT0", "INPUT1")
    ]
    status, text = _post(server, "v2/models/add_sub/infer", json.dumps({"inputs": ins}).encode())
    assert status == 200, text


@pytest.mark.parametrize(
    "data",
    [[{}, 2, 3, 4], [[1, 2], {"a": 1}], [None, 1, 2, 3], [1e400, 1, 2, 3], [10**400, 1, 2, 3]],
)
def test_json_data_that_is_not_numbers(server: Server, data: list[object]) -> None:
    if 1e400 in data:  # JSON has no infinity: send the literal text
        body = (
            b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], '
            b'"data": [1e400, 1, 2, 3]}, {"name": "INPUT1", "datatype": "FP32", '
            b'"shape": [1, 4], "data": [1, 2, 3, 4]}]}'
        )
    else:
        body = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": data},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
                ]
            }
        ).encode()
    status, text = _post(server, "v2/models/add_sub/infer", body)
    if status != 200:  # 1e400 parses as inf in some JSON readers: accepted or refused, not 500
        _bad(status, text)
    _still_serves(server)


@pytest.mark.parametrize("version", ["%C2%B2", "1" * 5000, "9" * 20, "%D9%A3"])
def test_versions_that_are_not_int64(server: Server, version: str) -> None:
    ins = [
        {"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
        for n in ("INPUT0", "INPUT1")
    ]
    status, text = _post(
        server, f"v2/models/add_sub/versions/{version}/infer", json.dumps({"inputs": ins}).encode()
    )
    if version.isdigit():
        assert "version should be an integral value > 0" in _bad(status, text)
    else:  # Triton's route matcher takes ASCII digits only: no such route
        assert status == 404, text
    c = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(Exception) as exc:
        c.get_model_metadata("add_sub", model_version=unquote(version))
    assert "INVALID_ARGUMENT" in str(exc.value)
    assert "version should be an integral value > 0" in str(exc.value)
    _still_serves(server)


@pytest.mark.parametrize("shape", [[0, 2**62, 2**62], [0] + [2] * 70, [2**40, 0, 2**40]])
def test_huge_dims_on_zero_element_and_bytes_inputs(server: Server, shape: list[int]) -> None:
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": shape,
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    ).encode()
    status, text = _post(server, "v2/models/identity_string/infer", body)
    _bad(status, text)
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": shape, "data": []}]}
    ).encode()
    _bad(*_post(server, "v2/models/identity_string/infer", body))
    request = service_pb2.ModelInferRequest(model_name="identity_string")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=shape)
    request.raw_input_contents.append(b"")
    channel = grpc.insecure_channel(server.grpc_url)
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.ModelInferResponse.FromString,
    )
    with pytest.raises(grpc.RpcError) as rpc:
        call(request, timeout=30)
    assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, rpc.value
    channel.close()
    _still_serves(server)


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xff\xff",
        b"\x0a\x05ab",
        b"\x0a\x02\xc3\x28",  # junk, cut short, bad UTF-8 name
        b"\x0a\x07add_sub\x2a\x04\x0a\x02\xc3\x28",  # an input tensor whose name is bad UTF-8
        b"\x0a\x07add_sub\x2a\x03\x0a\x05a",  # an input tensor cut short
        b"\x0a\x07add_sub\x22\x03\x0a\x09k",  # a parameter entry cut short
    ],
)
def test_undecodable_protobuf(server: Server, payload: bytes) -> None:
    channel = grpc.insecure_channel(server.grpc_url)
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=None,
        response_deserializer=None,
    )
    with pytest.raises(grpc.RpcError) as rpc:
        call(payload, timeout=30)
    assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, rpc.value
    assert "Traceback" not in (rpc.value.details() or "")
    channel.close()
    _still_serves(server)

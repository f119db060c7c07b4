"""Client mistakes through a real server: 400 / INVALID_ARGUMENT with a message, never a 500 or
a traceback, and the server keeps serving (the decoders' fuzzing is
tests/frontends/test_fuzz_codecs.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import grpc
import pytest
import test_triton_messages as T
import tritonclient.grpc as grpcclient
from conftest import Server, start_server
from repos import write_add_sub, write_identity
from support.reference import ReferenceTriton, require_reference
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


# -- Triton 2.51's words (issue 21): recorded from the reference, compared live where installed --
CONTROL = "explicit model load / unload is not allowed if polling is enabled"
NO_ID = "[request id: <id_unknown>] "
_MESSAGE_CASES: dict[str, tuple[Callable[[str, str], tuple[Any, ...]], tuple[Any, ...]]] = {
    # Triton answers with the polling sentence in every mode but explicit, none included
    "load": (
        lambda http, _: T.http_call(http, "POST", "/v2/repository/models/m/load", b"{}"),
        (503, CONTROL),
    ),
    "unload": (
        lambda http, _: T.http_call(http, "POST", "/v2/repository/models/m/unload", b"{}"),
        (503, CONTROL),
    ),
    "load_unknown_model": (
        lambda http, _: T.http_call(http, "POST", "/v2/repository/models/zz/load", b"{}"),
        (503, CONTROL),
    ),
    "grpc_load": (
        lambda _, g: T.rpc(
            g, "RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="m")
        ),
        ("UNAVAILABLE", CONTROL),
    ),
    "grpc_unload": (
        lambda _, g: T.rpc(
            g, "RepositoryModelUnload", service_pb2.RepositoryModelUnloadRequest(model_name="m")
        ),
        ("UNAVAILABLE", CONTROL),
    ),
    # an empty body is a raw input of 0 bytes, with Inference-Header-Content-Length 0 or none
    "raw_empty": (
        lambda http, _: T.infer_raw(http, "s", b""),
        (
            400,
            NO_ID + "input byte size mismatch for input 'raw_input' for model 's'. "
            "Expected 16, got 0",
        ),
    ),
    "empty_without_header": (
        lambda http, _: T.http_call(http, "POST", "/v2/models/s/infer", b""),
        (
            400,
            NO_ID + "input byte size mismatch for input 'raw_input' for model 's'. "
            "Expected 16, got 0",
        ),
    ),
    "raw_empty_variable": (lambda http, _: T.infer_raw(http, "sv", b""), (200,)),
    "raw_empty_bytes": (lambda http, _: T.infer_raw(http, "sb", b""), (200,)),
    "raw_empty_two_inputs": (
        lambda http, _: T.infer_raw(http, "nb", b""),
        (
            400,
            NO_ID + "Raw request must only have 1 input (found 1) to be deduced but got 2 "
            "inputs in 'nb' model configuration",
        ),
    ),
}
_NONE_MODE = ("--model-control-mode=none",)


@pytest.fixture(scope="module")
def messages_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return T.write_repo(tmp_path_factory.mktemp("client_errors_messages"))


@pytest.fixture(scope="module")
def none_mode(messages_repo: Path) -> Iterator[Server]:
    s = start_server(messages_repo, *_NONE_MODE, "--allow-metrics=false")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def none_mode_triton(
    messages_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceTriton]:
    t = ReferenceTriton(
        require_reference(),
        messages_repo,
        *_NONE_MODE,
        log=tmp_path_factory.mktemp("triton_log") / "triton.log",
    )
    yield t
    t.stop()


@pytest.mark.parametrize("case", list(_MESSAGE_CASES))
def test_messages_as_triton(none_mode: Server, case: str) -> None:
    send, expected = _MESSAGE_CASES[case]
    assert send(none_mode.http_url, none_mode.grpc_url) == expected


@pytest.mark.parametrize("case", list(_MESSAGE_CASES))
def test_messages_as_the_reference_answers(none_mode_triton: ReferenceTriton, case: str) -> None:
    send, expected = _MESSAGE_CASES[case]
    assert send(none_mode_triton.http_url, none_mode_triton.grpc_url) == expected

"""Python-backend answers as real Triton 2.51 gives them, for the model.py files of
tests/compare/python_models/ (the ones tests/compare/compare_python.py runs under both servers).

Every expected value here is what tritonserver 2.51 answered in that comparison; the tests run
tritonlite only, with the real tritonclient over HTTP and gRPC.
"""

from __future__ import annotations

import json
import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

MODELS = Path(__file__).resolve().parents[1] / "compare" / "python_models"
PROTOCOLS = ("http", "grpc")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("python_parity") / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    loads = [
        f"--load-model={d.name}"
        for d in sorted(repo.iterdir())
        if d.is_dir() and not d.name.startswith("pyc_bad_")
    ]
    srv = start_server(repo, "--model-control-mode=explicit", *loads)
    yield srv
    srv.stop()


def _client(proto: str, server: Server) -> Any:
    if proto == "http":
        return httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    return grpcclient.InferenceServerClient(server.grpc_url)


def _infer(
    proto: str,
    server: Server,
    model: str,
    inputs: list[tuple[str, Any, str]],
    outputs: list[str] | None = None,
    **kw: Any,
) -> Any:
    mod = httpclient if proto == "http" else grpcclient
    ins = []
    for name, arr, dtype in inputs:
        i = mod.InferInput(name, list(arr.shape), dtype)
        i.set_data_from_numpy(arr)
        ins.append(i)
    outs = None if outputs is None else [mod.InferRequestedOutput(o) for o in outputs]
    c = _client(proto, server)
    try:
        return c.infer(model, ins, outputs=outs, **kw)
    finally:
        c.close()


def _mode(m: int) -> list[tuple[str, Any, str]]:
    return [("MODE", np.array([m], dtype=np.int32), "INT32")]


def _failure(
    proto: str, server: Server, model: str, inputs: list[tuple[str, Any, str]]
) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        _infer(proto, server, model, inputs)
    return str(info.value.status()), info.value.message()


# -- pb_utils.Tensor -------------------------------------------------------------------------------
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_numpy_str_array_is_refused_by_tensor(proto: str, server: Server) -> None:
    # Triton's Tensor() refuses np.str_ ("<U") arrays; the model turns the exception into an
    # error response with the exception's type and text.
    status, message = _failure(proto, server, "pyc_outputs", _mode(1))
    assert status == ("500" if proto == "http" else "StatusCode.INTERNAL")
    assert message == "TritonModelException: NumPy dtype is not supported."


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_numpy_bytes_and_object_arrays_are_bytes_outputs(proto: str, server: Server) -> None:
    r = _infer(proto, server, "pyc_outputs", _mode(8))
    assert r.as_numpy("TXT").tolist() == [b"x", b"yz"]
    r = _infer(
        proto,
        server,
        "pyc_bytes",
        [("IN", np.array([[b"hello", b"", b"\x00\xffbin"]], dtype=object), "BYTES")],
    )
    assert r.as_numpy("SAME").tolist() == [[b"hello", b"", b"\x00\xffbin"]]
    assert r.as_numpy("AS_NP_BYTES").tolist() == [[b"hello!", b"!", b"\x00\xffbin!"]]
    assert r.as_numpy("AS_STR").tolist() == [[b"HELLO", b"", "\x00\ufffdBIN".encode()]]
    assert r.as_numpy("KINDS").tolist() == [[b"object bytes (1, 3)"]]


# -- errors from execute ---------------------------------------------------------------------------
@pytest.mark.parametrize("proto", PROTOCOLS)
@pytest.mark.parametrize(
    ("mode", "http_status", "grpc_status", "message"),
    [
        (1, "500", "StatusCode.INTERNAL", "plain error message"),
        (2, "400", "StatusCode.INVALID_ARGUMENT", "bad argument here"),
        (3, "503", "StatusCode.UNAVAILABLE", "come back later"),
        (4, "404", "StatusCode.NOT_FOUND", "no such thing"),
        (
            6,
            "500",
            "StatusCode.INTERNAL",
            "Failed to process the request(s) for model 'pyc_errors_0', message: Number of "
            "InferenceResponse objects do not match the number of InferenceRequest objects. "
            "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n",
        ),
        (
            9,
            "500",
            "StatusCode.INTERNAL",
            "Failed to process the request(s) for model 'pyc_errors_0', message: Expected a list in "
            "the execute return, found type '<class 'str'>'.",
        ),
    ],
)
def test_error_responses_codes_and_texts(
    proto: str, server: Server, mode: int, http_status: str, grpc_status: str, message: str
) -> None:
    status, text = _failure(proto, server, "pyc_errors", _mode(mode))
    assert status == (http_status if proto == "http" else grpc_status)
    assert text == message


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_exception_from_execute_names_the_instance_and_the_frame(
    proto: str, server: Server
) -> None:
    status, text = _failure(proto, server, "pyc_errors", _mode(5))
    assert status == ("500" if proto == "http" else "StatusCode.INTERNAL")
    assert text.startswith(
        "Failed to process the request(s) for model 'pyc_errors_0', message: "
        "ValueError: execute raised this\n\nAt:\n  "
    )
    assert text.endswith("pyc_errors/1/model.py(22): execute\n")
    # the instance keeps serving
    assert _infer(proto, server, "pyc_errors", _mode(0)).as_numpy("OUT").tolist() == [0]


# -- initialize(args) and pb_utils helpers ---------------------------------------------------------
def test_initialize_args_and_helpers(server: Server) -> None:
    half = [("IN", np.array([1.5, -2, 3.25], dtype=np.float16), "FP16")]
    r = _infer("http", server, "pyc_introspect", half, request_id="r-17")
    args = json.loads(r.as_numpy("ARGS")[0])
    assert {k: v for k, v in args.items() if k not in ("model_config", "model_repository")} == {
        "model_instance_kind": "CPU",
        "model_instance_name": "pyc_introspect_0_0",
        "model_instance_device_id": "0",
        "model_version": "1",
        "model_name": "pyc_introspect",
    }
    assert args["model_repository"].endswith("/pyc_introspect")
    assert json.loads(args["model_config"])["parameters"] == {"greeting": {"string_value": "hello"}}
    utils = json.loads(r.as_numpy("UTILS")[0])
    assert utils["error_codes"] == {
        "UNKNOWN": 0,
        "INTERNAL": 1,
        "NOT_FOUND": 2,
        "INVALID_ARG": 3,
        "UNAVAILABLE": 4,
        "UNSUPPORTED": 5,
        "ALREADY_EXISTS": 6,
        "CANCELLED": 7,
    }
    assert utils["output_config_missing"] is None and utils["input_config_missing"] is None
    assert utils["half_np"] == "<f2" and utils["string_np"] == "<class 'numpy.object_'>"
    assert utils["to_triton"]["bytes_"] == 13 and utils["to_triton"]["float16"] == 10
    assert r.as_numpy("HALF").tolist() == [3.0, -4.0, 6.5]


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_request_parameters_and_requested_outputs(proto: str, server: Server) -> None:
    half = [("IN", np.array([1, 2], dtype=np.float16), "FP16")]
    r = _infer(
        proto,
        server,
        "pyc_introspect",
        half,
        ["REQUEST", "HALF"],
        request_id="r-18",
        parameters={"s": "text", "i": 7, "b": True, "neg": -3},
    )
    info = json.loads(r.as_numpy("REQUEST")[0])
    assert info["parameters"] == {"s": "text", "i": 7, "b": True, "neg": -3}
    assert info["requested_output_names"] == ["HALF", "REQUEST"]
    assert r.as_numpy("ARGS") is None


# -- auto_complete_config --------------------------------------------------------------------------
def test_auto_complete_config_result(server: Server) -> None:
    c = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    cfg = c.get_model_config("pyc_autocomplete")
    repeat = c.get_model_config("pyc_repeat")
    c.close()
    assert cfg["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"], i["optional"]) for i in cfg["input"]] == [
        ("IN", "TYPE_FP32", [3], False),
        ("OPT", "TYPE_INT32", [-1], True),
    ]
    assert [o["name"] for o in cfg["output"]] == ["OUT", "LABEL"]
    assert "dynamic_batching" in cfg
    assert repeat["model_transaction_policy"] == {"decoupled": True}


# -- decoupled -------------------------------------------------------------------------------------
def test_decoupled_model_refused_by_infer(server: Server) -> None:
    n = [("N", np.array([1], dtype=np.int32), "INT32")]
    assert _failure("http", server, "pyc_repeat", n) == (
        "501",
        "HTTP end point doesn't support models with decoupled transaction policy",
    )
    assert _failure("grpc", server, "pyc_repeat", n) == (
        "StatusCode.UNIMPLEMENTED",
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    )


def test_decoupled_error_response_reaches_the_stream_callback(server: Server) -> None:
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        i = grpcclient.InferInput("N", [1], "INT32")
        i.set_data_from_numpy(np.array([-1], dtype=np.int32))
        c.async_stream_infer("pyc_repeat", [i], enable_empty_final_response=True)
        result, error = got.get(timeout=30)
    finally:
        c.stop_stream()
        c.close()
    assert result is None and error.message() == "negative N"


# -- BLS -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_bls_missing_model(proto: str, server: Server) -> None:
    x = ("X", np.array([1, 2, 3], dtype=np.float32), "FP32")
    target = ("TARGET", np.array([b"missing_model"], dtype=object), "BYTES")
    info = json.loads(_infer(proto, server, "pyc_bls", [x, target]).as_numpy("INFO")[0])
    assert info == {
        "error": "Model missing_model - Error when running inference: Failed for "
        "execute the inference request. Model 'missing_model' is not ready.",
        "code": 1,
        "outputs": 0,
    }

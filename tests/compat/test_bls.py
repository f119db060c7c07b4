"""BLS (Business Logic Scripting): real ``model.py`` files calling other models through
``pb_utils.InferenceRequest.exec`` / ``async_exec``, behind a real server, driven by tritonclient.

Each driver model runs the case the client names (input ``CASE``) and answers with a JSON
report of what the BLS calls returned (output ``REPORT``); the tests assert on that report.
The expected error texts are the ones Triton 2.51's python backend gives for the same calls
(validation reasons are the core's own, as for client requests).
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import gevent
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import write_add_sub, write_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduling"))
from test_sequence import write_acc_onnx  # noqa: E402

pytestmark = pytest.mark.timeout(120)

DRIVER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "CASE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "REPORT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

COMMON = """
import asyncio
import json
import numpy as np
import triton_python_backend_utils as pb_utils

def f32(*values):
    return np.array([values], dtype=np.float32)

def add_sub_inputs(a=(1, 2, 3, 4), b=(1, 1, 1, 1)):
    return [pb_utils.Tensor("INPUT0", f32(*a)), pb_utils.Tensor("INPUT1", f32(*b))]

def request(model, inputs, outputs=(), **kw):
    return pb_utils.InferenceRequest(model_name=model, inputs=inputs,
                                     requested_output_names=list(outputs), **kw)

def describe(resp):
    d = {"type": type(resp).__name__, "error": None, "outputs": {}}
    if resp.has_error():
        d["error"] = resp.error().message()
        d["code"] = resp.error().code().name
    for t in resp.output_tensors():
        arr = t.as_numpy()
        data = ([x.decode("latin-1") for x in arr.flat] if arr.dtype == object
                else arr.tolist())
        d["outputs"][t.name()] = {"shape": t.shape(), "dtype": str(arr.dtype), "data": data}
    return d

def attempt(fn):
    try:
        r = fn()
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e)}
    return describe(r) if isinstance(r, pb_utils.InferenceResponse) else {"value": repr(r)}

def answer(requests, run):
    out = []
    for r in requests:
        case = pb_utils.get_input_tensor_by_name(r, "CASE").as_numpy()[0].decode()
        report = run(case)
        out.append(pb_utils.InferenceResponse([pb_utils.Tensor(
            "REPORT", np.array([json.dumps(report)], dtype=object))]))
    return out
"""

SYNC_DRIVER = (
    COMMON
    + """

def onnx_all_outputs():
    return describe(request("add_sub", add_sub_inputs()).exec())

def onnx_one_output():
    return describe(request("add_sub", add_sub_inputs(), ["OUTPUT1"]).exec())

def python_target():
    data = np.array([b"ab\\x00c", "h\\u00e9".encode(), b""], dtype=object)
    resp = request("echo", [pb_utils.Tensor("IN", data)], ["OUT", "INFO"],
                   parameters={"k": "v", "n": 3, "t": True, "f": 0.5}, request_id="rid-7",
                   correlation_id=42, timeout=123456).exec()
    return describe(resp)

def python_target_json_parameters():
    resp = request("echo", [pb_utils.Tensor("IN", np.array([b"x"], dtype=object))], ["INFO"],
                   parameters='{"from": "json"}', correlation_id="cid-str").exec()
    return describe(resp)

def str_tensor():
    return describe(request("echo", [pb_utils.Tensor("IN", np.array(["x", "yz"], dtype=object))],
                            ["OUT"]).exec())

def onnx_strings():
    data = np.array([[b"one", b"two\\x00", b"", "\\u00fc".encode()]], dtype=object)
    return describe(request("identity_string", [pb_utils.Tensor("INPUT0", data)]).exec())

def unknown_model():
    return describe(request("nope", add_sub_inputs(), ["OUTPUT0"]).exec())

def unknown_version():
    return describe(request("add_sub", add_sub_inputs(), ["OUTPUT0"], model_version=9).exec())

def bad_dtype():
    inputs = [pb_utils.Tensor("INPUT0", np.ones((1, 4), np.int32)), add_sub_inputs()[1]]
    return describe(request("add_sub", inputs, ["OUTPUT0"]).exec())

def bad_shape():
    inputs = [pb_utils.Tensor("INPUT0", f32(1, 2, 3)), add_sub_inputs()[1]]
    return describe(request("add_sub", inputs).exec())

def missing_input():
    return describe(request("add_sub", add_sub_inputs()[:1]).exec())

def unknown_output():
    return describe(request("add_sub", add_sub_inputs(), ["NOPE"]).exec())

def target_raises():
    return describe(request("echo", [pb_utils.Tensor("IN", np.array([b"x"], dtype=object))],
                            parameters={"raise": "yes"}).exec())

def target_error_response():
    return describe(request("echo", [pb_utils.Tensor("IN", np.array([b"x"], dtype=object))],
                            parameters={"error": "no good"}).exec())

def constructor_errors():
    t = add_sub_inputs()
    return {
        "no_model": attempt(lambda: pb_utils.InferenceRequest(inputs=t, requested_output_names=[])),
        "cid_float": attempt(lambda: request("add_sub", t, correlation_id=1.5)),
        "cid_negative": attempt(lambda: request("add_sub", t, correlation_id=-1)),
        "params_list": attempt(lambda: request("add_sub", t, parameters=[1])),
        "params_bad_json": attempt(lambda: request("add_sub", t, parameters="{oops")),
        "params_value": attempt(lambda: request("add_sub", t, parameters={"a": [1]})),
        "inputs_arrays": attempt(lambda: request("add_sub", [np.zeros(4)])),
        "outputs_str": attempt(lambda: pb_utils.InferenceRequest(
            model_name="add_sub", inputs=t, requested_output_names="OUTPUT0")),
        "version_none": attempt(lambda: request("add_sub", t, model_version=None)),
        "timeout_negative": attempt(lambda: request("add_sub", t, timeout=-1)),
        "defaults": attempt(lambda: (lambda r: [r.request_id(), r.correlation_id(), r.flags(),
            r.timeout(), r.parameters(), sorted(r.requested_output_names())])(
                request("add_sub", t, ["B", "A", "B"]))),
        "async_without_loop": attempt(lambda: request("add_sub", t).async_exec()),
    }

def dlpack_and_reuse():
    resp = request("add_sub", add_sub_inputs()).exec()
    out0 = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0")
    via_dlpack = np.from_dlpack(out0)
    again = pb_utils.Tensor.from_dlpack("X", out0.to_dlpack())
    arr = out0.as_numpy()
    arr[0, 0] = 100.0  # the model owns what it got: writable, and DLPack views share it
    # the response tensor goes straight back into another BLS request
    second = request("add_sub", [pb_utils.Tensor("INPUT0", arr), out0.__class__(
        "INPUT1", pb_utils.get_output_tensor_by_name(resp, "OUTPUT1").as_numpy())]).exec()
    return {"dlpack": via_dlpack.tolist(), "from_dlpack": again.as_numpy().tolist(),
            "second": describe(second)}

def sequence():
    start, end = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, \\
        pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    got = []
    for cid in (77, "seq-s"):
        for value, flags in ((1.0, start), (2.0, 0), (3.0, end)):
            r = request("acc_onnx", [pb_utils.Tensor("INPUT", np.array([[value]], np.float32))],
                        ["OUTPUT"], correlation_id=cid, flags=flags).exec()
            got.append(describe(r))
    late = request("acc_onnx", [pb_utils.Tensor("INPUT", np.array([[1.0]], np.float32))],
                   ["OUTPUT"], correlation_id=78).exec()
    return {"steps": got, "without_start": describe(late)}

def many():
    return [describe(request("add_sub", add_sub_inputs(a=(i, i, i, i)), ["OUTPUT0"]).exec())
            for i in range(5)]

def decoupled():
    start = lambda n, **kw: request("repeat", [pb_utils.Tensor("N", np.array([n], np.int32))],
                                    **kw)
    it = start(3).exec(decoupled=True)
    return {"iterator": type(it).__name__, "items": [describe(r) for r in it],
            "zero": [describe(r) for r in start(0).exec(decoupled=True)],
            "not_decoupled_call": describe(start(2).exec()),
            "plain_model": [describe(r) for r in
                            request("add_sub", add_sub_inputs()).exec(decoupled=True)],
            "unknown": [describe(r) for r in request("nope", []).exec(decoupled=True)]}

def management():
    return {"ready": attempt(lambda: pb_utils.is_model_ready("add_sub")),
            "ready_v1": attempt(lambda: pb_utils.is_model_ready("add_sub", "1")),
            "ready_v7": attempt(lambda: pb_utils.is_model_ready("add_sub", "7")),
            "ready_unknown": attempt(lambda: pb_utils.is_model_ready("nope")),
            "ready_bad_version": attempt(lambda: pb_utils.is_model_ready("add_sub", "x")),
            "load": attempt(lambda: pb_utils.load_model("add_sub")),
            "unload": attempt(lambda: pb_utils.unload_model("add_sub"))}

def cached():
    return [describe(request("add_sub_cached", add_sub_inputs(a=(7, 7, 7, 7))).exec())
            for _ in range(2)]

def self_call():
    import os
    repo = os.path.join(pb_utils.get_model_dir(), "..", "..")
    open(os.path.join(repo, "self_call.started"), "w").close()
    report = describe(request("bls", [pb_utils.Tensor("CASE", np.array([b"many"], dtype=object))],
                              ["REPORT"]).exec())
    with open(os.path.join(repo, "self_call.finished"), "w") as f:
        json.dump(report, f)
    return report


class TritonPythonModel:
    def execute(self, requests):
        return answer(requests, lambda case: globals()[case]())
"""
)

ASYNC_DRIVER = (
    COMMON
    + """

class TritonPythonModel:
    async def execute(self, requests):
        reports = {}
        for r in requests:
            case = pb_utils.get_input_tensor_by_name(r, "CASE").as_numpy()[0].decode()
            reports[case] = await getattr(self, case)()
        return answer(requests, lambda case: reports[case])

    async def gather(self):
        awaits = [request("add_sub", add_sub_inputs(a=(i, 0, 0, 0)), ["OUTPUT0"]).async_exec()
                  for i in range(4)]
        kind = type(awaits[0]).__name__
        done = await asyncio.gather(*awaits)
        return {"awaitable": kind, "responses": [describe(x) for x in done]}

    async def errors(self):
        return {"unknown": describe(await request("nope", add_sub_inputs()).async_exec()),
                "bad_shape": describe(await request(
                    "add_sub", [pb_utils.Tensor("INPUT0", f32(1)), add_sub_inputs()[1]]
                ).async_exec()),
                "sync_in_async": describe(request("nope", add_sub_inputs()).exec())}

    async def python_target(self):
        return describe(await request(
            "echo", [pb_utils.Tensor("IN", np.array([b"hi"], dtype=object))], ["INFO"],
            parameters={"async": True}).async_exec())

    async def timeout(self):
        import os
        import time
        marker = os.path.join(pb_utils.get_model_dir(), "..", "..", "slow.running")
        x = [pb_utils.Tensor("IN", np.array([[1.0]], np.float32))]
        first = asyncio.ensure_future(request("slow", x, timeout=0).async_exec())
        deadline = time.monotonic() + 10
        while not os.path.exists(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        # slow is busy: this one waits in its queue longer than its timeout allows
        second = await request("slow", x, timeout=50000).async_exec()
        return {"first": describe(await first), "second": describe(second)}

    async def decoupled(self):
        it = await request("repeat", [pb_utils.Tensor("N", np.array([2], np.int32))]
                           ).async_exec(decoupled=True)
        return {"iterator": type(it).__name__, "items": [describe(x) for x in it]}
"""
)

ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            params = json.loads(r.parameters())
            if "raise" in params:
                raise ValueError("echo was asked to fail")
            if "error" in params:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    params["error"], pb_utils.TritonError.INVALID_ARG)))
                continue
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            x[...] = x  # inputs are writable, as in Triton
            info = {"parameters": r.parameters(), "correlation_id": r.correlation_id(),
                    "flags": r.flags(), "request_id": r.request_id(), "timeout": r.timeout(),
                    "requested": sorted(r.requested_output_names()), "dtype": str(x.dtype)}
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x),
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=object))]))
        return out
"""

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "I" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

REPEAT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("I", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


SLOW_CONFIG = """
backend: "python"
max_batch_size: 1
dynamic_batching { default_queue_policy { allow_timeout_override: true } }
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

SLOW = """
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        marker = os.path.join(pb_utils.get_model_dir(), "..", "..", "slow.running")
        open(marker, "w").close()
        time.sleep(0.4)
        os.remove(marker)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""


def _python_model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


def build_repo(repo: Path) -> Path:
    write_add_sub(repo, "add_sub", 8, dims=4, extra_config="dynamic_batching { }\n")
    write_identity(repo, "identity_string", "BYTES", [4], 8)
    write_add_sub(
        repo, "add_sub_cached", 8, dims=4, extra_config="response_cache { enable: true }\n"
    )
    write_acc_onnx(repo, "acc_onnx")
    _python_model(repo, "echo", ECHO_CONFIG, ECHO)
    _python_model(repo, "repeat", REPEAT_CONFIG, REPEAT)
    _python_model(repo, "slow", SLOW_CONFIG, SLOW)
    _python_model(repo, "bls", DRIVER_CONFIG, SYNC_DRIVER)
    _python_model(repo, "bls_async", DRIVER_CONFIG, ASYNC_DRIVER)
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repo(tmp_path_factory.mktemp("bls_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Any:
    s = start_server(repo, "--allow-metrics=false", "--cache-config", "local,size=1048576")
    yield s
    s.stop()


def run_case(server: Server, case: str, model: str = "bls") -> Any:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    inp = httpclient.InferInput("CASE", [1], "BYTES")
    inp.set_data_from_numpy(np.array([case.encode()], dtype=object))
    result = client.infer(model, [inp])
    return json.loads(result.as_numpy("REPORT")[0])


def ok(report: dict[str, Any]) -> dict[str, Any]:
    assert report["error"] is None, report
    return report["outputs"]  # type: ignore[no-any-return]


NOT_READY = (
    "Model {0} - Error when running inference: Failed for execute the inference "
    "request. Model '{0}' is not ready."
)
PREFIX = "Model add_sub - Error when running inference: "
NO_ID = "[request id: <id_unknown>] "  # (Triton's core prefixes a request's validation errors)


# -- requests and responses -----------------------------------------------------------------------


def test_bls_to_onnx_returns_every_output_when_none_are_requested(server: Server) -> None:
    outs = ok(run_case(server, "onnx_all_outputs"))
    assert outs == {
        "OUTPUT0": {"shape": [1, 4], "dtype": "float32", "data": [[2.0, 3.0, 4.0, 5.0]]},
        "OUTPUT1": {"shape": [1, 4], "dtype": "float32", "data": [[0.0, 1.0, 2.0, 3.0]]},
    }


def test_bls_requested_outputs_only(server: Server) -> None:
    assert list(ok(run_case(server, "onnx_one_output"))) == ["OUTPUT1"]


def test_bls_to_python_model_passes_bytes_parameters_and_request_fields(server: Server) -> None:
    outs = ok(run_case(server, "python_target"))
    assert outs["OUT"] == {
        "shape": [3],
        "dtype": "object",
        "data": ["ab\x00c", "h\u00e9".encode().decode("latin-1"), ""],
    }
    info = json.loads(outs["INFO"]["data"][0])
    # the target sees the parameters as Triton hands them on: compact JSON
    assert json.loads(info["parameters"]) == {"k": "v", "n": 3, "t": True, "f": 0.5}
    assert info["parameters"] == '{"k":"v","n":3,"t":true,"f":0.5}'
    assert info["correlation_id"] == 42
    assert info["request_id"] == "rid-7"
    assert info["timeout"] == 123456
    assert info["requested"] == ["INFO", "OUT"]
    assert info["dtype"] == "object"


def test_bls_parameters_as_json_string_and_string_correlation_id(server: Server) -> None:
    info = json.loads(ok(run_case(server, "python_target_json_parameters"))["INFO"]["data"][0])
    assert json.loads(info["parameters"]) == {"from": "json"}
    assert info["correlation_id"] == "cid-str"
    assert info["requested"] == ["INFO"]


def test_bls_str_object_tensors_travel_as_bytes(server: Server) -> None:
    assert ok(run_case(server, "str_tensor"))["OUT"]["data"] == ["x", "yz"]


def test_bls_bytes_to_onnx(server: Server) -> None:
    outs = ok(run_case(server, "onnx_strings"))
    assert outs["OUTPUT0"]["data"] == ["one", "two\x00", "", "\u00fc".encode().decode("latin-1")]
    assert outs["OUTPUT0"]["shape"] == [1, 4]


def test_bls_output_tensors_support_dlpack_writes_and_reuse(server: Server) -> None:
    report = run_case(server, "dlpack_and_reuse")
    assert report["dlpack"] == [[100.0, 3.0, 4.0, 5.0]]
    assert report["from_dlpack"] == [[100.0, 3.0, 4.0, 5.0]]
    # (100 + 0, 3 + 1, 4 + 2, 5 + 3): the written value and the other output went back in
    assert ok(report["second"])["OUTPUT0"]["data"] == [[100.0, 4.0, 6.0, 8.0]]


def test_bls_sequence_reaches_the_sequence_batcher(server: Server) -> None:
    report = run_case(server, "sequence")
    sums = [ok(step)["OUTPUT"]["data"][0][0] for step in report["steps"]]
    assert sums == [1.0, 3.0, 6.0, 1.0, 3.0, 6.0]
    assert report["without_start"]["error"] == (
        "Model acc_onnx - Error when running inference: inference request for sequence 78 to "
        "model 'acc_onnx' must specify the START flag on the first request of the sequence"
    )


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown_model", NOT_READY.format("nope")),
        ("unknown_version", NOT_READY.format("add_sub")),
        (
            "bad_dtype",
            PREFIX + NO_ID + "inference input 'INPUT0' data-type is 'INT32', but model "
            "'add_sub' expects 'FP32'",
        ),
        (
            "bad_shape",
            PREFIX + NO_ID + "unexpected shape for input 'INPUT0' for model 'add_sub'. "
            "Expected [-1,4], got [1,3]",
        ),
        (
            "missing_input",
            PREFIX + NO_ID + "expected 2 inputs but got 1 inputs for model 'add_sub'",
        ),
        ("unknown_output", PREFIX + "unexpected inference output 'NOPE' for model 'add_sub'"),
        ("target_error_response", "no good"),
    ],
)
def test_bls_errors_come_back_in_the_response(server: Server, case: str, message: str) -> None:
    report = run_case(server, case)
    assert report["error"] is not None and report["error"].startswith(message), report
    assert report["code"] == "INTERNAL"  # Triton's python backend reports every BLS error so
    assert report["outputs"] == {}


def test_bls_target_exception_message(server: Server) -> None:
    report = run_case(server, "target_raises")
    assert report["error"].startswith(
        "Failed to process the request(s) for model 'echo_0', message: ValueError: echo was "
        "asked to fail"
    ), report


def test_bls_constructor_validation(server: Server) -> None:
    r = run_case(server, "constructor_errors")
    for key in ("no_model", "inputs_arrays", "outputs_str", "version_none", "timeout_negative"):
        assert r[key]["raised"] == "TypeError", (key, r[key])
    assert r["cid_float"] == {
        "raised": "TritonModelException",
        "message": "Correlation ID must be integer or string",
    }
    assert r["cid_negative"]["raised"] == "TritonModelException"
    assert r["params_list"] == {
        "raised": "TritonModelException",
        "message": "Expect dict, got <class 'list'>",
    }
    assert r["params_bad_json"]["raised"] == "TritonModelException"
    assert r["params_value"]["message"].startswith(
        "Expect parameters values to have type bool/int/float/str"
    )
    assert r["defaults"]["value"] == repr(["", 0, 0, 0, "{}", ["A", "B"]])
    assert r["async_without_loop"] == {"raised": "RuntimeError", "message": "no running event loop"}


def test_bad_bls_calls_leave_the_server_serving(server: Server) -> None:
    for case in ("unknown_model", "bad_shape", "target_raises", "constructor_errors"):
        run_case(server, case)
    assert ok(run_case(server, "onnx_one_output"))


# -- statistics -----------------------------------------------------------------------------------


def test_composing_model_statistics_count_bls_requests(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def counts() -> tuple[int, int]:
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]
        return stats["inference_count"], stats["inference_stats"]["success"]["count"]

    before = counts()
    assert len(run_case(server, "many")) == 5
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (5, 5)
    # a refused BLS request is not the model's: validation failures stay out, as for clients
    run_case(server, "bad_shape")
    assert counts() == after


def test_bls_goes_through_the_response_cache(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def counts() -> tuple[int, int]:
        stats = client.get_inference_statistics("add_sub_cached")["model_stats"][0]
        return (
            stats["inference_stats"]["cache_hit"]["count"],
            stats["inference_stats"]["cache_miss"]["count"],
        )

    before = counts()
    first, second = run_case(server, "cached")
    assert ok(first) == ok(second)
    assert ok(second)["OUTPUT0"]["data"] == [[8.0, 8.0, 8.0, 8.0]]
    hits, misses = counts()
    assert (hits - before[0], misses - before[1]) == (1, 1)  # the first ran, the second hit


# -- async execute --------------------------------------------------------------------------------


def test_async_exec_gathers_concurrent_requests(server: Server) -> None:
    report = run_case(server, "gather", "bls_async")
    assert report["awaitable"] == "Future"
    assert [ok(r)["OUTPUT0"]["data"][0][0] for r in report["responses"]] == [1.0, 2.0, 3.0, 4.0]


def test_async_exec_errors_do_not_raise(server: Server) -> None:
    report = run_case(server, "errors", "bls_async")
    assert report["unknown"]["error"] == NOT_READY.format("nope")
    assert report["bad_shape"]["error"].startswith(PREFIX + NO_ID + "unexpected shape")
    assert report["sync_in_async"]["error"] == NOT_READY.format("nope")


def test_async_exec_to_python_model(server: Server) -> None:
    info = json.loads(ok(run_case(server, "python_target", "bls_async"))["INFO"]["data"][0])
    assert info["parameters"] == '{"async":true}'


def test_bls_timeout_is_the_request_timeout_a_client_sets(server: Server, repo: Path) -> None:
    """The same contention, once from a client and once by BLS: the same outcome (Triton 2.51
    lets both finish: the queued request is not dropped while it waits)."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2, network_timeout=60)

    def inputs() -> list[Any]:
        x = httpclient.InferInput("IN", [1, 1], "FP32")
        x.set_data_from_numpy(np.ones((1, 1), np.float32))
        return [x]

    first = client.async_infer("slow", inputs())
    deadline = time.monotonic() + 10
    while not (repo / "slow.running").exists():
        assert time.monotonic() < deadline, "slow never started"
        # the request is sent by a greenlet of the client's: wait in gevent's sleep, so that
        # it runs (async_infer yields to it for only 10 ms, too little on a loaded machine)
        gevent.sleep(0.005)
    try:
        direct: dict[str, Any] = {
            "error": None,
            "outputs": client.infer("slow", inputs(), timeout=50000).as_numpy("OUT").tolist(),
        }
    except Exception as exc:
        direct = {"error": str(exc)}
    first.get_result()
    report = run_case(server, "timeout", "bls_async")
    assert ok(report["first"])["OUT"]["data"] == [[1.0]]
    second = report["second"]
    assert second["error"] == direct["error"]
    if direct["error"] is None:
        assert second["outputs"]["OUT"]["data"] == direct["outputs"]


# -- decoupled ------------------------------------------------------------------------------------


def test_decoupled_bls(server: Server) -> None:
    report = run_case(server, "decoupled")
    assert report["iterator"] == "ResponseIterator"
    values = [r["outputs"].get("I", {}).get("data") for r in report["items"]]
    assert values == [[0], [1], [2], None]  # the flags-only final arrives as an empty response
    assert [r["outputs"] for r in report["zero"]] == [{}]
    assert report["not_decoupled_call"]["error"] == (
        "Model repeat - Error when running inference: Model repeat is using the decoupled. The "
        "current BLS request call doesn't support models using the decoupled transaction "
        "policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for "
        "decoupled models.'"
    )
    assert [list(r["outputs"]) for r in report["plain_model"]] == [["OUTPUT0", "OUTPUT1"]]
    assert [r["error"] for r in report["unknown"]] == [NOT_READY.format("nope")]


def test_async_decoupled_bls(server: Server) -> None:
    report = run_case(server, "decoupled", "bls_async")
    assert report["iterator"] == "ResponseIterator"
    assert [r["outputs"].get("I", {}).get("data") for r in report["items"]] == [[0], [1], None]


# -- model management -----------------------------------------------------------------------------


def test_model_management_respects_the_control_mode(server: Server) -> None:
    r = run_case(server, "management")
    assert r["ready"] == {"value": "True"} and r["ready_v1"] == {"value": "True"}
    assert r["ready_v7"] == {"value": "False"} and r["ready_unknown"] == {"value": "False"}
    assert r["ready_bad_version"]["message"] == (
        "Failed to check model readiness: Failed to process the request for model 'bls_0_0', "
        "message: failed to get model version from specified version string 'x' (details: "
        "stol), version should be an integral value > 0"
    )
    for key, verb in (("load", "load"), ("unload", "unload")):
        assert r[key]["raised"] == "TritonModelException"
        assert r[key]["message"].startswith(
            f"Failed to {verb} model: Failed to process the request for model 'bls_0_0', "
            "message: explicit model load / unload is not allowed"
        ), r[key]


MANAGER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready_at_start = pb_utils.is_model_ready("add_sub")
        pb_utils.load_model("add_sub")  # a BLS model loads what it needs, as Triton documents

    def execute(self, requests):
        report = {"ready_at_start": self.ready_at_start,
                  "ready_after_load": pb_utils.is_model_ready("add_sub")}
        x = [pb_utils.Tensor("INPUT0", np.ones((1, 4), np.float32)),
             pb_utils.Tensor("INPUT1", np.ones((1, 4), np.float32))]
        resp = pb_utils.InferenceRequest(model_name="add_sub", inputs=x,
                                         requested_output_names=["OUTPUT0"]).exec()
        report["infer"] = resp.output_tensors()[0].as_numpy().tolist()
        config = json.dumps({"max_batch_size": 8, "dynamic_batching": {},
                             "parameters": {"note": {"string_value": "overridden"}}})
        pb_utils.load_model("add_sub", config=config)
        report["reloaded_ready"] = pb_utils.is_model_ready("add_sub")
        try:
            pb_utils.load_model("nope")
        except pb_utils.TritonModelException as e:
            report["load_unknown"] = str(e)
        try:
            pb_utils.load_model("add_sub", files={"1/model.onnx": b""})
        except pb_utils.TritonModelException as e:
            report["bad_file_key"] = str(e)
        pb_utils.unload_model("add_sub")
        report["ready_after_unload"] = pb_utils.is_model_ready("add_sub")
        gone = pb_utils.InferenceRequest(model_name="add_sub", inputs=x,
                                         requested_output_names=[]).exec()
        report["infer_after_unload"] = gone.error().message()
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "REPORT", np.array([json.dumps(report)], dtype=object))]) for _ in requests]
"""


def test_model_management_in_explicit_mode(tmp_path: Path, server_factory: Any) -> None:
    write_add_sub(tmp_path, "add_sub", 8, dims=4)
    _python_model(tmp_path, "manager", DRIVER_CONFIG, MANAGER)
    s = server_factory(
        tmp_path,
        "--model-control-mode=explicit",
        "--load-model=manager",
        "--allow-metrics=false",
        "--allow-grpc=false",
    )
    client = httpclient.InferenceServerClient(s.http_url)
    r = run_case(s, "", "manager")
    assert r["ready_at_start"] is False
    assert r["ready_after_load"] is True and r["reloaded_ready"] is True
    assert r["infer"] == [[2.0, 2.0, 2.0, 2.0]]
    assert r["load_unknown"].startswith(
        "Failed to load model: Failed to process the request for model 'manager_0_0', message: "
    )
    assert "'nope'" in r["load_unknown"]
    assert "file keys must start with 'file:'" in r["bad_file_key"]
    assert r["ready_after_unload"] is False
    assert r["infer_after_unload"] == NOT_READY.format("add_sub")
    assert not client.is_model_ready("add_sub") and client.is_model_ready("manager")


# -- a model calling itself -----------------------------------------------------------------------


def test_self_call_blocks_only_the_caller(tmp_path: Path) -> None:
    build_repo(tmp_path)
    marker = tmp_path / "self_call.started"
    s = start_server(tmp_path, "--allow-metrics=false", "--exit-timeout-secs=1")
    try:
        client = grpcclient.InferenceServerClient(s.grpc_url)
        inp = grpcclient.InferInput("CASE", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"self_call"], dtype=object))
        done: list[Any] = []
        client.async_infer("bls", [inp], lambda result, error: done.append(result))
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the self call never started"
            time.sleep(0.02)
        # bls has one instance, busy waiting for itself (as in Triton: forever); everything
        # else keeps serving
        assert len(run_case(s, "gather", "bls_async")["responses"]) == 4
        assert httpclient.InferenceServerClient(s.http_url).is_server_live()
        assert not done
    finally:
        start = time.monotonic()
        code = s.stop()
        elapsed = time.monotonic() - start
    # shutdown waits --exit-timeout-secs for the stuck request, then exits, as Triton does
    assert elapsed < 15 and code == 1, (elapsed, code)
    assert "Exit timeout expired. Exiting immediately." in s.output()
    assert not (tmp_path / "self_call.finished").exists()


# -- in-process contracts -------------------------------------------------------------------------


def test_response_tensors_view_the_response_arrays() -> None:
    from tritonlite.contracts.types import InferOutput, InferResponse
    from tritonlite.inprocess import bls

    writable = np.arange(4, dtype=np.float32)
    frozen = np.arange(3, dtype=np.int64)
    frozen.flags.writeable = False
    resp = bls.pb_response(
        InferResponse(
            "m",
            "1",
            outputs=[
                InferOutput("A", "FP32", (4,), writable),
                InferOutput("B", "INT64", (3,), frozen),
            ],
        )
    )
    a, b = resp.output_tensors()
    assert a.as_numpy() is writable  # no copy
    got = b.as_numpy()
    assert got.flags.writeable and not np.shares_memory(got, frozen)  # copied once, on use
    got[0] = 9
    assert frozen[0] == 0


def test_blocking_calls_are_refused_on_the_server_loop(tmp_path: Path) -> None:
    from tritonlite.backends.python import pb_utils
    from tritonlite.core.core import InferenceCore
    from tritonlite.inprocess import InProcessServer
    from tritonlite.options import ServerOptions

    async def main() -> Any:
        core = InferenceCore(
            ServerOptions(model_repositories=(tmp_path,)), in_process=InProcessServer
        )
        await core.start()
        # a python model's backend attaches this when it loads; the repository is empty
        pb_utils.attach_server(core.repository.server)
        try:
            req = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
            with pytest.raises(pb_utils.TritonModelException, match="event loop thread"):
                req.exec()
            with pytest.raises(pb_utils.TritonModelException, match="event loop thread"):
                pb_utils.is_model_ready("m")
            # from another thread the same calls reach the core
            return await asyncio.to_thread(lambda: (req.exec(), pb_utils.is_model_ready("m")))
        finally:
            await core.stop()

    resp, ready = asyncio.run(main())
    assert resp.error().message() == NOT_READY.format("m")
    assert ready is False

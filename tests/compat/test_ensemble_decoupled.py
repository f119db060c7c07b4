"""Ensembles with a decoupled composing model, as Triton 2.51 runs them.

A decoupled step may answer 0..N times per request; each of its responses runs the steps after
it on its own, and the ensemble answers once per response that reaches its outputs. Such an
ensemble is decoupled itself (its config says so): it answers over the gRPC stream and HTTP
``generate_stream`` only, and a unary call is refused as Triton refuses any decoupled model.
The final flag goes out once no step is running: on the last response, or alone (an empty final
response where the client asked for one) when the last thing to end was a flags-only final. The
first error (a step's error response or a failed execution) is sent as the request's error and
nothing follows it. Each case runs against tritonlite and, where the reference is installed,
against the real Triton 2.51 serving the same python models.
"""

from __future__ import annotations

import http.client
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server, wait_until
from repos import ensemble_step, write_add_sub, write_python_model
from support.reference import ReferenceTriton, require_reference
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

DEC_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "N" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_INT32 dims: [1] }]
"""

# ``N`` >= 100: N - 100 responses, the last one FINAL. 0 <= N < 100: N responses, then a
# flags-only final. Negative N: the error cases.
DEC_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def r(i):
    return pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([i], np.int32))])


def error(message):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            s = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            if n >= 100:
                for i in range(n - 100):
                    s.send(r(i), flags=FINAL if i == n - 101 else 0)
            elif n >= 0:
                for i in range(n):
                    s.send(r(i))
                s.send(flags=FINAL)
            elif n == -1:  # an error response mid-stream (after the first result is out)
                s.send(r(0))
                time.sleep(0.5)
                s.send(error("bad chunk"))
                s.send(r(2))
                s.send(flags=FINAL)
            elif n == -2:
                raise ValueError("boom")
            elif n == -4:
                s.send(error("no luck"), flags=FINAL)
            elif n == -5:  # the step after this one fails on 13
                for i in (0, 13, 2):
                    s.send(r(i))
                s.send(flags=FINAL)
            elif n == -6:  # until the client goes away
                i = 0
                deadline = time.monotonic() + 20
                while not s.is_cancelled() and time.monotonic() < deadline:
                    s.send(r(i))
                    i += 1
                    time.sleep(0.02)
                s.send(flags=FINAL)
        return None
"""

ADD_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "Z" data_type: TYPE_INT32 dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""

ADD_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if int(x[0]) == 13:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("unlucky 13")))
            else:
                z = (x + 100).astype(np.int32)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Z", z)]))
        return out
"""


BLS_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "N" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "S" data_type: TYPE_INT32 dims: [2] }]
"""

# Calls ``ens`` with N and answers [sum of the OUTs, number of responses with outputs].
BLS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="ens",
                inputs=[pb_utils.get_input_tensor_by_name(request, "N")],
                requested_output_names=["OUT"],
            )
            total = count = 0
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                t = pb_utils.get_output_tensor_by_name(response, "OUT")
                if t is not None:
                    total += int(t.as_numpy()[0])
                    count += 1
            s = np.array([total, count], np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("S", s)]))
        return out
"""


def _ensemble(repo: Path, name: str, outputs: list[str], steps: list[str]) -> None:
    (repo / name / "1").mkdir(parents=True)
    outs = ", ".join(f'{{ name: "{o}" data_type: TYPE_INT32 dims: [1] }}' for o in outputs)
    (repo / name / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 0\n'
        'input [{ name: "N" data_type: TYPE_INT32 dims: [1] }]\n'
        f"output [{outs}]\n"
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


DEC_STEP = ensemble_step("dec", {"N": "N"}, {"Y": "y"})


def write_repo(repo: Path, onnx: bool) -> Path:
    """``dec`` -> ``add`` (python) as ``ens``; ``ens2`` also returns ``dec``'s own output;
    ``outer``: ``ens`` -> ``add``; with ``onnx``, ``ens_onnx``: ``dec`` -> a batching ONNX
    add_sub (y + y, y - y)."""
    write_python_model(repo, "dec", DEC_MODEL, DEC_CONFIG)
    write_python_model(repo, "add", ADD_MODEL, ADD_CONFIG)
    _ensemble(repo, "ens", ["OUT"], [DEC_STEP, ensemble_step("add", {"X": "y"}, {"Z": "OUT"})])
    _ensemble(
        repo,
        "ens2",
        ["OUT", "RAW"],
        [
            ensemble_step("dec", {"N": "N"}, {"Y": "RAW"}),
            ensemble_step("add", {"X": "RAW"}, {"Z": "OUT"}),
        ],
    )
    write_python_model(repo, "bls", BLS_MODEL, BLS_CONFIG)
    _ensemble(
        repo,
        "outer",
        ["OUT"],
        [
            ensemble_step("ens", {"N": "N"}, {"OUT": "o"}),
            ensemble_step("add", {"X": "o"}, {"Z": "OUT"}),
        ],
    )
    if onnx:
        write_add_sub(repo, "add_sub_i32", max_batch_size=8, dims=1, dtype="INT32")
        _ensemble(
            repo,
            "ens_onnx",
            ["SUM", "DIFF"],
            [
                DEC_STEP,
                ensemble_step(
                    "add_sub_i32",
                    {"INPUT0": "y", "INPUT1": "y"},
                    {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"},
                ),
            ],
        )
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(write_repo(tmp_path_factory.mktemp("ens_dec_repo"), onnx=True))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceTriton]:
    base = require_reference()
    repo = write_repo(tmp_path_factory.mktemp("ens_dec_reference_repo"), onnx=False)
    log = tmp_path_factory.mktemp("triton_log") / "triton.log"
    # It keeps a request whose ensemble failed in flight for good: do not wait for it at exit.
    t = ReferenceTriton(base, repo, "--exit-timeout-secs=1", log=log)
    yield t
    t.stop()


def n_input(mod: Any, n: int) -> Any:
    inp = mod.InferInput("N", [1], "INT32")
    inp.set_data_from_numpy(np.array([n], np.int32))
    return inp


class Stream:
    """A tritonclient gRPC stream; ``close`` ends it and waits for everything the server sent
    (the server finishes the started requests first), so nothing is left in flight."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.got.put((result, error)))

    def send(
        self,
        model: str,
        n: int,
        rid: str,
        empty_final: bool = True,
        outputs: list[str] | None = None,
    ) -> None:
        self.client.async_stream_infer(
            model,
            [n_input(grpcclient, n)],
            request_id=rid,
            enable_empty_final_response=empty_final,
            outputs=None
            if outputs is None
            else [grpcclient.InferRequestedOutput(o) for o in outputs],
        )

    def close(self, cancel: bool = False) -> list[tuple[Any, ...]]:
        """Every message received, each as ("ok", id, outputs, final) or ("error", message)."""
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()
        out: list[tuple[Any, ...]] = []
        while not self.got.empty():
            out.append(self.take(0))
        return out

    def take(self, timeout: float = 20.0) -> tuple[Any, ...]:
        """The next message, as ``close`` lists them."""
        result, error = self.got.get(timeout=timeout)
        if error is not None:
            return "error", error.message()
        resp = result.get_response()
        values = {o.name: result.as_numpy(o.name).tolist() for o in resp.outputs}
        return "ok", resp.id, values, resp.parameters["triton_final_response"].bool_param


def run_one(grpc_url: str, model: str, n: int, empty_final: bool = True) -> list[tuple[Any, ...]]:
    stream = Stream(grpc_url)
    stream.send(model, n, "r1", empty_final)
    return stream.close()


def settle_final(messages: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Where the final flag went is a race in Triton too: on the last response when that
    step's answer came after the decoupled step's flags-only final, else alone. Both read as
    the same answer: the responses, then the end."""
    if messages and messages[-1][0] == "ok" and messages[-1][2] == {}:
        assert messages[-1][3], messages
        messages = messages[:-1]
        if messages and messages[-1][0] == "ok":
            messages[-1] = (*messages[-1][:3], True)
    return messages


def ok(rid: str, values: list[dict[str, list[int]]]) -> list[tuple[Any, ...]]:
    """The messages of a request answered with ``values``, the last one final."""
    return [("ok", rid, v, i == len(values) - 1) for i, v in enumerate(values)]


# -- responses and their count -------------------------------------------------------------------
@pytest.mark.parametrize("count", [3, 1])
def test_each_response_runs_the_next_step(server: Server, count: int) -> None:
    got = run_one(server.grpc_url, "ens", 100 + count)
    assert got == ok("r1", [{"OUT": [100 + i]} for i in range(count)])


def test_flags_only_final_after_the_responses(server: Server) -> None:
    got = run_one(server.grpc_url, "ens", 3)
    assert settle_final(got) == ok("r1", [{"OUT": [100 + i]} for i in range(3)])


def test_outputs_from_two_steps_pair_by_response(server: Server) -> None:
    got = run_one(server.grpc_url, "ens2", 103)
    assert got == ok("r1", [{"RAW": [i], "OUT": [100 + i]} for i in range(3)])


def requested(grpc_url: str, outputs: list[str]) -> list[tuple[Any, ...]]:
    stream = Stream(grpc_url)
    stream.send("ens2", 103, "r1", outputs=outputs)
    return stream.close()


# Output asked for -> the answer (the steps nothing asked for do not run). Triton 2.51 prunes
# too much here (``test_same_as_triton``).
REQUESTED = {
    "RAW": ok("r1", [{"RAW": [i]} for i in range(3)]),
    "OUT": ok("r1", [{"OUT": [100 + i]} for i in range(3)]),
}


@pytest.mark.parametrize("output", list(REQUESTED))
def test_only_the_requested_outputs(server: Server, output: str) -> None:
    assert settle_final(requested(server.grpc_url, [output])) == REQUESTED[output]


def test_onnx_step_after_a_decoupled_one(server: Server) -> None:
    """The batching ONNX step gets each response with a batch dimension added; the ensemble's
    outputs drop it again."""
    got = run_one(server.grpc_url, "ens_onnx", 104)
    # Its instances answer in the order they finish; so does the ensemble.
    assert [m[3] for m in got] == [False, False, False, True]
    assert sorted(m[2]["SUM"][0] for m in got) == [0, 2, 4, 6]
    assert all(m[:2] == ("ok", "r1") and m[2]["DIFF"] == [0] for m in got)


def test_a_decoupled_ensemble_inside_an_ensemble(server: Server) -> None:
    got = run_one(server.grpc_url, "outer", 103)
    assert got == ok("r1", [{"OUT": [200 + i]} for i in range(3)])
    assert run_one(server.grpc_url, "outer", -4) == [
        ("error", "in ensemble 'outer', in ensemble 'ens', no luck")
    ]


def bls(http_url: str, n: int) -> list[int]:
    client = httpclient.InferenceServerClient(http_url)
    try:
        result: list[int] = client.infer("bls", [n_input(httpclient, n)]).as_numpy("S").tolist()
        return result
    finally:
        client.close()


def test_a_python_model_calls_the_ensemble(server: Server) -> None:
    """BLS with ``decoupled=True``: the model iterates the ensemble's responses."""
    assert bls(server.http_url, 103) == [303, 3]
    assert bls(server.http_url, 0) == [0, 0]


def test_zero_responses_is_a_final_flag_alone(server: Server) -> None:
    assert run_one(server.grpc_url, "ens", 0) == [("ok", "r1", {}, True)]
    # Without the empty final response the request ends silently: only the second answers.
    stream = Stream(server.grpc_url)
    stream.send("ens", 0, "silent", empty_final=False)
    stream.send("ens", 101, "second", empty_final=False)
    assert stream.close() == ok("second", [{"OUT": [100]}])


def test_concurrent_requests_on_one_stream(server: Server) -> None:
    stream = Stream(server.grpc_url)
    for k in range(4):
        stream.send("ens", 100 + k + 1, f"q{k}")
    got = stream.close()
    for k in range(4):
        mine = [m for m in got if m[1] == f"q{k}"]
        assert mine == ok(f"q{k}", [{"OUT": [100 + i]} for i in range(k + 1)])
    assert len(got) == 1 + 2 + 3 + 4


# -- errors ----------------------------------------------------------------------------------------
ERRORS = {  # N -> the messages, after which nothing comes
    -4: [("error", "in ensemble 'ens', no luck")],
    -1: [("ok", "r1", {"OUT": [100]}, False), ("error", "in ensemble 'ens', bad chunk")],
    -5: [("ok", "r1", {"OUT": [100]}, False), ("error", "in ensemble 'ens', unlucky 13")],
}


@pytest.mark.parametrize("n", list(ERRORS))
def test_an_error_ends_the_request(server: Server, n: int) -> None:
    assert run_one(server.grpc_url, "ens", n) == ERRORS[n]


def test_a_failed_execution_is_an_error(server: Server) -> None:
    (got,) = run_one(server.grpc_url, "ens", -2)
    assert got[0] == "error" and got[1].startswith("in ensemble 'ens', "), got
    assert "boom" in got[1]


def test_the_server_keeps_serving_after_errors(server: Server) -> None:
    stream = Stream(server.grpc_url)
    stream.send("ens", -5, "bad")
    stream.send("ens", 102, "good")
    got = stream.close()
    assert [m for m in got if m[0] == "ok" and m[1] == "good"] == ok(
        "good", [{"OUT": [100]}, {"OUT": [101]}]
    )
    assert ("error", "in ensemble 'ens', unlucky 13") in got


# -- unary calls, config, statistics ---------------------------------------------------------------
UNARY = {
    "http": (501, "HTTP end point doesn't support models with decoupled transaction policy"),
    "grpc": (
        "StatusCode.UNIMPLEMENTED",
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    ),
}


def unary(http_url: str, grpc_url: str, protocol: str) -> tuple[Any, str]:
    mod: Any = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(http_url if protocol == "http" else grpc_url)
    try:
        client.infer("ens", [n_input(mod, 102)])
    except InferenceServerException as exc:
        status = exc.status()
        return (int(status) if protocol == "http" else str(status)), exc.message()
    finally:
        client.close()
    raise AssertionError("a unary call to a decoupled ensemble answered")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unary_call_is_refused(server: Server, protocol: str) -> None:
    assert unary(server.http_url, server.grpc_url, protocol) == UNARY[protocol]


def test_config_says_decoupled(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.get_model_config("ens")["model_transaction_policy"] == {"decoupled": True}
    finally:
        client.close()


def stats(http_url: str, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(http_url)
    try:
        result: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
        return result
    finally:
        client.close()


def counts(s: dict[str, Any]) -> tuple[int, int, int, int]:
    i = s["inference_stats"]
    return s["inference_count"], s["execution_count"], i["success"]["count"], i["fail"]["count"]


def test_statistics(server: Server) -> None:
    """The ensemble counts each request once, when it ends (a success with 0 responses too);
    the step after the decoupled one counts one inference per response."""
    url = server.http_url
    ens0, add0 = counts(stats(url, "ens")), counts(stats(url, "add"))
    for n in (103, 0, -4, 102):
        run_one(server.grpc_url, "ens", n)
    ens1, add1 = stats(url, "ens"), counts(stats(url, "add"))
    assert [a - b for a, b in zip(counts(ens1), ens0)] == [3, 3, 3, 1]
    assert [a - b for a, b in zip(add1, add0)] == [5, 5, 5, 0]
    assert ens1["response_stats"] == {}  # Triton's ensembles keep none
    assert ens1["batch_stats"][0]["batch_size"] == 1


def test_client_cancel_ends_the_steps(server: Server) -> None:
    """A client that cancels its stream cancels the ensemble's steps: the decoupled model
    sees ``is_cancelled()`` and ends; the ensemble counts a failure."""
    before_ens, before_dec = counts(stats(server.http_url, "ens")), stats(server.http_url, "dec")
    stream = Stream(server.grpc_url)
    stream.send("ens", -6, "endless")
    assert stream.take() == ("ok", "endless", {"OUT": [100]}, False)
    stream.close(cancel=True)
    wait_until(lambda: counts(stats(server.http_url, "ens"))[3] == before_ens[3] + 1, 20)
    dec_success = before_dec["inference_stats"]["success"]["count"]
    wait_until(
        lambda: stats(server.http_url, "dec")["inference_stats"]["success"]["count"] > dec_success,
        25,
    )
    assert run_one(server.grpc_url, "ens", 101) == ok("r1", [{"OUT": [100]}])


# -- HTTP generate_stream --------------------------------------------------------------------------
def generate_stream(http_url: str, model: str, n: int) -> list[Any]:
    url = urlsplit(f"http://{http_url}")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/generate_stream", body=json.dumps({"N": n}))
        body = conn.getresponse().read()
    finally:
        conn.close()
    chunks = [c for c in body.split(b"\n\n") if c]
    assert all(c.startswith(b"data: ") for c in chunks), body
    return [json.loads(c[len(b"data: ") :]) for c in chunks]


SEQ = {"sequence_end": False, "sequence_id": 0, "sequence_start": False}
GENERATE = {  # N -> the events Triton 2.51 sends
    103: [{"OUT": 100 + i, "model_name": "ens", "model_version": "1", **SEQ} for i in range(3)],
    0: [],
    -5: [
        {"OUT": 100, "model_name": "ens", "model_version": "1", **SEQ},
        {"error": "in ensemble 'ens', unlucky 13"},
    ],
    -4: [{"error": "in ensemble 'ens', no luck"}],
}


def without_parameters(events: list[Any]) -> list[Any]:
    return [{k: v for k, v in e.items() if k not in SEQ} for e in events]


@pytest.mark.parametrize("n", list(GENERATE))
def test_generate_stream(server: Server, n: int) -> None:
    got = generate_stream(server.http_url, "ens", n)
    assert without_parameters(got) == without_parameters(GENERATE[n])


def test_generate_stream_response_parameters(server: Server) -> None:
    assert generate_stream(server.http_url, "ens", 103) == GENERATE[103]


def generate(http_url: str, model: str, n: int) -> tuple[int, Any]:
    url = urlsplit(f"http://{http_url}")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/generate", body=json.dumps({"N": n}))
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)
GENERATE_ONE = {  # N -> (status, body) of /generate, as Triton 2.51 answers
    101: (200, {"OUT": 100, "model_name": "ens", "model_version": "1", **SEQ}),
    103: (200, {"error": ONE}),
    0: (200, {"error": ONE}),
    -4: (400, {"error": "in ensemble 'ens', no luck"}),
}


@pytest.mark.parametrize("n", list(GENERATE_ONE))
def test_generate(server: Server, n: int) -> None:
    status, body = generate(server.http_url, "ens", n)
    want_status, want = GENERATE_ONE[n]
    assert (status, without_parameters([body])) == (want_status, without_parameters([want]))


# -- a step fed by a decoupled model and by the request ------------------------------------------
ADD2_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_INT32 dims: [1] }, { name: "B" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "Z" data_type: TYPE_INT32 dims: [1] }]
"""

MIXED = (
    "in ensemble mixed, step of model 'mixed' receives inputs originated from different "
    "decoupled models"
)


def write_mixed_repo(repo: Path) -> Path:
    """``mixed``: ``add2`` reads ``dec``'s output and the request's ``N`` (Triton refuses to
    load it: their values cannot be paired); ``fine``: ``add`` after ``dec``, loads."""
    write_python_model(repo, "dec", DEC_MODEL, DEC_CONFIG)
    write_python_model(repo, "add", ADD_MODEL, ADD_CONFIG)
    write_python_model(repo, "add2", ADD_MODEL, ADD2_CONFIG)
    _ensemble(
        repo,
        "mixed",
        ["OUT"],
        [DEC_STEP, ensemble_step("add2", {"X": "y", "B": "N"}, {"Z": "OUT"})],
    )
    _ensemble(repo, "fine", ["OUT"], [DEC_STEP, ensemble_step("add", {"X": "y"}, {"Z": "OUT"})])
    return repo


def index_states(http_url: str) -> dict[str, tuple[str, str]]:
    client = httpclient.InferenceServerClient(http_url)
    try:
        return {
            m["name"]: (m.get("state", ""), m.get("reason", ""))
            for m in client.get_model_repository_index()
        }
    finally:
        client.close()


def test_inputs_from_a_decoupled_model_and_the_request_do_not_load(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    repo = write_mixed_repo(tmp_path_factory.mktemp("mixed_repo"))
    s = start_server(repo, "--exit-on-error=false", "--allow-metrics=false")
    try:
        states = index_states(s.http_url)
    finally:
        s.stop()
    assert states["mixed"] == ("UNAVAILABLE", MIXED)
    assert states["fine"] == ("READY", "")


def test_mixed_inputs_same_as_triton(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Triton says it in its log (its index lists ``mixed`` with no state: it failed before
    any version was tried); tritonlite gives the same message as the version's reason."""
    base = require_reference()
    repo = write_mixed_repo(tmp_path_factory.mktemp("mixed_reference_repo"))
    log = tmp_path_factory.mktemp("triton_log") / "triton.log"
    t = ReferenceTriton(
        base,
        repo,
        "--exit-on-error=false",
        log=log,
        ready=lambda ref: index_states(ref.http_url).get("fine", ("",))[0] == "READY",
    )
    try:
        states = index_states(t.http_url)
    finally:
        t.stop()
    assert states["mixed"] == ("", "")
    assert f"Invalid argument: {MIXED}" in log.read_text()


# -- the same against Triton 2.51 -----------------------------------------------------------------
def test_same_as_triton(triton: ReferenceTriton) -> None:
    for count in (3, 1):
        got = run_one(triton.grpc_url, "ens", 100 + count)
        assert got == ok("r1", [{"OUT": [100 + i]} for i in range(count)])
    got = settle_final(run_one(triton.grpc_url, "ens", 3))
    assert got == ok("r1", [{"OUT": [100 + i]} for i in range(3)])
    got = run_one(triton.grpc_url, "ens2", 103)
    assert got == ok("r1", [{"RAW": [i], "OUT": [100 + i]} for i in range(3)])
    assert run_one(triton.grpc_url, "ens", 0) == [("ok", "r1", {}, True)]
    got = run_one(triton.grpc_url, "outer", 103)
    assert got == ok("r1", [{"OUT": [200 + i]} for i in range(3)])
    assert bls(triton.http_url, 103) == [303, 3]
    for output in REQUESTED:
        # Where tritonlite knowingly differs: Triton 2.51's pruning drops a tensor once no
        # step it keeps reads it, even one the request asked for, and then every step that
        # tensor needed: here all of them, so only the final flag comes.
        assert requested(triton.grpc_url, [output]) == [("ok", "r1", {}, True)], output
    assert bls(triton.http_url, 0) == [0, 0]
    for protocol in ("http", "grpc"):
        assert unary(triton.http_url, triton.grpc_url, protocol) == UNARY[protocol]
    for n, want in GENERATE.items():
        assert generate_stream(triton.http_url, "ens", n) == want, n
    for n, answer in GENERATE_ONE.items():
        assert generate(triton.http_url, "ens", n) == answer, n


def test_errors_same_as_triton(triton: ReferenceTriton) -> None:
    """Triton 2.51 keeps such a request in flight after its error (it never ends the
    ensemble's stream): read what came, and stop the server without waiting for it."""
    cases = [("ens", n, want) for n, want in ERRORS.items()]
    cases.append(("outer", -4, [("error", "in ensemble 'outer', in ensemble 'ens', no luck")]))
    for model, n, want in cases:
        stream = Stream(triton.grpc_url)
        stream.send(model, n, "r1")
        assert [stream.take() for _ in want] == want, (model, n)
        stream.client.stop_stream(cancel_requests=True)
        stream.client.close()

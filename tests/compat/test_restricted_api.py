"""``--http-restricted-api`` / ``--grpc-restricted-protocol`` on every front end, against Triton.

The same server flags run on ``--frontend aio``, ``--frontend native`` and the native shared
port; every HTTP route (enumerated from ``frontends/http/app.py``'s route table) and every RPC
(from the servicer's registry) is asked without the key, with a wrong value and with the key,
through the real tritonclient (HTTP, gRPC, their aio variants, the streaming RPC) and raw
requests. Where the reference tritonserver is installed (``tools/triton-reference.sh install
.tools/triton``, or ``$TRITONLITE_TRITON_DIR``), the same requests go to real Triton 2.51 and
the statuses and messages are compared.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from conftest import Server, _free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc
from repos import refused_at_start
from support.reference import (
    ReferenceTriton,
    http_status,
    reference_base,
    reference_env,
    require_reference,
    tritonserver,
)
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tritonlite import cli
from tritonlite._proto import SERVICE_NAME, service
from tritonlite.frontends.base import restrict
from tritonlite.frontends.grpc import servicer
from tritonlite.frontends.http import app

pytestmark = pytest.mark.timeout(120)

TRANSPORTS = ("aio", "native", "shared")

PARAMS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            p = r.parameters()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x),
                pb_utils.Tensor("PARAMS", np.array([p.encode()], dtype=np.object_))]))
        return out
"""
"""``OUT`` = ``IN``; ``PARAMS`` = the request's parameters as the model sees them (JSON)."""

PARAMS_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] },
        { name: "PARAMS" data_type: TYPE_STRING dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""

# Two keys per protocol, so a key that unlocks one group is seen not to unlock another.
RESTRICTIONS = (
    "--http-restricted-api=health,metadata,shared-memory,model-config:hk=hv",
    "--http-restricted-api=inference,model-repository,statistics,trace,logging:ik=iv",
    "--grpc-restricted-protocol=inference,health,metadata,shared-memory:gk=gv",
    "--grpc-restricted-protocol=model-config,model-repository,statistics,trace,logging:gk2=gv2",
)
HTTP_KEYS = {
    "health": ("hk", "hv"),
    "metadata": ("hk", "hv"),
    "shared-memory": ("hk", "hv"),
    "model-config": ("hk", "hv"),
}
GRPC_KEYS = {
    "inference": ("gk", "gv"),
    "health": ("gk", "gv"),
    "metadata": ("gk", "gv"),
    "shared-memory": ("gk", "gv"),
}


def http_key(group: str) -> tuple[str, str]:
    return HTTP_KEYS.get(group, ("ik", "iv"))


def grpc_key(group: str) -> tuple[str, str]:
    k, v = GRPC_KEYS.get(group, ("gk2", "gv2"))
    return restrict.GRPC_KEY_PREFIX + k, v


INFER_BODY = json.dumps(
    {"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
)
# (method, path, body): one request per route and method of app._ROUTES
HTTP_CASES: list[tuple[str, str, str]] = [
    ("GET", "/v2/health/live", ""),
    ("GET", "/v2/health/ready", ""),
    ("GET", "/v2/models/params/ready", ""),
    ("GET", "/v2/models/params/versions/1/ready", ""),
    ("GET", "/v2", ""),
    ("GET", "/v2/models/params", ""),
    ("POST", "/v2/models/params/infer", INFER_BODY),
    ("POST", "/v2/models/params/generate", '{"IN": [1.0]}'),
    ("POST", "/v2/models/params/generate_stream", '{"IN": [1.0]}'),
    ("GET", "/v2/systemsharedmemory/status", ""),
    ("POST", "/v2/systemsharedmemory/region/nope/unregister", ""),
    ("GET", "/v2/cudasharedmemory/status", ""),
    ("POST", "/v2/cudasharedmemory/unregister", ""),
    ("GET", "/v2/models/params/config", ""),
    ("POST", "/v2/repository/index", ""),
    ("POST", "/v2/repository/models/params/load", ""),
    ("POST", "/v2/repository/models/nope/unload", ""),
    ("GET", "/v2/models/params/stats", ""),
    ("GET", "/v2/models/stats", ""),
    ("GET", "/v2/trace/setting", ""),
    ("POST", "/v2/trace/setting", "{}"),
    ("GET", "/v2/models/params/trace/setting", ""),
    ("POST", "/v2/models/params/trace/setting", "{}"),
    ("GET", "/v2/logging", ""),
    ("POST", "/v2/logging", "{}"),
    ("GET", "/v1/models", ""),
    ("GET", "/v1/models/params", ""),
    ("POST", "/v1/completions", '{"model": "params", "prompt": "x"}'),
    ("POST", "/v1/chat/completions", '{"model": "params", "messages": []}'),
    ("POST", "/v1/embeddings", '{"model": "params", "input": "x"}'),
]


def route_group(method: str, path: str) -> str:
    for pattern, methods in app._ROUTES:
        if pattern.fullmatch(path):
            handler = methods.get(method) or next(iter(methods.values()))
            return restrict.HTTP_HANDLER_GROUPS[handler.__name__]
    raise AssertionError(f"no route for {method} {path}")


def infer_request() -> Any:
    return pb.ModelInferRequest(
        model_name="params",
        inputs=[pb.ModelInferRequest.InferInputTensor(name="IN", datatype="FP32", shape=[1])],
        raw_input_contents=[np.float32([1]).tobytes()],
    )


# registry path -> (request message, streaming)
GRPC_CASES: dict[str, Any] = {
    "ServerLive": pb.ServerLiveRequest(),
    "ServerReady": pb.ServerReadyRequest(),
    "ModelReady": pb.ModelReadyRequest(name="params"),
    "ServerMetadata": pb.ServerMetadataRequest(),
    "ModelMetadata": pb.ModelMetadataRequest(name="params"),
    "ModelConfig": pb.ModelConfigRequest(name="params"),
    "ModelStatistics": pb.ModelStatisticsRequest(name="params"),
    "RepositoryIndex": pb.RepositoryIndexRequest(),
    "RepositoryModelLoad": pb.RepositoryModelLoadRequest(model_name="params"),
    "RepositoryModelUnload": pb.RepositoryModelUnloadRequest(model_name="nope"),
    "SystemSharedMemoryStatus": pb.SystemSharedMemoryStatusRequest(),
    "SystemSharedMemoryRegister": pb.SystemSharedMemoryRegisterRequest(
        name="r", key="/tritonlite_test_no_such_key", byte_size=4
    ),
    "SystemSharedMemoryUnregister": pb.SystemSharedMemoryUnregisterRequest(),
    "CudaSharedMemoryStatus": pb.CudaSharedMemoryStatusRequest(),
    "CudaSharedMemoryRegister": pb.CudaSharedMemoryRegisterRequest(name="r"),
    "CudaSharedMemoryUnregister": pb.CudaSharedMemoryUnregisterRequest(),
    "TraceSetting": pb.TraceSettingRequest(),
    "LogSettings": pb.LogSettingsRequest(),
    "ModelInfer": infer_request(),
}
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
STREAM = f"/{SERVICE_NAME}/ModelStreamInfer"
WATCH = "/grpc.health.v1.Health/Watch"


# -- servers ---------------------------------------------------------------------------------------
def write_repo(repo: Path) -> Path:
    (repo / "params" / "1").mkdir(parents=True)
    (repo / "params" / "1" / "model.py").write_text(PARAMS_MODEL)
    (repo / "params" / "config.pbtxt").write_text(PARAMS_CONFIG)
    return repo


def _wait_live(
    url: str, headers: dict[str, str], proc: subprocess.Popen[Any], deadline: float
) -> None:
    host, port = url.rsplit(":", 1)
    while True:
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            conn.request("GET", "/v2/health/live", headers=headers)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server at {url} did not become live")
        time.sleep(0.05)


def start_tritonlite(repo: Path, transport: str, *args: str) -> Server:
    """``conftest.start_server``'s launch, with readiness asked with the health key (the
    health group may be restricted, which start_server's probe does not know)."""
    if transport == "shared":
        port = str(_free_port())
        ports = ["--frontend", "native", "--http-port", port, "--grpc-port", port]
    else:
        ports = ["--frontend", transport, "--http-port", "0", "--grpc-port", "0"]
    cmd = [
        sys.executable,
        "-m",
        "tritonlite",
        "--model-repository",
        str(repo),
        *ports,
        "--allow-metrics=false",
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server = Server(proc, cmd)
    deadline = time.monotonic() + 90
    server.wait_for({"HTTPService", "GRPCInferenceService"}, deadline)
    try:
        _wait_live(server.http_url, {"hk": "hv"}, proc, deadline)
    except RuntimeError:
        server.stop()
        raise RuntimeError(server.output()) from None
    return server


def start_reference(repo: Path, *args: str) -> ReferenceTriton:
    """Real Triton serving ``write_repo``'s repository; ready once its ``params`` model is (the
    Python backend's stub starts after live), asked with the health key it may restrict."""
    return ReferenceTriton(
        require_reference(),
        repo,
        *args,
        timeout=150,
        ready=lambda ref: http_status(ref.http_url, "/v2/models/params/ready", {"hk": "hv"}) == 200,
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("restricted_repo"))


@pytest.fixture(scope="module", params=TRANSPORTS)
def server(request: pytest.FixtureRequest, repo: Path) -> Iterator[Server]:
    s = start_tritonlite(repo, request.param, *RESTRICTIONS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference(repo: Path) -> Iterator[ReferenceTriton]:
    r = start_reference(repo, *RESTRICTIONS)
    yield r
    r.stop()


# -- the requests ----------------------------------------------------------------------------------
def http_call(
    url: str, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
) -> tuple[int, str]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(method, path, body=body.encode() or None, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status >= 400 and data.startswith(b"{"):
        return resp.status, json.loads(data).get("error", "")
    return resp.status, ""


def grpc_call(url: str, path: str, metadata: list[tuple[str, str]]) -> tuple[str, str]:
    """(status name, details) of one RPC by its registry path."""
    with grpc.insecure_channel(url) as ch:
        try:
            if path == HEALTH_CHECK:
                health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), metadata=metadata, timeout=30
                )
            elif path == WATCH:
                it = health_pb2_grpc.HealthStub(ch).Watch(
                    health_pb2.HealthCheckRequest(), metadata=metadata, timeout=30
                )
                next(it)
                it.cancel()
            elif path == STREAM:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
                replies = list(
                    stub.ModelStreamInfer(iter([infer_request()]), metadata=metadata, timeout=30)
                )
                assert len(replies) == 1 and not replies[0].error_message, replies
            else:
                name = path.rsplit("/", 1)[1]
                stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
                getattr(stub, name)(GRPC_CASES[name], metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or ""
    return "OK", ""


def grpc_paths() -> list[str]:
    return [f"/{SERVICE_NAME}/{m.name}" for m in service.methods] + [HEALTH_CHECK, WATCH]


# -- coverage: every route and RPC has a group and a case here -------------------------------------
def test_every_http_route_has_a_group_and_a_case() -> None:
    for pattern, methods in app._ROUTES:
        for method, handler in methods.items():
            assert handler.__name__ in restrict.HTTP_HANDLER_GROUPS, handler.__name__
            assert any(m == method and pattern.fullmatch(p) for m, p, _ in HTTP_CASES), (
                f"no case for {method} {pattern.pattern}"
            )
    assert set(restrict.HTTP_HANDLER_GROUPS.values()) == set(restrict.GROUPS)


def test_every_rpc_has_a_group_and_a_case() -> None:
    every_group = tuple(f"--grpc-restricted-protocol={g}:k=v" for g in restrict.GROUPS)
    options = cli.options_from_args(["--model-repository", ".", *every_group])
    registry = servicer.methods(Any, options)  # (the registry never calls the core)
    assert set(registry) == set(grpc_paths())
    for path, method in registry.items():
        assert path in restrict.GRPC_METHOD_GROUPS, path
        name = path.rsplit("/", 1)[1]
        assert path in (HEALTH_CHECK, WATCH, STREAM) or name in GRPC_CASES, path
        handler = method.unary or method.stream
        assert handler is not None and handler.__name__ == "guarded", path
    assert set(restrict.GRPC_METHOD_GROUPS) == set(grpc_paths())


def test_a_handler_without_a_group_stops_the_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(restrict.HTTP_HANDLER_GROUPS, "live")
    with pytest.raises(RuntimeError, match="HTTP handler 'live' has no restriction group"):
        app._guards({})


# -- HTTP ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "body"), HTTP_CASES)
def test_http_route_needs_its_key(server: Server, method: str, path: str, body: str) -> None:
    group = route_group(method, path)
    key, value = http_key(group)
    other = ("ik", "iv") if key == "hk" else ("hk", "hv")
    denied = (403, f"This API is restricted, expecting header '{key}'")
    assert http_call(server.http_url, method, path, body) == denied
    assert http_call(server.http_url, method, path, body, {key: value + "x"}) == denied
    assert http_call(server.http_url, method, path, body, {other[0]: other[1]}) == denied
    status, message = http_call(server.http_url, method, path, body, {key.upper(): value})
    assert status != 403, message


def test_http_restriction_comes_before_405_and_after_404(server: Server) -> None:
    url = server.http_url
    assert http_call(url, "DELETE", "/v2/health/live") == (
        403,
        "This API is restricted, expecting header 'hk'",
    )
    assert http_call(url, "DELETE", "/v2/health/live", headers={"hk": "hv"}) == (
        405,
        "Method Not Allowed",
    )
    assert http_call(url, "GET", "/v2/nothing") == (404, "Not Found")


def test_http_a_repeated_key_header_is_one_value(server: Server) -> None:
    # tritonlite reads a repeated header as its comma-joined value on every transport.
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("GET", "/v2/health/live")
    conn.putheader("hk", "hv")
    conn.putheader("hk", "hv")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 403, resp.read()
    conn.close()


def test_http_clients(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException, match="expecting header 'hk'"):
            client.get_server_metadata()
        assert client.is_server_live(headers={"hk": "hv"})
        assert client.get_model_config("params", headers={"hk": "hv"})["name"] == "params"
        inp = httpclient.InferInput("IN", [1], "FP32")
        inp.set_data_from_numpy(np.float32([3]))
        with pytest.raises(InferenceServerException, match="expecting header 'ik'"):
            client.infer("params", [inp])
        r = client.infer("params", [inp], headers={"ik": "iv"})
        assert r.as_numpy("OUT").tolist() == [3.0]
    finally:
        client.close()

    async def run() -> None:
        c = httpaio.InferenceServerClient(server.http_url)
        try:
            with pytest.raises(InferenceServerException, match="expecting header 'ik'"):
                await c.get_inference_statistics()
            stats = await c.get_inference_statistics(headers={"ik": "iv"})
            assert "model_stats" in stats
        finally:
            await c.close()

    asyncio.run(run())


# -- gRPC ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", grpc_paths())
def test_grpc_rpc_needs_its_metadata(server: Server, path: str) -> None:
    key, value = grpc_key(restrict.GRPC_METHOD_GROUPS[path])
    denied = ("UNAVAILABLE", f"This protocol is restricted, expecting header '{key}'")
    assert grpc_call(server.grpc_url, path, []) == denied
    assert grpc_call(server.grpc_url, path, [(key, value + "x")]) == denied
    status, details = grpc_call(server.grpc_url, path, [(key, value)])
    assert "restricted" not in details, (status, details)


def test_grpc_clients_and_stream(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(np.float32([5]))
    try:
        with pytest.raises(
            InferenceServerException, match="expecting header 'triton-grpc-protocol-gk'"
        ):
            client.is_server_ready()
        assert client.is_server_ready(headers={"triton-grpc-protocol-gk": "gv"})
        r = client.infer("params", [inp], headers={"triton-grpc-protocol-gk": "gv"})
        assert r.as_numpy("OUT").tolist() == [5.0]
        for headers, ok in (({}, False), ({"triton-grpc-protocol-gk": "gv"}, True)):
            results: queue.Queue[Any] = queue.Queue()

            def callback(result: Any, error: Any, results: queue.Queue[Any] = results) -> None:
                results.put(error or result)

            client.start_stream(callback, headers=headers)
            try:
                client.async_stream_infer("params", [inp])
            except InferenceServerException:
                assert not ok  # the stream ended before the request left (the callback has why)
            got = results.get(timeout=30)
            client.stop_stream()
            if ok:
                assert got.as_numpy("OUT").tolist() == [5.0]
            else:
                assert isinstance(got, InferenceServerException)
                assert (
                    "This protocol is restricted, expecting header "
                    "'triton-grpc-protocol-gk'" in str(got)
                )
    finally:
        client.close()

    async def run() -> None:
        c = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException, match="triton-grpc-protocol-gk2"):
                await c.get_model_repository_index()
            await c.get_model_repository_index(headers={"triton-grpc-protocol-gk2": "gv2"})
            ainp = grpcaio.InferInput("IN", [1], "FP32")
            ainp.set_data_from_numpy(np.float32([7]))

            async def requests() -> Any:
                yield {"model_name": "params", "inputs": [ainp]}

            got = []
            async for result, error in c.stream_infer(
                requests(), headers={"triton-grpc-protocol-gk": "gv"}
            ):
                got.append((result, error))
            assert got[0][1] is None and got[0][0].as_numpy("OUT").tolist() == [7.0]
        finally:
            await c.close()

    asyncio.run(run())


# -- the same against real Triton ------------------------------------------------------------------
def _outcomes(http_url: str, grpc_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method, path, body in HTTP_CASES:
        group = route_group(method, path)
        key, value = http_key(group)
        out[f"{method} {path}"] = http_call(http_url, method, path, body)
        out[f"{method} {path} wrong"] = http_call(http_url, method, path, body, {key: "no"})
        got = http_call(http_url, method, path, body, {key: value})
        out[f"{method} {path} key"] = "denied" if got[0] == 403 else "passed"
    out["DELETE /v2/health/live key"] = http_call(
        http_url, "DELETE", "/v2/health/live", headers={"hk": "hv"}
    )
    for path in grpc_paths():
        if path == WATCH:
            continue  # Triton 2.51 does not implement Health/Watch
        key, value = grpc_key(restrict.GRPC_METHOD_GROUPS[path])
        out[path] = grpc_call(grpc_url, path, [])
        details = grpc_call(grpc_url, path, [(key, value)])[1]
        out[path + " key"] = "denied" if "restricted" in details else "passed"
    return out


def test_same_as_triton(reference: ReferenceTriton, repo: Path) -> None:
    ours = start_tritonlite(repo, "native", *RESTRICTIONS)
    try:
        mine = _outcomes(ours.http_url, ours.grpc_url)
    finally:
        ours.stop()
    theirs = _outcomes(reference.http_url, reference.grpc_url)
    diff = {k: (theirs[k], mine[k]) for k in theirs if theirs[k] != mine[k]}
    assert not diff, diff


@pytest.mark.parametrize(
    "spec",
    [
        "--http-restricted-api=foo:a=b",
        "--http-restricted-api=health",
        "--http-restricted-api=health:a=",
        "--http-restricted-api=health,:a=b",
        "--grpc-restricted-protocol=nope:a=b",
        "--grpc-restricted-protocol=health,health:a=b",
    ],
)
def test_bad_specs_stop_startup_with_tritons_message(spec: str, repo: Path) -> None:
    stderr = refused_at_start(repo, spec)
    flag, _, value = spec.partition("=")
    expected = {
        "foo:a=b": "unknown restricted api 'foo'",
        "health": "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
        "Got health",
        "health:a=": "--http-restricted-api option format is '<config name>:<setting>=<value>'."
        " Got health:a=",
        "health,:a=b": "unknown restricted api ''",
        "nope:a=b": "unknown restricted protocol 'nope'",
        "health,health:a=b": "restricted protocol 'health' can not be specified in multiple "
        "config groups",
    }[value]
    assert f'Bad option: "{flag}". {expected}' in stderr, stderr
    base = reference_base()
    if base is not None:  # the same spec to real Triton: it refuses it with the same text
        out = subprocess.run(
            [tritonserver(base), f"--model-repository={repo}", spec],
            capture_output=True,
            text=True,
            timeout=60,
            env=reference_env(base),
        )
        assert out.returncode != 0
        assert re.search(
            re.escape(f'Bad option: "{flag}".') + r"\s+" + re.escape(expected),
            out.stdout + out.stderr,
        ), out.stdout[-500:] + out.stderr[-500:]

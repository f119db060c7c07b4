"""grpc.health.v1.Health over a real server, through grpc_health's own stub.

The health service is an entry of the servicer's registry like the inference RPCs; these
tests hold the grpc.aio transport (``--frontend=aio``) to the standard stub's view of it:
Check answers the server's readiness for any service name, Watch streams the status now and
again on every change until the client cancels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
from conftest import Server, start_server
from grpc_health.v1 import health_pb2, health_pb2_grpc
from repos import write_add_sub
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(90)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


_ARGS = (
    "--frontend=aio",
    "--model-control-mode=explicit",
    "--load-model=add_sub",
    "--allow-http=false",
    "--allow-metrics=false",
)


def _repo(repo: Path) -> Path:
    """add_sub, loaded at start; ``broken`` (no model file) can be asked to load, and fails."""
    write_add_sub(repo, "add_sub", 8)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(_repo(tmp_path_factory.mktemp("health_repo")), *_ARGS)
    yield s
    s.stop()


def test_check_is_serving_for_any_service_name(server: Server) -> None:
    with grpc.insecure_channel(server.grpc_url) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for name in ("", "inference.GRPCInferenceService", "anything"):
            r = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert r.status == SERVING


def test_check_rejects_an_unparseable_request(server: Server) -> None:
    with grpc.insecure_channel(server.grpc_url) as ch:
        check = ch.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as info:
            check(b"\x0a\xff", timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "failed to parse the HealthCheckRequest message" in (info.value.details() or "")
        assert (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
            == SERVING
        )


def test_watch_follows_readiness(tmp_path: Path, server_factory: Callable[..., Server]) -> None:
    """A failed load makes the server unready until the model loads (Triton's rule); the
    watch sees SERVING, NOT_SERVING, SERVING and stays open until cancelled."""
    server = server_factory(_repo(tmp_path), *_ARGS)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with grpc.insecure_channel(server.grpc_url) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=60)
        try:
            assert next(watch).status == SERVING
            with pytest.raises(InferenceServerException):
                client.load_model("broken")
            assert not client.is_server_ready()
            assert next(watch).status == NOT_SERVING
            write_add_sub(tmp_path, "broken", 8)  # fixed: its load now succeeds
            client.load_model("broken")
            assert client.is_server_ready()
            assert next(watch).status == SERVING
        finally:
            watch.cancel()
        with pytest.raises(grpc.RpcError) as info:
            next(watch)
        assert info.value.code() == grpc.StatusCode.CANCELLED
    assert client.is_server_live()
    client.close()

"""The gRPC servicer's registry, driven without a transport.

``servicer.methods(core, options)`` is what grpc.aio and the native wire layer both serve.
Here its handlers are called directly with ``MemCall``, an in-memory ``GrpcCall``, over a real
``InferenceCore`` serving the ONNX ``add_sub`` from the ``onnx_repo`` fixture: request bytes
in, response bytes (or a raised error) out, so what a handler does is held apart from what a
transport does with it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grpc_health.v1 import health_pb2

from tritonlite._proto import SERVICE_NAME, pb, service
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.core.core import InferenceCore
from tritonlite.frontends.base.call import GrpcCall, GrpcMethods
from tritonlite.frontends.base.grpc_errors import STATUS
from tritonlite.frontends.grpc import servicer
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(60)

PREFIX = f"/{SERVICE_NAME}/"
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)


class MemCall:
    """A ``GrpcCall`` in memory: scripted metadata, peer and request stream; records the rest.

    ``incoming`` is what ``read()`` returns, in order (put ``None`` for the half-close);
    ``written`` collects ``write()``; ``finish()`` runs the done callbacks, as a transport
    does once the call has ended.
    """

    def __init__(
        self,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        local: bool = True,
        incoming: Sequence[bytes | None] = (),
    ) -> None:
        self._metadata = list(metadata)
        self.local = local
        self.compression: list[str | None] = []
        self.done: list[Callable[[], None]] = []
        self.incoming: asyncio.Queue[bytes | None] = asyncio.Queue()
        for m in incoming:
            self.incoming.put_nowait(m)
        self.written: list[bytes] = []
        self.wrote = asyncio.Event()

    def metadata(self) -> Sequence[tuple[str, str | bytes]]:
        return self._metadata

    def peer_is_local(self) -> bool:
        return self.local

    def set_compression(self, algorithm: str | None) -> None:
        self.compression.append(algorithm)

    def time_remaining(self) -> float | None:
        return None

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self.done.append(fn)

    async def read(self) -> bytes | None:
        return await self.incoming.get()

    async def write(self, message: bytes) -> None:
        self.written.append(message)
        self.wrote.set()

    def finish(self) -> None:
        for fn in self.done:
            fn()


def _as_call(call: MemCall) -> GrpcCall:
    return call  # mypy checks here that MemCall implements the interface


def run(
    repo: Path, body: Callable[[InferenceCore, GrpcMethods], Awaitable[None]], **options: Any
) -> None:
    """Start a core serving ``add_sub`` from ``repo``, build the registry, run ``body``."""

    async def main() -> None:
        opts = ServerOptions(
            model_repositories=(repo,),
            model_control_mode="explicit",
            load_models=("add_sub",),
            **options,
        )
        core = InferenceCore(opts)
        try:
            assert await core.start() == []
            await body(core, servicer.methods(core, opts))
        finally:
            await core.stop()

    asyncio.run(main())


async def unary(
    registry: GrpcMethods, method: str, request: Any, call: MemCall | None = None
) -> bytes:
    entry = registry[method if method.startswith("/") else PREFIX + method]
    assert entry.unary is not None and entry.stream is None
    data = request if isinstance(request, bytes) else request.SerializeToString()
    return await entry.unary(data, _as_call(call or MemCall()))


def infer_request(model: str = "add_sub", req_id: str = "1") -> Any:
    req = pb.ModelInferRequest(model_name=model, id=req_id)
    for name, arr in (("INPUT0", A), ("INPUT1", B)):
        req.inputs.add(name=name, datatype="FP32", shape=list(arr.shape))
        req.raw_input_contents.append(arr.tobytes())
    return req


def outputs(resp: Any) -> dict[str, np.ndarray[Any, Any]]:
    return {
        o.name: np.frombuffer(raw, np.float32).reshape(tuple(o.shape))
        for o, raw in zip(resp.outputs, resp.raw_output_contents)
    }


def test_registry_covers_the_service_and_health(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        expected = {PREFIX + m.name for m in service.methods}
        expected |= {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}
        assert set(registry) == expected
        streams = {path for path, m in registry.items() if m.stream is not None}
        assert streams == {PREFIX + "ModelStreamInfer", "/grpc.health.v1.Health/Watch"}
        for m in registry.values():
            assert (m.unary is None) != (m.stream is None)

    run(onnx_repo, body)


def test_health_and_metadata(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        live = pb.ServerLiveResponse.FromString(
            await unary(registry, "ServerLive", pb.ServerLiveRequest())
        )
        assert live.live
        ready = pb.ServerReadyResponse.FromString(await unary(registry, "ServerReady", b""))
        assert ready.ready
        model = pb.ModelReadyResponse.FromString(
            await unary(registry, "ModelReady", pb.ModelReadyRequest(name="add_sub"))
        )
        assert model.ready
        md = pb.ModelMetadataResponse.FromString(
            await unary(registry, "ModelMetadata", pb.ModelMetadataRequest(name="add_sub"))
        )
        assert (md.name, list(md.versions), md.platform) == ("add_sub", ["1"], "onnxruntime_onnx")
        assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [
            ("INPUT0", "FP32", [-1, 16]),
            ("INPUT1", "FP32", [-1, 16]),
        ]
        config = pb.ModelConfigResponse.FromString(
            await unary(registry, "ModelConfig", pb.ModelConfigRequest(name="add_sub"))
        )
        assert config.config.max_batch_size == 8
        index = pb.RepositoryIndexResponse.FromString(
            await unary(registry, "RepositoryIndex", pb.RepositoryIndexRequest(ready=True))
        )
        assert [(m.name, m.state) for m in index.models] == [("add_sub", "READY")]
        with pytest.raises(TritonliteError) as info:
            await unary(registry, "ModelReady", pb.ModelReadyRequest(name="nope"))
        assert STATUS[info.value.code] == 5  # NOT_FOUND

    run(onnx_repo, body)


def test_model_infer(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        call = MemCall()
        resp = pb.ModelInferResponse.FromString(
            await unary(registry, "ModelInfer", infer_request(req_id="42"), call)
        )
        assert (resp.model_name, resp.model_version, resp.id) == ("add_sub", "1", "42")
        out = outputs(resp)
        np.testing.assert_array_equal(out["OUTPUT0"], A + B)
        np.testing.assert_array_equal(out["OUTPUT1"], A - B)
        assert call.compression == [] and call.done == []  # no compression, no trace
        stats = pb.ModelStatisticsResponse.FromString(
            await unary(registry, "ModelStatistics", pb.ModelStatisticsRequest(name="add_sub"))
        )
        assert stats.model_stats[0].inference_stats.success.count == 1

    run(onnx_repo, body)


@pytest.mark.parametrize(
    "request_bytes,code,text",
    [
        (
            infer_request("nope").SerializeToString(),
            ErrorCode.NOT_FOUND,
            "Request for unknown model: 'nope' is not found",
        ),
        (b"\xff\xff\xff", ErrorCode.INVALID_ARG, "failed to parse the ModelInferRequest message"),
    ],
    ids=["unknown-model", "garbage"],
)
def test_model_infer_errors_are_raised(
    onnx_repo: Path, request_bytes: bytes, code: ErrorCode, text: str
) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        with pytest.raises(TritonliteError) as info:
            await unary(registry, "ModelInfer", request_bytes)
        assert info.value.code == code and text in info.value.message
        # the core still serves
        assert outputs(
            pb.ModelInferResponse.FromString(await unary(registry, "ModelInfer", infer_request()))
        )["OUTPUT0"].shape == (1, 16)

    run(onnx_repo, body)


def test_unparseable_message_is_invalid_argument(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        for method in ("ModelReady", "RepositoryModelLoad", "/grpc.health.v1.Health/Check"):
            with pytest.raises(TritonliteError) as info:
                await unary(registry, method, b"\x0a\xff")
            assert info.value.code == ErrorCode.INVALID_ARG
            assert "failed to parse the" in info.value.message

    run(onnx_repo, body)


@pytest.mark.parametrize(
    "level,algorithm", [("low", "gzip"), ("medium", "deflate"), ("high", "deflate")]
)
def test_response_compression_goes_through_the_call(
    onnx_repo: Path, level: str, algorithm: str
) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        call = MemCall()
        await unary(registry, "ModelInfer", infer_request(), call)
        assert call.compression == [algorithm]
        stream = MemCall(incoming=[infer_request().SerializeToString(), None])
        entry = registry[PREFIX + "ModelStreamInfer"]
        assert entry.stream is not None
        await entry.stream(_as_call(stream))
        assert stream.compression == [algorithm] and len(stream.written) == 1
        call = MemCall()  # only inference responses are compressed
        await unary(registry, "ServerLive", b"", call)
        assert call.compression == []

    run(onnx_repo, body, grpc_infer_response_compression_level=level)


def test_trace_send_stamps_at_the_calls_end(onnx_repo: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"

    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        call = MemCall()
        await unary(registry, "ModelInfer", infer_request(), call)
        assert len(call.done) == 1  # the trace waits for the call to end
        call.finish()

    run(
        onnx_repo,
        body,
        trace_level=("TIMESTAMPS",),
        trace_rate=1,
        trace_count=1,
        trace_file=str(trace_file),
    )
    (written,) = tmp_path.glob("trace.json*")  # trace_count 1: an index file once it is done
    names = [ts["name"] for t in json.loads(written.read_text()) for ts in t.get("timestamps", [])]
    assert names[0] == "REQUEST_START"
    assert names[-5:] == [
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "INFER_RESPONSE_COMPLETE",
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ]


def test_shm_register_asks_the_call_for_peer_locality(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        req = pb.SystemSharedMemoryRegisterRequest(name="r", key="/tl_servicer_none", byte_size=64)
        with pytest.raises(TritonliteError) as info:  # --allow-client-shm=local (default)
            await unary(registry, "SystemSharedMemoryRegister", req, MemCall(local=False))
        assert info.value.code == ErrorCode.UNSUPPORTED
        with pytest.raises(TritonliteError) as info:  # local: allowed, then the key is checked
            await unary(registry, "SystemSharedMemoryRegister", req, MemCall(local=True))
        assert "Unable to open shared memory region" in info.value.message
        status = pb.SystemSharedMemoryStatusResponse.FromString(
            await unary(registry, "SystemSharedMemoryStatus", b"")
        )
        assert not status.regions

    run(onnx_repo, body)


async def _stream(registry: GrpcMethods, call: MemCall) -> list[Any]:
    entry = registry[PREFIX + "ModelStreamInfer"]
    assert entry.stream is not None and entry.unary is None
    await entry.stream(_as_call(call))
    return [pb.ModelStreamInferResponse.FromString(m) for m in call.written]


def test_stream_answers_in_order_and_reports_errors_in_band(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        call = MemCall(
            incoming=[
                infer_request(req_id="a").SerializeToString(),
                infer_request("nope", "b").SerializeToString(),
                infer_request(req_id="c").SerializeToString(),
                None,
            ]
        )
        got = await _stream(registry, call)
        assert [m.infer_response.id for m in got] == ["a", "b", "c"]
        assert got[1].error_message == "Request for unknown model: 'nope' is not found"
        np.testing.assert_array_equal(outputs(got[2].infer_response)["OUTPUT1"], A - B)
        assert got[0].infer_response.parameters["triton_final_response"].bool_param

    run(onnx_repo, body)


def test_stream_with_triton_grpc_error_ends_with_the_status(onnx_repo: Path) -> None:
    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        call = MemCall(
            metadata=[("triton_grpc_error", "true")],
            incoming=[
                infer_request(req_id="a").SerializeToString(),
                infer_request("nope", "b").SerializeToString(),
            ],
        )
        with pytest.raises(TritonliteError) as info:  # never half-closed: the error ends it
            await _stream(registry, call)
        assert info.value.code == ErrorCode.NOT_FOUND
        assert [
            pb.ModelStreamInferResponse.FromString(m).infer_response.id for m in call.written
        ] == ["a"]

    run(onnx_repo, body)


def test_health_check_and_watch(onnx_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servicer, "WATCH_POLL_S", 0.01)
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING

    async def body(core: InferenceCore, registry: GrpcMethods) -> None:
        r = health_pb2.HealthCheckResponse.FromString(
            await unary(
                registry,
                "/grpc.health.v1.Health/Check",
                health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"),
            )
        )
        assert r.status == serving
        watch = registry["/grpc.health.v1.Health/Watch"].stream
        assert watch is not None
        call = MemCall(incoming=[health_pb2.HealthCheckRequest().SerializeToString(), None])
        task = asyncio.ensure_future(watch(_as_call(call)))

        async def statuses(n: int) -> list[int]:
            while len(call.written) < n:
                call.wrote.clear()
                await asyncio.wait_for(call.wrote.wait(), 10)
            return [health_pb2.HealthCheckResponse.FromString(m).status for m in call.written]

        assert await statuses(1) == [serving]
        core.exiting = True
        assert await statuses(2) == [serving, not_serving]
        core.exiting = False
        assert await statuses(3) == [serving, not_serving, serving]
        assert not task.done()  # a watch lasts until the client cancels it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        r = health_pb2.HealthCheckResponse.FromString(
            await unary(registry, "/grpc.health.v1.Health/Check", b"")
        )
        assert r.status == serving

    run(onnx_repo, body)


# -- the grpc.aio adapter (server.py) over a registry of test handlers ----------------------------
def test_aio_adapter(caplog: pytest.LogCaptureFixture) -> None:
    """AioCall and the status mapping, through a real grpc.aio server and client."""
    import grpc

    from tritonlite.contracts.errors import not_found
    from tritonlite.frontends.base.call import RpcError
    from tritonlite.frontends.grpc.server import generic_handler

    ended = asyncio.Event()

    async def info(request: bytes, call: GrpcCall) -> bytes:
        call.add_done_callback(ended.set)
        md = {
            k: v if isinstance(v, str) else v.hex()
            for k, v in call.metadata()
            if k.startswith("x-")
        }
        return json.dumps(
            {
                "request": request.decode(),
                "metadata": md,
                "local": call.peer_is_local(),
                "remaining": call.time_remaining(),
            }
        ).encode()

    async def fail(request: bytes, call: GrpcCall) -> bytes:
        if request == b"rpc":
            raise RpcError(9, "precondition text")
        if request == b"core":
            raise not_found("Request for unknown model: 'm' is not found")
        raise ValueError("boom")

    async def echo(call: GrpcCall) -> None:
        while (msg := await call.read()) is not None:
            await call.write(msg.upper())
        if ("x-end", "error") in call.metadata():
            raise RpcError(10, "ended with an error")

    registry: GrpcMethods = {
        "/t.S/Info": servicer.Method(unary=info),
        "/t.S/Fail": servicer.Method(unary=fail),
        "/t.S/Echo": servicer.Method(stream=echo),
    }

    def ident(b: bytes) -> bytes:
        return b

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((generic_handler(registry),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                call_info = ch.unary_unary(
                    "/t.S/Info", request_serializer=ident, response_deserializer=ident
                )
                got = json.loads(
                    await call_info(
                        b"hi", metadata=(("x-a", "1"), ("x-b-bin", b"\x01\x02")), timeout=30
                    )
                )
                assert got["request"] == "hi" and got["local"] is True
                assert got["metadata"] == {"x-a": "1", "x-b-bin": "0102"}
                assert 0 < got["remaining"] <= 31  # grpc-core rounds the grpc-timeout it sends up
                await asyncio.wait_for(ended.wait(), 10)
                assert json.loads(await call_info(b""))["remaining"] is None

                fail_call = ch.unary_unary(
                    "/t.S/Fail", request_serializer=ident, response_deserializer=ident
                )
                for req, code, details in (
                    (b"rpc", grpc.StatusCode.FAILED_PRECONDITION, "precondition text"),
                    (
                        b"core",
                        grpc.StatusCode.NOT_FOUND,
                        "Request for unknown model: 'm' is not found",
                    ),
                    (b"other", grpc.StatusCode.INTERNAL, "internal error: ValueError: boom"),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await fail_call(req, timeout=10)
                    assert (err.value.code(), err.value.details()) == (code, details)

                echo_call = ch.stream_stream(
                    "/t.S/Echo", request_serializer=ident, response_deserializer=ident
                )
                assert [m async for m in echo_call(iter([b"a", b"b"]))] == [b"A", b"B"]
                bad = echo_call(iter([b"c"]), metadata=(("x-end", "error"),))
                assert await bad.read() == b"C"
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await bad.read()
                assert (err.value.code(), err.value.details()) == (
                    grpc.StatusCode.ABORTED,
                    "ended with an error",
                )
                unknown = ch.unary_unary(
                    "/t.S/Nope", request_serializer=ident, response_deserializer=ident
                )
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await unknown(b"", timeout=10)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        finally:
            await server.stop(None)

    with caplog.at_level("ERROR", logger="tritonlite"):
        asyncio.run(main())
    logged = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert len(logged) == 1 and "/t.S/Fail" in logged[0].getMessage()
    assert logged[0].exc_info is not None  # with the traceback, once

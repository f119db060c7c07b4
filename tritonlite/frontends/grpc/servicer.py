"""inference.GRPCInferenceService and grpc.health.v1.Health over a ``GrpcCall``.

Each unary RPC is ``async def X(request: bytes, call: GrpcCall) -> bytes``: parse the message
with our private-pool classes (tritonclient's generated modules live in the default pool;
PROTOCOL §2.1), make one core call, serialize. ModelInfer and ModelStreamInfer work on the
bytes through ``codec`` instead. Errors are raised (``TritonliteError``, ``RpcError``); the
transport maps them to a status through ``errors.STATUS``. Nothing here knows which
transport carries the call (grpc.aio or the native wire layer): ``methods()`` builds the
registry both serve.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, message
from grpc_health.v1 import health_pb2

from tritonlite._proto import SERVICE_NAME, pb, service
from tritonlite.contracts.errors import invalid_arg, unsupported
from tritonlite.contracts.versions import parse_version
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base import restrict
from tritonlite.frontends.base.call import (
    GrpcCall,
    GrpcMethods,
    Message,
    StreamHandler,
    UnaryHandler,
)
from tritonlite.frontends.base.forward import grpc_forward
from tritonlite.frontends.grpc import codec
from tritonlite.frontends.grpc.codec import decode_infer, encode_infer, parse
from tritonlite.frontends.grpc.stream import model_stream_infer
from tritonlite.frontends.grpc.tracing import trace_unary
from tritonlite.options import ServerOptions

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
HEALTH_SERVICE = "grpc.health.v1.Health"
WATCH_POLL_S = 1.0  # how often Health/Watch looks at readiness

# --grpc-infer-response-compression-level -> the algorithm grpc-core picks for that level
# when the client accepts gzip and deflate (its ranking: low = gzip, medium/high = deflate).
_COMPRESSION: dict[str, str | None] = {
    "none": None,
    "low": "gzip",
    "medium": "deflate",
    "high": "deflate",
}


@dataclass(slots=True)
class Method:
    """A registry entry (``frontends.base.call.GrpcMethod``): exactly one handler is set."""

    unary: UnaryHandler | None = None
    stream: StreamHandler | None = None


def _parse(cls: Any, data: bytes) -> Any:
    try:
        return cls.FromString(data)
    except message.DecodeError as exc:
        raise invalid_arg(f"failed to parse the {cls.DESCRIPTOR.name} message: {exc}") from None


def _version(text: str) -> int:
    return parse_version(text) if text else -1


class Servicer:
    """The RPCs of inference.GRPCInferenceService over one core."""

    def __init__(self, core: CoreAPI, options: ServerOptions) -> None:
        self.core = core
        self.compression = _COMPRESSION[options.grpc_infer_response_compression_level]
        self.forward = grpc_forward(options)

    # -- health and metadata --------------------------------------------------------------------
    async def ServerLive(self, request: bytes, call: GrpcCall) -> bytes:
        _parse(pb.ServerLiveRequest, request)
        return bytes(pb.ServerLiveResponse(live=self.core.is_live()).SerializeToString())

    async def ServerReady(self, request: bytes, call: GrpcCall) -> bytes:
        _parse(pb.ServerReadyRequest, request)
        return bytes(pb.ServerReadyResponse(ready=self.core.is_ready()).SerializeToString())

    async def ModelReady(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.ModelReadyRequest, request)
        ready = self.core.model_ready(r.name, _version(r.version))
        return bytes(pb.ModelReadyResponse(ready=ready).SerializeToString())

    async def ServerMetadata(self, request: bytes, call: GrpcCall) -> bytes:
        _parse(pb.ServerMetadataRequest, request)
        md = self.core.server_metadata()
        return bytes(
            pb.ServerMetadataResponse(
                name=md["name"],
                version=md["version"],
                extensions=md["extensions"],
            ).SerializeToString()
        )

    async def ModelMetadata(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.ModelMetadataRequest, request)
        md = self.core.model_metadata(r.name, _version(r.version))
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return bytes(
            pb.ModelMetadataResponse(
                name=md["name"],
                versions=md["versions"],
                platform=md["platform"],
                inputs=[tensor(**t) for t in md["inputs"]],
                outputs=[tensor(**t) for t in md["outputs"]],
            ).SerializeToString()
        )

    async def ModelConfig(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.ModelConfigRequest, request)
        config = self.core.model_config(r.name, _version(r.version))
        return bytes(pb.ModelConfigResponse(config=config).SerializeToString())

    async def ModelStatistics(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.ModelStatisticsRequest, request)
        name = r.name
        stats = self.core.statistics(name, _version(r.version) if name else -1)
        out = json_format.ParseDict(stats, pb.ModelStatisticsResponse())
        return bytes(out.SerializeToString())

    # -- inference ------------------------------------------------------------------------------
    async def ModelInfer(self, request: bytes, call: GrpcCall) -> Message:
        # The hot path: bytes in and out (see codec), the codec's functions bound at import;
        # ``call`` is touched only when needed.
        core = self.core
        recv_start = time.monotonic_ns() if core.trace.enabled else 0
        req = decode_infer(parse(request))
        recv_end = time.monotonic_ns() if recv_start else 0
        if self.forward is not None:
            self.forward.grpc(call.metadata(), req.parameters)
        resp = core.infer_now(req)  # the commonest request, answered at once; None: not covered
        if resp is None:
            resp = await core.infer(req, _DECOUPLED)
        msg = encode_infer(resp)
        if self.compression is not None:
            call.set_compression(self.compression)
        if req.trace is not None:
            trace_unary(call, req.trace, (recv_start, recv_end))
        return msg

    async def ModelStreamInfer(self, call: GrpcCall) -> None:
        forwarded: dict[str, Any] = {}
        if self.forward is not None:
            self.forward.grpc(call.metadata(), forwarded)
        await model_stream_infer(self.core, call, self.compression, forwarded)

    # -- model repository ----------------------------------------------------------------------
    async def RepositoryIndex(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.RepositoryIndexRequest, request)
        rows = self.core.repository_index(r.ready)
        out = json_format.ParseDict({"models": rows}, pb.RepositoryIndexResponse())
        return bytes(out.SerializeToString())

    async def RepositoryModelLoad(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.RepositoryModelLoadRequest, request)
        if r.repository_name:
            raise unsupported("'repository_name' specification is not supported")
        params: dict[str, Any] = {}
        for key, p in r.parameters.items():
            kind, value = codec.param_value(p)
            if key == "config" and kind != "string_param":
                raise invalid_arg("load parameter 'config' must be a string_param holding JSON")
            if key.startswith("file:") and kind != "bytes_param":
                raise invalid_arg(f"load parameter '{key}' must be a bytes_param")
            if key != "config" and not key.startswith("file:"):
                raise invalid_arg(f"unrecognized load parameter '{key}'")
            params[key] = value
        await self.core.load_model(r.model_name, params)
        return bytes(pb.RepositoryModelLoadResponse().SerializeToString())

    async def RepositoryModelUnload(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.RepositoryModelUnloadRequest, request)
        if r.repository_name:
            raise unsupported("'repository_name' specification is not supported")
        dependents = False
        p = r.parameters.get("unload_dependents")
        if p is not None:
            kind, dependents = codec.param_value(p)
            if kind != "bool_param":
                raise invalid_arg("'unload_dependents' must be a bool_param")
        await self.core.unload_model(r.model_name, dependents)
        return bytes(pb.RepositoryModelUnloadResponse().SerializeToString())

    # -- shared memory --------------------------------------------------------------------------
    async def SystemSharedMemoryStatus(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.SystemSharedMemoryStatusRequest, request)
        out = pb.SystemSharedMemoryStatusResponse()
        for region in self.core.shm.system_status(r.name):
            out.regions[region["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return bytes(out.SerializeToString())

    async def SystemSharedMemoryRegister(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.SystemSharedMemoryRegisterRequest, request)
        self.core.register_system_shm(r.name, r.key, r.offset, r.byte_size, call.peer_is_local())
        return bytes(pb.SystemSharedMemoryRegisterResponse().SerializeToString())

    async def SystemSharedMemoryUnregister(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.SystemSharedMemoryUnregisterRequest, request)
        self.core.shm.unregister_system(r.name)
        return bytes(pb.SystemSharedMemoryUnregisterResponse().SerializeToString())

    async def CudaSharedMemoryStatus(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.CudaSharedMemoryStatusRequest, request)
        out = pb.CudaSharedMemoryStatusResponse()
        for region in self.core.shm.cuda_status(r.name):
            out.regions[region["name"]].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(
                    name=region["name"],
                    device_id=region.get("device_id", 0),
                    byte_size=region.get("byte_size", 0),
                )
            )
        return bytes(out.SerializeToString())

    async def CudaSharedMemoryRegister(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.CudaSharedMemoryRegisterRequest, request)
        if r.device_id < 0:
            raise invalid_arg("'device_id' must be >= 0")
        self.core.register_cuda_shm(
            r.name, r.raw_handle, r.device_id, r.byte_size, call.peer_is_local()
        )
        return bytes(pb.CudaSharedMemoryRegisterResponse().SerializeToString())

    async def CudaSharedMemoryUnregister(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.CudaSharedMemoryUnregisterRequest, request)
        self.core.shm.unregister_cuda(r.name)
        return bytes(pb.CudaSharedMemoryUnregisterResponse().SerializeToString())

    # -- trace and logging ----------------------------------------------------------------------
    async def TraceSetting(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.TraceSettingRequest, request)
        model = r.model_name
        if model and model not in self.core.repository.models:
            raise invalid_arg(f"Request for unknown model : {model}")
        if r.settings:
            changes: dict[str, Any] = {}
            for key, sv in r.settings.items():
                values = list(sv.value)
                if not values:
                    changes[key] = None
                elif key == "trace_level":
                    changes[key] = values
                elif len(values) == 1:
                    changes[key] = values[0]
                else:
                    raise invalid_arg(f"expect only 1 value for '{key}', got {len(values)}")
            settings = self.core.trace.update(changes, model)
        else:
            settings = self.core.trace.get(model)
        out = pb.TraceSettingResponse()
        for key, value in settings.items():
            out.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
        return bytes(out.SerializeToString())

    async def LogSettings(self, request: bytes, call: GrpcCall) -> bytes:
        r = _parse(pb.LogSettingsRequest, request)
        if r.settings:
            changes = {key: codec.param_value(sv)[1] for key, sv in r.settings.items()}
            settings = self.core.logging.update(changes)
        else:
            settings = self.core.logging.get()
        out = pb.LogSettingsResponse()
        for key, value in settings.items():
            sv = out.settings[key]
            if isinstance(value, bool):
                sv.bool_param = value
            elif isinstance(value, int):
                sv.uint32_param = value
            else:
                sv.string_param = str(value)
        return bytes(out.SerializeToString())


class Health:
    """grpc.health.v1.Health computed from ``core.is_ready()`` on every call.

    Like Triton, the answer is the server's readiness whatever service name is asked about.
    """

    def __init__(self, core: CoreAPI) -> None:
        self.core = core

    def _status(self) -> int:
        if self.core.is_ready():
            return int(health_pb2.HealthCheckResponse.SERVING)
        return int(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def Check(self, request: bytes, call: GrpcCall) -> bytes:
        _parse(health_pb2.HealthCheckRequest, request)
        return bytes(health_pb2.HealthCheckResponse(status=self._status()).SerializeToString())

    async def Watch(self, call: GrpcCall) -> None:
        """Send the status now and again each time it changes, until the client cancels."""
        _parse(health_pb2.HealthCheckRequest, await call.read() or b"")
        last = None
        while True:
            status = self._status()
            if status != last:
                last = status
                await call.write(health_pb2.HealthCheckResponse(status=status).SerializeToString())
            await asyncio.sleep(WATCH_POLL_S)


def _restricted(registry: dict[str, Method], options: ServerOptions) -> GrpcMethods:
    """``registry`` with ``--grpc-restricted-protocol`` applied: each RPC of a restricted
    group checks its caller's metadata first (RuntimeError for an RPC without a group)."""
    restrictions = restrict.grpc_restrictions(options)
    out: GrpcMethods = {}
    for path, m in registry.items():
        group = restrict.group_of(restrict.GRPC_METHOD_GROUPS, path, "gRPC method")
        restriction = restrictions.get(group)
        if restriction is None:
            out[path] = m
        elif m.unary is not None:
            out[path] = Method(unary=restrict.guard_unary(m.unary, restriction))
        else:
            assert m.stream is not None
            out[path] = Method(stream=restrict.guard_stream(m.stream, restriction))
    return out


def methods(core: CoreAPI, options: ServerOptions) -> GrpcMethods:
    """The registry every transport serves: each RPC of the inference service descriptor and
    the health service, keyed ``/package.Service/Method``, behind the restrictions that
    ``options`` ask for (``frontends/base/restrict.py``)."""
    servicer = Servicer(core, options)
    health = Health(core)
    out: dict[str, Method] = {}
    for m in service.methods:
        fn = getattr(servicer, m.name)  # AttributeError: the proto has an RPC we do not serve
        if m.client_streaming or m.server_streaming:
            out[f"/{SERVICE_NAME}/{m.name}"] = Method(stream=fn)
        else:
            out[f"/{SERVICE_NAME}/{m.name}"] = Method(unary=fn)
    out[f"/{HEALTH_SERVICE}/Check"] = Method(unary=health.Check)
    out[f"/{HEALTH_SERVICE}/Watch"] = Method(stream=health.Watch)
    return _restricted(out, options)

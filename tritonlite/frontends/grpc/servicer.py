"""inference.GRPCInferenceService: each RPC decodes its message, makes one core call, encodes.

Registered through ``grpc.method_handlers_generic_handler`` with our private-pool message
classes (tritonclient's generated modules live in the default pool; PROTOCOL §2.1). Core
dicts come in the HTTP JSON shape and are converted here; errors become statuses through
``errors.STATUS``, the one table.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import grpc
from google.protobuf import json_format, message_factory

from tritonlite._proto import SERVICE_NAME, pb, service
from tritonlite.core.core import InferenceCore, parse_version
from tritonlite.errors import TritonliteError, invalid_arg, unsupported
from tritonlite.frontends.grpc import codec
from tritonlite.frontends.grpc.errors import STATUS
from tritonlite.frontends.grpc.stream import model_stream_infer
from tritonlite.frontends.grpc.tracing import trace_unary
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"

Unary = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]

# --grpc-infer-response-compression-level -> the algorithm grpc-core picks for that level
# when the client accepts gzip and deflate (its ranking: low = gzip, medium/high = deflate).
_COMPRESSION = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}


def peer_is_local(peer: str) -> bool:
    """Whether a grpc peer string ("ipv4:127.0.0.1:5", "ipv6:[::1]:5", "unix:...") is local."""
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return True
    if kind not in ("ipv4", "ipv6"):
        return False
    host = unquote(rest).rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _version(text: str) -> int:
    return parse_version(text) if text else -1


class Servicer:
    """The RPCs of inference.GRPCInferenceService over one InferenceCore."""

    def __init__(self, core: InferenceCore, options: ServerOptions) -> None:
        self.core = core
        self.compression = _COMPRESSION[options.grpc_infer_response_compression_level]

    # -- health and metadata --------------------------------------------------------------------
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.core.is_live())

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.core.is_ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        ready = self.core.model_ready(request.name, _version(request.version))
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        md = self.core.server_metadata()
        return pb.ServerMetadataResponse(name=md["name"], version=md["version"],
                                         extensions=md["extensions"])

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        md = self.core.model_metadata(request.name, _version(request.version))
        return pb.ModelMetadataResponse(
            name=md["name"], versions=md["versions"], platform=md["platform"],
            inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in md["inputs"]],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in md["outputs"]],
        )

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        config = self.core.model_config(request.name, _version(request.version))
        return pb.ModelConfigResponse(config=config)

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        name = request.name
        stats = self.core.statistics(name, _version(request.version) if name else -1)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    # -- inference ------------------------------------------------------------------------------
    async def ModelInfer(self, request: bytes, context: Any) -> bytes:
        # The hot path: bytes in and out (see codec), no wrapper, errors handled inline.
        try:
            recv_start = time.monotonic_ns() if self.core.trace.enabled else 0
            req = codec.decode_infer(codec.parse(request))
            recv_end = time.monotonic_ns() if recv_start else 0
            resp = await self.core.infer(req, _DECOUPLED)
            msg = codec.encode_infer(resp)
        except TritonliteError as exc:
            await context.abort(STATUS[exc.code], exc.message)
        except Exception as exc:
            log.exception("unexpected error in ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"internal error: {type(exc).__name__}: {exc}")
        if self.compression is not None:
            # the unary finish path ignores set_compression unless the initial metadata
            # (which carries the algorithm) is sent explicitly
            context.set_compression(self.compression)
            await context.send_initial_metadata(())
        if req.trace is not None:
            trace_unary(context, req.trace, (recv_start, recv_end))
        return msg

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> None:
        await model_stream_infer(self.core, request_iterator, context, self.compression)

    # -- model repository ----------------------------------------------------------------------
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        rows = self.core.repository_index(request.ready)
        return json_format.ParseDict({"models": rows}, pb.RepositoryIndexResponse())

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise unsupported("'repository_name' specification is not supported")
        params: dict[str, Any] = {}
        for key, p in request.parameters.items():
            kind, value = codec.param_value(p)
            if key == "config" and kind != "string_param":
                raise invalid_arg("load parameter 'config' must be a string_param holding JSON")
            if key.startswith("file:") and kind != "bytes_param":
                raise invalid_arg(f"load parameter '{key}' must be a bytes_param")
            if key != "config" and not key.startswith("file:"):
                raise invalid_arg(f"unrecognized load parameter '{key}'")
            params[key] = value
        await self.core.load_model(request.model_name, params)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise unsupported("'repository_name' specification is not supported")
        dependents = False
        p = request.parameters.get("unload_dependents")
        if p is not None:
            kind, dependents = codec.param_value(p)
            if kind != "bool_param":
                raise invalid_arg("'unload_dependents' must be a bool_param")
        await self.core.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory --------------------------------------------------------------------------
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        out = pb.SystemSharedMemoryStatusResponse()
        for r in self.core.shm.system_status(request.name):
            out.regions[r["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**r))
        return out

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self.core.register_system_shm(request.name, request.key, request.offset,
                                      request.byte_size, peer_is_local(context.peer()))
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.core.shm.unregister_system(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        out = pb.CudaSharedMemoryStatusResponse()
        for r in self.core.shm.cuda_status(request.name):
            out.regions[r["name"]].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(
                    name=r["name"], device_id=r.get("device_id", 0),
                    byte_size=r.get("byte_size", 0)))
        return out

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        if request.device_id < 0:
            raise invalid_arg("'device_id' must be >= 0")
        self.core.register_cuda_shm(request.name, request.raw_handle, request.device_id,
                                    request.byte_size, peer_is_local(context.peer()))
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.core.shm.unregister_cuda(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and logging ----------------------------------------------------------------------
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        model = request.model_name
        if model and model not in self.core.repository.models:
            raise invalid_arg(f"Request for unknown model : {model}")
        if request.settings:
            changes: dict[str, Any] = {}
            for key, sv in request.settings.items():
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
        return out

    async def LogSettings(self, request: Any, context: Any) -> Any:
        if request.settings:
            changes = {key: codec.param_value(sv)[1] for key, sv in request.settings.items()}
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
        return out


def _guard(fn: Unary) -> Unary:
    """Map TritonliteError (and anything unexpected, as INTERNAL) to the RPC's status."""

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(request, context)
        except TritonliteError as exc:
            await context.abort(STATUS[exc.code], exc.message)
        except Exception as exc:
            log.exception("unexpected error in %s", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"internal error: {type(exc).__name__}: {exc}")

    handler.__name__ = fn.__name__
    return handler


def generic_handler(core: InferenceCore, options: ServerOptions) -> grpc.GenericRpcHandler:
    """Every RPC of the service descriptor, bound to a Servicer over ``core``."""
    servicer = Servicer(core, options)
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        req_cls = message_factory.GetMessageClass(method.input_type)
        resp_cls = message_factory.GetMessageClass(method.output_type)
        fn = getattr(servicer, method.name)
        if method.name == "ModelStreamInfer":  # bytes both ways, like ModelInfer
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(fn)
        elif method.name == "ModelInfer":
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(fn)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _guard(fn),
                request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

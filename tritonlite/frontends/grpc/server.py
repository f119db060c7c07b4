"""The grpc.aio transport: serves the servicer's registry (``servicer.methods``) on grpc.aio.

Each registry entry becomes a grpc.aio method handler taking and returning raw bytes, whose
call is wrapped in an ``AioCall`` (the ``GrpcCall`` interface over grpc.aio's context);
``RpcError`` / ``TritonliteError`` raised by a handler end the call with the mapped status,
anything else with INTERNAL (logged once). It runs on the process's one event loop, beside
the HTTP front end.

Options follow Triton (PROTOCOL §2.2): message limits at INT32_MAX both ways (grpcio's 4 MiB
default is the most reported break), Triton's keepalive settings, and SO_REUSEPORT off unless
--reuse-grpc-port, so a port clash fails the start instead of silently sharing the port.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote

import grpc

from tritonlite.contracts.errors import TritonliteError
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.call import (
    GrpcMethods,
    InFlight,
    RpcError,
    StreamHandler,
    UnaryHandler,
)
from tritonlite.frontends.base.grpc_errors import (
    STATUS,
    UNIMPLEMENTED,
    UNKNOWN,
    internal_message,
    rejected,
)
from tritonlite.frontends.base.sockets import connection_cap, raise_nofile_limit
from tritonlite.frontends.grpc.servicer import methods
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")

MAX_MESSAGE = 2**31 - 1  # Triton's MAX_GRPC_MESSAGE_SIZE (INT32_MAX)


def server_options(opts: ServerOptions, nofile: int = 0) -> list[tuple[str, Any]]:
    """grpc channel arguments for the server (Triton's names and defaults), and the
    connection cap (--grpc-max-connections, lowered to fit ``nofile`` descriptors): grpc-core
    closes a connection past it at once."""
    out: list[tuple[str, Any]] = [
        (
            "grpc.max_allowed_incoming_connections",
            min(opts.grpc_max_connections, connection_cap(opts.grpc_max_connections, nofile)),
        ),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.so_reuseport", 1 if opts.reuse_grpc_port else 0),
        ("grpc.keepalive_time_ms", opts.grpc_keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", opts.grpc_keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(opts.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", opts.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            opts.grpc_http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", opts.grpc_http2_max_ping_strikes),
    ]
    if opts.grpc_max_connection_age_ms is not None:
        out.append(("grpc.max_connection_age_ms", opts.grpc_max_connection_age_ms))
    if opts.grpc_max_connection_age_grace_ms is not None:
        out.append(("grpc.max_connection_age_grace_ms", opts.grpc_max_connection_age_grace_ms))
    return out


def _credentials(opts: ServerOptions) -> grpc.ServerCredentials:
    assert opts.grpc_server_cert and opts.grpc_server_key
    cert = Path(opts.grpc_server_cert).read_bytes()
    key = Path(opts.grpc_server_key).read_bytes()
    root = None
    if opts.grpc_use_ssl_mutual:
        assert opts.grpc_root_cert
        root = Path(opts.grpc_root_cert).read_bytes()
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=opts.grpc_use_ssl_mutual
    )


# status codes (ints, as handlers raise them) -> grpc.aio's enum
_AIO_STATUS: dict[int, grpc.StatusCode] = {sc.value[0]: sc for sc in grpc.StatusCode}
_AIO_COMPRESSION = {
    None: grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
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


class AioCall:
    """``GrpcCall`` over a grpc.aio servicer context (one per call, dropped when it ends)."""

    __slots__ = ("_context", "compressed")

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context
        self.compressed = False  # a unary response must then send its initial metadata

    def metadata(self) -> Sequence[tuple[str, str | bytes]]:
        return self._context.invocation_metadata() or ()

    def peer_is_local(self) -> bool:
        return peer_is_local(self._context.peer())

    def set_compression(self, algorithm: str | None) -> None:
        self._context.set_compression(_AIO_COMPRESSION[algorithm])
        self.compressed = algorithm is not None

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()  # type: ignore[no-any-return]

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self._context.add_done_callback(lambda _context: fn())

    async def read(self) -> bytes | None:
        msg = await self._context.read()
        return None if msg is grpc.aio.EOF else msg

    async def write(self, message: bytes) -> None:
        await self._context.write(message)


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, path: str) -> NoReturn:
    """End the call with the status ``exc`` maps to (raises grpc.aio's AbortError); a
    client's mistake is counted and logged (rate-limited) as a rejection."""
    if isinstance(exc, RpcError):
        code, message = exc.code, exc.message
    elif isinstance(exc, TritonliteError):
        code, message = STATUS.get(exc.code, UNKNOWN), exc.message
    else:
        log.error("unexpected error in %s", path, exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, internal_message(exc))
        raise AssertionError("context.abort returned")  # it always raises
    rejected(code, message)
    await context.abort(_AIO_STATUS.get(code, grpc.StatusCode.UNKNOWN), message)
    raise AssertionError("context.abort returned")


def _unary(fn: UnaryHandler, path: str, inflight: InFlight) -> grpc.RpcMethodHandler:
    # the hot path (ModelInfer): keep to one small object and a few attribute reads
    async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        call = AioCall(context)
        inflight.enter()
        try:
            response = await fn(request, call)
        except Exception as exc:
            await _abort(context, exc, path)
        finally:
            inflight.leave()
        if call.compressed:
            # the unary finish path ignores set_compression unless the initial metadata
            # (which carries the algorithm) is sent explicitly
            await context.send_initial_metadata(())
        return b"".join(response) if isinstance(response, list) else response

    return grpc.unary_unary_rpc_method_handler(handler)


def _stream(fn: StreamHandler, path: str) -> grpc.RpcMethodHandler:
    # messages are read with context.read(): the request iterator is never started
    async def handler(requests: Any, context: grpc.aio.ServicerContext) -> None:
        try:
            await fn(AioCall(context))
        except Exception as exc:
            await _abort(context, exc, path)

    return grpc.stream_stream_rpc_method_handler(handler)


_NOT_FOUND = "Method not found!"  # grpc-core's answer to a method nobody serves


def _unknown_method(path: str) -> grpc.RpcMethodHandler:
    """grpc-core's answer to ``path``, given here so that it is counted as a rejection; a
    stream handler, as it must not wait for a request message the client may never send."""

    async def handler(requests: Any, context: grpc.aio.ServicerContext) -> None:
        rejected(UNIMPLEMENTED, f"{_NOT_FOUND} {path}")
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, _NOT_FOUND)

    return grpc.stream_stream_rpc_method_handler(handler)


class _Registry(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of a ``GrpcMethods`` registry as one generic handler, raw bytes both
    ways (no (de)serializers: the handlers parse and serialize)."""

    def __init__(self, registry: GrpcMethods, inflight: InFlight) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        for path, method in registry.items():
            if method.unary is not None:
                self._handlers[path] = _unary(method.unary, path, inflight)
            elif method.stream is not None:
                self._handlers[path] = _stream(method.stream, path)

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._handlers.get(details.method)
        return _unknown_method(details.method) if handler is None else handler


def generic_handler(
    registry: GrpcMethods, inflight: InFlight | None = None
) -> grpc.GenericRpcHandler:
    """The grpc.aio handler serving ``registry`` (``server.add_generic_rpc_handlers``);
    ``inflight`` counts the unary calls being served (a graceful stop waits for them; a
    stream's requests are the core's to drain)."""
    return _Registry(registry, inflight if inflight is not None else InFlight())


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def start_grpc(
    core: CoreAPI, opts: ServerOptions, inflight: InFlight | None = None
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC front end on grpc.aio (the inference and the health service); returns
    the server and the port it bound (port 0 = any free). ``inflight`` counts open unary
    calls.

    Raises RuntimeError when the address can not be bound, OSError when a TLS file can not
    be read.
    """
    server = grpc.aio.server(options=server_options(opts, raise_nofile_limit()))
    try:
        server.add_generic_rpc_handlers((generic_handler(methods(core, opts), inflight),))
        address = _address(opts.grpc_address, opts.grpc_port)
        if opts.grpc_use_ssl:
            port = server.add_secure_port(address, _credentials(opts))
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise RuntimeError(f"failed to bind the gRPC service to {address}")
        await server.start()
    except BaseException:
        await server.stop(None)
        raise
    _watch(server)
    return server, port


_WATCHERS: set[asyncio.Task[None]] = set()  # strong references to the running watchers


def _watch(server: grpc.aio.Server) -> None:
    """Say so in the log when grpc.aio's server stops by itself: an exception in its own
    serving loop (e.g. a request :path that is not UTF-8, README's Front ends) shuts it down,
    and every gRPC call is refused from then on."""

    async def watch() -> None:
        try:
            await server.wait_for_termination()
        except Exception as exc:  # noqa: BLE001 - whatever ended grpc.aio's serving loop
            log.error(
                "the gRPC front end (grpc.aio) stopped: %s: %s; gRPC calls are refused from "
                "now on (--frontend=native has its own gRPC transport)",
                type(exc).__name__,
                exc,
            )

    task = asyncio.ensure_future(watch())
    _WATCHERS.add(task)
    task.add_done_callback(_WATCHERS.discard)

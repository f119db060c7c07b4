"""The grpc.aio server: Triton's channel options, TLS, inference service and health service.

It runs on the process's one event loop, beside the HTTP front end. Options follow Triton
(PROTOCOL §2.2): message limits at INT32_MAX both ways (grpcio's 4 MiB default is the most
reported break), Triton's keepalive settings, and SO_REUSEPORT off unless --reuse-grpc-port,
so a port clash fails the start instead of silently sharing the port.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tritonlite.core.core import InferenceCore
from tritonlite.frontends.grpc.servicer import generic_handler
from tritonlite.options import ServerOptions

MAX_MESSAGE = 2**31 - 1  # Triton's MAX_GRPC_MESSAGE_SIZE (INT32_MAX)
_WATCH_POLL_S = 1.0


def server_options(opts: ServerOptions) -> list[tuple[str, Any]]:
    """grpc channel arguments for the server (Triton's names and defaults)."""
    out: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.so_reuseport", 1 if opts.reuse_grpc_port else 0),
        ("grpc.keepalive_time_ms", opts.grpc_keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", opts.grpc_keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(opts.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", opts.grpc_http2_max_pings_without_data),
        ("grpc.http2.min_recv_ping_interval_without_data_ms",
         opts.grpc_http2_min_recv_ping_interval_without_data_ms),
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
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=root,
                                       require_client_auth=opts.grpc_use_ssl_mutual)


class HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """grpc.health.v1.Health computed from ``core.is_ready()`` on every call.

    Like Triton, the answer is the server's readiness whatever service name is asked about.
    """

    def __init__(self, core: InferenceCore) -> None:
        self.core = core

    def _status(self) -> Any:
        if self.core.is_ready():
            return health_pb2.HealthCheckResponse.SERVING
        return health_pb2.HealthCheckResponse.NOT_SERVING

    async def Check(self, request: Any, context: Any) -> Any:
        return health_pb2.HealthCheckResponse(status=self._status())

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        last = None
        while True:
            status = self._status()
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)
            await asyncio.sleep(_WATCH_POLL_S)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def start_grpc(core: InferenceCore, opts: ServerOptions) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC front end; returns the server and the port it bound (port 0 = any free).

    Raises RuntimeError when the address can not be bound, OSError when a TLS file can not
    be read.
    """
    server = grpc.aio.server(options=server_options(opts))
    try:
        server.add_generic_rpc_handlers((generic_handler(core, opts),))
        health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(core), server)
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
    return server, port

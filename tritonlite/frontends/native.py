"""``--frontend=native``: the HTTP handlers and the gRPC servicer over tritonlite's wire layer.

HTTP/1.1 (``wire/http1``) and gRPC (``wire/grpc_native`` over ``wire/h2``) listen on their own
ports, or, when ``--http-port`` equals ``--grpc-port``, on one listener whose connections are
told apart by their first bytes or their TLS ALPN choice (``wire/detect``). The handlers are
the same ones ``--frontend=aio`` runs over aiohttp and grpc.aio.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.call import GrpcMethods
from tritonlite.frontends.base.rejects import REJECTS
from tritonlite.frontends.base.sockets import bind, connection_cap, raise_nofile_limit
from tritonlite.frontends.grpc.servicer import methods
from tritonlite.frontends.http.app import make_dispatch
from tritonlite.frontends.tls import grpc_tls, http_tls
from tritonlite.frontends.wire.busypoll import BusyPoll
from tritonlite.frontends.wire.detect import DETECT_TIMEOUT_S, Detect, DetectPool
from tritonlite.frontends.wire.grpc_native import GrpcLimits, GrpcProtocol, NativeGrpcServer
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService, start_http_native
from tritonlite.frontends.wire.inflate import Inflater
from tritonlite.frontends.wire.keepalive import keepalive_settings
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")


class NativeFrontends:
    """The native listeners of one server; ``http_port`` / ``grpc_port`` are None when that
    protocol is off, and equal when they share a port."""

    def __init__(self) -> None:
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._http: HttpService | None = None
        self._grpc: NativeGrpcServer | None = None
        self._listeners: list[asyncio.Server] = []

    def refuse_new(self) -> None:
        """The stop signal: no new connections; requests and calls that begin on open ones
        from now on are refused (HTTP 503 + ``Connection: close``, gRPC GOAWAY); what has
        begun is still served."""
        for listener in self._listeners:
            listener.close()
        if self._http is not None:
            self._http.refuse_new()
        if self._grpc is not None:
            self._grpc.refuse_new()

    async def drain(self, timeout: float) -> int:
        """After ``refuse_new``: wait up to ``timeout`` s for every HTTP request and unary
        gRPC call that had begun to be answered, closing HTTP connections as they finish;
        how many are left (open gRPC streams stay: their requests are the core's to
        drain, ``stop`` ends them)."""
        self.refuse_new()
        waits = []
        if self._http is not None:
            waits.append(self._http.drain(timeout))
        if self._grpc is not None:
            waits.append(self._grpc.wait_unary(timeout))
        return sum(await asyncio.gather(*waits))

    async def stop(self, grace: float = 1.0) -> int:
        """Stop accepting; let open requests and calls finish for up to ``grace`` s; close.
        Returns how many begun requests and calls were cut off at ``grace``."""
        self.refuse_new()
        waits = []
        if self._http is not None:
            waits.append(self._http.drain(grace))
        if self._grpc is not None:
            waits.append(self._grpc.stop(grace))
        cut = sum(await asyncio.gather(*waits))
        for listener in self._listeners:
            await listener.wait_closed()
        return cut


def http_limits(opts: ServerOptions, nofile: int = 0) -> HttpLimits:
    return HttpLimits(
        max_body=opts.http_max_input_size,
        # (connection_cap keeps a floor of 16 against a tiny fd limit, not against the flag)
        max_connections=min(
            opts.http_max_connections, connection_cap(opts.http_max_connections, nofile)
        ),
    )


class CappedGrpcServer(NativeGrpcServer):
    """A native gRPC server with at most ``max_connections`` open connections. One past the
    cap closes the oldest idle connection (no open call; GOAWAY, so its client reconnects when
    it next calls) to make room; when every one is busy it is closed at once instead, before
    the HTTP/2 preface, which clients take as a failed connect (UNAVAILABLE), as grpc-core's
    ``grpc.max_allowed_incoming_connections`` does."""

    def __init__(self, methods: GrpcMethods, limits: GrpcLimits, max_connections: int) -> None:
        super().__init__(methods, limits)
        self.max_connections = max_connections
        self.open: dict[GrpcProtocol, None] = {}  # in the order they opened

    def protocol(self) -> GrpcProtocol:
        return _CappedGrpcProtocol(self.methods, self.limits, self)

    def admit(self, proto: GrpcProtocol) -> bool:
        """Whether a new connection may be served (an idle one may be closed for it)."""
        open_ = self.open
        if len(open_) >= self.max_connections:
            idle = next((p for p in open_ if not p.calls), None)
            if idle is None:
                REJECTS.note(
                    "grpc",
                    "unavailable",
                    f"too many open connections: the server's limit is {self.max_connections}",
                )
                return False
            del open_[idle]
            idle.goaway()  # with no call open, the connection closes after GOAWAY
        open_[proto] = None
        return True


class _CappedGrpcProtocol(GrpcProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if cast(CappedGrpcServer, self.server).admit(self):
            super().connection_made(transport)
        else:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        cast(CappedGrpcServer, self.server).open.pop(self, None)
        super().connection_lost(exc)


def grpc_server(core: CoreAPI, opts: ServerOptions, nofile: int = 0) -> CappedGrpcServer:
    return CappedGrpcServer(
        methods(core, opts),
        GrpcLimits(
            keepalive=keepalive_settings(opts),
            max_decompressed_size=opts.grpc_max_decompressed_size,
        ),
        min(opts.grpc_max_connections, connection_cap(opts.grpc_max_connections, nofile)),
    )


async def start_native(core: CoreAPI, opts: ServerOptions) -> NativeFrontends:
    """Open the native listeners that ``opts`` asks for (after the startup models loaded)."""
    out = NativeFrontends()
    loop = asyncio.get_running_loop()
    nofile = raise_nofile_limit()
    busy = BusyPoll(loop, opts.busy_poll_us * 1000) if opts.busy_poll_us > 0 else None
    # one bound on decompression in flight for both protocols (wire/inflate.py)
    inflater = Inflater()
    if opts.shared_port:
        http = HttpService(make_dispatch(core, opts), http_limits(opts, nofile))
        grpc = grpc_server(core, opts, nofile)
        http.busy = grpc.busy = busy
        http.inflater = grpc.inflater = inflater
        out._http, out._grpc = http, grpc
        # the same certificate for both (checked in options); ALPN lets the client choose
        ctx = http_tls(opts, ("h2", "http/1.1"))
        sock = bind(opts.http_address, opts.http_port, opts.reuse_http_port)
        # counted from accept: connections still saying nothing count against the cap
        pool = DetectPool(
            max(http.limits.max_connections, grpc.max_connections),
            lambda: len(http.connections) + len(grpc.open),
        )
        listener = await loop.create_server(
            lambda: Detect(http.protocol, grpc.protocol, pool=pool),
            sock=sock,
            ssl=ctx,
            backlog=1024,
            ssl_handshake_timeout=DETECT_TIMEOUT_S if ctx is not None else None,
        )
        out._listeners.append(listener)
        out.http_port = out.grpc_port = int(sock.getsockname()[1])
        return out
    if opts.allow_grpc:
        # as wire.grpc_native.start_grpc_native, with the capped server
        out._grpc = grpc = grpc_server(core, opts, nofile)
        grpc.busy = busy
        grpc.inflater = inflater
        sock = bind(opts.grpc_address, opts.grpc_port, opts.reuse_grpc_port)
        listener = await loop.create_server(
            grpc.protocol, sock=sock, ssl=grpc_tls(opts, ("h2",)), backlog=1024
        )
        grpc._server = listener
        out.grpc_port = grpc.port = int(sock.getsockname()[1])
    if opts.allow_http:
        server = await start_http_native(
            make_dispatch(core, opts),
            opts.http_address,
            opts.http_port,
            ssl_context=http_tls(opts, ("http/1.1",)),
            reuse_port=opts.reuse_http_port,
            limits=http_limits(opts, nofile),
            busy=busy,
        )
        out._http = server.service
        server.service.inflater = inflater
        out._listeners.append(server._server)
        out.http_port = server.port
    return out

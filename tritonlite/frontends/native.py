"""``--frontend=native``: the HTTP handlers and the gRPC servicer over tritonlite's wire layer.

HTTP/1.1 (``wire/http1``) and gRPC (``wire/grpc_native`` over ``wire/h2``) listen on their own
ports, or, when ``--http-port`` equals ``--grpc-port``, on one listener whose connections are
told apart by their first bytes or their TLS ALPN choice (``wire/detect``). The handlers are
the same ones ``--frontend=aio`` runs over aiohttp and grpc.aio.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.call import GrpcMethods
from tritonlite.frontends.base.rejects import REJECTS
from tritonlite.frontends.base.sockets import (
    bind,
    close_keeping_backlog,
    connection_cap,
    raise_nofile_limit,
)
from tritonlite.frontends.grpc.servicer import methods
from tritonlite.frontends.http.app import make_dispatch, make_json_infer
from tritonlite.frontends.tls import grpc_tls, http_tls
from tritonlite.frontends.wire import sender
from tritonlite.frontends.wire.busypoll import BusyPoll
from tritonlite.frontends.wire.detect import DETECT_TIMEOUT_S, Detect, DetectPool
from tritonlite.frontends.wire.grpc_native import GrpcLimits, GrpcProtocol, NativeGrpcServer
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService, start_http_native
from tritonlite.frontends.wire.inflate import Inflater
from tritonlite.frontends.wire.keepalive import keepalive_settings
from tritonlite.frontends.wire.recvbuf import RecvBlocks
from tritonlite.frontends.wire.sendbuf import SendBlocks
from tritonlite.frontends.wire.sendtrial import SendTrial
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")
_DECIDE_POLL_S = 0.02  # draining, how often the shared port looks at undecided connections


class NativeFrontends:
    """The native listeners of one server; ``http_port`` / ``grpc_port`` are None when that
    protocol is off, and equal when they share a port."""

    def __init__(self) -> None:
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._http: HttpService | None = None
        self._grpc: NativeGrpcServer | None = None
        # listening: (listener, its protocol factory, its TLS context)
        self._listeners: list[tuple[asyncio.Server, Callable[[], Any], Any]] = []
        self._closed: list[asyncio.Server] = []
        self._adopting: list[asyncio.Task[Any]] = []  # backlog connections being taken on
        self._undecided: set[Detect] = set()  # shared port: protocol not known yet
        self._idle_end = 0.0  # loop time until which a drain waits for them

    def refuse_new(self) -> None:
        """The stop signal: no new connections (the ones the kernel had already completed
        are still taken on: their clients are connected); a connection's first request is
        served, further requests and new calls are refused (HTTP 503 + ``Connection:
        close``, gRPC GOAWAY); what has begun is still served."""
        listeners, self._listeners = self._listeners, []
        if listeners:
            idle = self._http.limits.drain_idle_s if self._http is not None else 0.0
            self._idle_end = asyncio.get_running_loop().time() + idle
        for listener, factory, ctx in listeners:
            self._adopting += close_keeping_backlog(listener, factory, ctx)
            self._closed.append(listener)
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
        end = asyncio.get_running_loop().time() + timeout
        await self._adopted(timeout)
        await self._decided(min(end, self._idle_end))
        timeout = max(0.0, end - asyncio.get_running_loop().time())
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
        await self._adopted(grace)
        waits = []
        if self._http is not None:
            waits.append(self._http.drain(grace))
        if self._grpc is not None:
            waits.append(self._grpc.stop(grace))
        cut = sum(await asyncio.gather(*waits))
        for listener in self._closed:
            await listener.wait_closed()
        return cut

    async def _decided(self, until: float) -> None:
        """On a shared port, wait (until loop time ``until``) for the connections that have
        not said yet which protocol they speak: an HTTP one then joins the HTTP drain."""
        loop = asyncio.get_running_loop()
        while self._undecided and loop.time() < until:
            await asyncio.sleep(_DECIDE_POLL_S)

    async def _adopted(self, timeout: float) -> None:
        """Wait (up to ``timeout``; a TLS handshake may take a while) until the connections
        taken from the backlog are registered, so the drain waits for them too."""
        adopting, self._adopting = self._adopting, []
        if adopting:
            _, late = await asyncio.wait(adopting, timeout=timeout)
            for task in late:
                task.cancel()


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


def sending(out: NativeFrontends, core: CoreAPI, opts: ServerOptions) -> None:
    """Give the front ends the process's sending thread, tried under load with one trial for
    both (wire/sendtrial.py): the trial counts the core's requests, whichever protocol
    brought them."""
    http = out._http if opts.http_send_thread else None
    grpc = out._grpc if opts.grpc_send_thread else None
    if http is None and grpc is None:
        return
    trial = SendTrial(core.arrivals)
    for front in (http, grpc):
        if front is not None:
            front.sender = sender.shared()
            front.send_trial = trial


def loop_cpu(opts: ServerOptions) -> Callable[[], int]:
    """The loop thread's CPU clock for its look back (wire/busypoll.py), with the sending
    thread's added: the writes it takes off a loaded loop are the loop's work, and counted
    without them the loop would look less loaded than it is (at HTTP c=16 its own share fell
    from 0.77-0.78 to 0.73-0.74, under the 0.75 that keeps its serving passes) and stop the
    passes that feed the thread."""
    if not (
        (opts.http_send_thread and opts.allow_http) or (opts.grpc_send_thread and opts.allow_grpc)
    ):
        return time.thread_time_ns
    send = sender.shared()
    own = time.thread_time_ns

    def cpu() -> int:
        return own() + int(send.cpu_ns())

    return cpu


async def start_native(core: CoreAPI, opts: ServerOptions) -> NativeFrontends:
    """Open the native listeners that ``opts`` asks for (after the startup models loaded)."""
    out = NativeFrontends()
    loop = asyncio.get_running_loop()
    nofile = raise_nofile_limit()
    busy = (
        BusyPoll(loop, opts.busy_poll_us * 1000, requests=core.arrivals, cpu=loop_cpu(opts))
        if opts.busy_poll_us > 0
        else None
    )
    # one bound on decompression in flight for both protocols (wire/inflate.py)
    inflater = Inflater()
    blocks = SendBlocks()  # and one pool of send copies (wire/sendbuf.py)
    received = RecvBlocks()  # and of large request messages (wire/recvbuf.py)
    if opts.shared_port:
        http = HttpService(make_dispatch(core, opts), http_limits(opts, nofile))
        http.json_infer = make_json_infer(core, opts)
        grpc = grpc_server(core, opts, nofile)
        http.busy = grpc.busy = busy
        http.inflater = grpc.inflater = inflater
        http.send_blocks = grpc.send_blocks = blocks
        http.recv_blocks = grpc.recv_blocks = received
        out._http, out._grpc = http, grpc
        sending(out, core, opts)
        # the same certificate for both (checked in options); ALPN lets the client choose
        ctx = http_tls(opts, ("h2", "http/1.1"))
        sock = bind(opts.http_address, opts.http_port, opts.reuse_http_port)
        # counted from accept: connections still saying nothing count against the cap
        pool = DetectPool(
            max(http.limits.max_connections, grpc.max_connections),
            lambda: len(http.connections) + len(grpc.open),
        )

        def detect() -> Detect:
            return Detect(http.protocol, grpc.protocol, pool=pool, undecided=out._undecided)

        listener = await loop.create_server(
            detect,
            sock=sock,
            ssl=ctx,
            backlog=1024,
            ssl_handshake_timeout=DETECT_TIMEOUT_S if ctx is not None else None,
        )
        out._listeners.append((listener, detect, ctx))
        out.http_port = out.grpc_port = int(sock.getsockname()[1])
        return out
    if opts.allow_grpc:
        # as wire.grpc_native.start_grpc_native, with the capped server
        out._grpc = grpc = grpc_server(core, opts, nofile)
        grpc.busy = busy
        grpc.inflater = inflater
        grpc.send_blocks = blocks
        grpc.recv_blocks = received
        sock = bind(opts.grpc_address, opts.grpc_port, opts.reuse_grpc_port)
        listener = await loop.create_server(
            grpc.protocol, sock=sock, ssl=grpc_tls(opts, ("h2",)), backlog=1024
        )
        grpc._server = listener
        out.grpc_port = grpc.port = int(sock.getsockname()[1])
    if opts.allow_http:
        http_ctx = http_tls(opts, ("http/1.1",))
        server = await start_http_native(
            make_dispatch(core, opts),
            opts.http_address,
            opts.http_port,
            ssl_context=http_ctx,
            reuse_port=opts.reuse_http_port,
            limits=http_limits(opts, nofile),
            busy=busy,
        )
        out._http = server.service
        server.service.json_infer = make_json_infer(core, opts)
        server.service.inflater = inflater
        server.service.send_blocks = blocks
        server.service.recv_blocks = received
        out._listeners.append((server._server, server.service.protocol, http_ctx))
        out.http_port = server.port
    sending(out, core, opts)
    return out

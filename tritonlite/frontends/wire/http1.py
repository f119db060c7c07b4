"""The native HTTP/1.1 server: ``start_http_native``, and the protocol's compiled twin.

This is the one module that knows ``Http1Protocol`` and its fast path's scanner
(``_h1scan_py.scan``) have Cython twins; it asks ``tritonlite._twins`` (one rule for every
twin: ``TRITONLITE_NO_EXTENSIONS``, ``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the
compiled ones.

``HttpService`` is what the connections of one HTTP front end share (the handler and its JSON
infer call, the limits, the open connections, the timeout sweep, the drain, the sending thread);
a listener of its own (``start_http_native``) or a one-port detector creates protocols with
``service.protocol``.
"""

from __future__ import annotations

import asyncio
import ssl
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from tritonlite import _twins
from tritonlite.frontends.base.http_call import Dispatch, JsonInfer
from tritonlite.frontends.wire import _h1scan_py, _http1_py
from tritonlite.frontends.wire.inflate import Inflater
from tritonlite.frontends.wire.recvbuf import RecvBlocks
from tritonlite.frontends.wire.sendbuf import SendBlocks

__all__ = [
    "ACCELERATED",
    "Http1Protocol",
    "HttpLimits",
    "HttpService",
    "NativeHttpServer",
    "describe",
    "start_http_native",
]

Http1Protocol = _http1_py.Http1Protocol
_compiled = _twins.compiled("tritonlite.frontends.wire._http1_c")
if _compiled is not None:
    Http1Protocol = _compiled.Http1Protocol  # type: ignore[misc]
ACCELERATED = _compiled is not None
_scan_compiled = _twins.compiled("tritonlite.frontends.wire._h1scan_c")
HEAD_SCAN: Any = _scan_compiled.scan if _scan_compiled is not None else _h1scan_py.scan


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("http1", _compiled)


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP/1.1 connection may ask of the server (sizes in bytes, times in s)."""

    max_body: int = 64 * 1024 * 1024  # --http-max-input-size: larger is 413
    max_header_bytes: int = 64 * 1024  # request line + headers: larger is 431 (414 the URL)
    max_headers: int = 128  # more header fields is 431
    max_pipeline: int = 16  # requests queued on one connection before reading pauses
    header_timeout_s: float = 30.0  # from a request's first byte (or the connection) to its
    #                                 blank line: 408, then close
    body_timeout_s: float = 60.0  # longest pause while a body arrives: 408, then close
    keepalive_timeout_s: float = 75.0  # an idle kept-alive connection is closed after this
    max_connections: int = 4096  # beyond: one request each, health only (others 503), closed
    drain_idle_s: float = 1.0  # draining, how long an idle connection stays open for a request

    def __post_init__(self) -> None:
        for name in (
            "max_body",
            "max_header_bytes",
            "max_headers",
            "max_pipeline",
            "max_connections",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"HttpLimits.{name} must be at least 1")
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s", "drain_idle_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"HttpLimits.{name} must be positive")


class HttpService:
    """What the connections of one HTTP front end share.

    Ownership: the service owns its connections' lifetime (timeouts, drain); a connection
    registers itself in ``connection_made`` and unregisters in ``connection_lost``.
    """

    def __init__(
        self, dispatch: Dispatch, limits: HttpLimits, *, protocol_class: Any = None
    ) -> None:
        self.dispatch = dispatch
        self.json_infer: JsonInfer | None = None  # asked before ``dispatch`` (``call.JsonInfer``)
        self.limits = limits
        self.draining = False
        self.busy: Any = None  # a BusyPoll (busypoll.py) its connections touch on input
        self.inflater = Inflater()  # shared with the gRPC front end by the composition root
        self.send_blocks = SendBlocks()  # copies of large response bodies being sent
        self.recv_blocks = RecvBlocks()  # large infer bodies being read and used
        self.connections: dict[Any, None] = {}  # in the order they opened
        self._protocol_class = protocol_class if protocol_class is not None else Http1Protocol
        # the protocols' fast path for whole, plain requests (None: llhttp parses every
        # byte); the pure protocol twin reads with the pure scanner twin
        self.head_scan: Any = (
            _h1scan_py.scan if self._protocol_class is _http1_py.Http1Protocol else HEAD_SCAN
        )
        self._sweeper: asyncio.TimerHandle | None = None
        self._interval = max(
            0.01,
            min(
                1.0,
                limits.header_timeout_s / 4,
                limits.body_timeout_s / 4,
                limits.keepalive_timeout_s / 4,
            ),
        )
        self._idle: asyncio.Event | None = None
        self._ready: list[Any] = []  # connections waiting for this loop turn's serving pass
        self.holding = False  # in the serving pass: responses are held, written at its end
        self._held: list[Any] = []  # connections holding responses
        # the thread that writes a pass's held responses (``sender.shared``); None: the loop;
        # and whether a pass uses it (a ``sendtrial.SendTrial``; None: every pass)
        self.sender: Any = None
        self.send_trial: Any = None

    def protocol(self) -> Any:
        """A new connection's protocol (the ``protocol_factory`` of a listener)."""
        return self._protocol_class(self)

    def register(self, proto: Any) -> bool:
        """A connection opened; False when it is over ``max_connections``. Past twice that
        (the file-descriptor ceiling the cap was derived from) the oldest idle connection
        is closed, so new ones -- health probes -- are still accepted and answered."""
        connections = self.connections
        connections[proto] = None
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(self._interval, self._sweep)
        n = len(connections)
        cap = self.limits.max_connections
        if n > 2 * cap:
            for other in connections:
                if other is not proto and other.idle():
                    other.close_idle()
                    break
        return n <= cap

    def unregister(self, proto: Any) -> None:
        self.connections.pop(proto, None)
        if not self.connections:
            if self._idle is not None:
                self._idle.set()
            if self._sweeper is not None:
                self._sweeper.cancel()
                self._sweeper = None

    def defer(self, proto: Any) -> None:
        """Serve ``proto``'s queue in one pass at the end of this loop turn, with every other
        connection deferred in it, instead of at once.

        A loaded loop reads several connections' requests per turn; serving each as it is
        parsed interleaves the request path with the parsing, reads and writes of the others,
        and it then runs colder. Served back to back after the turn's reads, the same requests
        cost 10-20% less CPU (perf_analyzer at concurrency 16: ONNX add_sub 108-110 -> 87-88
        µs a request, a model.py add_sub 87-90 -> 76-79; bench/RESULTS.md, Issue 16 (16)).
        The pass also holds the small responses it makes (``holding``; ``Http1Protocol._send``)
        and writes them when it ends, one write per connection, so the kernel's sends (each
        one also the loopback's receive and the client's wake-up) do not come between the
        requests either: the request path's CPU in the server at concurrency 4, 55-56 -> 43-45
        µs (Issue 16 (17)). An idle loop gains nothing from the wait (one request per turn)
        and answers later, so connections defer only while the loop is loaded
        (``Http1Protocol.data_received``)."""
        ready = self._ready
        ready.append(proto)
        if len(ready) == 1:
            asyncio.get_running_loop().call_soon(self._serve_ready)

    def _serve_ready(self) -> None:
        ready, self._ready = self._ready, []
        self.holding = True
        try:
            for proto in ready:
                proto.serve_deferred()
        finally:
            self.holding = False
            held, self._held = self._held, []
            sender = self.sender
            trial = self.send_trial
            if sender is not None and (trial is None or trial.use()):
                for proto in held:
                    proto.hand_held(sender)
            else:
                for proto in held:
                    proto.flush_held()

    def hold(self, proto: Any) -> None:
        """``proto`` holds a response until the serving pass ends."""
        self._held.append(proto)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for proto in list(self.connections):
            proto.check_timeout(now)
        self._sweeper = loop.call_later(self._interval, self._sweep) if self.connections else None

    def refuse_new(self) -> None:
        """The stop signal: what has begun is served, and so is the first request of a
        connection (its client connected before the signal); a further request gets 503 and
        ``Connection: close``; a connection idle for ``limits.drain_idle_s`` closes."""
        self.draining = True
        for proto in list(self.connections):
            proto.shutdown()

    async def drain(self, grace: float) -> int:
        """Answer what is in flight (new requests get 503), close every connection; those
        still open after ``grace`` seconds are aborted. Returns how many begun requests
        were cut off that way."""
        if not self.draining:
            self.refuse_new()
        if self.connections:
            self._idle = asyncio.Event()
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        cut = 0
        for proto in list(self.connections):
            cut += proto.pending()
            proto.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        return cut


class NativeHttpServer:
    """A listening native HTTP/1.1 front end (``start_http_native``)."""

    def __init__(self, server: asyncio.Server, service: HttpService) -> None:
        self._server = server
        self.service = service
        self.port = int(server.sockets[0].getsockname()[1])

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, finish in-flight requests (and bodies already arriving), answer,
        then close; new requests on kept-alive connections get 503 and ``Connection:
        close``. Connections still open after ``grace`` seconds are aborted."""
        self._server.close()
        await self.service.drain(grace)
        await self._server.wait_closed()


async def start_http_native(
    handler: Dispatch,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    reuse_port: bool = False,
    limits: HttpLimits | None = None,
    protocol_class: Any = None,
    busy: Any = None,
) -> NativeHttpServer:
    """Listen on ``host:port`` (0: any free port) and serve HTTP/1.1 with ``handler``.

    ``protocol_class`` picks a twin explicitly (tests); by default the compiled one when it
    is built. ``busy``: the ``BusyPoll`` its connections touch on input.
    """
    service = HttpService(handler, limits or HttpLimits(), protocol_class=protocol_class)
    service.busy = busy
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        service.protocol, host, port, ssl=ssl_context, reuse_port=reuse_port or None, backlog=1024
    )
    return NativeHttpServer(server, service)

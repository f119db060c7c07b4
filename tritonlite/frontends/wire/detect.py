"""One port, two protocols: a connection's first bytes (or its ALPN choice) pick the protocol.

A gRPC client opens HTTP/2 with the connection preface ``PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n``;
no HTTP/1.1 request can start with it (``PRI`` is no method an HTTP/1.1 server accepts). So the
detector reads until the bytes it has either leave the preface (HTTP/1.1) or complete it
(HTTP/2, i.e. gRPC), then hands the transport and those bytes to the chosen protocol. Under TLS
the client's ALPN choice (``h2`` or ``http/1.1``) decides at once; a client that offered no
ALPN is told apart by its first bytes as over plain TCP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

ProtocolFactory = Callable[[], asyncio.Protocol]


class Detect(asyncio.Protocol):
    """The protocol a shared listener creates for each connection until the first bytes
    decide; it then replaces itself on the transport and is not used again."""

    __slots__ = ("_http", "_grpc", "_transport", "_buf", "_timer", "_timeout", "_undecided")

    def __init__(
        self,
        http: ProtocolFactory,
        grpc: ProtocolFactory,
        timeout_s: float = 30.0,
        undecided: set[Detect] | None = None,
    ) -> None:
        self._http = http
        self._grpc = grpc
        # where the listener tracks the connections not handed over yet (a drain waits on them)
        self._undecided = undecided
        self._transport: asyncio.Transport | None = None
        self._buf = b""
        self._timer: asyncio.TimerHandle | None = None
        self._timeout = timeout_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self._transport = transport = cast(asyncio.Transport, transport)
        if self._undecided is not None:
            self._undecided.add(self)
        # a client that connects and says nothing holds a descriptor: not for long
        self._timer = asyncio.get_running_loop().call_later(self._timeout, transport.abort)
        tls = transport.get_extra_info("ssl_object")
        alpn = tls.selected_alpn_protocol() if tls is not None else None
        if alpn == "h2":
            self._switch(self._grpc)
        elif alpn == "http/1.1":
            self._switch(self._http)

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        n = min(len(buf), len(PREFACE))
        if buf[:n] != PREFACE[:n]:
            self._switch(self._http, buf)
        elif len(buf) >= len(PREFACE):
            self._switch(self._grpc, buf)
        else:
            self._buf = buf

    def eof_received(self) -> bool | None:
        return False  # closed before saying anything: nothing to answer

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._undecided is not None:
            self._undecided.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def _switch(self, factory: ProtocolFactory, first: bytes = b"") -> None:
        transport = self._transport
        assert transport is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._undecided is not None:
            self._undecided.discard(self)
        proto = factory()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        if first and not transport.is_closing():
            proto.data_received(first)

"""One port, two protocols: a connection's first bytes (or its ALPN choice) pick the protocol.

A gRPC client opens HTTP/2 with the connection preface ``PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n``;
no HTTP/1.1 request can start with it (``PRI`` is no method an HTTP/1.1 server accepts). So the
detector reads until the bytes it has either leave the preface (HTTP/1.1) or complete it
(HTTP/2, i.e. gRPC), then hands the transport and those bytes to the chosen protocol. Under TLS
the client's ALPN choice (``h2`` or ``http/1.1``) decides at once; a client that offered no
ALPN is told apart by its first bytes as over plain TCP.

A connection counts against the listener's cap from the moment it is accepted: while it is
being told apart it is in a ``DetectPool``, which closes the oldest connection still saying
nothing when the pool plus the connections already handed over reach the cap (a client that
means it sends its first bytes at once, so room goes to the new ones; a listener already at
its cap keeps room for 64), and gives up on one after ``DETECT_TIMEOUT_S`` (the protocol's own
header timeout starts after that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# s: how long a connection may take to send the bytes that tell its protocol
DETECT_TIMEOUT_S = 10.0
# connections a listener at its cap may still be telling apart at once
_RESERVE = 64

ProtocolFactory = Callable[[], asyncio.Protocol | asyncio.BufferedProtocol]


class DetectPool:
    """The connections of one shared listener still being told apart.

    ``cap``: the listener's connection cap; ``handed_over()``: how many of its connections
    the protocols hold now (they count against the cap too).
    """

    def __init__(
        self,
        cap: int,
        handed_over: Callable[[], int] = lambda: 0,
        timeout_s: float = DETECT_TIMEOUT_S,
    ) -> None:
        if cap < 1:
            raise ValueError("DetectPool cap must be at least 1")
        self.cap = cap
        self.reserve = min(cap, _RESERVE)
        self.timeout_s = timeout_s
        self._handed_over = handed_over
        self.detecting: dict[Detect, None] = {}  # in the order they were accepted
        self.evicted = 0  # closed to make room (for the log and tests)

    def room(self) -> int:
        """How many connections may be told apart at once now: what the cap leaves, but at
        least ``reserve`` (a burst of health probes at a listener at its cap must not evict
        each other before they have sent a byte)."""
        return max(self.cap - self._handed_over(), self.reserve)

    def admit(self, conn: Detect) -> None:
        detecting = self.detecting
        if len(detecting) >= self.room():
            oldest = next(iter(detecting))
            del detecting[oldest]  # now: its connection_lost comes on a later loop turn
            self.evicted += 1
            oldest.abort()
        detecting[conn] = None

    def leave(self, conn: Detect) -> None:
        self.detecting.pop(conn, None)


class Detect(asyncio.Protocol):
    """The protocol a shared listener creates for each connection until the first bytes
    decide; it then replaces itself on the transport and is not used again."""

    __slots__ = (
        "_http",
        "_grpc",
        "_transport",
        "_buf",
        "_timer",
        "_timeout",
        "_pool",
        "_undecided",
    )

    def __init__(
        self,
        http: ProtocolFactory,
        grpc: ProtocolFactory,
        timeout_s: float | None = None,
        pool: DetectPool | None = None,
        undecided: set[Detect] | None = None,
    ) -> None:
        self._http = http
        self._grpc = grpc
        # where the listener tracks the connections not handed over yet (a drain waits on them)
        self._undecided = undecided
        self._transport: asyncio.Transport | None = None
        self._buf = b""
        self._timer: asyncio.TimerHandle | None = None
        self._pool = pool
        if timeout_s is None:
            timeout_s = pool.timeout_s if pool is not None else DETECT_TIMEOUT_S
        self._timeout = timeout_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self._transport = transport = cast(asyncio.Transport, transport)
        if self._undecided is not None:
            self._undecided.add(self)
        # a client that connects and says nothing holds a descriptor: not for long
        self._timer = asyncio.get_running_loop().call_later(self._timeout, transport.abort)
        if self._pool is not None:
            self._pool.admit(self)
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
        if self._pool is not None:
            self._pool.leave(self)

    def abort(self) -> None:
        """Close this connection now (it is still being told apart)."""
        if self._transport is not None:
            self._transport.abort()

    def _switch(self, factory: ProtocolFactory, first: bytes = b"") -> None:
        transport = self._transport
        assert transport is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pool is not None:
            self._pool.leave(self)
        if self._undecided is not None:
            self._undecided.discard(self)
        proto = factory()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        if first and not transport.is_closing():
            _feed(proto, first, transport)


def _feed(
    proto: asyncio.Protocol | asyncio.BufferedProtocol,
    data: bytes,
    transport: asyncio.BaseTransport,
) -> None:
    """Hand ``data`` to ``proto`` as its transport would: a buffered protocol (the gRPC one)
    through its own buffers."""
    if not isinstance(proto, asyncio.BufferedProtocol):
        proto.data_received(data)
        return
    view = memoryview(data)
    while view and not transport.is_closing():
        buf = memoryview(proto.get_buffer(len(view)))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        proto.buffer_updated(n)
        view = view[n:]

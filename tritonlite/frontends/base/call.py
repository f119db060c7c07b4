"""The call interfaces that handlers are written against, whatever carries the bytes.

A gRPC handler sees a ``GrpcCall``; an HTTP handler an ``HttpRequest`` (defined with the HTTP
handlers). Each transport -- grpc.aio / aiohttp (``--frontend=aio``) and tritonlite's own wire
layer (``--frontend=native``) -- implements them, so the same servicer and handlers run over
both and neither holds behaviour of its own.

gRPC contract
-------------
* A unary handler is ``async def h(request: bytes, call: GrpcCall) -> Message``: the serialized
  request message in (``bytes``; on the native transport a message of 64 KiB or more is a
  ``memoryview`` -- of the read it arrived in, or of the reused block it was assembled in,
  ``wire/recvbuf.py`` -- which protobuf, numpy and zlib take as they take bytes; what a handler
  keeps of it keeps that block lent), the serialized response message out -- one ``bytes``,
  or a list of buffers (``bytes`` / flat byte ``memoryview``) whose concatenation is the
  message, which the transport writes without joining them when it can (a large response's
  tensors); the buffers must not change until the call has ended.
* A streaming handler (``ModelStreamInfer``, health ``Watch``) is ``async def h(call) -> None``;
  it reads request messages with ``await call.read()`` (``None`` once the client half-closed)
  and sends responses with ``await call.write(message)``.
* A handler ends a call with a status by raising ``RpcError`` (or ``TritonliteError``, which
  the transport maps through ``frontends/grpc/errors.STATUS``); returning means OK. Anything
  else is INTERNAL. Trailing metadata (``grpc-status``, ``grpc-message``) is the transport's
  job.
* Ownership: the transport owns the call; once the handler returns or raises, the call object
  must not be used again. A cancelled call (client RST_STREAM, deadline, connection lost)
  cancels the handler's task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol


class RpcError(Exception):
    """End the call with this gRPC status code (an int, ``grpc.StatusCode.X.value[0]``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GrpcCall(Protocol):
    def metadata(self) -> Sequence[tuple[str, str | bytes]]:
        """The request's custom metadata: lower-case keys, ``-bin`` values as bytes."""
        ...

    def peer_is_local(self) -> bool:
        """Whether the peer is on this host (loopback address or unix socket)."""
        ...

    def set_compression(self, algorithm: str | None) -> None:
        """Compress the response messages that follow with 'gzip' or 'deflate' (None: off)."""
        ...

    def time_remaining(self) -> float | None:
        """Seconds left before the client's deadline (``grpc-timeout``), None without one."""
        ...

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the call has ended and its last bytes were handed to the socket."""
        ...

    async def read(self) -> bytes | None:
        """Streaming calls: the next request message (bytes-like, as a unary request), None
        after the client half-closed."""
        ...

    async def write(self, message: bytes) -> None:
        """Streaming calls: send one response message (waits while flow control says so)."""
        ...


Message = bytes | list[bytes | memoryview]
UnaryHandler = Callable[[bytes, GrpcCall], Awaitable[Message]]
StreamHandler = Callable[[GrpcCall], Awaitable[None]]


class GrpcMethod(Protocol):
    """One registered method: exactly one of ``unary`` / ``stream`` is set."""

    unary: UnaryHandler | None
    stream: StreamHandler | None


# What a gRPC transport serves: "/package.Service/Method" -> its handler.
GrpcMethods = dict[str, GrpcMethod]


class InFlight:
    """How many requests (or calls) a transport has begun and not yet answered: what a
    graceful stop waits for, and reports as cut off when ``--exit-timeout-secs`` runs out.

    A transport calls ``enter()`` when a request's head has arrived and ``leave()`` once it is
    answered (or failed); ``draining`` is set when the server got its stop signal.
    """

    __slots__ = ("count", "draining", "_idle")

    def __init__(self) -> None:
        self.count = 0
        self.draining = False
        self._idle: asyncio.Future[None] | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count <= 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def wait_idle(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for every begun request to be answered; how many remain."""
        if self.count > 0 and timeout > 0:
            self._idle = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._idle), timeout)
            except asyncio.TimeoutError:
                pass
            finally:
                self._idle = None
        return max(0, self.count)

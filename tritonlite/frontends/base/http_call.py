"""The HTTP call interface: what an HTTP handler sees, whatever carries the bytes.

Two transports implement it -- aiohttp's low-level server (``frontends/http/aio.py``,
``--frontend=aio``) and tritonlite's own HTTP/1.1 layer (``frontends/wire/http1.py``,
``--frontend=native``) -- so the handlers in ``app.py`` import neither.

Contract
--------
* A transport hands each request to one ``Dispatch`` (``app.make_dispatch``), a coroutine
  ``async def dispatch(request: HttpRequest) -> HttpResponse | HttpStream``.
* ``HttpRequest.read()`` returns the whole body, once; the transport has already undone a
  gzip/deflate ``Content-Encoding`` (aiohttp does it; the native transport inflates in
  bounded bursts, ``wire/inflate.py``) and enforced the body-size limit. It raises ``HttpError`` for what the
  transport refuses (413 too large, a bad chunked framing) and ``TritonliteError`` (INVALID_ARG)
  for a body that does not decompress. The body is ``bytes`` or a ``bytearray``; on the native
  transport an infer request's body (``POST .../infer``) of 64 KiB or more that arrives in
  pieces is a ``memoryview`` of a reused block (``wire/recvbuf.py``), which orjson, numpy and
  zlib take as they take bytes; what a handler keeps of it keeps that block lent, so only the
  infer handler, which keeps views of it as its input arrays, is given one. The first
  ``read()`` of a request that carries
  ``Expect: 100-continue`` sends ``100 Continue``; a handler that never reads does not ask
  for the body (the transport then closes the connection after the response if it must).
* Ownership: the transport owns the request; after the handler returns, neither the request
  nor the response may be used by the handler. The transport writes the returned response
  (``Content-Length`` always for an ``HttpResponse``) and then calls its ``on_sent(start_ns,
  end_ns)``, exactly once, whether or not the bytes reached the socket.
* ``HttpStream``: the transport sends the status and headers, then awaits ``send(writer)``,
  exactly once, and ends the body when it returns (chunked framing on the native transport).
  ``writer.write`` raises ``ConnectionError`` once the client has gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

BodyPart = bytes | memoryview


class HttpError(Exception):
    """The transport refuses the request with this status (413, 400, ...) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HttpRequest(Protocol):
    method: str  # "GET", "POST", ...
    path: str  # the raw path (still percent-encoded), without the query
    query: str  # what followed '?', "" without one
    headers: Mapping[str, str]  # names are case-insensitive
    version: tuple[int, int]  # (1, 1)
    peer: Any  # (host, port, ...) for TCP, None or a str for a unix socket

    async def read(self) -> bytes:
        """The whole request body (decompressed), see the module docstring; a transport may
        hand a ``bytearray``, or for a large infer body a ``memoryview`` (typed ``bytes``:
        handlers only read it)."""
        ...

    def disconnected(self) -> bool:
        """Whether the client has gone away (its connection is closing or closed)."""
        ...


class StreamWriter(Protocol):
    async def write(self, data: bytes) -> None:
        """Send one piece of a streamed body; raises ConnectionError once the client left."""
        ...


class HttpResponse:
    """A whole response: ``body`` is a list of parts sent one after the other (no join)."""

    __slots__ = ("status", "body", "content_type", "headers", "on_sent")

    def __init__(
        self,
        status: int = 200,
        body: list[BodyPart] | None = None,
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body: list[BodyPart] = body if body is not None else []
        self.content_type = content_type
        self.headers = headers
        self.on_sent: Callable[[int, int], None] | None = None

    def body_length(self) -> int:
        n = 0
        for part in self.body:
            n += len(part) if not isinstance(part, memoryview) else part.nbytes
        return n


class HttpStream:
    """A streamed response (server-sent events): the transport awaits ``send(writer)``."""

    __slots__ = ("status", "content_type", "headers", "send")

    def __init__(
        self,
        status: int,
        content_type: str,
        send: Callable[[StreamWriter], Awaitable[None]],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.content_type = content_type
        self.send = send
        self.headers = headers


Dispatch = Callable[[HttpRequest], Awaitable[HttpResponse | HttpStream]]
# ``app.make_json_infer``: a transport may ask it first for a complete POST body, given the
# path, the headers (lower-case names) and the body: ``dispatch``'s response, or None
# (nothing answered: ``dispatch`` as always)
JsonInfer = Callable[[str, dict[str, str], Any], HttpResponse | None]


def too_large(limit: int) -> str:
    """The 413 message, the same on every transport."""
    return f"request body is larger than the {limit} byte limit (--http-max-input-size)"

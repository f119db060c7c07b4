"""The reference HTTP transport (``--frontend=aio``): aiohttp's low-level server.

aiohttp brings its protocol, parser and keep-alive (no ``web.Application``); this module only
adapts its ``BaseRequest`` to the call interface (``call.HttpRequest``) and the handler's
``HttpResponse`` / ``HttpStream`` back to ``web.Response`` / ``web.StreamResponse``, and caps
the open connections as the native front end does (``CappedServer``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from tritonlite.contracts.errors import invalid_arg
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.call import InFlight
from tritonlite.frontends.base.http_call import HttpError, HttpResponse, HttpStream, too_large
from tritonlite.frontends.base.http_errors import error
from tritonlite.frontends.base.sockets import connection_cap, raise_nofile_limit
from tritonlite.frontends.http.app import make_dispatch
from tritonlite.options import ServerOptions

__all__ = ["CappedServer", "make_server"]

_HEALTH = "/v2/health/"
# s: a request's head must arrive within this, as on the native front end (HttpLimits)
HEADER_TIMEOUT_S = 30.0
# a chunked body's framing may take this plus so many bytes per body byte (as the native)
_FRAMING_BASE = 65536
_FRAMING_PER_BYTE = 16


class _Request:
    """``call.HttpRequest`` over an aiohttp ``BaseRequest``."""

    __slots__ = ("_r", "_limit", "method", "path", "query", "headers", "version", "peer", "close")

    def __init__(self, r: web.BaseRequest, limit: int) -> None:
        self._r = r
        self._limit = limit
        self.method = r.method
        path, _, self.query = r.raw_path.partition("?")
        self.path = path
        self.headers: Mapping[str, str] = r.headers
        self.version = (r.version.major, r.version.minor)
        transport = r.transport
        self.peer = transport.get_extra_info("peername") if transport is not None else None
        self.close = False  # aiohttp closes the connection after this request: say so
        protocol = r.protocol
        if isinstance(protocol, _Handler) and "Transfer-Encoding" in r.headers:
            protocol.watch_framing(r.content)

    async def read(self) -> bytes:
        r = self._r
        length = r.content_length
        if length is not None and length > self._limit:
            self.close = True  # refused before its body is read: the rest cannot be framed
            _stop_reading(r)
            raise HttpError(413, too_large(self._limit))
        expect = r.headers.get("Expect")
        if expect and self.version >= (1, 1) and expect.lower() == "100-continue":
            await r.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            r.writer.output_size = 0
            await r.writer.drain()
        try:
            return await r.read()
        except HttpError:  # _Handler's bound on chunked framing
            self.close = True
            _stop_reading(r)
            raise
        except web.HTTPException as exc:
            if exc.status == 413:
                # a chunked body past the limit: answer and close, rather than let aiohttp
                # read (linger over) the rest of it
                self.close = True
                _stop_reading(r)
                raise HttpError(413, too_large(self._limit)) from None
            raise HttpError(exc.status, exc.reason) from None
        except Exception as exc:  # aiohttp's decompression errors
            self.close = True  # its parser cannot go on: the connection ends after the answer
            encoding = r.headers.get("Content-Encoding", "identity")
            raise invalid_arg(
                f"unable to decompress the request body ({encoding}): {exc}"
            ) from None

    def disconnected(self) -> bool:
        transport = self._r.transport
        return transport is None or transport.is_closing()


def _stop_reading(r: web.BaseRequest) -> None:
    transport = r.transport
    if transport is not None and not transport.is_closing():
        transport.pause_reading()


class _Writer:
    __slots__ = ("_out",)

    def __init__(self, out: web.StreamResponse) -> None:
        self._out = out

    async def write(self, data: bytes) -> None:
        await self._out.write(data)


async def _stream(request: web.BaseRequest, resp: HttpStream) -> web.StreamResponse:
    headers = dict(resp.headers) if resp.headers else {}
    headers["Content-Type"] = resp.content_type
    out = web.StreamResponse(status=resp.status, headers=headers)
    try:
        await out.prepare(request)
    except BaseException:
        await resp.send(_Closed())
        raise
    await resp.send(_Writer(out))
    try:
        await out.write_eof()
    except ConnectionError:
        pass
    return out


class _Closed:
    async def write(self, data: bytes) -> None:
        raise ConnectionResetError("the client went away")


def _response(resp: HttpResponse) -> web.Response:
    parts = resp.body
    body: Any = (bytes(parts[0]) if len(parts) == 1 else b"".join(parts)) if parts else None
    return web.Response(
        status=resp.status, body=body, content_type=resp.content_type, headers=resp.headers
    )


async def _write(request: web.BaseRequest, out: web.Response) -> None:
    """Write ``out`` now (aiohttp accepts a handler's already-prepared response; what it
    would write again is then a no-op, or fails at once on a closed connection).

    A client that went away while the answer waited for it to read fails aiohttp's drain
    with ConnectionError, whose traceback runs through the frame that awaited the future
    holding it: a reference cycle that kept that answer and its request (their bodies) until
    the next full garbage collection, which an idle server may not run for a long time (ten
    stalled 8 MiB answers: +248 MiB after their connections closed; bench/RESULTS.md, Issue
    32). The traceback is dropped here, so the cycle never forms."""
    try:
        await out.prepare(request)
        await out.write_eof()
    except ConnectionError as exc:
        _drop_tracebacks(exc)


def _drop_tracebacks(exc: BaseException | None) -> None:
    seen = 0
    while exc is not None and seen < 16:
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__
        seen += 1


async def _traced(request: web.BaseRequest, resp: HttpResponse) -> web.Response:
    """Write the response now so the send can be timed; ``on_sent`` runs whether or not the
    send succeeded."""
    assert resp.on_sent is not None
    out = _response(resp)
    start = time.monotonic_ns()
    try:
        await _write(request, out)
    finally:
        resp.on_sent(start, time.monotonic_ns())
    return out


_DRAIN_POLL_S = 0.02  # how often a drain looks for a first request on an idle connection


def _exiting() -> web.Response:
    """A request that began after the stop signal: 503, and the connection closes after it."""
    resp = _response(error(503, "Server is exiting"))
    resp.force_close()
    return resp


class _Handler(RequestHandler):
    """aiohttp's connection protocol with the native front end's header timeout: from the
    connection, or from the first byte of a request that comes after the last one was
    answered, its head must be complete within ``header_timeout_s`` (408, then close);
    aiohttp itself has no such timeout (its keep-alive timer closes silently)."""

    def __init__(self, manager: Any, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._tl_head_timeout = header_timeout_s
        self._tl_head_timer: asyncio.TimerHandle | None = None
        self._tl_payload: Any = None  # a chunked body being read (watch_framing)
        self._tl_framing = 0

    def watch_framing(self, payload: Any) -> None:
        """Bound what a chunked body's framing (chunk-size lines, extensions, trailers) may
        take, as the native front end does: aiohttp would read a 64 MiB extension whole."""
        self._tl_payload = payload
        self._tl_framing = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._tl_arm()

    def data_received(self, data: bytes) -> None:
        payload = self._tl_payload
        if payload is None:
            super().data_received(data)
        elif payload.is_eof() or payload.exception() is not None:
            self._tl_payload = None
            super().data_received(data)
        else:
            before = payload.total_bytes
            super().data_received(data)
            got = payload.total_bytes
            self._tl_framing += len(data) - (got - before)
            if self._tl_framing > _FRAMING_BASE + _FRAMING_PER_BYTE * got:
                self._tl_payload = None
                payload.set_exception(
                    HttpError(400, "chunked framing too long (chunk extensions?)")
                )
                if self.transport is not None:
                    self.transport.pause_reading()
        if self._messages:  # a whole head arrived
            self._tl_disarm()
        elif data and self._tl_head_timer is None and not self._request_in_progress:
            self._tl_arm()  # the first bytes of the next request

    def connection_lost(self, exc: BaseException | None) -> None:
        self._tl_disarm()
        super().connection_lost(exc)

    def _tl_arm(self) -> None:
        self._tl_head_timer = self._loop.call_later(self._tl_head_timeout, self._tl_expired)

    def _tl_disarm(self) -> None:
        if self._tl_head_timer is not None:
            self._tl_head_timer.cancel()
            self._tl_head_timer = None

    def _tl_expired(self) -> None:
        self._tl_head_timer = None
        transport = self.transport
        if (
            self._request_in_progress
            or self._messages
            or self._force_close
            or transport is None
            or transport.is_closing()
        ):
            return
        resp = error(408, "timed out reading the request headers")
        body = b"".join(bytes(p) for p in resp.body)
        transport.write(
            b"HTTP/1.1 408 Request Timeout\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (str(resp.content_type).encode(), len(body), body)
        )
        self.force_close()


class CappedServer(web.Server):
    """aiohttp's low-level server with the native front end's connection cap: past
    ``max_connections`` open connections a new one is served one request -- health only,
    anything else 503 -- and closed; past twice the cap (the file-descriptor ceiling the cap
    was derived from) each new connection closes the oldest idle one, so health probes are
    still accepted and answered. Its connections have the native front end's header timeout
    (``header_timeout_s``, ``_Handler``)."""

    def __init__(
        self,
        handler: Any,
        *,
        max_connections: int,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        # a request answered before its body was read closes its connection at once, as on
        # the native front end, instead of aiohttp reading ("lingering" over) the rest
        kwargs.setdefault("lingering_time", 0.0)
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.over_cap: set[Any] = set()  # the RequestHandlers admitted past the cap
        self.begun: set[Any] = set()  # the RequestHandlers a request has begun on

    def __call__(self) -> RequestHandler:
        return _Handler(
            self, loop=self._loop, header_timeout_s=self.header_timeout_s, **self._kwargs
        )

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        connections = self._connections  # in the order they opened
        n = len(connections)
        if n > self.max_connections:
            self.over_cap.add(handler)
        if n > 2 * self.max_connections:
            for other in connections:
                if other is not handler and _idle(other):
                    other.force_close()
                    break

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        self.over_cap.discard(handler)
        self.begun.discard(handler)
        super().connection_lost(handler, exc)

    def fresh(self) -> bool:
        """Whether a connection is open on which no request has begun yet."""
        return any(h not in self.begun for h in self._connections)

    def refused(self) -> web.Response:
        """The answer past the cap to anything but health (the connection then closes)."""
        resp = _response(
            error(503, f"too many open connections: the server's limit is {self.max_connections}")
        )
        resp.force_close()
        return resp


def _idle(handler: Any) -> bool:
    # aiohttp's RequestHandler waits on ``_waiter`` between requests (its own keep-alive
    # timer reads the same attribute); no request read, none in progress
    waiter = getattr(handler, "_waiter", None)
    return waiter is not None and not waiter.done() and not getattr(handler, "_messages", True)


def make_server(core: CoreAPI, opts: ServerOptions, inflight: InFlight | None = None) -> web.Server:
    """The HTTP front end as an aiohttp low-level server (call on the event loop).

    ``inflight`` counts the requests being served; once its ``draining`` is set, a request
    that begins on a connection that has had one gets 503 with ``Connection: close`` (those
    begun before, and a connection's first, are answered).
    """
    loop = asyncio.get_running_loop()
    dispatch = make_dispatch(core, opts)
    max_input_size = opts.http_max_input_size
    counter = inflight if inflight is not None else InFlight()

    def request_factory(
        message: Any, payload: Any, protocol: Any, writer: Any, task: Any
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=max_input_size
        )

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        first = request.protocol not in server.begun
        if first:
            server.begun.add(request.protocol)
        elif counter.draining:  # a connection's first request is served through a drain
            return _exiting()
        over_cap = request.protocol in server.over_cap
        if over_cap and not request.path.startswith(_HEALTH):
            return server.refused()
        counter.enter()
        try:
            req = _Request(request, max_input_size)
            resp = await dispatch(req)
            if isinstance(resp, HttpStream):
                return await _stream(request, resp)
            if resp.on_sent is not None:
                return await _traced(request, resp)
            out = _response(resp)
            if req.close or over_cap:
                out.force_close()  # "Connection: close" rather than a silent close
            del resp, req  # the answer's body is ``out``'s copy now
        finally:
            counter.leave()
        # answered, as when aiohttp wrote it after the handler returned: a drain does not
        # wait for a client that reads slowly
        await _write(request, out)
        return out

    server = CappedServer(
        handle,
        max_connections=min(
            opts.http_max_connections,
            connection_cap(opts.http_max_connections, raise_nofile_limit()),
        ),
        request_factory=request_factory,
        access_log=None,
    )
    return server


async def drain(server: CappedServer, inflight: InFlight, timeout: float, idle: float) -> int:
    """After the stop signal: wait up to ``timeout`` s for the requests begun to be answered,
    and up to ``idle`` s (within it) for the first request of a connection on which none has
    begun (its client connected before the signal and may be sending it now); how many
    begun requests are left."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    idle_end = loop.time() + min(idle, timeout)
    while True:
        left = await inflight.wait_idle(end - loop.time())
        if left or not server.fresh() or loop.time() >= idle_end:
            return left
        await asyncio.sleep(_DRAIN_POLL_S)

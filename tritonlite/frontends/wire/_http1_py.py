"""The HTTP/1.1 server protocol: llhttp (``httptools``) parses, this module frames.

Written in Cython's pure-Python mode: this file is the definition of behaviour and runs as it
is; setup.py also compiles it, with the C types of ``_http1_c.pxd``, into ``_http1_c``.
``http1.py`` is the one module that knows which of the two is in use.

One ``Http1Protocol`` per connection. llhttp does the per-byte work and calls back per URL,
header, body piece and message end -- except for whole, plain requests that arrive between
requests, which ``_h1scan_py.scan`` reads in one pass (``_parse_whole``: the same steps, state
and refusals, without a Python call per header; llhttp parses anything the scanner declines,
and a differential test holds the two to the same result). A request whose headers are
complete joins the connection's queue, and one serving run answers the queue in order
(pipelining: one request dispatched at a time, responses in request order; reading pauses
while ``max_pipeline`` requests wait). The run starts at the end of the ``data_received`` that
queued the first request (``eager.begin``) and becomes a task only if a handler has to
wait. A body is collected into one buffer sized by its Content-Length (kept as the very
bytes object llhttp handed over when it came in one piece), so a handler's ``read()`` of a
complete body does not suspend. A large infer body's buffer is a reused block of the
service's ``recv_blocks`` (``recvbuf.py``: a fresh 4 MiB ``bytearray`` cost a page fault and
zeroing per 4 KiB page, a quarter of the loop's time under a 4 MiB tensor), lent until the
request's input arrays are gone, which is why only the infer handler gets one (the others
take ``bytes`` or a ``bytearray``); once a read has left it incomplete, the transport reads
the rest straight into it (``_BodyReader``), and llhttp starts afresh after it. A response is
framed into one head string and written with one ``transport.write`` (small) or
``writelines`` (large; views of a backend's memory copied into the service's ``send_blocks``
first, ``sendbuf.py``).

What the connection refuses, it answers in order with Triton's ``{"error": ...}`` body and
``Connection: close``, then closes: a malformed request (400), a Content-Length over the body
limit (413, before reading the body), headers over the size or count limit (431), a request
header or body that does not arrive in time (408). Timeouts are deadlines this object keeps;
the server's sweep calls ``check_timeout`` (``http1.HttpService``).

Over 500 lines, one module: Cython compiles it into one extension type (the protocol) whose request
parsing, pipelining, limits and response writing share the connection's state as C attributes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from typing import Any

import httptools

from tritonlite.contracts.errors import invalid_arg
from tritonlite.frontends.base.http_call import (
    HttpError,
    HttpResponse,
    HttpStream,
    too_large,
)
from tritonlite.frontends.base.http_errors import error
from tritonlite.frontends.wire.eager import begin
from tritonlite.frontends.wire.inflate import InflateError, TooLarge, content_wbits

log = logging.getLogger("tritonlite")

# where a connection's parser is
_IDLE = 0  # between requests (waiting for the next one, or for the first)
_HEAD = 1  # reading a request line and headers
_BODY = 2  # reading a body
_DONE = 3  # reading stopped (an error, an upgrade, a closed connection): nothing is parsed

_V11 = (1, 1)
_V10 = (1, 0)
_SMALL = 16384  # a response up to this size is joined into one write
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HEALTH = "/v2/health/"
# an infer body of at least this many bytes that does not come in one piece is collected in a
# reused block (``service.recv_blocks``, ``recvbuf.py``), not a fresh buffer
_BLOCK_MIN = 65536
_INFER = "/infer"
_OVERCAP_TIMEOUT = 1.0  # s: the header timeout of a connection over the cap
# a chunked body's framing (chunk-size lines, extensions, trailers) may take the header size
# limit plus this many bytes per body byte (one-byte chunks with a short extension: ~10)
_FRAMING_PER_BYTE = 16
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
# ``Http1Protocol._task`` between a request joining an empty queue and the end of the
# ``data_received`` that parsed it, when serving starts (or, while the loop is loaded, the
# end of that loop turn: ``HttpService.defer``)
_STARTING = object()


def _check_transfer_coding(value: str) -> None:
    """RFC 9112 6.1 / 6.3: a request body framed by Transfer-Encoding must end in
    ``chunked`` (400 otherwise: its length cannot be known; llhttp, made lenient to serve
    Transfer-Encoding with Content-Length, would read it until the connection closes), and
    no other coding is decoded here (501)."""
    codings = [c.strip().lower() for c in value.split(",")]
    if codings[-1] != "chunked":
        raise _Refuse(400, f"Transfer-Encoding {value!r}: the final coding is not chunked")
    if len(codings) > 1:
        raise _Refuse(501, f"Transfer-Encoding {value!r}: only chunked is supported")


def _takes_block(req: Request) -> bool:
    """Whether ``req``'s body, not complete in one read, is collected in a reused block."""
    return req._length >= _BLOCK_MIN and req.method == "POST" and req.path.endswith(_INFER)


def _status_line(status: int) -> str:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Unknown\r\n"


class _Refuse(Exception):
    """Raised inside a parser callback: stop parsing, answer ``status`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Headers(Mapping[str, str]):
    """Request headers (``call.HttpRequest.headers``): lookups ignore case."""

    __slots__ = ("_d",)

    def __init__(self, d: dict[str, str]) -> None:
        self._d = d  # lower-case names

    def get(self, name: str, default: Any = None) -> Any:
        return self._d.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


class Request:
    """``call.HttpRequest`` of the native transport; the connection owns it."""

    def __init__(self, proto: Http1Protocol) -> None:
        self._proto = proto
        self.method = ""
        self.path = ""
        self.query = ""
        self.headers: Any = None  # set once the headers are complete
        self._headers: dict[str, str] = {}
        self.version = _V11
        self.peer = proto._peer
        self._url = b""
        self._body: Any = None
        self._size = 0
        self._length = -1  # Content-Length; -1 for a chunked body
        self._header_bytes = 0
        self._framing = 0  # chunked framing bytes seen (``data_received``)
        self._complete = False  # the whole message (body included) has been parsed
        self._keep_alive = True
        self._expect = False  # Expect: 100-continue, not answered yet
        self._close = False  # close the connection after answering this request
        self._encoding: Any = None
        self._waiter: Any = None
        self._error: Any = None  # what read() raises (body too large, timed out, lost)
        self._refusal: Any = None  # answered with this instead of being dispatched
        self._admitted = False  # begun before the server started draining: served, not 503
        self._asked = False  # ``json_infer`` was asked for it (``Http1Protocol._answer_json``)

    async def read(self) -> Any:
        if not self._complete and self._error is None:
            await self._proto._wait_body(self)
        if self._error is not None:
            raise self._error
        if self._encoding is not None:
            return await _decode_body(self._proto, self._body, self._encoding)
        return self._body

    def disconnected(self) -> bool:
        # a client's EOF counts: it is answered (half-closed clients wait for that), but a
        # stream waiting for its model's next response stops, as on aiohttp
        proto = self._proto
        t = proto._transport
        return t is None or proto._eof or t.is_closing()


async def _decode_body(proto: Http1Protocol, body: Any, encoding: str) -> Any:
    """``body`` with its gzip/deflate ``Content-Encoding`` undone by the service's
    ``Inflater`` (any other encoding is left as it is: the infer handler answers 501 for it
    before reading); over ``--http-max-input-size`` decompressed is 413, corrupt INVALID_ARG."""
    wbits = content_wbits(encoding, body[0] if body else -1)
    if wbits is None:
        return body
    limit = proto._max_body
    try:
        return await proto._service.inflater.inflate(wbits, body, limit)
    except TooLarge:
        raise HttpError(413, too_large(limit)) from None
    except InflateError as exc:
        enc = encoding.strip().lower()
        raise invalid_arg(f"unable to decompress the request body ({enc}): {exc}") from None


class _ChunkWriter:
    """``call.StreamWriter`` for a streamed response (chunked framing on HTTP/1.1)."""

    def __init__(self, proto: Http1Protocol, chunked: bool) -> None:
        self._proto = proto
        self._chunked = chunked

    async def write(self, data: bytes) -> None:
        proto: Http1Protocol = self._proto
        t = proto._transport
        if t is None or t.is_closing():
            raise ConnectionResetError("the client went away")
        if not data:
            return
        proto.flush_held()
        if self._chunked:
            t.writelines([b"%x\r\n" % len(data), data, b"\r\n"])
        else:
            t.write(data)
        if proto._write_paused:
            await proto._drain()


class _BodyReader(asyncio.BufferedProtocol):
    """The transport's protocol while the rest of a large infer body is read
    (``Http1Protocol._read_into_block``): the socket's bytes go straight into the body's
    block, never past its end. What the transport tells a protocol otherwise goes to the
    connection's ``Http1Protocol``; so does the transport when the body is complete."""

    def __init__(self, proto: Http1Protocol) -> None:
        self._proto = proto
        self._spill: Any = None  # where bytes go once the body is not wanted any more

    def get_buffer(self, sizehint: int) -> Any:
        proto = self._proto
        req = proto._cur
        if proto._state == _BODY and req is not None and req._body is not None:
            return req._body[req._size :]
        # refused or timed out meanwhile (reading is paused then): nothing is kept
        if self._spill is None:
            self._spill = bytearray(_BLOCK_MIN)
        return self._spill

    def buffer_updated(self, nbytes: int) -> None:
        proto = self._proto
        if proto._state == _BODY and proto._cur is not None:
            proto._body_read(nbytes)

    def eof_received(self) -> bool:
        return self._proto.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._proto.connection_lost(exc)

    def pause_writing(self) -> None:
        self._proto.pause_writing()

    def resume_writing(self) -> None:
        self._proto.resume_writing()


class Http1Protocol:
    """One HTTP/1.1 connection (an ``asyncio.Protocol`` by its methods).

    ``service`` gives what connections share: ``dispatch`` (``call.Dispatch``),
    ``json_infer`` (``call.JsonInfer``, asked first for a complete POST body; or None), ``limits``
    (``http1.HttpLimits``), ``draining`` and ``register(proto) -> bool`` / ``unregister``.
    A one-port detector may create it, call ``connection_made`` and then ``data_received``
    with the bytes it has already read.
    """

    def __init__(self, service: Any) -> None:
        limits = service.limits
        self._service = service
        self._dispatch = service.dispatch
        self._json_infer = service.json_infer  # ``call.JsonInfer`` or None
        self._max_body = limits.max_body
        self._max_header_bytes = limits.max_header_bytes
        self._max_headers = limits.max_headers
        self._max_pipeline = limits.max_pipeline
        self._header_timeout = limits.header_timeout_s
        self._body_timeout = limits.body_timeout_s
        self._keepalive_timeout = limits.keepalive_timeout_s
        self._loop: Any = None
        self._transport: Any = None
        self._parser: Any = None
        self._peer: Any = None
        self._cur: Any = None  # the request being parsed
        self._queue: deque[Request] = deque()  # headers complete, not answered yet, in order
        self._task: Any = None  # the task serving the queue, None while it is empty
        self._state = _IDLE
        self._head_pending = 0  # bytes fed while the current head is incomplete
        self._head_began = False  # a head began in the bytes ``_feed`` is feeding
        self._deadline = 0.0  # loop.time() at which the current state times out; 0: none
        self._closing = False  # reading stopped: close once the queue is answered
        self._read_paused = False
        self._write_paused = False
        self._drain_waiter: Any = None
        self._overcap = False
        self._registered = False
        self._eof = False  # the client closed its side
        self._begun = False  # a request has begun on this connection
        self._busy = service.busy  # BusyPoll or None
        self._held: Any = None  # responses held for the end of a serving pass (flush_held)
        # the sending thread's channel (``hand_held``): None until made, False where none can be
        self._chan: Any = None
        self._scan = service.head_scan  # the fast path's ``_h1scan_py.scan``; None: llhttp only
        self._reader: Any = None  # the ``_BodyReader`` (made at the first large infer body)

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._peer = transport.get_extra_info("peername")
        self._new_parser()
        self._registered = True
        self._overcap = not self._service.register(self)
        # over the cap, a connection gets one request, and only a short while to send it:
        # idle connections must not keep the file descriptors health probes need
        timeout = (
            self._header_timeout
            if not self._overcap
            else min(self._header_timeout, _OVERCAP_TIMEOUT)
        )
        if self._service.draining:  # taken from the listener's backlog at the stop signal
            timeout = min(timeout, self._service.limits.drain_idle_s)
        self._deadline = self._loop.time() + timeout

    def _new_parser(self) -> None:
        """llhttp for this connection from a message boundary on."""
        parser = httptools.HttpRequestParser(self)
        # Transfer-Encoding with Content-Length: served by chunked framing, then closed
        parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self._parser = parser

    def data_received(self, data: bytes) -> None:
        if self._state == _DONE:
            return
        busy = self._busy
        if busy is not None:
            busy.touch()
        try:
            used = 0
            if self._state == _IDLE and self._scan is not None and type(data) is bytes:
                try:
                    used = self._parse_whole(data)
                except Exception as exc:  # as a callback that raised: a bug, answered 500
                    log.error("HTTP/1.1 protocol error", exc_info=exc)
                    self._refuse(500, f"internal error: {exc!r}")
                    return
            if not used:
                self._feed(data, len(data))
            elif used < len(data) and self._state == _IDLE:
                self._feed(data[used:], len(data))
            if self._state == _BODY and _takes_block(self._cur):
                self._read_into_block(self._cur)
        finally:
            if self._task is _STARTING:
                if busy is not None and busy.loaded():
                    self._service.defer(self)  # served with the others of this loop turn
                else:
                    self._begin()

    def _feed(self, data: bytes, size: int) -> None:
        """llhttp parses ``data``, the last ``size`` bytes of this ``data_received`` or fewer:
        what the fast path (``_parse_whole``) took before it is counted as llhttp would have
        counted it, had it parsed all of them."""
        cur: Request | None = self._cur if self._state == _BODY else None
        size0 = cur._size if cur is not None else 0
        self._head_began = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._stop_reading()  # no protocol switch here: answer what came, then close
        except httptools.HttpParserCallbackError as exc:
            ctx = exc.__context__
            if isinstance(ctx, _Refuse):
                self._refuse(ctx.status, ctx.message)
            else:
                log.error("HTTP/1.1 protocol error", exc_info=ctx or exc)
                self._refuse(500, f"internal error: {ctx!r}")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
        else:
            state = self._state
            if state == _HEAD:
                if self._head_began:
                    # The head began in these bytes, after the requests before it in them. Its
                    # share is at least what its callbacks counted (the URL, whole header
                    # lines) and at least the line still open, after the last LF: the larger
                    # (an open request line is both). The reads after it count whole.
                    tail = memoryview(data).tobytes() if type(data) is not bytes else data
                    open_line = len(tail) - 1 - tail.rfind(b"\n")
                    self._head_pending = max(self._cur._header_bytes, open_line)
                else:
                    self._head_pending += size
                if self._head_pending > self._max_header_bytes:
                    self._refuse(431, "Request Header Fields Too Large")
            elif state == _BODY:
                self._deadline = self._loop.time() + self._body_timeout
                if cur is not None and cur is self._cur and cur._length < 0:
                    # chunked: what came that was not body (chunk-size lines, extensions,
                    # trailers) is bounded, or a 64 MiB extension would be read to its end
                    cur._framing += len(data) - (cur._size - size0)
                    if cur._framing > self._max_header_bytes + _FRAMING_PER_BYTE * cur._size:
                        self._refuse(400, "chunked framing too long (chunk extensions?)")

    def _parse_whole(self, data: bytes) -> int:
        """The fast path: the whole, plain requests at the start of ``data`` read by the
        service's ``head_scan`` (``_h1scan_py.scan``) instead of llhttp, while the connection
        is between requests; how many bytes they took. It stops at the first request
        ``scan`` declines (llhttp parses it and what follows, from a clean message boundary:
        llhttp has seen no byte of it), and before one that ends reading with more bytes
        behind it (llhttp parses those: what it makes of them is its to decide). What it
        takes goes through the steps llhttp's callbacks take (``_begin_message``, ``_admit``,
        ``_enqueue``, ``_end_message``), with the same request state, limits and refusals;
        only the parse deadlines are not set, as the request is complete when they would be
        (``_end_message`` clears them)."""
        scan = self._scan
        n = len(data)
        pos = 0
        while pos < n and self._state == _IDLE:
            head = scan(data, pos, self._max_header_bytes, self._max_headers)
            if head is None:
                break
            (
                status,
                end,
                method,
                url,
                path,
                query,
                headers,
                minor,
                keep_alive,
                length,
                header_bytes,
                body,
            ) = head
            if end < n and (not keep_alive or self._overcap):
                break
            pos = end
            req = self._begin_message()
            req._url = url
            req._header_bytes = header_bytes
            req._headers = headers
            if status == 414:
                self._refuse(414, "URI Too Long")
                break
            if status:
                self._refuse(431, "Request Header Fields Too Large")
                break
            req.headers = Headers(headers)
            req.method = method
            if minor == 0:
                req.version = _V10
            req._keep_alive = keep_alive
            req.path = path
            req.query = query
            req._length = length
            try:
                self._admit(req)
            except _Refuse as exc:
                self._refuse(exc.status, exc.message)
                break
            self._enqueue(req)
            if body is not None:
                req._body = body
                req._size = length
            self._end_message(req)
        return pos

    def eof_received(self) -> bool:
        # the client half-closed: answer what it sent, then close
        self._eof = True
        if self._cur is not None and self._state != _DONE:
            self._refuse(400, "the client closed its side before the request ended")
        else:
            self._stop_reading()
        if self._task is None:
            self._close_now()
        return True

    def connection_lost(self, exc: Any) -> None:
        self._transport = None
        self._reader = None  # it refers back to this: freed with it, not by a collection
        chan = self._chan
        if chan:
            self._chan = False
            chan.release()
        self._state = _DONE
        self._closing = True
        self._queue.clear()
        if self._registered:
            self._registered = False
            self._service.unregister(self)
        cur = self._cur
        if cur is not None and not cur._complete and cur._error is None:
            cur._error = ConnectionResetError("the client went away")
            cur._body = None  # never read: a block goes back now, not at a collection
            self._wake(cur)
        self._wake_drain()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()

    # -- llhttp callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._begin_message()
        self._deadline = self._loop.time() + self._header_timeout

    def _begin_message(self) -> Request:
        """A request begins (llhttp's first byte of it, or the fast path's)."""
        req = self._cur = Request(self)
        if not self._begun:  # a connection's first request is served through a drain
            self._begun = True
            req._admitted = True
        self._state = _HEAD
        self._head_pending = 0
        self._head_began = True
        return req

    def on_url(self, url: bytes) -> None:
        req: Request = self._cur
        req._url = req._url + url if req._url else url
        req._header_bytes += len(url)
        if req._header_bytes > self._max_header_bytes:
            raise _Refuse(414, "URI Too Long")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._state != _HEAD:
            return  # a chunked body's trailers
        req: Request = self._cur
        req._header_bytes += len(name) + len(value) + 4
        if req._header_bytes > self._max_header_bytes:
            raise _Refuse(431, "Request Header Fields Too Large")
        headers = req._headers
        if len(headers) >= self._max_headers:
            raise _Refuse(431, "Request Header Fields Too Large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        old = headers.get(key)
        headers[key] = text if old is None else old + ", " + text

    def on_headers_complete(self) -> None:
        req: Request = self._cur
        parser = self._parser
        headers = req._headers
        req.headers = Headers(headers)
        req.method = parser.get_method().decode("ascii")
        version = parser.get_http_version()
        if version != "1.1":
            if version != "1.0":
                raise _Refuse(400, f"unsupported HTTP version {version}")
            req.version = _V10
        req._keep_alive = parser.should_keep_alive()
        url = req._url
        q = url.find(b"?")
        if q >= 0:
            req.path = url[:q].decode("utf-8", "surrogateescape")
            req.query = url[q + 1 :].decode("utf-8", "surrogateescape")
        else:
            req.path = url.decode("utf-8", "surrogateescape")
        length = headers.get("content-length")
        te = headers.get("transfer-encoding")
        if te is not None:
            _check_transfer_coding(te)
            if length is not None or req.version == _V10:
                # RFC 9112 6.3 / 6.1: framed by Transfer-Encoding (llhttp's
                # lenient_chunked_length), but the framing is suspect: close after answering
                req._close = True
        elif length is not None:
            req._length = int(length)  # llhttp has checked its digits
        self._admit(req)
        self._state = _BODY
        self._deadline = self._loop.time() + self._body_timeout
        self._enqueue(req)

    def _admit(self, req: Request) -> None:
        """The checks of a request whose headers are complete (``req._length``: its
        Content-Length, -1 for none); raises ``_Refuse`` for one that is not served."""
        if req._length > self._max_body:
            raise _Refuse(413, too_large(self._max_body))
        if self._service.draining and not req._admitted:
            raise _Refuse(503, "Server is exiting")
        if self._overcap:
            req._close = True
            if not req.path.startswith(_HEALTH):
                raise _Refuse(
                    503,
                    "too many open connections: the server's limit is "
                    f"{self._service.limits.max_connections}",
                )
        headers = req._headers
        expect = headers.get("expect")
        if expect is not None and req.version >= _V11 and expect.lower() == "100-continue":
            req._expect = True
        encoding = headers.get("content-encoding")
        if encoding is not None:
            req._encoding = encoding

    def _enqueue(self, req: Request) -> None:
        """``req`` (its headers complete) joins the connection's queue."""
        queue = self._queue
        queue.append(req)
        if self._task is None:
            self._task = _STARTING  # served once this data_received has parsed what it can
        elif len(queue) > self._max_pipeline and not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()

    def on_body(self, body: bytes) -> None:
        req: Request = self._cur
        n = len(body)
        size = req._size
        buf = req._body
        if req._length >= 0:
            if buf is None:
                if n == req._length:
                    req._body = body
                else:
                    if _takes_block(req):
                        buf = self._service.recv_blocks.take(req._length)
                    else:
                        buf = bytearray(req._length)
                    buf[:n] = body
                    req._body = buf
            else:
                buf[size : size + n] = body
        else:
            if size + n > self._max_body:
                raise _Refuse(413, too_large(self._max_body))
            if buf is None:
                req._body = bytearray(body)
            else:
                buf += body
        req._size = size + n

    def on_message_complete(self) -> None:
        self._end_message(self._cur)

    # -- a large infer body read straight into its block -----------------------------------
    def _read_into_block(self, req: Request) -> None:
        """At the end of a ``data_received`` that left ``req``'s large infer body incomplete:
        the rest is read by the transport straight into the body's block (``_BodyReader``
        becomes its protocol), not copied out of a ``bytes`` per read and then again out of
        llhttp's per body piece. llhttp does not see those bytes: a fresh parser takes over
        at the message boundary after them (``_body_read``)."""
        t = self._transport
        if t is None or t.is_closing():
            return
        if req._body is None:
            req._body = self._service.recv_blocks.take(req._length)
        reader = self._reader
        if reader is None:
            reader = self._reader = _BodyReader(self)
        t.set_protocol(reader)

    def _body_read(self, n: int) -> None:
        """``_BodyReader``: ``n`` more bytes of the current body are in its block."""
        busy = self._busy
        if busy is not None:
            busy.touch()
        req: Request = self._cur
        req._size += n
        if req._size < req._length:
            self._deadline = self._loop.time() + self._body_timeout
            return
        self._new_parser()
        self._transport.set_protocol(self)
        self._end_message(req)

    def _end_message(self, req: Request) -> None:
        """``req`` has been read to its end."""
        self._cur = None
        self._state = _IDLE
        self._deadline = 0.0
        if req._body is None:
            req._body = b""
        req._complete = True
        if req._waiter is not None:
            self._wake(req)
        if req._close or not req._keep_alive:
            self._stop_reading()

    # -- serving ---------------------------------------------------------------------------
    def serve_deferred(self) -> None:
        """The service's serving pass (``HttpService.defer``): start on the queue unless
        something started it since (or the connection went away: ``_serve`` then ends at
        once)."""
        if self._task is _STARTING:
            self._begin()

    def _begin(self) -> None:
        """Serve the queue: its first steps run right here (``eager.begin``), and a task
        takes over only if it has to wait (a body still arriving, a model's result, a full
        send buffer). The JSON infer requests at its head that ``json_infer`` answers are
        answered first, with no coroutine (``_answer_json``)."""
        if self._json_infer is not None and self._answer_json():
            return
        try:
            task = begin(self._loop, self._serve())
        except Exception:  # _serve's finally has set _task back to None
            log.exception("unexpected error serving an HTTP/1.1 connection")
            self._close_now()
            return
        if task is not None:
            self._task = task
        # else: answered; _serve has set _task back to None

    def _answer_json(self) -> bool:
        """``_serve``'s steps for the complete POST requests at the queue's head that
        ``json_infer`` answers, with no coroutine: True when that ended serving (the queue
        answered, or the connection closed), False when ``_serve`` goes on from the head
        (a request ``json_infer`` left to ``dispatch`` is marked ``_asked``: not asked
        twice). Nothing here waits: a full send buffer leaves the rest to ``_serve``."""
        queue = self._queue
        fast = self._json_infer
        while queue and self._transport is not None and not self._write_paused:
            req: Request = queue[0]
            if req._refusal is not None or not req._complete or req.method != "POST":
                return False
            req._asked = True
            try:
                resp = fast(req.path, req._headers, req._body)
            except Exception as exc:  # as ``_serve`` answers a dispatch that raised
                log.exception("unexpected error handling %s %s", req.method, req.path)
                resp = error(500, f"internal error: {type(exc).__name__}: {exc}")
                req._close = True
            if resp is None:
                return False
            close = self._taken(req)
            self._send(req, resp, close)
            if close:
                self._task = None
                self._close_now()
                return True
        if queue and self._transport is not None:
            return False  # a full send buffer (``_serve`` drains) or more to serve
        self._task = None
        self._served()
        return True

    async def _serve(self) -> None:
        queue = self._queue
        try:
            while queue and self._transport is not None:
                req: Request = queue[0]
                resp = req._refusal
                if resp is None:
                    try:
                        fast = self._json_infer
                        if (
                            fast is not None
                            and not req._asked
                            and req._complete
                            and req.method == "POST"
                        ):
                            req._asked = True
                            resp = fast(req.path, req._headers, req._body)
                        if resp is None:
                            resp = await self._dispatch(req)
                    except Exception as exc:  # a dispatch should map its own errors
                        log.exception("unexpected error handling %s %s", req.method, req.path)
                        resp = error(500, f"internal error: {type(exc).__name__}: {exc}")
                        req._close = True
                close = self._taken(req)
                if type(resp) is HttpResponse:
                    self._send(req, resp, close)
                elif isinstance(resp, HttpStream):
                    close = await self._send_stream(req, resp, close)
                else:
                    self._send(req, resp, close)
                if close:
                    self._close_now()
                    return
                if self._write_paused:
                    # what was answered is not kept while a slow client takes it (a model's
                    # output arrays, the request's body): only the transport's copy is
                    req = resp = None  # type: ignore[assignment]
                    await self._drain()
        finally:
            self._task = None
        self._served()

    def _served(self) -> None:
        """The queue is answered: an idle connection closes if the server is draining (the
        signal came meanwhile), else waits for its next request until the keep-alive
        timeout."""
        if self._state == _IDLE and self._transport is not None:
            if self._service.draining:
                self._close_now()
            else:
                self._deadline = self._loop.time() + self._keepalive_timeout

    def _taken(self, req: Request) -> bool:
        """``req``, at the queue's head, is answered: off the queue, reading resumed once the
        queue is down to half the pipeline cap; whether the connection closes after its
        response."""
        queue = self._queue
        queue.popleft()
        if (
            self._read_paused
            and len(queue) <= self._max_pipeline // 2
            and not self._closing
            and self._transport is not None
        ):
            self._read_paused = False
            self._transport.resume_reading()
        if not req._complete:
            # answered without its whole body (a refusal, or a handler that did not read it):
            # what follows on the connection cannot be framed any more
            self._stop_reading()
        return bool(
            req._close
            or not req._keep_alive
            or (self._closing and not queue)
            or (self._service.draining and not queue and self._state == _IDLE)
        )

    def _send(self, req: Request, resp: HttpResponse, close: bool) -> None:
        on_sent = resp.on_sent
        start = time.monotonic_ns() if on_sent is not None else 0
        try:
            t = self._transport
            if t is not None and not t.is_closing():
                body = resp.body
                n = 0
                for part in body:
                    n += part.nbytes if type(part) is memoryview else len(part)
                head = _status_line(resp.status)
                if resp.content_type is not None:
                    head += "Content-Type: " + resp.content_type + "\r\n"
                if resp.headers:
                    for key, value in resp.headers.items():
                        head += key + ": " + value + "\r\n"
                head += "Content-Length: " + str(n) + "\r\n"
                if close:
                    head += "Connection: close\r\n\r\n"
                elif req.version < _V11:
                    head += "Connection: keep-alive\r\n\r\n"
                else:
                    head += "\r\n"
                data = head.encode("latin-1")
                if body and req.method != "HEAD":
                    if n > _SMALL:
                        # the transport gets copies of a large body's views (sendbuf.py):
                        # a client that stops reading must not hold the backend's memory
                        self.flush_held()
                        t.writelines([data, *self._service.send_blocks.gather(body)])
                        return
                    data = data + body[0] if len(body) == 1 else b"".join([data, *body])
                if on_sent is None and self._service.holding:
                    held = self._held
                    if held is None:
                        self._held = [data]
                        self._service.hold(self)
                    else:
                        held.append(data)
                    return
                self.flush_held()
                t.write(data)
        finally:
            if on_sent is not None:
                on_sent(start, time.monotonic_ns())

    def flush_held(self) -> None:
        """Write the responses held during a serving pass (``HttpService._serve_ready``);
        called at its end, and before anything else is written or the connection closes.
        Responses handed to the sending thread (``hand_held``) are settled first: the call
        waits for the thread to be done with them and writes what it kept back."""
        chan = self._chan
        if chan:
            chan.settle_into(self._transport)
        held = self._held
        if held is None:
            return
        self._held = None
        t = self._transport
        if t is not None and not t.is_closing():
            t.write(held[0] if len(held) == 1 else b"".join(held))

    def hand_held(self, sender: Any) -> None:
        """At a serving pass's end: hand the responses held during it to ``sender``'s thread
        (``_sender_py``), where the transport has nothing buffered; else write them."""
        held = self._held
        if held is None:
            return
        t = self._transport
        if t is None or t.is_closing():
            self._held = None
            return
        chan = self._chan
        if chan is None:
            chan = self._chan = sender.channel(t, self.flush_held) or False
        if not chan or t.get_write_buffer_size():
            self.flush_held()  # TLS, or bytes queued in the transport: they go first
            return
        self._held = None
        sender.submit(chan, held[0] if len(held) == 1 else b"".join(held))

    async def _send_stream(self, req: Request, resp: HttpStream, close: bool) -> bool:
        """Write a streamed response; whether the connection must close after it."""
        self.flush_held()
        chunked = req.version >= _V11
        if not chunked:
            close = True  # an HTTP/1.0 body without a length ends when the connection does
        head = _status_line(resp.status) + "Content-Type: " + resp.content_type + "\r\n"
        if resp.headers:
            for key, value in resp.headers.items():
                head += key + ": " + value + "\r\n"
        if chunked:
            head += "Transfer-Encoding: chunked\r\n"
        head += "Connection: close\r\n\r\n" if close else "\r\n"
        t = self._transport
        if t is not None and not t.is_closing():
            t.write(head.encode("latin-1"))
        try:
            await resp.send(_ChunkWriter(self, chunked))
        except Exception:  # the head is out: all that is left is to end the connection
            log.exception("unexpected error streaming %s %s", req.method, req.path)
            return True
        t = self._transport
        if chunked and t is not None and not t.is_closing():
            t.write(b"0\r\n\r\n")
        return close

    async def _wait_body(self, req: Request) -> None:
        t = self._transport
        if t is None:
            raise ConnectionResetError("the client went away")
        if req._expect:
            req._expect = False
            self.flush_held()
            t.write(_CONTINUE)
        waiter = self._loop.create_future()
        req._waiter = waiter
        await waiter

    async def _drain(self) -> None:
        if self._transport is None:
            return
        waiter = self._loop.create_future()
        self._drain_waiter = waiter
        await waiter

    def _wake(self, req: Request) -> None:
        waiter = req._waiter
        req._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_drain(self) -> None:
        waiter = self._drain_waiter
        self._drain_waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- refusing, stopping, timeouts ------------------------------------------------------
    def _stop_reading(self) -> None:
        """Parse nothing more; close once every queued request has been answered."""
        self._state = _DONE
        self._closing = True
        self._deadline = 0.0
        t = self._transport
        if t is not None and not self._read_paused:
            self._read_paused = True
            t.pause_reading()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` in turn (after what is queued) and close the connection."""
        cur = self._cur
        self._cur = None
        if cur is not None and cur in self._queue:
            # dispatched (or about to be) with its body incomplete: its read() fails
            cur._error = HttpError(status, message)
            cur._body = None  # never read (as above)
            self._wake(cur)
        else:
            req = cur if cur is not None else Request(self)
            req._refusal = error(status, message)
            req._close = True
            self._queue.append(req)
            if self._task is None and self._loop is not None:
                self._task = self._loop.create_task(self._serve())
        self._stop_reading()

    def check_timeout(self, now: float) -> None:
        """Called by the server's sweep: act on a deadline that has passed."""
        deadline = self._deadline
        if deadline == 0.0 or now < deadline or self._transport is None:
            return
        self._deadline = 0.0
        state = self._state
        if state == _HEAD:
            self._refuse(408, "timed out reading the request headers")
        elif state == _BODY:
            self._refuse(408, "timed out reading the request body")
        elif self._task is None:
            self._close_now()  # idle past the keep-alive timeout

    def shutdown(self) -> None:
        """The server drains: answer what is in flight -- a request whose first byte has
        arrived included, even with its head incomplete -- and close after. An idle
        connection stays open ``drain_idle_s`` (its client may be sending right now): its
        first request is served, a further one gets 503; then it closes."""
        if self._task is None and self._state == _IDLE:
            if self._transport is not None:
                deadline = self._loop.time() + self._service.limits.drain_idle_s
                if self._deadline == 0.0 or deadline < self._deadline:
                    self._deadline = deadline
        elif self._cur is not None:
            self._cur._admitted = True

    def idle(self) -> bool:
        """Between requests, with nothing queued or being answered (safe to close)."""
        return self._task is None and self._state == _IDLE and self._cur is None

    def close_idle(self) -> None:
        """Close this idle connection to make room for new ones (the server is at its
        file-descriptor ceiling)."""
        self._close_now()

    def pending(self) -> int:
        """Requests begun on this connection and not answered yet."""
        n = len(self._queue)
        cur = self._cur
        if cur is not None and cur not in self._queue:
            n += 1
        return n

    def abort(self) -> None:
        t = self._transport
        if t is not None:
            t.abort()

    def _close_now(self) -> None:
        self.flush_held()
        t = self._transport
        self._state = _DONE
        self._closing = True
        if t is not None and not t.is_closing():
            t.close()

"""gRPC over tritonlite's own HTTP/2 layer: an asyncio Protocol serving a ``GrpcMethods`` registry.

``GrpcProtocol(methods, limits)`` is one connection: ``wire.h2.H2Connection`` parses and frames,
this module maps streams to calls (``GrpcCall``, see ``frontends/base/call.py``) and runs each
call's handler as a task. It makes no assumption about who created it: a listener from
``start_grpc_native`` or the one-port detector calling ``connection_made`` and then
``data_received(first_bytes)``.

Input: the protocol is a ``BufferedProtocol``. While a large request message's DATA frame is
arriving, the transport reads the socket straight into the block that message is assembled in
(``H2Connection.recv_view``; blocks from ``wire.recvbuf``, reused once the request's last
view is gone), and between that message's frames only the next frame's header is read
(``recv_hint``), so the payload after it lands in the block too; every other read goes to a
scratch buffer the server's connections share (their reads run one at a time on the loop) and
is parsed from there. ``data_received`` still takes bytes, for a transport that reads
without buffers.

Ownership: a call's task owns the call until its handler returns; the protocol owns the stream
and ends it (trailers), and cancels the task when the client resets the stream, the deadline
passes or the connection is lost.

Over 500 lines, one module: the gRPC transport's connection protocol, its call objects and its
server share the per-connection callbacks and limits; each part is small, and a split would pass
that state between modules on every frame.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

from tritonlite.contracts.errors import TritonliteError
from tritonlite.frontends.base.call import GrpcMethod, GrpcMethods, Message, RpcError
from tritonlite.frontends.base.grpc_errors import (
    DEADLINE_EXCEEDED,
    INTERNAL,
    OK,
    RESOURCE_EXHAUSTED,
    STATUS,
    UNAVAILABLE,
    UNIMPLEMENTED,
    UNKNOWN,
    internal_message,
    rejected,
)
from tritonlite.frontends.wire.eager import begin
from tritonlite.frontends.wire.h2 import (
    ENHANCE_YOUR_CALM,
    NO_ERROR,
    H2Connection,
    H2Limits,
    encode_headers,
)
from tritonlite.frontends.wire.inflate import (
    InflateError,
    Inflater,
    Inflation,
    TooLarge,
    grpc_wbits,
)
from tritonlite.frontends.wire.keepalive import Keepalive, KeepaliveSettings, ping_frame
from tritonlite.frontends.wire.recvbuf import RecvBlocks
from tritonlite.frontends.wire.sendbuf import SendBlocks

log = logging.getLogger("tritonlite.grpc")

_ACCEPT = b"identity,deflate,gzip"
_BASE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_HEAD = {
    None: encode_headers(_BASE + [(b"grpc-accept-encoding", _ACCEPT)]),
    "gzip": encode_headers(
        _BASE + [(b"grpc-encoding", b"gzip"), (b"grpc-accept-encoding", _ACCEPT)]
    ),
    "deflate": encode_headers(
        _BASE + [(b"grpc-encoding", b"deflate"), (b"grpc-accept-encoding", _ACCEPT)]
    ),
}
# streamed bytes that may wait for the end of a loop turn before they are written
_FLUSH_AT = 1 << 18
# the largest output a turn's flush hands to the sending thread (larger goes by the loop)
_HAND_MAX = 1 << 14
# the shared scratch buffer reads go to when they cannot go straight into a message's block
_SCRATCH = 1 << 18
# After a GOAWAY of ours with nothing open, how long the connection waits for its client to
# close it: a request the client sent before the GOAWAY reached it is refused (REFUSED_STREAM,
# which clients retry on a new connection), not met by a reset that would also discard the
# GOAWAY unread in the client's socket (closing with the request unread sends a TCP RST).
_GOAWAY_LINGER_S = 1.0
_TRAILERS_OK = encode_headers([(b"grpc-status", b"0")])
_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}
# headers that are transport, not the application's metadata
_RESERVED = frozenset(
    (
        b"content-type",
        b"te",
        b"grpc-timeout",
        b"grpc-encoding",
        b"grpc-accept-encoding",
        b"content-length",
    )
)


class GrpcLimits(H2Limits):
    """``H2Limits`` plus the transport's own: how long a connection may hold output the client
    does not read (flow control or socket), how many unread requests a streaming call
    queues before the client's window stops being refilled, the largest size a compressed
    request message may decompress to (``--grpc-max-decompressed-size``; never more than
    ``max_message_size``), and the keepalive, ping abuse and connection age settings
    (``wire.keepalive``; None: none of them applies)."""

    def __init__(
        self,
        *,
        stall_timeout_s: float = 30.0,
        read_queue: int = 16,
        max_decompressed_size: int = 256 * 1024 * 1024,
        keepalive: KeepaliveSettings | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if max_decompressed_size < 1:
            raise ValueError("GrpcLimits.max_decompressed_size must be at least 1")
        self.stall_timeout_s = stall_timeout_s
        self.read_queue = read_queue
        self.max_decompressed_size = max_decompressed_size
        self.keepalive = keepalive


def _percent(text: str) -> bytes:
    """grpc-message's percent-encoding: UTF-8, bytes outside 0x20-0x7E and '%' as %XX."""
    raw = text.encode("utf-8", "replace")
    if all(0x20 <= c <= 0x7E and c != 0x25 for c in raw):
        return raw
    return b"".join(bytes((c,)) if 0x20 <= c <= 0x7E and c != 0x25 else b"%%%02X" % c for c in raw)


def _status_block(code: int, message: str, with_head: bool) -> bytes:
    headers = list(_BASE) if with_head else []
    headers.append((b"grpc-status", str(code).encode()))
    if message:
        headers.append((b"grpc-message", _percent(message)))
    return encode_headers(headers)


def _timeout(value: bytes) -> float | None:
    if len(value) < 2 or len(value) > 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


def _inflate_error(exc: InflateError, algorithm: str) -> RpcError:
    """grpc-core's answers: RESOURCE_EXHAUSTED past the limit, INTERNAL for a bad message."""
    if isinstance(exc, TooLarge):
        return RpcError(
            RESOURCE_EXHAUSTED,
            f"Received message larger than max (more than {exc.limit} bytes decompressed"
            f" vs. {exc.limit})",
        )
    return RpcError(INTERNAL, f"Failed to decompress the request message ({algorithm}): {exc}")


def _compress(algorithm: str, data: Message) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31 if algorithm == "gzip" else 15)
    if isinstance(data, list):
        return b"".join([c.compress(part) for part in data]) + c.flush()
    return c.compress(data) + c.flush()


class _Call:
    """One RPC: what the handler sees as its ``GrpcCall``."""

    __slots__ = (
        "_proto",
        "sid",
        "method",
        "headers",
        "request",
        "task",
        "deadline",
        "timer",
        "encoding",
        "accept",
        "compression",
        "head_sent",
        "ended",
        "done",
        "queue",
        "eof",
        "held",
        "reader",
        "writer",
        "inflating",
        "backlog",
    )

    def __init__(
        self, proto: GrpcProtocol, sid: int, method: GrpcMethod, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._proto = proto
        self.sid = sid
        self.method = method
        self.headers = headers
        self.request: bytes | None = None
        self.task: asyncio.Task[None] | None = None
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.encoding: str | None = None
        self.accept: bytes = b""
        self.compression: str | None = None
        self.head_sent = False
        self.ended = False
        self.done: list[Callable[[], None]] | None = None
        self.queue: deque[bytes] | None = None
        self.eof = False
        self.held = False  # the client's stream window is not refilled while requests wait
        # a reader and a writer may wait at once (a stream handler reading in another task)
        self.reader: asyncio.Future[None] | None = None
        self.writer: asyncio.Future[None] | None = None
        # a message that could not be inflated at once finishes in this task; what arrives
        # for the call meanwhile (messages, then None for the half-close) waits in backlog
        self.inflating: asyncio.Task[None] | None = None
        self.backlog: deque[tuple[int, bytes] | None] | None = None

    # GrpcCall
    def metadata(self) -> Sequence[tuple[str, str | bytes]]:
        out: list[tuple[str, str | bytes]] = []
        for name, value in self.headers:
            if name[:1] == b":" or name in _RESERVED:
                continue
            key = name.decode("latin-1")
            if key.endswith("-bin"):
                try:
                    out.append((key, base64.b64decode(value + b"=" * (-len(value) % 4))))
                except binascii.Error:
                    out.append((key, value))  # not base64 after all: the bytes as sent
            else:
                out.append((key, value.decode("latin-1")))
        return out

    def peer_is_local(self) -> bool:
        return self._proto.local

    def set_compression(self, algorithm: str | None) -> None:
        if algorithm is not None and algorithm not in ("gzip", "deflate"):
            raise ValueError(f"unsupported compression {algorithm!r}")
        if algorithm is not None and algorithm.encode() not in self.accept:
            algorithm = None  # the client did not say it can read it
        self.compression = algorithm

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self._proto.loop.time())

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        if self.done is None:
            self.done = [fn]
        else:
            self.done.append(fn)

    async def read(self) -> bytes | None:
        queue = self.queue
        assert queue is not None, "read() is for streaming calls"
        while not queue:
            if self.eof or self.ended:
                return None
            self.reader = self._proto.loop.create_future()
            try:
                await self.reader
            finally:
                self.reader = None
        message = queue.popleft()
        if self.held and len(queue) < self._proto.read_queue // 2:
            self.held = False
            if self._proto.conn is not None:
                self._proto.conn.set_reading(self.sid, True)
                self._proto.flush_soon()
        return message

    async def write(self, message: Message) -> None:
        proto = self._proto
        conn = proto.conn
        if self.ended or conn is None:
            raise asyncio.CancelledError()
        if not self.head_sent:
            self.head_sent = True
            conn.send_headers(self.sid, _HEAD[self.compression])
        if self.compression is not None:
            ok = conn.send_message(self.sid, _compress(self.compression, message), True)
        else:
            if type(message) is list:
                # a large message's array views are copied into reused blocks
                # (sendbuf.py): a peer that stops reading holds those, never the memory
                # a backend produced its outputs in
                message = proto.send_blocks.gather(message)
            ok = conn.send_message(self.sid, message, False)
        proto.unflushed += len(message)
        if proto.unflushed > _FLUSH_AT:
            proto.flush()  # a handler writing without a pause would queue without a bound
        else:
            proto.flush_soon()
        while (not ok or proto.paused) and not self.ended:
            self.writer = proto.loop.create_future()
            try:
                await self.writer
            finally:
                self.writer = None
            conn = proto.conn
            ok = conn is None or conn.writable(self.sid)

    def _wake(self) -> None:
        self._wake_reader()
        self._wake_writer()

    def _wake_reader(self) -> None:
        w = self.reader
        if w is not None and not w.done():
            w.set_result(None)

    def _wake_writer(self) -> None:
        w = self.writer
        if w is not None and not w.done():
            w.set_result(None)


class GrpcProtocol(asyncio.BufferedProtocol):
    """One gRPC connection over ``H2Connection``."""

    def __init__(
        self,
        methods: GrpcMethods,
        limits: GrpcLimits | None = None,
        server: NativeGrpcServer | None = None,
    ) -> None:
        self.methods = methods
        # keyed by the :path bytes as they arrive, so a lookup decodes nothing
        self._paths = {path.encode(): m for path, m in methods.items()}
        self.limits = limits if limits is not None else GrpcLimits()
        self.read_queue = self.limits.read_queue
        self.server = server
        self.conn: Any = None
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.calls: dict[int, _Call] = {}
        self.local = False
        self.paused = False
        self._stall: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._flush_pending = False
        self._in_pass = False  # waiting for the server's end-of-turn flush (NativeGrpcServer)
        # the sending thread's channel (wire/_sender_py.py): None until made, False: none
        self._chan: Any = None
        self._receiving = False  # inside data_received: unary calls wait in _ready
        self._ready: list[_Call] = []
        self.unflushed = 0
        self._stall_mark = 0
        self._resumes = 0
        self.keepalive: Keepalive | None = None
        self._ka_data = 0
        self._busy = server.busy if server is not None else None  # BusyPoll or None
        self.inflater = server.inflater if server is not None else Inflater()
        self.send_blocks = server.send_blocks if server is not None else SendBlocks()
        self.recv_blocks = server.recv_blocks if server is not None else RecvBlocks()
        self._scratch = server.scratch if server is not None else memoryview(bytearray(_SCRATCH))
        self._head = self._scratch[:9]  # a frame header alone (H2Connection.recv_hint)
        self._direct = False  # the last get_buffer lent a view of a message's block
        self._max_inflated = min(self.limits.max_message_size, self.limits.max_decompressed_size)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = cast(asyncio.Transport, transport)
        self.local = _is_local(transport)
        self.conn = H2Connection(self, self.limits)
        if self.limits.keepalive is not None:
            self.keepalive = Keepalive(self.limits.keepalive, self, self.loop)
        if self.server is not None:
            self.server._protocols.add(self)
            if self.server._stopping:
                self.conn.goaway()
        self.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        conn = self.conn
        self._direct = False
        if conn is not None:
            view = conn.recv_view()
            if view is not None:
                self._direct = True
                return cast(memoryview, view)
            if conn.recv_hint():
                return self._head
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            self._direct = False
            self._received(None, nbytes)
        else:
            self._received(self._scratch[:nbytes], 0)

    def data_received(self, data: bytes) -> None:
        self._received(data, 0)

    def message_block(self, n: int) -> memoryview:
        """H2Connection's hook: the block a large request message is assembled in."""
        return self.recv_blocks.take(n)

    def _received(self, data: bytes | memoryview | None, direct: int) -> None:
        """Bytes from the socket: ``data``, or (None) ``direct`` bytes read into the view of a
        message's block that ``get_buffer`` lent."""
        conn = self.conn
        if conn is None:
            return
        busy = self._busy
        if busy is not None:
            busy.touch()
        if self.keepalive is not None:
            self.keepalive.received()
        self._receiving = True
        try:
            if data is None:
                conn.recv_done(direct)
            else:
                conn.receive(data)
            ready = self._ready
            if ready:  # unary calls whose request is complete: run them now, in order
                self._ready = []
                for call in ready:
                    self._begin_unary(call)
        finally:
            self._receiving = False
        server = self.server
        if server is not None and server.hands():
            server.flush_at_turn_end(self)
        else:
            self.flush()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn = None
        self.transport = None
        chan = self._chan
        if chan:
            self._chan = False
            chan.release()
        if self._stall is not None:
            self._stall.cancel()
        if self._linger is not None:
            self._linger.cancel()
        if self.keepalive is not None:
            self.keepalive.stop()
        calls = list(self.calls.values())
        self.calls.clear()
        for call in calls:
            self._abandon(call)
        if self.server is not None:
            self.server._protocols.discard(self)
            self.server._check_idle()
            self.server._check_gone()

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._arm_stall()

    def resume_writing(self) -> None:
        self.paused = False
        self._resumes += 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        for call in list(self.calls.values()):
            call._wake_writer()

    # ------------------------------------------------------------------ output

    def flush(self, sender: Any = None) -> None:
        """Write what the connection has to send. ``sender`` (the server's end-of-turn flush
        of a loaded loop, ``NativeGrpcServer.flush_at_turn_end``): hand it to that sending
        thread (``wire/_sender_py.py``) if it is small and nothing is buffered in the
        transport. Every other write settles with the thread first: it waits for the thread
        to be done with this connection and writes what it kept back, so the connection's
        bytes stay in order. Also the thread's ``reclaim`` (no ``sender``)."""
        conn = self.conn
        transport = self.transport
        if conn is None or transport is None:
            return
        self.unflushed = 0
        data = conn.output()
        chan = self._chan
        if data:
            if (
                sender is not None
                and type(data) is not list
                and len(data) <= _HAND_MAX
                and not transport.get_write_buffer_size()
            ):
                if chan is None:
                    chan = self._chan = sender.channel(transport, self.flush) or False
                if chan:
                    sender.submit(chan, data)
                    data = None
            if data:
                if chan:
                    chan.settle_into(transport)
                if type(data) is list:
                    transport.writelines(data)  # a large message's parts, unjoined (writev)
                else:
                    transport.write(data)
            ka = self.keepalive
            if ka is not None and conn.data_sent != self._ka_data:
                self._ka_data = conn.data_sent
                ka.sent_headers_or_data()
        elif chan:
            chan.settle_into(transport)
        if self._stall is None and conn.stalled():
            self._arm_stall()
        if conn.closed:
            self._close()
        elif conn.goaway_sent and not self.calls and conn.open_streams() == 0:
            if self._linger is None:  # the client closes; or, at the latest, this does
                self._linger = self.loop.call_later(_GOAWAY_LINGER_S, self._close)

    def _close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            chan = self._chan
            if chan:
                chan.settle_into(transport)
            transport.close()

    def _arm_stall(self) -> None:
        if self._stall is None and self.transport is not None:
            self._stall_mark = self._progress()
            self._stall = self.loop.call_later(self.limits.stall_timeout_s, self._stalled)

    def _progress(self) -> int:
        """Grows while the client takes output: DATA sent under its windows, socket resumes."""
        return self._resumes + (self.conn.data_sent if self.conn is not None else 0)

    def _stalled(self) -> None:
        """Output has waited a whole stall timeout: close the connection unless the client
        took some of it meanwhile (a slow reader is not a stalled one)."""
        self._stall = None
        conn = self.conn
        if conn is None or self.transport is None:
            return
        if not (self.paused or conn.queued_bytes()):
            return
        if self._progress() == self._stall_mark:
            log.warning(
                "gRPC client took no output for %ss: closing the connection",
                self.limits.stall_timeout_s,
            )
            self.transport.abort()
        else:
            self._arm_stall()

    def goaway(self) -> None:
        """Graceful shutdown: refuse new streams, let open calls finish."""
        if self.conn is not None:
            self.conn.goaway()
            self.flush()

    # ------------------------------------------------------------------ H2Connection events

    def on_request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)  # one C-level pass; a repeated name keeps its last value
        path = fields.get(b":path", b"")
        method_name = fields.get(b":method", b"")
        ctype = fields.get(b"content-type", b"")
        timeout = fields.get(b"grpc-timeout")
        encoding = fields.get(b"grpc-encoding")
        accept = fields.get(b"grpc-accept-encoding", b"")
        conn = self.conn
        if method_name != b"POST":
            conn.send_headers(sid, encode_headers([(b":status", b"405")]), True)
            return
        if not ctype.startswith(b"application/grpc"):
            conn.send_headers(sid, encode_headers([(b":status", b"415")]), True)
            return
        method = self._paths.get(path)
        if method is None:
            message = f"Method not found: {path.decode('latin-1')}"
            rejected(UNIMPLEMENTED, message)
            conn.send_headers(sid, _status_block(UNIMPLEMENTED, message, True), True)
            return
        call = _Call(self, sid, method, headers)
        self.calls[sid] = call
        if encoding and encoding != b"identity":
            if encoding not in (b"gzip", b"deflate"):
                self._finish(
                    call,
                    UNIMPLEMENTED,
                    f"Compression algorithm '{encoding.decode('latin-1')}' not supported",
                )
                return
            call.encoding = encoding.decode()
        call.accept = accept
        if timeout:
            seconds = _timeout(timeout)
            if seconds is None:
                self._finish(call, INTERNAL, f"Invalid grpc-timeout '{timeout.decode('latin-1')}'")
                return
            call.deadline = self.loop.time() + seconds
            call.timer = self.loop.call_at(call.deadline, self._deadline, call)
        if method.unary is None:
            call.queue = deque()
            call.task = self.loop.create_task(self._run_stream(call))

    def on_message(self, sid: int, compressed: int, payload: bytes) -> None:
        call = self.calls.get(sid)
        if call is None:
            return
        if call.backlog is not None:  # an earlier message is still inflating: keep the order
            call.backlog.append((compressed, payload))
            return
        if compressed:
            job = self._inflation(call, payload)
            if job is None:
                return
            try:
                done = job.step(self.inflater.burst_ns)
            except InflateError as exc:
                self._fail_call(call, _inflate_error(exc, cast(str, call.encoding)))
                return
            if not done:
                # the rest is inflated in bounded bursts; the client's window is not refilled
                # until then, so what it may send meanwhile stays bounded
                call.backlog = deque()
                self.conn.set_reading(sid, False)
                call.inflating = self.loop.create_task(self._inflate(call, job))
                return
            payload = job.result()
        self._deliver(call, payload)

    def _inflation(self, call: _Call, payload: bytes) -> Inflation | None:
        if call.encoding is None:
            self._finish(call, INTERNAL, "Compressed message without grpc-encoding")
            return None
        return Inflation(grpc_wbits(call.encoding), payload, self._max_inflated)

    async def _inflate(self, call: _Call, job: Inflation) -> None:
        """Finish ``job`` in the ``Inflater``'s bounded bursts, then what arrived for ``call``
        meanwhile, in order (a backlog entry is a message with its compressed flag, or None
        for the half-close); then the client's window is refilled again."""
        backlog = call.backlog
        assert backlog is not None and call.encoding is not None
        try:
            payload = await self.inflater.finish(job)
            while not call.ended:
                self._deliver(call, payload)
                if not backlog:
                    break
                entry = backlog.popleft()
                if entry is None:
                    call.backlog = None
                    self._half_closed(call)
                    break
                compressed, payload = entry
                if compressed:
                    next_job = self._inflation(call, payload)
                    if next_job is None:
                        return
                    payload = await self.inflater.finish(next_job)
        except InflateError as exc:
            self._fail_call(call, _inflate_error(exc, call.encoding))
            return
        call.backlog = None
        call.inflating = None
        if not call.ended and not call.held and self.conn is not None:
            self.conn.set_reading(call.sid, True)
        self.flush()

    def _deliver(self, call: _Call, payload: bytes) -> None:
        queue = call.queue
        if queue is None:
            if call.request is not None:
                self._finish(
                    call, UNIMPLEMENTED, "Received a second request message on a unary call"
                )
                return
            call.request = payload
            return
        queue.append(payload)
        if len(queue) >= self.read_queue and not call.held:
            call.held = True
            self.conn.set_reading(call.sid, False)
        call._wake_reader()

    def on_half_close(self, sid: int) -> None:
        call = self.calls.get(sid)
        if call is None:
            return
        if call.backlog is not None:
            call.backlog.append(None)
            return
        self._half_closed(call)

    def _half_closed(self, call: _Call) -> None:
        if call.queue is not None:
            call.eof = True
            call._wake_reader()
        elif call.request is None:
            self._finish(call, INTERNAL, "Received no request message for a unary call")
        elif self._receiving:
            self._ready.append(call)  # started once the bytes received so far are parsed
        else:
            self._begin_unary(call)

    def on_grpc_error(self, sid: int, status: int, message: str) -> None:
        call = self.calls.get(sid)
        if call is not None:
            self._finish(call, status, message)

    def on_reset(self, sid: int, code: int) -> None:
        call = self.calls.pop(sid, None)
        if call is not None:
            self._abandon(call)
            self._after_call()

    def on_writable(self, sid: int) -> None:
        call = self.calls.get(sid)
        if call is not None:
            call._wake_writer()

    def on_goaway(self, code: int, last_stream_id: int) -> None:
        if not self.calls:
            self._close()

    def on_ping(self, ack: bool, opaque: bytes) -> None:
        ka = self.keepalive
        if ka is None:
            return
        if ack:
            ka.ping_acked(opaque)
        elif ka.ping_received():
            log.info("gRPC client sent too many PINGs: GOAWAY ENHANCE_YOUR_CALM too_many_pings")
            self.conn.goaway(ENHANCE_YOUR_CALM, b"too_many_pings")

    # ------------------------------------------------------------------ KeepaliveHost

    def keepalive_ping(self, opaque: bytes) -> None:
        self.flush()
        transport = self.transport
        conn = self.conn
        if transport is not None and conn is not None and not conn.closed:
            if not transport.is_closing():
                transport.write(ping_frame(opaque))

    def keepalive_streams(self) -> int:
        return self.conn.open_streams() if self.conn is not None else 0

    def keepalive_goaway(self, debug: bytes) -> None:
        conn = self.conn
        if conn is not None and not conn.goaway_sent:
            conn.goaway(NO_ERROR, debug)
            self.flush()

    def keepalive_close(self, code: int, debug: bytes, message: str) -> None:
        conn = self.conn
        if conn is None:
            return
        for call in list(self.calls.values()):
            self._finish(call, UNAVAILABLE, message)
        if code != NO_ERROR or not conn.goaway_sent:
            conn.goaway(code, debug)
        self.flush()
        self._close()

    # ------------------------------------------------------------------ calls

    def _begin_unary(self, call: _Call) -> None:
        """Run a unary call's handler now (``eager.begin``); a task takes over only if it has
        to wait. A call reset or ended meanwhile is skipped."""
        if call.ended:
            return
        try:
            call.task = begin(self.loop, self._run_unary(call))
        except BaseException as exc:  # noqa: BLE001 - _run_unary maps its own failures
            self._fail_call(call, exc)

    async def _run_unary(self, call: _Call) -> None:
        unary = call.method.unary
        assert unary is not None and call.request is not None
        try:
            response = await unary(call.request, call)
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
            self._fail_call(call, exc)
            return
        if call.ended:
            return
        conn = self.conn
        if conn is None:
            return
        call.ended = True
        self.calls.pop(call.sid, None)
        if call.timer is not None:
            call.timer.cancel()
        algorithm = call.compression
        if algorithm is None:
            if type(response) is list:  # array views: copied as in _Call.write
                response = self.send_blocks.gather(response)
            conn.send_response(call.sid, _HEAD[None], response, False, _TRAILERS_OK)
        else:
            conn.send_response(
                call.sid, _HEAD[algorithm], _compress(algorithm, response), True, _TRAILERS_OK
            )
        if call.done is not None:
            self.flush()
            self._run_done(call)
        else:
            self.flush_soon()
        if not self.calls:
            self._after_call()

    def flush_soon(self) -> None:
        """Flush at the end of this loop turn: the responses and messages that handlers
        finish in one turn leave in one write (one send syscall). Inside data_received,
        which flushes when it is done, there is nothing to schedule. With a server, its
        end-of-turn flush does it (``NativeGrpcServer.flush_at_turn_end``)."""
        if self._receiving:
            return
        if self.server is not None:
            self.server.flush_at_turn_end(self)
        elif not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_pending = False
        self.flush()

    async def _run_stream(self, call: _Call) -> None:
        stream = call.method.stream
        assert stream is not None
        try:
            await stream(call)
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
            self._fail_call(call, exc)
            return
        self._finish(call, OK, "")

    def _fail_call(self, call: _Call, exc: BaseException) -> None:
        if isinstance(exc, RpcError):
            self._finish(call, exc.code, exc.message)
        elif isinstance(exc, TritonliteError):
            self._finish(call, STATUS.get(exc.code, UNKNOWN), exc.message)
        else:
            if not isinstance(exc, Exception):
                raise exc
            log.exception("gRPC handler for stream %d failed", call.sid)
            self._finish(call, INTERNAL, internal_message(exc))

    def _finish(self, call: _Call, status: int, message: str) -> None:
        """End ``call`` with ``status``: trailers (or a trailers-only response)."""
        if call.ended:
            return
        call.ended = True
        self.calls.pop(call.sid, None)
        if call.timer is not None:
            call.timer.cancel()
        current = asyncio.current_task()
        for task in (call.task, call.inflating):
            if task is not None and task is not current and not task.done():
                task.cancel()
        call._wake()
        if status != OK:
            rejected(status, message)
        conn = self.conn
        if conn is not None:
            if status == OK and call.head_sent:
                block = _TRAILERS_OK
            else:
                block = _status_block(status, message, not call.head_sent)
            conn.send_headers(call.sid, block, True)
            if self.keepalive is not None:
                self.keepalive.sent_headers_or_data()
            self.flush()
        if call.done is not None:
            self._run_done(call)
        self._after_call()

    def _abandon(self, call: _Call) -> None:
        """The stream is gone (reset, connection lost): cancel the handler, send nothing."""
        call.ended = True
        if call.timer is not None:
            call.timer.cancel()
        for task in (call.task, call.inflating):
            if task is not None and not task.done():
                task.cancel()
        call._wake()
        if call.done is not None:
            self._run_done(call)

    def _deadline(self, call: _Call) -> None:
        call.timer = None
        self._finish(call, DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _run_done(self, call: _Call) -> None:
        done = call.done
        call.done = None
        for fn in done or ():
            try:
                fn()
            except Exception:
                log.exception("gRPC call done callback failed")

    def _after_call(self) -> None:
        if self.calls:
            if self.server is not None and self.server._stopping:
                self.server._check_idle()  # the drain may wait for unary calls only
            return
        conn = self.conn
        if conn is not None and conn.goaway_sent:
            self.flush()
        if self.server is not None:
            self.server._check_idle()


def _is_local(transport: asyncio.BaseTransport) -> bool:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == getattr(socket, "AF_UNIX", None):
        return True
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer:
        return isinstance(peer, str)
    host = str(peer[0])
    return host.startswith("127.") or host == "::1" or host.startswith("::ffff:127.")


class NativeGrpcServer:
    """A listening native gRPC server; ``port`` is the bound port."""

    def __init__(self, methods: GrpcMethods, limits: GrpcLimits) -> None:
        self.methods = methods
        self.limits = limits
        self.port = 0
        self.busy: Any = None  # a BusyPoll (busypoll.py) its connections touch on input
        self.inflater = Inflater()  # shared with the HTTP front end by the composition root
        self.send_blocks = SendBlocks()  # copies of large messages being sent (likewise)
        self.recv_blocks = RecvBlocks()  # large request messages being assembled and used
        self.scratch = memoryview(bytearray(_SCRATCH))  # see the module docstring: Input
        # the thread that writes a loaded loop's small output (wire/sender.py; None: the
        # loop), and whether a turn uses it (a wire/sendtrial.SendTrial; None: every turn)
        self.sender: Any = None
        self.send_trial: Any = None
        self._turn: list[GrpcProtocol] = []  # connections to flush at this turn's end
        self._server: asyncio.base_events.Server | None = None
        self._protocols: set[GrpcProtocol] = set()
        self._stopping = False
        self._idle: asyncio.Future[None] | None = None
        self._unary_idle: asyncio.Future[None] | None = None
        self._gone: asyncio.Future[None] | None = None

    def protocol(self) -> GrpcProtocol:
        return GrpcProtocol(self.methods, self.limits, self)

    def flush_at_turn_end(self, proto: GrpcProtocol) -> None:
        """Flush ``proto`` at the end of this loop turn, together with every other connection
        that has output then.

        What ``flush_soon`` asks for; and, while output goes to the sending thread
        (``hands``), a connection's read: a loaded loop reads several connections per turn,
        and their small output is handed to the thread together after the turn's reads (at
        most one wake-up of it for all), so the kernel's part of each write (on loopback,
        the client's side of TCP and its wake-up) runs on another CPU."""
        if proto._in_pass:
            return
        proto._in_pass = True
        turn = self._turn
        turn.append(proto)
        if len(turn) == 1:
            proto.loop.call_soon(self._flush_turn)

    def hands(self) -> bool:
        """Whether output goes to the sending thread now: there is one, the loop is loaded,
        and the trial has it in use. (Without the thread a connection's read is flushed at
        once: flushing at the turn's end alone served 3-9% fewer requests a second at
        concurrency 16, bench/RESULTS.md, Issue 31, round 13.)"""
        if self.sender is None or self.busy is None or not self.busy.loaded():
            return False
        trial = self.send_trial
        return trial is None or bool(trial.use())

    def _flush_turn(self) -> None:
        turn, self._turn = self._turn, []
        sender = self.sender if self.hands() else None
        for proto in turn:
            proto._in_pass = False
            try:
                proto.flush(sender)
            except Exception:
                log.exception("gRPC connection's flush failed")

    def _check_gone(self) -> None:
        if self._gone is not None and not self._gone.done() and not self._protocols:
            self._gone.set_result(None)

    def _check_idle(self) -> None:
        if self._idle is not None and not self._idle.done():
            if not any(p.calls for p in self._protocols):
                self._idle.set_result(None)
        if self._unary_idle is not None and not self._unary_idle.done():
            if not self._unary_calls():
                self._unary_idle.set_result(None)

    def _unary_calls(self) -> int:
        return sum(1 for p in self._protocols for c in p.calls.values() if c.queue is None)

    async def wait_unary(self, timeout: float) -> int:
        """After ``refuse_new``: wait up to ``timeout`` s for the open unary calls to be
        answered (a stream's requests are the core's to drain); how many are still open."""
        if self._unary_calls() and timeout > 0:
            self._unary_idle = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._unary_idle), timeout)
            except asyncio.TimeoutError:
                pass
            finally:
                self._unary_idle = None
        return self._unary_calls()

    def refuse_new(self) -> None:
        """The stop signal: stop listening, GOAWAY on every connection (calls the clients
        start from now on are refused; the open ones go on)."""
        if self._stopping:
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for p in list(self._protocols):
            p.goaway()

    async def stop(self, grace: float | None = None) -> int:
        """GOAWAY on every connection, wait up to ``grace`` seconds for the open calls, then
        cancel what is left (UNAVAILABLE) and close the connections. Returns how many unary
        calls were cut off that way."""
        self.refuse_new()
        loop = asyncio.get_running_loop()
        self._idle = loop.create_future()
        self._check_idle()
        if grace:
            try:
                await asyncio.wait_for(asyncio.shield(self._idle), grace)
            except asyncio.TimeoutError:
                pass
        cut = 0
        for p in list(self._protocols):
            for call in list(p.calls.values()):
                cut += call.queue is None  # a stream's requests were drained by the core
                p._finish(call, UNAVAILABLE, "Server shutting down")
            p._close()
        self._gone = loop.create_future()
        self._check_gone()
        try:
            await asyncio.wait_for(self._gone, 5.0)  # connection_lost of every connection
        except asyncio.TimeoutError:
            for p in list(self._protocols):
                if p.transport is not None:
                    p.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
        return cut


async def start_grpc_native(
    methods: GrpcMethods,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    reuse_port: bool = False,
    limits: GrpcLimits | None = None,
) -> NativeGrpcServer:
    """Listen on ``host:port`` (0: any free port, read back from ``.port``). Under TLS the
    context is told to offer ALPN ``h2``, which gRPC clients require."""
    server = NativeGrpcServer(methods, limits if limits is not None else GrpcLimits())
    if ssl_context is not None:
        ssl_context.set_alpn_protocols(["h2"])
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(
        server.protocol, host, port, ssl=ssl_context, reuse_port=reuse_port or None
    )
    server._server = srv
    server.port = srv.sockets[0].getsockname()[1]
    return server

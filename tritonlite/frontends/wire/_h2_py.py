# cython: language_level=3, annotation_typing=False, boundscheck=False, wraparound=False
"""A sans-IO HTTP/2 server connection (RFC 9113) with gRPC message framing.

This file is the single source of two builds: run as Python it is ``_h2_py``; setup.py compiles
it with Cython (C types from ``_h2_c.pxd``) into ``_h2_c``. Only ``wire/h2.py`` chooses.

``H2Connection(handler, limits)`` owns no socket and no clock but ``time.monotonic()`` for its
flood windows. The transport feeds bytes with ``receive(data)`` and writes what
``data_to_send()`` returns after every ``receive`` and every ``send_*`` call. While parsing,
the connection calls the handler once per event:

* ``on_request(stream_id, headers)``: a valid request header list (``list[tuple[bytes,
  bytes]]``, pseudo-headers first) opened a stream;
* ``on_message(stream_id, compressed, payload)``: one complete gRPC length-prefixed message
  (``bytes``; a message of ``_BLOCK_AT`` bytes or more is a ``memoryview``: of the read it
  arrived in whole, or of the block it was assembled in, see below);
* ``on_half_close(stream_id)``: the client ended its side (after its last message);
* ``on_grpc_error(stream_id, status, message)``: the request body broke gRPC's framing (a
  message over the size limit, a truncated message, a bad flag); the transport ends the call
  with that status; nothing more arrives on the stream;
* ``on_reset(stream_id, code)``: the stream is gone (the client's RST_STREAM, or a stream error
  this connection answered with RST_STREAM); the transport cancels its call;
* ``on_writable(stream_id)``: the stream's queued output went back under the limit;
* ``on_goaway(code, last_stream_id)``: the client sent GOAWAY;
* ``on_ping(ack, opaque)`` (optional): a PING arrived (``ack`` False: answered already) or
  the ACK of one (``ack`` True, with its 8 bytes); the keepalive policy's input.

Output: ``send_headers`` (a block from ``encode_headers``; with ``end_stream`` it is the
trailers, sent after the queued DATA), ``send_message`` (one gRPC message; False once the
stream's queued output passed ``stream_write_buffer``: wait for ``on_writable``),
``send_response`` (headers + message + trailers in one call, the unary hot path),
``end_stream``, ``reset`` and ``goaway``. DATA beyond the peer's windows waits in its stream
and goes out as WINDOW_UPDATEs arrive; ``writable``, ``stalled`` and ``queued_bytes`` tell the
transport how much waits. ``set_reading(stream_id, False)`` stops refilling a stream's receive
window (a slow reader of a streaming call).

Large messages: a message of ``_BLOCK_AT`` to ``_BLOCK_MAX`` bytes that is not whole in one read is
assembled in one writable block sized from its length prefix (on up to ``_MAX_BLOCKS`` streams of a
connection at once; others as pieces joined at the end), from the handler's optional
``message_block(n)`` (a pool: ``wire.recvbuf``) or else anonymous memory of its own; each piece is
copied in once, and nothing is joined. While a DATA frame's payload is arriving for such a message,
``recv_view()`` lends the part of the block its next bytes belong to, so a buffered transport reads
the socket straight into it and reports the count with ``recv_done(n)``: those bytes are never
copied by this process. Between such a message's frames ``recv_hint()`` asks for a read of the next
frame header alone, so that the payload after it is read into the block rather than copied out of a
larger read. Flow control, limits and events are the same whichever way the bytes come in (the
frame's checks ran when its header arrived).

Connection errors send GOAWAY with the RFC 9113 code and set ``closed``; nothing is parsed
after that, and the transport closes the socket once it wrote ``data_to_send()``. Stream
errors send RST_STREAM and report ``on_reset``; the connection keeps serving.
Ownership: header lists and payloads handed up belong to the handler; ``send_*`` arguments
belong to the connection once passed. A stream is forgotten once both sides ended it.
Header blocks are decoded by ``wire.hpack``; responses are encoded statelessly (literals
without indexing, see ``encode_headers``), so the peer's HEADER_TABLE_SIZE never matters.

Over 500 lines, one module: Cython compiles it into one extension type whose frame handlers share
the connection's state (windows, streams, HPACK contexts) through C attributes; split across
modules, every handler would pay Python-level calls in the compiled twin.
"""

from __future__ import annotations

import mmap
import struct
import time
from typing import Any

from tritonlite.frontends.wire.hpack import Decoder, HeaderListTooLarge, HpackError

try:
    import cython
except ImportError:  # Cython is a build-time dependency; the pure twin runs without it

    class _CythonShim:
        compiled = False

    cython = _CythonShim()

COMPILED: bool = bool(cython.compiled)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types; integer values are used so they can be cythonized
DATA = 0
HEADERS = 1
PRIORITY = 2
RST_STREAM = 3
SETTINGS = 4
PUSH_PROMISE = 5
PING = 6
GOAWAY = 7
WINDOW_UPDATE = 8
CONTINUATION = 9

# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# error codes (RFC 9113 section 7)
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
SETTINGS_TIMEOUT = 0x4
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
CONNECT_ERROR = 0xA
ENHANCE_YOUR_CALM = 0xB

# settings
S_HEADER_TABLE_SIZE = 0x1
S_ENABLE_PUSH = 0x2
S_MAX_CONCURRENT_STREAMS = 0x3
S_INITIAL_WINDOW_SIZE = 0x4
S_MAX_FRAME_SIZE = 0x5
S_MAX_HEADER_LIST_SIZE = 0x6

# gRPC status codes this layer reports (the transport owns the rest)
GRPC_INTERNAL = 13
GRPC_RESOURCE_EXHAUSTED = 8

_MAX_WINDOW = 0x7FFFFFFF
# WINDOW_UPDATEs a DATA frame we send may draw: grpc-c++ sends up to four per response message
# of a stream (stream and connection, each again when the application asks for the next one)
_WU_PER_DATA = 4
_DEFAULT_WINDOW = 65535
_HDR = struct.Struct(">BHBBL")  # 24-bit length as byte + short, type, flags, stream id
_PREFIX = struct.Struct(">BL")
_U32 = struct.Struct(">L")
_U32X2 = struct.Struct(">LL")
_SETTING = struct.Struct(">HL")
# pieces of a partial gRPC message under this size are copied into a shared bytearray of up
# to _COALESCED bytes (_keep_piece)
_SMALL_PIECE = 1024
_COALESCED = 1 << 16
# messages of this many bytes up to _BLOCK_MAX are assembled in one block (module docstring);
# a larger one in pieces joined at its end, so that no prefix reserves more than this
_BLOCK_AT = 1 << 16
_BLOCK_MAX = 256 << 20
# streams of one connection assembling in blocks at once: a block is mapped when a prefix
# arrives (its pages only as they are written), so a flood of prefixes reserves no more
_MAX_BLOCKS = 16
# recv_view lends no view shorter than this: a read that small costs more than its copy
_DIRECT_MIN = 4096
# recv_hint asks for a header alone only after DATA frames this large: for smaller ones the
# extra read would cost more than the copy it saves
_HINT_FRAME = 1 << 16
# the ids this connection reset lately, whose in-flight frames it ignores
_RECENT_RESETS = 256

_CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)
# names of HPACK's static table this encoder refers to by index (RFC 7541 appendix A)
_STATIC_NAMES = {b":status": 8, b"content-length": 28, b"content-type": 31}


class H2Limits:
    """Per-connection limits; the ``max_*`` counts of frames are per ``flood_window_s``.

    ``stream_window`` / ``connection_window``: what the client may send ahead (refilled as data
    arrives); ``max_frame_size``, ``max_header_list_size`` and ``header_table_size`` are
    advertised in SETTINGS and enforced (a header block is capped before it is decoded);
    ``max_message_size``: one gRPC message; ``max_buffered``: bytes of incomplete messages
    before stream windows stop being refilled (at least one message); ``stream_write_buffer``:
    queued output per stream before ``send_message`` says stop. Past a frame count the
    connection ends with ENHANCE_YOUR_CALM: ``max_resets`` (RST_STREAM from the client and
    streams refused or reset for its errors: rapid reset; a token bucket of ``max_resets``
    refilled at ``max_resets`` per ``flood_window_s``, so a steady rate below it is never cut
    off), ``max_pings``, ``max_settings``,
    ``max_empty_frames`` (empty DATA / HEADERS / CONTINUATION, PRIORITY and unknown types),
    ``max_window_updates`` (those not explained by the streams opened or the DATA frames
    sent); ``max_continuations`` caps the frames of one header block. The defaults let gRPC
    clients (keepalive and BDP pings, WINDOW_UPDATEs while reading large responses,
    cancellations) through.
    """

    def __init__(
        self,
        *,
        max_concurrent_streams: int = 1024,
        stream_window: int = 4 << 20,
        connection_window: int = 16 << 20,
        max_frame_size: int = 1 << 20,
        max_header_list_size: int = 65536,
        header_table_size: int = 4096,
        max_message_size: int = 0x7FFFFFFF,
        max_buffered: int = 0x7FFFFFFF,
        stream_write_buffer: int = 1 << 20,
        flood_window_s: float = 1.0,
        max_resets: int = 400,
        max_pings: int = 200,
        max_settings: int = 100,
        max_empty_frames: int = 200,
        max_window_updates: int = 1000,
        max_continuations: int = 64,
    ) -> None:
        self.max_concurrent_streams = max_concurrent_streams
        self.stream_window = stream_window
        self.connection_window = connection_window
        self.max_frame_size = max_frame_size
        self.max_header_list_size = max_header_list_size
        self.header_table_size = header_table_size
        self.max_message_size = max_message_size
        self.max_buffered = max_buffered
        self.stream_write_buffer = stream_write_buffer
        self.flood_window_s = flood_window_s
        self.max_resets = max_resets
        self.max_pings = max_pings
        self.max_settings = max_settings
        self.max_empty_frames = max_empty_frames
        self.max_window_updates = max_window_updates
        self.max_continuations = max_continuations


def _int(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK integer (RFC 7541 5.1) with ``first``'s high bits as the pattern."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals without indexing: valid under any HPACK state, so blocks
    can be built once and sent on any connection. ``:status 200`` is the static entry 8."""
    out = bytearray()
    for name, value in headers:
        if name == b":status" and value == b"200":
            out.append(0x88)
            continue
        index = _STATIC_NAMES.get(name, 0)
        if index:
            out += _int(index, 4, 0x00)
        else:
            out.append(0x00)
            out += _int(len(name), 7, 0x00)
            out += name
        out += _int(len(value), 7, 0x00)
        out += value
    return bytes(out)


def _name_ok(name: bytes) -> bool:
    """A regular field name: lower-case token characters only (RFC 9113 8.2.1)."""
    if len(name) == 0:
        return False
    for c in name:
        if c <= 0x20 or c >= 0x7F or 0x41 <= c <= 0x5A or c == 0x3A:
            return False
    return True


def _value_ok(value: bytes) -> bool:
    """No NUL, CR or LF, and no leading or trailing space or tab (RFC 9113 8.2.1)."""
    n = len(value)
    if n == 0:
        return True
    for c in value:
        if c == 0 or c == 0x0A or c == 0x0D:
            return False
    c = value[0]
    if c == 0x20 or c == 0x09:
        return False
    c = value[n - 1]
    return not (c == 0x20 or c == 0x09)


def _anonymous_block(n: int) -> Any:
    """A writable view of ``n`` bytes of fresh anonymous memory: pages are mapped as they are
    written, so a length prefix alone holds no memory."""
    return memoryview(mmap.mmap(-1, n))


def _keep_piece(chunks: list[Any], buf: bytes, a: int, b: int) -> None:
    """Keep ``buf[a:b]`` of a partial message. Small pieces (tiny DATA frames) are joined
    into one bytearray: a list slot each would cost eight times a one-byte payload. A piece
    that is most of ``buf`` (a large message arriving) is kept as a view of it, uncopied:
    the message's one copy is the join that completes it; a smaller one is copied, so a
    kept piece never holds more than four times its size alive."""
    if b - a >= _SMALL_PIECE:
        if (b - a) << 2 >= len(buf):
            chunks.append(memoryview(buf)[a:b])
        else:
            chunks.append(buf[a:b])
        return
    if chunks:
        last = chunks[len(chunks) - 1]  # (compiled without wraparound)
        if type(last) is bytearray and len(last) < _COALESCED:
            last += buf[a:b]
            return
    chunks.append(bytearray(buf[a:b]))


class _Stream:
    """One stream's state on both sides; a stream is open until both ``remote_closed`` and
    ``local_closed`` (or a reset), then it leaves the connection's table."""

    def __init__(self, sid: int, recv_window: int, send_window: int) -> None:
        self.sid = sid
        self.remote_closed = False
        self.local_closed = False
        self.closed = False
        self.recv_window = recv_window
        self.unacked = 0
        self.send_window = send_window
        self.reading = True
        self.want_writable = False
        self.content_length = -1
        self.data_len = 0
        # outgoing DATA payload bytes waiting for flow control; then trailers or END_STREAM
        self.out: list[Any] = []
        self.out_len = 0
        self.out_trailers: bytes | None = None
        self.out_end = False
        self.blocked = False
        self.deferred = False
        # gRPC reassembly: msg_len < 0 while the 5-byte prefix is incomplete (hdr holds it)
        self.hdr = b""
        self.msg_len = -1
        self.msg_flag = 0
        self.chunks: list[bytes] = []
        self.block: Any = None  # a large message's block (_grpc_data), or None
        self.got = 0
        self.discard = False


class H2Connection:
    """The server side of one HTTP/2 connection; see the module docstring for the contract."""

    def __init__(self, handler: Any, limits: H2Limits | None = None) -> None:
        lim = limits if limits is not None else H2Limits()
        self._on_request = handler.on_request
        self._on_message = handler.on_message
        self._on_half_close = handler.on_half_close
        self._on_grpc_error = handler.on_grpc_error
        self._on_reset = handler.on_reset
        self._on_writable = handler.on_writable
        self._on_goaway = handler.on_goaway
        self._on_ping = getattr(handler, "on_ping", None)
        self._take = getattr(handler, "message_block", None) or _anonymous_block
        self._max_streams = lim.max_concurrent_streams
        self._stream_window = lim.stream_window
        self._max_frame = lim.max_frame_size
        self._max_header_list = lim.max_header_list_size
        self._max_message = lim.max_message_size
        # one message must always fit, or its own stream's window would never be refilled
        self._max_buffered = max(lim.max_buffered, lim.max_message_size)
        self._write_limit = lim.stream_write_buffer
        self._flood_window = lim.flood_window_s
        self._max_resets = lim.max_resets
        self._max_pings = lim.max_pings
        self._max_settings = lim.max_settings
        self._max_empty = lim.max_empty_frames
        self._max_wu = lim.max_window_updates
        self._max_cont = lim.max_continuations
        self._decoder = Decoder(lim.header_table_size, lim.max_header_list_size)
        self._streams: dict[int, _Stream] = {}
        self._blocked: list[_Stream] = []
        self._recent_resets: set[int] = set()
        self._out: list[Any] = []
        self._gathered = False  # _out holds a gathered message's parts: see output()
        self.closed = False
        self.error_code = -1
        self.goaway_sent = False
        self.peer_goaway = False
        self._last_sid = 0
        self._preface = False
        self._got_settings = False
        # receive side: leftover bytes of an incomplete frame, and how many make it whole
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 0
        # a DATA frame whose payload is still arriving (_data_begin): its stream (None: the
        # payload is ignored), flags, length, and how many of its bytes are still to come
        self._dst: _Stream | None = None
        self._dflags = 0
        self._dlength = 0
        self._dleft = 0
        # the view recv_view lent last, the stream and message position it was lent for
        self._dview: Any = None
        self._dview_st: _Stream | None = None
        self._dview_got = 0
        self._blocks = 0  # streams assembling a message in a block
        self._last_data = 0  # the length of the last DATA frame that arrived
        # an open header block (HEADERS without END_HEADERS, then CONTINUATIONs)
        self._hb: list[bytes] = []
        self._hb_len = 0
        self._hb_sid = 0
        self._hb_end_stream = False
        self._hb_bad_priority = False
        self._hb_count = 0
        # flow control: ours as receiver, the peer's as sender
        self._recv_conn_window = lim.connection_window
        self._conn_window_size = lim.connection_window
        self._conn_unacked = 0
        self._buffered = 0
        self._deferred: list[_Stream] = []
        self._send_conn_window = _DEFAULT_WINDOW
        self._peer_initial_window = _DEFAULT_WINDOW
        self._peer_max_frame = 16384
        self._wu_credit = 0
        # DATA payload bytes sent so far: the transport's measure of progress
        self.data_sent = 0
        # flood counters over the current window
        self._t0 = time.monotonic()
        # rapid reset (CVE-2023-44487): a bucket of max_resets, refilled at that many per window
        self._reset_tokens = float(lim.max_resets)
        self._reset_t = self._t0
        self._reset_rate = lim.max_resets / lim.flood_window_s
        self._pings = 0
        self._settings = 0
        self._empty = 0
        self._wus = 0
        out = self._out
        out.append(
            _HDR.pack(0, 30, SETTINGS, 0, 0)
            + _SETTING.pack(S_MAX_CONCURRENT_STREAMS, lim.max_concurrent_streams)
            + _SETTING.pack(S_INITIAL_WINDOW_SIZE, lim.stream_window)
            + _SETTING.pack(S_MAX_FRAME_SIZE, lim.max_frame_size)
            + _SETTING.pack(S_MAX_HEADER_LIST_SIZE, lim.max_header_list_size)
            + _SETTING.pack(S_HEADER_TABLE_SIZE, lim.header_table_size)
        )
        if lim.connection_window > _DEFAULT_WINDOW:
            out.append(
                _HDR.pack(0, 4, WINDOW_UPDATE, 0, 0)
                + _U32.pack(lim.connection_window - _DEFAULT_WINDOW)
            )
        else:
            self._recv_conn_window = _DEFAULT_WINDOW
            self._conn_window_size = _DEFAULT_WINDOW

    # ---------------------------------------------------------------- transport side

    def data_to_send(self) -> bytes:
        """Everything queued for the socket since the last call (b"" when nothing)."""
        out = self._out
        if not out:
            return b""
        self._gathered = False
        if len(out) == 1:
            data = out[0]
            out.clear()
            return bytes(data) if type(data) is not bytes else data
        data = b"".join(out)
        out.clear()
        return data

    def output(self) -> Any:
        """``data_to_send``, except once a gathered message (``send_message`` with a list) is
        queued: then the list of buffers to write in order (``transport.writelines``), so
        its large parts reach the socket without being joined."""
        if not self._gathered:
            return self.data_to_send()
        self._gathered = False
        out = self._out
        self._out = []
        return out

    def open_streams(self) -> int:
        return len(self._streams)

    def writable(self, stream_id: int) -> bool:
        """Whether the stream's queued output is under the limit (an ended stream: True,
        there is nothing left to wait for)."""
        st = self._streams.get(stream_id)
        return st is None or st.out_len < self._write_limit

    def stalled(self) -> bool:
        """Whether some stream's output waits for the peer's flow-control window (cheap)."""
        return len(self._blocked) > 0

    def queued_bytes(self) -> int:
        """Outgoing DATA bytes waiting for the peer's flow-control windows."""
        n = 0
        for st in self._streams.values():
            n += st.out_len
        return n

    def receive(self, data: bytes) -> None:
        """Parse ``data`` (any bytes-like); calls the handler once per event."""
        if self.closed:
            return
        if self._pending_len:
            self._pending.append(bytes(data))
            self._pending_len += len(data)
            if self._pending_len < self._need:
                return
            buf = b"".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
        elif type(data) is bytes:
            buf = data
        else:
            buf = bytes(data)
        pos = 0
        n = len(buf)
        if self._dleft:
            pos = self._dleft if self._dleft < n else n
            self._data_more(buf, 0, pos)
            if self.closed:
                return
        if not self._preface:
            if n < 24:
                if buf != PREFACE[:n]:
                    self._fail(PROTOCOL_ERROR, b"invalid connection preface")
                    return
                self._keep(buf, 24)
                return
            if buf[:24] != PREFACE:
                self._fail(PROTOCOL_ERROR, b"invalid connection preface")
                return
            self._preface = True
            pos = 24
        now = time.monotonic()
        if now - self._t0 > self._flood_window:
            self._t0 = now
            self._pings = 0
            self._settings = 0
            self._empty = 0
            self._wus = 0
            # credit earned just before the window turned still explains the updates that
            # answer it; carried up to one window's allowance, so it cannot be banked for a flood
            self._wu_credit = min(self._wu_credit, self._max_wu)
        while n - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if length > self._max_frame:
                self._fail(FRAME_SIZE_ERROR, b"frame larger than SETTINGS_MAX_FRAME_SIZE")
                return
            ftype = buf[pos + 3]
            flags = buf[pos + 4]
            sid = (
                ((buf[pos + 5] & 0x7F) << 24)
                | (buf[pos + 6] << 16)
                | (buf[pos + 7] << 8)
                | buf[pos + 8]
            )
            if n - pos - 9 < length:
                if (
                    ftype == DATA
                    and not flags & PADDED
                    and sid != 0
                    and self._hb_sid == 0
                    and self._got_settings
                ):
                    # a large message's frame spans reads: its payload goes to the stream
                    # as it arrives, instead of each read being joined into the frame
                    self._data_begin(buf, pos + 9, n, length, flags, sid)
                    return
                self._keep(buf[pos:], 9 + length)
                return
            self._frame(buf, pos + 9, length, ftype, flags, sid)
            if self.closed:
                return
            pos += 9 + length
        if pos < n:
            self._keep(buf[pos:], 9)

    def _keep(self, rest: bytes, need: int) -> None:
        self._pending.append(rest)
        self._pending_len = len(rest)
        self._need = need

    def recv_view(self) -> Any:
        """Where the socket's next bytes may be read to without a copy: a writable view of the
        block of the large message whose DATA frame is arriving, as many bytes as both the
        frame and the message still expect; None when the next bytes must go to ``receive``
        (between frames, a small message, a short remainder). After reading into it, the
        transport calls ``recv_done`` with the count before anything else."""
        st = self._dst
        if st is None or st.block is None or st.closed or self.closed:
            return None
        k = st.msg_len - st.got
        if k > self._dleft:
            k = self._dleft
        if k < _DIRECT_MIN:
            return None
        view = st.block[st.got : st.got + k]
        self._dview = view
        self._dview_st = st
        self._dview_got = st.got
        return view

    def recv_hint(self) -> int:
        """How many bytes the next read should take when ``recv_view`` lends nothing: 9 when a
        message is being assembled in a block, the next bytes start a frame and the last DATA
        frame was large (its header alone, so that a DATA payload after it is read into the
        block, not copied from a larger read); else 0 (as many as there are)."""
        if (
            self._blocks > 0
            and self._last_data >= _HINT_FRAME
            and self._dleft == 0
            and self._pending_len == 0
            and not self.closed
        ):
            return 9
        return 0

    def recv_done(self, n: int) -> None:
        """``n`` bytes from the socket were read into the start of the view ``recv_view``
        lent last: they are taken as ``receive`` would take them, uncopied."""
        view = self._dview
        st = self._dview_st
        self._dview = None
        self._dview_st = None
        if view is None or n <= 0:
            return
        if (
            st is not self._dst
            or st is None
            or st.block is None
            or st.closed
            or self.closed
            or st.got != self._dview_got
            or n > len(view)
        ):
            # the connection moved on since the view was lent (no transport does this):
            # the bytes are still the socket's next ones
            self.receive(bytes(view[:n]))
            return
        self._dleft -= n
        st.data_len += n
        st.got += n
        self._buffered += n
        if st.got == st.msg_len:
            self._complete(st)
            if st.closed or self.closed:
                st = self._dst = None
        if self._dleft == 0:
            self._data_done(st)

    # ---------------------------------------------------------------- frames in

    def _frame(self, buf: bytes, off: int, length: int, ftype: int, flags: int, sid: int) -> None:
        if self._hb_sid != 0 and ftype != CONTINUATION:
            self._fail(PROTOCOL_ERROR, b"expected CONTINUATION")
            return
        if not self._got_settings:
            if ftype != SETTINGS or flags & ACK:
                self._fail(PROTOCOL_ERROR, b"first frame must be SETTINGS")
                return
        if ftype == DATA:
            self._data(buf, off, length, flags, sid)
        elif ftype == HEADERS:
            self._headers(buf, off, length, flags, sid)
        elif ftype == CONTINUATION:
            self._continuation(buf, off, length, flags, sid)
        elif ftype == WINDOW_UPDATE:
            self._window_update(buf, off, length, sid)
        elif ftype == RST_STREAM:
            self._rst_stream(buf, off, length, sid)
        elif ftype == SETTINGS:
            self._settings_frame(buf, off, length, flags, sid)
        elif ftype == PING:
            self._ping(buf, off, length, flags, sid)
        elif ftype == PRIORITY:
            self._priority(buf, off, length, sid)
        elif ftype == GOAWAY:
            if sid != 0:
                self._fail(PROTOCOL_ERROR, b"GOAWAY on a stream")
            elif length < 8:
                self._fail(FRAME_SIZE_ERROR, b"GOAWAY shorter than 8 bytes")
            else:
                last, code = _U32X2.unpack_from(buf, off)
                self.peer_goaway = True
                self._on_goaway(code, last & _MAX_WINDOW)
        elif ftype == PUSH_PROMISE:
            self._fail(PROTOCOL_ERROR, b"PUSH_PROMISE from a client")
        else:
            self._flood_empty()  # unknown types are ignored, but not for free

    def _flood_empty(self) -> None:
        self._empty += 1
        if self._empty > self._max_empty:
            self._fail(ENHANCE_YOUR_CALM, b"too many empty or unknown frames")

    def _data(self, buf: bytes, off: int, length: int, flags: int, sid: int) -> None:
        if sid == 0:
            self._fail(PROTOCOL_ERROR, b"DATA on stream 0")
            return
        end = off + length
        if flags & PADDED:
            if length < 1:
                self._fail(FRAME_SIZE_ERROR, b"padded DATA without pad length")
                return
            pad = buf[off]
            off += 1
            if pad > end - off:
                self._fail(PROTOCOL_ERROR, b"padding longer than the DATA frame")
                return
            end -= pad
        st = self._data_open(length, sid)
        if st is None:
            return
        if end == off and not flags & END_STREAM:
            self._flood_empty()
            if self.closed:
                return
        st.data_len += end - off
        if end > off and not st.discard:
            self._grpc_data(st, buf, off, end)
            if st.closed:
                return
        self._data_end(st, length, flags)

    def _data_open(self, length: int, sid: int) -> _Stream | None:
        """A DATA frame's flow control and stream: the stream its payload goes to, or None
        (an error was answered, or the stream is gone and the payload is ignored)."""
        if length > self._recv_conn_window:
            self._fail(FLOW_CONTROL_ERROR, b"connection flow-control window exceeded")
            return None
        self._last_data = length
        self._recv_conn_window -= length
        self._conn_unacked += length
        if self._conn_unacked >= self._conn_window_size >> 1:
            self._out.append(_HDR.pack(0, 4, WINDOW_UPDATE, 0, 0) + _U32.pack(self._conn_unacked))
            self._recv_conn_window += self._conn_unacked
            self._conn_unacked = 0
        st = self._streams.get(sid)
        if st is None:
            if sid > self._last_sid:
                self._fail(PROTOCOL_ERROR, b"DATA on an idle stream")
            elif sid not in self._recent_resets:
                self._send_rst(sid, STREAM_CLOSED)
            return None
        if st.remote_closed:
            self._stream_error(st, STREAM_CLOSED)
            return None
        if length > st.recv_window:
            self._stream_error(st, FLOW_CONTROL_ERROR)
            return None
        st.recv_window -= length
        return st

    def _data_begin(self, buf: bytes, a: int, b: int, length: int, flags: int, sid: int) -> None:
        """The start of a (non-empty, unpadded) DATA frame whose payload ends in later reads:
        the frame's checks now, ``buf[a:b]`` to its stream; ``_data_more`` takes the rest."""
        st = self._data_open(length, sid)
        if self.closed:
            return
        self._dst = st
        self._dflags = flags
        self._dlength = length
        self._dleft = length
        self._data_more(buf, a, b)

    def _data_more(self, buf: bytes, a: int, b: int) -> None:
        """``buf[a:b]``, the next bytes of the DATA frame being received; its end is handled
        as a whole frame's (END_STREAM, window updates) once its last byte is in."""
        self._dleft -= b - a
        st = self._dst
        if st is not None:
            if st.closed:
                st = self._dst = None
            else:
                st.data_len += b - a
                if not st.discard:
                    self._grpc_data(st, buf, a, b)
                    if st.closed or self.closed:
                        st = self._dst = None
        if self._dleft == 0:
            self._data_done(st)

    def _data_done(self, st: _Stream | None) -> None:
        """The DATA frame being received has all its bytes (``_data_more``, ``recv_done``):
        its end, for its stream unless that closed meanwhile (None)."""
        self._dst = None
        if st is not None:
            self._data_end(st, self._dlength, self._dflags)

    def _data_end(self, st: _Stream, length: int, flags: int) -> None:
        if flags & END_STREAM:
            self._remote_end(st)
            return
        st.unacked += length
        if st.unacked >= self._stream_window >> 1 and st.reading:
            if self._buffered > self._max_buffered and st.got:
                if not st.deferred:
                    st.deferred = True
                    self._deferred.append(st)
            else:
                self._ack_stream(st)

    def _ack_stream(self, st: _Stream) -> None:
        if st.unacked > 0 and not st.closed and not st.remote_closed:
            self._out.append(_HDR.pack(0, 4, WINDOW_UPDATE, 0, st.sid) + _U32.pack(st.unacked))
            st.recv_window += st.unacked
            st.unacked = 0

    def _grpc_data(self, st: _Stream, buf: bytes, a: int, b: int) -> None:
        while a < b:
            if st.msg_len < 0:
                if not st.hdr and b - a >= 5:
                    flag = buf[a]
                    mlen = buf[a + 1]  # widened before shifting: a C int would overflow
                    mlen = (mlen << 24) | (buf[a + 2] << 16) | (buf[a + 3] << 8) | buf[a + 4]
                    a += 5
                else:
                    take = 5 - len(st.hdr)
                    if take > b - a:
                        take = b - a
                    st.hdr += buf[a : a + take]
                    a += take
                    if len(st.hdr) < 5:
                        return
                    hdr = st.hdr
                    st.hdr = b""
                    flag = hdr[0]
                    mlen = hdr[1]
                    mlen = (mlen << 24) | (hdr[2] << 16) | (hdr[3] << 8) | hdr[4]
                if flag > 1:
                    st.discard = True
                    self._on_grpc_error(
                        st.sid, GRPC_INTERNAL, "invalid gRPC message compressed flag"
                    )
                    return
                if mlen > self._max_message:
                    st.discard = True
                    self._on_grpc_error(
                        st.sid,
                        GRPC_RESOURCE_EXHAUSTED,
                        f"Received message larger than max ({mlen} vs. {self._max_message})",
                    )
                    return
                if b - a >= mlen:
                    if mlen >= _BLOCK_AT and mlen << 2 >= len(buf):
                        # a large message whole in this read: a view of it, uncopied (it
                        # keeps at most four times its size alive)
                        self._on_message(st.sid, flag, memoryview(buf)[a : a + mlen])
                    else:
                        self._on_message(st.sid, flag, buf[a : a + mlen])
                    if st.closed or st.discard:
                        return
                    a += mlen
                    continue
                st.msg_len = mlen
                st.msg_flag = flag
                if _BLOCK_AT <= mlen <= _BLOCK_MAX and self._blocks < _MAX_BLOCKS:
                    block = self._take(mlen)
                    block[0 : b - a] = memoryview(buf)[a:b]
                    st.block = block
                    self._blocks += 1
                else:
                    _keep_piece(st.chunks, buf, a, b)
                st.got = b - a
                self._buffered += b - a
                return
            take = st.msg_len - st.got
            if take > b - a:
                take = b - a
            block = st.block
            if block is not None:
                block[st.got : st.got + take] = memoryview(buf)[a : a + take]
            else:
                _keep_piece(st.chunks, buf, a, a + take)
            st.got += take
            self._buffered += take
            a += take
            if st.got == st.msg_len:
                self._complete(st)
                if st.closed or st.discard:
                    return

    def _complete(self, st: _Stream) -> None:
        """The stream's message is all in: hand it up (its block, or its pieces joined)."""
        block = st.block
        if block is not None:
            payload = block
            self._drop_block(st)
        else:
            payload = b"".join(st.chunks)
        self._release(st)
        flag = st.msg_flag
        st.msg_len = -1
        self._on_message(st.sid, flag, payload)

    def _release(self, st: _Stream) -> None:
        """Drop a stream's partial message from the buffered total; acks deferred while the
        connection held too much go out once it is back under the limit."""
        self._buffered -= st.got
        st.got = 0
        st.chunks = []
        self._drop_block(st)

    def _drop_block(self, st: _Stream) -> None:
        if st.block is not None:
            st.block = None
            self._blocks -= 1
        if self._deferred and self._buffered <= self._max_buffered:
            waiting = self._deferred
            self._deferred = []
            for other in waiting:
                other.deferred = False
                self._ack_stream(other)

    def _remote_end(self, st: _Stream) -> None:
        st.remote_closed = True
        if st.content_length >= 0 and st.content_length != st.data_len:
            self._stream_error(st, PROTOCOL_ERROR)
            return
        if st.discard:
            pass
        elif st.msg_len >= 0 or st.hdr:
            st.discard = True
            self._release(st)
            self._on_grpc_error(st.sid, GRPC_INTERNAL, "Received an incomplete gRPC message")
        else:
            self._on_half_close(st.sid)
        if st.local_closed and not st.closed:
            self._close(st)

    def _headers(self, buf: bytes, off: int, length: int, flags: int, sid: int) -> None:
        if sid == 0:
            self._fail(PROTOCOL_ERROR, b"HEADERS on stream 0")
            return
        end = off + length
        if flags & PADDED:
            if length < 1:
                self._fail(FRAME_SIZE_ERROR, b"padded HEADERS without pad length")
                return
            pad = buf[off]
            off += 1
            if pad > end - off:
                self._fail(PROTOCOL_ERROR, b"padding longer than the HEADERS frame")
                return
            end -= pad
        bad_priority = False
        if flags & PRIORITY_FLAG:
            if end - off < 5:
                self._fail(FRAME_SIZE_ERROR, b"HEADERS too short for its priority")
                return
            dep = _U32.unpack_from(buf, off)[0] & _MAX_WINDOW
            bad_priority = dep == sid
            off += 5
        if end == off and not flags & END_HEADERS:
            self._flood_empty()
            if self.closed:
                return
        if end - off > self._max_header_list:
            self._fail(ENHANCE_YOUR_CALM, b"header block larger than MAX_HEADER_LIST_SIZE")
            return
        if flags & END_HEADERS:
            self._block(sid, buf[off:end], bool(flags & END_STREAM), bad_priority)
            return
        self._hb = [buf[off:end]]
        self._hb_len = end - off
        self._hb_sid = sid
        self._hb_end_stream = bool(flags & END_STREAM)
        self._hb_bad_priority = bad_priority
        self._hb_count = 1

    def _continuation(self, buf: bytes, off: int, length: int, flags: int, sid: int) -> None:
        if self._hb_sid == 0 or sid != self._hb_sid:
            self._fail(PROTOCOL_ERROR, b"CONTINUATION without an open header block")
            return
        self._hb_count += 1
        self._hb_len += length
        if self._hb_len > self._max_header_list or self._hb_count > self._max_cont:
            self._fail(ENHANCE_YOUR_CALM, b"header block too large or in too many frames")
            return
        if length == 0 and not flags & END_HEADERS:
            self._flood_empty()
            if self.closed:
                return
        self._hb.append(buf[off : off + length])
        if flags & END_HEADERS:
            block = b"".join(self._hb)
            self._hb = []
            self._hb_sid = 0
            self._block(sid, block, self._hb_end_stream, self._hb_bad_priority)

    def _block(self, sid: int, block: bytes, end_stream: bool, bad_priority: bool) -> None:
        """A complete header block: decode it first (the HPACK state must stay in step with
        the peer's even for streams that are then refused), then open or end the stream."""
        try:
            headers = self._decoder.decode(block)
        except HeaderListTooLarge:
            self._fail(ENHANCE_YOUR_CALM, b"header list larger than MAX_HEADER_LIST_SIZE")
            return
        except HpackError:
            self._fail(COMPRESSION_ERROR, b"invalid header block")
            return
        if not sid & 1:
            self._fail(PROTOCOL_ERROR, b"even stream id from a client")
            return
        st = self._streams.get(sid)
        if st is not None:
            if st.remote_closed:
                self._stream_error(st, STREAM_CLOSED)
            elif not end_stream or bad_priority or not _trailers_ok(headers):
                self._stream_error(st, PROTOCOL_ERROR)
            else:
                self._remote_end(st)
            return
        if sid <= self._last_sid:
            if sid not in self._recent_resets:
                self._fail(STREAM_CLOSED, b"HEADERS on a closed stream")
            return
        self._last_sid = sid
        if self.goaway_sent:
            self._send_rst(sid, REFUSED_STREAM)  # sent before our GOAWAY reached the client
            return
        if len(self._streams) >= self._max_streams:
            self._send_rst(sid, REFUSED_STREAM)
            self._count_reset()
            return
        content_length = _request_ok(headers)
        if bad_priority or content_length < -1:
            self._send_rst(sid, PROTOCOL_ERROR)
            self._count_reset()
            return
        st = _Stream(sid, self._stream_window, self._peer_initial_window)
        st.content_length = content_length
        self._streams[sid] = st
        self._wu_credit += 4
        self._on_request(sid, headers)
        if end_stream and not st.closed:
            self._remote_end(st)

    def _window_update(self, buf: bytes, off: int, length: int, sid: int) -> None:
        if length != 4:
            self._fail(FRAME_SIZE_ERROR, b"WINDOW_UPDATE of a length other than 4")
            return
        inc = _U32.unpack_from(buf, off)[0] & _MAX_WINDOW
        # a WINDOW_UPDATE that none of our streams or DATA frames explain is a flood's
        if self._wu_credit > 0:
            self._wu_credit -= 1
        else:
            self._wus += 1
            if self._wus > self._max_wu:
                self._fail(ENHANCE_YOUR_CALM, b"too many WINDOW_UPDATE frames")
                return
        if sid == 0:
            if inc == 0:
                self._fail(PROTOCOL_ERROR, b"WINDOW_UPDATE with an increment of 0")
                return
            self._send_conn_window += inc
            if self._send_conn_window > _MAX_WINDOW:
                self._fail(FLOW_CONTROL_ERROR, b"connection window over 2^31-1")
                return
            self._flush_blocked()
            return
        st = self._streams.get(sid)
        if st is None:
            if sid > self._last_sid:
                self._fail(PROTOCOL_ERROR, b"WINDOW_UPDATE on an idle stream")
            return
        if inc == 0:
            self._stream_error(st, PROTOCOL_ERROR)
            return
        st.send_window += inc
        if st.send_window > _MAX_WINDOW:
            self._stream_error(st, FLOW_CONTROL_ERROR)
            return
        if st.out_len or st.out_trailers is not None:
            self._flush(st)

    def _rst_stream(self, buf: bytes, off: int, length: int, sid: int) -> None:
        if sid == 0:
            self._fail(PROTOCOL_ERROR, b"RST_STREAM on stream 0")
            return
        if length != 4:
            self._fail(FRAME_SIZE_ERROR, b"RST_STREAM of a length other than 4")
            return
        if sid > self._last_sid:
            self._fail(PROTOCOL_ERROR, b"RST_STREAM on an idle stream")
            return
        self._count_reset()
        if self.closed:
            return
        st = self._streams.get(sid)
        if st is None:
            return
        code = _U32.unpack_from(buf, off)[0]
        self._close(st)
        self._on_reset(sid, code)

    def _count_reset(self) -> None:
        # a token bucket, not the flood window: max_resets at once, then max_resets per
        # flood_window_s for ever (a counting window that restarts only on a late read cut
        # off a steady rate below the limit)
        now = time.monotonic()
        tokens = self._reset_tokens + (now - self._reset_t) * self._reset_rate
        if tokens > self._max_resets:
            tokens = self._max_resets
        self._reset_t = now
        tokens -= 1.0
        self._reset_tokens = tokens
        if tokens < 0.0:
            self._fail(ENHANCE_YOUR_CALM, b"too many stream resets")

    def _settings_frame(self, buf: bytes, off: int, length: int, flags: int, sid: int) -> None:
        if sid != 0:
            self._fail(PROTOCOL_ERROR, b"SETTINGS on a stream")
            return
        if flags & ACK:
            if length != 0:
                self._fail(FRAME_SIZE_ERROR, b"SETTINGS ACK with a payload")
            return
        if length % 6:
            self._fail(FRAME_SIZE_ERROR, b"SETTINGS length not a multiple of 6")
            return
        self._got_settings = True
        self._settings += 1
        if self._settings > self._max_settings:
            self._fail(ENHANCE_YOUR_CALM, b"too many SETTINGS frames")
            return
        end = off + length
        grew = False
        while off < end:
            ident, value = _SETTING.unpack_from(buf, off)
            off += 6
            if ident == S_ENABLE_PUSH:
                if value > 1:
                    self._fail(PROTOCOL_ERROR, b"SETTINGS_ENABLE_PUSH not 0 or 1")
                    return
            elif ident == S_INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    self._fail(FLOW_CONTROL_ERROR, b"SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
                    return
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for st in self._streams.values():
                    st.send_window += delta
                    if st.send_window > _MAX_WINDOW:
                        self._fail(FLOW_CONTROL_ERROR, b"stream window over 2^31-1")
                        return
                grew = grew or delta > 0
            elif ident == S_MAX_FRAME_SIZE:
                if value < 16384 or value > 16777215:
                    self._fail(PROTOCOL_ERROR, b"SETTINGS_MAX_FRAME_SIZE out of range")
                    return
                self._peer_max_frame = value
        self._out.append(_HDR.pack(0, 0, SETTINGS, ACK, 0))
        if grew:
            self._flush_blocked()

    def _ping(self, buf: bytes, off: int, length: int, flags: int, sid: int) -> None:
        if sid != 0:
            self._fail(PROTOCOL_ERROR, b"PING on a stream")
            return
        if length != 8:
            self._fail(FRAME_SIZE_ERROR, b"PING of a length other than 8")
            return
        if flags & ACK:
            if self._on_ping is not None:
                self._on_ping(True, buf[off : off + 8])
            return
        self._pings += 1
        if self._pings > self._max_pings:
            self._fail(ENHANCE_YOUR_CALM, b"too many PINGs")
            return
        self._out.append(_HDR.pack(0, 8, PING, ACK, 0) + buf[off : off + 8])
        if self._on_ping is not None:
            self._on_ping(False, b"")

    def _priority(self, buf: bytes, off: int, length: int, sid: int) -> None:
        if sid == 0:
            self._fail(PROTOCOL_ERROR, b"PRIORITY on stream 0")
            return
        if length != 5:
            st = self._streams.get(sid)
            if st is not None:
                self._stream_error(st, FRAME_SIZE_ERROR)
            else:
                self._send_rst(sid, FRAME_SIZE_ERROR)
            return
        self._flood_empty()
        if self.closed:
            return
        dep = _U32.unpack_from(buf, off)[0] & _MAX_WINDOW
        if dep == sid:
            st = self._streams.get(sid)
            if st is not None:
                self._stream_error(st, PROTOCOL_ERROR)
            else:
                self._send_rst(sid, PROTOCOL_ERROR)

    # ---------------------------------------------------------------- errors and closing

    def _fail(self, code: int, debug: bytes) -> None:
        """A connection error: GOAWAY with ``code``; nothing is parsed after it."""
        if self.closed:
            return
        self._out.append(
            _HDR.pack(0, 8 + len(debug), GOAWAY, 0, 0) + _U32X2.pack(self._last_sid, code) + debug
        )
        self.goaway_sent = True
        self.closed = True
        self.error_code = code
        self._pending.clear()
        self._pending_len = 0
        self._hb = []

    def _send_rst(self, sid: int, code: int) -> None:
        self._out.append(_HDR.pack(0, 4, RST_STREAM, 0, sid) + _U32.pack(code))
        recent = self._recent_resets
        if len(recent) >= _RECENT_RESETS:
            recent.clear()
        recent.add(sid)

    def _stream_error(self, st: _Stream, code: int) -> None:
        self._send_rst(st.sid, code)
        self._close(st)
        self._count_reset()
        self._on_reset(st.sid, code)

    def _close(self, st: _Stream) -> None:
        if st.closed:
            return
        st.closed = True
        self._streams.pop(st.sid, None)
        if st.got:
            self._release(st)
        self._drop_block(st)
        st.out = []
        st.out_len = 0
        st.out_trailers = None

    # ---------------------------------------------------------------- frames out

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        """Send an encoded header block (``encode_headers``); with ``end_stream`` it ends the
        stream after the queued DATA (trailers). Unknown or ended streams are ignored."""
        st = self._streams.get(stream_id)
        if st is None or st.local_closed or st.out_trailers is not None:
            return
        if end_stream and (st.out_len or st.out_end):
            st.out_trailers = block
            return
        self._emit_headers(stream_id, block, end_stream)
        if end_stream:
            self._local_end(st)

    def _emit_headers(self, sid: int, block: bytes, end_stream: bool) -> None:
        n = len(block)
        limit = self._peer_max_frame
        flags = END_STREAM if end_stream else 0
        if n <= limit:
            self._out.append(_HDR.pack(n >> 16, n & 0xFFFF, HEADERS, flags | END_HEADERS, sid))
            self._out.append(block)
            return
        self._out.append(_HDR.pack(limit >> 16, limit & 0xFFFF, HEADERS, flags, sid))
        self._out.append(block[:limit])
        pos = limit
        while pos < n:
            k = n - pos if n - pos <= limit else limit
            last = END_HEADERS if pos + k == n else 0
            self._out.append(_HDR.pack(k >> 16, k & 0xFFFF, CONTINUATION, last, sid))
            self._out.append(block[pos : pos + k])
            pos += k

    def send_message(self, stream_id: int, payload: Any, compressed: bool = False) -> bool:
        """Queue one gRPC message (bytes, or a list of flat byte buffers whose concatenation
        it is: written without a join, see ``output``); False once the stream's queued output
        is over the limit (the transport then waits for ``on_writable``)."""
        st = self._streams.get(stream_id)
        if st is None or st.local_closed or st.out_end or st.out_trailers is not None:
            return False
        if type(payload) is list:
            n = 0
            for part in payload:
                n += len(part)
            prefix = _PREFIX.pack(1 if compressed else 0, n)
            st.out.append(prefix)
            st.out.extend(payload)
            st.out_len += n + 5
            self._gathered = True
            self._flush(st)
            if st.out_len < self._write_limit:
                return True
            st.want_writable = True
            return False
        n = len(payload)
        prefix = _PREFIX.pack(1 if compressed else 0, n)
        n += 5
        if (
            not st.out_len
            and n <= self._peer_max_frame
            and n <= st.send_window
            and n <= self._send_conn_window
        ):
            st.send_window -= n
            self._send_conn_window -= n
            self._wu_credit += _WU_PER_DATA
            self.data_sent += n
            self._out.append(_HDR.pack(n >> 16, n & 0xFFFF, DATA, 0, stream_id) + prefix)
            self._out.append(payload)
            return True
        st.out.append(prefix)
        st.out.append(payload)
        st.out_len += n
        self._flush(st)
        if st.out_len < self._write_limit:
            return True
        st.want_writable = True
        return False

    def send_response(
        self, stream_id: int, head: bytes, payload: Any, compressed: bool, trailers: bytes
    ) -> None:
        """A whole unary response: headers, one message (as ``send_message`` takes it),
        trailers (the hot path)."""
        st = self._streams.get(stream_id)
        if (
            st is None
            or st.local_closed
            or st.out_len
            or st.out_trailers is not None
            or type(payload) is list
        ):
            if st is not None and not st.local_closed:
                self.send_headers(stream_id, head)
                self.send_message(stream_id, payload, compressed)
                self.send_headers(stream_id, trailers, True)
            return
        n = len(payload) + 5
        if n <= self._peer_max_frame and n <= st.send_window and n <= self._send_conn_window:
            st.send_window -= n
            self._send_conn_window -= n
            self._wu_credit += _WU_PER_DATA
            h = len(head)
            t = len(trailers)
            if h <= self._peer_max_frame and t <= self._peer_max_frame:
                self._out.append(
                    _HDR.pack(0, h, HEADERS, END_HEADERS, stream_id)
                    + head
                    + _HDR.pack(n >> 16, n & 0xFFFF, DATA, 0, stream_id)
                    + _PREFIX.pack(1 if compressed else 0, n - 5)
                )
                self._out.append(payload)
                self._out.append(
                    _HDR.pack(0, t, HEADERS, END_HEADERS | END_STREAM, stream_id) + trailers
                )
                self.data_sent += n
                self._local_end(st)
                return
            st.send_window += n
            self._send_conn_window += n
            self._wu_credit -= _WU_PER_DATA
        self.send_headers(stream_id, head)
        self.send_message(stream_id, payload, compressed)
        self.send_headers(stream_id, trailers, True)

    def end_stream(self, stream_id: int) -> None:
        """End the stream with an empty DATA frame after the queued output (no trailers)."""
        st = self._streams.get(stream_id)
        if st is None or st.local_closed or st.out_trailers is not None:
            return
        st.out_end = True
        self._flush(st)

    def _flush(self, st: _Stream) -> None:
        """Send as much of ``st``'s queued DATA as both windows allow, then what ends it."""
        out = self._out
        frame = self._peer_max_frame
        while st.out_len:
            k = st.out_len
            if k > frame:
                k = frame
            if k > st.send_window:
                k = st.send_window
            if k > self._send_conn_window:
                k = self._send_conn_window
            if k <= 0:
                if not st.blocked:
                    st.blocked = True
                    self._blocked.append(st)
                break
            st.send_window -= k
            self._send_conn_window -= k
            self._wu_credit += _WU_PER_DATA
            self.data_sent += k
            st.out_len -= k
            last = st.out_len == 0 and st.out_end and st.out_trailers is None
            out.append(_HDR.pack(k >> 16, k & 0xFFFF, DATA, END_STREAM if last else 0, st.sid))
            chunks = st.out
            while k:
                c = chunks[0]
                m = len(c)
                if m <= k:
                    out.append(c)
                    chunks.pop(0)
                    k -= m
                else:
                    view = memoryview(c)
                    out.append(view[:k])
                    chunks[0] = view[k:]
                    k = 0
            if last:
                self._local_end(st)
                return
        if st.out_len:
            pass
        elif st.out_trailers is not None:
            block = st.out_trailers
            st.out_trailers = None
            self._emit_headers(st.sid, block, True)
            self._local_end(st)
            return
        elif st.out_end:
            out.append(_HDR.pack(0, 0, DATA, END_STREAM, st.sid))
            self._local_end(st)
            return
        if st.want_writable and st.out_len < self._write_limit:
            st.want_writable = False
            self._on_writable(st.sid)

    def _flush_blocked(self) -> None:
        if not self._blocked:
            return
        waiting = self._blocked
        self._blocked = []
        for st in waiting:
            st.blocked = False
            if not st.closed:
                self._flush(st)

    def _local_end(self, st: _Stream) -> None:
        st.local_closed = True
        if not st.remote_closed:
            # the response is complete: the rest of the request is not wanted (as grpc does)
            self._send_rst(st.sid, NO_ERROR)
        self._close(st)

    def reset(self, stream_id: int, code: int = CANCEL) -> None:
        """Reset a stream (RST_STREAM); no handler event follows."""
        st = self._streams.get(stream_id)
        if st is None:
            return
        self._send_rst(stream_id, code)
        self._close(st)

    def set_reading(self, stream_id: int, reading: bool) -> None:
        """Stop (False) or resume (True) granting the client flow-control window on a stream:
        a slow reader of a streaming call holds at most one stream window of requests."""
        st = self._streams.get(stream_id)
        if st is None:
            return
        st.reading = reading
        if reading and st.unacked >= self._stream_window >> 1:
            self._ack_stream(st)

    def goaway(self, code: int = NO_ERROR, debug: bytes = b"") -> None:
        """GOAWAY naming the last stream this connection processed; with code 0 the open
        streams finish and new ones are refused, otherwise the connection is closed."""
        if self.closed:
            return
        if code != NO_ERROR:
            self._fail(code, debug)
            return
        self._out.append(
            _HDR.pack(0, 8 + len(debug), GOAWAY, 0, 0) + _U32X2.pack(self._last_sid, 0) + debug
        )
        self.goaway_sent = True


def _request_ok(headers: list[tuple[bytes, bytes]]) -> int:
    """Validate a request header list (RFC 9113 8.2-8.3): the content-length (-1 if none)
    or -2 when the request is malformed."""
    regular = False
    method = b""
    path = b""
    scheme = False
    authority = False
    content_length = -1
    seen = 0
    for name, value in headers:
        if not _value_ok(value):
            return -2
        if name[:1] == b":":
            if regular:
                return -2
            if name == b":method":
                bit = 1
                method = value
            elif name == b":path":
                bit = 2
                path = value
            elif name == b":scheme":
                bit = 4
                scheme = True
            elif name == b":authority":
                bit = 8
                authority = True
            else:
                return -2
            if seen & bit:
                return -2
            seen |= bit
            continue
        regular = True
        if not _name_ok(name):
            return -2
        if name == b"te":
            if value != b"trailers":
                return -2
        elif name == b"content-length":
            if not value.isdigit() or len(value) > 18 or content_length >= 0:
                return -2
            content_length = int(value)
        elif name in _CONNECTION_SPECIFIC:
            return -2
    if not method:
        return -2
    if method == b"CONNECT":
        if scheme or path or not authority:
            return -2
        return content_length
    if not scheme or not path:
        return -2
    return content_length


def _trailers_ok(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if not _name_ok(name) or not _value_ok(value) or name in _CONNECTION_SPECIFIC:
            return False
        if name == b"te" and value != b"trailers":
            return False
    return True

"""H2Connection on both twins: the ``h2`` package as an independent client for the normal
flows, raw frames for every misbehaviour (exact GOAWAY / RST_STREAM codes)."""

from __future__ import annotations

import os
import struct
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from test_h2_peer import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEAD,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    REQUEST,
    RST_STREAM,
    SETTINGS,
    TRAILERS,
    WINDOW_UPDATE,
    Peer,
    Recorder,
    frame,
    grpc_message,
    settings,
)

from tritonlite.frontends.wire import _h2_py
from tritonlite.frontends.wire import h2 as h2_select
from tritonlite.frontends.wire._h2_py import (
    CANCEL,
    COMPRESSION_ERROR,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    NO_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    STREAM_CLOSED,
    H2Limits,
)

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"


def _compiled() -> Any:
    try:
        from tritonlite.frontends.wire import _h2_c
    except ImportError as exc:
        if REQUIRE:
            raise AssertionError("TRITONLITE_REQUIRE_EXTENSIONS=1 but _h2_c is not built") from exc
        return None
    return _h2_c


COMPILED = _compiled()
NOT_BUILT = "compiled twin tritonlite.frontends.wire._h2_c is not built (pip install -e .)"


@pytest.fixture(params=["pure", "compiled"])
def H2C(request: pytest.FixtureRequest) -> Any:
    if request.param == "pure":
        return _h2_py.H2Connection
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED.H2Connection


def test_twins_are_what_they_claim() -> None:
    assert _h2_py.COMPILED is False
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    assert COMPILED.COMPILED is True
    assert h2_select.H2Connection is COMPILED.H2Connection or not h2_select.ACCELERATED


# ------------------------------------------------------------------ the h2 package as client


def _h2_client(server: Any, **settings_: int) -> h2.connection.H2Connection:
    cl = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    cl.initiate_connection()
    if settings_:
        cl.update_settings({getattr(h2.settings.SettingCodes, k): v for k, v in settings_.items()})
    server.receive(cl.data_to_send())
    cl.receive_data(server.data_to_send())
    server.receive(cl.data_to_send())
    return cl


def _exchange(cl: h2.connection.H2Connection, server: Any) -> list[Any]:
    server.receive(cl.data_to_send())
    events = cl.receive_data(server.data_to_send())
    server.receive(cl.data_to_send())
    return list(events)


def test_settings_and_connection_window(H2C: Any) -> None:
    rec = Recorder()
    lim = H2Limits(
        max_concurrent_streams=7,
        stream_window=1 << 20,
        connection_window=8 << 20,
        max_frame_size=32768,
        max_header_list_size=12345,
    )
    server = H2C(rec, lim)
    cl = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    cl.initiate_connection()
    server.receive(cl.data_to_send())
    events = cl.receive_data(server.data_to_send())
    changed = next(e for e in events if isinstance(e, h2.events.RemoteSettingsChanged))
    got = {k: v.new_value for k, v in changed.changed_settings.items()}
    assert got[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 7
    assert got[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 1 << 20
    assert got[h2.settings.SettingCodes.MAX_FRAME_SIZE] == 32768
    assert got[h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE] == 12345
    assert cl.outbound_flow_control_window == 8 << 20
    assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)


def test_unary_round_trip_with_h2(H2C: Any) -> None:
    rec = Recorder()
    server = H2C(rec)
    cl = _h2_client(server)
    msg = bytes(range(256)) * 3  # prefix bytes >= 0x80 read unsigned
    for _ in range(3):
        sid = cl.get_next_available_stream_id()
        cl.send_headers(sid, REQUEST)
        cl.send_data(sid, grpc_message(msg[:200]) + grpc_message(msg, 1), end_stream=True)
        server.receive(cl.data_to_send())
        assert rec.events[-4:] == [
            ("request", sid, REQUEST),
            ("message", sid, 0, msg[:200]),
            ("message", sid, 1, msg),
            ("half_close", sid),
        ]
        server.send_response(sid, HEAD, b"pong" * 100, False, TRAILERS)
        events = cl.receive_data(server.data_to_send())
        kinds = [type(e).__name__ for e in events]
        assert kinds == ["ResponseReceived", "DataReceived", "TrailersReceived", "StreamEnded"]
        assert events[1].data == grpc_message(b"pong" * 100)
        assert events[2].headers == [(b"grpc-status", b"0")]
    assert server.open_streams() == 0


def test_streaming_both_ways_with_h2(H2C: Any) -> None:
    rec = Recorder()
    server = H2C(rec)
    cl = _h2_client(server)
    sid = cl.get_next_available_stream_id()
    cl.send_headers(sid, REQUEST)
    server.receive(cl.data_to_send())
    server.send_headers(sid, HEAD)
    for i in range(5):
        cl.send_data(sid, grpc_message(b"q%d" % i))
        _exchange(cl, server)
        assert rec.events[-1] == ("message", sid, 0, b"q%d" % i)
        assert server.send_message(sid, b"r%d" % i) is True
        events = cl.receive_data(server.data_to_send())
        assert any(
            isinstance(e, h2.events.DataReceived) and e.data == grpc_message(b"r%d" % i)
            for e in events
        )
    cl.end_stream(sid)
    _exchange(cl, server)
    assert rec.events[-1] == ("half_close", sid)
    server.send_headers(sid, TRAILERS, True)
    events = cl.receive_data(server.data_to_send())
    assert isinstance(events[-1], h2.events.StreamEnded)
    assert server.open_streams() == 0


def test_ping_is_acked_by_h2(H2C: Any) -> None:
    server = H2C(Recorder())
    cl = _h2_client(server)
    cl.ping(b"12345678")
    events = _exchange(cl, server)
    assert any(
        isinstance(e, h2.events.PingAckReceived) and e.ping_data == b"12345678" for e in events
    )


def test_large_message_flow_control_with_h2(H2C: Any) -> None:
    """5 MiB each way: the server refills the client's windows as it reads, and holds its
    own output until the client's WINDOW_UPDATEs."""
    rec = Recorder()
    server = H2C(rec, H2Limits(stream_window=1 << 20, connection_window=2 << 20))
    cl = _h2_client(server)
    sid = cl.get_next_available_stream_id()
    cl.send_headers(sid, REQUEST)
    body = grpc_message(os.urandom(5 << 20))
    sent = 0
    while sent < len(body):
        n = min(cl.local_flow_control_window(sid), cl.max_outbound_frame_size, len(body) - sent)
        assert n > 0, "the server stopped granting window"
        cl.send_data(sid, body[sent : sent + n], end_stream=sent + n == len(body))
        sent += n
        _exchange(cl, server)
    assert rec.events[-2] == ("message", sid, 0, body[5:])
    assert rec.events[-1] == ("half_close", sid)
    server.send_headers(sid, HEAD)
    server.send_message(sid, body[5:])
    server.send_headers(sid, TRAILERS, True)
    got = bytearray()
    ended = False
    for _ in range(1000):
        events = cl.receive_data(server.data_to_send())
        for e in events:
            if isinstance(e, h2.events.DataReceived):
                got += e.data
                cl.acknowledge_received_data(e.flow_controlled_length, sid)
            ended = ended or isinstance(e, h2.events.StreamEnded)
        server.receive(cl.data_to_send())
        if ended:
            break
    assert ended and bytes(got) == body


@pytest.mark.parametrize("read", [997, 65536, 262144, 1 << 22])
def test_large_frames_arriving_in_pieces_with_h2(H2C: Any, read: int) -> None:
    """1 MiB DATA frames, each spanning many reads of ``read`` bytes (a frame's payload goes
    to the stream as it arrives): the same messages, half-close and window updates as when
    every frame arrives whole; then the answer as a gathered message (a list of buffers,
    written unjoined through ``output``), read back by h2."""
    rec = Recorder()
    server = H2C(rec, H2Limits(stream_window=4 << 20, connection_window=8 << 20))
    cl = _h2_client(server)
    assert cl.max_outbound_frame_size == 1 << 20
    sid = cl.get_next_available_stream_id()
    cl.send_headers(sid, REQUEST)
    payload = os.urandom((3 << 20) + 17)
    body = grpc_message(payload) + grpc_message(b"tail")
    sent = 0
    while sent < len(body):
        n = min(cl.local_flow_control_window(sid), cl.max_outbound_frame_size, len(body) - sent)
        assert n > 0, "the server stopped granting window"
        cl.send_data(sid, body[sent : sent + n], end_stream=sent + n == len(body))
        sent += n
        wire = cl.data_to_send()
        for i in range(0, len(wire), read):
            server.receive(wire[i : i + read])
        cl.receive_data(server.data_to_send())
    assert rec.events[-3:] == [
        ("message", sid, 0, payload),
        ("message", sid, 0, b"tail"),
        ("half_close", sid),
    ]
    assert not server.closed
    view = memoryview(bytearray(payload))
    server.send_headers(sid, HEAD)
    server.send_message(sid, [b"ab", view[: 1 << 20], view[1 << 20 :]])
    server.send_headers(sid, TRAILERS, True)
    got = bytearray()
    ended = False
    for _ in range(1000):
        out = server.output()
        events = cl.receive_data(b"".join(out) if isinstance(out, list) else out)
        for e in events:
            if isinstance(e, h2.events.DataReceived):
                got += e.data
                cl.acknowledge_received_data(e.flow_controlled_length, sid)
            ended = ended or isinstance(e, h2.events.StreamEnded)
        server.receive(cl.data_to_send())
        if ended:
            break
    assert ended and bytes(got) == grpc_message(b"ab" + payload)


# ------------------------------------------------------------------ raw frames: good inputs


def test_continuation_padding_priority_and_byte_at_a_time(H2C: Any) -> None:
    peer = Peer(H2C)
    block = peer.block(REQUEST + [(b"x-long", b"v" * 300)])
    pad = 7
    first = bytes([pad]) + struct.pack(">LB", 0, 15) + block[:10] + b"\0" * pad
    data = (
        frame(HEADERS, PADDED | PRIORITY_FLAG, 1, first)
        + frame(CONTINUATION, 0, 1, block[10:100])
        + frame(CONTINUATION, END_HEADERS, 1, block[100:])
        + frame(PRIORITY, 0, 1, struct.pack(">LB", 0, 1))
        + frame(DATA, PADDED, 1, bytes([3]) + grpc_message(b"abc")[:4] + b"\0\0\0")
        + frame(DATA, 0, 1, grpc_message(b"abc")[4:] + grpc_message(b"") + grpc_message(b"z"))
        + frame(DATA, END_STREAM, 1, b"")
    )
    for i in range(len(data)):
        peer.send(data[i : i + 1])
    rec = peer.handler
    assert rec.events == [
        ("request", 1, REQUEST + [(b"x-long", b"v" * 300)]),
        ("message", 1, 0, b"abc"),
        ("message", 1, 0, b""),
        ("message", 1, 0, b"z"),
        ("half_close", 1),
    ]
    assert not peer.conn.closed


def test_client_trailers_end_the_stream(H2C: Any) -> None:
    peer = Peer(H2C)
    peer.request(grpc_message(b"x"), end=False)
    peer.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, peer.block([(b"x-trailer", b"1")])))
    assert peer.handler.kinds() == ["request", "message", "half_close"]


def test_window_updates_as_data_is_consumed(H2C: Any) -> None:
    peer = Peer(H2C, H2Limits(stream_window=65536, connection_window=1 << 20))
    peer.request(None, end=False)
    sent = 0
    for _ in range(8):
        peer.send(frame(DATA, 0, 1, b"\0" * 16384))
        sent += 16384
    stream_wu = sum(
        struct.unpack(">L", p)[0] for t, _, s, p in peer.frames if t == WINDOW_UPDATE and s == 1
    )
    assert sent - stream_wu <= 32768  # at most half a window unacknowledged
    peer.conn.set_reading(1, False)
    before = len(peer.frames)
    peer.send(frame(DATA, 0, 1, b"\0" * 16384) + frame(DATA, 0, 1, b"\0" * 16384))
    assert not [f for f in peer.frames[before:] if f[0] == WINDOW_UPDATE and f[2] == 1]
    peer.conn.set_reading(1, True)
    assert [f for f in peer.read() if f[0] == WINDOW_UPDATE and f[2] == 1]


def test_outgoing_data_waits_for_the_peers_windows(H2C: Any) -> None:
    peer = Peer(
        H2C, H2Limits(stream_write_buffer=600), client_settings=settings((4, 100), (5, 16384))
    )
    peer.request(grpc_message(b"q"))
    conn = peer.conn
    conn.send_headers(1, HEAD)
    assert conn.send_message(1, b"a" * 1000) is False  # over the 600-byte write buffer
    conn.send_headers(1, TRAILERS, True)
    data = [f for f in peer.read() if f[0] == DATA]
    assert sum(len(f[3]) for f in data) == 100
    assert conn.queued_bytes() == 905
    peer.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", 400)))
    assert peer.handler.events[-1] == ("writable", 1)
    assert conn.queued_bytes() == 505
    # a larger SETTINGS_INITIAL_WINDOW_SIZE opens the stream's window too
    new = peer.send(settings((4, 100000)))
    assert [f for f in new if f[0] == DATA][-1][1] & END_STREAM == 0
    assert new[-1][0] == HEADERS and new[-1][1] & END_STREAM
    assert conn.queued_bytes() == 0 and conn.open_streams() == 0
    body = b"".join(f[3] for f in peer.frames if f[0] == DATA)
    assert body == grpc_message(b"a" * 1000)


def test_connection_window_blocks_every_stream(H2C: Any) -> None:
    peer = Peer(H2C)
    conn = peer.conn
    for _ in range(2):
        sid = peer.request(grpc_message(b"q"))
        conn.send_headers(sid, HEAD)
        conn.send_message(sid, b"x" * 40000)
        conn.send_headers(sid, TRAILERS, True)
    peer.read()
    assert sum(len(f[3]) for f in peer.frames if f[0] == DATA) == 65535
    assert conn.queued_bytes() == 2 * 40005 - 65535
    peer.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 1 << 20)))
    ends = [f for f in peer.frames if f[0] == HEADERS and f[1] & END_STREAM]
    assert len(ends) == 2 and conn.queued_bytes() == 0


def test_reset_and_goaway_from_the_server(H2C: Any) -> None:
    peer = Peer(H2C)
    peer.request(grpc_message(b"q"), end=False)
    peer.conn.reset(1, CANCEL)
    assert peer.rst_codes(1) == [] and peer.read() and peer.rst_codes(1) == [CANCEL]
    peer.send(frame(DATA, 0, 1, grpc_message(b"in flight")))  # ignored after our reset
    assert peer.rst_codes(1) == [CANCEL] and not peer.conn.closed
    peer.request(grpc_message(b"q"))
    peer.conn.goaway()
    peer.read()
    assert peer.goaway_code() == NO_ERROR
    goaway = [p for t, _, _, p in peer.frames if t == GOAWAY][0]
    assert struct.unpack(">L", goaway[:4])[0] == 3
    sid = peer.request(grpc_message(b"late"))
    assert peer.rst_codes(sid) == [REFUSED_STREAM]
    assert peer.handler.kinds().count("request") == 2
    peer.conn.send_response(3, HEAD, b"ok", False, TRAILERS)  # open streams still finish
    assert any(f[0] == HEADERS and f[1] & END_STREAM and f[2] == 3 for f in peer.read())


def test_client_rst_and_goaway_are_events(H2C: Any) -> None:
    peer = Peer(H2C)
    peer.request(None, end=False)
    peer.send(frame(RST_STREAM, 0, 1, struct.pack(">L", CANCEL)))
    peer.send(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, NO_ERROR) + b"bye"))
    assert peer.handler.events[-2:] == [("reset", 1, CANCEL), ("goaway", NO_ERROR, 0)]
    assert peer.conn.open_streams() == 0 and not peer.conn.closed


def test_unknown_frames_and_priority_are_ignored(H2C: Any) -> None:
    peer = Peer(H2C)
    peer.send(frame(0xFA, 0xFF, 0, b"whatever") + frame(PRIORITY, 0, 9, struct.pack(">LB", 1, 1)))
    peer.request(grpc_message(b"q"))
    assert peer.handler.kinds() == ["request", "message", "half_close"]
    assert not peer.conn.closed


# ------------------------------------------------------------------ gRPC framing errors


def test_message_over_the_limit(H2C: Any) -> None:
    peer = Peer(H2C, H2Limits(max_message_size=100))
    peer.request(grpc_message(b"x" * 100))
    peer.request(grpc_message(b"x" * 101) + grpc_message(b"y"))
    assert peer.handler.events[1] == ("message", 1, 0, b"x" * 100)
    assert peer.handler.events[3:] == [
        ("request", 3, REQUEST),
        ("grpc_error", 3, 8, "Received message larger than max (101 vs. 100)"),
    ]


def test_truncated_message_and_bad_flag(H2C: Any) -> None:
    peer = Peer(H2C)
    peer.request(grpc_message(b"abcdef")[:-1])
    peer.request(b"\0\0")
    peer.request(b"\x07" + grpc_message(b"x")[1:])
    errors = [e for e in peer.handler.events if e[0] == "grpc_error"]
    assert [(e[1], e[2]) for e in errors] == [(1, 13), (3, 13), (5, 13)]
    assert "incomplete" in errors[0][3] and "flag" in errors[2][3]


# ------------------------------------------------------------------ connection errors


CONNECTION_ERRORS = {
    "bad preface": (b"GET / HTTP/1.1\r\n\r\n" + b"x" * 10, PROTOCOL_ERROR),
    "data on stream 0": (frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),
    "headers on stream 0": (frame(HEADERS, END_HEADERS, 0, b"\x82"), PROTOCOL_ERROR),
    "data on idle stream": (frame(DATA, 0, 5, b"x"), PROTOCOL_ERROR),
    "rst on idle stream": (frame(RST_STREAM, 0, 5, b"\0\0\0\0"), PROTOCOL_ERROR),
    "rst on stream 0": (frame(RST_STREAM, 0, 0, b"\0\0\0\0"), PROTOCOL_ERROR),
    "rst bad length": (frame(RST_STREAM, 0, 1, b"\0\0\0"), FRAME_SIZE_ERROR),
    "wu on idle stream": (frame(WINDOW_UPDATE, 0, 5, b"\0\0\0\1"), PROTOCOL_ERROR),
    "wu zero on connection": (frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"), PROTOCOL_ERROR),
    "wu bad length": (frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0\1"), FRAME_SIZE_ERROR),
    "wu overflows connection": (
        frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 0x7FFFFFFF)),
        FLOW_CONTROL_ERROR,
    ),
    "ping bad length": (frame(PING, 0, 0, b"1234567"), FRAME_SIZE_ERROR),
    "ping on a stream": (frame(PING, 0, 1, b"12345678"), PROTOCOL_ERROR),
    "settings bad length": (frame(SETTINGS, 0, 0, b"\0\1\0\0\0"), FRAME_SIZE_ERROR),
    "settings ack with payload": (frame(SETTINGS, ACK, 0, b"\0\1\0\0\0\0"), FRAME_SIZE_ERROR),
    "settings on a stream": (frame(SETTINGS, 0, 1, b""), PROTOCOL_ERROR),
    "enable push 2": (settings((2, 2)), PROTOCOL_ERROR),
    "initial window 2^31": (settings((4, 0x80000000)), FLOW_CONTROL_ERROR),
    "max frame size too small": (settings((5, 100)), PROTOCOL_ERROR),
    "max frame size too big": (settings((5, 1 << 24)), PROTOCOL_ERROR),
    "goaway on a stream": (frame(GOAWAY, 0, 1, b"\0" * 8), PROTOCOL_ERROR),
    "goaway too short": (frame(GOAWAY, 0, 0, b"\0" * 4), FRAME_SIZE_ERROR),
    "push promise": (frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2\x82"), PROTOCOL_ERROR),
    "continuation alone": (frame(CONTINUATION, END_HEADERS, 1, b"\x82"), PROTOCOL_ERROR),
    "even stream id": (None, PROTOCOL_ERROR),
    "interleaved header block": (None, PROTOCOL_ERROR),
    "hpack garbage": (
        frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff\xff\xff\x7f"),
        COMPRESSION_ERROR,
    ),
    "frame over max frame size": (frame(DATA, 0, 1, b"x" * 20000), FRAME_SIZE_ERROR),
    "padding too long": (None, PROTOCOL_ERROR),
    "headers on a closed stream": (None, STREAM_CLOSED),
}


@pytest.mark.parametrize("case", sorted(CONNECTION_ERRORS))
def test_connection_errors(H2C: Any, case: str) -> None:
    data, code = CONNECTION_ERRORS[case]
    peer = Peer(H2C, H2Limits(max_frame_size=16384))
    if case == "even stream id":
        data = frame(HEADERS, END_HEADERS, 2, peer.block())
    elif case == "interleaved header block":
        data = frame(HEADERS, 0, 1, peer.block()[:3]) + frame(PING, 0, 0, b"\0" * 8)
    elif case == "padding too long":
        peer.request(None, end=False)
        data = frame(DATA, PADDED, 1, b"\x09abc")
    elif case == "headers on a closed stream":
        peer.request(grpc_message(b"q"))
        peer.conn.send_response(1, HEAD, b"r", False, TRAILERS)
        data = frame(HEADERS, END_HEADERS | END_STREAM, 1, peer.block())
    elif case == "bad preface":
        peer = Peer.__new__(Peer)
        peer.handler = Recorder()
        peer.conn = H2C(peer.handler, None)
        peer.frames = []
    peer.send(data)
    assert peer.goaway_code() == code, peer.frames
    assert peer.conn.closed and peer.conn.error_code == code
    peer.send(PREFACE)  # nothing is parsed after a connection error
    assert peer.read() == []


def test_first_frame_must_be_settings(H2C: Any) -> None:
    rec = Recorder()
    conn = H2C(rec, None)
    conn.receive(PREFACE + frame(PING, 0, 0, b"\0" * 8))
    assert conn.closed and conn.error_code == PROTOCOL_ERROR


# ------------------------------------------------------------------ stream errors


STREAM_ERRORS = {
    "upper-case name": ([(b"X-Up", b"1")], PROTOCOL_ERROR),
    "pseudo after regular": ([(b"x", b"1"), (b":authority", b"a")], PROTOCOL_ERROR),
    "unknown pseudo": ([(b":protocol", b"x")], PROTOCOL_ERROR),
    "response pseudo": ([(b":status", b"200")], PROTOCOL_ERROR),
    "connection header": ([(b"connection", b"keep-alive")], PROTOCOL_ERROR),
    "transfer-encoding": ([(b"transfer-encoding", b"chunked")], PROTOCOL_ERROR),
    "te not trailers": ([(b"te", b"gzip")], PROTOCOL_ERROR),
    "value with newline": ([(b"x", b"a\nb")], PROTOCOL_ERROR),
    "value with leading space": ([(b"x", b" a")], PROTOCOL_ERROR),
}


@pytest.mark.parametrize(
    "case",
    sorted(STREAM_ERRORS)
    + [
        "duplicate path",
        "missing scheme",
        "empty path",
        "content-length mismatch",
        "data after end stream",
        "trailers without end stream",
        "stream window exceeded",
        "wu zero on stream",
        "wu overflows stream",
        "priority bad length",
        "priority on itself",
        "too many streams",
    ],
)
def test_stream_errors_keep_the_connection(H2C: Any, case: str) -> None:
    peer = Peer(H2C, H2Limits(max_concurrent_streams=1, stream_window=1000))
    headers = list(REQUEST)
    body: bytes | None = grpc_message(b"q")
    code = PROTOCOL_ERROR
    more = b""
    if case in STREAM_ERRORS:
        extra, code = STREAM_ERRORS[case]
        headers = (
            [h for h in extra if h[0][:1] == b":"]
            + headers
            + [h for h in extra if h[0][:1] != b":"]
        )
        if case == "pseudo after regular":
            headers = REQUEST + extra
    elif case == "duplicate path":
        headers.insert(1, (b":path", b"/x"))
    elif case == "missing scheme":
        headers = [h for h in headers if h[0] != b":scheme"]
    elif case == "empty path":
        headers = [(k, b"" if k == b":path" else v) for k, v in headers]
    elif case == "content-length mismatch":
        headers.append((b"content-length", b"3"))
    elif case == "data after end stream":
        more, code = frame(DATA, 0, 1, b"late"), STREAM_CLOSED
    elif case == "trailers without end stream":
        body = None
    elif case == "stream window exceeded":
        body, code = None, FLOW_CONTROL_ERROR
        more = frame(DATA, 0, 1, b"x" * 1001)
    elif case == "wu zero on stream":
        body, more = None, frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\0")
    elif case == "wu overflows stream":
        body, code = None, FLOW_CONTROL_ERROR
        more = frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", 0x7FFFFFFF))
    elif case == "priority bad length":
        body, code = None, FRAME_SIZE_ERROR
        more = frame(PRIORITY, 0, 1, b"\0\0\0\0")
    elif case == "priority on itself":
        body = None
        more = frame(PRIORITY, 0, 1, struct.pack(">LB", 1, 1))
    elif case == "too many streams":
        peer.request(None, end=False)
        code = REFUSED_STREAM
    sid = peer.next_sid
    if case == "trailers without end stream" or body is None:
        peer.request(None, headers=headers, end=False)
    else:
        peer.request(body, headers=headers)
    if case == "trailers without end stream":  # encoded after the request: HPACK order
        more = frame(HEADERS, END_HEADERS, 1, peer.block([(b"x", b"1")]))
    peer.send(more)
    assert peer.rst_codes(sid) == [code], peer.frames
    assert not peer.conn.closed
    if case == "too many streams":
        peer.send(frame(RST_STREAM, 0, 1, b"\0\0\0\x08"))
    ok = peer.request(grpc_message(b"fine"))  # the connection still serves
    assert peer.handler.events[-2:] == [("message", ok, 0, b"fine"), ("half_close", ok)]


# ------------------------------------------------------------------ floods


def _flood(peer: Peer, data: bytes, limit: int = 100_000) -> int:
    for i in range(limit):
        peer.send(data)
        if peer.conn.closed:
            return i
    return limit


@pytest.mark.parametrize(
    "kind",
    [
        "ping",
        "settings",
        "empty data",
        "empty continuation",
        "unknown",
        "window update",
        "priority",
    ],
)
def test_control_floods(H2C: Any, kind: str) -> None:
    peer = Peer(H2C)
    if kind in ("empty data", "window update"):
        peer.request(None, end=False)
    data = {
        "ping": frame(PING, 0, 0, b"\0" * 8),
        "settings": settings(),
        "empty data": frame(DATA, 0, 1, b""),
        "empty continuation": frame(CONTINUATION, 0, 3, b""),
        "unknown": frame(0x42, 0, 0, b""),
        "window update": frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\1"),
        "priority": frame(PRIORITY, 0, 1, struct.pack(">LB", 0, 1)),
    }[kind]
    if kind == "empty continuation":
        peer.send(frame(HEADERS, 0, 3, peer.block()[:2]))
    n = _flood(peer, data, 20_000)
    assert peer.goaway_code() == ENHANCE_YOUR_CALM
    assert n < 2000


def test_gRPC_keepalive_pings_are_fine(H2C: Any) -> None:
    peer = Peer(H2C)
    for _ in range(50):
        peer.send(frame(PING, 0, 0, b"\0" * 8))
        peer.request(grpc_message(b"q"))
    assert not peer.conn.closed
    assert sum(1 for f in peer.frames if f[0] == PING and f[1] & ACK) == 50


def test_rapid_reset(H2C: Any) -> None:
    peer = Peer(H2C)
    streams = 0
    while not peer.conn.closed and streams < 10_000:
        sid = peer.request(None, end=False)
        peer.send(frame(RST_STREAM, 0, sid, b"\0\0\0\x08"))
        streams += 1
    assert peer.goaway_code() == ENHANCE_YOUR_CALM
    assert streams < 1000


def test_continuation_flood_is_capped_before_decoding(H2C: Any) -> None:
    peer = Peer(H2C, H2Limits(max_header_list_size=16384))
    peer.send(frame(HEADERS, 0, 1, peer.block()))
    n = _flood(peer, frame(CONTINUATION, 0, 1, b"\x40" * 1000), 1000)
    assert peer.goaway_code() == ENHANCE_YOUR_CALM and n <= 17


def test_hpack_bomb(H2C: Any) -> None:
    """A 4 KiB dynamic entry referenced 100 times: a 100-byte block that decodes to 400 KiB."""
    peer = Peer(H2C, H2Limits(max_header_list_size=65536))
    big = b"\x40\x01a" + _h2_py._int(4000, 7, 0) + b"x" * 4000  # literal with indexing
    peer.send(frame(HEADERS, END_HEADERS, 1, peer.block()[:0] + big + b"\xbe" * 100))
    assert peer.goaway_code() == ENHANCE_YOUR_CALM


def test_memory_bounded_by_a_client_that_never_reads(H2C: Any) -> None:
    """Zero window: the output waits in the stream, writes say 'stop', nothing else grows."""
    peer = Peer(H2C, H2Limits(stream_write_buffer=1 << 16), client_settings=settings((4, 0)))
    peer.request(None, end=False)
    conn = peer.conn
    conn.send_headers(1, HEAD)
    writes = 0
    while conn.send_message(1, b"x" * 4096):
        writes += 1
        assert writes < 100
    assert conn.queued_bytes() < (1 << 16) + 4101
    assert not [f for f in peer.read() if f[0] == DATA]


def test_buffered_partial_messages_hold_back_window_updates(H2C: Any) -> None:
    """Past max_buffered bytes of incomplete messages, a stream's window is refilled only once
    some message completes (a client cannot make the server hold more than that)."""
    peer = Peer(
        H2C,
        H2Limits(
            stream_window=65536,
            connection_window=1 << 20,
            max_message_size=100_000,
            max_buffered=100_000,
        ),
    )
    peer.request(None, end=False)
    peer.request(None, end=False)
    first = grpc_message(b"a" * 100_000)
    for k in range(0, 90_000, 10_000):
        peer.send(frame(DATA, 0, 1, first[k : k + 10_000]))
    peer.send(frame(DATA, 0, 3, grpc_message(b"b" * 100_000)[:40_000]))

    def stream_wu(sid: int) -> int:
        return sum(1 for f in peer.frames if f[0] == WINDOW_UPDATE and f[2] == sid)

    assert stream_wu(3) == 0
    peer.send(frame(DATA, 0, 1, first[90_000:]))
    assert peer.handler.events[-1] == ("message", 1, 0, b"a" * 100_000)
    assert stream_wu(3) == 1

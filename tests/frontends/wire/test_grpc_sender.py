"""The native gRPC front end with a sending thread (``_sender_py``), on both sender twins.

A loaded loop (its ``BusyPoll`` says so) flushes its connections at the end of each turn
(``NativeGrpcServer.flush_at_turn_end``) and hands their small output to the sender. Every
byte still reaches its client once and in order -- frames whole, responses matched to their
streams -- whether the client reads at once, stops reading for a while, pings, leaves at any
point, or the server stops; large output and a loop that is not loaded stay with the loop.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from conftest import wait_until
from test_grpc_native import UNLIMITED, RawClient, Registry
from test_h2_peer import (
    DATA,
    END_STREAM,
    HEADERS,
    PING,
    frame,
    grpc_message,
    settings,
)
from test_sender import LoadedLoop, drained

from tritonlite.frontends.wire.grpc_native import GrpcLimits, start_grpc_native

WINDOW_UPDATE = 0x8
BIG_WINDOW = (1 << 31) - 1


class ServedGrpc(LoadedLoop):
    """A native gRPC server on a loop thread whose loop counts as loaded, with a sender."""

    def __init__(self, sender_twin: str, limits: GrpcLimits | None = None) -> None:
        super().__init__(sender_twin)
        self.registry = Registry()
        self.server = self.lt.run(
            start_grpc_native(self.registry.methods(), "127.0.0.1", 0, limits=limits)
        )
        self.server.busy = self.load
        self.server.sender = self.sender
        self.port = self.server.port
        self.target = f"127.0.0.1:{self.port}"

    def channel(self) -> grpc.Channel:
        """A channel with a connection of its own (grpc shares one between channels to the
        same target otherwise)."""
        return grpc.insecure_channel(
            self.target, options=UNLIMITED + [("grpc.use_local_subchannel_pool", 1)]
        )

    def handed(self) -> int:
        """How many outputs the sender took (the compiled twin counts; the pure one: -1)."""
        if self.twin == "pure":
            return -1
        wait_until(lambda: drained(self.sender), 5)
        queued, sent, _ = self.sender.counts()
        assert queued == sent
        return int(sent)


@pytest.fixture(params=["pure", "compiled"])
def served(request: pytest.FixtureRequest) -> Iterator[ServedGrpc]:
    s = ServedGrpc(str(request.param))
    yield s
    s.close()


def _open_windows(raw: RawClient) -> None:
    """The largest stream windows (SETTINGS) and connection window: only the socket limits
    what the server sends."""
    raw.send(
        settings((4, BIG_WINDOW))
        + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", BIG_WINDOW - 65535))
    )


def _shrink_send_buffers(served: ServedGrpc) -> None:
    """Once the server has taken the connection: its socket's send buffer made small, so that
    the sender's sends fall short as soon as the client stops reading."""

    async def shrink() -> int:
        for proto in served.server._protocols:
            proto.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
            )
        return len(served.server._protocols)

    wait_until(lambda: served.lt.run(shrink()) == 1, 5)


def _data(raw: RawClient, sid: int) -> bytes:
    return b"".join(f[3] for f in raw.frames if f[0] == DATA and f[2] == sid)


def _ended(raw: RawClient, sid: int) -> bool:
    return any(f[0] == HEADERS and f[2] == sid and f[1] & END_STREAM for f in raw.frames)


def test_a_loaded_server_hands_answers_to_the_sender_and_each_arrives(served: ServedGrpc) -> None:
    """Sixteen channels, each with calls in flight from its own thread, 40 rounds: every
    answer is its own request's; the sender took them; the loop writes again without load."""
    channels = [served.channel() for _ in range(16)]
    try:
        echoes = [ch.unary_unary("/test.T/Echo") for ch in channels]

        def client(i: int) -> None:
            for rnd in range(40):
                body = b"c%d-r%d-" % (i, rnd) + b"x" * (i * 97)
                assert echoes[i](body, timeout=10) == body

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(client, range(16)))
        handed = served.handed()
        assert handed == -1 or handed >= 16 * 40
        served.load.is_loaded = False
        served.lt.run(asyncio.sleep(0.01))  # a turn that began loaded has ended
        handed = served.handed()
        assert echoes[0](b"idle", timeout=10) == b"idle"
        assert served.handed() == handed  # the loop wrote it
    finally:
        for ch in channels:
            ch.close()


def test_a_stream_keeps_its_order_through_the_sender(served: ServedGrpc) -> None:
    with served.channel() as ch:
        call = ch.stream_stream("/test.T/Stream")
        sent = [b"m%05d" % k + b"y" * (k % 300) for k in range(3000)]
        assert list(call(iter(sent), timeout=30)) == sent


def test_large_output_stays_with_the_loop_after_what_the_sender_has(served: ServedGrpc) -> None:
    """Small and large answers on one connection in turn: the large ones (over the hand-over
    size) are written by the loop once the sender is done with the connection."""
    with served.channel() as ch:
        echo = ch.unary_unary("/test.T/Echo")
        for k in range(30):
            small = b"s%d" % k
            large = bytes([k]) * 200_000
            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(lambda b: echo(b, timeout=10), [small, large, small, large]))
            assert got == [small, large, small, large]


def test_a_client_that_stops_reading_gets_every_answer_later(served: ServedGrpc) -> None:
    """Hundreds of calls with 12 KB answers and open windows, none read, into a socket whose
    buffers are made small: the sender's sends fall short, it keeps the rest back, the loop
    takes it over (and pauses reading); another client is served meanwhile; when the client
    reads, every answer comes whole, once, its own."""
    n = 600
    raw = RawClient(served.port)
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    _open_windows(raw)

    _shrink_send_buffers(served)
    bodies = {}
    calls = []
    for k in range(n):
        body = b"%06d" % k + b"z" * 12000
        sid, data = _echo_call(raw, body)
        bodies[sid] = body
        calls.append(data)

    def write() -> None:  # one call at a time, so that each turn's output is small
        for data in calls:
            raw.send(data)
            time.sleep(0.0005)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.5)  # the server answers into a socket nobody reads
        with served.channel() as ch:
            echo = ch.unary_unary("/test.T/Echo")
            for k in range(20):  # and serves another client meanwhile
                assert echo(b"other%d" % k, timeout=10) == b"other%d" % k
        last = max(bodies)  # answered in the order asked: the last one's trailers end it
        raw.until(lambda f: f[0] == HEADERS and f[2] == last and f[1] & END_STREAM, timeout=60)
        for sid, body in bodies.items():
            assert _data(raw, sid) == grpc_message(body), sid
            assert _ended(raw, sid)
    finally:
        writer.join(30)
        raw.close()
    assert not writer.is_alive()


def _echo_call(raw: RawClient, body: bytes) -> tuple[int, bytes]:
    """A unary Echo call's frames on ``raw``'s next stream, not sent."""
    return raw.encode_request("/test.T/Echo", grpc_message(body))


@pytest.mark.parametrize("twin", ["pure", "compiled"])
def test_a_client_that_never_reads_is_dropped_with_what_the_sender_kept(twin: str) -> None:
    """Answers into a socket nobody reads, handed to the sender and kept back by it: the loop
    takes them over, its transport fills and pauses, and after the stall timeout the server
    closes the connection -- the thread holds nothing of it -- and serves others."""
    s = ServedGrpc(twin, GrpcLimits(stall_timeout_s=0.5))
    raw = RawClient(s.port)
    try:
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        _open_windows(raw)
        _shrink_send_buffers(s)
        for k in range(200):  # one call at a time: small outputs, each handed over
            if not raw.send(_echo_call(raw, b"%06d" % k + b"n" * 12000)[1]):
                break  # the server closed it: the socket refuses
            time.sleep(0.001)
        wait_until(lambda: not s.server._protocols, 20)  # closed by the stall timeout, released
        with s.channel() as ch:
            assert ch.unary_unary("/test.T/Echo")(b"next", timeout=10) == b"next"
    finally:
        raw.close()
        s.close()


def test_pings_and_answers_interleave_as_whole_frames(served: ServedGrpc) -> None:
    """PINGs (answered by the same flushes) between calls on one connection: every frame the
    client parses is whole, every PING acked with its payload, every call answered."""
    raw = RawClient(served.port)
    try:
        _open_windows(raw)
        sids = []
        wire = b""
        for k in range(300):
            sid, data = _echo_call(raw, b"p%d" % k)
            sids.append(sid)
            wire += data
            if k % 2 == 0:  # under the server's PING flood limit (200 between its own frames)
                wire += frame(PING, 0, 0, struct.pack(">Q", k))
        raw.send(wire)
        raw.until(lambda f: all(_ended(raw, sid) for sid in sids), timeout=30)
        raw.until(lambda f: len([x for x in raw.frames if x[0] == PING]) >= 150, timeout=30)
        acks = [struct.unpack(">Q", f[3])[0] for f in raw.frames if f[0] == PING]
        assert acks == list(range(0, 300, 2))
        for k, sid in enumerate(sids):
            assert _data(raw, sid) == grpc_message(b"p%d" % k)
    finally:
        raw.close()


def test_clients_leaving_at_any_point_leave_the_server_serving(served: ServedGrpc) -> None:
    """Clients close or reset after sending, mid-frame, after part of their answers, while
    the loop hands answers to the sender; another client is served and every connection ends."""
    rng = random.Random(7)
    for rnd in range(30):
        leaving = []
        for _ in range(6):
            raw = RawClient(served.port)
            _open_windows(raw)
            how = rng.randrange(4)
            frames = b"".join(_echo_call(raw, b"g%d" % j + b"q" * 3000)[1] for j in range(8))
            if how == 0:  # sends, leaves at once
                raw.send(frames)
            elif how == 1:  # part of a frame
                raw.send(frames[:40])
            elif how == 2:  # reads one answer of several, leaves
                raw.send(frames)
                raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM, timeout=10)
            else:  # resets
                raw.send(frames)
                raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
            leaving.append(raw)
        with served.channel() as ch:
            for raw in leaving:
                raw.close()
            echo = ch.unary_unary("/test.T/Echo")
            for k in range(5):
                assert echo(b"stay%d-%d" % (rnd, k), timeout=10) == b"stay%d-%d" % (rnd, k)
    wait_until(lambda: not served.server._protocols, 5)


def test_a_graceful_stop_answers_what_the_sender_was_handed(served: ServedGrpc) -> None:
    """Calls in flight on many connections when the server stops: each is answered, and the
    stop returns with nothing cut off."""
    channels = [served.channel() for _ in range(8)]
    try:
        futures = []
        for ch in channels:
            echo = ch.unary_unary("/test.T/Echo")
            futures.extend(echo.future(b"f%d" % k, timeout=10) for k in range(20))
        for i, fut in enumerate(futures):
            assert fut.result() == b"f%d" % (i % 20)
        slow = [ch.unary_unary("/test.T/Slow").future(b"0.3", timeout=10) for ch in channels]
        while served.registry.started.wait(0.01) is False:
            pass
        time.sleep(0.05)
        assert served.lt.run(served.server.stop(5.0)) == 0
        assert [f.result() for f in slow] == [b"done"] * len(slow)
    finally:
        for ch in channels:
            ch.close()


def test_one_trial_decides_for_both_front_ends() -> None:
    """The composition root gives HTTP/1.1 and gRPC the process's sender and one trial (it
    counts the core's requests, whichever protocol brought them); each flag leaves its own
    front end on the loop."""
    from pathlib import Path
    from types import SimpleNamespace

    from tritonlite.frontends.native import NativeFrontends, sending
    from tritonlite.frontends.wire import sender
    from tritonlite.options import ServerOptions

    core: Any = SimpleNamespace(arrivals=lambda: 0)

    def fronts(**flags: bool) -> NativeFrontends:
        out = NativeFrontends()
        out._http = SimpleNamespace(sender=None, send_trial=None)  # type: ignore[assignment]
        out._grpc = SimpleNamespace(sender=None, send_trial=None)  # type: ignore[assignment]
        sending(out, core, ServerOptions((Path("."),), **flags))
        return out

    both = fronts()
    assert both._http.sender is both._grpc.sender is sender.shared()
    assert both._http.send_trial is both._grpc.send_trial is not None
    no_grpc = fronts(grpc_send_thread=False)
    assert no_grpc._grpc.sender is None and no_grpc._http.sender is sender.shared()
    no_http = fronts(http_send_thread=False)
    assert no_http._http.sender is None and no_http._grpc.send_trial is not None
    neither = fronts(http_send_thread=False, grpc_send_thread=False)
    assert neither._http.sender is None and neither._grpc.sender is None

"""gRPC keepalive, ping abuse policy and connection age on the native transport.

The policy alone (``wire.keepalive.Keepalive`` with a recording host), then the real native
server on port 0 on both H2Connection twins, driven by raw HTTP/2 frames and grpc channels.
Timers are tens to hundreds of milliseconds so every test ends within seconds.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_grpc_native import LoopThread, RawClient, Registry, Served, _serve
from test_h2_connection import COMPILED, NOT_BUILT
from test_h2_peer import DATA, END_STREAM, GOAWAY, HEADERS, PING, frame, grpc_message

from tritonlite.frontends.wire import _h2_py, grpc_native
from tritonlite.frontends.wire.detect import Detect
from tritonlite.frontends.wire.grpc_native import GrpcLimits, GrpcProtocol
from tritonlite.frontends.wire.keepalive import Keepalive, KeepaliveSettings, keepalive_settings
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ the policy alone


class Host:
    def __init__(self, streams: int = 0) -> None:
        self.streams = streams
        self.pings: list[bytes] = []
        self.goaways: list[bytes] = []
        self.closed: list[tuple[int, bytes, str]] = []

    def keepalive_ping(self, opaque: bytes) -> None:
        self.pings.append(opaque)

    def keepalive_streams(self) -> int:
        return self.streams

    def keepalive_goaway(self, debug: bytes) -> None:
        self.goaways.append(debug)

    def keepalive_close(self, code: int, debug: bytes, message: str) -> None:
        self.closed.append((code, debug, message))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _policy(loop: asyncio.AbstractEventLoop, host: Host, **kw: Any) -> Keepalive:
    return Keepalive(KeepaliveSettings(**kw), host, loop)


def test_pings_too_soon_with_a_call_open_are_strikes(loop: asyncio.AbstractEventLoop) -> None:
    host = Host(streams=1)
    ka = _policy(loop, host, min_recv_ping_interval_ms=60_000, max_ping_strikes=2)
    assert ka.ping_received() is False  # the first one is on time
    assert ka.ping_received() is False and ka.strikes == 1
    assert ka.ping_received() is False and ka.strikes == 2
    assert ka.ping_received() is True  # a third strike is one more than allowed
    ka.stop()


def test_data_sent_forgives_strikes(loop: asyncio.AbstractEventLoop) -> None:
    ka = _policy(loop, Host(streams=1), min_recv_ping_interval_ms=60_000, max_ping_strikes=1)
    for _ in range(10):
        assert ka.ping_received() is False
        assert ka.ping_received() is False  # one strike
        ka.sent_headers_or_data()
        assert ka.strikes == 0
    ka.stop()


def test_without_calls_any_second_ping_is_a_strike(loop: asyncio.AbstractEventLoop) -> None:
    """No stream and permit_without_calls off: grpc-core expects two hours between PINGs,
    whatever min_recv_ping_interval_without_data says."""
    ka = _policy(loop, Host(streams=0), min_recv_ping_interval_ms=0, max_ping_strikes=1)
    assert [ka.ping_received() for _ in range(3)] == [False, False, True]
    ka.stop()
    permitted = _policy(
        loop, Host(streams=0), min_recv_ping_interval_ms=0, permit_without_calls=True
    )
    assert not any(permitted.ping_received() for _ in range(100))
    permitted.stop()


def test_zero_strikes_means_no_limit(loop: asyncio.AbstractEventLoop) -> None:
    ka = _policy(loop, Host(streams=0), max_ping_strikes=0)
    assert not any(ka.ping_received() for _ in range(1000))
    assert ka.strikes == 999
    ka.stop()


def test_settings_from_the_server_options_are_grpc_cores_defaults() -> None:
    s = keepalive_settings(ServerOptions(model_repositories=(Path("."),)))
    assert (s.time_ms, s.timeout_ms, s.permit_without_calls) == (7_200_000, 20_000, False)
    assert (s.max_pings_without_data, s.min_recv_ping_interval_ms, s.max_ping_strikes) == (
        2,
        300_000,
        2,
    )
    assert s.max_age_ms is None and s.max_age_grace_ms is None


def test_age_is_jittered_ten_percent_either_way(loop: asyncio.AbstractEventLoop) -> None:
    for draw, spread in ((0.0, 0.9), (0.5, 1.0), (1.0, 1.1)):
        ka = Keepalive(KeepaliveSettings(max_age_ms=10_000), Host(), loop, jitter=lambda d=draw: d)
        assert ka._age_timer is not None
        assert ka._age_timer.when() - loop.time() == pytest.approx(10.0 * spread, abs=0.05)
        ka.stop()


# ------------------------------------------------------------------ the native server


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(grpc_native, "H2Connection", _h2_py.H2Connection)
    elif COMPILED is None:
        pytest.skip(NOT_BUILT)
    else:
        monkeypatch.setattr(grpc_native, "H2Connection", COMPILED.H2Connection)
    return str(request.param)


def _limits(**kw: Any) -> GrpcLimits:
    return GrpcLimits(keepalive=KeepaliveSettings(**kw))


def _goaway(raw: RawClient) -> tuple[int, int, bytes]:
    """(last stream id, code, debug data) of the first GOAWAY received."""
    for t, _, _, p in raw.frames:
        if t == GOAWAY:
            last, code = struct.unpack(">LL", p[:8])
            return last & 0x7FFFFFFF, code, p[8:]
    raise AssertionError(f"no GOAWAY in {[f[:3] for f in raw.frames]}")


def _closed(raw: RawClient, timeout: float = 5.0) -> bool:
    """Whether the server closes the socket within ``timeout`` (frames read meanwhile)."""
    try:
        raw.until(lambda f: False, timeout=timeout)
    except TimeoutError:
        return False
    return True


def _ping_acks(raw: RawClient) -> int:
    return sum(1 for t, fl, _, _ in raw.frames if t == PING and fl & 1)


def _server_pings(raw: RawClient) -> list[bytes]:
    return [p for t, fl, _, p in raw.frames if t == PING and not fl & 1]


def _still_serves(served: Served) -> None:
    with served.channel() as ch:
        assert ch.unary_unary("/test.T/Echo")(b"next", timeout=10) == b"next"


def test_a_client_that_pings_too_often_gets_too_many_pings(twin: str) -> None:
    with _serve(_limits(min_recv_ping_interval_ms=10_000, max_ping_strikes=2)) as served:
        raw = RawClient(served.port)
        for i in range(4):
            raw.send(frame(PING, 0, 0, b"%08d" % i))
        raw.until(lambda f: f[0] == GOAWAY)
        _, code, debug = _goaway(raw)
        assert (code, debug) == (0xB, b"too_many_pings")  # ENHANCE_YOUR_CALM
        assert _ping_acks(raw) >= 3  # answered until the strike that ended it
        assert _closed(raw)
        raw.close()
        _still_serves(served)


def test_pings_between_responses_are_fine(twin: str) -> None:
    """Every response the server sends forgives the strikes, as in grpc-core."""
    with _serve(_limits(min_recv_ping_interval_ms=10_000, max_ping_strikes=1)) as served:
        raw = RawClient(served.port)
        for i in range(10):
            raw.send(frame(PING, 0, 0, b"%08d" % i))
            sid = raw.request("/test.T/Echo", grpc_message(b"x"))
            raw.until(lambda f, sid=sid: f[0] == HEADERS and f[2] == sid and f[1] & END_STREAM)
        raw.send(frame(PING, 0, 0, b"lastping"))
        raw.until(lambda f: f[0] == PING and f[3] == b"lastping")
        assert raw.goaway_code() is None
        raw.close()


def test_a_silent_client_is_pinged_then_dropped(twin: str) -> None:
    with _serve(_limits(time_ms=100, timeout_ms=300, permit_without_calls=True)) as served:
        raw = RawClient(served.port)
        start = time.monotonic()
        raw.until(lambda f: f[0] == PING and not f[1] & 1)
        pinged = time.monotonic() - start
        assert _closed(raw)  # no ACK: GOAWAY and close after the timeout
        closed = time.monotonic() - start
        assert 0.09 <= pinged < 2.0 and closed - pinged >= 0.25, (pinged, closed)
        assert _goaway(raw)[1] == 0x7  # grpc-core's UNAVAILABLE as a GOAWAY code
        assert len(_server_pings(raw)) == 1
        raw.close()
        _still_serves(served)


def test_a_client_that_acks_stays_connected(twin: str) -> None:
    with _serve(_limits(time_ms=60, timeout_ms=2000, permit_without_calls=True,
                        max_pings_without_data=0)) as served:  # fmt: skip
        raw = RawClient(served.port)
        acked = 0
        while acked < 5:
            raw.until(lambda f, n=acked: len(_server_pings(raw)) > n)
            raw.send(frame(PING, 1, 0, _server_pings(raw)[acked]))
            acked += 1
        assert raw.goaway_code() is None
        sid = raw.request("/test.T/Echo", grpc_message(b"alive"))
        raw.until(lambda f: f[0] == DATA and f[2] == sid)
        raw.close()


def test_no_pings_without_calls_unless_permitted(twin: str) -> None:
    with _serve(_limits(time_ms=50, timeout_ms=100)) as served:
        raw = RawClient(served.port)
        assert not _closed(raw, timeout=0.5)
        assert _server_pings(raw) == [] and raw.goaway_code() is None
        # a call open: now it pings (and, with no ACK, drops the connection)
        raw.request("/test.T/Slow", grpc_message(b"30"))
        raw.until(lambda f: f[0] == PING and not f[1] & 1)
        assert _closed(raw)
        raw.close()


def test_max_pings_without_data(twin: str) -> None:
    """Two PINGs, then none until the server sends headers or data again."""
    limits = _limits(time_ms=30, timeout_ms=5000, permit_without_calls=True)
    with _serve(limits) as served:
        raw = RawClient(served.port)
        for n in (1, 2):
            raw.until(lambda f, n=n: len(_server_pings(raw)) >= n)
            raw.send(frame(PING, 1, 0, _server_pings(raw)[-1]))
        assert not _closed(raw, timeout=0.4)
        assert len(_server_pings(raw)) == 2
        sid = raw.request("/test.T/Echo", grpc_message(b"data"))
        raw.until(lambda f: f[0] == DATA and f[2] == sid)
        raw.until(lambda f: len(_server_pings(raw)) >= 3)
        raw.close()


def test_defaults_send_no_ping_and_no_goaway(twin: str) -> None:
    with _serve(GrpcLimits(keepalive=KeepaliveSettings())) as served:
        raw = RawClient(served.port)
        raw.request("/test.T/Slow", grpc_message(b"0.6"))
        frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
        assert not [f for f in frames if f[0] in (PING, GOAWAY)]
        raw.send(frame(PING, 0, 0, b"12345678"))  # one client PING is no strike
        raw.until(lambda f: f[0] == PING and f[1] & 1)
        assert raw.goaway_code() is None
        raw.close()


def test_max_connection_age_sends_goaway_and_clients_reconnect(twin: str) -> None:
    with _serve(_limits(max_age_ms=300)) as served:
        raw = RawClient(served.port)
        sid = raw.request("/test.T/Echo", grpc_message(b"one"))
        raw.until(lambda f: f[0] == GOAWAY, timeout=5)
        assert _goaway(raw) == (sid, 0, b"max_age")
        assert _closed(raw)  # no call open: it closes after the GOAWAY
        raw.close()
        # a real client keeps calling across several ages: every call succeeds
        with served.channel() as ch:
            echo = ch.unary_unary("/test.T/Echo")
            # at least 10 calls over at least five ages (0.3 s each), however slow the machine
            spans_ages = time.monotonic() + 1.5
            n = 0
            while n < 10 or time.monotonic() < spans_ages:
                assert echo(b"%d" % n, timeout=10) == b"%d" % n
                n += 1


def test_a_request_that_crosses_the_age_goaway_is_refused_not_reset(twin: str) -> None:
    """A client may send a request before the server's GOAWAY reaches it. The server then
    refuses it (REFUSED_STREAM: clients retry it on a new connection) and waits for the client
    to close; closing at once, with the request unread, would reset the connection and
    discard the GOAWAY in the client's socket (CI saw such a reset fail the test above)."""
    with _serve(_limits(max_age_ms=300)) as served:
        raw = RawClient(served.port)
        raw.request("/test.T/Echo", grpc_message(b"one"))
        raw.until(lambda f: f[0] == GOAWAY, timeout=5)
        time.sleep(0.05)  # the server has long finished the first call
        sid = raw.request("/test.T/Echo", grpc_message(b"two"))
        got = raw.until(lambda f: f[0] == _h2_py.RST_STREAM and f[2] == sid, timeout=5)
        assert got[-1][0] == _h2_py.RST_STREAM and got[-1][2] == sid, [f[:3] for f in got]
        assert struct.unpack(">L", got[-1][3])[0] == _h2_py.REFUSED_STREAM
        start = time.monotonic()
        assert _closed(raw)  # a client that does not close is closed a while later
        assert time.monotonic() - start < 3
        raw.close()
        _still_serves(served)


def test_max_connection_age_grace_ends_open_calls(twin: str) -> None:
    with _serve(_limits(max_age_ms=200, max_age_grace_ms=300)) as served:
        with served.channel() as ch:
            slow = ch.unary_unary("/test.T/Slow")
            start = time.monotonic()
            with pytest.raises(grpc.RpcError) as err:
                slow(b"30", timeout=20)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert time.monotonic() - start < 5
            assert served.registry.cancelled.wait(5)
        _still_serves(served)


def test_max_connection_age_lets_open_calls_finish_without_grace(twin: str) -> None:
    with _serve(_limits(max_age_ms=100)) as served:
        with served.channel() as ch:
            assert ch.unary_unary("/test.T/Slow")(b"0.5", timeout=10) == b"done"


def test_keepalive_behind_the_one_port_detector(twin: str) -> None:
    """The detector makes the GrpcProtocol and feeds it the bytes it read: the policy holds
    there too (a client that pings too often on a shared port)."""
    lt = LoopThread()
    registry = Registry()
    limits = _limits(min_recv_ping_interval_ms=10_000, max_ping_strikes=1)

    async def start() -> asyncio.base_events.Server:
        return await asyncio.get_running_loop().create_server(
            lambda: Detect(asyncio.Protocol, lambda: GrpcProtocol(registry.methods(), limits)),
            "127.0.0.1",
            0,
        )

    server = lt.run(start())
    try:
        raw = RawClient(server.sockets[0].getsockname()[1])
        raw.send(b"".join(frame(PING, 0, 0, b"%08d" % i) for i in range(3)))
        raw.until(lambda f: f[0] == GOAWAY)
        assert _goaway(raw)[1:] == (0xB, b"too_many_pings")
        assert _closed(raw)
        raw.close()
    finally:
        server.close()
        lt.run(server.wait_closed())
        lt.close()


def test_a_client_that_sends_but_never_acks_is_dropped_at_the_ping_timeout(twin: str) -> None:
    """Bytes received keep the keepalive watchdog quiet (as in grpc-core), but the PING still
    waits for its ACK: past ping_timeout the connection ends with "ping_timeout"."""
    limits = _limits(
        time_ms=50,
        timeout_ms=100,
        permit_without_calls=True,
        min_recv_ping_interval_ms=0,
        max_ping_strikes=0,
        ping_timeout_ms=600,
    )
    with _serve(limits) as served:
        raw = RawClient(served.port)
        raw.until(lambda f: f[0] == PING and not f[1] & 1)
        start = time.monotonic()
        while raw.goaway_code() is None and time.monotonic() - start < 5:
            raw.send(frame(PING, 0, 0, b"chatting"))  # bytes, but never the ACK
            try:
                raw.until(lambda f: f[0] == GOAWAY, timeout=0.05)
            except TimeoutError:
                pass
        assert _goaway(raw)[1:] == (0xB, b"ping_timeout")
        assert time.monotonic() - start >= 0.4
        assert len(_server_pings(raw)) == 1  # the next PING waits for the ACK
        raw.close()

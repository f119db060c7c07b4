"""Bounded decompression (``wire/inflate.py``) and the transports that use it: compressed gRPC
messages (real ``grpc`` channels and raw HTTP/2) and ``Content-Encoding`` request bodies (raw
sockets on both ``Http1Protocol`` twins). A decompression bomb is refused at its limit, costs no
more than the limit, never holds the loop for the whole message, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from collections.abc import Callable, Iterator

import grpc
import pytest
from test_grpc_native import RawClient, Served, _serve, _status, use_h2_twin
from test_h2_peer import END_STREAM, HEADERS, RST_STREAM, frame, grpc_message
from test_http1 import _json, _post, handler, twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.wire.grpc_native import GrpcLimits
from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native
from tritonlite.frontends.wire.inflate import (
    GZIP,
    OUT_SLICE,
    RAW_DEFLATE,
    ZLIB,
    InflateError,
    Inflater,
    Inflation,
    TooLarge,
    content_wbits,
)

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20


def bomb(size: int, wbits: int = GZIP, prefix: bytes = b"") -> bytes:
    """``prefix`` then ``size`` zero bytes, compressed without holding them in memory."""
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    parts = [c.compress(prefix)]
    zeros = bytes(MiB)
    left = size
    while left > 0:
        parts.append(c.compress(zeros[: min(left, MiB)]))
        left -= MiB
    parts.append(c.flush())
    return b"".join(parts)


def run_all(job: Inflation, budget_ns: int = 0) -> tuple[bytes, int]:
    steps = 1
    while not job.step(budget_ns):
        steps += 1
    return job.result(), steps


# ------------------------------------------------------------------ Inflation


@pytest.mark.parametrize("wbits", [GZIP, ZLIB, RAW_DEFLATE])
def test_round_trip_in_bounded_slices(wbits: int) -> None:
    data = bytes(range(256)) * 4096 + bytes(3 * MiB)  # 1 MiB of pattern, 3 MiB of zeros
    c = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = c.compress(data) + c.flush()
    out, steps = run_all(Inflation(wbits, packed, len(data)))
    assert out == data
    # one slice a step with no time budget: the message took as many steps as slices
    assert steps >= len(data) // OUT_SLICE


def test_the_limit_is_exact_and_a_bomb_stops_there() -> None:
    assert run_all(Inflation(GZIP, gzip.compress(b"x" * 1000), 1000))[0] == b"x" * 1000
    with pytest.raises(TooLarge):
        run_all(Inflation(GZIP, gzip.compress(b"x" * 1000), 999))
    job = Inflation(GZIP, bomb(64 * MiB), 2 * MiB)
    steps = 0
    with pytest.raises(TooLarge) as too_large:
        while not job.step(0):
            steps += 1
    assert too_large.value.limit == 2 * MiB
    # refused after producing about the limit, not the 64 MiB the bomb holds
    assert steps <= 2 * MiB // OUT_SLICE + 1


@pytest.mark.parametrize(
    "data",
    [gzip.compress(b"abc" * 1000)[:-12], b"not compressed at all", b""],
    ids=["truncated", "corrupt", "empty"],
)
def test_corrupt_and_truncated_messages_are_errors(data: bytes) -> None:
    with pytest.raises(InflateError) as err:
        run_all(Inflation(GZIP, data, MiB), budget_ns=10**9)
    assert not isinstance(err.value, TooLarge)


def test_content_encodings() -> None:
    assert content_wbits("GZIP ", 0x1F) == GZIP
    assert content_wbits("deflate", zlib.compress(b"x")[0]) == ZLIB
    assert content_wbits("deflate", 0x4B) == RAW_DEFLATE  # raw deflate: no zlib header
    assert content_wbits("br", 0) is None
    assert content_wbits("identity", 0) is None


# ------------------------------------------------------------------ Inflater


def test_the_loop_runs_between_bursts_of_one_message() -> None:
    async def go() -> tuple[int, bytes]:
        ticks = 0
        stop = False

        def tick() -> None:
            nonlocal ticks
            ticks += 1
            if not stop:
                asyncio.get_running_loop().call_soon(tick)

        asyncio.get_running_loop().call_soon(tick)
        out = await Inflater(burst_ns=0).inflate(GZIP, bomb(8 * MiB), 8 * MiB)
        stop = True
        return ticks, out

    ticks, out = asyncio.run(go())
    assert out == bytes(8 * MiB)
    assert ticks >= 8 * MiB // OUT_SLICE - 2  # other callbacks ran between the slices


def test_at_most_concurrent_inflations_run_past_their_first_burst() -> None:
    started: set[int] = set()
    finished: set[int] = set()
    most = 0

    class Counted(Inflation):
        __slots__ = ("steps",)

        def step(self, budget_ns: int = 0) -> bool:
            nonlocal most
            self.steps = getattr(self, "steps", 0) + 1
            if self.steps == 2:
                started.add(id(self))
            done = super().step(budget_ns)
            if done:
                finished.add(id(self))
            most = max(most, len(started - finished))
            return done

    async def go() -> list[bytes]:
        gate = Inflater(concurrent=2, burst_ns=0)
        jobs = [Counted(GZIP, bomb(2 * MiB), 2 * MiB) for _ in range(6)]
        for job in jobs:
            assert not job.step(0)
        return await asyncio.gather(*(gate.finish(job) for job in jobs))

    outs = asyncio.run(go())
    assert all(out == bytes(2 * MiB) for out in outs)
    assert most == 2


def test_a_cancelled_inflation_gives_its_turn_back() -> None:
    async def go() -> bytes:
        gate = Inflater(concurrent=1, burst_ns=0)
        first = asyncio.ensure_future(gate.inflate(GZIP, bomb(16 * MiB), 16 * MiB))
        for _ in range(3):
            await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await asyncio.wait_for(gate.inflate(GZIP, bomb(MiB), MiB), 30)

    assert asyncio.run(go()) == bytes(MiB)


# ------------------------------------------------------------------ gRPC


@pytest.fixture(params=["pure", "compiled"])
def h2_twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started by the test run on this H2Connection twin."""
    use_h2_twin(request.param, monkeypatch)


def _slow_gate(served: Served, concurrent: int = 2) -> None:
    """Every message that needs more than one slice goes through the shared gate."""
    served.server.inflater = Inflater(concurrent=concurrent, burst_ns=0)


@pytest.mark.usefixtures("h2_twin")
def test_grpc_bomb_is_resource_exhausted_while_others_are_served() -> None:
    limits = GrpcLimits(max_decompressed_size=4 * MiB)
    with _serve(limits) as served, served.channel() as ch:
        _slow_gate(served)
        raw = RawClient(served.port)
        payload = grpc_message(bomb(256 * MiB), compressed=1)
        sid = raw.request("/test.T/Echo", payload, extra=[(b"grpc-encoding", b"gzip")])
        echo = ch.unary_unary("/test.T/Echo")
        assert echo(b"meanwhile", timeout=10) == b"meanwhile"
        code, message = _status(raw, sid)
        assert code == b"8"
        assert message.startswith(b"Received message larger than max (more than 4194304 bytes")
        # the same connection keeps serving, compressed messages included
        fine = zlib.compress(b"fine " * 1000)
        sid = raw.request(
            "/test.T/Echo", grpc_message(fine, compressed=1), extra=[(b"grpc-encoding", b"deflate")]
        )
        assert _status(raw, sid) == (b"0", b"")
        raw.close()


@pytest.mark.usefixtures("h2_twin")
def test_grpc_large_compressed_messages_arrive_whole_and_in_order() -> None:
    big = bytes(range(256)) * (12 * 4096)  # 12 MiB: many slices
    with _serve() as served:
        _slow_gate(served)
        with served.channel(compression=grpc.Compression.Gzip) as ch:
            assert ch.unary_unary("/test.T/Echo")(big, timeout=30) == big
            stream = ch.stream_stream("/test.T/Stream")
            sent = [big[: (i + 1) * MiB] if i % 2 else b"small %d" % i for i in range(6)]
            replies = list(stream(iter(sent), timeout=60))
    assert replies == sent


@pytest.mark.usefixtures("h2_twin")
@pytest.mark.parametrize("turns", [0, 1, 2, 5, 20])
def test_grpc_reset_while_inflating_leaves_nothing_behind(turns: int) -> None:
    """The client resets the stream at each stage of its message's inflation (before its
    first burst ends, waiting for a turn, between bursts): the turn is given back."""
    with _serve(GrpcLimits(max_decompressed_size=64 * MiB)) as served:
        _slow_gate(served, concurrent=1)
        raw = RawClient(served.port)
        packed = grpc_message(bomb(48 * MiB), compressed=1)
        sid = raw.request("/test.T/Echo", packed, extra=[(b"grpc-encoding", b"gzip")])
        for _ in range(turns):  # let the server's loop turn between the message and the reset
            served.lt.run(asyncio.sleep(0))
        raw.send(frame(RST_STREAM, 0, sid, (8).to_bytes(4, "big")))
        # a message of many slices again (Meta answers small: no flow control needed here)
        after = grpc_message(gzip.compress(b"after " * 100_000), compressed=1)
        sid = raw.request("/test.T/Meta", after, extra=[(b"grpc-encoding", b"gzip")])
        frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM and f[2] == sid, 60)
        assert dict(raw.headers(frames[-1]))[b"grpc-status"] == b"0"
        raw.close()


# ------------------------------------------------------------------ HTTP/1.1

Serve = Callable[[int], NativeHttpServer]


@pytest.fixture(params=["pure", "compiled"])
def serve(request: pytest.FixtureRequest) -> Iterator[Serve]:
    """``serve(max_body)``: a server on the Http1Protocol twin under test, whose inflater
    sends every message that needs more than one slice through the shared gate."""
    twin = twin_class(request.param)
    lt = LoopThread()
    started: list[NativeHttpServer] = []

    def start(max_body: int) -> NativeHttpServer:
        server = lt.run(
            start_http_native(
                handler, "127.0.0.1", 0, limits=HttpLimits(max_body=max_body), protocol_class=twin
            )
        )
        server.service.inflater = Inflater(burst_ns=0)
        started.append(server)
        return server

    yield start
    for s in started:
        lt.run(s.stop(1.0))
    lt.close()


def test_http_bomb_is_413_and_the_loop_keeps_serving(serve: Serve) -> None:
    server = serve(4 * MiB)
    answers: list[int] = []

    def probe() -> None:
        with Conn(server.port) as c:
            c.send(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n")
            answers.append(c.response().status)

    with Conn(server.port, timeout=60) as c:
        c.send(_post("/z", bomb(512 * MiB), b"Content-Encoding: gzip\r\n"))
        t = threading.Thread(target=probe)
        t.start()
        r = c.response()
        t.join(30)
    assert r.status == 413 and "4194304 byte limit" in _json(r)["error"]
    assert answers == [200]


def test_http_large_compressed_body_arrives_whole(serve: Serve) -> None:
    server = serve(32 * MiB)
    body = b"".join(b"%08d" % i for i in range(2 * MiB // 8))
    with Conn(server.port, timeout=60) as c:
        c.send(_post("/z", gzip.compress(body), b"Content-Encoding: gzip\r\n"))
        doc = _json(c.response())
    assert doc["length"] == len(body) and doc["body"] == body[:64].decode()

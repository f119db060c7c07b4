"""The shared port's protocol detection over real loopback sockets (plain and TLS/ALPN)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
import uvloop
from support.certs import make_certs

from tritonlite.frontends.tls import server_context
from tritonlite.frontends.wire.detect import DETECT_TIMEOUT_S, PREFACE, Detect, DetectPool

pytestmark = pytest.mark.timeout(60)

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """The same test body on both loops (uvloop's transports are no asyncio.Transport)."""
    return asyncio.run if request.param == "asyncio" else uvloop.run  # type: ignore[no-any-return]


class Tag(asyncio.Protocol):
    """Answers its tag and the bytes it got first (so a test sees nothing was lost)."""

    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.got = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.got += data
        if self.got.endswith(b"\n") or self.got.endswith(PREFACE):
            self.transport.write(self.tag + b":" + self.got)
            self.transport.close()


async def _serve(
    ctx: ssl.SSLContext | None = None, timeout: float = 30.0
) -> tuple[asyncio.Server, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Detect(lambda: Tag(b"h1"), lambda: Tag(b"h2"), timeout), "127.0.0.1", 0, ssl=ctx
    )
    return server, server.sockets[0].getsockname()[1]


async def _talk(port: int, chunks: list[bytes], ctx: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    for c in chunks:
        writer.write(c)
        await writer.drain()
        await asyncio.sleep(0.01)
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


@pytest.mark.parametrize(
    "chunks,expected",
    [
        ([b"GET / HTTP/1.1\r\n\r\n\n"], b"h1:GET / HTTP/1.1\r\n\r\n\n"),
        ([b"P", b"OST /v2 HTTP/1.1\n"], b"h1:POST /v2 HTTP/1.1\n"),  # leaves the preface late
        ([b"PRI * HTTP/1.1\n"], b"h1:PRI * HTTP/1.1\n"),
        ([PREFACE], b"h2:" + PREFACE),
        ([PREFACE[:3], PREFACE[3:10], PREFACE[10:]], b"h2:" + PREFACE),  # split anywhere
    ],
)
def test_first_bytes_decide(run: Runner, chunks: list[bytes], expected: bytes) -> None:
    async def main() -> bytes:
        server, port = await _serve()
        try:
            return await _talk(port, chunks)
        finally:
            server.close()

    assert run(main()) == expected


def test_silent_client_is_dropped(run: Runner) -> None:
    async def main() -> bytes:
        server, port = await _serve(timeout=0.2)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return data
        finally:
            server.close()

    assert run(main()) == b""


@pytest.mark.parametrize(
    "alpn,payload,expected",
    [
        (["h2"], b"anything\n", b"h2:anything\n"),
        (["http/1.1"], PREFACE, b"h1:" + PREFACE),  # ALPN wins over the bytes
        ([], PREFACE, b"h2:" + PREFACE),  # no ALPN: the bytes decide, as in plain TCP
        ([], b"GET / HTTP/1.1\n", b"h1:GET / HTTP/1.1\n"),
    ],
)
def test_tls_alpn(
    run: Runner, tmp_path: Path, alpn: list[str], payload: bytes, expected: bytes
) -> None:
    certs = make_certs(tmp_path)
    sctx = server_context(certs["server.pem"], certs["server.key"], alpn=("h2", "http/1.1"))
    cctx = ssl.create_default_context(cafile=certs["ca.pem"])
    if alpn:
        cctx.set_alpn_protocols(alpn)

    async def main() -> bytes:
        server, port = await _serve(sctx)
        try:
            return await _talk(port, [payload], cctx)
        finally:
            server.close()

    assert run(main()) == expected


def test_close_before_a_byte(run: Runner) -> None:
    async def main() -> None:
        server, port = await _serve()
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.close()
            # the listener still serves the next client
            assert await _talk(port, [b"x\n"]) == b"h1:x\n"
        finally:
            server.close()

    run(main())


def test_the_pool_counts_from_accept_and_the_oldest_make_room(run: Runner) -> None:
    """20 connections that send part of the preface and then nothing, against a cap of 8:
    the oldest are closed, the newest 8 stay, and a new client is still told apart and
    served."""

    async def main() -> None:
        pool = DetectPool(8)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Detect(lambda: Tag(b"h1"), lambda: Tag(b"h2"), pool=pool), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        conns = []
        try:
            for _ in range(20):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(PREFACE[:10])
                conns.append((reader, writer))
            for _ in range(1000):  # until the server has accepted all 20
                if pool.evicted == 12:
                    break
                await asyncio.sleep(0.01)
            assert pool.evicted == 12 and len(pool.detecting) == 8
            for reader, _ in conns[:12]:
                assert await asyncio.wait_for(reader.read(), 10) == b""
            assert await _talk(port, [PREFACE]) == b"h2:" + PREFACE
            assert pool.evicted == 13 and len(pool.detecting) == 7  # it left the pool
        finally:
            for _, writer in conns:
                writer.close()
            server.close()

    run(main())


def test_the_pool_gives_detection_a_timeout_of_its_own() -> None:
    pool = DetectPool(4, timeout_s=0.25)
    assert Detect(lambda: Tag(b"h1"), lambda: Tag(b"h2"), pool=pool)._timeout == 0.25
    assert Detect(lambda: Tag(b"h1"), lambda: Tag(b"h2"))._timeout == DETECT_TIMEOUT_S
    handed_over = 0
    pool = DetectPool(1000, lambda: handed_over)
    assert pool.room() == 1000
    handed_over = 900
    assert pool.room() == 100
    handed_over = 990  # at the cap: room for a burst all the same
    assert pool.room() == 64
    assert DetectPool(8, lambda: 6).room() == 8


def test_the_pool_makes_room_within_one_loop_turn() -> None:
    """Evicted connections leave the pool at once: their connection_lost comes later, and
    a burst accepted in one loop turn must not grow the pool past its room meanwhile."""
    pool = DetectPool(4)
    conns = [Detect(lambda: Tag(b"h1"), lambda: Tag(b"h2"), pool=pool) for _ in range(10)]
    for c in conns:
        pool.admit(c)
    assert list(pool.detecting) == conns[6:] and pool.evicted == 6

"""A large infer body read straight into its block: once a read leaves it incomplete, the
connection's transport reads the rest of it into the block (``_BodyReader`` is its protocol
meanwhile) and llhttp starts afresh at the message boundary after it. On both twins of
``Http1Protocol``, on uvloop and on asyncio's own loop, and over TLS; through the states a
connection can be in while the body arrives (the client leaving, half-closing, too slow; a
100-continue; a response the client is not reading yet).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from conftest import wait_until
from support.certs import make_certs
from test_http1 import twin_class
from test_http1_release import Reader, _answer, _head, _serving
from test_http1_support import Conn, LoopThread, tls_conn

from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.tls import server_context
from tritonlite.frontends.wire import http1
from tritonlite.frontends.wire.detect import Detect
from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native

pytestmark = pytest.mark.timeout(60)

BIG = 300_000  # over the 64 KiB from which an infer body takes a block
INFER = "/v2/models/m/infer"


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
def loop_thread(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    new_loop = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop
    lt = LoopThread(new_loop)
    yield lt
    lt.close()


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> Any:
    return twin_class(request.param)


@pytest.fixture()
def reading(loop_thread: LoopThread, twin: Any) -> Iterator[tuple[NativeHttpServer, Reader]]:
    reader = Reader()
    with _serving(loop_thread, twin, reader) as server:
        yield server, reader


def _reading_body(server: Any) -> bool:
    """Whether the one open connection's transport reads a body into its block now."""
    protos = list(server.service.connections)
    if len(protos) != 1 or protos[0]._transport is None:
        return False
    return type(protos[0]._transport.get_protocol()).__name__ == "_BodyReader"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _exchange(c: Conn, server: Any, n: int) -> None:
    """A large infer body whose rest is read into its block, with the next request's head
    right behind it and split: both answered, the first from its block."""
    body = os.urandom(n)
    c.send(_head(INFER, n) + body[:1000])
    wait_until(lambda: _reading_body(server), 5)
    after = _head("/v2/models/m/versions/2/infer", 5) + b"hello"
    c.send(body[1000:] + after[:20])
    time.sleep(0.01)
    c.send(after[20:])
    assert _answer(c) == {"type": "memoryview", "length": n, "sha": _sha(body)}
    doc = _answer(c)
    assert doc["length"] == 5 and doc["sha"] == _sha(b"hello")
    assert not _reading_body(server)


def test_the_rest_of_a_body_goes_into_its_block_and_parsing_resumes_after_it(
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
    blocks = server.service.recv_blocks
    with Conn(server.port) as c:
        for i in range(4):
            _exchange(c, server, BIG + 1000 * i)
        # a head alone first: the whole body is read into the block
        body = os.urandom(BIG)
        c.send(_head(INFER, BIG))
        wait_until(lambda: _reading_body(server), 5)
        for i in range(0, BIG, 70_000):
            c.send(body[i : i + 70_000])
            time.sleep(0.002)
        assert _answer(c)["sha"] == _sha(body)
    wait_until(lambda: blocks.lent() == 0, 5)


def test_connection_close_and_http10_end_after_a_body_read_into_its_block(
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
    for head in (
        f"POST {INFER} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n",
        f"POST {INFER} HTTP/1.0\r\n",
    ):
        body = os.urandom(BIG)
        with Conn(server.port) as c:
            c.send(f"{head}Content-Length: {BIG}\r\n\r\n".encode() + body[:500])
            wait_until(lambda: _reading_body(server), 5)
            c.send(body[500:])
            r = c.response()
            assert r.status == 200 and r.headers["connection"] == "close"
            assert c.closed()
    wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)


def test_a_body_that_stops_arriving_is_408_and_its_block_comes_back(
    loop_thread: LoopThread, twin: Any
) -> None:
    server = loop_thread.run(
        start_http_native(
            Reader(), "127.0.0.1", 0, limits=HttpLimits(body_timeout_s=0.3), protocol_class=twin
        )
    )
    try:
        for sent in (0, 1000):
            with Conn(server.port) as c:
                c.send(_head(INFER, BIG) + b"x" * sent)
                wait_until(lambda: _reading_body(server), 5)
                r = c.response()
                assert r.status == 408 and r.headers["connection"] == "close"
                assert c.closed()
            wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)
    finally:
        loop_thread.run(server.stop(1.0))


def test_a_client_that_half_closes_mid_body_is_answered_400(
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
    for _ in range(3):
        with Conn(server.port) as c:
            c.send(_head(INFER, BIG) + b"x" * 5000)
            wait_until(lambda: _reading_body(server), 5)
            c.sock.shutdown(socket.SHUT_WR)
            r = c.response()
            assert r.status == 400 and b"closed its side" in r.body
            assert c.closed()
        wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)


def test_a_client_that_leaves_while_its_body_is_read_into_the_block(
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
    blocks = server.service.recv_blocks
    for sent in (0, 1, 1000, BIG - 1, 0, BIG // 2):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            sock.sendall(_head(INFER, BIG) + b"y" * sent)
            wait_until(lambda: _reading_body(server), 5)
            if sent % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        finally:
            sock.close()  # with a reset where it lingers for 0 s
        wait_until(lambda: not server.service.connections, 5)
        wait_until(lambda: blocks.lent() == 0, 5)
    with Conn(server.port) as c:
        _exchange(c, server, BIG)


def test_expect_100_continue_then_the_body_into_its_block(
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
    body = os.urandom(BIG)
    with Conn(server.port) as c:
        head = f"POST {INFER} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
        c.send(f"{head}Content-Length: {BIG}\r\n\r\n".encode())
        assert c.response(head_only=True).status == 100
        assert _reading_body(server)
        for i in range(0, BIG, 100_000):
            c.send(body[i : i + 100_000])
            time.sleep(0.002)
        assert _answer(c) == {"type": "memoryview", "length": BIG, "sha": _sha(body)}
        _exchange(c, server, BIG)


class Echo(Reader):
    """``Reader``, answering ``?echo`` with the body itself."""

    async def __call__(self, req: Any) -> HttpResponse:
        if req.query != "echo":
            return await super().__call__(req)
        return HttpResponse(200, [await req.read()], "application/octet-stream")


def test_a_response_waiting_for_its_client_resumes_while_a_body_is_read(
    loop_thread: LoopThread, twin: Any
) -> None:
    """The transport tells the protocol it has at that moment that it may write again: the
    reader passes that on, or the echo below would wait for it forever."""
    size = 16 << 20  # more than loopback's socket buffers hold for a client that does not read
    with _serving(loop_thread, twin, Echo()) as server:
        first, second = os.urandom(size), os.urandom(BIG)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        c = Conn.of(sock)
        with c:
            c.send(_head(INFER + "?echo", size) + first)
            c.send(_head(INFER, BIG) + second[:1000])
            (proto,) = server.service.connections
            wait_until(lambda: _reading_body(server) and proto._write_paused, 10)
            r = c.response()  # its bytes let the transport resume while the reader is its protocol
            assert r.status == 200 and r.body == first
            c.send(second[1000:])
            assert _answer(c)["sha"] == _sha(second)
        wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


def test_over_tls(loop_thread: LoopThread, twin: Any, certs: dict[str, str]) -> None:
    ctx = server_context(certs["server.pem"], certs["server.key"])
    server = loop_thread.run(
        start_http_native(Reader(), "127.0.0.1", 0, ssl_context=ctx, protocol_class=twin)
    )
    try:
        with tls_conn(server.port, certs["ca.pem"]) as c:
            for i in range(3):
                _exchange(c, server, BIG + i)
        wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)
    finally:
        loop_thread.run(server.stop(1.0))


class _Detected:
    """A listener whose connections the one-port detector hands to ``service``'s protocol."""

    def __init__(self, service: http1.HttpService, server: asyncio.Server) -> None:
        self.service = service
        self.server = server
        self.port = server.sockets[0].getsockname()[1]


def test_behind_the_one_port_detector(loop_thread: LoopThread, twin: Any) -> None:
    service = http1.HttpService(Reader(), HttpLimits(), protocol_class=twin)

    async def listen() -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(
            lambda: Detect(service.protocol, asyncio.Protocol), "127.0.0.1", 0
        )

    detected = _Detected(service, loop_thread.run(listen()))
    try:
        with Conn(detected.port) as c:
            for i in range(3):
                _exchange(c, detected, BIG + i)
        wait_until(lambda: service.recv_blocks.lent() == 0, 5)
    finally:
        detected.server.close()
        loop_thread.run(service.drain(1.0))
        loop_thread.run(detected.server.wait_closed())


def test_a_stop_while_a_body_is_read_into_its_block_answers_it(
    loop_thread: LoopThread, twin: Any
) -> None:
    """The server drains while the rest of a body goes into its block: the request, begun
    before the stop, is read to its end and answered, then the connection closes."""
    for sent in (0, 1000, BIG - 1):
        _stop_mid_body(loop_thread, twin, sent)


def _stop_mid_body(loop_thread: LoopThread, twin: Any, sent: int) -> None:
    server = loop_thread.run(
        start_http_native(Reader(), "127.0.0.1", 0, limits=HttpLimits(), protocol_class=twin)
    )
    body = os.urandom(BIG)
    with Conn(server.port) as c:
        c.send(_head(INFER, BIG) + body[:sent])
        wait_until(lambda: _reading_body(server), 5)
        stopping = asyncio.run_coroutine_threadsafe(server.stop(5.0), loop_thread.loop)
        wait_until(lambda: server.service.draining, 5)
        assert _reading_body(server)
        c.send(body[sent:])
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert _sha(body) in r.body.decode()
        assert c.closed()
        stopping.result(10)
    assert server.service.recv_blocks.lent() == 0

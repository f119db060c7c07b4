"""The aio HTTP front end's own limits over raw loopback sockets: the header timeout aiohttp
lacks (408 as on the native front end) and a 413 that stops reading the body.

The server is ``aio.CappedServer`` (aiohttp's low-level server) with a handler that reads the
body through ``aio._Request``, as ``aio.make_server``'s does."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from tritonlite.frontends.base.http_call import HttpError
from tritonlite.frontends.http import aio

sys.path.insert(0, str(Path(__file__).parent / "wire"))
from test_http1_support import Conn, LoopThread  # noqa: E402

pytestmark = pytest.mark.timeout(60)

LIMIT = 1000


async def _handle(request: web.BaseRequest) -> web.StreamResponse:
    req = aio._Request(request, LIMIT)
    try:
        body = await req.read()
    except HttpError as exc:
        resp = web.json_response({"error": exc.message}, status=exc.status)
        if req.close:
            resp.force_close()
        return resp
    return web.json_response({"length": len(body)})


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


Serve = Callable[..., int]


@pytest.fixture()
def serve(loop_thread: LoopThread) -> Iterator[Serve]:
    servers: list[Any] = []

    def start(header_timeout_s: float = 30.0) -> int:
        async def go() -> Any:
            loop = asyncio.get_running_loop()

            def request_factory(*args: Any) -> web.BaseRequest:  # as make_server's
                return web.BaseRequest(*args, loop, client_max_size=LIMIT)

            handler = aio.CappedServer(
                _handle,
                max_connections=64,
                header_timeout_s=header_timeout_s,
                request_factory=request_factory,
                access_log=None,
            )
            return await loop.create_server(handler, "127.0.0.1", 0)

        srv = loop_thread.run(go())
        servers.append(srv)
        return int(srv.sockets[0].getsockname()[1])

    yield start

    async def stop(srv: Any) -> None:
        srv.close()

    for srv in servers:
        loop_thread.run(stop(srv))


def _refused(c: Conn, status: int) -> str:
    r = c.response()
    assert r.status == status, r
    assert r.headers["connection"].lower() == "close"
    assert c.closed()
    return str(orjson.loads(r.body)["error"])


def test_slow_headers_get_408(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.3)) as c:
        c.send(b"GET /slowloris HTTP/1.1\r\nHost: t\r\n")
        assert "timed out reading the request headers" in _refused(c, 408)


def test_a_silent_connection_gets_408(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.3)) as c:
        _refused(c, 408)


def test_requests_in_time_are_served_and_the_timer_restarts(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.5)) as c:
        for _ in range(3):
            c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
            r = c.response()
            assert r.status == 200 and orjson.loads(r.body)["length"] == 3
        c.send(b"GET /b HTTP/1.1\r\n")  # a head begun after an answer: timed again
        _refused(c, 408)


def test_a_content_length_over_the_limit_is_413_and_closed(serve: Serve) -> None:
    with Conn(serve()) as c:
        c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 4096)
        assert "1000" in _refused(c, 413)


def test_a_chunked_body_over_the_limit_is_413_and_not_read_on(serve: Serve) -> None:
    """aiohttp would linger up to 10 s reading the rest; the connection closes at once."""
    with Conn(serve(), timeout=5.0) as c:
        c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(b"400\r\n" + b"x" * 1024 + b"\r\n")
        r = c.response()
        assert r.status == 413 and r.headers["connection"].lower() == "close"
        cut = False
        try:
            for _ in range(10_000):
                c.send(b"400\r\n" + b"x" * 1024 + b"\r\n")
        except OSError:
            cut = True
        assert cut or c.closed()


def test_a_long_chunk_extension_is_400_before_its_end(serve: Serve) -> None:
    with Conn(serve(), timeout=5.0) as c:
        c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;x=")
        sent = 0
        try:
            while sent < 16 << 20:
                c.send(b"e" * 65536)
                sent += 65536
        except OSError:
            pass
        assert sent < 16 << 20
        try:
            r = c.response()
        except (OSError, ConnectionError):
            return  # reset before the answer could be read (unread input at close)
        assert r.status == 400 and "chunked framing" in orjson.loads(r.body)["error"]


def test_one_byte_chunks_are_fine(serve: Serve) -> None:
    with Conn(serve()) as c:
        body = b"".join(b"1;a=b\r\nx\r\n" for _ in range(900)) + b"0\r\n\r\n"
        c.send(b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        r = c.response()
        assert r.status == 200 and orjson.loads(r.body)["length"] == 900

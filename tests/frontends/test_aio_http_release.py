"""The aio HTTP front end frees an answer whose client left while it was being written,
without waiting for the cyclic garbage collector.

aiohttp's drain fails such a write with a ConnectionError whose traceback runs through the
frame that awaits the future holding it; kept, that reference cycle holds the answer (and
its request) until a full collection, which an idle server may not run for a long time.
The server is ``aio.CappedServer`` with a handler that ends as ``aio.make_server``'s does:
``_response`` then ``_write``. The automatic GC is off while it runs, so an answer that is
gone was freed by reference counting alone.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from conftest import wait_until

from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.http import aio

sys.path.insert(0, str(Path(__file__).parent / "wire"))
from test_http1_support import Conn, LoopThread  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SIZE = 16 << 20  # more than loopback's socket buffers hold for a client that does not read


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture()
def no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if enabled:
        gc.enable()
    gc.collect()


class Answers:
    """The handler: SIZE bytes for ``/big``, 10 for anything else; ``refs`` has a weak reference to each
    aiohttp answer it made, ``written`` counts the writes that ended."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []
        self.written = 0

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        size = SIZE if request.path == "/big" else 10
        out = aio._response(HttpResponse(200, [b"a" * size], "application/octet-stream"))
        self.refs.append(weakref.ref(out))
        try:
            await aio._write(request, out)
        finally:
            self.written += 1
        return out

    def alive(self) -> int:
        return sum(r() is not None for r in self.refs)


def _serve(loop_thread: LoopThread, answers: Answers) -> Any:
    async def go() -> Any:
        loop = asyncio.get_running_loop()
        handler = aio.CappedServer(answers, max_connections=64, access_log=None)
        return await loop.create_server(handler, "127.0.0.1", 0)

    return loop_thread.run(go())


def test_an_answer_whose_client_left_mid_write_is_freed_at_once(
    loop_thread: LoopThread, no_gc: None
) -> None:
    answers = Answers()
    srv = _serve(loop_thread, answers)
    port = srv.sockets[0].getsockname()[1]
    try:
        socks = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            socks.append(s)
        wait_until(lambda: len(answers.refs) == 3, 10)
        for s in socks:  # unread answers: closing resets the connections
            s.close()
        wait_until(lambda: answers.written == 3, 10)
        wait_until(lambda: answers.alive() == 0, 10)
        with Conn(port) as c:  # and the server goes on answering
            c.send(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n")
            r = c.response()
            assert r.status == 200 and r.body == b"a" * 10
    finally:
        srv.close()

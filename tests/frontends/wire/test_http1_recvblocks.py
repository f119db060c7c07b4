"""A large infer body that arrives in pieces is collected in a reused block of the service's
``recv_blocks`` (``wire/recvbuf.py``), lent until nothing made from it is left, on both twins
of ``Http1Protocol``; every other body keeps its ``bytes`` / ``bytearray``.

The handler answers with the body's type, length and digest, and keeps what it read while a
test asks it to (as ONNX Runtime holds a request's input arrays during a run on its thread).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from conftest import wait_until
from test_http1 import twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.base.http_call import HttpError, HttpResponse
from tritonlite.frontends.base.http_errors import error
from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native

pytestmark = pytest.mark.timeout(60)

BIG = 300_000  # over the 64 KiB from which an infer body takes a block


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> Any:
    return twin_class(request.param)


class Reader:
    """Answers every request with what it read; ``keep`` holds the bodies (and a numpy view of
    each) until cleared."""

    def __init__(self) -> None:
        self.keep = False
        self.kept: list[Any] = []

    async def __call__(self, req: Any) -> HttpResponse:
        try:
            body = await req.read()
        except HttpError as exc:  # as the router answers it: a client that left mid-body
            return error(exc.status, exc.message)
        if self.keep:
            self.kept.append((body, np.frombuffer(body, np.uint8)))
        doc = {
            "type": type(body).__name__,
            "length": len(body),
            "sha": hashlib.sha256(body).hexdigest(),
        }
        if req.path.endswith("/strip"):  # what a JSON handler does with its body
            doc["stripped"] = len(body.strip())
        return HttpResponse(200, [orjson.dumps(doc)], "application/json")


@pytest.fixture()
def served(loop_thread: LoopThread, twin: Any) -> Iterator[tuple[NativeHttpServer, Reader]]:
    reader = Reader()
    server = loop_thread.run(
        start_http_native(reader, "127.0.0.1", 0, limits=HttpLimits(), protocol_class=twin)
    )
    yield server, reader
    reader.kept.clear()
    loop_thread.run(server.stop(1.0))


def _head(path: str, n: int) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n".encode()


def _send_in_pieces(c: Conn, path: str, body: bytes, pieces: int = 7) -> None:
    c.send(_head(path, len(body)))
    step = -(-len(body) // pieces)
    for i in range(0, len(body), step):
        c.send(body[i : i + step])
        time.sleep(0.002)  # separate reads: the first piece does not hold the whole body


def _answer(c: Conn) -> dict[str, Any]:
    r = c.response()
    assert r.status == 200, r
    return orjson.loads(r.body)  # type: ignore[no-any-return]


def test_a_large_infer_body_in_pieces_takes_a_block_and_gives_it_back(
    served: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = served
    blocks = server.service.recv_blocks
    with Conn(server.port) as c:
        for i in range(6):
            body = os.urandom(BIG + i)
            _send_in_pieces(c, "/v2/models/m/infer", body)
            doc = _answer(c)
            assert doc == {
                "type": "memoryview",
                "length": len(body),
                "sha": hashlib.sha256(body).hexdigest(),
            }
            wait_until(lambda: blocks.lent() == 0, 5)
    # six bodies of the same block size: one mapping, reused
    assert sum(len(v) for v in blocks._free.values()) == 1


def test_other_bodies_keep_their_types(served: tuple[NativeHttpServer, Reader]) -> None:
    server, _ = served
    blocks = server.service.recv_blocks
    with Conn(server.port) as c:
        # a large body to another handler: a bytearray, whose bytes methods it may use
        body = b"  " + os.urandom(BIG) + b"  "
        _send_in_pieces(c, "/v2/repository/models/m/load/strip", body)
        doc = _answer(c)
        assert doc["type"] == "bytearray" and doc["length"] == len(body)
        assert doc["stripped"] == len(body.strip())
        # a small infer body in pieces, and a large one in one send: no block either
        small = os.urandom(1000)
        _send_in_pieces(c, "/v2/models/m/infer", small, pieces=3)
        assert _answer(c)["type"] in ("bytes", "bytearray")
        c.send(_head("/v2/models/m/infer", 70_000) + b"x" * 70_000)
        doc = _answer(c)
        assert doc["length"] == 70_000 and doc["type"] in ("bytes", "bytearray", "memoryview")
    assert blocks.lent() == 0


def test_a_held_body_keeps_its_block_from_the_next_request(
    served: tuple[NativeHttpServer, Reader],
) -> None:
    server, reader = served
    blocks = server.service.recv_blocks
    reader.keep = True
    first, second = os.urandom(BIG), os.urandom(BIG)
    with Conn(server.port) as c:
        _send_in_pieces(c, "/v2/models/m/infer", first)
        assert _answer(c)["sha"] == hashlib.sha256(first).hexdigest()
        _send_in_pieces(c, "/v2/models/m/infer", second)
        assert _answer(c)["sha"] == hashlib.sha256(second).hexdigest()
    assert blocks.lent() == 2
    (b1, a1), (b2, a2) = reader.kept
    assert bytes(b1) == first and a1.tobytes() == first  # not overwritten by the second
    assert bytes(b2) == second
    del b1, a1, b2, a2
    reader.kept.clear()
    wait_until(lambda: blocks.lent() == 0, 5)


def test_pipelined_large_infer_bodies(served: tuple[NativeHttpServer, Reader]) -> None:
    server, _ = served
    bodies = [os.urandom(BIG + 17 * i) for i in range(4)]
    wire = b"".join(_head("/v2/models/m/versions/1/infer", len(b)) + b for b in bodies)
    with Conn(server.port) as c:
        for i in range(0, len(wire), 50_000):
            c.send(wire[i : i + 50_000])
        for b in bodies:
            doc = _answer(c)
            assert doc["type"] == "memoryview"
            assert doc["sha"] == hashlib.sha256(b).hexdigest()
    wait_until(lambda: server.service.recv_blocks.lent() == 0, 5)


def test_a_client_that_leaves_mid_body_gives_the_block_back(
    served: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = served
    blocks = server.service.recv_blocks
    for cut in (BIG // 3, BIG - 1):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            sock.sendall(_head("/v2/models/m/infer", BIG))
            sock.sendall(b"a" * 1000)
            time.sleep(0.01)
            sock.sendall(b"b" * (cut - 1000))
            time.sleep(0.01)
        finally:
            sock.close()
        wait_until(lambda: not server.service.connections, 5)
        wait_until(lambda: blocks.lent() == 0, 5)
    with Conn(server.port) as c:  # and it serves the next
        body = os.urandom(BIG)
        _send_in_pieces(c, "/v2/models/m/infer", body)
        assert _answer(c)["sha"] == hashlib.sha256(body).hexdigest()

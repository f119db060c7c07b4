"""The server's reused blocks, on both twins of ``Http1Protocol``: a large response to a client
that stops reading holds the server's own copy, never the backend's memory, and that copy's
blocks come back when the connection ends; a large infer body that arrives in pieces is
collected in a block of the service's ``recv_blocks`` (``wire/recvbuf.py``), lent until nothing
made from it is left, while every other body keeps its ``bytes`` / ``bytearray``.

The first handler answers with views of a numpy array, as the HTTP codec does with a model's
output (ONNX Runtime's live in its session arena, which keeps whatever it grew to); a weak
reference to the array tells whether anything on the server still holds it. The second
answers with the body's type, length and digest, and keeps what it read while a test asks it
to (as ONNX Runtime holds a request's input arrays during a run on its thread).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
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
from tritonlite.frontends.wire.sendbuf import BLOCK, KEEP, SendBlocks

pytestmark = pytest.mark.timeout(60)

SIZE = 16 << 20  # more than loopback's socket buffers hold for a client that does not read
BIG = 300_000  # over the 64 KiB from which an infer body takes a block


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> Any:
    return twin_class(request.param)


class Outputs:
    """A handler that answers ``GET /N?BYTES`` with b"head" and BYTES (default SIZE) bytes of
    value N, as two views of an array of its own; ``refs`` has a weak reference to each array
    it made."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []

    async def __call__(self, req: Any) -> HttpResponse:
        value = int(req.path.strip("/"))
        size = int(req.query or SIZE)
        arr = np.full(size, value, np.uint8)
        self.refs.append(weakref.ref(arr))
        view = memoryview(arr)  # type: ignore[arg-type]
        half = size // 2
        return HttpResponse(200, [b"head", view[:half], view[half:]], "application/x")

    def alive(self) -> int:
        return sum(r() is not None for r in self.refs)


@contextmanager
def _serving(loop_thread: LoopThread, twin: Any, handler: Any) -> Iterator[NativeHttpServer]:
    server = loop_thread.run(
        start_http_native(handler, "127.0.0.1", 0, limits=HttpLimits(), protocol_class=twin)
    )
    try:
        yield server
    finally:
        loop_thread.run(server.stop(1.0))


@pytest.fixture()
def served(loop_thread: LoopThread, twin: Any) -> Iterator[tuple[NativeHttpServer, Outputs]]:
    outputs = Outputs()
    with _serving(loop_thread, twin, outputs) as server:
        yield server, outputs


def _buffered(server: NativeHttpServer) -> list[int]:
    """What each open connection's transport still has to send."""
    return [p._transport.get_write_buffer_size() for p in server.service.connections]


def _stall(port: int, value: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.sendall(b"GET /%d HTTP/1.1\r\nHost: t\r\n\r\n" % value)
    return sock


def test_a_stalled_response_holds_no_view_of_the_handlers_arrays(
    served: tuple[NativeHttpServer, Outputs],
) -> None:
    server, outputs = served
    socks = [_stall(server.port, v) for v in (1, 2, 3)]
    try:
        wait_until(lambda: len(outputs.refs) == 3, 10)
        # the clients read nothing: most of each answer waits in its transport ...
        wait_until(lambda: len(_buffered(server)) == 3 and min(_buffered(server)) > 0, 10)
        # ... as the server's copy: the arrays the handler answered with are gone
        wait_until(lambda: outputs.alive() == 0, 10)
        assert len(server.service.connections) == 3
        assert server.service.send_blocks.lent() > 0
    finally:
        for s in socks:
            s.close()
    # the blocks come back when the connections end; past KEEP free ones they are unmapped
    blocks = server.service.send_blocks
    wait_until(lambda: not server.service.connections and blocks.lent() == 0, 10)
    assert blocks.free() == KEEP


def test_large_answers_read_to_the_end_are_exact_while_blocks_are_reused(
    served: tuple[NativeHttpServer, Outputs],
) -> None:
    server, outputs = served
    with Conn(server.port) as c:
        for value in (7, 8, 9):  # each answer's blocks held the one before's bytes
            c.send(b"GET /%d?%d HTTP/1.1\r\nHost: t\r\n\r\n" % (value, 3 * BLOCK + 5))
            r = c.response()
            assert r.status == 200 and int(r.headers["content-length"]) == 3 * BLOCK + 9
            assert r.body[:4] == b"head"
            assert r.body[4:] == bytes([value]) * (3 * BLOCK + 5)
    wait_until(lambda: outputs.alive() == 0 and server.service.send_blocks.lent() == 0, 10)


def test_send_blocks_lend_until_their_views_are_dropped() -> None:
    blocks = SendBlocks(block=1000, keep=2)
    src = np.arange(2500, dtype=np.uint8)
    out: list[Any] = [b"first"]
    blocks.copy(memoryview(src), out)
    assert out[0] == b"first" and [m.nbytes for m in out[1:]] == [1000, 1000, 500]
    assert b"".join(out[1:]) == src.tobytes() and blocks.lent() == 3
    src[:] = 0  # copies, not views
    assert out[1][0] == 0 and out[1][1] == 1
    held = out[3]
    del out
    assert blocks.lent() == 1 and blocks.free() == 2  # the third one past keep: unmapped
    del held
    assert blocks.lent() == 0 and blocks.free() == 2
    # a strided view is copied through bytes(); a reused block holds the new bytes only
    strided = memoryview(np.arange(20, dtype=np.uint8))[::2]
    again: list[Any] = []
    blocks.copy(strided, again)
    assert bytes(again[0]) == bytes(range(0, 20, 2))
    fortran = np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4))
    blocks.copy(memoryview(fortran), again)  # type: ignore[arg-type]
    assert bytes(again[1]) == memoryview(fortran).tobytes()  # C order, as a view sends
    with pytest.raises(ValueError):
        SendBlocks(block=0)
    assert BLOCK == 1 << 20


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
def reading(loop_thread: LoopThread, twin: Any) -> Iterator[tuple[NativeHttpServer, Reader]]:
    reader = Reader()
    with _serving(loop_thread, twin, reader) as server:
        yield server, reader
        reader.kept.clear()


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
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
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


def test_other_bodies_keep_their_types(reading: tuple[NativeHttpServer, Reader]) -> None:
    server, _ = reading
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
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, reader = reading
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


def test_pipelined_large_infer_bodies(reading: tuple[NativeHttpServer, Reader]) -> None:
    server, _ = reading
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
    reading: tuple[NativeHttpServer, Reader],
) -> None:
    server, _ = reading
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

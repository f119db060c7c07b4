"""A large response to a client that stops reading holds the server's own copy, never the
backend's memory, and that copy's blocks come back when the connection ends (both twins).

The handler answers with views of a numpy array, as the HTTP codec does with a model's
output (ONNX Runtime's live in its session arena, which keeps whatever it grew to); a weak
reference to the array tells whether anything on the server still holds it.
"""

from __future__ import annotations

import socket
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import wait_until
from test_http1 import twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native
from tritonlite.frontends.wire.sendbuf import BLOCK, KEEP, SendBlocks

pytestmark = pytest.mark.timeout(60)

SIZE = 16 << 20  # more than loopback's socket buffers hold for a client that does not read


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


@pytest.fixture()
def served(loop_thread: LoopThread, twin: Any) -> Iterator[tuple[NativeHttpServer, Outputs]]:
    outputs = Outputs()
    server = loop_thread.run(
        start_http_native(outputs, "127.0.0.1", 0, limits=HttpLimits(), protocol_class=twin)
    )
    yield server, outputs
    loop_thread.run(server.stop(1.0))


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

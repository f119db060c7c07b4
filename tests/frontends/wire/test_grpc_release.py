"""A large gRPC message to a peer that stops reading holds the server's own copy, never the
memory the handler answered with (a model's output arrays: ONNX Runtime's live in its session
arena, which keeps whatever it grew to), and the copy's blocks come back when the connection
ends. Unary answers and stream writes, both H2Connection twins.

A handler answers with a list of parts whose array parts are byte views, as the gRPC codec
does for a large ModelInferResponse; a weak reference to each array tells whether anything on
the server still holds it. The raw client never grants window beyond HTTP/2's initial 64 KiB,
so almost all of each message waits on the server.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import wait_until
from test_grpc_native import LoopThread, Method, RawClient, use_h2_twin
from test_h2_peer import DATA, END_STREAM, HEADERS

from tritonlite.frontends.base.call import GrpcCall
from tritonlite.frontends.wire.grpc_native import NativeGrpcServer, start_grpc_native
from tritonlite.frontends.wire.sendbuf import KEEP

pytestmark = pytest.mark.timeout(60)

SIZE = 8 << 20


class Outputs:
    """Handlers that answer with ``SIZE`` bytes of one value, as views of an array of their
    own; ``refs`` holds a weak reference to each array they made."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []

    def _parts(self, value: int) -> list[Any]:
        arr = np.full(SIZE, value, np.uint8)
        self.refs.append(weakref.ref(arr))
        view = memoryview(arr)  # type: ignore[arg-type]
        return [b"head", view[: SIZE // 2], view[SIZE // 2 :]]

    async def unary(self, request: bytes, call: GrpcCall) -> Any:
        return self._parts(request[0])

    async def stream(self, call: GrpcCall) -> None:
        while (message := await call.read()) is not None:
            await call.write(self._parts(message[0]))

    def alive(self) -> int:
        return sum(r() is not None for r in self.refs)

    def methods(self) -> dict[str, Any]:
        return {"/t.T/Unary": Method(self.unary), "/t.T/Stream": Method(stream=self.stream)}


@contextlib.contextmanager
def _serve(outputs: Outputs) -> Iterator[NativeGrpcServer]:
    lt = LoopThread()
    server = lt.run(start_grpc_native(outputs.methods(), "127.0.0.1", 0))
    try:
        yield server
    finally:
        lt.run(server.stop(1.0))
        lt.close()


@pytest.mark.parametrize("twin", ["pure", "compiled"])
def test_stalled_messages_hold_no_view_of_the_handlers_arrays(
    twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_h2_twin(twin, monkeypatch)
    outputs = Outputs()
    with _serve(outputs) as server:
        raws = [RawClient(server.port) for _ in range(2)]
        try:
            raws[0].request("/t.T/Unary", b"\x00\x00\x00\x00\x01\x07")
            raws[0].request("/t.T/Unary", b"\x00\x00\x00\x00\x01\x08")
            raws[1].request("/t.T/Stream", b"\x00\x00\x00\x00\x01\x09", end=False)
            for raw in raws:  # each message has started: its first window's worth came
                raw.until(lambda f: f[0] == DATA)
            wait_until(lambda: len(outputs.refs) == 3, 10)
            # the peers grant no more window: the messages wait on the server, as its copy
            wait_until(lambda: outputs.alive() == 0, 10)
            assert server.send_blocks.lent() > 0
            # ... and none has ended (no trailers yet)
            assert not any(
                f[0] in (HEADERS, DATA) and f[1] & END_STREAM for raw in raws for f in raw.frames
            )
        finally:
            for raw in raws:
                raw.close()
        blocks = server.send_blocks
        wait_until(lambda: blocks.lent() == 0, 10)
        assert blocks.free() == KEEP

"""Serving deferred to the end of a loop turn (``HttpService.defer``), on both twins.

While the loop is loaded (its ``BusyPoll`` says so), a connection whose request is complete
joins the service's serving pass at the end of the loop turn instead of being served inside
its ``data_received``; otherwise it is served at once. Either way every request is answered,
in order, once; a connection that goes away meanwhile is skipped. The pass holds the small
responses it makes and writes them when it ends, one write per connection; anything else
written on a connection (a large or traced response, a stream, ``100 Continue``) or its
closing writes what it holds first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_http1 import FakeTransport, _get, handler, twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.base.http_call import HttpResponse, HttpStream
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService, start_http_native


class Load:
    """A BusyPoll stand-in whose verdict the test sets."""

    def __init__(self, loaded: bool) -> None:
        self.is_loaded = loaded
        self.touches = 0

    def touch(self) -> None:
        self.touches += 1

    def loaded(self) -> bool:
        return self.is_loaded


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> Any:
    return twin_class(request.param)


def _connections(
    service: HttpService, n: int, transport: Any = FakeTransport
) -> list[tuple[Any, Any]]:
    out = []
    for _ in range(n):
        proto = service.protocol()
        t = transport()
        proto.connection_made(t)
        out.append((proto, t))
    return out


BIG = b"x" * 20000  # over what the protocol joins into one write (_SMALL)


def _service(twin: Any, loaded: bool, check: Any = None) -> tuple[HttpService, list[str]]:
    """A service whose handler records each request's path (in ``seen``), calls
    ``check(path)`` if given, then answers ``/big`` with BIG, ``/traced`` with an ``on_sent``
    callback, ``/stream`` as a stream, and any other path with the path."""
    seen: list[str] = []

    async def events(writer: Any) -> None:
        await writer.write(b"event")

    async def answer(req: Any) -> HttpResponse | HttpStream:
        seen.append(req.path)
        if check is not None:
            check(req.path)
        await req.read()
        if req.path == "/big":
            return HttpResponse(200, [BIG], "text/plain")
        if req.path == "/stream":
            return HttpStream(200, "text/plain", events)
        resp = HttpResponse(200, [req.path.encode()], "text/plain")
        if req.path == "/traced":
            resp.on_sent = lambda start, end: seen.append("sent")
        return resp

    service = HttpService(answer, HttpLimits(), protocol_class=twin)
    service.busy = Load(loaded)
    return service, seen


def test_a_loaded_loop_serves_the_turns_requests_together_after_it(twin: Any) -> None:
    async def run() -> None:
        service, seen = _service(twin, True)
        conns = _connections(service, 3)
        for i, (proto, _) in enumerate(conns):
            proto.data_received(_get(f"/c{i}"))
        assert seen == [] and all(not t.out for _, t in conns)  # nothing served yet
        await asyncio.sleep(0)  # the end of the turn: one pass serves them all
        assert seen == ["/c0", "/c1", "/c2"]
        for i, (proto, t) in enumerate(conns):
            assert t.out.startswith(b"HTTP/1.1 200 OK\r\n")
            assert t.out.endswith(f"/c{i}".encode())
            assert proto.idle()
            proto.connection_lost(None)

    asyncio.run(run())


def test_an_idle_loop_serves_each_request_as_it_is_parsed(twin: Any) -> None:
    async def run() -> None:
        service, seen = _service(twin, False)
        ((proto, t),) = _connections(service, 1)
        proto.data_received(_get("/now"))
        assert seen == ["/now"] and t.out.endswith(b"/now")
        proto.connection_lost(None)

    asyncio.run(run())


def test_pipelined_requests_of_a_deferred_connection_are_answered_in_order(twin: Any) -> None:
    async def run() -> None:
        service, seen = _service(twin, True)
        ((proto, t),) = _connections(service, 1)
        proto.data_received(_get("/a") + _get("/b"))
        proto.data_received(_get("/c"))  # more in the same turn: still one pass
        await asyncio.sleep(0)
        assert seen == ["/a", "/b", "/c"]
        assert t.out.count(b"HTTP/1.1 200 OK\r\n") == 3
        assert t.out.index(b"/a") < t.out.index(b"/b") < t.out.index(b"/c")
        proto.connection_lost(None)

    asyncio.run(run())


def test_a_connection_gone_before_the_pass_is_skipped_and_the_others_served(
    twin: Any,
) -> None:
    async def run() -> None:
        service, seen = _service(twin, True)
        (gone, t_gone), (stays, t_stays) = _connections(service, 2)
        gone.data_received(_get("/gone"))
        stays.data_received(_get("/stays"))
        gone.connection_lost(None)
        await asyncio.sleep(0)
        assert seen == ["/stays"]
        assert not t_gone.out and t_stays.out.endswith(b"/stays")
        assert list(service.connections) == [stays]
        stays.connection_lost(None)

    asyncio.run(run())


def test_garbage_after_a_deferred_request_answers_it_then_refuses(twin: Any) -> None:
    async def run() -> None:
        service, seen = _service(twin, True)
        ((proto, t),) = _connections(service, 1)
        proto.data_received(_get("/good") + b"\x00\x01 not http\r\n\r\n")
        for _ in range(10):
            await asyncio.sleep(0)
        assert seen == ["/good"]
        first = t.out.index(b"HTTP/1.1 200 OK\r\n")
        assert t.out.index(b"HTTP/1.1 400 Bad Request\r\n") > first
        assert t.closed
        proto.connection_lost(None)

    asyncio.run(run())


def test_a_loaded_server_answers_every_request_over_sockets(twin: Any) -> None:
    lt = LoopThread()
    try:
        load = Load(True)
        server = lt.run(start_http_native(handler, "127.0.0.1", 0, protocol_class=twin, busy=load))
        conns = [Conn(server.port) for _ in range(4)]
        try:
            for rnd in range(5):
                for i, c in enumerate(conns):  # four requests in flight at once
                    c.send(_get(f"/r{rnd}c{i}"))
                for i, c in enumerate(conns):
                    resp = c.response()
                    assert resp.status == 200 and f"/r{rnd}c{i}".encode() in resp.body
            load.is_loaded = False  # and served at once again when the load goes
            for i, c in enumerate(conns):
                c.send(_get(f"/idle{i}"))
                assert c.response().status == 200
        finally:
            for c in conns:
                c.__exit__(None, None, None)
        assert load.touches >= 24
        lt.run(server.stop(1.0))
    finally:
        lt.close()


class CountingTransport(FakeTransport):
    """A FakeTransport that also counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.writes += 1
        super().writelines(parts)


def _counted(service: HttpService, n: int) -> list[tuple[Any, CountingTransport]]:
    return _connections(service, n, CountingTransport)


def test_the_pass_holds_its_responses_and_writes_each_connection_once_at_its_end(
    twin: Any,
) -> None:
    async def run() -> None:
        outs: list[bytes] = []
        conns: list[tuple[Any, CountingTransport]] = []

        def check(path: str) -> None:
            outs.append(bytes(conns[0][1].out))  # what the first connection got by then

        service, seen = _service(twin, True, check)
        conns.extend(_counted(service, 2))
        conns[0][0].data_received(_get("/a") + _get("/b"))
        conns[1][0].data_received(_get("/c"))
        await asyncio.sleep(0)
        assert seen == ["/a", "/b", "/c"]
        assert outs == [b"", b"", b""]  # nothing written while the pass ran
        (p0, t0), (p1, t1) = conns
        assert t0.writes == 1 and t1.writes == 1  # then one write each
        assert t0.out.count(b"HTTP/1.1 200 OK\r\n") == 2
        assert t0.out.index(b"/a") < t0.out.index(b"/b")
        assert t1.out.endswith(b"/c")
        assert p0.idle() and p1.idle()
        for p, _ in conns:
            p.connection_lost(None)

    asyncio.run(run())


@pytest.mark.parametrize("second", ["/big", "/traced", "/stream"])
def test_what_is_written_at_once_goes_after_what_the_connection_held(
    twin: Any, second: str
) -> None:
    async def run() -> None:
        outs: list[bytes] = []
        conns: list[tuple[Any, CountingTransport]] = []

        def check(path: str) -> None:
            if path == "/check":
                outs.append(bytes(conns[0][1].out))

        service, seen = _service(twin, True, check)
        conns.extend(_counted(service, 2))
        conns[0][0].data_received(_get("/small") + _get(second))
        conns[1][0].data_received(_get("/check"))
        for _ in range(5):
            await asyncio.sleep(0)
        (p0, t0), (p1, t1) = conns
        (during,) = outs
        # the first connection's two responses were out, in order, before the pass ended
        assert during.index(b"/small") < during.index(b"HTTP/1.1 200 OK", 20)
        if second == "/big":
            assert during.endswith(BIG)
        elif second == "/traced":
            assert during.endswith(b"/traced") and "sent" in seen
        else:
            assert b"Transfer-Encoding: chunked" in during
        assert t1.out.endswith(b"/check")
        for p, _ in conns:
            p.connection_lost(None)

    asyncio.run(run())


def test_a_connection_that_closes_in_the_pass_writes_what_it_held_first(twin: Any) -> None:
    async def run() -> None:
        service, seen = _service(twin, True, lambda path: None)
        ((proto, t),) = _counted(service, 1)
        proto.data_received(_get("/a") + _get("/last", b"Connection: close\r\n"))
        await asyncio.sleep(0)
        assert seen == ["/a", "/last"]
        assert t.closed
        assert t.out.index(b"/a") < t.out.index(b"Connection: close") < t.out.index(b"/last")
        proto.connection_lost(None)

    asyncio.run(run())


def test_a_connection_gone_while_holding_writes_nothing_and_the_others_are_served(
    twin: Any,
) -> None:
    async def run() -> None:
        conns: list[tuple[Any, CountingTransport]] = []

        def check(path: str) -> None:
            if path == "/c":
                conns[0][0].connection_lost(None)  # the first left after its answer was made

        service, seen = _service(twin, True, check)
        conns.extend(_counted(service, 2))
        conns[0][0].data_received(_get("/a"))
        conns[1][0].data_received(_get("/c"))
        await asyncio.sleep(0)
        (_, t0), (p1, t1) = conns
        assert seen == ["/a", "/c"]
        assert not t0.out and t1.out.endswith(b"/c")
        p1.connection_lost(None)

    asyncio.run(run())

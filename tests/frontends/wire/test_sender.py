"""The sending thread of a loaded HTTP/1.1 loop (``_sender_py``), on both twins.

The sender writes what it is handed on a connection's own duplicate descriptor, in order, never
waiting: what the socket does not take is kept back, with whatever is handed after it, and the
loop is asked (once) to take it back. A peer that has gone makes the rest be dropped without an
error. Behind a server: a loaded loop (its ``BusyPoll`` says so) hands each serving pass's
small responses to the sender, and every response still reaches its client once, in order,
whether the client reads at once, stops reading for a while, closes early or asks for the
connection to close.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from test_http1 import _get, twin_class
from test_http1_defer import Load
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.wire import _sender_py, sender
from tritonlite.frontends.wire.http1 import start_http_native

COMPILED = sender._compiled


def sender_class(name: str) -> Any:
    if name == "pure":
        return _sender_py.Sender
    if COMPILED is None:
        pytest.skip("the compiled sender is not built")
    return COMPILED.Sender


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SocketTransport:
    """What ``Sender.channel`` asks a transport: its socket (and whether it is TLS)."""

    def __init__(self, sock: socket.socket | None, **extra: Any) -> None:
        self.extra = {"socket": sock, **extra}

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return self.extra.get(key, default)


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    return a, b


def _drain(sock: socket.socket, until: float = 0.2) -> bytes:
    """What ``sock`` receives until nothing comes for ``until`` seconds."""
    sock.settimeout(until)
    out = b""
    try:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                break
            out += data
    except TimeoutError:
        pass
    return out


def _lines(n: int) -> list[bytes]:
    return [b"r%06d\n" % i for i in range(n)]


def test_twins_are_what_they_claim() -> None:
    assert sender.Sender in (_sender_py.Sender, getattr(COMPILED, "Sender", None))
    assert sender.shared() is sender.shared()


def test_what_is_handed_reaches_the_socket_in_order(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        a, b = _pair()
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(_drain(b, 1.0)))
        reader.start()
        chan = snd.channel(SocketTransport(a), lambda: None)
        lines = _lines(20000)
        for line in lines:
            snd.submit(chan, line)
            if len(line) % 7 == 0:
                await asyncio.sleep(0)
        kept = chan.settle()  # what a reader that fell behind left in the socket's way
        assert not chan.busy()
        reader.join()
        assert received[0] + kept == b"".join(lines)
        chan.release()
        if twin == "compiled":
            queued, sent, _ = snd.counts()
            assert queued == sent == len(lines)
        snd.stop()
        a.close()
        b.close()

    asyncio.run(run())


def test_what_the_socket_does_not_take_is_kept_back_and_reclaimed_once(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        a, b = _pair()  # b does not read yet
        reclaims: list[float] = []
        chan = snd.channel(SocketTransport(a), lambda: reclaims.append(time.monotonic()))
        lines = _lines(50000)  # more than a socket pair's buffer holds
        for line in lines:
            snd.submit(chan, line)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if reclaims:
                break
        await asyncio.sleep(0.05)
        assert len(reclaims) == 1  # asked once, however many responses were kept back
        assert chan.busy()
        kept = chan.settle()
        assert kept and not chan.busy()
        got = _drain(b)
        assert got + kept == b"".join(lines)  # nothing lost, nothing twice, in order
        # after a reclaim, what is handed next is sent again (and kept, and asked for, anew)
        more = _lines(50000)
        for line in more:
            snd.submit(chan, line)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(reclaims) == 2:
                break
        assert len(reclaims) == 2
        kept = chan.settle()
        assert _drain(b) + kept == b"".join(more)
        chan.release()
        snd.stop()
        a.close()
        b.close()

    asyncio.run(run())


def test_a_peer_that_has_gone_drops_the_rest_without_an_error(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        a, b = _pair()
        chan = snd.channel(SocketTransport(a), lambda: None)
        b.close()
        for line in _lines(1000):
            snd.submit(chan, line)
        assert chan.settle() == b""
        assert not chan.busy()
        chan.release()
        snd.stop()
        a.close()

    asyncio.run(run())


def test_release_closes_the_duplicate_and_leaves_the_transports_socket(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        a, b = _pair()
        chan = snd.channel(SocketTransport(a), lambda: None)
        assert chan.fd != a.fileno()
        snd.submit(chan, b"last")
        chan.release()
        chan.release()  # twice is once
        with pytest.raises(OSError):
            os.fstat(chan.fd)
        os.fstat(a.fileno())
        assert _drain(b) == b"last"
        # the transport's own descriptor closing first does not cut the channel off
        a2, b2 = _pair()
        chan2 = snd.channel(SocketTransport(a2), lambda: None)
        a2.close()
        snd.submit(chan2, b"after the loop closed its descriptor")
        assert chan2.settle() == b""
        chan2.release()
        assert _drain(b2) == b"after the loop closed its descriptor"
        snd.stop()
        a.close()
        b.close()
        b2.close()

    asyncio.run(run())


def test_no_channel_over_tls_or_without_a_socket(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        a, b = _pair()
        assert snd.channel(SocketTransport(a, sslcontext=object()), lambda: None) is None
        assert snd.channel(SocketTransport(None), lambda: None) is None
        snd.stop()
        a.close()
        b.close()

    asyncio.run(run())


def test_many_connections_interleaved_each_get_their_own_bytes_in_order(twin: str) -> None:
    async def run() -> None:
        snd = sender_class(twin)()
        pairs = [_pair() for _ in range(16)]
        received: dict[int, list[bytes]] = {i: [] for i in range(16)}
        readers = [
            threading.Thread(target=lambda i=i, b=b: received[i].append(_drain(b, 1.0)))
            for i, (_, b) in enumerate(pairs)
        ]
        for r in readers:
            r.start()
        chans = [snd.channel(SocketTransport(a), lambda: None) for a, _ in pairs]
        rng = random.Random(7)
        sent: dict[int, list[bytes]] = {i: [] for i in range(16)}
        for n in range(20000):
            i = rng.randrange(16)
            data = b"c%02d-%06d;" % (i, n)
            sent[i].append(data)
            snd.submit(chans[i], data)
        kept = [chan.settle() for chan in chans]
        for chan in chans:
            chan.release()
        for r in readers:
            r.join()
        for i in range(16):
            assert received[i][0] + kept[i] == b"".join(sent[i])
        snd.stop()
        for a, b in pairs:
            a.close()
            b.close()

    asyncio.run(run())


# -- behind a server --------------------------------------------------------------------------


async def _answer(req: Any) -> HttpResponse:
    body = await req.read()
    size = int(req.query.partition("=")[2] or "0")
    payload = req.path.encode() + b"|" + bytes(body[:32]) + b"|" + b"z" * size
    return HttpResponse(200, [payload], "text/plain")


def drained(snd: Any) -> bool:
    """Whether the compiled sender has taken every job it was handed (one read of its
    counts, so the two numbers belong together)."""
    queued, sent, _ = snd.counts()
    return bool(queued == sent)


class LoadedLoop:
    """A loop thread whose loop counts as loaded (``load``), a sender of the ``sender_twin``,
    and the errors the loop reported; a subclass starts ``server`` there (it has ``stop``)."""

    server: Any

    def __init__(self, sender_twin: str) -> None:
        self.twin = sender_twin
        self.lt = LoopThread()
        self.load = Load(True)
        self.sender = sender_class(sender_twin)()
        self.errors: list[Any] = []
        self.lt.loop.set_exception_handler(lambda loop, ctx: self.errors.append(ctx))

    def close(self) -> None:
        self.lt.run(self.server.stop(1.0))
        self.lt.close()
        self.sender.stop()
        assert not self.errors, self.errors


class Served(LoadedLoop):
    """A native HTTP server on a loop thread whose loop counts as loaded, with a sender."""

    def __init__(self, protocol: str, sender_twin: str) -> None:
        super().__init__(sender_twin)
        self.server = self.lt.run(
            start_http_native(
                _answer, "127.0.0.1", 0, protocol_class=twin_class(protocol), busy=self.load
            )
        )
        self.server.service.sender = self.sender
        self.port = self.server.port


@pytest.fixture(params=["pure", "compiled"])
def served(request: pytest.FixtureRequest) -> Any:
    name = str(request.param)
    s = Served(name, name)
    yield s
    s.close()


def test_a_loaded_server_hands_responses_to_the_sender_and_each_arrives(served: Served) -> None:
    conns = [Conn(served.port) for _ in range(8)]
    try:
        for rnd in range(30):
            for i, c in enumerate(conns):  # eight requests in flight at once
                c.send(_get(f"/r{rnd}c{i}", extra=b"X: 1\r\n"))
            for i, c in enumerate(conns):
                resp = c.response()
                assert resp.status == 200 and resp.body == f"/r{rnd}c{i}||".encode()
        # pipelined: several requests of one connection in one pass, answered in order
        for c in conns:
            c.send(b"".join(_get(f"/p{k}") for k in range(10)))
        for c in conns:
            assert [c.response().body for _ in range(10)] == [
                f"/p{k}||".encode() for k in range(10)
            ]
        # the sender took them (it counts a job once its send returned, which may be after
        # the client read the answer); and the loop writes again when the load goes
        if served.sender.counts() != (0, 0, 0):
            wait_until(lambda: drained(served.sender), 5)
            queued, sent, _ = served.sender.counts()
            assert queued == sent >= 8 * 30
        served.load.is_loaded = False
        for i, c in enumerate(conns):
            c.send(_get(f"/idle{i}"))
            assert c.response().body == f"/idle{i}||".encode()
    finally:
        for c in conns:
            c.__exit__(None, None, None)


def test_a_client_that_stops_reading_gets_every_response_in_order_later(served: Served) -> None:
    """Thousands of pipelined requests whose answers the client does not read: the socket
    fills, the sender keeps the rest back, the loop takes it over (and pauses reading); when
    the client reads, everything comes, in order, once. Another client is served meanwhile."""
    n = 3000
    with Conn(served.port, timeout=30.0) as slow, Conn(served.port) as other:
        requests = b"".join(_get(f"/s{k}?size=8000") for k in range(n))
        writer = threading.Thread(target=slow.send, args=(requests,))
        writer.start()
        time.sleep(0.5)  # the server answers into a socket nobody reads
        for k in range(20):
            other.send(_get(f"/o{k}"))
            assert other.response().body == f"/o{k}||".encode()
        for k in range(n):
            resp = slow.response()
            assert resp.status == 200
            assert resp.body == f"/s{k}||".encode() + b"z" * 8000, k
        writer.join(30)
        assert not writer.is_alive()


def test_a_held_response_then_close_arrives_before_the_end_of_the_connection(
    served: Served,
) -> None:
    for _ in range(20):
        with Conn(served.port) as c:
            c.send(_get("/a") + _get("/bye", extra=b"Connection: close\r\n"))
            assert c.response().body == b"/a||"
            last = c.response()
            assert last.body == b"/bye||" and last.headers.get("connection") == "close"
            assert c.closed()


def test_clients_leaving_at_any_point_leave_the_server_serving(served: Served) -> None:
    """Clients close (or reset) after sending, mid-request, after part of the answers, while
    the loop hands answers to the sender; the server answers the others and stays up."""
    rng = random.Random(11)
    for rnd in range(40):
        leaving = []
        for k in range(6):
            c = Conn(served.port)
            how = rng.randrange(4)
            if how == 0:  # sends, leaves at once
                c.send(b"".join(_get(f"/g{k}") for _ in range(5)))
            elif how == 1:  # half a request
                c.send(_get(f"/g{k}")[:9])
            elif how == 2:  # reads one answer of several, leaves
                c.send(b"".join(_get(f"/g{k}?size=3000") for _ in range(8)))
                c.response()
            else:  # resets
                c.send(_get(f"/g{k}"))
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
            leaving.append(c)
        with Conn(served.port) as stays:
            for c in leaving:
                c.__exit__(None, None, None)
            for k in range(5):
                stays.send(_get(f"/stay{rnd}-{k}"))
                assert stays.response().body == f"/stay{rnd}-{k}||".encode()
    # every connection ended: nothing left open
    wait_until(lambda: not served.server.service.connections, 5)


def test_the_threads_cpu_time_is_the_loops_in_its_look_back(twin: str) -> None:
    """A loaded loop's look back (busypoll.py) counts the thread's CPU time as its own: the
    thread does the loop's work."""
    from tritonlite.frontends.native import loop_cpu
    from tritonlite.options import ServerOptions

    async def run() -> None:
        snd = sender_class(twin)()
        assert snd.cpu_ns() == 0  # not started
        a, b = _pair()
        reader = threading.Thread(target=_drain, args=(b, 0.5))
        reader.start()
        chan = snd.channel(SocketTransport(a), lambda: None)
        for line in _lines(30000):
            snd.submit(chan, line)
        chan.settle()
        chan.release()
        reader.join()
        assert (snd.cpu_ns() > 0) is (twin == "compiled")
        snd.stop()
        a.close()
        b.close()

    asyncio.run(run())
    off = ServerOptions((Path("."),), http_send_thread=False, grpc_send_thread=False)
    assert loop_cpu(off) is time.thread_time_ns
    shared = sender.shared()
    cpu = loop_cpu(ServerOptions((Path("."),)))
    before = time.thread_time_ns() + shared.cpu_ns()
    now = cpu()
    assert before <= now <= time.thread_time_ns() + shared.cpu_ns()

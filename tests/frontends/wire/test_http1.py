"""The native HTTP/1.1 server over raw loopback sockets, on both twins of ``Http1Protocol``.

A small handler echoes what it was given (method, path, query, headers, body), sleeps on
``/slow``, answers without reading on ``/noread`` and streams on ``/stream``; ``/v2/...`` goes
to the real router (``app.make_dispatch``) over a stand-in core that is live and ready.
"""

from __future__ import annotations

import asyncio
import contextvars
import gzip
import os
import socket
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from conftest import wait_until
from test_http1_support import Conn, LoopThread, tls_conn

from tritonlite.contracts.errors import TritonliteError
from tritonlite.frontends.base.http_call import HttpError, HttpResponse, HttpStream, StreamWriter
from tritonlite.frontends.base.http_errors import STATUS, error
from tritonlite.frontends.http.app import make_dispatch
from tritonlite.frontends.wire import _http1_py, http1
from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native

pytestmark = pytest.mark.timeout(60)

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"


def _compiled() -> Any:
    try:
        from tritonlite.frontends.wire import _http1_c
    except ImportError as exc:
        if REQUIRE:
            raise AssertionError(
                "TRITONLITE_REQUIRE_EXTENSIONS=1 but _http1_c is not built"
            ) from exc
        return None
    return _http1_c


COMPILED = _compiled()
NOT_BUILT = "compiled twin tritonlite.frontends.wire._http1_c is not built (pip install -e .)"


def twin_class(name: str) -> Any:
    if name == "pure":
        return _http1_py.Http1Protocol
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED.Http1Protocol


class StandInCore:
    exiting = False

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return True


ROUTER = make_dispatch(StandInCore())  # type: ignore[arg-type]


async def _events(out: StreamWriter) -> None:
    for i in range(3):
        await out.write(b"data: %d\n\n" % i)


async def _until_gone(req: Any) -> HttpResponse:
    while not req.disconnected():
        await asyncio.sleep(0.01)
    GONE.set()
    return HttpResponse(200, [b"gone"], "text/plain")


GONE = threading.Event()
# Set when a handler starts on a path: what a test waits for instead of sleeping.
ENTERED: defaultdict[str, threading.Event] = defaultdict(threading.Event)


async def handler(req: Any) -> HttpResponse | HttpStream:
    path = req.path
    ENTERED[path].set()
    if path == "/until-gone":
        return await _until_gone(req)
    if path.startswith("/v2/"):
        return await ROUTER(req)
    if path == "/noread":
        return HttpResponse(200, [b"not read"], "text/plain")
    if path == "/stream":
        return HttpStream(200, "text/event-stream", _events)
    if path == "/slow":
        await asyncio.sleep(float(req.query.partition("=")[2] or "0.2"))
    try:
        body = await req.read()
    except HttpError as exc:
        return error(exc.status, exc.message)
    except TritonliteError as exc:
        return error(STATUS[exc.code], exc.message)
    doc = {
        "method": req.method,
        "path": path,
        "query": req.query,
        "version": list(req.version),
        "length": len(body),
        "body": bytes(body[:64]).decode("latin-1"),
        "x_test": req.headers.get("X-Test"),
        "peer": req.peer[0],
    }
    return HttpResponse(200, [orjson.dumps(doc)], "application/json", {"X-Echo": "1"})


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(params=["pure", "compiled"])
def twin(request: pytest.FixtureRequest) -> Any:
    return twin_class(request.param)


Serve = Callable[..., NativeHttpServer]


@pytest.fixture()
def serve(loop_thread: LoopThread, twin: Any) -> Iterator[Serve]:
    """``serve(**limits)`` starts a server on the twin under test; stopped at the end."""
    started: list[NativeHttpServer] = []

    def start(handler_: Any = handler, **limits: Any) -> NativeHttpServer:
        server = loop_thread.run(
            start_http_native(
                handler_, "127.0.0.1", 0, limits=HttpLimits(**limits), protocol_class=twin
            )
        )
        started.append(server)
        return server

    yield start
    for s in started:
        loop_thread.run(s.stop(1.0))


def _post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n"
        % (path.encode(), len(body), extra)
    ) + body


def _get(path: str, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return b"GET %s HTTP/%s\r\nHost: t\r\n%s\r\n" % (path.encode(), version, extra)


def _json(resp: Any) -> Any:
    return orjson.loads(resp.body)


def test_twins_are_what_they_claim() -> None:
    assert http1.Http1Protocol in (
        _http1_py.Http1Protocol,
        getattr(COMPILED, "Http1Protocol", None),
    )
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    assert COMPILED.__file__ != _http1_py.__file__
    assert not isinstance(COMPILED.Http1Protocol.__dict__.get("on_body"), type(lambda: 0))
    assert http1.ACCELERATED == (os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1")


# -- keep-alive, pipelining, framing -------------------------------------------------------------
def test_keep_alive_serves_many_requests_on_one_connection(serve: Serve) -> None:
    port = serve().port
    with Conn(port) as c:
        for i in range(3):
            c.send(_post(f"/echo/{i}?a=b", b"x" * i, b"X-Test: yes\r\n"))
            r = c.response()
            assert r.status == 200 and "connection" not in r.headers
            assert r.headers["x-echo"] == "1"
            assert r.headers["content-type"] == "application/json"
            doc = _json(r)
            assert doc["path"] == f"/echo/{i}" and doc["query"] == "a=b"
            assert doc["length"] == i and doc["x_test"] == "yes"
            assert doc["version"] == [1, 1] and doc["peer"] == "127.0.0.1"


def test_http10_closes_unless_asked_to_keep_alive(serve: Serve) -> None:
    port = serve().port
    with Conn(port) as c:
        c.send(_get("/a", version=b"1.0"))
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert _json(r)["version"] == [1, 0]
        assert c.closed()
    with Conn(port) as c:
        for _ in range(2):
            c.send(_get("/a", b"Connection: keep-alive\r\n", version=b"1.0"))
            r = c.response()
            assert r.status == 200 and r.headers["connection"] == "keep-alive"


def test_connection_close_from_the_client_is_honoured(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_get("/a", b"Connection: close\r\n") + _get("/never"))
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert c.closed() and c.buf == b""


def test_pipelined_requests_in_one_send_are_answered_in_order(serve: Serve) -> None:
    with Conn(serve().port) as c:
        # the first is the slowest: its answer must still come first
        c.send(
            _get("/slow?d=0.2") + _post("/b", b"12345") + _get("/slow?d=0.05") + _post("/d", b"")
        )
        paths = [_json(c.response())["path"] for _ in range(4)]
        assert paths == ["/slow", "/b", "/slow", "/d"]
        c.send(_get("/e"))
        assert _json(c.response())["path"] == "/e"


def test_many_pipelined_requests_pause_reading_and_all_are_answered(serve: Serve) -> None:
    with Conn(serve(max_pipeline=2).port) as c:
        c.send(b"".join(_post(f"/p{i}", b"b" * i) for i in range(40)))
        for i in range(40):
            doc = _json(c.response())
            assert doc["path"] == f"/p{i}" and doc["length"] == i


def test_body_arriving_byte_by_byte(serve: Serve) -> None:
    with Conn(serve().port) as c:
        data = _post("/slowly", b"abcdefgh")
        for i in range(len(data)):
            c.send(data[i : i + 1])
        doc = _json(c.response())
        assert doc["body"] == "abcdefgh"


def test_chunked_request_body(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(
            b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer-A: 1\r\n\r\n"
        )
        r = c.response()
        assert r.status == 200 and "connection" not in r.headers
        assert _json(r)["body"] == "hello world"
        c.send(_get("/after"))
        assert _json(c.response())["path"] == "/after"


def test_chunked_and_content_length_is_framed_by_chunks_then_closed(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(
            b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert _json(r)["body"] == "abc"
        assert c.closed()


def test_gzip_and_deflate_bodies_are_undone_before_the_handler(serve: Serve) -> None:
    with Conn(serve().port) as c:
        for enc, data, plain in (
            ("gzip", gzip.compress(b"zipped"), "zipped"),
            ("deflate", zlib.compress(b"deflated"), "deflated"),
            ("deflate", zlib.compress(b"raw")[2:-4], "raw"),
        ):
            c.send(_post("/z", data, f"Content-Encoding: {enc}\r\n".encode()))
            assert _json(c.response())["body"] == plain
        c.send(_post("/z", b"not gzip at all", b"Content-Encoding: gzip\r\n"))
        r = c.response()
        assert r.status == 400 and "unable to decompress" in _json(r)["error"]


def test_decompressed_body_over_the_limit_is_413(serve: Serve) -> None:
    with Conn(serve(max_body=1000).port) as c:
        c.send(_post("/z", gzip.compress(b"0" * 5000), b"Content-Encoding: gzip\r\n"))
        r = c.response()
        assert r.status == 413 and "1000 byte limit" in _json(r)["error"]


def test_streamed_response_is_chunked(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_get("/stream"))
        r = c.response()
        assert r.status == 200 and r.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in r.headers
        assert r.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        c.send(_get("/after"))
        assert c.response().status == 200


def test_head_gets_no_body_and_the_router_answers_405(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(b"HEAD /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        r = c.response(head_only=True)
        assert r.status == 405 and int(r.headers["content-length"]) > 0
        c.send(_get("/v2/health/live"))
        r = c.response()
        assert r.status == 200 and r.body == b""


def test_an_upgrade_request_is_answered_as_http11_then_closed(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_get("/up", b"Connection: Upgrade\r\nUpgrade: h2c\r\n") + b"PRI * HTTP/2.0\r\n")
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert "upgrade" not in r.headers
        assert c.closed()


def test_a_handler_that_raises_is_500_and_the_connection_closes(serve: Serve) -> None:
    async def broken(req: Any) -> HttpResponse:
        raise RuntimeError("handler bug")

    with Conn(serve(broken).port) as c:
        c.send(_get("/x"))
        r = c.response()
        assert r.status == 500 and "handler bug" in _json(r)["error"]
        assert r.headers["connection"] == "close" and c.closed()


def test_a_half_closed_client_is_answered(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_post("/half", b"abc"))
        c.sock.shutdown(socket.SHUT_WR)
        r = c.response()
        assert r.status == 200 and _json(r)["body"] == "abc"
        assert c.closed()


def test_a_handler_sees_the_client_leave(serve: Serve) -> None:
    GONE.clear()
    ENTERED["/until-gone"].clear()
    with Conn(serve().port) as c:
        c.send(_get("/until-gone"))
        assert ENTERED["/until-gone"].wait(5)  # the handler runs; now the client leaves
    assert GONE.wait(5)


def test_router_404_405(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_get("/v2/nothing/here"))
        r = c.response()
        assert r.status == 404 and _json(r) == {"error": "Not Found"}
        c.send(_post("/v2/health/live", b"{}"))
        r = c.response()
        assert r.status == 405 and _json(r) == {"error": "Method Not Allowed"}


# -- Expect ----------------------------------------------------------------------------------
def test_expect_100_continue(serve: Serve) -> None:
    with Conn(serve().port) as c:
        for _ in range(2):
            c.send(
                b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
            )
            assert c.raw(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
            c.send(b"body")
            assert _json(c.response())["body"] == "body"


def test_expect_on_a_request_answered_without_reading_closes(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(
            b"POST /noread HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        r = c.response()  # no 100 Continue: the final answer comes first
        assert r.status == 200 and r.body == b"not read"
        assert r.headers["connection"] == "close"
        assert c.closed()


def test_unknown_expectation_is_417(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(
            b"POST /v2/health/live HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
            b"Expect: gimme\r\n\r\n"
        )
        r = c.response()
        assert r.status == 417 and _json(r) == {"error": "Unknown Expect: gimme"}


# -- limits --------------------------------------------------------------------------------
def test_content_length_over_the_limit_is_413_before_the_body(serve: Serve) -> None:
    with Conn(serve(max_body=1000).port) as c:
        c.send(b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n")  # no body
        r = c.response()
        assert r.status == 413 and r.headers["connection"] == "close"
        assert "1000 byte limit" in _json(r)["error"]
        assert c.closed()


def test_content_length_at_the_limit_is_served(serve: Serve) -> None:
    with Conn(serve(max_body=1000).port) as c:
        c.send(_post("/big", b"x" * 1000))
        assert _json(c.response())["length"] == 1000


def test_chunked_body_over_the_limit_is_413(serve: Serve) -> None:
    with Conn(serve(max_body=10).port) as c:
        c.send(
            b"POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"8\r\n12345678\r\n8\r\n12345678\r\n"
        )
        r = c.response()
        assert r.status == 413 and r.headers["connection"] == "close"
        assert c.closed()


def test_headers_over_the_size_limit_are_431(serve: Serve) -> None:
    port = serve(max_header_bytes=2048).port
    with Conn(port) as c:
        c.send(_get("/h", b"X-Big: " + b"v" * 4000 + b"\r\n"))
        r = c.response()
        assert r.status == 431 and r.headers["connection"] == "close"
        assert "error" in _json(r)
        assert c.closed()
    with Conn(port) as c:  # one header line that never ends
        c.send(b"GET / HTTP/1.1\r\nX-Endless: ")
        for _ in range(10):
            try:
                c.send(b"v" * 1024)
            except OSError:
                break
        assert c.response().status == 431


def test_pipelined_requests_past_the_header_limit_then_a_partial_head_are_served(
    serve: Serve,
) -> None:
    """The header limit counts the head being read, not the requests before it in the same
    read: llhttp parses them all (the first is chunked, so the fast path leaves the rest to
    it), and the last head arrives in two parts."""
    port = serve(max_header_bytes=2048).port
    chunked = (
        b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    )
    gets = b"".join(_get(f"/g{i}", b"X-Pad: " + b"p" * 80 + b"\r\n") for i in range(40))
    assert len(gets) > 2 * 2048
    with Conn(port) as c:
        c.send(chunked + gets + b"GET /last HTTP/1.1\r\nHost: t\r\nX-A: ")
        paths = [_json(c.response())["path"] for _ in range(41)]  # (the head is half read)
        assert paths == ["/c"] + [f"/g{i}" for i in range(40)]
        c.send(b"b\r\n\r\n")
        assert _json(c.response())["path"] == "/last"
    with Conn(port) as c:  # a head that never ends after them is still refused: its open
        # line counts in the read it began in
        c.send(chunked + gets + b"GET /last HTTP/1.1\r\nX-Endless: " + b"v" * 3000)
        statuses = [c.response().status for _ in range(42)]
        assert statuses == [200] * 41 + [431]


def test_too_many_headers_are_431(serve: Serve) -> None:
    with Conn(serve(max_headers=10).port) as c:
        c.send(_get("/h", b"".join(b"X-%d: v\r\n" % i for i in range(20))))
        assert c.response().status == 431


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x01\x02\x03\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nBad Header Name: x\r\n\r\n",
        b"G\x7fT / HTTP/1.1\r\n\r\n",
    ],
)
def test_garbage_is_400_with_a_json_error_and_close(serve: Serve, garbage: bytes) -> None:
    with Conn(serve().port) as c:
        c.send(garbage)
        r = c.response()
        assert r.status == 400 and r.headers["connection"] == "close"
        assert "error" in _json(r)
        assert c.closed()


def test_garbage_after_a_good_request_answers_the_good_one_first(serve: Serve) -> None:
    with Conn(serve().port) as c:
        c.send(_get("/good") + b"\x00garbage\r\n\r\n")
        assert _json(c.response())["path"] == "/good"
        assert c.response().status == 400
        assert c.closed()


# -- timeouts --------------------------------------------------------------------------------
def test_slow_headers_time_out_with_408(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.3).port) as c:
        c.send(b"GET /slowloris HTTP/1.1\r\nHost: t\r\n")
        start = time.monotonic()
        r = c.response()
        assert r.status == 408 and r.headers["connection"] == "close"
        assert time.monotonic() - start < 5
        assert c.closed()


def test_a_connection_that_says_nothing_is_closed(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.3).port) as c:
        assert c.closed(5.0) and c.buf == b""


def test_slow_body_times_out_with_408(serve: Serve) -> None:
    with Conn(serve(body_timeout_s=0.3).port) as c:
        c.send(b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n123")
        r = c.response()
        assert r.status == 408 and r.headers["connection"] == "close"
        assert c.closed()


def test_idle_keep_alive_connection_is_closed(serve: Serve) -> None:
    with Conn(serve(keepalive_timeout_s=0.3).port) as c:
        c.send(_get("/a"))
        assert c.response().status == 200
        assert c.closed(5.0)


def test_a_slow_handler_is_not_timed_out(serve: Serve) -> None:
    with Conn(serve(header_timeout_s=0.1, body_timeout_s=0.1, keepalive_timeout_s=0.1).port) as c:
        c.send(_get("/slow?d=0.5"))
        assert c.response().status == 200


# -- connection cap, drain -------------------------------------------------------------------
def test_over_the_connection_cap_health_is_answered_and_the_rest_refused(serve: Serve) -> None:
    port = serve(max_connections=2).port
    with Conn(port) as a, Conn(port) as b:
        for c in (a, b):
            c.send(_get("/a"))
            assert c.response().status == 200
        with Conn(port) as c:
            c.send(_get("/v2/health/live"))
            r = c.response()
            assert r.status == 200 and r.headers["connection"] == "close"
            assert c.closed()
        with Conn(port) as c:
            c.send(_get("/work"))
            r = c.response()
            assert r.status == 503 and r.headers["connection"] == "close"
            assert "too many open connections" in _json(r)["error"]
        a.send(_get("/a"))  # the connections under the cap serve on
        assert a.response().status == 200
    with Conn(port) as c:  # and once they closed, a new one is under the cap again
        c.send(_get("/work"))
        r = c.response()
        assert r.status == 200


def test_stop_finishes_in_flight_refuses_new_and_closes(
    loop_thread: LoopThread, serve: Serve
) -> None:
    server = serve()
    port = server.port
    with Conn(port) as busy, Conn(port) as idle, Conn(port) as kept:
        kept.send(_get("/a"))
        assert kept.response().status == 200
        idle.send(_get("/a"))
        assert idle.response().status == 200
        ENTERED["/slow"].clear()
        busy.send(_get("/slow?d=0.5"))
        assert ENTERED["/slow"].wait(5)  # the slow request is being handled
        stopping = asyncio.run_coroutine_threadsafe(server.stop(5.0), loop_thread.loop)
        assert idle.closed()
        r = busy.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        stopping.result(10)
        assert kept.closed(1.0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_new_request_during_drain_gets_503(loop_thread: LoopThread, serve: Serve) -> None:
    server = serve()
    with Conn(server.port) as busy:
        ENTERED["/slow"].clear()
        busy.send(_get("/slow?d=0.6") + b"POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\n12")
        assert ENTERED["/slow"].wait(5)
        stopping = asyncio.run_coroutine_threadsafe(server.stop(5.0), loop_thread.loop)
        wait_until(lambda: server.service.draining, 5)  # the stop has begun
        busy.send(b"345" + _get("/late"))  # a body already arriving finishes and is answered
        assert _json(busy.response())["path"] == "/slow"
        assert _json(busy.response())["body"] == "12345"
        r = busy.response()
        assert r.status == 503 and r.headers["connection"] == "close"
        assert busy.closed()
        stopping.result(10)


def test_over_tls(loop_thread: LoopThread, twin: Any, tmp_path: Any) -> None:
    from support.certs import make_certs

    from tritonlite.frontends.tls import server_context

    certs = make_certs(tmp_path)
    ctx = server_context(certs["server.pem"], certs["server.key"])
    server = loop_thread.run(
        start_http_native(handler, "127.0.0.1", 0, ssl_context=ctx, protocol_class=twin)
    )
    try:
        with tls_conn(server.port, certs["ca.pem"]) as c:
            for i in range(2):
                c.send(_post(f"/tls{i}", b"secret"))
                doc = _json(c.response())
                assert doc["path"] == f"/tls{i}" and doc["body"] == "secret"
    finally:
        loop_thread.run(server.stop(1.0))


# -- the protocol without a listener ---------------------------------------------------------
class FakeTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: list[bytes]) -> None:
        for p in parts:
            self.out += p

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def test_behind_the_one_port_detector(loop_thread: LoopThread, twin: Any) -> None:
    from tritonlite.frontends.wire.detect import Detect

    service = http1.HttpService(handler, HttpLimits(), protocol_class=twin)

    async def listen() -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(
            lambda: Detect(service.protocol, asyncio.Protocol), "127.0.0.1", 0
        )

    server = loop_thread.run(listen())
    try:
        with Conn(server.sockets[0].getsockname()[1]) as c:
            c.send(b"G")  # the detector decides on its first byte; the rest comes later
            c.send(b"ET /one HTTP/1.1\r\nHost: t\r\n\r\n" + _post("/two", b"2"))
            assert _json(c.response())["path"] == "/one"
            assert _json(c.response())["body"] == "2"
    finally:
        server.close()
        loop_thread.run(service.drain(1.0))
        loop_thread.run(server.wait_closed())


def test_a_detector_can_hand_over_a_connection_with_its_first_bytes(twin: Any) -> None:
    async def run() -> bytes:
        service = http1.HttpService(handler, HttpLimits(), protocol_class=twin)
        proto = service.protocol()
        t = FakeTransport()
        proto.connection_made(t)
        proto.data_received(_get("/first") + b"GET /sec")
        proto.data_received(b"ond HTTP/1.1\r\n\r\n")
        for _ in range(100):
            await asyncio.sleep(0)
            if t.out.count(b"HTTP/1.1 200") == 2:
                break
        proto.connection_lost(None)
        return bytes(t.out)

    out = asyncio.run(run())
    assert b'"path":"/first"' in out and b'"path":"/second"' in out


# -- serving starts in data_received: no task unless the handler has to wait ----------------
_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("_SEEN", default="")


async def _task_and_context(req: Any) -> HttpResponse:
    """Answers which task it ran in (before and after ``?wait=...``) and what an earlier
    request on the connection left in a context variable."""
    before = asyncio.current_task() is not None
    ENTERED[req.path].set()
    wait = req.query.partition("=")[2]
    if wait == "yield":
        await asyncio.sleep(0)  # a bare yield to the loop
    elif wait:
        await asyncio.sleep(float(wait))  # a future
    body = await req.read()
    left = _SEEN.get()
    _SEEN.set(req.path)
    doc = {
        "task_before": before,
        "task_after": asyncio.current_task() is not None,
        "left": left,
        "length": len(body),
    }
    return HttpResponse(200, [orjson.dumps(doc)], "application/json")


def test_an_answer_without_waiting_runs_outside_any_task(serve: Serve) -> None:
    with Conn(serve(_task_and_context).port) as c:
        for path in ("/a", "/b?wait=yield", "/c?wait=0.01", "/d"):
            c.send(_post(path, b"xyz"))
            doc = _json(c.response())
            waits = "wait=" in path
            assert doc == {"task_before": False, "task_after": waits, "left": "", "length": 3}


def test_pipelined_answers_in_order_when_some_wait(serve: Serve) -> None:
    with Conn(serve(_task_and_context).port) as c:
        paths = ["/a", "/b?wait=0.05", "/c", "/d?wait=yield", "/e"]
        c.send(b"".join(_post(p, b"12") for p in paths))
        docs = [_json(c.response()) for _ in paths]
        assert [d["length"] for d in docs] == [2] * len(paths)
        # one serving run answers them in turn: each sees the one before it
        assert [d["left"] for d in docs] == ["", "/a", "/b", "/c", "/d"]


def test_a_body_that_arrives_later_is_waited_for(serve: Serve) -> None:
    with Conn(serve(_task_and_context).port) as c:
        head = b"POST /late HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\n"
        ENTERED["/late"].clear()
        c.send(head + b"ab")
        assert ENTERED["/late"].wait(5)  # the handler started before the rest of the body
        c.send(b"cd")
        doc = _json(c.response())
        assert doc["length"] == 4 and doc["task_before"] is False and doc["task_after"] is True

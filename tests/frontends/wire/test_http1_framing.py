"""RFC 9112 section 6 (message body framing) on both twins of ``Http1Protocol``, over raw
loopback sockets: every framing rule llhttp's leniencies could let through, and the bound on
a chunked body's framing (chunk extensions)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from test_http1 import Serve, _get, handler, twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.wire.http1 import HttpLimits, NativeHttpServer, start_http_native

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(params=["pure", "compiled"])
def serve(request: pytest.FixtureRequest, loop_thread: LoopThread) -> Iterator[Serve]:
    """``serve(**limits)``: test_http1's echo server on the twin under test."""
    twin = twin_class(request.param)
    started: list[NativeHttpServer] = []

    def start(**limits: Any) -> NativeHttpServer:
        server = loop_thread.run(
            start_http_native(
                handler, "127.0.0.1", 0, limits=HttpLimits(**limits), protocol_class=twin
            )
        )
        started.append(server)
        return server

    yield start
    for s in started:
        loop_thread.run(s.stop(1.0))


_CHUNKED_ABC = b"3\r\nabc\r\n0\r\n\r\n"


def _post_te(te: bytes, body: bytes = _CHUNKED_ABC, extra: bytes = b"", v: bytes = b"1.1") -> bytes:
    return b"POST /c HTTP/%s\r\nHost: t\r\n%sTransfer-Encoding: %s\r\n\r\n%s" % (
        v,
        extra,
        te,
        body,
    )


def _refused(c: Conn, status: int) -> dict[str, Any]:
    r = c.response()
    assert r.status == status, r
    assert r.headers["connection"] == "close"
    assert c.closed()
    doc: dict[str, Any] = orjson.loads(r.body)
    return doc


@pytest.mark.parametrize("te", [b"xchunked", b"identity", b"chunkedx", b"gzip", b"chunked;x"])
def test_final_coding_not_chunked_is_400_and_closed_at_once(serve: Serve, te: bytes) -> None:
    """RFC 9112 6.1: the body's length cannot be known; answered at once, not at the body
    timeout, whatever follows."""
    with Conn(serve(body_timeout_s=30.0).port, timeout=5.0) as c:
        c.send(_post_te(te, b"abc"))
        assert "not chunked" in _refused(c, 400)["error"]


@pytest.mark.parametrize(
    "te",
    [
        b"chunked, gzip",  # chunked not last
        b"chunked, chunked",  # applied twice
        b"chunked\r\nTransfer-Encoding: chunked",  # two fields
        b"chunked\r\n  identity",  # obs-fold (RFC 9112 5.2)
        b"",
    ],
)
def test_other_bad_transfer_encodings_are_400(serve: Serve, te: bytes) -> None:
    with Conn(serve().port) as c:
        c.send(_post_te(te))
        _refused(c, 400)


def test_a_coding_before_chunked_is_501(serve: Serve) -> None:
    """gzip, chunked frames correctly, but nothing here undoes the gzip coding."""
    with Conn(serve().port) as c:
        c.send(_post_te(b"gzip, chunked"))
        assert "only chunked" in _refused(c, 501)["error"]


@pytest.mark.parametrize("te", [b"chunked", b"CHUNKED", b"Chunked "])
def test_chunked_in_any_case_is_served_and_kept_alive(serve: Serve, te: bytes) -> None:
    with Conn(serve().port) as c:
        c.send(_post_te(te) + _get("/next"))
        r = c.response()
        assert r.status == 200 and "connection" not in r.headers
        assert orjson.loads(r.body)["body"] == "abc"
        assert orjson.loads(c.response().body)["path"] == "/next"


def test_transfer_encoding_on_http10_is_served_then_closed(serve: Serve) -> None:
    """RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing."""
    with Conn(serve().port) as c:
        c.send(_post_te(b"chunked", extra=b"Connection: keep-alive\r\n", v=b"1.0"))
        r = c.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert c.closed()


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 3\r\nContent-Length: 3\r\n",  # more than one
        b"Content-Length: 3, 3\r\n",
        b"Content-Length: +3\r\n",
        b"Content-Length: -1\r\n",
        b"Content-Length: 0x3\r\n",
        b"Content-Length : 3\r\n",  # whitespace before the colon (RFC 9112 5.1)
        b"X-A: a\r\n b\r\nContent-Length: 3\r\n",  # obs-fold
    ],
)
def test_bad_content_lengths_are_400(serve: Serve, head: bytes) -> None:
    with Conn(serve().port) as c:
        c.send(b"POST /c HTTP/1.1\r\nHost: t\r\n%s\r\nabc" % head)
        _refused(c, 400)


@pytest.mark.parametrize(
    "body",
    [
        b"3\nabc\r\n0\r\n\r\n",  # bare LF after the size
        b"3\r\nabc\n0\r\n\r\n",  # bare LF after the data
        b"3 \r\nabc\r\n0\r\n\r\n",  # space after the size
        b"10000000000000000\r\n",  # size overflow
        b"-3\r\nabc\r\n0\r\n\r\n",
    ],
)
def test_bad_chunk_framing_is_400(serve: Serve, body: bytes) -> None:
    with Conn(serve().port) as c:
        c.send(_post_te(b"chunked", body))
        _refused(c, 400)


def test_a_long_chunk_extension_is_400_before_its_end(serve: Serve) -> None:
    """An extension that never ends is refused after about the header size limit, not read
    to its end (the client is still sending when the answer comes)."""
    with Conn(serve(max_header_bytes=4096).port, timeout=5.0) as c:
        c.send(_post_te(b"chunked", b"3;ext=" + b"e" * 1000))
        sent = 0
        try:
            while sent < 16 << 20:
                c.send(b"e" * 65536)
                sent += 65536
        except OSError:
            pass  # closed while we were sending: what was wanted
        assert sent < 16 << 20
        try:
            r = c.response()
        except (OSError, ConnectionError):
            return  # reset before the answer could be read (unread input at close)
        assert r.status == 400 and "chunked framing" in orjson.loads(r.body)["error"]


def test_one_byte_chunks_with_short_extensions_are_fine(serve: Serve) -> None:
    with Conn(serve(max_header_bytes=4096).port) as c:
        body = b"".join(b"1;a=b\r\n%c\r\n" % (97 + i % 26) for i in range(5000))
        c.send(_post_te(b"chunked", body + b"0\r\n\r\n"))
        r = c.response()
        assert r.status == 200 and orjson.loads(r.body)["length"] == 5000


def test_a_long_extension_on_every_chunk_is_400(serve: Serve) -> None:
    with Conn(serve(max_header_bytes=4096).port, timeout=5.0) as c:
        c.send(_post_te(b"chunked", b""))
        cut = False
        try:
            for _ in range(2000):
                c.send(b"1;x=" + b"y" * 2000 + b"\r\nz\r\n")
        except OSError:
            cut = True  # closed while we were sending
        assert cut
        try:
            r = c.response()
        except (OSError, ConnectionError):
            return
        assert r.status == 400

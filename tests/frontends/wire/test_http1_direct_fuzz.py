"""Seeded fuzz of large infer bodies read straight into their blocks (both twins of
``Http1Protocol``), through a transport that reads as uvloop's does: into a buffered
protocol's own buffer when the connection has made one its protocol (``_BodyReader``), else
one ``data_received`` per read, and nothing while reading is paused.

Pipelines mix large infer bodies (64 KiB to 200 KiB, Content-Length) with small requests of
every framing, in reads of random sizes; some are cut short, then the client's EOF. What must
hold for each: no exception escapes; every request before the cut is answered 200 in order with
its own body's digest (so llhttp resumed at each boundary, and no body took a byte of its
neighbour); a request cut mid-way gets a 4xx; the connection is closed at the end; and every
block has come back.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any

import orjson
import pytest
from test_http1 import FakeTransport, twin_class
from test_http1_fuzz import checked

from tritonlite.frontends.base.http_call import HttpError, HttpResponse
from tritonlite.frontends.base.http_errors import error
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService

pytestmark = pytest.mark.timeout(300)

SEED = 20261207
CASES = 1500  # per twin
BUDGET_S = 120.0  # per twin: the test fails rather than run on past this
LIMITS = HttpLimits(max_pipeline=4)
POOL = random.Random(SEED).randbytes(1 << 20)  # bodies are slices of this
READS = [1, 7, 100, 1000, 16384, 65536, 200_000, 1 << 22]


async def handler(req: Any) -> HttpResponse:
    try:
        body = await req.read()
    except HttpError as exc:
        return error(exc.status, exc.message)
    doc = {"n": len(body), "sha": hashlib.sha256(body).hexdigest(), "type": type(body).__name__}
    return HttpResponse(200, [orjson.dumps(doc)], "application/json")


class ReadingTransport(FakeTransport):
    """``FakeTransport`` with a protocol it delivers reads to, as uvloop's transport does."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: Any = None
        self.direct = 0  # bytes read into a buffered protocol's buffers

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol

    def read(self, data: bytes) -> int:
        """One read of at most ``data``'s bytes; how many were taken."""
        p = self.protocol
        get_buffer = getattr(p, "get_buffer", None)
        if get_buffer is None:
            p.data_received(data)
            return len(data)
        buf = memoryview(get_buffer(-1))
        n = min(len(buf), len(data))
        assert n > 0, "an empty read buffer"
        buf[:n] = data[:n]
        self.direct += n
        del buf  # the transport gives the buffer back before it reports the read
        p.buffer_updated(n)
        return n


def _request(rng: random.Random) -> tuple[bytes, bytes, bool]:
    """One request: its bytes, its body, and whether the connection goes on after it."""
    kind = rng.choice(["large", "large", "large", "small", "chunked", "get"])
    if kind == "get":
        return b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n", b"", True
    if kind == "chunked":
        body = POOL[: rng.randrange(0, 3000)]
        chunks = [body[i : i + 700] for i in range(0, len(body), 700)]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        head = b"POST /v2/models/m/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head + framed, body, True
    if kind == "small":
        n, path = rng.randrange(0, 5000), b"/v2/models/m/infer"
    else:
        n = rng.randrange(65536, 200_001)
        path = rng.choice([b"/v2/models/m/infer", b"/v2/models/m/versions/3/infer"])
    start = rng.randrange(0, len(POOL) - n)
    body = POOL[start : start + n]
    last = rng.random() < 0.08
    if last and rng.random() < 0.5:
        head = b"POST %s HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % (path, n)
    else:
        close = b"Connection: close\r\n" if last else b""
        head = b"POST %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n" % (path, close, n)
    return head + body, body, not last


def _pipeline(rng: random.Random) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Requests for one connection, and where each ends in it with its body."""
    data, ends = b"", []
    for _ in range(rng.randrange(1, 6)):
        req, body, more = _request(rng)
        data += req
        ends.append((len(data), body))
        if not more:
            break
    return data, ends


async def _serve(service: HttpService, data: bytes, rng: random.Random) -> tuple[bytes, bool, int]:
    proto = service.protocol()
    t = ReadingTransport()
    t.set_protocol(proto)
    proto.connection_made(t)
    pos = waits = 0
    while pos < len(data) and not t.closed:
        if t.paused:
            if proto._closing:
                break  # reading has stopped for good
            waits += 1
            assert waits < 10_000, "reading paused for good"
            await asyncio.sleep(0)
            continue
        pos += t.read(data[pos : pos + rng.choice(READS)])
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    if not t.closed:
        t.protocol.eof_received()
    for _ in range(500):
        if t.closed and proto._task is None:
            break
        await asyncio.sleep(0)
    t.protocol.connection_lost(None)
    await asyncio.sleep(0)
    return bytes(t.out), t.closed, t.direct


async def fuzz(twin: Any) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    escaped: list[Any] = []
    loop.set_exception_handler(lambda _loop, ctx: escaped.append(ctx))
    service = HttpService(handler, LIMITS, protocol_class=twin)
    blocks = service.recv_blocks
    rng = random.Random(SEED)
    counts = {"whole": 0, "cut": 0, "large": 0, "direct": 0}
    deadline = time.monotonic() + BUDGET_S
    for case in range(CASES):
        assert time.monotonic() < deadline, f"only {case} cases in {BUDGET_S} s"
        data, ends = _pipeline(rng)
        if rng.random() < 0.25:
            data = data[: rng.randrange(1, len(data))]
            counts["cut"] += 1
        else:
            counts["whole"] += 1
        whole = [body for end, body in ends if end <= len(data)]
        counts["large"] += sum(len(b) >= 65536 for b in whole)
        out, closed, direct = await _serve(service, data, rng)
        counts["direct"] += direct
        where = f"case {case}: {len(data)} bytes, {len(ends)} requests -> {out[:400]!r}"
        responses = checked(out, closed, escaped, where)
        assert len(responses) >= len(whole), where
        for (status, _, answer), body in zip(responses, whole):
            assert status == 200, where
            doc = orjson.loads(answer)
            assert (doc["n"], doc["sha"]) == (len(body), hashlib.sha256(body).hexdigest()), where
        for status, _, _ in responses[len(whole) :]:
            assert 400 <= status < 500, where  # the request the cut left incomplete
        assert blocks.lent() == 0, f"{where}: {blocks.lent()} blocks still lent"
    return counts


@pytest.mark.parametrize("name", ["pure", "compiled"])
def test_fuzz_large_bodies_in_random_reads(name: str) -> None:
    counts = asyncio.run(fuzz(twin_class(name)))
    assert counts["cut"] > 250 and counts["whole"] > 1000 and counts["large"] > 1500, counts
    # about half the large bodies' bytes came after the read that began them: straight in
    assert counts["direct"] > 80 << 20, counts

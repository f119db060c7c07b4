"""Seeded fuzz of ``Http1Protocol`` (both twins) through a fake transport.

More than 20,000 connections' worth of input per twin: well-formed pipelines (keep-alive,
HTTP/1.0, Content-Length and chunked bodies, gzip, Expect), inputs made malformed on purpose,
and random mutations of well-formed ones (byte flips, cuts, repeats, insertions, bare LFs),
fed in random pieces, then the client's EOF. What must hold for every input: no exception
escapes (the loop's exception handler records any), the output is a sequence of well-framed
responses, nothing is 5xx, well-formed input gets one 200 per request, malformed input gets
a 4xx with a JSON error and ``Connection: close``, and the connection is closed at the end.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from test_http1 import FakeTransport, twin_class

from tritonlite.contracts.errors import TritonliteError
from tritonlite.frontends.base.http_call import HttpError, HttpResponse
from tritonlite.frontends.base.http_errors import STATUS, error
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService

pytestmark = pytest.mark.timeout(600)

SEED = 20261204
CASES = 40_000  # per twin
BUDGET_S = 240.0  # per twin: the test fails rather than run on past this
LIMITS = HttpLimits(max_body=4096, max_header_bytes=2048, max_headers=32, max_pipeline=4)


async def handler(req: Any) -> HttpResponse:
    try:
        body = await req.read()
    except HttpError as exc:
        return error(exc.status, exc.message)
    except TritonliteError as exc:
        return error(STATUS[exc.code], exc.message)
    return HttpResponse(200, [b"%d" % len(body)], "text/plain")


# -- generators ----------------------------------------------------------------------------------
Rng = random.Random
_PATHS = [
    "/",
    "/v2",
    "/v2/models/add_sub/infer",
    "/a%20b/c?x=1&y=%ZZ",
    "/q?",
    "/" + "p" * 300,
    "/v2/models/m/versions/3/infer?trace=1",
    "/%E2%82%AC",
    "*",
]


def _body(rng: Rng) -> bytes:
    n = rng.choice([0, 1, 7, 100, 1000, 4000])
    return (bytes(rng.getrandbits(8) for _ in range(min(n, 64))) * (n // 64 + 1))[:n]


def valid_request(rng: Rng) -> tuple[bytes, bool]:
    """One well-formed request and whether the connection stays open after it."""
    method = rng.choice(["GET", "POST", "POST", "PUT", "DELETE"])
    version = rng.choice(["1.1", "1.1", "1.1", "1.0"])
    lines = [f"{method} {rng.choice(_PATHS)} HTTP/{version}", "Host: fuzz"]
    keep = version == "1.1"
    r = rng.random()
    if r < 0.1:
        lines.append("Connection: close")
        keep = False
    elif r < 0.25 and version == "1.0":
        lines.append("Connection: keep-alive")
        keep = True
    for i in range(rng.randrange(4)):
        lines.append(f"X-Fuzz-{i}: {'v' * rng.randrange(50)}")
    body = _body(rng) if method in ("POST", "PUT") else b""
    if 0 < len(body) <= 1000 and rng.random() < 0.2:
        body = gzip.compress(body)
        lines.append("Content-Encoding: gzip")
    if version == "1.1" and body and rng.random() < 0.1:
        lines.append("Expect: 100-continue")
    if version == "1.1" and body and rng.random() < 0.3:
        lines.append("Transfer-Encoding: chunked")
        framed = b""
        pos = 0
        while pos < len(body):
            n = rng.randrange(1, 600)
            ext = b";e=1" if rng.random() < 0.1 else b""
            framed += b"%x%s\r\n%s\r\n" % (len(body[pos : pos + n]), ext, body[pos : pos + n])
            pos += n
        body = framed + b"0\r\n\r\n"
    elif body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body, keep


def valid_pipeline(rng: Rng) -> tuple[bytes, int]:
    """Well-formed requests on one connection; how many are answered (up to a close)."""
    data, answered = b"", 0
    for _ in range(rng.randrange(1, 5)):
        req, keep = valid_request(rng)
        data += req
        answered += 1
        if not keep:
            break
    return data, answered


_BAD: list[Callable[[Rng], bytes]] = [
    lambda r: bytes(r.getrandbits(8) for _ in range(r.randrange(1, 40))) + b"\r\n\r\n",
    lambda r: b"GET / HTTP/" + r.choice([b"0.9", b"2.0", b"1.x", b"11"]) + b"\r\n\r\n",
    lambda r: b"G\x00T / HTTP/1.1\r\n\r\n",
    lambda r: b"GET / HTTP/1.1\r\nContent-Length: " + r.choice([b"-1", b"x", b"1 2"]) + b"\r\n\r\n",
    lambda r: b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    lambda r: (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        + r.choice([b"zz\r\n", b"-1\r\n", b"5\r\nabc\r\n0\r\n\r\n", b"ffffffffffffffffff\r\n"])
    ),
    lambda r: b"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
    lambda r: b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
    lambda r: b"GET /\x01 HTTP/1.1\r\n\r\n",
    lambda r: b"GET / HTTP/1.1\r\nX: " + b"v" * 3000 + b"\r\n\r\n",  # 431
    lambda r: (
        b"GET / HTTP/1.1\r\n" + b"".join(b"X%d: v\r\n" % i for i in range(40)) + b"\r\n"
    ),  # 431: too many
    lambda r: b"POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",  # 413
    lambda r: (
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"1000\r\n"
        + b"x" * 4096
        + b"\r\n1\r\ny\r\n0\r\n\r\n"
    ),  # 413 (chunked)
    lambda r: b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort",  # EOF mid-body
    lambda r: b"GET / HTTP/1.1\r\nHost: x",  # EOF mid-headers
]


def malformed(rng: Rng) -> bytes:
    prefix = valid_pipeline(rng)[0] if rng.random() < 0.3 else b""
    if b"Connection: close" in prefix or b"HTTP/1.0" in prefix:
        prefix = b""
    return prefix + rng.choice(_BAD)(rng)


def mutate(rng: Rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if not b:
            break
        i = rng.randrange(len(b))
        op = rng.randrange(6)
        if op == 0:
            b[i] = rng.getrandbits(8)
        elif op == 1:
            del b[i : i + rng.randrange(1, 20)]
        elif op == 2:
            b[i:i] = b[i : i + rng.randrange(1, 20)]
        elif op == 3:
            b[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 8)))
        elif op == 4:
            del b[i:]
        else:
            b[:] = b.replace(b"\r\n", b"\n", 1)
    return bytes(b)


# -- the oracle ------------------------------------------------------------------------------------
def parse_responses(out: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Every response in ``out``; AssertionError for anything that is not well framed."""
    responses = []
    pos = 0
    while pos < len(out):
        end = out.find(b"\r\n\r\n", pos)
        assert end >= 0, f"unterminated head: {out[pos : pos + 200]!r}"
        lines = out[pos:end].split(b"\r\n")
        assert lines[0].startswith(b"HTTP/1.1 "), lines[0]
        status = int(lines[0][9:12])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, sep, v = line.decode("latin-1").partition(": ")
            assert sep and k.lower() not in headers, line
            headers[k.lower()] = v
        pos = end + 4
        if status == 100:
            continue
        n = int(headers["content-length"])
        body = out[pos : pos + n]
        assert len(body) == n, "short body"
        pos += n
        responses.append((status, headers, body))
    return responses


def checked(
    out: bytes, closed: bool, escaped: list[Any], where: str
) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses in ``out``, once what holds for every connection does: they are well
    framed, the connection was closed, and no exception escaped to the loop."""
    try:
        responses = parse_responses(out)
    except (AssertionError, ValueError, KeyError) as exc:
        raise AssertionError(f"{where}: {exc}") from None
    assert closed, where
    assert not escaped, f"{where}: {escaped}"
    return responses


async def feed(service: HttpService, data: bytes, rng: Rng) -> tuple[bytes, bool]:
    proto = service.protocol()
    t = FakeTransport()
    proto.connection_made(t)
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 3, 17, 100, 1000, len(data)])
        proto.data_received(data[pos : pos + n])
        pos += n
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    if not t.closed:
        proto.eof_received()
    for _ in range(200):
        if t.closed and proto._task is None:
            break
        await asyncio.sleep(0)
    proto.connection_lost(None)
    await asyncio.sleep(0)
    return bytes(t.out), t.closed


async def fuzz(twin: Any) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    escaped: list[Any] = []
    loop.set_exception_handler(lambda _loop, ctx: escaped.append(ctx))
    service = HttpService(handler, LIMITS, protocol_class=twin)
    rng = random.Random(SEED)
    counts = {"valid": 0, "malformed": 0, "mutated": 0, "4xx": 0}
    deadline = time.monotonic() + BUDGET_S
    for case in range(CASES):
        assert time.monotonic() < deadline, f"only {case} cases in {BUDGET_S} s"
        kind = rng.choice(["valid", "malformed", "mutated", "mutated"])
        answered = 0
        if kind == "valid":
            data, answered = valid_pipeline(rng)
        elif kind == "malformed":
            data = malformed(rng)
        else:
            data = mutate(rng, valid_pipeline(rng)[0])
        counts[kind] += 1
        out, closed = await feed(service, data, rng)
        where = f"case {case} ({kind}): {data[:300]!r} -> {out[:600]!r}"
        responses = checked(out, closed, escaped, where)
        statuses = [s for s, _, _ in responses]
        assert all(s < 500 for s in statuses), where
        for s, _headers, body in responses:
            if s >= 400:
                counts["4xx"] += 1
                assert "error" in orjson.loads(body), where
        if kind == "valid":
            assert statuses == [200] * answered, where
        elif kind == "malformed":
            assert statuses and statuses[-1] >= 400, where
            assert responses[-1][1].get("connection") == "close", where
    return counts


@pytest.mark.parametrize("name", ["pure", "compiled"])
def test_fuzz_no_exception_no_5xx_malformed_is_4xx(name: str) -> None:
    twin = twin_class(name)
    counts = asyncio.run(fuzz(twin))
    assert counts["valid"] > 2000 and counts["malformed"] > 2000 and counts["4xx"] > 5000

"""The HTTP/1.1 fast path (``_h1scan_py.scan`` in ``Http1Protocol._parse_whole``) against
llhttp alone, on both twins: the same input, fed in the same pieces, to a connection with the
fast path and to one without (``service.head_scan = None``) must give the same requests to
the handler (every field the handler and the serving steps read), the same bytes written,
the same close, and the same connection state at the end.

Inputs: hand-written edge cases (what the fast path takes, and what it must leave to llhttp),
then seeded random requests over the same features (method, target, version, header name
case, repeats, whitespace, odd bytes, Content-Length forms, Connection tokens, Expect,
Content-Encoding, oversized URL, headers and bodies, pipelines), some mutated (the fuzz
test's byte flips, cuts and insertions), under tight and default limits, on a draining
server and on a connection over the connection cap. The test also checks that both the fast
path and llhttp parsed a good share of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import random
from typing import Any

import pytest
from test_http1 import FakeTransport, twin_class
from test_http1_fuzz import mutate

from tritonlite.frontends.base.http_call import HttpError, HttpResponse
from tritonlite.frontends.base.http_errors import STATUS, error
from tritonlite.frontends.wire import _h1scan_py
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService

pytestmark = pytest.mark.timeout(600)

SEED = 20261206
CASES = 15000  # random cases per twin
TIGHT = HttpLimits(max_body=300, max_header_bytes=160, max_headers=5, max_pipeline=2)
DEFAULT = HttpLimits()


def _scanner(name: str) -> Any:
    if name == "pure":
        return _h1scan_py.scan
    from tritonlite.frontends.wire import _h1scan_c

    return _h1scan_c.scan


class Seen:
    """What the handler saw: one record per request it was given."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    async def handler(self, req: Any) -> HttpResponse:
        try:
            body = await req.read()
        except HttpError as exc:
            return error(exc.status, exc.message)
        except Exception as exc:  # a body that does not decompress: INVALID_ARG
            code = getattr(exc, "code", None)
            return error(STATUS[code] if code is not None else 500, str(exc))
        self.records.append(
            (
                req.method,
                req.path,
                req.query,
                list(req._headers.items()),
                dict(req.headers),
                req.headers.get("CONTENT-TYPE"),
                req.version,
                bytes(body),
                req._url,
                req._size,
                req._length,
                req._header_bytes,
                req._complete,
                req._keep_alive,
                req._expect,
                req._close,
                req._encoding,
                req._admitted,
            )
        )
        return HttpResponse(200, [b"%d:%s" % (len(body), req.path.encode())], "text/plain")


class Counting:
    """``head_scan`` that counts what it took and what it declined."""

    def __init__(self, scan: Any) -> None:
        self.scan = scan
        self.took = 0
        self.declined = 0

    def __call__(self, data: bytes, pos: int, max_header_bytes: int, max_headers: int) -> Any:
        head = self.scan(data, pos, max_header_bytes, max_headers)
        if head is None:
            self.declined += 1
        else:
            self.took += 1
        return head


async def run_case(
    twin: Any, scan: Any, limits: HttpLimits, data: bytes, cuts: list[int], mode: str
) -> tuple[Any, ...]:
    seen = Seen()
    if mode == "overcap":
        limits = dataclasses.replace(limits, max_connections=1)
    service = HttpService(seen.handler, limits, protocol_class=twin)
    service.head_scan = scan
    blocker = None
    if mode == "overcap":
        blocker = service.protocol()
        blocker.connection_made(FakeTransport())
    proto = service.protocol()
    t = FakeTransport()
    proto.connection_made(t)
    assert proto._overcap == (mode == "overcap")
    if mode == "draining":
        service.refuse_new()
    pos = 0
    for cut in [*cuts, len(data)]:
        if cut > pos:
            proto.data_received(data[pos:cut])
            pos = cut
            await asyncio.sleep(0)
    state = (proto._state, proto._closing, proto._read_paused, proto._deadline == 0.0)
    if not t.closed:
        proto.eof_received()
    for _ in range(100):
        if t.closed and proto._task is None:
            break
        await asyncio.sleep(0)
    queued = len(proto._queue)
    proto.connection_lost(None)
    if blocker is not None:
        blocker.connection_lost(None)
    await asyncio.sleep(0)
    return seen.records, bytes(t.out), t.closed, t.paused, state, queued


def compare(name: str, cases: list[tuple[HttpLimits, bytes, list[int], str]]) -> Counting:
    twin = twin_class(name)
    counting = Counting(_scanner(name))

    async def run() -> None:
        escaped: list[Any] = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: escaped.append(ctx))
        for i, (limits, data, cuts, mode) in enumerate(cases):
            fast = await run_case(twin, counting, limits, data, cuts, mode)
            slow = await run_case(twin, None, limits, data, cuts, mode)
            where = f"case {i} ({mode}, cuts {cuts}): {data[:400]!r}"
            assert fast[1] == slow[1], f"{where}\nfast {fast[1]!r}\nllhttp {slow[1]!r}"
            assert fast == slow, f"{where}\nfast {fast}\nllhttp {slow}"
            assert not escaped, f"{where}: {escaped}"

    asyncio.run(run())
    return counting


# -- hand-written cases ------------------------------------------------------------------------
def _req(head: str, body: bytes = b"") -> bytes:
    return head.replace("\n", "\r\n").encode("latin-1") + body


_POST = "POST /v2/models/m/infer HTTP/1.1\nHost: h\nContent-Length: {n}\n{extra}\n"
EDGES: list[bytes] = [
    _req("GET / HTTP/1.1\n\n"),
    _req("GET /v2/health/ready HTTP/1.0\n\n"),
    _req("GET /a?b=c&d=%20e?f HTTP/1.0\nConnection: keep-alive\n\n"),
    _req(_POST.format(n=5, extra=""), b"hello"),
    _req(_POST.format(n=5, extra="Content-Type: application/json\n"), b"hello") * 3,
    _req(_POST.format(n=0, extra=""), b""),
    _req(_POST.format(n="005", extra=""), b"hello"),
    _req(_POST.format(n="5 ", extra=""), b"hello"),  # trailing space: llhttp's
    _req(_POST.format(n="5", extra="Content-Length: 5\n"), b"hello"),  # repeat: llhttp's 400
    _req(_POST.format(n="+5", extra=""), b"hello"),
    _req(_POST.format(n="99999999999999999999", extra=""), b"hello"),
    _req(_POST.format(n=5, extra="Expect: 100-continue\n"), b"hello"),
    _req(_POST.format(n=5, extra="Expect: 100-continue\n")),  # the body follows later
    _req(_POST.format(n=23, extra="Content-Encoding: gzip\n"), gzip.compress(b"abc", mtime=0)),
    _req(_POST.format(n=3, extra="Content-Encoding: br\n"), b"abc"),
    _req("GET / HTTP/1.1\nConnection: close\n\n") + _req("GET /after HTTP/1.1\n\n"),
    _req("GET / HTTP/1.0\n\n") + _req("GET /after HTTP/1.1\n\n"),
    _req("GET / HTTP/1.1\nConnection: keep-alive, close\n\n"),
    _req("GET / HTTP/1.0\nConnection: keep-alive, close\n\n") + _req("GET /2 HTTP/1.1\n\n"),
    _req("GET / HTTP/1.1\nConnection: closex\n\n") + _req("GET /2 HTTP/1.1\n\n"),
    _req("GET / HTTP/1.1\nConnection: x , close\n\n"),
    _req("GET / HTTP/1.1\nConnection: close,\n\n"),
    _req("GET / HTTP/1.1\nConnection: Upgrade\nUpgrade: h2c\n\n"),
    _req("GET / HTTP/1.1\nUpgrade: h2c\n\n"),
    _req("GET / HTTP/1.1\nProxy-Connection: close\n\n") + _req("GET /2 HTTP/1.1\n\n"),
    _req("POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n3\r\nabc\r\n0\r\n\r\n"),
    _req("GET / HTTP/1.1\nA:\nB:   \nC: x \t\nD:\tv\n\n"),
    _req("GET / HTTP/1.1\nX-A: 1\nx-a: 2\nX-A: 3\n\n"),
    _req("GET / HTTP/1.1\nX: a\x80b\n\n"),
    _req("GET / HTTP/1.1\nX: a\x7fb\n\n"),
    _req("GET / HTTP/1.1\nX: a\x01b\n\n"),
    _req("GET / HTTP/1.1\nX : a\n\n"),
    _req("GET / HTTP/1.1\nX: a\n b\n\n"),
    b"GET / HTTP/1.1\nX: a\n\n",
    b"GET / HTTP/1.1\r\nX: a\n\r\n",
    b"\r\nGET / HTTP/1.1\r\n\r\n",
    _req("GET  / HTTP/1.1\n\n"),
    _req("GET / HTTP/1.2\n\n"),
    _req("GET / HTTP/2.0\n\n"),
    _req("get / HTTP/1.1\n\n"),
    _req("CONNECT h:1 HTTP/1.1\n\n"),
    _req("OPTIONS * HTTP/1.1\n\n"),
    _req("GET http://h/a HTTP/1.1\n\n"),
    _req("GET /a#f HTTP/1.1\n\n"),
    _req('GET /a"b HTTP/1.1\n\n'),
    _req("HEAD / HTTP/1.1\nContent-Length: 2\n\n", b"xy") + _req("GET /2 HTTP/1.1\n\n"),
    _req("PATCH /p HTTP/1.1\nContent-Length: 1\n\n", b"z"),
    _req("GET /" + "u" * 200 + " HTTP/1.1\n\n"),  # 414 under TIGHT
    _req("GET / HTTP/1.1\nX: " + "v" * 200 + "\n\n"),  # 431 under TIGHT
    _req("GET / HTTP/1.1\n" + "".join(f"X{i}: v\n" for i in range(8)) + "\n"),  # 431: count
    _req("GET / HTTP/1.1\n" + "X: v\n" * 8 + "\n"),  # repeats count once
    _req(_POST.format(n=400, extra=""), b"b" * 400),  # 413 under TIGHT
    _req("GET /1 HTTP/1.1\n\n") * 5,  # past max_pipeline
    _req("GET /1 HTTP/1.1\n\n") + b"GET /2 HT",
    _req("GET /v2/health/live HTTP/1.1\n\n") + _req("GET /v2/x HTTP/1.1\n\n"),
]


def edge_cases() -> list[tuple[HttpLimits, bytes, list[int], str]]:
    out = []
    for data in EDGES:
        for limits in (DEFAULT, TIGHT):
            for mode in ("plain", "draining", "overcap"):
                out.append((limits, data, [], mode))
            out.append((limits, data, [len(data) // 2], "plain"))
    return out


# -- random cases --------------------------------------------------------------------------------
_METHODS = ["GET", "POST", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]
_ODD_METHODS = ["get", "BREW", "CONNECT", "PROPFIND"]
_TARGETS = ["/", "/v2/models/add_sub/infer", "/q?a=1&b=%7e", "/x?", "/%E2%82%AC", "/v2/health/"]
_ODD_TARGETS = ["/a b", "*", "/a#b", "/\x7f", "/é", "/a|b", "http://h/"]
_NAMES = ["Host", "X-Test", "Accept", "User-Agent", "Content-Type", "X-Rep", "x-rep", "X_U"]
_VALUES = ["v", "", "a b", "application/json", "*/*", "x\ty", "curl/8.5.0", "a,b"]
_ODD_VALUES = ["é", "q\x7f", "\x01", "a\rb", "\x80"]
_OWS = ["", " ", " ", "\t", "  "]
_CONNECTION = ["close", "keep-alive", "Keep-Alive", "x, close", "te,keep-alive", "upgrade", ""]
_EXPECT = ["100-continue", "100-Continue", "200-ok"]
_ENCODING = ["gzip", "identity", "deflate", "br"]


def _case(rng: random.Random, name: str) -> str:
    r = rng.random()
    return name.upper() if r < 0.15 else name.lower() if r < 0.3 else name


def random_request(rng: random.Random) -> bytes:
    odd = rng.random() < 0.1  # a method, target, version or value the fast path declines
    method = rng.choice(_ODD_METHODS if odd and rng.random() < 0.25 else _METHODS)
    version = rng.choice(["1.1", "1.1", "1.0"] if not odd else ["1.2", "2.0", "0.9", "1.1"])
    target = rng.choice(_ODD_TARGETS if odd and rng.random() < 0.25 else _TARGETS)
    if rng.random() < 0.05:
        target = "/" + "t" * rng.randrange(100, 300)
    lines = [f"{method} {target} HTTP/{version}"]
    for _ in range(rng.randrange(6)):
        value = rng.choice(_ODD_VALUES if odd and rng.random() < 0.25 else _VALUES)
        if rng.random() < 0.05:
            value = "w" * rng.randrange(50, 200)
        tail = rng.choice(["", "", "", " ", "\t"])
        lines.append(f"{_case(rng, rng.choice(_NAMES))}:{rng.choice(_OWS)}{value}{tail}")
    if rng.random() < 0.3:
        lines.append(f"{_case(rng, 'Connection')}: {rng.choice(_CONNECTION)}")
    body = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 0, 1, 10, 100, 400])))
    if body and rng.random() < 0.2:
        enc = rng.choice(_ENCODING)
        if enc == "gzip":
            body = gzip.compress(body, mtime=0)
        lines.append(f"{_case(rng, 'Content-Encoding')}:{rng.choice(_OWS)}{enc}")
    if rng.random() < 0.1:
        lines.append(f"Expect: {rng.choice(_EXPECT)}")
    r = rng.random()
    if body or r < 0.3:
        cl = str(len(body))
        r = rng.random()
        if r < 0.05:
            cl = "0" + cl
        elif r < 0.08:
            cl = cl + " "
        elif r < 0.1:
            cl = str(len(body) + 1)
        lines.insert(rng.randrange(1, len(lines) + 1), f"{_case(rng, 'Content-Length')}: {cl}")
        if rng.random() < 0.03:
            lines.append(f"Content-Length: {cl}")
    if rng.random() < 0.02:
        lines.append("Transfer-Encoding: chunked")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
    if rng.random() < 0.02:
        head = head.replace(b"\r\n", b"\n", 1)
    return head + body


def random_cases(rng: random.Random, n: int) -> list[tuple[HttpLimits, bytes, list[int], str]]:
    out = []
    for _ in range(n):
        data = b"".join(random_request(rng) for _ in range(rng.choice([1, 1, 2, 3, 5])))
        if rng.random() < 0.15:
            data = mutate(rng, data)
        if rng.random() < 0.05:
            data += b"GET /partial HTTP/1.1\r\nHo"
        k = max(0, min(len(data) - 1, rng.choice([0, 0, 1, 3])))
        cuts = sorted(rng.sample(range(1, len(data)), k)) if k else []
        limits = rng.choice([DEFAULT, TIGHT])
        mode = rng.choices(["plain", "draining", "overcap"], [8, 1, 1])[0]
        out.append((limits, data, cuts, mode))
    return out


@pytest.mark.parametrize("name", ["pure", "compiled"])
def test_the_fast_path_parses_as_llhttp_does(name: str) -> None:
    rng = random.Random(SEED)
    counting = compare(name, edge_cases() + random_cases(rng, CASES))
    assert counting.took > CASES // 2 and counting.declined > CASES // 5, vars(counting)


def test_wrk_and_perf_analyzer_requests_take_the_fast_path() -> None:
    body = b'{"inputs":[]}'
    wrk = _req(
        "POST /v2/models/add_sub_nb/infer HTTP/1.1\nHost: 127.0.0.1:8000\n"
        f"Content-Length: {len(body)}\nContent-Type: application/json\n\n",
        body,
    )
    curl = _req(  # perf_analyzer's (libcurl's) binary infer request, as it sends it
        "POST /v2/models/add_sub_nb/infer HTTP/1.1\nHost: 127.0.0.1:8000\n"
        "User-Agent: libcurl-agent/1.0\nAccept: */*\n"
        f"Inference-Header-Content-Length: {len(body)}\n"
        f"Content-Type: application/octet-stream\nContent-Length: {len(body)}\n\n",
        body,
    )
    for scan in (_h1scan_py.scan, _scanner("compiled")):
        for data in (wrk, curl, wrk + curl):
            head = scan(data, 0, 65536, 128)
            assert head is not None and head[0] == 0 and head[-1] == body

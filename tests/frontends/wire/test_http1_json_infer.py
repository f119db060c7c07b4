"""The native HTTP/1.1 layer's JSON infer call (``app.make_json_infer``) against ``dispatch``.

Two connections of ``Http1Protocol`` on one real ``InferenceCore`` (real ONNX models): one
whose service has the JSON infer call, as the server wires it, and one without (every
request through ``dispatch``). Each is fed the same raw bytes -- a JSON body of inputs alone
and every variant around it (HTTP/1.0, keep-alive and close, pipelined, chunked, compressed
bodies and responses, ``Expect``, the binary extension, ids, other methods, unknown models
and versions, bad JSON, a model that fails) -- and must write the same bytes and leave the
same statistics; the call must have answered the plain ones. Runs on both twins.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import counts_only, run_core
from onnx_models import add_sub, config_for, failing, write_model

from tritonlite.core.core import InferenceCore
from tritonlite.frontends.http import app, jsonlane
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService

pytestmark = pytest.mark.timeout(180)

_A = [float(i) for i in range(16)]
_B = [2.5] * 16
_PLAIN = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": _A},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": _B},
        ]
    }
).encode()
_FAILS = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "INT64", "shape": [1, 1], "data": [99]}]}
).encode()
_FAILS_OK = _FAILS.replace(b"[99]", b"[1]")
_WARM = 300


class _Transport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: Any) -> None:
        self.out += data

    def writelines(self, data: Any) -> None:
        for d in data:
            self.out += d

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else default

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


def _post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    head = f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    for h in headers:
        head += h + "\r\n"
    return (head + "\r\n").encode() + body


def _chunked(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


_INFER = "/v2/models/direct/infer"
_CASES: list[tuple[str, list[bytes]]] = [
    ("plain", [_post(_INFER, _PLAIN)]),
    ("plain, content-type", [_post(_INFER, _PLAIN, "Content-Type: application/json")]),
    ("version path", [_post("/v2/models/direct/versions/1/infer", _PLAIN)]),
    ("unknown version", [_post("/v2/models/direct/versions/7/infer", _PLAIN)]),
    ("quoted name", [_post("/v2/models/%64irect/infer", _PLAIN)]),
    ("query", [_post(_INFER + "?x=1", _PLAIN)]),
    ("unknown model", [_post("/v2/models/nope/infer", _PLAIN)]),
    ("deflate response", [_post(_INFER, _PLAIN, "Accept-Encoding: deflate")]),
    ("identity response", [_post(_INFER, _PLAIN, "Accept-Encoding: identity")]),
    ("http/1.0", [_post(_INFER, _PLAIN, version="1.0")]),
    ("http/1.0 keep-alive", [_post(_INFER, _PLAIN, "Connection: keep-alive", version="1.0")]),
    ("close", [_post(_INFER, _PLAIN, "Connection: close")]),
    ("pipelined", [_post(_INFER, _PLAIN) * 3]),
    ("pipelined, mixed", [_post(_INFER, _PLAIN) + _post(_INFER, b"{") + _post(_INFER, _PLAIN)]),
    ("split", [_post(_INFER, _PLAIN)[:40], _post(_INFER, _PLAIN)[40:]]),
    ("split body", [_post(_INFER, _PLAIN)[:-30], _post(_INFER, _PLAIN)[-30:]]),
    ("chunked", [_chunked(_INFER, _PLAIN)]),
    (
        "gzip body",
        [_post(_INFER, gzip.compress(_PLAIN, mtime=0), "Content-Encoding: gzip")],
    ),
    ("identity body", [_post(_INFER, _PLAIN, "Content-Encoding: identity")]),
    ("br body", [_post(_INFER, _PLAIN, "Content-Encoding: br")]),
    ("expect", [_post(_INFER, _PLAIN, "Expect: 100-continue")]),
    ("expect other", [_post(_INFER, _PLAIN, "Expect: nothing")]),
    ("header length", [_post(_INFER, _PLAIN, f"Inference-Header-Content-Length: {len(_PLAIN)}")]),
    ("id", [_post(_INFER, _PLAIN[:-1] + b', "id": "7"}')]),
    ("outputs", [_post(_INFER, _PLAIN[:-1] + b', "outputs": [{"name": "OUTPUT0"}]}')]),
    ("bad json", [_post(_INFER, b'{"inputs": [}')]),
    ("not an object", [_post(_INFER, b"[1, 2]")]),
    ("empty body", [_post(_INFER, b"")]),
    ("wrong shape", [_post(_INFER, _PLAIN.replace(b"[1, 16]", b"[1, 8]", 1))]),
    ("fails", [_post("/v2/models/fails/infer", _FAILS)]),
    (
        "fails, then good",
        [_post("/v2/models/fails/infer", _FAILS) + _post("/v2/models/fails/infer", _FAILS_OK)],
    ),
    ("get", [b"GET " + _INFER.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"]),
    ("put", [_post(_INFER, _PLAIN).replace(b"POST", b"PUT", 1)]),
    ("stats path", [_post("/v2/models/direct/stats", _PLAIN)]),
]


def _repo(root: Path) -> Path:
    write_model(root, "direct", add_sub(), config_for(add_sub(), max_batch_size=8, name="direct"))
    write_model(root, "fails", failing(), config_for(failing(), max_batch_size=8, name="fails"))
    return root


async def _feed(service: HttpService, pieces: list[bytes]) -> _Transport:
    """A new connection of ``service`` fed ``pieces``; its transport once all is answered."""
    proto: Any = service.protocol()
    t = _Transport()
    proto.connection_made(t)
    for piece in pieces:
        proto.data_received(piece)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while proto._task is not None or proto._queue:
        assert loop.time() < deadline, "not answered"
        await asyncio.sleep(0.001)
    return t


async def _warm(service: HttpService, core: InferenceCore) -> None:
    """Until the lane answers (each instance's first runs are measured off the loop)."""
    for _ in range(_WARM):
        await _feed(service, [_post(_INFER, _PLAIN), _post("/v2/models/fails/infer", _FAILS_OK)])
    for model in ("direct", "fails"):
        lane = core.repository.get(model).lane
        assert lane is not None and lane.taken > 0


def _counts(core: InferenceCore) -> Any:
    return [counts_only(core.statistics(m)["model_stats"][0]) for m in ("direct", "fails")]


def test_the_json_infer_call_writes_what_dispatch_writes(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        dispatch = app.make_dispatch(core)
        fast = app.make_json_infer(core)
        assert fast is not None
        answered: list[str] = []

        def spy(path: str, headers: dict[str, str], data: Any) -> Any:
            got = fast(path, headers, data)
            if got is not None:
                answered.append(path)
            return got

        with_call = HttpService(dispatch, HttpLimits())
        with_call.json_infer = spy
        without = HttpService(dispatch, HttpLimits())
        await _warm(without, core)
        for name, pieces in _CASES:
            for _ in range(2):
                before = _counts(core)
                answered.clear()
                a = await _feed(with_call, pieces)
                mid = _counts(core)
                taken = len(answered)
                b = await _feed(without, pieces)
                assert bytes(a.out) == bytes(b.out), name
                assert a.closed == b.closed, name
                assert len(answered) == taken, name  # ``without`` never asks it
                # the same statistics each way (one connection's worth, then the other's)
                assert [_sub(x, y) for x, y in zip(mid, before)] == [
                    _sub(x, y) for x, y in zip(_counts(core), mid)
                ], name
                if name in ("plain", "http/1.0", "pipelined", "split", "deflate response"):
                    assert taken >= 1, name  # the call answered it
                if name in (
                    "gzip body",
                    "chunked",
                    "expect",
                    "header length",
                    "id",
                    "get",
                    "fails",
                ):
                    assert taken == 0, name
        assert bytes(a.out).startswith(b"HTTP/1.1 405")

    run_core(_repo(tmp_path), body)


def _sub(after: Any, before: Any) -> Any:
    """``after`` - ``before`` for the counts of two statistics documents."""
    if isinstance(after, dict):
        return {k: _sub(v, before[k]) for k, v in after.items()}
    if isinstance(after, list):
        return [_sub(x, y) for x, y in zip(after, before)]
    if isinstance(after, int) and not isinstance(after, bool):
        return after - before
    return after


def test_headers_that_change_a_request_are_left_to_dispatch(tmp_path: Path) -> None:
    """Any of them, in any case and order, with others around: None, nothing parsed."""

    async def body(core: InferenceCore) -> None:
        fast = app.make_json_infer(core)
        assert fast is not None
        rng = random.Random(31)
        for key in ("expect", "content-encoding", "inference-header-content-length"):
            for _ in range(20):
                headers = {f"x-{rng.randrange(99)}": "1", key: rng.choice(["", "gzip", "7"])}
                assert fast(_INFER, headers, _PLAIN) is None
                assert jsonlane.PARSED.body is None
        assert fast(_INFER, {}, bytearray(_PLAIN)) is None  # a body in pieces: dispatch's
        assert fast("/v2/models/direct/ready", {}, _PLAIN) is None
        assert jsonlane.PARSED.body is None

    run_core(_repo(tmp_path), body)


def test_no_call_where_headers_are_forwarded_or_apis_restricted() -> None:
    from tritonlite.options import ServerOptions

    core: Any = object()  # never called: the options alone decide
    forward = ServerOptions(model_repositories=(Path("."),), http_header_forward_pattern="x-.*")
    restricted = ServerOptions(
        model_repositories=(Path("."),), http_restricted_api=("inference:k=v",)
    )
    assert app.make_json_infer(core, forward) is None
    assert app.make_json_infer(core, restricted) is None


def test_random_splits_of_a_pipelined_mix_write_what_dispatch_writes(tmp_path: Path) -> None:
    """Every case that keeps the connection open, one after another on one connection, cut
    into random pieces (seeded): the same bytes with the call as without."""
    keep = [
        p[0]
        for name, p in _CASES
        if len(p) == 1 and name not in ("http/1.0", "close", "br body", "empty body")
    ]
    stream = b"".join(keep)

    async def body(core: InferenceCore) -> None:
        dispatch = app.make_dispatch(core)
        with_call = HttpService(dispatch, HttpLimits())
        with_call.json_infer = app.make_json_infer(core)
        without = HttpService(dispatch, HttpLimits())
        await _warm(without, core)
        for seed in range(12):
            rng = random.Random(seed)
            cuts = sorted(rng.sample(range(1, len(stream)), rng.randrange(1, 40)))
            pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
            a = await _feed(with_call, pieces)
            b = await _feed(without, pieces)
            assert bytes(a.out) == bytes(b.out), seed
            assert a.closed == b.closed, seed
            assert bytes(a.out).count(b"HTTP/1.1 200 OK") >= 8, seed

    run_core(_repo(tmp_path), body)

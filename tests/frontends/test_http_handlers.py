"""The HTTP handlers on the call interface alone: no transport, a stand-in core.

What a transport must be able to rely on: ``make_dispatch`` answers every request with an
``HttpResponse`` or ``HttpStream``; the router is Triton's (404 / 405 / 417); an infer
response's body parts are handed over unjoined; a traced response releases its trace through
``on_sent``; the generate stream writes one event per response and stops when the client
left; the handlers import no web framework.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
import orjson
import pytest

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferOutput, InferRequest, InferResponse
from tritonlite.frontends.base.http_call import (
    HttpError,
    HttpRequest,
    HttpResponse,
    HttpStream,
)
from tritonlite.frontends.http.app import make_dispatch

pytestmark = pytest.mark.timeout(60)


class FakeRequest:
    """``call.HttpRequest`` with a body in memory."""

    def __init__(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        version: tuple[int, int] = (1, 1),
        read_error: Exception | None = None,
    ) -> None:
        self.method = method
        self.path, _, self.query = path.partition("?")
        self.headers = {k.title(): v for k, v in (headers or {}).items()}
        self.version = version
        self.peer = ("127.0.0.1", 5)
        self._body = body
        self._error = read_error
        self.reads = 0
        self.gone = False

    async def read(self) -> bytes:
        self.reads += 1
        if self._error is not None:
            raise self._error
        return self._body

    def disconnected(self) -> bool:
        return self.gone


class FakeTrace:
    def __init__(self) -> None:
        self.frontend_args: Any = None
        self.released = False

    def frontend(self, protocol: str, recv: tuple[int, int], send: tuple[int, int]) -> None:
        self.frontend_args = (protocol, recv, send)

    def release(self) -> None:
        self.released = True


class TraceSettings:
    enabled = True


class StandInCore:
    """The part of ``CoreAPI`` these handlers use."""

    exiting = False
    trace = TraceSettings()

    def __init__(self) -> None:
        self.requests: list[InferRequest] = []
        self.trace_next: FakeTrace | None = None
        self.stream_items: list[StreamResponse] = []
        self.stream_closed = False

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return False

    def server_metadata(self) -> dict[str, Any]:
        raise RuntimeError("boom")

    def infer_now(self, request: InferRequest) -> InferResponse | None:
        return None  # no single-request lane here: every request takes ``infer``

    def infer_plain(self, name: str, version: int, key: Any, feed: Any) -> Any:
        return None  # nor a JSON lane

    async def infer(self, request: InferRequest, decoupled_message: str = "") -> InferResponse:
        self.requests.append(request)
        if request.model_name == "missing":
            raise TritonliteError(ErrorCode.NOT_FOUND, "Request for unknown model: 'missing'")
        request.trace = self.trace_next  # type: ignore[assignment]
        data = np.arange(4, dtype=np.int32)
        return InferResponse(
            request.model_name, "1", outputs=[InferOutput("OUT", "INT32", (4,), data, binary=True)]
        )

    def model_metadata(self, name: str, version: int) -> dict[str, Any]:
        return {"inputs": [{"name": "X", "datatype": "INT32", "shape": [2]}]}

    def model_config(self, name: str, version: int) -> Any:
        class Config:
            max_batch_size = 0

        return Config()

    async def _stream(self) -> AsyncGenerator[StreamResponse, None]:
        try:
            for item in self.stream_items:
                yield item
                await asyncio.sleep(0)
        finally:
            self.stream_closed = True

    def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamResponse, None]:
        return self._stream()


def run(core: StandInCore, request: HttpRequest) -> HttpResponse | HttpStream:
    return asyncio.run(make_dispatch(core)(request))  # type: ignore[arg-type]


def whole(resp: HttpResponse | HttpStream) -> HttpResponse:
    assert isinstance(resp, HttpResponse)
    return resp


def _infer_body() -> tuple[bytes, dict[str, str]]:
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "X",
                    "shape": [2],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    )
    return head + np.array([1, 2], np.int32).tobytes(), {
        "Inference-Header-Content-Length": str(len(head))
    }


def test_router_is_tritons() -> None:
    core = StandInCore()
    r = whole(run(core, FakeRequest("GET", "/v2/nothing")))
    assert r.status == 404 and r.body == [b'{"error":"Not Found"}']
    assert r.content_type == "application/json"
    r = whole(run(core, FakeRequest("POST", "/v2/health/live")))
    assert r.status == 405 and orjson.loads(r.body[0]) == {"error": "Method Not Allowed"}
    r = whole(run(core, FakeRequest("GET", "/v2/health/live?x=1")))
    assert r.status == 200 and r.body == []
    r = whole(run(core, FakeRequest("GET", "/v2/health/ready")))
    assert r.status == 400  # not ready: 400 with an empty body, as Triton


def test_unknown_expectation_is_417_and_http10_ignores_expect() -> None:
    core = StandInCore()
    r = whole(run(core, FakeRequest("GET", "/v2/health/live", headers={"expect": "x"})))
    assert r.status == 417 and orjson.loads(r.body[0]) == {"error": "Unknown Expect: x"}
    r = whole(
        run(core, FakeRequest("GET", "/v2/health/live", headers={"expect": "x"}, version=(1, 0)))
    )
    assert r.status == 200


def test_errors_map_through_the_one_table() -> None:
    core = StandInCore()
    body, headers = _infer_body()
    r = whole(run(core, FakeRequest("POST", "/v2/models/missing/infer", body, headers)))
    assert r.status == 404 and "unknown model" in orjson.loads(r.body[0])["error"]
    r = whole(
        run(core, FakeRequest("POST", "/v2/models/m/infer", read_error=HttpError(413, "too big")))
    )
    assert r.status == 413 and orjson.loads(r.body[0]) == {"error": "too big"}
    r = whole(run(core, FakeRequest("GET", "/v2")))  # the stand-in's metadata raises
    assert r.status == 500 and "RuntimeError: boom" in orjson.loads(r.body[0])["error"]
    r = whole(
        run(
            core,
            FakeRequest("POST", "/v2/models/m/infer", body, {**headers, "content-encoding": "br"}),
        )
    )
    assert r.status == 501 and r.headers == {"Accept-Encoding": "gzip, deflate"}


def test_infer_hands_over_body_parts_unjoined() -> None:
    core = StandInCore()
    body, headers = _infer_body()
    r = whole(run(core, FakeRequest("POST", "/v2/models/m/versions/2/infer", body, headers)))
    assert r.status == 200 and r.content_type == "application/octet-stream"
    assert len(r.body) == 2 and isinstance(r.body[1], (bytes, memoryview))  # not joined
    head_len = int(r.headers["Inference-Header-Content-Length"])  # type: ignore[index]
    assert head_len == len(r.body[0]) and r.body_length() == head_len + 16
    assert orjson.loads(r.body[0])["outputs"][0]["parameters"] == {"binary_data_size": 16}
    req = core.requests[-1]
    assert req.model_version == 2 and req.inputs[0].data.tolist() == [1, 2]  # type: ignore


def test_infer_compresses_the_whole_body_when_asked() -> None:
    import gzip

    core = StandInCore()
    body, headers = _infer_body()
    r = whole(
        run(
            core,
            FakeRequest("POST", "/v2/models/m/infer", body, {**headers, "accept-encoding": "gzip"}),
        )
    )
    assert r.headers is not None and r.headers["Content-Encoding"] == "gzip"
    plain = gzip.decompress(b"".join(r.body))
    assert len(plain) == int(r.headers["Inference-Header-Content-Length"]) + 16


def test_a_traced_response_is_released_once_sent() -> None:
    core = StandInCore()
    trace = FakeTrace()
    core.trace_next = trace
    body, headers = _infer_body()
    r = whole(run(core, FakeRequest("POST", "/v2/models/m/infer", body, headers)))
    assert r.on_sent is not None and not trace.released
    r.on_sent(10, 20)
    assert trace.released and trace.frontend_args[0] == "HTTP"
    assert trace.frontend_args[2] == (10, 20)


def _item(value: int, final: bool = False) -> StreamResponse:
    return StreamResponse(
        InferResponse(
            "m", "1", outputs=[InferOutput("X", "INT32", (1,), np.array([value], np.int32))]
        ),
        final=final,
    )


class Writer:
    def __init__(self, request: FakeRequest | None = None, leave_after: int = 0) -> None:
        self.out: list[bytes] = []
        self.request = request
        self.leave_after = leave_after

    async def write(self, data: bytes) -> None:
        if self.request is not None and self.request.gone:
            raise ConnectionResetError("gone")
        self.out.append(data)
        if self.request is not None and len(self.out) == self.leave_after:
            self.request.gone = True


def test_generate_stream_writes_one_event_per_response() -> None:
    core = StandInCore()
    core.stream_items = [_item(1), _item(2), _item(3, final=True)]

    async def go() -> list[bytes]:
        resp = await make_dispatch(core)(  # type: ignore[arg-type]
            FakeRequest("POST", "/v2/models/m/generate_stream", b'{"X": [1, 2]}')
        )
        assert isinstance(resp, HttpStream) and resp.status == 200
        assert resp.content_type.startswith("text/event-stream")
        w = Writer()
        await resp.send(w)
        return w.out

    out = asyncio.run(go())
    assert [orjson.loads(e[len(b"data: ") :])["X"] for e in out] == [1, 2, 3]
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in out)
    assert core.stream_closed


def test_generate_stream_stops_when_the_client_left() -> None:
    core = StandInCore()
    core.stream_items = [_item(i) for i in range(10)] + [_item(10, final=True)]

    async def go() -> list[bytes]:
        request = FakeRequest("POST", "/v2/models/m/generate_stream", b'{"X": [1, 2]}')
        resp = await make_dispatch(core)(request)  # type: ignore[arg-type]
        assert isinstance(resp, HttpStream)
        w = Writer(request, leave_after=2)
        await resp.send(w)
        return w.out

    assert len(asyncio.run(go())) == 2
    assert core.stream_closed


def test_handlers_import_no_web_framework() -> None:
    code = (
        "import sys; import tritonlite.frontends.http.app, tritonlite.frontends.wire.http1; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'grpc')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"

"""What the native HTTP/1.1 protocol costs per request, alone, on each twin.

One connection (fake transport) on a uvloop loop is handed perf_analyzer's binary infer
request for ONNX add_sub (its bytes as libcurl sends them) and answers with the framed
response of the real codec's shape (JSON head + two 64-byte binary outputs). Per request:
``data_received`` (llhttp and the callbacks), the serving task, ``read()``, framing and the
write; the handler itself is a constant. The same loop turn without the protocol
(``baseline``) is measured beside it, so ``protocol - baseline`` is the protocol's own cost.

``python tests/frontends/wire/test_http1_bench.py [N]`` prints the figures (CPU time of the
thread, so other processes on a shared machine count less); the test checks a
loose bound (so a pathological slowdown fails) and prints them with ``-s``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import orjson
import pytest
import uvloop
from test_http1 import FakeTransport, twin_class

from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.wire.http1 import HttpLimits, HttpService

_HEAD = orjson.dumps(
    {
        "inputs": [
            {
                "name": n,
                "shape": [1, 16],
                "datatype": "INT32",
                "parameters": {"binary_data_size": 64},
            }
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [
            {"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
)
_BODY = _HEAD + bytes(range(64)) * 2
REQUEST = (
    b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: localhost:8000\r\n"
    b"Accept: */*\r\nInference-Header-Content-Length: %d\r\n"
    b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
    % (len(_HEAD), len(_BODY))
) + _BODY
_OUT_HEAD = orjson.dumps(
    {
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {
                "name": n,
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": 64},
            }
            for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
)
_OUT = memoryview(bytes(range(64)))


async def handler(req: Any) -> HttpResponse:
    body = await req.read()
    assert len(body) == len(_BODY)
    req.headers.get("Inference-Header-Content-Length")
    req.headers.get("Content-Encoding")
    req.headers.get("Accept-Encoding")
    return HttpResponse(
        200,
        [_OUT_HEAD, _OUT, _OUT],
        "application/octet-stream",
        {"Inference-Header-Content-Length": str(len(_OUT_HEAD))},
    )


async def _measure(twin: Any, n: int) -> tuple[float, float]:
    service = HttpService(handler, HttpLimits(), protocol_class=twin)
    proto = service.protocol()
    t = FakeTransport()
    proto.connection_made(t)
    sleep = asyncio.sleep

    async def base() -> None:
        await handler_stub()

    async def handler_stub() -> None:
        return None

    loop = asyncio.get_running_loop()
    for _ in range(2000):  # warm up
        proto.data_received(REQUEST)
        await sleep(0)
    t.out.clear()
    start = time.thread_time_ns()
    for _ in range(n):
        proto.data_received(REQUEST)
        await sleep(0)
    protocol_ns = (time.thread_time_ns() - start) / n
    assert t.out.count(b"HTTP/1.1 200 OK\r\n") == n
    # the same loop turn without the protocol: a task doing as little as the handler
    start = time.thread_time_ns()
    for _ in range(n):
        loop.create_task(base())
        await sleep(0)
    baseline_ns = (time.thread_time_ns() - start) / n
    proto.connection_lost(None)
    return protocol_ns, baseline_ns


def measure(name: str, n: int) -> tuple[float, float]:
    return uvloop.run(_measure(twin_class(name), n))


@pytest.mark.parametrize("name", ["pure", "compiled"])
def test_protocol_cost_per_request(name: str) -> None:
    protocol_ns, baseline_ns = measure(name, 20_000)
    print(f"\n{name}: {protocol_ns:,.0f} ns/request, loop turn alone {baseline_ns:,.0f} ns")
    assert protocol_ns < 200_000  # a loose bound: only a pathological slowdown fails


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    for twin_name in ("pure", "compiled"):
        for _ in range(3):
            p, b = measure(twin_name, count)
            print(
                f"{twin_name:8s} {p:8,.0f} ns/request  loop turn + task alone {b:6,.0f} ns  "
                f"protocol {p - b:8,.0f} ns"
            )

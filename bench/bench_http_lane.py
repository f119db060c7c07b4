"""Where an unbatched HTTP/1.1 binary-tensor request's CPU goes, in one process: the floor.

    .venv/bin/python bench/bench_http_lane.py [--n 20000] [--rounds 5]

Serves the ONNX add_sub (FP32[16] x 2, ``bench/models.py``) **without** dynamic batching
(``add_sub_nb``) from an ``InferenceCore`` in this process, and times, on this thread
(``time.thread_time_ns``: time spent waiting for a CPU does not count; best of ``--rounds``),
CPU µs per request of:

* ``session.run``: the model's own ``InferenceSession.run`` on the request's arrays, alone;
* ``decode``: ``codec.decode_infer`` of perf_analyzer's body (its template hit);
* ``decode + core.infer``: that plus admission, validation, the scheduler, the lane
  (``Model._run_one``: the run, the response, statistics), the future's result;
* ``decode + core.infer_now``: that through the single-request lane instead
  (``core/runtime/lane.py``), where the checkout has it;
* ``encode``: ``codec.encode_infer`` of the response;
* ``dispatch``: ``make_dispatch``'s handler on a request object (everything but the wire);
* ``wire``: the native ``Http1Protocol`` (the compiled twin when built) fed perf_analyzer's
  request bytes and answering with a fixed response of the same size from a handler that
  does no work (parse, the request object, the serving run, the response's framing, the
  write to a transport that discards it);
* ``wire + dispatch``: the protocol fed the same bytes, serving the real handler: all of a
  request's Python, as at concurrency 1 (one request per data_received, no loop turn).

The last four are driven as ``eager.begin`` drives a handler (about 0.5 µs of coroutine of
their own); a request that has to wait (a run sent off the loop after a slow sample) is
finished on the loop, counted, and its hand-off stays in the figure. What the event loop, the
sockets and the kernel cost is left out (``cpu-per-request`` on a running server has those).
Run against another checkout with ``PYTHONPATH=PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import ADD_SUB_IO, _save_onnx, _write, onnx_graphs  # noqa: E402

MODEL = "add_sub_nb"


def _request_bytes() -> tuple[bytes, bytes, int]:
    """perf_analyzer's request (its headers, as it sends them), its body, its JSON length."""
    import tritonclient.http as th

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    ins = [th.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in (0, 1)]
    for i in ins:
        i.set_data_from_numpy(a, binary_data=True)
    outs = [th.InferRequestedOutput(f"OUTPUT{i}", binary_data=True) for i in (0, 1)]
    body, hlen = th.InferenceServerClient.generate_request_body(ins, outputs=outs)
    head = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        "User-Agent: libcurl-agent/1.0\r\nAccept: */*\r\n"
        f"Inference-Header-Content-Length: {hlen}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("ascii")
    return head + body, body, int(hlen or 0)


class _Transport:
    """A transport that discards what is written and counts the writes."""

    def __init__(self) -> None:
        self.writes = 0
        self.last: Any = b""

    def write(self, data: Any) -> None:
        self.writes += 1
        self.last = data

    def writelines(self, data: Any) -> None:
        self.writes += 1

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _best(fn: Callable[[], Any], n: int, rounds: int) -> float:
    out = float("inf")
    for _ in range(rounds):
        gc.collect()
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        out = min(out, (time.thread_time_ns() - t0) / n / 1e3)
    return out


_waited = [0]  # requests whose run left the loop (a slow sample sent the instance off it)


async def _best_async(make: Callable[[], Any], n: int, rounds: int) -> float:
    """``_best`` of a coroutine per request, run to its end at once when it does not wait
    (as ``eager.begin`` runs a handler); one that waits is finished on the loop and counted
    in ``_waited`` (its time then includes the hand-off)."""
    out = float("inf")
    for _ in range(rounds):
        gc.collect()
        t0 = time.thread_time_ns()
        for _ in range(n):
            coro = make()
            try:
                yielded = coro.send(None)
            except StopIteration:
                continue
            _waited[0] += 1
            while True:
                if yielded is None:  # a bare yield to the loop
                    await asyncio.sleep(0)
                else:  # a future: wait for it as a task would
                    yielded._asyncio_future_blocking = False
                    await yielded
                try:
                    yielded = coro.send(None)
                except StopIteration:
                    break
        out = min(out, (time.thread_time_ns() - t0) / n / 1e3)
    return out


class _Request:
    """What a transport hands ``dispatch`` (``frontends/base/http_call.HttpRequest``)."""

    def __init__(self, body: bytes, header_len: int) -> None:
        from tritonlite.frontends.wire._http1_py import Headers

        self.method = "POST"
        self.path = f"/v2/models/{MODEL}/infer"
        self.query = ""
        self.headers = Headers(
            {
                "host": "127.0.0.1:8000",
                "user-agent": "libcurl-agent/1.0",
                "accept": "*/*",
                "inference-header-content-length": str(header_len),
                "content-type": "application/octet-stream",
                "content-length": str(len(body)),
            }
        )
        self.version = (1, 1)
        self.peer = ("127.0.0.1", 1)
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def disconnected(self) -> bool:
        return False


async def _measure(n: int, rounds: int) -> dict[str, float]:
    from tritonlite.core.core import InferenceCore
    from tritonlite.frontends.base.http_call import HttpResponse
    from tritonlite.frontends.http import codec
    from tritonlite.frontends.http.app import make_dispatch
    from tritonlite.frontends.wire.http1 import HttpLimits, HttpService
    from tritonlite.options import ServerOptions

    wire_bytes, body, hlen = _request_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / MODEL
        _write(d, 'platform: "onnxruntime_onnx"', ADD_SUB_IO, "")
        _save_onnx(onnx_graphs.add_sub("FP32", (16,)), d / "1" / "model.onnx")
        opts = ServerOptions(model_repositories=(Path(tmp),))
        core = InferenceCore(opts)
        assert await core.start() == []
        try:
            dispatch = make_dispatch(core, opts)
            service = HttpService(dispatch, HttpLimits())
            proto = service.protocol()
            t = _Transport()
            proto.connection_made(t)
            for i in range(300):  # until the instance's policy keeps runs on the loop
                proto.data_received(wire_bytes)
                while t.writes < i + 1:
                    await asyncio.sleep(0.0005)
            assert b" 200 OK" in bytes(t.last[:20]), bytes(t.last[:300])
            model = core.repository.get(MODEL, -1)
            session = model.idle[0].impl._session
            a = np.arange(16, dtype=np.float32).reshape(1, 16)
            feed = {"INPUT0": a, "INPUT1": a}
            names = ["OUTPUT0", "OUTPUT1"]
            req = _Request(body, hlen)
            resp = await core.infer(codec.decode_infer(body, hlen, MODEL, -1))
            answer = await dispatch(req)
            parts = list(answer.body)

            async def fixed(request: Any) -> HttpResponse:
                await request.read()
                return HttpResponse(200, list(parts), answer.content_type, answer.headers)

            wire = HttpService(fixed, HttpLimits()).protocol()
            wt = _Transport()
            wire.connection_made(wt)

            def fed(proto: Any, t: _Transport) -> Callable[[], Any]:
                async def one() -> None:
                    w = t.writes
                    proto.data_received(wire_bytes)
                    while t.writes == w:  # its serving run waits: let the loop finish it
                        await asyncio.sleep(0)

                return one

            def lane() -> Any:
                if not hasattr(core, "infer_now"):  # a checkout without the lane
                    return None
                got = core.infer_now(codec.decode_infer(body, hlen, MODEL, -1))
                if got is None:
                    _waited[0] += 1  # the lane left it to the general path: not timed here
                return got

            out = {
                "session.run": _best(lambda: session.run(names, feed), n, rounds),
                "decode": _best(lambda: codec.decode_infer(body, hlen, MODEL, -1), n, rounds),
                "decode + core.infer": await _best_async(
                    lambda: core.infer(codec.decode_infer(body, hlen, MODEL, -1)), n, rounds
                ),
                "decode + core.infer_now (the lane)": _best(lane, n, rounds),
                "encode": _best(lambda: codec.encode_infer(resp), n, rounds),
                "dispatch": await _best_async(lambda: dispatch(req), n, rounds),
                "wire": await _best_async(fed(wire, wt), n, rounds),
                "wire + dispatch": await _best_async(fed(proto, t), n, rounds),
            }
            return out
        finally:
            await core.stop()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    from tritonlite.frontends.wire import http1

    try:  # the server's loop (tritonlite runs on uvloop where it is installed)
        import uvloop

        res = uvloop.run(_measure(a.n, a.rounds))
    except ImportError:
        res = asyncio.run(_measure(a.n, a.rounds))
    print(f"{http1.describe()}; load {__import__('os').getloadavg()[0]:.1f}")
    for k, v in res.items():
        print(f"{k}: {v:.1f} us/request")
    print(f"requests that waited (a loop turn or a hand-off included above): {_waited[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

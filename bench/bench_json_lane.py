"""Where a JSON infer request's CPU goes, in one process: wrk's request, wire to response.

    python bench/bench_json_lane.py --repo REPO [--model add_sub_nb] [--n 2000] [--rounds 15]

Serves ``--model`` (an unbatched add_sub: FP32[16] x 2, e.g. model_repository/add_sub without
``dynamic_batching``) from an ``InferenceCore`` in this process and times, on this thread
(``time.thread_time_ns``: waiting for a CPU does not count; best of ``--rounds`` x ``--n``),
CPU µs per request of:

* ``orjson.loads``: the parse of ``bench/json_add_sub.lua``'s body alone;
* ``session run``: the model's bare ONNX Runtime run (``_sess.run``) on two arrays;
* ``decode``: ``codec.decode_infer`` of the body (the request objects);
* ``encode``: ``codec.encode_infer`` of its response;
* ``dispatch``: ``make_dispatch``'s handler on a request object (everything but the wire);
* ``wire``: the native ``Http1Protocol`` (the compiled twin when built) fed wrk's request
  bytes, answered with a fixed response of the same bytes by a handler that does no work;
* ``wire + dispatch``: the protocol fed the same bytes, serving the real handler (and the
  JSON infer call, ``app.make_json_infer``, where the checkout has one, as the server wires
  it): all of a JSON request's Python, one request per ``data_received``;
* ``wire + dispatch, no json_infer``: the same with every request through ``dispatch``.

Also the Python-level calls one request makes (``sys.setprofile``: Python functions and the C
functions they call; compiled code's own calls are not seen). The event loop, the sockets and
the kernel are left out (``cpu-per-request`` on a running server has those). Run against
another checkout with ``PYTHONPATH=PATH``, from that checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_DATA0 = ",".join(f"{i}.0" for i in range(16))
_DATA1 = ",".join(f"{i}.5" for i in range(16))
BODY = (
    '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[' + _DATA0 + "]},"
    '{"name":"INPUT1","datatype":"FP32","shape":[1,16],"data":[' + _DATA1 + "]}]}"
).encode()


def _wire(model: str) -> bytes:
    """wrk's request (its headers, as wrk sends them with bench/json_add_sub.lua)."""
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        f"Content-Length: {len(BODY)}\r\nContent-Type: application/json\r\n\r\n"
    ).encode() + BODY


class _Transport:
    """A transport that discards what is written and counts the writes."""

    def __init__(self) -> None:
        self.writes = 0
        self.last: Any = b""

    def write(self, data: Any) -> None:
        self.writes += 1
        self.last = data

    def writelines(self, data: Any) -> None:
        self.write(b"".join(data))

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


async def _best_async(make: Callable[[], Any], n: int, rounds: int) -> float:
    """``_best`` of a coroutine per request, run as ``eager.begin`` runs a handler; one that
    waits is finished on the loop (its hand-off then counts)."""
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
            while True:
                if yielded is None:
                    await asyncio.sleep(0)
                else:
                    yielded._asyncio_future_blocking = False
                    await yielded
                try:
                    yielded = coro.send(None)
                except StopIteration:
                    break
        out = min(out, (time.thread_time_ns() - t0) / n / 1e3)
    return out


class _Request:
    """What a transport hands ``dispatch`` for wrk's request."""

    def __init__(self) -> None:
        from tritonlite.frontends.wire._http1_py import Headers

        self.method = "POST"
        self.path = ""
        self.query = ""
        self.headers = Headers(
            {
                "host": "127.0.0.1:8000",
                "content-length": str(len(BODY)),
                "content-type": "application/json",
            }
        )
        self.version = (1, 1)
        self.peer = ("127.0.0.1", 1)

    async def read(self) -> bytes:
        return BODY

    def disconnected(self) -> bool:
        return False


async def _measure(repo: Path, model: str, n: int, rounds: int) -> dict[str, Any]:
    import orjson

    from tritonlite.core.core import InferenceCore
    from tritonlite.frontends.base.http_call import HttpResponse
    from tritonlite.frontends.http import codec
    from tritonlite.frontends.http.app import make_dispatch
    from tritonlite.frontends.wire.http1 import HttpLimits, HttpService
    from tritonlite.options import ServerOptions

    wire = _wire(model)
    opts = ServerOptions(model_repositories=(repo,))
    core = InferenceCore(opts)
    assert await core.start() == []
    try:
        dispatch = make_dispatch(core, opts)
        service = HttpService(dispatch, HttpLimits())
        try:  # the JSON infer call, as the server wires it (a checkout that has one)
            from tritonlite.frontends.http.app import make_json_infer

            service.json_infer = make_json_infer(core, opts)
        except ImportError:
            pass
        proto = service.protocol()
        t = _Transport()
        proto.connection_made(t)
        # the same without the JSON infer call: every request through ``dispatch``
        slow = HttpService(dispatch, HttpLimits()).protocol()
        st = _Transport()
        slow.connection_made(st)
        for i in range(300):  # until the instance's policy keeps runs on the loop
            proto.data_received(wire)
            while t.writes < i + 1:
                await asyncio.sleep(0.0005)
        assert b" 200 OK" in bytes(t.last[:20]), bytes(t.last[:300])
        sess = core.repository.get(model, -1).idle[0].impl._session
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        feed = {"INPUT0": a, "INPUT1": a}
        names = [o.name for o in sess.get_outputs()]
        resp = await core.infer(codec.decode_infer(BODY, None, model, -1))
        req = _Request()
        req.path = f"/v2/models/{model}/infer"
        answer = await dispatch(req)
        parts = list(answer.body)

        async def fixed(request: Any) -> HttpResponse:
            await request.read()
            return HttpResponse(200, list(parts), answer.content_type, answer.headers)

        bare = HttpService(fixed, HttpLimits()).protocol()
        bt = _Transport()
        bare.connection_made(bt)

        def fed(p: Any, tr: _Transport) -> Callable[[], Any]:
            async def one() -> None:
                w = tr.writes
                p.data_received(wire)
                while tr.writes == w:
                    await asyncio.sleep(0)

            return one

        calls: collections.Counter[str] = collections.Counter()

        def prof(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                calls[frame.f_code.co_name] += 1
            elif event == "c_call":
                calls[f"C {getattr(arg, '__qualname__', arg)}"] += 1

        sys.setprofile(prof)
        for _ in range(100):
            proto.data_received(wire)
        sys.setprofile(None)
        calls.pop("C setprofile", None)
        return {
            "orjson.loads": _best(lambda: orjson.loads(BODY), n, rounds),
            "session run": _best(lambda: sess._sess.run(names, feed, None), n, rounds),
            "decode": _best(lambda: codec.decode_infer(BODY, None, model, -1), n, rounds),
            "encode": _best(lambda: codec.encode_infer(resp), n, rounds),
            "dispatch": await _best_async(lambda: dispatch(req), n, rounds),
            "wire": await _best_async(fed(bare, bt), n, rounds),
            "wire + dispatch": await _best_async(fed(proto, t), n, rounds),
            "wire + dispatch, no json_infer": await _best_async(fed(slow, st), n, rounds),
            "python calls per request": sum(calls.values()) / 100,
        }
    finally:
        await core.stop()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--model", default="add_sub_nb")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    from tritonlite.frontends.http import jsondata
    from tritonlite.frontends.wire import http1

    try:  # the server's loop (tritonlite runs on uvloop where it is installed)
        import uvloop

        res = uvloop.run(_measure(a.repo, a.model, a.n, a.rounds))
    except ImportError:
        res = asyncio.run(_measure(a.repo, a.model, a.n, a.rounds))
    print(f"{http1.describe()}; {jsondata.describe()}; load {os.getloadavg()[0]:.1f}")
    for k, v in res.items():
        print(f"{k}: {v:.1f}" + ("" if k.startswith("python") else " us/request"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Python-backend request path in one process, without sockets: CPU µs per request.

    .venv/bin/python bench/bench_pypath.py [--n 20000] [--rounds 5] [--root PATH ...]

Serves the bench's ``model.py`` add_sub (``bench/models.py``) from an ``InferenceCore`` in this
process and drives the HTTP handler (``make_dispatch``) and the gRPC ``ModelInfer`` servicer
directly with perf_analyzer's request bytes (two FP32 [1,16] inputs, binary outputs), one
request at a time, as at concurrency 1. What the loop, the sockets and the kernel cost is left
out: this is the Python a request runs, the part a change to the request path moves. Prints
the thread's CPU µs per request (``time.thread_time_ns``: a preempted run does not count the
time it waited; one loop turn per request included; median and minimum of ``--rounds``), the
function calls per request (Python and C, counted with ``sys.setprofile`` over 200 requests:
steady where times are not), and how many requests left the loop for the instance thread
(those are not in the figure).

``--root PATH`` (repeatable) measures another checkout's tritonlite in a child process each,
alternating rounds, so two commits compare on one machine state.

``--phases`` instead times the HTTP request's parts cumulatively (best of 5 rounds, wall µs per
call, this checkout): decode; decode + validation; that + the instance's run (the Python
backend's request view, model.py, the response); decode + ``core.infer`` (admission, the
scheduler, statistics); encode; the whole ``dispatch``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class _Headers(dict[str, str]):
    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class _HttpRequest:
    """What a transport hands ``dispatch`` (frontends/base/http_call.py ``HttpRequest``)."""

    __slots__ = ("method", "path", "query", "headers", "version", "peer", "_body")

    def __init__(self, body: bytes, header_len: int) -> None:
        self.method = "POST"
        self.path = "/v2/models/add_sub/infer"
        self.query = ""
        self.headers = _Headers(
            {
                "content-type": "application/octet-stream",
                "inference-header-content-length": str(header_len),
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


class _GrpcCall:
    def metadata(self) -> list[tuple[str, str]]:
        return []

    def peer_is_local(self) -> bool:
        return True

    def set_compression(self, algorithm: str | None) -> None:
        pass

    def time_remaining(self) -> float | None:
        return None

    def add_done_callback(self, fn: Any) -> None:
        pass

    async def read(self) -> bytes | None:
        return None

    async def write(self, message: bytes) -> None:
        pass


def _bodies() -> tuple[bytes, int, bytes]:
    import numpy as np
    import tritonclient.grpc as tg
    import tritonclient.http as th

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    ins = [th.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in (0, 1)]
    for i in ins:
        i.set_data_from_numpy(a, binary_data=True)
    outs = [th.InferRequestedOutput(f"OUTPUT{i}", binary_data=True) for i in (0, 1)]
    body, hlen = th.InferenceServerClient.generate_request_body(ins, outputs=outs)
    from tritonclient.grpc import service_pb2

    g = service_pb2.ModelInferRequest(model_name="add_sub")
    for i in (0, 1):
        t = tg.InferInput(f"INPUT{i}", [1, 16], "FP32")
        t.set_data_from_numpy(a)
        g.inputs.append(t._get_tensor())
        g.raw_input_contents.append(a.tobytes())
    for i in (0, 1):
        g.outputs.add(name=f"OUTPUT{i}")
    return body, int(hlen or 0), g.SerializeToString()


async def _drive(coro: Any) -> bool:
    """Run one request's coroutine; whether it finished without suspending (its batch ran
    inline, on this thread). One that suspends is finished on the loop and counted apart."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return True
    while True:
        while not yielded.done():  # a future: wait for it, then resume where it stopped
            await asyncio.sleep(0.0001)
        try:
            yielded = coro.send(None)
        except StopIteration:
            return False


def _count_calls(counter: list[int]) -> Any:
    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            counter[0] += 1

    return prof


@contextlib.asynccontextmanager
async def _core() -> AsyncIterator[tuple[Any, Any]]:
    """An ``InferenceCore`` serving the bench's model.py add_sub, and its options."""
    from tritonlite.core.core import InferenceCore
    from tritonlite.options import ServerOptions

    sys.path.insert(0, str(HERE))
    from models import write_python_repo

    with tempfile.TemporaryDirectory() as tmp:
        repo = write_python_repo(Path(tmp) / "py", ("add_sub",))
        opts = ServerOptions(model_repositories=(repo,))
        core = InferenceCore(opts)
        assert await core.start() == []
        try:
            yield core, opts
        finally:
            await core.stop()


async def _measure(n: int, rounds: int) -> dict[str, Any]:
    from tritonlite.frontends.grpc import servicer
    from tritonlite.frontends.http.app import make_dispatch

    body, hlen, gbody = _bodies()
    async with _core() as (core, opts):
        dispatch = make_dispatch(core, opts)
        grpc_infer = servicer.methods(core, opts)[
            "/inference.GRPCInferenceService/ModelInfer"
        ].unary
        call = _GrpcCall()
        req = _HttpRequest(body, hlen)
        for _ in range(50):  # the first batches run on the instance thread (measured)
            resp = await dispatch(req)
            assert resp.status == 200, resp.body
            await grpc_infer(gbody, call)  # type: ignore[misc]
        out: dict[str, Any] = {}
        for label, fn in (
            ("http", lambda: dispatch(req)),
            ("grpc", lambda: grpc_infer(gbody, call)),  # type: ignore[misc]
        ):
            per = []
            offloaded = 0
            for _ in range(rounds):
                gc.collect()
                inline = 0
                t0 = time.thread_time_ns()
                for _ in range(n):
                    inline += await _drive(fn())
                    await asyncio.sleep(0)  # the instance goes back to idle a turn later
                per.append((time.thread_time_ns() - t0) / n / 1e3)
                offloaded += n - inline
            out[label] = per
            counter = [0]
            for _ in range(200):
                sys.setprofile(_count_calls(counter))
                try:
                    await _drive(fn())
                finally:
                    sys.setprofile(None)
                await asyncio.sleep(0)
            out[label + " calls"] = [counter[0] / 200]
            out[label + " offloaded"] = [float(offloaded)]
        return out


async def _phases(n: int) -> dict[str, float]:
    from tritonlite.core.tensors import validate
    from tritonlite.frontends.http import codec
    from tritonlite.frontends.http.app import make_dispatch

    def best(fn: Any) -> float:
        out = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            out = min(out, (time.perf_counter_ns() - t0) / n / 1e3)
        return out

    def finish(coro: Any) -> Any:
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        raise RuntimeError("the request waited: its batch left the loop")

    body, hlen, _ = _bodies()
    async with _core() as (core, opts):
        dispatch = make_dispatch(core, opts)
        req = _HttpRequest(body, hlen)
        for _ in range(50):  # the first batches run on the instance thread (measured)
            await _drive(dispatch(req))
            await asyncio.sleep(0)
        model = core.repository.get("add_sub", -1)
        instance = model.idle[0]

        def decode() -> Any:
            return codec.decode_infer(body, hlen, "add_sub", -1)

        def validated() -> Any:
            r = decode()
            validate.prepare(model.signature, r, core.shm)
            return r

        resp = finish(core.infer(decode()))
        return {
            "decode": best(decode),
            "decode + validate": best(validated),
            "decode + validate + instance run": best(lambda: instance.run(model, [validated()])),
            "decode + core.infer": best(lambda: finish(core.infer(decode()))),
            "encode": best(lambda: codec.encode_infer(resp)),
            "dispatch (all of it)": best(lambda: finish(dispatch(req))),
        }


def _line(key: str, values: list[float]) -> str:
    if key.endswith("offloaded"):  # requests whose batch left the loop (not in the figure)
        return f"{key}: {sum(values):.0f} requests"
    if key.endswith("calls"):
        return f"{key}: {statistics.median(values):.0f} per request"
    rounds = ", ".join(f"{x:.1f}" for x in values)
    return f"{key}: median {statistics.median(values):.1f} min {min(values):.1f} us/req ({rounds})"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--root", type=Path, action="append", default=[])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phases", action="store_true")
    a = ap.parse_args()
    if a.phases:
        import logging

        logging.disable(logging.WARNING)
        for k, v in asyncio.run(_phases(min(a.n, 5000))).items():
            print(f"{k}: {v:.1f} us")
        return 0
    if a.child or not a.root:
        import logging

        logging.disable(logging.WARNING)
        res = asyncio.run(_measure(a.n, a.rounds))
        if a.child:
            print(json.dumps(res))
        else:
            for k, v in res.items():
                print(_line(k, v))
        return 0
    results: dict[str, dict[str, list[float]]] = {str(r): {} for r in a.root}
    for _ in range(a.rounds):
        for root in a.root:
            env = {**os.environ, "PYTHONPATH": str(root.resolve())}
            p = subprocess.run(
                [sys.executable, __file__, "--child", "--n", str(a.n), "--rounds", "1"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items():
                results[str(root)].setdefault(k, []).extend(v)
    print(f"load {os.getloadavg()[0]:.1f}")
    for root, res in results.items():
        for k, v in res.items():
            print(f"{root} {_line(k, v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

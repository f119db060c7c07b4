"""A closed-loop load client that accounts for every request: tritonclient's asyncio clients.

    python deploy/fleet/loadgen.py --url 127.0.0.1:8000 --protocol http --model add_sub \
        --concurrency 8 --duration 20 --out result.json

Each of ``--concurrency`` workers sends one request, awaits its answer, checks it and sends the
next, until ``--duration`` seconds have passed; then every request still in flight is awaited
(bounded by the client timeout), so ``sent == ok + failed + wrong`` holds at the end. Failures
are kept with their wall-clock time (``time.time()``, which the fleet check compares with when it
killed a replica) and message; successes are kept as completion times to find gaps in service.

Models: ``add_sub`` and ``add_sub_cached`` (FP32[16] x 2 -> sum, difference; a response is wrong
unless both outputs match numpy's) and ``mlp`` (FP32[1024] INPUT0 -> OUTPUT0; checked for shape).
``--cached-share F`` sends that fraction of add_sub requests to ``add_sub_cached`` with one of
eight fixed inputs, so the response cache sees hits and misses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from typing import Any

import numpy as np


def _inputs(mod: Any, model: str, rng: random.Random) -> tuple[list[Any], np.ndarray | None]:
    if model == "mlp":
        x = np.full((1, 1024), rng.random(), dtype=np.float32)
        inp = mod.InferInput("INPUT0", [1, 1024], "FP32")
        inp.set_data_from_numpy(x)
        return [inp], None
    if model == "add_sub_cached":
        a = np.full((1, 16), float(rng.randrange(8)), dtype=np.float32)
    else:
        a = np.asarray([[rng.random() for _ in range(16)]], dtype=np.float32)
    b = np.ones((1, 16), dtype=np.float32)
    i0 = mod.InferInput("INPUT0", [1, 16], "FP32")
    i1 = mod.InferInput("INPUT1", [1, 16], "FP32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(b)
    return [i0, i1], np.stack([a + b, a - b])


def _check(model: str, result: Any, expect: np.ndarray | None) -> bool:
    if model == "mlp":
        out = result.as_numpy("OUTPUT0")
        return out is not None and out.shape == (1, 1024)
    o0, o1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert expect is not None
    return (o0 is not None and o1 is not None and np.array_equal(o0, expect[0])
            and np.array_equal(o1, expect[1]))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.protocol == "http":
        import tritonclient.http.aio as mod

        client: Any = mod.InferenceServerClient(args.url, conn_limit=args.concurrency,
                                                conn_timeout=args.timeout)
    else:
        import tritonclient.grpc.aio as mod

        client = mod.InferenceServerClient(args.url)
    rng = random.Random(args.seed)
    stats: dict[str, Any] = {"sent": 0, "ok": 0, "failed": 0, "wrong": 0}
    failures: list[tuple[float, str]] = []
    done_at: list[float] = []
    latencies: list[float] = []
    deadline = time.monotonic() + args.duration

    async def one() -> None:
        model = args.model
        if model == "add_sub" and rng.random() < args.cached_share:
            model = "add_sub_cached"
        inputs, expect = _inputs(mod, model, rng)
        stats["sent"] += 1
        t0 = time.monotonic()
        try:
            if args.protocol == "http":
                result = await client.infer(model, inputs, timeout=int(args.timeout * 1e6))
            else:
                result = await client.infer(model, inputs, client_timeout=args.timeout)
        except Exception as exc:  # every failure is counted, whatever raised it
            stats["failed"] += 1
            failures.append((time.time(), f"{type(exc).__name__}: {exc}"[:200]))
            return
        if _check(model, result, expect):
            stats["ok"] += 1
            done_at.append(time.time())
            latencies.append(time.monotonic() - t0)
        else:
            stats["wrong"] += 1
            failures.append((time.time(), "wrong output"))

    stop_file = args.stop_file

    async def worker() -> None:
        while time.monotonic() < deadline and not (stop_file and os.path.exists(stop_file)):
            await one()

    started = time.time()
    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    elapsed = time.monotonic() - t0
    await client.close()
    lat = sorted(latencies)
    gaps = np.diff(np.asarray(done_at)) if len(done_at) > 1 else np.zeros(0)
    kinds: dict[str, int] = {}
    for _, msg in failures:
        kinds[msg] = kinds.get(msg, 0) + 1
    return {
        **stats, "lost": stats["sent"] - stats["ok"], "protocol": args.protocol,
        "model": args.model, "concurrency": args.concurrency, "started": started,
        "elapsed_s": elapsed, "throughput": stats["ok"] / elapsed if elapsed else 0.0,
        "p50_ms": 1e3 * lat[len(lat) // 2] if lat else None,
        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
        "max_gap_s": float(gaps.max()) if gaps.size else None,
        "failure_kinds": kinds, "failure_times": [t for t, _ in failures],
        "done_at": done_at if args.keep_times else [],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--model", default="add_sub", choices=("add_sub", "add_sub_cached", "mlp"))
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=20.0, help="client timeout per request (s)")
    p.add_argument("--cached-share", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-file", default="", help="stop sending once this file exists")
    p.add_argument("--keep-times", action="store_true", help="keep every completion time")
    p.add_argument("--out", default="-")
    args = p.parse_args(argv)
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    text = json.dumps(result)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

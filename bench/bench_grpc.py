"""ModelInfer calls/s through tritonlite vs a bare grpc.aio echo server, side by side.

Run: ``python bench/bench_grpc.py [--duration 5] [--concurrency 16] [--clients 1]``.
Prints Markdown tables and writes the raw numbers to ``bench/results/grpc.csv`` (replacing
the rows of the same configuration, with or without ``--dynamic-batching``).
Goal: tritonlite >= 85% of the echo server's calls/s.

What is compared
    * ``tritonlite``: the real server (its own process, uvloop, the ONNX add_sub model with
      FP32[1,16] inputs and outputs), every request decoded, validated, run by ONNX Runtime
      on an instance thread and encoded.
    * ``echo``: a grpc.aio server in its own process, on the same event loop kind, with the
      same channel options and the same generic-handler registration, whose ModelInfer parses
      the request into a ``ModelInferRequest`` and answers a canned ``ModelInferResponse``
      holding tritonlite's own answer to that request (so the same size), serialized on
      every call.

The client
    ``--clients`` processes (default 1), each a grpc.aio client on one channel driving
    ``--concurrency`` in-flight ModelInfer calls (a closed loop: each of N tasks sends its next
    request when its previous answer arrives) for ``--duration`` seconds after a warm-up. The
    request is serialized once up front (identity serializers on the client), so the client
    spends its time in gRPC, not in protobuf. The same client, options and request drive both
    servers, one after the other, ``--rounds`` times alternating.

Reading the numbers
    On a 2-core machine the client shares the CPU with the server (and with whatever else
    runs there), so absolute numbers are low and noisy; the ratio is what the goal is about.
    The table also gives each server's CPU time per call (from /proc, over the measured
    window), which other load moves much less than calls/s. ``--dynamic-batching`` serves
    add_sub with ``dynamic_batching {}`` (default: no batcher, Triton's default config).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import multiprocessing as mp
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
ROOT = pathlib.Path(__file__).resolve().parent.parent
METHOD = "/inference.GRPCInferenceService/ModelInfer"
CONFIG = """name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{name: "INPUT0" data_type: TYPE_FP32 dims: [16]},
       {name: "INPUT1" data_type: TYPE_FP32 dims: [16]}]
output [{name: "OUTPUT0" data_type: TYPE_FP32 dims: [16]},
        {name: "OUTPUT1" data_type: TYPE_FP32 dims: [16]}]
"""


def build_repo(root: pathlib.Path, dynamic_batching: bool = False) -> pathlib.Path:
    import onnx
    from onnx import TensorProto, helper

    def vi(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [vi("INPUT0"), vi("INPUT1")],
        [vi("OUTPUT0"), vi("OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (root / "add_sub" / "1").mkdir(parents=True)
    onnx.save(model, str(root / "add_sub" / "1" / "model.onnx"))
    config = CONFIG + ("dynamic_batching {}\n" if dynamic_batching else "")
    (root / "add_sub" / "config.pbtxt").write_text(config)
    return root


def request_bytes() -> bytes:
    from tritonlite._proto import pb

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    req = pb.ModelInferRequest(model_name="add_sub", id="1")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(a.tobytes())
    return bytes(req.SerializeToString())


# -- the echo server (runs in its own process) ---------------------------------------------------
def _echo_main(port_q: Any, response: bytes) -> None:
    import grpc

    from tritonlite._proto import SERVICE_NAME, pb
    from tritonlite.frontends.grpc.server import MAX_MESSAGE

    canned = pb.ModelInferResponse.FromString(response)

    async def model_infer(request: Any, context: Any) -> Any:
        return canned

    async def main() -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.so_reuseport", 0),
            ]
        )
        handler = grpc.unary_unary_rpc_method_handler(
            model_infer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, {"ModelInfer": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_q.put(port)
        await server.wait_for_termination()

    _run(main())


# -- tritonlite's gRPC front end over a stand-in core (runs in its own process) ----------------
def _frontend_main(port_q: Any) -> None:
    """The real start_grpc / servicer / codec, with a core whose infer answers at once.

    Every request is still decoded into an InferRequest and every answer encoded, so this is
    the front end's own cost: the gap to ``echo`` is the codec, the gap to ``tritonlite`` is
    the core (validation, scheduling, the instance thread and ONNX Runtime).
    """
    from tritonlite.contracts.types import InferOutput, InferRequest, InferResponse
    from tritonlite.frontends.grpc.server import start_grpc
    from tritonlite.options import ServerOptions

    class NoTrace:
        enabled = False  # the servicer asks before stamping a request's receive times

    class StandInCore:
        trace = NoTrace()

        def is_ready(self) -> bool:
            return True

        async def infer(self, req: InferRequest, decoupled_message: str = "") -> InferResponse:
            a, b = req.inputs[0].data, req.inputs[1].data
            assert a is not None and b is not None
            return InferResponse(
                req.model_name,
                "1",
                req.id,
                [
                    InferOutput("OUTPUT0", "FP32", a.shape, a),
                    InferOutput("OUTPUT1", "FP32", b.shape, b),
                ],
            )

    async def main() -> None:
        opts = ServerOptions(
            model_repositories=(pathlib.Path("."),), grpc_port=0, grpc_address="127.0.0.1"
        )
        server, port = await start_grpc(StandInCore(), opts)  # type: ignore[arg-type]
        port_q.put(port)
        await server.wait_for_termination()

    _run(main())


def _run(coro: Any) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


# -- the client (runs in its own process) --------------------------------------------------------
def _client_main(
    target: str, payload: bytes, concurrency: int, warmup: float, duration: float, out_q: Any
) -> None:
    import grpc

    async def main() -> tuple[int, float, list[int]]:
        def ident(b: bytes) -> bytes:
            return b

        async with grpc.aio.insecure_channel(
            target,
            options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
        ) as ch:
            call = ch.unary_unary(METHOD, request_serializer=ident, response_deserializer=ident)
            await call(payload)
            start = time.perf_counter()
            t_measure = start + warmup
            t_end = t_measure + duration
            counts = [0] * concurrency
            lat: list[int] = []

            async def worker(k: int) -> None:
                while True:
                    t0 = time.perf_counter_ns()
                    await call(payload)
                    now = time.perf_counter()
                    if now >= t_end:
                        return
                    if now >= t_measure:
                        counts[k] += 1
                        lat.append(time.perf_counter_ns() - t0)

            await asyncio.gather(*(worker(k) for k in range(concurrency)))
            return sum(counts), duration, lat

    n, dur, lat = asyncio.run(main())
    out_q.put((n, dur, lat))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(
    target: str, payload: bytes, args: argparse.Namespace, server_pid: int
) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_client_main,
            args=(target, payload, args.concurrency, args.warmup, args.duration, q),
        )
        for _ in range(args.clients)
    ]
    for p in procs:
        p.start()
    time.sleep(args.warmup + 0.5)  # client start-up (spawn + imports) and its warm-up
    cpu0 = cpu_seconds(server_pid)
    t0 = time.perf_counter()
    results = [q.get(timeout=args.warmup + args.duration + 60) for _ in procs]
    cpu = cpu_seconds(server_pid) - cpu0
    window = time.perf_counter() - t0
    for p in procs:
        p.join()
    calls = sum(r[0] for r in results)
    lat = np.array([x for r in results for x in r[2]], dtype=np.int64)
    return {
        "calls": calls,
        "calls_per_s": calls / args.duration,
        # server CPU per call: robust to other load on the machine, unlike calls/s
        "server_cpu_us": cpu / (calls * window / args.duration) * 1e6 if calls else 0.0,
        "p50_us": float(np.percentile(lat, 50)) / 1e3 if lat.size else 0.0,
        "p99_us": float(np.percentile(lat, 99)) / 1e3 if lat.size else 0.0,
    }


def start_tritonlite(repo: pathlib.Path) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            "--grpc-port",
            "0",
            "--grpc-address",
            "127.0.0.1",
            "--allow-http=false",
            "--allow-metrics=false",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        m = re.search(r"Started GRPCInferenceService at \S+:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("tritonlite did not start")


def tritonlite_response_bytes(port: int, payload: bytes) -> bytes:
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(
            METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        return bytes(call(payload))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per server")
    ap.add_argument(
        "--dynamic-batching",
        action="store_true",
        help="serve add_sub with dynamic_batching {} (default: no batcher)",
    )
    args = ap.parse_args()
    payload = request_bytes()
    rows: list[dict[str, Any]] = []
    names = ("echo", "front end", "tritonlite")
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repo(pathlib.Path(tmp), args.dynamic_batching)
        tl, tl_port = start_tritonlite(repo)
        ctx = mp.get_context("spawn")
        helpers: list[Any] = []
        try:
            response = tritonlite_response_bytes(tl_port, payload)
            targets = {}
            for name, target, extra in (
                ("echo", _echo_main, (response,)),
                ("front end", _frontend_main, ()),
            ):
                port_q = ctx.Queue()
                proc = ctx.Process(target=target, args=(port_q, *extra), daemon=True)
                proc.start()
                helpers.append(proc)
                targets[name] = (port_q.get(timeout=60), proc.pid)
            targets["tritonlite"] = (tl_port, tl.pid)
            for rnd in range(args.rounds):
                for name in names:
                    port, pid = targets[name]
                    r = drive(f"127.0.0.1:{port}", payload, args, pid)
                    rows.append({"server": name, "round": rnd, **r})
        finally:
            for proc in helpers:
                proc.terminate()
                proc.join()
            tl.terminate()
            tl.wait(30)

    def of(name: str, key: str) -> list[float]:
        return [r[key] for r in rows if r["server"] == name]

    def median(xs: list[float]) -> float:
        xs = sorted(xs)
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2

    # each round measures the servers back to back: the median of the per-round ratios is
    # the figure least moved by other load on the machine
    ratio = {
        name: median([x / e for x, e in zip(of(name, "calls_per_s"), of("echo", "calls_per_s"))])
        for name in names
    }
    best = {name: max(of(name, "calls_per_s")) / max(of("echo", "calls_per_s")) for name in names}
    cpu = {name: median(of(name, "server_cpu_us")) for name in names}
    print(
        f"\nModelInfer, add_sub FP32[1,16] (request {len(payload)} B, response "
        f"{len(response)} B), {args.clients} client process(es) x {args.concurrency} "
        f"in flight, {args.duration:.0f} s per round, {args.rounds} rounds"
        f"{', dynamic batching' if args.dynamic_batching else ''}\n"
    )
    print("| server | round | calls/s | server CPU µs/call | p50 µs | p99 µs |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['server']} | {r['round']} | {r['calls_per_s']:.0f} | "
            f"{r['server_cpu_us']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} |"
        )
    print(
        "\n| server | calls/s vs echo (median of rounds) | best vs best | "
        "median server CPU µs/call |"
    )
    print("|---|---|---|---|")
    for name in names:
        print(f"| {name} | {ratio[name]:.1%} | {best[name]:.1%} | {cpu[name]:.0f} |")
    print(
        f"\ngoal: tritonlite >= 85% of echo's calls/s; measured {ratio['tritonlite']:.1%} "
        f"(front end alone {ratio['front end']:.1%})"
    )
    RESULTS.mkdir(exist_ok=True)
    header = [
        "server",
        "round",
        "clients",
        "concurrency",
        "duration_s",
        "dynamic_batching",
        "calls",
        "calls_per_s",
        "server_cpu_us_per_call",
        "p50_us",
        "p99_us",
        "ratio_to_echo",
    ]
    path = RESULTS / "grpc.csv"
    kept: list[list[str]] = []  # the other configuration's rows from an earlier run
    if path.exists():
        with open(path, newline="") as f:
            old = list(csv.reader(f))
        if old and old[0] == header:
            kept = [row for row in old[1:] if row[5] != str(int(args.dynamic_batching))]
    echo_by_round = {r["round"]: r["calls_per_s"] for r in rows if r["server"] == "echo"}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(kept)
        for r in rows:
            w.writerow(
                [
                    r["server"],
                    r["round"],
                    args.clients,
                    args.concurrency,
                    args.duration,
                    int(args.dynamic_batching),
                    r["calls"],
                    f"{r['calls_per_s']:.1f}",
                    f"{r['server_cpu_us']:.1f}",
                    f"{r['p50_us']:.1f}",
                    f"{r['p99_us']:.1f}",
                    f"{r['calls_per_s'] / echo_by_round[r['round']]:.4f}",
                ]
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""tune's built-in load generator: a closed loop of ``concurrency`` clients over HTTP or gRPC.

Each client sends a request, waits for its answer and sends the next (perf_analyzer's
concurrency mode). HTTP is HTTP/1.1 keep-alive over raw asyncio streams, one connection per
client, with the binary tensor extension; gRPC is ``grpc.aio`` with tritonlite's own message
classes, requests serialized once. So tune needs nothing beyond the package.

Requests cycle through a pool of payloads: ``pool`` distinct inputs when the stream is meant to
repeat (the response cache can answer), else a pool large enough that the cache is not tried.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritonlite._proto import pb
from tritonlite.tune.server import ModelStats

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
DISTINCT_POOL = 509  # "every request differs": more payloads than a probe repeats in practice


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]


def request_specs(
    metadata: dict[str, Any], max_batch_size: int, shapes: dict[str, tuple[int, ...]] | None = None
) -> list[TensorSpec]:
    """The inputs of one request (batch 1) from the model metadata; ``shapes`` fills -1 dims."""
    out = []
    for t in metadata.get("inputs", []):
        name = str(t["name"])
        dims = [int(d) for d in t["shape"]]
        if max_batch_size > 0 and dims and dims[0] == -1:
            dims = dims[1:]
        if shapes and name in shapes:
            dims = list(shapes[name])
        dims = [1 if d < 0 else d for d in dims]
        full = (1, *dims) if max_batch_size > 0 else tuple(dims)
        out.append(TensorSpec(name, str(t["datatype"]), full))
    return out


def make_tensor(spec: TensorSpec, rng: np.random.Generator) -> bytes:
    """Random raw bytes of one input (BYTES: 4-byte little-endian length prefixes)."""
    n = math.prod(spec.shape)
    if spec.datatype == "BYTES":
        items = [str(int(v)).encode() for v in rng.integers(0, 1_000_000, size=n)]
        return b"".join(len(b).to_bytes(4, "little") + b for b in items)
    if spec.datatype == "BF16":
        return rng.standard_normal(n).astype(np.float32).view(np.uint32).astype(np.uint16).tobytes()
    dtype = np.dtype(_NUMPY[spec.datatype])
    if dtype.kind == "b":
        return rng.integers(0, 2, size=n).astype(dtype).tobytes()
    if dtype.kind in "iu":
        return rng.integers(0, 100, size=n).astype(dtype).tobytes()
    return rng.standard_normal(n).astype(dtype).tobytes()


def make_pool(specs: list[TensorSpec], size: int, seed: int = 0) -> list[list[bytes]]:
    rng = np.random.default_rng(seed)
    return [[make_tensor(s, rng) for s in specs] for _ in range(max(1, size))]


def http_requests(
    model: str, host: str, specs: list[TensorSpec], outputs: list[str], pool: list[list[bytes]]
) -> list[bytes]:
    """Whole HTTP/1.1 requests (head and body), one per payload of ``pool``."""
    out = []
    for tensors in pool:
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": s.name,
                        "shape": list(s.shape),
                        "datatype": s.datatype,
                        "parameters": {"binary_data_size": len(b)},
                    }
                    for s, b in zip(specs, tensors, strict=True)
                ],
                "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs],
            }
        ).encode()
        body = header + b"".join(tensors)
        head = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append(head + body)
    return out


def grpc_requests(
    model: str, specs: list[TensorSpec], outputs: list[str], pool: list[list[bytes]]
) -> list[bytes]:
    """Serialized ``ModelInferRequest`` messages, one per payload of ``pool``."""
    out = []
    for tensors in pool:
        req = pb.ModelInferRequest(model_name=model)
        for s in specs:
            req.inputs.add(name=s.name, datatype=s.datatype, shape=list(s.shape))
        for o in outputs:
            req.outputs.add(name=o)
        req.raw_input_contents.extend(tensors)
        out.append(req.SerializeToString())
    return out


@dataclass
class Sample:
    """One measured point. Latencies in µs (client side); server times are per request."""

    concurrency: int
    throughput: float = 0.0
    p50_us: float = 0.0
    p90_us: float = 0.0
    p99_us: float = 0.0
    avg_us: float = 0.0
    count: int = 0
    errors: int = 0
    error: str = ""
    window_s: float = 0.0
    server: ModelStats = field(default_factory=ModelStats)

    @property
    def ok(self) -> bool:
        return self.count > 0 and not self.error

    def per_request_us(self, ns: int) -> float:
        return ns / self.server.success / 1000 if self.server.success else 0.0

    @property
    def queue_us(self) -> float:
        return self.per_request_us(self.server.queue_ns)

    @property
    def compute_us(self) -> float:
        s = self.server
        return self.per_request_us(s.compute_input_ns + s.compute_infer_ns + s.compute_output_ns)

    @property
    def avg_batch(self) -> float:
        s = self.server
        return s.inference_count / s.execution_count if s.execution_count else 0.0


def merge(samples: list[Sample]) -> Sample:
    """Rounds of one point as one sample: mean throughput and percentiles, the worst p99,
    counts and server counters summed."""
    if len(samples) == 1:
        return samples[0]
    n = len(samples)
    out = Sample(samples[0].concurrency)
    out.throughput = sum(s.throughput for s in samples) / n
    out.p50_us = sum(s.p50_us for s in samples) / n
    out.p90_us = sum(s.p90_us for s in samples) / n
    out.p99_us = max(s.p99_us for s in samples)
    out.avg_us = sum(s.avg_us for s in samples) / n
    out.count = sum(s.count for s in samples)
    out.errors = sum(s.errors for s in samples)
    out.error = next((s.error for s in samples if s.error), "")
    out.window_s = sum(s.window_s for s in samples)
    for s in samples:
        out.server = out.server.plus(s.server)
    return out


def summarize(sample: Sample, latencies_ns: list[int], window_s: float) -> Sample:
    sample.count = len(latencies_ns)
    sample.window_s = window_s
    if latencies_ns:
        lat = np.asarray(latencies_ns, dtype=np.float64) / 1000.0
        sample.throughput = len(latencies_ns) / window_s
        sample.p50_us, sample.p90_us, sample.p99_us = (
            float(v) for v in np.percentile(lat, [50, 90, 99])
        )
        sample.avg_us = float(lat.mean())
    return sample


class _HttpClient:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, request: bytes) -> str:
        """One request; "" when it succeeded, else the error."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = -1
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-length":
                length = int(value)
        if length < 0:
            raise RuntimeError("HTTP response without Content-Length")
        body = await self.reader.readexactly(length)
        if status != 200:
            try:
                return str(json.loads(body).get("error", f"HTTP {status}"))
            except ValueError:
                return f"HTTP {status}"
        return ""

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _closed_loop(
    send: Callable[[int], Awaitable[str]],
    concurrency: int,
    warmup_s: float,
    window_s: float,
    stats: Callable[[], ModelStats],
) -> Sample:
    sample = Sample(concurrency)
    done: list[tuple[int, int]] = []
    stop = False

    async def client(k: int) -> None:
        nonlocal stop
        i = k
        while not stop:
            t0 = time.monotonic_ns()
            try:
                err = await send(i)
            except (OSError, RuntimeError, asyncio.IncompleteReadError, ValueError) as exc:
                err = f"{type(exc).__name__}: {exc}"
            t1 = time.monotonic_ns()
            if err:
                sample.errors += 1
                sample.error = sample.error or err
                stop = True
                return
            done.append((t1, t1 - t0))
            i += concurrency

    tasks = [asyncio.ensure_future(client(k)) for k in range(concurrency)]
    try:
        await asyncio.sleep(warmup_s)  # the measurement window itself, not a synchronisation
        before = await asyncio.to_thread(stats)
        start = time.monotonic_ns()
        await asyncio.sleep(window_s)
        end = time.monotonic_ns()
        after = await asyncio.to_thread(stats)
    finally:
        stop = True
        _, pending = await asyncio.wait(tasks, timeout=30)
        for t in pending:
            t.cancel()
    sample.server = after.minus(before)
    lat = [d for t, d in done if start <= t <= end]
    return summarize(sample, lat, (end - start) / 1e9)


async def http_load(
    url: str,
    requests: list[bytes],
    concurrency: int,
    warmup_s: float,
    window_s: float,
    stats: Callable[[], ModelStats],
) -> Sample:
    host, _, port = url.rpartition(":")
    clients = [_HttpClient(host, int(port)) for _ in range(concurrency)]
    n = len(requests)

    async def send(i: int) -> str:
        return await clients[i % concurrency].send(requests[i % n])

    try:
        return await _closed_loop(send, concurrency, warmup_s, window_s, stats)
    finally:
        for c in clients:
            c.close()


async def grpc_load(
    url: str,
    requests: list[bytes],
    concurrency: int,
    warmup_s: float,
    window_s: float,
    stats: Callable[[], ModelStats],
) -> Sample:
    import grpc

    n = len(requests)
    async with grpc.aio.insecure_channel(url) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )

        async def send(i: int) -> str:
            try:
                await infer(requests[i % n])
            except grpc.aio.AioRpcError as exc:
                return f"{exc.code().name}: {exc.details()}"
            return ""

        return await _closed_loop(send, concurrency, warmup_s, window_s, stats)

"""The native gRPC transport with real clients: ``grpc`` channels, ``tritonclient.grpc`` and raw
HTTP/2 sockets, against a server built from a tiny methods registry on port 0."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import grpc
import hpack
import numpy as np
import pytest
import tritonclient.grpc as tc
import uvloop
from test_h2_connection import COMPILED, NOT_BUILT
from test_h2_peer import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    frame,
    grpc_message,
    parse_frames,
    settings,
)
from tritonclient.grpc import service_pb2

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.frontends.base.call import GrpcCall, RpcError
from tritonlite.frontends.wire import _h2_py, grpc_native
from tritonlite.frontends.wire.detect import Detect
from tritonlite.frontends.wire.grpc_native import (
    GrpcLimits,
    GrpcProtocol,
    NativeGrpcServer,
    start_grpc_native,
)

UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
SERVICE = "/inference.GRPCInferenceService/"


class Method:
    def __init__(self, unary: Any = None, stream: Any = None) -> None:
        self.unary = unary
        self.stream = stream


class Registry:
    """The test methods, and what their handlers saw (set from the server's loop)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.gate = threading.Event()

    async def echo(self, request: bytes, call: GrpcCall) -> bytes:
        return request

    async def meta(self, request: bytes, call: GrpcCall) -> bytes:
        md = [(k, v.hex() if isinstance(v, bytes) else v) for k, v in call.metadata()]
        return json.dumps(
            {"metadata": md, "local": call.peer_is_local(), "remaining": call.time_remaining()}
        ).encode()

    async def fail(self, request: bytes, call: GrpcCall) -> bytes:
        if request == b"triton":
            raise TritonliteError(ErrorCode.NOT_FOUND, "Request for unknown model: 'x' not found")
        if request == b"crash":
            raise ZeroDivisionError("boom")
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT.value[0], request.decode())

    async def slow(self, request: bytes, call: GrpcCall) -> bytes:
        self.started.set()
        try:
            await asyncio.sleep(float(request))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b"done"

    async def compress(self, request: bytes, call: GrpcCall) -> bytes:
        algorithm, _, body = request.partition(b":")
        call.set_compression(algorithm.decode() or None)
        return body

    async def stream(self, call: GrpcCall) -> None:
        while True:
            message = await call.read()
            if message is None:
                return
            if message == b"fail":
                raise RpcError(grpc.StatusCode.ABORTED.value[0], "stream failed")
            if message.startswith(b"many:"):  # many:COUNT:SIZE, more than any window holds
                _, count, size = message.split(b":")
                for i in range(int(count)):
                    await call.write(bytes([i % 256]) * int(size))
                continue
            await call.write(message)

    async def concurrent(self, call: GrpcCall) -> None:
        """Reads in its own task while this one writes, as the ModelStreamInfer servicer does."""
        box: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def reader() -> None:
            while (message := await call.read()) is not None:
                box.put_nowait(message)
            box.put_nowait(None)

        task = asyncio.ensure_future(reader())
        try:
            while (message := await box.get()) is not None:
                await call.write(message)
        finally:
            task.cancel()

    async def lazy(self, call: GrpcCall) -> None:
        """Reads nothing until the test opens ``gate``, then echoes the count of messages."""
        self.started.set()
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait, 30)
        count = 0
        while await call.read() is not None:
            count += 1
        await call.write(b"%d" % count)

    async def server_live(self, request: bytes, call: GrpcCall) -> bytes:
        return bytes(service_pb2.ServerLiveResponse(live=True).SerializeToString())

    async def model_infer(self, request: bytes, call: GrpcCall) -> bytes:
        req = service_pb2.ModelInferRequest.FromString(request)
        resp = service_pb2.ModelInferResponse(model_name=req.model_name, id=req.id)
        for inp in req.inputs:
            out = resp.outputs.add()
            out.name, out.datatype = inp.name, inp.datatype
            out.shape.extend(inp.shape)
        resp.raw_output_contents.extend(req.raw_input_contents)
        return bytes(resp.SerializeToString())

    def methods(self) -> dict[str, Any]:
        return {
            "/test.T/Echo": Method(self.echo),
            "/test.T/Meta": Method(self.meta),
            "/test.T/Fail": Method(self.fail),
            "/test.T/Slow": Method(self.slow),
            "/test.T/Compress": Method(self.compress),
            "/test.T/Stream": Method(stream=self.stream),
            "/test.T/Concurrent": Method(stream=self.concurrent),
            "/test.T/Lazy": Method(stream=self.lazy),
            SERVICE + "ServerLive": Method(self.server_live),
            SERVICE + "ModelInfer": Method(self.model_infer),
        }


class LoopThread:
    """A uvloop event loop in a thread: the server runs there, blocking clients here."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Served:
    def __init__(self, lt: LoopThread, registry: Registry, server: NativeGrpcServer) -> None:
        self.lt = lt
        self.registry = registry
        self.server = server
        self.port = server.port
        self.target = f"127.0.0.1:{server.port}"

    def channel(self, *options: tuple[str, Any], compression: Any = None) -> grpc.Channel:
        return grpc.insecure_channel(
            self.target, options=UNLIMITED + list(options), compression=compression
        )


def use_h2_twin(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started from now on run on the ``name`` ("pure", "compiled") H2Connection twin
    (the transport looks the class up per connection)."""
    if name == "pure":
        monkeypatch.setattr(grpc_native, "H2Connection", _h2_py.H2Connection)
    elif COMPILED is None:
        pytest.skip(NOT_BUILT)
    else:
        monkeypatch.setattr(grpc_native, "H2Connection", COMPILED.H2Connection)


@pytest.fixture(params=["pure", "compiled"])
def served(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A server on either H2Connection twin."""
    use_h2_twin(request.param, monkeypatch)
    with _serve() as s:
        yield s


@contextlib.contextmanager
def _serve(limits: GrpcLimits | None = None) -> Iterator[Served]:
    lt = LoopThread()
    registry = Registry()
    server = lt.run(start_grpc_native(registry.methods(), "127.0.0.1", 0, limits=limits))
    try:
        yield Served(lt, registry, server)
    finally:
        lt.run(server.stop(1.0))
        lt.close()


# ------------------------------------------------------------------ real clients


def test_unary_echo_and_errors(served: Served) -> None:
    with served.channel() as ch:
        echo = ch.unary_unary("/test.T/Echo")
        for body in (b"", b"x", bytes(range(256)) * 400):
            assert echo(body, timeout=10) == body
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/test.T/Fail")("bad thing ☃ 100% \n done".encode(), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == "bad thing ☃ 100% \n done"
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/test.T/Fail")(b"triton", timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert e.value.details() == "Request for unknown model: 'x' not found"
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/test.T/Fail")(b"crash", timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL and "boom" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/test.T/Nope")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert echo(b"still fine", timeout=10) == b"still fine"


def test_64_mib_round_trip(served: Served) -> None:
    big = np.random.default_rng(1).integers(0, 255, 64 << 20, dtype=np.uint8).tobytes()
    with served.channel() as ch:
        assert ch.unary_unary("/test.T/Echo")(big, timeout=60) == big
    client = tc.InferenceServerClient(served.target)
    try:
        assert client.is_server_live()
        data = np.frombuffer(big, dtype=np.float32).reshape(1, -1)
        inp = tc.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        result = client.infer("echo", [inp], request_id="r1", client_timeout=60)
        assert result.get_response().id == "r1"
        np.testing.assert_array_equal(result.as_numpy("INPUT0"), data)
    finally:
        client.close()


def test_100_concurrent_calls(served: Served) -> None:
    with served.channel() as ch:
        echo = ch.unary_unary("/test.T/Echo")
        futures = [echo.future(b"%d" % i * (1 + i * 100), timeout=30) for i in range(100)]
        for i, f in enumerate(futures):
            assert f.result() == b"%d" % i * (1 + i * 100)
        streams = [
            ch.stream_stream("/test.T/Stream")(iter([b"a%d" % i, b"b%d" % i]), timeout=30)
            for i in range(20)
        ]
        for i, s in enumerate(streams):
            assert list(s) == [b"a%d" % i, b"b%d" % i]


def test_keepalive_pings_are_welcome(served: Served) -> None:
    with served.channel(
        ("grpc.keepalive_time_ms", 100),
        ("grpc.keepalive_timeout_ms", 5000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ) as ch:
        slow = ch.unary_unary("/test.T/Slow")
        assert slow(b"1.5", timeout=10) == b"done"  # ~15 keepalive pings meanwhile
        assert ch.unary_unary("/test.T/Echo")(b"after", timeout=10) == b"after"


@pytest.mark.parametrize("algorithm", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_request_and_response_compression(served: Served, algorithm: Any) -> None:
    name = "gzip" if algorithm == grpc.Compression.Gzip else "deflate"
    body = b"compressible " * 10000
    with served.channel(compression=algorithm) as ch:
        assert ch.unary_unary("/test.T/Echo")(body, timeout=10) == body
        got = ch.unary_unary("/test.T/Compress")(name.encode() + b":" + body, timeout=10)
        assert got == body
        assert list(ch.stream_stream("/test.T/Stream")(iter([body, b"x"]), timeout=10)) == [
            body,
            b"x",
        ]


def test_metadata_bin_and_deadline(served: Served) -> None:
    with served.channel() as ch:
        got = json.loads(
            ch.unary_unary("/test.T/Meta")(
                b"",
                timeout=5,
                metadata=[
                    ("x-key", "Value 1"),
                    ("x-data-bin", b"\x00\xff\x10"),
                    ("x-big", "v" * 40000),
                ],
            )
        )  # HEADERS + CONTINUATIONs
    md = dict(got["metadata"])
    assert md["x-key"] == "Value 1" and md["x-data-bin"] == "00ff10"
    assert md["x-big"] == "v" * 40000
    assert got["local"] is True
    assert 0 < got["remaining"] <= 5.5  # the client rounds its deadline up


def test_deadline_cancels_the_handler(served: Served) -> None:
    with served.channel() as ch:
        assert ch.unary_unary("/test.T/Echo")(b"connected", timeout=10) == b"connected"
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/test.T/Slow")(b"30", timeout=1.0)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - t0 < 10
        assert served.registry.started.is_set() and served.registry.cancelled.wait(10)


def test_grpc_timeout_header_is_enforced_by_the_server(served: Served) -> None:
    raw = RawClient(served.port)
    raw.request("/test.T/Slow", grpc_message(b"30"), extra=[(b"grpc-timeout", b"200m")])
    frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
    trailers = raw.headers(frames[-1])
    assert (b"grpc-status", b"4") in trailers
    assert served.registry.cancelled.wait(10)
    raw.close()


def test_client_cancel_cancels_the_handler(served: Served) -> None:
    with served.channel() as ch:
        future = ch.unary_unary("/test.T/Slow").future(b"30", timeout=30)
        assert served.registry.started.wait(10)
        future.cancel()
        assert served.registry.cancelled.wait(10)
        assert ch.unary_unary("/test.T/Echo")(b"ok", timeout=10) == b"ok"


def test_bidirectional_stream(served: Served) -> None:
    messages = [b"m%d" % i * (1 + 1000 * (i % 7)) for i in range(300)]
    with served.channel() as ch:
        call = ch.stream_stream("/test.T/Stream")
        assert list(call(iter(messages), timeout=30)) == messages
        with pytest.raises(grpc.RpcError) as e:
            list(call(iter([b"a", b"fail", b"b"]), timeout=30))
        assert e.value.code() == grpc.StatusCode.ABORTED and e.value.details() == "stream failed"


def test_stream_writes_wait_for_a_slow_reader(served: Served) -> None:
    """40 MiB of responses through 4 MiB windows and a 1 MiB write buffer: write() waits for
    the client's WINDOW_UPDATEs, nothing is lost or reordered."""
    with served.channel() as ch:
        got = ch.stream_stream("/test.T/Stream")(iter([b"many:40:1048576", b"end"]), timeout=60)
        for i, message in enumerate(got):
            if i < 40:
                assert len(message) == 1 << 20 and message[:1] == bytes([i])
                if i % 10 == 0:
                    time.sleep(0.05)  # a reader that falls behind (not synchronisation)
            else:
                assert message == b"end" and i == 40
        # small messages from a handler that never pauses between writes
        got = ch.stream_stream("/test.T/Stream")(iter([b"many:20000:100"]), timeout=60)
        assert sum(1 for m in got if len(m) == 100) == 20000


def test_stream_reading_and_writing_from_two_tasks(served: Served) -> None:
    """A reader task waiting in read() while the handler waits in write(): each is woken by
    its own event (request data / window updates)."""
    sizes = [1 << 22, 4, 1_200_000, 64, 20, 1 << 20, 8] * 4
    messages = [bytes([k]) * n for k, n in enumerate(sizes)]
    with served.channel() as ch:
        got = list(ch.stream_stream("/test.T/Concurrent")(iter(messages), timeout=60))
    assert got == messages


def test_connection_loss_cancels_the_handler(served: Served) -> None:
    raw = RawClient(served.port)
    raw.request("/test.T/Slow", grpc_message(b"30"))
    assert served.registry.started.wait(10)
    raw.close()
    assert served.registry.cancelled.wait(10)
    _still_serves(served)


def test_graceful_stop_finishes_open_calls(served: Served) -> None:
    with served.channel() as ch:
        future = ch.unary_unary("/test.T/Slow").future(b"0.5", timeout=30)
        assert served.registry.started.wait(10)
        served.lt.run(served.server.stop(10))
        assert future.result() == b"done"
        with pytest.raises(grpc.RpcError):
            ch.unary_unary("/test.T/Echo")(b"late", timeout=5)


def test_protocol_behind_the_one_port_detector() -> None:
    """Created by the detector, which calls connection_made and then data_received with the
    bytes it already read."""
    lt = LoopThread()
    registry = Registry()
    lost: list[asyncio.Future[None]] = []

    class Tracked(GrpcProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.gone = asyncio.get_running_loop().create_future()
            lost.append(self.gone)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            transport = self.transport
            super().connection_lost(exc)
            self.gone.set_result(None)
            assert transport is not None

    async def start() -> asyncio.base_events.Server:
        return await asyncio.get_running_loop().create_server(
            lambda: Detect(asyncio.Protocol, lambda: Tracked(registry.methods())), "127.0.0.1", 0
        )

    async def stop(server: asyncio.base_events.Server) -> None:
        server.close()
        await asyncio.wait_for(asyncio.gather(*lost), 10)
        await server.wait_closed()

    server = lt.run(start())
    try:
        port = server.sockets[0].getsockname()[1]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert ch.unary_unary("/test.T/Echo")(b"via detect", timeout=10) == b"via detect"
        assert len(lost) == 1
    finally:
        lt.run(stop(server))
        lt.close()


# ------------------------------------------------------------------ raw sockets: misbehaviour


class RawClient:
    def __init__(self, port: int, client_settings: bytes | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.sid = 1
        self.sock.sendall(PREFACE + (client_settings or settings()))

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def request(
        self,
        path: str,
        body: bytes | None,
        end: bool = True,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> int:
        sid, data = self.encode_request(path, body, end, extra)
        self.send(data)
        return sid

    def encode_request(
        self,
        path: str,
        body: bytes | None,
        end: bool = True,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> tuple[int, bytes]:
        """A call's frames on the next stream id, not sent: (stream id, bytes)."""
        sid = self.sid
        self.sid += 2
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ] + (extra or [])
        data = frame(
            HEADERS,
            END_HEADERS | (END_STREAM if body is None and end else 0),
            sid,
            self.enc.encode(headers),
        )
        if body is not None:
            data += frame(DATA, END_STREAM if end else 0, sid, body)
        return sid, data

    def until(self, stop: Any, timeout: float = 10.0) -> list[tuple[int, int, int, bytes]]:
        """Read frames until ``stop(frame)`` or the server closes; all frames read so far."""
        deadline = time.monotonic() + timeout
        while True:
            for i, f in enumerate(self.frames):
                if stop(f):
                    return self.frames[: i + 1]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching frame; got {[f[:3] for f in self.frames]}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return self.frames
            self.buf += chunk
            end = 0
            while len(self.buf) - end >= 9:
                n = int.from_bytes(self.buf[end : end + 3], "big")
                if len(self.buf) - end < 9 + n:
                    break
                self.frames.extend(parse_frames(self.buf[end : end + 9 + n]))
                end += 9 + n
            self.buf = self.buf[end:]

    def headers(self, f: tuple[int, int, int, bytes]) -> list[tuple[bytes, bytes]]:
        return list(self.dec.decode(f[3], raw=True))

    def goaway_code(self) -> int | None:
        for t, _, _, p in self.frames:
            if t == GOAWAY:
                return int(struct.unpack(">L", p[4:8])[0])
        return None

    def close(self) -> None:
        self.sock.close()


def _still_serves(served: Served) -> None:
    with served.channel() as ch:
        assert ch.unary_unary("/test.T/Echo")(b"next", timeout=10) == b"next"


def test_rapid_reset_gets_enhance_your_calm(served: Served) -> None:
    raw = RawClient(served.port)
    for _ in range(2000):
        sid = raw.request("/test.T/Slow", None, end=False)
        if not raw.send(frame(RST_STREAM, 0, sid, struct.pack(">L", 8))):
            break
    raw.until(lambda f: f[0] == GOAWAY)
    assert raw.goaway_code() == 0xB
    raw.close()
    _still_serves(served)


@pytest.mark.parametrize("kind", ["ping", "continuation", "settings"])
def test_floods_get_enhance_your_calm(served: Served, kind: str) -> None:
    raw = RawClient(served.port)
    if kind == "continuation":
        raw.send(frame(HEADERS, 0, 1, raw.enc.encode([(b":method", b"POST")])))
        one = frame(9, 0, 1, b"\x40" * 4096)
    else:
        one = frame(PING, 0, 0, b"\0" * 8) if kind == "ping" else settings()
    for _ in range(200):
        if not raw.send(one * 20):
            break
    raw.until(lambda f: f[0] == GOAWAY)
    assert raw.goaway_code() == 0xB
    raw.close()
    _still_serves(served)


def test_unary_half_closed_mid_message_is_internal(served: Served) -> None:
    raw = RawClient(served.port)
    raw.request("/test.T/Echo", grpc_message(b"0123456789")[:-3])
    frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
    headers = raw.headers(frames[-1])
    assert (b"grpc-status", b"13") in headers
    raw.close()


def test_response_compression_on_the_wire(served: Served) -> None:
    raw = RawClient(served.port)
    raw.request(
        "/test.T/Compress",
        grpc_message(b"gzip:" + b"z" * 1000),
        extra=[(b"grpc-accept-encoding", b"identity,gzip")],
    )
    frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
    head = dict(raw.headers(next(f for f in frames if f[0] == HEADERS)))
    assert head[b"grpc-encoding"] == b"gzip"
    body = b"".join(f[3] for f in frames if f[0] == DATA)
    assert body[0] == 1 and zlib.decompress(body[5:], 31) == b"z" * 1000
    # a client that did not offer gzip gets it uncompressed
    raw.request(
        "/test.T/Compress",
        grpc_message(b"gzip:" + b"z" * 10),
        extra=[(b"grpc-accept-encoding", b"identity")],
    )
    frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM and f[2] == 3)
    assert [f[3] for f in frames if f[0] == DATA and f[2] == 3] == [grpc_message(b"z" * 10)]
    raw.close()


def test_a_client_that_never_reads_is_dropped() -> None:
    """Zero stream window and a full socket: the server buffers a bounded amount, then closes
    the connection after the stall timeout instead of holding the response forever."""
    with _serve(GrpcLimits(stall_timeout_s=0.5)) as served:
        raw = RawClient(served.port, settings((4, 0)))
        raw.request("/test.T/Echo", grpc_message(b"x" * 100000))
        frames = raw.until(lambda f: False, timeout=10)  # returns once the server closed
        assert not [f for f in frames if f[0] == DATA]
        raw.close()
        _still_serves(served)


def test_tls_with_alpn_h2(tmp_path: Any) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        capture_output=True,
        timeout=60,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {made.stderr!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    lt = LoopThread()
    registry = Registry()
    server = lt.run(start_grpc_native(registry.methods(), "127.0.0.1", 0, ssl_context=context))
    try:
        creds = grpc.ssl_channel_credentials(cert.read_bytes())
        with grpc.secure_channel(f"localhost:{server.port}", creds) as ch:
            assert ch.unary_unary("/test.T/Echo")(b"secret", timeout=10) == b"secret"
            # a large message: TLS records are read into the block it is assembled in
            big = np.random.default_rng(3).bytes((3 << 20) + 3)
            assert ch.unary_unary("/test.T/Echo")(big, timeout=30) == big
    finally:
        lt.run(server.stop(1.0))
        lt.close()


def _status(raw: RawClient, sid: int) -> tuple[bytes, bytes]:
    frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM and f[2] == sid)
    fields = dict(raw.headers(frames[-1]))
    return fields[b"grpc-status"], fields.get(b"grpc-message", b"")


def test_request_compression_errors() -> None:
    with _serve(GrpcLimits(max_message_size=1000)) as served:
        raw = RawClient(served.port)
        sid = raw.request("/test.T/Echo", grpc_message(b"x"), extra=[(b"grpc-encoding", b"br")])
        assert _status(raw, sid) == (b"12", b"Compression algorithm 'br' not supported")
        sid = raw.request("/test.T/Echo", grpc_message(b"x", compressed=1))
        assert _status(raw, sid)[0] == b"13"
        sid = raw.request(
            "/test.T/Echo",
            grpc_message(b"not gzip", compressed=1),
            extra=[(b"grpc-encoding", b"gzip")],
        )
        assert _status(raw, sid)[0] == b"13"
        bomb = zlib.compress(b"\0" * 100_000)  # 100 KB inflated from ~100 bytes
        sid = raw.request(
            "/test.T/Echo", grpc_message(bomb, compressed=1), extra=[(b"grpc-encoding", b"deflate")]
        )
        assert _status(raw, sid)[0] == b"8"
        sid = raw.request(
            "/test.T/Echo",
            grpc_message(zlib.compress(b"fits"), compressed=1),
            extra=[(b"grpc-encoding", b"deflate")],
        )
        assert _status(raw, sid) == (b"0", b"")
        raw.close()


def test_message_over_the_limit_is_resource_exhausted() -> None:
    with _serve(GrpcLimits(max_message_size=1 << 16)) as served, served.channel() as ch:
        echo = ch.unary_unary("/test.T/Echo")
        assert echo(b"x" * (1 << 16), timeout=10) == b"x" * (1 << 16)
        with pytest.raises(grpc.RpcError) as e:
            echo(b"x" * (1 << 20), timeout=10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.value.details() == f"Received message larger than max ({1 << 20} vs. {1 << 16})"
        assert echo(b"next", timeout=10) == b"next"


class _FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.out.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5) if name == "peername" else default

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_fuzz_the_transport() -> None:
    """Mutated conversations with gRPC headers (paths, timeouts, encodings, -bin metadata,
    compressed flags) through GrpcProtocol: nothing reaches the loop's exception handler."""
    from test_h2_fuzz import _mutate

    rng = __import__("random").Random(7)
    registry = Registry()
    registry.gate.set()  # ``lazy`` reads at once (a closed gate holds an executor thread 30 s)
    paths = list(registry.methods()) + ["/nope", ""]
    extras = [
        (b"grpc-timeout", b"1m"),
        (b"grpc-timeout", b"99999999999S"),
        (b"grpc-timeout", b"x"),
        (b"grpc-encoding", b"gzip"),
        (b"grpc-encoding", b"zz"),
        (b"grpc-accept-encoding", b"gzip"),
        (b"x-a-bin", b"!!notbase64"),
        (b"x-b-bin", b"AAEC"),
        (b"content-type", b"text/plain"),
        (b":method", b"GET"),
    ]

    def conversation() -> list[bytes]:
        enc = hpack.Encoder()
        frames = [PREFACE, settings()]
        for sid in range(1, 2 * rng.randint(1, 4), 2):
            headers = [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", rng.choice(paths).encode()),
                (b":authority", b"x"),
                (b"content-type", b"application/grpc"),
            ]
            headers += rng.sample(extras, rng.randint(0, 3))
            frames.append(frame(HEADERS, END_HEADERS, sid, enc.encode(headers)))
            body = rng.choice([b"0", b"0.001", b"gzip:abc", b"crash", b"triton", b"x" * 300])
            msg = grpc_message(zlib.compress(body), 1) if rng.random() < 0.2 else grpc_message(body)
            frames.append(frame(DATA, END_STREAM if rng.random() < 0.8 else 0, sid, msg))
        return frames

    async def main() -> int:
        loop = asyncio.get_running_loop()
        errors: list[Any] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        cases = answered = 0
        deadline = time.monotonic() + 30
        while cases < 2000 and time.monotonic() < deadline:
            proto = GrpcProtocol(registry.methods())
            transport = _FakeTransport()
            proto.connection_made(transport)
            convo = conversation()
            data = b"".join(convo) if rng.random() < 0.3 else _mutate(rng, convo, convo[1:])
            step = rng.randint(1, 200)
            for k in range(0, len(data), step):
                proto.data_received(data[k : k + step])
            for _ in range(3):
                await asyncio.sleep(0)
            proto.connection_lost(None)
            await asyncio.sleep(0)
            assert not errors, errors[0]
            answered += b"grpc-status" in b"".join(transport.out)
            cases += 1
        assert answered > cases // 4, (answered, cases)
        return cases

    assert asyncio.run(main()) >= 500


def test_nghttp2_h2load_client(served: Served, tmp_path: Any) -> None:
    """nghttp2's h2load (a strict independent HTTP/2 client, when installed): 4 connections
    with 32 concurrent streams each, every response 200 with a complete gRPC message."""
    h2load = shutil.which("h2load")
    if h2load is None:
        pytest.skip("h2load (nghttp2-client) is not installed")
    body = tmp_path / "body"
    body.write_bytes(grpc_message(b"y" * 3000))
    done = subprocess.run(
        [
            h2load,
            "-n",
            "4000",
            "-c",
            "4",
            "-m",
            "32",
            "-d",
            str(body),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            f"http://{served.target}/test.T/Echo",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "4000 succeeded, 0 failed, 0 errored" in done.stdout, done.stdout + done.stderr
    assert "status codes: 4000 2xx" in done.stdout, done.stdout
    _still_serves(served)


def test_a_handler_that_does_not_read_stops_the_stream_window() -> None:
    """read_queue unread requests hold back the stream's WINDOW_UPDATEs: the client can send
    at most one more window; reading them refills it."""
    with _serve(GrpcLimits(read_queue=4, stream_window=65536)) as served:
        raw = RawClient(served.port)
        sid = raw.request("/test.T/Lazy", None, end=False)
        assert served.registry.started.wait(10)
        for _ in range(7):  # 57 KiB: inside the 64 KiB window
            raw.send(frame(DATA, 0, sid, grpc_message(b"m" * 8192)))
        raw.send(frame(PING, 0, 0, b"12345678"))
        raw.until(lambda f: f[0] == PING and f[1] & 1)  # the server has read it all

        def refills() -> int:
            return sum(1 for f in raw.frames if f[0] == 8 and f[2] == sid)

        assert refills() == 0
        served.registry.gate.set()
        raw.until(lambda f: f[0] == 8 and f[2] == sid)
        raw.send(frame(DATA, END_STREAM, sid, b""))
        frames = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
        assert grpc_message(b"7") in b"".join(f[3] for f in frames if f[0] == DATA)
        raw.close()


def test_header_block_in_continuations_from_grpc() -> None:
    """With 16 KiB frames a 40 KB metadata value reaches the server as HEADERS plus
    CONTINUATION frames from grpc's own HTTP/2 stack."""
    received = bytearray()
    original = grpc_native.H2Connection

    class Recording(_h2_py.H2Connection):
        def receive(self, data: bytes) -> None:
            received.extend(data)
            super().receive(data)

    with _serve(GrpcLimits(max_frame_size=16384)) as served:
        grpc_native.H2Connection = Recording
        try:
            with served.channel() as ch:
                got = json.loads(
                    ch.unary_unary("/test.T/Meta")(
                        b"", timeout=5, metadata=[("x-big", "v" * 40000)]
                    )
                )
        finally:
            grpc_native.H2Connection = original
    assert dict(got["metadata"])["x-big"] == "v" * 40000
    frames = parse_frames(bytes(received[len(PREFACE) :]))
    assert CONTINUATION in [f[0] for f in frames]


def test_a_slow_reader_is_not_a_stalled_one() -> None:
    """Output that waits longer than the stall timeout in total, but moves: the connection
    stays (a 500-byte window refilled every 0.3 s, eight times: 2.4 s in all against a 1 s
    stall timeout, with room for a loaded machine's scheduling delays between refills)."""
    with _serve(GrpcLimits(stall_timeout_s=1.0)) as served:
        raw = RawClient(served.port, settings((4, 500)))
        sid = raw.request("/test.T/Echo", grpc_message(b"s" * 4000))

        def data() -> list[bytes]:
            return [f[3] for f in raw.frames if f[0] == DATA and f[2] == sid]

        for _ in range(20):
            count = len(data())
            raw.until(lambda f, n=count: len(data()) > n)
            if len(b"".join(data())) >= 4005:
                break
            time.sleep(0.3)  # pacing the reader, not synchronisation
            raw.send(frame(8, 0, sid, struct.pack(">L", 500)))
        assert b"".join(data()) == grpc_message(b"s" * 4000)
        trailers = raw.until(lambda f: f[0] == HEADERS and f[1] & END_STREAM)
        assert (b"grpc-status", b"0") in raw.headers(trailers[-1])
        raw.close()

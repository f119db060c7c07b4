"""Compressed requests through a real server: the real clients' gzip/deflate requests are served,
and a decompression bomb is refused at its limit while the server keeps serving.

The server runs with ``--http-max-input-size`` and ``--grpc-max-decompressed-size`` at 1 MiB;
the bombs inflate to 16 MiB from a few KiB. On ``--frontend=native`` a gRPC bomb is
RESOURCE_EXHAUSTED; grpc-core (``--frontend=aio``) bounds a message by its message limit only
(README, Compressed requests), so there the bomb is inflated and refused by the handler.
"""

from __future__ import annotations

import gzip
import os
import socket
import zlib
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import write_add_sub
from tritonclient.grpc import service_pb2

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
NATIVE = os.environ.get("TRITONLITE_TEST_FRONTEND", "native") == "native"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("compressed_repo")
    write_add_sub(repo, "add_sub", 8)
    s = start_server(
        repo, "--http-max-input-size", str(MiB), "--grpc-max-decompressed-size", str(MiB)
    )
    yield s
    s.stop()


def _inputs(module: object, n: int) -> tuple[list[object], np.ndarray, np.ndarray]:
    a = np.arange(16 * n, dtype=np.float32).reshape(n, 16)
    b = np.ones((n, 16), dtype=np.float32)
    infer_input = module.InferInput  # type: ignore[attr-defined]
    ins = [infer_input("INPUT0", [n, 16], "FP32"), infer_input("INPUT1", [n, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins, a, b


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_real_clients_compressed_requests_are_served(server: Server, algorithm: str) -> None:
    ins, a, b = _inputs(httpclient, 8)
    with httpclient.InferenceServerClient(server.http_url) as client:
        out = client.infer("add_sub", ins, request_compression_algorithm=algorithm)
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a + b)
    gins, a, b = _inputs(grpcclient, 8)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        out = client.infer("add_sub", gins, compression_algorithm=algorithm)
        np.testing.assert_array_equal(out.as_numpy("OUTPUT1"), a - b)


def _bomb(prefix: bytes, zeros: int, wbits: int = 31) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return c.compress(prefix) + c.compress(bytes(zeros)) + c.flush()


def _grpc_bomb(url: str, size: int) -> tuple[str, str]:
    """One ModelInfer whose gzip message inflates to ``size`` bytes; (grpc-status, message)."""
    head = service_pb2.ModelInferRequest(model_name="add_sub").SerializeToString()
    zeros = size - len(head) - 6
    length = bytearray()  # the varint length of raw_input_contents (field 7), the last field
    n = zeros
    while True:
        length.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            break
    field = bytes([7 << 3 | 2]) + bytes(length)
    message = _bomb(head + field, zeros)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    host, port = url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":authority", "x"),
                (":path", "/inference.GRPCInferenceService/ModelInfer"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-encoding", "gzip"),
            ],
        )
        conn.send_data(sid, b"\x01" + len(message).to_bytes(4, "big") + message, end_stream=True)
        sock.sendall(conn.data_to_send())
        fields: dict[str, str] = {}
        while "grpc-status" not in fields:
            data = sock.recv(65536)
            assert data, f"closed before a status: {fields}"
            for ev in conn.receive_data(data):
                if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields.update((k.decode(), v.decode()) for k, v in ev.headers)
            sock.sendall(conn.data_to_send())
    return fields["grpc-status"], fields.get("grpc-message", "")


def test_grpc_bomb_is_refused_and_the_server_keeps_serving(server: Server) -> None:
    status, message = _grpc_bomb(server.grpc_url, 16 * MiB)
    if NATIVE:
        assert status == "8", message
        assert message.startswith("Received message larger than max (more than 1048576 bytes")
    else:
        assert status == "3", message  # inflated by grpc-core, refused by the handler
    test_real_clients_compressed_requests_are_served(server, "gzip")


def test_http_bomb_is_413_and_the_server_keeps_serving(server: Server) -> None:
    host, port = server.http_url.rsplit(":", 1)
    body = gzip.compress(b'{"inputs": []}' + b" " * (16 * MiB), 9)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed before a response: {data!r}"
            data += chunk
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    test_real_clients_compressed_requests_are_served(server, "deflate")

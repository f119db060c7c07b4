"""``Expect: 100-continue`` over a raw socket, as libcurl (perf_analyzer's HTTP client) sends it
before a large body: the server answers 100 Continue, then the response; an expectation it does
not know is 417 with a JSON error, and the connection serves on."""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest

pytestmark = pytest.mark.timeout(60)

BODY = orjson.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "FP32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }
)


def _connect(server: Any) -> socket.socket:
    host, port = server.http_url.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def _head(expect: str, length: int) -> bytes:
    return (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: %s\r\n\r\n"
        % (length, expect.encode())
    )


def _response(s: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(65536)
    return head, body


def test_100_continue_then_the_answer_on_a_connection_that_stays_open(server: Any) -> None:
    with _connect(server) as s:
        for _ in range(2):
            s.sendall(_head("100-continue", len(BODY)))
            assert s.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
            s.sendall(BODY)
            head, body = _response(s)
            assert head.startswith(b"HTTP/1.1 200"), head
            out = {o["name"]: o["data"] for o in orjson.loads(body)["outputs"]}
            assert out["OUTPUT0"] == [2 * i for i in range(16)]


def test_an_unknown_expectation_is_417_with_a_json_error(server: Any) -> None:
    with _connect(server) as s:
        s.sendall(_head("something-else", len(BODY)) + BODY)
        head, body = _response(s)
        assert head.startswith(b"HTTP/1.1 417"), head
        assert orjson.loads(body) == {"error": "Unknown Expect: something-else"}
    with _connect(server) as s:  # and the server serves on
        s.sendall(_head("100-continue", len(BODY)))
        assert s.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(BODY)
        assert _response(s)[0].startswith(b"HTTP/1.1 200")

"""Connection handling on whichever front end the environment picks (issue 18 item 5).

* A body with a bad ``Content-Encoding`` gets its 400 / 501, and the connection either keeps
  serving or says ``Connection: close`` -- never a silent close (clients see resets).
* A ``Content-Length`` over ``--http-max-input-size`` is refused (413) before the body is sent.
* A gRPC unary call whose client half-closes before the whole message arrived is answered
  with a status (INTERNAL / INVALID_ARGUMENT, as grpc does), not left hanging.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from conftest import Server, start_server, wait_until
from repos import write_add_sub

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("conn_repo")
    write_add_sub(repo, "add_sub", 8)
    s = start_server(repo, "--http-max-input-size", "4096")
    yield s
    s.stop()


def _connect(url: str) -> socket.socket:
    host, port = url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=20)


def _response(sock: socket.socket) -> tuple[str, dict[str, str]]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return lines[0], headers


@pytest.mark.parametrize(
    "encoding, body",
    [
        ("bogus", b"xxxx"),
        ("gzip", b"not gzip"),
        ("deflate", b"not deflate"),
    ],
    ids=["unknown", "bad-gzip", "bad-deflate"],
)
def test_a_bad_content_encoding_never_closes_the_connection_silently(
    server: Server, encoding: str, body: bytes
) -> None:
    with _connect(server.http_url) as sock:
        sock.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
            b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (encoding.encode(), len(body), body)
        )
        status, headers = _response(sock)
        assert status.split()[1] in ("400", "501"), status
        if headers.get("connection", "").lower() == "close":
            assert sock.recv(1) == b""
        else:  # kept alive: it must serve the next request
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            status, _ = _response(sock)
            assert status.split()[1] == "200", status


def test_a_content_length_over_the_limit_is_refused_before_the_body(server: Server) -> None:
    with _connect(server.http_url) as sock:
        sock.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
        )
        status, headers = _response(sock)  # answered with none of the 1 GiB sent
        assert status.split()[1] == "413", status
        assert headers.get("connection", "").lower() == "close", headers


@pytest.mark.xfail(
    os.environ.get("TRITONLITE_TEST_FRONTEND") == "aio",
    run=False,  # it would wait out the socket timeout (20 s) for an answer that never comes
    reason="grpc.aio (grpc-core) never answers a unary call half-closed mid "
    "message: a known gap of the reference transport",
)
def test_a_unary_call_half_closed_mid_message_gets_a_status(server: Server) -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with _connect(server.grpc_url) as sock:
        sock.sendall(conn.data_to_send())
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":authority", "t"),
                (":path", "/inference.GRPCInferenceService/ModelInfer"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        # the prefix announces 100 bytes; 10 come, then the client half-closes
        conn.send_data(sid, struct.pack(">BI", 0, 100) + b"\x00" * 10, end_stream=True)
        sock.sendall(conn.data_to_send())
        status: Any = None
        while status is None:
            data = sock.recv(65536)
            assert data, "connection closed without an answer"
            for event in conn.receive_data(data):
                headers = getattr(event, "headers", None)
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields = {
                        bytes(k) if isinstance(k, bytes) else k.encode(): v for k, v in headers
                    }
                    if b"grpc-status" in fields:
                        status = int(fields[b"grpc-status"])
                elif isinstance(event, h2.events.StreamReset):
                    status = f"reset {event.error_code}"
            sock.sendall(conn.data_to_send())
        assert status in (3, 13), status  # INVALID_ARGUMENT / INTERNAL


# -- connection caps (issue 18 item 6) ---------------------------------------------------------
HTTP_CAP, GRPC_CAP = 3, 2
AIO = os.environ.get("TRITONLITE_TEST_FRONTEND") == "aio"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("capped_repo")
    write_add_sub(repo, "add_sub", 8)
    s = start_server(
        repo,
        "--http-max-connections",
        str(HTTP_CAP),
        "--grpc-max-connections",
        str(GRPC_CAP),
        "--allow-metrics=false",
    )
    yield s
    s.stop()


def _get(sock: socket.socket, path: str) -> tuple[str, dict[str, str], bytes]:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return status.split()[1], headers, body


def test_past_the_http_cap_only_health_is_served_then_closed(capped: Server) -> None:
    held = [_connect(capped.http_url) for _ in range(HTTP_CAP)]
    try:
        for sock in held:  # within the cap: served in full and kept alive
            status, headers, _ = _get(sock, "/v2/models/add_sub")
            assert status == "200" and headers.get("connection", "") != "close", headers
        with _connect(capped.http_url) as sock:
            status, headers, _ = _get(sock, "/v2/health/live")
            assert status == "200" and headers.get("connection", "").lower() == "close"
            assert sock.recv(1) == b""
        with _connect(capped.http_url) as sock:
            status, headers, body = _get(sock, "/v2/models/add_sub")
            assert status == "503" and headers.get("connection", "").lower() == "close"
            assert b"too many open connections: the server's limit is 3" in body, body
            assert sock.recv(1) == b""
        for sock in held:  # the connections within the cap still serve
            assert _get(sock, "/v2/models/add_sub")[0] == "200"
    finally:
        for sock in held:
            sock.close()

    def served() -> bool:  # once the server has seen the held connections close
        with _connect(capped.http_url) as sock:
            return _get(sock, "/v2/models/add_sub")[0] == "200"

    wait_until(served, timeout=20)


def _channel(url: str) -> Any:
    import grpc

    # a connection of its own (grpc shares subchannels between equal channels otherwise)
    return grpc.insecure_channel(url, options=[("grpc.use_local_subchannel_pool", 1)])


def _live(channel: Any) -> Any:
    import grpc
    from tritonclient.grpc import service_pb2

    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ServerLive",
        request_serializer=service_pb2.ServerLiveRequest.SerializeToString,
        response_deserializer=service_pb2.ServerLiveResponse.FromString,
    )
    try:
        return call(service_pb2.ServerLiveRequest(), timeout=10).live
    except grpc.RpcError as exc:
        return exc.code()


def test_past_the_grpc_cap_busy_connections_keep_their_place(capped: Server) -> None:
    import queue

    import grpc
    from tritonclient.grpc import service_pb2

    bad = service_pb2.ModelInferRequest(model_name="no_such_model").SerializeToString()
    channels = [_channel(capped.grpc_url) for _ in range(GRPC_CAP)]
    outboxes: list[queue.Queue[bytes | None]] = []
    calls = []
    try:
        for ch in channels:  # each connection holds an open stream
            outbox: queue.Queue[bytes | None] = queue.Queue()
            outbox.put(bad)
            call = ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")(
                iter(outbox.get, None), timeout=60
            )
            next(call)  # answered (an error message): the stream is open on the server
            outboxes.append(outbox)
            calls.append(call)
        third = _channel(capped.grpc_url)
        assert _live(third) == grpc.StatusCode.UNAVAILABLE
        third.close()
    finally:
        for outbox in outboxes:
            outbox.put(None)
        for call in calls:
            list(call)
        for ch in channels:
            ch.close()
    fresh = _channel(capped.grpc_url)
    wait_until(lambda: _live(fresh) is True, timeout=20)
    fresh.close()


@pytest.mark.skipif(AIO, reason="grpc-core's cap (grpc.aio) refuses past the cap: no eviction")
def test_past_the_grpc_cap_an_idle_connection_makes_room(capped: Server) -> None:
    channels = [_channel(capped.grpc_url) for _ in range(GRPC_CAP + 2)]
    try:
        for ch in channels:  # each new one closes an idle one; their clients reconnect
            assert _live(ch) is True
        for ch in channels:
            assert _live(ch) is True
    finally:
        for ch in channels:
            ch.close()


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def test_one_port_connections_that_say_nothing_count_against_the_cap(capped: Server) -> None:
    """Partial HTTP/2 prefaces are held while their protocol is told apart: counted from
    accept, the oldest make room, and a health probe on a new connection is still answered."""
    if capped.http_url != capped.grpc_url:
        pytest.skip("HTTP and gRPC on separate ports: no detection stage")
    held = []
    try:
        for _ in range(HTTP_CAP * 4):
            sock = _connect(capped.http_url)
            sock.sendall(b"PRI * HTTP/2.0\r\n")
            held.append(sock)
        wait_until(lambda: sum(not _closed_by_server(s) for s in held) <= HTTP_CAP, timeout=20)
        assert not _closed_by_server(held[-1])  # the newest kept their place
        with _connect(capped.http_url) as sock:
            status, _, _ = _get(sock, "/v2/health/ready")
            assert status == "200"
    finally:
        for sock in held:
            sock.close()

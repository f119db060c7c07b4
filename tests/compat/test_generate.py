"""The generate extension over real HTTP: ``/generate`` and ``/generate_stream`` (server-sent
events) for decoupled and non-decoupled python models, with the shapes, statuses and messages
real Triton 2.51 gives, bad inputs, and a client that leaves mid-stream.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import start_server
from decoupled_repo import build_decoupled_repo

pytestmark = pytest.mark.timeout(60)

ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = build_decoupled_repo(tmp_path_factory.mktemp("generate_repo"))
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    yield s
    s.stop()


def post(server: Any, path: str, body: Any) -> tuple[int, str, bytes]:
    """(status, content type, body) of one POST; ``body`` a JSON-able value or raw bytes."""
    url = urlsplit(f"http://{server.http_url}")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def events(body: bytes) -> list[Any]:
    assert body.endswith(b"\n\n") or body == b"", body
    chunks = [c for c in body.split(b"\n\n") if c]
    assert all(c.startswith(b"data: ") for c in chunks), body
    return [json.loads(c[len(b"data: ") :]) for c in chunks]


SSE = "text/event-stream; charset=utf-8"
NOT_INT = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
NOT_STRING = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"


def test_generate_on_a_non_decoupled_model(server: Any) -> None:
    status, ctype, body = post(
        server,
        "/v2/models/plain/generate",
        {"TEXT": "hi", "parameters": {"a": 1, "b": "x"}, "extra": 1.5},
    )
    assert (status, ctype.split(";")[0]) == (200, "application/json")
    # keys sorted; one-element outputs unwrapped; other keys reach the model as parameters
    assert body == (
        b'{"I":[1,2,3],"TEXT":"hi|{\\"a\\":1,\\"b\\":\\"x\\",\\"extra\\":1.5}",'
        b'"model_name":"plain","model_version":"1"}'
    )


def test_generate_stream_on_a_non_decoupled_model(server: Any) -> None:
    status, ctype, body = post(
        server, "/v2/models/plain/versions/1/generate_stream", {"TEXT": ["hi"], "id": "r7"}
    )
    assert (status, ctype) == (200, SSE)
    assert events(body) == [
        {
            "I": [1, 2, 3],
            "TEXT": 'hi|{"id":"r7"}',
            "id": "r7",
            "model_name": "plain",
            "model_version": "1",
        }
    ]


def test_generate_stream_on_a_decoupled_model(server: Any) -> None:
    status, ctype, body = post(
        server,
        "/v2/models/repeat/generate_stream",
        {"IN": [1, 2, 3], "DELAY": [0, 0, 0], "WAIT": 0},
    )
    assert (status, ctype) == (200, SSE)
    assert events(body) == [
        {"IDX": i, "OUT": v, "model_name": "repeat", "model_version": "1"}
        for i, v in enumerate([1, 2, 3])
    ]  # the flags-only final: nothing


def test_generate_on_a_decoupled_model_needs_exactly_one_response(server: Any) -> None:
    status, _, body = post(server, "/v2/models/dec/generate", {"TEXT": "last", "N": 1, "id": "q"})
    assert status == 200
    assert json.loads(body) == {
        "I": 0,
        "TEXT": "last0",
        "id": "q",
        "model_name": "dec",
        "model_version": "1",
    }
    for n in (0, 3):
        status, _, body = post(server, "/v2/models/dec/generate", {"TEXT": "count", "N": n})
        assert (status, json.loads(body)) == (200, {"error": ONE})  # Triton's status too


def test_stream_errors_as_events(server: Any) -> None:
    status, ctype, body = post(server, "/v2/models/dec/generate_stream", {"TEXT": "err"})
    assert (status, ctype) == (200, SSE)
    assert [e.get("TEXT", e.get("error")) for e in events(body)] == ["err0", "bad chunk 1", "err2"]
    # an error first fixes the status at 400, for model errors of either kind of model
    for model, text, message in (
        ("dec", "raise", "ValueError: boom"),
        ("plain", "fail", "asked to fail"),
        ("dec", "errfinal", "no luck"),
    ):
        status, ctype, body = post(server, f"/v2/models/{model}/generate_stream", {"TEXT": text})
        assert (status, ctype) == (400, SSE), body
        (event,) = events(body)
        assert message in event["error"]
        status, ctype, body = post(server, f"/v2/models/{model}/generate", {"TEXT": text})
        assert (status, ctype.split(";")[0]) == (400, "application/json")
        assert message in json.loads(body)["error"]


def test_zero_responses_stream_nothing(server: Any) -> None:
    status, ctype, body = post(server, "/v2/models/dec/generate_stream", {"TEXT": "count", "N": 0})
    assert (status, ctype, body) == (200, SSE, b"")


def test_batching_model_gets_a_batch_of_one(server: Any) -> None:
    status, _, body = post(server, "/v2/models/batched/generate", {"X": [1.5, 2]})
    assert (status, json.loads(body)) == (
        200,
        {"Y": [3.0, 4.0], "model_name": "batched", "model_version": "1"},
    )


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        (
            "/v2/models/nope/generate",
            {"TEXT": "x"},
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "/v2/models/plain/versions/7/generate_stream",
            {"TEXT": "x"},
            404,
            "Request for unknown model: 'plain' version 7 is not found",
        ),
        ("/v2/models/plain/generate_stream", {}, 400, "expected number of inputs between 1 and 2"),
        ("/v2/models/plain/generate", b"not json", 400, "failed to parse the request JSON buffer"),
        ("/v2/models/plain/generate", b"", 400, "failed to parse the request JSON buffer"),
        ("/v2/models/plain/generate", [1], 400, "generate request must be a JSON object"),
        (
            "/v2/models/plain/generate",
            {"TEXT": ["a", "b"]},
            400,
            "The schema can not convert input 'TEXT' to tensor with proper shape",
        ),
        (
            "/v2/models/plain/generate",
            {"TEXT": 5},
            400,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        ("/v2/models/plain/generate", {"TEXT": "a", "N": "x"}, 400, NOT_INT),
        ("/v2/models/plain/generate", {"TEXT": "a", "N": 1.5}, 400, NOT_INT),
        ("/v2/models/plain/generate", {"TEXT": "a", "N": 2**40}, 400, "out of range"),
        (
            "/v2/models/repeat/generate_stream",
            {"IN": [1], "DELAY": [-1], "WAIT": 0},
            400,
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            "/v2/models/plain/generate",
            {"TEXT": "a", "parameters": 5},
            400,
            "Expected JSON object for keyword: 'parameters'",
        ),
        (
            "/v2/models/plain/generate",
            {"TEXT": "a", "parameters": {"x": [1]}},
            400,
            "Converting keyword: 'parameters': parameter 'x' has invalid type. It should be either "
            "'int', 'bool', or 'string'.",
        ),
        (
            "/v2/models/plain/generate_stream",
            {"TEXT": "a", "extra": {"k": 1}},
            400,
            "parameter 'extra' has invalid type.",
        ),
        ("/v2/models/plain/generate", {"TEXT": "a", "id": 5}, 400, "Unable to parse 'id'"),
        # Triton's QA test_complex_schema / test_invalid_input_types, on both endpoints
        *(
            (f"/v2/models/plain/{ep}", body, 400, message)
            for ep in ("generate", "generate_stream")
            for body, message in (
                ({"TEXT": {"USER": "hello", "BOT": "world"}}, NOT_STRING),
                ({"TEXT": True, "N": 1}, NOT_STRING),
                ({"TEXT": [1]}, NOT_STRING),
                ({"TEXT": None}, NOT_STRING),
                ({"TEXT": "a", "N": True}, NOT_INT),
                ({"TEXT": 5, "N": "x"}, NOT_STRING),  # parsed in order
                ({"N": "x", "TEXT": 5}, NOT_INT),
            )
        ),
    ],
)
def test_bad_requests(server: Any, path: str, body: Any, status: int, message: str) -> None:
    got, ctype, data = post(server, path, body)
    assert (got, ctype.split(";")[0]) == (status, "application/json"), data
    assert message in json.loads(data)["error"]
    ok, _, _ = post(server, "/v2/models/plain/generate", {"TEXT": "still"})
    assert ok == 200


def test_wrong_method_and_route(server: Any) -> None:
    url = urlsplit(f"http://{server.http_url}")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("GET", "/v2/models/plain/generate")
    resp = conn.getresponse()
    assert resp.status == 405 and json.loads(resp.read()) == {"error": "Method Not Allowed"}
    conn.close()


def test_client_leaving_mid_stream_cancels_the_request(server: Any) -> None:
    url = urlsplit(f"http://{server.http_url}")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("POST", "/v2/models/dec/generate_stream", body=b'{"TEXT": "cancel"}')
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")  # the model is streaming
    conn.sock.close()  # type: ignore[union-attr]
    conn.close()
    deadline = time.monotonic() + 10
    while True:
        _, _, body = post(server, "/v2/models/dec/generate", {"TEXT": "report"})
        noted = json.loads(json.loads(body)["TEXT"])
        if "cancelled" in noted or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert noted["cancelled"][:2] == [True, True]

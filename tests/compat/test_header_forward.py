"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern`` on every front end.

The model (``test_restricted_api.PARAMS_MODEL``) answers with the parameters it saw; requests go
through the real tritonclient (HTTP, gRPC, their aio variants, the streaming RPC) on ``--frontend
aio``, ``native`` and the shared port, and, when the reference tritonserver is installed, the
same requests go to real Triton 2.51 and the parameters the model saw are compared.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from conftest import Server
from multidict import CIMultiDict
from test_restricted_api import (
    TRANSPORTS,
    start_reference,
    start_tritonlite,
    write_repo,
)

from tritonlite.frontends.base.forward import HeaderForward

pytestmark = pytest.mark.timeout(120)

FLAGS = ("--http-header-forward-pattern=my_.*", "--grpc-header-forward-pattern=my_.*")
HEADERS = {"my_a": "1", "xmy_b": 'a "quoted" value\\', "other": "3", "my-c": "4"}
FORWARDED = {"my_a": "1", "xmy_b": 'a "quoted" value\\'}  # a search, not a full match


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("forward_repo"))


@pytest.fixture(scope="module", params=TRANSPORTS)
def server(request: pytest.FixtureRequest, repo: Path) -> Iterator[Server]:
    s = start_tritonlite(repo, request.param, *FLAGS)
    yield s
    s.stop()


def seen(result: Any) -> dict[str, Any]:
    """The parameters the model saw, from a tritonclient result."""
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def http_infer(
    url: str,
    headers: dict[str, str],
    params: dict[str, Any] | None = None,
    path: str = "/v2/models/params/infer",
) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(url)
    try:
        inp = httpclient.InferInput("IN", [1], "FP32")
        inp.set_data_from_numpy(np.float32([1]))
        return seen(client.infer("params", [inp], headers=dict(headers), parameters=params))
    finally:
        client.close()


def grpc_infer(
    url: str, headers: dict[str, str], params: dict[str, Any] | None = None
) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("IN", [1], "FP32")
        inp.set_data_from_numpy(np.float32([1]))
        return seen(client.infer("params", [inp], headers=dict(headers), parameters=params))
    finally:
        client.close()


def grpc_stream(url: str, headers: dict[str, str], n: int = 2) -> list[dict[str, Any]]:
    client = grpcclient.InferenceServerClient(url)
    results: queue.Queue[Any] = queue.Queue()
    try:
        client.start_stream(
            lambda result, error: results.put(error or result), headers=dict(headers)
        )
        inp = grpcclient.InferInput("IN", [1], "FP32")
        inp.set_data_from_numpy(np.float32([1]))
        for _ in range(n):
            client.async_stream_infer("params", [inp])
        out = [results.get(timeout=30) for _ in range(n)]
        client.stop_stream()
    finally:
        client.close()
    return [seen(r) for r in out]


def generate(url: str, headers: dict[str, str]) -> dict[str, Any]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v2/models/params/generate", body=b'{"IN": [1.0]}', headers=headers)
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 200, body
    finally:
        conn.close()
    return dict(json.loads(body["PARAMS"]))


def test_http_headers_become_parameters(server: Server) -> None:
    assert http_infer(server.http_url, HEADERS) == FORWARDED
    # a name in any case matches (Triton puts (?i) in front) and is forwarded in lower case
    assert http_infer(server.http_url, {"MY_Upper": "u"}) == {"my_upper": "u"}
    # a header wins over a request parameter of the same name
    assert http_infer(server.http_url, {"my_a": "header"}, {"my_a": "body", "k": 2}) == {
        "my_a": "header",
        "k": 2,
    }
    assert generate(server.http_url, HEADERS) == {}  # Triton 2.51 forwards on /infer only

    async def run() -> None:
        c = httpaio.InferenceServerClient(server.http_url)
        try:
            inp = httpaio.InferInput("IN", [1], "FP32")
            inp.set_data_from_numpy(np.float32([1]))
            assert seen(await c.infer("params", [inp], headers=dict(HEADERS))) == FORWARDED
        finally:
            await c.close()

    asyncio.run(run())


def test_grpc_metadata_becomes_parameters(server: Server) -> None:
    assert grpc_infer(server.grpc_url, HEADERS) == FORWARDED
    assert grpc_infer(server.grpc_url, {"my_a": "header"}, {"my_a": "body"}) == {"my_a": "header"}
    assert grpc_stream(server.grpc_url, HEADERS) == [FORWARDED, FORWARDED]

    async def run() -> None:
        c = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            inp = grpcaio.InferInput("IN", [1], "FP32")
            inp.set_data_from_numpy(np.float32([1]))
            assert seen(await c.infer("params", [inp], headers=dict(HEADERS))) == FORWARDED

            async def requests() -> Any:
                yield {"model_name": "params", "inputs": [inp]}

            async for result, error in c.stream_infer(requests(), headers=HEADERS):
                assert error is None and seen(result) == FORWARDED
        finally:
            await c.close()

    asyncio.run(run())


def test_without_the_flags_nothing_is_forwarded(repo: Path) -> None:
    s = start_tritonlite(repo, "native")
    try:
        assert http_infer(s.http_url, HEADERS) == {}
        assert grpc_infer(s.grpc_url, HEADERS) == {}
    finally:
        s.stop()


def test_the_matching_rule() -> None:
    params: dict[str, Any] = {}
    HeaderForward("MY_.*", "x").grpc([("my_a", "1"), ("b", "2"), ("my_c-bin", b"3")], params)
    assert params == {"my_a": "1"}  # case-insensitive; binary entries are not forwarded
    params = {}
    HeaderForward("(?-i)MY_.*", "x").grpc([("my_a", "1")], params)
    assert params == {}  # (?-i) makes it case-sensitive, as in Triton
    params = {}
    headers = CIMultiDict([("My_A", "1"), ("my_a", "2"), ("Other", "3")])
    HeaderForward("^my_a$", "x").http(headers, params)
    assert params == {"my_a": "1, 2"}  # a repeated header: one value, as the native layer has
    with pytest.raises(ValueError, match="invalid regular expression"):
        HeaderForward("(", "http-header-forward-pattern")


def test_same_as_triton(repo: Path) -> None:
    ref = start_reference(repo, *FLAGS)
    ours = start_tritonlite(repo, "native", *FLAGS)
    try:
        for server in (ref, ours):
            got = (
                http_infer(server.http_url, HEADERS),
                http_infer(server.http_url, {"my_a": "header"}, {"k": 2}),
                grpc_infer(server.grpc_url, HEADERS),
                grpc_stream(server.grpc_url, HEADERS),
                generate(server.http_url, HEADERS),
            )
            if server is ref:
                theirs = got
            else:
                assert got == theirs
    finally:
        ours.stop()
        ref.stop()

"""The generate endpoints refuse JSON objects that repeat a key (issue 21, item 7).

A repeated model input is 400 with Triton 2.51's message; tritonlite also refuses other repeated
keys, which Triton accepts while garbling the parameters (its first value, twice). The model is
``test_restricted_api.PARAMS_MODEL``; with the reference tritonserver installed, the repeated
input is compared with real Triton.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Server
from test_restricted_api import start_reference, start_tritonlite, write_repo

pytestmark = pytest.mark.timeout(120)

PATHS = ("/v2/models/params/generate", "/v2/models/params/generate_stream")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("generate_dup_repo"))


@pytest.fixture(scope="module", params=("aio", "native"))
def server(request: pytest.FixtureRequest, repo: Path) -> Iterator[Server]:
    s = start_tritonlite(repo, request.param)
    yield s
    s.stop()


def post(url: str, path: str, body: bytes) -> tuple[int, str]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    if resp.status == 200:
        return 200, ""
    return resp.status, json.loads(data)["error"]


@pytest.mark.parametrize("path", PATHS)
def test_repeated_keys_are_400(server: Server, path: str) -> None:
    url = server.http_url
    assert post(url, path, b'{"IN": [1], "IN": [2]}') == (
        400,
        "[request id: <id_unknown>] input 'IN' already exists in request",
    )
    assert post(url, path, b'{"id": "r1", "IN": [1], "IN": [2]}') == (
        400,
        "[request id: r1] input 'IN' already exists in request",
    )
    assert post(url, path, b'{"IN": [1], "x": 1, "x": 2}') == (
        400,
        "[request id: <id_unknown>] duplicate key 'x' in the request JSON",
    )
    assert post(url, path, b'{"IN": [1], "parameters": {"a": 1, "a": 2}}') == (
        400,
        "[request id: <id_unknown>] duplicate key 'a' in the request JSON",
    )
    assert post(url, path, b'{"IN": [1], "x": 1, "parameters": {"x": 2}}') == (200, "")
    assert post(url, path, b'{"IN": [1]}') == (200, "")


def test_repeated_input_as_triton(repo: Path) -> None:
    ref = start_reference(repo)
    try:
        for path in PATHS:
            assert post(ref.http_url, path, b'{"IN": [1], "IN": [2]}') == (
                400,
                "[request id: <id_unknown>] input 'IN' already exists in request",
            )
    finally:
        ref.stop()

"""A binary request header repeated (the codec's template, whose validation outcome is kept
per model signature): each model still judges it by its own configuration, every time, and
a bad request never becomes good by repetition."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import start_server
from repos import write_add_sub

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("repeated_header")
    write_add_sub(repo, "batch8", 8)
    write_add_sub(repo, "batch1", 1)
    write_add_sub(repo, "nobatch", 0)
    s = start_server(repo, "--allow-grpc=false")
    yield s
    s.stop()


def _body(rows: int) -> tuple[bytes, int]:
    a = np.arange(16 * rows, dtype=np.float32).reshape(rows, 16)
    doc = {
        "inputs": [
            {
                "name": f"INPUT{i}",
                "datatype": "FP32",
                "shape": [rows, 16],
                "parameters": {"binary_data_size": a.nbytes},
            }
            for i in (0, 1)
        ],
        "outputs": [{"name": f"OUTPUT{i}", "parameters": {"binary_data": True}} for i in (0, 1)],
    }
    head = json.dumps(doc).encode()
    return head + a.tobytes() * 2, len(head)


def _infer(server: Any, model: str, body: bytes, head_len: int) -> tuple[int, bytes]:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=body,
            headers={"Inference-Header-Content-Length": str(head_len)},
        )
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_one_header_each_model_by_its_own_config(server: Any) -> None:
    body, head_len = _body(2)
    too_big = "inference request batch-size must be <= 1 for 'batch1'"
    for _ in range(3):  # interleaved, so a kept outcome would show on the next request
        status, out = _infer(server, "batch8", body, head_len)
        assert status == 200, out
        status, out = _infer(server, "batch1", body, head_len)
        assert status == 400 and too_big in json.loads(out)["error"], out
        status, out = _infer(server, "nobatch", body, head_len)
        assert status == 400, out
        assert "unexpected shape for input 'INPUT" in json.loads(out)["error"], out


def test_a_good_header_still_counts_its_batch(server: Any) -> None:
    body, head_len = _body(3)
    for _ in range(3):
        status, out = _infer(server, "batch8", body, head_len)
        assert status == 200, out
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/v2/models/batch8/stats")
        stats = json.loads(conn.getresponse().read())["model_stats"][0]
    finally:
        conn.close()
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert sizes.get(3) == 3, stats["batch_stats"]


def test_repeated_header_body_is_what_a_fresh_one_gives(server: Any, tmp_path: Path) -> None:
    body, head_len = _body(1)
    first = _infer(server, "batch8", body, head_len)
    again = _infer(server, "batch8", body, head_len)
    assert first == again and first[0] == 200

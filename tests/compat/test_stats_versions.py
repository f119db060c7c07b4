"""Statistics without a version: every loaded version's entry, as Triton 2.51 answers.

``GET /v2/models/M/stats`` and gRPC ``ModelStatistics(name=M)`` with an empty version list each
READY version of M (oldest first); with a version, only that one. Checked on tritonlite and,
where it is installed, on the real Triton 2.51 serving the same repository (counts compared;
durations differ by nature).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from support.reference import ReferenceTriton, require_reference
from test_triton_messages import ECHO

CONFIG = """
backend: "python"
max_batch_size: 8
version_policy: { all: {} }
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
"""


def write_repo(repo: Path) -> Path:
    """``two`` (versions 1 and 2, both loaded), ``three`` (1, 2, 3; the policy loads only the
    latest 2) and ``one``."""
    models = {
        "two": ([1, 2], CONFIG),
        "one": ([1], CONFIG),
        "three": ([1, 2, 3], CONFIG.replace("all: {}", "latest: { num_versions: 2 }")),
    }
    for name, (versions, config) in models.items():
        for v in versions:
            (repo / name / str(v)).mkdir(parents=True)
            (repo / name / str(v) / "model.py").write_text(textwrap.dedent(ECHO))
        (repo / name / "config.pbtxt").write_text(config)
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("stats_versions_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def triton(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceTriton]:
    t = ReferenceTriton(
        require_reference(), repo, log=tmp_path_factory.mktemp("triton_log") / "triton.log"
    )
    yield t
    t.stop()


def _infer(http_url: str, model: str, version: str, n: int) -> None:
    client = httpclient.InferenceServerClient(http_url)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    for _ in range(n):
        client.infer(model, [inp], model_version=version)


def _counts(entries: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    """(name, version, inference_count, success count) per entry, in the answer's order."""
    return [
        (
            e["name"],
            e["version"],
            int(e.get("inference_count", 0)),
            int(e["inference_stats"]["success"].get("count", 0)),
        )
        for e in entries
    ]


def outcome(http_url: str, grpc_url: str) -> dict[str, Any]:
    """Infer ``two`` v1 twice and v2 once, ``three`` v3 once; then every statistics query."""
    _infer(http_url, "two", "1", 2)
    _infer(http_url, "two", "2", 1)
    _infer(http_url, "three", "3", 1)
    h = httpclient.InferenceServerClient(http_url)
    g = grpcclient.InferenceServerClient(grpc_url)
    # Triton counts a request in its statistics after its response leaves: wait (bounded)
    # until all four are counted before reading them
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = h.get_inference_statistics()["model_stats"]
        if sum(int(e.get("inference_count", 0)) for e in stats) >= 4:
            break
        time.sleep(0.02)
    out: dict[str, Any] = {}
    for name in ("two", "three", "one"):
        out[f"http {name}"] = _counts(h.get_inference_statistics(name)["model_stats"])
        out[f"grpc {name}"] = _counts(g.get_inference_statistics(name, as_json=True)["model_stats"])
        out[f"http {name} v2"] = (
            _counts(h.get_inference_statistics(name, "2")["model_stats"]) if name != "one" else None
        )
        out[f"grpc {name} v2"] = (
            _counts(g.get_inference_statistics(name, "2", as_json=True)["model_stats"])
            if name != "one"
            else None
        )
    out["http all"] = _counts(h.get_inference_statistics()["model_stats"])
    out["grpc all"] = _counts(g.get_inference_statistics(as_json=True)["model_stats"])
    return out


EXPECTED = {  # what Triton 2.51 answers (the reference, recorded)
    "http two": [("two", "1", 2, 2), ("two", "2", 1, 1)],
    "http two v2": [("two", "2", 1, 1)],
    "http three": [("three", "2", 0, 0), ("three", "3", 1, 1)],
    "http three v2": [("three", "2", 0, 0)],
    "http one": [("one", "1", 0, 0)],
    "http one v2": None,
    "http all": [
        ("one", "1", 0, 0),
        ("three", "2", 0, 0),
        ("three", "3", 1, 1),
        ("two", "1", 2, 2),
        ("two", "2", 1, 1),
    ],
}
EXPECTED.update({"grpc" + k[4:]: v for k, v in list(EXPECTED.items())})


def test_every_loaded_version_has_its_entry(server: Server) -> None:
    assert outcome(server.http_url, server.grpc_url) == EXPECTED


def test_same_as_triton(triton: ReferenceTriton) -> None:
    assert outcome(triton.http_url, triton.grpc_url) == EXPECTED

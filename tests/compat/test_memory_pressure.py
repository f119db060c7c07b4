"""Memory pressure behind a real server: what sheds, seen by tritonclient and on /metrics.

``--memory-pressure-threshold=1`` keeps the server under pressure (available <= limit always
holds), so these tests need no memory to be filled: the same request twice is a miss both
times, histogram counts stay put, and ``tritonlite_shed_total`` counts what was skipped.
``--memory-pressure-threshold=0`` is the control: the second request hits.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from prometheus_client.parser import text_string_to_metric_families
from repos import write_add_sub

pytestmark = pytest.mark.timeout(120)

CACHED = "response_cache { enable: true }\n"
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)
FLAGS = ("--cache-config", "local,size=1048576", "--metrics-config", "histogram_latencies=true")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pressure_repo")
    write_add_sub(root, "cached", 8, extra_config="dynamic_batching { }\n" + CACHED)
    return root


@pytest.fixture(scope="module")
def pressed(repo: Path) -> Iterator[Server]:
    s = start_server(repo, *FLAGS, "--memory-pressure-threshold=1")
    yield s
    s.stop()


def _inputs(mod: Any, a: np.ndarray[Any, Any] = A) -> list[Any]:
    ins = [mod.InferInput("INPUT0", [1, 16], "FP32"), mod.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(B)
    return ins


def _infer(server: Server, a: np.ndarray[Any, Any] = A, grpc: bool = False) -> None:
    if grpc:
        r: Any = grpcclient.InferenceServerClient(server.grpc_url).infer(
            "cached", _inputs(grpcclient, a)
        )
    else:
        r = httpclient.InferenceServerClient(server.http_url).infer(
            "cached", _inputs(httpclient, a)
        )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + B)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - B)


def _counts(server: Server) -> tuple[int, int, int, int]:
    """(success, cache hits, cache misses, executions) from the statistics extension."""
    s = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("cached")[
        "model_stats"
    ][0]
    inf = s["inference_stats"]
    return (
        int(inf["success"]["count"]),
        int(inf["cache_hit"]["count"]),
        int(inf["cache_miss"]["count"]),
        int(s["execution_count"]),
    )


def _scrape(server: Server) -> tuple[str, dict[tuple[str, str], float]]:
    """The raw text and {(sample name, feature-or-model label): value} of /metrics."""
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, s.labels.get("feature", s.labels.get("model", "")))] = s.value
    return text, out


def _histogram_count(m: dict[tuple[str, str], float]) -> float:
    return m[("nv_inference_request_histogram_us_count", "cached")]


def test_under_pressure_the_same_request_misses_twice_and_is_counted(pressed: Server) -> None:
    assert "memory pressure:" in pressed.output()  # the warning on entering, at startup
    _infer(pressed)
    _infer(pressed)
    _infer(pressed, grpc=True)  # the other front end, the same cache and the same flag
    success, hits, misses, execs = _counts(pressed)
    assert (success, hits, misses, execs) == (3, 0, 3, 3)
    text, m = _scrape(pressed)
    assert "# TYPE tritonlite_shed_total counter" in text
    assert "# TYPE tritonlite_memory_pressure gauge" in text
    assert m[("tritonlite_memory_pressure", "")] == 1
    assert m[("tritonlite_shed_total", "cache_insert")] == 3
    # every successful request's histogram observations were shed, so no count grew
    assert m[("tritonlite_shed_total", "histogram")] == 3
    assert _histogram_count(m) == 0
    # (the parser names counter samples <family>_total, Triton's unsuffixed ones too)
    assert m[("nv_cache_num_misses_per_model_total", "cached")] == 3
    assert m[("nv_cache_num_hits_per_model_total", "cached")] == 0


def test_under_pressure_the_counts_keep_growing_with_traffic(pressed: Server) -> None:
    _, before = _scrape(pressed)
    a = A + 7
    for _ in range(4):
        _infer(pressed, a)
    _, after = _scrape(pressed)
    assert (
        after[("tritonlite_shed_total", "cache_insert")]
        == before[("tritonlite_shed_total", "cache_insert")] + 4
    )
    assert (
        after[("tritonlite_shed_total", "histogram")]
        == before[("tritonlite_shed_total", "histogram")] + 4
    )
    assert _histogram_count(after) == _histogram_count(before) == 0
    assert after[("tritonlite_memory_pressure", "")] == 1


def test_without_pressure_the_second_request_hits(repo: Path) -> None:
    s = start_server(repo, *FLAGS, "--memory-pressure-threshold=0", "--allow-grpc=false")
    try:
        _infer(s)
        _infer(s)
        assert _counts(s) == (2, 1, 1, 1)
        _, m = _scrape(s)
        assert m[("tritonlite_memory_pressure", "")] == 0
        assert m[("tritonlite_shed_total", "cache_insert")] == 0
        assert m[("tritonlite_shed_total", "histogram")] == 0
        assert _histogram_count(m) == 2  # a hit is a request too (Triton's request family)
        assert "memory pressure" not in s.output().lower()
    finally:
        s.stop()


def test_the_default_threshold_monitors_without_shedding_here(repo: Path) -> None:
    # The machine running the tests is assumed to have more than 5% of its memory free.
    s = start_server(repo, *FLAGS, "--allow-grpc=false")
    try:
        assert "Monitoring memory pressure:" in s.output()
        _infer(s)
        _infer(s)
        assert _counts(s)[1] == 1
        _, m = _scrape(s)
        assert m[("tritonlite_memory_pressure", "")] == 0
    finally:
        s.stop()


@pytest.mark.parametrize(
    "value, message",
    [
        ("2", "--memory-pressure-threshold expects a fraction of the memory limit between 0"),
        ("-1", "--memory-pressure-threshold expects a fraction of the memory limit between 0"),
        ("lots", "invalid float value: 'lots'"),
    ],
)
def test_a_bad_threshold_stops_the_server_before_it_starts(
    repo: Path, value: str, message: str
) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            f"--memory-pressure-threshold={value}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert message in r.stderr
    assert "Started" not in r.stderr

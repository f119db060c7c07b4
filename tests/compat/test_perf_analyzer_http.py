"""The real perf_analyzer (Triton's C++ client) against tritonlite over HTTP."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import start_server
from repos import run_perf_analyzer, throughput, write_add_sub

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("pa_repo")
    write_add_sub(repo, "add_sub", 8, extra_config="dynamic_batching { }\n")
    s = start_server(repo, "--allow-grpc=false")
    yield s
    s.stop()


def run_pa(binary: str, server: Any, *args: str) -> str:
    return run_perf_analyzer(binary, "add_sub", server.http_url, "http", *args)


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--shared-memory=system"],
        ["-b", "4"],
        ["--concurrency-range", "4"],
        ["--input-tensor-format=json", "--output-tensor-format=json"],
    ],
    ids=["plain", "shm", "batch4", "concurrency4", "json"],
)
def test_perf_analyzer_http(perf_analyzer: str, server: Any, extra: list[str]) -> None:
    out = run_pa(perf_analyzer, server, *extra)
    assert throughput(out) > 0
    # server-side statistics were read (the statistics extension works for it)
    assert "Server:" in out and re.search(r"Inference count: [1-9]", out), out
    assert re.search(r"compute infer [0-9]+ usec", out), out


def test_perf_analyzer_sequence_of_runs_leaves_no_shm(perf_analyzer: str, server: Any) -> None:
    import tritonclient.http as httpclient

    run_pa(perf_analyzer, server, "--shared-memory=system", "--output-shared-memory-size=1024")
    c = httpclient.InferenceServerClient(server.http_url)
    assert c.get_system_shared_memory_status() == []
    assert c.is_server_ready()

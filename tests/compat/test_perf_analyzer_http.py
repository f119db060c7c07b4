"""The real perf_analyzer (Triton's C++ client) against tritonlite over HTTP."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import start_server
from repos import write_add_sub

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("pa_repo")
    write_add_sub(repo, "add_sub", 8, extra_config="dynamic_batching { }\n")
    s = start_server(repo, "--allow-grpc=false")
    yield s
    s.stop()


def run_pa(binary: str, server: Any, *args: str) -> str:
    cmd = [binary, "-m", "add_sub", "-u", server.http_url, "-i", "http",
           "--measurement-interval", "1000", "--stability-percentage", "500",
           "--max-trials", "5", *args]  # a wide stability band: the CPU is shared with the server
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def throughput(out: str) -> float:
    found = re.findall(r"throughput: ([0-9.]+) infer/sec", out)
    assert found, out
    return float(found[-1])


@pytest.mark.parametrize("extra", [[], ["--shared-memory=system"], ["-b", "4"],
                                   ["--concurrency-range", "4"], ["--input-tensor-format=json",
                                                                  "--output-tensor-format=json"]],
                         ids=["plain", "shm", "batch4", "concurrency4", "json"])
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

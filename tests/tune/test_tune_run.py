"""``tritonlite tune`` end to end: real servers, real load, the written config served again.

Each run is bounded by ``--max-minutes`` and short probe windows; the tuned config.pbtxt is put
into a fresh repository, served by a real server and answers a real tritonclient request.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server
from onnx_models import write_add_sub

from tritonlite.contracts.config import parse_pbtxt
from tritonlite.tune import cli

MODEL = "add_sub"


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    write_add_sub(r, MODEL, 8, extra_config="dynamic_batching { }\n")
    return r


def tune(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonlite", "tune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def infer_add_sub(server: Server) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        res = client.infer(MODEL, inputs)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


@pytest.mark.timeout(150)
def test_tune_http_writes_a_loadable_config_a_report_and_plots(
    repo: Path, tmp_path: Path, server_factory: object
) -> None:
    out = tmp_path / "out"
    r = tune(
        "--model-repository",
        str(repo),
        "--model",
        MODEL,
        "--concurrency",
        "1:4",
        "--max-minutes",
        "0.3",
        "--probe-seconds",
        "0.5",
        "--load",
        "builtin",
        "--output",
        str(out),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "#1 baseline:" in r.stderr and "best:" in r.stderr  # progress on stderr
    assert "chosen:" in r.stdout
    text = (out / "config.pbtxt").read_text()
    cfg = parse_pbtxt(text, "tuned")
    assert cfg.max_batch_size == 8 and len(cfg.input) == 2
    report = (out / "report.md").read_text()
    for part in ("## Choice", "### Config diff", "| 1 | baseline |", "server queue µs", "(chosen)"):
        assert part in report
    assert len((out / "measurements.csv").read_text().splitlines()) >= 3
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in r.stderr
    else:
        assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"
        assert "![frontier.png](frontier.png)" in report
    # The tuned config serves: a fresh repository with it, a real server, a real request.
    served = tmp_path / "served"
    shutil.copytree(repo, served)
    (served / MODEL / "config.pbtxt").write_text(text)
    infer_add_sub(server_factory(served))  # type: ignore[operator]


@pytest.mark.timeout(120)
def test_tune_grpc_stops_at_the_time_limit(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = tune(
        "--model-repository",
        str(repo),
        "--model",
        MODEL,
        "--protocol",
        "grpc",
        "--concurrency",
        "2",
        "--max-minutes",
        "0.15",
        "--probe-seconds",
        "0.5",
        "--load",
        "builtin",
        "--output",
        str(out),
        timeout=100,
    )
    assert r.returncode == 0, r.stderr
    report = (out / "report.md").read_text()
    assert "built-in gRPC load generator" in report
    assert "stopped by the time limit" in report
    parse_pbtxt((out / "config.pbtxt").read_text(), "tuned")


@pytest.mark.timeout(150)
def test_tune_with_perf_analyzer_against_a_running_server(
    repo: Path, tmp_path: Path, server_factory: object, perf_analyzer: str
) -> None:
    server: Server = server_factory(
        repo,
        "--model-control-mode",
        "explicit",  # type: ignore
        "--load-model",
        MODEL,
    )
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "tune",
            "--url",
            server.http_url,
            "--model",
            MODEL,
            "--concurrency",
            "2",
            "--max-minutes",
            "0.3",
            "--probe-seconds",
            "0.3",
            "--load",
            "perf_analyzer",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**__import__("os").environ, "PERF_ANALYZER": perf_analyzer},
    )
    assert r.returncode == 0, r.stderr
    assert "perf_analyzer" in (out / "report.md").read_text()
    # tune put the repository's own config back and the server still answers.
    infer_add_sub(server)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = cli.main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope"], "model 'nope' not found in the model repository"),
        (["--model", MODEL, "--concurrency", "8:2"], "--concurrency: expected 1 <= LOW <= HIGH"),
        (["--model", MODEL, "--concurrency", "0"], "--concurrency: expected 1 <= LOW <= HIGH"),
        (["--model", MODEL, "--concurrency", "x:4"], "--concurrency: expected N or LOW:HIGH"),
        (
            ["--model", MODEL, "--latency-budget-ms", "-1"],
            "--latency-budget-ms: expected a positive",
        ),
        (["--model", MODEL, "--max-minutes", "0"], "--max-minutes: expected a positive"),
        (["--model", MODEL, "--shape", "INPUT0"], "--shape: expected NAME:D1,D2"),
        (["--model", MODEL, "--protocol", "udp"], "invalid choice: 'udp'"),
    ],
)
def test_cli_errors_are_clear(
    repo: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(["--model-repository", str(repo), *args], capsys)
    assert code == 2
    assert message in err


@pytest.mark.timeout(60)
def test_cli_unknown_model_on_a_running_server(
    repo: Path, server_factory: object, capsys: pytest.CaptureFixture[str]
) -> None:
    server: Server = server_factory(repo)  # type: ignore[operator]
    code, err = run_cli(["--url", server.http_url, "--model", "nope"], capsys)
    assert code == 1
    assert "tritonlite tune: error: model 'nope':" in err and "nope" in err.split(":", 3)[-1]
    # Not started with --model-control-mode explicit: the first load is refused, clearly.
    code, err = run_cli(
        [
            "--url",
            server.http_url,
            "--model",
            MODEL,
            "--probe-seconds",
            "0.2",
            "--output",
            str(repo.parent / "out"),
        ],
        capsys,
    )
    assert code == 1
    assert "the original config does not serve: load failed:" in err
    assert "--model-control-mode explicit" in err
    code, err = run_cli(["--url", "127.0.0.1:1", "--model", MODEL], capsys)
    assert code == 1 and "cannot reach the server at 127.0.0.1:1" in err


@pytest.mark.timeout(150)
def test_a_repeating_stream_tries_the_response_cache(tmp_path: Path) -> None:
    # No batch dimension: no batching stages, so the run reaches the cache stage quickly.
    repo = tmp_path / "repo"
    write_add_sub(repo, "add_sub_nobatch", 0)
    out = tmp_path / "out"
    r = tune(
        "--model-repository",
        str(repo),
        "--model",
        "add_sub_nobatch",
        "--concurrency",
        "2",
        "--input-pool",
        "2",
        "--max-minutes",
        "1.5",
        "--probe-seconds",
        "0.3",
        "--load",
        "builtin",
        "--output",
        str(out),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader((out / "measurements.csv").read_text().splitlines()))
    header, rows = rows[0], rows[1:]
    stage, status, hits = (header.index(k) for k in ("stage", "status", "cache_hits"))
    cached = [row for row in rows if row[stage] == "response cache"]
    assert cached, r.stderr
    assert cached[0][status] == "ok"
    assert int(cached[0][hits]) > 0  # the server answered from its cache

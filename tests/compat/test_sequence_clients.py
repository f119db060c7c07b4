"""Sequence models behind a real server, driven by tritonclient (HTTP and gRPC) and perf_analyzer.

Two accumulators on implicit state (OUTPUT = INPUT + STATE_IN, STATE_OUT = OUTPUT): ``acc`` is a
Python ``model.py``, ``acc_onnx`` an ONNX graph; both with two instances and direct batching.
(The file is not named test_sequence.py: tests/scheduling has one, and the test directories
are not packages, so two modules of one name cannot both be collected.)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import client_for, run_perf_analyzer
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduling"))
from test_sequence import write_acc_onnx, write_probe_python  # noqa: E402

pytestmark = pytest.mark.timeout(180)

MODELS = ["acc", "acc_onnx"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("sequence_repo")
    write_probe_python(repo, "acc", count=2)
    write_acc_onnx(repo, "acc_onnx", count=2)
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


Client = Any


def _infer(
    client: Client,
    mod: Any,
    model: str,
    value: float,
    seq: int | str,
    start: bool = False,
    end: bool = False,
) -> float:
    inp = mod.InferInput("INPUT", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    result = client.infer(
        model,
        [inp],
        sequence_id=seq,
        sequence_start=start,
        sequence_end=end,
        outputs=[mod.InferRequestedOutput("OUTPUT")],
    )
    return float(result.as_numpy("OUTPUT")[0, 0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_sequences_accumulate(server: Server, protocol: str, model: str) -> None:
    client, mod = client_for(server, protocol)
    # two interleaved sequences, one with an integer id and one with a string id
    a, b = 1000 + len(protocol), f"{protocol}-{model}"
    assert _infer(client, mod, model, 1, a, start=True) == 1
    assert _infer(client, mod, model, 10, b, start=True) == 10
    assert _infer(client, mod, model, 2, a) == 3
    assert _infer(client, mod, model, 20, b) == 30
    assert _infer(client, mod, model, 3, a, end=True) == 6
    assert _infer(client, mod, model, 30, b, end=True) == 60
    # the id is free again: a new sequence starts from a fresh state
    assert _infer(client, mod, model, 5, a, start=True, end=True) == 5


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_errors(server: Server, protocol: str) -> None:
    client, mod = client_for(server, protocol)
    cases: list[tuple[Callable[[], Any], str]] = [
        (
            lambda: _infer(client, mod, "acc_onnx", 1, 424242),
            "inference request for sequence 424242 to model 'acc_onnx' must specify the START "
            "flag on the first request of the sequence",
        ),
        (
            lambda: _infer(client, mod, "acc_onnx", 1, "never-started", end=True),
            "inference request for sequence never-started to model 'acc_onnx' must specify the "
            "START flag on the first request of the sequence",
        ),
        (
            lambda: _infer(client, mod, "acc", 1, 0),
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID",
        ),
    ]
    for call, message in cases:
        with pytest.raises(InferenceServerException) as info:
            call()
        assert message in str(info.value)
        if protocol == "http":
            assert info.value.status() == "400"
        else:
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_lists_the_sequence_extension(server: Server, protocol: str) -> None:
    client, _ = client_for(server, protocol)
    md = client.get_server_metadata()
    extensions = list(md["extensions"] if protocol == "http" else md.extensions)
    assert extensions.index("sequence") == extensions.index("classification") + 1


def test_config_shows_sequence_batching(server: Server) -> None:
    cfg = httpclient.InferenceServerClient(server.http_url).get_model_config("acc_onnx")
    seq = cfg["sequence_batching"]
    assert seq["max_sequence_idle_microseconds"] == 1000000
    assert seq["state"][0]["input_name"] == "STATE_IN"
    assert "dynamic_batching" not in cfg


def _run_pa(binary: str, url: str, protocol: str, model: str, *extra: str) -> str:
    return run_perf_analyzer(
        binary, model, url, protocol, "--sequence-length", "5", "--num-of-sequences", "4", *extra
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--async", "--concurrency-range", "4"]], ids=["sync", "async-concurrency4"]
)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_perf_analyzer_sequence_mode(
    perf_analyzer: str, server: Server, model: str, protocol: str, extra: list[str]
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    out = _run_pa(perf_analyzer, url, protocol, model, *extra)
    found = re.findall(r"throughput: ([0-9.]+) infer/sec", out)
    assert found and float(found[-1]) > 0, out
    assert re.search(r"Inference count: [1-9]", out), out

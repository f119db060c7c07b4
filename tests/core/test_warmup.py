"""``model_warmup`` behind a real server: samples run on every instance before the model is
READY (zero, random and file data; batch_size and count), a failing or malformed warm-up fails
the load with Triton's message, and the periodic health probe takes an instance whose warm-up
starts failing out of rotation and back once it passes again.
"""

from __future__ import annotations

import json
import re
import struct
import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server, wait_until

pytestmark = pytest.mark.timeout(120)

# OUT = [requests this instance saw before this one, sum of every INPUT0 it saw before].
COUNTING = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]
        self.seen = 0
        self.total = 0.0

    def execute(self, requests):
        if os.path.exists(os.path.join(self.dir, "sick")):
            raise RuntimeError("the model is sick")
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", np.array([[self.seen, self.total]], dtype=np.float64))]))
            self.seen += 1
            self.total += float(x.sum())
        return out
"""

CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP64 dims: [ 2 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

GOOD_WARMUP = """
model_warmup [
  { name: "zeros" batch_size: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 1 ] random_data: true } } },
  { name: "from_file" batch_size: 1 count: 3
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "in0" } }
    inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 1 ] input_data_file: "txt" } } },
  { name: "skipped" batch_size: 0
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
]
"""

SAMPLE = """
model_warmup [ {{ name: "{name}" batch_size: 1
  inputs {{ key: "INPUT0" value: {{ data_type: TYPE_FP32 dims: [ {dims} ] {data} }} }}
  inputs {{ key: "TEXT" value: {{ data_type: TYPE_STRING dims: [ 1 ] zero_data: true }} }} }} ]
"""

RAISING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("cold engine")
"""


def _write(
    repo: Path, name: str, model: str, config: str, files: dict[str, bytes] | None = None
) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(model))
    (repo / name / "config.pbtxt").write_text(config)
    for rel, blob in (files or {}).items():
        (repo / name / "warmup").mkdir(exist_ok=True)
        (repo / name / "warmup" / rel).write_bytes(blob)


def _warmup_files() -> dict[str, bytes]:
    return {
        "in0": np.array([1, 2, 3, 4], dtype=np.float32).tobytes(),
        "txt": struct.pack("<I", 5) + b"hello",
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("warmup")
    _write(repo, "warm", COUNTING, CONFIG + GOOD_WARMUP, _warmup_files())
    _write(
        repo,
        "probed",
        COUNTING,
        CONFIG + SAMPLE.format(name="probe", dims="4", data="zero_data: true"),
    )
    _write(
        repo,
        "fails",
        RAISING,
        CONFIG + SAMPLE.format(name="cold", dims="4", data="zero_data: true"),
    )
    _write(
        repo,
        "variable",
        COUNTING,
        CONFIG.replace("dims: [ 4 ]", "dims: [ -1 ]", 1)
        + SAMPLE.format(name="var", dims="-1", data="zero_data: true"),
    )
    _write(
        repo,
        "short_file",
        COUNTING,
        CONFIG + SAMPLE.format(name="short", dims="4", data='input_data_file: "in0"'),
        {"in0": b"\0" * 8},
    )
    _write(repo, "no_data", COUNTING, CONFIG + SAMPLE.format(name="nodata", dims="4", data=""))
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(
        repo, "--exit-on-error=false", "--health-probe-interval=0.2", "--log-verbose=1"
    )
    yield s
    s.stop()


@pytest.fixture()
def client(server: Server) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _infer(c: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    a = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    a.set_data_from_numpy(np.full((1, 4), 10, dtype=np.float32))
    t = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    t.set_data_from_numpy(np.array([[b"x"]], dtype=object))
    return c.infer(model, [a, t]).as_numpy("OUT")[0]  # type: ignore[no-any-return]


def _reasons(c: httpclient.InferenceServerClient) -> dict[str, str]:
    return {m["name"]: m.get("reason", "") for m in c.get_model_repository_index()}


def _metric(server: Server, family: str, instance: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf'^{family}{{instance="{instance}",[^}}]*}} (\S+)$', text, re.M)
    assert m, f"no {family} for {instance}"
    return float(m.group(1))


def _wait(pred: Callable[[], object], timeout: float = 20.0) -> None:
    wait_until(pred, timeout)


def test_warmup_runs_on_every_instance_before_ready(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.is_model_ready("warm")
    # Each instance ran "zeros" (2 requests, once) and "from_file" (1 request, 3 times, data
    # 1+2+3+4): 5 requests summing to 30, at load and again at every health probe; the
    # skipped sample never ran. A second request may land on the instance that served the
    # first (one more request, of sum 40).
    for _ in range(2):
        seen, total = _infer(client, "warm")
        assert any(
            seen - r >= 5 and (seen - r) % 5 == 0 and total == 6 * (seen - r) + 40 * r
            for r in (0, 1)
        ), (seen, total)
    # Load-time warm-up counts, as in Triton: 5 requests in 4 executions per instance
    # (probes do not count).
    stats = client.get_inference_statistics("warm")["model_stats"][0]
    assert stats["inference_count"] == 2 + 10 and stats["execution_count"] == 2 + 8
    assert stats["inference_stats"]["success"]["count"] == 12
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]} == {
        1: 2 + 6,
        2: 2,
    }


@pytest.mark.parametrize(
    "model, message",
    [
        (
            "fails",
            "failed to run warmup sample 'cold': Failed to process the request(s) for model "
            "'fails_0_0', message: RuntimeError: cold engine",
        ),
        (
            "variable",
            "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
        ),
        (
            "short_file",
            "[request id: <id_unknown>] warmup setting expects 16 bytes, but the data "
            "provided from in0only has 8 bytes",
        ),  # sic: Triton's words
        (
            "no_data",
            "[request id: <id_unknown>] warmup setting expects input 'INPUT0' to have "
            "input_data_type set",
        ),
    ],
)
def test_bad_warmup_fails_the_load(
    client: httpclient.InferenceServerClient, model: str, message: str
) -> None:
    assert not client.is_model_ready(model)
    assert message in _reasons(client)[model]
    assert client.is_model_ready("warm")  # the others load and serve


def test_failing_warmup_with_exit_on_error_stops_startup(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "fails",
        RAISING,
        CONFIG + SAMPLE.format(name="cold", dims="4", data="zero_data: true"),
    )
    with pytest.raises(RuntimeError, match=r"exit code 1\b"):
        start_server(tmp_path, "--allow-grpc=false", "--allow-metrics=false")


def test_health_probe_takes_a_failing_instance_out_and_back(
    server: Server, client: httpclient.InferenceServerClient, repo: Path
) -> None:
    name = "probed_0_0"
    _wait(lambda: f"health probe of instance {name} passed" in server.output())
    stats = client.get_inference_statistics("probed")["model_stats"][0]
    assert stats["inference_count"] == 2 and stats["execution_count"] == 2  # load warm-up only
    sick = repo / "probed" / "sick"
    sick.write_text("")
    try:
        _wait(lambda: not client.is_model_ready("probed"))  # both fail their probe
        assert _metric(server, "tritonlite_instance_healthy", name) == 0
        assert "health probe failed: failed to run warmup sample 'probe'" in server.output()
    finally:
        sick.unlink()
    _wait(lambda: client.is_model_ready("probed"))
    # Each instance rejoins on its own rebuild (one may still be in its backoff when the
    # model is ready again through the other).
    for inst in (name, "probed_0_1"):
        _wait(lambda inst=inst: _metric(server, "tritonlite_instance_healthy", inst) == 1)
    assert _metric(server, "tritonlite_instance_failovers", name) >= 1
    assert _metric(server, "tritonlite_instance_rebuilds", name) >= 1
    assert len(_infer(client, "probed")) == 2
    stats = client.get_inference_statistics("probed")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 0  # probes count in no statistics
    assert json.dumps(stats)

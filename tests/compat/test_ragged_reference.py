"""Ragged batching next to the real Triton 2.51, with Python-backend models both servers load
(the reference has no ONNX Runtime backend).

What a Python model shows: which requests the dynamic batcher puts in one batch. Four requests
of different lengths on a ragged input (``allow_ragged_batch``) form one batch of 4; the same
requests on a plain variable-size input do not batch together (their shapes differ). Both
servers answer the same, and each counts the same batches in its statistics. Configs with bad
``batch_input`` / ``batch_output`` fail to load with the same message on both.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from support.reference import ReferenceTriton, require_reference
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

# Every response: how many requests shared the execute() call, and the request's element count.
COUNT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            row = np.array([[len(requests), x.size]] * x.shape[0], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", row)]))
        return out
"""

BASE = """backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ]{ragged} }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 2000000 }}
"""
RAGGED = BASE.format(ragged=" allow_ragged_batch: true")
PLAIN = BASE.format(ragged="")
SCATTER = (
    'batch_output [ { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
    'source_input: "%s" } ]\n'
)
BATCH_INPUT = (
    'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: %s '
    'source_input: "%s" } ]\n'
)
BAD = {
    "bi_unknown_source": RAGGED + BATCH_INPUT % ("TYPE_FP32", "NOPE"),
    "bi_fp64": RAGGED + BATCH_INPUT % ("TYPE_FP64", "INPUT0"),
    "bi_two_sources": RAGGED
    + (BATCH_INPUT % ("TYPE_INT32", "INPUT0")).replace('"INPUT0"', '["INPUT0", "INPUT0"]'),
    "bi_number_kind": RAGGED
    + (BATCH_INPUT % ("TYPE_INT32", "INPUT0")).replace("BATCH_ELEMENT_COUNT", "9"),
    "bo_unknown_source": RAGGED + SCATTER % "NOPE",
    "bo_unknown_target": RAGGED + (SCATTER % "INPUT0").replace("OUTPUT0", "OUTPUT9"),
    "bo_target_twice": RAGGED + (SCATTER % "INPUT0").replace('"OUTPUT0"', '["OUTPUT0", "OUTPUT0"]'),
}
GOOD = {"ragged": RAGGED, "plain": PLAIN}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("ragged_reference")
    for name, config in {**GOOD, **BAD}.items():
        (r / name / "1").mkdir(parents=True)
        (r / name / "1" / "model.py").write_text(textwrap.dedent(COUNT))
        (r / name / "config.pbtxt").write_text(config)
    return r


ARGS = ("--model-control-mode=explicit", "--load-model=ragged", "--load-model=plain")


@pytest.fixture(scope="module")
def lite(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--allow-metrics=false", *ARGS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceTriton]:
    base = require_reference()
    log = tmp_path_factory.mktemp("ragged_reference_log") / "tritonserver.log"
    ref = ReferenceTriton(base, repo, *ARGS, log=log)
    yield ref
    ref.stop()


LENGTHS = [2, 4, 1, 3]


def _send_together(url: str, model: str) -> list[np.ndarray]:
    client = httpclient.InferenceServerClient(url, concurrency=len(LENGTHS))
    pending = []
    for n in LENGTHS:
        inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
        inp.set_data_from_numpy(np.full((1, n), n, np.float32))
        pending.append(client.async_infer(model, [inp]))
    out = [p.get_result(timeout=60).as_numpy("OUTPUT0") for p in pending]
    client.close()
    return out


def _batches(url: str, model: str) -> dict[int, int]:
    client = httpclient.InferenceServerClient(url)
    stats = client.get_inference_statistics(model)["model_stats"][0]
    client.close()
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def _observed(url: str, model: str) -> tuple[list[list[float]], dict[int, int]]:
    before = _batches(url, model)
    rows = [o.tolist()[0] for o in _send_together(url, model)]
    # Triton records a batch's statistics after its responses leave: wait (bounded) until
    # every request sent is counted in some batch
    deadline = time.monotonic() + 10
    while True:
        after = _batches(url, model)
        delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        if sum(k * v for k, v in delta.items()) >= len(LENGTHS) or time.monotonic() > deadline:
            return rows, delta
        time.sleep(0.02)


def test_ragged_requests_form_one_batch(lite: Server) -> None:
    rows, batches = _observed(lite.http_url, "ragged")
    assert rows == [[4.0, float(n)] for n in LENGTHS]
    assert batches == {4: 1}


def test_plain_requests_of_different_shapes_do_not_batch(lite: Server) -> None:
    rows, batches = _observed(lite.http_url, "plain")
    assert rows == [[1.0, float(n)] for n in LENGTHS]
    assert batches == {1: 4}


@pytest.mark.parametrize("model", sorted(GOOD))
def test_batching_matches_reference(lite: Server, reference: ReferenceTriton, model: str) -> None:
    assert _observed(lite.http_url, model) == _observed(reference.http_url, model)


def _load_error(url: str, model: str) -> tuple[str, str]:
    client = httpclient.InferenceServerClient(url)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(model)
    client.close()
    return str(e.value.status()), e.value.message()


@pytest.mark.parametrize("model", sorted(BAD))
def test_bad_batch_io_fails_load(lite: Server, model: str) -> None:
    status, message = _load_error(lite.http_url, model)
    assert status == "400"
    assert message.startswith(f"load failed for model '{model}': "), message
    if model != "bi_number_kind":  # a backend's JSON read fails first, without the suffix
        assert f" for {model};" in message, message


@pytest.mark.parametrize("model", sorted(BAD))
def test_bad_batch_io_matches_reference(
    lite: Server, reference: ReferenceTriton, model: str
) -> None:
    assert _load_error(lite.http_url, model) == _load_error(reference.http_url, model)


def test_servers_keep_serving(lite: Server) -> None:
    client: Any = httpclient.InferenceServerClient(lite.http_url)
    assert client.is_model_ready("ragged") and client.is_model_ready("plain")
    client.close()

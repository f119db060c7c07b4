"""Load shedding and the cache's load-time refusals, seen from outside with the real clients.

A model whose queue holds ``max_queue_size`` requests answers the next one at once with
UNAVAILABLE ("Exceeds maximum queue size"; HTTP 503, gRPC UNAVAILABLE) instead of letting it
wait, counts it in ``nv_inference_request_failure{reason="REJECTED"}``, and serves the accepted
ones; a decoupled model asking for the response cache fails to load with Triton's message while
the other models serve.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from conftest import Server, start_server
from prometheus_client.parser import text_string_to_metric_families
from repos import write_python_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

SLOW = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.4)
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""

BOUNDED = """
backend: "python"
max_batch_size: 1
input { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { default_queue_policy { max_queue_size: 2 } }
"""

DECOUPLED_CACHED = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
response_cache { enable: true }
input { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("overload_repo")
    write_python_model(repo, "bounded", SLOW, BOUNDED)
    write_python_model(repo, "dec_cached", SLOW, DECOUPLED_CACHED)
    s = start_server(repo, "--exit-on-error=false", "--cache-config=local,size=1048576")
    yield s
    s.stop()


def _rejected(server: Server, model: str) -> int:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    for fam in text_string_to_metric_families(text):
        if fam.name == "nv_inference_request_failure":
            for s in fam.samples:
                if s.labels.get("model") == model and s.labels.get("reason") == "REJECTED":
                    return int(s.value)
    return 0


async def _one(
    client: aioclient.InferenceServerClient, value: float
) -> tuple[float, float | InferenceServerException]:
    inp = aioclient.InferInput("IN", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    t0 = time.monotonic()
    try:
        out = (await client.infer("bounded", [inp])).as_numpy("OUT")
        return time.monotonic() - t0, float(out[0, 0])
    except InferenceServerException as exc:
        return time.monotonic() - t0, exc


def test_a_full_queue_rejects_at_once_and_the_accepted_requests_complete(server: Server) -> None:
    before = _rejected(server, "bounded")

    async def burst() -> list[tuple[float, float | InferenceServerException]]:
        client = aioclient.InferenceServerClient(server.http_url)
        try:
            # one executes, two wait in the queue, the rest find it full
            return list(await asyncio.gather(*(_one(client, float(i)) for i in range(6))))
        finally:
            await client.close()

    results = asyncio.run(burst())
    ok = [(t, v) for t, v in results if not isinstance(v, InferenceServerException)]
    shed = [(t, v) for t, v in results if isinstance(v, InferenceServerException)]
    assert len(ok) >= 3 and shed, results
    values = [v for _, v in ok]
    assert len(set(values)) == len(values) and set(values) <= {float(i) for i in range(6)}
    for t, exc in shed:
        assert isinstance(exc, InferenceServerException)
        assert exc.status() == "503", exc
        assert "Exceeds maximum queue size" in exc.message(), exc
        assert t < 0.4, f"a shed request waited {t:.2f} s"  # answered before one execution
    assert _rejected(server, "bounded") - before == len(shed)

    # the server keeps serving: a lone request afterwards succeeds (over gRPC too)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("IN", [1, 1], "FP32")
        inp.set_data_from_numpy(np.array([[7.0]], dtype=np.float32))
        assert g.infer("bounded", [inp]).as_numpy("OUT")[0, 0] == 7.0
    finally:
        g.close()


def test_grpc_sees_unavailable_for_a_full_queue(server: Server) -> None:
    import concurrent.futures

    def one(i: int) -> str:
        g = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("IN", [1, 1], "FP32")
        inp.set_data_from_numpy(np.array([[float(i)]], dtype=np.float32))
        try:
            g.infer("bounded", [inp])
            return "ok"
        except InferenceServerException as exc:
            return f"{exc.status()}: {exc.message()}"
        finally:
            g.close()

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(one, range(6)))
    shed = [o for o in outcomes if o != "ok"]
    assert shed and outcomes.count("ok") >= 3, outcomes
    assert all(
        o.startswith("StatusCode.UNAVAILABLE") and "Exceeds maximum queue size" in o for o in shed
    ), outcomes


def test_a_decoupled_model_asking_for_the_cache_fails_to_load(server: Server) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {m["name"]: m for m in h.get_model_repository_index()}
        assert index["dec_cached"]["state"] == "UNAVAILABLE"
        assert (
            "Response Cache does not currently support model dec_cached with 'decoupled'"
            in index["dec_cached"]["reason"]
        ), index["dec_cached"]
        assert h.is_model_ready("bounded")
    finally:
        h.close()

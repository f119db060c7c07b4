"""Dynamic batching seen from outside: the statistics extension reports the batches formed."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from conftest import start_server
from repos import write_add_sub

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("batching")
    # A long delay with a preferred size: 8 requests in flight always form two batches of 4.
    write_add_sub(
        repo,
        "batched",
        8,
        extra_config=(
            "instance_group [{ count: 1 kind: KIND_CPU }]\n"
            "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 30000000 }\n"
        ),
    )
    write_add_sub(
        repo, "unbatched", 8, extra_config="instance_group [{ count: 2 kind: KIND_CPU }]\n"
    )
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    yield s
    s.stop()


async def _burst(url: str, model: str, n: int) -> list[np.ndarray]:
    c = aioclient.InferenceServerClient(url)
    try:

        async def one(k: int) -> np.ndarray:
            a = np.full((1, 16), k, dtype=np.float32)
            ins = []
            for name in ("INPUT0", "INPUT1"):
                i = aioclient.InferInput(name, [1, 16], "FP32")
                i.set_data_from_numpy(a)
                ins.append(i)
            r = await c.infer(model, ins, request_id=str(k))
            assert r.get_response()["id"] == str(k)
            return r.as_numpy("OUTPUT0")

        return await asyncio.gather(*(one(k) for k in range(n)))
    finally:
        await c.close()


def test_batch_stats_reflect_formed_batches(server: Any) -> None:
    outs = asyncio.run(_burst(server.http_url, "batched", 8))
    for k, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full((1, 16), 2 * k, np.float32))
    st = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("batched")
    s = st["model_stats"][0]
    assert s["inference_count"] == 8
    assert s["execution_count"] == 2
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in s["batch_stats"]] == [(4, 2)]
    assert s["inference_stats"]["success"]["count"] == 8
    assert s["inference_stats"]["queue"]["count"] == 8


def test_without_dynamic_batching_each_request_runs_alone(server: Any) -> None:
    asyncio.run(_burst(server.http_url, "unbatched", 6))
    client = httpclient.InferenceServerClient(server.http_url)
    s = client.get_inference_statistics("unbatched")["model_stats"][0]
    assert s["execution_count"] == 6 and s["inference_count"] == 6
    assert [b["batch_size"] for b in s["batch_stats"]] == [1]

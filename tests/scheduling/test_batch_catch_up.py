"""``thread+batch``: an instance frees once the loop has queued what arrived while it answered.

A real ONNX identity model with a dynamic batcher and no delay, in a real InferenceCore, with
an execution timeout so that every batch runs on the instance's thread (``thread+batch``). Each
client of the first batch sends its next request as a socket client answered first would
(``_client``). What the test reads is the batch sizes the model's statistics counted, never
the clock.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvloop
from conftest import run_core

from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.core.core import InferenceCore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(60)


# one instance, a dynamic batcher with no delay
CONFIG = "instance_group [{count: 1 kind: KIND_CPU}]\ndynamic_batching { }\n"


def _repo(tmp_path: Path) -> Path:
    write_identity(tmp_path / "repo", "nodelay", "FP32", [-1], 8, CONFIG)
    return tmp_path / "repo"


def _req(value: float) -> InferRequest:
    data = np.full((1, 3), value, dtype=np.float32)
    return InferRequest(model_name="nodelay", inputs=[InferInput("INPUT0", "FP32", (1, 3), data)])


def _batches(core: InferenceCore) -> dict[int, int]:
    stats = core.statistics("nodelay")["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


async def _client(core: InferenceCore, value: float, again: list[asyncio.Future[Any]]) -> None:
    """One request, then the next as a socket client answered first sends it: the handler
    that wrote the answer is done; the loop reads the next request after that turn and starts
    its handler (a new task), whose first step queues it a turn later."""
    await core.infer(_req(value))

    def read() -> None:
        again.append(asyncio.ensure_future(core.infer(_req(value + 100))))

    asyncio.get_running_loop().call_soon(read)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_requests_sent_on_an_answer_join_one_batch(tmp_path: Path, n: int, loop: str) -> None:
    async def body(core: InferenceCore) -> None:
        model = core.repository.get("nodelay")
        (inst,) = model.instances
        assert inst.mode == "thread+batch"
        # the first batch: n requests queued behind the held instance, then let go together
        assert model.take_idle(inst)
        again: list[asyncio.Future[Any]] = []
        first = [asyncio.ensure_future(_client(core, float(i), again)) for i in range(n)]
        for _ in range(5):
            await asyncio.sleep(0)
        model.return_idle(inst)
        model.scheduler.instance_free()
        await asyncio.gather(*first)
        second: list[InferResponse] = await asyncio.gather(*again)
        assert sorted(float(r.outputs[0].data[0, 0]) for r in second) == [
            float(i + 100) for i in range(n)
        ]
        # the n sent on the answers: one batch, not one alone and then the rest
        assert _batches(core) == {n: 2}

    runner = uvloop.run if loop == "uvloop" else asyncio.run
    run_core(_repo(tmp_path), body, runner, backend_execution_timeout_s=30.0)

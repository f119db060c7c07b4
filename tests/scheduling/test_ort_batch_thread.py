"""Batched ONNX Runtime models run each batch with ``run`` on the instance thread.

Real ONNX models in a real InferenceCore, under a dynamic batcher. An instance whose session
has an intra-op pool (``intra_op_thread_count`` >= 2) and plain tensors runs its off-loop
batches on its thread with the pool sharing each run, and its responses are built on the loop
(``thread+batch``); one without (count 1, or string tensors) runs them on its thread and builds
them there (``thread``). The tests keep batches off the loop (``allow_inline(False)``) and hold
the instances so that batch formation is deterministic. Gated states (a batch running while
others queue, failures, cancellation, unload) are in test_thread_batch.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.options import ServerOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity, write_mlp  # noqa: E402
from test_dynamic import (  # noqa: E402
    Held,
    _batches,
    _write_gather,
    check_failing_batch,
    gather_req,
)

pytestmark = pytest.mark.timeout(60)

ONE = "instance_group [{count: 1 kind: KIND_CPU}]\n"


def _intra(n: int) -> str:
    return f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{n}" }} }}\n'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write_identity(repo, "pooled", "FP32", [-1], 8, ONE + _intra(2) + "dynamic_batching { }\n")
    write_identity(repo, "single", "FP32", [-1], 8, ONE + _intra(1) + "dynamic_batching { }\n")
    write_identity(repo, "strings", "BYTES", [-1], 8, ONE + _intra(2) + "dynamic_batching { }\n")
    _write_gather(repo, "gather", ONE + _intra(2) + "dynamic_batching { }\n")
    write_mlp(
        repo, "mlp", 8, layers=2, width=256, extra_config=ONE + _intra(2) + "dynamic_batching { }\n"
    )
    return repo


def run(tmp_path: Path, body: Any) -> None:
    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(_repo(tmp_path),)))
        assert await core.start() == []
        try:
            for name in ("pooled", "single", "strings", "gather", "mlp"):
                for inst in core.repository.get(name).instances:
                    inst.allow_inline(False)
            await body(core)
        finally:
            await core.stop()

    asyncio.run(main())


async def idle(core: InferenceCore, name: str, timeout_s: float = 30.0) -> None:
    """Wait until every instance of ``name`` is idle again."""
    model = core.repository.get(name)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(model.idle) < len(model.instances):
        assert asyncio.get_running_loop().time() < deadline, "instances never came back idle"
        await asyncio.sleep(0.001)


def _req(model: str, value: float, n: int = 3) -> InferRequest:
    data = np.full((1, n), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, n), data)])


def test_only_a_session_with_an_intra_op_pool_and_plain_tensors_runs_thread_batch(
    tmp_path: Path,
) -> None:
    async def body(core: InferenceCore) -> None:
        modes = {
            name: core.repository.get(name).instances[0].mode
            for name in ("pooled", "single", "strings", "gather", "mlp")
        }
        assert modes == {
            "pooled": "thread+batch",
            "single": "thread",
            "strings": "thread",
            "gather": "thread+batch",
            "mlp": "thread+batch",
        }
        # one batch at a time under a batcher: the thread holds no second one
        assert core.repository.get("pooled").instances[0].depth == 1
        # the instance thread and one pool thread share a run, as Triton's Run
        live = core.repository.get("mlp").instances[0].impl._session.get_session_options()
        assert live.intra_op_num_threads == 2

    run(tmp_path, body)


def test_batches_run_on_the_instance_thread_and_answer_each_request(
    tmp_path: Path,
) -> None:
    async def body(core: InferenceCore) -> None:
        model = core.repository.get("pooled")
        inst = model.instances[0]
        on_thread: list[str] = []
        sync_execute = inst.impl.execute
        sync_one = inst.execute_one

        def execute(*args: Any) -> Any:
            on_thread.append(threading.current_thread().name)
            return sync_execute(*args)

        def execute_one(*args: Any) -> Any:
            on_thread.append(threading.current_thread().name)
            return sync_one(*args)

        inst.impl.execute = execute  # type: ignore[method-assign]
        inst.execute_one = execute_one
        held = Held(core, "pooled")
        tasks = [asyncio.ensure_future(core.infer(_req("pooled", i))) for i in range(5)]
        await asyncio.sleep(0)
        held.release()
        results = await asyncio.gather(*tasks)
        assert [r.outputs[0].data.tolist() for r in results] == [[[float(i)] * 3] for i in range(5)]
        assert _batches(core, "pooled") == {5: 1}
        # one at a time, each a batch of its own, still off the loop and correct
        for i in range(3):
            r = await core.infer(_req("pooled", 10 + i, n=2))
            assert r.outputs[0].data.tolist() == [[10.0 + i] * 2]
        assert on_thread == [inst.spec.name] * 4
        assert inst.spec.name != threading.current_thread().name
        stats = model.stats
        assert stats.success.count == 8 and stats.execution_count == 4
        assert stats.compute_infer.ns > 0 and stats.compute_output.ns > 0

    run(tmp_path, body)


def test_a_real_model_batched_on_the_thread_matches_one_at_a_time(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((1, 256), dtype=np.float32) for _ in range(6)]

        def req(x: np.ndarray) -> InferRequest:
            return InferRequest(
                model_name="mlp", inputs=[InferInput("INPUT0", "FP32", (1, 256), x)]
            )

        alone = [(await core.infer(req(x))).outputs[0].data for x in xs]
        await idle(core, "mlp")  # an instance frees CATCH_UP_TURNS after its batch answered
        held = Held(core, "mlp")
        tasks = [asyncio.ensure_future(core.infer(req(x))) for x in xs]
        await asyncio.sleep(0)
        held.release()
        together = [r.outputs[0].data for r in await asyncio.gather(*tasks)]
        for a, b in zip(alone, together):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert _batches(core, "mlp") == {1: 6, 6: 1}

    run(tmp_path, body)


def test_a_failing_batch_on_the_thread_fails_exactly_its_requests(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        results = await check_failing_batch(core)
        assert "onnx runtime error" in str(results[1])
        # the instance is still in rotation and serves the next request
        r = await core.infer(gather_req(0))
        assert float(r.outputs[0].data[0, 0]) == 0.0

    run(tmp_path, body)

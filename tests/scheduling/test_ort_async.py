"""ONNX Runtime batches that leave the event loop start with ``run_async`` on ORT's own thread.

Real ONNX models in a real InferenceCore. An instance whose session has an intra-op pool
(``intra_op_thread_count`` >= 2) starts its off-loop batches from the loop and builds their
responses on the loop; one without (count 1) keeps running them on its instance thread. The
tests keep batches off the loop (``allow_inline(False)``) and hold the instances so that batch
formation is deterministic.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite.contracts.errors import TritonliteError
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


def _req(model: str, value: float, n: int = 3) -> InferRequest:
    data = np.full((1, n), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, n), data)])


def test_only_a_session_with_an_intra_op_pool_and_plain_tensors_starts_async(
    tmp_path: Path,
) -> None:
    async def body(core: InferenceCore) -> None:
        flags = {
            name: core.repository.get(name).instances[0].async_ok
            for name in ("pooled", "single", "strings", "gather", "mlp")
        }
        assert flags == {
            "pooled": True,
            "single": False,
            "strings": False,
            "gather": True,
            "mlp": True,
        }

    run(tmp_path, body)


def test_async_batches_answer_each_request_and_never_use_the_instance_thread(
    tmp_path: Path,
) -> None:
    async def body(core: InferenceCore) -> None:
        model = core.repository.get("pooled")
        inst = model.instances[0]
        on_thread: list[str] = []
        sync_execute = inst.impl.execute

        def execute(*args: Any) -> Any:
            on_thread.append(threading.current_thread().name)
            return sync_execute(*args)

        inst.impl.execute = execute  # type: ignore[method-assign]
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
        assert on_thread == []
        stats = model.stats
        assert stats.success.count == 8 and stats.execution_count == 4
        assert stats.compute_infer.ns > 0 and stats.compute_output.ns > 0

    run(tmp_path, body)


def test_a_real_model_batched_async_matches_one_at_a_time(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((1, 256), dtype=np.float32) for _ in range(6)]

        def req(x: np.ndarray) -> InferRequest:
            return InferRequest(
                model_name="mlp", inputs=[InferInput("INPUT0", "FP32", (1, 256), x)]
            )

        alone = [(await core.infer(req(x))).outputs[0].data for x in xs]
        held = Held(core, "mlp")
        tasks = [asyncio.ensure_future(core.infer(req(x))) for x in xs]
        await asyncio.sleep(0)
        held.release()
        together = [r.outputs[0].data for r in await asyncio.gather(*tasks)]
        for a, b in zip(alone, together):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert _batches(core, "mlp") == {1: 6, 6: 1}

    run(tmp_path, body)


def test_a_failing_async_batch_fails_exactly_its_requests(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        results = await check_failing_batch(core)
        assert "onnx runtime error" in str(results[1])
        # the instance is still in rotation and serves the next request
        r = await core.infer(gather_req(0))
        assert float(r.outputs[0].data[0, 0]) == 0.0

    run(tmp_path, body)


def test_close_waits_for_a_run_that_is_still_going(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        from tritonlite.contracts.timing import ExecTiming

        impl = core.repository.get("mlp").instances[0].impl
        x = np.ones((8, 256), dtype=np.float32)
        request = InferRequest(model_name="mlp", inputs=[InferInput("INPUT0", "FP32", (8, 256), x)])
        ended: list[Any] = []
        impl.start([request], ExecTiming(), ended.append)  # type: ignore[attr-defined]
        await asyncio.to_thread(impl.close)  # must not free the session under the run
        assert len(ended) == 1
        with pytest.raises(TritonliteError):  # closed: the session is gone
            impl.execute([request], ExecTiming())

    run(tmp_path, body)

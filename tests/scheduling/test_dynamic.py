"""The dynamic batcher's glue with real ONNX models inside a real InferenceCore.

The test holds the model's instances (takes them out of the idle list) to decide when the
batcher may dispatch, so batch formation is deterministic without sleeping on timing.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import run_core
from onnx import TensorProto, helper

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _write_gather(repo: Path, name: str, config_extra: str) -> None:
    """OUTPUT0[b] = INPUT0[b, IDX[b, 0]]: an out-of-range IDX makes ONNX Runtime fail the run."""
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["INPUT0", "IDX"], ["OUTPUT0"], axis=1)],
        name,
        [
            helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["B", 4]),
            helper.make_tensor_value_info("IDX", TensorProto.INT64, ["B", 1]),
        ],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["B", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    (repo / name / "config.pbtxt").write_text(
        "max_batch_size: 2\n"
        'input [{name: "INPUT0" data_type: TYPE_FP32 dims: [4]}, '
        '{name: "IDX" data_type: TYPE_INT64 dims: [1]}]\n'
        'output [{name: "OUTPUT0" data_type: TYPE_FP32 dims: [1]}]\n' + config_extra
    )


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    one = "instance_group [{count: 1 kind: KIND_CPU}]\n"
    write_identity(repo, "plain", "FP32", [-1], 8, one + "dynamic_batching { }\n")
    write_identity(
        repo,
        "preferred",
        "FP32",
        [-1],
        8,
        one + "dynamic_batching { preferred_batch_size: [2, 4] "
        "max_queue_delay_microseconds: 100000 }\n",
    )
    write_identity(
        repo,
        "prio",
        "FP32",
        [-1],
        1,
        one
        + """dynamic_batching {
  priority_levels: 2 default_priority_level: 2
  default_queue_policy { max_queue_size: 3 }
}
""",
    )
    write_identity(
        repo,
        "reject",
        "FP32",
        [-1],
        1,
        one
        + """dynamic_batching {
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 2000
                         allow_timeout_override: true }
}
""",
    )
    write_identity(
        repo,
        "delay",
        "FP32",
        [-1],
        1,
        one
        + """dynamic_batching {
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000
                         allow_timeout_override: true }
}
""",
    )
    write_identity(
        repo,
        "ordered",
        "FP32",
        [-1],
        8,
        "instance_group [{count: 2 kind: KIND_CPU}]\n"
        "dynamic_batching { preserve_ordering: true }\n",
    )
    _write_gather(repo, "gather", one + "dynamic_batching { }\n")
    return repo


def _req(model: str, n: int = 3, value: float = 1.0, **kw: Any) -> InferRequest:
    data = np.full((1, n), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, n), data)], **kw)


def run(tmp_path: Path, body: Callable[[InferenceCore], Awaitable[None]]) -> None:
    run_core(_repo(tmp_path), body)


class Held:
    """Takes every idle instance of a model so nothing dispatches until ``release``."""

    def __init__(self, core: InferenceCore, name: str) -> None:
        self.model = core.repository.get(name)
        self.instances = [i for i in self.model.instances if self.model.take_idle(i)]

    def release(self, count: int | None = None) -> None:
        for inst in self.instances[:count]:
            self.model.return_idle(inst)
        self.instances = self.instances[len(self.instances) if count is None else count :]
        self.model.scheduler.instance_free()


def _batches(core: InferenceCore, name: str) -> dict[int, int]:
    stats = core.repository.get(name).stats
    return {size: b.compute_infer.count for size, b in stats.batches.items()}


def test_delay_zero_takes_everything_queued(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "plain")
        tasks = [asyncio.ensure_future(core.infer(_req("plain", value=i))) for i in range(5)]
        await asyncio.sleep(0)
        held.release()
        results = await asyncio.gather(*tasks)
        assert [float(r.outputs[0].data[0, 0]) for r in results] == [0, 1, 2, 3, 4]
        assert _batches(core, "plain") == {5: 1}
        assert core.repository.get("plain").stats.execution_count == 1

    run(tmp_path, body)


def test_preferred_size_dispatches_at_once_rest_waits_for_delay(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "preferred")
        tasks = [asyncio.ensure_future(core.infer(_req("preferred"))) for _ in range(5)]
        await asyncio.sleep(0)
        held.release()
        await asyncio.gather(*tasks[:4])
        assert _batches(core, "preferred") == {4: 1}
        assert not tasks[4].done()  # waits up to the 100 ms delay for a fuller batch
        await tasks[4]
        assert _batches(core, "preferred") == {4: 1, 1: 1}

    run(tmp_path, body)


def test_different_shapes_never_share_a_batch(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "plain")
        shapes = [3, 3, 5, 3]
        tasks = [asyncio.ensure_future(core.infer(_req("plain", n))) for n in shapes]
        await asyncio.sleep(0)
        held.release()
        results = await asyncio.gather(*tasks)
        assert [r.outputs[0].shape for r in results] == [(1, n) for n in shapes]
        # Triton's batch is a prefix of the queue: it stops at the first mismatching shape.
        assert _batches(core, "plain") == {2: 1, 1: 2}

    run(tmp_path, body)


def test_priorities_and_queue_size(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "prio")
        done: list[str] = []

        async def one(tag: str, priority: int) -> None:
            await core.infer(_req("prio", priority=priority))
            done.append(tag)

        tasks = [
            asyncio.ensure_future(one(t, p))
            for t, p in (("low1", 0), ("low2", 2), ("high", 1), ("low3", 7))
        ]
        await asyncio.sleep(0)
        with pytest.raises(TritonliteError, match="Exceeds maximum queue size") as info:
            await core.infer(_req("prio"))  # level 2 (the default) already holds 3
        assert info.value.code == ErrorCode.UNAVAILABLE
        held.release()
        await asyncio.gather(*tasks)
        assert done == ["high", "low1", "low2", "low3"]
        assert core.repository.get("prio").stats.failures_by_reason["REJECTED"] == 1

    run(tmp_path, body)


def test_reject_timeout_and_override(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "reject")
        slow = asyncio.ensure_future(core.infer(_req("reject")))
        with pytest.raises(TritonliteError, match="Request timeout expired"):
            await asyncio.wait_for(slow, 10)  # the batcher's own timer rejects it
        fast = asyncio.ensure_future(core.infer(_req("reject", timeout_us=100)))
        with pytest.raises(TritonliteError, match="Request timeout expired"):
            await asyncio.wait_for(fast, 10)
        held.release()
        ok = await core.infer(_req("reject"))
        assert ok.outputs[0].data is not None

    run(tmp_path, body)


def test_delay_timeout_moves_expired_behind(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "delay")
        order: list[str] = []

        async def one(tag: str) -> None:
            await core.infer(_req("delay"))
            order.append(tag)

        first = asyncio.ensure_future(one("expired"))
        await asyncio.sleep(0.01)  # let its 1 ms timeout pass (DELAY keeps it queued)
        second = asyncio.ensure_future(one("fresh"))
        await asyncio.sleep(0)
        held.release()
        await asyncio.gather(first, second)
        assert order == ["fresh", "expired"]

    run(tmp_path, body)


def test_preserve_ordering_across_instances(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "ordered")
        big = asyncio.ensure_future(core.infer(_req("ordered", n=4_000_000)))
        await asyncio.sleep(0)
        held.release(1)  # the big request takes instance 1 alone
        small = asyncio.ensure_future(core.infer(_req("ordered", n=2)))
        await asyncio.sleep(0)
        held.release()  # the small one runs on instance 2 and finishes first internally
        await small
        assert big.done(), "preserve_ordering must not release a later response first"
        await big

    run(tmp_path, body)


def gather_req(idx: int) -> InferRequest:
    """A request of the ``gather`` model; an ``idx`` out of range fails its batch in ORT."""
    return InferRequest(
        model_name="gather",
        inputs=[
            InferInput("INPUT0", "FP32", (1, 4), np.arange(4, dtype=np.float32).reshape(1, 4)),
            InferInput("IDX", "INT64", (1, 1), np.array([[idx]], dtype=np.int64)),
        ],
    )


async def check_failing_batch(core: InferenceCore) -> list[Any]:
    """Batches [1, 99] and [2, 3] of ``gather``: the first fails, exactly its two requests."""
    held = Held(core, "gather")
    tasks = [asyncio.ensure_future(core.infer(gather_req(i))) for i in (1, 99, 2, 3)]
    await asyncio.sleep(0)
    held.release()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, TritonliteError) for r in results[:2])  # batch 1: [1, 99]
    assert [float(r.outputs[0].data[0, 0]) for r in results[2:]] == [2.0, 3.0]  # batch 2
    stats = core.repository.get("gather").stats
    assert stats.fail.count == 2 and stats.success.count == 2
    assert _batches(core, "gather") == {2: 2}
    return results


def test_failing_batch_fails_exactly_its_requests(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        await check_failing_batch(core)

    run(tmp_path, body)

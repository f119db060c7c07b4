"""The schedulers against a stand-in ``InstancePool``: the seam is the whole contract.

No core, no backend: the pool records what it is handed, and the test completes batches itself
the way ``Model._complete`` does (resolve the futures, call ``done``, then ``instance_free``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite.backends.base import ModelContext
from tritonlite.contracts.config import normalize, parse_pbtxt
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.scheduling.base import BatchRunner, InstancePool, Pending
from tritonlite.scheduling.direct import DirectScheduler
from tritonlite.scheduling.dynamic import DynamicBatchScheduler
from tritonlite.scheduling.sequence import SequenceBatchScheduler

pytestmark = pytest.mark.timeout(30)

INPUT = (
    'input [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\n'
    'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
)


class Pool:
    """An InstancePool with ``count`` instances that never run anything by themselves."""

    def __init__(self, config_text: str, count: int = 1) -> None:
        cfg = parse_pbtxt(f'name: "m" backend: "onnxruntime"\n{config_text}{INPUT}', "test")
        normalize(cfg)
        self.name = "m"
        self.config = cfg
        self.signature = Signature.from_config(cfg, Path("."))
        self.ctx = ModelContext("m", 1, Path("."), Path("1"), cfg, "{}")
        self.executing = 0
        self._instances = [object() for _ in range(count)]
        self.idle = list(self._instances)
        self.dispatched: list[tuple[object, list[Pending], Any, Any]] = []
        self.rejected: list[TritonliteError] = []
        self.scheduler: Any = None

    @property
    def instances(self) -> list[object]:
        return self._instances

    def has_idle(self, instance: object | None = None) -> bool:
        return bool(self.idle) if instance is None else instance in self.idle

    def dispatch(
        self,
        batch: list[Pending],
        instance: object | None = None,
        runner: BatchRunner | None = None,
        done: Callable[[], None] | None = None,
        direct: bool = False,
        padding: int = 0,
    ) -> None:
        chosen = self.idle.pop(0) if instance is None else instance
        if instance is not None:
            self.idle.remove(instance)
        self.executing += len(batch)
        self.dispatched.append((chosen, batch, runner, done))

    def dispatch_one(self, p: Pending) -> None:
        self.dispatch([p], direct=True)

    def reject(
        self, request: InferRequest, future: asyncio.Future[InferResponse], err: TritonliteError
    ) -> None:
        self.rejected.append(err)
        future.set_exception(err)

    def complete(self, index: int = 0) -> None:
        """What Model._complete does for dispatched batch ``index``."""
        instance, batch, _runner, done = self.dispatched.pop(index)
        for p in batch:
            p.future.set_result(InferResponse("m", "1", p.request.id))
        self.executing -= len(batch)
        if done is not None:
            done()
        self.idle.append(instance)
        self.scheduler.instance_free()


def _request(rid: str, **kw: Any) -> InferRequest:
    data = np.zeros((1, 1), np.float32)
    return InferRequest("m", id=rid, inputs=[InferInput("IN", "FP32", (1, 1), data)], **kw)


def test_the_model_meets_the_protocol() -> None:
    pool: InstancePool = Pool("max_batch_size: 4\n")  # mypy --strict checks the protocol
    assert pool.has_idle()


def test_direct_runs_one_request_per_free_instance() -> None:
    async def main() -> None:
        pool = Pool("max_batch_size: 4\n", count=2)
        pool.scheduler = sched = DirectScheduler(pool)
        futs = [sched.enqueue(_request(str(i))) for i in range(3)]
        assert [len(b) for _, b, _, _ in pool.dispatched] == [1, 1]
        assert sched.inflight() == 3
        pool.complete()
        assert (await futs[0]).id == "0"
        assert [b[0].request.id for _, b, _, _ in pool.dispatched] == ["1", "2"]

    asyncio.run(main())


def test_dynamic_batches_what_queued_while_the_instance_was_busy() -> None:
    async def main() -> None:
        pool = Pool("max_batch_size: 4\ndynamic_batching { }\n")
        pool.scheduler = sched = DynamicBatchScheduler(pool)
        first = sched.enqueue(_request("a"))
        rest = [sched.enqueue(_request(str(i))) for i in range(5)]
        assert [len(b) for _, b, _, _ in pool.dispatched] == [1]  # the instance is busy
        pool.complete()
        assert (await first).id == "a"
        assert [len(b) for _, b, _, _ in pool.dispatched] == [4]  # max_batch_size
        pool.complete()
        assert [len(b) for _, b, _, _ in pool.dispatched] == [1]
        pool.complete()
        assert [(await f).id for f in rest] == ["0", "1", "2", "3", "4"]

    asyncio.run(main())


def test_dynamic_rejects_through_the_pool_when_the_queue_is_full() -> None:
    async def main() -> None:
        pool = Pool(
            "max_batch_size: 1\ndynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
        )
        pool.scheduler = sched = DynamicBatchScheduler(pool)
        sched.enqueue(_request("running"))
        sched.enqueue(_request("queued"))
        full = sched.enqueue(_request("refused"))
        with pytest.raises(TritonliteError) as info:
            await full
        assert info.value.code == ErrorCode.UNAVAILABLE
        assert pool.rejected == [info.value]

    asyncio.run(main())


def test_sequence_hands_its_state_runner_and_completion_with_each_batch() -> None:
    async def main() -> None:
        pool = Pool("max_batch_size: 2\nsequence_batching { }\n")
        pool.scheduler = sched = SequenceBatchScheduler(pool)
        fut = sched.enqueue(_request("s1", sequence_id=7, sequence_start=True))
        ((instance, batch, runner, done),) = pool.dispatched
        assert instance is pool.instances[0] and len(batch) == 1
        assert runner is not None and done is not None  # no backend instance was swapped
        nxt = sched.enqueue(_request("s2", sequence_id=7))
        assert len(pool.dispatched) == 1  # one request of a sequence at a time
        pool.complete()
        assert (await fut).id == "s1"
        assert [b[0].request.id for _, b, _, _ in pool.dispatched] == ["s2"]
        pool.complete()
        assert (await nxt).id == "s2"

    asyncio.run(main())

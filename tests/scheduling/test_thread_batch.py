"""A batched ONNX model runs one batch at a time on its instance thread (``thread+batch``).

Real ONNX models in a real InferenceCore under a dynamic batcher. The tests hold the thread
inside a run (``Gate``) so each state is reached on purpose: one batch running while more
requests queue in the batcher; the instance frees and the next batch takes what queued (up to
``max_batch_size``); then a batch that fails (the running one, or the next), one that takes the
instance out of rotation, a request cancelled in the running batch or in the queue, and an
unload while a batch runs. Each is repeated.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_core, until

from tritonlite.backends import onnxruntime as onnxruntime_backend
from tritonlite.backends.base import BackendFatalError
from tritonlite.backends.onnxruntime import available_cores
from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.core.runtime.health import HealthSettings
from tritonlite.core.runtime.policy import INLINE_MAX_NS, PROBE_FIRST, WAITED_INLINE_MAX_NS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ONE = "instance_group [{count: 1 kind: KIND_CPU}]\n"
POOL = 'parameters { key: "intra_op_thread_count" value: { string_value: "2" } }\n'
BATCHER = "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
REPEAT = 4


# A pool over every core but the loop's (ONNX Runtime's default here), under a batcher that waits
FILL = max(2, available_cores() - 1)
WAITED = (
    f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{FILL}" }} }}\n'
    "dynamic_batching { max_queue_delay_microseconds: 5000 }\n"
)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write_identity(repo, "batched", "FP32", [-1], 8, ONE + POOL + BATCHER)
    write_identity(repo, "waited", "FP32", [-1], 8, ONE + WAITED)
    return repo


def run(tmp_path: Path, body: Any, timeout_s: float = 0.0) -> None:
    run_core(_repo(tmp_path), body, backend_execution_timeout_s=timeout_s)


def _req(value: float, model: str = "batched") -> InferRequest:
    data = np.full((1, 3), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, 3), data)])


def _value(resp: Any) -> float:
    return float(resp.outputs[0].data[0, 0])


class Gate:
    """Stands in for the instance's ``execute_one`` and its backend's ``execute``: each run
    waits for ``open`` (on the instance's thread), records the batch's values and the thread,
    takes ``pause_s`` more, then raises what ``fail`` maps its first value to, or runs for
    real."""

    def __init__(self, inst: Any) -> None:
        self.inst = inst
        self.real_one = inst.execute_one
        self.real = inst.impl.execute
        self.go = threading.Event()
        self.fail: dict[float, BaseException] = {}
        self.ran: list[list[float]] = []
        self.threads: list[str] = []  # each run's, in order
        self.pause_s = 0.0
        inst.execute_one = self.one
        inst.impl.execute = self.batch

    def _enter(self, requests: list[InferRequest]) -> None:
        assert self.go.wait(30), "the gate was never opened"
        values = [float(r.inputs[0].data[0, 0]) for r in requests]  # type: ignore[index]
        self.ran.append(values)
        self.threads.append(threading.current_thread().name)
        if self.pause_s:
            time.sleep(self.pause_s)
        if values[0] in self.fail:
            raise self.fail[values[0]]

    def one(self, request: InferRequest, timing: Any) -> Any:
        self._enter([request])
        return self.real_one(request, timing)

    def batch(self, requests: list[InferRequest], timing: Any) -> Any:
        self._enter(requests)
        return self.real(requests, timing)

    def open(self) -> None:
        self.go.set()

    def remove(self) -> None:
        self.inst.execute_one = self.real_one
        self.inst.impl.execute = self.real


async def _round(m: Any, rnd: int) -> tuple[Any, Gate, float]:
    """Round ``rnd``, once the instance is idle (it frees ``CATCH_UP_TURNS`` loop turns after
    its last batch answered): a gate in front of the runs, batches kept off the loop (slow, as
    the MLP's are), and the round's first input value."""
    inst = m.instances[0]
    await until(lambda: inst in m.idle)
    gate = Gate(inst)
    inst.policy.recent_ns = 10**9
    inst.policy._since_probe = 0  # no inline probe (it would wait for the gate on the loop)
    return inst, gate, 100.0 * rnd


async def _clean(m: Any, inst: Any) -> None:
    """Nothing held: the instance is back in ``idle`` (one entry) and nothing is in flight."""
    await until(lambda: m.scheduler.inflight() == 0 and inst in m.idle)
    assert (inst.busy, m.executing, list(m.idle).count(inst)) == (0, 0, 1)


def _batches(m: Any) -> dict[int, int]:
    return {size: b.compute_infer.count for size, b in m.stats.batches.items()}


def test_the_mode_is_thread_batch_with_or_without_a_timeout(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        inst = core.repository.get("batched").instances[0]
        assert inst.mode == "inline|thread+batch" and inst.depth == 1

    async def timed(core: InferenceCore) -> None:
        inst = core.repository.get("batched").instances[0]
        assert inst.mode == "thread+batch" and inst.depth == 1
        results = await asyncio.gather(*(core.infer(_req(float(i))) for i in range(12)))
        assert [_value(r) for r in results] == [float(i) for i in range(12)]

    run(tmp_path, body)
    run(tmp_path / "t", timed, timeout_s=30.0)


@pytest.mark.parametrize(
    ("model", "cores", "other"),
    [("batched", 0, False), ("waited", 0, False), ("waited", 4096, False), ("waited", 0, True)],
)
def test_a_waited_batch_runs_on_the_loop_when_nothing_else_needs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, cores: int, other: bool
) -> None:
    """Batches that take 0.4 ms (over INLINE_MAX_NS, under WAITED_INLINE_MAX_NS): measured once
    on the instance thread, then those of a batcher with a delay, whose session's pool spans
    the cores, run on the loop's thread. They stay on the instance's (fewer than PROBE_FIRST
    batches: no inline probe) under a batcher without a delay, with a pool that leaves cores to
    other instances (here: the process may use 4096), or while another model's requests
    arrive too (``other``: one before each batch)."""
    assert INLINE_MAX_NS < 400_000 < 500_000 < WAITED_INLINE_MAX_NS // 2 and PROBE_FIRST > 6
    if cores:
        monkeypatch.setattr(onnxruntime_backend, "available_cores", lambda: cores)
    waited = model == "waited" and not cores and not other

    async def body(core: InferenceCore) -> None:
        m = core.repository.get(model)
        inst = m.instances[0]
        assert inst.mode == "inline|thread+batch"
        bound = model == "waited" and not cores
        assert inst.policy.max_ns == (WAITED_INLINE_MAX_NS if bound else INLINE_MAX_NS)
        gate = Gate(inst)
        gate.open()
        gate.pause_s = 0.0004
        loop_thread = threading.current_thread().name
        for rnd in range(6):
            base = 10.0 * rnd
            if other:  # another model's request since the last batch, as the front ends
                # send it: its lane first (``infer_now``; None: not taken, then ``infer``)
                req = _req(-base, "batched")
                resp = core.infer_now(req) or await core.infer(req)
                assert _value(resp) == -base
            # one batch (queued in one loop turn, well inside the delay)
            results = await asyncio.gather(*(core.infer(_req(base + i, model)) for i in range(3)))
            assert [_value(r) for r in results] == [base, base + 1, base + 2]
            await until(lambda: inst in m.idle)
            if rnd == 0:
                # A busy machine can stretch the first span (the thread waits for a CPU and
                # the GIL): what is tested is the bound the spans are held against.
                inst.policy.recent_ns = min(inst.policy.recent_ns, 500_000)
        threads = gate.threads
        assert threads[0] == inst.spec.name  # the first batch is measured off the loop
        assert set(threads[1:]) == ({loop_thread} if waited else {inst.spec.name})
        assert m.stats.success.count == 18 and m.stats.fail.count == 0
        if model == "waited":  # one batch a round (with no delay: the first runs alone)
            assert m.stats.execution_count == 6

    run(tmp_path, body)


def test_what_queues_while_a_batch_runs_is_the_next_batch(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("batched")
        for rnd in range(REPEAT):
            inst, gate, base = await _round(m, rnd)
            before = _batches(m)
            first = m.scheduler.enqueue(_req(base))  # runs at once, held by the gate
            assert inst.busy == 1  # on the thread, held by the gate
            # while it runs: eleven queue in the batcher, none goes to the instance
            rest = [m.scheduler.enqueue(_req(base + i)) for i in range(1, 12)]
            assert (inst.busy, m.executing, m.scheduler.inflight()) == (1, 1, 12)
            assert inst not in m.idle and not any(f.done() for f in [first, *rest])
            gate.open()
            results = await asyncio.gather(first, *rest)
            assert [_value(r) for r in results] == [base + i for i in range(12)]
            # the next batch took what queued, up to max_batch_size (8); then the rest
            assert gate.ran == [
                [base],
                [base + i for i in range(1, 9)],
                [base + 9, base + 10, base + 11],
            ]
            assert set(gate.threads) == {inst.spec.name}
            after = _batches(m)
            assert {
                k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)
            } == {
                1: 1,
                8: 1,
                3: 1,
            }
            gate.remove()
            await _clean(m, inst)
        s = m.stats
        assert s.success.count == 12 * REPEAT and s.execution_count == 3 * REPEAT
        assert s.fail.count == 0

    run(tmp_path, body)


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failing_batch_fails_its_requests_alone(tmp_path: Path, failing: int) -> None:
    """The batch that fails is the one running (0) or the one that queued behind it (1)."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("batched")
        for rnd in range(REPEAT):
            inst, gate, base = await _round(m, rnd)
            gate.fail[base + failing] = RuntimeError("boom")
            first = m.scheduler.enqueue(_req(base))
            assert inst.busy == 1  # on the thread, held by the gate
            rest = [m.scheduler.enqueue(_req(base + i)) for i in range(1, 4)]
            gate.open()
            done = await asyncio.gather(first, *rest, return_exceptions=True)
            failed = [0] if failing == 0 else [1, 2, 3]
            for i, r in enumerate(done):
                if i in failed:
                    assert isinstance(r, TritonliteError) and "RuntimeError: boom" in str(r)
                else:
                    assert _value(r) == base + i
            gate.remove()
            await _clean(m, inst)
            assert inst.healthy and inst.rebuilds == 0
            r = await core.infer(_req(-1.0))
            assert _value(r) == -1.0
        assert m.stats.fail.count == (1 if failing == 0 else 3) * REPEAT

    run(tmp_path, body)


@pytest.mark.parametrize("fatal", [0, 1])
def test_a_fatal_batch_takes_the_instance_out_and_the_queue_waits_for_the_rebuild(
    tmp_path: Path, fatal: int
) -> None:
    """A run that breaks the session is the running batch (0: what queued behind it runs on
    the rebuilt instance) or the next one (1: the first answers, the next fails)."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("batched")
        m.health.settings = HealthSettings(rebuild_backoff_s=0.01)
        for rnd in range(REPEAT):
            inst, gate, base = await _round(m, rnd)
            gate.fail[base + fatal] = BackendFatalError("onnx runtime error: CUDA failure 700")
            first = m.scheduler.enqueue(_req(base))
            assert inst.busy == 1  # on the thread, held by the gate
            rest = [m.scheduler.enqueue(_req(base + i)) for i in range(1, 4)]
            gate.open()
            done = await asyncio.gather(first, *rest, return_exceptions=True)
            if fatal == 0:
                assert isinstance(done[0], TritonliteError) and "CUDA failure" in str(done[0])
                assert "taken out of rotation" in str(done[0])
                # the three queued in the batcher and ran on the rebuilt instance
                assert [_value(r) for r in done[1:]] == [base + 1, base + 2, base + 3]
                assert gate.ran == [[base]]
            else:
                assert _value(done[0]) == base
                assert all(isinstance(r, TritonliteError) for r in done[1:])
                assert all("CUDA failure" in str(r) for r in done[1:])
            await until(lambda: m.instances[0].healthy)  # rebuilt
            assert inst.rebuilds == rnd + 1 and inst.execute_one != gate.one
            await _clean(m, inst)
            r = await core.infer(_req(-1.0))
            assert _value(r) == -1.0

    run(tmp_path, body)


def test_cancelled_in_the_running_batch_or_in_the_queue(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("batched")
        for rnd in range(REPEAT):
            inst, gate, base = await _round(m, rnd)
            first = [m.scheduler.enqueue(_req(base + i)) for i in range(2)]
            # both went at once: the first alone (the instance was idle), the second queued
            assert inst.busy == 1  # on the thread, held by the gate
            rest = [m.scheduler.enqueue(_req(base + i)) for i in range(2, 5)]
            first[0].cancel()  # in the running batch: it runs, its answer is dropped
            rest[1].cancel()  # in the batcher's queue: it never runs
            gate.open()
            assert _value(await first[1]) == base + 1
            assert [_value(await rest[0]), _value(await rest[2])] == [base + 2, base + 4]
            await _clean(m, inst)
            assert gate.ran == [[base], [base + 1, base + 2, base + 4]]
            assert first[0].cancelled() and rest[1].cancelled()
            gate.remove()

    run(tmp_path, body)


def test_unload_while_a_batch_runs(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for _ in range(REPEAT):
            m = core.repository.get("batched")
            inst, gate, _base = await _round(m, 0)
            first = m.scheduler.enqueue(_req(0.0))
            assert inst.busy == 1  # on the thread, held by the gate
            rest = [m.scheduler.enqueue(_req(float(i))) for i in range(1, 4)]
            unload = asyncio.ensure_future(core.repository.unload("batched"))
            await asyncio.sleep(0)  # the unload starts draining
            assert not unload.done()
            gate.open()
            results = await asyncio.gather(first, *rest)
            assert [_value(r) for r in results] == [0.0, 1.0, 2.0, 3.0]
            await unload
            assert inst.busy == 0 and m.executing == 0 and m.scheduler.inflight() == 0
            assert gate.ran == [[0.0], [1.0, 2.0, 3.0]]
            with pytest.raises(TritonliteError):
                core.repository.get("batched")
            await core.repository.load("batched")

    run(tmp_path, body)

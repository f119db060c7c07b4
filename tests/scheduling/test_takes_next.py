"""An ONNX model with no batcher runs on its instance thread, which holds the next request.

Real ONNX models in a real InferenceCore (the direct scheduler). Such an instance takes two
requests at once (``depth`` 2): the one its thread runs and the next, which the thread starts
as the first run returns, with no loop turn between. The tests hold the thread inside a run
(``Gate``) so each state is reached on purpose: one running, one running and one held on the
thread, more waiting in the scheduler; then a run that fails, one that takes the instance out
of rotation, a request cancelled on the thread or in the queue, and an unload while the thread
holds two. Each is repeated.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_core, until

from tritonlite.backends.base import BackendFatalError
from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.core.runtime.health import HealthSettings
from tritonlite.core.runtime.policy import InlinePolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ONE = "instance_group [{count: 1 kind: KIND_CPU}]\n"
TWO = "instance_group [{count: 2 kind: KIND_CPU}]\n"
REPEAT = 4


def _intra(n: int) -> str:
    return f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{n}" }} }}\n'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write_identity(repo, "next", "FP32", [-1], 8, ONE + _intra(2))
    write_identity(repo, "next2", "FP32", [-1], 8, TWO + _intra(2))
    write_identity(repo, "batched", "FP32", [-1], 8, ONE + _intra(2) + "dynamic_batching { }\n")
    write_identity(repo, "single", "FP32", [-1], 8, ONE + _intra(1))
    return repo


def run(tmp_path: Path, body: Any, timeout_s: float = 0.0) -> None:
    run_core(_repo(tmp_path), body, backend_execution_timeout_s=timeout_s)


def _req(model: str, value: float) -> InferRequest:
    data = np.full((1, 3), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, 3), data)])


def _value(resp: Any) -> float:
    return float(resp.outputs[0].data[0, 0])


class Gate:
    """Stands in for an instance's ``execute_one``: each run waits for ``open`` (on the
    instance's thread), then raises what ``fail`` maps its input value to, or runs for real."""

    def __init__(self, inst: Any) -> None:
        self.real = inst.execute_one
        self.go = threading.Event()
        self.fail: dict[float, BaseException] = {}
        self.ran: list[float] = []
        inst.execute_one = self

    def __call__(self, request: InferRequest, timing: Any) -> Any:
        assert self.go.wait(30), "the gate was never opened"
        value = float(request.inputs[0].data[0, 0])  # type: ignore[index]
        self.ran.append(value)
        if value in self.fail:
            raise self.fail[value]
        return self.real(request, timing)

    def open(self) -> None:
        self.go.set()


def _round(m: Any, rnd: int) -> tuple[Any, Gate, float]:
    """Round ``rnd`` on ``m``'s first instance: a gate in front of its runs, its runs measured
    off the loop (as a fresh instance's are), and the round's first input value."""
    inst = m.instances[0]
    gate = Gate(inst)
    inst.policy.recent_ns = 0
    return inst, gate, 10.0 * rnd


def _slots(m: Any, inst: Any) -> int:
    return list(m.idle).count(inst)


def _clean(m: Any, inst: Any) -> None:
    """Nothing held: the instance is free with both of its entries, nothing in flight."""
    assert (inst.busy, m.executing, m.scheduler.inflight()) == (0, 0, 0)
    assert _slots(m, inst) == inst.depth == 2


def test_only_an_unbatched_pooled_session_holds_the_next(tmp_path: Path) -> None:
    async def inline(core: InferenceCore) -> None:
        modes = {n: core.repository.get(n).instances[0] for n in ("next", "batched", "single")}
        assert modes["next"].mode == "inline|thread+next" and modes["next"].depth == 2
        # under a batcher: one batch at a time on the thread (test_thread_batch.py)
        assert modes["batched"].mode == "inline|thread+batch" and modes["batched"].depth == 1
        assert modes["single"].mode == "inline|thread" and modes["single"].depth == 1
        # run on the thread, the thread and one pool thread share a run (as Triton's Run)
        live = modes["next"].impl._session.get_session_options()
        assert live.intra_op_num_threads == 2
        m = core.repository.get("next2")
        assert [m.idle.count(i) for i in m.instances] == [2, 2]

    async def timed(core: InferenceCore) -> None:
        # with an execution timeout each batch has its own watch: one at a time
        inst = core.repository.get("next").instances[0]
        assert inst.mode == "thread" and inst.depth == 1
        r = await core.infer(_req("next", 2.0))
        assert _value(r) == 2.0

    run(tmp_path, inline)
    run(tmp_path / "t", timed, timeout_s=30.0)


def test_the_thread_holds_the_next_and_runs_them_in_order(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        for rnd in range(REPEAT):
            inst, gate, base = _round(m, rnd)
            futs = [m.scheduler.enqueue(_req("next", base + i)) for i in range(4)]
            # one runs, one is held on the thread, two wait in the scheduler
            assert (inst.busy, m.executing, m.scheduler.inflight()) == (2, 2, 4)
            assert _slots(m, inst) == 0 and not any(f.done() for f in futs)
            gate.open()
            results = await asyncio.gather(*futs)
            assert [_value(r) for r in results] == [base + i for i in range(4)]
            assert gate.ran == [base + i for i in range(4)]
            inst.execute_one = gate.real
            _clean(m, inst)
        s = m.stats
        assert s.success.count == s.execution_count == 4 * REPEAT and s.fail.count == 0
        assert s.batches[1].compute_infer.count == 4 * REPEAT

    run(tmp_path, body)


@pytest.mark.parametrize("model", ["next", "next2"])
def test_many_at_once_each_answered(tmp_path: Path, model: str) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get(model)
        for rnd in range(REPEAT):
            for inst in m.instances:
                inst.policy.recent_ns = 10**9  # slow: off the loop but for probes
            vals = [float(100 * rnd + i) for i in range(64)]
            results = await asyncio.gather(*(core.infer(_req(model, v)) for v in vals))
            assert [_value(r) for r in results] == vals
            await until(lambda: m.executing == 0)
            assert [list(m.idle).count(i) for i in m.instances] == [2] * len(m.instances)
            assert all(i.busy == 0 for i in m.instances)
        assert m.stats.success.count == 64 * REPEAT

    run(tmp_path, body)


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failing_run_fails_its_request_alone(tmp_path: Path, failing: int) -> None:
    """The run that fails is the one running (0) or the one held behind it (1)."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        for rnd in range(REPEAT):
            inst, gate, base = _round(m, rnd)
            gate.fail[base + failing] = RuntimeError("boom")
            futs = [m.scheduler.enqueue(_req("next", base + i)) for i in range(3)]
            assert inst.busy == 2
            gate.open()
            done = await asyncio.gather(*futs, return_exceptions=True)
            for i, r in enumerate(done):
                if i == failing:
                    assert isinstance(r, TritonliteError) and "RuntimeError: boom" in str(r)
                else:
                    assert _value(r) == base + i
            inst.execute_one = gate.real
            _clean(m, inst)
            assert inst.healthy and inst.rebuilds == 0
        assert m.stats.fail.count == REPEAT and m.stats.success.count == 2 * REPEAT

    run(tmp_path, body)


@pytest.mark.parametrize("fatal", [0, 1])
def test_a_fatal_run_fails_what_the_thread_holds_and_the_instance_is_rebuilt(
    tmp_path: Path, fatal: int
) -> None:
    """A run that breaks the session is the one running (0: the one held behind it fails
    too, taken out with the instance) or the one held (1: the first answers)."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        m.health.settings = HealthSettings(rebuild_backoff_s=0.01)
        for rnd in range(REPEAT):
            inst, gate, base = _round(m, rnd)
            gate.fail[base + fatal] = BackendFatalError("onnx runtime error: CUDA failure 700")
            futs = [m.scheduler.enqueue(_req("next", base + i)) for i in range(3)]
            assert inst.busy == 2 and m.scheduler.inflight() == 3
            gate.open()
            done = await asyncio.gather(*futs, return_exceptions=True)
            if fatal == 0:
                assert isinstance(done[0], TritonliteError) and "CUDA failure" in str(done[0])
                assert isinstance(done[1], TritonliteError)
                assert "taken out of rotation" in str(done[1])
                assert gate.ran == [base]  # the held one never ran on the broken session
                # the third waited in the scheduler and ran on the rebuilt instance
                assert _value(done[2]) == base + 2
            else:
                assert _value(done[0]) == base
                assert isinstance(done[1], TritonliteError) and "CUDA failure" in str(done[1])
                # the third went to the thread when the first came back: held behind the
                # broken run it fails with the instance; otherwise it ran on the rebuilt one
                if isinstance(done[2], TritonliteError):
                    assert "taken out of rotation" in str(done[2])
                    assert gate.ran == [base, base + 1]
                else:
                    assert _value(done[2]) == base + 2
            await until(lambda: m.instances[0].healthy)  # rebuilt (nothing may wait for it)
            assert inst.rebuilds == rnd + 1 and inst.execute_one is not gate
            await until(lambda: m.executing == 0)
            _clean(m, inst)
            r = await core.infer(_req("next", -1.0))
            assert _value(r) == -1.0

    run(tmp_path, body)


def test_cancelled_on_the_thread_or_in_the_queue(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        for rnd in range(REPEAT):
            inst, gate, base = _round(m, rnd)
            futs = [m.scheduler.enqueue(_req("next", base + i)) for i in range(4)]
            assert inst.busy == 2
            futs[1].cancel()  # held on the thread: it runs, its answer is dropped
            futs[2].cancel()  # in the scheduler's queue: it never runs
            gate.open()
            assert _value(await futs[0]) == base and _value(await futs[3]) == base + 3
            await until(lambda: m.executing == 0)
            assert gate.ran == [base, base + 1, base + 3]
            assert futs[1].cancelled() and futs[2].cancelled()
            inst.execute_one = gate.real
            _clean(m, inst)

    run(tmp_path, body)


def test_unload_while_the_thread_holds_two(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for _ in range(REPEAT):
            m = core.repository.get("next")
            inst = m.instances[0]
            gate = Gate(inst)
            inst.policy.recent_ns = 0
            futs = [m.scheduler.enqueue(_req("next", float(i))) for i in range(3)]
            assert inst.busy == 2
            unload = asyncio.ensure_future(core.repository.unload("next"))
            await asyncio.sleep(0)  # the unload starts draining
            assert not unload.done()
            gate.open()
            results = await asyncio.gather(*futs)
            assert [_value(r) for r in results] == [0.0, 1.0, 2.0]
            await unload
            assert inst.busy == 0 and m.executing == 0
            with pytest.raises(TritonliteError):
                core.repository.get("next")
            await core.repository.load("next")

    run(tmp_path, body)


class OnWhichThread:
    """Stands in for an instance's ``execute_one`` and notes, per run, whether it ran on the
    loop's thread."""

    def __init__(self, inst: Any) -> None:
        self.real = inst.execute_one
        self.loop_thread = threading.get_ident()
        self.on_loop: list[bool] = []
        inst.execute_one = self

    def __call__(self, request: InferRequest, timing: Any) -> Any:
        self.on_loop.append(threading.get_ident() == self.loop_thread)
        return self.real(request, timing)


def test_a_fast_model_whose_first_runs_went_to_its_thread_comes_back_under_load(
    tmp_path: Path,
) -> None:
    """A fresh instance's first run is measured off the loop, and the requests that arrive
    meanwhile are handed to its thread; under load that never lets up, the thread always has
    a run out. The policy is still asked for each request, and a request it keeps on the loop
    waits for the run out and runs on the loop: the model does not stay on its thread."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        inst = m.instances[0]

        async def client(k: int) -> None:
            for i in range(30):
                r = await core.infer(_req("next", float(1000 * k + i)))
                assert _value(r) == 1000 * k + i

        for _ in range(REPEAT):
            inst.policy = InlinePolicy()  # fresh: its first run goes to the thread
            where = OnWhichThread(inst)
            await asyncio.gather(*(client(k) for k in range(16)))
            inst.execute_one = where.real
            assert where.on_loop[0] is False  # measured off the loop, as a fresh one is
            assert len(where.on_loop) == 16 * 30
            # back on the loop once the policy saw its runs, and there to the end
            assert where.on_loop[-1] and sum(where.on_loop) > len(where.on_loop) // 2
            await until(lambda: m.executing == 0)
            _clean(m, inst)

    run(tmp_path, body)


@pytest.mark.parametrize("fatal", [False, True])
def test_a_request_kept_on_the_loop_waits_for_the_run_out_on_the_thread(
    tmp_path: Path, fatal: bool
) -> None:
    """The policy keeps runs on the loop, but a run is out on the thread: the next request is
    held for the loop (not handed to the thread) and runs there as that run comes back; a run
    out that breaks the session fails the held one with the instance."""

    async def body(core: InferenceCore) -> None:
        m = core.repository.get("next")
        m.health.settings = HealthSettings(rebuild_backoff_s=0.01)
        for rnd in range(REPEAT):
            inst, gate, base = _round(m, rnd)
            if fatal:
                gate.fail[base] = BackendFatalError("onnx runtime error: CUDA failure 700")
            first = m.scheduler.enqueue(_req("next", base))  # measured off the loop
            inst.policy.recent_ns = 1_000  # ... and found fast meanwhile
            futs = [first] + [m.scheduler.enqueue(_req("next", base + i)) for i in (1, 2)]
            # one out on the thread, one held for the loop, one in the scheduler's queue
            assert inst.busy == 1 and inst.held is not None and inst.held[1].future is futs[1]
            assert (m.executing, m.scheduler.inflight(), _slots(m, inst)) == (2, 3, 0)
            where = OnWhichThread(inst)  # the held run calls it on the loop; the gate is
            inst.execute_one = where  # already handed to the thread with the first
            gate.open()
            done = await asyncio.gather(*futs, return_exceptions=True)
            if fatal:
                assert gate.ran == [base]
                assert isinstance(done[0], TritonliteError) and "CUDA failure" in str(done[0])
                assert isinstance(done[1], TritonliteError)
                assert "taken out of rotation" in str(done[1])
                await until(lambda: m.instances[0].healthy)
                assert _value(done[2]) == base + 2  # on the rebuilt instance
            else:
                assert [_value(r) for r in done] == [base, base + 1, base + 2]
                assert gate.ran == [base, base + 1, base + 2]
                assert where.on_loop == [True, True]  # the held one, then the queued one
                inst.execute_one = gate.real
            assert inst.held is None
            await until(lambda: m.executing == 0)
            _clean(m, inst)

    run(tmp_path, body)

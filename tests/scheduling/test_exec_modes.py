"""An instance's execution mode, picked once; the inline policy; the single-request lane.

Real ONNX models in a real InferenceCore (no dynamic batching: the direct scheduler), plus the
``InlinePolicy`` on its own.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_core

from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.core.runtime.policy import (
    INLINE_MAX_NS,
    PROBE_FIRST,
    WAITED_INLINE_MAX_NS,
    InlinePolicy,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _intra(n: int) -> str:
    return f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{n}" }} }}\n'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    one = "instance_group [{count: 1 kind: KIND_CPU}]\n"
    write_identity(repo, "pooled", "FP32", [-1], 8, one + _intra(2))
    write_identity(repo, "single", "FP32", [-1], 8, one + _intra(1))
    return repo


def run(tmp_path: Path, body: Any, timeout_s: float = 0.0) -> None:
    run_core(_repo(tmp_path), body, backend_execution_timeout_s=timeout_s)


def _req(model: str, value: float) -> InferRequest:
    data = np.full((1, 3), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, 3), data)])


def test_the_mode_follows_the_backend_and_the_timeout(tmp_path: Path) -> None:
    async def inline(core: InferenceCore) -> None:
        # no batcher: off the loop the instance thread runs it and takes the next itself
        assert core.repository.get("pooled").instances[0].mode == "inline|thread+next"
        assert core.repository.get("single").instances[0].mode == "inline|thread"

    async def timed(core: InferenceCore) -> None:
        # a hung batch on the loop could not be cut off: never inline, no policy
        for name, mode in (("pooled", "thread"), ("single", "thread")):
            inst = core.repository.get(name).instances[0]
            assert inst.mode == mode and inst.policy is None
            r = await core.infer(_req(name, 2.0))
            assert r.outputs[0].data.tolist() == [[2.0] * 3]

    run(tmp_path, inline)
    run(tmp_path / "t", timed, timeout_s=30.0)


@pytest.mark.parametrize("model", ["pooled", "single"])
def test_queued_requests_run_back_to_back_without_a_loop_turn(tmp_path: Path, model: str) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get(model)
        inst = m.instances[0]
        for i in range(3):  # the first run is measured off the loop; then the policy says inline
            r = await core.infer(_req(model, float(i)))
            assert r.outputs[0].data.tolist() == [[float(i)] * 3]
        assert inst.policy is not None and 0 < inst.policy.recent_ns
        inst.policy.recent_ns = 1  # whatever this machine's load: this one is fast
        before = m.stats.execution_count
        # enqueued in one loop turn: each runs inline and gives its instance back at once,
        # so the next finds it idle -- none waits for a loop turn
        futs = [m.scheduler.enqueue(_req(model, 10.0 + i)) for i in range(8)]
        assert [f.done() for f in futs] == [True] * 8
        for i, f in enumerate(futs):
            assert f.result().outputs[0].data.tolist() == [[10.0 + i] * 3]
        assert m.stats.execution_count == before + 8
        assert m.executing == 0 and m.scheduler.inflight() == 0 and m.has_idle(inst)

    run(tmp_path, body)


def test_the_lane_accounts_like_a_batch_of_one(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("pooled")
        results = await asyncio.gather(*(core.infer(_req("pooled", float(i))) for i in range(40)))
        assert [r.outputs[0].data.tolist() for r in results] == [
            [[float(i)] * 3] for i in range(40)
        ]
        s = m.stats
        assert s.success.count == 40 and s.execution_count == 40 and s.inference_count == 40
        assert s.batches[1].compute_infer.count == 40
        assert s.compute_infer.count == 40 and s.queue.count == 40

    run(tmp_path, body)


@pytest.mark.parametrize("lane", ["execute_one", "execute"])
def test_a_failing_run_fails_its_request_alone_and_is_counted(tmp_path: Path, lane: str) -> None:
    async def body(core: InferenceCore) -> None:
        m = core.repository.get("pooled")
        await core.infer(_req("pooled", 1.0))
        inst = m.instances[0]
        assert inst.policy is not None and inst.execute_one is not None
        inst.policy.recent_ns = 1
        real_one, real = inst.execute_one, inst.impl.execute

        def broken(*args: Any) -> Any:
            raise RuntimeError("boom")

        if lane == "execute_one":
            inst.execute_one = broken
        else:  # a backend without the one-request lane: its ``execute`` with a list of one
            inst.execute_one = None
            inst.impl.execute = broken  # type: ignore[method-assign]
        fut = m.scheduler.enqueue(_req("pooled", 2.0))
        assert fut.done() and "RuntimeError: boom" in str(fut.exception())
        inst.execute_one, inst.impl.execute = real_one, real  # type: ignore[method-assign]
        r = await core.infer(_req("pooled", 3.0))
        assert r.outputs[0].data.tolist() == [[3.0] * 3]
        assert m.stats.fail.count == 1 and m.stats.success.count == 2
        assert m.has_idle(inst) and m.executing == 0

    run(tmp_path, body)


def test_the_policy_measures_first_then_keeps_fast_runs_inline() -> None:
    p = InlinePolicy()
    assert not p.inline()  # the first batch is measured off the loop
    p.record(50_000)
    assert p.inline() and p.recent_ns == 50_000
    for _ in range(40):  # slow batches push the average over the threshold
        p.record(10 * INLINE_MAX_NS)
    assert INLINE_MAX_NS <= p.recent_ns <= 2 * INLINE_MAX_NS  # one sample counts at most 2x
    inline = [p.inline() for _ in range(PROBE_FIRST)]
    assert inline == [False] * (PROBE_FIRST - 1) + [True]  # then one probe on the loop
    p.record(10_000)  # the probe was fast: its span replaces the average
    assert p.recent_ns == 10_000 and p.inline()


def test_a_policy_keeps_runs_under_its_own_bound_inline() -> None:
    p = InlinePolicy(WAITED_INLINE_MAX_NS)
    assert not p.inline()  # measured first, as with the default bound
    p.record(2 * INLINE_MAX_NS)  # too long for the default bound, not for this one
    assert p.inline()
    for _ in range(40):
        p.record(10 * WAITED_INLINE_MAX_NS)
    # one sample counts at most twice the policy's own bound
    assert WAITED_INLINE_MAX_NS <= p.recent_ns <= 2 * WAITED_INLINE_MAX_NS
    assert [p.inline() for _ in range(PROBE_FIRST)] == [False] * (PROBE_FIRST - 1) + [True]
    p.record(WAITED_INLINE_MAX_NS // 2)  # a probe under the bound brings the batches back
    assert p.recent_ns == WAITED_INLINE_MAX_NS // 2 and p.inline()


def test_slow_probes_back_off() -> None:
    p = InlinePolicy()
    p.record(2 * INLINE_MAX_NS)
    gaps = []
    for _ in range(3):
        n = 1
        while not p.inline():
            n += 1
        gaps.append(n)
        p.record(2 * INLINE_MAX_NS)  # the probe was slow too
    assert gaps == [PROBE_FIRST, 2 * PROBE_FIRST, 4 * PROBE_FIRST]

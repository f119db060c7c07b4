"""A dynamic batch's answers, one per loop turn where the batcher waits (core/runtime/pacing.py).

Real ONNX identity models inside a real InferenceCore. Which loop turn each answer came on is
read from a ticker that counts the loop's turns, never from the clock.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_core

from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.core.runtime.pacing import FIRST_TURN_NS, PROBE_EVERY, AnswerPacing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_identity  # noqa: E402

pytestmark = pytest.mark.timeout(60)

ONE = "instance_group [{count: 1 kind: KIND_CPU}]\n"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    # a 50 ms delay covers 8 answers' turns: paced
    write_identity(
        repo,
        "waits",
        "FP32",
        [-1],
        8,
        ONE + "dynamic_batching { max_queue_delay_microseconds: 50000 }\n",
    )
    # 4 at most: a fifth request is queued when the first four are answered
    write_identity(
        repo,
        "waits4",
        "FP32",
        [-1],
        4,
        ONE + "dynamic_batching { max_queue_delay_microseconds: 50000 }\n",
    )
    # 100 us: shorter than 6 answers' turns, answered in one
    write_identity(
        repo,
        "short",
        "FP32",
        [-1],
        8,
        ONE + "dynamic_batching { max_queue_delay_microseconds: 100 }\n",
    )
    write_identity(repo, "direct", "FP32", [-1], 8, ONE)
    write_identity(repo, "nodelay", "FP32", [-1], 8, ONE + "dynamic_batching { }\n")
    return repo


def run(tmp_path: Path, body: Callable[[InferenceCore], Awaitable[None]]) -> None:
    run_core(_repo(tmp_path), body)


def _req(model: str, value: float) -> InferRequest:
    data = np.full((1, 3), value, dtype=np.float32)
    return InferRequest(model_name=model, inputs=[InferInput("INPUT0", "FP32", (1, 3), data)])


class Ticker:
    """Counts the loop's turns: one callback per turn, re-scheduled from itself."""

    def __init__(self) -> None:
        self.turn = 0
        self._on = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.turn += 1
        if self._on:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._on = False


def _held(core: InferenceCore, name: str) -> Callable[[], None]:
    model = core.repository.get(name)
    taken = [i for i in model.instances if model.take_idle(i)]

    def release() -> None:
        for inst in taken:
            model.return_idle(inst)
        model.scheduler.instance_free()

    return release


async def _batch(
    core: InferenceCore, name: str, n: int
) -> tuple[list[asyncio.Future[Any]], dict[int, int], Ticker]:
    """``n`` requests (values 0..n-1) queued behind the held instance, then released; returns
    their tasks and, filled in as they finish, the loop turn each finished on."""
    release = _held(core, name)
    ticker = Ticker()
    turns: dict[int, int] = {}
    tasks = [asyncio.ensure_future(core.infer(_req(name, float(i)))) for i in range(n)]
    for i, t in enumerate(tasks):
        t.add_done_callback(lambda _, i=i: turns.__setitem__(i, ticker.turn))
    await asyncio.sleep(0.002)
    release()
    return tasks, turns, ticker


def _values(results: list[Any]) -> list[float]:
    return [float(r.outputs[0].data[0, 0]) for r in results]


def test_a_waiting_batch_is_answered_one_per_loop_turn(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        tasks, turns, ticker = await _batch(core, "waits", 6)
        results = await asyncio.gather(*tasks)
        ticker.stop()
        assert _values(results) == [0, 1, 2, 3, 4, 5]
        order = [turns[i] for i in range(6)]
        assert order == sorted(order) and len(set(order)) == 6, order
        stats = core.repository.get("waits").stats
        assert stats.execution_count == 1 and stats.inference_count == 6
        assert core.repository.get("waits").executing == 0

    run(tmp_path, body)


def test_a_short_delay_is_answered_in_one_turn(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        tasks, turns, ticker = await _batch(core, "short", 6)
        results = await asyncio.gather(*tasks)
        ticker.stop()
        assert _values(results) == [0, 1, 2, 3, 4, 5]
        assert len(set(turns.values())) == 1, turns
        assert core.repository.get("short").stats.execution_count == 1

    run(tmp_path, body)


def test_with_a_request_queued_the_batch_is_answered_in_one_turn(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        tasks, turns, ticker = await _batch(core, "waits4", 6)
        results = await asyncio.gather(*tasks)
        ticker.stop()
        assert _values(results) == [0, 1, 2, 3, 4, 5]
        assert len({turns[i] for i in range(4)}) == 1, turns  # two more were queued
        assert turns[5] > turns[4] > turns[3]  # the last two: alone, paced
        assert core.repository.get("waits4").stats.execution_count == 2

    run(tmp_path, body)


def test_a_request_cancelled_while_its_batch_is_answered(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        tasks, _, ticker = await _batch(core, "waits", 6)
        tasks[0].add_done_callback(lambda _: tasks[3].cancel())
        done = await asyncio.gather(*tasks, return_exceptions=True)
        ticker.stop()
        assert isinstance(done[3], asyncio.CancelledError)
        assert _values([d for i, d in enumerate(done) if i != 3]) == [0, 1, 2, 4, 5]
        assert core.repository.get("waits").executing == 0
        assert _values([await core.infer(_req("waits", 7.0))]) == [7.0]  # still serving

    run(tmp_path, body)


@pytest.mark.parametrize("after", [0, 1, 3, 5])
def test_a_drain_waits_for_the_answers_still_to_go(tmp_path: Path, after: int) -> None:
    """The model's drain (an unload's first step) starts after answer ``after`` of 6: it waits
    for the rest (they count as executing), and ends as the last goes out, not at its timeout."""

    async def body(core: InferenceCore) -> None:
        model = core.repository.get("waits")
        tasks, turns, ticker = await _batch(core, "waits", 6)
        drained: list[int] = []

        def drain(_: Any) -> None:
            task = asyncio.ensure_future(model.drain(30.0))
            task.add_done_callback(lambda _: drained.append(ticker.turn))

        tasks[after].add_done_callback(drain)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
        assert _values(results) == [0, 1, 2, 3, 4, 5]
        for _ in range(100):  # a drain that missed them would wait 30 s
            if drained:
                break
            await asyncio.sleep(0.01)
        ticker.stop()
        # the drain ended with the last answer (whose task ends a turn after it), not before
        assert drained and drained[0] >= max(turns.values()) - 1, (drained, turns)
        assert model.executing == 0 and model.scheduler.inflight() == 0

    run(tmp_path, body)


def test_one_request_no_batcher_and_no_delay_are_never_paced(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        assert core.repository.get("direct").pacing is None
        assert core.repository.get("nodelay").pacing is None  # no delay: never paced
        tasks, turns, ticker = await _batch(core, "waits", 1)
        assert _values(await asyncio.gather(*tasks)) == [0]
        ticker.stop()

    run(tmp_path, body)


# -- the decision, alone -----------------------------------------------------------------------
def test_the_decision() -> None:
    p = AnswerPacing(2_000_000)
    assert p.turn_ns == FIRST_TURN_NS
    assert p.paced(16, False)  # 16 x 100 us <= 2 ms
    assert not p.paced(21, False)  # 2.1 ms > 2 ms
    assert not p.paced(16, True)  # something queued
    assert not p.paced(1, False)
    assert not AnswerPacing(0).paced(2, False)
    assert not AnswerPacing(100_000).paced(2, False)  # 2 x 100 us > 100 us


def test_the_estimate_follows_the_turns_but_one_slow_turn_moves_it_little() -> None:
    p = AnswerPacing(2_000_000)
    for _ in range(40):
        p.took(16, 15 * 50_000)  # 50 us a turn
    assert 50_000 <= p.turn_ns < 52_000
    p.took(16, 15 * 5_000_000)  # one batch preempted for 75 ms
    assert p.turn_ns < 80_000  # at most twice the estimate, a quarter of the way
    assert p.paced(16, False)


def test_a_batch_the_estimate_keeps_unpaced_is_paced_now_and_then() -> None:
    p = AnswerPacing(2_000_000)
    for _ in range(40):
        p.took(16, 15 * 400_000)  # a slow stretch: 400 us a turn
    assert not p.paced(16, False)
    decisions = [p.paced(16, False) for _ in range(3 * PROBE_EVERY)]
    assert decisions.count(True) == 3  # one probe in PROBE_EVERY
    for _ in range(40):
        p.took(16, 15 * 50_000)  # the probes measure the machine fast again
    assert p.paced(16, False)

"""The schedulers' wake-up (``scheduling/wakeup.py``) on asyncio's loop and on uvloop.

The wake-up never fires before the time it was armed for, whatever the wait: a short one polls
the clock once per loop turn, a long one is a timerfd on Linux (uvloop's own timers count whole
milliseconds, and fire early as well as late). Without a timerfd (``_LIBC`` gone) the loop's
timer is used, and after ``close`` too. Every assertion is about order and "not before", never
about how soon.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from tritonlite.scheduling import wakeup as wakeup_mod
from tritonlite.scheduling.wakeup import SPIN_NS, Wakeup

pytestmark = pytest.mark.timeout(60)

LOOPS = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Callable[[], Awaitable[None]]], Any]:
    return lambda body: LOOPS[request.param](body())


@pytest.fixture(params=["timerfd", "loop timer"])
def backing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "loop timer":
        monkeypatch.setattr(wakeup_mod, "_LIBC", None)
    elif wakeup_mod._LIBC is None:
        pytest.skip("no timerfd on this platform")
    return str(request.param)


class Recorder:
    def __init__(self) -> None:
        self.at: list[int] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.at.append(time.monotonic_ns())
        self.event.set()

    async def wait(self, timeout: float = 5.0) -> None:
        await asyncio.wait_for(self.event.wait(), timeout)
        self.event.clear()


@pytest.mark.parametrize("delay_us", [0, 50, 100, 300, 499, 600, 800, 1500, 2000])
def test_fires_once_and_never_early(run: Any, backing: str, delay_us: int) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        for _ in range(5):
            when = time.monotonic_ns() + delay_us * 1000
            w.arm(when)
            assert w.armed
            await rec.wait()
            assert not w.armed
            assert rec.at[-1] >= when
        await asyncio.sleep(0.005)
        assert len(rec.at) == 5
        w.close()

    run(body)


def test_a_short_wait_polls_and_makes_no_fd(run: Any) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        when = time.monotonic_ns() + SPIN_NS // 2
        w.arm(when)
        await rec.wait()
        assert rec.at == [rec.at[0]] and rec.at[0] >= when
        assert w._timer is None
        w.close()

    run(body)


def test_a_short_wait_after_a_long_one_disarms_the_fd(run: Any, backing: str) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(time.monotonic_ns() + 30_000_000)  # 30 ms: the timerfd (or the loop's timer)
        when = time.monotonic_ns() + 100_000
        w.arm(when)  # sooner, and short: polled
        await rec.wait()
        assert rec.at[0] >= when
        await asyncio.sleep(0.05)  # past the 30 ms: it does not fire again
        assert len(rec.at) == 1 and not w.armed
        w.arm(time.monotonic_ns() + 100_000)
        w.cancel()  # a cancelled poll stops polling
        await asyncio.sleep(0.01)
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_a_short_wait_replaces_a_long_one_at_once(run: Any, backing: str) -> None:
    """Armed for 10 s, then for 0.1 ms: it fires for the 0.1 ms (``rec.wait`` gives up after
    5 s), once."""

    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(time.monotonic_ns() + 10_000_000_000)
        when = time.monotonic_ns() + 100_000
        w.arm(when)
        await rec.wait()
        assert rec.at[0] >= when and not w.armed
        await asyncio.sleep(0.01)
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_the_earliest_time_wins(run: Any, backing: str) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        now = time.monotonic_ns()
        w.arm(now + 10_000_000_000)  # 10 s
        w.arm(now + 2_000_000)  # sooner: replaces it
        w.arm(now + 5_000_000_000)  # later than the pending one: kept as it is
        await rec.wait()
        assert len(rec.at) == 1 and rec.at[0] >= now + (2_000_000 if backing == "timerfd" else 0)
        assert not w.armed
        await asyncio.sleep(0.02)
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_cancel_and_minus_one_stop_it(run: Any, backing: str) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(time.monotonic_ns() + 1_000_000)
        w.cancel()
        assert not w.armed
        w.arm(time.monotonic_ns() + 1_000_000)
        w.arm(-1)
        assert not w.armed
        await asyncio.sleep(0.02)
        assert rec.at == []
        w.arm(time.monotonic_ns() + 1_000_000)  # usable again
        await rec.wait()
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_a_firing_the_loop_has_not_run_yet_is_dropped_by_cancel(run: Any, backing: str) -> None:
    """Armed in the past and cancelled before the loop turns: the callback never runs, and a
    wake-up armed after it still does."""

    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(1)  # long past: due at once
        time.sleep(0.002)  # the timer has expired; the loop has not polled
        w.cancel()
        await asyncio.sleep(0.01)
        assert rec.at == []
        w.arm(time.monotonic_ns())
        await rec.wait()
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_rearming_sooner_after_a_due_firing_fires_once(run: Any, backing: str) -> None:
    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(time.monotonic_ns() + 1_000)
        time.sleep(0.002)  # due, not yet seen by the loop
        w.arm(time.monotonic_ns() - 1)  # sooner still: replaces it, due as well
        await rec.wait()
        await asyncio.sleep(0.01)
        assert len(rec.at) == 1
        w.close()

    run(body)


def test_the_callback_may_rearm(run: Any, backing: str) -> None:
    """The batcher's pattern: a pass that finds its delay not over arms again from inside."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        times: list[int] = []

        def again() -> None:
            times.append(time.monotonic_ns())
            if len(times) < 20:
                w.arm(time.monotonic_ns() + 200_000)
            else:
                done.set()

        w = Wakeup(loop, again)
        w.arm(time.monotonic_ns() + 200_000)
        await asyncio.wait_for(done.wait(), 10)
        assert len(times) == 20 and not w.armed
        w.close()

    run(body)


def test_close_gives_the_fd_back_and_falls_back_to_the_loop_timer(run: Any) -> None:
    if wakeup_mod._LIBC is None:
        pytest.skip("no timerfd on this platform")

    async def body() -> None:
        rec = Recorder()
        w = Wakeup(asyncio.get_running_loop(), rec)
        w.arm(time.monotonic_ns() + 2 * SPIN_NS)
        await rec.wait()
        fd = w._timer.fd if w._timer is not None else -1
        assert fd >= 0
        w.arm(time.monotonic_ns() + 50_000_000)
        w.close()  # cancels, and closes the fd
        assert not w.armed
        with pytest.raises(OSError):
            os.fstat(fd)
        await asyncio.sleep(0.08)
        assert len(rec.at) == 1
        w.arm(time.monotonic_ns() + 1_000_000)  # a scheduler stopped by health, then rebuilt
        await rec.wait()
        assert len(rec.at) == 2 and w._timer is None
        w.close()
        w.close()

    run(body)


def test_fds_are_made_lazily_and_not_leaked(run: Any) -> None:
    if wakeup_mod._LIBC is None:
        pytest.skip("no timerfd on this platform")

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def body() -> None:
        loop = asyncio.get_running_loop()
        before = fds()
        never = [Wakeup(loop, lambda: None) for _ in range(50)]
        assert fds() == before  # nothing made until armed
        for _ in range(3):
            ws = [Wakeup(loop, lambda: None) for _ in range(50)]
            for w in ws:
                w.arm(time.monotonic_ns() + 1_000_000_000)
            assert fds() == before + 50
            for w in ws:
                w.close()
            assert fds() == before
        for w in never:
            w.close()

    run(body)


class _NoReaders:
    """A loop that cannot watch file descriptors (as asyncio's proactor loop): ``add_reader``
    raises NotImplementedError; everything else is the real loop's."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def add_reader(self, *_: Any) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


def test_a_loop_that_cannot_watch_an_fd_uses_its_own_timer(run: Any) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def body() -> None:
        rec = Recorder()
        before = fds()
        w = Wakeup(_NoReaders(asyncio.get_running_loop()), rec)  # type: ignore[arg-type]
        for delay_ns in (2 * SPIN_NS, 5_000_000):
            when = time.monotonic_ns() + delay_ns
            w.arm(when)
            await rec.wait()
            assert rec.at[-1] >= when
        assert w._timer is None and fds() == before  # the timerfd it tried was closed
        w.close()

    run(body)

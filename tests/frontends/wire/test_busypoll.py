"""BusyPoll (frontends/wire/busypoll.py): after input the loop keeps polling for a window that
adapts to the traffic; the native HTTP/1.1 and gRPC transports touch it when bytes arrive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from test_grpc_native import UNLIMITED, Registry
from test_grpc_native import LoopThread as GrpcLoopThread
from test_http1 import handler, twin_class
from test_http1_support import Conn, LoopThread

from tritonlite.frontends.wire.busypoll import (
    CHECK_NS,
    CONTENDED,
    MAX_WORK,
    MIN_TRIAL_REQUESTS,
    MIN_WINDOW_NS,
    PAYS,
    PHASE_NS,
    SETTLE_PHASES,
    TRIAL_EVERY_NS,
    TRIAL_PHASES,
    BusyPoll,
    cpu_pressure,
)
from tritonlite.frontends.wire.grpc_native import start_grpc_native
from tritonlite.frontends.wire.http1 import start_http_native

LIMIT = 200_000  # ns


class Clock:
    """A monotonic clock that advances ``step`` ns on every read (the poll's slices read it)."""

    def __init__(self, step: int = 1_000) -> None:
        self.now = 1_000_000
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


class Cpu:
    """The loop thread's CPU clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Pressure:
    """A CPU-pressure counter the test moves (µs some task waited for a CPU)."""

    def __init__(self, total: int | None = 0) -> None:
        self.total = total

    def __call__(self) -> int | None:
        return self.total


@pytest.fixture()
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _poller(loop: asyncio.AbstractEventLoop) -> tuple[BusyPoll, Clock]:
    """A poller on a test clock, on an idle machine (no pressure, the loop's CPU unmoved)."""
    clock = Clock()
    return BusyPoll(loop, LIMIT, pressure=Pressure(), clock=clock, cpu=Cpu()), clock


def _settle(loop: asyncio.AbstractEventLoop, bp: BusyPoll) -> None:
    """Run the loop until the poller went back to sleep (bounded)."""

    async def wait() -> None:
        for _ in range(100_000):
            if not bp.spinning:
                return
            await asyncio.sleep(0)
        raise AssertionError("the loop kept polling past its window")

    loop.run_until_complete(wait())


def _sleep_then_touch(
    loop: asyncio.AbstractEventLoop, bp: BusyPoll, clock: Clock, gap: int
) -> None:
    """Input arrives ``gap`` ns after the loop was last busy (it slept meanwhile)."""
    _settle(loop, bp)
    clock.now = bp.since + gap
    bp.touch()


def test_a_positive_limit_is_required(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(ValueError):
        BusyPoll(loop, 0)


def test_input_keeps_the_loop_polling_for_the_window_then_it_sleeps(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock = _poller(loop)
    assert bp.window == LIMIT // 4
    bp.touch()
    assert bp.spinning
    t0 = clock.now
    _settle(loop, bp)
    # it polled, a clock read a turn, until the window (from the first poll) had passed
    assert bp.polls >= bp.window // clock.step - 2
    assert bp.window <= clock.now - t0 <= bp.window + 3 * clock.step
    assert bp.window == LIMIT // 4  # nothing to learn from the first input


def test_input_while_polling_restarts_the_window_and_changes_nothing(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock = _poller(loop)
    bp.touch()
    for _ in range(3):  # a poll turn, then input before the window ends
        loop.run_until_complete(asyncio.sleep(0))
        assert bp.spinning
        bp.touch()
    seen = bp.since
    loop.run_until_complete(asyncio.sleep(0))
    assert bp.since > seen  # the window counts from the latest input
    assert bp.window == LIMIT // 4


def test_input_just_after_the_loop_slept_grows_the_window_up_to_the_limit(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock = _poller(loop)
    bp.touch()
    windows = []
    for _ in range(4):
        _sleep_then_touch(loop, bp, clock, LIMIT - 1_000)  # past the window, within the limit
        windows.append(bp.window)
    assert windows == [LIMIT // 2, LIMIT, LIMIT, LIMIT]


def test_sparse_input_shrinks_the_window_until_the_loop_no_longer_polls(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock = _poller(loop)
    bp.touch()
    polls = []
    for _ in range(6):
        _sleep_then_touch(loop, bp, clock, 10 * LIMIT)
        polls.append(bp.spinning)
    assert bp.window < MIN_WINDOW_NS
    assert polls[0] and not polls[-1]
    # traffic that comes back within the limit turns polling on again
    _sleep_then_touch(loop, bp, clock, LIMIT // 2)
    assert bp.window == LIMIT // 4 and bp.spinning


def _period(clock: Clock, cpu: Cpu, pressure: Pressure, work: float, waited: float) -> None:
    """A check period passes: the loop thread worked ``work`` of it, others waited
    ``waited`` of it for a CPU."""
    clock.now += CHECK_NS
    cpu.now += int(work * CHECK_NS)
    if pressure.total is not None:
        pressure.total += int(waited * CHECK_NS) // 1000


def test_no_polling_while_others_wait_for_a_cpu(loop: asyncio.AbstractEventLoop) -> None:
    clock, cpu, pressure = Clock(), Cpu(), Pressure()
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu)
    _period(clock, cpu, pressure, 0.1, 0.0)  # the first look back only takes the figures
    bp.touch()
    assert bp.spinning and not bp.held_back
    _settle(loop, bp)
    _period(clock, cpu, pressure, 0.1, 2 * CONTENDED)
    bp.touch()
    assert not bp.spinning and bp.held_back
    _period(clock, cpu, pressure, 0.1, CONTENDED / 2)  # a quieter period: it polls again
    bp.touch()
    assert bp.spinning and not bp.held_back
    # pressure that starts while it polls stops the polling at its next look
    _period(clock, cpu, pressure, 0.1, 1.0)
    bp.touch()
    loop.run_until_complete(asyncio.sleep(0))
    assert not bp.spinning and bp.held_back


def test_no_polling_while_the_loop_is_busy_with_work(loop: asyncio.AbstractEventLoop) -> None:
    clock, cpu, pressure = Clock(), Cpu(), Pressure()
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu)
    _period(clock, cpu, pressure, 0.0, 0.0)
    bp.touch()
    loop.run_until_complete(asyncio.sleep(0))
    _period(clock, cpu, pressure, MAX_WORK + 0.1, 0.0)
    bp.touch()
    loop.run_until_complete(asyncio.sleep(0))
    assert not bp.spinning and bp.held_back
    _period(clock, cpu, pressure, MAX_WORK - 0.1, 0.0)
    bp.touch()
    assert bp.spinning and not bp.held_back


def test_loaded_is_the_look_backs_verdict_for_the_period(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock, cpu, pressure = Clock(), Cpu(), Pressure()
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu)
    _period(clock, cpu, pressure, 0.0, 0.0)
    assert not bp.loaded()  # the first look back only takes the figures
    _period(clock, cpu, pressure, MAX_WORK + 0.1, 0.0)
    assert bp.loaded()
    cpu.now += CHECK_NS  # within the period the verdict stands
    assert bp.loaded()
    _period(clock, cpu, pressure, MAX_WORK - 0.2, 0.0)
    assert bp.loaded()  # this period includes the CPU moved above: still over
    _period(clock, cpu, pressure, MAX_WORK - 0.2, 0.0)
    assert not bp.loaded()
    _period(clock, cpu, pressure, 0.1, CONTENDED + 0.1)
    assert bp.loaded()  # others waiting for a CPU count too
    assert not bp.spinning  # reading the verdict does not start polling


def test_time_spent_polling_is_not_counted_as_work(loop: asyncio.AbstractEventLoop) -> None:
    clock, cpu, pressure = Clock(), Cpu(), Pressure()
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu)
    _period(clock, cpu, pressure, 0.0, 0.0)
    bp.touch()
    _settle(loop, bp)
    polled = bp.polled
    assert polled >= bp.window  # the window's polling, measured
    clock.now = bp.checked + CHECK_NS
    cpu.now += polled + int(0.5 * CHECK_NS)  # the loop's CPU: its polling, and half the period
    bp.touch()
    assert bp.spinning and not bp.held_back


def test_without_pressure_figures_it_polls(loop: asyncio.AbstractEventLoop) -> None:
    clock, cpu, pressure = Clock(), Cpu(), Pressure(None)
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu)
    for _ in range(3):
        _period(clock, cpu, pressure, 0.1, 0.0)
        bp.touch()
        assert bp.spinning and not bp.held_back
        _settle(loop, bp)


def test_cpu_pressure_reads_the_kernel_figure_or_none(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert cpu_pressure(str(psi)) == 123456
    psi.write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=123999\n")
    assert cpu_pressure(str(psi)) == 123999  # read anew each time
    psi.write_text("garbage\n")
    assert cpu_pressure(str(psi)) is None
    assert cpu_pressure(str(tmp_path / "absent")) is None


def _wait(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


@pytest.mark.parametrize("twin", ["pure", "compiled"])
def test_native_http_touches_on_input(twin: str) -> None:
    cls = twin_class(twin)
    lt = LoopThread()
    try:
        bp = BusyPoll(lt.loop, LIMIT, pressure=Pressure())
        server = lt.run(start_http_native(handler, "127.0.0.1", 0, protocol_class=cls, busy=bp))
        with Conn(server.port) as c:
            for _ in range(3):
                c.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
                assert c.response().status == 200
        _wait(lambda: bp.polls > 0)
        lt.run(server.stop(1.0))
    finally:
        lt.close()


def test_native_grpc_touches_on_input() -> None:
    lt = GrpcLoopThread()
    registry = Registry()
    try:
        server = lt.run(start_grpc_native(registry.methods(), "127.0.0.1", 0))
        bp = BusyPoll(lt.loop, LIMIT, pressure=Pressure())
        server.busy = bp  # connections made from now on touch it
        with grpc.insecure_channel(f"127.0.0.1:{server.port}", options=UNLIMITED) as ch:
            echo = ch.unary_unary("/test.T/Echo")
            for _ in range(3):
                assert echo(b"abc", timeout=10) == b"abc"
        _wait(lambda: bp.polls > 0)
        lt.run(server.stop(1.0))
    finally:
        lt.close()


class Served:
    """The core's request count (``CoreAPI.arrivals``), moved by the test."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n


def _begin_trial(loop: asyncio.AbstractEventLoop, bp: BusyPoll, clock: Clock) -> None:
    """Input until the poller's first trial has begun, then the loop until it sleeps."""
    bp.touch()
    _settle(loop, bp)
    clock.now = bp.trial_at
    bp.touch()
    assert bp.phase == 0
    _settle(loop, bp)


def _tried(
    loop: asyncio.AbstractEventLoop, on: int, off: int, settling: int | None = None
) -> tuple[BusyPoll, Clock, list]:
    """A poller through one whole trial whose phases with polling serve ``on`` requests and
    those without ``off`` (its settling phases ``settling``, if given); returns it, its clock
    and, per phase, whether it polled."""
    clock, served = Clock(), Served()
    bp = BusyPoll(loop, LIMIT, pressure=Pressure(), clock=clock, cpu=Cpu(), requests=served)
    bp.touch()
    _settle(loop, bp)
    clock.now = bp.trial_at
    polled = []
    for k, allowed in enumerate(TRIAL_PHASES):
        bp.touch()  # the phase begins (the first: the trial)
        polled.append(bp.spinning)
        window = bp.window
        _settle(loop, bp)
        _sleep_then_touch(loop, bp, clock, LIMIT - 1_000)  # would grow the window if it polled
        assert (bp.window > window) == allowed or bp.window == LIMIT
        _settle(loop, bp)
        if k < SETTLE_PHASES and settling is not None:
            served.n += settling
        else:
            served.n += on if allowed else off
        clock.now = bp.phase_start + PHASE_NS
    bp.touch()  # the last phase ends: the verdict
    return bp, clock, polled


def test_a_trial_polls_in_its_polling_phases_only(loop: asyncio.AbstractEventLoop) -> None:
    bp, _, polled = _tried(loop, 1_000, 1_000)
    assert polled == list(TRIAL_PHASES)
    assert bp.phase == -1


def test_a_trial_settles_polling_before_it_counts(loop: asyncio.AbstractEventLoop) -> None:
    # its first phases poll, as the phases that count with polling do
    assert SETTLE_PHASES >= 1 and all(TRIAL_PHASES[:SETTLE_PHASES])
    counted = TRIAL_PHASES[SETTLE_PHASES:]
    assert counted.count(True) == counted.count(False)
    # a settling phase that served far fewer requests (traffic just begun) is not counted
    bp, _, _ = _tried(loop, 1_040, 1_000, settling=MIN_TRIAL_REQUESTS)
    n = counted.count(True)
    off, on = (pytest.approx(n * k / PHASE_NS, rel=1e-3) for k in (1_000, 1_040))
    assert bp.rates == [off, on]
    assert bp.pays and bp.phase == -1


def test_polling_that_serves_fewer_requests_a_second_stops_until_the_next_trial(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock, _ = _tried(loop, 1_000, 1_100)
    assert not bp.pays and bp.phase == -1
    _settle(loop, bp)
    for _ in range(3):
        _sleep_then_touch(loop, bp, clock, LIMIT // 2)
        assert not bp.spinning
    # the next trial polls in its first phase again
    clock.now = bp.trial_at
    bp.touch()
    assert bp.phase == 0 and bp.spinning


def test_a_trial_begins_while_polling_is_off_whatever_window_it_had(
    loop: asyncio.AbstractEventLoop,
) -> None:
    bp, clock, _ = _tried(loop, 1_000, 1_100)
    assert not bp.pays
    bp.window = MIN_WINDOW_NS // 2  # learnt before it was turned off
    clock.now = bp.trial_at
    bp.touch()
    assert bp.phase == 0 and bp.spinning and bp.window == LIMIT // 4


@pytest.mark.parametrize(("on", "verdict"), [(1_040, True), (1_020, False)])
def test_polling_stays_on_where_it_serves_enough_more(
    loop: asyncio.AbstractEventLoop, on: int, verdict: bool
) -> None:
    assert 1_020 < PAYS * 1_000 < 1_040
    bp, clock, _ = _tried(loop, on, 1_000)
    assert bp.pays is verdict
    _sleep_then_touch(loop, bp, clock, LIMIT // 2)
    assert bp.spinning is verdict


def test_a_trial_is_given_up_when_the_traffic_pauses_or_is_too_thin(
    loop: asyncio.AbstractEventLoop,
) -> None:
    for served_in_phase, took in ((1_000, 3 * PHASE_NS), (MIN_TRIAL_REQUESTS - 1, PHASE_NS)):
        clock, served = Clock(), Served()
        bp = BusyPoll(loop, LIMIT, pressure=Pressure(), clock=clock, cpu=Cpu(), requests=served)
        bp.pays = False  # a verdict a given-up trial must leave as it is
        _begin_trial(loop, bp, clock)
        served.n += served_in_phase
        clock.now = bp.phase_start + took
        bp.touch()
        assert bp.phase == -1 and not bp.pays
        assert bp.trial_at == clock.now + PHASE_NS  # tried again soon


def test_a_trial_is_given_up_when_the_loop_becomes_loaded(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock, cpu, pressure, served = Clock(), Cpu(), Pressure(), Served()
    bp = BusyPoll(loop, LIMIT, pressure=pressure, clock=clock, cpu=cpu, requests=served)
    _period(clock, cpu, pressure, 0.0, 0.0)
    _begin_trial(loop, bp, clock)
    served.n += 1_000
    clock.now = bp.phase_start + PHASE_NS
    cpu.now += int((MAX_WORK + 0.1) * (clock.now - bp.checked))
    bp.touch()
    assert bp.phase == -1 and bp.pays and bp.held_back


def test_without_a_request_count_there_is_no_trial(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    bp = BusyPoll(loop, LIMIT, pressure=Pressure(), clock=clock, cpu=Cpu())
    bp.touch()
    _settle(loop, bp)
    clock.now += 100 * TRIAL_EVERY_NS
    bp.touch()
    assert bp.phase == -1 and bp.spinning

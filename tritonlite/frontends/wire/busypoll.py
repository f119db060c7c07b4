"""Busy polling: after input arrives, keep the event loop awake for a while instead of sleeping.

A loop thread that blocks in ``epoll_wait`` between requests pays for the sleep twice: the
kernel's sleep and wake-up, and -- on a virtual machine whose idle vCPU halts -- a CPU whose
caches and branch predictors went cold meanwhile. Measured on a 2-vCPU VM: the same gRPC
request's Python (the wire layer, the core, a Python model) takes 35 µs when the thread ran
just before, 70 µs after a sleep of even 5 µs, and 40 µs after 100 µs of spinning. At
concurrency 1 a request arrives about 100 µs after its response left, so a loop that keeps
polling for that long answers it in half the time.

``BusyPoll.touch`` is called by the native protocols whenever bytes arrive. The loop then keeps
polling (a ready callback keeps the poll's timeout at zero) for up to ``window`` ns after the
last input before it may sleep. Each poll turn yields the CPU once (``sched_yield``: a runnable
thread on this CPU goes first) and releases the GIL twice (the yield, the poll), so model
threads and ONNX Runtime's completion callbacks get it at once. (Turns that yielded for 8 µs
slices held input up to 8 µs: measured, 2-12% less throughput at concurrency 16 over HTTP and
4-7% less at concurrency 1.)

Polling pays only where the loop waits between requests and the machine has a CPU to spare.
Every ``CHECK_NS`` the poller looks back: it holds back (the loop sleeps when idle) while the
loop thread worked more than ``MAX_WORK`` of the period (not counting its polling: input
hardly waits for such a loop -- over HTTP at concurrency 16 it works 96% of the time -- so
polling buys nothing there, and its CPU is what a load generator on the same machine can use),
or while the kernel's CPU pressure (PSI, ``/proc/pressure/cpu``: the time some runnable task
waited for a CPU) grew by more than ``CONTENDED`` of it (ONNX Runtime's threads on a batched
model, a busy neighbour); without PSI only the first rule applies.

The window adapts the way Linux's haltpoll cpuidle governor adapts its poll time: when input
arrives after the loop went to sleep but within ``limit`` ns of the last input, polling that
long would have caught it, so the window doubles (from ``limit / 4``, up to ``limit``); when it
arrives later than ``limit``, the window halves, and below ``MIN_WINDOW_NS`` the loop does
not poll. A steady client keeps the loop awake; sparse traffic costs nothing after a few
requests. ``--busy-poll-us 0`` turns it off.

Whether polling pays at all depends on the host, so the poller tries it (``_trial``). At
concurrency 1 on a 2-vCPU Intel VM polling served 19-26% more requests a second; on a 2-vCPU
AMD EPYC VM the same polling served 5-15% fewer over HTTP (its spinning takes CPU time the
client or the host needed) and about as many over gRPC (bench/RESULTS.md, Issue 31, round 10).
``TRIAL_PHASES`` phases of ``PHASE_NS``, polling allowed and not in turn (ABBA, so that a trend
in the traffic cancels out), count the requests the core took in during each
(``CoreAPI.arrivals``; not the reads, which split a request more often while the loop polls).
The first ``SETTLE_PHASES`` poll and are not counted: the window learns again after a time
without polling, and traffic that has just begun runs slower (on fresh servers the first 250 ms
served up to a tenth fewer requests a second than the next, which, counted in a phase with
polling, weighed against it). A closed-loop client sends as soon as it has its answer, so more
requests a second is a faster round trip. Polling stays on until the next trial only if its
phases served ``PAYS`` times the requests a second of the others; a phase without polling leaves
the window as it was. A trial runs ``FIRST_TRIAL_NS`` after the poller starts, then every
``TRIAL_EVERY_NS``; it is given up, its verdict unchanged, when the traffic pauses or the loop
becomes loaded (it does not poll then anyway) in the middle of it. Polling is on until the first
verdict.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

__all__ = [
    "CHECK_NS",
    "CONTENDED",
    "FIRST_TRIAL_NS",
    "MAX_WORK",
    "MIN_TRIAL_REQUESTS",
    "MIN_WINDOW_NS",
    "PAYS",
    "PHASE_NS",
    "SETTLE_PHASES",
    "TRIAL_EVERY_NS",
    "TRIAL_PHASES",
    "BusyPoll",
    "cpu_pressure",
]

MIN_WINDOW_NS = 10_000  # a shorter window is not worth polling for
CHECK_NS = 50_000_000  # how often the poller looks back (work share, CPU pressure)
CONTENDED = 0.10  # others waited for a CPU this share of the time: do not poll
MAX_WORK = 0.75  # the loop thread worked this share of the time: do not poll
PHASE_NS = 250_000_000  # one phase of a trial (module docstring)
# polling allowed in each phase; the first SETTLE_PHASES are not counted
TRIAL_PHASES = (True, True, False, False, True, True, False, False, True)
SETTLE_PHASES = 1
_COUNTED = len(TRIAL_PHASES) - SETTLE_PHASES
PAYS = 1.03  # polling stays on if its phases served this many times the requests a second
MIN_TRIAL_REQUESTS = 50  # a phase with fewer requests tells nothing: the trial is given up
FIRST_TRIAL_NS = 1_000_000_000  # after the poller starts
TRIAL_EVERY_NS = 30_000_000_000

log = logging.getLogger("tritonlite")


def _none() -> int:
    return 0


_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))


def cpu_pressure(path: str = "/proc/pressure/cpu") -> int | None:
    """Linux's CPU pressure: the total µs some runnable task waited for a CPU, or None where
    the kernel does not report it. Read once per look back (every CHECK_NS at most), so the
    file is opened each time rather than held open for the server's life."""
    try:
        with open(path, "rb") as f:
            data = f.read(256)
        start = data.index(b"total=") + 6
        return int(data[start : data.index(b"\n", start)])
    except (OSError, ValueError):
        return None


class BusyPoll:
    """Keep one event loop polling for up to ``limit_ns`` after the last input.

    Injectable for tests: ``pressure()`` (cumulative µs of CPU pressure, or None:
    ``cpu_pressure``), ``clock()`` (monotonic ns) and ``cpu()`` (the loop thread's CPU ns).
    """

    __slots__ = (
        "loop",
        "limit",
        "start",
        "window",
        "pressure",
        "clock",
        "cpu",
        "checked",
        "waited",
        "cpu_at",
        "polled",
        "last_turn",
        "held_back",
        "spinning",
        "touched",
        "since",
        "polls",
        "pays",
        "phase",
        "phase_start",
        "trial_at",
        "requests",
        "counted",
        "rates",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limit_ns: int,
        pressure: Callable[[], int | None] = cpu_pressure,
        clock: Callable[[], int] = time.monotonic_ns,
        cpu: Callable[[], int] = time.thread_time_ns,
        requests: Callable[[], int] | None = None,
    ) -> None:
        if limit_ns <= 0:
            raise ValueError("BusyPoll needs a positive limit")
        self.loop = loop
        self.limit = limit_ns
        self.start = max(1, limit_ns // 4)
        self.window = self.start
        self.pressure = pressure
        self.clock = clock
        self.cpu = cpu
        self.checked = clock()  # the current check period began (see _held_back)
        self.waited: int | None = None  # the CPU pressure then (the first look back reads it)
        self.cpu_at = -1  # the loop thread's CPU time then (-1: not read on it yet)
        self.polled = 0  # ns spent polling in this period
        self.last_turn = 0
        self.held_back = False
        self.spinning = False
        self.touched = False
        self.since = 0  # when the loop was last known busy (0: not yet)
        self.polls = 0  # loop turns spent polling (the tests read it)
        self.pays = True  # the last trial's verdict: polling is allowed (module docstring)
        self.phase = -1  # the trial's phase (an index of TRIAL_PHASES), -1: no trial running
        self.phase_start = 0
        # the next trial (or phase) begins; without a request count, none: polling stays on
        self.trial_at = self.checked + FIRST_TRIAL_NS if requests is not None else 1 << 62
        self.requests = requests if requests is not None else _none
        self.counted = self.requests()  # the requests counted when the current phase began
        self.rates: list[float] = [0.0, 0.0]  # requests a ns, summed over phases: off, on

    def touch(self) -> None:
        """Bytes arrived: poll for a window after they are handled."""
        if self.spinning:
            self.touched = True
            return
        now = self.clock()
        since = self.since
        if since and self._allowed():  # (a trial's phase without polling teaches nothing)
            gap = now - since
            window = self.window
            if gap > self.limit:
                window //= 2
            elif gap > window:  # polling this long would have caught it
                window = min(self.limit, max(self.start, window * 2))
            self.window = window
        self.since = now
        if now >= self.trial_at:
            self._trial(now)
        if self.window >= MIN_WINDOW_NS and self._allowed() and not self._held_back(now):
            self.spinning = True
            self.touched = True
            self.last_turn = now
            self.loop.call_soon(self._poll)

    def _poll(self) -> None:
        now = self.clock()
        if self.touched:  # input came since the last poll: the window starts again
            self.touched = False
            self.since = now
        else:
            self.polled += now - self.last_turn
            if now - self.since >= self.window:
                self.spinning = False
                return
        self.last_turn = now
        if now >= self.trial_at:
            self._trial(now)
        if not self._allowed() or self._held_back(now):
            self.spinning = False
            return
        self.polls += 1
        _yield()
        self.loop.call_soon(self._poll)

    def _allowed(self) -> bool:
        """Whether polling is allowed now: in a trial, as its phase says; else the verdict."""
        phase = self.phase
        return self.pays if phase < 0 else TRIAL_PHASES[phase]

    def _trial(self, now: int) -> None:
        """The current phase (or the wait for the next trial) is over: begin the trial, or
        take the phase's requests a second and begin the next phase, or give the verdict."""
        phase = self.phase
        count = self.requests()
        served, self.counted = count - self.counted, count
        if phase >= 0:
            took = now - self.phase_start
            if took > 2 * PHASE_NS or served < MIN_TRIAL_REQUESTS:
                return self._give_up(now)  # the traffic paused, or too little of it to tell
            if phase >= SETTLE_PHASES:
                self.rates[TRIAL_PHASES[phase]] += served / took
            phase += 1
            if phase == len(TRIAL_PHASES):
                off, on = self.rates
                pays = on >= PAYS * off
                if pays != self.pays:
                    log.info(
                        "busy polling %s: %.0f requests/s with it, %.0f without",
                        "on" if pays else "off",
                        on * 2e9 / _COUNTED,
                        off * 2e9 / _COUNTED,
                    )
                self.pays = pays
                self.phase = -1
                self.trial_at = now + TRIAL_EVERY_NS
                return
        elif self.pays and self.window < MIN_WINDOW_NS:
            self.trial_at = now + PHASE_NS  # sparse traffic: the loop would not poll anyway
            return
        if self._held_back(now):
            return self._give_up(now)  # a loaded loop does not poll: nothing to compare
        if phase < 0:
            phase = 0
            self.rates = [0.0, 0.0]
            # a window learnt before polling was turned off (it is not learnt since) starts anew
            self.window = max(self.window, self.start)
        self.phase = phase
        self.phase_start = now
        self.trial_at = now + PHASE_NS

    def _give_up(self, now: int) -> None:
        self.phase = -1
        self.trial_at = now + PHASE_NS

    def loaded(self) -> bool:
        """Whether the loop is busy enough that polling holds back (the look back's verdict,
        taken anew every CHECK_NS). The HTTP/1.1 protocol reads it to serve requests that
        arrive together in one go (see ``HttpService.defer``)."""
        return self._held_back(self.clock())

    def _held_back(self, now: int) -> bool:
        """Whether polling would not pay (decided anew every CHECK_NS): the loop worked more
        than MAX_WORK of the last period (input hardly waits for it, and its CPU is the one
        others need), or other tasks waited for a CPU more than CONTENDED of it."""
        elapsed = now - self.checked
        if elapsed < CHECK_NS:
            return self.held_back
        cpu = self.cpu()
        total = self.pressure()
        if self.cpu_at >= 0:
            work = cpu - self.cpu_at - self.polled
            last = self.waited
            waited = (total - last) * 1000 if total is not None and last is not None else 0
            self.held_back = work > MAX_WORK * elapsed or waited > CONTENDED * elapsed
        self.cpu_at = cpu
        self.waited = total
        self.polled = 0
        self.checked = now
        return self.held_back

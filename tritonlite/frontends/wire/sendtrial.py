"""Whether a loaded loop hands its responses to the sending thread: tried on the host, under
the load it has (``SendTrial``; one for the process's HTTP/1.1 and gRPC front ends, which
count the same requests).

The sending thread (``_sender_py``) takes the kernel's part of each response's write off the
loop, to a CPU that is otherwise idle. Whether that pays depends on the host and the load: on
a 2-vCPU Intel VM it served 10-11% more requests a second over HTTP at concurrency 16 and
about as many or more at concurrency 4; a first form of it on a 2-vCPU AMD EPYC VM served
3-8% more at 16 and 8-10% fewer at 4, where the thread's wake-up per serving pass is latency
the few clients wait out (bench/RESULTS.md, Issue 31, rounds 10 and 12). So the loop tries it,
the way busy polling is tried (``busypoll.py``): while it is loaded (only then are there
serving passes to hand over), a second after the load begins and every ``TRIAL_EVERY_NS``
after, ``PHASES`` phases of ``PHASE_NS`` with the thread and without in turn (ABBA, so a trend
in the traffic cancels out; the first ``SETTLE`` are not counted) count the requests the core
took in (``CoreAPI.arrivals``). A closed-loop client sends as soon as it has its answer, so more
requests a second is a faster round trip. The phases' rates spread by 10-20% under load, as
much as the effect, and a verdict taken on the sums flipped every 30 s on one server; so a
verdict changes only when all four pairs of neighbouring phases (one with, one without) agree
and the sums do too: the thread is put out of use when each pair and the whole served more
without it, 3% more in the whole (``KEEP``: the thread costs no CPU the loop does not save, so
a tie keeps it), and back in use when each pair and the whole served more with it. A trial is
given up, the verdict unchanged, when the passes pause (the loop stopped being loaded) or the
traffic thins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = [
    "FIRST_TRIAL_NS",
    "KEEP",
    "MIN_REQUESTS",
    "PHASES",
    "PHASE_NS",
    "SETTLE",
    "TRIAL_EVERY_NS",
    "SendTrial",
]

PHASE_NS = 250_000_000
# the thread in use in each phase; the first SETTLE are not counted
PHASES = (True, True, False, False, True, True, False, False, True)
SETTLE = 1
KEEP = 0.97  # the thread stays in use unless its phases served 3% fewer requests a second
MIN_REQUESTS = 50  # a phase with fewer tells nothing: the trial is given up
FIRST_TRIAL_NS = 1_000_000_000  # after the first loaded pass
TRIAL_EVERY_NS = 30_000_000_000

log = logging.getLogger("tritonlite")


class SendTrial:
    """The verdict, and the trial that renews it; ``use()`` is asked at each serving pass's
    end. Injectable for tests: ``clock()`` (monotonic ns)."""

    __slots__ = ("requests", "clock", "on", "phase", "phase_start", "trial_at", "counted", "rates")

    def __init__(
        self, requests: Callable[[], int], clock: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self.requests = requests
        self.clock = clock
        self.on = True  # the last trial's verdict (in use until the first)
        self.phase = -1  # the trial's phase (an index of PHASES); -1: no trial running
        self.phase_start = 0
        self.trial_at = 0  # 0: set at the first pass
        self.counted = 0  # the requests counted when the current phase began
        self.rates: list[float] = []  # requests a ns of each counted phase

    def use(self) -> bool:
        """Whether this serving pass's responses go to the thread."""
        now = self.clock()
        if now >= self.trial_at:
            self._step(now)
        phase = self.phase
        return self.on if phase < 0 else PHASES[phase]

    def _step(self, now: int) -> None:
        """The wait for a trial, or a phase, is over: begin the trial, or count the phase and
        begin the next, or give the verdict."""
        if self.trial_at == 0:  # the first loaded pass
            self.trial_at = now + FIRST_TRIAL_NS
            return
        phase = self.phase
        count = self.requests()
        served, self.counted = count - self.counted, count
        if phase >= 0:
            took = now - self.phase_start
            if took > 2 * PHASE_NS or served < MIN_REQUESTS:  # passes paused, or thin traffic
                self.phase = -1
                self.trial_at = now + PHASE_NS
                return
            if phase >= SETTLE:
                self.rates.append(served / took)
            phase += 1
            if phase == len(PHASES):
                on = sum(r for r, u in zip(self.rates, PHASES[SETTLE:]) if u)
                off = sum(self.rates) - on
                verdict = self._verdict(on, off)
                if verdict != self.on:
                    counted = len(PHASES) - SETTLE
                    log.info(
                        "sending thread %s: %.0f requests/s with it, %.0f without",
                        "on" if verdict else "off",
                        on * 2e9 / counted,
                        off * 2e9 / counted,
                    )
                self.on = verdict
                self.phase = -1
                self.trial_at = now + TRIAL_EVERY_NS
                return
        else:
            phase = 0
            self.rates = []
        self.phase = phase
        self.phase_start = now
        self.trial_at = now + PHASE_NS

    def _verdict(self, on: float, off: float) -> bool:
        """The trial's verdict from its counted phases, whose rates with and without the
        thread sum to ``on`` and ``off`` (module docstring)."""
        used = PHASES[SETTLE:]
        rates = self.rates
        pairs = [
            (rates[i], rates[i + 1]) if used[i] else (rates[i + 1], rates[i])
            for i in range(0, len(rates), 2)
        ]  # (with, without)
        if self.on:
            return not (on < KEEP * off and all(w < wo for w, wo in pairs))
        return on > off and all(w > wo for w, wo in pairs)

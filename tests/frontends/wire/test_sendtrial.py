"""SendTrial (frontends/wire/sendtrial.py): a loaded HTTP loop tries the sending thread on and
off in turn and keeps it unless it serves 3% fewer requests a second; a trial whose
passes pause or whose traffic thins is given up, the verdict unchanged."""

from __future__ import annotations

import logging

import pytest

from tritonlite.frontends.wire.sendtrial import (
    FIRST_TRIAL_NS,
    MIN_REQUESTS,
    PHASE_NS,
    PHASES,
    SETTLE,
    TRIAL_EVERY_NS,
    SendTrial,
)


class Traffic:
    """A clock and a request count the test moves: ``rate(on)`` requests a phase."""

    def __init__(self) -> None:
        self.now = 1_000_000_000
        self.count = 0

    def clock(self) -> int:
        return self.now

    def requests(self) -> int:
        return self.count


def _begin(t: Traffic) -> SendTrial:
    trial = SendTrial(t.requests, clock=t.clock)
    assert trial.use()  # in use until a verdict; the first pass sets the first trial's time
    t.now += FIRST_TRIAL_NS - 1
    assert trial.use() and trial.phase == -1  # not yet
    t.now += 1
    assert trial.use() and trial.phase == 0  # the settling phase: the thread in use
    return trial


def _run_phases(
    t: Traffic, trial: SendTrial, served: dict[bool, int], took: int = PHASE_NS
) -> list[bool]:
    """Pass through the rest of a trial, ``served[in use]`` requests a phase; what each phase
    used."""
    used = [trial.use()]
    for _ in range(len(PHASES)):
        t.count += served[used[-1]]
        t.now += took
        used.append(trial.use())
    return used


@pytest.mark.parametrize(
    ("with_it", "without", "verdict"),
    [(1000, 900, True), (1000, 1000, True), (980, 1000, True), (960, 1000, False)],
)
def test_a_trial_keeps_the_thread_unless_it_serves_three_percent_fewer(
    with_it: int, without: int, verdict: bool, caplog: pytest.LogCaptureFixture
) -> None:
    t = Traffic()
    trial = _begin(t)
    with caplog.at_level(logging.INFO, logger="tritonlite"):
        used = _run_phases(t, trial, {True: with_it, False: without})
    assert used[: len(PHASES)] == list(PHASES)  # ABBA after the settling phase
    assert trial.phase == -1 and trial.on is verdict
    assert used[-1] is verdict
    assert ("sending thread off" in caplog.text) is (not verdict)
    assert trial.trial_at == t.now + TRIAL_EVERY_NS


def test_the_settling_phase_is_not_counted() -> None:
    t = Traffic()
    trial = _begin(t)
    # a slow settling phase (traffic that has just become loaded) must not weigh against it
    t.count += MIN_REQUESTS
    t.now += PHASE_NS
    trial.use()
    for phase in PHASES[SETTLE:]:
        assert trial.use() is phase
        t.count += 1000
        t.now += PHASE_NS
        trial.use()
    assert trial.on and trial.rates[0] == trial.rates[1]


def test_a_verdict_off_is_tried_again_and_can_turn_on() -> None:
    t = Traffic()
    trial = _begin(t)
    _run_phases(t, trial, {True: 800, False: 1000})
    assert not trial.on and not trial.use()
    t.now += TRIAL_EVERY_NS
    assert trial.use() and trial.phase == 0  # the next trial settles with the thread
    _run_phases(t, trial, {True: 1100, False: 1000})
    assert trial.on and trial.use()


@pytest.mark.parametrize("cause", ["pause", "thin"])
def test_a_trial_whose_passes_pause_or_thin_is_given_up(cause: str) -> None:
    t = Traffic()
    trial = _begin(t)
    trial.on = False  # a verdict the given-up trial must leave as it is
    t.count += 1000
    t.now += PHASE_NS
    trial.use()
    if cause == "pause":  # the loop stopped being loaded: no pass for a while
        t.count += 1000
        t.now += 3 * PHASE_NS
    else:
        t.count += MIN_REQUESTS - 1
        t.now += PHASE_NS
    assert not trial.use()
    assert trial.phase == -1 and not trial.on
    assert trial.trial_at == t.now + PHASE_NS  # tried again soon


def _run_counts(t: Traffic, trial: SendTrial, counts: list[int]) -> None:
    """The settling phase, then the counted phases serving ``counts`` requests each."""
    t.count += 1000
    t.now += PHASE_NS
    trial.use()
    for n in counts:
        t.count += n
        t.now += PHASE_NS
        trial.use()
    assert trial.phase == -1


# counted phases: with, without, without, with, with, without, without, with
@pytest.mark.parametrize(
    ("counts", "was", "verdict"),
    [
        # every pair and the whole served more without it: out of use
        ([900, 1000, 1000, 900, 900, 1000, 1000, 900], True, False),
        # 6% less in the whole, but one pair the other way: the verdict stands
        ([900, 1000, 1000, 900, 1010, 1000, 1000, 950], True, True),
        # every pair the other way, but by 1% in the whole: within KEEP, the verdict stands
        ([995, 1000, 1000, 985, 990, 1000, 1000, 990], True, True),
        # off: every pair and the whole with more: back in use
        ([1010, 1000, 1000, 1020, 1010, 1000, 1000, 1001], False, True),
        # off: more in the whole, but one pair the other way: stays off
        ([1200, 1000, 1000, 990, 1200, 1000, 1000, 1200], False, False),
    ],
)
def test_a_verdict_changes_only_when_every_pair_of_phases_agrees(
    counts: list[int], was: bool, verdict: bool
) -> None:
    t = Traffic()
    trial = _begin(t)
    trial.on = was
    _run_counts(t, trial, counts)
    assert trial.on is verdict

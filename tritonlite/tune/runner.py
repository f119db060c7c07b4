"""The search: baseline, one stage per setting with short probes, then full sweeps of the best few.

``Tuner.run`` loads each candidate through the repository API (a ``load`` with its config as the
``config`` override), probes it at the highest concurrency of the range, and keeps a candidate
only when it beats the best so far by more than the noise margin. When the stages are done (or
the time left is what the final sweeps need), the top few candidates and the baseline are swept
over the concurrency range with longer windows, in two rounds (the second in reverse order); the
best score there wins, and the baseline stays unless something beats it by the margin without
losing throughput at a lighter load. Progress goes to ``log`` (stderr) as it runs.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from tritonlite.contracts.config_json import render_json
from tritonlite.tune import space
from tritonlite.tune.load import Sample, merge
from tritonlite.tune.server import Control

Measure = Callable[[int, float], Sample]  # (concurrency, window seconds) -> a sample


@dataclass(frozen=True)
class Settings:
    """How long and how hard to measure (seconds unless named otherwise)."""

    concurrency: tuple[int, int] = (1, 64)
    latency_budget_us: float | None = None
    max_minutes: float = 10.0
    probe_s: float = 2.0
    sweep_s: float = 4.0
    margin: float = 0.05
    finalists: int = 3
    # windows at the lightest load before a candidate can be refused there: one short window
    # is within the noise of a shared machine (3x between neighbouring windows was seen)
    light_rounds: int = 3


@dataclass
class Trial:
    """One candidate's measurements: ``samples`` (a probe, or a sweep's points)."""

    index: int
    stage: str
    candidate: space.Candidate
    kind: str = "probe"  # probe | sweep
    samples: list[Sample] = field(default_factory=list)
    status: str = "ok"
    score: float = 0.0
    load_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Result:
    baseline: Trial
    chosen: Trial
    trials: list[Trial]
    reason: str
    elapsed_s: float
    stopped_early: bool


def _cost(score: float, kept: float, heavy: int) -> str:
    """What refusing a candidate gives up at the heavy point, in words (for the report)."""
    ratio = f", {score / kept:.2f}x given up" if kept > 0 else ""
    return f"cost at concurrency {heavy}: it scored {score:,.0f} vs {kept:,.0f} kept{ratio}"


def config_json(cfg: Any) -> str:
    return json.dumps(render_json(cfg))


class Tuner:
    """Runs the search against one model on one server.

    ``base`` is the model's config as written (a ``pb.ModelConfig``); every candidate is
    ``space.apply(base, candidate)``. ``measure`` drives the load at the configured model.
    """

    def __init__(
        self,
        control: Control,
        model: str,
        base: Any,
        ctx: space.Context,
        settings: Settings,
        measure: Measure,
        log: TextIO,
    ) -> None:
        self.control, self.model, self.base, self.ctx = control, model, base, ctx
        self.settings, self.measure, self.log = settings, measure, log
        self.trials: list[Trial] = []
        self.start = time.monotonic()
        self.deadline = self.start + settings.max_minutes * 60
        self.best: Trial | None = None  # the best when the current stage started
        self.leader: Trial | None = None  # the best so far (for the progress line)
        self._load_s = 1.0
        self._base_low: Sample | None = None  # the original at the lowest concurrency

    # -- bookkeeping ---------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def _progress(self, trial: Trial) -> None:
        frac = min(1.0, self.elapsed() / (self.settings.max_minutes * 60))
        bar = "#" * int(frac * 20) + "." * (20 - int(frac * 20))
        s = trial.samples[-1] if trial.samples else None
        what = (
            f"{s.throughput:,.0f} infer/s p99 {s.p99_us / 1000:.2f} ms"
            if s is not None and s.ok
            else trial.status
        )
        best = self.leader
        best_text = f"{best.candidate.label()} ({best.score:,.0f})" if best else "-"
        print(
            f"[{bar}] {self.elapsed():5.0f}s #{trial.index} {trial.stage}: "
            f"{trial.candidate.label()} -> {what} | best: {best_text}",
            file=self.log,
            flush=True,
        )

    def _time_left(self) -> float:
        return self.deadline - time.monotonic()

    def _probe_cost(self) -> float:
        return self._load_s + self.settings.probe_s + 1.0

    def _final_cost(self, points: int) -> float:
        return (self._load_s + (self.settings.sweep_s + 1.0) * points) * (
            self.settings.finalists + 1
        )

    # -- measuring -----------------------------------------------------------------------------
    def _load(self, trial: Trial) -> bool:
        t0 = time.monotonic()
        err = self.control.load(self.model, config_json(space.apply(self.base, trial.candidate)))
        trial.load_s = time.monotonic() - t0
        self._load_s = 0.5 * self._load_s + 0.5 * trial.load_s
        if err:
            trial.status = f"load failed: {err}"
            return False
        return True

    def _sample(self, trial: Trial, concurrency: int, window_s: float) -> Sample:
        s = self.measure(concurrency, window_s)
        if not s.ok and not s.errors:  # no request failed, the window was not usable: again
            s = self.measure(concurrency, window_s)
        trial.samples.append(s)
        if not s.ok:
            trial.status = f"failed: {s.error or 'no request completed'}"
        return s

    def probe(self, stage: str, cand: space.Candidate) -> Trial:
        trial = Trial(len(self.trials) + 1, stage, cand)
        self.trials.append(trial)
        if self._load(trial):
            s = self._sample(trial, self.settings.concurrency[1], self.settings.probe_s)
            if s.ok:
                trial.score = space.score(s.throughput, s.p99_us, self.settings.latency_budget_us)
        self._progress(trial)
        return trial

    def _sweep(self, trial: Trial, points: list[int]) -> None:
        """One round of a final sweep: load the candidate, measure each point."""
        if self._load(trial):
            for c in points:
                if not self._sample(trial, c, self.settings.sweep_s).ok:
                    break
        self._progress(trial)

    def _settle(self, trial: Trial) -> None:
        """Merge a sweep's rounds per concurrency (``load.merge``) and score it."""
        if trial.ok:
            trial.samples = [
                merge([s for s in trial.samples if s.concurrency == c])
                for c in sorted({s.concurrency for s in trial.samples})
            ]
        budget = self.settings.latency_budget_us
        trial.score = (
            max(
                (space.score(s.throughput, s.p99_us, budget) for s in trial.samples if s.ok),
                default=0.0,
            )
            if trial.ok
            else 0.0
        )

    def _confirm(self, trial: Trial) -> None:
        """A second probe of a candidate about to win; its score becomes the mean of both
        (one lucky window must not set the bar every later candidate is measured against)."""
        s = self._sample(trial, self.settings.concurrency[1], self.settings.probe_s)
        second = space.score(s.throughput, s.p99_us, self.settings.latency_budget_us)
        trial.score = (trial.score + second) / 2 if s.ok else 0.0

    def _light_sample(self, trial: Trial, concurrency: int) -> Sample | None:
        """``light_rounds`` windows at ``concurrency`` as one sample, its throughput the
        median window's (one slow or lucky window does not decide); None if one failed."""
        rounds: list[Sample] = []
        for _ in range(max(1, self.settings.light_rounds)):
            s = self._sample(trial, concurrency, self.settings.probe_s)
            if not s.ok:
                return None
            rounds.append(s)
        out = merge(rounds)
        out.throughput = statistics.median(s.throughput for s in rounds)
        return out

    def _light_load_ok(self, trial: Trial, kept: Trial) -> bool:
        """``space.acceptable`` at the lowest concurrency (when the range has one below),
        decided on ``_light_sample``; a refusal says what it cost at the highest concurrency,
        where ``trial`` beat ``kept``, the best that stands."""
        lo, hi = self.settings.concurrency
        if lo == hi or self._base_low is None:
            return True
        s = self._light_sample(trial, lo)
        if s is None:
            return False
        base = self._base_low
        ok = space.acceptable(
            s.throughput, s.p99_us, base.throughput, self.settings.latency_budget_us
        )
        if not ok:
            windows = ", ".join(f"{x.throughput:,.0f}" for x in trial.samples[-self._rounds() :])
            trial.status = (
                f"rejected: at concurrency {lo} {s.throughput:,.0f} infer/s (median of "
                f"{windows}), p99 {s.p99_us / 1000:.2f} ms (original {base.throughput:,.0f} "
                f"infer/s); {_cost(trial.score, kept.score, hi)}"
            )
        return ok

    def _rounds(self) -> int:
        return max(1, self.settings.light_rounds)

    # -- the search ----------------------------------------------------------------------------
    def run(self) -> Result:
        points = space.concurrency_points(*self.settings.concurrency)
        lo, hi = self.settings.concurrency
        baseline_cand = space.from_config(self.base)
        baseline = self.probe("baseline", baseline_cand)
        if not baseline.ok:
            hint = (
                " (tune loads configs through the repository API: run the server with "
                "--model-control-mode explicit)"
                if baseline.status.startswith("load")
                else ""
            )
            raise RuntimeError(f"the original config does not serve: {baseline.status}{hint}")
        self._confirm(baseline)
        if lo < hi:
            self._base_low = self._light_sample(baseline, lo)
        self.best = self.leader = baseline
        stopped = False
        for name, stage in space.STAGES:
            if stopped:
                break
            ladder = space.Ladder(self.settings.margin)
            stage_best = self.best
            for cand in stage(self.best.candidate, self.ctx):
                if self._time_left() < self._probe_cost() + self._final_cost(len(points)):
                    stopped = True
                    break
                trial = self.probe(name, cand)
                if trial.ok and space.better(trial.score, stage_best.score, self.settings.margin):
                    self._confirm(trial)
                    if (
                        trial.ok
                        and space.better(trial.score, stage_best.score, self.settings.margin)
                        and self._light_load_ok(trial, stage_best)
                    ):
                        stage_best = self.leader = trial
                if ladder.add(trial.score):
                    break
            self.best = stage_best
        return self._final(baseline, points, stopped)

    def _finalists(self, baseline: Trial) -> list[space.Candidate]:
        assert self.best is not None
        ranked = sorted(
            (
                t
                for t in self.trials
                if t.ok and t.kind == "probe" and (t.stage == "baseline" or len(t.samples) > 1)
            ),
            key=lambda t: t.score,
            reverse=True,
        )
        out = [self.best.candidate]
        for t in ranked:
            if len(out) >= self.settings.finalists:
                break
            if t.candidate not in out and t.candidate != baseline.candidate:
                out.append(t.candidate)
        return out

    def _check_points(self, trial: Trial, base: Trial) -> None:
        """A finalist that regresses at some concurrency (``space.acceptable``) is out; the
        refusal says what it cost at the highest concurrency (its score vs the original's)."""
        ref = {s.concurrency: s for s in base.samples if s.ok}
        for s in trial.samples:
            b = ref.get(s.concurrency)
            if (
                trial.ok
                and b
                and not space.acceptable(
                    s.throughput, s.p99_us, b.throughput, self.settings.latency_budget_us
                )
            ):
                trial.status = (
                    f"rejected: at concurrency {s.concurrency} "
                    f"{s.throughput:,.0f} infer/s vs the original's "
                    f"{b.throughput:,.0f} (mean of the sweep's rounds); "
                    f"{_cost(trial.score, base.score, self.settings.concurrency[1])}"
                )

    def _describe(self, trial: Trial) -> str:
        """The point a trial's score comes from, in words."""
        budget = self.settings.latency_budget_us
        ok = [x for x in trial.samples if x.ok]
        if not ok:
            return trial.status
        s = max(ok, key=lambda x: space.score(x.throughput, x.p99_us, budget))
        fits = (
            ""
            if budget is None
            else (" within the budget" if s.p99_us <= budget else " over the budget")
        )
        return (
            f"{s.throughput:,.0f} infer/s at concurrency {s.concurrency}, p99 "
            f"{s.p99_us / 1000:.1f} ms{fits}"
        )

    def _final(self, baseline: Trial, points: list[int], stopped: bool) -> Result:
        """Sweep the original and the finalists in two rounds, the second in reverse order
        (A B C, C B A), so a slow spell of a shared machine weighs on every one alike."""
        budget = self.settings.latency_budget_us
        one = self._load_s + (self.settings.sweep_s + 1.0) * len(points)
        sweeps: list[Trial] = []
        for cand in [baseline.candidate, *self._finalists(baseline)]:
            if any(t.candidate == cand for t in sweeps):
                continue
            if sweeps and self._time_left() < one:
                stopped = True
                break
            trial = Trial(len(self.trials) + 1, "final", cand, kind="sweep")
            self.trials.append(trial)
            sweeps.append(trial)
            self._sweep(trial, points)
        if self._time_left() >= one * len(sweeps):
            for trial in reversed(sweeps):
                if trial.ok:
                    self._sweep(trial, points)
        for trial in sweeps:
            self._settle(trial)
        base_sweep = sweeps[0]
        note = ""
        if not base_sweep.ok:  # compare with the original's probes instead
            note = f" (the original's final sweep {base_sweep.status}; its probes stand in)"
            base_sweep = baseline
        for t in sweeps[1:]:
            self._check_points(t, base_sweep)
        top = max((t for t in sweeps if t.ok), key=lambda t: t.score, default=base_sweep)
        if top is base_sweep or not space.better(top.score, base_sweep.score, self.settings.margin):
            chosen = base_sweep
            if top is base_sweep:
                reason = "no candidate beat the original configuration"
            else:
                reason = (
                    f"the best candidate ({top.candidate.label()}, {top.score:,.0f} "
                    f"infer/s) is within the {self.settings.margin:.0%} noise margin of "
                    f"the original ({base_sweep.score:,.0f} infer/s)"
                )
            reason += "; the original configuration is kept"
        else:
            chosen = top
            gain = (
                f"{top.score / base_sweep.score:.2f}x"
                if base_sweep.score
                else "where the original scored 0; vs"
            )
            reason = (
                f"the highest score, {top.score:,.0f} ({self._describe(top)}), "
                f"{gain} the original's {base_sweep.score:,.0f} "
                f"({self._describe(base_sweep)})"
            )
        reason += note
        if base_sweep.score == 0 and budget is not None:
            reason += " (the original has no point within the latency budget)"
        # Leave the server serving what was chosen (and check once more that it loads).
        err = self.control.load(self.model, config_json(space.apply(self.base, chosen.candidate)))
        if err:
            raise RuntimeError(f"the chosen config no longer loads: {err}")
        return Result(baseline, chosen, self.trials, reason, self.elapsed(), stopped)

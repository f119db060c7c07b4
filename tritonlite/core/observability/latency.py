"""Per-request latency observations behind the opt-in summaries and histograms (PROTOCOL.md §5).

A ``LatencyRecorder`` hangs off a ``ModelStats`` only when ``--metrics-config
summary_latencies=true`` or ``histogram_latencies=true``; with both off nothing here is
created and the statistics path does no extra work. Observations arrive on the event loop
thread (completions are delivered there) and the metrics collector reads them on the same
thread, so no locks.

Values are microseconds, truncated like the ``_duration_us`` counters (``ns // 1000``).

Summaries: the quantiles of the observations of the last ``SUMMARY_MAX_AGE_S`` seconds (60 s,
prometheus-cpp's default max age), at most the newest ``SUMMARY_WINDOW`` of them, computed
exactly at scrape time; the configured error margins are accepted for Triton compatibility and
are trivially met. ``_count`` and ``_sum`` are cumulative, as in Prometheus.

Histograms (a tritonlite addition): cumulative bucket counts with configurable upper bounds, so
Prometheus can aggregate them across replicas (``histogram_quantile(sum by (le) (rate(...))``)
— which summaries cannot do. Under memory pressure (core/pressure.py) histogram observations
are shed, one count in ``tritonlite_shed_total{feature="histogram"}`` per request; summaries
(Triton's) keep observing.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence

import numpy as np

from tritonlite.core.observability.pressure import NO_PRESSURE, MemoryPressure

SUMMARY_MAX_AGE_S = 60.0
SUMMARY_WINDOW = 8192

# Series names; the metrics collector maps them to Triton's family names.
REQUEST, QUEUE, COMPUTE_INPUT, COMPUTE_INFER, COMPUTE_OUTPUT, CACHE_HIT, CACHE_MISS = (
    "request",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
SUMMARY_SERIES = (
    REQUEST,
    QUEUE,
    COMPUTE_INPUT,
    COMPUTE_INFER,
    COMPUTE_OUTPUT,
    CACHE_HIT,
    CACHE_MISS,
)
HISTOGRAM_SERIES = (REQUEST, QUEUE, COMPUTE_INPUT, COMPUTE_INFER, COMPUTE_OUTPUT)


class Window:
    """A summary's recent observations: a ring of (value, monotonic time) pairs."""

    __slots__ = ("_values", "_stamps", "_next", "_filled", "count", "sum")

    def __init__(self, size: int = SUMMARY_WINDOW) -> None:
        self._values = array("d", bytes(8 * size))
        self._stamps = array("d", bytes(8 * size))
        self._next = 0
        self._filled = 0
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, now: float) -> None:
        i = self._next
        self._values[i] = value
        self._stamps[i] = now
        i += 1
        if i == len(self._values):
            i = 0
        self._next = i
        if self._filled < len(self._values):
            self._filled += 1
        self.count += 1
        self.sum += value

    def quantiles(self, qs: Sequence[float], now: float | None = None) -> list[float]:
        """The ``qs`` quantiles of the observations younger than the max age; NaN when none."""
        now = time.monotonic() if now is None else now
        n = self._filled
        values = np.frombuffer(self._values, dtype=np.float64)[:n]
        stamps = np.frombuffer(self._stamps, dtype=np.float64)[:n]
        recent = values[stamps >= now - SUMMARY_MAX_AGE_S]
        if recent.size == 0:
            return [float("nan")] * len(qs)
        return [float(v) for v in np.quantile(recent, list(qs), method="inverted_cdf")]


# The upper bounds (µs) of a histogram unless --metrics-config histogram_buckets_us says others.
DEFAULT_HISTOGRAM_BUCKETS_US: tuple[float, ...] = (
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    25000.0,
    50000.0,
    100000.0,
    250000.0,
    500000.0,
    1000000.0,
)


class Histogram:
    """Cumulative-bucket histogram; ``bounds`` are the finite upper bounds (``le``), ascending."""

    __slots__ = ("bounds", "_counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last bucket is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[int]:
        """Counts of observations <= each bound, then the total (the +Inf bucket)."""
        out, running = [], 0
        for c in self._counts:
            running += c
            out.append(running)
        return out


class LatencyRecorder:
    """One model version's summaries and/or histograms (``ModelStats.latency``)."""

    __slots__ = ("summaries", "histograms", "_s", "_h", "_pressure")

    def __init__(
        self,
        summaries: bool,
        histogram_bounds_us: Sequence[float] | None,
        pressure: MemoryPressure = NO_PRESSURE,
    ) -> None:
        self.summaries: dict[str, Window] | None = (
            {name: Window() for name in SUMMARY_SERIES} if summaries else None
        )
        self.histograms: dict[str, Histogram] | None = (
            {name: Histogram(histogram_bounds_us) for name in HISTOGRAM_SERIES}
            if histogram_bounds_us is not None
            else None
        )
        # Series in the order ``request`` receives them, for the hot path.
        self._s = None if self.summaries is None else [self.summaries[n] for n in HISTOGRAM_SERIES]
        self._h = (
            None if self.histograms is None else [self.histograms[n] for n in HISTOGRAM_SERIES]
        )
        self._pressure = pressure

    def request(self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None) -> None:
        """A successful request: its duration, queue time and (if it executed) compute spans."""
        values = [total_ns // 1000, queue_ns // 1000]
        if compute is not None:
            values += [compute[0] // 1000, compute[1] // 1000, compute[2] // 1000]
        if self._s is not None:
            now = time.monotonic()
            for w, v in zip(self._s, values):
                w.observe(v, now)
        if self._h is not None:
            if self._pressure.active:
                self._pressure.shed_histograms += 1
            else:
                for h, v in zip(self._h, values):
                    h.observe(v)

    def cache_hit(self, ns: int) -> None:
        if self.summaries is not None:
            self.summaries[CACHE_HIT].observe(ns // 1000, time.monotonic())

    def cache_miss(self, ns: int) -> None:
        if self.summaries is not None:
            self.summaries[CACHE_MISS].observe(ns // 1000, time.monotonic())


def recorder_factory(
    summaries: bool,
    bounds: tuple[float, ...] | None,
    pressure: MemoryPressure = NO_PRESSURE,
) -> Callable[[], LatencyRecorder] | None:
    """Each loaded version's latency observer (the repository calls it per version): None
    unless ``summaries`` or histogram ``bounds`` are asked for (and metrics are served);
    ``pressure`` sheds histograms."""
    if not summaries and bounds is None:
        return None
    return lambda: LatencyRecorder(summaries, bounds, pressure)

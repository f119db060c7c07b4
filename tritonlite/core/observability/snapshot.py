"""The metrics read-model: what the core publishes for ``/metrics``, as plain rows.

The core collects, the front end renders (as in Triton): ``InferenceCore.metrics_snapshot``
walks the repository once per scrape and hands back a ``MetricsSnapshot`` built here from the
statistics counters, latency recorders, instance health, the A/B routers' counters, memory
pressure and the CPU/GPU samplers. Nothing in a snapshot refers back to a live object, so the
front end (``frontends/metrics.py``) formats it without knowing the core's internals, and a
snapshot read twice says the same thing.

Units are the statistics' own: durations in ns (the front end turns them into µs), latency
summaries and histograms in µs (as recorded). The latency series keys are ``latency``'s:
"request", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit",
"cache_miss" (no cache series in histograms).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonlite.core.observability.latency import Histogram, LatencyRecorder
from tritonlite.core.observability.sysinfo import GpuReading

FAILURE_REASONS = ("BACKEND", "CANCELED", "OTHER", "REJECTED")


@dataclass(frozen=True, slots=True)
class Quantiles:
    """One latency series' sliding-window summary: (quantile, value) pairs, count and sum."""

    values: tuple[tuple[float, float], ...]
    count: int
    sum: float


@dataclass(frozen=True, slots=True)
class Buckets:
    """One histogram: finite upper bounds, then cumulative counts (one more: +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    sum: float


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One ready model version's counters (ns), pending requests and latency recorders."""

    name: str
    version: str
    success: int
    success_ns: int
    inference_count: int
    execution_count: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    failures: Mapping[str, int]  # every FAILURE_REASONS key
    pending: int  # queued, not yet executing
    cache_on: bool  # the server's cache is on and the model uses it
    cache_hits: int
    cache_misses: int
    cache_hit_ns: int
    cache_miss_ns: int
    summaries: Mapping[str, Quantiles] = field(default_factory=dict)  # when recorded
    histograms: Mapping[str, Buckets] = field(default_factory=dict)  # when recorded


@dataclass(frozen=True, slots=True)
class InstanceRow:
    """One instance of a loaded (READY) version, healthy or not."""

    instance: str
    model: str
    version: str
    healthy: bool
    failovers: int
    rebuilds: int


@dataclass(frozen=True, slots=True)
class SplitRow:
    """One variant of an A/B router: requests sent to it, and its answer times (µs)."""

    model: str
    variant: str
    requests: int
    durations: Buckets


@dataclass(frozen=True, slots=True)
class CpuRow:
    utilization: float
    memory_total: int
    memory_used: int


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything ``/metrics`` shows, read at one moment."""

    models: tuple[ModelRow, ...]
    instances: tuple[InstanceRow, ...]
    splits: tuple[SplitRow, ...]
    pressure_active: bool
    shed_cache_inserts: int
    shed_histograms: int
    gpus: tuple[GpuReading, ...] = ()
    cpu: CpuRow | None = None


def buckets(h: Histogram) -> Buckets:
    return Buckets(h.bounds, tuple(h.cumulative()), h.count, h.sum)


def model_row(m: Any, cache_on: bool, quantiles: Sequence[float], now: float) -> ModelRow:
    """The row of ``m`` (a core Model: ``stats``, ``scheduler``, ``executing``)."""
    s = m.stats
    rec = s.latency
    summaries: dict[str, Quantiles] = {}
    histograms: dict[str, Buckets] = {}
    if isinstance(rec, LatencyRecorder):
        if rec.summaries is not None:
            for series, w in rec.summaries.items():
                values = tuple(zip(quantiles, w.quantiles(list(quantiles), now)))
                summaries[series] = Quantiles(values, w.count, w.sum)
        if rec.histograms is not None:
            histograms = {series: buckets(h) for series, h in rec.histograms.items()}
    return ModelRow(
        name=m.name,
        version=m.version_str,
        success=s.success.count,
        success_ns=s.success.ns,
        inference_count=s.inference_count,
        execution_count=s.execution_count,
        queue_ns=s.queue.ns,
        compute_input_ns=s.compute_input.ns,
        compute_infer_ns=s.compute_infer.ns,
        compute_output_ns=s.compute_output.ns,
        failures={r: s.failures_by_reason.get(r, 0) for r in FAILURE_REASONS},
        pending=max(0, m.scheduler.inflight() - m.executing),
        cache_on=cache_on,
        cache_hits=s.cache_hit.count,
        cache_misses=s.cache_miss.count,
        cache_hit_ns=s.cache_hit.ns,
        cache_miss_ns=s.cache_miss.ns,
        summaries=summaries,
        histograms=histograms,
    )


def instance_rows(loaded: Iterable[Any]) -> list[InstanceRow]:
    """The instances of ``loaded`` (core Models, in the order to show them)."""
    return [
        InstanceRow(
            inst.spec.name, m.name, m.version_str, inst.healthy, inst.failovers, inst.rebuilds
        )
        for m in loaded
        for inst in m.instances
    ]


def split_rows(routers: Iterable[Any]) -> list[SplitRow]:
    """Per-variant rows of the A/B routers among ready models (``metrics``: SplitMetrics,
    shared by a router's versions, so shown once)."""
    rows: list[SplitRow] = []
    seen: set[int] = set()
    for m in routers:
        metrics = m.metrics
        if id(metrics) in seen:
            continue
        seen.add(id(metrics))
        for variant in sorted(set(m.variants.names) | set(metrics.requests)):
            h = metrics.durations.get(variant) or Histogram(metrics.bounds)
            rows.append(SplitRow(m.name, variant, metrics.requests.get(variant, 0), buckets(h)))
    return rows


def snapshot(
    ready: Sequence[Any],
    loaded: Iterable[Any],
    routers: Iterable[Any],
    *,
    cache_on: Any,
    quantiles: Sequence[float],
    pressure: Any,
    samplers: Any = None,
) -> MetricsSnapshot:
    """The snapshot of ``ready`` models (statistics), ``loaded`` ones (instance health) and
    the ``routers`` among them; ``cache_on(model)`` says whether its cache rows count."""
    now = time.monotonic()
    cpu = samplers.cpu if samplers is not None else None
    gpu = samplers.gpu if samplers is not None else None
    return MetricsSnapshot(
        models=tuple(model_row(m, bool(cache_on(m)), quantiles, now) for m in ready),
        instances=tuple(instance_rows(loaded)),
        splits=tuple(split_rows(routers)),
        pressure_active=bool(pressure.active),
        shed_cache_inserts=pressure.shed_cache_inserts,
        shed_histograms=pressure.shed_histograms,
        gpus=tuple(gpu.readings) if gpu is not None else (),
        cpu=CpuRow(cpu.utilization, cpu.memory_total, cpu.memory_used) if cpu is not None else None,
    )

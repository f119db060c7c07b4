"""``/metrics`` on its own port: Triton's nv_* families, read from the statistics counters.

The collector reads ModelStats at scrape time, so metrics and the statistics extension can
never disagree (ns in stats, µs here, ``ns // 1000``). What is exposed follows the options:

* per model: success/failure/count/exec counters and the pending gauge, always; the
  ``_duration_us`` latency counters unless ``--metrics-config counter_latencies=false``; the
  ``nv_cache_*_per_model`` counters for models whose response cache is on (config and server),
  which Triton also ties to ``counter_latencies``; summaries with ``summary_latencies=true``
  (as in Triton, no request summary for a model with the cache on); tritonlite's
  ``nv_inference_*_histogram_us`` with ``histogram_latencies=true`` (core/latency.py);
* CPU gauges unless ``--allow-cpu-metrics=false``; ``nv_gpu_*`` gauges and
  ``nv_energy_consumption`` (gpu_uuid label only) when ``--allow-gpu-metrics`` and NVML sees a
  GPU. Both refresh every ``--metrics-interval-ms`` (core/sysinfo.py);
* tritonlite's instance health (Triton has none): ``tritonlite_instance_healthy`` (gauge, 1 in
  rotation / 0 out), ``tritonlite_instance_failovers`` and ``tritonlite_instance_rebuilds``
  (counters), labelled by instance, model and version (core/health.py);
* tritonlite's memory pressure (core/pressure.py): ``tritonlite_memory_pressure`` (gauge, 1
  while under pressure) and ``tritonlite_shed_total{feature="cache_insert"|"histogram"}``
  (counter: cache inserts and histogram observations skipped under pressure), always present;
* tritonlite's ``tritonlite_rejected_requests_total{protocol, reason}`` (counter: requests
  refused for what the client sent, frontends/base/rejects.py), always present.

Values are plain decimals (perf_analyzer's regexes reject exponents).

Over 500 lines, one module: every family of Triton's /metrics (with its name, help text and label
rules, which perf_analyzer and dashboards match on) is built by one collector from the statistics,
so the text format is decided in one place.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tritonlite.core.api import CoreAPI, MetricsSnapshot, ModelRow
from tritonlite.frontends import split_metrics
from tritonlite.frontends.base.http_call import Dispatch, HttpRequest, HttpResponse
from tritonlite.frontends.base.http_errors import error_body
from tritonlite.frontends.base.rejects import REJECTS
from tritonlite.options import MetricsConfig

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("tritonlite")

_BASE_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
    ),
)
_LATENCY_COUNTERS = (
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached "
        "requests)",
    ),
)
_CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model"),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model"),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds"),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    ),
)
# the snapshot's latency series (core/observability/snapshot.py)
_REQUEST, _QUEUE, _INPUT, _INFER, _OUTPUT = (
    "request",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
)
_CACHE_HIT, _CACHE_MISS = "cache_hit", "cache_miss"
_CACHE_SERIES = (_CACHE_HIT, _CACHE_MISS)

_SUMMARIES = (
    (
        _REQUEST,
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        _QUEUE,
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        _INPUT,
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        _INFER,
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        _OUTPUT,
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached "
        "requests)",
    ),
    (
        _CACHE_HIT,
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit duration per model, in microseconds",
    ),
    (
        _CACHE_MISS,
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss (insert+lookup) duration per model, in microseconds",
    ),
)
_HISTOGRAMS = (
    (
        _REQUEST,
        "nv_inference_request_histogram_us",
        "Histogram of inference request duration in microseconds (includes cached requests)",
    ),
    (
        _QUEUE,
        "nv_inference_queue_histogram_us",
        "Histogram of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        _INPUT,
        "nv_inference_compute_input_histogram_us",
        "Histogram of compute input duration in microseconds (does not include cached requests)",
    ),
    (
        _INFER,
        "nv_inference_compute_infer_histogram_us",
        "Histogram of compute inference duration in microseconds (does not include cached "
        "requests)",
    ),
    (
        _OUTPUT,
        "nv_inference_compute_output_histogram_us",
        "Histogram of compute output duration in microseconds (does not include cached requests)",
    ),
)
_GPU_GAUGES = (
    ("utilization", "nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)"),
    ("memory_total", "nv_gpu_memory_total_bytes", "GPU total memory, in bytes"),
    ("memory_used", "nv_gpu_memory_used_bytes", "GPU used memory, in bytes"),
    ("power_usage", "nv_gpu_power_usage", "GPU power usage in watts"),
    ("power_limit", "nv_gpu_power_limit", "GPU power management limit in watts"),
)


def _strip_total(m: Metric) -> Metric:
    # prometheus-client appends _total to counter samples; Triton's names carry no suffix.
    m.samples = [s._replace(name=s.name.removesuffix("_total")) for s in m.samples]
    return m


def _value(v: float) -> str:
    # Triton prints counts as plain integers (perf_analyzer's regexes reject 1e+09 forms).
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f.is_integer():
        return str(int(f))
    r = repr(f)
    return r if "e" not in r else (f"{f:.12f}".rstrip("0").rstrip(".") or "0")


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: list[Metric]) -> bytes:
    """Prometheus text exposition with Triton's family names and integer formatting.

    Counters are named as their samples are: Triton's, passed through ``_strip_total``, carry
    no ``_total``; tritonlite's own Prometheus-style ones (``tritonlite_shed_total``) keep it.
    """
    lines: list[str] = []
    for fam in families:
        name = fam.name
        if fam.type == "counter" and fam.samples and fam.samples[0].name == name + "_total":
            name += "_total"
        lines.append(f"# HELP {name} {fam.documentation}")
        lines.append(f"# TYPE {name} {fam.type}")
        for s in fam.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
            lines.append(
                f"{s.name}{{{labels}}} {_value(s.value)}"
                if labels
                else f"{s.name} {_value(s.value)}"
            )
    return ("\n".join(lines) + "\n").encode()


class _Collector:
    """Renders one ``MetricsSnapshot`` (the core's read-model) as Triton's families."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], config: MetricsConfig) -> None:
        self._snapshot = snapshot
        self._mc = config

    def collect(self) -> Iterator[Metric]:
        mc = self._mc
        snap = self._snapshot()
        models = snap.models
        cached = any(m.cache_on for m in models)
        counters: list[tuple[str, str]] = list(_BASE_COUNTERS)
        if mc.counter_latencies:
            counters += _LATENCY_COUNTERS
        fams: dict[str, Any] = {
            name: CounterMetricFamily(name, doc, labels=["model", "version"])
            for name, doc in counters
        }
        failure = CounterMetricFamily(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            labels=["model", "reason", "version"],
        )
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            labels=["model", "version"],
        )
        cache_fams = [
            CounterMetricFamily(name, doc, labels=["model", "version"])
            for name, doc in _CACHE_COUNTERS
        ]
        for m in models:
            lbl = [m.name, m.version]
            fams["nv_inference_request_success"].add_metric(lbl, m.success)
            fams["nv_inference_count"].add_metric(lbl, m.inference_count)
            fams["nv_inference_exec_count"].add_metric(lbl, m.execution_count)
            if mc.counter_latencies:
                for (name, _), ns in zip(
                    _LATENCY_COUNTERS,
                    (
                        m.success_ns,
                        m.queue_ns,
                        m.compute_input_ns,
                        m.compute_infer_ns,
                        m.compute_output_ns,
                    ),
                ):
                    fams[name].add_metric(lbl, ns // 1000)
                if m.cache_on:
                    for fam, v in zip(
                        cache_fams,
                        (
                            m.cache_hits,
                            m.cache_misses,
                            m.cache_hit_ns // 1000,
                            m.cache_miss_ns // 1000,
                        ),
                    ):
                        fam.add_metric(lbl, v)
            for reason, count in m.failures.items():
                failure.add_metric([m.name, reason, m.version], count)
            pending.add_metric(lbl, m.pending)
        yield _strip_total(fams["nv_inference_request_success"])
        yield _strip_total(failure)
        yield _strip_total(fams["nv_inference_count"])
        yield _strip_total(fams["nv_inference_exec_count"])
        yield pending
        if mc.counter_latencies:
            for name, _ in _LATENCY_COUNTERS:
                yield _strip_total(fams[name])
            if cached:
                for fam in cache_fams:
                    yield _strip_total(fam)
        if mc.summary_latencies:
            yield from self._summaries(models)
        if mc.histogram_latencies:
            yield from self._histograms(models)
        yield from self._instance_health(snap)
        yield from self._memory_pressure(snap)
        yield from REJECTS.collect()
        yield from split_metrics.collect(snap.splits)
        yield from self._system(snap)

    @staticmethod
    def _summaries(models: tuple[ModelRow, ...]) -> Iterator[Metric]:
        for series, name, doc in _SUMMARIES:
            fam = Metric(name, doc, "summary")
            for m in models:
                w = m.summaries.get(series)
                if w is None:
                    continue
                if (series == _REQUEST and m.cache_on) or (
                    series in _CACHE_SERIES and not m.cache_on
                ):
                    continue
                labels = {"model": m.name, "version": m.version}
                for q, v in w.values:
                    fam.add_sample(name, {**labels, "quantile": repr(q)}, v)
                fam.add_sample(name + "_count", labels, w.count)
                fam.add_sample(name + "_sum", labels, w.sum)
            if fam.samples:
                yield fam

    @staticmethod
    def _histograms(models: tuple[ModelRow, ...]) -> Iterator[Metric]:
        for series, name, doc in _HISTOGRAMS:
            fam = Metric(name, doc, "histogram")
            for m in models:
                h = m.histograms.get(series)
                if h is None:
                    continue
                labels = {"model": m.name, "version": m.version}
                for bound, c in zip((*h.bounds, math.inf), h.cumulative):
                    fam.add_sample(name + "_bucket", {**labels, "le": _value(bound)}, c)
                fam.add_sample(name + "_count", labels, h.count)
                fam.add_sample(name + "_sum", labels, h.sum)
            if fam.samples:
                yield fam

    @staticmethod
    def _instance_health(snap: MetricsSnapshot) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "tritonlite_instance_healthy",
            "1 while a model instance is in rotation, 0 while it is out (failed, being rebuilt)",
            labels=["instance", "model", "version"],
        )
        failovers = CounterMetricFamily(
            "tritonlite_instance_failovers",
            "Times a model instance was taken out of rotation (fatal error, execution timeout, "
            "failed health probe)",
            labels=["instance", "model", "version"],
        )
        rebuilds = CounterMetricFamily(
            "tritonlite_instance_rebuilds",
            "Times a model instance was rebuilt and put back in rotation",
            labels=["instance", "model", "version"],
        )
        for inst in snap.instances:
            lbl = [inst.instance, inst.model, inst.version]
            healthy.add_metric(lbl, 1 if inst.healthy else 0)
            failovers.add_metric(lbl, inst.failovers)
            rebuilds.add_metric(lbl, inst.rebuilds)
        yield healthy
        yield _strip_total(failovers)
        yield _strip_total(rebuilds)

    @staticmethod
    def _memory_pressure(snap: MetricsSnapshot) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "tritonlite_memory_pressure",
            "1 while the memory available to the server is at or below "
            "--memory-pressure-threshold of its limit (optional features are shed), else 0",
        )
        gauge.add_metric([], 1 if snap.pressure_active else 0)
        yield gauge
        shed = CounterMetricFamily(
            "tritonlite_shed",
            "Optional work skipped under memory pressure: response cache "
            "inserts, and requests whose latency histogram observations were dropped",
            labels=["feature"],
        )
        shed.add_metric(["cache_insert"], snap.shed_cache_inserts)
        shed.add_metric(["histogram"], snap.shed_histograms)
        yield shed

    @staticmethod
    def _system(snap: MetricsSnapshot) -> Iterator[Metric]:
        if snap.gpus:
            for attr, name, doc in _GPU_GAUGES:
                g = GaugeMetricFamily(name, doc, labels=["gpu_uuid"])
                for r in snap.gpus:
                    v = getattr(r, attr)
                    if v is not None:
                        g.add_metric([r.uuid], v)
                yield g
            e = CounterMetricFamily(
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started",
                labels=["gpu_uuid"],
            )
            for r in snap.gpus:
                e.add_metric([r.uuid], r.energy)
            yield _strip_total(e)
        cpu = snap.cpu
        if cpu is not None:
            for name, doc, v in (
                ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", cpu.utilization),
                ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", cpu.memory_total),
                ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", cpu.memory_used),
            ):
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], v)
                yield g


def make_metrics_dispatch(core: CoreAPI, config: MetricsConfig) -> Dispatch:
    """The metrics service as an HTTP ``Dispatch`` (``frontends/base/http_call.py``): ``GET
    /metrics`` renders every family from ``core.metrics_snapshot()``; another path is 404,
    another method 405 (Triton's answers). The caller starts and stops the core's CPU/GPU
    sampling with the service (``core.start_sampling`` / ``stop_sampling``).
    """
    collector = _Collector(core.metrics_snapshot, config)

    async def dispatch(request: HttpRequest) -> HttpResponse:
        if request.path.rstrip("/") != "/metrics":
            return HttpResponse(404, [error_body("Not Found")], "application/json")
        if request.method != "GET":
            return HttpResponse(405, [error_body("Method Not Allowed")], "application/json")
        return HttpResponse(200, [render(list(collector.collect()))], "text/plain; charset=utf-8")

    return dispatch


def make_metrics_app(core: CoreAPI, config: MetricsConfig) -> web.Application:
    """The metrics service as an aiohttp app (``--frontend=aio``); its startup starts the core's
    CPU/GPU sampling, its cleanup stops it."""
    from aiohttp import web

    dispatch = make_metrics_dispatch(core, config)

    async def metrics(request: web.Request) -> web.StreamResponse:
        resp = await dispatch(request)  # type: ignore[arg-type]  # reads .path and .method
        assert isinstance(resp, HttpResponse) and resp.content_type is not None
        return web.Response(
            status=resp.status,
            body=b"".join(resp.body),
            headers={"Content-Type": resp.content_type},
        )

    async def start(_app: web.Application) -> None:
        await core.start_sampling()

    async def stop(_app: web.Application) -> None:
        await core.stop_sampling()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", metrics)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app

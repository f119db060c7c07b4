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

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tritonlite.core.core import InferenceCore
from tritonlite.core.models import lifecycle as lc
from tritonlite.core.observability import latency as lat
from tritonlite.core.observability.pressure import NO_PRESSURE, MemoryPressure
from tritonlite.core.observability.sysinfo import CpuSampler, GpuSampler, load_nvml
from tritonlite.frontends import split_metrics
from tritonlite.frontends.base.http_call import Dispatch, HttpRequest, HttpResponse
from tritonlite.frontends.base.http_errors import error_body
from tritonlite.frontends.base.rejects import REJECTS

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
_SUMMARIES = (
    (
        lat.REQUEST,
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        lat.QUEUE,
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        lat.COMPUTE_INPUT,
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        lat.COMPUTE_INFER,
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        lat.COMPUTE_OUTPUT,
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached "
        "requests)",
    ),
    (
        lat.CACHE_HIT,
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit duration per model, in microseconds",
    ),
    (
        lat.CACHE_MISS,
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss (insert+lookup) duration per model, in microseconds",
    ),
)
_HISTOGRAMS = (
    (
        lat.REQUEST,
        "nv_inference_request_histogram_us",
        "Histogram of inference request duration in microseconds (includes cached requests)",
    ),
    (
        lat.QUEUE,
        "nv_inference_queue_histogram_us",
        "Histogram of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        lat.COMPUTE_INPUT,
        "nv_inference_compute_input_histogram_us",
        "Histogram of compute input duration in microseconds (does not include cached requests)",
    ),
    (
        lat.COMPUTE_INFER,
        "nv_inference_compute_infer_histogram_us",
        "Histogram of compute inference duration in microseconds (does not include cached "
        "requests)",
    ),
    (
        lat.COMPUTE_OUTPUT,
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
_FAILURE_REASONS = ("BACKEND", "CANCELED", "OTHER", "REJECTED")


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


class Samplers:
    """The CPU/GPU samplers and the task that refreshes them every metrics interval."""

    def __init__(self, cpu: bool, gpu: bool, interval_ms: int) -> None:
        self._want_cpu, self._want_gpu = cpu, gpu
        self.interval_s = interval_ms / 1000.0
        self.cpu: CpuSampler | None = None
        self.gpu: GpuSampler | None = None
        self._task: asyncio.Task[None] | None = None

    def _open(self) -> None:
        if self._want_cpu:
            cpu = CpuSampler()
            self.cpu = cpu if cpu.available else None
            if self.cpu is not None:
                log.info("Collecting CPU metrics")
        if self._want_gpu:
            nvml = load_nvml()
            if nvml is not None:
                gpu = GpuSampler(nvml)
                if gpu.readings:
                    self.gpu = gpu
                else:
                    gpu.close()

    def _sample(self) -> None:
        if self.cpu is not None:
            self.cpu.sample()
        if self.gpu is not None:
            self.gpu.sample()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await asyncio.to_thread(self._sample)
            except Exception:  # a reading failed; the next interval tries again
                log.exception("polling CPU/GPU metrics")

    async def start(self, _app: object = None) -> None:
        if not (self._want_cpu or self._want_gpu):
            return
        await asyncio.to_thread(self._open)
        if self.cpu is not None or self.gpu is not None:
            self._task = asyncio.create_task(self._poll())

    async def stop(self, _app: object = None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None


class _Collector:
    def __init__(
        self, core: InferenceCore, samplers: Samplers, pressure: MemoryPressure = NO_PRESSURE
    ) -> None:
        self._core = core
        self._samplers = samplers
        self._pressure = pressure

    def collect(self) -> Iterator[Metric]:
        core = self._core
        mc = core.options.metrics_config
        models = core.repository.ready_models()
        cached = {id(m) for m in models if core.cache is not None and m.response_cache}
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
            s, lbl = m.stats, [m.name, m.version_str]
            fams["nv_inference_request_success"].add_metric(lbl, s.success.count)
            fams["nv_inference_count"].add_metric(lbl, s.inference_count)
            fams["nv_inference_exec_count"].add_metric(lbl, s.execution_count)
            if mc.counter_latencies:
                for (name, _), d in zip(
                    _LATENCY_COUNTERS,
                    (s.success, s.queue, s.compute_input, s.compute_infer, s.compute_output),
                ):
                    fams[name].add_metric(lbl, d.ns // 1000)
                if id(m) in cached:
                    for fam, v in zip(
                        cache_fams,
                        (
                            s.cache_hit.count,
                            s.cache_miss.count,
                            s.cache_hit.ns // 1000,
                            s.cache_miss.ns // 1000,
                        ),
                    ):
                        fam.add_metric(lbl, v)
            for reason in _FAILURE_REASONS:
                failure.add_metric(
                    [m.name, reason, m.version_str], s.failures_by_reason.get(reason, 0)
                )
            pending.add_metric(lbl, max(0, m.scheduler.inflight() - m.executing))
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
            yield from self._summaries(models, cached, mc.summary_quantiles)
        if mc.histogram_latencies:
            yield from self._histograms(models)
        yield from self._instance_health()
        yield from self._memory_pressure()
        yield from REJECTS.collect()
        yield from split_metrics.collect(models)
        yield from self._system()

    @staticmethod
    def _summaries(
        models: list[Any], cached: set[int], quantiles: tuple[tuple[float, float], ...]
    ) -> Iterator[Metric]:
        qs = [q for q, _ in quantiles]
        now = time.monotonic()
        for series, name, doc in _SUMMARIES:
            fam = Metric(name, doc, "summary")
            for m in models:
                rec = m.stats.latency
                if not isinstance(rec, lat.LatencyRecorder) or rec.summaries is None:
                    continue
                on = id(m) in cached
                if (series == lat.REQUEST and on) or (
                    series in (lat.CACHE_HIT, lat.CACHE_MISS) and not on
                ):
                    continue
                w = rec.summaries[series]
                labels = {"model": m.name, "version": m.version_str}
                for q, v in zip(qs, w.quantiles(qs, now)):
                    fam.add_sample(name, {**labels, "quantile": repr(q)}, v)
                fam.add_sample(name + "_count", labels, w.count)
                fam.add_sample(name + "_sum", labels, w.sum)
            if fam.samples:
                yield fam

    @staticmethod
    def _histograms(models: list[Any]) -> Iterator[Metric]:
        for series, name, doc in _HISTOGRAMS:
            fam = Metric(name, doc, "histogram")
            for m in models:
                rec = m.stats.latency
                if not isinstance(rec, lat.LatencyRecorder) or rec.histograms is None:
                    continue
                h = rec.histograms[series]
                labels = {"model": m.name, "version": m.version_str}
                cum = h.cumulative()
                for bound, c in zip((*h.bounds, math.inf), cum):
                    fam.add_sample(name + "_bucket", {**labels, "le": _value(bound)}, c)
                fam.add_sample(name + "_count", labels, h.count)
                fam.add_sample(name + "_sum", labels, h.sum)
            if fam.samples:
                yield fam

    def _instance_health(self) -> Iterator[Metric]:
        # Every loaded version, ready or not: a model whose instances are all down is exactly
        # the one these must show.
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
        for entry in sorted(self._core.repository.models.values(), key=lambda e: e.name):
            for _, st in sorted(entry.versions.items()):
                m = st.model
                if m is None or st.state != lc.READY:
                    continue
                for inst in m.instances:
                    lbl = [inst.spec.name, m.name, m.version_str]
                    healthy.add_metric(lbl, 1 if inst.healthy else 0)
                    failovers.add_metric(lbl, inst.failovers)
                    rebuilds.add_metric(lbl, inst.rebuilds)
        yield healthy
        yield _strip_total(failovers)
        yield _strip_total(rebuilds)

    def _memory_pressure(self) -> Iterator[Metric]:
        p = self._pressure
        gauge = GaugeMetricFamily(
            "tritonlite_memory_pressure",
            "1 while the memory available to the server is at or below "
            "--memory-pressure-threshold of its limit (optional features are shed), else 0",
        )
        gauge.add_metric([], 1 if p.active else 0)
        yield gauge
        shed = CounterMetricFamily(
            "tritonlite_shed",
            "Optional work skipped under memory pressure: response cache "
            "inserts, and requests whose latency histogram observations were dropped",
            labels=["feature"],
        )
        shed.add_metric(["cache_insert"], p.shed_cache_inserts)
        shed.add_metric(["histogram"], p.shed_histograms)
        yield shed

    def _system(self) -> Iterator[Metric]:
        gpu = self._samplers.gpu
        if gpu is not None:
            readings = gpu.readings
            for attr, name, doc in _GPU_GAUGES:
                g = GaugeMetricFamily(name, doc, labels=["gpu_uuid"])
                for r in readings:
                    v = getattr(r, attr)
                    if v is not None:
                        g.add_metric([r.uuid], v)
                yield g
            e = CounterMetricFamily(
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started",
                labels=["gpu_uuid"],
            )
            for r in readings:
                e.add_metric([r.uuid], r.energy)
            yield _strip_total(e)
        cpu = self._samplers.cpu
        if cpu is not None:
            for name, doc, v in (
                ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", cpu.utilization),
                ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", cpu.memory_total),
                ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", cpu.memory_used),
            ):
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], v)
                yield g


def make_metrics_dispatch(
    core: InferenceCore, samplers: Samplers, pressure: MemoryPressure = NO_PRESSURE
) -> Dispatch:
    """The metrics service as an HTTP ``Dispatch`` (``frontends/base/http_call.py``): ``GET
    /metrics`` renders every family; another path is 404, another method 405 (Triton's
    answers). The caller starts and stops ``samplers`` with the service.

    ``pressure`` is the server's memory-pressure monitor (its sampling belongs to the server,
    which sheds with it whether or not metrics are served); the service only reads it.
    """
    collector = _Collector(core, samplers, pressure)

    async def dispatch(request: HttpRequest) -> HttpResponse:
        if request.path.rstrip("/") != "/metrics":
            return HttpResponse(404, [error_body("Not Found")], "application/json")
        if request.method != "GET":
            return HttpResponse(405, [error_body("Method Not Allowed")], "application/json")
        return HttpResponse(200, [render(list(collector.collect()))], "text/plain; charset=utf-8")

    return dispatch


def make_samplers(core: InferenceCore) -> Samplers:
    """The CPU/GPU samplers the options ask for (not started)."""
    opts = core.options
    return Samplers(opts.allow_cpu_metrics, opts.allow_gpu_metrics, opts.metrics_interval_ms)


def make_metrics_app(
    core: InferenceCore, samplers: Samplers | None = None, pressure: MemoryPressure = NO_PRESSURE
) -> web.Application:
    """The metrics service as an aiohttp app (``--frontend=aio``); its startup opens the
    CPU/GPU samplers and starts polling, its cleanup stops them."""
    from aiohttp import web

    if samplers is None:
        samplers = make_samplers(core)
    dispatch = make_metrics_dispatch(core, samplers, pressure)

    async def metrics(request: web.Request) -> web.StreamResponse:
        resp = await dispatch(request)  # type: ignore[arg-type]  # reads .path and .method
        assert isinstance(resp, HttpResponse) and resp.content_type is not None
        return web.Response(
            status=resp.status,
            body=b"".join(resp.body),
            headers={"Content-Type": resp.content_type},
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", metrics)
    app.on_startup.append(samplers.start)
    app.on_cleanup.append(samplers.stop)
    return app

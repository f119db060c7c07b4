"""``/metrics`` on its own port: Triton's nv_* families, read from the statistics counters.

The collector reads ModelStats at scrape time, so metrics and the statistics extension can
never disagree (ns in stats, µs here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tritonlite.core.core import InferenceCore
from tritonlite.frontends.http.errors import error_response

_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)"),
)


def _strip_total(m: Metric) -> Metric:
    # prometheus-client appends _total to counter samples; Triton's names carry no suffix.
    m.samples = [s._replace(name=s.name.removesuffix("_total")) for s in m.samples]
    return m


def _value(v: float) -> str:
    # Triton prints counts as plain integers (perf_analyzer's regexes reject 1e+09 forms).
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: list[Metric]) -> bytes:
    """Prometheus text exposition with Triton's family names and integer formatting."""
    lines: list[str] = []
    for fam in families:
        name = fam.name.removesuffix("_total") if fam.type == "counter" else fam.name
        lines.append(f"# HELP {name} {fam.documentation}")
        lines.append(f"# TYPE {name} {fam.type}")
        for s in fam.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
            sample = s.name.removesuffix("_total") if fam.type == "counter" else s.name
            lines.append(f"{sample}{{{labels}}} {_value(s.value)}" if labels
                         else f"{sample} {_value(s.value)}")
    return ("\n".join(lines) + "\n").encode()


class _Collector:
    def __init__(self, core: InferenceCore) -> None:
        self._core = core

    def collect(self) -> Iterator[Metric]:
        models = self._core.repository.ready_models()
        fams: dict[str, Any] = {
            name: CounterMetricFamily(name, doc, labels=["model", "version"])
            for name, doc in _COUNTERS
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
        for m in models:
            s, lbl = m.stats, [m.name, m.version_str]
            values = (
                s.success.count, s.inference_count, s.execution_count,
                s.success.ns // 1000, s.queue.ns // 1000,
                s.compute_input.ns // 1000, s.compute_infer.ns // 1000,
                s.compute_output.ns // 1000,
            )
            for (name, _), v in zip(_COUNTERS, values):
                fams[name].add_metric(lbl, v)
            for reason in ("BACKEND", "CANCELED", "OTHER", "REJECTED"):
                failure.add_metric([m.name, reason, m.version_str],
                                   s.failures_by_reason.get(reason, 0))
            pending.add_metric(lbl, max(0, m.scheduler.inflight() - m.executing))
        yield _strip_total(fams["nv_inference_request_success"])
        yield _strip_total(failure)
        for name, _ in _COUNTERS[1:]:
            yield _strip_total(fams[name])
        yield pending
        yield from _cpu_metrics()


def _cpu_metrics() -> Iterator[Metric]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if ":" in line}
    except OSError:
        return
    total = info.get("MemTotal", 0)
    used = total - info.get("MemAvailable", 0)
    g = GaugeMetricFamily("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes")
    g.add_metric([], total)
    yield g
    g = GaugeMetricFamily("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes")
    g.add_metric([], used)
    yield g


def make_metrics_app(core: InferenceCore) -> web.Application:
    collector = _Collector(core)

    async def metrics(request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/") != "/metrics":
            return error_response(404, "Not Found")
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        return web.Response(body=render(list(collector.collect())),
                            headers={"Content-Type": "text/plain; charset=utf-8"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", metrics)
    return app

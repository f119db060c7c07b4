"""/metrics (PROTOCOL.md §5): Triton's families, equal to the statistics, and their options.

Servers are real tritonlite children scraped over HTTP and parsed with prometheus_client's
parser; the GPU families are checked through the collector with a fake NVML (this machine has
no GPU, so a real server shows none of them).
"""

from __future__ import annotations

import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from prometheus_client.parser import text_string_to_metric_families
from repos import write_add_sub, write_identity
from tritonclient.utils import InferenceServerException

from tritonlite.cli import options_from_args
from tritonlite.core.observability.latency import (
    SUMMARY_MAX_AGE_S,
    Histogram,
    LatencyRecorder,
    Window,
)
from tritonlite.core.observability.snapshot import MetricsSnapshot
from tritonlite.core.observability.sysinfo import (
    CpuSampler,
    GpuSampler,
    load_nvml,
    read_cpu_times,
    read_memory,
)
from tritonlite.frontends.metrics import _Collector, render
from tritonlite.options import DEFAULT_SUMMARY_QUANTILES, MetricsConfig

pytestmark = pytest.mark.timeout(120)

DURATIONS = {
    "nv_inference_request_duration_us": "success",
    "nv_inference_queue_duration_us": "queue",
    "nv_inference_compute_input_duration_us": "compute_input",
    "nv_inference_compute_infer_duration_us": "compute_infer",
    "nv_inference_compute_output_duration_us": "compute_output",
}


def _repo(root: Path) -> Path:
    write_add_sub(root, "add_sub", 8, extra_config="dynamic_batching { }\n")
    write_add_sub(root, "add_sub_nobatch", 0)
    write_identity(root, "identity_int32", "INT32", [4], 8)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repo(tmp_path_factory.mktemp("metrics_repo"))


def scrape(server: Server, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://{server.metrics_url}{path}", timeout=5) as r:
        assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
        return r.read().decode()  # type: ignore[no-any-return]


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def per_model(fam: Any, suffix: str = "") -> dict[str, float]:
    """{model: value} of a family's samples named <family><suffix> (counters parse as _total)."""
    name = fam.name + (suffix or ("_total" if fam.type == "counter" else ""))
    return {s.labels["model"]: s.value for s in fam.samples if s.name == name}


def _add_sub_inputs(mod: Any, batch: bool, value: float) -> list[Any]:
    shape = [1, 16] if batch else [16]
    ins = [mod.InferInput("INPUT0", shape, "FP32"), mod.InferInput("INPUT1", shape, "FP32")]
    for i in ins:
        i.set_data_from_numpy(np.full(shape, value, dtype=np.float32))
    return ins


def run_traffic(server: Server) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    for i in range(5):
        h.infer("add_sub", _add_sub_inputs(httpclient, True, i))
        g.infer("add_sub_nobatch", _add_sub_inputs(grpcclient, False, i))
    ident = httpclient.InferInput("INPUT0", [3, 4], "INT32")
    ident.set_data_from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    h.infer("identity_int32", [ident])


def stats(server: Server) -> dict[str, dict[str, Any]]:
    h = httpclient.InferenceServerClient(server.http_url)
    return {s["name"]: s for s in h.get_inference_statistics()["model_stats"]}


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--metrics-interval-ms=100")
    yield s
    s.stop()


# -- the default families ------------------------------------------------------------------


def test_metrics_equal_the_statistics(server: Server) -> None:
    run_traffic(server)
    fams = families(scrape(server))
    st = stats(server)
    assert set(st) == {"add_sub", "add_sub_nobatch", "identity_int32"}
    success = per_model(fams["nv_inference_request_success"])
    count = per_model(fams["nv_inference_count"])
    execs = per_model(fams["nv_inference_exec_count"])
    for model, s in st.items():
        inf = s["inference_stats"]
        assert success[model] == inf["success"]["count"]
        assert count[model] == s["inference_count"]
        assert execs[model] == s["execution_count"]
        for family, key in DURATIONS.items():
            assert per_model(fams[family])[model] == inf[key]["ns"] // 1000, (family, model)
    assert count["identity_int32"] == 3 and execs["identity_int32"] == 1
    failures = [
        s for s in fams["nv_inference_request_failure"].samples if s.labels["model"] == "add_sub"
    ]
    assert sorted(s.labels["reason"] for s in failures) == [
        "BACKEND",
        "CANCELED",
        "OTHER",
        "REJECTED",
    ]
    assert per_model(fams["nv_inference_pending_request_count"])["add_sub"] == 0
    assert not any(n.startswith("nv_cache") for n in fams)  # no cache on this server
    assert not any("summary" in n or "histogram" in n for n in fams)


def test_triton_help_strings_and_plain_decimal_values(server: Server) -> None:
    text = scrape(server)
    assert (
        "# HELP nv_inference_request_success Number of successful inference requests, "
        "all batch sizes"
    ) in text
    assert "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]" in text
    assert "# TYPE nv_inference_request_success counter" in text
    for line in text.splitlines():
        if not line.startswith("#"):
            assert re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?[0-9]+(\.[0-9]+)?", line), line
    assert render([]) == b"\n"


def test_cpu_gauges_refresh_every_interval(server: Server) -> None:
    total, used = read_memory(Path("/proc/meminfo")) or (0, 0)
    fams = families(scrape(server))
    assert fams["nv_cpu_memory_total_bytes"].samples[0].value == total
    assert 0 < fams["nv_cpu_memory_used_bytes"].samples[0].value <= total
    # Burn CPU here; the server's 100 ms sampler must see the machine busy.
    deadline = time.monotonic() + 10
    seen = 0.0
    while time.monotonic() < deadline and seen <= 0:
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            pass
        seen = families(scrape(server))["nv_cpu_utilization"].samples[0].value
    assert 0 < seen <= 1


def test_gpu_families_are_absent_without_nvml(server: Server) -> None:
    nvml = load_nvml()  # None without pynvml, without a driver or without a GPU
    if nvml is not None:
        nvml.nvmlShutdown()
        pytest.skip("NVML sees a GPU here: the GPU families depend on the machine")
    assert not any(
        n.startswith("nv_gpu") or n == "nv_energy_consumption" for n in families(scrape(server))
    )


def test_only_get_on_metrics_with_an_optional_trailing_slash(server: Server) -> None:
    assert "nv_inference_count" in scrape(server, "/metrics/")
    for method, path, code in (("POST", "/metrics", 405), ("GET", "/nope", 404)):
        req = urllib.request.Request(f"http://{server.metrics_url}{path}", method=method)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == code
        e.value.close()


def test_failures_count_by_reason(server: Server) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    before = stats(server)["add_sub"]["inference_stats"]["fail"]["count"]
    with pytest.raises(InferenceServerException):
        h.infer("add_sub", _add_sub_inputs(httpclient, True, 1.0)[:1])  # validation: not counted
    fams = families(scrape(server))
    fails = sum(
        s.value
        for s in fams["nv_inference_request_failure"].samples
        if s.labels["model"] == "add_sub"
    )
    assert fails == before == stats(server)["add_sub"]["inference_stats"]["fail"]["count"]


# -- options -----------------------------------------------------------------------------------


def test_counter_latencies_false_drops_the_duration_counters(repo: Path) -> None:
    s = start_server(
        repo,
        "--metrics-config",
        "counter_latencies=false",
        "--allow-grpc=false",
        "--allow-cpu-metrics=false",
    )
    try:
        h = httpclient.InferenceServerClient(s.http_url)
        h.infer("add_sub", _add_sub_inputs(httpclient, True, 1.0))
        fams = families(scrape(s))
        assert not any(n in fams for n in DURATIONS)
        assert per_model(fams["nv_inference_request_success"])["add_sub"] == 1
        assert not any(n.startswith("nv_cpu") for n in fams)
    finally:
        s.stop()


def test_summaries_with_configured_quantiles(repo: Path) -> None:
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--metrics-config",
        "summary_latencies=true",
        "--metrics-config",
        "summary_quantiles=0.5:0.05,0.99:0.001",
    )
    try:
        run_traffic_http(s, 20)
        fams = families(scrape(s))
        st = stats(s)["add_sub"]["inference_stats"]
        for name, key in (
            ("nv_inference_request_summary_us", "success"),
            ("nv_inference_queue_summary_us", "queue"),
            ("nv_inference_compute_input_summary_us", "compute_input"),
            ("nv_inference_compute_infer_summary_us", "compute_infer"),
            ("nv_inference_compute_output_summary_us", "compute_output"),
        ):
            fam = fams[name]
            assert fam.type == "summary"
            assert per_model(fam, "_count")["add_sub"] == st[key]["count"] == 20
            qs = {
                sm.labels["quantile"]: sm.value
                for sm in fam.samples
                if sm.name == name and sm.labels["model"] == "add_sub"
            }
            assert set(qs) == {"0.5", "0.99"}
            assert 0 <= qs["0.5"] <= qs["0.99"] <= per_model(fam, "_sum")["add_sub"]
        assert "nv_inference_request_duration_us" in fams  # counters stay on
    finally:
        s.stop()


def run_traffic_http(server: Server, n: int) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    for i in range(n):
        h.infer("add_sub", _add_sub_inputs(httpclient, True, i))


def test_histograms_with_configured_buckets(repo: Path) -> None:
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--metrics-config",
        "histogram_latencies=true",
        "--metrics-config",
        "histogram_buckets_us=50:500:5000:50000",
    )
    try:
        run_traffic_http(s, 10)
        fams = families(scrape(s))
        st = stats(s)["add_sub"]["inference_stats"]
        fam = fams["nv_inference_request_histogram_us"]
        assert fam.type == "histogram"
        buckets = [
            (sm.labels["le"], sm.value)
            for sm in fam.samples
            if sm.name.endswith("_bucket") and sm.labels["model"] == "add_sub"
        ]
        assert [le for le, _ in buckets] == ["50", "500", "5000", "50000", "+Inf"]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and counts[-1] == st["success"]["count"] == 10
        assert per_model(fam, "_count")["add_sub"] == 10
        for name in (
            "nv_inference_queue_histogram_us",
            "nv_inference_compute_input_histogram_us",
            "nv_inference_compute_infer_histogram_us",
            "nv_inference_compute_output_histogram_us",
        ):
            assert per_model(fams[name], "_count")["add_sub"] == 10
        assert not any("summary" in n for n in fams)
    finally:
        s.stop()


def test_allow_metrics_false_and_metrics_address(repo: Path) -> None:
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    try:
        assert "Metrics Service" not in s.ports
    finally:
        s.stop()
    s = start_server(
        repo, "--allow-grpc=false", "--http-address=0.0.0.0", "--metrics-address=127.0.0.1"
    )
    try:
        assert s.hosts["Metrics Service"] == "127.0.0.1"
        assert s.hosts["HTTPService"] == "0.0.0.0"
        assert "nv_inference_count" in scrape(s)
    finally:
        s.stop()


@pytest.mark.parametrize(
    "setting, message",
    [
        ("summary_latencies=maybe", "expects true or false"),
        ("summary_quantiles=0.5", "<quantile>:<error>"),
        ("histogram_buckets_us=5:1", "ascending"),
        ("bogus=1", "unknown --metrics-config setting 'bogus'"),
        ("nogroup", "<setting>=<value>"),
    ],
)
def test_bad_metrics_config_is_refused(setting: str, message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        options_from_args(["--model-repository", "/tmp", "--metrics-config", setting])


def test_metrics_flags_reach_the_options() -> None:
    o = options_from_args(
        [
            "--model-repository",
            "/tmp",
            "--allow-cpu-metrics=false",
            "--allow-gpu-metrics",
            "false",
            "--metrics-interval-ms",
            "250",
            "--metrics-config",
            "summary_latencies=true",
            "--metrics-config",
            "histogram_latencies=true",
        ]
    )
    assert (o.allow_cpu_metrics, o.allow_gpu_metrics, o.metrics_interval_ms) == (False, False, 250)
    assert o.metrics_config.summary_latencies and o.metrics_config.histogram_latencies
    assert o.metrics_config.summary_quantiles == DEFAULT_SUMMARY_QUANTILES
    assert options_from_args(["--model-repository", "/tmp"]).metrics_config == MetricsConfig()


# -- units: the latency windows, the samplers, the GPU collector ------------------------------


def test_summary_window_quantiles_forget_old_observations() -> None:
    w = Window(size=4)
    for i, v in enumerate((10.0, 20.0, 30.0, 40.0, 50.0)):
        w.observe(v, now=100.0 + i)
    assert (w.count, w.sum) == (5, 150.0)
    assert w.quantiles([0.0, 1.0], now=105.0) == [20.0, 50.0]  # the ring kept the newest 4
    assert w.quantiles([0.5], now=104.0 + SUMMARY_MAX_AGE_S) == [50.0]
    assert math.isnan(w.quantiles([0.5], now=1000.0)[0])


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram([10.0, 100.0])
    for v in (5, 10, 11, 100, 1000):
        h.observe(v)
    assert h.cumulative() == [2, 4, 5]
    assert (h.count, h.sum) == (5, 1126)


def test_recorder_observes_microseconds() -> None:
    rec = LatencyRecorder(summaries=True, histogram_bounds_us=[1.0, 1000.0])
    rec.request(5_000_999, 2_000, (1_000, 2_000, 3_000))
    rec.request(1_000, 0, None)  # a cache hit: no compute
    assert rec.summaries is not None and rec.histograms is not None
    assert rec.summaries["request"].sum == 5001
    assert rec.summaries["compute_infer"].count == 1
    assert rec.histograms["queue"].cumulative() == [1, 2, 2]


def test_cpu_sampler_reads_proc_deltas(tmp_path: Path) -> None:
    stat, meminfo = tmp_path / "stat", tmp_path / "meminfo"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    250 kB\n")
    cpu = CpuSampler(tmp_path)
    assert (cpu.utilization, cpu.memory_total, cpu.memory_used) == (0.0, 1024000, 768000)
    stat.write_text("cpu  130 0 130 840 0 0 0 0 0 0\n")  # 60 busy, 40 idle jiffies
    cpu.sample()
    assert cpu.utilization == pytest.approx(0.6)
    assert read_cpu_times(tmp_path / "missing") is None
    assert read_cpu_times(Path("/proc/stat")) is not None


class FakeNvml:
    """pynvml's shape: two GPUs, the second without power readings."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy = [1_000_000, 0]
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str | bytes:
        return "GPU-aaaa-0000" if h == 0 else b"GPU-bbbb-1111"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=37 if h == 0 else 0, memory=5)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=150_000_000_000, used=2_000_000_000 * (h + 1), free=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 123_456

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self.energy[h] += 2_500
        return self.energy[h]


def _collect(gpu: GpuSampler | None) -> str:
    snap = MetricsSnapshot(
        (), (), (), False, 0, 0, gpus=tuple(gpu.readings) if gpu is not None else ()
    )
    return render(list(_Collector(lambda: snap, MetricsConfig()).collect())).decode()


def test_gpu_collector_with_a_fake_nvml() -> None:
    nvml = FakeNvml()
    gpu = GpuSampler(nvml, visible=None)
    gpu.sample()
    text = _collect(gpu)
    # perf_analyzer's regexes: the gpu_uuid label alone, a plain decimal value.
    assert '\nnv_gpu_utilization{gpu_uuid="GPU-aaaa-0000"} 0.37\n' in text
    assert '\nnv_gpu_utilization{gpu_uuid="GPU-bbbb-1111"} 0\n' in text
    assert '\nnv_gpu_memory_total_bytes{gpu_uuid="GPU-aaaa-0000"} 150000000000\n' in text
    assert '\nnv_gpu_memory_used_bytes{gpu_uuid="GPU-bbbb-1111"} 4000000000\n' in text
    assert '\nnv_gpu_power_usage{gpu_uuid="GPU-aaaa-0000"} 123.456\n' in text
    assert '\nnv_gpu_power_limit{gpu_uuid="GPU-aaaa-0000"} 700\n' in text
    assert 'nv_gpu_power_usage{gpu_uuid="GPU-bbbb-1111"}' not in text  # not supported there
    # energy counts from the first sample: one more sample, 2.5 J
    assert '\nnv_energy_consumption{gpu_uuid="GPU-aaaa-0000"} 2.5\n' in text
    assert "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)" in text
    assert "# TYPE nv_energy_consumption counter" in text
    fams = families(text)
    assert fams["nv_gpu_utilization"].type == "gauge"
    gpu.close()
    assert nvml.shut


def test_gpu_sampler_honours_cuda_visible_devices() -> None:
    assert [r.uuid for r in GpuSampler(FakeNvml(), visible="1").readings] == ["GPU-bbbb-1111"]
    assert [r.uuid for r in GpuSampler(FakeNvml(), visible="GPU-aaaa").readings] == [
        "GPU-aaaa-0000"
    ]
    assert GpuSampler(FakeNvml(), visible="").readings == []
    assert "nv_gpu" not in _collect(None)


def test_render_never_prints_exponents() -> None:
    from prometheus_client.core import GaugeMetricFamily

    g = GaugeMetricFamily("g", "doc")
    g.add_metric([], 1.5e12)
    h = GaugeMetricFamily("h", "doc")
    h.add_metric([], 2.5e-7)
    text = render([g, h]).decode()
    assert "\ng 1500000000000\n" in text
    assert "\nh 0.00000025\n" in text

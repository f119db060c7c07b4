"""Server options: frozen dataclasses filled by the CLI (or by tests / embedding code)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tritonlite.core.observability.latency import DEFAULT_HISTOGRAM_BUCKETS_US

CONTROL_MODES = ("none", "poll", "explicit")
SHM_POLICIES = ("local", "true", "false")
FRONTENDS = ("native", "aio")
GRPC_COMPRESSION_LEVELS = ("none", "low", "medium", "high")
# the kernel's bounds for a SCHED_OTHER task's own slice (``--loop-slice-us``)
LOOP_SLICE_MIN_US = 100
LOOP_SLICE_MAX_US = 100_000
# Triton's default summary quantiles, (quantile, allowed error)
DEFAULT_SUMMARY_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))


def _metrics_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise ValueError(f"--metrics-config {key} expects true or false, got '{value}'")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``--metrics-config`` settings (PROTOCOL.md §5); see ``MetricsConfig.parse``."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_SUMMARY_QUANTILES
    histogram_latencies: bool = False  # a tritonlite addition
    histogram_buckets_us: tuple[float, ...] = DEFAULT_HISTOGRAM_BUCKETS_US

    @classmethod
    def parse(cls, settings: list[str]) -> MetricsConfig:
        """``["summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01", ...]`` -> config.

        Keys: counter_latencies, summary_latencies, summary_quantiles (``q:error`` pairs,
        comma-separated), histogram_latencies, histogram_buckets_us (ascending upper bounds in
        microseconds, colon-separated). Raises ValueError naming a bad setting.
        """
        values: dict[str, object] = {}
        for s in settings:
            key, eq, value = s.partition("=")
            key = key.strip()
            if not eq or not key:
                raise ValueError(f"--metrics-config expects <setting>=<value>, got '{s}'")
            if "," in key:
                raise ValueError(f"--metrics-config groups are not supported: '{s}'")
            if key in ("counter_latencies", "summary_latencies", "histogram_latencies"):
                values[key] = _metrics_bool(key, value)
            elif key == "summary_quantiles":
                pairs = []
                for item in value.strip().strip('"').split(","):
                    q, colon, err = item.partition(":")
                    try:
                        pair = (float(q), float(err))
                    except ValueError:
                        pair = (-1.0, -1.0)
                    if not colon or not 0.0 <= pair[0] <= 1.0 or not 0.0 <= pair[1] <= 1.0:
                        raise ValueError(
                            f"--metrics-config summary_quantiles expects <quantile>:<error> "
                            f"pairs in [0, 1], got '{item}'"
                        )
                    pairs.append(pair)
                values[key] = tuple(pairs)
            elif key == "histogram_buckets_us":
                try:
                    bounds = tuple(float(b) for b in value.strip().strip('"').split(":"))
                except ValueError:
                    bounds = ()
                if not bounds or any(b <= a for a, b in zip(bounds, bounds[1:])) or bounds[0] < 0:
                    raise ValueError(
                        "--metrics-config histogram_buckets_us expects ascending bounds in "
                        f"microseconds separated by ':', got '{value}'"
                    )
                values[key] = bounds
            else:
                raise ValueError(f"unknown --metrics-config setting '{key}'")
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ServerOptions:
    model_repositories: tuple[Path, ...]
    server_id: str = "triton"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    http_address: str = "0.0.0.0"
    grpc_address: str = "0.0.0.0"
    metrics_address: str | None = None  # None: same as http_address
    allow_http: bool = True
    allow_grpc: bool = True
    allow_metrics: bool = True
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: float = 30.0
    auto_complete_config: bool = True
    default_max_batch_size: int = 4
    http_max_input_size: int = 64 * 1024 * 1024
    # connection caps per front end (tritonlite's), lowered to fit RLIMIT_NOFILE at start
    http_max_connections: int = 4096
    grpc_max_connections: int = 4096
    # the largest size a compressed gRPC request message may inflate to (native front end)
    grpc_max_decompressed_size: int = 256 * 1024 * 1024
    allow_client_shm: str = "local"
    log_verbose: int = 0
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_format: str = "default"
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    # which transports carry HTTP and gRPC: tritonlite's own wire layer (native) or aiohttp and
    # grpc.aio (aio); the same handlers run over both
    frontend: str = "native"
    # the native front ends keep the loop polling this long after input (frontends/wire/
    # busypoll.py); 0: the loop sleeps as soon as it is idle
    busy_poll_us: int = 200
    # a loaded native HTTP/1.1 front end hands its small responses to a sending thread
    # (frontends/wire/_sender_py.py); False: the loop writes them
    http_send_thread: bool = True
    # and the native gRPC front end its small output, written at the end of a loop turn
    grpc_send_thread: bool = True
    # the event loop thread asks the kernel for this CPU slice (frontends/base/loopslice.py);
    # 0: the kernel's default
    loop_slice_us: int = 0
    # TLS on HTTP (tritonlite's; named after Triton's gRPC TLS flags)
    http_use_ssl: bool = False
    http_use_ssl_mutual: bool = False
    http_server_cert: str | None = None
    http_server_key: str | None = None
    http_root_cert: str | None = None
    # gRPC front end (Triton's flags and defaults, PROTOCOL §2.2 / §4); times in ms
    grpc_infer_response_compression_level: str = "none"
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str | None = None
    grpc_server_key: str | None = None
    grpc_root_cert: str | None = None
    grpc_keepalive_time_ms: int = 7_200_000
    grpc_keepalive_timeout_ms: int = 20_000
    grpc_keepalive_permit_without_calls: bool = False
    grpc_http2_max_pings_without_data: int = 2
    grpc_http2_min_recv_ping_interval_without_data_ms: int = 300_000
    grpc_http2_max_ping_strikes: int = 2
    grpc_max_connection_age_ms: int | None = None  # None: connections are not aged out
    grpc_max_connection_age_grace_ms: int | None = None
    # response cache (PROTOCOL §3.4): bytes of the local LRU; 0 = the server has no cache
    response_cache_byte_size: int = 0
    # metrics (PROTOCOL §5)
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    metrics_interval_ms: int = 2000
    metrics_config: MetricsConfig = field(default_factory=MetricsConfig)
    # instance health (tritonlite's, core/health.py): seconds; 0 = no timeout / no probe
    backend_execution_timeout_s: float = 0.0
    health_probe_interval_s: float = 30.0
    # memory pressure (tritonlite's, core/pressure.py): a fraction of the memory limit; 0 = off
    memory_pressure_threshold: float = 0.05
    # tracing (--trace-config; core/trace.py) and --log-file
    trace_level: tuple[str, ...] = ("OFF",)
    trace_rate: int = 1000
    trace_count: int = -1
    trace_log_frequency: int = 0
    trace_file: str = ""
    log_file: str = ""
    # endpoint restriction and header forwarding (frontends/base/restrict.py, frontends/base/forward.py):
    # the flags' values as given; parsed (and refused when malformed) by those modules
    http_restricted_api: tuple[str, ...] = ()
    grpc_restricted_protocol: tuple[str, ...] = ()
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""

    def __post_init__(self) -> None:
        if not self.model_repositories:
            raise ValueError("at least one --model-repository is required")
        if self.model_control_mode not in CONTROL_MODES:
            raise ValueError(
                f"invalid --model-control-mode '{self.model_control_mode}', "
                f"expected one of {', '.join(CONTROL_MODES)}"
            )
        if self.allow_client_shm not in SHM_POLICIES:
            raise ValueError(
                f"invalid --allow-client-shm '{self.allow_client_shm}', expected local|true|false"
            )
        if "*" in self.load_models and len(self.load_models) > 1:
            raise ValueError("--load-model=* must be the only --load-model flag")
        if self.load_models and self.model_control_mode != "explicit":
            raise ValueError("--load-model requires --model-control-mode=explicit")
        if self.repository_poll_secs <= 0:
            raise ValueError("--repository-poll-secs must be > 0")
        for port in (self.http_port, self.grpc_port, self.metrics_port):
            if not 0 <= port <= 65535:
                raise ValueError(f"invalid port {port}")
        if self.http_max_input_size <= 0:
            raise ValueError("--http-max-input-size must be > 0")
        for flag, cap in (
            ("--http-max-connections", self.http_max_connections),
            ("--grpc-max-connections", self.grpc_max_connections),
        ):
            if cap < 1:
                raise ValueError(f"{flag} must be at least 1, got {cap}")
        if self.grpc_max_decompressed_size < 1:
            raise ValueError(
                "--grpc-max-decompressed-size must be at least 1 byte, got "
                f"{self.grpc_max_decompressed_size}"
            )
        if not 0 <= self.busy_poll_us <= 1_000_000:
            raise ValueError(
                f"--busy-poll-us must be between 0 and 1000000, got {self.busy_poll_us}"
            )
        if self.loop_slice_us != 0 and not (
            LOOP_SLICE_MIN_US <= self.loop_slice_us <= LOOP_SLICE_MAX_US
        ):
            raise ValueError(
                f"--loop-slice-us must be 0 or between {LOOP_SLICE_MIN_US} and "
                f"{LOOP_SLICE_MAX_US}, got {self.loop_slice_us}"
            )
        if self.log_format not in ("default", "ISO8601"):
            raise ValueError("--log-format must be 'default' or 'ISO8601'")
        if self.response_cache_byte_size < 0:
            raise ValueError("the response cache size must be >= 0 bytes")
        if self.metrics_interval_ms <= 0:
            raise ValueError("--metrics-interval-ms must be > 0")
        if not self.backend_execution_timeout_s >= 0:
            raise ValueError("--backend-execution-timeout must be >= 0 seconds (0: no timeout)")
        if not self.health_probe_interval_s >= 0:
            raise ValueError("--health-probe-interval must be >= 0 seconds (0: no probe)")
        if not 0.0 <= self.memory_pressure_threshold <= 1.0:  # NaN fails too
            raise ValueError(
                "--memory-pressure-threshold expects a fraction of the memory limit between 0 "
                f"(off) and 1 (always under pressure), got {self.memory_pressure_threshold}"
            )
        self._check_grpc()
        self._check_http_tls()
        self._check_ports()
        self._check_trace()

    @property
    def shared_port(self) -> bool:
        """HTTP and gRPC on one listener: both allowed on the same non-zero port."""
        return (
            self.allow_http
            and self.allow_grpc
            and self.http_port == self.grpc_port
            and self.http_port != 0
        )

    def _check_ports(self) -> None:
        if self.frontend not in FRONTENDS:
            raise ValueError(f"invalid --frontend '{self.frontend}', expected native|aio")
        if not self.shared_port:
            return
        if self.frontend != "native":
            raise ValueError(
                "HTTP and gRPC on one port (--http-port equal to --grpc-port) "
                "needs --frontend=native"
            )
        if self.http_address != self.grpc_address:
            raise ValueError(
                f"HTTP and gRPC share port {self.http_port} but not the address "
                f"({self.http_address} vs {self.grpc_address}): give both the same "
                "--http-address and --grpc-address"
            )
        if self.http_use_ssl != self.grpc_use_ssl:
            raise ValueError(
                "HTTP and gRPC share a port: TLS must be on for both or for "
                "neither (--http-use-ssl, --grpc-use-ssl)"
            )
        if self.http_use_ssl and (
            (
                self.http_server_cert,
                self.http_server_key,
                self.http_root_cert,
                self.http_use_ssl_mutual,
            )
            != (
                self.grpc_server_cert,
                self.grpc_server_key,
                self.grpc_root_cert,
                self.grpc_use_ssl_mutual,
            )
        ):
            raise ValueError(
                "HTTP and gRPC share a port: their TLS certificates, keys and "
                "mutual settings must be the same"
            )

    def _check_http_tls(self) -> None:
        if self.http_use_ssl_mutual and not self.http_use_ssl:
            raise ValueError("--http-use-ssl-mutual requires --http-use-ssl")
        if self.http_use_ssl and not (self.http_server_cert and self.http_server_key):
            raise ValueError("--http-use-ssl requires --http-server-cert and --http-server-key")
        if self.http_use_ssl_mutual and not self.http_root_cert:
            raise ValueError("--http-use-ssl-mutual requires --http-root-cert")

    def _check_trace(self) -> None:
        levels = self.trace_level
        if not levels or any(x not in ("OFF", "TIMESTAMPS", "TENSORS") for x in levels):
            raise ValueError(f"invalid trace level {list(levels)}: expected OFF, TIMESTAMPS")
        if "TENSORS" in levels:
            raise ValueError("trace level TENSORS is not supported by tritonlite (TIMESTAMPS is)")
        if not 0 <= self.trace_rate <= 2**32 - 1:
            raise ValueError(
                f"the trace rate must be between 0 and 4294967295, got {self.trace_rate}"
            )
        if self.trace_count < -1:
            raise ValueError(f"the trace count must be >= -1, got {self.trace_count}")
        if self.trace_log_frequency < 0:
            raise ValueError(
                f"the trace log frequency must be >= 0, got {self.trace_log_frequency}"
            )

    def _check_grpc(self) -> None:
        if self.grpc_infer_response_compression_level not in GRPC_COMPRESSION_LEVELS:
            raise ValueError(
                "invalid --grpc-infer-response-compression-level "
                f"'{self.grpc_infer_response_compression_level}', expected none|low|medium|high"
            )
        if self.grpc_use_ssl_mutual and not self.grpc_use_ssl:
            raise ValueError("--grpc-use-ssl-mutual requires --grpc-use-ssl")
        if self.grpc_use_ssl and not (self.grpc_server_cert and self.grpc_server_key):
            raise ValueError("--grpc-use-ssl requires --grpc-server-cert and --grpc-server-key")
        if self.grpc_use_ssl_mutual and not self.grpc_root_cert:
            raise ValueError("--grpc-use-ssl-mutual requires --grpc-root-cert")
        for flag, value in (
            ("--grpc-keepalive-time", self.grpc_keepalive_time_ms),
            ("--grpc-keepalive-timeout", self.grpc_keepalive_timeout_ms),
            ("--grpc-http2-max-pings-without-data", self.grpc_http2_max_pings_without_data),
            (
                "--grpc-http2-min-recv-ping-interval-without-data",
                self.grpc_http2_min_recv_ping_interval_without_data_ms,
            ),
            ("--grpc-http2-max-ping-strikes", self.grpc_http2_max_ping_strikes),
            ("--grpc-max-connection-age", self.grpc_max_connection_age_ms),
            ("--grpc-max-connection-age-grace", self.grpc_max_connection_age_grace_ms),
        ):
            if value is not None and not 0 <= value <= 2**31 - 1:
                raise ValueError(f"{flag} must be between 0 and 2147483647, got {value}")

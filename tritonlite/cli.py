"""``tritonlite`` command line: tritonserver's flag names, forms and defaults -> ServerOptions.

Both ``--flag=value`` and ``--flag value`` work; booleans take true/false/1/0/yes/no/on/off.
Every tritonserver flag is implemented, accepted and ignored with a warning saying why
(``IGNORED``), or refused with an error saying why (``REFUSED``): docs/compatibility.md has the
table. An unknown flag is an error naming it (tritonserver's usage behaviour).

Over 500 lines, one module: most of it declares tritonserver's flags (one argparse definition each,
with its default and form) and maps them to ServerOptions; keeping the table in one place is what
makes the flag check against tritonserver's --help readable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import tritonlite
from tritonlite.frontends.base import restrict
from tritonlite.frontends.base.forward import grpc_forward, http_forward
from tritonlite.options import MetricsConfig, ServerOptions

# tritonserver flags that change nothing in tritonlite: accepted (their values checked as
# tritonserver checks them) and ignored with a warning saying why. docs/compatibility.md lists
# every tritonserver flag; tests/compat/test_restricted_flag_table.py holds this to that table.
# flag -> (value kind: int | bool | str | list, why)
IGNORED: dict[str, tuple[str, str]] = {
    "--model-load-thread-count": (
        "int",
        "tritonlite loads a repository's models concurrently on its event loop; there "
        "is no loading thread pool to size",
    ),
    "--model-load-retry-count": (
        "int",
        "tritonlite does not retry a failed load: the model is UNAVAILABLE with its "
        "error until it is loaded again",
    ),
    "--enable-peer-access": (
        "bool",
        "tritonlite makes no copies between GPUs, so it enables no CUDA peer access",
    ),
    "--http-thread-count": (
        "int",
        "HTTP is served on tritonlite's one event loop; models run on one thread per instance",
    ),
    "--grpc-infer-allocation-pool-size": (
        "int",
        "tritonlite keeps no pool of gRPC request and response objects",
    ),
    "--grpc-max-response-pool-size": (
        "int",
        "tritonlite keeps no pool of gRPC request and response objects",
    ),
    "--grpc-infer-thread-count": (
        "int",
        "gRPC is served on tritonlite's one event loop; there are no gRPC threads",
    ),
    "--sagemaker-port": ("int", "tritonlite has no SageMaker endpoint"),
    "--sagemaker-safe-port-range": ("str", "tritonlite has no SageMaker endpoint"),
    "--sagemaker-thread-count": ("int", "tritonlite has no SageMaker endpoint"),
    "--vertex-ai-port": ("int", "tritonlite has no Vertex AI endpoint"),
    "--vertex-ai-thread-count": ("int", "tritonlite has no Vertex AI endpoint"),
    "--vertex-ai-default-model": ("str", "tritonlite has no Vertex AI endpoint"),
    "--backend-directory": (
        "str",
        "tritonlite's backends (onnxruntime, pytorch, tensorrt, python) are part of "
        "the package; it loads no backend libraries",
    ),
    "--repoagent-directory": ("str", "tritonlite loads no repository agent libraries"),
    "--cache-directory": (
        "str",
        "tritonlite's response cache (--cache-config local,size=N) is built in; it "
        "loads no cache libraries",
    ),
    "--rate-limit": (
        "str",
        "tritonlite has no rate limiter: an instance runs a batch as soon as it is "
        "free (tritonserver's --rate-limit=off)",
    ),
    "--rate-limit-resource": ("list", "tritonlite has no rate limiter, so it counts no resources"),
    "--pinned-memory-pool-byte-size": (
        "int",
        "tritonlite keeps no global pinned-memory pool; each instance reuses its own "
        "staging buffers",
    ),
    "--cuda-memory-pool-byte-size": (
        "list",
        "tritonlite keeps no CUDA memory pool; each backend allocates on its device",
    ),
    "--cuda-virtual-address-size": (
        "list",
        "tritonlite keeps no CUDA memory pool, so it reserves no address space",
    ),
    "--min-supported-compute-capability": (
        "str",
        "tritonlite does not filter GPUs by compute capability; each backend decides "
        "what it can run",
    ),
    "--buffer-manager-thread-count": (
        "int",
        "tritonlite has no buffer manager threads; inputs are gathered on the instance's thread",
    ),
    "--host-policy": ("list", "tritonlite sets no NUMA or CPU affinity host policies"),
    "--model-load-gpu-limit": (
        "list",
        "tritonlite does not check GPU memory use before loading a model",
    ),
}

# tritonserver flags whose feature tritonlite lacks: refused, saying why, unless the value
# is one that asks for nothing (the second field; None: any value is refused).
REFUSED: dict[str, tuple[str | None, str]] = {
    "--model-config-name": (
        None,
        "tritonlite reads each model's config.pbtxt only, not configs/<name>.pbtxt",
    ),
    "--model-namespacing": (
        "false",
        "tritonlite has one model namespace: a model name must be unique across the repositories",
    ),
    "--allow-sagemaker": ("false", "tritonlite has no SageMaker endpoint"),
    "--allow-vertex-ai": ("false", "tritonlite has no Vertex AI endpoint"),
}


def _ignored_and_refused(a: Any) -> None:
    for flag, (kind, _) in IGNORED.items():
        if kind == "list":
            a(flag, action="append", default=None, help=argparse.SUPPRESS)
        else:
            a(
                flag,
                type={"int": int, "bool": parse_bool, "str": str}[kind],
                default=None,
                help=argparse.SUPPRESS,
            )
    for flag in REFUSED:
        a(flag, default=None, help=argparse.SUPPRESS)


def _check_ignored_and_refused(ns: argparse.Namespace) -> None:
    for flag, (allowed, why) in REFUSED.items():
        value = getattr(ns, flag[2:].replace("-", "_"))
        if value is None:
            continue
        if allowed is None or value.strip().lower() not in (allowed, "0", "off"):
            raise SystemExit(f"tritonlite: error: {flag}={value} is not supported: {why}")
    for flag, (_, why) in IGNORED.items():
        if getattr(ns, flag[2:].replace("-", "_")) is not None:
            print(f"Warning: {flag} is accepted and ignored: {why}", file=sys.stderr)


BACKEND_SETTINGS_READ = ("default-max-batch-size",)


def _warn_unapplied(argv: list[str], ns: argparse.Namespace) -> None:
    """Warn about accepted settings that this configuration does not apply."""
    for value in ns.backend_config:
        backend, _, setting = value.partition(",")
        key = setting.partition("=")[0]
        if key not in BACKEND_SETTINGS_READ:
            print(
                f"Warning: --backend-config {backend},{key} is accepted and ignored: "
                f"tritonlite reads only {', '.join(BACKEND_SETTINGS_READ)}",
                file=sys.stderr,
            )


def _log_verbose(text: str) -> int:
    """tritonserver's --log-verbose: an integer level, or true (1) / false (0)."""
    t = text.strip().lower()
    if t in ("true", "false"):
        return int(t == "true")
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value '{text}' (an integer level, or true / false)"
        ) from None


def _interval_ms(text: str) -> int:
    """tritonserver reads --metrics-interval-ms as a float; tritonlite keeps whole ms."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value '{text}' (milliseconds)") from None
    return max(1, round(value)) if value > 0 else int(value)


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{text}' (use true or false)")


def _backend_config(values: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for v in values:
        backend, _, setting = v.partition(",")
        key, eq, val = setting.partition("=")
        if not backend or not eq or not key:
            raise SystemExit(f"--backend-config expects <backend>,<setting>=<value>, got '{v}'")
        out.setdefault(backend, {})[key] = val
    return out


def _cache_size(cache_config: list[str], byte_size: int | None) -> int:
    """``--cache-config local,size=N`` (or the deprecated byte-size flag) -> N; 0: no cache."""
    if cache_config and byte_size is not None:
        raise SystemExit(
            "tritonlite: error: Incompatible flags --response-cache-byte-size and "
            "--cache-config both provided. Please provide one or the other."
        )
    if byte_size is not None:
        print(
            "Warning: '--response-cache-byte-size' has been deprecated! This will default to "
            "the 'local' cache implementation with the provided byte size for its config. "
            "Please use '--cache-config' instead.",
            file=sys.stderr,
        )
        return byte_size
    settings: dict[str, str] = {}
    for v in cache_config:
        cache, _, setting = v.partition(",")
        key, eq, val = setting.partition("=")
        if cache != "local":
            raise SystemExit(
                f"tritonlite: error: --cache-config: unsupported cache '{cache}' "
                "(tritonlite has the 'local' cache only)"
            )
        if not eq or key != "size":
            raise SystemExit(
                f"tritonlite: error: --cache-config expects local,size=<bytes>, got '{v}'"
            )
        settings[key] = val
    if not settings:
        return 0
    try:
        return int(settings["size"])
    except ValueError:
        raise SystemExit(
            f"tritonlite: error: --cache-config local,size expects an integer "
            f"byte count, got '{settings['size']}'"
        ) from None


_TRACE_DEPRECATED = {  # flag -> (--trace-config setting, what tritonserver suggests)
    "trace_file": ("file", "triton,file=<filepath>"),
    "trace_level": ("level", "level=<OFF|TIMESTAMPS|TENSORS>"),
    "trace_rate": ("rate", "rate=<rate value>"),
    "trace_count": ("count", "count=<count value>"),
    "trace_log_frequency": ("log-frequency", "triton,log-frequency=<log frequency value>"),
}


def _trace_int(setting: str, value: str, minimum: int) -> int:
    try:
        n = int(value)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        raise SystemExit(
            f"tritonlite: error: --trace-config {setting}: invalid value '{value}' "
            f"(expected an integer >= {minimum})"
        )
    return n


def _trace_options(ns: argparse.Namespace) -> dict[str, Any]:
    """``--trace-config [triton,]setting=value`` (and the deprecated flags) -> option values.

    Global settings: level (repeatable), rate, count, mode (triton only); triton settings:
    file, log-frequency. opentelemetry settings are accepted and unused, as tritonserver does
    unless mode=opentelemetry, which tritonlite refuses.
    """
    given: dict[str, list[str]] = {}
    for item in ns.trace_config:
        head, comma, rest = item.partition(",")
        mode, setting = (head, rest) if comma else ("", item)
        if mode not in ("", "triton", "opentelemetry"):
            raise SystemExit(
                f"tritonlite: error: --trace-config: invalid value for trace mode "
                f'option: {mode}. Available options are "triton" and '
                '"opentelemetry"'
            )
        key, eq, value = setting.partition("=")
        if not eq or not key:
            raise SystemExit(
                f"tritonlite: error: --trace-config expects "
                f"[<mode>,]<setting>=<value>, got '{item}'"
            )
        if mode == "opentelemetry":
            continue
        allowed = (
            ("file", "log-frequency") if mode == "triton" else ("level", "rate", "count", "mode")
        )
        if key not in allowed:
            raise SystemExit(
                f"tritonlite: error: --trace-config: unknown "
                f"{'triton ' if mode else ''}setting '{key}' "
                f"(expected one of {', '.join(allowed)})"
            )
        given.setdefault(key, []).append(value)
    for dest, (key, form) in _TRACE_DEPRECATED.items():
        value = getattr(ns, dest)
        if value is None or value == []:
            continue
        print(
            f"Warning: '--{dest.replace('_', '-')}' has been deprecated and will be removed "
            f"in future releases. Please use '--trace-config {form} instead.",
            file=sys.stderr,
        )
        if key in given:
            print(
                f"Warning: Overriding deprecated '--{dest.replace('_', '-')}' in favor of "
                f"provided {key} in --trace-config!",
                file=sys.stderr,
            )
        else:
            given[key] = value if isinstance(value, list) else [value]
    for mode in given.get("mode", []):
        if mode not in ("triton", "opentelemetry"):
            raise SystemExit(
                f"tritonlite: error: --trace-config mode: invalid value for trace "
                f'mode option: {mode}. Available options are "triton" and '
                '"opentelemetry"'
            )
        if mode == "opentelemetry":
            raise SystemExit(
                "tritonlite: error: --trace-config mode=opentelemetry is not "
                "supported by tritonlite (only mode=triton, the trace file)"
            )
    levels: list[str] = []
    for value in given.get("level", []):
        level = value.upper()
        if level not in ("OFF", "TIMESTAMPS", "TENSORS"):
            raise SystemExit(
                f"tritonlite: error: --trace-config level: invalid value for trace "
                f"level option: {value.lower()} (expected OFF, TIMESTAMPS)"
            )
        if level == "TENSORS":
            raise SystemExit(
                "tritonlite: error: --trace-config level=TENSORS is not supported "
                "by tritonlite (TIMESTAMPS is)"
            )
        levels.append(level)
    on = [x for x in dict.fromkeys(levels) if x != "OFF"]
    out: dict[str, Any] = {"trace_level": tuple(on) or ("OFF",)}
    if "rate" in given:
        out["trace_rate"] = _trace_int("rate", given["rate"][-1], 0)
    if "count" in given:
        out["trace_count"] = _trace_int("count", given["count"][-1], -1)
    if "log-frequency" in given:
        out["trace_log_frequency"] = _trace_int("log-frequency", given["log-frequency"][-1], 0)
    if "file" in given:
        out["trace_file"] = str(Path(given["file"][-1]).resolve())
    return out


_METRICS_CONFIG_HELP = (
    "metrics setting (repeatable): counter_latencies=BOOL (default true: the "
    "nv_inference_*_duration_us and nv_cache_* counters); summary_latencies=BOOL (default false: "
    "nv_inference_{request,queue,compute_input,compute_infer,compute_output}_summary_us and "
    "nv_cache_{hit,miss}_summary_per_model, quantiles of the last 60 s); "
    "summary_quantiles=Q:ERR,Q:ERR,... (default 0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,"
    "0.999:0.001); histogram_latencies=BOOL (tritonlite, default false: "
    "nv_inference_{request,queue,compute_input,compute_infer,compute_output}_histogram_us, "
    "aggregatable across replicas); histogram_buckets_us=B1:B2:... (ascending upper bounds in "
    "microseconds; default 100:250:500:1000:2500:5000:10000:25000:50000:100000:250000:500000:"
    "1000000)"
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tritonlite",
        allow_abbrev=False,
        description="Triton-Inference-Server-compatible model server (KServe v2 HTTP and gRPC).",
    )
    a = p.add_argument
    a("--version", action="version", version=f"tritonlite {tritonlite.__version__}")
    a(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        default=[],
        metavar="PATH",
        help="model repository path (repeatable)",
    )
    a("--id", dest="server_id", default="triton", help="server identifier in metadata")
    a("--http-port", type=int, default=8000)
    a("--grpc-port", type=int, default=8001)
    a("--metrics-port", type=int, default=8002)
    a("--http-address", default="0.0.0.0")
    a("--grpc-address", default="0.0.0.0")
    a("--metrics-address", default=None)
    a("--allow-http", type=parse_bool, default=True, metavar="BOOL")
    a("--allow-grpc", type=parse_bool, default=True, metavar="BOOL")
    a("--allow-metrics", type=parse_bool, default=True, metavar="BOOL")
    a("--reuse-http-port", type=parse_bool, default=False, metavar="BOOL")
    a("--reuse-grpc-port", type=parse_bool, default=False, metavar="BOOL")
    a("--model-control-mode", default="none", choices=("none", "poll", "explicit"))
    a("--load-model", action="append", default=[], metavar="NAME")
    a("--repository-poll-secs", type=float, default=15.0)
    a("--strict-readiness", type=parse_bool, default=True, metavar="BOOL")
    a("--exit-on-error", type=parse_bool, default=True, metavar="BOOL")
    a("--exit-timeout-secs", type=float, default=30.0)
    a("--disable-auto-complete-config", action="store_true")
    a(
        "--strict-model-config",
        type=parse_bool,
        default=None,
        metavar="BOOL",
        help="deprecated: true disables auto-complete",
    )
    a("--backend-config", action="append", default=[], metavar="BACKEND,KEY=VALUE")
    a("--http-max-input-size", type=int, default=64 * 1024 * 1024, metavar="BYTES")
    a(
        "--http-max-connections",
        type=int,
        default=4096,
        metavar="N",
        help="tritonlite: open HTTP connections served in full (lowered to fit the file "
        "descriptor limit); past it a connection gets one request, health only, and is closed",
    )
    a(
        "--grpc-max-connections",
        type=int,
        default=4096,
        metavar="N",
        help="tritonlite: open gRPC connections (lowered to fit the file descriptor limit); "
        "past it an idle one is closed to make room, or the new one is refused",
    )
    a(
        "--grpc-max-decompressed-size",
        type=int,
        default=256 * 1024 * 1024,
        metavar="BYTES",
        help="tritonlite: the largest size a compressed gRPC request message may inflate to "
        "(native front end); larger is RESOURCE_EXHAUSTED",
    )
    a(
        "--allow-client-shm",
        default="local",
        choices=("local", "true", "false"),
        help="who may register shared memory: loopback peers only (local), anyone, no one",
    )
    a("--log-verbose", type=_log_verbose, default=0, metavar="LEVEL")
    a("--log-info", type=parse_bool, default=True, metavar="BOOL")
    a("--log-warning", type=parse_bool, default=True, metavar="BOOL")
    a("--log-error", type=parse_bool, default=True, metavar="BOOL")
    a("--log-format", default="default", choices=("default", "ISO8601"))
    a(
        "--cache-config",
        action="append",
        default=[],
        metavar="local,size=BYTES",
        help="response cache: one LRU of BYTES shared by the models with response_cache enabled",
    )
    a(
        "--response-cache-byte-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="deprecated: --cache-config local,size=BYTES",
    )
    a("--allow-cpu-metrics", type=parse_bool, default=True, metavar="BOOL")
    a(
        "--allow-gpu-metrics",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="nv_gpu_* metrics through NVML (needs the nvidia-ml-py package and a GPU)",
    )
    a(
        "--metrics-interval-ms",
        type=_interval_ms,
        default=2000,
        metavar="MS",
        help="how often CPU and GPU gauges are refreshed",
    )
    a(
        "--metrics-config",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help=_METRICS_CONFIG_HELP,
    )
    a(
        "--backend-execution-timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="tritonlite: a batch running longer fails with UNAVAILABLE and its instance is "
        "taken out of rotation and rebuilt (default 0: no timeout)",
    )
    a(
        "--health-probe-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="tritonlite: how often idle instances of models with model_warmup run their "
        "warm-up samples as a health probe (0: never)",
    )
    a(
        "--memory-pressure-threshold",
        type=float,
        default=0.05,
        metavar="FRACTION",
        help="tritonlite: while the memory available to the server (cgroup limit, else "
        "/proc/meminfo) is at most FRACTION of its limit, response cache inserts and latency "
        "histogram observations are shed (tritonlite_shed_total); sampled every "
        "--metrics-interval-ms (default 0.05; 0: off; 1: always, to rehearse it)",
    )
    _grpc_flags(a)
    _http_flags(a)
    _trace_flags(a)
    _ignored_and_refused(a)
    return p


def _http_flags(a: Any) -> None:
    a(
        "--frontend",
        default="native",
        choices=("native", "aio"),
        help="tritonlite: the transports under the HTTP and gRPC handlers: its own wire layer "
        "(native; HTTP and gRPC may then share one port) or aiohttp and grpc.aio (aio)",
    )
    a(
        "--busy-poll-us",
        type=int,
        default=200,
        metavar="US",
        help="tritonlite, native front ends: after a request arrives, keep the event loop "
        "polling up to this long for the next one instead of sleeping (adapts to the traffic; "
        "0: off)",
    )
    a(
        "--http-send-thread",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="tritonlite, native HTTP front end: while the event loop is loaded, a thread "
        "writes its small responses to the sockets, so the kernel's send work runs on another "
        "CPU (false: the loop writes them)",
    )
    a(
        "--grpc-send-thread",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="tritonlite, native gRPC front end: the same for its small responses (false: the "
        "loop writes them)",
    )
    a(
        "--loop-slice-us",
        type=int,
        default=0,
        metavar="US",
        help="tritonlite: the CPU slice the event loop thread asks Linux for (6.12 on): a longer "
        "one makes it read more requests per wake-up, which helps dynamically batched models "
        "and costs models without batching (100-100000; 0: the kernel's default)",
    )
    a(
        "--http-use-ssl",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="tritonlite: serve HTTP over TLS",
    )
    a(
        "--http-use-ssl-mutual",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="tritonlite: require and verify client certificates (implies --http-use-ssl)",
    )
    a("--http-server-cert", default=None, metavar="PEM")
    a("--http-server-key", default=None, metavar="PEM")
    a("--http-root-cert", default=None, metavar="PEM")
    a(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<apis>:<key>=<value>",
        help="only requests with header <key>: <value> may use these API groups (repeatable; "
        f"groups: {', '.join(restrict.GROUPS)})",
    )
    a(
        "--http-header-forward-pattern",
        default="",
        metavar="REGEX",
        help="request headers whose name matches become string parameters of /infer requests "
        "(case-insensitive unless the pattern starts with (?-i))",
    )


def _http_options(ns: argparse.Namespace) -> dict[str, Any]:
    return dict(
        http_restricted_api=tuple(ns.http_restricted_api),
        http_header_forward_pattern=ns.http_header_forward_pattern,
        frontend=ns.frontend,
        busy_poll_us=ns.busy_poll_us,
        http_send_thread=ns.http_send_thread,
        grpc_send_thread=ns.grpc_send_thread,
        loop_slice_us=ns.loop_slice_us,
        http_use_ssl=ns.http_use_ssl or ns.http_use_ssl_mutual,
        http_use_ssl_mutual=ns.http_use_ssl_mutual,
        http_server_cert=ns.http_server_cert,
        http_server_key=ns.http_server_key,
        http_root_cert=ns.http_root_cert,
        http_max_connections=ns.http_max_connections,
        grpc_max_connections=ns.grpc_max_connections,
        grpc_max_decompressed_size=ns.grpc_max_decompressed_size,
    )


def _trace_flags(a: Any) -> None:
    a(
        "--trace-config",
        action="append",
        default=[],
        metavar="[triton,]SETTING=VALUE",
        help="tracing: level=OFF|TIMESTAMPS (repeatable), rate=N (trace every N-th request, "
        "default 1000), count=N (traces to collect, -1: no limit), mode=triton; "
        "triton,file=PATH (the trace JSON), triton,log-frequency=N (write PATH.0, PATH.1, "
        "... every N traces; 0: write PATH at exit)",
    )
    a("--trace-file", default=None, help="deprecated: --trace-config triton,file=PATH")
    a("--trace-level", action="append", default=[], help="deprecated: --trace-config level=")
    a("--trace-rate", default=None, help="deprecated: --trace-config rate=N")
    a("--trace-count", default=None, help="deprecated: --trace-config count=N")
    a(
        "--trace-log-frequency",
        default=None,
        help="deprecated: --trace-config triton,log-frequency=N",
    )
    a("--log-file", default="", metavar="PATH", help="write the log to PATH instead of stderr")


def _grpc_flags(a: Any) -> None:
    a(
        "--grpc-infer-response-compression-level",
        default="none",
        choices=("none", "low", "medium", "high"),
    )
    a("--grpc-use-ssl", type=parse_bool, default=False, metavar="BOOL")
    a(
        "--grpc-use-ssl-mutual",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="require and verify client certificates (implies --grpc-use-ssl)",
    )
    a("--grpc-server-cert", default=None, metavar="PEM")
    a("--grpc-server-key", default=None, metavar="PEM")
    a("--grpc-root-cert", default=None, metavar="PEM")
    a("--grpc-keepalive-time", type=int, default=7_200_000, metavar="MS")
    a("--grpc-keepalive-timeout", type=int, default=20_000, metavar="MS")
    a("--grpc-keepalive-permit-without-calls", type=parse_bool, default=False, metavar="BOOL")
    a("--grpc-http2-max-pings-without-data", type=int, default=2)
    a("--grpc-http2-min-recv-ping-interval-without-data", type=int, default=300_000, metavar="MS")
    a("--grpc-http2-max-ping-strikes", type=int, default=2)
    a("--grpc-max-connection-age", type=int, default=None, metavar="MS")
    a("--grpc-max-connection-age-grace", type=int, default=None, metavar="MS")
    a(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocols>:<key>=<value>",
        help="only calls with metadata triton-grpc-protocol-<key>: <value> may use these groups "
        "(repeatable; the groups of --http-restricted-api)",
    )
    a(
        "--grpc-header-forward-pattern",
        default="",
        metavar="REGEX",
        help="metadata whose key matches becomes string parameters of inference requests",
    )


def _grpc_options(ns: argparse.Namespace) -> dict[str, Any]:
    return dict(
        grpc_infer_response_compression_level=ns.grpc_infer_response_compression_level,
        grpc_use_ssl=ns.grpc_use_ssl or ns.grpc_use_ssl_mutual,
        grpc_use_ssl_mutual=ns.grpc_use_ssl_mutual,
        grpc_server_cert=ns.grpc_server_cert,
        grpc_server_key=ns.grpc_server_key,
        grpc_root_cert=ns.grpc_root_cert,
        grpc_keepalive_time_ms=ns.grpc_keepalive_time,
        grpc_keepalive_timeout_ms=ns.grpc_keepalive_timeout,
        grpc_keepalive_permit_without_calls=ns.grpc_keepalive_permit_without_calls,
        grpc_http2_max_pings_without_data=ns.grpc_http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data_ms=(
            ns.grpc_http2_min_recv_ping_interval_without_data
        ),
        grpc_http2_max_ping_strikes=ns.grpc_http2_max_ping_strikes,
        grpc_max_connection_age_ms=ns.grpc_max_connection_age,
        grpc_max_connection_age_grace_ms=ns.grpc_max_connection_age_grace,
        grpc_restricted_protocol=tuple(ns.grpc_restricted_protocol),
        grpc_header_forward_pattern=ns.grpc_header_forward_pattern,
    )


def _check_frontend_rules(options: ServerOptions) -> None:
    """Refuse malformed restriction specs and patterns now, with tritonserver's messages;
    warn about a gRPC key that can never match."""
    for spec, parse in (
        ("--http-restricted-api", restrict.http_restrictions),
        ("--grpc-restricted-protocol", restrict.grpc_restrictions),
    ):
        try:
            rules = parse(options)
        except ValueError as exc:
            raise SystemExit(f'tritonlite: error: Bad option: "{spec}". {exc}') from None
        for group, rule in rules.items():
            if spec.startswith("--grpc") and rule.key != rule.key.lower():
                print(
                    f"Warning: --grpc-restricted-protocol: the key '{rule.key}' of group "
                    f"'{group}' has upper-case letters; gRPC metadata keys are lower-case, "
                    "so no call can unlock this group (as in Triton)",
                    file=sys.stderr,
                )
    try:
        http_forward(options)
        grpc_forward(options)
    except ValueError as exc:
        raise SystemExit(f"tritonlite: error: {exc}") from None


def options_from_args(argv: list[str]) -> ServerOptions:
    ns = build_parser().parse_args(argv)
    _check_ignored_and_refused(ns)
    _warn_unapplied(argv, ns)
    if not ns.model_repository:
        raise SystemExit("tritonlite: error: --model-repository is required")
    backend_config = _backend_config(ns.backend_config)
    auto_complete = not ns.disable_auto_complete_config and ns.strict_model_config is not True
    cache_size = _cache_size(ns.cache_config, ns.response_cache_byte_size)
    max_batch = backend_config.get("onnxruntime", {}).get(
        "default-max-batch-size",
        backend_config.get("default", {}).get("default-max-batch-size", "4"),
    )
    try:
        metrics_config = MetricsConfig.parse(ns.metrics_config)
        options = ServerOptions(
            model_repositories=tuple(Path(p).resolve() for p in ns.model_repository),
            server_id=ns.server_id,
            http_port=ns.http_port,
            grpc_port=ns.grpc_port,
            metrics_port=ns.metrics_port,
            http_address=ns.http_address,
            grpc_address=ns.grpc_address,
            metrics_address=ns.metrics_address,
            allow_http=ns.allow_http,
            allow_grpc=ns.allow_grpc,
            allow_metrics=ns.allow_metrics,
            reuse_http_port=ns.reuse_http_port,
            reuse_grpc_port=ns.reuse_grpc_port,
            model_control_mode=ns.model_control_mode,
            load_models=tuple(ns.load_model),
            repository_poll_secs=ns.repository_poll_secs,
            strict_readiness=ns.strict_readiness,
            exit_on_error=ns.exit_on_error,
            exit_timeout_secs=ns.exit_timeout_secs,
            auto_complete_config=auto_complete,
            default_max_batch_size=int(max_batch),
            http_max_input_size=ns.http_max_input_size,
            allow_client_shm=ns.allow_client_shm,
            log_verbose=ns.log_verbose,
            log_info=ns.log_info,
            log_warning=ns.log_warning,
            log_error=ns.log_error,
            log_format=ns.log_format,
            backend_config=backend_config,
            response_cache_byte_size=cache_size,
            allow_cpu_metrics=ns.allow_cpu_metrics,
            allow_gpu_metrics=ns.allow_gpu_metrics,
            metrics_interval_ms=ns.metrics_interval_ms,
            metrics_config=metrics_config,
            log_file=ns.log_file,
            backend_execution_timeout_s=ns.backend_execution_timeout,
            health_probe_interval_s=ns.health_probe_interval,
            memory_pressure_threshold=ns.memory_pressure_threshold,
            **_grpc_options(ns),
            **_http_options(ns),
            **_trace_options(ns),
        )
    except ValueError as exc:
        raise SystemExit(f"tritonlite: error: {exc}") from None
    _check_frontend_rules(options)
    return options


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["tune"]:  # ``tritonlite tune ...``: the config tuner, not a server
        from tritonlite.tune.cli import main as tune_main

        return tune_main(args[1:])
    from tritonlite import logs, server

    if "--version" in args:
        print(
            f"tritonlite {tritonlite.__version__} (Triton {tritonlite.TRITON_VERSION} API); "
            f"compiled paths: {server.compiled_paths()}"
        )
        return 0
    options = options_from_args(args)
    logs.configure(options.log_verbose, options.log_format == "ISO8601", options.log_file)
    return server.run(options)

"""Every benchmark in one invocation (``make bench``): perf_analyzer sweeps, beside real Triton.

Run: ``.venv/bin/python bench/run_all.py [--quick] [--skip-triton] [--skip-micro]``.

1. perf_analyzer (``$PERF_ANALYZER`` or ``.tools/perf_analyzer/perf_analyzer``), HTTP and gRPC,
   concurrency 1/4/16/64, the same flags for every server, servers run one at a time:
   * ``tritonlite-onnx``: tritonlite serving the ONNX twins of bench/models.py: ``add_sub``,
     ``mlp`` (dynamic batching, ``models.MLP_QUEUE_DELAY_US`` delay) and ``mlp_nobatch`` (no
     dynamic_batching block);
   * ``triton-python``: the real tritonserver (tools/triton-reference.sh; its only backend is
     Python) serving the Python-backend twins (``model.py``, numpy) of ``add_sub`` and ``mlp``,
     plus ``mlp_nobatch`` at concurrency 16 and 64 only (Triton's own batching gain, for scale);
   * ``tritonlite-python``: tritonlite serving the identical model.py files, when tritonlite's
     Python backend loads them (rows marked "not run" otherwise).
2. The micro-benchmarks bench_scheduler.py, bench_gather.py, bench_grpc.py and bench_cache.py
   (when present).
3. Writes to bench/results/: ``perf_<server>_<model>_<protocol>.csv`` (perf_analyzer's ``-f``
   CSV, one row per concurrency), ``logs/`` (every perf_analyzer stdout and server log),
   ``summary.csv``, ``summary.md`` (also printed) and ``plot_<model>_<protocol>.png``.

The machine this was written on has 2 cores shared by server and client, and other work: compare
only rows from the same invocation, and read ratios rather than absolute numbers.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import models
import plot
from perf import (
    ROOT,
    Point,
    Settings,
    TritonliteServer,
    TritonServer,
    check_answer,
    model_ready,
    perf_analyzer_bin,
    run_point,
    server_p99_us,
    write_merged_csv,
)

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
SERVERS = ("tritonlite-onnx", "triton-python", "tritonlite-python")
PROTOCOLS = ("http", "grpc")
CONCURRENCY = (1, 4, 16, 64)
RATIO_CONCURRENCY = (16, 64)


@dataclass
class Block:
    """One server process and the points measured against it."""

    server: str  # tritonlite-onnx | triton-python | tritonlite-python
    backend: str
    models: dict[str, tuple[int, ...]]  # model -> concurrencies


# tritonlite keeps request-duration summaries (Triton's flag), read after each point
SUMMARIES = ("--metrics-config", "summary_latencies=true")


def log(msg: str, t0: float = time.monotonic()) -> None:
    print(f"[{time.monotonic() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)


# -- the machine -----------------------------------------------------------------------------------
def machine_info(pa: Path) -> dict[str, str]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    import numpy
    import onnxruntime

    def out(cmd: list[str]) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
            return (proc.stdout + proc.stderr).strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    pa_version = next((ln for ln in out([str(pa), "--version"]).splitlines() if ln.strip()), "?")
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "onnxruntime": onnxruntime.__version__,
        "perf_analyzer": pa_version,
        "tritonlite": out([sys.executable, "-m", "tritonlite", "--version"]),
        "git": out(["git", "rev-parse", "--short", "HEAD"])
        + (" (+ uncommitted changes)" if out(["git", "status", "--porcelain"]) else ""),
    }


# -- perf_analyzer blocks --------------------------------------------------------------------------
def run_block(
    block: Block,
    server: TritonliteServer | TritonServer,
    pa: Path,
    settings: Settings,
    protocols: tuple[str, ...],
    results: Path,
) -> list[Point]:
    points: list[Point] = []
    ports: dict[str, int] = {}
    reason = ""
    try:
        ports = server.start()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        reason = f"not run: server did not start ({str(exc).splitlines()[0][:100]})"
    log(
        f"{block.server}: started (pid {server.pid}, ports {ports})"
        if ports
        else f"{block.server}: {reason}"
    )
    try:
        for model, concurrencies in block.models.items():
            model_reason = reason
            if not model_reason and not model_ready(ports["http"], model):
                model_reason = f"not run: {unready_reason(ports['http'], model)}"
            if not model_reason and (wrong := check_answer(ports["http"], model)):
                model_reason = f"not run: {wrong}"
            for proto in protocols:
                parts: list[list[str]] = []
                for c in concurrencies:
                    p = Point(block.server, block.backend, model, proto, c)
                    if model_reason:
                        p.status = model_reason
                    elif proto not in ports:
                        p.status = f"not run: no {proto} endpoint"
                    else:
                        tag = f"{block.server}_{model}_{proto}_c{c}"
                        _, lines = run_point(
                            pa,
                            p,
                            f"127.0.0.1:{ports[proto]}",
                            settings,
                            results / f".{tag}.csv",
                            results / "logs" / f"{tag}.log",
                        )
                        if lines:
                            parts.append(lines)
                        if "metrics" in ports:
                            p.server_p99_us = server_p99_us(ports["metrics"], model)
                        log(
                            f"{tag}: {p.status}, {p.throughput:.0f} infer/s, p99 "
                            f"{p.p99_us:.0f} us, batch {p.avg_batch:.1f} ({p.wall_s:.0f} s)"
                        )
                    points.append(p)
                write_merged_csv(results / f"perf_{block.server}_{model}_{proto}.csv", parts)
    finally:
        server.stop()
    return points


def unready_reason(port: int, model: str) -> str:
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/repository/index", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            for entry in json.loads(r.read()):
                if entry.get("name") == model:
                    return f"{entry.get('state', '?')}: {entry.get('reason', '')}"[:140]
    except OSError:
        pass
    return "model not ready"


# -- micro-benchmarks (other people's scripts, run as they are) ------------------------------------
def run_micro(script: str, args: list[str], results: Path, timeout_s: float = 300) -> str:
    path = BENCH / script
    if not path.exists():
        return f"_{script} is not in this tree yet: not run._"
    log(f"{script} {' '.join(args)}")
    try:
        proc = subprocess.run(
            [sys.executable, str(path), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"_{script} timed out after {timeout_s:.0f} s._"
    (results / "logs").mkdir(parents=True, exist_ok=True)
    (results / "logs" / f"{Path(script).stem}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return f"_{script} failed (rc {proc.returncode}):_\n```\n{proc.stderr[-1500:]}\n```"
    return proc.stdout.strip()


# -- the summary -----------------------------------------------------------------------------------
def fmt(v: float, digits: int = 0) -> str:
    return f"{v:,.{digits}f}"


def find(points: list[Point], server: str, model: str, proto: str, c: int) -> Point | None:
    for p in points:
        if (p.server, p.model, p.protocol, p.concurrency) == (server, model, proto, c) and p.ok:
            return p
    return None


def table_points(points: list[Point]) -> list[str]:
    out = [
        "| server | backend | model | protocol | conc. | infer/s | p50 µs | p99 µs | "
        "avg batch | srv overhead µs | srv queue µs | srv compute in µs | "
        "srv compute infer µs | srv compute out µs | load 1m | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        if not p.ok:
            out.append(
                f"| {p.server} | {p.backend} | {p.model} | {p.protocol} | {p.concurrency} "
                f"| – | – | – | – | – | – | – | – | – | – | {p.status} |"
            )
            continue
        out.append(
            f"| {p.server} | {p.backend} | {p.model} | {p.protocol} | {p.concurrency} | "
            f"{fmt(p.throughput, 1)} | {fmt(p.p50_us)} | {fmt(p.p99_us)} | {p.avg_batch:.2f} | "
            f"{fmt(p.server_overhead_us)} | {fmt(p.server_queue_us)} | "
            f"{fmt(p.server_compute_input_us)} | {fmt(p.server_compute_infer_us)} | "
            f"{fmt(p.server_compute_output_us)} | {p.loadavg_1m:.1f} | {p.status} |"
        )
    return out


def table_batching(points: list[Point], protocols: tuple[str, ...]) -> list[str]:
    delay = models.MLP_QUEUE_DELAY_US
    out = [
        f"MLP, dynamic batching on (`max_queue_delay_microseconds: {delay}`) vs off. "
        "Goal: throughput ratio ≥ 3×; p99 (on) ≤ max_queue_delay + 2 × one batch's compute, "
        "where one batch's compute is the server's compute input + infer + output per "
        "request in the batching-on run (each request of a batch is charged its batch's "
        "duration).",
        "",
        "p99 is perf_analyzer's (client side: the closed-loop client threads share the "
        "machine with the server); server p99 is the server's own request-duration summary "
        "(tritonlite only: Triton's summary spans 60 s, so it would mix points).",
        "",
        "| server | protocol | conc. | infer/s on | infer/s off | **on/off** | ≥ 3×? | "
        "avg batch on | p99 µs on | p99 µs off | bound µs | p99 ≤ bound? | server p99 µs on "
        "| server p99 ≤ bound? |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server in ("tritonlite-onnx", "triton-python", "tritonlite-python"):
        for proto in protocols:
            for c in RATIO_CONCURRENCY:
                on = find(points, server, "mlp", proto, c)
                off = find(points, server, "mlp_nobatch", proto, c)
                if on is None or off is None:
                    continue
                ratio = on.throughput / off.throughput if off.throughput else 0.0
                batch = (
                    on.server_compute_input_us
                    + on.server_compute_infer_us
                    + on.server_compute_output_us
                )
                bound = delay + 2 * batch
                out.append(
                    f"| {server} | {proto} | {c} | {fmt(on.throughput, 1)} | "
                    f"{fmt(off.throughput, 1)} | **{ratio:.2f}×** | "
                    f"{'yes' if ratio >= 3 else 'NO'} | {on.avg_batch:.1f} | {fmt(on.p99_us)} | "
                    f"{fmt(off.p99_us)} | {fmt(bound)} | {'yes' if on.p99_us <= bound else 'NO'} | "
                    + (
                        f"{fmt(on.server_p99_us)} | "
                        f"{'yes' if on.server_p99_us <= bound else 'NO'} |"
                        if on.server_p99_us
                        else "– | – |"
                    )
                )
    return out


def table_vs_triton(points: list[Point], protocols: tuple[str, ...]) -> list[str]:
    out = [
        "tritonlite / Triton at the same concurrency and client flags. Triton always ran the "
        "**Python-backend twin** (model.py, numpy); `tritonlite-onnx` rows ran the ONNX twin "
        "(ONNX Runtime), `tritonlite-python` rows the identical model.py files. Throughput "
        "ratio > 1 and p99 ratio < 1 favour tritonlite.",
        "",
        "| model | protocol | conc. | Triton (Python) infer/s | tritonlite (ONNX) infer/s "
        "| **thr. ratio ONNX/Triton** | p99 ratio ONNX/Triton | tritonlite (Python) infer/s "
        "| **thr. ratio Python/Triton** | p99 ratio Python/Triton |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in ("add_sub", "mlp", "mlp_nobatch"):
        for proto in protocols:
            for c in CONCURRENCY:
                t = find(points, "triton-python", model, proto, c)
                if t is None:
                    continue
                cells = []
                for server in ("tritonlite-onnx", "tritonlite-python"):
                    p = find(points, server, model, proto, c)
                    if p is None:
                        cells += ["–", "–", "–"]
                    else:
                        cells += [
                            fmt(p.throughput, 1),
                            f"**{p.throughput / t.throughput:.2f}×**",
                            f"{p.p99_us / t.p99_us:.2f}×" if t.p99_us else "–",
                        ]
                out.append(
                    f"| {model} | {proto} | {c} | {fmt(t.throughput, 1)} | "
                    f"{cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {cells[4]} | "
                    f"{cells[5]} |"
                )
    return out


def table_overhead(points: list[Point], protocols: tuple[str, ...]) -> list[str]:
    out = [
        "add_sub at concurrency 1: perf_analyzer's server-side breakdown (from the statistics "
        "extension). Goal for tritonlite: overhead + queue + compute input + compute output "
        "≤ 30 µs.",
        "",
        "| server | protocol | overhead µs | queue µs | compute input µs | compute infer µs "
        "| compute output µs | **overhead+queue+in+out µs** | ≤ 30 µs? | client p50 µs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server in ("tritonlite-onnx", "triton-python", "tritonlite-python"):
        for proto in protocols:
            p = find(points, server, "add_sub", proto, 1)
            if p is None:
                continue
            total = p.server_non_compute_us
            out.append(
                f"| {server} | {proto} | {fmt(p.server_overhead_us)} | "
                f"{fmt(p.server_queue_us)} | {fmt(p.server_compute_input_us)} | "
                f"{fmt(p.server_compute_infer_us)} | {fmt(p.server_compute_output_us)} | "
                f"**{fmt(total)}** | {'yes' if total <= 30 else 'NO'} | {fmt(p.p50_us)} |"
            )
    return out


def summary_markdown(
    points: list[Point],
    machine: dict[str, str],
    settings: Settings,
    protocols: tuple[str, ...],
    command: str,
    micro: dict[str, str],
    plots: list[Path],
) -> str:
    md = [
        "# tritonlite benchmark summary",
        "",
        f"Command: `{command}`  ",
        f"Date: {machine['date']}  ",
        f"Machine: {machine['nproc']} cores ({machine['cpu']}), {machine['memory']} RAM, "
        f"{machine['os']}  ",
        f"Software: Python {machine['python']}, numpy {machine['numpy']}, onnxruntime "
        f"{machine['onnxruntime']}, {machine['perf_analyzer']}, {machine['tritonlite']}, "
        f"git {machine['git']}  ",
        f"perf_analyzer flags (every server): `-i http|grpc --concurrency-range C:C "
        f"{' '.join(settings.flags())} -f ...` (synchronous client, one thread per request "
        "in flight, batch size 1)",
        "",
        "Server and perf_analyzer share the same cores; servers ran one at a time. Compare rows "
        "of this run only. 1-minute load average at the start of the points: "
        f"{load_range(points)} (on {machine['nproc']} cores; above the core count means other "
        "work was competing).",
        "",
        "## Dynamic batching on vs off (MLP)",
        "",
        *table_batching(points, protocols),
        "",
        "## tritonlite vs Triton",
        "",
        *table_vs_triton(points, protocols),
        "",
        "## Server-side overhead at concurrency 1 (add_sub)",
        "",
        *table_overhead(points, protocols),
        "",
        "## Every point",
        "",
        *table_points(points),
        "",
    ]
    for title, text in micro.items():
        md += [f"## {title}", "", text, ""]
    if plots:
        md += ["## Plots", "", *(f"![{p.stem}]({p.name})" for p in plots), ""]
    return "\n".join(md)


def load_range(points: list[Point]) -> str:
    loads = [p.loadavg_1m for p in points if p.ok]
    return f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–"


def write_summary_csv(path: Path, points: list[Point]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=Point.columns())
        w.writeheader()
        for p in points:
            w.writerow(p.row())


# -- main ------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: concurrency 1 and 16, 1 s windows, no micro-benchmarks",
    )
    ap.add_argument("--skip-triton", action="store_true", help="no real-Triton rows")
    ap.add_argument(
        "--skip-micro",
        action="store_true",
        help="skip bench_scheduler/bench_gather/bench_grpc/bench_cache",
    )
    ap.add_argument(
        "--models", default="", help="only these models (comma-separated: add_sub,mlp,mlp_nobatch)"
    )
    ap.add_argument(
        "--servers", default=",".join(SERVERS), help="which server blocks to run, in this order"
    )
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    ap.add_argument("--measurement-interval", type=int, default=2000, metavar="MS")
    ap.add_argument("--stability-percentage", type=int, default=50)
    ap.add_argument("--max-trials", type=int, default=6)
    ap.add_argument(
        "--triton-dir",
        type=Path,
        default=ROOT / ".tools" / "triton",
        help="tools/triton-reference.sh install dir (installed there if missing)",
    )
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    command = " ".join([".venv/bin/python", "bench/run_all.py", *sys.argv[1:]])
    protocols = tuple(p for p in args.protocols.split(",") if p)
    conc = tuple(int(c) for c in args.concurrency.split(",") if c)
    settings = Settings(args.measurement_interval, args.stability_percentage, args.max_trials)
    if args.quick:
        conc = (1, 16)
        settings = Settings(1000, max(args.stability_percentage, 60), 4)
        args.skip_micro = True
    ratio_conc = tuple(c for c in conc if c in RATIO_CONCURRENCY) or conc[-1:]
    results: Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(results / "logs", ignore_errors=True)
    for old in [*results.glob("perf_*.csv"), *results.glob("plot_*.png")]:
        old.unlink()
    pa = perf_analyzer_bin()
    machine = machine_info(pa)
    log(f"perf_analyzer {pa}; {machine['nproc']} cores, {machine['cpu']}")

    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="tritonlite-bench-") as tmp:
        onnx_repo = models.write_onnx_repo(Path(tmp) / "onnx")
        py_repo = models.write_python_repo(Path(tmp) / "python")
        blocks: list[tuple[Block, TritonliteServer | TritonServer]] = [
            (
                Block(
                    "tritonlite-onnx",
                    "onnxruntime",
                    {"add_sub": conc, "mlp": conc, "mlp_nobatch": conc},
                ),
                TritonliteServer(
                    onnx_repo, results / "logs" / "server_tritonlite-onnx.log", extra=SUMMARIES
                ),
            ),
        ]
        if not args.skip_triton:
            py_models = {"add_sub": conc, "mlp": conc, "mlp_nobatch": ratio_conc}
            blocks.append(
                (
                    Block("triton-python", "python", py_models),
                    TritonServer(args.triton_dir.resolve(), py_repo),
                )
            )
            # Python-backend models fail to load (UNAVAILABLE) while tritonlite lacks that
            # backend: don't exit, report why per model.
            blocks.append(
                (
                    Block("tritonlite-python", "python", py_models),
                    TritonliteServer(
                        py_repo,
                        results / "logs" / "server_tritonlite-python.log",
                        extra=("--exit-on-error=false", *SUMMARIES),
                        ready_path="/v2/health/live",
                    ),
                )
            )
        wanted = args.servers.split(",")
        blocks.sort(key=lambda b: wanted.index(b[0].server) if b[0].server in wanted else 99)
        for block, server in blocks:
            if block.server not in wanted:
                continue
            if args.models:
                keep = set(args.models.split(","))
                block.models = {m: c for m, c in block.models.items() if m in keep}
            points += run_block(block, server, pa, settings, protocols, results)

    micro: dict[str, str] = {}
    if not args.skip_micro:
        micro["Scheduler cost per request (bench_scheduler.py)"] = run_micro(
            "bench_scheduler.py", [], results
        )
        micro["Gather kernel (bench_gather.py)"] = run_micro("bench_gather.py", [], results)
        micro["gRPC front end vs bare grpc.aio echo (bench_grpc.py)"] = run_micro(
            "bench_grpc.py", [], results
        )
        micro["Response cache hit vs execution (bench_cache.py)"] = run_micro(
            "bench_cache.py", [], results
        )

    write_summary_csv(results / "summary.csv", points)
    plots = plot.plot([{k: str(v) for k, v in p.row().items()} for p in points], results)
    md = summary_markdown(points, machine, settings, protocols, command, micro, plots)
    (results / "summary.md").write_text(md)
    print(md)
    log(f"wrote {results / 'summary.md'}, summary.csv, {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())

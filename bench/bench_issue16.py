"""Issue 16's performance tables in one command, each table from one run, variants alternating.

    .venv/bin/python bench/bench_issue16.py [--rounds 3]
        [--tables frontends,features,python,mlp,wrk] [--root PATH] [--baseline PATH]
        [--triton-dir .tools/triton] [--interval-ms 3000]

Tables (every figure the median of ``--rounds`` rounds, with the rounds beside it; every round
starts each variant's server in turn, so the variants of one table see the same machine):

* ``frontends``: server CPU per request (``bench/cpu.py``: every thread's user + system time over
  the model's success count) under perf_analyzer at concurrency 16 and 1, HTTP and gRPC, on the
  ONNX ``add_sub``: ``--frontend native``, native on one shared port, ``--frontend aio`` and
  (``--baseline PATH``) another checkout's tritonlite with its default front ends.
  Targets: native <= 120 µs/request over HTTP, <= 150 µs over gRPC (c=16).
* ``features``: the native front end under perf_analyzer ``--streaming`` (gRPC) and
  ``--shared-memory=system`` (HTTP and gRPC), beside the plain runs, at concurrency 16.
* ``python``: the same Python-backend ``model.py`` add_sub on tritonlite (native), on the real
  Triton (``tools/triton-reference.sh``, ``--triton-dir``) and (``--baseline PATH``) on another
  checkout's tritonlite, concurrency 1 and 4, both protocols.
  Goal: tritonlite >= 2x Triton's throughput and <= 0.5x its p50. (Triton runs model.py in a
  stub process of its own: the "child processes" column counts it, the CPU column does not.)
* ``mlp``: the ONNX MLP (4 x 1024^2 FP32) with dynamic batching (``mlp``) vs without
  (``mlp_nobatch``) at concurrency 16, both protocols. Goal: >= 3x. With ``mlp-triton`` in
  ``--tables`` as well, the real Triton serving the MLP's numpy ``model.py`` twin (the same
  weights, dynamic batching vs none) runs in the same rounds: its gain on the same machine, for
  scale (how much a lone row costs against a batch's depends on the machine's caches).
* ``wrk``: a light client: wrk, one thread, 16 connections, JSON add_sub (no binary data), 10 s:
  requests per second, CPU µs per request and the loop thread's utilisation, native vs aio vs
  the baseline.

``--root PATH`` runs the tritonlite of another checkout for every non-baseline variant (a
worktree keeps the figures apart from edits in progress; build its extensions in place first).
Prints Markdown tables (plus the machine's ``uptime`` before and after each table) and writes
``bench/results/issue16_<tables>.json``. ``--triton-dir``: give a directory of your own (a copy
of an installed one will do): ``tools/triton-reference.sh stop`` stops whatever started last
from a directory, another user's server included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import Cpu, measure  # noqa: E402
from models import write_onnx_repo, write_python_repo  # noqa: E402
from perf import (  # noqa: E402
    ROOT,
    Point,
    Settings,
    TritonliteServer,
    TritonServer,
    free_ports,
    perf_analyzer_bin,
    run_point,
)

RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs" / "issue16"
ADD_SUB_JSON = json.dumps(
    {
        "inputs": [
            {
                "name": f"INPUT{i}",
                "datatype": "FP32",
                "shape": [1, 16],
                "data": [float(x) for x in range(16)],
            }
            for i in (0, 1)
        ]
    }
)


@dataclass
class Load:
    """One measured load: perf_analyzer (``tool='pa'``) or wrk against one model."""

    label: str
    protocol: str
    model: str
    concurrency: int
    extra: tuple[str, ...] = ()
    tool: str = "pa"


@dataclass
class Run:
    cpu: Cpu
    throughput: float
    p50_us: float
    status: str
    loadavg: float
    command: str


@dataclass
class Variant:
    name: str
    start: Callable[[], tuple[object, dict[str, int], int]]  # -> (server, ports, pid)
    loads: list[Load] = field(default_factory=list)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def tl_server(
    name: str, repo: Path, root: Path, extra: tuple[str, ...] = ()
) -> Callable[[], tuple[object, dict[str, int], int]]:
    def start() -> tuple[object, dict[str, int], int]:
        args = extra
        if "shared" in name:
            port = str(free_ports(1)[0])
            args = (*args, "--http-port", port, "--grpc-port", port)
        s = TritonliteServer(repo, LOGS / f"server_{name}.log", args, root=root)
        ports = s.start()
        return s, ports, s.pid

    return start


def triton_server(tool_dir: Path, repo: Path) -> Callable[[], tuple[object, dict[str, int], int]]:
    def start() -> tuple[object, dict[str, int], int]:
        s = TritonServer(tool_dir, repo)
        ports = s.start()
        return s, ports, s.pid

    return start


def run_wrk(url: str, load: Load, seconds: int, log: Path) -> tuple[float, float, str, str]:
    """(requests/s, p50 µs, status, command) of one wrk run posting ADD_SUB_JSON."""
    script = LOGS / "post_add_sub.lua"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        f"wrk.method = 'POST'\nwrk.body = [[{ADD_SUB_JSON}]]\n"
        "wrk.headers['Content-Type'] = 'application/json'\n"
    )
    cmd = [
        "wrk",
        "-t1",
        f"-c{load.concurrency}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(script),
        f"http://{url}/v2/models/{load.model}/infer",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    out = proc.stdout + proc.stderr
    log.write_text(f"$ {' '.join(cmd)}\n\n{out}")
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    p50 = re.search(r"50%\s+([0-9.]+)(us|ms|s)\b", out)
    p50_us = 0.0
    if p50:
        p50_us = float(p50.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[p50.group(2)]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    status = (
        "ok"
        if proc.returncode == 0 and rate and not bad
        else f"failed: rc {proc.returncode}{', ' + bad.group(0) if bad else ''}"
    )
    return float(rate.group(1)) if rate else 0.0, p50_us, status, " ".join(cmd)


def _append(
    out: list[tuple[float, float, str, str]],
    fn: Callable[..., tuple[float, float, str, str]],
    *args: object,
) -> None:
    out.append(fn(*args))


def run_table(
    title: str, variants: list[Variant], rounds: int, settings: Settings
) -> dict[tuple[str, str], list[Run]]:
    pa = perf_analyzer_bin()
    rows: dict[tuple[str, str], list[Run]] = {}
    print(f"\n### {title}\n\n`{uptime()}` (before)\n", flush=True)
    for rnd in range(rounds):
        for v in variants:
            server, ports, pid = v.start()
            try:
                for load in v.loads:
                    url = f"127.0.0.1:{ports[load.protocol]}"
                    log = LOGS / f"{title.split()[0]}_{v.name}_{load.label}_{rnd}.log"
                    log.parent.mkdir(parents=True, exist_ok=True)
                    if load.tool == "wrk":
                        res: list[tuple[float, float, str, str]] = []
                        cpu = measure(
                            pid,
                            ports["http"],
                            load.model,
                            partial(_append, res, run_wrk, url, load, 10, log),
                        )
                        rate, p50, status, command = res[0]
                    else:
                        point = Point(v.name, "", load.model, load.protocol, load.concurrency)
                        s = Settings(
                            settings.measurement_interval_ms,
                            settings.stability_percentage,
                            settings.max_trials,
                            settings.timeout_s,
                            load.extra,
                        )
                        cpu = measure(
                            pid,
                            ports["http"],
                            load.model,
                            partial(run_point, pa, point, url, s, LOGS / "pa.csv", log),
                        )
                        rate, p50, status, command = (
                            point.throughput,
                            point.p50_us,
                            point.status,
                            point.command,
                        )
                    run = Run(cpu, rate, p50, status, os.getloadavg()[0], command)
                    rows.setdefault((v.name, load.label), []).append(run)
                    print(
                        f"<!-- round {rnd} {v.name:8} {load.label:22} {cpu.cpu_us:6.1f} us/req "
                        f"(kernel {cpu.kernel_us:5.1f}, loop busy {cpu.loop_busy:.2f}, "
                        f"children {cpu.children_us:5.1f}) "
                        f"{rate:8.0f}/s p50 {p50:7.0f} us load {run.loadavg:.1f} "
                        f"{status} -->",
                        flush=True,
                    )
            finally:
                server.stop()  # type: ignore[attr-defined]
    med = statistics.median
    print(
        "\n| variant | load | CPU µs/req: median (rounds) | kernel µs | child processes µs "
        "| loop busy | req/s: median (rounds) | p50 µs | status |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, label), runs in rows.items():
        cpus = [r.cpu for r in runs]
        print(
            f"| {name} | {label} | {med(c.cpu_us for c in cpus):.0f} "
            f"({', '.join(f'{c.cpu_us:.0f}' for c in cpus)}) "
            f"| {med(c.kernel_us for c in cpus):.0f} | {med(c.children_us for c in cpus):.0f} "
            f"| {med(c.loop_busy for c in cpus):.2f} "
            f"| {med(r.throughput for r in runs):,.0f} "
            f"({', '.join(f'{r.throughput:,.0f}' for r in runs)}) "
            f"| {med(r.p50_us for r in runs):,.0f} "
            f"| {'ok' if all(r.status.startswith('ok') for r in runs) else runs[-1].status} |"
        )
    print(f"\n`{uptime()}` (after)\n", flush=True)
    return rows


def ratios(
    rows: dict[tuple[str, str], list[Run]], num: tuple[str, str], den: tuple[str, str], what: str
) -> str:
    """Median of the per-round ratios (same round: the same machine state)."""
    a, b = rows.get(num, []), rows.get(den, [])
    per = []
    for x, y in zip(a, b):
        if what == "throughput" and y.throughput:
            per.append(x.throughput / y.throughput)
        elif what == "p50" and y.p50_us:
            per.append(x.p50_us / y.p50_us)
    if not per:
        return "n/a"
    return f"{statistics.median(per):.2f}x ({', '.join(f'{r:.2f}' for r in per)})"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tables", default="frontends,features,python,mlp,wrk")
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--triton-dir", type=Path, default=ROOT / ".tools" / "triton")
    ap.add_argument("--interval-ms", type=int, default=3000)
    a = ap.parse_args()
    settings = Settings(
        measurement_interval_ms=a.interval_ms, stability_percentage=50, max_trials=6
    )
    tables = a.tables.split(",")
    if "wrk" in tables and shutil.which("wrk") is None:  # say so before the other tables run
        print("wrk is not installed (apt-get install wrk), or leave wrk out of --tables")
        return 2
    root = a.root.resolve()
    doc: dict[str, object] = {
        "uptime": uptime(),
        "root": str(root),
        "git": subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }
    print(f"root {root} (git {doc['git']}), nproc {os.cpu_count()}, `{doc['uptime']}`")
    native = ("--frontend", "native")
    with tempfile.TemporaryDirectory() as tmp:
        onnx = write_onnx_repo(Path(tmp) / "onnx", ("add_sub", "mlp", "mlp_nobatch"))
        if "frontends" in tables:
            loads = [Load(f"{p} c={c}", p, "add_sub", c) for p in ("http", "grpc") for c in (16, 1)]
            vs = [
                Variant("native", tl_server("native", onnx, root, native), loads),
                Variant("shared", tl_server("shared", onnx, root, native), loads),
                Variant("aio", tl_server("aio", onnx, root, ("--frontend", "aio")), loads),
            ]
            if a.baseline:
                vs.append(Variant("base", tl_server("base", onnx, a.baseline.resolve()), loads))
            rows = run_table("frontends (ONNX add_sub, perf_analyzer)", vs, a.rounds, settings)
            doc["frontends"] = _dump(rows)
        if "features" in tables:
            loads = [
                Load("http c=16", "http", "add_sub", 16),
                Load("http c=16 shm=system", "http", "add_sub", 16, ("--shared-memory=system",)),
                Load("grpc c=16", "grpc", "add_sub", 16),
                Load("grpc c=16 shm=system", "grpc", "add_sub", 16, ("--shared-memory=system",)),
                Load("grpc c=16 --streaming", "grpc", "add_sub", 16, ("--streaming",)),
            ]
            rows = run_table(
                "features (native; ONNX add_sub)",
                [Variant("native", tl_server("native", onnx, root, native), loads)],
                a.rounds,
                settings,
            )
            doc["features"] = _dump(rows)
        if "python" in tables:
            pyrepo = write_python_repo(Path(tmp) / "python", ("add_sub",))
            loads = [Load(f"{p} c={c}", p, "add_sub", c) for p in ("http", "grpc") for c in (1, 4)]
            vs = [
                Variant("tritonlite", tl_server("tritonlite-py", pyrepo, root, native), loads),
                Variant("triton", triton_server(a.triton_dir.resolve(), pyrepo), loads),
            ]
            if a.baseline:
                base = tl_server("base-py", pyrepo, a.baseline.resolve(), native)
                vs.append(Variant("base", base, loads))
            rows = run_table(
                "python (model.py add_sub: tritonlite native vs Triton)", vs, a.rounds, settings
            )
            print(
                "| variant | load | throughput / Triton's (goal >= 2x) "
                "| p50 / Triton's (goal <= 0.5x) |\n|---|---|---|---|"
            )
            for name in [v.name for v in vs if v.name != "triton"]:
                for ld in loads:
                    us, them = (name, ld.label), ("triton", ld.label)
                    print(
                        f"| {name} | {ld.label} | {ratios(rows, us, them, 'throughput')} "
                        f"| {ratios(rows, us, them, 'p50')} |"
                    )
            doc["python"] = _dump(rows)
        if "mlp" in tables:
            loads = [
                Load(f"{m} {p} c=16", p, m, 16)
                for p in ("http", "grpc")
                for m in ("mlp", "mlp_nobatch")
            ]
            vs = [Variant("native", tl_server("native", onnx, root, native), loads)]
            if "mlp-triton" in tables:
                pymlp = write_python_repo(Path(tmp) / "python-mlp", ("mlp", "mlp_nobatch"))
                vs.append(Variant("triton", triton_server(a.triton_dir.resolve(), pymlp), loads))
            rows = run_table("mlp (dynamic batching vs none at c=16)", vs, a.rounds, settings)
            print(
                "| variant | protocol | mlp / mlp_nobatch throughput (goal >= 3x) |\n|---|---|---|"
            )
            for v in vs:
                for p in ("http", "grpc"):
                    r = ratios(
                        rows,
                        (v.name, f"mlp {p} c=16"),
                        (v.name, f"mlp_nobatch {p} c=16"),
                        "throughput",
                    )
                    print(f"| {v.name} | {p} | {r} |")
            doc["mlp"] = _dump(rows)
        if "wrk" in tables:
            loads = [Load("wrk JSON c=16", "http", "add_sub", 16, tool="wrk")]
            vs = [
                Variant("native", tl_server("native", onnx, root, native), loads),
                Variant("aio", tl_server("aio", onnx, root, ("--frontend", "aio")), loads),
            ]
            if a.baseline:
                vs.append(Variant("base", tl_server("base", onnx, a.baseline.resolve()), loads))
            rows = run_table(
                "wrk (JSON add_sub, 1 thread, 16 connections, 10 s)", vs, a.rounds, settings
            )
            doc["wrk"] = _dump(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"issue16_{'_'.join(tables)}.json").write_text(json.dumps(doc, indent=1))
    return 0


def _dump(rows: dict[tuple[str, str], list[Run]]) -> list[dict[str, object]]:
    return [
        {"variant": v, "load": ld, "runs": [asdict(r) for r in runs]}
        for (v, ld), runs in rows.items()
    ]


if __name__ == "__main__":
    sys.exit(main())

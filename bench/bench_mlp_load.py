"""Who takes the CPU when the MLP's batching gain is measured at concurrency 16 (issue 16).

    .venv/bin/python bench/bench_mlp_load.py [--rounds 2] [--root PATH] [--modes sync,async]
        [--protocols http,grpc] [--intra 0,1]

Serves the ONNX MLP (4 x 1024^2 FP32) with dynamic batching (``mlp``) and without
(``mlp_nobatch``) on ``--frontend native``, and runs perf_analyzer at concurrency 16 against
each, per protocol and client mode: ``sync`` (perf_analyzer's default: 16 threads, one
synchronous request each) and ``async`` (``--async``: 16 requests in flight from its async
client and a few threads). For every point it prints the throughput, p50, the server's CPU per
request split by thread (the event loop, ONNX Runtime's pool, the rest), and the load
generator's own CPU per request (its user + system time, ``RUSAGE_CHILDREN``), next to the
machine's load average: on a 2-core machine the load generator and ONNX Runtime share the cores,
and these figures say which of them the cores went to. ``--intra 0,1`` adds a server whose
models set ``intra_op_thread_count`` (0: the server's default).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import write_onnx_repo  # noqa: E402
from perf import ROOT, TritonliteServer, perf_analyzer_bin  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
LOGS = ROOT / "bench" / "results" / "logs" / "mlp_load"


def thread_ticks(pid: int) -> dict[str, int]:
    """CPU clock ticks by thread group: "loop" (the main thread), else the thread's name."""
    out: dict[str, int] = defaultdict(int)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2 :].split()
        out["loop" if tid == str(pid) else name] += int(fields[11]) + int(fields[12])
    return out


def process_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def successes(port: int, model: str) -> int:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    return sum(int(m["inference_stats"]["success"]["count"]) for m in doc["model_stats"])


def point(
    pid: int, ports: dict[str, int], model: str, protocol: str, mode: str, log: Path
) -> dict[str, object]:
    pa = perf_analyzer_bin()
    cmd = [
        str(pa),
        "-m",
        model,
        "-u",
        f"127.0.0.1:{ports[protocol]}",
        "-i",
        protocol,
        "--concurrency-range",
        "16:16",
        "--measurement-interval",
        "3000",
        "--stability-percentage",
        "50",
        "--max-trials",
        "6",
        "--shape",
        "INPUT0:1024",
    ]
    if mode == "async":
        cmd.append("--async")
    n0, t0, p0 = successes(ports["http"], model), thread_ticks(pid), process_ticks(pid)
    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    r1, w1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    n1, t1, p1 = successes(ports["http"], model), thread_ticks(pid), process_ticks(pid)
    log.write_text(f"$ {' '.join(cmd)}\n\n{proc.stdout}\n{proc.stderr}")
    n = max(n1 - n0, 1)
    per = {k: (t1.get(k, 0) - t0.get(k, 0)) / HZ * 1e6 / n for k in t1}
    client_s = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    thr = re.findall(r"throughput: ([0-9.]+) infer/sec", proc.stdout)
    p50 = re.search(r"p50 latency: (\d+)", proc.stdout)
    batch = re.search(r"Inference count: (\d+)\s+Execution count: (\d+)", proc.stdout)
    return {
        "req_s": float(thr[-1]) if thr else 0.0,
        "p50_us": int(p50.group(1)) if p50 else 0,
        "server_us": (p1 - p0) / HZ * 1e6 / n,
        "loop_us": per.get("loop", 0.0),
        "threads_us": {k: round(v, 1) for k, v in per.items() if k != "loop" and v >= 1},
        "client_us": client_s * 1e6 / n,
        "cores_busy": ((p1 - p0) / HZ + client_s) / (w1 - w0),
        "per_exec": int(batch.group(1)) / max(int(batch.group(2)), 1) if batch else 0.0,
        "load": os.getloadavg()[0],
        "rc": proc.returncode,
    }


def write_intra(repo: Path, count: int) -> None:
    for name in ("mlp", "mlp_nobatch"):
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(
            cfg.read_text()
            + f'parameters {{ key: "intra_op_thread_count" value {{ string_value: "{count}" }} }}\n'
        )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--intra", default="0")
    a = ap.parse_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    rows: dict[tuple[str, ...], list[dict[str, object]]] = defaultdict(list)
    print(f"nproc {os.cpu_count()}, `{subprocess.getoutput('uptime')}` (before)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        repos = {}
        for intra in a.intra.split(","):
            repo = write_onnx_repo(Path(tmp) / f"intra{intra}", ("mlp", "mlp_nobatch"))
            if intra != "0":
                write_intra(repo, int(intra))
            repos[intra] = repo
        for rnd in range(a.rounds):
            for intra, repo in repos.items():
                s = TritonliteServer(
                    repo, LOGS / f"server_{intra}.log", ("--frontend", "native"), root=a.root
                )
                ports = s.start()
                try:
                    for protocol in a.protocols.split(","):
                        for mode in a.modes.split(","):
                            for model in ("mlp", "mlp_nobatch"):
                                key = (intra, protocol, mode, model)
                                log = LOGS / f"{'_'.join(key)}_{rnd}.log"
                                r = point(s.pid, ports, model, protocol, mode, log)
                                rows[key].append(r)
                                print(f"<!-- round {rnd} {key} {r} -->", flush=True)
                finally:
                    s.stop()
    med = statistics.median
    print(
        "\n| intra-op | protocol | client | model | req/s: median (rounds) | p50 µs "
        "| reqs/exec | server µs/req (loop) | other server threads µs/req "
        "| client µs/req | cores busy | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, runs in rows.items():
        intra, protocol, mode, model = key
        thr = [float(r["req_s"]) for r in runs]  # type: ignore[arg-type]
        threads = runs[-1]["threads_us"]
        print(
            f"| {intra or 'default'} | {protocol} | {mode} | {model} | {med(thr):,.0f} "
            f"({', '.join(f'{x:,.0f}' for x in thr)}) "
            f"| {med(int(r['p50_us']) for r in runs):,} "  # type: ignore[call-overload]
            f"| {med(float(r['per_exec']) for r in runs):.1f} "  # type: ignore[arg-type]
            f"| {med(float(r['server_us']) for r in runs):.0f} "  # type: ignore[arg-type]
            f"({med(float(r['loop_us']) for r in runs):.0f}) "  # type: ignore[arg-type]
            f"| {threads} "
            f"| {med(float(r['client_us']) for r in runs):.0f} "  # type: ignore[arg-type]
            f"| {med(float(r['cores_busy']) for r in runs):.2f} "  # type: ignore[arg-type]
            f"| {med(float(r['load']) for r in runs):.1f} |"  # type: ignore[arg-type]
        )
    print(
        "\n| intra-op | protocol | client | mlp / mlp_nobatch throughput, per round |\n|---|---|---|---|"
    )
    for (intra, protocol, mode, model), runs in rows.items():
        if model != "mlp":
            continue
        other = rows[(intra, protocol, mode, "mlp_nobatch")]
        ratios = [
            float(x["req_s"]) / float(y["req_s"])  # type: ignore[arg-type]
            for x, y in zip(runs, other)
            if float(y["req_s"])  # type: ignore[arg-type]
        ]
        if ratios:
            print(
                f"| {intra or 'default'} | {protocol} | {mode} | **{med(ratios):.2f}x** "
                f"({', '.join(f'{r:.2f}' for r in ratios)}) |"
            )
    print(f"\n`{subprocess.getoutput('uptime')}` (after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

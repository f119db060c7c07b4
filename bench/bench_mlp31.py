"""The ONNX MLP side by side: tritonlite trees and the real Triton, batch sizes and run times.

    python bench/bench_mlp31.py --tree this=PATH[,VAR=VALUE...] [--tree base=PATH] [--triton DIR]
        [--rounds 2] [--points mlp:http:16,mlp:grpc:16,mlp_nobatch:http:16,...]

Serves ``bench/models.py``'s ONNX MLP (4 x 1024^2 FP32, max_batch_size 64, one CPU instance;
``mlp`` with ``dynamic_batching { max_queue_delay_microseconds: 100 }``, ``mlp_nobatch``
without) from each tritonlite tree (``python -m tritonlite`` with that tree on PYTHONPATH,
native front ends; ``,VAR=VALUE`` after the path sets that server's environment) and from
the real Triton (``TRITON_REFERENCE start DIR ...``: the ONNX models need a Triton with its
C++ ONNX Runtime backend), alternated within each round. Per point (model:protocol:concurrency): one 1 s warm-up perf_analyzer run, then
``perf_analyzer --concurrency-range C --measurement-interval 3000 --max-trials 4
--stability-percentage 50 --shape INPUT0:1024``; around the measured run it reads the server's
CPU time per thread (/proc/PID/task/*/stat) and the model's statistics (requests, executions,
per batch size the executions and their compute time). Prints one JSON line per point and a
Markdown table: req/s, server CPU µs per request (event-loop thread / the rest), cores used,
mean batch, the commonest batch sizes, compute µs per execution, and the 1-minute load average.
"served/s" is the server's own count over the measured run's wall time (perf_analyzer's
start-up included), shown beside perf_analyzer's figure and in its place when perf_analyzer
found no stable window on a loaded machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import write_onnx_repo  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
# The script that starts the reference tritonserver (``start DIR REPO HTTP GRPC METRICS`` prints
# its PID): tools/triton-reference.sh, or one whose install has the C++ ONNX Runtime backend.
TRITON_REFERENCE = os.environ.get(
    "TRITON_REFERENCE", str(Path(__file__).resolve().parents[1] / "tools" / "triton-reference.sh")
)


def thread_ticks(pid: int) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out["loop" if tid == str(pid) else "other"] += int(fields[11]) + int(fields[12])
    return out


def stats(port: int, model: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    m = doc["model_stats"][0]
    sizes = {
        int(b["batch_size"]): (int(b["compute_infer"]["count"]), int(b["compute_infer"]["ns"]))
        for b in m.get("batch_stats", [])
    }
    return {
        "requests": int(m["inference_stats"]["success"]["count"]),
        "executions": int(m["execution_count"]),
        "sizes": sizes,
    }


def wait_ready(port: int, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on {port} not ready")


def start_tritonlite(tree: str, repo: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    tree, *extra = tree.split(",")
    env = dict(os.environ, PYTHONPATH=tree)
    env.update(kv.split("=", 1) for kv in extra)
    cmd = [
        sys.executable, "-m", "tritonlite", "--model-repository", str(repo),
        "--http-port", str(port), "--grpc-port", str(port + 1), "--metrics-port", str(port + 2),
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--metrics-address", "127.0.0.1", "--log-info", "false",
    ]  # fmt: skip
    # In the tree: ``python -m`` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, so started from another checkout it would run that checkout's code.
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(port)
    return proc


def start_triton(tdir: str, repo: Path, port: int) -> int:
    out = subprocess.run(
        [TRITON_REFERENCE, "start", tdir, str(repo), str(port), str(port + 1), str(port + 2)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return int(out.stdout.split()[0])


def perf(
    model: str, proto: str, conc: int, port: int, seconds_ms: int, out: Path
) -> tuple[float, float]:
    """perf_analyzer's infer/s and p99 latency (µs) of its stable window (0, 0 if it failed)."""
    url = f"127.0.0.1:{port + 1 if proto == 'grpc' else port}"
    cmd = [
        os.environ["PERF_ANALYZER"], "-m", model, "-u", url, "-i", proto,
        "--concurrency-range", str(conc), "--measurement-interval", str(seconds_ms),
        "--max-trials", "4", "--stability-percentage", "50", "--shape", "INPUT0:1024",
        "-f", str(out),
    ]  # fmt: skip
    out.unlink(missing_ok=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if done.returncode or not out.exists():
        print(f"perf_analyzer failed ({done.returncode}): {done.stderr[-300:]}", file=sys.stderr)
        return 0.0, 0.0
    with out.open() as f:
        row = next(csv.DictReader(f))
    return float(row["Inferences/Second"]), float(row["p99 latency"])


def point(pid: int, port: int, model: str, proto: str, conc: int, tmp: Path) -> dict[str, Any]:
    perf(model, proto, conc, port, 1000, tmp / "warm.csv")
    s0, t0, load0 = stats(port, model), thread_ticks(pid), os.getloadavg()[0]
    w0 = time.monotonic()
    rate, p99 = perf(model, proto, conc, port, 3000, tmp / "run.csv")
    wall = time.monotonic() - w0
    s1, t1 = stats(port, model), thread_ticks(pid)
    n = s1["requests"] - s0["requests"]
    ex = s1["executions"] - s0["executions"]
    sizes = {}
    compute_ns = 0
    for size, (count, ns) in s1["sizes"].items():
        c0, n0 = s0["sizes"].get(size, (0, 0))
        if count - c0:
            sizes[size] = count - c0
            compute_ns += ns - n0
    us = {k: (t1[k] - t0.get(k, 0)) / HZ * 1e6 / n for k in t1} if n else {}
    cpu = sum(us.values())
    return {
        "model": model, "proto": proto, "conc": conc, "req_s": round(rate), "p99_us": round(p99),
        "served_s": round(n / wall),
        "cpu_us": round(cpu, 1), "loop_us": round(us.get("loop", 0), 1),
        "other_us": round(us.get("other", 0), 1), "cores": round(cpu * n / wall / 1e6, 2),
        "mean_batch": round(n / ex, 2) if ex else None,
        "top_sizes": sorted(sizes.items(), key=lambda kv: -kv[1])[:4],
        "compute_us_per_exec": round(compute_ns / ex / 1e3) if ex else None,
        "load": round(load0, 1),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tritonlite tree")
    ap.add_argument("--triton", help="the triton-reference install directory")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--points", default="mlp:http:16,mlp:grpc:16,mlp_nobatch:http:16,mlp_nobatch:grpc:16"
    )
    ap.add_argument("--repo", help="an existing repository (default: written afresh)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mlp31-"))
    repo = Path(a.repo) if a.repo else write_onnx_repo(tmp / "repo", ("mlp", "mlp_nobatch"))
    points = [(m, p, int(c)) for m, p, c in (x.split(":") for x in a.points.split(","))]
    servers = [tuple(t.split("=", 1)) for t in a.tree] + (
        [("triton", a.triton)] if a.triton else []
    )
    rows = []
    for rnd in range(a.rounds):
        for name, where in servers:
            port = random.randrange(20000, 59000)
            proc = None
            if name == "triton":
                pid = start_triton(where, repo, port)
            else:
                proc = start_tritonlite(where, repo, port, tmp / f"{name}-{rnd}.log")
                pid = proc.pid
            try:
                for model, proto, conc in points:
                    row = {
                        "round": rnd,
                        "server": name,
                        **point(pid, port, model, proto, conc, tmp),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            finally:
                os.kill(pid, signal.SIGTERM)
                if proc is not None:
                    proc.wait(30)
                else:
                    while Path(f"/proc/{pid}").exists():
                        time.sleep(0.2)
    print("\n| point | round | server | req/s (served/s) | p99 µs | CPU µs/req (loop / rest) | cores "
          "| mean batch | top sizes (size: executions) | compute µs/exec | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tops = ", ".join(f"{s}: {c}" for s, c in r["top_sizes"])
        print(
            f"| {r['model']} {r['proto']} c={r['conc']} | {r['round']} | {r['server']} | "
            f"{r['req_s']:,} ({r['served_s']:,}) | {r['p99_us']:,} | {r['cpu_us']} ({r['loop_us']} / {r['other_us']}) | {r['cores']} | "
            f"{r['mean_batch']} | {tops} | {r['compute_us_per_exec']} | {r['load']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

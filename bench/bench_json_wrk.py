"""wrk with a JSON body (issue 31): server CPU per request, req/s and cores used, side by side.

    python bench/bench_json_wrk.py --repo REPO --model add_sub_nb [--rounds 2] [--seconds 10]
        [--connections 16 1] [--baseline PATH] [--root PATH] [--triton-dir DIR]
        [--triton-launcher SCRIPT]

Starts each server on free loopback ports (tritonlite from --root and, with --baseline, from
that tree: ``python -m tritonlite`` run in that tree, PYTHONPATH at it; the real Triton with
``--triton-dir`` through ``--triton-launcher``, by default ``tools/triton-reference.sh``, whose
tritonserver has only the Python backend: an ONNX model such as add_sub needs a launcher with
the same ``start DIR REPO HTTP GRPC METRICS`` interface whose tritonserver has the ONNX
Runtime backend), warms it up with a 1 s wrk run, then
measures the server's CPU per request (``bench/cpu.py``: user + system of every thread over
the model's success count) around ``wrk -tT -cC -dSs -s bench/json_add_sub.lua URL`` for each
connection count C (T = min(2, C)). Servers are started one at a time and alternated within
each round, so each sees the same machine. Prints one JSON line per cell; "cores" is CPU
µs/request x requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cpu import measure as cpu_measure  # noqa: E402  (bench/cpu.py)

LUA = HERE / "json_add_sub.lua"
TRITON = HERE.parent / "tools" / "triton-reference.sh"


def _free_port() -> int:
    while True:
        p = random.randint(20000, 59000)
        ok = True
        for q in (p, p + 1, p + 2):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
        if ok:
            return p


def _wait_ready(port: int, model: str, deadline: float) -> None:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/ready"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server on {port} not ready")


def start_lite(tree: str, repo: str, model: str) -> tuple[int, subprocess.Popen[bytes] | None]:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, "-m", "tritonlite", "--model-repository", repo]
    cmd += ["--http-port", str(port), "--grpc-port", str(port + 1)]
    cmd += ["--metrics-port", str(port + 2), "--http-address", "127.0.0.1"]
    cmd += ["--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", "--log-info", "false"]
    # cwd: ``python -m`` puts the working directory first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(
        cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _wait_ready(port, model, time.monotonic() + 60)
    return port, proc


def start_triton(launcher: str, tdir: str, repo: str, model: str) -> tuple[int, int]:
    port = _free_port()
    out = subprocess.run(
        [launcher, "start", tdir, repo, str(port), str(port + 1)] + [str(port + 2)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    _wait_ready(port, model, time.monotonic() + 60)
    return port, int(out[0])


def measure(pid: int, port: int, model: str, conns: int, seconds: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/infer"
    wrk = ["wrk", f"-t{min(2, conns)}", f"-c{conns}", "-d1s", "-s", str(LUA), url]
    subprocess.run(wrk, check=True, capture_output=True)  # warm-up
    wrk[3] = f"-d{seconds}s"
    cpu = cpu_measure(
        pid, port, model, lambda: subprocess.run(wrk, check=True, capture_output=True)
    )
    return {
        "requests": cpu.requests,
        "cpu_us_per_request": cpu.cpu_us,
        "kernel_us_per_request": cpu.kernel_us,
        "main_thread_us_per_request": cpu.loop_us,
        "main_thread_busy": cpu.loop_busy,
        "requests_per_s": cpu.rate,
        "cores": round(cpu.cpu_us * cpu.rate / 1e6, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--model", default="add_sub_nb")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, nargs="+", default=[16, 1])
    ap.add_argument("--root", default=str(HERE.parent))
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--triton-dir", default=None)
    ap.add_argument("--triton-launcher", default=str(TRITON))
    a = ap.parse_args()
    servers = [("this", a.root)]
    if a.baseline:
        servers.insert(0, ("base", a.baseline))
    if a.triton_dir:
        servers.append(("triton", a.triton_dir))
    for rnd in range(a.rounds):
        for label, where in servers:
            proc = None
            if label == "triton":
                port, pid = start_triton(a.triton_launcher, where, a.repo, a.model)
            else:
                port, proc = start_lite(where, a.repo, a.model)
                pid = proc.pid  # type: ignore[union-attr]
            try:
                for c in a.connections:
                    doc = measure(pid, port, a.model, c, a.seconds)
                    load = os.getloadavg()[0]
                    print(json.dumps({"round": rnd, "server": label, "c": c, "load1": load, **doc}))
                    sys.stdout.flush()
            finally:
                if proc is not None:
                    proc.terminate()
                    proc.wait(30)
                else:
                    os.kill(pid, 15)
                    time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

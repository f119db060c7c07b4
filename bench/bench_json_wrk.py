"""wrk with a JSON body (issue 31): server CPU per request, req/s and cores used, side by side.

    python bench/bench_json_wrk.py --repo REPO --model add_sub_nb [--rounds 2] [--seconds 10]
        [--connections 16 1] [--baseline PATH] [--root PATH] [--triton-dir DIR]

Starts each server on free loopback ports (tritonlite from --root and, with --baseline, from
that tree: ``python -m tritonlite`` run in that tree, PYTHONPATH at it; the real Triton with
``--triton-dir`` through ``triton-reference``), warms it up with a 1 s wrk run, then measures
``cpu-per-request --pid PID --stats 127.0.0.1:PORT --model MODEL -- wrk -tT -cC -dSs -s
bench/json_add_sub.lua URL`` for each connection count C (T = min(2, C)). Servers are started one at a time and
alternated within each round, so each sees the same machine. Prints one JSON line per cell.
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
LUA = HERE / "json_add_sub.lua"
TOOLS = Path(os.environ.get("BENCH_TOOLS", "/work/shared/tools"))


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


def start_triton(tdir: str, repo: str, model: str) -> tuple[int, int]:
    port = _free_port()
    out = subprocess.run(
        [str(TOOLS / "triton-reference"), "start", tdir, repo, str(port), str(port + 1)]
        + [str(port + 2)],
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
    cmd = [str(TOOLS / "cpu-per-request"), "--pid", str(pid), "--stats", f"127.0.0.1:{port}"]
    cmd += ["--model", model, "--", *wrk]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    doc: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    doc["cores"] = round(
        float(doc["cpu_us_per_request"]) * float(doc["requests_per_s"]) / 1e6,  # type: ignore[arg-type]
        2,
    )
    return doc


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
                port, pid = start_triton(where, a.repo, a.model)
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

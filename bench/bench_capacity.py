"""Who spends the two cores: server and load generator CPU per request, side by side.

    .venv/bin/python bench/bench_capacity.py [--rounds 2] [--seconds 4]
        [--loads http:4,grpc:4,http:1] [--no-triton] [--no-canned] [--triton-dir DIR]

Serves the bench's ``model.py`` add_sub (``bench/models.py``) three ways, one at a time:

* ``tritonlite``: ``python -m tritonlite`` (native front ends, the defaults);
* ``tritonlite, canned``: the same server, with every HTTP ``.../infer`` answered from the
  first real response it gave (the request is read, nothing is decoded, validated or run):
  what the wire layer, the loop and the kernel cost a request, without the request path;
* ``triton``: the reference tritonserver's Python backend (``tools/triton-reference.sh``), its
  stub process counted with it.

For each load (perf_analyzer, ``protocol:concurrency``) it samples, in the middle of one run,
``--seconds`` of: requests served, the server's CPU per request (every thread and child
process), the event-loop thread's share of it and how busy that thread was, perf_analyzer's own
CPU per request, and the cores the two used together. Where the loop thread is busy all the
time, throughput is one loop-thread second over its CPU per request, whatever the other core
does; where it is not, the cores or the wake-ups are the limit. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu import HZ, _children_ticks, _successes, _ticks  # noqa: E402
from models import write_python_repo  # noqa: E402
from perf import TritonServer, free_ports, perf_analyzer_bin, wait_ready  # noqa: E402

COUNT_PATH = "/canned/count"


def _serve_canned(argv: list[str]) -> int:
    """Run tritonlite with HTTP inference answered from a canned response (see the module
    docstring); ``GET /canned/count`` tells how many were answered."""
    sys.path.insert(0, str(HERE.parent))
    import tritonlite.frontends.native as native
    from tritonlite.cli import main
    from tritonlite.frontends.base.http_call import HttpResponse

    real = native.make_dispatch
    count = [0]

    def make_dispatch(core, options):  # type: ignore[no-untyped-def]
        dispatch = real(core, options)
        canned: list[tuple[int, list[bytes], str | None, dict[str, str]]] = []

        async def answer(request):  # type: ignore[no-untyped-def]
            if request.path == COUNT_PATH:
                return HttpResponse(200, [str(count[0]).encode()], "text/plain")
            if request.method != "POST" or not request.path.endswith("/infer"):
                return await dispatch(request)
            count[0] += 1
            if not canned:
                resp = await dispatch(request)
                body = [bytes(part) for part in resp.body]
                canned.append((resp.status, body, resp.content_type, dict(resp.headers or {})))
                return resp
            await request.read()
            status, body, content_type, headers = canned[0]
            return HttpResponse(status, list(body), content_type, dict(headers))

        return answer

    native.make_dispatch = make_dispatch
    return main(argv)


def _canned_count(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{COUNT_PATH}", timeout=10) as r:
        return int(r.read())


def _sample(
    pid: int,
    ports: dict[str, int],
    proto: str,
    conc: int,
    seconds: float,
    count: Callable[[int], int],
) -> dict[str, float]:
    """One load's figures; ``count(http_port)`` is how many requests the server has served."""
    cmd = [
        str(perf_analyzer_bin()),
        "-m",
        "add_sub",
        "-i",
        proto,
        "-u",
        f"127.0.0.1:{ports[proto]}",
        "--concurrency-range",
        f"{conc}:{conc}",
        "--measurement-interval",
        str(int((seconds + 6) * 1000)),
    ]
    load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def now() -> tuple[int, int, int, int, float]:
        """(server ticks with its child processes, its main thread's, perf_analyzer's,
        requests served, time)"""
        server = _ticks(f"/proc/{pid}/stat")[0] + sum(_children_ticks(pid).values())
        return (
            server,
            _ticks(f"/proc/{pid}/task/{pid}/stat")[0],
            _ticks(f"/proc/{load.pid}/stat")[0],
            count(ports["http"]),
            time.monotonic(),
        )

    try:
        time.sleep(3)  # past perf_analyzer's start and warm-up
        s0, m0, c0, n0, t0 = now()
        time.sleep(seconds)
        s1, m1, c1, n1, t1 = now()
    finally:
        load.send_signal(signal.SIGINT)
        try:
            load.wait(30)
        except subprocess.TimeoutExpired:
            load.kill()
            load.wait()
    n, wall = n1 - n0, t1 - t0
    per = 1e6 / HZ / max(n, 1)
    srv, cli = (s1 - s0) * per, (c1 - c0) * per
    return {
        "rate": n / wall,
        "server": srv,
        "loop": (m1 - m0) * per,
        "busy": (m1 - m0) / HZ / wall,
        "client": cli,
        "cores": (srv + cli) * n / wall / 1e6,
    }


def _start_tritonlite(repo: Path, canned: bool) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    http, grpc, metrics = free_ports(3)
    head = (
        [sys.executable, str(Path(__file__).resolve()), "--serve-canned", "--"]
        if canned
        else [
            sys.executable,
            "-m",
            "tritonlite",
        ]
    )
    proc = subprocess.Popen(
        [
            *head,
            "--model-repository",
            str(repo),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
        ],
        cwd=HERE.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if not wait_ready(http, lambda: proc.poll() is None, 90.0, "/v2/health/ready"):
        proc.kill()
        raise RuntimeError("tritonlite did not start")
    return proc, {"http": http, "grpc": grpc}


def main() -> int:
    if sys.argv[1:2] == ["--serve-canned"]:
        return _serve_canned(sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--loads", default="http:4,grpc:4,http:1")
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--no-canned", action="store_true")
    ap.add_argument("--triton-dir", type=Path, default=HERE.parent / ".tools" / "triton")
    a = ap.parse_args()
    loads = [(p, int(c)) for p, c in (x.split(":") for x in a.loads.split(","))]
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(
        "| round | server | load | req/s | server µs/req | of it the loop | loop busy "
        "| perf_analyzer µs/req | cores used |\n|---|---|---|---|---|---|---|---|---|"
    )

    def row(
        r: int, name: str, proto: str, conc: int, s: dict[str, float], loop: bool = True
    ) -> None:
        main = f"{s['loop']:.0f} | {s['busy']:.2f}" if loop else "- | -"
        print(
            f"| {r} | {name} | {proto} c={conc} | {s['rate']:,.0f} | {s['server']:.0f} "
            f"| {main} | {s['client']:.0f} | {s['cores']:.2f} |",
            flush=True,
        )

    def served(port: int) -> int:
        return _successes(port, "add_sub")

    with tempfile.TemporaryDirectory() as tmp:
        repo = write_python_repo(Path(tmp) / "py", ("add_sub",))
        for r in range(a.rounds):
            kinds = [("tritonlite", False)] + (
                [] if a.no_canned else [("tritonlite, canned", True)]
            )
            for name, canned in kinds:
                proc, ports = _start_tritonlite(repo, canned)
                try:
                    for proto, conc in loads:
                        if canned and proto != "http":
                            continue  # the canned answer is HTTP's
                        count = _canned_count if canned else served
                        s = _sample(proc.pid, ports, proto, conc, a.seconds, count)
                        row(r, name, proto, conc, s)
                finally:
                    proc.terminate()
                    proc.wait(30)
            if a.no_triton:
                continue
            triton = TritonServer(a.triton_dir, repo)
            ports = triton.start()
            try:
                for proto, conc in loads:
                    s = _sample(triton.pid, ports, proto, conc, a.seconds, served)
                    row(r, "triton (stub included)", proto, conc, s, loop=False)
            finally:
                triton.stop()
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

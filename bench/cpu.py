"""Server CPU time per request: the number that throughput hides on a shared machine.

``measure(pid, stats_port, model, run)`` reads the server's CPU time (user + system of every
thread, ``/proc/PID/stat``; per thread from ``/proc/PID/task``) and the model's successful
request count (``GET /v2/models/MODEL/stats``) before and after ``run()`` (any load
generator), and returns CPU microseconds per request, its kernel part (syscalls, the TCP
stack), how busy the main (event-loop) thread was (1.0: the loop is the ceiling) and the
request rate.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

HZ = os.sysconf("SC_CLK_TCK")


@dataclass
class Cpu:
    requests: int
    cpu_us: float  # per request, all threads
    kernel_us: float  # per request, system time
    loop_us: float  # per request, the main (event-loop) thread
    loop_busy: float  # main thread CPU time / wall time
    rate: float  # requests per second
    wall_s: float
    # per request, the server's live child processes (Triton's Python backend stubs, which run
    # model.py there; tritonlite's EXECUTION_ENV_PATH workers): not in cpu_us
    children_us: float = 0.0


def _ticks(path: str) -> tuple[int, int]:
    with open(path) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), int(fields[12])


def _children_ticks(pid: int) -> dict[int, int]:
    """user + system ticks of every live descendant process of ``pid``, by pid."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                s = f.read()
        except OSError:
            continue  # gone meanwhile
        parent[int(entry)] = int(s[s.rindex(")") + 2 :].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier and c not in found}
        found |= frontier
    out = {}
    for child in found:
        try:
            out[child] = _ticks(f"/proc/{child}/stat")[0]
        except OSError:
            continue
    return out


def _successes(port: int, model: str) -> int:
    url = f"http://127.0.0.1:{port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    return sum(int(m["inference_stats"]["success"]["count"]) for m in doc.get("model_stats", []))


def measure(pid: int, stats_port: int, model: str, run: Callable[[], object]) -> Cpu:
    n0 = _successes(stats_port, model)
    c0 = _children_ticks(pid)
    p0, m0, w0 = (
        _ticks(f"/proc/{pid}/stat"),
        _ticks(f"/proc/{pid}/task/{pid}/stat"),
        time.monotonic(),
    )
    run()
    w1, p1, m1 = (
        time.monotonic(),
        _ticks(f"/proc/{pid}/stat"),
        _ticks(f"/proc/{pid}/task/{pid}/stat"),
    )
    c1 = _children_ticks(pid)
    n = _successes(stats_port, model) - n0
    # a child that ended meanwhile is left out (its ticks went to nobody we can read)
    child_ticks = sum(t - c0.get(c, 0) for c, t in c1.items())
    per = (lambda t: t / HZ * 1e6 / n) if n else (lambda t: 0.0)
    wall = w1 - w0
    return Cpu(
        n,
        round(per(p1[0] - p0[0]), 1),
        round(per(p1[1] - p0[1]), 1),
        round(per(m1[0] - m0[0]), 1),
        round((m1[0] - m0[0]) / HZ / wall, 2),
        round(n / wall, 1),
        round(wall, 1),
        round(per(child_ticks), 1),
    )

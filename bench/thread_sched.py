"""Where a server's threads spend a load generator's run: on a CPU, waiting for one, or asleep.

    python bench/thread_sched.py PID -- perf_analyzer -m MODEL -u ... [args]

Reads ``/proc/PID/task/*/schedstat`` (ns on a CPU, ns runnable but waiting for a CPU, time
slices) and ``status`` (voluntary and involuntary context switches) of every thread of the
server before and after running the given command once, and prints one line per thread that
ran at least 10 ms: cores used (CPU time / wall), cores' worth of waiting for a CPU, slices and
switches. A thread that spins (ONNX Runtime's ``allow_spinning``) shows CPU time with almost no
voluntary switches; one that sleeps between runs shows one or more voluntary switches per run.
Works for any server process (tritonserver too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def snap(pid: int) -> dict[str, tuple[str, int, int, int, int, int]]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/schedstat") as f:
                on_cpu, waiting, slices = (int(x) for x in f.read().split()[:3])
            with open(f"{base}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue  # the thread ended between listdir and open
        vol = int(status["voluntary_ctxt_switches"])
        invol = int(status["nonvoluntary_ctxt_switches"])
        out[tid] = (name, on_cpu, waiting, slices, vol, invol)
    return out


def main() -> int:
    pid = int(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    before = snap(pid)
    t0 = time.monotonic()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    after = snap(pid)
    wall = time.monotonic() - t0
    print(f"wall {wall:.2f} s, 1-min load {os.getloadavg()[0]:.2f}, command exit {rc}")
    zero = ("", 0, 0, 0, 0, 0)
    rows = []
    for tid, now in after.items():
        was = before.get(tid, zero)
        d = [now[i] - was[i] for i in range(1, 6)]
        if d[0] >= 10_000_000:
            rows.append((d[0], tid, now[0], d))
    for _, tid, name, (on_cpu, waiting, slices, vol, invol) in sorted(rows, reverse=True):
        print(
            f"{tid:>8} {name:16} on CPU {on_cpu / 1e9 / wall:5.2f} cores  waiting "
            f"{waiting / 1e9 / wall:5.2f}  slices {slices:7d}  voluntary {vol:7d}  "
            f"involuntary {invol:6d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ONNX MLP in process: ``run_async`` with intra 2 vs 3, and ``run`` with 2, by batch size.

    python bench/bench_ort_threads.py [--rounds 4] [--runs 150] [--batches 1,4,8,16]
        [--variants async2,async3,sync2]

Builds ``bench/models.py``'s MLP (4 x 1024^2 FP32) once per variant as an InferenceSession with
the ONNX Runtime backend's own ``session_options`` (spinning off, inter 1), intra-op count from
the variant's name: ``asyncN`` starts each run with ``session.run_async`` (how a batch leaves the
event loop) and waits on a ``threading.Event`` the completion callback sets, ``syncN`` calls
``session.run`` on the calling thread (how Triton's backend runs), ``threadN`` calls it on a
second Python thread the caller wakes and waits for (an instance thread). Runs one at a time, back to
back. Wall time per run: ``perf_counter_ns`` before the call to the callback's first line (the
caller waits in ``Event.wait``, which does not hold the GIL, so the callback does not wait for
it) or to ``run``'s return (the wake to the worker's return, ``threadN``). CPU per run of each thread of the process
(``/proc/self/task/*/schedstat``, ns) over the variant's runs, busiest first, threads under 2 %
of the run left out. Variants alternate within each round, batch sizes within each variant
turn; one JSON line per (round, variant, batch) and a median table at the end, with the
1-minute load average at each line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import write_onnx_repo  # noqa: E402

from tritonlite.backends.onnxruntime import SessionSettings, session_options  # noqa: E402


def thread_ns() -> dict[str, int]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[tid] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            continue
    return out


def make_session(path: Path, intra: int) -> Any:
    import onnxruntime as ort

    opts = session_options(SessionSettings(intra_op_threads=intra, inter_op_threads=1))
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def time_thread_runs(sess: Any, x: np.ndarray, runs: int) -> list[int]:
    """``run`` on a second Python thread that the caller wakes and waits for (an instance
    thread): wall time from the wake to the worker's return from ``run``."""
    outs = [sess.get_outputs()[0].name]
    go, done = threading.Event(), threading.Event()
    end = [0]

    def worker() -> None:
        for _ in range(runs):
            go.wait()
            go.clear()
            sess.run(outs, {"INPUT0": x})
            end[0] = time.perf_counter_ns()
            done.set()

    t = threading.Thread(target=worker)
    t.start()
    walls = []
    for _ in range(runs):
        done.clear()
        t0 = time.perf_counter_ns()
        go.set()
        done.wait()
        walls.append(end[0] - t0)
    t.join()
    return walls


def time_runs(sess: Any, mode: str, x: np.ndarray, runs: int) -> list[int]:
    if mode.startswith("thread"):
        return time_thread_runs(sess, x, runs)
    use_async = mode.startswith("async")
    outs = [sess.get_outputs()[0].name]
    walls = []
    ev = threading.Event()
    end = [0]

    def cb(_res: Any, _ud: Any, err: str) -> None:
        end[0] = time.perf_counter_ns()
        if err:
            print("run failed:", err, file=sys.stderr)
        ev.set()

    for _ in range(runs):
        if use_async:
            ev.clear()
            t0 = time.perf_counter_ns()
            sess.run_async(outs, {"INPUT0": x}, cb, None)
            ev.wait()
            walls.append(end[0] - t0)
        else:
            t0 = time.perf_counter_ns()
            sess.run(outs, {"INPUT0": x})
            walls.append(time.perf_counter_ns() - t0)
    return walls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--variants", default="async2,async3,sync2")
    a = ap.parse_args()
    repo = write_onnx_repo(Path(tempfile.mkdtemp(prefix="ortthreads-")) / "repo", ("mlp",))
    path = repo / "mlp" / "1" / "model.onnx"
    variants = a.variants.split(",")
    sessions = {
        v: make_session(
            path, int(v.removeprefix("async").removeprefix("sync").removeprefix("thread"))
        )
        for v in variants
    }
    batches = [int(b) for b in a.batches.split(",")]
    rng = np.random.default_rng(0)
    inputs = {b: rng.standard_normal((b, 1024), dtype=np.float32) for b in batches}
    for v in variants:  # warm-up: arena, first-run allocations
        time_runs(sessions[v], v, inputs[batches[-1]], 20)
    rows = []
    for rnd in range(a.rounds):
        order = variants if rnd % 2 == 0 else variants[::-1]
        for v in order:
            for b in batches:
                c0 = thread_ns()
                walls = time_runs(sessions[v], v, inputs[b], a.runs)
                c1 = thread_ns()
                per = sorted(((c1[t] - c0.get(t, 0)) / a.runs / 1e3 for t in c1), reverse=True)
                med = statistics.median(walls) / 1e3
                row = {
                    "round": rnd, "variant": v, "batch": b,
                    "wall_us_median": round(med), "wall_us_mean": round(statistics.fmean(walls) / 1e3),
                    "wall_us_p90": round(sorted(walls)[int(0.9 * len(walls))] / 1e3),
                    "cpu_us_per_thread": [round(c) for c in per if c > 0.02 * med],
                    "load": round(os.getloadavg()[0], 1),
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| batch | variant | wall µs/run, median of rounds (rounds' medians) | mean of rounds' means "
          "| CPU µs/run per thread (median of rounds) | load |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for b in batches:
        for v in variants:
            rs = [r for r in rows if r["variant"] == v and r["batch"] == b]
            meds = [r["wall_us_median"] for r in rs]
            width = max(len(r["cpu_us_per_thread"]) for r in rs)
            cpu = [
                round(statistics.median(r["cpu_us_per_thread"][i] if i < len(r["cpu_us_per_thread"]) else 0 for r in rs))
                for i in range(width)
            ]  # fmt: skip
            loads = [r["load"] for r in rs]
            mean = round(statistics.fmean(r["wall_us_mean"] for r in rs))
            print(
                f"| {b} | {v} | {round(statistics.median(meds)):,} ({' / '.join(f'{m:,}' for m in meds)}) | {mean:,} | "
                f"{' + '.join(str(c) for c in cpu)} | {min(loads)}-{max(loads)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

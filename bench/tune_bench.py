"""The ``tritonlite tune`` goal, measured: the MLP from no dynamic batching, and add_sub.

    python bench/tune_bench.py [OUT_DIR] [--max-minutes N] [--load auto|builtin|perf_analyzer]

Builds bench/models.py's ONNX repository (``mlp_nobatch``: 4 x 1024^2 FP32, max_batch_size 64, one
CPU instance, no ``dynamic_batching``; ``add_sub`` with ``dynamic_batching {}``), runs
``tritonlite tune --concurrency 16`` on each, and prints the original's and the tuned config's
throughput and p99 at concurrency 16 from each run's final sweeps (``summary.json``), with the
ratio, and the 1-minute load average before and after each run (other work on the machine
inflates latencies and adds noise). Goal: MLP >= 3x within 10 minutes, p99 within the
budget; add_sub not worse.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.models import write_onnx_repo  # noqa: E402

RUNS = (  # model, extra tune flags
    ("mlp_nobatch", ["--latency-budget-ms", "50"]),
    ("add_sub", ["--latency-budget-ms", "10"]),
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", nargs="?", default="bench_tune")
    p.add_argument("--max-minutes", default="10")
    p.add_argument("--load", default="auto")
    p.add_argument("--models", default=",".join(m for m, _ in RUNS))
    ns = p.parse_args()
    out = Path(ns.out)
    repo = write_onnx_repo(out / "repo", ("add_sub", "mlp_nobatch"))
    rows = []
    for model, extra in RUNS:
        if model not in ns.models.split(","):
            continue
        cmd = [
            sys.executable,
            "-m",
            "tritonlite",
            "tune",
            "--model-repository",
            str(repo),
            "--model",
            model,
            "--concurrency",
            "16",
            "--max-minutes",
            ns.max_minutes,
            "--load",
            ns.load,
            "--output",
            str(out / model),
            *extra,
        ]
        print("$", " ".join(cmd), flush=True)
        load_before = os.getloadavg()[0]
        subprocess.run(cmd, check=True)
        load_after = os.getloadavg()[0]
        s = json.loads((out / model / "summary.json").read_text())
        a, b = s["original"][-1], s["tuned"][-1]
        ratio = b["throughput"] / a["throughput"] if a["throughput"] else float("inf")
        rows.append(
            f"| {model} | {a['throughput']:,.0f} | {a['p99_us'] / 1000:.1f} "
            f"| {b['throughput']:,.0f} | {b['p99_us'] / 1000:.1f} | {ratio:.2f}x "
            f"| {s['chosen']} | {s['elapsed_s']:.0f} s | {load_before:.1f}-{load_after:.1f} |"
        )
    print(
        "| model | original infer/s | p99 ms | tuned infer/s | p99 ms | ratio | chosen "
        "| tune time | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

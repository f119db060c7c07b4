"""A response-cache hit's server-side cost vs the model's execution, side by side in one run.

Run: ``python bench/bench_cache.py [--requests 500] [--rounds 3]``. Prints a Markdown table and
writes the numbers to ``bench/results/cache.csv``. Goal: a hit costs < 1/10 of the execution.

What is measured
    One tritonlite serving the ONNX MLP (tools/onnx_graphs.py ``write_mlp``: 4 layers of
    1024, FP32[1,1024] in and out) twice: ``mlp`` without the cache and ``mlp_cached`` with
    ``response_cache { enable: true }``, under ``--cache-config local,size=64 MiB``. Each round
    sends, one at a time over HTTP (binary tensors):

    * ``--requests`` distinct inputs to ``mlp``: executions (compute_input + compute_infer +
      compute_output per request, from the statistics extension);
    * the same distinct inputs to ``mlp_cached``: misses (execution + ``cache_miss``, the
      lookup and the insert of a copy of the output);
    * one input ``--requests`` times to ``mlp_cached`` after it is cached: hits (``cache_hit``:
      hashing the request, the LRU lookup and building the response).

    All figures are the server's own (statistics deltas per round: ns / count), so the client
    and the network are out of them; "request" is the server's end-to-end time of a request
    (from arrival at the core to its response, excluding HTTP decode/encode).
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from tools.onnx_graphs import write_mlp  # noqa: E402

WIDTH = 1024


def start_tritonlite(repo: pathlib.Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            "--http-port",
            "0",
            "--http-address",
            "127.0.0.1",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--cache-config",
            f"local,size={64 << 20}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        m = re.search(r"Started HTTPService at \S+:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("tritonlite did not start")


def stats_of(client: Any, model: str) -> dict[str, Any]:
    s = client.get_inference_statistics(model)["model_stats"][0]
    inf = s["inference_stats"]
    out = {k: (v["count"], v["ns"]) for k, v in inf.items()}
    out["execution_count"] = (s["execution_count"], 0)
    return out


def delta(after: dict[str, Any], before: dict[str, Any], key: str) -> tuple[int, int]:
    return after[key][0] - before[key][0], after[key][1] - before[key][1]


def per(d: tuple[int, int]) -> float:
    """Mean microseconds of a (count, ns) delta."""
    return d[1] / d[0] / 1000 if d[0] else float("nan")


def infer(client: Any, model: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.http as httpclient

    inp = httpclient.InferInput("INPUT0", [1, WIDTH], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return client.infer(model, [inp]).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def one_round(client: Any, inputs: list[np.ndarray], rnd: int) -> dict[str, float]:
    b_plain, b_cached = stats_of(client, "mlp"), stats_of(client, "mlp_cached")
    for x in inputs:
        infer(client, "mlp", x)
    a_plain = stats_of(client, "mlp")
    for x in inputs:
        infer(client, "mlp_cached", x)
    a_miss = stats_of(client, "mlp_cached")
    hot = inputs[0]
    for _ in inputs:
        infer(client, "mlp_cached", hot)
    a_hit = stats_of(client, "mlp_cached")
    comp = [
        delta(a_plain, b_plain, k) for k in ("compute_input", "compute_infer", "compute_output")
    ]
    execution = (comp[1][0], sum(c[1] for c in comp))
    hits = delta(a_hit, a_miss, "cache_hit")
    assert hits[0] == len(inputs), f"expected {len(inputs)} hits, got {hits[0]}"
    assert delta(a_hit, a_miss, "execution_count")[0] == 0
    return {
        "round": rnd,
        "requests": len(inputs),
        "execution_us": per(execution),
        "compute_infer_us": per(comp[1]),
        "request_uncached_us": per(delta(a_plain, b_plain, "success")),
        "miss_overhead_us": per(delta(a_miss, b_cached, "cache_miss")),
        "request_miss_us": per(delta(a_miss, b_cached, "success")),
        "hit_us": per(hits),
        "request_hit_us": per(delta(a_hit, a_miss, "success")),
    }


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def main() -> int:
    import tritonclient.http as httpclient

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=500, help="requests per phase per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp)
        write_mlp(repo, "mlp", max_batch_size=8)
        write_mlp(
            repo, "mlp_cached", max_batch_size=8, extra_config="response_cache { enable: true }\n"
        )
        proc, port = start_tritonlite(repo)
        try:
            client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
            warm = rng.standard_normal((1, WIDTH), dtype=np.float32)
            for _ in range(20):
                infer(client, "mlp", warm)
                infer(client, "mlp_cached", warm)
            for rnd in range(args.rounds):
                inputs = [
                    rng.standard_normal((1, WIDTH), dtype=np.float32) for _ in range(args.requests)
                ]
                rows.append(one_round(client, inputs, rnd))
            client.close()
        finally:
            proc.terminate()
            proc.wait(30)

    m = {k: median([r[k] for r in rows]) for k in rows[0] if k not in ("round", "requests")}
    ex = m["execution_us"]
    print(
        f"\nResponse cache on the ONNX MLP (4 x {WIDTH}, FP32[1,{WIDTH}]), {args.requests} "
        f"requests per phase, median of {args.rounds} rounds; server-side µs per request\n"
    )
    print("| what | µs | vs execution |")
    print("|---|---|---|")
    for key, label in (
        ("execution_us", "execution (compute input + infer + output)"),
        ("compute_infer_us", "compute_infer alone"),
        ("request_uncached_us", "request, no cache (end to end in the server)"),
        ("miss_overhead_us", "cache miss overhead (lookup + insert)"),
        ("request_miss_us", "request, cache miss"),
        ("hit_us", "cache hit (hash + lookup + response)"),
        ("request_hit_us", "request, cache hit"),
    ):
        print(f"| {label} | {m[key]:.1f} | {m[key] / ex:.3f} |")
    ratio = m["hit_us"] / ex
    print(
        f"\ngoal: a hit < 1/10 of the execution; measured {ratio:.3f} "
        f"({'met' if ratio < 0.1 else 'NOT met'})"
    )
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "cache.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {RESULTS / 'cache.csv'}")
    return 0 if ratio < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())

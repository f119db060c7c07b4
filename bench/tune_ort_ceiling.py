"""What ONNX Runtime alone does with the tune benchmark's MLP: rows/s by batch, threads, spinning.

    python bench/tune_ort_ceiling.py [--seconds S] [--batches 1,16] [--threads 1,2]

The ceiling ``bench/tune_bench.py``'s ratio is measured against: the 4 x 1024^2 FP32 MLP
(``mlp_nobatch`` of bench/models.py) run back to back in one thread, with no server, sessions
built by the ONNX Runtime backend's own options path (``session_settings`` then
``session_options``) from ``intra_op_thread_count`` and ``session.intra_op.allow_spinning``
parameters, so the settings are the ones a tuned config.pbtxt gets. Batch 1 is what the
unbatched starting config runs; batch 16 is the most a concurrency of 16 can form. Prints a
Markdown table (rows/s, ms per run) and the batch-16 / batch-1 ratio per setting.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.models import write_onnx_repo  # noqa: E402
from tritonlite._proto import pb  # noqa: E402
from tritonlite.backends.onnxruntime import session_options, session_settings  # noqa: E402


def config(threads: int, spinning: bool) -> pb.ModelConfig:
    cfg = pb.ModelConfig()
    cfg.parameters["intra_op_thread_count"].string_value = str(threads)
    cfg.parameters["session.intra_op.allow_spinning"].string_value = "1" if spinning else "0"
    return cfg


def rows_per_s(session: object, name: str, batch: int, seconds: float) -> tuple[float, float]:
    x = np.random.default_rng(0).standard_normal((batch, 1024)).astype(np.float32)
    run = session.run  # type: ignore[attr-defined]
    for _ in range(3):
        run(None, {name: x})
    n = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        run(None, {name: x})
        n += 1
    return n * batch / elapsed, elapsed / n * 1000


def main() -> int:
    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--threads", default="1,2")
    ns = p.parse_args()
    batches = [int(b) for b in ns.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_onnx_repo(Path(tmp) / "repo", ("mlp_nobatch",))
        path = str(repo / "mlp_nobatch" / "1" / "model.onnx")
        print(f"onnxruntime {ort.__version__}, {os.cpu_count()} cores, load {os.getloadavg()}")
        print("| intra threads | spinning | batch | rows/s | ms per run |")
        print("|---|---|---|---|---|")
        ratios = []
        for threads in [int(t) for t in ns.threads.split(",")]:
            for spinning in (False, True):
                opts = session_options(session_settings(config(threads, spinning)))
                sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                name = sess.get_inputs()[0].name
                got = {}
                for b in batches:
                    got[b], ms = rows_per_s(sess, name, b, ns.seconds)
                    print(
                        f"| {threads} | {'on' if spinning else 'off'} | {b} | {got[b]:,.0f} "
                        f"| {ms:.2f} |",
                        flush=True,
                    )
                if len(batches) > 1:
                    ratios.append((threads, spinning, got[batches[-1]] / got[batches[0]]))
                del sess
        for threads, spinning, r in ratios:
            print(
                f"intra={threads} spin={'on' if spinning else 'off'}: batch {batches[-1]} / "
                f"batch {batches[0]} rows/s = {r:.2f}x"
            )
        print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

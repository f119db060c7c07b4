"""Latency-vs-throughput plots from bench/results/summary.csv (one PNG per model family/protocol).

Run: ``python bench/plot.py [bench/results/summary.csv]`` (run_all.py calls it). Each line is one
server/configuration swept over concurrency: x = throughput (infer/s), y = latency (ms, log
scale); solid = p99, dotted = p50, each point labelled with its concurrency.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PROTO_NAMES = {"http": "HTTP", "grpc": "gRPC"}

LABELS = {
    ("tritonlite-onnx", "add_sub"): "tritonlite, ONNX, dynamic batching",
    ("tritonlite-onnx", "mlp"): "tritonlite, ONNX, dynamic batching",
    ("tritonlite-onnx", "mlp_nobatch"): "tritonlite, ONNX, batching off",
    ("triton-python", "add_sub"): "Triton, Python-backend twin, dynamic batching",
    ("triton-python", "mlp"): "Triton, Python-backend twin, dynamic batching",
    ("triton-python", "mlp_nobatch"): "Triton, Python-backend twin, batching off",
    ("tritonlite-python", "add_sub"): "tritonlite, Python-backend twin, dynamic batching",
    ("tritonlite-python", "mlp"): "tritonlite, Python-backend twin, dynamic batching",
    ("tritonlite-python", "mlp_nobatch"): "tritonlite, Python-backend twin, batching off",
}


def family(model: str) -> str:
    return "mlp" if model.startswith("mlp") else model


def plot(rows: list[dict[str, str]], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    groups: dict[tuple[str, str], dict[tuple[str, str], list[dict[str, str]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        if r["status"].startswith("ok") and float(r["throughput"]) > 0:
            groups[(family(r["model"]), r["protocol"])][(r["server"], r["model"])].append(r)
    written = []
    for (fam, proto), lines in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(12, 5.5))
        for i, (key, pts) in enumerate(sorted(lines.items())):
            pts.sort(key=lambda r: int(r["concurrency"]))
            x = [float(r["throughput"]) for r in pts]
            color = f"C{i}"
            label = LABELS.get(key, f"{key[0]} {key[1]}")
            ax.plot(
                x,
                [float(r["p99_us"]) / 1e3 for r in pts],
                "o-",
                color=color,
                label=f"{label} (p99)",
            )
            ax.plot(
                x,
                [float(r["p50_us"]) / 1e3 for r in pts],
                ".:",
                color=color,
                label=f"{label} (p50)",
            )
            for r, xv in zip(pts, x, strict=True):
                ax.annotate(
                    f"c{r['concurrency']}",
                    (xv, float(r["p99_us"]) / 1e3),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                    color=color,
                )
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("throughput (infer/s)")
        ax.set_ylabel("client latency (ms, log scale)")
        conc = sorted({int(r["concurrency"]) for pts in lines.values() for r in pts})
        ax.set_title(
            f"{fam} over {PROTO_NAMES.get(proto, proto)}: latency vs throughput "
            f"(perf_analyzer, concurrency {'/'.join(map(str, conc))})"
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = out_dir / f"plot_{fam}_{proto}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "summary.csv"
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    for p in plot(rows, src.parent):
        print(p)


if __name__ == "__main__":
    main()

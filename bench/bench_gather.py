"""Gather kernel vs numpy: ns per part for many tiny parts, GB/s for large tensors.

Run: ``python bench/bench_gather.py``. Prints Markdown tables and writes the raw numbers to
``bench/results/bench_gather.csv``. Goals: <= 50 ns/part on tiny parts; >= 90% of
``np.copyto`` bandwidth on large ones.
"""

from __future__ import annotations

import csv
import pathlib
import time
from collections.abc import Callable

import numpy as np

from tritonlite import kernels

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def best_ns(fn: Callable[[], object], repeats: int, inner: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / inner)
    return best


def _small_case(out: np.ndarray, parts: list[np.ndarray]) -> dict[str, float]:
    n = len(parts)
    inner = max(10, 20_000 // n)
    return {
        "gather_into": best_ns(lambda: kernels.gather_into(out, parts), 7, inner) / n,
        "np.concatenate": best_ns(lambda: np.concatenate(parts, axis=0, out=out), 7, inner) / n,
        "plain": best_ns(lambda: kernels.PLAIN.gather_into(out, parts), 7, inner) / n,
    }


def small_parts(rows: list[dict[str, object]]) -> None:
    print(
        "| parts (1 x 16 float32 each) | gather_into ns/part | np.concatenate(out=) ns/part "
        "| plain twin (numpy path) ns/part |"
    )
    print("|---|---|---|---|")
    for n in (16, 64, 256, 1024):
        parts = [np.full((1, 16), i, dtype=np.float32) for i in range(n)]
        cells = _small_case(np.empty((n, 16), dtype=np.float32), parts)
        for impl, value in cells.items():
            rows.append({"case": f"small n={n}", "impl": impl, "metric": "ns/part", "value": value})
        print(
            f"| {n} | {cells['gather_into']:.1f} | {cells['np.concatenate']:.1f} "
            f"| {cells['plain']:.1f} |"
        )


def _large_case(out: np.ndarray, parts: list[np.ndarray]) -> dict[str, float]:
    def copyto() -> None:
        for i, part in enumerate(parts):
            np.copyto(out[i : i + 1], part)

    total = sum(part.nbytes for part in parts)
    return {
        "gather_into": total / best_ns(lambda: kernels.gather_into(out, parts), 5, 2),
        "np.copyto": total / best_ns(copyto, 5, 2),
        "np.concatenate": total / best_ns(lambda: np.concatenate(parts, axis=0, out=out), 5, 2),
    }


def large_parts(rows: list[dict[str, object]]) -> None:
    print(
        "\n| large tensors (float32) | gather_into GB/s | np.copyto GB/s "
        "| np.concatenate(out=) GB/s | gather / copyto |"
    )
    print("|---|---|---|---|---|")
    for count, mib in ((1, 256), (4, 64), (64, 4)):
        nbytes = mib << 20
        parts = [
            np.random.default_rng(i).random(nbytes // 4, dtype=np.float32).reshape(1, -1)
            for i in range(count)
        ]
        out = np.empty((count, nbytes // 4), dtype=np.float32)
        out[:] = 0  # fault the pages in before timing
        cells = _large_case(out, parts)
        for impl, value in cells.items():
            case = f"large {count}x{mib}MiB"
            rows.append({"case": case, "impl": impl, "metric": "GB/s", "value": value})
        print(
            f"| {count} x {mib} MiB | {cells['gather_into']:.2f} | {cells['np.copyto']:.2f} "
            f"| {cells['np.concatenate']:.2f} "
            f"| {100 * cells['gather_into'] / cells['np.copyto']:.0f}% |"
        )


def main() -> None:
    kernels.warmup()
    print(f"{kernels.describe()}\n")
    rows: list[dict[str, object]] = []
    small_parts(rows)
    large_parts(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "bench_gather.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["case", "impl", "metric", "value"])
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()

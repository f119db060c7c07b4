"""Cost of the batching decision per request (push + next_batch + pop), both BatchQueue twins.

Run: ``python bench/bench_scheduler.py``. Prints a Markdown table and writes the raw numbers to
``bench/results/bench_scheduler.csv``. Goal: <= 5 us per request for the compiled twin.
"""

from __future__ import annotations

import csv
import pathlib
import time
from collections.abc import Callable
from typing import Any

from tritonlite.scheduling import _batcher_py

_batcher_c: Any
try:
    from tritonlite.scheduling import _batcher_c
except ImportError:
    _batcher_c = None

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
REQUESTS = 20_000
REPEATS = 5


def delay0_one_by_one(cls: Any) -> int:
    """An instance always free: each arrival is dispatched alone."""
    q = cls(8, [4, 8], 0)
    for slot in range(REQUESTS):
        q.push(slot, 1, slot)
        take, _ = q.next_batch(slot)
        q.pop(take)
    return REQUESTS


def burst_then_drain(cls: Any) -> int:
    """Bursts of 64 arrivals drained in preferred batches of 8."""
    q = cls(8, [4, 8], 0)
    slot = 0
    while slot < REQUESTS:
        for _ in range(64):
            q.push(slot, 1, slot)
            slot += 1
        while len(q):
            take, _ = q.next_batch(slot)
            q.pop(take)
    return REQUESTS


def delay_until_preferred(cls: Any) -> int:
    """Queue delay on: every arrival asks again until a preferred batch of 32 forms."""
    q = cls(32, [32], 1_000_000)
    for slot in range(REQUESTS):
        q.push(slot, 1, slot)
        take, _ = q.next_batch(slot)
        if take:
            q.pop(take)
    return REQUESTS


def priorities_and_timeouts(cls: Any) -> int:
    """Three levels, REJECT timeouts, shape keys alternating in runs; expired() polled."""
    q = cls(
        16,
        [8, 16],
        0,
        priority_levels=3,
        default_priority_level=2,
        default_policy=(0, 50_000, True, 0),
    )
    slot = 0
    now = 0
    while slot < REQUESTS:
        for _ in range(32):
            q.push(slot, 1, now, slot % 4, 0, (slot // 8) % 2)
            slot += 1
            now += 100
        while len(q):
            take, _ = q.next_batch(now)
            q.expired(now)
            if take:
                q.pop(take)
    return REQUESTS


SCENARIOS: list[tuple[str, Callable[[Any], int]]] = [
    ("delay 0, one request per batch", delay0_one_by_one),
    ("delay 0, bursts of 64 -> batches of 8", burst_then_drain),
    ("delay 1 ms, wait for preferred 32", delay_until_preferred),
    ("3 priority levels + timeouts + 2 shapes", priorities_and_timeouts),
]


def measure(fn: Callable[[Any], int], cls: Any) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        count = fn(cls)
        best = min(best, (time.perf_counter_ns() - start) / count)
    return best


def main() -> None:
    twins: list[tuple[str, Any]] = []
    if _batcher_c is not None:
        twins.append(("cython", _batcher_c.BatchQueue))
    twins.append(("pure", _batcher_py.BatchQueue))
    rows: list[dict[str, Any]] = []
    for name, fn in SCENARIOS:
        for twin, cls in twins:
            rows.append({"scenario": name, "twin": twin, "ns_per_request": measure(fn, cls)})
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "bench_scheduler.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["scenario", "twin", "ns_per_request"])
        writer.writeheader()
        writer.writerows(rows)
    names = [t for t, _ in twins]
    print(
        "| scenario (push + next_batch + pop per request) | "
        + " | ".join(f"{t} ns/req" for t in names)
        + (" | speed-up |" if len(names) == 2 else " |")
    )
    print("|---" * (len(names) + 1 + (len(names) == 2)) + "|")
    for name, _ in SCENARIOS:
        cells = [r["ns_per_request"] for r in rows if r["scenario"] == name]
        line = f"| {name} | " + " | ".join(f"{c:,.0f}" for c in cells)
        if len(cells) == 2:
            line += f" | {cells[1] / cells[0]:.1f}x"
        print(line + " |")
    if _batcher_c is None:
        print("\n(compiled twin not built: only the pure twin was measured)")


if __name__ == "__main__":
    main()

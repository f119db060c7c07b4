"""Server CPU per request by transport: ``--frontend=native`` (also on one shared port) vs
``--frontend=aio`` (aiohttp + grpc.aio), optionally vs another checkout, side by side.

    .venv/bin/python bench/bench_frontends.py [--rounds 2] [--concurrency 16]
        [--variants native,shared,aio] [--baseline PATH] [--model add_sub] [--root PATH]
        [--before PATH] [--protocols http,grpc]

Each round starts every variant in turn (alternating, since the machine is shared and noisy)
and runs perf_analyzer over HTTP and gRPC against the ONNX ``add_sub`` (FP32[16] x 2) of
``bench/models.py``; ``bench/cpu.py`` turns the server's CPU time and its request count into
microseconds per request. ``--baseline PATH`` adds a variant ``base`` that runs the tritonlite
of another checkout (e.g. a ``git worktree`` of the starting commit, with its extension built
in place by ``python setup.py build_ext --inplace``) with its default front ends; ``--before
PATH`` a variant ``before``: the native front end of another checkout (a change measured
before/after in one run). Prints a
Markdown table of the median of the rounds (and every round's figure) and writes
``bench/results/frontends.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import Cpu, measure  # noqa: E402
from models import write_onnx_repo  # noqa: E402
from perf import (  # noqa: E402
    ROOT,
    Point,
    Settings,
    TritonliteServer,
    free_ports,
    perf_analyzer_bin,
    run_point,
)

VARIANTS = {
    "native": ("--frontend", "native"),
    "shared": ("--frontend", "native"),  # plus one port for both, chosen per run
    "aio": ("--frontend", "aio"),
    "base": (),
    "before": ("--frontend", "native"),  # native, from the --before checkout
}


def _server(
    variant: str,
    repo: Path,
    logs: Path,
    baseline: Path | None,
    root: Path = ROOT,
    before: Path | None = None,
) -> TritonliteServer:
    extra = VARIANTS[variant]
    if variant == "shared":
        port = str(free_ports(1)[0])
        extra = (*extra, "--http-port", port, "--grpc-port", port)
    if variant == "base" and baseline is not None:
        root = baseline
    if variant == "before" and before is not None:
        root = before
    return TritonliteServer(repo, logs / f"server_{variant}.log", extra, root=root)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16])
    ap.add_argument("--variants", default="native,shared,aio")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout whose tritonlite the native/shared/aio variants run "
        "(default: this one; a worktree keeps the figures apart from edits "
        "in progress)",
    )
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="adds a variant 'before': --frontend native from this checkout (a "
        "change's before/after, side by side)",
    )
    ap.add_argument("--model", default="add_sub")
    ap.add_argument("--interval-ms", type=int, default=3000)
    a = ap.parse_args()
    variants = (
        a.variants.split(",") + (["base"] if a.baseline else []) + (["before"] if a.before else [])
    )
    pa = perf_analyzer_bin()
    out_dir = ROOT / "bench" / "results"
    logs = out_dir / "logs" / "frontends"
    settings = Settings(
        measurement_interval_ms=a.interval_ms, stability_percentage=50, max_trials=6
    )
    rows: dict[tuple[str, str, int], list[tuple[Cpu, Point]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_onnx_repo(Path(tmp) / "repo", ("add_sub",))
        for rnd in range(a.rounds):
            for variant in variants:
                server = _server(variant, repo, logs, a.baseline, a.root, a.before)
                ports = server.start()
                try:
                    for proto in a.protocols.split(","):
                        for c in a.concurrency:
                            point = Point(variant, "onnx", a.model, proto, c)
                            url = f"127.0.0.1:{ports[proto]}"
                            log = logs / f"pa_{variant}_{proto}_{c}_{rnd}.log"
                            cpu = measure(
                                server.pid,
                                ports["http"],
                                a.model,
                                partial(run_point, pa, point, url, settings, logs / "pa.csv", log),
                            )
                            rows.setdefault((variant, proto, c), []).append((cpu, point))
                            print(
                                f"round {rnd} {variant:6} {proto:4} c={c:<3} "
                                f"{cpu.cpu_us:6.1f} us/req (kernel {cpu.kernel_us:5.1f}, "
                                f"loop {cpu.loop_us:6.1f}, loop busy {cpu.loop_busy:.2f}) "
                                f"{point.throughput:8.0f} infer/s  p50 {point.p50_us:6.0f} us"
                                f"  load {os.getloadavg()[0]:.1f}  {point.status}",
                                flush=True,
                            )
                finally:
                    server.stop()
    print()
    print(
        "| variant | protocol | c | CPU µs/request (median; rounds) | kernel µs | loop µs "
        "| loop busy | infer/s | p50 µs |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    doc = []
    for (variant, proto, c), runs in rows.items():
        cpus = [r[0] for r in runs]
        med = statistics.median
        print(
            f"| {variant} | {proto} | {c} | {med(x.cpu_us for x in cpus):.0f} "
            f"({', '.join(f'{x.cpu_us:.0f}' for x in cpus)}) "
            f"| {med(x.kernel_us for x in cpus):.0f} | {med(x.loop_us for x in cpus):.0f} "
            f"| {med(x.loop_busy for x in cpus):.2f} "
            f"| {med(r[1].throughput for r in runs):,.0f} "
            f"| {med(r[1].p50_us for r in runs):,.0f} |"
        )
        doc.append(
            {
                "variant": variant,
                "protocol": proto,
                "concurrency": c,
                "runs": [
                    {
                        **asdict(x),
                        "throughput": p.throughput,
                        "p50_us": p.p50_us,
                        "command": p.command,
                    }
                    for x, p in runs
                ],
            }
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "frontends.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Triton QA's scheduler-hook schedules against the real tritonserver and tritonlite.

For each case of ``tests/compat/hook_schedules.py`` (or those named), starts a server of each
kind with the case's ``TRITONSERVER_DELAY_SCHEDULER`` / ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER``
and a repository holding only its model (ONNX: the reference needs its ONNX Runtime backend),
plays the schedule and prints both servers' batch sizes, execution and inference counts beside
what Triton's QA test asserts.

    python tests/compare/compare_hooks.py --reference SCRIPT --triton-dir DIR [CASE...]

``SCRIPT`` is a triton-reference launcher (``tools/triton-reference.sh``'s interface: ``start DIR
REPO HTTP GRPC METRICS`` prints ``PID LOG``); each server it starts is stopped by its PID. A
report: exit status 0 whatever the differences.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "compat"))
sys.path.insert(0, str(HERE.parent))

from conftest import start_server  # noqa: E402
from hook_schedules import CASES, Case, Urls, run_case, write_model  # noqa: E402


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _triton(case: Case, script: Path, tool_dir: Path, repo: Path) -> str:
    http, grpc, metrics = _free_ports(3)
    run = subprocess.run(
        [
            "bash",
            str(script),
            "start",
            str(tool_dir),
            str(repo),
            str(http),
            str(grpc),
            str(metrics),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **case.env},
    )
    if run.returncode != 0:
        return f"did not start: {run.stderr.strip()[-200:]}"
    pid = int(run.stdout.split()[0])
    try:
        return _played(case, Urls(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}"))
    finally:
        os.kill(pid, signal.SIGTERM)


def _tritonlite(case: Case, repo: Path) -> str:
    server = start_server(repo, env=case.env)
    try:
        return _played(case, Urls(server.http_url, server.grpc_url, server.metrics_url))
    finally:
        server.stop()


def _played(case: Case, urls: Urls) -> str:
    try:
        batches, executions, inferences, _ = run_case(case, urls)
    except Exception as exc:  # a report row, not a crash
        return f"{type(exc).__name__}: {exc}"[:120]
    return f"{dict(sorted(batches.items()))} exec={executions} infer={inferences}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, required=True)
    ap.add_argument("--triton-dir", type=Path, required=True)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            write_model(repo, case.model)
            want = f"{dict(sorted(case.batches.items()))} exec={case.executions} infer={case.inferences}"
            print(f"{case.name}\n  QA asserts: {want}", flush=True)
            print(
                f"  tritonserver: {_triton(case, args.reference, args.triton_dir, repo)}",
                flush=True,
            )
            print(f"  tritonlite:   {_tritonlite(case, repo)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

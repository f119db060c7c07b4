"""perf_analyzer as tune's load generator, when the user has it (``$PERF_ANALYZER`` or PATH).

One point is one perf_analyzer run at one concurrency (``--concurrency-range C:C``); its ``-f``
CSV gives the throughput and client-side percentiles. The inputs are the same payload pool the
built-in generator uses, written as ``--input-data`` JSON (base64), so both loads send the same
stream. The server-side split comes from the statistics extension around the run, as for the
built-in load.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tritonlite.tune.load import Sample, TensorSpec
from tritonlite.tune.server import ModelStats, TuneError


def find_perf_analyzer() -> str | None:
    """``$PERF_ANALYZER`` (must be executable) or ``perf_analyzer`` on PATH; None when neither."""
    env = os.environ.get("PERF_ANALYZER")
    if env:
        if not os.access(env, os.X_OK):
            raise TuneError(f"PERF_ANALYZER={env} is not an executable file")
        return env
    return shutil.which("perf_analyzer")


def input_data(specs: list[TensorSpec], pool: list[list[bytes]], batched: bool) -> str:
    """perf_analyzer's ``--input-data`` JSON for ``pool`` (shapes without the batch dimension)."""
    steps = []
    for tensors in pool:
        step: dict[str, object] = {}
        for s, raw in zip(specs, tensors, strict=True):
            shape = list(s.shape[1:] if batched else s.shape)
            if s.datatype == "BYTES":
                items, k = [], 0
                while k < len(raw):
                    n = int.from_bytes(raw[k : k + 4], "little")
                    items.append(raw[k + 4 : k + 4 + n].decode())
                    k += 4 + n
                step[s.name] = {"content": items, "shape": shape}
            else:
                step[s.name] = {"b64": base64.b64encode(raw).decode(), "shape": shape}
        steps.append(step)
    return json.dumps({"data": steps})


class PerfAnalyzer:
    """Runs points with the perf_analyzer at ``binary`` against one model."""

    def __init__(
        self,
        binary: str,
        model: str,
        url: str,
        protocol: str,
        specs: list[TensorSpec],
        pool: list[list[bytes]],
        batched: bool,
        workdir: Path,
    ) -> None:
        self.binary, self.model, self.url, self.protocol = binary, model, url, protocol
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.data_path = workdir / "input_data.json"
        self.data_path.write_text(input_data(specs, pool, batched))
        self.last_command = ""

    def run(self, concurrency: int, window_s: float, stats: Callable[[], ModelStats]) -> Sample:
        sample = Sample(concurrency)
        with tempfile.NamedTemporaryFile(suffix=".csv", dir=self.workdir, delete=False) as f:
            csv_path = Path(f.name)
        cmd = [
            self.binary,
            "-m",
            self.model,
            "-u",
            self.url,
            "-i",
            self.protocol,
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            "--measurement-interval",
            str(max(100, int(window_s * 1000))),
            # tune compares candidates by their own repeated probes; a noisy machine must
            # not make perf_analyzer give up on a point ("Failed to obtain stable ...").
            "--stability-percentage",
            "100",
            "--max-trials",
            "6",
            "--input-data",
            str(self.data_path),
            "-f",
            str(csv_path),
        ]
        self.last_command = " ".join(cmd)
        before = stats()
        start = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=max(60.0, 20 * window_s)
            )
        except subprocess.TimeoutExpired:
            sample.error = "perf_analyzer timed out"
            return sample
        finally:
            after = stats()
        sample.server = after.minus(before)
        sample.window_s = time.monotonic() - start
        try:
            rows = list(csv.DictReader(csv_path.read_text().splitlines()))
        except OSError:
            rows = []
        finally:
            csv_path.unlink(missing_ok=True)
        if proc.returncode != 0 or not rows:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            sample.error = "perf_analyzer: " + (lines[-1] if lines else f"exit {proc.returncode}")
            return sample
        row = rows[0]
        sample.throughput = float(row.get("Inferences/Second") or 0)
        sample.p50_us = float(row.get("p50 latency") or 0)
        sample.p90_us = float(row.get("p90 latency") or 0)
        sample.p99_us = float(row.get("p99 latency") or 0)
        sample.avg_us = sum(
            float(row.get(c) or 0)
            for c in (
                "Client Send",
                "Network+Server Send/Recv",
                "Server Queue",
                "Server Compute Input",
                "Server Compute Infer",
                "Server Compute Output",
                "Client Recv",
            )
        )
        sample.count = max(1, int(sample.throughput * window_s))
        return sample

"""``make soak`` at a tiny size, so bench/soak.py keeps working: every mode answers, every answer
is checked, client mistakes get client errors, and the report has its RSS figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]


def test_soak_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--requests",
            "2000",
            "--sample-s",
            "0.5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=150,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["by_mode"]) == {"http", "grpc", "stream", "shm"}
    assert report["ok"] == 2000 - 20 and report["bad_sent"] == 20
    assert report["wrong"] == report["lost"] == report["bad_5xx"] == 0
    assert report["server_exit_code"] == 0 and report["rss_samples"]
    assert report["rss_growth_after_warmup_mib"] == pytest.approx(
        report["rss_end_mib"] - report["rss_after_warmup_mib"], abs=0.11
    )

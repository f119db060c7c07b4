"""docs/architecture.md's "Files one request touches" is what a traced request touches.

``tools/trace_request.py`` serves add_sub in its own process, records with ``sys.setprofile``
the package files whose functions run while one HTTP and one gRPC request are answered, and
prints them; the lists in the doc must be exactly those (a *twin* entry only on the pure-Python
twins, where its source runs; a *when* entry may be there or not).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

pytestmark = pytest.mark.timeout(180)


def doc_lists() -> dict[str, dict[str, str]]:
    """protocol -> {file: "" | "twin" | "when ..."} from the doc's ``trace:`` blocks."""
    text = DOC.read_text()
    out: dict[str, dict[str, bool]] = {}
    for proto in ("http", "grpc"):
        block = re.search(rf"<!-- trace:{proto} -->\n(.*?)<!-- /trace:{proto} -->", text, re.S)
        assert block, f"no trace:{proto} block in {DOC}"
        entries = re.findall(r"^- `([^`]+)`(?: \((twin|when .+)\))?$", block.group(1), re.M)
        assert entries and len(entries) == block.group(1).count("\n- ") + 1
        out[proto] = dict(entries)
    return out


def test_the_doc_lists_the_files_a_traced_request_touches() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "trace_request.py")],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    traced = json.loads(result.stdout)
    pure = os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1"
    for proto, listed in doc_lists().items():
        want = {f for f, mark in listed.items() if not mark or (mark == "twin" and pure)}
        # a "when" file runs only in the case it names (a loaded loop): allowed, not required
        got = set(traced[proto]) - {f for f, mark in listed.items() if mark.startswith("when")}
        assert got == want, (
            f"{proto}: touched but not in the doc: {sorted(got - want)}; "
            f"in the doc but not touched: {sorted(want - got)}"
        )

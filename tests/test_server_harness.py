"""The test harness's servers end with the process that started them: a test worker that
crashes (pytest-xdist replaces it) leaves no server running, though each runs in a session of
its own (``conftest.start_server``, ``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import wait_until

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]

# A stand-in worker: starts a server the way the tests do, says its PID, then dies at once in
# the way the argument names, without running any exit handler.
WORKER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from conftest import start_server
    s = start_server({repo!r})
    print(s.proc.pid, flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent is gone too, init reaps it)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["kill", "exit"])
def test_a_crashed_workers_server_ends_with_it(tmp_path: Path, how: str) -> None:
    repo = tmp_path / "empty_repo"
    repo.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=str(Path(__file__).parent), repo=str(repo)))
    out = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=100
    )
    assert out.returncode == (-signal.SIGKILL if how == "kill" else 3), out.stderr[-2000:]
    pid = int(out.stdout.split()[0])
    try:
        wait_until(lambda: not _alive(pid), 10)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

"""The real tritonserver 2.51 for tests that compare answers: the reference install in
``.tools/triton`` (or ``$TRITONLITE_TRITON_DIR``) started on free loopback ports.

Tests that need it skip with ``require_reference()``'s reason when it is not installed.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import _free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]


def reference_base() -> Path | None:
    """The install (``tree/`` with the server, ``venv/`` with its libraries), or None."""
    base = Path(os.environ.get("TRITONLITE_TRITON_DIR", ROOT / ".tools" / "triton"))
    return base if (base / "tree" / "bin" / "tritonserver").exists() else None


def require_reference() -> Path:
    base = reference_base()
    if base is None:
        pytest.skip(
            "the reference tritonserver is not installed (triton-reference install .tools/triton)"
        )
    return base


def reference_env(base: Path) -> dict[str, str]:
    """The environment tritonserver runs in: its bundled libraries, its venv's python first
    (the Python backend's stub)."""
    site = next((base / "venv" / "lib").glob("python3*/site-packages"))
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(site / "nvidia_pytriton.libs"),
        "PATH": f"{base / 'venv' / 'bin'}:{os.environ['PATH']}",
    }


def http_status(url: str, path: str, headers: dict[str, str] | None = None) -> int:
    """The status of a GET; OSError while nothing listens."""
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


def tritonserver(base: Path) -> str:
    return str(base / "tree" / "bin" / "tritonserver")


class ReferenceTriton:
    """tritonserver serving ``repo`` on free ports (``http_url``, ``grpc_url``), with ``args``
    added. Started once ``ready(self)`` is true (default: ``/v2/health/ready`` answers 200); an
    OSError from it means not listening yet. Output goes to ``log`` when given."""

    def __init__(
        self,
        base: Path,
        repo: Path,
        *args: str,
        log: Path | None = None,
        ready: Callable[[ReferenceTriton], bool] | None = None,
        timeout: float = 120.0,
    ) -> None:
        tree = base / "tree"
        hp, gp = _free_port(), _free_port()
        self.http_url, self.grpc_url = f"127.0.0.1:{hp}", f"127.0.0.1:{gp}"
        self._log = log.open("w") if log is not None else None
        out = self._log if self._log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [
                tritonserver(base),
                f"--model-repository={repo}",
                f"--backend-directory={tree / 'backends'}",
                f"--cache-directory={tree / 'caches'}",
                "--http-address=127.0.0.1",
                f"--http-port={hp}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={gp}",
                "--allow-metrics=false",
                "--allow-gpu-metrics=false",
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=reference_env(base),
            start_new_session=True,
        )
        is_ready = ready or (lambda ref: http_status(ref.http_url, "/v2/health/ready") == 200)

        def probe() -> bool:
            if self.proc.poll() is not None:
                tail = log.read_text()[-3000:] if log is not None else ""
                raise RuntimeError(f"tritonserver exited ({self.proc.returncode}): {tail}")
            try:
                return is_ready(self)
            except OSError:
                return False

        try:
            wait_until(probe, timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log is not None:
            self._log.close()

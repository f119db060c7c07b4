"""The server tune measures: one it starts (``ManagedServer``) or one at ``--url``, and the
repository and statistics calls it makes there (``Control``, plain HTTP/1.1 with urllib).

A started server is ``python -m tritonlite`` on port 0 for every service (the ports are read back
from its ``Started ... at HOST:PORT`` lines), loopback only, ``--model-control-mode explicit``
so candidate configs load through the repository API, with a response cache so candidates that
enable it have one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")
CACHE_BYTES = 256 * 1024 * 1024


class TuneError(Exception):
    """A failure tune reports to the user as one line (no traceback)."""


@dataclass
class ModelStats:
    """Cumulative counters of one model version (the statistics extension), in ns."""

    success: int = 0
    inference_count: int = 0
    execution_count: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    cache_hits: int = 0

    def minus(self, other: ModelStats) -> ModelStats:
        return ModelStats(*(a - b for a, b in zip(_values(self), _values(other), strict=True)))

    def plus(self, other: ModelStats) -> ModelStats:
        return ModelStats(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))


def _values(s: ModelStats) -> tuple[int, ...]:
    return (
        s.success,
        s.inference_count,
        s.execution_count,
        s.queue_ns,
        s.compute_input_ns,
        s.compute_infer_ns,
        s.compute_output_ns,
        s.cache_hits,
    )


class Control:
    """Repository and statistics calls to the server at ``http_url`` (``HOST:PORT``)."""

    def __init__(self, http_url: str, timeout_s: float = 300.0) -> None:
        self.http_url = http_url.removeprefix("http://").rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://{self.http_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw) if raw else {}
            except ValueError:
                return exc.code, {"error": raw.decode(errors="replace")}
        except (urllib.error.URLError, OSError) as exc:
            raise TuneError(f"cannot reach the server at {self.http_url}: {exc}") from None

    def live(self) -> bool:
        try:
            return self._call("GET", "/v2/health/live")[0] == 200
        except TuneError:
            return False

    def config(self, model: str) -> dict[str, Any]:
        status, body = self._call("GET", f"/v2/models/{model}/config")
        if status != 200:
            raise TuneError(f"model '{model}': {body.get('error', status)}")
        return dict(body)

    def metadata(self, model: str) -> dict[str, Any]:
        status, body = self._call("GET", f"/v2/models/{model}")
        if status != 200:
            raise TuneError(f"model '{model}': {body.get('error', status)}")
        return dict(body)

    def load(self, model: str, config_json: str | None) -> str | None:
        """Load ``model`` (with ``config_json`` as its config); the server's error, or None."""
        body = {"parameters": {"config": config_json}} if config_json is not None else {}
        status, answer = self._call("POST", f"/v2/repository/models/{model}/load", body)
        return None if status == 200 else str(answer.get("error", f"HTTP {status}"))

    def stats(self, model: str) -> ModelStats:
        status, body = self._call("GET", f"/v2/models/{model}/stats")
        if status != 200:
            raise TuneError(f"statistics of '{model}': {body.get('error', status)}")
        out = ModelStats()
        for entry in body.get("model_stats", []):
            inf = entry.get("inference_stats", {})
            out.success += int(inf.get("success", {}).get("count", 0))
            out.queue_ns += int(inf.get("queue", {}).get("ns", 0))
            out.compute_input_ns += int(inf.get("compute_input", {}).get("ns", 0))
            out.compute_infer_ns += int(inf.get("compute_infer", {}).get("ns", 0))
            out.compute_output_ns += int(inf.get("compute_output", {}).get("ns", 0))
            out.cache_hits += int(inf.get("cache_hit", {}).get("count", 0))
            out.inference_count += int(entry.get("inference_count", 0))
            out.execution_count += int(entry.get("execution_count", 0))
        return out


class ManagedServer:
    """``python -m tritonlite`` serving ``repo`` with ``model`` loaded, until ``stop``."""

    def __init__(
        self,
        repo: Path,
        model: str,
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            "--model-control-mode",
            "explicit",
            "--load-model",
            model,
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
            "--metrics-address",
            "127.0.0.1",
            "--cache-config",
            f"local,size={CACHE_BYTES}",
            *(extra_args or []),
        ]
        self.ports: dict[str, str] = {}
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._log = log_path.open("w") if log_path else None
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._pump = threading.Thread(target=self._drain, daemon=True)
        self._pump.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                if self._log:
                    self._log.write(line)
                self._lines = (self._lines + [line.rstrip("\n")])[-200:]
                m = _STARTED.search(line)
                if m:
                    host = "127.0.0.1" if m.group(2) in ("0.0.0.0", "[::]", "::") else m.group(2)
                    self.ports[m.group(1)] = f"{host}:{m.group(3)}"
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def tail(self, n: int = 20) -> str:
        with self._cond:
            return "\n".join(self._lines[-n:])

    def wait_started(self, timeout_s: float = 120.0) -> None:
        wanted = {"HTTPService", "GRPCInferenceService"}
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not wanted <= set(self.ports):
                if self.proc.poll() is not None and not self._pump.is_alive():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        if not wanted <= set(self.ports):
            code = self.proc.poll()
            self.stop()
            raise TuneError(
                f"the tritonlite server did not start (exit code {code}); its last "
                f"lines:\n{self.tail()}"
            )
        control = Control(self.http_url)
        while not control.live():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise TuneError(
                    f"the tritonlite server is not live; its last lines:\n{self.tail()}"
                )
            time.sleep(0.05)

    @property
    def http_url(self) -> str:
        return self.ports["HTTPService"]

    @property
    def grpc_url(self) -> str:
        return self.ports["GRPCInferenceService"]

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._pump.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self._log:
            self._log.close()
            self._log = None

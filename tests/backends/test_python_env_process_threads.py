"""A python-environment worker's helpers run on instance and load threads while other threads
change what they read: the relay thread appends the worker's output to ``_tail`` (it can outlive
the worker: a child process of the model's holds the pipe), and models' code on other threads
sets and deletes environment variables. Neither may make them raise (``deque mutated during
iteration``, ``KeyError``)."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tritonlite.backends.python.env_process import WorkerProcess, worker_env


@contextmanager
def _churning(step: Callable[[int], None]) -> Iterator[None]:
    """``step(i)`` in a loop on another thread, with thread switches as often as possible."""
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            step(i)
            i += 1

    other = threading.Thread(target=churn)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    other.start()
    try:
        yield
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)


class _Exited:
    pid = 4242

    def wait(self, timeout: float | None = None) -> int:
        return 1


class _StillRelaying:
    def join(self, timeout: float | None = None) -> None:
        return None  # the join timed out: the relay thread goes on


def test_ended_while_the_relay_thread_appends() -> None:
    worker: Any = WorkerProcess.__new__(WorkerProcess)
    worker._proc = _Exited()
    worker._drain = _StillRelaying()
    worker.python = Path("/env/bin/python3")
    worker.label = "model instance 'm_0'"
    worker._tail = collections.deque(maxlen=20)
    for i in range(20):
        worker._tail.append(f"line {i}")

    with _churning(lambda i: worker._tail.append(f"more {i}")):
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            text = worker._ended("execute")
            assert "exited with code 1 during execute" in text


def test_worker_env_while_another_thread_deletes_variables(tmp_path: Path) -> None:
    names = [f"_TRITONLITE_CHURN_{i}" for i in range(64)]
    for n in names:
        os.environ[n] = "1"

    def step(i: int) -> None:  # what a model's os.environ.pop / assignment does
        os.environ.pop(names[i % 64], None)
        os.environ[names[(i + 32) % 64]] = "1"

    try:
        with _churning(step):
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                env = worker_env(tmp_path)
                assert env["PATH"].startswith(str(tmp_path / "bin"))
                assert "PYTHONPATH" not in env
    finally:
        for n in names:
            os.environ.pop(n, None)

"""One worker process of an ``EXECUTION_ENV_PATH`` environment and the socket to it.

``WorkerProcess`` starts ``env_worker.py`` under the environment's interpreter with one end
of a Unix socket pair, relays the worker's output into the server log (one line at a time,
prefixed with ``[name]``), and makes calls: one message out, one answer back. A worker that
dies or stops answering makes the call raise ``WorkerGone`` with a sentence saying how it
ended (its exit code or signal, and its last lines of output). Used from one thread at a time;
``alive()`` from any. ``on_exit(worker)`` is called on the relay thread when the worker's
output ends (it exited), whoever made it exit.

With ``streamed`` (model instances), a reader thread takes every message the worker sends:
what it sends on its own (a decoupled response ``{"op": "send"}``, a BLS request ``{"op":
"bls"}``) goes to ``streamed(worker, meta, buf)`` as it comes, on that thread, in order;
answers go to the waiting ``call``; when the worker is gone, ``streamed(worker, {"op":
"gone"}, ...)`` is called once. ``post`` sends a message that needs no answer.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonlite.backends.python.env_worker import ChannelClosed, recv_message, send_message

log = logging.getLogger("tritonlite")

WORKER = Path(__file__).with_name("env_worker.py")
START_TIMEOUT_S = 120.0  # the interpreter and numpy import, on a loaded machine
FINALIZE_TIMEOUT_S = 30.0


class WorkerGone(Exception):
    """The worker died or stopped answering; ``str()`` says how, for an error message."""


def worker_env(root: Path) -> dict[str, str]:
    """The worker's environment variables: the server's, as ``root``'s ``activate`` leaves them,
    without ``PYTHONHOME`` / ``PYTHONPATH`` (nothing of the server's packages leaks in)."""
    # The keys (os.environ iterates a copy of them), then each value by get(): a model's code
    # on another thread may delete a variable meanwhile, where items() would raise KeyError.
    env = os.environ
    out = {
        k: v
        for k in list(env)
        if k not in ("PYTHONHOME", "PYTHONPATH") and (v := env.get(k)) is not None
    }
    out["PATH"] = os.pathsep.join([str(root / "bin"), out.get("PATH", os.defpath)])
    if (root / "pyvenv.cfg").is_file():
        out["VIRTUAL_ENV"] = str(root)
    else:
        out["CONDA_PREFIX"] = str(root)
    out["PYTHONUNBUFFERED"] = "1"  # the model's prints reach the log as they happen
    return out


class WorkerProcess:
    """A started worker (``hello`` is its first message: pid, python and numpy versions)."""

    def __init__(
        self,
        python: Path,
        root: Path,
        name: str,
        label: str,
        on_exit: Callable[[WorkerProcess], None] | None = None,
        streamed: Callable[[WorkerProcess, dict[str, Any], bytearray], None] | None = None,
    ) -> None:
        self.python = python
        self._on_exit = on_exit
        self._streamed = streamed
        self._answers: queue.Queue[tuple[dict[str, Any], bytearray] | None] = queue.Queue()
        self._send_lock = threading.Lock()
        self.name = name
        self.label = label  # what error messages call it: "model instance 'm_0_0'"
        self._broken = False
        self._tail: collections.deque[str] = collections.deque(maxlen=20)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [str(python), str(WORKER), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=worker_env(root),
            )
        except OSError as exc:
            ours.close()
            raise WorkerGone(f"cannot start {python} for {label}: {exc}") from None
        finally:
            theirs.close()
        self._sock = ours
        self._drain = threading.Thread(target=self._relay, name=f"{name}-output", daemon=True)
        self._drain.start()
        try:
            self._sock.settimeout(START_TIMEOUT_S)
            try:
                self.hello, _ = recv_message(self._sock)
            except ChannelClosed:
                raise WorkerGone(self._ended("starting")) from None
            self._sock.settimeout(None)
        except BaseException:
            self.stop(finalize=False)
            raise
        if streamed is not None:
            threading.Thread(target=self._read, name=f"{name}-reader", daemon=True).start()

    def _read(self) -> None:
        assert self._streamed is not None
        while True:
            try:
                meta, buf = recv_message(self._sock)
            except (ChannelClosed, OSError):
                break
            if meta.get("op") in ("send", "bls", "is_cancelled"):
                try:
                    self._streamed(self, meta, buf)
                except Exception:  # a stream's failure must not stop the others
                    log.exception("%s: a streamed response failed", self.label)
            else:
                self._answers.put((meta, buf))
        self._answers.put(None)
        self._streamed(self, {"op": "gone"}, bytearray())

    def _receive(self, timeout: float | None = None) -> tuple[dict[str, Any], bytearray]:
        if self._streamed is None:
            self._sock.settimeout(timeout)
            return recv_message(self._sock)
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise ChannelClosed("timed out") from None
        if answer is None:
            self._answers.put(None)  # the worker is gone: every later call hears it too
            raise ChannelClosed("end of stream")
        return answer

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _relay(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._tail.append(line)
            log.info("[%s] %s", self.name, line)
        if self._on_exit is not None:
            self._on_exit(self)

    def call(
        self, meta: dict[str, Any], blobs: list[Any], during: str
    ) -> tuple[dict[str, Any], bytearray]:
        """Send one message and wait for the answer (``during`` names the step, for errors)."""
        try:
            if self._broken:
                raise ChannelClosed("broken")
            with self._send_lock:
                send_message(self._sock, meta, blobs)
            return self._receive()
        except (ChannelClosed, OSError):
            self._broken = True
            raise WorkerGone(self._ended(during)) from None

    def post(self, meta: dict[str, Any], blobs: list[Any]) -> None:
        """Send a message that has no answer (a BLS response); raises OSError if it cannot."""
        with self._send_lock:
            send_message(self._sock, meta, blobs)

    def alive(self) -> bool:
        return not self._broken and self._proc.poll() is None

    @property
    def broken(self) -> bool:
        """A call failed, or the worker said it exits: it ended on a request, not while idle."""
        return self._broken

    def mark_broken(self) -> None:
        """No more calls: the worker said it is exiting."""
        self._broken = True

    def _ended(self, during: str) -> str:
        try:
            code = self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
            how = "stopped answering and was killed"
        else:
            if code < 0:
                try:
                    how = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"was killed by signal {-code}"
            else:
                how = f"exited with code {code}"
        self._drain.join(timeout=2.0)
        text = (
            f"the python process of {self.label} (pid {self._proc.pid}, {self.python}) "
            f"{how} during {during}"
        )
        # list() copies in one step: the relay thread may still be appending (the join above
        # timed out: a child process of the model's can keep the pipe open after the worker died)
        tail = [line for line in list(self._tail) if line.strip()][-8:]
        if tail and code >= 0:
            text += ". Its last output:\n" + "\n".join(tail)
        return text

    def stop(self, finalize: bool) -> None:
        """Ask the worker to finalize (if ``finalize`` and it can) and end it."""
        if finalize and self.alive():
            try:
                with self._send_lock:
                    send_message(self._sock, {"op": "finalize"}, [])
                self._receive(FINALIZE_TIMEOUT_S)
            except (ChannelClosed, OSError) as exc:
                log.warning("finalize of %s did not finish: %s", self.label, exc)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread, if any
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._drain.join(timeout=2.0)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

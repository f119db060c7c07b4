"""Request tracing (Triton's ``triton`` trace mode, level TIMESTAMPS): sampling and trace files.

A ``TraceSetting`` samples requests (every ``rate``-th, at most ``count`` traces, -1 unlimited)
and buffers the JSON of finished traces; a ``TraceFile`` writes them the way tritonserver does:
``<file>`` holds one JSON array written when the server exits (or when a replaced setting's last
trace finishes), ``<file>.<n>`` (n = 0, 1, ...) one array each time ``log_frequency`` traces were
collected, or when ``count`` is used up. Each activity is its own object in the array:
``{"id":1,"model_name":"m","model_version":1,"request_id":"r"}`` then
``{"id":1,"timestamps":[{"name":"REQUEST_START","ns":...}]}`` per timestamp, in Triton's order.

Timestamps are ``time.monotonic_ns()`` (CLOCK_MONOTONIC, what Triton's steady_clock reads).
Sampling, stamping and buffering run on the event loop; only ``TraceWriter``'s thread touches
files, so tracing never blocks the loop on disk I/O.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Any

log = logging.getLogger("tritonlite")

_ids = itertools.count(1)
_STOP = object()


class TraceWriter:
    """One background thread that performs every trace file write, in submission order."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Any, *args: Any) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
            self._thread.start()
        self._work.put((fn, args))

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except OSError as exc:
                log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        """Finish every write submitted so far; later submissions start a new thread."""
        if self._thread is not None:
            self._work.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None


class TraceFile:
    """``<name>`` (one array, closed at exit) and its indexed siblings ``<name>.<n>``."""

    def __init__(self, name: str, writer: TraceWriter) -> None:
        self.name = name
        self._writer = writer
        self._index = 0
        self._opened = False  # main file: '[' written (writer thread only)
        self._closed = False

    def save(self, text: str, to_index_file: bool) -> None:
        """Queue ``text`` (comma-joined trace objects) for writing; returns at once."""
        if to_index_file:
            path = f"{self.name}.{self._index}"
            self._index += 1
            self._writer.submit(self._write_index, path, text)
        else:
            self._writer.submit(self._append, text)

    @staticmethod
    def _write_index(path: str, text: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write("[" + text + "]")

    def _append(self, text: str) -> None:
        with open(self.name, "w" if not self._opened else "a", encoding="utf-8") as f:
            f.write(("," if self._opened else "[") + text)
        self._opened = True

    def _finish(self) -> None:
        if self._opened and not self._closed:
            with open(self.name, "a", encoding="utf-8") as f:
                f.write("]")
            self._closed = True

    def close(self) -> None:
        self._writer.submit(self._finish)


class TraceSetting:
    """One immutable set of trace values plus its sampling counters and trace buffer.

    Replaced, never edited, by a settings update (traces already sampled keep the setting that
    sampled them); ``retire`` then flushes the buffer once its last trace is released.
    ``specified`` names the values set explicitly (not inherited from the fallback setting).
    """

    def __init__(
        self,
        level: tuple[str, ...],
        rate: int,
        count: int,
        log_frequency: int,
        file: TraceFile,
        specified: frozenset[str] = frozenset(),
    ) -> None:
        self.level = level
        self.rate = rate
        self.count = count
        self.log_frequency = log_frequency
        self.file = file
        self.specified = specified
        self._sample = 0
        self._collected = 0
        self._live = 0
        self._in_buffer = 0
        self._buffer: list[str] = []
        self._retired = False
        if "TIMESTAMPS" not in level:
            self.reason = "tracing is disabled"
        elif rate == 0:
            self.reason = "sample rate must be non-zero"
        elif not file.name:
            self.reason = "trace file name is not given"
        else:
            self.reason = ""

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def sample(self, model_name: str, model_version: int, request_id: str) -> Trace | None:
        """Count one request; a Trace when this one is sampled, else None."""
        if not self.valid:
            return None
        self._sample += 1
        if self._sample % self.rate:
            return None
        if self.count > 0:
            self.count -= 1
        self._live += 1
        return Trace(self, model_name, model_version, request_id)

    def write(self, text: str) -> None:
        """Buffer one finished trace; save a batch when log_frequency or count says so."""
        self._buffer.append(text)
        self._in_buffer += 1
        self._collected += 1
        self._live -= 1
        if (self.count == 0 and self._collected == self._sample) or (
            self.log_frequency and self._in_buffer >= self.log_frequency
        ):
            self._save(True)
        elif self._retired and self._live == 0:
            self._save(self.log_frequency != 0)

    def _save(self, to_index_file: bool) -> None:
        if self._buffer:
            self.file.save(",".join(self._buffer), to_index_file)
        self._buffer = []
        self._in_buffer = 0

    def retire(self) -> None:
        """This setting was replaced: flush what it holds once no trace of it is running."""
        self._retired = True
        if self._live == 0:
            self._save(self.log_frequency != 0)

    def flush_at_exit(self) -> None:
        self._save(self.log_frequency != 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace_level": list(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file.name,
            "trace_mode": "triton",
        }


def _stamp(trace_id: int, name: str, ns: int) -> str:
    return f'{{"id":{trace_id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}'


class Trace:
    """One sampled request's timestamps; written once through ``release``.

    The core stamps REQUEST_START .. REQUEST_END (``stamp``); a front end that serves the
    request adds its own with ``frontend`` and then calls ``release``; with no front end the
    core releases it. Order in the file follows tritonserver's: HTTP receive stamps before the
    request's header object, gRPC read stamps after REQUEST_END.
    """

    __slots__ = (
        "id",
        "model_name",
        "model_version",
        "request_id",
        "setting",
        "stamps",
        "response_ns",
        "protocol",
        "recv",
        "send",
        "_released",
    )

    def __init__(
        self, setting: TraceSetting, model_name: str, model_version: int, request_id: str
    ) -> None:
        self.id = next(_ids)
        self.setting = setting
        self.model_name = model_name
        self.model_version = model_version
        self.request_id = request_id
        self.stamps: list[tuple[str, int]] = []
        self.response_ns = 0  # INFER_RESPONSE_COMPLETE: the response was handed back
        self.protocol = ""
        self.recv: tuple[int, int] = (0, 0)
        self.send: tuple[int, int] = (0, 0)
        self._released = False

    def stamp(self, name: str, ns: int) -> None:
        self.stamps.append((name, ns))

    def completed(self, enqueue_ns: int, timing: Any, now_ns: int) -> None:
        """The scheduler's and the instance's stamps for a finished request (``timing`` an
        ExecTiming, or None when the batch never ran)."""
        st = self.stamps
        st.append(("QUEUE_START", enqueue_ns))
        if timing is not None:
            inp = timing.input_end_ns or timing.start_ns
            out = timing.infer_end_ns or timing.end_ns
            st += [
                ("COMPUTE_START", timing.start_ns),
                ("COMPUTE_INPUT_END", inp),
                ("COMPUTE_OUTPUT_START", out),
                ("COMPUTE_END", timing.end_ns),
            ]
        self.response_ns = now_ns
        st.append(("REQUEST_END", now_ns))

    def end(self, ns: int) -> None:
        """Stamp REQUEST_END unless the scheduler already did."""
        if not self.stamps or self.stamps[-1][0] != "REQUEST_END":
            self.stamps.append(("REQUEST_END", ns))

    def frontend(self, protocol: str, recv: tuple[int, int], send: tuple[int, int]) -> None:
        """``protocol`` "HTTP" or "GRPC"; (start, end) of reading the request and sending.

        A zero ``recv`` (tracing was switched on while the request was being read) becomes
        REQUEST_START."""
        if not recv[0] and self.stamps:
            recv = (self.stamps[0][1], self.stamps[0][1])
        self.protocol, self.recv, self.send = protocol, recv, send

    def release(self) -> None:
        """Render and hand the trace to its setting's buffer (idempotent)."""
        if self._released:
            return
        self._released = True
        self.setting.write(self.render())

    def render(self) -> str:
        i = self.id
        head = (
            f'{{"id":{i},"model_name":{_json_str(self.model_name)},'
            f'"model_version":{self.model_version}'
        )
        if self.request_id:
            head += f',"request_id":{_json_str(self.request_id)}'
        parts: list[str] = []
        core = [_stamp(i, n, ns) for n, ns in self.stamps]
        done = [_stamp(i, "INFER_RESPONSE_COMPLETE", self.response_ns)] if self.response_ns else []
        if self.protocol == "HTTP":
            parts += [
                _stamp(i, "HTTP_RECV_START", self.recv[0]),
                _stamp(i, "HTTP_RECV_END", self.recv[1]),
                head + "}",
            ]
            parts += core[:2] + done + core[2:]
            parts += [
                _stamp(i, "HTTP_SEND_START", self.send[0]),
                _stamp(i, "HTTP_SEND_END", self.send[1]),
            ]
        elif self.protocol == "GRPC":
            parts += [
                head + "}",
                *core,
                _stamp(i, "GRPC_WAITREAD_START", self.recv[0]),
                _stamp(i, "GRPC_WAITREAD_END", self.recv[1]),
                *done,
                _stamp(i, "GRPC_SEND_START", self.send[0]),
                _stamp(i, "GRPC_SEND_END", self.send[1]),
            ]
        else:
            parts += [head + "}", *core]
        return ",".join(parts)


def _json_str(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)

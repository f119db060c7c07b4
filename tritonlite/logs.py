"""Log line format (Triton's ``I1202 19:50:52.123456 1234 file] message`` or ISO8601), and a
per-key rate limit for lines a client can cause (``RateLimitedLog``)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


class TritonFormatter(logging.Formatter):
    def __init__(self, iso8601: bool = False) -> None:
        super().__init__()
        self._iso = iso8601

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[0] if record.levelname != "DEBUG" else "I"
        t = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        if self._iso:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            head = f"{stamp} {level} {os.getpid()} {record.module}]"
        else:
            stamp = f"{time.strftime('%m%d %H:%M:%S', t)}.{micros:06d}"
            head = f"{level}{stamp} {os.getpid()} {record.module}]"
        text = f"{head} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def set_iso8601(iso8601: bool) -> None:
    """Switch the package's log lines between the default and ISO8601 formats (at run time)."""
    for handler in logging.getLogger("tritonlite").handlers:
        if isinstance(handler.formatter, TritonFormatter):
            handler.formatter._iso = iso8601


def configure(verbose: int, iso8601: bool, log_file: str = "") -> None:
    """Log to stderr, or to ``log_file`` (appended) when one is given (``--log-file``)."""
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(TritonFormatter(iso8601))
    root = logging.getLogger("tritonlite")
    root.handlers[:] = [handler]
    root.propagate = False
    root.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)


class RateLimitedLog:
    """At most ``burst`` lines per key in each ``interval_s``; the rest are counted, and one
    summary line ("suppressed K similar ...") says how many when the interval ends.

    A flood of one kind of event (a client sending thousands of bad requests) then costs at
    most ``burst + 1`` lines per key and interval. Keys must come from a small closed set
    (their state is kept forever). The summary is written by a timer on the running event
    loop, or else by the next ``log`` call for that key after the interval; ``flush`` writes
    any pending summaries now (at shutdown).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 10,
        interval_s: float = 60.0,
        level: int = logging.INFO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._burst = burst
        self._interval = interval_s
        self._level = level
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [window start, lines written in it, suppressed in it, timer pending]
        self._windows: dict[str, list[Any]] = {}

    def log(self, key: str, msg: str, *args: object) -> bool:
        """Write ``msg % args`` unless ``key`` used up its burst; True if it was written."""
        now = self._clock()
        with self._lock:
            w = self._windows.get(key)
            if w is None:
                w = self._windows[key] = [now, 0, 0, False]
            elif now >= w[0] + self._interval:
                self._summarise(key, w)
                w[0], w[1] = now, 0
            if w[1] < self._burst:
                w[1] += 1
                write = True
            else:
                w[2] += 1
                write = False
                if not w[3]:
                    w[3] = self._schedule(key, w[0] + self._interval - now)
        if write:
            self._logger.log(self._level, msg, *args)
        return write

    def flush(self) -> None:
        """Write the summary of every key that has suppressed lines pending."""
        with self._lock:
            for key, w in self._windows.items():
                self._summarise(key, w)

    def suppressed(self, key: str) -> int:
        """How many lines of ``key`` are suppressed and not yet summarised."""
        with self._lock:
            w = self._windows.get(key)
            return 0 if w is None else int(w[2])

    def _schedule(self, key: str, delay: float) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: the next log() after the window sums up
            return False
        loop.call_later(max(delay, 0.0), self._on_timer, key)
        return True

    def _on_timer(self, key: str) -> None:
        with self._lock:
            w = self._windows.get(key)
            if w is not None:
                w[3] = False
                self._summarise(key, w)

    def _summarise(self, key: str, w: list[Any]) -> None:
        # the caller holds the lock; logging handlers never call back into this object
        if w[2]:
            self._logger.log(
                self._level,
                "suppressed %d similar %s messages in the last %gs",
                w[2],
                key,
                self._interval,
            )
            w[2] = 0

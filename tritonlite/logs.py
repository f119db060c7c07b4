"""Log line format: Triton's ``I1202 19:50:52.123456 1234 file] message`` or ISO8601."""

from __future__ import annotations

import logging
import os
import sys
import time


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
    handler: logging.Handler = (logging.FileHandler(log_file, encoding="utf-8") if log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(TritonFormatter(iso8601))
    root = logging.getLogger("tritonlite")
    root.handlers[:] = [handler]
    root.propagate = False
    root.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)

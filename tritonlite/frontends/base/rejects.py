"""Requests refused for what the client sent: one log line at most, and a counter by reason.

Every front end answers a client's mistake (a malformed body, an unknown model, a frame that
breaks HTTP/2, an upload past the size limit) with an error, and then calls ``REJECTS.http``,
``grpc_errors.rejected`` (which knows the gRPC statuses) or ``REJECTS.note`` when it knows the
reason itself. Each call

* counts the request in ``tritonlite_rejected_requests_total{protocol, reason}`` on the
  metrics port (``collect``), and
* logs one line, never a traceback, rate-limited per (protocol, reason) by ``RateLimitedLog``:
  a client cannot fill the log, and a summary line says how many lines were left out.

Server errors (500 / INTERNAL) are not rejections: they are logged where they happen, with
their traceback. ``REJECTS`` is process-wide, like the ``logging`` registry: the places that
refuse a request (error tables, codecs, the wire layers) hold no handle on the server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily

from tritonlite.logs import RateLimitedLog

PROTOCOLS = ("http", "grpc")
REASONS = (
    "bad_request",
    "not_found",
    "unsupported",
    "too_large",
    "timeout",
    "protocol_error",
    "unavailable",
    "forbidden",
)

_HTTP_REASONS = {
    404: "not_found",
    405: "unsupported",
    415: "unsupported",
    501: "unsupported",
    505: "unsupported",
    408: "timeout",
    413: "too_large",
    414: "too_large",
    431: "too_large",
    429: "unavailable",
    503: "unavailable",
    401: "forbidden",
    403: "forbidden",
}
_MAX_MESSAGE = 200  # characters of the client-influenced message that reach the log


def http_reason(status: int) -> str | None:
    """The reason an HTTP error status counts under, or None (success, server error)."""
    reason = _HTTP_REASONS.get(status)
    if reason is None and 400 <= status < 500:
        return "bad_request"
    return reason


def _one_line(message: str) -> str:
    # the text may carry what the client sent: no line breaks or control characters in the log
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message[:_MAX_MESSAGE])
    return text + ("..." if len(message) > _MAX_MESSAGE else "")


class Rejects:
    """Counts of rejected requests by (protocol, reason), and their rate-limited log lines."""

    def __init__(
        self, logger: logging.Logger | None = None, *, burst: int = 10, interval_s: float = 60.0
    ) -> None:
        self.log = RateLimitedLog(
            logger or logging.getLogger("tritonlite.rejects"), burst=burst, interval_s=interval_s
        )
        self._lock = threading.Lock()
        self._counts = {(p, r): 0 for p in PROTOCOLS for r in REASONS}

    def note(self, protocol: str, reason: str, message: str, status: int | str = "") -> None:
        """Count one rejected request and log it (subject to the rate limit)."""
        key = (protocol, reason)
        with self._lock:
            if key not in self._counts:
                raise ValueError(f"unknown rejection {key!r}")
            self._counts[key] += 1
        self.log.log(
            f"{protocol}/{reason}",
            "rejected %s request (%s %s): %s",
            protocol,
            reason,
            status,
            _one_line(message),
        )

    def http(self, status: int, message: str, reason: str | None = None) -> None:
        """An HTTP error response with ``status``: counted unless it is a server error."""
        reason = reason or http_reason(status)
        if reason is not None:
            self.note("http", reason, message, status)

    def count(self, protocol: str, reason: str | None = None) -> int:
        """Rejections so far for ``protocol`` (and ``reason``, else all reasons)."""
        with self._lock:
            return sum(
                v for (p, r), v in self._counts.items() if p == protocol and reason in (None, r)
            )

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The ``tritonlite_rejected_requests_total`` family, every label pair present."""
        fam = CounterMetricFamily(
            "tritonlite_rejected_requests",
            "Requests refused for what the client sent (4xx / client gRPC statuses), by "
            "protocol and reason; server errors are not counted",
            labels=["protocol", "reason"],
        )
        with self._lock:
            counts = sorted(self._counts.items())
        for (protocol, reason), value in counts:
            fam.add_metric([protocol, reason], value)
        yield fam


REJECTS = Rejects()

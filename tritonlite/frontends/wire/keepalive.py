"""gRPC server keepalive, ping abuse policy and connection age for the native transport.

grpc-core applies these per HTTP/2 connection from its channel arguments; Triton exposes them
as ``--grpc-keepalive-*``, ``--grpc-http2-*`` and ``--grpc-max-connection-age*``. This module
holds the same rules for ``wire.grpc_native``: ``Keepalive(settings, host, loop)`` is created
per connection, fed events by the transport and acts through its ``KeepaliveHost``.

* Keepalive: ``time_ms`` after the last bytes received, while a call is open (or always with
  ``permit_without_calls``), the server sends a PING; bytes received meanwhile or its ACK
  prove the client alive, otherwise the connection is closed ``timeout_ms`` after the PING
  (GOAWAY, then close). The next PING waits for the ACK; a PING left unanswered for
  ``ping_timeout_ms`` ends the connection with GOAWAY ENHANCE_YOUR_CALM "ping_timeout" (a
  client that sends but never acknowledges). At most ``max_pings_without_data`` PINGs go out
  between two frames of headers or data the server sends (0: no limit); one over that waits
  for the next.
* Ping abuse: a client PING sooner than ``min_recv_ping_interval_ms`` after the previous one,
  or sooner than two hours when no stream is open and ``permit_without_calls`` is off, is a
  strike; past ``max_ping_strikes`` strikes (0: no limit) the connection ends with GOAWAY
  ENHANCE_YOUR_CALM "too_many_pings". Headers or data sent by the server forgive the strikes.
* Connection age: ``max_age_ms`` (+-10% jitter) after the connection opened the server sends
  GOAWAY (NO_ERROR) so the client reconnects; ``max_age_grace_ms`` later the connection is
  closed even with calls open (they end UNAVAILABLE). ``None``: no limit, no grace limit.

Ownership: the policy owns its timers and cancels them on ``stop()``; the host owns the
connection and its calls.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Callable
from typing import Any, Protocol

# the interval grpc-core enforces between client PINGs on a connection with no calls when
# keepalive_permit_without_calls is off: RFC 1122's TCP keep-alive floor
_IDLE_PING_INTERVAL_S = 7200.0
# grpc-core spreads max_connection_age by this fraction either way, so connections opened
# together are not all sent away together
AGE_JITTER = 0.1
PING = 6
_PING_FRAME = struct.Struct(">BHBBL8s")


class KeepaliveSettings:
    """The server's keepalive, ping and age settings (Triton's flags, in milliseconds).

    The defaults are grpc-core's server defaults; ``max_age_ms`` / ``max_age_grace_ms``
    ``None`` mean no limit."""

    __slots__ = (
        "time_ms",
        "timeout_ms",
        "permit_without_calls",
        "max_pings_without_data",
        "min_recv_ping_interval_ms",
        "max_ping_strikes",
        "max_age_ms",
        "max_age_grace_ms",
        "ping_timeout_ms",
    )

    def __init__(
        self,
        *,
        time_ms: int = 7_200_000,
        timeout_ms: int = 20_000,
        permit_without_calls: bool = False,
        max_pings_without_data: int = 2,
        min_recv_ping_interval_ms: int = 300_000,
        max_ping_strikes: int = 2,
        max_age_ms: int | None = None,
        max_age_grace_ms: int | None = None,
        ping_timeout_ms: int = 60_000,
    ) -> None:
        # grpc-core's clamps: a keepalive time of at least 1 ms, nothing negative
        self.time_ms = max(1, time_ms)
        self.timeout_ms = max(0, timeout_ms)
        self.permit_without_calls = permit_without_calls
        self.max_pings_without_data = max(0, max_pings_without_data)
        self.min_recv_ping_interval_ms = max(0, min_recv_ping_interval_ms)
        self.max_ping_strikes = max(0, max_ping_strikes)
        self.max_age_ms = None if max_age_ms is None else max(0, max_age_ms)
        self.max_age_grace_ms = None if max_age_grace_ms is None else max(0, max_age_grace_ms)
        # grpc-core's grpc.http2.ping_timeout_ms (no Triton flag)
        self.ping_timeout_ms = max(1, ping_timeout_ms)


def keepalive_settings(opts: Any) -> KeepaliveSettings:
    """``KeepaliveSettings`` from ``ServerOptions``' ``grpc_*`` fields."""
    return KeepaliveSettings(
        time_ms=opts.grpc_keepalive_time_ms,
        timeout_ms=opts.grpc_keepalive_timeout_ms,
        permit_without_calls=opts.grpc_keepalive_permit_without_calls,
        max_pings_without_data=opts.grpc_http2_max_pings_without_data,
        min_recv_ping_interval_ms=opts.grpc_http2_min_recv_ping_interval_without_data_ms,
        max_ping_strikes=opts.grpc_http2_max_ping_strikes,
        max_age_ms=opts.grpc_max_connection_age_ms,
        max_age_grace_ms=opts.grpc_max_connection_age_grace_ms,
    )


def ping_frame(opaque: bytes, ack: bool = False) -> bytes:
    """An HTTP/2 PING frame carrying the 8 bytes ``opaque``."""
    return _PING_FRAME.pack(0, 8, PING, 1 if ack else 0, 0, opaque)


class KeepaliveHost(Protocol):
    """What the policy asks of its connection."""

    def keepalive_ping(self, opaque: bytes) -> None:
        """Send a PING with ``opaque`` now."""

    def keepalive_streams(self) -> int:
        """How many streams are open."""

    def keepalive_goaway(self, debug: bytes) -> None:
        """GOAWAY (NO_ERROR, the last stream processed): open calls go on, new ones are
        refused, the connection closes when the last call ends."""

    def keepalive_close(self, code: int, debug: bytes, message: str) -> None:
        """End the connection now: the open calls end UNAVAILABLE with ``message``, then
        GOAWAY with ``code`` and ``debug``, then close."""


class Keepalive:
    """One connection's keepalive, ping abuse and age policy (see the module docstring).

    Events: ``received()`` for every read, ``ping_received()`` for a client PING (True: the
    client is over its strikes and the host must close with ``too_many_pings``),
    ``ping_acked(opaque)`` for a PING ACK, ``sent_headers_or_data()`` when the server sent
    HEADERS or DATA, ``stop()`` when the connection is gone. Runs on the connection's loop."""

    __slots__ = (
        "settings",
        "host",
        "loop",
        "last_read",
        "_keepalive_s",
        "_timeout_s",
        "_ping_timer",
        "_watchdog",
        "_ack_timer",
        "_pinging",
        "_ping_opaque",
        "_ping_waiting",
        "_pings_left",
        "_sent_pings",
        "_strikes",
        "_last_ping_recv",
        "_fresh",
        "_age_timer",
        "_grace_timer",
        "aged",
    )

    def __init__(
        self,
        settings: KeepaliveSettings,
        host: KeepaliveHost,
        loop: asyncio.AbstractEventLoop,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.host = host
        self.loop = loop
        now = loop.time()
        self.last_read = now
        self._keepalive_s = settings.time_ms / 1000.0
        self._timeout_s = settings.timeout_ms / 1000.0
        self._pinging = False
        self._ping_opaque = b""
        self._ping_waiting = False
        self._pings_left = settings.max_pings_without_data
        self._sent_pings = 0
        self._strikes = 0
        self._last_ping_recv = float("-inf")
        self._fresh = True  # no PING sent or received since the last reset
        self._watchdog: asyncio.TimerHandle | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        self._ping_timer: asyncio.TimerHandle | None = loop.call_at(
            now + self._keepalive_s, self._keepalive_due
        )
        self._age_timer: asyncio.TimerHandle | None = None
        self.aged = False
        if settings.max_age_ms is not None:
            spread = 1.0 - AGE_JITTER + 2.0 * AGE_JITTER * jitter()
            self._age_timer = loop.call_at(
                now + settings.max_age_ms / 1000.0 * spread, self._age_reached
            )

    # ------------------------------------------------------------------ events

    def received(self) -> None:
        """Bytes arrived: the keepalive timer counts from now, a PING's watchdog stops."""
        self.last_read = self.loop.time()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def ping_received(self) -> bool:
        """A client PING (not an ACK); True when it is one strike too many."""
        s = self.settings
        now = self.loop.time()
        idle = not s.permit_without_calls and self.host.keepalive_streams() == 0
        interval = _IDLE_PING_INTERVAL_S if idle else s.min_recv_ping_interval_ms / 1000.0
        allowed = self._last_ping_recv + interval
        self._last_ping_recv = now
        self._fresh = False
        if allowed <= now:
            return False
        self._strikes += 1
        return s.max_ping_strikes != 0 and self._strikes > s.max_ping_strikes

    def ping_acked(self, opaque: bytes) -> None:
        """A PING ACK: when it answers the keepalive PING, wait a keepalive time again."""
        if not self._pinging or opaque != self._ping_opaque:
            return
        self._pinging = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._arm(self.loop.time() + self._keepalive_s)

    def sent_headers_or_data(self) -> None:
        """The server sent HEADERS or DATA: strikes are forgiven, PINGs may go out again."""
        if self._fresh:
            return
        self._fresh = True
        self._strikes = 0
        self._last_ping_recv = float("-inf")
        self._pings_left = self.settings.max_pings_without_data
        if self._ping_waiting:
            self._ping_waiting = False
            self._send_ping()

    def stop(self) -> None:
        for timer in (
            self._ping_timer,
            self._watchdog,
            self._ack_timer,
            self._age_timer,
            self._grace_timer,
        ):
            if timer is not None:
                timer.cancel()
        self._ping_timer = self._watchdog = self._ack_timer = None
        self._age_timer = self._grace_timer = None

    @property
    def strikes(self) -> int:
        return self._strikes

    @property
    def pings_sent(self) -> int:
        return self._sent_pings

    # ------------------------------------------------------------------ timers

    def _arm(self, when: float) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        self._ping_timer = self.loop.call_at(when, self._keepalive_due)

    def _keepalive_due(self) -> None:
        self._ping_timer = None
        due = self.last_read + self._keepalive_s
        if due > self.loop.time():
            self._arm(due)  # bytes arrived since the timer was set
            return
        if self.settings.permit_without_calls or self.host.keepalive_streams():
            self._pinging = True
            self._send_ping()
        else:
            self._arm(self.loop.time() + self._keepalive_s)

    def _send_ping(self) -> None:
        self._fresh = False
        if self.settings.max_pings_without_data:
            if self._pings_left == 0:
                self._ping_waiting = True  # goes out with the next headers or data
                return
            self._pings_left -= 1
        self._sent_pings += 1
        self._ping_opaque = b"tlka" + self._sent_pings.to_bytes(4, "big")
        self.host.keepalive_ping(self._ping_opaque)
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = self.loop.call_later(self._timeout_s, self._watchdog_fired)
        if self._ack_timer is None:
            timeout = self.settings.ping_timeout_ms / 1000.0
            self._ack_timer = self.loop.call_later(timeout, self._ack_overdue)

    def _watchdog_fired(self) -> None:
        self._watchdog = None
        if not self._pinging:
            return
        self.stop()
        # grpc-core closes with UNAVAILABLE, which it sends as REFUSED_STREAM
        self.host.keepalive_close(0x7, b"keepalive watchdog timeout", "keepalive watchdog timeout")

    def _ack_overdue(self) -> None:
        self._ack_timer = None
        if not self._pinging:
            return
        self.stop()
        self.host.keepalive_close(0xB, b"ping_timeout", "ping timeout")

    def _age_reached(self) -> None:
        self._age_timer = None
        self.aged = True
        self.host.keepalive_goaway(b"max_age")
        grace = self.settings.max_age_grace_ms
        if grace is not None:
            self._grace_timer = self.loop.call_later(grace / 1000.0, self._grace_over)

    def _grace_over(self) -> None:
        self._grace_timer = None
        self.stop()
        self.host.keepalive_close(0x0, b"max_age", "max connection age grace period expired")

"""One re-armable wake-up per scheduler: the earliest time it must decide again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Wakeup:
    """Calls ``callback`` on the loop at the earliest time asked for with ``arm``.

    Asking for a later time than the one pending keeps the earlier one; -1 cancels.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0

    def arm(self, when_ns: int) -> None:
        """Wake at monotonic ``when_ns`` (or sooner if already armed sooner); -1 cancels."""
        if when_ns < 0:
            self.cancel()
            return
        if self._handle is not None:
            if self._at <= when_ns:
                return
            self._handle.cancel()
        self._at = when_ns
        delay = max(0.0, (when_ns - time.monotonic_ns()) / 1e9)
        self._handle = self._loop.call_later(delay, self._fire)

    @property
    def armed(self) -> bool:
        """Whether a wake-up is pending."""
        return self._handle is not None

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()

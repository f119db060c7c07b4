"""One re-armable wake-up per scheduler: the earliest time it must decide again.

A dynamic batcher's ``max_queue_delay_microseconds`` is often around a millisecond, and
uvloop's timers count whole milliseconds: 0.8 ms fired anywhere from at once to 1.07 ms
later, 1.5 ms at 2.06 ms. On Linux a wait of ``SPIN_NS`` or more is a timerfd the loop watches
like a socket, armed at an absolute CLOCK_MONOTONIC time (``time.monotonic_ns``'s clock): it
fires within microseconds of it, and the loop sleeps until then. Where there is no timerfd
the loop's own timer is used.

A shorter wait is not slept: the wake-up looks at the clock once per loop turn until it is due,
and the loop, polling its sockets between turns without blocking, reads requests as they come
(what uvloop's timers did for a wait under 0.5 ms). Sleeping that long on a busy machine has
the loop wake behind other threads: the MLP with a 0.1 ms delay at 16 clients formed smaller
batches asleep than polling (bench/RESULTS.md, issue 31 round 7).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable

__all__ = ["Wakeup"]

_CLOCK_MONOTONIC = 1
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_TIMER_ABSTIME = 1
SPIN_NS = 500_000  # a shorter wait polls once per loop turn instead of sleeping


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.restype = ctypes.c_int
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.restype = ctypes.c_int
        libc.timerfd_settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_ITimerspec),
            ctypes.c_void_p,
        )
    except (OSError, AttributeError):  # not Linux (no timerfd in the C library)
        return None
    return libc


_LIBC = _libc()


def _checked(result: int) -> int:
    """A C library call's result; OSError from errno where it failed (-1)."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


class _TimerFd:
    """A non-blocking CLOCK_MONOTONIC timerfd, armed at absolute nanoseconds or disarmed."""

    def __init__(self) -> None:
        assert _LIBC is not None
        self.fd = _checked(_LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        self._spec = _ITimerspec()
        self._settime = _LIBC.timerfd_settime
        self._ref = ctypes.byref(self._spec)

    def set(self, when_ns: int) -> None:
        """Fire at monotonic ``when_ns`` (at once if past); 0 disarms (and clears a firing)."""
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(when_ns, 1_000_000_000)
        _checked(self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None))

    def clear(self) -> bool:
        """Consume a firing; False where there was none (disarmed after the loop saw it)."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        os.close(self.fd)


def _timerfd(loop: asyncio.AbstractEventLoop, ready: Callable[[], None]) -> _TimerFd | None:
    if _LIBC is None:
        return None
    try:
        timer = _TimerFd()
    except OSError:  # e.g. out of file descriptors: the loop's timer still works
        return None
    try:
        loop.add_reader(timer.fd, ready)
    except (NotImplementedError, OSError, ValueError):
        # a loop that cannot watch a file descriptor (asyncio's proactor loop raises
        # NotImplementedError): the loop's own timer serves instead, as where there is no
        # timerfd (``Wakeup.arm``)
        timer.close()
        return None
    return timer


class Wakeup:
    """Calls ``callback`` on the loop at the earliest time asked for with ``arm``.

    Asking for a later time than the one pending keeps the earlier one; -1 cancels. ``close``
    gives the timerfd back (the scheduler's ``stop``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.Handle | None = None  # a TimerHandle, or a turn's poll
        self._at = -1  # the pending wake-up's monotonic ns; -1: none
        self._timer: _TimerFd | None = None  # made at the first ``arm`` of a long wait
        self._fd_armed = False  # whether the pending wake-up is the timerfd's
        self._fd_ok = True  # False once closed, or where there is no timerfd

    def arm(self, when_ns: int) -> None:
        """Wake at monotonic ``when_ns`` (or sooner if already armed sooner); -1 cancels."""
        if when_ns < 0:
            self.cancel()
            return
        if self._at >= 0 and self._at <= when_ns:
            return
        self._at = when_ns
        wait = when_ns - time.monotonic_ns()
        if wait < SPIN_NS:  # the next loop turn, and again until it is due
            if self._fd_armed:
                self._fd_armed = False
                if self._timer is not None:
                    self._timer.set(0)
            if self._handle is not None:  # (a poll already, or the loop's timer for later)
                self._handle.cancel()
            self._handle = self._loop.call_soon(self._fire)
            return
        if self._timer is None and self._fd_ok:
            self._timer = _timerfd(self._loop, self._ready)
            self._fd_ok = self._timer is not None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._timer is not None:
            self._timer.set(when_ns)
            self._fd_armed = True
            return
        self._handle = self._loop.call_later(wait / 1e9, self._fire)

    @property
    def armed(self) -> bool:
        """Whether a wake-up is pending."""
        return self._at >= 0

    def cancel(self) -> None:
        if self._at < 0:
            return
        self._at = -1
        if self._fd_armed:
            self._fd_armed = False
            if self._timer is not None:
                self._timer.set(0)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """Cancel and give the timerfd back; a later ``arm`` uses the loop's timer."""
        self.cancel()
        timer, self._timer = self._timer, None
        self._fd_ok = False
        if timer is not None:
            if not self._loop.is_closed():
                self._loop.remove_reader(timer.fd)
            timer.close()

    def _ready(self) -> None:
        timer = self._timer
        if timer is None or not timer.clear() or not self._fd_armed:
            return  # cancelled or re-armed after the loop saw the firing
        self._fd_armed = False
        self._at = -1
        self._callback()

    def _fire(self) -> None:
        self._handle = None
        if self._at > time.monotonic_ns():  # a turn before a short wait is over: poll again
            self._handle = self._loop.call_soon(self._fire)
            return
        self._at = -1
        self._callback()

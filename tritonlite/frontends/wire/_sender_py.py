"""A thread that writes a loaded loop's small responses (``Sender``), HTTP/1.1 and gRPC, so
that the kernel's part of each write leaves the event loop's thread.

Written in Cython's pure-Python mode: this file is the loop's side and the pure twin; setup.py
compiles it with ``_sender_c.pxd`` into ``_sender_c``, whose thread (the pxd's C functions)
runs without the GIL. ``sender.py`` is the one module that knows which of the two is in use.

Why: one thread serves every connection, and at high concurrency it is the serial part. A
response's ``write`` on a loopback or LAN socket is not only a copy: the kernel runs the
receiver's side of TCP in the sender's context and wakes the client's thread. Under
perf_analyzer at concurrency 16 (ONNX add_sub without batching, HTTP) ``write`` was 17% of the
loop thread's CPU, the client's wake-up alone 8%, while the machine's other CPU stood a fifth
idle (bench/RESULTS.md, Issue 31, round 12). A loaded loop already holds the small responses of
a serving pass and writes them at its end (``HttpService._serve_ready``), and flushes its gRPC
connections at the end of the turn (``NativeGrpcServer.flush_at_turn_end``); with a sender
those writes are handed to this thread instead, one copy each, and the loop goes on parsing.

Order on a connection: a connection's bytes are at one place at a time. The protocol hands a
response to the thread (``Sender.submit``) only while its transport has nothing buffered, and
before anything else is written or the connection closes it waits for the thread to be done
with that connection's queue (``Channel.settle``, the GIL released; the thread only ever sends
without waiting). The thread sends what the socket takes; what it does not take (a client that
stops reading) is kept back in order, with anything queued after it, and the loop is asked to
take it back (``reclaim``, through ``call_soon_threadsafe``), which writes it through the
transport, whose buffering and flow control go on from there.

Descriptor lifetime: the thread sends on the channel's own duplicate of the socket's descriptor
(``os.dup``, once per connection, on its first handed response), never on the transport's. The
event loop closes its descriptor when the connection ends, even before the protocol hears of
it, and the number may at once belong to a new connection or a file; the duplicate keeps the
same socket until ``Channel.release`` closes it, after the thread is done with it.

The pure twin runs the thread's steps inline, at ``submit``, on the caller's thread: the same
sends, the same keeping back and reclaiming, without the second CPU.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import cython

__all__ = ["Channel", "Sender"]


class Channel:
    """One connection's way to the sending thread.

    Made by ``Sender.channel``; used on the event loop's thread. ``reclaim`` is called on
    ``loop`` when the thread kept bytes back; it must ``settle_into`` the transport.
    """

    def __init__(
        self, sender: Sender, fd: int, loop: Any, reclaim: Callable[[], Any] | None
    ) -> None:
        self.sender = sender
        self.fd = fd
        self.loop = loop
        self.reclaim = reclaim
        self.released = False
        self._kept_py: list[bytes] = []  # the pure twin's kept-back bytes
        self._dead_py = False
        self._reclaiming_py = False
        if cython.compiled:
            self.link.fd = fd
            self.link.pending = 0
            self.link.dead = False
            self.link.reclaiming = False
            self.link.kept = cython.NULL
            self.link.kept_tail = cython.NULL
            self.link.owner = cython.cast(cython.pointer(PyObject), self)

    def busy(self) -> bool:
        """Whether the thread has this connection's bytes (queued, or kept back)."""
        if cython.compiled:
            core = cython.address(self.sender.core)
            pthread_mutex_lock(cython.address(core.mu))
            out: cython.bint = self.link.pending > 0 or self.link.kept != cython.NULL
            pthread_mutex_unlock(cython.address(core.mu))
            return bool(out)
        return bool(self._kept_py)

    def settle(self) -> bytes:
        """Wait until the thread is done with this connection's queue; the bytes it kept back
        (b"" when it sent everything), which the caller writes before anything else."""
        if cython.compiled:
            core = cython.address(self.sender.core)
            with cython.nogil:
                pthread_mutex_lock(cython.address(core.mu))
                while self.link.pending > 0:
                    pthread_cond_wait(cython.address(core.done), cython.address(core.mu))
                job = self.link.kept
                self.link.kept = cython.NULL
                self.link.kept_tail = cython.NULL
                self.link.reclaiming = False
                pthread_mutex_unlock(cython.address(core.mu))
            out = []
            while job != cython.NULL:
                if not self.link.dead:
                    out.append(job.data[job.off : job.n])
                nxt = job.next
                free(job)
                job = nxt
            return b"".join(out)
        kept = self._kept_py
        self._reclaiming_py = False
        if not kept:
            return b""
        self._kept_py = []
        return b"" if self._dead_py else b"".join(kept)

    def settle_into(self, transport: Any) -> None:
        """Before the loop writes to or closes the connection itself: if the thread has its
        bytes, ``settle``, and write what it kept back through ``transport`` (unless that is
        gone or closing), so they go first."""
        if self.busy():
            kept = self.settle()
            if kept and transport is not None and not transport.is_closing():
                transport.write(kept)

    def release(self) -> None:
        """The connection is gone: wait for the thread, drop what it kept back, close the
        duplicate descriptor. The channel is not used again."""
        if self.released:
            return
        self.settle()
        self.released = True
        self.reclaim = None  # (a bound method of the protocol that holds this channel)
        try:
            os.close(self.fd)
        except OSError:
            pass

    def _kept_back(self) -> None:
        """The thread kept bytes back: have the loop take them (called with the GIL)."""
        try:
            self.loop.call_soon_threadsafe(self.reclaim)
        except Exception:  # noqa: BLE001,S110 -- a closed loop: its connections are gone
            pass

    def _send_inline(self, data: bytes) -> None:
        """The pure twin's thread step: send what the socket takes now, keep back the rest."""
        if self._dead_py:
            return
        if self._kept_py:
            self._kept_py.append(data)
            return
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except InterruptedError:
                continue
            except BlockingIOError:
                break
            except OSError:  # the peer is gone: the loop hears of it on its read
                self._dead_py = True
                return
            view = view[n:]
        if view:
            self._kept_py.append(bytes(view))
            if not self._reclaiming_py:
                self._reclaiming_py = True
                self.loop.call_soon(self.reclaim)

    def __dealloc__(self) -> None:
        # compiled only: the thread may still hold jobs that point into this object
        if cython.compiled:
            if self.link.owner == cython.NULL:
                return
            core = cython.address(self.sender.core)
            with cython.nogil:
                pthread_mutex_lock(cython.address(core.mu))
                while self.link.pending > 0:
                    pthread_cond_wait(cython.address(core.done), cython.address(core.mu))
                pthread_mutex_unlock(cython.address(core.mu))
            job = self.link.kept
            while job != cython.NULL:
                nxt = job.next
                free(job)
                job = nxt
            if not self.released:
                c_close(self.link.fd)


class Sender:
    """The sending thread (compiled) and its queue; one serves any number of loops.

    ``channel(transport, reclaim)`` makes a connection's channel; ``submit(channel, data)``
    queues a response. The thread starts with the first ``submit`` and runs until ``stop``.
    """

    def __init__(self) -> None:
        self._thread: Any = None
        if cython.compiled:
            core = cython.address(self.core)
            pthread_mutex_init(cython.address(core.mu), cython.NULL)
            pthread_cond_init(cython.address(core.work), cython.NULL)
            pthread_cond_init(cython.address(core.done), cython.NULL)
            core.head = cython.NULL
            core.tail = cython.NULL
            core.sleeping = False
            core.stop = False
            core.running = False
            core.queued = 0
            core.sent = 0
            core.wakes = 0

    def channel(self, transport: Any, reclaim: Callable[[], Any]) -> Channel | None:
        """A channel for ``transport``'s connection (its ``reclaim`` runs on the running
        loop), or None where responses cannot be sent beside it: TLS (the transport
        encrypts), or no socket under it."""
        if transport.get_extra_info("sslcontext") is not None:
            return None
        sock = transport.get_extra_info("socket")
        if sock is None:
            return None
        try:
            fd = os.dup(sock.fileno())
        except (OSError, ValueError):
            return None
        return Channel(self, fd, asyncio.get_running_loop(), reclaim)

    def submit(self, chan: Channel, data: bytes) -> None:
        """Queue ``data`` for ``chan``'s connection, after what is queued for it already."""
        if cython.compiled:
            n = len(data)
            job = cython.cast(cython.pointer(Job), malloc(cython.sizeof(Job) + n))
            if job == cython.NULL:
                raise MemoryError
            job.next = cython.NULL
            job.link = cython.address(chan.link)
            job.n = n
            job.off = 0
            job.data = cython.cast(cython.p_char, job) + cython.sizeof(Job)
            memcpy(job.data, cython.cast(cython.p_char, data), n)
            core = cython.address(self.core)
            if not core.running:
                if core.stop:
                    free(job)
                    raise RuntimeError("the sender is stopped")
                self._start()
            with cython.nogil:
                pthread_mutex_lock(cython.address(core.mu))
                if core.tail == cython.NULL:
                    core.head = job
                else:
                    core.tail.next = job
                core.tail = job
                chan.link.pending += 1
                core.queued += 1
                wake = core.sleeping
                if wake:
                    core.sleeping = False
                    core.wakes += 1
                    pthread_cond_signal(cython.address(core.work))
                pthread_mutex_unlock(cython.address(core.mu))
            return
        chan._send_inline(data)

    def _start(self) -> None:
        if cython.compiled:
            self.core.running = True
        thread = threading.Thread(target=self._serve, name="tritonlite-send", daemon=True)
        self._thread = thread
        thread.start()

    def _serve(self) -> None:
        if cython.compiled:
            core = cython.address(self.core)
            with cython.nogil:
                _run(core)

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued, then end the thread (tests; the process-wide sender runs
        for the process's life)."""
        if cython.compiled:
            core = cython.address(self.core)
            with cython.nogil:
                pthread_mutex_lock(cython.address(core.mu))
                core.stop = True
                pthread_cond_signal(cython.address(core.work))
                pthread_mutex_unlock(cython.address(core.mu))
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def cpu_ns(self) -> int:
        """The CPU time the thread has used (0 before it starts, and for the pure twin): work
        it took off the loop, which the loop's look back counts as its own (``busypoll.py``)."""
        thread = self._thread
        ident = thread.ident if thread is not None else None
        if ident is None:
            return 0
        try:
            return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
        except (OSError, AttributeError):  # the thread has ended, or no per-thread clock here
            return 0

    def counts(self) -> tuple[int, int, int]:
        """(responses queued, responses taken by the thread, times it was woken); zeros for
        the pure twin."""
        if cython.compiled:
            return (self.core.queued, self.core.sent, self.core.wakes)
        return (0, 0, 0)

"""Bounded decompression on the event loop: request bodies and gRPC messages, in slices.

A compressed message is undone by an ``Inflation`` in steps of at most ``OUT_SLICE`` output bytes
from at most ``IN_SLICE`` input bytes at a time. Its first ``step`` runs at once, on the caller's
turn of the loop, for up to ``BURST_NS``: most messages end there, with no task and no wait. One
that does not (a large message, or a decompression bomb) goes on under the ``Inflater`` its
connection shares with every other, in turns of ``BURST_NS``, yielding to the loop between them,
so the loop is never held much longer than a millisecond by one message, whatever its ratio.

What bounds the cost:

* the output: ``limit`` bytes (past it the step raises ``TooLarge``; the bytes beyond it are
  never produced, so a bomb costs at most ``limit`` bytes and the time to inflate them);
* the work in flight: at most ``concurrent`` inflations run past their first step at once
  across the connections that share an ``Inflater``; the others wait their turn (a waiter holds
  only its compressed input), so inflations in progress hold at most ``concurrent * limit``
  output bytes together.

Slicing the input bounds the copy zlib makes of the input it has not consumed yet when an
output slice is full (``unconsumed_tail``): at most ``IN_SLICE`` bytes a step, not the rest of
the message.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import cast

IN_SLICE = 16 * 1024
OUT_SLICE = 128 * 1024
BURST_NS = 500_000  # the loop time one message may use before the next turn of the loop
GZIP = 16 + zlib.MAX_WBITS
ZLIB = zlib.MAX_WBITS
RAW_DEFLATE = -zlib.MAX_WBITS


class InflateError(Exception):
    """The message does not decompress (corrupt or truncated)."""


class TooLarge(InflateError):
    """The message decompresses to more than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"decompressed size exceeds {limit} bytes")
        self.limit = limit


def content_wbits(encoding: str, first: int) -> int | None:
    """zlib's ``wbits`` for an HTTP ``Content-Encoding`` (``first``: the body's first byte, -1
    for an empty body); None for an encoding that is not decompressed here."""
    enc = encoding.strip().lower()
    if enc == "gzip":
        return GZIP
    if enc == "deflate":
        # zlib-wrapped (what clients send), or raw deflate when the first byte says so
        return ZLIB if first >= 0 and (first & 0x0F) == 8 else RAW_DEFLATE
    return None


def grpc_wbits(algorithm: str) -> int:
    """zlib's ``wbits`` for a ``grpc-encoding`` (gzip, or deflate: zlib-wrapped)."""
    return GZIP if algorithm == "gzip" else ZLIB


class Inflation:
    """One message being decompressed: ``step`` until it returns True, then ``result``."""

    __slots__ = ("_d", "_data", "_pos", "_tail", "_out", "_limit")

    def __init__(self, wbits: int, data: bytes | bytearray | memoryview, limit: int) -> None:
        self._d = zlib.decompressobj(wbits)
        self._data = memoryview(data).cast("B")
        self._pos = 0
        self._tail = b""
        self._out = bytearray()
        self._limit = limit

    def step(self, budget_ns: int = BURST_NS) -> bool:
        """Inflate for about ``budget_ns`` (at least one slice); True once the message is whole.

        Raises ``TooLarge`` past the limit and ``InflateError`` for a corrupt or truncated one.
        """
        d = self._d
        data = self._data
        out = self._out
        end = time.perf_counter_ns() + budget_ns
        try:
            while True:
                piece: bytes | memoryview = self._tail
                if not piece:
                    start = self._pos
                    if start < len(data):
                        self._pos = start + IN_SLICE
                        piece = data[start : start + IN_SLICE]
                chunk = d.decompress(piece, OUT_SLICE)
                self._tail = d.unconsumed_tail
                if chunk:
                    out += chunk
                    if len(out) > self._limit:
                        raise TooLarge(self._limit)
                if d.eof:
                    return True
                if not chunk and not self._tail and self._pos >= len(data):
                    raise InflateError("incomplete or truncated stream")
                if time.perf_counter_ns() >= end:
                    return False
        except zlib.error as exc:
            raise InflateError(str(exc)) from None

    def result(self) -> bytes:
        """The decompressed message (once ``step`` has returned True): a ``bytearray``, typed
        ``bytes`` as the transports hand request bodies (their readers only read it)."""
        self._data = memoryview(b"")
        return cast(bytes, self._out)


class Inflater:
    """The decompression that the connections of one server share (see the module docstring).

    Ownership: a caller owns its ``Inflation``; ``finish`` borrows it until the message is whole
    and holds one of ``concurrent`` turns meanwhile. Cancelling ``finish`` gives the turn back.
    """

    def __init__(self, concurrent: int = 2, burst_ns: int = BURST_NS) -> None:
        if concurrent < 1:
            raise ValueError("Inflater.concurrent must be at least 1")
        self.concurrent = concurrent
        self.burst_ns = burst_ns
        self._turns = asyncio.Semaphore(concurrent)

    async def finish(self, job: Inflation) -> bytes:
        """Inflate the rest of ``job`` in bounded bursts, yielding to the loop between them."""
        async with self._turns:
            while not job.step(self.burst_ns):
                await asyncio.sleep(0)
        return job.result()

    async def inflate(self, wbits: int, data: bytes | bytearray | memoryview, limit: int) -> bytes:
        """``data`` decompressed: one burst at once, the rest (if any) through ``finish``."""
        job = Inflation(wbits, data, limit)
        if job.step(self.burst_ns):
            return job.result()
        return await self.finish(job)

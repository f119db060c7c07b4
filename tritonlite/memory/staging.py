"""Per-instance staging buffers, reused across batches and never reused while still viewed.

Ownership: ``StagingPool.acquire`` hands out a ``Lease`` on one whole buffer. The lease starts
with one hold; whoever passes views of the buffer on (e.g. scattered outputs into responses)
adds a hold per consumer with ``retain`` and each consumer calls ``release`` once it no longer
needs the memory (after the response is encoded). A buffer returns to the pool when its holds
reach zero **and** no numpy view of it is alive any more: on CPython the pool also checks the
reference count of the buffer's base array, so a view kept past its release (a response cache
holding an output, say) still protects the memory; the pool then allocates another buffer.

In steady state (same or smaller batches) ``acquire`` allocates nothing; a bigger batch grows
the buffer it would have reused. Thread-safe: instances acquire on their execution thread,
responses release on the event loop.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

import numpy as np

from tritonlite.memory.host import DEFAULT_ALIGNMENT, aligned_empty, pinned_available, pinned_empty

U8 = np.ndarray[Any, np.dtype[np.uint8]]
_MIN_CAPACITY = 4096
_HAS_REFCOUNT = hasattr(sys, "getrefcount")


def _anchor(arr: U8) -> Any:
    """The object every view of ``arr`` references (numpy collapses view chains onto it)."""
    obj: Any = arr
    while not obj.flags.owndata and type(obj.base) is np.ndarray:
        obj = obj.base
    return obj


def _capacity_for(nbytes: int) -> int:
    capacity = _MIN_CAPACITY
    while capacity < nbytes:
        capacity *= 2
    return capacity


class StagingBuffer:
    """One aligned (optionally pinned) host allocation owned by a ``StagingPool``."""

    __slots__ = ("data", "pinned", "_anchor", "_baseline", "holds")

    def __init__(self, capacity: int, alignment: int, pinned: bool) -> None:
        self.data: U8 = (
            pinned_empty(capacity, alignment) if pinned else aligned_empty(capacity, alignment)
        )
        self.pinned = pinned
        self.holds = 0
        self._anchor = _anchor(self.data)
        self._baseline = self._refs()

    @property
    def capacity(self) -> int:
        return int(self.data.shape[0])

    @property
    def address(self) -> int:
        return int(self.data.__array_interface__["data"][0])

    def _refs(self) -> int:
        return sys.getrefcount(self._anchor) if _HAS_REFCOUNT else 0

    def viewed(self) -> bool:
        """Whether a numpy view of this buffer is alive outside the pool (CPython only)."""
        return self._refs() > self._baseline

    def in_use(self) -> bool:
        return self.holds > 0 or self.viewed()


class Lease:
    """The right to use one staging buffer until every hold is released.

    ``nbytes`` is what was asked for; the buffer may be larger. Usable as a context manager
    that releases one hold on exit.
    """

    __slots__ = ("_pool", "_buffer", "nbytes", "_holds")

    def __init__(self, pool: StagingPool, buffer: StagingBuffer, nbytes: int) -> None:
        self._pool = pool
        self._buffer: StagingBuffer | None = buffer
        self.nbytes = nbytes
        self._holds = 1

    @property
    def buffer(self) -> StagingBuffer:
        if self._buffer is None:
            raise RuntimeError("lease already released")
        return self._buffer

    @property
    def holds(self) -> int:
        return self._holds

    def array(self) -> U8:
        """The leased ``nbytes`` as a 1-D uint8 view."""
        return self.buffer.data[: self.nbytes]

    def view(self, dtype: Any, shape: tuple[int, ...], offset: int = 0) -> np.ndarray[Any, Any]:
        """A C-contiguous ``dtype`` array of ``shape`` over the leased bytes from ``offset``.

        Raises
        ------
        ValueError
            If it does not fit in the lease or ``offset`` is not a multiple of the item size.
        """
        dt = np.dtype(dtype)
        count = 1
        for dim in shape:
            count *= int(dim)
        nbytes = count * dt.itemsize
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{nbytes} bytes at offset {offset} exceed the {self.nbytes}-byte lease"
            )
        if dt.itemsize and offset % dt.itemsize:
            raise ValueError(f"offset {offset} is not aligned to {dt} items")
        arr: np.ndarray[Any, Any] = self.buffer.data[offset : offset + nbytes].view(dt)
        return arr.reshape(shape)

    def retain(self, count: int = 1) -> Lease:
        """Add ``count`` holds (one per extra consumer of views); returns self."""
        if count < 0:
            raise ValueError("retain count must be >= 0")
        with self._pool._lock:
            if self._buffer is None:
                raise RuntimeError("lease already released")
            self._holds += count
            self._buffer.holds += count
        return self

    def release(self) -> None:
        """Drop one hold; at zero the buffer may be reused once no view of it is alive."""
        with self._pool._lock:
            if self._buffer is None:
                raise RuntimeError("lease already released")
            self._holds -= 1
            self._buffer.holds -= 1
            if self._holds == 0:
                self._buffer = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class StagingPool:
    """Reusable staging buffers for one model instance.

    Parameters
    ----------
    pinned
        Use pinned host memory; None picks it when CUDA is usable (``pinned_available()``).
    alignment
        Byte alignment of every buffer (a power of two; 64 = a cache line / AVX-512 vector).
    keep_free
        Free buffers kept for reuse beyond that are dropped (bursts of concurrent leases).
    """

    def __init__(
        self, *, pinned: bool | None = None, alignment: int = DEFAULT_ALIGNMENT, keep_free: int = 4
    ) -> None:
        self.pinned = pinned_available() if pinned is None else pinned
        self.alignment = alignment
        self.keep_free = keep_free
        self.allocations = 0
        self._buffers: list[StagingBuffer] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buffers)

    @property
    def capacity_bytes(self) -> int:
        return sum(buffer.capacity for buffer in self._buffers)

    def acquire(self, nbytes: int) -> Lease:
        """Lease a buffer of at least ``nbytes``: a free one that fits, else grow or add one.

        The smallest free buffer that fits is reused; with none, the largest free buffer is
        replaced by a bigger one (capacity: next power of two, at least 4 KiB), and with no
        free buffer at all a new one is added.
        """
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        with self._lock:
            free = [buffer for buffer in self._buffers if not buffer.in_use()]
            fitting = [buffer for buffer in free if buffer.capacity >= nbytes]
            if fitting:
                buffer = min(fitting, key=lambda b: b.capacity)
            else:
                if free:
                    outgrown = max(free, key=lambda b: b.capacity)
                    self._buffers.remove(outgrown)
                    free.remove(outgrown)
                buffer = StagingBuffer(_capacity_for(nbytes), self.alignment, self.pinned)
                self.allocations += 1
                self._buffers.append(buffer)
            spare = sorted((b for b in free if b is not buffer), key=lambda b: b.capacity)
            for dropped in spare[: max(0, len(spare) - self.keep_free)]:
                self._buffers.remove(dropped)
            buffer.holds += 1
            return Lease(self, buffer, nbytes)

    def close(self) -> None:
        """Drop the buffers not in use (leased ones stay valid until their last release)."""
        with self._lock:
            self._buffers = [buffer for buffer in self._buffers if buffer.in_use()]

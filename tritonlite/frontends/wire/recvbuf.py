"""Reused memory for large request messages (``RecvBlocks``): a gRPC message too large for one
read is assembled in a block sized from its length prefix, the socket's bytes read straight
into it where the transport allows (``GrpcProtocol.get_buffer``), and the block comes back
for the next message once nothing refers to it any more. An HTTP/1.1 infer body too large for
one read goes into one the same way, sized from its Content-Length, the rest of it read
straight into the block (``Http1Protocol._read_into_block``); the composition root gives both
front ends one pool.

Why a pool and not ``bytearray(n)``: a fresh 4 MiB buffer costs the kernel a page fault per
4 KiB page the first time it is written (about 1,000 a message), which is as dear as the copy
it replaces. A block is anonymous memory (``mmap``) exposed as a uint8 numpy array; the
message is a ``memoryview`` of it, and the codec's input arrays are views of that, so the
block is lent until the last of them is gone (a weak reference to the array tells). Up to
``keep`` bytes of free blocks are kept; past that a returned block is unmapped.

The last reference to a message may be dropped on an instance thread (ONNX Runtime's run
holds its inputs), so lending and returning take a lock.
"""

from __future__ import annotations

import mmap
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["GRAIN", "KEEP", "RecvBlocks"]

GRAIN = 1 << 16  # block sizes are multiples of this
KEEP = 32 << 20  # bytes of free blocks kept for reuse


class RecvBlocks:
    """Blocks that hold large incoming messages; ``take(n)`` lends a writable n-byte view."""

    __slots__ = ("_keep", "_free", "_free_bytes", "_lent", "_lock", "__weakref__")

    def __init__(self, keep: int = KEEP) -> None:
        if keep < 0:
            raise ValueError("RecvBlocks: keep must be at least 0")
        self._keep = keep
        self._free: dict[int, list[mmap.mmap]] = {}
        self._free_bytes = 0
        # id of the weak reference -> (it, the block, its size)
        self._lent: dict[int, tuple[weakref.ref[Any], mmap.mmap, int]] = {}
        self._lock = threading.Lock()

    def take(self, n: int) -> memoryview:
        """A writable view of ``n`` bytes (n >= 1) in a block lent until nothing refers to
        the view or to anything made from it."""
        size = -(-n // GRAIN) * GRAIN
        with self._lock:
            free = self._free.get(size)
            if free:
                mm = free.pop()
                self._free_bytes -= size
            else:
                mm = None
        if mm is None:
            mm = mmap.mmap(-1, size)
        arr = np.frombuffer(mm, np.uint8, n)
        ref = weakref.ref(arr, self._returned)
        with self._lock:
            self._lent[id(ref)] = (ref, mm, size)
        return memoryview(arr)  # type: ignore[arg-type]

    def _returned(self, ref: weakref.ref[Any]) -> None:
        with self._lock:
            lent = self._lent.pop(id(ref), None)
            if lent is None:
                return
            size = lent[2]
            if self._free_bytes + size <= self._keep:
                self._free.setdefault(size, []).append(lent[1])
                self._free_bytes += size
        # else: dropped here; the mapping is unmapped with its last reference

    def lent(self) -> int:
        """Blocks still referred to."""
        return len(self._lent)

    def free_bytes(self) -> int:
        """Bytes of blocks kept for reuse."""
        return self._free_bytes

"""Copies of large response bodies in reused memory (``SendBlocks``), so that a client that
stops reading holds the server's own bytes, never the memory a backend produced them in.

A binary-output HTTP response is a list of views of the backend's output arrays; ONNX
Runtime's (1.19 and later) are numpy arrays over tensors of its session arena. Handed to
the transport as they are (uvloop queues the views it could not send yet), a client that
does not read keeps that arena memory in use for as long as its connection stays open: the
arena grows by it, and an arena never gives memory back, so it stays resident after the
connection has closed (ten stalled 8 MiB answers: +59 MiB for good; bench/RESULTS.md,
Issue 32). Copied into fresh memory instead, every large response pays the kernel's page
faults for it (8 MiB: about 3,600 faults, server CPU 5.7 -> 12 ms a request). So the copies
go into 1 MiB blocks of anonymous memory that are reused: a block comes back when the
transport drops its view (a weak reference to the array over it), up to ``keep`` free blocks
are kept for the next responses, and past that a block is unmapped -- what stalled clients
held goes back to the system once they close.
"""

from __future__ import annotations

import mmap
import weakref
from typing import Any

import numpy as np

__all__ = ["BLOCK", "KEEP", "SendBlocks"]

BLOCK = 1 << 20  # bytes a block
KEEP = 16  # free blocks kept for reuse (16 MiB); more are unmapped as they come back


class SendBlocks:
    """Reused blocks that hold copies of response bodies while the transport sends them.

    Used on one event loop's thread (the blocks come back from the transport's callbacks on
    that thread).
    """

    __slots__ = ("_block", "_keep", "_free", "_lent")

    def __init__(self, block: int = BLOCK, keep: int = KEEP) -> None:
        if block < 1 or keep < 0:
            raise ValueError("SendBlocks: block must be at least 1 and keep at least 0")
        self._block = block
        self._keep = keep
        self._free: list[mmap.mmap] = []
        # id of the weak reference -> (it, the block): an array has no hash to key by
        self._lent: dict[int, tuple[weakref.ref[Any], mmap.mmap]] = {}

    def copy(self, part: Any, out: list[Any]) -> None:
        """Append to ``out`` writable byte views of a copy of ``part``'s bytes (a buffer),
        one view a block; each block is lent until the last reference to its view is
        gone."""
        src = np.frombuffer(part if memoryview(part).c_contiguous else bytes(part), np.uint8)
        n = src.size
        block = self._block
        o = 0
        while o < n:
            k = min(block, n - o)
            free = self._free
            mm = free.pop() if free else mmap.mmap(-1, block)
            arr = np.frombuffer(mm, np.uint8, k)
            arr[:] = src[o : o + k]
            ref = weakref.ref(arr, self._returned)
            self._lent[id(ref)] = (ref, mm)
            out.append(memoryview(arr))  # type: ignore[arg-type]
            o += k

    def gather(self, parts: list[Any]) -> list[Any]:
        """``parts`` with each memoryview among them replaced by views of its copy (``copy``);
        other parts (the message's own bytes) as they are."""
        out: list[Any] = []
        for part in parts:
            if type(part) is memoryview:
                self.copy(part, out)
            else:
                out.append(part)
        return out

    def _returned(self, ref: weakref.ref[Any]) -> None:
        lent = self._lent.pop(id(ref), None)
        if lent is not None and len(self._free) < self._keep:
            self._free.append(lent[1])
        # else: dropped here; the mapping is unmapped with its last reference

    def lent(self) -> int:
        """Blocks whose views are still referenced (queued in a transport)."""
        return len(self._lent)

    def free(self) -> int:
        """Blocks kept for reuse."""
        return len(self._free)

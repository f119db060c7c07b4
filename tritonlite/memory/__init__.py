"""Staging memory for batched execution: aligned or pinned host buffers, reused across batches.

``StagingPool`` (one per model instance) leases ``StagingBuffer``s; see ``staging`` for the
ownership rule. ``host`` allocates: 64-byte-aligned numpy, or pinned memory when CUDA is usable.
"""

from __future__ import annotations

from tritonlite.memory.host import aligned_empty, pinned_available, pinned_empty
from tritonlite.memory.staging import Lease, StagingBuffer, StagingPool

__all__ = [
    "Lease",
    "StagingBuffer",
    "StagingPool",
    "aligned_empty",
    "describe",
    "pinned_available",
    "pinned_empty",
]


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return "staging: pinned host memory" if pinned_available() else "staging: aligned host memory"

"""The dynamic batcher's decision, ``BatchQueue``: the compiled twin when it is built.

This is the one module that knows ``BatchQueue`` has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.
"""

from __future__ import annotations

from typing import NamedTuple

from tritonlite import _twins
from tritonlite.scheduling import _batcher_py
from tritonlite.scheduling._batcher_py import (
    ACCEPTED,
    REJECT_QUEUE_FULL,
    TIMEOUT_DELAY,
    TIMEOUT_REJECT,
)

__all__ = [
    "ACCEPTED",
    "ACCELERATED",
    "REJECT_QUEUE_FULL",
    "TIMEOUT_DELAY",
    "TIMEOUT_REJECT",
    "BatchQueue",
    "QueuePolicy",
    "describe",
]

BatchQueue = _batcher_py.BatchQueue
_compiled = _twins.compiled("tritonlite.scheduling._batcher_c")
if _compiled is not None:
    BatchQueue = _compiled.BatchQueue  # type: ignore[misc]
ACCELERATED = _compiled is not None


class QueuePolicy(NamedTuple):
    """``ModelQueuePolicy`` as ``BatchQueue`` takes it (any 4-tuple in this order works)."""

    timeout_action: int = TIMEOUT_REJECT
    default_timeout_ns: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("batcher", _compiled)

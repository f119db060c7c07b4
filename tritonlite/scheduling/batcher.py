"""The dynamic batcher's decision, ``BatchQueue``: the compiled twin when it is built.

This is the one module that knows ``BatchQueue`` has a Cython twin. It binds the pure class from
``_batcher_py`` and replaces it with ``_batcher_c``'s (the same source compiled by setup.py)
unless ``TRITONLITE_NO_EXTENSIONS=1``. With ``TRITONLITE_REQUIRE_EXTENSIONS=1`` (CI) a missing
compiled twin is an ImportError instead of a silent fallback; an explicit
``TRITONLITE_NO_EXTENSIONS=1`` still wins, so CI can run the pure path on purpose.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import NamedTuple

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
ACCELERATED = False

if os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1":
    with suppress(ImportError):
        import tritonlite.scheduling._batcher_c as _batcher_c

        BatchQueue = _batcher_c.BatchQueue  # type: ignore[misc]
        ACCELERATED = True

if (
    not ACCELERATED
    and os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
    and os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1"
):
    raise ImportError(
        "TRITONLITE_REQUIRE_EXTENSIONS=1 but tritonlite.scheduling._batcher_c is not built; "
        "build it with `pip install -e .` (needs Cython and a C compiler) or "
        "`python setup.py build_ext --inplace`"
    )


class QueuePolicy(NamedTuple):
    """``ModelQueuePolicy`` as ``BatchQueue`` takes it (any 4-tuple in this order works)."""

    timeout_action: int = TIMEOUT_REJECT
    default_timeout_ns: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    if ACCELERATED:
        return "batcher: compiled (Cython tritonlite.scheduling._batcher_c)"
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1":
        return "batcher: pure Python (TRITONLITE_NO_EXTENSIONS=1)"
    return "batcher: pure Python (compiled twin not built)"

"""The sending thread of the native front ends (``_sender_py``): the compiled twin when it is
built.

This is the one module that knows ``Sender`` has a Cython twin; it asks ``tritonlite._twins``
whether to swap in the compiled one. ``shared()`` is the process's sender: one thread for every
HTTP/1.1 and gRPC front end and event loop, started by the first response it is handed.
"""

from __future__ import annotations

import os
from typing import Any

from tritonlite import _twins
from tritonlite.frontends.wire import _sender_py

__all__ = ["ACCELERATED", "Sender", "describe", "shared"]

Sender: Any = _sender_py.Sender
_compiled = _twins.compiled("tritonlite.frontends.wire._sender_c")
if _compiled is not None:
    Sender = _compiled.Sender
ACCELERATED = _compiled is not None
_shared: list[Any] = []  # the process's Sender, made on first use


def shared() -> Any:
    """The process's sender."""
    if not _shared:
        _shared.append(Sender())
    return _shared[0]


if hasattr(os, "register_at_fork"):  # a forked child has no thread: it makes its own
    os.register_at_fork(after_in_child=_shared.clear)


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("sender", _compiled)

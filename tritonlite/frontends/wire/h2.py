"""The HTTP/2 server connection, ``H2Connection``: the compiled twin when it is built.

This is the one module that knows ``H2Connection`` has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.

The constants, ``H2Limits`` and ``encode_headers`` come from the pure twin (the compiled one
keeps its constants as C ints); both twins accept either's limits and header blocks.
"""

from __future__ import annotations

from typing import Any

from tritonlite import _twins
from tritonlite.frontends.wire import _h2_py
from tritonlite.frontends.wire._h2_py import (
    CANCEL,
    COMPRESSION_ERROR,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    INTERNAL_ERROR,
    NO_ERROR,
    PREFACE,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    STREAM_CLOSED,
    H2Limits,
    encode_headers,
)

__all__ = [
    "ACCELERATED",
    "CANCEL",
    "COMPRESSION_ERROR",
    "ENHANCE_YOUR_CALM",
    "FLOW_CONTROL_ERROR",
    "FRAME_SIZE_ERROR",
    "INTERNAL_ERROR",
    "NO_ERROR",
    "PREFACE",
    "PROTOCOL_ERROR",
    "REFUSED_STREAM",
    "STREAM_CLOSED",
    "H2Connection",
    "H2Limits",
    "describe",
    "encode_headers",
]

H2Connection: Any = _h2_py.H2Connection
_compiled = _twins.compiled("tritonlite.frontends.wire._h2_c")
if _compiled is not None:
    H2Connection = _compiled.H2Connection
ACCELERATED = _compiled is not None


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("http2", _compiled)

"""The HTTP/2 server connection, ``H2Connection``: the compiled twin when it is built.

This is the one module that knows ``H2Connection`` has a Cython twin. It binds the pure class
from ``_h2_py`` and replaces it with ``_h2_c``'s (the same source compiled by setup.py) unless
``TRITONLITE_NO_EXTENSIONS=1``. With ``TRITONLITE_REQUIRE_EXTENSIONS=1`` (CI) a missing
compiled twin is an ImportError instead of a silent fallback; an explicit
``TRITONLITE_NO_EXTENSIONS=1`` still wins, so CI can run the pure path on purpose.

The constants, ``H2Limits`` and ``encode_headers`` come from the pure twin (the compiled one
keeps its constants as C ints); both twins accept either's limits and header blocks.
"""

from __future__ import annotations

import importlib
import os
from contextlib import suppress
from typing import Any

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
ACCELERATED = False

if os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1":
    with suppress(ImportError):
        H2Connection = importlib.import_module("tritonlite.frontends.wire._h2_c").H2Connection
        ACCELERATED = True

if (
    not ACCELERATED
    and os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
    and os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1"
):
    raise ImportError(
        "TRITONLITE_REQUIRE_EXTENSIONS=1 but tritonlite.frontends.wire._h2_c is not built; "
        "build it with `pip install -e .` (needs Cython and a C compiler) or "
        "`python setup.py build_ext --inplace`"
    )


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    if ACCELERATED:
        return "http2: compiled (Cython tritonlite.frontends.wire._h2_c)"
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1":
        return "http2: pure Python (TRITONLITE_NO_EXTENSIONS=1)"
    return "http2: pure Python (compiled twin not built)"

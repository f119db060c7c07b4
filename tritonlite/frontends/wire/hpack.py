"""HPACK (RFC 7541) for the HTTP/2 layer: the compiled twin when it is built.

This is the one module that knows HPACK has a Cython twin. It binds the pure classes from
``_hpack_py`` and replaces them with ``_hpack_c``'s (the same source compiled by setup.py)
unless ``TRITONLITE_NO_EXTENSIONS=1``. With ``TRITONLITE_REQUIRE_EXTENSIONS=1`` (CI) a missing
compiled twin is an ImportError instead of a silent fallback; an explicit
``TRITONLITE_NO_EXTENSIONS=1`` still wins, so CI can run the pure path on purpose.

``HpackError`` and ``HeaderListTooLarge`` are the same classes in both twins.
"""

from __future__ import annotations

import os
from contextlib import suppress

from tritonlite.frontends.wire import _hpack_py
from tritonlite.frontends.wire._hpack_py import HeaderListTooLarge, HpackError

__all__ = ["ACCELERATED", "Decoder", "Encoder", "HeaderListTooLarge", "HpackError", "describe"]

Decoder = _hpack_py.Decoder
Encoder = _hpack_py.Encoder
ACCELERATED = False

if os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1":
    with suppress(ImportError):
        import tritonlite.frontends.wire._hpack_c as _hpack_c

        Decoder = _hpack_c.Decoder  # type: ignore[misc]
        Encoder = _hpack_c.Encoder  # type: ignore[misc]
        ACCELERATED = True

if (
    not ACCELERATED
    and os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
    and os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1"
):
    raise ImportError(
        "TRITONLITE_REQUIRE_EXTENSIONS=1 but tritonlite.frontends.wire._hpack_c is not built; "
        "build it with `pip install -e .` (needs Cython and a C compiler) or "
        "`python setup.py build_ext --inplace`"
    )


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    if ACCELERATED:
        return "hpack: compiled (Cython tritonlite.frontends.wire._hpack_c)"
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1":
        return "hpack: pure Python (TRITONLITE_NO_EXTENSIONS=1)"
    return "hpack: pure Python (compiled twin not built)"

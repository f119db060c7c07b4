"""HPACK (RFC 7541) for the HTTP/2 layer: the compiled twin when it is built.

This is the one module that knows HPACK has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.

``HpackError`` and ``HeaderListTooLarge`` are the same classes in both twins.
"""

from __future__ import annotations

from tritonlite import _twins
from tritonlite.frontends.wire import _hpack_py
from tritonlite.frontends.wire._hpack_py import HeaderListTooLarge, HpackError

__all__ = ["ACCELERATED", "Decoder", "Encoder", "HeaderListTooLarge", "HpackError", "describe"]

Decoder = _hpack_py.Decoder
Encoder = _hpack_py.Encoder
_compiled = _twins.compiled("tritonlite.frontends.wire._hpack_c")
if _compiled is not None:
    Decoder = _compiled.Decoder  # type: ignore[misc]
    Encoder = _compiled.Encoder  # type: ignore[misc]
ACCELERATED = _compiled is not None


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("hpack", _compiled)

"""JSON ``data`` lists -> numpy arrays for the HTTP codec: the compiled twin when it is built.

This is the one module that knows ``_jsondata_py`` has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.

Without the compiled twin, ``data_array`` and ``plain_input`` are None: the codec's general
path (numpy's bulk conversion, faster than the pure twin's per-element loop for all but the
smallest tensors) then converts every JSON tensor; the pure twin stays the definition the
compiled one is built from and tested against. ``plain_inputs`` (the JSON lane's
``jsonlane.py`` reads a request's inputs with it) is always there: the compiled twin's, or
the pure one's, so that lane behaves the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tritonlite import _twins
from tritonlite.frontends.http import _jsondata_py

__all__ = ["ACCELERATED", "data_array", "describe", "plain_input", "plain_inputs"]

_compiled = _twins.compiled("tritonlite.frontends.http._jsondata_c")
data_array: Callable[[str, tuple[int, ...], Any], Any] | None = None
plain_input: Callable[[Any], Any] | None = None
plain_inputs: Callable[[Any], Any] = _jsondata_py.plain_inputs
if _compiled is not None:
    data_array = _compiled.data_array
    plain_input = _compiled.plain_input
    plain_inputs = _compiled.plain_inputs
ACCELERATED = _compiled is not None


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("JSON data", _compiled)

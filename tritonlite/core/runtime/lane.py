"""The single-request lane, ``DirectLane``: the compiled twin when it is built.

This is the one module that knows ``_lane_py`` has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.
"""

from __future__ import annotations

from tritonlite import _twins
from tritonlite.core.runtime import _lane_py

__all__ = ["ACCELERATED", "DirectLane", "describe"]

DirectLane = _lane_py.DirectLane
_compiled = _twins.compiled("tritonlite.core.runtime._lane_c")
if _compiled is not None:
    DirectLane = _compiled.DirectLane  # type: ignore[misc]
ACCELERATED = _compiled is not None


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("single-request lane", _compiled)

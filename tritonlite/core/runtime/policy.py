"""The inline policy, ``InlinePolicy``: the compiled twin when it is built.

This is the one module that knows ``_policy_py`` has a Cython twin; it asks
``tritonlite._twins`` (one rule for every twin: ``TRITONLITE_NO_EXTENSIONS``,
``TRITONLITE_REQUIRE_EXTENSIONS``) whether to swap in the compiled one.
"""

from __future__ import annotations

from tritonlite import _twins
from tritonlite.core.runtime import _policy_py

__all__ = [
    "ACCELERATED",
    "INLINE_MAX_NS",
    "PROBE_FIRST",
    "PROBE_MAX",
    "WAITED_INLINE_MAX_NS",
    "InlinePolicy",
    "describe",
]

INLINE_MAX_NS = _policy_py.INLINE_MAX_NS
WAITED_INLINE_MAX_NS = _policy_py.WAITED_INLINE_MAX_NS
PROBE_FIRST = _policy_py.PROBE_FIRST
PROBE_MAX = _policy_py.PROBE_MAX
InlinePolicy = _policy_py.InlinePolicy
_compiled = _twins.compiled("tritonlite.core.runtime._policy_c")
if _compiled is not None:
    InlinePolicy = _compiled.InlinePolicy  # type: ignore[misc]
ACCELERATED = _compiled is not None


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    return _twins.describe("inline policy", _compiled)

"""One rule for every module that has a compiled twin: which of the two the server runs.

A twin pair is ``X_py.py`` (the source of truth, pure Python) and ``X_c`` (the same source
compiled by Cython through ``X_c.pxd``, built by setup.py). Each pair has one selector module
that binds the pure classes and swaps in the compiled ones when ``compiled`` returns the
module: always, unless ``TRITONLITE_NO_EXTENSIONS=1``. With ``TRITONLITE_REQUIRE_EXTENSIONS=1``
(CI) a missing compiled twin is an ImportError instead of a silent fallback; an explicit
``TRITONLITE_NO_EXTENSIONS=1`` still wins, so CI can run the pure path on purpose.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def disabled() -> bool:
    """``TRITONLITE_NO_EXTENSIONS=1``: every selector binds the pure twin."""
    return os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1"


def compiled(name: str) -> ModuleType | None:
    """The compiled twin ``name`` (dotted), or None when it is disabled or not built."""
    if disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1":
            raise ImportError(
                f"TRITONLITE_REQUIRE_EXTENSIONS=1 but {name} is not built; build it with "
                "`pip install -e .` (needs Cython and a C compiler) or "
                "`python setup.py build_ext --inplace`"
            ) from None
        return None


def describe(label: str, module: ModuleType | None) -> str:
    """One line for ``tritonlite --version`` and the startup log, e.g. ``batcher: compiled
    (Cython tritonlite.scheduling._batcher_c)``."""
    if module is not None:
        return f"{label}: compiled (Cython {module.__name__})"
    if disabled():
        return f"{label}: pure Python (TRITONLITE_NO_EXTENSIONS=1)"
    return f"{label}: pure Python (compiled twin not built)"

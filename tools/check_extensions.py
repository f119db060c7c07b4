"""Fail unless every Cython twin was built: one ``X_c`` module for each ``X_c.pxd``.

``make test`` runs this first, so a missing C compiler or a compile error fails CI instead of
silently testing the pure twins twice.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    missing = []
    pxds = sorted((ROOT / "tritonlite").rglob("*_c.pxd"))
    for pxd in pxds:
        if not pxd.with_name(pxd.name[: -len("_c.pxd")] + "_py.py").exists():
            continue
        module = ".".join(pxd.relative_to(ROOT).with_suffix("").parts)
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
            continue
        if not getattr(mod, "__file__", "").endswith((".so", ".pyd")):
            missing.append(f"{module} (not compiled: {mod.__file__})")
    if missing:
        print("Cython extensions not built: " + ", ".join(missing), file=sys.stderr)
        print("install a C compiler, then make clean test", file=sys.stderr)
        return 1
    print(f"{len(pxds)} Cython extension(s) built")
    return 0


if __name__ == "__main__":
    sys.exit(main())

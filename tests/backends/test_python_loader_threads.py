"""A model's scope is closed (after auto-complete, on unload) while other threads import:
closing must not iterate ``sys.modules`` while they change it (a server once failed to start
with "dictionary changed size during iteration" when three Python models loaded at once)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import ModuleType

from tritonlite.backends.python.loader import ModelScope


def test_close_while_another_thread_imports(tmp_path: Path) -> None:
    model = tmp_path / "m" / "1" / "model.py"
    model.parent.mkdir(parents=True)
    model.write_text("X = 1\n")
    scope = ModelScope("m", 1, tmp_path / "m", model)
    stop = threading.Event()

    def churn() -> None:  # what an import on another thread does to sys.modules
        i = 0
        while not stop.is_set():
            name = f"_tritonlite_churn_{i % 64}"
            sys.modules[name] = ModuleType(name)
            sys.modules.pop(f"_tritonlite_churn_{(i + 32) % 64}", None)
            i += 1

    # Many entries under the model's package make the iteration long enough to be interrupted.
    pkg = scope.package
    other = threading.Thread(target=churn)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    other.start()
    try:
        for _ in range(200):
            scope.load()
            for i in range(200):
                sys.modules[f"{pkg}.extra{i}"] = ModuleType(f"{pkg}.extra{i}")
            scope.close()
            assert not [n for n in list(sys.modules) if n.startswith(pkg)]
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
        for n in [n for n in list(sys.modules) if n.startswith("_tritonlite_churn_")]:
            del sys.modules[n]

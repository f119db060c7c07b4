"""Importing a python model's ``model.py`` in this process without letting two models' files meet.

Triton's stub runs each model instance in its own process: it appends ``<version dir>`` and
``<model dir>`` to ``sys.path`` and imports ``"<version>.model"``. Here every loaded model version
gets a ``ModelScope`` instead:

- ``model.py`` is imported as ``<unique package>.model``, the package's ``__path__`` being the
  version directory, so relative imports (``from . import utils``) stay inside the model;
- while the scope is ``running()`` (the import of model.py and ``auto_complete_config``) the
  two directories are appended to ``sys.path`` the way Triton appends them, and the model's own
  top-level modules (``import utils`` of a sibling ``utils.py``) are in ``sys.modules`` under
  their plain names. When it ends they move out of ``sys.modules`` into the scope, so another
  model's ``import utils`` finds its own file. A model's module objects keep the references
  they imported;
- imports made later (in ``initialize``, ``execute``, ``finalize``) reach the model's files
  through ``_SiblingFinder``, a fallback finder that asks which model's code is importing (by
  the file of the calling frames); ``sweep()`` moves such modules back out of ``sys.modules``
  after each call.

Running scopes are serialized by one lock; model calls take none. Precondition of the
isolation: a lazy ``import x`` of a sibling module can see another model's ``x`` only if it
happens while that other model's scope is running, or before the sweep after another model's
own lazy ``import x``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

_PREFIX = "tritonlite_pymodel_"
_lock = threading.RLock()  # serializes running scopes (they change sys.path and sys.modules)
_counter = itertools.count(1)
_scopes: list[ModelScope] = []  # open scopes, newest last
_leaked: set[str] = set()  # plain names _SiblingFinder put in sys.modules
_HERE = os.path.dirname(os.path.abspath(__file__))


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


class ModelScope:
    """The import namespace of one (model, version): see the module docstring.

    Parameters
    ----------
    name, version
        The model and version (they only make the package name readable).
    model_dir
        ``<repo>/<model>``.
    model_path
        ``<model_dir>/<version>/<default_model_filename>``.
    """

    def __init__(self, name: str, version: int, model_dir: Path, model_path: Path) -> None:
        safe = re.sub(r"\W", "_", name)
        self.package = f"{_PREFIX}{safe}_{version}_{next(_counter)}"
        self.model_path = model_path
        self.version_dir = str(model_path.parent)
        self.dirs = (self.version_dir, str(model_dir))  # Triton's sys.path order
        self._roots = tuple({os.path.realpath(d) for d in self.dirs} | set(self.dirs))
        self._version_roots = tuple({os.path.realpath(self.version_dir), self.version_dir})
        self.private: dict[str, ModuleType] = {}
        self.module: ModuleType | None = None
        with _lock:
            _scopes.append(self)
            _install_finder()

    def owns(self, module: ModuleType) -> bool:
        """True when ``module`` was loaded from the model's directories."""
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            return _inside(os.path.realpath(file), self._roots)
        paths = list(getattr(module, "__path__", None) or [])
        return bool(paths) and all(_inside(os.path.realpath(str(p)), self._roots) for p in paths)

    def owns_file(self, filename: str) -> int:
        """2 when ``filename`` is in the version dir, 1 in the model dir, else 0."""
        if _inside(filename, self._version_roots):
            return 2
        return 1 if _inside(filename, self._roots) else 0

    def load(self) -> ModuleType:
        """Import model.py (``<package>.<stem>``); exceptions from the model propagate."""
        stem = self.model_path.name.rsplit(".", 1)[0]
        package = ModuleType(self.package)
        package.__path__ = [self.version_dir]
        package.__package__ = self.package
        name = f"{self.package}.{stem}"
        spec = importlib.util.spec_from_file_location(name, self.model_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import '{self.model_path}'")
        module = importlib.util.module_from_spec(spec)
        with self.running():
            sys.modules[self.package] = package
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        setattr(package, stem, module)
        self.module = module
        return module

    @contextmanager
    def running(self) -> Iterator[None]:
        """Run model code that may import its sibling files by their plain names."""
        from tritonlite.backends.python import pb_utils

        with _lock:
            added = [d for d in self.dirs if d not in sys.path]
            sys.path.extend(added)
            installed = [n for n, m in self.private.items() if sys.modules.setdefault(n, m) is m]
            before = set(sys.modules)
            previous = pb_utils._runtime.model_dir
            pb_utils._runtime.model_dir = self.version_dir
            try:
                yield
            finally:
                pb_utils._runtime.model_dir = previous
                self._collect((set(sys.modules) - before) | set(installed))
                for d in added:
                    if d in sys.path:
                        sys.path.remove(d)

    def _collect(self, names: set[str]) -> None:
        for name in names:
            if name.startswith(self.package):
                continue
            mod = sys.modules.get(name)
            if mod is not None and self.owns(mod):
                self.private[name] = mod
                del sys.modules[name]

    def close(self) -> None:
        """Forget the model's modules (on unload)."""
        with _lock:
            # list() copies in one step: other threads import (change sys.modules) meanwhile
            for name in [
                n
                for n in list(sys.modules)
                if n == self.package or n.startswith(self.package + ".")
            ]:
                del sys.modules[name]
            for name, mod in self.private.items():
                if sys.modules.get(name) is mod:
                    del sys.modules[name]
            self.private.clear()
            self.module = None
            if self in _scopes:
                _scopes.remove(self)


def caller_scope() -> ModelScope | None:
    """The scope whose files the calling code lives in (nearest frame wins)."""
    frame = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not filename.startswith(_HERE):
            best, rank = None, 0
            for scope in reversed(tuple(_scopes)):
                r = scope.owns_file(filename)
                if r > rank:
                    best, rank = scope, r
            if best is not None:
                return best
        frame = frame.f_back  # type: ignore[assignment]
    return None


def caller_model_dir() -> str | None:
    scope = caller_scope()
    return scope.version_dir if scope is not None else None


class _Existing(importlib.abc.Loader):
    """Hands the import system a module the scope already holds (no second execution)."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = getattr(module, "__spec__", None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # module_from_spec replaced it


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: finds a model's own modules for imports made in ``execute``."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(_PREFIX):
            return None
        scope = caller_scope()
        if scope is None:
            return None
        held = scope.private.get(fullname)
        if held is not None:
            spec = importlib.util.spec_from_loader(fullname, _Existing(held))
        elif path is None:
            spec = importlib.machinery.PathFinder.find_spec(fullname, list(scope.dirs))
        else:
            return None
        if spec is not None:
            _leaked.add(fullname)
        return spec


def _install_finder() -> None:
    if not any(f is _SiblingFinder for f in sys.meta_path):
        sys.meta_path.append(_SiblingFinder)


def sweep() -> None:
    """Move modules ``_SiblingFinder`` loaded back out of ``sys.modules`` (after an execute)."""
    if not _leaked or not _lock.acquire(blocking=False):
        return  # nothing to do, or a scope is running: the next sweep moves them
    try:
        for name in list(_leaked):
            _leaked.discard(name)
            mod = sys.modules.get(name)
            if mod is None:
                continue
            for scope in reversed(_scopes):
                if scope.owns(mod):
                    scope.private[name] = mod
                    del sys.modules[name]
                    break
    finally:
        _lock.release()


def describe(exc: BaseException) -> str:
    """``Type: message`` plus the model's frames, innermost first (how Triton's stub reports)."""
    text = f"{type(exc).__name__}: {exc}"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(_HERE) and not f.filename.startswith("<frozen")
    ]
    if frames:
        text += "\n\nAt:\n" + "".join(
            f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames)
        )
    from tritonlite.backends.python.env import numpy2_hint

    return text + numpy2_hint(exc)

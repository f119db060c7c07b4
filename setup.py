"""Build tritonlite's optional Cython extensions; everything else lives in pyproject.toml.

Every ``tritonlite/**/X_c.pxd`` declares the C types of a pure-Python source ``X_py.py`` beside
it, and that source is compiled into the extension ``X_c`` (for example
``tritonlite/scheduling/_batcher_py.py`` -> ``tritonlite.scheduling._batcher_c``), so the Python
file stays the one definition. The build prints ``accelerated build`` when the extensions were
built and ``pure build`` when they were not (no Cython, no C compiler, a compile error);
tritonlite then runs the pure twins. With ``TRITONLITE_REQUIRE_EXTENSIONS=1`` a failed
extension build fails the whole build.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
# Generated C stays out of the source tree so the checkout holds only the source of truth.
CYTHON_BUILD_DIR = os.path.join("build", "cython")


def _extensions() -> list[Extension]:
    """One extension per ``X_c.pxd`` with its ``X_py.py`` twin beside it."""
    out = []
    for pxd in sorted(glob.glob("tritonlite/**/*_c.pxd", recursive=True)):
        source = pxd[: -len("_c.pxd")] + "_py.py"
        if not os.path.exists(source):
            continue
        module = pxd[: -len(".pxd")].replace(os.sep, ".").replace("/", ".")
        out.append(Extension(module, sources=[source], depends=[pxd]))
    return out


EXTENSIONS = _extensions()


class BuildExt(build_ext):
    """Cythonize, then compile; a failure degrades to the pure build unless required."""

    def run(self) -> None:
        try:
            from Cython.Build import cythonize

            # one job per core, for both steps: the extensions are independent (sequential,
            # the build took 42 s of a fresh install on a 2-core VM)
            jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
            generated = cythonize(
                self.extensions,
                build_dir=CYTHON_BUILD_DIR,
                language_level=3,
                quiet=True,
                force=self._pxd_changed(),
                nthreads=jobs if jobs > 1 else 0,
            )
            if not self.parallel and jobs > 1:
                self.parallel = jobs
            # cythonize returns distutils Extensions; keep setuptools' and swap in the C sources.
            c_sources = {ext.name: ext.sources for ext in generated}
            for ext in self.extensions:
                ext.sources = c_sources[ext.name]
            super().run()
        except Exception as exc:  # any reason the extension cannot be built means "pure"
            if REQUIRE:
                raise RuntimeError(
                    "TRITONLITE_REQUIRE_EXTENSIONS=1 but the Cython extensions "
                    f"{[e.name for e in self.extensions]} failed to build: {exc!r}"
                ) from exc
            sys.stderr.write(f"tritonlite: extension not built ({exc!r})\n")
            # Nothing was built, so nothing may be copied into the tree or the wheel.
            self.extensions = []
            self.distribution.ext_modules = []
            print("pure build")
            return
        print("accelerated build")

    def _pxd_changed(self) -> bool:
        """Cython looks for ``X_py.pxd`` beside ``X_py.py``, so an edit of ``X_c.pxd`` alone
        would leave the generated C stale: regenerate everything when a .pxd is newer."""
        for ext in self.extensions:
            c_file = os.path.join(CYTHON_BUILD_DIR, ext.sources[0][: -len(".py")] + ".c")
            if not os.path.exists(c_file):
                continue
            built = os.path.getmtime(c_file)
            if any(os.path.getmtime(d) > built for d in ext.depends):
                return True
        return False

    def get_outputs(self) -> list[str]:
        return list(super().get_outputs()) if self.extensions else []

    def get_output_mapping(self) -> dict[str, str]:
        return dict(super().get_output_mapping()) if self.extensions else {}


def _setup_kwargs() -> dict[str, Any]:
    return {"ext_modules": EXTENSIONS, "cmdclass": {"build_ext": BuildExt}}


setup(**_setup_kwargs())

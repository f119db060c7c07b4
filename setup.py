"""Build tritonlite's optional Cython extension; everything else lives in pyproject.toml.

The extension ``tritonlite.scheduling._batcher_c`` is compiled from the pure-Python source
``tritonlite/scheduling/_batcher_py.py`` (C types from ``_batcher_c.pxd``), so the Python file
stays the one definition of the batching decision. The build prints ``accelerated build`` when
the extension was built and ``pure build`` when it was not (no Cython, no C compiler, a compile
error); tritonlite then runs the pure twin. With ``TRITONLITE_REQUIRE_EXTENSIONS=1`` a failed
extension build fails the whole build.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
# Generated C stays out of the source tree so the checkout holds only the source of truth.
CYTHON_BUILD_DIR = os.path.join("build", "cython")

EXTENSIONS = [
    Extension(
        "tritonlite.scheduling._batcher_c",
        sources=["tritonlite/scheduling/_batcher_py.py"],
        depends=["tritonlite/scheduling/_batcher_c.pxd"],
    )
]


class BuildExt(build_ext):
    """Cythonize, then compile; a failure degrades to the pure build unless required."""

    def run(self) -> None:
        try:
            from Cython.Build import cythonize

            generated = cythonize(
                self.extensions, build_dir=CYTHON_BUILD_DIR, language_level=3, quiet=True
            )
            # cythonize returns distutils Extensions; keep setuptools' and swap in the C sources.
            c_sources = {ext.name: ext.sources for ext in generated}
            for ext in self.extensions:
                ext.sources = c_sources[ext.name]
            super().run()
        except Exception as exc:  # any reason the extension cannot be built means "pure"
            if REQUIRE:
                raise RuntimeError(
                    "TRITONLITE_REQUIRE_EXTENSIONS=1 but the Cython extension "
                    f"tritonlite.scheduling._batcher_c failed to build: {exc!r}"
                ) from exc
            sys.stderr.write(f"tritonlite: extension not built ({exc!r})\n")
            # Nothing was built, so nothing may be copied into the tree or the wheel.
            self.extensions = []
            self.distribution.ext_modules = []
            print("pure build")
            return
        print("accelerated build")

    def get_outputs(self) -> list[str]:
        return list(super().get_outputs()) if self.extensions else []

    def get_output_mapping(self) -> dict[str, str]:
        return dict(super().get_output_mapping()) if self.extensions else {}


def _setup_kwargs() -> dict[str, Any]:
    return {"ext_modules": EXTENSIONS, "cmdclass": {"build_ext": BuildExt}}


setup(**_setup_kwargs())

"""tools/check_layers.py: passes on layered trees, fails on an inverted import or a cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"

# A small package laid out like tritonlite: every import points down.
LAYERED = {
    "__init__.py": '__version__ = "0"\n',
    "contracts/__init__.py": "",
    "contracts/errors.py": "",
    "contracts/types.py": "from tritonlite.contracts import errors\nimport tritonlite.kernels\n",
    "kernels/__init__.py": "",
    "memory/__init__.py": "from tritonlite.kernels import x\n",
    "kernels/x.py": "",
    "backends/__init__.py": "",
    "backends/base.py": "from tritonlite.contracts.types import *\nfrom ..memory import x\n",
    "scheduling/__init__.py": "",
    "scheduling/base.py": "import tritonlite.backends.base\n",
    "core/__init__.py": "",
    "core/core.py": "from tritonlite.scheduling import base\n",
    "options.py": "",
    "server.py": "from tritonlite.core.core import *\nfrom tritonlite.options import *\n",
}


def run_checker(package_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), str(package_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    package_dir = tmp_path / "tritonlite"
    for rel, text in files.items():
        path = package_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package_dir


def test_layered_tree_passes(tmp_path: Path) -> None:
    result = run_checker(write_tree(tmp_path, LAYERED))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "layers ok" in result.stdout


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        # top-level: a backend imports the core
        (
            "backends/bad.py",
            "from tritonlite.core.core import InferenceCore\n",
            "tritonlite.backends.bad (backends) imports tritonlite.core.core from a higher layer (core)",
        ),
        # function-local, relative
        (
            "scheduling/bad.py",
            "def f():\n    from ..core import core\n",
            "tritonlite.scheduling.bad (scheduling) imports tritonlite.core.core",
        ),
        # TYPE_CHECKING only
        (
            "contracts/bad.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tritonlite.backends.base\n",
            "tritonlite.contracts.bad (contracts) imports tritonlite.backends.base",
        ),
        # a leaf library reaches up to the contracts
        (
            "memory/bad.py",
            "from tritonlite.contracts.errors import TritonliteError\n",
            "tritonlite.memory.bad (kernels/memory/gpu) imports tritonlite.contracts.errors",
        ),
        # the core reads the entry layer's options
        (
            "core/bad.py",
            "from tritonlite import options\n",
            "tritonlite.core.bad (core) imports tritonlite.options from a higher layer (options)",
        ),
    ],
)
def test_inverted_import_fails(tmp_path: Path, rel: str, text: str, expected: str) -> None:
    result = run_checker(write_tree(tmp_path, {**LAYERED, rel: text}))
    assert result.returncode == 1
    assert expected in result.stdout
    assert f"{rel}:" in result.stdout  # the line names the file


def test_cycle_inside_a_layer_fails(tmp_path: Path) -> None:
    # memory -> kernels is allowed alone; kernels -> memory closes a cycle in one layer.
    tree = write_tree(tmp_path, {**LAYERED, "kernels/y.py": "import tritonlite.memory\n"})
    result = run_checker(tree)
    assert result.returncode == 1
    assert "cycle between packages tritonlite.kernels, tritonlite.memory" in result.stdout


def test_a_folder_without_init_fails(tmp_path: Path) -> None:
    files = {k: v for k, v in LAYERED.items() if k != "contracts/__init__.py"}
    result = run_checker(write_tree(tmp_path, files))
    assert result.returncode == 1
    assert "contracts: a package without __init__.py" in result.stdout


def test_module_in_no_layer_fails(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {**LAYERED, "stray.py": "from tritonlite import options\n"})
    result = run_checker(tree)
    assert result.returncode == 1
    assert "tritonlite.stray is in no layer" in result.stdout


def test_tritonlite_is_layered() -> None:
    result = run_checker(ROOT / "tritonlite")
    assert result.returncode == 0, result.stdout + result.stderr


FRONTENDS = {
    **LAYERED,
    "frontends/__init__.py": "",
    "frontends/native.py": "from tritonlite.frontends.wire import h\nfrom tritonlite.frontends.http import app\n",
    "frontends/base/__init__.py": "",
    "frontends/base/rejects.py": "",
    "frontends/base/grpc_errors.py": "from tritonlite.frontends.base.rejects import R\n",
    "frontends/wire/__init__.py": "",
    "frontends/wire/h.py": "from tritonlite.frontends.base import grpc_errors\n",
    "frontends/http/__init__.py": "",
    "frontends/http/app.py": "from tritonlite.frontends.base.rejects import R\n",
    "frontends/grpc/__init__.py": "",
}


def test_frontends_layered_tree_passes(tmp_path: Path) -> None:
    result = run_checker(write_tree(tmp_path, FRONTENDS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        # the wire layer reaches up to the wiring
        (
            "frontends/wire/bad.py",
            "from tritonlite.frontends import native\n",
            "tritonlite.frontends.wire.bad (frontends: http, grpc, wire) imports"
            " tritonlite.frontends.native from a higher layer (frontends)",
        ),
        # the shared bottom reaches up to the HTTP handlers
        (
            "frontends/base/bad.py",
            "from tritonlite.frontends.http import app\n",
            "tritonlite.frontends.base.bad (frontends: base) imports tritonlite.frontends.http.app",
        ),
        # HTTP code imports gRPC code: no loop, still refused
        (
            "frontends/http/bad.py",
            "from tritonlite.frontends.grpc import x\n",
            "tritonlite.frontends.http.bad imports tritonlite.frontends.grpc, which its layer",
        ),
    ],
)
def test_frontends_inverted_import_fails(
    tmp_path: Path, rel: str, text: str, expected: str
) -> None:
    result = run_checker(write_tree(tmp_path, {**FRONTENDS, rel: text}))
    assert result.returncode == 1
    assert expected in result.stdout


def test_loop_between_two_base_modules_fails(tmp_path: Path) -> None:
    # rejects -> grpc_errors closes a loop inside frontends/base, one package
    tree = write_tree(
        tmp_path,
        {**FRONTENDS, "frontends/base/rejects.py": "def f():\n    from . import grpc_errors\n"},
    )
    result = run_checker(tree)
    assert result.returncode == 1
    assert (
        "cycle between packages tritonlite.frontends.base.grpc_errors,"
        " tritonlite.frontends.base.rejects" in result.stdout
    )


def test_front_ends_reach_the_core_only_through_its_api(tmp_path: Path) -> None:
    tree = {
        **FRONTENDS,
        "core/api.py": "from tritonlite.core import core\n",
        "inprocess/__init__.py": "from tritonlite.core.api import X\n",
        "frontends/http/app.py": "from tritonlite.core.api import CoreAPI\n",
    }
    assert run_checker(write_tree(tmp_path / "ok", tree)).returncode == 0
    for rel, text in (
        ("frontends/http/bad.py", "from tritonlite.core.core import InferenceCore\n"),
        ("inprocess/bad.py", "def f():\n    from tritonlite.core import core\n"),
    ):
        result = run_checker(write_tree(tmp_path / rel.replace("/", "_"), {**tree, rel: text}))
        assert result.returncode == 1
        assert "tritonlite.core is reached only through tritonlite.core.api" in result.stdout


def test_loop_between_two_backend_modules_fails(tmp_path: Path) -> None:
    tree = {
        **LAYERED,
        "backends/python/__init__.py": "",
        "backends/python/pb_utils.py": "from tritonlite.backends.python import model_config\n",
        "backends/python/model_config.py": "from tritonlite.backends import base\n",
    }
    assert run_checker(write_tree(tmp_path / "ok", tree)).returncode == 0
    looped = {**tree, "backends/python/model_config.py": "def f():\n    from . import pb_utils\n"}
    result = run_checker(write_tree(tmp_path / "loop", looped))
    assert result.returncode == 1
    assert (
        "cycle between packages tritonlite.backends.python.model_config,"
        " tritonlite.backends.python.pb_utils" in result.stdout
    )

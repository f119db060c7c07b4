"""Model names and ``file:`` override paths from requests: the one rule (contracts/names.py)
and the override directory it guards (core/models/overrides.py's write_override_files /
remove_override_dir).

Everything runs inside a watched temp dir: ``tempfile`` makes its dirs under ``watched/tmp`` and
a sentinel directory sits beside it; each test checks that nothing outside the fresh override
directory was created or removed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from tritonlite.contracts import names
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.core.models.overrides import (
    OverrideDir,
    _write_one,
    check_override_files,
    remove_override_dir,
    write_override_files,
)

pytestmark = pytest.mark.timeout(30)

GOOD_NAMES = [
    "add_sub",
    "a.b",
    "a..b",
    "with space",
    "ü-ß",
    "x" * 255,
    "é" * 127,
    "a\\b",
    "v1.2",
    os.fsdecode(b"latin1-\xe9"),
]  # the last: a non-UTF-8 directory name
BAD_NAMES = [
    "",
    ".",
    "..",
    ".hidden",
    "a/b",
    "/abs",
    "../x",
    "../../victim",
    "a/../b",
    "a\x00b",
    "x" * 256,
    "é" * 128,
    "\ud800",
    unquote("..%2Fx"),
    unquote("a%2Fb"),
    unquote("%2Fetc%2Fx"),
    unquote("%2E%2E"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture()
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``tmp_path`` with tempfile's dirs in ``tmp/`` and a sentinel dir beside it; asserts at
    teardown that the sentinel is untouched and nothing but ``tmp/`` was added."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep").write_text("keep")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before = _tree(tmp_path) - _tree(tmp) - {"tmp"}
    yield tmp_path
    assert (sentinel / "keep").read_text() == "keep"
    assert _tree(tmp_path) - {"tmp"} - {"tmp/" + p for p in _tree(tmp)} == before


def _code(exc: pytest.ExceptionInfo[TritonliteError]) -> ErrorCode:
    return exc.value.code


# -- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_pass(name: str) -> None:
    names.check_model_name(name, "load")
    assert names.component_problem(name) is None


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_invalid_arg(name: str) -> None:
    with pytest.raises(TritonliteError) as exc:
        names.check_model_name(name, "unload")
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert exc.value.message.startswith("failed to unload '")
    assert "invalid model name" in exc.value.message
    assert "\x00" not in exc.value.message and len(exc.value.message) < 250


def test_shown_escapes_and_truncates() -> None:
    assert names.shown("a\x00b'") == "a\\x00b\\'"
    assert names.shown("x" * 300) == "x" * 64 + "..."


@pytest.mark.parametrize(
    "rel", ["1/model.onnx", "config.pbtxt", "1/sub/dir/f.bin", ".gitkeep", "1/.hidden", "a..b"]
)
def test_good_override_paths(rel: str) -> None:
    assert "/".join(names.check_override_path(rel)) == rel


@pytest.mark.parametrize(
    "rel",
    [
        "",
        "/etc/passwd",
        "../x",
        "1/../../x",
        "..",
        ".",
        "./a",
        "a//b",
        "a/",
        "a\\..\\b",
        "a\x00b",
        "1/" + "x" * 256,
        unquote("..%2F..%2Fx"),
    ],
)
def test_bad_override_paths(rel: str) -> None:
    with pytest.raises(TritonliteError) as exc:
        names.check_override_path(rel)
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert "must stay inside the model directory" in exc.value.message


# -- the override directory ----------------------------------------------------------------------
def test_override_files_land_in_a_fresh_dir(watched: Path) -> None:
    files = {"config.pbtxt": b"c", "1/model.onnx": b"m", "1/sub/x": b"x"}
    out = write_override_files("m", files)
    try:
        assert out.root.parent == (watched / "tmp").resolve()
        assert out.root.name.startswith("tritonlite-override-")
        assert out.model_dir == out.root / "m"
        assert _tree(out.model_dir) == {"config.pbtxt", "1", "1/model.onnx", "1/sub", "1/sub/x"}
        assert (out.model_dir / "1" / "model.onnx").read_bytes() == b"m"
    finally:
        remove_override_dir(out)
    assert not out.root.exists()
    assert _tree(watched / "tmp") == set()


@pytest.mark.parametrize("name", BAD_NAMES)
def test_hostile_names_write_nothing(watched: Path, name: str) -> None:
    with pytest.raises(TritonliteError) as exc:
        write_override_files(name, {"config.pbtxt": b"x"})
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert str(watched) not in exc.value.message
    assert _tree(watched / "tmp") == set()


def test_absolute_name_beside_the_temp_dir(watched: Path) -> None:
    victim = watched / "sentinel"
    with pytest.raises(TritonliteError) as exc:
        write_override_files(str(victim), {"1/model.onnx": b"x"})
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert _tree(victim) == {"keep"}
    assert _tree(watched / "tmp") == set()


@pytest.mark.parametrize("rel", ["../escape", "1/../../escape", "/abs/escape", "a/./b", "a\\b"])
def test_hostile_file_names_write_nothing(watched: Path, rel: str) -> None:
    with pytest.raises(TritonliteError) as exc:
        write_override_files("m", {"config.pbtxt": b"c", rel: b"x"})
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert _tree(watched / "tmp") == set()  # checked before anything is written


@pytest.mark.parametrize("files", [{"a": b"1", "a/b": b"2"}, {"a/b": b"1", "a": b"2"}])
def test_a_file_where_a_directory_is_wanted(watched: Path, files: dict[str, bytes]) -> None:
    with pytest.raises(TritonliteError) as exc:
        write_override_files("m", files)
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert str(watched) not in exc.value.message and "/tmp" not in exc.value.message
    assert _tree(watched / "tmp") == set()  # the half-written dir is gone


def test_symlinked_directory_is_not_followed(watched: Path) -> None:
    outside = watched / "sentinel"
    model_dir = watched / "tmp" / "m"
    model_dir.mkdir()
    (model_dir / "1").symlink_to(outside, target_is_directory=True)
    with pytest.raises(TritonliteError) as exc:
        _write_one(model_dir, ("1", "model.onnx"), b"x")
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert _tree(outside) == {"keep"}


def test_symlinked_file_is_not_followed(watched: Path) -> None:
    outside = watched / "sentinel" / "keep"
    model_dir = watched / "tmp" / "m"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").symlink_to(outside)
    with pytest.raises(TritonliteError) as exc:
        _write_one(model_dir, ("config.pbtxt",), b"overwritten")
    assert _code(exc) == ErrorCode.INVALID_ARG
    assert outside.read_text() == "keep"


def test_removal_only_touches_its_own_root(watched: Path) -> None:
    sentinel = watched / "sentinel"
    remove_override_dir(OverrideDir(sentinel, sentinel / "m"))  # not a dir this server made
    assert (sentinel / "keep").exists()
    link = watched / "tmp" / "tritonlite-override-link"
    link.symlink_to(sentinel, target_is_directory=True)
    remove_override_dir(OverrideDir(link, link / "m"))
    assert (sentinel / "keep").exists()
    os.unlink(link)


def test_check_override_files_is_pure(watched: Path) -> None:
    assert check_override_files("m", {"1/a": b"x"}) == {("1", "a"): b"x"}
    with pytest.raises(TritonliteError):
        check_override_files("../m", {"1/a": b"x"})
    assert _tree(watched / "tmp") == set()

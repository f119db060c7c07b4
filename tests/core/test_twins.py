"""tritonlite._twins: the one rule that picks a compiled twin or its pure-Python source."""

from __future__ import annotations

import pytest

from tritonlite import _twins


def test_a_built_twin_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONLITE_NO_EXTENSIONS", raising=False)
    module = _twins.compiled("json")  # any importable module stands in for a built twin
    assert module is not None and module.__name__ == "json"
    assert _twins.describe("x", module) == "x: compiled (Cython json)"


def test_no_extensions_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONLITE_NO_EXTENSIONS", "1")
    monkeypatch.setenv("TRITONLITE_REQUIRE_EXTENSIONS", "1")
    assert _twins.compiled("json") is None
    assert _twins.describe("x", None) == "x: pure Python (TRITONLITE_NO_EXTENSIONS=1)"


def test_a_missing_twin_falls_back_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONLITE_NO_EXTENSIONS", raising=False)
    monkeypatch.delenv("TRITONLITE_REQUIRE_EXTENSIONS", raising=False)
    assert _twins.compiled("tritonlite.no_such_twin_c") is None
    assert _twins.describe("x", None) == "x: pure Python (compiled twin not built)"
    monkeypatch.setenv("TRITONLITE_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(ImportError, match="tritonlite.no_such_twin_c is not built"):
        _twins.compiled("tritonlite.no_such_twin_c")

"""Triton's PyTorch naming rules (``backends/pytorch_io``): no torch needed."""

from __future__ import annotations

import pytest

from tritonlite.backends import pytorch_io as io
from tritonlite.contracts.errors import ErrorCode, TritonliteError

T = "Tensor"


def args(*names: str, kind: str = T) -> list[io.Argument]:
    return [io.Argument(n, kind) for n in names]


def test_forward_argument_names_win() -> None:
    layout = io.input_layout(["y", "x"], [], [], args("x", "y"), "m")
    assert layout.positions == {"x": 0, "y": 1} and not layout.as_dict


def test_named_index_maps_by_suffix() -> None:
    layout = io.input_layout(["INPUT__1", "INPUT__0"], [], [], args("a", "b"), "m")
    assert layout.positions == {"INPUT__1": 1, "INPUT__0": 0}


def test_anything_else_is_config_order() -> None:
    layout = io.input_layout(["B", "A"], [], [], args("a", "b"), "m")
    assert layout.positions == {"B": 0, "A": 1}
    # a non-numeric suffix also falls back to config order
    layout = io.input_layout(["X__a", "Y__b"], [], [], args("p", "q"), "m")
    assert layout.positions == {"X__a": 0, "Y__b": 1}


def test_dict_input_takes_every_name() -> None:
    layout = io.input_layout(["a", "b"], [], [], args("inputs", kind="Dict"), "m")
    assert layout.as_dict and set(layout.positions) == {"a", "b"}


def test_argument_count_must_match_with_triton_message() -> None:
    with pytest.raises(TritonliteError) as e:
        io.input_layout(["INPUT__0"], [], [], args("a", "b"), "m")
    assert e.value.code == ErrorCode.INVALID_ARG
    assert e.value.message == (
        "unable to load model 'm', configuration expects 1 inputs, model provides 2"
    )


def test_controls_need_named_index() -> None:
    layout = io.input_layout(["INPUT__0"], ["START__1"], [], args("a", "b"), "m")
    assert layout.positions == {"INPUT__0": 0, "START__1": 1}
    with pytest.raises(TritonliteError, match="does not follow <name>__<index> naming convention"):
        io.input_layout(["INPUT__0"], ["START"], [], args("a", "b"), "m")


def test_duplicate_indices_rejected() -> None:
    with pytest.raises(TritonliteError, match="do not map one-to-one"):
        io.input_layout(["A__0", "B__0"], [], [], args("a", "b"), "m")


def test_unsupported_argument_kinds() -> None:
    with pytest.raises(TritonliteError, match="Only a single input of type Dict"):
        io.input_layout(["a"], [], [], [io.Argument("a", "Optional")], "m")
    with pytest.raises(TritonliteError, match="Multiple inputs of kind DictType"):
        io.input_layout(["a", "b"], [], [], args("a", "b", kind="Dict"), "m")
    with pytest.raises(TritonliteError, match="at least one input"):
        io.input_layout([], [], [], args("a"), "m")


def test_output_positions() -> None:
    assert io.output_positions(["OUTPUT__1", "OUTPUT__0"], "m") == {"OUTPUT__1": 1, "OUTPUT__0": 0}
    assert io.output_positions(["B", "A"], "m") == {"B": 0, "A": 1}
    with pytest.raises(TritonliteError, match="at least one output"):
        io.output_positions([], "m")


def test_datatype_and_string_rules() -> None:
    io.check_dtype("TYPE_FP32", "x", "input", "m")
    io.check_dtype("TYPE_STRING", "x", "input", "m")
    with pytest.raises(
        TritonliteError, match="unsupported datatype TYPE_UINT32 for input 'x' for model 'm'"
    ):
        io.check_dtype("TYPE_UINT32", "x", "input", "m")
    io.check_string_dims([-1], False, "x", "input", "m")
    io.check_string_dims([], True, "x", "input", "m")
    with pytest.raises(TritonliteError, match="1 dimensional List of String as input"):
        io.check_string_dims([-1], True, "x", "input", "m")

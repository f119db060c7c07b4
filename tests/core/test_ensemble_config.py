"""An ensemble config against its composing models' configs (Triton's ``ValidateEnsembleConfig``)
and the step graph built from it.

Real protobuf configs through the real parse/normalize/validate pipeline; the expected messages
are Triton core's (``ensemble_utils.cc``). The single-config checks (steps, data flow) are in
``test_config.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tritonlite.contracts import config as C
from tritonlite.contracts import config_validate as V
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.core.models.ensemble_config import validate_composing
from tritonlite.scheduling.ensemble import EnsembleGraph, reshape_dims

pytestmark = pytest.mark.timeout(30)


def complete(text: str, name: str) -> Any:
    cfg = C.parse_pbtxt(text, name)
    C.resolve_platform(cfg, Path("/nonexistent") / name)
    C.normalize(cfg)
    V.validate(cfg)
    return cfg


def model(
    name: str,
    *,
    mbs: int = 8,
    inp: str = "IN",
    out: str = "OUT",
    dtype: str = "FP32",
    dims: str = "[4]",
    optional: str = "",
) -> Any:
    return complete(
        f"""name: "{name}" backend: "python" max_batch_size: {mbs}
        input [{{ name: "{inp}" data_type: TYPE_{dtype} dims: {dims} }} {optional}]
        output [{{ name: "{out}" data_type: TYPE_{dtype} dims: {dims} }}]""",
        name,
    )


def ensemble(steps: str, *, mbs: int = 8, dtype: str = "FP32", dims: str = "[4]") -> Any:
    return complete(
        f"""name: "ens" platform: "ensemble" max_batch_size: {mbs}
        input [{{ name: "X" data_type: TYPE_{dtype} dims: {dims} }}]
        output [{{ name: "Y" data_type: TYPE_{dtype} dims: {dims} }}]
        ensemble_scheduling {{ step [ {steps} ] }}""",
        "ens",
    )


def step(model_name: str, inp: str, src: str, out: str, dst: str) -> str:
    return (
        f'{{ model_name: "{model_name}" model_version: -1 '
        f'input_map {{ key: "{inp}" value: "{src}" }} '
        f'output_map {{ key: "{out}" value: "{dst}" }} }}'
    )


TWO_STEPS = step("a", "IN", "X", "OUT", "mid") + "," + step("b", "IN", "mid", "OUT", "Y")


def check(cfg: Any, configs: dict[str, Any], message: str) -> None:
    with pytest.raises(TritonliteError, match=re.escape(message)) as info:
        validate_composing(cfg, configs)
    assert info.value.code == ErrorCode.INVALID_ARG


def test_consistent_pipeline_passes() -> None:
    # True would mean a decoupled step makes the ensemble decoupled: none is here
    assert validate_composing(ensemble(TWO_STEPS), {"a": model("a"), "b": model("b")}) is False
    with pytest.raises(TritonliteError):  # the same pipeline, one step's type changed
        validate_composing(ensemble(TWO_STEPS), {"a": model("a"), "b": model("b", dtype="INT32")})


def test_mapping_to_non_existing_input() -> None:
    cfg = ensemble(step("a", "NOPE", "X", "OUT", "Y"))
    check(
        cfg,
        {"a": model("a")},
        "in ensemble ens, ensemble tensor X is mapping to non-existing input NOPE in model a",
    )


def test_mapping_from_non_existing_output() -> None:
    cfg = ensemble(step("a", "IN", "X", "NOPE", "Y"))
    check(
        cfg,
        {"a": model("a")},
        "in ensemble ens, ensemble tensor Y is mapped from non-existing output NOPE in model a",
    )


def test_unmapped_model_input() -> None:
    two_inputs = complete(
        """name: "a" backend: "python" max_batch_size: 8
        input [{ name: "IN" data_type: TYPE_FP32 dims: [4] },
               { name: "IN2" data_type: TYPE_FP32 dims: [4] }]
        output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]""",
        "a",
    )
    check(
        ensemble(step("a", "IN", "X", "OUT", "Y")),
        {"a": two_inputs},
        "in ensemble ens, input IN2 in model a is not mapped to any ensemble tensors",
    )


def test_unmapped_optional_input_is_fine() -> None:
    with_optional = complete(
        """name: "a" backend: "python" max_batch_size: 8
        input [{ name: "IN" data_type: TYPE_FP32 dims: [4] },
               { name: "IN2" data_type: TYPE_FP32 dims: [4] optional: true }]
        output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]""",
        "a",
    )
    assert (
        validate_composing(ensemble(step("a", "IN", "X", "OUT", "Y")), {"a": with_optional})
        is False
    )
    required = with_optional.__class__()
    required.CopyFrom(with_optional)
    required.input[1].optional = False  # the same input, required: refused
    check(
        ensemble(step("a", "IN", "X", "OUT", "Y")),
        {"a": required},
        "in ensemble ens, input IN2 in model a is not mapped to any ensemble tensors",
    )


def test_datatype_mismatch_between_ensemble_and_step() -> None:
    check(
        ensemble(step("a", "IN", "X", "OUT", "Y")),
        {"a": model("a", dtype="INT32")},
        "in ensemble ens, ensemble tensor X: inconsistent data type: TYPE_FP32 is inferred "
        "from model ens while TYPE_INT32 is inferred from model a",
    )


def test_datatype_mismatch_between_steps() -> None:
    check(
        ensemble(TWO_STEPS),
        {"a": model("a"), "b": model("b", dtype="INT32")},
        "in ensemble ens, ensemble tensor mid: inconsistent data type: TYPE_FP32 is inferred "
        "from model a while TYPE_INT32 is inferred from model b",
    )


def test_shape_mismatch() -> None:
    check(
        ensemble(TWO_STEPS),
        {"a": model("a"), "b": model("b", dims="[5]")},
        "in ensemble ens, ensemble tensor mid: inconsistent shape: [-1,4] is inferred from "
        "model a while [-1,5] is inferred from model b",
    )


def test_variable_dims_are_compatible() -> None:
    configs = {"a": model("a"), "b": model("b", dims="[-1]")}
    assert validate_composing(ensemble(TWO_STEPS), configs) is False
    # a fixed dim that differs is not (test_shape_mismatch has the message)
    with pytest.raises(TritonliteError):
        validate_composing(ensemble(TWO_STEPS), {"a": model("a"), "b": model("b", dims="[5]")})


def test_batching_and_non_batching_full_shapes_match() -> None:
    # a non-batching model whose shape is [-1, 4] takes what a batching [4] model produces
    configs = {"a": model("a"), "b": model("b", mbs=0, dims="[-1, 4]")}
    assert validate_composing(ensemble(TWO_STEPS), configs) is False
    check(  # a full shape whose last dim differs does not
        ensemble(TWO_STEPS),
        {"a": model("a"), "b": model("b", mbs=0, dims="[-1, 5]")},
        "in ensemble ens, ensemble tensor mid: inconsistent shape",
    )


def test_max_batch_size_too_large_for_a_composing_model() -> None:
    check(
        ensemble(TWO_STEPS, mbs=16),
        {"a": model("a", mbs=16), "b": model("b", mbs=4)},
        "ensemble ens allows maximum batch size 16, but it contains model b which only "
        "allows maximum batch size to be 4",
    )


def test_graph_prunes_steps_for_requested_outputs() -> None:
    fan = complete(
        """name: "fan" platform: "ensemble" max_batch_size: 8
        input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
        output [{ name: "P" data_type: TYPE_FP32 dims: [4] },
                { name: "Q" data_type: TYPE_FP32 dims: [4] }]
        ensemble_scheduling { step [
          { model_name: "a" input_map { key: "IN" value: "X" }
            output_map { key: "OUT" value: "m" } },
          { model_name: "b" input_map { key: "IN" value: "m" }
            output_map { key: "OUT" value: "P" } },
          { model_name: "c" input_map { key: "IN" value: "m" }
            output_map { key: "OUT" value: "Q" } }
        ] }""",
        "fan",
    )
    graph = EnsembleGraph(fan)
    assert [s.model_name for s in graph.needed_steps(["P", "Q"])] == ["a", "b", "c"]
    assert [s.model_name for s in graph.needed_steps(["Q"])] == ["a", "c"]
    assert graph.composing == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("dims", "batching", "batch", "shape", "expected"),
    [
        ((4,), True, 2, (2, 4), (2, 4)),  # batching to batching: unchanged
        ((4,), True, 0, (4,), (1, 4)),  # from a non-batching model: batch of 1 added
        ((4,), True, 0, (3, 4), (3, 4)),  # already batch-shaped: unchanged
        ((4,), False, 1, (1, 4), (4,)),  # to a non-batching model: batch of 1 dropped
        ((-1, 4), False, 3, (3, 4), (3, 4)),  # the batch fits the model's own dims
    ],
)
def test_reshape_dims_matches_triton(
    dims: tuple[int, ...],
    batching: bool,
    batch: int,
    shape: tuple[int, ...],
    expected: tuple[int, ...],
) -> None:
    assert reshape_dims(dims, batching, batch, shape) == expected

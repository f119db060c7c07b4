"""Which ensembles with decoupled steps load (Triton's ``ValidateEnsembleConfig`` data-flow
check, ``ensemble_utils.cc``): a step, or the ensemble's response, may read tensors that stem
from one source only: the request, or one decoupled step (whose answers come any number of
times, so values from two sources could not be paired). Real configs through the real
parse/normalize/validate pipeline; the server-level case against Triton 2.51 is in
``test_ensemble_decoupled.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tritonlite.contracts import config as C
from tritonlite.contracts import config_validate as V
from tritonlite.contracts.errors import TritonliteError
from tritonlite.core.models.ensemble_config import validate_composing

pytestmark = pytest.mark.timeout(30)


def complete(text: str, name: str) -> Any:
    cfg = C.parse_pbtxt(text, name)
    C.resolve_platform(cfg, Path("/nonexistent") / name)
    C.normalize(cfg)
    V.validate(cfg)
    return cfg


def model(name: str, inputs: list[str], decoupled: bool = False) -> Any:
    ins = ", ".join(f'{{ name: "{i}" data_type: TYPE_INT32 dims: [1] }}' for i in inputs)
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return complete(
        f"""name: "{name}" backend: "python" max_batch_size: 0 {policy}
        input [{ins}] output [{{ name: "O" data_type: TYPE_INT32 dims: [1] }}]""",
        name,
    )


def step(name: str, inputs: dict[str, str], out: str) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    return f'{{ model_name: "{name}" model_version: -1 {ins} output_map {{ key: "O" value: "{out}" }} }}'


def ensemble(outputs: list[str], steps: list[str]) -> Any:
    outs = ", ".join(f'{{ name: "{o}" data_type: TYPE_INT32 dims: [1] }}' for o in outputs)
    return complete(
        f"""name: "ens" platform: "ensemble" max_batch_size: 0
        input [{{ name: "N" data_type: TYPE_INT32 dims: [1] }}] output [{outs}]
        ensemble_scheduling {{ step [ {", ".join(steps)} ] }}""",
        "ens",
    )


MODELS = {
    "dec": model("dec", ["A"], decoupled=True),
    "dec2": model("dec2", ["A"], decoupled=True),
    "one": model("one", ["A"]),
    "two": model("two", ["A", "B"]),
}


def refusal(owner: str) -> str:
    return (
        f"in ensemble ens, step of model '{owner}' receives inputs originated from different "
        "decoupled models"
    )


CASES: dict[str, tuple[list[str], list[str], bool | str]] = {  # outputs, steps, outcome
    "no_decoupled_step": (["Y"], [step("one", {"A": "N"}, "Y")], False),
    "decoupled_alone": (["Y"], [step("dec", {"A": "N"}, "Y")], True),
    "decoupled_then_plain": (
        ["Y"],
        [step("dec", {"A": "N"}, "t"), step("one", {"A": "t"}, "Y")],
        True,
    ),
    "decoupled_output_and_its_successor": (
        ["Y", "t"],
        [step("dec", {"A": "N"}, "t"), step("one", {"A": "t"}, "Y")],
        True,
    ),
    "two_branches_of_one_decoupled_step": (
        ["Y"],
        [
            step("dec", {"A": "N"}, "t"),
            step("one", {"A": "t"}, "u"),
            step("two", {"A": "t", "B": "u"}, "Y"),
        ],
        True,
    ),
    "decoupled_and_request": (
        ["Y"],
        [step("dec", {"A": "N"}, "t"), step("two", {"A": "t", "B": "N"}, "Y")],
        refusal("ens"),
    ),
    "two_decoupled_steps": (
        ["Y"],
        [
            step("dec", {"A": "N"}, "t"),
            step("dec2", {"A": "N"}, "u"),
            step("two", {"A": "t", "B": "u"}, "Y"),
        ],
        refusal("ens"),
    ),
    "intermediate_tensor_named_by_its_first_step": (
        ["Y"],
        [
            step("dec", {"A": "N"}, "t"),
            step("two", {"A": "t", "B": "N"}, "u"),
            step("one", {"A": "u"}, "Y"),
        ],
        refusal("two"),
    ),
    "outputs_from_a_decoupled_step_and_a_plain_one": (
        ["Y", "Z"],
        [step("dec", {"A": "N"}, "Y"), step("one", {"A": "N"}, "Z")],
        refusal("ens"),
    ),
    "decoupled_chain": (
        ["Y"],
        [step("dec", {"A": "N"}, "t"), step("dec2", {"A": "t"}, "Y")],
        True,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decoupled_data_flow(case: str) -> None:
    outputs, steps, outcome = CASES[case]
    cfg = ensemble(outputs, steps)
    if isinstance(outcome, str):
        with pytest.raises(TritonliteError) as info:
            validate_composing(cfg, MODELS)
        assert info.value.message == outcome
    else:
        assert validate_composing(cfg, MODELS) is outcome

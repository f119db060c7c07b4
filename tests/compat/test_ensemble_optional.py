"""Ensembles with optional inputs, as Triton 2.51 runs them.

An optional ensemble input the request leaves out is "ready with no data": every step that reads
it runs without it (the composing model sees no such input), and so do later steps. A step's
optional input that no ensemble tensor feeds is never sent. A *required* ensemble input left out
(the request still has enough inputs by count) ends the request with Triton's "unexpected
deadlock". Each case runs over HTTP and gRPC on tritonlite and, where it is installed, on the
real Triton 2.51 serving the same repository; ``EXPECTED`` is what Triton answered.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from support.reference import ReferenceTriton, require_reference
from tritonclient.utils import InferenceServerException

OPT_ADD = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "B")
            s = a + (b.as_numpy() if b is not None else 100)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", s.astype(np.float32))]))
        return out
"""
"""``OUT = A + B``, or ``A + 100`` when the optional ``B`` is not sent."""


def _step(inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "opt_add" model_version: -1 {ins} {outs} }}'


ENSEMBLES = {  # name -> ((input, optional)..., steps)
    "ens_opt": ((("X", False), ("Y", True)), [_step({"A": "X", "B": "Y"}, {"OUT": "Z"})]),
    "ens_two": (
        (("X", False), ("Y", True)),
        [_step({"A": "X", "B": "Y"}, {"OUT": "T"}), _step({"A": "T", "B": "Y"}, {"OUT": "Z"})],
    ),
    "ens_unmapped": ((("X", False),), [_step({"A": "X"}, {"OUT": "Z"})]),
    "ens_all_optional": ((("X", True), ("Y", True)), [_step({"A": "X", "B": "Y"}, {"OUT": "Z"})]),
}


def write_repo(repo: Path) -> Path:
    (repo / "opt_add" / "1").mkdir(parents=True)
    (repo / "opt_add" / "1" / "model.py").write_text(textwrap.dedent(OPT_ADD))
    (repo / "opt_add" / "config.pbtxt").write_text(
        textwrap.dedent("""\
        backend: "python"
        max_batch_size: 8
        input [{ name: "A" data_type: TYPE_FP32 dims: [4] },
               { name: "B" data_type: TYPE_FP32 dims: [4] optional: true }]
        output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
        """)
    )
    for name, (inputs, steps) in ENSEMBLES.items():
        (repo / name / "1").mkdir(parents=True)
        ins = ", ".join(
            f'{{ name: "{n}" data_type: TYPE_FP32 dims: [4]{" optional: true" if opt else ""} }}'
            for n, opt in inputs
        )
        (repo / name / "config.pbtxt").write_text(
            f'platform: "ensemble"\nmax_batch_size: 8\ninput [{ins}]\n'
            'output [{ name: "Z" data_type: TYPE_FP32 dims: [4] }]\n'
            f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
        )
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("ensemble_optional_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def triton(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceTriton]:
    t = ReferenceTriton(
        require_reference(), repo, log=tmp_path_factory.mktemp("triton_log") / "triton.log"
    )
    yield t
    t.stop()


def outcome(
    http_url: str,
    grpc_url: str,
    protocol: str,
    model: str,
    given: dict[str, float],
    request_id: str = "",
) -> tuple[Any, ...]:
    """("ok", Z's first row) or ("error", message): the same on both protocols."""
    mod: Any = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(http_url if protocol == "http" else grpc_url)
    inputs = []
    for name, value in given.items():
        inp = mod.InferInput(name, [1, 4], "FP32")
        inp.set_data_from_numpy(np.full((1, 4), value, np.float32))
        inputs.append(inp)
    try:
        result = client.infer(model, inputs, request_id=request_id)
    except InferenceServerException as exc:
        code = exc.status() if protocol == "http" else str(exc.status()).split(".")[-1]
        return "error", code, exc.message()
    finally:
        client.close()
    return "ok", result.as_numpy("Z")[0].tolist()


DEADLOCK = (
    "in ensemble '{}', [request id: {}] unexpected deadlock, at least one output is not "
    "set while no more ensemble steps can be made"
)

# name -> (model, inputs given, request id, what Triton 2.51 answers: the error's HTTP status
# and gRPC code where it fails)
CASES: dict[str, tuple[str, dict[str, float], str, tuple[Any, ...]]] = {
    "optional_left_out": ("ens_opt", {"X": 1.0}, "", ("ok", [101.0] * 4)),
    "optional_given": ("ens_opt", {"X": 1.0, "Y": 2.0}, "", ("ok", [3.0] * 4)),
    "left_out_for_two_steps": ("ens_two", {"X": 1.0}, "", ("ok", [201.0] * 4)),
    "given_to_two_steps": ("ens_two", {"X": 1.0, "Y": 2.0}, "", ("ok", [5.0] * 4)),
    "step_input_not_mapped": ("ens_unmapped", {"X": 1.0}, "", ("ok", [101.0] * 4)),
    "only_the_optional_one": (
        "ens_opt",
        {"Y": 2.0},
        "",
        ("error", ("400", "INVALID_ARGUMENT"), DEADLOCK.format("ens_opt", "<id_unknown>")),
    ),
    "only_the_optional_one_with_id": (
        "ens_two",
        {"Y": 2.0},
        "e1",
        ("error", ("400", "INVALID_ARGUMENT"), DEADLOCK.format("ens_two", "e1")),
    ),
    "all_optional_one_given": ("ens_all_optional", {"X": 1.0}, "", ("ok", [101.0] * 4)),
    "all_optional_none_given": (
        "ens_all_optional",
        {},
        "",
        (
            "error",
            ("400", "INVALID_ARGUMENT"),
            "in ensemble 'ens_all_optional', [request id: <id_unknown>] expected number of inputs "
            "between 1 and 2 but got 0 inputs for model 'opt_add'. Got input(s) [], but missing "
            "required input(s) ['A']. Please provide all required input(s).",
        ),
    ),
}


def _expected(case: str, protocol: str) -> tuple[Any, ...]:
    want = CASES[case][3]
    if want[0] == "error":
        return "error", want[1][0 if protocol == "http" else 1], want[2]
    return want


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", list(CASES))
def test_ensemble_with_optional_inputs(server: Server, case: str, protocol: str) -> None:
    model, given, rid, _ = CASES[case]
    got = outcome(server.http_url, server.grpc_url, protocol, model, given, rid)
    assert got == _expected(case, protocol)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_required_step_input_left_out(server: Server, protocol: str) -> None:
    """Where Triton knowingly differs: ``ens_all_optional`` given only ``Y`` sends ``opt_add``
    just ``B``. Triton counts inputs only and runs the model without its required ``A`` (here
    it fails in model code, 500); tritonlite refuses the step as Triton words a count error."""
    got = outcome(server.http_url, server.grpc_url, protocol, "ens_all_optional", {"Y": 2.0})
    assert got == (
        "error",
        "400" if protocol == "http" else "INVALID_ARGUMENT",
        "in ensemble 'ens_all_optional', [request id: <id_unknown>] expected number "
        "of inputs between 1 and 2 but got 1 inputs for model 'opt_add'. Got input(s) "
        "['B'], but missing required input(s) ['A']. Please provide all required "
        "input(s).",
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_same_as_triton(triton: ReferenceTriton, protocol: str) -> None:
    for case, (model, given, rid, _) in CASES.items():
        got = outcome(triton.http_url, triton.grpc_url, protocol, model, given, rid)
        assert got == _expected(case, protocol), case

"""Model repositories the compatibility tests serve (real ONNX graphs, written to tmp dirs).

Also what several suites share: python models and ensemble configs to write, InferInputs for
add_sub, random tensors of every type, a client per protocol, and perf_analyzer runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.onnx_graphs import write_add_sub, write_identity, write_mlp  # noqa: E402

if TYPE_CHECKING:
    from conftest import Server

__all__ = [
    "DTYPES",
    "build_http_repo",
    "build_large_repo",
    "write_add_sub",
    "write_identity",
    "write_mlp",
    "GUARD_MODEL",
    "PY_FP32_CONFIG",
    "SCALE_MODEL",
    "add_sub_inputs",
    "client_for",
    "ensemble_step",
    "random_tensor",
    "run_perf_analyzer",
    "throughput",
    "write_ensemble",
    "write_python_model",
]

DTYPES = [
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FP16",
    "BF16",
    "FP32",
    "FP64",
]


def build_http_repo(repo: Path) -> Path:
    """add_sub (batching, dynamic batching), add_sub_nobatch, identities of every dtype."""
    write_add_sub(repo, "add_sub", 8, extra_config="dynamic_batching { }\n")
    write_add_sub(repo, "add_sub_nobatch", 0)
    write_add_sub(repo, "classifier", 1, dims=4, label_file=["dog", "cat", "bird", "fish"])
    for dtype in DTYPES:
        write_identity(repo, f"identity_{dtype.lower()}", dtype, [4], 8)
    write_identity(repo, "identity_string", "BYTES", [4], 8)
    write_identity(repo, "identity_variable", "FP32", [-1], 8)
    return repo


def build_large_repo(repo: Path, dtypes: list[str]) -> Path:
    """The large-message suites' models: ``id_<dtype>``, an identity of any 2-D shape without
    batching, for each of ``dtypes`` and BYTES, and ``add_sub_big``, add_sub of any length."""
    for dtype in [*dtypes, "BYTES"]:
        write_identity(repo, f"id_{dtype.lower()}", dtype, (-1, -1), 0)
    write_add_sub(repo, "add_sub_big", 0, dims=-1)
    return repo


# -- requests ----------------------------------------------------------------------------------
def add_sub_inputs(
    mod: Any, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], binary: bool = True
) -> list[Any]:
    """``INPUT0`` = ``a``, ``INPUT1`` = ``b`` (FP32) as InferInputs of ``mod``.

    ``mod`` is ``tritonclient.http`` or ``tritonclient.grpc``; ``binary`` is HTTP's
    ``binary_data`` (gRPC tensors are always raw).
    """
    kw = {"binary_data": binary} if mod is httpclient else {}
    inputs = []
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        inp = mod.InferInput(name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x, **kw)
        inputs.append(inp)
    return inputs


def random_tensor(dtype: str, shape: tuple[int, ...], seed: int = 3) -> np.ndarray[Any, Any]:
    """Random values of wire ``dtype`` spanning its range (floats in [0, 100)), reproducible."""
    np_dtype = triton_to_np_dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == "BOOL":
        return rng.random(shape) > 0.5
    if dtype == "BF16" or np.dtype(np_dtype).kind == "f":
        return (rng.random(shape) * 100).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=np_dtype, endpoint=True)


def client_for(server: Server, protocol: str) -> tuple[Any, Any]:
    """A new client of ``protocol`` ("http" or "grpc") for ``server``, and its module."""
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url), httpclient
    return grpcclient.InferenceServerClient(server.grpc_url), grpcclient


# -- perf_analyzer -----------------------------------------------------------------------------
PA_WINDOW_MS = 300


def run_perf_analyzer(
    binary: str,
    model: str,
    url: str,
    protocol: str,
    *args: str,
    stability: int = 500,
    max_trials: int = 10,
    timeout: float = 150,
) -> str:
    """Run perf_analyzer on ``model`` at ``url`` with short windows and ``args``; its output.

    The windows are 300 ms (perf_analyzer's minimum of three takes about 1 s in all, against
    3.7 s with 1 s windows, while both cores are busy): enough requests to see each mode work.

    ``stability`` is ``--stability-percentage``, wide by default: perf_analyzer shares the CPU
    with the server, and these tests check that it runs, not how steady the machine is. Its
    stability test compares the fastest and slowest of the last windows, so one window in which
    the whole machine paused fails it at any percentage: when it found no stable measurement it
    runs once more (never on any other failure). Asserts that it exited 0.
    """
    cmd = [
        binary,
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "--measurement-interval",
        str(PA_WINDOW_MS),
        "--stability-percentage",
        str(stability),
        "--max-trials",
        str(max_trials),
        *args,
    ]
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        if proc.returncode == 0 or "stable measurement" not in out:
            break
    assert proc.returncode == 0, out
    return out


def throughput(out: str) -> float:
    """The last ``throughput: N infer/sec`` perf_analyzer printed."""
    found = re.findall(r"throughput: ([0-9.]+) infer/sec", out)
    assert found, out
    return float(found[-1])


def refused_at_start(repo: Path, *args: str) -> str:
    """Start ``python -m tritonlite --model-repository repo *args``; assert that it exits
    non-zero, and return what it printed on stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "tritonlite", "--model-repository", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr


# -- python models and ensembles ---------------------------------------------------------------
SCALE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", (2 * x).astype(np.float32))]))
        return out
"""
"""Python model: ``OUT`` = 2 * ``IN``."""

GUARD_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if (x < 0).any():
                out.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative input is not allowed")))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""
"""Python model: ``OUT`` = ``IN``; a request with a negative element fails."""

PY_FP32_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
"""The config of ``SCALE_MODEL`` and ``GUARD_MODEL``: IN -> OUT, FP32 [4], batching to 8."""


def write_python_model(repo: Path, name: str, code: str, config: str) -> None:
    """``repo/name`` with ``code`` (dedented) as version 1's model.py and ``config``."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
    (repo / name / "config.pbtxt").write_text(config)


def ensemble_step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """One ``ensemble_scheduling`` step; the maps take model tensor -> ensemble tensor."""
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {ins} {outs} }}'


def write_ensemble(
    repo: Path,
    name: str,
    outputs: list[str],
    steps: list[str],
    max_batch_size: int = 8,
    dims: str = "[4]",
    extra: str = "",
) -> None:
    """An ensemble of ``steps`` with FP32 input ``X`` and FP32 ``outputs``, all of ``dims``.

    ``extra`` is appended to the config (``response_cache { enable: true }``, ...).
    """
    (repo / name / "1").mkdir(parents=True)
    outs = ", ".join(f'{{ name: "{o}" data_type: TYPE_FP32 dims: {dims} }}' for o in outputs)
    (repo / name / "config.pbtxt").write_text(
        textwrap.dedent(f"""\
        platform: "ensemble"
        max_batch_size: {max_batch_size}
        input [{{ name: "X" data_type: TYPE_FP32 dims: {dims} }}]
        output [{outs}]
        ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
        """)
        + extra
    )

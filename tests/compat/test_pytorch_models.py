"""TorchScript models (``pytorch_libtorch``) behind a real server, seen by tritonclient and
perf_analyzer.

The fixture scripts small ``torch.nn.Module``s and saves them as ``model.pt`` with configs the
way Triton users write them, one per naming convention and data-type family, plus models that
must fail cleanly (wrong output type, missing output index, wrong argument count, KIND_GPU on a
machine without CUDA).
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the pytorch backend tests need torch installed")

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as aioclient  # noqa: E402
from conftest import start_server  # noqa: E402
from repos import run_perf_analyzer, throughput  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.timeout(180)


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Sub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - y


class DictSub(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] - inputs["b"]


class Upper(torch.nn.Module):
    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() for w in words]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class ToDouble(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double()


class MatVec(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def _io(kind: str, name: str, dtype: str, dims: str) -> str:
    return f'{kind} {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}\n'


def _model(repo: Path, name: str, module: type[torch.nn.Module], config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; Triton still serves it
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(module()).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(f'platform: "pytorch_libtorch"\n{config}')


DTYPES = {
    "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32,
    "TYPE_FP16": np.float16,
    "TYPE_FP64": np.float64,
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("pt_repo")
    _model(
        repo,
        "add_sub_pt",
        AddSub,
        "max_batch_size: 8\ndynamic_batching { }\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "4")
        + _io("input", "INPUT__1", "TYPE_FP32", "4")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "4")
        + _io("output", "OUTPUT__1", "TYPE_FP32", "4")
        + "instance_group [ { count: 2 kind: KIND_CPU } ]\n",
    )
    # forward(x, y): config lists y first; inputs are matched by argument name
    _model(
        repo,
        "by_name",
        Sub,
        "max_batch_size: 0\n"
        + _io("input", "y", "TYPE_FP32", "3")
        + _io("input", "x", "TYPE_FP32", "3")
        + _io("output", "z", "TYPE_FP32", "3"),
    )
    # names that are neither arguments nor <name>__<index>: config order
    _model(
        repo,
        "by_order",
        Sub,
        "max_batch_size: 0\n"
        + _io("input", "FIRST", "TYPE_FP32", "3")
        + _io("input", "SECOND", "TYPE_FP32", "3")
        + _io("output", "OUT", "TYPE_FP32", "3"),
    )
    _model(
        repo,
        "dict_in",
        DictSub,
        "max_batch_size: 0\n"
        + _io("input", "b", "TYPE_FP32", "2")
        + _io("input", "a", "TYPE_FP32", "2")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "2"),
    )
    _model(
        repo,
        "upper",
        Upper,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_STRING", "-1")
        + _io("output", "OUTPUT__0", "TYPE_STRING", "-1"),
    )
    for dtype in [*DTYPES, "TYPE_BF16"]:
        _model(
            repo,
            f"identity_{dtype[5:].lower()}",
            Identity,
            "max_batch_size: 4\n"
            + _io("input", "INPUT__0", dtype, "-1")
            + _io("output", "OUTPUT__0", dtype, "-1"),
        )
    _model(
        repo,
        "matvec",
        MatVec,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "-1, -1")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "-1, 3"),
    )
    # must fail per request
    _model(
        repo,
        "wrong_type",
        ToDouble,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "2")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "2"),
    )
    _model(
        repo,
        "missing_index",
        Identity,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "2")
        + _io("output", "OUTPUT__1", "TYPE_FP32", "2"),
    )
    # must fail to load, leaving the rest serving
    _model(
        repo,
        "too_few_inputs",
        AddSub,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "2")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "2"),
    )
    _model(
        repo,
        "bad_dtype",
        Identity,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_UINT32", "2")
        + _io("output", "OUTPUT__0", "TYPE_UINT32", "2"),
    )
    _model(
        repo,
        "ragged_pt",
        Identity,
        "max_batch_size: 4\n"
        + 'input { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }\n'
        + _io("output", "OUTPUT__0", "TYPE_FP32", "-1"),
    )
    _model(
        repo,
        "gpu_kind",
        Identity,
        "max_batch_size: 0\n"
        + _io("input", "INPUT__0", "TYPE_FP32", "2")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "2")
        + "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n",
    )
    # a torch.export program with a dynamic batch dimension
    (repo / "exported" / "1").mkdir(parents=True)
    x = torch.ones(2, 4)
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(AddSub(), (x, x.clone()), dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(program, str(repo / "exported" / "1" / "model.pt2"))
    (repo / "exported" / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\ndefault_model_filename: "model.pt2"\nmax_batch_size: 8\n'
        "dynamic_batching { }\n"
        + _io("input", "a", "TYPE_FP32", "4")
        + _io("input", "b", "TYPE_FP32", "4")
        + _io("output", "OUTPUT__0", "TYPE_FP32", "4")
        + _io("output", "OUTPUT__1", "TYPE_FP32", "4")
    )
    s = start_server(repo, "--exit-on-error=false")
    yield s
    s.stop()


def http(server: Any) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _infer(client: Any, mod: Any, model: str, arrays: dict[str, np.ndarray], dtype: str) -> Any:
    inputs = []
    for name, arr in arrays.items():
        inp = mod.InferInput(name, list(arr.shape), dtype)
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    return client.infer(model, inputs)


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_add_sub_named_index(server: Any, mod: Any) -> None:
    client = mod.InferenceServerClient(server.http_url if mod is httpclient else server.grpc_url)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 2.0, dtype=np.float32)
    res = _infer(client, mod, "add_sub_pt", {"INPUT__0": a, "INPUT__1": b}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - b)


def test_torch_export_program(server: Any) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, dtype=np.float32)
    res = _infer(http(server), httpclient, "exported", {"b": b, "a": a}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - b)


def test_config_and_metadata(server: Any) -> None:
    cfg = http(server).get_model_config("add_sub_pt")
    assert cfg["platform"] == "pytorch_libtorch" and cfg["backend"] == "pytorch"
    assert cfg["default_model_filename"] == "model.pt"
    meta = http(server).get_model_metadata("add_sub_pt")
    assert meta["platform"] == "pytorch_libtorch"
    assert [i["name"] for i in meta["inputs"]] == ["INPUT__0", "INPUT__1"]


def test_inputs_by_forward_argument_name(server: Any) -> None:
    x = np.array([10, 20, 30], dtype=np.float32)
    y = np.array([1, 2, 3], dtype=np.float32)
    res = _infer(http(server), httpclient, "by_name", {"y": y, "x": x}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("z"), x - y)


def test_inputs_by_config_order(server: Any) -> None:
    first = np.array([10, 20, 30], dtype=np.float32)
    second = np.array([1, 2, 3], dtype=np.float32)
    res = _infer(http(server), httpclient, "by_order", {"SECOND": second, "FIRST": first}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("OUT"), first - second)


def test_dict_input(server: Any) -> None:
    a = np.array([5, 7], dtype=np.float32)
    b = np.array([1, 1], dtype=np.float32)
    res = _infer(http(server), httpclient, "dict_in", {"a": a, "b": b}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a - b)


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_strings_as_list_of_str(server: Any, mod: Any) -> None:
    client = mod.InferenceServerClient(server.http_url if mod is httpclient else server.grpc_url)
    words = np.array([b"hello", "w\u00f6rld".encode(), b""], dtype=object)
    res = _infer(client, mod, "upper", {"INPUT__0": words}, "BYTES")
    # TorchScript's upper() is ASCII-only
    assert res.as_numpy("OUTPUT__0").tolist() == [b"HELLO", "W\u00f6RLD".encode(), b""]


@pytest.mark.parametrize("dtype", [*DTYPES, "TYPE_BF16"])
def test_identity_every_dtype(server: Any, dtype: str) -> None:
    wire = dtype[5:]
    if dtype == "TYPE_BF16":
        import ml_dtypes

        arr = np.array([[1.5, -2.0, 3.25]], dtype=ml_dtypes.bfloat16)
    elif dtype == "TYPE_BOOL":
        arr = np.array([[True, False, True]])
    else:
        arr = np.arange(6, dtype=DTYPES[dtype]).reshape(2, 3)
    wire = {"BOOL": "BOOL", "FP16": "FP16", "FP64": "FP64", "BF16": "BF16"}.get(wire, wire)
    res = _infer(http(server), httpclient, f"identity_{dtype[5:].lower()}", {"INPUT__0": arr}, wire)
    out = res.as_numpy("OUTPUT__0")
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(
        out.astype(np.float64) if dtype == "TYPE_BF16" else out,
        arr.astype(np.float64) if dtype == "TYPE_BF16" else arr,
    )


def test_dynamic_batching_splits_outputs_per_request(server: Any) -> None:
    async def run() -> None:
        async with aioclient.InferenceServerClient(server.http_url) as client:

            async def one(i: int) -> None:
                a = np.full((1, 4), float(i), dtype=np.float32)
                b = np.ones((1, 4), dtype=np.float32)
                inputs = []
                for name, arr in (("INPUT__0", a), ("INPUT__1", b)):
                    inp = aioclient.InferInput(name, [1, 4], "FP32")
                    inp.set_data_from_numpy(arr)
                    inputs.append(inp)
                res = await client.infer("add_sub_pt", inputs)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + 1)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - 1)

            await asyncio.gather(*(one(i) for i in range(32)))

    asyncio.run(run())
    stats = http(server).get_inference_statistics("add_sub_pt")["model_stats"][0]
    assert stats["inference_count"] >= 32
    assert stats["execution_count"] <= stats["inference_count"]


def test_runtime_error_fails_request_and_server_keeps_serving(server: Any) -> None:
    bad = np.ones((2, 5), dtype=np.float32)  # 5 columns against a 4 x 3 weight: matmul fails
    with pytest.raises(InferenceServerException) as e:
        _infer(http(server), httpclient, "matvec", {"INPUT__0": bad}, "FP32")
    assert "PyTorch execute failure" in str(e.value)
    good = np.ones((2, 4), dtype=np.float32)
    res = _infer(http(server), httpclient, "matvec", {"INPUT__0": good}, "FP32")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), np.full((2, 3), 4.0, np.float32))


def test_output_type_mismatch_message(server: Any) -> None:
    with pytest.raises(InferenceServerException) as e:
        _infer(http(server), httpclient, "wrong_type", {"INPUT__0": np.ones(2, np.float32)}, "FP32")
    assert (
        "configuration expects datatype TYPE_FP32 for output 'OUTPUT__0', model provides TYPE_FP64"
    ) in str(e.value)
    assert e.value.status() == "400"


def test_missing_output_index_message(server: Any) -> None:
    with pytest.raises(InferenceServerException) as e:
        _infer(
            http(server), httpclient, "missing_index", {"INPUT__0": np.ones(2, np.float32)}, "FP32"
        )
    assert (
        "The output OUTPUT__1 in the model configuration refers to an output index which "
        "doesn't exist. This model has 1 outputs"
    ) in str(e.value)


def test_models_that_fail_to_load_leave_the_rest_ready(server: Any) -> None:
    index = {m["name"]: m for m in http(server).get_model_repository_index()}
    reason = index["too_few_inputs"]["reason"]
    assert index["too_few_inputs"]["state"] == "UNAVAILABLE"
    assert "configuration expects 1 inputs, model provides 2" in reason
    assert "unsupported datatype TYPE_UINT32 for input 'INPUT__0'" in index["bad_dtype"]["reason"]
    assert index["ragged_pt"]["state"] == "UNAVAILABLE"
    assert (
        "ragged batching (allow_ragged_batch on 'INPUT__0') is not supported by tritonlite's "
        "pytorch backend" in index["ragged_pt"]["reason"]
    )
    if not torch.cuda.is_available():
        assert "specifies invalid or unsupported gpu id 0" in index["gpu_kind"]["reason"]
    assert http(server).is_model_ready("add_sub_pt")


def test_perf_analyzer_against_torchscript_model(perf_analyzer: str, server: Any) -> None:
    out = run_perf_analyzer(
        perf_analyzer,
        "add_sub_pt",
        server.grpc_url,
        "grpc",
        "--concurrency-range",
        "4",
        max_trials=4,
    )
    assert throughput(out) > 0, out

"""Serving on a CUDA device: ONNX Runtime's CUDA provider, TorchScript on cuda, a TensorRT plan,
and CUDA shared memory with tritonclient's own helpers. Every test is marked ``gpu`` and skips
with "no CUDA device" elsewhere; each also skips when its package (onnxruntime-gpu, a CUDA torch,
tensorrt, cuda-python) is missing, naming it.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from conftest import start_server  # noqa: E402
from repos import write_add_sub  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]
GPU_GROUP = "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n"


def _needs(module: str, why: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{why}: the '{module}' package is not installed")


def _add_sub_inputs(n: int, dims: int = 16) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.random.default_rng(0).standard_normal((n, dims)).astype(np.float32)
    b = np.ones((n, dims), np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [n, dims], "FP32"),
        httpclient.InferInput("INPUT1", [n, dims], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def test_onnxruntime_cuda_provider(tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    write_add_sub(tmp_path, "add_sub", 8, extra_config=GPU_GROUP + "dynamic_batching { }\n")
    server = start_server(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        cfg = client.get_model_config("add_sub")
        assert cfg["instance_group"][0]["kind"] == "KIND_GPU"
        inputs, a, b = _add_sub_inputs(4)
        res = client.infer("add_sub", inputs)
        np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    finally:
        server.stop()


def test_torchscript_on_cuda(tmp_path: Path) -> None:
    _needs("torch", "TorchScript on cuda")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("torch is not a CUDA build")

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    (tmp_path / "pt" / "1").mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(AddSub()).save(str(tmp_path / "pt" / "1" / "model.pt"))
    (tmp_path / "pt" / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\ndynamic_batching { }\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n' + GPU_GROUP
    )
    server = start_server(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        inputs, a, b = _add_sub_inputs(3)
        res = client.infer("pt", inputs)
        np.testing.assert_allclose(res.as_numpy("OUTPUT__0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(res.as_numpy("OUTPUT__1"), a - b, rtol=1e-6)
    finally:
        server.stop()


def _build_plan(onnx_path: Path, plan_path: Path) -> None:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), [
        str(parser.get_error(i)) for i in range(parser.num_errors)
    ]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        name = network.get_input(i).name
        profile.set_shape(name, (1, 16), (4, 16), (8, 16))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None
    plan_path.write_bytes(bytes(plan))


def test_tensorrt_plan(tmp_path: Path) -> None:
    _needs("tensorrt", "TensorRT plans")
    _needs("torch", "the tensorrt backend's CUDA streams")
    src = tmp_path / "src"
    write_add_sub(src, "add_sub", 8)
    (tmp_path / "repo" / "plan" / "1").mkdir(parents=True)
    _build_plan(
        src / "add_sub" / "1" / "model.onnx", tmp_path / "repo" / "plan" / "1" / "model.plan"
    )
    config = (src / "add_sub" / "config.pbtxt").read_text()
    config = "\n".join(
        line
        for line in config.splitlines()
        if not line.startswith(("name:", "platform:", "backend:"))
    )
    (tmp_path / "repo" / "plan" / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\n' + config + "\ndynamic_batching { }\n"
    )
    server = start_server(tmp_path / "repo")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for n in (1, 5, 8):
            inputs, a, b = _add_sub_inputs(n)
            res = client.infer("plan", inputs)
            np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-5)
            np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-5)
    finally:
        server.stop()


def test_cuda_shared_memory_round_trip(tmp_path: Path) -> None:
    _needs("cuda", "tritonclient's CUDA shared memory helpers (cuda-python)")
    import tritonclient.utils.cuda_shared_memory as cudashm

    write_add_sub(tmp_path, "add_sub", 8)
    server = start_server(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    regions = []
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), np.float32)
        nbytes = a.nbytes
        ins = cudashm.create_shared_memory_region("in", 2 * nbytes, 0)
        outs = cudashm.create_shared_memory_region("out", 2 * nbytes, 0)
        regions = [ins, outs]
        cudashm.set_shared_memory_region(ins, [a, b])
        client.register_cuda_shared_memory("in", cudashm.get_raw_handle(ins), 0, 2 * nbytes)
        client.register_cuda_shared_memory("out", cudashm.get_raw_handle(outs), 0, 2 * nbytes)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_shared_memory("in", nbytes)
        inputs[1].set_shared_memory("in", nbytes, offset=nbytes)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0"),
            httpclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[0].set_shared_memory("out", nbytes)
        outputs[1].set_shared_memory("out", nbytes, offset=nbytes)
        client.infer("add_sub", inputs, outputs=outputs)
        got0 = cudashm.get_contents_as_numpy(outs, np.float32, [1, 16])
        np.testing.assert_array_equal(got0, a + b)
        status = client.get_cuda_shared_memory_status()
        assert {r["name"] for r in status} == {"in", "out"}
        client.unregister_cuda_shared_memory()
        assert client.get_cuda_shared_memory_status() == []
    finally:
        for r in regions:
            cudashm.destroy_shared_memory_region(r)
        server.stop()

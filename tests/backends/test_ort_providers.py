"""Execution providers per instance kind and accelerator config (no GPU needed)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from tritonlite._proto import pb
from tritonlite.backends.ort_providers import CPU, CUDA, TENSORRT, providers_for
from tritonlite.contracts.errors import ErrorCode, TritonliteError

ALL = [TENSORRT, CUDA, CPU]


def cfg(text: str = "") -> pb.ModelConfig:
    return text_format.Parse('name: "m"\n' + text, pb.ModelConfig())


TRT = """optimization { execution_accelerators { gpu_execution_accelerator: [ {
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
  parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  parameters { key: "trt_engine_cache_enable" value: "1" } } ] } }"""


def test_cpu_instances_use_the_cpu_provider_even_with_gpu_accelerators() -> None:
    assert providers_for(cfg(TRT), "CPU", 0, ALL) == [(CPU, {})]
    assert providers_for(cfg(), "MODEL", 0, [CPU]) == [(CPU, {})]


def test_gpu_instance_gets_cuda_on_its_device() -> None:
    assert providers_for(cfg(), "GPU", 1, ALL) == [(CUDA, {"device_id": "1"}), (CPU, {})]


def test_tensorrt_accelerator_options() -> None:
    got = providers_for(cfg(TRT), "GPU", 0, ALL)
    assert got[0] == (
        TENSORRT,
        {
            "device_id": "0",
            "trt_fp16_enable": "True",
            "trt_max_workspace_size": "1073741824",
            "trt_engine_cache_enable": "1",
        },
    )
    assert [p for p, _ in got] == [TENSORRT, CUDA, CPU]


def test_cuda_accelerator_passes_options() -> None:
    text = (
        'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "cuda" '
        'parameters { key: "cudnn_conv_algo_search" value: "HEURISTIC" } } ] } }'
    )
    assert providers_for(cfg(text), "GPU", 0, ALL)[0] == (
        CUDA,
        {"device_id": "0", "cudnn_conv_algo_search": "HEURISTIC"},
    )


@pytest.mark.parametrize(
    "text, available, code, message",
    [
        ("", [CPU], ErrorCode.UNAVAILABLE, "no CUDA execution provider"),
        (TRT, [CUDA, CPU], ErrorCode.UNAVAILABLE, "no TensorRT execution provider"),
        (
            TRT.replace("FP16", "FP8"),
            ALL,
            ErrorCode.INVALID_ARG,
            "unsupported precision mode 'FP8'",
        ),
        (
            TRT.replace("trt_engine_cache_enable", "bogus"),
            ALL,
            ErrorCode.INVALID_ARG,
            "unknown parameter 'bogus' is provided for TensorRT Execution Accelerator",
        ),
        (
            TRT.replace('"tensorrt"', '"magic"'),
            ALL,
            ErrorCode.INVALID_ARG,
            "unknown Execution Accelerator 'magic' is requested",
        ),
    ],
)
def test_refusals(text: str, available: list[str], code: ErrorCode, message: str) -> None:
    with pytest.raises(TritonliteError) as e:
        providers_for(cfg(text), "GPU", 0, available)
    assert e.value.code == code and message in e.value.message


def test_cpu_accelerators_are_refused() -> None:
    text = (
        "optimization { execution_accelerators { "
        'cpu_execution_accelerator: [ { name: "openvino" } ] } }'
    )
    with pytest.raises(TritonliteError, match="'openvino' of model 'm' is not supported"):
        providers_for(cfg(text), "CPU", 0, ALL)

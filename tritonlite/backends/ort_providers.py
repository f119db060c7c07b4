"""ONNX Runtime execution providers for one instance, from its kind and the config's accelerators.

Triton's rules for ``onnxruntime_onnx``: a KIND_GPU instance runs on the CUDA execution provider
of its device; ``optimization { execution_accelerators { gpu_execution_accelerator: [{ name:
"tensorrt" ... }] } }`` puts the TensorRT provider in front of it, with ``precision_mode``
(FP32/FP16/INT8), ``max_workspace_size_bytes`` and ORT's own ``trt_*`` options; ``name: "cuda"``
passes CUDA provider options. KIND_CPU instances ignore GPU accelerators (as Triton does); CPU
accelerators (``openvino``) are refused here. Pure logic over the available provider names, so
it is tested without a GPU.
"""

from __future__ import annotations

from typing import Any

from tritonlite.contracts.errors import invalid_arg, unavailable

CPU, CUDA, TENSORRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
Provider = tuple[str, dict[str, str]]


def _tensorrt_options(params: Any, device_id: int) -> dict[str, str]:
    options = {"device_id": str(device_id)}
    for key, value in params.items():
        if key == "precision_mode":
            mode = value.upper()
            if mode not in ("FP32", "FP16", "INT8"):
                raise invalid_arg(f"unsupported precision mode '{value}' is requested")
            if mode in ("FP16", "INT8"):
                options["trt_fp16_enable"] = "True"
            if mode == "INT8":
                options["trt_int8_enable"] = "True"
        elif key == "max_workspace_size_bytes":
            if not value.isdigit():
                raise invalid_arg(f"failed to parse '{key}' value '{value}' as an integer")
            options["trt_max_workspace_size"] = value
        elif key.startswith("trt_"):
            options[key] = value
        else:
            raise invalid_arg(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
    return options


def providers_for(cfg: Any, kind: str, device_id: int, available: list[str]) -> list[Provider]:
    """The ``providers`` list for ``InferenceSession`` (with options), best first.

    Raises UNAVAILABLE when the instance needs a provider this onnxruntime build lacks, and
    INVALID_ARG for accelerator settings Triton rejects.
    """
    accel = cfg.optimization.execution_accelerators
    for a in accel.cpu_execution_accelerator:
        raise unavailable(
            f"CPU execution accelerator '{a.name}' of model '{cfg.name}' is not "
            "supported by this server"
        )
    if kind != "GPU":
        return [(CPU, {})]
    if CUDA not in available:
        raise unavailable(
            f"model '{cfg.name}' has a KIND_GPU instance, but this onnxruntime "
            "build has no CUDA execution provider (install onnxruntime-gpu)"
        )
    providers: list[Provider] = []
    cuda_options = {"device_id": str(device_id)}
    for a in accel.gpu_execution_accelerator:
        if a.name == "tensorrt":
            if TENSORRT not in available:
                raise unavailable(
                    f"model '{cfg.name}' asks for the TensorRT execution "
                    "accelerator, but this onnxruntime build has no TensorRT "
                    "execution provider"
                )
            providers.append((TENSORRT, _tensorrt_options(a.parameters, device_id)))
        elif a.name == "cuda":
            cuda_options.update(dict(a.parameters.items()))
        else:
            raise invalid_arg(f"unknown Execution Accelerator '{a.name}' is requested")
    providers.append((CUDA, cuda_options))
    providers.append((CPU, {}))
    return providers

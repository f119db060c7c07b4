"""How many GPUs each backend can use here: what KIND_AUTO and KIND_GPU groups resolve against.

A GPU counts for a backend only when that backend can drive it: ONNX Runtime needs its CUDA
execution provider (the ``onnxruntime-gpu`` build), PyTorch a CUDA build of torch, TensorRT its
Python package; a Python model may use any device the CUDA runtime sees. Without a CUDA runtime
or device every count is 0, so KIND_AUTO becomes KIND_CPU and KIND_GPU fails to load with
Triton's message. Counts are computed once per backend.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util

from tritonlite.gpu import cudart


def _torch_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _driver_count() -> int:
    """Devices the CUDA driver (``libcuda``) sees, through ``cuInit`` / ``cuDeviceGetCount``.

    This is what every CUDA build (torch's too) stands on, so where there is no driver or it
    finds no device, nothing else can use a GPU either; asking it costs a library load instead
    of importing torch (seconds of CPU at every start of a CPU-only server)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


@functools.cache
def visible_gpus() -> int:
    """CUDA devices visible to this process (0 without a driver, a runtime or a device)."""
    count = cudart.device_count()
    if count:
        return count
    return _torch_count() if _driver_count() else 0


@functools.cache
def usable_gpus(backend: str) -> int:
    """GPUs ``backend`` (a config's backend name) can run model instances on."""
    count = visible_gpus()
    if count == 0:
        return 0
    if backend == "onnxruntime":
        import onnxruntime as ort

        return count if "CUDAExecutionProvider" in ort.get_available_providers() else 0
    if backend == "pytorch":
        return _torch_count()
    if backend == "tensorrt":
        return count if importlib.util.find_spec("tensorrt") is not None else 0
    if backend == "python":
        return count
    return 0

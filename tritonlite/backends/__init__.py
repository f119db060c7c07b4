"""Backends by Triton name. Each is imported only when a model needs it."""

from __future__ import annotations

from tritonlite.backends.base import Backend, ModelContext
from tritonlite.contracts.errors import unavailable


def create_backend(ctx: ModelContext) -> Backend:
    """The backend for ``ctx.config.backend`` (or platform), ready to make instances."""
    name = ctx.config.backend or ctx.config.platform
    if name in ("onnxruntime", "onnxruntime_onnx"):
        from tritonlite.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(ctx)
    if name in ("pytorch", "pytorch_libtorch"):
        from tritonlite.backends.pytorch import PyTorchBackend

        return PyTorchBackend(ctx)
    if name in ("tensorrt", "tensorrt_plan"):
        from tritonlite.backends.tensorrt import TensorRTBackend

        return TensorRTBackend(ctx)
    if name == "python":
        from tritonlite.backends.python import PythonBackend

        return PythonBackend(ctx)
    raise unavailable(
        f"backend '{name}' for model '{ctx.name}' is not supported by this server"
    )

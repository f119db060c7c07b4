"""Backends by Triton name, in two registries (dicts, not if-chains).

``BACKENDS``: backend or platform name -> a factory of the backend from the model's context;
the backend's module is imported only when a model needs it. ``AUTO_COMPLETERS``: backend
name -> its config auto-complete (Triton's ``TRITONBACKEND_ModelAutoCompleteConfig``), handed
to ``contracts.config.load_model_config`` by the repository. A new backend adds one entry to
each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonlite.backends.base import Backend, ModelContext
from tritonlite.contracts.config import AutoCompleteError, AutoCompleter
from tritonlite.contracts.errors import ErrorCode, TritonliteError, unavailable


def _onnxruntime(ctx: ModelContext) -> Backend:
    from tritonlite.backends.onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend(ctx)


def _pytorch(ctx: ModelContext) -> Backend:
    from tritonlite.backends.pytorch import PyTorchBackend

    return PyTorchBackend(ctx)


def _tensorrt(ctx: ModelContext) -> Backend:
    from tritonlite.backends.tensorrt import TensorRTBackend

    return TensorRTBackend(ctx)


def _python(ctx: ModelContext) -> Backend:
    from tritonlite.backends.python.backend import PythonBackend

    return PythonBackend(ctx)


BACKENDS: dict[str, Callable[[ModelContext], Backend]] = {
    "onnxruntime": _onnxruntime,
    "onnxruntime_onnx": _onnxruntime,
    "pytorch": _pytorch,
    "pytorch_libtorch": _pytorch,
    "tensorrt": _tensorrt,
    "tensorrt_plan": _tensorrt,
    "python": _python,
}


def _onnx_auto_complete(cfg: Any, model_dir: Path, default_max_batch_size: int) -> None:
    from tritonlite.backends.onnx_io import auto_complete

    auto_complete(cfg, model_dir, default_max_batch_size)


def _python_auto_complete(cfg: Any, model_dir: Path, default_max_batch_size: int) -> None:
    from tritonlite.backends.python.autocomplete import auto_complete

    try:
        auto_complete(cfg, model_dir)
    except TritonliteError as exc:  # the model's own code failed: Triton's INTERNAL
        raise AutoCompleteError(ErrorCode.INTERNAL, exc.message) from None


AUTO_COMPLETERS: dict[str, AutoCompleter] = {
    "onnxruntime": _onnx_auto_complete,
    "python": _python_auto_complete,
}


def create_backend(ctx: ModelContext) -> Backend:
    """The backend for ``ctx.config.backend`` (or platform), ready to make instances."""
    name = ctx.config.backend or ctx.config.platform
    factory = BACKENDS.get(name)
    if factory is None:
        raise unavailable(
            f"backend '{name}' for model '{ctx.name}' is not supported by this server"
        )
    return factory(ctx)

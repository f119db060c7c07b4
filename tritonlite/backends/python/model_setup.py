"""What both Python backends do alike around a model, whether it runs in this process
(``backend.py``) or in its own ``EXECUTION_ENV_PATH`` worker (``env.py``): find its model file,
build the ``args`` its ``initialize`` gets, and stand for a decoupled request's result.
"""

from __future__ import annotations

from pathlib import Path

from tritonlite.backends.base import InstanceSpec, ModelContext, ModelOutputs
from tritonlite.contracts.errors import unavailable

# What execute "returns" for a request of a decoupled model: it ran; its responses are streamed.
STREAMED = ModelOutputs(partial=True)


def model_file(ctx: ModelContext) -> Path:
    """The model's ``model.py`` (or ``default_model_filename``); UNAVAILABLE when missing."""
    path = ctx.version_dir / (ctx.config.default_model_filename or "model.py")
    if not path.is_file():
        raise unavailable(f"Python model file not found in '{path}'")
    return path


def initialize_args(ctx: ModelContext, spec: InstanceSpec) -> dict[str, str]:
    """``initialize(args)``'s dict, Triton's keys and string values."""
    return {
        "model_config": ctx.config_json,
        "model_instance_kind": spec.kind,
        "model_instance_name": spec.name,
        "model_instance_device_id": str(spec.device_id),
        "model_repository": str(ctx.model_dir),
        "model_version": str(ctx.version),
        "model_name": ctx.name,
    }

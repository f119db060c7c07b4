"""ONNX models for the tests: the builders of ``tools/onnx_graphs.py`` and the shared repository.

The public names of ``tools.onnx_graphs`` are re-exported here (``add_sub``, ``identity``,
``mlp``, ``failing``, ``config_for``, ``config_text``, ``write_model``, ``write_add_sub``...), so a
test imports one module: ``from onnx_models import identity, write_model, config_for``.

``build_onnx_repo`` writes the repository the session-wide ``onnx_repo`` fixture serves
(``ONNX_REPO_MODELS`` lists its models and what each one is).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.onnx_graphs import (  # noqa: E402
    ADD_SUB_DTYPES,
    FAILING_TABLE,
    IDENTITY_DTYPES,
    ONNX_TYPES,
    add_sub,
    config_dtype,
    config_for,
    config_text,
    failing,
    identity,
    mlp,
    mlp_reference,
    mlp_weights,
    model_files,
    model_tensors,
    wire_dtype,
    write_add_sub,
    write_identity,
    write_if_changed,
    write_mlp,
    write_model,
)

__all__ = [
    "ADD_SUB_DTYPES",
    "FAILING_TABLE",
    "IDENTITY_DTYPES",
    "MLP_SMALL",
    "NUMPY_TYPES",
    "ONNX_REPO_MODELS",
    "ONNX_TYPES",
    "add_sub",
    "build_onnx_repo",
    "config_dtype",
    "config_for",
    "config_text",
    "failing",
    "identity",
    "identity_name",
    "mlp",
    "mlp_reference",
    "mlp_weights",
    "model_files",
    "model_tensors",
    "sample",
    "wire_dtype",
    "write_add_sub",
    "write_identity",
    "write_if_changed",
    "write_mlp",
    "write_model",
]

# numpy dtype of each Triton data type as tritonclient sends it (BYTES: object arrays of bytes;
# BF16: ml_dtypes.bfloat16, which ONNX Runtime's Python API does not accept directly).
NUMPY_TYPES: dict[str, object] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
try:
    import ml_dtypes

    NUMPY_TYPES["BF16"] = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes comes with the [test] extra
    pass

#: The small MLP the shared repository serves (the bundled example is 4 x 1024).
MLP_SMALL = {"layers": 2, "width": 64, "seed": 0}


def identity_name(dtype: str) -> str:
    """Name of the shared repository's identity model for ``dtype``: ``identity_fp32``...;
    BYTES is ``identity_string``."""
    d = wire_dtype(dtype)
    return "identity_string" if d == "BYTES" else f"identity_{d.lower()}"


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A deterministic array of ``dtype`` (Triton name) and ``shape``, values within range."""
    d = wire_dtype(dtype)
    rng = np.random.default_rng(seed)
    if d == "BYTES":
        flat = [f"s{i}-{rng.integers(1000)}".encode() for i in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if d == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    np_type = np.dtype(NUMPY_TYPES[d])  # type: ignore[call-overload]
    if np_type.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(np_type)
    return (rng.standard_normal(shape) * 10).astype(np_type)


def _models() -> dict[str, tuple[onnx.ModelProto, str]]:
    """name -> (model, config.pbtxt) of the shared repository."""
    models: dict[str, tuple[onnx.ModelProto, str]] = {}

    def add(name: str, model: onnx.ModelProto, max_batch_size: int, **kw: object) -> None:
        models[name] = (model, config_for(model, max_batch_size=max_batch_size, name=name, **kw))

    add("add_sub", add_sub(), 8, dynamic_batching=True)
    add("add_sub_nobatch", add_sub(batch=False), 0)
    add("add_sub_int32", add_sub("INT32"), 8, dynamic_batching=True)
    for dtype in IDENTITY_DTYPES:
        add(identity_name(dtype), identity(dtype, (4,)), 8)
    add("identity_variable", identity("FP32", (-1,)), 8)
    add("identity_string_variable", identity("BYTES", (-1,)), 8)
    add("identity_nobatch", identity("FP32", (4,), batch=False), 0)
    add("mlp", mlp(batch=True, **MLP_SMALL), 16, max_queue_delay_us=100)
    add("mlp_nobatch", mlp(batch=False, **MLP_SMALL), 0)
    add("failing", failing(), 8, dynamic_batching=True)
    return models


#: The shared repository's models, for tests that iterate over them. Each is an ONNX model
#: with a config.pbtxt naming it and its platform (``onnxruntime_onnx``):
#:
#: * ``add_sub``: FP32[16] INPUT0, INPUT1 -> OUTPUT0 = a + b, OUTPUT1 = a - b; max_batch_size 8,
#:   ``dynamic_batching { }``.  ``add_sub_int32``: the same over INT32.
#: * ``add_sub_nobatch``: the same, max_batch_size 0 (shapes are exactly [16]).
#: * ``identity_<dtype>`` (``identity_bool`` ... ``identity_bf16``, ``identity_string`` for
#:   BYTES): OUTPUT0 = INPUT0, dims [4], max_batch_size 8, no dynamic batching.
#: * ``identity_variable`` (FP32) and ``identity_string_variable`` (BYTES): dims [-1].
#: * ``identity_nobatch``: FP32[4], max_batch_size 0.
#: * ``mlp``: FP32[64] -> 2 x (MatMul + Add + Relu) -> FP32[64]; max_batch_size 16,
#:   ``max_queue_delay_microseconds: 100``; ``mlp_reference(x, **MLP_SMALL)`` is the answer.
#:   ``mlp_nobatch``: the same model, max_batch_size 0.
#: * ``failing``: INPUT0 INT64[1] -> OUTPUT0 FP32[1] = FAILING_TABLE[INPUT0]; an index outside
#:   [-4, 3] makes ONNX Runtime fail the run (a whole batch fails with it); max_batch_size 8,
#:   ``dynamic_batching { }``.
ONNX_REPO_MODELS: tuple[str, ...] = (
    "add_sub",
    "add_sub_nobatch",
    "add_sub_int32",
    *(identity_name(d) for d in IDENTITY_DTYPES),
    "identity_variable",
    "identity_string_variable",
    "identity_nobatch",
    "mlp",
    "mlp_nobatch",
    "failing",
)


def build_onnx_repo(repo: Path) -> Path:
    """Write the shared repository (``ONNX_REPO_MODELS``) into ``repo``; returns ``repo``."""
    for name, (model, config) in _models().items():
        write_model(repo, name, model, config)
    return repo

"""Real ONNX graphs, built with the ``onnx`` package, and the Triton model directories around them.

One place builds every generated ONNX model: ``tools/make_examples.py`` writes the bundled example
repository with it and ``tests/onnx_models.py`` re-exports it for the tests. Graph builders return
an ``onnx.ModelProto``; ``config_for`` reads a model's inputs and outputs back into config.pbtxt
text; ``write_model`` lays out ``REPO/NAME/config.pbtxt`` and ``REPO/NAME/VERSION/model.onnx``.

Data types are Triton's wire names (``FP32``, ``BYTES``...); ``TYPE_FP32``, ``STRING`` and
``TYPE_STRING`` are accepted too. Shapes (``dims``) never include the batch dimension: a builder
called with ``batch=True`` prepends a symbolic ``batch`` dimension, which is what a model with
``max_batch_size > 0`` must have. A ``-1`` in ``dims`` becomes a symbolic dimension.

Models use opset 17 and IR version 8 so that every onnxruntime from 1.14 on loads them (the
``onnx`` package would otherwise stamp its own newest IR version, which older runtimes refuse).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

# Triton wire name -> ONNX element type. ONNX Runtime's Identity runs on every one of these;
# BF16 runs too but ONNX Runtime's Python API cannot turn a bfloat16 tensor into numpy, so
# feeding it from Python needs OrtValues (see tests/test_onnx_models.py).
ONNX_TYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}
_WIRE_BY_ONNX = {v: k for k, v in ONNX_TYPES.items()}

#: Every Triton data type an ONNX Runtime Identity model can carry.
IDENTITY_DTYPES: tuple[str, ...] = tuple(ONNX_TYPES)
#: The data types ONNX Runtime's CPU Add and Sub kernels implement (no BOOL, no BF16).
ADD_SUB_DTYPES: tuple[str, ...] = (
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
)

#: What ``failing`` looks values up in; an index outside [-4, 3] makes the run fail.
FAILING_TABLE: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0)


def wire_dtype(dtype: str) -> str:
    """``FP32``/``TYPE_FP32`` -> ``FP32``; ``STRING``/``TYPE_STRING``/``BYTES`` -> ``BYTES``."""
    d = dtype.upper().removeprefix("TYPE_")
    d = "BYTES" if d == "STRING" else d
    if d not in ONNX_TYPES:
        raise ValueError(f"unknown Triton data type {dtype!r}")
    return d


def config_dtype(dtype: str) -> str:
    """The config.pbtxt name: ``FP32`` -> ``TYPE_FP32``, ``BYTES`` -> ``TYPE_STRING``."""
    d = wire_dtype(dtype)
    return "TYPE_STRING" if d == "BYTES" else f"TYPE_{d}"


def _shape(dims: Sequence[int], batch: bool) -> list[int | str]:
    shape: list[int | str] = ["batch"] if batch else []
    shape += [d if d >= 0 else f"d{i}" for i, d in enumerate(dims)]
    return shape


def _value(name: str, dtype: str, dims: Sequence[int], batch: bool) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, ONNX_TYPES[wire_dtype(dtype)], _shape(dims, batch))


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritonlite-tools"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def add_sub(
    dtype: str = "FP32",
    dims: Sequence[int] = (16,),
    batch: bool = True,
) -> onnx.ModelProto:
    """Triton's classic ``simple`` (add_sub): OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.

    ``dtype`` is one of ``ADD_SUB_DTYPES``; integer results wrap as numpy's do.
    """
    if wire_dtype(dtype) not in ADD_SUB_DTYPES:
        raise ValueError(f"ONNX Runtime has no CPU Add/Sub for {dtype}")
    io = [_value(n, dtype, dims, batch) for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        io[:2],
        io[2:],
    )
    return _model(graph)


def identity(
    dtype: str,
    dims: Sequence[int] = (4,),
    batch: bool = True,
    name_in: str = "INPUT0",
    name_out: str = "OUTPUT0",
) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 for any type in ``IDENTITY_DTYPES``; ``dims=(-1,)`` makes it variable."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [name_in], [name_out])],
        f"identity_{wire_dtype(dtype)}",
        [_value(name_in, dtype, dims, batch)],
        [_value(name_out, dtype, dims, batch)],
    )
    return _model(graph)


def mlp_weights(
    layers: int = 4,
    width: int = 1024,
    seed: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (W, b) of each layer of ``mlp``: He-scaled, so activations neither vanish nor explode."""
    rng = np.random.default_rng(seed)
    scale = np.float32(np.sqrt(2.0 / width))
    return [
        (
            rng.standard_normal((width, width), dtype=np.float32) * scale,
            rng.standard_normal(width, dtype=np.float32) * np.float32(0.01),
        )
        for _ in range(layers)
    ]


def mlp_reference(x: np.ndarray, layers: int = 4, width: int = 1024, seed: int = 0) -> np.ndarray:
    """What ``mlp(layers, width, seed=seed)`` computes, in numpy."""
    for w, b in mlp_weights(layers, width, seed):
        x = np.maximum(x @ w + b, np.float32(0.0))
    return x


def mlp(layers: int = 4, width: int = 1024, batch: bool = True, seed: int = 0) -> onnx.ModelProto:
    """INPUT0 FP32[width] -> ``layers`` x (MatMul + Add + Relu) -> OUTPUT0 FP32[width].

    Weights are random from ``seed`` (``mlp_weights``), so the same arguments build the same bytes.
    One sample reads every weight (a matrix-vector product); a batch reuses them, which is what
    makes batching pay off on this model.
    """
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = "INPUT0"
    for i, (w, b) in enumerate(mlp_weights(layers, width, seed)):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        y = "OUTPUT0" if i == layers - 1 else f"h{i}"
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"]),
            helper.make_node("Relu", [f"add{i}"], [y]),
        ]
        x = y
    graph = helper.make_graph(
        nodes,
        "mlp",
        [_value("INPUT0", "FP32", (width,), batch)],
        [_value("OUTPUT0", "FP32", (width,), batch)],
        initializer=inits,
    )
    return _model(graph)


def failing(batch: bool = True) -> onnx.ModelProto:
    """A model whose run fails for some inputs: OUTPUT0 FP32[1] = FAILING_TABLE[INPUT0 INT64[1]].

    It is a Gather from a 4-element constant; ONNX Runtime checks the indices at run time, so an
    INPUT0 value outside [-4, 3] makes the run raise INVALID_ARGUMENT ("indices element out of
    data bounds"), while in-range values succeed. One bad request in a batch fails the whole run.
    """
    table = helper.make_tensor("TABLE", TensorProto.FLOAT, [len(FAILING_TABLE)], FAILING_TABLE)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["TABLE", "INPUT0"], ["OUTPUT0"], axis=0)],
        "failing",
        [_value("INPUT0", "INT64", (1,), batch)],
        [_value("OUTPUT0", "FP32", (1,), batch)],
        initializer=[table],
    )
    return _model(graph)


# --- config.pbtxt ----------------------------------------------------------------------------

# (name, data type, dims without the batch dimension[, more fields of the tensor's entry])
Tensor = tuple[str, str, Sequence[int]] | tuple[str, str, Sequence[int], str]


def config_text(
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    *,
    max_batch_size: int,
    name: str | None = None,
    platform: str | None = "onnxruntime_onnx",
    backend: str | None = None,
    dynamic_batching: bool = False,
    max_queue_delay_us: int | None = None,
    instance_count: int | None = None,
    extra: str = "",
) -> str:
    """config.pbtxt text for the given tensors.

    ``max_queue_delay_us`` implies ``dynamic_batching``; ``instance_count`` adds a KIND_CPU
    instance group; ``extra`` is appended verbatim (more config fields).
    """
    lines = [f'name: "{name}"'] if name else []
    if platform and not backend:
        lines.append(f'platform: "{platform}"')
    if backend:
        lines.append(f'backend: "{backend}"')
    lines.append(f"max_batch_size: {max_batch_size}")
    for kind, tensors in (("input", inputs), ("output", outputs)):
        rows = [
            f'  {{ name: "{t[0]}" data_type: {config_dtype(t[1])} '
            f"dims: [ {', '.join(map(str, t[2]))} ]{' ' + t[3] if len(t) > 3 else ''} }}"
            for t in tensors
        ]
        lines.append(f"{kind} [\n" + ",\n".join(rows) + "\n]")
    if instance_count is not None:
        lines.append(f"instance_group [ {{ kind: KIND_CPU count: {instance_count} }} ]")
    if max_queue_delay_us is not None:
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {max_queue_delay_us} }}")
    elif dynamic_batching:
        lines.append("dynamic_batching { }")
    text = "\n".join(lines) + "\n"
    return text + extra if not extra or extra.endswith("\n") else text + extra + "\n"


def model_tensors(model: onnx.ModelProto, batch: bool) -> tuple[list[Tensor], list[Tensor]]:
    """A model's (inputs, outputs) as config tensors; ``batch`` drops each first dimension."""
    inits = {i.name for i in model.graph.initializer}

    def tensors(values: Sequence[onnx.ValueInfoProto]) -> list[Tensor]:
        out: list[Tensor] = []
        for v in values:
            if v.name in inits:
                continue
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            out.append((v.name, _WIRE_BY_ONNX[t.elem_type], dims[1:] if batch else dims))
        return out

    return tensors(model.graph.input), tensors(model.graph.output)


def config_for(model: onnx.ModelProto, *, max_batch_size: int, **kwargs: object) -> str:
    """config.pbtxt text declaring exactly the model's inputs and outputs.

    ``max_batch_size > 0`` means the model's first dimension is the batch; other keywords are
    ``config_text``'s (``name``, ``dynamic_batching``, ``max_queue_delay_us``, ``instance_count``,
    ``extra``...).
    """
    inputs, outputs = model_tensors(model, batch=max_batch_size > 0)
    return config_text(inputs, outputs, max_batch_size=max_batch_size, **kwargs)  # type: ignore[arg-type]


# --- model directories ---------------------------------------------------------------------------


def model_files(
    name: str, onnx_model: onnx.ModelProto, config_pbtxt: str | None, version: int = 1
) -> dict[Path, bytes]:
    """The files of a model directory, relative to the repository, and their bytes."""
    files = {Path(name) / str(version) / "model.onnx": onnx_model.SerializeToString()}
    if config_pbtxt is not None:
        files[Path(name) / "config.pbtxt"] = config_pbtxt.encode()
    return files


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` unless it already holds exactly that; True when it wrote.

    The write goes through a temporary file and a rename, so a server polling the repository
    never reads a half-written model.
    """
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not tempfile.mkstemp: its files are 0600, and a model must stay readable by whoever
    # serves the repository; "x" mode creates with the usual umask-derived permissions.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def write_model(
    repo: Path, name: str, onnx_model: onnx.ModelProto, config_pbtxt: str | None, version: int = 1
) -> Path:
    """Write ``repo/name/config.pbtxt`` (unless None: Triton then auto-completes the config)
    and ``repo/name/version/model.onnx``; returns the model directory."""
    for rel, data in model_files(name, onnx_model, config_pbtxt, version).items():
        write_if_changed(Path(repo) / rel, data)
    return Path(repo) / name


# --- whole models in one call (what the test repositories and the examples use) ---------------


def write_add_sub(
    repo: Path,
    name: str,
    max_batch_size: int,
    dims: int = 16,
    extra_config: str = "",
    label_file: list[str] | None = None,
    dtype: str = "FP32",
) -> Path:
    """``add_sub`` over ``dtype[dims]``, batching when ``max_batch_size > 0``.

    ``label_file`` writes ``labels.txt`` and names it as OUTPUT0's ``label_filename`` (for the
    classification extension).
    """
    model = add_sub(dtype, (dims,), batch=max_batch_size > 0)
    inputs, outputs = model_tensors(model, batch=max_batch_size > 0)
    if label_file:
        n, t, d = outputs[0][:3]
        outputs[0] = (n, t, d, 'label_filename: "labels.txt"')
        write_if_changed(Path(repo) / name / "labels.txt", ("\n".join(label_file) + "\n").encode())
    config = config_text(
        inputs, outputs, max_batch_size=max_batch_size, platform=None, extra=extra_config
    )
    return write_model(repo, name, model, config)


def write_identity(
    repo: Path,
    name: str,
    dtype: str,
    dims: Sequence[int],
    max_batch_size: int,
    extra_config: str = "",
) -> Path:
    """``identity`` of ``dtype[dims]``, batching when ``max_batch_size > 0``."""
    model = identity(dtype, dims, batch=max_batch_size > 0)
    config = config_for(model, max_batch_size=max_batch_size, platform=None, extra=extra_config)
    return write_model(repo, name, model, config)


def write_mlp(
    repo: Path,
    name: str,
    max_batch_size: int = 64,
    layers: int = 4,
    width: int = 1024,
    seed: int = 0,
    extra_config: str = "",
) -> Path:
    """``mlp(layers, width, seed=seed)``, batching when ``max_batch_size > 0``."""
    model = mlp(layers, width, batch=max_batch_size > 0, seed=seed)
    config = config_for(model, max_batch_size=max_batch_size, platform=None, extra=extra_config)
    return write_model(repo, name, model, config)

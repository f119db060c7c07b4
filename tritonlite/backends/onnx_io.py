"""What an ONNX model declares as inputs and outputs; auto-complete and checks against it.

``read_onnx_io`` opens the model with ONNX Runtime (CPU provider, graph optimizations off, so
reading stays cheap) and reports each tensor's config data type (``TYPE_FP32``...) and dims, with
-1 for every symbolic or unknown dimension. ``check_config`` is the check Triton's ONNX Runtime
backend makes when an instance loads (``ValidateInputs`` / ``ValidateOutputs``): tensor names,
data types, ranks and fixed dims of the config against the model, with Triton's messages.
``auto_complete_onnx`` is that backend's config auto-complete (``AutoCompleteConfig``);
``auto_complete``, its entry in ``backends.AUTO_COMPLETERS``, is what ``load_model_config``
calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonlite._proto import pb
from tritonlite.contracts.config import version_dirs
from tritonlite.contracts.config_validate import validate_batch_io
from tritonlite.contracts.errors import TritonliteError, invalid_arg

# ONNX Runtime's Python type strings -> model config data type names.
_ORT_TYPES: dict[str, str] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One model tensor: config data type name and dims (-1 where the model leaves it open)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelIO:
    """A model's inputs and outputs in model order.

    ``overridable`` lists initializers a request may override (models of ONNX IR < 4 list
    initializers as graph inputs); they are allowed config inputs but not required ones.
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    overridable: tuple[TensorSpec, ...] = ()


def ort_type_to_config(ort_type: str) -> str | None:
    """``tensor(float)`` -> ``TYPE_FP32``; None for types a config cannot name."""
    return _ORT_TYPES.get(ort_type)


def _spec(arg: Any, where: Path) -> TensorSpec:
    data_type = ort_type_to_config(str(arg.type))
    if data_type is None:
        raise invalid_arg(
            f"unsupported ONNX type '{arg.type}' for tensor '{arg.name}' in '{where}'"
        )
    shape = arg.shape if isinstance(arg.shape, (list, tuple)) else ()
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)
    return TensorSpec(str(arg.name), data_type, dims)


def read_onnx_io(path: Path) -> ModelIO:
    """Read the inputs and outputs an ONNX model declares.

    Parameters
    ----------
    path
        The model file, or a directory holding ``model.onnx`` (Triton's layout for models with
        external data).

    Returns
    -------
    ModelIO
        Inputs, outputs and overridable initializers in model order.

    Raises
    ------
    TritonliteError
        INVALID_ARG when the file is missing, ONNX Runtime cannot open it, or a tensor has a
        type a model config cannot express (sequences, maps, ...).
    """
    import onnxruntime as ort

    path = Path(path)
    if path.is_dir():
        path = path / "model.onnx"
    if not path.is_file():
        raise invalid_arg(f"unable to find ONNX model file '{path}'")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types
        raise invalid_arg(f"unable to read ONNX model '{path}': {exc}") from None
    return ModelIO(
        inputs=tuple(_spec(a, path) for a in session.get_inputs()),
        outputs=tuple(_spec(a, path) for a in session.get_outputs()),
        overridable=tuple(_spec(a, path) for a in session.get_overridable_initializers()),
    )


def _shape(dims: Any) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def _check_dims(model: str, tensor: TensorSpec, dims: list[int], max_batch_size: int) -> None:
    if not tensor.dims:
        # A model scalar: Triton only lets the config say [1] (or an empty reshape) for it.
        if any(d != 1 for d in dims):
            raise invalid_arg(
                f"unable to load model '{model}', scalar tensor '{tensor.name}', should only "
                "provide 1 in the model configuration when the model doesn't support batching. "
                f"Model configuration provided: {_shape(dims)}."
            )
        return
    if max_batch_size > 0 and tensor.dims[0] != -1:
        raise invalid_arg(
            f"unable to load model '{model}', model configuration supports batching but first "
            f"dimension of tensor '{tensor.name}' expected by framework is not a variable-size "
            f"batch dimension: {_shape(tensor.dims)} whereas model configuration shape is: "
            f"{_shape(dims)}"
        )
    model_dims = tensor.dims[1:] if max_batch_size > 0 else tensor.dims
    if len(model_dims) != len(dims) or any(m != -1 and m != d for m, d in zip(model_dims, dims)):
        raise invalid_arg(
            f"unable to load model '{model}', tensor '{tensor.name}' shape expected by "
            f"framework {_shape(model_dims)} doesn't match model configuration shape "
            f"{_shape(dims)}"
        )


def _unexpected(kind: str, name: str, allowed: list[str]) -> TritonliteError:
    return invalid_arg(
        f"unexpected inference {kind} '{name}', allowed {kind}s are: {', '.join(sorted(allowed))}"
    )


def check_config(cfg: Any, io: ModelIO, batch_inputs: bool = True) -> None:
    """Check a config's inputs and outputs against what the model declares.

    Parameters
    ----------
    cfg
        A ``pb.ModelConfig`` whose inputs and outputs are complete (after auto-complete).
    io
        What ``read_onnx_io`` reported for the model file.
    batch_inputs
        Also check the batch input targets against the model (at load, after the config's own
        validation, as Triton finds batch input problems only after its core's checks).

    Raises
    ------
    TritonliteError
        INVALID_ARG for what Triton's ``ValidateBatchIO`` refuses (with its words), and,
        worded as Triton's ONNX Runtime backend words it, when the config names a
        tensor the model lacks, a data type differs, the input count differs, or dims disagree.
    """
    validate_batch_io(cfg)
    name = cfg.name
    mbs = int(cfg.max_batch_size)
    expected = sum(1 for i in cfg.input if not i.optional) + len(cfg.batch_input)
    if cfg.HasField("sequence_batching"):
        kinds = {c.kind for ci in cfg.sequence_batching.control_input for c in ci.control}
        expected += len(kinds) + len(cfg.sequence_batching.state)
    if len(io.inputs) != expected:
        raise invalid_arg(
            f"unable to load model '{name}', configuration expects {expected} inputs, "
            f"model provides {len(io.inputs)}"
        )
    inputs = {t.name: t for t in io.overridable}
    inputs.update((t.name, t) for t in io.inputs)
    outputs = {t.name: t for t in io.outputs}
    if batch_inputs:
        _check_batch_inputs(cfg, inputs)
    # A batch output is cut per request by its source input's shape: its dims need not match.
    scattered = {t for bo in cfg.batch_output for t in bo.target_name}
    for kind, configured, known in (("input", cfg.input, inputs), ("output", cfg.output, outputs)):
        for entry in configured:
            tensor = known.get(entry.name)
            if tensor is None:
                raise _unexpected(kind, entry.name, list(known))
            value = pb.DataType.values_by_number.get(entry.data_type)
            data_type = value.name if value is not None else str(entry.data_type)
            if data_type != tensor.data_type:
                raise invalid_arg(
                    f"unable to load model '{name}', configuration expects datatype "
                    f"{data_type} for {kind} '{entry.name}', model provides {tensor.data_type}"
                )
            if kind == "input" and entry.optional and mbs != 0:
                raise invalid_arg(
                    f"unable to load model '{name}', optional input '{entry.name}' is not "
                    "supported for models that support batching"
                )
            if kind == "input" and entry.allow_ragged_batch:
                if tensor.dims != (-1,):
                    raise invalid_arg(
                        f"unable to load model '{name}', configuration expects model provides "
                        f"input with shape [-1]  for ragged input '{entry.name}', model "
                        f"provides {_shape(tensor.dims)}"
                    )
                continue
            if kind == "output" and entry.name in scattered:
                continue
            dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            _check_dims(name, tensor, dims, mbs)


def _check_batch_inputs(cfg: Any, inputs: dict[str, TensorSpec]) -> None:
    """Each batch input target must be a model input that requests do not feed, of the batch
    input's data type (Triton only finds these out when a request runs)."""
    declared = {i.name for i in cfg.input}
    for bi in cfg.batch_input:
        value = pb.DataType.values_by_number.get(bi.data_type)
        data_type = value.name if value is not None else str(bi.data_type)
        for target in bi.target_name:
            if target in declared:
                raise invalid_arg(
                    f"unable to load model '{cfg.name}', batch input target '{target}' is "
                    "also a model configuration input"
                )
            tensor = inputs.get(target)
            if tensor is None:
                raise invalid_arg(
                    f"unable to load model '{cfg.name}', batch input target '{target}' is not "
                    f"an input of the model, which has: {', '.join(sorted(inputs))}"
                )
            if tensor.data_type != data_type:
                raise invalid_arg(
                    f"unable to load model '{cfg.name}', configuration expects datatype "
                    f"{data_type} for batch input '{target}', model provides {tensor.data_type}"
                )


def _type_number(data_type: str) -> int:
    return int(pb.DataType.values_by_name[data_type].number)


def _fill_tensor(entry: Any, spec: TensorSpec, max_batch_size: int) -> None:
    """Give one config tensor the model's data type / dims where the config leaves them out."""
    if entry.data_type == 0:
        entry.data_type = _type_number(spec.data_type)
    if len(entry.dims) == 0 and not entry.HasField("reshape"):
        dims = spec.dims[1:] if max_batch_size > 0 else spec.dims
        if dims:
            entry.dims.extend(dims)
        else:
            # A scalar (after the batch dim): Triton says dims [1] and, when batching, an
            # empty reshape so the framework still sees the scalar.
            entry.dims.append(1)
            if max_batch_size > 0:
                entry.reshape.SetInParent()


def auto_complete_onnx(cfg: Any, io: ModelIO, default_max_batch_size: int = 4) -> None:
    """Complete a config from its ONNX model (Triton's onnxruntime_backend auto-complete).

    Parameters
    ----------
    cfg
        Config after ``resolve_platform``; changed in place.
    io
        What ``read_onnx_io`` reported for the model file.
    default_max_batch_size
        The backend's ``default-max-batch-size`` (Triton's default 4).

    Notes
    -----
    As in Triton: when the config already lists inputs (or batch inputs) and outputs, nothing
    is derived from the model. Otherwise, when every model input and output has a variable
    first dimension the model can batch: ``max_batch_size`` 0 becomes
    ``default_max_batch_size``, and with ``max_batch_size > 1`` and no scheduler configured an
    empty ``dynamic_batching`` is added; a model that cannot batch with ``max_batch_size != 0``
    fails. The missing list (inputs or outputs) is then taken from the model in model order,
    without the batch dimension when batching; a tensor left with no dims gets ``dims: [1]``
    and, when batching, an empty ``reshape``.

    Beyond Triton, a configured tensor that names a model tensor but leaves out ``data_type``
    or ``dims`` gets them from the model (Triton would reject such a config). Finally the
    config is checked against the model as Triton's backend checks it when an instance loads
    (``onnx_io.check_config``): unknown names, data type, rank and fixed dims.

    Raises
    ------
    TritonliteError
        INVALID_ARG for a non-batching model with ``max_batch_size != 0`` or any mismatch
        ``check_config`` reports.
    """
    has_inputs = len(cfg.input) + len(cfg.batch_input) > 0
    has_outputs = len(cfg.output) > 0
    if not (has_inputs and has_outputs):
        can_batch = all(t.dims and t.dims[0] == -1 for t in io.inputs + io.outputs)
        if can_batch:
            if cfg.max_batch_size == 0:
                cfg.max_batch_size = max(default_max_batch_size, 0)
            if cfg.max_batch_size > 1 and not (
                cfg.HasField("dynamic_batching") or cfg.HasField("sequence_batching")
            ):
                cfg.dynamic_batching.SetInParent()
        elif cfg.max_batch_size != 0:
            raise invalid_arg(
                f"autofill failed for model '{cfg.name}': model does not support batching "
                "while non-zero max_batch_size is specified"
            )
        for present, entries, specs in (
            (has_inputs, cfg.input, io.inputs),
            (has_outputs, cfg.output, io.outputs),
        ):
            if not present:
                for spec in specs:
                    entry = entries.add()
                    entry.name = spec.name
                    _fill_tensor(entry, spec, cfg.max_batch_size)
    known = {t.name: t for t in io.overridable + io.inputs}
    for entry in cfg.input:
        if entry.name in known:
            _fill_tensor(entry, known[entry.name], cfg.max_batch_size)
    outputs = {t.name: t for t in io.outputs}
    for entry in cfg.output:
        if entry.name in outputs:
            _fill_tensor(entry, outputs[entry.name], cfg.max_batch_size)
    check_config(cfg, io, batch_inputs=False)


def auto_complete(cfg: Any, model_dir: Path, default_max_batch_size: int) -> None:
    """The ONNX Runtime backend's entry in the auto-complete registry.

    Reads ``<highest version>/<default_model_filename>`` (a file, or a directory holding
    model.onnx); without any version directory nothing happens and the repository reports
    the missing versions.
    """
    versions = version_dirs(model_dir)
    if not versions:
        return
    model_file = Path(model_dir, str(versions[-1]), cfg.default_model_filename or "model.onnx")
    auto_complete_onnx(cfg, read_onnx_io(model_file), default_max_batch_size)

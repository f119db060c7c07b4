"""Model configuration checks: Triton's ``ValidateModelConfig``, ``ValidateModelIOConfig`` and
``ValidateInstanceGroup``, with Triton's messages (the last step of ``config.load_model_config``).

Every check raises ``TritonliteError`` (INVALID_ARG) for a bad config. The constants here are
shared with ``config`` (platform resolution and normalization).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from tritonlite._proto import pb
from tritonlite.contracts.errors import TritonliteError, internal, invalid_arg

ModelConfig: TypeAlias = Any  # a pb.ModelConfig; its class is built at runtime (tritonlite._proto)

KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL = 0, 1, 2, 3
ENSEMBLE = "ensemble"

# backend -> (platform, default model file). Python's platform stays "" (Triton's table).
KNOWN_BACKENDS: dict[str, tuple[str, str]] = {
    "tensorrt": ("tensorrt_plan", "model.plan"),
    "onnxruntime": ("onnxruntime_onnx", "model.onnx"),
    "pytorch": ("pytorch_libtorch", "model.pt"),
    "python": ("", "model.py"),
}


def type_number(data_type: str) -> int:
    """The ``pb.DataType`` number of a config type name (``TYPE_FP32``...)."""
    return int(pb.DataType.values_by_name[data_type].number)


# -- validation (Triton's ValidateModelConfig, ValidateModelIOConfig, ValidateInstanceGroup) -----

_SEQ_CONTROLS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY")
_CORRID_TYPES = frozenset({"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"})
_TENSORRT = "tensorrt_plan"


def _element_count(dims: Any) -> int:
    """Triton's GetElementCount: -1 with any wildcard, 0 for no dims, else the product."""
    count = 0
    for i, d in enumerate(dims):
        if d == -1:
            return -1
        count = int(d) if i == 0 else count * int(d)
    return count


def _wildcard_chunks(dims: Any) -> list[int]:
    chunks, current = [], 1
    for d in dims:
        if d == -1:
            chunks.append(current)
            current = 1
        else:
            current *= int(d)
    return [*chunks, current]


def _validate_io(io: Any, max_batch_size: int, prefix: str, platform: str) -> None:
    if not io.name:
        raise invalid_arg(f"{prefix}must specify 'name'")
    what = f"{prefix}'{io.name}' "
    if io.data_type == 0:
        raise invalid_arg(f"{what}must specify 'data_type'")
    if len(io.dims) == 0:
        raise invalid_arg(f"{what}must specify 'dims'")
    has_reshape = io.HasField("reshape")
    if has_reshape and len(io.reshape.shape) == 0 and max_batch_size == 0:
        raise invalid_arg(
            f"{what}cannot have empty reshape for non-batching model as scalar tensors are "
            "not supported"
        )
    if any(d < 1 and d != -1 for d in io.dims):
        raise invalid_arg(
            f"{what}dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
        )
    if has_reshape:
        shape = io.reshape.shape
        if any(d < 1 and d != -1 for d in shape):
            raise invalid_arg(
                f"{what}reshape dimensions must be integer >= 1, or -1 to indicate a "
                "variable-size dimension"
            )
        dims_size, reshape_size = _element_count(io.dims), _element_count(shape)
        if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
            raise invalid_arg(f"{what}has different size for dims and reshape")
        if dims_size == -1:
            a, b = _wildcard_chunks(io.dims), _wildcard_chunks(shape)
            if len(a) != len(b):
                raise invalid_arg(
                    f"{what}has different number of variable-size dimensions for dims and reshape"
                )
            if a != b:
                raise invalid_arg(f"{what}has different size for dims and reshape")
    if io.is_shape_tensor and platform != _TENSORRT:
        raise invalid_arg("shape tensors are only supported for TensorRT platform")
    if io.is_non_linear_format_io:
        if platform != _TENSORRT:
            raise invalid_arg("Non-linear IO format is only supported for the TensorRT platform")
        if len(io.dims) != 3:
            kind = "input" if prefix.startswith("model input") else "output"
            raise invalid_arg(f"Non-linear IO format {kind} requires 3 dims")


def _validate_io_config(cfg: ModelConfig) -> None:
    mbs = int(cfg.max_batch_size)
    suffix = f" for {cfg.name}"
    fmt = pb.ModelInput.DESCRIPTOR.enum_types_by_name["Format"].values_by_name
    nhwc_nchw = {fmt["FORMAT_NHWC"].number, fmt["FORMAT_NCHW"].number}
    for prefix, entries in (("model input ", cfg.input), ("model output ", cfg.output)):
        seen: set[str] = set()
        for io in entries:
            try:
                _validate_io(io, mbs, prefix, cfg.platform)
            except TritonliteError as exc:
                raise invalid_arg(f"{exc.message}{suffix}") from None
            if prefix == "model input " and io.format in nhwc_nchw and len(io.dims) != 3:
                raise invalid_arg(f"model input NHWC/NCHW require 3 dims{suffix}")
            if io.name in seen:
                # Triton keeps the last of two same-named tensors silently; refuse instead.
                raise invalid_arg(f"{prefix}'{io.name}' is specified more than once{suffix}")
            seen.add(io.name)
    validate_batch_io(cfg)


_TYPES = frozenset(pb.DataType.values_by_number)


def validate_batch_io(cfg: ModelConfig) -> None:
    """Triton's ``ValidateBatchIO``: kinds, source inputs, data types and target outputs of
    ``batch_input`` / ``batch_output``. Backends that check a config against their model call
    it first, as Triton validates these before a backend sees the model."""
    suffix = f" for {cfg.name}"
    inputs = {io.name for io in cfg.input}
    outputs = {io.name for io in cfg.output}
    in_kinds = pb.BatchInput.DESCRIPTOR.enum_types_by_name["Kind"].values_by_number
    out_kinds = pb.BatchOutput.DESCRIPTOR.enum_types_by_name["Kind"].values_by_number
    # A number no enum value has (``kind: 9``) reaches Triton's backends as a JSON number
    # where they read a name: they fail before its core validates batch IO, with these words.
    if any(bi.kind not in in_kinds or bi.data_type not in _TYPES for bi in cfg.batch_input) or any(
        bo.kind not in out_kinds for bo in cfg.batch_output
    ):
        raise internal("attempt to access JSON non-string as string")
    for bi in cfg.batch_input:
        kind_name = in_kinds[bi.kind].name
        if len(bi.source_input) != 1:
            raise invalid_arg(
                f"batch input kind '{kind_name}' expects 1 source input, got "
                f"{len(bi.source_input)}{suffix}"
            )
        if bi.data_type not in (type_number("TYPE_INT32"), type_number("TYPE_FP32")):
            raise invalid_arg(f"batch input data type must be TYPE_INT32 or TYPE_FP32{suffix}")
        for src in bi.source_input:
            if src not in inputs:
                raise invalid_arg(f"unknown source input name '{src}'{suffix}")
    for bo in cfg.batch_output:
        kind_name = out_kinds[bo.kind].name
        if len(bo.source_input) != 1:
            raise invalid_arg(
                f"batch output kind '{kind_name}' expects 1 source input, "
                f"got {len(bo.source_input)}{suffix}"
            )
        for src in bo.source_input:
            if src not in inputs:
                raise invalid_arg(f"unknown source input name '{src}'{suffix}")
        targets: set[str] = set()
        for target in bo.target_name:
            if target not in outputs:
                raise invalid_arg(f"unknown target output name '{target}'{suffix}")
            if target in targets:
                raise invalid_arg(
                    f"target output name '{target}' can only be specified once{suffix}"
                )
            targets.add(target)


def _validate_sequence(cfg: ModelConfig) -> None:
    seq, name = cfg.sequence_batching, cfg.name
    kind_enum = pb.ModelSequenceBatching.Control.DESCRIPTOR.enum_types_by_name["Kind"]
    for kind_name in (*_SEQ_CONTROLS, "CONTROL_SEQUENCE_CORRID"):
        kind = kind_enum.values_by_name[kind_name].number
        tensors: set[str] = set()
        seen = False
        for ci in seq.control_input:
            if not ci.name:
                raise invalid_arg(f"sequence batching control tensor must have a name for {name}")
            if ci.name in tensors:
                raise invalid_arg(
                    f"sequence batching control tensor '{ci.name}' is specified for multiple "
                    f"control kinds for {name}"
                )
            tensors.add(ci.name)
            for c in ci.control:
                if c.kind != kind:
                    continue
                if seen:
                    raise invalid_arg(
                        f"sequence batching specifies multiple {kind_name} tensors for {name}"
                    )
                seen = True
                given = [
                    (f, len(getattr(c, f)))
                    for f in ("int32_false_true", "fp32_false_true", "bool_false_true")
                    if len(getattr(c, f))
                ]
                if kind_name == "CONTROL_SEQUENCE_CORRID":
                    if given:
                        raise invalid_arg(
                            "sequence batching must not specify either 'int32_false_true', "
                            f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}"
                        )
                    if c.data_type not in {type_number(t) for t in _CORRID_TYPES}:
                        raise invalid_arg(
                            f"unexpected data type for control {kind_name} for {name}. Allowed "
                            "data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 "
                            "and TYPE_STRING"
                        )
                elif not given:
                    raise invalid_arg(
                        "sequence batching must specify either 'int32_false_true', "
                        f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}"
                    )
                elif len(given) > 1:
                    raise invalid_arg(
                        "sequence batching specifies more than one from 'int32_false_true', "
                        f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}"
                    )
                elif given[0][1] != 2:
                    raise invalid_arg(
                        f"sequence batching control '{given[0][0]}' must have exactly 2 "
                        f"entries for {kind_name} for {name}"
                    )
    if seq.HasField("oldest"):
        for size in seq.oldest.preferred_batch_size:
            if size <= 0:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > cfg.max_batch_size:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if seq.HasField("direct") and not 0.0 <= seq.direct.minimum_slot_utilization <= 1.0:
        raise invalid_arg(
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
        )


def _validate_dynamic(cfg: ModelConfig) -> None:
    db, name = cfg.dynamic_batching, cfg.name
    for size in db.preferred_batch_size:
        if size <= 0:
            raise invalid_arg(f"dynamic batching preferred size must be positive for {name}")
        if size > cfg.max_batch_size:
            raise invalid_arg(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = int(db.priority_levels)
    if levels != 0:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            raise invalid_arg(f"default priority level must be in range [1, {levels}] for {name}")
        for level in db.priority_queue_policy:
            if level == 0 or level > levels:
                raise invalid_arg(
                    f"priority queue policy must have priority level in range [1, {levels}] "
                    f"for {name}"
                )
    if db.preserve_ordering:
        if levels > 1:
            raise invalid_arg(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
            )
        delay = pb.ModelQueuePolicy.DELAY
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        if any(p.default_timeout_microseconds != 0 and p.timeout_action == delay for p in policies):
            raise invalid_arg(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
                f"true for {name}"
            )


def _validate_ensemble(cfg: ModelConfig) -> None:
    name = cfg.name
    if cfg.platform != ENSEMBLE:
        raise invalid_arg(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"
        )
    if cfg.instance_group:
        raise invalid_arg(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        raise invalid_arg(f"optimization should not be specified for ensemble '{name}'")
    if cfg.model_warmup:
        raise invalid_arg(f"model_warmup can not be specified for ensemble '{name}'")
    steps = cfg.ensemble_scheduling.step
    if not steps:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")
    # Data flow: tensor -> the tensors it is computed from (Triton's BuildEnsembleGraph).
    produced_by: dict[str, list[str]] = {}
    consumed: set[str] = set()
    for idx, step in enumerate(steps):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise invalid_arg(f"must specify '{field}' in step {idx} of ensemble '{name}'")
        for tensor in step.output_map.values():
            if tensor in produced_by:
                raise invalid_arg(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {idx}"
                )
            produced_by[tensor] = list(step.input_map.values())
        consumed.update(step.input_map.values())
    known = set(produced_by) | consumed
    ready = set()
    for io in cfg.input:
        if io.name not in known:
            raise invalid_arg(f"ensemble input '{io.name}' for ensemble {name}' is not used")
        ready.add(io.name)
    changed = True
    while changed:
        changed = False
        for tensor, sources in produced_by.items():
            if tensor not in ready and all(s in ready for s in sources):
                ready.add(tensor)
                changed = True
    for io in cfg.output:
        if io.name not in known:
            raise invalid_arg(f"ensemble output '{io.name}' for ensemble {name}' is not used")
        if io.name not in ready:
            raise invalid_arg(f"output '{io.name}' for ensemble '{name}' is not written")
    outputs = {io.name for io in cfg.output}
    for tensor in sorted(known - outputs):
        if tensor not in ready or tensor not in consumed:
            raise invalid_arg(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def _validate_instance_groups(cfg: ModelConfig, gpu_count: int) -> None:
    name = cfg.name
    if not cfg.instance_group:
        raise invalid_arg(f"must specify one or more 'instance group's for {name}")
    for group in cfg.instance_group:
        where = f"instance group {group.name} of model {name}"
        if group.kind in (KIND_MODEL, KIND_CPU) and group.gpus:
            kind = "KIND_MODEL" if group.kind == KIND_MODEL else "KIND_CPU"
            raise invalid_arg(f"{where} has kind {kind} but specifies one or more GPUs")
        if group.kind == KIND_GPU:
            if not group.gpus:
                detail = "no GPUs are available" if gpu_count <= 0 else "specifies no GPUs"
                raise invalid_arg(f"{where} has kind KIND_GPU but {detail}")
            for g in group.gpus:
                if not 0 <= g < gpu_count:
                    have = ", ".join(str(i) for i in range(max(gpu_count, 0)))
                    raise invalid_arg(
                        f"{where} specifies invalid or unsupported gpu id {g}. GPUs available "
                        f"are: {have}"
                    )
        elif group.kind not in (KIND_MODEL, KIND_CPU):
            raise invalid_arg(f"{where} has unexpected kind KIND_AUTO")
        if group.profile and cfg.platform != _TENSORRT:
            raise invalid_arg(
                f"{where} and platform {cfg.platform} specifies profile field which is only "
                "supported for TensorRT models"
            )


def validate(cfg: ModelConfig, *, gpu_count: int = 0) -> None:
    """Check a normalized config the way Triton does before loading the model.

    Parameters
    ----------
    cfg
        Config after ``normalize``.
    gpu_count
        GPUs usable by this server, for KIND_GPU groups.

    Notes
    -----
    Checks, with Triton's messages: name; platform/backend pair; ``max_batch_size >= 0``;
    version policy; every input/output has a name, a data type and dims of -1 or >= 1, a
    reshape with a compatible element count (an empty reshape only when batching); shape
    tensors and non-linear IO only on TensorRT; batch inputs/outputs; dynamic batching
    preferred sizes (positive, <= max_batch_size), priority levels and ordering policies;
    sequence batching controls and oldest/direct settings; ensemble steps and data flow;
    instance groups; response cache vs decoupled/sequence. ``dynamic_batching`` with
    ``max_batch_size: 0`` is accepted, as in Triton (the scheduler then never batches). Beyond
    Triton, two inputs (or two outputs) with one name are an error.

    Raises
    ------
    TritonliteError
        INVALID_ARG naming the model and the offending field.
    """
    name = cfg.name
    if not name:
        raise invalid_arg("model configuration must specify 'name'")
    if not cfg.backend:
        if cfg.platform != ENSEMBLE:
            raise invalid_arg(f"unexpected platform type '{cfg.platform}' for {name}")
    elif cfg.platform == ENSEMBLE:
        raise invalid_arg(
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
        )
    known = KNOWN_BACKENDS.get(cfg.backend)
    if known is not None and known[0] and cfg.platform != known[0]:
        raise invalid_arg(
            f"unexpected 'platform' and 'backend' pair, got:{cfg.platform}, {cfg.backend}"
        )
    if cfg.max_batch_size < 0:
        raise invalid_arg(f"'max_batch_size' must be non-negative value for {name}")
    if not cfg.HasField("version_policy"):
        raise invalid_arg(f"must specify 'version policy' for {name}")
    _validate_io_config(cfg)
    if cfg.HasField("dynamic_batching"):
        _validate_dynamic(cfg)
    if cfg.HasField("sequence_batching"):
        if cfg.response_cache.enable:
            raise invalid_arg(
                f"Response Cache does not currently support model {name} with sequence "
                "batching scheduler. Please disable the response cache."
            )
        _validate_sequence(cfg)
    if cfg.HasField("ensemble_scheduling"):
        _validate_ensemble(cfg)
    else:
        if cfg.platform == ENSEMBLE:
            raise invalid_arg(
                f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
            )
        _validate_instance_groups(cfg, gpu_count)
    if cfg.model_transaction_policy.decoupled and cfg.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )

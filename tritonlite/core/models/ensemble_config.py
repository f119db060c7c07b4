"""An ensemble config checked against its composing models' configs (Triton's
``ValidateEnsembleConfig``), with Triton's messages.

``validate_ensemble`` in ``config`` checks the ensemble config alone (steps, data flow); this
runs at load once the composing models are loaded: every step maps existing inputs and outputs
of its model, every required model input is mapped exactly once, an ensemble tensor keeps one
datatype and a compatible shape wherever it appears, and the ensemble's max_batch_size fits
every batching composing model, and no step (nor the ensemble's outputs) reads tensors that
stem from different decoupled models, or from a decoupled model and the request (Triton's
"decouple labels": a decoupled step answers any number of times, so such inputs could not be
paired). Raises ``TritonliteError`` (INVALID_ARG); returns whether the ensemble is decoupled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from tritonlite._proto import pb
from tritonlite.contracts.errors import invalid_arg


@dataclass(frozen=True, slots=True)
class _Node:
    model: str
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # with -1 for the batch dim of a batching model


def _node(model: str, batching: bool, data_type: int, dims: Any) -> _Node:
    d = tuple(int(x) for x in dims)
    return _Node(model, data_type, d, ((-1,) + d) if batching else d)


def _dims_str(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == -1 or y == -1 or x == y for x, y in zip(a, b))


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.data_type != rhs.data_type:
        lt = pb.DataType.values_by_number[lhs.data_type].name
        rt = pb.DataType.values_by_number[rhs.data_type].name
        raise invalid_arg(
            f"{prefix}inconsistent data type: {lt} is inferred from model "
            f"{lhs.model} while {rt} is inferred from model {rhs.model}"
        )
    if not _compatible(lhs.dims, rhs.dims) and not _compatible(lhs.full_dims, rhs.full_dims):
        raise invalid_arg(
            f"{prefix}inconsistent shape: {_dims_str(lhs.full_dims)} is inferred from model "
            f"{lhs.model} while {_dims_str(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def validate_composing(cfg: Any, configs: dict[str, Any]) -> bool:
    """Check ensemble ``cfg`` against ``configs`` (composing model name -> its loaded config);
    True when a decoupled model's outputs flow into it (the ensemble is then decoupled)."""
    name = cfg.name
    batching = cfg.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for io in list(cfg.input) + list(cfg.output):
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        tensors.setdefault(io.name, _node(name, batching, io.data_type, dims))
    for step in cfg.ensemble_scheduling.step:
        model = step.model_name
        mc = configs[model]
        if mc.max_batch_size != 0 and mc.max_batch_size < cfg.max_batch_size:
            raise invalid_arg(
                f"ensemble {name} allows maximum batch size {cfg.max_batch_size}, but it "
                f"contains model {model} which only allows maximum batch size to be "
                f"{mc.max_batch_size}"
            )
        step_batching = mc.max_batch_size > 0
        inputs = {i.name: i for i in mc.input}
        for model_input, tensor in sorted(step.input_map.items()):
            if model_input not in inputs:
                raise invalid_arg(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to "
                    f"non-existing input {model_input} in model {model}"
                )
        for io in mc.input:
            tensor = step.input_map.get(io.name)
            if tensor is None:
                if io.optional:
                    continue
                raise invalid_arg(
                    f"in ensemble {name}, input {io.name} in model {model} is "
                    "not mapped to any ensemble tensors"
                )
            _merge(tensors, tensor, _node(model, step_batching, io.data_type, io.dims), name)
        outputs = {o.name: o for o in mc.output}
        for model_output, tensor in sorted(step.output_map.items()):
            if model_output not in outputs:
                raise invalid_arg(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from "
                    f"non-existing output {model_output} in model {model}"
                )
        for model_output, tensor in sorted(step.output_map.items()):
            o = outputs[model_output]
            _merge(tensors, tensor, _node(model, step_batching, o.data_type, o.dims), name)
    return _decoupled_flow(cfg, configs, tensors)


_SINK = ""  # the ensemble's response: it reads every ensemble output


def _decoupled_flow(cfg: Any, configs: dict[str, Any], tensors: dict[str, _Node]) -> bool:
    """Label each tensor with the decoupled step it stems from (0: the request), walking the
    data flow from the ensemble's inputs as Triton does; a tensor made from tensors of
    different labels fails. The outputs of one step share a label."""
    prev: dict[str, list[str]] = {_SINK: [o.name for o in cfg.output]}
    nxt: dict[str, list[str]] = {o.name: [_SINK] for o in cfg.output}
    producer: dict[str, int] = {}
    decoupled: list[bool] = []
    for idx, step in enumerate(cfg.ensemble_scheduling.step):
        decoupled.append(bool(configs[step.model_name].model_transaction_policy.decoupled))
        for _, tensor in sorted(step.output_map.items()):
            producer[tensor] = idx
            for _, source in sorted(step.input_map.items()):
                prev.setdefault(tensor, []).append(source)
                nxt.setdefault(source, []).append(tensor)
    label: dict[str, int] = {i.name: 0 for i in cfg.input}
    step_label: dict[int, int] = {}
    last = 0
    todo = deque(label)
    while todo:
        for tensor in nxt.get(todo.popleft(), ()):
            sources = prev[tensor]
            if tensor in label or any(p not in label for p in sources):
                continue
            first = label[sources[0]]
            if any(label[p] != first for p in sources):
                owner = cfg.name if tensor == _SINK else tensors[tensor].model
                raise invalid_arg(
                    f"in ensemble {cfg.name}, step of model '{owner}' receives inputs "
                    "originated from different decoupled models"
                )
            by = producer.get(tensor)
            if by is None:  # the sink
                label[tensor] = first
            else:
                if by not in step_label:
                    if decoupled[by]:
                        last += 1
                    step_label[by] = last if decoupled[by] else first
                label[tensor] = step_label[by]
            todo.append(tensor)
    return last != 0


def _merge(tensors: dict[str, _Node], tensor: str, node: _Node, ensemble: str) -> None:
    known = tensors.get(tensor)
    if known is None:
        tensors[tensor] = node
    else:
        _consistent(known, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")

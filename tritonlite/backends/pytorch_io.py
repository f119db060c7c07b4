"""How Triton's PyTorch backend maps config tensors onto a TorchScript ``forward``.

Pure logic over names and types (no torch import), so it is tested without a model:

* Inputs follow one of three conventions, chosen once per model, as Triton chooses them:
  FORWARD_ARGUMENT (every config input is named like an argument of ``forward``),
  NAMED_INDEX (every name is ``<name>__<index>``: the index is the argument position), or
  STRICT_CONFIG_ORDERING (anything else: the config's order is the argument order). A
  ``forward`` taking one ``Dict[str, Tensor]`` gets every input by name instead.
* Outputs are NAMED_INDEX (``OUTPUT__1`` is element 1 of the returned tuple) or, when a name
  lacks the ``__<index>`` suffix, STRICT_CONFIG_ORDERING.
* Sequence control tensors must be named ``<name>__<index>`` (Triton's rule).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from tritonlite.contracts.errors import TritonliteError, internal, invalid_arg

log = logging.getLogger("tritonlite")

_DELIMITER = "__"

# Config data types the backend accepts, by torch dtype name (TYPE_STRING travels as List[str]).
TORCH_DTYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
    "TYPE_BF16": "bfloat16",
}
CONFIG_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


class Naming(Enum):
    NAMED_INDEX = "NAMED_INDEX"
    FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
    STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"


@dataclass(frozen=True, slots=True)
class Argument:
    """One parameter of ``forward`` (after ``self``): its name and TorchScript type kind."""

    name: str
    kind: str  # "Tensor", "List", "Dict", or another TorchScript kind name


def _named_index(name: str) -> int | None:
    """The index of ``<name>__<index>``, or None when the name does not follow it."""
    pos = name.find(_DELIMITER)
    if pos < 0:
        return None
    digits = name[pos + len(_DELIMITER) :]
    return int(digits) if digits.isdigit() else None


def naming_convention(
    names: Sequence[str], forward_args: Sequence[str] | None, kind: str, model: str
) -> Naming:
    """The convention ``names`` (config order) follow; ``forward_args`` None for outputs."""
    if forward_args is not None and all(n in forward_args for n in names):
        return Naming.FORWARD_ARGUMENT
    for name in names:
        if _named_index(name) is None:
            if _DELIMITER in name:
                log.warning(
                    "%s '%s' or a previous one is neither an argument of the forward "
                    "method of model '%s' nor follows the <name>__<index> naming "
                    "convention; using the order of the model configuration",
                    kind.capitalize(),
                    name,
                    model,
                )
            return Naming.STRICT_CONFIG_ORDERING
    return Naming.NAMED_INDEX


@dataclass(frozen=True, slots=True)
class InputLayout:
    """Where each input goes: ``positions[name]`` (argument index) or, with ``as_dict``, by name."""

    positions: dict[str, int]
    as_dict: bool
    count: int  # number of forward arguments


def input_layout(
    config_inputs: Sequence[str],
    controls: Sequence[str],
    states: Sequence[str],
    forward: Sequence[Argument],
    model: str,
) -> InputLayout:
    """Map config inputs, control tensors and state inputs onto ``forward``'s arguments.

    Raises TritonliteError with Triton's load-time messages when they cannot be mapped.
    """
    if not config_inputs:
        raise internal("model configuration must contain at least one input, none were specified.")
    args = list(forward)
    if len(args) == 1 and args[0].kind == "Dict":
        names = [*config_inputs, *controls, *states]
        return InputLayout({n: i for i, n in enumerate(names)}, True, 1)
    if sum(a.kind == "Dict" for a in args) > 1:
        raise internal(
            "Multiple inputs of kind DictType were detected. Only a single input of "
            "type Dict(str, Tensor) is supported."
        )
    for a in args:
        if a.kind not in ("Tensor", "List"):
            raise internal(
                f"An input of type '{a.kind}' was detected in the model. Only a single "
                "input of type Dict(str, Tensor) or input(s) of type Tensor are "
                "supported."
            )
    expected = len(config_inputs) + len(controls) + len(states)
    if len(args) != expected:
        raise invalid_arg(
            f"unable to load model '{model}', configuration expects {expected} "
            f"inputs, model provides {len(args)}"
        )
    arg_names = [a.name for a in args]
    positions: dict[str, int] = {}
    for name in controls:
        index = _named_index(name)
        if index is None:
            raise internal(f"input '{name}' does not follow <name>__<index> naming convention.")
        positions[name] = index
    data_inputs = [*config_inputs, *states]
    convention = naming_convention(data_inputs, arg_names, "input", model)
    for i, name in enumerate(data_inputs):
        if convention is Naming.FORWARD_ARGUMENT:
            positions[name] = arg_names.index(name)
        elif convention is Naming.NAMED_INDEX:
            positions[name] = _named_index(name)  # type: ignore[assignment]
        else:
            positions[name] = i
    taken = sorted(positions.values())
    if taken != list(range(len(args))):
        raise invalid_arg(
            f"unable to load model '{model}': its inputs {sorted(positions)} do not "
            f"map one-to-one onto the {len(args)} arguments of forward "
            f"({', '.join(arg_names)})"
        )
    return InputLayout(positions, False, len(args))


def output_positions(config_outputs: Sequence[str], model: str) -> dict[str, int]:
    """Output name -> index into what ``forward`` returns."""
    if not config_outputs:
        raise internal("model configuration must contain at least one output, none were specified.")
    convention = naming_convention(config_outputs, None, "output", model)
    if convention is Naming.NAMED_INDEX:
        return {n: _named_index(n) for n in config_outputs}  # type: ignore[misc]
    return {n: i for i, n in enumerate(config_outputs)}


def check_dtype(data_type: str, name: str, kind: str, model: str) -> None:
    if data_type != "TYPE_STRING" and data_type not in TORCH_DTYPES:
        raise internal(f"unsupported datatype {data_type} for {kind} '{name}' for model '{model}'")


def check_string_dims(dims: Sequence[int], batched: bool, name: str, kind: str, model: str) -> None:
    """Strings travel as List[str]: one dimension in all, the batch dimension included."""
    if len(dims) + (1 if batched else 0) > 1:
        raise internal(
            f"Triton only supports 1 dimensional List of String as {kind} for "
            f"'{name}' for model '{model}'"
        )


def missing_output(name: str, count: int) -> TritonliteError:
    return invalid_arg(
        f"The output {name} in the model configuration refers to an output index "
        f"which doesn't exist. This model has {count} outputs"
    )


def dtype_mismatch(name: str, expected: str, got: str) -> TritonliteError:
    return invalid_arg(
        f"configuration expects datatype {expected} for output '{name}', model provides {got}"
    )
